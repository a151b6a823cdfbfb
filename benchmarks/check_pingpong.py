"""Ping-pong consumers (``WgmmaConfig.pingpong``) under compute-sanitizer (memcheck, racecheck,
synccheck): a forced 128x128 ping-pong tile with a user's residual epilogue and split along K,
and a batched product of one tile column (``hopper.NARROW_N``), ragged, several tiles a block;
each result checked against float64.

    compute-sanitizer --tool racecheck --report-api-errors no python benchmarks/check_pingpong.py
"""
import torch

import numba_tc
from numba_tc import hopper

from features import _rel, residual_check

pp = hopper.RUNG7.replace(bn=128, max_stages=6, pingpong=True)
for splits in (1, 3):
    v = numba_tc.variant_from(pp, f"check_pingpong_s{splits}", splits=splits)
    m, n, k = 1000, 1032, 520
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(m, n, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    plan, err = residual_check(a, b, v, out, res)
    print(m, n, k, plan, f"rel_err {err:.2e}")
    assert "ping-pong" in plan and err < 1e-2
a = torch.randn(9, 200, 520, device="cuda", dtype=torch.bfloat16)
b = torch.randn(9, 520, 128, device="cuda", dtype=torch.bfloat16)     # (NARROW_N: N = 128 exactly)
out = torch.full((9, 200, 128), float("nan"), device="cuda", dtype=torch.bfloat16)
plan = numba_tc.explain(a, b, out=out)
numba_tc.gemm(a, b, out=out)
err = _rel(out, a.double() @ b.double())
print("batched", plan, f"rel_err {err:.2e}")
assert "ping-pong" in plan and err < 1e-2
