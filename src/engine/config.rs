//! `ModelConfig`: the Qwen3 (dense) or Qwen3.5-MoE (hybrid) hyper-parameters read from
//! `config.json`, plus the stop ids of `generation_config.json`.

use std::path::Path;

use serde_json::Value;

use super::error::EngineError;

/// Architectures this engine implements (the `architectures` / `model_type` of config.json).
const QWEN3_ARCHITECTURES: &[&str] = &["Qwen3ForCausalLM"];
const QWEN3_MODEL_TYPES: &[&str] = &["qwen3"];
/// Qwen3.5-MoE: the multimodal checkpoint class (text config nested under `text_config`) and
/// the text-only causal-LM class (text config at the top level).
const HYBRID_ARCHITECTURES: &[&str] = &[
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3_5MoeForCausalLM",
];
const HYBRID_MODEL_TYPES: &[&str] = &["qwen3_5_moe", "qwen3_5_moe_text"];

/// The token mixer of one hybrid layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    /// Gated DeltaNet: a recurrent state instead of a KV cache.
    Linear,
    /// Gated softmax attention over a KV cache.
    Full,
}

/// What a Qwen3.5-MoE model adds to the dense fields of `ModelConfig`.
#[derive(Debug, Clone, PartialEq)]
pub struct HybridConfig {
    pub layer_types: Vec<LayerKind>,
    /// Dimensions of each full-attention head that RoPE rotates (`head_dim · partial_rotary_factor`).
    pub rotary_dim: usize,
    pub conv_kernel: usize,
    pub linear_key_heads: usize,
    pub linear_value_heads: usize,
    pub linear_key_head_dim: usize,
    pub linear_value_head_dim: usize,
    pub num_experts: usize,
    pub experts_per_token: usize,
    pub moe_intermediate_size: usize,
    pub shared_expert_intermediate_size: usize,
    /// Where the text weights live: `model.language_model.` (multimodal checkpoints) or `model.`.
    pub weight_prefix: String,
}

impl HybridConfig {
    /// Width of the conv1d input (q, k and v of the linear attention together).
    pub fn conv_dim(&self) -> usize {
        2 * self.linear_key_dim() + self.linear_value_dim()
    }

    pub fn linear_key_dim(&self) -> usize {
        self.linear_key_heads * self.linear_key_head_dim
    }

    pub fn linear_value_dim(&self) -> usize {
        self.linear_value_heads * self.linear_value_head_dim
    }

    /// Index among the full-attention layers (their KV slot), if layer `l` is one.
    pub fn kv_slot(&self, l: usize) -> Option<usize> {
        match self.layer_types.get(l) {
            Some(LayerKind::Full) => Some(
                self.layer_types[..l]
                    .iter()
                    .filter(|k| **k == LayerKind::Full)
                    .count(),
            ),
            _ => None,
        }
    }

    /// Index among the linear-attention layers (their recurrent-state slot), if layer `l` is one.
    pub fn state_slot(&self, l: usize) -> Option<usize> {
        match self.layer_types.get(l) {
            Some(LayerKind::Linear) => Some(
                self.layer_types[..l]
                    .iter()
                    .filter(|k| **k == LayerKind::Linear)
                    .count(),
            ),
            _ => None,
        }
    }

    pub fn full_layers(&self) -> usize {
        self.layer_types
            .iter()
            .filter(|k| **k == LayerKind::Full)
            .count()
    }

    pub fn linear_layers(&self) -> usize {
        self.layer_types.len() - self.full_layers()
    }
}

/// The shape and numerics of a Qwen3 dense model.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    pub architecture: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Per-head width; in Qwen3 often ≠ hidden_size / num_attention_heads.
    pub head_dim: usize,
    /// The context window.
    pub max_position_embeddings: usize,
    pub rope_theta: f64,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    /// Ids that end a generation: generation_config.json's `eos_token_id` ∪ config.json's.
    pub eos_token_ids: Vec<u32>,
    /// Set for Qwen3.5-MoE (hybrid linear/full attention with routed experts); None = dense.
    pub hybrid: Option<HybridConfig>,
}

