"""Benchmarks: every variant checked, then timed side by side with cuBLAS on the same inputs.

For each size: fresh random inputs on the GPU (torch or CuPy, whichever is present; they also
give cuBLAS); a float64 reference on the GPU; for each variant a correctness check into a
NaN-poisoned output, then CUDA-event timing (warm-up, then the median of many launches queued
behind a short spin kernel so host launch overhead is not timed), in rounds alternating with
cuBLAS on the same inputs, so that both see the same clocks (``time_interleaved``). Results go
to a table on screen, a JSON list of records and a PNG plot.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional, Sequence

import numpy as np

__all__ = ["Record", "run", "time_gpu", "time_interleaved", "load_records", "merge_records", "plot", "table"]


@dataclass
class Record:
    variant: str
    ladder: str
    dtype: str
    m: int
    n: int
    k: int
    tflops: float
    cublas_tflops: Optional[float]
    ratio: Optional[float]
    rel_err: float
    device: str
    commit: str
    command: str
    ms: float = 0.0
    cublas_ms: Optional[float] = None
    first_call_s: Optional[float] = None
    layout: str = "NN"


def _commit() -> str:
    """The git commit measured (NUMBA_TC_COMMIT overrides: the GPU machine gets no .git)."""
    if os.environ.get("NUMBA_TC_COMMIT"):
        return os.environ["NUMBA_TC_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("+dirty" if dirty else "")) if sha else "unknown"
    except Exception:
        return "unknown"


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
            import cupy
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


def _device_name() -> str:
    from numba import cuda
    d = cuda.get_current_device()
    name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
    return name


def run(variants: Sequence[str], sizes: Sequence[tuple], dtype: str = "float32", layout: str = "NN",
        command: str = "", progress: bool = True, budget_s: float = 1.0, check: bool = True,
        log=print) -> List[Record]:
    """Check and time ``variants`` at each (m, n, k) against cuBLAS. Returns the records."""
    from . import api
    be = _Backend()
    be.set_tf32(dtype == "tf32")
    arr_dtype = "float32" if dtype == "tf32" else dtype      # tf32: fp32 arrays, tf32 math
    dev, commit = _device_name(), _commit()
    records: List[Record] = []
    steps = [(s, v) for s in sizes for v in variants]
    bar = _progress(len(steps), progress)
    inputs = {}
    for (m, n, k), vname in steps:
        bar.set_description(f"{vname} {m}x{n}x{k}")
        key = (m, n, k)
        if key not in inputs:
            inputs.clear()
            a = be.randn(m, k, arr_dtype, trans=layout[0] == "T")
            b = be.randn(k, n, arr_dtype, trans=layout[1] == "T")
            inputs[key] = (a, b, be.reference(a, b) if check else None)
        a, b, ref = inputs[key]
        flop = 2.0 * m * n * k
        v = api.get_variant(vname)
        c = be.full_nan(m, n, arr_dtype)
        t = time.perf_counter()
        try:
            api.gemm(a, b, variant=vname, out=c)
        except ValueError as e:                # a variant that refuses these operands, by name
            if "cannot run this problem" not in str(e):
                raise
            log(f"skipped: {vname} {m}x{n}x{k}: {e}")
            bar.update(1)
            continue
        from numba import cuda
        cuda.synchronize()
        first = time.perf_counter() - t
        err = be.rel_err(c, ref) if check else float("nan")
        tol = _tolerance(dtype)
        if check and not err <= tol:
            log(f"FAILED check: {vname} {m}x{n}x{k} {layout} rel_err={err:.3e} > {tol:.0e}; not timed")
            records.append(Record(vname, v.ladder, dtype, m, n, k, 0.0, None, None, err, dev, commit,
                                  command, float("nan"), None, first, layout))
            bar.update(1)
            continue
        # the variant and cuBLAS in alternating rounds, on the same inputs (see time_interleaved)
        c_cublas = be.full_nan(m, n, arr_dtype)
        ms, cms = time_interleaved([lambda: api.gemm(a, b, variant=vname, out=c), be.cublas(a, b, c_cublas)],
                                   budget_s=2 * budget_s)
        tf, ctf = flop / ms / 1e9, flop / cms / 1e9
        records.append(Record(vname, v.ladder, dtype, m, n, k, tf, ctf, tf / ctf, err, dev,
                              commit, command, ms, cms, first, layout))
        bar.update(1)
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


def _progress(total, enabled):
    if enabled:
        try:
            from tqdm.auto import tqdm
            return tqdm(total=total, file=sys.stderr)
        except ImportError:
            pass
    return _Plain(total)


def load_records(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def _key(r: dict):
    return (r["variant"], r["dtype"], r["m"], r["n"], r["k"], r.get("layout", "NN"), r["device"])


def merge_records(path: str, new: List[Record]) -> List[dict]:
    """Add records (``Record``s, or dicts as loaded from another run's JSON) to the JSON file at
    ``path``, replacing older ones of the same (variant, dtype, m, n, k, layout, device)."""
    rows = {_key(r): r for r in load_records(path)}
    for r in new:
        d = r if isinstance(r, dict) else asdict(r)
        rows[_key(d)] = d
    out = list(rows.values())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return out


def table(records: Sequence) -> str:
    rows = [asdict(r) if isinstance(r, Record) else r for r in records]
    lines = [f"{'variant':<13}{'dtype':<9}{'m x n x k':<18}{'TFLOP/s':>9}{'cuBLAS':>9}{'ratio':>8}{'rel_err':>10}"]
    for r in rows:
        cb = f"{r['cublas_tflops']:.1f}" if r.get("cublas_tflops") else "-"
        ra = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
        lines.append(f"{r['variant']:<13}{r['dtype']:<9}{str(r['m'])+'x'+str(r['n'])+'x'+str(r['k']):<18}"
                     f"{r['tflops']:>9.2f}{cb:>9}{ra:>8}{r['rel_err']:>10.1e}")
    return "\n".join(lines)


def plot(records: Sequence, path: str, title: str = "") -> Optional[str]:
    """TFLOP/s per variant (bars, one group per size) with cuBLAS marked, and % of cuBLAS."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = [asdict(r) if isinstance(r, Record) else r for r in records]
    if not rows:
        return None
    names = list(dict.fromkeys(r["variant"] for r in rows))
    sizes = list(dict.fromkeys((r["m"], r["n"], r["k"]) for r in rows))
    if len(names) == 1 and len(sizes) > 2:
        return _plot_sweep(plt, rows, path, title)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def geomean_ratio(records: Sequence) -> Optional[float]:
    """Geometric mean of the ratios to cuBLAS (None if any record has none)."""
    rows = [asdict(r) if isinstance(r, Record) else r for r in records]
    ratios = [r["ratio"] for r in rows]
    if not ratios or any(not x for x in ratios):
        return None
    return float(np.exp(np.mean(np.log(ratios))))


def _plot_sweep(plt, rows, path, title):
    """One variant over many shapes: % of cuBLAS per shape, the geometric mean marked."""
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(rows)), 4.5))
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
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def environment() -> str:
    import numba
    return f"python {platform.python_version()}, numba {numba.__version__}, numpy {np.__version__}"
