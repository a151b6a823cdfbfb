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
from collections import OrderedDict

from numba import config, cuda, types

__all__ = ["SIMULATOR", "PTX_DIR", "ptx_source", "ptr", "load_f32x4", "store_f32x4", "red_add_f32",
           "ldg_f32x4", "stg_f32x4", "MMA_SIGNATURES", "HOPPER_SIGNATURES", "kernel_handle",
           "enable_dynamic_smem", "tma_requirements", "tma_rows_fast", "encode_tensor_map", "tensor_map", "sm_count",
           "launch_ex", "max_active_clusters", "resident_blocks", "current_device_id", "scratch"]

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

    @cuda.jit(device=True)           # (the simulator provides cuda.atomic inside device functions)
    def red_add_f32(p, idx, x):
        cuda.atomic.add(p, idx, x)

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

    @intrinsic
    def red_add_f32(typingctx, p, idx, x):
        """p[idx] += x atomically, result unused (RED.ADD.F32: partial sums of split-K blocks)."""
        if not (isinstance(p, types.CPointer) and p.dtype == types.float32 and isinstance(idx, types.Integer)):
            return None
        sig = types.void(p, idx, types.float32)

        def codegen(context, builder, sig, args):
            from numba.cuda import nvvmutils
            i = context.cast(builder, args[1], sig.args[1], types.intp)
            v = context.cast(builder, args[2], sig.args[2], types.float32)
            addr = builder.gep(args[0], [i])          # (NVVM's IR takes no atomicrmw fadd)
            builder.call(nvvmutils.declare_atomic_add_float32(builder.module), [addr, v])
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
    "sts_out2": _I32(_I32, _F32, _F32, _I32),
}
# Under the simulator (which cannot link code) each name is None and tensor-core kernels are not built.
for _name, _sig in MMA_SIGNATURES.items():
    globals()[_name] = None if SIMULATOR else cuda.declare_device(_name, _sig, link=ptx_source("mma.cu"))
__all__ += list(MMA_SIGNATURES)


# ---------------------------------------------------------------------------------------------
# The Hopper primitives of ptx/hopper.cu (sm_90a only; linked only into the kernels that call
# them, so the mma.sync ladder still builds for sm_80). Descriptors and tensor-map addresses are
# int64 bit patterns.
# ---------------------------------------------------------------------------------------------
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
    "tma_store_commit": _I32(),
    "tma_store_wait_read": _I32(_I32),
    "tma_prefetch_map": _I32(_I64),
    "fence_proxy_async": _I32(),
    "cluster_ctarank": _I32(),
    "cluster_sync": _I32(),
    "named_barrier": _I32(_I32, _I32),
    "tma_store_wait_all": _I32(),
    "wgmma_fence": _I32(),
    "wgmma_commit": _I32(),
    "wgmma_wait": _I32(_I32),
    **{f"wgmma_m64n{n}k16": _I32(_P(_F32), _I32, _I64, _I64, _I32, _I32, _I32, _I32) for n in (64, 128, 256)},
    "setmaxnreg_inc": _I32(_I32),
    "setmaxnreg_dec": _I32(_I32),
    "st_partial4": _I32(_I64, _P(_F32), _I32),
    "add_partial4": _I32(_P(_F32), _I32, _I64),
    "fence_gpu": _I32(),
    "atom_add_gpu": _I32(_I64, _I32),
    "st_gpu_s32": _I32(_I64, _I32),
}
for _name, _sig in HOPPER_SIGNATURES.items():
    globals()[_name] = None if SIMULATOR else cuda.declare_device(_name, _sig, link=ptx_source("hopper.cu"))
__all__ += list(HOPPER_SIGNATURES)


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
    key = (id(dispatcher), current_device_id(), nbytes)
    if key in _SMEM_READY:
        return
    dev = cuda.get_current_device()
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


# ---------------------------------------------------------------------------------------------
# TMA tensor maps
# ---------------------------------------------------------------------------------------------
_TMAP_DTYPES = {"float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32"}
_TMAP_SWIZZLE = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
_TMAPS: OrderedDict = OrderedDict()    # (device, arguments) -> (address, device array) of the map
TMAP_CACHE_SIZE = 256


def tma_requirements(ptr: int, ld: int, itemsize: int):
    """Why a row-major matrix (rows ``ld`` elements apart) cannot be a TMA source, or None.
    (cuTensorMapEncodeTiled: 16-byte aligned base, row strides a multiple of 16 bytes.)"""
    if ptr % 16:
        return f"its data pointer is not 16-byte aligned (address % 16 = {ptr % 16})"
    if (ld * itemsize) % 16:
        return (f"its rows are {ld * itemsize} bytes apart, not a multiple of 16 "
                f"(leading dimension {ld} x {itemsize} bytes)")
    return None


