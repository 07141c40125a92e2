//! The Qwen3 dense transformer, written once against the `Device` trait: embeddings, RMSNorm,
//! GQA attention with per-head q/k RMSNorm and RoPE, SwiGLU MLP, tied or untied LM head, and
//! unmerged LoRA on any of the seven linear modules.

use super::config::ModelConfig;
use super::device::{AttentionShape, Device, KvShape};
use super::error::EngineError;
use super::lora::{LoraAdapter, Module};
use super::weights::WeightFiles;

/// Rows (tokens) processed per forward chunk during prefill: large enough for efficient GEMMs,
/// small enough that activations stay a few MB.
pub const PREFILL_CHUNK: usize = 256;

/// Loads `name` as a device matrix `[rows, cols]`, kept in bf16 when it is stored so and the
/// device keeps bf16.
pub(crate) fn load_matrix<D: Device>(
    dev: &D,
    w: &WeightFiles,
    name: &str,
    rows: usize,
    cols: usize,
) -> Result<D::Matrix, EngineError> {
    if dev.keeps_bf16()
        && let Some(bits) = w.load_bf16(name, &[rows, cols])?
    {
        return dev.matrix_bf16(bits, rows, cols);
    }
    dev.matrix(w.load_f32(name, &[rows, cols])?, rows, cols)
}

fn load_vector<D: Device>(
    dev: &D,
    w: &WeightFiles,
    name: &str,
    len: usize,
) -> Result<D::Vector, EngineError> {
    dev.vector(w.load_f32(name, &[len])?)
}

/// Self-attention of one layer.
struct Attention<D: Device> {
    q_proj: D::Matrix, // [heads·head_dim, hidden]
    k_proj: D::Matrix, // [kv_heads·head_dim, hidden]
    v_proj: D::Matrix, // [kv_heads·head_dim, hidden]
    o_proj: D::Matrix, // [hidden, heads·head_dim]
    q_norm: D::Vector, // [head_dim]
    k_norm: D::Vector, // [head_dim]
}

/// The SwiGLU feed-forward of one layer.
struct Mlp<D: Device> {
    gate_proj: D::Matrix, // [intermediate, hidden]
    up_proj: D::Matrix,   // [intermediate, hidden]
    down_proj: D::Matrix, // [hidden, intermediate]
}

/// One decoder layer.
struct DecoderLayer<D: Device> {
    input_layernorm: D::Vector, // [hidden]
    attn: Attention<D>,
    post_attention_layernorm: D::Vector, // [hidden]
    mlp: Mlp<D>,
}

/// Activation buffers, allocated once for `PREFILL_CHUNK` rows and reused by every step.
pub struct Workspace<D: Device> {
    x: D::Buffer,      // [chunk, hidden]   residual stream
    h: D::Buffer,      // [chunk, hidden]   normed input of a block
    q: D::Buffer,      // [chunk, q_dim]
    k: D::Buffer,      // [chunk, kv_dim]
    v: D::Buffer,      // [chunk, kv_dim]
    attn: D::Buffer,   // [chunk, q_dim]
    out: D::Buffer,    // [chunk, hidden]   block output before the residual add
    gate: D::Buffer,   // [chunk, intermediate]
    up: D::Buffer,     // [chunk, intermediate]
    lora_t: D::Buffer, // [chunk, max rank]
    last: D::Buffer,   // [1, hidden]       final hidden state of the last row
    logits: D::Buffer, // [1, vocab]
    /// `[chunk, vocab]`, only for callers that want every position's logits.
    all_logits: Option<D::Buffer>,
}

/// The whole model.
pub struct Qwen3<D: Device> {
    config: ModelConfig,
    embed_tokens: D::Matrix, // [vocab, hidden]
    layers: Vec<DecoderLayer<D>>,
    norm: D::Vector,            // [hidden]
    lm_head: Option<D::Matrix>, // [vocab, hidden]; None = tied to embed_tokens
    inv_freq: D::Vector,        // [head_dim / 2]
}

