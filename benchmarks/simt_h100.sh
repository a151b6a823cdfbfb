#!/bin/bash
# Everything the SIMT ladder's H100 results come from, in one run (under $OUT): GPU tests, the
# ladder at 4096^3 (plot), warptile on other shapes, and compute-sanitizer on warptile where
# its tail split runs (ragged problems smaller than a wave: every tile split along K).
#   OUT=/tmp/out bash benchmarks/simt_h100.sh [bench|sanitize]
NAME=simt; source "$(dirname "$0")/h100_run.sh" "$@"
if [ "$what" != sanitize ]; then
echo "== GPU tests"; python -m pytest -q -n 8 -p xdist tests/test_gpu.py -W ignore 2>&1 | tail -3
B="python -m numba_tc bench --no-progress --json $J"
echo "== ladder"; $B --ladder simt --sizes 4096 --plot "$OUT/simt_ladder_h100.png"
echo "== warptile shapes"; $B --variants warptile --sizes 6144 8192 3000x5000x2000 2048 1024 5000x3000x7000 3840x4224x4096
fi
if [ "$what" != bench ]; then
echo "== sanitizers (exit 0 = no errors)"
export SAN_DTYPE=float32
{ for t in memcheck racecheck synccheck; do echo "$t warptile NN 300 200 1000"; echo "$t warptile TT 1000 333 777"; done
} | xargs -P 6 -L 1 bash -c 'sanitize $0 $1 $2 $3 $4 $5'
fi
echo "== done"
