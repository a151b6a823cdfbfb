"""A/B of mma_tuned's fragment prefetch (CUTLASS's multistage order) against the same tiles
without it, bf16 and fp16, cuBLAS in the same run on the same inputs:
    python benchmarks/ab_mma.py [sizes...]"""
import sys

import numba_tc
from numba_tc import bench, tensorcore as tc
from numba_tc.__main__ import _size
from numba_tc.config import Variant


def main(sizes):
    base = tc.RUNG5.replace(frag_prefetch=False)
    numba_tc.register(Variant("ab no-prefetch", "mma", 90, tc._TC, (8, 0), "rung 5 without prefetch",
                              tc._launch_tiled(base), base, tc._OUT))
    for dtype in ("bfloat16", "float16"):
        for rep in range(2):                          # both orders, against clock drift
            names = ["mma_tuned", "ab no-prefetch"][::1 if rep == 0 else -1]
            recs = bench.run(names, sizes, dtype=dtype, progress=False)
            print(bench.table(recs), flush=True)


if __name__ == "__main__":
    main([_size(s) for s in sys.argv[1:] or ["4096", "8192"]])
