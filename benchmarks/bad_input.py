"""The bad-input fuzz: a seeded generator of the mistakes a user makes calling ``numba_tc.gemm``
(epilogue functions that cannot work, bad ``epilogue_args``, every other argument wrong) and of
valid edge cases (NaN and Inf, empty problems, views, byte order, more than 2^31 elements), each
case run in a worker process with a time limit. Every case must end, within the limit, in a clear
exception (numba_tc's own, or a TypeError/ValueError raised by numba_tc's code, not from inside
Numba, the driver, torch or NumPy) or in a result correct against float64 (NaN and Inf where the
reference has them).

    python benchmarks/bad_input.py --tier sim                  # Numba's CUDA simulator, no GPU
    python benchmarks/bad_input.py --tier gpu --out $OUT/bad_input_h200.json     # a GPU (torch)
    python benchmarks/bad_input.py --tier sim --list           # the cases, without running them

Records (``--out``, a JSON list): {case, tier, outcome: error | correct | wrong | hang, expect:
error | correct | either, exception, why, seconds, gpu, commit}. ``wrong`` is a result that
differs from float64, no error for a mistake, an unclear error, or a worker that died. The
simulator tier runs in ``tests/test_bad_input.py``. Workers run many cases each (imports are
paid once), every case under its own alarm; a worker that does not answer within the limit is
killed and replaced (the case is a ``hang``). The GPU tier first runs the valid cases once
untimed (``--warm``, the default there), so that the timed run measures answers and errors, not
first compiles of valid kernels (which the disk cache then holds).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from numba import cuda  # noqa: E402

LIMIT = 30                      # seconds a case may take
SLACK = 20                      # more seconds the parent waits for a worker's answer before it kills it
MARK = "@@bad_input "           # a worker's record line starts with this
TIERS = ("sim", "gpu")


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One call: ``call()`` runs it; ``ref()`` is its float64 reference (None: a mistake, which
    must raise); ``expect``: "error", "correct" or "either" (a valid call that a tier may refuse
    clearly: the simulator runs Python, which Numba may not compile); ``part``: the part of the
    result compared (a huge output's rows)."""
    call: Callable[[], Any]
    ref: Optional[Callable[[], np.ndarray]] = None
    expect: str = "error"
    tol: Optional[float] = None
    part: Optional[Callable[[Any], Any]] = None


FAMILIES: list = []             # (name, function(kit) -> Case, tiers, reps)


def family(tiers=TIERS, reps=2):
    def register(fn):
        FAMILIES.append((fn.__name__, fn, tuple(tiers), reps))
        return fn
    return register


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


@dataclass
class Planned:
    name: str
    family: str
    rep: int


def cases(tier: str, seed: int = 0) -> List[Planned]:
    """The cases of a tier, in order: each family's repetitions (``family``)."""
    return [Planned(f"{name}-{rep}", name, rep) for name, _, tiers, reps in FAMILIES if tier in tiers
            for rep in range(reps)]


class Kit:
    """What a family builds its case with: the tier's arrays (sim: NumPy float32 and the
    simulator's device arrays; gpu: torch CUDA tensors, bfloat16 unless asked), random shapes,
    and a choice among options that differs between a family's repetitions."""

    def __init__(self, tier: str, seed: int, fam: str, rep: int):
        self.tier, self.gpu, self.rep = tier, tier == "gpu", rep
        self.rng = np.random.default_rng(_seed(seed, fam, rep))
        self._fam = _seed(seed, fam)
        self.dt = "bfloat16" if self.gpu else "float32"
        self.kind = "torch" if self.gpu else "numpy"

    def pick(self, options):
        """An option: each repetition of a family a different one (while there are enough)."""
        perm = np.random.default_rng(self._fam + len(options)).permutation(len(options))
        return options[perm[self.rep % len(options)]]

    def mnk(self):
        lo, hi = (3, 17) if not self.gpu else (17, 200)
        return tuple(int(x) for x in self.rng.integers(lo, hi, 3))

    def values(self, shape):
        return self.rng.standard_normal(shape)

    def arr(self, shape, dtype=None, kind=None, values=None):
        """A random (or ``values``) array of ``shape`` and ``dtype`` (the tier's by default), of
        ``kind``: the tier's, "numpy", "numba" (a device array), "torch" (CUDA) or "cpu" (a torch
        CPU tensor)."""
        x = self.values(shape) if values is None else np.asarray(values, np.float64)
        return to_kind(x, dtype or self.dt, kind or self.kind)

    def empty(self, shape, dtype=None, kind=None):
        return self.arr(shape, dtype, kind, values=np.full(shape, np.nan))


def to_kind(x: np.ndarray, dtype: str, kind: str):
    from numba_tc.arrays import np_dtype
    if kind in ("torch", "cpu"):
        import torch
        t = torch.from_numpy(np.array(x, np.float64)).to(getattr(torch, dtype))      # (0-d stays 0-d)
        return t.cuda() if kind == "torch" else t
    h = np.array(x).astype(np_dtype(dtype))
    return cuda.to_device(h) if kind == "numba" else h


def host(x) -> np.ndarray:
    """Any array as float64 NumPy."""
    if type(x).__module__.startswith("torch"):
        return x.detach().float().cpu().numpy().astype(np.float64)
    if hasattr(x, "copy_to_host"):
        x = x.copy_to_host()
    return np.asarray(x).astype(np.float64)


