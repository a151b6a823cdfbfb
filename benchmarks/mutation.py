"""The mutation check: deliberately wrong changes, one at a time, to a copy of the repository;
the tier that should catch each is run on the copy, and the verdict is recorded.

    python benchmarks/mutation.py --tier cpu sim sass            # no GPU: minutes
    python benchmarks/mutation.py --tier gpu --jobs 11 --out $OUT/mutation_gpu.json   # on the H100
    python benchmarks/mutation.py --merge $OUT/mutation_gpu.json  # into results/mutation.json
    python benchmarks/mutation.py --list                          # the mutants

Each mutant is a list of (exact source snippet, replacement) in one file; the snippet must occur
exactly once (``tests/test_mutation_list.py`` checks that every snippet still matches the
source, so a refactor cannot silently disarm a mutant). A mutant is *caught* when one of the
named tests fails (or hangs past the time limit) on the mutated copy; one that only breaks an
import or collection is not (session 24: a deleted loop body "caught" a mutant by an
IndentationError). First the same tests must pass on an unmutated copy (the baseline), else
the verdict would mean nothing. Records (benchmarks/results/mutation.json):
{"mutant", "tier", "caught", "test", "commit", "command"} (+ "file", "note", "seconds").
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results", "mutation.json")
TIERS = ("cpu", "sim", "sass", "gpu")


@dataclass
class Mutant:
    name: str
    tier: str
    file: str
    edits: List[Tuple[str, str]]
    tests: List[str]
    note: str = ""
    extra: List[str] = field(default_factory=list)     # more pytest arguments (-k ...)


M = Mutant
MUTANTS = [
    # ---- cpu: layout facts, the checker itself, operand layouts, schedules -------------------
    M("swap two fragment rows (mma A registers 1 and 2)", "cpu", "numba_tc/layout.py",
      [("return (lane >> 2) + 8 * (reg & 1), (reg >> 1) * 4 * E + (lane & 3) * E + e",
        "return (lane >> 2) + 8 * (reg >> 1), (reg & 1) * 4 * E + (lane & 3) * E + e")],
      ["tests/test_layout_isa.py"], "a_fragment still covers the tile: only the ISA's table tells"),
    M("swap two accumulator fragment rows (c2/c3 with c1)", "cpu", "numba_tc/layout.py",
      [("return (lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)",
        "return (lane >> 2) + 8 * (i & 1), 2 * (lane & 3) + (i >> 1)")],
      ["tests/test_layout_isa.py"], "c_fragment still covers the tile"),
    M("wgmma accumulator rows of warps 0/1 and 2/3 exchanged", "cpu", "numba_tc/layout.py",
      [("return 16 * (thread >> 5) + m, 8 * (r >> 2) + n", "return 16 * ((thread >> 5) ^ 1) + m, 8 * (r >> 2) + n")],
      ["tests/test_layout_isa.py"], "test_hopper compares wgmma_d_fragment with c_fragment only"),
    M("swizzle with the wrong row bits", "cpu", "numba_tc/layout.py",
      [("return chunk ^ (row & 7)", "return chunk ^ ((row >> 1) & 7)")],
      ["tests/test_layout.py", "tests/test_hopper.py"]),
    M("wgmma descriptor: SBO one bit off", "cpu", "numba_tc/layout.py",
      [("| (((sbo & 0x3FFFF) >> 4) << 32)", "| (((sbo & 0x3FFFF) >> 4) << 31)")],
      ["tests/test_hopper.py"]),
    M("grouped tile order with a ragged last group", "cpu", "numba_tc/schedule.py",
      [("return (first_m + inside % rows_here) * bm, (inside // rows_here) * bn",
        "return (first_m + inside % rows_here) * bm, (inside // group) * bn")],
      ["tests/test_config.py"]),
    M("read A with the wrong leading dimension (strides ignored)", "cpu", "numba_tc/arrays.py",
      [("        ld = s0 if rows > 1 else cols\n", "        ld = cols\n")],
      ["tests/test_api.py"]),
    M("element-wise check that cannot fail (tolerance x 2^20)", "cpu", "numba_tc/verify.py",
      [("ACC_ULPS = 8 ", "ACC_ULPS = 8 * 2 ** 20 ")],
      ["tests/test_verify_elements.py"]),
    M("reference from fp32 inputs where the kernel reads tf32", "cpu", "numba_tc/verify.py",
      [('    if precision in ("tf32", "tf32_rn"):\n        bits', '    if precision in ("tf32x", "tf32_rn"):\n        bits')],
      ["tests/test_verify_elements.py"]),
    # ---- sim: the SIMT ladder and the NumPy path in Numba's CUDA simulator --------------------
    M("skip the last partial tile (grid rounded down)", "sim", "numba_tc/simt.py",
      [("grid, block = (cdiv(n, cfg.bn), cdiv(m, cfg.bm)), (cfg.threads,)",
        "grid, block = (max(n // cfg.bn, 1), max(m // cfg.bm, 1)), (cfg.threads,)")],
      ["tests/test_simulator.py"], "warptile splits its tail (its own grid); smaller shapes fit one tile",
      extra=["-k", "whole_tile_loop and vectorized"]),
    M("drop a K stage (the last K tile)", "sim", "numba_tc/simt.py",
      [("        for t in range(t_full // STAGES * STAGES, ntiles):",
        "        for t in range(t_full // STAGES * STAGES, ntiles - 1):")],
      ["tests/test_simulator.py"], extra=["-k", "warptile"]),
    M("store C transposed", "sim", "numba_tc/simt.py",
      [("                                pC[m * ldc + n + q] = EPI(acc[a0 + q], m, n + q, ep)",
        "                                pC[(n + q) * ldc + m] = EPI(acc[a0 + q], m, n + q, ep)")],
      ["tests/test_simulator.py"], extra=["-k", "warptile"]),
    M("leading dimension from the shape, not the stride (untiled rungs)", "sim", "numba_tc/plan.py",
      [("    m, n, k, lda, ldb, ldc = c.rows, c.cols, a.cols, a.ld, b.ld, c.ld\n    return lambda",
        "    m, n, k, lda, ldb, ldc = c.rows, c.cols, a.cols, (a.rows if a.trans else a.cols), b.ld, c.ld\n"
        "    return lambda")],
      ["tests/test_simulator_operands.py"], "contiguous operands have ld == width: only padded views tell",
      extra=["-k", "padded and naive"]),
    M("apply an epilogue per split-K partial", "sim", "numba_tc/simt.py",
      [("        conf = cfg if epi.plain else cfg.replace(split_tail=False)", "        conf = cfg"),
       ("    if SPLIT and not epi.plain:\n        raise", "    if False:\n        raise"),
       ("red_add_f32(pC, m * ldc + n + q, acc[a0 + q])", "red_add_f32(pC, m * ldc + n + q, EPI(acc[a0 + q], m, n + q, ep))")],
      ["tests/test_simulator_operands.py"], "the tail split is disabled under an epilogue; this re-enables it",
      extra=["-k", "epilogue"]),
    M("poison never reaches the device (a fresh device output)", "sim", "numba_tc/arrays.py",
      [("    if out is None:\n        return cuda.device_array((m, n), dtype=raw, stream=stream)",
        "    if True:\n        return cuda.device_array((m, n), dtype=raw, stream=stream)")],
      ["tests/test_simulator_poison.py"]),
    M("column-major out written row-major (no swap)", "sim", "numba_tc/calls.py",
      [("        swap = C.trans ", "        swap = False ")],
      ["tests/test_simulator.py"], extra=["-k", "test_rung_in_simulator and warptile"]),
    M("bias on the wrong axis", "sim", "numba_tc/epilogue.py",
      [('bias = None if self.bias is None else (self.bias[0], "row" if self.bias[1] == "col" else "col")',
        'bias = self.bias')],
      ["tests/test_simulator_operands.py"], "only a column-major out flips the bias's axis",
      extra=["-k", "column_major"]),
    # ---- cpu: argument checks deleted (each has a test that fails without it) ------------------
    M("argument check deleted: a bias with strided elements accepted", "cpu", "numba_tc/epilogue_args.py",
      [("    if shape[0] > 1 and strides[0] != 1 and kind != \"numpy\":\n", "    if False:\n")],
      ["tests/test_argument_checks.py"], "on the GPU the kernel would read the bias as contiguous", extra=["-k", "contiguous"]),
    M("argument check deleted: an out_dtype the inputs cannot produce", "cpu", "numba_tc/checks.py",
      [("        if out_dtype not in allowed:\n", "        if False:\n")],
      ["tests/test_argument_checks.py"], extra=["-k", "out_dtypes"]),
    M("argument check deleted: operands on two GPUs", "cpu", "numba_tc/checks.py",
      [("        if d != devs[0]:\n", "        if False:\n")],
      ["tests/test_argument_checks.py"], extra=["-k", "two"]),
    M("argument check deleted: a batched c whose matrices are not stacked rows", "cpu", "numba_tc/batch.py",
      [("        if c2 is None:\n", "        if False:\n")],
      ["tests/test_argument_checks.py"], "the epilogue would read c at the stacked rows", extra=["-k", "stacked"]),
    M("argument check deleted: block-wise scales of the wrong shape", "cpu", "numba_tc/epilogue_args.py",
      [("            if tuple(d[1]) != block[name]:\n", "            if False:\n")],
      ["tests/test_argument_checks.py"], extra=["-k", "scales"]),
    # ---- cpu: GPU-only device math and layout facts, checked on the CPU ------------------------
    M("fast activation: 16-bit gelu_tanh with the sigmoid form's constant", "cpu", "numba_tc/epilogue.py",
      [("tanh_approx(float32(0.7978845608028654)", "tanh_approx(float32(1.5957691216057308)")],
      ["tests/test_device_math.py"], "GPU-only code (tanh.approx): the SASS does not change in kind", extra=["-k", "fast"]),
    M("fast activation: 16-bit silu as x/2 (1 + tanh x)", "cpu", "numba_tc/epilogue.py",
      [("        return h + h * tanh_approx(h)\n", "        return h + h * tanh_approx(x)\n")],
      ["tests/test_device_math.py"], extra=["-k", "fast"]),
    M("fast activation: sigmoid by e^z instead of e^-z (GPU branch)", "cpu", "numba_tc/epilogue.py",
      [("libdevice.fast_fdividef(x, float32(1) + libdevice.fast_expf(-z))",
        "libdevice.fast_fdividef(x, float32(1) + libdevice.fast_expf(z))")],
      ["tests/test_device_math.py"], "the simulator runs the other branch", extra=["-k", "activation"]),
    M("tf32 layout: mn-major boxes at the 16-bit box stride", "cpu", "numba_tc/layout.py",
      [("    return (mn // per_row) * per_row * ROW_BYTES + chunk_offset", "    return (mn // per_row) * BOX_BYTES + chunk_offset")],
      ["tests/test_device_math.py"], "right for 16-bit elements, twice too far for tf32", extra=["-k", "mn_major"]),
    M("tf32 layout: tensor maps load FLOAT32 (wgmma truncates) instead of TFLOAT32", "cpu", "numba_tc/tensormap.py",
      [('"tf32": 11', '"tf32": 7')],
      ["tests/test_device_math.py"], "within tf32's tolerance on the GPU; the driver's enum tells", extra=["-k", "enums"]),
    # ---- sim: epilogue operands and batched operands in uncommon layouts ----------------------
    M("epilogue layout: a column-major c read row-major", "sim", "numba_tc/epilogue.py",
      [('idx = ("col * {0} + row" if spec.c[1] else "row * {0} + col")', 'idx = ("row * {0} + col")')],
      ["tests/test_simulator_epilogue.py"], extra=["-k", "every_layout and blocktile2d"]),
    M("epilogue layout: c not flipped for a column-major out", "sim", "numba_tc/epilogue.py",
      [("c = None if self.c is None else (self.c[0], not self.c[1])", "c = None if self.c is None else (self.c[0], self.c[1])")],
      ["tests/test_simulator_epilogue.py"], extra=["-k", "every_layout and blocktile2d"]),
    M("epilogue layout: c read at the output's width, not its own leading dimension", "sim", "numba_tc/epilogue.py",
      [('("ldc", "b.ldc")', '("ldc", "n")')],
      ["tests/test_simulator_epilogue.py"], "contiguous row-major c has ld == N: only a padded or column-major c tells",
      extra=["-k", "every_layout and blocktile2d"]),
    M("epilogue layout: the user's (row, col) not swapped back for a column-major out", "sim", "numba_tc/epilogue.py",
      [("swap=not self.swap if self.user else False", "swap=self.swap if self.user else False")],
      ["tests/test_simulator_epilogue.py"], extra=["-k", "every_layout and blocktile2d"]),
    M("batched layout: a 3-D a whose matrices are not stacked taken as one stacked product", "sim", "numba_tc/batch.py",
      [("    if strides[2] != 1 and shape[2] > 1 or (shape[0] > 1 and strides[0] != rows * strides[1]):",
        "    if strides[2] != 1 and shape[2] > 1:")],
      ["tests/test_simulator_batch.py"], "a strided batch beside a 2-D b", extra=["-k", "every_layout"]),
    M("batched layout: a batch of one not broadcast (batch count the smaller)", "sim", "numba_tc/batch.py",
      [("    return 0 if 0 in (ca, cb) else max(ca, cb)", "    return 0 if 0 in (ca, cb) else min(ca, cb)")],
      ["tests/test_simulator_batch.py"], extra=["-k", "every_layout"]),
    M("batched layout: each batch's c sliced from the first matrix", "sim", "numba_tc/batch.py",
      [('ei = dict(epi, c=epi["c"][i * m:(i + 1) * m])', 'ei = dict(epi, c=epi["c"][:m])')],
      ["tests/test_simulator_batch.py"], "c stacked as (batch * M, N): one product per batch takes its rows",
      extra=["-k", "out_epilogue"]),
    # ---- gpu: tensor cores, Hopper pipelines, streams ------------------------------------------
    M("ignore stream=", "gpu", "numba_tc/calls.py",
      [("    return checks.stream_for(stream, kind, dev) if stream is not None else runtime.current_stream(kind, dev)",
        "    return runtime.current_stream(kind, dev)")],
      ["tests/test_gpu_streams.py"], extra=["-k", "not hopper"]),
    M("launch on the legacy stream instead of the caller's", "gpu", "numba_tc/driver.py",
      [("    if cluster == 1 and not dependent:", "    stream = 0\n    if cluster == 1 and not dependent:")],
      ["tests/test_gpu_streams.py"], extra=["-k", "not hopper"]),
    M("an n-major tf32 B copied by the producer left truncated (not rounded to tf32)", "gpu",
      "numba_tc/hopper/producer.py",
      [("                v[e] = tf32_rn(v[e])\n", "                v[e] = v[e]\n")],
      ["tests/test_gpu_tf32.py"], extra=["-k", "producer"]),
    M("tf32 A through registers: each lane's rows +8 and +0 swapped in its fragment", "gpu",
      "numba_tc/hopper/mma.py",
      [("        m, k = a_fragment(lane, t & 3, 0, 1)        # register t % 4 of m64 block t // 4\n",
        "        m, k = a_fragment(lane, (t & 3) ^ 1, 0, 1)\n")],
      ["tests/test_gpu_tf32.py"], extra=["-k", "registers"]),
    M("a swapped product's C stored untransposed", "gpu", "numba_tc/fragments.py",
      [("                    stg_out1(C + (n * ldc + m) * OUT_ITEM, acc[off + 2 * h], OUT_K)\n",
        "                    stg_out1(C + (m * ldc + n) * OUT_ITEM, acc[off + 2 * h], OUT_K)\n")],
      ["tests/test_gpu_tf32.py"], extra=["-k", "registers"]),
    M("the 16-byte row copy reads the chunk before its own", "gpu", "numba_tc/repack.py",
      [("            ldg_v4u32(ptr(w), 0, s)\n", "            ldg_v4u32(ptr(w), 0, s - 16 * min(c0, 1))\n")],
      ["tests/test_gpu_splitk.py"], extra=["-k", "slow_rows"]),
    M("block-wise scales two slices ahead applied a slice late", "gpu",
      "numba_tc/hopper/promotion.py",
      [("        return pos1, later if LEAD == 2 else nxt, nxt\n", "        return pos1, nxt, later\n")],
      ["tests/test_gpu_fp8.py"], extra=["-k", "block"]),
    M("skip one mbarrier wait (consumer, full barrier)", "gpu",
      "numba_tc/hopper/mma.py",
      [("        mbar_wait(full, ph)\n        issue(pacc, stage, a_row0, 0, 1)", "        issue(pacc, stage, a_row0, 0, 1)")],
      ["tests/test_gpu_races.py"], extra=["-k", "hopper and wgmma_ws and 2056"]),
    M("producer overwrites a stage before it is released (empty wait dropped)", "gpu",
      "numba_tc/hopper/producer.py",
      [("                mbar_wait(empty(ring, s), ph ^ 1)\n", "")],
      ["tests/test_gpu_races.py"], extra=["-k", "hopper and wgmma_persistent and 2056"]),
    # (Not listed: "drop the fence before wgmma". ptxas puts the same WARPGROUP.ARRIVE before the
    # HGMMAs with or without wgmma.fence (SASS read in session 12): an equivalent mutant, which no
    # test can catch because the machine code does not change.)
    M("mma.sync: drop the last K slice (staged mainloop)", "gpu", "numba_tc/tensorcore.py",
      [("        for t in range(ntiles):\n            copy_slice(s0, t * BK",
        "        for t in range(ntiles - 1):\n            copy_slice(s0, t * BK")],
      ["tests/test_gpu_tensorcore.py"], extra=["-k", "mma_sweep and mma_smem and NN and bfloat16"]),
    M("tf32 inputs not rounded (hardware truncation)", "gpu", "numba_tc/ptx/mma.cu",
      [('asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(f[off + i]) : "f"(__uint_as_float(f[off + i])));', ';')],
      ["tests/test_gpu_tensorcore.py"], "inside the Frobenius tolerance of tf32; the element-wise check",
      extra=["-k", "mma_sweep and pipelined and tf32 and NN"]),
    M("16-bit output truncated instead of rounded", "gpu", "numba_tc/ptx/mma.cu",
      [('asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h; }',
        'asm("cvt.rz.bf16.f32 %0, %1;" : "=h"(h) : "f"(x)); return h; }')],
      ["tests/test_gpu_layouts.py"], "inside the Frobenius tolerance of bf16; the element-wise check",
      extra=["-k", "NN and mma_tuned-bfloat16-bfloat16-numpy"]),
    M("Hopper: the last partial row of tiles never scheduled", "gpu",
      "numba_tc/hopper/kernel.py",
      [("        grid_m = (M + BM - 1) // BM\n", "        grid_m = max(M // BM, 1)\n")],
      ["tests/test_gpu_hopper.py"], extra=["-k", "wgmma_sweep and NN and wgmma_persistent and bfloat16"]),
    M("split-K: the last K range never computed", "gpu",
      "numba_tc/hopper/scheduler.py",     # (and a tail split's)
      [("            nunits = first + (ntiles - first) * ((ktiles + kper - 1) // kper)",
        "            nunits = first + (ntiles - first) * (ktiles // kper)")],
      ["tests/test_gpu_splitk.py"], extra=["-k", "element_by_element and 200-300-5000 and NN and C"]),
    M("fix-up: one partial-sum plane left out", "gpu", "numba_tc/fixup.py",     # (both fix-ups' ordered sum)
      [("    for s in range(1, splits):", "    for s in range(1, splits - 1):")],
      ["tests/test_gpu_splitk.py"], extra=["-k", "element_by_element and 64-256-8192 and NN and C"]),
    M("repack: the copy read at the destination's pitch", "gpu", "numba_tc/repack.py",
      [("        s = src + (line * ld_src + c0) * ITEM", "        s = src + (line * ld_dst + c0) * ITEM")],
      ["tests/test_gpu_splitk.py"], extra=["-k", "element_by_element and 1000-777-1001 and NN and C"]),
]


def commit_id() -> str:
    """The commit under test: $NUMBA_TC_COMMIT if set (a copy of the tree without .git), else git's."""
    if os.environ.get("NUMBA_TC_COMMIT"):
        return os.environ["NUMBA_TC_COMMIT"]
    try:
        c = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return c + ("+dirty" if dirty else "")
    except OSError:
        return "unknown"


