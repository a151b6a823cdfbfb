"""Products with a quantized weight (``quant``): ``x @ w.T`` for x of a few rows, read at the
speed of the packed weight, and the dequantizing pass that larger products run before a GEMM.

**The streaming kernel** (``qgemm_kernel``; x of at most ``MAX_ROWS`` rows: decoding). A
16-bit product of one row reads 2 bytes of weight per 2 FLOPs; a 4-bit one a quarter of that, so
the kernel is a pass over the packed weight with the tensor cores as the adders, and its speed is
the bytes it keeps in flight. It computes C^T = W x^T with ``mma.sync.m16n8k16``: the weight is A
(16 output features a tile), x is B (8 rows a tile, ``nt`` tiles).

Work: a warp takes ``tm`` tiles of features and a part of K (``cpp`` chunks); the ``warps`` of a
block take consecutive parts for the same tiles, and so do the ``split`` blocks of a cluster
(K split further where the tiles are too few to fill the GPU). Per warp, iterations of ``u``
chunks, double-buffered in registers: the packed weight of the next iteration (``u`` 16-byte
loads per tile and lane, ``ldg_stream_v4``: L1 bypassed, first out of L2) and its group scales
are loaded before this iteration is computed, so a warp always has one to two iterations of
weight in flight. Per chunk, each thread loads its run of each row of x (the layout gives
thread t one contiguous run of the chunk's K: two 16-byte loads for 4-bit codes), then per k16
step converts one word to four A registers (``dq_int4``: lop3 magic numbers, exact ``q - z``;
``dq_int8``; a user's format: four lookups of a table of code pairs in shared memory, one copy
per lane so that lanes never share a bank, filled while the first loads are in flight) and runs
one mma per 8 rows into the group's accumulators; at the end of each group of K the group's
fp32 sums are multiplied by its scales (one per feature) and added to the accumulators: no
weight is rounded. Chunks past a part's end (a ragged last iteration) meet x read as zeros.

The sums: a block's warps add theirs in shared memory in a fixed order; with ``split`` > 1 the
cluster's blocks then add the blocks' sums in rank order through distributed shared memory
(``lds_cluster_f32``), each block finishing a share of the outputs: the same order on every
run, one launch, no scratch. Then the epilogue (``epilogue.make``, in C's coordinates) and the
store.

**The dequantizing pass** (``dequant_kernel``): the weight to a 16-bit (N, K) matrix, each value
``value(q) * s`` rounded once, for a GEMM of many rows (compute-bound: the pass costs a read of
the packed weight and a write of the 16-bit one). A thread per lane of a tile's chunk: its 16
bytes in, each of its two rows' runs out in 16-byte stores.
"""
from __future__ import annotations

from dataclasses import dataclass

from numba import cuda, float32, uint32

from .epilogue import PLAIN
from .epilogue import make as make_epilogue
from .fragments import OUT_CONVERT
from .intrinsics import f32_ptr, ptr
from .jit import device, kernel, kernel_factory, unrolled
from .layout import ITEMSIZE
from .primitives import (cluster_sync, dq_int4, dq_int8, in16_f32, lds_cluster_f32, ldg_in16, ldg_nc_v4,
                         ldg_stream_v4, ldg_u8, ldg_u16, ldg_v2u32, lut_pairs4, mma_bf16_m16n8k16, mma_f16_m16n8k16,
                         pack16x2, prmt, smem_addr, stg_out1, stg_v4u32, sts_v4u32)
from .qformat import LANES, ORDERS, SCALE_KIND, TILE_N, Format

__all__ = ["QConfig", "qgemm_kernel", "dequant_kernel", "MAX_ROWS", "KIND", "DEQUANT_THREADS", "X_ACCESS"]

KIND = {"float16": 1, "bfloat16": 2}          # the activations' type, as the primitives take it
MAX_ROWS = 64                                 # rows of x the streaming kernel takes (8 n8 tiles)
DEQUANT_THREADS = 256
MAX_SPLIT = 8                                 # blocks of a cluster (the portable limit)
X_ACCESS = (16, 8, 0)    # bytes a load of x: 16 or 8 (whole chunks of K, rows aligned), 0: by element
# -(M + z) for the magic numbers M (bf16 128 = 0x4300, fp16 1024 = 0x6400), one 16-bit half
_NEG_MAGIC = {"bfloat16": 0xC300, "float16": 0xE400}
_LUT_WORDS = 256 * LANES                      # pair table: one copy of 256 code pairs per lane


