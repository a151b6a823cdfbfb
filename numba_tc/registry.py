"""The registry of variants (``register``, ``variants``, ``get_variant``, ``variant_from``) and which
of them may run a call: ``candidates`` (those that take its dtypes and run on this GPU, or an
exception saying why the named one cannot) and ``pick`` (the first that takes its operands)."""
from __future__ import annotations

import contextlib
import hashlib
from typing import Callable, Dict, List, Optional, Union

from .arrays import dtype_name
from .config import MmaConfig, SimtConfig, Variant, WgmmaConfig
from .errors import UnsupportedDeviceError
from .intrinsics import SIMULATOR
from .layout import FP8

__all__ = ["register", "unregister", "registered", "variants", "get_variant", "variant_from", "runs_here",
           "candidates", "pick", "input_precision", "on_change"]

_LISTENERS: List[Callable[[], None]] = []


def on_change(fn: Callable[[], None]) -> None:
    """Call ``fn`` whenever a variant is registered or unregistered (caches keyed by names)."""
    _LISTENERS.append(fn)


def _changed() -> None:
    for fn in _LISTENERS:
        fn()


_LADDER_ORDER = {"simt": 0, "mma": 1, "wgmma": 2, "rows": 3}
_REGISTRY: Dict[str, Variant] = {}


def register(v: Variant) -> Variant:
    if v.name in _REGISTRY or v.name == "auto":
        raise ValueError(f"variant name {v.name!r} is taken")
    _REGISTRY[v.name] = v
    _changed()
    return v


def unregister(name: str) -> None:
    _REGISTRY.pop(name if isinstance(name, str) else name.name, None)
    _changed()


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


def runs_here(v: Variant, cc) -> bool:
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
        ok = [v for v in variants(dtype=dtype) if runs_here(v, cc) and out_dtype in v.out_dtypes]
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
    if not runs_here(v, cc):
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


def input_precision(dtype: str, variant, allow_tf32: bool) -> str:
    """The precision a float32 problem runs in: "tf32" when the caller allows it or names a
    tensor-core variant (which computes fp32 inputs as tf32), else float32 (SIMT)."""
    if dtype != "float32":
        return dtype
    if variant == "auto":
        return "tf32" if allow_tf32 else "float32"
    v = get_variant(variant)
    return "tf32" if "tf32" in v.dtypes and "float32" not in v.dtypes else "float32"
