//! The CUDA C kernel sources (src/engine/kernels/*.cu, no CUDA headers), their NVRTC
//! compilation with a PTX cache on disk, and the table of loaded kernel functions.

use std::path::PathBuf;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{CompileError, CompileOptions, Ptx};

use crate::engine::error::EngineError;

/// Prepended to every kernel file: bf16 helpers, reductions, weight loads.
pub const COMMON: &str = include_str!("../../kernels/common.cuh");

/// Every kernel file, by name.
pub const FILES: [(&str, &str); 5] = [
    (
        "elementwise.cu",
        include_str!("../../kernels/elementwise.cu"),
    ),
    ("matvec.cu", include_str!("../../kernels/matvec.cu")),
    ("attention.cu", include_str!("../../kernels/attention.cu")),
    ("sample.cu", include_str!("../../kernels/sample.cu")),
    ("hybrid.cu", include_str!("../../kernels/hybrid.cu")),
];

/// Every `extern "C"` entry point the device loads.
pub const KERNEL_NAMES: [&str; 31] = [
    "embed_bf16",
    "embed_f32",
    "rms_norm",
    "rope_neox",
    "silu_mul",
    "add_in_place",
    "split_bf16",
    "bf16_to_f32_kernel",
    "f32_to_bf16_kernel",
    "gemv_bf16",
    "gemv_f32",
    "lora_shrink_bf16",
    "lora_shrink_f32",
    "lora_expand_bf16",
    "lora_expand_f32",
    "attention_causal",
    "attention_split",
    "attention_merge",
    "argmax_f32",
    "sample_top_p",
    "split_halves",
    "sigmoid_mul",
    "add_sigmoid_scaled",
    "silu_mul_halves",
    "rope_partial",
    "conv1d_silu",
    "gated_delta_rule",
    "gated_delta_rule_wide",
    "gated_rms_norm",
    "gather_rows",
    "scatter_add_rows",
];

/// One kernel file with the common prelude, as NVRTC compiles it.
pub fn file_source(file: &str) -> Option<String> {
    FILES
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, src)| format!("{COMMON}\n{src}"))
}

/// All kernel files in one translation unit (what the device loads as one module).
pub fn full_source() -> String {
    let mut src = String::from(COMMON);
    for (_, body) in FILES {
        src.push('\n');
        src.push_str(body);
    }
    src
}

/// Whether `libnvrtc` can be loaded (cudarc panics on the first NVRTC call otherwise).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library names cudarc knows; no symbol is called.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The NVRTC virtual architecture for a compute capability ("compute_90" for an H100/H200):
/// PTX that the driver JIT-compiles for the exact chip.
pub fn arch_for(major: i32, minor: i32) -> &'static str {
    match (major, minor) {
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        // CompileOptions wants a 'static str; one leak per process for an unlisted chip.
        _ => Box::leak(format!("compute_{major}{minor}").into_boxed_str()),
    }
}

/// Compiles `src` to PTX for `arch`. The caller has checked `nvrtc_present()`; a panic from
/// cudarc is still caught and turned into an error.
pub fn compile(src: &str, arch: &'static str) -> Result<String, EngineError> {
    if !nvrtc_present() {
        return Err(EngineError::CudaLibraries {
            libraries: vec![super::probe::NVRTC_LIBRARY.into()],
        });
    }
    let nvrtc = |reason: String| EngineError::Nvrtc {
        arch: arch.to_string(),
        reason,
    };
    let opts = CompileOptions {
        arch: Some(arch),
        ..Default::default()
    };
    let result = std::panic::catch_unwind(|| cudarc::nvrtc::compile_ptx_with_opts(src, opts));
    match result {
        Ok(Ok(ptx)) => Ok(ptx.to_src()),
        Ok(Err(CompileError::CompileError { log, .. })) => Err(EngineError::KernelCompile {
            arch: arch.to_string(),
            log: log.to_string_lossy().into_owned(),
        }),
        Ok(Err(e)) => Err(nvrtc(format!("{e:?}"))),
        Err(panic) => Err(nvrtc(format!("it panicked: {}", panic_text(&panic)))),
    }
}

