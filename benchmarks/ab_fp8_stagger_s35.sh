# Session 35, H100: the second consumer's promoted sums half a slice out of step with the first's
# (promote_stagger: 128 of K from the middle of a slice to the middle of the next), so that the two
# consumers' adds alternate; accuracy with fp32 out at K = 16384 against _scaled_mm's (each sum
# still spans 128 of K), then speed, interleaved with _scaled_mm, at the bar's shapes and others;
# small and ragged shapes check the prologue and the K left over.
A="bn=192,promote=1,scale_lead=2"
(cd benchmarks && timeout 400 python ab_fp8.py --fp32 4096,4096,16384 \
  --shapes 8192,8192,8192 6144,7168,8192 8192,8192,8192 1000,2000,640 256,384,128 4096,4096,4096 \
  --also "$A,promote_stagger=1" "$A,promote_stagger=1,epi_boxes=1,max_stages=5") > $OUT/ab_fp8_stagger_s35.log 2>&1
grep -a -v -i warn $OUT/ab_fp8_stagger_s35.log | grep -a -v "128x256 \|hopper" | tail -40
