"""The PTX primitives of ``ptx/*.cu`` as Numba device functions (``cuda.declare_device``).

Instructions Numba cannot emit are small ``extern "C" __device__`` functions in ``ptx/*.cu``, each
labelled there with its PTX ISA section; NVRTC compiles them to LTO-IR and, under LTO, they inline
into the kernel (``build.py``). Shared addresses are int32 byte addresses (from ``smem_addr``),
global ones and descriptors int64; fragments are uint32 local arrays passed as pointer + element
offset. Under the simulator, which cannot link code, each name is None: only the SIMT ladder
(which needs none of them) runs there.
"""
from __future__ import annotations

import os

from numba import cuda, types

from .config import WGMMA_N, WGMMA_N_TYPED
from .intrinsics import SIMULATOR

__all__ = ["PTX_DIR", "ptx_source", "MEMORY_SIGNATURES", "MMA_SIGNATURES", "HOPPER_SIGNATURES"]

PTX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptx")


def ptx_source(name: str) -> str:
    """Absolute path of a ``.cu`` file in ``numba_tc/ptx``."""
    path = os.path.join(PTX_DIR, name)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return path


_P = types.CPointer
_I32, _I64, _U32, _F32 = types.int32, types.int64, types.uint32, types.float32
_FRAG = _P(types.uint32)

# ptx/memory.cu: 16-byte global accesses (for users' own kernels; see README)
MEMORY_SIGNATURES = {
    "ldg_f32x4": _I32(_P(_F32), _P(_F32), _I64),
    "stg_f32x4": _I32(_P(_F32), _I64, _P(_F32)),
}

# ptx/mma.cu: ldmatrix, mma.sync, cp.async and the epilogue's stores (sm_80+)
MMA_SIGNATURES = {
    "smem_addr": _I32(_P(types.uint32)),
    **{n: _I32(_FRAG, _I32, _I32) for n in ("ldsm_x4", "ldsm_x4_t", "ldsm_x2", "ldsm_x2_t",
                                            "ldsm_x1", "ldsm_x1_t")},
    **{n: _I32(_P(_F32), _I32, _FRAG, _I32, _FRAG, _I32)
       for n in ("mma_f16_m16n8k16", "mma_bf16_m16n8k16", "mma_tf32_m16n8k8")},
    "round_tf32": _I32(_FRAG, _I32, _I32),
    "cp_async16": _I32(_I32, _I64, _I32),
    "cp_async_commit": _I32(),
    "cp_async_wait": _I32(_I32),
    "copy16": _I32(_I32, _I64, _I32),
    "ldg_u16": _U32(_I64),
    "ldg_u32": _U32(_I64),
    "ldg_in16": _F32(_I64, _I32),
    "ldg_v4u32": _I32(_FRAG, _I32, _I64),
    "stg_v4u32": _I32(_I64, _FRAG, _I32),
    "prmt": _U32(_U32, _U32, _U32),
    "in16_f32": _F32(_U32, _I32, _I32),
    "round_in16": _F32(_F32, _I32),
    "tanh_approx": _F32(_F32),
    "lds_u32": _U32(_I32),
    "lds_v4u32": _I32(_FRAG, _I32, _I32),
    "lds_v2f32": _I32(_P(_F32), _I32, _I32),
    "ldg_v2f32": _I32(_P(_F32), _I32, _I64),
    "sts_v4u32": _I32(_I32, _U32, _U32, _U32, _U32),
    "sts_u16": _I32(_I32, _U32),
    "sts_u32": _I32(_I32, _U32),
    "stg_out1": _I32(_I64, _F32, _I32),
    "stg_out2": _I32(_I64, _F32, _F32, _I32),
    "sts_out2": _I32(_I32, _F32, _F32, _I32),
}

