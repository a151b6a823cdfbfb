"""GPT-2 small trained end to end with every nn.Linear / Conv1D forward and backward through
numba_tc, beside the same model on plain torch (cuBLAS), then greedy decoding with a KV cache.

    python examples/train_gpt.py                      # 200 steps each, generation at batch 1 and 16
    python examples/train_gpt.py --short              # a 2-layer model, 20 steps (the GPU test)
    python examples/train_gpt.py --json out.json --plot loss.png

The model: GPT-2 small's configuration (12 layers, width 768, 12 heads, context 1024) built with
``transformers`` from its config, random weights (nothing is downloaded); the vocabulary is padded
to 50304 (a multiple of 64, as nanoGPT does: 50257 rows of 2 bytes are not 16-byte aligned, which
TMA needs, so numba_tc would fall back to its mma.sync ladder for the LM head; torch runs the same
padded model). Dropout off, so both runs see the same arithmetic up to the products. bf16 autocast,
AdamW, attention in torch's SDPA for both.

The task, made here: each sequence is a walk of a fixed random Markov chain over 1024 tokens (4
successors each, random probabilities) for its first half, and the first half again as its second
half. The first half can be learned down to the chain's entropy, the second by copying (induction),
so the loss has a floor well above zero and two runs' final losses compare meaningfully.

Both runs start from the same seed (the same initial weights, the same batches), their steps
interleaved (step t of each on the same batch, in alternating order). numba_tc's run
patches the model (``numba_tc.torch.patched``): every Linear/Conv1D goes through
``torch.ops.numba_tc.gemm`` (bias fused, backward dA and dB with numba_tc). Step times are medians
over the steps after the first ``--warmup`` (which include compiling numba_tc's kernels).
Generation uses the torch-trained weights for both, with and without the patch: prompt 32 tokens,
``--gen-tokens`` new ones, greedy, at batch 1 and 16: after a warm-up decode each, ``--gen-rounds``
decodes each in alternation. Tokens/s: the batch over a decode step's time (the median step of a
round, the fastest round of each side): a step is host-bound on both sides (the GPU works about a
millisecond of it), and the shared host's speed swings by 2x from second to second
(benchmarks/NOTES.md, session 18); whole decodes (prompt and final synchronization included,
the fastest round) are recorded beside it as ``*_wall``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numba_tc.torch as ntt          # noqa: E402

TASK_VOCAB = 1024
SUCCESSORS = 4


def make_chain(seed: int):
    rng = np.random.default_rng(seed)
    succ = rng.integers(0, TASK_VOCAB, size=(TASK_VOCAB, SUCCESSORS))
    probs = rng.dirichlet(np.ones(SUCCESSORS) * 0.5, size=TASK_VOCAB)
    return succ, np.cumsum(probs, axis=1)


def make_batch(chain, batch: int, seq: int, seed: int) -> np.ndarray:
    """``batch`` sequences of ``seq`` tokens: a chain walk, then the walk again."""
    succ, cum = chain
    rng = np.random.default_rng(seed)
    half = seq // 2
    x = np.empty((batch, seq), dtype=np.int64)
    cur = rng.integers(0, TASK_VOCAB, size=batch)
    x[:, 0] = cur
    for t in range(1, half):
        u = rng.random(batch)[:, None]
        j = np.minimum((u > cum[cur]).sum(axis=1), SUCCESSORS - 1)
        cur = succ[cur, j]
        x[:, t] = cur
    x[:, half:] = x[:, :seq - half]
    return x


def chain_entropy(chain) -> float:
    """The entropy (nats) of one step of the chain, averaged over tokens: the loss floor of the
    first half (the second half's floor is 0)."""
    cum = chain[1]
    p = np.diff(np.concatenate([np.zeros((TASK_VOCAB, 1)), cum], axis=1), axis=1)
    return float(-(p * np.log(np.maximum(p, 1e-12))).sum(axis=1).mean())


def build_model(args, device):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=50304, n_positions=args.seq, n_embd=768, n_layer=args.layers, n_head=12,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(args.seed)
    return GPT2LMHeadModel(cfg).to(device)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Run:
    """One of the two training runs: its model (numba_tc's patched), optimizer, losses, step times."""

    def __init__(self, args, device, ours: bool):
        self.name, self.device, self.ours = "numba_tc" if ours else "torch", device, ours
        self.model = build_model(args, device)
        self.model.train()
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                                     fused=device.type == "cuda")
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda s: min(1.0, (s + 1) / args.lr_warmup))
        if ours:
            ntt.patch(self.model)
        self.losses, self.times = [], []

    def step(self, x):
        _sync(self.device)
        t = time.perf_counter()
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = self.model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        _sync(self.device)
        self.times.append(time.perf_counter() - t)
        self.losses.append(float(loss.detach()))

    def evaluate(self, args, chain) -> float:
        self.model.eval()
        ev = []
        with torch.no_grad(), torch.autocast(self.device.type, dtype=torch.bfloat16):
            for i in range(args.eval_batches):
                x = torch.from_numpy(make_batch(chain, args.batch, args.seq, 10 ** 9 + i)).to(self.device)
                ev.append(float(self.model(input_ids=x, labels=x).loss))
        if self.ours:
            ntt.unpatch(self.model)
        return statistics.mean(ev)


