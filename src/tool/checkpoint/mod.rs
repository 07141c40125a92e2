//! Checkpoints of the workspace and undo/redo. A turn that changes files gets two snapshots in
//! baton's own store (outside the workspace, see `store`): one before its first change and one
//! when it ends. The session file records their ids; undo takes them from there (never from
//! anything a command can write), verifies them, and reverts exactly what the turn changed
//! (see `plan`), beneath the workspace without following symlinks (see `beneath`).

pub mod beneath;
pub mod head;
pub mod plan;
pub mod store;

use std::path::{Path, PathBuf};

pub use plan::{Applied, Kept, Plan, Step};
pub use store::{MAX_CHECKPOINT_FILE_BYTES, Store};

use super::{ToolContext, ToolState};
use crate::protocol::{Event, SandboxMode};
use crate::sandbox::{SandboxPolicy, git_guard};

/// Per-session checkpoint bookkeeping kept in `ToolState`.
#[derive(Debug, Default)]
pub struct CheckpointState {
    config: Option<StoreConfig>,
    /// A turn is running: file changes are the turn's (the user's `!cmd` is not).
    in_turn: bool,
    /// The snapshot taken before the running turn's first change.
    before: Option<String>,
    /// The repository's HEAD when that snapshot was taken.
    head_before: Option<String>,
    warned_unavailable: bool,
}

/// Where the snapshots go and what they leave out.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The folder holding the stores (one per workspace).
    pub root: PathBuf,
    /// baton's own folders (the session folder, the store): never part of a snapshot.
    pub exclude: Vec<PathBuf>,
}

impl StoreConfig {
    /// Where a session in `session_dir` keeps its snapshots: `$XDG_DATA_HOME/baton/checkpoints`
    /// (beside the default session folder, outside every workspace), or the session folder's
    /// `checkpoints` subfolder when there is no data folder.
    pub fn for_session_dir(session_dir: &Path) -> StoreConfig {
        let root = dirs::data_dir()
            .map(|d| d.join("baton").join("checkpoints"))
            .unwrap_or_else(|| session_dir.join("checkpoints"));
        StoreConfig::at(root, session_dir)
    }

    /// Stores under `root`, for sessions in `session_dir` (both left out of snapshots).
    pub fn at(root: PathBuf, session_dir: &Path) -> StoreConfig {
        StoreConfig {
            exclude: vec![session_dir.to_path_buf(), root.clone()],
            root,
        }
    }

    pub fn open(&self, workspace: &Path) -> Result<Store, CheckpointError> {
        Store::open(&self.root, workspace)
    }
}

