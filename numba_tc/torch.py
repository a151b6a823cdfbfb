"""numba_tc in a torch program: a torch operator with autograd and torch.compile, ``Linear``, and
``patch`` to run an existing model's linear layers through numba_tc without editing it.

    >>> import torch, numba_tc.torch as ntt
    >>> y = numba_tc.gemm(x, w)               # x.requires_grad: through torch.ops.numba_tc.gemm
    >>> lin = ntt.Linear(768, 3072)           # nn.Linear's parameters and state_dict
    >>> with ntt.patched(model):              # every nn.Linear (and HF's Conv1D) forward and
    ...     loss = model(x).loss              # backward through numba_tc
    ...     loss.backward()

**The operator.** ``torch.ops.numba_tc.gemm(a, b, c, bias, alpha, beta, activation, out_dtype,
variant, allow_tf32)`` computes ``act(alpha * a @ b + beta * c + bias)`` with numba_tc (registered
with ``torch.library.custom_op``). It has a fake (meta) implementation, so
``torch.compile(fullgraph=True)`` traces it, and an autograd formula whose backward runs numba_tc
for both products: ``dA = dZ @ B^T`` and ``dB = A^T @ dZ``, where ``B^T`` and ``A^T`` are
transposed views (``.mT``: the other layout of the same memory, no copy); ``dZ`` is the incoming
gradient through the activation (its derivative at the pre-activation, recomputed by one more
numba_tc product in fp32), ``dc = beta * dZ``, ``dbias`` the sum of ``dZ`` over rows (or columns,
for a per-row bias).

``numba_tc.gemm`` takes this path by itself for torch tensors when a product needs a gradient
(grad mode on and an operand requires grad) or when torch.compile is tracing it; otherwise it
runs directly (no dispatcher cost). Eager calls on CUDA tensors take the operator's formula as a
``torch.autograd.Function`` (``_Function``), without the dispatcher's round trip through Python;
torch.compile, torch.func transforms, meta and fake tensors take the operator. A user epilogue function (``epilogue=``) is not a torch
schema type: with a gradient it raises ``NotImplementedError``; under torch.compile it runs
outside the graph (a graph break; an error with ``fullgraph=True``). ``out=`` cannot take part in
autograd (as in torch); under torch.compile the result is copied into it. ``stream=`` is not
taken on this path: run the call under ``torch.cuda.stream(...)``.

**Autocast.** torch's autocast does not know this operator: ``gemm`` computes in the dtype of
its operands. ``linear`` (``Linear``, ``patch``) casts like autocast does for ``F.linear``: the
input, weight and bias to the autocast dtype.
"""
from __future__ import annotations

import contextlib
import types
from typing import Optional

import torch
from torch import Tensor, nn

from . import calls, epilogue, prepared
from .config import Variant
from .hopper.policy import current as current_policy
from .runtime import needs_torch_operator as needs_operator
from .torch_quant import QuantLinear, quantize_model

__all__ = ["gemm", "linear", "Linear", "patch", "unpatch", "patched", "needs_operator", "QuantLinear",
           "quantize_model"]

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
_VARIANTS: dict = {}             # Variant objects passed by object (the schema takes a name)
ACTIVATIONS = tuple(epilogue.ACTIVATIONS)
#: The operator's epilogue arguments in its schema's order (its public signature), each one's type
#: from ``epilogue.TERMS`` (``Term.keywords``): every keyword a term gives the operator is here.
OP_EPILOGUE = ("c", "bias", "alpha", "beta", "activation")
SCHEMA = ("(Tensor a, Tensor b, " + ", ".join(f"{dict(epilogue.KEYWORDS[k].keywords)[k]} {k}" for k in OP_EPILOGUE)
          + ", ScalarType? out_dtype, str variant, bool allow_tf32) -> Tensor")


