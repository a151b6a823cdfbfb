"""python -m numba_tc (or numba-tc): the three GEMM ladders against cuBLAS.

On a GPU, the main job checks and times the fastest rung of each ladder (SIMT in float32, mma.sync
and Hopper in bfloat16) side by side with cuBLAS in the same dtype, at 4096^3: one table, one
picture. Without a GPU, it runs every SIMT rung in Numba's CUDA simulator, then shows what the
committed results (benchmarks/results/h100.json) say, labelled as recorded on an H100.

Subcommands live in COMMANDS: add one with the ``command`` decorator.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

DESCRIPTION = """\
The GEMM ladders of numba_tc against cuBLAS.

With no arguments: on a GPU, the fastest rung of each ladder (warptile in float32,
mma_tuned and hopper in bfloat16) checked and timed next to cuBLAS at 4096^3, with
a table and a picture; without a GPU, every SIMT rung checked in Numba's CUDA
simulator, then the results recorded on an H100 (table and picture).
Options without a command go to "bench", the default command."""

EPILOG = """\
examples:
  python -m numba_tc                         the main job (GPU or not)
  python -m numba_tc --all                   every rung of every ladder (GPU)
  python -m numba_tc --sizes 2048 8192x8192x1024
  python -m numba_tc bench --ladder mma --dtype float16 --plot mma.png --json out.json
  python -m numba_tc recorded --all          the committed H100 results, any machine
  python -m numba_tc demo --size 33x65x17    the SIMT rungs in the CUDA simulator
  python -m numba_tc list                    the variant registry
  python -m numba_tc compile --arch sm_90a   fill the kernel cache ahead of time (no GPU needed)"""

LADDERS = ("simt", "mma", "wgmma")
DTYPES = ("float32", "tf32", "float16", "bfloat16")
# the dtype a ladder is shown in when none is asked for (each against cuBLAS in that dtype)
LADDER_DTYPE = {"simt": "float32", "mma": "bfloat16", "wgmma": "bfloat16"}
DEFAULT_SIZE = (4096, 4096, 4096)


# ---------------------------------------------------------------------------------------------
# The subcommand table. A command is a name, a one-line help, a function adding its arguments to
# its parser, and a function running it (returning the exit status).

class Command(NamedTuple):
    name: str
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


COMMANDS: Dict[str, Command] = {}
DEFAULT_COMMAND = "bench"


def command(name: str, help: str, arguments: Callable[[argparse.ArgumentParser], None] = lambda p: None):
    """Register ``run(args) -> int`` as the subcommand ``name``."""
    def register(run):
        COMMANDS[name] = Command(name, help, arguments, run)
        return run
    return register


# ---------------------------------------------------------------------------------------------
# Argument types (errors become argparse errors, not tracebacks)

def parse_size(s: str) -> Tuple[int, int, int]:
    try:
        parts = [int(p) for p in s.lower().split("x")]
    except ValueError:
        parts = []
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3 or min(parts) <= 0:
        raise argparse.ArgumentTypeError(f"{s!r} is not a size: give N (for N^3) or MxNxK, all positive integers")
    return tuple(parts)


def _variant_name(s: str) -> str:
    import numba_tc
    names = [v.name for v in numba_tc.variants()]
    if s not in names:
        raise argparse.ArgumentTypeError(f"unknown variant {s!r}; valid variants: {', '.join(names)}")
    return s


def _fmt(size) -> str:
    m, n, k = size
    return f"{m}^3" if m == n == k else f"{m}x{n}x{k}"


def _gpu_present() -> bool:
    from numba import config
    if config.ENABLE_CUDASIM:
        return False
    from numba import cuda
    try:
        return cuda.is_available()
    except Exception:
        return False


def _picture_path(given: Optional[str], name: str) -> str:
    """``given``, or a fresh file in a new temporary directory (nothing lands in the cwd)."""
    return given or os.path.join(tempfile.mkdtemp(prefix="numba_tc_"), name)


# ---------------------------------------------------------------------------------------------
# list

@command("list", "list the variants (ladder/rung, dtypes, compute capability, what each adds)")
def cmd_list(args) -> int:
    import numba_tc
    for v in numba_tc.variants():
        print(v.describe())
    return 0


# ---------------------------------------------------------------------------------------------
# demo: the simulator check

def _demo_arguments(p):
    p.add_argument("--size", type=parse_size, default=(21, 38, 19), metavar="MxNxK",
                   help="the problem (default 21x38x19: ragged, smaller than every tile)")


@command("demo", "check every SIMT rung in Numba's CUDA simulator (no GPU needed)", _demo_arguments)
def cmd_demo(args) -> int:
    """Run in the simulator (re-launching this module with NUMBA_ENABLE_CUDASIM=1 if needed)."""
    from numba import config
    m, n, k = args.size
    if not config.ENABLE_CUDASIM:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        sys.stdout.flush()
        return subprocess.call([sys.executable, "-m", "numba_tc", "demo", "--size", f"{m}x{n}x{k}"], env=env)
    import numba_tc
    from numba_tc.verify import check
    print(f"Numba CUDA simulator: every SIMT rung on a {m}x{n}x{k} problem, row- and "
          "column-major inputs, NaN-poisoned outputs, float64 reference.", flush=True)
    bad = 0
    for v in numba_tc.variants(ladder="simt"):
        for layout in ("NN", "TT"):
            t = time.perf_counter()
            r = check(v.name, m, n, k, layout=layout, seed=len(v.name))
            bad += not r.ok
            print(f"  rung {v.rung} {r}  ({time.perf_counter() - t:.1f}s)", flush=True)
    print("all rungs verified" if not bad else f"{bad} check(s) FAILED", flush=True)
    return 1 if bad else 0


# ---------------------------------------------------------------------------------------------
# recorded: the committed H100 results

def _recorded_arguments(p):
    p.add_argument("--all", action="store_true", help="every rung of each ladder (default: the fastest of each)")
    p.add_argument("--size", type=parse_size, default=DEFAULT_SIZE, metavar="N|MxNxK",
                   help="a recorded size (default 4096; 8192 is recorded for the tensor-core ladders)")
    p.add_argument("--plot", metavar="PNG", help="write the picture here (default: a new temporary directory)")


@command("recorded", "show the results recorded on an H100 (table and picture; any machine)", _recorded_arguments)
def cmd_recorded(args) -> int:
    from numba_tc import bench
    try:
        recs = bench.recorded(args.size, all_rungs=args.all)
    except FileNotFoundError as e:
        print(f"numba_tc: {e}", file=sys.stderr)
        return 1
    if not recs:
        print(f"numba_tc: nothing recorded at {_fmt(args.size)} in {bench.find_results()}", file=sys.stderr)
        return 1
    device = recs[0]["device"]
    commits: Dict[str, List[str]] = {}
    for r in recs:
        commits.setdefault(r["commit"], [])
        if r["ladder"] not in commits[r["commit"]]:
            commits[r["commit"]].append(r["ladder"])
    at = ", ".join(f"{c} ({', '.join(ls)})" for c, ls in commits.items())
    print(f"Recorded on an {device} at commit {at}, not measured here:")
    where = bench.find_results()
    if not os.path.relpath(where).startswith(".."):
        where = os.path.relpath(where)
    print(f"  {where}; each record holds the command that made it.")
    print("  Each variant was timed in rounds alternating with cuBLAS in the same dtype, on the same inputs.\n")
    print(bench.table(recs))
    path = _picture_path(args.plot, "ladders_{}x{}x{}_recorded.png".format(*args.size))
    fig = bench.plot_ladders(recs, path, title=f"numba_tc ladders vs cuBLAS, {_fmt(args.size)}: recorded on an "
                             f"{device} at commit {at}")
    print(f"\npicture: {path}" if fig is not None else "\npicture skipped: pip install matplotlib")
    if not args.all:
        print("every rung: python -m numba_tc recorded --all")
    return 0


# ---------------------------------------------------------------------------------------------
# bench: check and time on this GPU (the default command)

def _bench_arguments(p):
    p.add_argument("--variants", nargs="+", type=_variant_name, metavar="NAME",
                   help="variants to run (default: the fastest rung of each ladder; see 'list')")
    p.add_argument("--ladder", choices=LADDERS, help="every rung of this ladder")
    p.add_argument("--all", action="store_true", help="every rung of every ladder")
    p.add_argument("--sizes", nargs="+", type=parse_size, metavar="N|MxNxK", help="N (for N^3) or MxNxK (default 4096)")
    p.add_argument("--dtype", choices=DTYPES, help="input dtype (default: float32 for simt, bfloat16 for "
                   "mma and wgmma; tf32 means float32 arrays on tensor cores)")
    p.add_argument("--layout", default="NN", choices=["NN", "NT", "TN", "TT"], help="operand layouts (T: column-major)")
    p.add_argument("--json", metavar="FILE", help="merge the records into this JSON file")
    p.add_argument("--plot", metavar="PNG", help="write the picture here (default for the ladders side by side: "
                   "a new temporary directory)")
    p.add_argument("--budget", type=float, default=1.0, help="seconds of timing per measurement (default 1)")
    p.add_argument("--no-progress", action="store_true", help="plain progress lines instead of a progress bar")


def _plan(args, error) -> List[Tuple[str, list]]:
    """(dtype, variants) groups in ladder order; ``error`` reports a bad combination."""
    import numba_tc
    if args.variants and (args.ladder or args.all):
        error("--variants cannot be combined with --ladder or --all")
    if args.variants:
        chosen = [numba_tc.get_variant(n) for n in dict.fromkeys(args.variants)]
    else:
        chosen = []
        for ladder in ([args.ladder] if args.ladder else LADDERS):
            dt = args.dtype or LADDER_DTYPE[ladder]
            rungs = [v for v in numba_tc.variants(ladder=ladder) if dt in v.dtypes]
            if args.ladder and not rungs:
                error(f"the {ladder} ladder takes {', '.join(numba_tc.variants(ladder=ladder)[0].dtypes)}, not {dt}")
            chosen += rungs if (args.ladder or args.all) else rungs[-1:]
        if not chosen:
            error(f"no ladder takes {args.dtype}")
    groups: Dict[str, list] = {}
    for v in chosen:
        dt = args.dtype or LADDER_DTYPE.get(v.ladder, v.dtypes[0])
        if dt not in v.dtypes:
            error(f"variant {v.name} takes {', '.join(v.dtypes)}, not {dt} (choose with --dtype)")
        groups.setdefault(dt, []).append(v)
    return list(groups.items())


def _runs_on(v, cc) -> Optional[str]:
    """Why ``v`` cannot run on compute capability ``cc``, or None."""
    if tuple(cc) < tuple(v.min_cc):
        return f"needs sm_{v.min_cc[0]}{v.min_cc[1]}"
    if v.max_cc is not None and tuple(cc) > tuple(v.max_cc):
        return f"runs only on sm_{v.max_cc[0]}{v.max_cc[1]}a"
    return None


@command("bench", "check and time variants against cuBLAS on this GPU (the default command)", _bench_arguments)
def cmd_bench(args) -> int:
    error = args.parser.error
    plan = _plan(args, error)                   # argument errors first, GPU or not
    if not _gpu_present():
        print("numba_tc bench: no CUDA GPU here, and benchmarks need one. Without a GPU:\n"
              "  python -m numba_tc            the simulator check and the results recorded on an H100\n"
              "  python -m numba_tc recorded   the recorded results only\n"
              "  python -m numba_tc demo       every SIMT rung in Numba's CUDA simulator", file=sys.stderr)
        return 1
    import numba_tc
    from numba_tc import bench
    cc = numba_tc.device_capability()
    runnable = []
    for dt, vs in plan:
        keep = []
        for v in vs:
            why = _runs_on(v, cc)
            if why:
                print(f"skipped: {v.name} {why}; this GPU is sm_{cc[0]}{cc[1]}")
            else:
                keep.append(v)
        if keep:
            runnable.append((dt, keep))
    if not runnable:
        print("numba_tc bench: nothing to run on this GPU", file=sys.stderr)
        return 1
    sizes = args.sizes or [DEFAULT_SIZE]
    side_by_side = len(runnable) > 1 or not (args.variants or args.ladder)
    command_line = "python -m numba_tc " + " ".join(shlex.quote(a) for a in args.argv)
    device = bench._device_name()
    print(f"{device} (sm_{cc[0]}{cc[1]}), commit {bench.commit_id()}: "
          + "; ".join(f"{', '.join(v.name for v in vs)} in {dt}" for dt, vs in runnable)
          + f", each against cuBLAS in the same dtype, at {', '.join(_fmt(s) for s in sizes)}."
          "\nEach is checked against float64, then timed in rounds alternating with cuBLAS. Kernels compile "
          "on first use.", flush=True)
    bar = bench.progress_bar(sum(len(vs) for _, vs in runnable) * len(sizes), not args.no_progress)
    recs = []
    try:
        for dt, vs in runnable:
            recs += bench.run(vs, sizes, dtype=dt, layout=args.layout, command=command_line,
                              progress=bar, budget_s=args.budget)
    except bench.NoCublasError as e:
        print(f"numba_tc bench: {e}", file=sys.stderr)
        return 1
    finally:
        bar.close()
    print(bench.table(recs))
    if len(sizes) > 1:
        for v in [v for _, vs in runnable for v in vs]:
            g = bench.geomean_ratio([r for r in recs if r.variant == v.name])
            if g:
                print(f"{v.name}: geometric mean {g:.3f}x cuBLAS over {len(sizes)} shapes")
    if args.json:
        bench.merge_records(args.json, recs)
        print(f"records merged into {args.json}")
    if side_by_side:
        path = _picture_path(args.plot, "ladders.png")
        fig = bench.plot_ladders(recs, path, title=f"numba_tc ladders vs cuBLAS on {device}")
    elif args.plot:
        path = args.plot
        ladders = "+".join(dict.fromkeys(r.ladder for r in recs))
        fig = bench.plot(recs, path, title=f"{ladders} ladder, {runnable[0][0]}, {device}")
    else:
        path = fig = None
    if path:
        print(f"picture: {path}" if fig is not None else "picture skipped: pip install matplotlib")
    return 1 if any(r.tflops == 0.0 for r in recs) else 0


# ---------------------------------------------------------------------------------------------
# compile: fill the kernel cache ahead of time

def _compile_arguments(p):
    import numba_tc
    names = [v.name for v in numba_tc.variants()]
    p.add_argument("--variants", nargs="+", choices=names, metavar="NAME",
                   help="variants to compile (default: all); valid: " + ", ".join(names))
    p.add_argument("--arch", nargs="+", metavar="sm_XY[a]",
                   help="targets, e.g. sm_90a (default: this GPU's, or sm_90a without one)")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES, help="input dtypes (default: all a variant takes)")
    p.add_argument("--jobs", type=int, help="compiler processes (default: one per core)")
    p.add_argument("--no-progress", action="store_true")


@command("compile", "compile kernels into the disk cache ahead of time (no GPU needed)", _compile_arguments)
def cmd_compile(args) -> int:
    from numba_tc import aot, build, cache
    for a in args.arch or []:
        try:
            build.parse_cc(a)
        except ValueError as e:
            args.parser.error(str(e))
    t = time.perf_counter()
    recs = aot.precompile(args.variants, args.arch, args.dtypes, args.jobs, progress=not args.no_progress)
    new = [r for r in recs if not r["cached"]]
    print(f"{len(recs)} kernels for {', '.join(sorted({r['arch'] for r in recs})) or 'no target'}: "
          f"{len(new)} compiled ({sum(r['seconds'] for r in new):.0f} s of compiling, "
          f"{time.perf_counter() - t:.0f} s wall), {len(recs) - len(new)} already cached, in {cache.cache_dir()}")
    return 0


# ---------------------------------------------------------------------------------------------
# the main job, with no arguments

def main_job(size=None) -> int:
    """On a GPU, ``bench`` with its defaults; without one, the simulator check (at ``size``, by
    default demo's) and the recorded results."""
    if _gpu_present():
        return main(["bench"])
    print("No CUDA GPU here: first every SIMT rung in Numba's CUDA simulator (correctness, not speed), "
          "then what the kernels do on an H100, from the committed results.\n", flush=True)
    rc = main(["demo"] + (["--size", "{}x{}x{}".format(*size)] if size else []))
    print(flush=True)
    main(["recorded"])              # says so if the results file is not found; the check decides
    return rc


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m numba_tc", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="command")
    for c in COMMANDS.values():
        sp = sub.add_parser(c.name, help=c.help, description=c.help[0].upper() + c.help[1:] + ".")
        c.arguments(sp)
        sp.set_defaults(parser=sp)
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        return main_job()
    if argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = [DEFAULT_COMMAND] + argv          # options without a command go to bench
    args = build_parser().parse_args(argv)
    args.argv = argv
    return COMMANDS[args.cmd].run(args)


if __name__ == "__main__":
    sys.exit(main())
