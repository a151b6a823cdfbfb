import json

import numpy as np
import pytest

from numba_tc import bench, verify


def test_rel_error_flags_unwritten_elements():
    ref = np.ones((3, 3))
    c = ref.copy()
    assert verify.rel_error(c, ref) == 0.0
    c[1, 1] = np.nan                      # a poisoned element the kernel never wrote
    assert verify.rel_error(c, ref) == float("inf")
    c[1, 1] = 1.1
    assert verify.rel_error(c, ref) == pytest.approx(0.1 / 3)
    with pytest.raises(ValueError):
        verify.rel_error(np.ones((2, 3)), ref)


def test_random_operands_layouts_and_freshness():
    a, b = verify.random_operands(5, 7, 3, layout="TN")
    assert a.shape == (5, 3) and b.shape == (3, 7)
    assert a.flags.f_contiguous and not a.flags.c_contiguous and b.flags.c_contiguous
    a2, _ = verify.random_operands(5, 7, 3)
    assert not np.array_equal(a, a2) and np.all(a != 0).any()
    assert set(verify.TOLERANCE) == {"float32", "tf32", "float16", "bfloat16"}


def _rec(v, tf, cb):
    return bench.Record(v, "simt", "float32", 64, 64, 64, tf, cb, tf / cb, 1e-7, "dev", "abc", "cmd")


def test_merge_records_replaces_same_key(tmp_path):
    p = str(tmp_path / "r.json")
    bench.merge_records(p, [_rec("naive", 1.0, 10.0), _rec("smem", 2.0, 10.0)])
    rows = bench.merge_records(p, [_rec("naive", 3.0, 10.0)])
    assert len(rows) == 2
    assert {r["variant"]: r["tflops"] for r in json.load(open(p))} == {"naive": 3.0, "smem": 2.0}
    required = {"variant", "ladder", "dtype", "m", "n", "k", "tflops", "cublas_tflops", "ratio",
                "rel_err", "device", "commit", "command"}
    assert required <= set(rows[0])


def test_table_and_plot(tmp_path):
    recs = [_rec("naive", 1.0, 10.0), _rec("smem", 2.0, 10.0)]
    t = bench.table(recs)
    assert "naive" in t and "0.100" in t and "0.200" in t
    pytest.importorskip("matplotlib")
    out = bench.plot(recs, str(tmp_path / "p.png"), title="t")
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_committed_results_are_well_formed():
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results", "h100.json")
    rows = json.load(open(path))
    simt = {r["variant"] for r in rows if r["ladder"] == "simt" and (r["m"], r["n"], r["k"]) == (4096,) * 3}
    assert simt >= {"naive", "coalesced", "smem", "blocktile1d", "blocktile2d", "vectorized", "warptile"}
    for r in rows:
        assert r["ratio"] == pytest.approx(r["tflops"] / r["cublas_tflops"])
        assert r["rel_err"] <= verify.TOLERANCE[r["dtype"]]
        assert r["command"] and r["commit"] and r["device"]
