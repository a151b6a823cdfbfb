"""Few rows: products whose A has at most a few rows (a model's decode step: one row per sequence).

Each element of B is then used once per row of A, so the product is one pass over B at the
memory's speed, and a tensor-core tile (64 to 256 rows of A) would be mostly padding; one launch
with plain pointers (no tensor maps, no split-K fix-up) also costs the host least. Two kernels,
by B's layout (``gemv_kernel``):

* B k-major (``nn.Linear``'s weight (N, K), read as W^T): a warp per column of C. Its lanes read
  the column's K elements 16 bytes at a time and multiply them by the same elements of each of
  A's rows; the lanes' sums are added by shuffles.
* B n-major (HF's ``Conv1D`` weight (K, N)): a block per ``8 * CG`` columns, a thread per 8 of
  them and one of ``KG`` groups of K, reading 16 bytes of a row of B; the groups' sums are added
  by shuffles, then across the block's warps in shared memory.

Both add in a fixed order (a call's result is the same every run) and apply the epilogue once,
to the sum. A block takes ``rows`` rows of A (1 or ``ROWS``); a taller A runs more blocks along y,
each reading B again; ``auto`` gives this rung ``AUTO_ROWS`` rows at most (``takes``).

``a_dtype`` float32 with 16-bit B: A is read as float32 and rounded to B's type on the load, as
autocast's cast of a layer's input would make it, without the cast's launch and copy
(``prepared.prepare(..., a_cast=...)``, used by ``numba_tc.torch``'s inference path).
"""
from __future__ import annotations

from itertools import product

from numba import cuda, float32, uint32

from .config import Variant
from .epilogue import PLAIN
from .epilogue import make as make_epilogue
from .fragments import OUT_CONVERT
from .intrinsics import f32_ptr, load_f32x4, ptr
from .jit import device, kernel, kernel_factory, unrolled
from .layout import ITEMSIZE
from .plan import Step, operand_args
from .primitives import in16_f32, ldg_in16, ldg_v4u32, round_in16, stg_out1
from .schedule import cdiv

__all__ = ["ROWS", "AUTO_ROWS", "gemv_kernel", "RUNGS", "takes"]

ROWS = 8             # rows of A a block takes
AUTO_ROWS = 1        # the most rows ``auto`` gives this rung (benchmarks/results/gemv_ab_h100.log)
AUTO_NMAJOR = 4096 * 4096   # and with B n-major, only a B of fewer elements (gemv_ab_wide_h100.log)
WARPS = 4            # k-major B: columns (warps) per block
U = 4                # 16-byte loads of B each thread has in flight
CG, NT = 2, 256      # n-major B: 8-column chunks per block, threads per block
KG = NT // CG        # n-major B: groups of K per block
NWARP = NT // 32
LANE_STEPS = 5 - (CG.bit_length() - 1)   # shuffles adding a warp's K groups
IN_KIND = {"float16": 1, "bfloat16": 2}


def takes(a, b, c) -> bool:
    """What ``auto`` gives this rung: at most AUTO_ROWS rows of A (of C, after a column-major C
    is turned into C^T = B^T A^T), and an n-major B only below AUTO_NMAJOR elements. Measured on
    the H100, its 8-row kernels lose to the tile ladders (they read A once per column of C), and
    so does its n-major kernel from a 4096 x 4096 B up (a block per 16 columns, down all of K:
    0.53-0.67x cuBLAS where ``hopper`` reads 0.67-0.91), while it wins at GPT-2's sizes."""
    return c.rows <= AUTO_ROWS and (b.trans or b.rows * b.cols < AUTO_NMAJOR)


class _Parts:
    """The device functions both kernels share, for one input type, A layout and epilogue."""

    def __init__(self, dtype: str, a_dtype: str, out_dtype: str, ta: bool, va: bool, epi):
        KIND = IN_KIND[dtype]
        A32 = a_dtype == "float32"
        VA = va and not ta
        OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], ITEMSIZE[out_dtype]
        EPI = make_epilogue(epi)

        @device
        def a_at(A, lda, m, k):
            """A[m, k] as the product's input type."""
            i = k * lda + m if ta else m * lda + k
            if A32:
                return round_in16(f32_ptr(A)[i], KIND)
            return ldg_in16(A + 2 * i, KIND)

        @device
        def dot8(A, lda, m, k, bf, o, aw):
            """A[m, k:k+8] . bf[o:o+8]."""
            s = float32(0)
            if VA and A32:
                pa = f32_ptr(A)
                for h in range(2):
                    x = load_f32x4(pa, m * lda + k + 4 * h)
                    for e in range(4):
                        s += round_in16(x[e], KIND) * bf[o + 4 * h + e]
            elif VA:
                ldg_v4u32(ptr(aw), 0, A + 2 * (m * lda + k))
                for e in range(8):
                    s += in16_f32(aw[e >> 1], e & 1, KIND) * bf[o + e]
            else:
                for e in range(8):
                    s += a_at(A, lda, m, k + e) * bf[o + e]
            return s

        @device
        def unpack8(bf, o, bw, wo):
            for e in range(8):
                bf[o + e] = in16_f32(bw[wo + (e >> 1)], e & 1, KIND)

        @device
        def out(C, ldc, M, N, m, n, v, ep):
            if m < M and n < N:
                stg_out1(C + OUT_ITEM * (m * ldc + n), EPI(v, m, n, ep), OUT_K)

        self.kind, self.a_at, self.dot8, self.unpack8, self.out = KIND, a_at, dot8, unpack8, out


