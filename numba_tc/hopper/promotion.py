"""fp8's promoted mainloops: each K slice summed in accumulators of its own, then added to fp32
ones (times block-wise scales where the product has them), slice by slice or two at a time."""
from __future__ import annotations

from functools import lru_cache

from numba import float32

from ..config import WgmmaConfig
from ..intrinsics import f32_ptr
from ..jit import device, unrolled
from ..layout import wgmma_d_fragment
from ..primitives import mbar_wait, wgmma_wait
from .pipeline import RingPos, _releaser, make_ring


# the run-time values the block scaler reads (``epilogue.TERMS``: C's shape, the scales)
SCALE_SLOTS = ("M", "N", "scale_a", "scale_a_row_stride", "scale_a_k_stride", "scale_b", "scale_b_k_stride",
               "scale_b_col_stride")


@lru_cache(maxsize=None)
def _block_scaler(BN, SLOT, NACC):
    """Block-wise scales (``Epilogue.scales == "block"``): ``load(kb, row, bn0, lane, ep)`` reads
    this thread's scales of K block kb, (scale_a of its two rows) x (scale_b of the one or two
    128-column blocks its tile's columns fall in), as four products; ``add(i, pacc, s, off, lane,
    base)`` adds slice accumulator i to fp32 accumulator base + i times its scale (``off``: the
    tile's first column within its scale block). ``SLOT``: the positions in ``ep`` of ``SCALE_SLOTS``
    (``Epilogue.index``)."""
    TWO = BN > 128                       # a 192-wide tile spans two blocks (64-aligned: never three)
    M_, N_, SA, SA_ROW, SA_K, SB, SB_K, SB_COL = SLOT

    @device
    def load(kb, row, bn0, lane, ep):
        sa, sb = f32_ptr(ep[SA]), f32_ptr(ep[SB])
        r0 = min(row + (lane >> 2), ep[M_] - 1)
        r1 = min(row + (lane >> 2) + 8, ep[M_] - 1)
        a0 = sa[r0 * ep[SA_ROW] + kb * ep[SA_K]]
        a1 = sa[r1 * ep[SA_ROW] + kb * ep[SA_K]]
        nb = bn0 >> 7
        b0 = sb[kb * ep[SB_K] + nb * ep[SB_COL]]
        b1 = b0
        if TWO:
            b1 = sb[kb * ep[SB_K] + min(nb + 1, ((ep[N_] + 127) >> 7) - 1) * ep[SB_COL]]
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
    0.972 of ``_scaled_mm``, two 0.961, one 0.880; benchmarks/NOTES.md),
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
def _finisher(CL, NACC, PARTS, BLOCK):
    """``finish(h, pacc, sc, bn0, lane, empty)`` of ``make_promoted_mainloop``: part h's group
    done (the stage released after the last part's), its sum added (times the scales ``sc``
    with ``BLOCK``)."""
    release = _releaser(CL)
    P = NACC // PARTS
    add = _promoter(NACC)
    if BLOCK is not None:
        add_scaled = unrolled(_block_scaler(*BLOCK, NACC)[1], 128)

    @device
    def finish(h, pacc, sc, bn0, lane, empty):
        wgmma_wait(0)
        if h == PARTS - 1 and lane == 0:
            release(empty)
        if BLOCK is not None:
            add_scaled(P, pacc, sc, bn0 & 127 if PARTS == 1 else 0, lane, h * P)   # (halves: bn0 % 256 == 0)
        else:
            add(P, pacc, h * P)
    return finish


@lru_cache(maxsize=None)
def make_promoted_mainloop(issue, S, STAGE, CL, NACC, PARTS=1, BLOCK=None, LEAD=1):
    """The mainloop of fp8 with promotion: each K slice's sum goes to accumulators of its own
    (``issue``, ``make_slice_group``'s, writes NACC // PARTS of them from NACC on, starting from
    zero) and, once its wgmma is done, is added to the fp32 accumulators 0..NACC-1: fp8 wgmma
    adds in fewer bits than fp32, so promoting every 128 of K keeps a long K's sum accurate. The
    add waits for the slice's group; the other consumer's wgmma runs meanwhile (one of the same
    consumer's in flight during the add measured slower: benchmarks/NOTES.md). ``PARTS`` = 2 (a
    256-wide tile, one m64 block): the slice is issued and added in two n128 halves in turn (A
    read from shared memory for each: wgmma's register-A form measured slower). With block-wise
    scales (``BLOCK``: ``_block_scaler``'s (BN, SLOT)) the add multiplies by the slice's scales,
    loaded ``LEAD`` slices ahead (``WgmmaConfig.scale_lead``). (Two slices an add:
    ``make_grouped_mainloop``.)"""
    ops = make_ring(S, STAGE)
    stage_at, full, empty, advance = ops.stage, ops.full, ops.empty, ops.advance
    P = NACC // PARTS
    TURN = promoted_turn(BLOCK is not None, CL)
    finish = _finisher(CL, NACC, PARTS, BLOCK)
    if BLOCK is not None:
        load_scales = _block_scaler(*BLOCK, NACC)[0]

    @device
    def step(pacc, ring, pos, t, ktiles, a_row0, lane, k0, row, bn0, ep, scales):
        """Slice t; with block scales ``scales`` are its scales and (with a LEAD of 2) the next
        slice's, and those LEAD slices ahead are loaded while its wgmma runs. Returns the next
        ring position and scales."""
        sc, later = scales
        stage = stage_at(ring, pos.stage)
        mbar_wait(full(ring, pos.stage), pos.phase)
        issue(pacc, stage, a_row0, 0, 0)
        nxt = sc
        if BLOCK is None:
            pos1 = advance(pos)         # (per-tensor before the add, block-wise after: each as measured;
                                        # block-wise lost 4% with it before)
        else:
            nxt = load_scales(k0 + min(t + LEAD, ktiles - 1), row, bn0, lane, ep)
        finish(0, pacc, sc, bn0, lane, empty(ring, pos.stage))
        if PARTS > 1:
            issue(pacc, stage, a_row0, 2 * P, 0)
            finish(1, pacc, sc, bn0, lane, empty(ring, pos.stage))
        if BLOCK is not None:
            pos1 = advance(pos)
        return pos1, later if LEAD == 2 else nxt, nxt

    @device
    def mainloop(pacc, ring, pos, ktiles, a_row0, lane, k0, row, bn0, ep):
        zero = float32(0)
        sc = later = (zero, zero, zero, zero)
        if BLOCK is not None:
            sc = later = load_scales(k0, row, bn0, lane, ep)
            if LEAD == 2:
                later = load_scales(k0 + min(1, ktiles - 1), row, bn0, lane, ep)
        s, ph = pos                 # (the ring position as two integers across the loop: ``make_ring``)
        t = 0
        while t < ktiles:
            (s, ph), sc, later = step(pacc, ring, RingPos(s, ph), t, ktiles, a_row0, lane, k0, row, bn0, ep,
                                      (sc, later))
            t += 1
            if TURN > 1 and t < ktiles:
                (s, ph), sc, later = step(pacc, ring, RingPos(s, ph), t, ktiles, a_row0, lane, k0, row, bn0, ep,
                                          (sc, later))
                t += 1
            if TURN > 2 and t < ktiles:
                (s, ph), sc, later = step(pacc, ring, RingPos(s, ph), t, ktiles, a_row0, lane, k0, row, bn0, ep,
                                          (sc, later))
                t += 1
                if t < ktiles:
                    (s, ph), sc, later = step(pacc, ring, RingPos(s, ph), t, ktiles, a_row0, lane, k0, row, bn0, ep,
                                              (sc, later))
                    t += 1
        return RingPos(s, ph)
    return mainloop


