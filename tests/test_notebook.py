"""The notebooks' code cells run top to bottom (reading committed results when there is no GPU)."""
import json
import os

import pytest

from conftest import SIM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(SIM, reason="runs outside the simulator")
@pytest.mark.parametrize("name", ["01_simt_ladder.ipynb", "02_tensor_core_ladder.ipynb", "03_hopper_frontier.ipynb"])
def test_notebook_runs(name, tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    nb = json.load(open(os.path.join(ROOT, "notebooks", name)))
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("NUMBA_TC_NOTEBOOK_LIVE", "0")
    ns = {}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), name, "exec"), ns)
    assert ns["records"], "no results to show"
    if os.path.exists(os.path.join(ROOT, "simt_ladder.png")):
        os.remove(os.path.join(ROOT, "simt_ladder.png"))
