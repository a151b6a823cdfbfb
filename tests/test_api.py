"""API checks that need no GPU: every bad input gets a clear exception before any kernel runs."""
import numpy as np
import pytest

import numba_tc
from numba_tc import api, arrays, registry
from numba_tc.config import Variant

from conftest import HAS_GPU, SIM
pytestmark = pytest.mark.cpu


def f32(*shape, order="C"):
    return np.asarray(np.random.default_rng(0).standard_normal(shape), dtype=np.float32, order=order)


def test_variants_registry_lists_the_simt_ladder_in_order():
    names = [v.name for v in numba_tc.variants(ladder="simt")]
    assert names == ["naive", "coalesced", "smem", "blocktile1d", "blocktile2d", "vectorized", "warptile"]
    for v in numba_tc.variants():
        assert v.note and v.dtypes and v.ladder in ("simt", "mma", "wgmma", "rows")
        assert v.name in v.describe()
    assert numba_tc.variants(dtype="float16") == [] or all("float16" in v.dtypes for v in numba_tc.variants(dtype="float16"))


def test_register_rejects_taken_names():
    v = numba_tc.get_variant("naive")
    with pytest.raises(ValueError, match="taken"):
        numba_tc.register(v)
    with pytest.raises(ValueError, match="taken"):
        numba_tc.register(Variant("auto", "simt", 9, ("float32",), (3, 5), "x", plan=None))


@pytest.mark.parametrize("a, b, exc, words", [
    (f32(4, 5), f32(6, 7), ValueError, "inner dimensions differ"),
    (f32(4), f32(4, 3), ValueError, "must be 2-D"),
    (f32(2, 2, 4, 5), f32(5, 3), ValueError, "must be 2-D or 3-D"),
    (f32(3, 4, 5), f32(2, 5, 3), ValueError, "do not broadcast"),
    (f32(4, 5), f32(5, 3).astype(np.float16), TypeError, "one dtype"),
    (f32(4, 5).astype(np.float64), f32(5, 3).astype(np.float64), TypeError, "not supported"),
    (f32(4, 5).astype(np.int32), f32(5, 3).astype(np.int32), TypeError, "not supported"),
    ([[1.0]], [[1.0]], TypeError, "unsupported operand type"),
])
def test_bad_inputs(a, b, exc, words):
    with pytest.raises(exc, match=words):
        numba_tc.gemm(a, b, variant="naive")


def test_unknown_variant_lists_the_valid_ones():
    with pytest.raises(ValueError, match="valid variants: auto, naive, coalesced"):
        numba_tc.gemm(f32(4, 5), f32(5, 3), variant="fastest")


def test_out_checks():
    with pytest.raises(ValueError, match="out has shape"):
        numba_tc.gemm(f32(4, 5), f32(5, 3), variant="naive", out=np.empty((3, 4), np.float32))
    with pytest.raises(TypeError, match="out_dtype"):
        numba_tc.gemm(f32(4, 5), f32(5, 3), variant="naive", out=np.empty((4, 3), np.float32),
                      out_dtype="float16")


@pytest.mark.skipif(HAS_GPU or SIM, reason="only meaningful without a GPU")
def test_no_gpu_is_a_clear_error():
    with pytest.raises(numba_tc.NoGPUError, match="no CUDA GPU"):
        numba_tc.gemm(f32(4, 5), f32(5, 3), variant="naive")


def test_candidates_check_dtype_and_capability():
    with pytest.raises(TypeError, match="takes float32, not float16"):
        registry.candidates("warptile", "float16", "float16", (9, 0))
    old = Variant("needs_sm100", "simt", 99, ("float32",), (10, 0), "test only", plan=None)
    with pytest.raises(numba_tc.UnsupportedDeviceError, match="10.0"):
        registry.candidates(old, "float32", "float32", (9, 0))
    assert registry.candidates("auto", "float32", "float32", (9, 0))[0].name == "warptile"
    with pytest.raises(TypeError, match="writes float32, not float16"):
        registry.candidates("warptile", "float32", "float16", (9, 0))


