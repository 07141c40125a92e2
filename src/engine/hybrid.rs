//! Qwen3.5-MoE, written once against `HybridDevice`: Gated DeltaNet (linear attention with a
//! conv1d and a recurrent state per sequence) and gated full attention (q/gate interleaved per
//! head, q/k RMSNorm, partial RoPE, GQA over a KV cache), each followed by a sparse MoE block
//! (softmax router, top-k renormalised, fused-gate/up experts, a sigmoid-gated shared expert),
//! with unmerged LoRA on every linear, the router and the expert stacks.

use super::config::{HybridConfig, LayerKind, ModelConfig};
use super::device::{AttentionShape, DeltaShape, Device, HybridDevice, KvShape};
use super::error::EngineError;
use super::hybrid_lora::{HybridLora, LayerLora, Target};
use super::lora::LoraPair;
use super::model::{PREFILL_CHUNK, load_matrix, rope_inverse_frequencies};
use super::weights::WeightFiles;

struct Loader<'a, D: Device> {
    dev: &'a D,
    w: &'a WeightFiles,
    prefix: String,
}

impl<D: Device> Loader<'_, D> {
    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<D::Matrix, EngineError> {
        load_matrix(
            self.dev,
            self.w,
            &format!("{}{name}", self.prefix),
            rows,
            cols,
        )
    }

    /// A fused `[experts, rows, cols]` stack as one matrix per expert (bf16 kept as bf16).
    fn stack(
        &self,
        name: &str,
        experts: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<D::Matrix>, EngineError> {
        let name = format!("{}{name}", self.prefix);
        let shape = [experts, rows, cols];
        if self.dev.keeps_bf16()
            && let Some(parts) = self.w.load_bf16_parts(&name, &shape, experts)?
        {
            return parts
                .into_iter()
                .map(|e| self.dev.matrix_bf16(e, rows, cols))
                .collect();
        }
        self.w
            .load_f32_parts(&name, &shape, experts)?
            .into_iter()
            .map(|e| self.dev.matrix(e, rows, cols))
            .collect()
    }

    fn raw(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, EngineError> {
        self.w.load_f32(&format!("{}{name}", self.prefix), shape)
    }

    fn vector(&self, name: &str, len: usize) -> Result<D::Vector, EngineError> {
        self.dev.vector(self.raw(name, &[len])?)
    }

    /// A zero-centred RMSNorm weight, stored as `1 + w` (what the reference multiplies by).
    fn norm(&self, name: &str, len: usize) -> Result<D::Vector, EngineError> {
        let mut w = self.raw(name, &[len])?;
        w.iter_mut().for_each(|v| *v += 1.0);
        self.dev.vector(w)
    }
}

struct FullAttention<D: Device> {
    q_proj: D::Matrix, // [heads·2·head_dim, hidden]: query and gate interleaved per head
    k_proj: D::Matrix, // [kv_heads·head_dim, hidden]
    v_proj: D::Matrix,
    o_proj: D::Matrix, // [hidden, heads·head_dim]
    q_norm: D::Vector, // [head_dim], 1 + w
    k_norm: D::Vector,
}

struct LinearAttention<D: Device> {
    in_proj_qkv: D::Matrix, // [conv_dim, hidden]
    in_proj_z: D::Matrix,   // [value_dim, hidden]
    in_proj_b: D::Matrix,   // [value_heads, hidden]
    in_proj_a: D::Matrix,   // [value_heads, hidden]
    conv: D::Vector,        // [conv_dim, kernel]
    a_log: D::Vector,       // [value_heads]
    dt_bias: D::Vector,     // [value_heads]
    norm: D::Vector,        // [value_head_dim], plain w
    out_proj: D::Matrix,    // [hidden, value_dim]
}

enum Mixer<D: Device> {
    Full(FullAttention<D>),
    Linear(LinearAttention<D>),
}

struct Moe<D: Device> {
    router: D::Matrix,             // [experts, hidden]
    gate_up: Vec<D::Matrix>,       // per expert [2·inter, hidden]
    down: Vec<D::Matrix>,          // per expert [hidden, inter]
    shared_gate: D::Matrix,        // [shared, hidden]
    shared_up: D::Matrix,          // [shared, hidden]
    shared_down: D::Matrix,        // [hidden, shared]
    shared_expert_gate: D::Matrix, // [1, hidden]
}

struct Layer<D: Device> {
    input_layernorm: D::Vector,
    mixer: Mixer<D>,
    post_attention_layernorm: D::Vector,
    moe: Moe<D>,
}

/// The per-sequence state: KV of the full-attention layers, conv and recurrent state of the
/// linear-attention layers, and the tokens they hold.
pub struct HybridState<D: Device> {
    pub kv: D::Kv,
    pub conv: Vec<D::Buffer>,
    pub recurrent: Vec<D::Buffer>,
    pub tokens: Vec<u32>,
}

/// Activation buffers for chunks of up to `PREFILL_CHUNK` rows.
pub struct HybridWorkspace<D: Device> {
    x: D::Buffer,
    h: D::Buffer,
    wide: D::Buffer, // [n, max(2·q_dim, conv_dim)]
    q: D::Buffer,
    gate: D::Buffer,
    k: D::Buffer,
    v: D::Buffer,
    attn: D::Buffer, // [n, max(q_dim, value_dim)]
    z: D::Buffer,
    conv_out: D::Buffer,
    beta: D::Buffer,
    decay: D::Buffer,
    out: D::Buffer,
    shared_a: D::Buffer,
    shared_b: D::Buffer,
    shared_g: D::Buffer,
    router: D::Buffer,
    ex_in: D::Buffer,
    ex_gu: D::Buffer,
    ex_act: D::Buffer,
    ex_out: D::Buffer,
    lora_t: D::Buffer,
    last: D::Buffer,
    logits: D::Buffer,
    all_logits: Option<D::Buffer>,
    router_host: Vec<f32>,
    /// Per expert: (token rows, routing weights) of the current chunk.
    assign: Vec<(Vec<u32>, Vec<f32>)>,
}

/// The whole hybrid model.
pub struct Qwen35Moe<D: Device> {
    config: ModelConfig,
    h: HybridConfig,
    embed_tokens: D::Matrix,
    layers: Vec<Layer<D>>,
    norm: D::Vector,
    lm_head: Option<D::Matrix>,
    inv_freq: D::Vector, // [rotary_dim / 2]
    weight_bytes: usize,
}

fn linear<D: Device>(
    dev: &D,
    x: &D::Buffer,
    rows: usize,
    w: &D::Matrix,
    lora: Option<&LoraPair<D>>,
    scratch: &mut D::Buffer,
    out: &mut D::Buffer,
) {
    dev.matmul(x, rows, w, out);
    if let Some(p) = lora {
        dev.lora_add(x, rows, &p.a, &p.b, p.scale, scratch, out);
    }
}

impl<D: HybridDevice> Qwen35Moe<D> {
    /// Loads the text weights (under `model.language_model.` or `model.`; vision and MTP
    /// tensors are ignored), checking every shape against the config.
    pub fn load(
        dev: &D,
        config: &ModelConfig,
        w: &WeightFiles,
    ) -> Result<Qwen35Moe<D>, EngineError> {
        let c = config;
        let Some(h) = c.hybrid.clone() else {
            return Err(EngineError::config(w.label(), "not a hybrid model config"));
        };
        // The config's class says where the weights are; a text-only export of a multimodal
        // config (or the reverse) still loads.
        let prefix = ["model.language_model.", "model."]
            .into_iter()
            .find(|p| w.contains(&format!("{p}embed_tokens.weight")))
            .unwrap_or(h.weight_prefix.as_str())
            .to_string();
        let ld = Loader { dev, w, prefix };
        let hidden = c.hidden_size;
        let embed_tokens = ld.matrix("embed_tokens.weight", c.vocab_size, hidden)?;
        let (inter, shared, experts) = (
            h.moe_intermediate_size,
            h.shared_expert_intermediate_size,
            h.num_experts,
        );
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for (l, kind) in h.layer_types.iter().enumerate() {
            let p = format!("layers.{l}");
            let mixer = match kind {
                LayerKind::Full => Mixer::Full(FullAttention {
                    q_proj: ld.matrix(
                        &format!("{p}.self_attn.q_proj.weight"),
                        2 * c.q_dim(),
                        hidden,
                    )?,
                    k_proj: ld.matrix(
                        &format!("{p}.self_attn.k_proj.weight"),
                        c.kv_dim(),
                        hidden,
                    )?,
                    v_proj: ld.matrix(
                        &format!("{p}.self_attn.v_proj.weight"),
                        c.kv_dim(),
                        hidden,
                    )?,
                    o_proj: ld.matrix(
                        &format!("{p}.self_attn.o_proj.weight"),
                        hidden,
                        c.q_dim(),
                    )?,
                    q_norm: ld.norm(&format!("{p}.self_attn.q_norm.weight"), c.head_dim)?,
                    k_norm: ld.norm(&format!("{p}.self_attn.k_norm.weight"), c.head_dim)?,
                }),
                LayerKind::Linear => {
                    let a = format!("{p}.linear_attn");
                    let (conv_dim, vh) = (h.conv_dim(), h.linear_value_heads);
                    Mixer::Linear(LinearAttention {
                        in_proj_qkv: ld.matrix(
                            &format!("{a}.in_proj_qkv.weight"),
                            conv_dim,
                            hidden,
                        )?,
                        in_proj_z: ld.matrix(
                            &format!("{a}.in_proj_z.weight"),
                            h.linear_value_dim(),
                            hidden,
                        )?,
                        in_proj_b: ld.matrix(&format!("{a}.in_proj_b.weight"), vh, hidden)?,
                        in_proj_a: ld.matrix(&format!("{a}.in_proj_a.weight"), vh, hidden)?,
                        conv: dev.vector(
                            ld.raw(&format!("{a}.conv1d.weight"), &[conv_dim, 1, h.conv_kernel])?,
                        )?,
                        a_log: ld.vector(&format!("{a}.A_log"), vh)?,
                        dt_bias: ld.vector(&format!("{a}.dt_bias"), vh)?,
                        norm: ld.vector(&format!("{a}.norm.weight"), h.linear_value_head_dim)?,
                        out_proj: ld.matrix(
                            &format!("{a}.out_proj.weight"),
                            hidden,
                            h.linear_value_dim(),
                        )?,
                    })
                }
            };
            let m = format!("{p}.mlp");
            let gate_up = ld.stack(
                &format!("{m}.experts.gate_up_proj"),
                experts,
                2 * inter,
                hidden,
            )?;
            let down = ld.stack(&format!("{m}.experts.down_proj"), experts, hidden, inter)?;
            let moe = Moe {
                router: ld.matrix(&format!("{m}.gate.weight"), experts, hidden)?,
                gate_up,
                down,
                shared_gate: ld.matrix(
                    &format!("{m}.shared_expert.gate_proj.weight"),
                    shared,
                    hidden,
                )?,
                shared_up: ld.matrix(
                    &format!("{m}.shared_expert.up_proj.weight"),
                    shared,
                    hidden,
                )?,
                shared_down: ld.matrix(
                    &format!("{m}.shared_expert.down_proj.weight"),
                    hidden,
                    shared,
                )?,
                shared_expert_gate: ld.matrix(
                    &format!("{m}.shared_expert_gate.weight"),
                    1,
                    hidden,
                )?,
            };
            layers.push(Layer {
                input_layernorm: ld.norm(&format!("{p}.input_layernorm.weight"), hidden)?,
                mixer,
                post_attention_layernorm: ld
                    .norm(&format!("{p}.post_attention_layernorm.weight"), hidden)?,
                moe,
            });
        }
        let norm = ld.norm("norm.weight", hidden)?;
        let lm_head = if !c.tie_word_embeddings || w.contains("lm_head.weight") {
            Some(load_matrix(dev, w, "lm_head.weight", c.vocab_size, hidden)?)
        } else {
            None
        };
        let inv_freq = dev.vector(rope_inverse_frequencies(h.rotary_dim, c.rope_theta))?;
        let mut model = Qwen35Moe {
            config: c.clone(),
            h,
            embed_tokens,
            layers,
            norm,
            lm_head,
            inv_freq,
            weight_bytes: 0,
        };
        model.weight_bytes = model.count_bytes(dev);
        Ok(model)
    }

    fn count_bytes(&self, dev: &D) -> usize {
        let m = |x: &D::Matrix| dev.matrix_bytes(x);
        let mut total = m(&self.embed_tokens) + self.lm_head.as_ref().map_or(0, m);
        for l in &self.layers {
            total += match &l.mixer {
                Mixer::Full(a) => m(&a.q_proj) + m(&a.k_proj) + m(&a.v_proj) + m(&a.o_proj),
                Mixer::Linear(a) => {
                    m(&a.in_proj_qkv)
                        + m(&a.in_proj_z)
                        + m(&a.in_proj_b)
                        + m(&a.in_proj_a)
                        + m(&a.out_proj)
                }
            };
            let e = &l.moe;
            total += m(&e.router)
                + e.gate_up.iter().map(m).sum::<usize>()
                + e.down.iter().map(m).sum::<usize>()
                + m(&e.shared_gate)
                + m(&e.shared_up)
                + m(&e.shared_down)
                + m(&e.shared_expert_gate);
        }
        total
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn weight_bytes(&self) -> usize {
        self.weight_bytes
    }

    fn kv_shape(&self) -> KvShape {
        KvShape {
            layers: self.h.full_layers(),
            kv_dim: self.config.kv_dim(),
        }
    }

    fn delta_shape(&self) -> DeltaShape {
        DeltaShape {
            key_heads: self.h.linear_key_heads,
            value_heads: self.h.linear_value_heads,
            key_dim: self.h.linear_key_head_dim,
            value_dim: self.h.linear_value_head_dim,
        }
    }

    fn conv_len(&self) -> usize {
        self.h.conv_dim() * (self.h.conv_kernel - 1)
    }

    /// A fresh (empty) sequence state with KV room for `capacity` positions.
    pub fn new_state(&self, dev: &D, capacity: usize) -> Result<HybridState<D>, EngineError> {
        let n = self.h.linear_layers();
        Ok(HybridState {
            kv: dev.kv_alloc(self.kv_shape(), capacity.max(1))?,
            conv: (0..n)
                .map(|_| dev.buffer(self.conv_len()))
                .collect::<Result<_, _>>()?,
            recurrent: (0..n)
                .map(|_| dev.buffer(self.delta_shape().state_len()))
                .collect::<Result<_, _>>()?,
            tokens: Vec::new(),
        })
    }

    /// Makes room for `capacity` positions in a state's KV.
    pub fn reserve(
        &self,
        dev: &D,
        s: &mut HybridState<D>,
        capacity: usize,
    ) -> Result<(), EngineError> {
        if dev.kv_capacity(&s.kv) < capacity {
            dev.kv_grow(&mut s.kv, capacity)?;
        }
        Ok(())
    }

    /// Bytes a state holds on the device.
    pub fn state_bytes(&self, dev: &D, s: &HybridState<D>) -> usize {
        let n = self.h.linear_layers();
        dev.kv_bytes(&s.kv)
            + n * (dev.buffer_bytes(self.conv_len())
                + dev.buffer_bytes(self.delta_shape().state_len()))
    }

    pub fn workspace(&self, dev: &D, max_rank: usize) -> Result<HybridWorkspace<D>, EngineError> {
        let c = &self.config;
        let h = &self.h;
        let n = PREFILL_CHUNK;
        let b = |len: usize| dev.buffer(n * len);
        Ok(HybridWorkspace {
            x: b(c.hidden_size)?,
            h: b(c.hidden_size)?,
            wide: b((2 * c.q_dim()).max(h.conv_dim()))?,
            q: b(c.q_dim())?,
            gate: b(c.q_dim())?,
            k: b(c.kv_dim())?,
            v: b(c.kv_dim())?,
            attn: b(c.q_dim().max(h.linear_value_dim()))?,
            z: b(h.linear_value_dim())?,
            conv_out: b(h.conv_dim())?,
            beta: b(h.linear_value_heads)?,
            decay: b(h.linear_value_heads)?,
            out: b(c.hidden_size)?,
            shared_a: b(h.shared_expert_intermediate_size)?,
            shared_b: b(h.shared_expert_intermediate_size)?,
            shared_g: b(1)?,
            router: b(h.num_experts)?,
            ex_in: b(c.hidden_size)?,
            ex_gu: b(2 * h.moe_intermediate_size)?,
            ex_act: b(h.moe_intermediate_size)?,
            ex_out: b(c.hidden_size)?,
            lora_t: b(max_rank.max(1))?,
            last: dev.buffer(c.hidden_size)?,
            logits: dev.buffer(c.vocab_size)?,
            all_logits: None,
            router_host: Vec::new(),
            assign: vec![(Vec::new(), Vec::new()); h.num_experts],
        })
    }

    /// Runs `tokens` (at most `PREFILL_CHUNK`) at positions `state.tokens.len()..` through the
    /// model, advancing `state`; leaves the final-normed hidden states in the workspace. The
    /// caller has checked ids and reserved KV capacity.
    pub fn forward(
        &self,
        dev: &D,
        ws: &mut HybridWorkspace<D>,
        state: &mut HybridState<D>,
        tokens: &[u32],
        adapter: Option<&HybridLora<D>>,
    ) -> Result<(), EngineError> {
        let c = &self.config;
        let n = tokens.len();
        let start = state.tokens.len();
        let eps = c.rms_norm_eps as f32;
        let hidden = c.hidden_size;
        dev.embed(&self.embed_tokens, tokens, &mut ws.x);
        for (l, layer) in self.layers.iter().enumerate() {
            let lora = |t: Target| adapter.and_then(|a| a.pair(l, t));
            dev.rms_norm(&ws.x, &layer.input_layernorm, n, hidden, eps, &mut ws.h);
            match &layer.mixer {
                Mixer::Full(a) => {
                    let slot = self.h.kv_slot(l).unwrap_or(0);
                    let shape = AttentionShape {
                        heads: c.num_attention_heads,
                        kv_heads: c.num_key_value_heads,
                        head_dim: c.head_dim,
                    };
                    linear(
                        dev,
                        &ws.h,
                        n,
                        &a.q_proj,
                        lora(Target::Q),
                        &mut ws.lora_t,
                        &mut ws.wide,
                    );
                    dev.split_halves(
                        &ws.wide,
                        n,
                        shape.heads,
                        c.head_dim,
                        &mut ws.q,
                        &mut ws.gate,
                    );
                    linear(
                        dev,
                        &ws.h,
                        n,
                        &a.k_proj,
                        lora(Target::K),
                        &mut ws.lora_t,
                        &mut ws.k,
                    );
                    linear(
                        dev,
                        &ws.h,
                        n,
                        &a.v_proj,
                        lora(Target::V),
                        &mut ws.lora_t,
                        &mut ws.v,
                    );
                    dev.rms_norm_in_place(&mut ws.q, &a.q_norm, n * shape.heads, c.head_dim, eps);
                    dev.rms_norm_in_place(
                        &mut ws.k,
                        &a.k_norm,
                        n * shape.kv_heads,
                        c.head_dim,
                        eps,
                    );
                    let rd = self.h.rotary_dim;
                    dev.rope_partial(
                        &mut ws.q,
                        n,
                        shape.heads,
                        c.head_dim,
                        rd,
                        start,
                        &self.inv_freq,
                    );
                    dev.rope_partial(
                        &mut ws.k,
                        n,
                        shape.kv_heads,
                        c.head_dim,
                        rd,
                        start,
                        &self.inv_freq,
                    );
                    dev.kv_write(&mut state.kv, slot, start, n, &ws.k, &ws.v);
                    dev.attention(&ws.q, &state.kv, slot, n, start, shape, &mut ws.attn);
                    dev.sigmoid_mul(&mut ws.attn, &ws.gate, n * c.q_dim());
                    linear(
                        dev,
                        &ws.attn,
                        n,
                        &a.o_proj,
                        lora(Target::O),
                        &mut ws.lora_t,
                        &mut ws.out,
                    );
                }
                Mixer::Linear(a) => {
                    let slot = self.h.state_slot(l).unwrap_or(0);
                    let h = &self.h;
                    linear(
                        dev,
                        &ws.h,
                        n,
                        &a.in_proj_qkv,
                        lora(Target::Qkv),
                        &mut ws.lora_t,
                        &mut ws.wide,
                    );
                    linear(
                        dev,
                        &ws.h,
                        n,
                        &a.in_proj_z,
                        lora(Target::Z),
                        &mut ws.lora_t,
                        &mut ws.z,
                    );
                    linear(
                        dev,
                        &ws.h,
                        n,
                        &a.in_proj_b,
                        lora(Target::B),
                        &mut ws.lora_t,
                        &mut ws.beta,
                    );
                    linear(
                        dev,
                        &ws.h,
                        n,
                        &a.in_proj_a,
                        lora(Target::A),
                        &mut ws.lora_t,
                        &mut ws.decay,
                    );
                    dev.conv1d_silu(
                        &ws.wide,
                        n,
                        h.conv_dim(),
                        h.conv_kernel,
                        &a.conv,
                        &mut state.conv[slot],
                        &mut ws.conv_out,
                    );
                    dev.gated_delta_rule(
                        &ws.conv_out,
                        &ws.beta,
                        &ws.decay,
                        n,
                        self.delta_shape(),
                        &a.a_log,
                        &a.dt_bias,
                        &mut state.recurrent[slot],
                        &mut ws.attn,
                    );
                    dev.gated_rms_norm(
                        &mut ws.attn,
                        &ws.z,
                        &a.norm,
                        n * h.linear_value_heads,
                        h.linear_value_head_dim,
                        eps,
                    );
                    linear(
                        dev,
                        &ws.attn,
                        n,
                        &a.out_proj,
                        lora(Target::Out),
                        &mut ws.lora_t,
                        &mut ws.out,
                    );
                }
            }
            dev.add(&mut ws.x, &ws.out, n * hidden);
            dev.rms_norm(
                &ws.x,
                &layer.post_attention_layernorm,
                n,
                hidden,
                eps,
                &mut ws.h,
            );
            self.moe(
                dev,
                ws,
                &layer.moe,
                n,
                adapter.and_then(|a| a.layer(l)),
                l,
                adapter,
            )?;
        }
        dev.rms_norm(&ws.x, &self.norm, n, hidden, eps, &mut ws.h);
        state.tokens.extend_from_slice(tokens);
        Ok(())
    }

    /// The sparse MoE block on `ws.h`, added into the residual `ws.x`.
    #[allow(clippy::too_many_arguments)]
    fn moe(
        &self,
        dev: &D,
        ws: &mut HybridWorkspace<D>,
        m: &Moe<D>,
        n: usize,
        layer_lora: Option<&LayerLora<D>>,
        l: usize,
        adapter: Option<&HybridLora<D>>,
    ) -> Result<(), EngineError> {
        let hidden = self.config.hidden_size;
        let h = &self.h;
        let lora = |t: Target| adapter.and_then(|a| a.pair(l, t));
        // Shared expert, scaled by its sigmoid gate.
        linear(
            dev,
            &ws.h,
            n,
            &m.shared_gate,
            lora(Target::SharedGate),
            &mut ws.lora_t,
            &mut ws.shared_a,
        );
        linear(
            dev,
            &ws.h,
            n,
            &m.shared_up,
            lora(Target::SharedUp),
            &mut ws.lora_t,
            &mut ws.shared_b,
        );
        dev.silu_mul(
            &mut ws.shared_a,
            &ws.shared_b,
            n * h.shared_expert_intermediate_size,
        );
        linear(
            dev,
            &ws.shared_a,
            n,
            &m.shared_down,
            lora(Target::SharedDown),
            &mut ws.lora_t,
            &mut ws.out,
        );
        linear(
            dev,
            &ws.h,
            n,
            &m.shared_expert_gate,
            lora(Target::SharedExpertGate),
            &mut ws.lora_t,
            &mut ws.shared_g,
        );
        dev.add_sigmoid_scaled(&mut ws.x, &ws.out, &ws.shared_g, n, hidden);
        // Router: softmax over all experts in f32, top-k, renormalised over the k.
        linear(
            dev,
            &ws.h,
            n,
            &m.router,
            lora(Target::Router),
            &mut ws.lora_t,
            &mut ws.router,
        );
        let e_n = h.num_experts;
        dev.read(&ws.router, n * e_n, &mut ws.router_host)?;
        for (rows, weights) in &mut ws.assign {
            rows.clear();
            weights.clear();
        }
        let mut order: Vec<usize> = Vec::with_capacity(e_n);
        let mut probs = vec![0f32; e_n];
        for r in 0..n {
            let logits = &ws.router_host[r * e_n..(r + 1) * e_n];
            let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mut sum = 0f32;
            for (p, v) in probs.iter_mut().zip(logits) {
                *p = (v - max).exp();
                sum += *p;
            }
            probs.iter_mut().for_each(|p| *p /= sum);
            order.clear();
            order.extend(0..e_n);
            // Highest first; equal probabilities keep the lower index first, as torch.topk.
            order.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
            let top = &order[..h.experts_per_token];
            let total: f32 = top.iter().map(|&e| probs[e]).sum();
            for &e in top {
                ws.assign[e].0.push(r as u32);
                ws.assign[e].1.push(probs[e] / total);
            }
        }
        let inter = h.moe_intermediate_size;
        for e in 0..e_n {
            let (rows, weights) = std::mem::take(&mut ws.assign[e]);
            if !rows.is_empty() {
                let k = rows.len();
                dev.gather_rows(&ws.h, hidden, &rows, &mut ws.ex_in);
                let gu = layer_lora.and_then(|x| x.gate_up.as_ref()).map(|v| &v[e]);
                linear(
                    dev,
                    &ws.ex_in,
                    k,
                    &m.gate_up[e],
                    gu,
                    &mut ws.lora_t,
                    &mut ws.ex_gu,
                );
                dev.silu_mul_halves(&ws.ex_gu, k, inter, &mut ws.ex_act);
                let dn = layer_lora.and_then(|x| x.down.as_ref()).map(|v| &v[e]);
                linear(
                    dev,
                    &ws.ex_act,
                    k,
                    &m.down[e],
                    dn,
                    &mut ws.lora_t,
                    &mut ws.ex_out,
                );
                dev.scatter_add_rows(&ws.ex_out, hidden, &rows, &weights, &mut ws.x);
            }
            ws.assign[e] = (rows, weights);
        }
        Ok(())
    }

    fn head(&self) -> &D::Matrix {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Logits of row `row` of the last `forward`, read back to the host.
    pub fn logits_of_row(
        &self,
        dev: &D,
        ws: &mut HybridWorkspace<D>,
        row: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), EngineError> {
        let hidden = self.config.hidden_size;
        dev.copy(&ws.h, row * hidden, hidden, &mut ws.last);
        dev.matmul(&ws.last, 1, self.head(), &mut ws.logits);
        dev.read(&ws.logits, self.config.vocab_size, out)
    }

    /// Logits of the first `rows` rows of the last `forward`, appended row by row.
    pub fn logits_of_rows(
        &self,
        dev: &D,
        ws: &mut HybridWorkspace<D>,
        rows: usize,
        out: &mut Vec<Vec<f32>>,
    ) -> Result<(), EngineError> {
        let vocab = self.config.vocab_size;
        if ws.all_logits.is_none() {
            ws.all_logits = Some(dev.buffer(PREFILL_CHUNK * vocab)?);
        }
        let Some(all) = ws.all_logits.as_mut() else {
            return Ok(());
        };
        dev.matmul(&ws.h, rows, self.head(), all);
        let mut host = Vec::new();
        dev.read(all, rows * vocab, &mut host)?;
        out.extend(host.chunks_exact(vocab).map(<[f32]>::to_vec));
        Ok(())
    }

    /// A copy of a state (prefix snapshots).
    pub fn snapshot(
        &self,
        dev: &D,
        s: &HybridState<D>,
        capacity: usize,
    ) -> Result<HybridState<D>, EngineError> {
        Ok(HybridState {
            kv: dev.kv_copy_prefix(&s.kv, s.tokens.len(), capacity.max(s.tokens.len()).max(1))?,
            conv: s
                .conv
                .iter()
                .map(|b| dev.duplicate(b, self.conv_len()))
                .collect::<Result<_, _>>()?,
            recurrent: s
                .recurrent
                .iter()
                .map(|b| dev.duplicate(b, self.delta_shape().state_len()))
                .collect::<Result<_, _>>()?,
            tokens: s.tokens.clone(),
        })
    }
}
