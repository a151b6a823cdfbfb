"""The tensor-core ladder: mma.sync GEMM from Numba, composing the primitives of ``ptx/mma.cu``.

Five rungs. Rung 1 is its own small kernel; rungs 2-5 are one tiled kernel (``tiled_kernel``,
composed of parts, each a cached factory of compile-time facts returning device functions of
run-time values only: the load ``make_copy``, a mainloop per rung family over the warp's k-steps
``make_warp_mma``, the epilogue ``fragments.make_store_out``) built from an ``MmaConfig``; each
rung is one line, ``RUNG2``..``RUNG5`` below (rungs 2-4 switch on one knob each; rung 5 is the
tuned configuration). The same kernels serve every precision: fp16 and bf16 inputs run
``mma.m16n8k16``, fp32 inputs run ``mma.m16n8k8.tf32``; only the instruction, the element size and
(for mn-major tf32 operands, which ldmatrix cannot transpose) the fragment loads change.

Conventions (shared with the SIMT ladder, see ``simt.py``):

* C (M x N, row-major, ``ldc``) = A (M x K) @ B (K x N); ``ta``/``tb`` say A/B are column-major.
  ``api.gemm`` turns a column-major C into a row-major one (C^T = B^T A^T).
* Kernel arguments are raw device addresses (int64) and sizes: one kernel signature for every
  element type. Shared memory is addressed by 32-bit byte addresses from ``smem_addr``.
* Tiles are copied into shared memory as they lie in global memory, in 16-byte chunks (see
  ``layout.py``); a k-major operand is read with ``ldmatrix``, an mn-major one with
  ``ldmatrix.trans``, so no operand layout needs a copy on the host.
* Edges: chunks past M, N or K are zero-filled (``cp.async`` src-size 0), partial chunks read only
  their valid bytes, and the epilogue writes only inside C, so any shape works. Operands whose rows
  are not 16-byte aligned take an element-wise copy path (correct, slower).
"""
from __future__ import annotations

import math
from functools import lru_cache
from itertools import product

from numba import cuda, float32, int32, uint32

from . import layout
from .config import MmaConfig, Variant
from .epilogue import PLAIN
from .epilogue import make as make_epilogue
from .fragments import OUT_CONVERT, make_store_out
from .intrinsics import ptr
from .jit import device, kernel, kernel_factory, unrolled
from .layout import a_fragment, b_fragment, chunk_offset, compute_dtype
from .plan import Step, operand_args
from .primitives import (copy16, cp_async16, cp_async_commit, cp_async_wait, ldg_u16, ldg_u32,
                         lds_u32, ldsm_x4, ldsm_x4_t, round_tf32, mma_bf16_m16n8k16, mma_f16_m16n8k16,
                         mma_tf32_m16n8k8, smem_addr, sts_u16, sts_u32)
from .schedule import cdiv, tile_origin

__all__ = ["RUNGS", "naive_kernel", "tiled_kernel"]

_MMA = {"float16": mma_f16_m16n8k16, "bfloat16": mma_bf16_m16n8k16, "tf32": mma_tf32_m16n8k8}


# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------
@device
def _elem(r, c, ld, trans):
    """Element offset of (r, c) in a row-major (or, with ``trans``, column-major) matrix."""
    return c * ld + r if trans else r * ld + c


