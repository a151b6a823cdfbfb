# Session 35, H100: promotion every two K slices (promote_every=2), with and without the second
# consumer's groups a slice out of step (promote_stagger): accuracy with fp32 out at K = 16384
# against _scaled_mm's, then speed at 8192^3 against _scaled_mm, interleaved.
A="bn=192,promote=1,scale_lead=2"
(cd benchmarks && timeout 420 python ab_fp8.py --fp32 4096,4096,16384 --shapes 8192,8192,8192 4096,4096,4096 \
  --also "$A,promote_every=2" "$A,promote_every=2,promote_stagger=1" "bn=192") > $OUT/ab_fp8_every_s35.log 2>&1
grep -a -v -i warn $OUT/ab_fp8_every_s35.log | tail -40
