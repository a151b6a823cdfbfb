"""Row-stride alignment vs the hopper kernel's operand loaders, bf16 4096^3 (rows padded to
``ld`` elements), cuBLAS in the same run on the same inputs:
    python benchmarks/probe_hopper.py
"TMA" forces TMA for both operands; "auto" lets ``hopper.loaders`` copy rows that do not start
on a 32-byte sector with cp.async instead."""
import torch

import numba_tc
from numba_tc import bench, hopper


def strided(rows, cols, ld):
    return torch.randn(rows, ld, device="cuda", dtype=torch.bfloat16)[:, :cols]


def main(S=4096):
    auto = hopper.loaders
    print(f"{'lda':>5} {'ldb':>5} {'mod 32 (bytes)':>14}  {'TMA':>6} {'auto':>6} {'cuBLAS':>6}  TFLOP/s")
    for lda, ldb in [(4096, 4096), (4104, 4096), (4096, 4104), (4104, 4104), (4112, 4112), (4128, 4128)]:
        a, b = strided(S, S, lda), strided(S, S, ldb)
        c = torch.empty(S, S, device="cuda", dtype=torch.bfloat16)
        tf = lambda ms: 2.0 * S ** 3 / ms / 1e9
        res = []
        for force in (True, False):
            hopper.loaders = (lambda cfg, a, b: (False, False)) if force else auto
            res.append(tf(bench.time_gpu(lambda: numba_tc.gemm(a, b, variant="hopper", out=c))))
        hopper.loaders = auto
        cb = tf(bench.time_gpu(lambda: torch.matmul(a, b, out=c)))
        print(f"{lda:5d} {ldb:5d} {f'{lda * 2 % 32}, {ldb * 2 % 32}':>14}  {res[0]:6.0f} {res[1]:6.0f} {cb:6.0f}", flush=True)


if __name__ == "__main__":
    main()
