//! The CPU device's hybrid (Qwen3.5-MoE) kernels: conv1d, gated delta rule (chunked form for
//! prefill, recurrent form for decode, parallel over value heads), gated norm, gated-attention
//! split, partial RoPE and the routed experts' gather/scatter.

use rayon::prelude::*;

use super::cpu::{CpuDevice, DeltaRuleForm};
use super::{DeltaShape, HybridDevice};
use crate::engine::error::EngineError;

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// PyTorch's softplus (β = 1, threshold 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// `x · rsqrt(Σx² + eps)`: the delta rule's L2 norm adds eps to the sum, not the mean.
fn l2_normalize(x: &mut [f32], eps: f32) {
    let sum: f32 = x.iter().map(|v| v * v).sum();
    let inv = 1.0 / (sum + eps).sqrt();
    for v in x {
        *v *= inv;
    }
}

/// Tokens per chunk of the delta rule's chunked form (the reference's chunk size).
const DELTA_CHUNK: usize = 64;

/// The arguments of one `gated_delta_rule` call.
struct DeltaInputs<'a> {
    qkv: &'a [f32],
    b: &'a [f32],
    a: &'a [f32],
    rows: usize,
    shape: DeltaShape,
    a_log: &'a [f32],
    dt_bias: &'a [f32],
}

/// One value head's view of a call: its q and k (normalised, shared within the key-head
/// group), its v, and per row the log decay g and β.
struct Head<'a> {
    qn: &'a [f32],
    kn: &'a [f32],
    qkv: &'a [f32],
    width: usize,
    key_width: usize,
    key_offset: usize,
    value_offset: usize,
    dk: usize,
    dv: usize,
    g: Vec<f32>,
    beta: Vec<f32>,
}

impl Head<'_> {
    fn q(&self, t: usize) -> &[f32] {
        let at = t * self.key_width + self.key_offset;
        &self.qn[at..at + self.dk]
    }

    fn k(&self, t: usize) -> &[f32] {
        let at = t * self.key_width + self.key_offset;
        &self.kn[at..at + self.dk]
    }

    fn v(&self, t: usize) -> &[f32] {
        let at = t * self.width + self.value_offset;
        &self.qkv[at..at + self.dv]
    }
}

/// Both forms of the gated delta rule over `inputs.rows` tokens; `form` picks one (the tests
/// run both on the same inputs).
fn delta_rule(inputs: &DeltaInputs, form: DeltaRuleForm, state: &mut [f32], out: &mut [f32]) {
    let DeltaInputs {
        qkv,
        b,
        a,
        rows,
        shape,
        a_log,
        dt_bias,
    } = *inputs;
    let DeltaShape {
        key_heads,
        value_heads,
        key_dim: dk,
        value_dim: dv,
    } = shape;
    let width = shape.qkv_width();
    let key_width = key_heads * dk;
    let group = value_heads / key_heads;
    let scale = 1.0 / (dk as f32).sqrt();
    let out_width = value_heads * dv;
    // Normalised q and k of every row, shared by the value heads of a group.
    let mut qn = vec![0f32; rows * key_width];
    let mut kn = vec![0f32; rows * key_width];
    for t in 0..rows {
        let row = &qkv[t * width..(t + 1) * width];
        qn[t * key_width..(t + 1) * key_width].copy_from_slice(&row[..key_width]);
        kn[t * key_width..(t + 1) * key_width].copy_from_slice(&row[key_width..2 * key_width]);
        for h in 0..key_heads {
            let s = t * key_width + h * dk;
            l2_normalize(&mut qn[s..s + dk], 1e-6);
            l2_normalize(&mut kn[s..s + dk], 1e-6);
            for v in &mut qn[s..s + dk] {
                *v *= scale;
            }
        }
    }
    let per_head: Vec<Vec<f32>> = state[..value_heads * dk * dv]
        .par_chunks_mut(dk * dv)
        .enumerate()
        .map(|(h, s)| {
            let neg_a = -a_log[h].exp();
            let head = Head {
                qn: &qn,
                kn: &kn,
                qkv,
                width,
                key_width,
                key_offset: (h / group) * dk,
                value_offset: 2 * key_width + h * dv,
                dk,
                dv,
                g: (0..rows)
                    .map(|t| neg_a * softplus(a[t * value_heads + h] + dt_bias[h]))
                    .collect(),
                beta: (0..rows).map(|t| sigmoid(b[t * value_heads + h])).collect(),
            };
            let mut o = vec![0f32; rows * dv];
            match form {
                DeltaRuleForm::Recurrent => recurrent_head(&head, rows, s, &mut o),
                DeltaRuleForm::Chunked => chunked_head(&head, rows, s, &mut o),
            }
            o
        })
        .collect();
    for (h, o) in per_head.iter().enumerate() {
        for t in 0..rows {
            out[t * out_width + h * dv..t * out_width + (h + 1) * dv]
                .copy_from_slice(&o[t * dv..(t + 1) * dv]);
        }
    }
}

