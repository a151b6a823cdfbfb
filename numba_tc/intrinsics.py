"""Numba intrinsics the kernels are written with: raw pointers and 16-byte accesses.

* **Raw pointers.** Numba applies NumPy's negative-index wrap-around to every signed array index,
  which costs about four 64-bit integer instructions per access in an unrolled inner loop (seen in
  SASS: 71 IADD3 + 40 IMAD.X for 32 shared loads). ``ptr(a)`` turns a shared or local array into
  a cffi pointer (``ffi.from_buffer``) and ``f32_ptr(addr)`` a device address (an int64 kernel
  argument) into a float32 pointer; indexing either is a bare address computation, and LLVM then
  merges adjacent shared-memory loads into ``LDS.128``.
* **16-byte accesses** (``load_f32x4`` / ``store_f32x4``): an LLVM ``<4 x float>`` load or store
  with 16-byte alignment, which becomes ``LDG.E.128``/``LDS.128``.
* ``red_add_f32``: an atomic add whose result is unused (``RED.ADD.F32``).
* Epilogue values: ``f32_bits`` / ``f64_bits`` read a float passed bit for bit in an int64
  kernel parameter (every parameter is an int64: ``build.entry_source``), and ``device_array``
  makes a NumPy-like array of a device address, shape and byte strides, so a user's epilogue
  function indexes its array arguments as it would in any Numba kernel; ``element_view`` makes
  one whose every element is a value already in a register (an epilogue array staged in shared
  memory and read there by the kernel: the function's ``res[row, col]`` is then that value).

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) neither cffi pointers nor LLVM exist, so
each name has a pure-Python twin with the same semantics (kernel arguments are arrays there):
the kernels are the same source in both worlds.
"""
from __future__ import annotations

from numba import config, cuda, types

__all__ = ["SIMULATOR", "ptr", "f32_ptr", "load_f32x4", "store_f32x4", "red_add_f32", "f32_bits", "f64_bits",
           "device_array", "element_view"]

SIMULATOR = bool(config.ENABLE_CUDASIM)

if SIMULATOR:
    def ptr(a):
        """Simulator twin: a NumPy array indexes like a pointer for non-negative indices."""
        return a

    def f32_ptr(a):
        """Simulator twin: kernel arguments are (flat) arrays already."""
        return a

    def load_f32x4(p, idx):
        return p[idx], p[idx + 1], p[idx + 2], p[idx + 3]

    def store_f32x4(p, idx, a, b, c, d):
        p[idx], p[idx + 1], p[idx + 2], p[idx + 3] = a, b, c, d

    @cuda.jit(device=True)           # (the simulator provides cuda.atomic inside device functions)
    def red_add_f32(p, idx, x):
        cuda.atomic.add(p, idx, x)

    def f32_bits(x):
        """Simulator twin: scalars travel as themselves."""
        return x

    f64_bits = f32_bits

    def device_array(a, shape, strides, dtype):
        """Simulator twin: arrays travel as themselves."""
        return a

    def element_view(x, shape):
        """Simulator twin: every element is x."""
        import numpy as np
        return np.broadcast_to(np.array(x), shape)
else:
    import cffi
    from llvmlite import ir
    from numba.core import cgutils
    from numba.cuda.extending import intrinsic

    _ffi = cffi.FFI()

    @cuda.jit(device=True, inline="always")
    def ptr(a):
        """Raw pointer to an array's data (global, shared or local); index it like the array."""
        return _ffi.from_buffer(a)

    @intrinsic
    def f32_ptr(typingctx, addr):
        """The float32 pointer at device address ``addr`` (an int64 kernel argument)."""
        if not isinstance(addr, types.Integer):
            return None
        sig = types.CPointer(types.float32)(addr)

        def codegen(context, builder, sig, args):
            return builder.inttoptr(args[0], ir.PointerType(ir.FloatType()))
        return sig, codegen

    _V4 = ir.VectorType(ir.FloatType(), 4)

    def _vec_ptr(context, builder, sig, args):
        p, i = args[0], context.cast(builder, args[1], sig.args[1], types.intp)
        addr = builder.gep(p, [i])
        return builder.bitcast(addr, _V4.as_pointer(addr.type.addrspace))

    def _f32_ptr_and_index(p, idx) -> bool:
        return isinstance(p, types.CPointer) and p.dtype == types.float32 and isinstance(idx, types.Integer)

    @intrinsic
    def load_f32x4(typingctx, p, idx):
        """(p[idx], .., p[idx+3]) in one 16-byte load; p + idx must be 16-byte aligned."""
        if not _f32_ptr_and_index(p, idx):
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
        if not _f32_ptr_and_index(p, idx):
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
        if not _f32_ptr_and_index(p, idx):
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

    @intrinsic
    def f32_bits(typingctx, x):
        """The float32 whose bits are the low 32 of int64 ``x`` (a float kernel parameter)."""
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())
        return types.float32(x), codegen

    @intrinsic
    def f64_bits(typingctx, x):
        """The float64 whose bits are int64 ``x``."""
        if not isinstance(x, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(args[0], ir.DoubleType())
        return types.float64(x), codegen

    @intrinsic
    def device_array(typingctx, addr, shape, strides, dtype):
        """An array of ``dtype`` (a Numba number type) at device address ``addr`` with ``shape``
        and byte ``strides`` (tuples of equal length, run-time values)."""
        ty = dtype.instance_type if isinstance(dtype, types.NumberClass) else None
        if (ty is None or not isinstance(addr, types.Integer) or not isinstance(shape, types.UniTuple)
                or not isinstance(strides, types.UniTuple) or len(shape) != len(strides)):
            return None
        aryty = types.Array(ty, len(shape), "A")

        def codegen(context, builder, sig, args):
            ary = context.make_array(aryty)(context, builder)
            dims = [context.cast(builder, builder.extract_value(args[1], i), shape.dtype, types.intp)
                    for i in range(len(shape))]
            steps = [context.cast(builder, builder.extract_value(args[2], i), strides.dtype, types.intp)
                     for i in range(len(shape))]
            item = context.get_abi_sizeof(context.get_data_type(ty))
            context.populate_array(ary, data=builder.inttoptr(args[0], ary.data.type), shape=dims,
                                   strides=steps, itemsize=context.get_constant(types.intp, item),
                                   meminfo=None)
            return ary._getvalue()
        return aryty(addr, shape, strides, dtype), codegen

    @intrinsic
    def element_view(typingctx, x, shape):
        """An array of ``shape`` whose every element is ``x`` (strides 0 over one stack slot):
        after inlining, LLVM forwards ``x`` to each read, so indexing it costs nothing."""
        if not isinstance(x, types.Number) or not isinstance(shape, types.UniTuple):
            return None
        aryty = types.Array(x, len(shape), "A")

        def codegen(context, builder, sig, args):
            ary = context.make_array(aryty)(context, builder)
            slot = cgutils.alloca_once(builder, context.get_data_type(x))
            builder.store(context.get_value_as_data(builder, x, args[0]), slot)
            dims = [context.cast(builder, builder.extract_value(args[1], i), shape.dtype, types.intp)
                    for i in range(len(shape))]
            zero = context.get_constant(types.intp, 0)
            item = context.get_abi_sizeof(context.get_data_type(x))
            context.populate_array(ary, data=builder.bitcast(slot, ary.data.type), shape=dims,
                                   strides=[zero] * len(shape), itemsize=context.get_constant(types.intp, item),
                                   meminfo=None)
            return ary._getvalue()
        return aryty(x, shape), codegen
