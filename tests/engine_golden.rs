//! The engine against the reference (HF transformers + PEFT) on tests/fixtures/tiny-qwen3:
//! logits, greedy tokens and constrained routing for base and L0–L3; prefix reuse; LRU bounds;
//! loader errors that name the file and tensor.

use crate::support::golden;

use std::path::Path;

use baton::engine::{
    CacheLimits, Engine, EngineError, EngineOptions, FinishKind, GenerateRequest, SamplingParams,
    WeightPrecision,
};
use baton::protocol::DeviceChoice;
use golden::{fixture, golden, ids};
use serde_json::Value;

const ATOL: f32 = 2e-3;
const RTOL: f32 = 2e-3;
const VARIANTS: [&str; 5] = ["base", "L0", "L1", "L2", "L3"];

fn adapter_of(engine: &Engine, variant: &str) -> Option<usize> {
    (variant != "base").then(|| engine.adapter_index(variant).expect("adapter loaded"))
}

/// The device the golden suite runs on: `BATON_TEST_DEVICE=cuda` runs it on the GPU
/// (tools/gpu-check.sh), with the same tolerances; the CPU otherwise.
fn test_device() -> DeviceChoice {
    match std::env::var("BATON_TEST_DEVICE").as_deref() {
        Ok("cuda") => DeviceChoice::Cuda,
        _ => DeviceChoice::Cpu,
    }
}

fn load() -> Engine {
    Engine::load(&fixture(), test_device()).expect("load tiny-qwen3")
}

/// Largest violation of |a - b| ≤ atol + rtol·|b| (≤ 0 means within tolerance).
fn assert_close(what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (f32::NEG_INFINITY, 0usize);
    let mut max_abs = 0f32;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let excess = (g - w).abs() - (ATOL + RTOL * w.abs());
        max_abs = max_abs.max((g - w).abs());
        if excess > worst.0 {
            worst = (excess, i);
        }
    }
    assert!(
        worst.0 <= 0.0,
        "{what}: index {} got {} want {} (max |diff| {max_abs})",
        worst.1,
        got[worst.1],
        want[worst.1]
    );
    max_abs
}

#[test]
fn config_and_adapters_load() {
    let engine = load();
    let c = engine.config();
    assert_eq!(
        (
            c.hidden_size,
            c.num_hidden_layers,
            c.head_dim,
            c.num_key_value_heads
        ),
        (64, 2, 32, 2)
    );
    assert_eq!(c.rope_theta, 1e6);
    assert!(c.tie_word_embeddings);
    assert_eq!(c.max_position_embeddings, 4096);
    assert_eq!(c.eos_token_ids, vec![2041, 2039]);
    assert_eq!(engine.adapters(), vec!["L0", "L1", "L2", "L3"]);
    if test_device() == DeviceChoice::Cpu {
        assert!(engine.device_name().starts_with("cpu"));
        // Without a GPU, asking for CUDA is an error that names what is missing.
        if let Err(cuda) = Engine::load(&fixture(), DeviceChoice::Cuda) {
            assert!(cuda.to_string().contains("CUDA"), "{cuda}");
        }
    } else {
        assert!(engine.device_name().to_lowercase().contains("cuda"));
    }
}

#[test]
fn logits_match_reference_for_every_prompt_and_adapter() {
    let g = golden();
    let mut engine = load();
    let mut worst = 0f32;
    for prompt in ["chat", "route", "plain"] {
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
            if prompt == "chat" {
                let what = format!("{prompt}.{variant}.all_logits");
                let flat: Vec<f32> = all.concat();
                worst = worst.max(assert_close(&what, &flat, g.tensor(&what)));
            }
        }
    }
    println!("largest |logit - reference| over all cases: {worst:e}");
}

