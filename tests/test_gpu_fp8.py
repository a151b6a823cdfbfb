"""fp8 products on Hopper (issue 20): e4m3 and e5m2 inputs with per-tensor scales, checked against
a float64 product of the dequantized inputs into NaN-poisoned outputs, in all four operand layouts
(wgmma reads fp8 k-major only: the others go through a transposing copy, and ``explain`` must
show it), both output orders, ragged sizes, K not a multiple of 16 bytes, split-K, mixed formats;
the scales read on the GPU (a captured graph replays with new values); the errors a user meets."""
import numpy as np
import pytest

import numba_tc
from numba_tc import hopper

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason="needs torch")]

E4M3 = getattr(torch, "float8_e4m3fn", None)
E5M2 = getattr(torch, "float8_e5m2", None)
TOL = 1e-2          # 16-bit outputs
# fp32 outputs: fp8 wgmma adds a K slice's products in fewer bits than fp32 (promoted to fp32 every
# 128 of K): about 1.3e-4 relative, as torch._scaled_mm's own (test_like_scaled_mm compares them)
TOL32 = 3e-4


@pytest.fixture(autouse=True)
def _hopper_gpu():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (fp8 wgmma)")


def quantize(x, dtype):
    scale = (x.abs().amax().float() / torch.finfo(dtype).max).clamp(min=1e-12)
    return (x / scale).clamp(torch.finfo(dtype).min, torch.finfo(dtype).max).to(dtype), scale.reshape(1)


def _operand(rows, cols, trans, dtype, g):
    """A (rows x cols) fp8 operand, column-major when ``trans``, and its scale."""
    x = torch.randn(cols, rows, device="cuda", generator=g) if trans else torch.randn(rows, cols, device="cuda", generator=g)
    q, s = quantize(x, dtype)
    return (q.t() if trans else q), s


def _rel(x, ref):
    return float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))


def _run(m, n, k, layout, out_layout="C", da=None, db=None, out_dtype="bfloat16", seed=0):
    out_dtype = getattr(torch, out_dtype)
    g = torch.Generator(device="cuda").manual_seed(seed)
    a, sa = _operand(m, k, layout[0] == "T", da or E4M3, g)
    b, sb = _operand(k, n, layout[1] == "T", db or E4M3, g)
    out = torch.full((m, n) if out_layout == "C" else (n, m), float("nan"), device="cuda", dtype=out_dtype)
    out = out if out_layout == "C" else out.t()
    res = numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out=out)
    assert res is out
    want = (a.double() * sa.double()) @ (b.double() * sb.double())
    return out, want, numba_tc.explain(a, b, out=out, scale_a=sa, scale_b=sb)


@pytest.mark.parametrize("layout", ["NT", "NN", "TN", "TT"])
@pytest.mark.parametrize("m,n,k", [(256, 512, 1024), (1000, 777, 1000), (37, 300, 4100), (200, 300, 8192)])
@pytest.mark.parametrize("out_layout", ["C", "F"])
def test_every_layout_and_shape(layout, m, n, k, out_layout):
    out, want, path = _run(m, n, k, layout, out_layout)
    assert not torch.isnan(out).any()
    assert _rel(out, want) < TOL, path
    # A is read k-major when row-major, B when column-major (for a column-major C the kernel
    # computes C^T = B^T A^T: the same two operands k-major)
    kmajor = layout == "NT"
    aligned = k % 16 == 0
    assert ("transpose" in path) == (not kmajor), path
    if kmajor and aligned:
        assert "repack" not in path and "transpose" not in path, path
    if not aligned:
        assert "repack" in path or "transpose" in path, path


@pytest.mark.parametrize("da,db", [("e4m3", "e5m2"), ("e5m2", "e4m3"), ("e5m2", "e5m2")])
@pytest.mark.parametrize("out_dtype", ["float32", "float16"])
def test_formats_and_outputs(da, db, out_dtype):
    t = {"e4m3": E4M3, "e5m2": E5M2}
    out, want, _ = _run(300, 520, 2048, "NT", da=t[da], db=t[db], out_dtype=out_dtype)
    assert _rel(out, want) < (TOL32 if out_dtype == "float32" else TOL)


def test_split_k_applies_the_scales_once():
    out, want, path = _run(128, 256, 16384, "NT")
    assert "split-K" in path and "fixup" in path, path
    assert _rel(out, want) < TOL


