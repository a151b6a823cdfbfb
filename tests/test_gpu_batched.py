"""Batched products on a GPU (``numba_tc.batch``), torch tensors: both operands batched in all four
layouts, one broadcast (2-D or a batch of one), strided batches from views, ragged sizes; each
path asserted by ``explain`` (the batched kernel, one stacked product, one product per batch);
epilogues with the rows stacked (bias + GELU, c, a user's function); a CUDA graph; outputs
poisoned with NaN, against float64."""
import pytest
from numba import cuda

import numba_tc
from numba_tc.api import device_capability

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason="needs torch")]
HOPPER = torch is not None and torch.cuda.is_available() and tuple(device_capability(0)) == (9, 0)
TOL = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}


def _rand(*shape, dtype="bfloat16", t=False):
    """Fresh normal values; ``t``: the last two dimensions stored transposed (a view)."""
    dt = getattr(torch, dtype)
    if t:
        return torch.randn(*shape[:-2], shape[-1], shape[-2], device="cuda").to(dt).transpose(-1, -2)
    return torch.randn(*shape, device="cuda").to(dt)


def _err(x, ref):
    assert not torch.isnan(x).any()
    return float((x.double() - ref).norm() / ref.norm())


def _check(a, b, path, dtype="bfloat16", **kw):
    ref = torch.matmul(a.double(), b.double())
    count = max(a.shape[0] if a.dim() == 3 else 1, b.shape[0] if b.dim() == 3 else 1)
    out = torch.full((count, a.shape[-2], b.shape[-1]), float("nan"), device="cuda", dtype=a.dtype)
    assert path in numba_tc.explain(a, b, out=out, **kw)
    numba_tc.gemm(a, b, out=out, **kw)
    e = _err(out, ref)
    assert e < TOL[dtype], e
    new = numba_tc.gemm(a, b, **kw)
    assert new.shape == out.shape and torch.equal(new, out)


@pytest.mark.skipif(not HOPPER, reason="the batched kernel is sm_90")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("nb, m, n, k", [(5, 200, 264, 136), (3, 136, 72, 1000), (16, 64, 64, 64)])
def test_batched_kernel_layouts(dtype, ta, tb, nb, m, n, k):
    _check(_rand(nb, m, k, dtype=dtype, t=ta), _rand(nb, k, n, dtype=dtype, t=tb), "batched", dtype)


@pytest.mark.skipif(not HOPPER, reason="the batched kernel is sm_90")
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("nb, m, n, k", [(2, 1536, 1536, 1024), (3, 2056, 3000, 520)])
def test_batched_on_192_row_tiles(ta, tb, nb, m, n, k):
    # few batches whose rounds 192x192 tiles (three consumer warpgroups) fill best; ragged M, K
    _check(_rand(nb, m, k, t=ta), _rand(nb, k, n, t=tb), "192x192 batched")


@pytest.mark.skipif(not HOPPER, reason="the batched kernel is sm_90")
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("nb, m, n, k", [(7, 200, 128, 520), (3, 1000, 128, 264), (512, 64, 128, 1024)])
def test_batched_one_tile_column_takes_turns(ta, tb, nb, m, n, k):
    # N = 128 and more than two K slices: ping-pong consumers (``hopper.NARROW_N``), an odd count
    # of tiles, ragged M and K; with an epilogue too
    a, b = _rand(nb, m, k, t=ta), _rand(nb, k, n, t=tb)
    _check(a, b, "64x128 ping-pong batched")
    bias = _rand(n)
    out = numba_tc.gemm(a, b, bias=bias, activation="gelu_tanh")
    ref = torch.nn.functional.gelu(torch.matmul(a.double(), b.double()) + bias.double(), approximate="tanh")
    assert _err(out, ref) < 1e-2


@pytest.mark.skipif(not HOPPER, reason="the batched kernel is sm_90")
def test_broadcast_and_strided_batches():
    _check(_rand(300, 128), _rand(4, 128, 256), "batched")                  # a shared by every batch
    _check(_rand(4, 296, 128, t=True), _rand(128, 256), "batched")         # b shared, a not stacked
    _check(_rand(4, 296, 128, t=True), _rand(1, 128, 256), "batched")      # a batch of one
    _check(_rand(4, 300, 128, t=True), _rand(128, 256), "one product per batch")  # a's 600-byte rows
    _check(_rand(8, 300, 128)[::2], _rand(4, 128, 264)[:, :, 8:], "batched")  # strided views
    _check(_rand(4, 300, 128), _rand(128, 256), "one product, the batch stacked")
    _check(_rand(4, 300, 128), _rand(1, 128, 256), "one product, the batch stacked")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_one_product_per_batch(dtype):
    # rows of 75 bf16 elements (150 bytes): TMA cannot store C; fp32 has no batched kernel
    _check(_rand(3, 100, 64, dtype=dtype), _rand(3, 64, 75, dtype=dtype), "one product per batch", dtype)


@cuda.jit(device=True)
def stacked_residual(acc, row, col, res, scale):
    return acc + scale * res[row, col]


@pytest.mark.skipif(not HOPPER, reason="the batched kernel is sm_90")
@pytest.mark.parametrize("shared_b", [False, True])
def test_batched_epilogues(shared_b):
    nb, m, n, k = 4, 200, 256, 192
    a = _rand(nb, m, k, t=shared_b)            # (transposed: not stacked, so the batched kernel runs)
    b = _rand(k, n) if shared_b else _rand(nb, k, n)
    ab = torch.matmul(a.double(), b.double())
    bias, c, res = _rand(n), _rand(nb, m, n), torch.randn(nb * m, n, device="cuda")
    out = numba_tc.gemm(a, b, bias=bias, activation="gelu_tanh")
    ref = torch.nn.functional.gelu(ab + bias.double(), approximate="tanh")
    assert _err(out, ref) < 1e-2
    out = numba_tc.gemm(a, b, c=c, alpha=0.5, beta=2.0)
    assert _err(out, 0.5 * ab + 2.0 * c.double()) < 1e-2
    out = numba_tc.gemm(a, b, epilogue=stacked_residual, epilogue_args=(res, 0.25))
    assert _err(out, ab + 0.25 * res.double().reshape(nb, m, n)) < 1e-2
    with pytest.raises(ValueError, match="one per column"):
        numba_tc.gemm(a, b, bias=_rand(m))


@pytest.mark.skipif(not HOPPER, reason="the batched kernel is sm_90")
def test_batched_in_a_cuda_graph():
    a, b = _rand(6, 256, 128), _rand(6, 128, 192)
    out = torch.empty(6, 256, 192, device="cuda", dtype=torch.bfloat16)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        numba_tc.gemm(a, b, out=out)                    # planned and loaded outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        numba_tc.gemm(a, b, out=out)
    a.copy_(_rand(6, 256, 128))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert _err(out, torch.matmul(a.double(), b.double())) < 1e-2


def test_batched_needs_a_gradient_only_where_one_product():
    a = _rand(2, 64, 32).requires_grad_()
    b = _rand(32, 48).requires_grad_()
    y = numba_tc.gemm(a, b)
    y.float().sum().backward()
    assert a.grad is not None and b.grad is not None
    with pytest.raises(TypeError, match="torch operator"):
        numba_tc.gemm(a, _rand(2, 32, 48).requires_grad_())
