"""What the Hopper kernel reads its operands as: their tensor maps, which ones are copied before
the product (rows TMA cannot read or reads slowly; fp8 and tf32 operands k-major), and which
products are swapped (C^T = B^T A^T)."""
from __future__ import annotations

from dataclasses import replace

from .. import layout, repack
from ..layout import compute_dtype
from ..plan import Step
from ..schedule import cdiv
from ..tensormap import MAP_BYTES, tma_requirements, tma_rows_fast
from ..config import WgmmaConfig
from .cost import (ASYNC_WIN, FIXUP_S, SLOW_BOTH, SWAP_ROWS, TIE, Gpu, estimate, estimate_async_b, pick_config,
                   split_units, swap_splits)
from .policy import DEFAULT, Policy
from .tiles import ASYNC_CONFIGS, SWAP_CONFIGS


def _check(a, b, c):
    """Why the lower rungs (which copy nothing) cannot read ``a`` and ``b``, or None."""
    for name, x in (("a", a), ("b", b)):
        why = tma_requirements(x.ptr, x.ld, x.itemsize)
        if why:
            return f"operand {name} cannot be read by TMA: {why}"
    return None


def operand_maps(cfg: WgmmaConfig, a, b):
    """The tensor-map arguments of A and B but their addresses, ``(dtype, cols, rows, ld,
    box_cols, box_rows)`` for ``tensormap.encode``: a k-major operand in boxes of [rows][bk], an
    mn-major one in boxes of [bk][64 mn] (``layout.BOX_BYTES``)."""
    bk = cfg.k_slice(a.itemsize)
    da, db = compute_dtype(a.dtype), compute_dtype(b.dtype)
    if not a.trans:     # A row-major: M rows of K
        ma = (da, a.cols, a.rows, a.ld, bk, cfg.bm)
    else:               # A column-major: K rows of M, one 128-byte swizzled row of M per box row
        ma = (da, a.rows, a.cols, a.ld, layout.ROW_BYTES // a.itemsize, bk)
    if b.trans:         # B column-major: N rows of K (each CTA of a cluster loads 1/cluster of them)
        mb = (db, b.rows, b.cols, b.ld, bk, cfg.bn // cfg.cluster)
    else:               # B row-major: K rows of N
        mb = (db, b.cols, b.rows, b.ld, layout.ROW_BYTES // b.itemsize, bk)
    return ma, mb


def output_map(cfg: WgmmaConfig, c):
    """C's tensor-map arguments but its address for the TMA-store epilogue (boxes of 64 rows x
    128 bytes, 128B swizzle, clipped at C's edges), or None when this rung does not store by
    TMA or C's rows are not aligned for it."""
    if not cfg.tma_store or tma_requirements(c.ptr, c.ld, c.itemsize):
        return None
    return (c.dtype, c.cols, c.rows, c.ld, 128 // c.itemsize, 64)


_NO_MAP = bytes(MAP_BYTES)


def _lines(x):
    """(lines, width) of an operand as stored: rows of a row-major one, columns of a column-major one."""
    return (x.cols, x.rows) if x.trans else (x.rows, x.cols)


def _repack_step(x, which: int, region: int, dev, total: int):
    """The step copying operand ``which`` (0: a, 1: b) to ``region`` of the scratch, and the
    operand as the kernel then reads it there."""
    from .. import driver
    lines, width = _lines(x)
    ld = repack.pitch(width, x.dtype)
    k = repack.repack_kernel(x.dtype, repack.chunks_ok(x.ptr, x.ld, width, x.itemsize))

    def args(ws, pa, pb, pc, *ep):
        return ((pa, pb)[which], ws + region, lines, width, x.ld, ld)
    step = Step(k, repack.grid(lines, width), repack.THREADS, args, fn=driver.load(k, dev), workspace=total,
                label=f"repack {'ab'[which]}")
    return step, replace(x, ld=ld, ptr=0)


def _kmajor(x, which: int):
    """(lines, K, s_i, s_j) of operand ``which`` (0: a, 1: b) read k-major: A's rows or B's
    columns, each K long; element j of line i is element ``i * s_i + j * s_j`` of ``x`` as stored."""
    if which == 0:
        return x.rows, x.cols, *((1, x.ld) if x.trans else (x.ld, 1))
    return x.cols, x.rows, *((x.ld, 1) if x.trans else (1, x.ld))


def _needs_kmajor_copy(x, which: int, kdt: str, policy: Policy = DEFAULT) -> bool:
    """An 8-bit or 32-bit (tf32) operand is copied when it is not k-major (wgmma reads it no
    other way from shared memory; but a tf32 A is read through registers, ``_slice_group_regs_a``)
    or TMA cannot read it."""
    mn_ok = which == 0 and kdt == "tf32" and policy.regs_a
    return (x.trans != (which == 1) and not mn_ok) or bool(tma_requirements(x.ptr, x.ld, x.itemsize))


def _swaps(kdt: str, a, b, policy: Policy = DEFAULT) -> bool:
    """Whether a tf32 product with A k-major and B n-major (both rows TMA can read) runs as
    C^T = B^T A^T: B^T is then an mn-major A, read through registers, A^T a k-major B, and the
    kernel stores C's transpose (``wgmma_kernel``'s ``trans_c``), where otherwise B would be
    transposed by a pass before the kernel."""
    return (kdt == "tf32" and policy.regs_a and not a.trans and not b.trans
            and not any(tma_requirements(x.ptr, x.ld, x.itemsize) for x in (a, b)))


def _gather_step(x, which: int, region: int, dev, total: int):
    """The step copying 8-bit or 32-bit operand ``which`` k-major to ``region`` of the scratch
    (transposing it if it is mn-major), and the operand as the kernel then reads it there."""
    from .. import driver
    lines, width, s_i, s_j = _kmajor(x, which)
    ld = repack.pitch(width, x.dtype)
    trans = s_i == 1 and s_j != 1           # (a copy that does not transpose is one of rows TMA cannot
    k = repack.gather_kernel(trans, x.itemsize, trans and repack.vector_ok(x.ptr, s_j, x.itemsize))   # read)

    def args(ws, pa, pb, pc, *ep):
        return ((pa, pb)[which], ws + region, lines, width, s_i, s_j, ld)
    step = Step(k, repack.grid_tiles(lines, width, x.itemsize), repack.THREADS, args, fn=driver.load(k, dev), workspace=total,
                label=f"{'transpose' if x.trans != (which == 1) else 'repack'} {'ab'[which]}")
    return step, replace(x, ld=ld, ptr=0, trans=which == 1)


def _slow_rows_copy(pool, a, b, m: int, n: int, keq: int, gpu: Gpu, split: bool, out_bytes: int,
                    policy: Policy = DEFAULT):
    """[copy A, copy B] for two operands TMA reads slowly (rows 16 mod 32 bytes apart, see
    ``tensormap.tma_rows_fast``): the smaller copied first to a pitch of whole 128-byte rows,
    at HBM speed (``repack.chunks_ok``), where that pass (a launch, the bytes read and written)
    costs less than it saves by the cost model: the rounds that keep every SM loading at
    ``SLOW_BOTH`` of their speed (B multicast; a last, partial round loses nothing measurable),
    and the tile the product can take once one operand's rows are fast (``SLOW_A_TILES``).
    ``policy.slow_rows_copy`` overrides the model for A/B runs."""
    never = [False, False]
    forced = policy.slow_rows_copy
    if forced is False or tma_rows_fast(a.ptr, a.ld, a.itemsize) or tma_rows_fast(b.ptr, b.ld, b.itemsize):
        return never
    lines = [_lines(x) for x in (a, b)]
    size = [rows * width * x.itemsize for (rows, width), x in zip(lines, (a, b))]
    which = {"a": 0, "b": 1}.get(forced, int(size[1] < size[0]))
    x = (a, b)[which]
    if not repack.chunks_ok(x.ptr, x.ld, lines[which][1], x.itemsize):
        return never
    cfg, s = pick_config(pool, m, n, keq, True, gpu, split, out_bytes, slow_a=True)
    units, slots = split_units(cfg, m, n, keq, s)[2], gpu.sms * cfg.min_blocks
    full = units // slots / cdiv(units, slots)      # the share of rounds that fill every SM
    before = (1 + (1 / SLOW_BOTH - 1) * full) * estimate(cfg, m, n, keq, s, gpu, out_bytes)
    cfg, s = pick_config(pool, m, n, keq, which == 0, gpu, split, out_bytes)     # B still slow if A is copied
    after = estimate(cfg, m, n, keq, s, gpu, out_bytes)
    if forced is None and FIXUP_S + 2 * size[which] / gpu.hbm_bytes_s > before - after:
        return never
    return [which == 0, which == 1]


def _narrow_swap(pool, a, b, m: int, n: int, keq: int, gpu: Gpu, out_bytes: int, forced=None,
                 policy: Policy = DEFAULT):
    """(tile, splits) of the swapped decode product (``cost.SWAP_ROWS``) for a 16-bit ``a`` and ``b``, or
    None: where A is row-major (A^T is then a k-major B), both are read by TMA as they are, B's
    rows fast, and the cost model ranks the swapped product (split by ``swap_splits``) faster
    than the best of ``pool``. ``forced`` (a variant's fixed tile and splits): those, where the
    tile is one of ``SWAP_CONFIGS``. ``policy.swap``: False, never; True, wherever it may."""
    if forced:
        return forced if forced[0] in SWAP_CONFIGS else None
    if (policy.swap is False or m > SWAP_ROWS or a.trans or not tma_rows_fast(b.ptr, b.ld, b.itemsize)
            or any(tma_requirements(x.ptr, x.ld, x.itemsize) for x in (a, b))):
        return None
    cfg = next(c for c in SWAP_CONFIGS if c.bn >= m)
    s = swap_splits(cfg, n, m, keq, gpu.sms * cfg.min_blocks)
    if policy.swap:
        return cfg, s
    cp, sp = pick_config(pool, m, n, keq, False, gpu, True, out_bytes)
    faster = estimate(cfg, n, m, keq, s, gpu, out_bytes) < TIE * estimate(cp, m, n, keq, sp, gpu, out_bytes)
    return (cfg, s) if faster else None


def _b_by_producer(pool, m: int, n: int, keq: int, gpu: Gpu, split: bool, out_bytes: int):
    """(whether the producer copies an n-major tf32 B, the configuration, the splits): the cost
    model's best time on ``ASYNC_CONFIGS`` with the copies (``estimate_async_b``) against a pass
    over B (a launch, as the fix-up's, and B read and written at HBM speed) plus its best time on
    ``pool``; the producer where it wins by ``ASYNC_WIN`` (see ``cost.ASYNC_RATE``). ``keq``: the model's
    K (16-bit elements of the same bytes)."""
    ca, sa = pick_config(ASYNC_CONFIGS, m, n, keq, False, gpu, split, out_bytes, estimate_async_b)
    cp, sp = pick_config(pool, m, n, keq, False, gpu, split, out_bytes)
    t_async = estimate_async_b(ca, m, n, keq, sa, gpu, out_bytes)
    t_pass = FIXUP_S + 4.0 * keq * n / gpu.hbm_bytes_s + estimate(cp, m, n, keq, sp, gpu, out_bytes)  # (a launch)
    return (True, ca, sa) if t_async < ASYNC_WIN * t_pass else (False, cp, sp)
