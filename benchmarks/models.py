"""Real models through numba_tc against plain torch, on one GPU (issue 51): what a user's model runs.

    python benchmarks/models.py --quick --out $OUT/models_h200_quick.json     # ~3 min on one H200
    python benchmarks/models.py --kinds train prefill decode gemm --profile --out $OUT/a.json
    python benchmarks/models.py --kinds sampled --out $OUT/b.json            # the whole run, in two
    python benchmarks/models.py --merge a.json b.json --out benchmarks/results/models_h200.json
    python benchmarks/models.py --device cpu --dry --tiny --quick             # CPU smoke test

Four families built from transformers / timm configurations with random weights (nothing is
downloaded): GPT-2 small, BERT-base (masked LM), a Llama-style decoder (width 2048, 8 layers, GQA
16/4, SwiGLU) and ViT-B/16 (timm). For each:

* ``train``: training steps (bf16 autocast, AdamW) of the model and of its copy from the same seed
  with every ``nn.Linear`` (and HF's Conv1D) through ``numba_tc.torch.patch``, interleaved (the
  same batch and dropout seed each step, the order alternating), the median step after warm-up
  (wall clock, synchronized: host time counts), the ratio torch ms / numba_tc ms, both last losses;
* ``prefill`` and ``decode``: inference (weights in bf16, or ``--infer autocast``) at batch 1 and
  16: one forward over the prompt, and greedy decoding with the KV cache (a hand loop), tokens/s;
* ``gemm``: every product those steps make (the linear layers' shapes as hooks saw them, in the
  layouts torch's autograd uses, ``models_data.linear_problems``; attention's batched Q K^T and
  P V), each checked against float64 on a sample, then timed against torch (cuBLAS, ``torch.bmm``)
  on the same inputs, interleaved (``numba_tc.bench.time_interleaved``: CUDA events behind a spin
  kernel, so host launch cost is not timed), inputs rotated where they would sit in L2;
* ``sampled``: the sampler's seeded draw (``models_data.draw``) the same way, in bf16 and fp16,
  summarized (geomean, p10, by tokens, by op; decoding's bandwidth over the copy-measured HBM's);
* ``--profile``: a torch.profiler trace of one training step in each arm, and the table of
  kernels (by category and by name) and host-side operations numba_tc's path adds or changes.

numba_tc's kernels compile on first use: every call the run will make is planned first with
nothing loaded, and the kernels not in the disk cache are compiled in parallel processes
(``--jobs``); that time is reported apart (record ``compile``). Records (JSON, one per
measurement) carry ``gpu`` and ``commit`` (``numba_tc.bench.commit_id``: NUMBA_TC_COMMIT where the
machine has no .git; a dirty tree is marked ``+dirty``). ``--dry``: numba_tc is never called (the
"numba_tc" arm is torch again): the CPU smoke test of everything else.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import inspect
import json
import math
import os
import re
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]
import models_data as md             # noqa: E402

#: family -> (what it is, its (batch, seq) sizes; the first is --quick's; ViT's seq is its 197 tokens)
FAMILIES = {
    "gpt2": ("GPT-2 small: 12 x 768, HF GPT2LMHeadModel", [(8, 512), (8, 1024)]),
    "bert": ("BERT-base: 12 x 768, HF BertForMaskedLM", [(16, 512), (32, 128)]),
    "llama": ("Llama-style: 8 x 2048, GQA 16/4, SwiGLU 5632, HF LlamaForCausalLM", [(4, 512), (4, 2048)]),
    "vit": ("ViT-B/16: timm vit_base_patch16_224, 197 tokens", [(64, 197), (16, 197)]),
}
KINDS = ("train", "prefill", "decode", "gemm", "sampled")
T0 = time.perf_counter()
_DEADLINE = [None]


def log(*parts):
    print(f"[{time.perf_counter() - T0:6.0f}s]", *parts, flush=True)


def late() -> bool:
    """Past --deadline: start nothing new (what is measured is written)."""
    return _DEADLINE[0] is not None and time.perf_counter() - T0 > _DEADLINE[0]


# --- models ------------------------------------------------------------------------------------

def build(family: str, tiny: bool) -> nn.Module:
    """The family's model with random weights (``torch.manual_seed`` first decides them)."""
    if family == "vit":
        import timm
        kw = dict(img_size=32, embed_dim=64, depth=2, num_heads=4, num_classes=10) if tiny else {}
        return timm.create_model("vit_base_patch16_224", pretrained=False, **kw)
    import transformers as tf
    tf.logging.set_verbosity_error()
    small = dict(vocab_size=512, bos_token_id=0, eos_token_id=0, pad_token_id=0) if tiny else {}
    if family == "gpt2":
        cfg = tf.GPT2Config(**(dict(n_layer=2, n_embd=64, n_head=4, n_positions=256, **small) if tiny else {}))
        return tf.GPT2LMHeadModel(cfg)
    if family == "bert":
        cfg = tf.BertConfig(**(dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=256, max_position_embeddings=256, **small) if tiny else {}))
        return tf.BertForMaskedLM(cfg)
    if family == "llama":
        cfg = tf.LlamaConfig(**(dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, max_position_embeddings=256, **small) if tiny else
                                dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8, num_attention_heads=16,
                                     num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096)))
        return tf.LlamaForCausalLM(cfg)
    raise ValueError(f"unknown family {family!r}: one of {', '.join(FAMILIES)}")


