"""benchmarks/models_data.py (the model benchmark's half without torch): the sampler's draw is
the distribution issue 51 names, a linear layer's products have the layouts torch's autograd
gives them (checked against the aten calls torch makes, where torch is installed), the statistics
and the profile's tables."""
import math
import os
import sys

import numpy as np
import pytest

sys.path.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))   # (last: shadows nothing)
import models_data as md            # noqa: E402

pytestmark = pytest.mark.cpu


def test_the_draw_is_seeded_and_the_same_shapes_in_each_dtype():
    a, b = md.draw(7, 200), md.draw(7, 200, "float16")
    assert len(a) == 200
    assert [p.shape() for p in a] == [p.shape() for p in b]
    assert {p.dtype for p in b} == {"float16"}
    assert [p.shape() for p in md.draw(8, 200)] != [p.shape() for p in a]


def test_the_draw_spans_what_issue_51_names():
    ps = md.draw(0, 2000)
    att = [p for p in ps if p.attention]
    assert 0.09 < len(att) / len(ps) < 0.16                     # about one in eight
    assert {p.op for p in att} == set(md.ATTENTION_OPS)
    assert {p.k if p.op == "qk" else p.n for p in att} == {64, 80, 96, 128}
    seqs = [p.tokens for p in att]
    assert min(seqs) < 32 and max(seqs) > 2048 and sum(s % 8 != 0 for s in seqs) > len(seqs) / 2
    assert all(p.m * p.m * p.batch <= md.ATTENTION_ELEMENTS or p.batch <= 32 for p in att if p.op == "qk")
    lin = [p for p in ps if not p.attention]
    assert {p.op for p in lin} == {"fwd", "dx", "dw"}
    toks = [p.tokens for p in lin]
    assert min(toks) == 1 and max(toks) > 16384 and all(1 <= t <= 32768 for t in toks)
    # log-uniform: about as many draws in 1-64 as in 512-32768 would be 6:6 of 15 octaves
    lo, hi = sum(t <= 64 for t in toks), sum(t > 512 for t in toks)
    assert 0.3 < lo / len(toks) < 0.5 and 0.3 < hi / len(toks) < 0.5
    for p in lin:
        fin, fout = (p.k, p.n) if p.op == "fwd" else (p.n, p.k) if p.op == "dx" else (p.n, p.m)
        assert fin % 8 == 0 and fout % 8 == 0
        d = min(fin, fout)
        assert 512 <= d <= 8192 and max(fin, fout) <= 4 * 8192 + 256        # widths; MLP ratios up to 4
        assert p.tokens == (p.k if p.op == "dw" else p.m)
    assert any(p.decode and p.weight_bytes > md.BIG_WEIGHT for p in ps)


def _mm_calls(fn):
    """The aten mm/addmm/bmm calls fn makes: (op, a's shape, a column-major, b's shape, b column-major)."""
    pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = []

    def colmajor(t):
        return t.dim() >= 2 and t.stride(-2) == 1 and t.shape[-1] > 1

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in ("mm", "addmm", "bmm"):
                a, b = args[-2], args[-1]
                seen.append((name, tuple(a.shape), colmajor(a), tuple(b.shape), colmajor(b)))
            return func(*args, **(kwargs or {}))
    with Spy():
        fn()
    return seen


def _as_problem(call):
    name, sa, ta, sb, tb = call
    return (sa[-2], sb[-1], sa[-1], ta, tb)


