"""Fused epilogues on a GPU, every ladder's rung a user meets: alpha, beta * c (c may be out),
bias per column and per row, each activation, a user's device function reading a device array,
for all four operand layouts, row- and column-major outputs, ragged sizes; outputs poisoned with
NaN first, against a float64 reference. Plus a CUDA graph replayed with new epilogue operands,
and the disk cache keyed by the user's code in fresh processes."""
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

import numba_tc

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason="needs torch")]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# variant, input dtype, output dtype, relative Frobenius tolerance (fp32 outputs: the product of
# rounded inputs in fp32 is accurate to ~1e-6; tf32 ~3e-4)
CASES = [("hopper", "bfloat16", "float32", 1e-5), ("hopper", "float16", "float16", 2e-3),
         ("mma_tuned", "bfloat16", "float32", 1e-5), ("mma_tuned", "float32", "float32", 2e-3),
         ("warptile", "float32", "float32", 1e-5), ("naive", "float32", "float32", 1e-5)]
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]
ACT = {None: lambda x: x, "relu": torch.relu if torch else None,
       "gelu": (lambda x: torch.nn.functional.gelu(x)) if torch else None,
       "gelu_tanh": (lambda x: torch.nn.functional.gelu(x, approximate="tanh")) if torch else None,
       "silu": (lambda x: torch.nn.functional.silu(x)) if torch else None}


@cuda.jit(device=True)
def scaled_residual(acc, row, col, res, scale):
    return acc + scale * res[row, col]


@cuda.jit(device=True)
def row_scale_clamp(acc, row, col, scale, lo):
    x = acc * scale[row]
    if x < lo:
        x = lo
    return x


def _sm90():
    return torch.cuda.get_device_capability() == (9, 0)


def _operand(rows, cols, trans, dtype, g):
    if trans:
        return torch.randn(cols, rows, device="cuda", dtype=dtype, generator=g).t()
    return torch.randn(rows, cols, device="cuda", dtype=dtype, generator=g)


def _poisoned(m, n, dtype, col_major):
    if col_major:
        return torch.full((n, m), float("nan"), device="cuda", dtype=dtype).t()
    return torch.full((m, n), float("nan"), device="cuda", dtype=dtype)


def _check(out, ref, tol, what):
    assert not torch.isnan(out).any(), f"{what}: NaN left in the output (an element not written)"
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err < tol, f"{what}: relative error {err:.2e} >= {tol}"


@pytest.mark.parametrize("variant,dtype,out_dtype,tol", CASES, ids=lambda x: str(x))
@pytest.mark.parametrize("ta,tb", LAYOUTS, ids=["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("col_major", [False, True], ids=["C", "F"])
def test_builtin_epilogues(variant, dtype, out_dtype, tol, ta, tb, col_major):
    if variant == "hopper" and not _sm90():
        pytest.skip("wgmma needs an sm_90 GPU")
    # ragged (no tile divides them), rows 16-byte aligned in every layout (TMA's rule for hopper)
    m, n, k = (77, 133, 61) if variant == "naive" else (296, 264, 200)
    g = torch.Generator(device="cuda").manual_seed(hash((variant, ta, tb, col_major)) % 2 ** 31)
    dt, ot = getattr(torch, dtype), getattr(torch, out_dtype)
    a, b = _operand(m, k, ta, dt, g), _operand(k, n, tb, dt, g)
    ab = a.double() @ b.double()
    kw = {"variant": variant}
    if dtype == "float32" and variant not in ("warptile", "naive"):
        kw["allow_tf32"] = True
    # (one kernel per case: the activations and bias axes take turns over the layouts)
    i = 2 * (2 * ta + tb) + col_major
    act, axis = list(ACT)[i % len(ACT)], ("col", "row")[i % 2]
    bias = torch.randn(n if axis == "col" else m, device="cuda", dtype=torch.float32, generator=g)
    c = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g)
    out = _poisoned(m, n, ot, col_major)
    numba_tc.gemm(a, b, out=out, alpha=0.75, beta=-1.5, c=c, bias=bias, activation=act, **kw)
    bb = bias[None, :] if axis == "col" else bias[:, None]
    ref = ACT[act](0.75 * ab - 1.5 * c.double() + bb.double())
    _check(out, ref, tol, f"{variant} act={act} bias per {axis}")


@pytest.mark.parametrize("variant,dtype,out_dtype,tol", CASES, ids=lambda x: str(x))
@pytest.mark.parametrize("col_major", [False, True], ids=["C", "F"])
def test_user_epilogue(variant, dtype, out_dtype, tol, col_major):
    """The user's function sees (row, col) of the user's C, also when the kernel computes C^T."""
    if variant == "hopper" and not _sm90():
        pytest.skip("wgmma needs an sm_90 GPU")
    m, n, k = 190, 136, 136
    g = torch.Generator(device="cuda").manual_seed(7)
    dt, ot = getattr(torch, dtype), getattr(torch, out_dtype)
    a, b = _operand(m, k, False, dt, g), _operand(k, n, True, dt, g)
    kw = {"variant": variant, "allow_tf32": dtype == "float32" and variant == "mma_tuned"}
    res = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g)
    out = _poisoned(m, n, ot, col_major)
    numba_tc.gemm(a, b, out=out, epilogue=scaled_residual, epilogue_args=(res, 0.25), **kw)
    _check(out, a.double() @ b.double() + 0.25 * res.double(), tol, f"{variant} residual")
    scale = torch.rand(m, device="cuda", dtype=torch.float32, generator=g) + 0.5
    out = _poisoned(m, n, ot, col_major)
    numba_tc.gemm(a, b, out=out, epilogue=row_scale_clamp, epilogue_args=(scale, -0.5), **kw)
    _check(out, torch.clamp((a.double() @ b.double()) * scale.double()[:, None], min=-0.5), tol,
           f"{variant} row scale + clamp")


