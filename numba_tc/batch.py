"""Batched products: ``gemm`` on 3-D operands, broadcast as ``torch.matmul`` does.

``gemm(a, b)`` with ``a`` of shape (batch, M, K) and/or ``b`` of shape (batch, K, N) returns
(batch, M, N); a 2-D operand, or a batch of one, is used for every batch. Each matrix may have
any layout a 2-D operand may have, and batches any stride: views are read as they lie, never
copied. A call runs, in order of preference:

* **one product**, when ``b`` is shared by every batch and ``a``'s matrices are stacked rows
  (batch stride = M x its row stride, as for activations (batch, tokens, features) times a
  weight): (batch * M, K) @ (K, N), on any variant;
* **one launch of a batched kernel** (the batch index in the tile scheduler, every operand's
  TMA map 3-D), where the variant has one (``Variant.batched``: the Hopper top rung) and TMA can
  read and write the operands as they lie;
* otherwise **one product per batch**, each a 2-D ``gemm`` (``explain`` says so).

The epilogue sees the rows of the batch stacked: ``row = batch_index * M + i``, so ``c`` (and a
user's array read at ``[row, col]``) is a (batch, M, N) array whose matrices are stacked rows,
and a bias has length N (one per column).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .arrays import array_kind, describe, dtype_name
from .intrinsics import SIMULATOR

__all__ = ["Batch", "is_batched", "batched_gemm"]


@dataclass(frozen=True)
class Batch:
    """A batched product's batch: ``count`` matrices, and the elements between consecutive
    matrices of A, B and C (0: one matrix for every batch)."""
    count: int
    a: int
    b: int
    c: int


def is_batched(a, b) -> bool:
    """Whether a call is a batched product (an operand with more than two dimensions)."""
    return len(getattr(a, "shape", ())) > 2 or len(getattr(b, "shape", ())) > 2


def _split(x, d):
    """(one matrix of x: its first, or x itself; how many; the elements between them, 0 when one
    serves every batch); ``d``: ``_described(x, name)``."""
    _, shape, strides = d[:3]
    if len(shape) == 2:
        return x, 1, 0
    if len(shape) != 3:
        raise ValueError(f"{d[5]} must be 2-D or 3-D (a batch of matrices), got shape {tuple(shape)}")
    if shape[0] == 0:
        return None, 0, 0
    return x[0], shape[0], strides[0] if shape[0] > 1 else 0


def _described(x, name: str):
    """``arrays.describe(x, name)`` and the name (for messages)."""
    return describe(x, name) + (name,)


def _count(ca: int, cb: int) -> int:
    if ca != cb and 1 not in (ca, cb):
        raise ValueError(f"batch sizes do not broadcast: a has {ca} matrices, b has {cb}")
    return 0 if 0 in (ca, cb) else max(ca, cb)


def _stacked(x, d, rows: int):
    """x (batch, rows, cols) seen as (batch * rows, cols) without a copy, or None when its
    matrices are not stacked rows (row-major, each right after the previous one's rows);
    ``d``: ``_described(x, name)``."""
    kind, shape, strides = d[:3]
    if len(shape) == 2:
        return x
    if strides[2] != 1 and shape[2] > 1 or (shape[0] > 1 and strides[0] != rows * strides[1]):
        return None
    return _view(x, kind, (shape[0] * shape[1], shape[2]), (strides[1], 1))


def _view(x, kind: str, shape, strides):
    """A 2-D view of x's memory (element strides)."""
    if kind == "torch":
        return x.as_strided(shape, strides)
    item = x.dtype.itemsize
    if kind == "numpy":
        return np.lib.stride_tricks.as_strided(x, shape, tuple(s * item for s in strides))
    if kind == "numba" and SIMULATOR:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
        return FakeCUDAArray(np.lib.stride_tricks.as_strided(x._ary, shape, tuple(s * item for s in strides)))
    if kind == "numba":
        from numba.cuda.cudadrv.devicearray import DeviceNDArray
        return DeviceNDArray(shape, tuple(s * item for s in strides), x.dtype, gpu_data=x.gpu_data)
    import cupy
    return cupy.lib.stride_tricks.as_strided(x, shape, tuple(s * item for s in strides))


def _new(kind: str, a, count: int, m: int, n: int, dtype: str):
    """A new C-contiguous (count, m, n) array of a's kind (and device)."""
    from . import arrays
    if kind == "numpy":
        return np.empty((count, m, n), arrays.np_dtype(dtype))
    return arrays.new_like(kind, a, count * m, n, dtype).reshape(count, m, n)


def batched_gemm(a, b, variant, out, out_dtype, stream, allow_tf32, epi: dict, gemm2d, planner, explain2d=None):
    """``gemm`` on a batch (module docstring). ``epi``: the epilogue keywords (c, alpha, beta,
    bias, activation, epilogue, epilogue_args); ``gemm2d``: the 2-D ``gemm``; ``planner(a0, b0,
    o0, variant, out_dtype, allow_tf32, batch, epi, rows)`` (the first matrices, the ``Batch``,
    the epilogue keywords, the stacked rows): the batched kernel's launch, a callable
    ``run(a0, b0, o0, stream)`` with ``run.describe()``, or None where there is none for these
    operands. With ``explain2d`` (``api.explain``), nothing runs: returns what would, e.g.
    "hopper: 128x256 batched 8"."""
    kind = array_kind(a)
    if array_kind(b) != kind:
        raise TypeError(f"a and b must be the same kind of array, got {kind} and {array_kind(b)}")
    da, db = _described(a, "a"), _described(b, "b")
    (a0, ca, sa), (b0, cb, sb) = _split(a, da), _split(b, db)
    count = _count(ca, cb)
    (m, k), (k2, n) = da[1][-2:], db[1][-2:]
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is ...x{m}x{k}, b is ...x{k2}x{n}")
    if out is None:
        out = _new(kind, a, count, m, n, dtype_name(out_dtype) if out_dtype is not None else da[3])
    do = _described(out, "out")
    if tuple(do[1]) != (count, m, n):
        raise ValueError(f"out has shape {tuple(do[1])}, expected {(count, m, n)}")
    if count == 0 or m == 0 or n == 0:
        return out
    if SIMULATOR:
        from .checks import simulator_size
        simulator_size(m, n, k, count)
    c, bias, user = epi.get("c"), epi.get("bias"), epi.get("epilogue")
    if bias is not None and len(getattr(bias, "shape", ())) == 1 and bias.shape[0] != n:
        raise ValueError(f"bias has length {bias.shape[0]}; a batched product takes one per column (N = {n})")
    o2 = _stacked(out, do, m)
    if o2 is None:
        raise ValueError("out of a batched product must hold row-major matrices, each right after the "
                         "previous one's rows (as a new contiguous array does)")
    if c is not None:
        dc = _described(c, "c")
        if tuple(dc[1]) != (count, m, n):
            raise ValueError(f"c has shape {tuple(dc[1])}, expected {(count, m, n)}")
        c2 = _stacked(c, dc, m)
        if c2 is None:
            raise ValueError("c of a batched product must hold row-major matrices, each right after the "
                             "previous one's rows (the epilogue reads it at the stacked row)")
        epi = dict(epi, c=c2)
    a2 = _stacked(a, da, m) if sb == 0 else None
    if a2 is not None:                                 # one product: (batch * M, K) @ (K, N)
        if explain2d:
            return "one product, the batch stacked: " + explain2d(a2, b0, variant, out=o2, out_dtype=out_dtype,
                                                                  allow_tf32=allow_tf32)
        gemm2d(a2, b0, variant, out=o2, out_dtype=out_dtype, stream=stream, allow_tf32=allow_tf32, **epi)
        return out
    o0 = out[0]
    run = planner(a0, b0, o0, variant, out_dtype, allow_tf32, Batch(count, sa, sb, do[2][0]), epi, count * m)
    if run is not None:
        if explain2d:
            return run.describe()
        run(a0, b0, o0, stream)
        return out
    if user is not None:
        raise ValueError("an epilogue function on a batched product needs the batched kernel (the hopper "
                         "variant, sm_90, 16-bit inputs, operands TMA can read): here each batch would be "
                         "its own product, and the function's rows would not count across the batch")
    if explain2d:
        return f"one product per batch ({count}): " + explain2d(a0, b0, variant, out=o0, out_dtype=out_dtype,
                                                              allow_tf32=allow_tf32)
    for i in range(count):
        ei = dict(epi, c=epi["c"][i * m:(i + 1) * m]) if epi.get("c") is not None else epi
        gemm2d(a[i] if ca > 1 else a0, b[i] if cb > 1 else b0, variant, out=out[i], out_dtype=out_dtype,
               stream=stream, allow_tf32=allow_tf32, **ei)
    return out