#[test]
fn greedy_tokens_match_reference_until_a_near_tie() {
    let g = golden();
    let mut engine = load();
    for prompt in ["chat", "route", "plain"] {
        for variant in VARIANTS {
            let entry = g.entry(prompt, variant);
            let want = ids(&entry["greedy"]);
            let margins: Vec<f64> = entry["greedy_margins"]
                .as_array()
                .expect("margins")
                .iter()
                .map(|m| m.as_f64().expect("margin"))
                .collect();
            let trusted = margins.iter().position(|m| *m < 1e-3).unwrap_or(want.len());
            let req = GenerateRequest {
                prompt: g.ids(prompt),
                adapter: adapter_of(&engine, variant),
                sampling: SamplingParams::greedy(),
                max_tokens: want.len(),
                stop_ids: Vec::new(),
                constraint: None,
            };
            let mut streamed = Vec::new();
            // The reference did not stop at end ids; neither may this check, so clear them.
            let out = generate_without_eos(&mut engine, &req, &mut streamed);
            assert_eq!(out.tokens, streamed, "{prompt}.{variant}: streamed tokens");
            assert_eq!(
                &out.tokens[..trusted],
                &want[..trusted],
                "{prompt}.{variant}: greedy tokens"
            );
        }
    }
}

/// Greedy generation where end ids don't stop (the reference ran a fixed 16 steps).
fn generate_without_eos(
    engine: &mut Engine,
    req: &GenerateRequest,
    streamed: &mut Vec<u32>,
) -> baton::engine::GenerateOutput {
    let out = engine
        .generate(req, &mut |t| {
            streamed.push(t);
            true
        })
        .expect("generate");
    if out.finish == FinishKind::Stop && out.tokens.len() < req.max_tokens {
        panic!("the reference's greedy continuation hit an end id; extend this helper");
    }
    out
}

#[test]
fn constrained_route_picks_the_reference_label_in_one_step() {
    let g = golden();
    let mut engine = load();
    let labels = ["L0", "L1", "L2", "L3"];
    let options: Vec<Vec<u32>> = labels
        .iter()
        .map(|l| ids(&g.json["label_token_ids"][l]))
        .collect();
    for variant in VARIANTS {
        let entry = g.entry("route", variant);
        engine.clear_cache();
        let req = GenerateRequest {
            prompt: g.ids("route"),
            adapter: adapter_of(&engine, variant),
            sampling: SamplingParams::greedy(),
            max_tokens: 8,
            stop_ids: Vec::new(),
            constraint: Some(options.clone()),
        };
        let out = engine.generate(&req, &mut |_| true).expect("route");
        assert_eq!(out.finish, FinishKind::Constraint);
        let want = entry["constrained_label"].as_str().expect("label");
        let chosen = labels[out.choice.expect("a choice")];
        assert_eq!(chosen, want, "route.{variant}: label");
        assert_eq!(out.tokens, options[out.choice.expect("choice")]);
        let scores = out.choice_logprobs.expect("label log-probabilities");
        for (l, label) in labels.iter().enumerate() {
            let reference = entry["label_logprobs"][label].as_f64().expect("logprob") as f32;
            assert!(
                (scores[l] - reference).abs() <= ATOL + RTOL * reference.abs(),
                "route.{variant}: log p({label}) = {} want {reference}",
                scores[l]
            );
        }
        // One prefill of the prompt plus one step for the forced "L": the KV kept holds the
        // prompt and "L" only (the digit is chosen from that step's logits, never run).
        let stats = engine.cache_stats();
        assert_eq!(
            stats.tokens,
            req.prompt.len() + 1,
            "route.{variant}: positions computed"
        );
    }
}

