"""python -m numba_tc (or numba-tc): the three GEMM ladders against cuBLAS.

On a GPU, the main job checks and times the fastest rung of each ladder (SIMT in float32, mma.sync
and Hopper in bfloat16) side by side with cuBLAS in the same dtype, at 4096^3: one table, one
picture. Without a GPU, it runs every SIMT rung in Numba's CUDA simulator, then shows what the
committed results say (benchmarks/results/<gpu>.json, the newest GPU's), labelled with the GPU and
commit that measured them.

Subcommands live in COMMANDS: add one with the ``command`` decorator.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
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
simulator, then the committed results, labelled with their GPU (table and picture).
Options without a command go to "bench", the default command."""

EPILOG = """\
examples:
  python -m numba_tc                         the main job (GPU or not)
  python -m numba_tc --all                   every rung of every ladder (GPU)
  python -m numba_tc --sizes 2048 8192x8192x1024
  python -m numba_tc bench --ladder mma --dtype float16 --plot mma.png --json out.json
  python -m numba_tc recorded --all          the committed results, any machine
  python -m numba_tc demo --size 33x65x17    the SIMT rungs in the CUDA simulator
  python -m numba_tc list                    the variant registry
  python -m numba_tc compile                 fill the kernel cache for this GPU ahead of time
  python -m numba_tc compile --arch sm_90a   ... for an H100/H200, on any machine (no GPU needed)"""

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
    names = ["auto"] + [v.name for v in numba_tc.variants()]
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

def _demo_size(s: str) -> Tuple[int, int, int]:
    """``parse_size``, and a problem the simulator runs (``checks.simulator_size``)."""
    from numba_tc import checks
    size = parse_size(s)
    try:
        checks.simulator_size(*size)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return size


def _demo_arguments(p):
    p.add_argument("--size", type=_demo_size, default=(21, 38, 19), metavar="MxNxK",
                   help="the problem (default 21x38x19: ragged, smaller than every tile; at most "
                        "NUMBA_TC_SIMULATOR_MNK multiply-adds, 128x128x128)")


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
# recorded: the committed results (the newest GPU's)

def _recorded_arguments(p):
    p.add_argument("--all", action="store_true", help="every rung of each ladder (default: the fastest of each)")
    p.add_argument("--size", type=parse_size, default=DEFAULT_SIZE, metavar="N|MxNxK",
                   help="a recorded size (default 4096; without a record there, the recorded sizes are listed)")
    p.add_argument("--dtype", choices=DTYPES, help="the records in this input dtype (default: float32 for simt, "
                   "bfloat16 for mma and wgmma; float16 and tf32 are recorded for the tensor-core ladders)")
    p.add_argument("--plot", metavar="PNG", help="write the picture here (default: a new temporary directory)")


class ResultsError(Exception):
    """The results file cannot be read (not JSON, or not a list of records)."""


RECORD_KEYS = ("variant", "ladder", "dtype", "m", "n", "k", "device", "commit")


def load_results(path: str) -> List[dict]:
    """The records of a results file, or ResultsError saying what is wrong with it."""
    import json
    try:
        with open(path, encoding="utf-8") as f:
            rows = json.load(f)
    except json.JSONDecodeError as e:
        raise ResultsError(f"the results file {path} is not valid JSON (line {e.lineno}, column {e.colno}: "
                           f"{e.msg}); restore it from the repository (git checkout -- {path})") from None
    except (UnicodeDecodeError, OSError) as e:
        raise ResultsError(f"the results file {path} cannot be read: {e}") from None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in RECORD_KEYS)
                                             for r in rows):
        raise ResultsError(f"the results file {path} is JSON but not a list of benchmark records (each with "
                           f"{', '.join(RECORD_KEYS)}); restore it from the repository (git checkout -- {path})")
    return rows


def short_commit(c: str) -> str:
    """A commit as 7 hex digits (records hold 7 or 12), keeping a suffix such as '+dirty'."""
    sha, plus, rest = str(c).partition("+")
    return (sha[:7] if re.fullmatch(r"[0-9a-f]{7,40}", sha) else sha) + plus + rest


