//! The hybrid (Qwen3.5-MoE) kernels of the CUDA device against the CPU device on random inputs,
//! at the fixture's odd sizes and Macaron-V1-Tall's (hidden 2048, linear attention 16 key /
//! 32 value heads × 128, full attention 16/2 heads × 256 with 64 rotary dims, expert dim 512,
//! 256-token prefill chunks), and the whole engine on CUDA against the HF+PEFT goldens of
//! tests/fixtures/tiny-qwen3-5-moe. A module of tests/cuda_kernels.rs; skipped (printed)
//! without a GPU like the rest of it.

use baton::engine::device::cpu::CpuDevice;
use baton::engine::device::cuda::CudaDevice;
use baton::engine::device::{DeltaShape, Device, HybridDevice};
use baton::engine::model::PREFILL_CHUNK;

use super::{Pair, gpu, random};

/// Uploads the same host values to both devices.
fn both(p: &Pair, v: &[f32]) -> (Vec<f32>, <CudaDevice as Device>::Buffer) {
    (v.to_vec(), p.gpu.upload(v).expect("upload"))
}

fn vectors(p: &Pair, v: Vec<f32>) -> (Vec<f32>, <CudaDevice as Device>::Vector) {
    (
        p.cpu.vector(v.clone()).expect("cpu"),
        p.gpu.vector(v).expect("gpu"),
    )
}

