"""A call's epilogue arguments (``gemm(..., c=, alpha=, beta=, bias=, activation=, epilogue=,
epilogue_args=)``): checked with errors that name the argument, described as an
``epilogue.Epilogue`` (what decides the kernel) plus a key (what decides the plan), and turned
into the run-time values the kernel receives (``Epilogue.slots``, in the order of ``epilogue.TERMS``).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Tuple

import numpy as np

from . import arrays, user_epilogue
from .arrays import array_kind, as_matrix, describe
from .epilogue import (ACTIVATIONS, USER_ARRAY_DTYPES, Epilogue, Run, UserFunction, code_digest, element_reads,
                       packer)
from .intrinsics import SIMULATOR
from .layout import FP8

__all__ = ["bind", "validate", "without_function", "Bound", "is_plain"]


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
    ``run``: this call's run-time values (``epilogue.Run``). ``keep``: the device copies of
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
    pack: Any = field(default=None, repr=False, compare=False)     # (spec, swap, packer(spec, swap)) last used

    def values(self, spec: Epilogue, run=None, swap: bool = False) -> tuple:
        """The run-time values of ``spec`` (this epilogue, flipped when the kernel computes C^T:
        ``swap``) in the order of ``spec.slots()`` (``epilogue.packer``: each term's values as
        ``epilogue.TERMS`` says): int64s, or arrays and numbers under the simulator. ``run``:
        another call's ``Run`` with arrays of the same facts (default: this call's)."""
        pack = self.pack
        if pack is None or pack[0] is not spec or pack[1] != swap:
            pack = self.pack = (spec, swap, packer(spec, swap))
        return pack[2](self, self.run if run is None else run)

    def fixed(self) -> "Bound":
        """This epilogue without its call's arrays: what a cache may keep for later calls."""
        return replace(self, run=None, keep=())


def _handle(mat):
    return mat.data if SIMULATOR else mat.ptr


class _Checked:
    """A call's epilogue arguments checked (``_check``), before anything is copied or compiled:
    the descriptions ``bind`` builds on."""
    __slots__ = ("c", "bias", "axis", "user", "args", "scales", "mode")


def validate(kind: str, m: int, n: int, dtype: str, out_dtype: str, device, c, alpha, beta, bias, activation,
             epilogue, epilogue_args, scales=None, k: int = 0) -> None:
    """``bind``'s checks alone: nothing is copied to a device or compiled, so that a call on
    NumPy arrays names a bad argument before it needs a GPU (arguments as ``bind``'s)."""
    _check(kind, m, n, dtype, out_dtype, device, c, alpha, beta, bias, activation, epilogue, epilogue_args,
           scales, k)


def _check(kind, m, n, dtype, out_dtype, device, c, alpha, beta, bias, activation, epilogue, epilogue_args,
           scales, k) -> _Checked:
    for name, x in (("alpha", alpha), ("beta", beta)):
        _scalar(name, x)
    ch = _Checked()
    # (the SIMT ladder reads fp32 only: there all three are fp32)
    allowed = tuple(dict.fromkeys(d for d in (dtype, out_dtype, "float32") if d not in FP8))
    ch.c = ch.bias = ch.axis = ch.user = ch.scales = ch.mode = None
    ch.args = ()
    if c is not None and beta != 0.0:
        ch.c = _described_matrix(c, "c", kind, device, allowed)
        if tuple(ch.c[1]) != (m, n):
            raise ValueError(f"c has shape {tuple(ch.c[1])}, expected {(m, n)} (the shape of a @ b)")
    elif c is None and beta != 0.0:
        raise ValueError(f"beta={beta} scales c, but no c was given")
    if bias is not None:
        ch.bias, ch.axis = _described_bias(bias, kind, device, allowed, m, n)
    if activation is not None and (not isinstance(activation, str) or activation not in ACTIVATIONS):
        raise ValueError(f"activation {activation!r} is not one of {', '.join(map(repr, ACTIVATIONS))}")
    if epilogue is not None:
        ch.user, ch.args = _described_user(epilogue, epilogue_args, kind, device, m, n)
    else:
        without_function(epilogue_args)
    if scales is not None or dtype in FP8:
        ch.scales, ch.mode = _described_scales(scales, dtype, kind, device, m, n, k)
    return ch