def apply(src: str, m: Mutant) -> str:
    """The file's text with the mutant's edits, or ValueError when a snippet does not occur once."""
    for old, new in m.edits:
        n = src.count(old)
        if n != 1:
            raise ValueError(f"mutant {m.name!r}: snippet occurs {n} times in {m.file}: {old[:60]!r}")
        src = src.replace(old, new)
    return src


def _copy(dst: str):
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build", "dist",
                                    ".ipynb_checkpoints", ".pytest_cache", ".gl")
    shutil.copytree(ROOT, dst, ignore=ignore, symlinks=True)


def _pytest(root: str, m: Mutant, timeout: int):
    args = [sys.executable, "-m", "pytest", "-x", "-q", "-rf", "-p", "no:cacheprovider",
            *m.tests, *m.extra]
    # the copy first, then what the caller's path held (packages carried in, e.g. a --target dir)
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, PYTHONDONTWRITEBYTECODE="1")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    t0 = time.time()
    try:
        p = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
        out, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or "") if isinstance(e.stdout, str) else "", "timeout"
    return rc, out, time.time() - t0, "python -m pytest -x -q " + " ".join(m.tests + m.extra)


def _first_failure(out: str) -> str:
    for line in out.splitlines():
        mm = re.match(r"(FAILED|ERROR) (.+?)(?: - |$)", line)     # (a test id may hold spaces)
        if mm:
            return mm.group(2)
    return ""