def _device(src: str, name: str, **scope):
    """A device function made from source (names and parameter counts the generator chose)."""
    ns = dict(scope, cuda=cuda, np=np)
    exec(compile(src, f"<bad_input {name}>", "exec"), ns)
    return cuda.jit(device=True)(ns[name])


def gemm(*args, **kw):
    import numba_tc
    return numba_tc.gemm(*args, **kw)


def _ab(k, m=None, n=None, kk=None, dtype=None, kind=None):
    m0, n0, k0 = k.mnk()
    m, n, kk = m or m0, n or n0, kk or k0
    return k.arr((m, kk), dtype, kind), k.arr((kk, n), dtype, kind), (m, n, kk)


def _product(a, b):
    return host(a) @ host(b)


# ---- epilogue functions: mistakes -------------------------------------------------------------
@family(reps=3)
def undefined_name(k):
    name = k.pick(["undefined_name", "scale_factr", "bias_vec", "ALPHA"]) + f"_{k.rep}"
    fn = _device(f"def f_{k.rep}(acc, row, col):\n    return acc + {name}\n", f"f_{k.rep}")
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=fn))


@family(reps=3)
def wrong_arity(k):
    nargs = int(k.rng.integers(0, 3))
    params = k.pick([p for p in range(1, 7) if p != 3 + nargs])
    names = ", ".join(["acc", "row", "col", "x0", "x1", "x2"][:params])
    fn = _device(f"def f({names}):\n    return acc\n", "f")
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=fn, epilogue_args=tuple(range(nargs))))


@cuda.jit(device=True)
def _returns_tuple(acc, row, col):
    return acc, row


@cuda.jit(device=True)
def _returns_none(acc, row, col):
    acc = acc + 1


@cuda.jit(device=True)
def _returns_str(acc, row, col):
    return "acc"


@cuda.jit(device=True)
def _returns_complex(acc, row, col):
    return acc * 1j


@cuda.jit(device=True)
def _returns_array(acc, row, col, x):
    return x


@family(reps=3)
def bad_return(k):
    fn = k.pick([_returns_tuple, _returns_none, _returns_str, _returns_complex, _returns_array])
    a, b, (m, n, _) = _ab(k)
    args = (k.arr((m, n), "float32"),) if fn is _returns_array else ()
    return Case(lambda: gemm(a, b, epilogue=fn, epilogue_args=args))


@cuda.jit(device=True)
def _recursive(acc, row, col):
    if row <= 0:
        return acc
    return _recursive(acc, row - 1, col)


@cuda.jit(device=True)
def _mutual_a(acc, row, col):
    if row > 0:
        return _mutual_b(acc, row - 1, col)
    return acc


@cuda.jit(device=True)
def _mutual_b(acc, row, col):
    return _mutual_a(acc, row, col)


@family()
def recursion(k):
    fn = k.pick([_recursive, _mutual_a])
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=fn))


def _plain_python(x):
    return x * 2


@cuda.jit(device=True)
def _calls_python(acc, row, col):
    return _plain_python(acc)


@cuda.jit(device=True)
def _helper_undefined(x):
    return x + nowhere_defined        # noqa: F821


@cuda.jit(device=True)
def _calls_bad_helper(acc, row, col):
    return _helper_undefined(acc)


@family()
def bad_call(k):
    fn = k.pick([_calls_python, _calls_bad_helper])
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=fn))


@cuda.jit(device=True)
def _raises(acc, row, col):
    if acc > 1e30:
        raise ValueError("too large")
    return acc


@cuda.jit(device=True)
def _asserts(acc, row, col):
    assert acc == acc
    return acc


@family()
def raises(k):
    fn = k.pick([_raises, _asserts])
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=fn))


@cuda.jit(device=True)
def _writes(acc, row, col, x):
    x[row, col] = acc
    return acc


@cuda.jit(device=True)
def _writes_view(acc, row, col, x):
    y = x[row]
    y[col] = acc
    return acc


@cuda.jit(device=True)
def _atomic(acc, row, col, x):
    cuda.atomic.add(x, (row, col), acc)
    return acc


@family(reps=3)
def writes(k):
    fn = k.pick([_writes, _writes_view, _atomic])
    a, b, (m, n, _) = _ab(k)
    x = k.arr((m, n), "float32")
    return Case(lambda: gemm(a, b, epilogue=fn, epilogue_args=(x,)))


@family(reps=3)
def not_a_device_function(k):
    import numba

    def plain(acc, row, col):
        return acc

    fn = k.pick([plain, lambda acc, row, col: acc, "relu", numba.njit(plain), cuda.jit(plain), 3])
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=fn))


# ---- epilogue functions: valid, or valid Python that Numba may not compile ---------------------
@cuda.jit(device=True)
def _resid(acc, row, col, x, s):
    return acc * s + x[row, col]


@cuda.jit(device=True)
def _col_scale(acc, row, col, v):
    return acc * v[col]


@cuda.jit(device=True)
def _row_ramp(acc, row, col, i):
    return acc + i * row


