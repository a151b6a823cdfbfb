"""A K slice's wgmmas: the instruction of each input type and width, the operands' descriptors,
and a tf32 A read through registers (wgmma's register-A form)."""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, uint32

from .. import layout, primitives
from ..config import WGMMA_N, WGMMA_N_TYPED
from ..jit import device, unrolled
from ..layout import a_fragment, mn_major_offset, wgmma_desc, wgmma_operand_offset
from ..primitives import lds_u32, mbar_wait, wgmma_commit, wgmma_fence, wgmma_wait


WGMMA_TYPE = {"float16": 0, "bfloat16": 1}      # ptx/hopper.cu: wgmma's input type argument


# the wgmma of each width (``config.WGMMA_N``): 16-bit, fp8, tf32 from shared memory, tf32 with A in registers
_WGMMA, _WGMMA8, _WGMMA32, _WGMMA32_RS = ({n: getattr(primitives, f"wgmma_m64n{n}{op}") for n in widths} for op, widths in
                                          (("k16", WGMMA_N), ("k32_f8", WGMMA_N_TYPED), ("k8_tf32", WGMMA_N_TYPED),
                                           ("k8_tf32_rs", WGMMA_N_TYPED)))


KMAJOR_ONLY = layout.FP8 + ("tf32",)             # input types wgmma reads k-major only (no transpose flags)


# ---------------------------------------------------------------------------------------------
# The kernel's parts, CUTLASS's way: a tile scheduler (which tile a block takes next), a producer
# (TMA into the ring), a mainloop (wgmma over the ring) and an epilogue (accumulators to C). Each
# is a factory, cached per configuration, that closes over its compile-time constants (upper
# case) and returns a device function of run-time values only (as ``epilogue.make`` does); the
# larger parts take the smaller ones they call as arguments, so any one can be swapped.
# ``wgmma_kernel`` composes them. The ring: S stages of STAGE bytes from ``sbase``, a full
# mbarrier per stage at bars + 8s and an empty one at bars + 8(S + s).
# ---------------------------------------------------------------------------------------------
@device
def _operand_desc(tile, kmajor, mn, ks):
    """The wgmma descriptor of the operand at row/column ``mn`` and k16 step ``ks`` of a stored
    tile at shared address ``tile`` (layout facts: ``layout.wgmma_operand_offset``)."""
    lbo = 16 if kmajor else layout.BOX_BYTES       # (k-major: unused by the 128B swizzle)
    return wgmma_desc(tile + wgmma_operand_offset(kmajor, mn, ks), lbo, layout.ATOM_BYTES, layout.SW128)


def _fp8_kind(dtype_a: str, dtype_b: str) -> int:
    """ptx/hopper.cu's fp8 wgmma ``kind``: 2 * (A is e5m2) + (B is e5m2)."""
    return 2 * (dtype_a == "float8_e5m2") + (dtype_b == "float8_e5m2")


