"""What the tensor cores can give through mma.sync at all: a register-only microkernel.

Every warp runs ``CHAINS`` independent accumulator chains of ``mma.sync.m16n8k16`` on fragments
that never leave registers: no memory traffic, no address math, only the instruction's own
throughput. The mma.sync ladder is measured against this ceiling as well as against cuBLAS
(which uses wgmma on Hopper, a faster instruction: the gap between the two ceilings is why the
Hopper ladder exists).

    python -m numba_tc.ceiling            # prints TFLOP/s for bf16 and fp16
"""
from __future__ import annotations

from numba import cuda, float32, uint32

from .intrinsics import f32_ptr, ptr
from .jit import device, kernel, kernel_factory, unrolled
from .primitives import mma_bf16_m16n8k16, mma_f16_m16n8k16

__all__ = ["ceiling_kernel", "measure", "CHAINS"]

CHAINS = 8                     # independent mma chains per warp: enough to cover its latency
NACC = 4 * CHAINS
_MMA = {"bfloat16": mma_bf16_m16n8k16, "float16": mma_f16_m16n8k16}
FLOP_PER_MMA = 2 * 16 * 8 * 16


@device
def _chain(c, pacc, pa, pb, MMA):
    MMA(pacc, 4 * c, pa, 0, pb, 0)


_chains = unrolled(_chain, 16)


@kernel_factory
def ceiling_kernel(dtype: str):
    MMA = _MMA[dtype]

    def mma_ceiling(out, iters):
        fa = cuda.local.array(4, uint32)
        fb = cuda.local.array(2, uint32)
        acc = cuda.local.array(NACC, float32)
        for i in range(4):                       # 1.0 + small, per-thread: nothing folds away
            fa[i] = uint32(0x3F803F80) + uint32(cuda.threadIdx.x & 7)
        for i in range(2):
            fb[i] = uint32(0x3F803F80)
        for i in range(NACC):
            acc[i] = float32(0)
        pa, pb, pacc = ptr(fa), ptr(fb), ptr(acc)
        for _ in range(iters):
            _chains(CHAINS, pacc, pa, pb, MMA)
        s = float32(0)
        for i in range(NACC):
            s += acc[i]
        f32_ptr(out)[cuda.grid(1)] = s           # keeps every mma live

    return kernel(mma_ceiling, ("i64", "i64"), launch_bounds=(128, 4))


def measure(dtype: str = "bfloat16", iters: int = 4096, blocks_per_sm: int = 4, budget_s: float = 0.5) -> float:
    """TFLOP/s of the register-only mma.sync kernel on the current GPU (CUDA-event median)."""
    import numpy as np
    from . import driver
    from .api import default_device
    from .bench import time_gpu
    from .plan import Plan, Step
    dev = default_device()
    grid = driver.sm_count(dev) * blocks_per_sm
    out = cuda.device_array(grid * 128, np.float32)
    plan = Plan([Step(ceiling_kernel(dtype), grid, 128, lambda pa, pb, pc: (pc, iters))], dev, False)
    addr = out.device_ctypes_pointer.value

    def run():
        with driver.on_device(dev):
            plan.run((0, 0, addr), 0)
    ms = time_gpu(run, budget_s=budget_s)
    flop = FLOP_PER_MMA * CHAINS * iters * grid * 4          # 4 warps per block
    return flop / ms / 1e9


if __name__ == "__main__":
    import sys
    from numba import config
    if config.ENABLE_CUDASIM or not cuda.is_available():
        why = "Numba's CUDA simulator is on (NUMBA_ENABLE_CUDASIM)" if config.ENABLE_CUDASIM else "no CUDA GPU here"
        print(f"numba_tc.ceiling: {why}; the mma.sync ceiling is measured on a GPU of compute capability "
              "8.0 or newer. The ceilings recorded on an H100 are in benchmarks/results/hopper_h100.log.",
              file=sys.stderr)
        sys.exit(1)
    for dt in ("bfloat16", "float16"):
        print(f"mma.sync m16n8k16 {dt} ceiling: {measure(dt):.1f} TFLOP/s")
