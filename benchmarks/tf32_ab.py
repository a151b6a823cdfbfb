"""float32 inputs as tf32: ``hopper`` (wgmma; a transposing copy first where an operand is not
k-major) against ``mma_tuned`` (mma.sync, which reads every layout as it lies) and cuBLAS TF32,
timed interleaved on the same torch tensors, NN: where ``auto`` should take which.

    python benchmarks/tf32_ab.py [MxNxK ...]
"""
import sys

import torch

import numba_tc
from numba_tc import bench

SHAPES = ["1x8192x8192", "8x4096x11008", "96x5120x5120", "256x65536x4096", "1000x32000x4096", "768x2304x24576",
          "256x256x131072", "1024x1024x1024", "2048x5120x5120", "4096x4096x4096"]


def main(shapes):
    torch.backends.cuda.matmul.allow_tf32 = True
    print(f"{'shape':>17}  {'hopper':>7} {'mma_tuned':>9}  (x cuBLAS TF32; TFLOP/s of cuBLAS)  hopper plan")
    for s in shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        outs = [torch.empty(m, n, device="cuda") for _ in range(3)]
        ref = a.double() @ b.double()
        for v, o in (("hopper", outs[0]), ("mma_tuned", outs[1])):
            numba_tc.gemm(a, b, v, out=o)
            err = float((o.double() - ref).norm() / ref.norm())
            assert err < 1e-3, (s, v, err)
        del ref
        ms = bench.time_interleaved([lambda: numba_tc.gemm(a, b, "hopper", out=outs[0]),
                                     lambda: numba_tc.gemm(a, b, "mma_tuned", out=outs[1]),
                                     lambda: torch.matmul(a, b, out=outs[2])], budget_s=1.0)
        print(f"{s:>17}  {ms[2] / ms[0]:7.3f} {ms[2] / ms[1]:9.3f}  ({2 * m * n * k / ms[2] / 1e9:6.1f})  "
              f"{numba_tc.explain(a, b, 'hopper')}", flush=True)
        del a, b, outs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:] or SHAPES)
