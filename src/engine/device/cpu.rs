//! The CPU device: weights resident in bf16 (as checkpoints store them; widened to f32 in
//! registers inside the kernels, f32 accumulation) or f32 (`BATON_CPU_WEIGHTS=f32`), f32
//! activations; GEMMs through single-threaded `matrixmultiply` calls on column bands spread
//! over rayon (a bf16 band widened one cache-sized panel at a time), single-row products
//! (decode) through a rayon-parallel GEMV with AVX2/FMA/AVX-512 picked at run time, attention
//! with an online softmax so no kernel allocates.

use rayon::prelude::*;

use super::{AttentionShape, Device, KvShape};
use crate::engine::error::EngineError;

/// Fewest output rows per rayon task in the GEMV (scheduling costs more than a few dots).
const GEMV_MIN_ROWS_PER_TASK: usize = 16;

/// Fewest output columns per task in a multi-row GEMM.
const GEMM_MIN_COLS_PER_TASK: usize = 32;

/// f32 entries of one widened bf16 weight panel (4 MiB: the panel is packed from cache, and
/// the token rows are packed once per panel, so wider panels repack them less often).
const BF16_PANEL_FLOATS: usize = 1 << 20;

/// How the CPU keeps weight matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightPrecision {
    /// bf16 tensors stay bf16 (half the memory and bandwidth of f32); others are f32.
    Bf16,
    /// Every weight widened to f32 at load.
    F32,
}

impl WeightPrecision {
    /// `BATON_CPU_WEIGHTS=f32` selects f32; anything else (or unset) bf16.
    pub fn from_env() -> WeightPrecision {
        match std::env::var("BATON_CPU_WEIGHTS").as_deref() {
            Ok("f32") => WeightPrecision::F32,
            _ => WeightPrecision::Bf16,
        }
    }
}

/// Which form of the gated delta rule (Qwen3.5-MoE linear attention) a prefill takes; decode
/// (one row) is always recurrent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeltaRuleForm {
    /// 64-token chunks as GEMMs (the reference's prefill form).
    Chunked,
    /// One token at a time, as decode.
    Recurrent,
}

impl DeltaRuleForm {
    /// `BATON_CPU_DELTA_RULE=recurrent` selects the recurrent form; anything else chunked.
    pub fn from_env() -> DeltaRuleForm {
        match std::env::var("BATON_CPU_DELTA_RULE").as_deref() {
            Ok("recurrent") => DeltaRuleForm::Recurrent,
            _ => DeltaRuleForm::Chunked,
        }
    }
}