#[test]
fn hybrid_kernels_match_the_cpu_device() {
    let Some(gpu) = gpu("hybrid_kernels_match_the_cpu_device") else {
        return;
    };
    let p = Pair {
        cpu: CpuDevice::new(),
        gpu,
    };
    let (c, g) = (&p.cpu, &p.gpu);

    // Gated attention: q/gate split, sigmoid gate, partial RoPE (fixture and Tall shapes).
    for (rows, heads, head_dim, rotary, start) in [
        (7usize, 4usize, 32usize, 8usize, 0usize),
        (1, 16, 256, 64, 4093),
        (PREFILL_CHUNK, 16, 256, 64, 300),
        (3, 2, 256, 64, 17),
    ] {
        let n = rows * heads * head_dim;
        let (cx, gx) = both(&p, &random(2 * n, rows as u64, 1.0));
        let (mut ca, mut ga) = (c.buffer(n).expect("cpu"), g.buffer(n).expect("gpu"));
        let (mut cb, mut gb) = (c.buffer(n).expect("cpu"), g.buffer(n).expect("gpu"));
        c.split_halves(&cx, rows, heads, head_dim, &mut ca, &mut cb);
        g.split_halves(&gx, rows, heads, head_dim, &mut ga, &mut gb);
        p.read(
            &ca,
            &ga,
            n,
            &format!("split_halves a {rows}x{heads}x{head_dim}"),
        );
        p.read(
            &cb,
            &gb,
            n,
            &format!("split_halves b {rows}x{heads}x{head_dim}"),
        );
        let inv = baton::engine::model::rope_inverse_frequencies(rotary, 1e7);
        let (ci, gi) = vectors(&p, inv);
        c.rope_partial(&mut ca, rows, heads, head_dim, rotary, start, &ci);
        g.rope_partial(&mut ga, rows, heads, head_dim, rotary, start, &gi);
        p.read(
            &ca,
            &ga,
            n,
            &format!("rope_partial {rows}x{heads}x{head_dim} r{rotary}"),
        );
        c.sigmoid_mul(&mut ca, &cb, n);
        g.sigmoid_mul(&mut ga, &gb, n);
        p.read(&ca, &ga, n, "sigmoid_mul");
    }

    // Gated DeltaNet: conv1d + SiLU with its state, the delta rule (register and wide
    // kernels), the gated norm — prefill chunks then single decode steps on the same state.
    for (shape, steps) in [
        (
            DeltaShape {
                key_heads: 2,
                value_heads: 4,
                key_dim: 16,
                value_dim: 24,
            },
            [5usize, 1, 1, 40],
        ),
        (
            DeltaShape {
                key_heads: 16,
                value_heads: 32,
                key_dim: 128,
                value_dim: 128,
            },
            [PREFILL_CHUNK, 1, 1, 3],
        ),
        (
            // Above the register kernel's key dimension: the wide kernel, dv not a warp multiple.
            DeltaShape {
                key_heads: 1,
                value_heads: 3,
                key_dim: 160,
                value_dim: 40,
            },
            [20, 1, 2, 1],
        ),
    ] {
        let (channels, kernel) = (shape.qkv_width(), 4usize);
        let vh = shape.value_heads;
        let out_w = vh * shape.value_dim;
        let (cw, gw) = vectors(&p, random(channels * kernel, 3, 0.5));
        let (cl, gl) = vectors(&p, random(vh, 4, 1.0));
        let (cd, gd) = vectors(&p, random(vh, 5, 1.0));
        let (cn, gn) = vectors(&p, random(shape.value_dim, 6, 1.0));
        let hist = channels * (kernel - 1);
        let (mut cs, mut gs) = (c.buffer(hist).expect("cpu"), g.buffer(hist).expect("gpu"));
        let (mut cr, mut gr) = (
            c.buffer(shape.state_len()).expect("cpu"),
            g.buffer(shape.state_len()).expect("gpu"),
        );
        let max = PREFILL_CHUNK;
        let (mut co, mut go) = (
            c.buffer(max * channels).expect("cpu"),
            g.buffer(max * channels).expect("gpu"),
        );
        let (mut ca, mut ga) = (
            c.buffer(max * out_w).expect("cpu"),
            g.buffer(max * out_w).expect("gpu"),
        );
        for (i, rows) in steps.into_iter().enumerate() {
            let what = format!("{shape:?} step {i} ({rows} rows)");
            let seed = 100 + i as u64;
            let (cx, gx) = both(&p, &random(rows * channels, seed, 1.0));
            c.conv1d_silu(&cx, rows, channels, kernel, &cw, &mut cs, &mut co);
            g.conv1d_silu(&gx, rows, channels, kernel, &gw, &mut gs, &mut go);
            p.read(&co, &go, rows * channels, &format!("conv1d_silu {what}"));
            p.read(&cs, &gs, hist, &format!("conv state {what}"));
            let (cb, gb) = both(&p, &random(rows * vh, seed + 1, 2.0));
            let (cdec, gdec) = both(&p, &random(rows * vh, seed + 2, 2.0));
            c.gated_delta_rule(&co, &cb, &cdec, rows, shape, &cl, &cd, &mut cr, &mut ca);
            g.gated_delta_rule(&go, &gb, &gdec, rows, shape, &gl, &gd, &mut gr, &mut ga);
            p.read(&ca, &ga, rows * out_w, &format!("gated_delta_rule {what}"));
            p.read(
                &cr,
                &gr,
                shape.state_len(),
                &format!("recurrent state {what}"),
            );
            let (cz, gz) = both(&p, &random(rows * out_w, seed + 3, 2.0));
            c.gated_rms_norm(&mut ca, &cz, &cn, rows * vh, shape.value_dim, 1e-6);
            g.gated_rms_norm(&mut ga, &gz, &gn, rows * vh, shape.value_dim, 1e-6);
            p.read(&ca, &ga, rows * out_w, &format!("gated_rms_norm {what}"));
        }
        // Snapshots and resets of a state.
        let copy = g.duplicate(&gr, shape.state_len()).expect("duplicate");
        p.read(&cr, &copy, shape.state_len(), "duplicate");
        c.zero(&mut cr, shape.state_len());
        g.zero(&mut gr, shape.state_len());
        p.read(&cr, &gr, shape.state_len(), "zero");
    }

    // Routed experts: gather, fused gate/up SiLU, weighted scatter-add (short lists inline,
    // long ones uploaded, a repeated row), the shared expert's sigmoid-scaled add.
    for (tokens, width, inter, rows) in [
        (5usize, 48usize, 16usize, vec![4u32, 0, 2]),
        (1, 2048, 512, vec![0]),
        (
            PREFILL_CHUNK,
            2048,
            512,
            (0..PREFILL_CHUNK as u32).step_by(7).collect::<Vec<u32>>(),
        ),
        (
            40,
            64,
            24,
            vec![3, 3, 39, 0, 3, 17, 17, 1, 2, 5, 8, 13, 21, 34, 1, 1, 0, 9],
        ),
    ] {
        let k = rows.len();
        let what = format!("{k} of {tokens} rows × {width}");
        let (cx, gx) = both(&p, &random(tokens * width, 7, 1.0));
        let (mut cin, mut gin) = (
            c.buffer(k * width).expect("cpu"),
            g.buffer(k * width).expect("gpu"),
        );
        c.gather_rows(&cx, width, &rows, &mut cin);
        g.gather_rows(&gx, width, &rows, &mut gin);
        p.read(&cin, &gin, k * width, &format!("gather_rows {what}"));
        let (cgu, ggu) = both(&p, &random(k * 2 * inter, 8, 3.0));
        let (mut cact, mut gact) = (
            c.buffer(k * inter).expect("cpu"),
            g.buffer(k * inter).expect("gpu"),
        );
        c.silu_mul_halves(&cgu, k, inter, &mut cact);
        g.silu_mul_halves(&ggu, k, inter, &mut gact);
        p.read(
            &cact,
            &gact,
            k * inter,
            &format!("silu_mul_halves {k}x{inter}"),
        );
        let weights = random(k, 9, 1.0);
        let (cy, gy) = both(&p, &random(k * width, 10, 1.0));
        let (mut cout, mut gout) = both(&p, &random(tokens * width, 11, 1.0));
        c.scatter_add_rows(&cy, width, &rows, &weights, &mut cout);
        g.scatter_add_rows(&gy, width, &rows, &weights, &mut gout);
        p.read(
            &cout,
            &gout,
            tokens * width,
            &format!("scatter_add_rows {what}"),
        );
        let (cgate, ggate) = both(&p, &random(tokens, 12, 4.0));
        let (csh, gsh) = both(&p, &random(tokens * width, 13, 1.0));
        c.add_sigmoid_scaled(&mut cout, &csh, &cgate, tokens, width);
        g.add_sigmoid_scaled(&mut gout, &gsh, &ggate, tokens, width);
        p.read(
            &cout,
            &gout,
            tokens * width,
            &format!("add_sigmoid_scaled {tokens}x{width}"),
        );
    }

    // A bad size or row is an error at the next read, not an out-of-bounds access.
    let small = g.buffer(8).expect("gpu");
    let mut out = g.buffer(8).expect("gpu");
    g.gather_rows(&small, 4, &[5], &mut out);
    let mut host = Vec::new();
    let err = g
        .read(&out, 1, &mut host)
        .expect_err("a row past the buffer must be refused")
        .to_string();
    assert!(err.contains("gather_rows"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// The whole engine on the hybrid fixture, on CUDA, against the reference.

use crate::support::golden::{Golden, adapter_of, fixture_named, golden_in, ids};
use baton::engine::{Engine, GenerateRequest, SamplingParams};
use baton::protocol::DeviceChoice;

const VARIANTS: [&str; 5] = ["base", "L0", "L1", "L2", "L3"];

fn hybrid_fixture() -> std::path::PathBuf {
    fixture_named("tiny-qwen3-5-moe")
}

fn hybrid_engine_on_cuda(test: &str) -> Option<(Engine, Golden)> {
    gpu(test)?; // libraries and a device, or the printed skip
    let engine = Engine::load(&hybrid_fixture(), DeviceChoice::Cuda)
        .unwrap_or_else(|e| panic!("{test}: loading tiny-qwen3-5-moe on CUDA: {e}"));
    assert!(
        engine.device_name().starts_with("cuda"),
        "{}",
        engine.device_name()
    );
    Some((engine, golden_in(&hybrid_fixture())))
}

#[test]
fn hybrid_model_on_cuda_matches_the_reference() {
    let test = "hybrid_model_on_cuda_matches_the_reference";
    let Some((mut engine, g)) = hybrid_engine_on_cuda(test) else {
        return;
    };
    let mut worst = 0f32;
    // Logits at the last position of every prompt and at the checked positions of the long
    // one (295 tokens: a 256-token chunk boundary), base and L0–L3.
    for prompt in ["chat", "route", "long"] {
        let tokens = g.ids(prompt);
        for variant in VARIANTS {
            let all = engine
                .logits(&tokens, adapter_of(&engine, variant))
                .expect("logits");
            let what = format!("{prompt}.{variant}.last_logits");
            worst = worst.max(super::close(
                &what,
                all.last().expect("rows"),
                g.tensor(&what),
            ));
            if prompt == "long" {
                let positions = ids(&g.json["prompts"]["long"]["logit_positions"]);
                let what = format!("long.{variant}.sel_logits");
                let flat: Vec<f32> = positions
                    .iter()
                    .flat_map(|p| all[*p as usize].iter().copied())
                    .collect();
                worst = worst.max(super::close(&what, &flat, g.tensor(&what)));
            }
        }
    }
    // Greedy tokens (decode one token at a time: GEMV, decode attention, recurrent steps) up
    // to the reference's first near-tie.
    for prompt in ["chat", "route", "long"] {
        for variant in VARIANTS {
            let entry = g.entry(prompt, variant);
            let want = ids(&entry["greedy"]);
            let margins: Vec<f64> = entry["greedy_margins"]
                .as_array()
                .expect("margins")
                .iter()
                .map(|m| m.as_f64().expect("margin"))
                .collect();
            let req = GenerateRequest {
                prompt: g.ids(prompt),
                adapter: adapter_of(&engine, variant),
                sampling: SamplingParams::greedy(),
                max_tokens: want.len(),
                stop_ids: Vec::new(),
                constraint: None,
            };
            let out = engine.generate(&req, &mut |_| true).expect("generate");
            let sure = margins.iter().position(|m| *m < 1e-3).unwrap_or(want.len());
            let n = sure.min(out.tokens.len());
            assert!(n > 0 || sure == 0, "{prompt}.{variant}: nothing generated");
            assert_eq!(
                out.tokens[..n],
                want[..n],
                "{prompt}.{variant}: greedy tokens"
            );
        }
    }
    // The constrained route: label and the four label log-probabilities.
    crate::support::golden::check_constrained_route(
        &mut engine,
        &g,
        &VARIANTS,
        super::ATOL,
        super::RTOL,
    );
    println!(
        "hybrid on {}: largest |logit - reference| = {worst:e}",
        engine.device_name()
    );
}

#[test]
fn hybrid_decode_and_prefix_reuse_on_cuda_equal_one_cold_prefill() {
    let test = "hybrid_decode_and_prefix_reuse_on_cuda_equal_one_cold_prefill";
    let Some((mut engine, g)) = hybrid_engine_on_cuda(test) else {
        return;
    };
    let tokens = g.ids("long");
    for variant in ["base", "L0", "L2"] {
        let adapter = adapter_of(&engine, variant);
        let cold = engine.logits(&tokens, adapter).expect("cold");
        engine.clear_cache();
        // Across the 256-token chunk boundary, one token at a time from the cached state.
        let first = engine
            .prompt_logits(&tokens[..250], adapter)
            .expect("prefix");
        assert_eq!((first.cached_tokens, first.prefilled_tokens), (0, 250));
        for n in 251..=tokens.len() {
            let step = engine.prompt_logits(&tokens[..n], adapter).expect("step");
            assert_eq!((step.cached_tokens, step.prefilled_tokens), (n - 1, 1));
            super::close(
                &format!("{variant} decode at {n}"),
                &step.logits,
                &cold[n - 1],
            );
        }
        // A short prefix, then the rest in one go (the chunked path from a restored state).
        engine.clear_cache();
        engine
            .prompt_logits(&tokens[..100], adapter)
            .expect("prefix");
        let rest = engine.prompt_logits(&tokens, adapter).expect("rest");
        assert_eq!(rest.cached_tokens, 100);
        super::close(
            &format!("{variant} reuse"),
            &rest.logits,
            cold.last().expect("row"),
        );
    }
}
