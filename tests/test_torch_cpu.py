"""numba_tc.torch without a GPU: the operator's registration, its fake (meta) implementation
(opcheck on meta tensors), torch.compile(fullgraph=True) tracing forward and backward, the autograd
formula against float64 (gradcheck, with numba_tc's product swapped for a float64 reference),
the errors that keep a gradient from being silently dropped, Linear's state_dict, patch/unpatch.
Skips when torch is not installed."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import numba_tc                      # noqa: E402
import numba_tc.torch as ntt        # noqa: E402
from conftest import torch_epilogue_reference   # noqa: E402
from torch import nn                 # noqa: E402

pytestmark = pytest.mark.cpu
META = dict(device="meta")


def _meta(*shape, dtype=torch.bfloat16, grad=True):
    return torch.empty(*shape, dtype=dtype, device="meta", requires_grad=grad)


def _layout(t, trans):
    """t (r, c) as a column-major view when trans (the same values, the other layout), a leaf."""
    v = t.detach().mT.contiguous().mT if trans else t.detach()
    return v.requires_grad_(t.requires_grad)


def test_import_does_not_import_torch():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = "import sys, numba_tc; assert 'torch' not in sys.modules, 'torch imported'; print('ok')"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=300)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr


def test_operator_is_registered():
    op = torch.ops.numba_tc.gemm.default
    s = str(op._schema)
    assert s.startswith("numba_tc::gemm(Tensor a, Tensor b, Tensor? c, Tensor? bias, float alpha, float beta")
    assert "-> Tensor" in s


def test_the_operator_takes_the_terms_the_epilogue_table_gives_it():
    """The operator's schema reads each epilogue argument's type from ``epilogue.TERMS``, and
    takes every one a term gives a schema type (a new differentiable term is not forgotten)."""
    from numba_tc import epilogue
    assert set(ntt.OP_EPILOGUE) == {k for t in epilogue.TERMS for k, ty in t.keywords if ty}
    assert ntt.ACTIVATIONS == tuple(epilogue.ACTIVATIONS)
    s = str(torch.ops.numba_tc.gemm.default._schema)
    assert all(f"{dict(epilogue.KEYWORDS[k].keywords)[k]} {k}" in s for k in ntt.OP_EPILOGUE)


OPCHECK_ARGS = [
    lambda: (_meta(64, 32), _meta(32, 48), None, None, 1.0, 0.0, None, None, "auto", False),
    lambda: (_meta(64, 32), _layout(_meta(32, 48), True), _meta(64, 48, dtype=torch.float32),
             _meta(48), 2.0, 0.5, "gelu_tanh", torch.float32, "auto", False),
    lambda: (_layout(_meta(30, 17), True), _meta(17, 30), None, _meta(30), 1.0, 0.0, "silu", None, "auto", False),
    lambda: (_meta(33, 9, dtype=torch.float32), _meta(9, 5, dtype=torch.float32), None, _meta(33, dtype=torch.float32),
             1.0, 0.0, "relu", None, "warptile", False),
]


@pytest.mark.parametrize("make", OPCHECK_ARGS)
def test_opcheck_meta(make):
    r = torch.library.opcheck(ntt.gemm_op, make())
    assert all(v == "SUCCESS" for v in r.values()), r


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_gemm_needing_grad_goes_through_the_operator(ta, tb):
    a, b = _layout(_meta(37, 21), ta), _layout(_meta(21, 11), tb)
    y = numba_tc.gemm(a, b)
    assert y.requires_grad and "numba_tc_gemm" in type(y.grad_fn).__name__
    assert y.shape == (37, 11) and y.dtype == torch.bfloat16
    y.sum().backward()
    assert a.grad.shape == a.shape and b.grad.shape == b.shape


def test_compile_fullgraph_traces_forward_and_backward():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    f = torch.compile(lambda a, b, bias: torch.relu(numba_tc.gemm(a, b, bias=bias, out_dtype="float32")),
                      fullgraph=True, backend=backend)
    a, b, bias = _meta(64, 32), _layout(_meta(32, 48), True), _meta(48)
    y = f(a, b, bias)
    assert y.dtype == torch.float32 and y.shape == (64, 48)
    assert any("numba_tc.gemm" in str(g.graph) for g in graphs)
    # forward and backward through AOTAutograd (the op's fake impl and autograd formula)
    g = torch.compile(lambda a, b: numba_tc.gemm(a, b, activation="gelu"), fullgraph=True, backend="aot_eager")
    a, b = _meta(64, 32), _meta(32, 48)
    g(a, b).sum().backward()
    assert a.grad.shape == (64, 32) and b.grad.shape == (32, 48)


def test_compile_without_grad_and_out():
    out = torch.empty(8, 4, device="meta", dtype=torch.bfloat16)
    f = torch.compile(lambda a, b, out: numba_tc.gemm(a, b, out=out), fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        r = f(_meta(8, 16, grad=False), _meta(16, 4, grad=False), out)
    assert r.shape == (8, 4)


def test_fake_checks_shapes():
    with pytest.raises(Exception, match="inner dimensions"):
        numba_tc.gemm(_meta(8, 16), _meta(15, 4))
    with pytest.raises(Exception, match="one dtype"):
        numba_tc.gemm(_meta(8, 16), _meta(16, 4, dtype=torch.float16))


def _reference(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32):
    """The operator's arithmetic in float64 (stands in for numba_tc's kernels)."""
    return torch_epilogue_reference(a, b, c, bias, alpha, beta, activation).to(out_dtype or a.dtype)


@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("epi", [dict(), dict(bias="col", activation="gelu_tanh"),
                                 dict(bias="row", activation="silu", alpha=0.5),
                                 dict(c=True, beta=0.25, activation="gelu"),
                                 dict(bias="col", activation="relu")])
def test_autograd_formula_float64(monkeypatch, ta, tb, epi):
    """gradcheck of the operator's backward (which calls the operator for dA and dB on transposed
    views) with the product computed in float64 on the CPU."""
    monkeypatch.setattr(ntt, "_eager", _reference)
    g = torch.Generator().manual_seed(0)
    m, n, k = 7, 5, 6
    a = _layout(torch.randn(m, k, generator=g, dtype=torch.float64), ta).requires_grad_()
    b = _layout(torch.randn(k, n, generator=g, dtype=torch.float64), tb).requires_grad_()
    c = torch.randn(m, n, generator=g, dtype=torch.float64, requires_grad=True) if epi.get("c") else None
    bias = None
    if "bias" in epi:
        bias = torch.randn(n if epi["bias"] == "col" else m, generator=g, dtype=torch.float64, requires_grad=True)
    alpha, beta, act = epi.get("alpha", 1.0), epi.get("beta", 0.0), epi.get("activation")

    def f(a, b, c, bias):
        return numba_tc.gemm(a, b, c=c, bias=bias, alpha=alpha, beta=beta, activation=act)

    args = (a, b, c, bias)
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("epi", [dict(), dict(bias="col", alpha=0.5), dict(c=True, beta=0.25),
                                 dict(bias="col", activation="gelu_tanh", alpha=0.5),
                                 dict(c=True, beta=0.25, activation="silu")])
def test_eager_function_gradients_float64(monkeypatch, epi):
    """``_Function`` (what eager calls on CUDA tensors take): the operator's formula with its
    products run directly; a second derivative (create_graph) goes through the operator
    (checked where the backward is float64 throughout: an activation's derivative is fp32)."""
    monkeypatch.setattr(ntt, "_eager", _reference)
    g = torch.Generator().manual_seed(1)
    m, n, k = 6, 5, 4
    a = _layout(torch.randn(m, k, generator=g, dtype=torch.float64), True).requires_grad_()
    b = torch.randn(k, n, generator=g, dtype=torch.float64, requires_grad=True)
    c = torch.randn(m, n, generator=g, dtype=torch.float64, requires_grad=True) if epi.get("c") else None
    bias = torch.randn(n, generator=g, dtype=torch.float64, requires_grad=True) if "bias" in epi else None

    def f(a, b, c, bias):
        return ntt._Function.apply(a, b, c, bias, epi.get("alpha", 1.0), epi.get("beta", 0.0),
                                   epi.get("activation"), None, "auto", False)

    args = (a, b, c, bias)
    assert torch.autograd.gradcheck(f, args, eps=1e-6, atol=1e-5)
    if "activation" not in epi:
        assert torch.autograd.gradgradcheck(f, args, eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh", "silu"])
def test_activation_derivatives(act):
    z = torch.linspace(-4, 4, 101, dtype=torch.float64, requires_grad=True)
    f = {"relu": torch.relu, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
         "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[act]
    g = torch.rand(101, dtype=torch.float64)
    (want,) = torch.autograd.grad(f(z), z, g)
    got = ntt._act_grad(z.detach().float(), g, act).double()
    assert torch.allclose(got, want, atol=1e-5)


def test_a_gradient_is_never_silently_dropped():
    a = torch.randn(8, 8, requires_grad=True)
    with pytest.raises(TypeError, match="CUDA"):          # through the operator: numba_tc's own error
        numba_tc.gemm(a, a)
    with pytest.raises(RuntimeError, match="autograd"):
        numba_tc.gemm(_meta(8, 8), _meta(8, 8), out=torch.empty(8, 8, device="meta", dtype=torch.bfloat16))

    def f(acc, row, col):
        return acc
    with pytest.raises(NotImplementedError, match="gradient"):
        numba_tc.gemm(_meta(8, 8), _meta(8, 8), epilogue=f)
    with pytest.raises(ValueError, match="stream"):
        numba_tc.gemm(_meta(8, 8), _meta(8, 8), stream=0)


def test_linear_state_dict_both_ways_and_cpu_fallback():
    torch.manual_seed(0)
    ref = nn.Linear(16, 8)
    lin = ntt.Linear(16, 8)
    lin.load_state_dict(ref.state_dict())
    ref2 = nn.Linear(16, 8)
    ref2.load_state_dict(lin.state_dict())
    assert set(lin.state_dict()) == {"weight", "bias"}
    x = torch.randn(3, 5, 16)
    assert torch.equal(lin(x), ref(x)) and torch.equal(ref2(x), ref(x))    # CPU: nn.Linear's forward
    shared = ntt.Linear.from_linear(ref)
    assert shared.weight is ref.weight and torch.equal(shared(x), ref(x))


def _graph_names(fn) -> str:
    names, todo = [], [fn]
    while todo:
        f = todo.pop()
        if f is not None:
            names.append(type(f).__name__)
            todo += [g for g, _ in f.next_functions]
    return " ".join(names)


def test_linear_on_meta_takes_numba_tc_path():
    """``linear`` flattens (batch, seq, in) to 2-D and runs the operator (meta: its fake)."""
    x, w, bias = _meta(2, 5, 16), _meta(8, 16), _meta(8)
    y = ntt.linear(x, w, bias)
    assert y.shape == (2, 5, 8) and "numba_tc_gemm" in _graph_names(y.grad_fn)
    y.sum().backward()
    assert w.grad.shape == (8, 16) and bias.grad.shape == (8,) and x.grad.shape == (2, 5, 16)
    w_in_out = _meta(16, 8)
    assert ntt.linear(x, w_in_out, bias, weight_in_out=True).shape == (2, 5, 8)


def test_inference_weight_casts_are_cached_per_version():
    w = nn.Parameter(torch.randn(8, 4))
    cache = {}
    with torch.no_grad():
        w1 = ntt._cast(w, torch.bfloat16, cache)
        assert ntt._cast(w, torch.bfloat16, cache) is w1
        w.add_(1.0)                                       # an optimizer step: a new version
        w2 = ntt._cast(w, torch.bfloat16, cache)
    assert w2 is not w1 and torch.equal(w2, w.detach().to(torch.bfloat16))
    wg = ntt._cast(w, torch.bfloat16, cache)               # grad mode: a cast in the graph
    assert wg.requires_grad and wg.grad_fn is not None


class Conv1D(nn.Module):
    """As transformers.pytorch_utils.Conv1D (GPT-2): weight (in, out)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf, self.nx = nf, nx
        self.weight = nn.Parameter(torch.randn(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], self.nf)


def test_patch_unpatch_patched():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), Conv1D(4, 10), nn.Linear(4, 3, bias=False))
    x = torch.randn(2, 7, 6)
    want = model(x)
    keys = set(model.state_dict())
    ntt.patch(model)
    patched = [m for m in model.modules() if getattr(m, "_ntc_patched", False)]
    assert len(patched) == 3 and all("forward" in m.__dict__ for m in patched)
    assert torch.equal(model(x), want)                    # CPU: each layer's own forward
    assert set(model.state_dict()) == keys
    ntt.unpatch(model)
    assert not any("forward" in m.__dict__ for m in model.modules())
    with ntt.patched(model):
        assert all("forward" in m.__dict__ for m in patched)
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_patched_model_on_meta_runs_through_the_operator():
    model = nn.Sequential(nn.Linear(6, 10), nn.GELU(), Conv1D(4, 10)).to("meta")
    calls = []
    real = ntt.gemm_op

    def spy(*args):
        calls.append(args[1].shape)
        return real(*args)
    ntt.gemm_op = spy
    try:
        with ntt.patched(model):
            # (meta tensors are not CUDA tensors: call the patched path's function directly)
            x = torch.empty(2, 7, 6, device="meta", requires_grad=True)
            y = ntt.linear(x, model[0].weight, model[0].bias, cache={})
            y = ntt.linear(y, model[2].weight, model[2].bias, weight_in_out=True, cache={})
            y.sum().backward()
    finally:
        ntt.gemm_op = real
    assert calls == [(6, 10), (10, 4)] and model[0].weight.grad.shape == (10, 6)


def test_compile_before_any_eager_call_in_a_fresh_process():
    """The first torch call of a process inside torch.compile(fullgraph=True): numba_tc.torch is
    imported while Dynamo traces."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = ("import torch, numba_tc, sys\n"
            "a = torch.empty(64, 32, device='meta', dtype=torch.bfloat16, requires_grad=True)\n"
            "b = torch.empty(32, 48, device='meta', dtype=torch.bfloat16, requires_grad=True)\n"
            "f = torch.compile(lambda a, b: numba_tc.gemm(a, b), fullgraph=True, backend='aot_eager')\n"
            "f(a, b).sum().backward()\n"
            "assert a.grad.shape == (64, 32) and 'numba_tc.torch' in sys.modules\n"
            "print('ok')\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=600)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]


class _FakePrepared:
    """``prepared.Prepared``'s interface, recording launches (a CPU stand-in: no product)."""

    def __init__(self, a, b, calls):
        self.n, self.out_dtype, self.calls = b.shape[1], "float32", calls
        calls.append(("prepare", tuple(a.shape), tuple(b.shape)))

    def enqueue(self, pa, po):
        self.calls.append(("enqueue", pa, po))


def test_inference_path_prepares_once_per_input_kind_and_parameter_state(monkeypatch):
    """``_inference``'s cache: one ``prepared.prepare`` per kind of input while the parameters are
    unchanged; again after an in-place change or a replacement; N-D inputs as their rows with
    the result in their shape; inputs it cannot take (non-contiguous N-D) left to the general
    path."""
    calls = []
    monkeypatch.setattr(ntt.prepared, "prepare", lambda a, b, *args, **kw: _FakePrepared(a, b, calls))
    lin = nn.Linear(16, 8)
    cache = {}

    def run(x, weight=None):
        return ntt._inference(x, lin.weight if weight is None else weight, lin.bias, False, "auto", cache)

    def prepares():
        return sum(c[0] == "prepare" for c in calls)

    with torch.no_grad():
        x = torch.randn(2, 5, 16)
        y = run(x)
        assert y.shape == (2, 5, 8) and calls == [("prepare", (10, 16), (16, 8)), ("enqueue", x.data_ptr(), y.data_ptr())]
        x2 = torch.randn(2, 5, 16)
        y2 = run(x2)
        assert prepares() == 1 and calls[-1] == ("enqueue", x2.data_ptr(), y2.data_ptr())
        assert run(torch.randn(7, 16)).shape == (7, 8) and prepares() == 2      # another kind of input
        lin.weight.mul_(2.0)                                # in place: a new version
        run(x)
        assert prepares() == 3
        lin.weight = nn.Parameter(torch.randn(8, 16))       # replaced
        run(x)
        assert prepares() == 4
        run(x)
        assert prepares() == 4
        assert run(torch.randn(5, 2, 16).transpose(0, 1)) is None and prepares() == 4
        with torch.autocast("cpu", dtype=torch.bfloat16):   # (autocast on the CPU: not cuda's)
            run(x)
        assert prepares() == 4


def test_prepare_refuses_what_only_the_general_path_runs():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    assert numba_tc.prepared.prepare(a, b) is None                # CPU tensors
    assert numba_tc.prepared.prepare(a.numpy(), b.numpy()) is None  # NumPy