@dataclass(frozen=True)
class QConfig:
    """The streaming kernel's shape: ``tm`` m16 tiles of features per warp, ``warps`` per block
    and ``split`` blocks per cluster (each warp a part of K), ``u`` chunks of K per tile and
    iteration (a 16-byte load each per lane; two iterations' in registers), ``minb`` blocks per
    SM the launch bounds reserve registers for."""
    tm: int = 1
    warps: int = 4
    u: int = 2
    split: int = 1
    minb: int = 4

    def __post_init__(self):
        if (self.tm not in (1, 2, 4) or self.u not in (1, 2, 4) or not 1 <= self.warps <= 16
                or not 1 <= self.split <= MAX_SPLIT or not 1 <= self.minb <= 32 or self.threads * self.minb > 2048):
            raise ValueError(f"{self}: tm 1, 2 or 4; u 1, 2 or 4; 1 to 16 warps; split 1 to {MAX_SPLIT}; "
                             "minb blocks of the block's threads at most 2048 threads")

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def parts(self) -> int:
        """Parts of K per tile: one per warp of the cluster."""
        return self.warps * self.split


def steps(fmt: Format, cfg: QConfig):
    """(k16 steps per chunk, per iteration)."""
    spc = fmt.chunk_k // 16
    return spc, spc * cfg.u


class _Shape:
    """The streaming kernel's compile-time constants, derived from its configuration and
    problem facts (the factories below copy the ones they use into their closures)."""

    def __init__(self, cfg: QConfig, fmt: Format, dtype: str, scale_dtype: str, nt: int, group_k: int):
        self.TM, self.WARPS, self.U, self.NT, self.SPLIT = cfg.tm, cfg.warps, cfg.u, nt, cfg.split
        self.THREADS = cfg.threads
        self.KIND = KIND[dtype]
        self.CK = fmt.chunk_k
        self.RUN = self.CK // 4                       # K of a thread's run per chunk and row
        self.XW = self.RUN // 2                       # its words
        self.SPC, self.NSTEP = steps(fmt, cfg)
        self.ORD = ORDERS[fmt.order]
        self.ZP = fmt.zeros
        self.LUT = fmt.user is not None
        self.DEC = fmt.user.fn if self.LUT else None
        self.GS = group_k // 16
        self.INNER = self.GS <= self.NSTEP            # groups end inside an iteration (else one each)
        self.NGI = self.NSTEP // self.GS if self.INNER else 1     # groups per iteration
        self.SK = SCALE_KIND[scale_dtype]
        self.NZB = _NEG_MAGIC[dtype]
        self.NZ_SYM = (self.NZB + fmt.offset) * 0x10001
        self.NACC = self.TM * nt * 4
        self.NSC = 2 * self.TM * self.NGI             # scales of an iteration (per buffer)
        self.NWB = 4 * self.U * self.TM               # packed words of an iteration (per buffer)
        self.group_k = group_k


