//! The integration tests, one binary: each former `tests/*.rs` file is a module here, so the
//! library and the mock engine (`support`) are compiled and linked once. Run one suite with
//! `cargo test --test tests cli::` (a module path is a name filter).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod support;

mod acp;
mod architecture;
mod cli;
mod cli_config;
mod commands;
mod context;
mod cuda_kernels;
mod docs_flags;
mod engine_golden;
mod engine_moe;
mod engine_text;
mod escape;
mod eval;
mod eval_harbor;
mod eval_runtime;
mod exec;
mod harbor;
mod hooks;
mod mcp;
mod remote_backend;
mod sandbox;
mod serve;
mod serve_state;
mod shell_tool;
mod tools_fs;
mod tools_git;
mod tui;
mod tui_tmux;
mod wire_snapshots;
