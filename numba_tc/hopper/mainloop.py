"""The mainloop of a consumer warpgroup: wgmma over the ring's K slices, one slice in flight, with
a staged epilogue array's reads issued over the tile's last slices."""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, int32, int64

from ..jit import device, unrolled
from ..primitives import wgmma_wait
from .pipeline import RingPos, _releaser, make_ring


@lru_cache(maxsize=None)
def make_mainloop(consume, S, STAGE, CL, GROUPS=1, ahead=None, LEAD=0, SPREAD=False):
    """Mainloop (a consumer warpgroup): ``mainloop(pacc, ring, pos, ktiles, a_row0, lane, k0, row,
    bn0, ep)``: ktiles K slices (from slice k0 of K, for a tile whose first column is bn0 and this
    warp's first row ``row``; ``ep``: the epilogue's values) from ``ring`` at ``pos`` into the
    accumulators (``consume``: ``make_slice_mma``, committing GROUPS wgmma groups a slice), one
    slice kept in flight: once slice t's groups are issued, slice t-1's are done and its stage is
    released in every CTA of the cluster. With ``ahead`` (``staging._stager``'s piece), the slice
    LEAD before the tile's end issues the epilogue array's reads (piece 0), or with SPREAD each of
    the last LEAD slices a piece of them. Returns the ring position after the tile."""
    ops = make_ring(S, STAGE)
    stage_at, full, empty, advance = ops.stage, ops.full, ops.empty, ops.advance
    release = _releaser(CL)
    AHEAD = ahead is not None

    @device
    def retire(t, pos, prev, ring, lane):
        """Slice t's groups issued (from ``pos``): the slice before it done, its stage (``prev``)
        released. Returns the next ring position and this slice's stage."""
        wgmma_wait(GROUPS)
        if t > 0 and lane == 0:
            release(empty(ring, prev))
        return advance(pos), pos.stage

    @device
    def slices(pacc, ring, pos, prev, t0, t1, a_row0, lane, when, row, bn0, ep):
        """Slices t0..t1-1 of the tile (``prev``: the stage of the slice before t0); without
        SPREAD, slice ``when`` issues all the epilogue array's reads (``ahead``'s piece 0)."""
        s, ph = pos                 # (the ring position as two integers across the loop: ``make_ring``)
        for t in range(t0, t1):
            consume(pacc, stage_at(ring, s), full(ring, s), ph, a_row0)
            if AHEAD and not SPREAD and t == when:
                ahead(0, pacc, ring.base, a_row0, row, bn0, lane, ep)
            (s, ph), prev = retire(t, RingPos(s, ph), prev, ring, lane)
        return RingPos(s, ph), prev

    @device
    def tail_step(k, st, pacc, ring, t0, a_row0, lane, row, bn0, ep):
        """Slice t0 + k (none where that is below 0: fewer than LEAD slices), with piece k of the
        epilogue array's reads issued while its wgmma runs; the ring position and the stage before
        it in st."""
        t = t0 + k
        pos = RingPos(st[0], st[1])
        if t >= 0:
            consume(pacc, stage_at(ring, pos.stage), full(ring, pos.stage), pos.phase, a_row0)
        ahead(k, pacc, ring.base, a_row0, row, bn0, lane, ep)
        if t >= 0:
            nxt, prev = retire(t, pos, st[2], ring, lane)
            st[0], st[1], st[2] = nxt.stage, nxt.phase, prev
    tail = unrolled(tail_step, max(LEAD, 1))

    @device
    def mainloop(pacc, ring, pos, ktiles, a_row0, lane, k0, row, bn0, ep):
        if SPREAD:
            # the last LEAD slices written out, each with a piece of the epilogue array's reads,
            # so that they reach HBM spread over the slices rather than all SMs' at once; outside
            # a loop, so that the compiler does not hoist their addresses out of it (they spill)
            pos, prev = slices(pacc, ring, pos, 0, 0, ktiles - LEAD, a_row0, lane, -1, row, bn0, ep)
            st = cuda.local.array(3, int32)
            st[0], st[1], st[2] = pos.stage, pos.phase, prev
            tail(LEAD, st, pacc, ring, ktiles - LEAD, a_row0, lane, row, bn0, ep)
            pos, prev = RingPos(int64(st[0]), int64(st[1])), int64(st[2])
        else:
            pos, prev = slices(pacc, ring, pos, 0, 0, ktiles, a_row0, lane, max(ktiles - LEAD, 0), row, bn0, ep)
        wgmma_wait(0)
        if lane == 0:
            release(empty(ring, prev))
        return pos
    return mainloop
