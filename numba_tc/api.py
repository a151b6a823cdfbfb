"""Public entry: ``gemm``, and the registry of variants it dispatches to.

    >>> import numba_tc, numpy as np
    >>> a, b = np.random.rand(300, 200).astype(np.float32), np.random.rand(200, 500).astype(np.float32)
    >>> c = numba_tc.gemm(a, b, variant="warptile")        # NumPy in, NumPy out
    >>> [v.name for v in numba_tc.variants(ladder="simt")]
    ['naive', 'coalesced', 'smem', 'blocktile1d', 'blocktile2d', 'vectorized', 'warptile']

The path of a call (ARCHITECTURE.md): the operands' facts (kind, shapes, strides, dtypes, address
alignment, device) are the key of a cache of ``_Call``s; on a miss, everything a user can get
wrong is checked, with an exception that names the problem, a variant is picked and its launches
planned (``plan.Plan``); on a hit the call allocates the result, resolves the caller's stream on
the operands' device (``runtime``) and enqueues the launches (``driver``).
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import weakref
from typing import Dict, List, Optional, Union

import numpy as np

from . import arrays, batch, driver, runtime, user_epilogue
from .arrays import array_kind, as_matrix, dtype_name
from .config import MmaConfig, SimtConfig, Variant, WgmmaConfig
from .epilogue import PLAIN
from .epilogue_args import bind, is_plain, runtime_values
from .errors import CaptureError, EpilogueError, NoGPUError, UnsupportedDeviceError
from .intrinsics import SIMULATOR
from .layout import FP8
from .plan import Plan

__all__ = ["gemm", "explain", "variants", "get_variant", "register", "unregister", "registered", "variant_from",
           "NoGPUError", "UnsupportedDeviceError", "EpilogueError", "device_capability", "default_device"]

_LADDER_ORDER = {"simt": 0, "mma": 1, "wgmma": 2, "rows": 3}
_REGISTRY: Dict[str, Variant] = {}


def register(v: Variant) -> Variant:
    if v.name in _REGISTRY or v.name == "auto":
        raise ValueError(f"variant name {v.name!r} is taken")
    _REGISTRY[v.name] = v
    _CALLS.clear()
    return v


def unregister(name: str) -> None:
    _REGISTRY.pop(name if isinstance(name, str) else name.name, None)
    _CALLS.clear()


@contextlib.contextmanager
def registered(v: Variant):
    """``with numba_tc.registered(v):`` the variant is in the registry (and in "auto"'s choice)
    for the block only."""
    register(v)
    try:
        yield v
    finally:
        unregister(v.name)


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
    except (KeyError, TypeError):
        valid = ", ".join(["auto"] + [v.name for v in variants()])
        raise ValueError(f"unknown variant {name!r}; valid variants: {valid}") from None


def variant_from(config, name: Optional[str] = None, splits: Optional[int] = None) -> Variant:
    """An unregistered variant running ``config`` (a ``SimtConfig``, ``MmaConfig``, or a
    ``WgmmaConfig`` or tuple of them) with its ladder's kernel: pass it to
    ``gemm(..., variant=v)`` or ``bench.run``, or register it (``registered``). ``splits`` (a
    persistent ``WgmmaConfig``): K split that many ways, whatever the cost model would choose."""
    from . import hopper, simt, tensorcore
    name = name or "custom_" + hashlib.sha1(repr((config, splits)).encode()).hexdigest()[:8]
    if splits is not None and not (isinstance(config, WgmmaConfig) or (
            isinstance(config, tuple) and config and isinstance(config[0], WgmmaConfig))):
        raise TypeError("splits applies to a WgmmaConfig (the Hopper ladder's split-K)")
    if isinstance(config, SimtConfig):
        return simt.variant_from(config, name)
    if isinstance(config, MmaConfig):
        return tensorcore.variant_from(config, name)
    if isinstance(config, WgmmaConfig) or (isinstance(config, tuple) and config
                                           and all(isinstance(c, WgmmaConfig) for c in config)):
        return hopper.variant_from(config, name, splits)
    raise TypeError(f"config must be a SimtConfig, MmaConfig or WgmmaConfig, got {type(config).__name__}")


def _cuda_initialized() -> bool:
    """Whether this process has initialized the CUDA driver (numba_tc's or Numba's), read without
    initializing it."""
    import sys
    if driver.initialized():
        return True
    nd = sys.modules.get("numba.cuda.cudadrv.driver")
    return getattr(getattr(nd, "driver", None), "pid", None) is not None


_FORKED_FROM: Optional[int] = None       # the parent's pid, in a child forked after CUDA was used


def _after_fork_in_child() -> None:
    global _FORKED_FROM
    if _FORKED_FROM is None and _cuda_initialized():
        _FORKED_FROM = os.getppid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _check_not_forked() -> None:
    """NoGPUError saying so in a child forked after its parent used CUDA, where every driver call
    fails (CUDA cannot cross a fork) and the GPU would otherwise look absent."""
    if _FORKED_FROM is not None and not SIMULATOR:
        raise NoGPUError(f"CUDA cannot be used in this process: it was forked from process {_FORKED_FROM} "
                         "after that one had initialized CUDA, and the CUDA driver does not survive a fork. "
                         "Start worker processes with the spawn start method "
                         "(multiprocessing.get_context('spawn'), or multiprocessing.set_start_method('spawn') "
                         "before creating them; torch.multiprocessing likewise), or use CUDA in the parent "
                         "only after forking.")


def default_device() -> int:
    """The device for NumPy operands: Numba's current device (made current if none is); 0 under
    Numba's CUDA simulator. NoGPUError without a GPU, or in a child forked after CUDA was used."""
    from numba import cuda
    if SIMULATOR:
        return 0
    _check_not_forked()
    if not cuda.is_available():
        raise NoGPUError("no CUDA GPU is available (numba.cuda.is_available() is False). To run "
                         "the float32 SIMT ladder in Numba's CUDA simulator (slow; tiny shapes), set "
                         "NUMBA_ENABLE_CUDASIM=1 in the environment before Python starts; or run "
                         "`python -m numba_tc` for the demo.")
    dev = driver.current_device()
    return cuda.get_current_device().id if dev is None else dev


def device_capability(device: Optional[int] = None):
    """Compute capability of ``device`` (default: the current GPU), or NoGPUError (the
    simulator counts as a GPU)."""
    if SIMULATOR:
        from numba import cuda
        return tuple(cuda.get_current_device().compute_capability)
    _check_not_forked()
    return driver.capability(default_device() if device is None else device)


def _runs_here(v: Variant, cc) -> bool:
    """The GPU is new enough (and not too new: wgmma exists on sm_90a only), and under the
    simulator only the SIMT ladder (no linked PTX) runs."""
    cc = tuple(cc)
    return (cc >= v.min_cc and (v.max_cc is None or cc[:2] <= v.max_cc)
            and (v.ladder == "simt" or not SIMULATOR))


def candidates(variant, dtype: str, out_dtype: str, cc) -> List[Variant]:
    """The variants to try, best first: for "auto" every one that takes this dtype and output and
    runs here, in reverse ladder order (ladders and rungs are ordered by measured speed,
    benchmarks/results); otherwise the named one, or an exception saying why it cannot run."""
    if variant == "auto":
        ok = [v for v in variants(dtype=dtype) if _runs_here(v, cc) and out_dtype in v.out_dtypes]
        if not ok:
            if dtype in FP8 and not SIMULATOR:
                raise UnsupportedDeviceError(f"fp8 products run on Hopper's fp8 wgmma (compute capability 9.0, "
                                             f"sm_90a); this GPU is {cc[0]}.{cc[1]}")
            if SIMULATOR:
                raise UnsupportedDeviceError(f"Numba's CUDA simulator runs the float32 SIMT ladder only, "
                                             f"not {dtype} inputs (unset NUMBA_ENABLE_CUDASIM on a GPU)")
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


def pick(cands: List[Variant], a, b, c, named: bool) -> Variant:
    """The first candidate that takes these operands; a named variant that refuses them raises."""
    for v in cands:
        if not named and not v.auto_takes(a, b, c):
            continue
        why = v.refuses(a, b, c)
        if why is None:
            return v
        if named:
            raise ValueError(f"variant {v.name!r} cannot run this problem: {why}. "
                             "variant='auto' falls back to a variant that can.")
    raise ValueError("no variant can run this problem")     # (unreachable: SIMT/mma take all)


def _input_precision(dtype: str, variant, allow_tf32: bool) -> str:
    """The precision a float32 problem runs in: "tf32" when the caller allows it or names a
    tensor-core variant (which computes fp32 inputs as tf32), else float32 (SIMT)."""
    if dtype != "float32":
        return dtype
    if variant == "auto":
        return "tf32" if allow_tf32 else "float32"
    v = get_variant(variant)
    return "tf32" if "tf32" in v.dtypes and "float32" not in v.dtypes else "float32"


def _zero_fill(obj, kind: str):
    if kind == "numpy":
        obj[...] = 0
    elif kind == "torch":
        obj.zero_()
    elif hasattr(obj, "fill"):
        obj.fill(0)
    else:
        obj.copy_to_device(np.zeros(obj.shape, dtype=obj.dtype))


FP8_OUT = ("bfloat16", "float16", "float32")       # what fp8 inputs may produce (the first by default)


class _Problem:
    """A call's operands, checked: kinds, descriptions, sizes, dtypes, device, candidates."""

    def __init__(self, a, b, variant, out, out_dtype, allow_tf32, a_cast=False):
        if not isinstance(variant, (str, Variant)):
            raise TypeError(f"variant must be a variant name or a Variant, got {type(variant).__name__} "
                            "(pass an output array as out=...)")
        self.kind = kind = array_kind(a)
        if array_kind(b) != kind:
            raise TypeError(f"a and b must be the same kind of array, got {kind} and {array_kind(b)}")
        self.desc_a, self.desc_b = arrays.describe(a, "a"), arrays.describe(b, "b")
        (sa, da), (sb, db) = (self.desc_a[1], self.desc_a[3]), (self.desc_b[1], self.desc_b[3])
        for name, s in (("a", sa), ("b", sb)):
            if len(s) != 2:
                raise ValueError(f"{name} must be 2-D, got {len(s)}-D with shape {tuple(s)}")
        if a_cast:                     # a float32 a read as b's 16-bit type (``prepare``)
            if da != "float32" or db not in ("float16", "bfloat16"):
                raise TypeError(f"a_cast reads a float32 a as b's 16-bit type, not {da} as {db}")
            da = db
        if da != db and not (da in FP8 and db in FP8):
            raise TypeError(f"a and b must have one dtype (or both be fp8: {' or '.join(FP8)}), got {da} and {db}")
        for dt in (da, db):
            if dt not in arrays.SUPPORTED_DTYPES:
                raise TypeError(f"dtype {dt} is not supported; numba_tc takes {', '.join(arrays.SUPPORTED_DTYPES)}")
        (m, k), (k2, n) = sa, sb
        if k != k2:
            raise ValueError(f"inner dimensions differ: a is {m}x{k}, b is {k2}x{n}")
        allowed = FP8_OUT if da in FP8 else (da, "float32")
        self.desc_out = None
        if out is not None:
            if array_kind(out) != kind:
                raise TypeError(f"out must be a {kind} array like a and b, got {array_kind(out)}")
            self.desc_out = arrays.describe(out, "out")
            so, do = self.desc_out[1], self.desc_out[3]
            if tuple(so) != (m, n):
                raise ValueError(f"out has shape {tuple(so)}, expected {(m, n)}")
            if do not in allowed:
                raise TypeError(f"out has dtype {do}, but the result of {da} inputs is "
                                f"{' or '.join(dict.fromkeys(allowed))}")
            if out_dtype is not None and dtype_name(out_dtype) != do:
                raise TypeError(f"out has dtype {do} but out_dtype={dtype_name(out_dtype)}")
            out_dtype = do
        out_dtype = dtype_name(out_dtype) if out_dtype is not None else allowed[0]
        if out_dtype not in allowed:
            raise TypeError(f"out_dtype {out_dtype} for {da} inputs: the result is "
                            f"{' or '.join(dict.fromkeys(allowed))}")
        if variant != "auto":
            get_variant(variant)                 # unknown names fail before the GPU is touched
        self.m, self.n, self.k, self.dtype, self.out_dtype = m, n, k, da, out_dtype
        self.device = self._device(a, b, out)
        cc = device_capability(self.device)
        self.cands = candidates(variant, _input_precision(da, variant, allow_tf32), out_dtype, cc)
        self.named = variant != "auto"
        self.a_cast = a_cast
        if a_cast:
            self.cands = [v for v in self.cands if v.a_cast]

    def _device(self, a, b, out) -> int:
        if self.kind == "numpy" or SIMULATOR:
            return default_device()
        devs = [runtime.device_of(x, self.kind) for x in (a, b)]
        names = ["a", "b"]
        if out is not None:
            devs.append(runtime.device_of(out, self.kind))
            names.append("out")
        if devs[0] < 0:
            raise TypeError(f"a is not on a CUDA device ({a.device}): move it to one")
        for name, d in zip(names[1:], devs[1:]):
            if d != devs[0]:
                raise ValueError(f"a is on device {devs[0]} but {name} is on device {d}: "
                                 "operands and out must be on one GPU")
        return devs[0]

    def plan(self, A, B, C, epi=None) -> Plan:
        """The launches; ``epi``: the call's epilogue (``epilogue_args.Bound``), or None."""
        swap = C.trans          # column-major output: C^T = B^T A^T, written row-major
        if swap and epi is not None and epi.spec.scales == "block":
            raise ValueError("block-wise scales need a row-major out: a column-major one is written as "
                             "C^T = B^T A^T, whose operands' blocks are the other way round")
        if swap:
            A, B, C = B.transposed(), A.transposed(), C.transposed()
        if self.a_cast and (swap or not any(v.auto_takes(A, B, C) for v in self.cands)):
            raise _NotFused()
        v = pick(self.cands, A, B, C, self.named)
        if epi is None:
            plan = Plan(v.plan(A, B, C, self.device), self.device, swap)
            plan.variant = v.name
            return plan
        spec = epi.spec.flipped() if swap else epi.spec
        try:
            with user_epilogue.before_build(spec.user):
                plan = Plan(v.plan(A, B, C, self.device, epi=spec), self.device, swap)
            plan.variant = v.name
        except Exception as e:
            if spec.user is None or not _numba_error(e):
                raise
            raise EpilogueError(f"the epilogue function {user_epilogue.where(spec.user.fn)} does not compile "
                                f"into the {v.name!r} kernel:\n{user_epilogue.numba_message(e)}") from None
        plan.epilogue = spec
        return plan


class _NotFused(Exception):
    """``prepare(..., a_cast=True)`` for a product no variant reads a float32 a for."""


def _numba_error(e: Exception) -> bool:
    return type(e).__module__.startswith("numba")


class _Call:
    """What a repeated call needs: the device, the plan (None for an empty problem; ``zero``:
    K == 0, the result is zeros, before any epilogue), and how to make and check the result."""
    __slots__ = ("device", "plan", "m", "n", "out_dtype", "spans", "zero", "epi")

    def __init__(self, device, plan, m, n, out_dtype, spans, zero=False):
        self.device, self.plan, self.m, self.n, self.out_dtype, self.spans = device, plan, m, n, out_dtype, spans
        self.zero = zero
        self.epi = None           # the epilogue without its arrays (``Bound.fixed``), or None


class _Same:
    """An object as part of a cache key, equal only to itself (two variants may differ only in
    their planner; two functions in what they close over). Held by the key, so that its id is
    never reused by a new object while the entry lives (a dropped variant's plan would run for
    it); with ``weak``, not kept alive by the key (a closure made anew each step must not pin
    what it captured), and once it is gone no new object equals it, even at its address."""
    __slots__ = ("ref", "h")

    def __init__(self, obj, weak: bool = False):
        try:
            self.ref = weakref.ref(obj) if weak else lambda: obj
        except TypeError:                         # (no weak references: held)
            self.ref = lambda: obj
        self.h = id(obj)

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        return isinstance(other, _Same) and self.ref() is not None and self.ref() is other.ref()


def _variant_key(variant):
    return variant if isinstance(variant, str) else _Same(variant)


_CALLS: dict = {}
CALL_CACHE_SIZE = 4096


_UNKEYED = object()     # an epilogue whose facts could not be read: checked by ``bind`` every call
_SCALARS = (int, float, np.float64)                 # what alpha and beta may be (``bind``)
_NUMBERS = (int, float, np.float32, np.float64)     # numbers among epilogue_args


def _epilogue_facts(kind, c, alpha, beta, bias, activation, epilogue, epilogue_args, scales=None) -> tuple:
    """(key, run) of a call's epilogue on GPU arrays: ``key``, what decides its checks and kernel
    (its arrays' facts and kinds, which of alpha and beta differ from 1 and 0, the activation,
    the function, the types of its numbers); ``run``, what may change between calls with the
    same key (``epilogue_args.runtime_values``). (_UNKEYED, None) for arguments ``bind`` would
    refuse, whose errors it then gives. (An unhashable key: ``_gemm_gpu`` does not cache it.)"""
    if type(alpha) not in _SCALARS or type(beta) not in _SCALARS:
        return _UNKEYED, None
    try:
        fc = fb = None
        pc = pb = 0
        if c is not None and beta != 0.0:
            fc, pc = operand_facts(c, kind)
            fc = (type(c), fc)
        if bias is not None:
            fb, pb = operand_facts(bias, kind)
            fb = (type(bias), fb)
        ukey, urun = [], []
        for x in epilogue_args:
            t = type(x)
            if t in _NUMBERS or t is bool:
                ukey.append(t)
                urun.append(x)
            else:
                f, p = operand_facts(x, kind)
                ukey.append((t, f))
                urun.append(p)
        skey = srun = None
        if scales is not None:                    # (one of them None: unkeyed, ``bind`` says so)
            facts = [operand_facts(x, kind) for x in scales]
            skey = tuple((type(x), f) for x, (f, _) in zip(scales, facts))
            srun = tuple(p for _, p in facts)
    except Exception:             # (an argument of another kind, ...)
        return _UNKEYED, None
    key = (alpha != 1.0, beta != 0.0, fc, fb, activation, None if epilogue is None else _Same(epilogue, weak=True),
           type(epilogue_args), tuple(ukey), skey)
    return key, runtime_values(pc, pb, alpha, beta, urun, srun)


def _cached(cache: dict, key) -> tuple:
    """(the entry cached under ``key`` (whose last part is the epilogue's, ``_epilogue_facts``) or
    None, the key to store a new one under: None for an epilogue whose facts could not be read
    or an unhashable argument, checked on every call)."""
    if key[-1] is _UNKEYED:
        return None, None
    try:
        return cache.get(key), key
    except TypeError:
        return None, None


def _cache_miss(cache: dict, key, epi, make):
    """A miss's entry: ``make()``'s, or for a user epilogue function the entry of its code, when
    another function object with the same code made one (a closure made anew each step shares
    its first call); kept under ``key`` (unless None) and the code's key."""
    by_code = key[:-1] + (epi.key,) if key is not None and epi is not None and epi.spec.user is not None else None
    entry = None if by_code is None else cache.get(by_code)
    if entry is None:
        entry = make()
    if len(cache) >= CALL_CACHE_SIZE:
        cache.clear()
    if by_code is not None:
        cache[by_code] = entry
    if key is not None:
        cache[key] = entry
    return entry


def operand_facts(x, kind: str) -> tuple:
    """What decides a call about one GPU operand, cheaply: (shape, strides, dtype, address
    alignment, device), and its address."""
    if kind == "torch":
        p = x.data_ptr()
        return (x.shape, x.stride(), x.dtype, p & 31, x.get_device()), p
    if kind == "numba":
        facts = arrays.numba_facts(x)
        if facts is not None:
            return facts
    iface = x.__cuda_array_interface__
    p = iface["data"][0]
    return (iface["shape"], iface.get("strides"), iface["typestr"], p & 31, runtime.device_of(x, kind)), p


def gemm(a, b, variant: Union[str, Variant] = "auto", *, out=None, out_dtype=None, stream=None,
         allow_tf32: bool = False, c=None, alpha: float = 1.0, beta: float = 0.0, bias=None,
         activation: Optional[str] = None, epilogue=None, epilogue_args=(), scale_a=None, scale_b=None):
    """``a @ b`` on the GPU with the chosen variant; the result is the same kind of array as ``a``.

    a, b: 2-D NumPy arrays (copied to the GPU and back), Numba device arrays, CuPy arrays or torch
    CUDA tensors, both of one kind and one dtype, on one GPU; row-major, column-major or strided
    views with one unit-stride dimension. Any M, N, K >= 0 (K == 0 gives zeros, as NumPy does).
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
    place), scaled by beta. bias: a 1-D array of length N (one value per column; also when
    M == N) or M (one per row). activation: "relu", "gelu" (erf), "gelu_tanh" or "silu".
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
    returning the value to store; epilogue_args: arrays (of the operands' kind and device,
    indexed as in any Numba kernel) and ints or floats. A function is compiled into the kernel
    and cached on disk by its code: a new process reuses it, an edited one is rebuilt.

    torch tensors that need a gradient, and calls torch.compile traces, go through the torch
    operator ``torch.ops.numba_tc.gemm`` (``numba_tc.torch``: autograd, fake tensors).

    Returns the (M, N) result: a new array of ``a``'s kind, or ``out``.

    Raises (each message names the argument and the problem):
      TypeError: a and b of different kinds or dtypes, an unsupported dtype or array type, ``out``,
        ``c``, ``bias`` or an epilogue array of another kind or dtype, an ``out_dtype`` the inputs
        cannot produce, a variant that does not take this dtype, an ``epilogue`` that is not a
        device function.
      ValueError: operands that are not 2-D, inner dimensions that differ, ``out`` or ``c`` of the
        wrong shape, ``out`` overlapping an input, strides with no unit-stride dimension, operands
        on two GPUs, an unknown variant (the valid ones are listed), a named variant that cannot
        run these operands, a bias of the wrong length, an unknown activation.
      numba_tc.NoGPUError: no CUDA GPU, or a process forked after CUDA was used (start it with
        the spawn start method instead).
      numba_tc.UnsupportedDeviceError: a GPU too old (or too new: wgmma is sm_90a only) for the
        named variant, or a variant Numba's CUDA simulator cannot run.
      numba_tc.EpilogueError: an epilogue function that does not compile into the kernel (with
        Numba's message).
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
    scales = None if scale_a is None and scale_b is None else (scale_a, scale_b)
    if batch.is_batched(a, b):
        if scales is not None:
            raise ValueError("scale_a and scale_b: batched fp8 products are not supported yet; call gemm "
                             "per matrix")
        return _gemm_batched(a, b, variant, out, out_dtype, stream, allow_tf32, dict(
            c=c, alpha=alpha, beta=beta, bias=bias, activation=activation, epilogue=epilogue,
            epilogue_args=epilogue_args))
    kind = array_kind(a)
    if kind == "torch" and needs_torch_operator(a, b, c, bias):
        if scales is not None:
            raise TypeError("fp8 products (scale_a, scale_b) have no autograd formula here: call it under "
                            "torch.no_grad(), on tensors that do not require grad")
        return _torch_ops().gemm(a, b, variant, out=out, out_dtype=out_dtype, stream=stream, allow_tf32=allow_tf32,
                                 c=c, alpha=alpha, beta=beta, bias=bias, activation=activation, epilogue=epilogue,
                                 epilogue_args=epilogue_args)
    epi_args = _epilogue_of(c, alpha, beta, bias, activation, epilogue, epilogue_args, scales)
    if kind == "numpy" or SIMULATOR:
        return _gemm_copying(a, b, variant, out, out_dtype, stream, allow_tf32, epi_args)
    return _gemm_gpu(a, b, variant, out, out_dtype, stream, allow_tf32, kind, epi_args)


def _epilogue_of(c, alpha, beta, bias, activation, epilogue, epilogue_args, scales):
    """A call's epilogue arguments as one tuple (``bind``'s), or None for the plain product."""
    if scales is not None or not is_plain(c, alpha, beta, bias, activation, epilogue):
        return c, alpha, beta, bias, activation, epilogue, epilogue_args, scales
    if epilogue_args:
        raise ValueError("epilogue_args were given without an epilogue function")
    return None


def _lookup(a, b, variant, out, out_dtype, allow_tf32, kind, epi_args, a_cast=False) -> tuple:
    """(the cached call for these operands' facts (checked and planned on a miss), this call's
    epilogue values (``runtime_values``), the addresses of a, b and out); ``a_cast``: ``prepare``'s."""
    fa, pa = operand_facts(a, kind)
    fb, pb = operand_facts(b, array_kind(b)) if array_kind(b) == kind else (None, 0)
    fo, po = (None, 0) if out is None or array_kind(out) != kind else operand_facts(out, kind)
    ekey, run = (None, None) if epi_args is None else _epilogue_facts(kind, *epi_args)
    key = (_variant_key(variant), out_dtype, (allow_tf32, a_cast), kind, fa, fb, fo, out is None, ekey)
    call, key = _cached(_CALLS, key)
    if call is None:
        epi = None
        if epi_args is not None:                  # checked, described; the cache keeps it without arrays
            pr = _Problem(a, b, variant, out, out_dtype, allow_tf32, a_cast)
            epi = bind(kind, pr.m, pr.n, pr.dtype, pr.out_dtype, pr.device, *epi_args, k=pr.k)
            run = epi.run

        def make():
            new = _prepare(a, b, variant, out, out_dtype, allow_tf32, kind, epi, a_cast)
            new.epi = None if epi is None else epi.fixed()
            return new
        call = _cache_miss(_CALLS, key, epi, make)
    return call, run, pa, pb, po