/// The host CPU.
pub struct CpuDevice {
    simd: Simd,
    precision: WeightPrecision,
    pub(super) delta_rule: DeltaRuleForm,
    /// Attention scores of a prefill chunk (`rows × positions` per thread); grows, never
    /// shrinks, so only the first chunk of a longer prompt allocates.
    scores: std::sync::Mutex<Vec<f32>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Simd {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
    /// AVX2 + FMA, and AVX-512F for the bf16 dot (16 weights widened per instruction).
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

/// A weight matrix `[rows = out, cols = in]`, row-major.
pub struct CpuMatrix {
    data: Storage,
    rows: usize,
    cols: usize,
}

enum Storage {
    F32(Vec<f32>),
    /// Raw bf16 bits (the top half of an f32).
    Bf16(Vec<u16>),
}

fn widen(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// K and V of one sequence: `[layer][position][kv_dim]` each.
pub struct CpuKv {
    shape: KvShape,
    capacity: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl CpuDevice {
    pub fn new() -> CpuDevice {
        CpuDevice::with_precision(WeightPrecision::from_env())
    }

    pub fn with_precision(precision: WeightPrecision) -> CpuDevice {
        #[cfg(target_arch = "x86_64")]
        let simd = if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
        {
            if std::is_x86_feature_detected!("avx512f") {
                Simd::Avx512
            } else {
                Simd::Avx2Fma
            }
        } else {
            Simd::Portable
        };
        #[cfg(not(target_arch = "x86_64"))]
        let simd = Simd::Portable;
        CpuDevice {
            simd,
            precision,
            delta_rule: DeltaRuleForm::from_env(),
            scores: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// The same device with the delta rule's prefill form fixed.
    pub fn with_delta_rule(mut self, form: DeltaRuleForm) -> CpuDevice {
        self.delta_rule = form;
        self
    }

    fn dot_bf16(&self, a: &[u16], b: &[f32]) -> f32 {
        match self.simd {
            Simd::Portable => a.iter().zip(b).map(|(w, x)| widen(*w) * x).sum(),
            // SAFETY: the features were detected at run time in `new`.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2Fma => unsafe { dot_bf16_avx2_fma(a, b) },
            // SAFETY: the features were detected at run time in `new`.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => unsafe { dot_bf16_avx512(a, b) },
        }
    }

    fn dot(&self, a: &[f32], b: &[f32]) -> f32 {
        match self.simd {
            Simd::Portable => dot_portable(a, b),
            // SAFETY: the features were detected at run time in `new`. The f32 dot stays on
            // AVX2: it streams twice the bytes of the bf16 one and is bound by memory.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2Fma | Simd::Avx512 => unsafe { dot_avx2_fma(a, b) },
        }
    }

    /// `out[rows, w.rows] (=|+=) scale · (x[rows, w.cols] · wᵀ)`.
    fn gemm(
        &self,
        x: &[f32],
        rows: usize,
        w: &CpuMatrix,
        scale: f32,
        out: &mut [f32],
        accumulate: bool,
    ) {
        let (n, k) = (w.rows, w.cols);
        let x = &x[..rows * k];
        let out = &mut out[..rows * n];
        if rows == 1 {
            // About four tasks per thread balances uneven cores without drowning in tasks.
            let per_task = (n / (4 * rayon::current_num_threads())).max(GEMV_MIN_ROWS_PER_TASK);
            out.par_chunks_mut(per_task)
                .enumerate()
                .for_each(|(chunk, o)| {
                    let first = chunk * per_task;
                    for (i, slot) in o.iter_mut().enumerate() {
                        let r = first + i;
                        let d = match &w.data {
                            Storage::F32(data) => self.dot(&data[r * k..(r + 1) * k], x),
                            Storage::Bf16(data) => self.dot_bf16(&data[r * k..(r + 1) * k], x),
                        };
                        let d = if scale == 1.0 { d } else { scale * d };
                        *slot = if accumulate { *slot + d } else { d };
                    }
                });
            return;
        }
        // Each task owns a band of output columns (weight rows) and runs a single-threaded
        // GEMM over it, so the weight packing is parallel too and one thread pool (rayon) does
        // all the work: two pools on few cores spin against each other. A bf16 band is widened
        // a panel at a time into the task's own scratch and the panel serves every token row.
        let threads = rayon::current_num_threads();
        let per_task = n.div_ceil(2 * threads).max(GEMM_MIN_COLS_PER_TASK);
        let out_ptr = SharedOut(out.as_mut_ptr());
        (0..n.div_ceil(per_task)).into_par_iter().for_each(|task| {
            let first = task * per_task;
            let count = per_task.min(n - first);
            let out_ptr = &out_ptr;
            match &w.data {
                // SAFETY (both arms): `out` is [rows, n] (sliced above); every task writes only
                // its own columns first..first+count with first + count <= n, so no two tasks
                // touch the same element, and `out` outlives the parallel loop.
                Storage::F32(data) => unsafe {
                    sgemm_block(
                        x,
                        rows,
                        k,
                        &data[first * k..(first + count) * k],
                        count,
                        first,
                        n,
                        scale,
                        out_ptr.0,
                        accumulate,
                    )
                },
                Storage::Bf16(data) => WIDE.with(|wide| {
                    let mut wide = wide.borrow_mut();
                    let panel = (BF16_PANEL_FLOATS / k.max(1)).clamp(16, count.max(16));
                    if wide.len() < panel * k {
                        wide.resize(panel * k, 0.0);
                    }
                    for at in (first..first + count).step_by(panel) {
                        let len = panel.min(first + count - at);
                        let dst = &mut wide[..len * k];
                        for (d, src) in dst.iter_mut().zip(&data[at * k..(at + len) * k]) {
                            *d = widen(*src);
                        }
                        unsafe {
                            sgemm_block(x, rows, k, dst, len, at, n, scale, out_ptr.0, accumulate)
                        };
                    }
                }),
            }
        });
    }
}

/// The output matrix of a GEMM, shared by tasks that write disjoint columns of it.
struct SharedOut(*mut f32);

// SAFETY: only handed to tasks that write disjoint elements (see `gemm`).
unsafe impl Sync for SharedOut {}

thread_local! {
    /// A widened bf16 weight panel: each rayon worker keeps its own, grown once.
    static WIDE: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `out[:, first..first+count] (=|+=) scale · (x[rows, k] · wᵀ)` for `w: [count, k]`,
/// `out: [rows, n]`, single-threaded.
///
/// # Safety
/// `out` points to `rows · n` f32 that nothing else reads or writes in columns
/// `first..first+count` during the call.
#[allow(clippy::too_many_arguments)] // a BLAS call
unsafe fn sgemm_block(
    x: &[f32],
    rows: usize,
    k: usize,
    w: &[f32],
    count: usize,
    first: usize,
    n: usize,
    scale: f32,
    out: *mut f32,
    accumulate: bool,
) {
    assert!(x.len() >= rows * k && w.len() >= count * k && first + count <= n);
    // SAFETY: checked above: x is [rows, k], wᵀ is [k, count], and the output block starts at
    // column `first` of a [rows, n] matrix with `first + count <= n`, in bounds by the
    // caller's promise.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            k,
            count,
            scale,
            x.as_ptr(),
            k as isize,
            1,
            w.as_ptr(),
            1,
            k as isize,
            if accumulate { 1.0 } else { 0.0 },
            out.add(first),
            n as isize,
            1,
        );
    }
}

impl CpuDevice {
    /// Prefill attention as two GEMMs per head — scores `S = Q·Kᵀ·scale`, causal softmax per
    /// row, `O = P·V` — so a long chunk runs at GEMM speed instead of one key at a time.
    #[allow(clippy::too_many_arguments)]
    fn attention_gemm(
        &self,
        q: &[f32],
        keys: &[f32],
        values: &[f32],
        rows: usize,
        start: usize,
        shape: AttentionShape,
        scale: f32,
        out: &mut [f32],
    ) {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim,
        } = shape;
        let (q_dim, kv_dim) = (heads * head_dim, kv_heads * head_dim);
        let positions = start + rows;
        let group = heads / kv_heads;
        assert!(
            q.len() >= rows * q_dim
                && out.len() >= rows * q_dim
                && keys.len() >= positions * kv_dim
        );
        // Heads are split over the threads, each with its own score matrix; the GEMMs inside
        // are single-threaded (see `gemm`).
        let slots = rayon::current_num_threads().clamp(1, heads.max(1));
        let mut guard = match self.scores.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if guard.len() < slots * rows * positions {
            guard.resize(slots * rows * positions, 0.0);
        }
        let out_ptr = SharedOut(out.as_mut_ptr());
        guard[..slots * rows * positions]
            .par_chunks_mut(rows * positions)
            .enumerate()
            .for_each(|(slot, scores)| {
                let out_ptr = &out_ptr;
                for h in (slot..heads).step_by(slots) {
                    let g = h / group;
                    // SAFETY: the asserts above bound every index the strides reach — Q_h
                    // [rows, head_dim] at row stride q_dim, K_g/V_g [positions, head_dim] at
                    // row stride kv_dim, S [rows, positions] (this slot's own), O_h [rows,
                    // head_dim] at row stride q_dim: head h's columns, written by this task
                    // alone.
                    unsafe {
                        matrixmultiply::sgemm(
                            rows,
                            head_dim,
                            positions,
                            scale,
                            q.as_ptr().add(h * head_dim),
                            q_dim as isize,
                            1,
                            keys.as_ptr().add(g * head_dim),
                            1,
                            kv_dim as isize,
                            0.0,
                            scores.as_mut_ptr(),
                            positions as isize,
                            1,
                        );
                    }
                    for (i, row) in scores.chunks_mut(positions).enumerate() {
                        let visible = start + i + 1;
                        let max = row[..visible]
                            .iter()
                            .copied()
                            .fold(f32::NEG_INFINITY, f32::max);
                        let mut sum = 0f32;
                        for v in &mut row[..visible] {
                            *v = (*v - max).exp();
                            sum += *v;
                        }
                        let inv = 1.0 / sum;
                        for v in &mut row[..visible] {
                            *v *= inv;
                        }
                        row[visible..].fill(0.0);
                    }
                    unsafe {
                        matrixmultiply::sgemm(
                            rows,
                            positions,
                            head_dim,
                            1.0,
                            scores.as_ptr(),
                            positions as isize,
                            1,
                            values.as_ptr().add(g * head_dim),
                            kv_dim as isize,
                            1,
                            0.0,
                            out_ptr.0.add(h * head_dim),
                            q_dim as isize,
                            1,
                        );
                    }
                }
            });
    }
}

impl Default for CpuDevice {
    fn default() -> Self {
        CpuDevice::new()
    }
}

fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    // Sixteen independent lanes let the compiler vectorise without reassociating floats.
    let mut acc = [0f32; 16];
    let chunks = a.len() / 16;
    for (ca, cb) in a.chunks_exact(16).zip(b.chunks_exact(16)) {
        for i in 0..16 {
            acc[i] += ca[i] * cb[i];
        }
    }
    let mut sum = 0f32;
    for i in chunks * 16..a.len() {
        sum += a[i] * b[i];
    }
    acc.iter().sum::<f32>() + sum
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_avx2_fma(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 32];
    let chunks = a.len() / 32;
    for (ca, cb) in a.chunks_exact(32).zip(b.chunks_exact(32)) {
        for i in 0..32 {
            acc[i] = ca[i].mul_add(cb[i], acc[i]);
        }
    }
    let mut sum = 0f32;
    for i in chunks * 32..a.len() {
        sum = a[i].mul_add(b[i], sum);
    }
    acc.iter().sum::<f32>() + sum
}

/// Dot product of bf16 weights with f32 activations: 8 weights widened per instruction
/// (zero-extend to 32 bits, shift into the high half), FMA into 4 accumulators.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn dot_bf16_avx2_fma(a: &[u16], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let chunks = n / 32;
    let mut acc = [_mm256_setzero_ps(); 4];
    for c in 0..chunks {
        for (j, slot) in acc.iter_mut().enumerate() {
            let off = c * 32 + j * 8;
            // SAFETY: off + 8 <= chunks·32 <= n, within both slices; unaligned loads.
            unsafe {
                let raw = _mm_loadu_si128(a.as_ptr().add(off).cast());
                let w = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
                let x = _mm256_loadu_ps(b.as_ptr().add(off));
                *slot = _mm256_fmadd_ps(w, x, *slot);
            }
        }
    }
    let mut lanes = [0f32; 8];
    let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    // SAFETY: `lanes` holds 8 f32.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), sum) };
    let mut tail = 0f32;
    for i in chunks * 32..n {
        tail = widen(a[i]).mul_add(b[i], tail);
    }
    lanes.iter().sum::<f32>() + tail
}

/// Dot product of bf16 weights with f32 activations on AVX-512F: 16 weights widened per
/// instruction, FMA into 4 accumulators. The bf16 GEMV spends most of a decode step here; with
/// AVX2 it is bound by the widening instructions, not by memory.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn dot_bf16_avx512(a: &[u16], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let chunks = n / 64;
    let mut acc = [_mm512_setzero_ps(); 4];
    for c in 0..chunks {
        for (j, slot) in acc.iter_mut().enumerate() {
            let off = c * 64 + j * 16;
            // SAFETY: off + 16 <= chunks·64 <= n, within both slices; unaligned loads.
            unsafe {
                let raw = _mm256_loadu_si256(a.as_ptr().add(off).cast());
                let w = _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(raw)));
                let x = _mm512_loadu_ps(b.as_ptr().add(off));
                *slot = _mm512_fmadd_ps(w, x, *slot);
            }
        }
    }
    let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    let mut tail = 0f32;
    for i in chunks * 64..n {
        tail = widen(a[i]).mul_add(b[i], tail);
    }
    _mm512_reduce_add_ps(sum) + tail
}

