"""Which block computes which tile of C: the launch order, one function for every tiled kernel.

Blocks that run at the same time should share operand tiles in L2. Numbering tiles row by row
makes a wave of blocks stream all of B while reusing a few rows of A; numbering them in groups of
``group`` block rows (column by column inside a group) makes a wave cover a squarer patch of C,
so both operands' tiles are reused. ``group = 1`` is plain row-major order.
"""
from __future__ import annotations

from numba.extending import register_jitable

__all__ = ["cdiv", "tile_origin", "tile_order", "tail_split", "balanced_workers"]


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


def tail_split(tiles: int, slots: int, ktiles: int, min_ktiles: int = 8):
    """Split the tiles of a last, partial wave along K: ``(whole, parts, per_part)``.

    ``slots`` blocks run at once (SMs x resident blocks). With ``tiles = w * slots + rest``, the
    ``rest`` tiles of the last wave would run alone on ``rest`` SM slots while the others idle
    (4096^3 in 128x64 tiles on an H100: 2048 = 5 x 396 + 68). Instead, the first ``whole`` tiles
    get one block each, and each of the last ``rest`` gets ``parts`` blocks (at most ``slots``
    in all), each taking ``per_part`` consecutive K tiles (at least ``min_ktiles``) and adding
    its partial sum into C. ``(tiles, 1, ktiles)``: no split (a whole last wave, or K too short).
    """
    rest = tiles % slots if slots > 0 else 0
    parts = min(slots // rest, ktiles // min_ktiles) if rest else 1
    if parts < 2:
        return tiles, 1, ktiles
    per = cdiv(ktiles, parts)
    return tiles - rest, cdiv(ktiles, per), per


def balanced_workers(tiles: int, slots: int) -> int:
    """Persistent workers for ``tiles`` equal tiles when ``slots`` can run at once: the fewest
    that finish in as many rounds as ``slots`` workers would, so that every worker takes the same
    number of tiles (or one fewer). 4096^3 in 128x256 tiles is 512 tiles: 132 SMs need 4 rounds
    and so do 128 workers of exactly 4 tiles. The 4 idle SMs cost no time, and the others ran
    faster (H100, bf16: 8192^3 1.003x -> 1.02x cuBLAS, 4096^3 0.985x -> 0.99x; most likely the
    power budget shared by fewer busy SMs)."""
    if tiles <= 0 or slots <= 0:
        return max(0, min(tiles, slots))
    return cdiv(tiles, cdiv(tiles, slots))