/// One token at a time: decay the state, read k's memory, write β·(v − memory) along k, read q.
fn recurrent_head(head: &Head, rows: usize, s: &mut [f32], o: &mut [f32]) {
    let dv = head.dv;
    let mut mem = vec![0f32; dv];
    for t in 0..rows {
        let (q, k, v) = (head.q(t), head.k(t), head.v(t));
        let decay = head.g[t].exp();
        let beta = head.beta[t];
        for x in s.iter_mut() {
            *x *= decay;
        }
        mem.iter_mut().for_each(|m| *m = 0.0);
        for (i, ki) in k.iter().enumerate() {
            for (m, sv) in mem.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                *m += sv * ki;
            }
        }
        for (m, vj) in mem.iter_mut().zip(v) {
            *m = (vj - *m) * beta; // the delta
        }
        for (i, ki) in k.iter().enumerate() {
            for (sv, d) in s[i * dv..(i + 1) * dv].iter_mut().zip(&mem) {
                *sv += ki * d;
            }
        }
        let ot = &mut o[t * dv..(t + 1) * dv];
        for (i, qi) in q.iter().enumerate() {
            for (ov, sv) in ot.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
                *ov += sv * qi;
            }
        }
    }
}

/// The chunked (WY / UT-transform) form, as the reference prefills: within a chunk of `c`
/// tokens with cumulative log decays `γ`, the unit lower-triangular system
/// `(I + tril₋₁(β kᵢ·kⱼ e^{γᵢ−γⱼ})) [U | W] = [β v | β k e^γ]` turns the chunk's `c` rank-one
/// updates into GEMMs: `v' = U − W·S`, `o = e^γ q·S + tril(q·kᵀ e^{γᵢ−γⱼ})·v'`,
/// `S ← e^{γ_last} S + (k e^{γ_last−γ})ᵀ·v'`. The state is read and written once per chunk
/// instead of four times per token.
fn chunked_head(head: &Head, rows: usize, s: &mut [f32], o: &mut [f32]) {
    let (dk, dv) = (head.dk, head.dv);
    let n = DELTA_CHUNK.min(rows);
    let xw = dv + dk;
    let mut qc = vec![0f32; n * dk];
    let mut kc = vec![0f32; n * dk];
    let mut kb = vec![0f32; n * dk];
    let mut x = vec![0f32; n * xw];
    let mut lower = vec![0f32; n * n];
    let mut attn = vec![0f32; n * n];
    let mut v_new = vec![0f32; n * dv];
    let mut gamma = vec![0f32; n];
    for start in (0..rows).step_by(n) {
        let c = n.min(rows - start);
        let mut acc = 0f32;
        for i in 0..c {
            let t = start + i;
            acc += head.g[t];
            gamma[i] = acc;
            let beta = head.beta[t];
            let e = acc.exp();
            qc[i * dk..(i + 1) * dk].copy_from_slice(head.q(t));
            kc[i * dk..(i + 1) * dk].copy_from_slice(head.k(t));
            let xi = &mut x[i * xw..(i + 1) * xw];
            for (d, v) in xi[..dv].iter_mut().zip(head.v(t)) {
                *d = v * beta;
            }
            for ((kbv, d), k) in kb[i * dk..(i + 1) * dk]
                .iter_mut()
                .zip(&mut xi[dv..])
                .zip(head.k(t))
            {
                *kbv = k * beta;
                *d = *kbv * e;
            }
        }
        // β kᵢ·kⱼ and qᵢ·kⱼ for all pairs, then the decay between them (causal part only).
        gemm(
            c,
            dk,
            c,
            1.0,
            &kb,
            (dk, 1),
            &kc,
            (1, dk),
            0.0,
            &mut lower,
            c,
        );
        gemm(c, dk, c, 1.0, &qc, (dk, 1), &kc, (1, dk), 0.0, &mut attn, c);
        for i in 0..c {
            for j in 0..c {
                let decay = if j <= i {
                    (gamma[i] - gamma[j]).exp()
                } else {
                    0.0
                };
                attn[i * c + j] *= decay;
                lower[i * c + j] = if j < i { lower[i * c + j] * decay } else { 0.0 };
            }
        }
        // Forward substitution: row i of [U | W] loses what the earlier rows already wrote.
        for i in 1..c {
            let (done, rest) = x.split_at_mut(i * xw);
            let xi = &mut rest[..xw];
            for (j, xj) in done.chunks_exact(xw).enumerate() {
                let l = lower[i * c + j];
                if l != 0.0 {
                    for (d, v) in xi.iter_mut().zip(xj) {
                        *d -= l * v;
                    }
                }
            }
        }
        for i in 0..c {
            v_new[i * dv..(i + 1) * dv].copy_from_slice(&x[i * xw..i * xw + dv]);
        }
        gemm(
            c,
            dk,
            dv,
            -1.0,
            &x[dv..],
            (xw, 1),
            s,
            (dv, 1),
            1.0,
            &mut v_new,
            dv,
        );
        for i in 0..c {
            let e = gamma[i].exp();
            for v in &mut qc[i * dk..(i + 1) * dk] {
                *v *= e;
            }
        }
        let oc = &mut o[start * dv..(start + c) * dv];
        gemm(c, dk, dv, 1.0, &qc, (dk, 1), s, (dv, 1), 0.0, oc, dv);
        gemm(c, c, dv, 1.0, &attn, (c, 1), &v_new, (dv, 1), 1.0, oc, dv);
        let last = gamma[c - 1];
        for i in 0..c {
            let e = (last - gamma[i]).exp();
            for v in &mut kc[i * dk..(i + 1) * dk] {
                *v *= e;
            }
        }
        let chunk_decay = last.exp();
        for v in s.iter_mut() {
            *v *= chunk_decay;
        }
        gemm(dk, c, dv, 1.0, &kc, (1, dk), &v_new, (dv, 1), 1.0, s, dv);
    }
}

