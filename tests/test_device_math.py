"""Device code that runs only on the GPU, checked on the CPU: its math, evaluated as the Python
function it is with NumPy stand-ins for the intrinsics (``tanh.approx``, libdevice's fast
exponential and division), against float64; and the layout facts of tf32 (4-byte) operands beside
16-bit and fp8 ones, against the PTX ISA's tables and the CUDA driver's enums.

Sources:
* PTX ISA 9.7.15.5.1.2 "Shared Memory Matrix Layout", Table "Various combinations of swizzling
  mode, leading dimension and swizzle-atom layout": a 128B-swizzled MN-major atom is 8 x 8 128-bit
  elements (8 rows of K, 8 16-byte chunks of MN), multiplied along the leading dimension by
  128 / sizeof_bits(element) ("(8*(128/32))x8 = 32x8 for tf32"); the 128B swizzle puts 16-byte
  chunk c of row r at chunk c ^ (r % 8) (9.7.15.5.1.2's figures, CUTLASS's Swizzle<3,4,3>); the
  leading byte offset of an MN-major operand is the stride between atoms along MN.
* CUDA driver API, ``CUtensorMapDataType`` and ``CUtensorMapSwizzle`` (cuda.bindings' enums).
"""
import math
import types

import numpy as np
import pytest

from numba_tc import epilogue, layout, tensormap

pytestmark = pytest.mark.cpu


# ---- the epilogue's activations, as the GPU computes them ---------------------------------------

def _exp32(x):
    with np.errstate(over="ignore"):          # (e^-x of a very negative x: inf, as ex2.approx gives)
        return np.exp(np.float32(x)).astype(np.float32)


# the intrinsics and libdevice functions the device code calls, as the exact functions they
# approximate (each within a few ulps: far below the tolerances here), in float32
STAND_INS = {
    "tanh_approx": lambda x: np.tanh(np.float32(x)).astype(np.float32),
    "libdevice": types.SimpleNamespace(fast_expf=lambda x: _exp32(x),
                                       fast_fdividef=lambda x, y: np.float32(np.float32(x) / np.float32(y))),
    "float32": np.float32,
}
_ERF = np.vectorize(math.erf)


def host(fn, **extra):
    """The Python function of device function ``fn`` (a Numba dispatcher), its globals' intrinsics
    replaced by ``STAND_INS`` and the device functions it calls by their host versions: the GPU
    branch of the code (``SIMULATOR`` False), on NumPy float32 values."""
    py = fn.py_func
    g = dict(py.__globals__)
    for name in py.__code__.co_names:
        v = g.get(name)
        if name in STAND_INS:
            g[name] = STAND_INS[name]
        elif hasattr(v, "py_func"):
            g[name] = host(v)
    g.update(SIMULATOR=False, math=types.SimpleNamespace(erf=_ERF, exp=np.exp), **extra)
    return types.FunctionType(py.__code__, g, py.__name__, py.__defaults__, py.__closure__)


REFERENCE = {     # float64, as ``epilogue.ACTIVATIONS`` spells them (torch's definitions)
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + _ERF(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-x)),
}
X = np.concatenate([np.linspace(-12, 12, 2001), [-80.0, -30.0, 30.0, 80.0, 0.0]]).astype(np.float32)


def _close(got, x, name, rtol=1e-5):
    want = REFERENCE[name](x.astype(np.float64))
    got = np.asarray(got, np.float64)
    bad = np.abs(got - want) > rtol * np.abs(want) + 1e-6
    assert not bad.any(), (name, x[bad][:5], got[bad][:5], want[bad][:5])


@pytest.mark.parametrize("name", list(epilogue.ACTIVATIONS))
def test_each_activation_on_the_gpu_computes_its_definition(name):
    f = host(epilogue._ACT[name])
    _close(np.array([f(np.float32(x)) for x in X]), X, name)


@pytest.mark.parametrize("name", ["gelu_tanh", "silu"])
def test_the_16_bit_fast_activations_compute_their_definition(name):
    """The tanh.approx forms (one MUFU an element) that a 16-bit or fp8 product's epilogue uses
    (``Epilogue.fast``): x/2 (1 + tanh u), with tanh.approx exact here (its own error, about
    2^-11 relative, is below a 16-bit output's rounding: test_gpu_epilogue holds the GPU's)."""
    f = host(epilogue._ACT_FAST[name])
    _close(np.array([f(np.float32(x)) for x in X]), X, name)


def test_make_picks_the_fast_forms_for_16_bit_products_only():
    for name in epilogue.ACTIVATIONS:
        for fast in (False, True):
            apply = epilogue.make(epilogue.Epilogue(activation=name, fast=fast))
            act = apply.py_func.__globals__["ACT"]
            want = epilogue._ACT_FAST.get(name) if fast else None
            assert act is (want or epilogue._ACT[name]), (name, fast)


# ---- tf32 (4-byte), 16-bit and fp8 operand layouts ----------------------------------------------

