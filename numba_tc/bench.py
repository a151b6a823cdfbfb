"""Benchmarks: every variant checked, then timed side by side with cuBLAS on the same inputs.

For each size: fresh random inputs on the GPU (torch or CuPy, whichever is present; they also
give cuBLAS); a float64 reference on the GPU; for each variant a correctness check into a
NaN-poisoned output, then CUDA-event timing (warm-up, then the median of many launches queued
behind a short spin kernel so host launch overhead is not timed), in rounds alternating with
cuBLAS on the same inputs, so that both see the same clocks (``time_interleaved``). Results go
to a table on screen, a JSON list of records and a matplotlib Figure (saved as a PNG when given a
path). ``recorded()`` reads the committed results of a source checkout (the newest GPU's), and
``stamp()`` gives what every record written to a results file names: its GPU and a clean commit.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from typing import Callable, List, Optional, Sequence

import numpy as np

from .results import (ALLOW_DIRTY_ENV, GPUS, RESULTS_DIR, RESULTS_ENV, RESULTS_FILE, TOP_RUNGS,  # noqa: F401
                      DirtyTreeError, Record, _device_name, clean_commit, commit_id, environment, find_results,
                      gpu_tag, load_records, merge_records, newest_results, recorded, results_dir, results_name,
                      stamp)

__all__ = ["Record", "run", "time_gpu", "time_interleaved", "load_records", "merge_records", "plot",
           "plot_ladders", "table", "recorded", "find_results", "progress_bar", "NoCublasError", "stamp",
           "DirtyTreeError"]


_spin_kernel = None


def _spin(us: int):
    """Keep the GPU busy for about ``us`` microseconds, so launches queue up behind it."""
    global _spin_kernel
    from numba import cuda
    if _spin_kernel is None:
        @cuda.jit
        def spin(n):
            for _ in range(n):
                cuda.nanosleep(1000)
        _spin_kernel = spin
    import warnings
    from numba.core.errors import NumbaPerformanceWarning
    with warnings.catch_warnings():           # (one thread on purpose: it only waits)
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        _spin_kernel[1, 1](max(int(us), 1))


def _samples(fn: Callable[[], None], min_reps: int, max_reps: int, budget_s: float,
             warmup: int) -> List[float]:
    """Milliseconds of each of many back-to-back launches of ``fn`` (after ``warmup`` calls),
    queued behind a short spin kernel so that host launch overhead is not timed."""
    from numba import cuda
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    e0, e1 = cuda.event(), cuda.event()
    e0.record(); fn(); e1.record(); e1.synchronize()
    one = max(cuda.event_elapsed_time(e0, e1), 1e-3)
    reps = int(min(max_reps, max(min_reps, budget_s * 1e3 / one)))
    starts = [cuda.event() for _ in range(reps)]
    ends = [cuda.event() for _ in range(reps)]
    t = time.perf_counter()
    fn()                                           # measure the host's enqueue cost
    cuda.synchronize()
    host_us = (time.perf_counter() - t) * 1e6
    _spin(min(reps * (host_us + 20) + 500, 200_000))
    for s, e in zip(starts, ends):
        s.record(); fn(); e.record()
    cuda.synchronize()
    return [cuda.event_elapsed_time(s, e) for s, e in zip(starts, ends)]


def time_gpu(fn: Callable[[], None], min_reps: int = 10, max_reps: int = 100,
             budget_s: float = 1.5, warmup: int = 2) -> float:
    """Median milliseconds of ``fn`` (which enqueues GPU work on the default stream)."""
    return float(np.median(_samples(fn, min_reps, max_reps, budget_s, warmup)))


def time_interleaved(fns: Sequence[Callable[[], None]], rounds: int = 5, budget_s: float = 1.5,
                     reps: int = 20) -> List[float]:
    """Median milliseconds of each of ``fns``, timed in alternating rounds (up to ``reps``
    launches of each per round) so that all of them see the same clocks. A long GEMM runs the
    H100 at its power limit, where the clock follows the temperature: timed one after the
    other, cuBLAS bf16 8192^3 read anywhere from 681 to 770 TFLOP/s depending on what ran
    before it. Alternating cancels that drift out of the ratio."""
    per = budget_s / (rounds * len(fns))
    samples: List[List[float]] = [[] for _ in fns]
    for r in range(rounds):
        for i, fn in enumerate(fns):
            samples[i] += _samples(fn, 3, reps, per, 2 if r == 0 else 1)
    return [float(np.median(s)) for s in samples]


class NoCublasError(RuntimeError):
    """Neither torch (with CUDA) nor CuPy is installed: no cuBLAS to compare with."""


class _Backend:
    """Random device inputs, a float64 reference and cuBLAS, from torch or else CuPy."""

    def __init__(self):
        try:
            import torch
            if not torch.cuda.is_available():
                raise ImportError
            self.torch, self.name = torch, "torch"
            torch.backends.cuda.matmul.allow_tf32 = False      # FP32 cuBLAS, no TF32
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        except ImportError:
            self.torch = None
            try:
                import cupy
            except ImportError:
                raise NoCublasError("the cuBLAS comparison needs CuPy or torch (with CUDA): in a clone, "
                                    "uv run --extra bench --extra gpu python -m numba_tc; elsewhere, "
                                    "pip install 'cupy-cuda13x[ctk]'") from None
            self.cupy, self.name = cupy, "cupy"

    def set_tf32(self, on: bool):
        """cuBLAS in like precision: TF32 tensor cores only when the variants run tf32."""
        if self.torch is not None:
            self.torch.backends.cuda.matmul.allow_tf32 = on
        elif on:
            import cupy
            cupy._core.set_compute_type(cupy.float32, "CUBLAS_COMPUTE_32F_FAST_TF32")  # pragma: no cover

    def randn(self, rows, cols, dtype, trans=False):
        if self.torch is not None:
            t = self.torch.randn((cols, rows) if trans else (rows, cols), device="cuda",
                                 dtype=getattr(self.torch, dtype))
            return t.T if trans else t
        x = self.cupy.random.standard_normal((rows, cols), dtype=np.float32).astype(dtype)
        return self.cupy.asfortranarray(x) if trans else x

    def full_nan(self, rows, cols, dtype):
        if self.torch is not None:
            return self.torch.full((rows, cols), float("nan"), device="cuda", dtype=getattr(self.torch, dtype))
        return self.cupy.full((rows, cols), np.nan, dtype=dtype)

    def reference(self, a, b):
        if self.torch is not None:
            return a.double() @ b.double()
        return a.astype(np.float64) @ b.astype(np.float64)

    def rel_err(self, c, ref) -> float:
        if self.torch is not None:
            c64 = c.double()
            if not bool(self.torch.isfinite(c64).all()):
                return float("inf")
            return float(self.torch.linalg.norm(c64 - ref) / self.torch.linalg.norm(ref))
        c64 = c.astype(np.float64)
        if not bool(self.cupy.isfinite(c64).all()):
            return float("inf")
        return float(self.cupy.linalg.norm(c64 - ref) / self.cupy.linalg.norm(ref))

    def cublas(self, a, b, out):
        if self.torch is not None:
            return lambda: self.torch.matmul(a, b, out=out)
        return lambda: self.cupy.matmul(a, b, out=out)


class _Auto:
    """What ``run`` times for the variant name "auto": gemm's own choice, per problem."""
    name = ladder = "auto"
    dtypes = ("float32", "tf32", "float16", "bfloat16")
    min_cc, max_cc = (7, 5), None