def _shown(r: dict, dtype: Optional[str]) -> bool:
    """A row the recorded view shows: NN layout, one of the three ladders, in ``dtype`` (default:
    each ladder's own)."""
    from numba_tc import bench
    ladder = r.get("ladder")
    return (r.get("layout", "NN") == "NN" and ladder in bench.TOP_RUNGS
            and r["dtype"] == (dtype or LADDER_DTYPE[ladder]))


def select_recorded(rows: List[dict], size, dtype: Optional[str], all_rungs: bool) -> List[dict]:
    """The rows at ``size`` in ``dtype``: the fastest rung of each ladder, or every rung; in
    ladder and rung order."""
    import numba_tc
    from numba_tc import bench
    order = {v.name: i for i, v in enumerate(numba_tc.variants())}
    out = [r for r in rows if _shown(r, dtype) and (r["m"], r["n"], r["k"]) == tuple(size)
           and (all_rungs or r["variant"] == bench.TOP_RUNGS[r["ladder"]][0])]
    return sorted(out, key=lambda r: order.get(r["variant"], len(order)))


def recorded_sizes(rows: List[dict], dtype: Optional[str]) -> Dict[str, List[str]]:
    """'ladder dtype' -> the sizes recorded for it (NN layout), smallest first."""
    out: Dict[str, set] = {}
    for r in rows:
        if _shown(r, dtype):
            out.setdefault(f"{r['ladder']} {r['dtype']}", set()).add((r["m"], r["n"], r["k"]))
    return {k: [_fmt(s) for s in sorted(v, key=lambda s: (s[0] * s[1] * s[2], s))] for k, v in out.items()}


@command("recorded", "show the committed results, labelled with their GPU (table and picture; any machine)",
         _recorded_arguments)
def cmd_recorded(args) -> int:
    from numba_tc import bench
    where = bench.find_results()
    try:
        if where is None:
            bench.recorded(args.size)               # raises FileNotFoundError, saying where to look
        rows = load_results(where)
    except (FileNotFoundError, ResultsError) as e:
        print(f"numba_tc: {e}", file=sys.stderr)
        return 1
    recs = select_recorded(rows, args.size, args.dtype, args.all)
    if not recs:
        sizes = recorded_sizes(rows, args.dtype)
        what = f" in {args.dtype}" if args.dtype else ""
        print(f"numba_tc: nothing recorded at {_fmt(args.size)}{what} in {where}.", file=sys.stderr)
        if sizes:
            print("Recorded sizes (python -m numba_tc recorded --size N|MxNxK"
                  + (f" --dtype {args.dtype}" if args.dtype else "") + "):", file=sys.stderr)
            for key, ss in sizes.items():
                print(f"  {key}: {', '.join(ss)}", file=sys.stderr)
        else:
            dts = sorted({r["dtype"] for r in rows if _shown(r, r["dtype"])})
            print(f"Recorded dtypes: {', '.join(dts)} (--dtype).", file=sys.stderr)
        return 1
    device = recs[0]["device"]
    commits: Dict[str, List[str]] = {}
    for r in recs:
        c = short_commit(r["commit"])
        commits.setdefault(c, [])
        if r["ladder"] not in commits[c]:
            commits[c].append(r["ladder"])
    at = ", ".join(f"{c} ({', '.join(ls)})" for c, ls in commits.items())
    print(f"Recorded on an {device} at commit {at}, not measured here:")
    shown = where
    if not os.path.relpath(where).startswith(".."):
        shown = os.path.relpath(where)
    print(f"  {shown}; each record holds the command that made it.")
    print("  Each variant was timed in rounds alternating with cuBLAS in the same dtype, on the same inputs.")
    missing = [ld for ld in LADDERS if ld not in {r["ladder"] for r in recs}
               and f"{ld} {args.dtype or LADDER_DTYPE[ld]}" in recorded_sizes(rows, args.dtype)]
    if missing:
        print(f"  Not recorded at {_fmt(args.size)}: the {', '.join(missing)} ladder"
              + ("s" if len(missing) > 1 else "") + " (--size; a size without records lists them).")
    print()
    print(bench.table(recs))
    dt = f"_{args.dtype}" if args.dtype else ""
    path = _picture_path(args.plot, "ladders_{}x{}x{}{}_recorded.png".format(*args.size, dt))
    what = f", {args.dtype}" if args.dtype else ""
    fig = bench.plot_ladders(recs, path, title=f"numba_tc ladders vs cuBLAS, {_fmt(args.size)}{what}: recorded "
                             f"on an {device} at commit {at}")
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
        from numba_tc.bench import AUTO
        chosen = [AUTO if n == "auto" else numba_tc.get_variant(n) for n in dict.fromkeys(args.variants)]
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
        dt = args.dtype or LADDER_DTYPE.get(v.ladder, "bfloat16" if v.ladder == "auto" else v.dtypes[0])
        if dt not in v.dtypes:
            error(f"variant {v.name} takes {', '.join(v.dtypes)}, not {dt} (choose with --dtype)")
        groups.setdefault(dt, []).append(v)
    return list(groups.items())