@family(reps=3)
def valid_epilogue(k):
    a, b, (m, n, _) = _ab(k)
    which = k.pick(["resid", "col", "ramp"])
    if which == "resid":
        x, s = k.arr((m, n), "float32"), float(k.rng.uniform(0.5, 2))
        return Case(lambda: gemm(a, b, epilogue=_resid, epilogue_args=[x, s]),
                    lambda: _product(a, b) * s + host(x), "correct")
    if which == "col":
        v = k.arr((n + 3,), "float32")                      # (longer than needed: fine)
        return Case(lambda: gemm(a, b, epilogue=_col_scale, epilogue_args=(v,)),
                    lambda: _product(a, b) * host(v)[:n], "correct")
    i = int(k.rng.integers(-3, 4))
    return Case(lambda: gemm(a, b, epilogue=_row_ramp, epilogue_args=(np.int64(i),)),
                lambda: _product(a, b) + i * np.arange(m)[:, None], "correct")


@cuda.jit(device=True)
def _numpy_alloc(acc, row, col):
    return acc + np.zeros(3)[0]


TABLE = [0.0, 1.0]


@cuda.jit(device=True)
def _global_list(acc, row, col):
    return acc + TABLE[0]


@cuda.jit(device=True)
def _int_div_zero(acc, row, col):
    return acc + row // (col - col)


@family(reps=3)
def maybe_uncompilable(k):
    """Python the simulator runs but Numba may not compile: an EpilogueError on a GPU, a
    correct result (or an error) in the simulator. (Integer division by zero is 0 on a GPU, as
    NumPy's error model has it; the simulator raises.)"""
    fn = k.pick([_numpy_alloc, _global_list, _int_div_zero])
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=fn), lambda: _product(a, b), "either")


# ---- epilogue_args ---------------------------------------------------------------------------
@cuda.jit(device=True)
def _reads_at(acc, row, col, x):
    return acc + x[row, col]


@cuda.jit(device=True)
def _reads_col(acc, row, col, v):
    return acc + v[col]


@cuda.jit(device=True)
def _reads_number(acc, row, col, s):
    return acc * s


@family(reps=4)
def bad_epilogue_arg(k):
    bad = k.pick([[1.0, 2.0], {"s": 1.0}, "2.0", None, 1 + 2j, object(), 2 ** 70, (1.0,)])
    a, b, _ = _ab(k)
    return Case(lambda: gemm(a, b, epilogue=_reads_number, epilogue_args=(bad,)))


@family(reps=3)
def bad_epilogue_args_container(k):
    a, b, (m, n, _) = _ab(k)
    x = k.arr((m, n), "float32")
    bad = k.pick([{"x": x}, "x", x, {x.shape}, 7])
    return Case(lambda: gemm(a, b, epilogue=_reads_at, epilogue_args=bad))


@family(reps=4)
def epilogue_arg_shape(k):
    a, b, (m, n, _) = _ab(k, m=None)
    fn, shape = k.pick([(_reads_at, (m - 1, n)), (_reads_at, (m, n - 1)), (_reads_at, (m * n,)),
                        (_reads_at, (m, n, 1)), (_reads_at, (0, n)), (_reads_col, (n - 1,)), (_reads_col, (n, 1))])
    x = k.arr(shape, "float32")
    return Case(lambda: gemm(a, b, epilogue=fn, epilogue_args=(x,)))


@family(reps=3)
def epilogue_arg_dtype(k):
    """Dtypes an epilogue array may not have (float16 it may: the control)."""
    a, b, (m, n, _) = _ab(k)
    dt = k.pick([np.complex64, np.int16, np.uint32 if not k.gpu else np.int8, object, np.float16])
    x = np.zeros((m, n), dt)
    if k.gpu and dt is not object:
        import torch
        x = torch.zeros((m, n), dtype=getattr(torch, np.dtype(dt).name), device="cuda")
    if dt is np.float16:
        return Case(lambda: gemm(a, b, epilogue=_reads_at, epilogue_args=(x,)), lambda: _product(a, b), "correct")
    return Case(lambda: gemm(a, b, epilogue=_reads_at, epilogue_args=(x,)))


@family(reps=3)
def epilogue_arg_elsewhere(k):
    """An array of another kind than the operands, a torch CPU tensor, a 0-d array, arguments
    without a function."""
    a, b, (m, n, _) = _ab(k)
    what = k.pick(["kind", "cpu", "0-d", "no function"])
    if what == "kind":
        x = k.arr((m, n), "float32", "numba" if not k.gpu else "numpy")
    elif what == "cpu":
        x = k.arr((m, n), "float32", "cpu" if k.gpu else "numba")
    elif what == "0-d":
        x = k.arr((), "float32")
    else:
        return Case(lambda: gemm(a, b, epilogue_args=(1.0,)))
    return Case(lambda: gemm(a, b, epilogue=_reads_at, epilogue_args=(x,)))


# ---- the other arguments ---------------------------------------------------------------------
@family(reps=4)
def bad_bias(k):
    a, b, (m, n, _) = _ab(k, m=20, n=30)
    bias = k.pick([k.arr((n + 1,)), k.arr((1, n)), k.arr((n,), "float64" if not k.gpu else "float16"), [0.0] * n,
                   1.5, k.arr((m, n))])
    return Case(lambda: gemm(a, b, bias=bias))


@family()
def bias_views(k):
    """A strided bias: copied for NumPy operands (correct), refused on GPU tensors."""
    a, b, (m, n, _) = _ab(k)
    full = k.arr((2 * n,), "float32")
    bias = full[::2]
    if k.gpu:
        return Case(lambda: gemm(a, b, bias=bias))
    return Case(lambda: gemm(a, b, bias=bias), lambda: _product(a, b) + host(bias)[None, :], "correct")


