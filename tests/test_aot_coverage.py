"""Ahead of time means every kernel: whatever a variant's planner picks for a plain problem (no
epilogue) is in the list ``python -m numba_tc compile`` builds (``Variant.kernels``), so that after
it no call compiles. The planners run here against a faked driver (132 SMs, no GPU touched) over
a grid of problems: the dtypes each variant takes, the four layouts, a row- or column-major
output (the api computes a column-major C as C^T = B^T A^T), the input dtype or float32 out,
contiguous, padded and offset operands (rows 16-byte aligned or not, 16 mod 32 bytes apart, C's
column pairs aligned or not), and small, decoding, ragged, large and huge-K shapes.

Out of scope: plans with an epilogue (their kernels carry the epilogue's code, and compile on
first use; the fix-up of a split with an epilogue likewise), but for fp8 inputs, whose plain
call has its two scales (``epilogue.SCALED``); mixed e4m3 x e5m2 products."""
import itertools
import types

import pytest

import numba_tc
from numba_tc import driver
from numba_tc.arrays import Matrix
from numba_tc.checks import FP8_OUT
from numba_tc.epilogue import BLOCK_SCALED, SCALED
from numba_tc.layout import FP8, ITEMSIZE

from conftest import SIM

pytestmark = [pytest.mark.cpu,
              pytest.mark.skipif(SIM, reason="the simulator plans without the driver and builds no cubins")]

SHAPES = [(1, 4096, 4096), (1, 8192, 8192), (8, 4096, 11008), (1, 1024, 65536), (64, 256, 65536),
          (7, 9, 11), (128, 128, 128), (128, 128, 8192), (96, 5120, 5120),
          (256, 256, 131072), (1000, 1000, 32768), (1536, 1536, 1536), (4095, 4097, 4099),
          (4096, 4096, 4096), (128 * 66, 256, 1024), (8192, 8192, 8192), (65536, 256, 4096),
          (16, 32768, 256), (256, 4096, 65536),      # (tf32: B copied by the producer, whole and split)
          (4096, 32, 4096), (4096, 32, 65536), (2048, 192, 8192), (32, 4096, 65536), (4096, 64, 4096),
          (1536, 1536, 16384), (65536, 32, 512),      # (tf32: B^T A^T swapped, or A mn-major, whole and split)
          (2048, 5120, 5120), (2560, 2560, 16384),    # (the last round's tiles split: 128x256, 128x192)
          (16, 256, 65536), (32, 1024, 65536), (24, 8192, 4096),   # (decode swapped onto narrow tiles)
          (3072, 1536, 4096)]                         # (192x192 tiles, B multicast where its rows are slow)
# Each operand as (pad of the leading dimension, offset of the base in elements[, in bytes]):
# contiguous, rows made odd, the base one element off; rows also 16 mod 32 bytes apart (TMA
# reads them slowly: hopper multicasts B, and where both are so may copy one first); C's base
# 8 bytes off (pairs aligned, not 16 bytes)
ALIGNMENTS = list(itertools.product([(0, 0), (1, 0), (0, 1), "16 bytes"], [(0, 0), (1, 0), (0, 1), "16 bytes"],
                                    [(0, 0), (1, 0), (0, 0, 8)]))
LAYOUTS = list(itertools.product((False, True), repeat=3))      # A, B, C column-major


