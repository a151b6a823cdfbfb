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
           "ldsm_a", "ldsm_b", "swizzle", "chunk_offset", "bank", "CHUNK", "BANKS"]

CHUNK = 16      # bytes moved by one cp.async / one ldmatrix row
BANKS = 32      # shared-memory banks, 4 bytes wide


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
