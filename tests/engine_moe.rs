//! The engine on a hybrid Qwen3.5-MoE model against the reference (HF transformers + PEFT) on
//! tests/fixtures/tiny-qwen3-5-moe: logits at every checked position of prompts that cross
//! chunk boundaries, greedy tokens and constrained routing for base and L0–L3 (adapters on
//! attention, linear attention, shared expert, router and fused experts, both key layouts);
//! decode equals prefill; prefix reuse with recurrent states equals a cold run; loader errors.

use crate::support::golden;

use std::path::{Path, PathBuf};

use baton::engine::{
    DeltaRuleForm, Engine, EngineOptions, FinishKind, GenerateRequest, SamplingParams,
    WeightPrecision,
};
use baton::protocol::DeviceChoice;
use golden::{Golden, adapter_of, fixture_named, golden_in, ids};

const ATOL: f32 = 2e-3;
const RTOL: f32 = 2e-3;
const VARIANTS: [&str; 5] = ["base", "L0", "L1", "L2", "L3"];
const PROMPTS: [&str; 3] = ["chat", "route", "long"];

fn fixture() -> PathBuf {
    fixture_named("tiny-qwen3-5-moe")
}

fn golden() -> Golden {
    golden_in(&fixture())
}

fn load() -> Engine {
    Engine::load(&fixture(), DeviceChoice::Cpu).expect("load tiny-qwen3-5-moe")
}

/// Largest |a − b|; panics past atol + rtol·|b|.
fn assert_close(what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut max_abs = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        max_abs = max_abs.max(d);
        assert!(
            d <= ATOL + RTOL * w.abs(),
            "{what}: index {i} got {g} want {w}"
        );
    }
    max_abs
}

#[test]
fn hybrid_config_and_adapters_load() {
    let engine = load();
    let c = engine.config();
    let h = c.hybrid.as_ref().expect("a hybrid config");
    assert_eq!(c.architecture, "Qwen3_5MoeForConditionalGeneration");
    assert_eq!(
        (c.hidden_size, c.num_hidden_layers, c.head_dim),
        (48, 4, 32)
    );
    assert_eq!((c.num_attention_heads, c.num_key_value_heads), (4, 2));
    assert_eq!(h.rotary_dim, 8);
    assert_eq!((h.num_experts, h.experts_per_token), (8, 2));
    assert_eq!((h.linear_key_heads, h.linear_value_heads), (2, 4));
    assert_eq!(h.weight_prefix, "model.language_model.");
    let g = golden();
    // The lm_head is padded beyond the tokenizer's vocabulary.
    assert!(c.vocab_size > g.json["tokenizer_vocab"].as_u64().expect("vocab") as usize);
    assert_eq!(engine.adapters(), vec!["L0", "L1", "L2", "L3"]);
    assert!(engine.device_name().starts_with("cpu"));
    // On CUDA it loads where a GPU is (tests/cuda_kernels/hybrid.rs), else the error says why.
    if let Err(e) = Engine::load(&fixture(), DeviceChoice::Cuda) {
        let e = e.to_string();
        assert!(e.contains("cuda") && !e.contains("no CUDA kernels"), "{e}");
    }
}

