//! baton: a terminal coding agent on a Mixture-of-LoRA model.
//!
//! The layer map is docs/architecture.md (enforced by tests/architecture.rs): `cli` dispatches
//! to the frontends (`tui`, `exec`, `eval`), which drive an agent built by `app` through the
//! types of `protocol`; below them `agent` → `mol` → `backend` → `engine`, and `agent` → `tool`
//! → `sandbox`, and `agent` → `hooks` (the user's commands at points of a session). Nothing below knows about anything above it.

#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)
)]

pub(crate) mod acp;
pub mod agent;
pub mod app;
pub mod backend;
pub mod cli;
pub mod config;
pub mod engine;
pub mod eval;
pub(crate) mod exec;
pub mod hooks;
pub mod mol;
pub mod protocol;
pub mod sandbox;
pub mod serve;
pub mod session;
pub mod tool;
pub mod tui;
pub mod untrusted_fs;
