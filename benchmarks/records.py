"""The committed records and what the README says of them: one tool for both.

    python benchmarks/records.py readme           # rewrite README.md's generated blocks (and the
                                                  # headline picture) from benchmarks/results
    python benchmarks/records.py readme --check   # exit 1 where README.md differs from the records
    python benchmarks/records.py check            # every record names its GPU and a clean commit
    NUMBA_TC_COMMIT=<sha> python benchmarks/records.py measure --out DIR [--parts ...]   # on a GPU:
                                                  # this GPU's records into DIR, to copy here

Each GPU's records are files named for it (``h200.json``: ladders and sweeps; ``features_h200.json``,
``torch_h200.json``, ...; ``numba_tc.bench.GPUS``, newest first). Every figure of the README's
generated blocks is taken from the newest GPU that has a record for it, and says which GPU and
commit; older GPUs' files stay as history. tests/test_readme.py checks that README.md holds
exactly what ``readme`` would write, and that its prose outside those blocks holds no figures.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
from typing import Callable, Dict, List, NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
README = os.path.join(ROOT, "README.md")
PICTURE = "benchmarks/results/headline.png"
sys.path.insert(0, ROOT)
from numba_tc.bench import GPUS, results_name  # noqa: E402  (the package of this checkout)

# a generated block: <!-- records:NAME --> ... <!-- records:end -->
BLOCK = re.compile(r"(<!-- records:(\w+) -->\n)(.*?)(<!-- records:end -->)", re.S)


def load(name: str) -> List[dict]:
    path = os.path.join(RESULTS, name)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)
    return rows if isinstance(rows, list) else [rows]


def short_gpu(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100"; a name without a known model as it is."""
    m = re.search(r"\b(GH200|[HAB]\d{2,3}|L40S?|L4|RTX \w+)\b", name or "")
    return m.group(1) if m else (name or "?")


def gpu_of(r: dict, gpu: str) -> str:
    """A record's GPU: its ``gpu`` field, else ``device``, else the file's GPU."""
    return short_gpu(r.get("gpu") or r.get("device") or gpu.upper())


def short(c: str) -> str:
    sha, plus, rest = str(c).partition("+")
    return sha[:7] + plus + rest


