"""The bad-input fuzz in Numba's CUDA simulator (benchmarks/bad_input.py --tier sim): over 60
generated mistakes (epilogue functions, epilogue_args, every other argument) and valid edge
cases, each under a time limit in worker processes; every one a clear error or a result correct
against float64."""
import importlib.util
import os
import sys

import pytest

from conftest import SIM

pytestmark = pytest.mark.sim

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
    """benchmarks/bad_input.py, loaded afresh (its families depend on the environment)."""
    spec = importlib.util.spec_from_file_location("bad_input", os.path.join(ROOT, "benchmarks", "bad_input.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(SIM, reason="runs its own simulator workers")
def test_every_bad_input_is_a_clear_error_or_correct_in_the_simulator():
    tool = _tool()
    records = tool.run("sim", seed=0, workers=2)
    assert len(records) >= 60
    bad = [r for r in records if not tool.passed(r)]
    assert not bad, "\n".join(f"{r['case']}: {r['outcome']} in {r['seconds']} s: {r['why'] or r['exception']}"
                              for r in bad)
    outcomes = {r["outcome"] for r in records}
    assert outcomes == {"error", "correct"}         # both kinds of case ran
    assert max(r["seconds"] for r in records) <= tool.LIMIT


def test_the_generator_is_seeded_and_covers_every_family():
    tool = _tool()
    for tier in tool.TIERS:
        plan = tool.cases(tier, 0)
        assert len(plan) >= 60
        assert {p.family for p in plan} == {name for name, _, tiers, _ in tool.FAMILIES if tier in tiers}
    one, two = (tool.Kit("sim", 7, "bad_bias", 1) for _ in range(2))
    assert one.mnk() == two.mnk() and tool.Kit("sim", 8, "bad_bias", 1).mnk() != tool.Kit("sim", 7, "bad_bias",
                                                                                           1).mnk()


@pytest.mark.skipif(SIM, reason="runs its own simulator workers")
def test_the_fuzz_fails_what_it_must(monkeypatch):
    # a hang its alarm ends, one it cannot (the worker killed and replaced), a wrong result, an
    # error raised inside NumPy, a worker that dies: each below the bar; a case after them runs
    monkeypatch.setenv("NUMBA_TC_BAD_INPUT_SELFTEST", "1")
    tool = _tool()
    monkeypatch.setattr(tool, "SLACK", 3)
    records = {r["case"]: r for r in tool.run("sim", seed=0, workers=1, limit=2,
                                              only="selftest|bad_bias-0")}
    assert {c: r["outcome"] for c, r in records.items()} == {
        "selftest_hang_in_python-0": "hang", "selftest_hang_deaf-0": "hang", "selftest_wrong-0": "wrong",
        "selftest_unclear-0": "wrong", "selftest_crash-0": "wrong", "bad_bias-0": "error"}, records
    assert "raised in" in records["selftest_unclear-0"]["why"] and "died" in records["selftest_crash-0"]["why"]
    assert "killed after 5 s" in records["selftest_hang_deaf-0"]["why"]
    assert not any(tool.passed(r) for c, r in records.items() if c.startswith("selftest"))
    assert tool.passed(records["bad_bias-0"])