def _eager(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32):
    """The product, run directly (the operator's or ``_Function``'s autograd is outside)."""
    if torch.is_grad_enabled():
        with torch.no_grad():
            return _eager(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32)
    if c is None and activation is None and alpha == 1.0 and variant not in _VARIANTS and a.is_cuda:
        return prepared.torch_product(a, b, bias, out_dtype, variant, allow_tf32)
    return calls.product(a, b, _VARIANTS.get(variant, variant), out_dtype=out_dtype, allow_tf32=allow_tf32, c=c,
                         alpha=alpha, beta=beta, bias=bias, activation=activation)


@torch.library.custom_op("numba_tc::gemm", mutates_args=(), schema=SCHEMA)
def _gemm_op(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32):
    """act(alpha * a @ b + beta * c + bias) with numba_tc (``numba_tc.gemm``'s arguments)."""
    return _eager(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32)


@_gemm_op.register_fake
def _gemm_fake(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: f"a and b must be 2-D, got {a.dim()}-D and {b.dim()}-D")
    torch._check(a.dtype == b.dtype, lambda: f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    torch._check(a.shape[1] == b.shape[0],
                 lambda: f"inner dimensions differ: a is {a.shape[0]}x{a.shape[1]}, b is {b.shape[0]}x{b.shape[1]}")
    return a.new_empty((a.shape[0], b.shape[1]), dtype=a.dtype if out_dtype is None else out_dtype)


def _setup_context(ctx, inputs, output):
    a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32 = inputs
    ctx.save_for_backward(a, b, c, bias)
    ctx.args = (alpha, beta, activation, out_dtype, variant, allow_tf32)
    ctx.bias_per_row = bias is not None and not (bias.shape[0] == b.shape[1])


def _gemmable(t: Tensor) -> Tensor:
    """t with one unit-stride dimension and no zero strides (an incoming gradient may be an
    expanded view), else a contiguous copy."""
    r, c = t.stride()
    if (c == 1 and r >= max(t.shape[1], 1)) or (r == 1 and c >= max(t.shape[0], 1)):
        return t
    return t.contiguous()


def _act_grad(z: Tensor, g: Tensor, activation: str) -> Tensor:
    """g * act'(z), in fp32 (z: the fp32 pre-activation)."""
    g = g.float()
    if activation == "relu":
        return g * (z > 0)
    if activation == "silu":
        s = torch.sigmoid(z)
        return g * (s * (1 + z * (1 - s)))
    if activation == "gelu":
        cdf = 0.5 * (1.0 + torch.erf(z * 0.7071067811865476))
        pdf = torch.exp(-0.5 * z * z) * 0.3989422804014327
        return g * (cdf + z * pdf)
    if activation == "gelu_tanh":
        k0, k1 = 0.7978845608028654, 0.044715
        u = k0 * (z + k1 * z * z * z)
        t = torch.tanh(u)
        return g * (0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k0 * (1 + 3 * k1 * z * z))
    raise ValueError(f"activation {activation!r} is not one of {', '.join(map(repr, ACTIVATIONS))}")


def _backward(ctx, grad, direct: bool = False):
    """The gradients (the operator's formula, and ``_Function``'s). ``direct``: the products run
    numba_tc directly (``_eager``), for real CUDA tensors outside torch.compile when no graph of
    the backward is being built; otherwise through the operator (traceable, differentiable)."""
    a, b, c, bias = ctx.saved_tensors
    alpha, beta, activation, out_dtype, variant, allow_tf32 = ctx.args
    need_a, need_b, need_c, need_bias = ctx.needs_input_grad[:4]
    mm = _eager if direct and not torch.is_grad_enabled() else _gemm_op
    gz = grad
    if activation is not None:                 # the pre-activation, again (fp32), and act'(z)
        z = mm(a, b, c, bias, alpha, beta, None, torch.float32, variant, allow_tf32)
        gz = _act_grad(z, grad, activation)
    ga = gb = gc = gbias = None
    if need_a or need_b:
        g = _gemmable(gz if gz.dtype == a.dtype else gz.to(a.dtype))
        if need_a:                             # dA = alpha dZ @ B^T (B^T: a view of b)
            ga = mm(g, _gemmable(b.mT), None, None, alpha, 0.0, None, a.dtype, variant, allow_tf32)
        if need_b:                             # dB = alpha A^T @ dZ, in b's own layout: a column-major b
            if b.stride(0) == 1 and b.shape[1] > 1:      # (a linear's W^T) gets (dZ^T A)^T, so that W's
                gb = mm(_gemmable(g.mT), a, None, None, alpha, 0.0, None, b.dtype, variant, allow_tf32).mT
            else:                                # gradient is row-major as W is (no copy into its layout)
                gb = mm(_gemmable(a.mT), g, None, None, alpha, 0.0, None, b.dtype, variant, allow_tf32)
    if need_c and c is not None:
        gc = (gz * beta).to(c.dtype)
    if need_bias and bias is not None:
        gbias = gz.sum(dim=1 if ctx.bias_per_row else 0).to(bias.dtype)
    return ga, gb, gc, gbias, None, None, None, None, None, None


_gemm_op.register_autograd(_backward, setup_context=_setup_context)


class _Function(torch.autograd.Function):
    """The operator's autograd formula as a ``torch.autograd.Function``, for eager calls on CUDA
    tensors: the same products and gradients, without the dispatcher's round trip through
    Python for the operator and its backward, which cost more host time than the products of
    a GPT-2 layer take on the GPU: one linear layer's forward and backward at 64 rows, 1221 us of
    host time through the operator, 763 us through this (benchmarks/NOTES.md, "Where a GPT-2
    step's time went with numba_tc")."""

    @staticmethod
    def forward(ctx, *args):
        y = _eager(*args)
        _setup_context(ctx, args, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        return _backward(ctx, grad, direct=True)


_PLAIN_TENSORS = (Tensor, nn.Parameter)
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)


def _apply(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32):
    """The product, with its gradient: ``_Function`` for plain CUDA tensors in eager mode; else
    through the operator (torch.compile, torch.func transforms, meta and fake tensors: its fake
    implementation and registered formula)."""
    if (type(a) in _PLAIN_TENSORS and type(b) in _PLAIN_TENSORS and a.is_cuda and b.is_cuda
            and not torch.compiler.is_compiling() and not _transforms_active()):
        return _Function.apply(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32)
    return gemm_op(a, b, c, bias, alpha, beta, activation, out_dtype, variant, allow_tf32)


#: the operator itself: ``torch.ops.numba_tc.gemm``
gemm_op = torch.ops.numba_tc.gemm


def _out_dtype(out_dtype):
    if out_dtype is None or isinstance(out_dtype, torch.dtype):
        return out_dtype
    if isinstance(out_dtype, str):
        name = out_dtype
    else:
        from .arrays import dtype_name
        name = dtype_name(out_dtype)
    try:
        return _DTYPES[name]
    except KeyError:
        raise TypeError(f"out_dtype {out_dtype!r}: the result is float32, float16 or bfloat16") from None


def _variant_name(variant) -> str:
    if isinstance(variant, Variant):
        _VARIANTS[variant.name] = variant
        return variant.name
    if not isinstance(variant, str):
        raise TypeError(f"variant must be a variant name or a Variant, got {type(variant).__name__}")
    return variant


@torch.compiler.disable
def _outside_graph(a, b, variant, kw):
    """A product with a user's epilogue function, outside any graph (here nothing is traced, so
    ``needs_operator`` is grad mode and the operands' requires_grad alone)."""
    if needs_operator(a, b, kw["c"], kw["bias"]):
        raise NotImplementedError(
            "a user epilogue function has no gradient formula: call numba_tc.gemm under "
            "torch.no_grad() or on detached tensors, or use c=/bias=/activation= (differentiable)")
    return calls.product(a, b, variant, **kw)


def gemm(a, b, variant="auto", *, out=None, out_dtype=None, stream=None, allow_tf32=False, c=None,
         alpha=1.0, beta=0.0, bias=None, activation=None, epilogue=None, epilogue_args=()):
    """``numba_tc.gemm`` through the operator (what ``numba_tc.gemm`` calls for torch tensors
    when ``needs_operator``): autograd and torch.compile see one operator call."""
    if epilogue is not None or epilogue_args:
        return _outside_graph(a, b, variant, dict(out=out, out_dtype=out_dtype, stream=stream,
                                                  allow_tf32=allow_tf32, c=c, alpha=alpha, beta=beta,
                                                  bias=bias, activation=activation, epilogue=epilogue,
                                                  epilogue_args=epilogue_args))
    if stream is not None:
        raise ValueError("stream= is not taken for tensors that require grad or under torch.compile: "
                         "run the call under `with torch.cuda.stream(s):`")
    grad = torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or (c is not None and c.requires_grad)
                                        or (bias is not None and bias.requires_grad))
    if out is not None and grad:
        raise RuntimeError("numba_tc.gemm(..., out=...) cannot take part in autograd (an operand "
                           "requires grad): drop out= or call it under torch.no_grad()")
    for name, x in (("alpha", alpha), ("beta", beta)):
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"{name} must be a Python number, got {type(x).__name__}")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} is not one of {', '.join(map(repr, ACTIVATIONS))}")
    if beta == 0.0:
        c = None                               # (api ignores c without beta)
    elif c is None:
        raise ValueError(f"beta={beta} scales c, but no c was given")
    y = _apply(a, b, c, bias, float(alpha), float(beta), activation, _out_dtype(out_dtype),
               _variant_name(variant), bool(allow_tf32))
    if out is not None:
        out.copy_(y)
        return out
    return y


