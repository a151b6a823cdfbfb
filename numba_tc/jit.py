"""How numba_tc compiles: lazily, cached on disk, inlined, and unrolled where Numba cannot.

* ``kernel(fn, launch_bounds=...)``: ``cuda.jit`` with Numba's on-disk cache, so a second process
  loads the cubin instead of recompiling (the cache is keyed by the kernel's bytecode, the
  constants it closes over, and the source file's timestamp).
* ``device(fn)``: a device function inlined at the LLVM level (``forceinline``): the kernels are
  built from small helpers, and a call left in the hot loop would cost more than it does.
* ``unrolled(step, n_max)``: Numba has no ``#pragma unroll``, and NVVM declines to fully unroll a
  loop whose body holds 64 FMAs. ``unrolled`` writes the calls out, ``step(0, ...)`` to
  ``step(n_max - 1, ...)``, each guarded by ``k < n``; with ``n`` a compile-time constant the
  guards fold, every shared-memory offset becomes an immediate, and the scheduler may overlap one
  step's loads with the previous step's FMAs.

Under the CUDA simulator the options it does not know are dropped; the code is the same.
"""
from __future__ import annotations

import inspect

from numba import cuda, int64

from .link import SIMULATOR

__all__ = ["kernel", "device", "unrolled"]


def kernel(fn, launch_bounds=None, max_shared=False, cache=True):
    """``cache=False`` for kernels that link ``.cu`` files: Numba's disk cache cannot pickle them
    ("Cannot pickle CUDACodeLibrary with linking files"); they are cached per process only.
``max_shared``: ask for the largest shared-memory carveout of L1. Without it the driver
    may pick a 64 KiB split on Hopper, and a 32 KiB block then runs alone on its SM (seen in
    Nsight Compute: "Block Limit Shared Mem 1", 12.5% occupancy)."""
    if SIMULATOR:
        return cuda.jit(fn)
    return cuda.jit(fn, cache=cache, launch_bounds=launch_bounds,
                    shared_memory_carveout="MaxShared" if max_shared else None)


def device(fn):
    if SIMULATOR:
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


def unrolled(step, n_max: int):
    """A device function ``f(n, *args)`` that runs ``step(k, *args)`` for k in 0..n-1, written out.

    ``step`` is a device function whose first parameter is the step index; ``n`` must be a
    compile-time constant no larger than ``n_max`` for the guards to fold away."""
    params = list(inspect.signature(step.py_func).parameters)[1:]
    args = ", ".join(params)
    # The index goes in as a plain int64, not Literal[int](k): Numba specialises a device function
    # on literal arguments, and nested unrolled helpers would otherwise be typed and compiled once
    # per index combination (hundreds of times). After inlining, LLVM folds the index anyway.
    body = "".join(f"    if {k} < n:\n        step(int64({k}), {args})\n" for k in range(n_max))
    src = f"def unrolled_{step.py_func.__name__}(n, {args}):\n{body}"
    namespace = {"step": step, "int64": int64}
    exec(compile(src, f"<unrolled {step.py_func.__name__} x{n_max}>", "exec"), namespace)
    fn = namespace[f"unrolled_{step.py_func.__name__}"]
    fn.__doc__ = f"step({step.py_func.__name__}) for k < n, unrolled up to {n_max}."
    return device(fn)
