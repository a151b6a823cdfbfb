import torch, numba_tc
a = torch.randn(3, 200, 136, device="cuda", dtype=torch.bfloat16)
b = torch.randn(3, 136, 264, device="cuda", dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)
bias = torch.randn(264, device="cuda", dtype=torch.bfloat16)
print(numba_tc.explain(a, b))
y = numba_tc.gemm(a, b, bias=bias, activation="gelu_tanh")
z = numba_tc.gemm(a[0], b)
torch.cuda.synchronize()
print("ok", float((y.double() - torch.nn.functional.gelu(torch.matmul(a.double(), b.double()) + bias.double(), approximate="tanh")).norm()))
