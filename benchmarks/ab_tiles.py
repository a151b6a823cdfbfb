"""Fixed tiles of the top rung A/B'd on bf16 problems, each as the top rung runs it (any operand,
``splits`` K splits), against cuBLAS, timed interleaved on the same torch tensors through
``gemm()``; each result checked against float64 first (NaN-poisoned).

    python benchmarks/ab_tiles.py --shapes MxNxK ... --tiles "bm=64,bn=128,consumers=1,max_stages=8:2" "bn=192:3"

A tile is "key=value,..." of ``hopper.RUNG7.replace``, then ":splits" (default 1).
"""
import argparse

import torch

import numba_tc
from numba_tc import bench, hopper


def tile(spec):
    fields, _, splits = spec.partition(":")
    cfg = hopper.RUNG7.replace(**{k: int(v) for k, v in (kv.split("=") for kv in fields.split(",") if kv)})
    return numba_tc.variant_from(cfg, "abt_" + spec.replace(",", "_").replace("=", "").replace(":", "_s"),
                                 splits=int(splits or 1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", required=True)
    p.add_argument("--tiles", nargs="+", required=True)
    p.add_argument("--dtype", default="bfloat16")
    args = p.parse_args()
    dt = getattr(torch, args.dtype)
    cands = [("auto", "auto")] + [(t, tile(t)) for t in args.tiles]
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)
        ref = a.double() @ b.double()
        fns, names = [], []
        for name, v in cands:
            out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            numba_tc.gemm(a, b, v, out=out)
            err = float((out.double() - ref).norm() / ref.norm())
            assert err < 1e-2, (s, name, err)
            names.append(f"{name} [{numba_tc.explain(a, b, v)}]")
            fns.append(lambda v=v, out=out: numba_tc.gemm(a, b, v, out=out))
        del ref
        cub = torch.empty(m, n, device="cuda", dtype=dt)
        fns.append(lambda: torch.matmul(a, b, out=cub))
        ms = bench.time_interleaved(fns, budget_s=1.0)
        for name, t in zip(names, ms):
            print(f"{s:>17}  x{ms[-1] / t:.3f} of cuBLAS ({2 * m * n * k / ms[-1] / 1e9:6.1f} TFLOP/s)  "
                  f"{2 * m * n * k / t / 1e9:6.1f}  {name}", flush=True)


if __name__ == "__main__":
    main()
