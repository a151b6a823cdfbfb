"""Operands from any GPU array library, seen the way the kernels see them.

A ``Matrix`` is a 2-D operand reduced to what a kernel needs: its device pointer, (rows, cols),
the leading dimension ``ld`` and ``trans`` (False: row-major, element (r, c) at ``r*ld + c``;
True: column-major, at ``c*ld + r``). A transposed view is just the other layout of the same
memory, so it needs no copy. (Under the simulator, where kernels take arrays, ``Matrix.data`` is a
flat NumPy view of the operand.)

Accepted: NumPy arrays (copied to the GPU and back), Numba device arrays, and any object with
``__cuda_array_interface__`` (CuPy) or a torch CUDA tensor (through ``data_ptr``/``stride``, so
torch.bfloat16 works too).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple

import numpy as np

from .errors import CudaError
from .intrinsics import SIMULATOR
from .layout import FP8, ITEMSIZE

__all__ = ["Matrix", "as_matrix", "as_copied", "array_kind", "dtype_name", "describe", "address", "new_like",
           "np_dtype", "numba_facts", "empty_cache", "zero_fill", "device_out", "SUPPORTED_DTYPES"]

SUPPORTED_DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")


_DTYPE_NAMES: dict = {}


def dtype_name(dt) -> str:
    """Canonical dtype name: 'float32', 'float16', 'bfloat16' (ml_dtypes / torch), else str(dt)."""
    try:
        return _DTYPE_NAMES[dt]
    except (KeyError, TypeError):
        pass
    try:
        name = np.dtype(dt).name          # NumPy types and names, ml_dtypes.bfloat16
    except TypeError:
        s = str(dt)
        if s.startswith("torch."):
            s = s[len("torch."):]
        name = {"float": "float32", "half": "float16"}.get(s, s)
    try:
        if len(_DTYPE_NAMES) < 64:
            _DTYPE_NAMES[dt] = name
    except TypeError:                      # unhashable
        pass
    return name


_KINDS: dict = {}


def array_kind(x) -> str:
    """'numpy', 'torch', 'numba' or 'cuda' (another __cuda_array_interface__ object, e.g. CuPy)."""
    t = type(x)
    kind = _KINDS.get(t)
    if kind is not None:
        return kind
    if isinstance(x, np.ndarray):
        kind = "numpy"
    elif t.__module__.startswith("torch"):
        kind = "torch"
    elif t.__module__.startswith("numba"):
        kind = "numba"
    elif hasattr(x, "__cuda_array_interface__"):
        kind = "cuda"
    if kind is not None:
        _KINDS[t] = kind
        return kind
    raise TypeError(f"unsupported operand type {type(x).__name__}: pass a NumPy array, a Numba "
                    "device array, a CuPy array or a torch CUDA tensor")


@dataclass
class Matrix:
    data: Any              # under the simulator: a flat NumPy view of the operand (else None)
    rows: int
    cols: int
    ld: int
    trans: bool
    dtype: str
    ptr: int
    owner: Any = None      # the object whose memory this is (kept alive)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def aligned16(self) -> bool:
        """Every row (column, if trans) starts on a 16-byte boundary: 16-byte accesses are legal."""
        return self.ptr % 16 == 0 and (self.ld * self.itemsize) % 16 == 0

    @property
    def pairs_aligned(self) -> bool:
        """Adjacent columns can be written as one 2-element store (C's paired epilogue stores)."""
        return self.ptr % (2 * self.itemsize) == 0 and self.ld % 2 == 0

    @property
    def span_bytes(self) -> int:
        """Bytes from the operand's first element to just past its last."""
        return self.extent * self.itemsize

    @property
    def extent(self) -> int:
        """Elements from the operand's first to its last (the span a flat view covers)."""
        if self.rows == 0 or self.cols == 0:
            return 0
        return (self.cols - 1) * self.ld + self.rows if self.trans else (self.rows - 1) * self.ld + self.cols

    def overlaps(self, other: "Matrix") -> bool:
        """Whether the memory spans of two operands intersect."""
        if self.extent == 0 or other.extent == 0:
            return False
        return (self.ptr < other.ptr + other.span_bytes
                and other.ptr < self.ptr + self.span_bytes)

    def transposed(self) -> "Matrix":
        """The same memory read as the transpose (cols x rows)."""
        return Matrix(self.data, self.cols, self.rows, self.ld, not self.trans, self.dtype,
                      self.ptr, self.owner)


def layout_of(shape: Tuple[int, int], strides: Tuple[int, int], name: str) -> Tuple[bool, int]:
    """(trans, ld) from element strides, or ValueError when neither dimension has unit stride."""
    rows, cols = shape
    s0, s1 = strides
    if s1 == 1 or cols == 1:                       # row-major: rows are ld apart
        ld = s0 if rows > 1 else cols
        if ld >= cols:
            return False, max(ld, 1)
    if s0 == 1 or rows == 1:                       # column-major: columns are ld apart
        ld = s1 if cols > 1 else rows
        if ld >= rows:
            return True, max(ld, 1)
    raise ValueError(f"{name} has strides {tuple(strides)} (in elements) for shape {tuple(shape)}: "
                     "one dimension must be contiguous (stride 1) and rows/columns must not "
                     "overlap; make a contiguous copy first")


def describe(x, name: str):
    """(kind, shape, element strides, dtype name, device pointer; None for NumPy arrays)."""
    kind = array_kind(x)
    if kind == "numpy":
        return kind, x.shape, tuple(s // x.itemsize for s in x.strides), dtype_name(x.dtype), None
    if kind == "torch":
        if not x.is_cuda:
            raise TypeError(f"{name} is a torch tensor on {x.device}: move it to a CUDA device")
        return kind, tuple(x.shape), tuple(x.stride()), dtype_name(x.dtype), x.data_ptr()
    if SIMULATOR and kind == "numba":     # the simulator's device arrays wrap NumPy arrays
        h = x._ary
        return kind, h.shape, tuple(st // h.itemsize for st in h.strides), dtype_name(h.dtype), h.ctypes.data
    iface = x.__cuda_array_interface__
    dt = np.dtype(iface["typestr"])
    shape = tuple(iface["shape"])
    if iface.get("strides") is None:
        strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) for i in range(len(shape)))
    else:
        strides = tuple(s // dt.itemsize for s in iface["strides"])
    return kind, shape, strides, dtype_name(dt), iface["data"][0]


def as_matrix(x, name: str, stream=0, raw_bf16: bool = False, described=None) -> Matrix:
    """Normalise one operand. NumPy arrays are copied to the device (``Matrix.owner`` keeps the
    device copy). ``raw_bf16``: x is a uint16 device array holding bfloat16 words (Numba has no
    bfloat16 arrays; api.gemm allocates one for a NumPy bfloat16 result). ``described``: what
    ``describe(x, name)`` returned, if the caller has it already."""
    kind, shape, strides, dtype, ptr = described or describe(x, name)
    if raw_bf16 and dtype == "uint16":
        dtype = "bfloat16"
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D, got {len(shape)}-D with shape {tuple(shape)}")
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {dtype}; numba_tc takes {', '.join(SUPPORTED_DTYPES)}")
    rows, cols = shape
    if kind == "numpy":
        from numba import cuda
        host = x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))   # (the device's byte order)
        if dtype == "bfloat16":            # ml_dtypes.bfloat16: ship the raw 16-bit words
            host = x.view(np.uint16)
        elif dtype in FP8:                 # ml_dtypes' 8-bit floats: the raw bytes
            host = x.view(np.uint8)
        if not (host.flags.c_contiguous or host.flags.f_contiguous):
            host = np.ascontiguousarray(host)     # it is copied to the device anyway
        if host.flags.c_contiguous:
            trans, ld, flat = False, max(cols, 1), host.reshape(-1)
        else:
            trans, ld, flat = True, max(rows, 1), host.T.reshape(-1)
        dev = cuda.to_device(np.ascontiguousarray(flat), stream=stream)
        ptr = dev._ary.ctypes.data if SIMULATOR else dev.device_ctypes_pointer.value
        return Matrix(dev, rows, cols, ld, trans, dtype, ptr, dev)
    trans, ld = layout_of((rows, cols), strides, name)
    m = Matrix(None, rows, cols, ld, trans, dtype, ptr, x)
    if SIMULATOR:
        h = x._ary if kind == "numba" else np.asarray(x)
        m.data = np.lib.stride_tricks.as_strided(h, shape=(m.extent,), strides=(h.itemsize,))
    return m


