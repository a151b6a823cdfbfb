"""Batched products (``numba_tc.batch``) in Numba's CUDA simulator (a fresh process), on NumPy
arrays and on the simulator's device arrays: both operands batched, one broadcast (2-D, or a
batch of one), strided and transposed views, out=, an epilogue with c and a bias, against
float64; and the errors for batches that do not broadcast and bad epilogue arguments."""
import pytest

from conftest import EXPECT, run_in_simulator
pytestmark = pytest.mark.sim

_CODE = """
import numpy as np, numba_tc
from numba import cuda
rng = np.random.default_rng(1)
def err(x, r):
    x = np.asarray(x)
    assert x.shape == r.shape and not np.isnan(x).any(), (x.shape, r.shape)
    return np.linalg.norm(x - r) / np.linalg.norm(r)
def r(*s):
    return rng.standard_normal(s).astype(np.float32)
m, n, k, nb = 13, 22, 9, 3
cases = {
    "both": (r(nb, m, k), r(nb, k, n)),
    "b 2-D (one product)": (r(nb, m, k), r(k, n)),
    "a 2-D": (r(m, k), r(nb, k, n)),
    "b one of a batch": (r(nb, m, k), r(1, k, n)),
    "transposed views": (r(nb, k, m).transpose(0, 2, 1), r(nb, n, k).transpose(0, 2, 1)),
    "strided batch": (r(2 * nb, m, k)[::2], r(nb, k, n + 5)[:, :, :n]),
}
for kind in ("numpy", "numba"):
    for name, (a, b) in cases.items():
        ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
        x, y = (a, b) if kind == "numpy" else (cuda.to_device(np.ascontiguousarray(a)), cuda.to_device(np.ascontiguousarray(b)))
        out = numba_tc.gemm(x, y, "smem")
        got = out if kind == "numpy" else out.copy_to_host()
        e = err(got, ref)
        assert e < 1e-5, (kind, name, e)
        print(kind, name, "ok")
a, b = r(nb, m, k), r(nb, k, n)
ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
out = np.full((nb, m, n), np.nan, np.float32)
assert numba_tc.gemm(a, b, "warptile", out=out) is out and err(out, ref) < 1e-5
c, bias = r(nb, m, n), r(n)
for bb in (b, b[0]):
    want = np.maximum(0.5 * np.matmul(a.astype(np.float64), bb) + 2.0 * c + bias, 0)
    got = numba_tc.gemm(a, bb, "warptile", c=c, alpha=0.5, beta=2.0, bias=bias, activation="relu")
    assert err(got, want) < 1e-5
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


def test_batched_in_simulator():
    out = run_in_simulator(EXPECT + _CODE)
    assert out.count(" ok") == 13 and out.count("raised") == 7, out
