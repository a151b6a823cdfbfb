"""The quantized products' kernels (issue 56) compile offline for sm_90a: the streaming kernel of
each x height that ``quant.pick`` chooses, every format, keeps its fragments in registers (no
local memory, no spills, registers for a block), loads the packed weight 16 bytes a thread
(``LDG.E.NA.128``, L1 bypassed) and x 8 bytes (``LDG.E.64``), runs the mma count its
configuration says (a whole iteration and a partial one) with the conversions inlined (no CALL
between the first and the last HMMA); the user's table lookups are shared-memory loads; the
dequantizing pass stores 8 bytes a row run."""
import numpy as np
import pytest
from numba import cuda

from numba_tc import qformat, qgemm, quant
from numba_tc.sass import compile_cubin

from conftest import SIM

pytestmark = [pytest.mark.skipif(SIM, reason="the simulator has no compiler"), pytest.mark.sass]

NF4 = np.array(qformat.NF4_LEVELS, np.float32)


@cuda.jit(device=True)
def nf4(code):
    return NF4[code]


USER = qformat.user_format(nf4)
# (name, format, dtype, rows of x, group)
CASES = [("int4 m1", qformat.INT4, "bfloat16", 1, 128), ("int4 m16", qformat.INT4, "bfloat16", 16, 128),
         ("int4 m32", qformat.INT4, "bfloat16", 32, 128), ("int4 m64", qformat.INT4, "bfloat16", 64, 128),
         ("int4_zp fp16 m4", qformat.INT4_ZP, "float16", 4, 32), ("int8 m1", qformat.INT8, "bfloat16", 1, 0),
         ("nf4 m1", USER, "bfloat16", 1, 64)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c[0])
def compiled(request):
    name, fmt, dt, m, group = request.param
    cfg, nt = quant.pick(m, 4096, 4096, fmt)
    gk = group or 4096
    c = compile_cubin(qgemm.qgemm_kernel(cfg, fmt, dt, "bfloat16", dt, nt, gk, True))
    print(f"{name}: {cfg} nt={nt}: {c}")
    return fmt, cfg, nt, c


def test_registers_only(compiled):
    fmt, cfg, nt, c = compiled
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert 0 < c.registers and c.registers * cfg.threads <= 65536


def test_loads_and_mma(compiled):
    fmt, cfg, nt, c = compiled
    spc, nstep = qgemm._steps(fmt, cfg)
    copies = 1 if cfg.u == 1 else 2           # (an iteration of one chunk is never partial)
    assert c.count("HMMA.16816.F32") == copies * nstep * cfg.tm * nt
    assert c.count("LDG.E.NA.128") == copies * cfg.u * cfg.tm     # the packed weight: 16 bytes a thread
    assert c.count("LDG.E.64") >= nstep * nt                       # x: 8 bytes a fragment
    lines = c.sass.splitlines()
    hmma = [i for i, line in enumerate(lines) if "HMMA" in line]
    assert not any("CALL" in line for line in lines[hmma[0]:hmma[-1]])
    if fmt.user is not None:
        assert c.count("LDS") >= 4 * nstep * cfg.tm                 # a lookup per A register
    elif fmt.bits == 4:
        assert c.count("HFMA2") + c.count("HADD2") >= 4 * copies * nstep * cfg.tm   # exact q - z


@pytest.mark.parametrize("fmt", [qformat.INT4, qformat.INT4_ZP, qformat.INT8, USER], ids=lambda f: f.name)
def test_dequantizing_pass(fmt):
    c = compile_cubin(qgemm.dequant_kernel(fmt, "bfloat16", "bfloat16", 128))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0
    assert c.count("LDG.E.NA.128") == 1 and c.count("STG.E.64") == 2 * fmt.chunk_k // 16
