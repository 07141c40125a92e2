//! The CUDA device (cudarc, loaded at run time): weights kept in bf16 on the GPU when they are
//! exactly bf16 (else f32, e.g. LoRA B with its scale folded in), f32 activations and KV cache,
//! NVRTC-compiled kernels (src/engine/kernels) for everything but large GEMMs, which go through
//! cuBLAS in bf16 with f32 accumulation. One stream; kernels report errors on the next `read`.

mod hybrid;
pub mod kernels;
pub(crate) mod probe;

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, DevicePtrMut, LaunchConfig,
    PushKernelArg,
};

use super::{AttentionShape, Device, KvShape};
use crate::engine::error::EngineError;
use kernels::Kernels;

pub use probe::{Selected, missing_libraries, open, select};

/// Up to this many rows a product is a GEMV kernel (weights read once, bandwidth bound);
/// above, cuBLAS. Must match GEMV_MAX_ROWS in matvec.cu.
pub const GEMV_MAX_ROWS: usize = 8;

/// Threads per block of the attention kernel (ATT_WARPS * 32 in attention.cu).
const ATTENTION_THREADS: u32 = 256;

/// Decode attention splits the key positions over at most this many blocks per (head, row)…
const MAX_ATTENTION_SPLITS: usize = 256;
/// …of at least this many positions each (8 per warp).
const MIN_POSITIONS_PER_SPLIT: usize = 64;

/// Largest head_dim the attention kernel holds in registers (ATT_MAX_DIMS_PER_LANE * 32).
pub const MAX_HEAD_DIM: usize = 256;

/// A weight's storage on the GPU.
pub enum Storage {
    Bf16(CudaSlice<u16>),
    F32(CudaSlice<f32>),
}

/// A weight matrix `[rows = out, cols = in]`, row-major.
pub struct CudaMatrix {
    data: Storage,
    rows: usize,
    cols: usize,
}

impl CudaMatrix {
    pub fn is_bf16(&self) -> bool {
        matches!(self.data, Storage::Bf16(_))
    }
}

/// K and V of one sequence, f32: `[layer][position][kv_dim]` each.
pub struct CudaKv {
    shape: KvShape,
    capacity: usize,
    k: CudaSlice<f32>,
    v: CudaSlice<f32>,
}

/// Buffers reused across calls, grown on demand.
struct Scratch {
    tokens: CudaSlice<u32>,
    hi: CudaSlice<u16>,
    lo: CudaSlice<u16>,
    /// All zeros: "every row uses adapter 0" for the stacked LoRA kernels.
    adapter_zero: CudaSlice<i32>,
    scale_one: CudaSlice<f32>,
    /// The scale of the LoRA product being launched (when it is not 1).
    scale_call: CudaSlice<f32>,
    choice: CudaSlice<i32>,
    /// Split-K attention partials: rows × heads × splits × (head_dim + 2).
    attention_parts: CudaSlice<f32>,
    /// An expert's token rows and routing weights when too many to pass in the launch.
    route_rows: CudaSlice<u32>,
    route_weights: CudaSlice<f32>,
}

/// One NVIDIA GPU.
pub struct CudaDevice {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    k: Kernels,
    name: String,
    scratch: Mutex<Scratch>,
    /// The first failure of a kernel launch or copy; reported by `read` (kernels return `()`).
    error: Mutex<Option<String>>,
}

fn grid_1d(n: usize, per_block: usize) -> u32 {
    n.div_ceil(per_block).max(1) as u32
}

