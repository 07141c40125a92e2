//! `baton undo`: restore the working tree to the last checkpoint a session took (or list the
//! checkpoints).

use std::path::PathBuf;

use crate::tool::checkpoint::{list_checkpoints, undo};

/// Arguments of `baton undo`.
#[derive(Debug, Clone, clap::Args)]
pub struct UndoArgs {
    /// The workspace (the global `-C/--cd` flag; default: the current directory).
    #[arg(skip)]
    pub workspace: Option<PathBuf>,
    /// List the checkpoints instead of restoring one.
    #[arg(long)]
    pub list: bool,
}

/// Runs `baton undo`; returns the exit code.
pub fn run(args: UndoArgs) -> i32 {
    let workspace = match args.workspace {
        Some(dir) => dir,
        None => match std::env::current_dir() {
            Ok(dir) => dir,
            Err(e) => {
                eprintln!("baton undo: cannot determine the current directory: {e}");
                return 1;
            }
        },
    };
    if args.list {
        return match list_checkpoints(&workspace) {
            Ok(list) if list.is_empty() => {
                println!("no checkpoints in {}", workspace.display());
                0
            }
            Ok(list) => {
                for cp in list.iter().rev() {
                    let when = chrono::DateTime::from_timestamp(cp.time, 0)
                        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                        .unwrap_or_default();
                    println!("{when}  {}  {}", cp.reference, cp.label);
                }
                0
            }
            Err(e) => {
                eprintln!("baton undo: {e}");
                1
            }
        };
    }
    match undo(&workspace) {
        Ok(report) => {
            println!(
                "restored checkpoint {} ({})",
                report.checkpoint.reference, report.checkpoint.label
            );
            for path in &report.restored {
                println!("  restored {path}");
            }
            for path in &report.removed {
                println!("  removed  {path}");
            }
            for path in &report.skipped {
                println!("  left alone (too large to checkpoint) {path}");
            }
            if report.restored.is_empty() && report.removed.is_empty() {
                println!("  (no file differed from the checkpoint)");
            }
            0
        }
        Err(e) => {
            eprintln!("baton undo: {e}");
            1
        }
    }
}
