"""The README's test command, timed as a new user runs it: a fresh clone of this repository, then
``uv run --extra test python -m pytest -q`` in it (uv builds the environment from uv.lock; the
suite starts its own pytest-xdist workers, tests/conftest.py). Writes
benchmarks/results/suite_time.json: {"seconds", "passed", "skipped", "failed", "cores", "commit",
"machine", "load_before", "cpu_seconds"}.

    python benchmarks/suite_time.py                 # on a quiet machine: the figure the README gives
    python benchmarks/suite_time.py --out /tmp/t.json --keep /tmp/clone

The clone is of the committed HEAD (commit what you time); the kernel cache is a fresh folder, as
on a new machine. ``seconds`` is the wall time of the test command alone (after ``uv sync``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "suite_time.json")
COMMAND = ["uv", "run", "--extra", "test", "python", "-m", "pytest", "-q"]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.+)", f.read())
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    gpu = "no GPU" if shutil.which("nvidia-smi") is None else "a GPU"
    return f"{cpu}, {os.cpu_count()} cores, {gpu}, {platform.system()} {platform.release()}"


def counts(out: str) -> dict:
    last = [line for line in out.splitlines() if re.search(r"\d+ (passed|failed|skipped)", line)]
    found = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", last[-1] if last else "")}
    return {"passed": found.get("passed", 0), "skipped": found.get("skipped", 0),
            "failed": found.get("failed", 0) + found.get("error", 0) + found.get("errors", 0)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--keep", help="clone into this folder and keep it (default: a temporary one)")
    a = p.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    where = a.keep or tempfile.mkdtemp(prefix="numba_tc_suite_")
    clone = os.path.join(where, "repo")
    try:
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        env = dict(os.environ, NUMBA_TC_CACHE_DIR=os.path.join(where, "cache"))
        for k in ("NUMBA_ENABLE_CUDASIM", "VIRTUAL_ENV", "PYTHONPATH", "NUMBA_TC_TEST_WORKERS"):
            env.pop(k, None)
        subprocess.run(["uv", "sync", "-q", "--extra", "test"], cwd=clone, env=env, check=True)
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        run = subprocess.run(COMMAND, cwd=clone, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(run.stdout[-3000:])
        rec = {"seconds": round(seconds, 1), **counts(run.stdout), "cores": os.cpu_count(), "commit": commit,
               "machine": machine(), "load_before": round(load, 2),
               "cpu_seconds": round(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, 1),
               "command": " ".join(COMMAND)}
    finally:
        if not a.keep:
            shutil.rmtree(where, ignore_errors=True)
    with open(a.out, "w") as f:
        json.dump(rec, f, indent=1)
        f.write("\n")
    print(json.dumps(rec))
    return 0 if run.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
