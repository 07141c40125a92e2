//! Checkpoints of the working tree and undo. Before the first file change of a turn the whole
//! working tree (tracked and untracked files, minus .gitignored and very large ones) is stored as
//! a commit object under `refs/baton/checkpoints/<session>/<n>`, built with an in-memory index:
//! HEAD, the user's index and branches are never touched. `undo` restores the newest checkpoint
//! inside the workspace exactly (content, modes, symlinks; files created since are removed) and
//! then drops its ref, so a second undo goes one checkpoint further back.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use git2::{FileMode, Index, IndexEntry, IndexTime, ObjectType, Oid, Repository, Signature};

use super::{ToolContext, ToolState};
use crate::protocol::Event;

/// Files larger than this are left out of checkpoints (and left alone by undo).
pub const MAX_CHECKPOINT_FILE_BYTES: u64 = 10 * 1024 * 1024;

const REF_ROOT: &str = "refs/baton/checkpoints";

/// Per-session checkpoint bookkeeping kept in `ToolState`.
#[derive(Debug, Default)]
pub struct CheckpointState {
    session: Option<String>,
    taken_this_turn: bool,
    warned_unavailable: bool,
    /// Checkpoints taken in this session, oldest first.
    pub taken: Vec<Checkpoint>,
}

/// One stored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The full ref name, `refs/baton/checkpoints/<session>/<n>`.
    pub reference: String,
    pub commit: String,
    pub session: String,
    pub number: u64,
    pub label: String,
    /// Commit time, seconds since the epoch.
    pub time: i64,
}

/// What `undo` changed, paths relative to the workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoReport {
    pub checkpoint: Checkpoint,
    /// Files written back (changed or deleted since the checkpoint).
    pub restored: Vec<String>,
    /// Files created since the checkpoint, now removed.
    pub removed: Vec<String>,
    /// Files left alone because they are too large to be checkpointed.
    pub skipped: Vec<String>,
}

