import sys, numpy as np, numba_tc
from numba_tc import verify
for v in sys.argv[1:]:
    for shp in [(256,256,256),(328,200,264)]:
        for lay in verify.LAYOUTS:
            r = verify.check(v, *shp, layout=lay, dtype="bfloat16")
            print(v, shp, lay, r, flush=True)
