"""The every-shape sweep: ``numba_tc.gemm`` with ``variant="auto"`` on torch tensors against cuBLAS
(``torch.matmul``), timed in alternating rounds on the same inputs, each result checked against
float64 first (a wrong result is recorded with no time). Records go into a results file with the
configuration ``auto`` chose (``numba_tc.explain``), and for M <= 128 the device-memory bandwidth
reached (the operands read once and C written once, over the time).

    python benchmarks/sweep.py --json benchmarks/results/h100.json --plot benchmarks/results/sweep_auto_h100.png
    python benchmarks/sweep.py --shapes 256x256x131072 1x8192x8192 --dtypes bfloat16
    python benchmarks/sweep.py --shapes 4096x4096x4096 8192x8192x8192 --dtypes tf32 --layouts NN TN

dtype ``tf32``: float32 tensors with ``allow_tf32=True``, against cuBLAS with TF32 allowed
(``torch.backends.cuda.matmul.allow_tf32``); checked to 1e-3 (16-bit inputs: 1e-2). Layouts as
``verify.LAYOUTS`` (A then B, "N" row-major, "T" a transposed view of a row-major tensor).
"""
from __future__ import annotations

import argparse
import math
import os
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# the 24 shapes: decoding, small and short-wave, huge K, large, ragged, unaligned rows
SHAPES = ["1x8192x8192", "8x4096x11008", "32x8192x8192", "96x5120x5120", "1024x1024x1024",
          "1536x1536x1536", "3000x3000x3000", "256x256x131072", "1024x1024x32768", "768x2304x24576",
          "2560x2560x16384", "4608x4608x4608", "2048x5120x5120", "8192x14336x4096", "16384x16384x4096",
          "65536x256x4096", "256x65536x4096", "4095x4097x4099", "5000x3000x7000", "2056x4104x3000",
          "1000x32000x4096", "7777x1111x3333", "4096x4096x4096", "8192x8192x8192"]


def parse(s):
    m, n, k = (int(x) for x in s.lower().split("x"))
    return m, n, k


def _operand(torch, rows, cols, trans, dt):
    return torch.randn(cols, rows, device="cuda", dtype=dt).t() if trans else torch.randn(rows, cols, device="cuda",
                                                                                            dtype=dt)


def measure(torch, m, n, k, dtype, budget, layout="NN"):
    import numba_tc
    from numba_tc import bench
    tf32 = dtype == "tf32"
    dt = torch.float32 if tf32 else getattr(torch, dtype)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = _operand(torch, m, k, layout[0] == "T", dt)
    b = _operand(torch, k, n, layout[1] == "T", dt)
    ours = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
    ref_out = torch.empty_like(ours)
    config = numba_tc.explain(a, b, out=ours, allow_tf32=tf32)
    numba_tc.gemm(a, b, out=ours, allow_tf32=tf32)
    ref = a.double() @ b.double()
    err = float(torch.linalg.norm(ours.double() - ref) / torch.linalg.norm(ref))
    torch.matmul(a, b, out=ref_out)
    cublas_err = float(torch.linalg.norm(ref_out.double() - ref) / torch.linalg.norm(ref))
    del ref
    rec = {"variant": "auto", "config": config, "ladder": "auto", "dtype": dtype, "m": m, "n": n, "k": k,
           "layout": layout, "rel_err": err, "cublas_rel_err": cublas_err}
    if not err <= (1e-3 if tf32 else 1e-2):
        return dict(rec, tflops=0.0, cublas_tflops=None, ratio=None)
    ms, cms = bench.time_interleaved([lambda: numba_tc.gemm(a, b, out=ours, allow_tf32=tf32),
                                      lambda: torch.matmul(a, b, out=ref_out)], budget_s=2 * budget)
    flop = 2.0 * m * n * k
    rec.update(tflops=flop / ms / 1e9, cublas_tflops=flop / cms / 1e9, ratio=cms / ms, ms=ms, cublas_ms=cms)
    if m <= 128:
        moved = a.element_size() * (m * k + k * n) + ours.element_size() * m * n
        rec.update(hbm_tbps=moved / ms / 1e9, cublas_hbm_tbps=moved / cms / 1e9)
    return rec


