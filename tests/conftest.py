import os
import subprocess
import sys

import pytest

from numba import config

SIM = bool(config.ENABLE_CUDASIM)


def _gpu() -> bool:
    if SIM:
        return False
    try:
        from numba import cuda
        return cuda.is_available()
    except Exception:
        return False


HAS_GPU = _gpu()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="no CUDA GPU here")
    for item in items:
        if "gpu" in item.keywords and not HAS_GPU:
            item.add_marker(skip)


def run_in_simulator(code: str, timeout=600) -> str:
    """Run ``code`` in a fresh interpreter with Numba's CUDA simulator on; return its stdout."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def assert_shapes(variant, shapes, **kw):
    """``verify.check`` of a variant on every named shape (fresh inputs, poisoned output, float64)."""
    from numba_tc import verify
    for name, (m, n, k) in shapes.items():
        r = verify.check(variant, m, n, k, **kw)
        assert r.ok, f"{name}: {r}"

