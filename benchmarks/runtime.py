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

--modes cuda_core: per call, today's path against cuda.core's, for issue 54's decision (adopt
cuda.core where it costs at most 1 us a call more): a loaded numba_tc kernel (warptile, 64^3,
int64 parameters) launched by ``driver.launch`` (parameters packed once, and packed each call)
and by ``cuda.core.launch`` with a ``LaunchConfig``; a cubin loaded and its kernel found
(cuModuleLoadData + cuModuleGetFunction against ``ObjectCode.from_cubin(...).get_kernel``); a
fp16 tensor map encoded (``tensormap.encode`` against ``StridedMemoryView.as_tensor_map``, where
cuda.core has it). Prints a table; ``{"kind": "cuda_core", "what", "path", "us", "best_us",
"difference_us", "within"}`` records (an ``error`` where cuda.core lacks the call). Under a minute:

    python benchmarks/runtime.py --modes cuda_core --json benchmarks/results/runtime_h200.json

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


# ---------------------------------------------------------------------------------------------
# --modes cuda_core: today's driver path against cuda.core's, per call

CORE_CALLS = 200          # launches a round (enqueued without waiting: the host's cost alone)
CORE_ROUNDS = 15
CORE_LOADS = 40           # module loads
CORE_MAPS = 2000          # tensor maps encoded
ADOPT_US = 1.0            # issue 54: adopt cuda.core where it costs at most 1 us a call more


def _core():
    """cuda.core's namespace (the package, or its older ``experimental`` one) and its version."""
    import importlib
    try:
        import cuda.core as core
        if hasattr(core, "launch"):
            return core, getattr(core, "__version__", "?")
    except ImportError:
        pass
    core = importlib.import_module("cuda.core.experimental")
    import cuda.core
    return core, getattr(cuda.core, "__version__", "?")


class _Handle:
    """A raw CUstream as cuda.core's stream protocol gives one."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def _round_us(fn, calls: int, rounds: int, sync) -> dict:
    """Per-call microseconds of ``fn()`` (``calls`` a round, then ``sync()``): median and best."""
    per = []
    for _ in range(rounds):
        sync()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
    sync()
    return {"us": round(statistics.median(per), 3), "best_us": round(min(per), 3)}


def _warptile_step():
    """A loaded numba_tc kernel of int64 parameters only (warptile, 64^3 float32 on torch
    tensors) and the values of one launch: (step, packed parameter values, device)."""
    import torch
    import numba_tc
    from numba_tc import calls
    a, b = (torch.randn(64, 64, device="cuda") for _ in range(2))
    numba_tc.gemm(a, b, variant="warptile")
    call = calls._lookup(a, b, "warptile", None, None, False, "torch", None)[0]
    step = call.plan.steps[0]
    if len(call.plan.steps) != 1 or step.workspace:
        raise RuntimeError(f"warptile at 64^3 planned {call.plan.describe()!r}: one launch without scratch expected")
    out = torch.empty(64, 64, device="cuda")
    return step, step.args(a.data_ptr(), b.data_ptr(), out.data_ptr(), 0), call.device, (a, b, out)


def _launches(core, stream_handle, meta) -> list:
    """Launch of one loaded kernel: ``driver.launch`` with parameters packed once (what a repeated
    call runs), packing included, and cuda.core's ``launch`` with a ``LaunchConfig`` (its
    arguments converted per call, as it does)."""
    import torch
    from numba_tc import driver
    step, values, dev, keep = _warptile_step()
    (grid, block), sync = step._dims, torch.cuda.synchronize
    p = step.params()
    addr = p.pack(values)
    recs = []
    with driver.on_device(dev):
        recs.append(dict(what="launch", path="driver", **_round_us(
            lambda: driver.launch(step.fn, grid, block, step.smem, stream_handle, addr), CORE_CALLS, CORE_ROUNDS, sync)))
        recs.append(dict(what="launch, parameters packed each call", path="driver", **_round_us(
            lambda: driver.launch(step.fn, grid, block, step.smem, stream_handle, p.pack(values)),
            CORE_CALLS, CORE_ROUNDS, sync)))
        try:
            dv = core.Device(dev)
            dv.set_current()
            kernel = _core_kernel(core, step.fn)
            stream = (core.Stream.from_handle(stream_handle) if hasattr(core.Stream, "from_handle")
                      else dv.create_stream(_Handle(stream_handle)))
            cfg = core.LaunchConfig(grid=(grid[0], grid[1], 1), block=(block[0], block[1], 1), shmem_size=step.smem)
            args = tuple(int(v) for v in values)
            core.launch(stream, cfg, kernel, *args)
            recs.append(dict(what="launch", path="cuda_core", **_round_us(
                lambda: core.launch(stream, cfg, kernel, *args), CORE_CALLS, CORE_ROUNDS, sync)))
        except Exception as e:                      # (an API this version lacks: said, not hidden)
            recs.append(dict(what="launch", path="cuda_core", error=f"{type(e).__name__}: {e}"))
    del keep
    return [dict(r, kind="cuda_core", kernel=step.kernel.name, grid=list(grid), block=list(block),
                 params=len(values), **meta) for r in recs]


def _core_kernel(core, fn):
    """cuda.core's Kernel of a loaded numba_tc kernel: its cubin loaded through cuda.core (its
    ``Kernel.from_handle`` takes a CUkernel, and ``driver.load`` holds a module's CUfunction)."""
    from numba_tc.build import ENTRY, cubin
    from numba_tc.driver import arch, capability
    return core.ObjectCode.from_cubin(cubin(fn.kernel, arch(capability(fn.device)))).get_kernel(ENTRY)


