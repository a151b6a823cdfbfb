"""Tail-split launches for compute-sanitizer: the last round's tiles split 3 ways (``hopper.Policy.tail``
forced) on 128x256 and 128x192 tiles, whole tiles stored by TMA and from registers (a column-major
C), ragged edges, an epilogue; each checked against float64.

    compute-sanitizer --tool memcheck --report-api-errors no python benchmarks/check_tail.py
    compute-sanitizer --tool racecheck --racecheck-report hazard --report-api-errors no python benchmarks/check_tail.py
"""
from dataclasses import replace

import torch

import numba_tc
from numba_tc import hopper

hopper.set_policy(tail=3)
for tiles, (m, n, k) in (((128, 256), (2096, 2096, 208)), ((128, 192), (2064, 2064, 144))):
    hopper.cost.TAIL_TILES = (tiles,)
    v = replace(numba_tc.get_variant("hopper"), name=f"tail_check_{tiles[1]}")
    for col_major_c in (False, True):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        out = torch.full((n, m), float("nan"), device="cuda").t() if col_major_c else None
        plan = numba_tc.explain(a, b, v, out=out, out_dtype="float32")
        c = numba_tc.gemm(a, b, v, out=out, out_dtype="float32", bias=bias, activation="relu")
        ref = torch.relu(a.double() @ b.double() + bias.double())
        err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
        print(f"{m}x{n}x{k} C {'F' if col_major_c else 'C'}: {plan}: rel_err {err:.2e}", flush=True)
        assert err < 1e-2 and "tail fixup" in plan, (plan, err)
