"""Quantized-weight products (issue 56) against cuBLAS bf16 and torch's int4 tinygemm, checked
against float64 first, then timed interleaved; and a Llama-style decoder's greedy decoding.

    python benchmarks/quantized.py --quick --out $OUT/quantized_h200.json     # ~2 minutes
    python benchmarks/quantized.py --out benchmarks/results/quantized_h200.json

Per case: the weight w (N, K) random, quantized on the GPU (``quant.quantize``); x (batch, K)
bf16. Correctness: ``rel_err`` = max |y - ref| / max |ref| against the float64 product of the
exactly dequantized weight (the first 64 rows for large batches). Timing: cuBLAS bf16
(``F.linear`` of the dequantized bf16 weight: the same problem), ``quant.gemm``, and
``torch._weight_int4pack_mm`` on the same codes and scales (zero points 0) where it runs, each
as a list of calls cycling through enough copies of its weight to exceed L2 (a decoding model's
layers are never in L2), timed two ways, every method the same way and in turn over rounds
(medians): a CUDA graph of the calls replayed between events (``us``: the GPU's time per call,
as a decoder replaying its step sees it) and an eager Python loop of them (``eager_us``: with the
host's cost per call, which exceeds a small product's kernel). ``--sweep``: the streaming
kernel's configurations around the picked one instead (``feature: "quantized_sweep"``). Records (one JSON list):
``{"feature": "quantized", "format", "group", "m", "n", "k", "batch", "ratio_bf16" (cuBLAS bf16
time / ours, graphs), "ratio_bf16_eager", "ratio_tinygemm", "ratio_builtin" (nf4_user: built-in
int4 of the same group's time / the user's), "rel_err", "us", "eager_us", "plan", "gpu",
"commit"}`` and ``{"feature":
"quantized_decode", "ratio" (int4 tokens/s / bf16 torch's), "layers", "tokens", ...}``.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from numba import cuda

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from numba_tc import quant as Q  # noqa: E402
from numba_tc.bench import stamp  # noqa: E402

NF4 = np.array(Q.NF4_LEVELS, np.float32)


@cuda.jit(device=True)
def nf4(code):
    return NF4[code]


SHAPES = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672)]      # (K, N): in, out features
L2_BYTES = 50 << 20


def copies_for(nbytes: int) -> int:
    return max(1, min(64, math.ceil(3 * L2_BYTES / max(nbytes, 1))))


def eager(fns, calls: int) -> float:
    """Microseconds per call of ``calls`` Python calls cycling through ``fns`` (events around
    the loop: where a call's host cost exceeds its kernel, this is the host's)."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for i in range(calls):
        fns[i % len(fns)]()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) * 1e3 / calls


def capture(fns, calls: int):
    """A CUDA graph of ``calls`` calls cycling through ``fns``, as a decoder's step replays its
    layers (warmed on a side stream first: plans, compiles, allocations)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fns[i % len(fns)]()
    return g


def replayed(g, calls: int) -> float:
    """Microseconds per call of one replay of a graph of ``calls`` calls (GPU time only)."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    g.replay()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1) * 1e3 / calls


def interleaved(methods: dict, rounds: int, calls: int) -> dict:
    """Per method (a list of calls cycling through weight copies): the median over ``rounds``
    of a graph replay of ``calls`` calls ("graph", what a decoder's step costs) and of an eager
    Python loop of them ("eager", with the host's cost), the methods taken in turn each round."""
    try:
        graphs = {k: capture(fns, calls) for k, fns in methods.items()}
    except Exception as e:                         # noqa: BLE001  (every method eager then, alike)
        print(f"  a capture failed ({type(e).__name__}: {str(e)[:160]}): eager times in both columns")
        torch.cuda.synchronize()
        graphs = None
    for k, fns in methods.items():                 # (warm: clocks, the graphs' first replays)
        if graphs:
            graphs[k].replay()
        eager(fns, 2)
    times = {k: {"graph": [], "eager": []} for k in methods}
    for _ in range(rounds):
        for k, fns in methods.items():
            times[k]["eager"].append(eager(fns, calls))
            times[k]["graph"].append(replayed(graphs[k], calls) if graphs else times[k]["eager"][-1])
    del graphs
    return {k: {w: float(np.median(v)) for w, v in t.items()} for k, t in times.items()}


def tinygemm(qw, group):
    """``torch._weight_int4pack_mm`` on qw's codes and scales (int4, zero 0), or None."""
    try:
        codes, scales, _ = Q.unpack(qw)
        c = codes.to(torch.int32)
        u8 = ((c[:, ::2] << 4) | c[:, 1::2]).to(torch.uint8)
        wp = torch.ops.aten._convert_weight_to_int4pack(u8.contiguous(), 8)
        s = scales.to(torch.bfloat16)
        sz = torch.stack([s, torch.zeros_like(s)], dim=-1).contiguous()      # (G, N, 2)
        return lambda x: torch.ops.aten._weight_int4pack_mm(x, wp, group, sz)
    except Exception as e:                                           # noqa: BLE001
        print(f"  tinygemm unavailable: {type(e).__name__}: {str(e)[:120]}")
        return None