impl UndoReport {
    /// The event frontends show for this undo.
    pub fn to_event(&self) -> Event {
        Event::UndoCompleted {
            restored: self.restored.clone(),
            removed: self.removed.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("undo is unavailable: not a git repository ({0})")]
    NotARepository(String),
    #[error("undo is unavailable: {0} is a bare repository")]
    Bare(String),
    #[error("no checkpoint to undo in {0}")]
    NoCheckpoint(String),
    #[error("git error: {0}")]
    Git(#[from] git2::Error),
    #[error("{path}: {reason}")]
    Io { path: String, reason: String },
}

fn io_error(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The session name used when the agent did not set one (one per process).
fn process_session() -> &'static str {
    static SESSION: OnceLock<String> = OnceLock::new();
    SESSION.get_or_init(|| uuid::Uuid::now_v7().to_string())
}

/// Ref names allow only a safe subset of characters; anything else becomes `_`.
fn ref_safe(session: &str) -> String {
    let cleaned: String = session
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if cleaned.is_empty() {
        "session".into()
    } else {
        cleaned
    }
}

/// Names the session whose checkpoints the tools take (the agent calls this once).
pub fn set_session(state: &ToolState, session_id: &str) {
    if let Ok(mut cp) = state.checkpoints.lock() {
        cp.session = Some(ref_safe(session_id));
    }
}

/// Marks the start of a turn: the next file change takes a new checkpoint.
pub fn begin_turn(state: &ToolState) {
    if let Ok(mut cp) = state.checkpoints.lock() {
        cp.taken_this_turn = false;
    }
}

/// Called by every file-changing tool before it writes: takes the turn's checkpoint once.
/// Failure never blocks the edit; it is reported as a warning event instead.
pub fn before_change(ctx: &ToolContext) {
    let Ok(mut cp) = ctx.state.checkpoints.lock() else {
        return;
    };
    if cp.taken_this_turn {
        return;
    }
    cp.taken_this_turn = true;
    let session = cp
        .session
        .clone()
        .unwrap_or_else(|| process_session().to_string());
    let label = format!("before tool call {}", ctx.call_id);
    match checkpoint_in_session(&ctx.workspace, &session, &label) {
        Ok(taken) => cp.taken.push(taken),
        Err(CheckpointError::NotARepository(_)) | Err(CheckpointError::Bare(_)) => {
            if !cp.warned_unavailable {
                cp.warned_unavailable = true;
                ctx.events.emit(Event::Warning {
                    message: "undo is unavailable: the workspace is not in a git repository".into(),
                });
            }
        }
        Err(e) => ctx.events.emit(Event::Warning {
            message: format!("checkpoint failed, undo will not cover this turn: {e}"),
        }),
    }
}

/// Takes a checkpoint of the working tree of the repository containing `workspace`, in this
/// process's default session.
pub fn checkpoint(workspace: &Path, label: &str) -> Result<Checkpoint, CheckpointError> {
    checkpoint_in_session(workspace, process_session(), label)
}

fn open_repo(workspace: &Path) -> Result<(Repository, PathBuf), CheckpointError> {
    let repo = Repository::discover(workspace)
        .map_err(|_| CheckpointError::NotARepository(workspace.display().to_string()))?;
    let workdir = repo
        .workdir()
        .ok_or_else(|| CheckpointError::Bare(repo.path().display().to_string()))?;
    let workdir = std::fs::canonicalize(workdir).map_err(|e| io_error(workdir, e))?;
    Ok((repo, workdir))
}

/// Takes a checkpoint under `refs/baton/checkpoints/<session>/<n>` (n = next number).
pub fn checkpoint_in_session(
    workspace: &Path,
    session: &str,
    label: &str,
) -> Result<Checkpoint, CheckpointError> {
    let (repo, workdir) = open_repo(workspace)?;
    let session = ref_safe(session);
    let tree_id = snapshot_tree(&repo, &workdir)?;
    let tree = repo.find_tree(tree_id)?;
    let signature = repo
        .signature()
        .or_else(|_| Signature::now("baton", "baton@localhost"))?;
    let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
    let parents: Vec<&git2::Commit> = parent.iter().collect();
    let message = format!("baton checkpoint: {label}\n\nsession {session}\n");
    let commit = repo.commit(None, &signature, &signature, &message, &tree, &parents)?;
    let number = list_in_repo(&repo)?
        .iter()
        .filter(|c| c.session == session)
        .map(|c| c.number)
        .max()
        .map_or(1, |n| n + 1);
    let reference = format!("{REF_ROOT}/{session}/{number}");
    repo.reference(&reference, commit, false, &message)?;
    Ok(Checkpoint {
        reference,
        commit: commit.to_string(),
        session,
        number,
        label: label.to_string(),
        time: repo.find_commit(commit)?.time().seconds(),
    })
}

/// All checkpoints of the repository containing `workspace`, oldest first.
pub fn list_checkpoints(workspace: &Path) -> Result<Vec<Checkpoint>, CheckpointError> {
    let (repo, _) = open_repo(workspace)?;
    list_in_repo(&repo)
}

fn list_in_repo(repo: &Repository) -> Result<Vec<Checkpoint>, CheckpointError> {
    let mut found = Vec::new();
    for reference in repo.references_glob(&format!("{REF_ROOT}/*"))? {
        let reference = reference?;
        let Some(name) = reference.name() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(&format!("{REF_ROOT}/")) else {
            continue;
        };
        let Some((session, number)) = rest.rsplit_once('/') else {
            continue;
        };
        let Ok(number) = number.parse::<u64>() else {
            continue;
        };
        let Ok(commit) = reference.peel_to_commit() else {
            continue;
        };
        let label = commit
            .summary()
            .unwrap_or("")
            .trim_start_matches("baton checkpoint: ")
            .to_string();
        found.push(Checkpoint {
            reference: name.to_string(),
            commit: commit.id().to_string(),
            session: session.to_string(),
            number,
            label,
            time: commit.time().seconds(),
        });
    }
    found.sort_by(|a, b| (a.time, &a.session, a.number).cmp(&(b.time, &b.session, b.number)));
    Ok(found)
}

/// A file of the working tree as a checkpoint stores it.
struct TreeFile {
    abs: PathBuf,
    git_path: Vec<u8>,
    meta: std::fs::Metadata,
}

/// Walks the working tree under `start` as checkpoints see it: .gitignore respected, `.git`
/// directories skipped. Returns regular files and symlinks, with paths relative to `workdir`.
fn walk_files(workdir: &Path, start: &Path) -> Vec<TreeFile> {
    let walker = ignore::WalkBuilder::new(start)
        .hidden(false)
        .ignore(false)
        .parents(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build();
    let mut files = Vec::new();
    for entry in walker.flatten() {
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if !(kind.is_file() || kind.is_symlink()) {
            continue;
        }
        let abs = entry.into_path();
        let Ok(rel) = abs.strip_prefix(workdir) else {
            continue;
        };
        let Ok(meta) = std::fs::symlink_metadata(&abs) else {
            continue;
        };
        let git_path = rel.as_os_str().as_bytes().to_vec();
        files.push(TreeFile {
            abs,
            git_path,
            meta,
        });
    }
    files
}

fn file_mode(meta: &std::fs::Metadata) -> u32 {
    if meta.file_type().is_symlink() {
        u32::from(FileMode::Link)
    } else if meta.permissions().mode() & 0o111 != 0 {
        u32::from(FileMode::BlobExecutable)
    } else {
        u32::from(FileMode::Blob)
    }
}

/// What identifies an unchanged file between two checkpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStat {
    mtime: (i64, i64),
    size: u64,
    mode: u32,
}

#[derive(Debug, Clone, Copy)]
struct CachedBlob {
    stat: FileStat,
    id: Oid,
    /// When the file was hashed (seconds): a file modified in that same second may have
    /// changed after hashing without a new mtime, so it is only trusted when older.
    hashed_at: i64,
}

/// Blob ids of untracked files hashed by earlier checkpoints of this process, by absolute
/// path: the repository's index only covers tracked files, and rehashing every untracked file
/// each turn is what makes checkpoints of large untracked trees slow.
fn blob_cache() -> &'static std::sync::Mutex<std::collections::HashMap<PathBuf, CachedBlob>> {
    static CACHE: OnceLock<std::sync::Mutex<std::collections::HashMap<PathBuf, CachedBlob>>> =
        OnceLock::new();
    CACHE.get_or_init(Default::default)
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Builds the tree object of the whole working tree without touching the repository's index.
fn snapshot_tree(repo: &Repository, workdir: &Path) -> Result<Oid, CheckpointError> {
    use std::os::unix::fs::MetadataExt;
    let real_index = repo.index().ok();
    // Entries written in the same second as the index file may be "racily clean": rehash them.
    let index_mtime = std::fs::metadata(repo.path().join("index"))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs() as i64);
    let odb = repo.odb().ok();
    let mut index = Index::new()?;
    let mut files = walk_files(workdir, workdir);
    // Adding in path order keeps the in-memory index append-only.
    files.sort_unstable_by(|a, b| a.git_path.cmp(&b.git_path));
    for file in files {
        if file.meta.len() > MAX_CHECKPOINT_FILE_BYTES {
            continue;
        }
        let mode = file_mode(&file.meta);
        let cached = real_index
            .as_ref()
            .and_then(|idx| idx.get_path(Path::new(OsStr::from_bytes(&file.git_path)), 0))
            .filter(|entry| {
                entry.mode == mode
                    && entry.file_size == file.meta.len() as u32
                    && i64::from(entry.mtime.seconds()) == file.meta.mtime()
                    && entry.mtime.nanoseconds() == file.meta.mtime_nsec() as u32
                    && i64::from(entry.mtime.seconds()) < index_mtime
            })
            .map(|entry| entry.id);
        let stat = FileStat {
            mtime: (file.meta.mtime(), file.meta.mtime_nsec()),
            size: file.meta.len(),
            mode,
        };
        let cached = cached.or_else(|| {
            let known = blob_cache().lock().ok()?.get(&file.abs).copied()?;
            let settled = known.stat == stat && stat.mtime.0 < known.hashed_at - 1;
            (settled && odb.as_ref()?.exists(known.id)).then_some(known.id)
        });
        let id = match cached {
            Some(id) => id,
            None if mode == u32::from(FileMode::Link) => {
                let target = std::fs::read_link(&file.abs).map_err(|e| io_error(&file.abs, e))?;
                repo.blob(target.as_os_str().as_bytes())?
            }
            None => match repo.blob_path(&file.abs) {
                Ok(id) => {
                    if let Ok(mut cache) = blob_cache().lock() {
                        let hashed_at = now_secs();
                        cache.insert(
                            file.abs.clone(),
                            CachedBlob {
                                stat,
                                id,
                                hashed_at,
                            },
                        );
                    }
                    id
                }
                // Vanished or unreadable between walk and read: leave it out of the snapshot.
                Err(_) => continue,
            },
        };
        let path_len = file.git_path.len().min(0xfff) as u16;
        index.add(&IndexEntry {
            ctime: IndexTime::new(0, 0),
            mtime: IndexTime::new(0, 0),
            dev: 0,
            ino: 0,
            mode,
            uid: 0,
            gid: 0,
            file_size: file.meta.len() as u32,
            id,
            flags: path_len,
            flags_extended: 0,
            path: file.git_path,
        })?;
    }
    Ok(index.write_tree_to(repo)?)
}

/// Restores the newest checkpoint of the repository containing `workspace`, inside the
/// workspace only, and removes its ref.
pub fn undo(workspace: &Path) -> Result<UndoReport, CheckpointError> {
    let (repo, workdir) = open_repo(workspace)?;
    let workspace = std::fs::canonicalize(workspace).map_err(|e| io_error(workspace, e))?;
    let latest = list_in_repo(&repo)?
        .pop()
        .ok_or_else(|| CheckpointError::NoCheckpoint(workspace.display().to_string()))?;
    let report = restore(&repo, &workdir, &workspace, latest)?;
    repo.find_reference(&report.checkpoint.reference)?
        .delete()?;
    Ok(report)
}

fn restore(
    repo: &Repository,
    workdir: &Path,
    workspace: &Path,
    checkpoint: Checkpoint,
) -> Result<UndoReport, CheckpointError> {
    let commit = repo.find_commit(Oid::from_str(&checkpoint.commit)?)?;
    let tree = commit.tree()?;
    let prefix = workspace.strip_prefix(workdir).unwrap_or(Path::new(""));
    let mut wanted: BTreeMap<PathBuf, (Oid, i32)> = BTreeMap::new();
    tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
        if entry.kind() == Some(ObjectType::Blob) {
            let path = Path::new(dir).join(OsStr::from_bytes(entry.name_bytes()));
            if path.starts_with(prefix) {
                wanted.insert(path, (entry.id(), entry.filemode()));
            }
        }
        git2::TreeWalkResult::Ok
    })?;
    let shown =
        |rel: &Path| crate::tool::path::display_relative(rel.strip_prefix(prefix).unwrap_or(rel));
    let mut report = UndoReport {
        checkpoint,
        restored: Vec::new(),
        removed: Vec::new(),
        skipped: Vec::new(),
    };
    // Restore first: .gitignore files come back before the walk below decides, with the
    // checkpoint's ignore rules, which files are new (and get removed).
    for (rel, (id, mode)) in &wanted {
        let abs = workdir.join(rel);
        if unchanged_since_hashed(&abs, *id, *mode) {
            continue;
        }
        let blob = repo.find_blob(*id)?;
        if matches_disk(&abs, blob.content(), *mode) {
            continue;
        }
        write_entry(&abs, blob.content(), *mode, workspace)?;
        report.restored.push(shown(rel));
    }
    let created: BTreeSet<PathBuf> = walk_files(workdir, workspace)
        .into_iter()
        .filter_map(|f| {
            let rel = PathBuf::from(OsStr::from_bytes(&f.git_path));
            if wanted.contains_key(&rel) {
                return None;
            }
            if f.meta.len() > MAX_CHECKPOINT_FILE_BYTES && !f.meta.file_type().is_symlink() {
                report.skipped.push(shown(&rel));
                return None;
            }
            Some(rel)
        })
        .collect();
    for rel in &created {
        let abs = workdir.join(rel);
        std::fs::remove_file(&abs).map_err(|e| io_error(&abs, e))?;
        remove_empty_parents(&abs, workspace);
        report.removed.push(shown(rel));
    }
    Ok(report)
}

