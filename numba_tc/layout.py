"""Layout facts of the tensor-core ladder, each stated once, as plain integer functions.

The same functions are used three ways: compiled into the kernels (``tensorcore.py`` wraps them as
inlined device functions, so the kernels' index math *is* this code), checked by the unit tests
(``tests/test_layout.py`` emulates ``ldmatrix`` and ``mma.sync`` in NumPy and checks these maps
against the PTX ISA), and drawn by the notebook.

Vocabulary:

* ``g = lane // 4`` and ``q = lane % 4``: a lane's group and its place in the group (PTX ISA
  9.7.14.5.8, "Matrix fragments for mma.m16n8k16" and 9.7.14.5.7 for m16n8k8).
* A 32-bit fragment register holds ``E`` elements: 2 for fp16/bf16, 1 for tf32. A 16-byte shared
  memory *chunk* holds ``EPC = 4 * E`` elements; one mma k-step is always 2 chunks of K
  (k16 for 16-bit types, k8 for tf32).
* Arguments are non-negative ints; masks and shifts stand for % and // by powers of two because
  Numba's signed floor division and modulo cost extra instructions in a kernel.
* A *stored tile* is how an operand tile sits in shared memory: rows of 16-byte chunks copied as
  they lie in global memory. An operand is *k-major* when K is its contiguous dimension (A
  row-major, B column-major) and *mn-major* otherwise.
"""
from __future__ import annotations

from numba.extending import register_jitable

__all__ = ["elems_per_reg", "elems_per_chunk", "mma_shape", "a_fragment", "b_fragment", "c_fragment",
           "ldsm_a", "ldsm_b", "ldsm_phase_banks", "swizzle", "chunk_offset", "bank", "CHUNK", "BANKS",
           "wgmma_desc", "wgmma_operand_offset", "mn_major_offset", "wgmma_d_fragment", "SW128", "ROW_BYTES", "ATOM_BYTES",
           "BOX_BYTES", "SWIZZLE_ALIGN", "OUT_BOX_BYTES", "SOURCE_ROWS", "SOURCE_WARPS", "source_offset",
           "source_warp", "source_box", "ITEMSIZE", "FP8", "compute_dtype", "align_up"]

