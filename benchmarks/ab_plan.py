"""Planning choices of ``hopper`` A/B'd on 16-bit problems (``--dtype tf32``: float32 inputs as tf32): ``auto`` as a planning flag's values
plan it (``--flag``: a switch of ``hopper.Policy``, by its field or its old upper-case name, or a
tuning constant of ``hopper.planner`` or ``hopper.cost``, read when a call is planned; each
value its own variant, planned at its first call with the flag set) and fixed tiles of the top
rung (``--tiles``: "key=value,..." of ``hopper.RUNG7.replace``, then ":splits", then "@FLAG=value"
planning flags), against cuBLAS,
timed interleaved on the same torch tensors through ``gemm()``; each result checked against
float64 first (NaN-poisoned).

    python benchmarks/ab_plan.py --flag SLOW_ROWS_COPY --values None False a b [--shapes MxNxK ...]
    python benchmarks/ab_plan.py --tiles "bm=64,bn=128,consumers=1,max_stages=8:2" "bn=192:3" --shapes ...
    python benchmarks/ab_plan.py --tiles "bm=192,bn=192,consumers=3,regs=40/152,cluster=2@SLOW_ROWS_COPY=a"
    python benchmarks/ab_plan.py --dtype tf32 --flag REGS_A --values True False --shapes 4096x4096x4096
    python benchmarks/ab_plan.py --layout NT --flag SWAP --values None False --shapes 8x4096x11008
"""
import argparse
import ast
from contextlib import contextmanager
from dataclasses import fields, replace

import torch

import numba_tc
from numba_tc import bench, hopper

SHAPES = ["3000x3000x3000", "2056x4104x3000", "5000x3000x7000", "4104x4104x4104", "1000x1000x1000",
          "3000x5000x2000", "4096x4096x4096"]


def value(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


POLICY = {f.name for f in fields(hopper.Policy)}
HOMES = (hopper.planner, hopper.cost)          # the tuning constants' modules


@contextmanager
def flags(setting):
    """``hopper``'s planning flags set to ``setting`` ({name: value}) inside, restored after: a
    ``Policy`` switch (its field, or its old upper-case name, e.g. SLOW_ROWS_COPY), or a constant
    where it lives."""
    switches = {f.lower(): v for f, v in setting.items() if f.lower() in POLICY}
    homes = {f: next(h for h in HOMES if hasattr(h, f)) for f in setting if f.lower() not in POLICY}
    saved = {f: getattr(h, f) for f, h in homes.items()}
    for f, h in homes.items():
        setattr(h, f, setting[f])
    try:
        with hopper.using(**switches):
            yield
    finally:
        for f, val in saved.items():
            setattr(homes[f], f, val)


def flag_candidates(flag, values):
    """[(name, variant, {flag: value})]: ``auto``'s planner under each value of ``flag``."""
    top = numba_tc.get_variant("hopper")
    return [(f"{flag}={val!r}", replace(top, name=f"ab_{flag}_{i}"), {flag: val}) for i, val in enumerate(values)]


def tile_candidates(specs):
    """[(name, variant, {flag: value})]: ``auto``, then each fixed tile as the top rung runs it,
    planned under the flags after its "@" (a pair as "40/152")."""
    out = [("auto", "auto", {})]
    for spec in specs:
        tile, *flags = spec.split("@")
        fields, _, splits = tile.partition(":")
        kw = {k: tuple(int(x) for x in v.split("/")) if "/" in v else int(v)
              for k, v in (kv.split("=") for kv in fields.split(",") if kv)}
        name = "abt_" + "".join(ch if ch.isalnum() else "_" for ch in spec)
        out.append((spec, numba_tc.variant_from(hopper.RUNG7.replace(**kw), name, splits=int(splits or 1)),
                    {f: value(v) for f, v in (x.split("=") for x in flags)}))
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flag", help="a hopper.Policy switch or a tuning constant of hopper.planner or hopper.cost")
    p.add_argument("--values", nargs="+", default=[], help="Python literals (else strings)")
    p.add_argument("--tiles", nargs="+", default=[], help='fixed tiles: "key=value,...[:splits]"')
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    p.add_argument("--layout", default="NN", choices=["NN", "NT"], help="NT: B column-major (x @ w.t())")
    args = p.parse_args()
    vals = [value(v) for v in args.values]
    cands = (flag_candidates(args.flag, vals) if args.flag else []) + (tile_candidates(args.tiles) if args.tiles else [])
    tf32 = args.dtype == "tf32"                  # float32 inputs as tf32, against cuBLAS TF32
    dt = torch.float32 if tf32 else getattr(torch, args.dtype)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    kw, tol = ({"allow_tf32": True}, 1e-3) if tf32 else ({}, 1e-2)
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(n, k, device="cuda", dtype=dt).t() if args.layout == "NT" else torch.randn(k, n, device="cuda", dtype=dt)
        ref = a.double() @ b.double()
        fns, names = [], []
        for name, v, setting in cands:
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            with flags(setting):                    # read when the call is planned (its first)
                numba_tc.gemm(a, b, v, out=out, **kw)
                plan = numba_tc.explain(a, b, v, **kw)
            err = float((out.double() - ref).norm() / ref.norm())
            assert err < tol, (s, name, err)
            names.append(f"{name} [{plan}]")
            fns.append(lambda v=v, out=out: numba_tc.gemm(a, b, v, out=out, **kw))
        del ref
        against_cublas(s, a, b, names, fns, budget_s=1.0)
        del a, b, fns
        torch.cuda.empty_cache()


def against_cublas(shape, a, b, names, fns, budget_s=1.5, ref="cuBLAS"):
    """Time ``fns`` (each a product of ``a`` and ``b``) interleaved with ``torch.matmul`` on the
    same inputs and print each one's ratio and TFLOP/s beside cuBLAS's."""
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    cub = torch.empty(m, n, device="cuda", dtype=a.dtype)
    ms = bench.time_interleaved(list(fns) + [lambda: torch.matmul(a, b, out=cub)], budget_s=budget_s)
    for name, t in zip(names, ms):
        print(f"{shape:>17}  x{ms[-1] / t:.3f} of {ref} ({2 * m * n * k / ms[-1] / 1e9:6.1f} TFLOP/s)  "
              f"{2 * m * n * k / t / 1e9:6.1f}  {name}", flush=True)


if __name__ == "__main__":
    main()
