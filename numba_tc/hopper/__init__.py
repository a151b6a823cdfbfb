"""The Hopper ladder: TMA, wgmma and mbarrier pipelines from Numba (sm_90a), composing the
primitives of ``ptx/hopper.cu``.

One kernel (``kernel.wgmma_kernel``), made from a ``KernelSpec`` (``spec``: a ``WgmmaConfig`` and
the problem's compile-time facts) out of parts, each a cached factory of compile-time facts
returning a device function of run-time values only, one job a module: the ring (``pipeline``),
the tile scheduler (``scheduler``), the producer (``producer``), a K slice's wgmmas (``mma``), the
mainloop (``mainloop``; fp8's promoted ones, ``promotion``), a staged epilogue array
(``staging``) and the epilogue part (``store``), composed by ``kernel``. Those are the device
modules, and the only ones a cubin's key hashes (``build.KERNEL_MODULES``). On the host: the cost
model and the GPUs it knows (``cost``), the planner's switches (``policy``), the operand policy
(``operands``), the planner (``planner``), the configurations (``tiles``) and the rungs with
their ahead-of-time lists (``rungs``). Each rung is one line of ``tiles.RUNG1``..``RUNG7``, a
configuration that switches on what its note says:

1. ``wgmma_tma``: TMA loads a multi-stage ring of 128B-swizzled tiles, completing on an mbarrier
   per stage; one warpgroup issues ``wgmma`` straight from shared memory. The first thread refills
   a stage once the block (one ``__syncthreads`` per K slice) is done with it.
2. ``wgmma_wide``: 128x256 tiles, two consumer warpgroups of m64n256k16 (twice the work per byte
   loaded).
3. ``wgmma_ws``: warp specialization: a producer warpgroup issues TMA; consumers wait on a *full*
   barrier per stage and release it on an *empty* one, keeping one wgmma group in flight. No
   block-wide barrier is left in the main loop.
4. ``wgmma_regs``: ``setmaxnreg``: the producer gives its registers back, the consumers take them.
5. ``wgmma_persistent``: persistent blocks walk the tiles in grouped order; the producer fills the
   ring for the next tile while the consumers write the last one out. The grid is balanced: the
   fewest blocks (at most one per SM) that take the tiles in as many rounds as every SM would.
6. ``wgmma_cluster``: 2-CTA clusters along M; each CTA loads half of the B tile both need and TMA
   multicasts it, and consumers release a stage in both CTAs (remote mbarrier arrivals).
7. ``hopper``: the epilogue goes through shared memory (128B-swizzled boxes, bank-conflict free)
   and out by TMA stores, asynchronous and clipped at C's edges. Built on rung 5: with this
   epilogue the cluster measured slower, except where B's rows do not start on 32-byte sectors
   (TMA then moves a fifth more sectors per row, and B is two thirds of the traffic): there
   ``hopper`` multicasts B as rung 6 does (523 -> 758 TFLOP/s at 4096^3). Per problem, a cost
   model (``pick_config``, ``estimate``) chooses the tile (128x256, 128x192, 128x128, 64x256,
   64x128, or 192x192 on three consumer warpgroups) and how many ways K is split where tiles
   are too few to fill the GPU (split-K: fp32 partial sums in scratch, added in a fixed order
   by ``fixup``, which then applies the epilogue), or whether only the tiles of a last,
   partial round are split (a tail split, ``pick_tail``: whole rounds of whole tiles first);
   operands TMA cannot read are first copied to a pitch it can (``repack``). A batched product
   of one 128-wide column runs ping-pong consumers (``WgmmaConfig.pingpong``, ``NARROW_N``):
   each warpgroup a tile of its own, their mainloops in turns, one's epilogue beside the
   other's. A decode product (at most 32 rows of a row-major A) runs swapped, C^T = B^T A^T,
   on 64x8 to 64x32 tiles (``operands._narrow_swap``): N on the tile's 64 rows, C's rows the
   wgmma's narrow width, as cuBLAS's decode kernels do.

Conventions (as in ``tensorcore.py``): C (M x N, row-major, ``ldc``) = A (M x K) @ B (K x N);
``ta``/``tb`` say A/B are column-major. Each operand is loaded as it lies in global memory: a
k-major one (A row-major, B column-major) as one TMA box of [rows][64 k], an mn-major one as
boxes of [64 k][64 mn], read by wgmma with its transpose flag; no layout needs a host copy.
Ragged M, N, K: TMA zero-fills boxes past the edges and the epilogue writes only inside C.
TMA needs 16-byte aligned rows (``tensormap.tma_requirements``): rungs 1-6 refuse other operands
with the reason; ``hopper`` copies them (``repack``).

fp8 and tf32 (``hopper`` only): a K slice is still one 128-byte row (128 fp8 or 32 fp32 elements),
read by wgmma's k32 fp8 or k8 tf32 instructions, which take k-major operands only from shared
memory. A tf32 A that is mn-major is read through registers instead (wgmma's A may come from
registers, which each warp loads from the stage: ``_slice_group_regs_a``), so an n-major tf32 B
with a k-major A runs as C^T = B^T A^T (``_swaps``; the kernel stores C's transpose). Other
operands wgmma cannot read are copied k-major first (``repack.gather_kernel``), or, for a tf32 B of
few rows' products, into each stage by the producer warpgroup's cp.async (``_async_loader``,
``_b_by_producer``). fp32 operands
are loaded by TMA as TFLOAT32, which rounds them to tf32 (to nearest even; the producer's copy
rounds them so too). fp8 wgmma adds in fewer bits than fp32, so its
tiles promote: each slice's sum in accumulators of its own, added to fp32 ones
(``make_promoted_mainloop``; a 256-wide tile one n128 half at a time, ``WgmmaConfig.promote_n``;
into a bf16 C, two slices' sum at a time, ``WgmmaConfig.promote_every``); the per-tensor
scales are read in the epilogue (``Epilogue.scales``).
"""
from __future__ import annotations

