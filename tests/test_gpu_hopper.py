"""On an H100: every Hopper rung x precision x shape x layout against float64, poisoned outputs.

TMA reads rows that are 16-byte aligned, so every shape here has M, N, K multiples of 8 (any
layout then has aligned rows) while none is a multiple of the 128 x 256 x 64 tiles; unaligned
operands are refused by name and handled by "auto" (test at the end).
"""
import pytest

import numba_tc
from numba_tc import hopper, verify

from conftest import assert_shapes

pytestmark = pytest.mark.gpu

SHAPES = {"round": (256, 256, 256), "ragged": (328, 200, 264), "tiny": (8, 24, 16),
          "skinny": (2000, 16, 136), "long_k": (136, 264, 1096),
          "many_tiles": (3000, 2056, 72)}       # more tiles than SMs: the persistent loop wraps
WGMMA = [v.name for v in numba_tc.variants(ladder="wgmma")]


def _sm90():
    from numba import cuda
    return cuda.is_available() and tuple(cuda.get_current_device().compute_capability) == (9, 0)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("variant", WGMMA)
@pytest.mark.parametrize("layout", verify.LAYOUTS)
def test_wgmma_sweep(variant, dtype, layout):
    assert_shapes(variant, SHAPES, layout=layout, dtype=dtype)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("variant", WGMMA)
def test_16_bit_and_column_major_outputs(variant):
    for out_layout in ("C", "F"):
        r = verify.check(variant, 264, 136, 200, layout="NN", dtype="bfloat16", out_dtype="bfloat16",
                         out_layout=out_layout)
        assert r.ok, r


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
def test_unaligned_rows_are_refused_by_a_lower_rung_and_run_under_auto():
    torch = pytest.importorskip("torch")
    a = torch.randn(100, 61, device="cuda", dtype=torch.bfloat16)     # 122-byte rows
    b = torch.randn(61, 72, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="cannot be read by TMA"):
        numba_tc.gemm(a, b, variant="wgmma_persistent")
    c = numba_tc.gemm(a, b)
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)) < 1e-2


def _padded(torch, rows, cols, trans, dtype):
    """A rows x cols operand whose stored rows are 16 mod 32 bytes apart (``hopper`` multicasts
    such a B), with random values in the padding: a read past the edge would show."""
    srows, scols = (cols, rows) if trans else (rows, cols)
    ld = (scols + 7) // 8 * 8
    ld += 8 if ld % 16 == 0 else 0
    x = torch.randn(srows, ld, device="cuda", dtype=dtype)[:, :scols]
    return x.T if trans else x


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("layout", verify.LAYOUTS)
def test_hopper_on_padded_rows_with_ragged_edges(layout):
    torch = pytest.importorskip("torch")
    from numba_tc.tensormap import tma_rows_fast
    for m, n, k in [(333, 201, 267), (130, 1000, 75), (7, 9, 5), (1500, 700, 300)]:
        a = _padded(torch, m, k, layout[0] == "T", torch.bfloat16)
        b = _padded(torch, k, n, layout[1] == "T", torch.bfloat16)
        assert not tma_rows_fast(b.data_ptr(), max(b.stride()), 2)
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
        numba_tc.gemm(a, b, variant="hopper", out=c)
        ref = a.double() @ b.double()
        err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
        assert err < 1e-2, (m, n, k, err)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("layout", verify.LAYOUTS)
@pytest.mark.parametrize("i", range(len(hopper.RUNG7_CONFIGS)))
def test_each_hopper_configuration_alone(i, layout):
    # every tile `hopper` may pick, forced, on ragged shapes that wrap the persistent grid: a
    # cluster's CTAs split B by rows (k-major) or by whole boxes (mn-major: 192 = 2 + 1 boxes)
    cfg = hopper.RUNG7_CONFIGS[i]
    v = numba_tc.variant_from(cfg, f"hopper_alone{i}")
    for m, n, k in ((2056, 2312, 1096), (264, 200, 136), (1000, 3000, 520)):
        r = verify.check(v, m, n, k, layout=layout, dtype="bfloat16")
        assert r.ok, (cfg, r)
