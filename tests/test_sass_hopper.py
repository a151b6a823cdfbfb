"""Every Hopper rung compiles offline to an sm_90a cubin whose SASS shows what the rung is about
(HGMMA, UTMALDG, SYNCS mbarrier operations, USETMAXREG, UTMASTG), with no local memory; and the
same kernel does not build for plain sm_90 (the arch gate is real). No GPU needed."""
import pytest

from numba_tc import hopper
from numba_tc.epilogue import BLOCK_SCALED, BLOCK_SCALES, PLAIN, SCALED
from numba_tc.sass import compile_cubin

from conftest import SIM

pytestmark = pytest.mark.skipif(SIM, reason="the simulator has no compiler")
pytestmark = [pytestmark, pytest.mark.sass]


def _kernel(*args):
    """The Hopper kernel of ``hopper.KernelSpec(*args)``."""
    return hopper.wgmma_kernel(hopper.KernelSpec(*args))


def _compile(cfg, dtype="bfloat16", ta=False, tb=False, out="bfloat16", cc=(9, 0, "a")):
    k = _kernel(cfg, dtype, out, ta, tb, True, True)
    return compile_cubin(k, cc=cc)


@pytest.fixture(scope="module")
def cubins():
    out = {v.name: _compile(v.config) for v in hopper.RUNGS}
    for name, c in out.items():
        print(f"{name}: {c.registers} registers, {c.spill_bytes} spill bytes")
    return out


def _main_loop(c):
    lines = c.sass.splitlines()
    idx = [i for i, l in enumerate(lines) if "HGMMA" in l]
    return lines[idx[0]:idx[-1] + 1]


