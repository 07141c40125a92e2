//! baton: a terminal coding agent on a Mixture-of-LoRA model.
//!
//! Layers (see docs/architecture in the README): frontends (`tui`, `exec`, `eval`) → `agent` →
//! `mol` → `backend` → `engine`; `agent` → `tool` → `sandbox`. Nothing below knows about anything
//! above it.

pub mod agent;
pub mod app;
pub mod backend;
pub mod cli;
pub mod config;
pub mod engine;
pub mod eval;
pub mod exec;
pub mod mol;
pub mod protocol;
pub mod sandbox;
pub mod session;
pub mod tool;
pub mod tui;
