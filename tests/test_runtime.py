"""The runtime without a GPU: the kernel cache on disk (keys, corrupt and stale entries, two
writers), the build's generated entry, parameter packing, and how streams and devices are read
from the caller's objects (stand-ins for torch, CuPy, Numba and cuda.core)."""
import ast
import ctypes
import os
import subprocess
import sys

import pytest

from numba_tc import build, cache

from conftest import SIM

pytestmark = pytest.mark.cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("NUMBA_TC_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_cache_round_trip_and_corrupt_entries(cache_dir):
    material = '{"kernel": "k1"}'
    assert cache.load(material, "sm_90a") is None
    path = cache.store(material, "sm_90a", b"cubin bytes" * 100)
    assert path.startswith(str(cache_dir)) and cache.load(material, "sm_90a") == b"cubin bytes" * 100
    blob = bytearray(open(path, "rb").read())
    blob[-1] ^= 0xFF                                      # one flipped bit in the payload
    open(path, "wb").write(bytes(blob))
    with pytest.warns(RuntimeWarning, match="corrupt or stale"):
        assert cache.load(material, "sm_90a") is None
    assert not os.path.exists(path)                       # removed: the caller rebuilds it
    cache.store(material, "sm_90a", b"x" * 10)
    open(path, "wb").write(open(path, "rb").read()[:-3])  # truncated
    with pytest.warns(RuntimeWarning):
        assert cache.load(material, "sm_90a") is None


def test_stale_entry_is_not_loaded(cache_dir):
    """An entry whose header names other key material (a hash collision, or a file copied in
    by hand) is refused: the material is compared, not only its hash."""
    path = cache.store("material A", "sm_90a", b"A")
    os.makedirs(os.path.dirname(cache.entry_path("material B", "sm_90a")), exist_ok=True)
    os.replace(path, cache.entry_path("material B", "sm_90a"))
    with pytest.warns(RuntimeWarning):
        assert cache.load("material B", "sm_90a") is None


_WRITER = """
import os, sys
from numba_tc import cache
payload = bytes([int(sys.argv[1])]) * (4 << 20)
for _ in range(20):
    cache.store("shared entry", "sm_90a", payload)
"""


def test_two_processes_writing_one_entry(cache_dir):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(i)], env=env) for i in (1, 2)]
    for _ in range(200):                    # meanwhile, every read sees a whole entry or none
        got = cache.load("shared entry", "sm_90a")
        assert got is None or got in (b"\x01" * (4 << 20), b"\x02" * (4 << 20))
    assert [p.wait(60) for p in procs] == [0, 0]
    assert cache.load("shared entry", "sm_90a") in (b"\x01" * (4 << 20), b"\x02" * (4 << 20))
    leftovers = [f for f in os.listdir(cache_dir / "sm_90a") if f.startswith(".tmp-")]
    assert leftovers == []


def test_key_material_names_everything_that_decides_the_cubin(monkeypatch):
    from numba_tc import simt
    k1, k2 = simt.naive_kernel(False, False), simt.naive_kernel(True, False)
    m = build.key_material(k1, "sm_90a")
    assert m == build.key_material(simt.naive_kernel(False, False), "sm_90a")
    assert m != build.key_material(k2, "sm_90a") and m != build.key_material(k1, "sm_80")
    for word in ('"numba"', '"numba-cuda"', '"nvjitlink"', '"sources"', "naive_kernel"):
        assert word in m
    monkeypatch.setattr(build, "_SOURCES", "another source tree")
    assert build.key_material(k1, "sm_90a") != m


def test_kernel_sources_cover_every_module_the_kernels_import():
    """The cache key hashes KERNEL_MODULES: a kernel module importing any other numba_tc module
    would let a change there load a stale cubin."""
    for mod in build.KERNEL_MODULES:
        tree = ast.parse(open(os.path.join(ROOT, "numba_tc", *mod.split("/")) + ".py").read())
        package = mod.split("/")[:-1]              # (a module of hopper/ imports its siblings by one dot)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                base = package[:len(package) - (node.level - 1)]
                names = [node.module] if node.module else [a.name for a in node.names]
                for name in names:
                    top = "/".join(base + name.split(".")[:1])
                    if top in ("plan", "driver", "tensormap", "cache", "arrays", "api", "runtime", "bench",
                               "workspace"):
                        continue       # host-side modules: they decide launches, not code
                    assert top in build.KERNEL_MODULES, f"{mod} imports {name}, not in KERNEL_MODULES"