def _gemm_gpu(a, b, variant, out, out_dtype, stream, allow_tf32, kind, epi_args):
    """A call on GPU arrays (``epi_args``: its epilogue's arguments, or None): the cached call,
    the result, the launches on the caller's stream."""
    call, run, pa, pb, po = _lookup(a, b, variant, out, out_dtype, allow_tf32, kind, epi_args)
    if out is not None and call.spans is not None:
        sa, sb, so = call.spans
        if _overlap(po, so, pa, sa) or _overlap(po, so, pb, sb):
            raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
    with driver.on_device(call.device):
        st = _stream(kind, call.device, stream)
        if out is None:
            out = arrays.new_like(kind, a, call.m, call.n, call.out_dtype, handle=st, device=call.device)
            po = arrays.address(out, kind)
        if call.plan is None:                     # an empty problem: zeros, or nothing to do
            if call.zero:
                if epi_args is not None:
                    raise ValueError("K == 0 with an epilogue: the product is empty; apply the "
                                     "epilogue to zeros directly")
                _zero_fill(out, kind)
            return out
        call.plan.run(_values(pa, pb, po, call.epi, run, call.plan), st)
    return out


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


def _gemm_batched(a, b, variant, out, out_dtype, stream, allow_tf32, epi: dict):
    """A batched product (``batch``); on torch tensors that need a gradient only where it is one
    2-D product (the torch operator has no batched form yet: never silently detached)."""
    if type(a).__module__.startswith("torch") and needs_torch_operator(a, b, epi["c"], epi["bias"]):
        if len(b.shape) != 2 or not a.is_contiguous():
            raise TypeError("a batched product of tensors that need a gradient (or under torch.compile) "
                            "runs through the torch operator only as one 2-D product: a contiguous 3-D a "
                            "times a 2-D b; use torch.matmul for this one")
        if out is not None:
            raise TypeError("out= with tensors that need a gradient: autograd cannot write into out")
        res = gemm(a.reshape(-1, a.shape[-1]), b, variant, out_dtype=out_dtype, stream=stream,
                   allow_tf32=allow_tf32, **dict(epi, c=None if epi["c"] is None else epi["c"].reshape(-1, b.shape[1])))
        return res.reshape(a.shape[0], a.shape[1], b.shape[1])
    return batch.batched_gemm(a, b, variant, out, out_dtype, stream, allow_tf32, epi, gemm, _batched_launch)


