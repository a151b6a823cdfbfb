# Session 35, H100: promotion every two K slices, the second consumer's groups a slice after the
# first's (promote_every=2), its knobs and other shapes; rel_err with bf16 out at K = 65536.
E="bn=192,promote=1,scale_lead=2,promote_every=2"
(cd benchmarks && timeout 400 python ab_fp8.py --fp32 4096,4096,16384 \
  --shapes 8192,8192,8192 6144,7168,8192 8192,8192,8192 4096,8192,16384 2048,2048,65536 \
  --also "$E" "$E,epi_boxes=1,max_stages=5" "$E,group_m=16" "bn=128,promote=1,max_stages=6,promote_every=2" \
  ) > $OUT/ab_fp8_every2_s35.log 2>&1
grep -a -v -i warn $OUT/ab_fp8_every2_s35.log | grep -a -v "128x256 \|hopper" | tail -60
