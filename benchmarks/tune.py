"""Time candidate tile configurations of one ladder side by side with cuBLAS.

    python benchmarks/tune.py simt --sizes 4096 6144 [--only 2 24] [--json out.json]
    python benchmarks/tune.py mma --dtype bfloat16 --sizes 4096 8192
    python benchmarks/tune.py wgmma --dtype bfloat16 --sizes 4096 8192 --only 1 3 9

The candidates are data (benchmarks/tune_candidates.json): per ladder, a base configuration and
the fields each candidate sets over it, under an id that names it ``tune_<id>``. Each runs as an
unregistered variant (``numba_tc.variant_from``) through the same checks and timing as the ladder;
a winner becomes the rung's configuration by hand, with its numbers in benchmarks/NOTES.md.
"""
import argparse
import json
import os
import sys

import numba_tc
from numba_tc import bench, config

CANDIDATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tune_candidates.json")


def load_ladders(path=CANDIDATES):
    """{ladder: {"config", "dtype", "base", "candidates"}} from the candidates file."""
    with open(path) as f:
        return {k: v for k, v in json.load(f).items() if isinstance(v, dict)}


def build(ladder, candidate):
    """The candidate's configuration; raises numba_tc.ConfigError if it cannot work."""
    fields = dict(ladder["base"], **candidate["set"])
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}   # regs: a pair
    return getattr(config, ladder["config"])(**fields)


def main():
    ladders = load_ladders()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ladder", choices=sorted(ladders))
    p.add_argument("--sizes", nargs="*", type=int, default=[4096], help="N for N^3 problems")
    p.add_argument("--dtype", default=None, help="default: the ladder's dtype in the candidates file")
    p.add_argument("--only", nargs="*", type=int, help="candidate ids to run (default: all)")
    p.add_argument("--json", help="merge records into this JSON file")
    args = p.parse_args()
    if args.json:
        bench.clean_commit(args.json)         # records in benchmarks/results name a clean commit
    ladder = ladders[args.ladder]
    variants = []
    for cand in ladder["candidates"]:
        if args.only and cand["id"] not in args.only:
            continue
        name = f"tune_{cand['id']}"
        try:
            cfg = build(ladder, cand)
        except numba_tc.ConfigError as e:
            print(f"{name}: invalid ({e})")
            continue
        variants.append(numba_tc.variant_from(cfg, name=name))
        print(f"{name}: {cand['set']}  smem={cfg.smem_bytes}B stages={getattr(cfg, 'stages', '')}  "
              f"({cand['note']})")
    recs = bench.run(variants, [(s, s, s) for s in args.sizes], dtype=args.dtype or ladder["dtype"],
                     command=" ".join(sys.argv), progress=False)
    print(bench.table(recs))
    if args.json:
        bench.merge_records(args.json, recs)


if __name__ == "__main__":
    main()
