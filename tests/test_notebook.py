"""The notebooks run as a reader runs them: each executed by a Jupyter kernel (nbclient) with the
inline matplotlib backend, no GPU and the committed H100 results. Every plotting cell must show a
picture, nothing may be left behind in the repository, and the committed notebooks must carry
their outputs (tables and pictures), so that they read on the web without being run.

Re-execute the committed notebooks (no GPU, recorded results) and save them with their outputs:

    python tests/test_notebook.py --write
"""
import json
import os
import re
import sys

import pytest

pytestmark = pytest.mark.cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = os.path.join(ROOT, "notebooks")
NAMES = sorted(f for f in os.listdir(NOTEBOOKS) if f.endswith(".ipynb"))
# a cell that draws: pyplot's show, or a numba_tc.bench picture returned to the notebook
PLOTS = re.compile(r"plt\.show\(|^bench\.plot\w*\(", re.M)
SKIP_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".ipynb_checkpoints", "build", "dist"}


def _files(root):
    out = set()
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in SKIP_DIRS and not x.endswith(".egg-info")]
        out.update(os.path.relpath(os.path.join(d, f), root) for f in files)
    return out


def _plotting(cell) -> bool:
    return cell.cell_type == "code" and bool(PLOTS.search(cell.source))


def _images(cell) -> int:
    return sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))


def execute(name, timeout=600):
    """Run notebook ``name`` in a fresh kernel from notebooks/ (as Jupyter does): inline
    backend, no GPU, the committed results. Returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    env = {"NUMBA_TC_NOTEBOOK_LIVE": "0", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    saved = {k: os.environ.get(k) for k in list(env) + ["MPLBACKEND", "NUMBA_ENABLE_CUDASIM"]}
    os.environ.update(env)                     # the kernel inherits this process's environment
    os.environ.pop("MPLBACKEND", None)         # so that ipykernel picks the inline backend
    os.environ.pop("NUMBA_ENABLE_CUDASIM", None)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                       resources={"metadata": {"path": NOTEBOOKS}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes_with_inline_pictures_and_no_stray_files(name):
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("matplotlib")
    before = _files(ROOT)
    nb = execute(name)
    stray = sorted(_files(ROOT) - before)
    assert not stray, f"{name} left files behind: {stray}"
    plotting = [c for c in nb.cells if _plotting(c)]
    assert plotting, f"{name} draws nothing?"
    for c in plotting:
        assert _images(c), f"{name}: no picture from the cell\n{c.source}\noutputs: {c.outputs}"
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "committed" in text, "the notebook should say it shows the committed results"


@pytest.mark.parametrize("name", NAMES)
def test_committed_notebook_carries_its_outputs(name):
    """Read on the web, every code cell shows what it printed or drew (python tests/test_notebook.py --write)."""
    nb = json.load(open(os.path.join(NOTEBOOKS, name)))
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        assert cell["outputs"] and cell["execution_count"], f"{name}: not executed:\n{source}"
        assert not any(o["output_type"] == "error" for o in cell["outputs"]), f"{name}: an error in\n{source}"
        if PLOTS.search(source):
            assert any("image/png" in o.get("data", {}) for o in cell["outputs"]), f"{name}: no picture in\n{source}"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    import nbformat
    for name in NAMES:
        print(f"executing {name}", flush=True)
        nbformat.write(execute(name), os.path.join(NOTEBOOKS, name))
