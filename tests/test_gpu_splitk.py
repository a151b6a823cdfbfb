"""Split-K, decode-sized M and operands TMA cannot read, through ``hopper`` (what ``auto`` picks
for 16-bit inputs on an H100): each problem is checked element-wise against float64 into a
NaN-poisoned output, in all four operand layouts and both output orders, and ``explain`` shows
the path really ran (a test that passed through the unsplit kernel would prove nothing). Then
what split-K must keep: the same bits run to run, the epilogue applied once to the whole sum,
two streams at once (each with its own scratch), and a CUDA graph captured on a stream whose
scratch did not exist yet."""
import numpy as np
import pytest

import numba_tc
from numba_tc import verify

try:
    import torch
except ImportError:
    torch = None

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch is None, reason="needs torch")]

# (m, n, k, what explain() must show): one tile, decoding, ragged, huge K; rows TMA cannot read
SHAPES = [(64, 256, 8192, "split-K"), (1, 4096, 4096, "split-K"), (200, 300, 5000, "split-K"),
          (256, 256, 32768, "split-K"), (1000, 777, 1001, "repack"), (37, 1000, 6003, "repack")]
LAYOUTS = ["NN", "NT", "TN", "TT"]


def _sm90():
    return torch.cuda.get_device_capability() == (9, 0)


def _operand(rows, cols, trans, dtype, g=None):
    if trans:
        return torch.randn(cols, rows, device="cuda", dtype=dtype, generator=g).t()
    return torch.randn(rows, cols, device="cuda", dtype=dtype, generator=g)


@pytest.fixture(autouse=True)
def _hopper_gpu():
    if not _sm90():
        pytest.skip("needs an sm_90 GPU (wgmma)")


