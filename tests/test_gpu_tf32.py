"""float32 inputs as tf32 on Hopper's wgmma (``hopper``; what ``auto`` picks with ``allow_tf32``):
each problem checked element by element against float64 products of the inputs rounded to tf32
to nearest (TMA loads them as TFLOAT32, which rounds so: benchmarks/check_tf32.py at 4dce1f6), into a
NaN-poisoned output, in all four layouts and both output orders, with ``explain`` showing the
path (the transposing copy for operands that are not k-major, split-K, the copy of rows TMA
cannot read). Then: auto's choice, the same bits run to run with split-K, an epilogue."""
import numpy as np
import pytest

import numba_tc
from numba_tc import hopper, verify

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason="needs torch")]

# (m, n, k, what explain() must show for layout NT, whose operands are both k-major)
SHAPES = [(256, 256, 256, "64x128"), (328, 200, 264, "64x128"), (8, 24, 16, "x"), (3000, 2056, 72, "128x"),
          (64, 256, 8192, "split-K"), (1, 4096, 4096, "split-K"), (1000, 777, 1001, "repack")]


def _operand(rows, cols, trans, g=None):
    if trans:
        return torch.randn(cols, rows, device="cuda", generator=g).t()
    return torch.randn(rows, cols, device="cuda", generator=g)


@pytest.fixture(autouse=True)
def _hopper_gpu():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("needs an sm_90 GPU (wgmma)")


@pytest.mark.parametrize("m,n,k,path", SHAPES)
@pytest.mark.parametrize("layout", verify.LAYOUTS)
@pytest.mark.parametrize("out_layout", ["C", "F"])
def test_every_layout_and_shape_element_by_element(m, n, k, path, layout, out_layout):
    r = verify.check("hopper", m, n, k, layout, "tf32", out_layout, kind="torch")
    assert r.ok, str(r)
    a, b = _operand(m, k, layout[0] == "T"), _operand(k, n, layout[1] == "T")
    out = torch.empty(n, m, device="cuda").t() if out_layout == "F" else None
    plan = numba_tc.explain(a, b, "hopper", out=out)
    if out_layout == "C" and layout == "NT":
        assert path in plan, plan
    # wgmma reads a tf32 B k-major only (B column-major; a column-major C is C^T = B^T A^T, so
    # there A's layout decides). An n-major B is read as the swapped product's A where A is
    # k-major and both operands' rows are TMA's, else transposed by a pass first, or for few rows
    # copied by the producer's cp.async (``hopper.operands._b_by_producer``); A is read as it lies (an
    # mn-major one through registers) where TMA can read it
    b_nmajor = layout[1] == "N" if out_layout == "C" else layout[0] == "T"
    if m > 1:
        assert any(w in plan for w in ("transpose b", "cp.async b", "swapped")) == b_nmajor, plan
    if k % 4 == 0 and (layout[0] == "N" or m % 4 == 0):
        assert "transpose a" not in plan and "repack" not in plan, plan


