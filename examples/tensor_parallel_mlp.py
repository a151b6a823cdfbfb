"""A tensor-parallel MLP block across the GPUs of one host: torch.distributed (NCCL), one process
per GPU, numba_tc doing every rank's GEMMs.

    torchrun --nproc_per_node=2 examples/tensor_parallel_mlp.py [--tokens 4096 --hidden 4096 --ffn 16384]

Y = gelu(X @ W1) @ W2, split the Megatron way: each rank holds a slice of W1's columns (the
first GEMM needs no communication: H_r = gelu(X @ W1_r)) and the matching rows of W2 (the second
gives a partial sum, Y_r = H_r @ W2_r, in float32), and one all_reduce adds the partial sums.
numba_tc runs on torch's current stream of each rank's device, so NCCL and the GEMMs are ordered
without a synchronization. Rank 0 checks Y against the same block computed on one GPU by
numba_tc and against float64, and prints the times.
"""
import argparse
import os

import torch
import torch.distributed as dist

import numba_tc


def block(x, w1, w2, out_dtype):
    h = torch.nn.functional.gelu(numba_tc.gemm(x, w1))
    return numba_tc.gemm(h, w2, out_dtype=out_dtype)


def median_ms(fn, reps=20):
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return sorted(times)[len(times) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=16384)
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(dev)
    if args.ffn % world:
        raise SystemExit(f"--ffn {args.ffn} must divide over {world} ranks")
    gen = torch.Generator(device="cuda").manual_seed(1234)      # the same full weights on every rank
    x = torch.randn(args.tokens, args.hidden, device="cuda", generator=gen).bfloat16()
    w1 = (torch.randn(args.hidden, args.ffn, device="cuda", generator=gen) / args.hidden ** 0.5).bfloat16()
    w2 = (torch.randn(args.ffn, args.hidden, device="cuda", generator=gen) / args.ffn ** 0.5).bfloat16()
    part = args.ffn // world
    w1_r = w1[:, rank * part:(rank + 1) * part].contiguous()
    w2_r = w2[rank * part:(rank + 1) * part].contiguous()

    def parallel():
        y = block(x, w1_r, w2_r, "float32")                     # this rank's partial sum
        dist.all_reduce(y)
        return y

    y = parallel()
    torch.cuda.synchronize()
    ms = median_ms(parallel)
    flop = 2 * 2 * args.tokens * args.hidden * args.ffn
    if rank == 0:
        one = block(x, w1, w2, "float32")                       # the whole block on one GPU
        ms1 = median_ms(lambda: block(x, w1, w2, "float32"))
        ref = torch.nn.functional.gelu(x.double() @ w1.double()).bfloat16().double() @ w2.double()
        rel = lambda a, b: float(torch.linalg.norm(a.double() - b) / torch.linalg.norm(b))   # noqa: E731
        print(f"world {world}, devices {[torch.cuda.get_device_name(i) for i in range(world)]}, "
              f"numba_tc {numba_tc.__version__}, torch {torch.__version__}")
        print(f"X {tuple(x.shape)}, W1 {tuple(w1.shape)}, W2 {tuple(w2.shape)}, bf16 in, fp32 partial sums")
        print(f"tensor-parallel vs one GPU: rel. error {rel(y, one.double()):.2e}")
        print(f"tensor-parallel vs float64: rel. error {rel(y, ref):.2e}; one GPU vs float64: {rel(one, ref):.2e}")
        print(f"time: {ms:.3f} ms on {world} GPUs ({flop / ms / 1e9:.0f} TFLOP/s), {ms1:.3f} ms on one "
              f"({flop / ms1 / 1e9:.0f} TFLOP/s): {ms1 / ms:.2f}x")
        ok = rel(y, ref) < 1e-2 and rel(y, one.double()) < 1e-2
        print("check:", "ok" if ok else "FAILED")
        if not ok:
            raise SystemExit(1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