/// The two snapshots of a turn that changed files, and how the repository's HEAD moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnCheckpoint {
    pub before: String,
    pub after: String,
    pub head: Option<crate::session::HeadMove>,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("undo is unavailable: no checkpoint store is configured")]
    Unconfigured,
    #[error("nothing to {0}")]
    Nothing(&'static str),
    #[error("checkpoint {id} is refused: {why}")]
    Damaged { id: String, why: String },
    #[error("checkpoint store error: {0}")]
    Git(#[from] git2::Error),
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
}

/// A path for the terminal: relative, `/`-separated, through the terminal sanitizer, with
/// newlines, tabs and carriage returns shown as `\n`, `\t`, `\r` (in a file list they would
/// fake lines of their own, and the name must still read as the file it is).
pub fn shown(rel: &Path) -> String {
    let text = crate::tool::path::display_relative(rel)
        .replace('\n', "\\n")
        .replace('\t', "\\t")
        .replace('\r', "\\r");
    crate::protocol::terminal_safe_line(&text).into_owned()
}

/// Sets where this session's snapshots go (the agent calls this once).
pub fn configure(state: &ToolState, config: StoreConfig) {
    if let Ok(mut cp) = state.checkpoints.lock() {
        cp.config = Some(config);
    }
}

/// Marks the start of a turn: the next file change takes the turn's first snapshot.
pub fn begin_turn(state: &ToolState) {
    if let Ok(mut cp) = state.checkpoints.lock() {
        cp.in_turn = true;
        cp.before = None;
        cp.head_before = None;
    }
}

/// Called by every file-changing tool before it writes: takes the turn's first snapshot once.
/// Failure never blocks the edit; it is reported as a warning event instead.
pub fn before_change(ctx: &ToolContext) {
    let Ok(mut cp) = ctx.state.checkpoints.lock() else {
        return;
    };
    if !cp.in_turn || cp.before.is_some() {
        return;
    }
    let Some(config) = cp.config.clone() else {
        if !cp.warned_unavailable {
            cp.warned_unavailable = true;
            ctx.events.emit(Event::Warning {
                message: "undo is unavailable: no checkpoint store is configured".into(),
            });
        }
        return;
    };
    match config
        .open(&ctx.workspace)
        .and_then(|store| store.snapshot(&config.exclude))
    {
        Ok(id) => {
            cp.before = Some(id);
            cp.head_before = head::head_commit(&ctx.workspace);
        }
        Err(e) => {
            // Marked taken anyway: one warning per turn, not one per tool call.
            cp.before = Some(String::new());
            ctx.events.emit(Event::Warning {
                message: format!("checkpoint failed, undo will not cover this turn: {e}"),
            });
        }
    }
}

/// Ends the turn: when it took a snapshot before changing files, takes the one after and
/// returns both (the agent records them in the session file).
pub fn end_turn(
    state: &ToolState,
    workspace: &Path,
) -> Option<Result<TurnCheckpoint, CheckpointError>> {
    let (before, head_before, config) = {
        let mut cp = state.checkpoints.lock().ok()?;
        cp.in_turn = false;
        let head_before = cp.head_before.take();
        let before = cp.before.take().filter(|b| !b.is_empty())?;
        (before, head_before, cp.config.clone()?)
    };
    let head = head::head_commit(workspace)
        .filter(|now| head_before.as_ref() != Some(now))
        .map(|to| crate::session::HeadMove {
            from: head_before,
            to,
        });
    Some(
        config
            .open(workspace)
            .and_then(|store| store.snapshot(&config.exclude))
            .map(|after| TurnCheckpoint {
                before,
                after,
                head,
            }),
    )
}

/// Takes one snapshot of `workspace` now (tests, benchmarks, the CLI's redo bookkeeping).
pub fn snapshot(config: &StoreConfig, workspace: &Path) -> Result<String, CheckpointError> {
    config.open(workspace)?.snapshot(&config.exclude)
}

/// Plans going from the state `left` back to `target` (undo: from a turn's "after" to its
/// "before"; redo: from the state an undo left back to the one before it).
pub fn plan_revert(
    config: &StoreConfig,
    workspace: &Path,
    target: &str,
    left: &str,
    force: bool,
) -> Result<(Store, Plan), CheckpointError> {
    let store = config.open(workspace)?;
    let plan = plan::plan(&store, target, left, &config.exclude, force)?;
    Ok((store, plan))
}

/// What an applied undo or redo did, with the snapshots that let it be reverted in turn.
#[derive(Debug, Clone)]
pub struct Reverted {
    pub applied: Applied,
    pub kept: Vec<(String, Kept)>,
    /// The files just before (what a redo of this undo goes back to) and just after.
    pub before: String,
    pub after: String,
    /// What the git/.baton audit undid after the undo wrote (as after a sandboxed command),
    /// one line each for the user.
    pub audit: Vec<String>,
}

impl Reverted {
    /// Whether the undo or redo is recorded: not when it changed nothing because steps failed
    /// or files were kept (recording it would use up the turn: a later undo once what blocked
    /// it is gone, or with `--force`, would find nothing to undo). An undo with nothing left to
    /// do (the files are as before the turn already) is recorded.
    pub fn is_recorded(&self) -> bool {
        let did_something = !self.applied.restored.is_empty() || !self.applied.removed.is_empty();
        did_something || (self.applied.failed.is_empty() && self.kept.is_empty())
    }

    /// Steps the write rules refused (planned and applied): each is reported, none written.
    pub fn refused(&self) -> usize {
        let planned = self
            .kept
            .iter()
            .filter(|(_, k)| *k == Kept::Protected)
            .count();
        planned + self.applied.refused
    }

    /// The event frontends show.
    pub fn to_event(&self, redo: bool) -> Event {
        Event::UndoCompleted {
            restored: self.applied.restored.clone(),
            removed: self.applied.removed.clone(),
            kept: self
                .kept
                .iter()
                .map(|(p, why)| format!("{p} ({})", plan::kept_reason(why)))
                .chain(self.applied.failed.iter().cloned())
                .collect(),
            redo,
        }
    }
}

/// Applies a plan and records the result as a snapshot. What git and baton trust is looked at
/// before and audited after, as around a sandboxed command: a config, hook or `.baton/` file
/// that changed meanwhile (undo itself writes none: the write rules refuse those steps) is
/// undone and reported.
pub fn apply(
    config: &StoreConfig,
    store: &Store,
    plan: &Plan,
) -> Result<Reverted, CheckpointError> {
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &store.workspace);
    let trusted_before = git_guard::snapshot(&policy);
    let applied = plan::apply(store, plan)?;
    let audit = git_guard::audit(&trusted_before, &policy);
    // The files now are the plan's snapshot plus what was just done: no second walk, unless
    // the trees cannot be updated that way (then the workspace is walked again).
    let after = match store.derive(&plan.current, &applied.changes) {
        Ok(id) => id,
        Err(_) => store.snapshot(&config.exclude)?,
    };
    Ok(Reverted {
        applied,
        kept: plan
            .kept
            .iter()
            .map(|(p, k)| (shown(p), k.clone()))
            .collect(),
        before: plan.current.clone(),
        after,
        audit,
    })
}

#[cfg(test)]
mod tests;
