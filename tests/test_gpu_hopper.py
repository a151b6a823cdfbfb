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


def _scaled_residual():
    """A user's epilogue reading a C-shaped array at the element's (row, col)."""
    from numba import cuda

    @cuda.jit(device=True)
    def scaled_residual(acc, row, col, res, scale):
        return acc + scale * res[row, col]
    return scaled_residual


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


PINGPONG = [hopper.RUNG7.replace(bn=128, max_stages=6, pingpong=True), hopper.NARROW_N,
            hopper.RUNG7.replace(bm=64, bn=256, pingpong=True), hopper.RUNG7.replace(bn=128, pingpong=True, cluster=2)]


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("layout", verify.LAYOUTS)
@pytest.mark.parametrize("i", range(len(PINGPONG)))
def test_ping_pong_tiles_alone(i, layout):
    # the consumers take alternate tiles (``WgmmaConfig.pingpong``), forced: blocks of one tile
    # (the second consumer idle), of an odd count (the first takes one more), of many (the
    # persistent loop wraps); whole and split along K (units of different K runs), 16-bit and
    # float32 out, with a user's epilogue reading an array
    torch = pytest.importorskip("torch")
    cfg = PINGPONG[i]
    for splits in (1, 3):
        v = numba_tc.variant_from(cfg, f"hopper_pp{i}_s{splits}", splits=splits)
        for m, n, k, out in ((64, 128, 64, "bfloat16"), (264, 200, 136, "float32"), (2056, 2312, 1096, "bfloat16"),
                             (1000, 3000, 520, "float32")):
            r = verify.check(v, m, n, k, layout=layout, dtype="bfloat16", out_dtype=out)
            assert r.ok, (cfg, splits, r)
    f = _scaled_residual()
    v = numba_tc.variant_from(cfg, f"hopper_pp{i}_s1", splits=1)
    m, n, k = 1000, 1032, 776
    a = torch.randn(k, m, device="cuda", dtype=torch.bfloat16).T if layout[0] == "T" else \
        torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T if layout[1] == "T" else \
        torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(m, n, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert "ping-pong" in numba_tc.explain(a, b, v, out=out, epilogue=f, epilogue_args=(res, 0.5))
    numba_tc.gemm(a, b, v, out=out, epilogue=f, epilogue_args=(res, 0.5))
    want = a.double() @ b.double() + 0.5 * res.double()
    assert float(torch.linalg.norm(out.double() - want) / torch.linalg.norm(want)) < 1e-2


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("layout", ["NN", "NT"])
@pytest.mark.parametrize("i", range(len(hopper.SWAP_CONFIGS)))
def test_each_swapped_decode_tile_alone(i, layout):
    # C^T = B^T A^T on a 64 x bn tile (A row-major: A^T is a k-major B), forced, whole and split
    # along K: rows up to bn, ragged N and K, B's rows slow too, 16-bit and float32 out
    cfg = hopper.SWAP_CONFIGS[i]
    for splits in (1, 3):
        v = numba_tc.variant_from(cfg, f"hopper_swap{i}_s{splits}", splits=splits)
        for m, n, k, dt, out in ((cfg.bn, 1000, 1096, "bfloat16", "bfloat16"),
                                 (max(1, cfg.bn - 5), 4104, 520, "float16", "float32"), (1, 200, 4000, "bfloat16", "float32")):
            r = verify.check(v, m, n, k, layout=layout, dtype=dt, out_dtype=out)
            assert r.ok, (cfg, splits, r)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("layout", verify.LAYOUTS)
def test_auto_takes_192_row_tiles_with_their_epilogue(layout):
    # `auto` on shapes whose rounds 192x192 tiles fill best (three consumer warpgroups, one output
    # box each), B's rows aligned or 16 mod 32 bytes apart (B multicast, A copied first where its
    # rows are slow too), ragged edges; a bias, an activation and a user's epilogue reading a
    # C-shaped array at (row, col)
    torch = pytest.importorskip("torch")
    scaled_residual = _scaled_residual()

    def operand(rows, cols, trans, slow):
        if slow:
            return _padded(torch, rows, cols, trans, torch.bfloat16)
        return torch.randn(cols, rows, device="cuda", dtype=torch.bfloat16).T if trans else \
            torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    # (rows slow: A, B) aligned; B copied (its rows odd); B multicast; both slow: one copied first
    for m, n, k, slow in ((3072, 1536, 4096, (0, 0)), (3000, 1530, 1000, (0, 0)), (3000, 3000, 2048, (0, 1)),
                          (3072, 1536, 4096, (1, 1)), (2056, 4104, 1000, (1, 1))):
        a, b = operand(m, k, layout[0] == "T", slow[0]), operand(k, n, layout[1] == "T", slow[1])
        assert "192x192" in numba_tc.explain(a, b), (m, n, k, slow, numba_tc.explain(a, b))
        bias, res = torch.randn(n, device="cuda"), torch.randn(m, n, device="cuda")
        ref = a.double() @ b.double()
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        numba_tc.gemm(a, b, out=out, bias=bias, activation="gelu")
        want = torch.nn.functional.gelu(ref + bias.double())
        assert float(torch.linalg.norm(out.double() - want) / torch.linalg.norm(want)) < 1e-2, (m, n, k, slow)
        got = numba_tc.gemm(a, b, epilogue=scaled_residual, epilogue_args=(res, 0.5))
        want = ref + 0.5 * res.double()
        assert float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want)) < 1e-2, (m, n, k, slow)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("layout", verify.LAYOUTS)