def run(mutants: List[Mutant], timeout: int, log=print) -> List[dict]:
    records = []
    commit = commit_id()
    with tempfile.TemporaryDirectory(prefix="numba_tc_mutants_") as tmp:
        root = os.path.join(tmp, "repo")
        _copy(root)
        baseline = {}
        for m in mutants:
            key = tuple(m.tests + m.extra)
            if key not in baseline:                 # the tests pass on the unmutated copy
                rc, out, secs, cmd = _pytest(root, m, timeout)
                baseline[key] = rc == 0
                log(f"baseline {'pass' if rc == 0 else 'FAIL'} ({secs:.0f}s): {cmd}")
                if rc != 0:
                    log(out[-3000:])
            path = os.path.join(root, m.file)
            original = open(path).read()
            try:
                open(path, "w").write(apply(original, m))
                rc, out, secs, cmd = _pytest(root, m, timeout)
            finally:
                open(path, "w").write(original)
            # caught: a test failed (a node id) or hung; a mutant that breaks the module's
            # import or collection fails no test and is not caught (it would hide a blind spot)
            failed = _first_failure(out)
            caught = baseline[key] and (rc == "timeout" or (rc != 0 and "::" in failed))
            rec = {"mutant": m.name, "tier": m.tier, "caught": caught,
                   "test": failed if caught else "", "commit": commit, "command": cmd,
                   "file": m.file, "note": m.note, "seconds": round(secs, 1)}
            if not baseline[key]:
                rec["note"] = (m.note + "; " if m.note else "") + "baseline failed: verdict void"
            if rc == "timeout":
                rec["note"] = (rec["note"] + "; " if rec["note"] else "") + f"timed out after {timeout}s"
            elif baseline[key] and rc != 0 and not caught:
                rec["note"] = (rec["note"] + "; " if rec["note"] else "") + "failed outside any test (a broken mutant)"
            records.append(rec)
            log(f"{'CAUGHT' if caught else 'MISSED'} [{m.tier}] {m.name} ({secs:.0f}s) {rec['test']}")
    return records


