"""Hopper facts that need no GPU: the wgmma matrix descriptor bit by bit, where wgmma reads each
operand element against where TMA's 128B swizzle put it, the accumulator fragment map, the
configuration rules and the tensor-map argument checks."""
import numpy as np
import pytest

from numba_tc import layout
from numba_tc.config import ConfigError, WgmmaConfig

from conftest import SIM
pytestmark = pytest.mark.cpu


def test_descriptor_bits_follow_the_ptx_isa():
    # start address >> 4 in bits 0-13, LBO >> 4 in 16-29, SBO >> 4 in 32-45, swizzle in 62-63
    d = layout.wgmma_desc(0x1230, 16, 1024, layout.SW128)
    assert d == 0x123 | (1 << 16) | (64 << 32) | (1 << 62)
    assert layout.wgmma_desc(0x3FFF0, 0x3FFF0, 0x3FFF0, 3) == (0x3FFF | (0x3FFF << 16) | (0x3FFF << 32) | (3 << 62))
    assert layout.wgmma_desc(0x40010, 0, 0, 0) == 0x1                 # addresses wrap at 256 KiB
    for field, shift in ((0, 0), (1, 16), (2, 32)):                   # each field alone, every bit
        for bit in range(14):
            args = [0, 0, 0]
            args[field] = 16 << bit
            assert layout.wgmma_desc(*args, 0) == 1 << (shift + bit)
    assert all(layout.wgmma_desc(0, 0, 0, m) == m << 62 for m in range(4))
    assert layout.wgmma_desc(0, 0, 0, 1) >> 46 & 0x7 == 0            # base offset 0 (1024-aligned tiles)