def without_function(epilogue_args) -> None:
    """TypeError or ValueError unless ``epilogue_args`` is empty (there is no epilogue function)."""
    if epilogue_args is not None and not isinstance(epilogue_args, (tuple, list)):
        raise TypeError(f"epilogue_args must be a tuple, got {type(epilogue_args).__name__}")
    if epilogue_args:
        raise ValueError("epilogue_args were given without an epilogue function")


def _scalar(name: str, x) -> None:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number (a Python or NumPy int or float), got {type(x).__name__}")


def bind(kind: str, m: int, n: int, dtype: str, out_dtype: str, device, c, alpha, beta, bias, activation,
         epilogue, epilogue_args, scales=None, stream=0, k: int = 0) -> Bound:
    """Check a call's epilogue arguments (``device``: the operands' device, None for NumPy;
    ``scales``: (scale_a, scale_b) of fp8 inputs, or None; ``k``: the product's K, which
    block-wise scales are checked against) and describe them. NumPy arrays are copied to the
    device on ``stream``. Under the simulator a user's function is run for one element
    (``user_epilogue.probe``)."""
    ch = _check(kind, m, n, dtype, out_dtype, device, c, alpha, beta, bias, activation, epilogue, epilogue_args,
                scales, k)
    alpha, beta = float(alpha), float(beta)
    cm = bm = None
    c_spec = bias_spec = None
    key = [alpha != 1.0, activation]
    if ch.c is not None:
        cm = as_matrix(c, "c", stream=stream, described=ch.c)
        c_spec = (cm.dtype, cm.trans) + ((True,) if _c_stageable(cm, m, n) else ())
        key.append(("c",) + c_spec + (cm.ld,))
    if ch.bias is not None:
        bm = _bias_matrix(bias, kind, ch.bias, stream)
        bias_spec = (bm.dtype, ch.axis)
        key.append(("bias", bm.dtype, ch.axis))
    user, uvals = None, ()
    if ch.user is not None:
        user, uvals = ch.user, tuple(x if d is None else _user_array(x, kind, d, stream) for x, d in ch.args)
        key.append(user)
    scale_vals, scale_strides, scale_keep, scale_mode = None, ((), ()), (), ch.mode
    if ch.scales is not None:
        scale_vals, scale_strides, scale_keep = _scale_values(scales, ch.scales, ch.mode, kind, stream, m, n, k)
        key.append(("scales", scale_mode))
    # the facts a cached call keeps (``Bound.fixed``) belong to its key: a call of the same
    # function's code on an array of other strides must not find another call's (``calls._cache_miss``)
    user_shapes = tuple((v[1], v[2]) if isinstance(v, tuple) else None for v in uvals)
    key += [user_shapes, scale_strides]
    spec = Epilogue(alpha != 1.0, c_spec, bias_spec, activation, user,
                    fast=dtype in ("float16", "bfloat16") + FP8, scales=scale_mode)
    run = Run(scales=scale_vals, alpha=alpha, c=None if cm is None else _handle(cm), beta=beta,
              bias=None if bm is None else _handle(bm), user=tuple(v[0] if isinstance(v, tuple) else v for v in uvals))
    bound = Bound(spec, tuple(key), m, n, 0 if cm is None else cm.ld, user_shapes, scale_strides, run,
                  keep=(cm, bm) + tuple(v[3:] for v in uvals if isinstance(v, tuple)) + scale_keep)
    if SIMULATOR and user is not None:
        from .epilogue import make
        user_epilogue.probe(user.fn, make(spec), bound.values(spec), run.user, m, n)
    return bound


SCALE_BLOCK = 128       # block-wise scales: one per 128 of K (a K slice of the fp8 kernel), per 128 of N


