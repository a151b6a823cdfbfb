"""numba_tc.fp8 (issue 20): the float32 -> fp8 conversion against ml_dtypes over every fp8 value,
the midpoints between neighbours and the floats either side of them, subnormals, signed zeros,
values past the maximum, NaNs and random floats (on the host, in one simulator kernel, in a
compiled kernel on a GPU); quantize against a host reference that follows the documented rule
bit for bit (per tensor and per block, float32, float16 and bfloat16, ragged shapes, transposed
and strided views, zero blocks, +-max, tiny values, empty matrices) with dequantize(quantize(x))
within the format's rounding of x; NumPy and Numba arrays in the simulator, torch, Numba and
NumPy arrays on a GPU (a torch side stream, torch._scaled_mm taking the scales); the kernels
compiled offline for sm_90a; the errors.

The helpers here (``conversion_inputs``, ``reference``, ``check_quantize``, ...) are imported by
the simulator's subprocesses too.
"""
import itertools
import os

import ml_dtypes
import numpy as np
import pytest

from numba import cuda
from numba_tc import fp8

from conftest import SIM, run_in_simulator

pytestmark = pytest.mark.cpu

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ("float8_e4m3fn", "float8_e5m2")
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# |dequantized - x| <= REL * |x| + SUB * scale: half an ulp of the format's 3 / 2 mantissa bits, or
# half its smallest subnormal (in units of the scale)
REL = {"float8_e4m3fn": 2.0 ** -4, "float8_e5m2": 2.0 ** -3}
SUB = {"float8_e4m3fn": 2.0 ** -10, "float8_e5m2": 2.0 ** -17}
TOP = {"float8_e4m3fn": 0x7E, "float8_e5m2": 0x7B}          # the codes of +max

# ragged shapes (one row, rows and columns not multiples of the blocks) and blocks: an
# activation's rows (DeepSeek-V3), a weight's tiles, a block that divides nothing
SHAPES = [(130, 300), (1, 7), (257, 129)]
SIM_SHAPES = [(66, 150), (1, 7), (131, 65)]          # the same raggedness, a quarter of the work
BLOCKS = [None, (1, 128), (128, 128), (3, 5)]
VIEWS = ["plain", "transposed", "strided"]


# --- helpers (also run in the simulator's subprocesses) -------------------------------------------

def conversion_inputs(name: str) -> np.ndarray:
    """float32 values that pin the conversion down: every fp8 value, every midpoint between
    neighbours (ties), the floats one ulp either side of all of those, signed zeros, fp8 and
    float32 subnormals, values at and past the maximum, infinities, NaNs with several payloads,
    random bit patterns and log-uniform random values across the format's range."""
    dt = getattr(ml_dtypes, name)
    every = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
    fin = np.unique(every[np.isfinite(every)])                  # sorted, -max .. max
    mids64 = (fin[:-1].astype(np.float64) + fin[1:]) / 2
    mids = mids64.astype(np.float32)
    assert np.array_equal(mids.astype(np.float64), mids64)      # (midpoints are floats exactly)
    top = np.float32(fp8.FP8_MAX[name])
    ulp = fin[-1] - fin[-2]
    edges = np.array([0.0, -0.0, np.inf, -np.inf, top, -top, top + ulp / 2, -(top + ulp / 2), top + ulp,
                      2 * top, 3.4e38, -3.4e38, 1e-45, -1e-45, 1e-38, 1.1754942e-38, 2.0 ** -127], np.float32)
    rng = np.random.default_rng(20)
    bits = rng.integers(0, 2 ** 32, 30000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    small = rng.integers(0, 0x3D000000, 10000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    logu = (rng.choice([-1.0, 1.0], 20000) * 2.0 ** rng.uniform(-28, 18, 20000)).astype(np.float32)
    base = np.concatenate([every, fin, mids, edges, bits, small, logu])
    with np.errstate(invalid="ignore"):
        near = np.concatenate([np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))])
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFA00000],
                    np.uint32).view(np.float32)
    return np.concatenate([base, near, nans]).astype(np.float32)


