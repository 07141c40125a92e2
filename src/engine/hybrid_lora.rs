//! PEFT LoRA adapters on a Qwen3.5-MoE base: every linear of both attention kinds, the shared
//! expert and its gate, the router and the fused routed experts (PEFT's `target_parameters`,
//! one LoRA over each expert stack, split here into one A/B pair per expert). Keys in the
//! causal-LM layout (`model.layers.N…`) and the multimodal one (`model.language_model.layers.N…`)
//! are both accepted; any other tensor is refused by name.

use std::path::{Path, PathBuf};

use super::config::{HybridConfig, LayerKind, ModelConfig};
use super::device::Device;
use super::error::EngineError;
use super::lora::{AdapterSettings, LoraPair, Tensor, adapter_weights};

/// A 2-D linear (or bare 2-D parameter) of a hybrid layer that LoRA can adapt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    Q,
    K,
    V,
    O,
    Qkv,
    Z,
    B,
    A,
    Out,
    SharedGate,
    SharedUp,
    SharedDown,
    SharedExpertGate,
    Router,
}

const TARGETS: [Target; 14] = [
    Target::Q,
    Target::K,
    Target::V,
    Target::O,
    Target::Qkv,
    Target::Z,
    Target::B,
    Target::A,
    Target::Out,
    Target::SharedGate,
    Target::SharedUp,
    Target::SharedDown,
    Target::SharedExpertGate,
    Target::Router,
];

impl Target {
    /// The module path inside a layer, as PEFT names it.
    pub fn path(self) -> &'static str {
        match self {
            Target::Q => "self_attn.q_proj",
            Target::K => "self_attn.k_proj",
            Target::V => "self_attn.v_proj",
            Target::O => "self_attn.o_proj",
            Target::Qkv => "linear_attn.in_proj_qkv",
            Target::Z => "linear_attn.in_proj_z",
            Target::B => "linear_attn.in_proj_b",
            Target::A => "linear_attn.in_proj_a",
            Target::Out => "linear_attn.out_proj",
            Target::SharedGate => "mlp.shared_expert.gate_proj",
            Target::SharedUp => "mlp.shared_expert.up_proj",
            Target::SharedDown => "mlp.shared_expert.down_proj",
            Target::SharedExpertGate => "mlp.shared_expert_gate",
            Target::Router => "mlp.gate",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The layer kind this module exists in (None: both).
    fn kind(self) -> Option<LayerKind> {
        match self {
            Target::Q | Target::K | Target::V | Target::O => Some(LayerKind::Full),
            Target::Qkv | Target::Z | Target::B | Target::A | Target::Out => {
                Some(LayerKind::Linear)
            }
            _ => None,
        }
    }

    /// `(in, out)` features of the base weight.
    pub fn dims(self, c: &ModelConfig, h: &HybridConfig) -> (usize, usize) {
        let hidden = c.hidden_size;
        match self {
            Target::Q => (hidden, 2 * c.q_dim()),
            Target::K | Target::V => (hidden, c.kv_dim()),
            Target::O => (c.q_dim(), hidden),
            Target::Qkv => (hidden, h.conv_dim()),
            Target::Z => (hidden, h.linear_value_dim()),
            Target::B | Target::A => (hidden, h.linear_value_heads),
            Target::Out => (h.linear_value_dim(), hidden),
            Target::SharedGate | Target::SharedUp => (hidden, h.shared_expert_intermediate_size),
            Target::SharedDown => (h.shared_expert_intermediate_size, hidden),
            Target::SharedExpertGate => (hidden, 1),
            Target::Router => (hidden, h.num_experts),
        }
    }
}

/// The two fused expert stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertStack {
    /// `mlp.experts.gate_up_proj` `[E, 2I, H]`.
    GateUp,
    /// `mlp.experts.down_proj` `[E, H, I]`.
    Down,
}

/// LoRA of one layer.
pub struct LayerLora<D: Device> {
    linears: [Option<LoraPair<D>>; 14],
    /// Per routed expert, for `gate_up_proj` and `down_proj`.
    pub gate_up: Option<Vec<LoraPair<D>>>,
    pub down: Option<Vec<LoraPair<D>>>,
}

