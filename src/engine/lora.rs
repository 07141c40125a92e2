//! PEFT LoRA adapters: reading `adapter_config.json` + `adapter_model.safetensors`, checking them
//! against the base model, and holding each adapted module's A and B on a device (bf16 as the
//! file stores them where the device keeps bf16, else f32 with the scale folded into B).
//! Applied unmerged, `y = W·x + s·B·(A·x)`, so all adapters stay resident and switching is free.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::config::ModelConfig;
use super::device::Device;
use super::error::EngineError;
use super::weights::WeightFiles;

/// The seven linear modules of a Qwen3 decoder layer that LoRA can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Module {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Module {
    pub const ALL: [Module; 7] = [
        Module::Q,
        Module::K,
        Module::V,
        Module::O,
        Module::Gate,
        Module::Up,
        Module::Down,
    ];

    /// The PEFT / HF name (`q_proj`, …).
    pub fn name(self) -> &'static str {
        match self {
            Module::Q => "q_proj",
            Module::K => "k_proj",
            Module::V => "v_proj",
            Module::O => "o_proj",
            Module::Gate => "gate_proj",
            Module::Up => "up_proj",
            Module::Down => "down_proj",
        }
    }

    /// `self_attn` or `mlp`.
    pub fn block(self) -> &'static str {
        match self {
            Module::Q | Module::K | Module::V | Module::O => "self_attn",
            Module::Gate | Module::Up | Module::Down => "mlp",
        }
    }

    fn from_name(name: &str) -> Option<Module> {
        Module::ALL.into_iter().find(|m| m.name() == name)
    }

    /// `(in, out)` features of the base weight in a model of this config.
    pub fn dims(self, c: &ModelConfig) -> (usize, usize) {
        match self {
            Module::Q => (c.hidden_size, c.q_dim()),
            Module::K | Module::V => (c.hidden_size, c.kv_dim()),
            Module::O => (c.q_dim(), c.hidden_size),
            Module::Gate | Module::Up => (c.hidden_size, c.intermediate_size),
            Module::Down => (c.intermediate_size, c.hidden_size),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One adapted module: `a: [rank, in]`, `b: [out, rank]`, and the scale still to apply to the
/// product (1 where it is already multiplied into an f32 `b`).
pub struct LoraPair<D: Device> {
    pub a: D::Matrix,
    pub b: D::Matrix,
    pub rank: usize,
    pub scale: f32,
}

impl<D: Device> LoraPair<D> {
    /// A pair from host tensors. A bf16 `b` keeps its stored bits, so the scale is applied
    /// after the product; an f32 one takes the scale in, as PEFT's f32 math would round it.
    pub(crate) fn new(
        dev: &D,
        a: Tensor,
        b: Tensor,
        (rank, fan_in, fan_out): (usize, usize, usize),
        scale: f32,
    ) -> Result<LoraPair<D>, EngineError> {
        let a = a.upload(dev, rank, fan_in)?;
        let (b, scale) = match b {
            Tensor::Bf16(bits) => (dev.matrix_bf16(bits, fan_out, rank)?, scale),
            Tensor::F32(mut values) => {
                values.iter_mut().for_each(|v| *v *= scale);
                (dev.matrix(values, fan_out, rank)?, 1.0)
            }
        };
        Ok(LoraPair { a, b, rank, scale })
    }
}

/// A host tensor as an adapter file stores it: bf16 bits when the file holds bf16 and the
/// device keeps bf16, else f32.
pub(crate) enum Tensor {
    Bf16(Vec<u16>),
    F32(Vec<f32>),
}

impl Tensor {
    pub(crate) fn load<D: Device>(
        dev: &D,
        weights: &WeightFiles,
        name: &str,
        shape: &[usize],
    ) -> Result<Tensor, EngineError> {
        if dev.keeps_bf16()
            && let Some(bits) = weights.load_bf16(name, shape)?
        {
            return Ok(Tensor::Bf16(bits));
        }
        Ok(Tensor::F32(weights.load_f32(name, shape)?))
    }

    fn upload<D: Device>(
        self,
        dev: &D,
        rows: usize,
        cols: usize,
    ) -> Result<D::Matrix, EngineError> {
        match self {
            Tensor::Bf16(bits) => dev.matrix_bf16(bits, rows, cols),
            Tensor::F32(values) => dev.matrix(values, rows, cols),
        }
    }

    /// `out[i] = self[index(i)]` for `len` entries, in the same precision.
    pub(crate) fn gather(&self, len: usize, index: impl Fn(usize) -> usize) -> Tensor {
        match self {
            Tensor::Bf16(v) => Tensor::Bf16((0..len).map(|i| v[index(i)]).collect()),
            Tensor::F32(v) => Tensor::F32((0..len).map(|i| v[index(i)]).collect()),
        }
    }
}

/// One adapter, resident on a device.
pub struct LoraAdapter<D: Device> {
    pub name: String,
    pub dir: PathBuf,
    /// `layers[l][module.index()]`.
    layers: Vec<[Option<LoraPair<D>>; 7]>,
    max_rank: usize,
}

impl<D: Device> LoraAdapter<D> {
    /// The adapted module `m` of layer `layer`, if this adapter targets it.
    pub fn pair(&self, layer: usize, m: Module) -> Option<&LoraPair<D>> {
        self.layers.get(layer).and_then(|l| l[m.index()].as_ref())
    }

    /// The largest rank of any module (sizes the shrink scratch buffer).
    pub fn max_rank(&self) -> usize {
        self.max_rank
    }

    /// The modules this adapter targets (in any layer).
    pub fn targets(&self) -> Vec<Module> {
        Module::ALL
            .into_iter()
            .filter(|m| self.layers.iter().any(|l| l[m.index()].is_some()))
            .collect()
    }

    /// Bytes on the device.
    pub fn bytes(&self, dev: &D) -> usize {
        self.layers
            .iter()
            .flatten()
            .flatten()
            .map(|p| dev.matrix_bytes(&p.a) + dev.matrix_bytes(&p.b))
            .sum()
    }

    /// Reads the PEFT adapter in `dir` and checks it against `config`.
    pub fn load(
        dev: &D,
        name: &str,
        dir: &Path,
        config: &ModelConfig,
    ) -> Result<LoraAdapter<D>, EngineError> {
        let settings = AdapterSettings::load(&dir.join("adapter_config.json"), true)?;
        let (file, weights) = adapter_weights(dir)?;

        // Which (layer, module) pairs the file holds, from its tensor names.
        let mut found: Vec<[Option<(String, String)>; 7]> = (0..config.num_hidden_layers)
            .map(|_| Default::default())
            .collect();
        let mut names: Vec<&str> = weights.names().collect();
        names.sort_unstable();
        for key in names {
            let parsed = parse_key(key).ok_or_else(|| {
                EngineError::adapter(
                    &file,
                    format!(
                        "tensor {key:?} is not a LoRA A/B weight of a Qwen3 linear layer \
                         (DoRA, embedding LoRA and modules_to_save are not supported)"
                    ),
                )
            })?;
            if parsed.layer >= config.num_hidden_layers {
                return Err(EngineError::adapter(
                    &file,
                    format!(
                        "tensor {key:?} is for layer {}, the base model has {} layers",
                        parsed.layer, config.num_hidden_layers
                    ),
                ));
            }
            let slot = &mut found[parsed.layer][parsed.module.index()];
            let entry = slot.get_or_insert_with(|| (String::new(), String::new()));
            let target = if parsed.is_a {
                &mut entry.0
            } else {
                &mut entry.1
            };
            if !target.is_empty() {
                return Err(EngineError::adapter(
                    &file,
                    format!("tensors {target:?} and {key:?} are the same weight"),
                ));
            }
            *target = key.to_string();
        }

        // Every declared target must be present in every transformed layer.
        if let Some(declared) = &settings.target_modules {
            for (layer, modules) in found.iter().enumerate() {
                if !settings.transforms_layer(layer) {
                    continue;
                }
                for m in declared {
                    if modules[m.index()].is_none() {
                        return Err(EngineError::MissingTensor {
                            path: file.clone(),
                            tensor: format!(
                                "base_model.model.model.layers.{layer}.{}.{}.lora_A.weight",
                                m.block(),
                                m.name()
                            ),
                        });
                    }
                }
            }
        }

        let mut layers: Vec<[Option<LoraPair<D>>; 7]> =
            Vec::with_capacity(config.num_hidden_layers);
        let mut max_rank = 0;
        for (layer, modules) in found.into_iter().enumerate() {
            let mut slots: [Option<LoraPair<D>>; 7] = Default::default();
            for (m, entry) in Module::ALL.into_iter().zip(modules) {
                let Some((a_key, b_key)) = entry else {
                    continue;
                };
                let module_path = format!("model.layers.{layer}.{}.{}", m.block(), m.name());
                let expected_rank = settings.rank_for(&module_path);
                let (a_key, b_key) = match (a_key.is_empty(), b_key.is_empty()) {
                    (false, false) => (a_key, b_key),
                    (true, _) => {
                        return Err(EngineError::MissingTensor {
                            path: file.clone(),
                            tensor: b_key.replace("lora_B", "lora_A"),
                        });
                    }
                    (_, true) => {
                        return Err(EngineError::MissingTensor {
                            path: file.clone(),
                            tensor: a_key.replace("lora_A", "lora_B"),
                        });
                    }
                };
                let (fan_in, fan_out) = m.dims(config);
                let a = Tensor::load(dev, &weights, &a_key, &[expected_rank, fan_in])?;
                let b = Tensor::load(dev, &weights, &b_key, &[fan_out, expected_rank])?;
                let scale = settings.scale_for(&module_path, expected_rank);
                max_rank = max_rank.max(expected_rank);
                slots[m.index()] = Some(LoraPair::new(
                    dev,
                    a,
                    b,
                    (expected_rank, fan_in, fan_out),
                    scale,
                )?);
            }
            layers.push(slots);
        }
        if max_rank == 0 {
            return Err(EngineError::adapter(&file, "holds no LoRA weights"));
        }
        Ok(LoraAdapter {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            layers,
            max_rank,
        })
    }
}

struct ParsedKey {
    layer: usize,
    module: Module,
    is_a: bool,
}

/// `[base_model.model.]model.layers.N.{self_attn|mlp}.M.lora_{A|B}[.default].weight`.
fn parse_key(key: &str) -> Option<ParsedKey> {
    let key = key.strip_prefix("base_model.model.").unwrap_or(key);
    let key = key.strip_prefix("model.").unwrap_or(key);
    let rest = key.strip_prefix("layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (block, rest) = rest.split_once('.')?;
    let (module, rest) = rest.split_once('.')?;
    let module = Module::from_name(module)?;
    if block != module.block() {
        return None;
    }
    let is_a = match rest {
        "lora_A.weight" | "lora_A.default.weight" => true,
        "lora_B.weight" | "lora_B.default.weight" => false,
        _ => return None,
    };
    Some(ParsedKey {
        layer,
        module,
        is_a,
    })
}

/// The weights file of the PEFT adapter in `dir`, opened, and its path (for errors).
pub(crate) fn adapter_weights(dir: &Path) -> Result<(PathBuf, WeightFiles), EngineError> {
    let file = dir.join("adapter_model.safetensors");
    if !file.exists() {
        return Err(EngineError::adapter(&file, "missing adapter weights file"));
    }
    let weights = WeightFiles::open(file.clone(), std::slice::from_ref(&file))?;
    Ok((file, weights))
}

/// The parts of adapter_config.json that change the math.
pub(crate) struct AdapterSettings {
    path: PathBuf,
    r: usize,
    alpha: f64,
    use_rslora: bool,
    /// The dense model's modules (None for a hybrid model, or a regex / absent list).
    target_modules: Option<Vec<Module>>,
    /// `target_modules` as written, when it is a list.
    pub(crate) target_names: Option<Vec<String>>,
    /// `target_parameters` (PEFT's LoRA on bare parameters, e.g. fused expert tensors).
    pub(crate) target_parameters: Vec<String>,
    layers_to_transform: Option<Vec<usize>>,
    rank_pattern: Vec<(regex::Regex, usize)>,
    alpha_pattern: Vec<(regex::Regex, f64)>,
}

impl AdapterSettings {
    /// `dense`: the base is a dense Qwen3, whose seven module names are checked here.
    pub(crate) fn load(path: &Path, dense: bool) -> Result<AdapterSettings, EngineError> {
        let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| EngineError::config(path, format!("invalid JSON: {e}")))?;
        let bad = |reason: String| EngineError::adapter(path, reason);
        let peft_type = json
            .get("peft_type")
            .and_then(Value::as_str)
            .unwrap_or("LORA");
        if peft_type != "LORA" {
            return Err(bad(format!(
                "peft_type {peft_type:?} is not supported (only LORA)"
            )));
        }
        for flag in ["use_dora", "fan_in_fan_out"] {
            if json.get(flag).and_then(Value::as_bool) == Some(true) {
                return Err(bad(format!("{flag} = true is not supported")));
            }
        }
        if let Some(bias) = json.get("bias").and_then(Value::as_str)
            && bias != "none"
        {
            return Err(bad(format!(
                "bias = {bias:?} is not supported (only \"none\")"
            )));
        }
        if let Some(m) = json.get("modules_to_save").and_then(Value::as_array)
            && !m.is_empty()
        {
            return Err(bad("modules_to_save is not supported".into()));
        }
        let r = json
            .get("r")
            .and_then(Value::as_u64)
            .filter(|r| *r > 0)
            .ok_or_else(|| bad("key \"r\" must be a positive integer".into()))?
            as usize;
        let alpha = match json.get("lora_alpha") {
            None | Some(Value::Null) => r as f64,
            Some(v) => v
                .as_f64()
                .ok_or_else(|| bad(format!("lora_alpha must be a number, found {v}")))?,
        };
        let use_rslora = json
            .get("use_rslora")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let target_names = match json.get("target_modules") {
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|item| {
                        item.as_str().map(str::to_string).ok_or_else(|| {
                            bad(format!("target_modules entry {item} is not a string"))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            _ => None,
        };
        let target_parameters = match json.get("target_parameters") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str().map(str::to_string).ok_or_else(|| {
                        bad(format!("target_parameters entry {item} is not a string"))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(v) => return Err(bad(format!("target_parameters must be a list, found {v}"))),
        };
        if dense && !target_parameters.is_empty() {
            return Err(bad(format!(
                "target_parameters {target_parameters:?} is not supported on a dense Qwen3 base"
            )));
        }
        let target_modules = match json.get("target_modules") {
            _ if !dense => None,
            Some(Value::Array(items)) => {
                let mut modules = Vec::new();
                for item in items {
                    let name = item.as_str().ok_or_else(|| {
                        bad(format!("target_modules entry {item} is not a string"))
                    })?;
                    let m = Module::from_name(name).ok_or_else(|| {
                        bad(format!("target module {name:?} is not a Qwen3 linear layer (q/k/v/o/gate/up/down_proj)"))
                    })?;
                    modules.push(m);
                }
                Some(modules)
            }
            Some(Value::String(s)) if s == "all-linear" => Some(Module::ALL.to_vec()),
            _ => None, // a regex or absent: the tensors present are the truth
        };
        let layers_to_transform = match json.get("layers_to_transform") {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => Some(
                items
                    .iter()
                    .filter_map(Value::as_u64)
                    .map(|n| n as usize)
                    .collect(),
            ),
            Some(v) => v.as_u64().map(|n| vec![n as usize]),
        };
        let rank_pattern = patterns(&json, "rank_pattern", path)?
            .into_iter()
            .map(|(re, v)| {
                v.as_u64()
                    .filter(|r| *r > 0)
                    .map(|r| (re, r as usize))
                    .ok_or_else(|| bad(format!("rank_pattern value {v} is not a positive integer")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let alpha_pattern = patterns(&json, "alpha_pattern", path)?
            .into_iter()
            .map(|(re, v)| {
                v.as_f64()
                    .map(|a| (re, a))
                    .ok_or_else(|| bad(format!("alpha_pattern value {v} is not a number")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(AdapterSettings {
            path: path.to_path_buf(),
            r,
            alpha,
            use_rslora,
            target_modules,
            target_names,
            target_parameters,
            layers_to_transform,
            rank_pattern,
            alpha_pattern,
        })
    }

    pub(crate) fn transforms_layer(&self, layer: usize) -> bool {
        self.layers_to_transform
            .as_ref()
            .is_none_or(|l| l.contains(&layer))
    }

    pub(crate) fn rank_for(&self, module_path: &str) -> usize {
        self.rank_pattern
            .iter()
            .find(|(re, _)| re.is_match(module_path))
            .map_or(self.r, |(_, r)| *r)
    }

    /// PEFT's scaling: `alpha / r`, or `alpha / √r` with rsLoRA.
    pub(crate) fn scale_for(&self, module_path: &str, rank: usize) -> f32 {
        let alpha = self
            .alpha_pattern
            .iter()
            .find(|(re, _)| re.is_match(module_path))
            .map_or(self.alpha, |(_, a)| *a);
        let scale = if self.use_rslora {
            alpha / (rank as f64).sqrt()
        } else {
            alpha / rank as f64
        };
        scale as f32
    }
}

impl std::fmt::Debug for AdapterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AdapterSettings({})", self.path.display())
    }
}

/// PEFT matches a pattern key against a module's full name as `(.*\.)?KEY$`.
fn patterns(
    json: &Value,
    key: &str,
    path: &Path,
) -> Result<Vec<(regex::Regex, Value)>, EngineError> {
    let Some(map) = json.get(key).and_then(Value::as_object) else {
        return Ok(Vec::new());
    };
    map.iter()
        .map(|(pattern, value)| {
            regex::Regex::new(&format!(r"^(.*\.)?(?:{pattern})$"))
                .map(|re| (re, value.clone()))
                .map_err(|e| {
                    EngineError::adapter(
                        path,
                        format!("{key} key {pattern:?} is not a valid pattern: {e}"),
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_with_and_without_prefix_and_default() {
        for key in [
            "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight",
            "model.layers.3.self_attn.q_proj.lora_A.default.weight",
            "base_model.model.model.layers.3.self_attn.q_proj.lora_A.default.weight",
        ] {
            let p = parse_key(key).expect(key);
            assert_eq!((p.layer, p.module, p.is_a), (3, Module::Q, true));
        }
        let p =
            parse_key("base_model.model.model.layers.0.mlp.down_proj.lora_B.weight").expect("down");
        assert_eq!((p.layer, p.module, p.is_a), (0, Module::Down, false));
        assert!(parse_key("base_model.model.model.layers.0.mlp.q_proj.lora_A.weight").is_none());
        assert!(
            parse_key("base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector")
                .is_none()
        );
        assert!(parse_key("base_model.model.lm_head.weight").is_none());
    }
}
