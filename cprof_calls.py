import cProfile, pstats, io, sys, time, torch, torch.nn.functional as F
sys.path.insert(0, '.')
import numba_tc.api as api, numba_tc.torch as ntt
w = torch.randn(2304, 768, device="cuda", requires_grad=True)
bias = torch.randn(2304, device="cuda", requires_grad=True)
cache = {}
x = torch.randn(1, 768, device="cuda")
def inf():
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(1000):
            ntt.linear(x, w, bias, cache=cache)
xt = torch.randn(64, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
wt = torch.randn(2304, 768, device="cuda", dtype=torch.bfloat16, requires_grad=True)
bt = torch.randn(2304, device="cuda", dtype=torch.bfloat16, requires_grad=True)
def train():
    for _ in range(300):
        ntt.linear(xt, wt, bt).sum().backward()
def train_torch():
    for _ in range(300):
        F.linear(xt, wt, bt).sum().backward()
for f in (inf, train, train_torch):
    f(); torch.cuda.synchronize()
    t = time.perf_counter(); f(); torch.cuda.synchronize(); print(f.__name__, (time.perf_counter() - t) * 1e6 / (1000 if f is inf else 300), "us per call")
    pr = cProfile.Profile(); pr.enable(); f(); torch.cuda.synchronize(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(35); print(s.getvalue())