AUTO = _Auto()


def run(variants: Sequence, sizes: Sequence[tuple], dtype: str = "float32", layout: str = "NN",
        command: str = "", progress=True, budget_s: float = 1.0, check: bool = True,
        log=print) -> List[Record]:
    """Check and time ``variants`` at each (m, n, k) against cuBLAS. Returns the records.

    variants: names or ``numba_tc.Variant`` objects (records carry ``v.name``); "auto" times what
    ``gemm`` chooses per problem (``allow_tf32`` for dtype "tf32"), and its records say what that
    was (``config``, from ``numba_tc.explain``).
    progress: True (a tqdm bar if tqdm is installed, else plain lines), False (plain lines), or a
    bar of your own (``set_description``, ``update``, ``close``) shared by several calls, which
    is left open.
    """
    from . import api
    be = _Backend()
    be.set_tf32(dtype == "tf32")
    arr_dtype = "float32" if dtype == "tf32" else dtype      # tf32: fp32 arrays, tf32 math
    dev, commit = _device_name(), commit_id()
    records: List[Record] = []
    steps = [(s, AUTO if v == "auto" else api.get_variant(v)) for s in sizes for v in variants]
    own_bar = isinstance(progress, bool)
    bar = progress_bar(len(steps), progress) if own_bar else progress
    inputs = {}
    for (m, n, k), v in steps:
        vname = v.name
        bar.set_description(f"{vname} {m}x{n}x{k}")
        key = (m, n, k)
        if key not in inputs:
            inputs.clear()
            a = be.randn(m, k, arr_dtype, trans=layout[0] == "T")
            b = be.randn(k, n, arr_dtype, trans=layout[1] == "T")
            inputs[key] = (a, b, be.reference(a, b) if check else None)
        a, b, ref = inputs[key]
        flop = 2.0 * m * n * k
        c = be.full_nan(m, n, arr_dtype)
        run_v = "auto" if v is AUTO else v
        tf32 = v is AUTO and dtype == "tf32"
        t = time.perf_counter()
        try:
            api.gemm(a, b, variant=run_v, out=c, allow_tf32=tf32)
        except ValueError as e:                # a variant that refuses these operands, by name
            if "cannot run this problem" not in str(e):
                raise
            log(f"skipped: {vname} {m}x{n}x{k}: {e}")
            bar.update(1)
            continue
        from numba import cuda
        cuda.synchronize()
        first = time.perf_counter() - t
        config = api.explain(a, b, "auto", out=c, allow_tf32=tf32) if v is AUTO else None
        err = be.rel_err(c, ref) if check else float("nan")
        tol = _tolerance(dtype)
        if check and not err <= tol:
            log(f"FAILED check: {vname} {m}x{n}x{k} {layout} rel_err={err:.3e} > {tol:.0e}; not timed")
            records.append(Record(vname, v.ladder, dtype, m, n, k, 0.0, None, None, err, dev, commit,
                                  command, float("nan"), None, first, layout, config, dev))
            bar.update(1)
            continue
        # the variant and cuBLAS in alternating rounds, on the same inputs (see time_interleaved)
        c_cublas = be.full_nan(m, n, arr_dtype)
        ms, cms = time_interleaved([lambda: api.gemm(a, b, variant=run_v, out=c, allow_tf32=tf32),
                                    be.cublas(a, b, c_cublas)],
                                   budget_s=2 * budget_s)
        tf, ctf = flop / ms / 1e9, flop / cms / 1e9
        records.append(Record(vname, v.ladder, dtype, m, n, k, tf, ctf, tf / ctf, err, dev,
                              commit, command, ms, cms, first, layout, config, dev))
        bar.update(1)
    if own_bar:
        bar.close()
    return records