fn cfg(grid: (u32, u32, u32), block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Grid for grid-stride element-wise kernels.
fn elementwise_cfg(n: usize) -> LaunchConfig {
    cfg((grid_1d(n, 256).min(65_535), 1, 1), 256)
}

impl CudaDevice {
    /// Creates the context, stream, cuBLAS handle and kernels. Call through `probe::open`, which
    /// checks the libraries first and catches panics.
    fn create(ordinal: usize) -> Result<CudaDevice, EngineError> {
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| EngineError::cuda(format!("no usable GPU {ordinal}: {e}")))?;
        // One stream and raw pointers: cudarc's per-buffer event tracking would only add work
        // (and would break CUDA graph capture later).
        // SAFETY: called before any allocation on this context.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| EngineError::cuda(format!("compute capability: {e}")))?;
        if major < 8 {
            return Err(EngineError::cuda(format!(
                "compute capability {major}.{minor} has no bf16 support (need 8.0 or newer)"
            )));
        }
        let arch = kernels::arch_for(major, minor);
        let (ptx, cached) = kernels::ptx_for(arch)?;
        let k = match Kernels::load(&ctx, ptx) {
            Ok(k) => k,
            // A cached PTX from another NVRTC may be too new for this driver: compile afresh.
            Err(_) if cached => {
                Kernels::load(&ctx, kernels::compile(&kernels::full_source(), arch)?)?
            }
            Err(e) => return Err(e),
        };
        let stream = ctx.default_stream();
        let blas =
            CudaBlas::new(stream.clone()).map_err(|e| EngineError::cuda(format!("cuBLAS: {e}")))?;
        let gpu = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let mem = ctx.total_mem().unwrap_or(0) as f64 / (1u64 << 30) as f64;
        let alloc = |what: &str, e: cudarc::driver::DriverError| {
            EngineError::cuda(format!("allocating {what}: {e}"))
        };
        let scratch = Scratch {
            tokens: stream.alloc_zeros(1).map_err(|e| alloc("tokens", e))?,
            hi: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
            lo: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
            adapter_zero: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
            scale_one: stream
                .clone_htod(&[1.0f32])
                .map_err(|e| alloc("scratch", e))?,
            scale_call: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
            choice: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
            attention_parts: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
            route_rows: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
            route_weights: stream.alloc_zeros(1).map_err(|e| alloc("scratch", e))?,
        };
        Ok(CudaDevice {
            name: format!("cuda:{ordinal} ({gpu}, sm_{major}{minor}, {mem:.0} GiB, bf16 weights)"),
            ctx,
            stream,
            blas,
            k,
            scratch: Mutex::new(scratch),
            error: Mutex::new(None),
        })
    }

    /// Keeps the first error; later kernels still run (their results are discarded by `read`).
    fn note<T, E: std::fmt::Display>(&self, what: &str, r: Result<T, E>) {
        if let Err(e) = r
            && let Ok(mut slot) = self.error.lock()
            && slot.is_none()
        {
            *slot = Some(format!("{what}: {e}"));
        }
    }

    fn failed(&self) -> Result<(), EngineError> {
        match self.error.lock().ok().and_then(|s| s.clone()) {
            Some(reason) => Err(self.err(reason)),
            None => Ok(()),
        }
    }

    fn err(&self, reason: impl Into<String>) -> EngineError {
        EngineError::cuda(reason)
    }

    fn ptr<T>(&self, s: &CudaSlice<T>) -> u64 {
        // Event tracking is off, so the returned guard does nothing.
        s.device_ptr(&self.stream).0
    }

    fn ptr_mut<T>(&self, s: &mut CudaSlice<T>) -> u64 {
        s.device_ptr_mut(&self.stream).0
    }

    fn storage_ptr(&self, s: &Storage) -> u64 {
        match s {
            Storage::Bf16(d) => self.ptr(d),
            Storage::F32(d) => self.ptr(d),
        }
    }

    /// Launches `f` with `args` (each a `DeviceRepr` value: raw pointers as u64, ints, floats).
    fn launch(&self, what: &str, f: &CudaFunction, config: LaunchConfig, args: &[&dyn KernelArg]) {
        let mut b = self.stream.launch_builder(f);
        for a in args {
            a.push(&mut b);
        }
        // SAFETY: every kernel's argument list is written next to its CUDA signature below and
        // the pointers come from live allocations of the sizes the kernel indexes.
        let r = unsafe { b.launch(config) };
        self.note(what, r);
    }

    /// Grows a scratch slice to at least `len` elements.
    fn ensure<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        slot: &mut CudaSlice<T>,
        len: usize,
    ) {
        if slot.len() < len {
            match self.stream.alloc_zeros::<T>(len.next_power_of_two()) {
                Ok(s) => *slot = s,
                Err(e) => self.note("growing a scratch buffer", Err::<(), _>(e)),
            }
        }
    }

    /// Copies f32 host data to a new device buffer (tests, benchmarks).
    pub fn upload(&self, data: &[f32]) -> Result<CudaSlice<f32>, EngineError> {
        self.stream
            .clone_htod(data)
            .map_err(|e| self.err(format!("upload of {} f32: {e}", data.len())))
    }

    /// The index of the largest of the first `n` values of `logits` (lowest on ties), on device.
    pub fn argmax(&self, logits: &CudaSlice<f32>, n: usize) -> Result<u32, EngineError> {
        self.sample(logits, n, 0.0, 1.0, 0, 0)
    }

    /// Samples a token from softmax(logits / temperature) within the top-p nucleus with the
    /// device's Philox generator at (seed, counter); temperature ≤ 0 is argmax.
    pub fn sample(
        &self,
        logits: &CudaSlice<f32>,
        n: usize,
        temperature: f32,
        top_p: f32,
        seed: u64,
        counter: u64,
    ) -> Result<u32, EngineError> {
        let Ok(mut s) = self.scratch.lock() else {
            return Err(self.err("scratch lock poisoned"));
        };
        let out = self.ptr_mut(&mut s.choice);
        let (l, n32) = (self.ptr(logits), n as i32);
        if temperature <= 0.0 {
            self.launch(
                "argmax",
                &self.k.argmax_f32,
                cfg((1, 1, 1), 1024),
                &[&l, &n32, &out],
            );
        } else {
            self.launch(
                "sample_top_p",
                &self.k.sample_top_p,
                cfg((1, 1, 1), 1024),
                &[&l, &n32, &temperature, &top_p, &seed, &counter, &out],
            );
        }
        let mut host = [0i32; 1];
        let r = self.stream.memcpy_dtoh(&s.choice.slice(0..1), &mut host);
        self.note("reading the chosen token", r);
        self.note("synchronising", self.stream.synchronize());
        self.failed()?;
        Ok(host[0].max(0) as u32)
    }

    /// `out[rows, w.rows] = x[rows, w.cols] · wᵀ` through cuBLAS: f32 weights by SGEMM; bf16
    /// weights by two bf16 GEMMs (f32 accumulate) over the hi and lo bf16 halves of x.
    fn gemm(&self, x: u64, rows: usize, w: &CudaMatrix, out: u64) {
        let (n, k) = (w.rows, w.cols);
        // cuBLAS uses the thread's current context; the engine may call from any thread.
        self.note("binding the CUDA context", self.ctx.bind_to_thread());
        let handle = *self.blas.handle();
        let (m_, n_, k_) = (n as i32, rows as i32, k as i32);
        let (t, nt) = (
            cublasOperation_t::CUBLAS_OP_T,
            cublasOperation_t::CUBLAS_OP_N,
        );
        // Row-major Y[rows, n] = X[rows, k] · W[n, k]ᵀ is column-major Yᵀ = (W as k×n)ᵀ · Xᵀ.
        match &w.data {
            Storage::F32(wd) => {
                let (alpha, beta) = (1.0f32, 0.0f32);
                // SAFETY: W holds n·k, X rows·k and Y rows·n f32 on this stream's context.
                let r = unsafe {
                    cudarc::cublas::result::sgemm(
                        handle,
                        t,
                        nt,
                        m_,
                        n_,
                        k_,
                        &alpha,
                        self.ptr(wd) as *const f32,
                        k_,
                        x as *const f32,
                        k_,
                        &beta,
                        out as *mut f32,
                        m_,
                    )
                };
                self.note("cublasSgemm", r);
            }
            Storage::Bf16(wd) => {
                let Ok(mut s) = self.scratch.lock() else {
                    return;
                };
                let len = rows * k;
                self.ensure(&mut s.hi, len);
                self.ensure(&mut s.lo, len);
                let (hi, lo) = (self.ptr_mut(&mut s.hi), self.ptr_mut(&mut s.lo));
                let n64 = len as i64;
                self.launch(
                    "split_bf16",
                    &self.k.split_bf16,
                    elementwise_cfg(len),
                    &[&x, &hi, &lo, &n64],
                );
                let wp = self.ptr(wd);
                for (half, beta) in [(hi, 0.0f32), (lo, 1.0f32)] {
                    let alpha = 1.0f32;
                    // SAFETY: W holds n·k bf16, the half rows·k bf16, Y rows·n f32.
                    let r = unsafe {
                        cudarc::cublas::result::gemm_ex(
                            handle,
                            t,
                            nt,
                            m_,
                            n_,
                            k_,
                            &alpha as *const f32 as *const c_void,
                            wp as *const c_void,
                            cudaDataType::CUDA_R_16BF,
                            k_,
                            half as *const c_void,
                            cudaDataType::CUDA_R_16BF,
                            k_,
                            &beta as *const f32 as *const c_void,
                            out as *mut c_void,
                            cudaDataType::CUDA_R_32F,
                            m_,
                            cublasComputeType_t::CUBLAS_COMPUTE_32F,
                            cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                        )
                    };
                    self.note("cublasGemmEx (bf16)", r);
                }
            }
        }
    }

    /// `out[rows, w.rows] (+)= x · wᵀ` for rows ≤ GEMV_MAX_ROWS.
    fn gemv(&self, x: u64, rows: usize, w: &CudaMatrix, out: u64, accumulate: bool) {
        let (o, i, r, acc) = (w.rows as i32, w.cols as i32, rows as i32, accumulate as i32);
        let wp = self.storage_ptr(&w.data);
        let f = match w.data {
            Storage::Bf16(_) => &self.k.gemv_bf16,
            Storage::F32(_) => &self.k.gemv_f32,
        };
        self.launch(
            "gemv",
            f,
            cfg((grid_1d(w.rows, 8), 1, 1), 256),
            &[&wp, &x, &out, &o, &i, &r, &acc],
        );
    }
}

