"""The staged epilogue array under compute-sanitizer (memcheck, racecheck, synccheck): a user's
residual epilogue read at [row, col] (``hopper._stager``) on ragged shapes, bf16 and fp32 out,
several tiles a block; each result checked against float64.

    compute-sanitizer --tool racecheck --report-api-errors no python benchmarks/check_staged.py
"""
import torch

import numba_tc
from numba_tc import hopper

from features import _rel, scaled_residual

v = numba_tc.variant_from(hopper.RUNG7, "check_staged")        # (never split: staged where it may)
v192 = numba_tc.variant_from(hopper.RUNG7.replace(bn=192), "check_staged192")
# 128x256 with a bf16 C and 128x192 hold boxes 2.. in registers (``epi_held``), read over the
# tile's last slices; fewer K slices than that lead (520, 136) and more (2056)
for m, n, k, odt, var in ((1000, 1032, 520, torch.bfloat16, v), (777, 520, 136, torch.float32, v),
                          (1000, 1032, 2056, torch.bfloat16, v), (777, 520, 136, torch.float32, v192),
                          (600, 1000, 1040, torch.bfloat16, v192)):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(m, n, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
    kw = dict(epilogue=scaled_residual, epilogue_args=(res, 0.5))
    plan = numba_tc.explain(a, b, var, out=out, **kw)
    numba_tc.gemm(a, b, var, out=out, **kw)
    err = _rel(out, a.double() @ b.double() + 0.5 * res.double())
    print(m, n, k, odt, plan, f"rel_err {err:.2e}")
    assert "staged" in plan and err < 1e-2