def geomean(xs: List[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def newest(kind: str, pick: Callable[[dict], bool]):
    """(gpu, records) of the newest GPU with records of ``kind`` that ``pick`` takes, or (None, [])."""
    for gpu in GPUS:
        rows = [r for r in load(results_name(kind, gpu)) if pick(r)]
        if rows:
            return gpu, rows
    return None, []


def where(gpu: str, rows: List[dict]) -> str:
    gpus = sorted({gpu_of(r, gpu) for r in rows})
    commits = list(dict.fromkeys(short(r["commit"]) for r in rows))
    return f"{', '.join(gpus)}, {', '.join(commits)}"


# ---------------------------------------------------------------------------------------------
# The headline table: one row per claim, each from the newest GPU's records

class Row(NamedTuple):
    what: str                    # markdown
    problem: object              # str, or records -> str
    kind: str                    # records file kind ("" for <gpu>.json)
    pick: Callable[[dict], bool]
    value: Callable[[List[dict]], tuple]    # records -> (text, ratio or None for the picture)
    reference: str
    latest: bool = False         # only the records of the newest record's commit


def _nn(r):
    return r.get("layout", "NN") in ("NN", None)


def ladder(variant, dtype, size):
    return lambda r: (r.get("variant") == variant and r.get("dtype") == dtype and _nn(r)
                      and (r["m"], r["n"], r["k"]) == (size,) * 3 and r.get("ratio"))


def one_ratio(rows, tflops=True):
    r = rows[-1]
    extra = f" ({r['tflops']:.0f} TFLOP/s)" if tflops and r.get("tflops") else ""
    return f"**{r['ratio']:.3f}x**{extra}", r["ratio"]


def sweep(rows):
    ratios = [r["ratio"] for r in rows]
    g = geomean(ratios)
    return f"**{g:.3f}x** geomean, lowest {min(ratios):.3f}", g


def shapes(what):
    return lambda rows: f"{len({(r.get('batch'), r['m'], r['n'], r['k']) for r in rows})} {what}"


def feature(name, m=None, scaling=None, residual=None, layout=None):
    def pick(r):
        return (r.get("feature") == name and (m is None or (r["m"], r["n"], r["k"]) == m)
                and (scaling is None or r.get("scaling") == scaling)
                and (residual is None or r.get("residual") == residual)
                and (layout is None or r.get("layout") == layout) and r.get("ratio"))
    return pick


def overhead(rows):
    r = rows[-1]
    return f"**+{100 * r['overhead']:.1f}%** time over the plain product", None


def tokens(rows):
    r = rows[-1]
    return f"**{r['ratio']:.3f}x** tokens/s", r["ratio"]


def span(label, key="ratio"):
    """The lowest and highest ratio (field ``key``), then each record's (its ``label`` and ratio)."""
    def value(rows):
        ratios = [r[key] for r in rows]
        each = ", ".join(f"{label(r) if callable(label) else r[label]} {r[key]:.2f}" for r in rows)
        return f"**{min(ratios):.2f}-{max(ratios):.2f}x** ({each})", geomean(ratios)
    return value


def sampled(subset, what):
    def value(rows):
        r = rows[-1]
        return f"**{r['geomean']:.3f}x** geomean, 10th percentile {r['p10']:.3f} ({r['count']} {what})", r["geomean"]
    return value


HEADLINE = [
    Row("`gemm` (`variant=\"auto\"`), bf16", shapes("shapes: square, ragged, decode, huge K"), "",
        lambda r: r.get("variant") == "auto" and r.get("dtype") == "bfloat16" and _nn(r) and r.get("ratio"),
        sweep, "cuBLAS"),
    Row("`gemm`, fp16", shapes("shapes, the same"), "",
        lambda r: r.get("variant") == "auto" and r.get("dtype") == "float16" and _nn(r) and r.get("ratio"),
        sweep, "cuBLAS"),
    Row("`gemm`, fp32 arrays as tf32 (`allow_tf32=True`)", shapes("shapes, the same"), "",
        lambda r: r.get("variant") == "auto" and r.get("dtype") == "tf32" and _nn(r) and r.get("ratio"),
        sweep, "cuBLAS TF32"),
    Row("Hopper ladder, top rung `hopper`, bf16", "8192^3", "", ladder("hopper", "bfloat16", 8192),
        one_ratio, "cuBLAS"),
    Row("mma.sync ladder, top rung `mma_tuned`, bf16", "8192^3", "", ladder("mma_tuned", "bfloat16", 8192),
        one_ratio, "cuBLAS"),
    Row("SIMT ladder, top rung `warptile`, fp32", "4096^3", "", ladder("warptile", "float32", 4096),
        one_ratio, "cuBLAS FP32 (TF32 off)"),
    Row("fp8 e4m3, per-tensor scales", "8192^3", "features", feature("fp8", (8192,) * 3, "tensor", layout="tn"),
        lambda rows: one_ratio(rows, False), "`torch._scaled_mm`"),
    Row("fp8 e4m3, block-wise scales (1x128, 128x128)", "8192^3", "features",
        feature("fp8", (8192,) * 3, "block", layout="tn"), lambda rows: one_ratio(rows, False),
        "`torch._scaled_mm`, block-wise"),
    Row("fused bias + GELU", "4096x11008x4096", "features", feature("bias_gelu", (4096, 11008, 4096)),
        lambda rows: one_ratio(rows, False), "cuBLASLt's fused epilogue"),
    Row("your epilogue: `acc + 0.5 * res[row, col]`, bf16 `res`", "4096^3", "features",
        lambda r: r.get("feature") == "custom_epilogue" and r.get("residual") == "bfloat16"
        and (r["m"], r["n"], r["k"]) == (4096,) * 3, overhead, "the plain product"),
    Row("batched products", shapes("shapes, attention- and MoE-like"), "features", feature("batched"),
        lambda rows: (f"**{geomean([r['ratio'] for r in rows]):.3f}x** geomean, lowest "
                      f"{min(r['ratio'] for r in rows):.3f}", geomean([r["ratio"] for r in rows])), "`torch.bmm`"),
    Row("real models' training steps, every linear layer patched", "GPT-2 small, BERT-base, a Llama-style "
        "decoder, ViT-B/16; bf16 autocast, AdamW", "models", lambda r: r.get("kind") == "train" and r.get("ratio"),
        span("model"), "the same model in torch", True),
    Row("products drawn as real models make them (the sampler)", "linear layers' forward, dX and dW; bf16",
        "models", lambda r: r.get("kind") == "sampled" and r.get("subset") == "2d" and r.get("dtype") == "bfloat16",
        sampled("2d", "problems"), "cuBLAS", True),
    Row("attention-shaped batched products (the sampler)", "any sequence length; bf16", "models",
        lambda r: r.get("kind") == "sampled" and r.get("subset") == "attention" and r.get("dtype") == "bfloat16",
        sampled("attention", "problems"), "`torch.bmm`", True),
    Row("int4 weights (group 128) x bf16 activations, batch 1", "4 Llama-class weights, 4096^2 to 8192x28672",
        "features", lambda r: r.get("feature") == "quantized" and r.get("format") == "int4" and r.get("batch") == 1
        and r.get("group") == 128, span(lambda r: f"{r['k']}x{r['n']}", "ratio_bf16"), "cuBLAS bf16 on the dequantized weight", True),
    Row("GPT-2 small training step, every linear layer patched",
        lambda rows: f"bf16 autocast, {rows[-1]['tokens_per_step']} tokens a step", "torch",
        lambda r: r.get("kind") == "train", lambda rows: one_ratio(rows, False), "the same model in torch"),
    Row("GPT-2 small greedy decoding, patched", "batch 1", "torch",
        lambda r: r.get("kind") == "generate" and r.get("batch") == 1, tokens, "the same model in torch"),
]


def headline():
    """(markdown table, [(label, ratio, gpu)] for the picture)."""
    lines = ["| what | problem | speed | against | GPU, commit |", "| --- | --- | --- | --- | --- |"]
    bars = []
    for row in HEADLINE:
        gpu, rows = newest(row.kind, row.pick)
        if not rows:
            continue
        if row.latest:
            rows = [r for r in rows if r["commit"] == rows[-1]["commit"]]
        text, ratio = row.value(rows)
        problem = row.problem(rows) if callable(row.problem) else row.problem
        lines.append(f"| {row.what} | {problem} | {text} | {row.reference} | {where(gpu, rows)} |")
        if ratio is not None:
            bars.append((re.sub(r"[`*]", "", row.what), ratio, gpu_of(rows[-1], gpu)))
    return "\n".join(lines), bars


LADDERS = [("simt", "SIMT (CUDA cores)", "float32", "fp32"), ("mma", "mma.sync (tensor cores)", "bfloat16", "bf16"),
           ("wgmma", "Hopper (TMA + wgmma)", "bfloat16", "bf16")]


def ladders(size=4096):
    """Every rung of each ladder, bottom to top, with its ratio to cuBLAS at ``size``^3."""
    from numba_tc import variants
    lines = [f"| ladder | its rungs, bottom to top: speed against cuBLAS at {size}^3 | GPU, commit |",
             "| --- | --- | --- |"]
    for ladder_name, title, dtype, short_dt in LADDERS:
        names = [v.name for v in variants(ladder=ladder_name)]
        gpu, rows = newest("", lambda r: r.get("ladder") == ladder_name and r.get("dtype") == dtype and _nn(r)
                           and (r["m"], r["n"], r["k"]) == (size,) * 3 and r.get("ratio"))
        if not rows:
            continue
        by = {r["variant"]: r for r in rows}
        cells = [f"`{n}` {by[n]['ratio']:.3f}" for n in names if n in by]
        cells[-1] = f"**{cells[-1]}**"
        lines.append(f"| {title}, {short_dt} | {', '.join(cells)} | {where(gpu, list(by.values()))} |")
    return "\n".join(lines)


def _duration(s: float) -> str:
    return f"{s:.0f} s" if s < 600 else f"{s / 60:.0f} min"


def compile_times():
    """What the compile records say: the latest record of each machine."""
    recs = load("compile.json")
    latest: Dict[str, dict] = {}
    for r in recs:
        latest[r["machine"] + str(r.get("gpu"))] = r
    out = []
    for r in latest.values():
        on = f"a machine with an {short_gpu(r['gpu'])} and {r['machine']}" if r.get("gpu") else \
            f"a machine without a GPU ({r['machine']})"
        command = re.sub(r" --no-progress| --json \S+", "", r["command"])
        note = f"; {r['note']}" if r.get("note") else ""
        out.append(f"`{command}` on {on}: {r['kernels']} kernels in {_duration(r['seconds'])} "
                   f"(commit {short(r['commit'])}{note}).")
    return "\n".join(out) or "(no compile records yet: python -m numba_tc compile --json benchmarks/results/compile.json)"


def suite():
    recs = load("suite_time.json")
    if not recs:
        return "(no suite record yet)"
    r = recs[-1]
    counts = ", ".join(f"{r[k]} {k}" for k in ("passed", "skipped", "failed") if r.get(k))
    seconds = r.get("seconds", r.get("wall_s"))
    return (f"`{r['command']}`: {counts} in {_duration(seconds)} on {r['machine']} "
            f"(commit {short(r['commit'])}{'; ' + r['note'] if r.get('note') else ''}).")


def blocks() -> Dict[str, str]:
    """Each generated block's text, by name."""
    table, _ = headline()
    return {"headline": table, "ladders": ladders(), "compile": compile_times(), "suite": suite()}


def render(text: str, made: Dict[str, str]) -> str:
    """``text`` with each generated block's body replaced by what the records say."""
    def sub(m):
        name = m.group(2)
        if name not in made:
            raise KeyError(f"README block records:{name}: no such generated block ({', '.join(made)})")
        return m.group(1) + made[name] + "\n" + m.group(4)
    return BLOCK.sub(sub, text)


def draw(bars, path):
    """The headline picture: each claim's speed ratio, 1.0 marked."""
    from matplotlib.figure import Figure
    fig = Figure(figsize=(9, 0.42 * len(bars) + 1.2))
    ax = fig.subplots()
    labels = [f"{b[0]} ({b[2]})" for b in bars][::-1]
    values = [b[1] for b in bars][::-1]
    ax.barh(range(len(bars)), values, color=["C2" if v >= 1 else "C0" for v in values])
    for i, v in enumerate(values):
        ax.text(v + 0.01, i, f"{v:.3f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlim(0, max(values) * 1.15)
    ax.set_xlabel("speed against the reference (1.0: the same; see the table for each reference)")
    ax.set_title("numba_tc against cuBLAS and torch, from benchmarks/results", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(ROOT, path), dpi=110)


# ---------------------------------------------------------------------------------------------
# check: every record names its GPU and the commit it measured

PER_GPU = re.compile(r"^(?:(\w+)_)?(h\d00)(x\d)?\.json$")


def problems() -> List[str]:
    """What is wrong with the records: a record of any GPU file without ``gpu``; a record of a
    current GPU's file (every GPU of ``GPUS`` but the oldest) without a clean commit. The oldest
    GPU's files are history: a '+dirty' record there must carry a ``note`` saying what it measured."""
    out = []
    for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
        m = PER_GPU.match(os.path.basename(path))
        if not m or m.group(2) not in GPUS:
            continue
        current = m.group(2) != GPUS[-1]
        for i, r in enumerate(load(os.path.basename(path))):
            name = f"{os.path.basename(path)}[{i}]"
            if not r.get("gpu"):
                out.append(f"{name}: no gpu")
            c = str(r.get("commit", ""))
            clean = re.fullmatch(r"[0-9a-f]{7,40}", c) is not None
            if current and not clean:
                out.append(f"{name}: commit {c!r} is not a clean commit")
            elif not clean and not r.get("note"):
                out.append(f"{name}: commit {c!r} without a note saying what it measured")
    return out


# ---------------------------------------------------------------------------------------------
# measure: every record the README reads, for this machine's GPU, each part one command

def measure_parts(out: str, gpu: str) -> Dict[str, List[List[str]]]:
    """The commands that make this GPU's records in ``out``, by part (each part fits one
    10-minute run on an H200)."""
    py = sys.executable
    ladders = os.path.join(out, results_name("", gpu))
    bench = [py, "-m", "numba_tc", "bench", "--no-progress", "--json", ladders]
    return {
        "compile": [[py, "-m", "numba_tc", "compile", "--no-progress", "--json", os.path.join(out, "compile.json")]],
        "ladders": [bench + ["--ladder", "simt", "--sizes", "4096"],
                    bench + ["--ladder", "mma", "--dtype", "bfloat16", "--sizes", "4096", "8192"],
                    bench + ["--ladder", "mma", "--dtype", "float16", "--sizes", "4096", "8192"],
                    bench + ["--ladder", "mma", "--dtype", "tf32", "--sizes", "4096", "8192"],
                    bench + ["--ladder", "wgmma", "--dtype", "bfloat16", "--sizes", "4096", "8192"],
                    bench + ["--variants", "hopper", "--dtype", "float16", "--sizes", "4096", "8192"]],
        "sweep": [[py, "benchmarks/sweep.py", "--dtypes", "bfloat16", "float16", "tf32", "--json", ladders]],
        "features": [[py, "benchmarks/features.py", "--json", os.path.join(out, results_name("features", gpu))]],
        "runtime": [[py, "benchmarks/runtime.py", "--modes", "host", "first", "--json",
                     os.path.join(out, results_name("runtime", gpu))]],
        "torch": [["bash", "benchmarks/torch_bench.sh", out]],
    }


def measure(out: str, parts: List[str]) -> int:
    import subprocess
    from numba_tc.bench import gpu_tag
    os.makedirs(out, exist_ok=True)
    todo = measure_parts(out, gpu_tag())
    for part in parts:
        for cmd in todo[part]:
            print("+", " ".join(cmd), flush=True)
            rc = subprocess.call(cmd, cwd=ROOT)
            if rc:
                print(f"{part}: exit status {rc}", flush=True)
                return rc
    print(f"records in {out}: copy them to benchmarks/results, then python benchmarks/records.py check && "
          "python benchmarks/records.py readme")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("readme", help="rewrite README.md's generated blocks and the headline picture")
    r.add_argument("--check", action="store_true", help="change nothing; exit 1 where README.md differs")
    sub.add_parser("check", help="every record names its GPU and a clean commit")
    m = sub.add_parser("measure", help="on a GPU: this GPU's records into --out (set NUMBA_TC_COMMIT)")
    m.add_argument("--out", required=True)
    m.add_argument("--parts", nargs="+", default=list(measure_parts(".", "x")), choices=list(measure_parts(".", "x")))
    args = p.parse_args(argv)
    if args.cmd == "measure":
        return measure(args.out, args.parts)
    if args.cmd == "check":
        bad = problems()
        print("\n".join(bad) or "every record names its GPU and a clean commit")
        return 1 if bad else 0
    text = open(README, encoding="utf-8").read()
    new = render(text, blocks())
    if args.check:
        if new != text:
            print("README.md differs from the records: python benchmarks/records.py readme")
            return 1
        print("README.md says what the records say")
        return 0
    with open(README, "w", encoding="utf-8") as f:
        f.write(new)
    draw(headline()[1], PICTURE)
    print(f"README.md's generated blocks rewritten; picture: {PICTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
