"""A user's epilogue function, checked before a kernel is built with it: each mistake is an
``EpilogueError`` raised within seconds that names the function, where it is defined, and why
(Numba's own message where Numba found it).

* ``check(fn, nargs)``: what can be read without compiling, on any tier and without a GPU (Numba's
  front end, from the bytecode): a device function taking ``acc, row, col`` and one parameter per
  ``epilogue_args``; every global name it (or a device function it calls) reads defined; no
  ``raise`` or ``assert`` (a kernel cannot report an exception: the element would be garbage); no
  item stores into its arguments and no atomics (it may run twice for an element, at positions
  past C's edges clamped to C's last row and column, ``epilogue``). ``indexing`` says how it
  indexes each array argument, so that ``epilogue_args`` of the wrong shape are refused.
* ``compile_alone(user, cc)``: on a GPU, the function alone for the types the kernel hands it,
  with a time limit, and its return type a real number. It runs where a kernel with the function
  is about to be compiled (``before_build``, ``build.before_compiling``): a kernel found in the
  disk cache compiled it once already. (``build.failures_remembered`` makes a failure inside a
  kernel's build fail fast too: without it Numba compiled a failing function thousands of times,
  benchmarks/NOTES.md "A failing epilogue hung".)
* ``probe(...)``: in Numba's CUDA simulator, where nothing is compiled, one element run in a
  one-thread kernel at build time, so that a mistake is not an exception from a device thread.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import warnings
import weakref
from typing import Dict, Optional, Tuple

from .epilogue import USER_ARRAY_DTYPES, is_device_function
from .errors import EpilogueError
from .intrinsics import SIMULATOR

__all__ = ["check", "indexing", "where", "argument_types", "compile_alone", "before_build", "probe", "raised_in",
           "numba_message",
           "COMPILE_SECONDS"]

COMPILE_SECONDS = 20          # the time limit of compiling a function alone (``compile_alone``)


def where(fn) -> str:
    """``name (file:line)`` of a function (its definition's first line)."""
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    name = getattr(py, "__qualname__", None) or getattr(py, "__name__", repr(py))
    return name if code is None else f"{name} ({code.co_filename}:{code.co_firstlineno})"


def _error(fn, why: str) -> EpilogueError:
    return EpilogueError(f"the epilogue function {where(fn)} {why}")


# ---------------------------------------------------------------------------------------------
# Read without compiling
# ---------------------------------------------------------------------------------------------
def check(fn, nargs: int) -> None:
    """EpilogueError unless ``fn`` may be a kernel's epilogue called as ``fn(acc, row, col,
    *epilogue_args)`` with ``nargs`` epilogue arguments (see the module's docstring)."""
    if not is_device_function(fn):
        raise TypeError(f"epilogue must be a numba.cuda.jit(device=True) function f(acc, row, col, "
                        f"*epilogue_args), got {type(fn).__name__}")
    py = getattr(fn, "py_func", fn)
    try:
        why = _CHECKED[py][nargs]
    except (KeyError, TypeError):
        why = _checked(py, nargs)
        try:
            _CHECKED.setdefault(py, {})[nargs] = why
        except TypeError:                        # (no weak references to it: not remembered)
            pass
    if why is not None:
        raise _error(fn, why)


# function -> {number of epilogue_args: why it cannot be an epilogue, or None}; weak, so that a
# closure made anew each step does not stay alive here (Numba freezes a function's globals when
# it first compiles it: a function is what it was when first checked)
_CHECKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _arity(py, nargs: int) -> Optional[str]:
    import inspect
    want = 3 + nargs
    try:
        inspect.signature(py).bind(*range(want))
    except TypeError:
        try:
            params = str(inspect.signature(py))
        except (TypeError, ValueError):
            params = "(...)"
        return (f"takes the parameters {params}, but it is called with {want} arguments: acc, row, col and "
                f"{nargs} epilogue_args (f(acc, row, col{''.join(f', x{i}' for i in range(nargs))}))")
    except ValueError:
        pass
    return None


def _checked(py, nargs: int) -> Optional[str]:
    """Why ``py`` cannot be an epilogue with ``nargs`` arguments, or None."""
    why = _arity(py, nargs)
    if why is not None:
        return why
    ir = _frontend(py)
    if isinstance(ir, str):
        return ir
    why = _calls_checked(py, ir, (), set())
    if why is not None:
        return why
    return _no_writes(ir)


def _frontend(py):
    """Numba's untyped IR of ``py``, or why its front end refused the bytecode (a message)."""
    from numba.core.compiler import run_frontend
    try:
        return run_frontend(py)
    except Exception as e:               # (Numba's UnsupportedError, NotDefinedError, ...)
        return f"is not something Numba compiles: {type(e).__name__}: {e}"


def _statements(ir):
    for block in ir.blocks.values():
        yield from block.body


def _line(stmt) -> str:
    loc = getattr(stmt, "loc", None)
    return f" (line {loc.line})" if loc is not None and getattr(loc, "line", None) else ""


def _calls_checked(py, ir, stack: tuple, done: set) -> Optional[str]:
    """Why ``py`` (whose IR is ``ir``) or a device function it calls raises, reads an undefined
    global name or a plain Python function, or recurses, or None. ``stack``: the functions
    calling it; ``done``: those found fine."""
    import types as pytypes

    from numba.core import ir as nir
    for st in _statements(ir):
        if isinstance(st, (nir.Raise, nir.StaticRaise, nir.TryRaise, nir.StaticTryRaise)):
            return (f"raises an exception{_line(st)}: a kernel cannot report one (the element would be left "
                    "wrong), so epilogue functions may not raise or assert; return a value (NaN, for "
                    "example) instead")
        if not isinstance(st, nir.Assign) or not isinstance(st.value, (nir.Global, nir.FreeVar)):
            continue
        value = st.value.value
        if value is nir.UNDEFINED:
            return f"reads an undefined name{_line(st)}: NameError: name {st.value.name!r} is not defined"
        if isinstance(value, pytypes.FunctionType) and not _numba_types(value):
            return (f"calls the Python function {st.value.name!r}{_line(st)}, which Numba cannot compile: make "
                    "it a device function (numba.cuda.jit(device=True))")
        inner = getattr(value, "py_func", None)
        if not is_device_function(value) or inner is None or inner in done:
            continue
        if inner is py or inner in stack:
            whom = "itself" if inner is py else f"{where(inner)}, which calls it again"
            return (f"is recursive: it calls {whom}{_line(st)}. numba-cuda "
                    "cannot compile recursion between device functions, and a kernel's stack (1 KiB a "
                    "thread) would overflow; write the loop out")
        sub = _frontend(inner)
        why = sub if isinstance(sub, str) else _calls_checked(inner, sub, stack + (py,), done)
        if why is not None:
            return f"calls {where(inner)}{_line(st)}, which {why}"
    done.add(py)
    return None


def _numba_types(fn) -> bool:
    """Whether Numba's typing knows a plain Python function (one with an ``overload``)."""
    if SIMULATOR:
        from numba.core.registry import cpu_target as target
    else:
        from numba.cuda.descriptor import cuda_target as target
    ctx = target.typing_context
    ctx.refresh()
    try:
        ctx.resolve_value_type(fn)
        return True
    except Exception:
        return False


def _no_writes(ir) -> Optional[str]:
    """Why the function writes into one of its arguments (an item store into an argument, or a
    view of one) or uses atomics, or None. Arrays it makes itself (``cuda.local.array``) it may
    write."""
    from numba.core import ir as nir
    derived = {}                              # variable name -> the argument it comes from
    assigns = [st for st in _statements(ir) if isinstance(st, nir.Assign)]
    changed = True
    while changed:                            # (to a fixed point: loops may assign before use)
        changed = False
        for st in assigns:
            v, name = st.value, st.target.name
            src = None
            if isinstance(v, nir.Arg):
                src = v.name
            elif isinstance(v, nir.Var):
                src = derived.get(v.name)
            elif isinstance(v, nir.Expr) and v.op in ("getattr", "getitem", "static_getitem", "call"):
                base = v.value if v.op != "call" else v.func
                src = derived.get(base.name) if isinstance(base, nir.Var) else None
            if src is not None and derived.get(name) != src:
                derived[name] = src
                changed = True
    for st in _statements(ir):
        if isinstance(st, (nir.SetItem, nir.StaticSetItem)) and st.target.name in derived:
            return (f"writes into its argument {derived[st.target.name]!r}{_line(st)}: an epilogue only computes "
                    "the value it returns (it may run more than once for an element, at clamped positions "
                    "past C's edges); write results through out=, or in a kernel of your own")
        if isinstance(st, nir.SetAttr) and st.target.name in derived:
            return f"sets an attribute of its argument {derived[st.target.name]!r}{_line(st)}: an epilogue only reads"
        if isinstance(st, nir.Assign) and isinstance(st.value, nir.Expr) and st.value.op == "getattr" \
                and st.value.attr == "atomic":
            return (f"uses atomics{_line(st)}: an epilogue only computes the value it returns (it may run more "
                    "than once for an element)")
    return None


def indexing(fn) -> Dict[int, Tuple[str, ...]]:
    """How ``fn`` indexes its array arguments: {position among epilogue_args: ("row", "col"),
    ("col",), ...} for each argument that it only ever indexes by its own row and column, in some
    order (``x[row, col]``, ``x[col]``); arguments used otherwise are left out (not checked)."""
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    if code is None:
        return {}
    hit = _INDEXING.get(code)
    if hit is None:
        if len(_INDEXING) >= 256:
            _INDEXING.clear()
        hit = _INDEXING[code] = _indexing(py)
    return dict(hit)


_INDEXING: dict = {}       # code object -> ``_indexing`` (a closure made anew shares its code)


def _indexing(py) -> tuple:
    ir = _frontend(py)
    if isinstance(ir, str):
        return ()
    from numba.core import ir as nir
    code = py.__code__
    names = code.co_varnames[:code.co_argcount]
    if len(names) < 3:
        return ()
    alias = {}                                 # variable -> the argument it holds (plain copies only)
    tuples = {}                                # variable -> the variables of a build_tuple
    for st in _statements(ir):
        if not isinstance(st, nir.Assign):
            continue
        v = st.value
        if isinstance(v, nir.Arg):
            alias[st.target.name] = v.name
        elif isinstance(v, nir.Var) and v.name in alias:
            alias[st.target.name] = alias[v.name]
        elif isinstance(v, nir.Expr) and v.op == "build_tuple":
            tuples[st.target.name] = [x.name for x in v.items]
    rebound = {n for st in _statements(ir) if isinstance(st, nir.Assign) and st.target.name in names
               and not isinstance(st.value, nir.Arg) for n in [st.target.name]}
    coord = {names[1]: "row", names[2]: "col"}
    uses: Dict[str, list] = {}

    def axes(index_var):
        items = tuples.get(index_var, [index_var])
        out = tuple(coord.get(alias.get(x)) for x in items)
        return out if all(out) and not (set(names[1:3]) & rebound) else None

    for st in _statements(ir):
        if isinstance(st, nir.Del):
            continue
        for var in st.list_vars():
            arg = alias.get(var.name)
            if arg is None or arg in names[:3]:
                continue
            if isinstance(st, nir.Assign) and (st.target.name == var.name or isinstance(st.value, nir.Var)):
                continue                                    # (its definition, or a copy: its uses count)
            if isinstance(st, nir.Assign) and isinstance(st.value, nir.Expr) and st.value.op == "getitem" \
                    and st.value.value.name == var.name:
                uses.setdefault(arg, []).append(axes(st.value.index.name))
            else:
                uses.setdefault(arg, []).append(None)
    out = []
    for j, name in enumerate(names[3:]):
        pats = set(uses.get(name, [None]))
        if len(pats) == 1 and None not in pats:
            out.append((j, pats.pop()))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Compiled alone (GPU)
# ---------------------------------------------------------------------------------------------
class _TimeUp(BaseException):
    """(A BaseException: Numba's typing catches Exception from each candidate it tries.)"""


@contextlib.contextmanager
def _time_limit(seconds: float):
    """_TimeUp after ``seconds`` in the block, by SIGALRM: in the main thread only, and only if
    nothing else uses the alarm (elsewhere the block runs without a limit)."""
    if (threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer")
            or signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None)
            or signal.getitimer(signal.ITIMER_REAL)[0] > 0):
        yield
        return

    def up(signum, frame):
        raise _TimeUp()
    old = signal.signal(signal.SIGALRM, up)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def argument_types(user) -> tuple:
    """The Numba types a kernel's epilogue hands ``user`` (an ``epilogue.UserFunction``): the
    float32 value, int64 row and column, then per argument float32, float64, int64 or an array
    (``intrinsics.device_array``)."""
    from numba import types
    out = [types.float32, types.int64, types.int64]
    for kind in user.args:
        if kind[0] == "array":
            out.append(types.Array(USER_ARRAY_DTYPES[kind[1]], kind[2], "A"))
        else:
            out.append({"f32": types.float32, "f64": types.float64, "i64": types.int64}[kind[0]])
    return tuple(out)


