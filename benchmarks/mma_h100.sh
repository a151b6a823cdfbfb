#!/bin/bash
# Everything the tensor-core (mma.sync) ladder's H100 results come from, in one run (under $OUT):
#   GPU tests, the mma.sync ceiling, the ladder in bf16, fp16 and tf32 (plots), the fragment
#   prefetch A/B, and compute-sanitizer on every rung: a small ragged problem (all edge blocks)
#   and, for mma_tuned, one with interior blocks and K > 5 slices (its branch-free loop runs).
#   OUT=/tmp/out bash benchmarks/mma_h100.sh [bench|sanitize]
NAME=mma; source "$(dirname "$0")/h100_run.sh" "$@"
if [ "$what" != sanitize ]; then
echo "== GPU tests"; python -m pytest -q -n 8 -p xdist tests/test_gpu_tensorcore.py -W ignore 2>&1 | tail -3
echo "== mma.sync ceiling"; python -m numba_tc.ceiling
B="python -m numba_tc bench --no-progress --json $J"
for d in bfloat16 float16 tf32; do
  n=${d/bfloat16/bf16}; n=${n/float16/fp16}
  echo "== ladder $d"; $B --ladder mma --dtype $d --sizes 4096 8192 --plot "$OUT/mma_ladder_${n}_h100.png"
done
echo "== fragment prefetch A/B"; python benchmarks/ab_mma.py 4096 8192 6000x5000x3000
fi
if [ "$what" != bench ]; then
echo "== sanitizers (exit 0 = no errors)"
{ for v in mma_naive mma_smem mma_swizzle pipelined mma_tuned; do for t in memcheck racecheck; do
    echo "$t $v NT 333 200 264"; done; done
  for t in memcheck racecheck synccheck; do echo "$t mma_tuned NN 600 300 700"; echo "$t mma_tuned TT 520 260 1000"; done
} | xargs -P 8 -L 1 bash -c 'sanitize $0 $1 $2 $3 $4 $5'
fi
echo "== done"