impl<D: Device> Qwen3<D> {
    /// Loads the base weights in HF names; every tensor's shape is checked against `config`.
    pub fn load(dev: &D, config: &ModelConfig, w: &WeightFiles) -> Result<Qwen3<D>, EngineError> {
        let c = config;
        let (hidden, inter) = (c.hidden_size, c.intermediate_size);
        let embed_tokens = load_matrix(dev, w, "model.embed_tokens.weight", c.vocab_size, hidden)?;
        let mut layers = Vec::with_capacity(c.num_hidden_layers);
        for l in 0..c.num_hidden_layers {
            let p = format!("model.layers.{l}");
            layers.push(DecoderLayer {
                input_layernorm: load_vector(
                    dev,
                    w,
                    &format!("{p}.input_layernorm.weight"),
                    hidden,
                )?,
                attn: Attention {
                    q_proj: load_matrix(
                        dev,
                        w,
                        &format!("{p}.self_attn.q_proj.weight"),
                        c.q_dim(),
                        hidden,
                    )?,
                    k_proj: load_matrix(
                        dev,
                        w,
                        &format!("{p}.self_attn.k_proj.weight"),
                        c.kv_dim(),
                        hidden,
                    )?,
                    v_proj: load_matrix(
                        dev,
                        w,
                        &format!("{p}.self_attn.v_proj.weight"),
                        c.kv_dim(),
                        hidden,
                    )?,
                    o_proj: load_matrix(
                        dev,
                        w,
                        &format!("{p}.self_attn.o_proj.weight"),
                        hidden,
                        c.q_dim(),
                    )?,
                    q_norm: load_vector(
                        dev,
                        w,
                        &format!("{p}.self_attn.q_norm.weight"),
                        c.head_dim,
                    )?,
                    k_norm: load_vector(
                        dev,
                        w,
                        &format!("{p}.self_attn.k_norm.weight"),
                        c.head_dim,
                    )?,
                },
                post_attention_layernorm: load_vector(
                    dev,
                    w,
                    &format!("{p}.post_attention_layernorm.weight"),
                    hidden,
                )?,
                mlp: Mlp {
                    gate_proj: load_matrix(
                        dev,
                        w,
                        &format!("{p}.mlp.gate_proj.weight"),
                        inter,
                        hidden,
                    )?,
                    up_proj: load_matrix(
                        dev,
                        w,
                        &format!("{p}.mlp.up_proj.weight"),
                        inter,
                        hidden,
                    )?,
                    down_proj: load_matrix(
                        dev,
                        w,
                        &format!("{p}.mlp.down_proj.weight"),
                        hidden,
                        inter,
                    )?,
                },
            });
        }
        let norm = load_vector(dev, w, "model.norm.weight", hidden)?;
        // Some tied checkpoints still carry lm_head.weight; an untied one must.
        let lm_head = if !c.tie_word_embeddings || w.contains("lm_head.weight") {
            Some(load_matrix(dev, w, "lm_head.weight", c.vocab_size, hidden)?)
        } else {
            None
        };
        let inv_freq = dev.vector(rope_inverse_frequencies(c.head_dim, c.rope_theta))?;
        Ok(Qwen3 {
            config: config.clone(),
            embed_tokens,
            layers,
            norm,
            lm_head,
            inv_freq,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The geometry of one sequence's KV storage.
    pub fn kv_shape(&self) -> KvShape {
        KvShape {
            layers: self.config.num_hidden_layers,
            kv_dim: self.config.kv_dim(),
        }
    }

    /// Bytes of all base weights on the device.
    pub fn weight_bytes(&self, dev: &D) -> usize {
        let m = |x: &D::Matrix| dev.matrix_bytes(x);
        let c = &self.config;
        let vectors = 4
            * (c.hidden_size * (2 * c.num_hidden_layers + 1)
                + 2 * c.head_dim * c.num_hidden_layers);
        m(&self.embed_tokens)
            + self.lm_head.as_ref().map_or(0, m)
            + self
                .layers
                .iter()
                .map(|l| {
                    m(&l.attn.q_proj)
                        + m(&l.attn.k_proj)
                        + m(&l.attn.v_proj)
                        + m(&l.attn.o_proj)
                        + m(&l.mlp.gate_proj)
                        + m(&l.mlp.up_proj)
                        + m(&l.mlp.down_proj)
                })
                .sum::<usize>()
            + vectors
    }

    /// Buffers for chunks of up to `PREFILL_CHUNK` rows and adapters of rank ≤ `max_rank`.
    pub fn workspace(&self, dev: &D, max_rank: usize) -> Result<Workspace<D>, EngineError> {
        let c = &self.config;
        let n = PREFILL_CHUNK;
        Ok(Workspace {
            x: dev.buffer(n * c.hidden_size)?,
            h: dev.buffer(n * c.hidden_size)?,
            q: dev.buffer(n * c.q_dim())?,
            k: dev.buffer(n * c.kv_dim())?,
            v: dev.buffer(n * c.kv_dim())?,
            attn: dev.buffer(n * c.q_dim())?,
            out: dev.buffer(n * c.hidden_size)?,
            gate: dev.buffer(n * c.intermediate_size)?,
            up: dev.buffer(n * c.intermediate_size)?,
            lora_t: dev.buffer(n * max_rank.max(1))?,
            last: dev.buffer(c.hidden_size)?,
            logits: dev.buffer(c.vocab_size)?,
            all_logits: None,
        })
    }

    /// Runs `tokens` (at most `PREFILL_CHUNK`, positions `start..`) through the model, writing
    /// their K/V into `kv`; leaves the final-normed hidden states in the workspace.
    /// Token ids and capacity are checked by the caller.
    pub fn forward(
        &self,
        dev: &D,
        ws: &mut Workspace<D>,
        kv: &mut D::Kv,
        start: usize,
        tokens: &[u32],
        adapter: Option<&LoraAdapter<D>>,
    ) {
        let c = &self.config;
        let n = tokens.len();
        let eps = c.rms_norm_eps as f32;
        let shape = AttentionShape {
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
        };
        dev.embed(&self.embed_tokens, tokens, &mut ws.x); // x: [n, hidden]
        for (l, layer) in self.layers.iter().enumerate() {
            let lora = |m: Module| adapter.and_then(|a| a.pair(l, m));
            let a = &layer.attn;
            // Attention block.
            dev.rms_norm(
                &ws.x,
                &layer.input_layernorm,
                n,
                c.hidden_size,
                eps,
                &mut ws.h,
            ); // h: [n, hidden]
            linear(
                dev,
                &ws.h,
                n,
                &a.q_proj,
                lora(Module::Q),
                &mut ws.lora_t,
                &mut ws.q,
            ); // q: [n, heads·hd]
            linear(
                dev,
                &ws.h,
                n,
                &a.k_proj,
                lora(Module::K),
                &mut ws.lora_t,
                &mut ws.k,
            ); // k: [n, kv_heads·hd]
            linear(
                dev,
                &ws.h,
                n,
                &a.v_proj,
                lora(Module::V),
                &mut ws.lora_t,
                &mut ws.v,
            ); // v: [n, kv_heads·hd]
            dev.rms_norm_in_place(&mut ws.q, &a.q_norm, n * shape.heads, c.head_dim, eps); // per head
            dev.rms_norm_in_place(&mut ws.k, &a.k_norm, n * shape.kv_heads, c.head_dim, eps);
            dev.rope(&mut ws.q, n, shape.heads, c.head_dim, start, &self.inv_freq);
            dev.rope(
                &mut ws.k,
                n,
                shape.kv_heads,
                c.head_dim,
                start,
                &self.inv_freq,
            );
            dev.kv_write(kv, l, start, n, &ws.k, &ws.v); // kv[l][start..start+n]
            dev.attention(&ws.q, kv, l, n, start, shape, &mut ws.attn); // attn: [n, heads·hd]
            linear(
                dev,
                &ws.attn,
                n,
                &a.o_proj,
                lora(Module::O),
                &mut ws.lora_t,
                &mut ws.out,
            ); // out: [n, hidden]
            dev.add(&mut ws.x, &ws.out, n * c.hidden_size);
            // MLP block: down(silu(gate(h)) · up(h)).
            let m = &layer.mlp;
            dev.rms_norm(
                &ws.x,
                &layer.post_attention_layernorm,
                n,
                c.hidden_size,
                eps,
                &mut ws.h,
            );
            linear(
                dev,
                &ws.h,
                n,
                &m.gate_proj,
                lora(Module::Gate),
                &mut ws.lora_t,
                &mut ws.gate,
            ); // [n, inter]
            linear(
                dev,
                &ws.h,
                n,
                &m.up_proj,
                lora(Module::Up),
                &mut ws.lora_t,
                &mut ws.up,
            ); // [n, inter]
            dev.silu_mul(&mut ws.gate, &ws.up, n * c.intermediate_size);
            linear(
                dev,
                &ws.gate,
                n,
                &m.down_proj,
                lora(Module::Down),
                &mut ws.lora_t,
                &mut ws.out,
            ); // [n, hidden]
            dev.add(&mut ws.x, &ws.out, n * c.hidden_size);
        }
        dev.rms_norm(&ws.x, &self.norm, n, c.hidden_size, eps, &mut ws.h); // h: [n, hidden]
    }

    fn head(&self) -> &D::Matrix {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }

    /// Logits of row `row` of the last `forward`, read back to the host.
    pub fn logits_of_row(
        &self,
        dev: &D,
        ws: &mut Workspace<D>,
        row: usize,
        out: &mut Vec<f32>,
    ) -> Result<(), EngineError> {
        let hidden = self.config.hidden_size;
        dev.copy(&ws.h, row * hidden, hidden, &mut ws.last); // last: [1, hidden]
        dev.matmul(&ws.last, 1, self.head(), &mut ws.logits); // logits: [1, vocab]
        dev.read(&ws.logits, self.config.vocab_size, out)
    }

    /// Logits of the first `rows` rows of the last `forward`, appended to `out` row by row.
    pub fn logits_of_rows(
        &self,
        dev: &D,
        ws: &mut Workspace<D>,
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
        dev.matmul(&ws.h, rows, self.head(), all); // all: [rows, vocab]
        let mut host = Vec::new();
        dev.read(all, rows * vocab, &mut host)?;
        out.extend(host.chunks_exact(vocab).map(<[f32]>::to_vec));
        Ok(())
    }
}

/// `out = x · Wᵀ (+ s·B·A·x)`.
fn linear<D: Device>(
    dev: &D,
    x: &D::Buffer,
    rows: usize,
    w: &D::Matrix,
    lora: Option<&super::lora::LoraPair<D>>,
    scratch: &mut D::Buffer,
    out: &mut D::Buffer,
) {
    dev.matmul(x, rows, w, out);
    if let Some(pair) = lora {
        dev.lora_add(x, rows, &pair.a, &pair.b, pair.scale, scratch, out);
    }
}

/// HF's `inv_freq = 1 / θ^(2i/d)`, with the exponent rounded to f32 as the reference does.
pub fn rope_inverse_frequencies(head_dim: usize, theta: f64) -> Vec<f32> {
    (0..head_dim / 2)
        .map(|i| {
            let exponent = (2 * i) as f32 / head_dim as f32;
            1.0f32 / (theta.powf(exponent as f64) as f32)
        })
        .collect()
}
