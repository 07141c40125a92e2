//! The CUDA device. On any machine: every kernel compiles with NVRTC (when libnvrtc loads —
//! tools/ci-nvrtc.sh installs it — else a printed SKIPPED line), the hand-written bf16 bit
//! logic matches `half`, and a machine without CUDA gets errors, not panics. On a GPU (skipped
//! with a printed reason elsewhere; BATON_REQUIRE_CUDA=1 turns the skip into a failure, as
//! tools/gpu-check.sh sets it): each kernel against the CPU device, and the model on CUDA
//! against the HF+PEFT golden logits and greedy tokens of tests/fixtures/tiny-qwen3.

use crate::support::golden;

use baton::engine::ModelConfig;
use baton::engine::device::cpu::CpuDevice;
use baton::engine::device::cuda::{self, CudaDevice, Selected, kernels};
use baton::engine::device::{AttentionShape, Device, KvShape};
use baton::engine::lora::LoraAdapter;
use baton::engine::model::{PREFILL_CHUNK, Qwen3};
use baton::engine::weights::WeightFiles;
use baton::protocol::DeviceChoice;
use golden::{fixture, golden, ids};
use serde_json::Value;

const ATOL: f32 = 2e-3;
const RTOL: f32 = 2e-3;

/// Prints a skip reason where every `cargo test` log shows it: straight to the stderr handle,
/// which libtest's output capture (it hooks the print macros only) leaves alone.
fn skipped(test: &str, reason: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {reason}");
}

/// Set by tools/gpu-check.sh: on the GPU machine a skip is a failure.
fn required() -> bool {
    std::env::var("BATON_REQUIRE_CUDA").is_ok_and(|v| v == "1")
}

// ---------------------------------------------------------------------------------------------
// The hybrid kernels executed on the CPU under tools/cuda-emu (g++ only, no GPU): their index
// arithmetic, barriers and reductions against a port of the CPU device, at the fixture's and
// Macaron-V1-Tall's shapes.

#[test]
fn hybrid_kernels_match_the_cpu_device_under_the_cuda_emulator() {
    let gxx = std::process::Command::new("g++")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success());
    if crate::support::external::require("g++ (for tools/cuda-emu)", gxx.then_some(())).is_none() {
        return;
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/cuda-emu/run.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .output()
        .expect("run tools/cuda-emu/run.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "tools/cuda-emu/run.sh failed:\n{text}"
    );
    let checked = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert!(
        checked >= 40 && text.contains("all kernels match"),
        "the emulator checked {checked} cases, fewer than expected:\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// NVRTC: every kernel compiles (no GPU needed).

/// Whether libnvrtc loads; prints the skip otherwise.
fn nvrtc(test: &str) -> bool {
    if kernels::nvrtc_present() {
        return true;
    }
    let reason = "libnvrtc is not loadable; run `eval \"$(tools/ci-nvrtc.sh)\"` first";
    assert!(!required(), "{test}: BATON_REQUIRE_CUDA=1 but {reason}");
    // .ci/run installs libnvrtc: under CI this skip is a failure.
    crate::support::external::skip(&format!("{test}: {reason}"));
    false
}

#[test]
fn every_kernel_compiles_with_nvrtc_for_sm80_and_sm90() {
    if !nvrtc("every_kernel_compiles_with_nvrtc_for_sm80_and_sm90") {
        return;
    }
    for arch in ["compute_80", "compute_90"] {
        for (file, _) in kernels::FILES {
            let src = kernels::file_source(file).expect("listed file");
            if let Err(log) = kernels::compile(&src, arch) {
                panic!("{file} for {arch}:\n{log}");
            }
        }
        let ptx = kernels::compile(&kernels::full_source(), arch)
            .unwrap_or_else(|log| panic!("all kernels for {arch}:\n{log}"));
        for name in kernels::KERNEL_NAMES {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: the PTX has no entry point {name}"
            );
        }
        println!(
            "{arch}: {} kernels, {} bytes of PTX",
            kernels::KERNEL_NAMES.len(),
            ptx.len()
        );
    }
}

#[test]
fn nvrtc_reports_a_broken_kernel_with_its_log() {
    if !nvrtc("nvrtc_reports_a_broken_kernel_with_its_log") {
        return;
    }
    let err = kernels::compile(
        "extern \"C\" __global__ void broken(float* x) { x[0] = undefined_name; }",
        "compute_90",
    )
    .expect_err("must not compile");
    assert!(
        matches!(&err, baton::engine::EngineError::KernelCompile { log, .. } if log.contains("undefined_name")),
        "{err}"
    );
}

#[test]
fn every_listed_kernel_is_an_exported_entry_point_in_the_sources() {
    let src = kernels::full_source();
    let mut seen = std::collections::HashSet::new();
    for name in kernels::KERNEL_NAMES {
        assert!(seen.insert(name), "{name} listed twice");
        assert!(
            src.contains(&format!("extern \"C\" __global__ void {name}(")),
            "{name} is not an extern \"C\" kernel"
        );
    }
    assert_eq!(
        src.matches("extern \"C\" __global__").count(),
        kernels::KERNEL_NAMES.len(),
        "a kernel in the sources is missing from KERNEL_NAMES"
    );
    assert!(
        !src.contains("#include"),
        "NVRTC from PyPI ships no headers"
    );
}

#[test]
fn ptx_cache_key_depends_on_source_and_arch() {
    let (a, b) = (
        kernels::cache_path("x", "compute_90"),
        kernels::cache_path("x", "compute_80"),
    );
    let c = kernels::cache_path("y", "compute_90");
    if a.is_none() {
        skipped(
            "ptx_cache_key_depends_on_source_and_arch",
            "no cache directory (no HOME)",
        );
        return;
    }
    assert_ne!(a, b);
    assert_ne!(a, c);
    assert_eq!(a, kernels::cache_path("x", "compute_90"));
}

// ---------------------------------------------------------------------------------------------
// bf16 bit logic. The kernels' helpers are a few lines of integer arithmetic; this is the same
// arithmetic in Rust, checked against `half`, and the test also checks that the kernel source
// still contains exactly these lines, so the port cannot drift from what runs on the GPU.

fn f32_to_bf16_port(f: f32) -> u16 {
    let u = f.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 0x40) as u16;
    }
    let rounding = 0x7fffu32.wrapping_add((u >> 16) & 1);
    (u.wrapping_add(rounding) >> 16) as u16
}