/// A kernel argument of any `DeviceRepr` type, so launches can take a slice of them.
trait KernelArg {
    fn push<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>);
}

impl<T: cudarc::driver::DeviceRepr> KernelArg for T {
    fn push<'a>(&'a self, b: &mut cudarc::driver::LaunchArgs<'a>) {
        b.arg(self);
    }
}

fn exactly_bf16(data: &[f32]) -> bool {
    data.iter().all(|v| v.to_bits() & 0xffff == 0)
}

impl Device for CudaDevice {
    type Matrix = CudaMatrix;
    type Vector = CudaSlice<f32>;
    type Buffer = CudaSlice<f32>;
    type Kv = CudaKv;

    fn name(&self) -> String {
        self.name.clone()
    }

    fn matrix(&self, data: Vec<f32>, rows: usize, cols: usize) -> Result<CudaMatrix, EngineError> {
        if data.len() != rows * cols {
            return Err(self.err(format!(
                "matrix of {} values does not have shape [{rows}, {cols}]",
                data.len()
            )));
        }
        let bytes = |b: usize| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
        // Weights read from bf16 files are exact in bf16: keep half the bytes. Anything else
        // (f32 adapters, scaled LoRA B) stays f32 so the results match the CPU device.
        let storage = if exactly_bf16(&data) {
            let halves: Vec<u16> = data.iter().map(|v| (v.to_bits() >> 16) as u16).collect();
            Storage::Bf16(self.stream.clone_htod(&halves).map_err(|e| {
                self.err(format!(
                    "uploading a [{rows}, {cols}] matrix ({}): {e}",
                    bytes(rows * cols * 2)
                ))
            })?)
        } else {
            Storage::F32(self.stream.clone_htod(&data).map_err(|e| {
                self.err(format!(
                    "uploading a [{rows}, {cols}] matrix ({}): {e}",
                    bytes(rows * cols * 4)
                ))
            })?)
        };
        Ok(CudaMatrix {
            data: storage,
            rows,
            cols,
        })
    }

