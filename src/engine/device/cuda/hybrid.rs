//! The CUDA device's hybrid (Qwen3.5-MoE) kernels: launches of src/engine/kernels/hybrid.cu
//! with every buffer length checked on the host first (a wrong size is an error at the next
//! `read`, never an out-of-bounds access on the GPU), and the routing lists of the experts
//! passed inside the launch when short (decode) or uploaded when long (prefill).

use cudarc::driver::{CudaSlice, LaunchConfig};

use super::{CudaDevice, Scratch, cfg, elementwise_cfg, grid_1d};
use crate::engine::device::{DeltaShape, Device, HybridDevice};
use crate::engine::error::EngineError;

/// Routing lists up to this long travel in the launch (ROWS_INLINE in hybrid.cu).
pub const ROWS_INLINE: usize = 16;

/// Largest key head dimension whose state column the register kernel holds (GDR_MAX_DK).
pub const GDR_MAX_DK: usize = 128;

/// Largest value head dimension the register kernel covers (one thread per column).
const GDR_MAX_DV: usize = 1024;

/// Shared memory the wide delta-rule kernel may ask for (q and k of one head).
const GDR_WIDE_MAX_SHARED: usize = 48 * 1024;

/// A routing list as the kernels read it: the inline copy (first ROWS_INLINE entries) and,
/// when longer, a device pointer to an uploaded copy (0 otherwise).
struct RowList {
    rows: [u32; ROWS_INLINE],
    weights: [f32; ROWS_INLINE],
    rows_ptr: u64,
    weights_ptr: u64,
}

impl CudaDevice {
    /// Whether every (available, needed) length pair fits; notes an error naming `what` if not.
    fn fits(&self, what: &str, lengths: &[(usize, usize)]) -> bool {
        for &(have, need) in lengths {
            if need > have {
                self.note(
                    what,
                    Err::<(), _>(format!("needs {need} elements of a buffer holding {have}")),
                );
                return false;
            }
        }
        true
    }

    /// The kernel form of `rows` (and `weights`, if given): inline when short, else uploaded
    /// into the scratch lists, which the caller keeps locked until its launch is queued (so
    /// no other caller's upload lands in between). None when the upload failed (noted).
    fn row_list(&self, s: &mut Scratch, rows: &[u32], weights: Option<&[f32]>) -> Option<RowList> {
        let mut list = RowList {
            rows: [0; ROWS_INLINE],
            weights: [0.0; ROWS_INLINE],
            rows_ptr: 0,
            weights_ptr: 0,
        };
        if rows.len() <= ROWS_INLINE {
            list.rows[..rows.len()].copy_from_slice(rows);
            if let Some(w) = weights {
                list.weights[..w.len()].copy_from_slice(w);
            }
            return Some(list);
        }
        self.ensure(&mut s.route_rows, rows.len());
        if s.route_rows.len() < rows.len() {
            return None; // the allocation failure is noted
        }
        // Same stream as the kernels: this copy waits for the previous list's readers.
        let r = self
            .stream
            .memcpy_htod(rows, &mut s.route_rows.slice_mut(0..rows.len()));
        self.note("uploading a routing list", r);
        list.rows_ptr = self.ptr(&s.route_rows);
        if let Some(w) = weights {
            self.ensure(&mut s.route_weights, w.len());
            if s.route_weights.len() < w.len() {
                return None;
            }
            let r = self
                .stream
                .memcpy_htod(w, &mut s.route_weights.slice_mut(0..w.len()));
            self.note("uploading routing weights", r);
            list.weights_ptr = self.ptr(&s.route_weights);
        }
        Some(list)
    }
}

/// Which delta-rule kernel runs a shape, and its launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DeltaPlan {
    /// The global-memory kernel (else the register one).
    wide: bool,
    /// Blocks: one per value head.
    grid: u32,
    threads: u32,
    shared_bytes: u32,
}

fn delta_plan(shape: DeltaShape) -> Result<DeltaPlan, String> {
    let DeltaShape {
        key_heads,
        value_heads,
        key_dim: dk,
        value_dim: dv,
    } = shape;
    if key_heads == 0 || value_heads % key_heads != 0 || dk == 0 || dv == 0 {
        return Err(format!("unsupported shape {shape:?}"));
    }
    let grid = u32::try_from(value_heads).map_err(|_| format!("{value_heads} value heads"))?;
    if dk <= GDR_MAX_DK && dv <= GDR_MAX_DV {
        // A thread per state column; block_sum wants whole warps.
        return Ok(DeltaPlan {
            wide: false,
            grid,
            threads: (dv.div_ceil(32) * 32) as u32,
            shared_bytes: 0,
        });
    }
    let shared = 2 * dk * 4;
    if shared > GDR_WIDE_MAX_SHARED {
        return Err(format!("key head dimension {dk} is too large"));
    }
    Ok(DeltaPlan {
        wide: true,
        grid,
        threads: 256,
        shared_bytes: shared as u32,
    })
}

