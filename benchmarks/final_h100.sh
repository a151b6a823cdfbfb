#!/usr/bin/env bash
# Session 12's closing check on an H100: the fresh-process cost of the torch operator's import,
# the GPU tests of the Hopper ladder (parts as factories, split-K, repack, races, epilogues), the
# GPU mutation tier, and the bf16 sweep again (a refactor must not move it). Under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/final}; mkdir -p "$OUT"
export NUMBA_TC_CACHE_DIR=${NUMBA_TC_CACHE_DIR:-/tmp/ntc_cache} PYTHONUNBUFFERED=1
python3 -c "
import time, torch; t = time.perf_counter(); import numba_tc; t1 = time.perf_counter()
import numba_tc.torch; t2 = time.perf_counter()
print(f'import numba_tc {t1 - t:.2f} s, then import numba_tc.torch {t2 - t1:.2f} s')" | tee "$OUT/import_torch_op.log"
timeout 260 python3 -m pytest -q -n 14 -p no:cacheprovider tests/test_gpu_hopper.py tests/test_gpu_splitk.py \
    tests/test_gpu_races.py tests/test_gpu_epilogue.py tests/test_gpu_torch.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -5
timeout 150 python3 benchmarks/mutation.py --tier gpu --jobs 11 --out "$OUT/mutation_gpu.json" > "$OUT/mutation_gpu.log" 2>&1
grep -h "CAUGHT\|MISSED" "$OUT/mutation_gpu.log"
timeout 150 python3 benchmarks/sweep.py --dtypes bfloat16 --budget 0.4 --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log" | tail -3
