import json

import numpy as np
import pytest

from numba_tc import bench, verify

pytestmark = pytest.mark.cpu


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
    assert set(verify.TOLERANCE) == {"float32", "tf32", "tf32_rn", "float16", "bfloat16"}


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


PNG = b"\x89PNG\r\n\x1a\n"


def test_table_and_plot(tmp_path, monkeypatch):
    recs = [_rec("naive", 1.0, 10.0), _rec("smem", 2.0, 10.0)]
    t = bench.table(recs)
    assert "naive" in t and "0.100" in t and "0.200" in t
    pytest.importorskip("matplotlib")
    import matplotlib
    backend = matplotlib.get_backend()
    monkeypatch.chdir(tmp_path)
    fig = bench.plot(recs, title="t")                 # no path: a Figure, no file
    assert fig is not None and fig.axes and not list(tmp_path.iterdir())
    assert fig._repr_png_().startswith(PNG)           # what Jupyter shows when a cell returns it
    fig = bench.plot(recs, str(tmp_path / "sub" / "p.png"), title="t")
    assert (tmp_path / "sub" / "p.png").read_bytes().startswith(PNG)
    sweep = [bench.Record("hopper", "wgmma", "bfloat16", s, s, s, 1.0, 2.0, 0.5, 1e-3, "d", "c", "x")
             for s in (64, 128, 256)]
    assert bench.plot(sweep, str(tmp_path / "s.png")) is not None and (tmp_path / "s.png").exists()
    assert matplotlib.get_backend() == backend, "plotting must not switch matplotlib's backend"


def test_the_ladders_side_by_side(tmp_path):
    recs = bench.recorded(all_rungs=True)
    assert [r["variant"] for r in bench.recorded()] == ["warptile", "mma_tuned", "hopper"]
    assert {r["ladder"] for r in recs} == {"simt", "mma", "wgmma"} and len(recs) >= 19
    assert {(r["ladder"], r["dtype"]) for r in recs} == {("simt", "float32"), ("mma", "bfloat16"),
                                                          ("wgmma", "bfloat16")}
    t = bench.table(recs)
    assert "ladder" in t and "wgmma_persistent" in t
    assert len({len(line) for line in t.splitlines()}) == 1, "columns line up"
    pytest.importorskip("matplotlib")
    fig = bench.plot_ladders(recs, str(tmp_path / "l.png"), title="t")
    assert len(fig.axes) == 2 and (tmp_path / "l.png").read_bytes().startswith(PNG)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert "cuBLAS float32" in labels and "cuBLAS bfloat16" in labels and "hopper" in labels


def test_recorded_results_not_found_is_said_clearly(tmp_path, monkeypatch):
    monkeypatch.setenv(bench.RESULTS_ENV, str(tmp_path / "nothing.json"))
    assert bench.find_results() is None
    with pytest.raises(FileNotFoundError, match="come with the repository.*NUMBA_TC_RESULTS"):
        bench.recorded()


def test_run_takes_variant_objects_and_names(monkeypatch):
    """bench.run with a fake cuBLAS backend and a fake gemm: names and Variant objects both work,
    and the records carry the variant's name."""
    import numba.cuda
    import numba_tc
    from numba_tc import api

    class Backend:
        def __init__(self):
            self.rng = np.random.default_rng(0)
        set_tf32 = lambda self, on: None
        randn = lambda self, r, c, dt, trans=False: self.rng.standard_normal((r, c)).astype(dt)
        full_nan = lambda self, r, c, dt: np.full((r, c), np.nan, dt)
        reference = lambda self, a, b: a.astype(np.float64) @ b.astype(np.float64)
        rel_err = lambda self, c, ref: verify.rel_error(c, ref)
        cublas = lambda self, a, b, out: (lambda: None)

    seen = []

    def gemm(a, b, variant, out, allow_tf32=False):
        seen.append(variant)
        out[...] = a @ b

    monkeypatch.setattr(bench, "_Backend", Backend)
    monkeypatch.setattr(bench, "_device_name", lambda: "fake GPU")
    monkeypatch.setattr(bench, "time_interleaved", lambda fns, **kw: [2.0, 1.0])
    monkeypatch.setattr(api, "gemm", gemm)
    monkeypatch.setattr(numba.cuda, "synchronize", lambda: None)
    v = numba_tc.get_variant("warptile")
    recs = bench.run([v, "naive"], [(8, 8, 8)], progress=False)
    assert [r.variant for r in recs] == ["warptile", "naive"] and [x.name for x in seen] == ["warptile", "naive"]
    assert recs[0].ratio == pytest.approx(0.5) and recs[0].ladder == "simt"


@pytest.mark.parametrize("gpu", bench.GPUS)
def test_committed_results_are_well_formed(gpu):
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "results", bench.results_name("", gpu))
    if not os.path.exists(path):
        pytest.skip(f"no {gpu} ladder records yet")
    rows = json.load(open(path))
    simt = {r["variant"] for r in rows if r["ladder"] == "simt" and (r["m"], r["n"], r["k"]) == (4096,) * 3}
    assert simt >= {"naive", "coalesced", "smem", "blocktile1d", "blocktile2d", "vectorized", "warptile"}
    for r in rows:
        assert r["ratio"] == pytest.approx(r["tflops"] / r["cublas_tflops"])
        assert r["rel_err"] <= verify.TOLERANCE[r["dtype"]]
        assert r["command"] and r["commit"] and r["device"] and r["gpu"]