def as_copied(x, name: str, described=None) -> Matrix:
    """The ``Matrix`` a NumPy array becomes on the device (``as_matrix`` copies it there:
    column-major if it is only F-contiguous, else row-major), without the copy: for planning
    (``api.explain``); its address a stand-in aligned as a new allocation is."""
    _, shape, _, dtype, _ = described or describe(x, name)
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D, got {len(shape)}-D with shape {tuple(shape)}")
    rows, cols = shape
    trans = bool(x.flags.f_contiguous and not x.flags.c_contiguous)
    return Matrix(None, rows, cols, max(rows if trans else cols, 1), trans, dtype, 0)


def address(x, kind: str) -> int:
    """The device address of a GPU array's first element."""
    if kind == "torch":
        return x.data_ptr()
    if kind == "numba" and not SIMULATOR:
        try:
            return int(x.gpu_data.device_pointer)
        except AttributeError:
            pass
    return x.__cuda_array_interface__["data"][0]


# --- Numba device arrays at the cost of torch tensors --------------------------------------------
# Where a warm call on Numba device arrays spent its time (69 us at 64^3 against 12-17 for torch
# and CuPy): ``__cuda_array_interface__`` builds a dict per access (and ``is_contiguous`` walks the
# strides), the device came from a driver query of the pointer, Numba's default stream from its
# current context, and the result from ``cuda.device_array``: Numba's context lookup, a
# ``cuMemAlloc`` per call, and every tenth collected array a ``cuMemFree`` (which synchronizes
# the device). Here the facts are read from the array's attributes, and results come from a
# small cache of device blocks (below).