import sys
import types

from .cost import (GPUS, H100, H200, TAIL_TILES, TIE, Gpu, estimate, gpu_named, gpu_of, pick_config, split_counts,
                   split_units, swap_splits)
from .kernel import PARAMS, wgmma_kernel
from .mma import KMAJOR_ONLY, WGMMA_TYPE
from .operands import operand_maps, output_map
from .planner import (HELD_LEAD, STAGED_HOLD, STAGED_LEAD, STAGED_MIN, held_registers, scaled_pool, staged_config,
                      typed_pool, work_plan)
from .policy import DEFAULT, Policy, current, set_policy, using
from .promotion import promoted_turn
from .rungs import RUNGS, variant_from
from .spec import KernelSpec
from .staging import staged_bytes
from .tiles import (ASYNC_CONFIGS, FP8_CONFIGS, NARROW_N, RUNG1, RUNG2, RUNG3, RUNG4, RUNG5, RUNG6, RUNG7,
                    RUNG7_CONFIGS, SHORT_K, SWAP_CONFIGS)

__all__ = ["RUNGS", "wgmma_kernel", "KernelSpec", "PARAMS", "WGMMA_TYPE", "KMAJOR_ONLY", "variant_from",
           # the planner's switches and the cost model
           "Policy", "DEFAULT", "current", "set_policy", "using", "Gpu", "GPUS", "H100", "H200", "gpu_of", "gpu_named",
           "estimate", "pick_config", "split_counts", "split_units", "swap_splits", "TAIL_TILES", "TIE",
           # the planner's parts others read
           "operand_maps", "output_map", "work_plan", "scaled_pool", "typed_pool", "staged_config", "staged_bytes",
           "held_registers", "promoted_turn", "STAGED_MIN", "STAGED_LEAD", "STAGED_HOLD", "HELD_LEAD",
           # the configurations
           "RUNG1", "RUNG2", "RUNG3", "RUNG4", "RUNG5", "RUNG6", "RUNG7", "RUNG7_CONFIGS", "SWAP_CONFIGS", "SHORT_K",
           "NARROW_N", "FP8_CONFIGS", "ASYNC_CONFIGS"]

# the planner's switches were module attributes: a script that still assigns one learns where it went
_SWITCHES = {"ASYNC_B": "async_b", "REGS_A": "regs_a", "SLOW_ROWS_COPY": "slow_rows_copy", "TAIL": "tail",
             "SWAP": "swap", "STAGED": "staged", "NARROW_PINGPONG": "narrow_pingpong"}


class _Package(types.ModuleType):
    def __setattr__(self, name, value):
        if name in _SWITCHES:
            raise AttributeError(f"hopper.{name} is a policy switch now: hopper.set_policy({_SWITCHES[name]}=...) "
                                 f"or `with hopper.using({_SWITCHES[name]}=...):`")
        if not name.startswith("__") and name in vars(self) and not isinstance(value, types.ModuleType):
            raise AttributeError(f"hopper.{name} is re-exported from its home module: set it there "
                                 "(assigning it here would reach no planner)")
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