/// The text of a caught panic.
pub fn panic_text(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

/// FNV-1a, stable across Rust versions (the cache key must not change between builds).
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.bytes().chain([0u8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Where the PTX for `src` on `arch` is cached: `$XDG_CACHE_HOME/baton/ptx/<hash>.ptx`.
pub fn cache_path(src: &str, arch: &str) -> Option<PathBuf> {
    let key = fnv1a(&[src, arch, env!("CARGO_PKG_VERSION")]);
    dirs::cache_dir().map(|d| d.join("baton").join("ptx").join(format!("{key:016x}.ptx")))
}

/// The PTX of the full source for `arch`: from the cache when present, else compiled (and
/// cached, best effort: a read-only cache directory only costs a recompile next time).
/// Returns the PTX and whether it came from the cache.
pub fn ptx_for(arch: &'static str) -> Result<(String, bool), EngineError> {
    let src = full_source();
    let path = cache_path(&src, arch);
    if let Some(text) = path.as_ref().and_then(|p| std::fs::read_to_string(p).ok())
        && text.contains(".entry")
    {
        return Ok((text, true));
    }
    let ptx = compile(&src, arch)?;
    if let Some(p) = path {
        if let Some(dir) = p.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, &ptx).is_ok() {
            let _ = std::fs::rename(&tmp, &p);
        }
    }
    Ok((ptx, false))
}

/// The loaded kernels of one context.
pub struct Kernels {
    pub embed_bf16: CudaFunction,
    pub embed_f32: CudaFunction,
    pub rms_norm: CudaFunction,
    pub rope_neox: CudaFunction,
    pub silu_mul: CudaFunction,
    pub add_in_place: CudaFunction,
    pub split_bf16: CudaFunction,
    pub gemv_bf16: CudaFunction,
    pub gemv_f32: CudaFunction,
    pub lora_shrink_bf16: CudaFunction,
    pub lora_shrink_f32: CudaFunction,
    pub lora_expand_bf16: CudaFunction,
    pub lora_expand_f32: CudaFunction,
    pub attention_causal: CudaFunction,
    pub attention_split: CudaFunction,
    pub attention_merge: CudaFunction,
    pub argmax_f32: CudaFunction,
    pub sample_top_p: CudaFunction,
    pub split_halves: CudaFunction,
    pub sigmoid_mul: CudaFunction,
    pub add_sigmoid_scaled: CudaFunction,
    pub silu_mul_halves: CudaFunction,
    pub rope_partial: CudaFunction,
    pub conv1d_silu: CudaFunction,
    pub gated_delta_rule: CudaFunction,
    pub gated_delta_rule_wide: CudaFunction,
    pub gated_rms_norm: CudaFunction,
    pub gather_rows: CudaFunction,
    pub scatter_add_rows: CudaFunction,
}

impl Kernels {
    /// Loads `ptx` into `ctx` and resolves every entry point.
    pub fn load(ctx: &Arc<CudaContext>, ptx: String) -> Result<Kernels, EngineError> {
        let module =
            ctx.load_module(Ptx::from_src(ptx))
                .map_err(|e| EngineError::KernelModule {
                    reason: e.to_string(),
                })?;
        let f = |name: &str| {
            module
                .load_function(name)
                .map_err(|e| EngineError::KernelEntry {
                    kernel: name.to_string(),
                    reason: e.to_string(),
                })
        };
        Ok(Kernels {
            embed_bf16: f("embed_bf16")?,
            embed_f32: f("embed_f32")?,
            rms_norm: f("rms_norm")?,
            rope_neox: f("rope_neox")?,
            silu_mul: f("silu_mul")?,
            add_in_place: f("add_in_place")?,
            split_bf16: f("split_bf16")?,
            gemv_bf16: f("gemv_bf16")?,
            gemv_f32: f("gemv_f32")?,
            lora_shrink_bf16: f("lora_shrink_bf16")?,
            lora_shrink_f32: f("lora_shrink_f32")?,
            lora_expand_bf16: f("lora_expand_bf16")?,
            lora_expand_f32: f("lora_expand_f32")?,
            attention_causal: f("attention_causal")?,
            attention_split: f("attention_split")?,
            attention_merge: f("attention_merge")?,
            argmax_f32: f("argmax_f32")?,
            sample_top_p: f("sample_top_p")?,
            split_halves: f("split_halves")?,
            sigmoid_mul: f("sigmoid_mul")?,
            add_sigmoid_scaled: f("add_sigmoid_scaled")?,
            silu_mul_halves: f("silu_mul_halves")?,
            rope_partial: f("rope_partial")?,
            conv1d_silu: f("conv1d_silu")?,
            gated_delta_rule: f("gated_delta_rule")?,
            gated_delta_rule_wide: f("gated_delta_rule_wide")?,
            gated_rms_norm: f("gated_rms_norm")?,
            gather_rows: f("gather_rows")?,
            scatter_add_rows: f("scatter_add_rows")?,
        })
    }
}
