"""Every code block of README.md runs (issue 21: its kernel example imported a module that no
longer existed), and every figure in it is the records' (issue 55).

* ```python blocks: their imports resolve on any machine (cpu); the whole block runs in a fresh
  process in its tier: cpu unless a ``<!-- readme-test: TIER -->`` line precedes it (gpu, sass).
* ```bash blocks: every command is known (each kind has a rule below), refers to files that
  exist, and parses; the cheap ``python -m numba_tc`` commands run for real.
* the generated blocks (``<!-- records:NAME -->``) hold what ``python benchmarks/records.py readme``
  writes from benchmarks/results; the prose outside them and outside code holds no figure; the
  README reads in five minutes; the records name their GPU and a clean commit; every results file
  is in the index, and every one cited in the tree is there or in git.
"""
import ast
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
FENCE = re.compile(r"(?:<!-- readme-test: (\w+) -->\n)?```(\w*)\n(.*?)```", re.S)
OPTIONAL = {"torch", "cupy"}            # imports a block may use that a CPU machine may lack


def blocks():
    """(language, code, tier, line) of each fenced block of README.md."""
    text = open(README, encoding="utf-8").read()
    out = []
    for m in FENCE.finditer(text):
        tier, lang, code = m.group(1) or "cpu", m.group(2), m.group(3)
        out.append((lang, code, tier, text.count("\n", 0, m.start(3)) + 1))
    return out


def _id(b):
    return f"{b[0] or 'text'}-line{b[3]}"


PYTHON = [b for b in blocks() if b[0] == "python"]
BASH = [b for b in blocks() if b[0] == "bash"]
TIER_MARK = {"cpu": pytest.mark.cpu, "gpu": pytest.mark.gpu, "sass": pytest.mark.sass}


def _env():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               MPLBACKEND="Agg")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    return env


def _run(args, timeout=600, cwd=None):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=_env(),
                          timeout=timeout, cwd=cwd or ROOT)


def test_readme_has_code_blocks_and_every_fence_is_understood():
    bs = blocks()
    assert len(PYTHON) >= 5 and len(BASH) >= 4
    for lang, _, tier, line in bs:
        assert lang in ("python", "bash", ""), f"README line {line}: a ```{lang} block no test reads"
        assert tier in TIER_MARK, f"README line {line}: unknown tier {tier}"


PEER_OF = {"numba_tc.torch": "torch"}      # our modules that import an optional package


@pytest.mark.parametrize("block", PYTHON, ids=_id)
def test_python_block_imports_resolve(block):
    """Without running the block: every module it imports exists and every name it takes from
    one is there (the stale ``from numba_tc.link import ...`` failed here)."""
    tree = ast.parse(block[1])

    def absent(name):        # an optional package, or a module of ours built on one, without it here
        root = PEER_OF.get(name, name.split(".")[0])
        if root in OPTIONAL and importlib.util.find_spec(root) is None:
            assert name not in PEER_OF or importlib.util.find_spec(name.split(".")[0]), name
            return True
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not absent(alias.name):
                    importlib.import_module(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if absent(node.module):
                continue
            mod = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(mod, alias.name) or importlib.util.find_spec(f"{node.module}.{alias.name}"), \
                    f"README line {block[3]}: {node.module} has no {alias.name}"


@pytest.mark.parametrize("block", [pytest.param(b, marks=TIER_MARK[b[2]], id=_id(b)) for b in PYTHON])
def test_python_block_runs(block, tmp_path):
    lang, code, tier, line = block
    p = _run(["-c", code], cwd=str(tmp_path))
    assert p.returncode == 0, f"README line {line} ({tier}):\n{p.stdout}\n{p.stderr}"
    assert not list(tmp_path.iterdir()), "the block left files behind"
    if "sass.compile_cubin" in code:              # the summary, not ~520 KB of cubin and SASS
        assert p.stdout.startswith("Cubin(sm_90a, ") and len(p.stdout) < 600, p.stdout[:1000]
    if "v.describe()" in code:
        assert "mma_tuned" in p.stdout and "config: MmaConfig(" in p.stdout


# ---------------------------------------------------------------------------------------------
# bash blocks: one rule per kind of command

def commands(code: str):
    """The commands of a bash block: comments dropped, ``a && b`` split, ``VAR=x`` prefixes
    separated. Yields (env assignments, argv)."""
    for raw in code.splitlines():
        words = shlex.split(raw, comments=True)
        cmd = []
        for w in words + ["&&"]:
            if w == "&&":
                env = {}
                while cmd and re.fullmatch(r"[A-Z_]+=.*", cmd[0]):
                    k, v = cmd.pop(0).split("=", 1)
                    env[k] = v
                if cmd:
                    yield env, cmd
                cmd = []
            else:
                cmd.append(w)


def _pyproject():
    import tomllib
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)


