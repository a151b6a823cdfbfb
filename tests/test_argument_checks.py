"""Every argument check of the public calls (``api``, ``epilogue_args``, ``arrays``, ``batch``) has
a test that fails without it: here, on the CPU, the checks no other test reaches. GPU arrays are
stood in for by ``Dev``, an object with ``__cuda_array_interface__`` (a CuPy array as numba_tc reads
one) and no memory, and the driver by ``fake_gpu`` (an H100's answers; plans are made, launches
are dropped), so a call on them goes through the GPU path up to its launches.

Checks tested elsewhere: the simulator's (tests/test_simulator_epilogue.py, test_simulator_batch.py,
test_simulator.py: the NumPy path's, which needs the simulator or a GPU past its first checks);
test_api.py (shapes, dtypes, variants, capability); test_hopper.py, test_config.py (configurations,
TMA). Not reachable from the CPU: a torch tensor on the CPU (test_torch_cpu.py, with torch), an
epilogue function that does not compile (test_gpu_epilogue.py); ``registry.pick``'s last raise (every
ladder has a variant that takes any operands)."""
import contextlib
import types

import ml_dtypes
import numpy as np
import pytest
from numba import cuda

import numba_tc
from numba_tc import api, arrays, calls, driver, plan, registry, runtime, simt
from numba_tc import epilogue_args as eargs

pytestmark = pytest.mark.cpu

F8 = np.dtype(ml_dtypes.float8_e4m3fn)


class Dev:
    """A device array as numba_tc sees one: shape, element strides, dtype, address, device (its
    ``device.id``, as CuPy's), and no memory."""

    def __init__(self, shape, dtype=np.float32, strides=None, ptr=1 << 32, device=0):
        self.shape, self.dtype, self.ptr = tuple(shape), np.dtype(dtype), ptr
        if strides is None:
            strides = tuple(int(np.prod(self.shape[i + 1:], dtype=np.int64)) for i in range(len(self.shape)))
        self.strides = tuple(strides)
        self.device = types.SimpleNamespace(id=device)

    @property
    def __cuda_array_interface__(self):
        # (ml_dtypes' types have no type string: the dtype itself, which np.dtype reads as well)
        return {"shape": self.shape, "typestr": self.dtype if self.dtype.kind == "V" else self.dtype.str,
                "data": (self.ptr, False), "version": 3,
                "strides": tuple(s * self.dtype.itemsize for s in self.strides)}

    @property
    def T(self):
        return Dev(self.shape[::-1], self.dtype, self.strides[::-1], self.ptr, self.device.id)

    def fill(self, value):           # (the zeros of a product with K == 0)
        pass

    def __getitem__(self, i):         # (a batch's first matrix)
        assert i == 0 and len(self.shape) == 3
        return Dev(self.shape[1:], self.dtype, self.strides[1:], self.ptr, self.device.id)


