"""The layout facts of numba_tc.layout, checked against the PTX ISA's definitions (no GPU).

ldmatrix is emulated in NumPy from its PTX ISA description (9.7.14.5.15): lane l gives the address
of row l % 8 of matrix l // 8; without .trans, lane t receives elements (t // 4, 2(t % 4) + {0,1})
of each matrix; with .trans, elements (2(t % 4) + {0,1}, t // 4). The kernels load fragments with
exactly these lane addresses, so if the emulation reproduces the fragment maps of mma.sync
(9.7.14.5.8), the kernels' fragments are right by construction.
"""
import itertools

import numpy as np
import pytest

from numba_tc import layout, tensorcore
pytestmark = pytest.mark.cpu


def _ldmatrix_x4(stored, rows_chunks, itemsize, trans):
    """Emulated ldmatrix.x4 on a stored tile of coordinates: returns regs[lane][j] = list of the
    elements (each a coordinate tuple) in register j of lane."""
    epc = layout.elems_per_chunk(itemsize)
    E = layout.elems_per_reg(itemsize)
    mats = []
    for j in range(4):
        rows = []
        for r in range(8):
            row, chunk = rows_chunks[8 * j + r]
            rows.append(stored[row][chunk * epc:(chunk + 1) * epc])
        mats.append(rows)                      # 8 rows x 8 b16 (= 4 tf32 words)
    regs = {}
    for t in range(32):
        for j in range(4):
            if not trans:
                regs[t, j] = [mats[j][t // 4][(t % 4) * E + e] for e in range(E)]
            else:
                assert itemsize == 2, "ldmatrix.trans moves 16-bit elements"
                regs[t, j] = [mats[j][2 * (t % 4) + e][t // 4] for e in range(2)]
    return regs


def _stored(rows, cols, coord):
    return [[coord(r, c) for c in range(cols)] for r in range(rows)]


@pytest.mark.parametrize("itemsize,kmajor", [(2, True), (2, False), (4, True)])
def test_ldmatrix_addresses_give_the_a_fragment(itemsize, kmajor):
    E = layout.elems_per_reg(itemsize)
    K = 8 * E                                   # k16 (16-bit) or k8 (tf32)
    if kmajor:                                  # stored [m][k]
        stored = _stored(16, K, lambda r, c: (r, c))
    else:                                       # stored [k][m]
        stored = _stored(K, 16, lambda r, c: (c, r))
    regs = _ldmatrix_x4(stored, [layout.ldsm_a(l, kmajor) for l in range(32)], itemsize, not kmajor)
    for lane, j, e in itertools.product(range(32), range(4), range(E)):
        assert regs[lane, j][e] == layout.a_fragment(lane, j, e, E), (lane, j, e)


@pytest.mark.parametrize("itemsize,kmajor", [(2, True), (2, False), (4, True)])
def test_ldmatrix_addresses_give_two_b_fragments(itemsize, kmajor):
    E = layout.elems_per_reg(itemsize)
    K = 8 * E
    if kmajor:                                  # stored [n][k], 16 columns of C
        stored = _stored(16, K, lambda r, c: (c, r))
    else:                                       # stored [k][n]
        stored = _stored(K, 16, lambda r, c: (r, c))
    regs = _ldmatrix_x4(stored, [layout.ldsm_b(l, kmajor) for l in range(32)], itemsize, not kmajor)
    for lane, j, e in itertools.product(range(32), range(4), range(E)):
        k, n = layout.b_fragment(lane, j % 2, e, E)
        assert regs[lane, j][e] == (k, n + 8 * (j // 2)), (lane, j, e)


def test_fragment_maps_cover_each_tile_once():
    for E in (1, 2):
        a = {layout.a_fragment(l, r, e, E) for l in range(32) for r in range(4) for e in range(E)}
        assert a == {(m, k) for m in range(16) for k in range(8 * E)}
        b = {layout.b_fragment(l, r, e, E) for l in range(32) for r in range(2) for e in range(E)}
        assert b == {(k, n) for k in range(8 * E) for n in range(8)}
    c = {layout.c_fragment(l, i) for l in range(32) for i in range(4)}
    assert c == {(m, n) for m in range(16) for n in range(8)}
    assert layout.mma_shape(2) == (16, 8, 16) and layout.mma_shape(4) == (16, 8, 8)


@pytest.mark.parametrize("cpr", [8, 16, 32])
def test_swizzle_is_a_bijection_within_each_row(cpr):
    for r in range(64):
        got = sorted(layout.chunk_offset(r, c, cpr, True) for c in range(cpr))
        assert got == [(r * cpr + c) * 16 for c in range(cpr)]


def _phase_banks(cfg, kmajor_a, which):
    """For every ldmatrix of one warp of rung ``cfg``: how many banks each 8-lane phase touches."""
    out = []
    cpr = (cfg.bk * 2 // 16) if kmajor_a else (cfg.bm * 2 // 16)
    ldsm = layout.ldsm_a if which == "a" else layout.ldsm_b
    _, _, ksteps = cfg.mma_tiles()
    for ks in range(ksteps):
        for i in range(cfg.wm // 16):
            row0, chunk0 = (16 * i, 2 * ks) if kmajor_a else (16 * ks, 2 * i)
            for phase in range(4):
                lanes = layout.ldsm_phase_banks(ldsm, kmajor_a, phase, row0, chunk0, cpr, cfg.swizzle)
                out.append(len({b for banks in lanes for b in banks}))
    return out


@pytest.mark.parametrize("kmajor", [True, False])
@pytest.mark.parametrize("which", ["a", "b"])
def test_swizzled_ldmatrix_phases_touch_32_banks_and_plain_ones_do_not(kmajor, which):
    swz = _phase_banks(tensorcore.RUNG3, kmajor, which)
    assert set(swz) == {32}, "rung 3: every phase conflict-free"
    plain = _phase_banks(tensorcore.RUNG2, kmajor, which)
    assert max(plain) == 4, "rung 2: rows 128 bytes apart share 4 banks (8-way conflict)"


def test_bank_of_an_address():
    assert [layout.bank(b) for b in (0, 4, 124, 128, 132)] == [0, 1, 31, 0, 1]
    assert np.all(np.diff([layout.bank(4 * w) for w in range(32)]) == 1)


@pytest.mark.parametrize("item", [4, 2])
@pytest.mark.parametrize("row_bytes", [128, 256])
def test_a_staged_epilogue_slot_holds_each_byte_once_and_reads_without_bank_conflicts(row_bytes, item):
    # a warp's 16 rows of an output box, float32 or 16-bit (hopper.staging._stager): every 16-byte chunk
    # of the rows at its own place in the slot, and each read of the lanes' column pairs
    # (c_fragment: 8 bytes by a half-warp, 4 bytes by a warp) on 32 distinct banks
    offs = {layout.source_offset(r, b, item) for r in range(layout.SOURCE_ROWS) for b in range(0, row_bytes, 2)}
    assert offs == set(range(0, layout.SOURCE_ROWS * row_bytes, 2))
    lanes = 16 if item == 4 else 32
    for jj, h, part in itertools.product(range(row_bytes // (8 * item)), range(2), range(32 // lanes)):
        banks = []
        for lane in range(lanes * part, lanes * part + lanes):
            r, c = layout.c_fragment(lane, 2 * h)
            off = layout.source_offset(r, item * (8 * jj + c), item)
            assert off % (2 * item) == 0
            banks += [layout.bank(off + w) for w in range(0, 2 * item, 4)]
        assert len(set(banks)) == 32, (jj, h, part)


@pytest.mark.parametrize("item,out_item,bn,mi", [(4, 2, 256, 1), (4, 4, 128, 1), (2, 2, 256, 1), (2, 4, 256, 1),
                                                 (2, 2, 192, 1), (2, 2, 128, 2)])
def test_the_staged_slots_of_a_consumer_are_disjoint_and_c_boxes_fit_where_they_were_read(item, out_item, bn, mi):
    # hopper.staging._stager's slots (layout.source_warp + source_box): each warp's slot of each box its
    # own bytes inside the consumer's region (hopper.staged_bytes); with a slot a box of C's
    # element size, warp w's slot of box t is output box t's rows 16w..16w+15, where the epilogue
    # stages C's box t (epi_boxes=0). (Two slots a warp overlapping the next warp's was a bug.)
    cols = layout.ROW_BYTES // out_item
    boxes = mi * (bn // cols)
    slot = layout.SOURCE_ROWS * cols * item
    for nslot in {2, boxes}:
        used = min(nslot, boxes)
        spans = [(layout.source_warp(w, slot, nslot, boxes) + layout.source_box(t, slot, nslot, boxes), w, t)
                 for w in range(layout.SOURCE_WARPS) for t in range(used)]
        starts = sorted(x for x, _, _ in spans)
        assert starts == list(range(0, layout.SOURCE_WARPS * used * slot, slot)), (nslot, starts)
        if nslot >= boxes and item == out_item:
            assert slot == layout.SOURCE_ROWS * layout.ROW_BYTES
            assert all(x == t * layout.OUT_BOX_BYTES + w * layout.SOURCE_ROWS * layout.ROW_BYTES for x, w, t in spans)