@pytest.mark.parametrize("m,n,k,path", SHAPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("out_layout", ["C", "F"])
def test_split_and_repack_are_right_element_by_element(m, n, k, path, layout, out_layout):
    out_dtype = "bfloat16" if out_layout == "C" else "float32"
    r = verify.check("hopper", m, n, k, layout, "bfloat16", out_layout, out_dtype=out_dtype, kind="torch")
    assert r.ok, str(r)
    a = _operand(m, k, layout[0] == "T", torch.bfloat16)
    b = _operand(k, n, layout[1] == "T", torch.bfloat16)
    out = torch.empty(n, m, device="cuda", dtype=getattr(torch, out_dtype)).t() if out_layout == "F" else None
    assert path in numba_tc.explain(a, b, "hopper", out=out, out_dtype=out_dtype)


@pytest.mark.parametrize("which", ["a", "b"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_slow_rows_copied_first_are_right_element_by_element(which, layout):
    # every row of both operands 16 mod 32 bytes apart (TMA reads them slowly): one copied
    # first to whole 128-byte rows by 16-byte loads and stores (``hopper.operands._slow_rows_copy``,
    # forced here), B multicast where it stays slow
    from dataclasses import replace
    from numba_tc import hopper
    v = replace(numba_tc.get_variant("hopper"), name=f"slow_rows_{which}")
    m, n, k = 264, 1032, 1000
    with hopper.using(slow_rows_copy=which):        # (a variant of its own: planned under the policy)
        r = verify.check(v, m, n, k, layout, "bfloat16", kind="torch")
        assert r.ok, str(r)
        a = _operand(m, k, layout[0] == "T", torch.bfloat16)
        b = _operand(k, n, layout[1] == "T", torch.bfloat16)
        plan = numba_tc.explain(a, b, v)
    assert plan.count("repack") == 1 and f"repack {which}; " in plan, plan
    assert ("cluster 2" in plan) == (which == "a"), plan


def test_auto_takes_unaligned_rows_to_hopper_and_huge_k_to_split():
    a = _operand(512, 1001, False, torch.float16)      # rows of 2002 and 1000 bytes
    b = _operand(1001, 500, False, torch.float16)
    assert numba_tc.explain(a, b).startswith("hopper: repack a; repack b; ")
    a = _operand(256, 65536, False, torch.bfloat16)
    b = _operand(65536, 256, False, torch.bfloat16)
    assert "split-K" in numba_tc.explain(a, b) and numba_tc.explain(a, b).endswith("fixup")


def test_split_is_bitwise_repeatable():
    g = torch.Generator(device="cuda").manual_seed(1)
    a = _operand(256, 32768, False, torch.bfloat16, g)
    b = _operand(32768, 384, True, torch.bfloat16, g)
    assert "split-K" in numba_tc.explain(a, b, "hopper", out_dtype="float32")
    first = numba_tc.gemm(a, b, "hopper", out_dtype="float32")
    for _ in range(5):
        again = torch.full_like(first, float("nan"))
        numba_tc.gemm(a, b, "hopper", out=again)
        assert torch.equal(first, again)


def _epilogue_once(variant, m, n, k, tb, activation, path, seed):
    """act(0.5 a @ b - 1.5 c + bias) into c = out (fp32), checked against float64: an activation
    per partial sum is off by far more than 1e-5. Returns a and b."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = _operand(m, k, False, torch.bfloat16, g)
    b = _operand(k, n, tb, torch.bfloat16, g)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    out = torch.randn(m, n, device="cuda", dtype=torch.float32, generator=g)
    c0 = out.clone()
    assert path in numba_tc.explain(a, b, variant, out=out)
    numba_tc.gemm(a, b, variant, out=out, c=out, alpha=0.5, beta=-1.5, bias=bias, activation=activation)
    act = torch.nn.functional.gelu if activation == "gelu" else torch.nn.functional.silu
    ref = act(0.5 * (a.double() @ b.double()) - 1.5 * c0.double() + bias.double())
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err < 1e-5, err
    return a, b


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_split_applies_the_epilogue_once_to_the_whole_sum(activation):
    _epilogue_once("hopper", 96, 320, 9000, False, activation, "split-K", 2)


# more tiles than the H100's 132 SMs take in whole rounds, a few left (128x256: 153, 289, 192
# tiles; 128x192: 187, 272, 272), rows TMA reads fast (multiples of 32 bytes) or, with K = 777,
# copied first
TAIL_SHAPES = {(128, 256): [(2096, 2096, 1008, "bfloat16"), (2064, 4112, 528, "float32"), (2000, 3008, 777, "bfloat16")],
               (128, 192): [(2096, 2096, 1008, "bfloat16"), (2064, 2912, 528, "float32"), (2000, 3104, 777, "bfloat16")]}


def _tail_variant(monkeypatch, tiles, name):
    """``hopper`` with the last round's tiles split 3 ways wherever a round is partial, on
    ``tiles`` (a fresh variant: plans are cached per variant)."""
    from dataclasses import replace
    from numba_tc import hopper
    monkeypatch.setattr(hopper, "TAIL", 3)
    monkeypatch.setattr(hopper, "TAIL_TILES", (tiles,))
    return replace(numba_tc.get_variant("hopper"), name=name)


@pytest.mark.parametrize("tiles", [(128, 256), (128, 192)])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_last_rounds_tiles_split_are_right_element_by_element(tiles, layout, monkeypatch):
    # whole rounds of whole tiles (stored by the kernel, by TMA or from registers), the tiles of
    # the partial round after them split along K, their sums added by the tail fix-up
    v = _tail_variant(monkeypatch, tiles, f"tail_{tiles[1]}_{layout}")
    for m, n, k, out_dtype in TAIL_SHAPES[tiles]:
        r = verify.check(v, m, n, k, layout, "bfloat16", "C", out_dtype=out_dtype, kind="torch")
        assert r.ok, str(r)
        a = _operand(m, k, layout[0] == "T", torch.bfloat16)
        b = _operand(k, n, layout[1] == "T", torch.bfloat16)
        plan = numba_tc.explain(a, b, v, out_dtype=out_dtype)
        assert f"{tiles[0]}x{tiles[1]}, last " in plan and "tail fixup" in plan, plan


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_the_tail_split_applies_the_epilogue_once_and_repeats_bitwise(activation, monkeypatch):
    v = _tail_variant(monkeypatch, (128, 256), f"tail_epilogue_{activation}")
    a, b = _epilogue_once(v, 2096, 2096, 3008, True, activation, "tail fixup", 3)
    first = numba_tc.gemm(a, b, v, out_dtype="float32")
    for _ in range(3):
        again = torch.full_like(first, float("nan"))
        numba_tc.gemm(a, b, v, out=again)
        assert torch.equal(first, again)


def test_split_on_two_streams_at_once():
    """Each stream gets its own scratch: the same plan on two busy streams, no synchronization
    between the launches."""
    g = torch.Generator(device="cuda").manual_seed(3)
    ops = [(_operand(64, 16384, False, torch.bfloat16, g), _operand(16384, 512, False, torch.bfloat16, g))
           for _ in range(2)]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [torch.full((64, 512), float("nan"), device="cuda") for _ in range(2)]
    torch.cuda.synchronize()
    for _ in range(20):
        for (a, b), s, o in zip(ops, streams, outs):
            with torch.cuda.stream(s):
                numba_tc.gemm(a, b, "hopper", out=o)
    torch.cuda.synchronize()
    for (a, b), o in zip(ops, outs):
        ref = a.double() @ b.double()
        assert float(torch.linalg.norm(o.double() - ref) / torch.linalg.norm(ref)) < 1e-5


def test_split_and_repack_in_a_cuda_graph_on_a_new_stream():
    """The scratch of a stream first used inside a capture is allocated there (relaxed capture
    mode) and is still there at every replay."""
    g = torch.Generator(device="cuda").manual_seed(4)
    a = _operand(128, 20001, False, torch.bfloat16, g)          # rows TMA cannot read, and split-K
    b = _operand(20001, 256, False, torch.bfloat16, g)
    out = torch.full((128, 256), float("nan"), device="cuda")
    explained = numba_tc.explain(a, b, "hopper", out=out)
    assert "repack" in explained and "split-K" in explained
    s = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=s):
        numba_tc.gemm(a, b, "hopper", out=out)
    for _ in range(2):
        a.copy_(torch.randn_like(a))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        assert float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref)) < 1e-5


def test_split_from_two_threads_on_one_stream():
    """Two host threads on the same (default) stream: each its own scratch, so one thread's
    kernel cannot write its partial sums between the other's kernel and fix-up."""
    import threading
    g = torch.Generator(device="cuda").manual_seed(5)
    ops = [(_operand(64, 16384, False, torch.bfloat16, g), _operand(16384, 512, False, torch.bfloat16, g))
           for _ in range(2)]
    outs = [torch.full((64, 512), float("nan"), device="cuda") for _ in range(2)]
    assert "split-K" in numba_tc.explain(*ops[0], "hopper", out=outs[0])
    torch.cuda.synchronize()

    def work(i):
        for _ in range(50):
            numba_tc.gemm(*ops[i], "hopper", out=outs[i])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    torch.cuda.synchronize()
    for (a, b), o in zip(ops, outs):
        ref = a.double() @ b.double()
        assert float(torch.linalg.norm(o.double() - ref) / torch.linalg.norm(ref)) < 1e-5
