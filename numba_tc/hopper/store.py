"""The epilogue part of the Hopper kernel: accumulators through the epilogue function to C, by
128B-swizzled shared-memory boxes and TMA stores, or straight from registers."""
from __future__ import annotations

from collections import namedtuple
from functools import lru_cache

from numba import cuda, float32

from .. import layout
from ..epilogue import make as make_epilogue
from ..fragments import OUT_CONVERT, apply_fragments, make_store_out
from ..intrinsics import ptr
from ..jit import device, unrolled
from ..layout import c_fragment, chunk_offset
from ..primitives import (fence_proxy_async, named_barrier, sts_out2, tma_store_2d, tma_store_3d, tma_store_commit,
                          tma_store_wait_all, tma_store_wait_read)


# What a consumer's epilogue writes to: C's tensor map (TMA stores), its row pitch in elements,
# and the kernel's M and N.
Output = namedtuple("Output", ("tmc", "ldc", "m", "n"))


@lru_cache(maxsize=None)
def _box_parts(MI, BN, OUT_ITEM, OUT_K, EPI, STAGER=None):
    """``(apply_box, stage_frags)`` of ``_box_store``: ``apply_box(t, acc, row0, col0, lane, ep,
    src)``, the epilogue on output box t's fragments in registers (with ``STAGER``, EPI takes the
    staged array's element, read from the warp's slot ``src``); ``stage_frags(n, acc, off, buf,
    wrow, lane)``, n8 blocks of an output box into the 128B-swizzled box at ``buf``."""
    COLS = layout.ROW_BYTES // OUT_ITEM            # columns of one 128-byte output box
    NBOX = BN // COLS
    HAS_STAGE = STAGER is not None                 # (device code reads a bool, not the tuple)
    if HAS_STAGE:
        ready, read = STAGER[1], STAGER[3]

    @device
    def staged_one(jj, acc, f0, row0, col0, lane, ep, src, t, x):
        """n8 block jj of box t (fragment f0 + jj): the epilogue with the staged elements."""
        f = f0 + jj
        px = ptr(x)
        for h in range(2):
            r, c = c_fragment(lane, 2 * h)
            read(acc, src, t, jj, h, lane, px)
            acc[4 * f + 2 * h] = EPI(acc[4 * f + 2 * h], row0 + r, col0 + 8 * jj + c, ep, x[0])
            acc[4 * f + 2 * h + 1] = EPI(acc[4 * f + 2 * h + 1], row0 + r, col0 + 8 * jj + c + 1, ep, x[1])
    staged_ones = unrolled(staged_one, 8)

    @device
    def stage_frag(jj, acc, off, buf, wrow, lane):
        """n8 block jj of an output box: this lane's two column pairs into the 128B-swizzled box."""
        for h in range(2):
            r, c = c_fragment(lane, 2 * h)
            byte = (8 * jj + c) * OUT_ITEM
            sts_out2(buf + chunk_offset(wrow + r, byte >> 4, 8, True) + (byte & 15),
                     acc[off + 4 * jj + 2 * h], acc[off + 4 * jj + 2 * h + 1], OUT_K)

    @device
    def apply_box(t, acc, row0, col0, lane, ep, src):
        """The epilogue on the fragments of output box t, in registers (``fragments.apply_fragments``)."""
        mi = t // NBOX
        bx = t - mi * NBOX
        if not HAS_STAGE:
            apply_fragments(COLS // 8, acc, mi * (BN // 8) + bx * (COLS // 8), row0, col0, lane, BN // 8, 64, EPI, ep,
                            False)
        else:
            x = cuda.local.array(2, float32)
            ready(t)
            staged_ones(COLS // 8, acc, mi * (BN // 8) + bx * (COLS // 8), row0 + 64 * mi, col0 + bx * COLS, lane, ep,
                        src, t, x)
    return apply_box, unrolled(stage_frag, 8)


