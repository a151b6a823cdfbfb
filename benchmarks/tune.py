"""The tuners: candidate configurations of each ladder, the top Hopper rung's (tile, K splits)
against its cost model, and the batched kernel's tiles, each timed against cuBLAS (or torch.bmm)
in the same rounds.

    python benchmarks/tune.py simt --sizes 4096 6144 [--only 2 24] [--json out.json]
    python benchmarks/tune.py mma --dtype bfloat16 --sizes 4096 8192
    python benchmarks/tune.py wgmma --dtype bfloat16 --sizes 4096 8192 --only 1 3 9
    python benchmarks/tune.py split --json benchmarks/results/tune_split_h100.json
    python benchmarks/tune.py split --swapped --tiles none --splits 1 2 3 4 --shapes 8x4096x11008 ...
    python benchmarks/tune.py batched --json benchmarks/results/tune_batched_h100.json

simt, mma, wgmma: the candidates are data (``CANDIDATES`` below): per ladder, a base configuration and
the fields each candidate sets over it, under an id that names it ``tune_<id>``. Each runs as an
unregistered variant (``numba_tc.variant_from``) through the same checks and timing as the ladder;
a winner becomes the rung's configuration by hand, with its numbers in benchmarks/NOTES.md.

split: every (tile, K splits) the top rung could run on a problem, beside the cost model's
estimate (``hopper.estimate``) and its choice (``chosen``: ``pick_config``'s pick among the
unswapped tiles; ``auto``: what ``gemm`` runs): what the model's constants are calibrated on.

batched: the top rung's non-cluster tiles and output-box rings for batched products, against
``torch.bmm`` (bf16 torch tensors through ``gemm``): what the batched kernel's choice is
calibrated on.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numba_tc  # noqa: E402
from numba_tc import bench, config  # noqa: E402

CANDIDATES = json.loads(r"""
{
  "about": [
    "Candidate configurations for benchmarks/tune.py. Per ladder: the config class, the dtype",
    "tune.py runs when --dtype is not given, a base, and the candidates, each the fields it sets",
    "over the base. A candidate's id names it tune_<id> in tune.py's output, in results/ and in",
    "NOTES.md: ids are never renumbered or reused (add new candidates at the end). Notes refer",
    "to other candidates by id. Measured numbers are in NOTES.md and results/, not here."
  ],
  "simt": {
    "config": "SimtConfig",
    "dtype": "float32",
    "base": {"bm": 128, "bn": 128, "threads": 256, "warptile": true, "a_kmajor": true, "vector_loads": true, "stages": 2},
    "candidates": [
      {"id": 0, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 1, "a_pad": 4}, "note": "64x32 warp tiles, bk 16, 1 block per SM"},
      {"id": 1, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 2, "a_pad": 4}, "note": "as 0, 2 blocks per SM"},
      {"id": 2, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 3, "bn": 64, "threads": 128, "a_pad": 4}, "note": "128x64 blocks of 128 threads, 3 blocks per SM (rung 7's tile shape)"},
      {"id": 3, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 4, "bn": 64, "threads": 128, "a_pad": 4}, "note": "128x64 blocks, 4 blocks per SM"},
      {"id": 4, "set": {"bk": 32, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 3, "bn": 64, "threads": 128}, "note": "128x64 blocks, bk 32, 3 blocks per SM, A unpadded"},
      {"id": 5, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 32, "wn": 64, "wniter": 4, "min_blocks": 3, "bm": 64, "threads": 128}, "note": "64x128 blocks of 32x64 warp tiles, 3 blocks per SM, A unpadded"},
      {"id": 6, "set": {"bk": 16, "tm": 8, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 2, "a_pad": 4}, "note": "8x4 outputs per thread tile (tm 8), 2 blocks per SM"},
      {"id": 7, "set": {"bk": 8, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 2, "a_pad": 4}, "note": "bk 8, 2 blocks per SM"},
      {"id": 8, "set": {"bk": 8, "tm": 4, "tn": 4, "wm": 64, "wn": 64, "wniter": 4, "min_blocks": 1, "bm": 256, "a_pad": 4}, "note": "128 outputs per thread, cuBLAS sgemm's shape (256x128x8, warps 4x2): 256x128 blocks, bk 8"},
      {"id": 9, "set": {"bk": 8, "tm": 4, "tn": 8, "wm": 64, "wn": 64, "wniter": 2, "min_blocks": 1, "bm": 256, "a_pad": 4}, "note": "128 outputs per thread: 256x128 blocks, 4x8 thread tiles, bk 8"},
      {"id": 10, "set": {"bk": 8, "tm": 4, "tn": 4, "wm": 64, "wn": 64, "wniter": 4, "min_blocks": 1, "bn": 256, "a_pad": 4}, "note": "128 outputs per thread: 128x256 blocks, bk 8"},
      {"id": 11, "set": {"bk": 8, "tm": 4, "tn": 4, "wm": 64, "wn": 64, "wniter": 4, "min_blocks": 2, "threads": 128, "a_pad": 4}, "note": "128 outputs per thread: 128x128 blocks of 128 threads, 2 blocks per SM, bk 8"},
      {"id": 12, "set": {"bk": 8, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 1, "a_pad": 4}, "note": "after the whole-tile loop (NOTES session 6): 128x128 blocks, bk 8, 1 block per SM"},
      {"id": 13, "set": {"bk": 8, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 3, "bn": 64, "threads": 128, "a_pad": 4}, "note": "after the whole-tile loop: 128x64 blocks, bk 8, 3 blocks per SM"},
      {"id": 14, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 3, "bm": 64, "threads": 128, "a_pad": 4}, "note": "64x128 blocks of 64x32 warp tiles, 3 blocks per SM"},
      {"id": 15, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 32, "wn": 64, "wniter": 2, "min_blocks": 3, "bn": 64, "threads": 128, "a_pad": 4}, "note": "128x64 blocks of 32x64 warp tiles, 3 blocks per SM"},
      {"id": 16, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 32, "wn": 64, "wniter": 2, "min_blocks": 1, "a_pad": 4}, "note": "128x128 blocks of 32x64 warp tiles, 1 block per SM"},
      {"id": 17, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 2, "bm": 64, "threads": 128, "a_pad": 4}, "note": "64x128 blocks at 2 blocks per SM (more, smaller waves than 3 blocks per SM)"},
      {"id": 18, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 2, "bn": 64, "threads": 128, "a_pad": 4}, "note": "128x64 blocks at 2 blocks per SM"},
      {"id": 19, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 64, "wniter": 4, "min_blocks": 1, "bm": 256}, "note": "128 outputs per thread with the whole-tile loop, bk 16 (8 at bk 16; NOTES session 7): 256x128 blocks, A unpadded (48 KiB of static shared memory)"},
      {"id": 20, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 64, "wniter": 4, "min_blocks": 1, "bn": 256}, "note": "as 10 at bk 16: 128x256 blocks"},
      {"id": 21, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 64, "wniter": 4, "min_blocks": 2, "threads": 128, "a_pad": 4}, "note": "as 11 at bk 16: 128x128 blocks of 128 threads, 2 blocks per SM"},
      {"id": 22, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 3, "bn": 64, "threads": 128, "a_pad": 4, "vector_stores": false}, "note": "2 with 4-byte C stores (accumulators out of B's register banks; NOTES session 7)"},
      {"id": 23, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 3, "bn": 64, "threads": 128, "a_pad": 4, "split_tail": true}, "note": "2 with the last partial wave split along K"},
      {"id": 24, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 3, "bn": 64, "threads": 128, "a_pad": 4, "vector_stores": false, "split_tail": true}, "note": "2 with both: rung 7 (warptile)"},
      {"id": 25, "set": {"bk": 16, "tm": 4, "tn": 4, "wm": 64, "wn": 32, "wniter": 2, "min_blocks": 1, "a_pad": 4, "vector_stores": false}, "note": "0 with 4-byte C stores"}
    ]
  },
  "mma": {
    "config": "MmaConfig",
    "history": "ids 0-7 named other candidates at 8a322db, which results/tune_mma_h100.json measured (results/README.md lists them)",
    "dtype": "float16",
    "base": {"async_copy": true, "group_m": 8, "frag_prefetch": true},
    "candidates": [
      {"id": 0, "set": {"bm": 128, "bn": 256, "wm": 64, "wn": 64, "min_blocks": 1}, "note": "128x256 blocks of 64x64 warp tiles"},
      {"id": 1, "set": {"bm": 256, "bn": 128, "wm": 64, "wn": 64, "min_blocks": 1}, "note": "256x128 blocks: rung 5 (mma_tuned)"},
      {"id": 2, "set": {"bm": 128, "bn": 128, "wm": 64, "wn": 64, "min_blocks": 2}, "note": "128x128 blocks, 2 blocks per SM"},
      {"id": 3, "set": {"bm": 256, "bn": 128, "wm": 64, "wn": 64, "min_blocks": 1, "max_stages": 3}, "note": "1 with at most 3 stages"},
      {"id": 4, "set": {"bm": 256, "bn": 128, "wm": 64, "wn": 64, "min_blocks": 1, "group_m": 16}, "note": "1 with groups of 16 block rows"},
      {"id": 5, "set": {"bm": 256, "bn": 128, "wm": 64, "wn": 64, "min_blocks": 1, "group_m": 4}, "note": "1 with groups of 4 block rows"},
      {"id": 6, "set": {"bm": 64, "bn": 256, "wm": 64, "wn": 64, "min_blocks": 2}, "note": "64x256 blocks, 2 blocks per SM"},
      {"id": 7, "set": {"bm": 256, "bn": 128, "wm": 64, "wn": 64, "min_blocks": 1, "frag_prefetch": false}, "note": "1 without fragment prefetch (rung 5 before it; ab_mma.py makes the same pair)"}
    ]
  },
  "wgmma": {
    "config": "WgmmaConfig",
    "dtype": "bfloat16",
    "base": {"bm": 128, "bn": 256, "consumers": 2, "producer": true, "regs": [40, 232], "persistent": true},
    "candidates": [
      {"id": 0, "set": {}, "note": "rung 5 (wgmma_persistent)"},
      {"id": 1, "set": {"tma_store": true}, "note": "TMA-store epilogue without the cluster: rung 7's 128x256 configuration (hopper)"},
      {"id": 2, "set": {"cluster": 2}, "note": "2-CTA cluster, B multicast: rung 6 (wgmma_cluster)"},
      {"id": 3, "set": {"cluster": 2, "tma_store": true}, "note": "cluster and TMA-store epilogue: rung 7 as first built (93811b9)"},
      {"id": 4, "set": {"cluster": 2, "tma_store": true, "max_stages": 3}, "note": "3 with at most 3 stages"},
      {"id": 5, "set": {"cluster": 2, "tma_store": true, "group_m": 16}, "note": "3 with groups of 16 block rows"},
      {"id": 6, "set": {"cluster": 2, "tma_store": true, "regs": [24, 240]}, "note": "3 with setmaxnreg 24 / 240"},
      {"id": 7, "set": {"bm": 256, "bn": 128, "cluster": 2, "tma_store": true}, "note": "256x128 tiles with cluster and TMA-store epilogue"},
      {"id": 8, "set": {"cluster": 2, "tma_store": true, "group_m": 4}, "note": "3 with groups of 4 block rows"},
      {"id": 9, "set": {"tma_store": true, "max_stages": 3}, "note": "1 with at most 3 stages (knobs re-measured with interleaved timing, NOTES session 6)"},
      {"id": 10, "set": {"tma_store": true, "group_m": 16}, "note": "1 with groups of 16 block rows"},
      {"id": 11, "set": {"tma_store": true, "group_m": 4}, "note": "1 with groups of 4 block rows"},
      {"id": 12, "set": {"tma_store": true, "regs": [24, 240]}, "note": "1 with setmaxnreg 24 / 240"},
      {"id": 13, "set": {"tma_store": true, "max_stages": 3, "epi_boxes": 4}, "note": "1 with 3 stages and a ring of 4 output boxes (balanced grid, NOTES session 8)"},
      {"id": 14, "set": {"tma_store": true, "epi_boxes": 1}, "note": "1 with one output box per consumer"},
      {"id": 15, "set": {"cluster": 2, "tma_store": true, "max_stages": 3, "epi_boxes": 4}, "note": "3 with 3 stages and a ring of 4 output boxes"},
      {"id": 16, "set": {"bm": 64, "bn": 128, "consumers": 1, "tma_store": true}, "note": "64x128, one consumer: twice the tiles of 128x128 for short waves (1024^3)"},
      {"id": 17, "set": {"bm": 64, "consumers": 1, "tma_store": true}, "note": "64x256, one consumer (hopper's decoding tile) on short waves"},
      {"id": 18, "set": {"bn": 128, "max_stages": 6, "tma_store": true}, "note": "128x128 with up to 6 stages (hopper's tile for few tiles)"},
      {"id": 19, "set": {"bm": 64, "bn": 128, "consumers": 1, "tma_store": true, "max_stages": 8}, "note": "16 with up to 8 stages"}
    ]
  }
}
""")
SPLIT_DOC = "Every (tile, K splits) of the top Hopper rung against cuBLAS, beside the cost model"
BATCHED_DOC = "Tiles and output-box rings for batched products against torch.bmm"


def load_ladders(data=CANDIDATES):
    """{ladder: {"config", "dtype", "base", "candidates"}} from the candidates."""
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def build(ladder, candidate):
    """The candidate's configuration; raises numba_tc.ConfigError if it cannot work."""
    fields = dict(ladder["base"], **candidate["set"])
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()}   # regs: a pair
    return getattr(config, ladder["config"])(**fields)


