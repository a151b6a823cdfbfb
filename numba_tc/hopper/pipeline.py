"""The ring of stages every Hopper kernel streams its K slices through, CUTLASS's pipeline state
(``PipelineTmaAsync``): S stages of STAGE bytes from ``sbase``, a *full* mbarrier per stage at
bars + 8s (the producer's loads complete on it) and an *empty* one at bars + 8(S + s) (the
consumers release the stage on it). A ring position is a stage and the phase parity its barriers
are waited on with; ``make_ring`` has the arithmetic of moving along it, in one place."""
from __future__ import annotations

from functools import lru_cache

from numba import cuda

from ..jit import device
from ..primitives import (cluster_sync, mbar_arrive, mbar_arrive_cluster, mbar_fence_init, mbar_init,
                          tma_prefetch_map)

ASYNC_THREADS = 128      # the producer warpgroup: all of it copies an operand by cp.async


@lru_cache(maxsize=None)
def _advancer(S):
    """``advance(s, ph)``: the next ring stage and the barrier phase parity that goes with it."""
    @device
    def advance(s, ph):
        if s == S - 1:
            return 0, ph ^ 1
        return s + 1, ph
    return advance


@lru_cache(maxsize=None)
def _skipper(S):
    """``skip(s, ph, n)``: the ring position n stages after (s, ph), the other consumer's tile's
    slices passed over (``make_consumer``'s PING)."""
    @device
    def skip(s, ph, n):
        t = s + n
        return t % S, ph ^ ((t // S) & 1)
    return skip


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
