"""Products with a quantized weight (``quant``): ``x @ w.T`` for x of a few rows, read at the
speed of the packed weight, and the dequantizing pass that larger products run before a GEMM.

**The streaming kernel** (``qgemm_kernel``; x of at most ``MAX_ROWS`` rows: decoding). A
16-bit product of one row reads 2 bytes of weight per 2 FLOPs; a 4-bit one a quarter of that, so
the kernel is a pass over the packed weight with the tensor cores as the adders, and its speed is
the bytes it keeps in flight (Little's law: HBM's bandwidth times its latency under load, about
4 MB on an H200, 30 KB or more per SM). It computes C^T = W x^T with ``mma.sync.m16n8k16``: the
weight is A (16 output features a tile), x is B (8 rows a tile, ``nt`` tiles).

Work: a warp takes ``tm`` tiles of features and a part of K (``cpp`` chunks); the ``warps`` of a
block take consecutive parts for the same tiles, and so do the ``split`` blocks of a cluster
(K split further where the tiles are too few to fill the GPU). Each warp streams its part
through its own ring of ``stages`` stages in shared memory (dynamic, ``smem_bytes``): a stage is
``u`` chunks of its tiles' packed weight (16 bytes a lane each), x's pieces of those chunks
(16 bytes a lane and row, only the rows of x: ``x_rows``) and the words holding its lanes'
scales (and zero points), all copied by cp.async (``LDGSTS``: no registers held while in flight,
L1 bypassed), ``stages - 1`` stages ahead of the one computed: a warp keeps 3 to 6 KB of weight
in flight and an SM 12 to 20 warps, where registers held one to two iterations. Every lane reads
back only what it copied itself, so a stage needs no barrier, only ``cp.async.wait_group``; a
slot is refilled after the mma that used its values (in-order issue). Per chunk, each thread
loads its 16-byte weight piece of each tile and its pieces of x, then per k16 step converts one
word to four A registers (``dq_int4``: lop3 magic numbers, exact ``q - z``; ``dq_int8``; a
user's format: four lookups of a table of code pairs in shared memory, one copy per lane so that
lanes never share a bank) and runs one mma per 8 rows into the group's accumulators; at the end
of each group of K the group's fp32 sums are multiplied by its scales (one per feature) and
added to the accumulators: no weight is rounded. Chunks past a part's end are never copied:
their x reads as zeros, and stale weight bits decode to finite values. The index arithmetic
(``part_of``, ``w_offset``, ``x_slot``, ``scale_slot``/``scale_row``/``scale_group``,
``word_of``, ``out_of``, ``qformat.run_k``) is written once, for the kernel and for
``tests/test_quant_emulation.py``, which runs it on NumPy against the float64 product.

The sums: a block's warps add theirs in shared memory (the rings' memory, once every warp is
done) in a fixed order; with ``split`` > 1 the cluster's blocks then add the blocks' sums in
rank order through distributed shared memory (``lds_cluster_f32``), each block finishing a share
of the outputs: the same order on every run, one launch, no scratch. Then the epilogue
(``epilogue.make``, in C's coordinates) and the store.

**The dequantizing pass** (``dequant_kernel``): the weight to a 16-bit (N, K) matrix, each value
``value(q) * s`` rounded once, for a GEMM of many rows (compute-bound: the pass costs a read of
the packed weight and a write of the 16-bit one). A thread per lane of a tile's chunk: its 16
bytes in, each of its two rows' pieces out in 16-byte stores, each piece with its group's scale.
"""
from __future__ import annotations

from dataclasses import dataclass

from numba import cuda, float32, int32, int64, uint32
from numba.extending import register_jitable

from .epilogue import PLAIN
from .epilogue import make as make_epilogue
from .fragments import OUT_CONVERT
from .intrinsics import f32_ptr, ptr
from .jit import device, kernel, kernel_factory, unrolled
from .layout import ITEMSIZE
from .primitives import (cluster_sync, cp_async4, cp_async8, cp_async16, cp_async_commit, cp_async_wait, dq_int4,
                         dq_int8, in16_f32, lds_cluster_f32, lds_u32, lds_v4u32, ldg_in16, ldg_stream_v4, ldg_u8,
                         ldg_u16, lut_pairs4, mma_bf16_m16n8k16, mma_f16_m16n8k16, pack16x2, prmt, smem_addr,
                         stg_out1, stg_v4u32, sts_v4u32, word_scale)
