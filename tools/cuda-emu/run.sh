#!/usr/bin/env bash
# Runs the hybrid CUDA kernels (src/engine/kernels/hybrid.cu) on the CPU under a small
# emulation of the CUDA execution model (emu.h: a block's threads are fibers with real
# __syncthreads and warp-shuffle barriers) and compares every kernel with a port of the CPU
# device (harness.cpp), at the fixture's sizes and Macaron-V1-Tall's. No GPU, driver or CUDA
# toolkit: g++ with C++20 only. It checks the kernels' index arithmetic, barriers and
# reductions; launch configurations are the harness's copies of the Rust side's.
#
#   tools/cuda-emu/run.sh        # prints one line per kernel and case; exit status 1 on a mismatch
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$here/../.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The kernel sources as a host translation unit: no extern "C", dynamic shared memory from the
# emulator.
cat "$repo/src/engine/kernels/common.cuh" "$repo/src/engine/kernels/hybrid.cu" |
    sed -e 's/extern "C" //' \
        -e 's/extern __shared__ float gdr_shared\[\];/float* gdr_shared = dyn_shared.data();/' \
        >"$work/kernels.inc"
cp "$here/emu.h" "$here/harness.cpp" "$work/"
g++ -std=c++20 -O1 -pthread -w -o "$work/harness" "$work/harness.cpp"
"$work/harness"
