//! Benchmark: `apply_patch` locating a large hunk in a large file of repetitive lines.
//!
//! The file has PATCH_BENCH_LINES (default 40 000) identical lines and a distinct last line;
//! the hunk is PATCH_BENCH_HUNK_KIB (default 80) KiB of context made of the same line, then
//! the last line replaced. The hunk matches only at the end, and at every earlier start it
//! matches all but its last line: a search that compares the hunk at every start costs
//! lines × hunk lines comparisons; one over interned line ids costs lines + hunk lines. Prints the median wall time of PATCH_BENCH_RUNS (default 3) runs of the
//! whole tool call (parse, locate, write, diff).
//!
//! Run: `cargo bench --bench patch_bench` (add `--profile dev` for a quick debug-build figure).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use baton::protocol::{EventSink, ToolStatus};
use baton::tool::registry::standard_tools;
use baton::tool::{ToolContext, ToolState};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let lines = env_usize("PATCH_BENCH_LINES", 40_000);
    let hunk_bytes = env_usize("PATCH_BENCH_HUNK_KIB", 80) * 1024;
    let runs = env_usize("PATCH_BENCH_RUNS", 3).max(1);
    let body = "    value = value + 1;";
    let hunk_lines = (hunk_bytes / (body.len() + 2)).clamp(1, lines - 1);

    let mut file = String::new();
    for _ in 0..lines - 1 {
        file.push_str(body);
        file.push('\n');
    }
    file.push_str("end of file\n");
    let mut patch = String::from("*** Begin Patch\n*** Update File: big.rs\n@@\n");
    for _ in 0..hunk_lines {
        patch.push(' ');
        patch.push_str(body);
        patch.push('\n');
    }
    patch.push_str("-end of file\n+the end\n*** End Patch\n");

    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = standard_tools();
    let tool = registry.get("apply_patch").unwrap();
    let mut times: Vec<Duration> = Vec::new();
    for _ in 0..runs {
        std::fs::write(root.join("big.rs"), &file).unwrap();
        let (events, _rx) = EventSink::channel();
        let ctx = ToolContext {
            workspace: root.clone(),
            call_id: "bench".into(),
            events,
            cancel: Default::default(),
            state: Arc::new(ToolState::default()),
        };
        let started = Instant::now();
        let result = runtime.block_on(tool.run(json!({ "input": patch }), &ctx));
        times.push(started.elapsed());
        assert_eq!(result.status, ToolStatus::Ok, "{}", result.content);
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "apply_patch: {} KiB hunk ({hunk_lines} lines) on a {lines}-line file: median {:.3} s over {runs} runs",
        patch.len() / 1024,
        median.as_secs_f64()
    );
}
