"""The Hopper ladder's variants: each rung's planner and its ahead-of-time kernel lists."""
from __future__ import annotations

from .. import fixup, layout, repack
from ..config import Variant
from ..epilogue import BLOCK_SCALED, SCALED
from .cost import TAIL_TILES, splittable
from .kernel import wgmma_kernel
from .operands import _check
from .planner import _plan, scaled_pool, typed_pool
from .policy import current
from .spec import KernelSpec
from .tiles import (_IN, _OUT, ASYNC_CONFIGS, FP8_CONFIGS, RUNG1, RUNG2, RUNG3, RUNG4, RUNG5, RUNG6, RUNG7_CONFIGS,
                    SWAP_CONFIGS)


_SM90A = (9, 0)


def _kernels(cfgs, top: bool, fp8_cfgs=(), forced=False):
    """Every kernel a rung's planner picks for ``dtype`` inputs without an epilogue (for
    ahead-of-time compiles, ``aot.precompile``; tests/test_aot_coverage.py checks the planner
    against it), each made by ``KernelSpec.product`` as the planner makes it: each layout, the
    input dtype or float32 out, C stored by TMA, in pairs or one element at a time; for the top
    rung also its split-K kernels, their fix-ups and the copies. The policy's switches
    (``policy.current()``) decide the tf32 kernels, as they decide the planner's."""
    layouts = [(ta, tb) for ta in (False, True) for tb in (False, True)]

    def stores(cfg):   # (pairs, tma_c) as the planner decides them: rows TMA can write are pair-aligned too
        return ((True, True),) * cfg.tma_store + ((True, False), (False, False))

    def product(cfg, dtype, out, ta, tb, store=(True, False), **kw):
        return wgmma_kernel(KernelSpec.product(cfg, dtype, out, ta, tb, pairs=store[0], tma_c=store[1], **kw))

    def kernels(dtype):
        if dtype in layout.FP8:
            return kernels8(dtype) if top else []
        if dtype == "tf32":
            return kernels32(current()) if top else []
        outs = (dtype, "float32")
        out = [product(cfg, dtype, o, ta, tb, st) for cfg in cfgs for st in stores(cfg) for o in outs
               for ta, tb in layouts]
        if top:
            out += [product(cfg, dtype, "float32", ta, tb, splits=2) for cfg in cfgs if splittable(cfg)
                    for ta, tb in layouts]
            out += [fixup.fixup_kernel(o) for o in outs] + [repack.repack_kernel(dtype, v) for v in (False, True)]
            tails = [cfg for cfg in cfgs if (cfg.bm, cfg.bn) in TAIL_TILES and cfg.cluster == 1 and cfg.persistent]
            out += [product(cfg, dtype, o, ta, tb, st, tail=True)
                    for cfg in tails for st in stores(cfg) for o in outs for ta, tb in layouts]
            out += [fixup.tail_fixup_kernel(o, cfg.bm, cfg.bn, cfg.group_m) for cfg in tails for o in outs]
            out += [product(cfg, dtype, o, ta, True, (True, False), splits=1 + sp, trans_c=True)
                    for cfg in SWAP_CONFIGS for ta in (False, True) for sp in (False, True)
                    for o in (("float32",) if sp else outs)]
        return out

    def kernels8(dtype):
        """fp8 (A and B of one type): always with its scales (per tensor or block-wise), always
        k-major after the copy."""
        outs = ("bfloat16", "float16", "float32")
        pool = fp8_cfgs or cfgs
        out = repack.gather_kernels(1)
        for epi in (SCALED, BLOCK_SCALED):
            out += [product(cfg, dtype, o, False, True, st, epi=epi)
                    for cfg in scaled_pool(pool, epi.scales) for st in stores(cfg) for o in outs]
            out += [product(cfg, dtype, "float32", False, True, epi=epi, splits=2)
                    for cfg in scaled_pool(pool, epi.scales) if cfg.persistent]
            out += [fixup.fixup_kernel(o, epi) for o in outs]
        return out

    def kernels32(policy):
        """tf32 (float32 arrays): float32 out; A k-major (after the copy where TMA cannot read it)
        or mn-major (read through registers, ``Policy.regs_a``); B k-major after it or n-major,
        copied by the producer (``Policy.async_b``); and the swapped products (C's transpose)."""
        out = repack.gather_kernels(4)
        bs = [(True, False)] + [(False, True)] * policy.async_b          # (tb, async_b)
        tas = (False, True) if policy.regs_a else (False,)
        for tb, ab in bs:
            pool = [c for c in (cfgs[:1] if forced else ASYNC_CONFIGS) if c.staged] if ab else typed_pool(cfgs, "tf32")
            out += [product(cfg, "tf32", "float32", ta, tb, st, async_b=ab)
                    for cfg in pool for st in stores(cfg) for ta in tas]
            out += [product(cfg, "tf32", "float32", ta, tb, splits=2, async_b=ab)
                    for cfg in pool if splittable(cfg) for ta in tas]
        if policy.regs_a:
            out += [product(cfg, "tf32", "float32", True, True, splits=1 + sp, trans_c=True)
                    for cfg in typed_pool(cfgs, "tf32") for sp in (False, True) if splittable(cfg) or not sp]
        return out + [fixup.fixup_kernel("float32")]
    return kernels


