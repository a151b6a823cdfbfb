"""Row strides vs the hopper kernel, bf16 4096^3 with rows padded to ``ld`` elements, cuBLAS in
the same run on the same inputs (TFLOP/s):
    python benchmarks/probe_hopper.py
"128x256" is rung 7's main configuration, "+multicast" the same with 2-CTA clusters sharing B,
"hopper" what the variant picks (multicast when B's rows are not 32-byte aligned)."""
import torch

import numba_tc
from numba_tc import bench, hopper
from numba_tc.config import Variant


def strided(rows, cols, ld):
    return torch.randn(rows, ld, device="cuda", dtype=torch.bfloat16)[:, :cols]


def main(S=4096):
    names = {"128x256": hopper.RUNG7_CONFIGS[0], "+multicast": hopper.RUNG7_CONFIGS[2]}
    for name, cfg in names.items():
        numba_tc.register(Variant(f"probe {name}", "wgmma", 90, ("bfloat16",), (9, 0), name,
                                  hopper._launch(cfg), cfg, ("bfloat16",)))
    cols = [f"probe {n}" for n in names] + ["hopper"]
    print(f"{'lda':>5} {'ldb':>5} {'bytes mod 32':>12}  {'128x256':>8} {'+multicast':>10} {'hopper':>7} {'cuBLAS':>7}")
    for lda, ldb in [(S, S), (S + 8, S), (S, S + 8), (S + 8, S + 8), (S + 16, S + 16)]:
        a, b = strided(S, S, lda), strided(S, S, ldb)
        c = torch.empty(S, S, device="cuda", dtype=torch.bfloat16)
        tf = lambda ms: 2.0 * S ** 3 / ms / 1e9
        res = [tf(bench.time_gpu(lambda: numba_tc.gemm(a, b, variant=v, out=c))) for v in cols]
        cb = tf(bench.time_gpu(lambda: torch.matmul(a, b, out=c)))
        print(f"{lda:5d} {ldb:5d} {f'{lda * 2 % 32}, {ldb * 2 % 32}':>12}  {res[0]:8.0f} {res[1]:10.0f} "
              f"{res[2]:7.0f} {cb:7.0f}", flush=True)


if __name__ == "__main__":
    main()