@contextlib.contextmanager
def quiet_performance_warnings():
    """Numba's performance warnings silenced for the block: the benchmark's own small launches
    (a one-block spin kernel ahead of the timed ones) are small on purpose, and a warning would
    land in the middle of the progress bar. (numba-cuda raises its own class, not numba's.)"""
    import warnings
    classes = []
    for mod in ("numba.core.errors", "numba.cuda.core.errors"):
        try:
            classes.append(__import__(mod, fromlist=["NumbaPerformanceWarning"]).NumbaPerformanceWarning)
        except (ImportError, AttributeError):
            pass
    with warnings.catch_warnings():
        for cls in classes:
            warnings.simplefilter("ignore", cls)
        yield


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
              "  python -m numba_tc            the simulator check and the committed results\n"
              "  python -m numba_tc recorded   the recorded results only\n"
              "  python -m numba_tc demo       every SIMT rung in Numba's CUDA simulator", file=sys.stderr)
        return 1
    import numba_tc
    from numba_tc import bench
    if args.json:
        try:
            bench.clean_commit(args.json)       # records in benchmarks/results name their commit
        except bench.DirtyTreeError as e:
            error(str(e))
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
        with quiet_performance_warnings():       # nothing printed inside the progress bar
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

def _positive_int(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{s!r} is not a positive integer")
    return n


def _compile_arguments(p):
    import numba_tc
    names = [v.name for v in numba_tc.variants()]
    p.add_argument("--variants", nargs="+", type=_variant_name, metavar="NAME",
                   help="variants to compile (default: those variant='auto' picks on the target); valid: "
                   + ", ".join(names))
    p.add_argument("--all", action="store_true", help="every variant the target runs, in every dtype it takes "
                   "(thousands of kernels: hours on a laptop)")
    p.add_argument("--arch", nargs="+", metavar="sm_XY[a]",
                   help="targets, e.g. sm_90a (default: this GPU's; without a GPU, say it); sm_75 or newer, "
                   "as CUDA 13 compiles; the Hopper ladder needs sm_90a")
    p.add_argument("--dtypes", nargs="+", choices=DTYPES + ("float8_e4m3fn", "float8_e5m2"),
                   help="input dtypes (default: bfloat16, float16, float32; with --all or --variants: all a "
                   "variant takes)")
    p.add_argument("--jobs", type=_positive_int, help="compiler processes (default: one per core)")
    p.add_argument("--dry-run", action="store_true", help="say what would be compiled and about how long it "
                   "takes, compile nothing")
    p.add_argument("--json", metavar="FILE", help="append a record of this run (machine, kernels, seconds) to FILE")
    p.add_argument("--no-progress", action="store_true")


def supported_archs() -> Optional[List[int]]:
    """The targets this machine's CUDA compiler (NVRTC) supports, as numbers (75 for sm_75), or
    None when NVRTC cannot say."""
    try:
        from cuda.bindings import nvrtc
        err, archs = nvrtc.nvrtcGetSupportedArchs()
        return sorted(int(a) for a in archs) if int(err) == 0 else None
    except Exception:
        return None


def check_arch(arch: str, archs: Optional[List[int]] = None) -> tuple:
    """``arch`` as a compute capability, or ValueError saying why this toolchain cannot target it."""
    from numba_tc import build
    from numba_tc.config import TOOLCHAIN_MIN_CC
    cc = build.parse_cc(arch)
    num = cc[0] * 10 + cc[1]
    floor = "sm_%d%d" % TOOLCHAIN_MIN_CC
    listed = ", ".join(f"sm_{a}" for a in archs) if archs else ""
    if cc[:2] < TOOLCHAIN_MIN_CC:
        raise ValueError(f"{arch} is older than CUDA 13's oldest target, {floor}: the toolchain numba_tc "
                         f"compiles with (numba-cuda[cu13]) no longer builds for it" + (f"; targets: {listed}" if listed else ""))
    if archs and num not in archs:
        raise ValueError(f"{arch} is not a target of this CUDA compiler; targets: {listed} "
                         "(each also as sm_XYa from sm_90a on)")
    if len(cc) > 2 and num < 90:
        raise ValueError(f"{arch}: architecture-specific targets (the 'a' suffix) exist from sm_90a on; "
                         f"use sm_{num}")
    return cc


def runs_on_arch(v, cc) -> Optional[str]:
    """Why variant ``v`` cannot be compiled for target ``cc`` ((9, 0, 'a') for sm_90a), or None."""
    from numba_tc.config import TOOLCHAIN_MIN_CC
    low = max(tuple(v.min_cc), TOOLCHAIN_MIN_CC)
    if tuple(cc[:2]) < low:
        return f"needs sm_{low[0]}{low[1]} or newer"
    if v.max_cc is not None and (tuple(cc[:2]) != tuple(v.max_cc) or len(cc) < 3):
        return f"runs only on sm_{v.max_cc[0]}{v.max_cc[1]}a (its instructions exist on that target alone)"
    return None


def _compile_plan(args, targets) -> List[Tuple[str, List[str], Optional[List[str]]]]:
    """(target, variant names, dtypes or None for all) for each target, saying what is skipped."""
    import numba_tc
    from numba_tc import aot
    out = []
    for a in targets:
        cc = check_arch(a)
        if args.variants:
            names, dtypes = list(dict.fromkeys(args.variants)), args.dtypes
        elif args.all:
            names, dtypes = [v.name for v in numba_tc.variants()], args.dtypes
        else:
            dtypes = args.dtypes or list(aot.COMMON_DTYPES)
            names = aot.auto_variants(cc, dtypes)
        skipped = [n for n in names if runs_on_arch(numba_tc.get_variant(n), cc)]
        if skipped and not args.variants:
            print(f"{a}: skipping {', '.join(skipped)} ({runs_on_arch(numba_tc.get_variant(skipped[0]), cc)})")
        out.append((a, [n for n in names if n not in skipped], dtypes))
    return out


def _describe_plan(plan, jobs) -> str:
    """One line per target: the kernels by variant, and the estimate on this machine."""
    from numba_tc import aot
    lines = []
    for a, names, dtypes in plan:
        todo = aot.plan(names, [a], dtypes) if names else []
        by = ", ".join(f"{n} {len(aot.plan([n], [a], dtypes))}" for n in names)
        lines.append(f"{a}: {len(todo)} kernels ({by or 'none'}) for "
                     f"{', '.join(dtypes) if dtypes else 'every dtype they take'}; about "
                     f"{aot._duration(aot.estimate(todo, jobs))} on this machine's {jobs or os.cpu_count()} "
                     f"core(s) if none is cached")
    return "\n".join(lines)


def _machine() -> str:
    """This machine, for a compile record: cores and CPU model."""
    import platform
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores, {model}"


@command("compile", "compile kernels into the disk cache ahead of time (no GPU needed with --arch)",
         _compile_arguments)
def cmd_compile(args) -> int:
    from numba_tc import aot, cache
    import numba_tc
    error = args.parser.error
    archs = supported_archs()
    for a in args.arch or []:
        try:
            check_arch(a, archs)
        except ValueError as e:
            error(str(e))
    if args.variants and args.all:
        error("--variants cannot be combined with --all")
    gpu = _gpu_present()
    targets = args.arch or ([aot._local_arch()] if gpu or args.variants or args.all else ["sm_90a"])
    named = [numba_tc.get_variant(n) for n in dict.fromkeys(args.variants or [])]
    for v in named:
        for a in targets:
            why = runs_on_arch(v, check_arch(a))
            if why:
                error(f"variant {v.name} {why}, not {a}" + (" (add --arch sm_90a)" if "sm_90a" in why else ""))
        if args.dtypes and not set(args.dtypes) & set(v.dtypes):
            error(f"variant {v.name} takes {', '.join(v.dtypes)}, not {', '.join(args.dtypes)}")
    stamp = None
    if args.json:
        from numba_tc import bench
        try:
            stamp = bench.stamp(args.json, gpu=gpu)
        except bench.DirtyTreeError as e:
            error(str(e))
    plan = _compile_plan(args, targets)
    if not (gpu or args.arch or args.variants or args.all) or args.dry_run:
        if not args.dry_run:
            print("No CUDA GPU here, so no target to compile for. The default for an H100 or H200 would be:")
        print(_describe_plan(plan, args.jobs))
        if not args.dry_run:
            print("Name the target (python -m numba_tc compile --arch sm_90a; sm_80 for an A100, sm_89 for an "
                  "L4), narrow it (--variants hopper --dtypes bfloat16), or take everything (--all).")
        return 0 if args.dry_run else 2
    print(_describe_plan(plan, args.jobs), flush=True)
    t = time.perf_counter()
    recs = []
    for a, names, dtypes in plan:
        if names:
            recs += aot.precompile(names, [a], dtypes, args.jobs, progress=not args.no_progress)
    wall = time.perf_counter() - t
    new = [r for r in recs if not r["cached"]]
    print(f"{len(recs)} kernels for {', '.join(sorted({r['arch'] for r in recs})) or 'no target'}: "
          f"{len(new)} compiled ({sum(r['seconds'] for r in new):.0f} s of compiling, "
          f"{wall:.0f} s wall), {len(recs) - len(new)} already cached, in {cache.cache_dir()}")
    if args.json:
        import json
        rec = dict(kind="compile", command="python -m numba_tc " + " ".join(shlex.quote(a) for a in args.argv),
                   machine=_machine(), jobs=args.jobs or os.cpu_count(), archs=targets,
                   variants=sorted({n for _, ns, _ in plan for n in ns}),
                   dtypes=args.dtypes or (None if (args.all or args.variants) else list(aot.COMMON_DTYPES)),
                   kernels=len(recs), compiled=len(new), seconds=round(wall, 1),
                   cpu_seconds=round(sum(r["seconds"] for r in new), 1), **stamp)
        rows = []
        if os.path.exists(args.json):
            with open(args.json, encoding="utf-8") as f:
                rows = json.load(f)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows + [rec], f, indent=1)
        print(f"record appended to {args.json}")
    return 0


# ---------------------------------------------------------------------------------------------
# the main job, with no arguments

def main_job(size=None) -> int:
    """On a GPU, ``bench`` with its defaults; without one, the simulator check (at ``size``, by
    default demo's) and the recorded results."""
    if _gpu_present():
        return main(["bench"])
    print("No CUDA GPU here: first every SIMT rung in Numba's CUDA simulator (correctness, not speed), "
          "then what the kernels do on the GPU they were measured on, from the committed results.\n", flush=True)
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
    try:
        sys.exit(main())
    except BrokenPipeError:              # e.g. piped into head: stop quietly
        sys.stderr.close()
        sys.exit(1)
    except KeyboardInterrupt:
        print("numba_tc: interrupted", file=sys.stderr)
        sys.exit(130)
