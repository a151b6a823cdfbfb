"""The streaming kernel's index arithmetic emulated on NumPy (issue 56): for the configuration
``quant.pick`` gives (and others), every lane of every warp of every block copies what the
kernel copies (``qgemm.part_of``, ``w_offset``, ``qformat.run_k``, ``scale_slot``,
``scale_row``, ``scale_group``), its words become A registers as the conversions
(``ptx/quant.cu``: ``dq_int4``, ``dq_int8``, ``lut_pairs4``) make them, x's words B registers,
and the mma.m16n8k16 fragment layouts (PTX ISA 9.7.14.5.8) place both; the group sums are
scaled at the group ends the kernel's constants say (``_Shape``), the warps' and blocks' sums
added in order and stored where ``out_of`` says. The result must be the float64 product of the
dequantized weight (``quant.reference``): an index wrong anywhere (a k16 step across two groups,
a second tile of x, a cluster rank's part) moves whole products. Words the kernel leaves
uncopied hold random bits here (stale shared memory). Round 2's layout (a thread's K of a chunk
one run of 16, so a k16 step spanned both groups of 32 of a chunk) fails 9 of these cases,
among them the three the H200 failed."""
import math

import numpy as np
import pytest
from numba import cuda

from numba_tc import qgemm, qproduct
from numba_tc import quant as Q
from numba_tc.qformat import LANES, TILE_N, run_k
from numba_tc.quant import _scale_values_np, levels_in

pytestmark = pytest.mark.cpu

NF4 = np.array(Q.NF4_LEVELS, np.float32)


@cuda.jit(device=True)
def nf4(code):
    return NF4[code]


USER = Q.user_format(nf4)
LANE = np.arange(LANES)
G_, T_ = LANE // 4, LANE % 4


