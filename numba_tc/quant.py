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
same permutation for A and B leaves the product unchanged): thread t's four K positions of the
step are ``16 s + 4 t + (0..3)``, so its activations are one 8-byte load. Within a word the
codes are ordered for the kernel's conversion (``element_of``): ``"magic"`` (int4) puts register
r's two codes in nibbles r and r + 4, which the lop3 magic-number conversion (``ptx/quant.cu``)
turns into bf16x2 / f16x2 pairs with a shift and one lop3 per register; ``"lut"`` (user formats)
puts them in byte r, one table lookup per register; ``"bytes"`` (int8) two 8-bit codes per
register. N is padded to whole tiles and K to whole chunks and groups with code 0 (the kernel
never uses them: the padded K meets activations it reads as 0).

Helpers run on NumPy (vectorized: the reference) and on GPU arrays (torch, CuPy, Numba) in plain
``numba.cuda.jit`` kernels (integer and float arithmetic only, so they run under the CUDA
simulator too), with the same float32 arithmetic, so both give the same codes bit for bit:
``quantize``, ``pack``, ``unpack``, ``dequantize``; ``from_gptq`` / ``from_awq`` read those
checkpoints' packed tensors.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from numba import cuda
from numba.extending import register_jitable

from .arrays import array_kind, describe
from .qformat import (ACT_DTYPES, FORMATS, GROUPS, INT4, INT4_ZP, INT8, NF4_LEVELS, ORDERS, SCALE_DTYPES, SCALE_KIND,
                      TILE_N, Format, UserDecode, element_of, get_format, user_format)
from .fp8 import _configured, _input_view, _load_bf16, _load_float, _new, _numba_view, _placed
from .schedule import cdiv

__all__ = ["Format", "UserDecode", "INT4", "INT4_ZP", "INT8", "FORMATS", "get_format", "user_format",
           "QuantizedWeight", "quantize", "pack", "unpack", "dequantize", "reference", "from_gptq", "from_awq",
           "element_of", "SCALE_DTYPES", "ACT_DTYPES", "GROUPS", "TILE_N", "NF4_LEVELS"]

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

@dataclass(eq=False)
class QuantizedWeight:
    """A quantized (N, K) weight: ``packed`` (uint32, the kernel's layout), ``scales`` of shape
    (G, N) in ``scale_dtype`` (G = ceil(K / group), 1 for ``group=0``), ``zeros`` (G, N) uint8
    codes or None; arrays of one kind (NumPy, torch, CuPy, Numba), bfloat16 scales as uint16
    bits where the kind has no bfloat16."""
    fmt: Format
    n: int
    k: int
    group: int
    scale_dtype: str
    packed: Any = field(repr=False)
    scales: Any = field(repr=False)
    zeros: Any = field(default=None, repr=False)

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


# --- scalar arithmetic shared by the NumPy and GPU paths ---------------------------------------------

@register_jitable
def _round_bits(a, man, bias, top):
    """The bits of a non-negative finite float32 (bits ``a``) in a float of ``man`` mantissa bits
    and exponent ``bias`` (fp16: 10, 15), to nearest even, saturated at ``top``."""
    e = a >> 23
    if e >= 128 - bias:
        t = a - ((127 - bias) << 23)
        s = 23 - man
        r = (t + (1 << (s - 1)) - 1 + ((t >> s) & 1)) >> s
        return min(r, top)
    s = 151 - bias - man - e
    if s > 24:
        return 0
    full = (a & 0x7FFFFF) | 0x800000
    return (full + (1 << (s - 1)) - 1 + ((full >> s) & 1)) >> s


@register_jitable
def _scale_of(x, kind):
    """(bits as stored, float32 value) of a positive scale ``x`` (float32) in the scale dtype of
    ``kind`` (0 fp32, 1 fp16, 2 bf16); a zero scale (an all-zero group) becomes 1."""
    b = np.int64(np.float32(x).view(np.uint32)) & 0x7FFFFFFF
    if kind == 2:
        h = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
        h = min(h, 0x7F7F)
        if h == 0:
            h = 0x3F80
        return h, np.uint32(h << 16).view(np.float32)
    if kind == 1:
        h = _round_bits(b, 10, 15, 0x7BFF)
        if h == 0:
            h = 0x3C00
        return h, _f16_value(h)
    v = np.float32(x)
    if v == 0:
        v = np.float32(1.0)
    return np.int64(v.view(np.uint32)), v