_BATCHED: dict = {}
_NO_EPILOGUE = dict(c=None, alpha=1.0, beta=0.0, bias=None, activation=None, epilogue=None, epilogue_args=())


def _batched_launch(a0, b0, o0, variant, out_dtype, allow_tf32, bt, epi_kw, rows):
    """The batched kernel's launch for these operands (``batch.batched_gemm``'s planner): a
    callable ``run(a0, b0, o0, stream)``, or None (NumPy, the simulator, a variant without a
    batched kernel, operands it cannot take). Cached, like 2-D calls, by the operands' facts."""
    kind = array_kind(a0)
    if kind == "numpy" or SIMULATOR:
        return None
    epi_args = tuple(epi_kw[k] for k in ("c", "alpha", "beta", "bias", "activation", "epilogue", "epilogue_args"))
    ekey, erun = (None, None) if is_plain(*epi_args[:6]) else _epilogue_facts(kind, *epi_args)
    key = (_variant_key(variant), out_dtype, allow_tf32, kind, bt,
           operand_facts(a0, kind)[0], operand_facts(b0, kind)[0], operand_facts(o0, kind)[0], ekey)
    hit, key = _cached(_BATCHED, key)
    if hit is None:                               # a miss (a cached (None, None): no batched kernel)
        pr = _Problem(a0, b0, variant, o0, out_dtype, allow_tf32)
        epi = None if ekey is None else bind(kind, rows, pr.n, pr.dtype, pr.out_dtype, pr.device, *epi_args)
        erun = None if epi is None else epi.run
        hit = _cache_miss(_BATCHED, key, epi, lambda: (_batched_plan(pr, a0, b0, o0, bt, epi),
                                                       None if epi is None else epi.fixed()))
    plan, epi = hit
    if plan is None:
        return None

    def run(a0, b0, o0, stream):
        with driver.on_device(plan.device):
            p = (arrays.address(x, kind) for x in (a0, b0, o0))
            plan.run(_values(*p, epi, erun, plan), _stream(kind, plan.device, stream))
    run.describe = plan.describe
    return run


