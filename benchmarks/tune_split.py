"""Every (tile, K splits) the top Hopper rung could run on a problem, timed against cuBLAS in the
same rounds, beside the cost model's estimate (``hopper.estimate``) and its choice: what the
model's constants are calibrated on (benchmarks/NOTES.md, session 12).

    python benchmarks/tune_split.py --json benchmarks/results/tune_split_h100.json
    python benchmarks/tune_split.py --swapped --tiles none --splits 1 2 3 4 --shapes 8x4096x11008 ...

``chosen``: ``pick_config``'s pick among the unswapped tiles; ``auto``: what ``gemm`` runs.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = ["96x5120x5120", "1x8192x8192", "32x8192x8192", "1024x1024x1024", "1536x1536x1536",
          "2048x5120x5120", "3000x3000x3000", "2056x4104x3000", "256x256x131072", "2560x2560x16384"]
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    p.add_argument("--budget", type=float, default=0.25)
    p.add_argument("--tiles", nargs="+", help='only these tiles of RUNG7_CONFIGS, e.g. "64x128" "128x256c2"')
    p.add_argument("--splits", nargs="+", type=int, default=SPLITS)
    p.add_argument("--swapped", action="store_true", help="also the swapped decode tile (hopper.SWAP_CONFIGS) "
                   "for problems of at most hopper.cost.SWAP_ROWS rows")
    p.add_argument("--json")
    args = p.parse_args(argv)
    import torch
    import numba_tc
    from numba_tc import bench, hopper
    stamp = bench.stamp(args.json)            # gpu and a clean commit, before measuring
    from numba_tc.schedule import cdiv
    from numba_tc.tensormap import tma_rows_fast
    gpu = hopper.gpu_of(torch.cuda.current_device())       # (the cost model's figures of this GPU)
    sms = gpu.sms
    rows = []
    for s in args.shapes:
        m, n, k = (int(x) for x in s.split("x"))
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        out, ref_out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16), torch.empty(m, n, device="cuda",
                                                                                        dtype=torch.bfloat16)
        slow_b = not tma_rows_fast(b.data_ptr(), b.stride(0), 2)
        chosen = hopper.pick_config(hopper.RUNG7_CONFIGS, m, n, k, slow_b, gpu)
        ref = a.double() @ b.double()
        auto = numba_tc.explain(a, b, out=out)
        print(f"{s:>16} auto: {auto}", flush=True)
        narrow = [c for c in hopper.SWAP_CONFIGS if c.bn >= m][:1] if args.swapped and m <= hopper.cost.SWAP_ROWS else []
        for cfg in hopper.RUNG7_CONFIGS + tuple(narrow):
            swap = cfg in narrow                    # C^T = B^T A^T: the model's M and N swap
            name = f"{cfg.bm}x{cfg.bn}" + (f"c{cfg.cluster}" if cfg.cluster > 1 else "")
            if not swap and args.tiles and name not in args.tiles:
                continue
            ktiles = cdiv(k, cfg.bk)
            for sp in args.splits:
                if sp not in hopper.split_counts(ktiles, sp):
                    continue
                mm, nn = (n, m) if swap else (m, n)
                if hopper.split_units(cfg, mm, nn, k, sp)[2] > 4 * sms:
                    continue
                v = numba_tc.variant_from(cfg, f"tune_{cfg.bm}x{cfg.bn}c{cfg.cluster}s{sp}{'w' * swap}", splits=sp)
                numba_tc.gemm(a, b, v, out=out)
                err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
                ms, cms = bench.time_interleaved([lambda: numba_tc.gemm(a, b, v, out=out),
                                                  lambda: torch.matmul(a, b, out=ref_out)], budget_s=args.budget)
                r = {"m": m, "n": n, "k": k, "tile": f"{cfg.bm}x{cfg.bn}" + " swapped" * swap, "cluster": cfg.cluster,
                     "splits": sp,
                     "ms": ms, "cublas_ms": cms, "ratio": cms / ms, "rel_err": err,
                     "model_ms": 1e3 * hopper.estimate(cfg, mm, nn, k, sp, gpu),
                     "chosen": not swap and (cfg, sp) == chosen, "auto": auto, "slow_b": slow_b,
                     **stamp}
                rows.append(r)
                print(f"{s:>16} {r['tile']:>7} c{cfg.cluster} s{sp:<3} {ms * 1e3:8.1f} us  ratio {r['ratio']:.3f}  "
                      f"model {r['model_ms'] * 1e3:8.1f} us{'  <- chosen' if r['chosen'] else ''}"
                      f"{'' if err < 1e-2 else f'  WRONG {err:.1e}'}", flush=True)
        best = max((r for r in rows if (r["m"], r["n"], r["k"]) == (m, n, k)), key=lambda r: r["ratio"])
        print(f"{s:>16} best {best['tile']} c{best['cluster']} s{best['splits']} ratio {best['ratio']:.3f}", flush=True)
        del ref
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