/// Threads per block for a row-wise reduction over `width` entries.
fn row_block(width: usize) -> u32 {
    if width <= 128 { 128 } else { 256 }
}

impl HybridDevice for CudaDevice {
    fn split_halves(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        heads: usize,
        head_dim: usize,
        a: &mut CudaSlice<f32>,
        b: &mut CudaSlice<f32>,
    ) {
        let n = rows * heads * head_dim;
        if !self.fits(
            "split_halves",
            &[(x.len(), 2 * n), (a.len(), n), (b.len(), n)],
        ) {
            return;
        }
        let (xp, ap, bp) = (self.ptr(x), self.ptr_mut(a), self.ptr_mut(b));
        let (n64, d) = (n as i64, head_dim as i32);
        self.launch(
            "split_halves",
            &self.k.split_halves,
            elementwise_cfg(n),
            &[&xp, &ap, &bp, &n64, &d],
        );
    }

    fn sigmoid_mul(&self, x: &mut CudaSlice<f32>, gate: &CudaSlice<f32>, len: usize) {
        if !self.fits("sigmoid_mul", &[(x.len(), len), (gate.len(), len)]) {
            return;
        }
        let (xp, gp, n) = (self.ptr_mut(x), self.ptr(gate), len as i64);
        self.launch(
            "sigmoid_mul",
            &self.k.sigmoid_mul,
            elementwise_cfg(len),
            &[&xp, &gp, &n],
        );
    }

    fn rope_partial(
        &self,
        x: &mut CudaSlice<f32>,
        rows: usize,
        heads: usize,
        head_dim: usize,
        rotary_dim: usize,
        start: usize,
        inv_freq: &CudaSlice<f32>,
    ) {
        if rotary_dim > head_dim {
            self.note(
                "rope_partial",
                Err::<(), _>(format!(
                    "rotary_dim {rotary_dim} is above head_dim {head_dim}"
                )),
            );
            return;
        }
        if !self.fits(
            "rope_partial",
            &[
                (x.len(), rows * heads * head_dim),
                (inv_freq.len(), rotary_dim / 2),
            ],
        ) {
            return;
        }
        let (xp, fp) = (self.ptr_mut(x), self.ptr(inv_freq));
        let (r, h, d, rd, s) = (
            rows as i32,
            heads as i32,
            head_dim as i32,
            rotary_dim as i32,
            start as i32,
        );
        self.launch(
            "rope_partial",
            &self.k.rope_partial,
            cfg((grid_1d(rows, 1), 1, 1), 256),
            &[&xp, &fp, &r, &h, &d, &rd, &s],
        );
    }

    fn conv1d_silu(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        channels: usize,
        kernel: usize,
        weight: &CudaSlice<f32>,
        state: &mut CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) {
        if kernel == 0 {
            self.note("conv1d_silu", Err::<(), _>("a conv1d kernel of width 0"));
            return;
        }
        if !self.fits(
            "conv1d_silu",
            &[
                (x.len(), rows * channels),
                (out.len(), rows * channels),
                (weight.len(), channels * kernel),
                (state.len(), channels * (kernel - 1)),
            ],
        ) {
            return;
        }
        let (xp, wp, sp, op) = (
            self.ptr(x),
            self.ptr(weight),
            self.ptr_mut(state),
            self.ptr_mut(out),
        );
        let (r, c, k) = (rows as i32, channels as i32, kernel as i32);
        self.launch(
            "conv1d_silu",
            &self.k.conv1d_silu,
            cfg((grid_1d(channels, 256), 1, 1), 256),
            &[&xp, &r, &c, &k, &wp, &sp, &op],
        );
    }

