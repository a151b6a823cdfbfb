"""On a GPU, without torch: a call runs on the stream it is given (a Numba stream, a CuPy stream,
a raw handle: ``stream=`` alone, no context) or on CuPy's current stream (a ``with`` block), ordered
after work already queued there. Each stream here is non-blocking (it does not wait for the legacy
default stream, nor it for it) and first runs a ~50 ms spin kernel, then the copies that write the
operands and poison ``out``: a launch on any other stream reads stale operands (zeros) or leaves NaN."""
import numpy as np
import pytest

import numba_tc
from numba_tc import verify

pytestmark = pytest.mark.gpu

CASES = [("warptile", "float32", (300, 200, 136)), ("mma_tuned", "float16", (264, 328, 200)),
         ("hopper", "float16", (264, 328, 200))]
SPIN_US = 50_000


def _sm90():
    from numba import cuda
    return cuda.is_available() and tuple(cuda.get_current_device().compute_capability) == (9, 0)


def _spin(stream, us=SPIN_US):
    from numba import cuda
    import warnings
    from numba.core.errors import NumbaPerformanceWarning
    global _SPIN
    if "_SPIN" not in globals():
        @cuda.jit
        def spin(n):
            for _ in range(n):
                cuda.nanosleep(1000)
        _SPIN = spin
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumbaPerformanceWarning)
        _SPIN[1, 1, stream](us)


@pytest.fixture
def nonblocking():
    """A raw non-blocking CUstream on the current device, and its Numba wrapper."""
    from numba import cuda
    from cuda.bindings import driver as cu
    cuda.current_context()
    err, h = cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value)
    assert int(err) == 0, err
    handle = int(h)
    yield handle, cuda.external_stream(handle)
    cuda.synchronize()
    cu.cuStreamDestroy(h)


def _stale_problem(variant, dtype, shape, numba_stream):
    """Device operands that hold zeros until copies queued on ``numba_stream`` behind a spin write
    the real values (from device buffers written before); ``out`` NaN-poisoned the same way."""
    from numba import cuda
    m, n, k = shape
    host_dtype = np.float32 if dtype in ("float32", "tf32") else np.float16
    a, b = verify.random_operands(m, n, k, "float32")
    a, b = a.astype(host_dtype), b.astype(host_dtype)
    src_a, src_b = cuda.to_device(a), cuda.to_device(b)
    nan = cuda.to_device(np.full((m, n), np.nan, np.float32))
    da, db = cuda.to_device(np.zeros_like(a)), cuda.to_device(np.zeros_like(b))
    out = cuda.to_device(np.zeros((m, n), np.float32))
    cuda.synchronize()
    _spin(numba_stream)
    da.copy_to_device(src_a, stream=numba_stream)
    db.copy_to_device(src_b, stream=numba_stream)
    out.copy_to_device(nan, stream=numba_stream)
    return a, b, da, db, out, (src_a, src_b, nan)


def _check(a, b, out, dtype):
    r = verify.elementwise(out.copy_to_host(), a, b, dtype)
    assert r.ok, r


@pytest.mark.parametrize("variant,dtype,shape", CASES)
@pytest.mark.parametrize("how", ["numba stream", "raw handle"])
def test_stream_argument_alone_orders_after_queued_writes(nonblocking, variant, dtype, shape, how):
    if variant == "hopper" and not _sm90():
        pytest.skip("wgmma needs an sm_90 GPU")
    handle, ns = nonblocking
    a, b, da, db, out, keep = _stale_problem(variant, dtype, shape, ns)
    numba_tc.gemm(da, db, variant=variant, out=out, stream=ns if how == "numba stream" else handle)
    ns.synchronize()
    _check(a, b, out, dtype)


@pytest.mark.parametrize("variant,dtype,shape", CASES)
@pytest.mark.parametrize("how", ["stream=", "with stream"])
def test_cupy_stream_orders_after_queued_writes(variant, dtype, shape, how):
    cupy = pytest.importorskip("cupy")
    from numba import cuda
    if variant == "hopper" and not _sm90():
        pytest.skip("wgmma needs an sm_90 GPU")
    s = cupy.cuda.Stream(non_blocking=True)
    ns = cuda.external_stream(s.ptr)
    a, b, da, db, out, keep = _stale_problem(variant, dtype, shape, ns)
    ca, cb, cout = cupy.asarray(da), cupy.asarray(db), cupy.asarray(out)    # the same memory
    if how == "stream=":
        numba_tc.gemm(ca, cb, variant=variant, out=cout, stream=s)
    else:
        with s:
            numba_tc.gemm(ca, cb, variant=variant, out=cout)
    s.synchronize()
    _check(a, b, out, dtype)


def test_numpy_operands_on_a_busy_stream(nonblocking):
    """NumPy operands copied on the given stream behind queued work, and the result copied back."""
    handle, ns = nonblocking
    a, b = verify.random_operands(130, 70, 90)
    _spin(ns)
    out = np.full((130, 70), np.nan, np.float32, order="F")
    numba_tc.gemm(a, b, variant="warptile", out=out, stream=handle)
    r = verify.elementwise(out, a, b)
    assert r.ok, r