    fn keeps_bf16(&self) -> bool {
        true
    }

    /// bf16 checkpoint tensors go up as they are stored: no f32 copy on the host (a stack of
    /// 256 experts would otherwise be widened to 2 GB per layer during the load).
    fn matrix_bf16(
        &self,
        data: Vec<u16>,
        rows: usize,
        cols: usize,
    ) -> Result<CudaMatrix, EngineError> {
        if data.len() != rows * cols {
            return Err(self.err(format!(
                "matrix of {} values does not have shape [{rows}, {cols}]",
                data.len()
            )));
        }
        let stored = self.stream.clone_htod(&data).map_err(|e| {
            self.err(format!(
                "uploading a [{rows}, {cols}] bf16 matrix ({:.1} MiB): {e}",
                (rows * cols * 2) as f64 / (1u64 << 20) as f64
            ))
        })?;
        Ok(CudaMatrix {
            data: Storage::Bf16(stored),
            rows,
            cols,
        })
    }

    fn vector(&self, data: Vec<f32>) -> Result<CudaSlice<f32>, EngineError> {
        self.upload(&data)
    }

    fn buffer(&self, len: usize) -> Result<CudaSlice<f32>, EngineError> {
        self.stream
            .alloc_zeros(len.max(1))
            .map_err(|e| self.err(format!("allocating {len} f32: {e}")))
    }

