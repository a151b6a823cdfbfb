"""The SIMT ladder: FP32 GEMM on CUDA cores, written in Numba ``@cuda.jit``.

Seven rungs after siboehm's "How to optimize a CUDA matmul kernel". Rungs 1-2 are their own small
kernels; rungs 3-7 are one tiled kernel (``tiled_kernel``, composed of parts, each a cached
factory of compile-time facts returning a device function of run-time values only: the scheduler
``make_scheduler``, the load ``make_load``, the mainloop ``make_mainloop`` over ``make_mac_tile``,
the epilogue ``make_store_c``) built from a ``SimtConfig``; each rung is one line, ``RUNG3``..
``RUNG7`` below (rung 7's tuned configuration changes many fields at once; its note says which
matter).

Conventions, shared by every rung:

* C (M x N) = A (M x K) @ B (K x N). C is row-major with leading dimension ``ldc`` (``api.gemm``
  turns a column-major output into a row-major one by computing C^T = B^T A^T).
* A and B are row-major (leading dimension ``lda``/``ldb``) or column-major (``ta``/``tb``): the
  layout is a compile-time constant, so each kernel is specialised and the branch folds away.
* Every access is bounds-checked against M, N, K (tiles past an edge read zeros and write
  nothing): any positive shape works.
* Kernel arguments are int64 device addresses and sizes (arrays under the simulator); memory is
  indexed through raw pointers (``intrinsics.f32_ptr``/``ptr``), not arrays: see ``intrinsics.py``.
"""
from __future__ import annotations

from functools import lru_cache
from itertools import product

from numba import cuda, float32

from .config import SimtConfig, Variant
from .epilogue import PLAIN
from .epilogue import make as make_epilogue
from .intrinsics import SIMULATOR, f32_ptr, load_f32x4, ptr, red_add_f32, store_f32x4
from .jit import device, kernel, kernel_factory, unrolled
from .plan import Step, operand_args
from .schedule import cdiv, tail_split

__all__ = ["RUNGS", "naive_kernel", "coalesced_kernel", "tiled_kernel", "tiled_plan", "launch_grid"]

_I64 = "i64"


# ---------------------------------------------------------------------------------------------
# Element access shared by the untiled rungs
# ---------------------------------------------------------------------------------------------
@device
def _index(r, c, ld, trans):
    """Index of element (r, c) of a row-major (or, with ``trans``, column-major) matrix."""
    return c * ld + r if trans else r * ld + c


@device
def _at(p, ld, r, c, trans):
    """Element (r, c) of a row-major (or, with ``trans``, column-major) matrix at pointer p."""
    return p[_index(r, c, ld, trans)]


@device
def _dot(pA, pB, pC, m, n, M, N, K, lda, ldb, ldc, ta, tb, EPI, ep):
    """C[m, n] = A[m, :] . B[:, n], one thread's whole output (rungs 1-2), inside M x N only."""
    if m < M and n < N:
        acc = float32(0)
        for k in range(K):
            acc += _at(pA, lda, m, k, ta) * _at(pB, ldb, k, n, tb)
        pC[m * ldc + n] = EPI(acc, m, n, ep)


# ---------------------------------------------------------------------------------------------
# Rung 1: naive. One thread per output; threadIdx.x walks down a column of C.
# ---------------------------------------------------------------------------------------------
@kernel_factory
def naive_kernel(ta: bool, tb: bool, epi=PLAIN):
    EPI = make_epilogue(epi)

    def naive(A, B, C, M, N, K, lda, ldb, ldc, ep):
        pA, pB, pC = f32_ptr(A), f32_ptr(B), f32_ptr(C)
        m = cuda.blockIdx.x * 32 + cuda.threadIdx.x   # neighbours in a warp: neighbouring rows
        n = cuda.blockIdx.y * 32 + cuda.threadIdx.y
        _dot(pA, pB, pC, m, n, M, N, K, lda, ldb, ldc, ta, tb, EPI, ep)
    return kernel(naive, (_I64,) * 9, values=len(epi.slots()))


