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

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) neither cffi pointers nor LLVM exist, so
each name has a pure-Python twin with the same semantics (kernel arguments are arrays there):
the kernels are the same source in both worlds.
"""
from __future__ import annotations

from numba import config, cuda, types

__all__ = ["SIMULATOR", "ptr", "f32_ptr", "load_f32x4", "store_f32x4", "red_add_f32"]

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
else:
    import cffi
    from llvmlite import ir
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
