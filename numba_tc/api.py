"""Public entry: ``gemm`` (and ``explain``), dispatching to the registered variants
(``registry``).

    >>> import numba_tc, numpy as np
    >>> a, b = np.random.rand(300, 200).astype(np.float32), np.random.rand(200, 500).astype(np.float32)
    >>> c = numba_tc.gemm(a, b, variant="warptile")        # NumPy in, NumPy out
    >>> [v.name for v in numba_tc.variants(ladder="simt")]
    ['naive', 'coalesced', 'smem', 'blocktile1d', 'blocktile2d', 'vectorized', 'warptile']

A call on torch tensors that needs a gradient (or that torch.compile traces) goes through the
torch operator (``numba_tc.torch``, the layer above, imported on the first such call); every
other call is ``calls.product``: the path of a call (ARCHITECTURE.md), its cache of planned calls
and their launches.
"""
from __future__ import annotations

from typing import Optional, Union

from . import batch, calls
# (_CALLS, _BATCHED, _epilogue_facts, operand_facts: read here by qproduct and benchmarks/models.py)
from .calls import _BATCHED, _CALLS, _epilogue_facts, _epilogue_of, operand_facts, product  # noqa: F401
from .config import Variant
from .errors import EpilogueError, NoGPUError, UnsupportedDeviceError
from .registry import get_variant, register, registered, unregister, variant_from, variants
from .runtime import default_device, device_capability, needs_torch_operator

__all__ = ["gemm", "explain", "variants", "get_variant", "register", "unregister", "registered", "variant_from",
           "NoGPUError", "UnsupportedDeviceError", "EpilogueError", "device_capability", "default_device"]


def gemm(a, b, variant: Union[str, Variant] = "auto", *, out=None, out_dtype=None, stream=None,
         allow_tf32: bool = False, c=None, alpha: float = 1.0, beta: float = 0.0, bias=None,
         activation: Optional[str] = None, epilogue=None, epilogue_args=(), scale_a=None, scale_b=None):
    """``a @ b`` on the GPU with the chosen variant; the result is the same kind of array as ``a``.

    a, b: 2-D NumPy arrays (copied to the GPU and back), Numba device arrays, CuPy arrays or torch
    CUDA tensors, both of one kind and one dtype, on one GPU; row-major, column-major or strided
    views with one unit-stride dimension. Any M, N, K >= 0 (K == 0 gives zeros, as NumPy does).
    NaN and Inf among the inputs give IEEE results, as a float64 product would.
    variant: a name from ``numba_tc.variants()``, a ``Variant``, or "auto" (the fastest for this
    GPU and dtype).
    out: optional array of shape (M, N), of the kind and device of ``a``, to write into (row- or
    column-major).
    out_dtype: the result dtype: the input dtype (the default, unless ``out`` says otherwise) or
    float32 (fp32 accumulators written without rounding to 16 bits).
    allow_tf32: with "auto", let float32 inputs run on tensor cores as tf32 (10-bit mantissa;
    relative error about 3e-4). Naming a tensor-core variant for float32 inputs implies it.
    stream: a torch, CuPy, Numba or cuda.core stream or a raw handle. Default: the caller's
    current stream on the operands' device (torch's or CuPy's current stream; Numba's default
    stream for Numba and NumPy arrays). The call runs on the device that holds the operands and
    leaves the current device as it was; it never synchronizes, except to copy a NumPy result back.

    The epilogue, fused into the kernel's store (fp32, before rounding to the output type):
    ``out = epilogue(act(alpha * a @ b + beta * c + bias), row, col, *epilogue_args)``.
    c: an (M, N) array (the output's dtype or float32; may be ``out`` itself, to accumulate in
    place), scaled by beta (not read when beta is 0, as in torch.addmm). bias: a 1-D array of
    length N (one value per column; also when M == N) or M (one per row). activation: "relu",
    "gelu" (erf), "gelu_tanh" or "silu".
    scale_a, scale_b: fp8 inputs (float8_e4m3fn, float8_e5m2, or one of each) are products of
    quantized values, and need both, float32 arrays read on the GPU (a captured graph replays with
    new values): one value each (per-tensor: the product is ``(scale_a * a) @ (scale_b * b)``),
    or block-wise, ``scale_a`` of shape (M, ceil(K/128)) (a's rows in 1x128 blocks of K) and
    ``scale_b`` (ceil(K/128), ceil(N/128)) (b in 128x128 blocks), applied as each 128 of K is
    summed (``a[i, k]`` dequantizes to ``a[i, k] * scale_a[i, k // 128]``, ``b[k, j]`` to
    ``b[k, j] * scale_b[k // 128, j // 128]``; ``out`` row-major). The result is bfloat16
    (default), float16 or float32. wgmma reads fp8 operands k-major
    only: ``a`` row-major and ``b`` column-major (``b = w.T`` of a row-major (N, K) weight) run
    as they are, other layouts through a transposing copy.
    epilogue: a ``numba.cuda.jit(device=True)`` function ``f(acc, row, col, *epilogue_args)``
    returning the value to store (one real number; it only reads its arrays: no writes, no
    atomics, no raise); epilogue_args: a tuple of arrays (of the operands' kind and device,
    indexed as in any Numba kernel) and ints or floats. A function is compiled into the kernel
    and cached on disk by its code: a new process reuses it, an edited one is rebuilt.

    torch tensors that need a gradient, and calls torch.compile traces, go through the torch
    operator ``torch.ops.numba_tc.gemm`` (``numba_tc.torch``: autograd, fake tensors).

    Returns the (M, N) result: a new array of ``a``'s kind, or ``out``.

    Raises (each message names the argument and the problem; see also ``checks``):
      TypeError: arguments of another kind, dtype or type (a, b, out, c, bias, scales, epilogue
        arrays), an ``out_dtype`` the inputs cannot produce, a variant that does not take this
        dtype, an ``epilogue`` that is not a device function.
      ValueError: wrong shapes or dimensions (an epilogue array the function indexes beyond its
        shape too), ``out`` overlapping an input or an array the epilogue reads (but c itself),
        strides with no unit-stride dimension, operands on two GPUs, an unknown variant (the valid
        ones are listed) or one that cannot run these operands, an unknown activation, a problem
        too large for Numba's CUDA simulator.
      numba_tc.NoGPUError: no CUDA GPU, or a process forked after CUDA was used (start it with
        the spawn start method instead).
      numba_tc.UnsupportedDeviceError: a GPU too old (or too new: wgmma is sm_90a only) for the
        named variant, or a variant Numba's CUDA simulator cannot run.
      numba_tc.EpilogueError: within seconds, before a kernel is built, an epilogue function that
        cannot be the kernel's, named with its file:line: the wrong number of parameters, an
        undefined name, recursion, raise or assert, writes or atomics, a return value that is not
        one real number, anything Numba does not compile (with Numba's message).
      numba_tc.CaptureError: NumPy operands while the stream is being captured into a CUDA graph.
      numba_tc.CudaError: a CUDA driver call failed.

    Example::

        >>> import numpy as np, numba_tc
        >>> a = np.ones((300, 200), np.float32); b = np.ones((200, 500), np.float32)
        >>> c = numba_tc.gemm(a, b)                    # NumPy in, NumPy out: (300, 500) of 200.0
        >>> c = numba_tc.gemm(a, b, variant="warptile", bias=np.arange(500, dtype=np.float32),
        ...                   activation="relu")      # relu(a @ b + bias), one kernel
        >>> import torch                               # torch CUDA tensors in, a tensor out
        >>> x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
        >>> y = numba_tc.gemm(x, x.T, out_dtype="float32")   # x.T: a column-major view, no copy
    """
    if type(a).__module__.startswith("torch") and needs_torch_operator(a, b, c, bias):
        if scale_a is None and scale_b is None:
            return _with_gradient(a, b, variant, out, dict(out_dtype=out_dtype, stream=stream, allow_tf32=allow_tf32,
                                                           c=c, alpha=alpha, beta=beta, bias=bias, activation=activation,
                                                           epilogue=epilogue, epilogue_args=epilogue_args))
        if not batch.is_batched(a, b):       # (a batched one: product says batched fp8 is not supported)
            raise TypeError("fp8 products (scale_a, scale_b) have no autograd formula here: call it under "
                            "torch.no_grad(), on tensors that do not require grad")
    return product(a, b, variant, out, out_dtype, stream, allow_tf32, c, alpha, beta, bias, activation, epilogue,
                   epilogue_args, scale_a, scale_b)