/// `c[m, n] = alpha·a[m, k]·b[k, n] + beta·c` (row stride `rsc`), `a` and `b` addressed by (row,
/// column) strides so transposes cost nothing.
#[allow(clippy::too_many_arguments)] // a BLAS call
fn gemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: &[f32],
    (rsa, csa): (usize, usize),
    b: &[f32],
    (rsb, csb): (usize, usize),
    beta: f32,
    c: &mut [f32],
    rsc: usize,
) {
    let reach = |rows: usize, cols: usize, rs: usize, cs: usize| {
        if rows == 0 || cols == 0 {
            0
        } else {
            (rows - 1) * rs + (cols - 1) * cs + 1
        }
    };
    assert!(
        reach(m, k, rsa, csa) <= a.len()
            && reach(k, n, rsb, csb) <= b.len()
            && reach(m, n, rsc, 1) <= c.len()
    );
    // SAFETY: the assert bounds every element the strides address in all three matrices; `c`
    // is a distinct mutable borrow, so it aliases neither input.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            beta,
            c.as_mut_ptr(),
            rsc as isize,
            1,
        );
    }
}

impl HybridDevice for CpuDevice {
    fn split_halves(
        &self,
        x: &Vec<f32>,
        rows: usize,
        heads: usize,
        head_dim: usize,
        a: &mut Vec<f32>,
        b: &mut Vec<f32>,
    ) {
        for r in 0..rows * heads {
            let src = &x[r * 2 * head_dim..(r + 1) * 2 * head_dim];
            a[r * head_dim..(r + 1) * head_dim].copy_from_slice(&src[..head_dim]);
            b[r * head_dim..(r + 1) * head_dim].copy_from_slice(&src[head_dim..]);
        }
    }

    fn sigmoid_mul(&self, x: &mut Vec<f32>, gate: &Vec<f32>, len: usize) {
        for (v, g) in x[..len].iter_mut().zip(&gate[..len]) {
            *v *= sigmoid(*g);
        }
    }

    fn rope_partial(
        &self,
        x: &mut Vec<f32>,
        rows: usize,
        heads: usize,
        head_dim: usize,
        rotary_dim: usize,
        start: usize,
        inv_freq: &Vec<f32>,
    ) {
        let half = rotary_dim / 2;
        x[..rows * heads * head_dim]
            .par_chunks_mut(heads * head_dim)
            .enumerate()
            .for_each(|(i, row)| {
                // The angle is rounded to f32 before cos/sin, as the reference computes it.
                let position = (start + i) as f32;
                for (j, freq) in inv_freq.iter().enumerate().take(half) {
                    let angle = (position * freq) as f64;
                    let (sin, cos) = (angle.sin() as f32, angle.cos() as f32);
                    for h in 0..heads {
                        let base = h * head_dim;
                        let x1 = row[base + j];
                        let x2 = row[base + j + half];
                        row[base + j] = x1 * cos - x2 * sin;
                        row[base + j + half] = x2 * cos + x1 * sin;
                    }
                }
            });
    }