# ptx/hopper.cu: mbarrier, TMA, wgmma, setmaxnreg, clusters (sm_90a; linked only into the kernels
# that call them, so the mma.sync ladder still builds for sm_80). Tensor-map addresses are int64.
HOPPER_SIGNATURES = {
    "mbar_init": _I32(_I32, _I32),
    "mbar_fence_init": _I32(),
    "mbar_expect_tx": _I32(_I32, _I32),
    "mbar_arrive": _I32(_I32),
    "mbar_arrive_cluster": _I32(_I32, _I32),
    "mbar_wait": _I32(_I32, _I32),
    "tma_load_2d": _I32(_I32, _I64, _I32, _I32, _I32),
    "tma_load_2d_multicast": _I32(_I32, _I64, _I32, _I32, _I32, _I32),
    "tma_store_2d": _I32(_I64, _I32, _I32, _I32),
    "tma_load_3d": _I32(_I32, _I64, _I32, _I32, _I32, _I32),
    "tma_store_3d": _I32(_I64, _I32, _I32, _I32, _I32),
    "tma_store_commit": _I32(),
    "tma_store_wait_read": _I32(_I32),
    "tma_prefetch_map": _I32(_I64),
    "fence_proxy_async": _I32(),
    "tf32_rn": _U32(_U32),
    "grid_dep_wait": _I32(),
    "cluster_ctarank": _I32(),
    "cluster_sync": _I32(),
    "lds_cluster_f32": _F32(_P(_F32), _I32, _I32),
    "named_barrier": _I32(_I32, _I32),
    "named_barrier_arrive": _I32(_I32, _I32),
    "tma_store_wait_all": _I32(),
    "wgmma_fence": _I32(),
    "wgmma_commit": _I32(),
    "wgmma_wait": _I32(_I32),
    **{f"wgmma_m64n{n}k16": _I32(_P(_F32), _I32, _I64, _I64, _I32, _I32, _I32, _I32) for n in WGMMA_N},
    **{f"wgmma_m64n{n}k32_f8": _I32(_P(_F32), _I32, _I64, _I64, _I32, _I32) for n in WGMMA_N_TYPED},
    **{f"wgmma_m64n{n}k8_tf32": _I32(_P(_F32), _I32, _I64, _I64, _I32) for n in WGMMA_N_TYPED},
    **{f"wgmma_m64n{n}k8_tf32_rs": _I32(_P(_F32), _I32, _U32, _U32, _U32, _U32, _I64, _I32)
       for n in WGMMA_N_TYPED},
    "setmaxnreg_inc": _I32(_I32),
    "setmaxnreg_dec": _I32(_I32),
}

for _file, _table in (("memory.cu", MEMORY_SIGNATURES), ("mma.cu", MMA_SIGNATURES),
                      ("hopper.cu", HOPPER_SIGNATURES)):
    for _name, _sig in _table.items():
        globals()[_name] = None if SIMULATOR else cuda.declare_device(_name, _sig, link=ptx_source(_file))
    __all__ += list(_table)

# ptx/quant.cu: quantized weights' loads and conversions to mma fragments (sm_80+; qgemm.py)
QUANT_SIGNATURES = {
    "ldg_stream_v4": _I32(_FRAG, _I32, _I64),
    "ldg_u8": _U32(_I64),
    "cp_async4": _I32(_I32, _I64, _I32),
    "cp_async8": _I32(_I32, _I64),
    "word_scale": _F32(_U32, _I32, _I32),
    "pack16x2": _U32(_F32, _F32, _I32),
    "dq_int4": _I32(_FRAG, _I32, _U32, _U32, _U32, _I32),
    "dq_int8": _I32(_FRAG, _I32, _U32, _U32, _I32),
    "lut_pairs4": _I32(_FRAG, _I32, _U32, _I32),
}
for _name, _sig in QUANT_SIGNATURES.items():
    globals()[_name] = None if SIMULATOR else cuda.declare_device(_name, _sig, link=ptx_source("quant.cu"))
__all__ += ["QUANT_SIGNATURES"] + list(QUANT_SIGNATURES)
