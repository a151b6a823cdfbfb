"""The Hopper ladder's configurations: each rung's, the tiles the top rung picks from per problem,
and those of its special paths (decode, batches, fp8, a tf32 B copied by the producer)."""
from __future__ import annotations

from ..config import WgmmaConfig

RUNG1 = WgmmaConfig(bm=64, bn=128, consumers=1, min_blocks=2, max_stages=4)
RUNG2 = WgmmaConfig(bm=128, bn=256, consumers=2, max_stages=4)
RUNG3 = RUNG2.replace(producer=True)
RUNG4 = RUNG3.replace(regs=(40, 232))
RUNG5 = RUNG4.replace(persistent=True)
RUNG6 = RUNG5.replace(cluster=2)
# Rung 7 stores through shared memory by TMA, on rung 5 rather than 6: with this epilogue the
# 2-CTA cluster measured slower on the H100 (bf16 8192^3: 702 vs 786 TFLOP/s, 4096^3: 765 vs 768;
# benchmarks/results/tune_wgmma_h100.txt), so `hopper` leaves clusters off.
RUNG7 = RUNG5.replace(tma_store=True)
# ... and, per problem (``pick_config``), 128x128 tiles where 128x256 ones leave SMs idle (1024^3:
# 188 vs 132 TFLOP/s) and B multicast where B's rows are slow (3000x5000x2000: 589 vs 400).
# 128x192 where 128x256 tiles would end on a short last round (1536^3: 96 tiles in one round
# instead of 72 wider ones), and for M of at most 64 (decoding) 64x256 tiles: half the wgmma work
# on rows TMA fills with zeros. 64x128 tiles (one consumer) where even 128x128 ones leave SMs
# idle (1024^3: 0.975x cuBLAS against 0.772; benchmarks/results/tune_short_waves_h100.log), and
# for 16 to 256 rows where memory bounds the product (``TILE_EFFICIENCY``).
# B multicast over 128x192 tiles once A's rows are fast (``SLOW_A_TILES``). 192x192 tiles on three
# consumer warpgroups (one output box each; 512 threads leave 128 registers a thread at launch,
# setmaxnreg gives the consumers 152) where their rounds fill the GPU better: as cuBLAS's
# 192-row tiles, faster on 22 of 23 slow-rows shapes the model moved to them with B multicast
# (2600x1544x2048 0.694 -> 0.895, 2056x4104x3000 0.799 -> 0.849) and 13 of 18 aligned ones
# (benchmarks/results/ab_eff192_*_h100.log); never split along K (``splittable``), 16-bit only.
RUNG7_CONFIGS = tuple(RUNG7.replace(**kw) for kw in (
    {}, dict(bn=192), dict(bn=128, max_stages=6), dict(bm=64, consumers=1), dict(cluster=2),
    dict(bn=128, max_stages=6, cluster=2), dict(bm=64, bn=128, consumers=1, max_stages=8), dict(bn=192, cluster=2),
    dict(bm=192, bn=192, consumers=3, regs=(40, 152), epi_boxes=1, cluster=2),
    dict(bm=192, bn=192, consumers=3, regs=(40, 152), epi_boxes=1)))
# The swapped decode tiles (``operands._narrow_swap``): one consumer, C's transpose stored from registers, as deep
# a ring as shared memory holds (a stage is 9-12 KiB).
SWAP_CONFIGS = tuple(RUNG7.replace(bm=64, bn=w, consumers=1, tma_store=False, max_stages=24) for w in (8, 16, 32))
# A batched product of one or two K slices per tile (attention's Q K^T) is bound by storing C:
# there 64x128 tiles two blocks an SM (one's epilogue beside the other's loads and math) measured
# fastest: 1.021 / 0.932x torch.bmm (512 x 1024x1024x128 / 64 x 2048x2048x128) against 1.011 /
# 0.905 for 128x128 tiles with 4 output boxes, the choice before (benchmarks/NOTES.md;
# results/tune_batched_2blocks_h100.log); other batched shapes follow the cost model.
SHORT_K = RUNG7.replace(bm=64, bn=128, consumers=1, min_blocks=2, regs=(40, 216), max_stages=4)
# A batched product of one full 128-wide tile column (N = 128: attention's P V at head size 128)
# and more K slices: its tiles' output is a large part of their work, so the two consumers take
# turns (``pingpong``), one's epilogue beside the other's mainloop, on 64x128 tiles with 4 output
# boxes each: faster than the model's tile on 5 of 6 such shapes, level on the sixth (64 x
# 4096x128x4096; benchmarks/NOTES.md). Narrower columns (N = 64, 96, 112) and two
# (256) measured slower on it, so the model keeps them (``Policy.narrow_pingpong``).
NARROW_N = RUNG7.replace(bm=64, bn=128, pingpong=True, epi_boxes=4, max_stages=8)
# fp8 inputs: tiles whose accumulators are promoted (each K slice summed apart, then added to fp32
# registers, as cuBLAS's default and DeepGEMM do), 128x192, 128x256 or 128x128 as the cost model
# picks; two sets of a 128x256 tile's accumulators do not fit a consumer's registers, so it sums
# and adds a slice in two n128 halves (``promote_n``); B multicast where its rows are slow.
# Block-wise scales are loaded two slices before their add (8192^3: 0.862 of per-tensor
# `_scaled_mm` against 0.846 one slice ahead; benchmarks/results/ab_fp8_scale_lead_h100.log).
# Per-tensor into a bf16 C, 128x192 sums two slices (256 of K) before each add, the consumers'
# adds a slice apart: 8192^3 1.00 of `_scaled_mm` against 0.975 slice by slice. Its sums' error
# (measured into fp32 before fp32 was kept to every slice) 1.6x `_scaled_mm`'s, which adds every
# 128 of K; bf16's rounding is 8x that error, so into bf16 the same (benchmarks/results/
# ab_fp8_every2_s35_h100.log). Into fp16 (rounding 8x finer than bf16's) and fp32, every slice.
FP8_CONFIGS = tuple(RUNG7.replace(promote=True, scale_lead=2, **kw) for kw in (
    dict(bn=192, promote_every=2), {}, dict(bn=128, max_stages=6), dict(bn=128, max_stages=6, cluster=2)))
# The tiles an n-major tf32 B copied by the producer runs on (``_b_by_producer``): tall, since
# each block row of C copies B again (64x256 for a few rows).
# Their producers hold more registers (the copies' addresses and a 4 x 4 block: below these
# counts ptxas spills them; the 256x128 tile's consumers give 32 of theirs for it).
ASYNC_CONFIGS = (RUNG7.replace(bm=256, bn=128, staged=True, regs=(104, 200)),
                 RUNG7.replace(bm=64, consumers=1, staged=True, epi_boxes=1, regs=(128, 232)))
_IN = ("float16", "bfloat16")
_OUT = ("float32", "float16", "bfloat16")