    fn conv1d_silu(
        &self,
        x: &Vec<f32>,
        rows: usize,
        channels: usize,
        kernel: usize,
        weight: &Vec<f32>,
        state: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) {
        let hist = kernel - 1;
        // Channels are independent: each walks its own window of `hist` earlier inputs.
        let mut window = vec![0f32; hist + rows];
        for c in 0..channels {
            let w = &weight[c * kernel..(c + 1) * kernel];
            let st = &mut state[c * hist..(c + 1) * hist];
            window[..hist].copy_from_slice(st);
            for t in 0..rows {
                window[hist + t] = x[t * channels + c];
            }
            for t in 0..rows {
                let mut acc = 0f32;
                for (j, wv) in w.iter().enumerate() {
                    acc += wv * window[t + j];
                }
                out[t * channels + c] = silu(acc);
            }
            st.copy_from_slice(&window[rows..rows + hist]);
        }
    }

    fn gated_delta_rule(
        &self,
        qkv: &Vec<f32>,
        b: &Vec<f32>,
        a: &Vec<f32>,
        rows: usize,
        shape: DeltaShape,
        a_log: &Vec<f32>,
        dt_bias: &Vec<f32>,
        state: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) {
        let form = if rows > 1 {
            self.delta_rule
        } else {
            DeltaRuleForm::Recurrent
        };
        let inputs = DeltaInputs {
            qkv,
            b,
            a,
            rows,
            shape,
            a_log,
            dt_bias,
        };
        delta_rule(&inputs, form, state, out);
    }

    fn gated_rms_norm(
        &self,
        x: &mut Vec<f32>,
        z: &Vec<f32>,
        w: &Vec<f32>,
        rows: usize,
        width: usize,
        eps: f32,
    ) {
        for (row, zr) in x[..rows * width]
            .chunks_mut(width)
            .zip(z[..rows * width].chunks(width))
        {
            let mean_square =
                row.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>() / width as f64;
            let inv = 1.0 / (mean_square as f32 + eps).sqrt();
            for ((v, wv), zv) in row.iter_mut().zip(w).zip(zr) {
                *v = wv * (*v * inv) * silu(*zv);
            }
        }
    }

    fn silu_mul_halves(&self, x: &Vec<f32>, rows: usize, half: usize, out: &mut Vec<f32>) {
        for r in 0..rows {
            let src = &x[r * 2 * half..(r + 1) * 2 * half];
            for (j, o) in out[r * half..(r + 1) * half].iter_mut().enumerate() {
                *o = silu(src[j]) * src[half + j];
            }
        }
    }

    fn gather_rows(&self, x: &Vec<f32>, width: usize, rows: &[u32], out: &mut Vec<f32>) {
        for (i, &r) in rows.iter().enumerate() {
            let r = r as usize;
            out[i * width..(i + 1) * width].copy_from_slice(&x[r * width..(r + 1) * width]);
        }
    }

    fn scatter_add_rows(
        &self,
        y: &Vec<f32>,
        width: usize,
        rows: &[u32],
        weights: &[f32],
        out: &mut Vec<f32>,
    ) {
        for (i, (&r, &wt)) in rows.iter().zip(weights).enumerate() {
            let r = r as usize;
            for (o, v) in out[r * width..(r + 1) * width]
                .iter_mut()
                .zip(&y[i * width..(i + 1) * width])
            {
                *o += v * wt;
            }
        }
    }

    fn add_sigmoid_scaled(
        &self,
        out: &mut Vec<f32>,
        y: &Vec<f32>,
        g: &Vec<f32>,
        rows: usize,
        width: usize,
    ) {
        for r in 0..rows {
            let s = sigmoid(g[r]);
            for (o, v) in out[r * width..(r + 1) * width]
                .iter_mut()
                .zip(&y[r * width..(r + 1) * width])
            {
                *o += s * v;
            }
        }
    }

    fn zero(&self, x: &mut Vec<f32>, len: usize) {
        x[..len].iter_mut().for_each(|v| *v = 0.0);
    }

