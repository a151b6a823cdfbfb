"""A call's arguments checked before anything is built: each mistake a ``TypeError`` or
``ValueError`` (or a numba_tc exception) that names the argument and the problem. What needs no
GPU is checked before one is looked for, so that a call on NumPy arrays without a GPU names a bad
argument rather than ``NoGPUError``. (A call's epilogue arguments: ``epilogue_args``; a user's
epilogue function: ``user_epilogue``.)

* ``Operands``: a, b, out and out_dtype (kinds, dimensions, dtypes, layouts, writable and
  native-order NumPy arrays), and the variant's type;
* ``device_of``: the GPU that holds them all;
* ``simulator_size``: what Numba's CUDA simulator can run in reasonable time and memory;
* ``stream_for``: a stream the caller names, of a known kind, on the operands' device;
* ``launchable``: a plan's grids within the hardware's limits;
* ``out_aliases``: out against the arrays an epilogue reads.
"""
from __future__ import annotations

import os

import numpy as np

from . import arrays
from .arrays import array_kind, dtype_name
from .intrinsics import SIMULATOR
from .layout import FP8

__all__ = ["Operands", "FP8_OUT", "device_of", "simulator_size", "SIMULATOR_MNK", "stream_for", "launchable",
           "out_aliases"]

FP8_OUT = ("bfloat16", "float16", "float32")       # what fp8 inputs may produce (the first by default)


class Operands:
    """A call's operands, checked without a device: kinds, descriptions (``arrays.describe``),
    sizes, dtypes, ``out`` and ``out_dtype``."""

    def __init__(self, a, b, variant, out, out_dtype, a_cast=False):
        from .config import Variant
        if not isinstance(variant, (str, Variant)):
            raise TypeError(f"variant must be a variant name or a Variant, got {type(variant).__name__} "
                            "(pass an output array as out=...)")
        self.kind = kind = array_kind(a)
        if array_kind(b) != kind:
            raise TypeError(f"a and b must be the same kind of array, got {kind} and {array_kind(b)}")
        self.desc_a, self.desc_b = arrays.describe(a, "a"), arrays.describe(b, "b")
        (sa, da), (sb, db) = (self.desc_a[1], self.desc_a[3]), (self.desc_b[1], self.desc_b[3])
        for name, s in (("a", sa), ("b", sb)):
            if len(s) != 2:
                raise ValueError(f"{name} must be 2-D, got {len(s)}-D with shape {tuple(s)}")
        if a_cast:                     # a float32 a read as b's 16-bit type (``prepared.prepare``)
            if da != "float32" or db not in ("float16", "bfloat16"):
                raise TypeError(f"a_cast reads a float32 a as b's 16-bit type, not {da} as {db}")
            da = db
        if da != db and not (da in FP8 and db in FP8):
            raise TypeError(f"a and b must have one dtype (or both be fp8: {' or '.join(FP8)}), got {da} and {db}")
        for dt in (da, db):
            if dt not in arrays.SUPPORTED_DTYPES:
                raise TypeError(f"dtype {dt} is not supported; numba_tc takes {', '.join(arrays.SUPPORTED_DTYPES)}")
        (m, k), (k2, n) = sa, sb
        if k != k2:
            raise ValueError(f"inner dimensions differ: a is {m}x{k}, b is {k2}x{n}")
        if kind != "numpy":                  # (NumPy operands are copied to the device, any strides)
            for name, d in (("a", self.desc_a), ("b", self.desc_b)):
                arrays.layout_of(tuple(d[1]), tuple(d[2]), name)
        allowed = FP8_OUT if da in FP8 else (da, "float32")
        self.desc_out = None
        if out is not None:
            if array_kind(out) != kind:
                raise TypeError(f"out must be a {kind} array like a and b, got {array_kind(out)}")
            self.desc_out = arrays.describe(out, "out")
            so, do = self.desc_out[1], self.desc_out[3]
            if tuple(so) != (m, n):
                raise ValueError(f"out has shape {tuple(so)}, expected {(m, n)}")
            if do not in allowed:
                raise TypeError(f"out has dtype {do}, but the result of {da} inputs is "
                                f"{' or '.join(dict.fromkeys(allowed))}")
            if out_dtype is not None and dtype_name(out_dtype) != do:
                raise TypeError(f"out has dtype {do} but out_dtype={dtype_name(out_dtype)}")
            if kind == "numpy" and not out.flags.writeable:
                raise ValueError("out is a read-only NumPy array (a broadcast view?): pass a writable one")
            if kind != "numpy":
                arrays.layout_of(tuple(so), tuple(self.desc_out[2]), "out")
            out_dtype = do
        out_dtype = dtype_name(out_dtype) if out_dtype is not None else allowed[0]
        if out_dtype not in allowed:
            raise TypeError(f"out_dtype {out_dtype} for {da} inputs: the result is "
                            f"{' or '.join(dict.fromkeys(allowed))}")
        self.m, self.n, self.k, self.dtype, self.out_dtype = m, n, k, da, out_dtype


def device_of(kind: str, a, b, out) -> int:
    """The GPU that holds a, b and out (GPU arrays): ValueError if they are on two."""
    from . import runtime
    devs = [runtime.device_of(x, kind) for x in (a, b)]
    names = ["a", "b"]
    if out is not None:
        devs.append(runtime.device_of(out, kind))
        names.append("out")
    if devs[0] < 0:
        raise TypeError(f"a is not on a CUDA device ({a.device}): move it to one")
    for name, d in zip(names[1:], devs[1:]):
        if d != devs[0]:
            raise ValueError(f"a is on device {devs[0]} but {name} is on device {d}: "
                             "operands and out must be on one GPU")
    return devs[0]