#[test]
fn prefix_reuse_matches_a_cold_run_and_prefills_only_new_tokens() {
    let g = golden();
    let mut engine = load();
    let chat = g.ids("chat");
    let route = g.ids("route");
    for variant in ["base", "L3"] {
        let adapter = adapter_of(&engine, variant);
        engine.clear_cache();
        // A conversation that grows: each step re-sends everything before it.
        let steps = [&chat[..20], &chat[..35], &chat[..]];
        let mut prefilled = 0;
        let mut new_tokens = 0;
        let mut previous = 0;
        for prompt in steps {
            let warm = engine.prompt_logits(prompt, adapter).expect("warm");
            let cold = engine.logits(prompt, adapter).expect("cold");
            assert_eq!(warm.cached_tokens + warm.prefilled_tokens, prompt.len());
            assert_eq!(
                warm.cached_tokens, previous,
                "{variant}: reused the previous step"
            );
            assert_close(
                &format!("{variant} warm vs cold at {}", prompt.len()),
                &warm.logits,
                cold.last().expect("rows"),
            );
            prefilled += warm.prefilled_tokens;
            new_tokens += prompt.len() - previous;
            previous = prompt.len();
        }
        println!("{variant}: prefilled {prefilled} tokens for {new_tokens} new tokens");
        assert_eq!(prefilled, new_tokens);
        // Another adapter shares nothing: its KV differs.
        let other = if variant == "base" { Some(0) } else { None };
        assert_eq!(
            engine
                .prompt_logits(&chat, other)
                .expect("other")
                .cached_tokens,
            0
        );
        // A branch inside a cached sequence reuses the common part (the old tail is dropped).
        let mut branch = chat[..30].to_vec();
        branch.extend_from_slice(&route[..10]);
        let warm = engine.prompt_logits(&branch, adapter).expect("branch");
        assert!(
            warm.cached_tokens >= 30,
            "branch reused {}",
            warm.cached_tokens
        );
        let cold = engine.logits(&branch, adapter).expect("cold branch");
        assert_close(
            "branch warm vs cold",
            &warm.logits,
            cold.last().expect("rows"),
        );
        assert_eq!(
            engine
                .prompt_logits(&chat, adapter)
                .expect("again")
                .cached_tokens,
            30
        );
        assert_eq!(
            engine
                .prompt_logits(&chat, adapter)
                .expect("same")
                .cached_tokens,
            chat.len() - 1
        );
    }
}

#[test]
fn generation_continues_from_cached_prompt_and_output() {
    let g = golden();
    let mut engine = load();
    let prompt = g.ids("plain");
    let req = GenerateRequest {
        prompt: prompt.clone(),
        adapter: Some(1),
        sampling: SamplingParams::greedy(),
        max_tokens: 6,
        stop_ids: Vec::new(),
        constraint: None,
    };
    let first = engine.generate(&req, &mut |_| true).expect("first");
    assert_eq!(first.cached_tokens, 0);
    // The next step's prompt = the previous prompt + the answer + a new message.
    let mut next = prompt.clone();
    next.extend_from_slice(&first.tokens);
    next.extend_from_slice(&[100, 101, 102]);
    let second = engine
        .generate(
            &GenerateRequest {
                prompt: next.clone(),
                ..req.clone()
            },
            &mut |_| true,
        )
        .expect("second");
    // Everything but the last answer token (never run through the model) came from the cache.
    assert_eq!(second.cached_tokens, prompt.len() + first.tokens.len() - 1);
    let cold = engine.logits(&next, Some(1)).expect("cold");
    let greedy_cold = cold
        .last()
        .expect("rows")
        .iter()
        .enumerate()
        .fold(
            (0, f32::MIN),
            |b, (i, v)| if *v > b.1 { (i, *v) } else { b },
        )
        .0;
    assert_eq!(second.tokens[0] as usize, greedy_cold);
    // Cancel after two tokens.
    let mut seen = 0;
    let third = engine
        .generate(&req, &mut |_| {
            seen += 1;
            seen < 2
        })
        .expect("third");
    assert_eq!(
        (third.finish, third.tokens.len()),
        (FinishKind::Cancelled, 2)
    );
}