def _stream(kind: str, dev: int, stream) -> int:
    """The raw stream a call on ``dev`` runs on: ``stream``, or the caller's current one."""
    return runtime.stream_handle(stream) if stream is not None else runtime.current_stream(kind, dev)


def _values(pa: int, pb: int, pc: int, epi, run, plan) -> tuple:
    """A plan's run-time values: the operands' addresses, then the epilogue's (``epi``: bound,
    ``run``: this call's ``runtime_values``)."""
    return (pa, pb, pc) + ((0,) if epi is None else epi.values(plan.epilogue, run, plan.swap))


def _batched_plan(pr, a0, b0, o0, bt, epi):
    """The batched kernel's plan, or None (``_batched_launch``)."""
    A, B, C = (as_matrix(x, n, described=d) for x, n, d in (
        (a0, "a", pr.desc_a), (b0, "b", pr.desc_b), (o0, "out", pr.desc_out)))
    with driver.on_device(pr.device):
        v = pick(pr.cands, A, B, C, pr.named)
        if not v.batched:
            return None
        spec = PLAIN if epi is None else epi.spec
        steps = v.plan(A, B, C, pr.device, epi=spec, batch=bt)
        if steps is None:
            return None
        plan = Plan(steps, pr.device, False)
    plan.variant, plan.epilogue = v.name, spec
    return plan


