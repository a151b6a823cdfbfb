"""The epilogue: what happens to each accumulator between the mainloop and C, as one part with a
contract that every ladder's store calls.

``gemm(a, b, c=, alpha=, beta=, bias=, activation=, epilogue=, epilogue_args=)`` computes, per
element, ``f(act(alpha * acc + beta * c + bias), row, col, *epilogue_args)`` before the result is
rounded to the output type. The host describes it once as an ``Epilogue`` (compile-time: which
terms are present, dtypes, layouts, the user's function by its code); ``make(spec)`` returns the
device function ``apply(v, row, col, ep)`` whose only arguments are run-time values: the fp32
value, its row and column in the kernel's C, and ``ep``, a tuple of int64 kernel parameters
(addresses, leading dimensions, float bits, the user's scalars and array shapes). With nothing
to do, ``apply`` returns ``v`` and compiles away.

Kernels compute C^T = B^T A^T for a column-major C (``calls``): the host then hands the epilogue
C's transposed view and the bias on the other axis, and ``swap`` gives the user's function its
own (row, col).

The function runs on whole tiles: at positions past C's edges (a tile's padding, never stored)
it may be called with the row and column clamped to C's last ones (when the epilogue reads at
most one array per element), so that no element needs a branch
and every element's loads can be in flight at once. It must therefore only compute a value (no
writes, no atomics: ``user_epilogue.check`` refuses them, with raising, recursion and the wrong
arity). Python floats among its arguments arrive as float32 (the accumulator's
type), ``np.float64`` values as float64.

A user's function is part of the kernel's identity by its code (``code_digest``: bytecode,
constants, closure values, the globals and functions it calls), not by the object, so a new
process finds the cubin in the disk cache and an edited function is compiled again.
"""
from __future__ import annotations

import dis
import hashlib
import math
import struct
import types as pytypes
import weakref
from collections import namedtuple
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Optional, Tuple

from numba import float32, float64, int64, types
from numba.cuda import libdevice
from numba.cuda import types as cuda_types

from .intrinsics import SIMULATOR, device_array, element_view, f32_bits, f32_ptr, f64_bits
from .jit import device

__all__ = ["Epilogue", "UserFunction", "PLAIN", "SCALED", "BLOCK_SCALED", "BLOCK_SCALES", "ACTIVATIONS", "make",
           "code_digest", "float_bits", "USER_ARRAY_DTYPES", "LOAD_KIND"]

# activation name -> what it computes (fp32), as the reference in tests and docs spells it
ACTIVATIONS = {
    "relu": "max(x, 0)",
    "gelu": "x/2 (1 + erf(x/sqrt 2))  (torch's gelu)",
    "gelu_tanh": "x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (gelu approximate='tanh')",
    "silu": "x / (1 + exp(-x))",
}
# dtypes an epilogue array argument may have (Numba types the user's function sees)
USER_ARRAY_DTYPES = {"float32": types.float32, "float64": types.float64, "float16": types.float16,
                     "bfloat16": cuda_types.bfloat16, "int32": types.int32, "int64": types.int64,
                     "uint8": types.uint8, "bool": types.boolean}
# how the kernels' loads read an input's elements as float32 (``ptx/mma.cu``'s ldg_in16, in16_f32)
LOAD_KIND = {"float32": 0, "float16": 1, "bfloat16": 2}


_DIGESTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def code_digest(fn, _seen=None) -> str:
    """A digest of what ``fn`` computes: its bytecode, constants (nested code included), names,
    closure values and the globals it reads (functions recursively, by their own digest).
    Remembered per function object: like Numba, which freezes a function's globals when it
    compiles it, a function is what it was when first used."""
    if _seen is None:
        try:
            return _DIGESTS[fn]
        except (KeyError, TypeError):
            pass
        d = code_digest(fn, set())
        try:
            _DIGESTS[fn] = d
        except TypeError:
            pass
        return d
    seen = _seen
    py = getattr(fn, "py_func", fn)
    if id(py) in seen:
        return "recursive"
    seen.add(id(py))
    h = hashlib.sha256()

    def value(v):
        if isinstance(v, pytypes.CodeType):
            code(v)
        elif isinstance(v, (pytypes.FunctionType, pytypes.BuiltinFunctionType)) or hasattr(v, "py_func"):
            h.update(code_digest(v, seen).encode())
        elif isinstance(v, pytypes.ModuleType):
            h.update(v.__name__.encode())
        else:
            h.update(repr(v).encode())
        h.update(b"\0")

    def code(c):
        h.update(c.co_code)
        h.update(repr(c.co_names).encode() + repr(c.co_varnames).encode())
        for v in c.co_consts:
            value(v)

    if not isinstance(py, pytypes.FunctionType):
        return f"{type(py).__module__}.{getattr(py, '__qualname__', repr(py))}"
    code(py.__code__)
    for cell in py.__closure__ or ():
        value(cell.cell_contents)
    g = py.__globals__
    for name in py.__code__.co_names:
        if name in g:
            value(g[name])
    return h.hexdigest()[:20]


_SKIP = ("CACHE", "NOP", "RESUME", "EXTENDED_ARG", "COPY_FREE_VARS", "MAKE_CELL")


def element_reads(fn) -> frozenset:
    """The positions among ``epilogue_args`` of the arguments ``fn`` only ever reads as
    ``arg[row, col]``, at its own row and column (neither rebound): a kernel may hand such an
    argument's element to it instead of the array (``Epilogue.staged``). Read from the bytecode,
    conservatively: any other use of the argument, or of row or col being rebound, leaves it out.
    Remembered per code object (a closure made anew each call shares its function's)."""
    code = getattr(getattr(fn, "py_func", fn), "__code__", None)
    return frozenset() if code is None else _element_reads(code)


@lru_cache(maxsize=256)
def _element_reads(code) -> frozenset:
    if code.co_argcount < 4 or code.co_flags & 0x0C:       # (no *args, **kwargs)
        return frozenset()
    names = code.co_varnames[:code.co_argcount]
    events = []                                      # ("load", name) per name loaded, else (opname, arg)
    for ins in dis.get_instructions(code):
        if ins.opname in _SKIP:
            continue
        if ins.opname in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_LOAD_FAST", "LOAD_FAST_BORROW",
                          "LOAD_FAST_BORROW_LOAD_FAST_BORROW"):
            events += [("load", v) for v in (ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))]
        else:
            events.append((ins.opname, ins.argval, ins.argrepr))
    touched = set(code.co_cellvars) | set(code.co_freevars)
    for e in events:
        if e[0] != "load" and (e[0].startswith("STORE_FAST") or e[0].startswith("DELETE_FAST")
                               or e[0] == "LOAD_FAST_AND_CLEAR"):
            touched |= set(e[1] if isinstance(e[1], tuple) else (e[1],))
    row, col = names[1], names[2]
    if row in touched or col in touched:
        return frozenset()

    def at_element(i):
        tail = events[i + 1:i + 5]
        return (tail[:2] == [("load", row), ("load", col)] and len(tail) == 4 and tail[2][:2] == ("BUILD_TUPLE", 2)
                and (tail[3][0] == "BINARY_SUBSCR" or (tail[3][0] == "BINARY_OP" and "[" in tail[3][2])))
    out = set()
    for j, name in enumerate(names[3:]):
        uses = [i for i, e in enumerate(events) if e == ("load", name)]
        if name not in touched and uses and all(at_element(i) for i in uses):
            out.add(j)
    return frozenset(out)


@dataclass(frozen=True)
class UserFunction:
    """A user's ``numba.cuda.jit(device=True)`` epilogue function and its arguments' kinds:
    ("f32",) (a Python float), ("f64",) (``np.float64``), ("i64",) or ("array", dtype name, ndim,
    stageable: ``Epilogue.staged``).
    Equal and keyed by code, not identity."""
    name: str
    digest: str
    args: Tuple[tuple, ...]
    fn: Any = field(repr=False, compare=False, hash=False)


