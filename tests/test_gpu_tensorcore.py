"""On a GPU: every tensor-core rung x precision x shape x layout against float64, poisoned outputs.

Shapes: round, ragged (multiples of no tile; their odd leading dimensions also exercise the
element-wise copy path), tiny and tall-skinny. Many kernels are compiled (one per rung, precision,
layout and alignment): run with ``-n 8`` (pytest-xdist) on a GPU machine to compile in parallel.
"""
import numpy as np
import pytest

import numba_tc
from numba_tc import verify

from conftest import assert_shapes

pytestmark = pytest.mark.gpu

SHAPES = {"round": (256, 256, 256), "ragged": (333, 200, 264), "ragged_ld": (129, 67, 99),
          "tiny": (5, 7, 3), "skinny": (2000, 16, 136)}
MMA = [v.name for v in numba_tc.variants(ladder="mma")]
DTYPES = ("bfloat16", "float16", "tf32")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", MMA)
@pytest.mark.parametrize("layout", verify.LAYOUTS)
def test_mma_sweep(variant, dtype, layout):
    assert_shapes(variant, SHAPES, layout=layout, dtype=dtype)


@pytest.mark.parametrize("variant", ["mma_naive", "pipelined", "mma_tuned"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_16_bit_outputs_and_column_major_out(variant, dtype):
    """C in the input precision (rounded to nearest) and in column-major order."""
    for out_layout in ("C", "F"):
        r = verify.check(variant, 300, 250, 200, layout="NT", dtype=dtype, out_dtype=dtype,
                         out_layout=out_layout)
        assert r.ok, r


def test_torch_bf16_and_ml_dtypes():
    torch = pytest.importorskip("torch")
    import ml_dtypes
    a = torch.randn(500, 300, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(300, 400, device="cuda", dtype=torch.bfloat16)
    c = numba_tc.gemm(a, b, variant="pipelined")
    assert c.dtype == torch.bfloat16 and c.shape == (500, 400)
    ref = a.double() @ b.double()
    assert float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)) < 1e-2
    c32 = numba_tc.gemm(a, b, variant="mma_tuned", out_dtype="float32")
    assert c32.dtype == torch.float32
    assert float(torch.linalg.norm(c32.double() - ref) / torch.linalg.norm(ref)) < 1e-2
    ha = a.cpu().float().numpy().astype(ml_dtypes.bfloat16)
    hb = b.cpu().float().numpy().astype(ml_dtypes.bfloat16)
    hc = numba_tc.gemm(ha, hb, variant="mma_swizzle")
    assert hc.dtype == ml_dtypes.bfloat16
    assert verify.rel_error(hc.astype(np.float64), ref.cpu().numpy()) < 1e-2


def test_auto_picks_tensor_cores_for_16_bit_and_tf32_only_when_allowed():
    torch = pytest.importorskip("torch")
    a = torch.randn(64, 64, device="cuda")
    c_simt = numba_tc.gemm(a, a)                       # float32: SIMT, full precision
    c_tf32 = numba_tc.gemm(a, a, allow_tf32=True)
    ref = a.double() @ a.double()
    e1 = float(torch.linalg.norm(c_simt.double() - ref) / torch.linalg.norm(ref))
    e2 = float(torch.linalg.norm(c_tf32.double() - ref) / torch.linalg.norm(ref))
    assert e1 < 1e-6 and 1e-5 < e2 < 1e-3


def test_readme_example_one_warp_mma():
    from numba import cuda
    from numba_tc.examples import mma_16x8x16
    rng = np.random.default_rng()
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 8)).astype(np.float16)
    c = np.full(128, np.nan, np.float32)
    d_c = cuda.to_device(c)
    mma_16x8x16[1, 32](cuda.to_device(a.view(np.uint32).ravel()),
                       cuda.to_device(np.ascontiguousarray(b.T).view(np.uint32).ravel()), d_c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert verify.rel_error(d_c.copy_to_host().reshape(16, 8), ref) < 1e-6