def heads(family: str, model) -> tuple:
    """(attention heads, head size)."""
    if family == "vit":
        a = model.blocks[0].attn
        return a.num_heads, a.head_dim
    c = model.config
    h = getattr(c, "n_head", None) or c.num_attention_heads
    d = getattr(c, "n_embd", None) or c.hidden_size
    return h, getattr(c, "head_dim", None) or d // h


def tokens_of(family: str, model, seq: int) -> int:
    return model.patch_embed.num_patches + 1 if family == "vit" else seq


def make_batch(family: str, model, batch: int, seq: int, seed: int, dev) -> dict:
    """A training batch: token rows that repeat a random 16-token phrase (a pattern the model
    learns within a few steps, so the two arms' losses are compared while they move), BERT's
    with 15% masked; images and labels for ViT."""
    g = torch.Generator().manual_seed(seed)
    if family == "vit":
        size = model.patch_embed.img_size
        return dict(x=torch.randn(batch, 3, *size, generator=g).to(dev),
                    y=torch.randint(0, model.num_classes, (batch,), generator=g).to(dev))
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, 16), generator=g).repeat(1, -(-seq // 16))[:, :seq]
    if family == "bert":
        mask = torch.rand(batch, seq, generator=g) < 0.15
        return dict(input_ids=torch.where(mask, 103 % vocab, ids).to(dev), labels=torch.where(mask, ids, -100).to(dev))
    return dict(input_ids=ids.to(dev), labels=ids.to(dev))


def loss_of(family: str, model, b: dict):
    return F.cross_entropy(model(b["x"]), b["y"]) if family == "vit" else model(**b).loss


def with_numba_tc(model, dry: bool):
    if not dry:
        import numba_tc.torch as ntt
        ntt.patch(model)
    return model


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def twins(family, args, dev, dtype=None):
    """(the model, its numba_tc-patched copy): one random initialization from ``args.seed``."""
    torch.manual_seed(args.seed)
    with dev:
        m = build(family, args.tiny)
    m = m.to(dev) if dtype is None else m.to(dev, dtype)
    return m, with_numba_tc(copy.deepcopy(m), args.dry)


# --- (a) training steps --------------------------------------------------------------------------

class Trainer:
    """Both arms of one family at one size: models, AdamW, the batches."""

    def __init__(self, family, size, args, dev):
        self.family, self.dev, self.args = family, dev, args
        self.models = twins(family, args, dev)
        self.opts = [torch.optim.AdamW(m.parameters(), lr=1e-4, fused=dev.type == "cuda") for m in self.models]
        self.batches = [make_batch(family, self.models[0], size[0], size[1], args.seed + i, dev) for i in range(2)]

    def step(self, arm: int, i: int):
        m, opt = self.models[arm], self.opts[arm]
        torch.manual_seed(self.args.seed + 1000 + i)          # the same dropout masks in both arms
        with torch.autocast(self.dev.type, dtype=torch.bfloat16):
            loss = loss_of(self.family, m, self.batches[i % len(self.batches)])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()


def train(family, size, args, dev, rec):
    tr = Trainer(family, size, args, dev)
    ms_, first, loss = ([], []), [0.0, 0.0], [None, None]
    for i in range(args.warmup + args.steps):
        for arm in ((0, 1) if i % 2 == 0 else (1, 0)):
            sync(dev)
            t = time.perf_counter()
            loss[arm] = tr.step(arm, i)
            sync(dev)
            dt = (time.perf_counter() - t) * 1e3
            if i >= args.warmup:
                ms_[arm].append(dt)
            else:
                first[arm] += dt
    lt, lo = float(loss[0]), float(loss[1])
    t, o = statistics.median(ms_[0]), statistics.median(ms_[1])
    r = rec(kind="train", model=family, batch=size[0], seq=tokens_of(family, tr.models[0], size[1]),
            torch_ms=t, numba_tc_ms=o, ratio=t / o, loss_torch=lt, loss_numba_tc=lo,
            loss_rel_diff=abs(lo - lt) / abs(lt), loss_ok=abs(lo - lt) <= 0.01 * abs(lt), steps=args.steps,
            warmup=args.warmup, warmup_ms_torch=first[0], warmup_ms_numba_tc=first[1], dtype="bf16 autocast, AdamW")
    log(f"train {family} {size[0]}x{r['seq']}: torch {t:.2f} ms, numba_tc {o:.2f} ms, ratio {t / o:.3f}; "
        f"losses {lt:.4f} / {lo:.4f} ({'ok' if r['loss_ok'] else 'OFF BY MORE THAN 1%'}); "
        f"warm-up steps {first[0]:.0f} / {first[1]:.0f} ms")


# --- (b) inference -------------------------------------------------------------------------------

def _cache_kw(model) -> str:
    """The KV cache's keyword (transformers 5 renames past_key_values to cache)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _prompt(family, model, batch, length, seed, dev):
    g = torch.Generator().manual_seed(seed)
    if family == "vit":
        return torch.randn(batch, 3, *model.patch_embed.img_size, generator=g).to(dev, next(model.parameters()).dtype)
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=g).to(dev)


def _forward(family, model, x, **kw):
    if family == "vit":
        return model(x)
    if family == "bert":
        return model(input_ids=x)
    return model(input_ids=x, use_cache=True, logits_to_keep=1, **kw)


def _decode(family, model, prompt, new, dev, autocast):
    """Greedy decoding with the KV cache: (seconds for the ``new`` tokens after the prompt's, tokens)."""
    kw = _cache_kw(model)
    with torch.no_grad(), autocast:
        out = _forward(family, model, prompt)
        nxt = out.logits[:, -1:].argmax(-1)
        sync(dev)
        t, toks = time.perf_counter(), [nxt]
        for _ in range(new):
            out = _forward(family, model, nxt, **{kw: out.past_key_values})
            nxt = out.logits[:, -1:].argmax(-1)
            toks.append(nxt)
        sync(dev)
    return time.perf_counter() - t, torch.cat(toks, 1)


def infer(family, args, dev, rec):
    dtype = None if args.infer == "autocast" else torch.bfloat16
    models = [m.eval() for m in twins(family, args, dev, dtype)]
    autocast = (lambda: torch.autocast(dev.type, dtype=torch.bfloat16)) if dtype is None else contextlib.nullcontext
    for batch in (1, 16):
        if late():
            return
        x = _prompt(family, models[0], batch, args.prompt, args.seed, dev)
        if "prefill" in args.kinds:
            ts = ([], [])
            for i in range(2 + args.reps):
                for arm in ((0, 1) if i % 2 == 0 else (1, 0)):
                    with torch.no_grad(), autocast():
                        sync(dev)
                        t = time.perf_counter()
                        _forward(family, models[arm], x)
                        sync(dev)
                    if i >= 2:
                        ts[arm].append((time.perf_counter() - t) * 1e3)
            t, o = statistics.median(ts[0]), statistics.median(ts[1])
            n = batch * tokens_of(family, models[0], args.prompt)
            rec(kind="prefill", model=family, batch=batch, seq=n // batch, torch_ms=t, numba_tc_ms=o, ratio=t / o,
                tokens_per_s_torch=n / t * 1e3, tokens_per_s_numba_tc=n / o * 1e3, dtype=args.infer)
            log(f"prefill {family} {batch}x{n // batch}: torch {t:.2f} ms, numba_tc {o:.2f} ms, ratio {t / o:.3f}")
        if "decode" in args.kinds and family in ("gpt2", "llama"):
            secs, toks = ([], []), [None, None]
            for i in range(1 + args.rounds):
                for arm in ((0, 1) if i % 2 == 0 else (1, 0)):
                    s, toks[arm] = _decode(family, models[arm], x, args.decode_tokens, dev, autocast())
                    if i >= 1:
                        secs[arm].append(s)
            t, o = statistics.median(secs[0]), statistics.median(secs[1])
            n = batch * args.decode_tokens
            same = float((toks[0] == toks[1]).float().mean())
            rec(kind="decode", model=family, batch=batch, prompt=args.prompt, new_tokens=args.decode_tokens,
                tokens_per_s_torch=n / t, tokens_per_s_numba_tc=n / o, ratio=t / o, ms_per_token_torch=t / args.decode_tokens * 1e3,
                ms_per_token_numba_tc=o / args.decode_tokens * 1e3, same_tokens=same, dtype=args.infer)
            log(f"decode {family} batch {batch}: torch {n / t:.0f} tokens/s, numba_tc {n / o:.0f}, ratio {t / o:.3f} "
                f"({same:.0%} of tokens the same)")


# --- the linear layers' calls, as hooks see them -------------------------------------------------

def _linear_of(m):
    """(in, out, weight stored (in, out)) of an nn.Linear or HF Conv1D, else None."""
    if isinstance(m, nn.Linear):
        return m.in_features, m.out_features, False
    if type(m).__name__ == "Conv1D" and getattr(m, "weight", None) is not None and m.weight.dim() == 2:
        return m.weight.shape[0], m.weight.shape[1], True
    return None


def capture(model, fn) -> dict:
    """{(tokens, in, out, bias, weight_in_out): [calls, layer name]} of the linear layers while fn() runs."""
    seen, hooks = {}, []
    for name, m in model.named_modules():
        lin = _linear_of(m)
        if lin is None:
            continue

        def hook(mod, inputs, lin=lin, name=name.rsplit(".", 1)[-1], bias=m.bias is not None):
            x = inputs[0]
            e = seen.setdefault((x.numel() // x.shape[-1], lin[0], lin[1], bias, lin[2]), [0, name])
            e[0] += 1
        hooks.append(m.register_forward_pre_hook(hook))
    try:
        fn()
    finally:
        for h in hooks:
            h.remove()
    return seen


def captured(family, args, dev) -> tuple:
    """({size "BxS": [(Problem, calls per step)]}, [(Problem, calls)]): every product of the
    family's training steps at its sizes (forward, dX, dW in torch's layouts and numba_tc's dW^T;
    attention's Q K^T and P V), and of its inference (prefill and one decoding step at batch 1
    and 16) when those are measured; the linear layers' shapes from one forward of each, hooked."""
    torch.manual_seed(args.seed)
    with dev:
        m = build(family, args.tiny).to(dev)
    nh, hd = heads(family, m)
    train_, infer_ = {}, {}
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
        for b, s in args.sizes[family]:
            size = f"{b}x{tokens_of(family, m, s)}"
            batch = make_batch(family, m, b, s, args.seed, dev)
            train_[size] = [(p, n) for (T, fin, fout, bias, wio), (n, name) in
                            capture(m, lambda: loss_of(family, m, batch)).items()
                            for p in md.linear_problems(T, fin, fout, bias, wio, source=f"{family} {size} {name}")]
            train_[size] += [(p, 1) for p in md.attention_problems(b * nh, tokens_of(family, m, s), hd, source=f"{family} {size}",
                                                                 ops=("qk", "pv"))]
        for b in ((1, 16) if {"prefill", "decode"} & set(args.kinds) else ()):
            x = _prompt(family, m, b, args.prompt, args.seed, dev)

            def run(x=x):
                o = _forward(family, m, x)
                if family in ("gpt2", "llama"):
                    _forward(family, m, x[:, -1:], **{_cache_kw(m): o.past_key_values})
            for (T, fin, fout, bias, wio), (n, name) in capture(m, run).items():
                for p in md.linear_problems(T, fin, fout, bias, wio, source=f"{family} inference {name}", ops=("fwd",)):
                    infer_[p] = (p, n)
    return train_, list(infer_.values())


# --- products: operands, the check, the timing ---------------------------------------------------

def operands(p: md.Problem, dev, fill=True):
    """(a, b, bias) of ``p`` on ``dev``: fresh normal values (``fill``; else uninitialized, for
    planning), each column-major operand a transposed view of a row-major array."""
    dt = getattr(torch, p.dtype)
    new = (lambda *s: torch.randn(*s, device=dev, dtype=dt)) if fill else (lambda *s: torch.empty(*s, device=dev, dtype=dt))

    def mat(rows, cols, trans):
        t = new(*((p.batch,) if p.batch else ()), *((cols, rows) if trans else (rows, cols)))
        return t.mT if trans else t
    return mat(p.m, p.k, p.a_t), mat(p.k, p.n, p.b_t), new(p.n) if p.bias else None


def torch_product(a, b, bias=None, out=None):
    if a.dim() == 3:
        return torch.bmm(a, b, out=out)
    return torch.mm(a, b, out=out) if bias is None else torch.addmm(bias, a, b, out=out)


def ntc_product(dry: bool):
    if dry:
        return torch_product
    import numba_tc
    return lambda a, b, bias=None, out=None: numba_tc.gemm(a, b, bias=bias, out=out)


def rel_err(c, ref) -> float:
    c = c.double()
    if not bool(torch.isfinite(c).all()):
        return float("inf")
    return float(torch.linalg.norm(c - ref) / torch.linalg.norm(ref))


def check(p: md.Problem, a, b, bias, ours) -> tuple:
    """(numba_tc's error, torch's, ok): each result (numba_tc's into a NaN-poisoned ``out``) on up
    to 4 matrices x 128 rows x 128 columns against float64; ok: within twice torch's error or two
    units of the output type's rounding."""
    g = torch.Generator().manual_seed(p.m * 31 + p.n)
    pick = lambda n, k: torch.randperm(n, generator=g)[:k].sort().values.to(a.device)   # noqa: E731
    rows, cols, mats = pick(p.m, 128), pick(p.n, 128), pick(max(p.batch, 1), 4)
    o = torch.full(((p.batch,) if p.batch else ()) + (p.m, p.n), float("nan"), device=a.device, dtype=a.dtype)
    ours(a, b, bias, out=o)
    t = torch_product(a, b, bias)
    sub = (lambda x: x.index_select(0, mats)) if p.batch else (lambda x: x)
    ref = sub(a).index_select(-2, rows).double() @ sub(b).index_select(-1, cols).double()
    if bias is not None:
        ref += bias.index_select(0, cols).double()
    cut = lambda x: sub(x).index_select(-2, rows).index_select(-1, cols)   # noqa: E731
    eo, et = rel_err(cut(o), ref), rel_err(cut(t), ref)
    unit = 2.0 ** -8 if p.dtype == "bfloat16" else 2.0 ** -11
    return eo, et, eo <= max(2 * et, 2 * unit)


def interleaved(fns, rounds, budget, dev) -> list:
    """Median ms of each of ``fns``, in alternating rounds: CUDA events behind a spin kernel
    (``numba_tc.bench.time_interleaved``), or on the CPU the wall clock."""
    if dev.type == "cuda":
        from numba_tc.bench import time_interleaved
        return time_interleaved(fns, rounds=rounds, budget_s=budget)
    samples = [[] for _ in fns]
    for _ in range(rounds):
        for f, s in zip(fns, samples):
            for _ in range(2):
                t = time.perf_counter()
                f()
                s.append((time.perf_counter() - t) * 1e3)
    return [statistics.median(s) for s in samples]


def measure(p: md.Problem, args, dev, ours, l2: int) -> dict:
    """``p`` checked, then timed (numba_tc and torch on the same inputs, interleaved; up to 8
    sets of inputs in turn where one set would stay in L2); a dict for its record."""
    sets = [operands(p, dev)]
    eo, et, ok = check(p, *sets[0], ours)
    r = dict(p.record(), err=eo, torch_err=et, ok=ok, plan=_explain(p, sets[0], args))
    if not ok:
        log(f"WRONG: {p.source} {p.op} {p.shape()}: error {eo:.2e} (torch {et:.2e}); not timed")
        return r
    sets += [operands(p, dev) for _ in range(min(7, math.ceil(3 * l2 / p.bytes) - 1))]
    turn = [0]

    def rotate(f):
        def call():
            s = sets[turn[0] % len(sets)]
            turn[0] += 1
            f(*s)
        return call
    o, t = interleaved([rotate(ours), rotate(torch_product)], args.gemm_rounds, args.gemm_budget, dev)
    r.update(ms=o, torch_ms=t, ratio=t / o, tflops=p.flops / o * 1e-9, copies=len(sets))
    if p.decode:
        r.update(tbs=p.bytes / o * 1e-9, torch_tbs=p.bytes / t * 1e-9)
    return r


def _explain(p, ops, args) -> str:
    if args.dry:
        return "dry: torch"
    import numba_tc
    try:
        return numba_tc.explain(ops[0], ops[1], bias=ops[2])
    except Exception as e:              # (a plan that cannot be made says so in the check first)
        return f"explain failed: {type(e).__name__}: {e}"


def gemms(problems, args, dev, rec, model, extra=None) -> list:
    """Each problem measured (``measure``) and recorded (kind ``gemm``); [(record, calls)]."""
    ours = ntc_product(args.dry)
    l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 50 << 20) if dev.type == "cuda" else 1 << 25
    done = []
    for i, (p, calls) in enumerate(problems):
        if late():
            log(f"deadline: {len(problems) - i} products of {model} not measured")
            break
        try:
            r = measure(p, args, dev, ours, l2)
        except Exception as e:
            r = dict(p.record(), ok=False, error=f"{type(e).__name__}: {e}")
            log(f"FAILED: {p.source} {p.op} {p.shape()}: {r['error']}")
        r = rec(kind="gemm", model=model, calls=calls, **(extra or {}), **r)
        done.append((r, calls))
        if r.get("ratio") and (i % 10 == 0 or args.verbose):
            log(f"gemm {i + 1}/{len(problems)} {p.source} {p.op} {p.shape()} {p.dtype}: numba_tc {r['ms'] * 1e3:.1f} us, "
                f"torch {r['torch_ms'] * 1e3:.1f} us, ratio {r['ratio']:.3f}; {r['plan']}")
    return done


def hbm_bandwidth(dev) -> float:
    """TB/s of a 1 GiB device-to-device copy (bytes read and written), median of many."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    from numba_tc.bench import time_gpu
    return 2 * src.numel() / time_gpu(lambda: dst.copy_(src), min_reps=10, max_reps=50, budget_s=0.5) * 1e-9


# --- compiling ahead of the timing -------------------------------------------------------------

_JOBS: list = []


def _compile(i: int) -> float:
    from numba_tc import build
    t = time.perf_counter()
    build.cubin(*_JOBS[i])
    return time.perf_counter() - t


def build_kernels(kernels, arch: str, jobs: int) -> list:
    """Each of ``kernels`` built for ``arch`` into the disk cache (``build.cubin``), in ``jobs``
    forked processes (as ``numba_tc.aot`` does: a build uses no GPU); seconds each. Should the
    pool fail or stall (a fork of a process with torch's threads), what is left is built here."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    _JOBS[:] = [(k, arch) for k in kernels]
    n = min(jobs, len(_JOBS))
    if n > 1:
        pool = ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))
        try:
            return list(pool.map(_compile, range(len(_JOBS)), timeout=120 + 60 * len(_JOBS) / n))
        except Exception as e:
            log(f"the compile pool failed ({type(e).__name__}: {e}); building the rest in this process")
            for p in list(getattr(pool, "_processes", {}).values()):
                p.terminate()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
    return [_compile(i) for i in range(len(_JOBS))]      # (those already built are read from the cache)


def warm(problems, args, dev) -> dict:
    """Compile, in ``args.jobs`` processes, every kernel numba_tc will run for ``problems``: each
    is planned (``numba_tc.explain``) with ``driver.load`` standing in, which loads the kernels
    in the disk cache and puts a placeholder in the plan for the others; those are then built
    into the cache in parallel, as ``python -m numba_tc compile`` does. A plan that needs a
    loaded kernel (a cluster's occupancy) fails in the first round and is made again once its
    kernels are built. (The placeholders' plans are dropped: the call caches are cleared.)"""
    import numba_tc
    from numba_tc import api, build, cache, driver
    arch = driver.arch(driver.capability(dev.index or 0))
    real, known = driver.load, {}
    t0, built, cpu = time.perf_counter(), 0, 0.0
    todo = list(dict.fromkeys(problems))
    for _ in range(4):
        new = {}

        def load(kernel, d):
            if kernel.key not in known:
                known[kernel.key] = cache.load(build.key_material(kernel, arch), arch) is not None
            if known[kernel.key]:
                return real(kernel, d)
            new[kernel.key] = kernel
            return _UNBUILT
        driver.load, failed = load, []
        try:
            for p in todo:
                try:
                    ops = operands(p, dev, fill=False)
                    numba_tc.explain(ops[0], ops[1], bias=ops[2])
                except Exception:
                    failed.append(p)
        finally:
            driver.load = real
            api._CALLS.clear()
            api._BATCHED.clear()
        if new:
            log(f"compiling {len(new)} kernels in {min(args.jobs, len(new))} processes")
            secs = build_kernels(list(new.values()), arch, args.jobs)
            built, cpu = built + len(secs), cpu + sum(secs)
            known.update((k, True) for k in new)
        todo = failed
        if not new or not todo:
            break
    return dict(kernels_built=built, kernels_cached=sum(known.values()) - built, compile_cpu_s=cpu,
                seconds=time.perf_counter() - t0, problems=len(problems), unplanned=len(todo))


_UNBUILT = object()      # (in a plan made only to find its kernels; never launched)


# --- (e) the profile of one training step --------------------------------------------------------

def profile(family, size, args, dev, rec, trace_dir):
    """One training step of each arm (after three) under torch.profiler: both traces written to
    ``trace_dir``, the kernels and host operations tabled (``md.profile_tables``). numba_tc's
    launches are all "numba_tc_kernel" to the profiler: each is named by its launch's label
    (``plan.Step.run`` watched while the step runs), in launch order (one stream)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as tprofile
    tr = Trainer(family, size, args, dev)
    for i in range(3):
        for arm in (0, 1):
            tr.step(arm, i)
    sync(dev)
    labels, kernels, host = [], {}, {}
    if not args.dry:
        from numba_tc import plan
        run = plan.Step.run

        def spy(self, values, stream):
            labels.append(self.label)
            return run(self, values, stream)
    for arm, who in enumerate(md.ARMS):
        labels.clear()
        if not args.dry:
            plan.Step.run = spy
        try:
            with tprofile(activities=[ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * (dev.type == "cuda")) as prof:
                tr.step(arm, 3)
                sync(dev)
        finally:
            if not args.dry:
                plan.Step.run = run
        if trace_dir:
            prof.export_chrome_trace(os.path.join(trace_dir, f"trace_{family}_{who}.json.gz"))
        evs = prof.events()
        names = iter(labels)
        kernels[who] = [("numba_tc: " + next(names, "(launch not seen)") if e.name == "numba_tc_kernel" else e.name,
                         e.time_range.elapsed_us())
                        for e in sorted((e for e in evs if e.device_type != DeviceType.CPU), key=lambda e: e.time_range.start)]
        host[who] = [e.name for e in evs if e.device_type == DeviceType.CPU]
    t = md.profile_tables(kernels, host)
    seq = tokens_of(family, tr.models[0], size[1])
    rec(kind="profile", model=family, batch=size[0], seq=seq, ratio=None, device=t["device"], host=t["host"],
        kernels_changed=t["changed"][:60], numba_tc_launches=len(labels),
        traces=[f"trace_{family}_{w}.json.gz" for w in md.ARMS] if trace_dir else [])
    print(md.profile_text(t, f"one training step of {family} {size[0]}x{seq}"), flush=True)


# --- records, the command line -------------------------------------------------------------------

def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200' (the records file's suffix)."""
    words = re.sub(r"[^a-z0-9]+", " ", name.lower().replace("nvidia", "")).split()
    return words[0] if words else "gpu"


def save(records, path):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(records, f, indent=1)
    os.replace(path + ".tmp", path)


def step_totals(done, rec, model, size):
    """One training step's linear products, each timed alone times its calls a step: torch's
    (forward, dX, dW) against numba_tc's (forward, dX, and for nn.Linear its own dW^T)."""
    t = o = 0.0
    linear_dwt = {r["source"] for r, _ in done if r["op"] == "dwT"}
    for r, calls in done:
        if r.get("ratio") is None or r["batch"]:
            continue
        t += calls * r["torch_ms"] * (r["op"] in ("fwd", "dx", "dw"))
        o += calls * r["ms"] * (r["op"] in ("fwd", "dx", "dwT") or (r["op"] == "dw" and r["source"] not in linear_dwt))
    if o:
        rec(kind="gemm", model=model, size=size, op=md.STEP_OP, torch_ms=t, ms=o, ratio=t / o)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--size", action="append", default=[], metavar="FAMILY:BxS",
                    help="a size instead of the family's own (repeatable; ViT: vit:BATCH)")
    ap.add_argument("--quick", action="store_true", help="one size a family, fewer steps, a smaller draw (~3 min)")
    ap.add_argument("--seed", type=int, default=0, help="the models' initialization and the sampler's draw")
    ap.add_argument("--count", type=int, help="the sampler's problems a dtype (default 320; --quick 64)")
    ap.add_argument("--dtypes", nargs="+", choices=("bfloat16", "float16"), help="the sampler's (default both; --quick bf16)")
    ap.add_argument("--steps", type=int, help="timed training steps an arm (default 10; --quick 4)")
    ap.add_argument("--warmup", type=int, help="untimed steps first (default 3; --quick 2)")
    ap.add_argument("--reps", type=int, help="timed prefills an arm (default 8; --quick 3)")
    ap.add_argument("--rounds", type=int, help="timed decodings an arm (default 3; --quick 2)")
    ap.add_argument("--decode-tokens", type=int, help="new tokens a decoding (default 64; --quick 16)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens (prefill, decoding)")
    ap.add_argument("--infer", choices=("bf16", "autocast"), default="bf16",
                    help="inference with bf16 weights, or fp32 weights under bf16 autocast")
    ap.add_argument("--gemm-rounds", type=int, help="alternating timing rounds a product (default 3; --quick 2)")
    ap.add_argument("--gemm-budget", type=float, help="seconds of timing a product (default 0.15; --quick 0.05)")
    ap.add_argument("--profile", nargs="*", metavar="FAMILY", help="profile a training step (default family: bert)")
    ap.add_argument("--trace-dir", help="where the profile's traces go (default: beside --out)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes compiling kernels")
    ap.add_argument("--deadline", type=float, help="seconds after which nothing new starts (records are kept)")
    ap.add_argument("--out", help="the records (default benchmarks/results/models_<gpu>[_quick].json)")
    ap.add_argument("--merge", nargs="+", metavar="FILE", help="only concatenate these record files into --out")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dry", action="store_true", help="never call numba_tc: the second arm is torch again")
    ap.add_argument("--tiny", action="store_true", help="tiny models (a smoke test)")
    ap.add_argument("--verbose", action="store_true", help="a line for every product")
    args = ap.parse_args(argv)
    for name, full, quick in (("count", 320, 64), ("steps", 10, 4), ("warmup", 3, 2), ("reps", 8, 3), ("rounds", 3, 2),
                              ("decode_tokens", 64, 16), ("gemm_rounds", 3, 2), ("gemm_budget", 0.15, 0.05),
                              ("dtypes", ["bfloat16", "float16"], ["bfloat16"])):
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.merge and not args.out:
        ap.error("--merge needs --out")
    if args.profile == []:
        args.profile = ["bert"] if "bert" in args.families else args.families[:1]
    given = {}
    for s in args.size:
        f, _, bs = s.partition(":")
        b, _, seq = bs.partition("x")
        if f not in args.families or not b.isdigit() or not (seq.isdigit() or (f == "vit" and not seq)):
            ap.error(f"--size {s!r}: FAMILY:BATCHxSEQ (ViT: vit:BATCH), a family among --families")
        given.setdefault(f, []).append((int(b), int(seq or 197)))
    own = {f: [(2, 32), (4, 64)] if args.tiny else FAMILIES[f][1] for f in FAMILIES}     # (tiny: 256 positions)
    args.sizes = {f: given.get(f) or own[f][:1 if args.quick else None] for f in FAMILIES}
    _DEADLINE[0] = args.deadline
    return args


def main(argv=None):
    args = parse(argv)
    if args.merge:
        save([r for p in args.merge for r in json.load(open(p))], args.out)
        return
    dev = torch.device(args.device)
    from numba_tc.bench import commit_id
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    commit = commit_id()
    if commit == "unknown" or commit.endswith("+dirty"):
        log(f"commit {commit}: " + ("no .git here: set NUMBA_TC_COMMIT" if commit == "unknown" else "measuring a dirty tree"))
    path = args.out or os.path.join(HERE, "results", f"models_{gpu_slug(gpu)}{'_dry' * args.dry}{'_quick' * args.quick}.json")
    trace_dir = args.trace_dir or os.path.dirname(os.path.abspath(path))
    records = []
    base = dict(gpu=gpu, commit=commit, torch=torch.__version__, dry=args.dry, tiny=args.tiny,
                command="python benchmarks/models.py " + " ".join(sys.argv[1:] if argv is None else argv))

    def rec(**kw):
        records.append({**kw, **base})
        return records[-1]
    log(f"{gpu}, commit {commit}, torch {torch.__version__}; {' '.join(args.families)}: {' '.join(args.kinds)}; to {path}")
    hbm = None
    if dev.type == "cuda":
        hbm = hbm_bandwidth(dev)
        rec(kind="hbm", model="copy", tbs=hbm, ratio=None)
        log(f"HBM: a device-to-device copy moves {hbm:.2f} TB/s")
    probs = {f: captured(f, args, dev) for f in args.families} if set(args.kinds) - {"sampled"} else {}
    for f, (tr, inf) in probs.items():
        log(f"{f}: {sum(map(len, tr.values()))} products in training ({', '.join(tr)}), {len(inf)} in inference")
    drawn = {dt: md.draw(args.seed, args.count, dt) for dt in args.dtypes} if "sampled" in args.kinds else {}
    if args.tiny:                                  # (the draw's shapes, 32 times smaller each way)
        drawn = {dt: [dataclasses.replace(p, m=-(-p.m // 32), n=-(-p.n // 32), k=-(-p.k // 32)) for p in ps]
                 for dt, ps in drawn.items()}
    if not args.dry and dev.type == "cuda":
        todo = [p for tr, inf in probs.values() for v in list(tr.values()) + [inf] for p, _ in v]
        w = warm(todo + [p for v in drawn.values() for p in v], args, dev)
        rec(kind="compile", model="all", ratio=None, **w)
        log(f"compiled {w['kernels_built']} kernels in {w['seconds']:.0f} s ({w['kernels_cached']} were cached)")
    for f in args.families if "train" in args.kinds else ():
        for size in args.sizes[f]:
            if not late():
                train(f, size, args, dev, rec)
        save(records, path)
    for f in args.families if {"prefill", "decode"} & set(args.kinds) else ():
        infer(f, args, dev, rec)
        save(records, path)
    for f in args.families if "gemm" in args.kinds else ():
        for size, ps in probs[f][0].items():
            step_totals(gemms(ps, args, dev, rec, f, dict(size=size)), rec, f, size)
        if not args.quick:
            gemms(probs[f][1], args, dev, rec, f, dict(size="inference"))
        save(records, path)
    for dt, ps in drawn.items():
        done = [r for r, _ in gemms([(p, 1) for p in ps], args, dev, rec, "sampler", dict(seed=args.seed))]
        for subset, s in md.summarize([r for r in done if r.get("ratio")], hbm).items():
            rec(kind="sampled", model="sampler", subset=subset, seed=args.seed, dtype=dt, drawn=len(ps),
                wrong=sum(not r.get("ok") for r in done), ratio=s["geomean"], hbm_tbs=hbm, **s)
        save(records, path)
    for f in args.profile or ():
        if not late():
            profile(f, args.sizes[f][0], args, dev, rec, trace_dir)
            save(records, path)
    save(records, path)
    print(md.summary(records), flush=True)
    log(f"done: {len(records)} records in {path}")


if __name__ == "__main__":
    main()
