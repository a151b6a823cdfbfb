# Session 33, H100: per-tensor fp8 on the cluster tile (slow B rows, K 16 bytes off 32) at the head
# (four slices a turn) and at 6ea3efe (two; its numba_tc in ../.prevpkg), each against _scaled_mm
cd benchmarks
for tree in head 6ea3efe; do
  P=$PYTHONPATH; [ $tree = 6ea3efe ] && P=/tmp/site:$PWD/../.prevpkg
  echo "== $tree"
  PYTHONPATH=$P:$PWD NUMBA_TC_CACHE_DIR=/tmp/cache_$tree python ab_fp8.py --shapes 8192,8192,8208 4096,4096,4112 --also "promote=1,bn=128,max_stages=6,cluster=2" 2>&1 | grep -v -i "warn\|fast_accum\|unpromoted"
done