from .qformat import LANES, ORDERS, SCALE_KIND, SPAN, TILE_N, Format, run_k

__all__ = ["QConfig", "qgemm_kernel", "dequant_kernel", "smem_bytes", "x_rows", "words_aligned", "word_of", "x_slot",
           "part_of", "w_offset", "scale_slot", "scale_row", "scale_group", "out_of", "MAX_ROWS", "KIND",
           "DEQUANT_THREADS", "X_ACCESS"]

KIND = {"float16": 1, "bfloat16": 2}          # the activations' type, as the primitives take it
MAX_ROWS = 64                                 # rows of x the streaming kernel takes (8 n8 tiles)
DEQUANT_THREADS = 256
MAX_SPLIT = 8                                 # blocks of a cluster (the portable limit)
MAX_STAGES = 7                                # (cp_async_wait takes 0..6 groups pending)
SMEM_SM = 227 * 1024                          # shared memory a block may have (H100 / H200)
X_ACCESS = (16, 8, 0)    # bytes a load of x: 16 or 8 (whole chunks of K, rows aligned), 0: by element
# -(M + z) for the magic numbers M (bf16 128 = 0x4300, fp16 1024 = 0x6400), one 16-bit half
_NEG_MAGIC = {"bfloat16": 0xC300, "float16": 0xE400}
_LUT_WORDS = 256 * LANES                      # pair table: one copy of 256 code pairs per lane
_SLOT = LANES * 16                            # bytes of one 16-byte copy per lane


@dataclass(frozen=True)
class QConfig:
    """The streaming kernel's shape: ``tm`` m16 tiles of features per warp, ``warps`` per block
    and ``split`` blocks per cluster (each warp a part of K), ``u`` chunks of K per tile and
    stage, ``stages`` stages of a warp's ring in shared memory (all but the one computed in
    flight), ``minb`` blocks per SM the launch bounds reserve registers for."""
    tm: int = 1
    warps: int = 4
    u: int = 2
    split: int = 1
    minb: int = 4
    stages: int = 4

    def __post_init__(self):
        if (self.tm not in (1, 2, 4) or self.u not in (1, 2, 4) or not 1 <= self.warps <= 16
                or not 1 <= self.split <= MAX_SPLIT or not 1 <= self.minb <= 32 or self.threads * self.minb > 2048
                or not 2 <= self.stages <= MAX_STAGES):
            raise ValueError(f"{self}: tm 1, 2 or 4; u 1, 2 or 4; 1 to 16 warps; split 1 to {MAX_SPLIT}; "
                             f"minb blocks of the block's threads at most 2048 threads; 2 to {MAX_STAGES} stages")

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def parts(self) -> int:
        """Parts of K per tile: one per warp of the cluster."""
        return self.warps * self.split


def steps(fmt: Format, cfg: QConfig):
    """(k16 steps per chunk, per stage)."""
    spc = fmt.chunk_k // 16
    return spc, spc * cfg.u


# --- the index arithmetic, one home for the kernel and tests/test_quant_emulation.py -------------

@register_jitable
def part_of(rank, warp, warps, cpp, kcv):
    """(first chunk, end chunk) of the part of K of warp ``warp`` of cluster rank ``rank``."""
    cbeg = (rank * warps + warp) * cpp
    return cbeg, min(cbeg + cpp, kcv)


@register_jitable
def w_offset(mt, c, lane, kc):
    """Byte offset of lane ``lane``'s 16 bytes of tile ``mt``, chunk ``c`` in the packed weight."""
    return 16 * ((mt * kc + c) * LANES + lane)


@register_jitable
def x_slot(i, lane, xg):
    """Byte offset in a stage's x of lane ``lane``'s piece ``i`` = (n8 tile, chunk, piece),
    flattened: slots of ``4 xg`` lanes (the rows g < xg)."""
    return 16 * (4 * xg * i + lane)


@register_jitable
def scale_slot(i, ngi):
    """(tile, group of the stage, row half) of a lane's scale slot ``i`` of a stage."""
    return i // (2 * ngi), (i // 2) % ngi, i % 2


