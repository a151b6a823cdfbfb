"""Quantized weights (issue 56): int4 with group-wise scales (and optional zero points), int8,
and 4-bit formats of the user's own, held in the layout the weight-streaming kernel reads.

A weight is ``w`` of shape (N, K), as ``nn.Linear`` holds it (out_features, in_features);
``qgemm.gemm(x, qw)`` computes ``x @ w.T``. Each row of ``w`` is cut into groups of ``group``
elements of K (the last one ragged when ``group`` does not divide K; ``group=0``: one group, the
whole row, per-channel), and each element is a code ``q`` with the group's scale ``s`` (and zero
point ``z``):

| format | code | value |
| --- | --- | --- |
| ``"int4"`` (GPTQ symmetric) | 0..15 | ``(q - 8) * s`` |
| ``"int4_zp"`` (GPTQ/AWQ asymmetric) | 0..15, ``z`` 0..15 | ``(q - z) * s`` |
| ``"int8"`` | 0..255 | ``(q - 128) * s`` |
| ``user_format(decode)`` (QLoRA's NF4...) | 0..15 | ``decode(q) * s`` |

``decode`` is the user's ``numba.cuda.jit(device=True)`` function of one code (an int 0..15)
returning its value (the scale is applied by the kernel); the kernel evaluates it once per code
into a lookup table in the activations' type (so its value is ``decode(q)`` rounded to bf16 or
fp16), and it is part of the kernel's identity by its code (``epilogue.code_digest``).

Why codes times a group scale, applied to the sums: the kernel multiplies exact small integers
(or table values) by the activations on the tensor cores and scales each group's fp32 sum once,
so its result is the float64 product of the dequantized weight up to fp32 accumulation: nothing
rounds the weight (``reference``). ``dequantize`` to a 16-bit type rounds ``value * s`` once.

**The packed layout** (``packed``: uint32 words, made once by ``pack``): one 16-byte load gives a
thread exactly its ``mma.m16n8k16`` A fragments, with the weight as A (16 output features) and the
activations as B (8 rows). Features go in m16 tiles, K in chunks of ``chunk_k`` (64 for 4-bit
codes: four k16 steps; 32 for int8: two); tile ``mt``, chunk ``c`` is 512 bytes, lane ``l``'s 16
of them at ``((mt * kc + c) * 32 + l) * 16``. Within a k16 step the mma's K order is permuted (the
same permutation for A and B leaves the product unchanged): steps go in spans of 32 K (two steps
a span, so a group of 32 holds whole steps), and thread t's four K positions of step s are
``32 (s // 2) + 8 t + 4 (s % 2) + (0..3)`` (``qformat.run_k``), so over a chunk its activations
are one piece of 8 consecutive K of each row per span (a 16-byte copy each). Within a word the
codes are ordered for the kernel's conversion (``element_of``): ``"magic"`` (int4) puts register
r's two codes in nibbles r and r + 4, which the lop3 magic-number conversion (``ptx/quant.cu``)
turns into bf16x2 / f16x2 pairs with a shift and one lop3 per register; ``"lut"`` (user formats)
puts them in byte r, one table lookup per register; ``"bytes"`` (int8) two 8-bit codes per
register. N is padded to whole tiles and K to whole chunks and groups with code 0 (the kernel
never uses them: the padded K meets activations it reads as 0).

Helpers run on NumPy (vectorized: the reference) and on GPU arrays (torch, CuPy, Numba) in plain
``numba.cuda.jit`` kernels (``qconvert``: integer and float arithmetic only, so they run under
the CUDA simulator too), with the same float32 arithmetic, so both give the same codes bit for
bit: ``quantize``, ``pack``, ``unpack``, ``dequantize``; ``from_gptq`` / ``from_awq`` read those
checkpoints' packed tensors. The product, ``gemm`` (``qproduct``; kernels in ``qgemm``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from numba import cuda

from .arrays import array_kind, describe
from .fp8 import _configured, _new, _numba_view, _placed
from .qconvert import THREADS, decode_kernel, fmt_id, grid, levels32, pack_kernel, qrange, quantize_gpu
from .qformat import (ACT_DTYPES, FORMATS, GROUPS, INT4, INT4_ZP, INT8, NF4_LEVELS, ORDERS, SCALE_DTYPES, SCALE_KIND,
                      TILE_N, Format, UserDecode, element_of, get_format, user_format)
from .schedule import cdiv

__all__ = ["Format", "UserDecode", "INT4", "INT4_ZP", "INT8", "FORMATS", "get_format", "user_format",
           "QuantizedWeight", "quantize", "pack", "unpack", "dequantize", "reference", "from_gptq", "from_awq",
           "element_of", "SCALE_DTYPES", "ACT_DTYPES", "GROUPS", "TILE_N", "NF4_LEVELS", "gemm", "pick", "explain",
           "to_numpy", "to_torch", "levels_in"]

_SLAB = 1 << 16                  # packed words per NumPy pass


def padded(fmt: Format, n: int, k: int, group: int):
    """(N padded to whole tiles, K padded to whole chunks and groups, chunks)."""
    unit = fmt.chunk_k if group == 0 else math.lcm(fmt.chunk_k, group)
    kp = max(cdiv(k, unit), 1) * unit
    return max(cdiv(n, TILE_N), 1) * TILE_N, kp, kp // fmt.chunk_k


def _codes_per_word(fmt: Format) -> int:
    return 32 // fmt.bits


def _groups(k: int, group: int) -> int:
    return 1 if group == 0 else cdiv(k, group)


# --- the weight --------------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """A quantized (N, K) weight: ``packed`` (uint32, the kernel's layout), ``scales`` of shape
    (G, N) in ``scale_dtype`` (G = ceil(K / group), 1 for ``group=0``), ``zeros`` (G, N) uint8
    codes or None; arrays of one kind (NumPy, torch, CuPy, Numba), bfloat16 scales as uint16
    bits where the kind has no bfloat16. Frozen: ``gemm`` keeps its planned calls on the weight
    (``plans``, by the input's facts) with the arrays' addresses, so the arrays must stay where
    they are (make a new ``QuantizedWeight`` for arrays moved or replaced)."""
    fmt: Format
    n: int
    k: int
    group: int
    scale_dtype: str
    packed: Any = field(repr=False)
    scales: Any = field(repr=False)
    zeros: Any = field(default=None, repr=False)
    plans: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def shape(self):
        return (self.n, self.k)

    @property
    def groups(self) -> int:
        return _groups(self.k, self.group)

    @property
    def group_k(self) -> int:
        """K of a group as the kernels see it (the whole padded row for ``group=0``)."""
        return self.group if self.group else padded(self.fmt, self.n, self.k, 0)[1]

    @property
    def padded(self):
        return padded(self.fmt, self.n, self.k, self.group)

    @property
    def kind(self) -> str:
        return array_kind(self.packed)

    @property
    def nbytes(self) -> int:
        """Bytes the product reads of the weight (codes, scales, zeros)."""
        np_, kp, _ = self.padded
        item = np.dtype(np.float32).itemsize if self.scale_dtype == "float32" else 2
        return np_ * kp * self.fmt.bits // 8 + self.groups * self.n * (item + (self.zeros is not None))

    def arrays(self):
        return self.packed, self.scales, self.zeros

# --- quantize -------------------------------------------------------------------------------------

def _check_weight(w, group, fmt):
    kind, shape, _, dt, _ = describe(w, "w")
    if len(shape) != 2:
        raise ValueError(f"w must be 2-D (out_features, in_features), got shape {tuple(shape)}")
    if dt not in ("float32", "float16", "bfloat16", "float64"):
        raise TypeError(f"w has dtype {dt}; quantize takes float32, float16, bfloat16 (or float64 on NumPy)")
    if dt == "float64" and kind != "numpy":
        raise TypeError("w has dtype float64: on the GPU quantize takes float32, float16 or bfloat16")
    if isinstance(group, bool) or not isinstance(group, (int, np.integer)) or group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS} (0: one scale per row), got {group!r}")
    return kind, int(shape[0]), int(shape[1]), dt


def quantize(w, fmt="int4", group: int = 128, scale_dtype: str = "bfloat16") -> QuantizedWeight:
    """``w`` (N, K) quantized and packed: a ``QuantizedWeight`` with arrays of ``w``'s kind, on
    its device (GPU arrays: computed there, on the caller's current stream).

    Per row and group of ``group`` elements of K (0: the whole row): symmetric formats take
    ``s = max|w| / r`` (r: 7 for int4, 127 for int8, the largest |decode(q)| for a user format),
    rounded to ``scale_dtype``, then ``q = rint(w / s) + offset`` clamped (a user format: the
    code of the nearest value of w / s); ``"int4_zp"`` takes ``s = (max - min) / 15``,
    ``z = rint(-min / s)`` clamped to 0..15 and ``q = rint(w / s) + z`` clamped. Divisions are
    float32 (w converted to float32 exactly), the same on NumPy and the GPU."""
    fmt = get_format(fmt)
    if scale_dtype not in SCALE_DTYPES:
        raise ValueError(f"scale_dtype must be one of {SCALE_DTYPES}, got {scale_dtype!r}")
    kind, n, k, dt = _check_weight(w, group, fmt)
    if n == 0 or k == 0:
        raise ValueError(f"w has shape {(n, k)}: nothing to quantize")
    if kind == "numpy":
        codes, scales, zeros = _quantize_numpy(np.asarray(w), fmt, group, scale_dtype)
        return pack(codes, scales, zeros, fmt, group, scale_dtype)
    return pack(*quantize_gpu(w, kind, n, k, dt, fmt, group, scale_dtype), fmt, group, scale_dtype)


def _as_f32(w) -> np.ndarray:
    return np.asarray(w).astype(np.float32)


def _quantize_numpy(w, fmt, group, scale_dtype):
    wf = _as_f32(w)
    n, k = wf.shape
    gk = group or k
    starts = np.arange(0, k, gk)
    scale_fn = lambda x: _scales_np(x, scale_dtype)      # noqa: E731
    if fmt.zeros:
        mn = np.minimum.reduceat(wf, starts, axis=1)
        mx = np.maximum.reduceat(wf, starts, axis=1)
        raw = (mx - mn) / np.float32(fmt.qmax)
        bits, s32 = scale_fn(raw)
        z = np.clip(np.rint(-mn / s32), 0, fmt.qmax).astype(np.int64)
    else:
        amax = np.maximum.reduceat(np.abs(wf), starts, axis=1)
        bits, s32 = scale_fn(amax / np.float32(qrange(fmt)))
        z = np.full(bits.shape, fmt.offset, np.int64)
    sfull = np.repeat(s32, gk, axis=1)[:, :k]
    t = wf / sfull
    if fmt.user is not None:
        lev = levels32(fmt)
        codes = np.empty((n, k), np.uint8)
        step = max(1, (1 << 22) // max(k, 1))
        for r0 in range(0, n, step):                  # (rows at a time: 16 distances per element)
            d = np.abs(t[r0:r0 + step, :, None] - lev)
            codes[r0:r0 + step] = np.argmin(d, axis=-1)
    else:
        zfull = np.repeat(z, gk, axis=1)[:, :k]
        codes = np.clip(np.rint(t).astype(np.int64) + zfull, 0, fmt.qmax).astype(np.uint8)
    scales = _scales_array(bits.T.copy(), scale_dtype)
    zeros = z.T.astype(np.uint8).copy() if fmt.zeros else None
    return codes, scales, zeros


def _scales_np(x: np.ndarray, scale_dtype: str):
    """``qconvert.scale_of`` on an array: (bits, float32 values) of positive float32 scales rounded to
    ``scale_dtype`` (saturated; a zero scale becomes 1)."""
    x = np.asarray(x, np.float32)
    if scale_dtype == "bfloat16":
        b = x.view(np.uint32).astype(np.int64) & 0x7FFFFFFF
        h = np.minimum((b + 0x7FFF + ((b >> 16) & 1)) >> 16, 0x7F7F)
        h = np.where(h == 0, 0x3F80, h)
        return h, (h.astype(np.uint32) << 16).view(np.float32)
    if scale_dtype == "float16":
        with np.errstate(over="ignore"):
            v = np.minimum(np.abs(x).astype(np.float16), np.float16(65504))
        v = np.where(v == 0, np.float16(1), v)
        return v.view(np.uint16).astype(np.int64), v.astype(np.float32)
    v = np.where(x == 0, np.float32(1), x)
    return v.view(np.uint32).astype(np.int64), v


def _scales_array(bits: np.ndarray, scale_dtype: str) -> np.ndarray:
    """NumPy scales of ``scale_dtype`` from their bits."""
    if scale_dtype == "float32":
        return bits.astype(np.uint32).view(np.float32)
    if scale_dtype == "float16":
        return bits.astype(np.uint16).view(np.float16)
    import ml_dtypes
    return bits.astype(np.uint16).view(ml_dtypes.bfloat16)


def _scale_bits_np(scales, scale_dtype: str) -> np.ndarray:
    """The stored bits of NumPy scales (int64)."""
    a = np.asarray(scales)
    if scale_dtype == "float32":
        return a.astype(np.float32).view(np.uint32).astype(np.int64)
    return a.view(np.uint16).astype(np.int64)


def _scale_values_np(scales, scale_dtype: str) -> np.ndarray:
    """NumPy scales as float64 (exact)."""
    a = np.asarray(scales)
    if scale_dtype == "bfloat16":
        return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)



# --- pack / unpack / dequantize ------------------------------------------------------------------------

def pack(codes, scales, zeros=None, fmt="int4", group: int = 128, scale_dtype: Optional[str] = None) -> QuantizedWeight:
    """A ``QuantizedWeight`` from codes (N, K) uint8 (0..15 for 4-bit formats, 0..255 int8),
    ``scales`` (G, N) and, for ``"int4_zp"``, ``zeros`` (G, N) uint8: the codes laid out for the
    kernel (module docstring); scales and zeros are kept as given. All of one kind."""
    fmt = get_format(fmt)
    kind, shape, _, dt, _ = describe(codes, "codes")
    if len(shape) != 2 or dt != "uint8":
        raise TypeError(f"codes must be a 2-D uint8 array (N, K), got {dt} of shape {tuple(shape)}")
    n, k = (int(v) for v in shape)
    if isinstance(group, bool) or group not in GROUPS:
        raise ValueError(f"group must be one of {GROUPS}, got {group!r}")
    groups = _groups(k, group)
    sk, sshape, _, sdt, _ = describe(scales, "scales")
    if sk != kind:
        raise TypeError(f"scales is a {sk} array, codes a {kind} one: pass arrays of one kind")
    sdt = {"uint16": "bfloat16", "int16": "bfloat16"}.get(sdt, sdt)
    if scale_dtype is None:
        scale_dtype = sdt
    if sdt != scale_dtype or sdt not in SCALE_DTYPES:
        raise TypeError(f"scales have dtype {sdt}; they must be one of {SCALE_DTYPES} (scale_dtype={scale_dtype!r})")
    if tuple(sshape) != (groups, n):
        raise ValueError(f"scales have shape {tuple(sshape)}; {n}x{k} with group={group} takes ({groups}, {n})")
    if fmt.zeros:
        if zeros is None:
            raise ValueError(f"format {fmt.name!r} takes zeros (G, N) uint8")
        zk, zshape, _, zdt, _ = describe(zeros, "zeros")
        if zk != kind or zdt != "uint8" or tuple(zshape) != (groups, n):
            raise ValueError(f"zeros must be a {kind} uint8 array of shape ({groups}, {n}), got {zk} {zdt} "
                             f"{tuple(zshape)}")
    elif zeros is not None:
        raise ValueError(f"format {fmt.name!r} has no zero points (use 'int4_zp')")
    np_, kp, kc = padded(fmt, n, k, group)
    nwords = np_ * kp * fmt.bits // 32
    order, per = ORDERS[fmt.order], _codes_per_word(fmt)
    if kind == "numpy":
        c = np.asarray(codes)
        if c.size and int(c.max()) > fmt.qmax:
            raise ValueError(f"codes must be at most {fmt.qmax} for {fmt.name}")
        packed = np.empty(nwords, np.uint32)
        j = np.arange(per, dtype=np.int64)[None, :]
        shifts = (fmt.bits * j).astype(np.uint64)
        for w0 in range(0, nwords, _SLAB):            # (slabs of words: the index arrays are large)
            wi = np.arange(w0, min(w0 + _SLAB, nwords), dtype=np.int64)[:, None]
            r, cc = element_of(wi, j, kc, order)
            inside = (r < n) & (cc < k)
            vals = np.where(inside, c[np.minimum(r, n - 1), np.minimum(cc, k - 1)].astype(np.uint64), 0)
            packed[w0:w0 + len(wi)] = (vals << shifts).sum(axis=1).astype(np.uint32)
        return QuantizedWeight(fmt, n, k, group, scale_dtype, packed, np.asarray(scales),
                               None if zeros is None else np.asarray(zeros))
    with _placed(codes, kind) as stream:
        packed = _new(kind, codes, (nwords,), np.int32 if kind == "torch" else np.uint32, stream)
        _configured(pack_kernel, grid(nwords), THREADS, stream)(
            _numba_view(_raw(codes, kind)), _numba_view(packed), n, k, kc, order, fmt.bits, per)
    return QuantizedWeight(fmt, n, k, group, scale_dtype, packed, scales, zeros)


def _raw(x, kind):
    if kind == "torch":
        return x.detach()
    return x


def unpack(qw: QuantizedWeight):
    """(codes (N, K) uint8, scales, zeros): ``pack``'s inverse, of the weight's kind."""
    fmt = qw.fmt
    _, _, kc = qw.padded
    order, per = ORDERS[fmt.order], _codes_per_word(fmt)
    kind = qw.kind
    if kind == "numpy":
        p = np.asarray(qw.packed).view(np.uint32).astype(np.int64)
        j = np.arange(per, dtype=np.int64)[None, :]
        codes = np.zeros((qw.n, qw.k), np.uint8)
        for w0 in range(0, p.size, _SLAB):
            wi = np.arange(w0, min(w0 + _SLAB, p.size), dtype=np.int64)[:, None]
            r, c = element_of(wi, j, kc, order)
            vals = (p[w0:w0 + len(wi), None] >> (fmt.bits * j)) & fmt.qmax
            inside = (r < qw.n) & (c < qw.k)
            codes[r[inside], c[inside]] = vals[inside]
        return codes, qw.scales, qw.zeros
    with _placed(qw.packed, kind) as stream:
        codes = _new(kind, qw.packed, (qw.n, qw.k), np.uint8, stream)
        _decode(qw, codes, np.zeros(1, np.float32), -1, stream)
    return codes, qw.scales, qw.zeros


def levels_in(fmt: Format, dtype: str) -> np.ndarray:
    """A user format's values as the kernel holds them: rounded to the activations' ``dtype``
    (float64). Built-in formats' values are small integers, exact in any type."""
    lev = fmt.levels()
    if fmt.user is None:
        return lev
    return _round_np(lev, dtype)


def _round_np(x: np.ndarray, dtype: str) -> np.ndarray:
    """x rounded to ``dtype`` (to nearest even), as float64."""
    if dtype == "float32":
        return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)
    if dtype == "float16":
        return np.asarray(x, np.float64).astype(np.float32).astype(np.float16).astype(np.float64)
    import ml_dtypes
    return np.asarray(x, np.float64).astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def dequantize(qw: QuantizedWeight, dtype: str = "float32", act_dtype: str = "bfloat16"):
    """The (N, K) weight ``value(q) * s`` in ``dtype`` (float32: exact; float16, bfloat16: one
    rounding), of the weight's kind. A user format's values are first rounded to ``act_dtype``
    (the activations' type: the kernel's table)."""
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
    if act_dtype not in ACT_DTYPES:
        raise ValueError(f"act_dtype must be one of {ACT_DTYPES}, got {act_dtype!r}")
    fmt = qw.fmt
    kind = qw.kind
    if kind == "numpy":
        w = _weight64(qw, act_dtype)
        return _round_np(w, dtype).astype(np.float32) if dtype == "float32" else _np_out(w, dtype)
    lev = levels_in(fmt, act_dtype).astype(np.float32)
    with _placed(qw.packed, kind) as stream:
        out = _new(kind, qw.packed, (qw.n, qw.k), np.float32 if dtype == "float32" else np.int16, stream)
        _decode(qw, out, lev, SCALE_KIND[dtype], stream)
    if kind == "torch" and dtype != "float32":
        import torch
        return out.view(getattr(torch, dtype))
    return out


def _decode(qw: QuantizedWeight, out, levels: np.ndarray, okind: int, stream) -> None:
    """``qconvert.decode_kernel`` over a GPU weight's words into ``out`` (N, K): its codes
    (``okind`` -1) or its values in the output kind ``okind``."""
    fmt, kind = qw.fmt, qw.kind
    _, _, kc = qw.padded
    nwords = int(describe(qw.packed, "packed")[1][0])
    z = qw.zeros if qw.zeros is not None else _new(kind, qw.packed, (1, 1), np.uint8, stream)
    _configured(decode_kernel, grid(nwords), THREADS, stream)(
        _numba_view(_raw(qw.packed, kind)), _scale_view(qw.scales, kind, qw.scale_dtype), _numba_view(_raw(z, kind)),
        cuda.to_device(levels, stream=stream), _numba_view(out), qw.n, qw.k, kc, ORDERS[fmt.order], fmt.bits,
        _codes_per_word(fmt), qw.group_k, SCALE_KIND[qw.scale_dtype], qw.zeros is not None,
        -1 if fmt.user is not None else fmt.offset, okind)


def _scale_view(scales, kind, scale_dtype):
    """A Numba view of scales as their bits (uint16 / uint32 elements)."""
    if kind == "torch":
        import torch
        s = scales.detach()
        return _numba_view(s.view(torch.int32 if scale_dtype == "float32" else torch.int16))
    v = _numba_view(scales)
    return v.view(np.uint32 if scale_dtype == "float32" else np.uint16)


def _np_out(w: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float16":
        return w.astype(np.float32).astype(np.float16)
    import ml_dtypes
    return w.astype(np.float32).astype(ml_dtypes.bfloat16)


def _weight64(qw: QuantizedWeight, act_dtype: str = "bfloat16") -> np.ndarray:
    """The exact dequantized weight (float64) of a NumPy ``QuantizedWeight``."""
    codes, scales, zeros = unpack(qw)
    gk = qw.group_k
    s = np.repeat(_scale_values_np(scales, qw.scale_dtype).T, gk, axis=1)[:, :qw.k]
    if qw.fmt.user is not None:
        v = levels_in(qw.fmt, act_dtype)[codes]
    else:
        z = np.repeat(np.asarray(zeros).T.astype(np.float64), gk, axis=1)[:, :qw.k] if zeros is not None \
            else float(qw.fmt.offset)
        v = codes.astype(np.float64) - z
    return v * s


def to_numpy(qw: QuantizedWeight) -> QuantizedWeight:
    """The same weight with NumPy arrays (copied from the GPU)."""
    if qw.kind == "numpy":
        return qw

    def host(x):
        if x is None:
            return None
        if array_kind(x) == "torch":
            import torch
            t = x.detach().cpu()
            if t.dtype == torch.bfloat16:
                return t.view(torch.int16).numpy().view(np.uint16)
            return t.numpy()
        if hasattr(x, "copy_to_host"):
            return x.copy_to_host()
        return x.get()
    packed = host(qw.packed).view(np.uint32)
    scales = host(qw.scales)
    if qw.scale_dtype == "bfloat16":
        import ml_dtypes
        scales = scales.view(np.uint16).view(ml_dtypes.bfloat16)
    return QuantizedWeight(qw.fmt, qw.n, qw.k, qw.group, qw.scale_dtype, packed, scales, host(qw.zeros))


def reference(x, qw: QuantizedWeight) -> np.ndarray:
    """``x @ w.T`` in float64 with the exactly dequantized weight (a user format's values in x's
    type: the kernel's table): what the product is within fp32 accumulation. ``x``: NumPy
    (float32, float16, bfloat16)."""
    from .arrays import dtype_name
    x = np.asarray(x)
    act = dtype_name(x.dtype)
    w = _weight64(to_numpy(qw), act if act in ACT_DTYPES else "bfloat16")
    return x.astype(np.float64) @ w.T


# --- checkpoints ----------------------------------------------------------------------------------

def _nibbles(a: np.ndarray, axis: int, order=tuple(range(8))) -> np.ndarray:
    """int32 words holding 8 nibbles along ``axis`` -> uint8 codes (nibble ``order[i]`` of a
    word is element i of its 8)."""
    a = np.asarray(a).astype(np.int64) & 0xFFFFFFFF
    parts = [((a >> (4 * o)) & 0xF).astype(np.uint8) for o in order]
    st = np.stack(parts, axis=axis + 1)
    shape = list(a.shape)
    shape[axis] *= 8
    return st.reshape(shape)


def _host(x):
    if array_kind(x) == "torch":
        return x.detach().cpu().numpy()
    return np.asarray(x)


def from_gptq(qweight, qzeros, scales, group: int, sym: bool = True, zeros_offset: int = 1) -> QuantizedWeight:
    """A GPTQ checkpoint's 4-bit layer (AutoGPTQ's ``QuantLinear``): ``qweight`` int32 (K/8, N),
    8 codes along K per word; ``qzeros`` int32 (G, N/8); ``scales`` float16 (G, N); weight
    ``(q - z) * s``. GPTQ v1 stores ``z - 1`` (``zeros_offset=1``; 0 for v2). ``sym``: every
    zero point is 8 (the ``"int4"`` format), else ``"int4_zp"``. NumPy (or torch, read on the
    host) in; NumPy out (move it with ``to_torch``). ``g_idx`` (act-order) is not supported."""
    codes = _nibbles(_host(qweight), 0).T.copy()                     # (N, K)
    z = (_nibbles(_host(qzeros), 1).astype(np.int64) + zeros_offset) & 0xF    # (G, N); v1's z - 1 of 0 wraps
    return _from_checkpoint(codes, z, _host(scales), group, sym, "GPTQ")


_AWQ_ORDER = (0, 4, 1, 5, 2, 6, 3, 7)     # AWQ packs columns 0..7 in nibbles 0, 2, 4, 6, 1, 3, 5, 7


def from_awq(qweight, qzeros, scales, group: int) -> QuantizedWeight:
    """An AWQ checkpoint's layer (AutoAWQ GEMM): ``qweight`` int32 (K, N/8), 8 codes along N per
    word in AWQ's order; ``qzeros`` int32 (G, N/8) likewise; ``scales`` float16 (G, N); weight
    ``(q - z) * s`` (``"int4_zp"``)."""
    codes = _nibbles(_host(qweight), 1, _AWQ_ORDER).T.copy()        # (N, K)
    z = _nibbles(_host(qzeros), 1, _AWQ_ORDER).astype(np.int64)
    return _from_checkpoint(codes, z, _host(scales), group, False, "AWQ")


def _from_checkpoint(codes, z, scales, group, sym, who):
    n, k = codes.shape
    groups = _groups(k, group)
    if scales.shape != (groups, n) or z.shape[0] != groups or z.shape[1] < n:
        raise ValueError(f"{who} tensors do not agree: weight {n}x{k}, group {group}, scales {scales.shape}, "
                         f"zeros {z.shape}")
    z = z[:, :n]
    sdt = "float16" if scales.dtype == np.float16 else "float32"
    scales = scales.astype(np.float16 if sdt == "float16" else np.float32)
    if sym:
        if np.any(z != 8):
            raise ValueError(f"{who} zero points are not all 8: pass sym=False (format 'int4_zp')")
        return pack(codes, scales, None, INT4, group, sdt)
    if z.min() < 0 or z.max() > 15:
        raise ValueError(f"{who} zero points outside 0..15 (check zeros_offset)")
    return pack(codes, scales, z.astype(np.uint8), INT4_ZP, group, sdt)


def to_torch(qw: QuantizedWeight, device="cuda") -> QuantizedWeight:
    """A NumPy ``QuantizedWeight`` with torch tensors on ``device``."""
    import torch
    qw = to_numpy(qw)

    def t(x, dt=None):
        if x is None:
            return None
        return torch.from_numpy(np.ascontiguousarray(x)).to(device)
    scales = np.asarray(qw.scales)
    if qw.scale_dtype == "bfloat16":
        st = t(scales.view(np.int16)).view(torch.bfloat16)
    else:
        st = t(scales)
    return QuantizedWeight(qw.fmt, qw.n, qw.k, qw.group, qw.scale_dtype, t(np.asarray(qw.packed).view(np.int32)), st,
                           t(qw.zeros))


# the product (``qproduct``), here for ``numba_tc.quant.gemm``
from .qproduct import explain, gemm, pick  # noqa: E402