def _tolerance(dtype):
    from .verify import TOLERANCE
    return TOLERANCE[dtype]


class _Plain:
    def __init__(self, total):
        self.total, self.i, self.t0 = total, 0, time.perf_counter()

    def set_description(self, s):
        print(f"[{self.i + 1}/{self.total} {time.perf_counter() - self.t0:6.1f}s] {s}", file=sys.stderr, flush=True)

    def update(self, n):
        self.i += n

    def close(self):
        pass


def progress_bar(total: int, fancy: bool = True):
    """A progress bar: tqdm's when ``fancy`` and tqdm is installed, else one plain line per step
    (on stderr)."""
    if fancy:
        try:
            from tqdm.auto import tqdm
            return tqdm(total=total, file=sys.stderr)
        except ImportError:
            pass
    return _Plain(total)


def _rows(records: Sequence) -> List[dict]:
    return [asdict(r) if isinstance(r, Record) else dict(r) for r in records]


def table(records: Sequence) -> str:
    """The records as a text table (a ladder column when they come from more than one ladder)."""
    rows = _rows(records)
    w = max([len("variant")] + [len(r["variant"]) for r in rows]) + 2
    ladders = len({r.get("ladder") for r in rows}) > 1
    head = (f"{'ladder':<8}" if ladders else "") + f"{'variant':<{w}}{'dtype':<10}{'m x n x k':<18}"
    lines = [head + f"{'TFLOP/s':>9}{'cuBLAS':>9}{'x cuBLAS':>10}{'rel_err':>10}"]
    for r in rows:
        cb = f"{r['cublas_tflops']:.1f}" if r.get("cublas_tflops") else "-"
        ra = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
        lines.append((f"{r['ladder']:<8}" if ladders else "") + f"{r['variant']:<{w}}{r['dtype']:<10}"
                     f"{str(r['m'])+'x'+str(r['n'])+'x'+str(r['k']):<18}"
                     f"{r['tflops']:>9.2f}{cb:>9}{ra:>10}{r['rel_err']:>10.1e}")
    return "\n".join(lines)


