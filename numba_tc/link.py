"""How Numba kernels reach the PTX primitives in ``numba_tc/ptx/``, and raw pointers.

Two facts shape every kernel in this package:

* **Raw pointers.** Numba applies NumPy's negative-index wrap-around to every signed array index,
  which costs about four 64-bit integer instructions per access in an unrolled inner loop (seen in
  SASS: 71 IADD3 + 40 IMAD.X for 32 shared loads). ``ptr(a)`` turns an array into a cffi pointer
  (``ffi.from_buffer``); indexing it is a bare address computation, and LLVM then merges adjacent
  shared-memory loads into ``LDS.128``.
* **16-byte accesses** (``load_f32x4`` / ``store_f32x4``) are Numba intrinsics: an LLVM
  ``<4 x float>`` load or store with 16-byte alignment, which becomes ``LDG.E.128``/``LDS.128``.
  They are not linked PTX on purpose: Numba's on-disk cache refuses kernels that link ``.cu``
  files ("Cannot pickle CUDACodeLibrary with linking files"), and the SIMT ladder must cache.
* **Linked primitives.** Instructions Numba cannot emit are small ``extern "C" __device__``
  functions in ``ptx/*.cu``, declared here with ``cuda.declare_device(..., link=...)``; NVRTC
  compiles them to LTO-IR and, with LTO, they inline into the kernel.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) neither cffi pointers nor linked code
exist, so each name here has a pure-Python twin with the same semantics: the kernels are the same
source in both worlds.
"""
from __future__ import annotations

import os

from numba import config, cuda, types

__all__ = ["SIMULATOR", "PTX_DIR", "ptx_source", "ptr", "load_f32x4", "store_f32x4",
           "ldg_f32x4", "stg_f32x4", "MMA_SIGNATURES"]

SIMULATOR = bool(config.ENABLE_CUDASIM)
PTX_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ptx")


def ptx_source(name: str) -> str:
    """Absolute path of a ``.cu`` file in ``numba_tc/ptx``."""
    path = os.path.join(PTX_DIR, name)
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return path


_P = types.CPointer

if SIMULATOR:
    def ptr(a):
        """Simulator twin: a NumPy array indexes like a pointer for non-negative indices."""
        return a

    def load_f32x4(p, idx):
        return p[idx], p[idx + 1], p[idx + 2], p[idx + 3]

    def store_f32x4(p, idx, a, b, c, d):
        p[idx], p[idx + 1], p[idx + 2], p[idx + 3] = a, b, c, d

    def ldg_f32x4(dst, base, idx):
        for i in range(4):
            dst[i] = base[idx + i]
        return 0

    def stg_f32x4(base, idx, src):
        for i in range(4):
            base[idx + i] = src[i]
        return 0