@lru_cache(maxsize=None)
def make_grouped_mainloop(issue, S, STAGE, CL, NACC, EVERY):
    """``make_promoted_mainloop``'s per-tensor loop with EVERY slices summed before each add
    (``WgmmaConfig.promote_every``: fewer drains of the consumer's wgmma), the second consumer's
    groups a slice after the first's, so that one's add falls while the other's wgmma runs. A
    group holds its stages until its add."""
    if EVERY != 2:
        raise ValueError(f"EVERY={EVERY}: the grouped loop's turn is two groups of two slices")
    ops = make_ring(S, STAGE)
    stage_at, empty, wait_ahead = ops.stage, ops.empty, ops.wait_ahead
    release = _releaser(CL)
    add = _promoter(NACC)

    @device
    def issue_one(j, pacc, ring, pos, a_row0):
        issue(pacc, stage_at(ring, wait_ahead(ring, pos, j)), a_row0, 0, 0 if j == 0 else 1)
    issue_n = unrolled(issue_one, 4)

    @device
    def group(n, pacc, ring, pos, a_row0, lane):
        """n slices from ``pos`` (n a constant after inlining) summed as one group, then added.
        (The stages released and the position after are spelled out here: through the ring's
        ``skip`` they compile to other, equivalent SASS.)"""
        issue_n(n, pacc, ring, pos, a_row0)
        wgmma_wait(0)
        if lane == 0:
            for j in range(n):
                release(empty(ring, (pos.stage + j) % S))
        add(NACC, pacc, 0)
        s, ph = pos
        if s + n >= S:
            return s + n - S, ph ^ 1
        return s + n, ph

    @device
    def mainloop_groups(pacc, ring, pos, ktiles, a_row0, lane, k0, row, bn0, ep):
        """Per-tensor, EVERY slices a group, in turns of 4 slices (the second consumer's first
        group a slice); the K left over, a slice a group."""
        s, ph = pos                 # (the ring position as two integers across the loop: ``make_ring``)
        t = 0
        if a_row0 != 0 and ktiles > 0:
            s, ph = group(1, pacc, ring, RingPos(s, ph), a_row0, lane)
            t = 1
        while t + 4 <= ktiles:
            s, ph = group(EVERY, pacc, ring, RingPos(s, ph), a_row0, lane)
            if EVERY == 2:
                s, ph = group(EVERY, pacc, ring, RingPos(s, ph), a_row0, lane)
            t += 4
        while t < ktiles:
            s, ph = group(1, pacc, ring, RingPos(s, ph), a_row0, lane)
            t += 1
        return RingPos(s, ph)
    return mainloop_groups


def _promoted_mainloop(cfg: WgmmaConfig, issue, epi, out_dtype: str, split: bool, S: int, STAGE: int, NACC: int):
    """The promoted mainloop a kernel of ``cfg`` runs: block-wise scales (``epi``) multiply each
    slice's add, loaded ``cfg.scale_lead`` slices ahead (one in a split-K kernel: two spilled the
    second set there); per-tensor into bf16, ``cfg.promote_every`` slices an add (into fp16 or fp32,
    whose rounding would show the longer sums' error, and in split-K partials: every slice)."""
    block = (cfg.bn, epi.index(*SCALE_SLOTS)) if epi.scales == "block" else None
    if cfg.promote_every > 1 and block is None and out_dtype == "bfloat16":
        return make_grouped_mainloop(issue, S, STAGE, cfg.cluster, NACC, cfg.promote_every)
    return make_promoted_mainloop(issue, S, STAGE, cfg.cluster, NACC, cfg.bn // cfg.promote_n, block,
                                  1 if split else cfg.scale_lead)
