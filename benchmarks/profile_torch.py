"""Where a GPT-2 step goes, numba_tc against torch (the diagnosis behind ``torch_bench.sh``'s ratios):

    python benchmarks/profile_torch.py [--layers 12] [--batch 8] [--seq 1024] [--out DIR]

1. train: step wall time, and the host's time to issue a step (the time until the last launch
   is queued, before the synchronization): a host-bound step issues about as long as it runs.
   torch.profiler tables (GPU time per kernel, host time per operator) for one step each.
2. the products a numba_tc step runs (recorded at ``numba_tc.calls._gemm_gpu``: shapes, layouts, bias),
   each timed alone against torch's product of the same views (``torch.addmm`` / ``matmul``),
   interleaved, CUDA events.
3. decode: ms a token at batch 1 and 16 with torch, with numba_tc, with numba_tc's layers on their
   general path (no inference path: ``ntt._inference`` off) and with those layers around torch's
   products ("glue": what the Python around the product costs), interleaved; GPU time by kernel;
   a cProfile of numba_tc's decode (the Python functions that cost the most).
4. calls: one linear layer's host cost per call, inference and training, numba_tc's paths against
   torch's; pieces: an inference call's host cost piece by piece (the cast, the allocation, the
   launch, ...), beside torch's own layer.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import numba_tc.api as api          # noqa: E402
import numba_tc.calls as ntc_calls  # noqa: E402
import numba_tc.torch as ntt        # noqa: E402
import train_gpt as tg              # noqa: E402


def _say(out, *lines):
    for s in lines:
        print(s, flush=True)
        out.write(s + "\n")


def _step(model, x, opt):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def train_profile(args, out):
    chain = tg.make_chain(args.seed)
    x = torch.from_numpy(tg.make_batch(chain, args.batch, args.seq, 5)).cuda()
    model = tg.build_model(args, torch.device("cuda"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    res = {}
    for who in ("torch", "ours", "torch", "ours"):
        if who == "ours":
            ntt.patch(model)
        for _ in range(3 if who not in res else 1):
            _step(model, x, opt)
        torch.cuda.synchronize()
        walls, issues = [], []
        for _ in range(args.reps):
            t = time.perf_counter()
            _step(model, x, opt)
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            walls.append(time.perf_counter() - t)
            issues.append(t1 - t)
        res.setdefault(who, []).append((statistics.median(walls) * 1e3, statistics.median(issues) * 1e3))
        if who == "ours":
            ntt.unpatch(model)
    for who in ("torch", "ours"):
        for w, i in res[who]:
            _say(out, f"train {who:6s}: step {w:7.2f} ms, host issues it in {i:7.2f} ms")
    for who in ("torch", "ours"):
        if who == "ours":
            ntt.patch(model)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            _step(model, x, opt)
            torch.cuda.synchronize()
        ka = prof.key_averages()
        _say(out, f"--- train {who}: GPU time by kernel ---",
             ka.table(sort_by="self_cuda_time_total", row_limit=22, max_name_column_width=70),
             f"--- train {who}: host time by operator ---",
             ka.table(sort_by="self_cpu_time_total", row_limit=22, max_name_column_width=70))
        if who == "ours":
            ntt.unpatch(model)
    return model, x


def product_census(model, x, out):
    """Every product of one numba_tc step, timed alone against torch's."""
    calls = {}
    orig = ntc_calls._gemm_gpu

    def spy(a, b, variant, o, out_dtype, stream, allow_tf32, kind, epi):
        if kind == "torch":
            key = (tuple(a.shape), tuple(a.stride()), tuple(b.shape), tuple(b.stride()), a.dtype,
                   out_dtype, epi is not None)
            calls[key] = calls.get(key, 0) + 1
        return orig(a, b, variant, o, out_dtype, stream, allow_tf32, kind, epi)

    ntc_calls._gemm_gpu = spy
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    ntt.patch(model)
    try:
        _step(model, x, opt)
    finally:
        ntc_calls._gemm_gpu = orig
        ntt.unpatch(model)
    torch.cuda.synchronize()
    _say(out, "--- the products of one numba_tc step, each alone (CUDA events, interleaved) ---",
         f"{'calls':>5} {'a shape':>14} {'a stride':>12} {'b shape':>14} {'b stride':>12} {'out':>9} {'bias':>4}"
         f" {'ours us':>8} {'torch us':>8} {'ratio':>6}  plan")
    tot_o = tot_t = 0.0
    for (sa, ta, sb, tb, dt, odt, bias), n in sorted(calls.items(), key=lambda kv: -kv[1]):
        a = torch.empty_strided(sa, ta, device="cuda", dtype=dt).normal_()
        b = torch.empty_strided(sb, tb, device="cuda", dtype=dt).normal_()
        bv = torch.randn(sb[1], device="cuda", dtype=dt) if bias else None
        tdt = odt if odt is not None else dt

        def ours():
            return api.gemm(a, b, out_dtype=odt, bias=bv)

        def theirs():
            r = torch.matmul(a, b) if bv is None else torch.addmm(bv, a, b)
            return r if tdt == dt else r.to(tdt)
        to, tt = [], []
        ours(), theirs()
        for _ in range(10):
            for f, acc in ((ours, to), (theirs, tt)):
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(5):
                    f()
                e1.record()
                e1.synchronize()
                acc.append(e0.elapsed_time(e1) * 1e3 / 5)
        mo, mt = statistics.median(to), statistics.median(tt)
        tot_o += n * mo
        tot_t += n * mt
        plan = api.explain(a, b, out_dtype=odt)
        _say(out, f"{n:5d} {str(sa):>14} {str(ta):>12} {str(sb):>14} {str(tb):>12} {str(odt).replace('torch.', ''):>9}"
                  f" {'yes' if bias else 'no':>4} {mo:8.1f} {mt:8.1f} {mt / mo:6.3f}  {plan}")
    _say(out, f"products per step: numba_tc {tot_o / 1e3:.2f} ms, torch {tot_t / 1e3:.2f} ms "
              f"(ratio {tot_t / tot_o:.3f})")