@family(reps=4)
def bad_c(k):
    a, b, (m, n, _) = _ab(k, m=20, n=30)
    c, beta = k.pick([(k.arr((m, n + 1)), 1.0), (k.arr((n, m)), 1.0), (None, 0.5), (k.arr((m, n), "float64"
                      if not k.gpu else "float16"), 1.0), (k.arr((1, m, n)), 1.0), ([[0.0] * n] * m, 1.0)])
    return Case(lambda: gemm(a, b, c=c, beta=beta))


@family(reps=4)
def bad_scalars(k):
    a, b, _ = _ab(k)
    name, value = k.pick([("alpha", "2"), ("beta", None), ("alpha", 1 + 1j), ("alpha", np.ones(2)), ("beta", True),
                          ("alpha", [2.0])])
    kw = {name: value}
    if name == "beta":
        kw["c"] = k.arr((a.shape[0], b.shape[1]))
    return Case(lambda: gemm(a, b, **kw))


@family(reps=3)
def nonfinite_scalars(k):
    """alpha or beta NaN or Inf: IEEE results (beta = 0 leaves c unread, as torch.addmm does)."""
    a, b, (m, n, _) = _ab(k)
    c = k.arr((m, n), "float32")
    alpha, beta = k.pick([(float("nan"), 0.0), (float("inf"), 1.0), (1.0, float("-inf")), (np.float32(2), 0.0)])
    return Case(lambda: gemm(a, b, c=c, alpha=alpha, beta=beta),
                lambda: alpha * _product(a, b) + (beta * host(c) if beta != 0 else 0), "correct")


@family(reps=3)
def bad_activation(k):
    a, b, _ = _ab(k)
    act = k.pick(["tanh", "RELU", 3, "gelu ", ["relu"]])
    return Case(lambda: gemm(a, b, activation=act))


@family(reps=4)
def bad_out(k):
    a, b, (m, n, kk) = _ab(k, m=24, n=24, kk=24)
    what = k.pick(["shape", "dtype", "kind", "is a", "overlaps b", "read-only", "broadcast"])
    if what == "shape":
        out = k.empty((m, n + 1))
    elif what == "dtype":
        out = k.empty((m, n), "float16")
    elif what == "kind":
        out = k.empty((m, n), kind="numba" if not k.gpu else "numpy")
    elif what == "is a":
        out = a
    elif what == "overlaps b":
        big = k.arr((m + 4, n))
        b = big[2:2 + kk]
        out = big[:m]
    elif what == "read-only" and not k.gpu:
        out = np.broadcast_to(np.zeros((1, n), np.float32), (m, n))
    else:
        base = k.empty((1, n))
        out = base.expand(m, n) if k.gpu else np.broadcast_to(base, (m, n))
    return Case(lambda: gemm(a, b, out=out))


@family(reps=2)
def out_views(k):
    """out column-major or a strided view with one unit stride: written where it lies."""
    a, b, (m, n, _) = _ab(k)
    big = k.empty((n, 2 * m))
    out = big[:, ::2].T if not k.gpu else big[:, :m].T
    return Case(lambda: gemm(a, b, out=out), lambda: _product(a, b), "correct", part=lambda r: out)


@family(reps=2)
def out_aliases_epilogue_input(k):
    """out overlapping c shifted by a row: refused on GPU arrays (NumPy ones are copies: the
    result is defined); c exactly out is allowed (in place)."""
    a, b, (m, n, _) = _ab(k, m=16, n=16)
    base = k.arr((m + 1, n))
    out, c = (base[1:], base[:m]) if k.rep % 2 == 0 else (base[:m], base[:m])
    c_ref = host(c)
    if k.gpu and k.rep % 2 == 0:
        return Case(lambda: gemm(a, b, out=out, c=c, beta=1.0))
    return Case(lambda: gemm(a, b, out=out, c=c, beta=1.0), lambda: _product(a, b) + c_ref, "correct",
                part=lambda r: out)


@family(reps=4)
def bad_out_dtype(k):
    a, b, _ = _ab(k)
    od = k.pick(["float64", "int8", 3.5, "bogus", object(), "float8_e4m3fn"])
    return Case(lambda: gemm(a, b, out_dtype=od))


@family(reps=4)
def bad_variant(k):
    from numba_tc import tensorcore
    a, b, _ = _ab(k)
    v = k.pick(["nope", 42, None, tensorcore.RUNG5, "hopper" if not k.gpu else "warptile", ""])
    return Case(lambda: gemm(a, b, variant=v))


@family(reps=3)
def bad_stream(k):
    a, b, _ = _ab(k)
    st = k.pick(["stream", 2.5, -1, True, object()])
    return Case(lambda: gemm(a, b, stream=st))