def tma_rows_fast(ptr: int, ld: int, itemsize: int) -> bool:
    """Whether every row of the matrix starts on a 32-byte sector. Rows that do not (16 mod 32
    bytes apart) cost each 128-byte box row a fifth sector, and the operand that is two thirds of
    a 128x256 tile's traffic then starves the kernel: H100, bf16 4096^3, B rows padded to 16 mod
    32 bytes: 523 vs 782 TFLOP/s, whether loaded by TMA or by cp.async (benchmarks/NOTES.md)."""
    return ptr % 32 == 0 and (ld * itemsize) % 32 == 0


def encode_tensor_map(ptr: int, dtype: str, cols: int, rows: int, ld: int, box_cols: int,
                      box_rows: int, swizzle: int = 128):
    """The 128-byte CUtensorMap of a row-major ``rows x cols`` matrix (element (r, c) at
    ``ptr + (r * ld + c) * itemsize``) read or written in ``box_rows x box_cols`` boxes, as a NumPy
    uint64[16] (cuTensorMapEncodeTiled; out-of-bounds box elements read as zero)."""
    import numpy as np
    from cuda.bindings import driver as cu
    itemsize = 4 if dtype == "float32" else 2
    why = tma_requirements(ptr, ld, itemsize)
    if why:
        raise ValueError(f"TMA cannot read this matrix: {why}")
    if not (1 <= box_cols <= 256 and 1 <= box_rows <= 256):
        raise ValueError(f"TMA boxes are at most 256 x 256, got {box_rows} x {box_cols}")
    if swizzle and box_cols * itemsize > swizzle:
        raise ValueError(f"a {swizzle}B-swizzled box row is at most {swizzle} bytes, got {box_cols * itemsize}")
    u64, u32 = cu.cuuint64_t, cu.cuuint32_t
    err, tmap = cu.cuTensorMapEncodeTiled(
        getattr(cu.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _TMAP_DTYPES[dtype]), 2, ptr,
        [u64(cols), u64(rows)], [u64(ld * itemsize)], [u32(box_cols), u32(box_rows)], [u32(1), u32(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(cu.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + _TMAP_SWIZZLE[swizzle]),
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err} (rows={rows}, cols={cols}, "
                           f"ld={ld}, box={box_rows}x{box_cols}, dtype={dtype})")
    return np.array([int(w) for w in tmap.opaque], dtype=np.uint64)


def tensor_map(ptr: int, dtype: str, cols: int, rows: int, ld: int, box_cols: int, box_rows: int,
               swizzle: int = 128) -> int:
    """Device address of the tensor map for these arguments (see ``encode_tensor_map``), kept in
    global memory and cached by its arguments: a map depends on nothing else, so a later matrix
    at the same address and shape reuses it. The least recently used of ``TMAP_CACHE_SIZE`` go."""
    key = (current_device_id(), ptr, dtype, cols, rows, ld, box_cols, box_rows, swizzle)
    hit = _TMAPS.get(key)
    if hit is None:
        words = encode_tensor_map(ptr, dtype, cols, rows, ld, box_cols, box_rows, swizzle)
        dev = cuda.to_device(words)           # synchronous: ready before any later launch
        hit = _TMAPS[key] = (dev.device_ctypes_pointer.value, dev)
        if len(_TMAPS) > TMAP_CACHE_SIZE:
            _TMAPS.popitem(last=False)
    else:
        _TMAPS.move_to_end(key)
    return hit[0]


def current_device_id() -> int:
    """Ordinal of the current context's GPU, asked of the driver (cuCtxGetDevice): Numba's
    get_current_device costs several context lookups, and a launch needs the answer often."""
    from cuda.bindings import driver as cu
    err, dev = cu.cuCtxGetDevice()
    if err != cu.CUresult.CUDA_SUCCESS:         # no current context yet: Numba makes one
        return cuda.get_current_device().id
    return int(dev)


_SMS: dict = {}
_SCRATCH: dict = {}


def scratch(name: str, nbytes: int, stream, zeroed: bool = False) -> int:
    """Device address of a scratch buffer of at least ``nbytes``, one per (name, device,
    stream), kept and grown as needed (stream-K's partial sums and counters). ``zeroed``: filled
    with zeros when (re)allocated; the kernels using it leave it zeroed."""
    import numpy as np
    h = stream.handle
    key = (name, current_device_id(), int(getattr(h, "value", h) or 0))
    hit = _SCRATCH.get(key)
    if hit is None or hit[1].size < nbytes:
        size = max(nbytes, 2 * hit[1].size if hit else 0, 256)
        buf = cuda.to_device(np.zeros(size, np.uint8)) if zeroed else cuda.device_array(size, np.uint8)
        hit = _SCRATCH[key] = (buf.device_ctypes_pointer.value, buf)
    return hit[0]


def sm_count() -> int:
    """Streaming multiprocessors of the current GPU (the size of a persistent grid)."""
    d = current_device_id()
    if d not in _SMS:
        _SMS[d] = cuda.get_current_device().MULTIPROCESSOR_COUNT
    return _SMS[d]


def _launch_config(grid: int, block: int, smem: int, stream_handle: int, cluster: int):
    from cuda.bindings import driver as cu
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
    cfg.sharedMemBytes = smem
    cfg.hStream = cu.CUstream(stream_handle)
    if cluster > 1:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        cfg.attrs = [attr]
        cfg.numAttrs = 1
    return cfg


_FUNCS: dict = {}


def _cufunction(dispatcher, sig):
    """The kernel's CUfunction in the current context, cached by (kernel, signature, context):
    asking Numba (``kernel_handle``) costs several context lookups per launch."""
    from cuda.bindings import driver as cu
    err, ctx = cu.cuCtxGetCurrent()
    key = (id(dispatcher), tuple(sig), int(ctx) if err == cu.CUresult.CUDA_SUCCESS else -1)
    hit = _FUNCS.get(key)
    if hit is None:
        h = kernel_handle(dispatcher, sig)
        hit = _FUNCS[key] = (h if isinstance(h, cu.CUfunction) else cu.CUfunction(int(h)), dispatcher)
    return hit[0]


_CLUSTERS: dict = {}
_RESIDENT: dict = {}


def resident_blocks(dispatcher, sig, block: int, smem: int = 0) -> int:
    """Blocks of this kernel one SM holds at once (cuOccupancyMaxActiveBlocksPerMultiprocessor:
    registers, shared memory and threads as compiled), so a grid's waves can be counted."""
    key = (id(dispatcher), tuple(sig), current_device_id(), block, smem)
    if key not in _RESIDENT:
        from cuda.bindings import driver as cu
        err, n = cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(_cufunction(dispatcher, sig), block, smem)
        if err != cu.CUresult.CUDA_SUCCESS or n < 1:
            raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed: {err} ({n} blocks)")
        _RESIDENT[key] = (int(n), dispatcher)
    return _RESIDENT[key][0]


def max_active_clusters(dispatcher, sig, block: int, smem: int, cluster: int) -> int:
    """How many clusters of this kernel can be resident at once (cuOccupancyMaxActiveClusters).
    Not sm_count / cluster: a cluster must fit inside one GPC, and the H100's GPCs have uneven
    numbers of free SMs, so a persistent grid sized by SM count would leave clusters for a
    second wave."""
    key = (id(dispatcher), current_device_id(), block, smem, cluster)
    if key not in _CLUSTERS:
        from cuda.bindings import driver as cu
        cfg = _launch_config(cluster, block, smem, 0, cluster)
        err, n = cu.cuOccupancyMaxActiveClusters(_cufunction(dispatcher, sig), cfg)
        if err != cu.CUresult.CUDA_SUCCESS or n < 1:
            raise RuntimeError(f"cuOccupancyMaxActiveClusters failed: {err} ({n} clusters)")
        _CLUSTERS[key] = (int(n), dispatcher)
    return _CLUSTERS[key][0]


_CONFIGS: dict = {}


def launch_ex(dispatcher, sig, grid: int, block: int, smem: int, stream, cluster: int, args) -> None:
    """Launch a compiled Numba kernel through the driver (cuLaunchKernelEx), as thread-block
    clusters of ``cluster`` blocks along x when ``cluster`` > 1 (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    Numba's launcher has no cluster option, and it prepares every argument on every call).
    ``args`` are int64 values, matching a signature of int64 parameters."""
    import ctypes
    from cuda.bindings import driver as cu
    if grid % cluster:
        raise ValueError(f"grid {grid} is not a multiple of the cluster size {cluster}")
    h = stream.handle                    # a ctypes c_void_p or a cuda.bindings CUstream
    key = (grid, block, smem, int(getattr(h, "value", h) or 0), cluster)
    cfg = _CONFIGS.get(key)
    if cfg is None:                      # (cuda.bindings builds one in Python: reuse it)
        if len(_CONFIGS) > 256:
            _CONFIGS.clear()
        cfg = _CONFIGS[key] = _launch_config(*key)
    values = [ctypes.c_int64(int(a)) for a in args]
    ptrs = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
    err, = cu.cuLaunchKernelEx(cfg, _cufunction(dispatcher, sig), ctypes.addressof(ptrs), 0)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuLaunchKernelEx (grid {grid}, cluster {cluster}) failed: {err}")
