"""A planning flag of ``hopper`` A/B'd: ``auto`` as the flag's values plan it (each its own
variant, planned at its first call with the flag set), against cuBLAS, timed interleaved on the
same torch tensors through ``gemm()``; each result checked against float64 first (NaN-poisoned).

    python benchmarks/ab_plan.py --flag SLOW_ROWS_COPY --values None False a b \\
        [--dtype bfloat16] [--shapes MxNxK ...]
"""
import argparse
import ast
from dataclasses import replace

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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--flag", required=True, help="a module constant of numba_tc.hopper read when a call is planned")
    p.add_argument("--values", nargs="+", required=True, help="Python literals (else strings); the first is restored")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    args = p.parse_args()
    vals = [value(v) for v in args.values]
    top = numba_tc.get_variant("hopper")
    variants = [replace(top, name=f"ab_{args.flag}_{i}") for i in range(len(vals))]
    dt = getattr(torch, args.dtype)
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)
        ref = a.double() @ b.double()
        fns, names = [], []
        for val, v in zip(vals, variants):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            setattr(hopper, args.flag, val)            # read when the call is planned (its first)
            try:
                numba_tc.gemm(a, b, v, out=out)
                plan = numba_tc.explain(a, b, v)
            finally:
                setattr(hopper, args.flag, vals[0])
            err = float((out.double() - ref).norm() / ref.norm())
            assert err < 1e-2, (s, val, err)
            names.append(f"{args.flag}={val!r} [{plan}]")
            fns.append(lambda v=v, out=out: numba_tc.gemm(a, b, v, out=out))
        del ref
        cub = torch.empty(m, n, device="cuda", dtype=dt)
        fns.append(lambda: torch.matmul(a, b, out=cub))
        ms = bench.time_interleaved(fns, budget_s=1.0)
        for name, t in zip(names, ms):
            print(f"{s:>17}  x{ms[-1] / t:.3f} of cuBLAS ({2 * m * n * k / ms[-1] / 1e9:6.1f} TFLOP/s)  "
                  f"{2 * m * n * k / t / 1e9:6.1f}  {name}", flush=True)
        del a, b, fns
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
