"""The staged epilogue array under compute-sanitizer (memcheck, racecheck, synccheck): a user's
residual epilogue read at [row, col] (``hopper._stager``) on ragged shapes, bf16 and fp32 out,
several tiles a block; each result checked against float64.

    compute-sanitizer --tool racecheck --report-api-errors no python benchmarks/check_staged.py
    python benchmarks/check_staged.py NT TN TT     # the held cases with those operand layouts instead
    python benchmarks/check_staged.py --res float16 bfloat16 [--tiles 0 4]   # 16-bit residuals on each kind of tile
"""
import argparse

import torch

import numba_tc
from numba_tc import hopper

from features import _rel, residual_check, scaled_residual

p = argparse.ArgumentParser()
p.add_argument("layouts", nargs="*", default=["NN"], help="T: that operand column-major")
p.add_argument("--res", nargs="+", default=["float32"], help="the residual's dtypes")
p.add_argument("--tiles", nargs="+", type=int, help="16-bit residuals: these of hopper.RUNG7_CONFIGS only")
args = p.parse_args()
v = numba_tc.variant_from(hopper.RUNG7, "check_staged")        # (never split: staged where it may)
v192 = numba_tc.variant_from(hopper.RUNG7.replace(bn=192), "check_staged192")
# 128x256 with a bf16 C and 128x192 hold boxes 2.. in registers (``epi_held``), read over the
# tile's last slices; fewer K slices than that lead (520, 136) and more (2056)
CASES = ((1000, 1032, 520, torch.bfloat16, v), (777, 520, 136, torch.float32, v),
         (1000, 1032, 2056, torch.bfloat16, v), (777, 520, 136, torch.float32, v192),
         (600, 1000, 1040, torch.bfloat16, v192))
# a 16-bit residual: every box in a slot, spread (two consumers, no cluster) or copied at once
# (clusters, one consumer), or two slots refilled (three consumers: every box did not fit)
TILES16 = [numba_tc.variant_from(cfg, f"check_staged16_{i}") for i, cfg in enumerate(hopper.RUNG7_CONFIGS)
           if args.tiles is None or i in args.tiles]
CASES16 = tuple((m, n, k, odt, var) for var in TILES16 for m, n, k in ((1000, 1032, 2056), (777, 520, 136))
                for odt in (torch.bfloat16, torch.float32))


def check(layout, rdt):
    """Each case of ``rdt``'s residual with operands of ``layout``, checked against float64."""
    cases = CASES16 if rdt != torch.float32 else CASES if layout == "NN" else CASES[2::2]
    for m, n, k, odt, var in cases:
        a = torch.randn(k, m, device="cuda", dtype=torch.bfloat16).T if layout[0] == "T" else \
            torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T if layout[1] == "T" else \
            torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        res = torch.randn(m, n, device="cuda", dtype=rdt)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
        plan, err = residual_check(a, b, var, out, res)
        print(layout, rdt, m, n, k, odt, plan, f"rel_err {err:.2e}", flush=True)
        assert "staged" in plan and err < 1e-2


def replay(rdt):
    """A staged kernel (held or spread) on a side stream, captured in a CUDA graph and replayed
    after the residual changes in place: the replay reads the new values."""
    m, n, k = 1000, 1032, 2056
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(m, n, device="cuda", dtype=rdt)
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
    print(rdt, "graph replay on a side stream, residual changed in place:", f"rel_err {err:.2e}")
    assert err < 1e-2


for r in args.res:
    for lay in args.layouts:
        check(lay, getattr(torch, r))
    replay(getattr(torch, r))