fn rms_norm_row(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let mean_square = x.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>() / x.len() as f64;
    let inv = 1.0 / (mean_square as f32 + eps).sqrt();
    for ((o, xv), wv) in out.iter_mut().zip(x).zip(w) {
        *o = wv * (xv * inv);
    }
}

impl Device for CpuDevice {
    type Matrix = CpuMatrix;
    type Vector = Vec<f32>;
    type Buffer = Vec<f32>;
    type Kv = CpuKv;

    fn name(&self) -> String {
        let simd = match self.simd {
            Simd::Portable => "portable simd",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2Fma => "avx2+fma",
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => "avx2+fma, avx-512 bf16 dot",
        };
        let weights = match self.precision {
            WeightPrecision::Bf16 => "bf16 weights",
            WeightPrecision::F32 => "f32 weights",
        };
        format!(
            "cpu ({} threads, {simd}, {weights})",
            rayon::current_num_threads()
        )
    }

    fn matrix(&self, data: Vec<f32>, rows: usize, cols: usize) -> Result<CpuMatrix, EngineError> {
        if data.len() != rows * cols {
            return Err(EngineError::Device {
                device: "cpu".into(),
                reason: format!(
                    "matrix of {} values does not have shape [{rows}, {cols}]",
                    data.len()
                ),
            });
        }
        Ok(CpuMatrix {
            data: Storage::F32(data),
            rows,
            cols,
        })
    }