@lru_cache(maxsize=None)
def make_slice_group(dtype, A_KM, B_KM, MI, BN, A_BYTES, dtype_b=None, OFF=0):
    """``issue(pacc, stage, a_row0, n0, keep0)``: a K slice's wgmmas as one committed group: 4 steps
    of 32 bytes of K (k16 for 16-bit inputs, k32 for fp8: ``dtype_b`` is B's when it differs from
    A's, k8 for tf32: fp32 values) x MI m64 blocks of this warpgroup's rows from ``a_row0``, each
    m64nBN from B's row/column ``n0``. wgmma's transpose flags say a 16-bit operand is mn-major;
    fp8 and tf32 operands are k-major only. ``OFF``: the sum goes to accumulators from OFF on,
    starting from zero where ``keep0`` is 0 (a promoted mainloop's), else it adds to those from 0."""
    fp8, tf32 = dtype in layout.FP8, dtype == "tf32"
    if _regs_a(dtype, A_KM, B_KM) and not OFF:
        return _slice_group_regs_a(MI, BN, A_BYTES)
    if dtype in KMAJOR_ONLY and not (A_KM and B_KM):
        raise ValueError(f"wgmma reads {dtype} operands k-major only (A row-major, B column-major; "
                         "a tf32 A may be mn-major, read through registers)")
    KND = _fp8_kind(dtype, dtype_b or dtype) if fp8 else 0 if tf32 else WGMMA_TYPE[dtype]
    widths = _WGMMA8 if fp8 else _WGMMA32 if tf32 else _WGMMA
    if BN not in widths:
        raise ValueError(f"bn={BN}: {dtype} wgmma widths built are {sorted(widths)}")
    WG = widths[BN]

    @device
    def wgmma_one(t, pacc, stage, a_row0, n0, keep0):
        ks = t // MI
        mi = t - ks * MI
        db = _operand_desc(stage + A_BYTES, B_KM, n0, ks)
        da = _operand_desc(stage, A_KM, a_row0 + 64 * mi, ks)
        keep = keep0 if OFF and ks == 0 else 1
        if fp8:
            WG(pacc, OFF + mi * (BN // 2), da, db, keep, KND)
        elif tf32:
            WG(pacc, OFF + mi * (BN // 2), da, db, keep)
        else:
            WG(pacc, OFF + mi * (BN // 2), da, db, keep, KND, 0 if A_KM else 1, 0 if B_KM else 1)
    wgmma_all = unrolled(wgmma_one, 8)

    @device
    def issue(pacc, stage, a_row0, n0, keep0):
        wgmma_fence()
        wgmma_all(4 * MI, pacc, stage, a_row0, n0, keep0)
        wgmma_commit()
    return issue


def _regs_a(dtype, A_KM, B_KM) -> bool:
    """Whether a slice's wgmmas take A from registers (``_slice_group_regs_a``): a tf32 A that is
    mn-major, with B k-major."""
    return dtype == "tf32" and not A_KM and B_KM


@lru_cache(maxsize=None)
def _slice_group_regs_a(MI, BN, A_BYTES):
    """``make_slice_group`` for tf32 with A mn-major: wgmma takes A from registers, so each warp
    loads its m16 x k8 fragments (``layout.a_fragment``) from the stage as TMA left it
    (``layout.mn_major_offset``); no pass transposes A before the kernel. A wgmma may read its A
    registers until its group is waited for, so each k8 step (MI m64 blocks) is a group of its
    own with registers of its own: before a step's loads, the group that last used its
    registers (4 groups back, the previous slice's same step) is waited for, while the 3 after it
    still run. The mainloop keeps 4 groups (a slice) in flight (``make_mainloop``'s GROUPS)."""
    WG = _WGMMA32_RS[BN]
    NF = 16 * MI                                    # 4 k8 steps x MI blocks x 4 registers

    @device
    def load_one(t, fr, stage, row0, lane, ks):
        m, k = a_fragment(lane, t & 3, 0, 1)        # register t % 4 of m64 block t // 4
        fr[4 * ks * MI + t] = lds_u32(stage + mn_major_offset(row0 + 64 * (t >> 2) + m, 8 * ks + k, 4))
    load_step = unrolled(load_one, 8)

    @device
    def wgmma_one(mi, pacc, fr, stage, n0, ks):
        f = 4 * (ks * MI + mi)
        WG(pacc, mi * (BN // 2), fr[f], fr[f + 1], fr[f + 2], fr[f + 3], _operand_desc(stage + A_BYTES, True, n0, ks), 1)
    wgmma_step = unrolled(wgmma_one, 2)

    @device
    def step(ks, pacc, fr, stage, row0, lane, n0):
        wgmma_wait(3)
        load_step(4 * MI, fr, stage, row0, lane, ks)
        wgmma_fence()
        wgmma_step(MI, pacc, fr, stage, n0, ks)
        wgmma_commit()
    steps = unrolled(step, 4)

    @device
    def issue(pacc, stage, a_row0, n0, keep0):
        fr = cuda.local.array(NF, uint32)
        steps(4, pacc, fr, stage, a_row0 + 16 * ((cuda.threadIdx.x >> 5) & 3), cuda.threadIdx.x & 31, n0)
    return issue


@lru_cache(maxsize=None)
def make_slice_mma(dtype, A_KM, B_KM, MI, BN, A_BYTES, dtype_b=None):
    """``consume(pacc, stage, full, ph, a_row0)``: wait for the stage's K slice to land, then
    issue its wgmmas (``make_slice_group``), adding to the accumulators."""
    issue = make_slice_group(dtype, A_KM, B_KM, MI, BN, A_BYTES, dtype_b)

    @device
    def consume(pacc, stage, full, ph, a_row0):
        mbar_wait(full, ph)
        issue(pacc, stage, a_row0, 0, 1)
    return consume
