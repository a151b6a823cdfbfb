# Session 35, H100, at the head: the fp8 GPU tests, and fp16 out (every slice added) against
# _scaled_mm's fp16 out at K = 16384, per-tensor.
timeout 400 python -m pytest -q tests/test_gpu_fp8.py 2>&1 | tail -3
timeout 120 python - <<'PY' 2>&1 | grep -v -i warn
import torch, numba_tc
import sys; sys.path.insert(0, "benchmarks")
from ab_fp8 import inputs
from features import _rel
a, b, sa, sb, want, _ = inputs(4096, 4096, 16384, False)
for name, out in (("numba_tc", numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out_dtype="float16")),
                  ("_scaled_mm", torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.float16))):
    print(f"4096x4096x16384 fp16 out {name:<12} rel_err {_rel(out, want):.4e}")
print(numba_tc.explain(a, b, scale_a=sa, scale_b=sb, out=torch.empty(4096, 4096, device="cuda", dtype=torch.float16)))
PY