    fn keeps_bf16(&self) -> bool {
        self.precision == WeightPrecision::Bf16
    }

    fn matrix_bf16(
        &self,
        data: Vec<u16>,
        rows: usize,
        cols: usize,
    ) -> Result<CpuMatrix, EngineError> {
        if data.len() != rows * cols {
            return Err(EngineError::Device {
                device: "cpu".into(),
                reason: format!(
                    "matrix of {} values does not have shape [{rows}, {cols}]",
                    data.len()
                ),
            });
        }
        if self.precision == WeightPrecision::F32 {
            return self.matrix(data.into_iter().map(widen).collect(), rows, cols);
        }
        Ok(CpuMatrix {
            data: Storage::Bf16(data),
            rows,
            cols,
        })
    }

    fn vector(&self, data: Vec<f32>) -> Result<Vec<f32>, EngineError> {
        Ok(data)
    }

    fn buffer(&self, len: usize) -> Result<Vec<f32>, EngineError> {
        Ok(vec![0.0; len])
    }

    fn matrix_bytes(&self, m: &CpuMatrix) -> usize {
        match &m.data {
            Storage::F32(d) => d.len() * 4,
            Storage::Bf16(d) => d.len() * 2,
        }
    }

    fn embed(&self, table: &CpuMatrix, tokens: &[u32], out: &mut Vec<f32>) {
        let width = table.cols;
        for (i, &t) in tokens.iter().enumerate() {
            let t = t as usize;
            let dst = &mut out[i * width..(i + 1) * width];
            match &table.data {
                Storage::F32(d) => dst.copy_from_slice(&d[t * width..(t + 1) * width]),
                Storage::Bf16(d) => {
                    for (o, b) in dst.iter_mut().zip(&d[t * width..(t + 1) * width]) {
                        *o = widen(*b);
                    }
                }
            }
        }
    }

