"""What a call costs a program: the warm host path at 64^3 beside torch.matmul, and the first
call of a fresh process with a cold and a warm kernel cache. Writes JSON records:

    python benchmarks/runtime.py --json benchmarks/results/runtime_h100.json [--profile]

host_us: ``gemm(a, b, variant=v)`` on 64x64x64 torch tensors and on Numba device arrays
(``"array": "torch"`` / ``"numba"``; the result allocated by the call, as a user writes it), in rounds alternating with ``torch.matmul(a, b)``: calls per second over a
batch of 1000, synchronized at the end, so the figure is the larger of the host's cost and the
GPU's; ``host_only_us`` times 200 calls without waiting for the GPU (the enqueue cost alone).
first_call: a new Python process imports numba_tc, makes its operands, and times its first
call; "cold": an empty cache folder (the kernel is compiled), "warm": the same folder again.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HOST = [("auto", "bfloat16"), ("hopper", "bfloat16"), ("mma_tuned", "bfloat16"), ("warptile", "float32")]
# Numba device arrays (no bfloat16 arrays in Numba: fp16 on the tensor-core rungs)
HOST_NUMBA = [("auto", "float16"), ("hopper", "float16"), ("mma_tuned", "float16"), ("warptile", "float32")]
FIRST = [("hopper", "bfloat16"), ("mma_tuned", "bfloat16"), ("warptile", "float32")]


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="also print cProfile's top functions of 2000 calls")
    args = ap.parse_args()
    from numba_tc.bench import commit_id
    meta = dict(commit=commit_id(), command="python benchmarks/runtime.py " + " ".join(sys.argv[1:]))
    recs = host_records(args.size, args.rounds, meta) + first_call_records(meta)
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
        with open(args.json, "w") as f:
            json.dump(recs, f, indent=1)
        print(f"records written to {args.json}")


if __name__ == "__main__":
    main()
