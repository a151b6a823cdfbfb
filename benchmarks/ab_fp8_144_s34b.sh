# Session 34, H100: the 128x144 promoted fp8 tile's knobs: unpromoted (its ceiling), two sets in
# turns of 8 slices (5 stages), one output box (6 stages), turns of 16 slices; per-tensor
(cd benchmarks && timeout 580 python ab_fp8.py --shapes 8192,8192,8192 6144,7168,8192 \
  --also "bn=144,max_stages=6" \
         "bn=144,max_stages=6,promote=1,promote_ahead=8,regs=24/240" \
         "bn=144,max_stages=6,promote=1,promote_ahead=8,regs=24/240,epi_boxes=1" \
         "bn=144,max_stages=6,promote=1,promote_ahead=16,regs=24/240") > $OUT/ab_fp8_144b_s34.log 2>&1
grep -v -i warn $OUT/ab_fp8_144b_s34.log | tail -40
