"""One launch of ``gemm`` with features.py's residual epilogue (or plain), for Nsight Compute
(``--profile-from-start off``: only the launch between cudaProfilerStart and Stop is profiled):
    ncu --clock-control none --profile-from-start off python benchmarks/profile_epilogue.py staged 4096 4096 4096 [lead]
Modes: plain; unstaged (``hopper.set_policy(staged=False)``); staged (its later boxes copied as
the slots free, ``hopper.planner.STAGED_HOLD = 0``); held (they are held in registers); pp_plain and pp_resid: plain
and residual on a forced 128x128 ping-pong tile (``WgmmaConfig.pingpong``)."""
import sys

import torch

import numba_tc
from numba_tc import hopper

from features import scaled_residual

mode = sys.argv[1]
m, n, k = (int(x) for x in sys.argv[2:5])
if len(sys.argv) > 5:                   # the staged reads' lead (``STAGED_LEAD``, held: ``HELD_LEAD``)
    hopper.planner.STAGED_LEAD = hopper.planner.HELD_LEAD = int(sys.argv[5])
hopper.set_policy(staged=mode != "unstaged")
hopper.planner.STAGED_HOLD = 64 if mode == "held" else 0
v = numba_tc.variant_from(hopper.RUNG7.replace(bn=128, max_stages=6, pingpong=True), "pp", splits=1) \
    if mode.startswith("pp_") else "auto"
a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16) / k ** 0.5
res = torch.randn(m, n, device="cuda", dtype=torch.float32)
out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
kw = {} if mode in ("plain", "pp_plain") else dict(epilogue=scaled_residual, epilogue_args=(res, 0.5))
for _ in range(3):
    numba_tc.gemm(a, b, v, out=out, **kw)
torch.cuda.synchronize()
torch.cuda.profiler.start()
numba_tc.gemm(a, b, v, out=out, **kw)
torch.cuda.synchronize()
torch.cuda.profiler.stop()
print(mode, numba_tc.explain(a, b, v, out=out, **kw))