def numba_facts(x):
    """What decides a call about a Numba device array, from its attributes: ((shape, byte
    strides, dtype, address mod 32, device), address), or None when ``x`` has no Numba memory
    pointer (the caller then reads ``__cuda_array_interface__``)."""
    try:
        gd = x.gpu_data
        p = int(gd.device_pointer)
        dev = gd.context.device.id
        return (x.shape, x.strides, x.dtype, p & 31, dev), p
    except (AttributeError, ReferenceError, TypeError):
        return None


class _Blocks:
    """Device memory for the results of calls on Numba arrays, kept for reuse like torch's and
    CuPy's allocators keep theirs: a block freed (its array collected) is reused only by a call
    on the same device and the same stream, so the stream's order makes the reuse safe (on the
    legacy default stream, Numba's, also against Numba's blocking streams). ``MAX_CACHED`` bytes
    per device are kept; beyond that a block is freed with ``cuMemFree``, as Numba frees."""
    MAX_CACHED = 1 << 30

    def __init__(self, dev: int):
        import threading
        from numba import cuda
        self.dev = dev
        self.context = cuda.current_context()        # (the caller made dev's context current)
        self.free: dict = {}                          # (stream, bytes) -> [address]
        self.cached = 0
        self.lock = threading.Lock()

    def take(self, nbytes: int, stream: int) -> int:
        with self.lock:
            lst = self.free.get((stream, nbytes))
            if lst:
                self.cached -= nbytes
                return lst.pop()
        from . import driver
        try:
            return driver.mem_alloc(nbytes)
        except CudaError:                            # out of memory: give the cached blocks back
            self.release()
            return driver.mem_alloc(nbytes)

    def give(self, p: int, nbytes: int, stream: int) -> None:
        with self.lock:
            if self.cached + nbytes <= self.MAX_CACHED:
                self.free.setdefault((stream, nbytes), []).append(p)
                self.cached += nbytes
                return
        self._free(p)

    def release(self) -> None:
        """Free every cached block (``numba_tc.arrays.empty_cache``)."""
        with self.lock:
            ps = [p for lst in self.free.values() for p in lst]
            self.free.clear()
            self.cached = 0
        for p in ps:
            self._free(p)

    def _free(self, p: int) -> None:
        from . import driver
        try:
            with driver.on_device(self.dev):
                driver.mem_free(p)
        except Exception:                            # (interpreter shutdown, a capture: leave it)
            pass


_BLOCKS: dict = {}
_TEMPLATES: dict = {}


def empty_cache() -> None:
    """Free the device blocks kept for results of calls on Numba arrays."""
    for b in list(_BLOCKS.values()):
        b.release()