def _with_gradient(a, b, variant, out, kw: dict):
    """A product of torch tensors through the torch operator (``needs_torch_operator``); a batched
    one only where it is one 2-D product (the operator has no batched form yet: never silently
    detached)."""
    if not batch.is_batched(a, b):
        return _torch_ops().gemm(a, b, variant, out=out, **kw)
    if len(b.shape) != 2 or not a.is_contiguous():
        raise TypeError("a batched product of tensors that need a gradient (or under torch.compile) "
                        "runs through the torch operator only as one 2-D product: a contiguous 3-D a "
                        "times a 2-D b; use torch.matmul for this one")
    if out is not None:
        raise TypeError("out= with tensors that need a gradient: autograd cannot write into out")
    c = kw["c"]
    res = gemm(a.reshape(-1, a.shape[-1]), b, variant, **dict(kw, c=None if c is None else c.reshape(-1, b.shape[1])))
    return res.reshape(a.shape[0], a.shape[1], b.shape[1])


def explain(a, b, variant: Union[str, Variant] = "auto", *, out=None, out_dtype=None, allow_tf32: bool = False,
            scale_a=None, scale_b=None, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, epilogue=None,
            epilogue_args=()) -> str:
    """What ``gemm(a, b, variant, out=out, ...)`` runs, without running it: the variant chosen and
    its launches, e.g. "hopper: 128x256 split-K 4; fixup" (fp8 inputs: with their scales; an
    epilogue: with its arguments, which may change the plan). NumPy operands are planned as their
    copies on the default GPU would be (NoGPUError without one; under Numba's CUDA simulator, what
    the simulator runs). (The plan is made, so its kernels are compiled or loaded; the call cache
    is left alone.)"""
    if batch.is_batched(a, b):
        return batch.batched_gemm(a, b, variant, out, out_dtype, None, allow_tf32, calls.NO_EPILOGUE, product,
                                  calls.batched_launch, explain)
    scales = None if scale_a is None and scale_b is None else (scale_a, scale_b)
    return calls.describe(a, b, variant, out, out_dtype, allow_tf32,
                          _epilogue_of(c, alpha, beta, bias, activation, epilogue, epilogue_args, scales))


_NT = None


def _torch_ops():
    """numba_tc.torch (the torch operator), imported on the first torch tensor that needs it, never
    before (its registration costs seconds in a fresh process). It is the layer above ``calls``
    and imports nothing of this module."""
    global _NT
    if _NT is None:
        import numba_tc.torch             # (an import statement: torch.compile traces it)
        _NT = numba_tc.torch
    return _NT


