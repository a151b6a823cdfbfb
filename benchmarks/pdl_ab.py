"""Plans of several launches (a transposing copy then the product, a split-K product then its
fix-up, copies of rows TMA cannot read) with each launch after the first a programmatic
dependent of the one before (``driver.DEPENDENT_LAUNCHES``, the default) or a plain launch,
against cuBLAS, timed interleaved on the same torch tensors through ``gemm()``; each result
checked against float64 first (NaN-poisoned).

    python benchmarks/pdl_ab.py [--shapes DTYPE:MxNxK ...]
"""
import argparse

import torch

import numba_tc
from numba_tc import bench, driver

SHAPES = ["tf32:4096x4096x4096", "tf32:8192x8192x8192", "tf32:1000x32000x4096", "bfloat16:1x8192x8192",
          "bfloat16:8x4096x11008", "bfloat16:32x8192x8192", "bfloat16:96x5120x5120", "bfloat16:256x256x131072",
          "bfloat16:4095x4097x4099", "bfloat16:4096x4096x4096"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    args = p.parse_args()
    for spec in args.shapes:
        dtype, shape = spec.split(":")
        m, n, k = (int(x) for x in shape.split("x"))
        tf32 = dtype == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        dt = torch.float32 if tf32 else getattr(torch, dtype)
        a, b = torch.randn(m, k, device="cuda", dtype=dt), torch.randn(k, n, device="cuda", dtype=dt)
        ref = a.double() @ b.double()
        out = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
        numba_tc.gemm(a, b, out=out, allow_tf32=tf32)
        err = float((out.double() - ref).norm() / ref.norm())
        assert err < (1e-3 if tf32 else 1e-2), (spec, err)
        del ref

        def ours(dependent):
            def run():
                driver.DEPENDENT_LAUNCHES = dependent
                numba_tc.gemm(a, b, out=out, allow_tf32=tf32)
            return run
        cub = torch.empty_like(out)
        ms = bench.time_interleaved([ours(True), ours(False), lambda: torch.matmul(a, b, out=cub)], budget_s=1.5)
        driver.DEPENDENT_LAUNCHES = True
        print(f"{spec:>26}  dependent x{ms[2] / ms[0]:.3f}  plain x{ms[2] / ms[1]:.3f} of cuBLAS "
              f"({2 * m * n * k / ms[2] / 1e9:6.1f} TFLOP/s)  dependent/plain time {ms[0] / ms[1]:.4f}  "
              f"[{numba_tc.explain(a, b, allow_tf32=tf32)}]", flush=True)


if __name__ == "__main__":
    main()