# (the loops over rows and over a thread's U loads are written out by ``unrolled``: a loop left
# rolled would index the register arrays at run time, which puts them in local memory)

def _columns(parts: _Parts, vb: bool, rows: int, values: int):
    """k-major B: warp w of block x takes column x * WARPS + w; lane l, k = 8 l, 8 l + 256, ..."""
    KIND, a_at, dot8, unpack8, out = parts.kind, parts.a_at, parts.dot8, parts.unpack8, parts.out
    NBW, NBF = 4 * U, 8 * U

    @device
    def dot_row(r, acc, bf, o, aw, A, lda, m0, M, k):
        if m0 + r < M:
            acc[r] += dot8(A, lda, m0 + r, k, bf, o, aw)
    dot_rows = unrolled(dot_row, ROWS)

    @device
    def column_load(u, bw, B, ldb, col, k0, kv):
        if k0 + 256 * u < kv:
            ldg_v4u32(ptr(bw), 4 * u, B + 2 * (col * ldb + k0 + 256 * u))
    column_loads = unrolled(column_load, U)

    @device
    def column_step(u, acc, bf, bw, aw, A, lda, m0, M, k0, kv):
        k = k0 + 256 * u
        if k < kv:
            unpack8(bf, 8 * u, bw, 4 * u)
            dot_rows(rows, acc, bf, 8 * u, aw, A, lda, m0, M, k)
    column_steps = unrolled(column_step, U)

    def gemv_columns(A, B, C, M, N, K, lda, ldb, ldc, ep):
        acc = cuda.local.array(rows, float32)
        bw = cuda.local.array(NBW, uint32)
        bf = cuda.local.array(NBF, float32)
        aw = cuda.local.array(4, uint32)
        lane = cuda.threadIdx.x & 31
        n = cuda.blockIdx.x * WARPS + (cuda.threadIdx.x >> 5)
        m0 = cuda.blockIdx.y * rows
        for r in range(rows):
            acc[r] = float32(0)
        if n < N:
            kv = (K >> 3) << 3 if vb else 0
            for k0 in range(8 * lane, kv, 256 * U):
                column_loads(U, bw, B, ldb, n, k0, kv)          # the loads first, all in flight
                column_steps(U, acc, bf, bw, aw, A, lda, m0, M, k0, kv)
            for k in range(kv + lane, K, 32):            # the rest (all of K when B's rows are not aligned)
                b = ldg_in16(B + 2 * (n * ldb + k), KIND)
                for r in range(rows):
                    if m0 + r < M:
                        acc[r] += a_at(A, lda, m0 + r, k) * b
        for r in range(rows):
            v = acc[r]
            for i in range(5):
                v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 16 >> i)
            if lane == r:
                out(C, ldc, M, N, m0 + r, n, v, ep)

    return kernel(gemv_columns, ("i64",) * 9, launch_bounds=(32 * WARPS, 1), values=values)