    fn matrix_bytes(&self, m: &CudaMatrix) -> usize {
        match &m.data {
            Storage::Bf16(d) => d.len() * 2,
            Storage::F32(d) => d.len() * 4,
        }
    }

    fn embed(&self, table: &CudaMatrix, tokens: &[u32], out: &mut CudaSlice<f32>) {
        let Ok(mut s) = self.scratch.lock() else {
            return;
        };
        self.ensure(&mut s.tokens, tokens.len());
        if s.tokens.len() < tokens.len() {
            return; // the allocation failure is noted
        }
        let r = self
            .stream
            .memcpy_htod(tokens, &mut s.tokens.slice_mut(0..tokens.len()));
        self.note("uploading token ids", r);
        let (t, o) = (self.ptr(&s.tokens), self.ptr_mut(out));
        let tab = self.storage_ptr(&table.data);
        let (rows, width) = (tokens.len() as i32, table.cols as i32);
        let f = match table.data {
            Storage::Bf16(_) => &self.k.embed_bf16,
            Storage::F32(_) => &self.k.embed_f32,
        };
        self.launch(
            "embed",
            f,
            cfg((grid_1d(tokens.len(), 1), 1, 1), 256),
            &[&tab, &t, &o, &rows, &width],
        );
    }

    fn rms_norm(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        rows: usize,
        width: usize,
        eps: f32,
        out: &mut CudaSlice<f32>,
    ) {
        let (xp, wp, op) = (self.ptr(x), self.ptr(w), self.ptr_mut(out));
        let (r, wd) = (rows as i32, width as i32);
        let block = if width <= 128 { 128 } else { 256 };
        self.launch(
            "rms_norm",
            &self.k.rms_norm,
            cfg((grid_1d(rows, 1), 1, 1), block),
            &[&xp, &wp, &op, &r, &wd, &eps],
        );
    }

    fn rms_norm_in_place(
        &self,
        x: &mut CudaSlice<f32>,
        w: &CudaSlice<f32>,
        rows: usize,
        width: usize,
        eps: f32,
    ) {
        let (xp, wp) = (self.ptr_mut(x), self.ptr(w));
        let (r, wd) = (rows as i32, width as i32);
        let block = if width <= 128 { 128 } else { 256 };
        self.launch(
            "rms_norm (in place)",
            &self.k.rms_norm,
            cfg((grid_1d(rows, 1), 1, 1), block),
            &[&xp, &wp, &xp, &r, &wd, &eps],
        );
    }

    fn matmul(&self, x: &CudaSlice<f32>, rows: usize, w: &CudaMatrix, out: &mut CudaSlice<f32>) {
        let (xp, op) = (self.ptr(x), self.ptr_mut(out));
        if rows <= GEMV_MAX_ROWS {
            self.gemv(xp, rows, w, op, false);
        } else {
            self.gemm(xp, rows, w, op);
        }
    }

    fn lora_add(
        &self,
        x: &CudaSlice<f32>,
        rows: usize,
        a: &CudaMatrix,
        b: &CudaMatrix,
        scale: f32,
        scratch: &mut CudaSlice<f32>,
        out: &mut CudaSlice<f32>,
    ) {
        // The stacked (Punica-style) kernels with one adapter, index 0 for every row.
        let Ok(mut s) = self.scratch.lock() else {
            return;
        };
        self.ensure(&mut s.adapter_zero, rows);
        // Stream-ordered after the previous call's expand, so one slot serves every call.
        if scale != 1.0 {
            let r = self.stream.memcpy_htod(&[scale], &mut s.scale_call);
            self.note("uploading a LoRA scale", r);
        }
        let scales = if scale == 1.0 {
            &s.scale_one
        } else {
            &s.scale_call
        };
        let (xp, tp, op) = (self.ptr(x), self.ptr_mut(scratch), self.ptr_mut(out));
        let (ap, bp) = (self.storage_ptr(&a.data), self.storage_ptr(&b.data));
        let (idx, scale) = (self.ptr(&s.adapter_zero), self.ptr(scales));
        let (r, rank, in_dim, out_dim) = (rows as i32, a.rows as i32, a.cols as i32, b.rows as i32);
        let shrink = match a.data {
            Storage::Bf16(_) => &self.k.lora_shrink_bf16,
            Storage::F32(_) => &self.k.lora_shrink_f32,
        };
        self.launch(
            "lora_shrink",
            shrink,
            cfg((grid_1d(rows * a.rows, 8), 1, 1), 256),
            &[&xp, &ap, &tp, &idx, &r, &in_dim, &rank],
        );
        let expand = match b.data {
            Storage::Bf16(_) => &self.k.lora_expand_bf16,
            Storage::F32(_) => &self.k.lora_expand_f32,
        };
        self.launch(
            "lora_expand",
            expand,
            cfg((grid_1d(rows * b.rows, 256), 1, 1), 256),
            &[&tp, &bp, &op, &idx, &scale, &r, &out_dim, &rank],
        );
    }