    fn duplicate(&self, x: &Vec<f32>, len: usize) -> Result<Vec<f32>, EngineError> {
        Ok(x[..len].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic values in [-1, 1).
    fn noise(len: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    const SHAPE: DeltaShape = DeltaShape {
        key_heads: 2,
        value_heads: 4,
        key_dim: 16,
        value_dim: 24,
    };

    /// Runs `rows` tokens through one form from `state`, returning (out, final state).
    fn run(
        rows: usize,
        form: DeltaRuleForm,
        decay_bias: f32,
        state: &[f32],
        seed: u64,
    ) -> (Vec<f32>, Vec<f32>) {
        let qkv = noise(rows * SHAPE.qkv_width(), seed);
        let b = noise(rows * SHAPE.value_heads, seed + 1);
        let a = noise(rows * SHAPE.value_heads, seed + 2);
        let a_log = noise(SHAPE.value_heads, seed + 3);
        let dt_bias: Vec<f32> = noise(SHAPE.value_heads, seed + 4)
            .iter()
            .map(|v| v + decay_bias)
            .collect();
        let inputs = DeltaInputs {
            qkv: &qkv,
            b: &b,
            a: &a,
            rows,
            shape: SHAPE,
            a_log: &a_log,
            dt_bias: &dt_bias,
        };
        let mut s = state.to_vec();
        let mut out = vec![0f32; rows * SHAPE.value_heads * SHAPE.value_dim];
        delta_rule(&inputs, form, &mut s, &mut out);
        (out, s)
    }

    fn max_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| {
                assert!(x.is_finite() && y.is_finite(), "{x} {y}");
                (x - y).abs()
            })
            .fold(0.0, f32::max)
    }

    #[test]
    fn chunked_form_equals_the_recurrent_form_across_chunk_boundaries() {
        let initial = noise(SHAPE.state_len(), 99);
        // Within one chunk, exactly one, one past, several with a partial last chunk; decay
        // near none (the state carries across chunks), moderate, and strong (e^γ underflowing
        // to zero within a chunk must not produce NaN).
        for rows in [2, 63, 64, 65, 150, 256] {
            for decay_bias in [-8.0, 0.0, 30.0] {
                let (out_r, s_r) = run(rows, DeltaRuleForm::Recurrent, decay_bias, &initial, 7);
                let (out_c, s_c) = run(rows, DeltaRuleForm::Chunked, decay_bias, &initial, 7);
                let scale = out_r.iter().fold(0f32, |m, v| m.max(v.abs()));
                assert!(
                    scale > 0.01,
                    "{rows}: outputs too small to compare ({scale})"
                );
                let (d_out, d_state) = (max_diff(&out_r, &out_c), max_diff(&s_r, &s_c));
                assert!(
                    d_out < 1e-4,
                    "{rows} rows, bias {decay_bias}: out differs by {d_out}"
                );
                assert!(
                    d_state < 1e-4,
                    "{rows} rows, bias {decay_bias}: state differs by {d_state}"
                );
            }
        }
    }

    #[test]
    fn chunked_prefill_then_recurrent_steps_equal_one_chunked_prefill() {
        // A state left by a chunked prefill continues under decode steps as under a longer
        // prefill, and a prefill resumed from a mid-chunk state agrees too.
        let zero = vec![0f32; SHAPE.state_len()];
        let (whole, s_whole) = run(140, DeltaRuleForm::Chunked, -8.0, &zero, 11);
        let qkv = noise(140 * SHAPE.qkv_width(), 11);
        let b = noise(140 * SHAPE.value_heads, 12);
        let a = noise(140 * SHAPE.value_heads, 13);
        let a_log = noise(SHAPE.value_heads, 14);
        let dt_bias: Vec<f32> = noise(SHAPE.value_heads, 15)
            .iter()
            .map(|v| v - 8.0)
            .collect();
        let width = SHAPE.qkv_width();
        let heads = SHAPE.value_heads;
        let out_width = heads * SHAPE.value_dim;
        let mut s = zero.clone();
        let mut pieces = Vec::new();
        for (from, to, form) in [
            (0, 100, DeltaRuleForm::Chunked),
            (100, 101, DeltaRuleForm::Recurrent),
            (101, 102, DeltaRuleForm::Recurrent),
            (102, 140, DeltaRuleForm::Chunked),
        ] {
            let rows = to - from;
            let inputs = DeltaInputs {
                qkv: &qkv[from * width..to * width],
                b: &b[from * heads..to * heads],
                a: &a[from * heads..to * heads],
                rows,
                shape: SHAPE,
                a_log: &a_log,
                dt_bias: &dt_bias,
            };
            let mut out = vec![0f32; rows * out_width];
            delta_rule(&inputs, form, &mut s, &mut out);
            pieces.extend(out);
        }
        assert!(max_diff(&whole, &pieces) < 1e-4);
        assert!(max_diff(&s_whole, &s) < 1e-4);
    }
}