def plot(records, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dtypes = list(dict.fromkeys(r["dtype"] for r in records))
    shapes = list(dict.fromkeys(f"{r['m']}x{r['n']}x{r['k']}" for r in records))
    fig, ax = plt.subplots(figsize=(min(16, max(8, 0.3 * len(shapes) * len(dtypes))), 5))
    w = 0.8 / len(dtypes)
    for j, dt in enumerate(dtypes):
        rows = {f"{r['m']}x{r['n']}x{r['k']}": r for r in records if r["dtype"] == dt}
        ys = [rows[s]["ratio"] or 0 if s in rows else 0 for s in shapes]
        xs = [i + (j - (len(dtypes) - 1) / 2) * w for i in range(len(shapes))]
        bars = ax.bar(xs, ys, w, label=dt)
        for x, y in zip(xs, ys):
            ax.text(x, y + 0.02, f"{y:.2f}", ha="center", va="bottom", fontsize=6, rotation=90)
    ax.axhline(1.0, color="k", lw=0.8, ls="--", label="cuBLAS")
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("numba_tc auto / cuBLAS (time ratio)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=SHAPES, metavar="MxNxK")
    p.add_argument("--dtypes", nargs="+", default=["bfloat16", "float16"], choices=["bfloat16", "float16", "tf32"])
    p.add_argument("--layouts", nargs="+", default=["NN"], choices=["NN", "NT", "TN", "TT"])
    p.add_argument("--budget", type=float, default=0.6, help="seconds of timing per shape and side")
    p.add_argument("--json", help="merge the records into this results file")
    p.add_argument("--plot", help="write the sweep picture here")
    args = p.parse_args(argv)
    import torch
    from numba_tc import bench
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    command = "python benchmarks/sweep.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    stamp = bench.stamp(args.json)            # gpu and a clean commit, before measuring
    device, commit = stamp["gpu"], stamp["commit"]
    records = []
    for dt in args.dtypes:
        for lay in args.layouts:
            for s in args.shapes:
                m, n, k = parse(s)
                r = measure(torch, m, n, k, dt, args.budget, lay)
                r.update(device=device, command=command, **stamp)
                records.append(r)
                bw = f"  {r['hbm_tbps']:.2f} TB/s (cuBLAS {r['cublas_hbm_tbps']:.2f})" if "hbm_tbps" in r else ""
                print(f"{dt:<9} {lay} {s:>17}  {r['tflops']:7.1f} TF/s  cuBLAS {r['cublas_tflops'] or 0:7.1f}  "
                      f"ratio {r['ratio'] or 0:.3f}  err {r['rel_err']:.1e} (cuBLAS {r['cublas_rel_err']:.1e})  "
                      f"[{r['config']}]{bw}", flush=True)
                torch.cuda.empty_cache()
    for dt in args.dtypes:
        for lay in args.layouts:
            mine = [r for r in records if r["dtype"] == dt and r["layout"] == lay]
            ratios = [r["ratio"] for r in mine if r["ratio"]]
            if ratios:
                g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
                print(f"{dt} {lay}: geometric mean {g:.3f}x cuBLAS over {len(ratios)} shapes, lowest "
                      f"{min(ratios):.3f}; {sum(1 for r in mine if not r['ratio'])} failed")
    if args.json:
        bench.merge_records(args.json, records)
        print(f"records merged into {args.json}")
    if args.plot:
        plot(records, args.plot, f"numba_tc auto vs cuBLAS, {device}, {commit}")
        print(f"picture: {args.plot}")


if __name__ == "__main__":
    main()