def _registers(words, fmt, zrow, lev):
    """(32, 4, 2) values (register r, half) of one k16 step from each lane's words (32, 1 or 2
    uint32), as the conversions make them; ``zrow`` (32, 2): zero points of rows g, g + 8."""
    out = np.zeros((LANES, 4, 2))
    for r in range(4):
        for h in range(2):
            if fmt.bits == 8:                         # dq_int8: register r = bytes 2 (r % 2) + h of word r // 2
                q = (words[:, r // 2] >> (8 * (2 * (r % 2) + h))) & 0xFF
                out[:, r, h] = q.astype(np.float64) - 128
            elif fmt.user is not None:                # lut_pairs4: byte r, low nibble the low half
                q = (words[:, 0] >> (8 * r + 4 * h)) & 0xF
                out[:, r, h] = lev[q]
            else:                                     # dq_int4: nibble r (low half), r + 4 (high)
                q = (words[:, 0] >> (4 * r + 16 * h)) & 0xF
                out[:, r, h] = q.astype(np.float64) - zrow[:, r % 2]
    return out


def _mma(a, b0, b1):
    """C (32, 4) of m16n8k16 from A registers (32, 4, 2) and B words' values (32, 2) x2."""
    A = np.zeros((16, 16))
    B = np.zeros((16, 8))
    for r in range(4):
        for h in range(2):
            A[G_ + 8 * (r % 2), 2 * T_ + 8 * (r // 2) + h] = a[:, r, h]
    for h in range(2):
        B[2 * T_ + h, G_] = b0[:, h]
        B[2 * T_ + 8 + h, G_] = b1[:, h]
    C = A @ B
    return np.stack([C[G_ + 8 * (r >> 1), 2 * T_ + (r & 1)] for r in range(4)], axis=1)


def _x_words(x, m, k, rows, c, cend, q):
    """(32, XW, 2) values of each lane's words of chunk c of n8 tile rows (zeros past M, K, the part)."""
    out = np.zeros((LANES, q.XW, 2))
    if c >= cend:
        return out
    for e in range(q.XW):
        for h in range(2):
            kk = run_k(c, e // 4, T_, q.CK) + 2 * (e % 4) + h
            ok = (rows < m) & (kk < k)
            out[:, e, h] = np.where(ok, x[np.minimum(rows, m - 1), np.minimum(kk, k - 1)], 0.0)
    return out


def _warp(x, w, qw, cfg, nt, q, rank, warp, mt0, cpp, kcv, rng):
    """One warp's accumulators (32, NACC) after its part of K."""
    m, k = x.shape
    np_, kp, kc = qw.padded
    ntiles, n, groups = np_ // TILE_N, qw.n, qw.groups
    scales = _scale_values_np(qw.scales, qw.scale_dtype).ravel()
    zeros = None if qw.zeros is None else np.asarray(qw.zeros).astype(np.float64).ravel()
    lev = levels_in(qw.fmt, "bfloat16")
    cbeg, cend = qgemm.part_of(rank, warp, cfg.warps, cpp, kcv)
    acc = np.zeros((LANES, q.NACC))
    gacc = np.zeros((LANES, q.NACC))
    for c0 in range(cbeg, cend, q.U):
        at = np.zeros((LANES, q.NSC), np.int64)
        for i in range(q.NSC):
            tm, gi, h = qgemm.scale_slot(i, q.NGI)
            for ln, g in enumerate(G_.tolist()):
                at[ln, i] = (qgemm.scale_group(c0, gi, q.CK, q.group_k, groups) * n
                             + qgemm.scale_row(tm, h, mt0, g, n))
        scl = scales[at]
        zs = zeros[at] if zeros is not None else np.full(at.shape, float(qw.fmt.offset))
        for j in range(q.NSTEP):
            u, s = divmod(j, q.SPC)
            gi = j // q.GS if q.INNER else 0
            if s == 0:
                xw = [_x_words(x, m, k, 8 * jj + G_, c0 + u, cend, q) for jj in range(nt)]
                wr = []
                for tm in range(q.TM):
                    if c0 + u < cend and mt0 + tm < ntiles:
                        off = np.array([qgemm.w_offset(mt0 + tm, c0 + u, ln, kc) for ln in LANE]) // 4
                        wr.append(w[off[:, None] + np.arange(4)[None, :]])
                    else:                            # (not copied: stale bits)
                        wr.append(rng.integers(0, 2 ** 32, (LANES, 4), dtype=np.uint64).astype(np.uint32))
            for tm in range(q.TM):
                words = wr[tm][:, 2 * s:2 * s + 2] if qw.fmt.bits == 8 else wr[tm][:, s:s + 1]
                zrow = zs[:, [2 * (tm * q.NGI + gi), 2 * (tm * q.NGI + gi) + 1]]
                a = _registers(words.astype(np.int64), qw.fmt, zrow, lev)
                for jj in range(nt):
                    e = 4 * (tm * nt + jj)
                    gacc[:, e:e + 4] += _mma(a, xw[jj][:, 2 * s], xw[jj][:, 2 * s + 1])
            if (q.INNER and (j + 1) % q.GS == 0) or (not q.INNER and j == q.NSTEP - 1):
                for i in range(q.TM * nt):
                    tm = i // nt
                    for r in range(4):
                        acc[:, 4 * i + r] += scl[:, 2 * (tm * q.NGI + gi) + r // 2] * gacc[:, 4 * i + r]
                gacc[:] = 0
    return acc


def emulate(x, qw, cfg, nt, xv=16, seed=0):
    """The kernel's result (float64) for x (M, K) and a NumPy weight, block by block."""
    m, k = x.shape
    fmt = qw.fmt
    q = qgemm._Shape(cfg, fmt, "bfloat16", qw.scale_dtype, nt, qw.group_k, xv, qgemm.x_rows(m, nt))
    np_, kp, kc = qw.padded
    ntiles = np_ // TILE_N
    kcv = -(-k // fmt.chunk_k)
    cpp = qproduct._chunks_per_part(cfg, kcv)
    w = np.asarray(qw.packed).view(np.uint32)
    rng = np.random.default_rng(seed)
    out = np.full((m, qw.n), np.nan)
    for grp in range(-(-ntiles // cfg.tm)):
        mt0 = grp * cfg.tm
        total = np.zeros((LANES, q.NACC))
        for rank in range(cfg.split):                  # (blocks of a cluster, then their warps: in order)
            for warp in range(cfg.warps):
                total += _warp(x, w, qw, cfg, nt, q, rank, warp, mt0, cpp, kcv, rng)
        for i in range(q.NACC):
            for ln in range(LANES):
                r, c = qgemm.out_of(i, ln, nt, mt0)
                if r < m and c < qw.n:
                    assert np.isnan(out[r, c])
                    out[r, c] = total[ln, i]
    return out


def _case(fmt, group, m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    wt = (rng.standard_normal((n, k)) / math.sqrt(k)).astype(np.float32)
    qw = Q.quantize(wt, fmt, group)
    x = rng.standard_normal((m, k)).astype(np.float64)
    return x, qw


def _check(x, qw, cfg, nt, xv=16):
    got = emulate(x, qw, cfg, nt, xv)
    ref = x @ Q._weight64(qw, "bfloat16").T
    assert not np.isnan(got).any(), "outputs never stored"
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert err < 1e-12, f"{cfg} nt={nt}: rel err {err:.3g}"


# the round-2 failures on the H200 (group 32; x of 40 rows), and the shapes of every tile of x
PICKED = [(Q.INT4_ZP, 32, 1, 512, 1024), (Q.INT4_ZP, 32, 16, 130, 200), (Q.INT4, 32, 40, 384, 2048),
          (Q.INT4, 128, 1, 256, 1024), (Q.INT4, 128, 4, 272, 1024), (Q.INT4, 64, 33, 130, 360),
          (Q.INT4, 128, 64, 48, 512), (Q.INT8, 0, 3, 130, 360), (Q.INT8, 32, 16, 64, 320),
          (USER, 64, 2, 130, 360), (USER, 32, 9, 64, 256), (Q.INT4_ZP, 256, 5, 48, 1024)]


@pytest.mark.parametrize("case", PICKED, ids=lambda c: f"{c[0].name}-g{c[1]}-m{c[2]}-{c[3]}x{c[4]}")
def test_picked_configuration_computes_the_product(case):
    fmt, group, m, n, k = case
    x, qw = _case(fmt, group, m, n, k)
    cfg, nt = qproduct.pick(m, n, k, fmt, group_k=qw.group_k)
    _check(x, qw, cfg, nt, xv=16 if k % fmt.chunk_k == 0 else 0)


CONFIGS = [(1, 4, 1, 1, 4, 2), (2, 4, 2, 3, 4, 4), (4, 2, 1, 8, 4, 3), (1, 1, 4, 1, 8, 5), (2, 4, 4, 5, 2, 2)]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "tm{}-w{}-u{}-split{}-minb{}-st{}".format(*c))
@pytest.mark.parametrize("fmt,group", [(Q.INT4, 32), (Q.INT4_ZP, 64), (USER, 128), (Q.INT8, 0)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_any_configuration_computes_the_product(cfg, fmt, group):
    """Clusters of 1 to 8 blocks, ragged K and N, a stage across several groups or in one."""
    x, qw = _case(fmt, group, 5, 200, 1000, seed=1)
    _check(x, qw, qgemm.QConfig(*cfg), 1, xv=0)


def test_scale_words():
    """``qgemm.word_of``: the 4-byte word it names holds the element at the offset it gives, and
    the aligned arithmetic (a row's offset alone) is the general one's wherever it applies."""
    rng = np.random.default_rng(3)
    for item in (1, 2, 4):
        for n in (4, 8, 130, 300, 1000, 4096):
            for base in (4096, 4096 + 4, 4096 + 2 * (item == 2), 4096 + 1 + 2 * (item == 1)):
                if base % item:
                    continue
                for grp, row in rng.integers(0, [7, n], (40, 2)).tolist():
                    a, b = qgemm.word_of(base, item, n, grp, row, False)
                    assert a % 4 == 0 and a + b == base + item * (grp * n + row) and 0 <= b < 4
                    if base % 4 == 0 and (n * item) % 4 == 0:         # (words_aligned implies it)
                        assert qgemm.word_of(base, item, n, grp, row, True) == (a, b)
                    if item < 4 and qgemm.words_aligned(n, base, base):
                        assert base % 4 == 0 and (n * item) % 4 == 0
