"""Which block computes which tile of C: the launch order, one function for every tiled kernel.

Blocks that run at the same time should share operand tiles in L2. Numbering tiles row by row
makes a wave of blocks stream all of B while reusing a few rows of A; numbering them in groups of
``group`` block rows (column by column inside a group) makes a wave cover a squarer patch of C,
so both operands' tiles are reused. ``group = 1`` is plain row-major order.
"""
from __future__ import annotations

from numba.extending import register_jitable

__all__ = ["cdiv", "tile_origin", "tile_order"]


def cdiv(a: int, b: int) -> int:
    """Tiles of size b needed to cover a (ceiling division)."""
    return -(-a // b)


@register_jitable
def tile_origin(pid, grid_m, grid_n, group, bm, bn):
    """(row, column) of C where tile number ``pid`` starts (grid_m x grid_n tiles of bm x bn)."""
    per_group = group * grid_n
    first_m = (pid // per_group) * group
    rows_here = min(grid_m - first_m, group)
    inside = pid - (pid // per_group) * per_group
    return (first_m + inside % rows_here) * bm, (inside // rows_here) * bn


def tile_order(grid_m: int, grid_n: int, group: int):
    """The (tile row, tile column) of every pid in launch order (for tests and the notebooks)."""
    return [tile_origin(p, grid_m, grid_n, group, 1, 1) for p in range(grid_m * grid_n)]