def _wgmma_reads(desc_start, lbo, sbo, kmajor, mn, k):
    """Where wgmma reads element (mn, k) of a 128B-swizzled operand from its descriptor fields:
    CUTLASS's canonical layouts (K-major ((8,m),(T,2k)):((8T,SBO),(1,T)), MN-major
    ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)), T = 8 elements of 16 bits) at the start address, then
    the 128B swizzle on the absolute address (bits 4-6 ^= bits 7-9)."""
    if kmajor:
        off = (mn % 8) * 128 + (mn // 8) * sbo + k * 2
    else:
        off = (mn % 64) * 2 + (mn // 64) * lbo + (k % 8) * 128 + (k // 8) * sbo
    addr = desc_start + off
    return addr ^ (((addr >> 7) & 7) << 4)


def _tma_put(kmajor, mn, k):
    """Where TMA (128B swizzle) put element (mn, k) of a stored tile: k-major one box of
    [rows][64 k]; mn-major boxes of [64 k][64 mn], 8 KiB apart."""
    if kmajor:
        return layout.chunk_offset(mn, (2 * k) // 16, 8, True) + (2 * k) % 16
    box, c = divmod(mn, 64)
    return box * layout.BOX_BYTES + layout.chunk_offset(k, (2 * c) // 16, 8, True) + (2 * c) % 16


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("n", [64, 128, 256])
def test_wgmma_reads_every_operand_element_where_tma_put_it(kmajor, n):
    tile = 5 * 1024                                   # any 1024-aligned shared address
    lbo = 16 if kmajor else layout.BOX_BYTES
    for mn0 in range(0, 256 - n + 1, 64):
        for ks in range(4):                           # the four k16 steps of a 64-wide K slice
            start = tile + layout.wgmma_operand_offset(kmajor, mn0, ks)
            for mn in range(n):
                for k in range(16):
                    got = _wgmma_reads(start, lbo, layout.ATOM_BYTES, kmajor, mn, k)
                    assert got == tile + _tma_put(kmajor, mn0 + mn, 16 * ks + k), (mn0, ks, mn, k)


def test_accumulator_fragment_map_covers_the_tile_once():
    for n in (64, 256):
        seen = np.zeros((64, n), int)
        for t in range(128):
            for r in range(n // 2):
                m, c = layout.wgmma_d_fragment(t, r)
                seen[m, c] += 1
                if r % 2:                             # register pairs are adjacent columns
                    assert (m, c - 1) == layout.wgmma_d_fragment(t, r - 1)
        assert (seen == 1).all()
    # warp w owns rows 16w..16w+15, laid out as mma.sync m16n8 fragments
    assert layout.wgmma_d_fragment(37, 5) == (16 + layout.c_fragment(5, 1)[0], 8 + layout.c_fragment(5, 1)[1])


def test_the_producer_copy_tiles_fit_with_their_staged_rows():
    # a staged stage holds B's slice twice (as it lies, then k-major): three stages still fit,
    # and the producers' registers fit the block's launch allocation
    from numba_tc import hopper
    for cfg in hopper.ASYNC_CONFIGS:
        assert cfg.staged and cfg.stage_bytes == (cfg.bm + 2 * cfg.bn) * 128
        assert cfg.stages >= 3 and cfg.smem_bytes <= 227 * 1024
        assert (cfg.regs[0] + cfg.consumers * cfg.regs[1]) * 128 <= cfg.block_registers


def test_wgmma_config_rules():
    cfg = WgmmaConfig(bm=128, bn=256, consumers=2, producer=True, regs=(40, 232), persistent=True)
    assert cfg.threads == 384 and cfg.acc_regs == 128 and cfg.stages == 4
    assert cfg.smem_bytes <= 227 * 1024
    with_store = cfg.replace(tma_store=True)
    assert with_store.smem_bytes <= 227 * 1024 and with_store.epilogue_bytes == 2 * 2 * 8192
    ring4 = with_store.replace(epi_boxes=4)             # a longer output ring costs a stage
    assert ring4.epilogue_bytes == 2 * 4 * 8192 and ring4.stages == 3 and ring4.smem_bytes <= 227 * 1024
    for bad, words in [(dict(bn=96), "one of"), (dict(bm=96), "multiple of 64"),
                       (dict(consumers=1), "accumulators per thread"),
                       (dict(producer=False), "needs producer"), (dict(regs=(44, 232)), "multiples of 8"),
                       (dict(bm=192, consumers=3, regs=(24, 144)), "too few for 128 accumulators"),
                       (dict(cluster=3), "1 or 2"), (dict(bm=512), "at most 256 rows"),
                       (dict(epi_boxes=3), "1, 2, 4 or 8"),
                       # the block is given 384 x 168 registers at launch: setmaxnreg.inc past them waits forever
                       (dict(regs=(48, 232)), "the 64512 registers the block is given")]:
        with pytest.raises(ConfigError, match=words):
            cfg.replace(**bad)


@pytest.mark.skipif(SIM, reason="the Hopper ladder is not built under the simulator")
def test_tensor_map_arguments_are_checked_before_the_driver():
    from numba_tc import tensormap
    assert tensormap.tma_requirements(1024, 64, 2) is None
    assert "not 16-byte aligned" in tensormap.tma_requirements(1026, 64, 2)
    assert "126 bytes apart" in tensormap.tma_requirements(1024, 63, 2)
    with pytest.raises(ValueError, match="at most 256 x 256"):
        tensormap.encode(1024, "bfloat16", 64, 64, 64, 64, 512)
    with pytest.raises(ValueError, match="at most 128 bytes"):
        tensormap.encode(1024, "float32", 64, 64, 64, 64, 64)


@pytest.mark.skipif(SIM, reason="the Hopper ladder is not built under the simulator")
def test_grids_and_operand_maps():
    from numba_tc import hopper
    from numba_tc.arrays import Matrix
    def blocks(cfg, m, n, resident):
        return hopper.work_plan(cfg, hopper.split_units(cfg, m, n, 64, 1)[2], resident)
    assert blocks(hopper.RUNG3, 1000, 1000, 132) == 8 * 4
    assert blocks(hopper.RUNG5, 8192, 8192, 132) == 128          # 2048 tiles: 16 each
    assert blocks(hopper.RUNG5, 8000, 8192, 132) == 126          # 2016 tiles: 16 each
    assert blocks(hopper.RUNG5, 8192, 8448, 132) == 132          # 2112 tiles: 16 each
    assert blocks(hopper.RUNG5, 1000, 1000, 132) == 32           # fewer tiles than SMs
    assert blocks(hopper.RUNG6, 200, 256, 132) == 2              # a padded cluster
    assert blocks(hopper.RUNG6, 8192, 8192, 120) == 114          # 1024 / 60: 18 rounds
    assert blocks(hopper.RUNG6, 4096, 4096, 132) == 128          # 256 / 66: 4 rounds
    assert blocks(hopper.RUNG5, 4096, 4096, 132) == 128          # 512 tiles: 4 rounds
    # split 4 ways along K: 4 x 32 units of 128x256 in one round
    assert hopper.split_units(hopper.RUNG5, 1024, 1024, 32768, 4) == (32, 128, 128)
    a = Matrix(None, 300, 200, 200, False, "bfloat16", 4096)          # row-major A: k-major
    b = Matrix(None, 200, 120, 120, False, "bfloat16", 8192)          # row-major B: mn-major
    ma, mb = hopper.operand_maps(hopper.RUNG6, a, b)
    assert ma == ("bfloat16", 200, 300, 200, 64, 128)                 # boxes of [128 rows][64 k]
    assert mb == ("bfloat16", 120, 200, 120, 64, 64)                  # boxes of [64 k][64 n]
    _, mb = hopper.operand_maps(hopper.RUNG6, a, b.transposed())      # column-major B: k-major,
    assert mb == ("bfloat16", 120, 200, 120, 64, 128)                 # half of BN per cluster CTA


@pytest.mark.skipif(SIM, reason="the Hopper ladder is not built under the simulator")
def test_hopper_picks_tiles_and_multicast_per_problem():
    from numba_tc import hopper
    from numba_tc.tensormap import tma_rows_fast
    assert tma_rows_fast(1024, 4096, 2) and tma_rows_fast(1024, 4112, 2)
    assert not tma_rows_fast(1024, 4104, 2)          # rows 16 mod 32 bytes apart
    assert not tma_rows_fast(1040, 4096, 2)          # base 16 mod 32
    cfgs = hopper.RUNG7_CONFIGS

    def pick(m, n, slow_b=False):
        cfg, splits = hopper.pick_config(cfgs, m, n, max(64, min(m, n)), slow_b, hopper.H100)
        assert splits == 1
        return cfg.bn, cfg.cluster
    assert pick(4096, 4096) == (256, 1) and pick(8192, 1024) == (256, 1)
    assert pick(1024, 1024) == (128, 1)     # 32 tiles of 128x256 would leave 100 SMs idle,
    assert hopper.pick_config(cfgs, 1024, 1024, 1024, False, hopper.H100)[0].bm == 64   # 64 of 128x128 68
    assert pick(2048, 1024) == (128, 1)     # 64
    assert pick(2048, 2048) == (256, 1)     # 128 tiles: one wave, the larger tile wins
    assert pick(4096, 4096, True) == (256, 2) and pick(1024, 1024, True) == (128, 2)
    assert pick(128 * 66, 256, True) == (128, 2)       # 66 tiles of 128x256: half the SMs
    assert pick(128 * 66 + 1, 256, True) == (256, 2)   # 67 tile rows, padded to 68 for clusters
    assert pick(64, 64) == (128, 1)         # one tile either way: the smallest
    # few rows, memory-bound: 64x128 tiles without a split (96x5120x5120: 0.93x cuBLAS against
    # 0.79 for 128x128 split-K 2; results/ab_eff64x128_h100.log)
    cfg, splits = hopper.pick_config(cfgs, 96, 5120, 5120, False, hopper.H100)
    assert (cfg.bm, cfg.bn, splits) == (64, 128, 1)
    assert all(c.tma_store and c.persistent for c in cfgs)


@pytest.mark.skipif(SIM, reason="the Hopper ladder is not built under the simulator")
def test_hopper_splits_k_where_tiles_are_too_few():
    from numba_tc import hopper
    cfgs = hopper.RUNG7_CONFIGS

    def pick(m, n, k):
        cfg, splits = hopper.pick_config(cfgs, m, n, k, False, hopper.H100)
        return cfg.bn, splits
    assert pick(256, 256, 131072)[1] >= 16          # 2-4 tiles: split until the SMs are busy
    assert pick(1024, 1024, 32768) == (256, 4)      # 32 tiles x 4 = 128 units, one round
    assert pick(1, 8192, 8192)[1] > 1               # decoding: more SMs streaming B
    assert pick(4096, 4096, 4096)[1] == 1           # 512 tiles: nothing to gain
    assert pick(1024, 1024, 1024)[1] == 1           # 16 K slices: the planes would cost more
    assert hopper.pick_config(cfgs, 256, 256, 131072, False, hopper.H100, split=False)[1] == 1
    for m, n, k in ((256, 256, 131072), (1, 8192, 8192), (3000, 3000, 3000), (700, 5000, 20000)):
        cfg, s = hopper.pick_config(cfgs, m, n, k, False, hopper.H100)
        t = hopper.estimate(cfg, m, n, k, s, hopper.H100)
        # the choice is the model's best (up to its tie margin) over every configuration and split
        assert all(t <= hopper.estimate(c, m, n, k, x, hopper.H100) / hopper.TIE
                   for c in cfgs if c.cluster == 1 for x in range(1, 133))


def test_fp8_configuration_rules():
    # a slice is one 128-byte row whatever the type: 64 16-bit or 128 fp8 elements of K
    from numba_tc import hopper
    r7 = hopper.RUNG7
    assert r7.k_slice(2) == 64 and r7.k_slice(1) == 128
    for cfg in hopper.FP8_CONFIGS:      # promoted: both sets fit the consumers' 232 (a 256-wide tile
        # sums a slice over one n128 half at a time)
        assert cfg.promote and cfg.local_regs == cfg.acc_regs * (cfg.bn + cfg.promote_n) // cfg.bn <= cfg.regs[1] - 24
    assert r7.replace(promote=True).promote_n == 128 and r7.replace(bn=192, promote=True).promote_n == 192
    with pytest.raises(ConfigError, match="too few"):
        r7.replace(promote=True, regs=(40, 208))
    with pytest.raises(ConfigError, match="producer"):
        WgmmaConfig(bm=64, bn=64, promote=True)
    # slices summed in groups of 1 or 2; a group holds its stages until its add, so fewer than
    # the ring's; the tile added whole (a 256-wide tile's halves reuse one set), one tile a time
    assert r7.replace(bn=192, promote=True, promote_every=2).promote_every == 2
    for kw, msg in ((dict(bn=192, promote_every=4), "1 or 2"), (dict(promote_every=2), "whole"),
                    (dict(bn=192, promote_every=2, max_stages=2), "2 stages"),
                    (dict(bn=192, promote_every=2, promote=False), "whole")):
        with pytest.raises(ConfigError, match=msg):
            r7.replace(**{"promote": True, **kw})
    with pytest.raises(ValueError, match="two groups of two"):     # (its turn is written for two)
        hopper.promotion.make_grouped_mainloop(None, 4, 0, 1, 96, 3)


def test_fp8_operands_are_copied_unless_k_major():
    from numba_tc import hopper
    from numba_tc.arrays import Matrix
    f8 = "float8_e4m3fn"
    a = Matrix(None, 256, 512, 512, False, f8, 1 << 32)       # row-major A: k-major
    b = Matrix(None, 512, 128, 512, True, f8, 2 << 32)        # column-major B: k-major
    assert not hopper.operands._needs_kmajor_copy(a, 0, f8) and not hopper.operands._needs_kmajor_copy(b, 1, f8)
    assert hopper.operands._needs_kmajor_copy(Matrix(None, 256, 512, 256, True, f8, 1 << 32), 0, f8)   # column-major A
    assert hopper.operands._needs_kmajor_copy(Matrix(None, 512, 128, 128, False, f8, 2 << 32), 1, f8)
    assert hopper.operands._needs_kmajor_copy(Matrix(None, 256, 528, 528, False, f8, 1 << 32), 0, f8) is False
    assert hopper.operands._needs_kmajor_copy(Matrix(None, 256, 500, 500, False, f8, 1 << 32), 0, f8)   # 500 B rows
    # a tf32 A is read mn-major through registers (an n-major B is not: a pass, or the swap)
    assert not hopper.operands._needs_kmajor_copy(Matrix(None, 256, 512, 256, True, "float32", 1 << 32), 0, "tf32")
    assert hopper.operands._needs_kmajor_copy(Matrix(None, 512, 128, 128, False, "float32", 2 << 32), 1, "tf32")
    # the copy's lines: A's rows, B's columns, each K long, at the strides of the layout as stored
    assert hopper.operands._kmajor(a, 0) == (256, 512, 512, 1) and hopper.operands._kmajor(b, 1) == (128, 512, 512, 1)
    assert hopper.operands._kmajor(Matrix(None, 512, 128, 128, False, "float8_e4m3fn", 0), 1) == (128, 512, 1, 128)


def test_a_forced_variant_lists_the_tf32_kernels_it_can_plan():
    # a fixed-tile variant (splits given) copies an n-major tf32 B by its producer only if its
    # configuration is staged: its ahead-of-time list has those kernels then, and no others
    import numba_tc
    from numba_tc import hopper
    plain = numba_tc.variant_from(hopper.RUNG7, "forced_plain", splits=1).kernels("tf32")
    staged = numba_tc.variant_from(hopper.ASYNC_CONFIGS[0], "forced_staged", splits=1).kernels("tf32")
    assert plain and not any("async_b=True" in k.key[1] for k in plain if k.name.startswith("hopper"))   # (a KernelSpec)
    assert any("async_b=True" in k.key[1] for k in staged if k.name.startswith("hopper"))


def test_a_staged_epilogue_array_costs_a_stage_and_an_output_box():
    # shared memory for a staged epilogue array (two 16-row slots per warp, float32 at an output
    # box's width) comes from the ring: 128x256 keeps 3 stages and one output box per consumer;
    # tiles left with fewer than STAGED_MIN stages, promoted (fp8) ones and epilogues without
    # such an array stay as they are
    from numba import cuda

    from numba_tc import hopper
    from numba_tc.epilogue import PLAIN, Epilogue, UserFunction

    @cuda.jit(device=True)
    def resid(acc, row, col, res):
        return acc + res[row, col]
    spec = Epilogue(user=UserFunction("resid", "d", (("array", "float32", 2, True),), resid))
    cfg = hopper.staged_config(hopper.RUNG7, spec, "bfloat16")
    assert cfg.epi_source == hopper.staged_bytes(cfg, "bfloat16") == 4 * 2 * 16 * 64 * 4
    assert cfg.epi_boxes == 1 and cfg.stages == 3 and cfg.smem_bytes <= 227 * 1024
    assert hopper.staged_bytes(cfg, "float32") == cfg.epi_source // 2       # (32-column boxes)
    # the slots take boxes 0 and 1 of four: a thread holds its 64 elements of boxes 2 and 3 in
    # registers beside its 128 accumulators, the producer's spare ones given to the consumers,
    # and all of it is read over the tile's last HELD_LEAD slices
    assert (cfg.epi_held, cfg.local_regs, cfg.regs, cfg.epi_lead) == (64, 192, (24, 240), hopper.HELD_LEAD)
    assert (cfg.regs[0] + 2 * cfg.regs[1]) * 128 <= cfg.block_registers
    # a 32-column box (fp32 C): the other six boxes would take 96; clusters and lone consumers
    # hold none (they spilled); their reads are the slots' two boxes at once, epi_lead slices ahead
    for tile, out in ((hopper.RUNG7, "float32"), (hopper.RUNG7.replace(cluster=2), "bfloat16"),
                      (hopper.RUNG7.replace(bm=64, consumers=1), "bfloat16")):
        held = hopper.staged_config(tile, spec, out)
        assert held.epi_source and held.epi_held == 0 and held.regs == tile.regs and held.epi_lead == 8, (tile, out)
    assert hopper.staged_config(hopper.RUNG7.replace(bn=192), spec, "bfloat16").epi_held == 32
    wide = hopper.RUNG7_CONFIGS[-1]                                         # 192x192: 2 stages left
    assert wide.consumers == 3 and hopper.staged_config(wide, spec, "bfloat16") is wide
    with pytest.raises(ValueError, match="epi_held"):
        hopper.RUNG7.replace(epi_held=64)                                    # (no staged array)
    assert hopper.staged_config(hopper.RUNG7, PLAIN, "bfloat16") is hopper.RUNG7
    assert hopper.staged_config(hopper.FP8_CONFIGS[0], spec, "bfloat16") is hopper.FP8_CONFIGS[0]
    assert hopper.staged_config(hopper.NARROW_N, spec, "bfloat16") is hopper.NARROW_N     # (its epilogue hides)
    # a 16-bit array: every box in a slot of its own (128x256: the bytes of a float32 array's
    # two), nothing held, the copies spread over HELD_LEAD slices (clusters and lone consumers
    # too: without held registers their tails do not spill); a 16-bit C's boxes staged in those
    # slots (no output boxes of their own: 192x192 on three consumers keeps 3 stages); where
    # every box leaves too few stages (192x192, an fp32 C), two slots refilled, copied at once
    for dt in ("bfloat16", "float16"):
        spec16 = Epilogue(user=UserFunction("resid", "d", (("array", dt, 2, True),), resid))
        for out in ("bfloat16", "float32"):
            cfg16 = hopper.staged_config(hopper.RUNG7, spec16, out)
            boxes = 4 if out == "bfloat16" else 8
            assert cfg16.epi_source == hopper.staged_bytes(cfg16, out, dt, boxes) == 4 * 8 * 1024 == cfg.epi_source
            assert (cfg16.epi_held, cfg16.regs, cfg16.epi_spread, cfg16.epi_lead, cfg16.stages) == \
                (0, hopper.RUNG7.regs, True, hopper.HELD_LEAD, 3), (dt, out)
            assert cfg16.epi_boxes == (0 if out == "bfloat16" else 1)
        for tile in (hopper.RUNG7.replace(cluster=2), hopper.RUNG7.replace(bm=64, consumers=1), wide):
            spread = hopper.staged_config(tile, spec16, "bfloat16")
            assert spread.epi_source == hopper.staged_bytes(tile, "bfloat16", dt, tile.bn // 64) and spread.epi_spread
            assert spread.epi_boxes == 0 and spread.stages >= hopper.STAGED_MIN, tile
        three = hopper.staged_config(wide, spec16, "float32")
        assert three.epi_source == hopper.staged_bytes(wide, "float32", dt) and three.stages == hopper.STAGED_MIN
        assert not three.epi_spread and three.epi_lead == hopper.STAGED_LEAD and three.epi_boxes == 1
    with pytest.raises(ValueError, match="epi_boxes=0"):
        hopper.RUNG7.replace(epi_boxes=0)                                    # (no staged array)
    with pytest.raises(ValueError, match="epi_spread"):
        hopper.RUNG7.replace(epi_spread=True)                                # (no staged array)


def test_ping_pong_configuration_rules():
    # each consumer a whole tile: its rows are the tile's, a stage is released by one warpgroup
    from numba_tc import hopper
    pp = hopper.RUNG7.replace(bn=128, pingpong=True)
    assert pp.wg_m == 128 and pp.acc_regs == 128 and hopper.NARROW_N.wg_m == 64 and hopper.NARROW_N.stages == 6
    for bad in (dict(consumers=1, bm=64), dict(persistent=False), dict(epi_source=4096)):
        with pytest.raises(ConfigError, match="ping-pong"):
            pp.replace(**bad)
    with pytest.raises(ConfigError, match="accumulators per thread"):
        pp.replace(bn=256)                                  # 128 x 256 in one warpgroup: 256 registers


def test_the_hopper_package_keeps_its_shape():
    """numba_tc/hopper/: one job a module (none over 700 lines), functions of at most 80 lines and
    at most two of more than 12 parameters (a kernel's entry takes the launch's), no import circle
    among its modules (deferred imports too), and only its device modules in the cubin key."""
    import ast
    import os
    from numba_tc import build
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "numba_tc", "hopper")
    mods = {f[:-3]: ast.parse(open(os.path.join(here, f)).read()) for f in os.listdir(here) if f.endswith(".py")}
    many, edges = [], {m: set() for m in mods}
    for name, tree in mods.items():
        assert open(os.path.join(here, name + ".py")).read().count("\n") <= 700, name
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                assert node.end_lineno - node.lineno < 80, f"{name}.{node.name}: over 80 lines"
                a = node.args
                if len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) > 12:
                    many.append(f"{name}.{node.name}")
            elif isinstance(node, ast.ImportFrom) and node.level == 1:
                edges[name] |= {node.module} if node.module else {a.name for a in node.names}
    assert len(many) <= 2, many
    seen, done = [], set()

    def visit(m):                       # depth first: a module met again on the path is a circle
        assert m not in seen, f"import circle: {' -> '.join(seen[seen.index(m):] + [m])}"
        if m in done or m not in mods:
            return
        seen.append(m)
        for n in edges[m] - {"__init__"}:
            visit(n)
        seen.pop()
        done.add(m)
    for m in mods:
        visit(m)
    device = {m.split("/")[1] for m in build.KERNEL_MODULES if m.startswith("hopper/")}
    assert device == {"spec", "pipeline", "scheduler", "mma", "producer", "mainloop", "promotion", "staging", "store",
                      "kernel"}
    assert not any(edges[m] - device for m in device), {m: edges[m] - device for m in device}


def test_the_planner_switches_are_one_policy():
    from numba_tc import hopper
    assert hopper.current() == hopper.Policy() and hopper.Policy().key == hopper.Policy().key
    with hopper.using(tail=3, swap=False) as p:
        assert hopper.current() is p and (p.tail, p.swap) == (3, False) and p.key != hopper.Policy().key
    assert hopper.current() == hopper.Policy()
    for bad, words in ((dict(tail=1), "tail=1"), (dict(slow_rows_copy="c"), "'a' or 'b'"), (dict(staged=None), "staged")):
        with pytest.raises(ValueError, match=words):
            hopper.Policy(**bad)
    with pytest.raises(AttributeError, match="set_policy"):
        hopper.TAIL = 3                 # an old switch: it would reach no planner
    with pytest.raises(AttributeError, match="home module"):
        hopper.TIE = 0.5


def test_the_cost_model_knows_gpus_by_name_or_properties():
    from numba_tc.hopper import cost
    assert cost.gpu_named("NVIDIA H100 80GB HBM3", 132) is cost.H100
    assert cost.gpu_named("NVIDIA H200", 132) is cost.H200
    assert cost.H200.hbm_bytes_s > cost.H100.hbm_bytes_s and cost.H100.peak_per_sm == 790e12 / 132
    half = cost.gpu_named("NVIDIA H200", 66)                   # a MIG slice: its share of the peak
    assert half.sms == 66 and half.peak_per_sm == cost.H200.peak_per_sm
    props = dict(CLOCK_RATE=1755000, MEMORY_CLOCK_RATE=1593000, GLOBAL_MEMORY_BUS_WIDTH=5120,
                 MAX_SHARED_MEMORY_PER_MULTIPROCESSOR=233472, L2_CACHE_SIZE=52428800)
    pcie = cost.gpu_named("NVIDIA H100 PCIe", 114, lambda: props)
    assert pcie.sms == 114 and pcie.hbm_datasheet == 2 * 1593e6 * 640
    assert pcie.hbm_bytes_s == pytest.approx(cost.COPY_SHARE * pcie.hbm_datasheet)
    assert pcie.peak_flops == pytest.approx(cost.PEAK_SHARE * 4096 * 1.755e9 * 114)
    with pytest.raises(ValueError, match="properties"):
        cost.gpu_named("NVIDIA H100 PCIe", 114)
    # the model's choice moves with the GPU: the H200's bandwidth makes memory-bound shapes cheaper
    from numba_tc import hopper
    cfg = cost.pick_config(hopper.RUNG7_CONFIGS, 64, 8192, 8192, False, cost.H100)[0]
    assert cost.estimate(cfg, 64, 8192, 8192, 1, cost.H200) < cost.estimate(cfg, 64, 8192, 8192, 1, cost.H100)
