"""SASS identity of two trees: proof that a refactor changed no kernel.

For a tree (a checkout holding ``numba_tc/``), ``record`` compiles for sm_90a every kernel of the
Hopper ladder's ahead-of-time lists (``Variant.kernels``, what ``python -m numba_tc compile --arch
sm_90a`` builds for the wgmma variants, their fix-ups and copies included) and of ``gemv``, and the
kernels the top rung's planner picks for a few problems with an epilogue or a batch (staged
epilogue arrays, batched and ping-pong tiles: none is in an ahead-of-time list), into a private
cache folder, and records each one's SASS digest (``cuobjdump -sass``, nothing normalised but
trailing blanks) and cubin digest under a name that survives refactors: the factory's name and
its arguments by parameter name (a kernel spec's fields are read as parameters), not the cubin
key, which hashes the package's sources. It also records what the planners pick (each step's
label and kernel) over a grid of problems against a faked H100, so a refactor of the planner or
the cost model is checked too. ``compare`` reads two records and writes every kernel's verdict
(identical, or differing / missing with the explanation given in ``--explain``) as JSON.

    python benchmarks/sass_identity.py run --old .sass_old --new . --jobs 16 \\
        --out benchmarks/results/sass_identity.json
    python benchmarks/sass_identity.py run --old .sass_old --new . --subset      # every rung and flag once

``--old``: the tree before, e.g. ``git archive main numba_tc | tar -x -C .sass_old`` (an ignored
folder), or a record made before (``.json``). Each tree is recorded in a process of its own (its
``numba_tc`` first on the path), in ``--jobs`` compiler processes; the records are kept in the
``--cache`` folder (``<out's name>.old.json``, ``.new.json``), and a kernel whose cubin key is
unchanged is not compiled again (each tree's cubins are cached there too).
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import inspect
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types

ARCH = "sm_90a"
LADDERS = ("wgmma", "rows")            # the Hopper ladder and gemv (its fix-ups and copies come with it)
H100 = dict(name="NVIDIA H100 80GB HBM3", sms=132)


# ---------------------------------------------------------------------------------------------
# Names that survive a refactor

def _call_fields(text: str):
    """``Name(a=..., b=...)`` -> {a: source of its value, ...}, or None where ``text`` is not a
    call of keywords only (a dataclass's repr)."""
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or node.args or not all(k.arg for k in node.keywords):
        return None
    return {k.arg: ast.get_source_segment(text, k.value) for k in node.keywords}


def _parameters(qual: str):
    """The parameter names of the kernel factory ``qual`` ('fixup.fixup_kernel'; the module
    relative to numba_tc)."""
    import importlib
    mod, name = qual.rsplit(".", 1)
    fn = getattr(importlib.import_module("numba_tc." + mod), name)
    return list(inspect.signature(fn).parameters)


def canonical(key) -> str:
    """A kernel's name from its key: the factory's name and its arguments by parameter name,
    sorted; an argument that is a spec (a ``...Spec(...)`` repr) counts as its fields."""
    qual, args = key[0], key[1:]
    fields = {}
    if len(args) == 1 and (args[0].split("(", 1)[0].endswith("Spec")):
        fields = _call_fields(args[0])
        if fields is None:
            raise ValueError(f"cannot read the spec of {key}")
    else:
        fields = dict(zip(_parameters(qual), args))
    return qual.rsplit(".", 1)[-1] + "(" + ", ".join(f"{k}={fields[k]}" for k in sorted(fields)) + ")"


def _features(name: str):
    """What a subset must cover, of one kernel: its factory, each argument's value, each of its
    configuration's fields' values, and each configuration with each output type and epilogue
    (a configuration's promotion and staging differ by them)."""
    head, _, rest = name.partition("(")
    fields = _call_fields("K(" + rest) or {}
    out = {("factory", head)}
    if "cfg" in fields:
        out |= {("cfg+" + k, fields["cfg"], fields[k]) for k in ("out_dtype", "epi") if k in fields}
    for k, v in fields.items():
        sub = _call_fields(v)
        if sub is not None:
            out |= {(k + "." + f, x) for f, x in sub.items()}
            out.add((k, v))
        else:
            out.add((k, v))
    return out


def subset(names_by_variant):
    """A few kernels that together cover every variant (rung) and every value of every argument
    and configuration field the lists hold: greedy, deterministic."""
    want, owner = set(), {}
    for variant, names in names_by_variant.items():
        for n in names:
            fs = _features(n) | {("variant", variant)}
            owner.setdefault(n, set()).update(fs)
            want |= fs
    chosen = []
    while want:
        best = max(sorted(owner), key=lambda n: len(owner[n] & want))
        chosen.append(best)
        want -= owner[best]
    return chosen


# ---------------------------------------------------------------------------------------------
# One tree's record (runs in a process whose path starts with the tree)

def _fake_driver(driver):
    """The driver's answers an H100 gives, without one (as tests/test_aot_coverage.py's)."""
    fake = dict(load=lambda kernel, dev: types.SimpleNamespace(kernel=kernel, device=dev, max_smem=232448 - 1024),
                sm_count=lambda dev: H100["sms"], occupancy=lambda fn, block, smem=0: 3 if block <= 128 else 1,
                max_active_clusters=lambda fn, block, smem, cluster: H100["sms"] // cluster,
                capability=lambda dev: (9, 0), smem_optin=lambda dev: 232448, device_count=lambda: 1,
                device_name=lambda dev: H100["name"])
    for name, fn in fake.items():
        setattr(driver, name, fn)


def _problems():
    """(label, dtype, A, B, C, kwargs) of the planner grid: shapes of every kind (decode, split,
    tail, ragged, huge K), the four layouts, contiguous, odd and 16-mod-32-byte rows, with and
    without epilogues and batches."""
    from numba_tc.arrays import Matrix
    from numba_tc.batch import Batch
    from numba_tc.epilogue import BLOCK_SCALED, SCALED, Epilogue
    from numba_tc.layout import ITEMSIZE
    shapes = [(1, 4096, 4096), (8, 4096, 11008), (64, 256, 65536), (7, 9, 11), (128, 128, 8192), (96, 5120, 5120),
              (1000, 1000, 32768), (1536, 1536, 1536), (4095, 4097, 4099), (4096, 4096, 4096), (16, 32768, 256),
              (256, 4096, 65536), (4096, 32, 65536), (2048, 192, 8192), (1536, 1536, 16384), (2048, 5120, 5120),
              (2560, 2560, 16384), (16, 256, 65536), (24, 8192, 4096), (3072, 1536, 4096), (3000, 3000, 3000),
              (4104, 4104, 4104), (5000, 3000, 7000)]

    def operand(rows, cols, trans, dtype, pad, base):
        pad = 16 // ITEMSIZE[dtype] if pad == "16 bytes" else pad
        return Matrix(None, rows, cols, max((rows if trans else cols) + pad, 1), trans, dtype, base << 32)
    for dtype, (m, n, k), (ta, tb), pad in itertools.product(("bfloat16", "tf32", "float8_e4m3fn"), shapes,
                                                              itertools.product((False, True), repeat=2),
                                                              (0, 1, "16 bytes")):
        arrays = "float32" if dtype == "tf32" else dtype
        for out in (("bfloat16", "float16", "float32") if dtype.startswith("float8") else (arrays, "float32")):
            a, b = operand(m, k, ta, arrays, pad, 1), operand(k, n, tb, arrays, pad, 2)
            c = operand(m, n, False, out, 0, 3)
            for epi in ((SCALED, BLOCK_SCALED) if dtype.startswith("float8") else (None,)):
                yield (f"{dtype} {m}x{k}{'T' if ta else ''} @ {k}x{n}{'T' if tb else ''} pad {pad} -> {out}"
                       + (f" {epi.scales}" if epi else ""), a, b, c, {"epi": epi} if epi else {})
    # epilogues: staged arrays (16-bit, float32 held in registers), bias and activation on a split
    # and a tail split; batches: short K, one 128-wide column, the model's tile
    staged = [("c bf16 staged", Epilogue(alpha=True, c=("bfloat16", False, True))),
              ("c fp32 staged", Epilogue(c=("float32", False, True))),
              ("bias gelu", Epilogue(bias=("bfloat16", "col"), activation="gelu_tanh", fast=True))]
    for (what, epi), (m, n, k) in itertools.product(staged, [(4096, 4096, 4096), (64, 256, 65536), (2048, 5120, 5120),
                                                            (1024, 1024, 1024)]):
        ops = [operand(r, c_, False, "bfloat16", 0, i + 1) for i, (r, c_) in enumerate(((m, k), (k, n), (m, n)))]
        yield f"bfloat16 {m}x{k} @ {k}x{n} epilogue {what}", *ops, {"epi": epi}
    for count, m, n, k in ((64, 1024, 1024, 128), (16, 2048, 128, 4096), (2, 1536, 1536, 1024), (3, 2056, 3000, 1024)):
        ops = [operand(r, c_, False, "bfloat16", 0, i + 1) for i, (r, c_) in enumerate(((m, k), (k, n), (m, n)))]
        yield f"bfloat16 batched {count} x {m}x{k} @ {k}x{n}", *ops, {"batch": Batch(count, m * k, k * n, m * n)}


def _enumerate(subset_only: bool):
    """{name: kernel} to compile, {name: variants listing it}, and the planner record."""
    import numba_tc
    from numba_tc import build, driver
    _fake_driver(driver)
    kernels, where = {}, {}
    for v in numba_tc.variants():
        if v.ladder not in LADDERS or v.kernels is None:
            continue
        for dt in v.dtypes:
            for k in v.kernels(dt):
                name = canonical(k.key)
                kernels.setdefault(name, k)
                where.setdefault(name, []).append(v.name)
    plans = {}
    top = numba_tc.get_variant("hopper")
    for label, a, b, c, kw in _problems():
        if top.refuses(a, b, c):
            continue
        try:
            steps = top.plan(a, b, c, 0, **kw)
        except (ValueError, TypeError) as e:
            plans[label] = f"refused: {e}"
            continue
        if steps is None:
            plans[label] = None
            continue
        plans[label] = [[st.label, canonical(st.kernel.key), st.grid, st.block, st.smem, st.cluster, st.workspace,
                         st.dependent] for st in steps]
        for st in steps:
            name = canonical(st.kernel.key)
            kernels.setdefault(name, st.kernel)
            where.setdefault(name, ["hopper plan"])
    if subset_only:
        by_variant = {}
        for name, vs in where.items():
            by_variant.setdefault(vs[0], []).append(name)
        keep = set(subset(by_variant))
        kernels = {n: k for n, k in kernels.items() if n in keep}
    assert build                                    # (imported for the workers)
    return kernels, where, plans


_JOBS: list = []
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+\S", re.M)


def _sass(image: bytes) -> str:
    from numba_tc import sass
    exe = sass.find_cuobjdump()
    if exe is None:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(image)
        f.flush()
        env = dict(os.environ, PATH=os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", ""))
        return subprocess.run([exe, "-sass", f.name], check=True, capture_output=True, text=True, env=env).stdout


def _job(i: int):
    from numba_tc import build
    name, kernel = _JOBS[i]
    t = time.perf_counter()
    image = build.cubin(kernel, ARCH)
    text = "\n".join(line.rstrip() for line in _sass(image).splitlines()).strip() + "\n"
    return i, {"sass": hashlib.sha256(text.encode()).hexdigest(), "cubin": hashlib.sha256(image).hexdigest(),
               "instructions": len(_INSTRUCTION.findall(text)),
               "seconds": round(time.perf_counter() - t, 2)}


def record(tree: str, out: str, jobs: int, subset_only: bool) -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    import numba_tc
    here = os.path.dirname(os.path.abspath(numba_tc.__file__))
    if here != os.path.join(os.path.abspath(tree), "numba_tc"):
        raise SystemExit(f"numba_tc imported from {here}, not from the tree {tree}")
    t0 = time.perf_counter()
    kernels, where, plans = _enumerate(subset_only)
    _JOBS[:] = sorted(kernels.items())
    rows = {}
    print(f"{tree}: {len(_JOBS)} kernels, {len(plans)} plans", flush=True)
    n = max(1, min(jobs, len(_JOBS)))
    if n == 1:
        results = map(_job, range(len(_JOBS)))
    else:
        pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
        results = pool.map(_job, range(len(_JOBS)))
    for done, (i, r) in enumerate(results, 1):
        name = _JOBS[i][0]
        rows[name] = dict(r, variants=where[name])
        if done % 25 == 0 or done == len(_JOBS):
            print(f"  {done}/{len(_JOBS)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if n > 1:
        pool.shutdown()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"tree": os.path.abspath(tree), "arch": ARCH, "subset": subset_only, "kernels": rows,
                   "plans": plans, "seconds": round(time.perf_counter() - t0, 1)}, f, indent=1, sort_keys=True)


# ---------------------------------------------------------------------------------------------
# Comparing two records

def _grouped(names):
    """``names`` compactly: per factory and configuration, the arguments all its kernels share
    (``common``) and each kernel's others, and the SHA-256 of the names (the list, exactly)."""
    groups = {}
    for name in names:
        head, _, rest = name.partition("(")
        fields = _call_fields("K(" + rest) or {"": rest[:-1]}
        groups.setdefault((head, fields.pop("cfg", "")), []).append(fields)
    out = []
    for (head, cfg), kernels in sorted(groups.items()):
        common = {k: v for k, v in kernels[0].items() if all(x.get(k) == v for x in kernels)}
        out.append({"factory": head, "cfg": cfg, "common": common, "kernels": sorted(
            ", ".join(f"{k}={v}" for k, v in sorted(x.items()) if k not in common) for x in kernels)})
    return {"sha256_of_names": hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest(), "groups": out}


def compare(old: dict, new: dict, explain: dict) -> dict:
    """Every kernel of either record: identical (same SASS; listed compactly, ``_grouped``), or
    how it differs and why (``explain``: name -> reason); every plan: identical or not."""
    rows, counts, same, cubins = {}, {}, [], 0
    for name in sorted(set(old["kernels"]) | set(new["kernels"])):
        a, b = old["kernels"].get(name), new["kernels"].get(name)
        if a and b:
            verdict = "identical" if a["sass"] == b["sass"] else "sass differs"
            cubins += a["cubin"] == b["cubin"]
        else:
            verdict = "only before" if a else "only after"
        counts[verdict] = counts.get(verdict, 0) + 1
        if verdict == "identical":
            same.append(name)
        else:
            rows[name] = {"verdict": verdict, "variants": (b or a)["variants"], "explained": explain.get(name)}
    plans = {}
    for label in sorted(set(old["plans"]) | set(new["plans"])):
        a, b = old["plans"].get(label, "absent"), new["plans"].get(label, "absent")
        plans[label] = "identical" if a == b else {"before": a, "after": b}
    return {"arch": ARCH, "subset": old.get("subset") or new.get("subset"), "counts": counts,
            "cubins_identical": cubins, "unexplained": [n for n, r in rows.items() if not r["explained"]],
            "plans_compared": len(plans), "plans_differing": sorted(k for k, v in plans.items() if v != "identical"),
            "plan_differences": {k: v for k, v in plans.items() if v != "identical"}, "differing": rows,
            "identical": _grouped(same)}


# ---------------------------------------------------------------------------------------------
# The command line

def _record_in(tree: str, out: str, jobs: int, subset_only: bool, cache: str) -> None:
    """``record`` in a process of its own, ``tree``'s numba_tc first on its path, its cubins in a
    cache folder of its own (the key hashes the tree's sources: an unchanged tree reuses them)."""
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               NUMBA_TC_CACHE_DIR=cache)
    cmd = [sys.executable, os.path.abspath(__file__), "record", tree, out, "--jobs", str(jobs)] + \
        ["--subset"] * subset_only
    subprocess.run(cmd, check=True, env=env)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="one tree's record (run with the tree first on PYTHONPATH)")
    r.add_argument("tree")
    r.add_argument("out")
    r.add_argument("--jobs", type=int, default=1)
    r.add_argument("--subset", action="store_true")
    c = sub.add_parser("compare", help="two records -> the verdicts")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--out", default="benchmarks/results/sass_identity.json")
    c.add_argument("--explain", help="JSON: kernel name -> why its SASS differs")
    run = sub.add_parser("run", help="record both trees, then compare")
    run.add_argument("--old", required=True, help="the tree before, or its record (.json)")
    run.add_argument("--new", default=".", help="the tree after, or its record")
    run.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    run.add_argument("--subset", action="store_true", help="a few kernels covering every rung and flag")
    run.add_argument("--out", default="benchmarks/results/sass_identity.json")
    run.add_argument("--explain")
    run.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "numba_tc_sass_identity"),
                     help="private cubin caches, one folder per tree")
    args = p.parse_args(argv)
    if args.cmd == "record":
        record(args.tree, args.out, args.jobs, args.subset)
        sys.stdout.flush()
        os._exit(0)             # (the record is written; tearing down a process of 1,243 kernels took minutes)
    if args.cmd == "run":
        stem = os.path.join(args.cache, os.path.splitext(os.path.basename(args.out))[0] + ".subset" * args.subset)
        recs = []
        for which, tree in (("old", args.old), ("new", args.new)):
            path = f"{stem}.{which}.json"
            if tree.endswith(".json"):          # a record made before
                recs.append(tree)
                continue
            tag = hashlib.sha256(os.path.abspath(tree).encode()).hexdigest()[:12]
            _record_in(tree, path, args.jobs, args.subset, os.path.join(args.cache, tag))
            recs.append(path)
        args.old, args.new = recs
    old, new = (json.load(open(x)) for x in (args.old, args.new))
    result = compare(old, new, json.load(open(args.explain)) if args.explain else {})
    result["trees"] = {"before": old["tree"], "after": new["tree"]}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    print(f"{args.out}: {result['counts']}; {len(result['unexplained'])} unexplained; "
          f"{len(result['plans_differing'])} of {result['plans_compared']} plans differ")
    return 1 if result["unexplained"] or result["plans_differing"] else 0


if __name__ == "__main__":
    sys.exit(main())