def test_cubin_is_compiled_once_then_loaded(cache_dir, monkeypatch):
    from numba_tc import simt
    calls = []
    monkeypatch.setattr(build, "compile_cubin", lambda k, arch: calls.append(arch) or (b"CUBIN" + arch.encode(), ""))
    k = simt.naive_kernel(False, True)
    assert build.cubin(k, "sm_90a") == b"CUBINsm_90a" and calls == ["sm_90a"]
    assert build.cubin(k, "sm_90a") == b"CUBINsm_90a" and calls == ["sm_90a"]
    assert build.cubin(k, "sm_80") == b"CUBINsm_80" and calls == ["sm_90a", "sm_80"]


def test_entry_passes_tensor_maps_by_value_and_carries_launch_bounds():
    from numba_tc import hopper
    k = hopper.wgmma_kernel(hopper.KernelSpec(hopper.RUNG7, "bfloat16", "float32", False, True, True, True))
    src = build.entry_source(k)
    assert src.count("const __grid_constant__ numba_tc_map") == 3
    assert "__launch_bounds__(384, 1)" in src and "(long long)&p0" in src
    assert f'extern "C" __global__ void __launch_bounds__(384, 1) {build.ENTRY}(' in src


@pytest.mark.skipif(SIM, reason="compiles for sm_90a")
def test_precompile_fills_the_cache_without_a_gpu(cache_dir):
    from numba_tc import aot
    recs = aot.precompile(variants=["naive"], archs=["sm_90a"], jobs=2, progress=False)
    assert len(recs) == 4 and not any(r["cached"] for r in recs)           # one kernel per layout
    assert len(os.listdir(cache_dir / "sm_90a")) == 4
    again = aot.precompile(variants=["naive"], archs=["sm_90a"], progress=False)
    assert all(r["cached"] for r in again)
    assert aot.precompile(variants=["wgmma_tma"], archs=["sm_80"], progress=False) == []   # sm_90a only


def test_parameters_pack_into_the_layout_the_driver_reads():
    from numba_tc.driver import Params
    p = Params(("map", "i64", "i64"))
    addr = p.pack([bytes(range(128)), -5, 1 << 40])
    ptrs = (ctypes.c_void_p * 3).from_address(addr)
    base = ctypes.addressof(p.buf)
    assert [ptrs[i] - base for i in range(3)] == [0, 128, 136]
    assert p.buf.raw[:128] == bytes(range(128))
    assert ctypes.c_int64.from_address(ptrs[1]).value == -5
    assert ctypes.c_int64.from_address(ptrs[2]).value == 1 << 40


def _standin(module, **attrs):
    return type("S", (), {"__module__": module, **attrs})()


def test_stream_handles_from_each_library():
    from numba_tc.runtime import stream_handle
    assert stream_handle(1234) == 1234
    assert stream_handle(_standin("torch.cuda.streams", cuda_stream=77)) == 77
    assert stream_handle(_standin("cupy.cuda.stream", ptr=88)) == 88
    assert stream_handle(_standin("numba.cuda.cudadrv.driver", handle=ctypes.c_void_p(99))) == 99
    assert stream_handle(_standin("numba.cuda.cudadrv.driver", handle=ctypes.c_void_p(None))) == 0
    assert stream_handle(_standin("cuda.core.experimental", handle=55)) == 55
    with pytest.raises(TypeError, match="stream must be"):
        stream_handle("default")


def test_devices_from_each_library(monkeypatch):
    from numba_tc import driver, runtime
    assert runtime.device_of(_standin("torch", get_device=lambda self: 1), "torch") == 1
    dev = type("D", (), {"id": 3})()
    assert runtime.device_of(_standin("cupy", device=dev, __cuda_array_interface__={"data": (0, False)}), "cuda") == 3
    monkeypatch.setattr(driver, "device_of_pointer", lambda p: 2 if p == 4096 else -1)
    foreign = _standin("numba.cuda", __cuda_array_interface__={"data": (4096, False)})
    assert runtime.device_of(foreign, "numba") == 2


def test_the_call_cache_key_separates_what_decides_a_launch():
    """What goes into a call's key for a GPU operand: shape, strides, dtype, address mod 32 and
    device; two tensors differing only in their address (mod 32 equal) share a plan."""
    from numba_tc.api import operand_facts
    T = type("T", (), {"__module__": "torch"})

    def t(shape, stride, ptr, dev=0):
        x = T()
        x.shape, x.dtype = shape, "bf16"
        x.stride, x.data_ptr, x.get_device = (lambda: stride), (lambda: ptr), (lambda: dev)
        return x
    a, _ = operand_facts(t((64, 64), (64, 1), 4096), "torch")
    assert a == operand_facts(t((64, 64), (64, 1), 4096 + 512), "torch")[0]
    assert a != operand_facts(t((64, 64), (64, 1), 4096 + 16), "torch")[0]          # alignment decides TMA
    assert a != operand_facts(t((64, 64), (1, 64), 4096), "torch")[0]
    assert a != operand_facts(t((64, 64), (64, 1), 4096, dev=1), "torch")[0]


