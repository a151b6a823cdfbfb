"""Batched products (``numba_tc.batch``) in Numba's CUDA simulator, on NumPy arrays and on the
simulator's device arrays: both operands batched, one broadcast (2-D, or a batch of one), each
operand's matrices row- or column-major, with padded rows, stacked or not (a strided batch, a 3-D
operand whose matrices are not stacked rows beside a shared 2-D one), out=, an epilogue with c and
a bias, against float64; and the errors for batches that do not broadcast and bad epilogue
arguments. The products run on warptile's small configuration (``simulated.SMALL``): what is
checked here is the batching, the same for every variant."""
import pytest

from conftest import EXPECT, run_in_simulator
pytestmark = pytest.mark.sim

_COMMON = """
import numpy as np, numba_tc
from numba import cuda
from simulated import small
V = small("warptile")
rng = np.random.default_rng(1)
def err(x, r):
    x = np.asarray(x)
    assert x.shape == r.shape and not np.isnan(x).any(), (x.shape, r.shape)
    return np.linalg.norm(x - r) / np.linalg.norm(r)
def r(*s):
    return rng.standard_normal(s).astype(np.float32)
m, n, k, nb = 6, 10, 5, 3
"""

# every kind of operand: a contiguous array and the view of it that is the operand (the same view
# of its device copy: the simulator's device arrays keep NumPy's strides)
_KINDS = """
def kinds(rows, cols):
    return {
        "stacked": ((nb, rows, cols), lambda x: x),                                 # (batch, rows, cols)
        "column-major": ((nb, cols, rows), lambda x: x.transpose((0, 2, 1))),       # each matrix
        "padded rows": ((nb, rows, cols + 3), lambda x: x[:, :, :cols]),            # rows cols + 3 apart
        "strided batch": ((2 * nb, rows, cols), lambda x: x[::2]),                  # matrices 2 apart
        "batch of one": ((1, rows, cols), lambda x: x),                             # broadcast
        "2-D": ((rows, cols), lambda x: x),
        "2-D column-major": ((cols, rows), lambda x: x.T),
    }
A, B = kinds(m, k), kinds(k, n)
pairs = [(x, "2-D") for x in A if not x.startswith("2-D")] + [(x, "stacked") for x in A]
pairs += [("stacked", y) for y in B if y != "stacked"] + [("2-D", y) for y in B if not y.startswith("2-D")]
cases = [("numpy", p) for p in pairs] + [("numba", p) for p in pairs[::3]]
for kind, (an, bn) in cases:
    (sa, va), (sb, vb) = A[an], B[bn]
    a0, b0 = r(*sa), r(*sb)
    a, b = va(a0), vb(b0)
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    if kind == "numpy":
        got = numba_tc.gemm(a, b, V)
    else:
        x, y = va(cuda.to_device(a0)), vb(cuda.to_device(b0))
        assert x.strides == a.strides and y.strides == b.strides
        got = numba_tc.gemm(x, y, V).copy_to_host()
    e = err(got, ref)
    assert e < 1e-5, (kind, an, bn, e)
    print(kind, an, "x", bn, "ok")
print(len(cases), "cases")
"""


def test_batched_operands_of_every_layout_in_simulator():
    out = run_in_simulator(_COMMON + _KINDS)
    assert out.count(" ok") == 31 and "31 cases" in out, out


_REST = """
a, b = r(nb, m, k), r(nb, k, n)
ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
out = np.full((nb, m, n), np.nan, np.float32)
assert numba_tc.gemm(a, b, V, out=out) is out and err(out, ref) < 1e-5
c, bias = r(nb, m, n), r(n)
for bb in (b, b[0], b[:1]):      # one product per batch; one stacked product; a broadcast batch of one
    want = np.maximum(0.5 * np.matmul(a.astype(np.float64), bb) + 2.0 * c + bias, 0)
    got = numba_tc.gemm(a, bb, V, c=c, alpha=0.5, beta=2.0, bias=bias, activation="relu")
    assert err(got, want) < 1e-5, bb.shape
print("out and epilogue ok")
expect(ValueError, "do not broadcast", r(3, m, k), r(2, k, n), "smem")
expect(ValueError, "inner dimensions", r(3, m, k), r(3, k + 1, n), "smem")
expect(ValueError, "one per column", a, b, "smem", bias=r(m))
expect(ValueError, "c has shape", a, b, "smem", c=r(m, n), beta=1.0)
expect(ValueError, "out has shape", a, b, "smem", out=np.zeros((nb, m, n + 1), np.float32))
expect(ValueError, "2-D or 3-D", r(2, 2, m, k), b, "smem")
@cuda.jit(device=True)
def f(acc, row, col):
    return acc
expect(ValueError, "needs the batched kernel", a, b, "smem", epilogue=f)
"""


def test_batched_out_epilogue_and_errors_in_simulator():
    out = run_in_simulator(EXPECT + _COMMON + _REST)
    assert out.count(" ok") == 1 and out.count("raised") == 7, out
