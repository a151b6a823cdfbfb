"""Quantized linear layers for torch inference: ``QuantLinear`` holds a ``quant.QuantizedWeight``
(its packed codes, scales and zero points as buffers) and a bias, and runs ``quant.gemm``;
``quantize_model`` swaps a model's ``nn.Linear`` layers for it (``numba_tc.torch.patch``'s
``quantize=`` option is this).

    >>> import numba_tc.torch_quant as tq
    >>> tq.quantize_model(model, "int4", group=128, skip=("lm_head",))   # in place, on the GPU
    >>> with torch.no_grad():
    ...     logits = model(ids).logits
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from . import quant

__all__ = ["QuantLinear", "quantize_model"]


class QuantLinear(nn.Module):
    """``y = x @ w.T + b`` with ``w`` quantized (``quant``'s formats); inference only. The input's
    leading dimensions are flattened (rows of one product); bfloat16 or float16 inputs."""

    def __init__(self, qw: quant.QuantizedWeight, bias=None):
        super().__init__()
        if qw.kind != "torch":
            qw = quant.to_torch(qw)
        self.qw = qw
        self.in_features, self.out_features = qw.k, qw.n
        self.register_buffer("packed", qw.packed, persistent=True)
        self.register_buffer("scales", qw.scales, persistent=True)
        self.register_buffer("zeros", qw.zeros, persistent=True)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)

    @classmethod
    def from_linear(cls, lin: nn.Linear, fmt="int4", group: int = 128, scale_dtype="bfloat16") -> "QuantLinear":
        """``lin``'s weight quantized where it lies (a CUDA weight: on the GPU)."""
        w = lin.weight.detach()
        return cls(quant.quantize(w, fmt, group, scale_dtype), lin.bias)

    def forward(self, x):
        if self.packed is not self.qw.packed:          # (moved: .to and .cuda make new buffers)
            self.qw = quant.QuantizedWeight(self.qw.fmt, self.qw.n, self.qw.k, self.qw.group,
                                            self.qw.scale_dtype, self.packed, self.scales, self.zeros)
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        b = self.bias
        if b is not None and b.dtype != x.dtype:
            b = b.to(x.dtype)
        y = quant.gemm(x2, self.qw, bias=b)
        return y.reshape(*shape[:-1], self.out_features)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, format={self.qw.fmt.name}, "
                f"group={self.qw.group}, bias={self.bias is not None}")


def quantize_model(model: nn.Module, fmt="int4", group: int = 128, skip: Iterable[str] = ("lm_head",),
                   scale_dtype="bfloat16") -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (but those whose name ends with one of ``skip``)
    by a ``QuantLinear`` of its weight, in place; returns ``model``."""
    skip = tuple(skip)
    for name, mod in list(model.named_modules()):
        for child_name, child in list(mod.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is nn.Linear and not full.endswith(skip):
                setattr(mod, child_name, QuantLinear.from_linear(child, fmt, group, scale_dtype))
    return model