else:
    import cffi

    _ffi = cffi.FFI()

    @cuda.jit(device=True, inline="always")
    def ptr(a):
        """Raw pointer to an array's data (global, shared or local); index it like the array."""
        return _ffi.from_buffer(a)

    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    _V4 = ir.VectorType(ir.FloatType(), 4)

    def _vec_ptr(context, builder, sig, args):
        p, i = args[0], context.cast(builder, args[1], sig.args[1], types.intp)
        addr = builder.gep(p, [i])
        return builder.bitcast(addr, _V4.as_pointer(addr.type.addrspace))

    @intrinsic
    def load_f32x4(typingctx, p, idx):
        """(p[idx], .., p[idx+3]) in one 16-byte load; p + idx must be 16-byte aligned."""
        if not (isinstance(p, types.CPointer) and p.dtype == types.float32 and isinstance(idx, types.Integer)):
            return None
        sig = types.UniTuple(types.float32, 4)(p, idx)

        def codegen(context, builder, sig, args):
            v = builder.load(_vec_ptr(context, builder, sig, args), align=16)
            items = [builder.extract_element(v, ir.Constant(ir.IntType(32), j)) for j in range(4)]
            return context.make_tuple(builder, sig.return_type, items)
        return sig, codegen

    @intrinsic
    def store_f32x4(typingctx, p, idx, a, b, c, d):
        """p[idx..idx+3] = a, b, c, d in one 16-byte store; p + idx must be 16-byte aligned."""
        if not (isinstance(p, types.CPointer) and p.dtype == types.float32 and isinstance(idx, types.Integer)):
            return None
        sig = types.void(p, idx, types.float32, types.float32, types.float32, types.float32)

        def codegen(context, builder, sig, args):
            v = ir.Constant(_V4, ir.Undefined)
            for j in range(4):
                x = context.cast(builder, args[2 + j], sig.args[2 + j], types.float32)
                v = builder.insert_element(v, x, ir.Constant(ir.IntType(32), j))
            builder.store(v, _vec_ptr(context, builder, sig, args), align=16)
            return context.get_dummy_value()
        return sig, codegen

    _mem = ptx_source("memory.cu")
    ldg_f32x4 = cuda.declare_device(
        "ldg_f32x4", types.int32(_P(types.float32), _P(types.float32), types.int64), link=_mem)
    stg_f32x4 = cuda.declare_device(
        "stg_f32x4", types.int32(_P(types.float32), types.int64, _P(types.float32)), link=_mem)



# ---------------------------------------------------------------------------------------------
# The tensor-core primitives of ptx/mma.cu (see that file for each instruction and its PTX ISA
# section). Shared addresses are int32 byte addresses (from ``smem_addr``), global ones int64
# byte addresses; fragments are uint32 local arrays passed as pointer + element offset.
# ---------------------------------------------------------------------------------------------
_I32, _I64, _U32, _F32 = types.int32, types.int64, types.uint32, types.float32
_FRAG = _P(types.uint32)
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
    "lds_u32": _U32(_I32),
    "sts_u16": _I32(_I32, _U32),
    "sts_u32": _I32(_I32, _U32),
    "stg_out1": _I32(_I64, _F32, _I32),
    "stg_out2": _I32(_I64, _F32, _F32, _I32),
}
# Under the simulator (which cannot link code) each name is None and tensor-core kernels are not built.
for _name, _sig in MMA_SIGNATURES.items():
    globals()[_name] = None if SIMULATOR else cuda.declare_device(_name, _sig, link=ptx_source("mma.cu"))
__all__ += list(MMA_SIGNATURES)


# ---------------------------------------------------------------------------------------------
# Driver-level pieces Numba lacks
# ---------------------------------------------------------------------------------------------
_SMEM_READY: dict = {}


def kernel_handle(dispatcher, sig):
    """The driver handle (CUkernel) of a compiled Numba kernel, compiling it for ``sig`` if needed.
    (A private path of numba-cuda 0.30; this is the one place that knows it.)"""
    kern = dispatcher.compile(tuple(sig))
    return kern._codelibrary.get_cufunc().handle


def enable_dynamic_smem(dispatcher, sig, nbytes: int) -> None:
    """Allow ``nbytes`` of dynamic shared memory for a kernel (above 48 KiB the driver needs an
    explicit opt-in: cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)). Once per kernel and device."""
    if SIMULATOR or nbytes <= 48 * 1024:
        return
    dev = cuda.get_current_device()
    key = (id(dispatcher), dev.id, nbytes)
    if key in _SMEM_READY:
        return
    optin = dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
    if nbytes > optin:
        from .api import UnsupportedDeviceError
        raise UnsupportedDeviceError(f"the kernel needs {nbytes} bytes of shared memory per block; "
                                     f"this GPU allows {optin}")
    from cuda.bindings import driver as cu
    attr = cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    err, = cu.cuKernelSetAttribute(attr, nbytes, kernel_handle(dispatcher, sig), dev.id)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES, {nbytes}) failed: {err}")
    _SMEM_READY[key] = dispatcher      # (keeps the dispatcher alive, so its id stays unique)