impl ModelConfig {
    /// Reads `DIR/config.json` and, when present, `DIR/generation_config.json`.
    pub fn load(dir: &Path) -> Result<ModelConfig, EngineError> {
        let path = dir.join("config.json");
        let json = read_json(&path)?;
        let mut config = ModelConfig::from_json(&json, &path)?;
        let gen_path = dir.join("generation_config.json");
        if gen_path.exists() {
            let gen_json = read_json(&gen_path)?;
            for id in eos_ids(&gen_json, &gen_path)? {
                if !config.eos_token_ids.contains(&id) {
                    config.eos_token_ids.push(id);
                }
            }
        }
        Ok(config)
    }

    /// Parses a config.json value; `path` is only used to name the file in errors.
    pub fn from_json(json: &Value, path: &Path) -> Result<ModelConfig, EngineError> {
        let config = if is_hybrid(json) {
            hybrid_from_json(json, path)?
        } else {
            ModelConfig::dense_from_json(json, path)?
        };
        check_sizes(&config, path)?;
        Ok(config)
    }

    fn dense_from_json(json: &Value, path: &Path) -> Result<ModelConfig, EngineError> {
        let architecture = check_architecture(json, path)?;
        let usize_key = |key: &str| -> Result<usize, EngineError> {
            match json.get(key) {
                Some(v) => v
                    .as_u64()
                    .filter(|n| *n > 0)
                    .map(|n| n as usize)
                    .ok_or_else(|| {
                        EngineError::config(
                            path,
                            format!("key {key:?} must be a positive integer, found {v}"),
                        )
                    }),
                None => Err(EngineError::config(path, format!("missing key {key:?}"))),
            }
        };
        let hidden_size = usize_key("hidden_size")?;
        let num_attention_heads = usize_key("num_attention_heads")?;
        let num_key_value_heads = match json.get("num_key_value_heads") {
            Some(Value::Null) | None => num_attention_heads,
            Some(_) => usize_key("num_key_value_heads")?,
        };
        let head_dim = match json.get("head_dim") {
            Some(Value::Null) | None => hidden_size / num_attention_heads,
            Some(_) => usize_key("head_dim")?,
        };
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(EngineError::config(
                path,
                format!(
                    "num_attention_heads {num_attention_heads} is not a multiple of num_key_value_heads {num_key_value_heads}"
                ),
            ));
        }
        if head_dim % 2 != 0 {
            return Err(EngineError::config(
                path,
                format!("head_dim {head_dim} must be even for RoPE"),
            ));
        }
        reject_unsupported(json, path)?;
        let rope_theta = rope_theta(json, path)?;
        let rms_norm_eps = json
            .get("rms_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-6);
        let tie_word_embeddings = match json.get("tie_word_embeddings") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(EngineError::config(
                    path,
                    format!("key \"tie_word_embeddings\" must be a boolean, found {v}"),
                ));
            }
        };
        Ok(ModelConfig {
            architecture,
            vocab_size: usize_key("vocab_size")?,
            hidden_size,
            intermediate_size: usize_key("intermediate_size")?,
            num_hidden_layers: usize_key("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            max_position_embeddings: usize_key("max_position_embeddings")?,
            rope_theta,
            rms_norm_eps,
            tie_word_embeddings,
            eos_token_ids: eos_ids(json, path)?,
            hybrid: None,
        })
    }

    /// Width of all query heads together (q_proj's output).
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of all key (or value) heads together (k_proj's and v_proj's output).
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
}

/// Bounds far above any real model. A config past them is broken or hostile, and believing it
/// would mean allocating terabytes: an abort, or an overflow, instead of an error.
const MAX_LAYERS: usize = 1024;
const MAX_WIDTH: usize = 1 << 20;
const MAX_HEADS: usize = 1 << 14;
const MAX_VOCAB: usize = 1 << 24;
const MAX_EXPERTS: usize = 1 << 14;

fn too_big(path: &Path, key: &str, value: usize, max: usize) -> Result<(), EngineError> {
    if value > max {
        return Err(EngineError::config(
            path,
            format!("key {key:?} is {value}, more than the {max} this engine can load"),
        ));
    }
    Ok(())
}