/// Whether the file at `abs` is, by its stat, exactly the blob `id` a checkpoint hashed.
fn unchanged_since_hashed(abs: &Path, id: Oid, mode: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(abs) else {
        return false;
    };
    let stat = FileStat {
        mtime: (meta.mtime(), meta.mtime_nsec()),
        size: meta.len(),
        mode: file_mode(&meta),
    };
    let known = blob_cache().lock().ok().and_then(|c| c.get(abs).copied());
    known.is_some_and(|k| {
        k.id == id && k.stat == stat && stat.mode as i32 == mode && stat.mtime.0 < k.hashed_at - 1
    })
}

fn matches_disk(abs: &Path, content: &[u8], mode: i32) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(abs) else {
        return false;
    };
    if mode == i32::from(FileMode::Link) {
        return meta.file_type().is_symlink()
            && std::fs::read_link(abs).is_ok_and(|t| t.as_os_str().as_bytes() == content);
    }
    meta.is_file()
        && file_mode(&meta) as i32 == mode
        && meta.len() == content.len() as u64
        && std::fs::read(abs).is_ok_and(|bytes| bytes == content)
}

fn write_entry(
    abs: &Path,
    content: &[u8],
    mode: i32,
    workspace: &Path,
) -> Result<(), CheckpointError> {
    if let Ok(meta) = std::fs::symlink_metadata(abs) {
        let removed = if meta.is_dir() {
            std::fs::remove_dir_all(abs)
        } else {
            std::fs::remove_file(abs)
        };
        removed.map_err(|e| io_error(abs, e))?;
    }
    if let Some(parent) = abs.parent() {
        make_parent_dirs(parent, workspace)?;
    }
    if mode == i32::from(FileMode::Link) {
        std::os::unix::fs::symlink(OsStr::from_bytes(content), abs)
            .map_err(|e| io_error(abs, e))?;
        return Ok(());
    }
    std::fs::write(abs, content).map_err(|e| io_error(abs, e))?;
    let bits = if mode == i32::from(FileMode::BlobExecutable) {
        0o755
    } else {
        0o644
    };
    std::fs::set_permissions(abs, std::fs::Permissions::from_mode(bits))
        .map_err(|e| io_error(abs, e))
}

/// Creates `dir` and its parents. A file or symlink standing where the checkpoint had a
/// directory was created after it, and is replaced by the directory.
fn make_parent_dirs(dir: &Path, workspace: &Path) -> Result<(), CheckpointError> {
    if std::fs::create_dir_all(dir).is_ok() {
        return Ok(());
    }
    let mut blockers = Vec::new();
    let mut current = Some(dir);
    while let Some(path) = current {
        if !path.starts_with(workspace) || path == workspace {
            break;
        }
        if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_dir()) {
            blockers.push(path.to_path_buf());
        }
        current = path.parent();
    }
    for blocker in blockers {
        std::fs::remove_file(&blocker).map_err(|e| io_error(&blocker, e))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))
}

/// Removes directories left empty by undo, up to (not including) the workspace root.
fn remove_empty_parents(file: &Path, workspace: &Path) {
    let mut dir = file.parent();
    while let Some(d) = dir {
        if d == workspace || !d.starts_with(workspace) || std::fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}
