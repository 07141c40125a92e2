//! The local inference engine: Qwen3 with four resident LoRA experts, on CPU or CUDA.

pub mod config;
pub mod constraint;
pub mod device;
pub mod error;
pub mod generate;
pub mod kv;
pub mod lora;
pub mod model;
pub mod sampler;
pub mod weights;

pub mod tokenizer;

pub use config::ModelConfig;
pub use error::EngineError;
pub use generate::{
    Engine, EngineOptions, FinishKind, GenerateOutput, GenerateRequest, MemoryReport, PromptLogits,
};
pub use kv::{CacheLimits, CacheStats};
pub use sampler::SamplingParams;