    fn rms_norm(
        &self,
        x: &Vec<f32>,
        w: &Vec<f32>,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut Vec<f32>,
    ) {
        out[..rows * width]
            .par_chunks_mut(width)
            .zip(x[..rows * width].par_chunks(width))
            .for_each(|(o, xr)| rms_norm_row(xr, w, eps, o));
    }

    fn rms_norm_in_place(
        &self,
        x: &mut Vec<f32>,
        w: &Vec<f32>,
        rows: usize,
        width: usize,
        eps: f32,
    ) {
        let mut row_copy = [0f32; 1024];
        for row in x[..rows * width].chunks_mut(width) {
            if width <= row_copy.len() {
                let copy = &mut row_copy[..width];
                copy.copy_from_slice(row);
                rms_norm_row(copy, w, eps, row);
            } else {
                let mean_square =
                    row.iter().map(|v| (*v as f64) * (*v as f64)).sum::<f64>() / width as f64;
                let inv = 1.0 / (mean_square as f32 + eps).sqrt();
                for (v, wv) in row.iter_mut().zip(w) {
                    *v = wv * (*v * inv);
                }
            }
        }
    }

    fn matmul(&self, x: &Vec<f32>, rows: usize, w: &CpuMatrix, out: &mut Vec<f32>) {
        self.gemm(x, rows, w, 1.0, out, false);
    }

    fn lora_add(
        &self,
        x: &Vec<f32>,
        rows: usize,
        a: &CpuMatrix,
        b: &CpuMatrix,
        scale: f32,
        scratch: &mut Vec<f32>,
        out: &mut Vec<f32>,
    ) {
        self.gemm(x, rows, a, 1.0, scratch, false);
        self.gemm(scratch, rows, b, scale, out, true);
    }