def _loads(core, dev, meta) -> list:
    """A cubin loaded and its kernel found: cuModuleLoadData + cuModuleGetFunction (driver.load's
    calls; the module unloaded after) against cuda.core's ObjectCode.from_cubin + get_kernel."""
    from cuda.bindings import driver as cu
    from numba_tc import driver
    from numba_tc.build import ENTRY, cubin
    step = _warptile_step()[0]
    image = cubin(step.kernel, driver.arch(driver.capability(dev)))
    recs = []

    def ours():
        mod = driver.check(cu.cuModuleLoadData(image), "cuModuleLoadData")
        driver.check(cu.cuModuleGetFunction(mod, ENTRY.encode()), "cuModuleGetFunction")
        driver.check(cu.cuModuleUnload(mod), "cuModuleUnload")

    def theirs():
        k = core.ObjectCode.from_cubin(image).get_kernel(ENTRY)
        getattr(k, "attributes", None)              # (a lazily loaded library is loaded by now)
    with driver.on_device(dev):
        recs.append(dict(what="module load", path="driver", **_round_us(ours, CORE_LOADS, 3, lambda: None)))
        try:
            theirs()
            recs.append(dict(what="module load", path="cuda_core", **_round_us(theirs, CORE_LOADS, 3, lambda: None)))
        except Exception as e:
            recs.append(dict(what="module load", path="cuda_core", error=f"{type(e).__name__}: {e}"))
    return [dict(r, kind="cuda_core", cubin_bytes=len(image), **meta) for r in recs]