@family(reps=4)
def bad_operands(k):
    m, n, kk = k.mnk()
    a, b = k.pick([
        (k.arr((m, kk)), k.arr((kk + 1, n))),               # inner dimensions
        (k.arr((m,)), k.arr((m, n))),                       # 1-D
        ([[1.0] * kk] * m, k.arr((kk, n))),                 # a list
        (2.0, k.arr((kk, n))),                              # a scalar
        (k.arr((m, kk), "int32" if not k.gpu else "int32"), k.arr((kk, n), "int32")),
        (k.arr((m, kk), "float64"), k.arr((kk, n), "float64")),
        (k.arr((m, kk), "float32"), k.arr((kk, n), "float16")),
        (k.arr((m, kk), kind="numpy"), k.arr((kk, n), kind="numba" if not k.gpu else "torch")),
        (k.arr((m, kk), kind="cpu" if k.gpu else "numpy"), k.arr((kk, n), kind="cpu" if k.gpu else "numba")),
    ])
    return Case(lambda: gemm(a, b))


@family(reps=3)
def bad_batched(k):
    m, n, kk = k.mnk()
    a, b, kw = k.pick([
        (k.arr((3, m, kk)), k.arr((2, kk, n)), {}),
        (k.arr((2, 2, m, kk)), k.arr((kk, n)), {}),
        (k.arr((3, m, kk)), k.arr((3, kk + 1, n)), {}),
        (k.arr((3, m, kk)), k.arr((kk, n)), {"bias": k.arr((m,))} if m != n else {"bias": k.arr((n + 1,))}),
        (k.arr((3, m, kk)), k.arr((kk, n)), {"out": k.empty((3, m, n + 1))}),
    ])
    return Case(lambda: gemm(a, b, **kw))


@family(reps=2)
def batched(k):
    m, n, kk = k.mnk()
    a, b = k.arr((3, m, kk)), k.arr((kk, n)) if k.rep == 0 else k.arr((3, kk, n))
    return Case(lambda: gemm(a, b), lambda: np.matmul(host(a), host(b)), "correct")


@family(reps=3)
def fp8_mistakes(k):
    m, n, kk = k.mnk()
    f8 = "float8_e4m3fn"
    one = k.arr((1,), "float32", values=[1.0])
    a, b, kw = k.pick([
        (k.arr((m, kk), f8), k.arr((kk, n), k.dt), {}),                      # fp8 x 16-bit
        (k.arr((m, kk), f8), k.arr((kk, n), f8), {}),                         # no scales
        (k.arr((m, kk), f8), k.arr((kk, n), f8), {"scale_a": one}),           # one scale
        (k.arr((m, kk)), k.arr((kk, n)), {"scale_a": one, "scale_b": one}),   # scales of a 16-bit product
        (k.arr((m, kk), f8), k.arr((kk, n), f8), {"scale_a": k.arr((1,), "float16", values=[1.0]),
                                                   "scale_b": one}),
        (k.arr((m, kk), f8), k.arr((kk, n), f8), {"scale_a": k.arr((m, 2), "float32"), "scale_b": one}),
    ])
    return Case(lambda: gemm(a, b, **kw))


@family(reps=3)
def nonfinite_inputs(k):
    """NaN and Inf among the inputs: IEEE results (NaN where the reference has NaN, Inf of its sign)."""
    m, n, kk = k.mnk()
    va, vb = k.values((m, kk)), k.values((kk, n))
    for v in (va, vb):
        idx = k.rng.integers(0, v.size, 2)
        v.flat[idx[0]] = k.pick([np.nan, np.inf, -np.inf])
        v.flat[idx[1]] = k.pick([np.inf, np.nan, -np.inf])
    a, b = k.arr((m, kk), values=va), k.arr((kk, n), values=vb)
    return Case(lambda: gemm(a, b), lambda: _product(a, b), "correct")


@family(reps=4)
def empty_problems(k):
    m, n, kk = k.mnk()
    m, n, kk = k.pick([(0, n, kk), (m, 0, kk), (m, n, 0), (0, 0, 0)])
    a, b = k.arr((m, kk)), k.arr((kk, n))
    return Case(lambda: gemm(a, b), lambda: np.zeros((m, n)), "correct")


@family(reps=1)
def empty_k_with_epilogue(k):
    m, n, _ = k.mnk()
    a, b = k.arr((m, 0)), k.arr((0, n))
    return Case(lambda: gemm(a, b, bias=k.arr((n,))))


@family(reps=3)
def views(k):
    """Transposed and strided operands (one unit stride): read where they lie; on GPU arrays, a
    view with no unit stride is refused."""
    m, n, kk = k.mnk()
    which = k.pick(["T", "rows", "cols"])
    if which == "T":
        a, b = k.arr((kk, m)).T, k.arr((n, kk)).T
    elif which == "rows":
        a, b = k.arr((2 * m, kk))[::2], k.arr((kk, n))
    else:
        a, b = k.arr((m, 2 * kk))[:, ::2], k.arr((kk, n))
    if k.gpu and which == "cols":
        return Case(lambda: gemm(a, b))
    return Case(lambda: gemm(a, b), lambda: _product(a, b), "correct")


@family(reps=2)
def numpy_byte_order_and_strides(k):
    """Big-endian and oddly strided NumPy operands: converted on their way to the device."""
    m, n, kk = k.mnk()
    dt = np.dtype(">f4") if k.rep == 0 else np.float32
    a = np.ascontiguousarray(k.values((m, 2 * kk)).astype(dt))[:, ::-2]
    b = k.values((kk, n)).astype(dt)
    bias = k.values((n,)).astype(dt)
    return Case(lambda: gemm(a, b, bias=bias), lambda: host(a) @ host(b) + host(bias)[None, :], "correct")