    fn rope(
        &self,
        x: &mut Vec<f32>,
        rows: usize,
        heads: usize,
        head_dim: usize,
        start: usize,
        inv_freq: &Vec<f32>,
    ) {
        let half = head_dim / 2;
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

    fn silu_mul(&self, gate: &mut Vec<f32>, up: &Vec<f32>, len: usize) {
        gate[..len]
            .par_chunks_mut(4096)
            .zip(up[..len].par_chunks(4096))
            .for_each(|(g, u)| {
                for (gv, uv) in g.iter_mut().zip(u) {
                    *gv = *gv / (1.0 + (-*gv).exp()) * uv;
                }
            });
    }

    fn add(&self, x: &mut Vec<f32>, y: &Vec<f32>, len: usize) {
        for (a, b) in x[..len].iter_mut().zip(&y[..len]) {
            *a += b;
        }
    }

    fn copy(&self, src: &Vec<f32>, src_offset: usize, len: usize, dst: &mut Vec<f32>) {
        dst[..len].copy_from_slice(&src[src_offset..src_offset + len]);
    }

    fn read(&self, x: &Vec<f32>, len: usize, out: &mut Vec<f32>) -> Result<(), EngineError> {
        out.clear();
        out.extend_from_slice(&x[..len]);
        Ok(())
    }

    fn kv_alloc(&self, shape: KvShape, capacity: usize) -> Result<CpuKv, EngineError> {
        let len = shape.layers * capacity * shape.kv_dim;
        Ok(CpuKv {
            shape,
            capacity,
            k: vec![0.0; len],
            v: vec![0.0; len],
        })
    }

    fn kv_bytes_per_token(&self, shape: KvShape) -> usize {
        shape.bytes_per_token(4)
    }

    fn kv_capacity(&self, kv: &CpuKv) -> usize {
        kv.capacity
    }

    fn kv_bytes(&self, kv: &CpuKv) -> usize {
        (kv.k.len() + kv.v.len()) * 4
    }

    fn kv_grow(&self, kv: &mut CpuKv, capacity: usize) -> Result<(), EngineError> {
        if capacity <= kv.capacity {
            return Ok(());
        }
        let grown = self.kv_copy_prefix(kv, kv.capacity, capacity)?;
        *kv = grown;
        Ok(())
    }

    fn kv_copy_prefix(
        &self,
        kv: &CpuKv,
        len: usize,
        capacity: usize,
    ) -> Result<CpuKv, EngineError> {
        let mut out = self.kv_alloc(kv.shape, capacity.max(len))?;
        let d = kv.shape.kv_dim;
        let len = len.min(kv.capacity);
        for layer in 0..kv.shape.layers {
            let src = layer * kv.capacity * d;
            let dst = layer * out.capacity * d;
            out.k[dst..dst + len * d].copy_from_slice(&kv.k[src..src + len * d]);
            out.v[dst..dst + len * d].copy_from_slice(&kv.v[src..src + len * d]);
        }
        Ok(out)
    }

    fn kv_write(
        &self,
        kv: &mut CpuKv,
        layer: usize,
        start: usize,
        rows: usize,
        k: &Vec<f32>,
        v: &Vec<f32>,
    ) {
        let d = kv.shape.kv_dim;
        let at = (layer * kv.capacity + start) * d;
        kv.k[at..at + rows * d].copy_from_slice(&k[..rows * d]);
        kv.v[at..at + rows * d].copy_from_slice(&v[..rows * d]);
    }

    #[allow(clippy::too_many_arguments)] // a kernel signature, like BLAS's
    fn attention(
        &self,
        q: &Vec<f32>,
        kv: &CpuKv,
        layer: usize,
        rows: usize,
        start: usize,
        shape: AttentionShape,
        out: &mut Vec<f32>,
    ) {
        let AttentionShape {
            heads,
            kv_heads,
            head_dim,
        } = shape;
        let group = heads / kv_heads;
        let kv_dim = kv_heads * head_dim;
        let base = layer * kv.capacity * kv_dim;
        let keys = &kv.k[base..base + kv.capacity * kv_dim];
        let values = &kv.v[base..base + kv.capacity * kv_dim];
        let scale = 1.0 / (head_dim as f32).sqrt();
        if rows > 1 {
            self.attention_gemm(q, keys, values, rows, start, shape, scale, out);
            return;
        }
        out[..rows * heads * head_dim]
            .par_chunks_mut(head_dim)
            .zip(q[..rows * heads * head_dim].par_chunks(head_dim))
            .enumerate()
            .for_each(|(index, (o, qh))| {
                let (row, head) = (index / heads, index % heads);
                let kv_offset = (head / group) * head_dim;
                // Online softmax: one pass over the keys, no score buffer.
                let mut max = f32::NEG_INFINITY;
                let mut denom = 0f32;
                o.fill(0.0);
                for p in 0..=start + row {
                    let at = p * kv_dim + kv_offset;
                    let score = self.dot(qh, &keys[at..at + head_dim]) * scale;
                    if score > max {
                        let rescale = (max - score).exp();
                        denom *= rescale;
                        for ov in o.iter_mut() {
                            *ov *= rescale;
                        }
                        max = score;
                    }
                    let weight = (score - max).exp();
                    denom += weight;
                    for (ov, vv) in o.iter_mut().zip(&values[at..at + head_dim]) {
                        *ov += weight * vv;
                    }
                }
                let inv = 1.0 / denom;
                for ov in o.iter_mut() {
                    *ov *= inv;
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The multi-row GEMM (column bands over threads, bf16 widened a panel at a time) equals
    /// the plain sum in both precisions, with a scale and accumulating, where the bands and
    /// panels do not divide the matrix evenly.
    #[test]
    fn banded_gemm_matches_the_plain_product() {
        let (rows, n, k) = (3usize, 100usize, 70_001usize);
        let mut seed = 0x2545_f491_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) - 0.5
        };
        let bits: Vec<u16> = (0..n * k)
            .map(|_| (next().to_bits() >> 16) as u16)
            .collect();
        let x: Vec<f32> = (0..rows * k).map(|_| next()).collect();
        let start: Vec<f32> = (0..rows * n).map(|_| next()).collect();
        for precision in [WeightPrecision::Bf16, WeightPrecision::F32] {
            let dev = CpuDevice::with_precision(precision);
            let w = dev.matrix_bf16(bits.clone(), n, k).expect("matrix");
            let mut out = start.clone();
            dev.gemm(&x, rows, &w, 0.5, &mut out, true);
            for r in 0..rows {
                for j in 0..n {
                    let dot: f64 = (0..k)
                        .map(|i| widen(bits[j * k + i]) as f64 * x[r * k + i] as f64)
                        .sum();
                    let want = start[r * n + j] as f64 + 0.5 * dot;
                    let got = out[r * n + j] as f64;
                    assert!(
                        (got - want).abs() <= 1e-3 * (1.0 + want.abs()),
                        "{precision:?} [{r}, {j}]: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// Every SIMD form of the bf16 dot this CPU has agrees with the plain sum, at lengths that
    /// leave tails of every size behind the vector loops.
    #[test]
    fn the_bf16_dot_forms_agree_with_the_portable_sum() {
        let mut seed = 0x9e37_79b9_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) - 0.5
        };
        for len in [
            0usize, 1, 7, 15, 16, 31, 33, 63, 64, 65, 127, 1024, 3072, 3079,
        ] {
            let weights: Vec<u16> = (0..len).map(|_| (next().to_bits() >> 16) as u16).collect();
            let x: Vec<f32> = (0..len).map(|_| next()).collect();
            let want: f64 = weights
                .iter()
                .zip(&x)
                .map(|(w, v)| widen(*w) as f64 * *v as f64)
                .sum();
            let close = |got: f32, form: &str| {
                assert!(
                    (got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{form}, len {len}: {got} vs {want}"
                );
            };
            close(
                weights.iter().zip(&x).map(|(w, v)| widen(*w) * v).sum(),
                "portable",
            );
            #[cfg(target_arch = "x86_64")]
            {
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the features were just detected.
                    close(unsafe { dot_bf16_avx2_fma(&weights, &x) }, "avx2+fma");
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the feature was just detected.
                    close(unsafe { dot_bf16_avx512(&weights, &x) }, "avx-512");
                }
            }
        }
    }
}
