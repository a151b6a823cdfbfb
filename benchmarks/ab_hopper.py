"""`hopper` against itself with one configuration knob changed, on the same inputs, each timed
against cuBLAS in alternating rounds (the knob applies to all of hopper's per-problem
configurations, so pick_config chooses as usual):

    python benchmarks/ab_hopper.py stream_k=True --sizes 4096 8192 1536x6144x1000 [--json f]
"""
import argparse
import ast
import sys

import numba_tc
from numba_tc import bench, hopper
from numba_tc.__main__ import _size
from numba_tc.config import Variant


def main():
    p = argparse.ArgumentParser()
    p.add_argument("knobs", nargs="+", help="WgmmaConfig field=value")
    p.add_argument("--sizes", nargs="*", type=_size, default=[(4096,) * 3])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--json")
    args = p.parse_args()
    kw = {k: ast.literal_eval(v) for k, v in (s.split("=", 1) for s in args.knobs)}
    cfgs = tuple(c.replace(**kw) for c in hopper.RUNG7_CONFIGS)
    name = "hopper+" + ",".join(args.knobs)
    base = numba_tc.get_variant("hopper")
    numba_tc.register(Variant(name, "wgmma", 80, base.dtypes, base.min_cc, str(kw), hopper._launch(*cfgs),
                              cfgs[0], base.out_dtypes, check=base.check, max_cc=base.max_cc))
    recs = bench.run(["hopper", name], args.sizes, dtype=args.dtype, command=" ".join(sys.argv),
                     progress=False)
    print(bench.table(recs))
    for v in ("hopper", name):
        print(f"{v}: geometric mean {bench.geomean_ratio([r for r in recs if r.variant == v]):.3f}x cuBLAS")
    if args.json:
        bench.merge_records(args.json, recs)


if __name__ == "__main__":
    main()
