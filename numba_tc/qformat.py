"""Weight formats as data, and the packed layout's one fact: where each code lies
(``element_of``). A kernel module (``build.KERNEL_MODULES``): the layout decides the kernels'
code. ``quant`` holds the helpers and explains the formats and the layout.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
from numba.extending import register_jitable

from .epilogue import code_digest, is_device_function

__all__ = ["Format", "UserDecode", "INT4", "INT4_ZP", "INT8", "FORMATS", "get_format", "user_format",
           "element_of", "run_k", "SPAN", "PIECE", "ORDERS", "TILE_N", "K_STEP", "LANES", "WORDS", "NF4_LEVELS",
           "SCALE_DTYPES", "ACT_DTYPES", "GROUPS", "SCALE_KIND"]

TILE_N = 16                  # output features per tile (the mma's M)
K_STEP = 16                  # K per mma step
LANES = 32
WORDS = 4                    # 32-bit words a lane loads per tile and chunk (16 bytes)
SPAN = 32                    # K of two k16 steps: a step's K never leave their span
PIECE = 8                    # K of a thread's piece of a span (16 bytes of a 16-bit row)
SCALE_DTYPES = ("bfloat16", "float16", "float32")
ACT_DTYPES = ("bfloat16", "float16")
GROUPS = (0, 32, 64, 128, 256)     # 0: one group per row (per channel)
ORDERS = {"magic": 0, "lut": 1, "bytes": 2}
SCALE_KIND = {        # the scale and output dtypes' codes in the kernels
    "float32": 0, "float16": 1, "bfloat16": 2}

# QLoRA's NormalFloat4 levels (Dettmers et al. 2023, bitsandbytes' table), for examples and tests
NF4_LEVELS = (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
              -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
              0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
              0.7229568362236023, 1.0)


@dataclass(frozen=True)
class UserDecode:
    """A user's decode function, equal and keyed by its code (``epilogue.code_digest``)."""
    name: str
    digest: str
    fn: Any = field(repr=False, compare=False, hash=False)


@dataclass(frozen=True)
class Format:
    """A weight format as data (its repr is part of a kernel's key). ``bits``: of a code; ``zeros``:
    an integer zero point per group; ``user``: a user's decode function of 4-bit codes."""
    name: str
    bits: int
    zeros: bool = False
    user: Optional[UserDecode] = None

    @property
    def chunk_k(self) -> int:
        """K per 16-byte load of a lane: four k16 steps of 4-bit codes, two of 8-bit ones."""
        return 64 if self.bits == 4 else 32

    @property
    def order(self) -> str:
        """How a word's codes are ordered for the kernel's conversion (module docstring)."""
        return "lut" if self.user is not None else ("magic" if self.bits == 4 else "bytes")

    @property
    def offset(self) -> int:
        """The code of the value 0 of a built-in format without zero points."""
        return 1 << (self.bits - 1)

    @property
    def qmax(self) -> int:
        return (1 << self.bits) - 1

    def levels(self) -> np.ndarray:
        """The value of each code before its scale, float64 (without zero points)."""
        if self.user is None:
            return np.arange(self.qmax + 1, dtype=np.float64) - self.offset
        return _user_levels(self.user.fn)


INT4 = Format("int4", 4)
INT4_ZP = Format("int4_zp", 4, zeros=True)
INT8 = Format("int8", 8)
FORMATS = {f.name: f for f in (INT4, INT4_ZP, INT8)}


def get_format(fmt) -> Format:
    """A ``Format`` from itself or a built-in name; ValueError naming the choices."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str) and fmt in FORMATS:
        return FORMATS[fmt]
    raise ValueError(f"format {fmt!r}: use one of {', '.join(map(repr, FORMATS))} or "
                     "numba_tc.quant.user_format(decode)")


def _user_levels(fn) -> np.ndarray:
    py = getattr(fn, "py_func", fn)
    try:
        vals = np.array([float(py(c)) for c in range(16)], dtype=np.float64)
    except Exception as e:
        raise TypeError(f"decode({getattr(py, '__name__', 'fn')}) must map a code 0..15 to a number "
                        f"(called on the host to quantize): {type(e).__name__}: {e}") from e
    if not np.all(np.isfinite(vals)) or not np.any(vals != 0):
        raise ValueError(f"decode must give finite values, not all zero, for codes 0..15; got {vals.tolist()}")
    return vals


def user_format(decode, name: Optional[str] = None) -> Format:
    """A 4-bit format of the user's own: ``decode``, a ``numba.cuda.jit(device=True)`` function
    ``decode(code) -> value`` for codes 0..15; an element's weight is ``decode(q) * s`` with its
    group's scale ``s``. ``quantize`` picks each element's nearest value (scale: the group's
    largest magnitude over the largest value's). Example (QLoRA's NF4)::

        NF4 = np.array(numba_tc.quant.NF4_LEVELS, np.float32)

        @cuda.jit(device=True)
        def nf4(code):
            return NF4[code]

        fmt = numba_tc.quant.user_format(nf4)
    """
    if not is_device_function(decode):
        raise TypeError(f"decode must be a numba.cuda.jit(device=True) function decode(code) -> value, "
                        f"got {type(decode).__name__}")
    _user_levels(decode)                       # (checked now: a clear error before any kernel)
    py = getattr(decode, "py_func", decode)
    return Format(name or py.__name__, 4, user=UserDecode(py.__qualname__, code_digest(decode), decode))


# --- the layout ------------------------------------------------------------------------------------

@register_jitable
def run_k(c, p, t, ck):
    """K of the first element of piece ``p`` of thread ``t``'s run in chunk ``c`` (``ck``: the
    chunk's K): a thread's K of a chunk are ``ck / 32`` pieces of ``PIECE`` consecutive K, one
    per span of 32, so a k16 step never leaves its span (groups of 32 hold whole steps) and a
    piece of a row of x is one 16-byte load."""
    return ck * c + SPAN * p + PIECE * t


@register_jitable
def element_of(wi, j, kc, order):
    """(n, k) of code ``j`` of packed word ``wi`` (``order``: ``ORDERS``' value; ``kc``: chunks
    of K). Integer arithmetic only: NumPy arrays of word and code indices give arrays.

    Lane (g, t)'s word s of a tile's chunk holds its A fragment of k16 step s (int8: two words a
    step): rows g and g + 8, and four K of the step. Steps go in spans of 32 K (two steps a
    span), and thread t's four K of a step are ``run_k(c, s // 2, t) + 4 (s % 2) + (0..3)``:
    its piece of the span, so over a chunk a thread's activations are one 16-byte piece of a
    row per span (two for 4-bit codes, one for int8)."""
    s = wi % WORDS
    lane = (wi // WORDS) % LANES
    tc = wi // (WORDS * LANES)
    c = tc % kc
    mt = tc // kc
    g = lane // 4
    t = lane % 4
    if order == 2:                  # bytes: two words per k16 step, register r = bytes 2r, 2r+1
        b = 4 * (s % 2) + j
        r = b // 2
        h = b % 2
        k0 = run_k(c, 0, t, 32) + 4 * (s // 2)
    else:
        if order == 1:              # lut: register r = nibbles 2r, 2r+1 (byte r)
            r = j // 2
            h = j % 2
        else:                       # magic: register r = nibbles r, r + 4
            r = j % 4
            h = j // 4
        k0 = run_k(c, s // 2, t, 64) + 4 * (s % 2)
    n = TILE_N * mt + g + 8 * (r % 2)
    k = k0 + 2 * (r // 2) + h
    return n, k
