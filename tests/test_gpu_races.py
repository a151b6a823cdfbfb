"""On a GPU: race stress for the pipelined kernels. Every warp-specialised, persistent and
clustered Hopper configuration (and the mma.sync cp.async rings) runs many times on shapes that
wrap the ring (K slices >> stages) and the persistent schedule (more tiles than SMs), each launch
into its own NaN-poisoned output, back to back; the first result is checked element by element
against float64 and every other must equal it bit for bit.

``python tests/test_gpu_races.py --once`` runs the same set once each on a smaller shape, for
compute-sanitizer (benchmarks/check_races.sh: racecheck and synccheck)."""
import sys

import numpy as np
import pytest

import numba_tc
from numba_tc import hopper, verify

pytestmark = pytest.mark.gpu

REPS = 16
# M, N, K multiples of 8, of no tile; 2056 x 2312 in 128 x 256 tiles is 17 x 10 = 170 tiles (more
# than an H100's 132 SMs: the persistent grid wraps), K = 1096 is 18 slices of 64 (stages <= 6)
SHAPES = [(2056, 2312, 1096), (136, 264, 1352)]
SANITIZER_SHAPE = (264, 392, 584)


def _hopper_set():
    """(name, variant) of every Hopper configuration with a producer warpgroup, a persistent
    grid or a cluster, and the plain TMA ring."""
    out = [(v.name, v) for v in numba_tc.variants(ladder="wgmma") if v.name != "hopper"]
    for i, cfg in enumerate(hopper.RUNG7_CONFIGS):       # each of hopper's configurations alone
        out.append((f"hopper_cfg{i}", numba_tc.variant_from(cfg, f"race_hopper_cfg{i}")))
    return out


def _mma_set():
    return [(n, n) for n in ("pipelined", "mma_tuned")]


def _sm90():
    from numba import cuda
    return cuda.is_available() and tuple(cuda.get_current_device().compute_capability) == (9, 0)


def stress(variant, shape, reps, dtype="float16", check=True):
    """Run ``reps`` launches back to back on Numba device arrays, each into its own poisoned
    output; return (element-wise check of the first, indices of results that differ from it)."""
    from numba import cuda
    m, n, k = shape
    rng = np.random.default_rng(m + n + k)
    a, b = verify.random_operands(m, n, k, "float32", "NN", rng)
    a, b = a.astype(np.float16), b.astype(np.float16)
    da, db = cuda.to_device(a), cuda.to_device(b)
    outs = [cuda.to_device(np.full((m, n), np.nan, np.float32)) for _ in range(reps)]
    cuda.synchronize()
    for o in outs:
        numba_tc.gemm(da, db, variant=variant, out=o)
    cuda.synchronize()
    first = outs[0].copy_to_host()
    el = verify.elementwise(first, a, b, dtype) if check else None
    differ = [i for i, o in enumerate(outs[1:], 1) if not np.array_equal(o.copy_to_host().view(np.uint32),
                                                                          first.view(np.uint32))]
    return el, differ


@pytest.mark.parametrize("name,variant", _hopper_set(), ids=lambda x: x if isinstance(x, str) else "")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_hopper_pipelines_repeat_bitwise(name, variant, shape):
    if not _sm90():
        pytest.skip("wgmma needs an sm_90 GPU")
    el, differ = stress(variant, shape, REPS)
    assert el.ok, f"{name} {shape}: {el}"
    assert not differ, f"{name} {shape}: launches {differ} differ from the first"


@pytest.mark.parametrize("name,variant", _mma_set(), ids=lambda x: x if isinstance(x, str) else "")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_mma_pipelines_repeat_bitwise(name, variant, shape):
    el, differ = stress(variant, shape, REPS)
    assert el.ok, f"{name} {shape}: {el}"
    assert not differ, f"{name} {shape}: launches {differ} differ from the first"


def main(argv):
    """The same set, once each, on SANITIZER_SHAPE (compute-sanitizer is slow)."""
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    todo = _mma_set() + (_hopper_set() if _sm90() else [])
    bad = 0
    for name, v in todo:
        if only and only not in name:
            continue
        el, _ = stress(v, SANITIZER_SHAPE, 1)
        print(f"{name} {SANITIZER_SHAPE}: {el}", flush=True)
        bad += not el.ok
    return 1 if bad else 0


if __name__ == "__main__":
    if "--once" not in sys.argv:
        sys.exit("usage: python tests/test_gpu_races.py --once [--only NAME]")
    sys.exit(main(sys.argv))
