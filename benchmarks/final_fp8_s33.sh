# Session 33, H100: the fp8 GPU tests, the fp8 records (per-tensor and block-wise) and memcheck on
# the block-wise check, at the committed head
timeout 240 python -m pytest -q -n 12 -p no:benchmark -p no:cacheprovider tests/test_gpu_fp8.py > $OUT/gpu_fp8_s33.log 2>&1; tail -4 $OUT/gpu_fp8_s33.log
cp benchmarks/results/features_h100.json /tmp/features_before.json
(cd benchmarks && timeout 300 python features.py --features fp8 fp8_block --json results/features_h100.json) > $OUT/features_fp8_s33.log 2>&1
grep -v -i warn $OUT/features_fp8_s33.log | tail -16
cp benchmarks/results/features_h100.json $OUT/features_h100.json
timeout 200 compute-sanitizer --tool memcheck --report-api-errors no python benchmarks/check_fp8_block.py > $OUT/memcheck_fp8_s33.log 2>&1; tail -3 $OUT/memcheck_fp8_s33.log