@family(tiers=("sim",), reps=2)
def too_large_for_the_simulator(k):
    m, n, kk = k.pick([(512, 512, 512), (60000, 60000, 1), (1 << 20, 4, 4)])
    a, b = np.ones((m, kk), np.float32), np.ones((kk, n), np.float32)
    return Case(lambda: gemm(a, b))


@family(reps=2)
def explain_numpy(k):
    import numba_tc
    m, n, kk = k.mnk()
    a, b = k.arr((m, kk), "float32", "numpy"), k.arr((kk, n), "float32", "numpy")
    bias = k.arr((n + k.rep * (m + 1),), "float32", "numpy")    # the second repetition: a bad bias
    return Case(lambda: numba_tc.explain(a, b, bias=bias), None if k.rep else (lambda: "explained"),
                "error" if k.rep else "correct")


@family(tiers=("gpu",), reps=2)
def over_2_31_elements(k):
    """A with more than 2^31 elements (int64 offsets): its first and last rows checked."""
    import torch
    kk, n = 1024, 64
    m = (1 << 31) // kk + 64
    a = torch.randn(m, kk, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(kk, n, device="cuda", dtype=torch.bfloat16)
    rows = torch.cat([torch.arange(64), torch.arange(m - 64, m)]).cuda()
    variant = "auto" if k.rep == 0 else "mma_tuned"
    return Case(lambda: gemm(a, b, variant=variant), lambda: host(a[rows]) @ host(b), "correct" if k.rep == 0
                else "either", part=lambda r: r[rows])


@family(tiers=("gpu",), reps=2)
def gpu_dtypes(k):
    """fp16, fp32 (tf32 and SIMT) and fp8 products with an epilogue: correct."""
    import torch
    m, n, kk = k.mnk()
    if k.rep == 0:
        a, b = k.arr((m, kk), "float16"), k.arr((kk, n), "float16")
        bias = k.arr((n,), "float16")
        return Case(lambda: gemm(a, b, bias=bias, activation="relu"),
                    lambda: np.maximum(_product(a, b) + host(bias)[None, :], 0), "correct")
    a, b = k.arr((m, kk), "float8_e4m3fn"), k.arr((n, kk), "float8_e4m3fn").T
    sa = torch.tensor([0.5], device="cuda")
    sb = torch.tensor([2.0], device="cuda")
    return Case(lambda: gemm(a, b, scale_a=sa, scale_b=sb), lambda: _product(a, b), "correct")


if os.environ.get("NUMBA_TC_BAD_INPUT_SELFTEST"):        # (the tool's own test: what must fail does)
    @family(tiers=("sim",), reps=1)
    def selftest_hang_in_python(k):
        return Case(lambda: time.sleep(1000), lambda: np.zeros(1), "correct")

    @family(tiers=("sim",), reps=1)
    def selftest_hang_deaf(k):                # (its alarm never delivered: the parent kills it)
        def deaf():
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            time.sleep(1000)
        return Case(deaf, lambda: np.zeros(1), "correct")

    @family(tiers=("sim",), reps=1)
    def selftest_wrong(k):
        return Case(lambda: np.ones((2, 2), np.float32), lambda: np.zeros((2, 2)), "correct")

    @family(tiers=("sim",), reps=1)
    def selftest_unclear(k):
        return Case(lambda: np.ones(2).reshape(3))

    @family(tiers=("sim",), reps=1)
    def selftest_crash(k):
        return Case(lambda: os._exit(3))


# ---------------------------------------------------------------------------------------------
# Running one case (in a worker)
# ---------------------------------------------------------------------------------------------
class _Hang(BaseException):
    """The case's time limit passed (a BaseException: no except Exception in between catches it)."""


def _origin(e: BaseException) -> str:
    """The module file the exception was raised in (the innermost frame of its traceback)."""
    tb, last = e.__traceback__, None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last.tb_frame.f_code.co_filename if last is not None else ""


def clear(e: BaseException) -> Optional[str]:
    """None if ``e`` is a clear error (numba_tc's own exception, or a TypeError or ValueError
    raised by numba_tc's code), else why not."""
    import numba_tc
    from numba_tc import errors
    ours = tuple(getattr(errors, n) for n in errors.__all__)
    where = _origin(e)
    pkg = os.path.dirname(os.path.abspath(numba_tc.__file__))
    if isinstance(e, ours) or (isinstance(e, (TypeError, ValueError)) and os.path.abspath(where).startswith(pkg)):
        return None
    return f"{type(e).__module__}.{type(e).__name__} raised in {where}"


def compare(got, ref: np.ndarray, tol: float) -> Optional[str]:
    """None if ``got`` equals the float64 ``ref`` within ``tol`` (relative, Frobenius, over the
    finite entries) with NaN and Inf where ``ref`` has them, else how it differs."""
    g = host(got)
    if g.shape != ref.shape:
        return f"shape {g.shape}, expected {ref.shape}"
    nan_r, nan_g = np.isnan(ref), np.isnan(g)
    if (nan_r != nan_g).any():
        extra, missing = int((nan_g & ~nan_r).sum()), int((nan_r & ~nan_g).sum())
        return f"NaN at {extra} places the reference has none, missing at {missing}"
    inf_r = np.isinf(ref)
    if (np.isinf(g) != inf_r).any() or (np.sign(g[inf_r]) != np.sign(ref[inf_r])).any():
        return "Inf where the reference has none (or not of its sign)"
    fin = np.isfinite(ref)
    if not fin.any():
        return None
    err = np.linalg.norm(g[fin] - ref[fin]) / max(np.linalg.norm(ref[fin]), 1e-30)
    return None if err <= tol else f"relative error {err:.2e} > {tol:.0e}"


_TOL = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 4e-3}