@pytest.mark.parametrize("bias", [True, False])
def test_a_linear_layers_products_have_torchs_layouts(bias):
    torch = pytest.importorskip("torch")
    T, fin, fout = 24, 40, 56
    lin = torch.nn.Linear(fin, fout, bias=bias)
    x = torch.randn(2, T // 2, fin, requires_grad=True)
    calls = _mm_calls(lambda: lin(x).backward(torch.randn(2, T // 2, fout)))   # (a real gradient: not expanded)
    got = sorted(_as_problem(c) for c in calls)
    want = sorted((p.m, p.n, p.k, p.a_t, p.b_t) for p in md.linear_problems(T, fin, fout, bias, ops=("fwd", "dx", "dw")))
    assert got == want


def test_conv1d_products_have_torchs_layouts():
    torch = pytest.importorskip("torch")
    pytorch_utils = pytest.importorskip("transformers.pytorch_utils")
    T, fin, fout = 24, 40, 56
    conv = pytorch_utils.Conv1D(fout, fin)
    x = torch.randn(2, T // 2, fin, requires_grad=True)
    calls = _mm_calls(lambda: conv(x).backward(torch.randn(2, T // 2, fout)))
    got = sorted(_as_problem(c) for c in calls)
    want = sorted((p.m, p.n, p.k, p.a_t, p.b_t) for p in md.linear_problems(T, fin, fout, True, True))
    assert got == want


def test_attention_products_have_the_layouts_of_their_formulas():
    torch = pytest.importorskip("torch")
    bh, s, h = 3, 13, 8
    q, k, v, do = (torch.randn(bh, s, h) for _ in range(4))
    p = torch.randn(bh, s, s)
    calls = _mm_calls(lambda: (q @ k.mT, p @ v, p.mT @ do))
    got = [_as_problem(c) for c in calls]
    want = [(x.m, x.n, x.k, x.a_t, x.b_t) for x in md.attention_problems(bh, s, h)]
    assert got == want


def test_numba_tc_dw_form_is_the_transposed_gradient():
    dwt, = md.linear_problems(100, 32, 48, False, ops=("dwT",))
    dw, = md.linear_problems(100, 32, 48, False, ops=("dw",))
    assert (dwt.m, dwt.n, dwt.k) == (dw.n, dw.m, dw.k) and dwt.a_t and not dwt.b_t
    assert md.linear_problems(100, 32, 48, False, True, ops=("dwT",)) == []     # Conv1D: dW is already X^T dY


def test_percentile_is_numpys_and_geomean():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 50):
        xs = list(rng.uniform(0.1, 3, n))
        for q in (0, 10, 50, 90, 100):
            assert math.isclose(md.percentile(xs, q), float(np.percentile(xs, q)))
    assert math.isclose(md.geomean([0.5, 2.0, 1.0]), 1.0)
    assert md.geomean([]) is None and md.percentile([], 10) is None


def _row(p, ratio, tbs=None):
    return dict(p.record(), ratio=ratio, tbs=tbs)


def test_summarize_splits_by_tokens_op_and_decode():
    fwd1, = md.linear_problems(4, 8192, 8192, False, ops=("fwd",))          # decode, 128 MB weight
    fwd2, = md.linear_problems(40, 512, 512, False, ops=("fwd",))           # decode, small weight
    dw, = md.linear_problems(5000, 1024, 4096, False, ops=("dw",))
    qk, = md.attention_problems(16, 77, 64, ops=("qk",))
    rows = [_row(fwd1, 0.5, tbs=2.4), _row(fwd2, 2.0), _row(dw, 1.0), _row(qk, 0.25)]
    s = md.summarize(rows, hbm_tbs=4.8)
    assert s["all"]["count"] == 4 and math.isclose(s["all"]["geomean"], (0.5 * 2 * 1 * 0.25) ** 0.25)
    assert s["2d"]["count"] == 3 and s["attention"]["count"] == 1 and s["attention"]["min"] == 0.25
    assert s["tokens 1-64"]["count"] == 2 and s["tokens 4097-32768"]["count"] == 1
    assert s["op dw"]["count"] == 1 and s["op qk"]["count"] == 1 and s["op pv"]["count"] == 0
    assert s["decode"]["count"] == 2
    big = s["decode weight>64MB"]
    assert big["count"] == 1 and math.isclose(big["hbm_frac_mean"], 0.5) and math.isclose(big["geomean"], 0.5)


def test_profile_tables_name_what_numba_tc_adds():
    kernels = {"torch": [("sm90_xmma_gemm_bf16", 100.0), ("void at::native::reduce_kernel<sum>", 5.0),
                         ("direct_copy_kernel_cuda", 3.0)],
               "numba_tc": [("numba_tc: 128x256", 90.0), ("numba_tc: repack a", 8.0), ("numba_tc: fixup", 2.0),
                            ("void at::native::reduce_kernel<sum>", 5.0), ("direct_copy_kernel_cuda", 3.0),
                            ("direct_copy_kernel_cuda", 3.0)]}
    host = {"torch": ["aten::copy_", "aten::empty_strided", "cudaLaunchKernel"],
            "numba_tc": ["aten::copy_", "aten::copy_", "aten::empty_strided", "cuLaunchKernel", "cuLaunchKernelEx",
                         "cuStreamIsCapturing"]}
    t = md.profile_tables(kernels, host)
    dev = t["device"]
    assert dev["cuBLAS product"] == [1, 100.0, 0, 0.0]
    assert dev["numba_tc product"] == [0, 0.0, 1, 90.0]
    assert dev["numba_tc operand copy (repack)"][2:] == [1, 8.0]
    assert dev["numba_tc split-K fix-up"][2:] == [1, 2.0]
    assert dev["cast / copy"] == [1, 3.0, 2, 6.0]
    assert dev["reduction (sums: bias grads, ...)"] == [1, 5.0, 1, 5.0]
    assert t["host"]["copies (aten::copy_)"] == [1, 2]
    assert t["host"]["launches through the driver"] == [0, 2]
    assert t["host"]["stream-capture queries"] == [0, 1]
    names = [c["name"] for c in t["changed"]]
    assert names[0] == "sm90_xmma_gemm_bf16" and "void at::native::reduce_kernel<sum>" not in names
    assert "direct_copy_kernel_cuda" in names
    text = md.profile_text(t, "a test step")
    assert "numba_tc operand copy (repack)" in text and "+" in text


def test_summary_renders_every_kind():
    base = dict(gpu="NVIDIA H200", commit="abc")
    recs = [dict(base, kind="hbm", model="copy", tbs=4.3, ratio=None),
            dict(base, kind="compile", model="all", ratio=None, kernels_built=3, kernels_cached=1, compile_cpu_s=20.0,
                 seconds=9.0, problems=10, unplanned=0),
            dict(base, kind="train", model="bert", batch=16, seq=512, torch_ms=50.0, numba_tc_ms=60.0, ratio=50 / 60,
                 loss_ok=True, loss_rel_diff=0.001),
            dict(base, kind="prefill", model="gpt2", batch=1, seq=128, torch_ms=3.0, numba_tc_ms=3.3, ratio=0.9),
            dict(base, kind="decode", model="gpt2", batch=16, ms_per_token_torch=8.0, ms_per_token_numba_tc=9.0,
                 ratio=8 / 9),
            dict(base, kind="gemm", model="bert", size="16x512", op=md.STEP_OP, torch_ms=20.0, ms=25.0, ratio=0.8),
            dict(base, kind="gemm", model="bert", dtype="bfloat16", op="fwd", m=1, ratio=0.9),
            dict(base, kind="sampled", model="sampler", subset="all", dtype="bfloat16", count=300, geomean=0.9,
                 p10=0.7, min=0.1, wrong=0, drawn=300),
            dict(base, kind="sampled", model="sampler", subset="decode weight>64MB", dtype="bfloat16", count=0,
                 geomean=None, p10=None, min=None, hbm_frac_mean=None, hbm_frac_min=None, wrong=0, drawn=300)]
    text = md.summary(recs)
    for word in ("train", "prefill", "decode", md.STEP_OP, "geomean 0.900", "compile: 3 kernels", "4.30 TB/s"):
        assert word in text, word