def candidates_main(argv=None):
    ladders = load_ladders()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("ladder", choices=sorted(ladders))
    p.add_argument("--sizes", nargs="*", type=int, default=[4096], help="N for N^3 problems")
    p.add_argument("--dtype", default=None, help="default: the ladder's dtype in the candidates file")
    p.add_argument("--only", nargs="*", type=int, help="candidate ids to run (default: all)")
    p.add_argument("--json", help="merge records into this JSON file")
    args = p.parse_args(argv)
    if args.json:
        bench.clean_commit(args.json)         # records in benchmarks/results name a clean commit
    ladder = ladders[args.ladder]
    variants = []
    for cand in ladder["candidates"]:
        if args.only and cand["id"] not in args.only:
            continue
        name = f"tune_{cand['id']}"
        try:
            cfg = build(ladder, cand)
        except numba_tc.ConfigError as e:
            print(f"{name}: invalid ({e})")
            continue
        variants.append(numba_tc.variant_from(cfg, name=name))
        print(f"{name}: {cand['set']}  smem={cfg.smem_bytes}B stages={getattr(cfg, 'stages', '')}  "
              f"({cand['note']})")
    recs = bench.run(variants, [(s, s, s) for s in args.sizes], dtype=args.dtype or ladder["dtype"],
                     command=" ".join(sys.argv), progress=False)
    print(bench.table(recs))
    if args.json:
        bench.merge_records(args.json, recs)


SPLIT_SHAPES = ["96x5120x5120", "1x8192x8192", "32x8192x8192", "1024x1024x1024", "1536x1536x1536",
          "2048x5120x5120", "3000x3000x3000", "2056x4104x3000", "256x256x131072", "2560x2560x16384"]
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def split_main(argv=None):
    p = argparse.ArgumentParser(description=SPLIT_DOC)
    p.add_argument("--shapes", nargs="+", default=SPLIT_SHAPES)
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


BATCHED_SHAPES = ["512x1024x1024x128", "64x2048x2048x128", "512x1024x128x1024", "8x2048x4096x4096"]


def batched_candidates(tiles=(), configs=()):
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


def batched_main(argv=None):
    p = argparse.ArgumentParser(description=BATCHED_DOC)
    p.add_argument("--shapes", nargs="+", default=BATCHED_SHAPES)
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
        cands = batched_candidates(args.tiles, args.configs)
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


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("split", "batched"):
        return (split_main if sys.argv[1] == "split" else batched_main)(sys.argv[2:])
    return candidates_main()


if __name__ == "__main__":
    main()
