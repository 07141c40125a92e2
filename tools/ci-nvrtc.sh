#!/usr/bin/env bash
# Makes libnvrtc (CUDA 13.0, from PyPI; no GPU, driver or toolkit needed) loadable so that
# `cargo test --test tests cuda_kernels::` compiles every CUDA kernel with NVRTC instead of skipping.
#
#   eval "$(tools/ci-nvrtc.sh)"     # then: cargo test
#
# stdout carries only the `export LD_LIBRARY_PATH=…` line; everything else goes to stderr.
# Without network or pip it prints a warning and exports nothing: the test then prints
# "SKIPPED: …" rather than failing. 13.0.x matches the H200 machine's CUDA 13.0 driver (PTX
# from a newer NVRTC would not load there); cudarc's cuda-13000 build looks for
# libnvrtc.so.13, which the wheel ships, and libnvrtc dlopens libnvrtc-builtins.so.13.0 from
# the same directory, which is why LD_LIBRARY_PATH must point there.
set -uo pipefail

version="${BATON_NVRTC_VERSION:-13.0.88}"
dir="${BATON_NVRTC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/baton/nvrtc-$version}"

find_lib() { find "$dir" -name 'libnvrtc.so.13' -print -quit 2>/dev/null; }

lib="$(find_lib)"
if [ -z "$lib" ]; then
    echo "ci-nvrtc: installing nvidia-cuda-nvrtc==$version into $dir" >&2
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$dir" "nvidia-cuda-nvrtc==$version" >&2 || true
    lib="$(find_lib)"
fi
if [ -z "$lib" ]; then
    echo "ci-nvrtc: WARNING: libnvrtc could not be installed; the NVRTC kernel test will be skipped" >&2
    exit 0
fi
libdir="$(dirname "$lib")"
echo "ci-nvrtc: libnvrtc is $lib" >&2
ls "$libdir" | sed 's/^/ci-nvrtc:   /' >&2
echo "export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