#[test]
fn lru_eviction_keeps_the_cache_within_its_bounds() {
    let g = golden();
    let chat = g.ids("chat");
    // Each sequence of the tiny model takes 256 positions · 2 layers · 64 · 2 · 4 bytes = 256 KiB.
    let per_entry = 256 * 2 * 64 * 2 * 4;
    let limits = CacheLimits {
        max_bytes: 2 * per_entry,
        max_entries: 8,
    };
    let mut engine = Engine::load_with(
        &fixture(),
        test_device(),
        EngineOptions {
            cache: limits,
            ..Default::default()
        },
    )
    .expect("load");
    for adapter in [None, Some(0), Some(1), Some(2)] {
        engine.prompt_logits(&chat, adapter).expect("run");
        let stats = engine.cache_stats();
        assert!(stats.bytes <= limits.max_bytes, "{stats:?}");
    }
    let stats = engine.cache_stats();
    assert_eq!((stats.entries, stats.evictions), (2, 2), "{stats:?}");
    // The two most recent (L1, L2) survive; the oldest (base) was evicted.
    assert_eq!(
        engine
            .prompt_logits(&chat, Some(2))
            .expect("L2")
            .cached_tokens,
        chat.len() - 1
    );
    assert_eq!(
        engine
            .prompt_logits(&chat, Some(1))
            .expect("L1")
            .cached_tokens,
        chat.len() - 1
    );
    assert_eq!(
        engine
            .prompt_logits(&chat, None)
            .expect("base")
            .cached_tokens,
        0
    );
    // The entry count bound works the same way.
    let mut engine = Engine::load_with(
        &fixture(),
        test_device(),
        EngineOptions {
            cache: CacheLimits {
                max_bytes: usize::MAX,
                max_entries: 1,
            },
            ..Default::default()
        },
    )
    .expect("load");
    engine.prompt_logits(&chat, None).expect("base");
    engine.prompt_logits(&chat, Some(3)).expect("L3");
    assert_eq!(engine.cache_stats().entries, 1);
    assert_eq!(
        engine
            .prompt_logits(&chat, Some(3))
            .expect("L3")
            .cached_tokens,
        chat.len() - 1
    );
}

#[test]
fn sampling_with_a_seed_is_reproducible() {
    let g = golden();
    let mut engine = load();
    let req = GenerateRequest {
        prompt: g.ids("chat"),
        adapter: Some(2),
        sampling: SamplingParams {
            temperature: 0.8,
            top_p: 0.9,
            top_k: 50,
            seed: Some(42),
        },
        max_tokens: 10,
        stop_ids: Vec::new(),
        constraint: None,
    };
    let a = engine.generate(&req, &mut |_| true).expect("a");
    engine.clear_cache();
    let b = engine.generate(&req, &mut |_| true).expect("b");
    assert_eq!(a.tokens, b.tokens);
    assert!(!a.tokens.is_empty());
    // A stop id ends the generation and is not part of the output.
    let first = a.tokens[0];
    let stopped = engine
        .generate(
            &GenerateRequest {
                stop_ids: vec![first],
                ..req.clone()
            },
            &mut |_| true,
        )
        .expect("stop");
    assert_eq!(
        (stopped.finish, stopped.tokens.len()),
        (FinishKind::Stop, 0)
    );
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let mut engine = load();
    let greedy = |prompt: Vec<u32>, adapter| GenerateRequest {
        prompt,
        adapter,
        sampling: SamplingParams::greedy(),
        max_tokens: 4,
        stop_ids: Vec::new(),
        constraint: None,
    };
    assert!(matches!(
        engine.generate(&greedy(vec![], None), &mut |_| true),
        Err(EngineError::Request(_))
    ));
    assert!(matches!(
        engine.generate(&greedy(vec![5, 99_999], None), &mut |_| true),
        Err(EngineError::Request(_))
    ));
    assert!(matches!(
        engine.generate(&greedy(vec![5], Some(9)), &mut |_| true),
        Err(EngineError::Request(_))
    ));
    let long = vec![5; engine.config().max_position_embeddings + 1];
    assert!(matches!(
        engine.logits(&long, None),
        Err(EngineError::Request(_))
    ));
    let mut bad_constraint = greedy(vec![5, 6], None);
    bad_constraint.constraint = Some(vec![vec![43], vec![43, 15]]);
    assert!(matches!(
        engine.generate(&bad_constraint, &mut |_| true),
        Err(EngineError::Request(_))
    ));
}

// ---- loader errors on corrupted copies of the fixture ----

fn copy_fixture() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    copy_dir(&fixture(), tmp.path());
    tmp
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

