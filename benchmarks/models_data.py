"""``benchmarks/models.py``'s half without torch: the products real models make, the sampler, the
statistics, the profile's tables and the summary (tested on the CPU, tests/test_models_data.py).

* ``Problem``: one product as torch runs it (the operands' shapes and layouts, a batch count for
  attention's batched products, a bias), and where it came from.
* ``linear_problems``: the products of one linear layer seen at ``tokens`` rows, in the layouts
  torch's autograd gives them (``nn.Linear``: y = x W^T, dX = dY W, dW = dY^T X; HF's ``Conv1D``,
  weight (in, out): y = x W, dX = dY W^T, dW = X^T dY), and ``numba_tc.torch``'s own dW form
  for ``nn.Linear`` (it computes dW^T = X^T dY, ``op`` "dwT").
* ``attention_problems``: attention's batched products at (batch x heads, seq, head size): Q K^T,
  P V and P^T dO.
* ``draw``: the sampler, a seeded draw of products shaped the way models make them (issue 51).
* ``summarize``: geomean, 10th percentile and the splits by tokens and by kind.
* ``profile_tables``: one training step's kernels and host operations in each arm, by category
  and by name (``DEVICE_CATEGORIES``, ``HOST_CATEGORIES``), and what numba_tc's arm changes.
* ``summary``: the table printed last.
"""
from __future__ import annotations

import math
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence

#: the sampler's token bins (rows of a layer's products); the first is decoding's
TOKEN_BINS = ((1, 64), (65, 512), (513, 4096), (4097, 32768))
ATTENTION_OPS = ("qk", "pv", "pt")
DECODE_ROWS = 64                 # a product of at most this many rows is decoding's (a GEMV-like pass)
BIG_WEIGHT = 64 * 2 ** 20        # decode bandwidth is judged where the weight exceeds 64 MB


@dataclass(frozen=True)
class Problem:
    """``a @ b`` (+ bias): a (m, k), b (k, n), each row-major or, with ``a_t``/``b_t``, a
    column-major view (the transpose of a row-major array); ``batch`` > 0: that many matrices of
    each (3-D, attention). ``op``: fwd, dx, dw, dwT (numba_tc's dW^T) or qk, pv, pt."""
    op: str
    m: int
    n: int
    k: int
    a_t: bool = False
    b_t: bool = False
    bias: bool = False
    batch: int = 0
    dtype: str = "bfloat16"
    tokens: int = 0              # the layer's rows (the sampler's bins); attention: seq
    source: str = ""             # model and layer, or "sampler"

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * max(self.batch, 1)

    @property
    def itemsize(self) -> int:
        return 2 if self.dtype in ("bfloat16", "float16") else 4

    @property
    def bytes(self) -> int:
        """Bytes a product must move at least: its operands and its result, once."""
        return (self.m * self.k + self.k * self.n + self.m * self.n) * self.itemsize * max(self.batch, 1)

    @property
    def decode(self) -> bool:
        """A decoding product: at most ``DECODE_ROWS`` rows times a weight (fwd or dX)."""
        return self.batch == 0 and self.op in ("fwd", "dx") and self.m <= DECODE_ROWS

    @property
    def weight_bytes(self) -> int:
        return self.k * self.n * self.itemsize

    @property
    def attention(self) -> bool:
        return self.op in ATTENTION_OPS

    @property
    def layout(self) -> str:
        """'NN'-style: N a row-major operand, T a column-major one (BLAS's letters for a, b)."""
        return ("T" if self.a_t else "N") + ("T" if self.b_t else "N")

    def shape(self) -> str:
        b = f"{self.batch} x " if self.batch else ""
        return f"{b}{self.m}x{self.n}x{self.k} {self.layout}{' +bias' if self.bias else ''}"

    def record(self) -> dict:
        return asdict(self)


def linear_problems(tokens: int, fin: int, fout: int, bias: bool, weight_in_out: bool = False,
                    dtype: str = "bfloat16", source: str = "", ops=("fwd", "dx", "dw", "dwT")) -> List[Problem]:
    """The products of a linear layer (in ``fin``, out ``fout``) at ``tokens`` rows, as torch runs
    them (module docstring). ``weight_in_out``: HF's Conv1D (weight stored (in, out))."""
    T, w = tokens, weight_in_out
    made = {
        # y (T, out) = x (T, in) @ W^T: W^T a column-major view of W (out, in); Conv1D's W is (in, out)
        "fwd": Problem("fwd", T, fout, fin, False, not w, bias, 0, dtype, T, source),
        # dX (T, in) = dY (T, out) @ W: W (out, in) row-major; Conv1D: W^T
        "dx": Problem("dx", T, fin, fout, False, w, False, 0, dtype, T, source),
        # dW (out, in) = dY^T @ X (dY^T a view); Conv1D: dW (in, out) = X^T @ dY
        "dw": (Problem("dw", fin, fout, T, True, False, False, 0, dtype, T, source) if w else
               Problem("dw", fout, fin, T, True, False, False, 0, dtype, T, source)),
        # numba_tc.torch's backward computes B's gradient for B = W^T: X^T @ dY, (in, out)
        "dwT": None if w else Problem("dwT", fin, fout, T, True, False, False, 0, dtype, T, source),
    }
    return [made[o] for o in ops if made.get(o) is not None]


