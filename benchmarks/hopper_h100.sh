#!/bin/bash
# Everything the Hopper ladder's H100 results come from, in one run (writes under $OUT):
#   GPU tests, the mma.sync ceiling, the wgmma ladder (bf16, fp16), the hopper shape sweep and
#   compute-sanitizer (memcheck, racecheck, synccheck) on a small ragged problem per rung.
#   OUT=/tmp/out bash benchmarks/hopper_h100.sh [bench|sanitize]
NAME=hopper; source "$(dirname "$0")/h100_run.sh" "$@"
if [ "$what" != sanitize ]; then
echo "== GPU tests"; python -m pytest -q -n 8 -p xdist tests/test_gpu_hopper.py -W ignore 2>&1 | tail -4
echo "== mma.sync ceiling"; python -m numba_tc.ceiling
B="python -m numba_tc bench --no-progress --json $J"
echo "== ladder"; $B --ladder wgmma --dtype bfloat16 --sizes 4096 8192 --plot "$OUT/wgmma_ladder_bf16_h100.png"
$B --variants mma_tuned --dtype bfloat16 --sizes 4096 8192
$B --variants hopper --dtype float16 --sizes 4096 8192
echo "== sweep"; $B --variants hopper --dtype bfloat16 --plot "$OUT/hopper_sweep_bf16_h100.png" --sizes \
  4096 8192 4096x4096x1024 8192x1024x8192 3000x5000x2000 1024 2048 6144 4000x4000x4000 \
  5000x3000x7000 8192x8192x1024 1024x8192x8192 16384x4096x4096 2056x4104x3000 12288x12288x2048 \
  3336x3336x3336 7000x1000x3000 1536x6144x1000
fi
if [ "$what" != bench ]; then
echo "== sanitizers (small ragged problems; exit 0 = no errors)"
{ for v in wgmma_tma wgmma_ws wgmma_cluster hopper; do for t in memcheck racecheck synccheck; do
    echo "$t $v NN 328 200 264"; done; done
  echo "memcheck pipelined NT 328 200 264"; echo "memcheck mma_tuned NT 328 200 264"
} | xargs -P 7 -L 1 bash -c 'sanitize $0 $1 $2 $3 $4 $5'
fi
echo "== done"
