"""The Hopper ladder: TMA, wgmma and mbarrier pipelines from Numba (sm_90a), composing the
primitives of ``ptx/hopper.cu``.

One kernel, built from a ``WgmmaConfig`` out of parts, each a cached factory of compile-time
facts returning a device function of run-time values only (the scheduler ``make_scheduler``, the
producer ``make_producer`` over ``make_load_stage``, the mainloop ``make_mainloop`` over
``make_slice_mma``, the epilogue ``make_epilogue_part``, composed by ``make_consumer``, or by
``make_one_tile`` for rungs 1-2); each rung is one line of ``RUNG1``..``RUNG7`` below, a
configuration that switches on what its note says:

1. ``wgmma_tma``: TMA loads a multi-stage ring of 128B-swizzled tiles, completing on an mbarrier
   per stage; one warpgroup issues ``wgmma`` straight from shared memory. The first thread refills
   a stage once the block (one ``__syncthreads`` per K slice) is done with it.
2. ``wgmma_wide``: 128x256 tiles, two consumer warpgroups of m64n256k16 (twice the work per byte
   loaded).
3. ``wgmma_ws``: warp specialization: a producer warpgroup issues TMA; consumers wait on a *full*
   barrier per stage and release it on an *empty* one, keeping one wgmma group in flight. No
   block-wide barrier is left in the main loop.
4. ``wgmma_regs``: ``setmaxnreg``: the producer gives its registers back, the consumers take them.
5. ``wgmma_persistent``: persistent blocks walk the tiles in grouped order; the producer fills the
   ring for the next tile while the consumers write the last one out. The grid is balanced: the
   fewest blocks (at most one per SM) that take the tiles in as many rounds as every SM would.
6. ``wgmma_cluster``: 2-CTA clusters along M; each CTA loads half of the B tile both need and TMA
   multicasts it, and consumers release a stage in both CTAs (remote mbarrier arrivals).
7. ``hopper``: the epilogue goes through shared memory (128B-swizzled boxes, bank-conflict free)
   and out by TMA stores, asynchronous and clipped at C's edges. Built on rung 5: with this
   epilogue the cluster measured slower, except where B's rows do not start on 32-byte sectors
   (TMA then moves a fifth more sectors per row, and B is two thirds of the traffic): there
   ``hopper`` multicasts B as rung 6 does (523 -> 758 TFLOP/s at 4096^3). Per problem, a cost
   model (``pick_config``, ``estimate``) chooses the tile (128x256, 128x192, 128x128, 64x256,
   64x128, or 192x192 on three consumer warpgroups) and how many ways K is split where tiles
   are too few to fill the GPU (split-K: fp32 partial sums in scratch, added in a fixed order
   by ``fixup``, which then applies the epilogue), or whether only the tiles of a last,
   partial round are split (a tail split, ``pick_tail``: whole rounds of whole tiles first);
   operands TMA cannot read are first copied to a pitch it can (``repack``). A batched product
   of one 128-wide column runs ping-pong consumers (``WgmmaConfig.pingpong``, ``NARROW_N``):
   each warpgroup a tile of its own, their mainloops in turns, one's epilogue beside the
   other's. A decode product (at most 32 rows of a row-major A) runs swapped, C^T = B^T A^T,
   on 64x8 to 64x32 tiles (``SWAP``, ``_narrow_swap``): N on the tile's 64 rows, C's rows the
   wgmma's narrow width, as cuBLAS's decode kernels do.

Stream-K over the last, partial round of a persistent grid (equal K runs per SM, at different
offsets) was built and measured in session 8 and lost on every shape it touched
(benchmarks/NOTES.md); it was removed. The tail split keeps the whole rounds as they were.

Conventions (as in ``tensorcore.py``): C (M x N, row-major, ``ldc``) = A (M x K) @ B (K x N);
``ta``/``tb`` say A/B are column-major. Each operand is loaded as it lies in global memory: a
k-major one (A row-major, B column-major) as one TMA box of [rows][64 k], an mn-major one as
boxes of [64 k][64 mn], read by wgmma with its transpose flag; no layout needs a host copy.
Ragged M, N, K: TMA zero-fills boxes past the edges and the epilogue writes only inside C.
TMA needs 16-byte aligned rows (``tensormap.tma_requirements``): rungs 1-6 refuse other operands
with the reason; ``hopper`` copies them (``repack``).

fp8 and tf32 (``hopper`` only): a K slice is still one 128-byte row (128 fp8 or 32 fp32 elements),
read by wgmma's k32 fp8 or k8 tf32 instructions, which take k-major operands only from shared
memory. A tf32 A that is mn-major is read through registers instead (wgmma's A may come from
registers, which each warp loads from the stage: ``_slice_group_regs_a``), so an n-major tf32 B
with a k-major A runs as C^T = B^T A^T (``_swaps``; the kernel stores C's transpose). Other
operands wgmma cannot read are copied k-major first (``repack.gather_kernel``), or, for a tf32 B of
few rows' products, into each stage by the producer warpgroup's cp.async (``_async_loader``,
``_b_by_producer``). fp32 operands
are loaded by TMA as TFLOAT32, which rounds them to tf32 (to nearest even; the producer's copy
rounds them so too). fp8 wgmma adds in fewer bits than fp32, so its
tiles promote: each slice's sum in accumulators of its own, added to fp32 ones
(``make_promoted_mainloop``; a 256-wide tile one n128 half at a time, ``WgmmaConfig.promote_n``;
into a bf16 C, two slices' sum at a time, ``WgmmaConfig.promote_every``); the per-tensor
scales are read in the epilogue (``Epilogue.scales``).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from numba import cuda, float32, int32, uint32

from . import fixup, layout, repack, workspace
from .config import WARPGROUP, WGMMA_N, WGMMA_N_TYPED, Variant, WgmmaConfig
from .epilogue import BLOCK_SCALED, BLOCK_SCALES, LOAD_KIND, PLAIN, SCALED
from .epilogue import make as make_epilogue
from .fragments import OUT_CONVERT, apply_fragments, make_store_out
from .intrinsics import f32_ptr, ptr
from .jit import device, kernel, kernel_factory, unrolled
from .layout import (a_fragment, c_fragment, chunk_offset, compute_dtype, mn_major_offset, wgmma_d_fragment, wgmma_desc,
                     wgmma_operand_offset)
from .plan import Step
from . import primitives
from .primitives import (cluster_ctarank, cluster_sync, cp_async16, cp_async_commit, cp_async_wait,
                         fence_proxy_async, grid_dep_wait, in16_f32, ldg_v2f32, lds_u32, lds_v2f32, lds_v4u32,
                         mbar_arrive, mbar_arrive_cluster, mbar_expect_tx, mbar_fence_init, mbar_init, mbar_wait,
                         named_barrier, named_barrier_arrive, setmaxnreg_dec, setmaxnreg_inc, smem_addr, sts_out2,
                         sts_v4u32, tf32_rn,
                         tma_load_2d, tma_load_2d_multicast, tma_load_3d, tma_prefetch_map, tma_store_2d,
                         tma_store_3d, tma_store_commit, tma_store_wait_all, tma_store_wait_read,
                         wgmma_commit, wgmma_fence, wgmma_wait)
from .schedule import balanced_workers, cdiv, tile_origin
from .tensormap import MAP_BYTES, encode, tma_requirements, tma_rows_fast

__all__ = ["RUNGS", "wgmma_kernel", "PARAMS", "WGMMA_TYPE", "variant_from"]

WGMMA_TYPE = {"float16": 0, "bfloat16": 1}      # ptx/hopper.cu: wgmma's input type argument
# the wgmma of each width (``config.WGMMA_N``): 16-bit, fp8, tf32 from shared memory, tf32 with A in registers
_WGMMA, _WGMMA8, _WGMMA32, _WGMMA32_RS = ({n: getattr(primitives, f"wgmma_m64n{n}{op}") for n in widths} for op, widths in
                                          (("k16", WGMMA_N), ("k32_f8", WGMMA_N_TYPED), ("k8_tf32", WGMMA_N_TYPED),
                                           ("k8_tf32_rs", WGMMA_N_TYPED)))
KMAJOR_ONLY = layout.FP8 + ("tf32",)             # input types wgmma reads k-major only (no transpose flags)
# Kernel parameters: tensor maps of A, B and C (by value); C's address; M, N, K; ldc; K slices per
# split (split-K and tail-split kernels; others ignore it); batches and which operands have them
# (bit 0: A, bit 1: B; a batched kernel's broadcast operand is read at batch 0; others ignore
# both); B's address and row pitch in elements (a kernel that copies B by cp.async, ``async_b``;
# others ignore them); the tail's partial-sum blocks and the whole tiles before it (``tail``)
PARAMS = ("map",) * 3 + ("i64",) * 12
ASYNC_THREADS = 128      # the producer warpgroup: all of it copies an operand by cp.async
ASYNC_BAR = 15           # ... and meets at this named barrier (the consumers' epilogue uses 1 + warpgroup)
TURN_BAR = 4             # ping-pong: consumer wg's mainloop waits at TURN_BAR + wg for the other's turn to end


# ---------------------------------------------------------------------------------------------
# The kernel's parts, CUTLASS's way: a tile scheduler (which tile a block takes next), a producer
# (TMA into the ring), a mainloop (wgmma over the ring) and an epilogue (accumulators to C). Each
# is a factory, cached per configuration, that closes over its compile-time constants (upper
# case) and returns a device function of run-time values only (as ``epilogue.make`` does); the
# larger parts take the smaller ones they call as arguments, so any one can be swapped.
# ``wgmma_kernel`` composes them. The ring: S stages of STAGE bytes from ``sbase``, a full
# mbarrier per stage at bars + 8s and an empty one at bars + 8(S + s).
# ---------------------------------------------------------------------------------------------
@device
def _operand_desc(tile, kmajor, mn, ks):
    """The wgmma descriptor of the operand at row/column ``mn`` and k16 step ``ks`` of a stored
    tile at shared address ``tile`` (layout facts: ``layout.wgmma_operand_offset``)."""
    lbo = 16 if kmajor else layout.BOX_BYTES       # (k-major: unused by the 128B swizzle)
    return wgmma_desc(tile + wgmma_operand_offset(kmajor, mn, ks), lbo, layout.ATOM_BYTES, layout.SW128)


@lru_cache(maxsize=None)
def _advancer(S):
    """``advance(s, ph)``: the next ring stage and the barrier phase parity that goes with it."""
    @device
    def advance(s, ph):
        if s == S - 1:
            return 0, ph ^ 1
        return s + 1, ph
    return advance


@lru_cache(maxsize=None)
def _releaser(CL):
    """``release(empty)``: one arrival on a stage's empty barrier in every CTA of the cluster."""
    @device
    def release(empty):
        if CL == 1:
            mbar_arrive(empty)
        else:
            for r in range(CL):
                mbar_arrive_cluster(empty, r)
    return release


