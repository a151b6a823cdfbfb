"""The tile scheduler: which units (a tile and its K range) each block of a Hopper kernel takes, in
grouped order, for whole tiles, split-K, batches and tail splits (CUTLASS's tile scheduler and
its ``WorkTileInfo``)."""
from __future__ import annotations

from collections import namedtuple
from functools import lru_cache

from numba import cuda

from ..jit import device
from ..primitives import cluster_ctarank
from ..schedule import tile_origin

# A block's walk over the units: units first, first + stride, ... below ``units``; ``tiles`` a
# round of units, ``kper`` K slices a split of ``ktiles``, the block's ``rank`` in its cluster,
# the grid of tiles, and ``whole``: the units before a tail split's.
Walk = namedtuple("Walk", ("first", "stride", "units", "tiles", "kper", "ktiles", "rank", "grid_m", "grid_n",
                           "whole"))
# One unit of work (CUTLASS's WorkTileInfo): its tile's origin in C, its depth (a split's plane or
# a tail split's block, -1 for a whole tile of a tail-split kernel; a batch), its K slices
# [k0, k0 + kslices).
WorkTile = namedtuple("WorkTile", ("m0", "n0", "depth", "k0", "kslices"))


@lru_cache(maxsize=None)
def make_scheduler(BM, BN, GROUP, CL, SPLIT, BATCH=False, TAIL=False):
    """Scheduler: ``(walk, unit)``. ``walk(grid_m, grid_n, ktiles, kper, batches, whole)`` is this
    block's ``Walk``: a persistent grid walks cluster units cid, cid + clusters, ... ``unit(w,
    u)``: unit ``u``'s ``WorkTile``, its tile's origin, its depth ``s`` (split or batch) and its K
    slices. Tiles go in grouped order (``schedule.tile_origin``); the CL blocks of a cluster take CL
    tiles stacked along M (the same B tile). Without SPLIT, BATCH or TAIL a unit is a whole tile.
    With SPLIT, units go split by split (s = u // tiles): blocks that run at the same time take the
    same K range of different tiles, and share its panels of A and B in L2. With BATCH, a unit is
    a whole tile of batch s = u // tiles, batch by batch. With TAIL, the first ``whole`` units are
    whole tiles (s = -1), a whole number of the grid's rounds, and the R tiles after them are split
    split by split as with SPLIT, s = split * R + the tile's place among them (its partial sum's
    block, ``make_consumer``)."""
    @device
    def walk(grid_m, grid_n, ktiles, kper, batches, whole):
        rank = cluster_ctarank() if CL > 1 else 0
        cid = cuda.blockIdx.x // CL
        nclusters = cuda.gridDim.x // CL
        ntiles = ((grid_m + CL - 1) // CL) * grid_n
        nunits = ntiles
        if SPLIT or TAIL:           # whole tiles (TAIL), then the rest split (SPLIT: all of them)
            first = whole if TAIL else 0
            nunits = first + (ntiles - first) * ((ktiles + kper - 1) // kper)
        if BATCH:
            nunits = ntiles * batches
        return Walk(cid, nclusters, nunits, ntiles, kper, ktiles, rank, grid_m, grid_n, whole)

    @device
    def unit(w, u):
        ntiles, kper, ktiles, rank, grid_m, grid_n, whole = w.tiles, w.kper, w.ktiles, w.rank, w.grid_m, w.grid_n, \
            w.whole
        s = 0
        ct = u
        k0 = 0
        kn = ktiles
        if BATCH:
            s = u // ntiles
            ct = u - s * ntiles
        if SPLIT or TAIL:
            first = whole if TAIL else 0                 # whole tiles before the split ones
            if TAIL:
                s = -1
            if not TAIL or u >= first:
                split = (u - first) // (ntiles - first)
                ct = u - split * (ntiles - first)
                s = u - first if TAIL else split         # (TAIL: = split * rest + (ct - whole))
                k0 = split * kper
                kn = min(kper, ktiles - k0)
        cm0, bn0 = tile_origin(ct, (grid_m + CL - 1) // CL, grid_n, GROUP, CL * BM, BN)
        return WorkTile(cm0 + rank * BM, bn0, s, k0, kn)
    return walk, unit
