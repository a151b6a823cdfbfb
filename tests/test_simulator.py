"""Every SIMT rung, run by Numba's CUDA simulator on tiny ragged shapes: each rung's own
configuration, and its kernel in a small configuration (``simulated.SMALL``: one warp a block,
so that a problem of a few dozen rows spans several blocks) for the multi-block paths."""
import pytest

from numba_tc import simt

from conftest import run_in_simulator
pytestmark = pytest.mark.sim

CASES = [
    # (m, n, k, layout): ragged everywhere; K=36/N=44 give 16-byte-aligned rows (vector paths
    # with edge chunks), K=37 does not (scalar fallback); TT is column-major A and B.
    (19, 23, 37, "NN"),
    (21, 44, 36, "TT"),
]


@pytest.mark.parametrize("variant", [v.name for v in simt.RUNGS])
def test_rung_in_simulator(variant):
    """Each case into a row- and a column-major out, by the rung's small configuration (the
    untiled rungs' blocks are fixed: as they are); and by the rung's own configuration (up to
    1024 threads a block), the first case."""
    code = f"""
from numba_tc.verify import check
from simulated import small
for v, combos in (({variant!r}, ((0, "C"),)), (small({variant!r}), ((0, "C"), (0, "F"), (1, "C"), (1, "F")))):
    for case, out_layout in combos:
        m, n, k, layout = {CASES!r}[case]
        r = check(v, m, n, k, layout=layout, out_layout=out_layout)
        print(r)
        assert r.ok, r
"""
    out = run_in_simulator(code)
    assert out.count(" ok") == 5


@pytest.mark.parametrize("variant", ["vectorized", "warptile"])
def test_whole_tile_loop_in_simulator(variant):
    """A problem with an interior block and whole K tiles, so the unchecked loop runs (one and
    two buffers), beside edge blocks and a partial last tile (the small configuration: 2 x 2
    blocks)."""
    code = f"""
from numba_tc.verify import check
from simulated import SMALL, small
cfg = SMALL[{variant!r}]
m, n, k = cfg.bm + 3, cfg.bn + 5, 2 * cfg.stages * cfg.bk + 3
for (m, n, k, layout) in [(m, n, k, "NN"), (m - 1, n - 2, k - 1, "TT")]:
    r = check(small({variant!r}), m, n, k, layout=layout)
    print(r)
    assert r.ok, r
"""
    assert run_in_simulator(code).count(" ok") == 2


def test_split_tail_in_simulator():
    """Tail tiles split along K and summed by atomic adds: with 3 resident slots the 4 tiles of
    33x33 (32x32, warptile's small configuration) run as 3 whole + 1 in 2 halves; with 16, all
    4 are split."""
    code = """
from dataclasses import replace
import numba_tc
from numba_tc import simt
from numba_tc.verify import check
from simulated import SMALL
cfg = SMALL["warptile"].replace(bk=8)         # 17 K tiles of 130: enough to split
for slots, layout in ((3, "NN"), (16, "TT")):
    print(simt.tiled_plan(cfg, 33, 33, 130, slots))
    v = numba_tc.variant_from(cfg, f"split{slots}")
    v = replace(v, plan=lambda a, b, c, dev, p=v.plan, slots=slots: p(a, b, c, dev, slots=slots))
    r = check(v, 33, 33, 130, layout=layout)
    print(r)
    assert r.ok, r
"""
    out = run_in_simulator(code)
    assert "((5,), (2, 3, 2, 9))" in out and "((8,), (2, 0, 2, 9))" in out
    assert out.count(" ok") == 2


def test_out_overlapping_a_numpy_input_is_refused():
    out = run_in_simulator("""
import numpy as np, numba_tc
sq = np.random.rand(8, 8).astype(np.float32)
for out in (sq, sq.T, sq[:4].T):
    try:
        numba_tc.gemm(sq, sq[:, :8], out=out if out.shape == (8, 8) else np.empty((8, 8), np.float32))
        print("accepted")
    except ValueError as e:
        print("refused:", e)
""")
    assert out.count("refused: out overlaps a or b") == 2 and out.count("accepted") == 1