# numba_tc commands run for real here: cheap on any machine, and they touch nothing outside a
# temporary directory; the others are parsed only (bench, compile and demo are tested in
# test_cli.py; the main job is too)
CHEAP = {"list", "recorded", "-h", "--help"}


def check_command(env, argv, tmp_path) -> str:
    """Check one README command; returns what was done."""
    prog = argv[0]
    if prog == "uv" and argv[1:2] == ["run"]:          # uv run [--extra X]... COMMAND: the extras exist
        extras = _pyproject()["project"].get("optional-dependencies", {})
        rest = argv[2:]
        while rest and rest[0] == "--extra":
            assert rest[1] in extras, f"no extra {rest[1]}"
            rest = rest[2:]
        return "uv: " + check_command(env, rest, tmp_path)
    if prog in ("python", "python3") and argv[1:3] == ["-m", "numba_tc"]:
        from numba_tc import __main__ as cli
        rest = argv[3:]
        if not rest:
            return "the main job: tested in test_cli.py"
        if rest[0].startswith("-") and rest[0] not in ("-h", "--help"):
            rest = [cli.DEFAULT_COMMAND] + rest
        if rest[0] not in ("-h", "--help"):
            args = cli.build_parser().parse_args(rest)   # an argument error exits with status 2
            for a in getattr(args, "arch", None) or []:
                cli.check_arch(a, cli.supported_archs())  # a target this toolchain builds
        if rest[0] in CHEAP or "--help" in rest or "--dry-run" in rest:
            extra = ["--plot", str(tmp_path / "p.png")] if rest[0] == "recorded" else []
            p = _run(["-m", "numba_tc", *rest, *extra], cwd=str(tmp_path))
            assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
            return "ran"
        return "parsed"
    if prog in ("python", "python3") and argv[1:2] == ["-m"]:
        mod = argv[2]
        if mod == "venv":
            return "venv"
        if mod == "pytest":
            marks = [argv[i + 1] for i, a in enumerate(argv) if a == "-m" and i > 1]
            declared = [m.split(":")[0] for m in _pyproject()["tool"]["pytest"]["ini_options"]["markers"]]
            assert all(m in declared for m in marks[1:]), marks
            return "pytest"
        assert importlib.util.find_spec(mod) is not None, f"no module {mod}"
        return "module exists"
    if prog in ("python", "python3", "torchrun"):
        script = next(a for a in argv[1:] if a.endswith(".py"))
        path = os.path.join(ROOT, script)
        assert os.path.exists(path), f"{script} does not exist"
        compile(open(path, encoding="utf-8").read(), path, "exec")
        return "script compiles"
    if prog == "bash":
        path = os.path.join(ROOT, argv[1])
        assert os.path.exists(path), f"{argv[1]} does not exist"
        assert subprocess.run(["bash", "-n", path]).returncode == 0, f"{argv[1]} does not parse"
        return "script parses"
    if prog == "pip":
        extras = _pyproject()["project"].get("optional-dependencies", {})
        for a in argv:
            m = re.fullmatch(r"\.?\[([\w,]+)\]", a.lstrip("."))
            if m:
                for extra in m.group(1).split(","):
                    assert extra in extras or extra == "cublas" and "cublas" in extras, f"no extra {extra}"
        return "extras exist"
    if prog == "jupyter":
        assert os.path.isdir(os.path.join(ROOT, argv[-1])), argv
        return "directory exists"
    if prog == ".":                                    # . .venv/bin/activate
        return "source"
    raise AssertionError(f"no rule for the README command {' '.join(argv)!r}: add one to tests/test_readme.py")


