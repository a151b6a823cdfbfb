# Session 35, H100: does the cost model's tile still fit once 128x192 sums two slices a promotion?
# hopper's pick against each promoted tile forced (one launch, no split), shapes where it picks
# 128x256 halves or is near the line.
E="bn=192,promote=1,scale_lead=2,promote_every=2"
(cd benchmarks && timeout 400 python ab_fp8.py --shapes 2048,8192,8192 4096,4096,4096 4096,8192,4096 \
  3072,3072,8192 2048,4096,8192 8192,7168,2048 4096,14336,4096 --also "$E") > $OUT/ab_fp8_picks_s35.log 2>&1
grep -a -v -i warn $OUT/ab_fp8_picks_s35.log | grep -v "unpromoted\|fast_accum" | tail -40