@register_jitable
def scale_row(tm, h, mt0, g, n_):
    """The feature (column of the (G, N) scales) of tile ``tm``'s row half ``h`` of lane row
    ``g`` (clamped into the scales: rows past N are never stored)."""
    return min(TILE_N * (mt0 + tm) + g + 8 * h, n_ - 1)


@register_jitable
def scale_group(c0, gi, ck, group_k, groups):
    """The group (row of the scales) of group ``gi`` of the stage starting at chunk ``c0``."""
    return min((c0 * ck) // group_k + gi, groups - 1)


@register_jitable
def word_of(base, item, n_, grp, row, aligned):
    """(address of the 4-byte word holding element (grp, row) of a (G, n_) array of ``item``-byte
    elements at ``base``, the element's byte offset in it). ``aligned`` (``base`` 4-byte
    aligned, ``n_ item`` a multiple of 4): the offset is the row's alone, and no word reaches
    past the array's end."""
    if aligned:
        rb = item * row
        return base + item * n_ * grp + (rb - (rb & 3)), rb & 3
    a = base + item * (grp * n_ + row)
    return a - (a & 3), a & 3


@register_jitable
def out_of(i, ln, nt, mt0):
    """(row of x, feature) of accumulator ``i`` of lane ``ln`` (the m16n8 C fragment: tile tm,
    n8 tile j, register r of ``4 (tm nt + j) + r``)."""
    tm = i // (nt * 4)
    rem = i - tm * nt * 4
    n = TILE_N * (mt0 + tm) + (ln >> 2) + 8 * ((rem & 3) >> 1)
    m = 8 * (rem >> 2) + 2 * (ln & 3) + (rem & 1)
    return m, n


class _Shape:
    """The streaming kernel's compile-time constants, derived from its configuration and
    problem facts (the factories below copy the ones they use into their closures). A warp's
    stage in shared memory: its 16-byte pieces of packed weight (``(u, tm)``), of x (``(j, u,
    piece)``, when x is copied: ``xv``), the words holding its scales and zero points, each a
    slot of the warp's 32 lanes (every lane reads back only what it copied)."""

    def __init__(self, cfg: QConfig, fmt: Format, dtype: str, scale_dtype: str, nt: int, group_k: int, xv: int = 16,
                 xg: int = 8, wa: bool = False):
        self.TM, self.WARPS, self.U, self.NT, self.SPLIT = cfg.tm, cfg.warps, cfg.u, nt, cfg.split
        self.STAGES = cfg.stages
        self.THREADS = cfg.threads
        self.KIND = KIND[dtype]
        self.CK = fmt.chunk_k
        self.PC = self.CK // SPAN                     # pieces of a thread's run per chunk and row
        self.XW = 4 * self.PC                         # their words
        self.SPC, self.NSTEP = steps(fmt, cfg)
        self.ORD = ORDERS[fmt.order]
        self.ZP = fmt.zeros
        self.LUT = fmt.user is not None
        self.DEC = fmt.user.fn if self.LUT else None
        self.GS = group_k // 16
        self.INNER = self.GS <= self.NSTEP            # groups end inside a stage (else one each)
        self.NGI = self.NSTEP // self.GS if self.INNER else 1     # groups per stage
        self.SK = SCALE_KIND[scale_dtype]
        self.SB = 4 if self.SK == 0 else 2            # bytes of a scale
        self.WA = wa                                  # (``word_of``'s ``aligned``)
        self.NZB = _NEG_MAGIC[dtype]
        self.NZ_SYM = (self.NZB + fmt.offset) * 0x10001
        self.NACC = self.TM * nt * 4
        self.NSC = 2 * self.TM * self.NGI             # scales of a stage
        self.group_k = group_k
        self.XOFF = self.U * self.TM * _SLOT
        self.XG = xg                                  # lane rows g of x's slots (rows of x, one tile)
        self.SOFF = self.XOFF + (nt * self.U * self.PC * 64 * xg if xv else 0)
        self.ZOFF = self.SOFF + self.NSC * 4 * LANES
        self.STAGE = self.ZOFF + (self.NSC * 4 * LANES if self.ZP else 0)
        self.RING = self.STAGES * self.STAGE
        self.LUT_OFF = max(self.WARPS * self.RING, self.WARPS * self.NACC * 4 * LANES)   # (the sums reuse the rings)
        self.SMEM = self.LUT_OFF + (4 * _LUT_WORDS if self.LUT else 0)


def smem_bytes(cfg: QConfig, fmt: Format, nt: int, xv: int, group_k: int, xg: int = 8) -> int:
    """Dynamic shared memory of a block of the streaming kernel."""
    return _Shape(cfg, fmt, "bfloat16", "bfloat16", nt, group_k, xv, xg).SMEM


def words_aligned(n: int, scales_addr: int, zeros_addr: int = 0) -> bool:
    """Whether every 4-byte word of the (G, N) scales and zero points lies in one row of them
    (``word_of``'s ``aligned``): N a multiple of 4, the arrays 4-byte aligned."""
    return n % 4 == 0 and scales_addr % 4 == 0 and zeros_addr % 4 == 0


def x_rows(m: int, nt: int) -> int:
    """Lane rows of x's slots in a stage (``qgemm_kernel``'s ``xg``): one tile of x of ``m``
    rows keeps only its rows (a power of two), more tiles all 8."""
    return 8 if nt > 1 or m > 4 else 1 << (m - 1).bit_length()


def _make_issue(q: _Shape, xv: int):
    """(``bases(wrow, xrow, nrow, P, X, lda, M, kc, ntiles, N, mt0, g, t, lane)``: a warp's
    constant addresses; ``issue(sa, c0, st)``: a stage's copies (cp.async) into the warp's slot
    at shared address ``sa``: the packed weight of chunks c0 .. c0 + U - 1, x's pieces of them
    (``xv``), the scale (and zero point) words; nothing past the part (``cend``) or the tiles:
    never computed (weights: any bits decode to finite values, met by x read as zeros), or not
    stored."""
    TM, U, NT, PC, CK, NSC, NGI, SK, ZP, group_k = q.TM, q.U, q.NT, q.PC, q.CK, q.NSC, q.NGI, q.SK, q.ZP, q.group_k
    XOFF, SOFF, ZOFF, CB, XG, WA, SB = q.XOFF, q.SOFF, q.ZOFF, 16 * LANES, q.XG, q.WA, q.SB

    @device
    def base(i, wrow, xrow, nrow, P, X, lda, M, kc, ntiles, N, mt0, g, t, lane):
        if i < TM:                   # tile i's lane words of chunk 0 (-1: past the tiles)
            wrow[i] = P + w_offset(mt0 + i, 0, lane, kc) if mt0 + i < ntiles else int64(-1)
        if i < NT:                   # n8 tile i's row of x at this lane's first piece (-1: past M)
            xrow[i] = X + 2 * (int64(8 * i + g) * lda + run_k(0, 0, t, CK)) if 8 * i + g < M else int64(-1)
        if i < 2 * TM:
            nrow[i] = scale_row(i // 2, i % 2, mt0, g, N)
    bases = unrolled(base, max(2 * TM, NT))

    @device
    def issue_w(i, sa, wrow, c0, cend, lane):
        u = i // TM
        tm = i - u * TM
        if c0 + u < cend and wrow[tm] >= 0:
            cp_async16(sa + 16 * (i * LANES + lane), wrow[tm] + CB * (c0 + u), 16)

    @device
    def issue_x(i, sa, xrow, c0, cend, lane):
        j = i // (U * PC)
        u = (i // PC) % U
        p = i % PC
        if xrow[j] >= 0 and c0 + u < cend:            # (a row of x: its lane's g < XG)
            src = xrow[j] + 2 * (run_k(c0 + u, p, 0, CK))
            dst = sa + XOFF + x_slot(i, lane, XG)
            if xv == 16:
                cp_async16(dst, src, 16)
            else:
                cp_async8(dst, src)
                cp_async8(dst + 8, src + 8)

    @device
    def issue_s(i, sa, nrow, S, Z, send, zend, c0, N, G, lane):
        """Slot i's words: each lane the word holding its scale (zero point), never past the end."""
        tm, gi, h = scale_slot(i, NGI)
        grp = scale_group(c0, gi, CK, group_k, G)
        a, _ = word_of(S, SB, N, grp, nrow[2 * tm + h], WA or SK == 0)
        cp_async4(sa + SOFF + 4 * (i * LANES + lane), a, 4 if WA or SK == 0 else min(4, send - a))
        if ZP:
            a, _ = word_of(Z, 1, N, grp, nrow[2 * tm + h], WA)
            cp_async4(sa + ZOFF + 4 * (i * LANES + lane), a, 4 if WA else min(4, zend - a))
    iw, ix, is_ = unrolled(issue_w, U * TM), unrolled(issue_x, NT * U * PC), unrolled(issue_s, NSC)

    @device
    def issue(sa, c0, st):
        wrow, xrow, nrow, S, Z, cend, N, G, send, zend, lane = st
        if c0 < cend:
            iw(U * TM, sa, wrow, c0, cend, lane)
            if xv:
                ix(NT * U * PC, sa, xrow, c0, cend, lane)
            is_(NSC, sa, nrow, S, Z, send, zend, c0, N, G, lane)
        cp_async_commit()
    return bases, issue


def _make_x(q: _Shape, xv: int):
    """``load_xs(j-count, xb, sa, u, rt)``: chunk u's pieces of x of every n8 tile into registers
    (from the stage, or with ``xv`` 0 element by element from global memory); zeros past M, K
    or the part."""
    U, PC, XW, CK, XOFF, XG = q.U, q.PC, q.XW, q.CK, q.XOFF, q.XG

    @device
    def load_x(j, xb, sa, u, c0, X, lda, M, K, cend, g, t, lane):
        row = 8 * j + g
        c = c0 + u
        if row < M and c < cend:
            if xv:
                for p in range(PC):
                    lds_v4u32(ptr(xb), j * XW + 4 * p, sa + XOFF + x_slot((j * U + u) * PC + p, lane, XG))
            else:
                for e in range(XW):
                    kk = run_k(c, e // 4, t, CK) + 2 * (e % 4)
                    at = X + 2 * (row * lda + kk)
                    w = uint32(0)
                    if kk < K:
                        w = ldg_u16(at)
                    if kk + 1 < K:
                        w |= ldg_u16(at + 2) << uint32(16)
                    xb[j * XW + e] = w
        else:
            for e in range(XW):
                xb[j * XW + e] = uint32(0)
    return unrolled(load_x, q.NT)


def _make_scales(q: _Shape):
    """``reads(NSC, sa, scl, nzs, nrow, S, Z, c0, N, G, lane)``: a stage's scales (and zero
    points) from the words this lane copied."""
    NSC, NGI, ZP, NZB, SK, CK = q.NSC, q.NGI, q.ZP, q.NZB, q.SK, q.CK
    SOFF, ZOFF, group_k, WA, SB = q.SOFF, q.ZOFF, q.group_k, q.WA, q.SB

    @device
    def read_scale(i, sa, scl, nzs, nrow, S, Z, c0, N, G, lane):
        """Slot i's scale (and zero point, as -(M + z) in both halves) from the word copied."""
        tm, gi, h = scale_slot(i, NGI)
        grp = scale_group(c0, gi, CK, group_k, G)
        _, b = word_of(S, SB, N, grp, nrow[2 * tm + h], WA)
        scl[i] = word_scale(lds_u32(sa + SOFF + 4 * (i * LANES + lane)), int32(b >> 1), SK)
        if ZP:
            _, b = word_of(Z, 1, N, grp, nrow[2 * tm + h], WA)
            z = lds_u32(sa + ZOFF + 4 * (i * LANES + lane))
            v = uint32(NZB) + ((z >> uint32(8 * b)) & uint32(0xFF))
            nzs[i] = v | (v << uint32(16))
    return unrolled(read_scale, NSC)


def _make_compute(q: _Shape, dtype: str, load_xs):
    """``compute(sa, regs, rt, c0)``: the stage at shared address ``sa`` (chunks c0 .. c0 + U -
    1) into the accumulators; ``regs`` = (wr, xb, a, acc, gacc, scl, nzs), ``rt`` = (X, S, Z,
    lda, M, K, N, G, cend, nrow, g, t, lane, lutl)."""
    TM, NT, XW, SPC, NSTEP, ORD, ZP, KIND_ = q.TM, q.NT, q.XW, q.SPC, q.NSTEP, q.ORD, q.ZP, q.KIND
    GS, INNER, NGI, NSC, NZ_SYM = q.GS, q.INNER, q.NGI, q.NSC, q.NZ_SYM
    reads = _make_scales(q)
    MMA = mma_bf16_m16n8k16 if dtype == "bfloat16" else mma_f16_m16n8k16

    @device
    def load_w(tm, wr, sa, u, lane):
        lds_v4u32(ptr(wr), 4 * tm, sa + 16 * ((u * TM + tm) * LANES + lane))
    loads_w = unrolled(load_w, TM)

    @device
    def mma_one(j, gacc, a, xb, tm, s):
        """Tile tm's A fragment times n8 tile j's B fragment of step s (its words 2s, 2s + 1)."""
        MMA(ptr(gacc), 4 * (tm * NT + j), ptr(a), 0, ptr(xb), j * XW + 2 * s)
    mmas = unrolled(mma_one, NT)

    @device
    def tile_step(tm, wr, a, gacc, xb, nzs, s, gi, lutl):
        """Tile tm's A fragment of step s of the chunk in ``wr``, then its mma with every n8 tile."""
        if ORD == 0:
            if ZP:
                nz0 = nzs[2 * (tm * NGI + gi)]
                nz1 = nzs[2 * (tm * NGI + gi) + 1]
            else:
                nz0 = uint32(NZ_SYM)
                nz1 = uint32(NZ_SYM)
            dq_int4(ptr(a), 0, wr[4 * tm + s], nz0, nz1, KIND_)
        elif ORD == 2:
            dq_int8(ptr(a), 0, wr[4 * tm + 2 * s], wr[4 * tm + 2 * s + 1], KIND_)
        else:
            lut_pairs4(ptr(a), 0, wr[4 * tm + s], lutl)
        mmas(NT, gacc, a, xb, tm, s)
    tiles = unrolled(tile_step, TM)

    @device
    def apply_one(i, acc, gacc, scl, gi):
        """Accumulators i (tile i // NT) += its group's sums times their features' scales."""
        tm = i // NT
        s0 = scl[2 * (tm * NGI + gi)]
        s1 = scl[2 * (tm * NGI + gi) + 1]
        e = 4 * i
        acc[e] += s0 * gacc[e]
        acc[e + 1] += s0 * gacc[e + 1]
        acc[e + 2] += s1 * gacc[e + 2]
        acc[e + 3] += s1 * gacc[e + 3]
        for f in range(4):
            gacc[e + f] = float32(0)
    apply = unrolled(apply_one, TM * NT)

    @device
    def step(j, sa, regs, rt, c0):
        wr, xb, a, acc, gacc, scl, nzs = regs
        X, S, Z, lda, M, K, N, G, cend, nrow, g, t, lane, lutl = rt
        u = j // SPC
        s = j - u * SPC
        if s == 0:
            loads_w(TM, wr, sa, u, lane)
            load_xs(NT, xb, sa, u, c0, X, lda, M, K, cend, g, t, lane)
        tiles(TM, wr, a, gacc, xb, nzs, s, j // GS if INNER else 0, lutl)
        if INNER and (j + 1) % GS == 0:
            apply(TM * NT, acc, gacc, scl, j // GS)
    steps_ = unrolled(step, NSTEP)

    @device
    def compute(sa, regs, rt, c0):
        X, S, Z, lda, M, K, N, G, cend, nrow, g, t, lane, lutl = rt
        reads(NSC, sa, regs[5], regs[6], nrow, S, Z, c0, N, G, lane)
        steps_(NSTEP, sa, regs, rt, c0)
        if not INNER:
            apply(TM * NT, regs[3], regs[4], regs[5], 0)
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
        m, n = out_of(e >> 5, e & 31, NT, mt0)
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


def _make_lut(q: _Shape):
    """``fill_lut(lev, lbase, tid)``: the user's values of the 256 code pairs at shared address
    ``lbase``, one copy per lane (``lut_pairs4``'s table), between block barriers."""
    DEC, THREADS, KIND_ = q.DEC, q.THREADS, q.KIND

    @device
    def fill_lut(lev, lbase, tid):
        if tid < 16:
            lev[tid] = float32(DEC(tid))
        cuda.syncthreads()
        for e in range(tid, 256, THREADS):
            v = pack16x2(lev[e & 15], lev[e >> 4], KIND_)
            for f in range(LANES // 4):
                sts_v4u32(lbase + 4 * (e * LANES + 4 * f), v, v, v, v)
        cuda.syncthreads()
    return fill_lut


@kernel_factory
def qgemm_kernel(cfg: QConfig, fmt: Format, dtype: str, scale_dtype: str, out_dtype: str, nt: int,
                 group_k: int, xv: int, epi=PLAIN, xg: int = 8, wa: bool = False):
    """C (M x N, row-major, ``out_dtype``) = epilogue(x @ w.T) for x (M x K, ``dtype``, rows of
    unit stride) of at most ``8 nt`` rows and the packed weight of ``fmt`` with groups of
    ``group_k`` (the padded K for one group per row). ``xv`` (``X_ACCESS``): 16 or 8 where K is
    whole chunks and x's rows are that many bytes aligned (x's pieces copied with the stage in
    copies of that size), 0: element by element within K; ``xg``: ``x_rows``. Launched with
    ``smem_bytes`` of dynamic shared memory. ``wa``: the scales' (and zero points') words never
    straddle a row of them (``words_aligned``)."""
    if xv not in X_ACCESS:
        raise ValueError(f"xv must be one of {X_ACCESS}, got {xv}")
    if xg not in (1, 2, 4, 8) or (xg < 8 and nt > 1):
        raise ValueError(f"xg must be 1, 2, 4 (one tile of x) or 8, got {xg} with {nt} tiles")
    q = _Shape(cfg, fmt, dtype, scale_dtype, nt, group_k, xv, xg, wa)
    bases, issue = _make_issue(q, xv)
    compute = _make_compute(q, dtype, _make_x(q, xv))
    finish = _make_sums(q, out_dtype, epi)
    fill_lut = _make_lut(q)
    TM, WARPS, U, SPLIT, NACC, NSC, LUT = q.TM, q.WARPS, q.U, q.SPLIT, q.NACC, q.NSC, q.LUT
    STAGES, STAGE, RING, LUT_OFF, SB = q.STAGES, q.STAGE, q.RING, q.LUT_OFF, q.SB
    LEV_N, NXB, NWR, NT, NB, NR2 = 16 if LUT else 1, q.XW * q.NT, 4 * q.TM, q.NT, max(2 * q.TM, q.NT), 2 * q.TM

    def qgemm(X, P, S, Z, C, M, N, K, lda, ldc, kc, kcv, cpp, ntiles, G, ep):
        dyn = cuda.shared.array(0, uint32)
        red = cuda.shared.array(0, float32)          # (the same memory: the sums after the rings)
        lev = cuda.shared.array(LEV_N, float32)
        acc = cuda.local.array(NACC, float32)
        gacc = cuda.local.array(NACC, float32)
        wr = cuda.local.array(NWR, uint32)
        xb = cuda.local.array(NXB, uint32)
        a = cuda.local.array(4, uint32)
        scl = cuda.local.array(NSC, float32)
        nzs = cuda.local.array(NSC, uint32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        g = lane >> 2
        blk = cuda.blockIdx.x
        rank = blk % SPLIT
        mt0 = (blk // SPLIT) * TM
        cbeg, cend = part_of(rank, warp, WARPS, cpp, kcv)
        for i in range(NACC):
            acc[i] = float32(0)
            gacc[i] = float32(0)
        base = smem_addr(ptr(dyn))
        ring = base + warp * RING
        wrow = cuda.local.array(TM, int64)
        xrow = cuda.local.array(NT, int64)
        nrow = cuda.local.array(NR2, int64)
        bases(NB, wrow, xrow, nrow, P, X, lda, M, kc, ntiles, N, mt0, g, lane & 3, lane)
        st = (wrow, xrow, nrow, S, Z, cend, N, G, S + SB * G * N, Z + G * N, lane)
        for s in range(STAGES):              # the first stages' copies go out before anything else
            issue(ring + s * STAGE, cbeg + s * U, st)
        lbase = base + LUT_OFF
        if LUT:
            fill_lut(lev, lbase, tid)
        regs = (wr, xb, a, acc, gacc, scl, nzs)
        rt = (X, S, Z, lda, M, K, N, G, cend, nrow, g, lane & 3, lane, lbase + 4 * lane)
        c0 = cbeg
        sa = ring
        while c0 < cend:
            cp_async_wait(STAGES - 1)        # this stage's copies are done (this thread's own)
            compute(sa, regs, rt, c0)
            # the slot is refilled after every value read from it has been used (in-order issue)
            issue(sa, c0 + STAGES * U, st)
            c0 += U
            sa += STAGE
            if sa == ring + RING:
                sa = ring
        cp_async_wait(0)
        cuda.syncthreads()                   # (every warp done with its ring: the sums reuse it)
        finish(acc, red, tid, lane, warp, rank, mt0, M, N, C, ldc, ep)

    return kernel(qgemm, ("i64",) * 15, launch_bounds=(cfg.threads, cfg.minb), max_shared=True,
                  values=len(epi.slots()))


@kernel_factory
def dequant_kernel(fmt: Format, dtype: str, scale_dtype: str, group_k: int):
    """W (Npad x Kpad, row-major ``dtype``, ``ldw``) = value(q) * s rounded once, a thread per
    lane of a tile's chunk: its 16 bytes in, its pieces of rows g and g + 8 out (16-byte
    stores), each piece with its group's scales."""
    KIND_ = KIND[dtype]
    CK = fmt.chunk_k
    PC = CK // SPAN
    XW = 4 * PC                           # output words of a row's run
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
    NS = 2 * PC

    @device
    def piece_scales(p, sc, nz, S, Z, N, G, c, n0):
        """Piece p's group's scales (and -(M + z)) of rows n0, n0 + 8 into sc/nz[2 p + h]."""
        grp = min(run_k(c, p, 0, CK) // group_k, G - 1)
        for h in range(2):
            at = grp * N + min(n0 + 8 * h, N - 1)
            sc[2 * p + h] = f32_ptr(S)[at] if SK == 0 else ldg_in16(S + 2 * at, SK)
            if ZP:
                v = uint32(NZB) + ldg_u8(Z + at)
                nz[2 * p + h] = v | (v << uint32(16))
            else:
                nz[2 * p + h] = uint32(NZ_SYM)
    scales_ = unrolled(piece_scales, PC)

    @device
    def one_step(s, wb, a, ob, nz, sc, lutp):
        """Step s's four registers (rows g, g + 8; K 4 (s % 2) .. + 3 of piece s // 2), scaled,
        into the rows' output words 2 s, 2 s + 1."""
        p = s // 2 if SPC == 4 else 0
        if ORD == 0:
            dq_int4(ptr(a), 0, wb[s], nz[2 * p], nz[2 * p + 1], KIND_)
        elif ORD == 2:
            dq_int8(ptr(a), 0, wb[2 * s], wb[2 * s + 1], KIND_)
        else:
            for r in range(4):
                a[r] = lutp[prmt(wb[s], uint32(0), uint32(0x4440 + r))]
        for r in range(4):
            h = r % 2                     # the row
            v = sc[2 * p + h]
            ob[h * XW + 2 * s + r // 2] = pack16x2(in16_f32(a[r], 0, KIND_) * v, in16_f32(a[r], 1, KIND_) * v, KIND_)
    steps_ = unrolled(one_step, SPC)

    def dequant(P, S, Z, W, N, ldw, kc, ntiles, G):
        wb = cuda.local.array(4, uint32)
        a = cuda.local.array(4, uint32)
        ob = cuda.local.array(NOB, uint32)
        sc = cuda.local.array(NS, float32)
        nz = cuda.local.array(NS, uint32)
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
            n0 = TILE_N * mt + (lane >> 2)
            scales_(PC, sc, nz, S, Z, N, G, c, n0)
            steps_(SPC, wb, a, ob, nz, sc, ptr(lut))
            for h in range(2):
                for p in range(PC):
                    stg_v4u32(W + 2 * ((n0 + 8 * h) * ldw + run_k(c, p, lane & 3, CK)), ptr(ob), h * XW + 4 * p)

    return kernel(dequant, ("i64",) * 9, launch_bounds=(DEQUANT_THREADS, 1))