def test_c_is_out_accumulates_in_place():
    dt = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(3)
    a, b = torch.randn(256, 320, device="cuda", dtype=dt, generator=g), torch.randn(320, 192, device="cuda", dtype=dt,
                                                                                   generator=g)
    acc = torch.randn(256, 192, device="cuda", dtype=torch.float32, generator=g)
    start = acc.double().clone()
    for _ in range(3):
        numba_tc.gemm(a, b, out=acc, c=acc, beta=1.0)
    _check(acc, start + 3 * (a.double() @ b.double()), 1e-5, "c=out accumulated three times")


@pytest.mark.parametrize("variant", ["hopper", "warptile"])
def test_a_repeated_call_takes_its_own_arrays_and_numbers(variant):
    """Calls whose epilogue arguments have the same facts share one cached, checked call: each
    still reads its own c, bias, alpha, beta, user arrays and numbers (the arrays of earlier
    calls, alive at other addresses, are poisoned), and the cache keeps none of them alive."""
    import gc
    import weakref
    if variant == "hopper" and not _sm90():
        pytest.skip("wgmma needs an sm_90 GPU")
    dt = torch.bfloat16 if variant == "hopper" else torch.float32
    g = torch.Generator(device="cuda").manual_seed(11)
    m, n, k = 200, 136, 72
    a, b = _operand(m, k, False, dt, g), _operand(k, n, True, dt, g)
    ab = a.double() @ b.double()
    rounds = [(1.5, 0.5, 0.25), (-0.5, 2.0, 3.0), (1.5, 0.5, -1.0)]
    arrays = [(torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g),
               torch.randn(n, device="cuda", dtype=dt, generator=g),
               torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g)) for _ in rounds]
    assert len({x.data_ptr() for xs in arrays for x in xs}) == 9
    for i, ((alpha, beta, scale), (c, bias, res)) in enumerate(zip(rounds, arrays)):
        out = _poisoned(m, n, torch.float32, False)
        numba_tc.gemm(a, b, variant=variant, out=out, c=c, alpha=alpha, beta=beta, bias=bias, activation="relu",
                      epilogue=scaled_residual, epilogue_args=(res, scale))
        ref = torch.relu(alpha * ab + beta * c.double() + bias.double()) + scale * res.double()
        _check(out, ref, 1e-5, f"call {i}")
        for x in (c, bias, res):                       # a later call reading these reads NaN
            x.fill_(float("nan"))
    gone = [weakref.ref(x) for xs in arrays for x in xs]
    del arrays, c, bias, res, x
    torch.cuda.synchronize()
    gc.collect()
    assert all(r() is None for r in gone), "the call cache keeps an epilogue array alive"
    with pytest.raises(ValueError, match="bias has length 5"):     # other facts: checked again
        numba_tc.gemm(a, b, variant=variant, bias=torch.zeros(5, device="cuda", dtype=dt))
    with pytest.raises(TypeError, match="alpha must be a real number"):
        numba_tc.gemm(a, b, variant=variant, alpha=np.float32(1.5))