#[test]
fn logits_match_reference_at_every_checked_position() {
    let g = golden();
    let mut engine = load();
    let mut worst = 0f32;
    for prompt in PROMPTS {
        let tokens = g.ids(prompt);
        for variant in VARIANTS {
            let all = engine
                .logits(&tokens, adapter_of(&engine, variant))
                .expect("logits");
            assert_eq!(all.len(), tokens.len());
            let what = format!("{prompt}.{variant}.last_logits");
            worst = worst.max(assert_close(
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
                worst = worst.max(assert_close(&what, &flat, g.tensor(&what)));
            }
        }
    }
    println!("largest |logit - reference|: {worst:e}");
}

#[test]
fn greedy_tokens_match_reference_until_a_near_tie() {
    let g = golden();
    let mut engine = load();
    for prompt in PROMPTS {
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
            // Compare up to the first step whose top-2 margin is a near-tie.
            let sure = margins.iter().position(|m| *m < 1e-3).unwrap_or(want.len());
            let n = sure.min(out.tokens.len());
            assert_eq!(
                out.tokens[..n],
                want[..n],
                "{prompt}.{variant}: greedy tokens"
            );
            if out.finish == FinishKind::Stop {
                // An end id stops the engine (the reference ran on): it must be the
                // reference's next token.
                let eos = &engine.config().eos_token_ids;
                assert!(out.tokens.len() < want.len() && eos.contains(&want[out.tokens.len()]));
            } else if sure == want.len() {
                assert_eq!(out.tokens, want, "{prompt}.{variant}");
            }
        }
    }
}

#[test]
fn constrained_route_matches_reference_label_and_logprobs() {
    let g = golden();
    let mut engine = load();
    golden::check_constrained_route(&mut engine, &g, &VARIANTS, ATOL, RTOL);
}

#[test]
fn chunked_and_recurrent_delta_rule_prefill_match_the_reference_alike() {
    // The long prompt's prefill crosses the 64-token chunks of the chunked form (and the
    // reference's goldens come from its chunked form); the recurrent form must land on the
    // same logits at every checked position, from a cold start and from a reused prefix that
    // leaves the chunks unaligned with the prompt.
    let g = golden();
    let tokens = g.ids("long");
    assert!(tokens.len() > 4 * 64, "{} tokens", tokens.len());
    let positions = ids(&g.json["prompts"]["long"]["logit_positions"]);
    let load_form = |form| {
        let options = EngineOptions {
            cpu_delta_rule: Some(form),
            ..Default::default()
        };
        Engine::load_with(&fixture(), DeviceChoice::Cpu, options).expect("load")
    };
    let mut chunked = load_form(DeltaRuleForm::Chunked);
    let mut recurrent = load_form(DeltaRuleForm::Recurrent);
    for variant in ["base", "L0", "L2"] {
        let adapter = adapter_of(&chunked, variant);
        let what = format!("long.{variant}.sel_logits");
        let mut cold = Vec::new();
        for engine in [&mut chunked, &mut recurrent] {
            let all = engine.logits(&tokens, adapter).expect("logits");
            let flat: Vec<f32> = positions
                .iter()
                .flat_map(|p| all[*p as usize].iter().copied())
                .collect();
            assert_close(&what, &flat, g.tensor(&what));
            cold.push(all);
        }
        for (row, (c, r)) in cold[0].iter().zip(&cold[1]).enumerate() {
            assert_close(&format!("{variant}: chunked vs recurrent at {row}"), c, r);
        }
        // Resuming at token 37 puts every later chunk boundary off the 64-token grid.
        for engine in [&mut chunked, &mut recurrent] {
            engine.clear_cache();
            engine
                .prompt_logits(&tokens[..37], adapter)
                .expect("prefix");
            let rest = engine.prompt_logits(&tokens, adapter).expect("rest");
            assert_eq!(rest.cached_tokens, 37);
            assert_close(
                &format!("{variant}: resumed at 37"),
                &rest.logits,
                cold[0].last().expect("row"),
            );
        }
    }
}

#[test]
fn decode_one_token_at_a_time_equals_one_long_prefill() {
    // The recurrent steps (conv state, delta-rule state, KV) must land where one prefill of
    // the whole prompt lands, across the 256-token chunk boundary too.
    let g = golden();
    let tokens = g.ids("long");
    assert!(tokens.len() > 257);
    let mut engine = load();
    for variant in ["base", "L0", "L2"] {
        let adapter = adapter_of(&engine, variant);
        let cold = engine.logits(&tokens, adapter).expect("cold");
        engine.clear_cache();
        let first = engine
            .prompt_logits(&tokens[..250], adapter)
            .expect("prefix");
        assert_eq!((first.cached_tokens, first.prefilled_tokens), (0, 250));
        for n in 251..=tokens.len() {
            let step = engine.prompt_logits(&tokens[..n], adapter).expect("step");
            assert_eq!(
                (step.cached_tokens, step.prefilled_tokens),
                (n - 1, 1),
                "{variant}: one new token at {n}"
            );
            // Both are f32 over the same math; only the GEMV and GEMM summation orders differ.
            assert_close(&format!("{variant} at {n}"), &step.logits, &cold[n - 1]);
        }
    }
}

