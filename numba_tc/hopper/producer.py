"""The producer: TMA loads of A's and B's K slices into the ring (multicast in a cluster, 3-D
maps for batches), and for an n-major tf32 B the producer warpgroup's cp.async copy, transposed
k-major in registers."""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, uint32

from .. import layout
from ..intrinsics import ptr
from ..jit import device
from ..layout import chunk_offset
from ..primitives import (cp_async16, cp_async_commit, cp_async_wait, fence_proxy_async, lds_v4u32, mbar_arrive,
                          mbar_expect_tx, mbar_wait, named_barrier, sts_v4u32, tf32_rn, tma_load_2d,
                          tma_load_2d_multicast, tma_load_3d)
from ..schedule import cdiv
from .pipeline import ASYNC_THREADS, RingPos, make_ring

# the named barrier the producer warpgroup's copies meet at (the consumers' epilogues use 1 + warpgroup)
ASYNC_BAR = 15


@lru_cache(maxsize=None)
def _box_loader(MASK, BATCH):
    """``box(tmap, dst, c0, c1, z, bar)``: one TMA box at (c0, c1) (of matrix z of a batched
    operand's 3-D map, with BATCH); with a cluster ``MASK``, into every CTA in the mask."""
    if MASK and BATCH:
        raise ValueError("batched kernels do not multicast (no clusters)")

    @device
    def box(tmap, dst, c0, c1, z, bar):
        if BATCH:
            tma_load_3d(dst, tmap, c0, c1, z, bar)
        elif MASK:
            tma_load_2d_multicast(dst, tmap, c0, c1, bar, MASK)
        else:
            tma_load_2d(dst, tmap, c0, c1, bar)
    return box