    fn rope(
        &self,
        x: &mut CudaSlice<f32>,
        rows: usize,
        heads: usize,
        head_dim: usize,
        start: usize,
        inv_freq: &CudaSlice<f32>,
    ) {
        let (xp, fp, positions) = (self.ptr_mut(x), self.ptr(inv_freq), 0u64);
        let (r, h, d, s) = (rows as i32, heads as i32, head_dim as i32, start as i32);
        self.launch(
            "rope",
            &self.k.rope_neox,
            cfg((grid_1d(rows, 1), 1, 1), 256),
            &[&xp, &fp, &positions, &r, &h, &d, &s],
        );
    }

    fn silu_mul(&self, gate: &mut CudaSlice<f32>, up: &CudaSlice<f32>, len: usize) {
        let (g, u, n) = (self.ptr_mut(gate), self.ptr(up), len as i64);
        self.launch(
            "silu_mul",
            &self.k.silu_mul,
            elementwise_cfg(len),
            &[&g, &u, &n],
        );
    }

    fn add(&self, x: &mut CudaSlice<f32>, y: &CudaSlice<f32>, len: usize) {
        let (a, b, n) = (self.ptr_mut(x), self.ptr(y), len as i64);
        self.launch(
            "add",
            &self.k.add_in_place,
            elementwise_cfg(len),
            &[&a, &b, &n],
        );
    }

    fn copy(&self, src: &CudaSlice<f32>, src_offset: usize, len: usize, dst: &mut CudaSlice<f32>) {
        let r = self.stream.memcpy_dtod(
            &src.slice(src_offset..src_offset + len),
            &mut dst.slice_mut(0..len),
        );
        self.note("device copy", r);
    }

    fn read(&self, x: &CudaSlice<f32>, len: usize, out: &mut Vec<f32>) -> Result<(), EngineError> {
        out.clear();
        out.resize(len, 0.0);
        let r = self
            .stream
            .memcpy_dtoh(&x.slice(0..len), out.as_mut_slice());
        self.note("reading back", r);
        self.note("synchronising", self.stream.synchronize());
        self.failed()
    }

    fn kv_alloc(&self, shape: KvShape, capacity: usize) -> Result<CudaKv, EngineError> {
        let len = (shape.layers * capacity * shape.kv_dim).max(1);
        let alloc = || {
            self.stream.alloc_zeros::<f32>(len).map_err(|e| {
                self.err(format!(
                    "allocating a KV cache of {capacity} positions ({:.1} MiB): {e}",
                    (2 * len * 4) as f64 / (1u64 << 20) as f64
                ))
            })
        };
        Ok(CudaKv {
            shape,
            capacity,
            k: alloc()?,
            v: alloc()?,
        })
    }

    fn kv_bytes_per_token(&self, shape: KvShape) -> usize {
        shape.bytes_per_token(4)
    }

    fn kv_capacity(&self, kv: &CudaKv) -> usize {
        kv.capacity
    }

    fn kv_bytes(&self, kv: &CudaKv) -> usize {
        (kv.k.len() + kv.v.len()) * 4
    }

    fn kv_grow(&self, kv: &mut CudaKv, capacity: usize) -> Result<(), EngineError> {
        if capacity <= kv.capacity {
            return Ok(());
        }
        *kv = self.kv_copy_prefix(kv, kv.capacity, capacity)?;
        Ok(())
    }

