"""What a new user meets first (issue 21, "first contact"): help(numba_tc.gemm) lists what it raises
and shows an example, describe() gives the configuration, a compiled cubin prints as a summary,
and a process forked after CUDA was used is told so (not that there is no GPU)."""
import os
import subprocess
import sys
import textwrap

import pytest

import numba_tc

pytestmark = pytest.mark.cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(code: str, timeout=300):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout)


def test_gemm_help_lists_the_exceptions_and_an_example():
    doc = numba_tc.gemm.__doc__
    assert "Raises" in doc and "Example" in doc and ">>> c = numba_tc.gemm(a, b)" in doc
    for name in ("TypeError", "ValueError", "NoGPUError", "UnsupportedDeviceError", "EpilogueError",
                 "CaptureError", "CudaError"):
        assert name in doc
        assert name in ("TypeError", "ValueError") or hasattr(numba_tc, name), name


def test_describe_gives_the_configuration():
    v = numba_tc.get_variant("mma_tuned")
    first, second = v.describe().splitlines()
    assert first.startswith("mma_tuned") and "sm_80+" in first
    assert second.strip() == f"config: {v.config!r}"
    assert len(numba_tc.get_variant("naive").describe().splitlines()) == 1     # no configuration
    assert "sm_75+" in numba_tc.get_variant("warptile").describe()             # CUDA 13's floor
    assert "sm_90a" in numba_tc.get_variant("hopper").describe()


def test_ceiling_uses_the_public_default_device():
    from numba_tc import api, ceiling
    import inspect
    assert "default_device" in api.__all__ and "_default_device" not in inspect.getsource(ceiling)


FORKED = """
    import os, numpy as np, numba_tc
    from numba_tc import driver
    driver._INIT = True                        # as if this process had used CUDA
    pid = os.fork()
    if pid == 0:
        try:
            numba_tc.gemm(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32))
            print("no error")
        except numba_tc.NoGPUError as e:
            print("NoGPUError:", e)
        os._exit(0)
    os.waitpid(pid, 0)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_after_cuda_is_told_to_spawn():
    p = _python(FORKED)
    assert p.returncode == 0, p.stderr
    assert "NoGPUError: CUDA cannot be used in this process: it was forked" in p.stdout
    assert "spawn" in p.stdout and "simulator" not in p.stdout


def test_a_process_that_forks_before_using_cuda_is_not_flagged():
    p = _python(FORKED.replace("driver._INIT = True", "pass"))
    assert p.returncode == 0, p.stderr
    assert "forked" not in p.stdout


@pytest.mark.gpu
def test_a_child_forked_after_cuda_on_a_gpu():
    p = _python("""
        import multiprocessing as mp, numpy as np, numba_tc
        a = np.ones((64, 64), np.float32)
        assert (numba_tc.gemm(a, a) == 64).all()           # the parent uses CUDA

        def child(q):
            try:
                numba_tc.gemm(a, a)
                q.put("no error")
            except Exception as e:
                q.put(f"{type(e).__name__}: {e}")

        q = mp.get_context("fork").Queue()
        p = mp.get_context("fork").Process(target=child, args=(q,))
        p.start(); print(q.get(timeout=120)); p.join()
        q = mp.get_context("spawn").Queue()
    """)
    assert p.returncode == 0, p.stderr
    assert "NoGPUError: CUDA cannot be used in this process: it was forked" in p.stdout and "spawn" in p.stdout


@pytest.mark.sass
def test_a_compiled_cubin_prints_as_a_summary():
    from numba import cuda, float32
    from numba_tc import sass

    def scale(x, y):
        i = cuda.grid(1)
        if i < x.shape[0]:
            y[i] = float32(2) * x[i]

    cub = sass.compile_cubin(scale, "void(float32[::1], float32[::1])")
    text = repr(cub)
    assert len(text) < 400 and text == str(cub), text
    assert text.startswith("Cubin(sm_90a, ") and "registers" in text and "SASS instructions" in text
    assert "NOP 1" not in text and "EXIT" in text
    assert len(cub.sass) > 1000          # the full SASS is still there
