# Session 33, H100: block-wise fp8 at the head (its kernels' SASS as at 6ea3efe): the records, and
# 8192^3 against _scaled_mm's block-wise and per-tensor paths in one run
(cd benchmarks && timeout 240 python features.py --features fp8_block --json results/features_h100.json) > $OUT/features_fp8_block_s33.log 2>&1
grep -v -i warn $OUT/features_fp8_block_s33.log | tail -6
cp benchmarks/results/features_h100.json $OUT/features_h100.json
(cd benchmarks && timeout 200 python ab_fp8.py --block --shapes 8192,8192,8192) > $OUT/ab_fp8_block_s33.log 2>&1
grep -v -i warn $OUT/ab_fp8_block_s33.log | tail -6