@pytest.mark.parametrize("tile", ["auto", "128x192"])
def test_like_scaled_mm(tile):
    """Within a little of cuBLASLt's own error on the same inputs (long K: accumulation); the
    128x192 tile, forced, sums two slices before each add into bf16 outputs."""
    g = torch.Generator(device="cuda").manual_seed(5)
    a, sa = quantize(torch.randn(512, 16384, device="cuda", generator=g), E4M3)
    w, sb = quantize(torch.randn(1024, 16384, device="cuda", generator=g), E4M3)
    want = (a.double() * sa.double()) @ (w.t().double() * sb.double())
    v = "auto" if tile == "auto" else numba_tc.variant_from(hopper.FP8_CONFIGS[0], "fp8_like_192", splits=1)
    for out_dtype in (torch.bfloat16, torch.float32):
        ours = numba_tc.gemm(a, w.t(), v, scale_a=sa, scale_b=sb, out_dtype=str(out_dtype)[6:])
        ref = torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sb, out_dtype=out_dtype)
        assert ours.dtype == out_dtype
        print(f"{out_dtype}: rel_err {_rel(ours, want):.3e}, torch._scaled_mm {_rel(ref, want):.3e}")
        assert _rel(ours, want) <= 1.1 * _rel(ref, want)


def test_grouped_promotion_is_the_same_on_streams_and_graphs():
    # the 128x192 tile sums two slices before each add (its consumers' groups a slice apart, each
    # group holding two stages of the ring): run after run, on a side stream and replayed from a
    # CUDA graph, the same bits (a stage reused before its group is done would change them)
    g = torch.Generator(device="cuda").manual_seed(8)
    m, n, k = 1808, 2912, 4224              # (33 slices: a group's remainder; ragged tiles; _scaled_mm's 16s)
    a, sa = _operand(m, k, False, E4M3, g)
    b, sb = _operand(k, n, True, E4M3, g)
    v = numba_tc.variant_from(hopper.FP8_CONFIGS[0], "fp8_grouped_192", splits=1)
    want = (a.double() * sa.double()) @ (b.double() * sb.double())
    first = numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb)
    ref = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    assert _rel(first, want) <= 1.1 * _rel(ref, want)         # (not promoted at all: ~1.3x)
    for _ in range(5):
        assert torch.equal(numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb), first)
    s = torch.cuda.Stream()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    with torch.cuda.stream(s):
        numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out)
    s.synchronize()
    assert torch.equal(out, first)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, first)


def test_scales_are_read_on_the_gpu_in_a_graph():
    g = torch.Generator(device="cuda").manual_seed(6)
    a, sa = _operand(256, 512, False, E4M3, g)
    b, sb = _operand(512, 384, True, E4M3, g)
    out = torch.empty(256, 384, device="cuda", dtype=torch.float32)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out=out)       # warm: planned outside capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=s):
            numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out=out)
    first = (a.double() * sa.double()) @ (b.double() * sb.double())
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(out, first) < TOL32
    sa.mul_(3.0)
    sb.mul_(0.5)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(out, 1.5 * first) < TOL32


def test_bad_input_is_refused_with_the_reason():
    g = torch.Generator(device="cuda").manual_seed(7)
    a, sa = _operand(64, 128, False, E4M3, g)
    b, sb = _operand(128, 64, True, E4M3, g)
    with pytest.raises(ValueError, match="scale"):
        numba_tc.gemm(a, b)
    with pytest.raises(ValueError, match="both scale_a and scale_b"):
        numba_tc.gemm(a, b, scale_a=sa)
    with pytest.raises(TypeError, match="float32"):
        numba_tc.gemm(a, b, scale_a=sa.half(), scale_b=sb)
    with pytest.raises(ValueError, match="one value"):
        numba_tc.gemm(a, b, scale_a=sa.repeat(2), scale_b=sb)
    with pytest.raises(TypeError, match="not on a CUDA device"):
        numba_tc.gemm(a, b, scale_a=sa.cpu(), scale_b=sb)
    x = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="dequantize fp8"):
        numba_tc.gemm(x, x.t(), scale_a=sa, scale_b=sb)
    with pytest.raises(TypeError, match="one dtype"):
        numba_tc.gemm(a, x.t(), scale_a=sa, scale_b=sb)
    with pytest.raises(TypeError, match="out_dtype"):
        numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out_dtype="float8_e4m3fn")
    with pytest.raises(ValueError, match="batched fp8"):
        numba_tc.gemm(a.unsqueeze(0), b.unsqueeze(0), scale_a=sa, scale_b=sb)


