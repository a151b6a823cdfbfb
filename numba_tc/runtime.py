"""Where a call runs: the device that holds its operands, and the caller's stream on it.

* Device: torch ``tensor.get_device()``, CuPy ``array.device.id``, for other GPU arrays (Numba's
  included) the driver's answer for their address. NumPy operands go to Numba's current device
  (``default_device``: ``NoGPUError`` without a GPU, or in a child forked after its parent used
  CUDA, which the driver cannot survive).
* Stream, when the caller names none: torch's current stream *of the operands' device*, CuPy's
  current stream, Numba's default stream for Numba and NumPy arrays. A stream the caller names
  may be a torch, CuPy or Numba stream, an object with ``.handle`` (cuda.core), or a raw handle.

Everything here returns plain ints (device ordinals, CUstream handles).
"""
from __future__ import annotations

import os
import sys
from typing import Optional

from . import driver
from .errors import NoGPUError
from .intrinsics import SIMULATOR

__all__ = ["device_of", "current_stream", "stream_handle", "numba_stream", "capturing", "default_device",
           "device_capability", "needs_torch_operator"]


def device_of(x, kind: str) -> int:
    """The ordinal of the GPU holding array ``x`` (of ``arrays.array_kind`` ``kind``)."""
    if kind == "torch":
        return x.get_device()
    if kind == "cuda":
        dev = getattr(x, "device", None)
        i = getattr(dev, "id", None)          # CuPy
        if isinstance(i, int):
            return i
    return driver.device_of_pointer(x.__cuda_array_interface__["data"][0])


_TORCH_RAW = None


def current_stream(kind: str, dev: int) -> int:
    """The caller's current stream on device ``dev`` for arrays of this kind."""
    if kind == "numba" or kind == "numpy":
        return 0                 # Numba's default stream: its handle is always CU_STREAM_DEFAULT (0)
    if kind == "torch":
        global _TORCH_RAW
        if _TORCH_RAW is None:
            import torch
            _TORCH_RAW = getattr(torch._C, "_cuda_getCurrentRawStream", None) or \
                (lambda d: torch.cuda.current_stream(d).cuda_stream)
        return _TORCH_RAW(dev)
    if kind == "cuda":
        try:
            import cupy
            with cupy.cuda.Device(dev):
                return cupy.cuda.get_current_stream().ptr
        except ImportError:
            pass
    from numba import cuda
    return _handle_value(cuda.default_stream().handle)


def _handle_value(h) -> int:
    return int(getattr(h, "value", h) or 0)


def stream_handle(stream) -> int:
    """The raw CUstream handle of a stream object the caller passed (or of a raw handle)."""
    if isinstance(stream, int):
        return stream
    mod = type(stream).__module__
    if mod.startswith("torch"):
        return int(stream.cuda_stream)
    if mod.startswith("cupy"):
        return int(stream.ptr)
    h = getattr(stream, "handle", None)
    if h is not None:                        # Numba (ctypes c_void_p), cuda.core (CUstream)
        return _handle_value(h) if hasattr(h, "value") else int(h)
    raise TypeError(f"stream must be a torch, CuPy, Numba or cuda.core stream or a raw CUstream handle, "
                    f"got {type(stream).__name__}")


def numba_stream(handle: int):
    """A Numba stream object for a raw handle (NumPy operands are copied with Numba)."""
    from numba import cuda
    if handle == 0:
        return cuda.default_stream()
    return cuda.external_stream(handle)


def capturing(stream: int) -> bool:
    """Whether a CUDA graph capture is under way that this call would join: on ``stream`` (not
    asked of the legacy default stream 0, where asking during another stream's capture would
    invalidate that capture), or on torch's or CuPy's current stream, if they are loaded."""
    import sys
    if stream not in (0, 1, 2) and driver.stream_is_capturing(stream):     # 1, 2: legacy, per-thread
        return True
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing():
        return True
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            return bool(cupy.cuda.get_current_stream().is_capturing())
        except Exception:
            return False
    return False


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


def needs_torch_operator(a, b, c=None, bias=None) -> bool:
    """Whether a call on torch tensors goes through the torch operator (``numba_tc.torch``):
    torch.compile is tracing it, or grad mode is on and an operand requires grad (a product that
    needs a gradient is never silently detached). Read from torch's state without importing
    ``numba_tc.torch``, whose operator registration costs seconds in a fresh process (``torch``
    is imported already: ``a`` is a tensor)."""
    torch = sys.modules["torch"]
    if torch.compiler.is_compiling():
        return True
    if not torch.is_grad_enabled():
        return False
    return (a.requires_grad or b.requires_grad or bool(getattr(c, "requires_grad", False))
            or bool(getattr(bias, "requires_grad", False)))