def _described_scales(scales, dtype: str, kind: str, device, m: int, n: int, k: int):
    """(their descriptions, "tensor" | "block"): fp8 inputs need both scale_a and scale_b,
    float32 on the operands' device: each one value (per-tensor scaling), or block-wise, scale_a
    of shape (M, K/128) and scale_b (K/128, N/128), rounded up."""
    if dtype not in FP8:
        raise ValueError(f"scale_a and scale_b dequantize fp8 inputs ({' or '.join(FP8)}); a and b are {dtype}")
    if scales is None or any(x is None for x in scales):
        raise ValueError("fp8 inputs need both scale_a and scale_b (float32 device arrays: dequantized a is "
                         "a * scale_a)")
    block = _scale_shapes(m, n, k)
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
    return tuple(ds), mode


def _scale_shapes(m: int, n: int, k: int) -> dict:
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    return {"scale_a": (m, kb), "scale_b": (kb, nb)}


def _scale_values(scales, ds, mode: str, kind: str, stream, m: int, n: int, k: int):
    """(the scales' addresses, their element strides (block-wise), what keeps NumPy copies
    alive)."""
    block = _scale_shapes(m, n, k)
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
    return tuple(out), tuple(strides), tuple(keep)


def _on_device(x, name: str, kind: str, device):
    """TypeError or ValueError unless ``x`` is an array of the operands' kind on their device."""
    try:
        xk = array_kind(x)
    except TypeError:
        raise TypeError(f"{name} must be an array of the operands' kind ({kind}), got {type(x).__name__}") from None
    if xk != kind:
        raise TypeError(f"{name} must be a {kind} array like a and b, got {xk}")
    if kind == "torch" and not x.is_cuda:
        raise TypeError(f"{name} is not on a CUDA device (a torch tensor on {x.device}): move it to device {device}, "
                        "with a and b")
    if device is not None and kind != "numpy" and not SIMULATOR:
        from . import runtime
        d = runtime.device_of(x, kind)
        if d < 0:
            raise TypeError(f"{name} is not on a CUDA device: move it to device {device}, with a and b")
        if d != device:
            raise ValueError(f"{name} is on device {d} but a and b are on device {device}")


def _described_matrix(x, name, kind, device, allowed):
    """``describe(x)`` of a 2-D epilogue input (c) of an allowed dtype, with a layout the kernels
    read (``arrays.layout_of``)."""
    _on_device(x, name, kind, device)
    d = describe(x, name)
    if len(d[1]) != 2:
        raise ValueError(f"{name} must be 2-D, got shape {tuple(d[1])}")
    if d[3] not in allowed:
        raise TypeError(f"{name} has dtype {d[3]}; it must be {' or '.join(allowed)} (the inputs' or output's dtype, or float32)")
    if kind != "numpy":
        arrays.layout_of(tuple(d[1]), tuple(d[2]), name)
    return d


def _described_bias(x, kind, device, allowed, m, n):
    """(``describe(x)``, "col" | "row"): length N is one value per column (also when M == N, as
    nn.Linear's bias), length M one per row."""
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
    if shape[0] > 1 and strides[0] != 1 and kind != "numpy":
        raise ValueError(f"bias must be contiguous, got stride {strides[0]}")
    return d, axis


def _bias_matrix(x, kind, d, stream):
    """The bias as a Matrix of one row (a NumPy one copied to the device)."""
    if kind == "numpy":
        return as_matrix(np.ascontiguousarray(x).reshape(1, -1), "bias", stream=stream)
    length = d[1][0]
    mat = as_matrix(x, "bias", described=(kind, (1, length), (length, 1), d[3], d[4]))
    if SIMULATOR:
        mat.data = x._ary if kind == "numba" else x
    return mat