def test_auto_with_allow_tf32_takes_hopper_and_without_it_fp32():
    a, b = _operand(512, 512, False), _operand(512, 512, False)
    big = _operand(2048, 2048, False)
    assert numba_tc.explain(big, big, allow_tf32=True) == "hopper: 128x256 swapped"
    assert "cp.async b" in numba_tc.explain(a[:8], _operand(512, 16384, False), allow_tf32=True)
    assert not numba_tc.explain(a, b).startswith("hopper")
    c = numba_tc.gemm(a, b, allow_tf32=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    ref = a.double() @ b.double()
    ours = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
    theirs = float(torch.linalg.norm((a @ b).double() - ref) / torch.linalg.norm(ref))
    assert ours < 1e-3 and ours < 1.1 * theirs, (ours, theirs)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("m,n,k", [(300, 776, 1001), (1, 4100, 640), (257, 132, 96), (64, 777, 200)])
@pytest.mark.parametrize("layout", ["NN", "TN"])
def test_b_copied_by_the_producer_element_by_element(m, n, k, layout, splits):
    # an n-major B copied into each stage as it lies by the producer's 16-byte cp.async, then
    # transposed k-major in 4 x 4 blocks and rounded to tf32 as TMA rounds A; zeros past the
    # ragged edges (N not a multiple of the tile, K of the slice); whole and split-K, on both of
    # the tiles it runs on. Rows not 16-byte aligned (odd N) take the pass over B instead
    a, b = _operand(m, k, layout[0] == "T"), _operand(k, n, False)
    for cfg in hopper.ASYNC_CONFIGS:
        v = numba_tc.variant_from(cfg, f"async_{cfg.bm}x{cfg.bn}_{splits}", splits=splits)
        assert ("cp.async b" in numba_tc.explain(a, b, v, allow_tf32=True)) == (n % 4 == 0)
        r = verify.check(v, m, n, k, layout, "tf32", kind="torch")
        assert r.ok, str(r)


SWAP_CFGS = [hopper.RUNG7, hopper.RUNG7.replace(bm=64, consumers=1), hopper.RUNG7.replace(bn=128, max_stages=6, cluster=2)]


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("cfg", SWAP_CFGS, ids=lambda c: f"{c.bm}x{c.bn}x{c.cluster}")
@pytest.mark.parametrize("m,n,k", [(300, 776, 1000), (520, 264, 96), (64, 1000, 2004)])
def test_a_read_through_registers_element_by_element(m, n, k, cfg, splits):
    # NN as C^T = B^T A^T: B^T (mn-major) loaded by each warp from the stage into registers for
    # wgmma, A^T k-major, C's transpose stored from registers (split-K: into the planes, which
    # the fix-up adds as C); TT: A mn-major through registers, no swap. Ragged edges everywhere
    v = numba_tc.variant_from(cfg, f"regs_a_{cfg.bm}x{cfg.bn}x{cfg.cluster}_{splits}", splits=splits)
    a, b = _operand(m, k, False), _operand(k, n, False)
    plan = numba_tc.explain(a, b, v, allow_tf32=True)
    assert "swapped" in plan and "transpose" not in plan, plan
    assert ("split-K" in plan) == (splits > 1), plan
    for layout in ("NN", "TT", "TN"):
        r = verify.check(v, m, n, k, layout, "tf32", kind="torch")
        assert r.ok, (layout, str(r))


@pytest.mark.parametrize("splits", [1, 3])
def test_epilogue_on_a_swapped_product(splits):
    # the epilogue sees C's (row, col): bias per column, c read at the element's own place;
    # with split-K the fix-up applies it once, after the sum
    g = torch.Generator(device="cuda").manual_seed(5)
    a, b = _operand(520, 1000, False, g), _operand(1000, 264, False, g)
    bias = torch.randn(264, device="cuda", generator=g)
    c = torch.randn(520, 264, device="cuda", generator=g)
    v = numba_tc.variant_from(hopper.RUNG7, f"regs_a_epi_{splits}", splits=splits)
    assert "swapped" in numba_tc.explain(a, b, v, allow_tf32=True)
    out = torch.full((520, 264), float("nan"), device="cuda")
    numba_tc.gemm(a, b, v, out=out, c=c, beta=0.5, bias=bias, activation="relu", allow_tf32=True)
    ra = torch.from_numpy(verify.as_read(a.cpu().numpy(), "tf32_rn"))
    rb = torch.from_numpy(verify.as_read(b.cpu().numpy(), "tf32_rn"))
    ref = torch.relu(ra @ rb + 0.5 * c.cpu().double() + bias.cpu().double())
    err = float(torch.linalg.norm(out.cpu().double() - ref) / torch.linalg.norm(ref))
    assert err < 1e-5, err


def test_split_k_is_bitwise_repeatable():
    a, b = _operand(256, 32768, False), _operand(32768, 256, True)
    assert "split-K" in numba_tc.explain(a, b, "hopper")
    first = numba_tc.gemm(a, b, "hopper")
    for _ in range(3):
        assert torch.equal(numba_tc.gemm(a, b, "hopper"), first)


def test_epilogue_on_tf32():
    g = torch.Generator(device="cuda").manual_seed(3)
    a, b = _operand(300, 500, False, g), _operand(500, 260, False, g)
    bias = torch.randn(260, device="cuda", generator=g)
    c = torch.randn(300, 260, device="cuda", generator=g)
    out = torch.full((300, 260), float("nan"), device="cuda")
    numba_tc.gemm(a, b, "hopper", out=out, c=c, beta=0.5, bias=bias, activation="relu")
    ra = torch.from_numpy(verify.as_read(a.cpu().numpy(), "tf32_rn"))
    rb = torch.from_numpy(verify.as_read(b.cpu().numpy(), "tf32_rn"))
    ref = torch.relu(ra @ rb + 0.5 * c.cpu().double() + bias.cpu().double())
    err = float(torch.linalg.norm(out.cpu().double() - ref) / torch.linalg.norm(ref))
    assert err < 1e-5, err
