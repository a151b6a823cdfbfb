# Session 34, H100: pipelined promotion (a group in flight while the one before is added, turns
# of 16 slices) on 128x192 in two n96 groups, against the single set; per-tensor
(cd benchmarks && timeout 170 python ab_fp8.py --shapes 8192,8192,8192 6144,7168,8192 \
  --also "bn=192,promote=1,epi_boxes=3" \
         "bn=192,promote=1,promote_parts=2,promote_ahead=16,epi_boxes=3") > $OUT/ab_fp8_ahead16_s34.log 2>&1
grep -v -i warn $OUT/ab_fp8_ahead16_s34.log | tail -40
