# Session 34, H100: three output boxes a consumer (a 128x192 or 128x144 tile's three 128-byte
# column blocks all staged before any TMA store must have read its buffer), per-tensor
(cd benchmarks && timeout 580 python ab_fp8.py --shapes 8192,8192,8192 6144,7168,8192 4096,4096,4096 \
  --also "bn=192,promote=1,epi_boxes=3" \
         "bn=144,max_stages=6,promote=1,promote_ahead=16,regs=24/240" \
         "bn=144,max_stages=6,promote=1,promote_ahead=16,regs=24/240,epi_boxes=3" \
         "bn=144,max_stages=6,promote=1,promote_ahead=16,regs=24/240,epi_boxes=4" \
         "bn=144,max_stages=6,epi_boxes=3") > $OUT/ab_fp8_boxes_s34.log 2>&1
grep -v -i warn $OUT/ab_fp8_boxes_s34.log | tail -40