    fn gated_delta_rule(
        &self,
        qkv: &CudaSlice<f32>,
        b: &CudaSlice<f32>,
        a: &CudaSlice<f32>,
        rows: usize,
        shape: DeltaShape,
        a_log: &CudaSlice<f32>,
        dt_bias: &CudaSlice<f32>,
        state: &mut CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) {
        let DeltaShape {
            key_heads,
            value_heads,
            key_dim: dk,
            value_dim: dv,
        } = shape;
        let plan = match delta_plan(shape) {
            Ok(plan) => plan,
            Err(e) => {
                self.note("gated_delta_rule", Err::<(), _>(e));
                return;
            }
        };
        if !self.fits(
            "gated_delta_rule",
            &[
                (qkv.len(), rows * shape.qkv_width()),
                (b.len(), rows * value_heads),
                (a.len(), rows * value_heads),
                (a_log.len(), value_heads),
                (dt_bias.len(), value_heads),
                (state.len(), shape.state_len()),
                (out.len(), rows * value_heads * dv),
            ],
        ) {
            return;
        }
        let (qp, bp, ap, lp, dp, sp, op) = (
            self.ptr(qkv),
            self.ptr(b),
            self.ptr(a),
            self.ptr(a_log),
            self.ptr(dt_bias),
            self.ptr_mut(state),
            self.ptr_mut(out),
        );
        let (r, kh, vh, k32, v32) = (
            rows as i32,
            key_heads as i32,
            value_heads as i32,
            dk as i32,
            dv as i32,
        );
        let args: [&dyn super::KernelArg; 12] =
            [&qp, &bp, &ap, &r, &kh, &vh, &k32, &v32, &lp, &dp, &sp, &op];
        let (what, f) = if plan.wide {
            ("gated_delta_rule (wide)", &self.k.gated_delta_rule_wide)
        } else {
            ("gated_delta_rule", &self.k.gated_delta_rule)
        };
        let config = LaunchConfig {
            grid_dim: (plan.grid, 1, 1),
            block_dim: (plan.threads, 1, 1),
            shared_mem_bytes: plan.shared_bytes,
        };
        self.launch(what, f, config, &args);
    }

    fn gated_rms_norm(
        &self,
        x: &mut CudaSlice<f32>,
        z: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        rows: usize,
        width: usize,
        eps: f32,
    ) {
        if !self.fits(
            "gated_rms_norm",
            &[
                (x.len(), rows * width),
                (z.len(), rows * width),
                (w.len(), width),
            ],
        ) {
            return;
        }
        let (xp, zp, wp) = (self.ptr_mut(x), self.ptr(z), self.ptr(w));
        let (r, wd) = (rows as i32, width as i32);
        self.launch(
            "gated_rms_norm",
            &self.k.gated_rms_norm,
            cfg((grid_1d(rows, 1), 1, 1), row_block(width)),
            &[&xp, &zp, &wp, &r, &wd, &eps],
        );
    }

    fn silu_mul_halves(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        half: usize,
        out: &mut CudaSlice<f32>,
    ) {
        let n = rows * half;
        if !self.fits("silu_mul_halves", &[(x.len(), 2 * n), (out.len(), n)]) {
            return;
        }
        let (xp, op, n64, h) = (self.ptr(x), self.ptr_mut(out), n as i64, half as i32);
        self.launch(
            "silu_mul_halves",
            &self.k.silu_mul_halves,
            elementwise_cfg(n),
            &[&xp, &op, &n64, &h],
        );
    }

    fn gather_rows(
        &self,
        x: &CudaSlice<f32>,
        width: usize,
        rows: &[u32],
        out: &mut CudaSlice<f32>,
    ) {
        if rows.is_empty() {
            return;
        }
        let highest = rows.iter().copied().max().unwrap_or(0) as usize;
        if !self.fits(
            "gather_rows",
            &[
                (x.len(), (highest + 1).saturating_mul(width)),
                (out.len(), rows.len() * width),
            ],
        ) {
            return;
        }
        let Ok(mut scratch) = self.scratch.lock() else {
            self.note("gather_rows", Err::<(), _>("scratch lock poisoned"));
            return;
        };
        let Some(list) = self.row_list(&mut scratch, rows, None) else {
            return;
        };
        let (xp, op, count, w) = (
            self.ptr(x),
            self.ptr_mut(out),
            rows.len() as i32,
            width as i32,
        );
        self.launch(
            "gather_rows",
            &self.k.gather_rows,
            cfg((rows.len() as u32, 1, 1), 256),
            &[&xp, &op, &list.rows_ptr, &list.rows, &count, &w],
        );
    }

