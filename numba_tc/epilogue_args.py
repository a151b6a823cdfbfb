"""A call's epilogue arguments (``gemm(..., c=, alpha=, beta=, bias=, activation=, epilogue=,
epilogue_args=)``): checked with errors that name the argument, described as an
``epilogue.Epilogue`` (what decides the kernel) plus a key (what decides the plan), and turned
into the run-time values the kernel receives (``Epilogue.slots``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Tuple

import numpy as np

from . import arrays
from .arrays import array_kind, as_matrix, describe
from .epilogue import (ACTIVATIONS, USER_ARRAY_DTYPES, Epilogue, UserFunction, code_digest, element_reads,
                       float_bits, is_device_function)
from .intrinsics import SIMULATOR
from .layout import FP8

__all__ = ["bind", "Bound", "is_plain"]


def is_plain(c, alpha, beta, bias, activation, epilogue) -> bool:
    """Nothing to fuse: the plain product (the fast path of ``gemm``)."""
    if c is not None or bias is not None or activation is not None or epilogue is not None:
        return False
    return isinstance(alpha, (int, float)) and isinstance(beta, (int, float)) and alpha == 1.0 and beta == 0.0


@dataclass
class Bound:
    """A call's epilogue: ``spec`` in the user's coordinates, ``key`` (what of it decides the
    plan), what stays fixed for every call with arrays of the same facts (m, n, c's leading
    dimension, the user arrays' shapes and byte strides, block-wise scales' strides), and
    ``run``: this call's run-time values (``runtime_values``). ``keep``: the device copies of
    NumPy arguments, alive while it runs."""
    spec: Epilogue
    key: tuple
    m: int
    n: int
    ldc: int = 0
    user_shapes: Tuple[Any, ...] = ()
    scale_strides: Tuple[tuple, tuple] = ((), ())
    run: Any = None
    keep: Tuple[Any, ...] = ()

    def values(self, spec: Epilogue, run=None, swap: bool = False) -> tuple:
        """The run-time values of ``spec`` (this epilogue, flipped when the kernel computes C^T:
        ``swap``) in the order of ``spec.slots()``: int64s, or arrays and numbers under the
        simulator. ``run``: another call's ``runtime_values`` with arrays of the same facts
        (default: this call's)."""
        if spec.plain:
            return (0,)
        c, bias, alpha, beta, user, scales = self.run if run is None else run
        m, n = (self.n, self.m) if swap else (self.m, self.n)
        out = [m, n]
        if spec.scales is not None:
            for x, strides in zip(scales, self.scale_strides):
                out += [x, *strides]
        if spec.alpha:
            out.append(alpha if SIMULATOR else float_bits(alpha))
        if spec.c is not None:
            out += [c, self.ldc, beta if SIMULATOR else float_bits(beta)]
        if spec.bias is not None:
            out.append(bias)
        for kind, v, fixed in zip(spec.user.args if spec.user else (), user, self.user_shapes):
            if kind[0] == "array":
                out.append(v)
                out += list(fixed[0]) + list(fixed[1])
            elif kind[0] in ("f32", "f64"):
                out.append(float(v) if SIMULATOR else float_bits(float(v), kind[0]))
            else:
                out.append(int(v))
        return tuple(out)

    def fixed(self) -> "Bound":
        """This epilogue without its call's arrays: what a cache may keep for later calls."""
        return replace(self, run=None, keep=())


def runtime_values(c, bias, alpha, beta, user, scales=None) -> tuple:
    """What ``Bound.values`` takes per call: (c's address, bias's address, alpha, beta, per user
    argument an array's address or a number, the scales' addresses); addresses are arrays under
    the simulator."""
    return (c, bias, float(alpha), float(beta), tuple(user), scales)


def _handle(mat):
    return mat.data if SIMULATOR else mat.ptr


def bind(kind: str, m: int, n: int, dtype: str, out_dtype: str, device, c, alpha, beta, bias, activation,
         epilogue, epilogue_args, scales=None, stream=0, k: int = 0) -> Bound:
    """Check a call's epilogue arguments (``device``: the operands' device, None for NumPy;
    ``scales``: (scale_a, scale_b) of fp8 inputs, or None; ``k``: the product's K, which
    block-wise scales are checked against) and describe them. NumPy arrays are copied to the
    device on ``stream``."""
    for name, x in (("alpha", alpha), ("beta", beta)):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"{name} must be a Python number, got {type(x).__name__}")
    # (the SIMT ladder reads fp32 only: there all three are fp32)
    allowed = tuple(dict.fromkeys(d for d in (dtype, out_dtype, "float32") if d not in FP8))
    cm = bm = None
    c_spec = bias_spec = None
    key = [float(alpha) != 1.0, activation]
    if c is not None and beta != 0.0:
        cm = _matrix(c, "c", kind, device, allowed, stream)
        if (cm.rows, cm.cols) != (m, n):
            raise ValueError(f"c has shape {(cm.rows, cm.cols)}, expected {(m, n)} (the shape of a @ b)")
        c_spec = (cm.dtype, cm.trans) + ((True,) if _c_stageable(cm, m, n) else ())
        key.append(("c",) + c_spec + (cm.ld,))
    elif c is None and beta != 0.0:
        raise ValueError(f"beta={beta} scales c, but no c was given")
    if bias is not None:
        bm, axis = _bias(bias, kind, device, allowed, m, n, stream)
        bias_spec = (bm.dtype, axis)
        key.append(("bias", bm.dtype, axis))
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(map(repr, ACTIVATIONS))}")
    user, uvals = None, ()
    if epilogue is not None:
        user, uvals = _user(epilogue, epilogue_args, kind, device, stream, m, n)
        key.append(user)
    elif epilogue_args:
        raise ValueError("epilogue_args were given without an epilogue function")
    scale_vals, scale_strides, scale_keep, scale_mode = None, ((), ()), (), None
    if scales is not None or dtype in FP8:
        scale_vals, scale_strides, scale_keep, scale_mode = _scales(scales, dtype, kind, device, stream, m, n, k)
        key.append(("scales", scale_mode))
    # the facts a cached call keeps (``Bound.fixed``) belong to its key: a call of the same
    # function's code on an array of other strides must not find another call's (``api._cache_miss``)
    user_shapes = tuple((v[1], v[2]) if isinstance(v, tuple) else None for v in uvals)
    key += [user_shapes, scale_strides]
    spec = Epilogue(float(alpha) != 1.0, c_spec, bias_spec, activation, user,
                    fast=dtype in ("float16", "bfloat16") + FP8, scales=scale_mode)
    run = runtime_values(None if cm is None else _handle(cm), None if bm is None else _handle(bm), alpha, beta,
                         (v[0] if isinstance(v, tuple) else v for v in uvals), scale_vals)
    return Bound(spec, tuple(key), m, n, 0 if cm is None else cm.ld, user_shapes, scale_strides, run,
                 keep=(cm, bm) + tuple(v[3:] for v in uvals if isinstance(v, tuple)) + scale_keep)