#[test]
fn prefix_reuse_with_recurrent_state_equals_a_cold_run() {
    let g = golden();
    let tokens = g.ids("long");
    let mut engine = load();
    let adapter = adapter_of(&engine, "L1");
    let cold = engine.logits(&tokens, adapter).expect("cold");
    // A prefix, then the whole prompt: only the rest is prefilled (crossing a chunk).
    let a = engine
        .prompt_logits(&tokens[..100], adapter)
        .expect("prefix");
    assert_eq!(a.prefilled_tokens, 100);
    let b = engine.prompt_logits(&tokens, adapter).expect("rest");
    assert_eq!(
        (b.cached_tokens, b.prefilled_tokens),
        (100, tokens.len() - 100)
    );
    assert_close("reused", &b.logits, &cold[tokens.len() - 1]);
    // The same prompt again: nothing is recomputed, the kept logits are returned.
    let c = engine.prompt_logits(&tokens, adapter).expect("again");
    assert_eq!((c.cached_tokens, c.prefilled_tokens), (tokens.len(), 0));
    assert_eq!(c.logits, b.logits);
    // Another adapter never reuses L1's state.
    let other = engine
        .prompt_logits(&tokens, adapter_of(&engine, "L3"))
        .expect("L3");
    assert_eq!(other.cached_tokens, 0);
    // A prompt that branches inside the cached one runs cold (a recurrent state cannot be
    // rewound) and is still exact.
    let mut branched = tokens[..150].to_vec();
    branched.push(tokens[10]);
    let d = engine.prompt_logits(&branched, adapter).expect("branch");
    assert_eq!(d.cached_tokens, 0);
    let cold_branch = engine.logits(&branched, adapter).expect("cold branch");
    assert_close("branched", &d.logits, cold_branch.last().expect("row"));
}

#[test]
fn generation_continues_from_the_cached_prompt_and_output() {
    let g = golden();
    let mut engine = load();
    let prompt = g.ids("chat");
    let req = GenerateRequest {
        prompt: prompt.clone(),
        adapter: adapter_of(&engine, "L2"),
        sampling: SamplingParams::greedy(),
        max_tokens: 6,
        stop_ids: Vec::new(),
        constraint: None,
    };
    let out = engine.generate(&req, &mut |_| true).expect("first");
    assert_eq!(out.cached_tokens, 0);
    let mut next = prompt.clone();
    next.extend(&out.tokens);
    next.extend(&g.ids("route")[..5]);
    let second = engine
        .generate(
            &GenerateRequest {
                prompt: next.clone(),
                ..req.clone()
            },
            &mut |_| true,
        )
        .expect("second");
    // All but the last generated token went through the model and were kept.
    assert_eq!(second.cached_tokens, prompt.len() + out.tokens.len() - 1);
    let cold = engine.logits(&next, req.adapter).expect("cold");
    let want = cold.last().expect("row");
    let argmax = want
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32);
    assert_eq!(second.tokens.first().copied(), argmax);
}

fn load_with_weights(root: &Path, precision: WeightPrecision) -> Engine {
    let options = EngineOptions {
        cpu_weights: Some(precision),
        ..Default::default()
    };
    Engine::load_with(root, DeviceChoice::Cpu, options).expect("load")
}

