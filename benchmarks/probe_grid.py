"""How many blocks a persistent grid should have: `hopper` with one block per SM (all 132 on an
H100) against the balanced grid (`schedule.balanced_workers`: the fewest blocks that take the
tiles in as many rounds, 128 at 4096^3 and 8192^3), NN and NT, each against cuBLAS in
alternating rounds. Session 8 (H100): every SM 0.985x / 1.003x, balanced 0.990x / 1.024x at
4096^3 / 8192^3 (benchmarks/results/tune_wgmma_h100.txt).

    python benchmarks/probe_grid.py [--sizes 4096 8192] [--passes 2]
"""
import argparse

from numba_tc import bench, hopper, schedule

GRIDS = {"every SM": lambda tiles, slots: min(tiles, slots), "balanced": schedule.balanced_workers}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192])
    p.add_argument("--passes", type=int, default=2)
    args = p.parse_args()
    for _ in range(args.passes):
        for name, workers in GRIDS.items():
            hopper.balanced_workers = workers              # what hopper.work_plan calls
            for layout in ("NN", "NT"):
                recs = bench.run(["hopper"], [(s, s, s) for s in args.sizes], dtype="bfloat16",
                                 layout=layout, progress=False, log=lambda *a: None)
                for r in recs:
                    print(f"{name:9s} {layout} {r.m}^3: {r.tflops:.1f} TFLOP/s, cuBLAS "
                          f"{r.cublas_tflops:.1f}, ratio {r.ratio:.3f}", flush=True)
    hopper.balanced_workers = schedule.balanced_workers


if __name__ == "__main__":
    main()
