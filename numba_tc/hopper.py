"""The Hopper ladder: TMA, wgmma and mbarrier pipelines from Numba (sm_90a), composing the
primitives of ``ptx/hopper.cu``.

One kernel, built from a ``WgmmaConfig``; each rung switches on one more knob, so two rungs differ
by exactly their note:

1. ``wgmma_tma``: TMA loads a multi-stage ring of 128B-swizzled tiles, completing on an mbarrier
   per stage; one warpgroup issues ``wgmma`` straight from shared memory. The first thread refills
   a stage once the block (one ``__syncthreads`` per K slice) is done with it.
2. ``wgmma_wide``: 128x256 tiles, two consumer warpgroups of m64n256k16 (twice the work per byte
   loaded).
3. ``wgmma_ws``: warp specialization: a producer warpgroup issues TMA; consumers wait on a *full*
   barrier per stage and release it on an *empty* one, keeping one wgmma group in flight. No
   block-wide barrier is left in the main loop.
4. ``wgmma_regs``: ``setmaxnreg``: the producer gives its registers back, the consumers take them.
5. ``wgmma_persistent``: one block per SM walks the tiles in grouped order; the producer fills the
   ring for the next tile while the consumers write the last one out.

Conventions (as in ``tensorcore.py``): C (M x N, row-major, ``ldc``) = A (M x K) @ B (K x N);
``ta``/``tb`` say A/B are column-major. Each operand is loaded as it lies in global memory: a
k-major one (A row-major, B column-major) as one TMA box of [rows][64 k], an mn-major one as
boxes of [64 k][64 mn], read by wgmma with its transpose flag; no layout needs a host copy.
Ragged M, N, K: TMA zero-fills boxes past the edges and the epilogue writes only inside C.
TMA needs 16-byte aligned rows (``link.tma_requirements``); other operands are refused with the
reason, and ``variant="auto"`` falls back to the mma.sync ladder for them.
"""
from __future__ import annotations

import functools

from numba import cuda, float32, int64, uint32

from . import layout
from .config import Variant, WgmmaConfig
from .jit import device, kernel, unrolled
from .layout import wgmma_desc, wgmma_operand_offset
from .link import (mbar_arrive, mbar_expect_tx, mbar_fence_init, mbar_init, mbar_wait, ptr,
                   setmaxnreg_dec, setmaxnreg_inc, smem_addr, tma_load_2d, tma_prefetch_map,
                   tma_requirements, wgmma_commit, wgmma_fence, wgmma_m64n64k16, wgmma_m64n128k16,
                   wgmma_m64n256k16, wgmma_wait)
from .schedule import tile_origin
from .tensorcore import OUT_KIND, store_fragment

__all__ = ["RUNGS", "wgmma_kernel", "SIGNATURE", "KIND"]

KIND = {"float16": 0, "bfloat16": 1}            # ptx/hopper.cu wgmma input kinds
_WGMMA = {64: wgmma_m64n64k16, 128: wgmma_m64n128k16, 256: wgmma_m64n256k16}
BK = 64                                        # K elements per slice (one 128-byte swizzled row)
SIGNATURE = (int64,) * 7                       # tensor map A, tensor map B, C; M, N, K; ldc


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# Device pieces
# ---------------------------------------------------------------------------------------------
@device
def _operand_desc(tile, kmajor, mn, ks):
    """The wgmma descriptor of the operand at row/column ``mn`` and k16 step ``ks`` of a stored
    tile at shared address ``tile`` (layout facts: ``layout.wgmma_operand_offset``)."""
    lbo = 16 if kmajor else layout.BOX_BYTES       # (k-major: unused by the 128B swizzle)
    return wgmma_desc(tile + wgmma_operand_offset(kmajor, mn, ks), lbo, layout.ATOM_BYTES, layout.SW128)