SCALE_BLOCK = 128       # block-wise scales: one per 128 of K (a K slice of the fp8 kernel), per 128 of N


def _scales(scales, dtype: str, kind: str, device, stream, m: int, n: int, k: int):
    """(their addresses, their element strides (block-wise), what keeps NumPy copies alive,
    "tensor" | "block"): fp8 inputs need both scale_a and scale_b, float32 on the operands'
    device: each one value (per-tensor scaling), or block-wise, scale_a of shape (M, K/128) and
    scale_b (K/128, N/128), rounded up."""
    if dtype not in FP8:
        raise ValueError(f"scale_a and scale_b dequantize fp8 inputs ({' or '.join(FP8)}); a and b are {dtype}")
    if scales is None or any(x is None for x in scales):
        raise ValueError("fp8 inputs need both scale_a and scale_b (float32 device arrays: dequantized a is "
                         "a * scale_a)")
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    block = {"scale_a": (m, kb), "scale_b": (kb, nb)}
    ds = []
    for name, x in zip(("scale_a", "scale_b"), scales):
        try:
            _on_device(x, name, kind, device)
            d = describe(x, name)
        except TypeError as e:
            raise TypeError(f"{name} must be a float32 array of the operands' kind: {e}") from None
        if d[3] != "float32":
            raise TypeError(f"{name} has dtype {d[3]}; scales are float32")
        ds.append(d)
    one = [int(np.prod(d[1], dtype=np.int64)) == 1 for d in ds]
    mode = "tensor" if all(one) else "block"
    if mode == "block":
        for name, d in zip(block, ds):
            if tuple(d[1]) != block[name]:
                raise ValueError(
                    f"{name} has shape {tuple(d[1])}: scales are per tensor (one value each) or block-wise, "
                    f"scale_a of shape (M, ceil(K/128)) = {block['scale_a']} and scale_b (ceil(K/128), "
                    f"ceil(N/128)) = {block['scale_b']} (a's rows by 1x128 blocks of K, b by 128x128 blocks)")
    out, strides, keep = [], [], []
    for name, x, d in zip(block, scales, ds):
        shape = (1,) if mode == "tensor" else block[name]
        if kind == "numpy":
            from numba import cuda
            dev = cuda.to_device(np.ascontiguousarray(np.asarray(x, np.float32).reshape(shape)), stream=stream)
            out.append(dev if SIMULATOR else dev.device_ctypes_pointer.value)
            keep.append(dev)
            strides.append((shape[1], 1) if mode == "block" else ())
        else:
            out.append((x._ary if kind == "numba" else np.asarray(x)).reshape(shape) if SIMULATOR else d[4])
            strides.append(tuple(int(st) for st in d[2]) if mode == "block" else ())
    return tuple(out), tuple(strides), tuple(keep), mode