# ---------------------------------------------------------------------------------------------
# Rung 2: global-memory coalescing. Same work, but the 32 threads of a warp take 32 neighbouring
# columns of one row: their B loads and C stores fall in one 128-byte line, their A load is one
# broadcast.
# ---------------------------------------------------------------------------------------------
@kernel_factory
def coalesced_kernel(ta: bool, tb: bool, epi=PLAIN):
    EPI = make_epilogue(epi)

    def coalesced(A, B, C, M, N, K, lda, ldb, ldc, ep):
        pA, pB, pC = f32_ptr(A), f32_ptr(B), f32_ptr(C)
        m = cuda.blockIdx.y * 32 + cuda.threadIdx.x // 32
        n = cuda.blockIdx.x * 32 + cuda.threadIdx.x % 32
        _dot(pA, pB, pC, m, n, M, N, K, lda, ldb, ldc, ta, tb, EPI, ep)
    return kernel(coalesced, (_I64,) * 9, values=len(epi.slots()))


# ---------------------------------------------------------------------------------------------
# Rungs 3-7: the tiled kernel and its pieces
# ---------------------------------------------------------------------------------------------
@device
def _tile_coord(v, tid, R, C, contig_rows, W, NT):
    """(r, c) of the first element of thread ``tid``'s ``v``-th access to an R x C tile.

    Consecutive threads take consecutive W-wide chunks along the tile's contiguous side, so a
    warp's loads are coalesced whichever way the matrix is stored."""
    e = tid + v * NT
    if contig_rows:
        per = R // W
        return (e % per) * W, e // per
    per = C // W
    return e // per, (e % per) * W


@device
def _load_chunk16(regs, v, src, e):
    """Chunk v of a tile (4 floats at element index e, 16-byte aligned) by one LDG.128."""
    x0, x1, x2, x3 = load_f32x4(src, e)
    regs[v * 4] = x0
    regs[v * 4 + 1] = x1
    regs[v * 4 + 2] = x2
    regs[v * 4 + 3] = x3