def explain(a, b, variant: Union[str, Variant] = "auto", *, out=None, out_dtype=None, allow_tf32: bool = False,
            scale_a=None, scale_b=None, c=None, alpha=1.0, beta=0.0, bias=None, activation=None, epilogue=None,
            epilogue_args=()) -> str:
    """What ``gemm(a, b, variant, out=out, ...)`` on these GPU arrays runs, without running it:
    the variant chosen and its launches, e.g. "hopper: 128x256 split-K 4; fixup" (fp8 inputs:
    with their scales; an epilogue: with its arguments, which may change the plan). (The plan is
    made, so its kernels are compiled or loaded; the call cache is left alone.)"""
    kind = array_kind(a)
    if batch.is_batched(a, b) and kind != "numpy" and not SIMULATOR:
        return batch.batched_gemm(a, b, variant, out, out_dtype, None, allow_tf32, _NO_EPILOGUE, gemm,
                                  _batched_launch, explain)
    if kind == "numpy" or SIMULATOR:
        raise TypeError("explain() takes GPU arrays (torch, CuPy, Numba): NumPy operands are copied "
                        "to the GPU first, and planned there")
    epi = None
    scales = None if scale_a is None and scale_b is None else (scale_a, scale_b)
    if scales is not None or not is_plain(c, alpha, beta, bias, activation, epilogue):
        pr = _Problem(a, b, variant, out, out_dtype, allow_tf32)
        epi = bind(kind, pr.m, pr.n, pr.dtype, pr.out_dtype, pr.device, c, alpha, beta, bias, activation, epilogue,
                   epilogue_args, scales, k=pr.k)
    call = _prepare(a, b, variant, out, out_dtype, allow_tf32, kind, epi)
    return "empty: nothing to launch" if call.plan is None else call.plan.describe()