def _copyable(dtype: str, item: int, addr: int, pitch: int, m: int, n: int) -> bool:
    """Whether a kernel may copy an (m, n) array of ``dtype`` with contiguous rows ``pitch``
    elements apart from ``addr`` into shared memory by 16-byte copies (``hopper.staging._stager``):
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


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _described_user(fn, args, kind, device, m: int, n: int) -> Tuple[UserFunction, tuple]:
    """(the ``UserFunction``, per argument (its value, its description if an array else None)):
    ``fn`` checked (``user_epilogue.check``) and each argument an int, a float or an array of the
    operands' kind and device, of a dtype the function may read and a shape it indexes over the
    whole output (``user_epilogue.indexing``)."""
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"epilogue_args must be a tuple (of arrays, ints and floats), got {type(args).__name__}")
    user_epilogue.check(fn, len(args))
    kinds, vals = [], []
    at = element_reads(fn)
    idx = user_epilogue.indexing(fn)
    for i, x in enumerate(args):
        name = f"epilogue_args[{i}]"
        if isinstance(x, (bool, np.bool_, int, np.integer)):
            if not _INT64[0] <= int(x) <= _INT64[1]:
                raise ValueError(f"{name} = {int(x)} does not fit an int64")
            kinds.append(("i64",))
            vals.append((int(x), None))
        elif isinstance(x, (float, np.floating)):
            # a Python float is the accumulator's type (fp32): float64 math in an epilogue costs
            # conversions and fp64 instructions per element; np.float64(x) asks for double
            kinds.append(("f64",) if isinstance(x, np.float64) else ("f32",))
            vals.append((float(x), None))
        else:
            try:
                array_kind(x)
            except TypeError:
                raise TypeError(f"{name} is a {type(x).__name__}: epilogue arguments are arrays of the "
                                f"operands' kind ({kind}), ints and floats") from None
            _on_device(x, name, kind, device)
            d = describe(x, name)
            if d[3] not in USER_ARRAY_DTYPES:
                raise TypeError(f"{name} has dtype {d[3]}; epilogue arrays may be "
                                f"{', '.join(USER_ARRAY_DTYPES)}")
            if len(d[1]) == 0:
                raise TypeError(f"{name} is a 0-d array: pass a number (int or float) instead")
            if i in idx:
                _indexable(name, fn, tuple(d[1]), idx[i], m, n)
            kinds.append(("array", d[3], len(d[1]), i in at and _stageable(d, m, n)))
            vals.append((x, d))
    name = getattr(getattr(fn, "py_func", fn), "__qualname__", "epilogue")
    return UserFunction(name, code_digest(fn), tuple(kinds), fn), tuple(vals)


def _indexable(name: str, fn, shape: tuple, axes: tuple, m: int, n: int) -> None:
    """ValueError unless an array of ``shape`` that ``fn`` indexes as ``x[axes]`` (("row", "col"),
    ("col",), ...: its leading dimensions) can be read so at every row < m and column < n of the
    output."""
    spelled = f"x[{', '.join(axes)}]"
    if len(shape) < len(axes):
        raise ValueError(f"{name} is {len(shape)}-D with shape {shape}, but {user_epilogue.where(fn)} indexes it "
                         f"as {spelled}: it must have {len(axes)} dimensions")
    need = tuple(m if a == "row" else n for a in axes)
    if any(s < w for s, w in zip(shape, need)):
        raise ValueError(f"{name} has shape {shape}, but {user_epilogue.where(fn)} reads it as {spelled} at every "
                         f"row < M = {m} and column < N = {n} of the output: it needs a shape of at least {need}")


def _user_array(x, kind, d, stream):
    """(address or, under the simulator, the array; shape; byte strides) of an epilogue array."""
    item = arrays.np_dtype(d[3]).itemsize
    if kind == "numpy":
        from numba import cuda
        x = np.ascontiguousarray(x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("=")))
        if SIMULATOR:
            return cuda.to_device(x, stream=stream), tuple(x.shape), (0,) * x.ndim
        # (a bfloat16 array as its raw 16-bit words: Numba's device arrays have no bfloat16)
        dev = cuda.to_device(x.view(np.uint16) if d[3] == "bfloat16" else x, stream=stream)
        return dev.device_ctypes_pointer.value, tuple(x.shape), tuple(dev.strides), dev
    if SIMULATOR:
        return (x._ary if kind == "numba" else x), tuple(d[1]), (0,) * len(d[1])
    return d[4], tuple(d[1]), tuple(s * item for s in d[2])
