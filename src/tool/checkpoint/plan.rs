//! What an undo (or redo) will do, worked out from three states before anything is touched:
//! the snapshot to go back to, the snapshot the change left, and the files now. Only paths the
//! change itself changed are candidates; each is acted on only when it is still exactly what
//! the change left, so later edits by the user are kept and a file changed by both is reported.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use git2::Oid;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::beneath::{self, Found, PutMode};
use super::store::{Entry, MAX_CHECKPOINT_FILE_BYTES, Opened, Store};
use super::{CheckpointError, shown};
use crate::protocol::SandboxMode;
use crate::sandbox::{SandboxPolicy, WriteRules};

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Put the snapshot's version back (the file was changed or deleted).
    Restore { path: PathBuf, entry: Entry },
    /// Remove a file the change created (still exactly as the change left it).
    Remove { path: PathBuf, entry: Entry },
}

impl Step {
    pub fn path(&self) -> &Path {
        match self {
            Step::Restore { path, .. } | Step::Remove { path, .. } => path,
        }
    }
}

/// Why a path the change touched is left as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kept {
    /// Changed again since (by the user, or anything else): not clobbered without `--force`.
    ChangedSince,
    /// Not in the checkpoint (too large, unreadable, or ignored then): never deleted or
    /// overwritten.
    NotSnapshotted,
    /// What stands there now could not be saved first (too large, unreadable, a folder with
    /// files in it): even `--force` does not destroy it.
    Unsaved,
    /// The write rules protect the path now (git's hooks, config and redirects, `.baton/`,
    /// what the file tools refuse: `sandbox::WriteRules::undo_denies`): undo never writes or
    /// removes it, whatever the snapshot holds, even with `--force`.
    Protected,
}

/// The whole plan, shown before it is applied (`--dry-run`, the TUI's question).
#[derive(Debug)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub kept: Vec<(PathBuf, Kept)>,
    /// The snapshot of the files as they were when the plan was made: what redo returns to.
    pub current: String,
    /// The files of `current`: each step re-checks its file against them right before acting.
    current_files: BTreeMap<PathBuf, Entry>,
    /// The folders of the snapshot the plan goes back to (kept when emptied).
    target_dirs: BTreeSet<PathBuf>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The plan as lines for a terminal (every path through the sanitizer).
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for step in &self.steps {
            match step {
                Step::Restore { path, .. } => out.push(format!("restore  {}", shown(path))),
                Step::Remove { path, .. } => out.push(format!("remove   {}", shown(path))),
            }
        }
        for (path, why) in &self.kept {
            let verb = match why {
                Kept::Protected => "refuse ",
                _ => "keep   ",
            };
            out.push(format!("{verb}  {}  ({})", shown(path), kept_reason(why)));
        }
        out
    }
}

pub fn kept_reason(why: &Kept) -> &'static str {
    match why {
        Kept::ChangedSince => "changed since; --force to overwrite",
        Kept::NotSnapshotted => "not in the checkpoint",
        Kept::Unsaved => "cannot be saved first, so it is not replaced",
        Kept::Protected => {
            "protected: git hooks, git config or baton's own files; undo does not write there"
        }
    }
}

