"""fp8 quantizing for the fp8 GEMMs (issue 20): float32, float16 and bfloat16 matrices to
float8_e4m3fn or float8_e5m2 values with float32 scales, one per tensor or one per block, and back.

The convention is torch._scaled_mm's (its ``scale_a`` / ``scale_b``): a value stands for
``values * scale``. Over each block (or the whole tensor) ``amax = max |x|``, and

* ``scale = amax / FP8_MAX`` in float32 (1.0 where that is 0: an all-zero block, or an amax so
  small that the quotient underflows);
* ``values = fp8(x / scale)``: the float32 quotient (x converted to float32 exactly, then one
  IEEE division, not a multiplication by ``FP8_MAX / amax``, so that a host reference reproduces
  it bit for bit) rounded to the nearest fp8 value, ties to even, and saturated to +-FP8_MAX.

Inputs are assumed finite (an inf or NaN makes its block's scale meaningless).

The work runs on the GPU in plain ``numba.cuda.jit`` kernels (integer and float arithmetic, no
linked PTX), so it runs under Numba's CUDA simulator as well. The float32 -> fp8 conversion is
bit manipulation (``f32_to_fp8``): Numba has no fp8 type, and the hardware conversion
(``cvt.rn.satfinite.e4m3x2.f32``) would need PTX, which the simulator cannot run. It is a
``register_jitable`` function: kernels call it, and so can host Python (one value at a time).
"""
from __future__ import annotations

import contextlib
import functools
import warnings

import numpy as np
from numba import cuda, int32
from numba.extending import register_jitable

from .arrays import array_kind, describe, dtype_name
from .intrinsics import SIMULATOR
from .layout import FP8
from .schedule import cdiv

__all__ = ["FP8_MAX", "INPUT_DTYPES", "E4M3", "E5M2", "fp8_name", "fp8_code", "quantize", "dequantize",
           "f32_to_fp8", "f32_bits_to_fp8", "fp8_to_f32"]

FP8_MAX = dict(zip(FP8, (448.0, 57344.0)))        # the largest finite value of each format
INPUT_DTYPES = ("float32", "float16", "bfloat16")       # what quantize reads

# The format as the device functions take it (a run-time int: one kernel serves both formats)
E4M3 = 0
E5M2 = 1

_ALIASES = {"e4m3": "float8_e4m3fn", "e4m3fn": "float8_e4m3fn", "float8_e4m3fn": "float8_e4m3fn",
            "e5m2": "float8_e5m2", "float8_e5m2": "float8_e5m2"}


def fp8_name(dtype) -> str:
    """'float8_e4m3fn' or 'float8_e5m2' for a short name ('e4m3', 'e5m2'), a canonical name, a
    torch fp8 dtype or an ml_dtypes one; ValueError for anything else."""
    name = _ALIASES.get(dtype) if isinstance(dtype, str) else None
    if name is None:
        try:
            name = _ALIASES.get(dtype_name(dtype))
        except Exception:                 # (an object NumPy and str() both choke on)
            name = None
    if name is None:
        raise ValueError(f"dtype {dtype!r} is not an fp8 format numba_tc writes: use 'e4m3' "
                         "(float8_e4m3fn) or 'e5m2' (float8_e5m2), as a name, a torch dtype or an "
                         "ml_dtypes dtype")
    return name


def fp8_code(dtype) -> int:
    """``E4M3`` or ``E5M2``: the format argument of the device functions."""
    return E5M2 if fp8_name(dtype) == "float8_e5m2" else E4M3


# --- the conversions, as device functions (plain Python on the host) ---------------------------

@register_jitable
def f32_bits_to_fp8(b, fmt):
    """The fp8 bits (0..255) of the float32 whose bits are ``b`` (0 <= b < 2**32): rounded to
    nearest, ties to even, saturated to +-max (infinities too); NaN stays NaN (0x7f / 0x7e, with
    its sign), as ml_dtypes converts."""
    if fmt == E5M2:
        man, bias, top, nan = 2, 15, 0x7B, 0x7E
    else:                                  # e4m3fn: no infinities, 0x7f is NaN
        man, bias, top, nan = 3, 7, 0x7E, 0x7F
    sign = (b >> 24) & 0x80
    a = b & 0x7FFFFFFF
    if a > 0x7F800000:
        return sign | nan
    e = a >> 23
    if e >= 128 - bias:
        # an fp8 normal: rebias the exponent in place, then drop the low 23 - man mantissa bits,
        # rounding to nearest even; a carry out of the mantissa bumps the exponent, as it should
        t = a - ((127 - bias) << 23)
        s = 23 - man
        r = (t + (1 << (s - 1)) - 1 + ((t >> s) & 1)) >> s
        if r > top:
            r = top
        return sign | r
    # an fp8 subnormal (or zero): the significand in units of the smallest subnormal, 2^(1-bias-man)
    s = 151 - bias - man - e
    if s > 24:                             # below half the smallest subnormal (float32 subnormals too)
        return sign
    full = (a & 0x7FFFFF) | 0x800000
    # (rounding up to 2^man units is the smallest normal's encoding: the carry is right here too)
    return sign | ((full + (1 << (s - 1)) - 1 + ((full >> s) & 1)) >> s)


