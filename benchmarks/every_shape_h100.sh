#!/usr/bin/env bash
# Issue 19 on an H100, one command: the split-K / repack GPU tests, the GPU mutants of those paths
# (and the Hopper partial-row one), then the every-shape sweep (bf16 and fp16, auto vs cuBLAS).
# Writes splitk_tests.log, mutation_gpu.json/.log, sweep.json/.log and sweep_auto.png under $OUT.
#   OUT=/tmp/out bash benchmarks/every_shape_h100.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/every_shape}
mkdir -p "$OUT"
export NUMBA_TC_CACHE_DIR=${NUMBA_TC_CACHE_DIR:-/tmp/ntc_cache} PYTHONUNBUFFERED=1
nvidia-smi -L
timeout 330 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_gpu_splitk.py 2>&1 | tee "$OUT/splitk_tests.log" | tail -12
pids=()
i=0
for name in "last partial row" "last K range" "partial-sum plane" "repack: the copy"; do
    python3 benchmarks/mutation.py --tier gpu --only "$name" --out "$OUT/mutant_$i.json" > "$OUT/mutant_$i.log" 2>&1 &
    pids+=($!); i=$((i + 1))
done
wait "${pids[@]}"
python3 - "$OUT" <<'PY'
import glob, json, sys
sys.path.insert(0, "benchmarks")
import mutation
out = sys.argv[1]
rows = [r for f in sorted(glob.glob(f"{out}/mutant_*.json")) for r in json.load(open(f))]
mutation.merge(f"{out}/mutation_gpu.json", rows)
for r in rows:
    print(("CAUGHT" if r["caught"] else "MISSED"), r["mutant"], r["test"], r["note"])
PY
cat "$OUT"/mutant_*.log > "$OUT/mutation_gpu.log"; rm -f "$OUT"/mutant_*
timeout 400 python3 benchmarks/sweep.py --json "$OUT/sweep.json" --plot "$OUT/sweep_auto.png" 2>&1 | tee "$OUT/sweep.log"