/// Works out how to take the workspace from `left` (what the change left) back to `target`.
/// A snapshot of the files now is taken first (it is what `Plan::current` names).
pub fn plan(
    store: &Store,
    target_id: &str,
    left_id: &str,
    exclude: &[PathBuf],
    force: bool,
) -> Result<Plan, CheckpointError> {
    let target = store.open_snapshot(target_id)?;
    let left = store.open_snapshot(left_id)?;
    let current_id = store.snapshot(exclude)?;
    let now = store.open_snapshot(&current_id)?;
    // Only what the change changed is a candidate: identical folders are never visited.
    let mut paths = store.changed_paths(&left, &target)?;
    paths.extend(left.unknown.iter().cloned());
    let mut ignored_then = IgnoredIn::new(store, &target);
    // The write rules as the disk is now, not as it was when the snapshots were taken: a
    // hooks folder named since (`core.hooksPath` in the user's git config) is protected too.
    let rules = undo_rules(&store.workspace);
    let mut steps = Vec::new();
    let mut kept = Vec::new();
    let mut current_files = BTreeMap::new();
    let mut target_dirs = BTreeSet::new();
    for path in &paths {
        for dir in path.ancestors().skip(1) {
            if !dir.as_os_str().is_empty() && target.is_dir(dir) {
                target_dirs.insert(dir.to_path_buf());
            }
        }
        if target.is_dir(path) {
            target_dirs.insert(path.clone());
        }
    }
    for path in paths {
        let want = target.entry(&path)?;
        let was = left.entry(&path)?;
        let left_unknown = left.is_unknown(&path);
        if want == was && !left_unknown {
            continue;
        }
        if target.is_unknown(&path) {
            kept.push((path, Kept::NotSnapshotted));
            continue;
        }
        let now_unknown = now.is_unknown(&path);
        let is = now.entry(&path)?;
        if let Some(entry) = is {
            current_files.insert(path.clone(), entry);
        }
        if !now_unknown && is == want {
            continue;
        }
        let untouched_since = !left_unknown && !now_unknown && is == was;
        if want.is_none() && ignored_then.contains(&path) {
            kept.push((path, Kept::NotSnapshotted));
            continue;
        }
        if rules.undo_denies(&store.workspace, &store.workspace.join(&path)) {
            kept.push((path, Kept::Protected));
            continue;
        }
        if !untouched_since {
            if now_unknown {
                kept.push((path, Kept::Unsaved));
                continue;
            }
            if !force {
                kept.push((path, Kept::ChangedSince));
                continue;
            }
        }
        match (want, is) {
            (Some(entry), _) => steps.push(Step::Restore { path, entry }),
            (None, Some(entry)) => steps.push(Step::Remove { path, entry }),
            (None, None) => {}
        }
    }
    Ok(Plan {
        steps,
        kept,
        current: current_id,
        current_files,
        target_dirs,
    })
}

/// What applying a plan did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Applied {
    pub restored: Vec<String>,
    pub removed: Vec<String>,
    /// What was done, by path (`None`: removed), for the snapshot of the result.
    pub changes: Vec<(PathBuf, Option<Entry>)>,
    /// Steps not done, with why (the file changed between plan and apply, a symlink or
    /// file stands where a folder should be, the write rules refuse the path, …).
    pub failed: Vec<String>,
    /// How many of `failed` the write rules refused.
    pub refused: usize,
}

/// The write rules undo and redo obey in `workspace` (canonical): those of the
/// workspace-write policy, whatever the session's sandbox mode, as for the file tools
/// (`tool::path::resolve_for_write`), worked out from the disk as it is now.
fn undo_rules(workspace: &Path) -> WriteRules {
    SandboxPolicy::new(SandboxMode::WorkspaceWrite, workspace).write_rules()
}

/// How a step the write rules refused is reported.
const REFUSED: &str = "refused: ";

/// Where writing `name` in the folder `dir` lands: the folder's real path, read back from its
/// descriptor (so a rename after it was opened does not matter), and the name. `None` without
/// `/proc`.
fn landing(dir: &crate::untrusted_fs::Dir, name: &std::ffi::OsStr) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    let link = PathBuf::from(format!("/proc/self/fd/{}", dir.fd().as_raw_fd()));
    std::fs::read_link(link).ok().map(|real| real.join(name))
}

/// Refuses a change to `name` in `dir` (opened for the step `path`) that the write rules
/// protect: judged where it lands, or by the step's path where that cannot be read back.
fn check_allowed(
    rules: &WriteRules,
    workspace: &Path,
    dir: &crate::untrusted_fs::Dir,
    name: &std::ffi::OsStr,
    path: &Path,
) -> Result<(), String> {
    let target = landing(dir, name).unwrap_or_else(|| workspace.join(path));
    if rules.undo_denies(workspace, &target) {
        return Err(format!("{REFUSED}{}", kept_reason(&Kept::Protected)));
    }
    Ok(())
}