fn check_sizes(c: &ModelConfig, path: &Path) -> Result<(), EngineError> {
    too_big(path, "num_hidden_layers", c.num_hidden_layers, MAX_LAYERS)?;
    too_big(path, "vocab_size", c.vocab_size, MAX_VOCAB)?;
    too_big(
        path,
        "num_attention_heads",
        c.num_attention_heads,
        MAX_HEADS,
    )?;
    too_big(
        path,
        "num_key_value_heads",
        c.num_key_value_heads,
        MAX_HEADS,
    )?;
    for (key, value) in [
        ("hidden_size", c.hidden_size),
        ("intermediate_size", c.intermediate_size),
        ("head_dim", c.head_dim),
    ] {
        too_big(path, key, value, MAX_WIDTH)?;
    }
    // Only now: both factors are bounded, so the product cannot overflow.
    too_big(path, "num_attention_heads × head_dim", c.q_dim(), MAX_WIDTH)?;
    if let Some(h) = &c.hybrid {
        too_big(path, "num_experts", h.num_experts, MAX_EXPERTS)?;
        too_big(path, "linear_num_key_heads", h.linear_key_heads, MAX_HEADS)?;
        too_big(
            path,
            "linear_num_value_heads",
            h.linear_value_heads,
            MAX_HEADS,
        )?;
        for (key, value) in [
            ("linear_key_head_dim", h.linear_key_head_dim),
            ("linear_value_head_dim", h.linear_value_head_dim),
            ("linear_conv_kernel_dim", h.conv_kernel),
            ("moe_intermediate_size", h.moe_intermediate_size),
            (
                "shared_expert_intermediate_size",
                h.shared_expert_intermediate_size,
            ),
        ] {
            too_big(path, key, value, MAX_WIDTH)?;
        }
        too_big(path, "linear key width", h.linear_key_dim(), MAX_WIDTH)?;
        too_big(path, "linear value width", h.linear_value_dim(), MAX_WIDTH)?;
    }
    Ok(())
}

fn is_hybrid(json: &Value) -> bool {
    let arch = json
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str);
    let model_type = json.get("model_type").and_then(Value::as_str);
    arch.is_some_and(|a| HYBRID_ARCHITECTURES.contains(&a))
        || (arch.is_none() && model_type.is_some_and(|t| HYBRID_MODEL_TYPES.contains(&t)))
}

/// A positive integer under `key` of `json`, or `default` when absent.
fn positive(
    json: &Value,
    key: &str,
    default: Option<usize>,
    path: &Path,
) -> Result<usize, EngineError> {
    match json.get(key) {
        None | Some(Value::Null) => {
            default.ok_or_else(|| EngineError::config(path, format!("missing key {key:?}")))
        }
        Some(v) => v
            .as_u64()
            .filter(|n| *n > 0 && *n <= u32::MAX as u64)
            .map(|n| n as usize)
            .ok_or_else(|| {
                EngineError::config(
                    path,
                    format!("key {key:?} must be a positive integer, found {v}"),
                )
            }),
    }
}

