"""Every code block of README.md runs (issue 21: its kernel example imported a module that no
longer existed).

* ```python blocks: their imports resolve on any machine (cpu); the whole block runs in a fresh
  process in its tier: cpu unless a ``<!-- readme-test: TIER -->`` line precedes it (gpu, sass).
* ```bash blocks: every command is known (each kind has a rule below), refers to files that
  exist, and parses; the cheap ``python -m numba_tc`` commands run for real.
* the test-tier output block adds up, and the ladder tables match benchmarks/results/h100.json.
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
        if rest[0] in CHEAP or "--help" in rest:
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
# figures

def test_the_tier_block_adds_up():
    text = open(README, encoding="utf-8").read()
    block = text.split("**Tests by tier.**")[1].split("```\n")[1]
    lines = block.strip().splitlines()
    tiers = {}
    for line in lines[1:-1]:
        m = re.fullmatch(r"\s*(\w+): (.*)", line)
        assert m, line
        tiers[m.group(1)] = {k: int(n) for n, k in re.findall(r"(\d+) (passed|skipped|failed)(?![^(]*\))",
                                                                m.group(2))}
    assert list(tiers) in (["cpu", "sim", "sass", "gpu"], ["cpu", "sim", "sass", "gpu", "untiered"])
    passed = sum(t.get("passed", 0) for t in tiers.values())
    skipped = sum(t.get("skipped", 0) for t in tiers.values())
    assert re.match(rf"{passed} passed, {skipped} skipped in ", lines[-1]), (lines[-1], passed, skipped)
    assert "failed" not in block


DTYPE = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "tf32": "tf32"}


def tables():
    """Markdown tables with columns like 'bf16 4096^3': (header, rows of cells)."""
    text = open(README, encoding="utf-8").read()
    out, cur = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cur is None:
                cur = (cells, [])
                out.append(cur)
            elif not set("".join(cells)) <= set("-: "):
                cur[1].append(cells)
        else:
            cur = None
    return [t for t in out if any(re.fullmatch(r"(fp32|bf16|fp16|tf32) \d+\^3", h) for h in t[0])]


def test_the_ladder_tables_are_the_records():
    records = json.load(open(os.path.join(ROOT, "benchmarks", "results", "h100.json")))
    rec = {(r["variant"], r["dtype"], r["m"]): r for r in records
           if r.get("layout", "NN") == "NN" and r["m"] == r["n"] == r["k"]}
    ts = tables()
    assert len(ts) == 3
    checked = 0
    for head, rows in ts:
        for cells in rows:
            variant = next(m.group(1) for c in cells for m in [re.fullmatch(r"`(\w+)`", c)] if m)
            for h, c in zip(head, cells):
                col = re.fullmatch(r"(fp32|bf16|fp16|tf32) (\d+)\^3", h)
                if not col:
                    continue
                r = rec.get((variant, DTYPE[col.group(1)], int(col.group(2))))
                if c == "-":
                    continue
                assert r is not None, f"{variant} {h}: no record"
                m = re.fullmatch(r"\**([\d.]+)x(?: \(([\d.]+) TFLOP/s\))?\**", c)
                assert m, c
                assert m.group(1) == f"{r['ratio']:.3f}", f"{variant} {h}: README {m.group(1)}, record {r['ratio']:.3f}"
                if m.group(2):
                    digits = len(m.group(2).split(".")[1]) if "." in m.group(2) else 0
                    assert m.group(2) == f"{r['tflops']:.{digits}f}", f"{variant} {h}: {m.group(2)} vs {r['tflops']}"
                checked += 1
    assert checked >= 40