def needs_torch_operator(a, b, c=None, bias=None) -> bool:
    """Whether a call on torch tensors goes through the torch operator (``numba_tc.torch``):
    torch.compile is tracing it, or grad mode is on and an operand requires grad (a product that
    needs a gradient is never silently detached). Decided without importing ``numba_tc.torch``,
    whose operator registration costs seconds in a fresh process (``torch`` is imported already:
    ``a`` is a tensor)."""
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():
        return True
    if not torch.is_grad_enabled():
        return False
    return (a.requires_grad or b.requires_grad or bool(getattr(c, "requires_grad", False))
            or bool(getattr(bias, "requires_grad", False)))


_NT = None


def _torch_ops():
    """numba_tc.torch (the torch operator), imported on the first torch tensor, never before. (It
    is the layer above this one, built on ``gemm``: loaded by name, not an import of this module.)"""
    global _NT
    if _NT is None:
        import numba_tc.torch             # (an import statement: torch.compile traces it)
        _NT = numba_tc.torch
    return _NT


def _overlap(p, span, q, span_q) -> bool:
    return span > 0 and span_q > 0 and p < q + span_q and q < p + span


def _prepare(a, b, variant, out, out_dtype, allow_tf32, kind, epi=None, a_cast=False) -> _Call:
    """Check a GPU call and plan it (a miss of the call cache); ``epi``: its epilogue."""
    pr = _Problem(a, b, variant, out, out_dtype, allow_tf32, a_cast)
    m, n, k = pr.m, pr.n, pr.k
    A, B = as_matrix(a, "a", described=pr.desc_a), as_matrix(b, "b", described=pr.desc_b)
    spans = None
    if out is not None:
        C = as_matrix(out, "out", described=pr.desc_out)
        spans = (A.span_bytes, B.span_bytes, C.span_bytes)
    else:                                         # the result: new, C-contiguous, aligned
        C = arrays.Matrix(None, m, n, max(n, 1), False, pr.out_dtype, 0)
    if out is not None and (C.overlaps(A) or C.overlaps(B)):
        raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
    if m == 0 or n == 0 or k == 0:
        return _Call(pr.device, None, m, n, pr.out_dtype, spans, zero=k == 0)
    with driver.on_device(pr.device):
        plan = pr.plan(A, B, C, epi)
    return _Call(pr.device, plan, m, n, pr.out_dtype, spans)


