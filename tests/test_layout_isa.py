"""numba_tc.layout's fragment maps against the PTX ISA's own tables, typed in here as data (no
GPU), and against CUTLASS's independent encoding of the same tables (CuTe thread-value layouts).

The tests in test_layout.py and test_hopper.py check the maps for consistency (ldmatrix's
addressing reproduces them, the wgmma accumulator is built from c_fragment); these check the
facts themselves, from the sources:

* PTX ISA (8.x), 9.7.14.5.8 "Matrix Fragments for mma.m16n8k16 with floating point type":
  the figures for A (.f16/.bf16, a0..a7), B (b0..b3) and C/D (.f32, c0..c3), and their text:
  groupID = %laneid >> 2, threadID_in_group = %laneid % 4, a row/col formula per element.
* PTX ISA, 9.7.14.5.7 "Matrix Fragments for mma.m16n8k8" (.tf32: a0..a3, b0..b1, c0..c3).
* PTX ISA, 9.7.15.5.1 "Register Fragments and Shared Memory Matrix Layouts", the figure
  "WGMMA .m64nNk16 register fragment layout for accumulator matrix D": warp w of the warpgroup
  holds rows 16w..16w+15, d_i at the m16n8 C/D position of i % 4, columns 8 * (i // 4) further.
* CUTLASS include/cute/atom/mma_traits_sm80.hpp (SM80_16x8x16_F32F16F16F32_TN,
  SM80_16x8x8_F32TF32TF32F32_TN, SM80_16x8_Row) and mma_traits_sm90_gmma.hpp (CLayout_64xN):
  (thread, value) -> column-major index of the (M x K), (N x K) or (M x N) tile.
"""
import itertools
import re

import pytest

from numba_tc import layout

pytestmark = pytest.mark.cpu

# ---------------------------------------------------------------------------------------------
# The PTX ISA's rows of the figures, typed in: for each element name, (row, col) as the ISA's
# text gives them, in terms of g = groupID and t = threadID_in_group.
# ---------------------------------------------------------------------------------------------
# mma.m16n8k16, A (16 x 16, .f16x2/.bf16x2 registers: a0,a1 in the first, .. a6,a7 in the fourth)
#   row = groupID for ai where 0 <= i < 2 || 4 <= i < 6; groupID + 8 otherwise
#   col = (threadID_in_group * 2) + (i & 0x1) for ai where i < 4; + 8 for ai where i >= 4
ISA_M16N8K16_A = {
    "a0": ("g", "2t"), "a1": ("g", "2t+1"), "a2": ("g+8", "2t"), "a3": ("g+8", "2t+1"),
    "a4": ("g", "2t+8"), "a5": ("g", "2t+9"), "a6": ("g+8", "2t+8"), "a7": ("g+8", "2t+9"),
}
# mma.m16n8k16, B (16 x 8): row = (threadID_in_group * 2) + (i & 0x1) for bi where i < 2,
#   + 8 for i >= 2; col = groupID
ISA_M16N8K16_B = {"b0": ("2t", "g"), "b1": ("2t+1", "g"), "b2": ("2t+8", "g"), "b3": ("2t+9", "g")}
# C/D (16 x 8, .f32): row = groupID for ci where i < 2, groupID + 8 for i >= 2;
#   col = (threadID_in_group * 2) + (i & 0x1)
ISA_M16N8_C = {"c0": ("g", "2t"), "c1": ("g", "2t+1"), "c2": ("g+8", "2t"), "c3": ("g+8", "2t+1")}
# mma.m16n8k8 .tf32, A (16 x 8, one element per register): row = groupID for a0 and a2,
#   groupID + 8 for a1 and a3; col = threadID_in_group for a0 and a1, + 4 for a2 and a3
ISA_M16N8K8_TF32_A = {"a0": ("g", "t"), "a1": ("g+8", "t"), "a2": ("g", "t+4"), "a3": ("g+8", "t+4")}
# mma.m16n8k8 .tf32, B (8 x 8): row = threadID_in_group for b0, + 4 for b1; col = groupID
ISA_M16N8K8_TF32_B = {"b0": ("t", "g"), "b1": ("t+4", "g")}
# The figure's first rows, cell by cell (row 0 of A m16n8k16: T0..T3 hold a0,a1 in columns
# 0..7 and a4,a5 in columns 8..15; row 8 the same with a2,a3 and a6,a7), as a spot check of the
# formulas above against the pictures.
FIGURE_A_ROW0 = "T0:a0 T0:a1 T1:a0 T1:a1 T2:a0 T2:a1 T3:a0 T3:a1 T0:a4 T0:a5 T1:a4 T1:a5 T2:a4 T2:a5 T3:a4 T3:a5"
FIGURE_A_ROW8 = "T0:a2 T0:a3 T1:a2 T1:a3 T2:a2 T2:a3 T3:a2 T3:a3 T0:a6 T0:a7 T1:a6 T1:a7 T2:a6 T2:a7 T3:a6 T3:a7"
FIGURE_C_ROW1 = "T4:c0 T4:c1 T5:c0 T5:c1 T6:c0 T6:c1 T7:c0 T7:c1"
FIGURE_B_COL0 = "T0:b0 T0:b1 T1:b0 T1:b1 T2:b0 T2:b1 T3:b0 T3:b1 T0:b2 T0:b3 T1:b2 T1:b3 T2:b2 T2:b3 T3:b2 T3:b3"
# WGMMA .m64nNk16 D (.f32): row = 16 * (warp in warpgroup) + groupID (+ 8 for i % 4 >= 2),
#   col = (threadID_in_group * 2) + (i & 0x1) + 8 * (i >> 2)
FIGURE_D_ROW0_N16 = ("T0:d0 T0:d1 T1:d0 T1:d1 T2:d0 T2:d1 T3:d0 T3:d1 "
                     "T0:d4 T0:d5 T1:d4 T1:d5 T2:d4 T2:d5 T3:d4 T3:d5")