def attention_problems(bh: int, seq: int, head: int, dtype: str = "bfloat16", source: str = "",
                       ops=ATTENTION_OPS) -> List[Problem]:
    """Attention's batched products over ``bh`` (batch x heads) matrices: S = Q K^T (K^T a view of
    K (seq, head)), O = P V, and dV = P^T dO (P^T a view)."""
    made = {"qk": Problem("qk", seq, seq, head, False, True, False, bh, dtype, seq, source),
            "pv": Problem("pv", seq, head, seq, False, False, False, bh, dtype, seq, source),
            "pt": Problem("pt", seq, head, seq, True, False, False, bh, dtype, seq, source)}
    return [made[o] for o in ops]


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return math.exp(rng.uniform(math.log(lo), math.log(hi)))


def _round_to(x: float, step: int) -> int:
    return max(step, int(round(x / step)) * step)


ATTENTION_ELEMENTS = 2 ** 28     # a drawn attention product's score matrices, at most (512 MB in 16 bits)


def draw(seed: int, count: int, dtype: str = "bfloat16") -> List[Problem]:
    """The sampler: ``count`` products drawn (``random.Random(seed)``; the same shapes for every
    dtype) the way models make them. About one in eight is an attention-shaped batched product
    (head size 64, 80, 96 or 128; 8-32 heads times a batch of 1-8; any sequence length 16-4096,
    log-uniform); the rest are one of a linear layer's forward, dX and dW (``linear_problems``)
    for a model of width 512-8192 (log-uniform, a multiple of 64), the MLP's width 2.7-4 times it
    (rounded to 8, 64, 128 or 256), tokens 1-32768 log-uniform, the layer one of the attention's
    input (q, k, v fused: with 1, 2, 4 or 8 query heads per key head) and output projections
    and the MLP's up and down projections."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if rng.random() < 1 / 8:
            head = rng.choice((64, 80, 96, 128))
            heads, batch = rng.choice((8, 12, 16, 32)), rng.choice((1, 2, 4, 8))
            seq = int(round(_log_uniform(rng, 16, 4096)))
            op = rng.choice(ATTENTION_OPS)
            bh = batch * heads
            while bh > heads and bh * seq * seq > ATTENTION_ELEMENTS:
                bh //= 2
            out += attention_problems(bh, seq, head, dtype, f"sampler #{i}", (op,))
            continue
        d = _round_to(_log_uniform(rng, 512, 8192), 64)
        ffn = _round_to(d * rng.uniform(2.7, 4.0), rng.choice((8, 64, 128, 256)))
        layer = rng.choice(("qkv", "proj", "up", "down"))
        groups = rng.choice((1, 2, 4, 8))
        fin, fout = {"qkv": (d, d + 2 * (d // groups)), "proj": (d, d), "up": (d, ffn), "down": (ffn, d)}[layer]
        tokens = min(32768, max(1, int(round(_log_uniform(rng, 1, 32768)))))
        op = rng.choice(("fwd", "dx", "dw"))
        out += linear_problems(tokens, fin, fout, False, False, dtype, f"sampler #{i} {layer}", (op,))
    return out


def geomean(xs: Sequence[float]) -> Optional[float]:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def percentile(xs: Sequence[float], q: float) -> Optional[float]:
    """The q-th percentile (0-100), linear between order statistics (NumPy's default)."""
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    at = (len(xs) - 1) * q / 100
    lo = int(math.floor(at))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (at - lo)


def _stats(rows: Sequence[dict]) -> dict:
    r = [x["ratio"] for x in rows if x.get("ratio")]
    return {"count": len(r), "geomean": geomean(r), "p10": percentile(r, 10), "min": min(r) if r else None}


def summarize(rows: Sequence[dict], hbm_tbs: Optional[float] = None) -> Dict[str, dict]:
    """The sampler's figures from its measured rows (``Problem.record()`` plus ``ratio`` and, for
    decoding products, ``tbs``: numba_tc's TB/s): all, the 2-D and attention products, each token
    bin, each op, decoding, and decoding where the weight exceeds 64 MB (with ``hbm_frac``, numba_tc's
    bandwidth over the copy-measured ``hbm_tbs``)."""
    out = {"all": _stats(rows),
           "2d": _stats([x for x in rows if not x["batch"]]),
           "attention": _stats([x for x in rows if x["batch"]])}
    for lo, hi in TOKEN_BINS:
        out[f"tokens {lo}-{hi}"] = _stats([x for x in rows if not x["batch"] and lo <= x["tokens"] <= hi])
    for op in ("fwd", "dx", "dw") + ATTENTION_OPS:
        out[f"op {op}"] = _stats([x for x in rows if x["op"] == op])
    dec = [x for x in rows if not x["batch"] and x["op"] in ("fwd", "dx") and x["m"] <= DECODE_ROWS]
    out["decode"] = _stats(dec)
    big = [x for x in dec if x["k"] * x["n"] * (2 if x["dtype"] != "float32" else 4) > BIG_WEIGHT]
    out["decode weight>64MB"] = s = _stats(big)
    fr = [x["tbs"] / hbm_tbs for x in big if x.get("tbs") and hbm_tbs]
    s["hbm_frac_mean"] = sum(fr) / len(fr) if fr else None
    s["hbm_frac_min"] = min(fr) if fr else None
    return out


#: kernel categories, the first whose pattern is found in the kernel's name (numba_tc's kernels are
#: all "numba_tc_kernel": models.py names them "numba_tc: <the launch's label>", in launch order)
DEVICE_CATEGORIES = (
    ("numba_tc operand copy (repack)", r"^numba_tc: (repack|transpose)"),
    ("numba_tc split-K fix-up", r"^numba_tc: (tail )?fixup"),
    ("numba_tc product", r"^numba_tc"),
    ("cuBLAS product", r"gemm|nvjet|xmma|cutlass|cublas|splitKreduce"),
    ("attention (SDPA)", r"flash|fmha|attention|efficient"),
    ("cast / copy", r"copy|cast|CatArray|Memcpy"),
    ("reduction (sums: bias grads, ...)", r"reduce"),
    ("optimizer", r"adam|multi_tensor"),
    ("fill / memset", r"fill|Memset"),
    ("other (elementwise, norms, softmax, loss)", r""),
)
#: host-side operations counted (torch.profiler's CPU events: aten operators, CUDA runtime and
#: driver calls)
HOST_CATEGORIES = (
    ("casts (aten::_to_copy)", r"^aten::_to_copy$"),
    ("copies (aten::copy_)", r"^aten::copy_$"),
    ("contiguous / clone", r"^aten::(contiguous|clone)$"),
    ("sums (aten::sum)", r"^aten::sum$"),
    ("tensor allocations (aten::empty*)", r"^aten::empty"),
    ("device allocations (malloc)", r"Malloc|MemAlloc"),
    ("synchronizations", r"Synchronize"),
    ("launches through the runtime", r"^cudaLaunchKernel"),
    ("launches through the driver", r"^cuLaunchKernel"),
    ("stream-capture queries", r"IsCapturing"),
)
ARMS = ("torch", "numba_tc")


def category(name: str, cats=DEVICE_CATEGORIES) -> str:
    return next(c for c, pat in cats if re.search(pat, name))


def profile_tables(kernels: dict, host: dict) -> dict:
    """``kernels``: arm -> [(kernel name, us)]; ``host``: arm -> Counter of host event names.
    Returns {device: {category: [torch n, us, numba_tc n, us]}, host: {category: [torch n,
    numba_tc n]}, changed: [{name, torch_n, torch_us, numba_tc_n, numba_tc_us}]}: the kernels
    whose count differs or whose time differs by more than 5%, largest change first."""
    by_cat, by_name, hosts = {}, {}, {}
    for j, arm in enumerate(ARMS):
        for n, us in kernels[arm]:
            for table, key in ((by_cat, category(n)), (by_name, n)):
                row = table.setdefault(key, [0, 0.0, 0, 0.0])
                row[2 * j] += 1
                row[2 * j + 1] += us
        for n, c in Counter(host[arm]).items():
            for cat, pat in HOST_CATEGORIES:
                if re.search(pat, n):
                    hosts.setdefault(cat, [0, 0])[j] += c
    changed = sorted(((n, r) for n, r in by_name.items()
                      if r[0] != r[2] or abs(r[1] - r[3]) > 0.05 * max(r[1], r[3], 1.0)),
                     key=lambda nr: -abs(nr[1][3] - nr[1][1]))
    return dict(device=by_cat, host=hosts, changed=[dict(name=n, torch_n=r[0], torch_us=r[1], numba_tc_n=r[2],
                                                         numba_tc_us=r[3]) for n, r in changed])


def profile_text(t: dict, what: str, rows: int = 25) -> str:
    """``profile_tables``' result as the printed tables."""
    lines = [f"--- profile: {what}, torch against numba_tc ---",
             f"{'kernels by category':44s} {'torch n':>8} {'ms':>8} {'numba_tc n':>11} {'ms':>8} {'delta ms':>9}"]
    dev = t["device"]
    for cat, _ in DEVICE_CATEGORIES:
        if cat in dev:
            r = dev[cat]
            lines.append(f"{cat:44s} {r[0]:8d} {r[1] / 1e3:8.3f} {r[2]:11d} {r[3] / 1e3:8.3f} {(r[3] - r[1]) / 1e3:+9.3f}")
    tot = [sum(r[i] for r in dev.values()) for i in range(4)]
    lines.append(f"{'all kernels':44s} {tot[0]:8d} {tot[1] / 1e3:8.3f} {tot[2]:11d} {tot[3] / 1e3:8.3f} "
                 f"{(tot[3] - tot[1]) / 1e3:+9.3f}")
    lines.append(f"{'host-side operations':44s} {'torch n':>8} {'':8} {'numba_tc n':>11}")
    lines += [f"{cat:44s} {t['host'][cat][0]:8d} {'':8} {t['host'][cat][1]:11d}"
              for cat, _ in HOST_CATEGORIES if cat in t["host"]]
    lines.append("kernels numba_tc's step adds, drops or changes (torch n, us | numba_tc n, us | name):")
    lines += [f"  {c['torch_n']:4d} {c['torch_us']:9.1f} | {c['numba_tc_n']:4d} {c['numba_tc_us']:9.1f} | {c['name'][:110]}"
              for c in t["changed"][:rows]]
    return "\n".join(lines)


STEP_OP = "linear products of a step"      # a gemm record summing one training step's linear products


def _r(x, nd=3):
    return "-" if x is None else f"{x:.{nd}f}"


def summary(records: Sequence[dict]) -> str:
    """The table ``models.py`` prints last: each train, prefill and decode record, each model's
    step totals and products' geomean, the sampler's main subsets, compile time, HBM."""
    lines = [f"{'kind':8s} {'model':8s} {'size':>10s} {'torch':>12s} {'numba_tc':>12s} {'ratio':>7s}  note"]
    gm: Dict[str, list] = {}
    for r in records:
        k = r["kind"]
        if k == "train":
            lines.append(f"{k:8s} {r['model']:8s} {str(r['batch']) + 'x' + str(r['seq']):>10s} {r['torch_ms']:9.2f} ms "
                         f"{r['numba_tc_ms']:9.2f} ms {r['ratio']:7.3f}  last losses "
                         f"{'within 1%' if r['loss_ok'] else 'DIFFER'} ({r['loss_rel_diff']:.2%})")
        elif k in ("prefill", "decode"):
            a, b = ((r["torch_ms"], r["numba_tc_ms"]) if k == "prefill" else
                    (r["ms_per_token_torch"], r["ms_per_token_numba_tc"]))
            lines.append(f"{k:8s} {r['model']:8s} {'batch ' + str(r['batch']):>10s} {a:9.2f} ms {b:9.2f} ms "
                         f"{r['ratio']:7.3f}  {'a token' if k == 'decode' else str(r['seq']) + ' tokens a row'}")
        elif k == "gemm" and r.get("op") == STEP_OP:
            lines.append(f"{'gemm':8s} {r['model']:8s} {r['size']:>10s} {r['torch_ms']:9.3f} ms {r['ms']:9.3f} ms "
                         f"{r['ratio']:7.3f}  {STEP_OP}, timed one by one")
        elif k == "gemm" and r.get("ratio") and r["model"] != "sampler":
            gm.setdefault(f"{r['model']} {r.get('dtype', '')}", []).append(r["ratio"])
        elif k == "sampled" and (r["subset"] in ("all", "2d", "attention", "decode weight>64MB")
                                 or r["subset"].startswith("tokens")):
            hbm = f", {_r(r['hbm_frac_mean'], 2)} of HBM (min {_r(r['hbm_frac_min'], 2)})" \
                if r["subset"].startswith("decode") else ""
            lines.append(f"sampled  {r['dtype']:8s} {r['subset']:>18s}: n {r['count']}, geomean {_r(r['geomean'])}, "
                         f"p10 {_r(r['p10'])}, min {_r(r['min'])}{hbm}"
                         + (f"; {r['wrong']} of {r['drawn']} wrong" if r["subset"] == "all" else ""))
        elif k == "compile":
            lines.append(f"compile: {r['kernels_built']} kernels built in {r['seconds']:.0f} s ({r['compile_cpu_s']:.0f} s "
                         f"of compiling), {r['kernels_cached']} from the disk cache, {r['unplanned']} problems unplanned")
        elif k == "hbm":
            lines.append(f"HBM: a device-to-device copy moves {r['tbs']:.2f} TB/s")
    for m, rs in gm.items():
        lines.append(f"gemm     {m}: {len(rs)} products, geomean {_r(geomean(rs))}, p10 {_r(percentile(rs, 10))}, "
                     f"min {_r(min(rs))}")
    return "\n".join(lines)