@device
def _load_tile(regs, src, ld, r0, c0, nrows, ncols, R, C, trans, W, vec_ok, tid, NT):
    """Read the R x C tile at (r0, c0) of an nrows x ncols matrix into registers, zeros outside.

    W == 4 with ``vec_ok`` (16-byte aligned rows) uses one LDG.128 per chunk that lies wholly
    inside the matrix; chunks that straddle an edge fall back to predicated scalar loads."""
    for v in range(R * C // (NT * W)):
        r, c = _tile_coord(v, tid, R, C, trans, W, NT)
        gr = r0 + r
        gc = c0 + c
        base = _index(gr, gc, ld, trans)
        if trans:
            inside = gr + (W - 1) < nrows and gc < ncols
        else:
            inside = gr < nrows and gc + (W - 1) < ncols
        if W == 4 and vec_ok and inside:
            _load_chunk16(regs, v, src, base)
        else:
            for l in range(W):
                rr = gr + l if trans else gr
                cc = gc if trans else gc + l
                x = float32(0)
                if rr < nrows and cc < ncols:
                    x = src[base + l]
                regs[v * W + l] = x


@device
def _chunk0(r0, c0, ld, R, C, trans, W, tid, NT):
    """Element index of this thread's first chunk of the R x C tile at (r0, c0)."""
    r, c = _tile_coord(0, tid, R, C, trans, W, NT)
    return _index(r0 + r, c0 + c, ld, trans)


@device
def _load_tile_full(regs, src, base, ld, R, C, trans, W, vec_ok, NT):
    """``_load_tile`` for a tile known to lie inside the matrix, from its first chunk's index
    (``_chunk0``): no checks, and chunk v sits v * NT / (chunks per line) lines further on."""
    LINE = (R if trans else C) // W            # chunks along the contiguous side
    for v in range(R * C // (NT * W)):
        e = base + v * (NT // LINE) * ld
        if W == 4 and vec_ok:
            _load_chunk16(regs, v, src, e)
        else:
            for l in range(W):
                regs[v * W + l] = src[e + l]


@device
def _store_tile(dst, off, regs, R, C, trans, W, tid, NT, rs, cs):
    """Write registers filled by ``_load_tile`` to shared memory: element (r, c) at
    ``dst[off + r*rs + c*cs]`` (so one loader serves both [m][k] and transposed [k][m] tiles)."""
    for v in range(R * C // (NT * W)):
        r, c = _tile_coord(v, tid, R, C, trans, W, NT)
        for l in range(W):
            rr = r + l if trans else r
            cc = c if trans else c + l
            dst[off + rr * rs + cc * cs] = regs[v * W + l]


@device
def _fma_row(r, acc, rm, rn, NJ):
    for j in range(NJ):
        acc[r * NJ + j] = cuda.fma(rm[r], rn[j], acc[r * NJ + j])


@device
def _zero_row(r, acc, NJ):
    for j in range(NJ):
        acc[r * NJ + j] = float32(0)


# Rows of the accumulator tile written out: LLVM declines to fully unroll a loop nest of 128
# FMAs, and one dynamic index sends the whole accumulator array to local memory.
_fma_rows = unrolled(_fma_row, 32)
_zero_rows = unrolled(_zero_row, 32)


@device
def _thread_origin(tid, TPW, WTN, WM, WN, TCOLS, TM, TN):
    """The thread's first row and column inside the block tile: its warp tile (of WTN across;
    the whole block without warptiling), then its place in the sub-tile (TCOLS threads across)."""
    g = tid // TPW
    lane = tid % TPW
    return (g // WTN) * WM + (lane // TCOLS) * TM, (g % WTN) * WN + (lane % TCOLS) * TN


# ---------------------------------------------------------------------------------------------
# The tiled kernel's parts, as in ``hopper/``: each a factory, cached per configuration, that
# closes over its compile-time constants (upper case) and returns device functions of run-time
# values only; the larger parts take the smaller ones they call as arguments, so any one can be
# swapped. ``tiled_kernel`` composes them. The operands travel as one tuple, ``src`` = (pA, pB,
# lda, ldb, M, N, K).
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def make_scheduler(BM, BN, BK, SPLIT):
    """Scheduler: ``block_tile(GN, WHOLE, PARTS, PER, K)`` -> (bm0, bn0, kt0, kt1, split), the
    block's tile of C and its K tiles kt0..kt1. With SPLIT a 1-D grid walks the tiles row by row
    (GN across); blocks past WHOLE each take PER K tiles of one of the last tiles, PARTS blocks
    per tile (``schedule.tail_split``), and add into C. Otherwise block (x, y) takes tile column
    x, row y, and all of K."""
    @device
    def block_tile(GN, WHOLE, PARTS, PER, K):
        kt0 = 0
        kt1 = (K + BK - 1) // BK
        split = False
        if SPLIT:
            tile = cuda.blockIdx.x
            if tile >= WHOLE:
                split = True
                q = tile - WHOLE
                tile = WHOLE + q // PARTS
                kt0 = (q % PARTS) * PER
                kt1 = min(kt0 + PER, kt1)
            bm0 = (tile // GN) * BM
            bn0 = (tile % GN) * BN
        else:             # (block indices cost no registers: ptxas re-reads them where needed)
            bm0 = cuda.blockIdx.y * BM
            bn0 = cuda.blockIdx.x * BN
        return bm0, bn0, kt0, kt1, split
    return block_tile


@lru_cache(maxsize=None)
def make_load(BM, BN, BK, TA, TB, W, VA, VB, NT, A_MS, A_KS, A_T, B_T):
    """Load: ``(origin, load, stage)``. ``origin(lda, ldb, bm0, bn0, tid)``: (a0, b0), the
    element indices of this thread's first chunks of the block's A and B tiles at K tile 0
    (``_chunk0``). ``load(ra, rb, src, bm0, bn0, a0, b0, k0, FULL, tid)``: K tile k0..k0+BK of
    A's rows and B's columns into registers; FULL (a literal): the tiles lie inside A and B,
    read unchecked from a0 / b0. ``stage(psA, psB, ra, rb, buf, tid)``: those registers into
    shared buffer ``buf`` (As element (m, k) at buf*A_T + m*A_MS + k*A_KS, Bs [k][n] from
    buf*B_T). TA/TB: A/B column-major; VA/VB: their rows are 16-byte aligned."""
    @device
    def origin(lda, ldb, bm0, bn0, tid):
        return _chunk0(bm0, 0, lda, BM, BK, TA, W, tid, NT), _chunk0(0, bn0, ldb, BK, BN, TB, W, tid, NT)

    @device
    def load(ra, rb, src, bm0, bn0, a0, b0, k0, FULL, tid):
        pA, pB, lda, ldb, M, N, K = src
        if FULL:
            _load_tile_full(ra, pA, a0 + k0 * (lda if TA else 1), lda, BM, BK, TA, W, VA, NT)
            _load_tile_full(rb, pB, b0 + k0 * (1 if TB else ldb), ldb, BK, BN, TB, W, VB, NT)
        else:
            _load_tile(ra, pA, lda, bm0, k0, M, K, BM, BK, TA, W, VA, tid, NT)
            _load_tile(rb, pB, ldb, k0, bn0, K, N, BK, BN, TB, W, VB, tid, NT)

    @device
    def stage(psA, psB, ra, rb, buf, tid):
        _store_tile(psA, buf * A_T, ra, BM, BK, TA, W, tid, NT, A_MS, A_KS)
        _store_tile(psB, buf * B_T, rb, BK, BN, TB, W, tid, NT, BN, 1)
    return origin, load, stage


@lru_cache(maxsize=None)
def make_mac_tile(BK, A_MS, A_KS, B_KS, WMITER, WSUBM, TM, WNITER, WSUBN, TN):
    """``mac_tile(acc, rm, rn, sA, a_off, sB, b_off, m0, n0)``: acc += the A tile at sA[a_off:]
    (element (m, k) at m*A_MS + k*A_KS) x the B tile at sB[b_off:] (element (k, n) at
    k*B_KS + n) on the thread's fragments (rows from m0, columns from n0), for k = 0..BK-1
    written out (see jit.unrolled for why)."""
    NJ = WNITER * TN

    @device
    def mac_step(kk, acc, rm, rn, sA, a_off, sB, b_off, m0, n0):
        """The thread's WMITER*TM values of A and WNITER*TN of B at k = kk go to registers, then
        their outer product is accumulated: TM*TN*WMITER*WNITER FMAs for TM*WMITER + TN*WNITER
        loads."""
        for i in range(WMITER):
            for t in range(TM):
                rm[i * TM + t] = sA[a_off + (m0 + i * WSUBM + t) * A_MS + kk * A_KS]
        for j in range(WNITER):
            for t in range(TN):
                rn[j * TN + t] = sB[b_off + kk * B_KS + n0 + j * WSUBN + t]
        if SIMULATOR:          # interpreted: two device calls per step would triple its time
            for i in range(WMITER * TM):
                for j in range(NJ):
                    acc[i * NJ + j] = cuda.fma(rm[i], rn[j], acc[i * NJ + j])
        else:
            _fma_rows(WMITER * TM, acc, rm, rn, NJ)
    mac_steps = unrolled(mac_step, 32)

    @device
    def mac_tile(acc, rm, rn, sA, a_off, sB, b_off, m0, n0):
        mac_steps(BK, acc, rm, rn, sA, a_off, sB, b_off, m0, n0)
    return mac_tile


@lru_cache(maxsize=None)
def make_mainloop(origin, load, stage, mac_tile, BM, BN, BK, STAGES, A_T, B_T, FAST):
    """Mainloop: ``mainloop(acc, rm, rn, ra, rb, psA, psB, src, tile, m0, n0, tid)``: the K tiles
    of ``tile`` (the scheduler's (bm0, bn0, kt0, kt1, split)) through registers ra/rb (``load``)
    and STAGES shared buffers (``stage``) into the accumulators (``mac_tile``; the thread's
    fragments from m0, n0). FAST: the unchecked loads can serve the block's whole tiles."""
    @device
    def k_tile(t, FULL, CUR, acc, rm, rn, ra, rb, psA, psB, src, blk, tid):
        """K tile t of the block's (blk: (bm0, bn0, m0, n0, a0, b0, kb, ntiles), from K = kb on).
        FULL (a literal): the tile loaded lies inside A and B. CUR: tile t's buffer (t % 2), a
        literal where known, else -1."""
        bm0, bn0, m0, n0, a0, b0, kb, ntiles = blk
        if STAGES == 1:
            load(ra, rb, src, bm0, bn0, a0, b0, kb + t * BK, FULL, tid)
            stage(psA, psB, ra, rb, 0, tid)
            cuda.syncthreads()
            mac_tile(acc, rm, rn, psA, 0, psB, 0, m0, n0)
            cuda.syncthreads()
        else:
            # Double buffer: tile t+1 travels into registers while tile t is multiplied out of
            # shared memory, then lands in the other buffer. One barrier per tile suffices.
            cur = CUR if CUR >= 0 else t & 1
            more = FULL or t + 1 < ntiles
            if more:
                load(ra, rb, src, bm0, bn0, a0, b0, kb + (t + 1) * BK, FULL, tid)
            mac_tile(acc, rm, rn, psA, cur * A_T, psB, cur * B_T, m0, n0)
            if more:
                stage(psA, psB, ra, rb, 1 - cur, tid)
            cuda.syncthreads()

    @device
    def mainloop(acc, rm, rn, ra, rb, psA, psB, src, tile, m0, n0, tid):
        M, N, K = src[4], src[5], src[6]
        bm0, bn0, kt0, kt1, _ = tile
        kb = kt0 * BK
        ntiles = kt1 - kt0
        a0, b0 = origin(src[2], src[3], bm0, bn0, tid)
        blk = (bm0, bn0, m0, n0, a0, b0, kb, ntiles)
        if STAGES > 1 and ntiles > 0:      # tile 0 into buffer 0
            load(ra, rb, src, bm0, bn0, a0, b0, kb, False, tid)
            stage(psA, psB, ra, rb, 0, tid)
            cuda.syncthreads()
        # Two copies of the loop: while the tile to load is whole (an interior block, not the
        # last partial K tile) the loads have no checks, so the loop body is one basic block in
        # which ptxas interleaves them with the FMAs; edge blocks and the last tiles check.
        inner = FAST and bm0 + BM <= M and bn0 + BN <= N
        t_full = max(min(kt1, K // BK) - kt0 - (STAGES - 1), 0) if inner else 0
        # With two buffers the whole-tile loop takes two tiles per iteration, so that which buffer
        # each reads and writes is a constant: shared addresses become immediates, not arithmetic.
        for t2 in range(t_full // STAGES):
            t = t2 * STAGES
            k_tile(t, True, 0, acc, rm, rn, ra, rb, psA, psB, src, blk, tid)
            if STAGES == 2:
                k_tile(t + 1, True, 1, acc, rm, rn, ra, rb, psA, psB, src, blk, tid)
        for t in range(t_full // STAGES * STAGES, ntiles):
            k_tile(t, False, -1, acc, rm, rn, ra, rb, psA, psB, src, blk, tid)
    return mainloop


@lru_cache(maxsize=None)
def make_store_c(WMITER, WSUBM, TM, WNITER, WSUBN, TN, VEC, EPI):
    """Epilogue: ``store_c(pC, ldc, M, N, acc, mb, nb, add, ep)``: the thread's accumulators (its
    sub-tiles from row mb, column nb) to C, row by row, inside M x N only, through the epilogue
    function EPI (STG.128 with VEC, C's rows 16-byte aligned and the configuration asking for
    it); ``add``: into C atomically (a K slice of a split tile, ``schedule.tail_split``; only
    with the plain epilogue, which the planner ensures: an epilogue applies once, to the sum)."""
    NJ = WNITER * TN

    @device
    def store_row(r, pC, ldc, M, N, acc, mb, nb, add, ep):
        """Accumulator row r (sub-tile r // TM, row r % TM)."""
        i = r // TM
        t = r - i * TM
        m = mb + i * WSUBM + t
        if m < M:
            for j in range(WNITER):
                n = nb + j * WSUBN
                a0 = r * NJ + j * TN
                if TN % 4 == 0 and VEC and not add and n + TN <= N:
                    for q in range(TN // 4):
                        a4 = a0 + 4 * q
                        store_f32x4(pC, m * ldc + n + 4 * q, EPI(acc[a4], m, n + 4 * q, ep),
                                    EPI(acc[a4 + 1], m, n + 4 * q + 1, ep), EPI(acc[a4 + 2], m, n + 4 * q + 2, ep),
                                    EPI(acc[a4 + 3], m, n + 4 * q + 3, ep))
                else:
                    for q in range(TN):
                        if n + q < N:
                            if add:
                                red_add_f32(pC, m * ldc + n + q, acc[a0 + q])
                            else:
                                pC[m * ldc + n + q] = EPI(acc[a0 + q], m, n + q, ep)
    store_rows = unrolled(store_row, 32)

    @device
    def store_c(pC, ldc, M, N, acc, mb, nb, add, ep):
        store_rows(WMITER * TM, pC, ldc, M, N, acc, mb, nb, add, ep)
    return store_c


@kernel_factory
def tiled_kernel(cfg: SimtConfig, ta: bool, tb: bool, va: bool, vb: bool, vc: bool, epi=PLAIN):
    """The kernel of rungs 3-7 for one configuration, layout (ta, tb) and alignment (va, vb, vc):
    the scheduler (``make_scheduler``), the load (``make_load``), the mainloop (``make_mainloop``
    over ``make_mac_tile``) and the epilogue (``make_store_c``).

    ``va``/``vb``/``vc``: the operand's rows start on 16-byte boundaries, so 16-byte accesses
    are legal (checked by the host; when false the same kernel uses scalar accesses)."""
    BM, BN, BK, TM, TN = cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn
    NT, TPW, W, STAGES = cfg.threads, cfg.threads_per_wtile, cfg.vec, cfg.stages
    WM, WN, WMITER, WNITER, WSUBM, WSUBN = cfg.wm, cfg.wn, cfg.wmiter, cfg.wniter, cfg.wsubm, cfg.wsubn
    WTN = BN // WN                        # warp tiles across the block
    TCOLS = WSUBN // TN                   # threads across one sub-tile
    A_MS, A_KS = (1, BM + cfg.a_pad) if cfg.a_kmajor else (BK, 1)   # As element (m,k) at m*A_MS + k*A_KS
    A_T, B_T = cfg.a_tile_floats, cfg.b_tile_floats
    EA, EB = BM * BK // NT, BK * BN // NT           # elements each thread loads per k-tile
    NACC, NM, NN = cfg.outputs_per_thread, WMITER * TM, WNITER * TN
    SA, SB = STAGES * A_T, STAGES * B_T     # array sizes must be plain constants for Numba
    VSTORE, SPLIT = cfg.vector_stores, cfg.split_tail     # (SPLIT: no atomic epilogue compiled without it)
    if SPLIT and not epi.plain:
        raise ValueError("a split tile sums partial products atomically: an epilogue needs split_tail=False")
    # the unchecked loads step whole lines of chunks per pass of the block's threads
    FAST = NT % ((BM if ta else BK) // W) == 0 and NT % ((BK if tb else BN) // W) == 0
    # the parts
    block_tile = make_scheduler(BM, BN, BK, SPLIT)
    origin, load, stage = make_load(BM, BN, BK, ta, tb, W, va, vb, NT, A_MS, A_KS, A_T, B_T)
    mac_tile = make_mac_tile(BK, A_MS, A_KS, BN, WMITER, WSUBM, TM, WNITER, WSUBN, TN)
    mainloop = make_mainloop(origin, load, stage, mac_tile, BM, BN, BK, STAGES, A_T, B_T, FAST)
    store_c = make_store_c(WMITER, WSUBM, TM, WNITER, WSUBN, TN, vc and VSTORE, make_epilogue(epi))

    def tiled(A, B, C, M, N, K, lda, ldb, ldc, GN, WHOLE, PARTS, PER, ep):
        """(GN, WHOLE, PARTS, PER: the tail split's tiling, ``tiled_plan``.)"""
        pA, pB, pC = f32_ptr(A), f32_ptr(B), f32_ptr(C)
        sA = cuda.shared.array(SA, float32)
        sB = cuda.shared.array(SB, float32)
        psA, psB = ptr(sA), ptr(sB)
        ra = cuda.local.array(EA, float32)
        rb = cuda.local.array(EB, float32)
        rm = cuda.local.array(NM, float32)
        rn = cuda.local.array(NN, float32)
        acc = cuda.local.array(NACC, float32)
        _zero_rows(NM, acc, NN)
        tid = cuda.threadIdx.x
        tile = block_tile(GN, WHOLE, PARTS, PER, K)
        m0, n0 = _thread_origin(tid, TPW, WTN, WM, WN, TCOLS, TM, TN)
        mainloop(acc, rm, rn, ra, rb, psA, psB, (pA, pB, lda, ldb, M, N, K), tile, m0, n0, tid)
        store_c(pC, ldc, M, N, acc, tile[0] + m0, tile[1] + n0, tile[4], ep)

    return kernel(tiled, (_I64,) * 13, launch_bounds=(NT, cfg.min_blocks), max_shared=True,
                  values=len(epi.slots()))


# ---------------------------------------------------------------------------------------------
# Host side: grids, launches and the rung table
# ---------------------------------------------------------------------------------------------
def launch_grid(rung: int, cfg, m: int, n: int):
    """(grid, block) for a rung: x walks N tiles, y walks M tiles (rung 1: x walks M); a
    configuration with ``split_tail`` numbers its tiles along x alone (``tiled_plan``)."""
    if rung == 1:
        grid, block = (cdiv(m, 32), cdiv(n, 32)), (32, 32)
    elif rung == 2:
        grid, block = (cdiv(n, 32), cdiv(m, 32)), (1024,)
    elif cfg.split_tail:
        return tiled_plan(cfg, m, n, 0)[0], (cfg.threads,)
    else:
        grid, block = (cdiv(n, cfg.bn), cdiv(m, cfg.bm)), (cfg.threads,)
    if grid[1] > 65535:
        raise ValueError(f"a {m}x{n} output needs a grid of {grid} blocks; the y dimension is "
                         "limited to 65535 (split the problem)")
    return grid, block


def _untiled_plan(rung, factory):
    def plan(a, b, c, dev, epi=PLAIN):
        grid, block = launch_grid(rung, None, c.rows, c.cols)
        return [Step(factory(a.trans, b.trans, epi), grid, block, operand_args(a, b, c))]
    return plan


@kernel_factory
def _zero_kernel():
    def zero_rows(C, row0, rows, cols, ldc):
        pC = f32_ptr(C)
        i = cuda.grid(1)
        if i < rows * cols:
            r = i // cols
            pC[(row0 + r) * ldc + i - r * cols] = float32(0)
    return kernel(zero_rows, (_I64,) * 5)


def tiled_plan(cfg: SimtConfig, m: int, n: int, k: int, slots: int = 0):
    """((blocks,), (GN, WHOLE, PARTS, PER)) for a ``split_tail`` configuration: the 1-D grid and
    the kernel's tile arguments, the last partial wave split along K when ``slots`` (blocks
    resident at once) is given (``schedule.tail_split``)."""
    gn = cdiv(n, cfg.bn)
    tiles, ktiles = gn * cdiv(m, cfg.bm), cdiv(k, cfg.bk)
    whole, parts, per = tail_split(tiles, slots, ktiles)
    return (whole + (tiles - whole) * parts,), (gn, whole, parts, per)


def _tiled_plan(rung, cfg):
    def plan(a, b, c, dev, epi=PLAIN, slots=None):
        """slots: blocks resident at once, for the tail split (default: this GPU's SMs times the
        blocks per SM of the compiled kernel; none under the simulator). With an epilogue the
        tail is not split (the epilogue applies once, to whole sums)."""
        conf = cfg if epi.plain else cfg.replace(split_tail=False)
        k = tiled_kernel(conf, a.trans, b.trans, *vector_flags(conf, a.aligned16, b.aligned16, c.aligned16), epi)
        m, n, kk, lda, ldb, ldc = c.rows, c.cols, a.cols, a.ld, b.ld, c.ld
        if not conf.split_tail:
            grid, block = launch_grid(rung, conf, m, n)
            return [Step(k, grid, block, lambda pa, pb, pc, *ep: (pa, pb, pc, m, n, kk, lda, ldb, ldc, 0, 0, 1, 0, *ep))]
        steps = []
        if slots is None and not SIMULATOR:
            from . import driver
            step = Step(k, 1, cfg.threads, None, fn=driver.load(k, dev))
            slots = driver.sm_count(dev) * driver.occupancy(step.fn, cfg.threads)
        (grid,), tiling = tiled_plan(cfg, m, n, kk, slots or 0)
        gn, whole, parts, _ = tiling
        if parts > 1:        # split tiles are sums of atomic adds: zero their rows of C first
            row0 = whole // gn * cfg.bm
            n_zero = (m - row0) * n
            steps.append(Step(_zero_kernel(), cdiv(n_zero, 256), 256,
                              lambda pa, pb, pc, *ep: (pc, row0, m - row0, n, ldc)))
        steps.append(Step(k, grid, cfg.threads,
                          lambda pa, pb, pc, *ep: (pa, pb, pc, m, n, kk, lda, ldb, ldc, *tiling, *ep)))
        return steps
    return plan


def vector_flags(cfg: SimtConfig, va: bool, vb: bool, vc: bool):
    """The alignment flags (va, vb, vc) of ``tiled_kernel`` as its code uses them: 16-byte loads
    exist only with ``vector_loads`` (cfg.vec == 4), 16-byte stores only with ``vector_stores``
    and ``tn`` a multiple of 4; a flag the kernel ignores is passed as False, so that one kernel
    (one cache entry, one ahead-of-time compile) serves both values. The planner and the
    ahead-of-time list (``_kernels``) both go through it."""
    loads = cfg.vec == 4
    return va and loads, vb and loads, vc and cfg.vector_stores and cfg.tn % 4 == 0


def _kernels(rung, factory=None, cfg=None):
    """Every kernel the rung's planner can pick (for ahead-of-time compiles, ``aot.precompile``):
    one per layout (ta, tb), and for the tiled rungs per alignment of A, B and C that the kernel
    distinguishes (``vector_flags``), and the zeroing kernel of the tail split. (An epilogue
    makes other kernels, compiled on first use.)"""
    def kernels(dtype):
        out = []
        flags = sorted({vector_flags(cfg, *f) for f in product((True, False), repeat=3)}, reverse=True) if cfg else []
        for ta in (False, True):
            for tb in (False, True):
                if factory:
                    out.append(factory(ta, tb))
                else:
                    out += [tiled_kernel(cfg, ta, tb, *f) for f in flags]
        if cfg is not None and cfg.split_tail:
            out.append(_zero_kernel())
        return out
    return kernels


RUNG3 = SimtConfig(bm=32, bn=32, bk=32, threads=1024)
RUNG4 = SimtConfig(bm=64, bn=64, bk=8, tm=8, tn=1, threads=512)
RUNG5 = SimtConfig(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256)
RUNG6 = RUNG5.replace(a_kmajor=True, vector_loads=True, min_blocks=2)
# Rung 7 as tuned on the H100 (benchmarks/tune.py simt, results/tune_simt_h100.json): 128x64 block
# tiles of four 64x32 warp tiles, 3 blocks per SM (<= 168 registers, no spills). 4-byte C stores:
# a 16-byte store needs its 4 accumulators in 4 consecutive registers, like the LDS.128 that
# loads B, so accumulator j and B value j always shared a register bank (1434-1811 of 2048 FFMA
# conflicted; 567 without). split_tail: 4096^3 is 5 waves of 396 blocks plus 68 tiles.
RUNG7 = SimtConfig(bm=128, bn=64, bk=16, tm=4, tn=4, threads=128, warptile=True, wm=64, wn=32,
                   wniter=2, a_kmajor=True, a_pad=4, vector_loads=True, stages=2, min_blocks=3,
                   vector_stores=False, split_tail=True)

_F32 = ("float32",)
RUNGS = [
    Variant("naive", "simt", 1, _F32, (3, 5), "one thread per output; a warp walks down a column, "
            "so its A and C accesses are strided (uncoalesced)", _untiled_plan(1, naive_kernel), kernels=_kernels(1, naive_kernel)),
    Variant("coalesced", "simt", 2, _F32, (3, 5), "a warp takes 32 neighbouring columns: B loads "
            "and C stores coalesce into 128-byte lines", _untiled_plan(2, coalesced_kernel), kernels=_kernels(2, coalesced_kernel)),
    Variant("smem", "simt", 3, _F32, (3, 5), "32x32 tiles of A and B staged in shared memory: "
            "each global element is read once per block instead of once per thread", _tiled_plan(3, RUNG3), RUNG3, kernels=_kernels(3, cfg=RUNG3)),
    Variant("blocktile1d", "simt", 4, _F32, (3, 5), "each thread computes 8 outputs down a column "
            "(64x64x8 tiles): one shared B load feeds 8 FMAs", _tiled_plan(4, RUNG4), RUNG4, kernels=_kernels(4, cfg=RUNG4)),
    Variant("blocktile2d", "simt", 5, _F32, (3, 5), "each thread computes an 8x8 outer product "
            "(128x128x8 tiles): 16 shared loads feed 64 FMAs", _tiled_plan(5, RUNG5), RUNG5, kernels=_kernels(5, cfg=RUNG5)),
    Variant("vectorized", "simt", 6, _F32, (3, 5), "tiles load as 16-byte LDG.128 and A is stored "
            "transposed, so a thread's A values for one k are adjacent (LDS.128 without the extra "
            "registers of merging across k): at most 128 registers, two blocks per SM", _tiled_plan(6, RUNG6), RUNG6, kernels=_kernels(6, cfg=RUNG6)),
    Variant("warptile", "simt", 7, _F32, (3, 5), "warps own 64x32 sub-tiles, a register-prefetched "
            "double buffer hides global latency behind the FMAs, 3 blocks per SM; C is stored 4 bytes "
            "at a time (16-byte stores pin accumulators to their B operands' register banks) and the "
            "tiles of a last partial wave are split along K", _tiled_plan(7, RUNG7), RUNG7, kernels=_kernels(7, cfg=RUNG7)),
]


def variant_from(cfg: SimtConfig, name: str) -> Variant:
    """An unregistered variant of the tiled kernel with configuration ``cfg`` (``api.variant_from``)."""
    return Variant(name, "simt", 0, _F32, (3, 5), f"the tiled SIMT kernel with {cfg}", _tiled_plan(3, cfg), cfg,
                   kernels=_kernels(3, cfg=cfg))
