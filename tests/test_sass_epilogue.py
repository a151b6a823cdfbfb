"""An epilogue compiles into each tensor-core ladder's top rung with no local memory and the same
main loop (offline sm_90a SASS, no GPU): bias + GELU, everything at once, a user's function
reading a device array."""
import pytest
from numba import cuda

from numba_tc import hopper, tensorcore
from numba_tc.epilogue import PLAIN, Epilogue, UserFunction, code_digest
from numba_tc.sass import compile_cubin

from conftest import SIM

pytestmark = [pytest.mark.skipif(SIM, reason="the simulator has no compiler"), pytest.mark.sass]


def _kernel(*args):
    """The Hopper kernel of ``hopper.KernelSpec(*args)``."""
    return hopper.wgmma_kernel(hopper.KernelSpec(*args))


@cuda.jit(device=True)
def _resid(acc, row, col, res, scale):
    return acc + scale * res[row, col]


_USER = UserFunction("resid", code_digest(_resid), (("array", "float32", 2), ("f32",)), _resid)
SPECS = {"plain": PLAIN, "bias_gelu": Epilogue(bias=("bfloat16", "col"), activation="gelu_tanh"),
         "bias_gelu_fast": Epilogue(bias=("bfloat16", "col"), activation="gelu_tanh", fast=True),
         "resid": Epilogue(user=_USER),
         "all": Epilogue(alpha=True, c=("float32", True), bias=("float32", "row"), activation="silu", user=_USER,
                         swap=True)}


@pytest.fixture(scope="module")
def hopper_cubins():
    return {name: compile_cubin(_kernel(hopper.RUNG7, "bfloat16", "bfloat16", False, True, True, True,
                                        spec)) for name, spec in SPECS.items()}


@pytest.mark.parametrize("name", ["bias_gelu", "bias_gelu_fast", "resid", "all"])
def test_hopper_epilogue_sass(hopper_cubins, name):
    c, plain = hopper_cubins[name], hopper_cubins["plain"]
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("HGMMA") == plain.count("HGMMA") and c.count("UTMASTG") == plain.count("UTMASTG")
    if name != "resid":
        assert c.count("MUFU") > plain.count("MUFU")     # the activation is there (tanh / exp)


def test_hopper_fast_gelu_is_one_mufu_per_element(hopper_cubins):
    # 16-bit inputs: tanh.approx, one MUFU.TANH per element, instead of ex2 and rcp (two MUFUs)
    fast, slow, plain = (hopper_cubins[n].count("MUFU") for n in ("bias_gelu_fast", "bias_gelu", "plain"))
    assert hopper_cubins["bias_gelu_fast"].count("MUFU.TANH") > 0
    assert 2 * (fast - plain) == slow - plain



def test_mma_tuned_user_epilogue_sass():
    k = tensorcore.tiled_kernel(tensorcore.RUNG5, "bfloat16", "float32", False, False, True, True, True, SPECS["all"])
    c = compile_cubin(k)
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("HMMA") == compile_cubin(tensorcore.tiled_kernel(
        tensorcore.RUNG5, "bfloat16", "float32", False, False, True, True, True)).count("HMMA")


@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_a_staged_epilogue_array_is_copied_ahead_and_read_from_shared_memory(hopper_cubins, out):
    # the residual read only at [row, col] (``Epilogue.staged``): its boxes copied by cp.async
    # (LDGSTS), each element pair read by one LDS.64 from the warp's slot, or (a 16-bit C, held)
    # loaded by one LDG.64 into the registers that hold it, one FFMA an element, no load per
    # element in the epilogue and no local memory (the element handed to the function stays in
    # a register). Held: the tile's last HELD_LEAD slices written out, each with a piece of the
    # reads (4 wgmma a slice)
    staged = Epilogue(user=UserFunction("resid", code_digest(_resid), (("array", "float32", 2, True), ("f32",)),
                                        _resid))
    cfg = hopper.staged_config(hopper.RUNG7, staged, out)
    assert bool(cfg.epi_held) == (out == "bfloat16")
    c = compile_cubin(_kernel(cfg, "bfloat16", out, False, True, True, True, staged))
    plain = hopper_cubins["plain"]
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("HGMMA") == plain.count("HGMMA") * (1 + (hopper.HELD_LEAD if cfg.epi_held else 0))
    assert c.count("LDGSTS") > 0 and c.count("LDG.E.64") == cfg.epi_held // 2
    assert c.count("LDS.64") + c.count("LDG.E.64") == cfg.acc_regs // 2 == c.count("FFMA") // 2   # a load a pair
    assert c.count("LD.E") == 0 and hopper_cubins["resid"].count("LD.E") == 128


@pytest.mark.parametrize("dt", ["bfloat16", "float16"])
def test_a_16bit_staged_epilogue_array_is_read_from_its_slots(hopper_cubins, dt):
    # a 16-bit residual: every box copied by cp.async into a slot of its own over the tile's last
    # HELD_LEAD slices, each element pair read by one 4-byte LDS and widened in registers; no
    # load in the epilogue, no registers held, no local memory
    spec = Epilogue(user=UserFunction("resid", code_digest(_resid), (("array", dt, 2, True), ("f32",)), _resid))
    cfg = hopper.staged_config(hopper.RUNG7, spec, "bfloat16")
    c = compile_cubin(_kernel(cfg, "bfloat16", "bfloat16", False, True, True, True, spec))
    plain = hopper_cubins["plain"]
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert cfg.epi_spread and c.count("HGMMA") == plain.count("HGMMA") * (1 + hopper.HELD_LEAD)
    pairs = [line for line in c.sass.splitlines() if "LDS " in line and "@!PT" not in line]
    assert c.count("LDGSTS") == 4 * 4 and len(pairs) == cfg.acc_regs // 2 == c.count("FFMA") // 2
    assert c.count("LD.E") == 0 and c.count("LDG.E.64") == 0


def test_a_row_major_c_is_staged_like_an_array(hopper_cubins):
    # beta * c with a stageable c (Epilogue.c's third field): copied into the slots, no load in
    # the epilogue, no local memory, the plain kernel's wgmma (and the tail's)
    spec = Epilogue(c=("bfloat16", False, True))
    cfg = hopper.staged_config(hopper.RUNG7, spec, "bfloat16")
    c = compile_cubin(_kernel(cfg, "bfloat16", "bfloat16", False, True, True, True, spec))
    assert cfg.epi_source and cfg.epi_boxes == 0
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("LDGSTS") > 0 and c.count("LD.E") == 0
    assert c.count("HGMMA") == hopper_cubins["plain"].count("HGMMA") * (1 + hopper.HELD_LEAD)