/// Applies `plan` beneath the workspace, never following a symlink, and re-checking each file
/// right before it is replaced or removed. The write rules are worked out again here, when
/// the plan is applied: a step whose path they protect is refused (reported, never written).
pub fn apply(store: &Store, plan: &Plan) -> Result<Applied, CheckpointError> {
    let root = beneath::open_root(&store.workspace).map_err(|e| CheckpointError::Io {
        path: store.workspace.display().to_string(),
        reason: e.to_string(),
    })?;
    let rules = undo_rules(&store.workspace);
    let ws = store.workspace.as_path();
    let mut done = Applied::default();
    let mut removals: Vec<(&PathBuf, &Entry)> = Vec::new();
    let mut restores: Vec<(&PathBuf, &Entry)> = Vec::new();
    for step in &plan.steps {
        match step {
            Step::Remove { path, entry } => removals.push((path, entry)),
            Step::Restore { path, entry } => restores.push((path, entry)),
        }
    }
    // Deepest first: what the change put inside a folder goes before the folder's own entry.
    removals.sort_by(|a, b| b.0.cmp(a.0));
    let mut emptied: BTreeSet<PathBuf> = BTreeSet::new();
    // Judged by name before anything on the way is opened or created (a protected folder
    // that does not exist yet is not made either), and again where each change lands.
    let refused = |path: &Path| {
        rules.undo_denies(ws, &ws.join(path)).then(|| {
            format!(
                "{}: {REFUSED}{}",
                shown(path),
                kept_reason(&Kept::Protected)
            )
        })
    };
    for (path, entry) in removals {
        if let Some(why) = refused(path) {
            done.failed.push(why);
            done.refused += 1;
            continue;
        }
        match remove_one(&root, path, entry, &|dir, name| {
            check_allowed(&rules, ws, dir, name, path)
        }) {
            Ok(()) => {
                done.removed.push(shown(path));
                done.changes.push((path.clone(), None));
                emptied.extend(
                    path.ancestors()
                        .skip(1)
                        .filter(|a| !a.as_os_str().is_empty())
                        .map(Path::to_path_buf),
                );
            }
            Err(why) => {
                done.refused += usize::from(why.starts_with(REFUSED));
                done.failed.push(format!("{}: {why}", shown(path)));
            }
        }
    }
    // Folders the change created and that are empty now go too (deepest first).
    for dir in emptied.iter().rev() {
        if !plan.target_dirs.contains(dir) && !rules.undo_denies(ws, &ws.join(dir)) {
            let _ = beneath::remove_empty_dir(&root, dir);
        }
    }
    restores.sort_by(|a, b| a.0.cmp(b.0));
    for (path, entry) in restores {
        if let Some(why) = refused(path) {
            done.failed.push(why);
            done.refused += 1;
            continue;
        }
        let was = current_entry(&plan.current_files, path);
        let allowed = |dir: &crate::untrusted_fs::Dir, name: &std::ffi::OsStr| {
            check_allowed(&rules, ws, dir, name, path)
        };
        match restore_one(
            store,
            &root,
            path,
            entry,
            was.as_ref(),
            &plan.target_dirs,
            &allowed,
        ) {
            Ok(()) => {
                done.restored.push(shown(path));
                done.changes.push((path.clone(), Some(*entry)));
            }
            Err(why) => {
                done.refused += usize::from(why.starts_with(REFUSED));
                done.failed.push(format!("{}: {why}", shown(path)));
            }
        }
    }
    Ok(done)
}

fn current_entry(files: &BTreeMap<PathBuf, Entry>, path: &Path) -> Option<Entry> {
    files.get(path).copied()
}

fn errno_text(e: nix::errno::Errno) -> String {
    match e {
        nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => {
            "a symlink or file stands where a folder should be; left alone".into()
        }
        nix::errno::Errno::EISDIR | nix::errno::Errno::ENOTEMPTY | nix::errno::Errno::EEXIST => {
            "a folder stands there; left alone".into()
        }
        other => other.desc().to_string(),
    }
}

/// Whether what stands on disk is exactly `entry`.
fn found_is(found: &Found, entry: &Entry) -> bool {
    match found {
        Found::File { bytes, executable } if *executable == entry.is_executable() => {
            !entry.is_link()
                && Oid::hash_object(git2::ObjectType::Blob, bytes).ok() == Some(entry.id)
        }
        Found::Link(target) => {
            entry.is_link()
                && Oid::hash_object(git2::ObjectType::Blob, target).ok() == Some(entry.id)
        }
        _ => false,
    }
}

/// Removes FIFOs, sockets and device nodes standing where `path`'s folders should be (they
/// hold no data; a command put them there to block the restore). Returns whether one went.
fn clear_special_ancestors(root: &crate::untrusted_fs::Dir, path: &Path) -> bool {
    let mut cleared = false;
    let mut ancestors: Vec<&Path> = path
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .collect();
    ancestors.reverse();
    for folder in ancestors {
        let Ok((dir, name)) = beneath::open_parent(root, folder, false) else {
            break;
        };
        match beneath::read_at(&dir, name, 0) {
            Ok(Found::Special) => cleared |= beneath::remove_at(&dir, name).is_ok(),
            Ok(Found::Other) => continue,
            _ => break,
        }
    }
    cleared
}

