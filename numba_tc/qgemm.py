"""Products with a quantized weight (``quant``): ``x @ w.T`` for x of a few rows, read at the
speed of the packed weight, and the dequantizing pass that larger products run before a GEMM.

**The streaming kernel** (``qgemm_kernel``; x of at most ``MAX_ROWS`` rows: decoding). A
16-bit product of one row reads 2 bytes of weight per 2 FLOPs; a 4-bit one a quarter of that, so
the kernel is a pass over the packed weight with the tensor cores as the adders. It computes
C^T = W x^T with ``mma.sync.m16n8k16``: the weight is A (16 output features a tile), x is B (8
rows a tile, ``nt`` tiles). Per warp and iteration, each thread

1. loads ``u`` 16-byte words per tile of the packed weight (``ldg_stream_v4``: all in flight at
   once, L1 bypassed, first out of L2): exactly its A fragments of ``4 u`` k16 steps (``quant``'s
   layout);
2. per k16 step, loads its B fragment, 8 bytes of one row of x (the layout permutes K within a
   step so that a thread's four K are adjacent), converts one word to four A registers in
   registers (``dq_int4``: lop3 magic numbers, exact ``q - z``; ``dq_int8``; a user's format:
   four lookups of a table of code pairs in shared memory, one copy per lane so that lanes never
   share a bank) and runs one mma per 8 rows into the group's accumulators;
3. at the end of each group of K multiplies the group's fp32 sums by its scales (one per
   feature) and adds them to the accumulators: no weight is rounded.

A block's warps take consecutive parts of K for the same ``tm`` tiles (K split where features are
too few to fill the GPU), add their sums in shared memory in a fixed order, apply the epilogue
(``epilogue.make``, in C's coordinates) and store. One launch, no scratch.

**The dequantizing pass** (``dequant_kernel``): the weight to a 16-bit (N, K) matrix, each value
``value(q) * s`` rounded once, for a GEMM of many rows (compute-bound: the pass costs a read of
the packed weight and a write of the 16-bit one).
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
from .primitives import (dq_int4, dq_int8, in16_f32, ldg_in16, ldg_stream_v4, ldg_u8, ldg_u16, ldg_v2u32,
                         mma_bf16_m16n8k16, mma_f16_m16n8k16, pack16x2, prmt, stg_out1, stg_v2u32)
from .qformat import LANES, ORDERS, SCALE_KIND, TILE_N, Format

__all__ = ["QConfig", "qgemm_kernel", "dequant_kernel", "MAX_ROWS", "KIND", "DEQUANT_THREADS"]

KIND = {"float16": 1, "bfloat16": 2}          # the activations' type, as the primitives take it
MAX_ROWS = 64                                 # rows of x the streaming kernel takes (8 n8 tiles)
DEQUANT_THREADS = 256
# -(M + z) for the magic numbers M (bf16 128 = 0x4300, fp16 1024 = 0x6400), one 16-bit half
_NEG_MAGIC = {"bfloat16": 0xC300, "float16": 0xE400}
_LUT_WORDS = 256 * LANES                      # pair table: one copy of 256 code pairs per lane


@dataclass(frozen=True)
class QConfig:
    """The streaming kernel's shape: ``tm`` m16 tiles of features per block (every warp takes
    all of them), ``warps`` per block (each its part of K), ``u`` 16-byte loads per tile and
    thread in flight (chunks of K per iteration)."""
    tm: int = 1
    warps: int = 8
    u: int = 4

    def __post_init__(self):
        if self.tm not in (1, 2, 4) or self.u not in (1, 2, 4, 8) or not 1 <= self.warps <= 16:
            raise ValueError(f"QConfig(tm={self.tm}, warps={self.warps}, u={self.u}): tm 1, 2 or 4; "
                             "u 1, 2, 4 or 8; 1 to 16 warps")

    @property
    def threads(self) -> int:
        return 32 * self.warps


def _steps(fmt: Format, cfg: QConfig):
    """(k16 steps per chunk, per iteration)."""
    spc = fmt.chunk_k // 16
    return spc, spc * cfg.u


@kernel_factory
def qgemm_kernel(cfg: QConfig, fmt: Format, dtype: str, scale_dtype: str, out_dtype: str, nt: int,
                 group_k: int, exact: bool, epi=PLAIN):
    """C (M x N, row-major, ``out_dtype``) = epilogue(x @ w.T) for x (M x K, ``dtype``, rows of
    unit stride) of at most ``8 nt`` rows and the packed weight of ``fmt`` with groups of
    ``group_k`` (the padded K for one group per row). ``exact``: K is whole chunks and x's rows
    are 8-byte aligned (8-byte loads of x, no bounds on K)."""
    TM, WARPS, U, NT = cfg.tm, cfg.warps, cfg.u, nt
    KIND_ = KIND[dtype]
    MMA = mma_bf16_m16n8k16 if dtype == "bfloat16" else mma_f16_m16n8k16
    CK = fmt.chunk_k
    SPC, NSTEP = _steps(fmt, cfg)
    ORD = ORDERS[fmt.order]
    ZP = fmt.zeros
    LUT = fmt.user is not None
    DEC = fmt.user.fn if LUT else None
    GS = group_k // 16
    INNER = GS <= NSTEP                  # groups end inside an iteration (else one group each)
    NGI = NSTEP // GS if INNER else 1    # groups per iteration
    SK = SCALE_KIND[scale_dtype]
    NZB = _NEG_MAGIC[dtype]
    NZ_SYM = (NZB + fmt.offset) * 0x10001
    NACC = TM * NT * 4
    NSC = 2 * TM * NGI
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], ITEMSIZE[out_dtype]
    LUT_N = _LUT_WORDS if LUT else 1
    NWB, NXB, NRED = 4 * U * TM, 2 * NT, WARPS * NACC * 32      # (array sizes: constants of the closure)
    EPI = make_epilogue(epi)

    @device
    def load_w(i, whole, wb, P, mt0, c0, cend, kc, ntiles, lane):
        """Tile i % TM's chunk c0 + i // TM: 16 bytes, or zeros past the range (``whole``: the
        iteration's chunks are all in it)."""
        u = i // TM
        tm = i - u * TM
        if (whole or c0 + u < cend) and mt0 + tm < ntiles:
            ldg_stream_v4(ptr(wb), 4 * i, P + 16 * (((mt0 + tm) * kc + c0 + u) * LANES + lane))
        else:
            for e in range(4):
                wb[4 * i + e] = uint32(0)
    load_ws = unrolled(load_w, U * TM)

    @device
    def load_scale(i, scl, nzs, S, Z, mt0, c0, N, G, g):
        """Scale (and zero point) i = (tile, group of the iteration, row half) of this lane's
        features 16 mt + g and + 8."""
        h = i % 2
        gi = (i // 2) % NGI
        tm = i // (2 * NGI)
        grp = min((c0 * CK) // group_k + gi, G - 1)
        n = min(TILE_N * (mt0 + tm) + g + 8 * h, N - 1)
        at = grp * N + n
        if SK == 0:
            scl[i] = f32_ptr(S)[at]
        else:
            scl[i] = ldg_in16(S + 2 * at, SK)
        if ZP:
            v = uint32(NZB) + ldg_u8(Z + at)
            nzs[i] = v | (v << uint32(16))
    load_scales = unrolled(load_scale, NSC)

    @device
    def load_x(j, xb, X, lda, M, K, k, g, t):
        """B fragment of n8 tile j: x[8 j + g, k + 4 t .. + 3] (zeros past M and K)."""
        row = 8 * j + g
        if row < M:
            at = X + 2 * (row * lda + k + 4 * t)
            if exact:
                ldg_v2u32(ptr(xb), 2 * j, at)
            else:
                kk = k + 4 * t
                w0 = uint32(0)
                w1 = uint32(0)
                if kk < K:
                    w0 = ldg_u16(at)
                if kk + 1 < K:
                    w0 |= ldg_u16(at + 2) << uint32(16)
                if kk + 2 < K:
                    w1 = ldg_u16(at + 4)
                if kk + 3 < K:
                    w1 |= ldg_u16(at + 6) << uint32(16)
                xb[2 * j] = w0
                xb[2 * j + 1] = w1
        else:
            xb[2 * j] = uint32(0)
            xb[2 * j + 1] = uint32(0)
    load_xs = unrolled(load_x, NT)

    @device
    def mma_one(j, gacc, a, xb, tm):
        MMA(ptr(gacc), 4 * (tm * NT + j), ptr(a), 0, ptr(xb), 2 * j)
    mmas = unrolled(mma_one, NT)

    @device
    def tile_step(tm, a, wb, nzs, gacc, xb, u, s, gi, lutp, lane):
        """Tile tm's A fragment of step s of chunk u, then its mma with every n8 tile of x."""
        base = 4 * (u * TM + tm)
        if ORD == 0:
            if ZP:
                nz0 = nzs[2 * (tm * NGI + gi)]
                nz1 = nzs[2 * (tm * NGI + gi) + 1]
            else:
                nz0 = uint32(NZ_SYM)
                nz1 = uint32(NZ_SYM)
            dq_int4(ptr(a), 0, wb[base + s], nz0, nz1, KIND_)
        elif ORD == 2:
            dq_int8(ptr(a), 0, wb[base + 2 * s], wb[base + 2 * s + 1], KIND_)
        else:
            w = wb[base + s]
            for r in range(4):
                pair = prmt(w, uint32(0), uint32(0x4440 + r))
                a[r] = lutp[(pair << uint32(5)) + lane]
        mmas(NT, gacc, a, xb, tm)
    tiles = unrolled(tile_step, TM)

    @device
    def apply_one(i, acc, gacc, scl, gi):
        """Accumulators i (tile i // NT) += its group's sums times their features' scales."""
        tm = i // NT
        s0 = scl[2 * (tm * NGI + gi)]
        s1 = scl[2 * (tm * NGI + gi) + 1]
        b = 4 * i
        acc[b] += s0 * gacc[b]
        acc[b + 1] += s0 * gacc[b + 1]
        acc[b + 2] += s1 * gacc[b + 2]
        acc[b + 3] += s1 * gacc[b + 3]
        for e in range(4):
            gacc[b + e] = float32(0)
    apply = unrolled(apply_one, TM * NT)

    @device
    def step(j, whole, wb, xb, a, acc, gacc, scl, nzs, X, lda, M, K, c0, cend, g, t, lane, lutp):
        u = j // SPC
        if whole or c0 + u < cend:
            load_xs(NT, xb, X, lda, M, K, c0 * CK + 16 * j, g, t)
            tiles(TM, a, wb, nzs, gacc, xb, u, j - u * SPC, j // GS if INNER else 0, lutp, lane)
        if INNER and (j + 1) % GS == 0:
            apply(TM * NT, acc, gacc, scl, j // GS)
    steps = unrolled(step, NSTEP)

    @device
    def keep(i, red, acc, warp, lane):
        red[(warp * NACC + i) * 32 + lane] = acc[i]
    keeps = unrolled(keep, NACC)

    def qgemm(X, P, S, Z, C, M, N, K, lda, ldc, kc, kcv, cpw, ntiles, G, ep):
        acc = cuda.local.array(NACC, float32)
        gacc = cuda.local.array(NACC, float32)
        wb = cuda.local.array(NWB, uint32)
        xb = cuda.local.array(NXB, uint32)
        a = cuda.local.array(4, uint32)
        scl = cuda.local.array(NSC, float32)
        nzs = cuda.local.array(NSC, uint32)
        red = cuda.shared.array(NRED, float32)
        lut = cuda.shared.array(LUT_N, uint32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        g = lane >> 2
        t = lane & 3
        mt0 = cuda.blockIdx.x * TM
        for i in range(NACC):
            acc[i] = float32(0)
            gacc[i] = float32(0)
        if LUT:                           # the user's values of code pairs, a copy per lane
            for i in range(tid, _LUT_WORDS, 32 * WARPS):
                e = i >> 5
                lut[i] = pack16x2(float32(DEC(e & 15)), float32(DEC(e >> 4)), KIND_)
            cuda.syncthreads()
        lutp = ptr(lut)
        cbeg = warp * cpw
        cend = min(cbeg + cpw, kcv)
        for c0 in range(cbeg, cend, U):
            # (a whole iteration without a branch per chunk: every load of it may be in flight)
            if c0 + U <= cend:
                load_ws(U * TM, True, wb, P, mt0, c0, cend, kc, ntiles, lane)
                load_scales(NSC, scl, nzs, S, Z, mt0, c0, N, G, g)
                steps(NSTEP, True, wb, xb, a, acc, gacc, scl, nzs, X, lda, M, K, c0, cend, g, t, lane, lutp)
            else:
                load_ws(U * TM, False, wb, P, mt0, c0, cend, kc, ntiles, lane)
                load_scales(NSC, scl, nzs, S, Z, mt0, c0, N, G, g)
                steps(NSTEP, False, wb, xb, a, acc, gacc, scl, nzs, X, lda, M, K, c0, cend, g, t, lane, lutp)
            if not INNER:
                apply(TM * NT, acc, gacc, scl, 0)
        keeps(NACC, red, acc, warp, lane)
        cuda.syncthreads()
        for e in range(tid, NACC * 32, 32 * WARPS):      # the warps' sums, in order, to C
            i = e >> 5
            ln = e & 31
            v = float32(0)
            for w in range(WARPS):
                v += red[(w * NACC + i) * 32 + ln]
            tm = i // (NT * 4)
            rem = i - tm * NT * 4
            n = TILE_N * (mt0 + tm) + (ln >> 2) + 8 * ((rem & 3) >> 1)
            m = 8 * (rem >> 2) + 2 * (ln & 3) + (rem & 1)
            if m < M and n < N:
                stg_out1(C + OUT_ITEM * (m * ldc + n), EPI(v, m, n, ep), OUT_K)

    return kernel(qgemm, ("i64",) * 15, launch_bounds=(32 * WARPS, 1), values=len(epi.slots()))


@kernel_factory
def dequant_kernel(fmt: Format, dtype: str, scale_dtype: str, group_k: int):
    """W (Npad x Kpad, row-major ``dtype``, ``ldw``) = value(q) * s rounded once, a thread per
    lane of a tile's chunk (its 16 bytes: four rows' runs of 4 K per step, 8-byte stores)."""
    KIND_ = KIND[dtype]
    CK = fmt.chunk_k
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
    def one_step(s, wb, a, S, Z, W, N, ldw, G, c, mt, g, t, lutp):
        k0 = c * CK + 16 * s + 4 * t
        grp = min(k0 // group_k, G - 1)
        n0 = TILE_N * mt + g
        at0 = grp * N + min(n0, N - 1)
        at1 = grp * N + min(n0 + 8, N - 1)
        if ORD == 0:
            if ZP:
                v0 = uint32(NZB) + ldg_u8(Z + at0)
                v1 = uint32(NZB) + ldg_u8(Z + at1)
                nz0 = v0 | (v0 << uint32(16))
                nz1 = v1 | (v1 << uint32(16))
            else:
                nz0 = uint32(NZ_SYM)
                nz1 = uint32(NZ_SYM)
            dq_int4(ptr(a), 0, wb[s], nz0, nz1, KIND_)
        elif ORD == 2:
            dq_int8(ptr(a), 0, wb[2 * s], wb[2 * s + 1], KIND_)
        else:
            for r in range(4):
                a[r] = lutp[prmt(wb[s], uint32(0), uint32(0x4440 + r))]
        for h in range(2):
            at = at0 if h == 0 else at1
            sc = f32_ptr(S)[at] if SK == 0 else ldg_in16(S + 2 * at, SK)
            lo = pack16x2(in16_f32(a[h], 0, KIND_) * sc, in16_f32(a[h], 1, KIND_) * sc, KIND_)
            hi = pack16x2(in16_f32(a[h + 2], 0, KIND_) * sc, in16_f32(a[h + 2], 1, KIND_) * sc, KIND_)
            stg_v2u32(W + 2 * ((n0 + 8 * h) * ldw + k0), lo, hi)
    steps = unrolled(one_step, SPC)

    def dequant(P, S, Z, W, N, ldw, kc, ntiles, G):
        wb = cuda.local.array(4, uint32)
        a = cuda.local.array(4, uint32)
        lut = cuda.shared.array(LUT_N, uint32)
        if LUT:
            for e in range(cuda.threadIdx.x, 256, DEQUANT_THREADS):
                lut[e] = pack16x2(float32(DEC(e & 15)), float32(DEC(e >> 4)), KIND_)
            cuda.syncthreads()
        i = cuda.blockIdx.x * DEQUANT_THREADS + cuda.threadIdx.x
        if i < ntiles * kc * 32:
            lane = i & 31
            tc = i >> 5
            mt = tc // kc
            c = tc - mt * kc
            ldg_stream_v4(ptr(wb), 0, P + 16 * i)
            steps(SPC, wb, a, S, Z, W, N, ldw, G, c, mt, lane >> 2, lane & 3, ptr(lut))

    return kernel(dequant, ("i64",) * 9, launch_bounds=(DEQUANT_THREADS, 1))