@dataclass(frozen=True)
class Epilogue:
    """What an epilogue does, as compile-time facts (its repr is part of the kernel's key).

    scales: "tensor": the product of fp8 inputs is first multiplied by ``scale_a[0] * scale_b[0]``,
    two fp32 device scalars (read in the kernel, so a CUDA graph replays with new values);
    "block": block-wise scales (scale_a[row, k // 128], scale_b[k // 128, col // 128], with their
    strides), applied by the mainloop to each K slice's sum, not here; or None;
    alpha: multiply by a run-time alpha; c: (dtype, column-major[, stageable]) of the C input
    added with a run-time beta (stageable: the kernel may stage it, ``staged``), or None; bias:
    (dtype, "row" | "col") in the kernel's coordinates (a "col" bias has one value per column),
    or None; activation: a key of ``ACTIVATIONS`` or None;
    user: the user's function; swap: the kernel computes C^T and the user's function gets (col,
    row) swapped back (set only with a function: otherwise the kernel is the same); fast: the
    inputs are 16-bit or fp8, so the tanh-form activations may use
    ``tanh.approx`` (one instruction, error about 2^-11 relative: below the product's own)."""
    alpha: bool = False
    c: Optional[tuple] = None
    bias: Optional[Tuple[str, str]] = None
    activation: Optional[str] = None
    user: Optional[UserFunction] = None
    swap: bool = False
    fast: bool = False
    scales: Optional[str] = None

    @property
    def plain(self) -> bool:
        return self == PLAIN

    def slots(self) -> Tuple[str, ...]:
        """The names of the run-time values in ``ep``, in order (``TERMS``; at least one: a tuple
        is never empty)."""
        return _slots(self)

    def index(self, *names: str) -> Tuple[int, ...]:
        """The positions in ``ep`` of the values ``names`` (``slots``): how a kernel's part other
        than ``make``'s function (the block scaler, the stager) finds them."""
        slots = self.slots()
        return tuple(slots.index(x) for x in names)

    def loads(self) -> int:
        """Arrays the epilogue reads per element (c, bias, the user's arrays)."""
        user = sum(k[0] == "array" for k in self.user.args) if self.user else 0
        return (self.c is not None) + (self.bias is not None) + user

    def staged(self) -> Optional[str]:
        """The slot (``slots``) of the array a kernel may stage in shared memory and hand the
        epilogue element by element (``make(spec, staged=True)``), or None: a user argument, a
        float32, float16 or bfloat16 array of C's shape that the function reads only at [row,
        col], else ``c``, row-major; aligned for 16-byte copies (``epilogue_args``). A user
        argument none under ``swap``: the kernel's rows are then the array's columns (``flipped``
        marks c so)."""
        for i, kind in enumerate(self.user.args if self.user and not self.swap else ()):
            if kind[0] == "array" and len(kind) > 3 and kind[3]:
                return f"u{i}"
        return "c" if self.c is not None and len(self.c) > 2 and self.c[2] else None

    def staged_dtype(self) -> Optional[str]:
        """The dtype of the array ``staged`` names, or None."""
        u = self.staged()
        return None if u is None else self.c[0] if u == "c" else self.user.args[int(u[1:])][1]

    def flipped(self) -> "Epilogue":
        """The same epilogue for the kernel that computes C^T."""
        c = None if self.c is None else (self.c[0], not self.c[1])          # (not staged: read across)
        bias = None if self.bias is None else (self.bias[0], "row" if self.bias[1] == "col" else "col")
        return replace(self, c=c, bias=bias, swap=not self.swap if self.user else False)


PLAIN = Epilogue()
SCALED = Epilogue(fast=True, scales="tensor")      # what every fp8 product has: its two scales
BLOCK_SCALED = Epilogue(fast=True, scales="block")  # ... or block-wise ones
BLOCK_SCALES = Epilogue(scales="block")            # a split-K kernel's part of a block-scaled product


def float_bits(x: float, kind: str = "f32") -> int:
    """A float as the int64 kernel parameter ``f32_bits``/``f64_bits`` read back."""
    if kind == "f32":
        return struct.unpack("<i", struct.pack("<f", x))[0]
    return struct.unpack("<q", struct.pack("<d", x))[0]


