"""python -m numba_tc and python -m numba_tc.ceiling: argument errors are argparse errors on any
machine, nothing runs that was not asked for, and the main job shows the three ladders."""
import os
import subprocess
import sys
import tempfile

import pytest

from numba_tc import __main__ as cli
from numba_tc import bench

from conftest import HAS_GPU

pytestmark = pytest.mark.cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
no_gpu = pytest.mark.skipif(HAS_GPU, reason="tests the behaviour without a GPU")


def _python(*args, env=None):
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def _exit_code(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    return e.value.code, capsys.readouterr()


@pytest.mark.parametrize("argv", [["bench", "--variants", "nosuch", "--json", "x", "--plot", "y", "--sizes", "64"],
                                  ["--variants", "warptile", "nosuch"]])
def test_unknown_variants_are_argument_errors_that_list_the_valid_ones(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _exit_code(argv, capsys)
    assert code == 2 and "unknown variant 'nosuch'" in out.err and "warptile, mma_naive" in out.err
    assert "simulator" not in out.out + out.err and not list(tmp_path.iterdir())


@pytest.mark.parametrize("size", ["abc", "0x1x2", "4x4", "-3", "1x2x3x4"])
def test_bad_sizes_are_argument_errors(size, capsys):
    code, out = _exit_code(["demo", "--size", size], capsys)
    assert code == 2 and "is not a size" in out.err and "Traceback" not in out.err
    code, out = _exit_code(["--sizes", size], capsys)
    assert code == 2 and "is not a size" in out.err


@pytest.mark.parametrize("argv, words", [
    (["--ladder", "simt", "--dtype", "bfloat16"], "the simt ladder takes float32, not bfloat16"),
    (["--variants", "hopper", "--dtype", "float32"], "variant hopper takes float16, bfloat16, float8_e4m3fn, float8_e5m2, tf32, not float32"),
    (["--variants", "hopper", "--all"], "cannot be combined"),
])
def test_bad_combinations_are_argument_errors(argv, words, capsys):
    code, out = _exit_code(argv, capsys)
    assert code == 2 and words in out.err


def test_sizes_parse():
    assert cli.parse_size("64") == (64, 64, 64) and cli.parse_size("3000X5000x2000") == (3000, 5000, 2000)


@no_gpu
@pytest.mark.parametrize("argv", [["bench"], ["--sizes", "64"], ["bench", "--variants", "warptile", "--json", "x"]])
def test_bench_without_a_gpu_says_it_needs_one(argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 1
    out = capsys.readouterr()
    assert "no CUDA GPU here, and benchmarks need one" in out.err and "rung" not in out.out
    assert not list(tmp_path.iterdir())


def test_help_has_no_rest_markup_and_lists_the_commands(capsys):
    code, out = _exit_code(["--help"], capsys)
    assert code == 0 and "``" not in out.out
    for name in cli.COMMANDS:
        assert name in out.out
    for name in cli.COMMANDS:
        code, out = _exit_code([name, "--help"], capsys)
        assert code == 0 and "``" not in out.out


def test_commands_are_a_table_to_extend(capsys):
    calls = []

    def args(p):
        p.add_argument("--n", type=int, default=1)

    cli.command("echo_test", "test only", args)(lambda a: calls.append(a.n) or 0)
    try:
        assert cli.main(["echo_test", "--n", "3"]) == 0 and calls == [3]
    finally:
        del cli.COMMANDS["echo_test"]


def _recorded_device() -> str:
    """The GPU the committed ladder records were measured on (the newest GPU's file)."""
    import json
    from numba_tc import bench
    return json.load(open(bench.find_results()))[0]["device"]


def test_recorded_shows_the_three_ladders_labelled(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "r.png"
    assert cli.main(["recorded", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"Recorded on an {_recorded_device()}" in out and "at commit" in out and "not measured here" in out
    for v in ("warptile", "mma_tuned", "hopper"):
        assert v in out
    assert "naive" not in out and f"picture: {png}" in out and png.exists()
    assert cli.main(["recorded", "--all", "--size", "4096", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "naive" in out and "wgmma_persistent" in out


def test_recorded_results_missing(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv(bench.RESULTS_ENV, str(tmp_path / "none.json"))
    assert cli.main(["recorded"]) == 1
    assert "were not found" in capsys.readouterr().err


def test_main_job_with_a_faked_gpu_and_benchmark_picks_the_three_ladders(capsys, monkeypatch, tmp_path):
    """The GPU path with bench.run faked: which variants, in which dtype, one table, one picture,
    one progress bar; a GPU without wgmma skips the Hopper ladder and says so."""
    import numba_tc
    calls = []

    def run(variants, sizes, dtype, layout, command, progress, budget_s):
        calls.append(([v.name for v in variants], dtype, progress))
        out = []
        for s in sizes:
            for v in variants:
                progress.update(1)
                cb = 50.0 if dtype == "float32" else 800.0
                out.append(bench.Record(v.name, v.ladder, dtype, *s, cb / 2, cb, 0.5, 1e-6, "fake", "c", command))
        return out

    monkeypatch.setattr(cli, "_gpu_present", lambda: True)
    monkeypatch.setattr(numba_tc, "device_capability", lambda: (9, 0))
    monkeypatch.setattr(bench, "run", run)
    monkeypatch.setattr(bench, "_device_name", lambda: "fake GPU")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.mkdir(tmp_path / "tmp")
    monkeypatch.chdir(tmp_path)
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert [c[:2] for c in calls] == [(["warptile"], "float32"), (["mma_tuned", "hopper"], "bfloat16")]
    assert calls[0][2] is calls[1][2], "one progress bar for the whole job"
    assert "ladder" in out and "hopper" in out and "picture: " in out
    png = out.split("picture: ")[1].split()[0]
    assert os.path.exists(png) and png.startswith(str(tmp_path / "tmp")) and os.listdir(tmp_path) == ["tmp"]

    calls.clear()
    monkeypatch.setattr(numba_tc, "device_capability", lambda: (8, 6))
    assert cli.main(["--all", "--no-progress", "--plot", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr().out
    assert "skipped: wgmma_tma needs sm_90" in out and (tmp_path / "p.png").exists()
    assert [c[:2] for c in calls] == [(["naive", "coalesced", "smem", "blocktile1d", "blocktile2d", "vectorized",
                                        "warptile"], "float32"),
                                      (["mma_naive", "mma_smem", "mma_swizzle", "pipelined", "mma_tuned"], "bfloat16")]

    calls.clear()
    assert cli.main(["bench", "--ladder", "mma", "--dtype", "float16", "--sizes", "256"]) == 0
    out = capsys.readouterr().out
    assert calls[0][1] == "float16" and len(calls[0][0]) == 5 and "picture" not in out

    calls.clear()
    assert cli.main(["--dtype", "float16"]) == 0
    assert [c[:2] for c in calls] == [(["mma_tuned"], "float16")]      # hopper: sm_86 here


@no_gpu
def test_ceiling_without_a_gpu_is_a_clear_message():
    p = _python("-m", "numba_tc.ceiling")
    assert p.returncode == 1 and "no CUDA GPU here" in p.stderr and "Traceback" not in p.stderr


@no_gpu
def test_main_job_without_a_gpu(capsys, monkeypatch, tmp_path):
    """The simulator check (re-launched with NUMBA_ENABLE_CUDASIM=1; its rungs are tested in
    test_simulator.py, so it is not run again here), then the recorded results with a picture."""
    launched = []

    def call(cmd, env):
        launched.append((cmd, env.get("NUMBA_ENABLE_CUDASIM")))
        return 0

    monkeypatch.setattr(cli.subprocess, "call", call)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))          # where the picture goes
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert launched == [([sys.executable, "-m", "numba_tc", "demo", "--size", "21x38x19"], "1")]
    assert out.index("Numba's CUDA simulator") < out.index(f"Recorded on an {_recorded_device()}")
    assert "warptile" in out and "mma_tuned" in out and "hopper" in out and "picture: " in out


# ---------------------------------------------------------------------------------------------
# First contact: every misuse a new user tried is an argument error or a clear message, never a
# traceback (issue 21).

@pytest.mark.parametrize("argv, words", [
    (["compile", "--arch", "sm_35"], "older than CUDA 13's oldest target, sm_75"),
    (["compile", "--arch", "sm_70", "--variants", "naive"], "oldest target, sm_75"),
    (["compile", "--arch", "sm_99"], "sm_99 is not a target of this CUDA compiler"),
    (["compile", "--arch", "sm_90", "--variants", "hopper"], "hopper runs only on sm_90a"),
    (["compile", "--arch", "sm_100a", "--variants", "wgmma_tma"], "wgmma_tma runs only on sm_90a"),
    (["compile", "--arch", "sm_75", "--variants", "mma_tuned"], "mma_tuned needs sm_80 or newer"),
    (["compile", "--arch", "sm_80a"], "the 'a' suffix"),
    (["compile", "--arch", "90"], "expected sm_XY"),
    (["compile", "--jobs", "0"], "not a positive integer"),
    (["compile", "--variants", "warptile", "--dtypes", "bfloat16"], "warptile takes float32, not bfloat16"),
    (["compile", "--variants", "nosuch"], "unknown variant 'nosuch'"),
])
def test_compile_targets_and_variants_are_checked_before_compiling(argv, words, capsys, monkeypatch):
    from numba_tc import aot
    monkeypatch.setattr(aot, "precompile", lambda *a, **k: pytest.fail("compiled despite a bad argument"))
    code, out = _exit_code(argv, capsys)
    assert code == 2 and words in out.err and "Traceback" not in out.err, out.err


def test_supported_archs_come_from_the_compiler():
    archs = cli.supported_archs()
    assert archs is None or (75 in archs and 90 in archs and min(archs) >= 75)
    assert cli.check_arch("sm_90a") == (9, 0, "a") and cli.check_arch("sm_75") == (7, 5)


def test_compile_for_plain_sm_90_skips_the_hopper_ladder_and_says_so(capsys, monkeypatch):
    from numba_tc import aot
    calls = []
    monkeypatch.setattr(aot, "precompile", lambda vs, archs, *a, **k: calls.append((vs, archs)) or [])
    assert cli.main(["compile", "--all", "--arch", "sm_90", "sm_90a", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "sm_90: skipping wgmma_tma" in out and "hopper" in out.split("sm_90: skipping")[1].splitlines()[0]
    (vs90, a90), (vs90a, a90a) = calls
    assert a90 == ["sm_90"] and "hopper" not in vs90 and "mma_tuned" in vs90 and "warptile" in vs90
    assert a90a == ["sm_90a"] and "hopper" in vs90a


def test_list_gives_the_toolchain_floor_and_each_configuration(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "sm_35" not in out
    lines = out.splitlines()
    warptile = next(i for i, line in enumerate(lines) if line.startswith("warptile "))
    assert "sm_75+" in lines[warptile] and "config: SimtConfig(bm=128, bn=64" in lines[warptile + 1]
    assert "sm_90a" in next(line for line in lines if line.startswith("hopper "))
    assert "sm_80+" in next(line for line in lines if line.startswith("mma_tuned "))


def test_recorded_at_an_unrecorded_size_lists_the_recorded_ones(capsys):
    assert cli.main(["recorded", "--size", "1234"]) == 1
    err = capsys.readouterr().err
    assert "nothing recorded at 1234^3" in err and "Recorded sizes" in err
    assert "mma bfloat16: 4096^3, 8192^3" in err and "simt float32: 1024^3" in err
    assert cli.main(["recorded", "--size", "1234", "--dtype", "tf32"]) == 1
    err = capsys.readouterr().err
    assert "mma tf32: 4096^3, 8192^3" in err and "simt" not in err


@pytest.mark.parametrize("dtype, ladders", [("float16", ["mma_tuned", "hopper"]), ("tf32", ["mma_tuned"]),
                                            ("bfloat16", ["mma_tuned", "hopper"])])
def test_recorded_shows_other_dtypes(dtype, ladders, capsys, tmp_path):
    pytest.importorskip("matplotlib")
    assert cli.main(["recorded", "--dtype", dtype, "--size", "8192", "--plot", str(tmp_path / "p.png")]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if f" {dtype} " in f" {line} " and "8192x" in line]
    assert [r[r.index(dtype) - 1] for r in rows] == ladders
    assert (tmp_path / "p.png").exists()


def test_recorded_gives_commits_as_seven_digits(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    assert cli.main(["recorded", "--size", "8192", "--plot", str(tmp_path / "p.png")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    import re
    commits = re.findall(r"\b[0-9a-f]{7,40}\b", head.split("at commit")[1])
    assert commits and all(len(c) == 7 for c in commits), head
    assert cli.short_commit("42d35c1e848d") == "42d35c1" and cli.short_commit("42d35c1e848d+dirty") == "42d35c1+dirty"
    assert cli.short_commit("unknown") == "unknown"


@pytest.mark.parametrize("content, words", [("[{\"variant\": ", "is not valid JSON (line 1"),
                                            ("{\"a\": 1}", "not a list of benchmark records"),
                                            ("\xff\xfe", "cannot be read")])
def test_a_corrupt_results_file_is_a_clear_error(content, words, capsys, monkeypatch, tmp_path):
    bad = tmp_path / "h100.json"
    bad.write_text(content, encoding="latin-1")
    monkeypatch.setenv(bench.RESULTS_ENV, str(bad))
    assert cli.main(["recorded"]) == 1
    err = capsys.readouterr().err
    assert words in err and str(bad) in err and "Traceback" not in err


def test_bench_silences_numba_performance_warnings_inside_its_progress_bar(capsys, monkeypatch, tmp_path):
    """The main job on an H100 printed "Grid size 1 will likely result in GPU under-utilization"
    in the middle of its progress bar (the spin kernel timed ahead of each measurement)."""
    import warnings
    import numba_tc
    from numba.cuda.core import errors

    def run(variants, sizes, dtype, layout, command, progress, budget_s):
        warnings.warn(errors.NumbaPerformanceWarning("Grid size 1 will likely result in GPU under-utilization"))
        progress.update(len(variants))
        return [bench.Record(v.name, v.ladder, dtype, 64, 64, 64, 1.0, 2.0, 0.5, 1e-6, "fake", "c", command)
                for v in variants]

    monkeypatch.setattr(cli, "_gpu_present", lambda: True)
    monkeypatch.setattr(numba_tc, "device_capability", lambda: (9, 0))
    monkeypatch.setattr(bench, "run", run)
    monkeypatch.setattr(bench, "_device_name", lambda: "fake GPU")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert cli.main(["--sizes", "64", "--no-progress", "--plot", str(tmp_path / "p.png")]) == 0
    assert not [w for w in seen if "Grid size" in str(w.message)]


MISUSE = [["compile", "--arch", "sm_35"], ["compile", "--arch", "sm_90", "--variants", "hopper"],
          ["compile", "--arch", "sm_99"], ["recorded", "--size", "1234"], ["recorded", "--dtype", "float16"],
          ["recorded", "--dtype", "tf32", "--size", "8192"], ["list"], ["--sizes", "4x4"], ["bench", "--dtype", "int8"]]


@pytest.mark.parametrize("argv", MISUSE, ids=[" ".join(a) for a in MISUSE])
def test_no_traceback_from_the_misuses_new_users_tried(argv, tmp_path):
    """The real command line, in a fresh process (the first-contact list of issue 21)."""
    p = _python("-m", "numba_tc", *argv, *(["--plot", str(tmp_path / "p.png")] if argv[0] == "recorded" else []))
    assert "Traceback" not in p.stderr and p.returncode in (0, 1, 2), p.stderr


def test_a_corrupt_results_file_in_a_fresh_process(tmp_path):
    bad = tmp_path / "h100.json"
    bad.write_text("[{]")
    p = _python("-m", "numba_tc", "recorded", env={bench.RESULTS_ENV: str(bad)})
    assert p.returncode == 1 and "is not valid JSON" in p.stderr and "Traceback" not in p.stderr


def test_bench_takes_auto_as_a_variant_in_any_dtype():
    """``bench --variants auto`` times gemm's own choice; its records say what it was (config)."""
    args = cli.build_parser().parse_args(["bench", "--variants", "auto", "hopper", "--dtype", "float16"])
    groups = cli._plan(args, lambda msg: pytest.fail(msg))
    assert [(dt, [v.name for v in vs]) for dt, vs in groups] == [("float16", ["auto", "hopper"])]
    args = cli.build_parser().parse_args(["bench", "--variants", "auto"])
    assert [dt for dt, _ in cli._plan(args, lambda msg: pytest.fail(msg))] == ["bfloat16"]
    assert "config" in bench.Record.__dataclass_fields__
