import os
import re
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

# On a GPU machine a test skipped because a package is missing is a failure (the GPU tier should
# be complete from one install: pip install -e ".[test,gpu]"); hardware reasons ("needs two
# GPUs", "needs an sm_90 GPU") stay skips. NUMBA_TC_ALLOW_MISSING=1 lets them skip.
ALLOW_MISSING = os.environ.get("NUMBA_TC_ALLOW_MISSING") == "1"
_MISSING = re.compile(r"could not import|No module named|not installed|"
                      r"needs (torch|cupy|ml_dtypes|matplotlib|nbclient|ipykernel|nbformat|tqdm)\b")


def missing_package(reason: str) -> bool:
    """Whether a skip reason says a package is missing (not a GPU that is absent or too old)."""
    return bool(_MISSING.search(reason))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and HAS_GPU and not ALLOW_MISSING and not hasattr(rep, "wasxfail"):
        why = _skip_reason(rep)
        if missing_package(why):
            rep.outcome = "failed"
            rep.longrepr = (f"skipped for a missing package on a GPU machine: {why}\n"
                            "install what the GPU tier needs (pip install -e \".[test,gpu]\") or set "
                            "NUMBA_TC_ALLOW_MISSING=1 to let such tests skip")


# The tiers (markers registered in pyproject.toml), most demanding first: a test belongs to the
# first one it is marked with. Each test module carries its tier (pytestmark).
TIERS = ("gpu", "sass", "sim", "cpu")
_TIER = {}


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="no CUDA GPU here")
    for item in items:
        _TIER[item.nodeid] = next((t for t in TIERS if item.get_closest_marker(t)), "untiered")
        if item.get_closest_marker("gpu") and not HAS_GPU:
            item.add_marker(skip)


def _skip_reason(report) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One short summary by tier: what passed, failed and skipped, and why tests skipped."""
    counts = {}                                 # tier -> outcome -> n
    reasons = {}                                # tier -> reason -> n
    for outcome in ("passed", "failed", "error", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            if getattr(rep, "when", "call") != "call" and outcome == "passed":
                continue
            tier = _TIER.get(rep.nodeid) or next(     # (under pytest-xdist the workers collect)
                (t for t in TIERS if t in getattr(rep, "keywords", {})), "untiered")
            counts.setdefault(tier, {}).setdefault(outcome, set()).add(rep.nodeid)
            if outcome == "skipped":
                why = _skip_reason(rep)
                reasons.setdefault(tier, {})[why] = reasons.get(tier, {}).get(why, 0) + 1
    if not counts:
        return
    terminalreporter.write_sep("-", "by tier (run one alone: python -m pytest -m TIER)")
    for tier in TIERS[::-1] + ("untiered",):
        if tier not in counts:
            continue
        line = ", ".join(f"{len(ids)} {outcome}" for outcome, ids in counts[tier].items())
        why = "; ".join(f"{n} {r}" for r, n in sorted(reasons.get(tier, {}).items(), key=lambda x: -x[1]))
        terminalreporter.write_line(f"{tier:>8}: {line}" + (f" ({why})" if why else ""))


def run_in_simulator(code: str, timeout=600) -> str:
    """Run ``code`` in a fresh interpreter with Numba's CUDA simulator on; return its stdout."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


# For code run by ``run_in_simulator``: ``expect(exc, words, *args, **kw)`` checks that
# ``numba_tc.gemm(*args, **kw)`` raises ``exc`` with ``words`` in its message (and prints "raised").
EXPECT = """
import numba_tc
def expect(exc, words, *args, **kw):
    try:
        numba_tc.gemm(*args, **kw)
    except exc as e:
        assert words in str(e), (words, str(e))
        print("raised", type(e).__name__)
    else:
        raise AssertionError(f"no error for {words!r}")
"""


def assert_shapes(variant, shapes, **kw):
    """``verify.check`` of a variant on every named shape (fresh inputs, poisoned output, float64)."""
    from numba_tc import verify
    for name, (m, n, k) in shapes.items():
        r = verify.check(variant, m, n, k, **kw)
        assert r.ok, f"{name}: {r}"


def torch_epilogue_reference(a, b, c=None, bias=None, alpha=1.0, beta=0.0, activation=None):
    """``act(alpha * a @ b + beta * c + bias)`` in float64 with torch (bias of length N: per
    column, else per row): the reference of the torch tests, CPU and GPU."""
    import torch
    z = alpha * (a.double() @ b.double())
    if c is not None:
        z = z + beta * c.double()
    if bias is not None:
        z = z + (bias.double()[None, :] if bias.shape[0] == b.shape[1] else bias.double()[:, None])
    f = {None: lambda v: v, "relu": torch.relu, "silu": torch.nn.functional.silu,
         "gelu": torch.nn.functional.gelu,
         "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[activation]
    return f(z)
