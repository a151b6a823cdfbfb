#!/usr/bin/env bash
# numba_tc in a torch program: GPT-2 small (124M, context 1024, bf16 autocast) trained 200 steps
# with every nn.Linear/Conv1D forward and backward through numba_tc and 200 with plain torch from
# the same seed, then greedy decoding with a KV cache at batch 1 and 16, tokens/s beside torch.
# Writes torch_<gpu>.json (records "train" and "generate", each with gpu and commit), the loss
# curves torch_gpt2_loss_<gpu>.png and the log torch_<gpu>.log into OUTDIR (<gpu>: h200, h100...).
# Needs the models extra (transformers).
#
#   bash benchmarks/torch_bench.sh [OUTDIR]       # OUTDIR defaults to benchmarks/results
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-benchmarks/results}
mkdir -p "$OUT_DIR"
GPU=$(python -c "from numba_tc.bench import gpu_tag; print(gpu_tag())")
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee "$OUT_DIR/torch_$GPU.log"
python -u examples/train_gpt.py --json "$OUT_DIR/torch_$GPU.json" --plot "$OUT_DIR/torch_gpt2_loss_$GPU.png" \
    --command "bash benchmarks/torch_bench.sh" 2>&1 | tee -a "$OUT_DIR/torch_$GPU.log"