def run_case(p: Planned, tier: str, seed: int, limit: float) -> dict:
    """Build and run one case under an alarm of ``limit`` seconds: its record."""
    rec = {"case": p.name, "tier": tier, "outcome": "wrong", "expect": "?", "exception": None, "why": None,
           "seconds": 0.0}
    fn = next(f for name, f, _, _ in FAMILIES if name == p.family)
    try:
        case = fn(Kit(tier, seed, p.family, p.rep))
    except Exception:
        rec["why"] = "the case could not be built: " + traceback.format_exc(limit=4)
        return rec
    rec["expect"] = case.expect

    def up(signum, frame):
        raise _Hang()
    old = signal.signal(signal.SIGALRM, up)
    t = time.perf_counter()
    result, err = None, None
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        result = case.call()
        if tier == "gpu":
            import torch
            torch.cuda.synchronize()
    except _Hang:
        rec.update(outcome="hang", why=f"no answer within {limit} s")
    except BaseException as e:          # (SystemExit, KeyboardInterrupt: not from a call)
        err = e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        rec["seconds"] = round(time.perf_counter() - t, 3)
    if rec["outcome"] == "hang":
        return rec
    if err is not None:
        rec["exception"] = f"{type(err).__name__}: {str(err)[:600]}"
        why = clear(err)
        if why is not None:
            rec["why"] = "unclear error: " + why
        elif case.expect == "correct":
            rec["why"] = "a valid call was refused"
        else:
            rec["outcome"] = "error"
        return rec
    if case.ref is None:
        rec["why"] = "no error for a mistake"
        return rec
    try:
        ref = case.ref()
        if isinstance(ref, str):                  # (explain: any description)
            ok = None if isinstance(result, str) and result else f"explain returned {result!r}"
        else:
            got = case.part(result) if case.part else result
            tol = case.tol or _TOL.get(_dtype_of(got), 2e-2)
            ok = compare(got, ref, tol)
    except Exception:
        ok = "the reference failed: " + traceback.format_exc(limit=3)
    if ok is None:
        rec["outcome"] = "correct"
    else:
        rec["why"] = ok
    return rec


def _dtype_of(x) -> str:
    from numba_tc.arrays import dtype_name
    return dtype_name(x.dtype)


def _worker(tier: str, seed: int, limit: float) -> None:
    """Run the cases whose numbers arrive on stdin, one record line each."""
    import numba_tc  # noqa: F401           (imports paid before the first case)
    if tier == "gpu":
        import torch
        torch.zeros(1, device="cuda")
    plan = cases(tier, seed)
    print(MARK + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        rec = run_case(plan[int(line)], tier, seed, limit)
        print(MARK + json.dumps(rec), flush=True)


# ---------------------------------------------------------------------------------------------
# The parent: workers, time limits, records
# ---------------------------------------------------------------------------------------------
class _Worker:
    def __init__(self, tier: str, seed: int, limit: float):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if tier == "sim":
            env["NUMBA_ENABLE_CUDASIM"] = "1"
        else:
            env.pop("NUMBA_ENABLE_CUDASIM", None)
        self.log = tempfile.TemporaryFile()
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", "--tier", tier,
                                   "--seed", str(seed), "--limit", str(limit)], env=env, cwd=ROOT,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        self.buf, self.eof = b"", False
        self.ready = self._read(600) is not None

    def _read(self, timeout: float) -> Optional[dict]:
        """The next record line within ``timeout`` seconds, or None (no answer, or the worker died)."""
        end = time.monotonic() + timeout
        fd = self.p.stdout.fileno()
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(MARK):
                    return json.loads(text[len(MARK):])
            left = end - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.eof = True                    # (it died)
                return None
            self.buf += chunk

    def ask(self, i: int, timeout: float) -> Optional[dict]:
        try:
            self.p.stdin.write(f"{i}\n".encode())
            self.p.stdin.flush()
        except OSError:
            return None
        return self._read(timeout)

    def stderr_tail(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-800:]

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        self.log.close()


def _environment(tier: str) -> tuple:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                timeout=10).stdout.strip()
    except Exception:
        commit = ""
    if not commit:              # (a copy of the tree without .git: the sources' digest)
        h = hashlib.sha256()
        pkg = os.path.join(ROOT, "numba_tc")
        for f in sorted(os.listdir(pkg)):
            if f.endswith(".py"):
                with open(os.path.join(pkg, f), "rb") as fh:
                    h.update(f.encode() + fh.read())
        commit = "sources:" + h.hexdigest()[:12]
    gpu = "Numba's CUDA simulator"
    if tier == "gpu":
        try:
            import torch
            gpu = torch.cuda.get_device_name(0)
        except Exception as e:
            gpu = f"unknown ({e})"
    return gpu, commit