@pytest.mark.skipif(SIM, reason="compiles for sm_90a")
def test_compile_command_without_a_gpu(cache_dir):
    """``python -m numba_tc compile`` fills the cache for a target this machine does not have,
    linked PTX included (the mma.sync primitives), and a second run finds every kernel cached."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "numba_tc", "compile", "--variants", "mma_naive", "--dtypes", "bfloat16",
           "--arch", "sm_90a", "--no-progress"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert "8 kernels for sm_90a: 8 compiled" in first.stdout      # 4 layouts x bf16 or fp32 out
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert "0 compiled" in again.stdout and "8 already cached" in again.stdout


def _import_graph() -> dict:
    """numba_tc's modules (dotted names, packages by their ``__init__``) -> the package modules
    each imports, at the top or inside functions: ``import numba_tc.x``, ``from .x import y``,
    ``from . import x``, ``from ..x import y`` (a name taken from a package that is a module of it
    is that module)."""
    pkg = os.path.join(ROOT, "numba_tc")
    files = {}
    for base, _, names in os.walk(pkg):
        for f in names:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(base, f), ROOT)[:-3].split(os.sep)
                files[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = (os.path.join(base, f), rel[-1] == "__init__")
    graph = {}
    for mod, (path, is_pkg) in files.items():
        here = mod if is_pkg else mod.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
                deps.update(t for t in targets if t.startswith("numba_tc"))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                    src = base + ("." + node.module if node.module else "")
                elif (node.module or "").startswith("numba_tc"):
                    src = node.module
                else:
                    continue
                subs = [f"{src}.{a.name}" for a in node.names if f"{src}.{a.name}" in files]
                deps.update(subs or [src])
        graph[mod] = {d for d in deps if d in files and d != mod}
    return graph


def _circle(graph: dict):
    """A circle of ``graph`` as a list of names, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for d in sorted(graph.get(m, ())):
            if state.get(d) == "open":
                return path[path.index(d):] + [d] if d in path else path + [m, d]
            if d not in state:
                found = visit(d, path + [d])
                if found:
                    return found
        state[m] = "done"
        return None
    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_no_import_circle():
    """numba_tc's modules, the ``hopper`` package's included, import one another (at the top or
    inside functions: a deferred import is an edge too) without a circle. A module imports its
    package's ``__init__`` only by name (``from . import x`` of a module x is x)."""
    graph = _import_graph()
    assert "numba_tc.hopper.planner" in graph and "numba_tc.api" in graph["numba_tc"]
    for pkg in ("numba_tc", "numba_tc.hopper"):     # (a package's __init__ imports its parts: they come first)
        for m in graph:
            if m.startswith(pkg + ".") and m != "numba_tc.__main__" and pkg in graph[m]:
                raise AssertionError(f"{m} imports its package {pkg}'s __init__: a circle through it")
    for pkg in ("numba_tc", "numba_tc.hopper", "numba_tc.__main__"):
        graph.pop(pkg, None)
    found = _circle(graph)
    assert found is None, "import circle: " + " -> ".join(found)


def test_the_circle_test_sees_deferred_and_package_imports():
    """The graph the circle test reads has the edges a deferred import, an ``import numba_tc.x``
    and a ``from ..x import`` in the hopper package make."""
    g = _import_graph()
    assert "numba_tc.epilogue" in g["numba_tc.hopper.spec"] and "numba_tc.hopper.cost" in g["numba_tc.hopper.planner"]
    assert _circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _circle({"a": {"b"}, "b": set()}) is None


def test_functions_are_short():
    """Issue 23's rule for the package: no function (a factory with the device functions it
    closes over counts whole) longer than 100 lines or taking more than 16 parameters."""
    pkg = os.path.join(ROOT, "numba_tc")
    long = []
    for f in sorted(os.listdir(pkg)):
        if f.endswith(".py"):
            for node in ast.walk(ast.parse(open(os.path.join(pkg, f)).read())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    a = node.args
                    params = (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                              + (a.vararg is not None) + (a.kwarg is not None))
                    lines = node.end_lineno - node.lineno + 1
                    if params > 16 or lines > 100:
                        long.append(f"{f}:{node.lineno} {getattr(node, 'name', 'lambda')}: "
                                    f"{lines} lines, {params} parameters")
    assert not long, long
