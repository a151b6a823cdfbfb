"""The Hopper planner: a problem's launches (copies, the product, a fix-up) from the rung's
configurations, the cost model, the operand policy and the GPU."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import fixup, layout, repack, workspace
from ..config import WARPGROUP, WgmmaConfig
from ..epilogue import PLAIN
from ..layout import compute_dtype
from ..plan import Step
from ..schedule import balanced_workers, cdiv
from ..tensormap import encode, tma_requirements, tma_rows_fast
from .cost import ASYNC_ROWS, GPUS, Gpu, estimate, gpu_of, pick_config, pick_tail, split_units, tail_units
from .kernel import wgmma_kernel
from .mma import KMAJOR_ONLY
from .operands import (_NO_MAP, _b_by_producer, _gather_step, _kmajor, _lines, _narrow_swap, _needs_kmajor_copy,
                       _repack_step, _slow_rows_copy, _swaps, operand_maps, output_map)
from .policy import DEFAULT, Policy, current
from .spec import KernelSpec
from .staging import _source_geometry, _staged_boxes, staged_bytes
from .tiles import _IN, NARROW_N, SHORT_K


# A user epilogue's float32 array of C's shape, read only at (row, col) (``Epilogue.staged``): the
# consumers copy its boxes into shared memory by cp.async, the first two during the tile's last
# K slices (``staging._stager``), for one output box each and a stage less (128x256: 3; measured
# as fast as 4 on plain products, benchmarks/results/ab_stages3_h100.log); ``Policy.staged``.
STAGED_MIN = 3
STAGED_LEAD = WgmmaConfig.epi_lead
# ... and the boxes past its slots' two into registers (``held_registers``): at most STAGED_HOLD a
# thread (128x256 with a 16-bit C: 64 beside its 128 accumulators; 0: never), all the array's
# reads then spread over the tile's last HELD_LEAD slices, a piece with each (benchmarks/NOTES.md).
STAGED_HOLD = 64
HELD_LEAD = 16
HELD_PRODUCER_REGS = 24


def held_registers(cfg: WgmmaConfig, out_dtype: str) -> int:
    """Registers a consumer thread of ``cfg`` needs to hold a staged float32 array's boxes past
    the two its warp's slots take (``_stager``), or 0 where that is more than ``STAGED_HOLD`` or
    the tile is not two consumers' without a cluster (others spilled: a producer's multicast
    needs more registers than it could spare, a lone consumer's written-out tail more)."""
    _, _, nb, _, _, jj = _source_geometry(cfg.wg_m // 64, cfg.bn, layout.ITEMSIZE[out_dtype])
    held = max(nb - 2, 0) * 4 * jj                  # (n8 blocks: two column pairs of four rows a lane)
    return held if held <= STAGED_HOLD and cfg.cluster == 1 and cfg.consumers == 2 and cfg.regs[1] else 0


def staged_config(cfg: WgmmaConfig, epi, out_dtype: str, policy: Policy = DEFAULT) -> WgmmaConfig:
    """``cfg`` with shared memory to stage ``epi``'s array in (``Epilogue.staged``, ``_stager``)
    and one output box per consumer, where it has such an array, the kernel stores whole tiles
    by TMA and at least ``STAGED_MIN`` stages are left; else ``cfg`` (so too for ping-pong
    tiles: staged there, the residual measured slower, benchmarks/NOTES.md), or where ``policy``
    says not to stage (``Policy.staged``). A 16-bit
    array takes a slot for every box where that leaves the stages, copied over the tile's last
    ``HELD_LEAD`` slices. Of a float32 one the slots take two boxes; where the rest fits registers
    (``held_registers``), they hold it, loaded with the slots' copies over those slices."""
    if (not policy.staged or epi.staged() is None or not (cfg.tma_store and cfg.persistent) or cfg.promote
            or cfg.pingpong):
        return cfg
    dt, nb = epi.staged_dtype(), _staged_boxes(cfg, out_dtype)
    if dt != "float32":
        # a 16-bit array's every box fits where a float32 one's two do (128x256, a 16-bit C);
        # with nothing held, every tile's written-out tail compiles without a spill; a 16-bit
        # C's boxes are staged where the array's were read (no output ring of their own)
        new = cfg.replace(epi_boxes=0 if layout.ITEMSIZE[dt] == layout.ITEMSIZE[out_dtype] else 1,
                          epi_source=staged_bytes(cfg, out_dtype, dt, nb), epi_lead=HELD_LEAD, epi_spread=True)
        if new.stages >= STAGED_MIN:
            return new
    new = cfg.replace(epi_boxes=1, epi_source=staged_bytes(cfg, out_dtype, dt), epi_lead=STAGED_LEAD)
    if new.stages < STAGED_MIN:
        return cfg
    held = held_registers(new, out_dtype) if dt == "float32" else 0
    # the consumers take all the registers the producer can spare (its one thread's TMA loop
    # compiles to HELD_PRODUCER_REGS without a spill): at 232, a 128x256 tile's epilogue with
    # the held registers spilled
    regs = (HELD_PRODUCER_REGS, (new.block_registers // WARPGROUP - HELD_PRODUCER_REGS) // new.consumers // 8 * 8)
    if not held or regs[1] < new.local_regs + held + 24:
        return new
    return new.replace(epi_held=held, regs=(regs[0], min(256, regs[1])), epi_lead=HELD_LEAD, epi_spread=True)


def work_plan(cfg: WgmmaConfig, units: int, resident: int) -> int:
    """The blocks to launch for ``units`` units (tiles, or tiles x splits). Not persistent: one
    block per unit (``units`` counts whole clusters' tiles). Persistent: of the ``resident``
    blocks that fit at once, as many whole clusters as take the units in the fewest rounds, each
    the same number of units (``schedule.balanced_workers``)."""
    cl = cfg.cluster
    if not cfg.persistent:
        return units
    return balanced_workers(units // cl, resident // cl) * cl


def scaled_pool(cfgs, scales):
    """The configurations fp8 inputs with ``scales`` choose from: with block-wise ones, the tiles
    whose promoted columns fall in scale_b's 128-column blocks as a whole (no select per add)."""
    if scales == "block":
        return [c for c in cfgs if c.promote_n % 128 == 0] or list(cfgs)
    return list(cfgs)


def typed_pool(cfgs, kdt: str):
    """The configurations inputs computed as ``kdt`` choose from: 192-row tiles (three consumers)
    for 16-bit inputs only, the type they were measured on."""
    return [c for c in cfgs if c.consumers < 3 or kdt in _IN] or list(cfgs)


@dataclass(frozen=True)
class _Rung:
    """What a rung's planner plans with: its configurations (``fp8``: those fp8 inputs take),
    whether it copies operands TMA cannot read (``readable``) and splits K (``split``), and the
    splits a tuning variant forces on its first configuration (``forced``)."""
    cfgs: tuple
    readable: bool
    split: bool
    forced: Optional[int]
    fp8: tuple

    def pool(self, a, kdt: str, epi):
        """The configurations a product of ``a`` (computed as ``kdt``) with ``epi`` picks from."""
        fp8 = a.dtype in layout.FP8
        if fp8 and epi.scales is None:
            raise ValueError("fp8 inputs need their scales: gemm(a, b, scale_a=..., scale_b=...) (float32 "
                             "device arrays: one value each, or block-wise (M, K/128) and (K/128, N/128))")
        return scaled_pool(typed_pool(self.fp8 if fp8 and self.fp8 else self.cfgs, kdt), epi.scales)


@dataclass
class _Choice:
    """What the planner chose for one product: the operands as the kernel reads them (``a``,
    ``b``: swapped for C^T = B^T A^T, ``swap``) and its M x N, C's own shape (``mc``, ``nc``),
    the configuration and K splits, whether the producer copies B (``async_b``), which operands
    are copied first (``copy``), and a tail split (``tail``: ``_tail_plan``'s)."""
    a: object
    b: object
    m: int
    n: int
    mc: int
    nc: int
    keq: int
    cfg: WgmmaConfig
    splits: int
    async_b: bool = False
    swap: bool = False
    copy: tuple = (False, False)
    tail: Optional[tuple] = None


def _plan(*cfgs: WgmmaConfig, readable: bool = False, split: bool = False, splits=None, fp8_cfgs=()):
    """A rung's planner: its configuration (of several, with ``split``: and the K splits, the
    pair ``pick_config`` chooses for the problem), kernel, tensor maps and grid. ``readable``:
    operands TMA cannot read are first copied to scratch at a pitch it can (``repack``); a split
    adds the fix-up (``fixup``) after the kernel. ``splits``: this many (at most: every split
    gets a slice) on ``cfgs[0]``, a persistent configuration, instead of the model's choice (for
    tuning and A/B runs). ``fp8_cfgs``: the configurations fp8 inputs take instead (promoted)."""
    if splits is not None and (splits < 1 or not cfgs[0].persistent):
        raise ValueError(f"splits={splits}: at least 1, on a persistent configuration (split-K units are "
                         "dealt out by the persistent grid)")
    rung = _Rung(cfgs, readable, split, splits, tuple(fp8_cfgs))

    def plan(a, b, c, dev, epi=PLAIN, resident=None, batch=None, policy=None):
        """resident: blocks that run at once (default: as the GPU says; tests force few); batch:
        a batched product's ``batch.Batch`` (the top rung only; None where this kernel cannot
        take it: the caller then runs one product per batch); policy: the planner's switches
        (``policy.Policy``; default ``policy.current()``)."""
        policy = policy or current()
        kdt = compute_dtype(a.dtype)
        if batch is not None:
            ok = readable and kdt not in KMAJOR_ONLY
            return _batched_steps(cfgs, a, b, c, dev, epi, batch, resident, policy) if ok else None
        choice = _choose(rung, a, b, c, kdt, rung.pool(a, kdt, epi), _gpu(dev, policy), resident, policy)
        return _steps(choice, a, c, kdt, epi, dev, resident, policy)
    return plan


def _gpu(dev: int, policy: Policy) -> Gpu:
    """The figures the cost model plans with: the device's (``gpu_of``), or ``policy.cost_gpu``'s."""
    if policy.cost_gpu is None:
        return gpu_of(dev)
    return next(g for g in GPUS if g.name == policy.cost_gpu)


def _choose(rung: _Rung, a, b, c, kdt: str, pool, gpu: Gpu, resident, policy: Policy) -> _Choice:
    """The planner's choices for C = A B (``_Choice``): whether the producer copies an n-major
    tf32 B, whether the product swaps (tf32 through registers, or a decode tile), which operands
    are copied first, and the tile and K splits (or a tail split) by the cost model on ``gpu``."""
    m, n, forced, split = c.rows, c.cols, rung.forced, rung.split
    # the cost model's K: 16-bit elements of the same bytes (a 128-byte slice's math takes as
    # long in every type: fp8 runs twice, tf32 half as many flops a clock as 16-bit)
    keq = cdiv(a.cols * a.itemsize, 2)
    ch = _Choice(a, b, m, n, m, n, keq, pool[0], forced or 1)
    ch.async_b = (policy.async_b and kdt == "tf32" and not b.trans and repack.vector_ok(b.ptr, b.ld, 4)  # B n-major:
                  and (forced is None or ch.cfg.staged)                 # the producer may copy it, unless
                  and not (forced is None and m > ASYNC_ROWS and _swaps(kdt, a, b, policy)))   # A is swapped in
    chosen = ch.async_b and forced is None
    if chosen:
        ch.async_b, ch.cfg, ch.splits = _b_by_producer(pool, m, n, keq, gpu, split, c.itemsize)
    ch.swap = not ch.async_b and _swaps(kdt, a, b, policy)
    narrow = (split and not ch.swap and kdt in _IN        # a swapped decode tile and its splits
              and _narrow_swap(pool, a, b, m, n, keq, gpu, c.itemsize, forced and (ch.cfg, ch.splits), policy))
    if ch.swap or narrow:                     # C^T = B^T A^T: A^T k-major (tf32: B^T through registers)
        ch.a, ch.b, ch.m, ch.n, ch.swap = b.transposed(), a.transposed(), n, m, True
        ch.cfg, ch.splits = narrow or (ch.cfg, ch.splits)
    ch.copy = _copies(rung, ch, kdt, pool, gpu, c.itemsize, policy)
    if forced is None and (len(pool) > 1 or split) and (ch.swap or not chosen) and not narrow:
        slow_b, slow_a = (not ch.copy[i] and not tma_rows_fast(x.ptr, x.ld, x.itemsize)
                          for i, x in ((1, ch.b), (0, ch.a)))
        ch.cfg, ch.splits = pick_config(pool, ch.m, ch.n, keq, slow_b, gpu, split, c.itemsize, slow_a=slow_a)
        if split and ch.splits == 1 and not slow_b and kdt in _IN and not ch.swap:
            ch.cfg, ch.tail = _tail_plan([ch.cfg, *pool], ch.cfg, ch.m, ch.n, keq, gpu, resident, c.itemsize,
                                         policy)
    return ch


def _copies(rung: _Rung, ch: _Choice, kdt: str, pool, gpu: Gpu, out_bytes: int, policy: Policy):
    """[copy A, copy B]: an fp8 or tf32 operand not k-major (but a B the producer copies), or
    with ``rung.readable`` one TMA cannot read, or of two it reads slowly the one worth copying."""
    a, b = ch.a, ch.b
    if kdt in KMAJOR_ONLY:
        return [_needs_kmajor_copy(x, i, kdt, policy) and not (i and ch.async_b) for i, x in enumerate((a, b))]
    copy = [rung.readable and bool(tma_requirements(x.ptr, x.ld, x.itemsize)) for x in (a, b)]
    # (an A/B run's forced copy applies to forced tiles too)
    if rung.readable and (rung.forced is None or policy.slow_rows_copy) and not any(copy):
        copy = _slow_rows_copy(pool, a, b, ch.m, ch.n, ch.keq, gpu, rung.split, out_bytes, policy)
    return copy


def _steps(ch: _Choice, a0, c, kdt: str, epi, dev, resident, policy: Policy):
    """The launches of ``ch``: the copies, the product, and after a split its fix-up."""
    from .. import driver
    a, b, m, n, cfg, tail, swap, async_b = ch.a, ch.b, ch.m, ch.n, ch.cfg, ch.tail, ch.swap, ch.async_b
    kk, kmajor = a0.cols, kdt in KMAJOR_ONLY
    tiles, kper, units = split_units(cfg, m, n, ch.keq, ch.splits)
    splits = units // tiles                # as many as there are K slices for, at most
    kper = tail[2] if tail else kper
    ldw = fixup.plane_ld(ch.nc)
    shapes = [_kmajor(x, i)[:2] if kmajor else _lines(x) for i, x in enumerate((a, b))]   # (lines, width) copied
    sizes = [lines * repack.pitch(width, x.dtype) * x.itemsize if cp else 0
             for x, cp, (lines, width) in zip((a, b), ch.copy, shapes)]
    parts = splits * ch.mc * ldw * 4 if splits > 1 else (tail[1] * tail[3] * cfg.bm * cfg.bn * 4 if tail else 0)
    (ra_off, rb_off, planes), total = workspace.carve(*sizes, parts)
    steps, ops = [], [a, b]
    for i, region in ((0, ra_off), (1, rb_off)):
        if ch.copy[i]:
            st, ops[i] = (_gather_step if kmajor else _repack_step)(ops[i], i, region, dev, total)
            steps.append(st)
    ec = None if splits > 1 or swap else output_map(cfg, c)
    cfg = staged_config(cfg, epi, c.dtype, policy) if ec is not None and not (tail or async_b) else cfg
    spec = KernelSpec.product(cfg, kdt, c.dtype, ops[0].trans, ops[1].trans, pairs=c.pairs_aligned,
                              tma_c=ec is not None, epi=epi, splits=splits, async_b=async_b, trans_c=swap,
                              tail=bool(tail), dtype_b=None if b.dtype == a.dtype else b.dtype)
    k = wgmma_kernel(spec)
    nep = 0 if spec.epi.plain else len(spec.epi.slots())
    fn = driver.load(k, dev)
    resident = resident or _resident(cfg, fn, dev)
    ea, eb = operand_maps(cfg, *ops)
    ldb = b.ld if async_b else 0
    copy = ch.copy

    def args(ws, pa, pb, pc, *ep):
        pa, pb = (pb, pa) if swap else (pa, pb)        # (a swapped product copies neither: ``_swaps``)
        ma = encode(ws + ra_off if copy[0] else pa, *ea)
        mb = _NO_MAP if async_b else encode(ws + rb_off if copy[1] else pb, *eb)
        if splits > 1:                  # partial sums to the planes; the fix-up does the rest
            return (ma, mb, _NO_MAP, ws + planes, m, n, kk, ldw, kper, 1, 0, pb, ldb, 0, 0,
                    *(ep[:nep] if nep else (0,)))
        return (ma, mb, encode(pc, *ec) if ec else _NO_MAP, pc, m, n, kk, c.ld, kper, 1, 0, pb, ldb,
                ws + planes if tail else 0, tail[0] if tail else 0, *ep)
    steps.append(Step(k, tail[4] if tail else work_plan(cfg, units, resident), cfg.threads,
                      args if total else lambda *v: args(0, *v), smem=cfg.smem_bytes, cluster=cfg.cluster,
                      fn=fn, workspace=total, label=_label(cfg, async_b, swap, splits, tail), dependent=bool(steps)))
    if splits > 1 or tail:
        steps.append(_fixup_step(c, epi, cfg, dev, total, planes, ldw, splits, tail))
    return steps


def _label(cfg: WgmmaConfig, async_b: bool, swap: bool, splits: int, tail) -> str:
    """What ``explain`` says the product's launch runs, e.g. "64x8 swapped split-K 2"."""
    return (f"{cfg.bm}x{cfg.bn}" + (" ping-pong" if cfg.pingpong else "")
            + (f" cluster {cfg.cluster}" if cfg.cluster > 1 else "") + (" cp.async b" if async_b else "")
            + (" swapped" if swap else "") + (f" split-K {splits}" if splits > 1 else "")
            + (" (epilogue array staged)" if cfg.epi_source else "")
            + (f", last {tail[1]} tiles split-K {tail[3]}" if tail else ""))


def _resident(cfg: WgmmaConfig, fn, dev) -> int:
    """Blocks of ``cfg`` (loaded as ``fn``) that run at once on ``dev``: a persistent cluster's as
    the driver says clusters fit."""
    from .. import driver
    if cfg.cluster > 1 and cfg.persistent:
        return cfg.cluster * driver.max_active_clusters(fn, cfg.threads, cfg.smem_bytes, cfg.cluster)
    return driver.sm_count(dev) * cfg.min_blocks


def _tail_plan(cands, cfg, m: int, n: int, keq: int, gpu: Gpu, resident, out_bytes: int, policy: Policy):
    """(configuration, tail): ``cfg`` and None, or the tail split ``pick_tail`` prefers among
    ``cands`` with (whole tiles, the rest split, K slices per split, splits, the blocks of the
    grid: one round of them takes whole tiles until the split round)."""
    pick = pick_tail(cands, m, n, keq, gpu, estimate(cfg, m, n, keq, 1, gpu, out_bytes), out_bytes, policy.tail)
    if not pick:
        return cfg, None
    slots = resident or gpu.sms * pick[0].min_blocks
    whole, rest, kper, splits = tail_units(pick[0], m, n, keq, pick[1], slots)
    if not whole or not rest or splits < 2:
        return cfg, None                       # (the grid the caller forced has no such round)
    return pick[0], (whole, rest, kper, splits, slots)


def _fixup_step(c, epi, cfg, dev, total, planes, ldw, splits, tail):
    """The fix-up launch after a split-K kernel (its planes, ``fixup.fixup_kernel``) or a
    tail-split one (its last round's partial sums, ``fixup.tail_fixup_kernel``), as its dependent."""
    from .. import driver
    m, n = c.rows, c.cols
    if tail:
        whole, rest, _, ts, _ = tail
        fk = fixup.tail_fixup_kernel(c.dtype, cfg.bm, cfg.bn, cfg.group_m, epi)
        grid, label = fixup.tail_grid(rest, cfg.bm, cfg.bn), "tail fixup"
        gm = cdiv(m, cfg.bm)

        def args(ws, pa, pb, pc, *ep):
            return (ws + planes, pc, m, n, c.ld, whole, rest, ts, gm, *ep)
    else:
        fk = fixup.fixup_kernel(c.dtype, epi)
        grid, label = fixup.grid(m, n), "fixup"

        def args(ws, pa, pb, pc, *ep):
            return (ws + planes, pc, m, n, ldw, c.ld, splits, *ep)
    return Step(fk, grid, fixup.THREADS, args, fn=driver.load(fk, dev), workspace=total, label=label, dependent=True)


def _batched_tile(pool, m: int, n: int, kk: int, count: int, gpu: Gpu, out_bytes: int, policy: Policy):
    """A batched product's tile: ``SHORT_K`` for one or two K slices, ``NARROW_N`` for one 128-wide
    column (``Policy.narrow_pingpong``), else the cost model's over every matrix's rows padded to
    the tile, then stacked."""
    if cdiv(kk, pool[0].bk) <= 2 and len(pool) > 1:     # (the top rung's pool; a fixed tile keeps its own)
        return SHORT_K
    if policy.narrow_pingpong and n == NARROW_N.bn and len(pool) > 1:
        return NARROW_N

    def padded(cfg, mm, nn, k, s, gpu_, ob):
        return estimate(cfg, cdiv(m, cfg.bm) * cfg.bm * count, nn, k, s, gpu_, ob)
    return pick_config(pool, m * count, n, kk, False, gpu, False, out_bytes, padded)[0]


def _batched_steps(cfgs, a, b, c, dev, epi, batch, resident, policy: Policy):
    """The launch of a batched product (``batch``: the count and each operand's matrix stride,
    0 for one broadcast to every batch) in one persistent grid, every operand's tensor map 3-D;
    or None where TMA cannot read or write the operands as they are (the caller then runs one
    product per batch). The tile: ``_batched_tile``; no clusters, no split-K (a batch has tiles
    enough)."""
    from .. import driver
    pool = [cfg for cfg in cfgs if cfg.cluster == 1 and cfg.persistent and cfg.tma_store]
    strides = ((a, batch.a), (b, batch.b), (c, batch.c))
    if not pool or any(tma_requirements(x.ptr, x.ld, x.itemsize) or (z * x.itemsize) % 16 for x, z in strides):
        return None
    m, n, kk = c.rows, c.cols, a.cols
    cfg = _batched_tile(pool, m, n, kk, batch.count, _gpu(dev, policy), c.itemsize, policy)
    ec = output_map(cfg, c)
    if ec is None:
        return None
    k = wgmma_kernel(KernelSpec(cfg, a.dtype, c.dtype, a.trans, b.trans, c.pairs_aligned, True, epi, batch=True))
    fn = driver.load(k, dev)
    tiles = cdiv(m, cfg.bm) * cdiv(n, cfg.bn)
    units = tiles * batch.count
    grid = work_plan(cfg, units, resident or driver.sm_count(dev) * cfg.min_blocks)
    (ea, eb), bmask = operand_maps(cfg, a, b), (batch.a != 0) | (batch.b != 0) << 1

    def depth(x, z):            # the 3-D map's batch: one matrix (at batch 0) for a broadcast operand
        return (batch.count, z) if z else (1, _lines(x)[0] * x.ld)

    def args(pa, pb, pc, *ep):
        return (encode(pa, *ea, 128, *depth(a, batch.a)), encode(pb, *eb, 128, *depth(b, batch.b)),
                encode(pc, *ec, 128, batch.count, batch.c), pc, m, n, kk, c.ld, 1, batch.count, bmask, 0, 0, 0, 0, *ep)
    label = f"{cfg.bm}x{cfg.bn}{' ping-pong' * cfg.pingpong} batched {batch.count}"
    return [Step(k, grid, cfg.threads, args, smem=cfg.smem_bytes, fn=fn, label=label)]
