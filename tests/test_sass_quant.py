"""The quantized products' kernels (issue 56) compile offline for sm_90a: the streaming kernel of
each x height that ``quant.pick`` chooses, every format, keeps its fragments in registers (no
local memory, no spills, within the registers its launch bounds leave for ``minb`` blocks an SM),
loads the packed weight 16 bytes a thread (``LDG.E.NA.128``, L1 bypassed: the first iteration's
and, in the loop, both buffers'), x 16 bytes a load (``LDG.E.128``) where its rows allow, runs
the mma count its configuration says (an iteration from each buffer) with the conversions
inlined (no CALL between the first and the last HMMA); a cluster's blocks add their sums through
distributed shared memory between cluster barriers; the user's table lookups are shared-memory
loads; the dequantizing pass stores 16 bytes a row run."""
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
# (name, format, dtype, rows of x, group, (K, N), x access): the bar's shapes (the picked
# configurations: clusters of 4 and 5 blocks, one block; 1 to 8 tiles of x)
CASES = [("int4 m1 4096^2", qformat.INT4, "bfloat16", 1, 128, (4096, 4096), 16),
         ("int4 m4 14336x4096", qformat.INT4, "bfloat16", 4, 128, (14336, 4096), 16),
         ("int4 m1 8192x28672", qformat.INT4, "bfloat16", 1, 128, (8192, 28672), 16),
         ("int4 m16", qformat.INT4, "bfloat16", 16, 128, (4096, 4096), 16),
         ("int4 m32", qformat.INT4, "bfloat16", 32, 128, (4096, 4096), 8),
         ("int4 m64", qformat.INT4, "bfloat16", 64, 128, (4096, 4096), 16),
         ("int4 m3 ragged", qformat.INT4, "bfloat16", 3, 128, (360, 130), 0),
         ("int4_zp fp16 m4", qformat.INT4_ZP, "float16", 4, 32, (4096, 4096), 16),
         ("int8 m1", qformat.INT8, "bfloat16", 1, 0, (4096, 14336), 16),
         ("nf4 m1", USER, "bfloat16", 1, 64, (4096, 14336), 16)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c[0])
def compiled(request):
    name, fmt, dt, m, group, (k, n), xv = request.param
    gk = group or k
    cfg, nt = quant.pick(m, n, k, fmt, group_k=gk)
    c = compile_cubin(qgemm.qgemm_kernel(cfg, fmt, dt, "bfloat16", dt, nt, gk, xv))
    print(f"{name}: {cfg} nt={nt}: {c}")
    return fmt, cfg, nt, xv, c


def test_registers_only(compiled):
    fmt, cfg, nt, xv, c = compiled
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert 0 < c.registers and c.registers * cfg.threads * cfg.minb <= 65536


def test_loads_and_mma(compiled):
    fmt, cfg, nt, xv, c = compiled
    spc, nstep = qgemm.steps(fmt, cfg)
    assert c.count("HMMA.16816.F32") == 2 * nstep * cfg.tm * nt      # an iteration from each buffer
    assert c.count("LDG.E.NA.128") == 3 * cfg.u * cfg.tm            # the first iteration's, each buffer's
    x_words = fmt.chunk_k // 8                                      # a thread's run of a row per chunk
    if xv:
        assert c.count(f"LDG.E.{8 * xv}") == 2 * cfg.u * nt * x_words * 4 // xv
    lines = c.sass.splitlines()
    hmma = [i for i, line in enumerate(lines) if "HMMA" in line]
    assert not any("CALL" in line for line in lines[hmma[0]:hmma[-1]])
    if cfg.split > 1:                  # the cluster's sums: barriers around the remote reads
        assert c.count("UCGABAR_ARV") == 2 and c.count("UCGABAR_WAIT") == 2
    else:
        assert c.count("UCGABAR_ARV") == 0
    if fmt.user is not None:
        assert c.count("LDS") >= 4 * 2 * nstep * cfg.tm             # a lookup per A register
    elif fmt.bits == 4:
        assert c.count("HFMA2") + c.count("HADD2") >= 4 * 2 * nstep * cfg.tm   # exact q - z


@pytest.mark.parametrize("fmt", [qformat.INT4, qformat.INT4_ZP, qformat.INT8, USER], ids=lambda f: f.name)
def test_dequantizing_pass(fmt):
    c = compile_cubin(qgemm.dequant_kernel(fmt, "bfloat16", "bfloat16", 128))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0
    assert c.count("LDG.E.NA.128") == 1 and c.count("STG.E.128") == 2 * fmt.chunk_k // 32