/// Whether the write rules allow changing a name in a folder undo opened.
type Allowed<'a> = dyn Fn(&crate::untrusted_fs::Dir, &std::ffi::OsStr) -> Result<(), String> + 'a;

fn remove_one(
    root: &crate::untrusted_fs::Dir,
    path: &Path,
    entry: &Entry,
    allowed: &Allowed<'_>,
) -> Result<(), String> {
    let (dir, name) = beneath::open_parent(root, path, false).map_err(errno_text)?;
    allowed(&dir, name)?;
    let found = beneath::read_at(&dir, name, MAX_CHECKPOINT_FILE_BYTES).map_err(errno_text)?;
    if !found_is(&found, entry) {
        return Err("changed while undo ran; left alone".into());
    }
    beneath::remove_at(&dir, name).map_err(errno_text)
}

fn restore_one(
    store: &Store,
    root: &crate::untrusted_fs::Dir,
    path: &Path,
    entry: &Entry,
    was: Option<&Entry>,
    target_dirs: &BTreeSet<PathBuf>,
    allowed: &Allowed<'_>,
) -> Result<(), String> {
    let (dir, name) = match beneath::open_parent(root, path, true) {
        Err(nix::errno::Errno::ENOTDIR) if clear_special_ancestors(root, path) => {
            beneath::open_parent(root, path, true).map_err(errno_text)?
        }
        other => other.map_err(errno_text)?,
    };
    allowed(&dir, name)?;
    let found = beneath::read_at(&dir, name, MAX_CHECKPOINT_FILE_BYTES).map_err(errno_text)?;
    let still = match (&found, was) {
        (Found::Missing, None) => true,
        // A FIFO, socket or device node a command left holds no data: it goes, and the file
        // takes its place (the writer never writes onto one).
        (Found::Special, _) => beneath::remove_at(&dir, name).is_ok(),
        (found, Some(was)) => found_is(found, was),
        // An empty folder the change left where a file was: removed, never a full one.
        (Found::Other, None) if !target_dirs.contains(path) => {
            beneath::remove_empty_dir(root, path).is_ok()
        }
        _ => false,
    };
    if !still {
        return Err("changed while undo ran; left alone".into());
    }
    let content = store.content(entry.id).map_err(|e| e.to_string())?;
    let mode = if entry.is_link() {
        PutMode::Link
    } else {
        PutMode::File {
            executable: entry.is_executable(),
        }
    };
    beneath::put_at(&dir, name, &content, mode).map_err(errno_text)
}

/// Paths the snapshot walk may have left out when the target snapshot was taken: a file the
/// change "created" that was ignored then may simply not have been visible to the checkpoint
/// (it was the user's, and nothing saved it), so it is never removed.
///
/// The walk ignores by the `.gitignore` files of the workspace (read here from the target
/// snapshot itself), and also by files no snapshot holds: `.gitignore` files of the folders
/// above the workspace, a repository's `.git/info/exclude` and the user's global excludes
/// file. A turn can un-ignore a file those kept out (a `!name` line in a `.gitignore` it
/// writes), so they are read too, as they are now; of them only an "ignore" counts, never a
/// whitelist (a folder above the workspace may be one commands can write, like `/tmp`). A
/// target `.gitignore` that was a symlink or could not be saved leaves its folder's rules
/// unknown: everything beneath counts as possibly ignored then.
struct IgnoredIn<'a, 'r> {
    store: &'a Store,
    target: &'a Opened<'r>,
    /// Per folder of the workspace: its `.gitignore` as the target holds it (`Known(None)`
    /// when it has none), or `Unknown`.
    matchers: BTreeMap<PathBuf, Rules>,
    /// Per folder of the workspace: the `info/exclude` of a repository there, if any.
    excludes: BTreeMap<PathBuf, Option<Gitignore>>,
    /// The `.gitignore` files of the folders above the workspace, nearest first, and the
    /// global excludes file: read once, when first needed.
    outside: Option<Vec<Gitignore>>,
}

enum Rules {
    Known(Option<Gitignore>),
    Unknown,
}

