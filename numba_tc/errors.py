"""The exceptions numba_tc raises, in one place (every module may import this one)."""
from __future__ import annotations

__all__ = ["NoGPUError", "UnsupportedDeviceError", "ConfigError", "CudaError", "CaptureError", "EpilogueError"]


class NoGPUError(RuntimeError):
    """No CUDA GPU is usable here."""


class UnsupportedDeviceError(RuntimeError):
    """The GPU is older (or newer) than the variant needs."""


class ConfigError(ValueError):
    """A tile configuration that cannot work (raised at construction)."""


class CudaError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class CaptureError(RuntimeError):
    """The call cannot be captured into a CUDA graph (for example NumPy operands, which are
    copied and synchronized)."""


class EpilogueError(ValueError):
    """A user's epilogue function does not compile into the kernel; the message holds Numba's,
    which names the function's line."""