def rel_err(y, x, qw, rows=64):
    w = Q.dequantize(qw, "float32", "bfloat16").double()
    ref = x[:rows].double() @ w.T
    return float((y[:rows].double() - ref).abs().max() / ref.abs().max())


def case(fmt, group, k, n, batch, rounds, calls, builtin_us=None, with_tiny=True):
    g = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(n, k, device="cuda", generator=g) / math.sqrt(k)).to(torch.bfloat16)
    qw = Q.quantize(w, fmt, group)
    del w
    x = torch.randn(batch, k, device="cuda", generator=g).to(torch.bfloat16)
    with torch.no_grad():
        y = Q.gemm(x, qw)
        err = rel_err(y, x, qw)
        wb = Q.dequantize(qw, "bfloat16", "bfloat16")
        # copies so that each timed loop streams from HBM
        nq = copies_for(qw.nbytes)
        qws = [qw] + [Q.QuantizedWeight(qw.fmt, qw.n, qw.k, qw.group, qw.scale_dtype, qw.packed.clone(),
                                        qw.scales.clone(), None if qw.zeros is None else qw.zeros.clone())
                      for _ in range(nq - 1)]
        wbs = [wb] + [wb.clone() for _ in range(copies_for(wb.numel() * 2) - 1)]
        methods = {"ours": [lambda q=q: Q.gemm(x, q) for q in qws],
                   "cublas": [lambda v=v: F.linear(x, v) for v in wbs]}
        tiny_err = None
        if with_tiny and fmt.name == "int4" and group in (32, 64, 128, 256):
            t = tinygemm(qw, group)
            if t is not None:
                try:
                    yt = t(x)
                    tiny_err = rel_err(yt, x, qw)
                    ts = [t] + [tinygemm(q, group) for q in qws[1:]]
                    methods["tinygemm"] = [lambda f=f: f(x) for f in ts]
                except Exception as e:                               # noqa: BLE001
                    print(f"  tinygemm failed: {type(e).__name__}: {str(e)[:120]}")
        tm = interleaved(methods, rounds, calls)
        plan = Q.explain(x, qw)
    us = {key: v["graph"] for key, v in tm.items()}
    ev = {key: v["eager"] for key, v in tm.items()}
    rec = {"feature": "quantized", "format": "nf4_user" if fmt.user is not None else fmt.name, "group": group,
           "m": batch, "n": n, "k": k, "batch": batch, "ratio_bf16": us["cublas"] / us["ours"], "rel_err": err,
           "us": us["ours"], "cublas_us": us["cublas"], "eager_us": ev["ours"], "cublas_eager_us": ev["cublas"],
           "ratio_bf16_eager": ev["cublas"] / ev["ours"], "weight_bytes": qw.nbytes,
           "gbps": qw.nbytes / us["ours"] / 1e3, "timing": "CUDA graph of the calls (eager_*: a Python loop)",
           "plan": plan}
    if "tinygemm" in us:
        rec.update(ratio_tinygemm=us["tinygemm"] / us["ours"], tinygemm_us=us["tinygemm"], tinygemm_rel_err=tiny_err,
                   tinygemm_eager_us=ev["tinygemm"])
    if builtin_us is not None:
        rec["ratio_builtin"] = builtin_us / us["ours"]
    line = (f"{rec['format']:>8} g{group:<3} {k:>5}x{n:<5} batch {batch:>4}: {us['ours']:7.1f} us "
            f"({rec['gbps']:5.0f} GB/s), cuBLAS bf16 {us['cublas']:7.1f} us -> {rec['ratio_bf16']:5.2f}x")
    if "tinygemm" in us:
        line += f", tinygemm {us['tinygemm']:6.1f} us -> {rec['ratio_tinygemm']:5.2f}x"
    if builtin_us is not None:
        line += f", built-in int4 {builtin_us:.1f} us -> {rec['ratio_builtin']:.2f}x"
    line += f" | eager: ours {ev['ours']:6.1f} us, cuBLAS {ev['cublas']:6.1f} us"
    if "tinygemm" in ev:
        line += f", tinygemm {ev['tinygemm']:6.1f}"
    print(line + f" | rel_err {err:.1e} | {plan}", flush=True)
    del qws, wbs
    torch.cuda.empty_cache()
    return rec