def _make_loads(q: _Shape, xv: int):
    """(load_ws, load_scales, load_xs): an iteration's packed weight and scales into buffer b,
    and a chunk's runs of x."""
    TM, NT, CK, RUN, XW, NGI, SK, ZP, NZB = q.TM, q.NT, q.CK, q.RUN, q.XW, q.NGI, q.SK, q.ZP, q.NZB
    NWB, NSC, group_k = q.NWB, q.NSC, q.group_k

    @device
    def load_w(i, b, wb, P, mt0, c0, cend, kc, ntiles, lane):
        """Buffer b's tile i % TM, chunk c0 + i // TM: 16 bytes per lane (none past the part or
        the tiles: the registers keep finite codes, met by zeros of x or never stored)."""
        u = i // TM
        tm = i - u * TM
        if c0 + u < cend and mt0 + tm < ntiles:
            ldg_stream_v4(ptr(wb), b * NWB + 4 * i, P + 16 * (((mt0 + tm) * kc + c0 + u) * LANES + lane))

    @device
    def load_scale(i, b, scl, nzs, S, Z, mt0, c0, cend, N, G, g):
        """Buffer b's scale (and zero point) i = (tile, group of the iteration, row half) of this
        lane's features 16 mt + g and + 8."""
        if c0 < cend:
            h = i % 2
            gi = (i // 2) % NGI
            tm = i // (2 * NGI)
            grp = min((c0 * CK) // group_k + gi, G - 1)
            n = min(TILE_N * (mt0 + tm) + g + 8 * h, N - 1)
            at = grp * N + n
            if SK == 0:
                scl[b * NSC + i] = f32_ptr(S)[at]
            else:
                scl[b * NSC + i] = ldg_in16(S + 2 * at, SK)
            if ZP:
                v = uint32(NZB) + ldg_u8(Z + at)
                nzs[b * NSC + i] = v | (v << uint32(16))

    @device
    def load_x(j, xb, X, lda, M, K, c, cend, g, t):
        """n8 tile j's run of chunk c: x[8 j + g, CK c + RUN t ..] (zeros past M, K or the part)."""
        row = 8 * j + g
        if row < M and c < cend:
            k0 = c * CK + RUN * t
            at = X + 2 * (row * lda + k0)
            if xv == 16:
                for e in range(XW // 4):
                    ldg_nc_v4(ptr(xb), j * XW + 4 * e, at + 16 * e)
            elif xv == 8:
                for e in range(XW // 2):
                    ldg_v2u32(ptr(xb), j * XW + 2 * e, at + 8 * e)
            else:
                for e in range(XW):
                    kk = k0 + 2 * e
                    w = uint32(0)
                    if kk < K:
                        w = ldg_u16(at + 4 * e)
                    if kk + 1 < K:
                        w |= ldg_u16(at + 4 * e + 2) << uint32(16)
                    xb[j * XW + e] = w
        else:
            for e in range(XW):
                xb[j * XW + e] = uint32(0)
    return unrolled(load_w, q.U * TM), unrolled(load_scale, NSC), unrolled(load_x, NT)


def _make_compute(q: _Shape, dtype: str, load_xs):
    """``compute(b, regs, rt, c0)``: one iteration from buffer b (chunks c0 .. c0 + U - 1) into
    the accumulators; ``regs`` = (wb, xb, a, acc, gacc, scl, nzs), ``rt`` = (X, lda, M, K, cend,
    g, t, lutl)."""
    TM, NT, XW, SPC, NSTEP, ORD, ZP, KIND_ = q.TM, q.NT, q.XW, q.SPC, q.NSTEP, q.ORD, q.ZP, q.KIND
    GS, INNER, NGI, NSC, NWB, NZ_SYM = q.GS, q.INNER, q.NGI, q.NSC, q.NWB, q.NZ_SYM
    MMA = mma_bf16_m16n8k16 if dtype == "bfloat16" else mma_f16_m16n8k16

    @device
    def mma_one(j, gacc, a, xb, tm, s):
        """Tile tm's A fragment times n8 tile j's B fragment of step s (its words 2s, 2s + 1)."""
        MMA(ptr(gacc), 4 * (tm * NT + j), ptr(a), 0, ptr(xb), j * XW + 2 * s)
    mmas = unrolled(mma_one, NT)

    @device
    def tile_step(tm, b, regs, u, s, gi, lutl):
        """Tile tm's A fragment of step s of chunk u (buffer b), then its mma with every n8 tile."""
        wb, xb, a, acc, gacc, scl, nzs = regs
        base = b * NWB + 4 * (u * TM + tm)
        if ORD == 0:
            if ZP:
                nz0 = nzs[b * NSC + 2 * (tm * NGI + gi)]
                nz1 = nzs[b * NSC + 2 * (tm * NGI + gi) + 1]
            else:
                nz0 = uint32(NZ_SYM)
                nz1 = uint32(NZ_SYM)
            dq_int4(ptr(a), 0, wb[base + s], nz0, nz1, KIND_)
        elif ORD == 2:
            dq_int8(ptr(a), 0, wb[base + 2 * s], wb[base + 2 * s + 1], KIND_)
        else:
            lut_pairs4(ptr(a), 0, wb[base + s], lutl)
        mmas(NT, gacc, a, xb, tm, s)
    tiles = unrolled(tile_step, TM)

    @device
    def apply_one(i, b, acc, gacc, scl, gi):
        """Accumulators i (tile i // NT) += its group's sums times their features' scales."""
        tm = i // NT
        s0 = scl[b * NSC + 2 * (tm * NGI + gi)]
        s1 = scl[b * NSC + 2 * (tm * NGI + gi) + 1]
        e = 4 * i
        acc[e] += s0 * gacc[e]
        acc[e + 1] += s0 * gacc[e + 1]
        acc[e + 2] += s1 * gacc[e + 2]
        acc[e + 3] += s1 * gacc[e + 3]
        for f in range(4):
            gacc[e + f] = float32(0)
    apply = unrolled(apply_one, TM * NT)

    @device
    def step(j, b, regs, rt, c0):
        wb, xb, a, acc, gacc, scl, nzs = regs
        X, lda, M, K, cend, g, t, lutl = rt
        u = j // SPC
        s = j - u * SPC
        if s == 0:
            load_xs(NT, xb, X, lda, M, K, c0 + u, cend, g, t)
        tiles(TM, b, regs, u, s, j // GS if INNER else 0, lutl)
        if INNER and (j + 1) % GS == 0:
            apply(TM * NT, b, acc, gacc, scl, j // GS)
    steps_ = unrolled(step, NSTEP)

    @device
    def compute(b, regs, rt, c0):
        steps_(NSTEP, b, regs, rt, c0)
        if not INNER:
            apply(TM * NT, b, regs[3], regs[4], regs[5], 0)
    return compute


def _make_sums(q: _Shape, out_dtype: str, epi):
    """``finish(acc, red, tid, lane, warp, rank, mt0, M, N, C, ldc, ep)``: the warps' sums added
    in order in shared memory, with a cluster the blocks' sums in rank order through distributed
    shared memory (each block finishing a share of the outputs), then the epilogue and C."""
    NT, NACC, WARPS, SPLIT, THREADS = q.NT, q.NACC, q.WARPS, q.SPLIT, q.THREADS
    NOUT = NACC * 32
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], ITEMSIZE[out_dtype]
    EPI = make_epilogue(epi)

    @device
    def keep(i, red, acc, warp, lane):
        red[(warp * NACC + i) * 32 + lane] = acc[i]
    keeps = unrolled(keep, NACC)

    @device
    def store(v, e, mt0, M, N, C, ldc, ep):
        """Output e (accumulator e // 32 of lane e % 32) through the epilogue to C."""
        i = e >> 5
        ln = e & 31
        tm = i // (NT * 4)
        rem = i - tm * NT * 4
        n = TILE_N * (mt0 + tm) + (ln >> 2) + 8 * ((rem & 3) >> 1)
        m = 8 * (rem >> 2) + 2 * (ln & 3) + (rem & 1)
        if m < M and n < N:
            stg_out1(C + OUT_ITEM * (m * ldc + n), EPI(v, m, n, ep), OUT_K)

    @device
    def finish(acc, red, tid, lane, warp, rank, mt0, M, N, C, ldc, ep):
        keeps(NACC, red, acc, warp, lane)
        cuda.syncthreads()
        for e in range(tid, NOUT, THREADS):          # the warps' sums, in order
            i = e >> 5
            ln = e & 31
            v = float32(0)
            for w in range(WARPS):
                v += red[(w * NACC + i) * 32 + ln]
            if SPLIT == 1:
                store(v, e, mt0, M, N, C, ldc, ep)
            else:
                red[e] = v                           # (warp 0's slot of e: read by this thread only)
        if SPLIT > 1:                                # the cluster's blocks' sums, in rank order
            cluster_sync()
            for e in range(rank * THREADS + tid, NOUT, SPLIT * THREADS):
                v = float32(0)
                for r in range(SPLIT):
                    v += lds_cluster_f32(ptr(red), e, r)
                store(v, e, mt0, M, N, C, ldc, ep)
            cluster_sync()                           # (no block leaves while its sums may be read)
    return finish


@kernel_factory
def qgemm_kernel(cfg: QConfig, fmt: Format, dtype: str, scale_dtype: str, out_dtype: str, nt: int,
                 group_k: int, xv: int, epi=PLAIN):
    """C (M x N, row-major, ``out_dtype``) = epilogue(x @ w.T) for x (M x K, ``dtype``, rows of
    unit stride) of at most ``8 nt`` rows and the packed weight of ``fmt`` with groups of
    ``group_k`` (the padded K for one group per row). ``xv`` (``X_ACCESS``): 16 or 8 where K is
    whole chunks and x's rows are that many bytes aligned (a thread's run of x in loads of that
    size), 0: element by element within K."""
    if xv not in X_ACCESS:
        raise ValueError(f"xv must be one of {X_ACCESS}, got {xv}")
    q = _Shape(cfg, fmt, dtype, scale_dtype, nt, group_k)
    load_ws, load_scales, load_xs = _make_loads(q, xv)
    compute = _make_compute(q, dtype, load_xs)
    finish = _make_sums(q, out_dtype, epi)
    TM, WARPS, U, SPLIT, THREADS, NACC, NSC, LUT, DEC, KIND_ = (q.TM, q.WARPS, q.U, q.SPLIT, q.THREADS, q.NACC,
                                                                q.NSC, q.LUT, q.DEC, q.KIND)
    LUT_N, LEV_N = (_LUT_WORDS, 16) if LUT else (1, 1)
    NXB, NRED = q.XW * q.NT, WARPS * NACC * 32                 # (array sizes: constants of the closure)
    NWB2, NSC2 = 2 * q.NWB, 2 * NSC

    def qgemm(X, P, S, Z, C, M, N, K, lda, ldc, kc, kcv, cpp, ntiles, G, ep):
        acc = cuda.local.array(NACC, float32)
        gacc = cuda.local.array(NACC, float32)
        wb = cuda.local.array(NWB2, uint32)
        xb = cuda.local.array(NXB, uint32)
        a = cuda.local.array(4, uint32)
        scl = cuda.local.array(NSC2, float32)
        nzs = cuda.local.array(NSC2, uint32)
        red = cuda.shared.array(NRED, float32)
        lut = cuda.shared.array(LUT_N, uint32)
        lev = cuda.shared.array(LEV_N, float32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        g = lane >> 2
        blk = cuda.blockIdx.x
        rank = blk % SPLIT
        mt0 = (blk // SPLIT) * TM
        cbeg = (rank * WARPS + warp) * cpp
        cend = min(cbeg + cpp, kcv)
        for i in range(NACC):
            acc[i] = float32(0)
            gacc[i] = float32(0)
        for i in range(NWB2):
            wb[i] = uint32(0)
        for i in range(NSC2):
            scl[i] = float32(0)
            nzs[i] = uint32(0)
        lbase = smem_addr(ptr(lut))
        # the first iteration's loads go out before anything else
        load_ws(U * TM, 0, wb, P, mt0, cbeg, cend, kc, ntiles, lane)
        load_scales(NSC, 0, scl, nzs, S, Z, mt0, cbeg, cend, N, G, g)
        if LUT:                           # the user's values of code pairs, a copy per lane
            if tid < 16:
                lev[tid] = float32(DEC(tid))
            cuda.syncthreads()
            for e in range(tid, 256, THREADS):
                v = pack16x2(lev[e & 15], lev[e >> 4], KIND_)
                for f in range(LANES // 4):
                    sts_v4u32(lbase + 4 * (e * LANES + 4 * f), v, v, v, v)
            cuda.syncthreads()
        regs = (wb, xb, a, acc, gacc, scl, nzs)
        rt = (X, lda, M, K, cend, g, lane & 3, lbase + 4 * lane)    # (lutl: this lane's copy of the table)
        c0 = cbeg
        while c0 < cend:
            load_ws(U * TM, 1, wb, P, mt0, c0 + U, cend, kc, ntiles, lane)
            load_scales(NSC, 1, scl, nzs, S, Z, mt0, c0 + U, cend, N, G, g)
            compute(0, regs, rt, c0)
            if c0 + U >= cend:
                break
            load_ws(U * TM, 0, wb, P, mt0, c0 + 2 * U, cend, kc, ntiles, lane)
            load_scales(NSC, 0, scl, nzs, S, Z, mt0, c0 + 2 * U, cend, N, G, g)
            compute(1, regs, rt, c0 + U)
            c0 += 2 * U
        finish(acc, red, tid, lane, warp, rank, mt0, M, N, C, ldc, ep)

    return kernel(qgemm, ("i64",) * 15, launch_bounds=(THREADS, cfg.minb), values=len(epi.slots()))


@kernel_factory
def dequant_kernel(fmt: Format, dtype: str, scale_dtype: str, group_k: int):
    """W (Npad x Kpad, row-major ``dtype``, ``ldw``) = value(q) * s rounded once, a thread per
    lane of a tile's chunk: its 16 bytes in, its runs of rows g and g + 8 out (16-byte stores)."""
    KIND_ = KIND[dtype]
    CK = fmt.chunk_k
    RUN = CK // 4
    XW = RUN // 2                         # output words of a row's run
    NOB = 2 * XW
    SPC = CK // 16
    ORD = ORDERS[fmt.order]
    ZP = fmt.zeros
    LUT = fmt.user is not None
    DEC = fmt.user.fn if LUT else None
    SK = SCALE_KIND[scale_dtype]
    NZB = _NEG_MAGIC[dtype]
    NZ_SYM = (NZB + fmt.offset) * 0x10001
    LUT_N = 256 if LUT else 1

    @device
    def one_step(s, wb, a, ob, nz0, nz1, sc0, sc1, lutp):
        """Step s's four registers (rows g, g + 8; K 4 s .. + 3 of the run), scaled, into the
        rows' output words 2 s, 2 s + 1."""
        if ORD == 0:
            dq_int4(ptr(a), 0, wb[s], nz0, nz1, KIND_)
        elif ORD == 2:
            dq_int8(ptr(a), 0, wb[2 * s], wb[2 * s + 1], KIND_)
        else:
            for r in range(4):
                a[r] = lutp[prmt(wb[s], uint32(0), uint32(0x4440 + r))]
        for r in range(4):
            h = r % 2                     # the row
            sc = sc0 if h == 0 else sc1
            ob[h * XW + 2 * s + r // 2] = pack16x2(in16_f32(a[r], 0, KIND_) * sc, in16_f32(a[r], 1, KIND_) * sc,
                                                   KIND_)
    steps_ = unrolled(one_step, SPC)

    def dequant(P, S, Z, W, N, ldw, kc, ntiles, G):
        wb = cuda.local.array(4, uint32)
        a = cuda.local.array(4, uint32)
        ob = cuda.local.array(NOB, uint32)
        lut = cuda.shared.array(LUT_N, uint32)
        if LUT:
            for e in range(cuda.threadIdx.x, 256, DEQUANT_THREADS):
                lut[e] = pack16x2(float32(DEC(e & 15)), float32(DEC(e >> 4)), KIND_)
            cuda.syncthreads()
        i = cuda.blockIdx.x * DEQUANT_THREADS + cuda.threadIdx.x
        if i < ntiles * kc * 32:
            ldg_stream_v4(ptr(wb), 0, P + 16 * i)
            lane = i & 31
            tc = i >> 5
            mt = tc // kc
            c = tc - mt * kc
            g = lane >> 2
            k0 = c * CK + RUN * (lane & 3)
            grp = min(k0 // group_k, G - 1)
            n0 = TILE_N * mt + g
            at0 = grp * N + min(n0, N - 1)
            at1 = grp * N + min(n0 + 8, N - 1)
            sc0 = f32_ptr(S)[at0] if SK == 0 else ldg_in16(S + 2 * at0, SK)
            sc1 = f32_ptr(S)[at1] if SK == 0 else ldg_in16(S + 2 * at1, SK)
            nz0 = uint32(NZ_SYM)
            nz1 = uint32(NZ_SYM)
            if ZP:
                v0 = uint32(NZB) + ldg_u8(Z + at0)
                v1 = uint32(NZB) + ldg_u8(Z + at1)
                nz0 = v0 | (v0 << uint32(16))
                nz1 = v1 | (v1 << uint32(16))
            steps_(SPC, wb, a, ob, nz0, nz1, sc0, sc1, ptr(lut))
            for h in range(2):
                for q in range(XW // 4):
                    stg_v4u32(W + 2 * ((n0 + 8 * h) * ldw + k0) + 16 * q, ptr(ob), h * XW + 4 * q)

    return kernel(dequant, ("i64",) * 9, launch_bounds=(DEQUANT_THREADS, 1))
