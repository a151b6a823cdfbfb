"""A user's mistakes named before anything is built: a user's epilogue function read without
compiling it (``user_epilogue.check``, ``indexing``), bad arguments named before "no GPU", the
simulator's size limit; compiled for sm_90a without a GPU, a failing epilogue is an EpilogueError
within seconds (it hung: a failure was compiled again per caller, per call site, per level) and
its kernel's build fails fast too (``build.failures_remembered``)."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import cuda

import numba_tc
from numba_tc import checks, user_epilogue
from numba_tc.errors import EpilogueError

from conftest import HAS_GPU, SIM

pytestmark = pytest.mark.cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@cuda.jit(device=True)
def _typo(acc, row, col):
    return acc + undefined_name         # noqa: F821


@cuda.jit(device=True)
def _one(acc):
    return acc


@cuda.jit(device=True)
def _loop(acc, row, col):
    return _loop(acc, row, col)


@cuda.jit(device=True)
def _raise(acc, row, col):
    if acc != acc:
        raise ValueError("NaN")
    return acc


@cuda.jit(device=True)
def _store(acc, row, col, x):
    y = x
    y[row, col] = acc
    return acc


@cuda.jit(device=True)
def _local(acc, row, col, x):
    t = cuda.local.array(2, np.float32)
    t[0] = x[row, col]
    t[1] = acc
    return t[0] + t[1]


def _py(x):
    return x


@cuda.jit(device=True)
def _calls_py(acc, row, col):
    return _py(acc)


@pytest.mark.parametrize("fn, nargs, words", [
    (_typo, 0, "NameError: name 'undefined_name' is not defined"),
    (_one, 0, "called with 3 arguments: acc, row, col and 0 epilogue_args"),
    (_typo, 1, "called with 4 arguments"),
    (_loop, 0, "is recursive"),
    (_raise, 0, "may not raise or assert"),
    (_store, 1, "writes into its argument 'x'"),
    (_calls_py, 0, "calls the Python function '_py'"),
])
def test_a_mistake_in_an_epilogue_function_is_named_without_compiling(fn, nargs, words):
    with pytest.raises(EpilogueError) as e:
        user_epilogue.check(fn, nargs)
    msg = str(e.value)
    assert words in msg and fn.py_func.__name__ in msg and "test_bad_input_checks.py:" in msg, msg


def test_a_function_may_write_its_own_local_arrays():
    user_epilogue.check(_local, 1)
    assert user_epilogue.indexing(_local) == {0: ("row", "col")}
    with pytest.raises(TypeError, match="numba.cuda.jit"):
        user_epilogue.check(lambda acc, row, col: acc, 0)


BAD = [  # (keywords, exception, words): each refused before a GPU is looked for
    (dict(bias=np.ones(7, np.float32)), ValueError, "bias has length 7"),
    (dict(activation="tanh"), ValueError, "activation 'tanh'"),
    (dict(alpha="2"), TypeError, "alpha must be a real number"),
    (dict(c=np.ones((5, 5), np.float32), beta=1.0), ValueError, "c has shape (5, 5)"),
    (dict(epilogue=_typo), EpilogueError, "undefined_name"),
    (dict(epilogue=_store, epilogue_args=(np.ones((4, 6), np.float32),)), EpilogueError, "writes into"),
    (dict(epilogue=_local, epilogue_args=(np.ones((3, 6), np.float32),)), ValueError,
     "needs a shape of at least (4, 6)"),
    (dict(epilogue=_local, epilogue_args=([1.0],)), TypeError, "epilogue_args[0] is a list"),
    (dict(epilogue=_local, epilogue_args={"x": 1}), TypeError, "epilogue_args must be a tuple"),
    (dict(out=np.broadcast_to(np.zeros((1, 6), np.float32), (4, 6))), ValueError, "read-only"),
    (dict(out_dtype="float64"), TypeError, "out_dtype float64"),
    (dict(variant="nope"), ValueError, "unknown variant 'nope'"),
]


@pytest.mark.parametrize("kw, exc, words", BAD, ids=[w for _, _, w in BAD])
def test_bad_arguments_are_named_before_no_gpu(kw, exc, words):
    a, b = np.ones((4, 5), np.float32), np.ones((5, 6), np.float32)
    with pytest.raises(exc) as e:
        numba_tc.gemm(a, b, **kw)
    assert words in str(e.value)


def test_the_simulator_refuses_what_it_cannot_run_and_says_what_it_can():
    with pytest.raises(ValueError, match=r"512x512x512 is too large for Numba's CUDA simulator .* e\.g\. 128x128x128"):
        checks.simulator_size(512, 512, 512)
    with pytest.raises(ValueError, match="60000x60000x1"):
        checks.simulator_size(60000, 60000, 1)
    checks.simulator_size(129, 65, 130)                       # (the simulator tests' largest)
    with pytest.raises(ValueError, match="per batch"):
        checks.simulator_size(64, 64, 64, count=16)
    p = subprocess.run([sys.executable, "-m", "numba_tc", "demo", "--size", "100000"], capture_output=True,
                       text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 2 and "argument --size" in p.stderr and "too large" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.skipif(HAS_GPU or SIM, reason="without a GPU")
def test_explain_on_numpy_without_a_gpu_says_so():
    a, b = np.ones((4, 5), np.float32), np.ones((5, 6), np.float32)
    with pytest.raises(numba_tc.NoGPUError, match="no CUDA GPU"):
        numba_tc.explain(a, b)
    with pytest.raises(ValueError, match="bias has length 2"):
        numba_tc.explain(a, b, bias=np.ones(2, np.float32))


def _run(code: str, timeout: float, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=ROOT)


_HOPPER_BUILD = """
    import time
    from numba import cuda
    from numba_tc import build, hopper, user_epilogue
    from numba_tc.epilogue import Epilogue, UserFunction, code_digest
    from numba_tc.errors import EpilogueError

    @cuda.jit(device=True)
    def broken(acc, row, col):
        return acc + undefined_name

    @cuda.jit(device=True)
    def pair(acc, row, col):
        return acc, row

    for fn in (broken, pair):
        user = UserFunction(fn.__name__, code_digest(fn), (), fn)
        kernel = hopper.wgmma_kernel(hopper.KernelSpec.product(hopper.RUNG7, "bfloat16", "bfloat16", False, True,
                                                               tma_c=True, epi=Epilogue(user=user, fast=True)))
        t = time.perf_counter()
        try:                                        # the function alone first, as a GPU call does
            with user_epilogue.before_build(user):
                build.cubin(kernel, "sm_90a")
        except EpilogueError as e:
            print("alone", fn.__name__, round(time.perf_counter() - t, 1), " ".join(str(e).split()))
        t = time.perf_counter()
        try:                                        # the kernel's build alone fails fast too
            build.compile_cubin(kernel, "sm_90a")
        except Exception as e:
            print("kernel", fn.__name__, round(time.perf_counter() - t, 1), type(e).__name__)