def _gemm_copying(a, b, variant, out, out_dtype, stream, allow_tf32, epi_args=None):
    """NumPy operands (copied to the device and back on the stream, which is then synchronized),
    and every call under the simulator; ``epi_args``: the epilogue's arguments, if any."""
    from numba import cuda
    pr = _Problem(a, b, variant, out, out_dtype, allow_tf32)
    m, n, k, kind = pr.m, pr.n, pr.k, pr.kind
    if kind == "numpy":
        result = out if out is not None else np.empty((m, n), dtype=arrays.np_dtype(pr.out_dtype))
        if out is not None and (np.shares_memory(out, a) or np.shares_memory(out, b)):
            raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
    else:
        result = out if out is not None else arrays.new_like(kind, a, m, n, pr.out_dtype)
    if m == 0 or n == 0:
        return result
    if k == 0:
        if epi_args is not None:
            raise ValueError("K == 0 with an epilogue: the product is empty; apply the epilogue to zeros directly")
        _zero_fill(result, kind)
        return result
    st = runtime.stream_handle(stream) if stream is not None else 0
    if kind == "numpy" and not SIMULATOR and runtime.capturing(st):
        raise CaptureError("NumPy operands are copied to the GPU and back with a synchronization, "
                           "which a CUDA graph cannot capture: pass GPU arrays")
    ctx = contextlib.nullcontext() if SIMULATOR else driver.on_device(pr.device)
    with ctx:
        if stream is None and not SIMULATOR:
            st = runtime.current_stream(kind, pr.device)
        nst = 0 if SIMULATOR else runtime.numba_stream(st)
        A = as_matrix(a, "a", stream=nst, described=pr.desc_a)
        B = as_matrix(b, "b", stream=nst, described=pr.desc_b)
        if kind == "numpy":
            dev_out = _device_out(out, m, n, pr.out_dtype, nst)
            C = as_matrix(dev_out, "out", raw_bf16=pr.out_dtype == "bfloat16")
        else:
            C = as_matrix(result, "out", described=pr.desc_out)
            if out is not None and (C.overlaps(A) or C.overlaps(B)):
                raise ValueError("out overlaps a or b: the result would overwrite its own inputs")
        epi = None if epi_args is None else bind(kind, m, n, pr.dtype, pr.out_dtype, pr.device, *epi_args,
                                                   stream=nst, k=pr.k)
        plan = pr.plan(A, B, C, epi)
        handle = (lambda x: x.data) if SIMULATOR else (lambda x: x.ptr)
        try:
            plan.run(_values(handle(A), handle(B), handle(C), epi, None, plan), st)
        except Exception as e:        # (the simulator: an exception in a device thread)
            fn = epi.spec.user.fn if epi is not None and epi.spec.user is not None else None
            if fn is None or not SIMULATOR or not user_epilogue.raised_in(e, fn):
                raise
            raise EpilogueError(f"the epilogue function {user_epilogue.where(fn)} raised {type(e).__name__} in "
                                f"the simulator's kernel: {e}") from None
        if kind == "numpy":
            host = arrays.to_host(dev_out, pr.out_dtype, stream=nst)
            if not SIMULATOR:
                nst.synchronize()
            result[...] = host
    return result


def _device_out(out, m, n, out_dtype, stream):
    """The device buffer a NumPy call's kernel writes: a copy of ``out`` when one is given (in its
    memory order, so a column-major ``out`` is written column-major on the device, and whatever
    it holds, such as a checker's NaN poison, is what the kernel overwrites), else a new
    row-major array. bfloat16 travels as its raw 16-bit words."""
    from numba import cuda
    raw = np.uint16 if out_dtype == "bfloat16" else arrays.np_dtype(out_dtype)
    if out is None:
        return cuda.device_array((m, n), dtype=raw, stream=stream)
    host = out.view(raw) if out_dtype == "bfloat16" else out
    if not (host.flags.c_contiguous or host.flags.f_contiguous):
        host = np.ascontiguousarray(host)
    return cuda.to_device(host, stream=stream)


def _register_builtin():
    from . import gemv, hopper, simt, tensorcore
    for v in simt.RUNGS + tensorcore.RUNGS + hopper.RUNGS + gemv.RUNGS:
        register(v)


_register_builtin()
