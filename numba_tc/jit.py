"""How numba_tc writes kernels: ``Kernel`` specifications, inlined device functions, and loops
unrolled where Numba cannot.

* ``kernel(fn, params, launch_bounds=..., max_shared=...)``: a kernel is a plain Python function
  plus what its launch needs: the kinds of its parameters (``"i64"``: an int64 value or device
  address; ``"map"``: a TMA tensor map passed by value), its launch bounds and its shared-memory
  carveout. ``build.py`` compiles it (Numba for the body, a generated ``__global__`` entry,
  nvJitLink) and caches the cubin on disk; ``driver.load`` loads it. Under the CUDA simulator
  the same function runs through ``cuda.jit``.
* ``kernel_factory``: kernels are made by factories whose arguments (configuration, dtypes,
  layouts) are compile-time constants of the closure; the factory's name and arguments are the
  kernel's identity, the key of every cache.
* ``device(fn)``: a device function inlined at the LLVM level (``forceinline``): the kernels are
  built from small helpers, and a call left in the hot loop would cost more than it does.
* ``unrolled(step, n_max)``: Numba has no ``#pragma unroll``, and NVVM declines to fully unroll a
  loop whose body holds 64 FMAs. ``unrolled`` writes the calls out, ``step(0, ...)`` to
  ``step(n_max - 1, ...)``, each guarded by ``k < n``; with ``n`` a compile-time constant the
  guards fold, every shared-memory offset becomes an immediate, and the scheduler may overlap one
  step's loads with the previous step's FMAs.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Tuple

from numba import cuda, int64

from .intrinsics import SIMULATOR

__all__ = ["Kernel", "kernel", "kernel_factory", "device", "unrolled"]

PARAM_TYPES = ("i64", "map")


@dataclass(frozen=True)
class Kernel:
    """A kernel as data: the Python function, its parameters' kinds, launch bounds, carveout,
    and ``key``, the identity every cache uses (set by ``kernel_factory``)."""
    fn: Callable = field(repr=False, compare=False)
    params: Tuple[str, ...]
    launch_bounds: Optional[Tuple[int, int]] = None
    max_shared: bool = False
    key: tuple = ()

    @property
    def name(self) -> str:
        return f"{self.key[0]}{self.key[1:]}" if self.key else self.fn.__name__

    @property
    def py_func(self):
        return self.fn

    @functools.cached_property
    def simulator(self):
        """The kernel as a Numba simulator dispatcher (the SIMT ladder runs there)."""
        return cuda.jit(self.fn)


def kernel(fn, params, launch_bounds=None, max_shared=False, values: int = 0) -> Kernel:
    """``fn`` as a kernel with parameters of kinds ``params`` (one per parameter of ``fn``).
    ``max_shared``: ask for the largest shared-memory carveout of L1. ``values``: ``fn`` takes
    one more parameter, a tuple of that many int64 run-time values (an epilogue's), which the
    kernel receives as that many more int64 parameters."""
    params = tuple(params)
    n = len(inspect.signature(fn).parameters) - (1 if values else 0)
    if len(params) != n or any(p not in PARAM_TYPES for p in params):
        raise ValueError(f"{fn.__name__} takes {n} parameters; params must name each ({PARAM_TYPES}), got {params}")
    if values:
        fn = _with_values(fn, n, values)
        params += ("i64",) * values
    return Kernel(fn, params, tuple(launch_bounds) if launch_bounds else None, max_shared)


def _with_values(body, nfixed: int, n: int):
    """A kernel function taking ``nfixed`` + ``n`` parameters that calls ``body`` with the last
    ``n`` as one tuple."""
    fixed = [f"p{i}" for i in range(nfixed)]
    vals = [f"e{i}" for i in range(n)]
    name = body.__name__
    src = f"def {name}({', '.join(fixed + vals)}):\n    body({', '.join(fixed)}, ({', '.join(vals)},))\n"
    ns = {"body": device(body)}
    exec(compile(src, f"<kernel {name} with {n} values>", "exec"), ns)
    return ns[name]


def kernel_factory(factory):
    """Decorate a function returning ``kernel(...)``: results are cached, and each kernel's key is
    the factory's qualified name (its module's path in the package, e.g. ``hopper.kernel``) and
    its arguments in order, defaults filled in (which must have stable reprs), however they were
    passed, by position or keyword."""
    module = factory.__module__
    qual = f"{module.split('.', 1)[1] if module.startswith(__package__ + '.') else module}.{factory.__qualname__}"

    sig = inspect.signature(factory)

    @functools.lru_cache(maxsize=None)
    def make(*args):
        return replace(factory(*args), key=(qual,) + tuple(repr(a) for a in args))

    @functools.wraps(factory)
    def wrapper(*args, **kwargs):
        if kwargs or len(args) < len(sig.parameters):   # defaults count: one key however it is called
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            args = bound.args
        return make(*args)
    wrapper.cache_clear = make.cache_clear
    return wrapper


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
