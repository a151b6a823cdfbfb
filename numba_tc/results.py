"""Benchmark records and the results files that hold them: ``Record`` (one variant timed beside
cuBLAS), what every record written to a results file names (``stamp``: its GPU and a clean
commit, ``clean_commit``), where a checkout's results live (``results_dir``, ``results_name``,
``newest_results``: the newest GPU's, ``GPUS``) and the committed ladder records read back
(``recorded``). ``bench`` times and writes them; the README, notebooks and CLI read them.
"""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import List, Optional

import numpy as np

__all__ = ["Record", "commit_id", "clean_commit", "stamp", "DirtyTreeError", "load_records", "merge_records",
           "gpu_tag", "results_name", "results_dir", "newest_results", "find_results", "recorded", "environment",
           "GPUS", "TOP_RUNGS"]


@dataclass
class Record:
    variant: str
    ladder: str
    dtype: str
    m: int
    n: int
    k: int
    tflops: float
    cublas_tflops: Optional[float]
    ratio: Optional[float]
    rel_err: float
    device: str
    commit: str
    command: str
    ms: float = 0.0
    cublas_ms: Optional[float] = None
    first_call_s: Optional[float] = None
    layout: str = "NN"
    config: Optional[str] = None          # variant "auto": what it ran (``numba_tc.explain``)
    gpu: Optional[str] = None             # the device's name, as every results file's records carry it


def commit_id() -> str:
    """The git commit measured (NUMBA_TC_COMMIT overrides: the GPU machine gets no .git)."""
    if os.environ.get("NUMBA_TC_COMMIT"):
        return os.environ["NUMBA_TC_COMMIT"]
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=here, capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("+dirty" if dirty else "")) if sha else "unknown"
    except Exception:
        return "unknown"


ALLOW_DIRTY_ENV = "NUMBA_TC_ALLOW_DIRTY"


class DirtyTreeError(RuntimeError):
    """A record would name a commit that does not hold the code it measured."""


def _in_results(path: str) -> bool:
    """Whether ``path`` is a file of a checkout's benchmarks/results (the committed records)."""
    d = os.path.dirname(os.path.abspath(path))
    return os.path.basename(d) == "results" and os.path.basename(os.path.dirname(d)) == "benchmarks"


def clean_commit(path: Optional[str] = None) -> str:
    """``commit_id()`` for records written to ``path``. Into a checkout's benchmarks/results it
    must name a commit that holds the code measured: DirtyTreeError for an uncommitted tree or no
    commit at all, unless ``NUMBA_TC_ALLOW_DIRTY=1``. Elsewhere (a scratch file, a GPU machine's
    output folder) such a commit goes through labelled ``+dirty``/``unknown``, with a warning;
    ``python benchmarks/records.py check`` refuses those records in the repository."""
    c = commit_id()
    if "+dirty" in c or c == "unknown":
        why = ("the tree has uncommitted changes: commit them first" if "+dirty" in c else
               "no git commit found: on a machine without .git set NUMBA_TC_COMMIT=<the commit copied there>")
        if path is not None and _in_results(path) and os.environ.get(ALLOW_DIRTY_ENV) != "1":
            raise DirtyTreeError(f"refusing to write records at commit {c!r} into {path}: {why} (or set "
                                 f"{ALLOW_DIRTY_ENV}=1 for records labelled '+dirty', not for the repository)")
        if path is not None:
            print(f"WARNING: these records name commit {c!r} ({why}): not records for benchmarks/results",
                  file=sys.stderr, flush=True)
    return c


def stamp(path: Optional[str] = None, gpu: bool = True) -> dict:
    """What every record written to ``path`` names: ``gpu``, the device's name as the driver gives
    it ("NVIDIA H200"; None with ``gpu=False`` or without a GPU), and ``commit`` (``clean_commit``:
    DirtyTreeError for an uncommitted tree when ``path`` is in benchmarks/results). Call it before
    measuring, so that a dirty tree fails at once."""
    name = None
    if gpu:
        try:
            name = _device_name()
        except Exception:
            name = None
    return {"gpu": name, "commit": clean_commit(path)}


def _device_name() -> str:
    from numba import cuda
    d = cuda.get_current_device()
    name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
    return name



