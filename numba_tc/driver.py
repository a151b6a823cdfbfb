"""The CUDA driver, as numba_tc uses it: devices and their primary contexts, loading compiled
kernels, occupancy queries and launches. Built on ``cuda.bindings.driver`` (NVIDIA's own
bindings); ``libcuda()`` is the library itself, through ctypes, for the one hot call the bindings
make slow (``tensormap.encode``).

Every call runs on the device that holds its operands: ``on_device(dev)`` makes that device's
primary context current (the one torch, CuPy and Numba use) and restores the caller's context
afterwards. Everything cached here is keyed by device.
"""
from __future__ import annotations

import ctypes
import struct
import threading

from .errors import CudaError, UnsupportedDeviceError

__all__ = ["libcuda", "check", "device_count", "on_device", "current_device", "capability", "sm_count", "attribute", "device_name",
           "smem_optin", "arch", "Function", "load", "occupancy", "max_active_clusters", "launch",
           "stream_is_capturing", "device_of_pointer", "dims", "Params", "initialized",
           "mem_alloc", "mem_alloc_during_capture", "mem_free"]

_LOCK = threading.RLock()
_LIB = None


_CU = None


def _cu():
    """cuda.bindings.driver (imported once: an import statement per call costs about 1 us)."""
    global _CU
    if _CU is None:
        from cuda.bindings import driver
        _CU = driver
    return _CU


def libcuda():
    """The driver library through ctypes (loaded once)."""
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def check(result, what: str):
    """The values of a cuda.bindings call, or CudaError naming ``what`` and the driver's error."""
    err = result[0]
    if int(err) != 0:
        name = getattr(err, "name", str(err))
        raise CudaError(f"{what} failed: {name}")
    return result[1] if len(result) == 2 else result[1:]


_INIT = False


def initialized() -> bool:
    """Whether numba_tc has initialized the CUDA driver in this process."""
    return _INIT


def mem_alloc(nbytes: int) -> int:
    """``cuMemAlloc`` in the current context: the address, or CudaError."""
    return int(check((_CU or _cu()).cuMemAlloc(nbytes), "cuMemAlloc"))


def mem_alloc_during_capture(nbytes: int) -> int:
    """``cuMemAlloc`` that is allowed while a stream of this thread (or another) is being
    captured: the thread's capture mode is relaxed for the call and restored. (Under the
    default, global mode, an allocation during a capture fails: a graph does not record it. A
    buffer allocated so and never freed is still there at every replay.)"""
    cu = _CU or _cu()
    relaxed = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
    old = check(cu.cuThreadExchangeStreamCaptureMode(relaxed), "cuThreadExchangeStreamCaptureMode")
    try:
        return mem_alloc(nbytes)
    finally:
        check(cu.cuThreadExchangeStreamCaptureMode(old), "cuThreadExchangeStreamCaptureMode")


def mem_free(p: int) -> None:
    """``cuMemFree`` in the current context."""
    check((_CU or _cu()).cuMemFree(p), "cuMemFree")


def _init():
    global _INIT
    if not _INIT:
        check(_cu().cuInit(0), "cuInit")
        _INIT = True


def device_count() -> int:
    _init()
    return int(check(_cu().cuDeviceGetCount(), "cuDeviceGetCount"))


_PRIMARY: dict = {}


def _primary(dev: int):
    ctx = _PRIMARY.get(dev)
    if ctx is None:
        with _LOCK:
            _init()
            cu = _cu()
            n = device_count()
            if not 0 <= dev < n:
                raise ValueError(f"device {dev} does not exist ({n} CUDA device(s) here)")
            ctx = _PRIMARY[dev] = check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    return ctx


def current_device():
    """The ordinal of the current context's device, or None when no context is current."""
    cu = _cu()
    err, ctx = cu.cuCtxGetCurrent()
    if int(err) != 0 or not int(ctx):
        return None
    return int(check(cu.cuCtxGetDevice(), "cuCtxGetDevice"))


class on_device:
    """``with on_device(dev):`` runs the block in ``dev``'s primary context and leaves the
    caller's current context as it was (no change at all when it already is that one)."""
    __slots__ = ("ctx", "pushed")

    def __init__(self, dev: int):
        self.ctx = _primary(dev)

    def __enter__(self):
        cu = _CU or _cu()
        err, cur = cu.cuCtxGetCurrent()
        self.pushed = cur != self.ctx
        if self.pushed:
            check(cu.cuCtxPushCurrent(self.ctx), "cuCtxPushCurrent")
        return self

    def __exit__(self, *exc):
        if self.pushed:
            check((_CU or _cu()).cuCtxPopCurrent(), "cuCtxPopCurrent")
        return False


_ATTRS: dict = {}


def _attribute(dev: int, name: str) -> int:
    key = (dev, name)
    v = _ATTRS.get(key)
    if v is None:
        cu = _cu()
        _primary(dev)
        attr = getattr(cu.CUdevice_attribute, "CU_DEVICE_ATTRIBUTE_" + name)
        v = _ATTRS[key] = int(check(cu.cuDeviceGetAttribute(attr, dev), f"cuDeviceGetAttribute({name})"))
    return v


