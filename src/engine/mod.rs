//! The local inference engine: Qwen3 with four resident LoRA experts, on CPU or CUDA.

pub mod pyjson;
pub mod template;
pub mod tokenizer;
pub mod toolparse;