def _on_device(x, name: str, kind: str, device):
    xk = array_kind(x)
    if xk != kind:
        raise TypeError(f"{name} must be a {kind} array like a and b, got {xk}")
    if device is not None and kind != "numpy" and not SIMULATOR:
        from . import runtime
        d = runtime.device_of(x, kind)
        if d < 0:
            raise TypeError(f"{name} is not on a CUDA device: move it to device {device}, with a and b")
        if d != device:
            raise ValueError(f"{name} is on device {d} but a and b are on device {device}")


def _matrix(x, name, kind, device, allowed, stream):
    _on_device(x, name, kind, device)
    d = describe(x, name)
    if len(d[1]) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(d[1])}")
    if d[3] not in allowed:
        raise TypeError(f"{name} has dtype {d[3]}; it must be {' or '.join(allowed)} (the inputs' or output's dtype, or float32)")
    return as_matrix(x, name, stream=stream, described=d)


def _bias(x, kind, device, allowed, m, n, stream):
    """(a Matrix of the bias as one row, "col" | "row"): length N is one value per column (also
    when M == N, as nn.Linear's bias), length M one per row."""
    _on_device(x, "bias", kind, device)
    d = describe(x, "bias")
    shape, strides = tuple(d[1]), tuple(d[2])
    if len(shape) != 1:
        raise ValueError(f"bias must be 1-D (length N = {n} per column, or M = {m} per row), got shape {shape}")
    if shape[0] == n:
        axis = "col"
    elif shape[0] == m:
        axis = "row"
    else:
        raise ValueError(f"bias has length {shape[0]}; it must be N = {n} (per column) or M = {m} (per row)")
    if d[3] not in allowed:
        raise TypeError(f"bias has dtype {d[3]}; it must be {' or '.join(allowed)} (the inputs' or output's dtype, or float32)")
    if shape[0] > 1 and strides[0] != 1:
        raise ValueError(f"bias must be contiguous, got stride {strides[0]}")
    row = (kind, (1, shape[0]), (shape[0], 1), d[3], d[4])
    if kind == "numpy":
        return as_matrix(x.reshape(1, -1), "bias", stream=stream), axis
    mat = as_matrix(x, "bias", described=row)
    if SIMULATOR:
        mat.data = x._ary if kind == "numba" else x
    return mat, axis


