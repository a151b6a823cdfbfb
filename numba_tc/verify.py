"""Checking a variant against a float64 reference.

Rules (the project's, from its brief): fresh random inputs for every check, never zeros; the
output is poisoned with NaN first (on the device: the NumPy path uploads ``out`` into the buffer
the kernel writes), so an element the kernel never wrote fails; ragged shapes (multiples of no
tile) as well as round ones.

Two measures, both required:

* **Element-wise**, as cuBLAS's and CUTLASS's tests do: against the float64 product of the inputs
  *as the kernel reads them* (fp32 inputs on tensor cores rounded to tf32 as ``cvt.rna`` does),
  every element must satisfy ``|c - ref| <= acc_tol * (|A| @ |B|) + out_u * (|ref| + acc_bound)
  + tiny``. ``acc_tol`` is a few fp32 ulps times sqrt(K) (``accumulation_tolerance``), ``out_u``
  half an ulp of a 16-bit output (2^-8 bf16, 2^-11 fp16; 0 for fp32). One wrong element fails,
  and the message names it (row, column, value, reference, bound).
* **Frobenius**, the summary: ||C - C_ref|| / ||C_ref|| against float64 within ``TOLERANCE``.

Why sqrt(K) and not K (the rigorous worst case, gamma_K = K u): with inputs of both signs the
partial sums of a dot product grow like sqrt(k), so even adds that truncate (as tensor cores'
alignment does) give an error of about 0.5 u sqrt(K) (|A|@|B|); the bound allows 8 u sqrt(K)
(u = 2^-24), yet a single missing product of a K = 4096 problem still exceeds it 10-fold.
``check`` draws standard normal inputs; ``elementwise`` on inputs of one sign should pass a
larger ``acc_tol`` (``accumulation_tolerance(k, worst_case=True)``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["TOLERANCE", "random_operands", "rel_error", "check", "CheckResult", "LAYOUTS",
           "elementwise", "ElementCheck", "as_read", "tf32_reads", "accumulation_tolerance", "OUT_HALF_ULP", "KINDS",
           "poisoned_out", "to_kind", "to_host"]

# Relative Frobenius error allowed per precision (fp32 accumulation in every case).
TOLERANCE = {"float32": 1e-5, "tf32": 1e-3, "tf32_rn": 1e-3, "float16": 1e-2, "bfloat16": 1e-2}
# 'N': row-major (C order), 'T': column-major (Fortran order), for A then B.
LAYOUTS = ("NN", "NT", "TN", "TT")
# Half an ulp, relative, of each output type: the rounding of an fp32 accumulator on the store.
OUT_HALF_ULP = {"float32": 0.0, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
# The smallest positive value of each output type: a result that should be 0 may round to it.
SMALLEST_SUBNORMAL = {"float32": 2.0 ** -149, "float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}
FP32_U = 2.0 ** -24          # unit roundoff of fp32 (half an ulp)
ACC_ULPS = 8                 # fp32 roundoffs per sqrt(K) allowed for the accumulation
# Array kinds ``check`` can run on (bfloat16 only on numpy and torch: Numba and CuPy have none).
KINDS = ("numpy", "numba", "cupy", "torch")


def accumulation_tolerance(k: int, worst_case: bool = False) -> float:
    """The fp32 accumulation's allowance, relative to |A| @ |B|: ACC_ULPS fp32 roundoffs times
    sqrt(K) (inputs of both signs), or the rigorous gamma_K = K u / (1 - K u) (any inputs)."""
    k = max(int(k), 1)
    if worst_case:
        return 2 * k * FP32_U / max(1 - 2 * k * FP32_U, 1e-3)
    return ACC_ULPS * FP32_U * np.sqrt(k)


def random_operands(m: int, n: int, k: int, dtype: str = "float32", layout: str = "NN",
                    rng: Optional[np.random.Generator] = None):
    """Host arrays a (m x k) and b (k x n), standard normal, in the given layout."""
    rng = rng if rng is not None else np.random.default_rng()
    from .arrays import np_dtype
    dt = np_dtype(dtype)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(dt)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(dt)
    if layout[0] == "T":
        a = np.asfortranarray(a)
    if layout[1] == "T":
        b = np.asfortranarray(b)
    return a, b


def as_read(x, precision: str) -> np.ndarray:
    """A host operand as the kernel reads it, in float64: fp32 arrays on tensor cores rounded to
    10 mantissa bits to nearest, "tf32": ties away from zero (mma.sync's fragments, by
    ``cvt.rna.tf32.f32``), "tf32_rn": ties to even (wgmma's, loaded by TMA as TFLOAT32:
    benchmarks/check_tf32.py, in git at 4dce1f6); every other input exactly (16-bit products are exact in fp32)."""
    x = np.asarray(x)
    if precision in ("tf32", "tf32_rn"):
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        finite = (bits & 0x7F800000) != 0x7F800000
        half = np.uint32(0x1000) if precision == "tf32" else np.uint32(0xFFF) + ((bits >> 13) & np.uint32(1))
        rounded = np.where(finite, (bits + half) & np.uint32(0xFFFFE000), bits)
        return rounded.astype(np.uint32).view(np.float32).astype(np.float64)
    return x.astype(np.float64)


def tf32_reads(variant) -> str:
    """How a variant's kernels read float32 arrays as tf32 (``as_read``'s precision): the wgmma
    ladder's as TMA rounds them ("tf32_rn"), the mma.sync ladder's as ``cvt.rna`` does ("tf32")."""
    from .api import get_variant
    return "tf32_rn" if variant != "auto" and get_variant(variant).ladder == "wgmma" else "tf32"


def rel_error(c, ref) -> float:
    """||c - ref||_F / ||ref||_F in float64; inf if c has any NaN/inf (an unwritten element)."""
    c = np.asarray(c, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if c.shape != ref.shape:
        raise ValueError(f"shape {c.shape} != reference {ref.shape}")
    if not np.all(np.isfinite(c)):
        return float("inf")
    den = np.linalg.norm(ref)
    num = np.linalg.norm(c - ref)
    return float(num / den) if den > 0 else float(num)


@dataclass
class ElementCheck:
    """The element-wise verdict: how many elements are out of bounds, and the worst one (largest
    |c - ref| / bound; a NaN or inf counts as the worst)."""
    bad: int
    row: int = -1
    col: int = -1
    value: float = 0.0
    ref: float = 0.0
    bound: float = 0.0
    acc_tol: float = 0.0

    @property
    def ok(self) -> bool:
        return self.bad == 0

    def __str__(self):
        if self.ok:
            return f"every element within bounds (acc_tol {self.acc_tol:.1e})"
        return (f"{self.bad} element(s) out of bounds; worst at row {self.row}, col {self.col}: "
                f"value {self.value!r}, reference {self.ref!r}, |diff| {abs(self.value - self.ref):.3g} "
                f"> bound {self.bound:.3g}")


def elementwise(c, a, b, precision: str = "float32", out_dtype: str = "float32",
                acc_tol: Optional[float] = None, ref=None) -> ElementCheck:
    """Check every element of ``c`` (host, M x N) against the float64 product of host operands
    ``a`` (M x K) and ``b`` (K x N) as the kernel reads them in ``precision``:
    |c - ref| <= acc_tol * (|A| @ |B|) + OUT_HALF_ULP[out_dtype] * (|ref| + acc bound) + tiny."""
    A, B = as_read(a, precision), as_read(b, precision)
    ref = A @ B if ref is None else np.asarray(ref, dtype=np.float64)
    mag = np.abs(A) @ np.abs(B)
    c = np.asarray(c).astype(np.float64)
    if c.shape != ref.shape:
        raise ValueError(f"shape {c.shape} != reference {ref.shape}")
    k = A.shape[1]
    tol = accumulation_tolerance(k) if acc_tol is None else acc_tol
    tiny = SMALLEST_SUBNORMAL[out_dtype]
    acc = tol * mag
    bound = acc + OUT_HALF_ULP[out_dtype] * (np.abs(ref) + acc) + tiny
    diff = np.abs(c - ref)
    with np.errstate(invalid="ignore"):
        bad = ~(diff <= bound)                   # NaN counts as bad
    n_bad = int(np.count_nonzero(bad))
    if n_bad == 0:
        return ElementCheck(0, acc_tol=tol)
    score = np.where(np.isfinite(diff), diff / bound, np.inf)
    r, col = np.unravel_index(int(np.argmax(np.where(bad, score, -1.0))), c.shape)
    return ElementCheck(n_bad, int(r), int(col), float(c[r, col]), float(ref[r, col]),
                        float(bound[r, col]), tol)


@dataclass
class CheckResult:
    variant: str
    m: int
    n: int
    k: int
    layout: str
    dtype: str
    rel_err: float
    tol: float
    elements: Optional[ElementCheck] = None      # None: not checked element-wise
    out_layout: str = "C"
    kind: str = "numpy"

    @property
    def ok(self) -> bool:
        return self.rel_err <= self.tol and (self.elements is None or self.elements.ok)

    def __str__(self):
        where = "" if (self.out_layout, self.kind) == ("C", "numpy") else f" out {self.out_layout} {self.kind}"
        s = (f"{self.variant:<12} {self.m}x{self.n}x{self.k} {self.layout} {self.dtype}{where}: "
             f"rel_err {self.rel_err:.2e} (tol {self.tol:.0e}) {'ok' if self.ok else 'FAIL'}")
        if self.elements is not None and not self.elements.ok:
            s += "; " + str(self.elements)
        return s


def to_kind(x: np.ndarray, kind: str, stream=None):
    """A host array on the GPU as ``kind`` ("numba", "cupy", "torch"), in its memory order
    (C or Fortran); NumPy arrays are returned as they are."""
    if kind == "numpy":
        return x
    f = x.flags.f_contiguous and not x.flags.c_contiguous
    if kind == "numba":
        from numba import cuda
        return cuda.to_device(x, stream=stream or 0)
    if kind == "cupy":
        import cupy
        return cupy.asfortranarray(cupy.asarray(x)) if f else cupy.ascontiguousarray(cupy.asarray(x))
    if kind == "torch":
        import torch
        from .arrays import dtype_name
        name = dtype_name(x.dtype)
        h = np.ascontiguousarray(x.T if f else x)
        t = torch.from_numpy(h.astype(np.float32) if name == "bfloat16" else h)
        t = t.to(device="cuda", dtype=getattr(torch, name))
        return t.T if f else t
    raise ValueError(f"unknown array kind {kind!r}; kinds: {', '.join(KINDS)}")


def to_host(x, kind: str) -> np.ndarray:
    """A result of any kind back on the host (bfloat16 as float32)."""
    if kind == "numpy":
        return np.asarray(x)
    if kind == "numba":
        return x.copy_to_host()
    if kind == "cupy":
        import cupy
        return cupy.asnumpy(x)
    if kind == "torch":
        import torch
        return (x.float() if x.dtype == torch.bfloat16 else x).cpu().numpy()
    raise ValueError(f"unknown array kind {kind!r}")


def poisoned_out(m: int, n: int, out_dtype: str, out_layout: str, kind: str):
    """An (m, n) output of ``kind`` filled with NaN, row-major ("C") or column-major ("F")."""
    from .arrays import np_dtype
    host = np.full((m, n), np.nan, dtype=np_dtype(out_dtype), order=out_layout)
    return to_kind(host, kind)


def check(variant: str, m: int, n: int, k: int, layout: str = "NN", dtype: str = "float32",
          out_layout: str = "C", seed: Optional[int] = None, precision: Optional[str] = None,
          out_dtype: str = "float32", kind: str = "numpy", stream=None) -> CheckResult:
    """Run ``gemm`` on fresh random operands of ``kind`` (NumPy by default) into a NaN-poisoned
    ``out`` (row-major "C" or column-major "F"); compare with float64, element by element and in
    the Frobenius norm.

    dtype "tf32" means float32 arrays computed in tf32 (tolerance 1e-3, inputs rounded as the
    kernel rounds them: ``tf32_reads``). ``stream``: passed to gemm; the check synchronizes it
    before reading."""
    from .api import gemm
    rng = np.random.default_rng(seed)
    prec = precision or (tf32_reads(variant) if dtype == "tf32" else dtype)
    dtype = "float32" if dtype == "tf32" else dtype          # tf32: fp32 arrays, tf32 math
    a, b = random_operands(m, n, k, dtype, layout, rng)
    out = poisoned_out(m, n, out_dtype, out_layout, kind)
    gemm(to_kind(a, kind), to_kind(b, kind), variant=variant, out=out, stream=stream)
    if kind != "numpy":
        _synchronize(kind, stream)
    c = to_host(out, kind)
    ref = as_read(a, prec) @ as_read(b, prec)
    name = getattr(variant, "name", variant)           # a registered name or a Variant
    elements = elementwise(c, a, b, prec, out_dtype, ref=ref)
    return CheckResult(name, m, n, k, layout, dtype, rel_error(c, a.astype(np.float64) @ b.astype(np.float64)),
                       TOLERANCE[prec], elements, out_layout, kind)


def _synchronize(kind: str, stream):
    if stream is not None and hasattr(stream, "synchronize"):
        stream.synchronize()
    if kind == "torch":
        import torch
        torch.cuda.synchronize()
    elif kind == "cupy":
        import cupy
        cupy.cuda.runtime.deviceSynchronize()
    else:
        from numba import cuda
        cuda.synchronize()
