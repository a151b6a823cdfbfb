"""The Hopper kernel, composed from its parts: the consumer warpgroups (mainloop, then epilogue, per
unit of the scheduler's walk), the producer, and for rungs 1-2 the one-tile loop before warp
specialization."""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32, uint32

from .. import layout
from ..config import WgmmaConfig
from ..epilogue import PLAIN
from ..epilogue import make as make_epilogue
from ..fragments import OUT_CONVERT, make_store_out
from ..intrinsics import ptr
from ..jit import device, kernel, kernel_factory
from ..primitives import (cluster_sync, grid_dep_wait, named_barrier, named_barrier_arrive, setmaxnreg_dec,
                          setmaxnreg_inc, smem_addr, wgmma_wait)
from ..schedule import tile_origin
from .mainloop import make_mainloop
from .mma import _regs_a, make_slice_group, make_slice_mma
from .pipeline import Ring, RingPos, make_init_ring, make_ring
from .producer import _b_source, make_finish_stage, make_load_stage, make_producer
from .promotion import _promoted_mainloop
from .scheduler import make_scheduler
from .spec import KernelSpec
from .staging import _kernel_stager
from .store import Output, make_epilogue_part


# Kernel parameters: tensor maps of A, B and C (by value); C's address; M, N, K; ldc; K slices per
# split (split-K and tail-split kernels; others ignore it); batches and which operands have them
# (bit 0: A, bit 1: B; a batched kernel's broadcast operand is read at batch 0; others ignore
# both); B's address and row pitch in elements (a kernel that copies B by cp.async, ``async_b``;
# others ignore them); the tail's partial-sum blocks and the whole tiles before it (``tail``)
PARAMS = ("map",) * 3 + ("i64",) * 12


TURN_BAR = 4             # ping-pong: consumer wg's mainloop waits at TURN_BAR + wg for the other's turn to end


@lru_cache(maxsize=None)
def make_consumer(walk_unit, mainloop, store, drain, cfg: WgmmaConfig, PLANE, TRANS=False, part=None):
    """A consumer warpgroup of ``cfg``: ``consumer(acc, pacc, C, out, ring, ebase, w, wg, tid, ep,
    P)``: for each unit of walk ``w``, the mainloop over ``ring``, then the epilogue (``store`` to
    C, ``out`` its ``store.Output``; then ``drain`` once at the end). A split-K unit writes its
    partial sum to plane s of C, PLANE bytes per element of M x ldc (N x ldc where the kernel's
    product is C's transpose, TRANS; ``fixup`` adds the planes); a batched one, to matrix s. With
    ``part`` (a tail-split kernel, ``make_scheduler``'s TAIL), a split unit (s >= 0) writes its
    partial sum with ``part`` (``fragments.make_store_out``, fp32) to block s at P, CL * BM x BN
    floats of its cluster's tiles (``fixup.tail_fixup_kernel`` adds them); a whole tile goes to C
    by ``store``. With PING (``WgmmaConfig.pingpong``), consumer wg takes units wg, wg + 2, ... of
    the walk, each a whole tile, and passes over the other's slices in the ring; its mainloop runs
    while the other's epilogue does. The mainloops take turns (CUTLASS's ordered math barrier):
    one starts once the other's, of the unit before, has waited on all its stages, so that a
    stage's full barrier is never waited on two phases ahead (a parity wait could not tell)."""
    NACC, WG_M, BM, BN, CL, PING = cfg.acc_regs, cfg.wg_m, cfg.bm, cfg.bn, cfg.cluster, cfg.pingpong
    skip = make_ring(cfg.stages).skip

    @device
    def consumer(acc, pacc, C, out, ring, ebase, w, wg, tid, ep, P):
        tw = tid & 127
        lane = tid & 31
        a_row0 = 0 if PING else wg * WG_M                 # this consumer's rows of the A tile
        m_warp = a_row0 + 16 * ((tid >> 5) & 3)           # and this warp's rows of C
        s = 0                       # the ring position as two integers across the units (``make_ring``)
        ph = 0
        nbox = 0
        first, stride = w.first, w.stride
        if PING:
            first, stride = w.first + wg * w.stride, 2 * w.stride
            if wg == 1 and w.first < w.units:
                s, ph = skip(RingPos(s, ph), walk_unit(w, w.first).kslices)
        for u in range(first, w.units, stride):
            bm0, bn0, sp, k0, kn = walk_unit(w, u)
            for i in range(NACC):
                acc[i] = float32(0)
            if PING and u > w.first:
                named_barrier(TURN_BAR + wg, 256)                 # the other's turn is over
            s, ph = mainloop(pacc, ring, RingPos(s, ph), kn, a_row0, lane, k0, bm0 + m_warp, bn0, ep)
            if PING and u + w.stride < w.units:
                named_barrier_arrive(TURN_BAR + 1 - wg, 256)      # the other's turn
            if part is None:
                nbox = store(acc, C + sp * ((out.n if TRANS else out.m) * out.ldc * PLANE), out, ebase, nbox,
                             bm0 + m_warp, bn0, wg, tw, lane, ep, sp)
            elif sp < 0:
                nbox = store(acc, C, out, ebase, nbox, bm0 + m_warp, bn0, wg, tw, lane, ep, 0)
            else:
                part(P + sp * (CL * BM * BN * 4), BN, CL * BM, BN, acc, w.rank * BM + m_warp, 0, lane, ep)
            if PING and u + w.stride < w.units:
                s, ph = skip(RingPos(s, ph), walk_unit(w, u + w.stride).kslices)
        drain(tw)
    return consumer