_GEMM = ntc_calls.product
_INFERENCE = ntt._inference


def _no_inference(*args):
    return None


def _general(x, w, bias, cache):
    """``ntt.linear`` on its general path (the inference path off), its cast cache on."""
    ntt._inference = _no_inference
    try:
        return ntt.linear(x, w, bias, cache=cache)
    finally:
        ntt._inference = _INFERENCE


def _torch_product(a, b, variant="auto", *, bias=None, **kw):
    """torch's product in ``numba_tc.calls.product``'s place, which ``numba_tc.torch``'s layer calls (decode's
    "glue" mode)."""
    return torch.mm(a, b) if bias is None else torch.addmm(bias, a, b)


def decode_profile(args, model, out):
    chain = tg.make_chain(args.seed)
    dev = torch.device("cuda")
    model.eval()
    for batch in (1, 16):
        prompt = torch.from_numpy(tg.make_batch(chain, batch, 32, 11)).to(dev)
        best = {}
        for who in ("torch", "ours", "general", "glue") * 5:   # the first round of each warms up
            if who != "torch":
                ntt.patch(model)
            if who == "glue":                            # numba_tc's layer around torch's product
                ntc_calls.product = _torch_product
            if who in ("glue", "general"):               # the layer's general path (no inference path)
                ntt._inference = _no_inference
            try:
                _, sec, _ = tg.decode(model, prompt, 64, dev)
            finally:
                ntc_calls.product = _GEMM
                ntt._inference = _INFERENCE
                ntt.unpatch(model)
            best.setdefault(who, []).append(sec / 64 * 1e3)
        t, o, n, g = (min(best[w][1:]) for w in ("torch", "ours", "general", "glue"))
        _say(out, f"decode batch {batch:2d}: torch {t:.2f} ms a token, numba_tc {o:.2f} (ratio {t / o:.3f}), "
                  f"numba_tc without its inference path {n:.2f} (ratio {t / n:.3f}), its layers around torch's "
                  f"products {g:.2f}; rounds " + ", ".join(f"{w} {[round(v, 2) for v in best[w]]}" for w in best))
        from torch.profiler import ProfilerActivity, profile
        for who in ("torch", "ours"):                    # GPU time a token, by kernel
            if who == "ours":
                ntt.patch(model)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                tg.decode(model, prompt, 8, dev)
            ntt.unpatch(model)
            _say(out, f"--- decode batch {batch} {who}: GPU time by kernel, 8 tokens ---",
                 prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=12, max_name_column_width=70))
        ntt.patch(model)
        pr = cProfile.Profile()
        pr.enable()
        tg.decode(model, prompt, 64, dev)
        pr.disable()
        ntt.unpatch(model)
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
        _say(out, f"--- cProfile, numba_tc decode batch {batch} (64 tokens), by own time ---", s.getvalue())


