"""Fused epilogues on the SIMT ladder in Numba's CUDA simulator: alpha, beta * c, bias per column
and per row, each activation, a user's device function reading an array and a scalar (a bfloat16
array too), against float64, on every rung; every layout of the epilogue's operands (c row- or
column-major, contiguous or a view with padded rows, a user's array row- or column-major) into
row- and column-major outs; and the bad-argument errors. The tiled rungs run in their small
configurations (``simulated.SMALL``)."""
import pytest

from conftest import EXPECT, run_in_simulator
pytestmark = pytest.mark.sim

_COMMON = """
import math, ml_dtypes, numpy as np, numba_tc
from numba import cuda
from simulated import small
rng = np.random.default_rng(0)
m, n, k = 21, 38, 19
def r(*s):
    return rng.standard_normal(s).astype(np.float32)
a, b, c, res = r(m, k), r(k, n), r(m, n), r(m, n)
ab = a.astype(np.float64) @ b.astype(np.float64)
erf = np.vectorize(math.erf)
ACT = {None: lambda x: x, "relu": lambda x: np.maximum(x, 0), "gelu": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
       "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
       "silu": lambda x: x / (1 + np.exp(-x))}
def err(x, want):
    x = np.asarray(x)
    assert x.shape == want.shape and not np.isnan(x).any(), (x.shape, want.shape)
    return np.linalg.norm(x - want) / np.linalg.norm(want)
@cuda.jit(device=True)
def resid(acc, row, col, res, s):
    return acc + s * res[row, col]
"""

_ACTIVATIONS = """
v = small("warptile")
for act in ACT:
    for bias in (r(n), r(m)):
        out = numba_tc.gemm(a, b, v, alpha=0.5, beta=2.0, c=c, bias=bias, activation=act)
        bb = bias[None, :] if bias.size == n else bias[:, None]
        e = err(out, ACT[act](0.5 * ab + 2.0 * c + bb))
        assert e < 1e-5, (act, bias.size, e)
        print(act, bias.size, "ok")
"""


def test_each_activation_with_a_bias_on_either_axis_in_simulator():
    out = run_in_simulator(_COMMON + _ACTIVATIONS)
    assert out.count(" ok") == 10, out


_RUNGS = """
for name in VARIANTS:
    v = small(name)
    bias = r(m)
    out = numba_tc.gemm(a, b, v, alpha=0.5, beta=2.0, c=c, bias=bias, activation="gelu")
    e = err(out, ACT["gelu"](0.5 * ab + 2.0 * c + bias[:, None]))
    assert e < 1e-5, (name, e)
    out = numba_tc.gemm(a, b, v, epilogue=resid, epilogue_args=(res, 0.25))
    e = err(out, ab + 0.25 * res)
    assert e < 1e-5, (name, "user", e)
    res16 = res.astype(ml_dtypes.bfloat16)          # (a bf16 model's residual)
    out = numba_tc.gemm(a, b, v, epilogue=resid, epilogue_args=(res16, 0.25))
    e = err(out, ab + 0.25 * res16.astype(np.float64))
    assert e < 1e-5, (name, "user bf16", e)
    print(name, "ok")
"""


@pytest.mark.parametrize("variants", [["naive", "coalesced", "smem"], ["blocktile1d", "blocktile2d", "vectorized",
                                                                        "warptile"]], ids="-".join)
def test_every_rung_applies_the_epilogue_in_simulator(variants):
    out = run_in_simulator(_COMMON + f"VARIANTS = {variants!r}\n" + _RUNGS)
    assert out.count(" ok") == len(variants), out


_LAYOUTS = """
# every operand a device array (views of padded ones are Numba's device-array views)
def dev(x, layout):
    # x as a device array: "C" row-major, "F" column-major, "C+" / "F+" a view of a wider
    # (taller) array (rows or columns 3 elements further apart than the matrix is wide)
    if layout == "C":
        return cuda.to_device(np.ascontiguousarray(x))
    if layout == "F":
        return cuda.to_device(np.asfortranarray(x))
    rows, cols = x.shape
    if layout == "C+":
        big = np.full((rows, cols + 3), 99.0, np.float32); big[:, :cols] = x
        return cuda.to_device(big)[:, :cols]
    big = np.full((cols, rows + 3), 99.0, np.float32); big[:, :rows] = x.T
    return cuda.to_device(big)[:, :rows].T
def poisoned(layout):
    return dev(np.full((m, n), np.nan, np.float32), layout)
da, db = dev(a, "C"), dev(b, "F")
for name in VARIANTS:
    v = small(name)
    for i, (cl, ol) in enumerate([("C", "F"), ("F", "C"), ("F", "F"), ("C+", "C"), ("F+", "F"), ("C+", "F+")]):
        bias = r(n) if i % 2 else r(m)
        out = poisoned(ol)
        numba_tc.gemm(da, db, v, out=out, alpha=0.5, beta=2.0, c=dev(c, cl), bias=cuda.to_device(bias), activation="relu")
        bb = bias[None, :] if bias.size == n else bias[:, None]
        e = err(out.copy_to_host(), ACT["relu"](0.5 * ab + 2.0 * c + bb))
        assert e < 1e-5, (name, "c", cl, "out", ol, e)
        print(name, "c", cl, "out", ol, "ok")
    # (the user's array contiguous: the simulator passes it to the kernel as a NumPy array, which
    # it must copy whole; a view's strides are the GPU's business, test_gpu_epilogue)
    for rl, ol in [("C", "F"), ("F", "C"), ("F", "F+"), ("C", "C+")]:
        out = poisoned(ol)
        numba_tc.gemm(da, db, v, out=out, epilogue=resid, epilogue_args=(dev(res, rl), 0.25))
        e = err(out.copy_to_host(), ab + 0.25 * res)
        assert e < 1e-5, (name, "user array", rl, "out", ol, e)
        print(name, "user array", rl, "out", ol, "ok")
"""


@pytest.mark.parametrize("variants", [["blocktile2d"], ["vectorized", "warptile"]], ids="-".join)
def test_epilogue_operands_in_every_layout_in_simulator(variants):
    """c row- or column-major, contiguous or a view with padded rows (columns), into row- and
    column-major (and padded) outs, a bias per row or column; a user's array read at [row, col]
    likewise: a column-major out is computed as C^T = B^T A^T, so c, the bias and the user's
    (row, col) are read across (``Epilogue.flipped``), and c's leading dimension is its own."""
    out = run_in_simulator(_COMMON + f"VARIANTS = {variants!r}\n" + _LAYOUTS)
    assert out.count(" ok") == 10 * len(variants), out


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
# the simulator runs the float32 SIMT ladder only
from numba_tc import UnsupportedDeviceError
expect(UnsupportedDeviceError, "runs the float32 SIMT ladder only", a.astype(np.float16), b.astype(np.float16))
expect(UnsupportedDeviceError, "runs linked PTX", a, b, "mma_tuned")
# an empty product with an epilogue; device arrays whose out overlaps an input
expect(ValueError, "K == 0 with an epilogue", np.ones((4, 0), np.float32), np.ones((0, 5), np.float32), "smem",
       bias=np.zeros(5, np.float32))
big = cuda.to_device(np.ones((8, 8), np.float32))
expect(ValueError, "out overlaps a or b", big[:4, :3], big[:3, 3:8], "smem", out=big[2:6, 1:6])
expect(ValueError, "out overlaps a or b", big[:4, :3], big[:3, 3:8], "smem", out=big[3:7, :5])
"""
    assert run_in_simulator(EXPECT + code).count("raised") == 15