    fn kv_copy_prefix(
        &self,
        kv: &CudaKv,
        len: usize,
        capacity: usize,
    ) -> Result<CudaKv, EngineError> {
        let mut out = self.kv_alloc(kv.shape, capacity.max(len))?;
        let d = kv.shape.kv_dim;
        let len = len.min(kv.capacity);
        if len > 0 {
            for layer in 0..kv.shape.layers {
                let (src, dst) = (layer * kv.capacity * d, layer * out.capacity * d);
                let r = self.stream.memcpy_dtod(
                    &kv.k.slice(src..src + len * d),
                    &mut out.k.slice_mut(dst..dst + len * d),
                );
                self.note("copying KV", r);
                let r = self.stream.memcpy_dtod(
                    &kv.v.slice(src..src + len * d),
                    &mut out.v.slice_mut(dst..dst + len * d),
                );
                self.note("copying KV", r);
            }
        }
        self.failed()?;
        Ok(out)
    }

    fn kv_write(
        &self,
        kv: &mut CudaKv,
        layer: usize,
        start: usize,
        rows: usize,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
    ) {
        let d = kv.shape.kv_dim;
        let at = (layer * kv.capacity + start) * d;
        let r = self.stream.memcpy_dtod(
            &k.slice(0..rows * d),
            &mut kv.k.slice_mut(at..at + rows * d),
        );
        self.note("writing K", r);
        let r = self.stream.memcpy_dtod(
            &v.slice(0..rows * d),
            &mut kv.v.slice_mut(at..at + rows * d),
        );
        self.note("writing V", r);
    }

    fn attention(
        &self,
        q: &CudaSlice<f32>,
        kv: &CudaKv,
        layer: usize,
        rows: usize,
        start: usize,
        shape: AttentionShape,
        out: &mut CudaSlice<f32>,
    ) {
        if shape.head_dim > MAX_HEAD_DIM {
            self.note(
                "attention",
                Err::<(), _>(format!(
                    "head_dim {} is above the kernel's {MAX_HEAD_DIM}",
                    shape.head_dim
                )),
            );
            return;
        }
        let layer_offset = (layer * kv.capacity * kv.shape.kv_dim * 4) as u64;
        let (qp, op) = (self.ptr(q), self.ptr_mut(out));
        let (kp, vp) = (
            self.ptr(&kv.k) + layer_offset,
            self.ptr(&kv.v) + layer_offset,
        );
        let (r, h, kvh, d, s) = (
            rows as i32,
            shape.heads as i32,
            shape.kv_heads as i32,
            shape.head_dim as i32,
            start as i32,
        );
        let scale = 1.0 / (shape.head_dim as f32).sqrt();
        if rows > GEMV_MAX_ROWS {
            // Prefill: heads × rows blocks already fill the GPU.
            self.launch(
                "attention",
                &self.k.attention_causal,
                cfg((shape.heads as u32, rows as u32, 1), ATTENTION_THREADS),
                &[&qp, &kp, &vp, &op, &r, &h, &kvh, &d, &s, &scale],
            );
            return;
        }
        // Decode: split the positions over blocks so a long context uses every SM.
        let positions = start + rows;
        let per_split = positions
            .div_ceil(MAX_ATTENTION_SPLITS)
            .max(MIN_POSITIONS_PER_SPLIT);
        let splits = positions.div_ceil(per_split);
        let Ok(mut scratch) = self.scratch.lock() else {
            return;
        };
        let parts_len = rows * shape.heads * splits * (shape.head_dim + 2);
        self.ensure(&mut scratch.attention_parts, parts_len);
        if scratch.attention_parts.len() < parts_len {
            return; // the allocation failure is noted
        }
        let pp = self.ptr_mut(&mut scratch.attention_parts);
        let (sp, ps) = (splits as i32, per_split as i32);
        self.launch(
            "attention (split)",
            &self.k.attention_split,
            cfg(
                (shape.heads as u32, rows as u32, splits as u32),
                ATTENTION_THREADS,
            ),
            &[&qp, &kp, &vp, &pp, &r, &h, &kvh, &d, &s, &scale, &sp, &ps],
        );
        self.launch(
            "attention (merge)",
            &self.k.attention_merge,
            cfg((shape.heads as u32, rows as u32, 1), 128),
            &[&pp, &op, &r, &h, &d, &sp],
        );
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // Let queued work finish before buffers are freed; an error here has nowhere to go.
        let _ = self.ctx.bind_to_thread();
        let _ = self.stream.synchronize();
    }
}
