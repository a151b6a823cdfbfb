"""Greedy decoding of a Llama-style decoder with int4 weights (numba_tc.quant) against the same
model in bfloat16 through torch, random weights, tokens per second at batch 1.

    python examples/quantized_llama.py --layers 8 --tokens 64        # Llama-3-8B's layer shapes

The model is written here (RMSNorm, rotary positions, grouped-query attention over a static KV
cache, SwiGLU) from a ``transformers.LlamaConfig`` (its defaults if transformers is absent), so
that one decoding step is a static graph: each step is captured once in a CUDA graph and
replayed, for both weight kinds, so that the host's Python does not hide the products' time.
The int4 model is the bf16 one with every decoder linear layer replaced by
``numba_tc.torch_quant.QuantLinear`` (group 128; ``lm_head`` stays bf16 in both).
"""
from __future__ import annotations

import argparse
import math
import time

import torch
import torch.nn.functional as F
from torch import nn

LLAMA3_8B = dict(hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
                 vocab_size=32000, rms_norm_eps=1e-5, rope_theta=500000.0)


def config(layers: int):
    try:
        from transformers import LlamaConfig
        return LlamaConfig(num_hidden_layers=layers, **LLAMA3_8B)
    except ImportError:
        return argparse.Namespace(num_hidden_layers=layers, **LLAMA3_8B)


def rope_theta(c) -> float:
    """The rotary base: ``rope_theta`` (transformers 4.x), ``rope_parameters["rope_theta"]``
    (5.x), else Llama 3's."""
    theta = getattr(c, "rope_theta", None)
    if theta is None:
        theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta")
    return float(theta if theta is not None else LLAMA3_8B["rope_theta"])


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        v = x.float()
        v = v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        return (v * self.weight.float()).to(x.dtype)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hd = c.hidden_size, c.hidden_size // c.num_attention_heads
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, hd
        self.q_proj = nn.Linear(h, self.nh * hd, bias=False)
        self.k_proj = nn.Linear(h, self.nkv * hd, bias=False)
        self.v_proj = nn.Linear(h, self.nkv * hd, bias=False)
        self.o_proj = nn.Linear(self.nh * hd, h, bias=False)
        self.gate_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, h, bias=False)
        self.n1, self.n2 = RMSNorm(h, c.rms_norm_eps), RMSNorm(h, c.rms_norm_eps)

    def forward(self, x, cos, sin, kc, vc, pos, mask):
        h = self.n1(x)
        q = self.q_proj(h).view(self.nh, self.hd)
        k = self.k_proj(h).view(self.nkv, self.hd)
        v = self.v_proj(h).view(self.nkv, self.hd)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        kc.index_copy_(0, pos, k[None])
        vc.index_copy_(0, pos, v[None])
        rep = self.nh // self.nkv
        kk = kc.repeat_interleave(rep, dim=1)                  # (T, nh, hd)
        vv = vc.repeat_interleave(rep, dim=1)
        s = torch.einsum("hd,thd->ht", q.float(), kk.float()) / math.sqrt(self.hd) + mask
        a = torch.einsum("ht,thd->hd", torch.softmax(s, -1), vv.float()).to(x.dtype).reshape(1, -1)
        x = x + self.o_proj(a)
        h = self.n2(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def rope(x, cos, sin):
    a, b = x[..., ::2].float(), x[..., 1::2].float()
    return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2).to(x.dtype)


class Decoder(nn.Module):
    """One token a step (batch 1), a static KV cache of ``max_len`` positions."""

    def __init__(self, c, max_len):
        super().__init__()
        self.embed = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        hd = c.hidden_size // c.num_attention_heads
        inv = 1.0 / (rope_theta(c) ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.arange(max_len).float()[:, None] * inv[None]
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)
        self.register_buffer("kv", torch.zeros(c.num_hidden_layers, 2, max_len, c.num_key_value_heads, hd),
                             persistent=False)
        self.max_len = max_len

    def step(self, ids, pos):
        x = self.embed(ids).view(1, -1)
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)
        t = torch.arange(self.max_len, device=ids.device)
        mask = torch.where(t <= pos, 0.0, float("-inf"))[None]
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, self.kv[i, 0], self.kv[i, 1], pos, mask)
        return self.lm_head(self.norm(x))


