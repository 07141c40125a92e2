//! The local inference engine: Qwen3 (dense) or Qwen3.5-MoE (hybrid) with four resident LoRA
//! experts, on CPU or CUDA.

pub(crate) mod config;
pub(crate) mod constraint;
pub mod device;
pub(crate) mod error;
pub(crate) mod generate;
pub mod hybrid;
pub mod hybrid_lora;
mod hybrid_runner;
pub(crate) mod kv;
pub mod lora;
pub mod model;
pub(crate) mod sampler;
pub mod weights;

pub mod tokenizer;

pub use config::ModelConfig;
pub use device::cpu::{DeltaRuleForm, WeightPrecision};
pub use error::EngineError;
pub use generate::{
    Engine, EngineOptions, FinishKind, GenerateOutput, GenerateRequest, MemoryReport, PromptLogits,
};
pub use kv::{CacheLimits, CacheStats};
pub use sampler::SamplingParams;
