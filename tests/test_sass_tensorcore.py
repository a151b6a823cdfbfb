"""Every tensor-core rung compiles offline to an sm_90a cubin; its SASS shows the instructions each
rung is about, and the linked PTX primitives inline with no local memory (no GPU needed)."""
import pytest

from numba_tc import tensorcore as tc
from numba_tc.sass import compile_cubin

from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="the simulator has no compiler")
pytestmark = [pytestmark, pytest.mark.sass]
TILED = [v for v in tc.RUNGS if v.config is not None]


def _compile(cfg, dtype="bfloat16", ta=False, tb=True, aligned=True):
    k = tc.tiled_kernel(cfg, dtype, "float32" if dtype == "tf32" else dtype, ta, tb, aligned, aligned, aligned)
    return compile_cubin(k)


@pytest.fixture(scope="module")
def cubins():
    out = {v.name: _compile(v.config) for v in TILED}
    out["mma_naive"] = compile_cubin(tc.naive_kernel("bfloat16", "bfloat16", False, True))
    for name, c in out.items():
        print(f"{name}: {c.registers} registers, {c.spill_bytes} spill bytes")
    return out


@pytest.mark.parametrize("name", [v.name for v in tc.RUNGS])
def test_no_local_memory_no_spills_no_calls(cubins, name):
    c = cubins[name]
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    # every primitive inlined under LTO: no call between the first and the last HMMA (the few
    # CALLs in the prologue are the 64-bit integer division routine for the grid arithmetic)
    lines = c.sass.splitlines()
    hmma = [i for i, l in enumerate(lines) if "HMMA" in l]
    assert hmma and not any("CALL" in l for l in lines[hmma[0]:hmma[-1]])


@pytest.mark.parametrize("v", TILED, ids=lambda v: v.name)
def test_tiled_rungs_use_ldmatrix_and_mma(cubins, v):
    c = cubins[v.name]
    mi, ni, ksteps = v.config.mma_tiles()
    pf = v.config.frag_prefetch       # the main loop twice (whole slices, checked slices), and
    loops = 2 if pf else 1            # k-step 0's fragments loaded once more before it
    assert c.count("HMMA.16816.F32.BF16") == loops * mi * ni * ksteps    # a k slice, fully unrolled
    assert c.count("LDSM.16.M88.4") == (loops * ksteps + pf) * (mi + ni // 2)   # x4 loads: A, B in pairs
    if v.config.async_copy:
        assert c.count("LDGSTS") > 0 and c.count("LDG") == 0      # cp.async, no register round trip
    else:
        assert c.count("LDGSTS") == 0 and c.count("LDG.E.128") > 0 and c.count("STS.128") > 0


def test_prefetch_loop_interleaves_copies_with_mma(cubins):
    """With fragment prefetch, the loop over whole slices is one basic block holding a slice's
    mma and cp.async (ptxas can interleave them); the checked copy's branches would split it."""
    cfg = tc.RUNG5
    assert cfg.frag_prefetch
    mi, ni, ksteps = cfg.mma_tiles()
    chunks = (cfg.bm + cfg.bn) * cfg.bk * 2 // 16 // cfg.threads      # 16-byte copies per thread
    blocks = [b for b in cubins["mma_tuned"].loops() if sum(" BRA " in l for l in b) == 1]
    assert any(sum("HMMA" in l for l in b) == mi * ni * ksteps and sum("LDGSTS" in l for l in b) == chunks
               and sum("BAR.SYNC" in l for l in b) == 1 for b in blocks)


def test_naive_rung_reads_fragments_from_global_memory(cubins):
    c = cubins["mma_naive"]
    assert c.count("HMMA.16816.F32.BF16") == 2 and c.count("LDSM") == 0 and c.count("LDG.E.U16") > 0


def test_precisions_and_transposed_operands():
    cfg = tc.RUNG4
    fp16 = _compile(cfg, "float16", ta=True, tb=False)          # both operands mn-major
    assert fp16.count("HMMA.16816.F32") > 0 and fp16.count("HMMA.16816.F32.BF16") == 0
    assert fp16.count("LDSM.16.MT88.4") > 0 and fp16.count("LDSM.16.M88.4") == 0   # ldmatrix.trans
    tf32 = _compile(cfg, "tf32")
    assert tf32.count("HMMA.1688.F32.TF32") > 0 and tf32.count("LDSM") > 0
    for c in (fp16, tf32):
        assert c.local_memory_ops == 0 and c.spill_bytes == 0


def test_unaligned_operands_copy_element_by_element():
    c = _compile(tc.RUNG4, aligned=False)
    assert c.count("LDGSTS") == 0 and c.count("LDG.E.U16") > 0 and c.local_memory_ops == 0


def test_readme_example_compiles_to_one_hmma_in_registers():
    from numba import float32, uint32
    from numba_tc.examples import mma_16x8x16
    c = compile_cubin(mma_16x8x16.py_func, (uint32[::1], uint32[::1], float32[::1]))
    assert c.count("HMMA.16816.F32") == 1 and c.count("LDSM") == 2 and c.local_memory_ops == 0


def test_ceiling_microkernel_is_register_only():
    """The mma.sync ceiling kernel: CHAINS independent HMMA chains, no memory traffic in the loop."""
    from numba_tc import ceiling
    c = compile_cubin(ceiling.ceiling_kernel("bfloat16"))
    assert c.count("HMMA") >= ceiling.CHAINS and c.local_memory_ops == 0
    lines = c.sass.splitlines()
    hmma = [i for i, l in enumerate(lines) if "HMMA" in l]
    assert not any(op in l for l in lines[hmma[0]:hmma[-1]] for op in ("LDG", "LDS", "STG", "STS"))
