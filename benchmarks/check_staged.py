"""The staged epilogue array under compute-sanitizer (memcheck, racecheck, synccheck): a user's
residual epilogue read at [row, col] (``hopper._stager``) on ragged shapes, bf16 and fp32 out,
several tiles a block; each result checked against float64.

    compute-sanitizer --tool racecheck --report-api-errors no python benchmarks/check_staged.py
    python benchmarks/check_staged.py NT TN TT     # the held cases with those operand layouts instead
"""
import sys

import torch

import numba_tc
from numba_tc import hopper

from features import _rel, scaled_residual

v = numba_tc.variant_from(hopper.RUNG7, "check_staged")        # (never split: staged where it may)
v192 = numba_tc.variant_from(hopper.RUNG7.replace(bn=192), "check_staged192")
# 128x256 with a bf16 C and 128x192 hold boxes 2.. in registers (``epi_held``), read over the
# tile's last slices; fewer K slices than that lead (520, 136) and more (2056)
CASES = ((1000, 1032, 520, torch.bfloat16, v), (777, 520, 136, torch.float32, v),
         (1000, 1032, 2056, torch.bfloat16, v), (777, 520, 136, torch.float32, v192),
         (600, 1000, 1040, torch.bfloat16, v192))
for layout in sys.argv[1:] or ["NN"]:                        # T: that operand column-major
    for m, n, k, odt, var in CASES if layout == "NN" else CASES[2::2]:
        a = torch.randn(k, m, device="cuda", dtype=torch.bfloat16).T if layout[0] == "T" else \
            torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T if layout[1] == "T" else \
            torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        res = torch.randn(m, n, device="cuda")
        out = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
        kw = dict(epilogue=scaled_residual, epilogue_args=(res, 0.5))
        plan = numba_tc.explain(a, b, var, out=out, **kw)
        numba_tc.gemm(a, b, var, out=out, **kw)
        err = _rel(out, a.double() @ b.double() + 0.5 * res.double())
        print(layout, m, n, k, odt, plan, f"rel_err {err:.2e}")
        assert "staged" in plan and err < 1e-2

# a held kernel on a side stream, captured in a CUDA graph and replayed after the residual changes
# in place: the replay reads the new values
m, n, k = 1000, 1032, 2056
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
res = torch.randn(m, n, device="cuda")
out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    numba_tc.gemm(a, b, v, out=out, epilogue=scaled_residual, epilogue_args=(res, 0.5))      # (planned, loaded)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        numba_tc.gemm(a, b, v, out=out, epilogue=scaled_residual, epilogue_args=(res, 0.5))
res.copy_(torch.randn(m, n, device="cuda"))
out.fill_(float("nan"))
graph.replay()
torch.cuda.synchronize()
err = _rel(out, a.double() @ b.double() + 0.5 * res.double())
print("graph replay on a side stream, residual changed in place:", f"rel_err {err:.2e}")
assert err < 1e-2
