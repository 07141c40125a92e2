//! The compute device seam: a `Device` owns weight storage, activation buffers, KV storage and
//! the kernels the model calls. `model.rs` is written against this trait only, so a CUDA device
//! (stream, cuBLAS, NVRTC kernels, bf16 weights) slots in beside `cpu.rs` without touching it.
//!
//! Conventions for every kernel: activations are row-major `[rows, width]` f32 buffers (on the
//! device's memory); a kernel touches only the first `rows * width` elements, so buffers are
//! allocated once for the largest chunk and reused for every step (no allocation per token).
//! Matrices are PyTorch `Linear` weights, `[out, in]` row-major; `matmul` computes `x · Wᵀ`.
//!
//! Kernels return nothing: like launches on a CUDA stream they are fire-and-forget, and a
//! device reports a failed launch at its next synchronisation point, `read`, which returns a
//! `Result`. Allocation (`matrix`, `buffer`, `kv_*`) fails eagerly.

pub mod cpu;
mod cpu_hybrid;
pub mod cuda;

use super::error::EngineError;

use crate::protocol::DeviceChoice;

/// Attention geometry, the same for every layer of a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// KV storage geometry of one sequence: `layers × capacity × kv_dim` for K and for V.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShape {
    pub layers: usize,
    pub kv_dim: usize,
}

impl KvShape {
    /// Bytes held per cached token (K and V, all layers) on a device storing `elem_bytes` each.
    pub fn bytes_per_token(&self, elem_bytes: usize) -> usize {
        2 * self.layers * self.kv_dim * elem_bytes
    }
}