_ALONE: dict = {}          # (digest, argument kinds, cc) -> None (compiled) or the EpilogueError


def compile_alone(user, cc) -> None:
    """Compile ``user``'s function alone for compute capability ``cc`` (as ``build`` compiles a
    kernel) and the types the kernel hands it: EpilogueError, naming the function and holding
    Numba's message, if that fails, takes more than ``COMPILE_SECONDS`` or returns anything but
    one real number. Remembered per code, argument kinds and target."""
    from numba import types

    from . import build
    key = (user.digest, user.args, tuple(cc[:2]))
    if key in _ALONE:
        if _ALONE[key] is not None:
            raise _ALONE[key]
        return
    fn, err = user.fn, None
    try:
        with _time_limit(COMPILE_SECONDS), build.compiling(cc):
            cres = fn.compile_device(argument_types(user))
        ret = cres.signature.return_type
        if not isinstance(ret, (types.Integer, types.Float, types.Boolean)):
            err = _error(fn, f"returns {ret}: an epilogue returns one real number (the element's value), "
                             "converted to float32 before it is rounded to the output type")
    except _TimeUp:
        err = _error(fn, f"did not compile within {COMPILE_SECONDS} s (compiled alone, for "
                         f"{', '.join(map(str, argument_types(user)))})")
    except Exception as e:
        err = _error(fn, f"does not compile for the arguments {', '.join(map(str, argument_types(user)))} "
                         f"(acc, row, col, *epilogue_args):\n{numba_message(e)}")
    _ALONE[key] = err
    if err is not None:
        raise err