/// Rewrites a safetensors file through `edit(name, shape, data) -> Option<(name, shape, data)>`.
fn rewrite(
    path: &Path,
    edit: impl Fn(
        &str,
        Vec<usize>,
        Vec<u8>,
        safetensors::Dtype,
    ) -> Option<(String, Vec<usize>, Vec<u8>)>,
) {
    let bytes = std::fs::read(path).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let mut kept = Vec::new();
    for (name, view) in st.iter() {
        if let Some((n, shape, data)) = edit(
            name,
            view.shape().to_vec(),
            view.data().to_vec(),
            view.dtype(),
        ) {
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

/// A tensor's name, shape and raw bytes.
type Tensor = (String, Vec<usize>, Vec<u8>);

fn load_error(root: &Path) -> String {
    match Engine::load(root, test_device()) {
        Ok(_) => panic!("loading {} should fail", root.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_base_tensor_names_file_and_tensor() {
    let tmp = copy_fixture();
    let file = tmp.path().join("base/model.safetensors");
    rewrite(&file, |n, s, d, _| {
        (n != "model.layers.1.self_attn.k_norm.weight").then(|| (n.to_string(), s, d))
    });
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("model.safetensors")
            && msg.contains("model.layers.1.self_attn.k_norm.weight")
            && msg.contains("missing"),
        "{msg}"
    );
}

#[test]
fn wrong_shape_names_file_and_tensor() {
    let tmp = copy_fixture();
    let file = tmp.path().join("base/model.safetensors");
    rewrite(&file, |n, s, d, _| {
        if n == "model.layers.0.mlp.up_proj.weight" {
            // [160, 64] stored as [64, 160]: same bytes, wrong layout.
            Some((n.to_string(), vec![s[1], s[0]], d))
        } else {
            Some((n.to_string(), s, d))
        }
    });
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("model.safetensors")
            && msg.contains("model.layers.0.mlp.up_proj.weight")
            && msg.contains("[64, 160]"),
        "{msg}"
    );
}

#[test]
fn adapter_for_another_base_names_file_and_tensor() {
    let tmp = copy_fixture();
    let file = tmp.path().join("loras/L1/adapter_model.safetensors");
    // An adapter trained on a model with hidden size 96: every A is [r, 96].
    rewrite(&file, |n, s, d, _| {
        if n.ends_with("self_attn.q_proj.lora_A.weight") {
            Some((n.to_string(), vec![s[0], 96], vec![0u8; s[0] * 96 * 4]))
        } else {
            Some((n.to_string(), s, d))
        }
    });
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("L1/adapter_model.safetensors")
            && msg.contains("q_proj.lora_A.weight")
            && msg.contains("96"),
        "{msg}"
    );
    // A missing B half of a pair is named too.
    let tmp = copy_fixture();
    let file = tmp.path().join("loras/L3/adapter_model.safetensors");
    rewrite(&file, |n, s, d, _| {
        (n != "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight")
            .then(|| (n.to_string(), s, d))
    });
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("L3/adapter_model.safetensors")
            && msg.contains("layers.1.self_attn.v_proj.lora_B.weight"),
        "{msg}"
    );
    // A layer the base does not have.
    let tmp = copy_fixture();
    let file = tmp.path().join("loras/L0/adapter_model.safetensors");
    rewrite(&file, |n, s, d, _| {
        Some((n.replace("layers.1.", "layers.7."), s, d))
    });
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("L0/adapter_model.safetensors")
            && msg.contains("layers.7.")
            && msg.contains("2 layers"),
        "{msg}"
    );
}

#[test]
fn unknown_architecture_and_bad_config_name_the_file() {
    let tmp = copy_fixture();
    let config = tmp.path().join("base/config.json");
    let text = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        text.replace("Qwen3ForCausalLM", "LlamaForCausalLM"),
    )
    .expect("write");
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("config.json") && msg.contains("LlamaForCausalLM"),
        "{msg}"
    );
    std::fs::write(&config, text.replace("\"rope_parameters\"", "\"unused\"")).expect("write");
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("config.json") && msg.contains("rope_theta"),
        "{msg}"
    );
    // rope_theta at the top level (transformers < 5) is accepted.
    std::fs::write(
        &config,
        text.replace(
            "\"rope_parameters\": {",
            "\"rope_theta\": 1000000.0, \"unused\": {",
        ),
    )
    .expect("write");
    let engine = Engine::load(tmp.path(), test_device()).expect("top-level rope_theta");
    assert_eq!(engine.config().rope_theta, 1e6);
    // An adapter of another kind.
    let acfg = tmp.path().join("loras/L2/adapter_config.json");
    let a = std::fs::read_to_string(&acfg).expect("adapter config");
    std::fs::write(
        &acfg,
        a.replace("\"use_dora\": false", "\"use_dora\": true"),
    )
    .expect("write");
    let msg = load_error(tmp.path());
    assert!(
        msg.contains("L2/adapter_config.json") && msg.contains("use_dora"),
        "{msg}"
    );
}