_Picture = None


def _figure(width: float, height: float, ncols: int = 1, nrows: int = 1):
    """A matplotlib Figure made without pyplot (no backend is switched, nothing global is kept)
    that IPython and Jupyter display as a PNG when a cell returns it, whatever the backend.
    (None, None) without matplotlib."""
    global _Picture
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None, None
    if _Picture is None:
        class Picture(Figure):
            def _repr_png_(self):
                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=100)
                return buf.getvalue()
        _Picture = Picture
    fig = _Picture(figsize=(width, height))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def _finish(fig, path: Optional[str]):
    fig.tight_layout()
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=120)
    return fig


def plot(records: Sequence, path: Optional[str] = None, title: str = ""):
    """TFLOP/s per variant (bars, one group per size) with cuBLAS marked, and % of cuBLAS; one
    variant over more than two shapes gets the sweep picture instead.

    Returns the matplotlib Figure (a notebook displays it), saved as a PNG at ``path`` when one
    is given; None when matplotlib is not installed or there are no records."""
    rows = _rows(records)
    if not rows:
        return None
    names = list(dict.fromkeys(r["variant"] for r in rows))
    sizes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in rows))
    if len(names) == 1 and len(sizes) > 2:
        return _plot_sweep(rows, path, title)
    fig, axes = _figure(13, 4.5, ncols=2)
    if fig is None:
        return None
    ax1, ax2 = axes[0]
    w = 0.8 / len(sizes)
    for j, s in enumerate(sizes):
        by = {r["variant"]: r for r in rows if (r["m"], r["n"], r["k"]) == s}
        xs = [i + j * w for i in range(len(names))]
        label = "x".join(map(str, s))
        ax1.bar(xs, [by[v]["tflops"] if v in by else 0 for v in names], w, label=label)
        ax2.bar(xs, [100 * (by[v]["ratio"] or 0) if v in by else 0 for v in names], w, label=label)
        cb = [r["cublas_tflops"] for r in by.values() if r.get("cublas_tflops")]
        if cb:
            ax1.axhline(cb[0], ls="--", lw=1, color=f"C{j}")
    for ax in (ax1, ax2):
        ax.set_xticks([i + w * (len(sizes) - 1) / 2 for i in range(len(names))])
        ax.set_xticklabels(names, rotation=30, ha="right")
        ax.legend(fontsize=8)
    ax1.set_ylabel("TFLOP/s (dashed: cuBLAS)")
    ax2.set_ylabel("% of cuBLAS")
    ax2.axhline(100, color="k", lw=0.8)
    fig.suptitle(title)
    return _finish(fig, path)