@register_jitable
def _f16_value(h):
    """The float32 value of fp16 bits ``h`` (non-negative)."""
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0:
        return np.float32(m) * np.float32(2.0 ** -24)
    return np.uint32(((e + 112) << 23) | (m << 13)).view(np.float32)


@register_jitable
def _code_of(t, fmt_id, z, levels):
    """The code of the scaled value ``t`` (float32 w / s): ``fmt_id`` 0 int4 (z is 8), 1 int4
    with zero point ``z``, 2 int8, 3 the nearest of 16 ``levels`` (the first of equals)."""
    if fmt_id == 3:
        best = 0
        d0 = abs(t - levels[0])
        for c in range(1, 16):
            d = abs(t - levels[c])
            if d < d0:
                d0 = d
                best = c
        return best
    top = 255 if fmt_id == 2 else 15
    q = np.int64(_rint(t)) + z
    return max(0, min(q, top))


@register_jitable
def _rint(x):
    """np.rint (to nearest, ties to even) for device code: numba-cuda has no rint ufunc."""
    f = math.floor(x)
    d = x - f
    if d > 0.5 or (d == 0.5 and f % 2 == 1):
        f += 1
    return f


_SLAB = 1 << 16                  # packed words per NumPy pass
_FMT_ID = {"int4": 0, "int4_zp": 1, "int8": 2}


def _fmt_id(fmt: Format) -> int:
    return 3 if fmt.user is not None else _FMT_ID[fmt.name]


def _levels32(fmt: Format) -> np.ndarray:
    return fmt.levels().astype(np.float32)


def _qrange(fmt: Format) -> float:
    """The largest magnitude a code stands for (symmetric formats): the scale is amax / it."""
    if fmt.user is not None:
        return float(np.max(np.abs(_levels32(fmt))))
    return float(fmt.offset - 1)


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
    return _quantize_gpu(w, kind, n, k, dt, fmt, group, scale_dtype)


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
        bits, s32 = scale_fn(amax / np.float32(_qrange(fmt)))
        z = np.full(bits.shape, fmt.offset, np.int64)
    sfull = np.repeat(s32, gk, axis=1)[:, :k]
    t = wf / sfull
    if fmt.user is not None:
        lev = _levels32(fmt)
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
    """``_scale_of`` on an array: (bits, float32 values) of positive float32 scales rounded to
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


# --- GPU kernels (plain Numba: the simulator runs them) ----------------------------------------------

THREADS = 256


def _grid(n: int) -> int:
    return max(1, min(cdiv(n, THREADS), 1 << 15))


def _quantize_kernels(bf16_in: bool):
    load = _load_bf16 if bf16_in else _load_float

    @cuda.jit
    def quantize_kernel(w, codes, sbits, zeros, n, k, gk, groups, fmt_id, skind, qr, levels):
        """One thread per (row, group): its scale (and zero point), then its codes."""
        for i in range(cuda.grid(1), n * groups, cuda.gridsize(1)):
            r = i // groups
            gi = i - r * groups
            k0 = gi * gk
            k1 = min(k0 + gk, k)
            if fmt_id == 1:
                mn = load(w, r, k0)
                mx = mn
                for kk in range(k0 + 1, k1):
                    v = load(w, r, kk)
                    mn = min(mn, v)
                    mx = max(mx, v)
                bits, s = _scale_of((mx - mn) / np.float32(15), skind)
                z = max(0, min(np.int64(_rint(-mn / s)), 15))
                zeros[gi, r] = z
            else:
                a = np.float32(0)
                for kk in range(k0, k1):
                    a = max(a, abs(load(w, r, kk)))
                bits, s = _scale_of(a / qr, skind)
                z = 128 if fmt_id == 2 else 8
            sbits[gi, r] = bits
            for kk in range(k0, k1):
                codes[r, kk] = _code_of(load(w, r, kk) / s, fmt_id, z, levels)
    return quantize_kernel


_QK = {}


def _quantize_gpu(w, kind, n, k, dt, fmt, group, scale_dtype):
    groups = _groups(k, group)
    with _placed(w, kind) as stream:
        codes = _new(kind, w, (n, k), np.uint8, stream)
        sbits = _new(kind, w, (groups, n), np.int64, stream)
        zeros = _new(kind, w, (groups, n), np.uint8, stream)
        if dt not in _QK:
            _QK[dt] = _quantize_kernels(dt == "bfloat16")
        lev = cuda.to_device(_levels32(fmt), stream=stream)
        _configured(_QK[dt], _grid(n * groups), THREADS, stream)(
            _input_view(w, kind, dt, stream), _numba_view(codes), _numba_view(sbits), _numba_view(zeros), n, k,
            group or k, groups, _fmt_id(fmt), SCALE_KIND[scale_dtype], np.float32(_qrange(fmt)), lev)
        scales = _bits_to_scales(sbits, kind, w, scale_dtype, stream)
    return pack(codes, scales, zeros if fmt.zeros else None, fmt, group, scale_dtype)


@cuda.jit
def _narrow_kernel(src, dst, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        dst[i] = src[i]


def _bits_to_scales(sbits, kind, like, scale_dtype, stream):
    """Scales of ``scale_dtype`` (torch: that dtype; other kinds: float32, float16, or uint16
    bits of bfloat16) from int64 bits, on the GPU."""
    shape = tuple(sbits.shape)
    raw = np.uint32 if scale_dtype == "float32" else np.uint16
    out = _new(kind, like, shape, raw, stream)
    size = int(np.prod(shape))
    _configured(_narrow_kernel, _grid(size), THREADS, stream)(
        _numba_view(sbits).reshape(size), _numba_view(out).reshape(size), size)
    if kind == "torch":
        import torch
        return out.view(torch.int32 if raw is np.uint32 else torch.int16).view(getattr(torch, scale_dtype))
    if scale_dtype == "float32":
        return out.view(np.float32)
    if scale_dtype == "float16":
        return out.view(np.float16)
    return out


@cuda.jit
def _pack_kernel(codes, packed, n, k, kc, order, bits, per_word):
    """packed[wi] = its codes (``element_of``), 0 past the weight's edges."""
    for wi in range(cuda.grid(1), packed.shape[0], cuda.gridsize(1)):
        word = np.uint32(0)
        for j in range(per_word):
            r, c = element_of(wi, j, kc, order)
            if r < n and c < k:
                word |= np.uint32(codes[r, c]) << np.uint32(bits * j)
        packed[wi] = word