# --- nn.Linear -------------------------------------------------------------------------------

def _cast(w: Tensor, dtype, cache: Optional[dict]):
    """w in ``dtype``; a parameter that needs no gradient here (inference) is cast once per
    version of it (torch's autocast caches the same casts within one autocast region)."""
    if w.dtype == dtype:
        return w
    if cache is None or (w.requires_grad and torch.is_grad_enabled()) or torch.compiler.is_compiling():
        return w.to(dtype)
    key = (id(w), dtype)
    hit = cache.get(key)
    if hit is not None and hit[3] is w and hit[0] == w._version and hit[1] == w.data_ptr():
        return hit[2]
    wc = w.detach().to(dtype)
    cache[key] = (w._version, w.data_ptr(), wc, w)   # (w held: no new tensor takes its id meanwhile)
    return wc


def linear(x: Tensor, weight: Tensor, bias: Optional[Tensor] = None, *, weight_in_out: bool = False,
           variant="auto", cache: Optional[dict] = None) -> Tensor:
    """``x @ weight.T + bias`` (``F.linear``) with numba_tc, for x of shape (..., in); with
    ``weight_in_out`` the weight is (in, out) (HF's Conv1D) and it is ``x @ weight + bias``. Under
    autocast x, weight and bias are cast to the autocast dtype first, as ``F.linear`` is. ``cache``:
    a dict where the layer's inference-time calls and weight casts are kept (``Linear`` and
    ``patch`` pass one); with it and grad mode off, the call takes ``_inference``'s path."""
    if cache is not None and not torch.is_grad_enabled() and not torch.compiler.is_compiling():
        y = _inference(x, weight, bias, weight_in_out, variant, cache)
        if y is not None:
            return y
    if torch.is_autocast_enabled("cuda"):
        dt = torch.get_autocast_dtype("cuda")
        x = x.to(dt)
        weight = _cast(weight, dt, cache)
        if bias is not None:
            bias = _cast(bias, dt, cache)
    x2 = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
    x2 = _gemmable(x2)
    w = weight if weight_in_out else weight.mT          # (in, out); W^T is a column-major view
    allow_tf32 = x2.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    if needs_operator(x2, w, None, bias):
        y = _apply(x2, w, None, bias, 1.0, 0.0, None, None, _variant_name(variant), allow_tf32)
    else:
        y = calls.product(x2, w, variant, allow_tf32=allow_tf32, bias=bias)
    return y if x.dim() == 2 else y.view(*x.shape[:-1], y.shape[-1])


