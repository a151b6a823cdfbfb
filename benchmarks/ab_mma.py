"""A/B of mma_tuned's fragment prefetch (CUTLASS's multistage order) against the same tiles
without it, bf16 and fp16, each timed against cuBLAS in alternating rounds on the same inputs, the
pair run in both orders:
    python benchmarks/ab_mma.py [N or MxNxK ...]     (default: 4096 8192)"""
import argparse

import numba_tc
from numba_tc import bench


def size(s):
    """N (for N^3) or MxNxK."""
    dims = [int(d) for d in s.lower().split("x")]
    if len(dims) == 1:
        dims *= 3
    if len(dims) != 3 or min(dims) <= 0:
        raise argparse.ArgumentTypeError(f"size {s!r}: give N or MxNxK, all positive")
    return tuple(dims)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sizes", nargs="*", type=size, default=[size("4096"), size("8192")])
    args = p.parse_args()
    tuned = numba_tc.get_variant("mma_tuned")
    plain = numba_tc.variant_from(tuned.config.replace(frag_prefetch=False), name="ab no-prefetch")
    for dtype in ("bfloat16", "float16"):
        for pair in ([tuned, plain], [plain, tuned]):          # both orders, against clock drift
            print(bench.table(bench.run(pair, args.sizes, dtype=dtype, progress=False)), flush=True)


if __name__ == "__main__":
    main()