def _variant(name, rung, cfgs, note, top=False, splits=None, fp8_cfgs=()):
    """A rung's variant. ``top``: the one ``auto`` picks, which takes every operand (a copy to a
    readable pitch where TMA cannot read one) and splits K where tiles are too few (``splits``:
    always that many, on the first configuration)."""
    cfgs = cfgs if isinstance(cfgs, tuple) else (cfgs,)
    return Variant(name, "wgmma", rung, _IN + layout.FP8 + ("tf32",) if top else _IN, _SM90A, note,
                   _plan(*cfgs, readable=top, split=top, splits=splits, fp8_cfgs=fp8_cfgs),
                   cfgs[0], _OUT, check=None if top else _check, max_cc=_SM90A,
                   kernels=_kernels(cfgs, top, fp8_cfgs, splits is not None),
                   batched=top)


RUNGS = [
    _variant("wgmma_tma", 1, RUNG1, "TMA loads 128B-swizzled 64x128 tiles into a ring completing "
             "on mbarriers; one warpgroup runs wgmma m64n128k16 from shared memory"),
    _variant("wgmma_wide", 2, RUNG2, "128x256 tiles: two consumer warpgroups of m64n256k16, twice "
             "the math per byte loaded"),
    _variant("wgmma_ws", 3, RUNG3, "warp specialization: a producer warpgroup issues TMA, full/empty "
             "mbarriers per stage, one wgmma group kept in flight, no block barrier in the loop"),
    _variant("wgmma_regs", 4, RUNG4, "setmaxnreg: producer down to 40 registers, consumers up to 232"),
    _variant("wgmma_persistent", 5, RUNG5, "persistent grid (at most one block per SM, each "
             "taking the same number of tiles) walking tiles in grouped order: the next tile's loads "
             "overlap this tile's epilogue"),
    _variant("wgmma_cluster", 6, RUNG6, "2-CTA clusters along M: each CTA loads half of the shared "
             "B tile and TMA multicasts it to both (half the B traffic from L2)"),
    _variant("hopper", 7, RUNG7_CONFIGS, "epilogue through shared memory: 128B-swizzled boxes written "
             "by TMA stores (coalesced, asynchronous, clipped at the edges); per problem (a cost model), "
             "the tile (128x256, 128x192, 128x128, 64x256, 64x128 or 192x192 on three consumer warpgroups; "
             "decode products of at most 32 rows swapped, "
             "C^T = B^T A^T, onto 64x8 to 64x32 tiles), B multicast where its rows are not 32-byte "
             "aligned, split-K where tiles are too few or for a last, partial round's tiles alone (partial sums "
             "added in a fixed order, then the epilogue), "
             "and a copy to a readable pitch for operands TMA cannot read; fp8 inputs (e4m3, e5m2) on the "
             "fp8 wgmma with promoted accumulators and their scales, float32 ones as tf32 (allow_tf32; A read "
             "through registers in any layout, an n-major B swapped into its place), fp8 and other tf32 "
             "operands copied k-major where they are not", top=True, fp8_cfgs=FP8_CONFIGS),
]


def variant_from(cfgs, name: str, splits=None) -> Variant:
    """An unregistered variant of the wgmma kernel with ``cfgs`` (one configuration, or several
    for ``pick_config`` to choose from per problem; ``api.variant_from``). With ``splits``, it
    runs the first configuration as the top rung does (any operand), K split that many ways."""
    return _variant(name, 0, cfgs, f"the wgmma kernel with {cfgs}" + (f", {splits} K splits" if splits else ""),
                    top=splits is not None, splits=splits)
