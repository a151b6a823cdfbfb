"""Calls planned once and run again cheaply: for callers that key their own cache by the
operands' facts, as ``numba_tc.torch`` does for a layer's calls.

``prepare`` gives a ``Prepared``: ``gemm``'s call for a fixed ``b`` and epilogue, run for any ``a``
with the facts it was made for (the inference path of a torch layer: the weight stays, each
step's input is new). ``torch_product`` is ``gemm`` for torch tensors outside autograd, looked up
by the tensors' own facts (a training step's products: every operand new each step).
"""
from __future__ import annotations

import os
from typing import Optional, Union

from . import batch, driver, registry, runtime
from .arrays import array_kind
from .calls import CALL_CACHE_SIZE, _Call, _epilogue_of, _lookup, _NotFused, _values, product
from .config import Variant
from .epilogue import Run
from .hopper.policy import current as current_policy
from .intrinsics import SIMULATOR
from .runtime import needs_torch_operator

__all__ = ["Prepared", "prepare", "torch_product"]


class Prepared:
    """One product planned for a fixed ``b`` and epilogue and for ``a``'s facts (``prepare``):
    ``enqueue(pa, po)`` computes it from another ``a`` with those facts at address ``pa`` into a
    new C-contiguous (m, n) result of ``out_dtype`` at ``po``: the launches and nothing else (no
    checks, no cache lookup). For a caller that keys its own cache by those facts and allocates
    the result (``numba_tc.torch``'s inference path: a layer's weight and bias stay, each step's
    input is new)."""
    __slots__ = ("call", "kind", "pb", "tail", "dev", "n", "out_dtype")

    def __init__(self, call: _Call, kind: str, pb: int, tail: tuple):
        self.call, self.kind, self.pb, self.tail, self.dev = call, kind, pb, tail, call.device
        self.n, self.out_dtype = call.n, call.out_dtype

    def enqueue(self, pa: int, po: int) -> None:
        """The launches, on the caller's current stream of the arrays' kind."""
        with driver.on_device(self.dev):
            self.call.plan.run((pa, self.pb, po) + self.tail, runtime.current_stream(self.kind, self.dev))


_PRODUCTS: dict = {}     # torch_product's calls by the tensors' own facts
registry.on_change(_PRODUCTS.clear)
if hasattr(os, "register_at_fork"):             # a forked child takes gemm's path, which says why it fails
    os.register_at_fork(after_in_child=_PRODUCTS.clear)


def torch_product(a, b, bias=None, out_dtype=None, variant: str = "auto", allow_tf32: bool = False):
    """``gemm(a, b, variant, out_dtype=..., allow_tf32=..., bias=bias)`` for torch CUDA tensors
    outside autograd (grad mode off, as inside ``numba_tc.torch``'s autograd function), the
    result a new tensor: after its first call, a call for tensors with the same facts (and the
    planner's policy, ``hopper.current``) is one
    key of those facts, one lookup, the allocation and the launches (``gemm`` checks and
    plans the first; an empty problem, an epilogue ``gemm`` cannot cache, or a batched one
    always takes ``gemm``). A training step makes a few such calls per linear layer, and on a
    busy host their Python is what the GPU waits for."""
    if bias is None:
        key = (a.shape, a.stride(), a.dtype, a.data_ptr() & 31, b.shape, b.stride(), b.dtype, b.data_ptr() & 31,
               a.get_device(), out_dtype, variant, allow_tf32, current_policy().key)
    else:
        key = (a.shape, a.stride(), a.dtype, a.data_ptr() & 31, b.shape, b.stride(), b.dtype, b.data_ptr() & 31,
               a.get_device(), out_dtype, variant, allow_tf32, current_policy().key, bias.shape, bias.stride(),
               bias.dtype, bias.data_ptr() & 31, bias.get_device())
    hit = _PRODUCTS.get(key)
    if hit is None:
        y = product(a, b, variant, out_dtype=out_dtype, allow_tf32=allow_tf32, bias=bias)
        if len(a.shape) == 2 and len(b.shape) == 2:
            epi_args = _epilogue_of(None, 1.0, 0.0, bias, None, None, (), None)
            call = _lookup(a, b, variant, None, out_dtype, allow_tf32, "torch", epi_args)[0]
            if call.plan is not None and (epi_args is None or call.epi is not None):
                if len(_PRODUCTS) >= CALL_CACHE_SIZE:
                    _PRODUCTS.clear()
                _PRODUCTS[key] = (call, (call.m, call.n), y.dtype)
        return y
    call, shape, dtype = hit
    out = a.new_empty(shape, dtype=dtype)
    run = None if bias is None else Run(c=0, bias=bias.data_ptr())
    with driver.on_device(call.device):
        call.plan.run(_values(a.data_ptr(), b.data_ptr(), out.data_ptr(), call.epi, run, call.plan),
                      runtime.current_stream("torch", call.device))
    return out


def prepare(a, b, variant: Union[str, Variant] = "auto", *, out_dtype=None, allow_tf32: bool = False, c=None,
            alpha=1.0, beta=0.0, bias=None, activation=None, epilogue=None, epilogue_args=(),
            a_cast: bool = False) -> Optional[Prepared]:
    """``gemm``'s call for ``a`` and ``b`` (GPU arrays, no gradient), checked and planned once,
    as a ``Prepared`` that computes it for another ``a`` with the same shape, strides, dtype,
    address alignment (mod 32) and device, while ``b`` and the epilogue's arrays stay the same
    arrays (kept alive by the caller). None where ``gemm``'s general path must
    run: NumPy or batched operands, the simulator, an empty problem, fp8 scales, torch tensors
    that are not CUDA tensors or whose product needs a gradient. ``a_cast``: ``a`` is float32
    and is read as ``b``'s 16-bit type, rounded as a cast of it would be (autocast's cast fused
    into the loads); None where no variant does that for this product (``gemv`` does, for one
    row), and the caller casts."""
    kind = array_kind(a)
    if kind == "numpy" or SIMULATOR or batch.is_batched(a, b):
        return None
    if kind == "torch" and (not (a.is_cuda and b.is_cuda) or needs_torch_operator(a, b, c, bias)):
        return None
    epi_args = _epilogue_of(c, alpha, beta, bias, activation, epilogue, epilogue_args, None)
    try:
        call, run, _, pb, _ = _lookup(a, b, variant, None, out_dtype, allow_tf32, kind, epi_args, a_cast)
    except _NotFused:
        return None
    if call.plan is None:
        return None
    return Prepared(call, kind, pb, _values(0, 0, 0, call.epi, run, call.plan)[3:])