# ---------------------------------------------------------------------------------------------
# Rung 1: naive. One warp per 16x16 tile of C (two m16n8 fragments); each lane loads its own
# fragment elements straight from global memory, following the fragment map.
# ---------------------------------------------------------------------------------------------
@kernel_factory
def naive_kernel(dtype: str, out_dtype: str, ta: bool, tb: bool, epi=PLAIN):
    ITEM = layout.ITEMSIZE[dtype]
    E = layout.elems_per_reg(ITEM)
    KSTEP = 8 * E
    MMA = _MMA[dtype]
    LDG = ldg_u32 if ITEM == 4 else ldg_u16
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], layout.ITEMSIZE[out_dtype]
    store_out = make_store_out(2, 2, 16, OUT_ITEM, OUT_K, False, 2, make_epilogue(epi))

    def mma_naive(A, B, C, M, N, K, lda, ldb, ldc, ep):
        fa = cuda.local.array(4, uint32)
        fb = cuda.local.array(4, uint32)
        acc = cuda.local.array(8, float32)
        for i in range(8):
            acc[i] = float32(0)
        pa, pb, pacc = ptr(fa), ptr(fb), ptr(acc)
        lane = cuda.threadIdx.x & 31
        warp = cuda.threadIdx.x >> 5
        m0 = cuda.blockIdx.y * 32 + (warp >> 1) * 16      # 4 warps: a 32x32 block of C
        n0 = cuda.blockIdx.x * 32 + (warp & 1) * 16
        for k0 in range(0, K, KSTEP):
            for reg in range(4):
                v = uint32(0)
                for e in range(E):
                    r, c = a_fragment(lane, reg, e, E)
                    if m0 + r < M and k0 + c < K:
                        v |= uint32(LDG(A + _elem(m0 + r, k0 + c, lda, ta) * ITEM)) << uint32(16 * e)
                fa[reg] = v
            for reg in range(4):                          # regs 0-1: columns n0.., 2-3: n0+8..
                v = uint32(0)
                for e in range(E):
                    r, c = b_fragment(lane, reg & 1, e, E)
                    n = n0 + 8 * (reg >> 1) + c
                    if k0 + r < K and n < N:
                        v |= uint32(LDG(B + _elem(k0 + r, n, ldb, tb) * ITEM)) << uint32(16 * e)
                fb[reg] = v
            if ITEM == 4:
                round_tf32(pa, 0, 4)
                round_tf32(pb, 0, 4)
            MMA(pacc, 0, pa, 0, pb, 0)
            MMA(pacc, 4, pa, 0, pb, 2)
        store_out(C, ldc, M, N, acc, m0, n0, lane, ep)

    return kernel(mma_naive, ("i64",) * 9, launch_bounds=(128, 1), values=len(epi.slots()))


# ---------------------------------------------------------------------------------------------
# Rungs 2-5: the tiled kernel and its pieces
# ---------------------------------------------------------------------------------------------
@device
def _tile_thread(g, ld, r0, c0, nrows, ncols, CPR, EPC, ITEM, SWZ, tid):
    """This thread's share of copying a stored tile whose element (0, 0) is global element
    (r0, c0) of an nrows x ncols matrix (stored orientation, leading dimension ld): it copies
    chunk tid % CPR of rows tid // CPR + v * (threads / CPR).

    Returns what does not change from one K slice to the next, so that the main loop only adds
    the slice's offset: (global address of the first chunk, its shared-memory offset, rows and
    columns of the matrix left from it)."""
    rt = tid // CPR
    c = tid - rt * CPR
    gaddr = g + ((r0 + rt) * ld + c0 + c * EPC) * ITEM
    return gaddr, chunk_offset(rt, c, CPR, SWZ), nrows - r0 - rt, ncols - c0 - c * EPC


