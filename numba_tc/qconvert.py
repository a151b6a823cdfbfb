"""Conversions between a weight and its codes (``quant``'s helpers): the scalar rules, written
once for NumPy and the GPU (``register_jitable``: rounding to a scale's type, the scale of a
group, the code of a value, rounding to a 16-bit output), and the plain ``numba.cuda.jit``
kernels that apply them on a GPU (quantize; pack; decode, which unpacks codes or dequantizes
values), with integer and float arithmetic only, so that the simulator runs them too and they
give NumPy's results bit for bit.
"""
from __future__ import annotations

import math

import numpy as np
from numba import cuda
from numba.extending import register_jitable

from .fp8 import _configured, _input_view, _load_bf16, _load_float, _new, _numba_view, _placed
from .qformat import SCALE_KIND, Format, element_of
from .schedule import cdiv

__all__ = ["THREADS", "grid", "quantize_gpu", "bits_to_scales", "pack_kernel", "decode_kernel", "fmt_id",
           "levels32", "qrange", "scale_of", "f16_value", "code_of", "rint", "round16"]

@register_jitable
def round_bits(a, man, bias, top):
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
def scale_of(x, kind):
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
        h = round_bits(b, 10, 15, 0x7BFF)
        if h == 0:
            h = 0x3C00
        return h, f16_value(h)
    v = np.float32(x)
    if v == 0:
        v = np.float32(1.0)
    return np.int64(v.view(np.uint32)), v


@register_jitable
def f16_value(h):
    """The float32 value of fp16 bits ``h`` (non-negative)."""
    e = (h >> 10) & 0x1F
    m = h & 0x3FF
    if e == 0:
        return np.float32(m) * np.float32(2.0 ** -24)
    return np.uint32(((e + 112) << 23) | (m << 13)).view(np.float32)


@register_jitable
def code_of(t, fmt_id, z, levels):
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
    q = np.int64(rint(t)) + z
    return max(0, min(q, top))


@register_jitable
def rint(x):
    """np.rint (to nearest, ties to even) for device code: numba-cuda has no rint ufunc."""
    f = math.floor(x)
    d = x - f
    if d > 0.5 or (d == 0.5 and f % 2 == 1):
        f += 1
    return f


_FMT_ID = {"int4": 0, "int4_zp": 1, "int8": 2}


def fmt_id(fmt: Format) -> int:
    return 3 if fmt.user is not None else _FMT_ID[fmt.name]


def levels32(fmt: Format) -> np.ndarray:
    return fmt.levels().astype(np.float32)


def qrange(fmt: Format) -> float:
    """The largest magnitude a code stands for (symmetric formats): the scale is amax / it."""
    if fmt.user is not None:
        return float(np.max(np.abs(levels32(fmt))))
    return float(fmt.offset - 1)


THREADS = 256


def grid(n: int) -> int:
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
                bits, s = scale_of((mx - mn) / np.float32(15), skind)
                z = max(0, min(np.int64(rint(-mn / s)), 15))
                zeros[gi, r] = z
            else:
                a = np.float32(0)
                for kk in range(k0, k1):
                    a = max(a, abs(load(w, r, kk)))
                bits, s = scale_of(a / qr, skind)
                z = 128 if fmt_id == 2 else 8
            sbits[gi, r] = bits
            for kk in range(k0, k1):
                codes[r, kk] = code_of(load(w, r, kk) / s, fmt_id, z, levels)
    return quantize_kernel


_QK = {}