def init_(model, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, device="cuda", generator=g) / math.sqrt(p.shape[-1]))
    return model


def decode(model, tokens: int, first: int = 1):
    """Greedy decoding of ``tokens`` steps from token ``first``, each step a CUDA graph replay:
    (token ids, tokens per second)."""
    ids = torch.tensor([first], device="cuda")
    pos = torch.zeros(1, dtype=torch.long, device="cuda")
    model.kv.zero_()
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):                               # compiles, plans, allocations
                model.step(ids, pos)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            logits = model.step(ids, pos)
        model.kv.zero_()
        out = torch.empty(tokens, dtype=torch.long, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(tokens):
            pos.fill_(i)
            g.replay()
            nxt = logits.argmax(-1)
            out[i] = nxt[0]
            ids.copy_(nxt)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
    return out.tolist(), tokens / dt


def logits_along(model, tokens, first: int = 1):
    """(steps, vocab) float32 logits of the model fed ``tokens`` one at a time (teacher-forced,
    eager): every model sees the same inputs."""
    model.kv.zero_()
    out = []
    with torch.no_grad():
        for i, tok in enumerate([first] + list(tokens[:-1])):
            ids = torch.tensor([tok], device="cuda")
            out.append(model.step(ids, torch.tensor([i], device="cuda")).float())
    return torch.cat(out)


def dequantized_(model):
    """Each ``QuantLinear`` of ``model`` replaced, in place, by an ``nn.Linear`` of its weight
    dequantized to bf16 (``quant.dequantize``: one rounding of value * scale): the int4 model's
    reference, which its products must equal up to rounding."""
    from numba_tc import quant
    from numba_tc.torch_quant import QuantLinear
    for mod in list(model.modules()):
        for name, child in list(mod.named_children()):
            if isinstance(child, QuantLinear):
                lin = nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                device="cuda", dtype=torch.bfloat16)
                with torch.no_grad():
                    lin.weight.copy_(quant.dequantize(child.qw, "bfloat16", "bfloat16"))
                    if child.bias is not None:
                        lin.bias.copy_(child.bias)
                setattr(mod, name, lin)
    return model


def compare(layers: int = 8, tokens: int = 64, group: int = 128):
    """A dict: ``bf16_tps``, ``int4_tps`` (tokens/s); ``rel_err``: max |logits of the int4
    model - logits of the same model with its weights dequantized to bf16| / max |the latter|
    over the int4 model's tokens (teacher-forced: both see the same inputs), and
    ``argmax_agree``: the steps whose greedy token is the same in both; ``agree_bf16``: the
    first greedy tokens equal to the unquantized bf16 model's (a different model: int4 changes
    each weight by up to half a step, and random weights give near-tied logits, so this is
    expected to be small)."""
    from numba_tc.torch_quant import quantize_model
    c = config(layers)
    model = init_(Decoder(c, tokens + 1).cuda().to(torch.bfloat16)).eval()
    ref, bf16_tps = decode(model, tokens)
    quantize_model(model, "int4", group, skip=("lm_head",))
    torch.cuda.empty_cache()
    got, int4_tps = decode(model, tokens)
    agree = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), len(ref))
    lq = logits_along(model, got)
    ld = logits_along(dequantized_(model), got)
    rel = float((lq - ld).abs().max() / ld.abs().max())
    same = int((lq.argmax(-1) == ld.argmax(-1)).sum())
    return dict(bf16_tps=bf16_tps, int4_tps=int4_tps, rel_err=rel, argmax_agree=same, agree_bf16=agree)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--group", type=int, default=128)
    a = p.parse_args()
    r = compare(a.layers, a.tokens, a.group)
    print(f"{a.layers} layers of Llama-3-8B's shapes, batch 1, {a.tokens} tokens: bf16 torch {r['bf16_tps']:.1f} "
          f"tok/s, int4 numba_tc {r['int4_tps']:.1f} tok/s, {r['int4_tps'] / r['bf16_tps']:.2f}x; int4 logits vs "
          f"its dequantized bf16 weights: rel_err {r['rel_err']:.1e}, greedy token equal at {r['argmax_agree']} of "
          f"{a.tokens} steps (vs the unquantized bf16 model: the first {r['agree_bf16']} agree)")


if __name__ == "__main__":
    main()