def _copyable(dtype: str, item: int, addr: int, pitch: int, m: int, n: int) -> bool:
    """Whether a kernel may copy an (m, n) array of ``dtype`` with contiguous rows ``pitch``
    elements apart from ``addr`` into shared memory by 16-byte copies (``hopper._stager``):
    float32 or 16-bit, its address, row pitch and rows 16-byte multiples."""
    return (not SIMULATOR and dtype in ("float32", "float16", "bfloat16") and n * item % 16 == 0
            and addr % 16 == 0 and (m == 1 or pitch * item % 16 == 0))


def _stageable(d, m: int, n: int) -> bool:
    """Whether a kernel may stage an epilogue array (described as ``d``, ``arrays.describe``) in
    shared memory and hand the function its elements (``Epilogue.staged``): a device array of
    C's shape, contiguous rows, ``_copyable``."""
    if d[4] is None or tuple(d[1]) != (m, n) or d[2][1] != 1:
        return False
    return _copyable(d[3], arrays.np_dtype(d[3]).itemsize, d[4], d[2][0], m, n)


def _c_stageable(cm, m: int, n: int) -> bool:
    """Whether a kernel may stage ``c`` (a ``Matrix``) as it may a user's array: row-major,
    ``_copyable``."""
    return not cm.trans and _copyable(cm.dtype, cm.itemsize, cm.ptr, cm.ld, m, n)


def _user(fn, args, kind, device, stream, m: int, n: int) -> Tuple[UserFunction, tuple]:
    if not is_device_function(fn):
        raise TypeError(f"epilogue must be a numba.cuda.jit(device=True) function f(acc, row, col, *epilogue_args), "
                        f"got {type(fn).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"epilogue_args must be a tuple, got {type(args).__name__}")
    kinds, vals = [], []
    at = element_reads(fn)
    for i, x in enumerate(args):
        name = f"epilogue_args[{i}]"
        if isinstance(x, bool) or isinstance(x, int):
            kinds.append(("i64",))
            vals.append(int(x))
        elif isinstance(x, (float, np.floating)):
            # a Python float is the accumulator's type (fp32): float64 math in an epilogue costs
            # conversions and fp64 instructions per element; np.float64(x) asks for double
            kinds.append(("f64",) if isinstance(x, np.float64) else ("f32",))
            vals.append(float(x))
        else:
            try:
                xk = array_kind(x)
            except TypeError:
                raise TypeError(f"{name} is a {type(x).__name__}: epilogue arguments are arrays of the "
                                "operands' kind, ints and floats") from None
            _on_device(x, name, kind, device)
            d = describe(x, name)
            if d[3] not in USER_ARRAY_DTYPES:
                raise TypeError(f"{name} has dtype {d[3]}; epilogue arrays may be "
                                f"{', '.join(USER_ARRAY_DTYPES)}")
            kinds.append(("array", d[3], len(d[1]), i in at and _stageable(d, m, n)))
            vals.append(_user_array(x, xk, d, stream))
    name = getattr(getattr(fn, "py_func", fn), "__qualname__", "epilogue")
    return UserFunction(name, code_digest(fn), tuple(kinds), fn), tuple(vals)


def _user_array(x, kind, d, stream):
    """(address or, under the simulator, the array; shape; byte strides) of an epilogue array."""
    item = arrays.np_dtype(d[3]).itemsize
    if kind == "numpy":
        from numba import cuda
        if SIMULATOR:
            return cuda.to_device(x, stream=stream), tuple(x.shape), (0,) * x.ndim
        # (a bfloat16 array as its raw 16-bit words: Numba's device arrays have no bfloat16)
        dev = cuda.to_device(x.view(np.uint16) if d[3] == "bfloat16" else x, stream=stream)
        return dev.device_ctypes_pointer.value, tuple(x.shape), tuple(dev.strides), dev
    if SIMULATOR:
        return (x._ary if kind == "numba" else x), tuple(d[1]), (0,) * len(d[1])
    return d[4], tuple(d[1]), tuple(s * item for s in d[2])