def _chunks(parts: _Parts, vb: bool, rows: int, values: int):
    """n-major B: thread t of block x takes columns x * 8 * CG + 8 * (t % CG) .. + 8, for
    k = t // CG, + KG, ..."""
    KIND, a_at, unpack8, out = parts.kind, parts.a_at, parts.unpack8, parts.out
    NACC, NRED, NBW, NBF = rows * 8, CG * rows * 8, 4 * U, 8 * U   # (array sizes: constants of the closure)

    @device
    def fma_row(r, acc, bf, o, A, lda, m0, M, k):
        if m0 + r < M:
            a = a_at(A, lda, m0 + r, k)
            for e in range(8):
                acc[8 * r + e] += a * bf[o + e]
    fma_rows = unrolled(fma_row, ROWS)

    @device
    def chunk_load(u, bf, bw, B, ldb, n0, N, k0, K, whole):
        k = k0 + KG * u
        if k < K:
            if whole:
                ldg_v4u32(ptr(bw), 4 * u, B + 2 * (k * ldb + n0))
            else:
                for e in range(8):
                    bf[8 * u + e] = ldg_in16(B + 2 * (k * ldb + n0 + e), KIND) if n0 + e < N else float32(0)
    chunk_loads = unrolled(chunk_load, U)

    @device
    def chunk_step(u, acc, bf, bw, A, lda, m0, M, k0, K, whole):
        k = k0 + KG * u
        if k < K:
            if whole:
                unpack8(bf, 8 * u, bw, 4 * u)
            fma_rows(rows, acc, bf, 8 * u, A, lda, m0, M, k)
    chunk_steps = unrolled(chunk_step, U)

    def gemv_chunks(A, B, C, M, N, K, lda, ldb, ldc, ep):
        acc = cuda.local.array(NACC, float32)
        bw = cuda.local.array(NBW, uint32)
        bf = cuda.local.array(NBF, float32)
        red = cuda.shared.array((NWARP, NRED), float32)
        tid = cuda.threadIdx.x
        lane, warp, cg, kg = tid & 31, tid >> 5, tid % CG, tid // CG
        n0 = cuda.blockIdx.x * 8 * CG + 8 * cg
        m0 = cuda.blockIdx.y * rows
        for i in range(NACC):
            acc[i] = float32(0)
        whole = vb and n0 + 8 <= N
        for k0 in range(kg, K, KG * U):
            chunk_loads(U, bf, bw, B, ldb, n0, N, k0, K, whole)
            chunk_steps(U, acc, bf, bw, A, lda, m0, M, k0, K, whole)
        for i in range(NACC):                            # the warp's K groups (lanes CG apart)
            v = acc[i]
            for j in range(LANE_STEPS):
                v += cuda.shfl_xor_sync(0xFFFFFFFF, v, 16 >> j)
            acc[i] = v
        if lane < CG:
            for i in range(NACC):
                red[warp, lane * NACC + i] = acc[i]
        cuda.syncthreads()
        if tid < NRED:                                   # then the warps', one output a thread
            s = float32(0)
            for w in range(NWARP):
                s += red[w, tid]
            c, i = tid // NACC, tid % NACC
            out(C, ldc, M, N, m0 + i // 8, cuda.blockIdx.x * 8 * CG + 8 * c + i % 8, s, ep)

    return kernel(gemv_chunks, ("i64",) * 9, launch_bounds=(NT, 1), values=values)


@kernel_factory
def gemv_kernel(dtype: str, a_dtype: str, out_dtype: str, ta: bool, tb: bool, va: bool, vb: bool,
                rows: int, epi=PLAIN):
    """C = A @ B for 16-bit ``dtype`` B (and A, or float32 A with ``a_dtype`` "float32", read as
    ``dtype``); ``va``/``vb``: A's/B's rows (A row-major, B k-major for the warp kernel, n-major
    for the block kernel) start on 16-byte boundaries, so they are read 16 bytes at a time;
    ``rows``: rows of A per block. ``tb`` (B k-major) takes ``_columns``, else ``_chunks``."""
    parts = _Parts(dtype, a_dtype, out_dtype, ta, va, epi)
    return (_columns if tb else _chunks)(parts, vb, rows, len(epi.slots()))


def rows_for(m: int) -> int:
    """Rows of A per block: one for a single row (decoding one sequence), else ROWS."""
    return 1 if m == 1 else ROWS


def grid(tb: bool, m: int, n: int, rows: int):
    """(grid, block) of ``gemv_kernel``."""
    if tb:
        return (cdiv(n, WARPS), cdiv(m, rows)), 32 * WARPS
    return (cdiv(n, 8 * CG), cdiv(m, rows)), NT


def _flags(a, b):
    """(va, vb) as the kernel uses them: 16-byte rows of a row-major A; of B in its layout."""
    return a.aligned16 and not a.trans, b.aligned16


def _plan(a, b, c, dev, epi=PLAIN):
    rows = rows_for(c.rows)
    k = gemv_kernel(b.dtype, a.dtype, c.dtype, a.trans, b.trans, *_flags(a, b), rows, epi)
    g, block = grid(b.trans, c.rows, c.cols, rows)
    return [Step(k, g, block, operand_args(a, b, c))]


def _kernels(dtype):
    """Every kernel the planner picks for inputs of ``dtype`` (ahead-of-time compiles): per
    output dtype, layout, alignment of A's and B's rows and rows per block. (Float32 A, read as
    ``dtype``, and epilogues make other kernels, compiled on first use.)"""
    return [gemv_kernel(dtype, dtype, o, ta, tb, va and not ta, vb, rows)
            for o in dict.fromkeys((dtype, "float32")) for ta, tb in product((False, True), repeat=2)
            for va in (True, False) for vb in (True, False) for rows in (1, ROWS)
            if not (ta and va)]


RUNGS = [
    Variant("gemv", "rows", 1, ("float16", "bfloat16"), (8, 0),
            "A of a few rows (decoding): a pass over B at the memory's speed, 16-byte loads, sums "
            "in a fixed order; one launch with plain pointers", _plan, None,
            out_dtypes=("float32", "float16", "bfloat16"), kernels=_kernels, auto=takes, a_cast=True),
]
