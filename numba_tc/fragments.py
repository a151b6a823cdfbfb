"""Device code both tensor-core ladders share: accumulator fragments out to C, through the
epilogue (``epilogue.make``). ``tensorcore`` (mma.sync) and ``hopper`` (wgmma, whose m64
accumulator is four m16 fragments per warp, ``layout.wgmma_d_fragment``) both import it; neither
imports the other.
"""
from __future__ import annotations

from .jit import device, unrolled
from .layout import c_fragment
from .primitives import stg_out1, stg_out2

__all__ = ["OUT_CONVERT", "store_fragment", "store_fragments"]

# Output element conversion in the epilogue (ptx/mma.cu: to_bits)
OUT_CONVERT = {"float32": 0, "float16": 1, "bfloat16": 2}


@device
def store_fragment(C, ldc, M, N, acc, off, m0, n0, lane, OUT_ITEM, OUT_K, vc, EPI, ep):
    """Write one m16n8 accumulator fragment (acc[off..off+3]) at C[m0:, n0:], inside M x N only,
    each value through the epilogue ``EPI`` (run-time values ``ep``).

    Adjacent column pairs go out as one 8-byte (fp32) or 4-byte (16-bit) store when aligned."""
    for h in range(2):
        r, c = c_fragment(lane, 2 * h)
        m = m0 + r
        n = n0 + c
        if m < M:
            x = EPI(acc[off + 2 * h], m, n, ep)
            y = EPI(acc[off + 2 * h + 1], m, n + 1, ep)
            addr = C + (m * ldc + n) * OUT_ITEM
            if vc and n + 1 < N:
                stg_out2(addr, x, y, OUT_K)
            else:
                if n < N:
                    stg_out1(addr, x, OUT_K)
                if n + 1 < N:
                    stg_out1(addr + OUT_ITEM, y, OUT_K)


@device
def _store_one(t, C, ldc, M, N, acc, m0, n0, lane, NI, MSTEP, OUT_ITEM, OUT_K, vc, EPI, ep):
    """Accumulator fragment t (row block t // NI, MSTEP rows apart; n8 column block t % NI)."""
    i = t // NI
    j = t - i * NI
    store_fragment(C, ldc, M, N, acc, 4 * t, m0 + MSTEP * i, n0 + 8 * j, lane, OUT_ITEM, OUT_K, vc, EPI, ep)


# A warp's accumulators to C, fragment by fragment: m16 blocks (MSTEP 16) for mma.sync, m64
# blocks of the wgmma accumulator (MSTEP 64) for the Hopper ladder.
store_fragments = unrolled(_store_one, 64)
