"""The epilogue's compile-time description, without a GPU: the run-time values it takes, its
flip for a column-major C, and the key of a user's function, which follows its code (the same
code in a fresh process, an edit, a changed closure value or a called function)."""
import subprocess
import sys
from dataclasses import replace

import pytest

from numba_tc.epilogue import PLAIN, Epilogue, UserFunction, code_digest, float_bits

pytestmark = pytest.mark.cpu


def test_slots_name_each_run_time_value():
    assert PLAIN.slots() == ("unused",)
    uf = UserFunction("f", "d", (("array", "float32", 2), ("f64",)), None)
    e = Epilogue(alpha=True, c=("float32", False), bias=("bfloat16", "col"), activation="relu", user=uf)
    assert e.slots() == ("M", "N", "alpha", "c", "ldc", "beta", "bias", "u0", "u0_shape0", "u0_shape1",
                         "u0_stride0", "u0_stride1", "u1")


def test_the_terms_table_orders_values_and_their_readers():
    """One table (``TERMS``) gives each run-time value's slot and how the host makes it: the
    binder's values follow the slots term by term (a float's bits, an array's shape and byte
    strides), a split-K kernel's part of a block-scaled product is a prefix of its values, and the
    block scaler and the stager find theirs by name."""
    from numba_tc.epilogue import TERMS, Run
    from numba_tc.epilogue_args import Bound
    from numba_tc.hopper.promotion import SCALE_SLOTS
    from numba_tc.hopper.spec import split_part
    uf = UserFunction("f", "d", (("array", "float32", 2), ("f32",), ("i64",)), None)
    e = Epilogue(alpha=True, c=("float32", False), bias=("bfloat16", "col"), activation="relu", user=uf,
                 scales="block")
    b = Bound(e, (), 7, 9, ldc=11, user_shapes=(((7, 9), (36, 4)), None, None), scale_strides=((3, 1), (5, 1)),
              run=Run(scales=(21, 22), alpha=1.5, c=31, beta=-0.25, bias=41, user=(51, 0.5, -3)))
    got = dict(zip(e.slots(), b.values(e)))
    assert len(got) == len(e.slots()) == len(b.values(e))
    assert got == {"M": 7, "N": 9, "scale_a": 21, "scale_a_row_stride": 3, "scale_a_k_stride": 1, "scale_b": 22,
                   "scale_b_k_stride": 5, "scale_b_col_stride": 1, "alpha": float_bits(1.5), "c": 31, "ldc": 11,
                   "beta": float_bits(-0.25), "bias": 41, "u0": 51, "u0_shape0": 7, "u0_shape1": 9,
                   "u0_stride0": 36, "u0_stride1": 4, "u1": float_bits(0.5), "u2": -3}
    assert b.values(e, swap=True)[:2] == (9, 7)                     # (the kernel's M and N: C^T's)
    part = split_part(e)
    assert part.slots() == e.slots()[:len(part.slots())] and e.index(*SCALE_SLOTS) == part.index(*SCALE_SLOTS)
    assert [t.name for t in TERMS][:2] == ["shape", "scales"]
    assert set(Run._fields) == {f for t in TERMS for f in t.run}


def test_flip_for_a_column_major_c():
    e = Epilogue(c=("float16", False), bias=("float16", "row"))
    f = e.flipped()
    # swap tells a user's function its own (row, col): without one the kernel is the same
    assert f.c == ("float16", True) and f.bias == ("float16", "col") and not f.swap
    assert f.flipped() == e


def test_float_bits_round_trip():
    import struct
    assert struct.unpack("<f", struct.pack("<i", float_bits(0.75)))[0] == 0.75
    assert struct.unpack("<d", struct.pack("<q", float_bits(-1.5e300, "f64")))[0] == -1.5e300


_SRC = """
import math
SCALE = {scale}
def helper(x):
    return x * {h}
def f(acc, row, col, res):
    return helper(acc) + SCALE * res[row, col] + math.sqrt(2.0)
"""


