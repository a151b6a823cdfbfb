"""Checking a variant against a float64 reference.

Rules (the project's, from its brief): fresh random inputs for every check, never zeros; the
output is poisoned with NaN first, so an element the kernel never wrote fails; the error is the
relative Frobenius norm ||C - C_ref|| / ||C_ref|| against float64, with a tolerance per precision;
ragged shapes (multiples of no tile) as well as round ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

__all__ = ["TOLERANCE", "random_operands", "rel_error", "check", "CheckResult", "LAYOUTS"]

# Relative Frobenius error allowed per precision (fp32 accumulation in every case).
TOLERANCE = {"float32": 1e-5, "tf32": 1e-3, "float16": 1e-2, "bfloat16": 1e-2}
# 'N': row-major (C order), 'T': column-major (Fortran order), for A then B.
LAYOUTS = ("NN", "NT", "TN", "TT")


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
class CheckResult:
    variant: str
    m: int
    n: int
    k: int
    layout: str
    dtype: str
    rel_err: float
    tol: float

    @property
    def ok(self) -> bool:
        return self.rel_err <= self.tol

    def __str__(self):
        return (f"{self.variant:<12} {self.m}x{self.n}x{self.k} {self.layout} {self.dtype}: "
                f"rel_err {self.rel_err:.2e} (tol {self.tol:.0e}) {'ok' if self.ok else 'FAIL'}")


def check(variant: str, m: int, n: int, k: int, layout: str = "NN", dtype: str = "float32",
          out_layout: str = "C", seed: Optional[int] = None, precision: Optional[str] = None,
          out_dtype: str = "float32") -> CheckResult:
    """Run ``gemm`` on fresh random NumPy operands into a NaN-poisoned output; compare with float64.

    dtype "tf32" means float32 arrays computed in tf32 (tolerance 1e-3)."""
    from .api import gemm
    rng = np.random.default_rng(seed)
    prec = precision or dtype
    dtype = "float32" if dtype == "tf32" else dtype          # tf32: fp32 arrays, tf32 math
    a, b = random_operands(m, n, k, dtype, layout, rng)
    from .arrays import np_dtype
    out = np.full((m, n), np.nan, dtype=np_dtype(out_dtype), order=out_layout)
    gemm(a, b, variant=variant, out=out)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    name = getattr(variant, "name", variant)           # a registered name or a Variant
    return CheckResult(name, m, n, k, layout, dtype, rel_error(out, ref), TOLERANCE[prec])