@pytest.mark.parametrize("itemsize", [4, 2, 1])
def test_mn_major_tiles_are_the_isas_128b_swizzle_atoms(itemsize):
    """``layout.mn_major_offset`` against the ISA's MN-major 128B-swizzle atom for each element
    size: T = 128 / sizeof_bits elements a 16-byte chunk, an atom 8T (MN) x 8 (K) in 1024 bytes,
    row r (K) 128 bytes after row r - 1, chunk c at c ^ (r % 8); a K slice's atoms (its 128 /
    itemsize rows, 8 an atom) one after another, and the next 8T of MN (the next TMA box: the
    operand's leading byte offset) after the whole slice."""
    T = 128 // (8 * itemsize)                  # elements per 128-bit unit
    atom_mn = 8 * T                            # Table: 8x8 128-bit elements, x T along MN
    slice_k = 128 // itemsize                  # K of a 128-byte slice (``WgmmaConfig.k_slice``)
    lbo = slice_k * 128                        # bytes from one atom column (8T of MN) to the next
    seen = set()
    for mn in range(3 * atom_mn):
        for k in range(slice_k):
            r, chunk, e = k % 8, (mn % atom_mn) // T, mn % T
            want = (mn // atom_mn) * lbo + (k // 8) * 1024 + r * 128 + (chunk ^ r) * 16 + e * itemsize
            assert layout.mn_major_offset(mn, k, itemsize) == want, (mn, k)
            seen.add(want)
    assert len(seen) == 3 * atom_mn * slice_k            # (one byte offset per element)
    assert {4: 32, 2: 64, 1: 128}[itemsize] == atom_mn and (itemsize != 2 or lbo == layout.BOX_BYTES)


def test_element_sizes_and_k_slices():
    """4 bytes for fp32 and tf32, 2 for 16-bit, 1 for fp8; a 128-byte K slice is 32 tf32, 64
    16-bit, 128 fp8 elements; mma.sync's k8 for tf32, k16 for 16-bit (PTX ISA 9.7.14.5)."""
    assert layout.ITEMSIZE == {"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
                               "float8_e5m2": 1}
    assert [layout.mma_shape(s) for s in (4, 2)] == [(16, 8, 8), (16, 8, 16)]
    assert [layout.elems_per_chunk(s) for s in (4, 2, 1)] == [4, 8, 16]
    assert [layout.elems_per_reg(s) for s in (4, 2)] == [1, 2]
    assert layout.compute_dtype("float32") == "tf32" and layout.compute_dtype("bfloat16") == "bfloat16"


def test_tensor_map_enums_are_the_drivers():
    """The data type a map loads with (tf32: TFLOAT32, which rounds each float32 to tf32 as TMA
    reads it; FLOAT32 would leave wgmma to truncate), the swizzle and L2 promotion modes, as
    cuda.bindings' CUtensorMap* enums name them; fp8 as bytes."""
    d = pytest.importorskip("cuda.bindings.driver")
    T = d.CUtensorMapDataType
    assert tensormap._DTYPES == {"float16": int(T.CU_TENSOR_MAP_DATA_TYPE_FLOAT16),
                                 "bfloat16": int(T.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16),
                                 "float32": int(T.CU_TENSOR_MAP_DATA_TYPE_FLOAT32),
                                 "tf32": int(T.CU_TENSOR_MAP_DATA_TYPE_TFLOAT32),
                                 "float8_e4m3fn": int(T.CU_TENSOR_MAP_DATA_TYPE_UINT8),
                                 "float8_e5m2": int(T.CU_TENSOR_MAP_DATA_TYPE_UINT8)}
    S = d.CUtensorMapSwizzle
    assert tensormap._SWIZZLE == {0: int(S.CU_TENSOR_MAP_SWIZZLE_NONE), 32: int(S.CU_TENSOR_MAP_SWIZZLE_32B),
                                  64: int(S.CU_TENSOR_MAP_SWIZZLE_64B), 128: int(S.CU_TENSOR_MAP_SWIZZLE_128B)}
    assert tensormap._L2_PROMOTION_256B == int(d.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B)


@pytest.mark.parametrize("dtype, cols", [("tf32", 32), ("float32", 32), ("bfloat16", 64), ("float8_e4m3fn", 128)])
def test_a_128b_swizzled_box_row_is_128_bytes_of_any_element(dtype, cols):
    """cuTensorMapEncodeTiled: with the 128B swizzle a box row is at most 128 bytes (32 tf32, 64
    16-bit, 128 fp8 elements); TMA's rows 16-byte multiples, at 16-byte aligned addresses."""
    assert tensormap._check(1 << 20, dtype, cols, cols, 64, 128) == layout.ITEMSIZE[dtype]
    with pytest.raises(ValueError, match="a 128B-swizzled box row is at most 128 bytes"):
        tensormap._check(1 << 20, dtype, 2 * cols, cols + 1, 64, 128)
    item = layout.ITEMSIZE[dtype]
    assert tensormap.tma_requirements(1 << 20, 16 // item, item) is None
    assert "not a multiple of 16" in tensormap.tma_requirements(1 << 20, 16 // item + 1, item) or item == 1
