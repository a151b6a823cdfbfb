"""Time candidate tile configurations side by side with cuBLAS.

    python benchmarks/tune.py simt --sizes 4096 [--json out.json]
    python benchmarks/tune.py mma --dtype bfloat16 --sizes 4096 8192
    python benchmarks/tune.py wgmma --dtype bfloat16 --sizes 4096 8192

Each candidate is registered as a variant named ``tune_<i>``, so it goes through the same
checks and timing as the ladder; the winner becomes the rung's configuration by hand
(``simt.RUNG7``, ``tensorcore.RUNG5``), with the numbers.
"""
import argparse
import sys

import numba_tc
from numba_tc import bench, hopper, simt, tensorcore
from numba_tc.config import ConfigError, MmaConfig, SimtConfig, Variant, WgmmaConfig

SIMT_BASE = dict(bm=128, bn=128, threads=256, warptile=True, a_kmajor=True, vector_loads=True, stages=2)
SIMT = [
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=1, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=4, bn=64, threads=128, a_pad=4),
    dict(bk=32, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128),
    dict(bk=16, tm=4, tn=4, wm=32, wn=64, wniter=4, min_blocks=3, bm=64, threads=128),
    dict(bk=16, tm=8, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, a_pad=4),
    dict(bk=8, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, a_pad=4),
    # 128 outputs per thread (cuBLAS's sgemm on the H100: 256x128x8, warps 4x2, 254 registers)
    dict(bk=8, tm=4, tn=4, wm=64, wn=64, wniter=4, min_blocks=1, bm=256, a_pad=4),
    dict(bk=8, tm=4, tn=8, wm=64, wn=64, wniter=2, min_blocks=1, bm=256, a_pad=4),
    dict(bk=8, tm=4, tn=4, wm=64, wn=64, wniter=4, min_blocks=1, bn=256, a_pad=4),
    dict(bk=8, tm=4, tn=4, wm=64, wn=64, wniter=4, min_blocks=2, threads=128, a_pad=4),
    # session 6, after the whole-tile loop
    dict(bk=8, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=1, a_pad=4),
    dict(bk=8, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bm=64, threads=128, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=32, wn=64, wniter=2, min_blocks=3, bn=64, threads=128, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=32, wn=64, wniter=2, min_blocks=1, a_pad=4),
    # 2 blocks per SM (ptxas takes 200-206 registers): 4096^3 is 7.8 waves of them, not 5.2 of 3
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, bm=64, threads=128, a_pad=4),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=2, bn=64, threads=128, a_pad=4),
    # session 7: 128 outputs per thread again, now with the whole-tile loop (8-11 at bk=16)
    dict(bk=16, tm=4, tn=4, wm=64, wn=64, wniter=4, min_blocks=1, bm=256),       # 48 KiB: no pad
    dict(bk=16, tm=4, tn=4, wm=64, wn=64, wniter=4, min_blocks=1, bn=256),
    dict(bk=16, tm=4, tn=4, wm=64, wn=64, wniter=4, min_blocks=2, threads=128, a_pad=4),
    # rung 7 (2) with 4-byte C stores (accumulators free of B's register banks), the tail split, both
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128, a_pad=4,
         vector_stores=False),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128, a_pad=4,
         split_tail=True),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=3, bn=64, threads=128, a_pad=4,
         vector_stores=False, split_tail=True),
    dict(bk=16, tm=4, tn=4, wm=64, wn=32, wniter=2, min_blocks=1, a_pad=4, vector_stores=False),
]
MMA_BASE = dict(async_copy=True, group_m=8, frag_prefetch=True)
MMA = [
    dict(bm=128, bn=256, wm=64, wn=64, min_blocks=1),
    dict(bm=256, bn=128, wm=64, wn=64, min_blocks=1),                 # rung 5
    dict(bm=128, bn=128, wm=64, wn=64, min_blocks=2),
    dict(bm=256, bn=128, wm=64, wn=64, min_blocks=1, max_stages=3),
    dict(bm=256, bn=128, wm=64, wn=64, min_blocks=1, group_m=16),
    dict(bm=256, bn=128, wm=64, wn=64, min_blocks=1, group_m=4),
    dict(bm=64, bn=256, wm=64, wn=64, min_blocks=2),
    dict(bm=256, bn=128, wm=64, wn=64, min_blocks=1, frag_prefetch=False),
]
WGMMA_BASE = dict(bm=128, bn=256, consumers=2, producer=True, regs=(40, 232), persistent=True)
WGMMA = [
    dict(),                                          # rung 5
    dict(tma_store=True),                            # rung 7 without the cluster
    dict(cluster=2),                                 # rung 6
    dict(cluster=2, tma_store=True),                 # rung 7
    dict(cluster=2, tma_store=True, max_stages=3),
    dict(cluster=2, tma_store=True, group_m=16),
    dict(cluster=2, tma_store=True, regs=(24, 240)),
    dict(bm=256, bn=128, cluster=2, tma_store=True),
    dict(cluster=2, tma_store=True, group_m=4),
    # session 6, re-measured with interleaved timing: rung 7 (1) against these
    dict(tma_store=True, max_stages=3),
    dict(tma_store=True, group_m=16),
    dict(tma_store=True, group_m=4),
    dict(tma_store=True, regs=(24, 240)),
    # session 8, with the balanced persistent grid: the output-box ring, 3 stages against 4
    dict(tma_store=True, max_stages=3, epi_boxes=4),
    dict(tma_store=True, epi_boxes=1),
    dict(cluster=2, tma_store=True, max_stages=3, epi_boxes=4),
]
LADDERS = {"simt": (SimtConfig, SIMT_BASE, SIMT, lambda cfg: simt._launch_tiled(7, cfg), ("float32",), (3, 5)),
           "mma": (MmaConfig, MMA_BASE, MMA, tensorcore._launch_tiled, ("float16", "bfloat16", "tf32"), (8, 0)),
           "wgmma": (WgmmaConfig, WGMMA_BASE, WGMMA, hopper._launch, ("bfloat16", "float16"), (9, 0))}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ladder", choices=sorted(LADDERS))
    p.add_argument("--sizes", nargs="*", type=int, default=[4096])
    p.add_argument("--dtype", default=None)
    p.add_argument("--only", nargs="*", type=int, help="candidate indices to run")
    p.add_argument("--json")
    args = p.parse_args()
    cls, base, cands, launcher, dtypes, cc = LADDERS[args.ladder]
    dtype = args.dtype or dtypes[0]
    names = []
    for i, c in enumerate(cands):
        if args.only and i not in args.only:
            continue
        try:
            cfg = cls(**dict(base, **c))
        except ConfigError as e:
            print(f"tune_{i}: invalid ({e})")
            continue
        numba_tc.register(Variant(f"tune_{i}", args.ladder, 70 + i, dtypes, cc, str(c), launcher(cfg), cfg,
                                  ("float32", "float16", "bfloat16")))
        names.append(f"tune_{i}")
        print(f"tune_{i}: {c}  smem={cfg.smem_bytes}B stages={getattr(cfg, 'stages', '')}")
    recs = bench.run(names, [(s, s, s) for s in args.sizes], dtype=dtype, command=" ".join(sys.argv),
                     progress=False)
    print(bench.table(recs))
    if args.json:
        bench.merge_records(args.json, recs)


if __name__ == "__main__":
    main()
