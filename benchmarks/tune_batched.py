"""Tiles and output-box rings for batched products, each timed against ``torch.bmm`` in the same
rounds (bf16, torch tensors through ``gemm``): what the batched kernel's choice is calibrated on.

    python benchmarks/tune_batched.py --json benchmarks/results/tune_batched_h100.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = ["512x1024x1024x128", "64x2048x2048x128", "512x1024x128x1024", "8x2048x4096x4096"]


def candidates(tiles=(), configs=()):
    """The top rung's non-cluster tiles (and ``tiles``, "BMxBN" made from its 128x128 one, and
    ``configs``, "key=value, ..." of ``hopper.RUNG7.replace``), each with its own output ring and
    one twice as deep."""
    from numba_tc import hopper
    cfgs = [cfg for cfg in hopper.RUNG7_CONFIGS if cfg.cluster == 1]
    base = next(cfg for cfg in cfgs if (cfg.bm, cfg.bn) == (128, 128))
    cfgs += [base.replace(bm=int(t.split("x")[0]), bn=int(t.split("x")[1])) for t in tiles]
    cfgs += [hopper.RUNG7.replace(**eval(f"dict({spec})")) for spec in configs]
    return [c for cfg in cfgs for c in (cfg, cfg.replace(epi_boxes=2 * cfg.epi_boxes))]


def hopper_cfg(plan):
    """The configuration an ``explain`` line of a batched ``hopper`` plan names (by its tile;
    64x128 is the short-K one, ``hopper.SHORT_K``, or with ping-pong ``hopper.NARROW_N``)."""
    from numba_tc import hopper
    if "ping-pong" in plan:
        return hopper.NARROW_N
    bm, bn = (int(x) for x in plan.split(": ")[1].split()[0].split("x"))
    if (bm, bn) == (hopper.SHORT_K.bm, hopper.SHORT_K.bn):
        return hopper.SHORT_K
    return next(c for c in hopper.RUNG7_CONFIGS if (c.bm, c.bn) == (bm, bn) and c.cluster == 1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=SHAPES)
    p.add_argument("--budget", type=float, default=0.2)
    p.add_argument("--tiles", nargs="*", default=[], help="more tiles, BMxBN (from the 128x128 configuration)")
    p.add_argument("--configs", nargs="*", default=[],
                   help='more configurations, "key=value, ..." of hopper.RUNG7.replace (e.g. min_blocks=2)')
    p.add_argument("--only-configs", action="store_true", help="time only --configs (and auto's choice)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    import torch
    import numba_tc
    from numba_tc import bench
    stamp = bench.stamp(args.json)            # gpu and a clean commit, before measuring
    rows = []
    for s in args.shapes:
        nb, m, n, k = (int(x) for x in s.split("x"))
        a = torch.randn(nb, m, k, device="cuda", dtype=torch.bfloat16)
        b = (torch.randn(nb, n, k, device="cuda", dtype=torch.bfloat16).transpose(1, 2) if n > k else
             torch.randn(nb, k, n, device="cuda", dtype=torch.bfloat16))
        out, ref_out = (torch.empty(nb, m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        ref = torch.bmm(a.double(), b.double())
        chosen = numba_tc.explain(a, b, out=out)
        cands = candidates(args.tiles, args.configs)
        if args.only_configs:
            cands = [None] + cands[-2 * len(args.configs):]       # (None: auto)
        for i, cfg in enumerate(cands):
            v = "auto" if cfg is None else numba_tc.variant_from(
                cfg, f"tb_{cfg.bm}x{cfg.bn}e{cfg.epi_boxes}b{cfg.min_blocks}{'pp' * cfg.pingpong}_{i}", splits=1)
            cfg = cfg or hopper_cfg(chosen)
            path = numba_tc.explain(a, b, v, out=out)
            out.fill_(float("nan"))
            numba_tc.gemm(a, b, v, out=out)
            err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
            assert err < 1e-2, (s, path, err)
            ms, rms = bench.time_interleaved([lambda: numba_tc.gemm(a, b, v, out=out),
                                              lambda: torch.bmm(a, b, out=ref_out)], budget_s=args.budget)
            r = {"batch": nb, "m": m, "n": n, "k": k, "tile": f"{cfg.bm}x{cfg.bn}", "pingpong": cfg.pingpong,
                 "epi_boxes": cfg.epi_boxes,
                 "stages": cfg.stages, "path": path, "chosen": chosen, "ms": ms, "bmm_ms": rms, "ratio": rms / ms,
                 "rel_err": err, **stamp}
            rows.append(r)
            r["min_blocks"] = cfg.min_blocks
            print(f"{s} {r['tile']}{' ping-pong' * cfg.pingpong} boxes {cfg.epi_boxes} stages {cfg.stages} "
                  f"blocks/SM {cfg.min_blocks}: "
                  f"ratio {r['ratio']:.3f} "
                  f"err {err:.1e} ({path}; auto: {chosen})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