#[test]
fn sharded_weights_with_index_and_f32_and_renamed_adapter_keys_give_the_same_logits() {
    let g = golden();
    let tmp = copy_fixture();
    let base = tmp.path().join("base");
    let single = base.join("model.safetensors");
    let bytes = std::fs::read(&single).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let mut shard_of = serde_json::Map::new();
    let mut shards: [Vec<Tensor>; 2] = [Vec::new(), Vec::new()];
    for (i, (name, view)) in st.iter().enumerate() {
        // Shard 2 is stored as f32, widened exactly from bf16.
        let (file, data) = if i % 2 == 0 {
            ("model-00001-of-00002.safetensors", view.data().to_vec())
        } else {
            let widened: Vec<u8> = view
                .data()
                .chunks_exact(2)
                .flat_map(|b| ((u16::from_le_bytes([b[0], b[1]]) as u32) << 16).to_le_bytes())
                .collect();
            ("model-00002-of-00002.safetensors", widened)
        };
        shard_of.insert(name.to_string(), Value::String(file.into()));
        shards[i % 2].push((name.to_string(), view.shape().to_vec(), data));
    }
    for (k, shard) in shards.iter().enumerate() {
        let dtype = if k == 0 {
            safetensors::Dtype::BF16
        } else {
            safetensors::Dtype::F32
        };
        let views: Vec<(String, safetensors::tensor::TensorView)> = shard
            .iter()
            .map(|(n, s, d)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(dtype, s.clone(), d).expect("view"),
                )
            })
            .collect();
        safetensors::serialize_to_file(
            views,
            None,
            &base.join(format!("model-0000{}-of-00002.safetensors", k + 1)),
        )
        .expect("write shard");
    }
    std::fs::remove_file(&single).expect("rm");
    let index = serde_json::json!({"metadata": {}, "weight_map": shard_of});
    std::fs::write(base.join("model.safetensors.index.json"), index.to_string()).expect("index");
    // Adapter keys without the PEFT prefix and with the `.default` infix.
    rewrite(
        &tmp.path().join("loras/L3/adapter_model.safetensors"),
        |n, s, d, _| {
            Some((
                n.trim_start_matches("base_model.model.")
                    .replace(".weight", ".default.weight")
                    .replace(".default.default", ".default"),
                s,
                d,
            ))
        },
    );
    let mut engine = Engine::load(tmp.path(), test_device()).expect("load sharded");
    let tokens = g.ids("plain");
    for variant in ["base", "L3"] {
        let all = engine
            .logits(&tokens, adapter_of(&engine, variant))
            .expect("logits");
        let what = format!("plain.{variant}.last_logits");
        assert_close(&what, all.last().expect("rows"), g.tensor(&what));
    }
}

/// A rewrite of an adapter_config.json text.
type ConfigEdit = dyn Fn(&str) -> String;