@lru_cache(maxsize=None)
def make_scheduler(BM, BN, GROUP, CL, SPLIT, BATCH=False, TAIL=False):
    """Scheduler: ``(walk, unit)``. ``walk(grid_m, grid_n, ktiles, kper, batches, whole)`` is this
    block's walk, a tuple (first unit, stride, units, tiles, kper, ktiles, cluster rank, grid_m,
    grid_n, whole): a persistent grid walks cluster units cid, cid + clusters, ... ``unit(w, u)``:
    unit ``u`` -> its tile's origin, its depth ``s`` (split or batch) and its K slices [k0, k0 +
    kn). Tiles go in grouped order (``schedule.tile_origin``); the CL blocks of a cluster take CL
    tiles stacked along M (the same B tile). Without SPLIT, BATCH or TAIL a unit is a whole tile.
    With SPLIT, units go split by split (s = u // tiles): blocks that run at the same time take the
    same K range of different tiles, and share its panels of A and B in L2. With BATCH, a unit is
    a whole tile of batch s = u // tiles, batch by batch. With TAIL, the first ``whole`` units are
    whole tiles (s = -1), a whole number of the grid's rounds, and the R tiles after them are split
    split by split as with SPLIT, s = split * R + the tile's place among them (its partial sum's
    block, ``make_consumer``)."""
    @device
    def walk(grid_m, grid_n, ktiles, kper, batches, whole):
        rank = cluster_ctarank() if CL > 1 else 0
        cid = cuda.blockIdx.x // CL
        nclusters = cuda.gridDim.x // CL
        ntiles = ((grid_m + CL - 1) // CL) * grid_n
        nunits = ntiles
        if SPLIT or TAIL:           # whole tiles (TAIL), then the rest split (SPLIT: all of them)
            first = whole if TAIL else 0
            nunits = first + (ntiles - first) * ((ktiles + kper - 1) // kper)
        if BATCH:
            nunits = ntiles * batches
        return cid, nclusters, nunits, ntiles, kper, ktiles, rank, grid_m, grid_n, whole

    @device
    def unit(w, u):
        ntiles, kper, ktiles, rank, grid_m, grid_n, whole = w[3], w[4], w[5], w[6], w[7], w[8], w[9]
        s = 0
        ct = u
        k0 = 0
        kn = ktiles
        if BATCH:
            s = u // ntiles
            ct = u - s * ntiles
        if SPLIT or TAIL:
            first = whole if TAIL else 0                 # whole tiles before the split ones
            if TAIL:
                s = -1
            if not TAIL or u >= first:
                split = (u - first) // (ntiles - first)
                ct = u - split * (ntiles - first)
                s = u - first if TAIL else split         # (TAIL: = split * rest + (ct - whole))
                k0 = split * kper
                kn = min(kper, ktiles - k0)
        cm0, bn0 = tile_origin(ct, (grid_m + CL - 1) // CL, grid_n, GROUP, CL * BM, BN)
        return cm0 + rank * BM, bn0, s, k0, kn
    return walk, unit


@lru_cache(maxsize=None)
def make_init_ring(S, ARRIVALS, CL, ASYNC_B=False):
    """``init(bars, tma_a, tma_b)``: thread 0 initialises the ring's full (1 arrival; with
    ASYNC_B also one per producer thread, once its cp.async copies of B are in place) and empty
    (ARRIVALS) mbarriers and prefetches the operands' tensor maps; every thread (of the cluster)
    then waits, so that no barrier is used before it exists."""
    FULL = 1 + ASYNC_THREADS * ASYNC_B

    @device
    def init(bars, tma_a, tma_b):
        if cuda.threadIdx.x == 0:
            tma_prefetch_map(tma_a)
            if not ASYNC_B:
                tma_prefetch_map(tma_b)
            for s in range(S):
                mbar_init(bars + 8 * s, FULL)
                mbar_init(bars + 8 * (S + s), ARRIVALS)
            mbar_fence_init()
        if CL > 1:
            cluster_sync()
        else:
            cuda.syncthreads()
    return init


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


def _fp8_kind(dtype_a: str, dtype_b: str) -> int:
    """ptx/hopper.cu's fp8 wgmma ``kind``: 2 * (A is e5m2) + (B is e5m2)."""
    return 2 * (dtype_a == "float8_e5m2") + (dtype_b == "float8_e5m2")


@lru_cache(maxsize=None)
def make_slice_group(dtype, A_KM, B_KM, MI, BN, A_BYTES, dtype_b=None, OFF=0):
    """``issue(pacc, stage, a_row0, n0, keep0)``: a K slice's wgmmas as one committed group: 4 steps
    of 32 bytes of K (k16 for 16-bit inputs, k32 for fp8: ``dtype_b`` is B's when it differs from
    A's, k8 for tf32: fp32 values) x MI m64 blocks of this warpgroup's rows from ``a_row0``, each
    m64nBN from B's row/column ``n0``. wgmma's transpose flags say a 16-bit operand is mn-major;
    fp8 and tf32 operands are k-major only. ``OFF``: the sum goes to accumulators from OFF on,
    starting from zero where ``keep0`` is 0 (a promoted mainloop's), else it adds to those from 0."""
    fp8, tf32 = dtype in layout.FP8, dtype == "tf32"
    if _regs_a(dtype, A_KM, B_KM) and not OFF:
        return _slice_group_regs_a(MI, BN, A_BYTES)
    if dtype in KMAJOR_ONLY and not (A_KM and B_KM):
        raise ValueError(f"wgmma reads {dtype} operands k-major only (A row-major, B column-major; "
                         "a tf32 A may be mn-major, read through registers)")
    KND = _fp8_kind(dtype, dtype_b or dtype) if fp8 else 0 if tf32 else WGMMA_TYPE[dtype]
    widths = _WGMMA8 if fp8 else _WGMMA32 if tf32 else _WGMMA
    if BN not in widths:
        raise ValueError(f"bn={BN}: {dtype} wgmma widths built are {sorted(widths)}")
    WG = widths[BN]

    @device
    def wgmma_one(t, pacc, stage, a_row0, n0, keep0):
        ks = t // MI
        mi = t - ks * MI
        db = _operand_desc(stage + A_BYTES, B_KM, n0, ks)
        da = _operand_desc(stage, A_KM, a_row0 + 64 * mi, ks)
        keep = keep0 if OFF and ks == 0 else 1
        if fp8:
            WG(pacc, OFF + mi * (BN // 2), da, db, keep, KND)
        elif tf32:
            WG(pacc, OFF + mi * (BN // 2), da, db, keep)
        else:
            WG(pacc, OFF + mi * (BN // 2), da, db, keep, KND, 0 if A_KM else 1, 0 if B_KM else 1)
    wgmma_all = unrolled(wgmma_one, 8)

    @device
    def issue(pacc, stage, a_row0, n0, keep0):
        wgmma_fence()
        wgmma_all(4 * MI, pacc, stage, a_row0, n0, keep0)
        wgmma_commit()
    return issue


def _regs_a(dtype, A_KM, B_KM) -> bool:
    """Whether a slice's wgmmas take A from registers (``_slice_group_regs_a``): a tf32 A that is
    mn-major, with B k-major."""
    return dtype == "tf32" and not A_KM and B_KM


@lru_cache(maxsize=None)
def _slice_group_regs_a(MI, BN, A_BYTES):
    """``make_slice_group`` for tf32 with A mn-major: wgmma takes A from registers, so each warp
    loads its m16 x k8 fragments (``layout.a_fragment``) from the stage as TMA left it
    (``layout.mn_major_offset``); no pass transposes A before the kernel. A wgmma may read its A
    registers until its group is waited for, so each k8 step (MI m64 blocks) is a group of its
    own with registers of its own: before a step's loads, the group that last used its
    registers (4 groups back, the previous slice's same step) is waited for, while the 3 after it
    still run. The mainloop keeps 4 groups (a slice) in flight (``make_mainloop``'s GROUPS)."""
    WG = _WGMMA32_RS[BN]
    NF = 16 * MI                                    # 4 k8 steps x MI blocks x 4 registers

    @device
    def load_one(t, fr, stage, row0, lane, ks):
        m, k = a_fragment(lane, t & 3, 0, 1)        # register t % 4 of m64 block t // 4
        fr[4 * ks * MI + t] = lds_u32(stage + mn_major_offset(row0 + 64 * (t >> 2) + m, 8 * ks + k, 4))
    load_step = unrolled(load_one, 8)

    @device
    def wgmma_one(mi, pacc, fr, stage, n0, ks):
        f = 4 * (ks * MI + mi)
        WG(pacc, mi * (BN // 2), fr[f], fr[f + 1], fr[f + 2], fr[f + 3], _operand_desc(stage + A_BYTES, True, n0, ks), 1)
    wgmma_step = unrolled(wgmma_one, 2)

    @device
    def step(ks, pacc, fr, stage, row0, lane, n0):
        wgmma_wait(3)
        load_step(4 * MI, fr, stage, row0, lane, ks)
        wgmma_fence()
        wgmma_step(MI, pacc, fr, stage, n0, ks)
        wgmma_commit()
    steps = unrolled(step, 4)

    @device
    def issue(pacc, stage, a_row0, n0, keep0):
        fr = cuda.local.array(NF, uint32)
        steps(4, pacc, fr, stage, a_row0 + 16 * ((cuda.threadIdx.x >> 5) & 3), cuda.threadIdx.x & 31, n0)
    return issue


@lru_cache(maxsize=None)
def make_slice_mma(dtype, A_KM, B_KM, MI, BN, A_BYTES, dtype_b=None):
    """``consume(pacc, stage, full, ph, a_row0)``: wait for the stage's K slice to land, then
    issue its wgmmas (``make_slice_group``), adding to the accumulators."""
    issue = make_slice_group(dtype, A_KM, B_KM, MI, BN, A_BYTES, dtype_b)

    @device
    def consume(pacc, stage, full, ph, a_row0):
        mbar_wait(full, ph)
        issue(pacc, stage, a_row0, 0, 1)
    return consume


@lru_cache(maxsize=None)
def make_producer(walk_unit, produce, S, STAGE, BK, finish=None):
    """Producer (one thread; with ``finish``, the warpgroup): ``producer(tma_a, tma_b, sbase,
    bars, w, bmask)``: for each unit of walk ``w`` (``walk_unit``: the scheduler's ``unit``) and
    each of its K slices, wait until the cluster has released a stage, then TMA the slice into it
    (``produce``: ``make_load_stage``; a batched operand's matrix is the unit's depth, a broadcast
    one's (not in ``bmask``) 0). ``finish(tmb, stage, full, pending)``: a stage's last step (a
    cp.async operand's: ``make_finish_stage``), taken a slice late, once the next slice's copies
    are issued, so that they are in flight meanwhile."""
    advance = _advancer(S)
    LAG = finish is not None
    finish = finish or _no_finish

    @device
    def producer(tma_a, tma_b, sbase, bars, w, bmask):
        s = 0
        ph = 0
        rank = w[6]
        prev = -1
        for u in range(w[0], w[2], w[1]):
            bm0, bn0, z, k0, kn = walk_unit(w, u)
            for t in range(kn):
                mbar_wait(bars + 8 * (S + s), ph ^ 1)
                produce(tma_a, tma_b, sbase + s * STAGE, bars + 8 * s, bm0, bn0, (k0 + t) * BK, rank,
                        z * (bmask & 1), z * ((bmask >> 1) & 1))
                if LAG:
                    if prev >= 0:
                        finish(tma_b, sbase + prev * STAGE, bars + 8 * prev, 1)
                    prev = s
                s, ph = advance(s, ph)
        if LAG and prev >= 0:
            finish(tma_b, sbase + prev * STAGE, bars + 8 * prev, 0)
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
def make_mainloop(consume, S, STAGE, CL, GROUPS=1, ahead=None, LEAD=0, SPREAD=False):
    """Mainloop (a consumer warpgroup): ``mainloop(pacc, sbase, bars, s, ph, ktiles, a_row0,
    lane, k0, row, bn0, ep)``: ktiles K slices (from slice k0 of K, for a tile whose first column
    is bn0 and this warp's first row ``row``; ``ep``: the epilogue's values) from the ring into
    the accumulators (``consume``: ``make_slice_mma``, committing GROUPS wgmma groups a slice),
    one slice kept in flight: once slice t's groups are issued, slice t-1's are done and its
    stage is released in every CTA of the cluster. With ``ahead`` (``_stager``'s piece), the
    slice LEAD before the tile's end issues the epilogue array's reads (piece 0), or with SPREAD
    each of the last LEAD slices a piece of them. Returns the ring position after the tile."""
    advance = _advancer(S)
    release = _releaser(CL)
    AHEAD = ahead is not None

    @device
    def retire(t, s, ph, prev, bars, lane):
        """Slice t's groups issued (from stage s): the slice before it done, its stage (``prev``)
        released. Returns the next ring position and s."""
        wgmma_wait(GROUPS)
        if t > 0 and lane == 0:
            release(bars + 8 * (S + prev))
        s1, ph1 = advance(s, ph)
        return s1, ph1, s

    @device
    def slices(pacc, sbase, bars, s, ph, prev, t0, t1, a_row0, lane, when, row, bn0, ep):
        """Slices t0..t1-1 of the tile (``prev``: the stage of the slice before t0); without
        SPREAD, slice ``when`` issues all the epilogue array's reads (``ahead``'s piece 0)."""
        for t in range(t0, t1):
            consume(pacc, sbase + s * STAGE, bars + 8 * s, ph, a_row0)
            if AHEAD and not SPREAD and t == when:
                ahead(0, pacc, sbase, a_row0, row, bn0, lane, ep)
            s, ph, prev = retire(t, s, ph, prev, bars, lane)
        return s, ph, prev

    @device
    def tail_step(k, st, pacc, sbase, bars, t0, a_row0, lane, row, bn0, ep):
        """Slice t0 + k (none where that is below 0: fewer than LEAD slices), with piece k of the
        epilogue array's reads issued while its wgmma runs; the ring position in st."""
        t = t0 + k
        s, ph = st[0], st[1]
        if t >= 0:
            consume(pacc, sbase + s * STAGE, bars + 8 * s, ph, a_row0)
        ahead(k, pacc, sbase, a_row0, row, bn0, lane, ep)
        if t >= 0:
            st[0], st[1], st[2] = retire(t, s, ph, st[2], bars, lane)
    tail = unrolled(tail_step, max(LEAD, 1))

    @device
    def mainloop(pacc, sbase, bars, s, ph, ktiles, a_row0, lane, k0, row, bn0, ep):
        if SPREAD:
            # the last LEAD slices written out, each with a piece of the epilogue array's reads,
            # so that they reach HBM spread over the slices rather than all SMs' at once; outside
            # a loop, so that the compiler does not hoist their addresses out of it (they spill)
            s, ph, prev = slices(pacc, sbase, bars, s, ph, 0, 0, ktiles - LEAD, a_row0, lane, -1, row, bn0, ep)
            st = cuda.local.array(3, int32)
            st[0], st[1], st[2] = s, ph, prev
            tail(LEAD, st, pacc, sbase, bars, ktiles - LEAD, a_row0, lane, row, bn0, ep)
            s, ph, prev = st[0], st[1], st[2]
        else:
            s, ph, prev = slices(pacc, sbase, bars, s, ph, 0, 0, ktiles, a_row0, lane, max(ktiles - LEAD, 0), row,
                                 bn0, ep)
        wgmma_wait(0)
        if lane == 0:
            release(bars + 8 * (S + prev))
        return s, ph
    return mainloop


@lru_cache(maxsize=None)
def _block_scaler(BN, SLOT, NACC):
    """Block-wise scales (``Epilogue.scales == "block"``): ``load(kb, row, bn0, lane, ep)`` reads
    this thread's scales of K block kb, (scale_a of its two rows) x (scale_b of the one or two
    128-column blocks its tile's columns fall in), as four products; ``add(i, pacc, s, off, lane,
    base)`` adds slice accumulator i to fp32 accumulator base + i times its scale (``off``: the
    tile's first column within its scale block). ``SLOT``: ``spec.slots()``'s index of M, then of scale_a
    (row and K strides follow, then scale_b and its K and column strides)."""
    TWO = BN > 128                       # a 192-wide tile spans two blocks (64-aligned: never three)
    M_, N_, SA, SB = SLOT, SLOT + 1, SLOT + 2, SLOT + 5

    @device
    def load(kb, row, bn0, lane, ep):
        sa, sb = f32_ptr(ep[SA]), f32_ptr(ep[SB])
        r0 = min(row + (lane >> 2), ep[M_] - 1)
        r1 = min(row + (lane >> 2) + 8, ep[M_] - 1)
        a0 = sa[r0 * ep[SA + 1] + kb * ep[SA + 2]]
        a1 = sa[r1 * ep[SA + 1] + kb * ep[SA + 2]]
        nb = bn0 >> 7
        b0 = sb[kb * ep[SB + 1] + nb * ep[SB + 2]]
        b1 = b0
        if TWO:
            b1 = sb[kb * ep[SB + 1] + min(nb + 1, ((ep[N_] + 127) >> 7) - 1) * ep[SB + 2]]
        return a0 * b0, a0 * b1, a1 * b0, a1 * b1

    @device
    def add(i, pacc, s, off, lane, base):
        m, n = wgmma_d_fragment(lane, base + i)
        right = TWO and off + 8 * (n >> 3) >= 128
        if m >= 8:
            x = s[3] if right else s[2]
        else:
            x = s[1] if right else s[0]
        pacc[base + i] += pacc[NACC + i] * x
    return load, add


def promoted_turn(block: bool, cluster: int) -> int:
    """K slices a turn of the promoted mainloop's loop, written out: per-tensor four (8192^3:
    0.972 of ``_scaled_mm``, two 0.961, one 0.880; benchmarks/NOTES.md, sessions 17 and 33),
    block-wise two, one in a cluster (two spilled in its split-K kernel)."""
    if not block:
        return 4
    return 2 if cluster == 1 else 1


@lru_cache(maxsize=None)
def _promoter(NACC):
    """``add(n, pacc, base)``: a slice's sums (accumulators NACC.. NACC+n-1) added to the fp32
    accumulators from ``base``, written out."""
    @device
    def add_one(i, pacc, base):
        pacc[base + i] += pacc[NACC + i]
    return unrolled(add_one, 128)


@lru_cache(maxsize=None)
def make_promoted_mainloop(issue, S, STAGE, CL, NACC, PARTS=1, BLOCK=None, LEAD=1):
    """The mainloop of fp8 with promotion: each K slice's sum goes to accumulators of its own
    (``issue``, ``make_slice_group``'s, writes NACC // PARTS of them from NACC on, starting from
    zero) and, once its wgmma is done, is added to the fp32 accumulators 0..NACC-1: fp8 wgmma
    adds in fewer bits than fp32, so promoting every 128 of K keeps a long K's sum accurate. The
    add waits for the slice's group; the other consumer's wgmma runs meanwhile. (Pipelines that
    keep a group of the same consumer in flight during the add measured slower:
    benchmarks/NOTES.md, sessions 16 and 17.) ``PARTS`` = 2 (a 256-wide tile, one m64 block):
    the slice is issued and added in two n128 halves in turn (A read from shared memory for
    each: loading it into registers once, for wgmma's register-A form, measured slower). With
    block-wise scales (``BLOCK``: ``_block_scaler``'s (BN, SLOT)) the add multiplies by the
    slice's scales, loaded ``LEAD`` slices ahead (``WgmmaConfig.scale_lead``). (Two slices an
    add: ``make_grouped_mainloop``.)"""
    advance = _advancer(S)
    release = _releaser(CL)
    P = NACC // PARTS
    TURN = promoted_turn(BLOCK is not None, CL)
    add = _promoter(NACC)
    if BLOCK is not None:
        load_scales, add_scaled_one = _block_scaler(*BLOCK, NACC)
        add_scaled = unrolled(add_scaled_one, 128)

    @device
    def finish(h, pacc, sc, bn0, lane, empty):
        """Part h's group done (the stage released after the last part's), its sum added."""
        wgmma_wait(0)
        if h == PARTS - 1 and lane == 0:
            release(empty)
        if BLOCK is not None:
            add_scaled(P, pacc, sc, bn0 & 127 if PARTS == 1 else 0, lane, h * P)   # (halves: bn0 % 256 == 0)
        else:
            add(P, pacc, h * P)

    @device
    def step(pacc, sbase, bars, s, ph, t, ktiles, a_row0, lane, k0, row, bn0, ep, sc, later):
        """Slice t; with block scales ``sc`` are its scales (``later``: the next slice's, with a
        LEAD of 2), and those LEAD slices ahead are loaded while its wgmma runs (returned)."""
        stage = sbase + s * STAGE
        mbar_wait(bars + 8 * s, ph)
        issue(pacc, stage, a_row0, 0, 0)
        nxt = sc
        if BLOCK is None:
            s1, ph1 = advance(s, ph)    # (per-tensor before the add, block-wise after: each as measured;
                                        # block-wise lost 4% with it before, session 33)
        else:
            nxt = load_scales(k0 + min(t + LEAD, ktiles - 1), row, bn0, lane, ep)
        finish(0, pacc, sc, bn0, lane, bars + 8 * (S + s))
        if PARTS > 1:
            issue(pacc, stage, a_row0, 2 * P, 0)
            finish(1, pacc, sc, bn0, lane, bars + 8 * (S + s))
        if BLOCK is not None:
            s1, ph1 = advance(s, ph)
        return s1, ph1, later if LEAD == 2 else nxt, nxt

    @device
    def mainloop(pacc, sbase, bars, s, ph, ktiles, a_row0, lane, k0, row, bn0, ep):
        zero = float32(0)
        sc = later = (zero, zero, zero, zero)
        if BLOCK is not None:
            sc = later = load_scales(k0, row, bn0, lane, ep)
            if LEAD == 2:
                later = load_scales(k0 + min(1, ktiles - 1), row, bn0, lane, ep)
        t = 0
        while t < ktiles:
            s, ph, sc, later = step(pacc, sbase, bars, s, ph, t, ktiles, a_row0, lane, k0, row, bn0, ep, sc, later)
            t += 1
            if TURN > 1 and t < ktiles:
                s, ph, sc, later = step(pacc, sbase, bars, s, ph, t, ktiles, a_row0, lane, k0, row, bn0, ep, sc,
                                        later)
                t += 1
            if TURN > 2 and t < ktiles:
                s, ph, sc, later = step(pacc, sbase, bars, s, ph, t, ktiles, a_row0, lane, k0, row, bn0, ep, sc,
                                        later)
                t += 1
                if t < ktiles:
                    s, ph, sc, later = step(pacc, sbase, bars, s, ph, t, ktiles, a_row0, lane, k0, row, bn0, ep,
                                            sc, later)
                    t += 1
        return s, ph
    return mainloop


@lru_cache(maxsize=None)
def make_grouped_mainloop(issue, S, STAGE, CL, NACC, EVERY):
    """``make_promoted_mainloop``'s per-tensor loop with EVERY slices summed before each add
    (``WgmmaConfig.promote_every``: fewer drains of the consumer's wgmma), the second consumer's
    groups a slice after the first's, so that one's add falls while the other's wgmma runs. A
    group holds its stages until its add."""
    if EVERY != 2:
        raise ValueError(f"EVERY={EVERY}: the grouped loop's turn is two groups of two slices")
    release = _releaser(CL)
    add = _promoter(NACC)

    @device
    def issue_one(j, pacc, sbase, bars, s, ph, a_row0):
        i = s + j - (S if s + j >= S else 0)
        mbar_wait(bars + 8 * i, ph ^ (1 if s + j >= S else 0))
        issue(pacc, sbase + i * STAGE, a_row0, 0, 0 if j == 0 else 1)
    issue_n = unrolled(issue_one, 4)

    @device
    def group(n, pacc, sbase, bars, s, ph, a_row0, lane):
        """n slices from stage s (n a constant after inlining) summed as one group, then added."""
        issue_n(n, pacc, sbase, bars, s, ph, a_row0)
        wgmma_wait(0)
        if lane == 0:
            for j in range(n):
                release(bars + 8 * (S + (s + j) % S))
        add(NACC, pacc, 0)
        if s + n >= S:
            return s + n - S, ph ^ 1
        return s + n, ph

    @device
    def mainloop_groups(pacc, sbase, bars, s, ph, ktiles, a_row0, lane, k0, row, bn0, ep):
        """Per-tensor, EVERY slices a group, in turns of 4 slices (the second consumer's first
        group a slice); the K left over, a slice a group."""
        t = 0
        if a_row0 != 0 and ktiles > 0:
            s, ph = group(1, pacc, sbase, bars, s, ph, a_row0, lane)
            t = 1
        while t + 4 <= ktiles:
            s, ph = group(EVERY, pacc, sbase, bars, s, ph, a_row0, lane)
            if EVERY == 2:
                s, ph = group(EVERY, pacc, sbase, bars, s, ph, a_row0, lane)
            t += 4
        while t < ktiles:
            s, ph = group(1, pacc, sbase, bars, s, ph, a_row0, lane)
            t += 1
        return s, ph
    return mainloop_groups


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
def _stager(MI, BN, OUT_ITEM, EB, EPI_OFF, PER_CONS, WG_M, SLOT_IDX, LEAD, NACC=0, HELD=0, SOURCE=(4, 0, 2),
            SPREAD=False):
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
    ``out_box(buf0, t)``: where C's box t is staged with EB = 0 (else None). ``EPI_OFF``: the
    output boxes' offset from the ring's base, PER_CONS bytes per consumer; ``SLOT_IDX``: the
    indices in ``ep`` of M, N, the array's address and its row stride, and the bytes of that
    stride's unit (a user array's is in bytes, c's ldc in elements)."""
    ITEM, KIND, NSLOT = SOURCE
    COLS, NBOX, NB, SLOT, CH, JJ = _source_geometry(MI, BN, OUT_ITEM, ITEM)
    NSLOT = min(NSLOT, NB)                          # (a warp's slots: its share of epi_source)
    HOLD = HELD > 0
    ALL = NSLOT >= NB                               # every box in a slot of its own: no refills
    OUT_SLOTS = EB == 0                             # C's boxes staged in the array's slots
    if not (ALL or NSLOT == 2) or (OUT_SLOTS and not (ALL and ITEM == OUT_ITEM)):
        raise ValueError(f"{NSLOT} slots of {NB} boxes (2, or one a box: C's boxes staged there, EB = 0, "
                         "where the array's elements are C's size)")
    copy, copies_in, holds_in, CU, HU = _source_reads(MI, BN, OUT_ITEM, SLOT_IDX, NACC, HELD, ITEM, NSLOT)

    @device
    def source(buf0, tw):
        return buf0 + EB * layout.OUT_BOX_BYTES + layout.source_warp(tw >> 5, SLOT, NSLOT, NB)

    @device
    def out_box(buf0, t):
        # box t of C where the array's box t was read (every lane of the consumer has: the named
        # barrier after ``apply_box(t)``)
        return buf0 + EB * layout.OUT_BOX_BYTES + layout.source_box(t, SLOT, NSLOT, NB)

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
    slots, u = epi.slots(), epi.staged()            # (c's row stride is in elements, a user array's in bytes)
    nb = _staged_boxes(cfg, out_dtype)
    nslot = nb if cfg.epi_source >= staged_bytes(cfg, out_dtype, dt, nb) else 2     # (every box, or refills)
    return _stager(cfg.wg_m // 64, cfg.bn, layout.ITEMSIZE[out_dtype], cfg.epi_boxes, cfg.stages * cfg.stage_bytes,
                   cfg.epi_boxes * layout.OUT_BOX_BYTES + cfg.epi_source, cfg.wg_m,
                   (slots.index("M"), slots.index("N"), slots.index(u),
                    slots.index("ldc" if u == "c" else f"{u}_stride0"), layout.ITEMSIZE[dt] if u == "c" else 1),
                   cfg.epi_lead, cfg.local_regs - cfg.epi_held, cfg.epi_held,
                   (layout.ITEMSIZE[dt], LOAD_KIND[dt], nslot), cfg.epi_spread)


@lru_cache(maxsize=None)
def _box_store(MI, BN, OUT_ITEM, OUT_K, EB, EPI, BATCH=False, STAGER=None):
    """``store_box(t, acc, tmc, buf0, nbox, row0, col0, tw, lane, bar, ep, z, erow0)``: output box
    t of MI x NBOX of a warpgroup (m64 block t // NBOX, 128-byte column block t % NBOX):
    registers -> shared box (a ring of EB from ``buf0``) -> one TMA store (into matrix z of C's
    3-D map, with BATCH), which clips at C's edges. The epilogue on box t + 1 comes first, in the
    same straight-line code as box t's shared-memory stores, so that its loads are in flight
    while they go out. ``row0``: this warp's first row of C (``erow0``: the row the epilogue
    sees, which counts across a batched product's matrices); ``bar``: the warpgroup's named
    barrier. With ``STAGER`` (``_stager``'s), EPI takes the staged array's element, read from
    the warp's slot."""
    COLS = layout.ROW_BYTES // OUT_ITEM            # columns of one 128-byte output box
    NBOX = BN // COLS
    NB = MI * NBOX
    HAS_STAGE = STAGER is not None                 # (device code reads a bool, not the tuple)
    OUT_SLOTS = HAS_STAGE and STAGER[5] is not None
    if HAS_STAGE:
        ready, refill, read, source, out_box = STAGER[1:]

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
    stage_frags = unrolled(stage_frag, 8)

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
def make_epilogue_part(MI, BN, out_dtype, vc, TMA_C, EB, epi, BATCH=False, TRANS=False, SRC=0, STAGER=None):
    """Epilogue: ``(store, drain)``. ``store(acc, C, tmc, ebase, nbox, row0, bn0, ldc, M, N, wg,
    tw, lane, ep, z)``: a warpgroup's accumulators (MI m64 blocks of BN columns; this warp's rows
    from ``row0``) through the epilogue function of ``epi`` (``epilogue.make``), then to C through
    shared memory and TMA stores (with TMA_C: a ring of EB boxes per consumer from ``ebase``,
    ``_box_store``; with BATCH into matrix z, the epilogue seeing row z * M + row) or straight
    from registers (``fragments.make_store_out``; ``vc``: C's column pairs are aligned; TRANS: the
    accumulators are of C's transpose, a swapped product's). Returns the count of boxes this
    consumer has stored. ``drain(tw)``: the last boxes are out (before the block ends). With
    ``STAGER`` (``_stager``'s; TMA_C), the epilogue's staged array is read from each consumer's
    SRC bytes after its output boxes."""
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], layout.ITEMSIZE[out_dtype]
    NI = BN // 8
    EPI = make_epilogue(epi, STAGER is not None)
    PER_CONS = EB * layout.OUT_BOX_BYTES + SRC
    if BATCH and not TMA_C:
        raise ValueError("a batched kernel stores C by TMA")
    if TRANS and TMA_C:
        raise ValueError("C's transpose is stored from registers")
    if STAGER is not None and not TMA_C:
        raise ValueError("a staged epilogue array is read by the epilogue through shared memory")
    if TMA_C:
        store_boxes, NB = _box_store(MI, BN, OUT_ITEM, OUT_K, EB, EPI, BATCH, STAGER)

        @device
        def store(acc, C, tmc, ebase, nbox, row0, bn0, ldc, M, N, wg, tw, lane, ep, z):
            store_boxes(NB, acc, tmc, ebase + wg * PER_CONS, nbox, row0, bn0, tw, lane,
                        1 + wg, ep, z, row0 + (z * M if BATCH else 0))
            return nbox + NB

        @device
        def drain(tw):
            if tw == 0:
                tma_store_wait_all()
        return store, drain

    store_out = make_store_out(MI * NI, NI, 64, OUT_ITEM, OUT_K, vc, min(8, MI * NI), EPI, TRANS)

    @device
    def store(acc, C, tmc, ebase, nbox, row0, bn0, ldc, M, N, wg, tw, lane, ep, z):
        store_out(C, ldc, M, N, acc, row0, bn0, lane, ep)
        return nbox

    @device
    def drain(tw):
        pass
    return store, drain


@lru_cache(maxsize=None)
def _skipper(S):
    """``skip(s, ph, n)``: the ring position n stages after (s, ph), the other consumer's tile's
    slices passed over (``make_consumer``'s PING)."""
    @device
    def skip(s, ph, n):
        t = s + n
        return t % S, ph ^ ((t // S) & 1)
    return skip


@lru_cache(maxsize=None)
def make_consumer(walk_unit, mainloop, store, drain, NACC, WG_M, PLANE, TRANS=False, part=None, BM=0, BN=0, CL=1,
                  S=1, PING=False):
    """A consumer warpgroup: ``consumer(acc, pacc, C, tmc, sbase, ebase, bars, w, ldc, M, N, wg,
    tid, ep, P)``: for each unit of walk ``w``, the mainloop, then the epilogue (``store``, then
    ``drain`` once at the end). A split-K unit writes its partial sum to plane s of C, PLANE
    bytes per element of M x ldc (N x ldc where the kernel's product is C's transpose, TRANS;
    ``fixup`` adds the planes); a batched one, to matrix s. With ``part`` (a tail-split kernel,
    ``make_scheduler``'s TAIL), a split unit (s >= 0) writes its partial sum with ``part``
    (``fragments.make_store_out``, fp32) to block s at P, CL * BM x BN floats of its cluster's
    tiles (``fixup.tail_fixup_kernel`` adds them); a whole tile goes to C by ``store``. With
    PING (``WgmmaConfig.pingpong``), consumer wg takes units wg, wg + 2, ... of the walk, each a
    whole tile, and passes over the other's slices in the ring (of S stages); its mainloop runs
    while the other's epilogue does. The mainloops take turns (CUTLASS's ordered math barrier):
    one starts once the other's, of the unit before, has waited on all its stages, so that a
    stage's full barrier is never waited on two phases ahead (a parity wait could not tell)."""
    skip = _skipper(S)

    @device
    def consumer(acc, pacc, C, tmc, sbase, ebase, bars, w, ldc, M, N, wg, tid, ep, P):
        tw = tid & 127
        lane = tid & 31
        a_row0 = 0 if PING else wg * WG_M                 # this consumer's rows of the A tile
        m_warp = a_row0 + 16 * ((tid >> 5) & 3)           # and this warp's rows of C
        s = 0
        ph = 0
        nbox = 0
        first, stride = w[0], w[1]
        if PING:
            first, stride = w[0] + wg * w[1], 2 * w[1]
            if wg == 1 and w[0] < w[2]:
                s, ph = skip(s, ph, walk_unit(w, w[0])[4])
        for u in range(first, w[2], stride):
            bm0, bn0, sp, k0, kn = walk_unit(w, u)
            for i in range(NACC):
                acc[i] = float32(0)
            if PING and u > w[0]:
                named_barrier(TURN_BAR + wg, 256)                 # the other's turn is over
            s, ph = mainloop(pacc, sbase, bars, s, ph, kn, a_row0, lane, k0, bm0 + m_warp, bn0, ep)
            if PING and u + w[1] < w[2]:
                named_barrier_arrive(TURN_BAR + 1 - wg, 256)      # the other's turn
            if part is None:
                nbox = store(acc, C + sp * ((N if TRANS else M) * ldc * PLANE), tmc, ebase, nbox, bm0 + m_warp, bn0,
                             ldc, M, N, wg, tw, lane, ep, sp)
            elif sp < 0:
                nbox = store(acc, C, tmc, ebase, nbox, bm0 + m_warp, bn0, ldc, M, N, wg, tw, lane, ep, 0)
            else:
                part(P + sp * (CL * BM * BN * 4), BN, CL * BM, BN, acc, w[6] * BM + m_warp, 0, lane, ep)
            if PING and u + w[1] < w[2]:
                s, ph = skip(s, ph, walk_unit(w, u + w[1])[4])
        drain(tw)
    return consumer


@lru_cache(maxsize=None)
def make_one_tile(produce, consume, store, BM, BN, BK, GROUP, WG_M, NACC, S, STAGE):
    """Rungs 1-2, before warp specialization: ``one_tile(acc, pacc, C, tma_a, tma_b, sbase, bars,
    grid_m, grid_n, ktiles, ldc, M, N, tid, ep)``: every warpgroup consumes one tile, thread 0
    keeps the ring full (``produce``), and the block synchronises once per K slice; ``store``: a
    register epilogue (``make_epilogue_part`` without TMA_C)."""
    advance = _advancer(S)

    @device
    def one_tile(acc, pacc, C, tma_a, tma_b, sbase, bars, grid_m, grid_n, ktiles, ldc, M, N, tid, ep):
        bm0, bn0 = tile_origin(cuda.blockIdx.x, grid_m, grid_n, GROUP, BM, BN)
        a_row0 = (tid >> 7) * WG_M
        for i in range(NACC):
            acc[i] = float32(0)
        if tid == 0:
            for s in range(S):
                if s < ktiles:
                    produce(tma_a, tma_b, sbase + s * STAGE, bars + 8 * s, bm0, bn0, s * BK, 0, 0, 0)
        s = 0
        ph = 0
        for t in range(ktiles):
            consume(pacc, sbase + s * STAGE, bars + 8 * s, ph, a_row0)
            wgmma_wait(0)
            cuda.syncthreads()                        # every warpgroup is done with stage s
            if tid == 0 and t + S < ktiles:
                produce(tma_a, tma_b, sbase + s * STAGE, bars + 8 * s, bm0, bn0, (t + S) * BK, 0, 0, 0)
            s, ph = advance(s, ph)
        store(acc, C, 0, 0, 0, bm0 + a_row0 + 16 * ((tid >> 5) & 3), bn0, ldc, M, N, 0, tid & 127, tid & 31, ep, 0)
    return one_tile


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


def _promoted_mainloop(cfg: WgmmaConfig, issue, epi, out_dtype: str, split: bool, S: int, STAGE: int, NACC: int):
    """The promoted mainloop a kernel of ``cfg`` runs: block-wise scales (``epi``) multiply each
    slice's add, loaded ``cfg.scale_lead`` slices ahead (one in a split-K kernel: two spilled the
    second set there); per-tensor into bf16, ``cfg.promote_every`` slices an add (into fp16 or fp32,
    whose rounding would show the longer sums' error, and in split-K partials: every slice)."""
    block = (cfg.bn, epi.slots().index("M")) if epi.scales == "block" else None
    if cfg.promote_every > 1 and block is None and out_dtype == "bfloat16":
        return make_grouped_mainloop(issue, S, STAGE, cfg.cluster, NACC, cfg.promote_every)
    return make_promoted_mainloop(issue, S, STAGE, cfg.cluster, NACC, cfg.bn // cfg.promote_n, block,
                                  1 if split else cfg.scale_lead)


@kernel_factory
def wgmma_kernel(cfg: WgmmaConfig, dtype: str, out_dtype: str, ta: bool, tb: bool, vc: bool,
                 tma_c: bool = False, epi=PLAIN, split: bool = False, batch: bool = False, dtype_b=None,
                 async_b: bool = False, trans_c: bool = False, tail: bool = False):
    """The Hopper kernel for one configuration, input type, output type and operand layout.
    vc: C's column pairs are aligned for paired stores; tma_c: C can be written by TMA (used when
    the configuration has ``tma_store``); split: split-K, each unit a tile's run of ``kper`` K
    slices, its fp32 partial sum written to its split's plane of C (M x ldc, planes
    M * ldc apart) without an epilogue (``fixup`` adds the planes, then applies it); batch: a
    batched product, every operand's tensor map 3-D (the batch last), a unit a tile of one
    batch's product; dtype_b: B's type where it is not A's (fp8: e4m3 times e5m2); async_b: an
    n-major tf32 B (which wgmma cannot read) copied k-major into each stage by the producer
    warpgroup's cp.async (``_async_loader``), from its address and pitch (no tensor map);
    trans_c: the kernel's M x N product is C's transpose (C = B^T A^T's operands swapped, so that
    an n-major tf32 B becomes an mn-major A, read through registers), stored from registers at
    C + (n ldc + m); tail: the tiles of the grid's last, partial round split along K (``kper``
    slices each), their fp32 partial sums written to blocks at P (``make_consumer``), the whole
    tiles before them (``WHOLE``) stored to C as usual."""
    if split and (out_dtype != "float32" or tma_c or epi not in (PLAIN, BLOCK_SCALES) or not cfg.persistent):
        raise ValueError("a split-K kernel is persistent and writes plain fp32 planes from registers "
                         "(block-wise scales applied)")
    if batch and (split or not (tma_c and cfg.tma_store) or not cfg.persistent or cfg.cluster > 1):
        raise ValueError("a batched kernel is persistent, without clusters or split-K, and stores C by TMA")
    if async_b and (dtype != "tf32" or tb or batch or cfg.promote or cfg.cluster > 1 or not cfg.producer
                    or not cfg.staged):
        raise ValueError("B by cp.async: an n-major tf32 B, in a kernel with a producer warpgroup and staged "
                         "stages, without clusters or batches")
    if trans_c and (tma_c or batch):
        raise ValueError("C's transpose is stored from registers, without batches")
    if tail and (split or batch or async_b or trans_c or cfg.promote or not cfg.persistent):
        raise ValueError("a tail-split kernel is persistent, of unpromoted whole tiles stored as they lie")
    BM, BN, S, CONS, CL = cfg.bm, cfg.bn, cfg.stages, cfg.consumers, cfg.cluster
    BK = cfg.k_slice(layout.ITEMSIZE[dtype])
    PRODUCER, (REG_P, REG_C), WG_M = cfg.producer, cfg.regs, cfg.wg_m
    MI, NACC, LOCAL = WG_M // 64, cfg.acc_regs, cfg.local_regs
    A_KM, B_KM = not ta, tb or async_b          # k-major (in shared memory): K contiguous
    A_BYTES, STAGE = BM * BK * layout.ITEMSIZE[dtype], cfg.stage_bytes
    EPI_BYTES = cfg.epilogue_bytes
    # the parts
    # empty: lane 0 of every warp of the cluster's consumers of a stage (ping-pong: one warpgroup's)
    init_ring = make_init_ring(S, (1 if cfg.pingpong else CONS) * 4 * CL, CL, async_b)
    consume = make_slice_mma(dtype, A_KM, B_KM, MI, BN, A_BYTES, dtype_b)
    walk, walk_unit = make_scheduler(BM, BN, cfg.group_m, CL, split, batch, tail)
    ITEM = layout.ITEMSIZE[dtype]
    producer = make_producer(walk_unit, make_load_stage(A_KM, B_KM, BM, BN, A_BYTES, cfg.tma_bytes, CL, batch, async_b,
                                                        ITEM),
                             S, STAGE, BK, make_finish_stage(BN, A_BYTES) if async_b else None)
    b_source = _b_source(async_b)
    stager = _kernel_stager(cfg, epi, out_dtype, tma_c and not (batch or split or trans_c or tail))
    store, drain = make_epilogue_part(MI, BN, out_dtype, vc, cfg.tma_store and tma_c, cfg.epi_boxes, epi, batch,
                                      trans_c, cfg.epi_source, stager)
    if cfg.promote:
        issue = make_slice_group(dtype, A_KM, B_KM, MI, cfg.promote_n, A_BYTES, dtype_b, NACC)
        mainloop = _promoted_mainloop(cfg, issue, epi, out_dtype, split, S, STAGE, NACC)
    else:
        mainloop = make_mainloop(consume, S, STAGE, CL, 4 if _regs_a(dtype, A_KM, B_KM) else 1,
                                 stager and stager[0], cfg.epi_lead, cfg.epi_spread)
    part = make_store_out(MI * (BN // 8), BN // 8, 64, 4, OUT_CONVERT["float32"], True, 8, make_epilogue(PLAIN)) \
        if tail else None
    consumer = make_consumer(walk_unit, mainloop, store, drain, NACC, WG_M,
                             layout.ITEMSIZE[out_dtype], trans_c, part, BM, BN, CL, S, cfg.pingpong)
    one_tile = make_one_tile(make_load_stage(A_KM, B_KM, BM, BN, A_BYTES, cfg.tma_bytes, 1, ITEM=ITEM), consume,
                             make_epilogue_part(MI, BN, out_dtype, vc, False, cfg.epi_boxes, epi, False, trans_c)[0],
                             BM, BN, BK, cfg.group_m, WG_M, NACC, S, STAGE)

    def wgmma_gemm(TMA_A, TMA_B, TMC, C, M, N, K, ldc, kper, batches, bmask, PB, LDB, P, WHOLE, ep):
        smem = cuda.shared.array(0, uint32)
        sbase = layout.align_up(smem_addr(ptr(smem)), layout.SWIZZLE_ALIGN)
        ebase = sbase + S * STAGE                         # output boxes (tma_store)
        bars = ebase + EPI_BYTES                          # the ring's mbarriers
        tid = cuda.threadIdx.x
        wg = tid >> 7
        init_ring(bars, TMA_A, TMA_B)
        grid_m = (M + BM - 1) // BM
        grid_n = (N + BN - 1) // BN
        ktiles = (K + BK - 1) // BK
        acc = cuda.local.array(LOCAL, float32)
        pacc = ptr(acc)
        if not PRODUCER:
            grid_dep_wait()                               # a copy before it done (launched as its dependent)
            one_tile(acc, pacc, C, TMA_A, TMA_B, sbase, bars, grid_m, grid_n, ktiles, ldc, M, N, tid, ep)
            return
        w = walk(grid_m, grid_n, ktiles, kper, batches, WHOLE)
        if wg == CONS:                                    # warpgroup CONS produces (one thread) ...
            if REG_P > 0:
                setmaxnreg_dec(REG_P)
            if async_b or tid == CONS * 128:               # (all of it with async_b)
                grid_dep_wait()                           # a copy before it done (launched as its dependent)
                producer(TMA_A, b_source(TMA_B, PB, LDB, N, K), sbase, bars, w, bmask)
        else:                                             # ... warpgroups 0..CONS-1 consume
            if REG_C > 0:
                setmaxnreg_inc(REG_C)
            consumer(acc, pacc, C, TMC, sbase, ebase, bars, w, ldc, M, N, wg, tid, ep, P)
        if CL > 1:
            cluster_sync()          # no CTA leaves while a peer may still multicast into it

    return kernel(wgmma_gemm, PARAMS, launch_bounds=(cfg.threads, cfg.min_blocks), values=len(epi.slots()))


# ---------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------
def _check(a, b, c):
    for name, x in (("a", a), ("b", b)):
        why = tma_requirements(x.ptr, x.ld, x.itemsize)
        if why:
            return f"operand {name} cannot be read by TMA: {why}"
    return None


# The cost model ``pick_config`` ranks (configuration, splits) by: the time of the slowest
# block (rounds of units, each its K slices plus a tile's fill and epilogue, at one SM's share
# of the measured peak, less for tiles that move more bytes per flop), or the bytes the units
# move over the memory bandwidth the busy SMs can draw, whichever is longer (and a part of the
# shorter: they do not overlap perfectly, so a decoding tile that wastes wgmma work on zero rows
# costs something even where memory bounds it); then, for a split, the fix-up pass (a launch, the
# planes read back, C written), which runs after the kernel. What it is for is the ranking, not
# the times: the constants are the H100's, calibrated on every candidate of 10 problems timed
# (benchmarks/results/tune_split_h100.json; benchmarks/NOTES.md, session 12).
PEAK_PER_SM = 790e12 / 132          # dense 16-bit FLOP/s of one SM (H100: 790 TFLOP/s measured)
HBM_BYTES_S = 3.0e12                # device memory bandwidth (H100: a large copy, read + write)
SM_SHARE = 2                        # one SM draws at most this many times its even share of it
FIXUP_S = 4e-6                      # the fix-up pass's launch and latency
MIN_SPLIT_SLICES = 4                # a split takes at least this many K slices
TIE = 0.95                          # a later choice must be estimated this much faster to win
OVERLAP = 0.3                       # the share of the shorter of math and memory time that shows
# 192x192's: 1.01 fits its A/B against the tiles it displaced (4096^3 c1 ~1.02, 2056x4104x3000 and
# 3000^3 ~1.01-1.02 with B multicast; results/ab_192_tiles_first_h100.log, ab_eff192_nn_h100.log).
# 64x128's efficiency: 0.535 fit the 1024^3 A/B (session 24) but put it behind 128x128 split-K
# where few rows are memory-bound; 0.75 keeps 1024^3 and measured faster on 24 of 27 such shapes
# (96x5120x5120 0.790 -> 0.930, 64x8192x8192 0.826 -> 0.981; results/ab_eff64x128*_h100.log).
TILE_EFFICIENCY = {(128, 256): 1.0, (128, 192): 0.95, (128, 128): 0.85, (64, 256): 0.8, (64, 128): 0.75,
                   (192, 192): 1.01}
# tf32 with an n-major B: the producer can copy it k-major by cp.async (``_async_loader``) instead
# of a transposing pass over B before the kernel (``repack.gather_kernel``). It copies and
# transposes at about ASYNC_RATE elements a second an SM (per tile; 256x128 at 4096^3: 0.51x
# cuBLAS, where the pass reads 0.89x; benchmarks/results/tf32_staged_ab_h100.log),
# and every block row of C copies B again; the pass moves each element once at HBM speed. So
# the producer copies where the product is bound by reading B (few rows: 1x8192x8192 0.97x
# against the pass's 0.33x), on tall tiles (one copy of B per 256 rows of C), where the cost
# model says it beats the pass by ASYNC_WIN, and B's rows are 16-byte aligned (its 16-byte
# copies; others take the pass). ``ASYNC_B`` False: always the pass (A/B runs).
ASYNC_B = True
ASYNC_RATE = {(256, 128): 3.2e9, (64, 256): 5.5e9}
ASYNC_WIN = 0.8
# tf32 with A mn-major: A read through registers (``_slice_group_regs_a``), and an n-major B
# with a k-major A swapped into that place (``_swaps``), instead of a transposing pass before the
# kernel (4096^3 NN: 0.997x cuBLAS TF32 against the pass's 0.897; results/ab_regs_a_h100.log).
# False: the pass (A/B runs). The producer's copy of B stays the choice for at most ASYNC_ROWS
# rows of A (its 64x256 tile copies B once): there it measured faster than the swapped product,
# past them slower (results/ab_async_vs_swap_h100.log).
REGS_A = True
ASYNC_ROWS = 64
# Both operands' rows 16 mod 32 bytes apart: the product's full rounds (B multicast) at this share
# of their speed with aligned rows, so the smaller operand may be copied first
# (``_slow_rows_copy``; ``SLOW_ROWS_COPY``: None, the model's choice; False, never; "a" or "b",
# that one always). Fit to the copy's gain and loss on four shapes, checked on six held out
# (benchmarks/NOTES.md, session 24; results/ab_slow_rows*_h100.log).
SLOW_BOTH = 0.86
SLOW_ROWS_COPY = None
# The tiles B multicast takes while A's rows load slowly too: there 128x192 tiles measured 4-5%
# slower than 128x256 ones where the model put them ahead (3000^3, 3000x3000x9000), and with A
# copied to fast rows 6-11% faster (2056x4104x3000, 4104^3; results/ab_c2_192_turn_h100.log).
SLOW_A_TILES = ((128, 256), (128, 128))
# Split only the tiles of the grid's last, partial round along K (a tail split: ``pick_tail``),
# where the rounds before it are whole: None, the cost model's choice; False, never; a number,
# that many splits wherever there is such a round (A/B runs, tests).
TAIL = None
# Decode (at most SWAP_ROWS rows of C, 16-bit, A row-major): C^T = B^T A^T on 64 x bn tiles
# (``SWAP_CONFIGS``, the narrowest bn >= M), so that N is the tile's 64-row side and C's few rows
# the wgmma's narrow width: N / 64 tiles where 64 x 128 ones give N / 128, and no rows of zeros
# through the tensor cores (cuBLAS's decode kernels are such 64x8 to 64x32 tiles:
# benchmarks/results/kernel_times_h100.log). Where the cost model ranks it faster by ``TIE``;
# ``SWAP``: None, the model's choice; False, never; True, wherever it may (A/B runs, tests).
# SWAP_ROWS: at 64 rows the swapped 64x64 tile lost to 64x128 on 5 of 6 shapes (an H200's
# results/tune_decode_h200.log). SWAP_FILL: ``swap_splits``' margin on how full the rounds are.
SWAP = None
SWAP_ROWS = 32
SWAP_FILL = 0.97
TAIL_TILES = ((128, 256), (128, 192))   # the tiles whose rounds are coarse enough to split
# What a tail split costs beyond its fix-up's launch and bytes: every SM busy in the whole rounds
# (a balanced grid without the split may leave some idle, and the rest run faster), the split
# round's partial sums stored from registers. Fit to the first A/B (results/ab_tail_first_h100.log:
# it lost at 2096x2096x3008, tied at 2304x4608x4096, won at 2048x5120x5120, 2560x2560x16384,
# 1280x5120x8192): 3 to 7 us keeps the wins and drops the others.
TAIL_S = 5e-6
# A user epilogue's float32 array of C's shape, read only at (row, col) (``Epilogue.staged``): the
# consumers copy its boxes into shared memory by cp.async, the first two during the tile's last
# K slices (``_stager``), for one output box each and a stage less (128x256: 3; measured as fast
# as 4 on plain products, benchmarks/results/ab_stages3_h100.log). False: never (A/B runs).
STAGED = True
STAGED_MIN = 3
STAGED_LEAD = WgmmaConfig.epi_lead
# ... and the boxes past its slots' two into registers (``held_registers``): at most STAGED_HOLD a
# thread (128x256 with a 16-bit C: 64 beside its 128 accumulators; 0: never), all the array's
# reads then spread over the tile's last HELD_LEAD slices, a piece with each (benchmarks/NOTES.md,
# session 31).
STAGED_HOLD = 64
HELD_LEAD = 16
HELD_PRODUCER_REGS = 24
HALVES = 0.925                      # a promoted tile added in halves waits twice a slice (fp8 128x256:
                                    # benchmarks/results/ab_fp8_halves_h100.log)


def split_counts(ktiles: int, most: int):
    """The K splits worth trying of ``ktiles`` slices: 1, then up to ``most`` with at least
    ``MIN_SPLIT_SLICES`` slices each, leaving out counts whose units a smaller one already makes
    (every split gets ``cdiv(ktiles, s)`` slices: 7 ways of 8 slices is 4 of 2)."""
    top = max(1, min(most, ktiles // MIN_SPLIT_SLICES))
    return [s for s in range(1, top + 1) if s == 1 or cdiv(ktiles, cdiv(ktiles, s)) == s]


def splittable(cfg: WgmmaConfig) -> bool:
    """Whether the planner may split K on ``cfg``: persistent tiles of one or two consumers. A
    192-row tile's split measured slower than the tiles it displaced on both shapes tried
    (2560x2560x16384, 1536x1536x8200: benchmarks/results/ab_eff192_aligned_h100.log)."""
    return cfg.persistent and cfg.consumers < 3


def split_units(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int):
    """(tiles, K slices per split, units) of a problem split ``splits`` ways along K (at most:
    every split gets at least one slice, so a few may merge)."""
    tiles = cdiv(cdiv(m, cfg.bm), cfg.cluster) * cfg.cluster * cdiv(n, cfg.bn)
    ktiles = max(1, cdiv(k, cfg.bk))
    kper = cdiv(ktiles, splits)
    return tiles, kper, tiles * cdiv(ktiles, kper)


def _slice_s(cfg: WgmmaConfig) -> float:
    """Seconds one SM takes for one K slice of a tile of ``cfg`` (the cost model's)."""
    eff = TILE_EFFICIENCY.get((cfg.bm, cfg.bn), 0.8) * (HALVES if cfg.promote and cfg.promote_n < cfg.bn else 1)
    return 2.0 * cfg.bm * cfg.bn * cfg.bk / (PEAK_PER_SM * eff)


def estimate(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, sms: int, out_bytes: int = 2) -> float:
    """Seconds the cost model gives a problem on ``cfg`` with ``splits`` K splits (see above)."""
    _, kper, units = split_units(cfg, m, n, k, splits)
    slots = sms * cfg.min_blocks
    slice_s = _slice_s(cfg)
    compute = cdiv(units, slots) * (kper + 2) * slice_s
    bandwidth = HBM_BYTES_S * min(1.0, SM_SHARE * min(units, slots) / sms)
    if splits == 1:
        return _overlap(compute, (2.0 * (m * k + k * n) + out_bytes * m * n) / bandwidth)
    planes = 4.0 * splits * m * n           # written by the kernel, read back by the fix-up
    fix = FIXUP_S + (planes + out_bytes * m * n) / HBM_BYTES_S
    return _overlap(compute, (2.0 * (m * k + k * n) + planes) / bandwidth) + fix


def tail_units(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, slots: int):
    """(whole tiles, the rest split, K slices per split, splits) of a tail split (``TAIL``): the
    whole rounds of ``slots`` blocks take whole tiles, the rest (fewer than ``slots``) are split
    ``splits`` ways along K (at most: every split gets a slice, and rest x splits <= slots)."""
    tiles = split_units(cfg, m, n, k, 1)[0]
    rest = tiles % slots
    ktiles = max(1, cdiv(k, cfg.bk))
    kper = cdiv(ktiles, max(1, min(splits, slots // max(rest, 1))))
    return tiles - rest, rest, kper, cdiv(ktiles, kper)


def estimate_tail(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, sms: int, out_bytes: int = 2) -> float:
    """Seconds the cost model gives a tail split: the whole rounds, one round of the split
    tiles' runs, then their fix-up (a launch, their partial sums read back, their tiles written)."""
    slots = sms * cfg.min_blocks
    whole, rest, kper, splits = tail_units(cfg, m, n, k, splits, slots)
    compute = (whole // slots * (cdiv(k, cfg.bk) + 2) + kper + 2) * _slice_s(cfg)
    parts = 4.0 * rest * splits * cfg.bm * cfg.bn
    fix = FIXUP_S + TAIL_S + (parts + out_bytes * rest * cfg.bm * cfg.bn) / HBM_BYTES_S
    return _overlap(compute, (2.0 * (m * k + k * n) + out_bytes * m * n + parts) / HBM_BYTES_S) + fix


def pick_tail(cfgs, m: int, n: int, k: int, sms: int, than: float, out_bytes: int = 2):
    """(configuration, splits) of the tail split (``TAIL``) the cost model ranks fastest, if
    faster than ``than`` seconds (the best without it) by more than its noise (``TIE``), else
    None: of the persistent tiles of ``TAIL_TILES`` without clusters whose tiles fill whole rounds and leave a
    partial one, and of 2 up to as many splits as fit that round (at least ``MIN_SPLIT_SLICES``
    slices each). ``TAIL``: False, never; a number, that many splits on the first of ``cfgs``
    that has such a round."""
    best = None
    for cfg in cfgs:
        if (cfg.bm, cfg.bn) not in TAIL_TILES or cfg.cluster > 1 or not cfg.persistent or cfg.promote or TAIL is False:
            continue
        slots = sms * cfg.min_blocks
        whole, rest, _, _ = tail_units(cfg, m, n, k, 1, slots)
        if not whole or not rest:
            continue
        if TAIL is not None:
            return (cfg, TAIL) if tail_units(cfg, m, n, k, TAIL, slots)[3] > 1 else None
        for s in range(2, slots // rest + 1):
            if cdiv(cdiv(k, cfg.bk), s) < MIN_SPLIT_SLICES:
                break
            t = estimate_tail(cfg, m, n, k, s, sms, out_bytes)
            if t < TIE * (best[0] if best else than):
                best = (t, cfg, s)
    return best and best[1:]


def _overlap(compute: float, memory: float) -> float:
    """Math and memory traffic overlap, but not perfectly (``OVERLAP`` of the shorter shows)."""
    return max(compute, memory) + OVERLAP * min(compute, memory)


def pick_config(cfgs, m: int, n: int, k: int, slow_b: bool, sms: int, split: bool = True, out_bytes: int = 2,
                cost=None, slow_a: bool = False):
    """(configuration, splits) for one problem: of the configurations that multicast B (cluster
    > 1) if B's rows load slowly (``slow_b``, see ``tensormap.tma_rows_fast``; with A's rows slow
    too, ``slow_a``, only those of ``SLOW_A_TILES``), else of those
    that do not, and of 1 to ``sms`` K splits (at least ``MIN_SPLIT_SLICES`` slices each; only
    1 unless ``split``), the pair ``estimate`` (or ``cost``, of the same arguments) ranks
    fastest, the earlier configuration and the
    fewer splits unless another is faster by more than the model's noise (``TIE``). It keeps
    the measured choices from before split-K: 1024^3 takes 128x128 tiles (188 vs 132 TFLOP/s
    with 128x256), 2048^3 128x256 (626 vs 609)."""
    pool = [c for c in cfgs if (c.cluster > 1) == slow_b
            and not (slow_a and c.cluster > 1 and (c.bm, c.bn) not in SLOW_A_TILES)] or list(cfgs)
    best = None
    for cfg in pool:
        ktiles = max(1, cdiv(k, cfg.bk))
        for s in split_counts(ktiles, sms if split and splittable(cfg) else 1):
            t = (cost or estimate)(cfg, m, n, k, s, sms, out_bytes)
            if best is None or t < TIE * best[0]:
                best = (t, cfg, s)
    return best[1], best[2]


def operand_maps(cfg: WgmmaConfig, a, b):
    """The tensor-map arguments of A and B but their addresses, ``(dtype, cols, rows, ld,
    box_cols, box_rows)`` for ``tensormap.encode``: a k-major operand in boxes of [rows][bk], an
    mn-major one in boxes of [bk][64 mn] (``layout.BOX_BYTES``)."""
    bk = cfg.k_slice(a.itemsize)
    da, db = compute_dtype(a.dtype), compute_dtype(b.dtype)
    if not a.trans:     # A row-major: M rows of K
        ma = (da, a.cols, a.rows, a.ld, bk, cfg.bm)
    else:               # A column-major: K rows of M, one 128-byte swizzled row of M per box row
        ma = (da, a.rows, a.cols, a.ld, layout.ROW_BYTES // a.itemsize, bk)
    if b.trans:         # B column-major: N rows of K (each CTA of a cluster loads 1/cluster of them)
        mb = (db, b.rows, b.cols, b.ld, bk, cfg.bn // cfg.cluster)
    else:               # B row-major: K rows of N
        mb = (db, b.cols, b.rows, b.ld, layout.ROW_BYTES // b.itemsize, bk)
    return ma, mb


def output_map(cfg: WgmmaConfig, c):
    """C's tensor-map arguments but its address for the TMA-store epilogue (boxes of 64 rows x
    128 bytes, 128B swizzle, clipped at C's edges), or None when this rung does not store by
    TMA or C's rows are not aligned for it."""
    if not cfg.tma_store or tma_requirements(c.ptr, c.ld, c.itemsize):
        return None
    return (c.dtype, c.cols, c.rows, c.ld, 128 // c.itemsize, 64)


def _staged_boxes(cfg: WgmmaConfig, out_dtype: str) -> int:
    """Output boxes of a consumer of ``cfg`` (``_source_geometry``'s NB)."""
    return _source_geometry(cfg.wg_m // 64, cfg.bn, layout.ITEMSIZE[out_dtype])[2]


def staged_bytes(cfg: WgmmaConfig, out_dtype: str, dtype: str = "float32", slots: int = 2) -> int:
    """Shared memory a consumer's warps stage an epilogue array of ``dtype`` in (``_stager``):
    ``slots`` slots each of 16 rows x an output box's columns."""
    return layout.SOURCE_WARPS * slots * layout.SOURCE_ROWS * (layout.ROW_BYTES // layout.ITEMSIZE[out_dtype]) * \
        layout.ITEMSIZE[dtype]


def held_registers(cfg: WgmmaConfig, out_dtype: str) -> int:
    """Registers a consumer thread of ``cfg`` needs to hold a staged float32 array's boxes past
    the two its warp's slots take (``_stager``), or 0 where that is more than ``STAGED_HOLD`` or
    the tile is not two consumers' without a cluster (others spilled: a producer's multicast
    needs more registers than it could spare, a lone consumer's written-out tail more)."""
    _, _, nb, _, _, jj = _source_geometry(cfg.wg_m // 64, cfg.bn, layout.ITEMSIZE[out_dtype])
    held = max(nb - 2, 0) * 4 * jj                  # (n8 blocks: two column pairs of four rows a lane)
    return held if held <= STAGED_HOLD and cfg.cluster == 1 and cfg.consumers == 2 and cfg.regs[1] else 0


def staged_config(cfg: WgmmaConfig, epi, out_dtype: str) -> WgmmaConfig:
    """``cfg`` with shared memory to stage ``epi``'s array in (``Epilogue.staged``, ``_stager``)
    and one output box per consumer, where it has such an array, the kernel stores whole tiles
    by TMA and at least ``STAGED_MIN`` stages are left; else ``cfg`` (so too for ping-pong
    tiles: staged there, the residual measured slower, benchmarks/NOTES.md, session 30). A 16-bit
    array takes a slot for every box where that leaves the stages, copied over the tile's last
    ``HELD_LEAD`` slices. Of a float32 one the slots take two boxes; where the rest fits registers
    (``held_registers``), they hold it, loaded with the slots' copies over those slices."""
    if not STAGED or epi.staged() is None or not (cfg.tma_store and cfg.persistent) or cfg.promote or cfg.pingpong:
        return cfg
    dt, nb = epi.staged_dtype(), _staged_boxes(cfg, out_dtype)
    if dt != "float32":
        # a 16-bit array's every box fits where a float32 one's two do (128x256, a 16-bit C);
        # with nothing held, every tile's written-out tail compiles without a spill; a 16-bit
        # C's boxes are staged where the array's were read (no output ring of their own)
        new = cfg.replace(epi_boxes=0 if layout.ITEMSIZE[dt] == layout.ITEMSIZE[out_dtype] else 1,
                          epi_source=staged_bytes(cfg, out_dtype, dt, nb), epi_lead=HELD_LEAD, epi_spread=True)
        if new.stages >= STAGED_MIN:
            return new
    new = cfg.replace(epi_boxes=1, epi_source=staged_bytes(cfg, out_dtype, dt), epi_lead=STAGED_LEAD)
    if new.stages < STAGED_MIN:
        return cfg
    held = held_registers(new, out_dtype) if dt == "float32" else 0
    # the consumers take all the registers the producer can spare (its one thread's TMA loop
    # compiles to HELD_PRODUCER_REGS without a spill): at 232, a 128x256 tile's epilogue with
    # the held registers spilled
    regs = (HELD_PRODUCER_REGS, (new.block_registers // WARPGROUP - HELD_PRODUCER_REGS) // new.consumers // 8 * 8)
    if not held or regs[1] < new.local_regs + held + 24:
        return new
    return new.replace(epi_held=held, regs=(regs[0], min(256, regs[1])), epi_lead=HELD_LEAD, epi_spread=True)


def work_plan(cfg: WgmmaConfig, units: int, resident: int) -> int:
    """The blocks to launch for ``units`` units (tiles, or tiles x splits). Not persistent: one
    block per unit (``units`` counts whole clusters' tiles). Persistent: of the ``resident``
    blocks that fit at once, as many whole clusters as take the units in the fewest rounds, each
    the same number of units (``schedule.balanced_workers``)."""
    cl = cfg.cluster
    if not cfg.persistent:
        return units
    return balanced_workers(units // cl, resident // cl) * cl


_NO_MAP = bytes(MAP_BYTES)


def _lines(x):
    """(lines, width) of an operand as stored: rows of a row-major one, columns of a column-major one."""
    return (x.cols, x.rows) if x.trans else (x.rows, x.cols)


def _repack_step(x, which: int, region: int, dev, total: int):
    """The step copying operand ``which`` (0: a, 1: b) to ``region`` of the scratch, and the
    operand as the kernel then reads it there."""
    from . import driver
    lines, width = _lines(x)
    ld = repack.pitch(width, x.dtype)
    k = repack.repack_kernel(x.dtype, repack.chunks_ok(x.ptr, x.ld, width, x.itemsize))

    def args(ws, pa, pb, pc, *ep):
        return ((pa, pb)[which], ws + region, lines, width, x.ld, ld)
    step = Step(k, repack.grid(lines, width), repack.THREADS, args, fn=driver.load(k, dev), workspace=total,
                label=f"repack {'ab'[which]}")
    return step, replace(x, ld=ld, ptr=0)


def _kmajor(x, which: int):
    """(lines, K, s_i, s_j) of operand ``which`` (0: a, 1: b) read k-major: A's rows or B's
    columns, each K long; element j of line i is element ``i * s_i + j * s_j`` of ``x`` as stored."""
    if which == 0:
        return x.rows, x.cols, *((1, x.ld) if x.trans else (x.ld, 1))
    return x.cols, x.rows, *((x.ld, 1) if x.trans else (1, x.ld))


def _needs_kmajor_copy(x, which: int, kdt: str) -> bool:
    """An 8-bit or 32-bit (tf32) operand is copied when it is not k-major (wgmma reads it no
    other way from shared memory; but a tf32 A is read through registers, ``_slice_group_regs_a``)
    or TMA cannot read it."""
    mn_ok = which == 0 and kdt == "tf32" and REGS_A
    return (x.trans != (which == 1) and not mn_ok) or bool(tma_requirements(x.ptr, x.ld, x.itemsize))


def _swaps(kdt: str, a, b) -> bool:
    """Whether a tf32 product with A k-major and B n-major (both rows TMA can read) runs as
    C^T = B^T A^T: B^T is then an mn-major A, read through registers, A^T a k-major B, and the
    kernel stores C's transpose (``wgmma_kernel``'s ``trans_c``), where otherwise B would be
    transposed by a pass before the kernel."""
    return (kdt == "tf32" and REGS_A and not a.trans and not b.trans
            and not any(tma_requirements(x.ptr, x.ld, x.itemsize) for x in (a, b)))


def _gather_step(x, which: int, region: int, dev, total: int):
    """The step copying 8-bit or 32-bit operand ``which`` k-major to ``region`` of the scratch
    (transposing it if it is mn-major), and the operand as the kernel then reads it there."""
    from . import driver
    lines, width, s_i, s_j = _kmajor(x, which)
    ld = repack.pitch(width, x.dtype)
    trans = s_i == 1 and s_j != 1           # (a copy that does not transpose is one of rows TMA cannot
    k = repack.gather_kernel(trans, x.itemsize, trans and repack.vector_ok(x.ptr, s_j, x.itemsize))   # read)

    def args(ws, pa, pb, pc, *ep):
        return ((pa, pb)[which], ws + region, lines, width, s_i, s_j, ld)
    step = Step(k, repack.grid_tiles(lines, width, x.itemsize), repack.THREADS, args, fn=driver.load(k, dev), workspace=total,
                label=f"{'transpose' if x.trans != (which == 1) else 'repack'} {'ab'[which]}")
    return step, replace(x, ld=ld, ptr=0, trans=which == 1)


def estimate_async_b(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, sms: int, out_bytes: int = 2) -> float:
    """``estimate`` of a product whose n-major tf32 B the producer copies: at least its rounds of
    copies (a unit's slices of B at ``ASYNC_RATE`` an SM, two more for the ring's fill as
    ``estimate`` counts them, and a split's fix-up), which more splits spread over more SMs."""
    _, kper, units = split_units(cfg, m, n, k, splits)
    copies = cdiv(units, sms) * (kper + 2) * cfg.k_slice(4) * cfg.bn / ASYNC_RATE[cfg.bm, cfg.bn]
    return max(estimate(cfg, m, n, k, splits, sms, out_bytes), copies + FIXUP_S * (splits > 1))


def _slow_rows_copy(pool, a, b, m: int, n: int, keq: int, sms: int, split: bool, out_bytes: int):
    """[copy A, copy B] for two operands TMA reads slowly (rows 16 mod 32 bytes apart, see
    ``tensormap.tma_rows_fast``): the smaller copied first to a pitch of whole 128-byte rows,
    at HBM speed (``repack.chunks_ok``), where that pass (a launch, the bytes read and written)
    costs less than it saves by the cost model: the rounds that keep every SM loading at
    ``SLOW_BOTH`` of their speed (B multicast; a last, partial round loses nothing measurable),
    and the tile the product can take once one operand's rows are fast (``SLOW_A_TILES``).
    ``SLOW_ROWS_COPY`` overrides the model for A/B runs."""
    never = [False, False]
    if SLOW_ROWS_COPY is False or tma_rows_fast(a.ptr, a.ld, a.itemsize) or tma_rows_fast(b.ptr, b.ld, b.itemsize):
        return never
    lines = [_lines(x) for x in (a, b)]
    size = [rows * width * x.itemsize for (rows, width), x in zip(lines, (a, b))]
    which = {"a": 0, "b": 1}.get(SLOW_ROWS_COPY, int(size[1] < size[0]))
    x = (a, b)[which]
    if not repack.chunks_ok(x.ptr, x.ld, lines[which][1], x.itemsize):
        return never
    cfg, s = pick_config(pool, m, n, keq, True, sms, split, out_bytes, slow_a=True)
    units, slots = split_units(cfg, m, n, keq, s)[2], sms * cfg.min_blocks
    full = units // slots / cdiv(units, slots)      # the share of rounds that fill every SM
    before = (1 + (1 / SLOW_BOTH - 1) * full) * estimate(cfg, m, n, keq, s, sms, out_bytes)
    cfg, s = pick_config(pool, m, n, keq, which == 0, sms, split, out_bytes)     # B still slow if A is copied
    after = estimate(cfg, m, n, keq, s, sms, out_bytes)
    if SLOW_ROWS_COPY is None and FIXUP_S + 2 * size[which] / HBM_BYTES_S > before - after:
        return never
    return [which == 0, which == 1]


def swap_splits(cfg: WgmmaConfig, m: int, n: int, k: int, slots: int) -> int:
    """K splits of a swapped decode product (``SWAP``; its M and N as the kernel sees them): the
    fewest whose units fill the grid's rounds within ``SWAP_FILL`` of the best filling (up to
    4 rounds, at least ``MIN_SPLIT_SLICES`` slices each). Such a stream reads B at about an
    SM's share of HBM per unit, so a short last round runs at the few SMs' speed and a split's
    fix-up costs little (few rows); measured on the H100 over 18 shapes, the best or within 2%
    of it on all but one (results/tune_swap_h100.log)."""
    tiles, fills = split_units(cfg, m, n, k, 1)[0], []
    for s in split_counts(max(1, cdiv(k, cfg.bk)), 4 * slots // tiles):
        units = tiles * s
        fills.append((units / (cdiv(units, slots) * slots), s))
    top = max(f for f, _ in fills)
    return next(s for f, s in fills if f >= SWAP_FILL * top)


def _narrow_swap(pool, a, b, m: int, n: int, keq: int, sms: int, out_bytes: int, forced=None):
    """(tile, splits) of the swapped decode product (``SWAP``) for a 16-bit ``a`` and ``b``, or
    None: where A is row-major (A^T is then a k-major B), both are read by TMA as they are, B's
    rows fast, and the cost model ranks the swapped product (split by ``swap_splits``) faster
    than the best of ``pool``. ``forced`` (a variant's fixed tile and splits): those, where the
    tile is one of ``SWAP_CONFIGS``."""
    if forced:
        return forced if forced[0] in SWAP_CONFIGS else None
    if (SWAP is False or m > SWAP_ROWS or a.trans or not tma_rows_fast(b.ptr, b.ld, b.itemsize)
            or any(tma_requirements(x.ptr, x.ld, x.itemsize) for x in (a, b))):
        return None
    cfg = next(c for c in SWAP_CONFIGS if c.bn >= m)
    s = swap_splits(cfg, n, m, keq, sms * cfg.min_blocks)
    if SWAP:
        return cfg, s
    cp, sp = pick_config(pool, m, n, keq, False, sms, True, out_bytes)
    faster = estimate(cfg, n, m, keq, s, sms, out_bytes) < TIE * estimate(cp, m, n, keq, sp, sms, out_bytes)
    return (cfg, s) if faster else None


def _b_by_producer(pool, m: int, n: int, keq: int, sms: int, split: bool, out_bytes: int):
    """(whether the producer copies an n-major tf32 B, the configuration, the splits): the cost
    model's best time on ``ASYNC_CONFIGS`` with the copies (``estimate_async_b``) against a pass
    over B (a launch, as the fix-up's, and B read and written at HBM speed) plus its best time on
    ``pool``; the producer where it wins by ``ASYNC_WIN`` (see ``ASYNC_B``). ``keq``: the model's
    K (16-bit elements of the same bytes)."""
    ca, sa = pick_config(ASYNC_CONFIGS, m, n, keq, False, sms, split, out_bytes, estimate_async_b)
    cp, sp = pick_config(pool, m, n, keq, False, sms, split, out_bytes)
    t_async = estimate_async_b(ca, m, n, keq, sa, sms, out_bytes)
    t_pass = FIXUP_S + 4.0 * keq * n / HBM_BYTES_S + estimate(cp, m, n, keq, sp, sms, out_bytes)  # (a launch)
    return (True, ca, sa) if t_async < ASYNC_WIN * t_pass else (False, cp, sp)


def scaled_pool(cfgs, scales):
    """The configurations fp8 inputs with ``scales`` choose from: with block-wise ones, the tiles
    whose promoted columns fall in scale_b's 128-column blocks as a whole (no select per add)."""
    if scales == "block":
        return [c for c in cfgs if c.promote_n % 128 == 0] or list(cfgs)
    return list(cfgs)


def typed_pool(cfgs, kdt: str):
    """The configurations inputs computed as ``kdt`` choose from: 192-row tiles (three consumers)
    for 16-bit inputs only, the type they were measured on."""
    return [c for c in cfgs if c.consumers < 3 or kdt in _IN] or list(cfgs)


def _plan(*cfgs: WgmmaConfig, readable: bool = False, split: bool = False, splits=None, fp8_cfgs=()):
    """A rung's planner: its configuration (of several, with ``split``: and the K splits, the
    pair ``pick_config`` chooses for the problem), kernel, tensor maps and grid. ``readable``:
    operands TMA cannot read are first copied to scratch at a pitch it can (``repack``); a split
    adds the fix-up (``fixup``) after the kernel. ``splits``: this many (at most: every split
    gets a slice) on ``cfgs[0]``, a persistent configuration, instead of the model's choice (for
    tuning and A/B runs). ``fp8_cfgs``: the configurations fp8 inputs take instead (promoted)."""
    forced = splits
    if forced is not None and (forced < 1 or not cfgs[0].persistent):
        raise ValueError(f"splits={forced}: at least 1, on a persistent configuration (split-K units are "
                         "dealt out by the persistent grid)")

    def plan(a, b, c, dev, epi=PLAIN, resident=None, batch=None):
        """resident: blocks that run at once (default: as the GPU says; tests force few); batch:
        a batched product's ``batch.Batch`` (the top rung only; None where this kernel cannot
        take it: the caller then runs one product per batch)."""
        from . import driver
        kdt = compute_dtype(a.dtype)
        if batch is not None:
            ok = readable and kdt not in KMAJOR_ONLY
            return _batched_steps(cfgs, a, b, c, dev, epi, batch, resident) if ok else None
        m, n, kk = c.rows, c.cols, a.cols
        fp8 = a.dtype in layout.FP8
        pool = typed_pool(fp8_cfgs if fp8 and fp8_cfgs else cfgs, kdt)
        if fp8 and epi.scales is None:
            raise ValueError("fp8 inputs need their scales: gemm(a, b, scale_a=..., scale_b=...) (float32 "
                             "device arrays: one value each, or block-wise (M, K/128) and (K/128, N/128))")
        pool = scaled_pool(pool, epi.scales)
        # the cost model's K: 16-bit elements of the same bytes (a 128-byte slice's math takes as
        # long in every type: fp8 runs twice, tf32 half as many flops a clock as 16-bit)
        keq = cdiv(kk * a.itemsize, 2)
        kmajor = kdt in KMAJOR_ONLY
        cfg, splits = pool[0], forced or 1
        async_b = (ASYNC_B and kdt == "tf32" and not b.trans and repack.vector_ok(b.ptr, b.ld, 4)   # B n-major:
                   and (forced is None or cfg.staged)                    # the producer may copy it, unless
                   and not (forced is None and m > ASYNC_ROWS and _swaps(kdt, a, b)))   # A is swapped in
        chosen = async_b and forced is None
        if chosen:
            async_b, cfg, splits = _b_by_producer(pool, m, n, keq, driver.sm_count(dev), split, c.itemsize)
        mc, nc = m, n                          # C's shape (the kernel's is its transpose's if swapped)
        swap = not async_b and _swaps(kdt, a, b)
        narrow = (split and not swap and kdt in _IN        # a swapped decode tile and its splits
                  and _narrow_swap(pool, a, b, m, n, keq, driver.sm_count(dev), c.itemsize, forced and (cfg, splits)))
        if swap or narrow:                     # C^T = B^T A^T: A^T k-major (tf32: B^T through registers)
            a, b, m, n, swap = b.transposed(), a.transposed(), n, m, True
            cfg, splits = narrow or (cfg, splits)
        if kmajor:
            copy = [_needs_kmajor_copy(x, i, kdt) and not (i and async_b) for i, x in enumerate((a, b))]
        else:
            copy = [readable and bool(tma_requirements(x.ptr, x.ld, x.itemsize)) for x in (a, b)]
            if readable and (forced is None or SLOW_ROWS_COPY) and not any(copy):   # (A/B runs: forced tiles too)
                copy = _slow_rows_copy(pool, a, b, m, n, keq, driver.sm_count(dev), split, c.itemsize)
        tail = None
        if forced is None and (len(pool) > 1 or split) and (swap or not chosen) and not narrow:
            slow_b, slow_a = (not copy[i] and not tma_rows_fast(x.ptr, x.ld, x.itemsize) for i, x in ((1, b), (0, a)))
            cfg, splits = pick_config(pool, m, n, keq, slow_b, driver.sm_count(dev), split, c.itemsize, slow_a=slow_a)
            if split and splits == 1 and not slow_b and kdt in _IN and not swap:
                cfg, tail = _tail_plan([cfg, *pool], cfg, m, n, keq, driver.sm_count(dev), resident, c.itemsize)
        tiles, kper, units = split_units(cfg, m, n, keq, splits)
        splits = units // tiles                # as many as there are K slices for, at most
        kper = tail[2] if tail else kper
        ldw = fixup.plane_ld(nc)
        shapes = [_kmajor(x, i)[:2] if kmajor else _lines(x) for i, x in enumerate((a, b))]   # (lines, width) copied
        sizes = [lines * repack.pitch(width, x.dtype) * x.itemsize if cp else 0
                 for x, cp, (lines, width) in zip((a, b), copy, shapes)]
        parts = splits * mc * ldw * 4 if splits > 1 else (tail[1] * tail[3] * cfg.bm * cfg.bn * 4 if tail else 0)
        (ra_off, rb_off, planes), total = workspace.carve(*sizes, parts)
        steps, ops = [], [a, b]
        for i, region in ((0, ra_off), (1, rb_off)):
            if copy[i]:
                st, ops[i] = (_gather_step if kmajor else _repack_step)(ops[i], i, region, dev, total)
                steps.append(st)
        ec = None if splits > 1 or swap else output_map(cfg, c)
        cfg = staged_config(cfg, epi, c.dtype) if ec is not None and not (tail or async_b) else cfg
        part = BLOCK_SCALES if epi.scales == "block" else PLAIN      # a split's: the fix-up does the rest
        k = wgmma_kernel(cfg, kdt, "float32" if splits > 1 else c.dtype, ops[0].trans, ops[1].trans,
                         (splits > 1 or c.pairs_aligned) and not swap, ec is not None, part if splits > 1 else epi, splits > 1,
                         False, None if b.dtype == a.dtype else b.dtype, async_b, swap, bool(tail))
        nep = 0 if part.plain else len(part.slots())
        fn = driver.load(k, dev)
        resident = resident or _resident(cfg, fn, dev)
        ea, eb = operand_maps(cfg, *ops)
        ldb = b.ld if async_b else 0

        def args(ws, pa, pb, pc, *ep):
            pa, pb = (pb, pa) if swap else (pa, pb)        # (a swapped product copies neither: ``_swaps``)
            ma = encode(ws + ra_off if copy[0] else pa, *ea)
            mb = _NO_MAP if async_b else encode(ws + rb_off if copy[1] else pb, *eb)
            if splits > 1:                  # partial sums to the planes; the fix-up does the rest
                return (ma, mb, _NO_MAP, ws + planes, m, n, kk, ldw, kper, 1, 0, pb, ldb, 0, 0,
                        *(ep[:nep] if nep else (0,)))
            return (ma, mb, encode(pc, *ec) if ec else _NO_MAP, pc, m, n, kk, c.ld, kper, 1, 0, pb, ldb,
                    ws + planes if tail else 0, tail[0] if tail else 0, *ep)
        steps.append(Step(k, tail[4] if tail else work_plan(cfg, units, resident), cfg.threads,
                          args if total else lambda *v: args(0, *v), smem=cfg.smem_bytes, cluster=cfg.cluster,
                          fn=fn, workspace=total, label=_label(cfg, async_b, swap, splits, tail), dependent=bool(steps)))
        if splits > 1 or tail:
            steps.append(_fixup_step(c, epi, cfg, dev, total, planes, ldw, splits, tail))
        return steps
    return plan


def _label(cfg: WgmmaConfig, async_b: bool, swap: bool, splits: int, tail) -> str:
    """What ``explain`` says the product's launch runs, e.g. "64x8 swapped split-K 2"."""
    return (f"{cfg.bm}x{cfg.bn}" + (" ping-pong" if cfg.pingpong else "")
            + (f" cluster {cfg.cluster}" if cfg.cluster > 1 else "") + (" cp.async b" if async_b else "")
            + (" swapped" if swap else "") + (f" split-K {splits}" if splits > 1 else "")
            + (" (epilogue array staged)" if cfg.epi_source else "")
            + (f", last {tail[1]} tiles split-K {tail[3]}" if tail else ""))


def _resident(cfg: WgmmaConfig, fn, dev) -> int:
    """Blocks of ``cfg`` (loaded as ``fn``) that run at once on ``dev``: a persistent cluster's as
    the driver says clusters fit."""
    from . import driver
    if cfg.cluster > 1 and cfg.persistent:
        return cfg.cluster * driver.max_active_clusters(fn, cfg.threads, cfg.smem_bytes, cfg.cluster)
    return driver.sm_count(dev) * cfg.min_blocks


def _tail_plan(cands, cfg, m: int, n: int, keq: int, sms: int, resident, out_bytes: int):
    """(configuration, tail): ``cfg`` and None, or the tail split ``pick_tail`` prefers among
    ``cands`` with (whole tiles, the rest split, K slices per split, splits, the blocks of the
    grid: one round of them takes whole tiles until the split round)."""
    pick = pick_tail(cands, m, n, keq, sms, estimate(cfg, m, n, keq, 1, sms, out_bytes), out_bytes)
    if not pick:
        return cfg, None
    slots = resident or sms * pick[0].min_blocks
    whole, rest, kper, splits = tail_units(pick[0], m, n, keq, pick[1], slots)
    if not whole or not rest or splits < 2:
        return cfg, None                       # (the grid the caller forced has no such round)
    return pick[0], (whole, rest, kper, splits, slots)


def _fixup_step(c, epi, cfg, dev, total, planes, ldw, splits, tail):
    """The fix-up launch after a split-K kernel (its planes, ``fixup.fixup_kernel``) or a
    tail-split one (its last round's partial sums, ``fixup.tail_fixup_kernel``), as its dependent."""
    from . import driver
    m, n = c.rows, c.cols
    if tail:
        whole, rest, _, ts, _ = tail
        fk = fixup.tail_fixup_kernel(c.dtype, cfg.bm, cfg.bn, cfg.group_m, epi)
        grid, label = fixup.tail_grid(rest, cfg.bm, cfg.bn), "tail fixup"
        gm = cdiv(m, cfg.bm)

        def args(ws, pa, pb, pc, *ep):
            return (ws + planes, pc, m, n, c.ld, whole, rest, ts, gm, *ep)
    else:
        fk = fixup.fixup_kernel(c.dtype, epi)
        grid, label = fixup.grid(m, n), "fixup"

        def args(ws, pa, pb, pc, *ep):
            return (ws + planes, pc, m, n, ldw, c.ld, splits, *ep)
    return Step(fk, grid, fixup.THREADS, args, fn=driver.load(fk, dev), workspace=total, label=label, dependent=True)


def _batched_steps(cfgs, a, b, c, dev, epi, batch, resident):
    """The launch of a batched product (``batch``: the count and each operand's matrix stride,
    0 for one broadcast to every batch) in one persistent grid, every operand's tensor map 3-D;
    or None where TMA cannot read or write the operands as they are (the caller then runs one
    product per batch). The tile is the cost model's for the whole batch, but for one or two K
    slices (``SHORT_K``) and for one 128-wide column (``NARROW_N``); no clusters, no split-K (a
    batch has tiles enough)."""
    from . import driver
    pool = [cfg for cfg in cfgs if cfg.cluster == 1 and cfg.persistent and cfg.tma_store]
    strides = ((a, batch.a), (b, batch.b), (c, batch.c))
    if not pool or any(tma_requirements(x.ptr, x.ld, x.itemsize) or (z * x.itemsize) % 16 for x, z in strides):
        return None
    m, n, kk = c.rows, c.cols, a.cols
    if cdiv(kk, pool[0].bk) <= 2 and len(pool) > 1:     # (the top rung's pool; a fixed tile keeps its own)
        cfg = SHORT_K
    elif NARROW_PINGPONG and n == NARROW_N.bn and len(pool) > 1:
        cfg = NARROW_N
    else:                       # the model's M: every matrix's rows padded to the tile, then stacked
        def padded(cfg, mm, nn, k, s, sms, ob):
            return estimate(cfg, cdiv(m, cfg.bm) * cfg.bm * batch.count, nn, k, s, sms, ob)
        cfg, _ = pick_config(pool, m * batch.count, n, kk, False, driver.sm_count(dev), False, c.itemsize, padded)
    ec = output_map(cfg, c)
    if ec is None:
        return None
    k = wgmma_kernel(cfg, a.dtype, c.dtype, a.trans, b.trans, c.pairs_aligned, True, epi, False, True)
    fn = driver.load(k, dev)
    tiles = cdiv(m, cfg.bm) * cdiv(n, cfg.bn)
    units = tiles * batch.count
    grid = work_plan(cfg, units, resident or driver.sm_count(dev) * cfg.min_blocks)
    (ea, eb), bmask = operand_maps(cfg, a, b), (batch.a != 0) | (batch.b != 0) << 1

    def depth(x, z):            # the 3-D map's batch: one matrix (at batch 0) for a broadcast operand
        return (batch.count, z) if z else (1, _lines(x)[0] * x.ld)

    def args(pa, pb, pc, *ep):
        return (encode(pa, *ea, 128, *depth(a, batch.a)), encode(pb, *eb, 128, *depth(b, batch.b)),
                encode(pc, *ec, 128, batch.count, batch.c), pc, m, n, kk, c.ld, 1, batch.count, bmask, 0, 0, 0, 0, *ep)
    label = f"{cfg.bm}x{cfg.bn}{' ping-pong' * cfg.pingpong} batched {batch.count}"
    return [Step(k, grid, cfg.threads, args, smem=cfg.smem_bytes, fn=fn, label=label)]


def _kernels(cfgs, top: bool, fp8_cfgs=(), forced=False):
    """Every kernel a rung's planner picks for ``dtype`` inputs without an epilogue (for
    ahead-of-time compiles, ``aot.precompile``; tests/test_aot_coverage.py checks the planner
    against it): each layout, the input dtype or float32 out, C stored by TMA, in pairs or one
    element at a time; for the top rung also its split-K kernels, their fix-ups and the copy."""
    layouts = [(ta, tb) for ta in (False, True) for tb in (False, True)]

    def stores(cfg):   # (vc, tma_c) as _plan decides them: rows TMA can write are pair-aligned too
        return ((True, True),) * cfg.tma_store + ((True, False), (False, False))

    def kernels(dtype):
        if dtype in layout.FP8:
            return kernels8(dtype) if top else []
        if dtype == "tf32":
            return kernels32() if top else []
        outs = (dtype, "float32")
        out = [wgmma_kernel(cfg, dtype, o, ta, tb, vc, tc)
               for cfg in cfgs for vc, tc in stores(cfg) for o in outs for ta, tb in layouts]
        if top:
            out += [wgmma_kernel(cfg, dtype, "float32", ta, tb, True, False, PLAIN, True)
                    for cfg in cfgs if splittable(cfg) for ta, tb in layouts]
            out += [fixup.fixup_kernel(o) for o in outs] + [repack.repack_kernel(dtype, v) for v in (False, True)]
            tails = [cfg for cfg in cfgs if (cfg.bm, cfg.bn) in TAIL_TILES and cfg.cluster == 1 and cfg.persistent]
            out += [wgmma_kernel(cfg, dtype, o, ta, tb, vc, tc, PLAIN, False, False, None, False, False, True)
                    for cfg in tails for vc, tc in stores(cfg) for o in outs for ta, tb in layouts]
            out += [fixup.tail_fixup_kernel(o, cfg.bm, cfg.bn, cfg.group_m) for cfg in tails for o in outs]
            out += [wgmma_kernel(cfg, dtype, "float32" if sp else o, ta, True, False, False, PLAIN, sp, False, None,
                                 False, True) for cfg in SWAP_CONFIGS for ta in (False, True) for sp in (False, True)
                    for o in (("float32",) if sp else outs)]
        return out

    def kernels8(dtype):
        """fp8 (A and B of one type): always with its scales (per tensor or block-wise), always
        k-major after the copy."""
        outs = ("bfloat16", "float16", "float32")
        pool = fp8_cfgs or cfgs
        out = repack.gather_kernels(1)
        for epi, part in ((SCALED, PLAIN), (BLOCK_SCALED, BLOCK_SCALES)):
            out += [wgmma_kernel(cfg, dtype, o, False, True, vc, tc, epi)
                    for cfg in scaled_pool(pool, epi.scales) for vc, tc in stores(cfg) for o in outs]
            out += [wgmma_kernel(cfg, dtype, "float32", False, True, True, False, part, True)
                    for cfg in scaled_pool(pool, epi.scales) if cfg.persistent]
            out += [fixup.fixup_kernel(o, epi) for o in outs]
        return out

    def kernels32():
        """tf32 (float32 arrays): float32 out; A k-major (after the copy where TMA cannot read it)
        or mn-major (read through registers, ``REGS_A``); B k-major after it or n-major, copied
        by the producer (``ASYNC_B``); and the swapped products (C's transpose stored)."""
        out = repack.gather_kernels(4)
        bs = [(True, False)] + [(False, True)] * ASYNC_B          # (tb, async_b)
        tas = (False, True) if REGS_A else (False,)
        for tb, ab in bs:
            pool = [c for c in (cfgs[:1] if forced else ASYNC_CONFIGS) if c.staged] if ab else typed_pool(cfgs, "tf32")
            out += [wgmma_kernel(cfg, "tf32", "float32", ta, tb, vc, tc, PLAIN, False, False, None, ab)
                    for cfg in pool for vc, tc in stores(cfg) for ta in tas]
            out += [wgmma_kernel(cfg, "tf32", "float32", ta, tb, True, False, PLAIN, True, False, None, ab)
                    for cfg in pool if splittable(cfg) for ta in tas]
        if REGS_A:
            out += [wgmma_kernel(cfg, "tf32", "float32", True, True, False, False, PLAIN, sp, False, None, False, True)
                    for cfg in typed_pool(cfgs, "tf32") for sp in (False, True) if splittable(cfg) or not sp]
        return out + [fixup.fixup_kernel("float32")]
    return kernels


RUNG1 = WgmmaConfig(bm=64, bn=128, consumers=1, min_blocks=2, max_stages=4)
RUNG2 = WgmmaConfig(bm=128, bn=256, consumers=2, max_stages=4)
RUNG3 = RUNG2.replace(producer=True)
RUNG4 = RUNG3.replace(regs=(40, 232))
RUNG5 = RUNG4.replace(persistent=True)
RUNG6 = RUNG5.replace(cluster=2)
# Rung 7 stores through shared memory by TMA, on rung 5 rather than 6: with this epilogue the
# 2-CTA cluster measured slower on the H100 (bf16 8192^3: 702 vs 786 TFLOP/s, 4096^3: 765 vs 768;
# benchmarks/results/tune_wgmma_h100.txt), so `hopper` leaves clusters off.
RUNG7 = RUNG5.replace(tma_store=True)
# ... and, per problem (``pick_config``), 128x128 tiles where 128x256 ones leave SMs idle (1024^3:
# 188 vs 132 TFLOP/s) and B multicast where B's rows are slow (3000x5000x2000: 589 vs 400).
# 128x192 where 128x256 tiles would end on a short last round (1536^3: 96 tiles in one round
# instead of 72 wider ones), and for M of at most 64 (decoding) 64x256 tiles: half the wgmma work
# on rows TMA fills with zeros. 64x128 tiles (one consumer) where even 128x128 ones leave SMs
# idle (1024^3: 0.975x cuBLAS against 0.772; benchmarks/results/tune_short_waves_h100.log), and
# for 16 to 256 rows where memory bounds the product (``TILE_EFFICIENCY``).
# B multicast over 128x192 tiles once A's rows are fast (``SLOW_A_TILES``). 192x192 tiles on three
# consumer warpgroups (one output box each; 512 threads leave 128 registers a thread at launch,
# setmaxnreg gives the consumers 152) where their rounds fill the GPU better: as cuBLAS's
# 192-row tiles, faster on 22 of 23 slow-rows shapes the model moved to them with B multicast
# (2600x1544x2048 0.694 -> 0.895, 2056x4104x3000 0.799 -> 0.849) and 13 of 18 aligned ones
# (benchmarks/results/ab_eff192_*_h100.log); never split along K (``splittable``), 16-bit only.
RUNG7_CONFIGS = tuple(RUNG7.replace(**kw) for kw in (
    {}, dict(bn=192), dict(bn=128, max_stages=6), dict(bm=64, consumers=1), dict(cluster=2),
    dict(bn=128, max_stages=6, cluster=2), dict(bm=64, bn=128, consumers=1, max_stages=8), dict(bn=192, cluster=2),
    dict(bm=192, bn=192, consumers=3, regs=(40, 152), epi_boxes=1, cluster=2),
    dict(bm=192, bn=192, consumers=3, regs=(40, 152), epi_boxes=1)))
# The swapped decode tiles (``SWAP``): one consumer, C's transpose stored from registers, as deep
# a ring as shared memory holds (a stage is 9-12 KiB).
SWAP_CONFIGS = tuple(RUNG7.replace(bm=64, bn=w, consumers=1, tma_store=False, max_stages=24) for w in (8, 16, 32))

# A batched product of one or two K slices per tile (attention's Q K^T) is bound by storing C:
# there 64x128 tiles two blocks an SM (one's epilogue beside the other's loads and math) measured
# fastest: 1.021 / 0.932x torch.bmm (512 x 1024x1024x128 / 64 x 2048x2048x128) against 1.011 /
# 0.905 for 128x128 tiles with 4 output boxes, the choice before (benchmarks/NOTES.md, sessions
# 13-14, 25; results/tune_batched_2blocks_h100.log); other batched shapes follow the cost model.
SHORT_K = RUNG7.replace(bm=64, bn=128, consumers=1, min_blocks=2, regs=(40, 216), max_stages=4)
# A batched product of one full 128-wide tile column (N = 128: attention's P V at head size 128)
# and more K slices: its tiles' output is a large part of their work, so the two consumers take
# turns (``pingpong``), one's epilogue beside the other's mainloop, on 64x128 tiles with 4 output
# boxes each: faster than the model's tile on 5 of 6 such shapes, level on the sixth (64 x
# 4096x128x4096; benchmarks/NOTES.md, session 30). Narrower columns (N = 64, 96, 112) and two
# (256) measured slower on it, so the model keeps them. NARROW_PINGPONG: False, never (A/B runs).
NARROW_N = RUNG7.replace(bm=64, bn=128, pingpong=True, epi_boxes=4, max_stages=8)
NARROW_PINGPONG = True

# fp8 inputs: tiles whose accumulators are promoted (each K slice summed apart, then added to fp32
# registers, as cuBLAS's default and DeepGEMM do), 128x192, 128x256 or 128x128 as the cost model
# picks; two sets of a 128x256 tile's accumulators do not fit a consumer's registers, so it sums
# and adds a slice in two n128 halves (``promote_n``); B multicast where its rows are slow.
# Block-wise scales are loaded two slices before their add (8192^3: 0.862 of per-tensor
# `_scaled_mm` against 0.846 one slice ahead; benchmarks/results/ab_fp8_scale_lead_h100.log).
# Per-tensor into a bf16 C, 128x192 sums two slices (256 of K) before each add, the consumers'
# adds a slice apart: 8192^3 1.00 of `_scaled_mm` against 0.975 slice by slice. Its sums' error
# (measured into fp32 before fp32 was kept to every slice) 1.6x `_scaled_mm`'s, which adds every
# 128 of K; bf16's rounding is 8x that error, so into bf16 the same (benchmarks/results/
# ab_fp8_every2_s35_h100.log). Into fp16 (rounding 8x finer than bf16's) and fp32, every slice.
FP8_CONFIGS = tuple(RUNG7.replace(promote=True, scale_lead=2, **kw) for kw in (
    dict(bn=192, promote_every=2), {}, dict(bn=128, max_stages=6), dict(bn=128, max_stages=6, cluster=2)))

# The tiles an n-major tf32 B copied by the producer runs on (``_b_by_producer``): tall, since
# each block row of C copies B again (64x256 for a few rows).
# Their producers hold more registers (the copies' addresses and a 4 x 4 block: below these
# counts ptxas spills them; the 256x128 tile's consumers give 32 of theirs for it).
ASYNC_CONFIGS = (RUNG7.replace(bm=256, bn=128, staged=True, regs=(104, 200)),
                 RUNG7.replace(bm=64, consumers=1, staged=True, epi_boxes=1, regs=(128, 232)))

_IN = ("float16", "bfloat16")
_OUT = ("float32", "float16", "bfloat16")
_SM90A = (9, 0)


def _variant(name, rung, cfgs, note, top=False, splits=None, fp8_cfgs=()):
    """A rung's variant. ``top``: the one ``auto`` picks, which takes every operand (a copy to a
    readable pitch where TMA cannot read one) and splits K where tiles are too few (``splits``:
    always that many, on the first configuration)."""
    cfgs = cfgs if isinstance(cfgs, tuple) else (cfgs,)
    return Variant(name, "wgmma", rung, _IN + layout.FP8 + ("tf32",) if top else _IN, _SM90A, note,
                   _plan(*cfgs, readable=top, split=top, splits=splits, fp8_cfgs=fp8_cfgs),
                   cfgs[0], _OUT, check=None if top else _check, max_cc=_SM90A,
                   kernels=_kernels(cfgs, top, fp8_cfgs, splits is not None),
                   batched=top)


RUNGS = [
    _variant("wgmma_tma", 1, RUNG1, "TMA loads 128B-swizzled 64x128 tiles into a ring completing "
             "on mbarriers; one warpgroup runs wgmma m64n128k16 from shared memory"),
    _variant("wgmma_wide", 2, RUNG2, "128x256 tiles: two consumer warpgroups of m64n256k16, twice "
             "the math per byte loaded"),
    _variant("wgmma_ws", 3, RUNG3, "warp specialization: a producer warpgroup issues TMA, full/empty "
             "mbarriers per stage, one wgmma group kept in flight, no block barrier in the loop"),
    _variant("wgmma_regs", 4, RUNG4, "setmaxnreg: producer down to 40 registers, consumers up to 232"),
    _variant("wgmma_persistent", 5, RUNG5, "persistent grid (at most one block per SM, each "
             "taking the same number of tiles) walking tiles in grouped order: the next tile's loads "
             "overlap this tile's epilogue"),
    _variant("wgmma_cluster", 6, RUNG6, "2-CTA clusters along M: each CTA loads half of the shared "
             "B tile and TMA multicasts it to both (half the B traffic from L2)"),
    _variant("hopper", 7, RUNG7_CONFIGS, "epilogue through shared memory: 128B-swizzled boxes written "
             "by TMA stores (coalesced, asynchronous, clipped at the edges); per problem (a cost model), "
             "the tile (128x256, 128x192, 128x128, 64x256, 64x128 or 192x192 on three consumer warpgroups; "
             "decode products of at most 32 rows swapped, "
             "C^T = B^T A^T, onto 64x8 to 64x32 tiles), B multicast where its rows are not 32-byte "
             "aligned, split-K where tiles are too few or for a last, partial round's tiles alone (partial sums "
             "added in a fixed order, then the epilogue), "
             "and a copy to a readable pitch for operands TMA cannot read; fp8 inputs (e4m3, e5m2) on the "
             "fp8 wgmma with promoted accumulators and their scales, float32 ones as tf32 (allow_tf32; A read "
             "through registers in any layout, an n-major B swapped into its place), fp8 and other tf32 "
             "operands copied k-major where they are not", top=True, fp8_cfgs=FP8_CONFIGS),
]


def variant_from(cfgs, name: str, splits=None) -> Variant:
    """An unregistered variant of the wgmma kernel with ``cfgs`` (one configuration, or several
    for ``pick_config`` to choose from per problem; ``api.variant_from``). With ``splits``, it
    runs the first configuration as the top rung does (any operand), K split that many ways."""
    return _variant(name, 0, cfgs, f"the wgmma kernel with {cfgs}" + (f", {splits} K splits" if splits else ""),
                    top=splits is not None, splits=splits)
