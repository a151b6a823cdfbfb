"""Small configurations of the SIMT rungs for Numba's CUDA simulator, which runs every CUDA thread
as a Python thread: the rung's kernel factory with the rung's own switches (vector loads, k-major A,
warp tiles, two stages, the tail split), its tiles cut to one warp of threads, so that a ragged
problem of a few dozen rows spans several blocks and every edge path at a fraction of the threads.
The rungs' own configurations run in the simulator too (``test_simulator.test_rung_in_simulator``),
in the SASS tier and on the GPU. Imported by the simulator's interpreter (``conftest.run_in_simulator``)."""
from numba_tc import simt
from numba_tc.api import variant_from

SMALL = {
    "smem": simt.RUNG3.replace(bm=8, bn=8, threads=64, wm=0, wn=0),
    "blocktile1d": simt.RUNG4.replace(bm=16, bn=16, threads=32, wm=0, wn=0),
    "blocktile2d": simt.RUNG5.replace(bm=64, bn=32, threads=32, wm=0, wn=0),
    "vectorized": simt.RUNG6.replace(bm=64, bn=32, threads=32, wm=0, wn=0),
    "warptile": simt.RUNG7.replace(bm=32, bn=32, threads=32, wm=32, wn=32, min_blocks=1),
}


def small(name: str):
    """A variant of rung ``name``'s kernel in its small configuration (the untiled rungs, whose
    blocks are fixed, as they are)."""
    return variant_from(SMALL[name], f"small_{name}") if name in SMALL else name