@pytest.mark.parametrize("out_dtype", ["input", "float32"])
def test_an_epilogue_array_read_at_its_element_is_staged(layout, out_dtype):
    # a float32 array of C's shape that the user's function reads only at [row, col]: the kernel
    # copies its boxes into shared memory (explain says so) and hands the function the elements;
    # ragged M and K, several tiles a block (the slots reused), rows and columns past C's edges,
    # tf32 inputs too. A function that reads elsewhere, an array whose rows are not 16-byte
    # multiples, a strided view: the array read where it lies, the same result
    from numba import cuda
    torch = pytest.importorskip("torch")
    f = _scaled_residual()

    @cuda.jit(device=True)
    def shifted(acc, row, col, res, scale):
        return acc + scale * res[row, min(col + 1, res.shape[1] - 1)]
    for m, n, k, dt in ((4096, 4096, 1024, torch.bfloat16), (3001, 2052, 776, torch.bfloat16),
                        (136, 260, 64, torch.float16), (1000, 1028, 520, torch.float32)):
        a = torch.randn(k, m, device="cuda", dtype=dt).T if layout[0] == "T" else torch.randn(m, k, device="cuda", dtype=dt)
        b = torch.randn(n, k, device="cuda", dtype=dt).T if layout[1] == "T" else torch.randn(k, n, device="cuda", dtype=dt)
        kw = {"allow_tf32": True} if dt == torch.float32 else {}
        odt = dt if out_dtype == "input" else torch.float32
        ref = a.double() @ b.double()
        wide = torch.randn(m, n + 4, device="cuda")
        for fn, res, staged in ((f, torch.randn(m, n, device="cuda"), True), (shifted, torch.randn(m, n, device="cuda"), False),
                                (f, wide[:, :n], True), (f, wide[:, 1:n + 1], False),
                                (f, torch.randn(n, m, device="cuda").T, False)):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
            args = dict(epilogue=fn, epilogue_args=(res, 0.5))
            plan = numba_tc.explain(a, b, out=out, **args, **kw)
            if dt != torch.float32:                 # (tf32 NN runs C^T = B^T A^T: stored from registers)
                # (C stored by TMA: its rows 16-byte multiples)
                assert ("staged" in plan) == (staged and n * out.element_size() % 16 == 0), (m, n, k, plan)
            numba_tc.gemm(a, b, out=out, **args, **kw)
            r = res.double()
            want = ref + 0.5 * (torch.cat([r[:, 1:], r[:, -1:]], 1) if fn is shifted else r)
            err = float(torch.linalg.norm(out.double() - want) / torch.linalg.norm(want))
            assert err < (3e-3 if dt == torch.float32 and out_dtype == "float32" else 1e-2), (m, n, k, plan, err)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("res_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_a_16bit_epilogue_array_is_staged(res_dtype, out_dtype):
    # a bf16 or fp16 residual (a bf16 model's own) read only at [row, col]: staged where its rows
    # are 16-byte multiples (N a multiple of 8), read where it lies otherwise (N = 2052, a view
    # one element in); ragged M and K, several tiles a block, a bf16 array typed as Numba's
    # bfloat16 where it is not staged
    torch = pytest.importorskip("torch")
    f = _scaled_residual()
    rdt, odt = getattr(torch, res_dtype), getattr(torch, out_dtype)
    for m, n, k in ((4096, 4096, 1024), (3001, 2056, 776), (136, 264, 64), (1000, 2052, 520)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        wide = torch.randn(m, n + 8, device="cuda", dtype=rdt)
        for res, staged in ((torch.randn(m, n, device="cuda", dtype=rdt), n % 8 == 0), (wide[:, 1:n + 1], False)):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
            args = dict(epilogue=f, epilogue_args=(res, 0.5))
            plan = numba_tc.explain(a, b, out=out, **args)
            assert ("staged" in plan) == (staged and n * out.element_size() % 16 == 0), (m, n, k, plan)
            numba_tc.gemm(a, b, out=out, **args)
            want = a.double() @ b.double() + 0.5 * res.double()
            err = float(torch.linalg.norm(out.double() - want) / torch.linalg.norm(want))
            assert err < 1e-2, (m, n, k, plan, err)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
@pytest.mark.parametrize("c_dtype", ["bfloat16", "float32"])
def test_c_is_staged_as_an_epilogue_array_is(c_dtype):
    # beta * c with a row-major c of 16-byte rows: staged (explain says so), also where c is out
    # (accumulating in place); a view one element in, a column-major c: read where they lie;
    # ragged M and K, several tiles a block
    torch = pytest.importorskip("torch")
    cdt = getattr(torch, c_dtype)
    for m, n, k in ((4096, 4096, 1024), (3001, 2056, 776), (136, 264, 64)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = a.double() @ b.double()
        wide = torch.randn(m, n + 8, device="cuda", dtype=cdt)
        for c, staged in ((torch.randn(m, n, device="cuda", dtype=cdt), True), (wide[:, 1:n + 1], False),
                          (torch.randn(n, m, device="cuda", dtype=cdt).T, False)):
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            plan = numba_tc.explain(a, b, out=out, c=c, beta=0.5)
            assert ("staged" in plan) == staged, (m, n, k, plan)
            numba_tc.gemm(a, b, out=out, c=c, beta=0.5)
            want = ref + 0.5 * c.double()
            err = float(torch.linalg.norm(out.double() - want) / torch.linalg.norm(want))
            assert err < 1e-2, (m, n, k, plan, err)
        acc = torch.randn(m, n, device="cuda", dtype=cdt)                      # c is out: in place
        want = ref + 0.5 * acc.double()
        assert "staged" in numba_tc.explain(a, b, out=acc, c=acc, beta=0.5)
        numba_tc.gemm(a, b, out=acc, c=acc, beta=0.5)
        err = float(torch.linalg.norm(acc.double() - want) / torch.linalg.norm(want))
        assert err < 1e-2, (m, n, k, "in place", err)


@pytest.mark.skipif(not _sm90(), reason="wgmma needs an sm_90 GPU")
def test_auto_swaps_decode_products_with_their_epilogue():
    # few rows of a row-major A (more than one: one row with a k-major B is gemv's): `auto` runs
    # C^T = B^T A^T on a narrow tile, a split among them;
    # a bias, an activation and a user's epilogue reading C-shaped array at (row, col) see C's
    # element, not its transpose's; a column-major A keeps the plain tile
    torch = pytest.importorskip("torch")
    scaled_residual = _scaled_residual()
    for m, n, k in ((2, 8192, 4096), (7, 4096, 11008), (32, 8192, 2048), (17, 5120, 5120), (3, 1000, 4000)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)          # a linear layer's weight
        for b in (w.T, w.T.contiguous()):
            bias, res = torch.randn(n, device="cuda"), torch.randn(m, n, device="cuda")
            assert "swapped" in numba_tc.explain(a, b) or max(b.stride()) * 2 % 32 == 16, (m, n, k)   # (B's rows slow)
            ref = a.double() @ b.double()
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            numba_tc.gemm(a, b, out=out, bias=bias, activation="relu")
            want = torch.relu(ref + bias.double())
            assert float(torch.linalg.norm(out.double() - want) / torch.linalg.norm(want)) < 1e-2, (m, n, k)
            got = numba_tc.gemm(a, b, epilogue=scaled_residual, epilogue_args=(res, 0.5))
            want = ref + 0.5 * res.double()
            assert float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want)) < 1e-2, (m, n, k)
    a = torch.randn(64, 8, device="cuda", dtype=torch.bfloat16).T            # column-major A
    assert "swapped" not in numba_tc.explain(a, torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16))