"""


@pytest.mark.sass
@pytest.mark.skipif(SIM, reason="compiles for sm_90a")
def test_a_failing_epilogue_in_a_hopper_kernel_fails_in_seconds(tmp_path):
    # Numba retried the failing function per propagation round, call site and caller: this
    # build compiled it thousands of times (past 150 s) before build.failures_remembered.
    p = _run(_HOPPER_BUILD, timeout=240, NUMBA_TC_CACHE_DIR=str(tmp_path))
    assert p.returncode == 0, p.stderr[-3000:]
    lines = p.stdout.split("\n")
    alone = [line for line in lines if line.startswith("alone")]
    kernel = [line for line in lines if line.startswith("kernel")]
    assert len(alone) == 2 and len(kernel) == 2, p.stdout
    assert "NameError: name 'undefined_name'" in alone[0] and "returns Tuple(float32, int64)" in alone[1], p.stdout
    assert all(float(line.split()[2]) < 30 for line in alone + kernel), p.stdout
    assert all(line.endswith("TypingError") for line in kernel), p.stdout


_ALONE = """
    import numpy as np
    from numba import cuda
    from numba_tc import user_epilogue
    from numba_tc.epilogue import UserFunction, code_digest
    from numba_tc.errors import EpilogueError

    @cuda.jit(device=True)
    def as_text(acc, row, col):
        return acc + len(str(row))

    @cuda.jit(device=True)
    def complex_value(acc, row, col):
        return acc * 1j

    @cuda.jit(device=True)
    def fine(acc, row, col, x, s):
        return acc * s + x[row, col]

    for fn, args in ((as_text, ()), (complex_value, ()), (fine, (("array", "float32", 2), ("f32",)))):
        try:
            user_epilogue.compile_alone(UserFunction(fn.__name__, code_digest(fn), args, fn), (9, 0))
            print(fn.__name__, "compiles")
        except EpilogueError as e:
            print(fn.__name__, " ".join(str(e).split())[:300])
"""


@pytest.mark.sass
@pytest.mark.skipif(SIM, reason="compiles for sm_90a")
def test_compiled_alone_a_function_numba_cannot_compile_is_named():
    p = _run(_ALONE, timeout=240)
    assert p.returncode == 0, p.stderr[-3000:]
    out = dict(line.split(" ", 1) for line in p.stdout.strip().split("\n"))
    assert "does not compile for the arguments float32, int64, int64" in out["as_text"], out
    assert "test_bad_input_checks" not in out["as_text"] and "as_text (<string>:" in out["as_text"], out
    assert "returns complex128" in out["complex_value"], out
    assert out["fine"] == "compiles", out


_REPRODUCTIONS = """
    import time, torch, numba_tc
    from numba import cuda

    @cuda.jit(device=True)
    def broken(acc, row, col):
        return acc + undefined_name

    @cuda.jit(device=True)
    def arity(acc):
        return acc

    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    for fn in (broken, arity):
        t = time.perf_counter()
        try:
            numba_tc.gemm(a, a, epilogue=fn)
        except numba_tc.EpilogueError as e:
            print(fn.__name__, round(time.perf_counter() - t, 2))
"""


@pytest.mark.gpu
def test_the_two_reproductions_of_issue_53_raise_in_seconds():
    pytest.importorskip("torch")
    p = _run(_REPRODUCTIONS, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    times = dict(line.split() for line in p.stdout.strip().split("\n"))
    assert set(times) == {"broken", "arity"} and all(float(t) < 30 for t in times.values()), p.stdout