@lru_cache(maxsize=None)
def make_one_tile(produce, consume, store, BM, BN, BK, GROUP, WG_M, NACC, S, STAGE):
    """Rungs 1-2, before warp specialization: ``one_tile(acc, pacc, C, out, tma_a, tma_b, ring,
    grid_m, grid_n, ktiles, tid, ep)``: every warpgroup consumes one tile, thread 0 keeps the ring
    full (``produce``), and the block synchronises once per K slice; ``store``: a register
    epilogue (``make_epilogue_part`` without TMA_C)."""
    ops = make_ring(S, STAGE)
    stage_at, full, advance = ops.stage, ops.full, ops.advance

    @device
    def one_tile(acc, pacc, C, out, tma_a, tma_b, ring, grid_m, grid_n, ktiles, tid, ep):
        bm0, bn0 = tile_origin(cuda.blockIdx.x, grid_m, grid_n, GROUP, BM, BN)
        a_row0 = (tid >> 7) * WG_M
        for i in range(NACC):
            acc[i] = float32(0)
        if tid == 0:
            for s in range(S):
                if s < ktiles:
                    produce(tma_a, tma_b, stage_at(ring, s), full(ring, s), bm0, bn0, s * BK, 0, 0, 0)
        s = 0                                         # (the ring position as two integers: ``make_ring``)
        ph = 0
        for t in range(ktiles):
            consume(pacc, stage_at(ring, s), full(ring, s), ph, a_row0)
            wgmma_wait(0)
            cuda.syncthreads()                        # every warpgroup is done with stage s
            if tid == 0 and t + S < ktiles:
                produce(tma_a, tma_b, stage_at(ring, s), full(ring, s), bm0, bn0, (t + S) * BK, 0, 0, 0)
            s, ph = advance(RingPos(s, ph))
        store(acc, C, out, 0, 0, bm0 + a_row0 + 16 * ((tid >> 5) & 3), bn0, 0, tid & 127, tid & 31, ep, 0)
    return one_tile


