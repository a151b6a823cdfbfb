"""The mutation check's list (benchmarks/mutation.py) is armed: every mutant's snippet occurs
exactly once in the source as it is now, as whole lines (a refactor that moves it fails here, not
silently in the mutation run), its replacement differs and still parses (a mutant that breaks
the module's import fails no test), and the tests it names exist."""
import ast
import importlib.util
import os
import sys

import pytest

pytestmark = pytest.mark.cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _mutation():
    spec = importlib.util.spec_from_file_location("mutation", os.path.join(ROOT, "benchmarks", "mutation.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod                # (dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


mutation = _mutation()


@pytest.mark.parametrize("m", mutation.MUTANTS, ids=lambda m: m.name)
def test_every_snippet_still_matches_the_source(m):
    src = open(os.path.join(ROOT, m.file)).read()
    mutated = mutation.apply(src, m)            # raises unless each snippet occurs exactly once
    assert mutated != src
    if m.file.endswith(".py"):                  # a mutant that breaks the module tests nothing
        ast.parse(mutated, m.file)
    for snippet, _ in m.edits:                  # whole lines, not a line's indented tail
        at = src.index(snippet)
        assert at == 0 or src[at - 1] == "\n" or not snippet[:1].isspace(), (m.name, snippet)
    assert m.tier in mutation.TIERS
    for t in m.tests:
        assert os.path.exists(os.path.join(ROOT, t.split("::")[0])), t


def test_the_list_meets_the_bar():
    names = [m.name for m in mutation.MUTANTS]
    assert len(names) == len(set(names)) and len(names) >= 15
    assert sum(m.tier in ("cpu", "sim", "sass") for m in mutation.MUTANTS) >= 5


def test_recorded_verdicts_name_known_mutants():
    path = os.path.join(ROOT, "benchmarks", "results", "mutation.json")
    if not os.path.exists(path):
        pytest.skip("no recorded mutation run")
    import json
    rows = json.load(open(path))
    known = {m.name for m in mutation.MUTANTS}
    for r in rows:
        assert set(r) >= {"mutant", "tier", "caught", "test", "commit", "command"}
        assert r["mutant"] in known, r["mutant"]
