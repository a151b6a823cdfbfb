"""The few-rows rung (``gemv``) on a GPU: against float64 for both 16-bit types, the four
layouts, rows 16-byte aligned or not, ragged sizes, up to ``gemv.ROWS`` rows and past them
(named), outputs poisoned with NaN first; the same bits run to run; an epilogue applied once, to
the sum; ``auto``'s choice; and a float32 ``a`` read as bf16 (``prepared.prepare(..., a_cast=True)``)
bit for bit as the product of its cast."""
import numpy as np
import pytest

import numba_tc
from numba_tc import gemv, prepared

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason="needs torch")]
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]
DTYPES = ["bfloat16", "float16"]
# m, n, k, pad of the leading dimensions (1: rows not 16-byte aligned)
SHAPES = [(1, 2304, 768, 0), (1, 77, 1001, 1), (3, 130, 7, 0), (8, 513, 3072, 0), (5, 300, 260, 1),
          (13, 96, 1030, 0)]


def _rel(x, ref):
    return float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref))


def _operand(rows, cols, trans, dtype, pad, g):
    dt = getattr(torch, dtype)
    if trans:
        return torch.randn(cols, rows + pad, device="cuda", generator=g).to(dt)[:, :rows].t()
    return torch.randn(rows, cols + pad, device="cuda", generator=g).to(dt)[:, :cols]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta,tb", LAYOUTS)
@pytest.mark.parametrize("m,n,k,pad", SHAPES)
def test_gemv_matches_float64(dtype, ta, tb, m, n, k, pad):
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
    a, b = _operand(m, k, ta, dtype, pad, g), _operand(k, n, tb, dtype, pad, g)
    ref = a.double() @ b.double()
    for out_dtype, tol in ((getattr(torch, dtype), 1e-2), (torch.float32, 1e-5)):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
        numba_tc.gemm(a, b, "gemv", out=out)
        assert _rel(out, ref) < tol, (out_dtype, _rel(out, ref))
        again = torch.full_like(out, float("nan"))
        numba_tc.gemm(a, b, "gemv", out=again)
        assert torch.equal(out, again)              # sums in a fixed order: the same bits
    assert numba_tc.explain(a, b).startswith("gemv") == (m <= gemv.AUTO_ROWS)


@pytest.mark.parametrize("tb", [False, True])
def test_gemv_epilogue_applies_once_to_the_sum(tb):
    g = torch.Generator(device="cuda").manual_seed(3)
    a, b = _operand(4, 1000, False, "bfloat16", 0, g), _operand(1000, 300, tb, "bfloat16", 0, g)
    bias = torch.randn(300, device="cuda", generator=g).bfloat16()
    c = torch.randn(4, 300, device="cuda", generator=g).bfloat16()
    got = numba_tc.gemm(a, b, "gemv", out_dtype=torch.float32, bias=bias, c=c, beta=0.5, alpha=2.0,
                        activation="gelu")
    ref = torch.nn.functional.gelu(2.0 * (a.double() @ b.double()) + 0.5 * c.double() + bias.double())
    assert _rel(got, ref) < 1e-5


@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m", [1])
def test_float32_a_read_as_bf16_is_the_product_of_its_cast(m, tb):
    """``a_cast``: the kernel rounds each float32 element of a to bf16 as ``Tensor.bfloat16``
    does (to nearest even), so the result is the same bits as casting first."""
    g = torch.Generator(device="cuda").manual_seed(m)
    a = torch.randn(m, 777, device="cuda", generator=g) * 3
    b = _operand(777, 2304, tb, "bfloat16", 0, g)
    bias = torch.randn(2304, device="cuda", generator=g).bfloat16()
    prep = prepared.prepare(a, b, a_cast=True, bias=bias)
    assert prep is not None
    a2 = torch.randn(m, 777, device="cuda", generator=g)         # another a with the same facts
    y = torch.full((m, 2304), float("nan"), device="cuda", dtype=torch.bfloat16)
    prep.enqueue(a2.data_ptr(), y.data_ptr())
    assert torch.equal(y, numba_tc.gemm(a2.bfloat16(), b, bias=bias))
    assert prepared.prepare(torch.randn(gemv.AUTO_ROWS + 1, 777, device="cuda"), b, a_cast=True) is None
    assert prepared.prepare(a, b, "hopper", a_cast=True) is None
    with pytest.raises(TypeError, match="a float32 a as b's 16-bit type"):
        prepared.prepare(a.bfloat16(), b, a_cast=True)