/// One adapter on a hybrid base, resident on a device.
pub struct HybridLora<D: Device> {
    pub name: String,
    pub dir: PathBuf,
    layers: Vec<LayerLora<D>>,
    max_rank: usize,
}

/// A parsed adapter key.
enum Key {
    Linear(Target),
    /// An expert stack wrapper at this nesting depth (`base_layer.` count).
    Experts(usize),
}

/// `[base_model.model.]model.[language_model.]layers.N.<module>[.base_layer]*.lora_{A|B}[.default].weight`.
fn parse_key(key: &str) -> Option<(usize, Key, bool)> {
    let k = key.strip_prefix("base_model.model.").unwrap_or(key);
    let k = k.strip_prefix("model.")?;
    let k = k.strip_prefix("language_model.").unwrap_or(k);
    let rest = k.strip_prefix("layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, is_a) = if let Some(m) = rest
        .strip_suffix(".lora_A.weight")
        .or_else(|| rest.strip_suffix(".lora_A.default.weight"))
    {
        (m, true)
    } else {
        let m = rest
            .strip_suffix(".lora_B.weight")
            .or_else(|| rest.strip_suffix(".lora_B.default.weight"))?;
        (m, false)
    };
    if let Some(t) = TARGETS.into_iter().find(|t| t.path() == module) {
        return Some((layer, Key::Linear(t), is_a));
    }
    let mut m = module.strip_prefix("mlp.experts")?;
    let mut depth = 0;
    while let Some(r) = m.strip_prefix(".base_layer") {
        depth += 1;
        m = r;
    }
    m.is_empty().then_some((layer, Key::Experts(depth), is_a))
}

impl<D: Device> HybridLora<D> {
    pub fn pair(&self, layer: usize, t: Target) -> Option<&LoraPair<D>> {
        self.layers
            .get(layer)
            .and_then(|l| l.linears[t.index()].as_ref())
    }

    pub fn layer(&self, layer: usize) -> Option<&LayerLora<D>> {
        self.layers.get(layer)
    }

    pub fn max_rank(&self) -> usize {
        self.max_rank
    }

    pub fn bytes(&self, dev: &D) -> usize {
        let pair = |p: &LoraPair<D>| dev.matrix_bytes(&p.a) + dev.matrix_bytes(&p.b);
        self.layers
            .iter()
            .map(|l| {
                l.linears.iter().flatten().map(pair).sum::<usize>()
                    + l.gate_up.iter().flatten().map(pair).sum::<usize>()
                    + l.down.iter().flatten().map(pair).sum::<usize>()
            })
            .sum()
    }

    /// Reads the PEFT adapter in `dir` and checks it against the hybrid `config`.
    pub fn load(
        dev: &D,
        name: &str,
        dir: &Path,
        config: &ModelConfig,
    ) -> Result<HybridLora<D>, EngineError> {
        let Some(h) = config.hybrid.as_ref() else {
            return Err(EngineError::adapter(
                dir,
                "the base model is not a hybrid model",
            ));
        };
        let settings = AdapterSettings::load(&dir.join("adapter_config.json"), false)?;
        let (file, weights) = adapter_weights(dir)?;
        let layers_n = config.num_hidden_layers;
        // (A key, B key) per layer and target; expert wrappers by depth.
        type Slot = (Option<String>, Option<String>);
        let mut linears: Vec<Vec<Slot>> = vec![vec![(None, None); TARGETS.len()]; layers_n];
        let mut experts: Vec<Vec<Slot>> = vec![Vec::new(); layers_n];
        let mut names: Vec<&str> = weights.names().collect();
        names.sort_unstable();
        for key in names {
            let (layer, parsed, is_a) = parse_key(key).ok_or_else(|| {
                EngineError::adapter(
                    &file,
                    format!(
                        "tensor {key:?} is not a LoRA A/B weight of a Qwen3.5-MoE layer \
                         (attention, linear attention, shared expert, router, experts; \
                         DoRA, conv1d, embedding LoRA and modules_to_save are not supported)"
                    ),
                )
            })?;
            if layer >= layers_n {
                return Err(EngineError::adapter(
                    &file,
                    format!(
                        "tensor {key:?} is for layer {layer}, the base model has {layers_n} layers"
                    ),
                ));
            }
            let slot = match parsed {
                Key::Linear(t) => {
                    if let Some(kind) = t.kind()
                        && kind != h.layer_types[layer]
                    {
                        return Err(EngineError::adapter(
                            &file,
                            format!(
                                "tensor {key:?} adapts {} but layer {layer} is a {} layer",
                                t.path(),
                                match h.layer_types[layer] {
                                    LayerKind::Linear => "linear-attention",
                                    LayerKind::Full => "full-attention",
                                }
                            ),
                        ));
                    }
                    &mut linears[layer][t.index()]
                }
                Key::Experts(depth) => {
                    let e = &mut experts[layer];
                    if e.len() <= depth {
                        e.resize(depth + 1, (None, None));
                    }
                    &mut e[depth]
                }
            };
            let target = if is_a { &mut slot.0 } else { &mut slot.1 };
            if let Some(prev) = target {
                return Err(EngineError::adapter(
                    &file,
                    format!("tensors {prev:?} and {key:?} are the same weight"),
                ));
            }
            *target = Some(key.to_string());
        }
        let both = |slot: Slot| -> Result<Option<(String, String)>, EngineError> {
            match slot {
                (None, None) => Ok(None),
                (Some(a), Some(b)) => Ok(Some((a, b))),
                (Some(a), None) => Err(EngineError::MissingTensor {
                    path: file.clone(),
                    tensor: a.replace("lora_A", "lora_B"),
                }),
                (None, Some(b)) => Err(EngineError::MissingTensor {
                    path: file.clone(),
                    tensor: b.replace("lora_B", "lora_A"),
                }),
            }
        };
        // Every declared 2-D target must be present where it exists in a transformed layer
        // (PEFT applies layers_to_transform to target_modules, not to target_parameters).
        if let Some(declared) = &settings.target_names {
            for (layer, slots) in linears.iter().enumerate() {
                if !settings.transforms_layer(layer) {
                    continue;
                }
                for t in TARGETS {
                    let exists = t.kind().is_none_or(|k| k == h.layer_types[layer]);
                    let named = t != Target::Router
                        && declared
                            .iter()
                            .any(|d| t.path() == d || t.path().ends_with(&format!(".{d}")));
                    if exists && named && slots[t.index()].0.is_none() {
                        return Err(EngineError::MissingTensor {
                            path: file.clone(),
                            tensor: format!(
                                "base_model.model.model.layers.{layer}.{}.lora_A.weight",
                                t.path()
                            ),
                        });
                    }
                }
            }
        }
        let (hidden, inter, e_n) = (config.hidden_size, h.moe_intermediate_size, h.num_experts);
        let mut max_rank = 0;
        let mut out_layers = Vec::with_capacity(layers_n);
        for (layer, (lin, exp)) in linears.into_iter().zip(experts).enumerate() {
            let mut slots: [Option<LoraPair<D>>; 14] = Default::default();
            for (t, slot) in TARGETS.into_iter().zip(lin) {
                let Some((a_key, b_key)) = both(slot)? else {
                    continue;
                };
                let path = format!("model.layers.{layer}.{}", t.path());
                let rank = settings.rank_for(&path);
                let (fan_in, fan_out) = t.dims(config, h);
                let a = Tensor::load(dev, &weights, &a_key, &[rank, fan_in])?;
                let b = Tensor::load(dev, &weights, &b_key, &[fan_out, rank])?;
                let scale = settings.scale_for(&path, rank);
                max_rank = max_rank.max(rank);
                slots[t.index()] = Some(LoraPair::new(dev, a, b, (rank, fan_in, fan_out), scale)?);
            }
            let mut lora = LayerLora {
                linears: slots,
                gate_up: None,
                down: None,
            };
            for slot in exp {
                let Some((a_key, b_key)) = both(slot)? else {
                    continue;
                };
                // Which stack a wrapper adapts follows from its shapes alone: A is
                // [r·E, H] for gate_up and [r·E, I] for down, B is [2I, r·E] or [H, r·E];
                // both cannot match at once (that would need H = I = 2I).
                let a_shape = weights.shape(&a_key).unwrap_or(&[]).to_vec();
                let b_shape = weights.shape(&b_key).unwrap_or(&[]).to_vec();
                let fits = |fan_in: usize, fan_out: usize| {
                    a_shape.len() == 2
                        && b_shape.len() == 2
                        && a_shape[1] == fan_in
                        && b_shape[0] == fan_out
                        && a_shape[0] == b_shape[1]
                        && a_shape[0] % e_n == 0
                        && a_shape[0] > 0
                };
                let (stack, fan_in, fan_out) = if fits(hidden, 2 * inter) {
                    (ExpertStack::GateUp, hidden, 2 * inter)
                } else if fits(inter, hidden) {
                    (ExpertStack::Down, inter, hidden)
                } else {
                    return Err(EngineError::TensorShape {
                        path: file.clone(),
                        tensor: a_key.clone(),
                        found: a_shape,
                        expected: vec![settings.rank_for("mlp.experts") * e_n, hidden],
                    });
                };
                let param = match stack {
                    ExpertStack::GateUp => "experts.gate_up_proj",
                    ExpertStack::Down => "experts.down_proj",
                };
                // The config must say so too: a stray wrapper is a different adapter.
                if !settings
                    .target_parameters
                    .iter()
                    .any(|t| t.ends_with(param))
                {
                    return Err(EngineError::adapter(
                        &file,
                        format!(
                            "tensor {a_key:?} adapts mlp.{param}, which target_parameters {:?} does not name",
                            settings.target_parameters
                        ),
                    ));
                }
                let rank = a_shape[0] / e_n;
                let path = format!("model.layers.{layer}.mlp.experts");
                let a = Tensor::load(dev, &weights, &a_key, &[rank * e_n, fan_in])?;
                let b = Tensor::load(dev, &weights, &b_key, &[fan_out, rank * e_n])?;
                let scale = settings.scale_for(&path, rank);
                // PEFT: A rows are expert-major (row e·r + i), B columns rank-major (i·E + e).
                let mut pairs = Vec::with_capacity(e_n);
                for e in 0..e_n {
                    let ae = a.gather(rank * fan_in, |j| e * rank * fan_in + j);
                    let be = b.gather(fan_out * rank, |j| {
                        let (o, i) = (j / rank, j % rank);
                        o * rank * e_n + i * e_n + e
                    });
                    pairs.push(LoraPair::new(dev, ae, be, (rank, fan_in, fan_out), scale)?);
                }
                max_rank = max_rank.max(rank);
                let dst = match stack {
                    ExpertStack::GateUp => &mut lora.gate_up,
                    ExpertStack::Down => &mut lora.down,
                };
                if dst.is_some() {
                    return Err(EngineError::adapter(
                        &file,
                        format!("tensor {a_key:?} adapts an expert stack already adapted"),
                    ));
                }
                *dst = Some(pairs);
            }
            out_layers.push(lora);
        }
        if max_rank == 0 {
            return Err(EngineError::adapter(&file, "holds no LoRA weights"));
        }
        Ok(HybridLora {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            layers: out_layers,
            max_rank,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_both_layouts_and_nested_expert_wrappers() {
        for key in [
            "base_model.model.model.layers.2.linear_attn.in_proj_qkv.lora_A.weight",
            "base_model.model.model.language_model.layers.2.linear_attn.in_proj_qkv.lora_A.weight",
            "model.layers.2.linear_attn.in_proj_qkv.lora_A.default.weight",
        ] {
            let (l, k, a) = parse_key(key).expect(key);
            assert!(
                l == 2 && a && matches!(k, Key::Linear(Target::Qkv)),
                "{key}"
            );
        }
        let (_, k, a) =
            parse_key("base_model.model.model.layers.0.mlp.experts.base_layer.lora_B.weight")
                .expect("nested");
        assert!(!a && matches!(k, Key::Experts(1)));
        let (_, k, _) =
            parse_key("base_model.model.model.layers.0.mlp.gate.lora_A.weight").expect("router");
        assert!(matches!(k, Key::Linear(Target::Router)));
        for bad in [
            "base_model.model.model.layers.0.linear_attn.conv1d.lora_A.weight",
            "base_model.model.model.layers.0.mlp.experts.gate_up_proj.lora_A.weight",
            "base_model.model.model.visual.blocks.0.attn.qkv.lora_A.weight",
            "base_model.model.lm_head.lora_A.weight",
            "base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector",
        ] {
            assert!(parse_key(bad).is_none(), "{bad}");
        }
    }
}
