"""Quantized products on a GPU (issue 56): ``quant.gemm`` against the float64 product of the
exactly dequantized weight (``quant.reference``) element by element, within fp32 accumulation and
the output's rounding (the dequantizing path of many rows also within the weight's rounding to
16 bits), poisoned outputs, every format (the NF4 user function too), groups that do not divide
K, ragged N and K, unaligned and 8-byte aligned x, both 16-bit types, float32 output, the
epilogue (bias, activation, a user's function; changed between calls of one plan); every shape
of the streaming kernel (clusters of 1 to 8 blocks) and the same bits twice; GPU
quantize/dequantize equal to NumPy's bit for bit; ``QuantLinear``; a CUDA graph replays it. (Numbers: benchmarks/quantized.py.)"""
import math

import numpy as np
import pytest
from numba import cuda

from numba_tc import quant as Q
from numba_tc.verify import OUT_HALF_ULP

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

NF4 = np.array(Q.NF4_LEVELS, np.float32)


@cuda.jit(device=True)
def nf4(code):
    return NF4[code]


@cuda.jit(device=True)
def plus_row(acc, row, col, r):
    return acc + r[col]


USER = Q.user_format(nf4)
TD = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _weight(n, k, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(n, k, device="cuda", generator=g) / math.sqrt(k)


def _x(m, k, dtype, seed=1, pad=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k + pad, device="cuda", generator=g).to(TD[dtype])
    return x[:, pad:] if pad else x


def _check(y, x, qw, out_dtype, weight_rounding=0.0, ref_extra=None):
    """|y - ref| <= half an ulp of the output (of |ref| plus the bound) + 8 u sqrt(K) (|x| @ |w|^T)
    (+ the weight's rounding, relative), against the float64 reference."""
    xh = x.float().cpu().numpy()
    w = Q._weight64(Q.to_numpy(qw), "bfloat16" if x.dtype == torch.bfloat16 else "float16")
    ref = xh.astype(np.float64) @ w.T
    if ref_extra is not None:
        ref = ref_extra(ref)
    bound = np.abs(xh).astype(np.float64) @ np.abs(w).T * (8 * 2.0 ** -24 * math.sqrt(x.shape[1]) + weight_rounding)
    tol = OUT_HALF_ULP[out_dtype] * (np.abs(ref) + bound) + bound + 1e-30
    got = y.float().cpu().numpy().astype(np.float64)
    bad = ~(np.abs(got - ref) <= tol)
    assert not bad.any(), (f"{bad.sum()} of {bad.size} elements out of bounds, e.g. at {np.argwhere(bad)[:3].tolist()}: "
                           f"{got[bad][:3]} vs {ref[bad][:3]}")


CASES = [  # (format, group, dtype, rows, n, k, x padded (unaligned rows))
    (Q.INT4, 128, "bfloat16", 1, 4096, 4096, 0), (Q.INT4, 128, "bfloat16", 4, 4096, 4096, 0),
    (Q.INT4, 128, "bfloat16", 16, 1000, 4096, 0), (Q.INT4, 128, "bfloat16", 33, 272, 1024, 0),
    (Q.INT4, 128, "bfloat16", 64, 272, 1024, 0), (Q.INT4, 128, "bfloat16", 3, 130, 360, 1),
    (Q.INT4, 64, "float16", 5, 300, 4000, 0), (Q.INT4_ZP, 32, "float16", 1, 512, 1024, 0),
    (Q.INT4_ZP, 32, "bfloat16", 16, 130, 200, 3), (Q.INT8, 0, "bfloat16", 1, 1024, 2048, 0),
    (Q.INT8, 0, "float16", 16, 130, 360, 0), (Q.INT8, 128, "bfloat16", 2, 256, 1000, 0),
    (USER, 64, "bfloat16", 1, 4096, 4096, 0), (USER, 64, "bfloat16", 8, 130, 360, 1),
    (USER, 128, "float16", 2, 512, 1024, 0), (Q.INT4, 128, "bfloat16", 2, 520, 2048, 4),   # x rows 8-byte aligned
    (Q.INT4, 128, "bfloat16", 1, 256, 14336, 0), (Q.INT4, 32, "bfloat16", 40, 384, 2048, 0)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-g{c[1]}-{c[2]}-m{c[3]}-{c[4]}x{c[5]}-pad{c[6]}")
def test_streaming_product(case):
    fmt, group, dt, m, n, k, pad = case
    qw = Q.quantize(_weight(n, k), fmt, group)
    x = _x(m, k, dt, pad=pad)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=TD[dt])
    y = Q.gemm(x, qw, out=out)
    assert y is out
    _check(y, x, qw, dt)


CONFIGS = [  # (tm, warps, u, split, minb, stages): every shape the kernel takes, clusters of 1 to 8 blocks
    (1, 4, 1, 1, 4, 4), (2, 4, 2, 3, 4, 2), (4, 2, 1, 8, 4, 3), (1, 1, 4, 1, 8, 7), (2, 4, 4, 5, 2, 4),
    (1, 8, 2, 2, 2, 5)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "tm{}-w{}-u{}-split{}-minb{}-st{}".format(*c))
@pytest.mark.parametrize("fmt", [Q.INT4, USER], ids=lambda f: f.name)
def test_configurations_and_determinism(cfg, fmt):
    """Any configuration (``config=``) gives the product, ragged K and N split over a cluster's
    blocks and their warps; the sums' order is fixed: two runs agree bit for bit."""
    from numba_tc.qgemm import QConfig
    n, k, m = 200, 1000, 5
    qw = Q.quantize(_weight(n, k), fmt, 64)
    x = _x(m, k, "bfloat16")
    c = QConfig(*cfg)
    y = Q.gemm(x, qw, config=c)
    _check(y, x, qw, "bfloat16")
    assert torch.equal(y, Q.gemm(x, qw, config=c))


@pytest.mark.parametrize("fmt", [Q.INT4, USER], ids=lambda f: f.name)
def test_many_rows_dequantize_then_gemm(fmt):
    n, k, m = 384, 1000, 300
    qw = Q.quantize(_weight(n, k), fmt, 128)
    x = _x(m, k, "bfloat16")
    _check(Q.gemm(x, qw), x, qw, "bfloat16", weight_rounding=OUT_HALF_ULP["bfloat16"])


def test_epilogue_float32_output_and_user_function():
    n, k = 520, 1024
    qw = Q.quantize(_weight(n, k), "int4", 128)
    x = _x(3, k, "bfloat16")
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = Q.gemm(x, qw, bias=bias, activation="relu", out_dtype="float32")
    b64 = bias.double().cpu().numpy()
    _check(y, x, qw, "float32", ref_extra=lambda r: np.maximum(r + b64, 0))
    r = torch.randn(n, device="cuda")
    y2 = Q.gemm(x, qw, epilogue=plus_row, epilogue_args=(r,))
    _check(y2, x, qw, "bfloat16", ref_extra=lambda v: v + r.double().cpu().numpy())


@pytest.mark.parametrize("fmt", [Q.INT4, Q.INT4_ZP, Q.INT8, USER], ids=lambda f: f.name)
def test_gpu_helpers_equal_numpy(fmt):
    w = _weight(130, 360).to(torch.bfloat16)
    qg = Q.quantize(w, fmt, 64)
    qn = Q.quantize(w.float().cpu().numpy(), fmt, 64)
    h = Q.to_numpy(qg)
    assert np.array_equal(np.asarray(h.packed), qn.packed)
    assert np.array_equal(np.asarray(h.scales).view(np.uint16), np.asarray(qn.scales).view(np.uint16))
    for od in ("float32", "bfloat16"):
        d = Q.dequantize(qg, od).float().cpu().numpy()
        assert np.array_equal(d, np.asarray(Q.dequantize(qn, od)).astype(np.float32))


def test_quant_linear_and_cuda_graph():
    from numba_tc.torch_quant import QuantLinear, quantize_model
    lin = nn_linear(1024, 768)
    ql = QuantLinear.from_linear(lin, "int4", 128)
    x = _x(2, 1024, "bfloat16").view(1, 2, 1024)
    with torch.no_grad():
        y = ql(x)
        _check(y.view(2, 768), x.view(2, 1024), ql.qw, "bfloat16",
               ref_extra=lambda r: r + lin.bias.double().cpu().numpy())
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            ql(x)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            yg = ql(x)
        x.normal_()
        g.replay()
        torch.testing.assert_close(yg, ql(x), rtol=0, atol=0)
        model = torch.nn.Sequential(nn_linear(256, 512), torch.nn.ReLU(), nn_linear(512, 128))
        quantize_model(model, "int4", 64)
        assert all(isinstance(model[i], QuantLinear) for i in (0, 2))
    with pytest.raises(TypeError, match="inference"):
        ql(x.detach().requires_grad_())


def nn_linear(k, n):
    lin = torch.nn.Linear(k, n).cuda().to(torch.bfloat16)
    with torch.no_grad():
        lin.bias.normal_()
    return lin


def test_repeated_calls_and_epilogue_arguments():
    """The short path (a plan kept on the weight) and a changed bias on a kept plan: each call's
    own arrays, never a cached one's."""
    n, k = 264, 512
    qw = Q.quantize(_weight(n, k), "int4", 128)
    x = _x(2, k, "bfloat16")
    first = Q.gemm(x, qw)
    x2 = _x(2, k, "bfloat16", seed=7)
    _check(Q.gemm(x2, qw), x2, qw, "bfloat16")
    assert torch.equal(Q.gemm(x, qw), first)
    assert "qgemm" in Q.explain(x, qw)
    for seed in (3, 4):
        b = torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed)).to(torch.bfloat16)
        _check(Q.gemm(x, qw, bias=b), x, qw, "bfloat16", ref_extra=lambda r: r + b.double().cpu().numpy())
    xl = _x(130, k, "bfloat16")
    for seed in (5, 6):
        b = torch.randn(n, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed)).to(torch.bfloat16)
        _check(Q.gemm(xl, qw, bias=b), xl, qw, "bfloat16", weight_rounding=OUT_HALF_ULP["bfloat16"],
               ref_extra=lambda r: r + b.double().cpu().numpy())


def test_errors():
    qw = Q.quantize(_weight(64, 128), "int4", 64)
    with pytest.raises(ValueError, match="K = 100"):
        Q.gemm(_x(1, 100, "bfloat16"), qw)
    with pytest.raises(TypeError, match="float32 activations|activations"):
        Q.gemm(_x(1, 128, "bfloat16").float(), qw)
    with pytest.raises(ValueError, match="unit stride"):
        Q.gemm(_x(128, 4, "bfloat16").T, qw)
