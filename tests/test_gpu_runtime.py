"""A real program's settings, on a GPU: the caller's stream (torch and CuPy), operands on another
GPU, CUDA graph capture and replay, the call cache across new pointers and shapes, a fresh
process with a cold and a warm kernel cache."""
import os
import subprocess
import sys

import numpy as np
import pytest

import numba_tc

try:
    import torch
except ImportError:                      # (collected and reported as gpu tests either way)
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason="needs torch")]
# the rung of each ladder a user meets: its dtype and tolerance
CASES = [("hopper", "bfloat16", 1e-2), ("mma_tuned", "bfloat16", 1e-2), ("warptile", "float32", 1e-5)]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sm90():
    return torch is not None and torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def _two_gpus():
    return torch is not None and torch.cuda.device_count() >= 2


def _cases():
    return [c for c in CASES if c[0] != "hopper" or _sm90()]


def _err(c, a, b):
    ref = a.double() @ b.double()
    c = c.double()
    if not bool(torch.isfinite(c).all()):
        return float("inf")
    return float(torch.linalg.norm(c - ref) / torch.linalg.norm(ref))


@pytest.mark.parametrize("variant, dtype, tol", _cases())
def test_runs_on_the_current_torch_stream(variant, dtype, tol):
    """Operands written on a busy non-blocking stream: the call must queue behind that work."""
    dtype = getattr(torch, dtype)
    s = torch.cuda.Stream()
    for m, n, k in ((512, 384, 256), (1000, 776, 520), (64, 64, 64)):
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(20_000_000)                 # ~10 ms of GPU time on s
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(k, n, device="cuda", dtype=dtype)
            c = numba_tc.gemm(a, b, variant=variant)
            c2 = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
            numba_tc.gemm(a, b, variant=variant, out=c2)
        s.synchronize()
        assert _err(c, a, b) < tol and _err(c2, a, b) < tol


def test_runs_on_the_current_cupy_stream():
    cupy = pytest.importorskip("cupy")
    s = cupy.cuda.Stream(non_blocking=True)
    for variant, dt in (("warptile", np.float32), ("mma_tuned", np.float16)):
        with s:
            x = cupy.random.standard_normal((700, 300), dtype=np.float32)
            for _ in range(20):                           # keep s busy before a and b exist
                x = x @ x.T @ x if x.shape[0] == 700 else x
            a = cupy.random.standard_normal((700, 300), dtype=np.float32).astype(dt)
            b = cupy.random.standard_normal((300, 500), dtype=np.float32).astype(dt)
            c = numba_tc.gemm(a, b, variant=variant)
        s.synchronize()
        ref = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
        err = np.linalg.norm(cupy.asnumpy(c).astype(np.float64) - ref) / np.linalg.norm(ref)
        assert err < (1e-5 if dt == np.float32 else 1e-2), (variant, err)


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
@pytest.mark.parametrize("variant, dtype, tol", CASES)
def test_operands_on_another_gpu(variant, dtype, tol):
    dtype = getattr(torch, dtype)
    torch.cuda.set_device(0)
    for m, n, k in ((300, 200, 136), (1024, 1024, 1024)):
        a = torch.randn(m, k, device="cuda:1", dtype=dtype)
        b = torch.randn(k, n, device="cuda:1", dtype=dtype)
        c = numba_tc.gemm(a, b, variant=variant)
        assert c.device == a.device and torch.cuda.current_device() == 0
        torch.cuda.synchronize(1)
        assert _err(c, a, b) < tol
        with torch.cuda.device(1):                        # the same call from device 1's side
            c = numba_tc.gemm(a, b, variant=variant)
        assert _err(c, a, b) < tol


@pytest.mark.skipif(not _two_gpus(), reason="needs two GPUs")
def test_operands_on_two_gpus_are_an_error():
    a = torch.randn(64, 64, device="cuda:0")
    b = torch.randn(64, 64, device="cuda:1")
    with pytest.raises(ValueError, match="a is on device 0 but b is on device 1"):
        numba_tc.gemm(a, b)
    with pytest.raises(ValueError, match="out is on device 1"):
        numba_tc.gemm(a, a, out=torch.empty(64, 64, device="cuda:1"))


