"""Which Hopper schedule for a fused epilogue: cooperative (both consumers on one 128x256 tile,
``hopper``) against ping-pong (each consumer on its own tile, one's epilogue overlapping the
other's mainloop), plain and with an epilogue, each checked against float64 first, then timed
interleaved with cuBLAS on the same inputs (torch tensors through the public ``gemm``).

    python benchmarks/tune_epilogue.py --json benchmarks/results/tune_epilogue_h100.json

Prints a table; ``--json`` writes one record per (shape, epilogue, schedule).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import torch
from numba import cuda

import numba_tc
from numba_tc import bench, hopper

SCHEDULES = {
    "hopper": "hopper",
    "pp128x128": numba_tc.variant_from(hopper.RUNG7.replace(bn=128, max_stages=6, pingpong=True), "pp128x128"),
    "pp64x256": numba_tc.variant_from(hopper.RUNG7.replace(bm=64, max_stages=6, pingpong=True), "pp64x256"),
}
SHAPES = [(4096, 11008, 4096), (4096, 4096, 4096), (8192, 8192, 8192), (2048, 5120, 3000), (1024, 1024, 1024),
          (3000, 5000, 2000)]
# (TMA-aligned rows in every layout) ragged, a single tile, fewer K slices than stages, an odd tile count per block: the ring's turns
CHECK_ONLY = [(136, 264, 72), (104, 64, 40), (1000, 1000, 136), (4088, 4104, 4104), (64, 128, 4096)]


@cuda.jit(device=True)
def scaled_residual(acc, row, col, res, scale):
    return acc + scale * res[row, col]


def _rel(x, ref) -> float:
    return float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))


def _case(m, n, k, layout):
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=g) / k ** 0.5
    if layout[0] == "T":
        a = a.t().contiguous().t()
    if layout[1] == "T":
        b = b.t().contiguous().t()
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    res = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g)
    return a, b, bias, res


EPILOGUES = {
    "plain": (lambda a, b, bias, res: {}, lambda ab, bias, res: ab),
    "bias_gelu": (lambda a, b, bias, res: dict(bias=bias, activation="gelu_tanh"),
                  lambda ab, bias, res: torch.nn.functional.gelu(ab + bias.double(), approximate="tanh")),
    "residual": (lambda a, b, bias, res: dict(epilogue=scaled_residual, epilogue_args=(res, 0.5)),
                 lambda ab, bias, res: ab + 0.5 * res.double()),
}


def check(m, n, k, variant, epi, layout="NN"):
    a, b, bias, res = _case(m, n, k, layout)
    kw, ref = EPILOGUES[epi]
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    numba_tc.gemm(a, b, variant, out=out, **kw(a, b, bias, res))
    err = _rel(out, ref(a.double() @ b.double(), bias, res))
    ok = bool(torch.isfinite(out).all()) and err < 1e-2
    return ok, err


def time_one(m, n, k, epi):
    a, b, bias, res = _case(m, n, k, "NN")
    kw = EPILOGUES[epi][0](a, b, bias, res)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    fns = [lambda v=v: numba_tc.gemm(a, b, v, out=out, **kw) for v in SCHEDULES.values()]
    if epi == "bias_gelu":
        ref = lambda: torch._addmm_activation(bias, a, b, use_gelu=True)     # noqa: E731
    elif epi == "residual":
        ref = lambda: torch.add(a @ b, res, alpha=0.5)                       # noqa: E731  (unfused)
    else:
        ref = lambda: torch.matmul(a, b)                                     # noqa: E731
    ms = bench.time_interleaved(fns + [ref])
    return ms[:-1], ms[-1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json")
    p.add_argument("--shapes", nargs="*")
    args = p.parse_args(argv)
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes] if args.shapes else SHAPES
    commit = subprocess.run(["git", "rev-parse", "--short=7", "HEAD"], capture_output=True, text=True).stdout.strip()
    bad = 0
    for name, v in SCHEDULES.items():          # correctness first: every layout, the ring's corner cases
        for (m, n, k) in CHECK_ONLY:
            for epi in EPILOGUES:
                layouts = {"plain": ("NN", "TN", "NT", "TT"), "residual": ("NN", "TT")}.get(epi, ("NN",))
                for layout in (layouts if name != "hopper" else ("NN",)):
                    ok, err = check(m, n, k, v, epi, layout)
                    bad += not ok
                    if not ok:
                        print(f"WRONG {name} {m}x{n}x{k} {layout} {epi}: rel err {err:.2e}", flush=True)
        print(f"checked {name}", flush=True)
    records = []
    for (m, n, k) in shapes:
        for epi in EPILOGUES:
            ours, ref = time_one(m, n, k, epi)
            tf = [2.0 * m * n * k / x / 1e9 for x in ours]
            print(f"{m}x{n}x{k} {epi:10s} " + " ".join(f"{s}={t:6.1f}" for s, t in zip(SCHEDULES, tf))
                  + f"  ref={2.0 * m * n * k / ref / 1e9:6.1f} TFLOP/s", flush=True)
            for s, x in zip(SCHEDULES, ours):
                records.append(dict(m=m, n=n, k=k, epilogue=epi, schedule=s, ms=x, ref_ms=ref, ratio=ref / x,
                                    device=torch.cuda.get_device_name(), commit=commit,
                                    command="python benchmarks/tune_epilogue.py " + " ".join(argv or sys.argv[1:])))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    print("wrong results:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