_INFERENCE_ENTRIES = 32       # per layer: the inputs' facts seen (a prompt, then each decode step)
_CASTS = {torch.bfloat16: Tensor.bfloat16, torch.float16: Tensor.half}   # (cheaper to call than .to)


def _inference(x: Tensor, weight: Tensor, bias, weight_in_out: bool, variant, cache: dict):
    """``linear`` without autograd (grad mode off), at the cost of a lookup and the launches: per
    layer (``cache``), the call is prepared once for each kind of input (its shape, strides,
    dtype, alignment, device, the autocast dtype and tf32 setting) and planner policy with the weight and bias cast
    for it (``prepared.prepare``), and kept while the parameters are the same tensors (held, so that
    no new one takes their address) with the same data, unchanged in place (their versions).
    Under autocast a float32 input is read as the autocast type by the product itself where it
    can (``prepared.prepare(..., a_cast=True)``: one row, ``gemv``), else cast first. An input of
    more than two dimensions is taken as the matrix of its rows when it is contiguous (no
    reshape), and the result is made in its shape. None where the general path must run
    (``prepared.prepare``'s cases, other strides)."""
    if not isinstance(variant, str):
        return None
    stamp = (weight._version, weight.data_ptr(), None if bias is None else (bias._version, bias.data_ptr()))
    dt = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
    if dt is not None and x.dtype != dt:
        if x.dtype == torch.float32 and dt in _CASTS:
            key = ("fused", x.shape, x.stride(), x.data_ptr() & 31, x.get_device(), variant, dt, current_policy().key)
            hit = _entry(cache, key, stamp, weight, bias, x, weight_in_out, variant, dt, False, True)
            if hit[5] is not None:
                return _enqueue(hit, x)
        cast = _CASTS.get(dt)
        x = cast(x) if cast is not None else x.to(dt)
    tf32 = x.dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32
    key = ("inference", x.shape, x.stride(), x.dtype, x.data_ptr() & 31, x.get_device(), variant, tf32,
           current_policy().key)
    hit = _entry(cache, key, stamp, weight, bias, x, weight_in_out, variant, dt, tf32, False)
    return None if hit[5] is None else _enqueue(hit, x)