fn bf16_to_f32_port(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

#[test]
fn bf16_helpers_in_the_kernels_are_the_ported_lines() {
    for line in [
        "if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);",
        "u32 rounding = 0x7fffu + ((u >> 16) & 1u);",
        "return (bf16_t)((u + rounding) >> 16);",
        "return __uint_as_float(((u32)h) << 16);",
    ] {
        assert!(kernels::COMMON.contains(line), "common.cuh lost: {line}");
    }
}

#[test]
fn bf16_rounding_matches_half_on_a_sweep() {
    let check = |f: f32| {
        let want = half::bf16::from_f32(f);
        let got = f32_to_bf16_port(f);
        if f.is_nan() {
            assert!(bf16_to_f32_port(got).is_nan(), "NaN {:#x}", f.to_bits());
        } else {
            assert_eq!(got, want.to_bits(), "f32 bits {:#010x}", f.to_bits());
        }
    };
    // Every 97th f32 bit pattern (~44M values: all exponents, mantissas, both signs) plus the
    // tie cases around each bf16 value, specials and the overflow edge.
    let mut bits = 0u64;
    while bits <= u32::MAX as u64 {
        check(f32::from_bits(bits as u32));
        bits += 97;
    }
    for h in (0..=u16::MAX).step_by(7) {
        let base = (h as u32) << 16;
        for low in [0x7fff, 0x8000, 0x8001, 0xffff] {
            check(f32::from_bits(base | low));
        }
    }
    for f in [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        3.389_531_4e38,
    ] {
        check(f);
    }
    // Widening is exact for every bf16.
    for h in 0..=u16::MAX {
        let want = half::bf16::from_bits(h).to_f32();
        let got = bf16_to_f32_port(h);
        assert!(got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()));
    }
}

/// The prefill GEMM feeds cuBLAS x = hi + lo (both bf16); this bounds what that loses.
#[test]
fn bf16_hi_lo_split_keeps_about_sixteen_bits() {
    let mut worst = 0f64;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..200_000 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let x =
            f32::from_bits((state as u32 & 0x807f_ffff) | (((state >> 40) as u32 % 60 + 97) << 23));
        let hi = f32_to_bf16_port(x);
        let lo = f32_to_bf16_port(x - bf16_to_f32_port(hi));
        let back = bf16_to_f32_port(hi) as f64 + bf16_to_f32_port(lo) as f64;
        worst = worst.max(((back - x as f64) / x as f64).abs());
    }
    assert!(worst <= 2f64.powi(-16), "worst relative error {worst:e}");
}

