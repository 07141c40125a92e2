//! Benchmark (not a test): what checkpoints and undo cost on a big tree. Builds a workspace of
//! 50,000 small files (500 folders of 100; `CHECKPOINT_BENCH_FILES` changes the count), then
//! times the first snapshot (every blob written), a second one (nothing changed: the stat
//! cache answers), a turn that edits, creates and deletes 30 files (its closing snapshot),
//! and the undo of that turn (plan + apply + the snapshot after). Run with
//! `cargo bench --bench checkpoint`.

// A benchmark binary: a failed step should stop it loudly, and its output is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::time::Instant;

use baton::tool::checkpoint::{self, StoreConfig};

fn main() {
    let files: usize = std::env::var("CHECKPOINT_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let ws = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("tempdir");
    let root = ws.path();
    let per_dir = 100;
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / per_dir));
        if i % per_dir == 0 {
            std::fs::create_dir_all(&dir).expect("mkdir");
        }
        std::fs::write(
            dir.join(format!("f{i}.txt")),
            format!("file {i}\n{}\n", "x".repeat(i % 200)),
        )
        .expect("write");
    }
    // The stat cache trusts only entries older than itself by a second (racy-clean rule).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let store = StoreConfig::at(state.path().join("checkpoints"), state.path());
    let time = |what: &str, f: &mut dyn FnMut() -> String| {
        let start = Instant::now();
        let note = f();
        println!(
            "{what:<44} {:>8.3} s  {note}",
            start.elapsed().as_secs_f64()
        );
    };
    println!("checkpoint + undo on {files} files");
    let mut before = String::new();
    time("first snapshot (writes every blob)", &mut || {
        before = checkpoint::snapshot(&store, root).expect("snapshot");
        String::new()
    });
    time("second snapshot (nothing changed)", &mut || {
        before = checkpoint::snapshot(&store, root).expect("snapshot");
        String::new()
    });
    for i in 0..10 {
        std::fs::write(root.join(format!("d0001/f{}.txt", 100 + i)), "edited\n").expect("edit");
        std::fs::write(root.join(format!("d0002/new{i}.txt")), "new\n").expect("create");
        let _ = std::fs::remove_file(root.join(format!("d0003/f{}.txt", 300 + i)));
    }
    let mut after = String::new();
    time("turn's closing snapshot (30 files changed)", &mut || {
        after = checkpoint::snapshot(&store, root).expect("snapshot");
        String::new()
    });
    time("undo of the turn (plan + apply + snapshot)", &mut || {
        let (s, plan) =
            checkpoint::plan_revert(&store, root, &before, &after, false).expect("plan");
        let done = checkpoint::apply(&store, &s, &plan).expect("apply");
        format!(
            "{} restored, {} removed, {} kept",
            done.applied.restored.len(),
            done.applied.removed.len(),
            done.kept.len()
        )
    });
}
