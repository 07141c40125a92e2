//! The tiny-qwen3 fixture and its golden outputs from HF transformers + PEFT (golden.json,
//! golden.safetensors), shared by the engine test files.

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::Value;

/// The fixture; BATON_REPO_ROOT overrides the build-time path so a test binary built on one
/// machine runs on another (tools/gpu-check.sh with BATON_CUDA_TEST_BIN).
pub fn fixture() -> PathBuf {
    fixture_named("tiny-qwen3")
}

/// `tests/fixtures/NAME`, under BATON_REPO_ROOT like `fixture`.
pub fn fixture_named(name: &str) -> PathBuf {
    std::env::var_os("BATON_REPO_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
        .join("tests/fixtures")
        .join(name)
}

pub struct Golden {
    pub json: Value,
    /// name → (shape, f32 values)
    pub tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

/// golden.json alone, for the suites that need no tensors.
pub fn golden_json() -> Value {
    golden_json_in(&fixture())
}

fn golden_json_in(dir: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(dir.join("golden.json")).expect("golden.json");
    serde_json::from_str(&text).expect("golden.json parses")
}

pub fn golden() -> Golden {
    golden_in(&fixture())
}

/// The golden outputs of the fixture in `dir`.
pub fn golden_in(dir: &std::path::Path) -> Golden {
    let json = golden_json_in(dir);
    let bytes = std::fs::read(dir.join("golden.safetensors")).expect("golden.safetensors");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("parse golden.safetensors");
    let tensors = st
        .iter()
        .map(|(name, view)| {
            let data = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            (name.to_string(), (view.shape().to_vec(), data))
        })
        .collect();
    Golden { json, tensors }
}

impl Golden {
    pub fn ids(&self, prompt: &str) -> Vec<u32> {
        ids(&self.json["prompts"][prompt]["ids"])
    }
    pub fn entry(&self, prompt: &str, variant: &str) -> &Value {
        &self.json["prompts"][prompt]["by_adapter"][variant]
    }
    pub fn tensor(&self, name: &str) -> &[f32] {
        &self
            .tensors
            .get(name)
            .unwrap_or_else(|| panic!("golden tensor {name}"))
            .1
    }
}

pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

/// The adapter a golden variant names (`base`: none).
pub fn adapter_of(engine: &baton::engine::Engine, variant: &str) -> Option<usize> {
    (variant != "base").then(|| engine.adapter_index(variant).expect("adapter loaded"))
}

/// The constrained route of each variant against the reference: the label, and the four label
/// log-probabilities within `atol + rtol·|reference|`.
pub fn check_constrained_route(
    engine: &mut baton::engine::Engine,
    g: &Golden,
    variants: &[&str],
    atol: f32,
    rtol: f32,
) {
    use baton::engine::{FinishKind, GenerateRequest, SamplingParams};
    let labels = ["L0", "L1", "L2", "L3"];
    let options: Vec<Vec<u32>> = labels
        .iter()
        .map(|l| ids(&g.json["label_token_ids"][l]))
        .collect();
    for variant in variants {
        let entry = g.entry("route", variant);
        engine.clear_cache();
        let req = GenerateRequest {
            prompt: g.ids("route"),
            adapter: adapter_of(engine, variant),
            sampling: SamplingParams::greedy(),
            max_tokens: 8,
            stop_ids: Vec::new(),
            constraint: Some(options.clone()),
        };
        let out = engine.generate(&req, &mut |_| true).expect("route");
        assert_eq!(out.finish, FinishKind::Constraint);
        let want = entry["constrained_label"].as_str().expect("label");
        assert_eq!(labels[out.choice.expect("choice")], want, "route.{variant}");
        let scores = out.choice_logprobs.expect("log-probabilities");
        for (l, label) in labels.iter().enumerate() {
            let reference = entry["label_logprobs"][label].as_f64().expect("lp") as f32;
            assert!(
                (scores[l] - reference).abs() <= atol + rtol * reference.abs(),
                "route.{variant}: log p({label}) = {} want {reference}",
                scores[l]
            );
        }
    }
}
