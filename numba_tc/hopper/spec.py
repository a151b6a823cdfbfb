"""What one Hopper kernel is: a ``KernelSpec``, its configuration and modes as data, checked when
made (each check names the rule it enforces), with the facts the kernel's parts are built from
derived from it (CuTe DSL's config -> ``_setup_attributes`` -> ``is_valid``). Its repr is the
kernel's identity (``jit.kernel_factory``'s key). The planner and the ahead-of-time lists make
their specs with one constructor, ``KernelSpec.product``, so that they cannot disagree on what a
plan launches."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .. import layout
from ..config import WgmmaConfig
from ..epilogue import BLOCK_SCALES, PLAIN, Epilogue

__all__ = ["KernelSpec", "split_part"]


def split_part(epi: Epilogue) -> Epilogue:
    """The part of ``epi`` a split-K kernel applies itself (block-wise scales, in its mainloop):
    the fix-up does the rest. Its run-time values are a prefix of ``epi``'s (``epilogue.TERMS``
    puts C's shape and the scales first): a split-K launch passes that prefix (``planner``)."""
    return BLOCK_SCALES if epi.scales == "block" else PLAIN


@dataclass(frozen=True)
class KernelSpec:
    """The Hopper kernel of ``cfg`` for inputs computed as ``dtype`` (``dtype_b``: B's where it is
    not A's, fp8 e4m3 times e5m2), ``out_dtype`` out, A and B column-major where ``ta``/``tb``.

    vc: C's column pairs are aligned for paired stores. tma_c: C can be written by TMA (used when
    the configuration has ``tma_store``). epi: the epilogue. split: split-K, each unit a tile's
    run of ``kper`` K slices, its fp32 partial sum written to its split's plane of C (M x ldc,
    planes M * ldc apart) without an epilogue (``fixup`` adds the planes, then applies it).
    batch: a batched product, every operand's tensor map 3-D (the batch last), a unit a tile of
    one batch's product. async_b: an n-major tf32 B (which wgmma cannot read) copied k-major
    into each stage by the producer warpgroup's cp.async (``producer._async_loader``), from its
    address and pitch (no tensor map). trans_c: the kernel's M x N product is C's transpose
    (C = B^T A^T's operands swapped, so that an n-major tf32 B becomes an mn-major A, read
    through registers), stored from registers at C + (n ldc + m). tail: the tiles of the grid's
    last, partial round split along K (``kper`` slices each), their fp32 partial sums written to
    blocks at P (``kernel.make_consumer``), the whole tiles before them stored to C as usual."""
    cfg: WgmmaConfig
    dtype: str
    out_dtype: str
    ta: bool
    tb: bool
    vc: bool
    tma_c: bool = False
    epi: Epilogue = PLAIN
    split: bool = False
    batch: bool = False
    dtype_b: Optional[str] = None
    async_b: bool = False
    trans_c: bool = False
    tail: bool = False

    def __post_init__(self):
        why = self.invalid()
        if why:
            raise ValueError(why)

    @classmethod
    def product(cls, cfg: WgmmaConfig, dtype: str, out_dtype: str, ta: bool, tb: bool, *, pairs: bool = True,
                tma_c: bool = False, epi: Epilogue = PLAIN, splits: int = 1, **modes) -> "KernelSpec":
        """The kernel a plan launches for its product: ``pairs``, C's column pairs are aligned;
        with ``splits`` > 1 a split-K kernel, whose planes are fp32, pair-aligned, stored from
        registers, with the part of ``epi`` it applies itself (``split_part``); a swapped
        product (``trans_c``) stores its transpose one element at a time. ``modes``: the other
        fields."""
        swap = modes.get("trans_c", False)
        if splits > 1:
            return cls(cfg, dtype, "float32", ta, tb, not swap, False, split_part(epi), True, **modes)
        return cls(cfg, dtype, out_dtype, ta, tb, pairs and not swap, tma_c, epi, False, **modes)

    def invalid(self) -> Optional[str]:
        """The first rule this spec breaks, or None."""
        cfg = self.cfg
        if self.split and (self.out_dtype != "float32" or self.tma_c or self.epi not in (PLAIN, BLOCK_SCALES)
                           or not cfg.persistent):
            return ("a split-K kernel is persistent and writes plain fp32 planes from registers (block-wise scales "
                    "applied)")
        if self.batch and (self.split or not (self.tma_c and cfg.tma_store) or not cfg.persistent or cfg.cluster > 1):
            return "a batched kernel is persistent, without clusters or split-K, and stores C by TMA"
        if self.async_b and (self.dtype != "tf32" or self.tb or self.batch or cfg.promote or cfg.cluster > 1
                             or not cfg.producer or not cfg.staged):
            return ("B by cp.async: an n-major tf32 B, in a kernel with a producer warpgroup and staged stages, "
                    "without clusters or batches")
        if self.trans_c and (self.tma_c or self.batch):
            return "C's transpose is stored from registers, without batches"
        if self.tail and (self.split or self.batch or self.async_b or self.trans_c or cfg.promote
                          or not cfg.persistent):
            return "a tail-split kernel is persistent, of unpromoted whole tiles stored as they lie"
        return None

    def is_valid(self) -> bool:
        return self.invalid() is None

    # derived attributes ----------------------------------------------------------------------
    @property
    def item(self) -> int:
        """Bytes of an input element."""
        return layout.ITEMSIZE[self.dtype]

    @property
    def bk(self) -> int:
        """Elements of K a slice (``WgmmaConfig.k_slice``)."""
        return self.cfg.k_slice(self.item)

    @property
    def a_kmajor(self) -> bool:
        """A lies k-major in shared memory (K contiguous): row-major A."""
        return not self.ta

    @property
    def b_kmajor(self) -> bool:
        """B lies k-major in shared memory: column-major B, or one the producer transposes."""
        return self.tb or self.async_b

    @property
    def a_bytes(self) -> int:
        """Bytes of A's K slice in a stage (B's follows it)."""
        return self.cfg.bm * self.bk * self.item

    @property
    def box_store(self) -> bool:
        """C goes out through shared-memory boxes and TMA stores."""
        return self.cfg.tma_store and self.tma_c

    @property
    def whole_tiles(self) -> bool:
        """Each unit is a whole tile stored to C as it lies by TMA (an epilogue array may be staged)."""
        return self.tma_c and not (self.batch or self.split or self.trans_c or self.tail)