@pytest.mark.parametrize("v", hopper.RUNGS, ids=lambda v: v.name)
def test_rung_sass(cubins, v):
    c, cfg = cubins[v.name], v.config
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    # one HGMMA per k16 step and m64 block of a consumer, m64nNk16 with N the tile width,
    # the mn-major B read transposed
    assert c.count("HGMMA") == 4 * (cfg.wg_m // 64)
    assert f"HGMMA.64x{cfg.bn}x16.F32.BF16" in c.sass and ".tnspB" in c.sass
    assert c.count("UTMALDG") > 0 and c.count("SYNCS") > 0
    assert (c.count("USETMAXREG") > 0) == (cfg.regs != (0, 0))
    assert (c.count("UTMASTG") > 0) == cfg.tma_store
    # a cluster multicasts B and releases stages remotely (.RED: an arrival on a peer's barrier)
    assert (c.count("UTMALDG.2D.MULTICAST") > 0) == (cfg.cluster > 1)
    assert ("SYNCS.ARRIVE.TRANS64.RED" in c.sass) == (cfg.cluster > 1)
    loop = _main_loop(c)
    assert not any("CALL" in l for l in loop)                  # every primitive inlined
    assert not any("MEMBAR.ALL.GPU" in l for l in loop)        # no GPU-scope fence per K slice
    if cfg.producer:                                           # no block-wide barrier in the loop
        assert not any("BAR.SYNC" in l and "BAR.SYNC.DEFER_BLOCKING 0x0" in l for l in loop)


@pytest.mark.parametrize("dtype, ta, tb, out, instr", [
    ("float16", False, False, "float32", "HGMMA.64x256x16.F32 "),      # (f16 inputs: no suffix)
    ("bfloat16", True, True, "float32", "HGMMA.64x256x16.F32.BF16"),
])
def test_precisions_and_layouts(dtype, ta, tb, out, instr):
    c = _compile(hopper.RUNG7, dtype, ta, tb, out)
    assert instr in c.sass and c.local_memory_ops == 0
    assert (".BF16" in c.sass) == (dtype == "bfloat16")
    assert (".tnspA" in c.sass) == ta and (".tnspB" in c.sass) == (not tb)


@pytest.mark.parametrize("cfg", hopper.RUNG7_CONFIGS[1:], ids=lambda c: f"{c.bm}x{c.bn}_cluster{c.cluster}")
def test_hopper_alternative_configs(cfg):
    # the configurations `hopper` switches to per problem: smaller tiles, B multicast
    c = _compile(cfg)
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert f"HGMMA.64x{cfg.bn}x16.F32.BF16" in c.sass and c.count("UTMASTG") > 0
    assert (c.count("UTMALDG.2D.MULTICAST") > 0) == (cfg.cluster > 1)
    assert not any("MEMBAR.ALL.GPU" in l for l in _main_loop(c))


@pytest.mark.parametrize("cfg", [hopper.RUNG7, hopper.RUNG7.replace(bn=192)], ids=["128x256", "128x192"])
def test_the_tail_split_kernel_keeps_both_stores_out_of_local_memory(cfg):
    # whole tiles by TMA stores, the split round's partial sums by plain fp32 stores, one kernel
    k = _kernel(cfg, "bfloat16", "bfloat16", False, False, True, True, PLAIN, False, False, None, False,
                False, True)
    c = compile_cubin(k, cc=(9, 0, "a"))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("UTMASTG") > 0 and c.count("STG.E.64") > 0


@pytest.mark.parametrize("cfg", hopper.SWAP_CONFIGS, ids=lambda c: f"64x{c.bn}")
@pytest.mark.parametrize("split", [False, True])
def test_the_swapped_decode_tiles_use_narrow_wgmma_and_no_local_memory(cfg, split):
    # C^T = B^T A^T: B^T an mn-major A (read transposed), A^T a k-major B, m64nNk16 with N the
    # few rows of C, C's transpose stored from registers (no TMA store)
    k = _kernel(cfg, "bfloat16", "float32" if split else "bfloat16", True, True, False, False, PLAIN,
                split, False, None, False, True)
    c = compile_cubin(k, cc=(9, 0, "a"))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert f"HGMMA.64x{cfg.bn}x16.F32.BF16" in c.sass and ".tnspA" in c.sass and ".tnspB" not in c.sass
    assert c.count("UTMASTG") == 0 and c.count("UTMALDG") > 0


@pytest.mark.parametrize("boxes", [1, 4])
def test_output_box_ring(boxes):
    # a box is rewritten only once the TMA store that used it EB boxes ago has read it
    c = _compile(hopper.RUNG7.replace(epi_boxes=boxes, max_stages=3))
    assert c.local_memory_ops == 0 and c.count("UTMASTG") > 0
    assert f"DEPBAR.LE SB0, 0x{boxes - 1} ;" in c.sass


def test_wgmma_needs_sm90a():
    with pytest.raises(RuntimeError, match="nvJitLink failed for sm_90"):
        _compile(hopper.RUNG1, cc=(9, 0))


@pytest.mark.parametrize("ta, tb", [(False, False), (True, True)])
def test_batched_kernel_sass(cubins, ta, tb):
    # the batched kernel: 3-D TMA loads and stores, the same wgmma work, no local memory
    c = compile_cubin(_kernel(hopper.RUNG7, "bfloat16", "bfloat16", ta, tb, True, True,
                              PLAIN, False, True))
    plain = cubins["hopper"] if (ta, tb) == (False, False) else _compile(hopper.RUNG7, ta=ta, tb=tb)
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("HGMMA") == plain.count("HGMMA") and c.registers == plain.registers
    assert c.count("UTMALDG.3D") > 0 and c.count("UTMALDG.2D") == 0 and c.count("UTMASTG.3D") > 0


@pytest.mark.parametrize("cfg", hopper.FP8_CONFIGS, ids=lambda c: f"{c.bm}x{c.bn}_cluster{c.cluster}")
@pytest.mark.parametrize("da, db, instr", [("float8_e4m3fn", None, "E4M3.E4M3"),
                                           ("float8_e5m2", "float8_e4m3fn", "E5M2.E4M3")])
def test_fp8_kernels(cfg, da, db, instr):
    # the fp8 warpgroup MMA, k32 steps, with its slice promoted by FADDs into fp32 accumulators
    # (one per accumulator of a consumer thread), and no local memory: both sets stay in registers
    k = _kernel(cfg, da, "bfloat16", False, True, True, True, SCALED, False, False, db)
    c = compile_cubin(k, cc=(9, 0, "a"))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    # (a 256-wide tile in two n128 halves)
    assert f"QGMMA.64x{cfg.promote_n}x32.F32.{instr}" in c.sass and "HGMMA" not in c.sass
    parts = cfg.bn // cfg.promote_n
    turn = hopper.promoted_turn(False, cfg.cluster)                    # (slices a turn, written out;
    extra = 2 if cfg.promote_every > 1 else 0                          # summed in groups: the second
    assert c.count("QGMMA") == (turn + extra) * 4 * (cfg.wg_m // 64) * parts   # consumer's first slice and
    assert c.count("FADD") >= cfg.acc_regs                             # the K left over, a slice each)
    if cfg.promote_every > 1:
        # into fp32 or fp16 every slice is added (the grouped loop is for bf16 outputs only)
        c1 = compile_cubin(_kernel(cfg, da, "float16" if db else "float32", False, True, True, True,
                                   SCALED, False, False, db))
        assert c1.count("QGMMA") == turn * 4 * (cfg.wg_m // 64) and c1.spill_bytes == 0


@pytest.mark.parametrize("cfg", hopper.scaled_pool(hopper.FP8_CONFIGS, "block"),
                         ids=lambda c: f"{c.bm}x{c.bn}_cluster{c.cluster}")
@pytest.mark.parametrize("split", [False, True])
def test_fp8_block_scaled_kernels(cfg, split):
    # block-wise scales: each slice's sum multiplied into the fp32 accumulators (FFMA, one per
    # accumulator), the scales loaded from global memory, still no local memory
    epi = BLOCK_SCALES if split else BLOCK_SCALED
    k = _kernel(cfg, "float8_e4m3fn", "float32" if split else "bfloat16", False, True, True,
                not split, epi, split)
    c = compile_cubin(k, cc=(9, 0, "a"))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    turn = hopper.promoted_turn(True, cfg.cluster)                              # (slices a turn)
    assert c.count("QGMMA") == turn * 4 * (cfg.wg_m // 64) * cfg.bn // cfg.promote_n
    assert c.count("FFMA") >= cfg.acc_regs and c.count("FSEL") == 0
    assert c.count("LDG") >= 3


def test_fp8_reads_k_major_operands_only():
    with pytest.raises(ValueError, match="k-major only"):
        _kernel(hopper.FP8_CONFIGS[0], "float8_e4m3fn", "bfloat16", False, False, True, True, SCALED)


@pytest.mark.parametrize("cfg", hopper.RUNG7_CONFIGS[:4], ids=lambda c: f"{c.bm}x{c.bn}")
def test_tf32_kernels(cfg):
    # float32 arrays as tf32: the k8 warpgroup MMA on fp32 values in shared memory, 4 steps of a
    # 128-byte K slice (32 elements), no transpose (k-major only), no local memory
    c = compile_cubin(_kernel(cfg, "tf32", "float32", False, True, True, True), cc=(9, 0, "a"))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert f"HGMMA.64x{cfg.bn}x8.F32.TF32" in c.sass and ".tnsp" not in c.sass
    assert c.count("HGMMA") == 4 * (cfg.wg_m // 64)
    with pytest.raises(ValueError, match="k-major only"):
        _kernel(cfg, "tf32", "float32", False, False, True, True)


@pytest.mark.parametrize("cfg", [hopper.RUNG7, hopper.RUNG7.replace(bm=64, consumers=1),
                                 hopper.ASYNC_CONFIGS[0].replace(staged=False, regs=(40, 232))],
                         ids=lambda c: f"{c.bm}x{c.bn}")
def test_tf32_a_read_through_registers(cfg):
    # an mn-major tf32 A (and a swapped NN product's B^T): each warp loads its fragments from
    # the stage (one LDS per register), then the HGMMA takes A from registers (R, not a
    # descriptor); each k8 step its own group, the group 4 back waited for before its loads
    # (DEPBAR.LE 3); the swapped kernel stores C's transpose one element at a time from registers
    for trans_c in (False, True):
        k = _kernel(cfg, "tf32", "float32", True, True, False, False, PLAIN, False, False, None, False,
                    trans_c)
        c = compile_cubin(k, cc=(9, 0, "a"))
        assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
        mi = cfg.wg_m // 64
        hgmma = [l for l in c.sass.splitlines() if "HGMMA" in l]
        assert len(hgmma) == 4 * mi and all(f"HGMMA.64x{cfg.bn}x8.F32.TF32" in l for l in hgmma)
        assert all(" R" in l.split("TF32")[1].split(",")[1] for l in hgmma), hgmma       # A: a register
        assert "WARPGROUP.DEPBAR.LE gsb0, 0x3" in c.sass and c.count("LDS") >= 16 * mi
        assert c.count("UTMASTG") == 0 and c.count("STG") >= 2


@pytest.mark.parametrize("cfg", hopper.ASYNC_CONFIGS, ids=lambda c: f"{c.bm}x{c.bn}")
def test_tf32_n_major_b_copied_by_the_producer(cfg):
    # an n-major B (which the tf32 wgmma cannot read): the producer warpgroup copies each slice
    # as it lies by 16-byte cp.async (zero-filled past the edges) into the stage's staged rows,
    # then transposes 4 x 4 blocks k-major with 16-byte shared loads and stores, rounding each
    # element to tf32 to nearest (as TMA's TFLOAT32 loads round A) and fencing them for wgmma's
    # async proxy before it arrives; the same HGMMA, registers only (the producer's code runs at
    # its setmaxnreg count)
    for split in (False, True):
        c = compile_cubin(_kernel(cfg, "tf32", "float32", False, False, True, not split, PLAIN, split,
                                  False, None, True), cc=(9, 0, "a"))
        assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
        assert f"HGMMA.64x{cfg.bn}x8.F32.TF32" in c.sass and c.count("HGMMA") == 4 * (cfg.wg_m // 64)
        blocks = cfg.bn // 64                                   # 4 x 4 blocks a thread transposes a slice
        assert c.count("LDGSTS.E.BYPASS.128") >= cfg.bn // 16 and c.count("LDS.128") >= 4 * blocks
        assert c.count("STS.128") >= 4 * blocks and c.count("F2FP.TF32.F32") >= 16 * blocks
    plain = compile_cubin(_kernel(cfg, "tf32", "float32", False, True, True, True), cc=(9, 0, "a"))
    assert plain.count("LDGSTS") == 0 and plain.count("F2FP.TF32.F32") == 0
    with pytest.raises(ValueError, match="n-major tf32 B"):
        _kernel(cfg, "tf32", "float32", False, True, True, True, PLAIN, False, False, None, True)
    with pytest.raises(ValueError, match="staged"):
        _kernel(cfg.replace(staged=False), "tf32", "float32", False, False, True, True, PLAIN, False,
                False, None, True)


@pytest.mark.parametrize("item, vec", [(1, True), (4, True), (1, False), (4, False)])
def test_transposing_copy_moves_16_bytes_an_access(item, vec):
    """The copy of an fp8 or tf32 operand wgmma cannot read as it lies: whole tiles of aligned
    sources load and store 16 bytes an access (four of each a thread: fp8 16 bytes of 4 lines,
    fp32 4 pieces), edge tiles and unaligned sources an element at a time; registers only."""
    from numba_tc import repack
    c = compile_cubin(repack.gather_kernel(True, item, vec))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    wide = 4 if vec else 0
    assert c.count("LDG.E.128") == wide and c.count("STG.E.128") == wide, c.counts


@pytest.mark.parametrize("vec", [True, False])
def test_row_copy_moves_16_bytes_an_access_where_rows_allow(vec):
    """The copy of a 16-bit operand to whole 128-byte rows: one 16-byte load and store a thread
    where the source's rows are whole 16-byte chunks (rows TMA reads slowly), else an element at
    a time (rows TMA cannot read); registers only."""
    from numba_tc import repack
    c = compile_cubin(repack.repack_kernel("bfloat16", vec))
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("LDG.E.128") == c.count("STG.E.128") == int(vec), c.counts


@pytest.mark.parametrize("cfg", [hopper.RUNG7.replace(bn=128, max_stages=6, pingpong=True), hopper.NARROW_N],
                         ids=["128x128", "64x128"])
def test_ping_pong_consumers_take_turns_without_local_memory(cfg):
    # each consumer a whole tile (its rows: both m64 blocks of a 128-row one), the turn handed on
    # by bar.arrive and waited for by bar.sync at the other's barrier
    c = _compile(cfg)
    assert c.local_memory_ops == 0 and c.spill_bytes == 0, c.link_log
    assert c.count("HGMMA") == 4 * cfg.bm // 64 and c.count("BAR.ARV") == 1
    assert sum(f"BAR.SYNC.DEFER_BLOCKING R" in l for l in c.sass.splitlines()) >= 1
