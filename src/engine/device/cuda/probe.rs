//! Whether CUDA can be used here, decided before any CUDA call (cudarc panics when a library is
//! missing): the driver, NVRTC and cuBLAS libraries must load and a device must exist. Also
//! the `--device` policy: `cuda` fails with the reason, `auto` falls back to the CPU.

use super::CudaDevice;
use super::kernels::panic_text;
use crate::engine::device::DeviceChoice;
use crate::engine::error::EngineError;

/// NVRTC as `missing_libraries` names it.
pub(crate) const NVRTC_LIBRARY: &str = "libnvrtc.so.13 (CUDA 13 NVRTC: /usr/local/cuda/lib64 or `pip install nvidia-cuda-nvrtc==13.0.*`, on LD_LIBRARY_PATH)";

/// The shared libraries the CUDA device needs that cannot be loaded, with a hint each.
pub fn missing_libraries() -> Vec<&'static str> {
    let mut missing = Vec::new();
    // SAFETY: each call only tries to dlopen the library names cudarc knows.
    unsafe {
        if !cudarc::driver::sys::is_culib_present() {
            missing.push("libcuda.so (the NVIDIA driver; no driver, or not an NVIDIA machine)");
        }
        if !cudarc::nvrtc::sys::is_culib_present() {
            missing.push(NVRTC_LIBRARY);
        }
        if !cudarc::cublas::sys::is_culib_present() {
            missing.push(
                "libcublas.so.13 (CUDA 13 cuBLAS: /usr/local/cuda/lib64 or `pip install nvidia-cublas==13.*`, on LD_LIBRARY_PATH)",
            );
        }
    }
    missing
}

/// Opens CUDA device `ordinal`: libraries checked first, then the context, cuBLAS and the
/// kernels. Never panics: a panic inside cudarc is caught and reported as an error.
pub fn open(ordinal: usize) -> Result<CudaDevice, EngineError> {
    let missing = missing_libraries();
    if !missing.is_empty() {
        return Err(EngineError::CudaLibraries {
            libraries: missing.into_iter().map(str::to_string).collect(),
        });
    }
    match std::panic::catch_unwind(|| CudaDevice::create(ordinal)) {
        Ok(result) => result,
        Err(panic) => Err(EngineError::cuda(format!(
            "the CUDA runtime failed: {}",
            panic_text(&panic)
        ))),
    }
}

/// What `--device` resolves to.
pub enum Selected {
    Cuda(Box<CudaDevice>),
    /// The CPU; for `auto`, why CUDA was not used (the caller prints it).
    Cpu {
        fallback_reason: Option<String>,
    },
}

/// `cpu` → the CPU; `cuda` → the GPU or an error naming what is missing; `auto` → the GPU when
/// it opens, else the CPU with the reason.
pub fn select(choice: DeviceChoice) -> Result<Selected, EngineError> {
    match choice {
        DeviceChoice::Cpu => Ok(Selected::Cpu {
            fallback_reason: None,
        }),
        DeviceChoice::Cuda => open(0).map(|d| Selected::Cuda(Box::new(d))),
        DeviceChoice::Auto => Ok(match open(0) {
            Ok(d) => Selected::Cuda(Box::new(d)),
            Err(e) => Selected::Cpu {
                fallback_reason: Some(format!("{}; using the CPU", e.brief())),
            },
        }),
    }
}
