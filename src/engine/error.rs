//! The engine's error type: every variant names the file, tensor or key it is about.

use std::path::PathBuf;

/// Everything that can go wrong while loading a model or running a request.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A JSON file (config, index, adapter config) is malformed or lacks a key.
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    /// The model's architecture is not one this engine implements.
    #[error(
        "{path}: unknown architecture {found:?} (this engine runs Qwen3 dense and Qwen3.5-MoE models: {expected})"
    )]
    UnknownArchitecture {
        path: PathBuf,
        found: String,
        expected: String,
    },
    /// A safetensors file could not be parsed.
    #[error("{path}: not a valid safetensors file: {reason}")]
    Safetensors { path: PathBuf, reason: String },
    /// A tensor the model needs is in none of its files.
    #[error("{path}: missing tensor {tensor:?}")]
    MissingTensor { path: PathBuf, tensor: String },
    /// A tensor has the wrong shape.
    #[error("{path}: tensor {tensor:?} has shape {found:?}, expected {expected:?}")]
    TensorShape {
        path: PathBuf,
        tensor: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
    /// A tensor is stored in a dtype the engine cannot read.
    #[error("{path}: tensor {tensor:?} has dtype {dtype}, expected one of BF16, F16, F32")]
    TensorDtype {
        path: PathBuf,
        tensor: String,
        dtype: String,
    },
    /// A LoRA adapter does not fit the base model or uses an unsupported feature.
    #[error("{path}: {reason}")]
    Adapter { path: PathBuf, reason: String },
    /// The chosen device cannot be used.
    #[error("device {device}: {reason}")]
    Device { device: String, reason: String },
    /// Shared libraries the CUDA device needs (driver, NVRTC, cuBLAS) cannot be loaded; each
    /// entry names the library and how to get it.
    #[error("device cuda: cannot load {} (see docs/cuda.md)", libraries.join("; "))]
    CudaLibraries { libraries: Vec<String> },
    /// NVRTC rejected the kernel source; `log` is its compile log.
    #[error("device cuda: NVRTC rejected the kernels:\n{log}")]
    KernelCompile { arch: String, log: String },
    /// NVRTC failed without a compile log (bad options, an internal error, a panic in cudarc).
    #[error("device cuda: NVRTC failed: {reason}")]
    Nvrtc { arch: String, reason: String },
    /// The driver refused the compiled PTX module.
    #[error("device cuda: loading the kernel PTX: {reason}")]
    KernelModule { reason: String },
    /// The PTX module lacks an entry point the device calls.
    #[error("device cuda: kernel {kernel}: {reason}")]
    KernelEntry { kernel: String, reason: String },
    /// A request is malformed (unknown adapter, empty prompt, too long, bad constraint...).
    #[error("invalid request: {0}")]
    Request(String),
}

impl EngineError {
    /// One line for a notice that CUDA was not used: the missing libraries by file name only
    /// (where to get each is what `--device cuda` prints in full), anything else as is.
    pub fn brief(&self) -> String {
        match self {
            EngineError::CudaLibraries { libraries } => {
                let names: Vec<&str> = libraries
                    .iter()
                    .map(|l| l.split(" (").next().unwrap_or(l))
                    .collect();
                format!(
                    "no CUDA: cannot load {} (`--device cuda` says how to get them)",
                    names.join(", ")
                )
            }
            other => other.to_string(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn config(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        EngineError::Config {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// A failure of the CUDA driver or cuBLAS while opening the device.
    pub(crate) fn cuda(reason: impl Into<String>) -> Self {
        EngineError::Device {
            device: "cuda".into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn adapter(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        EngineError::Adapter {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brief_cuda_notice_names_the_libraries_on_one_short_line() {
        let e = EngineError::CudaLibraries {
            libraries: vec![
                "libcuda.so (the NVIDIA driver; no driver, or not an NVIDIA machine)".into(),
                "libnvrtc.so.13 (CUDA 13 NVRTC: /usr/local/cuda/lib64 or `pip install \
                 nvidia-cuda-nvrtc==13.0.*`, on LD_LIBRARY_PATH)"
                    .into(),
            ],
        };
        let brief = e.brief();
        assert_eq!(
            brief,
            "no CUDA: cannot load libcuda.so, libnvrtc.so.13 (`--device cuda` says how to get them)"
        );
        assert!(
            e.to_string().contains("pip install"),
            "the full error keeps the how-to"
        );
    }
}