@cuda.jit
def _unpack_kernel(packed, codes, n, k, kc, order, bits, per_word):
    mask = (1 << bits) - 1
    for wi in range(cuda.grid(1), packed.shape[0], cuda.gridsize(1)):
        word = np.int64(packed[wi])
        for j in range(per_word):
            r, c = element_of(wi, j, kc, order)
            if r < n and c < k:
                codes[r, c] = (word >> (bits * j)) & mask


@cuda.jit
def _dequantize_kernel(packed, sbits, zeros, levels, out, n, k, kc, order, bits, per_word, gk, skind, has_z, z0,
                       okind):
    """out[r, c] = value(code) * s, rounded to the output kind (0 fp32 value, 1 fp16 bits,
    2 bf16 bits): the value * s product is exact in float32, so that is one rounding."""
    mask = (1 << bits) - 1
    for wi in range(cuda.grid(1), packed.shape[0], cuda.gridsize(1)):
        word = np.int64(packed[wi])
        for j in range(per_word):
            r, c = element_of(wi, j, kc, order)
            if r < n and c < k:
                gi = c // gk
                q = (word >> (bits * j)) & mask
                z = np.int64(zeros[gi, r]) if has_z else z0
                sb = np.int64(sbits[gi, r])
                if skind == 2:
                    s = np.uint32((sb & 0xFFFF) << 16).view(np.float32)
                elif skind == 1:
                    s = _f16_value(sb & 0xFFFF)
                else:
                    s = np.uint32(sb & 0xFFFFFFFF).view(np.float32)
                v = (levels[q] if z0 < 0 else np.float32(q - z)) * s
                if okind == 0:
                    out[r, c] = v
                else:
                    out[r, c] = _round16(v, okind)