/// A compute device. All kernels are `&self`: a device serialises its own work (a CPU thread
/// pool, a CUDA stream).
pub trait Device: Send + 'static {
    /// A weight matrix `[out, in]`.
    type Matrix: Send;
    /// A 1-D weight (norm scales, RoPE inverse frequencies).
    type Vector: Send;
    /// An f32 activation buffer.
    type Buffer: Send;
    /// The K and V of one sequence for all layers, with room for `capacity` positions.
    type Kv: Send;

    /// Human-readable description ("cpu (2 threads, avx2+fma)").
    fn name(&self) -> String;

    /// Moves a host matrix `[rows, cols]` to the device.
    fn matrix(&self, data: Vec<f32>, rows: usize, cols: usize)
    -> Result<Self::Matrix, EngineError>;
    /// Whether bf16 checkpoint tensors should reach `matrix_bf16` as they are stored.
    fn keeps_bf16(&self) -> bool {
        false
    }
    /// Moves a host matrix of raw bf16 bits to the device; a device without bf16 storage
    /// widens it to f32.
    fn matrix_bf16(
        &self,
        data: Vec<u16>,
        rows: usize,
        cols: usize,
    ) -> Result<Self::Matrix, EngineError> {
        let wide = data
            .into_iter()
            .map(|b| f32::from_bits((b as u32) << 16))
            .collect();
        self.matrix(wide, rows, cols)
    }
    /// Moves a host vector to the device.
    fn vector(&self, data: Vec<f32>) -> Result<Self::Vector, EngineError>;
    /// A zeroed activation buffer of `len` f32.
    fn buffer(&self, len: usize) -> Result<Self::Buffer, EngineError>;
    /// Bytes a matrix occupies on the device.
    fn matrix_bytes(&self, m: &Self::Matrix) -> usize;

    /// `out[i, :] = table[tokens[i], :]`. Token ids are checked by the caller.
    fn embed(&self, table: &Self::Matrix, tokens: &[u32], out: &mut Self::Buffer);
    /// `out[r, :] = x[r, :] / rms(x[r, :]) * w` over `rows` rows of `width`.
    fn rms_norm(
        &self,
        x: &Self::Buffer,
        w: &Self::Vector,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut Self::Buffer,
    );
    /// As `rms_norm`, in place (the per-head q/k norms: rows = tokens · heads, width = head_dim).
    fn rms_norm_in_place(
        &self,
        x: &mut Self::Buffer,
        w: &Self::Vector,
        rows: usize,
        width: usize,
        eps: f32,
    );
    /// `out[rows, w.out] = x[rows, w.in] · wᵀ`.
    fn matmul(&self, x: &Self::Buffer, rows: usize, w: &Self::Matrix, out: &mut Self::Buffer);
    /// LoRA: `out[rows, b.out] += scale · ((x[rows, a.in] · aᵀ) · bᵀ)`, the scale applied in
    /// f32 after the product (PEFT's order), so `a` and `b` can stay as the adapter file stores
    /// them. `scratch` holds at least `rows · rank` f32.
    #[allow(clippy::too_many_arguments)] // a kernel signature, like BLAS's
    fn lora_add(
        &self,
        x: &Self::Buffer,
        rows: usize,
        a: &Self::Matrix,
        b: &Self::Matrix,
        scale: f32,
        scratch: &mut Self::Buffer,
        out: &mut Self::Buffer,
    );
    /// NeoX-style rotary embedding (rotate-half) in place on `[rows, heads, head_dim]`; row `i`
    /// sits at position `start + i`; `inv_freq` has head_dim / 2 entries.
    fn rope(
        &self,
        x: &mut Self::Buffer,
        rows: usize,
        heads: usize,
        head_dim: usize,
        start: usize,
        inv_freq: &Self::Vector,
    );
    /// `gate[i] = silu(gate[i]) · up[i]` for the first `len` entries.
    fn silu_mul(&self, gate: &mut Self::Buffer, up: &Self::Buffer, len: usize);
    /// `x[i] += y[i]` for the first `len` entries.
    fn add(&self, x: &mut Self::Buffer, y: &Self::Buffer, len: usize);
    /// Copies `len` f32 from `src[src_offset..]` to the start of `dst`.
    fn copy(&self, src: &Self::Buffer, src_offset: usize, len: usize, dst: &mut Self::Buffer);
    /// Reads the first `len` f32 of a buffer into `out` (resized to `len`).
    fn read(&self, x: &Self::Buffer, len: usize, out: &mut Vec<f32>) -> Result<(), EngineError>;

    /// KV storage for `capacity` positions.
    fn kv_alloc(&self, shape: KvShape, capacity: usize) -> Result<Self::Kv, EngineError>;
    /// Bytes one cached position takes (K and V, all layers).
    fn kv_bytes_per_token(&self, shape: KvShape) -> usize;
    /// Positions a KV storage can hold.
    fn kv_capacity(&self, kv: &Self::Kv) -> usize;
    /// Bytes a KV storage occupies.
    fn kv_bytes(&self, kv: &Self::Kv) -> usize;
    /// Grows a KV storage to `capacity` positions, keeping its contents.
    fn kv_grow(&self, kv: &mut Self::Kv, capacity: usize) -> Result<(), EngineError>;
    /// A new KV storage of `capacity` positions holding a copy of the first `len` positions.
    fn kv_copy_prefix(
        &self,
        kv: &Self::Kv,
        len: usize,
        capacity: usize,
    ) -> Result<Self::Kv, EngineError>;
    /// Stores the K and V rows (`[rows, kv_dim]`) of one layer at positions `start..start+rows`.
    fn kv_write(
        &self,
        kv: &mut Self::Kv,
        layer: usize,
        start: usize,
        rows: usize,
        k: &Self::Buffer,
        v: &Self::Buffer,
    );
    /// Causal GQA attention of `rows` queries (`q: [rows, heads·head_dim]`, at positions
    /// `start..start+rows`) over positions `0..=position` of `kv` for layer `layer`;
    /// `out: [rows, heads·head_dim]`.
    #[allow(clippy::too_many_arguments)] // a kernel signature, like BLAS's
    fn attention(
        &self,
        q: &Self::Buffer,
        kv: &Self::Kv,
        layer: usize,
        rows: usize,
        start: usize,
        shape: AttentionShape,
        out: &mut Self::Buffer,
    );
}

/// Geometry of a Gated DeltaNet (linear attention) layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeltaShape {
    pub key_heads: usize,
    pub value_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
}

impl DeltaShape {
    /// f32 entries of one layer's recurrent state: `[value_heads, key_dim, value_dim]`.
    pub fn state_len(&self) -> usize {
        self.value_heads * self.key_dim * self.value_dim
    }

    /// Width of the fused q|k|v row the conv1d produces.
    pub fn qkv_width(&self) -> usize {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }
}

