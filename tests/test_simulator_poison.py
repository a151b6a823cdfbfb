"""The NumPy path in Numba's CUDA simulator: the kernel writes a device copy of ``out`` (so a
checker's NaN poison is what an unwritten element keeps), in ``out``'s memory order (a
column-major ``out`` runs the swapped, column-major store), and a kernel that skips elements
fails ``verify.check``."""
import pytest

from conftest import run_in_simulator

pytestmark = pytest.mark.sim


def test_poison_reaches_the_device_and_column_major_out_is_column_major_there():
    out = run_in_simulator("""
from dataclasses import replace
import numpy as np
import numba_tc
from numba_tc import simt, verify
seen = []
base = numba_tc.variant_from(simt.RUNG5, "probe")
def plan(a, b, c, dev, **kw):
    seen.append((c.rows, c.cols, c.trans))
    return []                                   # launches nothing: every element unwritten
nothing = replace(base, plan=plan)
for order in "CF":
    a = np.ones((5, 3), np.float32); b = np.ones((3, 7), np.float32)
    c = np.full((5, 7), np.nan, np.float32, order=order)
    numba_tc.gemm(a, b, variant=nothing, out=c)
    print(order, "all NaN" if np.isnan(c).all() else "written", seen[-1])
r = verify.check(nothing, 9, 11, 13)
print("check:", "ok" if r.ok else "FAIL", r.elements)
""")
    assert "C all NaN (5, 7, False)" in out, out       # row-major: computed as is
    assert "F all NaN (7, 5, False)" in out, out       # column-major: C^T = B^T A^T, row-major
    assert "check: FAIL" in out and "row 0, col 0" in out


def test_a_kernel_that_skips_its_last_column_fails_check():
    out = run_in_simulator("""
from dataclasses import replace
import numba_tc
from numba_tc import simt, verify
base = numba_tc.variant_from(simt.RUNG5, "short")
def plan(a, b, c, dev, **kw):                   # the same kernel on C without its last column
    from numba_tc.arrays import Matrix
    return base.plan(Matrix(a.data, a.rows, a.cols, a.ld, a.trans, a.dtype, a.ptr, a.owner),
                     Matrix(b.data, b.rows, b.cols - 1, b.ld, b.trans, b.dtype, b.ptr, b.owner),
                     Matrix(c.data, c.rows, c.cols - 1, c.ld, c.trans, c.dtype, c.ptr, c.owner), dev, **kw)
short = replace(base, plan=plan)
for ol in "CF":
    r = verify.check(short, 17, 19, 23, out_layout=ol)
    print(ol, "ok" if r.ok else "FAIL", r.elements)
""")
    assert out.count("FAIL") == 2, out
    assert "C FAIL 17 element(s) out of bounds; worst at row" in out and ", col 18:" in out, out
    assert "F FAIL 19 element(s) out of bounds; worst at row 16, col" in out, out   # swapped: its last row
