#!/usr/bin/env bash
# One run on a GPU machine (H200, driver 580 / CUDA 13.0): release build, the CUDA tests
# (every kernel, dense and hybrid, against the CPU device; the dense model against the HF+PEFT
# golden logits and greedy tokens of tests/fixtures/tiny-qwen3 and the hybrid Qwen3.5-MoE
# engine against those of tests/fixtures/tiny-qwen3-5-moe: logits, greedy tokens, route,
# decode = prefill, prefix reuse), then the benchmark on random Qwen3 0.6B/1.7B/4B and a
# Tall-shaped Qwen3.5-MoE (Macaron-V1-Tall's dimensions, TALL_LAYERS layers, default 8) with a
# rank-64 adapter beside HF transformers + PEFT, ending in one summary table.
#
#   tools/gpu-check.sh                 # everything (about 15 minutes on an H200, most of it
#                                      # writing the ~15 GB Tall model and HF's MoE decode)
#   BATON_BENCH_SIZES="0.6B" tools/gpu-check.sh
#   BATON_BENCH_SIZES="Tall" TALL_LAYERS=4 tools/gpu-check.sh
#   BATON_SKIP_BENCH=1 tools/gpu-check.sh
#
# Writes its logs to ${OUT:-/tmp/baton-gpu-check}. Exit status: non-zero when a test fails.
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-/tmp/baton-gpu-check}"
mkdir -p "$out"
models="${BATON_BENCH_DIR:-/tmp/baton-bench-models}"
sizes="${BATON_BENCH_SIZES:-0.6B 1.7B 4B Tall}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# --- Libraries: toolkit lib64 and pip-installed nvidia-* wheels, ahead of anything else.
libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && libs="$libs:$d"
done
py_site="$(python3 -c 'import site,sys; print(" ".join(site.getsitepackages()+[site.getusersitepackages()]))' 2>/dev/null || true)"
for s in $py_site; do
    for d in "$s"/nvidia/*/lib "$s"/nvidia/cu13/lib; do
        [ -d "$d" ] && libs="$libs:$d"
    done
done
export LD_LIBRARY_PATH="${libs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 | tee "$out/gpu.txt"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
for lib in libcuda.so libnvrtc.so libcublas.so libcublasLt.so; do
    found="$( (ldconfig -p 2>/dev/null | grep -o "/[^ ]*$lib[.0-9]*" ; for d in ${LD_LIBRARY_PATH//:/ }; do ls "$d"/$lib* 2>/dev/null; done) | sort -u | tr '\n' ' ')"
    echo "$lib: ${found:-NOT FOUND}"
done

# The test binary (all integration tests in one; the CUDA ones are the `cuda_kernels::` module):
# built here in release, or prebuilt elsewhere (a GPU machine without network cannot fetch
# crates): BATON_CUDA_TEST_BIN=path/to/tests-<hash> from
# `cargo test --release --test tests --no-run` on a machine with the same libc.
# cuda_tests FILTER [libtest args...]
export BATON_REPO_ROOT="$PWD"
cuda_tests() {
    if [ -n "${BATON_CUDA_TEST_BIN:-}" ]; then
        "$BATON_CUDA_TEST_BIN" "$@"
    else
        cargo test --release --test tests -- "$@"
    fi
}
step "release build"
if [ -n "${BATON_CUDA_TEST_BIN:-}" ]; then
    echo "prebuilt test binary: $BATON_CUDA_TEST_BIN"
elif ! command -v cargo >/dev/null; then
    echo "cargo is not on this machine: set BATON_CUDA_TEST_BIN to a prebuilt test binary" >&2
    exit 2
else
    cargo test --release --test tests --no-run 2>&1 | tail -3
fi
status=0

step "CUDA tests: kernels vs CPU device, models vs HF+PEFT golden (tiny-qwen3, tiny-qwen3-5-moe)"
BATON_REQUIRE_CUDA=1 cuda_tests cuda_kernels:: --nocapture --test-threads=1 2>&1 \
    | tee "$out/tests.txt" | grep -E "^test |SKIPPED|max \||largest|panicked|test result|compute_|hybrid on"
grep -q "test result: ok" "$out/tests.txt" || status=1
# The engine's own golden suite, on CUDA when it honours BATON_TEST_DEVICE (the Engine wiring).
if [ -z "${BATON_CUDA_TEST_BIN:-}" ] && grep -q BATON_TEST_DEVICE tests/engine_golden.rs 2>/dev/null; then
    step "engine golden suite on cuda"
    BATON_TEST_DEVICE=cuda cargo test --release --test tests engine_golden:: 2>&1 | tee "$out/engine_golden.txt" | tail -5
    grep -q "test result: ok" "$out/engine_golden.txt" || status=1
fi

if [ "${BATON_SKIP_BENCH:-0}" != 1 ]; then
    step "random models: $sizes"
    for s in $sizes; do
        # The Tall model is remade when TALL_LAYERS changed since it was written.
        if [ ! -f "$models/$s/base/model.safetensors" ] || { [ "$s" = Tall ] &&
            ! grep -q "\"num_hidden_layers\": ${TALL_LAYERS:-8}," "$models/Tall/base/config.json"; }; then
            python3 tools/bench/cuda/make_models.py "$models" "$s"
        fi
    done
    spec=""; for s in $sizes; do spec="$spec $s=$models/$s"; done
    : > "$out/bench.txt"

    step "baton benchmark"
    BATON_BENCH_MODELS="$spec" timeout 600 bash -c "$(declare -f cuda_tests); cuda_tests cuda_kernels::cuda_benchmark --exact --ignored --nocapture" 2>&1 | tee -a "$out/bench.txt" | grep -E "BENCH|panicked"

    step "HF transformers + PEFT baseline"
    if python3 -c 'import torch, transformers, peft; assert torch.cuda.is_available()' 2>/dev/null; then
        timeout 600 python3 tools/bench/cuda/hf_baseline.py $spec 2>&1 | tee -a "$out/bench.txt" | grep -E "BENCH|Error"
    else
        echo "torch/transformers/peft with CUDA not importable here: no HF baseline"
    fi

    step "summary"
    python3 tools/bench/cuda/summarize.py "$out/bench.txt" | tee "$out/summary.txt"
fi
exit $status