def _per_call(f, n=2000):
    """(host us, us with the GPU) per call of f over n calls."""
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        f()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t) / n * 1e6, (time.perf_counter() - t) / n * 1e6


def call_costs(out):
    """One linear layer's host cost per call: inference (decode-sized rows, autocast, the weight
    an fp32 parameter) and a training step's forward and backward (64 rows, bf16)."""
    w = torch.randn(2304, 768, device="cuda", requires_grad=True)
    bias = torch.randn(2304, device="cuda", requires_grad=True)
    cache = {}
    wb, bb = w.detach().bfloat16(), bias.detach().bfloat16()
    for rows in (1, 16):
        x = torch.randn(rows, 768, device="cuda")
        xb = x.bfloat16()
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for name, f in (("F.linear (autocast)", lambda: F.linear(x, w, bias)),
                            ("ntt.linear (autocast)", lambda: ntt.linear(x, w, bias, cache=cache)),
                            ("ntt.linear general path", lambda: _general(x, w, bias, cache)),
                            ("torch.addmm bf16", lambda: torch.addmm(bb, xb, wb.mT)),
                            ("api.gemm bf16 bias=", lambda: api.gemm(xb, wb.mT, bias=bb)),
                            ("api.gemm bf16 + add_", lambda: api.gemm(xb, wb.mT).add_(bb)),
                            ("api.gemm bf16 plain", lambda: api.gemm(xb, wb.mT))):
                h, g = _per_call(f)
                _say(out, f"inference rows {rows:2d} {name:24s}: host {h:6.1f} us a call, with the GPU {g:6.1f}")
            _profile(out, f"ntt.linear inference rows {rows}", lambda: ntt.linear(x, w, bias, cache=cache))
            from transformers.pytorch_utils import Conv1D
            conv = Conv1D(2304, 768).cuda()
            for name in ("Conv1D module", "Conv1D module patched"):
                if name.endswith("patched"):
                    ntt.patch(conv)
                h, g = _per_call(lambda: conv(x[None]))
                _say(out, f"inference rows {rows:2d} {name:24s}: host {h:6.1f} us a call, with the GPU {g:6.1f}")
            ntt.unpatch(conv)
    x = torch.randn(64, 768, device="cuda", requires_grad=True)
    g = torch.randn(64, 2304, device="cuda", dtype=torch.bfloat16)
    for name, f in (("F.linear", lambda: F.linear(x, w, bias)), ("ntt.linear", lambda: ntt.linear(x, w, bias)),
                    ("torch.library operator", lambda: ntt.gemm_op(x.bfloat16(), w.bfloat16().mT, None,
                                                                  bias.bfloat16(), 1.0, 0.0, None, None, "auto",
                                                                  False))):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            hf, _ = _per_call(f, 500)
            hb, gb = _per_call(lambda: torch.autograd.grad(f(), (x, w, bias), g), 500)
        _say(out, f"train rows 64, autocast, {name:22s}: host {hf:6.1f} us forward, {hb:6.1f} forward+backward "
                  f"(with the GPU {gb:6.1f})")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _profile(out, "ntt.linear train rows 64 forward+backward",
                 lambda: torch.autograd.grad(ntt.linear(x, w, bias), (x, w, bias), g))


