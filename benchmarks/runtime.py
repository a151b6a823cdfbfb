"""What a call costs a program: the warm host path at 64^3 beside torch.matmul, and the first
call of a fresh process with a cold and a warm kernel cache. Writes JSON records:

    python benchmarks/runtime.py --json benchmarks/results/runtime_h100.json [--profile]

host_us: ``gemm(a, b, variant=v)`` on 64x64x64 torch tensors and on Numba device arrays
(``"array": "torch"`` / ``"numba"``; the result allocated by the call, as a user writes it), in rounds alternating with ``torch.matmul(a, b)``: calls per second over a
batch of 1000, synchronized at the end, so the figure is the larger of the host's cost and the
GPU's; ``host_only_us`` times 200 calls without waiting for the GPU (the enqueue cost alone).
first_call: a new Python process imports numba_tc, makes its operands, and times its first
call; "cold": an empty cache folder (the kernel is compiled), "warm": the same folder again.

--modes aot (ahead of time): ``python -m numba_tc compile`` into an empty cache folder (the
variants ``auto`` can pick on this GPU, or every variant with ``--aot-variants all``), recorded
as ``{"kind": "aot_compile", "kernels", "seconds", ...}``; then, each in a fresh process, the
first ``gemm(a, b, variant="auto")`` on torch tensors of ragged sizes whose rows are not 16-byte
aligned, in float32, tf32 (``allow_tf32=True``), bfloat16 and float16: ``{"kind": "first_call",
"cache": "aot", "variant": "auto", "dtype", "m", "n", "k", "seconds", ...}``, with ``compiled``,
the kernels that call still had to compile (0 when the ahead-of-time set is complete):

    python benchmarks/runtime.py --modes aot --json benchmarks/results/runtime_h100.json

The records of the modes run replace those of the same modes in the --json file; the others
there are kept.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HOST = [("auto", "bfloat16"), ("hopper", "bfloat16"), ("mma_tuned", "bfloat16"), ("warptile", "float32")]
# Numba device arrays (no bfloat16 arrays in Numba: fp16 on the tensor-core rungs)
HOST_NUMBA = [("auto", "float16"), ("hopper", "float16"), ("mma_tuned", "float16"), ("warptile", "float32")]
FIRST = [("hopper", "bfloat16"), ("mma_tuned", "bfloat16"), ("warptile", "float32")]
# First calls after an ahead-of-time compile: (m, n, k, layout of A and B), ragged, and each with
# rows that are not 16 bytes apart in every dtype (an odd K or N; a column-major operand's rows
# are its columns); decoding, huge K, tiny, and every layout
AOT_SHAPES = [(4095, 4097, 4099, "NN"), (1000, 1001, 999, "NN"), (7777, 1111, 3333, "TN"),
              (1, 4097, 4095, "NN"), (33, 8191, 4097, "NT"), (257, 259, 65537, "NN"),
              (5001, 3000, 7001, "TT"), (3, 5, 7, "NN")]
AOT_DTYPES = ("float32", "tf32", "bfloat16", "float16")


def _per_call_us(fn, n, sync):
    import torch
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    if sync:
        torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


def _operands(array, size, dtype):
    """(a, b) for numba_tc and (ta, tb) for torch.matmul: the same values."""
    import torch
    ta, tb = (torch.randn(size, size, device="cuda", dtype=getattr(torch, dtype)) for _ in range(2))
    if array == "torch":
        return (ta, tb), (ta, tb)
    from numba import cuda
    return (cuda.as_cuda_array(ta), cuda.as_cuda_array(tb)), (ta, tb)


def host_records(size, rounds, meta):
    import torch
    import numba_tc
    out = []
    for array, variant, dtype in [("torch",) + h for h in HOST] + [("numba",) + h for h in HOST_NUMBA]:
        (a, b), (ta, tb) = _operands(array, size, dtype)
        ours = lambda: numba_tc.gemm(a, b, variant=variant)          # noqa: E731
        theirs = lambda: torch.matmul(ta, tb)                        # noqa: E731
        for _ in range(50):
            ours(), theirs()
        us, tus, host = [], [], []
        for _ in range(rounds):                                       # alternating rounds
            us.append(_per_call_us(ours, 1000, True))
            tus.append(_per_call_us(theirs, 1000, True))
            host.append(_per_call_us(ours, 200, False))
        rec = dict(kind="host_us", array=array, variant=variant, dtype=dtype, m=size, n=size, k=size,
                   us_per_call=round(statistics.median(us), 2), torch_us_per_call=round(statistics.median(tus), 2),
                   host_only_us=round(statistics.median(host), 2), **meta)
        print(f"{array:<6} {variant:<10} {dtype:<9} {rec['us_per_call']:7.1f} us/call  (host only {rec['host_only_us']:.1f})  "
              f"torch.matmul {rec['torch_us_per_call']:.1f}", flush=True)
        out.append(rec)
    return out


def first_call_records(meta):
    from numba_tc.bench import first_call
    out = []
    for variant, dtype in FIRST:
        with tempfile.TemporaryDirectory() as d:
            for state in ("cold", "warm"):
                r = first_call(variant, dtype, cache_dir=d)
                out.append(dict(kind="first_call", variant=variant, dtype=dtype, cache=state,
                                seconds=round(r["seconds"], 3), import_seconds=round(r["import_seconds"], 3),
                                rel_err=r["rel_err"], **meta))
                print(f"{variant:<10} {dtype:<9} first call, {state} cache: {r['seconds']:.3f} s "
                      f"(import {r['import_seconds']:.2f} s, rel_err {r['rel_err']:.1e})", flush=True)
    return out


def aot_records(meta, which):
    """``python -m numba_tc compile`` into an empty cache folder, then each shape's first call
    with ``auto`` in a fresh process (see the module's docstring)."""
    import torch
    from numba_tc.bench import first_call
    out = []
    cc = torch.cuda.get_device_capability()
    from numba_tc.aot import auto_variants
    names = auto_variants(cc, AOT_DTYPES) if which == "auto" else []
    cmd = [sys.executable, "-m", "numba_tc", "compile", "--no-progress"] + (["--variants", *names] if names else ["--all"])
    shown = "python -m numba_tc compile" + (" --variants " + " ".join(names) if names else " --all")
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NUMBA_TC_CACHE_DIR=d, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t = time.perf_counter()
        p = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if p.returncode:
            raise RuntimeError(f"{shown} failed:\n{p.stdout}\n{p.stderr}")
        summary = p.stdout.strip().splitlines()[-1]
        kernels = sum(len(fs) for _, _, fs in os.walk(d))
        out.append(dict(kind="aot_compile", variants=names or "all", compile_command=shown, kernels=kernels,
                        seconds=round(wall, 1), jobs=os.cpu_count(), summary=summary, **meta))
        print(f"{shown}: {kernels} kernels in {wall:.0f} s ({summary})", flush=True)
        for m, n, k, layout in AOT_SHAPES:
            for dtype in AOT_DTYPES:
                r = first_call("auto", dtype, cache_dir=d, shape=(m, n, k), layout=layout)
                out.append(dict(kind="first_call", cache="aot", variant="auto", dtype=dtype, m=m, n=n, k=k,
                                layout=layout, seconds=round(r["seconds"], 4),
                                import_seconds=round(r["import_seconds"], 3), rel_err=r["rel_err"],
                                compiled=len(r["compiled"]), compiled_kernels=r["compiled"],
                                compile_command=shown, **meta))
                print(f"auto {dtype:<9} {m}x{n}x{k} {layout}: first call after compile {r['seconds'] * 1e3:8.1f} ms, "
                      f"{len(r['compiled'])} kernels compiled in the call, rel_err {r['rel_err']:.1e}", flush=True)
    return out


def _mode(rec) -> str:
    if rec.get("kind") == "host_us":
        return "host"
    if rec.get("kind") == "aot_compile" or rec.get("cache") == "aot":
        return "aot"
    return "first"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top functions of 2000 calls")
    ap.add_argument("--modes", nargs="+", choices=("host", "first", "aot"), default=["host", "first"],
                    help="host_us records, first calls with a cold and a warm cache, first calls after an "
                    "ahead-of-time compile (default: host first)")
    ap.add_argument("--aot-variants", choices=("auto", "all"), default="auto",
                    help="what --modes aot compiles: the variants auto can pick here (default), or all")
    args = ap.parse_args()
    from numba_tc.bench import stamp
    meta = dict(stamp(args.json), command="python benchmarks/runtime.py " + " ".join(sys.argv[1:]))
    recs = ((host_records(args.size, args.rounds, meta) if "host" in args.modes else [])
            + (first_call_records(meta) if "first" in args.modes else [])
            + (aot_records(meta, args.aot_variants) if "aot" in args.modes else []))
    if args.profile:
        import cProfile
        import pstats
        import torch
        import numba_tc
        a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            numba_tc.gemm(a, a)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
        from numba import cuda
        na = cuda.as_cuda_array(a.half())
        numba_tc.gemm(na, na)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(2000):
            numba_tc.gemm(na, na)
        prof.disable()
        print("Numba device arrays (fp16):")
        pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        kept = []
        if os.path.exists(args.json):
            with open(args.json) as f:
                kept = [r for r in json.load(f) if _mode(r) not in args.modes]
        with open(args.json, "w") as f:
            json.dump(kept + recs, f, indent=1)
        print(f"records written to {args.json}")


if __name__ == "__main__":
    main()
