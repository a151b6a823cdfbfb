"""On a GPU: every output layout (row- and column-major ``out``) on every array kind (NumPy C and
F order, Numba, CuPy, torch), into a NaN-poisoned ``out`` of that kind, one rung of each ladder,
fp32 and 16-bit outputs, each checked element by element (``verify.check(kind=...)``)."""
import pytest

from numba_tc import verify

pytestmark = pytest.mark.gpu

# M, N, K multiples of 8 (TMA's 16-byte rows in every layout), multiples of no tile
SHAPES = [(328, 200, 264), (8, 24, 16)]
CASES = [  # (variant, input dtype, output dtypes)
    ("warptile", "float32", ("float32",)),
    ("mma_tuned", "float16", ("float32", "float16")),
    ("mma_tuned", "bfloat16", ("float32", "bfloat16")),
    ("pipelined", "tf32", ("float32",)),
    ("hopper", "float16", ("float32", "float16")),
    ("hopper", "bfloat16", ("float32", "bfloat16")),
    ("hopper", "tf32", ("float32",)),
]


def _sm90():
    from numba import cuda
    return cuda.is_available() and tuple(cuda.get_current_device().compute_capability) == (9, 0)


def _params():
    for variant, dtype, outs in CASES:
        for kind in verify.KINDS:
            if dtype == "bfloat16" and kind in ("numba", "cupy"):
                continue                      # Numba and CuPy have no bfloat16 arrays
            for out_dtype in outs:
                yield pytest.param(variant, dtype, out_dtype, kind, id=f"{variant}-{dtype}-{out_dtype}-{kind}")


@pytest.mark.parametrize("variant,dtype,out_dtype,kind", list(_params()))
@pytest.mark.parametrize("layout", ["NN", "TT", "NT"])
def test_every_output_layout_on_every_kind(variant, dtype, out_dtype, kind, layout):
    if kind in ("cupy", "torch"):
        pytest.importorskip(kind)
    if variant == "hopper" and not _sm90():
        pytest.skip("wgmma needs an sm_90 GPU")
    for m, n, k in SHAPES:
        for out_layout in ("C", "F"):
            r = verify.check(variant, m, n, k, layout=layout, dtype=dtype, out_dtype=out_dtype,
                             out_layout=out_layout, kind=kind)
            assert r.ok, r