def test_graph_replay_with_new_epilogue_values():
    """A captured call reads its bias and residual through the addresses captured: writing new
    values into those buffers changes the replay's result."""
    dt = torch.bfloat16
    g = torch.Generator(device="cuda").manual_seed(5)
    a, b = torch.randn(128, 256, device="cuda", dtype=dt, generator=g), torch.randn(256, 192, device="cuda", dtype=dt,
                                                                                   generator=g)
    bias = torch.randn(192, device="cuda", dtype=dt, generator=g)
    res = torch.randn(128, 192, device="cuda", dtype=torch.float32, generator=g)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        numba_tc.gemm(a, b, bias=bias, epilogue=scaled_residual, epilogue_args=(res, 2.0), out_dtype="float32")
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = numba_tc.gemm(a, b, bias=bias, epilogue=scaled_residual, epilogue_args=(res, 2.0), out_dtype="float32")
    bias.copy_(torch.randn(192, device="cuda", dtype=dt, generator=g))
    res.copy_(torch.randn(128, 192, device="cuda", dtype=torch.float32, generator=g))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    _check(out, a.double() @ b.double() + bias.double() + 2.0 * res.double(), 1e-5, "graph replay")


def test_bad_epilogue_arguments_name_the_argument():
    a = torch.randn(64, 32, device="cuda")
    b = torch.randn(32, 48, device="cuda")
    with pytest.raises(ValueError, match="bias has length 5"):
        numba_tc.gemm(a, b, bias=torch.zeros(5, device="cuda"))
    with pytest.raises(TypeError, match="bias has dtype float16"):
        numba_tc.gemm(a, b, bias=torch.zeros(48, device="cuda", dtype=torch.float16))
    with pytest.raises(TypeError, match="bias is not on a CUDA device"):
        numba_tc.gemm(a, b, bias=torch.zeros(48))
    with pytest.raises(ValueError, match="c has shape"):
        numba_tc.gemm(a, b, c=torch.zeros(64, 47, device="cuda"), beta=1.0)
    with pytest.raises(ValueError, match="activation 'tanh'"):
        numba_tc.gemm(a, b, activation="tanh")
    with pytest.raises(TypeError, match="numba.cuda.jit\\(device=True\\)"):
        numba_tc.gemm(a, b, epilogue=lambda acc, r, c: acc)

    @cuda.jit(device=True)
    def broken(acc, row, col):
        return acc + not_defined_anywhere        # noqa: F821

    with pytest.raises(numba_tc.EpilogueError, match="not_defined_anywhere"):
        numba_tc.gemm(a, b, variant="warptile", epilogue=broken)


_CHILD = """
import sys, torch, numba_tc
from numba import cuda
@cuda.jit(device=True)
def f(acc, row, col):
    return acc * SCALE
a = torch.ones(64, 64, device="cuda"); b = torch.ones(64, 64, device="cuda")
print(float(numba_tc.gemm(a, b, variant="warptile", epilogue=f)[0, 0]))
"""


def test_user_epilogue_cached_by_code_across_processes(tmp_path):
    """A fresh process with the same function loads its cubin from the disk cache (nothing
    compiled); an edited function compiles anew and computes the edit."""
    env = dict(os.environ, NUMBA_TC_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))

    def run(scale):
        code = f"SCALE = {scale}\n" + _CHILD
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        return float(p.stdout.split()[-1]), sum(len(f) for _, _, f in os.walk(tmp_path))
    v1, n1 = run(2.0)
    v2, n2 = run(2.0)
    v3, n3 = run(3.0)
    assert (v1, v2, v3) == (128.0, 128.0, 192.0)
    assert n1 == n2 < n3, (n1, n2, n3)