@device
def _copy_tile(sbase, srel, gaddr, vstride, rows_left, cols_left, ROWS, CPR, SWZ, ITEM, EPC,
               vec, ASYNC, full, tid, NT):
    """Copy one stored tile (ROWS rows of CPR 16-byte chunks) into shared memory at sbase, from
    this thread's chunks at gaddr + v * vstride (see _tile_thread). Chunks outside the matrix are
    zero-filled. vec (rows 16-byte aligned): one cp.async (or ld.global.v4 + st.shared.v4) per
    chunk, reading only the bytes inside the matrix; otherwise element by element.
    ``full`` (the whole tile lies inside the matrix, the same for the whole block): no checks."""
    RSTEP = NT // CPR
    if vec and full and RSTEP % 8 == 0:
        for v in range(ROWS // RSTEP):
            saddr = sbase + srel + v * (RSTEP * CPR * 16)
            if ASYNC:
                cp_async16(saddr, gaddr + v * vstride, 16)
            else:
                copy16(saddr, gaddr + v * vstride, 16)
        return
    nb = min(max(cols_left, 0), EPC) * ITEM
    for v in range(ROWS // RSTEP):
        if RSTEP % 8 == 0:           # every row this thread copies swizzles alike
            saddr = sbase + srel + v * (RSTEP * CPR * 16)
        else:
            rt = tid // CPR
            saddr = sbase + chunk_offset(rt + v * RSTEP, tid - rt * CPR, CPR, SWZ)
        row_ok = v * RSTEP < rows_left
        if vec:
            n = nb if row_ok else 0                 # n == 0: nothing is read, 16 zeros written
            if ASYNC:
                cp_async16(saddr, gaddr + v * vstride, n)
            else:
                copy16(saddr, gaddr + v * vstride, n)
        else:
            for l in range(EPC):
                x = uint32(0)
                if row_ok and l < cols_left:
                    a = gaddr + v * vstride + l * ITEM
                    x = ldg_u32(a) if ITEM == 4 else ldg_u16(a)
                if ITEM == 4:
                    sts_u32(saddr + l * ITEM, x)
                else:
                    sts_u16(saddr + l * ITEM, x)


@device
def _frag_base(q, w0, lr, lc, KMAJOR, CPR, SWZ, EPC):
    """Byte offset, in a stored tile, of the row this lane hands to ldmatrix for the fragment at
    k-step q (k-major) or at 16-row group q of the warp tile (mn-major), the other index 0.

    The other index moves the address by whole 8-row groups, which the swizzle (row % 8) does not
    see, so the kernel adds it as a constant: per lane, only these few offsets are computed."""
    if KMAJOR:
        return chunk_offset(w0 + lr, 2 * q + lc, CPR, SWZ)
    return chunk_offset(lr, (w0 + 16 * q) // EPC + lc, CPR, SWZ)


@device
def _load_a(i, pa, fo, sA, ks, offa, wm0, lane, KMAJOR, CPR, SWZ, ITEM, EPC):
    """A fragment i (rows wm0 + 16i..) of k-step ks into pa[fo + 4i..fo + 4i+3]."""
    ROWS16 = 16 * CPR * 16                 # bytes of 16 stored rows
    f = fo + 4 * i
    if KMAJOR:                             # stored [m][k]: ldmatrix
        ldsm_x4(pa, f, sA + offa[ks] + i * ROWS16)
    elif ITEM == 2:                        # stored [k][m]: ldmatrix.trans
        ldsm_x4_t(pa, f, sA + offa[i] + ks * ROWS16)
    else:                                  # tf32 stored [k][m]: 32-bit elements, one LDS each
        for reg in range(4):
            m, k = a_fragment(lane, reg, 0, 1)
            col = wm0 + 16 * i + m
            pa[f + reg] = lds_u32(sA + chunk_offset(8 * ks + k, col >> 2, CPR, SWZ) + (col & 3) * 4)
    if ITEM == 4:
        round_tf32(pa, f, 4)


@device
def _load_b(j, pb, fo, sB, ks, offb, wn0, lane, KMAJOR, CPR, SWZ, ITEM, EPC):
    """B fragments 2j and 2j+1 (columns wn0 + 16j..) of k-step ks into pb[fo + 4j..fo + 4j+3]."""
    ROWS16 = 16 * CPR * 16
    f = fo + 4 * j
    if KMAJOR:                             # stored [n][k]
        ldsm_x4(pb, f, sB + offb[ks] + j * ROWS16)
    elif ITEM == 2:                        # stored [k][n]
        ldsm_x4_t(pb, f, sB + offb[j] + ks * ROWS16)
    else:
        for reg in range(4):
            k, n = b_fragment(lane, reg & 1, 0, 1)
            col = wn0 + 16 * j + 8 * (reg >> 1) + n
            pb[f + reg] = lds_u32(sB + chunk_offset(8 * ks + k, col >> 2, CPR, SWZ) + (col & 3) * 4)
    if ITEM == 4:
        round_tf32(pb, f, 4)


_load_a_all = unrolled(_load_a, 8)
_load_b_all = unrolled(_load_b, 8)


@device
def _mma_one(t, pacc, pa, fa, pb, fb, NI, MMA):
    i = t // NI
    j = t - i * NI
    MMA(pacc, 4 * t, pa, fa + 4 * i, pb, fb + 2 * j)


_mma_all = unrolled(_mma_one, 64)


@device
def _frag_offsets(offa, offb, wm0, wn0, lane, QA, QB, A_KM, A_CPR, B_KM, B_CPR, SWZ, EPC):
    """The per-lane ldmatrix offsets of the warp tile's fragments (``_frag_base``)."""
    alr, alc = layout.ldsm_a(lane, A_KM)
    blr, blc = layout.ldsm_b(lane, B_KM)
    for q in range(QA):
        offa[q] = _frag_base(q, wm0, alr, alc, A_KM, A_CPR, SWZ, EPC)
    for q in range(QB):
        offb[q] = _frag_base(q, wn0, blr, blc, B_KM, B_CPR, SWZ, EPC)


# ---------------------------------------------------------------------------------------------
# The tiled kernel's parts, as in ``hopper/``: each a factory, cached per configuration, that
# closes over its compile-time constants (upper case) and returns device functions of run-time
# values only; the larger parts take the smaller ones they call as arguments, so any one can be
# swapped. ``tiled_kernel`` composes them. A warp's state travels as one tuple, ``warp`` =
# (pacc, pa, pb, offa, offb, wm0, wn0, lane): the addresses of its accumulators and of its two
# fragment arrays, its ldmatrix offsets (``_frag_offsets``), its place in the block tile, its lane.
# ---------------------------------------------------------------------------------------------
@lru_cache(maxsize=None)
def make_copy(A_KM, A_ROWS, A_CPR, B_KM, B_ROWS, B_CPR, A_BYTES, SWZ, ITEM, va, vb, ASYNC, NT):
    """Load: ``(copy_state, copy_slice)``. ``copy_state(A, B, M, N, K, lda, ldb, bm0, bn0, tid)``:
    what of this thread's share of copying the block's A and B tiles does not change from one
    K slice to the next (``_tile_thread``): (ga, sra, vsa, rla, cla, gb, srb, vsb, rlb, clb, lda,
    ldb), vs* the bytes between the rows it copies (R_STEP rows: the block's threads over the
    tile's chunks per row). ``copy_slice(stage, k0, cs, full, tid)``: K slice k0 of A and B into
    the stage at shared address ``stage`` (cp.async with ASYNC): K moves a k-major tile along its
    columns, an mn-major one along its rows; ``full``: the slice lies inside A and B."""
    EPC = layout.elems_per_chunk(ITEM)
    A_RSTEP, B_RSTEP = NT // A_CPR, NT // B_CPR  # rows of a tile the block's threads copy at once

    @device
    def copy_state(A, B, M, N, K, lda, ldb, bm0, bn0, tid):
        if A_KM:
            ga, sra, rla, cla = _tile_thread(A, lda, bm0, 0, M, K, A_CPR, EPC, ITEM, SWZ, tid)
        else:
            ga, sra, rla, cla = _tile_thread(A, lda, 0, bm0, K, M, A_CPR, EPC, ITEM, SWZ, tid)
        if B_KM:
            gb, srb, rlb, clb = _tile_thread(B, ldb, bn0, 0, N, K, B_CPR, EPC, ITEM, SWZ, tid)
        else:
            gb, srb, rlb, clb = _tile_thread(B, ldb, 0, bn0, K, N, B_CPR, EPC, ITEM, SWZ, tid)
        vsa = A_RSTEP * lda * ITEM
        vsb = B_RSTEP * ldb * ITEM
        return ga, sra, vsa, rla, cla, gb, srb, vsb, rlb, clb, lda, ldb

    @device
    def copy_slice(stage, k0, cs, full, tid):
        ga, sra, vsa, rla, cla, gb, srb, vsb, rlb, clb, lda, ldb = cs
        if A_KM:
            _copy_tile(stage, sra, ga + k0 * ITEM, vsa, rla, cla - k0, A_ROWS, A_CPR, SWZ, ITEM, EPC, va, ASYNC,
                       full, tid, NT)
        else:
            _copy_tile(stage, sra, ga + k0 * lda * ITEM, vsa, rla - k0, cla, A_ROWS, A_CPR, SWZ, ITEM, EPC, va,
                       ASYNC, full, tid, NT)
        if B_KM:
            _copy_tile(stage + A_BYTES, srb, gb + k0 * ITEM, vsb, rlb, clb - k0, B_ROWS, B_CPR, SWZ, ITEM, EPC, vb,
                       ASYNC, full, tid, NT)
        else:
            _copy_tile(stage + A_BYTES, srb, gb + k0 * ldb * ITEM, vsb, rlb - k0, clb, B_ROWS, B_CPR, SWZ, ITEM,
                       EPC, vb, ASYNC, full, tid, NT)
    return copy_state, copy_slice


@lru_cache(maxsize=None)
def make_warp_mma(MI, NI, A_KM, A_CPR, B_KM, B_CPR, SWZ, ITEM, MMA):
    """A warp's k-step: ``(load_frags, mma_frags)``. ``load_frags(ks, fs, sA, sB, warp)``: the
    A and B fragments of k-step ks, from the tiles at shared addresses sA and sB, into fragment
    set fs (0 or 1); ``mma_frags(fs, warp)``: the warp tile's MI x NI mma instructions (``MMA``)
    on fragment set fs."""
    EPC = layout.elems_per_chunk(ITEM)

    @device
    def load_frags(ks, fs, sA, sB, warp):
        _, pa, pb, offa, offb, wm0, wn0, lane = warp
        _load_a_all(MI, pa, fs * 4 * MI, sA, ks, offa, wm0, lane, A_KM, A_CPR, SWZ, ITEM, EPC)
        _load_b_all(NI // 2, pb, fs * 2 * NI, sB, ks, offb, wn0, lane, B_KM, B_CPR, SWZ, ITEM, EPC)

    @device
    def mma_frags(fs, warp):
        pacc, pa, pb = warp[0], warp[1], warp[2]
        _mma_all(MI * NI, pacc, pa, fs * 4 * MI, pb, fs * 2 * NI, NI, MMA)
    return load_frags, mma_frags


@lru_cache(maxsize=None)
def make_slice_mma(load_frags, mma_frags, KSTEPS, A_BYTES):
    """``slice_mma(stage, warp)``: the KSTEPS k-steps of the K slice in the stage at shared
    address ``stage`` (its A tile, then its B tile A_BYTES on), each loading its fragments into
    set 0 and then issuing its mma (``make_warp_mma``)."""
    @device
    def kstep(ks, sA, sB, warp):
        load_frags(ks, 0, sA, sB, warp)
        mma_frags(0, warp)
    ksteps = unrolled(kstep, 8)

    @device
    def slice_mma(stage, warp):
        ksteps(KSTEPS, stage, stage + A_BYTES, warp)
    return slice_mma


# Mainloops, one per rung family: ``mainloop(s0, ntiles, K, inner, warp, cs, tid)`` computes the
# block's ntiles K slices through the stages from shared address s0 into the warp's accumulators
# (``copy_slice`` with copy state ``cs``: ``make_copy``); ``inner``: the block's tiles lie inside
# A and B, so that a slice inside K is copied without checks.
@lru_cache(maxsize=None)
def make_mainloop_staged(copy_slice, slice_mma, BK):
    """Rungs 2-3's mainloop, one stage: copy, barrier, compute, barrier."""
    @device
    def mainloop(s0, ntiles, K, inner, warp, cs, tid):
        for t in range(ntiles):
            copy_slice(s0, t * BK, cs, inner and (t + 1) * BK <= K, tid)
            cuda.syncthreads()
            slice_mma(s0, warp)
            cuda.syncthreads()
    return mainloop


@lru_cache(maxsize=None)
def make_mainloop_pipelined(copy_slice, slice_mma, S, STAGE, BK):
    """Rung 4's mainloop, a ring of S stages of STAGE bytes (slices 0..S-2 in flight, one commit
    group each): wait for slice t, refill the stage slice t-1 used with slice t + S - 1
    (cp.async), compute slice t."""
    @device
    def mainloop(s0, ntiles, K, inner, warp, cs, tid):
        rd = 0                                # stage holding slice t
        wr = S - 1                            # stage slice t + S - 1 goes to
        for t in range(ntiles):
            cp_async_wait(S - 2)              # slice t has landed (for this thread) ...
            cuda.syncthreads()                # ... for all threads; slice t-1 is consumed
            # slice t + S - 1 exists (written so: as nt < ntiles with nt = t + S - 1 and S a
            # constant, LLVM left other address arithmetic, and ptxas took 2 more registers)
            if t + S <= ntiles:
                copy_slice(s0 + wr * STAGE, (t + S - 1) * BK, cs, inner and (t + S) * BK <= K, tid)
            cp_async_commit()
            slice_mma(s0 + rd * STAGE, warp)
            rd = 0 if rd == S - 1 else rd + 1
            wr = 0 if wr == S - 1 else wr + 1
    return mainloop


@lru_cache(maxsize=None)
def make_mainloop_prefetch(copy_slice, load_frags, mma_frags, S, STAGE, BK, KSTEPS, A_BYTES):
    """Rung 5's mainloop (slices 0..S-1 in flight), CUTLASS's multistage order (``slice_ahead``).
    Two copies of the loop: while the slice to fetch is whole (an interior block, not the last
    partial slice) the copy has no branch, so the loop body is one basic block in which ptxas
    interleaves cp.async with mma; the last S slices and edge blocks run the checked copy."""
    @device
    def kstep_ahead(ks, sA, sB, warp):
        """k-step ks from fragment set ks % 2, once k-step ks + 1's are on their way to the other."""
        load_frags(ks + 1, (ks + 1) & 1, sA, sB, warp)
        mma_frags(ks & 1, warp)
    ksteps_ahead = unrolled(kstep_ahead, 8)

    @device
    def slice_ahead(t, rd, WHOLE, s0, ntiles, K, inner, warp, cs, tid):
        """Slice t (in stage rd, its k-step 0 fragments in set 0) with fragment prefetch; returns
        the next slice's stage. Fragments are double-buffered in registers: k-step ks computes
        from set ks % 2 while k-step ks + 1's load into the other set, and the barrier comes
        before the last k-step, so the next slice's first fragments load while that k-step's mma
        run: neither the barrier nor ldmatrix latency idles the tensor cores at a slice boundary.
        After the barrier every fragment of slice t is in registers, so its stage takes slice
        t + S at once. WHOLE: that slice is known to be whole (no checks)."""
        sa = s0 + rd * STAGE
        ksteps_ahead(KSTEPS - 1, sa, sa + A_BYTES, warp)
        cp_async_wait(S - 2)              # slice t+1 has landed (groups up to slice t+S-1 issued)
        cuda.syncthreads()                # ... for all threads; slice t is all in registers
        nrd = 0 if rd == S - 1 else rd + 1
        sn = s0 + nrd * STAGE             # (past the last slice: a stale stage, never used)
        load_frags(0, 0, sn, sn + A_BYTES, warp)      # set 0: KSTEPS is even
        nt = t + S
        if WHOLE or nt < ntiles:
            copy_slice(sa, nt * BK, cs, WHOLE or (inner and (nt + 1) * BK <= K), tid)
        cp_async_commit()
        mma_frags((KSTEPS - 1) & 1, warp)
        return nrd

    @device
    def mainloop(s0, ntiles, K, inner, warp, cs, tid):
        cp_async_wait(S - 1)                  # slice 0 has landed
        cuda.syncthreads()
        load_frags(0, 0, s0, s0 + A_BYTES, warp)
        t_full = max(min(K // BK - S, ntiles), 0) if inner else 0
        rd = 0                                # stage holding slice t
        for t in range(t_full):
            rd = slice_ahead(t, rd, True, s0, ntiles, K, inner, warp, cs, tid)
        for t in range(t_full, ntiles):
            rd = slice_ahead(t, rd, False, s0, ntiles, K, inner, warp, cs, tid)
    return mainloop


@kernel_factory
def tiled_kernel(cfg: MmaConfig, dtype: str, out_dtype: str, ta: bool, tb: bool,
                 va: bool, vb: bool, vc: bool, epi=PLAIN):
    """The kernel of rungs 2-5 for one configuration, precision, layout and alignment: the
    scheduler (``tile_origin``), the load (``make_copy``), the mainloop (one per rung family:
    ``make_mainloop_staged``, ``make_mainloop_pipelined``, ``make_mainloop_prefetch``, over the
    warp's k-steps ``make_warp_mma``) and the epilogue (``fragments.make_store_out``).

    va/vb: the operand's rows are 16-byte aligned (chunk copies are legal); vc: C's adjacent
    column pairs are aligned for one paired store."""
    ITEM = layout.ITEMSIZE[dtype]
    EPC = layout.elems_per_chunk(ITEM)
    MMA = _MMA[dtype]
    OUT_K, OUT_ITEM = OUT_CONVERT[out_dtype], layout.ITEMSIZE[out_dtype]
    EPI = make_epilogue(epi)
    BM, BN, WM, WN, NT = cfg.bm, cfg.bn, cfg.wm, cfg.wn, cfg.threads
    BK = cfg.bk * 2 // ITEM                      # K elements per slice: 128 bytes per row
    MI, NI, KSTEPS = cfg.mma_tiles()
    WARPS_N = BN // WN
    S, ASYNC, SWZ, GROUP = cfg.stages, cfg.async_copy, cfg.swizzle, max(cfg.group_m, 1)
    A_KM, B_KM = not ta, tb                      # k-major: K is the contiguous dimension
    A_ROWS, A_CPR = (BM, BK // EPC) if A_KM else (BK, BM // EPC)
    B_ROWS, B_CPR = (BN, BK // EPC) if B_KM else (BK, BN // EPC)
    A_BYTES = BM * BK * ITEM
    STAGE = A_BYTES + BN * BK * ITEM
    # tf32 keeps the plain order: its fragments are rounded on every load, and with two sets of
    # them the prefetch measured slower (bf16/fp16 +19%, tf32 -5%; benchmarks/NOTES.md)
    PF = cfg.frag_prefetch and ITEM == 2
    PROLOGUE = S if PF else S - 1                # K slices in flight before the main loop
    NACC, NFA, NFB = MI * NI * 4, MI * 4 * (1 + PF), NI * 2 * (1 + PF)   # two fragment sets with PF
    OUT_G = math.gcd(MI * NI, 2)                 # fragments per epilogue group (fragments.make_store_out)
    QA = KSTEPS if A_KM else MI                  # per-lane ldmatrix offsets (see _frag_base)
    QB = KSTEPS if B_KM else NI // 2
    # the parts (ASYNC: frag_prefetch needs async_copy, and only rungs 2-3 copy synchronously)
    copy_state, copy_slice = make_copy(A_KM, A_ROWS, A_CPR, B_KM, B_ROWS, B_CPR, A_BYTES, SWZ, ITEM, va, vb,
                                       ASYNC, NT)
    load_frags, mma_frags = make_warp_mma(MI, NI, A_KM, A_CPR, B_KM, B_CPR, SWZ, ITEM, MMA)
    if PF:
        mainloop = make_mainloop_prefetch(copy_slice, load_frags, mma_frags, S, STAGE, BK, KSTEPS, A_BYTES)
    elif ASYNC:
        mainloop = make_mainloop_pipelined(copy_slice, make_slice_mma(load_frags, mma_frags, KSTEPS, A_BYTES),
                                           S, STAGE, BK)
    else:
        mainloop = make_mainloop_staged(copy_slice, make_slice_mma(load_frags, mma_frags, KSTEPS, A_BYTES), BK)
    store_out = make_store_out(MI * NI, NI, 16, OUT_ITEM, OUT_K, vc, OUT_G, EPI)

    def mma_tiled(A, B, C, M, N, K, lda, ldb, ldc, ep):
        smem = cuda.shared.array(0, uint32)       # dynamic: S stages of (A tile, B tile)
        s0 = smem_addr(ptr(smem))
        fa = cuda.local.array(NFA, uint32)
        fb = cuda.local.array(NFB, uint32)
        acc = cuda.local.array(NACC, float32)
        for i in range(NACC):
            acc[i] = float32(0)
        pa, pb, pacc = ptr(fa), ptr(fb), ptr(acc)
        tid = cuda.threadIdx.x
        lane = tid & 31
        wm0 = ((tid >> 5) // WARPS_N) * WM
        wn0 = ((tid >> 5) % WARPS_N) * WN
        offa = cuda.local.array(QA, int32)
        offb = cuda.local.array(QB, int32)
        _frag_offsets(offa, offb, wm0, wn0, lane, QA, QB, A_KM, A_CPR, B_KM, B_CPR, SWZ, EPC)
        # block -> tile, in groups of GROUP block rows (consecutive blocks share B tiles in L2)
        bm0, bn0 = tile_origin(cuda.blockIdx.x, (M + BM - 1) // BM, (N + BN - 1) // BN, GROUP, BM, BN)
        ntiles = (K + BK - 1) // BK
        inner = bm0 + BM <= M and bn0 + BN <= N      # the block's tiles lie inside A and B
        cs = copy_state(A, B, M, N, K, lda, ldb, bm0, bn0, tid)
        if ASYNC:
            # prologue: slices 0..P-1 in flight, commit group g holding slice g. With the
            # fragment prefetch all S stages fill (see make_mainloop_prefetch); without it one
            # stays free for the copy issued at the top of each iteration.
            for s in range(PROLOGUE):
                if s < ntiles:
                    copy_slice(s0 + s * STAGE, s * BK, cs, inner and (s + 1) * BK <= K, tid)
                cp_async_commit()
        mainloop(s0, ntiles, K, inner, (pacc, pa, pb, offa, offb, wm0, wn0, lane), cs, tid)
        if ASYNC:
            cp_async_wait(0)                      # (only empty groups remain: nothing in flight)
        store_out(C, ldc, M, N, acc, bm0 + wm0, bn0 + wn0, lane, ep)

    return kernel(mma_tiled, ("i64",) * 9, launch_bounds=(NT, cfg.min_blocks), values=len(epi.slots()))


# ---------------------------------------------------------------------------------------------
# Host side: launches and the rung table
# ---------------------------------------------------------------------------------------------
def _plan_naive(a, b, c, dev, epi=PLAIN):
    k = naive_kernel(compute_dtype(a.dtype), c.dtype, a.trans, b.trans, epi)
    return [Step(k, (cdiv(c.cols, 32), cdiv(c.rows, 32)), 128, operand_args(a, b, c))]


def grid_size(cfg: MmaConfig, m: int, n: int) -> int:
    return cdiv(m, cfg.bm) * cdiv(n, cfg.bn)


def _plan_tiled(cfg: MmaConfig):
    def plan(a, b, c, dev, epi=PLAIN):
        k = tiled_kernel(cfg, compute_dtype(a.dtype), c.dtype, a.trans, b.trans,
                         a.aligned16, b.aligned16, c.pairs_aligned, epi)
        return [Step(k, grid_size(cfg, c.rows, c.cols), cfg.threads, operand_args(a, b, c), smem=cfg.smem_bytes)]
    return plan


def outputs(dtype: str):
    """The output dtypes of a problem whose inputs run as ``dtype`` ("tf32": float32 arrays): the
    input arrays' dtype or float32, as ``api.gemm`` allows."""
    arrays = "float32" if dtype == "tf32" else dtype
    return tuple(dict.fromkeys((arrays, "float32")))


def _kernels(cfg=None):
    """Every kernel the rung's planner can pick for inputs of ``dtype`` (for ahead-of-time
    compiles, ``aot.precompile``): one per output dtype (``outputs``) and layout (ta, tb), and for
    the tiled rungs per alignment of A's and B's rows (va, vb: 16-byte copies or element-wise)
    and of C's column pairs (vc), every one of which the kernel's code uses; aligned first.
    (An epilogue makes other kernels, compiled on first use.)"""
    def kernels(dtype):
        cd, layouts = compute_dtype(dtype), list(product((False, True), repeat=2))
        if cfg is None:
            return [naive_kernel(cd, o, ta, tb) for o in outputs(dtype) for ta, tb in layouts]
        return [tiled_kernel(cfg, cd, o, ta, tb, *flags) for flags in product((True, False), repeat=3)
                for o in outputs(dtype) for ta, tb in layouts]
    return kernels


# Rungs 2-4 share one block shape, so each differs from the one below by its note only: 128x128
# block tiles, four warps of 64x64, two blocks per SM.
RUNG2 = MmaConfig(bm=128, bn=128, wm=64, wn=64, swizzle=False, min_blocks=2)
RUNG3 = RUNG2.replace(swizzle=True)
RUNG4 = RUNG3.replace(async_copy=True)
# Rung 5 as tuned on the H100 (benchmarks/tune.py mma, results/tune_mma_h100.json; with prefetch,
# benchmarks/NOTES.md): 256x128 tiles of eight 64x64 warp tiles, 4 stages (192 KiB), one block per
# SM, fragments prefetched across the slice barrier (bf16 8192^3: 414 -> 492 TFLOP/s).
RUNG5 = MmaConfig(bm=256, bn=128, wm=64, wn=64, async_copy=True, min_blocks=1, group_m=8,
                  frag_prefetch=True)

_TC = ("float16", "bfloat16", "tf32")
_OUT = ("float32", "float16", "bfloat16")
_SM80 = (8, 0)
RUNGS = [
    Variant("mma_naive", "mma", 1, _TC, _SM80, "one warp per 16x16 tile of C: each lane loads its "
            "mma.sync fragments straight from global memory, following the fragment map",
            _plan_naive, None, _OUT, kernels=_kernels()),
    Variant("mma_smem", "mma", 2, _TC, _SM80, "128x128x64 tiles staged in shared memory with "
            "16-byte copies; warps read 64x64 fragments with ldmatrix (8-way bank conflicts: rows "
            "are 128 bytes apart)", _plan_tiled(RUNG2), RUNG2, _OUT, kernels=_kernels(RUNG2)),
    Variant("mma_swizzle", "mma", 3, _TC, _SM80, "XOR swizzle of 16-byte chunks (chunk ^ row % 8): "
            "each ldmatrix phase hits all 32 banks, with no padding", _plan_tiled(RUNG3), RUNG3, _OUT, kernels=_kernels(RUNG3)),
    Variant("pipelined", "mma", 4, _TC, _SM80, "cp.async multi-stage pipeline (stages from the "
            "shared-memory budget): loads of later K slices fly while tensor cores work",
            _plan_tiled(RUNG4), RUNG4, _OUT, kernels=_kernels(RUNG4)),
    Variant("mma_tuned", "mma", 5, _TC, _SM80, "256x128 tiles (8 warps of 64x64), 4 stages, "
            "blocks in groups of 8 rows for L2 reuse; fragments double-buffered in registers and the "
            "barrier before the last k-step, so the tensor cores never wait at a slice boundary", _plan_tiled(RUNG5), RUNG5, _OUT, kernels=_kernels(RUNG5)),
]


def variant_from(cfg: MmaConfig, name: str) -> Variant:
    """An unregistered variant of the tiled mma.sync kernel with ``cfg`` (``api.variant_from``)."""
    return Variant(name, "mma", 0, _TC, _SM80, f"the tiled mma.sync kernel with {cfg}", _plan_tiled(cfg), cfg,
                   _OUT, kernels=_kernels(cfg))
