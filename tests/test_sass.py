"""Every SIMT kernel compiles, offline, to an sm_90a cubin whose SASS we check (no GPU needed)."""
import re

import pytest
from numba import float32

from numba_tc import simt
from numba_tc.sass import compile_cubin

from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="the simulator has no compiler")
pytestmark = [pytestmark, pytest.mark.sass]
TILED = [v for v in simt.RUNGS if v.config is not None]


@pytest.fixture(scope="module")
def cubins():
    out = {}
    for v in TILED:
        cfg = v.config
        k = simt.tiled_kernel(cfg, False, False, True, True, True)
        out[v.name] = compile_cubin(k)
        print(f"{v.name}: {out[v.name].registers} registers, {out[v.name].spill_bytes} spill bytes")
    return out


@pytest.mark.parametrize("v", TILED, ids=lambda v: v.name)
def test_no_local_memory_and_fully_unrolled(cubins, v):
    c = cubins[v.name]
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    # jit.unrolled writes the k loop out: one FFMA per output per k step, in straight-line code,
    # once per K tile of the whole-tile loop's body (two with two buffers) and once more in the
    # checked loop
    assert c.count("FFMA") == (v.config.stages + 1) * v.config.bk * v.config.outputs_per_thread
    assert c.count("BAR.SYNC") >= 1


@pytest.mark.parametrize("v", TILED, ids=lambda v: v.name)
def test_whole_tile_loop_is_one_basic_block(cubins, v):
    """Interior blocks run whole K tiles (two per iteration with two buffers) with unchecked
    loads: one basic block holding their FMAs and global loads (ptxas interleaves them), no
    bounds checks."""
    cfg = v.config
    fma = cfg.stages * cfg.bk * cfg.outputs_per_thread
    ldg = cfg.stages * (cfg.bm + cfg.bn) * cfg.bk // (cfg.threads * cfg.vec)
    body = [b for b in cubins[v.name].loops()
            if sum("FFMA" in l for l in b) == fma and sum(" LDG" in l for l in b) == ldg
            and sum(" BRA " in l for l in b) == 1]
    # (the checked loop's scalar loads may be predicated rather than branched: it has the tests)
    assert any(sum(bool(re.search(r"\bISETP", l)) for l in b) <= 2 for b in body)   # loop test only


@pytest.mark.parametrize("name", ["vectorized", "warptile"])
def test_vector_rungs_use_16_byte_accesses(cubins, name):
    c = cubins[name]
    assert c.count("LDG.E.128") > 0          # load_f32x4 from global memory
    assert c.count("LDS.128") == c.count("LDS") > 0   # every fragment load is 16 bytes wide
    # C: 16-byte stores in rung 6; rung 7 stores 4 bytes at a time (so that ptxas may put each
    # accumulator in the register bank opposite its B operand) and adds split-K tiles with RED
    assert (c.count("STG.E.128") > 0) == (name == "vectorized")
    assert (c.count("REDG") > 0) == (name == "warptile")


def test_warptile_accumulators_avoid_register_bank_conflicts(cubins):
    """Two of an FFMA's sources read from one register bank (bank = register % 2) cost it a
    cycle unless one comes from the operand reuse cache. With 16-byte C stores every accumulator
    shared its B operand's bank (1434-1811 of 2048 FFMA conflicted); with 4-byte stores about 570."""
    body = next(b for b in cubins["warptile"].loops() if sum("FFMA" in l for l in b) == 2048)
    assert cubins["warptile"].bank_conflicts(body) < 2048 // 3


def test_blocktile2d_loads_global_memory_4_bytes_at_a_time(cubins):
    # rung 5 loads tiles with scalar LDG; (with the k loop unrolled, LLVM still merges a thread's
    # A reads across 4 k steps into LDS.128, at the cost of registers: compare the counts)
    assert cubins["blocktile2d"].count("LDG.E.128") == 0
    assert cubins["blocktile2d"].count("LDG.E") > 0
    assert cubins["blocktile2d"].registers > cubins["vectorized"].registers


def test_unaligned_operands_fall_back_to_scalar_loads():
    cfg = simt.RUNG7
    k = simt.tiled_kernel(cfg, False, False, False, False, False)
    c = compile_cubin(k)
    assert c.count("LDG.E.128") == 0 and c.count("STG.E.128") == 0 and c.local_memory_ops == 0


def test_linked_ptx_primitives_inline():
    """The linked-.cu path that the tensor-core rungs build on: NVRTC LTO-IR, inlined (no CALL)."""
    from numba import cuda
    from numba_tc.intrinsics import ptr
    from numba_tc.primitives import ldg_f32x4, stg_f32x4

    def copy4(x, y):
        r = cuda.local.array(4, float32)
        i = cuda.threadIdx.x * 4
        ldg_f32x4(ptr(r), ptr(x), i)
        stg_f32x4(ptr(y), i, ptr(r))

    c = compile_cubin(copy4, (float32[::1], float32[::1]))
    assert c.count("LDG.E.128") == 1 and c.count("STG.E.128") == 1
    assert c.count("CALL") == 0 and c.local_memory_ops == 0


def test_bank_conflict_count():
    from numba_tc.sass import Cubin
    lines = ["/*0010*/ FFMA R94, R12, R80, R16 ;",          # three even registers
             "/*0020*/ FFMA R95, R80.reuse, R13, R17 ;",    # R13, R17: one bank
             "/*0030*/ FFMA R95, R80.reuse, R13, R16 ;",    # two banks
             "/*0040*/ FFMA R95, -R80, R13.reuse, R18 ;",   # R80, R18: one bank
             "/*0050*/ FFMA R2, R4, 1.5, R7 ;"]             # an immediate: two banks
    assert Cubin.bank_conflicts(lines) == 3
