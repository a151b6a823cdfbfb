"""Fused epilogues on the SIMT ladder in Numba's CUDA simulator (a fresh process): alpha, beta *
c, bias per column and per row, each activation, a user's device function reading an array and
a scalar (a bfloat16 array too), against float64; and the bad-argument errors."""
import pytest

from conftest import EXPECT, run_in_simulator
pytestmark = pytest.mark.sim

_CODE = """
import math, ml_dtypes, numpy as np, numba_tc
from numba import cuda
rng = np.random.default_rng(0)
m, n, k = 21, 38, 19
a = rng.standard_normal((m, k)).astype(np.float32); b = rng.standard_normal((k, n)).astype(np.float32)
c = rng.standard_normal((m, n)).astype(np.float32)
ab = a.astype(np.float64) @ b.astype(np.float64)
erf = np.vectorize(math.erf)
ACT = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0), "gelu": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
       "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
       "silu": lambda x: x / (1 + np.exp(-x))}
def err(x, r):
    assert not np.isnan(x).any()
    return np.linalg.norm(x - r) / np.linalg.norm(r)
@cuda.jit(device=True)
def resid(acc, row, col, res, s):
    return acc + s * res[row, col]
res = rng.standard_normal((m, n)).astype(np.float32)
for v in VARIANTS:
    for act in ACT:
        for bias in (rng.standard_normal(n).astype(np.float32), rng.standard_normal(m).astype(np.float32)):
            out = numba_tc.gemm(a, b, v, alpha=0.5, beta=2.0, c=c, bias=bias, activation=act)
            bb = bias[None, :] if bias.size == n else bias[:, None]
            e = err(out, ACT[act](0.5 * ab + 2.0 * c + bb))
            assert e < 1e-5, (v, act, e)
    out = numba_tc.gemm(a, b, v, epilogue=resid, epilogue_args=(res, 0.25))
    e = err(out, ab + 0.25 * res)
    assert e < 1e-5, (v, "user", e)
    res16 = res.astype(ml_dtypes.bfloat16)          # (a bf16 model's residual)
    out = numba_tc.gemm(a, b, v, epilogue=resid, epilogue_args=(res16, 0.25))
    e = err(out, ab + 0.25 * res16.astype(np.float64))
    assert e < 1e-5, (v, "user bf16", e)
    print(v, "ok")
"""


@pytest.mark.parametrize("variants", [["naive", "smem"], ["vectorized", "warptile"]])
def test_epilogues_in_simulator(variants):
    out = run_in_simulator(f"VARIANTS = {variants!r}\n" + _CODE)
    assert out.count(" ok") == len(variants)


def test_bad_arguments_in_simulator():
    code = """
import numpy as np, numba_tc
from numba import cuda
a = np.ones((4, 3), np.float32); b = np.ones((3, 5), np.float32)
expect(ValueError, "bias has length 6", a, b, "smem", bias=np.zeros(6, np.float32))
expect(TypeError, "bias has dtype float64", a, b, "smem", bias=np.zeros(5))
expect(ValueError, "must be 1-D", a, b, "smem", bias=np.zeros((5, 1), np.float32))
expect(ValueError, "c has shape (4, 4)", a, b, "smem", c=np.zeros((4, 4), np.float32), beta=1.0)
expect(ValueError, "no c was given", a, b, "smem", beta=1.0)
expect(ValueError, "activation 'tanh'", a, b, "smem", activation="tanh")
expect(TypeError, "numba.cuda.jit(device=True)", a, b, "smem", epilogue=lambda acc, r, c: acc)
expect(ValueError, "without an epilogue", a, b, "smem", epilogue_args=(1.0,))
expect(TypeError, "alpha must be a real number", a, b, "smem", alpha=np.ones(2))
expect(TypeError, "epilogue_args[0] is a str", a, b, "smem", epilogue=cuda.jit(device=True)(lambda acc, r, c, x: acc),
       epilogue_args=("no",))
"""
    assert run_in_simulator(EXPECT + code).count("raised") == 10