/// The kernels a hybrid Qwen3.5-MoE model needs on top of `Device`: linear attention (conv1d,
/// gated delta rule, gated norm), the gated full attention's split and partial RoPE, and the
/// routed experts' gather/scatter. Same conventions as `Device`; the routing indices are host
/// slices (a GPU device uploads them with the launch).
pub trait HybridDevice: Device {
    /// `x: [rows, heads, 2·head_dim]` (each head's query then its gate) into
    /// `a: [rows, heads·head_dim]` (queries) and `b` (gates).
    fn split_halves(
        &self,
        x: &Self::Buffer,
        rows: usize,
        heads: usize,
        head_dim: usize,
        a: &mut Self::Buffer,
        b: &mut Self::Buffer,
    );
    /// `x[i] *= sigmoid(gate[i])` for the first `len` entries.
    fn sigmoid_mul(&self, x: &mut Self::Buffer, gate: &Self::Buffer, len: usize);
    /// Rotate-half RoPE on the first `rotary_dim` dimensions of each `head_dim`-wide head;
    /// `inv_freq` has `rotary_dim / 2` entries.
    #[allow(clippy::too_many_arguments)] // a kernel signature
    fn rope_partial(
        &self,
        x: &mut Self::Buffer,
        rows: usize,
        heads: usize,
        head_dim: usize,
        rotary_dim: usize,
        start: usize,
        inv_freq: &Self::Vector,
    );
    /// Causal depthwise conv1d then SiLU: `x: [rows, channels]`, `weight: [channels, kernel]`,
    /// `state: [channels, kernel − 1]` the previous inputs, oldest first (updated);
    /// `out: [rows, channels]`. One kernel serves prefill (many rows) and decode (one).
    #[allow(clippy::too_many_arguments)] // a kernel signature
    fn conv1d_silu(
        &self,
        x: &Self::Buffer,
        rows: usize,
        channels: usize,
        kernel: usize,
        weight: &Self::Vector,
        state: &mut Self::Buffer,
        out: &mut Self::Buffer,
    );
    /// The gated delta rule over `rows` tokens: `qkv: [rows, qkv_width]` (conv output),
    /// `b, a: [rows, value_heads]` (pre-activation beta and decay inputs), `state` the
    /// recurrent state (updated), `out: [rows, value_heads·value_dim]`. q and k are L2-normed
    /// (eps added to the sum of squares), q scaled by 1/√key_dim, β = sigmoid(b),
    /// g = −exp(A_log)·softplus(a + dt_bias).
    #[allow(clippy::too_many_arguments)] // a kernel signature
    fn gated_delta_rule(
        &self,
        qkv: &Self::Buffer,
        b: &Self::Buffer,
        a: &Self::Buffer,
        rows: usize,
        shape: DeltaShape,
        a_log: &Self::Vector,
        dt_bias: &Self::Vector,
        state: &mut Self::Buffer,
        out: &mut Self::Buffer,
    );
    /// In place over `rows` rows of `width`: `x ← w · x/rms(x) · silu(z)`.
    fn gated_rms_norm(
        &self,
        x: &mut Self::Buffer,
        z: &Self::Buffer,
        w: &Self::Vector,
        rows: usize,
        width: usize,
        eps: f32,
    );
    /// `out[i, :] = silu(x[i, ..half]) · x[i, half..]` for `x: [rows, 2·half]` (fused gate|up).
    fn silu_mul_halves(&self, x: &Self::Buffer, rows: usize, half: usize, out: &mut Self::Buffer);
    /// `out[i, :] = x[rows[i], :]` over rows of `width`.
    fn gather_rows(&self, x: &Self::Buffer, width: usize, rows: &[u32], out: &mut Self::Buffer);
    /// `out[rows[i], :] += weights[i] · y[i, :]` over rows of `width`.
    fn scatter_add_rows(
        &self,
        y: &Self::Buffer,
        width: usize,
        rows: &[u32],
        weights: &[f32],
        out: &mut Self::Buffer,
    );
    /// `out[r, :] += sigmoid(g[r]) · y[r, :]` for `rows` rows of `width` (`g: [rows, 1]`).
    fn add_sigmoid_scaled(
        &self,
        out: &mut Self::Buffer,
        y: &Self::Buffer,
        g: &Self::Buffer,
        rows: usize,
        width: usize,
    );
    /// Sets the first `len` entries to zero.
    fn zero(&self, x: &mut Self::Buffer, len: usize);
    /// A new buffer holding a copy of the first `len` entries of `x` (state snapshots).
    fn duplicate(&self, x: &Self::Buffer, len: usize) -> Result<Self::Buffer, EngineError>;
    /// Bytes a buffer of `len` f32 occupies on the device.
    fn buffer_bytes(&self, len: usize) -> usize {
        len * 4
    }
}
