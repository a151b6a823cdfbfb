# Session 33: the promoted mainloop's slices a turn (four) and the next slice's full barrier
# waited for while this one's wgmma runs (next), A/B against _scaled_mm (NUMBA_TC_DIAG hacks)
cd benchmarks
for d in none four next four_next; do
  echo "== DIAG $d"
  NUMBA_TC_DIAG=$d NUMBA_TC_CACHE_DIR=/tmp/cache_$d python ab_fp8.py --shapes 8192,8192,8192 4096,4096,4096 6144,7168,8192 2>&1 | grep -v -i "warn"
done > $OUT/ab_diag4.log 2>&1
cat $OUT/ab_diag4.log | grep -v "fast_accum\|unpromoted"
