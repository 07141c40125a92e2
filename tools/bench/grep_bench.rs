//! Benchmark: baton's `grep` search against ripgrep on the same generated tree and regex.
//!
//! Generates a tree of 50 000 source-like files (plus .gitignored and binary files that both
//! tools must skip), runs `rg -n` and `baton::tool::search::grep_search` alternately, and prints
//! the median wall time of each and the ratio (target: baton ≤ 1.5 × ripgrep).
//!
//! Run: `cargo bench --bench grep_bench` (needs `rg` on PATH; `apt-get install ripgrep`).
//! Options (env): GREP_BENCH_FILES (default 50000), GREP_BENCH_RUNS (default 5),
//! GREP_BENCH_DIR (reuse/generate the tree there instead of a temp dir).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use baton::tool::search::{GrepOptions, grep_search};

const PATTERNS: &[&str] = &[r"fn\s+handle_[a-z]+_\d+", r"\w+Error\b", "TODO"];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A deterministic pseudo-random stream (no need for rand's API here).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn generate(root: &Path, files: usize) -> std::io::Result<()> {
    let marker = root.join(".generated");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(&files.to_string()) {
        return Ok(());
    }
    let words = [
        "let",
        "value",
        "request",
        "config",
        "buffer",
        "parse",
        "result",
        "match",
        "state",
        "return",
        "self",
        "handle",
        "context",
        "error",
        "ParseError",
        "IoError",
        "len",
        "iter",
    ];
    let mut rng = Lcg(42);
    // rg honours .gitignore only inside a git repository.
    git2::Repository::init(root).map_err(std::io::Error::other)?;
    std::fs::write(root.join(".gitignore"), "target/\n*.log\n")?;
    let per_dir = 100;
    for i in 0..files {
        let dir = root.join(format!("src/mod_{:04}", i / per_dir));
        if i % per_dir == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let mut text = String::with_capacity(2048);
        let lines = 20 + (rng.next() % 40) as usize;
        for l in 0..lines {
            if rng.next().is_multiple_of(97) {
                text.push_str(&format!("pub fn handle_request_{l}(ctx: &Context) {{\n"));
                continue;
            }
            if rng.next().is_multiple_of(211) {
                text.push_str("    // TODO: remove this workaround\n");
                continue;
            }
            text.push_str("    ");
            for _ in 0..(4 + rng.next() % 8) {
                text.push_str(words[(rng.next() % words.len() as u64) as usize]);
                text.push(' ');
            }
            text.push_str(";\n");
        }
        std::fs::write(dir.join(format!("file_{i}.rs")), text)?;
    }
    // Things both tools must skip: ignored directories and files, binaries.
    let ignored = root.join("target/debug");
    std::fs::create_dir_all(&ignored)?;
    for i in 0..500 {
        std::fs::write(
            ignored.join(format!("gen_{i}.rs")),
            "pub fn handle_request_1() { TODO IoError }\n".repeat(50),
        )?;
        std::fs::write(root.join(format!("src/build_{i}.log")), "TODO IoError\n")?;
    }
    for i in 0..200 {
        let mut bin = vec![0u8; 4096];
        bin.extend_from_slice(b"fn handle_request_9 TODO IoError");
        std::fs::write(root.join(format!("src/blob_{i}.bin")), bin)?;
    }
    std::fs::write(marker, files.to_string())
}

fn run_rg(root: &Path, pattern: &str) -> Result<(Duration, usize), String> {
    let start = Instant::now();
    let output = Command::new("rg")
        .args(["-n", "--no-heading", "--color=never", "-e", pattern, "."])
        .current_dir(root)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run rg (apt-get install ripgrep): {e}"))?;
    let elapsed = start.elapsed();
    let lines = output.stdout.iter().filter(|&&b| b == b'\n').count();
    Ok((elapsed, lines))
}