def load_records(path: str) -> List[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return json.load(f)


def _key(r: dict):
    return (r["variant"], r["dtype"], r["m"], r["n"], r["k"], r.get("layout", "NN"), r["device"])


def merge_records(path: str, new: List[Record]) -> List[dict]:
    """Add records (``Record``s, or dicts as loaded from another run's JSON) to the JSON file at
    ``path``, replacing older ones of the same (variant, dtype, m, n, k, layout, device)."""
    rows = {_key(r): r for r in load_records(path)}
    for r in new:
        d = r if isinstance(r, dict) else asdict(r)
        rows[_key(d)] = d
    out = list(rows.values())
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    return out


RESULTS_ENV = "NUMBA_TC_RESULTS"
RESULTS_DIR = os.path.join("benchmarks", "results")
# The GPUs with committed records, newest first. Each GPU's files are named for it: the ladders and
# sweeps in ``<gpu>.json``, the others ``<kind>_<gpu>.json`` (features_h200.json, ...). Readers take
# the newest GPU's file that exists; the older ones stay as history.
GPUS = ("h200", "h100")
RESULTS_FILE = os.path.join(RESULTS_DIR, "<gpu>.json")


def gpu_tag(name: Optional[str] = None) -> str:
    """The short name results files use for a GPU: "NVIDIA H200" -> "h200", "NVIDIA H100 80GB HBM3"
    -> "h100" (default: this machine's GPU)."""
    import re
    name = name or _device_name()
    m = re.search(r"\b(GH200|[HAB]\d{2,3}|L40S?|L4)\b", name)
    return (m.group(1) if m else name.split()[-1]).lower()


def results_name(kind: str, gpu: str) -> str:
    """The file name of ``kind``'s records on ``gpu``: "h200.json" for the ladders (kind ""),
    "features_h200.json" for kind "features"."""
    return f"{kind}_{gpu}.json" if kind else f"{gpu}.json"


def results_dir() -> Optional[str]:
    """benchmarks/results of the source checkout this package is imported from (an editable
    install), else of the current directory; None when neither has one."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for root in (here, os.getcwd()):
        path = os.path.join(root, RESULTS_DIR)
        if os.path.isdir(path):
            return path
    return None


def newest_results(kind: str = "", directory: Optional[str] = None) -> Optional[str]:
    """The path of the newest GPU's ``kind`` records in ``directory`` (default ``results_dir()``),
    or None."""
    directory = directory or results_dir()
    for gpu in GPUS if directory else ():
        path = os.path.join(directory, results_name(kind, gpu))
        if os.path.exists(path):
            return path
    return None


def find_results() -> Optional[str]:
    """The committed ladder records: ``$NUMBA_TC_RESULTS``, else the newest GPU's
    ``benchmarks/results/<gpu>.json`` (``GPUS``) of the source checkout (see ``results_dir``).
    They ship with the repository, not with the package: None if not found."""
    env = os.environ.get(RESULTS_ENV)
    if env:
        return env if os.path.exists(env) else None
    return newest_results("")


# the fastest rung of each ladder and the dtype it is shown in (vs cuBLAS in the same dtype)
TOP_RUNGS = {"simt": ("warptile", "float32"), "mma": ("mma_tuned", "bfloat16"), "wgmma": ("hopper", "bfloat16")}


def recorded(size=(4096, 4096, 4096), all_rungs: bool = False, path: Optional[str] = None) -> List[dict]:
    """The committed records of the three ladders at ``size``: the fastest rung of each (simt in
    float32, mma and wgmma in bfloat16), or every rung with ``all_rungs``; in ladder and rung
    order. Raises FileNotFoundError when the results file is not found (see ``find_results``)."""
    path = path or find_results()
    if path is None:
        raise FileNotFoundError(
            f"the recorded results ({RESULTS_FILE}) were not found: they come with the repository, "
            f"not the installed package. Run from a clone of numba_tc, or set {RESULTS_ENV}=/path/to/h100.json "
            f"(or another GPU's file)")
    from .registry import variants
    order = {v.name: i for i, v in enumerate(variants())}
    rows = [r for r in load_records(path) if (r["m"], r["n"], r["k"]) == tuple(size)
            and r.get("layout", "NN") == "NN" and r["ladder"] in TOP_RUNGS
            and r["dtype"] == TOP_RUNGS[r["ladder"]][1]
            and (all_rungs or r["variant"] == TOP_RUNGS[r["ladder"]][0])]
    return sorted(rows, key=lambda r: order.get(r["variant"], len(order)))


def environment() -> str:
    import numba
    return f"python {platform.python_version()}, numba {numba.__version__}, numpy {np.__version__}"
