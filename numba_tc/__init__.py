"""numba_tc: the GEMM ladder on NVIDIA GPUs, from Numba.

``numba_tc.gemm(a, b, variant=...)`` multiplies; ``numba_tc.variants()`` lists the rungs;
``python -m numba_tc`` benchmarks them against cuBLAS (or runs the simulator demo without a GPU).
"""
from .api import (NoGPUError, UnsupportedDeviceError, device_capability, gemm, get_variant,
                  register, variants)
from .config import ConfigError, SimtConfig, Variant

__version__ = "0.1.0"
__all__ = ["gemm", "variants", "get_variant", "register", "Variant", "SimtConfig", "ConfigError",
           "NoGPUError", "UnsupportedDeviceError", "device_capability", "__version__"]