// ---------------------------------------------------------------------------------------------
// Device selection never panics.

#[test]
fn device_selection_without_cuda_is_an_error_or_a_cpu_fallback() {
    let missing = cuda::missing_libraries();
    if missing.is_empty() {
        skipped(
            "device_selection_without_cuda_is_an_error_or_a_cpu_fallback",
            "the CUDA libraries are present here",
        );
        return;
    }
    let err = match cuda::select(DeviceChoice::Cuda) {
        Ok(_) => panic!("--device cuda must fail without {missing:?}"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("cuda") && err.contains("cannot load"), "{err}");
    for lib in &missing {
        let short = lib.split(' ').next().unwrap_or(lib);
        assert!(err.contains(short), "{err} does not name {short}");
    }
    match cuda::select(DeviceChoice::Auto) {
        Ok(Selected::Cpu {
            fallback_reason: Some(reason),
        }) => assert!(reason.contains("using the CPU"), "{reason}"),
        Ok(_) => panic!("auto must fall back to the CPU with a reason"),
        Err(e) => panic!("auto must not fail: {e}"),
    }
    assert!(matches!(
        cuda::select(DeviceChoice::Cpu),
        Ok(Selected::Cpu {
            fallback_reason: None
        })
    ));
}

/// Without a driver, `--device cuda` on the hybrid model is a clear error naming what is
/// missing (library and engine API, `baton engine generate|route` and `--local --exec`), and
/// `auto` runs it on the CPU with the reason.
#[test]
fn hybrid_model_without_cuda_is_a_clear_error_or_a_cpu_fallback() {
    let test = "hybrid_model_without_cuda_is_a_clear_error_or_a_cpu_fallback";
    if !cuda::missing_libraries()
        .iter()
        .any(|l| l.starts_with("libcuda.so"))
    {
        skipped(test, "libcuda loads here");
        return;
    }
    let root = golden::fixture_named("tiny-qwen3-5-moe");
    let err = match baton::engine::Engine::load(&root, DeviceChoice::Cuda) {
        Ok(_) => panic!("--device cuda must fail without libcuda"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("libcuda.so") && err.contains("cuda"), "{err}");
    let engine = baton::engine::Engine::load(&root, DeviceChoice::Auto).expect("auto loads");
    assert!(
        engine.device_name().starts_with("cpu"),
        "{}",
        engine.device_name()
    );
    let why = engine
        .fallback_reason()
        .expect("auto says why it is on the CPU");
    assert!(
        why.contains("libcuda.so") && why.contains("using the CPU"),
        "{why}"
    );

    let env = crate::support::env::Env::new();
    let root = root.to_str().expect("utf-8 path");
    for args in [
        vec![
            "engine", "generate", "--local", root, "--device", "cuda", "--prompt", "hi",
        ],
        vec![
            "engine",
            "route",
            "--local",
            root,
            "--device",
            "cuda",
            "fix the test",
        ],
        vec!["--local", root, "--device", "cuda", "--exec", "hello"],
    ] {
        let out = env.baton().args(&args).output().expect("baton runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} must fail without a driver");
        assert!(
            stderr.contains("libcuda.so") && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
    // auto: the CLI runs the model on the CPU and says so.
    let out = env
        .baton()
        .args(["engine", "generate", "--local", root, "--device", "auto"])
        .args(["--prompt", "hi", "--max-tokens", "2"])
        .output()
        .expect("baton runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cpu") && stderr.contains("libcuda.so"),
        "{stderr}"
    );
}

// ---------------------------------------------------------------------------------------------
// On a GPU.

fn gpu(test: &str) -> Option<CudaDevice> {
    match cuda::open(0) {
        Ok(dev) => Some(dev),
        Err(e) if required() => panic!("{test}: BATON_REQUIRE_CUDA=1 but {e}"),
        Err(e) => {
            skipped(test, &format!("no CUDA device: {e}"));
            None
        }
    }
}

fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn as_bf16(v: Vec<f32>) -> Vec<f32> {
    v.into_iter()
        .map(|x| half::bf16::from_f32(x).to_f32())
        .collect()
}

fn close(what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut max_abs = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        max_abs = max_abs.max(d);
        assert!(d <= ATOL + RTOL * w.abs(), "{what}[{i}]: cuda {g} cpu {w}");
    }
    max_abs
}

/// Runs the same kernel calls on the CPU and CUDA devices and compares what they read back.
struct Pair {
    cpu: CpuDevice,
    gpu: CudaDevice,
}

impl Pair {
    fn read(&self, c: &[f32], g: &<CudaDevice as Device>::Buffer, len: usize, what: &str) {
        let mut host = Vec::new();
        self.gpu.read(g, len, &mut host).expect("read back");
        let max = close(what, &host, &c[..len]);
        println!("{what}: max |cuda - cpu| = {max:e}");
    }
}

#[test]
fn every_kernel_matches_the_cpu_device() {
    let Some(gpu) = gpu("every_kernel_matches_the_cpu_device") else {
        return;
    };
    let p = Pair {
        cpu: CpuDevice::new(),
        gpu,
    };
    let (c, g) = (&p.cpu, &p.gpu);
    // Products: GEMV (rows ≤ 8) and cuBLAS (more), bf16 and f32 weights, odd widths.
    for (rows, out_dim, in_dim, bf16) in [
        (1, 300, 256, true),
        (5, 129, 72, true),
        (3, 64, 33, true),
        (37, 200, 96, true),
        (300, 96, 128, true),
        (1, 50, 40, false),
        (40, 70, 48, false),
    ] {
        let w = random(out_dim * in_dim, 1 + rows as u64, 0.1);
        let w = if bf16 { as_bf16(w) } else { w };
        let x = random(rows * in_dim, 2, 1.0);
        let (cw, gw) = (
            c.matrix(w.clone(), out_dim, in_dim).expect("cpu"),
            g.matrix(w, out_dim, in_dim).expect("gpu"),
        );
        assert_eq!(gw.is_bf16(), bf16);
        let (cx, gx) = (x.clone(), g.upload(&x).expect("upload"));
        let (mut co, mut go) = (
            c.buffer(rows * out_dim).expect("cpu"),
            g.buffer(rows * out_dim).expect("gpu"),
        );
        c.matmul(&cx, rows, &cw, &mut co);
        g.matmul(&gx, rows, &gw, &mut go);
        p.read(
            &co,
            &go,
            rows * out_dim,
            &format!("matmul {rows}x{in_dim} -> {out_dim} bf16={bf16}"),
        );
        // LoRA on top: A bf16, B f32, rank 8, a scale applied after the product.
        let rank = 8;
        let a = as_bf16(random(rank * in_dim, 3, 0.2));
        let b = random(out_dim * rank, 4, 0.2);
        let (ca, ga) = (
            c.matrix(a.clone(), rank, in_dim).expect("cpu"),
            g.matrix(a, rank, in_dim).expect("gpu"),
        );
        let (cb, gb) = (
            c.matrix(b.clone(), out_dim, rank).expect("cpu"),
            g.matrix(b, out_dim, rank).expect("gpu"),
        );
        let (mut ct, mut gt) = (
            c.buffer(rows * rank).expect("cpu"),
            g.buffer(rows * rank).expect("gpu"),
        );
        c.lora_add(&cx, rows, &ca, &cb, 1.5, &mut ct, &mut co);
        g.lora_add(&gx, rows, &ga, &gb, 1.5, &mut gt, &mut go);
        p.read(
            &co,
            &go,
            rows * out_dim,
            &format!("matmul+lora rows={rows}"),
        );
    }
    // Embedding, norms, RoPE, SwiGLU, add.
    let (vocab, hidden, rows) = (100, 64, 7);
    let table = as_bf16(random(vocab * hidden, 5, 1.0));
    let (ct, gt) = (
        c.matrix(table.clone(), vocab, hidden).expect("cpu"),
        g.matrix(table, vocab, hidden).expect("gpu"),
    );
    let tokens = [3u32, 99, 0, 42, 42, 7, 64];
    let (mut cx, mut gx) = (
        c.buffer(rows * hidden).expect("cpu"),
        g.buffer(rows * hidden).expect("gpu"),
    );
    c.embed(&ct, &tokens, &mut cx);
    g.embed(&gt, &tokens, &mut gx);
    p.read(&cx, &gx, rows * hidden, "embed");
    let w = random(hidden, 6, 1.0);
    let (cw, gw) = (c.vector(w.clone()).expect("cpu"), g.vector(w).expect("gpu"));
    let (mut ch, mut gh) = (
        c.buffer(rows * hidden).expect("cpu"),
        g.buffer(rows * hidden).expect("gpu"),
    );
    c.rms_norm(&cx, &cw, rows, hidden, 1e-6, &mut ch);
    g.rms_norm(&gx, &gw, rows, hidden, 1e-6, &mut gh);
    p.read(&ch, &gh, rows * hidden, "rms_norm");
    let head_dim = 32;
    let hw = random(head_dim, 7, 1.0);
    let (chw, ghw) = (
        c.vector(hw.clone()).expect("cpu"),
        g.vector(hw).expect("gpu"),
    );
    c.rms_norm_in_place(&mut ch, &chw, rows * 2, head_dim, 1e-6);
    g.rms_norm_in_place(&mut gh, &ghw, rows * 2, head_dim, 1e-6);
    p.read(&ch, &gh, rows * hidden, "rms_norm per head");
    let inv = baton::engine::model::rope_inverse_frequencies(head_dim, 1e6);
    let (ci, gi) = (
        c.vector(inv.clone()).expect("cpu"),
        g.vector(inv).expect("gpu"),
    );
    c.rope(&mut ch, rows, 2, head_dim, 1234, &ci);
    g.rope(&mut gh, rows, 2, head_dim, 1234, &gi);
    p.read(&ch, &gh, rows * hidden, "rope");
    let up = random(rows * hidden, 8, 2.0);
    let (cu, gu) = (up.clone(), g.upload(&up).expect("upload"));
    c.silu_mul(&mut ch, &cu, rows * hidden);
    g.silu_mul(&mut gh, &gu, rows * hidden);
    p.read(&ch, &gh, rows * hidden, "silu_mul");
    c.add(&mut ch, &cx, rows * hidden);
    g.add(&mut gh, &gx, rows * hidden);
    p.read(&ch, &gh, rows * hidden, "add");
    // KV cache and attention, GQA 2:1: prefill (one block per head and row), decode (split
    // over blocks: one split at 41 positions, 17 at 1042), a 3-row step, a grown cache.
    let shape = AttentionShape {
        heads: 4,
        kv_heads: 2,
        head_dim: 32,
    };
    let kv_shape = KvShape {
        layers: 2,
        kv_dim: 64,
    };
    let (mut ckv, mut gkv) = (
        c.kv_alloc(kv_shape, 16).expect("cpu"),
        g.kv_alloc(kv_shape, 16).expect("gpu"),
    );
    c.kv_grow(&mut ckv, 48).expect("cpu");
    g.kv_grow(&mut gkv, 48).expect("gpu");
    for (start, n) in [(0usize, 40usize), (40, 1), (41, 1000), (1041, 1), (1042, 3)] {
        if start + n > c.kv_capacity(&ckv) {
            c.kv_grow(&mut ckv, 1100).expect("cpu");
            g.kv_grow(&mut gkv, 1100).expect("gpu");
        }
        for layer in 0..2 {
            let k = random(n * 64, 10 + layer as u64 + start as u64, 1.0);
            let v = random(n * 64, 20 + layer as u64 + start as u64, 1.0);
            let q = random(n * 128, 30 + layer as u64 + start as u64, 1.0);
            let (gk, gv, gq) = (
                g.upload(&k).expect("k"),
                g.upload(&v).expect("v"),
                g.upload(&q).expect("q"),
            );
            c.kv_write(&mut ckv, layer, start, n, &k, &v);
            g.kv_write(&mut gkv, layer, start, n, &gk, &gv);
            let (mut co, mut go) = (
                c.buffer(n * 128).expect("cpu"),
                g.buffer(n * 128).expect("gpu"),
            );
            c.attention(&q, &ckv, layer, n, start, shape, &mut co);
            g.attention(&gq, &gkv, layer, n, start, shape, &mut go);
            p.read(
                &co,
                &go,
                n * 128,
                &format!("attention start={start} rows={n} layer={layer}"),
            );
        }
    }
    let copy = g.kv_copy_prefix(&gkv, 30, 64).expect("copy prefix");
    assert_eq!(g.kv_capacity(&copy), 64);
    // Token choice on device.
    let logits = random(151_936, 9, 8.0);
    let gl = g.upload(&logits).expect("upload");
    let best = logits
        .iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |b, (i, v)| {
            if *v > b.1 { (i, *v) } else { b }
        })
        .0;
    assert_eq!(g.argmax(&gl, logits.len()).expect("argmax") as usize, best);
    let first = g
        .sample(&gl, logits.len(), 0.7, 0.9, 42, 0)
        .expect("sample");
    assert_eq!(
        g.sample(&gl, logits.len(), 0.7, 0.9, 42, 0)
            .expect("sample"),
        first,
        "same seed and counter"
    );
    let mut distinct = std::collections::HashSet::new();
    for counter in 0..64 {
        let t = g
            .sample(&gl, logits.len(), 1.0, 0.9, 7, counter)
            .expect("sample") as usize;
        assert!(t < logits.len());
        distinct.insert(t);
    }
    assert!(distinct.len() > 1, "top-p sampling drew one token 64 times");
    assert_eq!(
        g.sample(&gl, logits.len(), 1.0, 1e-6, 7, 3)
            .expect("sample") as usize,
        best,
        "top_p → 0 is argmax"
    );
}

// The model on CUDA against the reference.

#[test]
fn model_on_cuda_matches_the_reference_logits_and_greedy_tokens() {
    let Some(dev) = gpu("model_on_cuda_matches_the_reference_logits_and_greedy_tokens") else {
        return;
    };
    let g = golden();
    let base = fixture().join("base");
    let config = ModelConfig::load(&base).expect("config");
    let weights = WeightFiles::open_dir(&base).expect("weights");
    let model = Qwen3::load(&dev, &config, &weights).expect("model on cuda");
    let adapters: Vec<LoraAdapter<CudaDevice>> = ["L0", "L1", "L2", "L3"]
        .iter()
        .map(|n| {
            LoraAdapter::load(&dev, n, &fixture().join("loras").join(n), &config).expect("adapter")
        })
        .collect();
    let max_rank = adapters
        .iter()
        .map(LoraAdapter::max_rank)
        .max()
        .unwrap_or(0);
    let mut ws = model.workspace(&dev, max_rank).expect("workspace");
    let mut worst = 0f32;
    for prompt in ["chat", "route", "plain"] {
        let tokens = g.ids(prompt);
        for (variant, adapter) in [
            ("base", None),
            ("L0", Some(0)),
            ("L1", Some(1)),
            ("L2", Some(2)),
            ("L3", Some(3)),
        ] {
            let adapter = adapter.map(|i: usize| &adapters[i]);
            let entry = g.entry(prompt, variant);
            let want = ids(&entry["greedy"]);
            let mut kv = dev
                .kv_alloc(model.kv_shape(), tokens.len() + want.len())
                .expect("kv");
            let mut all = Vec::new();
            let mut logits = Vec::new();
            for (i, chunk) in tokens.chunks(PREFILL_CHUNK).enumerate() {
                model.forward(&dev, &mut ws, &mut kv, i * PREFILL_CHUNK, chunk, adapter);
                model
                    .logits_of_rows(&dev, &mut ws, chunk.len(), &mut all)
                    .expect("logits");
                model
                    .logits_of_row(&dev, &mut ws, chunk.len() - 1, &mut logits)
                    .expect("logits");
            }
            let what = format!("{prompt}.{variant}.last_logits");
            worst = worst.max(close(&what, &logits, g.tensor(&what)));
            if prompt == "chat" {
                let what = format!("{prompt}.{variant}.all_logits");
                worst = worst.max(close(&what, &all.concat(), g.tensor(&what)));
            }
            // Greedy decode one token at a time (the GEMV and decode-attention paths).
            let margins: Vec<f64> = entry["greedy_margins"]
                .as_array()
                .expect("margins")
                .iter()
                .filter_map(Value::as_f64)
                .collect();
            let trusted = margins.iter().position(|m| *m < 1e-3).unwrap_or(want.len());
            let mut got = Vec::new();
            for position in tokens.len()..tokens.len() + trusted {
                let next = logits
                    .iter()
                    .enumerate()
                    .fold((0usize, f32::NEG_INFINITY), |b, (i, v)| {
                        if *v > b.1 { (i, *v) } else { b }
                    })
                    .0 as u32;
                got.push(next);
                model.forward(&dev, &mut ws, &mut kv, position, &[next], adapter);
                model
                    .logits_of_row(&dev, &mut ws, 0, &mut logits)
                    .expect("logits");
            }
            assert_eq!(got, want[..trusted], "{prompt}.{variant}: greedy tokens");
        }
    }
    println!(
        "cuda ({}): largest |logit - reference| = {worst:e}",
        dev.name()
    );
}

// ---------------------------------------------------------------------------------------------
// The GPU benchmark (tools/gpu-check.sh runs it with --ignored; prints, asserts nothing timed).

mod bench;

// The hybrid (Qwen3.5-MoE) kernels and model on CUDA.
mod hybrid;

#[test]
#[ignore = "a GPU benchmark: run by tools/gpu-check.sh"]
fn cuda_benchmark() {
    if let Err(e) = bench::run() {
        panic!("benchmark: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// The whole engine on CUDA (once Engine::load dispatches to this device; docs/cuda.md):
// constrained routing against the reference, prefix reuse, sampling with a seed.

fn cuda_engine(test: &str) -> Option<baton::engine::Engine> {
    gpu(test)?; // libraries and a device, or the printed skip
    match baton::engine::Engine::load(&fixture(), DeviceChoice::Cuda) {
        Ok(engine) => Some(engine),
        Err(e) if e.to_string().contains("not built yet") => {
            skipped(
                test,
                "Engine::load does not dispatch to the CUDA device yet",
            );
            None
        }
        Err(e) => panic!("{test}: loading the fixture on CUDA: {e}"),
    }
}

#[test]
fn engine_on_cuda_routes_reuses_prefixes_and_samples_like_the_reference() {
    use baton::engine::{FinishKind, GenerateRequest, SamplingParams};
    let test = "engine_on_cuda_routes_reuses_prefixes_and_samples_like_the_reference";
    let Some(mut engine) = cuda_engine(test) else {
        return;
    };
    assert!(
        engine.device_name().starts_with("cuda"),
        "{}",
        engine.device_name()
    );
    let g = golden();
    let labels = ["L0", "L1", "L2", "L3"];
    let options: Vec<Vec<u32>> = labels
        .iter()
        .map(|l| ids(&g.json["label_token_ids"][l]))
        .collect();
    for variant in ["base", "L0", "L1", "L2", "L3"] {
        let entry = g.entry("route", variant);
        engine.clear_cache();
        let req = GenerateRequest {
            prompt: g.ids("route"),
            adapter: (variant != "base").then(|| engine.adapter_index(variant).expect("adapter")),
            sampling: SamplingParams::greedy(),
            max_tokens: 8,
            stop_ids: Vec::new(),
            constraint: Some(options.clone()),
        };
        let out = engine.generate(&req, &mut |_| true).expect("route");
        assert_eq!(out.finish, FinishKind::Constraint);
        let chosen = labels[out.choice.expect("a choice")];
        assert_eq!(
            chosen,
            entry["constrained_label"].as_str().expect("label"),
            "route.{variant}"
        );
        let scores = out.choice_logprobs.expect("log-probabilities");
        for (l, label) in labels.iter().enumerate() {
            let want = entry["label_logprobs"][label].as_f64().expect("logprob") as f32;
            assert!(
                (scores[l] - want).abs() <= ATOL + RTOL * want.abs(),
                "route.{variant}: log p({label}) = {} want {want}",
                scores[l]
            );
        }
    }
    // Prefix reuse: the grown prompt reuses the cached KV and gives the cold run's logits.
    let chat = g.ids("chat");
    engine.clear_cache();
    let half = engine
        .prompt_logits(&chat[..chat.len() / 2], Some(0))
        .expect("first half");
    assert_eq!(half.cached_tokens, 0);
    let warm = engine.prompt_logits(&chat, Some(0)).expect("whole prompt");
    assert!(
        warm.cached_tokens >= chat.len() / 2 - 1,
        "reused {}",
        warm.cached_tokens
    );
    let cold = engine.logits(&chat, Some(0)).expect("cold");
    close(
        "warm vs cold logits",
        &warm.logits,
        cold.last().expect("rows"),
    );
    // Sampling with a seed is reproducible on the device too.
    let req = GenerateRequest {
        prompt: chat.clone(),
        adapter: Some(1),
        sampling: SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            seed: Some(11),
            ..SamplingParams::greedy()
        },
        max_tokens: 12,
        stop_ids: Vec::new(),
        constraint: None,
    };
    let a = engine.generate(&req, &mut |_| true).expect("sample");
    let b = engine.generate(&req, &mut |_| true).expect("sample again");
    assert_eq!(a.tokens, b.tokens);
}