/// Qwen3.5-MoE: the text config is `text_config` of a multimodal config, or the top level.
fn hybrid_from_json(json: &Value, path: &Path) -> Result<ModelConfig, EngineError> {
    let multimodal = json.get("text_config").is_some_and(Value::is_object);
    let text = if multimodal {
        &json["text_config"]
    } else {
        json
    };
    let architecture = json
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str)
        .unwrap_or(if multimodal {
            HYBRID_ARCHITECTURES[0]
        } else {
            HYBRID_ARCHITECTURES[1]
        })
        .to_string();
    let num_hidden_layers = positive(text, "num_hidden_layers", None, path)?;
    // Before a list of that many layer kinds is built.
    too_big(path, "num_hidden_layers", num_hidden_layers, MAX_LAYERS)?;
    let layer_types = match text.get("layer_types") {
        None | Some(Value::Null) => {
            let interval = positive(text, "full_attention_interval", Some(4), path)?;
            (0..num_hidden_layers)
                .map(|i| {
                    if (i + 1) % interval == 0 {
                        LayerKind::Full
                    } else {
                        LayerKind::Linear
                    }
                })
                .collect()
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v.as_str() {
                Some("linear_attention") => Ok(LayerKind::Linear),
                Some("full_attention") => Ok(LayerKind::Full),
                _ => Err(EngineError::config(
                    path,
                    format!(
                        "layer_types entry {v} is not \"linear_attention\" or \"full_attention\""
                    ),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => {
            return Err(EngineError::config(
                path,
                format!("layer_types must be a list, found {v}"),
            ));
        }
    };
    if layer_types.len() != num_hidden_layers {
        return Err(EngineError::config(
            path,
            format!(
                "layer_types has {} entries, num_hidden_layers is {num_hidden_layers}",
                layer_types.len()
            ),
        ));
    }
    let hidden_size = positive(text, "hidden_size", None, path)?;
    let num_attention_heads = positive(text, "num_attention_heads", None, path)?;
    let num_key_value_heads =
        positive(text, "num_key_value_heads", Some(num_attention_heads), path)?;
    let head_dim = positive(
        text,
        "head_dim",
        Some(hidden_size / num_attention_heads.max(1)),
        path,
    )?;
    if num_attention_heads % num_key_value_heads != 0 {
        return Err(EngineError::config(
            path,
            format!(
                "num_attention_heads {num_attention_heads} is not a multiple of num_key_value_heads {num_key_value_heads}"
            ),
        ));
    }
    reject_unsupported(text, path)?;
    let factor = text
        .get("partial_rotary_factor")
        .or_else(|| {
            text.get("rope_parameters")
                .and_then(|p| p.get("partial_rotary_factor"))
        })
        .map(|v| {
            v.as_f64().filter(|f| *f > 0.0 && *f <= 1.0).ok_or_else(|| {
                EngineError::config(
                    path,
                    format!("partial_rotary_factor must be in (0, 1], found {v}"),
                )
            })
        })
        .transpose()?
        .unwrap_or(0.25);
    // HF: int(head_dim * factor), then pairs of dimensions.
    let rotary_dim = (head_dim as f64 * factor) as usize;
    if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
        return Err(EngineError::config(
            path,
            format!(
                "rotary dimension {rotary_dim} (head_dim × partial_rotary_factor) must be even and positive"
            ),
        ));
    }
    let linear_key_heads = positive(text, "linear_num_key_heads", Some(16), path)?;
    let linear_value_heads = positive(text, "linear_num_value_heads", Some(32), path)?;
    if linear_value_heads % linear_key_heads != 0 {
        return Err(EngineError::config(
            path,
            format!(
                "linear_num_value_heads {linear_value_heads} is not a multiple of linear_num_key_heads {linear_key_heads}"
            ),
        ));
    }
    let num_experts = positive(text, "num_experts", Some(256), path)?;
    let experts_per_token = positive(text, "num_experts_per_tok", Some(8), path)?;
    if experts_per_token > num_experts {
        return Err(EngineError::config(
            path,
            format!("num_experts_per_tok {experts_per_token} exceeds num_experts {num_experts}"),
        ));
    }
    let moe_intermediate_size = positive(text, "moe_intermediate_size", Some(512), path)?;
    let hybrid = HybridConfig {
        layer_types,
        rotary_dim,
        conv_kernel: positive(text, "linear_conv_kernel_dim", Some(4), path)?,
        linear_key_heads,
        linear_value_heads,
        linear_key_head_dim: positive(text, "linear_key_head_dim", Some(128), path)?,
        linear_value_head_dim: positive(text, "linear_value_head_dim", Some(128), path)?,
        num_experts,
        experts_per_token,
        moe_intermediate_size,
        shared_expert_intermediate_size: positive(
            text,
            "shared_expert_intermediate_size",
            Some(512),
            path,
        )?,
        weight_prefix: if multimodal {
            "model.language_model.".into()
        } else {
            "model.".into()
        },
    };
    let tie_word_embeddings = match json
        .get("tie_word_embeddings")
        .or_else(|| text.get("tie_word_embeddings"))
    {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => {
            return Err(EngineError::config(
                path,
                format!("key \"tie_word_embeddings\" must be a boolean, found {v}"),
            ));
        }
    };
    let mut eos_token_ids = eos_ids(text, path)?;
    for id in eos_ids(json, path)? {
        if !eos_token_ids.contains(&id) {
            eos_token_ids.push(id);
        }
    }
    Ok(ModelConfig {
        architecture,
        vocab_size: positive(text, "vocab_size", None, path)?,
        hidden_size,
        intermediate_size: moe_intermediate_size,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        head_dim,
        max_position_embeddings: positive(text, "max_position_embeddings", None, path)?,
        rope_theta: rope_theta(text, path)?,
        rms_norm_eps: text
            .get("rms_norm_eps")
            .and_then(Value::as_f64)
            .unwrap_or(1e-6),
        tie_word_embeddings,
        eos_token_ids,
        hybrid: Some(hybrid),
    })
}

fn read_json(path: &Path) -> Result<Value, EngineError> {
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| EngineError::config(path, format!("invalid JSON: {e}")))
}

fn check_architecture(json: &Value, path: &Path) -> Result<String, EngineError> {
    let expected = || {
        [QWEN3_ARCHITECTURES, HYBRID_ARCHITECTURES]
            .concat()
            .join(", ")
    };
    let model_type = json.get("model_type").and_then(Value::as_str);
    let arch = json
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str);
    match (arch, model_type) {
        (Some(a), _) if QWEN3_ARCHITECTURES.contains(&a) => Ok(a.to_string()),
        (None, Some(t)) if QWEN3_MODEL_TYPES.contains(&t) => Ok(QWEN3_ARCHITECTURES[0].to_string()),
        (Some(a), _) => Err(EngineError::UnknownArchitecture {
            path: path.into(),
            found: a.to_string(),
            expected: expected(),
        }),
        (None, t) => Err(EngineError::UnknownArchitecture {
            path: path.into(),
            found: t.unwrap_or("<no architectures or model_type>").to_string(),
            expected: expected(),
        }),
    }
}