@pytest.fixture
def fake_gpu(monkeypatch):
    """An H100 that runs nothing: capability 9.0, 132 SMs, kernels 'loaded' without a compile,
    streams 0, launches dropped; the call cache emptied before and after."""
    monkeypatch.setattr(driver, "load", lambda kernel, dev: types.SimpleNamespace(kernel=kernel, device=dev,
                                                                                  max_smem=232448 - 1024))
    monkeypatch.setattr(driver, "sm_count", lambda dev: 132)
    monkeypatch.setattr(driver, "occupancy", lambda fn, block, smem=0: 1)
    monkeypatch.setattr(driver, "max_active_clusters", lambda fn, block, smem, cluster: 132 // cluster)
    monkeypatch.setattr(driver, "capability", lambda dev: (9, 0))
    monkeypatch.setattr(driver, "smem_optin", lambda dev: 232448)
    monkeypatch.setattr(driver, "device_count", lambda: 2)
    monkeypatch.setattr(driver, "device_name", lambda dev: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(driver, "on_device", lambda dev: contextlib.nullcontext())
    monkeypatch.setattr(runtime, "current_stream", lambda kind, dev: 0)
    monkeypatch.setattr(plan.Plan, "run", lambda self, values, stream: None)
    monkeypatch.setattr(arrays, "new_like", lambda kind, like, rows, cols, dtype, *a, **kw: Dev((rows, cols), arrays.np_dtype(dtype), ptr=9 << 32))
    calls._CALLS.clear()
    yield
    calls._CALLS.clear()


def f32(*shape, order="C"):
    return np.asarray(np.random.default_rng(0).standard_normal(shape), dtype=np.float32, order=order)


def raises(exc, words, fn, *args, **kw):
    with pytest.raises(exc) as e:
        fn(*args, **kw)
    assert words in str(e.value), (words, str(e.value))


# ---- api: variants and candidates ---------------------------------------------------------------

def test_variant_from_takes_configurations_only():
    raises(TypeError, "splits applies to a WgmmaConfig", api.variant_from, simt.RUNG3, splits=2)
    raises(TypeError, "config must be a SimtConfig, MmaConfig or WgmmaConfig, got str", api.variant_from, "smem")
    raises(TypeError, "got tuple", api.variant_from, (simt.RUNG3,))


def test_auto_with_no_variant_for_the_gpu_says_why():
    raises(numba_tc.UnsupportedDeviceError, "fp8 products run on Hopper's fp8 wgmma", registry.candidates, "auto",
           "float8_e4m3fn", "bfloat16", (8, 9))
    raises(TypeError, "no variant takes dtype float16 with float16 output on a GPU of compute capability (7, 5)",
           registry.candidates, "auto", "float16", "float16", (7, 5))


def test_a_variant_that_is_not_a_name_nor_a_variant():
    # (an output array passed where the variant goes)
    raises(TypeError, "variant must be a variant name or a Variant, got ndarray", numba_tc.gemm, f32(4, 5), f32(5, 3),
           np.empty((4, 3), np.float32))


# ---- api: operands --------------------------------------------------------------------------------

def test_operands_of_two_kinds_and_out_of_another():
    raises(TypeError, "a and b must be the same kind of array, got numpy and cuda", numba_tc.gemm, f32(4, 5), Dev((5, 3)))
    raises(TypeError, "out must be a numpy array like a and b, got cuda", numba_tc.gemm, f32(4, 5), f32(5, 3), "naive",
           out=Dev((4, 3)))


def test_out_dtypes_the_inputs_cannot_produce():
    raises(TypeError, "out has dtype float16, but the result of float32 inputs is float32", numba_tc.gemm, f32(4, 5),
           f32(5, 3), "naive", out=np.empty((4, 3), np.float16))
    raises(TypeError, "out_dtype bfloat16 for float32 inputs", numba_tc.gemm, f32(4, 5), f32(5, 3), "naive",
           out_dtype="bfloat16")


def test_a_cast_reads_float32_as_16_bits_only():
    raises(TypeError, "a_cast reads a float32 a as b's 16-bit type, not float16 as float16", calls._Problem,
           f32(4, 5).astype(np.float16), f32(5, 3).astype(np.float16), "auto", None, None, False, a_cast=True)
    raises(TypeError, "not float32 as float32", calls._Problem, f32(4, 5), f32(5, 3), "auto", None, None, False, a_cast=True)


def test_explain_plans_numpy_arrays_on_a_gpu_only():
    raises(numba_tc.NoGPUError, "no CUDA GPU", numba_tc.explain, f32(4, 5), f32(5, 3))


def test_batched_fp8_scales_are_refused():
    raises(ValueError, "batched fp8 products are not supported yet", numba_tc.gemm, f32(2, 4, 5), f32(5, 3),
           scale_a=np.ones(1, np.float32), scale_b=np.ones(1, np.float32))


def test_operands_off_the_gpu_or_on_two(fake_gpu):
    assert numba_tc.gemm(Dev((64, 64), np.float16), Dev((64, 64), np.float16)).shape == (64, 64)   # (the fake runs)
    raises(TypeError, "a is not on a CUDA device", numba_tc.gemm, Dev((8, 8), device=-1), Dev((8, 8), device=-1))
    raises(ValueError, "a is on device 0 but b is on device 1", numba_tc.gemm, Dev((8, 8)), Dev((8, 8), device=1))
    raises(ValueError, "a is on device 0 but out is on device 1", numba_tc.gemm, Dev((8, 8)), Dev((8, 8)),
           out=Dev((8, 8), device=1))


def test_out_overlapping_an_input_on_the_gpu(fake_gpu):
    a, b = Dev((64, 64)), Dev((64, 64), ptr=2 << 32)
    raises(ValueError, "out overlaps a or b", numba_tc.gemm, a, b, "warptile", out=Dev((64, 64), ptr=(1 << 32) + 256))
    # a call with the same facts is cached: the check of a repeated call is the cached spans'
    numba_tc.gemm(a, b, "warptile", out=Dev((64, 64), ptr=3 << 32))
    raises(ValueError, "out overlaps a or b", numba_tc.gemm, a, b, "warptile", out=Dev((64, 64), ptr=(2 << 32) + 4096))


def test_an_empty_product_with_an_epilogue_on_the_gpu(fake_gpu):
    raises(ValueError, "K == 0 with an epilogue", numba_tc.gemm, Dev((8, 0)), Dev((0, 8)), "warptile",
           bias=Dev((8,), ptr=5 << 32))
    assert numba_tc.gemm(Dev((8, 0)), Dev((0, 8)), "warptile") is not None     # (zeros, no epilogue)


def test_numpy_operands_while_a_graph_is_captured(fake_gpu, monkeypatch):
    monkeypatch.setattr(calls, "default_device", lambda: 0)
    monkeypatch.setattr(runtime, "capturing", lambda stream: True)
    raises(numba_tc.CaptureError, "NumPy operands are copied to the GPU and back", numba_tc.gemm, f32(4, 5), f32(5, 3),
           "naive", stream=7)


def test_block_scales_need_a_row_major_out(fake_gpu):
    m, n, k = 256, 256, 256
    a, b = Dev((m, k), F8), Dev((n, k), F8, ptr=2 << 32).T
    sa, sb = Dev((m, 2), ptr=5 << 32), Dev((2, 2), ptr=6 << 32)
    out = Dev((m, n), ml_dtypes.bfloat16, ptr=7 << 32)
    numba_tc.gemm(a, b, out=out, scale_a=sa, scale_b=sb)          # (row-major: planned)
    raises(ValueError, "block-wise scales need a row-major out", numba_tc.gemm, a, b, out=Dev((n, m), ml_dtypes.bfloat16, ptr=7 << 32).T,
           scale_a=sa, scale_b=sb)


# ---- epilogue_args.bind ----------------------------------------------------------------------------

def bind(*, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, epilogue=None, epilogue_args=(), scales=None,
         dtype="float32", out="float32", kind="cuda", device=0, m=8, n=6, k=256):
    return eargs.bind(kind, m, n, dtype, out, device, c, alpha, beta, bias, activation, epilogue,
                              epilogue_args, scales, k=k)


@cuda.jit(device=True)
def _plus(acc, row, col, x):
    return acc + x


def test_epilogue_args_without_a_function_beside_other_terms():
    raises(ValueError, "epilogue_args were given without an epilogue function", bind, bias=Dev((6,)),
           epilogue_args=(1.0,))


def test_epilogue_arrays_of_another_kind_or_device():
    raises(TypeError, "c must be a cuda array like a and b, got numpy", bind, c=f32(8, 6), beta=1.0)
    raises(TypeError, "bias is not on a CUDA device: move it to device 0", bind, bias=Dev((6,), device=-1))
    raises(ValueError, "bias is on device 1 but a and b are on device 0", bind, bias=Dev((6,), device=1))
    raises(ValueError, "epilogue_args[0] is on device 1", bind, epilogue=_plus, epilogue_args=(Dev((8, 6), device=1),))


def test_c_must_be_a_matrix_of_an_allowed_dtype():
    raises(ValueError, "c must be 2-D, got shape (48,)", bind, c=Dev((48,)), beta=1.0)
    raises(TypeError, "c has dtype float16; it must be float32", bind, c=Dev((8, 6), np.float16), beta=1.0)
    assert bind(c=Dev((8, 6), np.float16), beta=1.0, dtype="float16", out="float16").spec.c[0] == "float16"


def test_bias_must_be_contiguous():
    raises(ValueError, "bias must be contiguous, got stride 2", bind, bias=Dev((6,), strides=(2,)))
    assert bind(bias=Dev((1,), strides=(2,)), n=1).spec.bias == ("float32", "col")       # (one element)


def test_epilogue_args_must_be_a_tuple_of_arrays_and_numbers():
    raises(TypeError, "epilogue_args must be a tuple (of arrays, ints and floats), got float", bind, epilogue=_plus, epilogue_args=1.0)
    raises(TypeError, "epilogue_args[0] has dtype complex64; epilogue arrays may be", bind, epilogue=_plus,
           epilogue_args=(Dev((8, 6), np.complex64),))


def test_scales_belong_to_fp8_inputs_and_come_in_pairs():
    one = Dev((1,), ptr=5 << 32)
    raises(ValueError, "scale_a and scale_b dequantize fp8 inputs", bind, scales=(one, one))
    fp8 = dict(dtype="float8_e4m3fn", out="bfloat16")
    raises(ValueError, "fp8 inputs need both scale_a and scale_b", bind, **fp8)
    raises(ValueError, "fp8 inputs need both scale_a and scale_b", bind, scales=(one, None), **fp8)
    raises(TypeError, "scale_b must be a float32 array of the operands' kind", bind, scales=(one, np.ones(1, np.float32)), **fp8)
    raises(TypeError, "scale_a has dtype float16; scales are float32", bind, scales=(Dev((1,), np.float16), one), **fp8)
    raises(ValueError, "scale_b has shape (2, 2): scales are per tensor", bind,
           scales=(Dev((8, 2)), Dev((2, 2))), m=8, n=6, k=256, **fp8)
    raises(ValueError, "scale_a has shape (8, 3)", bind, scales=(Dev((8, 3)), Dev((2, 1))), k=256, **fp8)
    assert bind(scales=(Dev((8, 2)), Dev((2, 1))), k=256, **fp8).spec.scales == "block"
    assert bind(scales=(one, one), **fp8).spec.scales == "tensor"


# ---- arrays -----------------------------------------------------------------------------------------

def test_as_matrix_takes_supported_matrices_only():
    raises(ValueError, "x must be 2-D, got 3-D", arrays.as_matrix, Dev((2, 3, 4)), "x")
    raises(TypeError, "x has dtype float64; numba_tc takes", arrays.as_matrix, Dev((3, 4), np.float64), "x")


# ---- batch --------------------------------------------------------------------------------------------

def test_batched_operands_of_two_kinds():
    raises(TypeError, "a and b must be the same kind of array, got numpy and cuda", numba_tc.gemm, f32(2, 4, 5),
           Dev((5, 3)))


def test_batched_inner_dimensions():
    raises(ValueError, "inner dimensions differ: a is ...x4x5, b is ...x6x3", numba_tc.gemm, f32(2, 4, 5), f32(2, 6, 3))


def test_batched_out_and_c_must_be_stacked_rows():
    a, b = f32(2, 4, 5), f32(5, 3)
    raises(ValueError, "out of a batched product must hold row-major matrices", numba_tc.gemm, a, b,
           out=np.empty((2, 3, 4), np.float32).transpose(0, 2, 1))
    raises(ValueError, "out of a batched product must hold row-major matrices", numba_tc.gemm, a, b,
           out=np.empty((4, 4, 3), np.float32)[::2])
    raises(ValueError, "c of a batched product must hold row-major matrices", numba_tc.gemm, a, b,
           c=np.empty((2, 3, 4), np.float32).transpose(0, 2, 1), beta=1.0)


def test_a_policy_flip_is_planned_again(fake_gpu):
    """The call caches key a call by the planner's policy too (``hopper.current().key``): an A/B
    run that flips a switch gets the plan of its own policy, never the one cached under the
    other, and gets the first back when it flips back."""
    from numba_tc import hopper
    bf16 = ml_dtypes.bfloat16
    a, b = Dev((16, 4096), bf16), Dev((4096, 4096), bf16, ptr=2 << 32).T

    def planned():
        numba_tc.gemm(a, b, "hopper")
        return [c.plan.describe() for c in calls._CALLS.values() if c.plan is not None]
    first = planned()
    assert len(first) == 1 and "swapped" in first[0], first
    with hopper.using(swap=False):
        flipped = planned()
        assert len(flipped) == 2 and "swapped" not in flipped[1], flipped
    assert planned() == flipped                          # (the first policy's call, found again)
    key = hopper.current().key
    assert key is hopper.current().key and key != hopper.current().replace(swap=False).key
