"""A staged epilogue array: an array of C's shape the epilogue reads at [row, col] (or a row-major
c), copied into shared memory by the consumer warps' cp.async over the tile's last K slices (or
held in registers), so that the epilogue reads it there instead of waiting on HBM."""
from __future__ import annotations

from functools import lru_cache

from numba import cuda

from .. import layout
from ..config import WgmmaConfig
from ..epilogue import LOAD_KIND
from ..jit import device, unrolled
from ..layout import c_fragment
from ..primitives import (cp_async16, cp_async_commit, cp_async_wait, in16_f32, ldg_v2f32, lds_u32, lds_v2f32,
                          named_barrier, tma_store_wait_read)


def _source_geometry(MI, BN, OUT_ITEM, ITEM=4):
    """(COLS, NBOX, NB, SLOT, CH, JJ) of a staged epilogue array of ITEM-byte elements
    (``_stager``): an output box's columns, boxes across the tile and in all (MI m64 blocks), a
    warp's slot bytes (16 rows of a box), 16-byte chunks of a slot's row, n8 blocks of a box."""
    COLS = layout.ROW_BYTES // OUT_ITEM
    return COLS, BN // COLS, MI * (BN // COLS), layout.SOURCE_ROWS * COLS * ITEM, COLS * ITEM // 16, COLS // 8