def sweep(rounds: int, calls: int) -> list:
    """The streaming kernel's configurations around ``pick``'s, int4 g128, graph-timed and
    interleaved per problem (one weight, its copies past L2): data for ``qproduct.pick``."""
    from numba_tc.qgemm import QConfig
    from numba_tc import qproduct
    recs = []
    for (k, n), b in (((4096, 4096), 1), ((14336, 4096), 1), ((8192, 28672), 1), ((8192, 28672), 16)):
        g = torch.Generator(device="cuda").manual_seed(0)
        qw = Q.quantize((torch.randn(n, k, device="cuda", generator=g) / math.sqrt(k)).to(torch.bfloat16), "int4", 128)
        x = torch.randn(b, k, device="cuda", generator=g).to(torch.bfloat16)
        base, _ = qproduct.pick(b, n, k, Q.INT4)
        cfgs = {base}
        for split in (max(1, base.split // 2), min(8, base.split * 2)):
            cfgs.add(replace(base, split=split))
        for stages in (max(2, base.stages - 1), min(7, base.stages + 2)):
            cfgs.add(replace(base, stages=stages))
        cfgs.add(QConfig(1, base.warps, min(4, base.u * 2), base.split, base.minb, base.stages))
        qws = [qw] + [Q.QuantizedWeight(qw.fmt, qw.n, qw.k, qw.group, qw.scale_dtype, qw.packed.clone(),
                                        qw.scales.clone(), None) for _ in range(copies_for(qw.nbytes) - 1)]
        with torch.no_grad():
            methods = {c: [lambda q=q, c=c: Q.gemm(x, q, config=c) for q in qws] for c in sorted(cfgs, key=repr)}
            tm = interleaved(methods, rounds, calls)
        for c, t in tm.items():
            rec = {"feature": "quantized_sweep", "format": "int4", "group": 128, "m": b, "n": n, "k": k, "batch": b,
                   "config": repr(c), "picked": c == base, "us": t["graph"], "gbps": qw.nbytes / t["graph"] / 1e3}
            recs.append(rec)
            print(f"sweep {k:>5}x{n:<5} batch {b:>2}: {rec['us']:7.1f} us ({rec['gbps']:5.0f} GB/s) {c}"
                  f"{'  <- picked' if c == base else ''}", flush=True)
        del qws
        torch.cuda.empty_cache()
    return recs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="the bar's cases only, few rounds (~2 minutes)")
    p.add_argument("--out", default=None, help="write the records (a JSON list) here")
    p.add_argument("--no-decode", action="store_true")
    p.add_argument("--sweep", action="store_true", help="only the streaming kernel's configurations around the "
                   "picked one (a few problems, ~2 minutes)")
    a = p.parse_args()
    gpu = torch.cuda.get_device_name()
    rounds, calls = (3, 20) if a.quick else (7, 50)
    recs = []
    if a.sweep:
        recs = sweep(rounds, calls)
        a.no_decode = True
    batches = (1, 4, 16) if a.quick else (1, 2, 4, 8, 16, 32, 64)
    for k, n in [] if a.sweep else SHAPES:
        for b in batches:
            recs.append(case(Q.INT4, 128, k, n, b, rounds, calls))
    for k, n in [] if a.sweep else (SHAPES[:1] + SHAPES[3:]) if a.quick else SHAPES:
        recs.append(case(Q.INT4, 128, k, n, 2048, rounds, max(3, calls // 5), with_tiny=False))
    user = Q.user_format(nf4)
    for k, n in [] if a.sweep else SHAPES[1:3] if a.quick else SHAPES:
        base = case(Q.INT4, 64, k, n, 1, rounds, calls, with_tiny=False)
        recs.append(base)
        recs.append(case(user, 64, k, n, 1, rounds, calls, builtin_us=base["us"]))
    for k, n in [] if a.sweep else SHAPES[1:2] if a.quick else SHAPES:
        recs.append(case(Q.INT8, 0, k, n, 1, rounds, calls))
        recs.append(case(Q.INT4_ZP, 128, k, n, 1, rounds, calls, with_tiny=False))
    if not a.no_decode:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
        from quantized_llama import compare
        layers, tokens = (4, 32) if a.quick else (16, 128)
        r = compare(layers, tokens)
        b, q = r["bf16_tps"], r["int4_tps"]
        recs.append({"feature": "quantized_decode", "format": "int4", "group": 128, "ratio": q / b, "bf16_tps": b,
                     "int4_tps": q, "layers": layers, "tokens": tokens, "rel_err": r["rel_err"],
                     "argmax_agree": r["argmax_agree"], "tokens_agree_bf16": r["agree_bf16"],
                     "model": "Llama-3-8B layer shapes, random weights, CUDA-graph steps"})
        print(f"decode, {layers} layers: bf16 torch {b:.1f} tok/s, int4 {q:.1f} tok/s -> {q / b:.2f}x | int4 logits "
              f"vs its dequantized bf16 weights: rel_err {r['rel_err']:.1e}, greedy equal at {r['argmax_agree']} of "
              f"{tokens} steps (vs the unquantized bf16 model, a different model: first {r['agree_bf16']})")
    c = stamp(a.out, gpu=False)["commit"]
    cmd = " ".join(["python", "benchmarks/quantized.py"] + sys.argv[1:])
    for r in recs:
        r.update(gpu=gpu, commit=c, command=cmd)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(recs, f, indent=1)
        print(f"wrote {len(recs)} records to {a.out}")


if __name__ == "__main__":
    main()
