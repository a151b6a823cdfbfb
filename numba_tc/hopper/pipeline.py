"""The ring of stages every Hopper kernel streams its K slices through, CUTLASS's pipeline state
(``PipelineTmaAsync``): S stages of STAGE bytes from ``Ring.base``, a *full* mbarrier per stage
at bars + 8s (the producer's loads complete on it) and an *empty* one at bars + 8(S + s) (the
consumers release the stage on it; ``make_init_ring`` sets them up). A ring position is a stage
and the phase parity its barriers are waited on with; ``make_ring`` has the arithmetic of moving
along it, in one place."""
from __future__ import annotations

from collections import namedtuple
from functools import lru_cache

from numba import cuda, int64

from ..jit import device
from ..primitives import (cluster_sync, mbar_arrive, mbar_arrive_cluster, mbar_fence_init, mbar_init, mbar_wait,
                          tma_prefetch_map)

ASYNC_THREADS = 128      # the producer warpgroup: all of it copies an operand by cp.async


# A position in the ring: a stage and the phase parity its barriers are waited on with.
RingPos = namedtuple("RingPos", ("stage", "phase"))
# The ring in shared memory: its stages from ``base``, its mbarriers from ``bars``.
Ring = namedtuple("Ring", ("base", "bars"))
# ``make_ring``'s device functions.
RingOps = namedtuple("RingOps", ("stage", "full", "empty", "advance", "wait_ahead", "skip"))


@lru_cache(maxsize=None)
def make_ring(S, STAGE=0):
    """The arithmetic of a ring of S stages of STAGE bytes, in one place: ``stage(ring, s)``,
    stage s's shared address; ``full(ring, s)`` and ``empty(ring, s)``, its barriers;
    ``advance(pos)``, the next position; ``wait_ahead(ring, pos, j)``, wait until the stage j
    after ``pos`` is full (j < S: the phase turns at most once) and return it; ``skip(pos, n)``,
    the position n stages on, for any n (the other consumer's slices passed over,
    ``kernel.make_consumer``'s PING). Loops carry a position as two integers and make a
    ``RingPos`` for each call: a ``RingPos`` carried across a loop compiles to other, equivalent
    SASS, and the kernels are kept as they were (``benchmarks/sass_identity.py``)."""
    @device
    def stage(ring, s):
        return ring.base + s * STAGE

    @device
    def full(ring, s):
        return ring.bars + 8 * s

    @device
    def empty(ring, s):
        return ring.bars + 8 * (S + s)

    @device
    def advance(pos):
        if pos.stage == S - 1:
            return RingPos(0, pos.phase ^ 1)
        return RingPos(pos.stage + 1, int64(pos.phase))   # (widened: a position read back from the
                                                            # mainloop's int32 store must unify)

    @device
    def wait_ahead(ring, pos, j):
        i = pos.stage + j - (S if pos.stage + j >= S else 0)
        mbar_wait(full(ring, i), pos.phase ^ (1 if pos.stage + j >= S else 0))
        return i

    @device
    def skip(pos, n):
        t = pos.stage + n
        return RingPos(t % S, pos.phase ^ ((t // S) & 1))
    return RingOps(stage, full, empty, advance, wait_ahead, skip)


@lru_cache(maxsize=None)
def _releaser(CL):
    """``release(empty)``: one arrival on a stage's empty barrier in every CTA of the cluster."""
    @device
    def release(empty):
        if CL == 1:
            mbar_arrive(empty)
        else:
            for r in range(CL):
                mbar_arrive_cluster(empty, r)
    return release


@lru_cache(maxsize=None)
def make_init_ring(S, ARRIVALS, CL, ASYNC_B=False):
    """``init(bars, tma_a, tma_b)``: thread 0 initialises the ring's full (1 arrival; with
    ASYNC_B also one per producer thread, once its cp.async copies of B are in place) and empty
    (ARRIVALS) mbarriers and prefetches the operands' tensor maps; every thread (of the cluster)
    then waits, so that no barrier is used before it exists."""
    FULL = 1 + ASYNC_THREADS * ASYNC_B

    @device
    def init(bars, tma_a, tma_b):
        if cuda.threadIdx.x == 0:
            tma_prefetch_map(tma_a)
            if not ASYNC_B:
                tma_prefetch_map(tma_b)
            for s in range(S):
                mbar_init(bars + 8 * s, FULL)
                mbar_init(bars + 8 * (S + s), ARRIVALS)
            mbar_fence_init()
        if CL > 1:
            cluster_sync()
        else:
            cuda.syncthreads()
    return init