def merge(path: str, records: List[dict]) -> List[dict]:
    """Records into ``path``, replacing those of the same mutant."""
    rows = json.load(open(path)) if os.path.exists(path) else []
    new = {r["mutant"] for r in records}
    rows = [r for r in rows if r["mutant"] not in new] + records
    order = {m.name: i for i, m in enumerate(MUTANTS)}
    rows.sort(key=lambda r: order.get(r["mutant"], len(order)))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tier", nargs="+", choices=TIERS, default=["cpu", "sim", "sass"])
    p.add_argument("--only", nargs="+", help="run the mutants whose name contains one of these")
    p.add_argument("--out", default=RESULTS, help="the JSON to merge the records into")
    p.add_argument("--merge", metavar="JSON", help="merge a JSON of records (from another machine) into --out")
    p.add_argument("--list", action="store_true")
    p.add_argument("--timeout", type=int, default=900, help="seconds per pytest run")
    p.add_argument("--jobs", type=int, default=1, help="mutants at once, each in its own copy with its own "
                   "baseline (the GPU tier on a machine of many cores)")
    a = p.parse_args(argv)
    if a.list:
        for m in MUTANTS:
            print(f"{m.tier:>4}  {m.name}  ({m.file}; {' '.join(m.tests + m.extra)})")
        return 0
    if a.merge:
        rows = merge(a.out, json.load(open(a.merge)))
        print(f"{len(rows)} records in {a.out}; {sum(r['caught'] for r in rows)} caught")
        return 0
    todo = [m for m in MUTANTS if m.tier in a.tier and (a.only is None or any(o in m.name for o in a.only))]
    for m in todo:              # every snippet still in the source, before any run starts
        apply(open(os.path.join(ROOT, m.file)).read(), m)
    log = lambda s: print(s, flush=True)        # noqa: E731
    if a.jobs > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(a.jobs) as pool:
            records = [r for rs in pool.map(lambda m: run([m], a.timeout, log), todo) for r in rs]
    else:
        records = run(todo, a.timeout, log)
    merge(a.out, records)
    missed = [r["mutant"] for r in records if not r["caught"]]
    print(f"{len(records) - len(missed)}/{len(records)} caught" + (f"; missed: {missed}" if missed else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
