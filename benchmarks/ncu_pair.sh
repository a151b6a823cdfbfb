#!/bin/bash
# Nsight Compute on one launch of a variant and one of cuBLAS, same inputs and sections
# (clocks left alone): bash benchmarks/ncu_pair.sh VARIANT DTYPE SIZE [extra ncu args]
v=$1; dt=$2; n=$3; shift 3
for who in "$v" cublas; do
  echo "== ncu $who $dt ${n}^3"
  ncu --clock-control none -k 'regex:gemm|tiled|nvjet|xmma|cutlass' -c 1 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section LaunchStats \
    --section Occupancy --section ComputeWorkloadAnalysis --section InstructionStats "$@" \
    python benchmarks/profile_one.py "$who" "$n" "$dt" 2>&1 | grep -v '^==PROF==\|^==WARNING=='
done
