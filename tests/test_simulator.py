"""Every SIMT rung, run by Numba's CUDA simulator on tiny ragged shapes (each in a fresh process,
since the simulator is chosen at import)."""
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
    code = f"""
from numba_tc.verify import check
for (m, n, k, layout) in {CASES!r}:
    for out_layout in ("C", "F"):
        r = check({variant!r}, m, n, k, layout=layout, out_layout=out_layout)
        print(r)
        assert r.ok, r
"""
    out = run_in_simulator(code)
    assert out.count(" ok") == 2 * len(CASES)


@pytest.mark.parametrize("variant", ["vectorized", "warptile"])
def test_whole_tile_loop_in_simulator(variant):
    """A problem with an interior block and whole K tiles, so the unchecked loop runs (one and
    two buffers), beside edge blocks and a partial last tile."""
    code = f"""
from numba_tc.verify import check
for (m, n, k, layout) in [(130, 133, 50, "NN"), (129, 131, 49, "TT")]:
    r = check({variant!r}, m, n, k, layout=layout)
    print(r)
    assert r.ok, r
"""
    assert run_in_simulator(code).count(" ok") == 2


def test_split_tail_in_simulator():
    """Tail tiles split along K and summed by atomic adds: with 3 resident slots the 4 tiles of
    129x65 (128x64) run as 3 whole + 1 in 2 halves; with 16, all 4 are split."""
    code = """
from dataclasses import replace
import numba_tc
from numba_tc import simt
from numba_tc.verify import check
cfg = simt.RUNG7.replace(bk=8)         # 17 K tiles of 130: enough to split
for slots, layout in ((3, "NN"), (16, "TT")):
    print(simt.tiled_plan(cfg, 129, 65, 130, slots))
    v = numba_tc.variant_from(cfg, f"split{slots}")
    v = replace(v, plan=lambda a, b, c, dev, p=v.plan, slots=slots: p(a, b, c, dev, slots=slots))
    r = check(v, 129, 65, 130, layout=layout)
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