def train(args, device):
    """Both runs, their steps interleaved (torch's and numba_tc's step t on the same batch, in
    alternating order), so that both see the same host and GPU conditions. {"torch" | "ours":
    (losses per step, step seconds, eval loss, model)}."""
    chain = make_chain(args.seed)
    runs = {"torch": _Run(args, device, ours=False), "ours": _Run(args, device, ours=True)}
    for step in range(args.steps):
        x = torch.from_numpy(make_batch(chain, args.batch, args.seq, args.seed * 100003 + step)).to(device)
        for who in (("torch", "ours") if step % 2 == 0 else ("ours", "torch")):
            runs[who].step(x)
        if step % max(1, args.steps // 10) == 0 or step == args.steps - 1:
            print(f"  step {step:4d}  loss " + ", ".join(
                f"{r.name} {r.losses[-1]:.4f} ({r.times[-1] * 1e3:.1f} ms)" for r in runs.values()), flush=True)
    return {who: (r.losses, r.times, r.evaluate(args, chain), r.model) for who, r in runs.items()}


@torch.no_grad()
def decode(model, prompt, new_tokens: int, device):
    """Greedy decoding with the KV cache: (tokens (batch, new_tokens), seconds in all, the host's
    seconds for each decode step after the prompt's)."""
    _sync(device)
    t = time.perf_counter()
    with torch.autocast(device.type, dtype=torch.bfloat16):
        out = model(input_ids=prompt, use_cache=True)
        pkv = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        toks, marks = [nxt], [time.perf_counter()]
        for _ in range(new_tokens - 1):
            out = model(input_ids=nxt, past_key_values=pkv, use_cache=True)
            pkv = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            toks.append(nxt)
            marks.append(time.perf_counter())
    toks = torch.cat(toks, dim=1)
    _sync(device)
    return toks, time.perf_counter() - t, [b - a for a, b in zip(marks, marks[1:])]


def generation(args, model, device):
    chain = make_chain(args.seed)
    recs = []
    for batch in args.gen_batches:
        prompt = torch.from_numpy(make_batch(chain, batch, 32, 7 * 10 ** 8 + batch)).to(device)
        tokens = {}
        for who in ("torch", "ours"):                      # warm-up (numba_tc: plans, kernels)
            with ntt.patched(model) if who == "ours" else _nullcontext():
                decode(model, prompt, args.gen_tokens, device)
        best, walls = {}, {}
        for r in range(args.gen_rounds):                   # then in alternation, the fastest round each
            for who in (("torch", "ours") if r % 2 == 0 else ("ours", "torch")):
                with ntt.patched(model) if who == "ours" else _nullcontext():
                    toks, sec, steps = decode(model, prompt, args.gen_tokens, device)
                step = statistics.median(steps) if steps else sec
                best[who] = min(best.get(who, step), step)
                walls[who] = min(walls.get(who, sec), sec)
                tokens[who] = toks
        rates = {who: batch / sec for who, sec in best.items()}
        wall_rates = {who: batch * args.gen_tokens / sec for who, sec in walls.items()}
        agree = float((tokens["ours"] == tokens["torch"]).float().mean())
        rec = dict(kind="generate", model="gpt2-124M" if args.layers == 12 else f"gpt2-{args.layers}layer",
                   batch=batch, prompt_tokens=32, new_tokens=args.gen_tokens, rounds=args.gen_rounds,
                   ours_tokens_s=round(rates["ours"], 1), torch_tokens_s=round(rates["torch"], 1),
                   ratio=round(rates["ours"] / rates["torch"], 4), tokens_agree=round(agree, 4),
                   ours_tokens_s_wall=round(wall_rates["ours"], 1), torch_tokens_s_wall=round(wall_rates["torch"], 1),
                   ratio_wall=round(wall_rates["ours"] / wall_rates["torch"], 4))
        print(f"  generate batch {batch:3d}: numba_tc {rec['ours_tokens_s']:9.1f} tok/s, torch "
              f"{rec['torch_tokens_s']:9.1f} tok/s, ratio {rec['ratio']:.3f} (whole decodes {rec['ratio_wall']:.3f}); "
              f"greedy tokens agree {agree:.1%}", flush=True)
        recs.append(rec)
    return recs


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def plot(path, ours, theirs, floor, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    ax.plot(theirs, label="torch (cuBLAS)", lw=1.6, color="tab:blue")
    ax.plot(ours, label="numba_tc (every Linear fwd+bwd)", lw=1.2, color="tab:orange", ls="--")
    ax.axhline(floor, color="gray", lw=0.8, ls=":", label=f"task floor ({floor:.2f} nats)")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats)")
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--short", action="store_true", help="2 layers, context 256, batch 4, 20 steps, 16 new tokens")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--lr-warmup", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=10, help="steps left out of the step time")
    ap.add_argument("--eval-batches", type=int, default=4)
    ap.add_argument("--gen-batches", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--gen-rounds", type=int, default=8, help="decodes each, torch's and numba_tc's alternating")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu to check the script (numba_tc then idle)")
    ap.add_argument("--json", help="write the train and generate records here")
    ap.add_argument("--plot", help="the loss curves (PNG)")
    ap.add_argument("--command", help="the command recorded in the records (default: this one)")
    if "--short" in (sys.argv[1:] if argv is None else argv):      # (options given still win)
        ap.set_defaults(layers=2, seq=256, batch=4, steps=20, gen_tokens=16, warmup=5, eval_batches=1,
                        gen_rounds=2)
    args = ap.parse_args(argv)
    from numba_tc.bench import stamp
    meta = dict(stamp(args.json), command=args.command or "python " + " ".join(sys.argv))   # before training
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    chain = make_chain(args.seed)
    floor = chain_entropy(chain) / 2
    print(f"GPT-2 ({args.layers} layers, width 768, context {args.seq}), batch {args.batch}, "
          f"{args.steps} steps; task floor {floor:.3f} nats", flush=True)
    results = train(args, device)
    results["ours"] = results["ours"][:3]          # (its model freed: generation uses torch's weights)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    lo, to, eo = results["ours"]
    lt, tt, et, model = results["torch"]
    ours_ms = statistics.median(to[args.warmup:]) * 1e3
    torch_ms = statistics.median(tt[args.warmup:]) * 1e3
    name = "gpt2-124M" if args.layers == 12 else f"gpt2-{args.layers}layer"
    rec = dict(kind="train", model=name, steps=args.steps, tokens_per_step=args.batch * args.seq,
               ours_ms=round(ours_ms, 2), torch_ms=round(torch_ms, 2), ratio=round(torch_ms / ours_ms, 4),
               loss_ours=round(eo, 5), loss_torch=round(et, 5), loss_rel_diff=round(abs(eo - et) / et, 5),
               train_loss_ours=round(lo[-1], 5), train_loss_torch=round(lt[-1], 5),
               loss_max_rel_diff_curve=round(max(abs(a - b) / b for a, b in zip(lo, lt)), 5),
               loss_floor=round(floor, 5), losses_ours=[round(v, 5) for v in lo],
               losses_torch=[round(v, 5) for v in lt], **meta)
    print(f"train: numba_tc {ours_ms:.1f} ms/step, torch {torch_ms:.1f} ms/step, ratio {rec['ratio']:.3f}; "
          f"final eval loss {eo:.4f} vs {et:.4f} (rel diff {rec['loss_rel_diff']:.4f})", flush=True)
    recs = [rec]
    if args.gen_batches and args.gen_tokens > 0:
        recs += [dict(r, **meta) for r in generation(args, model, device)]
    if args.plot:
        plot(args.plot, lo, lt, floor, f"{name}, {args.steps} steps, batch {args.batch}x{args.seq}, bf16 autocast: "
                                       f"final eval {eo:.3f} / {et:.3f}")
        print(f"loss curves: {args.plot}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(recs, f, indent=1)
        print(f"records written to {args.json}")
    return recs


if __name__ == "__main__":
    main()
