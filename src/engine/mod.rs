//! The local inference engine: Qwen3 with four resident LoRA experts, on CPU or CUDA.

pub(crate) mod config;
pub(crate) mod constraint;
pub mod device;
pub(crate) mod error;
pub(crate) mod generate;
pub(crate) mod kv;
pub mod lora;
pub mod model;
pub(crate) mod sampler;
pub mod weights;

pub mod tokenizer;

pub use config::ModelConfig;
pub use error::EngineError;
pub use generate::{
    Engine, EngineOptions, FinishKind, GenerateOutput, GenerateRequest, MemoryReport, PromptLogits,
};
pub use kv::{CacheLimits, CacheStats};
pub use sampler::SamplingParams;