@register_jitable
def _round16(v, okind):
    """The bits (as int16) of float32 v rounded to fp16 (1) or bf16 (2), to nearest even."""
    b = np.int64(np.float32(v).view(np.uint32))
    sign = (b >> 16) & 0x8000
    a = b & 0x7FFFFFFF
    if okind == 2:
        h = (a + 0x7FFF + ((a >> 16) & 1)) >> 16
    else:
        h = _round_bits(a, 10, 15, 0x7C00)
    return np.int16(np.int64(sign | h) - (65536 if (sign | h) >= 32768 else 0))


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
        _configured(_pack_kernel, _grid(nwords), THREADS, stream)(
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
        nwords = int(describe(qw.packed, "packed")[1][0])
        _configured(_unpack_kernel, _grid(nwords), THREADS, stream)(
            _numba_view(_raw(qw.packed, kind)), _numba_view(codes), qw.n, qw.k, kc, order, fmt.bits, per)
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
    _, _, kc = qw.padded
    order, per = ORDERS[fmt.order], _codes_per_word(fmt)
    lev = levels_in(fmt, act_dtype).astype(np.float32)
    okind = SCALE_KIND[dtype]
    with _placed(qw.packed, kind) as stream:
        raw = np.float32 if dtype == "float32" else np.int16
        out = _new(kind, qw.packed, (qw.n, qw.k), raw, stream)
        nwords = int(describe(qw.packed, "packed")[1][0])
        z = qw.zeros if qw.zeros is not None else _new(kind, qw.packed, (1, 1), np.uint8, stream)
        _configured(_dequantize_kernel, _grid(nwords), THREADS, stream)(
            _numba_view(_raw(qw.packed, kind)), _scale_view(qw.scales, kind, qw.scale_dtype),
            _numba_view(_raw(z, kind)), cuda.to_device(lev, stream=stream), _numba_view(out), qw.n, qw.k, kc, order,
            fmt.bits, per, qw.group_k, SCALE_KIND[qw.scale_dtype], qw.zeros is not None,
            -1 if fmt.user is not None else fmt.offset, okind)
    if kind == "torch" and dtype != "float32":
        import torch
        return out.view(getattr(torch, dtype))
    return out


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


# --- the product --------------------------------------------------------------------------------------

SMALL_ROWS = 64          # x of at most this many rows: the streaming kernel (``qgemm.MAX_ROWS``)
_PLANS: dict = {}


def pick(m: int, n: int, k: int, fmt: Format):
    """(``qgemm.QConfig``, n8 tiles of x) of the streaming kernel for an M x K x N product: a
    tile of x per 8 rows; fewer loads in flight as x's fragments take more registers; more warps
    per block (a finer split of K) where the features make fewer blocks than the GPU has SMs."""
    from .qgemm import QConfig
    nt = 1 if m <= 8 else 2 if m <= 16 else 4 if m <= 32 else 8
    u = {1: 4, 2: 2, 4: 1, 8: 1}[nt]          # (registers: 68-104 at 8 warps, no spills; sass tests)
    blocks = cdiv(n, TILE_N)
    warps = 8 if blocks >= 132 or nt == 8 else 16       # (x of 64 rows: 160 registers, 8 warps at most)
    return QConfig(1, warps, u), nt


def _facts(x, kind):
    from .api import operand_facts
    return operand_facts(x, kind)


def gemm(x, qw: QuantizedWeight, *, out=None, out_dtype=None, stream=None, c=None, alpha: float = 1.0,
         beta: float = 0.0, bias=None, activation=None, epilogue=None, epilogue_args=(), config=None):
    """``x @ w.T`` (``F.linear``'s product) with the quantized weight ``qw`` of w (N, K), fused
    with ``numba_tc.gemm``'s epilogue: ``epilogue(act(alpha * x @ w.T + beta * c + bias), row,
    col, *epilogue_args)`` (bias of length N per column, as ``nn.Linear``'s).

    x: (M, K) bfloat16 or float16, a GPU array (torch, CuPy, Numba) of ``qw``'s kind and device,
    rows of unit stride. M <= 64 (decoding): the weight-streaming kernel (``qgemm``); larger: the
    weight dequantized to x's type in one pass into a temporary, then ``numba_tc.gemm``. The
    result: (M, N) of x's type (or ``out_dtype`` float32), new or ``out`` (row-major). Runs on
    the caller's current stream (or ``stream``), caches plans, never synchronizes.
    ``config``: a ``qgemm.QConfig`` (benchmarks), else ``pick``'s. Inference only: torch tensors
    that need a gradient raise TypeError."""
    from . import driver, runtime
    from .api import _epilogue_facts
    from .arrays import dtype_name, new_like
    from .intrinsics import SIMULATOR
    kind = array_kind(x)
    if kind == "numpy" or SIMULATOR:
        raise TypeError("quant.gemm takes GPU arrays (torch, CuPy, Numba); for NumPy see quant.reference")
    if not isinstance(qw, QuantizedWeight):
        raise TypeError(f"qw must be a QuantizedWeight (quant.quantize), got {type(qw).__name__}")
    if qw.kind != kind:
        raise TypeError(f"x is a {kind} array but the weight's arrays are {qw.kind}: use one kind")
    if kind == "torch":
        import torch
        if torch.is_grad_enabled() and (x.requires_grad or getattr(bias, "requires_grad", False)):
            raise TypeError("quantized products are for inference: run them under torch.no_grad() "
                            "(a QuantizedWeight has no gradient)")
    fx, px = _facts(x, kind)
    fo, po = (None, 0) if out is None else _facts(out, kind)
    ekey, run = (None, None)
    plain = c is None and bias is None and activation is None and epilogue is None and alpha == 1.0 and beta == 0.0
    if not plain:
        ekey, run = _epilogue_facts(kind, c, alpha, beta, bias, activation, epilogue, epilogue_args)
    key = (fx, id(qw), qw.arrays_key(), fo, out is None, None if out_dtype is None else dtype_name(out_dtype),
           ekey, config)
    cacheable = plain or run is not None          # (an epilogue whose facts could not be read: no cache)
    try:
        hit = _PLANS.get(key) if cacheable else None
    except TypeError:                             # (an unhashable argument)
        hit, cacheable = None, False
    if hit is None:
        hit = _plan(x, qw, out, out_dtype, kind, (c, alpha, beta, bias, activation, epilogue, epilogue_args),
                    plain, config)
        if hit[1] is not None:
            if run is None:
                run = hit[1].run
            hit = hit[:1] + (hit[1].fixed(),) + hit[2:]       # (the cache keeps no call's arrays)
        if cacheable:
            if len(_PLANS) > 1024:
                _PLANS.clear()
            _PLANS[key] = hit
    plan, bound, m, n, odt, dev, large = hit
    with driver.on_device(dev):
        st = runtime.stream_handle(stream) if stream is not None else runtime.current_stream(kind, dev)
        if large is not None:
            return large(x, out, st, stream)
        if out is None:
            out = new_like(kind, x, m, n, odt, handle=st, device=dev)
            po = arrays_address(out, kind)
        if plan is not None:
            ep = (0,) if bound is None else bound.values(bound.spec, run)
            pz = 0 if qw.zeros is None else arrays_address(qw.zeros, kind)
            plan.run((px, arrays_address(qw.packed, kind), arrays_address(qw.scales, kind), pz, po) + ep, st)
    return out


def arrays_address(x, kind):
    from .arrays import address
    return address(x, kind)


def _arrays_key(self):
    """What of a weight's arrays decides a plan: their addresses (a weight re-made at another
    address is planned again) and shapes."""
    return tuple(None if a is None else (arrays_address(a, self.kind), tuple(a.shape)) for a in self.arrays())


QuantizedWeight.arrays_key = _arrays_key


def _plan(x, qw, out, out_dtype, kind, epi_args, plain, config):
    """(plan, bound epilogue, m, n, out dtype, device, large-product closure or None) for a call."""
    from . import driver, runtime
    from .arrays import dtype_name
    from .epilogue_args import bind
    from .plan import Plan, Step
    from .qgemm import MAX_ROWS, qgemm_kernel
    _, shape, strides, dt, _ = describe(x, "x")
    if len(shape) != 2:
        raise ValueError(f"x must be 2-D (rows, K), got shape {tuple(shape)}")
    if dt not in ACT_DTYPES:
        raise TypeError(f"x has dtype {dt}; quantized products take {' or '.join(ACT_DTYPES)} activations")
    m, k = (int(v) for v in shape)
    if k != qw.k:
        raise ValueError(f"x has K = {k} but the weight is {qw.n}x{qw.k} (out_features x in_features)")
    if m > 1 and strides[1] != 1 or (m == 1 and k > 1 and strides[1] != 1):
        raise ValueError(f"x must have unit stride along K, got strides {tuple(strides)}")
    lda = int(strides[0]) if m > 1 else k
    odt = dt if out_dtype is None else dtype_name(out_dtype)
    if odt not in (dt, "float32"):
        raise TypeError(f"out_dtype {odt}: the result of {dt} activations is {dt} or float32")
    n = qw.n
    ldc = n
    if out is not None:
        _, oshape, ostr, odt2, _ = describe(out, "out")
        if tuple(oshape) != (m, n):
            raise ValueError(f"out has shape {tuple(oshape)}, expected {(m, n)}")
        if out_dtype is not None and odt2 != odt:
            raise TypeError(f"out has dtype {odt2} but out_dtype={odt}")
        odt = odt2
        if odt not in (dt, "float32"):
            raise TypeError(f"out has dtype {odt}; the result of {dt} activations is {dt} or float32")
        if n > 1 and ostr[1] != 1:
            raise ValueError("out must be row-major (unit stride along N)")
        ldc = int(ostr[0]) if m > 1 else n
    dev = runtime.device_of(x, kind)
    for name, a in zip(("packed", "scales", "zeros"), qw.arrays()):
        if a is not None and runtime.device_of(a, kind) != dev:
            raise ValueError(f"the weight's {name} is on device {runtime.device_of(a, kind)}, x on {dev}")
    bound = None
    if not plain:
        bound = bind(kind, m, n, dt, odt, dev, *epi_args, k=k)
    if m > MAX_ROWS or m > SMALL_ROWS:
        return None, bound, m, n, odt, dev, _large(qw, dt, kind, dev, epi_args, odt)
    if m == 0:
        return None, bound, m, n, odt, dev, None
    fmt = qw.fmt
    cfg, nt = config if config is not None else pick(m, n, k, fmt)
    np_, kp, kc = qw.padded
    kcv = cdiv(k, fmt.chunk_k)
    cpw = cdiv(cdiv(kcv, cfg.warps), cfg.u) * cfg.u
    ntiles = np_ // TILE_N
    exact = k % fmt.chunk_k == 0 and lda % 4 == 0 and _facts(x, kind)[1] % 8 == 0
    spec = bound.spec if bound is not None else None
    from .epilogue import PLAIN
    kern = qgemm_kernel(cfg, fmt, dt, qw.scale_dtype, odt, nt, qw.group_k, exact, spec or PLAIN)
    groups = qw.groups
    grid = cdiv(ntiles, cfg.tm)

    def args(px, pp, ps, pz, pc, *ep):
        return (px, pp, ps, pz, pc, m, n, k, lda, ldc, kc, kcv, cpw, ntiles, groups, *ep)
    with driver.on_device(dev):
        plan = Plan([Step(kern, grid, cfg.threads, args, label=f"qgemm {fmt.name} {cfg}")], dev, False)
    plan.variant = "quant"
    return plan, bound, m, n, odt, dev, None


def _large(qw, dt, kind, dev, epi_args, odt):
    """The product of many rows: the weight dequantized to ``dt`` into a temporary (Npad x Kpad,
    row-major), then ``numba_tc.gemm`` on its (K, N) view with the epilogue."""
    from . import api, driver
    from .arrays import new_like
    from .plan import Plan, Step
    from .qgemm import DEQUANT_THREADS, dequant_kernel
    np_, kp, kc = qw.padded
    ntiles = np_ // TILE_N
    kern = dequant_kernel(qw.fmt, dt, qw.scale_dtype, qw.group_k)
    grid = cdiv(ntiles * kc * 32, DEQUANT_THREADS)
    n, k = qw.n, qw.k

    def args(pp, ps, pz, pw):
        return (pp, ps, pz, pw, n, kp, kc, ntiles, qw.groups)
    with driver.on_device(dev):
        plan = Plan([Step(kern, grid, DEQUANT_THREADS, args, label=f"dequantize {qw.fmt.name}")], dev, False)
    c, alpha, beta, bias, activation, epilogue, epilogue_args = epi_args

    def run(x, out, st, stream):
        w = new_like(kind, x, np_, kp, dt, handle=st, device=dev)
        pz = 0 if qw.zeros is None else arrays_address(qw.zeros, kind)
        plan.run((arrays_address(qw.packed, kind), arrays_address(qw.scales, kind), pz, arrays_address(w, kind)), st)
        wt = w[:n, :k].T
        return api.gemm(x, wt, out=out, out_dtype=odt, stream=st if stream is None else stream, c=c, alpha=alpha,
                        beta=beta, bias=bias, activation=activation, epilogue=epilogue, epilogue_args=epilogue_args)
    return run
