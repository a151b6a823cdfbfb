"""A user's scaled residual epilogue (``features.py``'s ``acc + 0.5 * res[row, col]``, res float32)
under planning flags of ``numba_tc.hopper`` (``--settings``: "FLAG=value,..." each, e.g. the
staged epilogue array off, ``STAGED=False``, or its lead, ``STAGED_LEAD=16``), each checked against
float64 first (NaN-poisoned), then timed interleaved with the plain product (``auto``) on the same
inputs: the overhead the epilogue adds. ``--tiles`` (``ab_plan.py``'s "key=value,...[:splits]"): fixed
tiles of the top rung, each with the residual and as a plain product, against the same plain ``auto``.

    python benchmarks/ab_staged.py --settings STAGED=False STAGED=True [--shapes 4096x4096x4096 ...] [--layout NT]
    python benchmarks/ab_staged.py --settings STAGED=True --tiles "bn=128,max_stages=6,pingpong=1"
    python benchmarks/ab_staged.py --residual row     # its reads from L2: the cost of the epilogue's work alone
    python benchmarks/ab_staged.py --res-dtype bfloat16 --cublas   # a 16-bit residual; cuBLAS's own cost of a C
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import torch

import numba_tc
from numba_tc import bench

from ab_plan import flags, tile_candidates, value
from features import _rel, scaled_residual


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--settings", nargs="+", default=["STAGED=False", "STAGED=True"])
    p.add_argument("--shapes", nargs="+", default=["4096x4096x4096", "8192x8192x8192", "3000x5000x2000"])
    p.add_argument("--layout", default="NN", choices=["NN", "NT", "TN", "TT"], help="T: that operand column-major")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--tiles", nargs="+", default=[], help='fixed tiles: "key=value,...[:splits]"')
    p.add_argument("--residual", default="full", choices=["full", "row"],
                   help="row: one row broadcast down C (row stride 0), so that its reads hit L2, not HBM")
    p.add_argument("--res-dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--cublas", action="store_true",
                   help="also time torch.matmul and torch.addmm(0.5 * res16) (cuBLAS reading a 16-bit C) "
                        "and gemm(..., c=res16, beta=0.5), res16 the residual in the operands' dtype")
    args = p.parse_args()
    dt = getattr(torch, args.dtype)
    top = numba_tc.get_variant("hopper")
    fixed = tile_candidates(args.tiles)[1:]        # (without its "auto")
    cands = [(s, replace(top, name=f"abs_{i}"), {f: value(v) for f, v in (kv.split("=") for kv in s.split(","))})
             for i, s in enumerate(args.settings)] + fixed
    tiles = {name for name, *_ in fixed}
    for shape in args.shapes:
        m, n, k = (int(x) for x in shape.split("x"))
        g = torch.Generator(device="cuda").manual_seed(1)
        a = torch.randn(k, m, device="cuda", dtype=dt, generator=g).t() if args.layout[0] == "T" else \
            torch.randn(m, k, device="cuda", dtype=dt, generator=g)
        b = torch.randn(n, k, device="cuda", dtype=dt, generator=g).t() / k ** 0.5 if args.layout[1] == "T" else \
            torch.randn(k, n, device="cuda", dtype=dt, generator=g) / k ** 0.5
        rdt = getattr(torch, args.res_dtype)
        res = torch.randn(m, n, device="cuda", dtype=rdt, generator=g) if args.residual == "full" else \
            torch.randn(1, n, device="cuda", dtype=rdt, generator=g).expand(m, n)
        want = a.double() @ b.double() + 0.5 * res.double()
        plain = torch.empty(m, n, device="cuda", dtype=dt)
        fns, names = [lambda: numba_tc.gemm(a, b, out=plain)], [f"plain [{numba_tc.explain(a, b)}]"]
        for name, v, setting in cands:
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            with flags(setting):                    # read when the call is planned (its first)
                numba_tc.gemm(a, b, v, epilogue=scaled_residual, epilogue_args=(res, 0.5), out=out)
                plan = numba_tc.explain(a, b, v, epilogue=scaled_residual, epilogue_args=(res, 0.5))
            err = _rel(out, want)
            assert err < 1e-2, (shape, name, err)
            names.append(f"{name} [{plan}] rel_err {err:.2e}")
            fns.append(lambda v=v, out=out: numba_tc.gemm(a, b, v, epilogue=scaled_residual,
                                                          epilogue_args=(res, 0.5), out=out))
            if name in tiles:                       # the fixed tile's own plain product, checked too
                own = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
                numba_tc.gemm(a, b, v, out=own)
                err = _rel(own, want - 0.5 * res.double())
                assert err < 1e-2, (shape, name, "plain", err)
                names.append(f"{name} plain [{numba_tc.explain(a, b, v)}] rel_err {err:.2e}")
                fns.append(lambda v=v, own=own: numba_tc.gemm(a, b, v, out=own))
        if args.cublas:
            fns += _cublas(a, b, res.to(dt), names)
        ms = bench.time_interleaved(fns)
        for nm, t in zip(names, ms):
            print(f"{shape} {args.layout} {nm:<60} {2 * m * n * k / t / 1e9:6.0f} TFLOP/s  overhead {t / ms[0] - 1:+.1%}",
                  flush=True)
        if args.cublas:
            print(f"{shape} {args.layout} cuBLAS's own cost of a C: addmm(out=) / matmul - 1 = {ms[-3] / ms[-4] - 1:+.1%}, "
                  f"in place {ms[-2] / ms[-4] - 1:+.1%}")


def _cublas(a, b, res16, names):
    """torch.matmul, torch.addmm(0.5 * res16) (out= another tensor: torch copies res16 there
    first), C.addmm_ (in place: cuBLAS reads C as it writes it) and gemm(c=res16, beta=0.5), each
    checked: what cuBLAS pays for a 16-bit C beside ours (the last four entries of ``names``)."""
    m, n = res16.shape
    got, ours, c = torch.empty(m, n, device="cuda", dtype=a.dtype), torch.full_like(res16, float("nan")), res16.clone()
    numba_tc.gemm(a, b, c=res16, beta=0.5, out=ours)
    torch.addmm(res16, a, b, beta=0.5, out=got)
    c.addmm_(a, b, beta=0.5)
    want16 = a.double() @ b.double() + 0.5 * res16.double()
    for nm, x in (("torch.addmm", got), ("addmm_", c), ("gemm c=", ours)):
        assert _rel(x, want16) < 1e-2, (nm, _rel(x, want16))
    names += ["torch.matmul", "torch.addmm(res16, beta=0.5, out=)", "C.addmm_(beta=0.5) in place",
              f"gemm(c=res16, beta=0.5) rel_err {_rel(ours, want16):.2e}"]
    return [lambda: torch.matmul(a, b, out=got), lambda: torch.addmm(res16, a, b, beta=0.5, out=got),
            lambda: c.addmm_(a, b, beta=0.5), lambda: numba_tc.gemm(a, b, c=res16, beta=0.5, out=ours)]


if __name__ == "__main__":
    main()