@pytest.fixture
def fake_driver(monkeypatch):
    """The driver's answers an H100 gives, without one: planners load kernels (here: nothing is
    compiled or loaded), and read SMs, occupancy and cluster residency."""
    monkeypatch.setattr(driver, "load", lambda kernel, dev: types.SimpleNamespace(kernel=kernel, device=dev,
                                                                                  max_smem=232448 - 1024))
    monkeypatch.setattr(driver, "sm_count", lambda dev: 132)
    monkeypatch.setattr(driver, "occupancy", lambda fn, block, smem=0: 3 if block <= 128 else 1)
    monkeypatch.setattr(driver, "max_active_clusters", lambda fn, block, smem, cluster: 132 // cluster)
    monkeypatch.setattr(driver, "capability", lambda dev: (9, 0))
    monkeypatch.setattr(driver, "smem_optin", lambda dev: 232448)
    monkeypatch.setattr(driver, "device_count", lambda: 1)
    monkeypatch.setattr(driver, "device_name", lambda dev: "NVIDIA H100 80GB HBM3")


def _operand(rows, cols, trans, dtype, align, base):
    if align == "16 bytes":                 # rows padded by 16 bytes: 16 mod 32 bytes apart
        align = (16 // ITEMSIZE[dtype], 0)
    pad, off = align[0], align[1]
    byte = align[2] if len(align) > 2 else off * ITEMSIZE[dtype]
    ld = (rows if trans else cols) + pad
    return Matrix(None, rows, cols, max(ld, 1), trans, dtype, base + byte)


def problems(dtype):
    """(A, B, C, swapped) as the api hands them to a planner (swapped for a column-major C), for
    inputs that run as ``dtype`` (tf32: float32 arrays)."""
    arrays = "float32" if dtype == "tf32" else dtype
    for (m, n, k), (ta, tb, tc), aligns in itertools.product(SHAPES, LAYOUTS, ALIGNMENTS):
        for out in FP8_OUT if dtype in FP8 else dict.fromkeys((arrays, "float32")):
            a = _operand(m, k, ta, arrays, aligns[0], 1 << 32)
            b = _operand(k, n, tb, arrays, aligns[1], 2 << 32)
            c = _operand(m, n, tc, out, aligns[2], 3 << 32)
            swapped = c.trans
            if swapped:                      # calls._Problem.plan
                a, b, c = b.transposed(), a.transposed(), c.transposed()
            yield a, b, c, swapped


_PLANNED: dict = {}


def planned(v, dtype):
    """{kernel key: a problem whose plan launches it} over ``problems(dtype)`` that ``v`` takes
    (the planners' answers do not change within a run: kept per variant and dtype)."""
    seen = _PLANNED.get((v.name, dtype))
    if seen is None:
        seen = _PLANNED[(v.name, dtype)] = {}
        for a, b, c, swapped in problems(dtype):
            if v.refuses(a, b, c):
                continue
            # fp8: per-tensor scales, and block-wise ones (whose output is row-major)
            for epi in ((SCALED,) + (BLOCK_SCALED,) * (not swapped) if dtype in FP8 else (None,)):
                for st in v.plan(a, b, c, 0, **({"epi": epi} if epi else {})):
                    seen.setdefault(st.kernel.key, (a, b, c))
    return seen


def missing(v, kernels=None):
    """Planned keys the list lacks (the lists of all the variant's dtypes together)."""
    kernels = kernels or v.kernels
    have = {k.key for dt in v.dtypes for k in kernels(dt)}
    out = {}
    for dt in v.dtypes:
        for key, example in planned(v, dt).items():
            if key not in have:
                out.setdefault(key, example)
    return out


def _describe(miss):
    return "\n".join(f"  {key}\n    e.g. A={a.rows}x{a.cols} ld={a.ld} trans={a.trans} {a.dtype}, "
                     f"B={b.rows}x{b.cols} ld={b.ld} trans={b.trans}, C ld={c.ld} ptr%16={c.ptr % 16} {c.dtype}"
                     for key, (a, b, c) in list(miss.items())[:8]) + (f"\n  ... {len(miss)} in all" if len(miss) > 8 else "")


@pytest.mark.parametrize("name", [v.name for v in numba_tc.variants()])
def test_every_kernel_the_planner_picks_is_compiled_ahead_of_time(name, fake_driver):
    v = numba_tc.get_variant(name)
    miss = missing(v)
    assert not miss, f"{name} plans kernels its ahead-of-time list lacks:\n{_describe(miss)}"
    for dt in v.dtypes:          # and the list holds nothing the planner never picks
        unused = [k.name for k in v.kernels(dt) if k.key not in planned(v, dt)]
        assert not unused, f"{name} lists {len(unused)} kernels no {dt} problem here plans: {unused[:4]}"


def test_float32_problems_reach_the_tf32_kernels(fake_driver):
    """``aot.precompile`` compiles the tensor-core ladder for "tf32": the kernels float32 arrays
    run there (allow_tf32=True, or a named mma variant)."""
    v = numba_tc.get_variant("mma_tuned")
    keys = set(planned(v, "tf32"))
    assert keys and all("'tf32'" in key for key in keys) and keys <= {k.key for k in v.kernels("tf32")}


@pytest.mark.parametrize("name", [v.name for v in numba_tc.variants()])
def test_lists_hold_no_duplicates(name):
    v = numba_tc.get_variant(name)
    for dt in v.dtypes:
        keys = [k.key for k in v.kernels(dt)]
        assert len(keys) == len(set(keys))


def test_the_launches_after_the_first_of_a_plan_are_dependents(fake_driver):
    """In a plan of several launches, the product after its copies and the fix-up after the
    product are launched as programmatic dependents of the launch before (each starts early and
    waits in the kernel for what that one wrote, so its end implies that one's); the first
    launch, a copy after a copy (which does not wait: the product's wait would not cover the
    first) and a plan of one launch, as usual (after all the stream's work)."""
    from numba_tc import api
    v = api.get_variant("hopper")
    # tf32 with A column-major: B copied k-major (with A row-major the product is swapped: one
    # launch); then split-K; rows TMA cannot read; one launch
    cases = [((2048, 2048, 2048, 0, True), "float32", ["transpose b", "128x"]),
             ((64, 256, 65536, 0, False), "bfloat16", ["split-K", "fixup"]),
             ((4095, 4097, 4099, 1, False), "bfloat16", ["repack a", "repack b", "192x192"]),
             ((4096, 4096, 4096, 0, False), "bfloat16", ["128x"]),
             ((2048, 5120, 5120, 0, False), "bfloat16", ["last 56 tiles split-K 2", "tail fixup"])]
    for (m, n, k, pad, ta), dt, labels in cases:
        a = Matrix(None, m, k, (m if ta else k) + pad, ta, dt, 1 << 32)
        b = Matrix(None, k, n, n + pad, False, dt, 2 << 32)
        steps = v.plan(a, b, Matrix(None, m, n, n, False, "float32", 3 << 32), 0)
        assert len(steps) == len(labels) and all(w in st.label for st, w in zip(steps, labels)), \
            [st.label for st in steps]
        assert [st.dependent for st in steps] == [i > 0 and "repack" not in st.label and "transpose" not in st.label
                                                  for i, st in enumerate(steps)], labels


def test_slow_rows_are_copied_where_the_model_says_the_copy_pays(fake_driver, monkeypatch):
    """Both operands' rows 16 mod 32 bytes apart: the smaller is copied to whole 128-byte rows
    first where what it saves repays the pass: its full rounds at full speed, and once A's rows
    are fast the 192x192 cluster tile, whose rounds fill the GPU better (as measured:
    results/ab_slow_rows_h100.log, ab_slow_a_tiles_h100.log, ab_eff192_nn_h100.log); else both are read as they lie, B
    multicast on tiles of ``SLOW_A_TILES``."""
    from numba_tc import api, hopper
    v = api.get_variant("hopper")

    def labels(m, n, k):
        ops = [_operand(r, c, False, "bfloat16", (0, 0), base << 32) for r, c, base in ((m, k, 1), (k, n, 2), (m, n, 3))]
        return [st.label for st in v.plan(*ops, 0)]
    cases = [((3000, 3000, 3000), ["repack a"]), ((2056, 4104, 3000), ["repack a"]), ((5000, 3000, 7000), ["repack b"]),
             ((4104, 4104, 4104), ["repack a"]), ((1000, 1000, 1000), []), ((3000, 5000, 2000), [])]
    for shape, copies in cases:
        got = labels(*shape)
        assert got[:-1] == copies and ("cluster 2" in got[-1]) == (copies != ["repack b"]), got
        assert ("192x192" in got[-1]) == (copies == ["repack a"]), got
    with hopper.using(slow_rows_copy=False):
        assert labels(4104, 4104, 4104) == ["128x256 cluster 2"]


def test_a_batched_tile_pays_for_each_matrix_padded_rows(fake_driver):
    """The batched kernel's tile by the cost model over its real tile count: each matrix's rows
    padded to the tile, then stacked (as measured: results/tune_batched_padded_h100.log). 1000
    rows are 8 x 128 but 6 x 192 = 1152, 2056 are 17 x 128 but 11 x 192."""
    from numba_tc import api
    from numba_tc.batch import Batch
    v = api.get_variant("hopper")

    def label(count, m, n, k):
        ops = [_operand(r, c, False, "bfloat16", (0, 0), base << 32) for r, c, base in ((m, k, 1), (k, n, 2), (m, n, 3))]
        return "; ".join(st.label for st in v.plan(*ops, 0, batch=Batch(count, m * k, k * n, m * n)))
    assert label(2, 1536, 1536, 1024) == "192x192 batched 2"
    assert label(3, 2056, 3000, 1024) == "192x192 batched 3"
    assert label(3, 1000, 1536, 520).startswith("128x")
    assert label(2, 2056, 512, 1024) == "64x256 batched 2"


def test_decode_products_swap_onto_narrow_tiles(fake_driver, monkeypatch):
    """At most ``SWAP_ROWS`` rows of a row-major A, 16-bit: C^T = B^T A^T on the narrowest 64 x bn
    tile that holds the rows, split so that the units fill the grid's rounds (as measured:
    results/tune_swap_h100.log, ab_swap_heldout_h100.log); more rows, a column-major A, B's rows slow or
    tf32 inputs keep the other tiles, and ``SWAP`` False turns it off."""
    from numba_tc import api, hopper
    v = api.get_variant("hopper")

    def label(m, n, k, ta=False, pad=0, dt="bfloat16"):
        a = _operand(m, k, ta, dt, (0, 0), 1 << 32)
        b = _operand(k, n, False, dt, (pad, 0), 2 << 32)
        return "; ".join(st.label for st in v.plan(a, b, _operand(m, n, False, dt, (0, 0), 3 << 32), 0))
    assert label(1, 8192, 8192) == "64x8 swapped"                       # 128 tiles: one round
    assert label(32, 8192, 8192) == "64x32 swapped"
    assert label(16, 5120, 5120).startswith("64x16 swapped split-K 3")  # 80 tiles: 240 units
    assert label(8, 4096, 11008).startswith("64x8 swapped split-K 2")   # 64 tiles: 128 units
    assert label(8, 256, 40) == "64x8 swapped"                          # K of one slice: no split
    for kw in (dict(m=33), dict(ta=True), dict(pad=8), dict(dt="float32")):
        assert "swapped" not in label(**{"m": 8, "n": 8192, "k": 8192, **kw}), kw
    forced = numba_tc.variant_from(hopper.SWAP_CONFIGS[1], "swap_forced", splits=2)   # (tune_split's)
    ops = [_operand(r, c, False, "bfloat16", (0, 0), base << 32) for r, c, base in ((4, 512, 1), (512, 8192, 2), (4, 8192, 3))]
    assert [st.label for st in forced.plan(*ops, 0)] == ["64x16 swapped split-K 2", "fixup"]
    with hopper.using(swap=False):
        assert "swapped" not in label(1, 8192, 8192)
    # the splits fill the rounds: whole ones where they can, the fewest within SWAP_FILL
    cfg = hopper.SWAP_CONFIGS[0]
    assert [hopper.swap_splits(cfg, n, 8, 4096, 132) for n in (8192, 4096, 5120, 11008)] == [1, 2, 3, 3]
