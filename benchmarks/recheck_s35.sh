# Session 35, H100, at 86800e9: a second, separate sample of the fp8 records (per-tensor and
# block-wise: the block kernels add every slice, as before), and bf16 hopper against cuBLAS (its
# code unchanged), written under $OUT only.
(cd benchmarks && timeout 240 python features.py --features fp8 fp8_block --json $OUT/features_recheck_s35.json) \
  > $OUT/features_recheck_s35.log 2>&1
grep -a -v -i warn $OUT/features_recheck_s35.log | tail -16
timeout 240 python -m numba_tc --sizes 4096 8192 > $OUT/bf16_recheck_s35.log 2>&1
grep -a -v -i warn $OUT/bf16_recheck_s35.log | tail -12
