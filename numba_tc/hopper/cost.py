"""The cost model that picks a Hopper tile and K splits per problem, and the GPUs it knows.

``pick_config`` ranks (configuration, splits) by: the time of the slowest block (rounds of
units, each its K slices plus a tile's fill and epilogue, at one SM's share of the measured
peak, less for tiles that move more bytes per flop), or the bytes the units move over the memory
bandwidth the busy SMs can draw, whichever is longer (and a part of the shorter: they do not
overlap perfectly, so a decoding tile that wastes wgmma work on zero rows costs something even
where memory bounds it); then, for a split, the fix-up pass (a launch, the planes read back, C
written), which runs after the kernel. What it is for is the ranking, not the times: the
constants below were calibrated on an H100, on every candidate of 10 problems timed
(benchmarks/results/tune_split_h100.json; benchmarks/NOTES.md). A GPU enters only by its
``Gpu``: its SMs, its peak and its memory bandwidth.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ..config import WgmmaConfig
from ..schedule import cdiv

# dense 16-bit FLOPs an sm_90 SM's tensor cores do per clock (the datasheets' 989 TFLOP/s of an
# H100 SXM: 132 SMs at 1830 MHz)
FLOPS_PER_CLOCK = 4096


@dataclass(frozen=True)
class Gpu:
    """What the cost model knows of a GPU: ``sms``; ``peak_flops``, the dense 16-bit FLOP/s a
    large product measured; ``hbm_bytes_s``, device memory bandwidth as a large copy measured
    (read + write) and ``hbm_datasheet``, the datasheet's; the SM clock (Hz, the most it runs
    at), shared memory per SM and L2 (bytes). ``name``: the device name it is matched by
    (``pattern``, a regular expression), or where it came from."""
    name: str
    sms: int
    peak_flops: float
    hbm_bytes_s: float
    hbm_datasheet: float
    sm_clock: float
    smem_per_sm: int
    l2_bytes: int
    pattern: str = ""

    @property
    def peak_per_sm(self) -> float:
        """Dense 16-bit FLOP/s of one SM."""
        return self.peak_flops / self.sms


# The H100 SXM the model was calibrated on: 790 TFLOP/s measured (bf16 8192^3), a large copy 3.0 TB/s
H100 = Gpu("H100 SXM", sms=132, peak_flops=790e12, hbm_bytes_s=3.0e12, hbm_datasheet=3.35e12, sm_clock=1980e6,
           smem_per_sm=228 * 1024, l2_bytes=50 * 2**20, pattern=r"\bH100\b.*\bHBM3\b")
# The H200 measured on this workplace: bf16 8192^3 770-800 TFLOP/s (the H100's figure kept: its
# tensor cores are the H100's), a device-to-device copy about 4.3 TB/s (datasheet 4.8), 60 MB of L2
H200 = Gpu("H200", sms=132, peak_flops=790e12, hbm_bytes_s=4.3e12, hbm_datasheet=4.8e12, sm_clock=1980e6,
           smem_per_sm=228 * 1024, l2_bytes=60 * 2**20, pattern=r"\bH200\b")
GPUS = (H100, H200)
# Another GPU's figures are the datasheet's scaled by what the H100 measured of its own: its
# share of the tensor cores' clock rate and of the memory's bandwidth.
PEAK_SHARE = H100.peak_flops / (FLOPS_PER_CLOCK * H100.sm_clock * H100.sms)
COPY_SHARE = H100.hbm_bytes_s / H100.hbm_datasheet


def gpu_named(name: str, sms: int, props=None) -> Gpu:
    """The ``Gpu`` of a device called ``name`` with ``sms`` SMs: a known one's figures (``GPUS``,
    its SMs as the device says), or else ones derived from ``props()`` (a callable returning the
    device's attributes: CLOCK_RATE and MEMORY_CLOCK_RATE in kHz, GLOBAL_MEMORY_BUS_WIDTH in bits,
    MAX_SHARED_MEMORY_PER_MULTIPROCESSOR and L2_CACHE_SIZE in bytes)."""
    for g in GPUS:
        if re.search(g.pattern, name):
            return g if g.sms == sms else replace(g, sms=sms, peak_flops=g.peak_flops * sms / g.sms)   # (a MIG slice)
    if props is None:
        raise ValueError(f"no figures for {name!r}: give its properties")
    p = props()
    clock, datasheet = 1e3 * p["CLOCK_RATE"], 2 * 1e3 * p["MEMORY_CLOCK_RATE"] * p["GLOBAL_MEMORY_BUS_WIDTH"] / 8
    return Gpu(f"{name} (from its properties)", sms, PEAK_SHARE * FLOPS_PER_CLOCK * clock * sms, COPY_SHARE * datasheet,
               datasheet, clock, p["MAX_SHARED_MEMORY_PER_MULTIPROCESSOR"], p["L2_CACHE_SIZE"])


_PROPS = ("CLOCK_RATE", "MEMORY_CLOCK_RATE", "GLOBAL_MEMORY_BUS_WIDTH", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
          "L2_CACHE_SIZE")
_OF_DEVICE: dict = {}


def gpu_of(dev: int) -> Gpu:
    """The ``Gpu`` of device ``dev``, by its name (``GPUS``) or its properties: what a plan uses."""
    from .. import driver
    name = driver.device_name(dev)
    key = (dev, name)
    if key not in _OF_DEVICE:
        _OF_DEVICE[key] = gpu_named(name, driver.sm_count(dev),
                                    lambda: {p: driver.attribute(dev, p) for p in _PROPS})
    return _OF_DEVICE[key]


SM_SHARE = 2                        # one SM draws at most this many times its even share of memory bandwidth
FIXUP_S = 4e-6                      # the fix-up pass's launch and latency
MIN_SPLIT_SLICES = 4                # a split takes at least this many K slices
TIE = 0.95                          # a later choice must be estimated this much faster to win
OVERLAP = 0.3                       # the share of the shorter of math and memory time that shows
# 192x192's: 1.01 fits its A/B against the tiles it displaced (4096^3 c1 ~1.02, 2056x4104x3000 and
# 3000^3 ~1.01-1.02 with B multicast; results/ab_192_tiles_first_h100.log, ab_eff192_nn_h100.log).
# 64x128's efficiency: 0.535 fit the 1024^3 A/B but put it behind 128x128 split-K where few rows
# are memory-bound; 0.75 keeps 1024^3 and measured faster on 24 of 27 such shapes (96x5120x5120
# 0.790 -> 0.930, 64x8192x8192 0.826 -> 0.981; results/ab_eff64x128*_h100.log).
TILE_EFFICIENCY = {(128, 256): 1.0, (128, 192): 0.95, (128, 128): 0.85, (64, 256): 0.8, (64, 128): 0.75,
                   (192, 192): 1.01}
# tf32 with an n-major B: the producer can copy it k-major by cp.async (``producer._async_loader``)
# instead of a transposing pass over B before the kernel (``repack.gather_kernel``). It copies and
# transposes at about ASYNC_RATE elements a second an SM (per tile; 256x128 at 4096^3: 0.51x
# cuBLAS, where the pass reads 0.89x; benchmarks/results/tf32_staged_ab_h100.log), and every
# block row of C copies B again; the pass moves each element once at HBM speed. So the producer
# copies where the product is bound by reading B (few rows: 1x8192x8192 0.97x against the pass's
# 0.33x), on tall tiles (one copy of B per 256 rows of C), where the cost model says it beats the
# pass by ASYNC_WIN, and B's rows are 16-byte aligned (its 16-byte copies; others take the pass).
ASYNC_RATE = {(256, 128): 3.2e9, (64, 256): 5.5e9}
ASYNC_WIN = 0.8
# tf32 with A mn-major is read through registers (``mma._slice_group_regs_a``), and an n-major B
# with a k-major A swapped into that place (``operands._swaps``), instead of a transposing pass
# before the kernel (4096^3 NN: 0.997x cuBLAS TF32 against the pass's 0.897;
# results/ab_regs_a_h100.log). The producer's copy of B stays the choice for at most ASYNC_ROWS
# rows of A (its 64x256 tile copies B once): there it measured faster than the swapped product,
# past them slower (results/ab_async_vs_swap_h100.log).
ASYNC_ROWS = 64
# Both operands' rows 16 mod 32 bytes apart: the product's full rounds (B multicast) at this share
# of their speed with aligned rows, so the smaller operand may be copied first
# (``operands._slow_rows_copy``). Fit to the copy's gain and loss on four shapes, checked on six
# held out (benchmarks/NOTES.md; results/ab_slow_rows*_h100.log).
SLOW_BOTH = 0.86
# The tiles B multicast takes while A's rows load slowly too: there 128x192 tiles measured 4-5%
# slower than 128x256 ones where the model put them ahead (3000^3, 3000x3000x9000), and with A
# copied to fast rows 6-11% faster (2056x4104x3000, 4104^3; results/ab_c2_192_turn_h100.log).
SLOW_A_TILES = ((128, 256), (128, 128))
# Decode (at most SWAP_ROWS rows of C, 16-bit, A row-major): C^T = B^T A^T on 64 x bn tiles
# (``tiles.SWAP_CONFIGS``, the narrowest bn >= M), so that N is the tile's 64-row side and C's few
# rows the wgmma's narrow width: N / 64 tiles where 64 x 128 ones give N / 128, and no rows of
# zeros through the tensor cores (cuBLAS's decode kernels are such 64x8 to 64x32 tiles:
# benchmarks/results/kernel_times_h100.log); where the cost model ranks it faster by ``TIE``.
# SWAP_ROWS: at 64 rows the swapped 64x64 tile lost to 64x128 on 5 of 6 shapes (an H200's
# results/tune_decode_h200.log). SWAP_FILL: ``swap_splits``' margin on how full the rounds are.
SWAP_ROWS = 32
SWAP_FILL = 0.97
TAIL_TILES = ((128, 256), (128, 192))   # the tiles whose rounds are coarse enough to split (a tail split)
# What a tail split costs beyond its fix-up's launch and bytes: every SM busy in the whole rounds
# (a balanced grid without the split may leave some idle, and the rest run faster), the split
# round's partial sums stored from registers. Fit to the first A/B (results/ab_tail_first_h100.log:
# it lost at 2096x2096x3008, tied at 2304x4608x4096, won at 2048x5120x5120, 2560x2560x16384,
# 1280x5120x8192): 3 to 7 us keeps the wins and drops the others.
TAIL_S = 5e-6
HALVES = 0.925                      # a promoted tile added in halves waits twice a slice (fp8 128x256:
                                    # benchmarks/results/ab_fp8_halves_h100.log)


def split_counts(ktiles: int, most: int):
    """The K splits worth trying of ``ktiles`` slices: 1, then up to ``most`` with at least
    ``MIN_SPLIT_SLICES`` slices each, leaving out counts whose units a smaller one already makes
    (every split gets ``cdiv(ktiles, s)`` slices: 7 ways of 8 slices is 4 of 2)."""
    top = max(1, min(most, ktiles // MIN_SPLIT_SLICES))
    return [s for s in range(1, top + 1) if s == 1 or cdiv(ktiles, cdiv(ktiles, s)) == s]


def splittable(cfg: WgmmaConfig) -> bool:
    """Whether the planner may split K on ``cfg``: persistent tiles of one or two consumers. A
    192-row tile's split measured slower than the tiles it displaced on both shapes tried
    (2560x2560x16384, 1536x1536x8200: benchmarks/results/ab_eff192_aligned_h100.log)."""
    return cfg.persistent and cfg.consumers < 3


def split_units(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int):
    """(tiles, K slices per split, units) of a problem split ``splits`` ways along K (at most:
    every split gets at least one slice, so a few may merge)."""
    tiles = cdiv(cdiv(m, cfg.bm), cfg.cluster) * cfg.cluster * cdiv(n, cfg.bn)
    ktiles = max(1, cdiv(k, cfg.bk))
    kper = cdiv(ktiles, splits)
    return tiles, kper, tiles * cdiv(ktiles, kper)


def _slice_s(cfg: WgmmaConfig, gpu: Gpu) -> float:
    """Seconds one SM of ``gpu`` takes for one K slice of a tile of ``cfg`` (the cost model's)."""
    eff = TILE_EFFICIENCY.get((cfg.bm, cfg.bn), 0.8) * (HALVES if cfg.promote and cfg.promote_n < cfg.bn else 1)
    return 2.0 * cfg.bm * cfg.bn * cfg.bk / (gpu.peak_per_sm * eff)


def estimate(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, gpu: Gpu, out_bytes: int = 2) -> float:
    """Seconds the cost model gives a problem on ``cfg`` with ``splits`` K splits on ``gpu`` (see above)."""
    _, kper, units = split_units(cfg, m, n, k, splits)
    slots = gpu.sms * cfg.min_blocks
    slice_s = _slice_s(cfg, gpu)
    compute = cdiv(units, slots) * (kper + 2) * slice_s
    bandwidth = gpu.hbm_bytes_s * min(1.0, SM_SHARE * min(units, slots) / gpu.sms)
    if splits == 1:
        return _overlap(compute, (2.0 * (m * k + k * n) + out_bytes * m * n) / bandwidth)
    planes = 4.0 * splits * m * n           # written by the kernel, read back by the fix-up
    fix = FIXUP_S + (planes + out_bytes * m * n) / gpu.hbm_bytes_s
    return _overlap(compute, (2.0 * (m * k + k * n) + planes) / bandwidth) + fix


def tail_units(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, slots: int):
    """(whole tiles, the rest split, K slices per split, splits) of a tail split: the
    whole rounds of ``slots`` blocks take whole tiles, the rest (fewer than ``slots``) are split
    ``splits`` ways along K (at most: every split gets a slice, and rest x splits <= slots)."""
    tiles = split_units(cfg, m, n, k, 1)[0]
    rest = tiles % slots
    ktiles = max(1, cdiv(k, cfg.bk))
    kper = cdiv(ktiles, max(1, min(splits, slots // max(rest, 1))))
    return tiles - rest, rest, kper, cdiv(ktiles, kper)


def estimate_tail(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, gpu: Gpu, out_bytes: int = 2) -> float:
    """Seconds the cost model gives a tail split: the whole rounds, one round of the split
    tiles' runs, then their fix-up (a launch, their partial sums read back, their tiles written)."""
    slots = gpu.sms * cfg.min_blocks
    whole, rest, kper, splits = tail_units(cfg, m, n, k, splits, slots)
    compute = (whole // slots * (cdiv(k, cfg.bk) + 2) + kper + 2) * _slice_s(cfg, gpu)
    parts = 4.0 * rest * splits * cfg.bm * cfg.bn
    fix = FIXUP_S + TAIL_S + (parts + out_bytes * rest * cfg.bm * cfg.bn) / gpu.hbm_bytes_s
    return _overlap(compute, (2.0 * (m * k + k * n) + out_bytes * m * n + parts) / gpu.hbm_bytes_s) + fix


def pick_tail(cfgs, m: int, n: int, k: int, gpu: Gpu, than: float, out_bytes: int = 2, tail=None):
    """(configuration, splits) of the tail split the cost model ranks fastest, if faster than
    ``than`` seconds (the best without it) by more than its noise (``TIE``), else None: of the
    persistent tiles of ``TAIL_TILES`` without clusters whose tiles fill whole rounds and leave a
    partial one, and of 2 up to as many splits as fit that round (at least ``MIN_SPLIT_SLICES``
    slices each). ``tail`` (``Policy.tail``): False, never; a number, that many splits on the
    first of ``cfgs`` that has such a round."""
    best = None
    for cfg in cfgs:
        if (cfg.bm, cfg.bn) not in TAIL_TILES or cfg.cluster > 1 or not cfg.persistent or cfg.promote or tail is False:
            continue
        slots = gpu.sms * cfg.min_blocks
        whole, rest, _, _ = tail_units(cfg, m, n, k, 1, slots)
        if not whole or not rest:
            continue
        if tail is not None:
            return (cfg, tail) if tail_units(cfg, m, n, k, tail, slots)[3] > 1 else None
        for s in range(2, slots // rest + 1):
            if cdiv(cdiv(k, cfg.bk), s) < MIN_SPLIT_SLICES:
                break
            t = estimate_tail(cfg, m, n, k, s, gpu, out_bytes)
            if t < TIE * (best[0] if best else than):
                best = (t, cfg, s)
    return best and best[1:]


def _overlap(compute: float, memory: float) -> float:
    """Math and memory traffic overlap, but not perfectly (``OVERLAP`` of the shorter shows)."""
    return max(compute, memory) + OVERLAP * min(compute, memory)


def pick_config(cfgs, m: int, n: int, k: int, slow_b: bool, gpu: Gpu, split: bool = True, out_bytes: int = 2,
                cost=None, slow_a: bool = False):
    """(configuration, splits) for one problem: of the configurations that multicast B (cluster
    > 1) if B's rows load slowly (``slow_b``, see ``tensormap.tma_rows_fast``; with A's rows slow
    too, ``slow_a``, only those of ``SLOW_A_TILES``), else of those
    that do not, and of 1 to ``gpu.sms`` K splits (at least ``MIN_SPLIT_SLICES`` slices each; only
    1 unless ``split``), the pair ``estimate`` (or ``cost``, of the same arguments) ranks
    fastest, the earlier configuration and the
    fewer splits unless another is faster by more than the model's noise (``TIE``). It keeps
    the measured choices from before split-K: 1024^3 takes 128x128 tiles (188 vs 132 TFLOP/s
    with 128x256), 2048^3 128x256 (626 vs 609)."""
    pool = [c for c in cfgs if (c.cluster > 1) == slow_b
            and not (slow_a and c.cluster > 1 and (c.bm, c.bn) not in SLOW_A_TILES)] or list(cfgs)
    best = None
    for cfg in pool:
        ktiles = max(1, cdiv(k, cfg.bk))
        for s in split_counts(ktiles, gpu.sms if split and splittable(cfg) else 1):
            t = (cost or estimate)(cfg, m, n, k, s, gpu, out_bytes)
            if best is None or t < TIE * best[0]:
                best = (t, cfg, s)
    return best[1], best[2]


def estimate_async_b(cfg: WgmmaConfig, m: int, n: int, k: int, splits: int, gpu: Gpu, out_bytes: int = 2) -> float:
    """``estimate`` of a product whose n-major tf32 B the producer copies: at least its rounds of
    copies (a unit's slices of B at ``ASYNC_RATE`` an SM, two more for the ring's fill as
    ``estimate`` counts them, and a split's fix-up), which more splits spread over more SMs."""
    _, kper, units = split_units(cfg, m, n, k, splits)
    copies = cdiv(units, gpu.sms) * (kper + 2) * cfg.k_slice(4) * cfg.bn / ASYNC_RATE[cfg.bm, cfg.bn]
    return max(estimate(cfg, m, n, k, splits, gpu, out_bytes), copies + FIXUP_S * (splits > 1))


def swap_splits(cfg: WgmmaConfig, m: int, n: int, k: int, slots: int) -> int:
    """K splits of a swapped decode product (``operands._narrow_swap``; its M and N as the kernel sees them): the
    fewest whose units fill the grid's rounds within ``SWAP_FILL`` of the best filling (up to
    4 rounds, at least ``MIN_SPLIT_SLICES`` slices each). Such a stream reads B at about an
    SM's share of HBM per unit, so a short last round runs at the few SMs' speed and a split's
    fix-up costs little (few rows); measured on the H100 over 18 shapes, the best or within 2%
    of it on all but one (results/tune_swap_h100.log)."""
    tiles, fills = split_units(cfg, m, n, k, 1)[0], []
    for s in split_counts(max(1, cdiv(k, cfg.bk)), 4 * slots // tiles):
        units = tiles * s
        fills.append((units / (cdiv(units, slots) * slots), s))
    top = max(f for f, _ in fills)
    return next(s for f, s in fills if f >= SWAP_FILL * top)