def _consumer_parts(spec: KernelSpec, walk_unit, consume):
    """The consumer warpgroup of ``spec``'s kernel (``make_consumer``), over its mainloop
    (promoted for fp8) and its epilogue part (with a staged epilogue array where ``cfg`` has one)."""
    cfg, epi, out_dtype = spec.cfg, spec.epi, spec.out_dtype
    MI, BN, S, STAGE, NACC = cfg.wg_m // 64, cfg.bn, cfg.stages, cfg.stage_bytes, cfg.acc_regs
    stager = _kernel_stager(cfg, epi, out_dtype, spec.whole_tiles)
    store, drain = make_epilogue_part(MI, BN, out_dtype, spec.vc, spec.box_store, cfg.epi_boxes, epi, spec.batch,
                                      spec.trans_c, cfg.smem.per_consumer, stager)
    if cfg.promote:
        issue = make_slice_group(spec.dtype, spec.a_kmajor, spec.b_kmajor, MI, cfg.promote_n, spec.a_bytes,
                                 spec.dtype_b, NACC)
        mainloop = _promoted_mainloop(cfg, issue, epi, out_dtype, spec.split, S, STAGE, NACC)
    else:
        mainloop = make_mainloop(consume, S, STAGE, cfg.cluster,
                                 4 if _regs_a(spec.dtype, spec.a_kmajor, spec.b_kmajor) else 1,
                                 stager and stager[0], cfg.epi_lead, cfg.epi_spread)
    part = make_store_out(MI * (BN // 8), BN // 8, 64, 4, OUT_CONVERT["float32"], True, 8, make_epilogue(PLAIN)) \
        if spec.tail else None
    return make_consumer(walk_unit, mainloop, store, drain, cfg, layout.ITEMSIZE[out_dtype], spec.trans_c, part)


def _one_tile_part(spec: KernelSpec, consume):
    """Rungs 1-2's loop (``make_one_tile``) for ``spec``."""
    cfg = spec.cfg
    load = make_load_stage(spec.a_kmajor, spec.b_kmajor, cfg.bm, cfg.bn, spec.a_bytes, cfg.tma_bytes, 1,
                           ITEM=spec.item)
    store = make_epilogue_part(cfg.wg_m // 64, cfg.bn, spec.out_dtype, spec.vc, False, cfg.epi_boxes, spec.epi, False,
                               spec.trans_c)[0]
    return make_one_tile(load, consume, store, cfg.bm, cfg.bn, spec.bk, cfg.group_m, cfg.wg_m, cfg.acc_regs,
                         cfg.stages, cfg.stage_bytes)


@kernel_factory
def wgmma_kernel(spec: KernelSpec):
    """The Hopper kernel of ``spec``: the ring's setup, then (rungs 1-2) every warpgroup on one
    tile, or the producer warpgroup's loads beside the consumers' mainloops and epilogues over
    the scheduler's walk."""
    cfg, async_b = spec.cfg, spec.async_b
    BM, BN, S, CONS, CL = cfg.bm, cfg.bn, cfg.stages, cfg.consumers, cfg.cluster
    BK = spec.bk
    PRODUCER, (REG_P, REG_C) = cfg.producer, cfg.regs
    LOCAL, STAGE = cfg.local_regs, cfg.stage_bytes
    EPI_AT, BARS_AT = cfg.smem.epilogue, cfg.smem.barriers      # (config.SmemLayout)
    # empty: lane 0 of every warp of the cluster's consumers of a stage (ping-pong: one warpgroup's)
    init_ring = make_init_ring(S, (1 if cfg.pingpong else CONS) * 4 * CL, CL, async_b)
    consume = make_slice_mma(spec.dtype, spec.a_kmajor, spec.b_kmajor, cfg.wg_m // 64, BN, spec.a_bytes, spec.dtype_b)
    walk, walk_unit = make_scheduler(BM, BN, cfg.group_m, CL, spec.split, spec.batch, spec.tail)
    producer = make_producer(walk_unit, make_load_stage(spec.a_kmajor, spec.b_kmajor, BM, BN, spec.a_bytes,
                                                        cfg.tma_bytes, CL, spec.batch, async_b, spec.item),
                             S, STAGE, BK, make_finish_stage(BN, spec.a_bytes) if async_b else None)
    b_source = _b_source(async_b)
    consumer = _consumer_parts(spec, walk_unit, consume)
    one_tile = _one_tile_part(spec, consume)

    def wgmma_gemm(TMA_A, TMA_B, TMC, C, M, N, K, ldc, kper, batches, bmask, PB, LDB, P, WHOLE, ep):
        smem = cuda.shared.array(0, uint32)
        sbase = layout.align_up(smem_addr(ptr(smem)), layout.SWIZZLE_ALIGN)
        ebase = sbase + EPI_AT                            # output boxes (tma_store)
        bars = sbase + BARS_AT                            # the ring's mbarriers
        tid = cuda.threadIdx.x
        wg = tid >> 7
        ring = Ring(sbase, bars)
        out = Output(TMC, ldc, M, N)
        init_ring(bars, TMA_A, TMA_B)
        grid_m = (M + BM - 1) // BM
        grid_n = (N + BN - 1) // BN
        ktiles = (K + BK - 1) // BK
        acc = cuda.local.array(LOCAL, float32)
        pacc = ptr(acc)
        if not PRODUCER:
            grid_dep_wait()                               # a copy before it done (launched as its dependent)
            one_tile(acc, pacc, C, out, TMA_A, TMA_B, ring, grid_m, grid_n, ktiles, tid, ep)
            return
        w = walk(grid_m, grid_n, ktiles, kper, batches, WHOLE)
        if wg == CONS:                                    # warpgroup CONS produces (one thread) ...
            if REG_P > 0:
                setmaxnreg_dec(REG_P)
            if async_b or tid == CONS * 128:               # (all of it with async_b)
                grid_dep_wait()                           # a copy before it done (launched as its dependent)
                producer(TMA_A, b_source(TMA_B, PB, LDB, N, K), ring, w, bmask)
        else:                                             # ... warpgroups 0..CONS-1 consume
            if REG_C > 0:
                setmaxnreg_inc(REG_C)
            consumer(acc, pacc, C, out, ring, ebase, w, wg, tid, ep, P)
        if CL > 1:
            cluster_sync()          # no CTA leaves while a peer may still multicast into it

    return kernel(wgmma_gemm, PARAMS, launch_bounds=(cfg.threads, cfg.min_blocks), values=len(spec.epi.slots()))
