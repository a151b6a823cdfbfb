"""Compile a Numba kernel to an sm_90a cubin and read its SASS, with no GPU and no driver.

Numba-cuda lowers the kernel to LTO-IR (``compile_all``); the ``.cu`` files it links are compiled
to LTO-IR by NVRTC; nvJitLink links them for the target and reports registers and spills; the
``cuobjdump`` from the ``nvidia-cuda-cuobjdump`` wheel disassembles the cubin. This is how CI proves
what the GPU would run (instructions used, no local memory) and how we read SASS before spending
GPU time.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

__all__ = ["Cubin", "compile_cubin", "find_cuobjdump"]


@dataclass(repr=False)
class Cubin:
    """A compiled cubin and what its SASS says. Its repr is a one-line summary (the cubin and
    the SASS text are hundreds of kilobytes: read ``.sass`` or ``.counts`` for them)."""
    arch: str
    cubin: bytes
    link_log: str
    sass: str = ""
    registers: int = -1
    spill_bytes: int = 0
    stack_bytes: int = 0
    counts: dict = field(default_factory=dict)

    def count(self, opcode: str) -> int:
        """Number of SASS instructions whose opcode starts with ``opcode`` (``"HMMA"``, ``"LDS.128"``)."""
        return sum(n for op, n in self.counts.items() if op == opcode or op.startswith(opcode + "."))

    def loops(self) -> list:
        """The instruction lines of each loop: from a backward branch's target to the branch."""
        ins = [(int(m.group(1), 16), line) for line in self.sass.splitlines()
               for m in [_ADDRESS.match(line)] if m]
        out = []
        for addr, line in ins:
            m = _BRANCH.search(line)
            if m and int(m.group(1), 16) <= addr:
                out.append([l for a, l in ins if int(m.group(1), 16) <= a <= addr])
        return out

    @staticmethod
    def bank_conflicts(lines) -> int:
        """FFMAs among ``lines`` two of whose register sources share a register bank (register
        number % 2 on Volta and later) and neither comes from the operand reuse cache (``.reuse``):
        each costs an extra cycle to read its operands (Nsight Compute: "dispatch stall")."""
        n = 0
        for line in lines:
            m = _FFMA.search(line)
            if m:
                srcs = [o.strip().lstrip("-|") for o in m.group(1).split(",")]
                banks = [int(o[1:]) % 2 for o in srcs if re.fullmatch(r"R\d+", o)]
                n += len(banks) != len(set(banks))
        return n

    @property
    def local_memory_ops(self) -> int:
        return self.count("LDL") + self.count("STL")

    def __repr__(self) -> str:
        parts = [self.arch, f"{len(self.cubin)} bytes", f"{self.registers} registers",
                 f"{self.spill_bytes} spill bytes", f"{self.stack_bytes} stack bytes"]
        if self.counts:
            ops = sorted(((op, n) for op, n in self.counts.items() if op != "NOP"), key=lambda kv: (-kv[1], kv[0]))
            parts.append(f"{sum(n for _, n in ops)} SASS instructions besides NOPs ("
                         + ", ".join(f"{op} {n}" for op, n in ops[:6]) + (", ..." if len(ops) > 6 else "") + ")")
            parts.append(f"{self.local_memory_ops} local-memory ops")
        else:
            parts.append("not disassembled")
        return "Cubin(" + ", ".join(parts) + ")"

    __str__ = __repr__


def find_cuobjdump() -> str | None:
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    try:
        import nvidia.cu13 as cu13  # the nvidia-cuda-cuobjdump wheel
        cand = os.path.join(list(cu13.__path__)[0], "bin", "cuobjdump")
        if os.path.exists(cand):
            return cand
    except ImportError:
        pass
    return None


_ADDRESS = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+\S")
_BRANCH = re.compile(r"\bBRA (0x[0-9a-f]+)")
_FFMA = re.compile(r"\bFFMA R\d+, ([^;]*);")
_OPCODE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def _parse_sass(sass: str) -> dict:
    counts: dict = {}
    for m in _OPCODE.finditer(sass):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def compile_cubin(kernel, sig=None, cc=(9, 0, "a"), launch_bounds=None, disassemble=True) -> Cubin:
    """Compile a kernel for ``cc`` offline and read its SASS: a numba_tc ``jit.Kernel`` (exactly
    the cubin the runtime loads, ``build.compile_cubin``), or the Python function of your own
    ``@cuda.jit`` kernel with its signature ``sig``.

    Raises ``RuntimeError`` with nvJitLink's log when the link fails (for example wgmma on plain sm_90).
    """
    from . import build
    arch = "sm_%d%d%s" % (cc[0], cc[1], cc[2] if len(cc) > 2 else "")
    if isinstance(kernel, build_kernel_type()):
        image, log = build.compile_cubin(kernel, arch)
    else:
        from numba.cuda.compiler import compile_all
        with build.target(cc):
            codes, _ = compile_all(kernel, sig, device=False, cc=cc, output="ltoir", abi="numba",
                                   launch_bounds=launch_bounds)
        image, log = build.link(list(codes), arch)
    out = Cubin(arch=arch, cubin=image, link_log=log)
    m = re.findall(r"Used (\d+) registers", log)
    out.registers = int(m[-1]) if m else -1
    m = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if m:
        out.stack_bytes = max(int(a) for a, _, _ in m)
        out.spill_bytes = max(int(b) + int(c) for _, b, c in m)
    if disassemble:
        exe = find_cuobjdump()
        if exe is None:
            raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(out.cubin)
            f.flush()
            # cuobjdump calls nvdisasm, which the nvidia-cuda-nvdisasm wheel puts beside it
            env = dict(os.environ, PATH=os.path.dirname(exe) + os.pathsep + os.environ.get("PATH", ""))
            out.sass = subprocess.run([exe, "-sass", f.name], check=True, capture_output=True,
                                      text=True, env=env).stdout
        out.counts = _parse_sass(out.sass)
    return out


def build_kernel_type():
    from .jit import Kernel
    return Kernel
