"""``python -m numba_tc`` (or ``numba-tc``): benchmark the ladder against cuBLAS, or, with no GPU,
run the SIMT rungs in Numba's CUDA simulator on a tiny ragged problem.

    python -m numba_tc                          # the SIMT ladder at 4096^3 (demo without a GPU)
    python -m numba_tc bench --sizes 2048 4096 --variants warptile --json out.json --plot out.png
    python -m numba_tc list                     # the variant registry
    python -m numba_tc demo                     # the simulator demo, GPU or not
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time


def _size(s: str):
    parts = [int(p) for p in s.lower().split("x")]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"size {s!r}: give N (for N^3) or MxNxK, all positive")
    return tuple(parts)


def _gpu_present() -> bool:
    from numba import config
    if config.ENABLE_CUDASIM:
        return False
    from numba import cuda
    return cuda.is_available()


def cmd_list(args) -> int:
    import numba_tc
    for v in numba_tc.variants():
        print(v.describe())
    return 0


def cmd_demo(args) -> int:
    """Run in the simulator (re-launching this module with NUMBA_ENABLE_CUDASIM=1 if needed)."""
    from numba import config
    if not config.ENABLE_CUDASIM:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        return subprocess.call([sys.executable, "-m", "numba_tc", "demo"] + (["--size", args.size] if args.size else []), env=env)
    import numba_tc
    from numba_tc.verify import check
    m, n, k = _size(args.size or "21x38x19")
    print(f"Numba CUDA simulator: every SIMT rung on a ragged {m}x{n}x{k} problem, row- and "
          "column-major inputs, NaN-poisoned outputs, float64 reference.")
    bad = 0
    for v in numba_tc.variants(ladder="simt"):
        for layout in ("NN", "TT"):
            t = time.perf_counter()
            r = check(v.name, m, n, k, layout=layout, seed=len(v.name))
            bad += not r.ok
            print(f"  rung {v.rung} {r}  ({time.perf_counter() - t:.1f}s)", flush=True)
    print("all rungs verified" if not bad else f"{bad} check(s) FAILED")
    return 1 if bad else 0


def cmd_bench(args) -> int:
    if not _gpu_present():
        print("No CUDA GPU found: benchmarks need one. Running the simulator demo instead.\n", flush=True)
        args.size = None
        return cmd_demo(args)
    import numba_tc
    from numba_tc import bench
    ladder = args.ladder or ("simt" if args.dtype == "float32" else "mma")
    names = args.variants or [v.name for v in numba_tc.variants(ladder=ladder, dtype=args.dtype)]
    if args.variants:           # the plot title names the ladders actually run
        ladder = "+".join(dict.fromkeys(numba_tc.get_variant(n).ladder for n in names))
    sizes = args.sizes or [(4096, 4096, 4096)]
    command = "python -m numba_tc " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    recs = bench.run(names, sizes, dtype=args.dtype, layout=args.layout, command=command,
                     progress=not args.no_progress, budget_s=args.budget)
    print(bench.table(recs))
    if len(sizes) > 1:
        for name in names:
            g = bench.geomean_ratio([r for r in recs if r.variant == name])
            if g:
                print(f"{name}: geometric mean {g:.3f}x cuBLAS over {len(sizes)} shapes")
    if args.json:
        bench.merge_records(args.json, recs)
        print(f"records merged into {args.json}")
    if args.plot:
        p = bench.plot(recs, args.plot, title=f"{ladder} ladder, {args.dtype}, {bench._device_name()}")
        print(f"plot: {p}" if p else "plot skipped (matplotlib missing)")
    failed = [r for r in recs if r.tflops == 0.0]
    return 1 if failed else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="numba_tc", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    b = sub.add_parser("bench", help="check and time variants against cuBLAS (default command)")
    b.add_argument("--variants", nargs="*", help="variant names (default: the whole ladder)")
    b.add_argument("--ladder", help="ladder when --variants is not given (simt, mma, wgmma; default: "
                   "simt for float32, mma otherwise)")
    b.add_argument("--sizes", nargs="*", type=_size, help="N or MxNxK (default 4096)")
    b.add_argument("--dtype", default="float32", choices=["float32", "tf32", "float16", "bfloat16"])
    b.add_argument("--layout", default="NN", choices=["NN", "NT", "TN", "TT"])
    b.add_argument("--json", help="merge records into this JSON file")
    b.add_argument("--plot", help="write a PNG plot here")
    b.add_argument("--budget", type=float, default=1.0, help="seconds of timing per measurement")
    b.add_argument("--no-progress", action="store_true")
    sub.add_parser("list", help="list the variants")
    d = sub.add_parser("demo", help="the SIMT ladder in the CUDA simulator")
    d.add_argument("--size", help="MxNxK (default 21x38x19)")
    args = p.parse_args(argv)
    if args.cmd is None:
        args = p.parse_args(["bench"] + (argv or sys.argv[1:]))
    return {"bench": cmd_bench, "list": cmd_list, "demo": cmd_demo}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