# ---------------------------------------------------------------------------------------------
# The terms: one table of each term's meaning, its run-time values and how they are read
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """One term of the epilogue, as data. ``keywords``: ``gemm``'s arguments that give it, each
    with its type in the torch operator's schema (None: the operator does not take it); ``run``:
    the fields of ``Run`` a call gives it (what may change between calls with the same plan);
    ``values(spec)``: the run-time values it adds to ``ep``, as (slot name, how the host makes
    it: an expression of ``b``, the bound epilogue (``epilogue_args.Bound``: m, n, ldc,
    user_shapes, scale_strides), ``run``, this call's ``Run``, and m, n, C's in the kernel's
    coordinates) pairs; ``apply(spec, at, stage)``: the device source lines that apply it to
    ``x`` (``at``: slot name -> ``ep[i]``; ``stage``: the slot the kernel staged, or None)."""
    name: str
    keywords: Tuple[Tuple[str, Optional[str]], ...]
    run: Tuple[str, ...]
    values: Callable
    apply: Callable


def _load_expr(slot: str, index: str, dtype: str) -> str:
    kind = LOAD_KIND[dtype]
    return f"_load32({slot}, {index})" if kind == 0 else f"_load16({slot}, {index}, {kind})"


def _scale_values(spec):
    if spec.scales == "tensor":
        return ("scale_a", "run.scales[0]"), ("scale_b", "run.scales[1]")
    if spec.scales == "block":
        return (("scale_a", "run.scales[0]"), ("scale_a_row_stride", "b.scale_strides[0][0]"),
                ("scale_a_k_stride", "b.scale_strides[0][1]"), ("scale_b", "run.scales[1]"),
                ("scale_b_k_stride", "b.scale_strides[1][0]"), ("scale_b_col_stride", "b.scale_strides[1][1]"))
    return ()


def _scale_apply(spec, at, stage):
    if spec.scales != "tensor":         # (block-wise: the mainloop applies them, ``hopper.promotion``)
        return []
    return [f"    x = x * (_load32({at['scale_a']}, 0) * _load32({at['scale_b']}, 0))"]   # (loaded once)


def _c_apply(spec, at, stage):
    if spec.c is None:
        return []
    idx = ("col * {0} + row" if spec.c[1] else "row * {0} + col").format(at["ldc"])
    return [f"    x = x + f32_bits({at['beta']}) * " + ("sx" if stage == "c" else _load_expr(at["c"], idx, spec.c[0]))]


_USER_HOST = {"f32": "F32(float(run.user[{0}]))", "f64": "F64(float(run.user[{0}]))", "i64": "int(run.user[{0}])"}
_USER_DEVICE = {"f32": "f32_bits({0})", "f64": "f64_bits({0})", "i64": "{0}"}


def _user_values(spec):
    out = []
    for i, kind in enumerate(spec.user.args if spec.user else ()):
        if kind[0] == "array":          # its address, then its shape and byte strides
            out.append((f"u{i}", f"run.user[{i}]"))
            out += [(f"u{i}_shape{d}", f"b.user_shapes[{i}][0][{d}]") for d in range(kind[2])]
            out += [(f"u{i}_stride{d}", f"b.user_shapes[{i}][1][{d}]") for d in range(kind[2])]
        else:
            out.append((f"u{i}", _USER_HOST[kind[0]].format(i)))
    return tuple(out)


def _user_apply(spec, at, stage):
    if spec.user is None:
        return []
    args = []
    for i, kind in enumerate(spec.user.args):
        if f"u{i}" == stage:
            args.append(f"element_view(sx, ({at[f'u{i}_shape0']}, {at[f'u{i}_shape1']}))")
        elif kind[0] == "array":
            shape = ", ".join(at[f"u{i}_shape{d}"] for d in range(kind[2]))
            strides = ", ".join(at[f"u{i}_stride{d}"] for d in range(kind[2]))
            args.append(f"device_array({at[f'u{i}']}, ({shape},), ({strides},), U{i})")
        else:
            args.append(_USER_DEVICE[kind[0]].format(at[f"u{i}"]))
    r, c = ("col", "row") if spec.swap else ("row", "col")
    return [f"    x = USER(x, {r}, {c}{''.join(', ' + a for a in args)})"]


