# Session 34, H100: promoted fp8 on 128x144 tiles (cuBLAS's width; two sets of 72 sums fit 240
# registers: promote_ahead keeps a group in flight while the one before it is added), stored by
# TMA (a last box overlapping the one before), against the single-set tiles, per-tensor
(cd benchmarks && timeout 580 python ab_fp8.py --shapes 8192,8192,8192 4096,4096,4096 1000,2000,640 6144,7168,8192 \
  --also "bn=144,max_stages=6,promote=1" \
         "bn=144,max_stages=6,promote=1,promote_ahead=1,regs=24/240" \
         "bn=144,max_stages=6,promote=1,promote_ahead=1,regs=24/240,cluster=2") > $OUT/ab_fp8_144_s34.log 2>&1
grep -v -i warn $OUT/ab_fp8_144_s34.log | tail -40
