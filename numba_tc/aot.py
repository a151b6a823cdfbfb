"""Ahead-of-time compiles: the kernels the registry's variants run, built into the disk cache
before any call needs them, with or without a GPU (``python -m numba_tc compile``)."""
from __future__ import annotations

import os
import time

from . import build, cache
from .api import get_variant, variants as registry

__all__ = ["precompile"]


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
    vs = [get_variant(v) for v in variants] if variants else registry()
    todo, seen = [], set()
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
                        todo.append((k, arch))
    records = [{"kernel": k.name, "arch": arch, "seconds": 0.0,
                "cached": cache.load(build.key_material(k, arch), arch) is not None} for k, arch in todo]
    _JOBS[:] = [job for job, r in zip(todo, records) if not r["cached"]]
    index = [i for i, r in enumerate(records) if not r["cached"]]
    bar = _progress(len(_JOBS), progress)
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


def _progress(total: int, enabled: bool):
    if enabled:
        try:
            from tqdm.auto import tqdm
            return tqdm(total=total, desc="compiling kernels", unit="kernel")
        except ImportError:
            pass

    class _Quiet:
        def update(self, n):
            pass

        def close(self):
            pass
    return _Quiet()
