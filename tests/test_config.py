import pytest

from numba_tc import simt
from numba_tc.config import STATIC_SMEM_LIMIT, ConfigError, SimtConfig
pytestmark = pytest.mark.cpu


def test_rung_configs_are_valid_and_climb():
    cfgs = [v.config for v in simt.RUNGS if v.config is not None]
    assert [v.rung for v in simt.RUNGS] == list(range(1, 8))
    for c in cfgs:
        c.validate()
        assert c.smem_bytes <= STATIC_SMEM_LIMIT
    # register tiling grows up the ladder: outputs per thread 1, 8, 64, 64, 64
    assert [c.outputs_per_thread for c in cfgs] == [1, 8, 64, 64, 64]


def test_block_tile_may_take_several_sub_tiles_per_thread():
    c = SimtConfig(bm=128, bn=128, bk=8, tm=8, tn=8, threads=128)   # 2 sub-tiles of 8x8 per thread
    assert (c.wmiter, c.outputs_per_thread) == (2, 128)


def test_derived_warptile_quantities():
    c = simt.RUNG7
    assert c.threads_per_wtile == 32
    assert (c.wmiter, c.wsubm, c.wsubn) == (2, 32, 16)
    # the threads of a warp exactly cover one sub-tile, the warp tiles exactly cover the block
    assert (c.wsubm // c.tm) * (c.wsubn // c.tn) == 32
    assert (c.bm // c.wm) * (c.bn // c.wn) * 32 == c.threads
    assert c.smem_bytes == 4 * 2 * (16 * (128 + 4) + 16 * 64)


@pytest.mark.parametrize("kw, words", [
    (dict(bm=128, bn=128, bk=8, tm=8, tn=8, threads=250), "multiple of 32"),
    (dict(bm=128, bn=128, bk=8, tm=8, tn=8, threads=96), "not covered"),
    (dict(bm=128, bn=128, bk=32, tm=8, tn=8, threads=256, stages=2), "shared memory"),
    (dict(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256, wm=48), "divide the block tile"),
    (dict(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256, a_pad=4), "k-major"),
    (dict(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256, stages=3), "stages"),
    (dict(bm=128, bn=128, bk=8, tm=8, tn=8, threads=256, min_blocks=9), "2048 threads"),
    (dict(bm=64, bn=64, bk=2, tm=8, tn=16, threads=32, vector_loads=True), "vector width"),
])
def test_bad_configs_raise(kw, words):
    with pytest.raises(ConfigError, match=words):
        SimtConfig(**kw)


def test_launch_grid_covers_ragged_shapes():
    for rung, cfg in ((1, None), (2, None), (7, simt.RUNG6)):
        for m, n in ((1, 1), (129, 65), (4096, 4095)):
            grid, block = simt.launch_grid(rung, cfg, m, n)
            if rung == 1:
                assert grid[0] * 32 >= m and grid[1] * 32 >= n and block == (32, 32)
            elif rung == 2:
                assert grid[0] * 32 >= n and grid[1] * 32 >= m
            else:
                assert grid[0] * cfg.bn >= n and grid[1] * cfg.bm >= m
                assert (grid[0] - 1) * cfg.bn < n and (grid[1] - 1) * cfg.bm < m
    # a split-tail configuration numbers its tiles along x alone
    assert simt.launch_grid(7, simt.RUNG7, 4095, 129) == ((32 * 3,), (128,))


def test_launch_grid_rejects_too_tall():
    with pytest.raises(ValueError, match="grid"):
        simt.launch_grid(3, simt.RUNG3, 32 * 70000, 32)


def test_tile_order_visits_every_tile_once_in_groups():
    from numba_tc.schedule import cdiv, tile_order
    assert cdiv(257, 128) == 3 and cdiv(256, 128) == 2 and cdiv(0, 8) == 0
    for grid_m, grid_n, group in ((3, 4, 2), (5, 3, 8), (7, 7, 1), (16, 16, 8)):
        order = tile_order(grid_m, grid_n, group)
        assert sorted(order) == [(i, j) for i in range(grid_m) for j in range(grid_n)]
        # consecutive pids walk down a group of rows before moving to the next column
        assert order[:min(group, grid_m)] == [(i, 0) for i in range(min(group, grid_m))]
    assert tile_order(4, 3, 1) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1),
                                   (2, 2), (3, 0), (3, 1), (3, 2)]     # group 1: row-major


def test_fragment_prefetch_needs_the_cp_async_pipeline():
    from numba_tc.config import MmaConfig
    with pytest.raises(ConfigError, match="frag_prefetch needs async_copy"):
        MmaConfig(bm=128, bn=128, wm=64, wn=64, frag_prefetch=True)
    assert MmaConfig(bm=128, bn=128, wm=64, wn=64, async_copy=True, frag_prefetch=True).frag_prefetch


def test_balanced_workers():
    from numba_tc.schedule import balanced_workers, cdiv
    assert balanced_workers(512, 132) == 128        # 4096^3 in 128x256 tiles: 4 rounds of 128
    assert balanced_workers(2048, 132) == 128
    assert balanced_workers(2112, 132) == 132       # exactly 16 rounds of 132
    assert balanced_workers(100, 132) == 100
    assert balanced_workers(0, 132) == 0
    for tiles in range(1, 700):
        for slots in (1, 7, 66, 132):
            w = balanced_workers(tiles, slots)
            assert 1 <= w <= slots
            assert cdiv(tiles, w) == cdiv(tiles, slots)            # no extra round
            assert w == 1 or cdiv(tiles, w - 1) > cdiv(tiles, slots)   # the fewest that do it