@contextlib.contextmanager
def before_build(user):
    """In the block, a kernel about to be compiled (not found in the disk cache) first compiles
    ``user`` (an ``epilogue.UserFunction``, or None: nothing to do) alone (``compile_alone``)."""
    if user is None or SIMULATOR:
        yield
        return
    from . import build
    with build.before_compiling(lambda arch: compile_alone(user, build.parse_cc(arch))):
        yield


def numba_message(e: BaseException, limit: int = 4000) -> str:
    """Numba's message for a failed compile, from its innermost error (a failure deep in a
    kernel's nested device functions is chained once per caller), cut to ``limit`` characters."""
    root, seen = e, set()
    while root.__cause__ is not None and id(root) not in seen:
        seen.add(id(root))
        root = root.__cause__
    text = f"{type(root).__name__}: {root}" if not type(root).__module__.startswith("numba") else str(root)
    text = text.strip()        # (long: its start, and its end, which says where)
    return text if len(text) <= limit else f"{text[:limit // 2]}\n...\n{text[-limit // 2:]}"


# ---------------------------------------------------------------------------------------------
# The simulator
# ---------------------------------------------------------------------------------------------
def probe(fn, apply, values: tuple, user_values: tuple, m: int, n: int) -> None:
    """Under the simulator: run, in a one-thread kernel at C's last row and column, the user's
    function ``fn`` with its arguments ``user_values`` and the whole epilogue ``apply``
    (``epilogue.make``) with its run-time ``values``: EpilogueError naming the function and what
    went wrong, if anything raises or the function returns anything but one real number."""
    import re

    import numpy as np
    from numba import cuda
    us = "".join(f", u{i}" for i in range(len(user_values)))
    es = "".join(f"e{i}, " for i in range(len(values)))
    src = (f"def probe(out, got, v, row, col{us}, {es}):\n"
           f"    got.append(USER(v, row, col{us}))\n"
           f"    out[0] = APPLY(v, row, col, ({es}))\n")
    ns = {"APPLY": apply, "USER": fn}
    exec(compile(src, "<epilogue probe>", "exec"), ns)
    out, got = np.zeros(1, np.float32), []
    row, col = max(m - 1, 0), max(n - 1, 0)
    err = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # (NumPy's casts: the value is checked below)
            cuda.jit(ns["probe"])[1, 1](out, got, np.float32(1.0), row, col, *user_values, *values)
    except Exception as e:
        err = e
    r = got[0] if got else None
    if got and (isinstance(r, (complex, np.complexfloating)) or not isinstance(
            r, (int, float, bool, np.integer, np.floating, np.bool_))):
        raise _error(fn, f"returns {type(r).__name__} ({r!r:.80}): an epilogue returns one real number "
                         "(the element's value), converted to float32 before it is rounded to the output type")
    if err is not None:
        if got and not raised_in(err, fn):
            raise err
        msg = re.sub(r"^tid=\[[^]]*\] ctaid=\[[^]]*\](: )?", "", str(err))
        raise _error(fn, f"raised {type(err).__name__} when run for one element (row {row}, col {col}) in "
                         f"the simulator{_user_line(err, fn)}: {msg}") from None


def _user_line(e: BaseException, fn) -> str:
    """`` at file:line`` of the last frame of ``e``'s traceback in the file of ``fn``, or ""."""
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    tb, found = e.__traceback__, ""
    while tb is not None:
        if code is not None and tb.tb_frame.f_code.co_filename == code.co_filename:
            found = f" at {code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    return found


def raised_in(e: BaseException, fn) -> bool:
    """Whether ``e`` (from a simulated kernel) was raised in the file of the user's function."""
    return bool(_user_line(e, fn))