def _numba_result(rows: int, cols: int, dtype: str, dev: int, stream: int):
    """A C-contiguous Numba device array on ``dev`` (its context current) from ``_Blocks``."""
    from numba.cuda.cudadrv import driver as nd
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    key = (rows, cols, dtype)
    tpl = _TEMPLATES.get(key)
    if tpl is None:                                  # everything but the memory, made once
        dt = np_dtype(dtype)
        proto = DeviceNDArray((rows, cols), (cols * dt.itemsize, dt.itemsize), dt, gpu_data=_NoMemory())
        tpl = dict(proto.__dict__)
        del tpl["gpu_data"], tpl["stream"]
        if len(_TEMPLATES) < 1024:
            _TEMPLATES[key] = tpl
    nbytes = tpl["alloc_size"] if tpl["size"] else 0
    blocks = _BLOCKS.get(dev)
    if blocks is None:
        blocks = _BLOCKS[dev] = _Blocks(dev)
    arr = DeviceNDArray.__new__(DeviceNDArray)
    arr.__dict__.update(tpl)
    arr.stream = 0
    if nbytes == 0:
        arr.gpu_data = nd.MemoryPointer(blocks.context, nd.binding.CUdeviceptr(0), 0)
        return arr
    p = blocks.take(nbytes, stream)
    arr.gpu_data = nd.MemoryPointer(blocks.context, nd.binding.CUdeviceptr(p), nbytes,
                                    finalizer=_Giver(blocks, p, nbytes, stream))
    return arr


class _Giver:
    """A result's finalizer: its block back to ``_Blocks`` (no reference to the array)."""
    __slots__ = ("blocks", "p", "nbytes", "stream")

    def __init__(self, blocks, p, nbytes, stream):
        self.blocks, self.p, self.nbytes, self.stream = blocks, p, nbytes, stream

    def __call__(self):
        self.blocks.give(self.p, self.nbytes, self.stream)


class _NoMemory:
    """Stands in for memory while a template array is made."""
    device_pointer = 0


def new_like(kind: str, like, rows: int, cols: int, dtype: str, stream=0, handle=None, device=None):
    """A new C-contiguous (rows x cols) array of ``dtype`` of the same kind (and device) as
    ``like`` (Numba arrays: on the current context's device, which the caller has made the
    operands' device). For Numba arrays, ``handle`` (the call's raw stream) and ``device`` (the
    operands' device) take the result from a cache of blocks reused on that stream."""
    if kind == "numba" and handle is not None and device is not None and not SIMULATOR:
        return _numba_result(rows, cols, dtype, device, handle)
    if kind == "torch":
        import torch
        return like.new_empty((rows, cols), dtype=getattr(torch, dtype))
    if kind == "cuda":
        try:
            import cupy
            if isinstance(like, cupy.ndarray):
                with cupy.cuda.Device(like.device.id):
                    return cupy.empty((rows, cols), dtype=np_dtype(dtype))
        except ImportError:
            pass
    from numba import cuda
    return cuda.device_array((rows, cols), dtype=np_dtype(dtype), stream=stream)


def np_dtype(dtype: str):
    if dtype == "bfloat16" or dtype in FP8:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, dtype))
    return np.dtype(dtype)


def to_host(dev_array, dtype: str, stream=0) -> np.ndarray:
    out = dev_array.copy_to_host(stream=stream)
    if dtype in ("bfloat16",):
        out = out.view(np_dtype(dtype))
    return out


def zero_fill(obj, kind: str) -> None:
    """Set every element of an array of ``kind`` to zero."""
    if kind == "numpy":
        obj[...] = 0
    elif kind == "torch":
        obj.zero_()
    elif hasattr(obj, "fill"):
        obj.fill(0)
    else:
        obj.copy_to_device(np.zeros(obj.shape, dtype=obj.dtype))


def device_out(out, m: int, n: int, out_dtype: str, stream):
    """The device buffer a NumPy call's kernel writes: a copy of ``out`` when one is given (in its
    memory order, so a column-major ``out`` is written column-major on the device, and whatever
    it holds, such as a checker's NaN poison, is what the kernel overwrites), else a new
    row-major array. bfloat16 travels as its raw 16-bit words."""
    from numba import cuda
    raw = np.uint16 if out_dtype == "bfloat16" else np_dtype(out_dtype)
    if out is None:
        return cuda.device_array((m, n), dtype=raw, stream=stream)
    host = out.view(raw) if out_dtype == "bfloat16" else out.astype(raw, copy=False)    # (native byte order)
    if not (host.flags.c_contiguous or host.flags.f_contiguous):
        host = np.ascontiguousarray(host)
    return cuda.to_device(host, stream=stream)