def _entry(cache, key, stamp, weight, bias, x, weight_in_out, variant, dt, tf32, fused) -> tuple:
    """``_inference``'s entry for ``key``: (stamp, weight, bias, the result's shape and dtype,
    ``prepared.Prepared`` or None where the product cannot be prepared so, the casts it reads); made
    (``_prepare_layer``) when missing or stale."""
    hit = cache.get(key)
    if hit is None or hit[0] != stamp or hit[1] is not weight or hit[2] is not bias:
        if len(cache) >= _INFERENCE_ENTRIES:
            cache.clear()
        cache[key] = hit = (stamp,) + _prepare_layer(x, weight, bias, weight_in_out, variant, dt, tf32, fused, cache)
    return hit


def _enqueue(hit, x):
    y = x.new_empty(hit[3], dtype=hit[4])
    hit[5].enqueue(x.data_ptr(), y.data_ptr())
    return y


def _prepare_layer(x, weight, bias, weight_in_out, variant, dt, tf32, fused, cache):
    """(weight, bias, the result's shape and dtype, ``prepared.Prepared`` (None: the general path
    runs), the casts it reads) for ``_inference``; ``fused``: x is float32, read as ``dt``."""
    none = (weight, bias, None, None, None, None, None)
    x2 = x
    if x.dim() != 2:
        if x.dim() < 2 or not x.is_contiguous():
            return none
        x2 = x.view(-1, x.shape[-1])
    if _gemmable(x2) is not x2:
        return none
    w = weight if dt is None else _cast(weight, dt, cache)    # (one cast a weight, shared by its entries)
    b = bias if bias is None or dt is None else _cast(bias, dt, cache)
    prep = prepared.prepare(x2, w if weight_in_out else w.mT, variant, allow_tf32=tf32, bias=b, a_cast=fused)
    if prep is None:
        return none
    return weight, bias, (*x.shape[:-1], prep.n), _DTYPES[prep.out_dtype], prep, w, b