def quantize_gpu(w, kind, n, k, dt, fmt, group, scale_dtype):
    """(codes (N, K) uint8, scales, zeros or None) of a GPU weight, on its current stream."""
    groups = 1 if group == 0 else cdiv(k, group)
    with _placed(w, kind) as stream:
        codes = _new(kind, w, (n, k), np.uint8, stream)
        sbits = _new(kind, w, (groups, n), np.int64, stream)
        zeros = _new(kind, w, (groups, n), np.uint8, stream)
        if dt not in _QK:
            _QK[dt] = _quantize_kernels(dt == "bfloat16")
        lev = cuda.to_device(levels32(fmt), stream=stream)
        _configured(_QK[dt], grid(n * groups), THREADS, stream)(
            _input_view(w, kind, dt, stream), _numba_view(codes), _numba_view(sbits), _numba_view(zeros), n, k,
            group or k, groups, fmt_id(fmt), SCALE_KIND[scale_dtype], np.float32(qrange(fmt)), lev)
        scales = bits_to_scales(sbits, kind, w, scale_dtype, stream)
    return codes, scales, zeros if fmt.zeros else None


@cuda.jit
def _narrow_kernel(src, dst, n):
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        dst[i] = src[i]


def bits_to_scales(sbits, kind, like, scale_dtype, stream):
    """Scales of ``scale_dtype`` (torch: that dtype; other kinds: float32, float16, or uint16
    bits of bfloat16) from int64 bits, on the GPU."""
    shape = tuple(sbits.shape)
    raw = np.uint32 if scale_dtype == "float32" else np.uint16
    out = _new(kind, like, shape, raw, stream)
    size = int(np.prod(shape))
    _configured(_narrow_kernel, grid(size), THREADS, stream)(
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
def pack_kernel(codes, packed, n, k, kc, order, bits, per_word):
    """packed[wi] = its codes (``element_of``), 0 past the weight's edges."""
    for wi in range(cuda.grid(1), packed.shape[0], cuda.gridsize(1)):
        word = np.uint32(0)
        for j in range(per_word):
            r, c = element_of(wi, j, kc, order)
            if r < n and c < k:
                word |= np.uint32(codes[r, c]) << np.uint32(bits * j)
        packed[wi] = word


@cuda.jit
def decode_kernel(packed, sbits, zeros, levels, out, n, k, kc, order, bits, per_word, gk, skind, has_z, z0, okind):
    """Each code of the packed words to ``out[r, c]`` (``element_of``; words past the weight's
    edges skipped): the code itself (``okind`` -1: unpack), or its value ``value(code) * s``
    rounded to the output kind (0 fp32 value, 1 fp16 bits, 2 bf16 bits: the value * s product is
    exact in float32, so that is one rounding; ``z0``: the built-in offset, -1 for ``levels``)."""
    mask = (1 << bits) - 1
    for wi in range(cuda.grid(1), packed.shape[0], cuda.gridsize(1)):
        word = np.int64(packed[wi])
        for j in range(per_word):
            r, c = element_of(wi, j, kc, order)
            if r < n and c < k:
                q = (word >> (bits * j)) & mask
                if okind < 0:
                    out[r, c] = q
                    continue
                gi = c // gk
                z = np.int64(zeros[gi, r]) if has_z else z0
                sb = np.int64(sbits[gi, r])
                if skind == 2:
                    s = np.uint32((sb & 0xFFFF) << 16).view(np.float32)
                elif skind == 1:
                    s = f16_value(sb & 0xFFFF)
                else:
                    s = np.uint32(sb & 0xFFFFFFFF).view(np.float32)
                v = (levels[q] if z0 < 0 else np.float32(q - z)) * s
                if okind == 0:
                    out[r, c] = v
                else:
                    out[r, c] = round16(v, okind)


@register_jitable
def round16(v, okind):
    """The bits (as int16) of float32 v rounded to fp16 (1) or bf16 (2), to nearest even."""
    b = np.int64(np.float32(v).view(np.uint32))
    sign = (b >> 16) & 0x8000
    a = b & 0x7FFFFFFF
    if okind == 2:
        h = (a + 0x7FFF + ((a >> 16) & 1)) >> 16
    else:
        h = round_bits(a, 10, 15, 0x7C00)
    return np.int16(np.int64(sign | h) - (65536 if (sign | h) >= 32768 else 0))
