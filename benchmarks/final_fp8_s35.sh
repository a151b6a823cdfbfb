# Session 35, H100: hopper's fp8 128x192 now sums two slices per add into bf16 outputs
# (promote_every=2). A/B at 8192^3 and another shape, the per-tensor records, and the GPU tests of
# every fp8 tile. (Run with one more candidate, an experiment not kept: --also
# "bn=192,promote=1,scale_lead=2,promote_every=2,promote_early=1"; benchmarks/NOTES.md, session 35.)
(cd benchmarks && timeout 200 python ab_fp8.py --shapes 8192,8192,8192 6144,7168,8192 8192,8192,8192 \
  ) > $OUT/ab_fp8_early_s35.log 2>&1
grep -a -v -i warn $OUT/ab_fp8_early_s35.log | tail -24
(cd benchmarks && timeout 200 python features.py --features fp8 --json results/features_h100.json) > $OUT/features_fp8_s35.log 2>&1
grep -a -v -i warn $OUT/features_fp8_s35.log | tail -12
cp benchmarks/results/features_h100.json $OUT/features_h100.json
timeout 150 python -m pytest -q -x tests/test_gpu_fp8.py -k "every_fp8_tile and 192" 2>&1 | tail -4