def _digest_in_fresh_process(scale=2.0, h=3):
    code = ("import sys; ns = {}; exec(compile(sys.argv[1], 'user.py', 'exec'), ns); "
            "from numba_tc.epilogue import code_digest; print(code_digest(ns['f']))")
    p = subprocess.run([sys.executable, "-c", code, _SRC.format(scale=scale, h=h)], capture_output=True,
                       text=True, check=True)
    return p.stdout.strip()


def test_user_function_key_follows_its_code():
    base = _digest_in_fresh_process()
    assert base == _digest_in_fresh_process()               # a new process: the same key
    assert base != _digest_in_fresh_process(scale=2.5)      # a global it reads changed
    assert base != _digest_in_fresh_process(h=4)            # a function it calls changed


def test_closure_values_count():
    def make(k):
        def f(acc, row, col):
            return acc * k
        return f
    assert code_digest(make(2)) == code_digest(make(2)) != code_digest(make(3))


def test_scalar_arguments_reach_the_function_as_float32_unless_float64():
    """A Python float is the accumulator's type in the kernel (fp64 math per element costs
    conversions and fp64 instructions); ``np.float64`` asks for double; ints are int64."""
    import numpy as np
    from numba import cuda

    from numba_tc.epilogue_args import bind

    @cuda.jit(device=True)
    def f(acc, row, col, s, d, i):
        return acc * s + d + i

    b = bind("numpy", 4, 4, "float32", "float32", None, None, 1.0, 0.0, None, None, f, (0.5, np.float64(2.0), 3))
    assert b.spec.user.args == (("f32",), ("f64",), ("i64",))
    vals = b.values(b.spec)[2:]                           # (after M, N)
    assert vals == (float_bits(0.5), float_bits(2.0, "f64"), 3)


def test_element_reads_finds_arrays_read_only_at_the_elements_position():
    # what a kernel may stage and hand over element by element (``Epilogue.staged``): read from
    # the bytecode, conservatively
    from numba import cuda

    from numba_tc.epilogue import element_reads

    @cuda.jit(device=True)
    def resid(acc, row, col, res, scale, other):
        return acc + scale * res[row, col] * res[row, col] + other[col, row]

    @cuda.jit(device=True)
    def moved(acc, row, col, res):
        row = row - 1
        return acc + res[row, col]

    @cuda.jit(device=True)
    def sized(acc, row, col, res, res2):
        return acc + res[row, col] + res2[row, col] * res2.shape[0]

    @cuda.jit(device=True)
    def nothing(acc, row, col, res):
        return acc

    def inner(acc, row, col, res):
        def g():
            return res[row, col]
        return acc + g()
    assert element_reads(resid) == {0}
    assert element_reads(moved) == frozenset()
    assert element_reads(sized) == {0}
    assert element_reads(nothing) == frozenset()
    assert element_reads(inner) == frozenset()


def test_a_staged_epilogue_hands_the_function_an_element():
    # the staged apply takes the element (sx) where the function read the array; a spec without
    # a staged argument has none to hand over
    from numba import cuda

    from numba_tc.epilogue import UserFunction, make

    @cuda.jit(device=True)
    def resid(acc, row, col, res, scale):
        return acc + scale * res[row, col]
    kinds = (("array", "float32", 2, True), ("f32",))
    spec = Epilogue(user=UserFunction("resid", code_digest(resid), kinds, resid))
    assert spec.staged() == "u0" and Epilogue(user=UserFunction("r", "d", (kinds[0][:3], kinds[1]), resid)).staged() is None
    assert replace(spec, swap=True).staged() is None                  # (the kernel's rows: C's columns)
    # c, row-major and aligned (a third field): staged where no user array is, never across
    # (the kernel of C^T reads it transposed)
    with_c = Epilogue(c=("bfloat16", False, True))
    assert with_c.staged() == "c" and with_c.staged_dtype() == "bfloat16" and with_c.flipped().staged() is None
    assert replace(spec, c=("float32", False, True)).staged() == "u0" and Epilogue(c=("float32", False)).staged() is None
    with pytest.raises(ValueError, match="no argument to stage"):
        make(PLAIN, True)
    assert make(spec, True) is not make(spec)