def _runs(x: Tensor, weight: Tensor) -> bool:
    """numba_tc takes this call (CUDA tensors of its dtypes); otherwise the layer's own forward."""
    return weight.is_cuda and x.is_cuda and weight.dtype in _FLOATS and x.dtype in _FLOATS


_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


class Linear(nn.Linear):
    """``nn.Linear`` run by numba_tc: the same parameters (``weight`` (out, in), ``bias``) and
    ``state_dict``, so a checkpoint of either loads into the other. Forward and backward run
    numba_tc on CUDA tensors (through ``numba_tc.gemm``'s operator when a gradient is needed);
    elsewhere (CPU, float64) it is ``nn.Linear``."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None, variant="auto"):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.variant = variant
        self._ntc_cache = {}

    @classmethod
    def from_linear(cls, lin: nn.Linear, variant="auto") -> "Linear":
        """A ``Linear`` sharing ``lin``'s parameters."""
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.in_features, new.out_features = lin.in_features, lin.out_features
        new.weight = lin.weight
        new.bias = lin.bias
        new.variant = variant
        new._ntc_cache = {}
        return new

    def forward(self, x: Tensor) -> Tensor:
        if not _runs(x, self.weight):
            return super().forward(x)
        return linear(x, self.weight, self.bias, variant=self.variant, cache=self._ntc_cache)


# --- patching an existing model ----------------------------------------------------------------

def _linear_forward(self, x):
    if not _runs(x, self.weight):
        return type(self).forward(self, x)
    return linear(x, self.weight, self.bias, variant=self._ntc_variant, cache=self._ntc_cache)


def _conv1d_forward(self, x):
    if not _runs(x, self.weight):
        return type(self).forward(self, x)
    return linear(x, self.weight, self.bias, weight_in_out=True, variant=self._ntc_variant,
                  cache=self._ntc_cache)


def _is_conv1d(m) -> bool:
    """HF transformers' Conv1D (GPT-2): weight (in, out), forward x @ weight + bias."""
    return (type(m).__name__ == "Conv1D" and isinstance(getattr(m, "weight", None), Tensor)
            and m.weight.dim() == 2 and getattr(m, "nf", None) == m.weight.shape[1])


def patch(model: nn.Module, variant="auto", *, quantize=None, group: int = 128) -> nn.Module:
    """Run every ``nn.Linear`` (and HF transformers' ``Conv1D``) in ``model`` through numba_tc, in
    place, without editing the model's code: each layer's forward is replaced on the instance
    (parameters, ``state_dict`` and hooks are untouched). Returns the model; ``unpatch`` undoes it.
    ``quantize`` ("int4", "int4_zp", "int8" or a ``quant.user_format``): for inference, each
    ``nn.Linear`` is replaced by a ``QuantLinear`` of its weight in that format, ``group`` elements
    of K a scale (``torch_quant.quantize_model``; not undone by ``unpatch``)."""
    if quantize is not None:
        quantize_model(model, quantize, group)
    for m in model.modules():
        if isinstance(m, Linear) or getattr(m, "_ntc_patched", False):
            continue
        if isinstance(m, nn.Linear):
            fwd = _linear_forward
        elif _is_conv1d(m):
            fwd = _conv1d_forward
        else:
            continue
        m.forward = types.MethodType(fwd, m)
        m._ntc_patched, m._ntc_variant, m._ntc_cache = True, variant, {}
    return model


def unpatch(model: nn.Module) -> nn.Module:
    """Undo ``patch``: every layer runs its own forward again."""
    for m in model.modules():
        if getattr(m, "_ntc_patched", False):
            for name in ("forward", "_ntc_patched", "_ntc_variant", "_ntc_cache"):
                m.__dict__.pop(name, None)
    return model


@contextlib.contextmanager
def patched(model: nn.Module, variant="auto"):
    """``with patched(model):`` the model's linear layers run through numba_tc in the block."""
    patch(model, variant)
    try:
        yield model
    finally:
        unpatch(model)