#: The terms in the order they apply and their values lie in ``ep``. The order is load-bearing:
#: C's shape, then the scales, are first, so that a split-K kernel takes a prefix of a
#: block-scaled product's values (its ``BLOCK_SCALES`` part: ``hopper.planner``); the kernels'
#: other readers find a value by its name (``Epilogue.index``).
TERMS = (
    Term("shape", (), (), lambda s: (("M", "m"), ("N", "n")), lambda s, at, stage: []),
    Term("scales", (("scale_a", None), ("scale_b", None)), ("scales",), _scale_values, _scale_apply),
    Term("alpha", (("alpha", "float"),), ("alpha",),
         lambda s: (("alpha", "F32(run.alpha)"),) if s.alpha else (),
         lambda s, at, stage: [f"    x = x * f32_bits({at['alpha']})"] if s.alpha else []),
    Term("c", (("c", "Tensor?"), ("beta", "float")), ("c", "beta"),
         lambda s: () if s.c is None else (("c", "run.c"), ("ldc", "b.ldc"), ("beta", "F32(run.beta)")), _c_apply),
    Term("bias", (("bias", "Tensor?"),), ("bias",),
         lambda s: () if s.bias is None else (("bias", "run.bias"),),
         lambda s, at, stage: [] if s.bias is None else
         [f"    x = x + {_load_expr(at['bias'], s.bias[1], s.bias[0])}"]),
    Term("activation", (("activation", "str?"),), (), lambda s: (),
         lambda s, at, stage: [] if s.activation is None else ["    x = ACT(x)"]),
    Term("user", (("epilogue", None), ("epilogue_args", None)), ("user",), _user_values, _user_apply),
)
#: gemm's epilogue keyword -> its term
KEYWORDS = {k: t for t in TERMS for k, _ in t.keywords}
#: a call's run-time values by term (``Term.run``): what a plan's launches take from each call
#: (addresses of c, bias, the scales and the user's arrays; alpha, beta and the user's numbers)
Run = namedtuple("Run", [f for t in TERMS for f in t.run],
                 defaults=[None, 1.0, None, 0.0, None, ()])


@lru_cache(maxsize=1024)
def _slots(spec: Epilogue) -> Tuple[str, ...]:
    if spec.plain:
        return ("unused",)
    return tuple(name for t in TERMS for name, _ in t.values(spec))


@lru_cache(maxsize=1024)
def packer(spec: Epilogue, swap: bool = False):
    """The host function ``pack(b, run) -> ep`` of ``spec``: its run-time values in ``slots``'
    order (``Term.values``), from the bound epilogue ``b`` and a call's ``Run`` (``swap``: the
    kernel computes C^T, so its M and N are C's N and M): int64s, or arrays and numbers under the
    simulator. Written out as source, as ``make`` writes the device function."""
    if spec.plain:
        return lambda b, run: (0,)
    exprs = [e for t in TERMS for _, e in t.values(spec)]
    src = (f"def pack(b, run):\n    m, n = {'b.n, b.m' if swap else 'b.m, b.n'}\n"
           f"    return ({', '.join(exprs)},)\n")
    ns = {"F32": float, "F64": float} if SIMULATOR else \
        {"F32": float_bits, "F64": lambda x: float_bits(x, "f64")}
    exec(compile(src, f"<epilogue values {spec!r}>", "exec"), ns)
    return ns["pack"]


# ---------------------------------------------------------------------------------------------
# Device side
# ---------------------------------------------------------------------------------------------
@device
def _relu(x):
    return max(x, float32(0))


@device
def _gelu(x):
    return float32(0.5) * x * (float32(1) + math.erf(x * float32(0.7071067811865476)))


@device
def _times_sigmoid(x, z):
    """x * sigmoid(z) = x / (1 + e^-z), by the fast exponential and division (``ex2.approx``,
    ``rcp.approx``: a few ulps, far below a 16-bit output's rounding, against libdevice's accurate
    sequences at several times the instructions). e^-z overflowing to infinity gives 0, the limit."""
    if SIMULATOR:                               # (the simulator's libdevice has no bodies)
        return x / (float32(1) + math.exp(-z))
    return libdevice.fast_fdividef(x, float32(1) + libdevice.fast_expf(-z))


@device
def _gelu_tanh(x):
    # x/2 (1 + tanh u) = x sigmoid(2u): no cancellation where tanh u is near -1
    return _times_sigmoid(x, float32(1.5957691216057308) * (x + float32(0.044715) * x * x * x))


