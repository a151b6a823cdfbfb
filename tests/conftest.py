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


def assert_shapes(variant, shapes, **kw):
    """``verify.check`` of a variant on every named shape (fresh inputs, poisoned output, float64)."""
    from numba_tc import verify
    for name, (m, n, k) in shapes.items():
        r = verify.check(variant, m, n, k, **kw)
        assert r.ok, f"{name}: {r}"

