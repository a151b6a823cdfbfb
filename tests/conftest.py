import atexit
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


# The whole suite (or a folder of it) runs on every core by itself: with pytest-xdist installed, no
# GPU (GPU tests stay one at a time on their GPU) and no ``-n`` given, as many worker processes as
# the CPUs this process may use (at most 8); a named test file runs in this process. -n 0 (or
# NUMBA_TC_TEST_WORKERS=0) runs everything here; NUMBA_TC_TEST_WORKERS=N asks for N workers.
def _default_workers(config) -> int:
    if not config.pluginmanager.hasplugin("xdist") or config.getoption("numprocesses", None) is not None:
        return 0
    if hasattr(config, "workerinput") or "PYTEST_XDIST_WORKER" in os.environ:     # (a worker itself)
        return 0
    if config.getoption("usepdb", False) or config.getoption("collectonly", False):
        return 0
    asked = os.environ.get("NUMBA_TC_TEST_WORKERS")
    if asked is not None:
        return int(asked) if asked.isdigit() else 0
    if HAS_GPU or any(not os.path.isdir(a.split("::")[0]) for a in config.args):
        return 0
    n = min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8)
    return n if n > 1 else 0


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    n = _default_workers(config)
    if n:
        config.option.numprocesses = n
        if config.option.dist == "no":
            # tests of one xdist_group (a module whose kernels a fixture compiles once) on one worker
            config.option.dist = "loadgroup"


# The tiers (markers registered in pyproject.toml), most demanding first: a test belongs to the
# first one it is marked with. Each test module carries its tier (pytestmark).
TIERS = ("gpu", "sass", "sim", "cpu")
_TIER = {}


# cpu modules of long tests, started first with the simulator and SASS tiers (under pytest-xdist,
# so that no long test is left to run alone at the end)
_LONG = ("test_aot_coverage.py", "test_notebook.py", "test_runtime.py", "test_cli.py", "test_readme.py")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="no CUDA GPU here")
    for item in items:
        _TIER[item.nodeid] = next((t for t in TIERS if item.get_closest_marker(t)), "untiered")
        if item.get_closest_marker("gpu") and not HAS_GPU:
            item.add_marker(skip)
        # a module's fixture that compiles kernels once for its tests: those tests on one xdist
        # worker (``--dist loadgroup``), which compiles them once
        shared = [d for defs in item._fixtureinfo.name2fixturedefs.values() for d in defs
                  if d.scope in ("module", "package", "session") and d.baseid.startswith(item.nodeid.split("::")[0])]
        if shared:
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))

    def cost(item):
        tier = _TIER[item.nodeid]
        if tier == "gpu" and not HAS_GPU:
            return 2
        return 0 if tier in ("sim", "sass") or item.nodeid.split("::")[0].endswith(_LONG) else 1
    items.sort(key=cost)


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


# --- Numba's CUDA simulator, in a child process ----------------------------------------------
# The simulator is chosen when Numba is imported, so simulator tests run their code in another
# interpreter: one per test process, kept for the session (an interpreter and Numba's import cost
# more than most tests), each test's code executed in a namespace of its own; its stdout and
# stderr come back, and an exception fails the test with its traceback.
_SIM_SERVER = r"""
import contextlib, io, json, os, sys, traceback
replies = os.fdopen(int(sys.argv[1]), "w")
for line in sys.stdin:
    code = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(code, "<simulator test>", "exec"), {"__name__": "__main__"})
            ok = True
        except SystemExit as e:
            ok = e.code in (None, 0)
        except BaseException:
            traceback.print_exc()
            ok = False
    replies.write(json.dumps({"ok": ok, "out": out.getvalue(), "err": err.getvalue()}) + "\n")
    replies.flush()
"""


class _Simulator:
    """The session's simulator interpreter (started on first use, restarted after a timeout)."""

    def __init__(self):
        self.proc = self.replies = None

    def start(self):
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        # (the package, and tests/ for its helpers: ``simulated``)
        env["PYTHONPATH"] = os.pathsep.join([root, os.path.join(root, "tests"), env.get("PYTHONPATH", "")])
        r, w = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-c", _SIM_SERVER, str(w)], env=env, pass_fds=(w,),
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        os.close(w)
        self.replies = os.fdopen(r)

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.replies.close()
        self.proc = self.replies = None

    def run(self, code: str, timeout: float) -> dict:
        import json
        import select
        if self.proc is None or self.proc.poll() is not None:
            self.stop()
            self.start()
        self.proc.stdin.write(json.dumps(code) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], timeout)
        line = self.replies.readline() if ready else ""
        if not line:                        # a hang, or the interpreter died
            try:
                died = self.proc.wait(timeout=10) if ready else None
            except subprocess.TimeoutExpired:
                died = None
            self.stop()
            if died is None:
                raise subprocess.TimeoutExpired("simulator test", timeout)
            return {"ok": False, "out": "", "err": f"the simulator's interpreter exited with status {died}"}
        return json.loads(line)


_SIM = _Simulator()
atexit.register(_SIM.stop)


def run_in_simulator(code: str, timeout=600) -> str:
    """Run ``code`` with Numba's CUDA simulator on (in the session's simulator interpreter, in a
    fresh namespace); return what it printed. An exception in it fails the caller with its
    traceback and output."""
    r = _SIM.run(code, timeout)
    assert r["ok"], r["out"] + r["err"]
    return r["out"]


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
