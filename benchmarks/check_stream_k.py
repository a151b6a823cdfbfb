"""One checked stream-K launch of a `hopper` configuration, with few resident blocks forced so
that a small problem gets whole tiles and stream-K pieces (stream-K is off in `hopper`; see
benchmarks/NOTES.md, session 8). For compute-sanitizer:

    compute-sanitizer --tool racecheck python benchmarks/check_stream_k.py CONFIG M N K RESIDENT
    (CONFIG: index into hopper.RUNG7_CONFIGS; e.g. 0 904 520 1096 10, or 2 904 520 1096 16)
"""
import sys

import numba_tc
from numba_tc import hopper, verify
from numba_tc.config import Variant

i, m, n, k, resident = map(int, sys.argv[1:6])
cfg = hopper.RUNG7_CONFIGS[i].replace(stream_k=True)
launch = hopper._launch(cfg)
print("blocks, whole tiles, K slices per run:", hopper.work_plan(cfg, m, n, k, resident))
numba_tc.register(Variant("stream_k_check", "wgmma", 90, ("bfloat16",), (9, 0), "stream-K check",
                          lambda a, b, c, s: launch(a, b, c, s, resident=resident), cfg,
                          ("float32", "bfloat16"), max_cc=(9, 0)))
r = verify.check("stream_k_check", m, n, k, layout="NN", dtype="bfloat16", out_dtype="bfloat16")
print(r)
sys.exit(0 if r.ok else 1)
