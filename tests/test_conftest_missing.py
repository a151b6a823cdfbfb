"""The test suite's own rule (no GPU needed: a copy of conftest.py believes there is one): on a
GPU machine a test skipped for a missing package fails, a hardware skip stays a skip, and
NUMBA_TC_ALLOW_MISSING=1 lets missing packages skip."""
import os
import subprocess
import sys

import pytest

from conftest import missing_package

pytestmark = pytest.mark.cpu

HERE = os.path.dirname(os.path.abspath(__file__))

TESTS = '''
import pytest
pytestmark = pytest.mark.gpu

def test_needs_a_package():
    pytest.importorskip("numba_tc_no_such_package")

@pytest.mark.skipif(True, reason="needs torch")
def test_marked_for_torch():
    pass

@pytest.mark.skipif(True, reason="needs two GPUs")
def test_hardware():
    pass

def test_sm90():
    pytest.skip("wgmma needs an sm_90 GPU")
'''


def _run(tmp_path, allow):
    src = open(os.path.join(HERE, "conftest.py")).read()
    assert "HAS_GPU = _gpu()" in src
    (tmp_path / "conftest.py").write_text(src.replace("HAS_GPU = _gpu()", "HAS_GPU = True"))
    (tmp_path / "test_fake_gpu.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: x\n    cpu: x\n    sim: x\n    sass: x\n")
    env = dict(os.environ)
    env.pop("NUMBA_TC_ALLOW_MISSING", None)
    if allow:
        env["NUMBA_TC_ALLOW_MISSING"] = "1"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfs", "-p", "no:cacheprovider", "-p", "no:xdist",
                        str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    return p.stdout + p.stderr


def test_reasons():
    assert missing_package("could not import 'torch': No module named 'torch'")
    assert missing_package("needs torch") and missing_package("needs cupy")
    assert not missing_package("needs two GPUs") and not missing_package("wgmma needs an sm_90 GPU")
    assert not missing_package("no CUDA GPU here")


def test_on_a_gpu_machine_a_missing_package_fails_and_hardware_skips(tmp_path):
    out = _run(tmp_path, allow=False)
    # (a skipif mark fires at set-up, so that one reads as an error: it fails the run all the same)
    assert "1 failed, 2 skipped, 1 error" in out, out
    assert "skipped for a missing package on a GPU machine" in out and "NUMBA_TC_ALLOW_MISSING=1" in out


def test_the_escape_hatch_lets_them_skip(tmp_path):
    out = _run(tmp_path, allow=True)
    assert "4 skipped" in out and "failed" not in out, out
