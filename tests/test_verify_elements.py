"""The element-wise check of ``verify`` (no GPU): one wrong element of a 16-bit problem fails and
is named; correct results, accumulated as a GPU may accumulate them (rounding or truncating fp32
adds, any order), pass; fp32 inputs on tensor cores are read as ``cvt.rna.tf32`` rounds them."""
import numpy as np
import pytest

from numba_tc import verify
from numba_tc.arrays import np_dtype

pytestmark = pytest.mark.cpu


def _trunc32(x):
    """float64 -> float32 rounding toward zero (a tensor core's truncating alignment)."""
    y = x.astype(np.float32)
    over = np.abs(y.astype(np.float64)) > np.abs(x)
    y[over] = np.nextafter(y[over], np.float32(0))
    return y


def _accumulate(a, b, mode):
    """C = A @ B in fp32, one product at a time in K order: "nearest" or "truncate" per add;
    "blocks": k16 blocks summed exactly then added with truncation (an mma's k-step)."""
    A, B = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros((A.shape[0], B.shape[1]), np.float32)
    step = 16 if mode == "blocks" else 1
    for k0 in range(0, A.shape[1], step):
        p = A[:, k0:k0 + step] @ B[k0:k0 + step]
        s = acc.astype(np.float64) + p
        acc = s.astype(np.float32) if mode == "nearest" else _trunc32(s)
    return acc


def _problem(m, n, k, dtype, seed=0):
    return verify.random_operands(m, n, k, dtype, "NN", np.random.default_rng(seed))


@pytest.mark.parametrize("mode", ["nearest", "truncate", "blocks"])
@pytest.mark.parametrize("k", [1, 7, 200, 4096])
@pytest.mark.parametrize("dtype,out", [("bfloat16", "float32"), ("bfloat16", "bfloat16"),
                                       ("float16", "float16"), ("float32", "float32")])
def test_correct_fp32_accumulation_passes(mode, k, dtype, out):
    a, b = _problem(48, 40, k, dtype, seed=k)
    c = _accumulate(a, b, mode).astype(np_dtype(out))
    r = verify.elementwise(c, a, b, dtype, out)
    assert r.ok, r


def test_one_wrong_element_of_a_16_bit_problem_fails_and_is_named():
    a, b = _problem(120, 72, 256, "bfloat16")
    c = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert verify.elementwise(c, a, b, "bfloat16").ok
    for wrong in (0.0, c[37, 61] * 1.01, c[37, 61] + 0.05, np.nan):
        bad = c.copy()
        bad[37, 61] = wrong
        r = verify.elementwise(bad, a, b, "bfloat16")
        assert not r.ok and r.bad == 1 and (r.row, r.col) == (37, 61), r
        s = str(r)
        assert "row 37" in s and "col 61" in s and "bound" in s and "value" in s
        if not np.isnan(wrong) and wrong != 0:    # the Frobenius summary alone lets these through
            ref = a.astype(np.float64) @ b.astype(np.float64)
            assert verify.rel_error(bad, ref) < verify.TOLERANCE["bfloat16"]


def test_one_missing_product_fails_at_k_4096():
    """A kernel that drops one product (one element of one K step) is caught even at K = 4096."""
    a, b = _problem(16, 16, 4096, "bfloat16", seed=3)
    A, B = a.astype(np.float64), b.astype(np.float64)
    c = (A @ B).astype(np.float32)
    k = int(np.argmax(np.abs(A[5] * B[:, 9]) > 0.64))     # an ordinary product, |a b| > 0.64
    bad = c.copy()
    bad[5, 9] = np.float32(c[5, 9] - A[5, k] * B[k, 9])
    r = verify.elementwise(bad, a, b, "bfloat16")
    assert not r.ok and (r.row, r.col) == (5, 9), r