def _maps(core, meta) -> list:
    """A 2-D fp16 tensor map of a 4096^2 matrix in 64x64 boxes, 128B swizzle: ``tensormap.encode``
    (cuTensorMapEncodeTiled through ctypes; its cache emptied each call) against cuda.core's
    ``StridedMemoryView.as_tensor_map`` where this cuda.core has it (its view made once: a lower
    bound of what a new operand would cost it, which needs a view of its own)."""
    import torch
    from numba_tc import tensormap
    t = torch.empty(4096, 4096, device="cuda", dtype=torch.float16)
    p = t.data_ptr()

    def ours():
        tensormap._CACHE.clear()
        tensormap.encode(p, "float16", 4096, 4096, 4096, 64, 64)
    recs = [dict(what="tensor map", path="driver", **_round_us(ours, CORE_MAPS, 3, lambda: None))]
    try:
        from cuda.core.utils import StridedMemoryView
        view = StridedMemoryView(t, -1)
        if not hasattr(view, "as_tensor_map"):
            raise AttributeError(f"StridedMemoryView has no as_tensor_map in cuda.core {_core()[1]}")
        try:
            from cuda.core._tensor_map import TensorMapSwizzle
            swizzle = TensorMapSwizzle.SWIZZLE_128B
        except ImportError:
            swizzle = None
        theirs = lambda: view.as_tensor_map((64, 64), swizzle=swizzle)     # noqa: E731
        theirs()
        recs.append(dict(what="tensor map", path="cuda_core", **_round_us(theirs, CORE_MAPS, 3, lambda: None)))
    except Exception as e:
        recs.append(dict(what="tensor map", path="cuda_core", error=f"{type(e).__name__}: {e}"))
    return [dict(r, kind="cuda_core", **meta) for r in recs]


def cuda_core_records(meta) -> list:
    """Per call, today's driver path (``numba_tc.driver``, ``tensormap``) against cuda.core's for
    launches, module loads and tensor maps, with each pair's difference and whether it is within
    ``ADOPT_US`` (issue 54's rule for adopting cuda.core). Under a minute."""
    import torch
    try:
        core, version = _core()
    except ImportError as e:                         # (today's figures alone, and why)
        core, version = None, f"not installed ({e})"
    meta = dict(meta, cuda_core=version)
    stream = torch.cuda.current_stream().cuda_stream
    recs = _launches(core, stream, meta) + _loads(core, torch.cuda.current_device(), meta) + _maps(core, meta)
    ours = {r["what"]: r for r in recs if r["path"] == "driver"}
    print(f"cuda.core {version}: per call, us (median of rounds; best)")
    print(f"{'what':<38} {'driver':>14} {'cuda.core':>14} {'difference':>11}  within {ADOPT_US} us")
    for r in recs:
        if r["path"] != "cuda_core":
            continue
        base = ours[r["what"]]
        if "error" in r:
            print(f"{r['what']:<38} {base['us']:>8.2f} ({base['best_us']:.2f})  not measured: {r['error']}")
            continue
        r["difference_us"] = round(r["us"] - base["us"], 3)
        r["within"] = r["difference_us"] <= ADOPT_US
        print(f"{r['what']:<38} {base['us']:>8.2f} ({base['best_us']:.2f}) {r['us']:>8.2f} ({r['best_us']:.2f}) "
              f"{r['difference_us']:>+10.2f}  {'yes' if r['within'] else 'no'}")
    for r in recs:
        if r["path"] == "driver" and r["what"] not in {x["what"] for x in recs if x["path"] == "cuda_core"}:
            print(f"{r['what']:<38} {r['us']:>8.2f} ({r['best_us']:.2f})")
    return recs


def _mode(rec) -> str:
    if rec.get("kind") == "cuda_core":
        return "cuda_core"
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
    ap.add_argument("--modes", nargs="+", choices=("host", "first", "aot", "cuda_core"), default=["host", "first"],
                    help="host_us records, first calls with a cold and a warm cache, first calls after an "
                    "ahead-of-time compile, today's driver path against cuda.core's (default: host first)")
    ap.add_argument("--aot-variants", choices=("auto", "all"), default="auto",
                    help="what --modes aot compiles: the variants auto can pick here (default), or all")
    args = ap.parse_args()
    from numba_tc.bench import stamp
    meta = dict(stamp(args.json), command="python benchmarks/runtime.py " + " ".join(sys.argv[1:]))
    recs = ((host_records(args.size, args.rounds, meta) if "host" in args.modes else [])
            + (first_call_records(meta) if "first" in args.modes else [])
            + (aot_records(meta, args.aot_variants) if "aot" in args.modes else [])
            + (cuda_core_records(meta) if "cuda_core" in args.modes else []))
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
