"""numba_tc.quant on the host (issue 56): the packed layout is a bijection onto the padded weight
for every format, group and ragged shape; pack/unpack round trips; quantize follows its rule
(scales, zero points, nearest user value) and dequantize(quantize(w)) is within a step of w;
reference() is the float64 product of the dequantized weight; GPTQ and AWQ tensors read back the
codes they were made from; the errors. Also the same helpers in Numba's simulator, bit for bit
against NumPy (``test_simulator_quant``)."""
import ml_dtypes
import numpy as np
import pytest
from numba import cuda

from numba_tc import quant as Q
from numba_tc.qformat import ORDERS, element_of
from numba_tc.quant import padded

from conftest import run_in_simulator

pytestmark = pytest.mark.cpu

NF4 = np.array(Q.NF4_LEVELS, np.float32)


@cuda.jit(device=True)
def nf4(code):
    return NF4[code]


FORMATS = [Q.INT4, Q.INT4_ZP, Q.INT8, Q.user_format(nf4)]
SHAPES = [(16, 64), (37, 150), (5, 300), (48, 256)]          # ragged N and K, K below a group


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("group", [32, 128, 0])
def test_layout_is_a_bijection_onto_the_padded_weight(fmt, group):
    n, k = 37, 150
    np_, kp, kc = padded(fmt, n, k, group)
    per = 32 // fmt.bits
    wi = np.arange(np_ * kp // per)[:, None]
    r, c = element_of(wi, np.arange(per)[None, :], kc, ORDERS[fmt.order])
    flat = (r * kp + c).ravel()
    assert np.array_equal(np.sort(flat), np.arange(np_ * kp))


def test_one_lane_load_holds_its_mma_fragments():
    """Word s of lane (g, t) in tile 0, chunk 0: the A fragment of k16 step s in the permuted K
    order (thread t's K of step s are 32 (s // 2) + 8 t + 4 (s % 2) .. + 3: steps in spans of 32
    K, so a group of 32 holds whole steps, and a thread's K of a span are one piece of 8, 16
    bytes of x), rows g and g + 8 (magic order: register r = nibbles r, r + 4; register r's row
    is g + 8 (r % 2), its K 2 (r // 2) + half). Each step's K are 16 distinct values (the mma's k
    slots, permuted alike for A and B) within one span."""
    for lane in range(32):
        g, t = divmod(lane, 4)
        for s in range(4):
            wi = lane * 4 + s
            for j in range(8):
                n, k = element_of(wi, j, 1, 0)
                r, h = j % 4, j // 4
                assert (n, k) == (g + 8 * (r % 2), 32 * (s // 2) + 8 * t + 4 * (s % 2) + 2 * (r // 2) + h)
    for order, per, words in ((0, 8, 1), (1, 8, 1), (2, 4, 2)):       # a step's K over the four lanes t
        for s in range(4 // words):
            ks = {int(element_of(t * 4 + words * s + w, j, 1, order)[1]) for t in range(4) for w in range(words)
                  for j in range(per)}
            assert len(ks) == 16 and len({k // 32 for k in ks}) == 1


def test_pick_covers_k_and_fits():
    """Every picked configuration is valid, its parts cover K's chunks, every block of a cluster
    has a part, and few tiles take more parts of K than many."""
    from numba_tc import qproduct
    from numba_tc.qformat import INT4
    for k, n in ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672), (360, 130), (64, 16)):
        for m in (1, 4, 16, 32, 64):
            for group in (32, 128, k):
                cfg, nt = qproduct.pick(m, n, k, INT4, group_k=group)
                assert 8 * nt >= m
                kcv = -(-k // 64)
                cpp = qproduct._chunks_per_part(cfg, kcv)
                assert cpp % cfg.u == 0 and cpp * cfg.parts >= kcv
                assert cpp * cfg.warps * (cfg.split - 1) < kcv
                assert qproduct._scale_registers(cfg.tm, cfg.u, INT4, group) <= 16
    few = qproduct.pick(1, 4096, 14336, INT4)[0]
    many = qproduct.pick(1, 28672, 8192, INT4)[0]
    assert few.parts > many.parts


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("group", [32, 64, 128, 0])
def test_quantize_rule_and_round_trip(fmt, shape, group):
    rng = np.random.default_rng(hash((fmt.name, shape, group)) % 2**32)
    w = (rng.standard_normal(shape) * 0.05).astype(np.float32)
    w[0, : min(8, shape[1])] = 0.0                       # (a group may be all zeros)
    for sd in Q.SCALE_DTYPES:
        qw = Q.quantize(w, fmt, group, sd)
        codes, scales, zeros = Q.unpack(qw)
        assert codes.shape == shape and codes.max() <= fmt.qmax
        again = Q.pack(codes, scales, zeros, fmt, group, sd)
        assert np.array_equal(again.packed, qw.packed)
        s = Q._scale_values_np(scales, sd)
        gk = group or shape[1]
        sf = np.repeat(s.T, gk, axis=1)[:, :shape[1]]
        d = np.asarray(Q.dequantize(qw, "float32"), np.float64)
        if fmt.user is not None:
            lev = Q.levels_in(fmt, "bfloat16")
            step = np.max(np.diff(np.sort(lev))) / 2 + 2.0 ** -8
        else:       # (a zero point rounds to a whole step and the scale to its type: the ends clamp)
            step = 1.1 if fmt.zeros else 0.5
        assert np.all(np.abs(d - w) <= step * sf * (1 + 1e-6) + 1e-12)
        # the exact value of each code, and 16-bit dequantize rounds it once
        assert np.array_equal(d, Q._weight64(qw, "bfloat16").astype(np.float32))
        for dt, rnd in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16)):
            d16 = Q.dequantize(qw, dt, "bfloat16")
            assert np.array_equal(np.asarray(d16).astype(np.float32),
                                  Q._weight64(qw, "bfloat16").astype(np.float32).astype(rnd).astype(np.float32))


def test_zero_points_and_scales_follow_the_rule():
    w = np.array([[-1.0, 0.5, 2.0, 0.25] * 8], np.float32)           # one group of 32
    qw = Q.quantize(w, "int4_zp", 32, "float32")
    codes, scales, zeros = Q.unpack(qw)
    s = np.float32(3.0) / np.float32(15)
    assert scales[0, 0] == s and zeros[0, 0] == np.rint(np.float32(1.0) / s)
    assert np.array_equal(codes[0, :4], np.clip(np.rint(w[0, :4] / s) + zeros[0, 0], 0, 15))
    qs = Q.quantize(w, "int4", 32, "float32")
    assert Q.unpack(qs)[1][0, 0] == np.float32(2.0) / np.float32(7)


def test_reference_is_the_float64_product():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((40, 96)).astype(np.float32)
    x = rng.standard_normal((3, 96)).astype(ml_dtypes.bfloat16)
    for fmt in FORMATS:
        qw = Q.quantize(w, fmt, 32)
        ref = Q.reference(x, qw)
        assert np.allclose(ref, x.astype(np.float64) @ Q._weight64(qw, "bfloat16").T, rtol=0, atol=0)


def _pack_nibbles(codes, axis, order=tuple(range(8))):
    """codes (uint8) -> int32 words of 8 along ``axis`` (nibble order[i] = element i)."""
    c = np.moveaxis(codes.astype(np.int64), axis, -1)
    c = c.reshape(*c.shape[:-1], -1, 8)
    word = np.zeros(c.shape[:-1], np.int64)
    for i, o in enumerate(order):
        word |= c[..., i] << (4 * o)
    word = np.moveaxis(word, -1, axis)
    return word.astype(np.uint32).view(np.int32)


def test_gptq_and_awq_tensors_read_back():
    rng = np.random.default_rng(2)
    n, k, g = 64, 256, 128
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    z = rng.integers(0, 16, (k // g, n)).astype(np.uint8)
    s = (rng.random((k // g, n)) + 0.5).astype(np.float16)
    qweight = _pack_nibbles(codes.T, 0)                               # (K/8, N)
    qzeros = _pack_nibbles((z.astype(np.int64) - 1) & 0xF, 1)         # GPTQ v1: z - 1
    qw = Q.from_gptq(qweight, qzeros, s, g, sym=False)
    c2, s2, z2 = Q.unpack(qw)
    assert qw.fmt == Q.INT4_ZP and np.array_equal(c2, codes) and np.array_equal(z2, z) and np.array_equal(s2, s)
    awq_w = _pack_nibbles(codes.T, 1, (0, 4, 1, 5, 2, 6, 3, 7))        # (K, N/8)
    awq_z = _pack_nibbles(z, 1, (0, 4, 1, 5, 2, 6, 3, 7))
    qa = Q.from_awq(awq_w, awq_z, s, g)
    ca, _, za = Q.unpack(qa)
    assert np.array_equal(ca, codes) and np.array_equal(za, z)
    with pytest.raises(ValueError, match="not all 8"):
        Q.from_gptq(qweight, qzeros, s, g, sym=True)


def test_errors_name_the_problem():
    w = np.ones((16, 64), np.float32)
    with pytest.raises(ValueError, match="group must be one of"):
        Q.quantize(w, "int4", 100)
    with pytest.raises(ValueError, match="format"):
        Q.quantize(w, "int3")
    with pytest.raises(ValueError, match="scale_dtype"):
        Q.quantize(w, "int4", 32, "float64")
    with pytest.raises(ValueError, match="2-D"):
        Q.quantize(np.ones(5, np.float32))
    with pytest.raises(TypeError, match="device=True"):
        Q.user_format(lambda c: c)
    qw = Q.quantize(w, "int4", 32)
    c, s, z = Q.unpack(qw)
    with pytest.raises(ValueError, match="shape"):
        Q.pack(c, s[:1], None, "int4", 32)
    with pytest.raises(ValueError, match="zeros"):
        Q.pack(c, s, None, "int4_zp", 32)
    with pytest.raises(TypeError, match="GPU arrays"):
        Q.gemm(np.ones((1, 64), np.float16), qw)


def test_user_format_is_keyed_by_its_code():
    a, b = Q.user_format(nf4), Q.user_format(nf4)
    assert a == b and hash(a) == hash(b) and "nf4" in repr(a)
    assert np.allclose(a.levels(), Q.NF4_LEVELS)


@pytest.mark.sim
def test_simulator_helpers_equal_numpy_bit_for_bit():
    """quantize, pack, unpack and dequantize (three output types) in Numba's simulator give NumPy's
    bits, for every format (the NF4 user function too) on a ragged shape."""
    out = run_in_simulator(SIM_CODE, timeout=900)
    assert out.count("ok") == 8, out


SIM_CODE = """
import numpy as np
from numba import cuda
from numba_tc import quant as Q
NF4 = np.array(Q.NF4_LEVELS, np.float32)
@cuda.jit(device=True)
def nf4(code):
    return NF4[code]
w = (np.random.default_rng(0).standard_normal((20, 70)) * 0.1).astype(np.float32)
bits = lambda a, sd: np.asarray(a).view(np.uint32 if sd == "float32" else np.uint16)
for fmt in (Q.INT4, Q.INT4_ZP, Q.INT8, Q.user_format(nf4)):
    for group, sd in ((32, "bfloat16"), (0, "float16")):
        qw = Q.quantize(w, fmt, group, sd)
        g = Q.quantize(cuda.to_device(w), fmt, group, sd)
        assert np.array_equal(g.packed.copy_to_host().view(np.uint32), qw.packed), (fmt, group)
        assert np.array_equal(bits(g.scales.copy_to_host(), sd), bits(qw.scales, sd))
        if fmt.zeros:
            assert np.array_equal(g.zeros.copy_to_host(), qw.zeros)
        assert np.array_equal(Q.unpack(g)[0].copy_to_host(), Q.unpack(qw)[0])
        for od in ("float32", "bfloat16", "float16"):
            assert np.array_equal(bits(Q.dequantize(g, od).copy_to_host(), od), bits(Q.dequantize(qw, od), od)), od
        print("ok", fmt.name, group)
"""