@lru_cache(maxsize=None)
def _loader(KMAJOR, ROWS, MASK, BATCH=False, ITEM=2, CL=1):
    """``load(tmap, dst, mn0, k0, bar, z, rank)``: TMA the K slice at k0 of rows/columns
    mn0..mn0+ROWS of an operand of ``ITEM``-byte elements (of its matrix z, with BATCH) into
    ``dst``. In a cluster of CL CTAs (``MASK``), the CTA of ``rank`` loads its share and
    multicasts it into the same place of every CTA in the mask: of a k-major operand, rows
    rank * ROWS / CL onward (one box); of an mn-major one, whole 128-byte boxes: its 1/CL of them,
    or where they do not divide evenly boxes r, r + CL, ..., r turning with the K slice (a
    192-wide tile: 2 + 1, then 1 + 2), so that each CTA's TMA issues as many rows as the other's
    over two slices."""
    box = _box_loader(MASK, BATCH)
    PER = layout.ROW_BYTES // ITEM                     # mn of an mn-major box (``layout.mn_major_offset``)
    PART, NBOX = ROWS // CL, ROWS // PER
    if not KMAJOR and ROWS % PER:
        raise ValueError(f"an mn-major operand's tile is whole {PER}-wide boxes, not {ROWS}")
    TURNS = cdiv(NBOX, CL)

    @device
    def load(tmap, dst, mn0, k0, bar, z, rank):
        if KMAJOR:                                     # one box of [ROWS / CL][one K slice]
            box(tmap, dst + rank * PART * layout.ROW_BYTES, k0, mn0 + rank * PART, z, bar)
        else:                                          # boxes of [one K slice][PER mn]
            if NBOX % CL == 0:                         # boxes rank * TURNS onward
                for i in range(TURNS):
                    j = rank * TURNS + i
                    box(tmap, dst + j * PER * layout.ROW_BYTES, mn0 + PER * j, k0, z, bar)
            else:
                r = (rank + k0 // PER) % CL
                for i in range(TURNS):
                    j = r + CL * i
                    if j < NBOX:
                        box(tmap, dst + j * PER * layout.ROW_BYTES, mn0 + PER * j, k0, z, bar)
    return load


def _staged_rows(A_BYTES, BN):
    """Where a staged stage keeps B's slice as it lies: after A's ``A_BYTES`` and B's k-major
    ``BN`` rows (``WgmmaConfig.staged``)."""
    return A_BYTES + BN * layout.ROW_BYTES


@lru_cache(maxsize=None)
def _async_loader(ROWS):
    """``(copy, finish)`` for an mn-major fp32 operand the producer warpgroup copies k-major, each
    thread its share: ``src`` = (address, row pitch in elements, columns, K), element (k, mn) at
    address + 4 (k ld + mn), 16-byte aligned rows (``repack.vector_ok``). ``copy(src, staged,
    mn0, k0)``: the K slice at k0 (32 elements) of columns mn0..mn0+ROWS as it lies, into the
    stage's ``staged`` rows of K by 16-byte cp.async (zeros past the edges; chunks XOR-swizzled
    by k / 4), one commit group. ``finish(staged, dst, full, pending)``: once the warpgroup's
    copies but the last ``pending`` groups have landed (each thread's, then a named barrier: a
    block holds other threads' chunks), transpose 4 x 4 blocks in registers (four 16-byte
    loads of 4 k rows, four 16-byte stores of 4 columns) into ``dst`` k-major and 128B-swizzled as
    TMA stores a k-major box (``layout.chunk_offset``), rounding each element to tf32 (to nearest
    even, as TMA's TFLOAT32 loads round A: wgmma would truncate); fence them for wgmma's async
    proxy and arrive on the stage's ``full`` barrier. A phase of 8 lanes takes the 8 blocks of
    one 4-column group (4 k each), so both the loads and the stores fall in distinct banks."""
    Q = ROWS // 4                          # 16-byte chunks of a staged row of K
    ROW = ROWS * 4                         # bytes of a staged row
    COPIES = 32 * Q // ASYNC_THREADS       # chunks a thread copies a slice
    BLOCKS = 8 * Q // ASYNC_THREADS        # 4 x 4 blocks a thread transposes a slice

    @device
    def staged_at(k, q):                   # chunk q of staged row k
        return k * ROW + ((q ^ ((k >> 2) & 7)) << 4)

    @device
    def copy(src, staged, mn0, k0):
        base, ld, cols, kk = src
        t = cuda.threadIdx.x & (ASYNC_THREADS - 1)
        for i in range(COPIES):
            c = t + ASYNC_THREADS * i
            k = c // Q
            q = c - k * Q
            left = cols - mn0 - 4 * q                     # columns from this chunk's first to the edge
            nbytes = 4 * min(4, max(0, left)) if k0 + k < kk else 0
            cp_async16(staged + staged_at(k, q), base + ((k0 + k) * ld + mn0 + 4 * q) * 4 if nbytes else base,
                       nbytes)
        cp_async_commit()

    @device
    def finish(staged, dst, full, pending):
        t = cuda.threadIdx.x & (ASYNC_THREADS - 1)
        v = cuda.local.array(16, uint32)
        pv = ptr(v)
        cp_async_wait(pending)
        named_barrier(ASYNC_BAR, ASYNC_THREADS)           # every thread's copies landed: a block holds others'
        for i in range(BLOCKS):
            b = t + ASYNC_THREADS * i
            kb = b & 7                                    # k = 4 kb .. 4 kb + 3
            nb = b >> 3                                   # columns 4 nb .. 4 nb + 3
            lds_v4u32(pv, 0, staged + staged_at(4 * kb, nb))
            lds_v4u32(pv, 4, staged + staged_at(4 * kb + 1, nb))
            lds_v4u32(pv, 8, staged + staged_at(4 * kb + 2, nb))
            lds_v4u32(pv, 12, staged + staged_at(4 * kb + 3, nb))
            for e in range(16):
                v[e] = tf32_rn(v[e])
            sts_v4u32(dst + chunk_offset(4 * nb, kb, 8, True), v[0], v[4], v[8], v[12])
            sts_v4u32(dst + chunk_offset(4 * nb + 1, kb, 8, True), v[1], v[5], v[9], v[13])
            sts_v4u32(dst + chunk_offset(4 * nb + 2, kb, 8, True), v[2], v[6], v[10], v[14])
            sts_v4u32(dst + chunk_offset(4 * nb + 3, kb, 8, True), v[3], v[7], v[11], v[15])
        fence_proxy_async()
        mbar_arrive(full)
    return copy, finish


@lru_cache(maxsize=None)
def make_load_stage(A_KM, B_KM, BM, BN, A_BYTES, LOADED, CL, BATCH=False, ASYNC_B=False, ITEM=2):
    """``produce(tma, tmb, stage, full, bm0, bn0, k0, rank, za, zb)``: expect the ``LOADED``
    bytes TMA brings on ``full`` (zero-filled parts of a box count too; not a staged stage's
    second copy of B), then issue the loads of A's and B's K slice k0 (of their matrices za and
    zb, with BATCH). In a cluster each CTA loads 1/CL of
    the shared B tile and multicasts it to all: the peers' loads complete on this CTA's ``full``
    too. With ASYNC_B every producer thread runs it: thread 0 loads A by TMA, and each copies its
    share of B by cp.async (``tmb``: ``_async_loader``'s source; its ``finish`` arrives on
    ``full``, a slice later: ``make_producer``). ``ITEM``: bytes of an input element."""
    load_a = _loader(A_KM, BM, 0, BATCH, ITEM)
    load_b = _loader(B_KM, BN, (1 << CL) - 1 if CL > 1 else 0, BATCH, ITEM, CL)
    if ASYNC_B:
        copy_b = _async_loader(BN)[0]
        STAGED = _staged_rows(A_BYTES, BN)

        @device
        def produce_async(tma, tmb, stage, full, bm0, bn0, k0, rank, za, zb):
            if cuda.threadIdx.x & (ASYNC_THREADS - 1) == 0:
                mbar_expect_tx(full, A_BYTES)
                load_a(tma, stage, bm0, k0, full, za, 0)
            copy_b(tmb, stage + STAGED, bn0, k0)
        return produce_async

    @device
    def produce(tma, tmb, stage, full, bm0, bn0, k0, rank, za, zb):
        mbar_expect_tx(full, LOADED)
        load_a(tma, stage, bm0, k0, full, za, 0)
        load_b(tmb, stage + A_BYTES, bn0, k0, full, zb, rank)
    return produce


@lru_cache(maxsize=None)
def make_producer(walk_unit, produce, S, STAGE, BK, finish=None):
    """Producer (one thread; with ``finish``, the warpgroup): ``producer(tma_a, tma_b, ring, w,
    bmask)``: for each unit of walk ``w`` (``walk_unit``: the scheduler's ``unit``) and each of
    its K slices, wait until the cluster has released a stage of ``ring``, then TMA the slice into
    it (``produce``: ``make_load_stage``; a batched operand's matrix is the unit's depth, a
    broadcast one's (not in ``bmask``) 0). ``finish(tmb, stage, full, pending)``: a stage's last
    step (a cp.async operand's: ``make_finish_stage``), taken a slice late, once the next slice's
    copies are issued, so that they are in flight meanwhile."""
    ops = make_ring(S, STAGE)
    stage_at, full, empty, advance = ops.stage, ops.full, ops.empty, ops.advance
    LAG = finish is not None
    finish = finish or _no_finish

    @device
    def producer(tma_a, tma_b, ring, w, bmask):
        s = 0                       # the ring position as two integers across the loop (``make_ring``)
        ph = 0
        rank = w.rank
        prev = -1
        for u in range(w.first, w.units, w.stride):
            tile = walk_unit(w, u)
            z = tile.depth
            for t in range(tile.kslices):
                mbar_wait(empty(ring, s), ph ^ 1)
                produce(tma_a, tma_b, stage_at(ring, s), full(ring, s), tile.m0, tile.n0,
                        (tile.k0 + t) * BK, rank, z * (bmask & 1), z * ((bmask >> 1) & 1))
                if LAG:
                    if prev >= 0:
                        finish(tma_b, stage_at(ring, prev), full(ring, prev), 1)
                    prev = s
                s, ph = advance(RingPos(s, ph))
        if LAG and prev >= 0:
            finish(tma_b, stage_at(ring, prev), full(ring, prev), 0)
    return producer


@device
def _no_finish(tmb, stage, full, pending):
    return 0


@lru_cache(maxsize=None)
def make_finish_stage(BN, A_BYTES):
    """``finish(tmb, stage, full, pending)``: the last step of a stage whose B (``BN`` columns,
    after A's ``A_BYTES``; its staged rows after it) the producer copies by cp.async
    (``_async_loader``'s ``finish``)."""
    done = _async_loader(BN)[1]
    STAGED = _staged_rows(A_BYTES, BN)

    @device
    def finish(tmb, stage, full, pending):
        done(stage + STAGED, stage + A_BYTES, full, pending)
    return finish


@lru_cache(maxsize=None)
def _b_source(ASYNC_B):
    """``source(tmb, pb, ldb, n, k)``: what the producer's loads of B take: its tensor map, or
    with ASYNC_B its address, pitch, columns and K (``_async_loader``)."""
    if ASYNC_B:
        @device
        def source(tmb, pb, ldb, n, k):
            return (pb, ldb, n, k)
        return source

    @device
    def source(tmb, pb, ldb, n, k):
        return tmb
    return source