def expected_bits(v: np.ndarray, name: str) -> np.ndarray:
    """ml_dtypes' conversion (round to nearest even) of v clipped to +-max: the saturating rule."""
    top = np.float32(fp8.FP8_MAX[name])
    with np.errstate(invalid="ignore"):
        return np.clip(v, -top, top).astype(getattr(ml_dtypes, name)).view(np.uint8)


def assert_bits_equal(got, want, v, what: str):
    bad = np.nonzero(np.asarray(got) != want)[0]
    assert len(bad) == 0, f"{what}: {len(bad)} of {len(v)} differ, e.g. " + ", ".join(
        f"{v[i]!r} (0x{v[i:i + 1].view(np.uint32)[0]:08x}) -> 0x{int(got[i]):02x}, want 0x{int(want[i]):02x}"
        for i in bad[:5])


def check_decoding(got: np.ndarray, name: str):
    """got[c] = fp8_to_f32(c) for c in 0..255, against ml_dtypes (NaN: NaN of the same sign)."""
    want = np.arange(256, dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(np.signbit(got[nan]), np.signbit(want[nan]))
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def make_input(shape, dtype: str, view: str = "plain", seed: int = 0) -> np.ndarray:
    """A ``shape`` array of ``dtype`` whose magnitudes differ from row to row and column to
    column (so blocks get different scales), a few exact zeros; ``view``: plain, a transposed
    (column-major) view, or a view strided both ways."""
    rng = np.random.default_rng(seed)
    big = (shape[1] * 2, shape[0] * 3) if view == "strided" else shape[::-1] if view == "transposed" else shape
    x = rng.standard_normal(big) * 10.0 ** rng.uniform(-2, 2, (big[0], 1)) * 10.0 ** rng.uniform(-1, 1, big[1])
    x[rng.random(big) < 0.02] = 0.0
    x = x.astype(DTYPES[dtype])
    if view == "transposed":
        x = x.T
    elif view == "strided":
        x = x[::2, ::3].T
    assert x.shape == tuple(shape)
    return x


def reference(x, name: str, block):
    """(values as ml_dtypes, scales) by the documented rule, in NumPy on the host."""
    xf = np.asarray(x).astype(np.float32)
    rows, cols = xf.shape
    br, bc = block if block is not None else (max(rows, 1), max(cols, 1))
    nbr, nbc = -(-rows // br), -(-cols // bc)
    top = np.float32(fp8.FP8_MAX[name])
    scales = np.ones((nbr, nbc), np.float32)
    q = np.zeros((rows, cols), np.float32)
    for i in range(nbr):
        for j in range(nbc):
            blk = xf[i * br:(i + 1) * br, j * bc:(j + 1) * bc]
            s = np.abs(blk).max(initial=np.float32(0)) / top
            scales[i, j] = s if s != 0 else np.float32(1)
            q[i * br:(i + 1) * br, j * bc:(j + 1) * bc] = np.clip(blk / scales[i, j], -top, top)
    return q.astype(getattr(ml_dtypes, name)), (scales.reshape(1) if block is None else scales)


def check_roundtrip(x, deq, scales, name: str, block):
    """dequantize(quantize(x)) within the format's rounding of x."""
    xf = np.asarray(x).astype(np.float64)
    rows, cols = xf.shape
    br, bc = block if block is not None else (max(rows, 1), max(cols, 1))
    s = np.asarray(scales, np.float64).reshape(-(-rows // br), -(-cols // bc))
    s = np.repeat(np.repeat(s, br, axis=0), bc, axis=1)[:rows, :cols]
    err = np.abs(np.asarray(deq, np.float64) - xf)
    bound = (REL[name] * np.abs(xf) + SUB[name] * s) * (1 + 2.0 ** -16)
    assert np.all(err <= bound), f"worst error {np.max(err - bound)} past the bound"


def check_results(x, values_bits, scales, name: str, block):
    """uint8 bits and float32 scales (host copies) equal the reference's bit for bit."""
    want_q, want_s = reference(x, name, block)
    assert values_bits.dtype == np.uint8 and values_bits.shape == want_q.shape
    assert scales.dtype == np.float32 and scales.shape == want_s.shape, (scales.shape, want_s.shape)
    assert np.array_equal(scales.view(np.uint32), want_s.view(np.uint32)), (scales, want_s)
    bad = np.argwhere(values_bits != want_q.view(np.uint8))
    assert len(bad) == 0, f"{len(bad)} values differ, first at {tuple(bad[0])}"


def check_quantize(x, dtype, block):
    """quantize a NumPy array: types, shapes, bits against the reference, the round trip."""
    name = fp8.fp8_name(dtype)
    q, s = fp8.quantize(x, dtype, block)
    assert isinstance(q, np.ndarray) and q.dtype == np.dtype(getattr(ml_dtypes, name)) and q.flags.c_contiguous
    assert isinstance(s, np.ndarray)
    check_results(x, q.view(np.uint8), s, name, block)
    deq = fp8.dequantize(q, s, block)
    assert deq.dtype == np.float32 and deq.shape == x.shape
    check_roundtrip(x, deq, s, name, block)
    return q, s


def numpy_cases(dtype: str, shapes, full: bool):
    """(x, fp8 dtype, block) for every shape and block (``full``: every view and both formats;
    else one view and one format each, in turn)."""
    for i, (shape, block) in enumerate(itertools.product(shapes, BLOCKS)):
        views = VIEWS if full else [VIEWS[i % 3]]
        names = ("e4m3", "e5m2") if full else [("e4m3", "e5m2")[i % 2]]
        for view, name in itertools.product(views, names):
            yield make_input(shape, dtype, view, seed=i), name, block


def special_inputs():
    """(what, x, block): zero blocks (scale 1, signed zeros kept), +-max in a block, tiny values
    (a scale of 1e-33; an amax so small its scale underflows: scale 1, values 0), one element."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((7, 9)).astype(np.float32)
    z[:4, :3] = 0.0
    z[4:, 6:] = -0.0
    yield "zero blocks", z, (4, 3)
    yield "all zeros", np.zeros((5, 3), np.float32), None
    m = rng.uniform(-1, 1, (6, 10)).astype(np.float32)
    m[0, 0], m[5, 9], m[2, 4] = 3.0, -3.0, 3.0
    yield "+-max", m, None
    yield "+-max per block", m, (3, 5)
    yield "tiny", (rng.standard_normal((5, 6)) * 1e-30).astype(np.float32), (2, 3)
    t = (rng.standard_normal((4, 4)) * 1e-44).astype(np.float32)     # amax / 448 rounds to 0
    yield "subnormal amax", t, None
    yield "one element", np.array([[-2.5]], np.float32), (1, 128)


def check_special(what, x, block):
    for name in NAMES:
        q, s = check_quantize(x, name, block)
        bits = q.view(np.uint8)
        top = TOP[name]
        if name == "float8_e4m3fn":
            assert not np.any((bits & 0x7F) == 0x7F), what                     # no NaN
        else:
            assert not np.any((bits & 0x7F) >= 0x7C), what                     # no inf or NaN
        if what == "zero blocks":
            assert s[0, 0] == 1 and s[1, 2] == 1
            assert np.all(bits[:4, :3] == 0) and np.all(bits[4:, 6:] == 0x80)
        if what == "+-max":
            assert bits[0, 0] == top and bits[2, 4] == top and bits[5, 9] == top | 0x80
        if what == "subnormal amax":
            assert s[0] == 1 and np.all((bits & 0x7F) == 0)


def sim(code: str) -> str:
    """Run ``code`` in the simulator with this module imported as T."""
    return run_in_simulator(f"import sys\nsys.path.insert(0, {HERE!r})\nimport test_fp8_quantize as T\n" + code)


# --- the conversion -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_conversion_on_the_host_matches_ml_dtypes(name):
    """The device function is plain Python on the host (register_jitable): the same code."""
    v = conversion_inputs(name)
    code = fp8.fp8_code(name)
    got = np.array([fp8.f32_to_fp8(a, code) for a in v], np.int64)
    assert_bits_equal(got, expected_bits(v, name), v, name)
    check_decoding(np.array([fp8.fp8_to_f32(c, code) for c in range(256)], np.float32), name)


def check_conversion_kernels():
    """The conversions called from Numba kernels (run by the simulator test and the GPU one):
    every input ``conversion_inputs`` makes encoded as ml_dtypes does, every code decoded.
    (``cuda`` is the module's global: the simulator swaps a kernel's globals, not closures.)"""
    @cuda.jit
    def convert(v, out, fmt):
        for i in range(cuda.grid(1), v.size, cuda.gridsize(1)):
            out[i] = fp8.f32_to_fp8(v[i], fmt)

    @cuda.jit
    def decode(out, fmt):
        for i in range(cuda.grid(1), 256, cuda.gridsize(1)):
            out[i] = fp8.fp8_to_f32(np.uint8(i), fmt)

    for name in NAMES:
        v = conversion_inputs(name)
        got = cuda.to_device(np.zeros(v.size, np.uint8))
        convert[64, 128](cuda.to_device(v), got, fp8.fp8_code(name))
        assert_bits_equal(got.copy_to_host(), expected_bits(v, name), v, name)
        dec = cuda.to_device(np.zeros(256, np.float32))
        decode[1, 128](dec, fp8.fp8_code(name))
        check_decoding(dec.copy_to_host(), name)
        print("ok", name, v.size)


@pytest.mark.sim
def test_conversion_in_a_simulator_kernel():
    assert sim("T.check_conversion_kernels()\n").count("ok") == 2


def test_fp8_names():
    for dt in ("e4m3", "e4m3fn", "float8_e4m3fn", ml_dtypes.float8_e4m3fn, np.dtype(ml_dtypes.float8_e4m3fn)):
        assert fp8.fp8_name(dt) == "float8_e4m3fn" and fp8.fp8_code(dt) == fp8.E4M3
    for dt in ("e5m2", "float8_e5m2", ml_dtypes.float8_e5m2):
        assert fp8.fp8_name(dt) == "float8_e5m2" and fp8.fp8_code(dt) == fp8.E5M2
    for dt in ("e4m3fnuz", "float8_e4m3", ml_dtypes.float8_e4m3fnuz, np.float16, "int8", None, 3, [1]):
        with pytest.raises(ValueError, match="dtype"):
            fp8.fp8_name(dt)
    try:
        import torch
    except ImportError:
        return
    assert fp8.fp8_name(torch.float8_e4m3fn) == "float8_e4m3fn"
    assert fp8.fp8_name(torch.float8_e5m2) == "float8_e5m2"
    with pytest.raises(ValueError):
        fp8.fp8_name(torch.float8_e4m3fnuz)


# --- dequantize on the host, quantize's errors -----------------------------------------------------

@pytest.mark.parametrize("block", BLOCKS)
def test_dequantize_numpy_of_the_reference(block):
    """NumPy dequantize is host arithmetic: exactly values * scale, within rounding of x."""
    for dtype, name in (("float32", "float8_e4m3fn"), ("bfloat16", "float8_e5m2")):
        x = make_input((130, 300), dtype, "transposed")
        q, s = reference(x, name, block)
        d = fp8.dequantize(q, s, block)
        assert d.dtype == np.float32 and d.shape == x.shape
        check_roundtrip(x, d, s, name, block)
        assert np.array_equal(fp8.dequantize(q.view(np.uint8), s, block, dtype=name), d)
        if block is None:
            assert np.array_equal(d, q.astype(np.float32) * s[0])


def test_errors_name_the_argument():
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="dtype 'e4m3fnuz'"):
        fp8.quantize(x, "e4m3fnuz")
    with pytest.raises(ValueError, match="dtype"):
        fp8.quantize(x, np.float16)
    for bad in (np.ones((2, 3, 4), np.float32), np.ones(5, np.float32), np.array(1.0, np.float32)):
        with pytest.raises(ValueError, match="x must be 2-D"):
            fp8.quantize(bad)
    for dt in (np.float64, np.int32, np.uint8):
        with pytest.raises(TypeError, match=f"x has dtype {np.dtype(dt).name}"):
            fp8.quantize(x.astype(dt))
    with pytest.raises(TypeError, match="unsupported operand type list"):
        fp8.quantize([[1.0]])
    for block in (128, (0, 128), (1, -2), (1,), (1, 2, 3), (1.0, 128), (True, 4), "1x128", (1, None)):
        with pytest.raises(ValueError, match="block must be None"):
            fp8.quantize(x, block=block)
    # dequantize
    q, s = reference(x, "float8_e4m3fn", None)
    with pytest.raises(ValueError, match="pass dtype="):
        fp8.dequantize(q.view(np.uint8), s)
    with pytest.raises(ValueError, match="does not match values"):
        fp8.dequantize(q, s, dtype="e5m2")
    with pytest.raises(TypeError, match="values has dtype float32"):
        fp8.dequantize(x, s)
    with pytest.raises(ValueError, match="scales has shape"):
        fp8.dequantize(q, np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"take shape \(2, 4\)"):
        fp8.dequantize(q, np.ones((2, 2), np.float32), block=(2, 1))
    with pytest.raises(TypeError, match="scales has dtype float64"):
        fp8.dequantize(q, s.astype(np.float64))
    with pytest.raises(ValueError, match="block must be None"):
        fp8.dequantize(q, s, block=4)


# --- quantize in the simulator --------------------------------------------------------------------

@pytest.mark.sim
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_quantize_numpy_in_the_simulator(dtype):
    """Every shape x block, views and formats in turn, against the reference bit for bit (and
    for float32, two at the GPU tests' full sizes)."""
    out = sim(f"""
cases = list(T.numpy_cases({dtype!r}, T.SIM_SHAPES, full=False))
if {dtype!r} == "float32":
    cases += [(T.make_input((130, 300), "float32", "transposed", 1), "e5m2", (3, 5)),
              (T.make_input((257, 129), "float32", "strided", 2), "e4m3", (1, 128))]
for x, name, block in cases:
    T.check_quantize(x, name, block)
    print("ok", x.shape, name, block)
""")
    assert out.count("ok") == len(SIM_SHAPES) * len(BLOCKS) + 2 * (dtype == "float32")


@pytest.mark.sim
def test_special_values_and_device_arrays_in_the_simulator():
    """Zero blocks, +-max, tiny values, empty matrices; Numba (simulator) arrays, bfloat16 too, and
    dequantize on them."""
    out = sim("""
import numpy as np, ml_dtypes
from numba import cuda
from numba_tc import fp8
for what, x, block in T.special_inputs():
    T.check_special(what, x, block)
    print("ok", what)
for shape, block in (((0, 5), None), ((0, 5), (2, 2)), ((3, 0), (1, 128)), ((3, 0), None)):
    q, s = fp8.quantize(np.zeros(shape, np.float32), "e5m2", block)
    want = (1,) if block is None else (-(-shape[0] // block[0]), -(-shape[1] // block[1]))
    assert q.shape == shape and q.dtype == np.dtype(ml_dtypes.float8_e5m2) and s.shape == want
    assert np.all(s == 1) and fp8.dequantize(q, s, block).shape == shape
    print("ok empty", shape, block)
for dtype, block in (("float32", (2, 4)), ("bfloat16", None), ("float16", (3, 5))):
    x = T.make_input((9, 11), dtype, "transposed", seed=3)
    d = cuda.to_device(np.asfortranarray(x))
    q, s = fp8.quantize(d, "e4m3", block)
    assert q.dtype == np.uint8 and s.dtype == np.float32
    T.check_results(x, q.copy_to_host(), s.copy_to_host(), "float8_e4m3fn", block)
    deq = fp8.dequantize(q, s, block, dtype="e4m3")
    assert deq.dtype == np.float32
    assert np.array_equal(deq.copy_to_host(), fp8.dequantize(q.copy_to_host(), s.copy_to_host(), block, "e4m3"))
    print("ok numba", dtype, block)
""")
    assert out.count("ok") == 7 + 4 + 3


@pytest.mark.sim
def test_gpu_launch_shapes_in_the_simulator():
    """The GPU's way through the amax kernel (blocks cut into pieces, several items per CUDA
    block, grid-stride loops over more work than threads), at a scale the simulator runs."""
    out = sim("""
from numba_tc import fp8
fp8.THREADS, fp8.MAX_BLOCKS, fp8.PIECE = 64, 3, 100
for i, (shape, block, view) in enumerate([((37, 50), None, "plain"), ((37, 50), (16, 16), "transposed"),
                                          ((50, 37), (1, 16), "strided"), ((37, 50), (7, 40), "plain")]):
    T.check_quantize(T.make_input(shape, "float32", view, seed=i), ("e4m3", "e5m2")[i % 2], block)
    print("ok", shape, block)
""")
    assert out.count("ok") == 4


# --- the kernels for a real GPU, compiled offline --------------------------------------------------

@pytest.mark.sass
@pytest.mark.skipif(SIM, reason="the simulator has no compiler")
def test_kernels_compile_for_sm90a():
    from numba import types
    from numba_tc import sass
    A2 = lambda t: types.Array(t, 2, "A")                      # noqa: E731 (any strides)
    A1 = lambda t: types.Array(t, 1, "C")                      # noqa: E731
    i64 = types.int64
    cubins = []
    for bf16, xt in ((False, types.float32), (False, types.float16), (True, types.int16)):
        amax_k, quant_k = fp8._kernels(bf16)
        c = sass.compile_cubin(amax_k.py_func, types.void(A2(xt), A1(types.int32), *[i64] * 9, types.boolean))
        assert c.count("ATOMS.MAX") >= 1 and c.count("REDG.E.MAX") + c.count("ATOMG.E.MAX") >= 1, c
        cubins.append(c)
        cubins.append(sass.compile_cubin(quant_k.py_func, types.void(A2(xt), A2(types.uint8), A1(types.float32),
                                                                     *[i64] * 6, types.boolean)))
    cubins.append(sass.compile_cubin(fp8._dequantize_kernel.py_func, types.void(
        A2(types.uint8), A1(types.float32), A2(types.float32), *[i64] * 6, types.boolean)))
    cubins.append(sass.compile_cubin(fp8._scales_kernel.py_func, types.void(
        A1(types.int32), A1(types.float32), i64, types.float32)))
    for c in cubins:
        assert c.local_memory_ops == 0 and c.spill_bytes == 0, c


# --- on a GPU ----------------------------------------------------------------------------------------

def _torch():
    try:
        import torch
    except ImportError:
        pytest.skip("needs torch")
    return torch


@pytest.mark.gpu
def test_conversion_in_a_gpu_kernel():
    check_conversion_kernels()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_quantize_numpy_on_a_gpu(dtype):
    for x, name, block in numpy_cases(dtype, SHAPES, full=True):
        check_quantize(x, name, block)
    for what, x, block in special_inputs():
        check_special(what, x, block)


@pytest.mark.gpu
def test_quantize_numba_arrays_on_a_gpu():
    from numba import cuda
    for (shape, block), view in itertools.product(itertools.product(SHAPES, BLOCKS), ("C", "F", "strided")):
        for dtype in ("float32", "float16"):
            x = make_input(shape, dtype)
            if view == "strided":
                big = make_input((shape[0] * 2, shape[1] * 3), dtype, seed=1)
                d = cuda.to_device(big)[::2, ::3]
                x = big[::2, ::3]
            else:
                d = cuda.to_device(np.asfortranarray(x) if view == "F" else x)
            name = "e5m2" if dtype == "float16" else "e4m3"
            q, s = fp8.quantize(d, name, block)
            assert q.dtype == np.uint8 and s.dtype == np.float32 and q.shape == x.shape
            qh, sh = q.copy_to_host(), s.copy_to_host()
            check_results(x, qh, sh, fp8.fp8_name(name), block)
            deq = fp8.dequantize(q, s, block, dtype=name)
            assert np.array_equal(deq.copy_to_host(), fp8.dequantize(qh, sh, block, dtype=name))


@pytest.mark.gpu
def test_quantize_torch_on_a_gpu():
    torch = _torch()
    tdt = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    for (shape, block), view, dtype in itertools.product(itertools.product(SHAPES, BLOCKS), VIEWS, DTYPES):
        x = make_input(shape, "float32", view, seed=7)
        t = torch.from_numpy(np.ascontiguousarray(x)).cuda().to(tdt[dtype])
        if view == "transposed":
            t = t.t().contiguous().t()
        elif view == "strided":
            big = torch.zeros((shape[0] * 2, shape[1] * 3), dtype=t.dtype, device="cuda")
            big[::2, ::3] = t
            t = big[::2, ::3]
        host = t.float().cpu().numpy()                          # (bfloat16 and float16 widen exactly)
        for name, tname in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
            q, s = fp8.quantize(t, tname if view == "plain" else name, block)
            assert q.dtype == tname and q.device == t.device and q.is_contiguous()
            assert s.dtype == torch.float32 and s.device == t.device
            assert tuple(s.shape) == ((1,) if block is None else (-(-shape[0] // block[0]), -(-shape[1] // block[1])))
            check_results(host, q.view(torch.uint8).cpu().numpy(), s.cpu().numpy(), fp8.fp8_name(name), block)
            deq = fp8.dequantize(q, s, block)
            assert deq.dtype == torch.float32 and deq.device == t.device
            check_roundtrip(host, deq.cpu().numpy(), s.cpu().numpy(), fp8.fp8_name(name), block)


@pytest.mark.gpu
def test_quantize_torch_on_a_side_stream():
    """Kernels run on torch's current stream: x is written there behind a ~50 ms sleep, and
    quantize reads it there without a synchronization (on another stream it would read zeros)."""
    torch = _torch()
    src = torch.from_numpy(make_input((257, 129), "float32")).cuda()
    x = torch.zeros_like(src)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        torch.cuda._sleep(100_000_000)
        x.copy_(src)
        q, sc = fp8.quantize(x, "e4m3", (1, 128))
        deq = fp8.dequantize(q, sc, (1, 128))
    s.synchronize()
    host = src.cpu().numpy()
    check_results(host, q.view(torch.uint8).cpu().numpy(), sc.cpu().numpy(), "float8_e4m3fn", (1, 128))
    check_roundtrip(host, deq.cpu().numpy(), sc.cpu().numpy(), "float8_e4m3fn", (1, 128))


@pytest.mark.gpu
def test_scales_are_what_torch_scaled_mm_takes():
    """Per-tensor scales of shape (1,) drive torch._scaled_mm to the product of the dequantized
    operands (b quantized as b^T, so that its values are column-major, as _scaled_mm wants)."""
    torch = _torch()
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("torch._scaled_mm needs an sm_89+ GPU")
    a = torch.from_numpy(make_input((64, 96), "float32", seed=1)).cuda()
    b = torch.from_numpy(make_input((96, 48), "float32", seed=2)).cuda()
    qa, sa = fp8.quantize(a)
    qbt, sb = fp8.quantize(b.t())
    out = torch._scaled_mm(qa, qbt.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    out = out[0] if isinstance(out, tuple) else out
    want = fp8.dequantize(qa, sa).double() @ fp8.dequantize(qbt, sb).double().t()
    assert torch.allclose(out.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