@lru_cache(maxsize=None)
def _source_reads(MI, BN, OUT_ITEM, SLOT_IDX, NACC, HELD, ITEM=4, NSLOT=2):
    """The reads of a staged epilogue array of ITEM-byte elements (``_stager``): ``copy(t, src,
    row, bn0, lane, ep)``: box t's 16 rows of this warp into slot t % NSLOT at ``src``, one
    cp.async group; ``copies_in(CU, lo, hi, src, row, bn0, lane, ep)``: copy units lo..hi-1 of
    the boxes in the slots (PER_BOX a box; a box's group committed after its last);
    ``holds_in(HU, lo, hi, pacc, row, bn0, lane, ep)``: n8 blocks lo..hi-1 of boxes 2.. (float32),
    this lane's two column pairs of each into registers NACC + 4k by one 8-byte load each.
    Returns them and (CU, HU)."""
    COLS, NBOX, NB, SLOT, CH, JJ = _source_geometry(MI, BN, OUT_ITEM, ITEM)
    if HELD and (HELD != (NB - 2) * 4 * JJ or ITEM != 4 or NSLOT != 2):
        raise ValueError(f"{HELD} registers do not hold boxes 2..{NB - 1} ({(NB - 2) * 4 * JJ}) of a float32 array")
    M_, N_, U, P, PB = SLOT_IDX                     # (PB: the bytes of a unit of the row stride ep[P])
    PER_BOX = CH // 2                               # 16-byte copies a lane makes of a box
    CU = min(NSLOT, NB) * PER_BOX                   # ... of the boxes in the slots
    HU = HELD // 4
    EL = 16 // ITEM                                 # elements a copy

    @device
    def copy_one(t, i, src, row, bn0, lane, ep):
        """Copy i of this lane's of box t (chunks past C's edges zero-filled)."""
        mi = t // NBOX
        col0 = bn0 + (t - mi * NBOX) * COLS
        q = lane + 32 * i
        r = q // CH
        c = q - r * CH
        gr = row + 64 * mi + r
        gc = col0 + EL * c
        ok = gr < ep[M_] and gc < ep[N_]
        cp_async16(src + layout.source_box(t, SLOT, NSLOT, NB) + layout.source_offset(r, 16 * c, ITEM),
                   ep[U] + (gr * ep[P] * PB + ITEM * gc if ok else 0), 16 if ok else 0)

    @device
    def copy(t, src, row, bn0, lane, ep):
        for i in range(PER_BOX):
            copy_one(t, i, src, row, bn0, lane, ep)
        cp_async_commit()

    @device
    def copy_in(j, lo, hi, src, row, bn0, lane, ep):
        if lo <= j < hi:
            copy_one(j // PER_BOX, j % PER_BOX, src, row, bn0, lane, ep)
            if j % PER_BOX == PER_BOX - 1:
                cp_async_commit()

    @device
    def hold_in(k, lo, hi, pacc, row, bn0, lane, ep):
        # (positions past C's edges read at its last row and column pair: never stored)
        if lo <= k < hi:
            t = 2 + k // JJ
            mi = t // NBOX
            col = bn0 + (t - mi * NBOX) * COLS + 8 * (k % JJ)
            for h in range(2):
                r, c = c_fragment(lane, 2 * h)
                gr = min(row + 64 * mi + r, ep[M_] - 1)
                gc = min(col + c, ep[N_] - 2)       # (N is a multiple of 4, c even: pairs never straddle it)
                ldg_v2f32(pacc, NACC + 4 * k + 2 * h, ep[U] + gr * ep[P] * PB + 4 * gc)
    return copy, unrolled(copy_in, CU), unrolled(hold_in, max(HU, 1)), CU, HU


@lru_cache(maxsize=None)
def _slot_parts(MI, BN, OUT_ITEM, EB, NACC, HELD, SOURCE, copy):
    """``(ready, refill, read, source, out_box)`` of ``_stager``: the reads of the elements from
    the warp's slots (or the held registers), and the slots' refills by ``copy``."""
    ITEM, KIND, NSLOT = SOURCE
    COLS, NBOX, NB, SLOT, CH, JJ = _source_geometry(MI, BN, OUT_ITEM, ITEM)
    HOLD = HELD > 0
    ALL = NSLOT >= NB                               # every box in a slot of its own: no refills

    @device
    def source(buf0, tw):
        return buf0 + EB * layout.OUT_BOX_BYTES + layout.source_warp(tw >> 5, SLOT, NSLOT, NB)

    @device
    def out_box(buf0, t):
        # box t of C where the array's box t was read (every lane of the consumer has: the named
        # barrier after ``apply_box(t)``)
        return buf0 + EB * layout.OUT_BOX_BYTES + layout.source_box(t, SLOT, NSLOT, NB)

    @device
    def ready(t):
        # groups committed by then: every box's (ALL), else boxes 0 and 1 (``piece``) and box
        # i + 2 once box i is stored (``refill``, after box i + 1 is read): box 1 is read before
        # box 0's refill
        if not (HOLD and t >= 2):
            cp_async_wait(NB - 1 - t if ALL else 1 if (t == 0 and NB > 1) or (t >= 2 and t + 1 < NB) else 0)
            cuda.syncwarp()

    @device
    def refill(t, src, row, bn0, lane, ep):
        if not (HOLD or ALL):
            cuda.syncwarp()                         # every lane has read box t's slot
            if t + 2 < NB:
                copy(t + 2, src, row, bn0, lane, ep)

    @device
    def read(acc, src, t, jj, h, lane, x):
        if HOLD and t >= 2:
            x[0] = acc[NACC + 4 * ((t - 2) * JJ + jj) + 2 * h]
            x[1] = acc[NACC + 4 * ((t - 2) * JJ + jj) + 2 * h + 1]
        else:
            r, c = c_fragment(lane, 2 * h)
            at = src + layout.source_box(t, SLOT, NSLOT, NB) + layout.source_offset(r, ITEM * (8 * jj + c), ITEM)
            if ITEM == 4:
                lds_v2f32(x, 0, at)
            else:
                w = lds_u32(at)
                x[0] = in16_f32(w, 0, KIND)
                x[1] = in16_f32(w, 1, KIND)
    return ready, refill, read, source, out_box


@lru_cache(maxsize=None)
def _stager(cfg: WgmmaConfig, OUT_ITEM, SLOT_IDX, SOURCE=(4, 0, 2)):
    """An epilogue array staged in shared memory (``Epilogue.staged``; ``WgmmaConfig.epi_source``):
    each warp copies its 16 rows of the tile's output boxes (``_box_store``'s MI x BN // COLS) by
    16-byte cp.async into NSLOT slots of its own after its consumer's output boxes
    (``layout.source_offset``), box t into slot t % NSLOT, and the epilogue reads the elements
    there instead of asking HBM for them while the tensor cores wait. ``SOURCE``: (ITEM, KIND,
    NSLOT): the array's element bytes, its kind (float32 0, fp16 1, bf16 2: read as float32) and
    the slots, 2 or every box. With HELD (``WgmmaConfig.epi_held``, float32), each thread also
    loads its elements of boxes 2.. into HELD registers after its NACC accumulators (two slots
    hold two of a 128x256 tile's four boxes). Boxes neither in a slot nor held come into the
    slots as they free, during the epilogue (asking L2 for them ahead measured slower, by line or
    in bulk, benchmarks/results/ab_staged_prefetch_h100.log). With EB = 0 (a slot a box, the
    array's elements C's size) C's box t is staged where the array's box t was read, so the
    slots are box-major (``layout.source_warp``). Returns (piece, ready, refill, read, source,
    out_box): ``piece(k, pacc, sbase, a_row0, row, bn0, lane, ep)``: piece k of LEAD of the reads
    (SPREAD, ``WgmmaConfig.epi_spread``: the mainloop issues piece k with the k-th of its last
    LEAD slices; else all in piece 0, LEAD slices before the end; with EB = 0 piece 0 first waits
    for the last tile's stores to have read the slots); ``ready(t)``: box t has arrived;
    ``refill(t, src, row, bn0, lane, ep)``: box t read, box t + 2 into its slot; ``read(acc, src,
    t, jj, h, lane, x)``: this lane's column pair of n8 block jj, row half h, of box t into
    x[0..1]; ``source(buf0, tw)``: the warp's slots (``buf0``: its consumer's output boxes);
    ``out_box(buf0, t)``: where C's box t is staged with EB = 0 (else None). The output boxes lie
    where ``cfg.smem`` says (``config.SmemLayout``); ``SLOT_IDX``: the
    indices in ``ep`` of M, N, the array's address and its row stride, and the bytes of that
    stride's unit (a user array's is in bytes, c's ldc in elements)."""
    MI, BN, EB, WG_M, LEAD, SPREAD = cfg.wg_m // 64, cfg.bn, cfg.epi_boxes, cfg.wg_m, cfg.epi_lead, cfg.epi_spread
    HELD, NACC = cfg.epi_held, cfg.local_regs - cfg.epi_held
    EPI_OFF, PER_CONS = cfg.smem.epilogue, cfg.smem.per_consumer
    ITEM, KIND, NSLOT = SOURCE
    NB = _source_geometry(MI, BN, OUT_ITEM, ITEM)[2]
    NSLOT = min(NSLOT, NB)                          # (a warp's slots: its share of epi_source)
    HOLD = HELD > 0
    OUT_SLOTS = EB == 0                             # C's boxes staged in the array's slots
    if not (NSLOT >= NB or NSLOT == 2) or (OUT_SLOTS and not (NSLOT >= NB and ITEM == OUT_ITEM)):
        raise ValueError(f"{NSLOT} slots of {NB} boxes (2, or one a box: C's boxes staged there, EB = 0, "
                         "where the array's elements are C's size)")
    copy, copies_in, holds_in, CU, HU = _source_reads(MI, BN, OUT_ITEM, SLOT_IDX, NACC, HELD, ITEM, NSLOT)
    ready, refill, read, source, out_box = _slot_parts(MI, BN, OUT_ITEM, EB, NACC, HELD, (ITEM, KIND, NSLOT), copy)

    @device
    def piece(k, pacc, sbase, a_row0, row, bn0, lane, ep):
        # (row & 63) >> 4: the warp in its consumer (tiles and consumers start on 64-row bounds)
        src = source(sbase + EPI_OFF + (a_row0 // WG_M) * PER_CONS, (row & 63) << 1)
        if OUT_SLOTS and k == 0:
            # the last tile's stores of C from the slots have read them
            if (row & 63) == 0 and lane == 0:
                tma_store_wait_read(0)
            named_barrier(1 + a_row0 // WG_M, 128)      # (the consumer's barrier, as its epilogue's)
        if SPREAD:
            copies_in(CU, k * CU // LEAD, (k + 1) * CU // LEAD, src, row, bn0, lane, ep)
            if HOLD:
                holds_in(HU, k * HU // LEAD, (k + 1) * HU // LEAD, pacc, row, bn0, lane, ep)
        elif k == 0:
            for t in range(min(NSLOT, NB)):
                copy(t, src, row, bn0, lane, ep)
    return piece, ready, refill, read, source, out_box if OUT_SLOTS else None


def _kernel_stager(cfg: WgmmaConfig, epi, out_dtype: str, whole: bool):
    """The staged epilogue array's parts (``_stager``) of a kernel of ``cfg`` with ``cfg.epi_source``
    (``whole``: of whole tiles, stored by TMA), else None."""
    if not cfg.epi_source:
        return None
    if not (cfg.tma_store and whole) or cfg.promote or epi.staged() is None:
        raise ValueError("an epilogue array is staged (epi_source) by a kernel of whole tiles stored by TMA, "
                         f"for an epilogue with such an array, not {epi!r}")
    dt = epi.staged_dtype()
    if cfg.epi_source < staged_bytes(cfg, out_dtype, dt):
        raise ValueError(f"epi_source={cfg.epi_source}: the staged epilogue array needs "
                         f"{staged_bytes(cfg, out_dtype, dt)} bytes per consumer")
    u = epi.staged()                                # (c's row stride is in elements, a user array's in bytes)
    nb = _staged_boxes(cfg, out_dtype)
    nslot = nb if cfg.epi_source >= staged_bytes(cfg, out_dtype, dt, nb) else 2     # (every box, or refills)
    return _stager(cfg, layout.ITEMSIZE[out_dtype],
                   epi.index("M", "N", u, "ldc" if u == "c" else f"{u}_stride0") +
                   (layout.ITEMSIZE[dt] if u == "c" else 1,),
                   (layout.ITEMSIZE[dt], LOAD_KIND[dt], nslot))


def _staged_boxes(cfg: WgmmaConfig, out_dtype: str) -> int:
    """Output boxes of a consumer of ``cfg`` (``_source_geometry``'s NB)."""
    return _source_geometry(cfg.wg_m // 64, cfg.bn, layout.ITEMSIZE[out_dtype])[2]


def staged_bytes(cfg: WgmmaConfig, out_dtype: str, dtype: str = "float32", slots: int = 2) -> int:
    """Shared memory a consumer's warps stage an epilogue array of ``dtype`` in (``_stager``):
    ``slots`` slots each of 16 rows x an output box's columns."""
    return layout.SOURCE_WARPS * slots * layout.SOURCE_ROWS * (layout.ROW_BYTES // layout.ITEMSIZE[out_dtype]) * \
        layout.ITEMSIZE[dtype]