@register_jitable
def f32_to_fp8(x, fmt):
    """The fp8 bits of float32 ``x`` (``f32_bits_to_fp8``); ``fmt``: ``E4M3`` or ``E5M2``."""
    return f32_bits_to_fp8(np.int64(np.float32(x).view(np.uint32)), fmt)


@register_jitable
def fp8_to_f32(q, fmt):
    """The float32 value of fp8 bits ``q`` (exact)."""
    u = np.int64(q) & 0xFF
    if fmt == E5M2:
        man, bias = 2, 15
    else:
        man, bias = 3, 7
    sign = (u & 0x80) << 24
    e = (u & 0x7F) >> man
    m = u & ((1 << man) - 1)
    if fmt == E5M2 and e == 31:
        bits = sign | (0x7F800000 if m == 0 else 0x7FC00000)
    elif fmt != E5M2 and (u & 0x7F) == 0x7F:
        bits = sign | 0x7FC00000
    elif e > 0:
        bits = sign | ((e - bias + 127) << 23) | (m << (23 - man))
    else:                                  # subnormal: m units of 2^(1-bias-man), built exactly
        unit = np.uint32((128 - bias - man) << 23).view(np.float32)
        v = np.float32(m) * unit
        return -v if sign else v
    return np.uint32(bits).view(np.float32)


@register_jitable
def _abs_bits(v):
    """The bits of |v| for float32 v: for non-negative floats, integer order is float order."""
    return np.int64(np.float32(v).view(np.uint32)) & 0x7FFFFFFF


@register_jitable
def _load_float(x, r, c):
    return np.float32(x[r, c])


@register_jitable
def _load_bf16(x, r, c):
    """A bfloat16 element read through an int16 view: its bits are a float32's top half."""
    return np.uint32((np.int64(x[r, c]) & 0xFFFF) << 16).view(np.float32)


@register_jitable
def _coords(i, rows, cols, colfast):
    """(row, column) of the i-th element in memory-friendly order: columns fastest, or rows
    fastest for a column-major operand."""
    if colfast:
        r = i // cols
        return r, i - r * cols
    c = i // rows
    return i - c * rows, c


# Launch shapes. The simulator runs each CUDA thread as a Python thread, a block at a time, so
# there the grid-stride loops get few threads and each does more of the work.
# ``PIECE``: the elements a CUDA block of the amax kernel sweeps per group (a block larger than
# that is cut into pieces, reduced in parallel); ``GROUP``: the most items per group.
if SIMULATOR:
    THREADS, MAX_BLOCKS, PIECE = 32, 2, 1 << 30
else:
    THREADS, MAX_BLOCKS, PIECE = 256, 1 << 15, 4096
GROUP = 32


# --- kernels -------------------------------------------------------------------------------------