@lru_cache(maxsize=None)
def _box_store(MI, BN, OUT_ITEM, OUT_K, EB, EPI, BATCH=False, STAGER=None):
    """``store_box(t, acc, tmc, buf0, nbox, row0, col0, tw, lane, bar, ep, z, erow0)``: output box t of
    MI x NBOX of a warpgroup (m64 block t // NBOX, 128-byte column block t % NBOX): registers ->
    shared box (a ring of EB from ``buf0``) -> one TMA store (into matrix z of C's 3-D map, with
    BATCH), which clips at C's edges. The epilogue on box t + 1 comes first, in the same
    straight-line code as box t's shared-memory stores, so that its loads are in flight while
    they go out. ``row0``: this warp's first row of C (``erow0``: the row the epilogue sees,
    which counts across a batched product's matrices); ``tw``: the thread in its warpgroup;
    ``bar``: the warpgroup's named barrier. With ``STAGER`` (``staging._stager``'s), EPI takes
    the staged array's element (``_box_parts``)."""
    COLS = layout.ROW_BYTES // OUT_ITEM            # columns of one 128-byte output box
    NBOX = BN // COLS
    NB = MI * NBOX
    HAS_STAGE = STAGER is not None                 # (device code reads a bool, not the tuple)
    OUT_SLOTS = HAS_STAGE and STAGER[5] is not None
    if HAS_STAGE:
        refill, source, out_box = STAGER[2], STAGER[4], STAGER[5]
    apply_box, stage_frags = _box_parts(MI, BN, OUT_ITEM, OUT_K, EPI, STAGER)

    @device
    def store_box(t, acc, tmc, buf0, nbox, row0, col0, tw, lane, bar, ep, z, erow0):
        mi = t // NBOX
        bx = t - mi * NBOX
        src = source(buf0, tw) if HAS_STAGE else 0
        if t == 0:
            apply_box(0, acc, erow0, col0, lane, ep, src)
        if OUT_SLOTS:
            buf = out_box(buf0, t)
        else:
            buf = buf0 + ((nbox + t) & (EB - 1)) * layout.OUT_BOX_BYTES
            if tw == 0:
                tma_store_wait_read(EB - 1)        # the store that used this buffer has read it
        named_barrier(bar, 128)
        if t + 1 < NB:
            apply_box(t + 1, acc, erow0, col0, lane, ep, src)
        stage_frags(COLS // 8, acc, mi * (BN // 2) + bx * (COLS // 2), buf, 16 * (tw >> 5), lane)
        if HAS_STAGE:                              # (after the stores: the elements read are dead)
            if t == 0:
                refill(0, src, erow0, col0, lane, ep)
            if t + 1 < NB:
                refill(t + 1, src, erow0, col0, lane, ep)
        fence_proxy_async()                        # generic-proxy writes before the async-proxy read
        named_barrier(bar, 128)
        if tw == 0:
            if BATCH:
                tma_store_3d(tmc, col0 + bx * COLS, row0 - 16 * (tw >> 5) + 64 * mi, z, buf)
            else:
                tma_store_2d(tmc, col0 + bx * COLS, row0 - 16 * (tw >> 5) + 64 * mi, buf)
            tma_store_commit()
    return unrolled(store_box, 16), NB


@lru_cache(maxsize=None)
def make_epilogue_part(MI, BN, out_dtype, vc, TMA_C, EB, epi, BATCH=False, TRANS=False, PER_CONS=0, STAGER=None):
    """Epilogue: ``(store, drain)``. ``store(acc, C, out, ebase, nbox, row0, bn0, wg, tw, lane, ep, z)``:
    a warpgroup's accumulators (MI m64 blocks of BN columns; this warp's rows
    from ``row0``) through the epilogue function of ``epi`` (``epilogue.make``), then to C (at
    ``C``, its ``Output`` ``out``) through
    shared memory and TMA stores (with TMA_C: a ring of EB boxes per consumer from ``ebase``,
    ``_box_store``; with BATCH into matrix z, the epilogue seeing row z * M + row) or straight
    from registers (``fragments.make_store_out``; ``vc``: C's column pairs are aligned; TRANS: the
    accumulators are of C's transpose, a swapped product's). Returns the count of boxes this
    consumer has stored. ``drain(tw)``: the last boxes are out (before the block ends). Each
    consumer's boxes are PER_CONS bytes (``config.SmemLayout.per_consumer``) after the one's
    before; with ``STAGER`` (``staging._stager``'s; TMA_C), the epilogue's staged array is read
    from their end."""
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], layout.ITEMSIZE[out_dtype]
    NI = BN // 8
    EPI = make_epilogue(epi, STAGER is not None)
    if BATCH and not TMA_C:
        raise ValueError("a batched kernel stores C by TMA")
    if TRANS and TMA_C:
        raise ValueError("C's transpose is stored from registers")
    if STAGER is not None and not TMA_C:
        raise ValueError("a staged epilogue array is read by the epilogue through shared memory")
    if TMA_C:
        store_boxes, NB = _box_store(MI, BN, OUT_ITEM, OUT_K, EB, EPI, BATCH, STAGER)

        @device
        def store(acc, C, out, ebase, nbox, row0, bn0, wg, tw, lane, ep, z):
            store_boxes(NB, acc, out.tmc, ebase + wg * PER_CONS, nbox, row0, bn0, tw, lane,
                        1 + wg, ep, z, row0 + (z * out.m if BATCH else 0))
            return nbox + NB

        @device
        def drain(tw):
            if tw == 0:
                tma_store_wait_all()
        return store, drain

    store_out = make_store_out(MI * NI, NI, 64, OUT_ITEM, OUT_K, vc, min(8, MI * NI), EPI, TRANS)

    @device
    def store(acc, C, out, ebase, nbox, row0, bn0, wg, tw, lane, ep, z):
        store_out(C, out.ldc, out.m, out.n, acc, row0, bn0, lane, ep)
        return nbox

    @device
    def drain(tw):
        pass
    return store, drain
