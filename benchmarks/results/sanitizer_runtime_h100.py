import torch, numba_tc
for variant, dt in (("hopper", torch.bfloat16), ("wgmma_cluster", torch.bfloat16), ("mma_tuned", torch.bfloat16), ("warptile", torch.float32)):
    for m, n, k in ((328, 264, 200), (1000, 520, 136)):
        a = torch.randn(m, k, device="cuda", dtype=dt); b = torch.randn(k, n, device="cuda", dtype=dt)
        c = numba_tc.gemm(a, b, variant=variant)
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        print(variant, m, n, k, float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref)))
