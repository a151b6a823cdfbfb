# Session 34, H100: consumer skew for the promoted fp8 mainloop (WgmmaConfig.skew), per-tensor
(cd benchmarks && timeout 560 python ab_fp8.py --shapes 8192,8192,8192 4096,4096,4096 \
  --also "bn=192,promote=1,skew=1" "bn=192,promote=1,skew=2" "promote=1,skew=1") > $OUT/ab_fp8_skew_s34.log 2>&1
grep -v -i warn $OUT/ab_fp8_skew_s34.log | tail -24