def run(tier: str, seed: int = 0, workers: int = 2, limit: float = LIMIT, only: Optional[str] = None,
        warm: bool = False, log=None) -> List[dict]:
    """Every case of ``tier`` (those whose name matches ``only``), run by ``workers`` worker
    processes: the records, in the cases' order. ``warm``: the valid cases run once first,
    untimed (their kernels compiled into the disk cache)."""
    plan = cases(tier, seed)
    todo = [i for i, p in enumerate(plan) if only is None or re.search(only, p.name)]
    gpu, commit = _environment(tier)
    if warm:
        valid = [i for i in todo if plan[i].family in _VALID]
        _run_indices(plan, valid, tier, seed, workers, 300, None)
    import threading
    lock = threading.Lock()

    def tagged(rec):                      # (called from the workers' threads: one at a time)
        rec.update(gpu=gpu, commit=commit)
        if log:
            with lock:
                log(rec)
    return _run_indices(plan, todo, tier, seed, workers, limit, tagged)


# the families with valid calls (``--warm`` runs them first)
_VALID = {"valid_epilogue", "maybe_uncompilable", "nonfinite_scalars", "out_views", "out_aliases_epilogue_input",
          "batched", "nonfinite_inputs", "empty_problems", "views", "numpy_byte_order_and_strides",
          "explain_numpy", "over_2_31_elements", "gpu_dtypes", "epilogue_arg_dtype", "bias_views",
          "out_aliases_epilogue_input"}


def _run_indices(plan, todo, tier, seed, workers, limit, log) -> List[dict]:
    import threading
    results = {}
    queue = list(todo)
    lock = threading.Lock()

    def slot():
        w = None
        while True:
            with lock:
                if not queue:
                    break
                i = queue.pop(0)
            if w is None or w.p.poll() is not None:
                if w is not None:
                    w.close()
                w = _Worker(tier, seed, limit)
                if not w.ready:
                    rec = {"case": plan[i].name, "tier": tier, "outcome": "wrong", "expect": "?", "exception": None,
                           "why": "the worker did not start: " + w.stderr_tail(), "seconds": 0.0}
                    results[i] = rec
                    w.close()
                    w = None
                    continue
            t = time.perf_counter()
            rec = w.ask(i, limit + SLACK)
            if rec is None:
                died = w.eof or w.p.poll() is not None
                rec = {"case": plan[i].name, "tier": tier, "outcome": "wrong" if died else "hang", "expect": "?",
                       "exception": None, "seconds": round(time.perf_counter() - t, 3),
                       "why": ("the worker died: " + w.stderr_tail()) if died else f"killed after {limit + SLACK} s"}
                w.close()
                w = None
            elif rec["outcome"] in ("hang", "wrong"):
                w.close()                  # (a process after an alarm or a failure is not to be trusted)
                w = None
            results[i] = rec
            if log:
                log(rec)
        if w is not None:
            w.close()

    threads = [threading.Thread(target=slot) for _ in range(max(1, min(workers, len(todo))))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return [results[i] for i in todo]


def passed(rec: dict, limit: float = LIMIT) -> bool:
    """A record that meets the bar: a clear error for a mistake, a correct result for a valid
    call (either for "either"), within the time limit."""
    ok = {"error": ("error",), "correct": ("correct",), "either": ("error", "correct")}.get(rec["expect"], ())
    return rec["outcome"] in ok and rec["seconds"] <= limit


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tier", choices=TIERS, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, help="worker processes (default: 2 in the simulator, 4 on a GPU)")
    ap.add_argument("--limit", type=float, default=LIMIT, help="seconds a case may take (default 30)")
    ap.add_argument("--only", help="run the cases whose name matches this regular expression")
    ap.add_argument("--out", help="write the records here (JSON)")
    ap.add_argument("--list", action="store_true", help="list the cases and stop")
    ap.add_argument("--warm", action=argparse.BooleanOptionalAction, default=None,
                    help="run the valid cases once untimed first (default: on the GPU tier)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args.tier, args.seed, args.limit)
        return 0
    plan = cases(args.tier, args.seed)
    if args.list:
        for p in plan:
            print(p.name)
        print(f"{len(plan)} cases", file=sys.stderr)
        return 0

    done = []

    def log(rec):
        mark = "ok " if passed(rec, args.limit) else "BAD"
        print(f"{mark} {rec['case']:<36} {rec['outcome']:<8} {rec['seconds']:6.2f}s  "
              f"{(rec['why'] or rec['exception'] or '')[:110]}", flush=True)
        done.append(rec)
        if args.out:                       # (as it goes: a run cut short keeps what it did)
            _write(args.out, done)
    warm = args.tier == "gpu" if args.warm is None else args.warm
    workers = args.workers or (4 if args.tier == "gpu" else 2)
    records = run(args.tier, args.seed, workers, args.limit, args.only, warm, log)
    bad = [r for r in records if not passed(r, args.limit)]
    print(f"{len(records)} cases: " + ", ".join(f"{sum(r['outcome'] == o for r in records)} {o}"
                                                for o in ("error", "correct", "wrong", "hang"))
          + f"; slowest {max((r['seconds'] for r in records), default=0):.1f} s; {len(bad)} below the bar")
    if args.out:
        _write(args.out, records)
    return 1 if bad else 0


def _write(path: str, records: List[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path + ".part", "w") as f:
        json.dump(records, f, indent=1)
    os.replace(path + ".part", path)


if __name__ == "__main__":
    sys.exit(main())
