#!/usr/bin/env bash
# Session 13 on an H100: the GPU tests of batched products and epilogues (and the paths they
# touch: the Hopper kernel, split-K), then the features benchmark (bias+GELU, the user epilogue,
# batched against torch.bmm). Under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/batched}; mkdir -p "$OUT"
export NUMBA_TC_CACHE_DIR=${NUMBA_TC_CACHE_DIR:-/tmp/ntc_cache} PYTHONUNBUFFERED=1
timeout ${TEST_S:-240} python3 -m pytest -q -x -n 14 -p no:cacheprovider tests/test_gpu_batched.py tests/test_gpu_epilogue.py \
    tests/test_gpu_splitk.py tests/test_gpu_hopper.py 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
timeout ${BENCH_S:-240} python3 benchmarks/features.py --json "$OUT/features.json" ${FEATURES:-} 2>&1 | tee "$OUT/features.log"