def attribute(dev: int, name: str) -> int:
    """Device attribute ``name`` of ``dev`` (``CU_DEVICE_ATTRIBUTE_<name>``, e.g. "CLOCK_RATE")."""
    return _attribute(dev, name)


_NAMES: dict = {}


def device_name(dev: int) -> str:
    """The device's name, e.g. "NVIDIA H100 80GB HBM3"."""
    name = _NAMES.get(dev)
    if name is None:
        _primary(dev)
        raw = check(_cu().cuDeviceGetName(256, dev), "cuDeviceGetName")
        name = _NAMES[dev] = bytes(raw).split(b"\0", 1)[0].decode(errors="replace")
    return name


def capability(dev: int):
    """(major, minor) compute capability of device ``dev``."""
    return _attribute(dev, "COMPUTE_CAPABILITY_MAJOR"), _attribute(dev, "COMPUTE_CAPABILITY_MINOR")


def sm_count(dev: int) -> int:
    """Streaming multiprocessors of device ``dev`` (the size of a persistent grid)."""
    return _attribute(dev, "MULTIPROCESSOR_COUNT")


def smem_optin(dev: int) -> int:
    """The most shared memory one block may have on ``dev`` (after opting in)."""
    return _attribute(dev, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")


def arch(cc) -> str:
    """The compile target for a compute capability: the architecture-specific one ('sm_90a')
    from Hopper on, where wgmma and setmaxnreg live; a cubin for it runs on that exact GPU."""
    major, minor = cc[0], cc[1]
    return f"sm_{major}{minor}" + ("a" if major >= 9 else "")


class Function:
    """A kernel loaded on one device: its CUfunction and what a launch needs to know of it."""
    __slots__ = ("handle", "device", "kernel", "module", "max_smem", "configs")

    def __init__(self, handle, device, kernel, module, max_smem):
        self.handle, self.device, self.kernel, self.module, self.max_smem = handle, device, kernel, module, max_smem
        self.configs = {}


_FUNCS: dict = {}


def load(kernel, dev: int) -> Function:
    """``kernel`` (a ``jit.Kernel``) loaded on device ``dev``: its cubin from the disk cache (built
    on a miss, ``build.cubin``), loaded with cuModuleLoadData, its dynamic shared memory limit
    raised to what the device allows. Cached by (kernel, device)."""
    key = (kernel.key, dev)
    fn = _FUNCS.get(key)
    if fn is not None:
        return fn
    from .build import ENTRY, cubin
    cu = _cu()
    with _LOCK:
        fn = _FUNCS.get(key)
        if fn is not None:
            return fn
        image = cubin(kernel, arch(capability(dev)))
        with on_device(dev):
            module = check(cu.cuModuleLoadData(image), "cuModuleLoadData")
            handle = check(cu.cuModuleGetFunction(module, ENTRY.encode()), "cuModuleGetFunction")
            static = int(check(cu.cuFuncGetAttribute(
                cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, handle), "cuFuncGetAttribute"))
            max_smem = smem_optin(dev) - static
            check(cu.cuFuncSetAttribute(handle, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        max_smem), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
            if kernel.max_shared:
                # the largest shared-memory carveout of L1: without it the driver may pick a
                # 64 KiB split on Hopper, and a 32 KiB block then runs alone on its SM
                check(cu.cuFuncSetAttribute(handle, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                                            100), "cuFuncSetAttribute(PREFERRED_SHARED_MEMORY_CARVEOUT)")
        fn = _FUNCS[key] = Function(handle, dev, kernel, module, max_smem)
    return fn


def _need_smem(fn: Function, smem: int) -> None:
    if smem > fn.max_smem:
        raise UnsupportedDeviceError(f"{fn.kernel.name} needs {smem} bytes of shared memory per block; "
                                     f"device {fn.device} allows {fn.max_smem}")


def occupancy(fn: Function, block: int, smem: int = 0) -> int:
    """Blocks of this kernel one SM holds at once (registers, shared memory and threads as
    compiled), so that a grid's waves can be counted."""
    cu = _cu()
    with on_device(fn.device):
        n = int(check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn.handle, block, smem),
                      "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
    if n < 1:
        raise UnsupportedDeviceError(f"{fn.kernel.name} does not fit an SM of device {fn.device} "
                                     f"({block} threads, {smem} bytes of shared memory)")
    return n


def max_active_clusters(fn: Function, block: int, smem: int, cluster: int) -> int:
    """How many clusters of this kernel can be resident at once (cuOccupancyMaxActiveClusters).
    Not sm_count / cluster: a cluster must fit inside one GPC, and the H100's GPCs have uneven
    numbers of free SMs, so a persistent grid sized by SM count would leave clusters for a
    second wave."""
    cu = _cu()
    _need_smem(fn, smem)
    with on_device(fn.device):
        n = int(check(cu.cuOccupancyMaxActiveClusters(fn.handle, _config(cluster, block, smem, 0, cluster)),
                      "cuOccupancyMaxActiveClusters"))
    if n < 1:
        raise UnsupportedDeviceError(f"{fn.kernel.name}: no cluster of {cluster} fits device {fn.device}")
    return n


# Programmatic dependent launches (``launch(..., dependent=True)``); False: every launch waits for
# the whole of the one before it, as a plain launch does (A/B runs: benchmarks/pdl_ab.py at 4dce1f6)
DEPENDENT_LAUNCHES = True


def _config(grid: int, block: int, smem: int, stream: int, cluster: int, dependent: bool = False):
    cu = _cu()
    cfg = cu.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid, 1, 1
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block, 1, 1
    cfg.sharedMemBytes = smem
    cfg.hStream = cu.CUstream(stream)
    attrs = []
    if cluster > 1:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
        attrs.append(attr)
    if dependent:
        attr = cu.CUlaunchAttribute()
        attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


class Params:
    """A kernel's parameter values packed for cuLaunchKernel: a buffer holding them (int64s and
    128-byte tensor maps, in ``layout``'s order) and the array of pointers into it the driver
    reads them through. One per launch site and thread; the driver copies the values at launch,
    so the buffer is reused."""
    __slots__ = ("fmt", "buf", "ptrs", "addr", "last")

    def __init__(self, layout):
        self.fmt = "=" + "".join("128s" if p == "map" else "q" for p in layout)
        size = struct.calcsize(self.fmt)
        self.buf = ctypes.create_string_buffer(max(size, 8))
        base = ctypes.addressof(self.buf)
        offsets, off = [], 0
        for p in layout:
            offsets.append(off)
            off += 128 if p == "map" else 8
        self.ptrs = (ctypes.c_void_p * max(len(layout), 1))(*[base + o for o in offsets])
        self.addr = ctypes.addressof(self.ptrs)
        self.last = None          # what the buffer holds (see plan.Step.run)

    def pack(self, values) -> int:
        struct.pack_into(self.fmt, self.buf, 0, *values)
        return self.addr


_STREAMS: dict = {}


def dims(d):
    """(x, y) of a launch dimension given as an int, (x,) or (x, y)."""
    if isinstance(d, int):
        return d, 1
    return (d[0], 1) if len(d) == 1 else (d[0], d[1])


def launch(fn: Function, grid, block, smem: int, stream: int, addr: int, cluster: int = 1,
           dependent: bool = False) -> None:
    """Launch ``fn`` on ``stream`` (a raw CUstream handle of ``fn``'s device) with the parameters
    at ``addr`` (``Params.pack``); ``grid`` and ``block`` are (x, y) pairs; ``cluster`` > 1
    launches thread-block clusters of that many blocks along x, ``dependent`` as a programmatic
    dependent of the launch before it on the stream (it may start before that one ends: the
    kernel waits for it, ``grid_dep_wait``) (both by cuLaunchKernelEx). The caller is inside
    ``on_device(fn.device)``."""
    cu = _CU or _cu()
    dependent = dependent and DEPENDENT_LAUNCHES
    if cluster == 1 and not dependent:
        s = _STREAMS.get(stream)
        if s is None:
            if len(_STREAMS) > 1024:
                _STREAMS.clear()
            s = _STREAMS[stream] = cu.CUstream(stream)
        err, = cu.cuLaunchKernel(fn.handle, grid[0], grid[1], 1, block[0], block[1], 1, smem, s, addr, 0)
    else:
        if grid[0] % cluster or grid[1] != 1 or block[1] != 1:
            raise ValueError(f"grid {grid} is not a row of whole clusters of {cluster} (blocks of one row)")
        key = (grid[0], block[0], smem, stream, cluster, dependent)
        cfg = fn.configs.get(key)
        if cfg is None:
            if len(fn.configs) > 256:
                fn.configs.clear()
            cfg = fn.configs[key] = _config(*key)
        err, = cu.cuLaunchKernelEx(cfg, fn.handle, addr, 0)
    if int(err) != 0:
        _need_smem(fn, smem)
        raise CudaError(f"launching {fn.kernel.name} (grid {grid}, block {block}, {smem} bytes of "
                        f"shared memory, cluster {cluster}{', dependent' if dependent else ''}) failed: "
                        f"{getattr(err, 'name', err)}")


def stream_is_capturing(stream: int) -> bool:
    """Whether ``stream`` is being captured into a CUDA graph."""
    cu = _cu()
    status = check(cu.cuStreamIsCapturing(cu.CUstream(stream)), "cuStreamIsCapturing")
    return int(status) != 0


def device_of_pointer(ptr: int) -> int:
    """The device ordinal a device pointer belongs to (for arrays that do not say)."""
    cu = _cu()
    _init()
    attr = cu.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    return int(check(cu.cuPointerGetAttribute(attr, ptr), "cuPointerGetAttribute(DEVICE_ORDINAL)"))