/// Features of some Qwen3-family configs that this engine does not implement: refusing them is
/// better than silently computing something else.
fn reject_unsupported(json: &Value, path: &Path) -> Result<(), EngineError> {
    if json.get("attention_bias").and_then(Value::as_bool) == Some(true) {
        return Err(EngineError::config(
            path,
            "attention_bias = true is not supported",
        ));
    }
    if let Some(act) = json.get("hidden_act").and_then(Value::as_str)
        && act != "silu"
    {
        return Err(EngineError::config(
            path,
            format!("hidden_act {act:?} is not supported (only \"silu\")"),
        ));
    }
    if json.get("use_sliding_window").and_then(Value::as_bool) == Some(true) {
        return Err(EngineError::config(
            path,
            "use_sliding_window = true is not supported",
        ));
    }
    let scaling = json
        .get("rope_scaling")
        .filter(|v| !v.is_null())
        .or_else(|| {
            json.get("rope_parameters")
                .filter(|v| v.get("rope_type").is_some())
        });
    if let Some(s) = scaling {
        let kind = s
            .get("rope_type")
            .or_else(|| s.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        if kind != "default" {
            return Err(EngineError::config(
                path,
                format!("rope type {kind:?} is not supported (only \"default\")"),
            ));
        }
    }
    Ok(())
}

/// `rope_theta` at the top level (transformers < 5) or under `rope_parameters` (≥ 5).
fn rope_theta(json: &Value, path: &Path) -> Result<f64, EngineError> {
    let value = json.get("rope_theta").or_else(|| {
        json.get("rope_parameters")
            .and_then(|p| p.get("rope_theta"))
    });
    match value {
        Some(v) => v.as_f64().filter(|t| *t > 0.0).ok_or_else(|| {
            EngineError::config(
                path,
                format!("rope_theta must be a positive number, found {v}"),
            )
        }),
        None => Err(EngineError::config(
            path,
            "missing key \"rope_theta\" (top level or under \"rope_parameters\")",
        )),
    }
}

/// `eos_token_id`: absent, null, one id or a list of ids.
fn eos_ids(json: &Value, path: &Path) -> Result<Vec<u32>, EngineError> {
    let bad = |v: &Value| {
        EngineError::config(
            path,
            format!("eos_token_id must be an id or a list of ids, found {v}"),
        )
    };
    let one = |v: &Value| {
        v.as_u64()
            .filter(|n| *n <= u32::MAX as u64)
            .map(|n| n as u32)
            .ok_or_else(|| bad(v))
    };
    match json.get("eos_token_id") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({"architectures": ["Qwen3ForCausalLM"], "vocab_size": 100, "hidden_size": 64,
               "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 512,
               "rope_theta": 10000.0, "eos_token_id": 7})
    }

    fn parse(v: &Value) -> Result<ModelConfig, EngineError> {
        ModelConfig::from_json(v, Path::new("config.json"))
    }

    #[test]
    fn absurd_sizes_are_an_error_naming_the_file_not_an_abort() {
        let huge = 1u64 << 62;
        for (key, value) in [
            ("num_hidden_layers", 1_000_000_000_000u64),
            ("head_dim", huge),
            ("hidden_size", huge),
            ("intermediate_size", huge),
            ("vocab_size", huge),
            ("num_attention_heads", huge),
        ] {
            let mut v = base();
            v[key] = json!(value);
            if key == "num_attention_heads" {
                v["num_key_value_heads"] = json!(value);
            }
            let e = parse(&v).unwrap_err().to_string();
            assert!(
                e.contains("config.json") && e.contains("more than"),
                "{key}: {e}"
            );
        }
        // Each factor allowed, their product not.
        let mut v = base();
        v["num_attention_heads"] = json!(1 << 14);
        v["num_key_value_heads"] = json!(1 << 14);
        v["head_dim"] = json!(1 << 20);
        let e = parse(&v).unwrap_err().to_string();
        assert!(e.contains("num_attention_heads × head_dim"), "{e}");
        // A hybrid config is bounded before its layer list is built.
        let hybrid = json!({"architectures": ["Qwen3_5MoeForCausalLM"],
            "num_hidden_layers": 4_000_000_000u64});
        let e = parse(&hybrid).unwrap_err().to_string();
        assert!(e.contains("num_hidden_layers"), "{e}");
    }

    #[test]
    fn rope_theta_at_top_level_or_under_rope_parameters() {
        assert_eq!(parse(&base()).expect("top level").rope_theta, 10000.0);
        let mut v = base();
        v.as_object_mut().expect("object").remove("rope_theta");
        v["rope_parameters"] = json!({"rope_theta": 5e5, "rope_type": "default"});
        assert_eq!(parse(&v).expect("nested").rope_theta, 5e5);
        v["rope_parameters"] = json!({"rope_theta": 5e5, "rope_type": "yarn", "factor": 4.0});
        assert!(parse(&v).expect_err("yarn").to_string().contains("yarn"));
    }

    #[test]
    fn defaults_and_eos_forms() {
        let mut v = base();
        v.as_object_mut().expect("object").remove("head_dim");
        v["eos_token_id"] = json!([7, 9]);
        let c = parse(&v).expect("config");
        assert_eq!((c.head_dim, c.q_dim(), c.kv_dim()), (16, 64, 32));
        assert_eq!(c.eos_token_ids, vec![7, 9]);
        assert!(!c.tie_word_embeddings);
        v["eos_token_id"] = json!("x");
        assert!(parse(&v).is_err());
    }

    #[test]
    fn architecture_from_model_type_and_unknown_ones_rejected() {
        let mut v = base();
        v.as_object_mut().expect("object").remove("architectures");
        v["model_type"] = json!("qwen3");
        assert!(parse(&v).is_ok());
        v["model_type"] = json!("qwen3_moe");
        let e = parse(&v).expect_err("moe").to_string();
        assert!(e.contains("config.json") && e.contains("qwen3_moe"), "{e}");
        let mut v = base();
        v["num_key_value_heads"] = json!(3);
        assert!(parse(&v).is_err());
        v["num_key_value_heads"] = json!(2);
        v.as_object_mut().expect("object").remove("vocab_size");
        assert!(
            parse(&v)
                .expect_err("vocab")
                .to_string()
                .contains("vocab_size")
        );
    }
}