@device
def _silu(x):
    return _times_sigmoid(x, x)


_ACT = {"relu": _relu, "gelu": _gelu, "gelu_tanh": _gelu_tanh, "silu": _silu}

if not SIMULATOR:
    from .primitives import tanh_approx

    @device
    def _gelu_tanh_fast(x):
        h = float32(0.5) * x
        return h + h * tanh_approx(float32(0.7978845608028654) * (x + float32(0.044715) * x * x * x))

    @device
    def _silu_fast(x):
        h = float32(0.5) * x                    # x sigmoid(x) = x/2 (1 + tanh(x/2))
        return h + h * tanh_approx(h)

    # One MUFU instruction per element instead of two (ex2 and rcp): the epilogue of a 16-bit
    # product is bound by the multi-function unit's 16 results per clock per SM.
    _ACT_FAST = {"gelu_tanh": _gelu_tanh_fast, "silu": _silu_fast}
else:
    _ACT_FAST = {}


if SIMULATOR:
    @device
    def _load32(p, i):
        return p[i]
    _load16 = None
else:
    from .primitives import ldg_in16

    @device
    def _load32(p, i):
        return f32_ptr(p)[i]

    @device
    def _load16(p, i, KIND):
        return ldg_in16(p + 2 * i, KIND)


@lru_cache(maxsize=None)
def make(spec: Epilogue, staged: bool = False):
    """The device function ``apply(v, row, col, ep) -> float32`` of ``spec`` (see the module's
    docstring). Written out as source, so that only the terms present are compiled. ``staged``:
    ``apply(v, row, col, ep, sx)``, where sx is the element at (row, col) of the argument
    ``spec.staged()`` names, which the kernel read from shared memory: the function's
    ``arg[row, col]`` is sx (``intrinsics.element_view``), float32 (a 16-bit array's element
    exactly: the function's arithmetic on it is float32's, as it is where it mixes with the
    accumulator)."""
    at = {name: f"ep[{i}]" for i, name in enumerate(spec.slots())}
    stage = spec.staged() if staged else None       # (the slot's name: "c" or "u<i>")
    if staged and stage is None:
        raise ValueError(f"{spec!r} has no argument to stage")
    lines = [f"def apply(v, row, col, ep{', sx' if staged else ''}):"]
    loads = spec.loads() - staged
    if spec.plain:
        lines.append("    return v")
    else:
        if loads == 1:
            # Positions past C's edges (a tile's padding, never stored) are computed at C's last
            # row/column rather than skipped: no branch per element, so the compiler can put
            # every element's load in flight together.
            lines += [f"    row = min(row, {at['M']} - 1)",
                      f"    col = min(col, {at['N']} - 1)"]
        elif loads > 1:
            # several loads per element, all in flight for a group of elements, would need more
            # registers than the tensor-core ladders have beside their accumulators (they spill)
            lines += [f"    if row >= {at['M']} or col >= {at['N']}:",
                      "        return v"]
        lines.append("    x = v")
        for term in TERMS:
            lines += term.apply(spec, at, stage)
        lines.append("    return float32(x)")
    ns = {"float32": float32, "float64": float64, "int64": int64, "f32_bits": f32_bits, "f64_bits": f64_bits,
          "device_array": device_array, "element_view": element_view, "_load32": _load32, "_load16": _load16,
          "ACT": (spec.fast and _ACT_FAST.get(spec.activation)) or _ACT.get(spec.activation), "USER": spec.user.fn if spec.user else None}
    for i, kind in enumerate(spec.user.args if spec.user else ()):
        if kind[0] == "array":
            ns[f"U{i}"] = USER_ARRAY_DTYPES[kind[1]]
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<epilogue {spec!r}>", "exec"), ns)
    return device(ns["apply"])


def is_device_function(fn) -> bool:
    """Whether ``fn`` is a ``numba.cuda.jit(device=True)`` function (or its simulator twin)."""
    if SIMULATOR:
        return bool(getattr(fn, "_device", False))
    opts = getattr(fn, "targetoptions", None)
    return isinstance(opts, dict) and bool(opts.get("device"))
