"""Public entry: ``gemm``, and the registry of variants it dispatches to.

    >>> import numba_tc, numpy as np
    >>> a, b = np.random.rand(300, 200).astype(np.float32), np.random.rand(200, 500).astype(np.float32)
    >>> c = numba_tc.gemm(a, b, variant="warptile")        # NumPy in, NumPy out
    >>> [v.name for v in numba_tc.variants(ladder="simt")]
    ['naive', 'coalesced', 'smem', 'blocktile1d', 'blocktile2d', 'vectorized', 'warptile']

Everything a user can get wrong is checked here, before any kernel runs, with an exception that
names the problem; the variants' launchers then only ever see valid, normalised operands.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Union

import numpy as np

from . import arrays
from .arrays import array_kind, as_matrix, dtype_name
from .config import Variant
from .link import SIMULATOR

__all__ = ["gemm", "variants", "get_variant", "register", "NoGPUError", "UnsupportedDeviceError",
           "device_capability"]

_LADDER_ORDER = {"simt": 0, "mma": 1, "wgmma": 2}
_REGISTRY: Dict[str, Variant] = {}


class NoGPUError(RuntimeError):
    """No CUDA GPU is usable here."""


class UnsupportedDeviceError(RuntimeError):
    """The GPU is older than the variant needs."""


def register(v: Variant) -> Variant:
    if v.name in _REGISTRY or v.name == "auto":
        raise ValueError(f"variant name {v.name!r} is taken")
    _REGISTRY[v.name] = v
    return v


def variants(ladder: Optional[str] = None, dtype: Optional[str] = None) -> List[Variant]:
    """Registered variants, in ladder order (simt, mma, wgmma) and rung order."""
    vs = [v for v in _REGISTRY.values()
          if (ladder is None or v.ladder == ladder) and (dtype is None or dtype_name(dtype) in v.dtypes)]
    return sorted(vs, key=lambda v: (_LADDER_ORDER.get(v.ladder, 9), v.rung))


def get_variant(name: Union[str, Variant]) -> Variant:
    if isinstance(name, Variant):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(["auto"] + [v.name for v in variants()])
        raise ValueError(f"unknown variant {name!r}; valid variants: {valid}") from None


_CC: Dict[int, tuple] = {}


def device_capability():
    """Compute capability of the current GPU, or NoGPUError (the simulator counts as a GPU)."""
    from numba import cuda
    if SIMULATOR:
        return tuple(cuda.get_current_device().compute_capability)
    if not cuda.is_available():
        raise NoGPUError("no CUDA GPU is available (numba.cuda.is_available() is False). "
                         "Set NUMBA_ENABLE_CUDASIM=1 to run the SIMT ladder in Numba's simulator "
                         "(slow; tiny shapes), or run `python -m numba_tc` for the demo.")
    from .link import current_device_id
    d = current_device_id()
    if d not in _CC:
        _CC[d] = tuple(cuda.get_current_device().compute_capability)
    return _CC[d]


def _runs_here(v: Variant, cc) -> bool:
    """The GPU is new enough (and not too new: wgmma exists on sm_90a only), and under the
    simulator only the SIMT ladder (no linked PTX) runs."""
    cc = tuple(cc)
    return (cc >= v.min_cc and (v.max_cc is None or cc[:2] <= v.max_cc)
            and (v.ladder == "simt" or not SIMULATOR))


def _candidates(variant, dtype: str, out_dtype: str, cc) -> List[Variant]:
    """The variants to try, best first: for "auto" every one that takes this dtype and output and
    runs here, in reverse ladder order (ladders and rungs are ordered by measured speed,
    benchmarks/results); otherwise the named one, or an exception saying why it cannot run."""
    if variant == "auto":
        ok = [v for v in variants(dtype=dtype) if _runs_here(v, cc) and out_dtype in v.out_dtypes]
        if not ok:
            raise TypeError(f"no variant takes dtype {dtype} with {out_dtype} output on a GPU of "
                            f"compute capability {cc}")
        return ok[::-1]
    v = get_variant(variant)
    if dtype not in v.dtypes:
        raise TypeError(f"variant {v.name!r} takes {', '.join(v.dtypes)}, not {dtype}; "
                        f"variants for {dtype}: {', '.join(x.name for x in variants(dtype=dtype)) or 'none'}")
    if not _runs_here(v, cc):
        if SIMULATOR:
            raise UnsupportedDeviceError(f"variant {v.name!r} runs linked PTX, which Numba's CUDA "
                                         "simulator cannot execute; only the SIMT ladder runs there")
        if v.max_cc is not None and tuple(cc[:2]) > v.max_cc:
            raise UnsupportedDeviceError(f"variant {v.name!r} runs only on compute capability "
                                         f"{v.max_cc[0]}.{v.max_cc[1]} (its instructions are "
                                         f"sm_{v.max_cc[0]}{v.max_cc[1]}a-only), this GPU is {cc[0]}.{cc[1]}")
        raise UnsupportedDeviceError(f"variant {v.name!r} needs compute capability "
                                     f"{v.min_cc[0]}.{v.min_cc[1]}+, this GPU is {cc[0]}.{cc[1]}")
    if out_dtype not in v.out_dtypes:
        raise TypeError(f"variant {v.name!r} writes {', '.join(v.out_dtypes)}, not {out_dtype}")
    return [v]


def _pick(cands: List[Variant], a, b, c, named: bool) -> Variant:
    """The first candidate that takes these operands; a named variant that refuses them raises."""
    for v in cands:
        why = v.refuses(a, b, c)
        if why is None:
            return v
        if named:
            raise ValueError(f"variant {v.name!r} cannot run this problem: {why}. "
                             "variant='auto' falls back to a variant that can.")
    raise ValueError("no variant can run this problem")     # (unreachable: SIMT/mma take all)


def _stream(stream):
    from numba import cuda
    if stream is None or stream == 0:
        return cuda.default_stream()
    if hasattr(stream, "handle") and type(stream).__module__.startswith("numba"):
        return stream
    handle = getattr(stream, "cuda_stream", None) or getattr(stream, "ptr", None)   # torch, CuPy
    if isinstance(stream, int):
        handle = stream
    if handle is None:
        raise TypeError(f"stream must be a Numba, CuPy or torch stream or a raw handle, got {type(stream).__name__}")
    return cuda.external_stream(int(handle))


def _zero_fill(obj, kind: str):
    if kind == "numpy":
        obj[...] = 0
    elif kind == "torch":
        obj.zero_()
    elif hasattr(obj, "fill"):
        obj.fill(0)
    else:
        obj.copy_to_device(np.zeros(obj.shape, dtype=obj.dtype))


def _input_precision(dtype: str, variant, allow_tf32: bool) -> str:
    """The precision a float32 problem runs in: "tf32" when the caller allows it or names a
    tensor-core variant (which computes fp32 inputs as tf32), else float32 (SIMT)."""
    if dtype != "float32":
        return dtype
    if variant == "auto":
        return "tf32" if allow_tf32 else "float32"
    v = get_variant(variant)
    return "tf32" if "tf32" in v.dtypes and "float32" not in v.dtypes else "float32"


def gemm(a, b, variant: Union[str, Variant] = "auto", *, out=None, out_dtype=None, stream=None,
         allow_tf32: bool = False):
    """``a @ b`` on the GPU with the chosen variant; the result is the same kind of array as ``a``.

    a, b: 2-D NumPy arrays (copied to the GPU and back), Numba device arrays, CuPy arrays or torch
    CUDA tensors, both of one kind and one dtype; row-major, column-major or strided views with
    one unit-stride dimension. Any M, N, K >= 0 (K == 0 gives zeros, as NumPy does).
    variant: a name from ``numba_tc.variants()``, or "auto" (the fastest for this GPU and dtype).
    out: optional array of shape (M, N) and kind of ``a`` to write into (row- or column-major).
    out_dtype: the result dtype: the input dtype (the default, unless ``out`` says otherwise) or
    float32 (fp32 accumulators written without rounding to 16 bits).
    allow_tf32: with "auto", let float32 inputs run on tensor cores as tf32 (10-bit mantissa;
    relative error about 1e-3). Naming a tensor-core variant for float32 inputs implies it.
    stream: a Numba, CuPy or torch stream (default: the default stream).
    """
    kind = array_kind(a)
    if array_kind(b) != kind:
        raise TypeError(f"a and b must be the same kind of array, got {kind} and {array_kind(b)}")
    desc_a, desc_b = arrays._describe(a, "a"), arrays._describe(b, "b")
    _, sa, _, da, _ = desc_a
    _, sb, _, db, _ = desc_b
    for name, s in (("a", sa), ("b", sb)):
        if len(s) != 2:
            raise ValueError(f"{name} must be 2-D, got {len(s)}-D with shape {tuple(s)}")
    if da != db:
        raise TypeError(f"a and b must have one dtype, got {da} and {db}")
    if da not in arrays.SUPPORTED_DTYPES:
        raise TypeError(f"dtype {da} is not supported; numba_tc takes {', '.join(arrays.SUPPORTED_DTYPES)}")
    (m, k), (k2, n) = sa, sb
    if k != k2:
        raise ValueError(f"inner dimensions differ: a is {m}x{k}, b is {k2}x{n}")
    if out is not None:
        if array_kind(out) != kind:
            raise TypeError(f"out must be a {kind} array like a and b, got {array_kind(out)}")
        desc_out = arrays._describe(out, "out")
        _, so, _, do, _ = desc_out
        if tuple(so) != (m, n):
            raise ValueError(f"out has shape {tuple(so)}, expected {(m, n)}")
        if out_dtype is not None and dtype_name(out_dtype) != do:
            raise TypeError(f"out has dtype {do} but out_dtype={dtype_name(out_dtype)}")
        out_dtype = do
    out_dtype = dtype_name(out_dtype) if out_dtype is not None else da
    if variant != "auto":
        get_variant(variant)                 # unknown names fail before the GPU is touched
    if out_dtype not in (da, "float32"):
        raise TypeError(f"out_dtype {out_dtype} for {da} inputs: the result is {da} or float32")
    cc = device_capability()
    cands = _candidates(variant, _input_precision(da, variant, allow_tf32), out_dtype, cc)

    st = _stream(stream)
    if kind == "numpy":
        result = out if out is not None else np.empty((m, n), dtype=arrays._np_dtype(out_dtype))
        if m == 0 or n == 0:
            return result
        if k == 0:
            _zero_fill(result, kind)
            return result
        from numba import cuda
        dev_out = cuda.device_array((m, n), dtype=np.uint16 if out_dtype == "bfloat16" else arrays._np_dtype(out_dtype), stream=st)
        c = as_matrix(dev_out, "out", raw_bf16=out_dtype == "bfloat16")
    else:
        result = out if out is not None else arrays.new_like(kind, a, m, n, out_dtype, stream=st)
        if m == 0 or n == 0:
            return result
        if k == 0:
            _zero_fill(result, kind)
            return result
        c = as_matrix(result, "out", described=desc_out if out is not None else None)
    A = as_matrix(a, "a", stream=st, described=desc_a)
    B = as_matrix(b, "b", stream=st, described=desc_b)
    if kind != "numpy" and (c.overlaps(A) or c.overlaps(B)):
        raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
    if c.trans:          # column-major output: C^T = B^T A^T, written row-major
        A, B, c = B.transposed(), A.transposed(), c.transposed()
    _pick(cands, A, B, c, named=variant != "auto").launch(A, B, c, st)
    if kind == "numpy":
        host = arrays.to_host(dev_out, out_dtype, stream=st)
        st.synchronize()
        result[...] = host
    return result


def _register_builtin():
    from . import hopper, simt, tensorcore
    for v in simt.RUNGS + tensorcore.RUNGS + hopper.RUNGS:
        register(v)


_register_builtin()