    fn scatter_add_rows(
        &self,
        y: &CudaSlice<f32>,
        width: usize,
        rows: &[u32],
        weights: &[f32],
        out: &mut CudaSlice<f32>,
    ) {
        if rows.len() != weights.len() {
            self.note(
                "scatter_add_rows",
                Err::<(), _>(format!("{} rows but {} weights", rows.len(), weights.len())),
            );
            return;
        }
        if rows.is_empty() {
            return;
        }
        let highest = rows.iter().copied().max().unwrap_or(0) as usize;
        if !self.fits(
            "scatter_add_rows",
            &[
                (y.len(), rows.len() * width),
                (out.len(), (highest + 1).saturating_mul(width)),
            ],
        ) {
            return;
        }
        let Ok(mut scratch) = self.scratch.lock() else {
            self.note("scatter_add_rows", Err::<(), _>("scratch lock poisoned"));
            return;
        };
        let Some(list) = self.row_list(&mut scratch, rows, Some(weights)) else {
            return;
        };
        let (yp, op, count, w) = (
            self.ptr(y),
            self.ptr_mut(out),
            rows.len() as i32,
            width as i32,
        );
        self.launch(
            "scatter_add_rows",
            &self.k.scatter_add_rows,
            cfg((grid_1d(width, 256), 1, 1), 256),
            &[
                &yp,
                &op,
                &list.rows_ptr,
                &list.weights_ptr,
                &list.rows,
                &list.weights,
                &count,
                &w,
            ],
        );
    }

    fn add_sigmoid_scaled(
        &self,
        out: &mut CudaSlice<f32>,
        y: &CudaSlice<f32>,
        g: &CudaSlice<f32>,
        rows: usize,
        width: usize,
    ) {
        let n = rows * width;
        if width == 0
            || !self.fits(
                "add_sigmoid_scaled",
                &[(out.len(), n), (y.len(), n), (g.len(), rows)],
            )
        {
            return;
        }
        let (op, yp, gp, n64, w) = (
            self.ptr_mut(out),
            self.ptr(y),
            self.ptr(g),
            n as i64,
            width as i32,
        );
        self.launch(
            "add_sigmoid_scaled",
            &self.k.add_sigmoid_scaled,
            elementwise_cfg(n),
            &[&op, &yp, &gp, &n64, &w],
        );
    }

    fn zero(&self, x: &mut CudaSlice<f32>, len: usize) {
        if len == 0 || !self.fits("zero", &[(x.len(), len)]) {
            return;
        }
        let r = self.stream.memset_zeros(&mut x.slice_mut(0..len));
        self.note("zeroing a buffer", r);
    }

    fn duplicate(&self, x: &CudaSlice<f32>, len: usize) -> Result<CudaSlice<f32>, EngineError> {
        if len > x.len() {
            return Err(self.err(format!(
                "duplicating {len} entries of a buffer holding {}",
                x.len()
            )));
        }
        let mut copy = self.buffer(len)?;
        if len > 0 {
            let r = self
                .stream
                .memcpy_dtod(&x.slice(0..len), &mut copy.slice_mut(0..len));
            self.note("duplicating a buffer", r);
        }
        self.failed()?;
        Ok(copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(key_heads: usize, value_heads: usize, key_dim: usize, value_dim: usize) -> DeltaShape {
        DeltaShape {
            key_heads,
            value_heads,
            key_dim,
            value_dim,
        }
    }

    #[test]
    fn delta_rule_launches_fit_the_tall_shape_and_the_fixture() {
        // Macaron-V1-Tall: 16 key / 32 value heads × 128: the register kernel, a block per
        // value head, a thread per state column (128 floats of state each).
        let tall = delta_plan(shape(16, 32, 128, 128)).expect("tall");
        assert_eq!(
            tall,
            DeltaPlan {
                wide: false,
                grid: 32,
                threads: 128,
                shared_bytes: 0
            }
        );
        // The fixture: dv 24 rounds up to one warp.
        let tiny = delta_plan(shape(2, 4, 16, 24)).expect("fixture");
        assert_eq!((tiny.wide, tiny.grid, tiny.threads), (false, 4, 32));
        // Past the register kernel: the wide one with q and k in dynamic shared memory.
        let wide = delta_plan(shape(1, 3, 160, 40)).expect("wide");
        assert_eq!(
            (wide.wide, wide.threads, wide.shared_bytes),
            (true, 256, 1280)
        );
        let tall_dv = delta_plan(shape(1, 2, 64, 2048)).expect("wide dv");
        assert!(tall_dv.wide);
    }

    #[test]
    fn delta_rule_refuses_shapes_it_cannot_run() {
        for bad in [
            shape(0, 4, 16, 16),
            shape(3, 4, 16, 16),
            shape(2, 4, 0, 16),
            shape(2, 4, 16, 0),
            shape(1, 1, 8192, 16),
        ] {
            assert!(delta_plan(bad).is_err(), "{bad:?}");
        }
    }
}