@pytest.mark.parametrize("variant, dtype, tol", _cases())
def test_graph_capture_then_other_calls_then_replay(variant, dtype, tol):
    dtype = getattr(torch, dtype)
    m, n, k = 520, 264, 392
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
    numba_tc.gemm(a, b, variant=variant, out=c)          # warm: compile and load outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        numba_tc.gemm(a, b, variant=variant, out=c)
        d = numba_tc.gemm(a, b, variant=variant)        # the result allocated inside capture
    for mm in (520, 1000, 64):                          # other operands, shapes, pointers
        x = torch.randn(mm, k, device="cuda", dtype=dtype)
        y = numba_tc.gemm(x, b, variant=variant)
        assert _err(y, x, b) < tol
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        c.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert _err(c, a, b) < tol and _err(d, a, b) < tol


@pytest.mark.skipif(not _sm90(), reason="needs an sm_90 GPU (the Hopper plans of several launches)")
@pytest.mark.parametrize("m,n,k,dtype,what", [(64, 256, 16384, "bfloat16", "fixup"),
                                              (1000, 520, 392, "float32", "transpose b"),
                                              (8, 4096, 2048, "float32", "cp.async b split-K"),
                                              (1000, 520, 390, "bfloat16", "repack a; repack b")])
def test_graph_capture_of_plans_of_dependent_launches(m, n, k, dtype, what):
    # a copy, the product and a fix-up launched as programmatic dependents of the launch before:
    # captured on a side stream (torch's graph), replayed on new values, against float64
    dt, pad = getattr(torch, dtype), int("repack" in what)                # (odd pitches: rows TMA cannot read)
    a = torch.randn(m, k + pad, device="cuda", dtype=dt)[:, :k]
    if what == "transpose b":               # (tf32 with A row-major: swapped instead, one launch)
        a = torch.randn(k, m, device="cuda", dtype=dt).t()
    b = torch.randn(k, n + pad, device="cuda", dtype=dt)[:, :n]
    tf32 = dtype == "float32"
    assert what in numba_tc.explain(a, b, allow_tf32=tf32)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    numba_tc.gemm(a, b, out=c, allow_tf32=tf32)                          # warm outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        numba_tc.gemm(a, b, out=c, allow_tf32=tf32)
        d = numba_tc.gemm(a, b, allow_tf32=tf32)
    for _ in range(3):
        a.copy_(torch.randn_like(a))
        c.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert _err(c, a, b) < 2e-3 and _err(d, a, b) < 2e-2


@pytest.mark.skipif(not _two_gpus() or not _sm90(), reason="needs two sm_90 GPUs")
def test_dependent_launches_on_the_second_gpu_and_a_side_stream():
    # a plan of dependent launches (a transposing copy then the product; a split-K product then
    # its fix-up) with every operand on device 1, enqueued on a non-default stream of it
    with torch.cuda.device(1):
        s = torch.cuda.Stream()
        for m, n, k, dtype in ((1000, 520, 392, torch.float32), (64, 256, 16384, torch.bfloat16)):
            tf32 = dtype == torch.float32
            # (tf32 with A row-major is one swapped launch: A column-major keeps B's transposing copy)
            a = torch.randn(k, m, device="cuda:1", dtype=dtype)
            a = a.t() if tf32 else a.reshape(m, k)
            b = torch.randn(k, n, device="cuda:1", dtype=dtype)
            assert ";" in numba_tc.explain(a, b, allow_tf32=tf32)
            with torch.cuda.stream(s):
                c = numba_tc.gemm(a, b, allow_tf32=tf32)
            s.synchronize()
            assert c.device.index == 1 and _err(c, a, b) < (2e-3 if tf32 else 2e-2)


def test_cupy_stream_capture_and_replay():
    cupy = pytest.importorskip("cupy")
    for variant in (["hopper"] if _sm90() else []) + ["mma_tuned"]:
        a = cupy.random.standard_normal((520, 392), dtype=np.float32).astype(np.float16)
        b = cupy.random.standard_normal((392, 264), dtype=np.float32).astype(np.float16)
        c = cupy.full((520, 264), np.nan, dtype=np.float32)
        numba_tc.gemm(a, b, variant=variant, out=c)            # warm: compile and load first
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            numba_tc.gemm(a, b, variant=variant, out=c)
            g = s.end_capture()
        for _ in range(2):
            a[...] = cupy.random.standard_normal(a.shape, dtype=np.float32).astype(np.float16)
            c.fill(np.nan)
            cupy.cuda.Device().synchronize()
            g.launch(stream=s)
            s.synchronize()
            ref = cupy.asnumpy(a).astype(np.float64) @ cupy.asnumpy(b).astype(np.float64)
            err = np.linalg.norm(cupy.asnumpy(c) - ref) / np.linalg.norm(ref)
            assert err < 1e-2, (variant, err)