CHUNK = 16      # bytes moved by one cp.async / one ldmatrix row
BANKS = 32      # shared-memory banks, 4 bytes wide
# Bytes per element of each dtype numba_tc reads or writes (tf32: float32 arrays on tensor cores)
ITEMSIZE = {"float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
FP8 = ("float8_e4m3fn", "float8_e5m2")     # the 8-bit floats of Hopper's wgmma (sm_89+ tensor cores)


def compute_dtype(input_dtype: str) -> str:
    """The tensor-core input type for an array dtype (both tensor-core ladders): fp32 arrays run
    as tf32."""
    return "tf32" if input_dtype == "float32" else input_dtype


@register_jitable
def elems_per_reg(itemsize: int) -> int:
    return 4 // itemsize


@register_jitable
def elems_per_chunk(itemsize: int) -> int:
    return CHUNK // itemsize


@register_jitable
def mma_shape(itemsize: int):
    """(m, n, k) of the mma.sync instruction for an input element size: m16n8k16 or m16n8k8 (tf32)."""
    return 16, 8, 8 * elems_per_reg(itemsize)


# ---------------------------------------------------------------------------------------------
# Fragment maps (which lane holds which element). reg = fragment register, e = element in it.
# ---------------------------------------------------------------------------------------------
@register_jitable
def a_fragment(lane, reg, e, E):
    """(row m, col k) of A element ``e`` of register ``reg`` (0..3) in ``lane``, E elements/register.

    Registers go top-left, bottom-left, top-right, bottom-right: reg % 2 picks rows +8,
    reg // 2 picks the second chunk of K."""
    return (lane >> 2) + 8 * (reg & 1), (reg >> 1) * 4 * E + (lane & 3) * E + e


@register_jitable
def b_fragment(lane, reg, e, E):
    """(row k, col n) of B element ``e`` of register ``reg`` (0..1): register r covers K chunk r."""
    return reg * 4 * E + (lane & 3) * E + e, lane >> 2


@register_jitable
def c_fragment(lane, i):
    """(row m, col n) of accumulator ``i`` (0..3) of the m16n8 tile: two adjacent columns, rows g and g+8."""
    return (lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)


# ---------------------------------------------------------------------------------------------
# ldmatrix addressing. ldmatrix.x4 loads four 8x8 16-bit matrices; lane l supplies the address of
# row l % 8 of matrix l // 8, and matrix j lands in register j. These give the stored-tile
# (row, chunk) each lane points at, relative to the fragment's origin, so that register j is
# exactly fragment register j above (16-bit types, and tf32 when k-major).
# ---------------------------------------------------------------------------------------------
@register_jitable
def ldsm_a(lane, kmajor):
    """A 16x(2 chunks) fragment. k-major (stored [m][k], plain ldmatrix): rows m, chunks of k.
    mn-major (stored [k][m], ldmatrix.trans): rows k, chunks of m."""
    if kmajor:
        return (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4
    return (lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1


@register_jitable
def ldsm_b(lane, kmajor):
    """Two adjacent n8 B fragments (registers 0-1 the first, 2-3 the second). k-major (stored
    [n][k], plain): rows n, chunks of k. mn-major (stored [k][n], .trans): rows k, chunks of n."""
    if kmajor:
        return (lane & 7) + 8 * (lane >> 4), (lane >> 3) & 1
    return (lane & 7) + 8 * ((lane >> 3) & 1), lane >> 4


# ---------------------------------------------------------------------------------------------
# Shared memory: swizzle and banks
# ---------------------------------------------------------------------------------------------
@register_jitable
def swizzle(row, chunk):
    """The XOR swizzle: chunk ``c`` of stored row ``r`` goes to chunk ``c ^ (r % 8)``.

    Rows are a multiple of 128 bytes (8 chunks), so the XOR stays inside the row. Eight rows read
    at the same logical chunk (one ldmatrix phase, or one column of a cp.async wave) then hit
    eight different chunk positions, i.e. all 32 banks, with no padding."""
    return chunk ^ (row & 7)


@register_jitable
def chunk_offset(row, chunk, chunks_per_row, swizzled):
    """Byte offset of 16-byte chunk (row, chunk) in a stored tile."""
    return (row * chunks_per_row + (swizzle(row, chunk) if swizzled else chunk)) * CHUNK


@register_jitable
def bank(byte_offset):
    """The 4-byte bank a shared-memory byte address falls in."""
    return (byte_offset >> 2) & (BANKS - 1)


def ldsm_phase_banks(ldsm, kmajor, phase, row0, chunk0, chunks_per_row, swizzled):
    """The banks each lane of one ldmatrix phase (lanes 8p..8p+7, one 16-byte row each) reads,
    for the fragment whose stored (row, chunk) origin is (row0, chunk0) in a tile of
    ``chunks_per_row`` chunks per row; ``ldsm`` is ``ldsm_a`` or ``ldsm_b``. A phase is free of
    bank conflicts when its 8 lanes cover all 32 banks."""
    out = []
    for lane in range(8 * phase, 8 * phase + 8):
        r, c = ldsm(lane, kmajor)
        off = chunk_offset(row0 + r, chunk0 + c, chunks_per_row, swizzled)
        out.append([bank(off + 4 * w) for w in range(4)])
    return out


# ---------------------------------------------------------------------------------------------
# wgmma (Hopper). Operand tiles arrive by TMA with the 128-byte swizzle, which is ``swizzle``
# above applied to absolute shared addresses (so tiles sit on 1024-byte boundaries): rows of 128
# bytes, 8-row atoms of 1024 bytes.
#   k-major tile (stored [mn][k], 64 k per row):   wgmma reads 64 (A) or N (B) rows from a start
#     address; SBO = 1024 (next 8 rows); LBO unused (one k16 step is 32 bytes of a row).
#   mn-major tile (stored [k][mn], boxes of 64 k rows x 64 mn, 8 KiB each): SBO = 1024 (next 8
#     k rows), LBO = 8192 (next 64 mn columns: the next box).
# ---------------------------------------------------------------------------------------------
SW128 = 1          # descriptor swizzle mode (bits 62-63): 1 = 128B, 2 = 64B, 3 = 32B, 0 = none
ROW_BYTES = 128    # one stored row of a 128B-swizzled tile
ATOM_BYTES = 1024  # 8 rows: the swizzle pattern's period, and SBO
BOX_BYTES = 8192   # a 64 x 64 box of 16-bit elements: LBO of an mn-major tile
SWIZZLE_ALIGN = ATOM_BYTES          # swizzled tiles start on this boundary in shared memory
OUT_BOX_BYTES = 64 * ROW_BYTES      # an epilogue box: 64 rows of C x 128 bytes, stored by TMA


# An epilogue array staged in shared memory (``hopper.staging._stager``): each warp copies its 16 rows of
# an output box, float32 or 16-bit, by 16-byte cp.async into a slot of its own, in the order its
# lanes read it: an n8 block's row (32 bytes of float32, 16 of 16-bit) by n8 block, then row half
# (rows g, g + 8), then row g. A lane's column pair of each block (``c_fragment``) is then its own
# base plus a constant (no address per element), and each read (8 bytes a lane by a half-warp,
# or 4 by a warp) covers the 32 banks once.
SOURCE_ROWS = 16
SOURCE_WARPS = 4                    # a consumer warpgroup's warps, each with slots of its own


@register_jitable
def source_offset(row, byte, item=4):
    """Byte offset of byte ``byte`` of row ``row`` (0..15) in a warp's staged epilogue slot of
    ``item``-byte elements (4 or 2): an n8 block's row is two 16-byte chunks of float32, one of
    16-bit."""
    if item == 4:
        return ((((byte >> 5) * 2 + (row >> 3)) * 8 + (row & 7)) * 2 + ((byte >> 4) & 1)) * 16 + (byte & 15)
    return (((byte >> 4) * 2 + (row >> 3)) * 8 + (row & 7)) * 16 + (byte & 15)


@register_jitable
def source_warp(warp, slot, nslot, boxes):
    """Byte offset of warp ``warp``'s first slot in its consumer's staged-array region (``slot``
    bytes a slot, ``nslot`` slots a warp of ``boxes`` output boxes): with a slot for every box
    the region is box-major (box t's warps' slots together, a 16-bit C's box t staged there,
    warp w's slot on its 16 rows of it), else a warp's two slots lie side by side."""
    return warp * (slot if nslot >= boxes else nslot * slot)


@register_jitable
def source_box(box, slot, nslot, boxes):
    """Byte offset of box ``box``'s slot from its warp's first (``source_warp``): box t in slot
    t, or with two slots in slot t % 2."""
    return box * SOURCE_WARPS * slot if nslot >= boxes else (box & 1) * slot


@register_jitable
def align_up(addr, align):
    """``addr`` rounded up to a multiple of ``align`` (a power of two)."""
    return (addr + align - 1) & ~(align - 1)


@register_jitable
def wgmma_desc(saddr, lbo, sbo, swizzle_mode):
    """The 64-bit shared-memory matrix descriptor of wgmma (PTX ISA 9.7.15.5.1): bits 0-13 start
    address >> 4, 16-29 LBO >> 4, 32-45 SBO >> 4, 49-51 base offset (0: tiles are 1024-aligned),
    62-63 swizzle mode. Addresses and offsets are bytes, multiples of 16, below 256 KiB."""
    return (((saddr & 0x3FFFF) >> 4) | (((lbo & 0x3FFFF) >> 4) << 16)
            | (((sbo & 0x3FFFF) >> 4) << 32) | ((swizzle_mode & 3) << 62))


@register_jitable
def wgmma_operand_offset(kmajor, mn, ks):
    """Byte offset, in a stored 128B-swizzled tile, of the wgmma operand starting at row/column
    ``mn`` (a multiple of 64) and k16 step ``ks`` of the 64-wide K slice."""
    if kmajor:
        return mn * ROW_BYTES + ks * 32
    return (mn >> 6) * BOX_BYTES + ks * 16 * ROW_BYTES


@register_jitable
def mn_major_offset(mn, k, itemsize):
    """Byte offset of element (mn, k) in a stored mn-major tile as TMA writes it (boxes of one
    K slice's rows, ``ROW_BYTES // itemsize`` mn each, 128B-swizzled, box after box along mn): for
    16-bit types the boxes of ``BOX_BYTES`` above; for tf32, 32 x 32, which wgmma cannot read
    mn-major, so each warp loads its A fragment from them (``hopper.mma.make_slice_group``)."""
    per_row = ROW_BYTES // itemsize
    byte = (mn & (per_row - 1)) * itemsize
    return (mn // per_row) * per_row * ROW_BYTES + chunk_offset(k, byte >> 4, 8, True) + (byte & 15)


@register_jitable
def wgmma_d_fragment(thread, r):
    """(row m, col n) of accumulator register ``r`` of warpgroup thread ``thread`` (0..127) for
    wgmma m64nNk16 (PTX ISA 9.7.15.5.1, "Matrix fragments for wgmma .m64nNk16"): warp w owns rows
    16w..16w+15, and its registers are the m16n8 accumulator fragments (``c_fragment``) of
    columns 0-7, 8-15, .. in turn (4 registers each)."""
    m, n = c_fragment(thread & 31, r & 3)
    return 16 * (thread >> 5) + m, 8 * (r >> 2) + n
