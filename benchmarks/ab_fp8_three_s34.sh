# Session 34, H100: promoted fp8 on three consumer warpgroups (192x128: one set of 64 + 64 a
# thread fits setmaxnreg's 152; a consumer's add overlaps two others' wgmma), per-tensor
(cd benchmarks && timeout 560 python ab_fp8.py --shapes 8192,8192,8192 4096,4096,4096 \
  --also "bm=192,bn=128,consumers=3,regs=40/152,epi_boxes=1,promote=1" \
         "bm=192,bn=128,consumers=3,regs=40/152,epi_boxes=1,promote=1,cluster=2" \
         "bm=192,bn=128,consumers=3,regs=40/152,epi_boxes=1" \
         "bn=192,promote=1,cluster=2") > $OUT/ab_fp8_three_s34.log 2>&1
grep -v -i warn $OUT/ab_fp8_three_s34.log | tail -24