@pytest.mark.skipif(SIM, reason="the simulator runs only the SIMT ladder")
def test_wgmma_is_sm90a_only():
    """wgmma exists on sm_90a alone: "auto" picks the Hopper ladder on 9.0, mma.sync on 8.x and
    10.x, and naming a Hopper rung elsewhere is a clear error."""
    def tiles(cc):                      # the first tile ladder (before it: the few-rows rung)
        return [v.ladder for v in registry.candidates("auto", "bfloat16", "bfloat16", cc) if v.ladder != "rows"][0]
    assert tiles((9, 0)) == "wgmma"
    for cc in ((8, 0), (10, 0)):
        assert tiles(cc) == "mma"
    with pytest.raises(numba_tc.UnsupportedDeviceError, match="runs only on compute capability 9.0"):
        registry.candidates("wgmma_tma", "float16", "float16", (10, 0))
    with pytest.raises(numba_tc.UnsupportedDeviceError, match="needs compute capability 9.0"):
        registry.candidates("wgmma_tma", "float16", "float16", (8, 6))


@pytest.mark.skipif(SIM, reason="the simulator runs only the SIMT ladder")
@pytest.mark.parametrize("cc", [(8, 0), (9, 0)])
def test_auto_gives_a_few_rows_to_gemv_and_more_to_the_tile_ladders(cc):
    """Up to ``gemv.AUTO_ROWS`` rows of A (of C^T for a column-major C: its columns) ``auto``
    takes ``gemv``; from one row more, a tile ladder. Named, ``gemv`` takes any number of rows."""
    from numba_tc import gemv
    cands = registry.candidates("auto", "bfloat16", "bfloat16", cc)
    b = arrays.Matrix(None, 768, 2304, 2304, False, "bfloat16", 1024)
    for m, want in ((1, "gemv"), (gemv.AUTO_ROWS, "gemv"), (gemv.AUTO_ROWS + 1, "hopper" if cc == (9, 0) else "mma_tuned")):
        a = arrays.Matrix(None, m, 768, 768, False, "bfloat16", 1024)
        c = arrays.Matrix(None, m, 2304, 2304, False, "bfloat16", 1024)
        assert registry.pick(cands, a, b, c, named=False).name == want, m
    assert registry.pick([numba_tc.get_variant("gemv")], c, b.transposed(), c, named=True).name == "gemv"


@pytest.mark.skipif(SIM, reason="the simulator runs only the SIMT ladder")
def test_auto_gives_one_row_to_gemv_only_below_a_large_n_major_b():
    """One row with an n-major B goes to ``gemv`` below ``gemv.AUTO_NMAJOR`` elements of B (GPT-2's
    layers) and to ``hopper`` from there (its kernel loses there: gemv_ab_wide_h100.log); with a
    k-major B, to ``gemv`` at any size."""
    from numba_tc import gemv
    cands = registry.candidates("auto", "bfloat16", "bfloat16", (9, 0))
    for k, n, want_n in ((768, 3072, "gemv"), (4096, 4095, "gemv"), (4096, 4096, "hopper"), (8192, 8192, "hopper")):
        assert (k * n < gemv.AUTO_NMAJOR) == (want_n == "gemv")
        a = arrays.Matrix(None, 1, k, k, False, "bfloat16", 1024)
        c = arrays.Matrix(None, 1, n, n, False, "bfloat16", 1024)
        b_n = arrays.Matrix(None, k, n, n, False, "bfloat16", 1024)
        b_k = arrays.Matrix(None, k, n, k, True, "bfloat16", 1024)
        assert registry.pick(cands, a, b_n, c, named=False).name == want_n, (k, n)
        assert registry.pick(cands, a, b_k, c, named=False).name == "gemv", (k, n)