@pytest.mark.parametrize("block", BASH, ids=_id)
def test_bash_block_commands(block, tmp_path):
    done = [check_command(env, argv, tmp_path) for env, argv in commands(block[1])]
    assert done, f"README line {block[3]}: an empty bash block"


def test_bash_rules_refuse_what_they_do_not_know(tmp_path):
    with pytest.raises(AssertionError, match="no rule"):
        check_command({}, ["rm", "-rf", "/"], tmp_path)
    with pytest.raises(SystemExit):
        check_command({}, ["python", "-m", "numba_tc", "bench", "--sizes", "4x4"], tmp_path)
    with pytest.raises(ValueError, match="sm_75"):
        check_command({}, ["python", "-m", "numba_tc", "compile", "--arch", "sm_35"], tmp_path)
    with pytest.raises(AssertionError, match="does not exist"):
        check_command({"OUT": "x"}, ["bash", "benchmarks/nosuch.sh"], tmp_path)


# ---------------------------------------------------------------------------------------------
# figures: from the records, through the tool that writes them

def _records_tool():
    spec = importlib.util.spec_from_file_location("records", os.path.join(ROOT, "benchmarks", "records.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_generated_blocks_are_what_the_records_say():
    """The headline table, the ladders, the compile and suite figures: exactly what
    ``python benchmarks/records.py readme`` writes (run it after a records file changes)."""
    records = _records_tool()
    text = open(README, encoding="utf-8").read()
    names = [m.group(2) for m in records.BLOCK.finditer(text)]
    assert sorted(names) == sorted(records.blocks()), names
    assert records.render(text, records.blocks()) == text, "README.md is stale: python benchmarks/records.py readme"
    assert os.path.exists(os.path.join(ROOT, records.PICTURE)) and records.PICTURE in text


def test_the_tool_takes_the_newest_gpu_and_says_which(tmp_path, monkeypatch):
    """A newer GPU's records replace an older one's row by row, labelled with their GPU."""
    records = _records_tool()
    old = {"variant": "hopper", "ladder": "wgmma", "dtype": "bfloat16", "m": 8192, "n": 8192, "k": 8192,
           "ratio": 1.0, "tflops": 700.0, "layout": "NN", "gpu": "NVIDIA H100 80GB HBM3", "commit": "aaaaaaa"}
    new = dict(old, ratio=1.25, tflops=900.0, gpu="NVIDIA H200", commit="bbbbbbb")
    for name, rows in (("h100.json", [old]), ("h200.json", [new])):
        (tmp_path / name).write_text(json.dumps(rows))
    monkeypatch.setattr(records, "RESULTS", str(tmp_path))
    table, bars = records.headline()
    assert "| **1.250x** (900 TFLOP/s) | cuBLAS | H200, bbbbbbb |" in table and "1.000x" not in table
    (tmp_path / "h200.json").unlink()
    assert "| H100, aaaaaaa |" in records.headline()[0]


# a figure: a number with a unit of time, speed, size or ratio
FIGURE = re.compile(r"(?<![\w.^])\d[\d,.]*\s?(?:x|%|TFLOP/s|TB/s|GB/s|GB|MB|KB|ms|us|µs|s|min|minutes|hours|h|"
                    r"tokens/s|W|MHz|GHz)(?![\w/])")


def _prose():
    """README.md without its code blocks and generated blocks."""
    records = _records_tool()
    text = records.BLOCK.sub("", open(README, encoding="utf-8").read())
    return FENCE.sub("", text)


def test_no_figure_outside_the_generated_blocks():
    found = FIGURE.findall(_prose())
    assert not found, f"figures in README prose (put them in a generated block, from the records): {found}"
    assert FIGURE.findall("ran 1.014x faster in 3 min, 48 TFLOP/s") and not FIGURE.findall("sm_90a, 64x8 tiles, 4096^3")


def test_the_readme_reads_in_five_minutes():
    text = open(README, encoding="utf-8").read()
    assert len(text.split()) <= 2800, len(text.split())
    assert "session" not in text.lower()
    head = "\n".join(text.splitlines()[:40])
    assert "ladder" in head and "rung" in head                                # what it is
    assert "<!-- records:headline -->" in head and "![" in head               # where it stands
    assert "uv run --extra bench python -m numba_tc" in head and "python -m pytest" in head   # the two commands


def test_every_record_names_its_gpu_and_a_clean_commit():
    assert _records_tool().problems() == []


RESULTS = os.path.join(ROOT, "benchmarks", "results")
HISTORY = "4dce1f6"       # the last commit that held every log and script moved out of the tree


def test_the_results_index_lists_every_file_and_no_other():
    index = open(os.path.join(RESULTS, "README.md"), encoding="utf-8").read()
    listed = set(re.findall(r"^\| `([^`]+)` \|", index, re.M))
    here = set(os.listdir(RESULTS)) - {"README.md"}
    assert here - listed == set(), f"not in benchmarks/results/README.md: {sorted(here - listed)}"
    to_come = {f for f in listed - here if "h200" in f}          # the current GPU's, listed before measured
    assert listed - here - to_come == set(), f"listed but not in benchmarks/results: {sorted(listed - here)}"
    assert len(os.listdir(RESULTS)) <= 60 and len([f for f in os.listdir(os.path.dirname(RESULTS))
                                                   if os.path.isfile(os.path.join(RESULTS, "..", f))]) <= 20


def _cited():
    """(file, name) for every benchmarks/results file and benchmarks script cited in the tree."""
    pat = re.compile(r"(?:results/|benchmarks/)([\w.-]+\.(?:log|json|txt|png|py|sh))")
    out = set()
    for d in ("numba_tc", "tests", "notebooks", "benchmarks", "examples"):
        for dirpath, dirs, files in os.walk(os.path.join(ROOT, d)):
            dirs[:] = [x for x in dirs if x != "__pycache__"]
            for f in files:
                if f.endswith((".py", ".md", ".ipynb", ".cu", ".sh")):
                    text = open(os.path.join(dirpath, f), encoding="utf-8").read()
                    out |= {(os.path.relpath(os.path.join(dirpath, f), ROOT), m) for m in pat.findall(text)}
    for f in ("README.md", "ARCHITECTURE.md"):
        out |= {(f, m) for m in pat.findall(open(os.path.join(ROOT, f), encoding="utf-8").read())}
    return out


def test_every_cited_results_file_or_script_is_here_or_in_git():
    """A log or script cited anywhere is in the tree, or at HISTORY (git show HISTORY:benchmarks/...),
    as benchmarks/results/README.md says."""
    if not os.path.isdir(os.path.join(ROOT, ".git")) and not os.path.isfile(os.path.join(ROOT, ".git")):
        pytest.skip("no git checkout")
    have = subprocess.run(["git", "ls-tree", "-r", "--name-only", HISTORY, "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True)
    if have.returncode:
        pytest.skip(f"commit {HISTORY} is not in this clone")
    old = {os.path.basename(p) for p in have.stdout.split()}
    now = set(os.listdir(RESULTS)) | set(os.listdir(os.path.dirname(RESULTS)))
    for f in ("README.md", "ARCHITECTURE.md", os.path.join("benchmarks", "NOTES.md"),
              os.path.join("benchmarks", "results", "README.md")):      # "git show SHA:benchmarks/X" at its SHA
        for sha, path in re.findall(r"git show (\w+):(benchmarks/[\w./-]+)", open(os.path.join(ROOT, f)).read()):
            if "<" not in path and not path.endswith("/"):
                p = subprocess.run(["git", "cat-file", "-e", f"{sha}:{path}"], cwd=ROOT, capture_output=True)
                assert p.returncode == 0, f"{f}: git show {sha}:{path} does not exist"
                now.add(os.path.basename(path))
    generated = re.compile(r"^(?:\w+_)?h\d00(?:x\d)?\.json$|^(?:compile|suite_time|mutation|headline)\.")
    missing = sorted((f, n) for f, n in _cited() if n not in now and n not in old and not generated.match(n)
                     and "nosuch" not in n and "<" not in n)
    assert not missing, f"cited, but neither in the tree nor at {HISTORY}: {missing}"