def _profile(out, what, f, n=500):
    """cProfile of n calls of f: where one call's host time goes, by own time."""
    for _ in range(20):
        f()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        f()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
    _say(out, f"--- cProfile, {what} ({n} calls), by own time ---", s.getvalue())


def pieces(out):
    """What one inference call of a GPT-2 linear layer costs on the host, piece by piece (grad
    mode off, bf16 autocast, an fp32 input of decode's size), against torch's own layer: each
    piece timed alone, the pieces in alternation, the fastest of 5 rounds."""
    from transformers.pytorch_utils import Conv1D
    from numba_tc import driver, runtime, workspace
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for rows, nin, nout in ((1, 768, 2304), (1, 3072, 768), (16, 768, 3072)):
            conv, convp = Conv1D(nout, nin).cuda(), Conv1D(nout, nin).cuda()
            ntt.patch(convp)
            x = torch.randn(1, rows, nin, device="cuda")
            convp(x)
            hit = next(v for k, v in convp._ntc_cache.items() if k[0] == "inference")
            prep, w, b = hit[5], hit[6], hit[7]
            x2 = x.bfloat16().view(rows, nin)
            plan = prep.call.plan
            st = runtime.current_stream("torch", 0)
            y = x2.new_empty((rows, nout), dtype=torch.bfloat16)
            vals = (x2.data_ptr(), prep.pb, y.data_ptr()) + prep.tail
            step = plan.steps[0]
            p = step.params()
            p.pack(step.args(*(((workspace.get(0, st, plan.workspace),) if step.workspace else ()) + vals)))

            def on_device():
                with driver.on_device(0):
                    pass
            tests = {
                "torch's Conv1D layer": lambda: conv(x),
                "patched Conv1D layer": lambda: convp(x),
                "ntt._inference": lambda: ntt._inference(x, convp.weight, convp.bias, True, "auto", convp._ntc_cache),
                "Prepared.enqueue": lambda: prep.enqueue(x2.data_ptr(), y.data_ptr()),
                "Plan.run, the same values": lambda: plan.run(vals, st),
                "driver.launch (cuda.bindings)": lambda: driver.launch(step.fn, *step._dims, step.smem, st, p.addr,
                                                                      step.cluster),
                "driver.on_device": on_device,
                "x.to(bfloat16)": lambda: x.to(torch.bfloat16),
                "x.bfloat16()": lambda: x.bfloat16(),
                "new_empty": lambda: x2.new_empty((1, rows, nout), dtype=torch.bfloat16),
                "workspace.get": lambda: workspace.get(0, st, 1 << 20),
                "torch.addmm bf16": lambda: torch.addmm(b, x2, w),
            }
            best = {}
            for _ in range(5):
                for name, f in tests.items():
                    best[name] = min(best.get(name, 1e9), _per_call(f)[0])
            _say(out, f"--- pieces, rows {rows}, {nin} -> {nout}: {plan.describe()} ---",
                 *(f"  {name:32s} {v:7.2f} us" for name, v in best.items()))
            ntt.unpatch(convp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=".")
    ap.add_argument("--parts", nargs="*", default=["calls", "pieces", "train", "census", "decode"])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "profile_torch.log"), "w") as out:
        if "calls" in args.parts:
            call_costs(out)
        if "pieces" in args.parts:
            pieces(out)
        model = x = None
        if "train" in args.parts or "census" in args.parts:
            model, x = train_profile(args, out) if "train" in args.parts else (None, None)
            if model is None:
                model = tg.build_model(args, torch.device("cuda"))
                x = torch.from_numpy(tg.make_batch(tg.make_chain(args.seed), args.batch, args.seq, 5)).cuda()
        if "census" in args.parts:
            product_census(model, x, out)
        if "decode" in args.parts:
            if model is None:
                model = tg.build_model(args, torch.device("cuda"))
            decode_profile(args, model, out)


if __name__ == "__main__":
    main()