fn run_baton(root: &Path, pattern: &str) -> Result<(Duration, usize), String> {
    let options = GrepOptions {
        pattern: pattern.to_string(),
        case_insensitive: false,
        literal: false,
        glob: None,
        hidden: false,
        // Keep every hit, as rg prints every line: no advantage from the cap.
        max_results: usize::MAX,
        context: 0,
        cancel: None,
    };
    let start = Instant::now();
    let report = grep_search(root, &options).map_err(|e| e.to_string())?;
    let elapsed = start.elapsed();
    // Format the lines as the tool would, so the cost of output is included too.
    let mut sink = std::io::sink();
    for file in &report.files {
        let path = file.path.display();
        for hit in &file.lines {
            let _ = writeln!(sink, "{path}:{}:{}", hit.line, hit.text);
        }
    }
    Ok((start.elapsed().max(elapsed), report.total_lines))
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let files = env_usize("GREP_BENCH_FILES", 50_000);
    let runs = env_usize("GREP_BENCH_RUNS", 5).max(1);
    let temp;
    let root = match std::env::var("GREP_BENCH_DIR") {
        Ok(dir) => {
            std::fs::create_dir_all(&dir).expect("GREP_BENCH_DIR cannot be created");
            std::path::PathBuf::from(dir)
        }
        Err(_) => {
            temp = tempfile::tempdir().expect("no temp dir");
            temp.path().to_path_buf()
        }
    };
    let started = Instant::now();
    if let Err(e) = generate(&root, files) {
        eprintln!(
            "grep_bench: cannot generate the tree in {}: {e}",
            root.display()
        );
        std::process::exit(1);
    }
    println!(
        "tree: {files} files in {} (generated in {:.1}s); {runs} runs each, median; threads: {}",
        root.display(),
        started.elapsed().as_secs_f64(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<28} {:>10} {:>10} {:>8} {:>9}",
        "pattern", "rg ms", "baton ms", "ratio", "matches"
    );
    let mut worst: f64 = 0.0;
    for pattern in PATTERNS {
        // Warm the page cache and check both find the same lines.
        let (rg_lines, baton_lines) = match (run_rg(&root, pattern), run_baton(&root, pattern)) {
            (Ok((_, a)), Ok((_, b))) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!("grep_bench: {e}");
                std::process::exit(1);
            }
        };
        let mut rg_times = Vec::new();
        let mut baton_times = Vec::new();
        for _ in 0..runs {
            rg_times.push(run_rg(&root, pattern).map(|r| r.0).unwrap_or_default());
            baton_times.push(run_baton(&root, pattern).map(|r| r.0).unwrap_or_default());
        }
        let (rg, baton) = (median(rg_times), median(baton_times));
        let ratio = baton.as_secs_f64() / rg.as_secs_f64().max(1e-9);
        worst = worst.max(ratio);
        let agree = if rg_lines == baton_lines {
            format!("{baton_lines}")
        } else {
            format!("{baton_lines} (rg {rg_lines})")
        };
        println!(
            "{:<28} {:>10.1} {:>10.1} {:>7.2}x {:>9}",
            pattern,
            rg.as_secs_f64() * 1e3,
            baton.as_secs_f64() * 1e3,
            ratio,
            agree
        );
    }
    println!(
        "worst ratio {worst:.2}x (target <= 1.50x): {}",
        if worst <= 1.5 { "PASS" } else { "FAIL" }
    );
    if std::env::var_os("GREP_BENCH_CHECKPOINT").is_some() {
        time_checkpoints(&root);
    }
}

/// With GREP_BENCH_CHECKPOINT set: what a turn's checkpoint and an undo cost on this tree
/// (tools/bench/checkpoint.rs measures them on a generated 50k-file tree).
fn time_checkpoints(root: &Path) {
    use baton::tool::checkpoint::{self, StoreConfig};
    let state = tempfile::tempdir().expect("tempdir");
    let store = StoreConfig::at(state.path().join("checkpoints"), state.path());
    let mut ids = Vec::new();
    for attempt in ["first (writes blobs)", "second (blobs exist)"] {
        let start = Instant::now();
        match checkpoint::snapshot(&store, root) {
            Ok(id) => {
                println!(
                    "checkpoint, {attempt}: {:.2}s",
                    start.elapsed().as_secs_f64()
                );
                ids.push(id);
            }
            Err(e) => println!("checkpoint failed: {e}"),
        }
    }
    if let [before, after] = ids.as_slice() {
        let start = Instant::now();
        match checkpoint::plan_revert(&store, root, before, after, false)
            .and_then(|(s, plan)| checkpoint::apply(&store, &s, &plan))
        {
            Ok(done) => println!(
                "undo (nothing changed): {:.2}s, {} restored, {} removed",
                start.elapsed().as_secs_f64(),
                done.applied.restored.len(),
                done.applied.removed.len()
            ),
            Err(e) => println!("undo failed: {e}"),
        }
    }
}
