"""numba_tc: the GEMM ladder on NVIDIA GPUs, from Numba.

``numba_tc.gemm(a, b, variant=...)`` multiplies; ``numba_tc.variants()`` lists the rungs;
``python -m numba_tc`` benchmarks them against cuBLAS (or runs the simulator demo without a GPU).
"""
from . import fp8, quant, sass
from .api import (device_capability, explain, gemm, get_variant, register, registered, unregister, variant_from,
                  variants)
from .aot import precompile
from .config import MmaConfig, SimtConfig, Variant, WgmmaConfig
from .errors import CaptureError, ConfigError, CudaError, EpilogueError, NoGPUError, UnsupportedDeviceError

__version__ = "0.1.0"
__all__ = ["gemm", "explain", "variants", "get_variant", "register", "unregister", "registered", "variant_from",
           "precompile", "Variant", "SimtConfig", "MmaConfig", "WgmmaConfig", "ConfigError", "NoGPUError",
           "UnsupportedDeviceError", "CudaError", "CaptureError", "EpilogueError", "device_capability", "sass", "fp8", "quant",
           "__version__"]
