"""On a GPU: every rung x shapes x layouts x array kinds against float64, with poisoned outputs."""
import numpy as np
import pytest

import numba_tc
from numba_tc import verify

pytestmark = pytest.mark.gpu

SHAPES = [(1, 1, 1), (7, 5, 3), (127, 129, 65), (300, 200, 1000), (1000, 33, 517), (64, 64, 64),
          (512, 384, 256), (2, 700, 3000)]
SIMT = [v.name for v in numba_tc.variants(ladder="simt")]


@pytest.mark.parametrize("variant", SIMT)
@pytest.mark.parametrize("layout", verify.LAYOUTS)
def test_simt_sweep(variant, layout):
    for m, n, k in SHAPES:
        for out_layout in ("C", "F"):
            r = verify.check(variant, m, n, k, layout=layout, out_layout=out_layout)
            assert r.ok, r


def test_torch_cupy_numba_kinds_round_trip():
    torch = pytest.importorskip("torch")
    from numba import cuda
    a = torch.randn(333, 257, device="cuda")
    b = torch.randn(257, 190, device="cuda")
    ref = (a.double() @ b.double()).cpu().numpy()
    c = numba_tc.gemm(a, b, variant="warptile")
    assert isinstance(c, torch.Tensor) and c.is_cuda and c.dtype == torch.float32
    assert verify.rel_error(c.cpu().numpy(), ref) < 1e-5
    # column-major torch tensors (a transposed view of contiguous memory) need no copy
    at, bt = a.T.contiguous().T, b.T.contiguous().T
    assert not at.is_contiguous()
    ct = numba_tc.gemm(at, bt, variant="vectorized")
    assert verify.rel_error(ct.cpu().numpy(), ref) < 1e-5
    da, db = cuda.to_device(a.cpu().numpy()), cuda.to_device(b.cpu().numpy())
    dc = numba_tc.gemm(da, db)
    assert type(dc).__module__.startswith("numba")
    assert verify.rel_error(dc.copy_to_host(), ref) < 1e-5
    cupy = pytest.importorskip("cupy")
    ca, cb = cupy.asarray(a.cpu().numpy()), cupy.asarray(b.cpu().numpy())
    cc = numba_tc.gemm(ca, cb, variant="blocktile2d")
    assert isinstance(cc, cupy.ndarray)
    assert verify.rel_error(cupy.asnumpy(cc), ref) < 1e-5


def test_strided_views_and_out_overlap():
    torch = pytest.importorskip("torch")
    big = torch.randn(400, 300, device="cuda")
    a = big[:250, 10:210]            # row stride 300, not contiguous
    b = torch.randn(200, 99, device="cuda")
    ref = (a.double() @ b.double()).cpu().numpy()
    assert verify.rel_error(numba_tc.gemm(a, b, variant="warptile").cpu().numpy(), ref) < 1e-5
    with pytest.raises(ValueError, match="strides"):
        numba_tc.gemm(big[::2, ::2], b[:150], variant="warptile")
    sq = torch.randn(64, 64, device="cuda")
    with pytest.raises(ValueError, match="overlaps"):
        numba_tc.gemm(sq, sq, variant="warptile", out=sq)


def test_empty_dimensions_behave_like_numpy():
    a = np.ones((4, 0), np.float32)
    b = np.ones((0, 3), np.float32)
    c = numba_tc.gemm(a, b)
    assert c.shape == (4, 3) and np.all(c == 0)
    assert numba_tc.gemm(np.ones((0, 5), np.float32), np.ones((5, 3), np.float32)).shape == (0, 3)


@pytest.mark.parametrize("slots", [20, 32])
@pytest.mark.parametrize("layout", verify.LAYOUTS)
def test_warptile_tail_split_with_forced_slots(slots, layout):
    """Whole tiles and K-split tail tiles in one launch (few slots force the split on small
    problems; the sweep above meets the GPU's own, 396 on an H100)."""
    from dataclasses import replace
    from numba_tc import simt
    cfg = simt.RUNG7
    base = numba_tc.variant_from(cfg, f"warptile_slots{slots}_{layout}")
    name = replace(base, plan=lambda a, b, c, dev: base.plan(a, b, c, dev, slots=slots))
    for m, n, k in ((700, 500, 300), (1000, 333, 777), (129, 65, 2049)):
        grid, (gn, whole, parts, per) = simt.tiled_plan(cfg, m, n, k, slots)
        assert parts > 1 and (whole > 0) == ((m, n) != (129, 65))
        r = verify.check(name, m, n, k, layout=layout)
        assert r.ok, r