# --- block-wise scales: a's rows in 1x128 blocks of K, b in 128x128 blocks ---------------------
def quantize_blocks(x, dtype, br, bc):
    """(fp8 values, float32 scales of shape (ceil(rows/br), ceil(cols/bc))) of a 2-D tensor."""
    r, c = x.shape
    pr, pc = -(-r // br) * br, -(-c // bc) * bc
    xp = torch.zeros(pr, pc, device=x.device, dtype=torch.float32)
    xp[:r, :c] = x
    amax = xp.reshape(pr // br, br, pc // bc, bc).abs().amax(dim=(1, 3))
    scale = (amax / torch.finfo(dtype).max).clamp(min=1e-12)
    full = scale.repeat_interleave(br, 0).repeat_interleave(bc, 1)[:r, :c]
    q = (x / full).clamp(torch.finfo(dtype).min, torch.finfo(dtype).max).to(dtype)
    return q, scale


def _block_problem(m, n, k, seed, b_layout="T"):
    """a (m x k, row-major) by 1x128 blocks, b (k x n) from a row-major (n x k) weight by 128x128
    blocks (``b_layout`` "T": its transposed view, k-major; "N": a row-major copy), their scales
    and the float64 product of the dequantized operands."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a, sa = quantize_blocks(torch.randn(m, k, device="cuda", generator=g), E4M3, 1, 128)
    w, sw = quantize_blocks(torch.randn(n, k, device="cuda", generator=g), E4M3, 128, 128)
    b, sb = w.t(), sw.t()                            # scale_b (K/128, N/128): a transposed view
    if b_layout == "N":
        b = b.contiguous()
    da = a.double() * sa.double().repeat_interleave(128, 1)[:, :k]
    db = b.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
    return a, b, sa, sb, da @ db


@pytest.mark.parametrize("m,n,k", [(256, 512, 1024), (1000, 777, 1000), (37, 300, 4100), (300, 200, 16384),
                                   (129, 1000, 384)])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_block_scales(m, n, k, out_dtype):
    a, b, sa, sb, want = _block_problem(m, n, k, seed=m + n + k)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
    numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out=out)
    path = numba_tc.explain(a, b, out=out, scale_a=sa, scale_b=sb)
    assert not torch.isnan(out).any(), path
    assert _rel(out, want) < (TOL32 if out_dtype == "float32" else TOL), path


def test_block_scales_any_strides_and_layout():
    # scale_a column-major (DeepGEMM's layout) and b row-major (through the transposing copy)
    a, b, sa, sb, want = _block_problem(384, 640, 2048, seed=11, b_layout="N")
    sa_cm = sa.t().contiguous().t()
    out = numba_tc.gemm(a, b, scale_a=sa_cm, scale_b=sb.contiguous(), out_dtype="float32")
    assert _rel(out, want) < TOL32


def test_block_scales_split_k():
    a, b, sa, sb, want = _block_problem(128, 256, 16384, seed=12)
    out = numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out_dtype="float32")
    path = numba_tc.explain(a, b, out=out, scale_a=sa, scale_b=sb)
    assert "split-K" in path and "fixup" in path, path
    assert _rel(out, want) < TOL32


def test_block_scales_bad_input():
    a, b, sa, sb, _ = _block_problem(256, 256, 512, seed=13)
    with pytest.raises(ValueError, match=r"ceil\(K/128\)"):
        numba_tc.gemm(a, b, scale_a=sa[:, :-1], scale_b=sb)
    with pytest.raises(ValueError, match="block-wise"):
        numba_tc.gemm(a, b, scale_a=sa[:1, :1].reshape(1), scale_b=sb)      # one per tensor, one block-wise
    with pytest.raises(ValueError, match="row-major out"):
        numba_tc.gemm(a, b, scale_a=sa, scale_b=sb, out=torch.empty(256, 256, device="cuda").t())


@pytest.mark.parametrize("cfg", hopper.FP8_CONFIGS, ids=lambda c: f"{c.bm}x{c.bn}_cluster{c.cluster}")
@pytest.mark.parametrize("scaling", ["tensor", "block"])
@pytest.mark.parametrize("splits", [1, 3])
def test_every_fp8_tile(cfg, scaling, splits):
    # each promoted tile the cost model can pick, forced, on ragged shapes (the 256-wide tile's
    # halves: N = 777 leaves the last tile's right half wholly past C's edge, N = 300 partly), with
    # split-K, per-tensor and block-wise scales, bf16 and fp32 out
    v = numba_tc.variant_from(cfg, f"fp8_tile_{cfg.bn}_{cfg.max_stages}_{cfg.cluster}_{splits}", splits=splits)
    for m, n, k in [(1000, 777, 1000), (300, 300, 2048), (200, 200, 384), (130, 200, 256), (130, 70, 100)]:
        # (K in 8, 16, 3, 2 and 1 slices: the grouped loop's turns, leftovers and first groups)
        for out_dtype, tol in (("bfloat16", TOL), ("float32", TOL32)):
            if scaling == "block":
                a, b, sa, sb, want = _block_problem(m, n, k, seed=m + k + splits)
            else:
                g = torch.Generator(device="cuda").manual_seed(m + k + splits)
                a, sa = _operand(m, k, False, E4M3, g)
                b, sb = _operand(k, n, True, E4M3, g)
                want = (a.double() * sa.double()) @ (b.double() * sb.double())
            out = torch.full((m, n), float("nan"), device="cuda", dtype=getattr(torch, out_dtype))
            numba_tc.gemm(a, b, v, scale_a=sa, scale_b=sb, out=out)
            path = numba_tc.explain(a, b, v, out=out, scale_a=sa, scale_b=sb)
            assert ("split-K" in path) == (splits > 1 and k > 128), path      # (a slice can't split)
            assert not torch.isnan(out).any(), (m, n, k, out_dtype, path)
            assert _rel(out, want) < tol, (m, n, k, out_dtype, path)