@pytest.mark.skipif(SIM, reason="the simulator runs only the SIMT ladder")
def test_auto_takes_operands_tma_cannot_read_to_hopper():
    """Rows that are not 16-byte aligned cannot be read by TMA: "auto"'s choice, ``hopper``,
    copies them to a pitch it can; a named lower Hopper rung says why it cannot run."""
    ok = arrays.Matrix(None, 64, 64, 64, False, "bfloat16", 1024)
    odd = arrays.Matrix(None, 64, 63, 63, False, "bfloat16", 1024)      # 126-byte rows
    cands = registry.candidates("auto", "bfloat16", "bfloat16", (9, 0))
    assert registry.pick(cands, ok, ok, ok, named=False).name == "hopper"
    assert registry.pick(cands, odd, ok, ok, named=False).name == "hopper"
    with pytest.raises(ValueError, match="operand a cannot be read by TMA: its rows are 126 bytes apart"):
        registry.pick(registry.candidates("wgmma_ws", "bfloat16", "bfloat16", (9, 0)), odd, ok, ok, named=True)


@pytest.mark.parametrize("shape, strides, expect", [
    ((4, 5), (5, 1), (False, 5)),          # C-contiguous
    ((4, 5), (1, 4), (True, 4)),           # F-contiguous (a transposed view)
    ((4, 5), (8, 1), (False, 8)),          # a column slice of a wider matrix
    ((4, 5), (1, 6), (True, 6)),
    ((1, 5), (99, 1), (False, 5)),         # single row: its stride is irrelevant
    ((4, 1), (3, 7), (False, 3)),          # single column
    ((1, 1), (0, 0), (False, 1)),
])
def test_layout_from_strides(shape, strides, expect):
    assert arrays.layout_of(shape, strides, "x") == expect


@pytest.mark.parametrize("shape, strides", [((4, 5), (10, 2)), ((4, 5), (2, 1)), ((4, 5), (-5, 1))])
def test_layouts_that_cannot_be_handled(shape, strides):
    with pytest.raises(ValueError, match="contiguous"):
        arrays.layout_of(shape, strides, "x")


def test_matrix_transpose_and_alignment():
    m = arrays.Matrix(None, 3, 5, 8, False, "float32", 256)
    t = m.transposed()
    assert (t.rows, t.cols, t.ld, t.trans) == (5, 3, 8, True)
    assert m.aligned16
    assert not arrays.Matrix(None, 3, 5, 5, False, "float32", 256).aligned16   # 20-byte rows
    assert not arrays.Matrix(None, 3, 5, 8, False, "float32", 260).aligned16   # base off by 4
    assert arrays.Matrix(None, 3, 5, 8, False, "float16", 256).aligned16


def test_dtype_names():
    assert arrays.dtype_name(np.float32) == "float32"
    assert arrays.dtype_name("torch.float16") == "float16"
    assert arrays.dtype_name("torch.bfloat16") == "bfloat16"


def test_overlap_detection():
    a = arrays.Matrix(None, 10, 10, 10, False, "float32", 1000)
    assert a.extent == 100 and a.transposed().extent == 100
    assert a.overlaps(arrays.Matrix(None, 1, 10, 10, False, "float32", 1396))      # last row
    assert not a.overlaps(arrays.Matrix(None, 1, 10, 10, False, "float32", 1400))  # just past
    assert not a.overlaps(arrays.Matrix(None, 0, 0, 1, False, "float32", 1000))
    assert arrays.Matrix(None, 3, 4, 7, True, "float32", 0).extent == 3 * 7 + 3   # column-major


@pytest.mark.skipif(SIM, reason="under the simulator the flat view is a NumPy view, made at once")
def test_operands_get_no_numba_array_until_a_kernel_needs_one():
    class Foreign:                 # a CuPy-like array: only its interface is read
        __cuda_array_interface__ = {"shape": (6, 4), "strides": (2, 12), "typestr": "<f2",
                                    "data": (4096, False), "version": 3}
    m = arrays.as_matrix(Foreign(), "a")
    assert (m.rows, m.cols, m.ld, m.trans, m.dtype, m.ptr) == (6, 4, 6, True, "float16", 4096)
    assert m.data is None and m.extent == 24
