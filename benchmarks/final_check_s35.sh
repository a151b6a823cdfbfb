# Session 35, H100, at the head: the fp8 GPU tests, and fp16 out (every slice added) against
# _scaled_mm's fp16 out at K = 16384, per-tensor. (The committed log came from an inline copy of
# ab_fp8.py's error loop for hopper's pick alone, since folded into ab_fp8.py --err-dtype.)
timeout 400 python -m pytest -q tests/test_gpu_fp8.py 2>&1 | tail -3
(cd benchmarks && timeout 300 python ab_fp8.py --fp32 4096,4096,16384 --err-dtype float16 --shapes) 2>&1 \
  | grep -a "fp16 out"
