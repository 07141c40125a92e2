//! The CPU device's hybrid (Qwen3.5-MoE) kernels: conv1d, gated delta rule (recurrent form,
//! parallel over value heads), gated norm, gated-attention split, partial RoPE and the routed
//! experts' gather/scatter.

use rayon::prelude::*;

use super::cpu::CpuDevice;
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
                let kh = h / group;
                let mut o = vec![0f32; rows * dv];
                let mut mem = vec![0f32; dv];
                let neg_a = -a_log[h].exp();
                for t in 0..rows {
                    let q = &qn[t * key_width + kh * dk..t * key_width + (kh + 1) * dk];
                    let k = &kn[t * key_width + kh * dk..t * key_width + (kh + 1) * dk];
                    let v = &qkv[t * width + 2 * key_width + h * dv
                        ..t * width + 2 * key_width + (h + 1) * dv];
                    let decay = (neg_a * softplus(a[t * value_heads + h] + dt_bias[h])).exp();
                    let beta = sigmoid(b[t * value_heads + h]);
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