LADDER_COLORS = {"simt": "C0", "mma": "C1", "wgmma": "C2"}


def plot_ladders(records: Sequence, path: Optional[str] = None, title: str = ""):
    """The ladders side by side with cuBLAS: for each size, TFLOP/s per variant (log scale,
    coloured by ladder) next to cuBLAS in each dtype (grey), and each variant's % of cuBLAS in
    its own dtype. Returns the Figure (saved at ``path`` if given), or None (no matplotlib)."""
    rows = [r for r in _rows(records) if r.get("tflops")]
    if not rows:
        return None
    sizes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in rows))
    fig, axes = _figure(13, 4.8 * len(sizes), ncols=2, nrows=len(sizes))
    if fig is None:
        return None
    for (ax1, ax2), s in zip(axes, sizes):
        at = [r for r in rows if (r["m"], r["n"], r["k"]) == s]
        bars = []                                  # (label, TFLOP/s, colour, hatch)
        for dt in dict.fromkeys(r["dtype"] for r in at):
            group = [r for r in at if r["dtype"] == dt]
            bars += [(r["variant"], r["tflops"], LADDER_COLORS.get(r["ladder"], "C4"), "") for r in group]
            cb = [r["cublas_tflops"] for r in group if r.get("cublas_tflops")]
            if cb:
                bars.append((f"cuBLAS {dt}", float(np.median(cb)), "0.6", "//"))
        xs = range(len(bars))
        drawn = ax1.bar(xs, [b[1] for b in bars], color=[b[2] for b in bars])
        for x, patch, (_, tf, _, hatch) in zip(xs, drawn, bars):
            patch.set_hatch(hatch or None)
            ax1.text(x, tf * 1.1, f"{tf:.0f}" if tf >= 10 else f"{tf:.1f}", ha="center", fontsize=8)
        ax1.set_yscale("log")
        ax1.set_ylim(min(b[1] for b in bars) / 4, max(b[1] for b in bars) * 2.5)
        ax1.set_xticks(list(xs))
        ax1.set_xticklabels([b[0] for b in bars], rotation=30, ha="right", fontsize=8)
        ax1.set_ylabel("TFLOP/s (log scale)")
        ax1.set_title(f"{'x'.join(map(str, s))}: TFLOP/s", fontsize=10)
        pct = [(r["variant"], 100 * r["ratio"], LADDER_COLORS.get(r["ladder"], "C4"), r["dtype"])
               for r in at if r.get("ratio")]
        ax2.bar(range(len(pct)), [p[1] for p in pct], color=[p[2] for p in pct])
        for x, p in enumerate(pct):
            ax2.text(x, p[1] + 1.5, f"{p[1]:.0f}%", ha="center", fontsize=8)
        ax2.axhline(100, color="k", lw=0.8)
        ax2.set_xticks(range(len(pct)))
        ax2.set_xticklabels([f"{p[0]} ({p[3]})" for p in pct], rotation=30, ha="right", fontsize=8)
        ax2.set_ylim(0, max([110] + [p[1] + 10 for p in pct]))
        ax2.set_ylabel("% of cuBLAS in the same dtype")
        ax2.set_title(f"{'x'.join(map(str, s))}: against cuBLAS", fontsize=10)
    from matplotlib.patches import Patch
    seen = list(dict.fromkeys(r["ladder"] for r in rows))
    names = {"simt": "SIMT (CUDA cores)", "mma": "mma.sync (tensor cores)", "wgmma": "Hopper (TMA + wgmma)"}
    axes[0][0].legend(handles=[Patch(color=LADDER_COLORS.get(l, "C4"), label=names.get(l, l)) for l in seen]
                      + [Patch(facecolor="0.6", hatch="//", label="cuBLAS")], fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title)
    return _finish(fig, path)


