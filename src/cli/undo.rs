//! `baton undo`: revert the file changes of the last turn of this workspace's newest session
//! (or redo the last undo, list the turns that can be undone, or only print the plan). The
//! snapshot ids come from the session file; the outcome is recorded there too.

use crate::protocol::stdio::{eprintln, println};
use std::path::Path;

use crate::protocol::terminal_safe_line;
use crate::session::{Record, SessionFile, UndoLog};
use crate::tool::checkpoint::{self, StoreConfig};

/// Arguments of `baton undo`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UndoArgs {
    /// List the turns that can be undone instead of undoing one.
    #[arg(long)]
    pub list: bool,
    /// Print what undo would do and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Also overwrite files changed again since the turn (never files that cannot be saved).
    #[arg(long)]
    pub force: bool,
    /// Revert the last undo (possible until the next turn).
    #[arg(long)]
    pub redo: bool,
    /// The session whose turn to undo (id or prefix; default: this workspace's newest).
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
}

/// Runs `baton undo`; returns the exit code.
pub fn run(workspace: &Path, session_dir: &Path, args: &UndoArgs) -> i32 {
    match run_inner(workspace, session_dir, args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("baton undo: {}", terminal_safe_line(&message));
            1
        }
    }
}

fn run_inner(workspace: &Path, session_dir: &Path, args: &UndoArgs) -> Result<i32, String> {
    let id = args.session.as_deref().unwrap_or("last");
    let path = crate::session::find(session_dir, id, Some(workspace)).map_err(|e| e.to_string())?;
    if args.list || args.dry_run {
        // Reading only: no lock needed, and it works while the session is open elsewhere.
        let records = crate::session::read_records(&path).map_err(|e| e.to_string())?;
        let log = UndoLog::of(&records);
        if args.list {
            list(&log, &records);
            return Ok(0);
        }
        return revert(workspace, session_dir, &log, args, None);
    }
    // Applying writes the outcome to the session file: taking its lock also keeps a running
    // baton of the same session from changing files meanwhile.
    let (mut file, records) = SessionFile::open(&path).map_err(|e| match e {
        crate::session::SessionError::Busy { .. } => {
            format!("{e}; use /undo there (or quit it first)")
        }
        other => other.to_string(),
    })?;
    let log = UndoLog::of(&records);
    revert(workspace, session_dir, &log, args, Some(&mut file))
}

/// The turns that changed files, newest first, each with the first line of its prompt so the
/// user can tell which is which.
fn list(log: &UndoLog, records: &[crate::session::Record]) {
    if log.turns.is_empty() {
        println!("no turn of this session changed files");
        return;
    }
    let prompt = |turn_id: u64| {
        records.iter().find_map(|r| match r {
            crate::session::Record::Turn {
                turn_id: id, text, ..
            } if *id == turn_id => {
                let line = text.lines().next().unwrap_or_default();
                Some(match line.char_indices().nth(60) {
                    Some((cut, _)) => format!("{}…", &line[..cut]),
                    None => line.to_string(),
                })
            }
            _ => None,
        })
    };
    for turn in log.turns.iter().rev() {
        let state = if turn.undone {
            "undone       "
        } else {
            "can be undone"
        };
        let about = prompt(turn.turn_id).unwrap_or_default();
        println!(
            "turn {}  {state}  {}",
            turn.turn_id,
            terminal_safe_line(&about)
        );
    }
}

fn revert(
    workspace: &Path,
    session_dir: &Path,
    log: &UndoLog,
    args: &UndoArgs,
    file: Option<&mut SessionFile>,
) -> Result<i32, String> {
    let (turn_id, back_to, left, head) = if args.redo {
        let u = log.next_redo().ok_or(
            "nothing to redo (only an undo since the last turn can be redone)".to_string(),
        )?;
        (u.turn_id, u.before.clone(), u.after.clone(), None)
    } else {
        let t = log
            .next_undo()
            .ok_or("nothing to undo: no turn of this session changed files".to_string())?;
        (t.turn_id, t.before.clone(), t.after.clone(), t.head.clone())
    };
    let head_note = head.map(|h| format!("note: {}", h.undo_note(turn_id)));
    let what = if args.redo { "redo" } else { "undo" };
    let config = StoreConfig::for_session_dir(session_dir);
    let (store, plan) = checkpoint::plan_revert(&config, workspace, &back_to, &left, args.force)
        .map_err(|e| e.to_string())?;
    let Some(file) = file else {
        println!("{what} of turn {turn_id} would:");
        for line in plan.lines() {
            println!("  {line}");
        }
        if plan.is_empty() {
            println!("  (change nothing)");
        }
        if let Some(note) = &head_note {
            println!("{note}");
        }
        return Ok(0);
    };
    let done = checkpoint::apply(&config, &store, &plan).map_err(|e| e.to_string())?;
    if done.is_recorded() {
        let record = Record::reverted(turn_id, args.redo, &done.before, &done.after);
        file.append(&record).map_err(|e| e.to_string())?;
    }
    println!("{what} of turn {turn_id}:");
    for path in &done.applied.restored {
        println!("  restored {path}");
    }
    for path in &done.applied.removed {
        println!("  removed  {path}");
    }
    for (path, why) in &done.kept {
        let verb = match why {
            checkpoint::Kept::Protected => "refused ",
            _ => "kept    ",
        };
        println!("  {verb} {path}  ({})", checkpoint::plan::kept_reason(why));
    }
    for failed in &done.applied.failed {
        println!("  not done {}", terminal_safe_line(failed));
    }
    if done.applied.restored.is_empty() && done.applied.removed.is_empty() {
        println!("  (no file was changed)");
    }
    if let Some(note) = &head_note {
        println!("{note}");
    }
    for warning in &done.audit {
        eprintln!("baton undo: warning: {}", terminal_safe_line(warning));
    }
    if !done.is_recorded() {
        println!("(nothing was done, so turn {turn_id} can still be undone once this is fixed)");
    } else if !args.redo {
        println!("(`baton undo --redo` reverts this until the next turn)");
    }
    // A step refused by the write rules is not done either: the exit status says so.
    Ok(if done.applied.failed.is_empty() && done.refused() == 0 {
        0
    } else {
        1
    })
}