/// The ignore file at `file` as a matcher rooted at `root`; `None` when it is missing or
/// empty.
fn ignore_file(root: &Path, file: &Path) -> Option<Gitignore> {
    if !file.is_file() {
        return None;
    }
    let mut builder = GitignoreBuilder::new(root);
    let _ = builder.add(file);
    builder.build().ok().filter(|m| !m.is_empty())
}

impl<'a, 'r> IgnoredIn<'a, 'r> {
    fn new(store: &'a Store, target: &'a Opened<'r>) -> Self {
        IgnoredIn {
            store,
            target,
            matchers: BTreeMap::new(),
            excludes: BTreeMap::new(),
            outside: None,
        }
    }

    fn matcher(&mut self, dir: &Path) -> &Rules {
        if !self.matchers.contains_key(dir) {
            let file = dir.join(".gitignore");
            let entry = match self.target.is_unknown(&file) {
                true => Err(()),
                false => self.target.entry(&file).map_err(drop),
            };
            let rules = match entry {
                Ok(Some(e)) if e.is_link() => Rules::Unknown,
                Ok(Some(e)) => match self.store.content(e.id) {
                    Ok(content) => {
                        let mut builder = GitignoreBuilder::new(self.store.workspace.join(dir));
                        for line in String::from_utf8_lossy(&content).lines() {
                            let _ = builder.add_line(None, line);
                        }
                        Rules::Known(builder.build().ok())
                    }
                    Err(_) => Rules::Unknown,
                },
                Ok(None) => Rules::Known(None),
                Err(_) => Rules::Unknown,
            };
            self.matchers.insert(dir.to_path_buf(), rules);
        }
        &self.matchers[dir]
    }

    /// The `info/exclude` of a repository whose `.git` is in `dir` (of the workspace).
    fn exclude(&mut self, dir: &Path) -> Option<&Gitignore> {
        if !self.excludes.contains_key(dir) {
            let abs = self.store.workspace.join(dir);
            let matcher = crate::sandbox::git_guard::gitdir_of(&abs.join(".git")).and_then(|g| {
                // A linked worktree's gitdir names the shared one, where `info/` lives.
                // In the workspace's `.git`: a command may have left a FIFO there.
                let common = crate::untrusted_fs::read_following(&g.join("commondir"), 4096)
                    .ok()
                    .map(|c| g.join(String::from_utf8_lossy(&c).trim()))
                    .unwrap_or(g);
                ignore_file(&abs, &common.join("info/exclude"))
            });
            self.excludes.insert(dir.to_path_buf(), matcher);
        }
        self.excludes.get(dir).and_then(Option::as_ref)
    }

    fn outside(&mut self) -> &[Gitignore] {
        let workspace = &self.store.workspace;
        self.outside.get_or_insert_with(|| {
            let mut found: Vec<Gitignore> = workspace
                .ancestors()
                .skip(1)
                .filter_map(|dir| ignore_file(dir, &dir.join(".gitignore")))
                .collect();
            let (global, _) = GitignoreBuilder::new(workspace).build_global();
            if !global.is_empty() {
                found.push(global);
            }
            found
        })
    }

    /// Whether the walk may have left `path` (a folder when `is_dir`) out then.
    fn leaves_out(&mut self, path: &Path, is_dir: bool) -> bool {
        // Deepest folder first: its rules override the ones above it.
        for dir in path.ancestors().skip(1) {
            let rel = path.strip_prefix(dir).unwrap_or(path).to_path_buf();
            let m = match self.matcher(dir) {
                Rules::Unknown => return true,
                Rules::Known(None) => continue,
                Rules::Known(Some(matcher)) => matcher.matched(&rel, is_dir),
            };
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        let abs = self.store.workspace.join(path);
        for dir in path.ancestors().skip(1) {
            if let Some(exclude) = self.exclude(dir)
                && exclude.matched(&abs, is_dir).is_ignore()
            {
                return true;
            }
        }
        self.outside()
            .iter()
            .any(|m| m.matched(&abs, is_dir).is_ignore())
    }

    /// Whether `path` (a file) or a folder above it may have been left out then: the walk
    /// does not enter an ignored folder.
    fn contains(&mut self, path: &Path) -> bool {
        let folders: Vec<PathBuf> = path
            .ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .collect();
        folders.iter().rev().any(|f| self.leaves_out(f, true)) || self.leaves_out(path, false)
    }
}