#[test]
fn rslora_and_alpha_pattern_scale_like_peft() {
    let g = golden();
    let tokens = g.ids("plain");
    // L0 has r = 8, lora_alpha = 16: scale 2. The same scale written two other ways must give
    // the reference's L0 logits: rsLoRA (alpha / √r) and a per-module alpha_pattern.
    let edits: [(&str, &ConfigEdit); 2] = [
        ("rslora", &|c: &str| {
            c.replace(
                "\"lora_alpha\": 16",
                &format!("\"lora_alpha\": {}", 2.0 * 8f64.sqrt()),
            )
            .replace("\"use_rslora\": false", "\"use_rslora\": true")
        }),
        ("alpha_pattern", &|c: &str| {
            c.replace("\"lora_alpha\": 16", "\"lora_alpha\": 3").replace(
                "\"alpha_pattern\": {}",
                "\"alpha_pattern\": {\"q_proj\": 16, \"k_proj\": 16, \"v_proj\": 16, \"o_proj\": 16, \
                 \"gate_proj\": 16, \"mlp.up_proj\": 16, \"down_proj\": 16}",
            )
        }),
    ];
    for (what, edit) in edits {
        let tmp = copy_fixture();
        let path = tmp.path().join("loras/L0/adapter_config.json");
        let text = std::fs::read_to_string(&path).expect("config");
        let edited = edit(&text);
        assert_ne!(edited, text, "{what}: edit applied");
        std::fs::write(&path, edited).expect("write");
        let mut engine = Engine::load(tmp.path(), test_device()).expect("load");
        let all = engine.logits(&tokens, Some(0)).expect("logits");
        assert_close(
            what,
            all.last().expect("rows"),
            g.tensor("plain.L0.last_logits"),
        );
    }
}

/// An adapter file that stores bf16 stays bf16 on bf16 weights (half the bytes, its scale
/// applied after the product) and gives the logits of the same file on f32 weights, where it
/// is widened and B takes the scale in f32.
#[test]
fn a_bf16_adapter_stays_bf16_and_matches_f32_weights() {
    let g = golden();
    let tmp = copy_fixture();
    // L0 (scale 2, so the scale is not a no-op) rounded to bf16, nearest even.
    let path = tmp.path().join("loras/L0/adapter_model.safetensors");
    let bytes = std::fs::read(&path).expect("read");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse");
    let mut values = 0usize;
    let tensors: Vec<Tensor> = st
        .iter()
        .map(|(name, view)| {
            assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
            let data: Vec<u8> = view
                .data()
                .chunks_exact(4)
                .flat_map(|b| {
                    let bits = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    let rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16;
                    (rounded as u16).to_le_bytes()
                })
                .collect();
            values += data.len() / 2;
            (name.to_string(), view.shape().to_vec(), data)
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView)> = tensors
        .iter()
        .map(|(n, s, d)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, s.clone(), d)
                .expect("view");
            (n.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &path).expect("write");
    let load = |precision| {
        let options = EngineOptions {
            cpu_weights: Some(precision),
            ..Default::default()
        };
        Engine::load_with(tmp.path(), DeviceChoice::Cpu, options).expect("load")
    };
    let mut bf16 = load(WeightPrecision::Bf16);
    let mut f32w = load(WeightPrecision::F32);
    // Only L0 is stored bf16 (the other adapters are f32 files and stay f32 in both).
    let (ab, af) = (bf16.memory().adapters, f32w.memory().adapters);
    assert_eq!(af - ab, values * 2, "adapters: bf16 {ab} B, f32 {af} B");
    for prompt in ["plain", "chat"] {
        let tokens = g.ids(prompt);
        let b = bf16.logits(&tokens, Some(0)).expect("bf16 logits");
        let f = f32w.logits(&tokens, Some(0)).expect("f32 logits");
        let base = f32w.logits(&tokens, None).expect("base logits");
        let mut moved = 0f32;
        for (row, ((b, f), base)) in b.iter().zip(&f).zip(&base).enumerate() {
            for (i, (x, y)) in b.iter().zip(f).enumerate() {
                assert!(
                    (x - y).abs() <= 1e-4 * (1.0 + y.abs()),
                    "{prompt} row {row} logit {i}: bf16 {x} vs f32 {y}"
                );
            }
            moved = f
                .iter()
                .zip(base)
                .map(|(x, y)| (x - y).abs())
                .fold(moved, f32::max);
        }
        assert!(
            moved > 1e-2,
            "{prompt}: L0 moves the logits by {moved} only"
        );
    }
}
