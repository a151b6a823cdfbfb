import numpy as np, torch, numba_tc
from numba import cuda
from numba_tc import hopper, bench, arrays
from numba_tc.link import max_active_clusters, launch_cluster, enable_dynamic_smem, sm_count
from numba_tc.config import WgmmaConfig
M = N = K = 8192
a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16); b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
A, B, C = arrays.as_matrix(a, "a"), arrays.as_matrix(b, "b"), arrays.as_matrix(c, "out")
st = cuda.default_stream()
for name, cfg in [("persist_cl2", hopper.RUNG7), ("nonpersist_cl2", hopper.RUNG7.replace(persistent=False)),
                  ("persist_cl1", hopper.RUNG7.replace(cluster=1))]:
    k = hopper.wgmma_kernel(cfg, "bfloat16", "bfloat16", False, False, True, True)
    enable_dynamic_smem(k, hopper.SIGNATURE, cfg.smem_bytes)
    ma, mb = hopper.operand_maps(cfg, A, B); mc = hopper.output_map(cfg, C)
    args = (ma, mb, mc, C.ptr, M, N, K, C.ld)
    if cfg.cluster > 1:
        print(name, "max_active_clusters", max_active_clusters(k, hopper.SIGNATURE, cfg.threads, cfg.smem_bytes, 2))
    grids = [hopper.grid_size(cfg, M, N)] if not cfg.persistent else [32, 64, 100, 120, 128, 132]
    for g in grids:
        if cfg.cluster > 1:
            fn = lambda: launch_cluster(k, hopper.SIGNATURE, g, cfg.threads, cfg.smem_bytes, st, 2, args)
        else:
            fn = lambda: k[g, cfg.threads, st, cfg.smem_bytes](*args)
        ms = bench.time_gpu(fn, budget_s=0.3)
        print(name, "grid", g, f"{2*M*N*K/ms/1e9:.1f} TFLOP/s", flush=True)
