# Session 35, H100: the fp8 GPU tests (the grouped promotion among them; skipped with SAN_ONLY=1),
# and compute-sanitizer (memcheck, racecheck, synccheck; not torch's API errors) on the 128x192
# tile that sums two slices a promotion, forced, at a ragged shape.
[ -n "$SAN_ONLY" ] || timeout 400 python -m pytest -q tests/test_gpu_fp8.py 2>&1 | tail -5
cat > /tmp/one.py <<'PY'
import torch, numba_tc
from numba_tc import hopper
g = torch.Generator(device="cuda").manual_seed(1)
a = torch.randn(1000, 1280, device="cuda", generator=g).to(torch.float8_e4m3fn)
b = torch.randn(1500, 1280, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
s = torch.ones(1, device="cuda")
v = numba_tc.variant_from(hopper.FP8_CONFIGS[0], "fp8_san_192", splits=1)
out = numba_tc.gemm(a, b, v, scale_a=s, scale_b=s)
want = a.double() @ b.double()
print("rel_err", float((out.double() - want).norm() / want.norm()), numba_tc.explain(a, b, v, scale_a=s, scale_b=s))
PY
for tool in memcheck racecheck synccheck; do
    echo "== $tool"
    timeout 150 compute-sanitizer --tool $tool --report-api-errors no python /tmp/one.py 2>&1 | grep -v "Warning\|warnings.warn" | tail -3
done
