"""Tile configurations as data, validated before any kernel is built.

A configuration states its constraints up front (divisibility, threads, shared-memory budget,
alignment) and ``validate()`` raises ``ConfigError`` naming the first one broken, so a bad tuning
choice fails at construction, never as a wrong answer or a launch error.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Optional, Tuple

from . import layout
from .errors import ConfigError

__all__ = ["ConfigError", "SimtConfig", "MmaConfig", "WgmmaConfig", "SmemLayout", "Variant", "STATIC_SMEM_LIMIT",
           "MAX_THREADS", "SMEM_PER_BLOCK_MAX"]

STATIC_SMEM_LIMIT = 48 * 1024   # bytes of static shared memory a block may declare (all CUDA GPUs)
MAX_THREADS = 1024              # threads per block (all CUDA GPUs)
SMEM_PER_BLOCK_MAX = 227 * 1024   # opt-in dynamic shared memory per block on sm_90 (232448 bytes)
SMEM_PER_SM = 228 * 1024          # shared memory per SM on sm_90
BLOCK_RESERVED = 1024             # shared memory the system reserves per block (sm_80+)
WARP = 32
# The oldest target CUDA 13's compilers build for (Turing): below it nothing compiles, whatever a
# kernel's own minimum (Variant.min_cc) says.
TOOLCHAIN_MIN_CC = (7, 5)


def _need(cond: bool, what: str) -> None:
    if not cond:
        raise ConfigError(what)


@dataclass(frozen=True)
class SimtConfig:
    """The tiled FP32 CUDA-core kernel of rungs 3-7 (see ``simt.py``), one knob per rung.

    A block computes ``bm x bn`` of C, stepping K by ``bk``. The block tile is split into warp
    tiles ``wm x wn`` (equal to the block tile when ``warptile`` is off); inside one, each thread
    owns ``wmiter x wniter`` sub-tiles of ``tm x tn`` outputs, ``wsubm = wm / wmiter`` apart.
    """
    bm: int
    bn: int
    bk: int
    tm: int = 1
    tn: int = 1
    threads: int = 256
    warptile: bool = False      # rung 7: a warp owns a wm x wn sub-tile (threads of a warp share rows)
    wm: int = 0                 # 0: the block tile
    wn: int = 0
    wniter: int = 1
    a_kmajor: bool = False      # rung 6: A stored transposed in shared memory (As[k][m]) -> LDS.128
    vector_loads: bool = False  # rung 6: 16-byte global loads (LDG.128) where aligned
    stages: int = 1             # 2: register-prefetched double buffer, one barrier per k-tile
    a_pad: int = 0              # floats of padding per k-row of As (k-major only)
    min_blocks: int = 1         # launch bound: blocks that must fit per SM (caps registers/thread)
    vector_stores: bool = True  # C written 16 bytes at a time where aligned (rung 7: 4 bytes, see its note)
    split_tail: bool = False    # rung 7: the tiles of a last, partial wave are split along K (schedule.tail_split)

    def __post_init__(self):
        if not self.wm:
            object.__setattr__(self, "wm", self.bm)
        if not self.wn:
            object.__setattr__(self, "wn", self.bn)
        self.validate()

    # derived quantities -------------------------------------------------------------------
    @property
    def threads_per_wtile(self) -> int:
        return WARP if self.warptile else self.threads

    @property
    def wmiter(self) -> int:
        return (self.wm * self.wn) // (self.threads_per_wtile * self.tm * self.tn * self.wniter)

    @property
    def wsubm(self) -> int:
        return self.wm // self.wmiter

    @property
    def wsubn(self) -> int:
        return self.wn // self.wniter

    @property
    def vec(self) -> int:
        """Elements per global access of the tile loaders."""
        return 4 if self.vector_loads else 1

    @property
    def a_tile_floats(self) -> int:
        return self.bk * (self.bm + self.a_pad) if self.a_kmajor else self.bm * self.bk

    @property
    def b_tile_floats(self) -> int:
        return self.bk * self.bn

    @property
    def smem_bytes(self) -> int:
        return 4 * self.stages * (self.a_tile_floats + self.b_tile_floats)

    @property
    def outputs_per_thread(self) -> int:
        return self.wmiter * self.tm * self.wniter * self.tn

    def validate(self) -> None:
        _need(all(v > 0 for v in (self.bm, self.bn, self.bk, self.tm, self.tn, self.threads,
                                   self.wniter)), "all tile sizes must be positive")
        _need(self.threads % WARP == 0 and self.threads <= MAX_THREADS,
              f"threads={self.threads}: a multiple of {WARP}, at most {MAX_THREADS}")
        _need(self.bm % self.wm == 0 and self.bn % self.wn == 0,
              f"warp tile {self.wm}x{self.wn} must divide the block tile {self.bm}x{self.bn}")
        n_wtiles = (self.bm // self.wm) * (self.bn // self.wn)
        _need(n_wtiles * self.threads_per_wtile == self.threads,
              f"{n_wtiles} warp tiles x {self.threads_per_wtile} threads != {self.threads} threads")
        per_thread = self.tm * self.tn * self.wniter * self.threads_per_wtile
        _need((self.wm * self.wn) % per_thread == 0 and self.wmiter >= 1,
              f"warp tile {self.wm}x{self.wn} is not covered by {self.threads_per_wtile} threads "
              f"of {self.tm}x{self.tn} x wniter={self.wniter}")
        _need(self.wm % self.wmiter == 0 and self.wn % self.wniter == 0, "wmiter/wniter must divide wm/wn")
        _need(self.wsubm % self.tm == 0 and self.wsubn % self.tn == 0,
              f"sub-tile {self.wsubm}x{self.wsubn} must be a multiple of the thread tile {self.tm}x{self.tn}")
        _need((self.wsubm // self.tm) * (self.wsubn // self.tn) == self.threads_per_wtile,
              "threads of a warp tile must exactly cover one sub-tile")
        for name, rows, cols in (("A", self.bm, self.bk), ("B", self.bk, self.bn)):
            _need((rows * cols) % (self.threads * self.vec) == 0,
                  f"{name} tile {rows}x{cols} is not split evenly over {self.threads} threads x "
                  f"{self.vec} elements")
            _need(rows % self.vec == 0 and cols % self.vec == 0,
                  f"{name} tile {rows}x{cols}: both sides must be multiples of the vector width {self.vec}")
        _need(self.stages in (1, 2), "stages must be 1 or 2")
        _need(self.bk <= 32, "bk is at most 32 (the unrolled k-step count)")
        _need(1 <= self.min_blocks and self.min_blocks * self.threads <= 2048,
              f"min_blocks={self.min_blocks} x {self.threads} threads exceeds 2048 threads per SM")
        _need(self.a_pad == 0 or self.a_kmajor, "a_pad applies only to a k-major A tile")
        if self.a_kmajor:
            _need((self.bm + self.a_pad) % 4 == 0, "k-major A rows must stay 16-byte aligned")
        _need(self.smem_bytes <= STATIC_SMEM_LIMIT,
              f"{self.smem_bytes} bytes of shared memory > {STATIC_SMEM_LIMIT} (static limit)")

    def replace(self, **kw) -> "SimtConfig":
        return replace(self, **kw)


@dataclass(frozen=True)
class MmaConfig:
    """The tiled mma.sync kernel of tensor-core rungs 2-5 (see ``tensorcore.py``).

    A block computes ``bm x bn`` of C and steps K by ``bk`` 16-bit elements (128 bytes; tf32
    steps 32 elements, the same bytes). Warps own ``wm x wn`` warp tiles of m16n8 fragments.
    ``stages`` is not chosen by hand: it is the number of ``bk`` slices of A and B that fit the
    shared-memory budget of ``min_blocks`` blocks per SM, capped at ``max_stages``; without
    ``async_copy`` there is one stage (load, barrier, compute, barrier).
    """
    bm: int
    bn: int
    wm: int
    wn: int
    bk: int = 64
    swizzle: bool = True            # rung 3: XOR-swizzled shared tiles (no bank conflicts, no padding)
    async_copy: bool = False        # rung 4: cp.async multi-stage pipeline
    max_stages: int = 4
    min_blocks: int = 1             # blocks per SM the shared memory and registers must allow
    group_m: int = 0                # rung 5: launch order in groups of group_m block rows (L2 reuse)
    frag_prefetch: bool = False     # rung 5: fragments double-buffered in registers across k-steps
                                    # and across the slice barrier (CUTLASS's multistage order)

    def __post_init__(self):
        self.validate()

    @property
    def warps(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    @property
    def threads(self) -> int:
        return self.warps * WARP

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * self.bk * 2

    @property
    def stages(self) -> int:
        if not self.async_copy:
            return 1
        budget = min(SMEM_PER_BLOCK_MAX, SMEM_PER_SM // self.min_blocks - BLOCK_RESERVED)
        return min(self.max_stages, budget // self.stage_bytes)

    @property
    def smem_bytes(self) -> int:
        return self.stages * self.stage_bytes

    def mma_tiles(self):
        """(MI, NI, KSTEPS): m16 and n8 fragments per warp tile, mma k-steps per 128-byte K slice
        (k16 steps for 16-bit inputs, k8 for tf32: the same count)."""
        return self.wm // 16, self.wn // 8, (self.bk * 2) // 32

    def validate(self) -> None:
        _need(all(v > 0 for v in (self.bm, self.bn, self.wm, self.wn, self.bk)), "all tile sizes must be positive")
        _need(self.wm % 16 == 0 and self.wn % 16 == 0,
              f"warp tile {self.wm}x{self.wn}: multiples of 16 (m16 fragments, n8 fragments in pairs)")
        _need(self.bm % self.wm == 0 and self.bn % self.wn == 0,
              f"warp tile {self.wm}x{self.wn} must divide the block tile {self.bm}x{self.bn}")
        _need(self.threads <= MAX_THREADS, f"{self.warps} warps is more than {MAX_THREADS} threads")
        _need(self.bk % 64 == 0, f"bk={self.bk}: rows of a k-major tile must be whole 128-byte lines "
              "(bk a multiple of 64 16-bit elements)")
        _need(self.bm % 64 == 0 and self.bn % 64 == 0, f"block tile {self.bm}x{self.bn}: rows of an "
              "mn-major tile must be whole 128-byte lines (multiples of 64)")
        for name, rows in (("A", self.bm), ("B", self.bn)):
            chunks = rows * self.bk * 2 // 16
            _need(chunks % self.threads == 0,
                  f"{name} tile {rows}x{self.bk} ({chunks} 16-byte chunks) does not split evenly "
                  f"over {self.threads} threads")
        _need(1 <= self.max_stages <= 7, "max_stages is 1..7 (cp.async.wait_group immediates)")
        _need(self.min_blocks >= 1 and self.min_blocks * self.threads <= 2048,
              f"min_blocks={self.min_blocks} x {self.threads} threads exceeds 2048 threads per SM")
        if self.async_copy:
            _need(self.stages >= 2, f"a {self.bm}x{self.bn}x{self.bk} stage is {self.stage_bytes} "
                  f"bytes: not even two fit {self.min_blocks} block(s) per SM")
        else:
            _need(self.smem_bytes * self.min_blocks <= SMEM_PER_SM, "tiles do not fit shared memory")
        _need(self.group_m >= 0, "group_m must be >= 0")
        _need(not self.frag_prefetch or self.async_copy,
              "frag_prefetch needs async_copy (the barrier moves inside the cp.async pipeline)")

    def replace(self, **kw) -> "MmaConfig":
        return replace(self, **kw)


WARPGROUP = 128
# wgmma widths ptx/hopper.cu provides (primitives declares them, hopper picks by them): for every
# input type (m64nNk16, fp8 m64nNk32, tf32 m64nNk8), and for 16-bit inputs also the narrow ones
WGMMA_N_TYPED = (64, 128, 192, 256)
WGMMA_N = (8, 16, 32) + WGMMA_N_TYPED
MAX_ACC_REGS = 128              # fp32 accumulators per thread a consumer may hold


@dataclass(frozen=True)
class SmemLayout:
    """A Hopper block's dynamic shared memory, from its base rounded up to ``layout.SWIZZLE_ALIGN``
    (the 128B swizzle's period): the ring (``stages`` stages of ``stage_bytes``), then from
    ``epilogue`` per consumer that stores by TMA (``consumers``) its ``out_boxes`` output boxes and
    ``source`` bytes of a staged epilogue array, then from ``barriers`` the ring's mbarriers
    (``barrier_bytes``). The configuration, the kernel and the stager all read it here."""
    stage_bytes: int
    stages: int
    consumers: int
    out_boxes: int
    source: int
    barrier_bytes: int

    @property
    def per_consumer(self) -> int:
        """Bytes of one consumer's output boxes and staged array."""
        return self.out_boxes * layout.OUT_BOX_BYTES + self.source

    @property
    def epilogue(self) -> int:
        """Where the output boxes start, from the aligned base."""
        return self.stages * self.stage_bytes

    @property
    def epilogue_bytes(self) -> int:
        return self.consumers * self.per_consumer

    @property
    def barriers(self) -> int:
        """Where the ring's mbarriers start, from the aligned base."""
        return self.epilogue + self.epilogue_bytes

    @property
    def total(self) -> int:
        """The dynamic shared memory a block asks for, slack for the alignment included."""
        return layout.SWIZZLE_ALIGN + self.barriers + self.barrier_bytes


@dataclass(frozen=True)
class WgmmaConfig:
    """The Hopper kernel of the wgmma rungs (see ``hopper/``), one knob per rung.

    A block computes ``bm x bn`` of C in K slices of 64 16-bit elements (128 bytes: one
    128B-swizzled TMA row). ``consumers`` warpgroups issue wgmma, each owning ``bm / consumers``
    rows as m64 x ``bn`` instructions. Without ``producer`` the first thread also issues the TMA
    loads (and the block syncs once per slice); with it, a separate warpgroup does, guarded by
    full/empty mbarriers per stage. ``regs`` = (producer, consumer) register counts for
    ``setmaxnreg`` (0: off). ``stages`` is computed: the slices that fit the shared-memory budget
    of ``min_blocks`` blocks per SM, at most ``max_stages``.
    """
    bm: int
    bn: int
    consumers: int = 1
    producer: bool = False          # rung 3: warp specialization
    regs: Tuple[int, int] = (0, 0)  # rung 4: setmaxnreg
    persistent: bool = False        # rung 5: at most one block per SM walks the tiles
    cluster: int = 1                # rung 6: blocks per cluster along M, sharing B by TMA multicast
    tma_store: bool = False         # rung 7: epilogue staged in shared memory, written by TMA
    promote: bool = False           # fp8: each K slice summed apart, then added to fp32 accumulators
    promote_every: int = 1          # ... per-tensor scales, bf16 out: this many K slices summed before
                                    # each add (the second consumer's groups a slice after the first's)
    staged: bool = False            # each stage also holds B's slice as it lies (the producer transposes it)
    scale_lead: int = 1             # fp8 block-wise scales: loaded this many K slices before their add
                                    # (split-K kernels: one)
    epi_boxes: int = 2              # 8 KiB output boxes per consumer in that ring (2: double buffer;
                                    # 0: in a staged 16-bit epilogue array's slots, ``hopper.staging._stager``)
    epi_source: int = 0             # bytes per consumer for an epilogue array staged in shared memory
                                    # (``hopper.staging._stager``; 0: none)
    epi_lead: int = 8               # ... whose reads start this many K slices before a tile's end
    epi_held: int = 0               # ... and registers a consumer thread holds its later boxes in,
                                    # read with the first ones (0: copied into the slots as they free)
    epi_spread: bool = False        # ... its reads spread over those slices, a piece a slice (else
                                    # issued at once)
    pingpong: bool = False          # the consumers take alternate tiles, each a whole bm x bn one: one's
                                    # epilogue runs beside the other's mainloop (CUTLASS's ping-pong)
    group_m: int = 8                # tile order: groups of group_m block rows share B tiles in L2
    max_stages: int = 6
    min_blocks: int = 1
    bk: int = 64

    def __post_init__(self):
        self.validate()

    @property
    def threads(self) -> int:
        return WARPGROUP * (self.consumers + int(self.producer))

    @property
    def block_registers(self) -> int:
        """Registers a block is given at launch (its threads x the launch bound's count, in units
        of 8): what setmaxnreg moves between warpgroups; one that asks for more waits forever."""
        return self.launch_regs * self.threads

    @property
    def launch_regs(self) -> int:
        """Registers a thread is given at launch (the launch bound's count, in units of 8)."""
        return min(255, 65536 // (self.threads * self.min_blocks)) // 8 * 8

    @property
    def wg_m(self) -> int:
        """Rows of C per consumer warpgroup (ping-pong: the whole tile's)."""
        return self.bm if self.pingpong else self.bm // self.consumers

    @property
    def acc_regs(self) -> int:
        return (self.wg_m // 64) * self.bn // 2

    @property
    def promote_n(self) -> int:
        """Columns of C a promoted slice's sum is taken over at once: the tile's, or for a
        256-wide tile each half in turn (two full sets of its accumulators do not fit a
        consumer's registers)."""
        return self.bn // 2 if self.bn == 256 else self.bn

    @property
    def local_regs(self) -> int:
        """Registers a consumer thread holds in its accumulator array: ``acc_regs``; with
        ``promote``, a slice's sum over ``promote_n`` columns (fp8 wgmma adds in fewer bits than
        fp32: each slice's sum is added to fp32 registers); then ``epi_held``."""
        return self.acc_regs + ((self.wg_m // 64) * self.promote_n // 2 if self.promote else 0) + self.epi_held

    @property
    def stage_bytes(self) -> int:
        return self.tma_bytes + self.bn * self.bk * 2 * self.staged

    @property
    def tma_bytes(self) -> int:
        """Bytes TMA loads into a stage (A's and B's K slice, 16-bit inputs: ``layout.ITEMSIZE``):
        what the full barrier expects. A staged stage's second copy of B is not among them."""
        return (self.bm + self.bn) * self.bk * 2

    def k_slice(self, itemsize: int = 2) -> int:
        """Elements of K per slice for inputs of ``itemsize`` bytes: a slice is ``bk`` 16-bit
        elements, one 128-byte swizzled row, whatever the type (fp8: 128 elements), so stages,
        descriptors and shared memory are the same bytes for every input type."""
        return self.bk * 2 // itemsize

    @property
    def barrier_bytes(self) -> int:
        return 16 * self.max_stages          # a full and an empty mbarrier per stage

    def _smem(self, stages: int) -> SmemLayout:
        return SmemLayout(self.stage_bytes, stages, self.consumers if self.tma_store else 0, self.epi_boxes,
                          self.epi_source, self.barrier_bytes)

    @property
    def smem(self) -> SmemLayout:
        """The block's shared memory, laid out (``SmemLayout``)."""
        return self._smem(self.stages)

    @property
    def epilogue_bytes(self) -> int:
        """``epi_boxes`` 64-row x 128-byte output boxes per consumer (a ring: some fill while TMA
        stores the others), and after them ``epi_source`` bytes for a staged epilogue array."""
        return self._smem(0).epilogue_bytes

    @property
    def stages(self) -> int:
        """The stages the budget holds beside the rest of the layout (``max_stages`` at most)."""
        budget = min(SMEM_PER_BLOCK_MAX, SMEM_PER_SM // self.min_blocks - BLOCK_RESERVED) - self._smem(0).total
        return min(self.max_stages, budget // self.stage_bytes)

    @property
    def smem_bytes(self) -> int:
        return self.smem.total

    def validate(self) -> None:
        _need(self.bk == 64, "bk is 64: one 128-byte swizzled row of 16-bit elements per K slice")
        _need(self.consumers in (1, 2, 3), "consumers: 1 to 3 warpgroups")
        _need(not self.pingpong or (self.consumers == 2 and self.persistent and not (self.staged or self.epi_source)),
              "ping-pong: two consumer warpgroups of a persistent kernel take alternate tiles (no staged B or "
              "epilogue array)")
        _need(self.bm % (64 * (1 if self.pingpong else self.consumers)) == 0,
              f"bm={self.bm}: each of {self.consumers} consumer warpgroups needs a multiple of 64 rows")
        _need(self.bm <= 256, f"bm={self.bm}: a TMA box has at most 256 rows")
        _need(self.bn in WGMMA_N, f"bn={self.bn}: one of {WGMMA_N} (the wgmma widths in ptx/hopper.cu)")
        _need(self.acc_regs <= MAX_ACC_REGS, f"{self.acc_regs} accumulators per thread "
              f"(wg_m={self.wg_m} x bn={self.bn} / 128 threads) > {MAX_ACC_REGS}: they would spill")
        _need(self.threads <= MAX_THREADS, f"{self.threads} threads > {MAX_THREADS}")
        # A consumer needs its accumulators plus about 24 more registers, under the launch
        # bound's cap, or after setmaxnreg under the consumers' count: ptxas compiles the code
        # that follows setmaxnreg.inc to that count (a promoted 128x192 fp8 tile holds 192
        # accumulators without a spill in a kernel whose launch bound allows 168).
        cap = self.regs[1] or self.launch_regs
        _need(cap >= self.local_regs + 24, f"{self.threads} threads x {self.min_blocks} blocks "
              f"{'(setmaxnreg) ' if self.regs[1] else ''}leave {cap} registers per thread, too few for "
              f"{self.local_regs} accumulators")
        _need(not self.promote or self.producer, "promoted accumulation builds on the producer warpgroup")
        _need(self.scale_lead in (1, 2), f"scale_lead={self.scale_lead}: 1 or 2 slices")
        _need(self.promote_every in (1, 2), f"promote_every={self.promote_every}: 1 or 2 slices")
        _need(self.promote_every == 1 or self.promote_every < self.stages,
              f"promote_every={self.promote_every}: a group holds its stages until its add; {self.stages} stages")
        _need(self.promote_every == 1 or (self.promote and self.promote_n == self.bn and not self.pingpong),
              "promote_every > 1: a promoted tile added whole (not in halves), its consumers on one tile")
        _need(not self.promote or self.promote_n == self.bn or self.wg_m == 64,
              "a promoted tile taken in halves has one m64 block per consumer")
        p, c = self.regs
        if p or c:
            _need(self.producer, "setmaxnreg (regs) moves registers from a producer warpgroup: needs producer")
            _need(all(24 <= r <= 256 and r % 8 == 0 for r in (p, c)), f"regs={self.regs}: multiples of 8 in 24..256")
            _need((p + c * self.consumers) * WARPGROUP <= self.block_registers,
                  f"regs={self.regs}: more than the {self.block_registers} registers the block is given")
        _need(not self.persistent or self.producer, "the persistent rung builds on the producer warpgroup")
        _need(self.cluster in (1, 2), f"cluster={self.cluster}: 1 or 2 blocks")
        _need(self.cluster == 1 or self.producer, "clusters build on the producer warpgroup")
        _need(self.cluster == 1 or (self.bn // self.cluster) % 8 == 0,
              f"bn={self.bn} over a {self.cluster}-CTA cluster: each CTA's share of a k-major B must be whole "
              "8-row swizzle atoms")
        _need(not self.tma_store or self.producer, "the TMA-store epilogue builds on the producer warpgroup")
        _need(not self.tma_store or self.bn >= 64, f"bn={self.bn}: the TMA-store epilogue writes 128-byte boxes "
              "(narrower tiles store from registers: tma_store=False)")
        _need(not self.epi_held or (self.epi_source and self.epi_held % 4 == 0),
              f"epi_held={self.epi_held}: registers for a staged epilogue array's boxes (epi_source), whole n8 blocks")
        _need(not self.epi_held or self.epi_spread, "held boxes (epi_held) are read a piece a slice (epi_spread)")
        _need(not self.epi_spread or self.epi_source, "epi_spread: the reads of a staged epilogue array (epi_source)")
        _need(self.epi_boxes in (0, 1, 2, 4, 8), f"epi_boxes={self.epi_boxes}: 1, 2, 4 or 8 output boxes")
        _need(self.epi_boxes or self.epi_source,
              "epi_boxes=0: the output boxes are staged in a staged epilogue array's slots (epi_source)")
        _need(self.min_blocks >= 1 and self.min_blocks * self.threads <= 2048,
              f"min_blocks={self.min_blocks} x {self.threads} threads exceeds 2048 threads per SM")
        _need(self.group_m >= 1, "group_m must be >= 1")
        _need(self.stages >= 2, f"a {self.bm}x{self.bn}x{self.bk} stage is {self.stage_bytes} bytes: "
              f"not even two fit {self.min_blocks} block(s) per SM")

    def replace(self, **kw) -> "WgmmaConfig":
        return replace(self, **kw)


@dataclass(frozen=True)
class Variant:
    """One runnable GEMM: where it sits on its ladder, what it takes, and how it plans launches.

    ``plan(a, b, c, device)`` receives normalised operands (``numba_tc.arrays.Matrix``) and returns
    the launches (``plan.Step``) that compute C; ``api.gemm`` does all checking and allocation
    before, and caches the plan (``plan.Plan``). ``kernels(dtype)`` lists the kernels it runs for
    aligned operands of that input dtype in each layout (ahead-of-time compiles).
    """
    name: str
    ladder: str                       # "simt", "mma" or "wgmma"
    rung: int
    dtypes: Tuple[str, ...]           # input dtypes taken, e.g. ("float32",)
    min_cc: Tuple[int, int]           # compute capability needed
    note: str                         # what this rung adds over the one below
    plan: Callable = field(repr=False, compare=False)
    config: Optional[object] = None
    out_dtypes: Tuple[str, ...] = ("float32",)
    # check(a, b, c) -> None, or why these (normalised) operands cannot run on this variant (e.g.
    # TMA's 16-byte row alignment); "auto" then falls back to the next variant down.
    check: Optional[Callable] = field(default=None, repr=False, compare=False)
    max_cc: Optional[Tuple[int, int]] = None   # newest compute capability (wgmma is sm_90a only)
    kernels: Optional[Callable] = field(default=None, repr=False, compare=False)
    # plan(..., batch=) takes a batched product (``batch.Batch``) in one launch where it can
    batched: bool = False
    # auto(a, b, c) -> whether "auto" picks this variant for these operands (None: wherever
    # ``check`` allows); a variant named by the caller runs wherever ``check`` allows
    auto: Optional[Callable] = field(default=None, repr=False, compare=False)
    # plan(...) takes a float32 A read as the 16-bit input dtype (``prepared.prepare(..., a_cast=True)``)
    a_cast: bool = False

    def auto_takes(self, a, b, c) -> bool:
        """Whether "auto" may pick this variant for these operands (its ``auto`` rule)."""
        return self.auto is None or self.auto(a, b, c)

    def refuses(self, a, b, c) -> Optional[str]:
        return self.check(a, b, c) if self.check is not None else None

    def describe(self) -> str:
        """One line (name, ladder/rung, dtypes, the oldest GPU it runs on, what it adds), and the
        configuration on a second line when it has one."""
        low = max(tuple(self.min_cc), TOOLCHAIN_MIN_CC)
        cc = f"sm_{low[0]}{low[1]}" + ("a" if self.max_cc == self.min_cc else "+")
        line = f"{self.name:<16} {self.ladder}/{self.rung}  {','.join(self.dtypes):<10} {cc:<7} {self.note}"
        return line if self.config is None else f"{line}\n{'':<16} config: {self.config!r}"