_CAPTURE_NUMPY = """
import numpy as np, torch, numba_tc
a = np.random.rand(64, 64).astype(np.float32)
numba_tc.gemm(a, a, variant="warptile")
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g):
        numba_tc.gemm(a, a, variant="warptile")
except numba_tc.CaptureError as e:
    print("refused:", e)
"""


def test_numpy_operands_cannot_be_captured():
    """A clear error, not a wrong replay (in a process of its own: an aborted capture leaves
    torch's random generator unusable)."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _CAPTURE_NUMPY], env=env, capture_output=True, text=True, timeout=300)
    assert "refused: NumPy operands" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("variant, dtype, tol", _cases())
def test_call_cache_new_pointers_new_shapes_and_out(variant, dtype, tol):
    dtype = getattr(torch, dtype)
    big = torch.randn(2048 * 1024, device="cuda", dtype=dtype)
    b = torch.randn(256, 200, device="cuda", dtype=dtype)
    for i in range(4):                                  # one shape, a new pointer each time
        a = torch.randn(300, 256, device="cuda", dtype=dtype)
        assert _err(numba_tc.gemm(a, b, variant=variant), a, b) < tol
    for off, m in ((0, 300), (0, 128), (512, 300), (1024, 77)):   # one buffer, new shapes
        a = big[off:off + m * 256].view(m, 256)
        assert _err(numba_tc.gemm(a, b, variant=variant), a, b) < tol
    for out_dtype in (torch.float32, dtype):
        c = torch.full((300, 200), float("nan"), device="cuda", dtype=out_dtype)
        numba_tc.gemm(big[:300 * 256].view(300, 256), b, variant=variant, out=c)
        assert _err(c, big[:300 * 256].view(300, 256), b) < tol
        ct = torch.full((200, 300), float("nan"), device="cuda", dtype=out_dtype).T   # column-major out
        numba_tc.gemm(big[:300 * 256].view(300, 256), b, variant=variant, out=ct)
        assert _err(ct, big[:300 * 256].view(300, 256), b) < tol
    with pytest.raises(ValueError, match="overlaps"):
        sq = torch.randn(256, 256, device="cuda", dtype=dtype)
        numba_tc.gemm(sq, sq, variant=variant, out=sq)


@pytest.mark.parametrize("variant, dtype, tol", _cases())
def test_fresh_process_cold_then_warm_cache(variant, dtype, tol, tmp_path):
    from numba_tc.bench import first_call
    runs = [first_call(variant, dtype, size=256, cache_dir=str(tmp_path)) for _ in range(2)]
    assert all(r["rel_err"] < tol for r in runs)
    assert runs[1]["seconds"] < runs[0]["seconds"]        # the second process loads, not compiles
    assert os.listdir(tmp_path)


@pytest.mark.parametrize("batched", [False, True])
def test_a_dropped_variant_does_not_lend_its_plan(batched):
    # The call caches key a Variant object by its id. A loop that makes, uses and drops variants
    # (tuning with variant_from) gets recycled addresses: each call must still run the variant it
    # was given, not the cached plan of a dead one that had the same id.
    if not _sm90():
        pytest.skip("needs an sm_90 GPU (the Hopper tiles)")
    from numba_tc import calls as cache, hopper
    cfgs = [c for c in hopper.RUNG7_CONFIGS if c.cluster == 1]
    shape = (4, 256, 128) if batched else (256, 128)
    a = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(*shape[:-2], 128, 256, device="cuda", dtype=torch.bfloat16)
    ids = set()
    for i in range(24):
        cfg = cfgs[i % len(cfgs)]
        v = numba_tc.variant_from(cfg, f"idtest{i}", splits=1)
        ids.add(id(v))
        out = numba_tc.gemm(a, b, v)
        assert float((out.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()) < 1e-2
        if batched:
            plans = [p for key, (p, _) in cache._BATCHED.items() if key[0] == cache._variant_key(v)]
            assert len(plans) == 1 and plans[0].variant == v.name, [p.describe() for p in plans]
        else:
            calls = [c for key, c in cache._CALLS.items() if key[0] == cache._variant_key(v)]
            assert len(calls) == 1 and calls[0].plan.variant == v.name, [c.plan.variant for c in calls]
        del v, out
    assert len(ids) == 24
