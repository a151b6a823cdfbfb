"""The quantized products' kernels (issue 56) compile offline for sm_90a: the streaming kernel of
each x height that ``quant.pick`` chooses, every format, keeps its fragments in registers (no
local memory, no spills, within the registers its launch bounds leave for ``minb`` blocks an SM)
and its rings within the shared memory of an SM; copies the packed weight and x 16 bytes a
thread with cp.async, L1 bypassed (``LDGSTS.E.BYPASS.128``: the first stages' and the loop's),
the scale words 4 bytes (zero-filled past the array's end unless aligned), waits for one stage with the rest
in flight (``DEPBAR.LE SB0, stages - 1``), runs the mma count its configuration says with the
conversions inlined (no CALL between the first and the last HMMA); a cluster's blocks add their
sums through distributed shared memory between cluster barriers; the user's table lookups are
shared-memory loads; the dequantizing pass stores 16 bytes a piece of a row."""
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
# configurations: clusters and single blocks; 1 to 8 tiles of x)
CASES = [("int4 m1 4096^2", qformat.INT4, "bfloat16", 1, 128, (4096, 4096), 16),
         ("int4 m4 14336x4096", qformat.INT4, "bfloat16", 4, 128, (14336, 4096), 16),
         ("int4 m1 8192x28672", qformat.INT4, "bfloat16", 1, 128, (8192, 28672), 16),
         ("int4 m16", qformat.INT4, "bfloat16", 16, 128, (4096, 4096), 16),
         ("int4 m32", qformat.INT4, "bfloat16", 32, 128, (4096, 4096), 8),
         ("int4 m64", qformat.INT4, "bfloat16", 64, 128, (4096, 4096), 16),
         ("int4 m3 ragged", qformat.INT4, "bfloat16", 3, 128, (360, 130), 0),
         ("int4_zp fp16 m4 g32", qformat.INT4_ZP, "float16", 4, 32, (4096, 4096), 16),
         ("int8 m1", qformat.INT8, "bfloat16", 1, 0, (4096, 14336), 16),
         ("nf4 m1", USER, "bfloat16", 1, 64, (4096, 14336), 16)]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c[0])
def compiled(request):
    name, fmt, dt, m, group, (k, n), xv = request.param
    gk = group or k
    cfg, nt = quant.pick(m, n, k, fmt, group_k=gk, xv=xv)
    xg = qgemm.x_rows(m, nt)
    wa = qgemm.words_aligned(n, 0, 0)
    c = compile_cubin(qgemm.qgemm_kernel(cfg, fmt, dt, "bfloat16", dt, nt, gk, xv, qgemm.PLAIN, xg, wa))
    print(f"{name}: {cfg} nt={nt}: {c}")
    return fmt, cfg, nt, xv, gk, xg, wa, c


def test_registers_and_shared_memory(compiled):
    fmt, cfg, nt, xv, gk, xg, wa, c = compiled
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert 0 < c.registers and c.registers * cfg.threads * cfg.minb <= 65536
    smem = qgemm.smem_bytes(cfg, fmt, nt, xv, gk, xg)
    assert smem <= qgemm.SMEM_SM and cfg.minb * (smem + 1024) <= 228 * 1024


def _main_loop(c):
    """The instruction lines of the loop over stages (the one holding the HMMAs)."""
    loops = [lp for lp in c.loops() if any("HMMA" in line for line in lp)]
    assert len(loops) == 1, f"{len(loops)} loops hold HMMAs"
    return loops[0]


def test_copies_and_mma(compiled):
    """Per stage, in the loop: one wait leaving ``stages - 1`` stages in flight, the stage's
    mma, then the copies of the stage ``stages`` ahead (16-byte weight and x pieces, 4-byte scale
    words zero-filled past the end); the first stages' copies before the loop."""
    fmt, cfg, nt, xv, gk, xg, wa, c = compiled
    q = qgemm._Shape(cfg, fmt, "bfloat16", "bfloat16", nt, gk, xv, xg)
    loop = _main_loop(c)

    def n(op, lines=loop):
        return sum(1 for line in lines if f" {op} " in line or f" {op}." in line)
    per = cfg.u * cfg.tm + (nt * cfg.u * q.PC if xv == 16 else 0)
    words = q.NSC * (2 if fmt.zeros else 1)
    assert n("HMMA") == c.count("HMMA") == q.NSTEP * cfg.tm * nt
    assert n("LDGSTS.E.BYPASS.128") == per
    assert n("LDGSTS.E") - n("LDGSTS.E.BYPASS.128") - n("LDGSTS.E.64") == words
    assert n("LDGSTS.E.ZFILL") == (0 if wa else words)        # (aligned words never pass the end)
    assert c.count("LDGSTS.E.BYPASS.128") % per == 0 and c.count("LDGSTS.E.BYPASS.128") >= 2 * per
    if xv == 8:
        assert n("LDGSTS.E.64") == 2 * nt * cfg.u * q.PC
    assert sum(1 for line in loop if f"DEPBAR.LE SB0, 0x{cfg.stages - 1:x}" in line) == 1
    hmma = [i for i, line in enumerate(loop) if "HMMA" in line]
    assert not any("CALL" in line for line in loop[hmma[0]:hmma[-1]])
    if cfg.split > 1:                  # the cluster's sums: barriers around the remote reads
        assert c.count("UCGABAR_ARV") == 2 and c.count("UCGABAR_WAIT") == 2
    else:
        assert c.count("UCGABAR_ARV") == 0
    if fmt.user is not None:
        assert n("LDS") >= 4 * q.NSTEP * cfg.tm                # a lookup per A register
    elif fmt.bits == 4:
        assert n("HFMA2") + n("HADD2") == 4 * q.NSTEP * cfg.tm   # exact q - z
    print(f"{len(loop)} instructions a stage of {q.NSTEP * cfg.tm * nt} mma, {cfg.u * cfg.tm * 512} bytes of weight")


@pytest.mark.parametrize("fmt", [qformat.INT4, qformat.INT4_ZP, qformat.INT8, USER], ids=lambda f: f.name)
def test_dequantizing_pass(fmt):
    c = compile_cubin(qgemm.dequant_kernel(fmt, "bfloat16", "bfloat16", 128))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0
    assert c.count("LDG.E.NA.128") == 1 and c.count("STG.E.128") == 2 * fmt.chunk_k // 32