FIGURE_D_ROW24_N8 = "T32:d2 T32:d3 T33:d2 T33:d3 T34:d2 T34:d3 T35:d2 T35:d3"

# ---------------------------------------------------------------------------------------------
# CUTLASS's CuTe layouts of the same instructions: ((thread shape), (value shape)) and strides;
# the image is the column-major index of the tile (A: m + 16 k; B: n + 8 k (16-bit: N x K);
# C: m + M n).
# ---------------------------------------------------------------------------------------------
CUTE = {
    "m16n8k16_A": (((4, 8), (2, 2, 2)), ((32, 1), (16, 8, 128)), 16),
    "m16n8k16_B": (((4, 8), (2, 2)), ((16, 1), (8, 64)), 8),
    "m16n8_C": (((4, 8), (2, 2)), ((32, 1), (16, 8)), 16),
    "m16n8k8_tf32_A": (((4, 8), (2, 2)), ((16, 1), (8, 64)), 16),
    "m16n8k8_tf32_B": (((4, 8), (2,)), ((8, 1), (32,)), 8),
}


def cute_gmma_c(n):
    """CLayout_64xN: Shape<Shape<_4,_8,_4>, Shape<_2,_2,N/8>>, Stride<Stride<_128,_1,_16>, Stride<_64,_8,_512>>."""
    return ((4, 8, 4), (2, 2, n // 8)), ((128, 1, 16), (64, 8, 512)), 64


def _cute(layout_def, thread, value):
    """A CuTe layout's image of (thread, value): each index split colexicographically."""
    (tshape, vshape), (tstride, vstride), rows = layout_def
    out = 0
    for idx, shape, stride in ((thread, tshape, tstride), (value, vshape, vstride)):
        for s, d in zip(shape, stride):
            out += (idx % s) * d
            idx //= s
        assert idx == 0
    return out % rows, out // rows


def _isa(table, lane):
    g, t = lane >> 2, lane & 3
    env = {"g": g, "t": t}
    return {name: tuple(eval(re.sub(r"(\d)([gt])", r"\1*\2", e), {}, env) for e in rc)
            for name, rc in table.items()}


def _figure(cells):
    return [(int(c.split(":")[0][1:]), c.split(":")[1]) for c in cells.split()]


def test_mma_m16n8k16_a_fragment_is_the_isas():
    for lane in range(32):
        isa = _isa(ISA_M16N8K16_A, lane)
        for i in range(8):                      # ai: register i // 2, half i % 2
            got = layout.a_fragment(lane, i // 2, i % 2, 2)
            assert got == isa[f"a{i}"], (lane, i)
            assert got == _cute(CUTE["m16n8k16_A"], lane, i), (lane, i)


def test_mma_m16n8k16_b_fragment_is_the_isas():
    for lane in range(32):
        isa = _isa(ISA_M16N8K16_B, lane)
        for i in range(4):
            k, n = layout.b_fragment(lane, i // 2, i % 2, 2)
            assert (k, n) == isa[f"b{i}"], (lane, i)
            assert (n, k) == _cute(CUTE["m16n8k16_B"], lane, i), (lane, i)     # CuTe: N x K


def test_mma_m16n8_accumulator_is_the_isas():
    for lane in range(32):
        isa = _isa(ISA_M16N8_C, lane)
        for i in range(4):
            assert layout.c_fragment(lane, i) == isa[f"c{i}"] == _cute(CUTE["m16n8_C"], lane, i), (lane, i)


def test_mma_m16n8k8_tf32_fragments_are_the_isas():
    for lane in range(32):
        a, b = _isa(ISA_M16N8K8_TF32_A, lane), _isa(ISA_M16N8K8_TF32_B, lane)
        for i in range(4):                      # one tf32 element per register
            assert layout.a_fragment(lane, i, 0, 1) == a[f"a{i}"] == _cute(CUTE["m16n8k8_tf32_A"], lane, i)
        for i in range(2):
            k, n = layout.b_fragment(lane, i, 0, 1)
            assert (k, n) == b[f"b{i}"] and (n, k) == _cute(CUTE["m16n8k8_tf32_B"], lane, i)


def test_the_figures_rows_cell_by_cell():
    def a_cell(lane, name):
        i = int(name[1:])
        return layout.a_fragment(lane, i // 2, i % 2, 2)
    assert [a_cell(*c) for c in _figure(FIGURE_A_ROW0)] == [(0, k) for k in range(16)]
    assert [a_cell(*c) for c in _figure(FIGURE_A_ROW8)] == [(8, k) for k in range(16)]
    assert [layout.c_fragment(l, int(n[1:])) for l, n in _figure(FIGURE_C_ROW1)] == [(1, c) for c in range(8)]
    b = [layout.b_fragment(l, int(n[1:]) // 2, int(n[1:]) % 2, 2) for l, n in _figure(FIGURE_B_COL0)]
    assert b == [(k, 0) for k in range(16)]
    d = [layout.wgmma_d_fragment(l, int(n[1:])) for l, n in _figure(FIGURE_D_ROW0_N16)]
    assert d == [(0, c) for c in range(16)]
    d = [layout.wgmma_d_fragment(l, int(n[1:])) for l, n in _figure(FIGURE_D_ROW24_N8)]
    assert d == [(24, c) for c in range(8)]


@pytest.mark.parametrize("n", [8, 16, 64, 128, 256])
def test_wgmma_accumulator_is_the_isas_and_cutlass(n):
    seen = set()
    for thread, i in itertools.product(range(128), range(n // 2)):
        w, lane = thread >> 5, thread & 31
        g, t = lane >> 2, lane & 3
        isa = (16 * w + g + 8 * ((i % 4) >= 2), 2 * t + (i & 1) + 8 * (i >> 2))
        got = layout.wgmma_d_fragment(thread, i)
        assert got == isa == _cute(cute_gmma_c(n), thread, i), (thread, i)
        seen.add(got)
    assert seen == {(m, c) for m in range(64) for c in range(n)}


def test_shapes_are_the_isas():
    assert layout.mma_shape(2) == (16, 8, 16)          # mma.m16n8k16 for .f16/.bf16
    assert layout.mma_shape(4) == (16, 8, 8)           # mma.m16n8k8 for .tf32
    assert layout.elems_per_reg(2) == 2 and layout.elems_per_reg(4) == 1
