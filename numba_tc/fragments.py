"""Device code both tensor-core ladders share: the epilogue (``epilogue.make``) on accumulator
fragments in registers, and the fragments out to C. ``tensorcore`` (mma.sync) and ``hopper`` (wgmma, whose m64
accumulator is four m16 fragments per warp, ``layout.wgmma_d_fragment``) both import it; neither
imports the other.
"""
from __future__ import annotations

from functools import lru_cache

from .jit import device, unrolled
from .layout import c_fragment
from .primitives import stg_out1, stg_out2

__all__ = ["OUT_CONVERT", "store_fragment", "store_fragments", "apply_fragments", "make_store_out"]

# Output element conversion in the epilogue (ptx/mma.cu: to_bits)
OUT_CONVERT = {"float32": 0, "float16": 1, "bfloat16": 2}


@device
def _apply_one(t, acc, t0, m0, n0, lane, NI, MSTEP, EPI, ep, TRANS):
    """The epilogue on accumulator fragment t0 + t (row block // NI, MSTEP rows apart; n8 column
    block % NI), in place. TRANS: the accumulators are C's transpose (a swapped product), so the
    epilogue sees C's (row, col) = (n, m)."""
    t = t0 + t
    i = t // NI
    j = t - i * NI
    for h in range(2):
        r, c = c_fragment(lane, 2 * h)
        m = m0 + MSTEP * i + r
        n = n0 + 8 * j + c
        if TRANS:
            acc[4 * t + 2 * h] = EPI(acc[4 * t + 2 * h], n, m, ep)
            acc[4 * t + 2 * h + 1] = EPI(acc[4 * t + 2 * h + 1], n + 1, m, ep)
        else:
            acc[4 * t + 2 * h] = EPI(acc[4 * t + 2 * h], m, n, ep)
            acc[4 * t + 2 * h + 1] = EPI(acc[4 * t + 2 * h + 1], m, n + 1, ep)


# The epilogue on a group of a warp's accumulator fragments in registers, before their stores:
# its loads (c, a bias, a user's arrays) may then all be in flight at once, where between the
# stores' asm (volatile, a memory clobber) each would wait for the one before. A group, not the
# whole tile: the loads in flight need registers.
apply_fragments = unrolled(_apply_one, 64)


@device
def store_fragment(C, ldc, M, N, acc, off, m0, n0, lane, OUT_ITEM, OUT_K, vc, TRANS):
    """Write one m16n8 accumulator fragment (acc[off..off+3]) at C[m0:, n0:], inside M x N only.

    Adjacent column pairs go out as one 8-byte (fp32) or 4-byte (16-bit) store when aligned.
    TRANS: the fragment is of C's transpose (rows ``ldc`` elements apart), one element a store."""
    for h in range(2):
        r, c = c_fragment(lane, 2 * h)
        m = m0 + r
        n = n0 + c
        if TRANS:
            if m < M:
                if n < N:
                    stg_out1(C + (n * ldc + m) * OUT_ITEM, acc[off + 2 * h], OUT_K)
                if n + 1 < N:
                    stg_out1(C + ((n + 1) * ldc + m) * OUT_ITEM, acc[off + 2 * h + 1], OUT_K)
        elif m < M:
            x = acc[off + 2 * h]
            y = acc[off + 2 * h + 1]
            addr = C + (m * ldc + n) * OUT_ITEM
            if vc and n + 1 < N:
                stg_out2(addr, x, y, OUT_K)
            else:
                if n < N:
                    stg_out1(addr, x, OUT_K)
                if n + 1 < N:
                    stg_out1(addr + OUT_ITEM, y, OUT_K)


@device
def _store_one(t, C, ldc, M, N, acc, t0, m0, n0, lane, NI, MSTEP, OUT_ITEM, OUT_K, vc, TRANS):
    """Accumulator fragment t0 + t (row block // NI, MSTEP rows apart; n8 column block % NI)."""
    t = t0 + t
    i = t // NI
    j = t - i * NI
    store_fragment(C, ldc, M, N, acc, 4 * t, m0 + MSTEP * i, n0 + 8 * j, lane, OUT_ITEM, OUT_K, vc, TRANS)


# A warp's accumulators to C, fragment by fragment: m16 blocks (MSTEP 16) for mma.sync, m64
# blocks of the wgmma accumulator (MSTEP 64) for the Hopper ladder.
store_fragments = unrolled(_store_one, 64)


@lru_cache(maxsize=None)
def make_store_out(NF, NI, MSTEP, OUT_ITEM, OUT_K, vc, G, EPI, TRANS=False):
    """``store_out(C, ldc, M, N, acc, m0, n0, lane, ep)``: a warp's NF accumulator fragments
    (row block // NI, MSTEP rows apart; n8 column block % NI) through the epilogue function EPI
    to C, G fragments at a time (G divides NF): the epilogue on a group, then its stores. TRANS:
    the accumulators are of C's transpose, M x N (``store_fragment``)."""
    @device
    def out_group(g, C, ldc, M, N, acc, m0, n0, lane, ep):
        apply_fragments(G, acc, g * G, m0, n0, lane, NI, MSTEP, EPI, ep, TRANS)
        store_fragments(G, C, ldc, M, N, acc, g * G, m0, n0, lane, NI, MSTEP, OUT_ITEM, OUT_K, vc, TRANS)
    groups = unrolled(out_group, 32)

    @device
    def store_out(C, ldc, M, N, acc, m0, n0, lane, ep):
        groups(NF // G, C, ldc, M, N, acc, m0, n0, lane, ep)
    return store_out
