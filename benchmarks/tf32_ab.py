"""float32 inputs as tf32, NN (B n-major, which wgmma cannot read): ``hopper`` as ``auto`` runs it
(B copied k-major into each stage by the producer's cp.async, or a transposing pass over B
before the kernel, as the cost model picks), always the pass (``hopper.set_policy(async_b=False)``), always
the producer's copy on its 256x128 tile, fixed tiles (``--tiles``: the producer's copy where their
configuration is ``staged``, else the pass), and ``--mma`` ``mma_tuned`` (mma.sync reads every
layout as it lies), against cuBLAS TF32,
timed interleaved on the same torch tensors; each checked against float64 first (NaN-poisoned
output).

    python benchmarks/tf32_ab.py [--shapes MxNxK ...] [--tiles "bn=128" "bm=256,bn=128" ..] [--mma]
"""
import argparse
from dataclasses import replace

import torch

import numba_tc
from numba_tc import hopper

from ab_plan import against_cublas

SHAPES = ["1x8192x8192", "8x4096x11008", "96x5120x5120", "256x65536x4096", "1000x32000x4096", "768x2304x24576",
          "256x256x131072", "1024x1024x1024", "2048x5120x5120", "4096x4096x4096", "8192x8192x8192"]


def candidates(tiles, mma):
    """{name: (variant, whether B is copied by the producer)}."""
    top = numba_tc.get_variant("hopper")
    out = {"hopper": (top, True), "hopper, pass over B first": (replace(top, name="tf32_copy"), False),
           "the producer's copy, 256x128": (numba_tc.variant_from(hopper.ASYNC_CONFIGS[0], "tf32_async", splits=1), True)}
    for spec in tiles:
        cfg = hopper.RUNG7.replace(**{k: int(v) for k, v in (kv.split("=") for kv in spec.split(","))})
        out[spec] = (numba_tc.variant_from(cfg, "tf32_" + spec, splits=1), True)
    if mma:
        out["mma_tuned"] = ("mma_tuned", True)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    p.add_argument("--tiles", nargs="*", default=[], help='fixed tiles, "key=value,..." of RUNG7.replace')
    p.add_argument("--mma", action="store_true", help="also mma_tuned")
    args = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    cands = candidates(args.tiles, args.mma)
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        ref = a.double() @ b.double()
        fns, names = [], []
        for name, (v, async_b) in cands.items():
            out = torch.full((m, n), float("nan"), device="cuda")
            with hopper.using(async_b=async_b):     # read when the call is planned (its first)
                numba_tc.gemm(a, b, v, out=out, allow_tf32=True)
                plan = numba_tc.explain(a, b, v, allow_tf32=True)
            err = float((out.double() - ref).norm() / ref.norm())
            assert err < 1e-3, (s, name, err)
            names.append(f"{name} [{plan}]")
            fns.append(lambda v=v, out=out: numba_tc.gemm(a, b, v, out=out, allow_tf32=True))
        del ref
        against_cublas(s, a, b, names, fns, ref="cuBLAS TF32")
        del a, b, fns
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
