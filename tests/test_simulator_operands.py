"""Operands the NumPy path never produces, in Numba's CUDA simulator: rows (columns) further
apart than the matrix is wide (a view of a larger array) for A, B and C, in both memory orders,
with random values in the padding; and a tail-split tile under an epilogue (the epilogue must
apply once, to whole sums). Each checked element by element (``verify.elementwise``). The tiled
rungs run in their small configurations (``simulated.SMALL``: several blocks of one warp)."""
import pytest

from numba_tc import simt

from conftest import run_in_simulator

pytestmark = pytest.mark.sim

PADDED = """
import numpy as np, numba_tc
from numba import cuda
from numba_tc import verify
from simulated import small
rng = np.random.default_rng(7)

def padded(rows, cols, trans, pad, poison=False):
    # a rows x cols view of a larger random array: row-major (or column-major) with ld = width + pad;
    # poison: the view NaN, the padding 7
    big = rng.standard_normal((cols, rows + pad) if trans else (rows, cols + pad), dtype=np.float32)
    if poison:
        big[...] = 7
        big[:, :(rows if trans else cols)] = np.nan
    d = cuda.to_device(big)
    return (big[:, :rows].T, d[:, :rows].T) if trans else (big[:, :cols], d[:, :cols])

for variant in VARIANTS:
    for (m, n, k), layout in (((19, 23, 37), "NN"), ((21, 20, 36), "TT"), ((9, 17, 33), "TN")):
        a, da = padded(m, k, layout[0] == "T", 3)
        b, db = padded(k, n, layout[1] == "T", 5)
        for ol in "CF":
            host, dout = padded(m, n, ol == "F", 2, poison=True)
            numba_tc.gemm(da, db, small(variant), out=dout)
            c = dout.copy_to_host()
            r = verify.elementwise(c, a, b)
            print(variant, layout, ol, "ok" if r.ok else "FAIL", r)
"""


@pytest.mark.parametrize("variants", [["naive", "coalesced", "smem"], ["blocktile1d", "blocktile2d"],
                                      ["vectorized", "warptile"]], ids="-".join)
def test_padded_leading_dimensions_in_simulator(variants):
    out = run_in_simulator(f"VARIANTS = {variants!r}\n" + PADDED)
    assert out.count(" ok ") == 6 * len(variants) and "FAIL" not in out, out


def test_padding_of_c_is_left_alone_in_simulator():
    """Writing C through a view must not touch the elements between its rows."""
    out = run_in_simulator("""
import numpy as np, numba_tc
from numba import cuda
big = np.full((19, 30), 7.0, np.float32)
d = cuda.to_device(big)
from simulated import small
a = cuda.to_device(np.ones((19, 5), np.float32)); b = cuda.to_device(np.ones((5, 23), np.float32))
for v in ("naive", "blocktile2d", "warptile"):
    numba_tc.gemm(a, b, small(v), out=d[:, :23])
    h = d.copy_to_host()
    print(v, bool(np.all(h[:, :23] == 5)), bool(np.all(h[:, 23:] == 7)))
""")
    assert out.count("True True") == 3, out


def test_tail_split_with_an_epilogue_applies_it_once_in_simulator():
    """With few resident slots the warptile rung splits its tail tiles along K and sums the parts
    atomically; with an epilogue (here a bias) it must not split (or it would add the bias once
    per part): forced slots (its small configuration, 2 x 2 tiles), the result checked element
    by element."""
    out = run_in_simulator("""
from dataclasses import replace
import numpy as np, numba_tc
from numba_tc import simt, verify
from simulated import SMALL
cfg = SMALL["warptile"].replace(bk=8)
rng = np.random.default_rng(3)
m, n, k = 33, 33, 130
assert simt.tiled_plan(cfg, m, n, k, 3)[1][2] > 1          # the plain problem does split
v = numba_tc.variant_from(cfg, "split3")
v = replace(v, plan=lambda a, b, c, dev, p=v.plan, **kw: p(a, b, c, dev, slots=3, **kw))
a = rng.standard_normal((m, k), dtype=np.float32); b = rng.standard_normal((k, n), dtype=np.float32)
bias = rng.standard_normal(n).astype(np.float32)
out = numba_tc.gemm(a, b, v, bias=bias)
ref = a.astype(np.float64) @ b.astype(np.float64) + bias
r = verify.elementwise(out, a, b, ref=ref)
print("bias", "ok" if r.ok else "FAIL", r)
out = numba_tc.gemm(a, b, v, out=np.full((m, n), np.nan, np.float32))
print("plain", "ok" if verify.elementwise(out, a, b).ok else "FAIL")
""")
    assert "bias ok" in out and "plain ok" in out, out


def test_epilogue_into_a_column_major_out_in_simulator():
    """A column-major out is computed as C^T = B^T A^T: the epilogue's bias changes axis with it
    (``Epilogue.flipped``); bias per column and per row, into poisoned row- and column-major outs."""
    out = run_in_simulator("""
import numpy as np, numba_tc
from numba_tc import verify
from simulated import small
rng = np.random.default_rng(11)
m, n, k = 21, 19, 23
a = rng.standard_normal((m, k), dtype=np.float32); b = rng.standard_normal((k, n), dtype=np.float32)
for length in (n, m):
    bias = rng.standard_normal(length).astype(np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64) + (bias[None, :] if length == n else bias[:, None])
    for order in "CF":
        out = np.full((m, n), np.nan, np.float32, order=order)
        numba_tc.gemm(a, b, small("blocktile2d"), bias=bias, out=out)
        r = verify.elementwise(out, a, b, ref=ref)
        print(length, order, "ok" if r.ok else "FAIL", r)
""")
    assert out.count(" ok ") == 4 and "FAIL" not in out, out
