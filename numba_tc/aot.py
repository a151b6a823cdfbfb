"""Ahead-of-time compiles: the kernels the registry's variants run, built into the disk cache
before any call needs them, with or without a GPU (``python -m numba_tc compile``)."""
from __future__ import annotations

import os
import time

from . import build, cache
from .api import get_variant, variants as registry

__all__ = ["precompile", "auto_variants", "plan", "estimate", "COMMON_DTYPES"]


_JOBS: list = []


def _compile_job(i: int):
    kernel, arch = _JOBS[i]
    t = time.perf_counter()
    build.cubin(kernel, arch)
    return i, time.perf_counter() - t


def precompile(variants=None, archs=None, dtypes=None, jobs=None, progress: bool = True):
    """Fill the disk cache ahead of time, with or without a GPU: every kernel the planners of
    ``variants`` (names or Variants; default all) can pick without an epilogue (``Variant.kernels``:
    each layout, alignment of the operands' rows, output dtype, and the split and helper kernels
    of a plan; tests/test_aot_coverage.py checks the lists against the planners), for each input
    dtype they take (or those in ``dtypes``; "tf32": float32 arrays on tensor cores) and each
    target in ``archs`` (default: this GPU's, or 'sm_90a' without one). Compiles in ``jobs``
    processes (default: one per core). Returns one record per kernel: {kernel, arch, seconds,
    cached}."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if archs is None:
        archs = [_local_arch()]
    todo = plan(variants, archs, dtypes)
    records = [{"kernel": k.name, "arch": arch, "seconds": 0.0,
                "cached": cache.load(build.key_material(k, arch), arch) is not None} for k, arch, _ in todo]
    index = [i for i, r in enumerate(records) if not r["cached"]]
    _JOBS[:] = [todo[i][:2] for i in index]
    bar = _progress(len(_JOBS), progress, estimate([todo[i] for i in index], jobs))
    if _JOBS:
        n = min(jobs or os.cpu_count() or 1, len(_JOBS))
        if n == 1:
            results = map(_compile_job, range(len(_JOBS)))
        else:
            pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
            results = pool.map(_compile_job, range(len(_JOBS)))
        for j, seconds in results:
            records[index[j]]["seconds"] = seconds
            bar.update(1)
        if n > 1:
            pool.shutdown()
    bar.close()
    return records


def _local_arch() -> str:
    """This machine's GPU target, or 'sm_90a' (the H100/H200) without a GPU."""
    from . import driver
    try:
        if driver.device_count() > 0:
            return driver.arch(driver.capability(0))
    except Exception:
        pass
    return "sm_90a"


def _progress(total: int, enabled: bool, seconds: float = 0.0):
    """tqdm's bar (count, rate, time left), or without tqdm a line at each tenth: the count and the
    time left, from the estimate until kernels have been timed."""
    if enabled:
        try:
            from tqdm.auto import tqdm
            return tqdm(total=total, desc=f"compiling kernels (estimate {_duration(seconds)})", unit="kernel")
        except ImportError:
            pass

    class _Lines:
        def __init__(self):
            self.done, self.t0, self.next = 0, time.perf_counter(), 0

        def update(self, n):
            self.done += n
            if enabled and self.done >= self.next:
                took = time.perf_counter() - self.t0
                left = took / self.done * (total - self.done) if self.done else seconds
                print(f"compiled {self.done}/{total} kernels, about {_duration(left)} left", flush=True)
                self.next = self.done + max(1, total // 10)

        def close(self):
            pass
    return _Lines()


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# What ``python -m numba_tc compile`` builds unless told otherwise: the variants ``auto`` picks on
# the target, for the input dtypes most programs use (tf32 and fp8 when named, or --all).
COMMON_DTYPES = ("bfloat16", "float16", "float32")
# CPU seconds to compile one kernel, by ladder, for the estimate: one core of a 2-core x86 machine
# (numba-cuda 0.30.4, sm_90a), one kernel of each kind timed alone. Machines differ; the progress
# bar measures as it goes.
SECONDS_PER_KERNEL = {"simt": 8.0, "mma": 5.6, "wgmma": 3.7, "rows": 3.0}


def auto_variants(cc, dtypes=COMMON_DTYPES) -> list:
    """The variants ``gemm(..., variant="auto")`` can pick on compute capability ``cc`` for these
    input dtypes ("tf32": float32 arrays with ``allow_tf32``): for each dtype and output dtype, its
    candidates best first (``registry.candidates``) down to the first that takes every operand (no
    ``auto`` rule, no ``check``)."""
    from .errors import UnsupportedDeviceError
    from .registry import candidates
    names = []
    for prec in dtypes:
        arrays = "float32" if prec == "tf32" else prec
        for out in dict.fromkeys((arrays, "bfloat16", "float32")):
            try:
                cands = candidates("auto", prec, out, tuple(cc[:2]))
            except (TypeError, UnsupportedDeviceError):
                continue
            for v in cands:
                names.append(v.name)
                if v.auto is None and v.check is None:
                    break
    return list(dict.fromkeys(names))


def plan(variants=None, archs=("sm_90a",), dtypes=None) -> list:
    """(kernel, arch, ladder) for every kernel ``precompile`` would build (see there), in order,
    each once."""
    vs = [get_variant(v) for v in variants] if variants else registry()
    out, seen = [], set()
    for arch in archs:
        cc = build.parse_cc(arch)[:2]
        for v in vs:
            if cc < tuple(v.min_cc) or (v.max_cc is not None and cc > tuple(v.max_cc)) or v.kernels is None:
                continue
            for dt in v.dtypes:
                if dtypes and dt not in dtypes:
                    continue
                for k in v.kernels(dt):
                    if (k.key, arch) not in seen:
                        seen.add((k.key, arch))
                        out.append((k, arch, v.ladder))
    return out


def estimate(todo, jobs=None) -> float:
    """Seconds of wall time to compile ``todo`` ((kernel, arch, ladder) triples) in ``jobs``
    processes (default: one per core), from ``SECONDS_PER_KERNEL``."""
    cpu = sum(SECONDS_PER_KERNEL.get(t[2], 4.0) for t in todo)
    return cpu / max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