#[test]
fn bf16_resident_and_f32_weights_give_the_reference_logits_and_reuse_alike() {
    let g = golden();
    let tokens = g.ids("long");
    let mut bf16 = load_with_weights(&fixture(), WeightPrecision::Bf16);
    let mut f32w = load_with_weights(&fixture(), WeightPrecision::F32);
    assert!(
        bf16.device_name().contains("bf16"),
        "{}",
        bf16.device_name()
    );
    assert!(f32w.device_name().contains("f32"), "{}", f32w.device_name());
    // bf16 checkpoint tensors stay 2 bytes each (A_log and norms are vectors, f32 anyway).
    let (mb, mf) = (bf16.memory().weights, f32w.memory().weights);
    assert_eq!(mb * 2, mf, "bf16 {mb} B vs f32 {mf} B");
    // The fixture's adapters are stored bf16, and stay so (their scales applied after the
    // product), experts included.
    let (ab, af) = (bf16.memory().adapters, f32w.memory().adapters);
    assert_eq!(ab * 2, af, "adapters: bf16 {ab} B vs f32 {af} B");
    for engine in [&mut bf16, &mut f32w] {
        for variant in ["base", "L0", "L2"] {
            let adapter = adapter_of(engine, variant);
            let cold = engine.logits(&tokens, adapter).expect("cold");
            let what = format!("long.{variant}.last_logits");
            assert_close(&what, cold.last().expect("row"), g.tensor(&what));
            engine.clear_cache();
            engine
                .prompt_logits(&tokens[..200], adapter)
                .expect("prefix");
            let reused = engine.prompt_logits(&tokens, adapter).expect("reuse");
            assert_eq!(reused.cached_tokens, 200);
            assert_close("reuse", &reused.logits, cold.last().expect("row"));
        }
    }
    // The dense model too: same reference logits with either precision.
    let dense = golden::fixture();
    let dg = golden::golden();
    for precision in [WeightPrecision::Bf16, WeightPrecision::F32] {
        let mut engine = load_with_weights(&dense, precision);
        let ids = dg.ids("chat");
        let out = engine.logits(&ids, Some(2)).expect("dense logits");
        assert_close(
            "dense chat.L2",
            out.last().expect("row"),
            dg.tensor("chat.L2.last_logits"),
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("name"));
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}

/// Rewrites a safetensors file through `edit(name, shape, bytes) -> Option<(name, shape, bytes)>`.
fn rewrite(
    path: &Path,
    edit: impl Fn(&str, Vec<usize>, Vec<u8>) -> Option<(String, Vec<usize>, Vec<u8>)>,
) {
    let bytes = std::fs::read(path).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let mut kept = Vec::new();
    for (name, view) in st.iter() {
        if let Some((n, shape, data)) = edit(name, view.shape().to_vec(), view.data().to_vec()) {
            kept.push((n, view.dtype(), shape, data));
        }
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> = kept
        .iter()
        .map(|(n, d, s, data)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(*d, s.clone(), data).expect("view"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).expect("write");
}

fn load_error(root: &Path) -> String {
    match Engine::load(root, DeviceChoice::Cpu) {
        Ok(_) => panic!("loading {} should fail", root.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn loader_errors_name_the_file_and_tensor() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("m");
    copy_dir(&fixture(), &root);
    let shard = root.join("base/model-00002-of-00002.safetensors");
    let gone = "model.language_model.layers.2.linear_attn.A_log";
    let original = std::fs::read(&shard).expect("read shard");
    rewrite(&shard, |n, s, d| (n != gone).then(|| (n.to_string(), s, d)));
    let e = load_error(&root);
    assert!(e.contains(gone), "{e}");
    std::fs::write(&shard, &original).expect("restore");

    // An adapter tensor that matches no module (conv1d cannot be adapted) is refused by name.
    let adapter = root.join("loras/L3/adapter_model.safetensors");
    let original = std::fs::read(&adapter).expect("read adapter");
    rewrite(&adapter, |n, s, d| {
        Some((
            n.replace("linear_attn.in_proj_qkv", "linear_attn.conv1d"),
            s,
            d,
        ))
    });
    let e = load_error(&root);
    assert!(
        e.contains("adapter_model.safetensors") && e.contains("conv1d"),
        "{e}"
    );
    std::fs::write(&adapter, &original).expect("restore");

    // A linear-attention LoRA on a full-attention layer.
    rewrite(&adapter, |n, s, d| {
        Some((
            n.replace("layers.0.linear_attn", "layers.1.linear_attn"),
            s,
            d,
        ))
    });
    let e = load_error(&root);
    assert!(e.contains("layer 1") && e.contains("full-attention"), "{e}");
    std::fs::write(&adapter, &original).expect("restore");

    // A fused-expert LoRA of the wrong shape (for another base).
    let l0 = root.join("loras/L0/adapter_model.safetensors");
    rewrite(&l0, |n, mut s, d| {
        if n.ends_with("layers.0.mlp.experts.lora_A.weight") {
            s[0] /= 2;
            let half = d.len() / 2;
            return Some((n.to_string(), s, d[..half].to_vec()));
        }
        Some((n.to_string(), s, d))
    });
    let e = load_error(&root);
    assert!(e.contains("layers.0.mlp.experts"), "{e}");
}

/// `baton engine generate|route --local` on the hybrid fixture.
mod engine_cli {
    use super::*;
    use baton::cli::engine::{EngineArgs, EngineCommand, generate_report, route_report};
    use clap::Parser;

    fn parse(args: &[&str]) -> EngineArgs {
        let argv = ["baton", "engine"].into_iter().chain(args.iter().copied());
        let cli = baton::cli::Cli::try_parse_from(argv).expect("arguments parse");
        let flags = cli.flag_settings().expect("flags parse");
        let Some(baton::cli::Command::Engine(engine)) = cli.command else {
            panic!("parses as `baton engine`");
        };
        let device = flags.device.unwrap_or_default();
        engine
            .with_globals(flags.local, device, flags.profile)
            .expect("--local given")
    }

    #[test]
    fn generate_raw_matches_golden_greedy_tokens() {
        let g = golden();
        let root = fixture();
        let text = g.json["prompts"]["chat"]["text"].as_str().expect("text");
        let argv = [
            "generate",
            "--local",
            root.to_str().expect("utf-8 path"),
            "--raw",
            text,
            "--max-tokens",
            "16",
            "--device",
            "cpu",
            "--adapter",
            "L3",
            "--json",
        ];
        let EngineCommand::Generate(args) = parse(&argv).command else {
            panic!("generate parses as generate");
        };
        let mut streamed = String::new();
        let report = generate_report(&args, &mut |piece| streamed.push_str(piece)).expect("run");
        assert_eq!(report.prompt_ids, g.ids("chat"));
        let want = ids(&g.entry("chat", "L3")["greedy"]);
        // Greedy; an end id would stop it early, so compare what was generated.
        let got = &report.generated_ids;
        assert!(!got.is_empty());
        assert_eq!(got[..], want[..got.len()]);
    }

    #[test]
    fn route_returns_a_label_with_its_logprobs() {
        let root = fixture();
        let argv = [
            "route",
            "--local",
            root.to_str().expect("utf-8 path"),
            "Refactor the parser module and run the tests.",
            "--device",
            "cpu",
            "--json",
        ];
        let EngineCommand::Route(args) = parse(&argv).command else {
            panic!("route parses as route");
        };
        let report = route_report(&args).expect("route");
        let logprobs: Vec<(String, f64)> = report
            .label_logprobs
            .iter()
            .map(|(k, v)| (k.clone(), v.as_f64().expect("number")))
            .collect();
        assert_eq!(logprobs.len(), 4);
        let best = logprobs
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("labels");
        assert_eq!(report.label, best.0, "greedy choice = most likely label");
        assert!(logprobs.iter().all(|(_, p)| *p < 0.0));
    }
}