# The simulator runs each GPU thread as a Python thread, at about 25 us per multiply-add on the
# slowest rung (naive: 128x64x128 in 25 s on two cores); the fastest SIMT rung is ~15x faster.
SIMULATOR_MNK = int(os.environ.get("NUMBA_TC_SIMULATOR_MNK", 1 << 21))      # 128^3


def simulator_size(m: int, n: int, k: int, count: int = 1) -> None:
    """ValueError when a problem (``count`` of them, a batch) is too large for Numba's CUDA
    simulator to run in a minute or so (``SIMULATOR_MNK`` multiply-adds), with a size it can."""
    work = count * m * n * max(k, 1)             # (K == 0: zeros, still M x N of them)
    if work <= SIMULATOR_MNK:
        return
    side = int(round((SIMULATOR_MNK / max(count, 1)) ** (1 / 3)))
    what = f"{count} x {m}x{n}x{k}" if count > 1 else f"{m}x{n}x{k}"
    raise ValueError(f"{what} is too large for Numba's CUDA simulator ({work:,} multiply-adds; it runs each GPU "
                     f"thread as a Python thread and does at most {SIMULATOR_MNK:,}, e.g. {side}x{side}x{side}"
                     f"{' per batch' if count > 1 else ''}, in about a minute): run it on a GPU, or set "
                     "NUMBA_TC_SIMULATOR_MNK to allow more")


def stream_for(stream, kind: str, device: int) -> int:
    """The raw handle of a stream the caller passed (``runtime.stream_handle``): TypeError for
    anything but a stream or a handle, ValueError for a torch or CuPy stream of another device
    than the operands' or a handle that is no pointer."""
    from . import runtime
    if isinstance(stream, (bool, np.bool_)) or isinstance(stream, float):
        raise TypeError(f"stream must be a torch, CuPy, Numba or cuda.core stream or a raw CUstream handle, "
                        f"got {type(stream).__name__}")
    handle = runtime.stream_handle(stream)
    if not 0 <= int(handle) < 1 << 64:
        raise ValueError(f"stream handle {handle} is not a CUstream (a pointer, or 0 for the default stream)")
    dev = getattr(getattr(stream, "device", None), "index", None)          # torch
    if dev is None and type(stream).__module__.startswith("cupy"):
        dev = getattr(getattr(stream, "device", None), "id", None)
    if isinstance(dev, int) and not SIMULATOR and device is not None and dev != device:
        raise ValueError(f"stream is a stream of device {dev}, but the operands are on device {device}")
    return handle


GRID_LIMITS = ((1 << 31) - 1, 65535, 65535)       # blocks in x, y, z (CUDA's limits on every GPU)


def launchable(plan, variant: str) -> None:
    """ValueError when a plan's launch exceeds the grid's limits (a problem too tall for a
    variant's 2-D grid), naming the variant."""
    for step in plan.steps:
        grid = step.grid if isinstance(step.grid, tuple) else (step.grid,)
        for g, limit, axis in zip(grid, GRID_LIMITS, "xyz"):
            if g > limit:
                raise ValueError(f"variant {variant!r} would launch a grid of {tuple(grid)} blocks; CUDA allows at "
                                 f"most {limit} in {axis}: the problem is too large for this variant (variant='auto' "
                                 "picks one that can run it)")


def _extent(d) -> tuple:
    """(first byte, one past the last byte) of a described GPU array (any strides)."""
    shape, strides, item, p = d[1], d[2], arrays.np_dtype(d[3]).itemsize, d[4]
    if any(s == 0 for s in shape):
        return p, p
    lo = sum(min(0, (s - 1) * st) for s, st in zip(shape, strides))
    hi = sum(max(0, (s - 1) * st) for s, st in zip(shape, strides))
    return p + lo * item, p + (hi + 1) * item


def out_aliases(out, c, beta, bias, user_args, scales, in_place=frozenset()) -> None:
    """ValueError when ``out`` (a GPU array) overlaps an array the epilogue reads (c, bias, the
    user's arrays, fp8 scales), unless it is that array itself read where it is written: c, or a
    user's array at a position in ``in_place`` (the function reads it only at [row, col],
    ``epilogue.element_reads``), of out's shape, strides and dtype."""
    do = arrays.describe(out, "out")
    lo, hi = _extent(do)
    reads = [("c", c if beta != 0.0 else None, True), ("bias", bias, False)]
    reads += [(f"epilogue_args[{i}]", x, i in in_place) for i, x in enumerate(user_args or ())]
    reads += [(name, x, False) for name, x in zip(("scale_a", "scale_b"), scales or ())]
    for name, x, same in reads:
        try:
            d = arrays.describe(x, name)
        except (TypeError, AttributeError):      # (not an array: ``epilogue_args.bind`` says so)
            continue
        if d[4] is None:                          # (a NumPy array: copied, never out)
            continue
        qlo, qhi = _extent(d)
        if lo < qhi and qlo < hi and not (same and tuple(d[1:4]) == tuple(do[1:4]) and d[4] == do[4]):
            raise ValueError(f"out overlaps {name}: the kernel would read {name} while it writes out. Only c, or "
                             "an epilogue array of out's shape and strides that the function reads only at "
                             "[row, col], may be out itself")
