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