@device
def _load_operand(tmap, dst, kmajor, ROWS, mn0, k0, bar):
    """TMA the K slice at k0 of rows/columns mn0..mn0+ROWS of an operand into ``dst``."""
    if kmajor:                                     # one box of [ROWS][64 k]
        tma_load_2d(dst, tmap, k0, mn0, bar)
    else:                                          # ROWS / 64 boxes of [64 k][64 mn]
        for j in range(ROWS // 64):
            tma_load_2d(dst + j * layout.BOX_BYTES, tmap, mn0 + 64 * j, k0, bar)


@device
def _produce(tma, tmb, stage, full, bm0, bn0, k0, A_KM, B_KM, BM, BN, A_BYTES, STAGE):
    """Expect a whole stage of bytes on ``full`` (zero-filled parts of a box count too), then
    issue the loads of A's and B's K slice k0."""
    mbar_expect_tx(full, STAGE)
    _load_operand(tma, stage, A_KM, BM, bm0, k0, full)
    _load_operand(tmb, stage + A_BYTES, B_KM, BN, bn0, k0, full)


@device
def _wgmma_one(t, pacc, stage, a_row0, A_BYTES, A_KM, B_KM, TA, TB, MI, BN, KND, WG):
    """wgmma number t of a K slice: k16 step t // MI, m64 block t % MI of this warpgroup's rows."""
    ks = t // MI
    mi = t - ks * MI
    da = _operand_desc(stage, A_KM, a_row0 + 64 * mi, ks)
    db = _operand_desc(stage + A_BYTES, B_KM, 0, ks)
    WG(pacc, mi * (BN // 2), da, db, 1, KND, TA, TB)


_wgmma_all = unrolled(_wgmma_one, 16)


@device
def _store_one(t, C, ldc, M, N, acc, m0, n0, lane, NI, OUT_ITEM, OUT_K, vc):
    """Accumulator fragment t (m64 block t // NI, n8 column block t % NI) of this warp."""
    i = t // NI
    j = t - i * NI
    store_fragment(C, ldc, M, N, acc, 4 * t, m0 + 64 * i, n0 + 8 * j, lane, OUT_ITEM, OUT_K, vc)


_store_all = unrolled(_store_one, 64)


@device
def _advance(s, ph, S):
    """Next ring stage and the barrier phase parity that goes with it."""
    if s == S - 1:
        return 0, ph ^ 1
    return s + 1, ph


@functools.lru_cache(maxsize=None)
def wgmma_kernel(cfg: WgmmaConfig, dtype: str, out_dtype: str, ta: bool, tb: bool, vc: bool):
    """The Hopper kernel for one configuration, input type, output type and operand layout."""
    BM, BN, S, CONS = cfg.bm, cfg.bn, cfg.stages, cfg.consumers
    PRODUCER, (REG_P, REG_C), GROUP = cfg.producer, cfg.regs, cfg.group_m
    WG_M = cfg.wg_m
    MI = WG_M // 64
    NACC = MI * BN // 2
    NI = BN // 8
    A_KM, B_KM = not ta, tb                     # k-major: K contiguous
    TA, TB = int(not A_KM), int(not B_KM)       # wgmma transpose flags: operand is mn-major
    A_BYTES = BM * BK * 2
    STAGE = cfg.stage_bytes
    KND = KIND[dtype]
    WG = _WGMMA[BN]
    OUT_K = OUT_KIND[out_dtype]
    OUT_ITEM = 4 if OUT_K == 0 else 2
    NT = cfg.threads
    EMPTY_ARRIVALS = CONS * 4                   # lane 0 of every consumer warp releases a stage

    def wgmma_gemm(TMA_A, TMA_B, C, M, N, K, ldc):
        smem = cuda.shared.array(0, uint32)
        sbase = (smem_addr(ptr(smem)) + 1023) & ~1023    # the swizzle repeats every 1024 bytes
        bars = sbase + S * STAGE                          # full[s] at bars + 8s, empty[s] after
        tid = cuda.threadIdx.x
        wg = tid >> 7
        lane = tid & 31
        if tid == 0:
            tma_prefetch_map(TMA_A)
            tma_prefetch_map(TMA_B)
            for s in range(S):
                mbar_init(bars + 8 * s, 1)
                mbar_init(bars + 8 * (S + s), EMPTY_ARRIVALS)
            mbar_fence_init()
        cuda.syncthreads()

        grid_m = (M + BM - 1) // BM
        grid_n = (N + BN - 1) // BN
        ntiles = grid_m * grid_n
        ktiles = (K + BK - 1) // BK
        acc = cuda.local.array(NACC, float32)
        pacc = ptr(acc)
        a_row0 = wg * WG_M                                # this consumer's rows of the A tile
        m_warp = a_row0 + 16 * ((tid >> 5) & 3)           # and this warp's rows of C

        if not PRODUCER:
            # Rungs 1-2: every warpgroup consumes; thread 0 keeps the ring full.
            bm0, bn0 = tile_origin(cuda.blockIdx.x, grid_m, grid_n, GROUP, BM, BN)
            for i in range(NACC):
                acc[i] = float32(0)
            if tid == 0:
                for s in range(S):
                    if s < ktiles:
                        _produce(TMA_A, TMA_B, sbase + s * STAGE, bars + 8 * s, bm0, bn0, s * BK,
                                 A_KM, B_KM, BM, BN, A_BYTES, STAGE)
            s = 0
            ph = 0
            for t in range(ktiles):
                mbar_wait(bars + 8 * s, ph)
                wgmma_fence()
                _wgmma_all(4 * MI, pacc, sbase + s * STAGE, a_row0, A_BYTES, A_KM, B_KM, TA, TB, MI, BN, KND, WG)
                wgmma_commit()
                wgmma_wait(0)
                cuda.syncthreads()                        # every warpgroup is done with stage s
                if tid == 0 and t + S < ktiles:
                    _produce(TMA_A, TMA_B, sbase + s * STAGE, bars + 8 * s, bm0, bn0, (t + S) * BK,
                             A_KM, B_KM, BM, BN, A_BYTES, STAGE)
                s, ph = _advance(s, ph, S)
            _store_all(MI * NI, C, ldc, M, N, acc, bm0 + m_warp, bn0, lane, NI, OUT_ITEM, OUT_K, vc)
            return

        # Rungs 3-5: warpgroup CONS produces, warpgroups 0..CONS-1 consume. Tiles pid, pid + grid, ..
        # (one tile per block unless the grid is persistent).
        if wg == CONS:
            if REG_P > 0:
                setmaxnreg_dec(REG_P)
            if tid == CONS * 128:
                s = 0
                ph = 0
                for tile in range(cuda.blockIdx.x, ntiles, cuda.gridDim.x):
                    bm0, bn0 = tile_origin(tile, grid_m, grid_n, GROUP, BM, BN)
                    for t in range(ktiles):
                        mbar_wait(bars + 8 * (S + s), ph ^ 1)     # consumers released the stage
                        _produce(TMA_A, TMA_B, sbase + s * STAGE, bars + 8 * s, bm0, bn0, t * BK,
                                 A_KM, B_KM, BM, BN, A_BYTES, STAGE)
                        s, ph = _advance(s, ph, S)
        else:
            if REG_C > 0:
                setmaxnreg_inc(REG_C)
            s = 0
            ph = 0
            for tile in range(cuda.blockIdx.x, ntiles, cuda.gridDim.x):
                bm0, bn0 = tile_origin(tile, grid_m, grid_n, GROUP, BM, BN)
                for i in range(NACC):
                    acc[i] = float32(0)
                prev = 0
                for t in range(ktiles):
                    mbar_wait(bars + 8 * s, ph)
                    wgmma_fence()
                    _wgmma_all(4 * MI, pacc, sbase + s * STAGE, a_row0, A_BYTES, A_KM, B_KM, TA, TB, MI, BN, KND, WG)
                    wgmma_commit()
                    wgmma_wait(1)                         # the slice before this one is done:
                    if t > 0 and lane == 0:
                        mbar_arrive(bars + 8 * (S + prev))   # release its stage
                    prev = s
                    s, ph = _advance(s, ph, S)
                wgmma_wait(0)
                if lane == 0:
                    mbar_arrive(bars + 8 * (S + prev))
                _store_all(MI * NI, C, ldc, M, N, acc, bm0 + m_warp, bn0, lane, NI, OUT_ITEM, OUT_K, vc)

    return kernel(wgmma_gemm, launch_bounds=(NT, cfg.min_blocks), cache=False)


# ---------------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------------
def _check(a, b, c):
    for name, x in (("a", a), ("b", b)):
        why = tma_requirements(x.ptr, x.ld, x.itemsize)
        if why:
            return f"operand {name} cannot be read by TMA: {why}"
    return None


def operand_maps(cfg: WgmmaConfig, a, b):
    """Device addresses of A's and B's tensor maps: a k-major operand in boxes of [rows][64 k],
    an mn-major one in boxes of [64 k][64 mn] (see ``link.tensor_map``; cached)."""
    from .link import tensor_map
    if not a.trans:     # A row-major: M rows of K
        ma = tensor_map(a.ptr, a.dtype, a.cols, a.rows, a.ld, BK, cfg.bm)
    else:               # A column-major: K rows of M
        ma = tensor_map(a.ptr, a.dtype, a.rows, a.cols, a.ld, 64, BK)
    if b.trans:         # B column-major: N rows of K
        mb = tensor_map(b.ptr, b.dtype, b.rows, b.cols, b.ld, BK, cfg.bn)
    else:               # B row-major: K rows of N
        mb = tensor_map(b.ptr, b.dtype, b.cols, b.rows, b.ld, 64, BK)
    return ma, mb


def grid_size(cfg: WgmmaConfig, m: int, n: int) -> int:
    from .link import sm_count
    tiles = _cdiv(m, cfg.bm) * _cdiv(n, cfg.bn)
    return min(tiles, sm_count() * cfg.min_blocks) if cfg.persistent else tiles


def _launch(cfg: WgmmaConfig):
    from .link import enable_dynamic_smem
    from .tensorcore import _pairs_aligned

    def launch(a, b, c, stream):
        k = wgmma_kernel(cfg, a.dtype, c.dtype, a.trans, b.trans, _pairs_aligned(c))
        enable_dynamic_smem(k, SIGNATURE, cfg.smem_bytes)
        ma, mb = operand_maps(cfg, a, b)
        k[grid_size(cfg, c.rows, c.cols), cfg.threads, stream, cfg.smem_bytes](
            ma, mb, c.ptr, c.rows, c.cols, a.cols, c.ld)
    launch.config = cfg
    return launch


RUNG1 = WgmmaConfig(bm=64, bn=128, consumers=1, min_blocks=2, max_stages=4)
RUNG2 = WgmmaConfig(bm=128, bn=256, consumers=2, max_stages=4)
RUNG3 = RUNG2.replace(producer=True)
RUNG4 = RUNG3.replace(regs=(40, 232))
RUNG5 = RUNG4.replace(persistent=True)

_IN = ("float16", "bfloat16")
_OUT = ("float32", "float16", "bfloat16")
_SM90A = (9, 0)


def _variant(name, rung, cfg, note):
    return Variant(name, "wgmma", rung, _IN, _SM90A, note, _launch(cfg), cfg, _OUT, check=_check,
                   max_cc=_SM90A)


RUNGS = [
    _variant("wgmma_tma", 1, RUNG1, "TMA loads 128B-swizzled 64x128 tiles into a ring completing "
             "on mbarriers; one warpgroup runs wgmma m64n128k16 from shared memory"),
    _variant("wgmma_wide", 2, RUNG2, "128x256 tiles: two consumer warpgroups of m64n256k16, twice "
             "the math per byte loaded"),
    _variant("wgmma_ws", 3, RUNG3, "warp specialization: a producer warpgroup issues TMA, full/empty "
             "mbarriers per stage, one wgmma group kept in flight, no block barrier in the loop"),
    _variant("wgmma_regs", 4, RUNG4, "setmaxnreg: producer down to 40 registers, consumers up to 232"),
    _variant("wgmma_persistent", 5, RUNG5, "persistent grid (one block per SM) walking tiles in "
             "grouped order: the next tile's loads overlap this tile's epilogue"),
]