@cuda.jit
def _zero_kernel(buf, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        buf[i] = 0


@functools.lru_cache(maxsize=None)
def _kernels(bf16: bool):
    """(amax, quantize) kernels for one way of reading x: native floats, or bfloat16 bits."""
    load = _load_bf16 if bf16 else _load_float

    @cuda.jit
    def amax_kernel(x, amax, rows, cols, br, bc, nbc, items, pieces, piece, group, colfast):
        """amax[b] = max over block b of the bits of |x| (amax zeroed first). Block b is cut into
        ``pieces`` runs ("items") of at most ``piece`` elements. A CUDA block takes ``group``
        items at a time: its threads sweep their elements together (consecutive threads,
        consecutive elements), fold them into shared memory by item, and one atomic max per
        item goes to amax: two barriers per group, however small the blocks."""
        t = cuda.threadIdx.x
        nt = cuda.blockDim.x
        red = cuda.shared.array(GROUP, int32)
        for w0 in range(cuda.blockIdx.x * group, items, cuda.gridDim.x * group):
            if t < group:
                red[t] = 0
            cuda.syncthreads()
            g0 = -1
            m = 0
            r0 = c0 = h = wd = lo = n = 0
            for f in range(t, group * piece, nt):
                g = f // piece
                w = w0 + g
                if w >= items:
                    break
                if g != g0:                       # a new item: flush, and find where it lies
                    if m > 0:
                        cuda.atomic.max(red, g0, m)
                    m = 0
                    g0 = g
                    b = w // pieces
                    bi = b // nbc
                    r0 = bi * br
                    c0 = (b - bi * nbc) * bc
                    h = min(br, rows - r0)
                    wd = min(bc, cols - c0)
                    lo = (w - b * pieces) * piece
                    n = h * wd
                e = lo + f - g * piece
                if e < n:
                    rr, cc = _coords(e, h, wd, colfast)
                    m = max(m, _abs_bits(load(x, r0 + rr, c0 + cc)))
            if m > 0:
                cuda.atomic.max(red, g0, m)
            cuda.syncthreads()
            # (thread t resets red[t] for the next group itself, after reading it here)
            if t < group and w0 + t < items and red[t] > 0:
                cuda.atomic.max(amax, (w0 + t) // pieces, red[t])

    @cuda.jit
    def quantize_kernel(x, q, scales, rows, cols, br, bc, nbc, fmt, colfast):
        """q[r, c] = fp8(x[r, c] / scale of its block), every element, grid-stride."""
        for i in range(cuda.grid(1), rows * cols, cuda.gridsize(1)):
            r, c = _coords(i, rows, cols, colfast)
            s = scales[(r // br) * nbc + c // bc]
            q[r, c] = f32_to_fp8(load(x, r, c) / s, fmt)

    return amax_kernel, quantize_kernel


@cuda.jit
def _scales_kernel(amax, scales, n, fmax):
    """scales[i] = amax[i] / fmax in float32, or 1 where that is 0."""
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        s = np.uint32(amax[i]).view(np.float32) / fmax
        if s == 0:
            s = np.float32(1.0)
        scales[i] = s


@cuda.jit
def _dequantize_kernel(q, scales, out, rows, cols, br, bc, nbc, fmt, colfast):
    """out[r, c] = value of q[r, c] * scale of its block, in float32."""
    for i in range(cuda.grid(1), rows * cols, cuda.gridsize(1)):
        r, c = _coords(i, rows, cols, colfast)
        out[r, c] = fp8_to_f32(q[r, c], fmt) * scales[(r // br) * nbc + c // bc]


def _grid(n: int) -> int:
    return max(1, min(cdiv(n, THREADS), MAX_BLOCKS))


def _performance_warnings() -> tuple:
    out = []
    for mod in ("numba.cuda.core.errors", "numba.core.errors"):     # (numba-cuda raises its own)
        try:
            out.append(__import__(mod, fromlist=["NumbaPerformanceWarning"]).NumbaPerformanceWarning)
        except (ImportError, AttributeError):
            pass
    return tuple(out)


_PERFORMANCE_WARNINGS = _performance_warnings()


def _configured(kernel, grid: int, threads: int, stream):
    """``kernel[grid, threads, stream]`` without Numba's warning about grids under 128 blocks:
    these are small on purpose (a few scales, a small matrix)."""
    with warnings.catch_warnings():
        for cls in _PERFORMANCE_WARNINGS:
            warnings.simplefilter("ignore", cls)
        return kernel[grid, threads, stream]


# --- the calls -----------------------------------------------------------------------------------

def _check_block(block):
    """(br, bc) of a ``block`` argument, or None for per-tensor; ValueError otherwise."""
    if block is None:
        return None
    ok = (isinstance(block, (tuple, list)) and len(block) == 2
          and all(isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v > 0
                  for v in block))
    if not ok:
        raise ValueError(f"block must be None (one scale for the tensor) or a 2-tuple of positive ints "
                         f"(rows, cols) such as (1, 128) or (128, 128), got {block!r}")
    return int(block[0]), int(block[1])


def _geometry(rows: int, cols: int, block):
    """(br, bc, nbr, nbc, scales' shape): per-tensor is one block of the whole matrix."""
    b = _check_block(block)
    if b is None:
        return max(rows, 1), max(cols, 1), 1, 1, (1,)
    br, bc = b
    nbr, nbc = cdiv(rows, br), cdiv(cols, bc)
    return br, bc, nbr, nbc, (nbr, nbc)


@contextlib.contextmanager
def _placed(x, kind: str):
    """The call's device made current; yields its Numba stream: the caller's current stream
    for the array's kind on the array's device (Numba's default stream for NumPy arrays)."""
    if SIMULATOR:
        yield 0
        return
    from . import driver, runtime
    if kind == "numpy":
        dev = runtime.default_device()
    else:
        dev = runtime.device_of(x, kind)
    with driver.on_device(dev):
        yield runtime.numba_stream(runtime.current_stream(kind, dev))


def _numba_view(a):
    """A Numba device array over a GPU array's memory, no synchronization (the kernels run on the
    caller's stream, which orders them after the array's producers)."""
    if array_kind(a) == "numba":
        return a
    return cuda.as_cuda_array(a, sync=False)


def _new(kind: str, like, shape, dtype, stream):
    """A C-contiguous, uninitialized array of ``kind`` on ``like``'s device (NumPy calls: Numba)."""
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype=getattr(torch, np.dtype(dtype).name), device=like.device)
    if kind == "cuda":
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None and isinstance(like, cupy.ndarray):
            with cupy.cuda.Device(like.device.id):
                return cupy.empty(shape, dtype=dtype)
    return cuda.device_array(shape, dtype=dtype, stream=stream)


def _input_view(x, kind: str, dtype: str, stream):
    """A Numba device array the kernels read x through (bfloat16: its bits, as int16)."""
    if kind == "numpy":
        host = x.view(np.int16) if dtype == "bfloat16" else x
        if not (host.flags.c_contiguous or host.flags.f_contiguous):
            host = np.ascontiguousarray(host)     # (it is copied anyway)
        return cuda.to_device(host, stream=stream)
    if kind == "torch":
        import torch
        x = x.detach()                       # (torch gives no array interface to a tensor needing grad)
        return _numba_view(x.view(torch.int16) if dtype == "bfloat16" else x)
    v = _numba_view(x)
    return v.view(np.int16) if dtype == "bfloat16" else v


def _colfast(v) -> bool:
    """Whether columns are the faster-varying index in memory (row-major or so)."""
    s0, s1 = (abs(s) for s in v.strides)
    return s1 <= s0


def quantize(x, dtype="e4m3", block=None):
    """``(values, scales)``: ``x`` (2-D float32, float16 or bfloat16) in fp8 with float32 scales,
    ``x ~ values * scale`` (the module docstring has the exact rule).

    ``dtype``: 'e4m3' (float8_e4m3fn, max 448) or 'e5m2' (float8_e5m2, max 57344), or a torch or
    ml_dtypes fp8 dtype. ``block``: None for one scale (``scales`` of shape (1,), what
    torch._scaled_mm takes as a tensor-wise scale), or ``(br, bc)`` for one scale per br x bc
    block: ``scales`` of shape (ceil(rows/br), ceil(cols/bc)), row-major (edge blocks are the
    ragged remainders). ``values`` is C-contiguous whatever x's strides are.

    Results are of x's kind, on its device: torch -> a float8 tensor and a float32 tensor; NumPy
    (copied to the GPU and back) -> an ml_dtypes float8 array and a float32 array; Numba and CuPy
    (no fp8 dtype) -> uint8 arrays of the fp8 bits and float32 arrays. GPU arrays are read on the
    caller's current stream for their kind, which the results are ordered on.
    """
    name = fp8_name(dtype)
    kind, shape, strides, xdt, _ = describe(x, "x")
    if len(shape) != 2:
        raise ValueError(f"x must be 2-D, got {len(shape)}-D with shape {tuple(shape)}")
    if xdt not in INPUT_DTYPES:
        raise TypeError(f"x has dtype {xdt}; quantize takes {', '.join(INPUT_DTYPES)}")
    rows, cols = (int(v) for v in shape)
    br, bc, nbr, nbc, scales_shape = _geometry(rows, cols, block)
    nblocks = nbr * nbc
    fmt = E5M2 if name == "float8_e5m2" else E4M3
    dkind = "numba" if kind == "numpy" else kind       # (the kind of the device arrays)
    with _placed(x, kind) as stream:
        q = _new(dkind, x, (rows, cols), np.uint8, stream)
        scales = _new(dkind, x, (nblocks,), np.float32, stream)
        if nblocks:
            amax = _numba_view(_new(dkind, x, (nblocks,), np.int32, stream))
            sv = _numba_view(scales)
            _configured(_zero_kernel, _grid(nblocks), THREADS, stream)(amax, nblocks)
            if rows * cols:
                xv = _input_view(x, kind, xdt, stream)
                colfast = _colfast(xv)
                amax_kernel, quantize_kernel = _kernels(xdt == "bfloat16")
                # the amax kernel's work: items of at most PIECE elements, ``group`` at a time
                n_block = min(br, rows) * min(bc, cols)
                pieces = cdiv(n_block, PIECE)
                piece = cdiv(n_block, pieces)
                group = max(1, min(GROUP, PIECE // piece))
                items = nblocks * pieces
                nt = min(THREADS, cdiv(group * piece, 32) * 32)       # (never fewer than group)
                grid = max(1, min(cdiv(items, group), MAX_BLOCKS))
                _configured(amax_kernel, grid, nt, stream)(
                    xv, amax, rows, cols, br, bc, nbc, items, pieces, piece, group, colfast)
            _configured(_scales_kernel, _grid(nblocks), THREADS, stream)(
                amax, sv, nblocks, np.float32(FP8_MAX[name]))
            if rows * cols:
                _configured(quantize_kernel, _grid(rows * cols), THREADS, stream)(
                    xv, _numba_view(q), sv, rows, cols, br, bc, nbc, fmt, colfast)
        if kind == "numpy":
            import ml_dtypes
            values = q.copy_to_host(stream=stream).view(getattr(ml_dtypes, name))
            s = scales.copy_to_host(stream=stream).reshape(scales_shape)
            if not SIMULATOR:
                stream.synchronize()
            return values, s
    if kind == "torch":
        import torch
        return q.view(getattr(torch, name)), scales.view(scales_shape)
    return q, scales.reshape(scales_shape)


def dequantize(values, scales, block=None, dtype=None):
    """``values * scale`` in float32, of the kind of ``values``: the inverse of ``quantize`` (up
    to its rounding). ``block`` as given to ``quantize``; ``dtype``: the fp8 format, needed
    where ``values`` holds raw uint8 bits (Numba, CuPy, or a uint8 NumPy array), else read from
    ``values`` (ml_dtypes or torch float8) and checked against ``dtype`` if given too."""
    kind, shape, _, vdt, _ = describe(values, "values")
    if len(shape) != 2:
        raise ValueError(f"values must be 2-D, got {len(shape)}-D with shape {tuple(shape)}")
    if vdt in FP8:
        if dtype is not None and fp8_name(dtype) != vdt:
            raise ValueError(f"dtype {dtype!r} does not match values, which are {vdt}")
        name = vdt
    elif vdt == "uint8":
        if dtype is None:
            raise ValueError("values holds raw uint8 bits: pass dtype= ('e4m3' or 'e5m2') to say which format")
        name = fp8_name(dtype)
    else:
        raise TypeError(f"values has dtype {vdt}; dequantize takes float8_e4m3fn / float8_e5m2 arrays "
                        "or uint8 arrays of their bits (with dtype=)")
    rows, cols = (int(v) for v in shape)
    br, bc, nbr, nbc, scales_shape = _geometry(rows, cols, block)
    skind, sshape, _, sdt, _ = describe(scales, "scales")
    if skind != kind:
        raise TypeError(f"scales is a {skind} array but values a {kind} one: pass both of one kind")
    if sdt != "float32":
        raise TypeError(f"scales has dtype {sdt}; it must be float32")
    nscales = int(np.prod(sshape, dtype=np.int64))
    if (block is None and nscales != 1) or (block is not None and tuple(sshape) != scales_shape):
        want = "one element" if block is None else f"shape {scales_shape}"
        raise ValueError(f"scales has shape {tuple(sshape)}, but {rows}x{cols} values with block={block!r} "
                         f"take {want}")
    fmt = E5M2 if name == "float8_e5m2" else E4M3
    if kind == "numpy":                      # on the host: exact, and the reference's own arithmetic
        import ml_dtypes
        v = values.view(getattr(ml_dtypes, name)).astype(np.float32)
        s = np.asarray(scales, dtype=np.float32).reshape(nbr, nbc)
        full = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:rows, :cols]
        return v * full
    with _placed(values, kind) as stream:
        out = _new(kind, values, (rows, cols), np.float32, stream)
        if rows * cols:
            if kind == "torch":
                import torch
                qv = _numba_view(values.detach().view(torch.uint8))
                sv = _numba_view(scales.detach().reshape(-1))
            else:
                qv = _numba_view(values)
                sv = _numba_view(scales).reshape(nscales)
            _configured(_dequantize_kernel, _grid(rows * cols), THREADS, stream)(
                qv, sv, _numba_view(out), rows, cols, br, bc, nbc, fmt, _colfast(qv))
    return out