def geomean_ratio(records: Sequence) -> Optional[float]:
    """Geometric mean of the ratios to cuBLAS (None if any record has none)."""
    rows = _rows(records)
    ratios = [r["ratio"] for r in rows]
    if not ratios or any(not x for x in ratios):
        return None
    return float(np.exp(np.mean(np.log(ratios))))


def _plot_sweep(rows, path, title):
    """One variant over many shapes: % of cuBLAS per shape, the geometric mean marked."""
    fig, axes = _figure(max(8, 0.6 * len(rows)), 4.5)
    if fig is None:
        return None
    ax = axes[0][0]
    labels = [f"{r['m']}x{r['n']}x{r['k']}" for r in rows]
    pct = [100 * (r["ratio"] or 0) for r in rows]
    ax.bar(range(len(rows)), pct, color=["C2" if p >= 100 else "C0" for p in pct])
    for i, r in enumerate(rows):
        ax.text(i, pct[i] + 1, f"{r['tflops']:.0f}", ha="center", fontsize=7)
    g = geomean_ratio(rows)
    if g:
        ax.axhline(100 * g, ls="--", color="C3", label=f"geometric mean {100 * g:.1f}%")
        ax.legend(fontsize=8)
    ax.axhline(100, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, rotation=40, ha="right", fontsize=8)
    ax.set_ylabel("% of cuBLAS (labels: TFLOP/s)")
    ax.set_title(title)
    return _finish(fig, path)


_FIRST_CALL = """
import json
import time
import torch
t0 = time.perf_counter()
import numba_tc
from numba_tc import build
t1 = time.perf_counter()
compiled = []                       # kernels this process compiles (none, when the cache has them)
_compile_cubin = build.compile_cubin
def _counted(kernel, arch):
    compiled.append(kernel.name)
    return _compile_cubin(kernel, arch)
build.compile_cubin = _counted
torch.manual_seed(0)
m, n, k = {shape}
def operand(rows, cols, trans):     # a column-major operand is the transpose of a row-major one
    x = torch.randn((cols, rows) if trans else (rows, cols), device="cuda", dtype=torch.{torch_dtype})
    return x.T if trans else x
a, b = operand(m, k, {ta}), operand(k, n, {tb})
torch.cuda.synchronize()
t2 = time.perf_counter()
c = numba_tc.gemm(a, b, variant="{variant}", allow_tf32={tf32})
torch.cuda.synchronize()
t3 = time.perf_counter()
ref = a.double() @ b.double()
err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
print(json.dumps(dict(import_seconds=t1 - t0, seconds=t3 - t2, rel_err=err, compiled=compiled)))
"""


def first_call(variant: str, dtype: str, size: int = 1024, cache_dir: Optional[str] = None,
               shape: Optional[Sequence[int]] = None, layout: str = "NN") -> dict:
    """A fresh Python process's ``import numba_tc`` and first ``gemm`` (torch operands of
    ``size``^3, or ``shape`` (m, n, k), made and synchronized before the clock starts), in
    seconds, with the result's relative error and the kernels that process compiled (none when
    the cache has them); ``cache_dir``: the kernel cache it uses (NUMBA_TC_CACHE_DIR). ``dtype``
    "tf32": float32 operands with ``allow_tf32=True``. ``layout``: A's and B's, "N" row-major,
    "T" column-major (a transposed view)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if cache_dir:
        env["NUMBA_TC_CACHE_DIR"] = cache_dir
    m, n, k = tuple(shape) if shape else (size,) * 3
    code = _FIRST_CALL.format(variant=variant, shape=(m, n, k), ta=layout[0] == "T", tb=layout[1] == "T",
                              torch_dtype="float32" if dtype == "tf32" else dtype, tf32=dtype == "tf32")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    if p.returncode:
        raise RuntimeError(f"the fresh process failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])