def test_zeroing_the_ragged_corner_of_a_hopper_problem_fails():
    """The issue's case: a 56x8 corner zeroed passed the Frobenius tolerance of 16-bit inputs."""
    m, n, k = 184, 264, 136
    a, b = _problem(m, n, k, "bfloat16", seed=1)
    c = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    c[-56:, -8:] = 0
    r = verify.elementwise(c, a, b, "bfloat16")
    assert not r.ok and r.bad >= 56 * 8 - 1 and r.row >= m - 56 and r.col >= n - 8


def test_16_bit_output_rounding_is_allowed_and_a_flipped_low_bit_twice_over_is_not():
    a, b = _problem(64, 64, 512, "float16", seed=2)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    c = exact.astype(np.float32).astype(np.float16)
    assert verify.elementwise(c, a, b, "float16", "float16").ok
    bad = c.copy()
    i = np.unravel_index(np.argmax(np.abs(exact)), exact.shape)
    bad[i] = np.nextafter(np.nextafter(bad[i], np.float16(np.inf)), np.float16(np.inf))
    bad[i] = np.nextafter(bad[i], np.float16(np.inf))
    r = verify.elementwise(bad, a, b, "float16", "float16")
    assert not r.ok and (r.row, r.col) == tuple(map(int, i)), r


def test_tf32_inputs_are_read_rounded_to_nearest_ties_away():
    one = np.float32(1.0)
    ulp = 2.0 ** -10
    x = np.array([1 + ulp / 2, 1 + ulp / 2 - 2 ** -23, -(1 + ulp / 2), 1 + 3 * ulp / 2, np.inf], np.float32)
    got = verify.as_read(x, "tf32")
    assert list(got) == [1 + ulp, 1.0, -(1 + ulp), 1 + 2 * ulp, np.inf]
    assert verify.as_read(np.array([one]), "float32")[0] == 1.0
    # a tf32 product checked element-wise: exact fp32 inputs would be off by a tf32 rounding
    a, b = _problem(32, 24, 300, "float32", seed=4)
    c_tf32 = (verify.as_read(a, "tf32") @ verify.as_read(b, "tf32")).astype(np.float32)
    assert verify.elementwise(c_tf32, a, b, "tf32").ok
    assert not verify.elementwise(c_tf32, a, b, "float32").ok


def test_tf32_as_wgmma_reads_it_rounds_ties_to_even():
    ulp = 2.0 ** -10
    x = np.array([1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2 ** -20, -(1 + ulp / 2), np.inf], np.float32)
    assert list(verify.as_read(x, "tf32_rn")) == [1.0, 1 + 2 * ulp, 1 + ulp, -1.0, np.inf]
    assert verify.tf32_reads("hopper") == "tf32_rn" and verify.tf32_reads("mma_tuned") == "tf32"


def test_check_result_needs_both_measures():
    bad = verify.ElementCheck(1, 2, 3, 1.5, 1.0, 0.01, 1e-6)
    r = verify.CheckResult("v", 4, 4, 4, "NN", "bfloat16", 1e-4, 1e-2, bad)
    assert not r.ok and "row 2, col 3" in str(r)
    assert verify.CheckResult("v", 4, 4, 4, "NN", "bfloat16", 1e-4, 1e-2, verify.ElementCheck(0)).ok
    assert not verify.CheckResult("v", 4, 4, 4, "NN", "bfloat16", 2e-2, 1e-2, verify.ElementCheck(0)).ok


def test_bounds_grow_like_sqrt_k_and_the_worst_case_like_k():
    assert verify.accumulation_tolerance(4 * 1024) == pytest.approx(2 * verify.accumulation_tolerance(1024))
    assert verify.accumulation_tolerance(1024, worst_case=True) > 8 * verify.accumulation_tolerance(1024)
    # inputs of one sign: partial sums grow like k, and the worst-case bound is the one to use
    rng = np.random.default_rng(5)
    a = rng.random((8, 4096), dtype=np.float32).astype(np_dtype("bfloat16"))
    b = rng.random((4096, 8), dtype=np.float32).astype(np_dtype("bfloat16"))
    c = _accumulate(a, b, "truncate")
    assert verify.elementwise(c, a, b, "bfloat16", acc_tol=verify.accumulation_tolerance(4096, True)).ok
