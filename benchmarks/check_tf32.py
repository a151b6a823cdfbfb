"""How the Hopper kernel's tf32 reads fp32 values: the product of float32 tensors (``hopper``,
``allow_tf32``) checked element by element against float64 products of the inputs rounded three
ways (to nearest, ties away from zero as ``cvt.rna.tf32.f32`` or to even; truncated to 10 mantissa
bits; not at all), for each
tensor-map element type TMA may load them as (FLOAT32, TFLOAT32, TFLOAT32_FTZ); cuBLAS's TF32
product beside it.

    python benchmarks/check_tf32.py
"""
from __future__ import annotations

import numpy as np
import torch

import numba_tc
from numba_tc import tensormap, verify


def trunc(x):
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return bits.view(np.float32)


def report(name, c, a, b):
    out = [name]
    for model, (x, y) in (("rna", (verify.as_read(a, "tf32"), verify.as_read(b, "tf32"))),
                          ("rne", (verify.as_read(a, "tf32_rn"), verify.as_read(b, "tf32_rn"))),
                          ("trunc", (trunc(a), trunc(b))), ("exact", (a, b))):
        e = verify.elementwise(c, x.astype(np.float32), y.astype(np.float32), "float32")
        out.append(f"{model}: {'ok' if e.ok else 'FAIL'} ({e.bad} bad)")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out.append(f"rel_err {verify.rel_error(c, ref):.3e}")
    print("  ".join(out), flush=True)


def main():
    g = torch.Generator(device="cuda").manual_seed(0)
    for m, n, k, lay in ((512, 384, 4096, "NT"), (328, 200, 264, "NN")):     # (A, B: "T" a transposed view)
        a = torch.randn(m, k, device="cuda", generator=g)
        b = torch.randn(n, k, device="cuda", generator=g).t() if lay[1] == "T" else torch.randn(k, n, device="cuda",
                                                                                              generator=g)
        ha, hb = a.cpu().numpy(), b.cpu().numpy()
        print(f"{m}x{n}x{k} {lay}")
        for code, label in ((7, "FLOAT32"), (11, "TFLOAT32"), (12, "TFLOAT32_FTZ")):
            tensormap._DTYPES["tf32"] = code
            tensormap._CACHE.clear()
            c = torch.full((m, n), float("nan"), device="cuda")
            numba_tc.gemm(a, b, variant="hopper", out=c)
            torch.cuda.synchronize()
            report(f"  hopper map {label:<13}", c.cpu().numpy(), ha, hb)
        tensormap._DTYPES["tf32"] = 11                   # (the package's own)
        tensormap._CACHE.clear()
        torch.backends.cuda.matmul.allow_tf32 = True
        report("  cuBLAS TF32             ", (a @ b).cpu().numpy(), ha, hb)


if __name__ == "__main__":
    main()
