"""Time candidate configurations of the tiled SIMT kernel side by side with cuBLAS.

    python benchmarks/tune_simt.py --sizes 4096 [--json out.json]

Each candidate is registered as a variant named ``tune_<i>``, so it goes through the same
checks and timing as the ladder; the winner becomes ``simt.RUNG7`` by hand, with the numbers.
"""
import argparse
import sys

import numba_tc
from numba_tc import bench, simt
from numba_tc.config import ConfigError, SimtConfig, Variant

BASE = dict(bm=128, bn=128, threads=256, warptile=True, a_kmajor=True, vector_loads=True, stages=2)
CANDIDATES = [
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=1, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=4, bn=64, threads=128, a_pad=4),
    dict(bk=32, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128),
    dict(bk=16, tm=4, tn=4, wm=32, wn=64, wniter=4, min_blocks=3, bm=64, threads=128),
    dict(bk=16, tm=8, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, a_pad=4),
    dict(bk=8, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, a_pad=4),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", nargs="*", type=int, default=[4096])
    p.add_argument("--json")
    args = p.parse_args()
    names = []
    for i, c in enumerate(CANDIDATES):
        kw = dict(BASE, **c)
        try:
            cfg = SimtConfig(**kw)
        except ConfigError as e:
            print(f"tune_{i}: invalid ({e})")
            continue
        numba_tc.register(Variant(f"tune_{i}", "simt", 70 + i, ("float32",), (3, 5), str(c),
                                  simt._launch_tiled(7, cfg), cfg))
        names.append(f"tune_{i}")
        print(f"tune_{i}: {c}  smem={cfg.smem_bytes}B")
    recs = bench.run(names, [(s, s, s) for s in args.sizes], command=" ".join(sys.argv), progress=False)
    print(bench.table(recs))
    if args.json:
        bench.merge_records(args.json, recs)


if __name__ == "__main__":
    main()
