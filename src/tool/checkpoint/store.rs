//! The checkpoint store: a bare git repository of baton's own, outside the workspace (one per
//! workspace, under baton's data folder), that holds the snapshots. Commands cannot write it, so
//! nothing they plant in the workspace's `.git` is ever read back by undo; and a workspace with
//! no git repository (or a folder deep inside a big one) is snapshotted alone.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use git2::{FileMode, Index, IndexEntry, IndexTime, ObjectType, Oid, Repository, Signature};

use super::CheckpointError;

/// Files larger than this are left out of snapshots (and never deleted or overwritten by undo).
pub const MAX_CHECKPOINT_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// One file of a snapshot: its blob and git mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub id: Oid,
    pub mode: u32,
}

impl Entry {
    pub fn is_link(&self) -> bool {
        self.mode == u32::from(FileMode::Link)
    }
    pub fn is_executable(&self) -> bool {
        self.mode == u32::from(FileMode::BlobExecutable)
    }
}

/// A loaded, verified snapshot.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub files: BTreeMap<PathBuf, Entry>,
    /// Paths that were there but could not be stored (too large, unreadable, unreadable
    /// folders): undo never touches them or anything beneath them.
    pub unknown: BTreeSet<PathBuf>,
}

impl Snapshot {
    /// Whether `rel` (or a folder above it) could not be stored.
    pub fn is_unknown(&self, rel: &Path) -> bool {
        rel.ancestors().any(|a| self.unknown.contains(a))
    }
}

/// A snapshot opened by `Store::open_snapshot`.
pub struct Opened<'r> {
    id: String,
    files: git2::Tree<'r>,
    pub unknown: BTreeSet<PathBuf>,
}

impl Opened<'_> {
    /// Whether `rel` (or a folder above it) could not be stored.
    pub fn is_unknown(&self, rel: &Path) -> bool {
        rel.ancestors().any(|a| self.unknown.contains(a))
    }

    /// The file (or symlink) at `rel`; `None` when there is none, or a folder. Any other kind
    /// of entry (a gitlink, an odd mode) refuses the snapshot.
    pub fn entry(&self, rel: &Path) -> Result<Option<Entry>, CheckpointError> {
        check_relative(rel).map_err(|why| self.damaged(why))?;
        let Ok(entry) = self.files.get_path(rel) else {
            return Ok(None);
        };
        let mode = entry.filemode() as u32;
        if mode == u32::from(FileMode::Tree) {
            return Ok(None);
        }
        if mode == u32::from(FileMode::Blob)
            || mode == u32::from(FileMode::BlobExecutable)
            || mode == u32::from(FileMode::Link)
        {
            return Ok(Some(Entry {
                id: entry.id(),
                mode,
            }));
        }
        Err(self.damaged(format!("{}: mode {mode:o} is not a file", rel.display())))
    }

    /// Whether the snapshot has a folder at `rel`.
    pub fn is_dir(&self, rel: &Path) -> bool {
        rel.as_os_str().is_empty()
            || self
                .files
                .get_path(rel)
                .is_ok_and(|e| e.filemode() as u32 == u32::from(FileMode::Tree))
    }

    fn damaged(&self, why: String) -> CheckpointError {
        CheckpointError::Damaged {
            id: self.id.clone(),
            why,
        }
    }
}

/// The checkpoint store of one workspace.
pub struct Store {
    pub repo: Repository,
    /// The workspace, canonical.
    pub workspace: PathBuf,
    dir: PathBuf,
}

impl Store {
    /// Opens (creating on first use) the store of `workspace` under `root`.
    pub fn open(root: &Path, workspace: &Path) -> Result<Store, CheckpointError> {
        let workspace = std::fs::canonicalize(workspace).map_err(|e| io_error(workspace, e))?;
        let key = Oid::hash_object(ObjectType::Blob, workspace.as_os_str().as_bytes())?;
        let dir = root.join(format!("{key}.git"));
        let repo = match Repository::open_bare(&dir) {
            Ok(repo) => repo,
            Err(_) => {
                crate::session::private_dir(root).map_err(|e| io_error(root, e))?;
                let repo = Repository::init_bare(&dir)?;
                // For a person looking in the folder: which workspace this store is of.
                let _ = crate::untrusted_fs::write_file(
                    &dir.join("workspace"),
                    &[],
                    workspace.as_os_str().as_bytes(),
                    None,
                );
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
                repo
            }
        };
        Ok(Store {
            repo,
            workspace,
            dir,
        })
    }

    fn stat_index_path(&self) -> PathBuf {
        self.dir.join("baton-stat-index")
    }

    /// Snapshots the workspace (minus .gitignored files, `.git`, `.baton` and `exclude`) and
    /// returns the snapshot's id (a commit of this store).
    pub fn snapshot(&self, exclude: &[PathBuf]) -> Result<String, CheckpointError> {
        let index_path = self.stat_index_path();
        // The stat cache: what each file hashed to last time. An entry written in the same
        // second as the cache itself may have changed after hashing ("racily clean").
        let cache_mtime = std::fs::metadata(&index_path)
            .map(|m| m.mtime())
            .unwrap_or(0);
        let old = Index::open(&index_path).ok();
        let mut index = Index::open(&index_path)?;
        index.clear()?;
        let mut unknown: BTreeSet<PathBuf> = BTreeSet::new();
        // What the sandbox hides from commands (a credential of a broad workspace) is not
        // copied into the store either: the model never sees it, undo never restores it.
        let hidden = crate::sandbox::SandboxPolicy::new(
            crate::protocol::SandboxMode::WorkspaceWrite,
            &self.workspace,
        )
        .write_rules()
        .hidden()
        .clone();
        let mut files = walk(&self.workspace, exclude, hidden, &mut unknown);
        files.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let odb = self.repo.odb()?;
        // Files are read beneath the workspace held open: a folder a command swaps for a link
        // while the snapshot runs is not followed out of it.
        let anchor = crate::untrusted_fs::Dir::open(&self.workspace)
            .map_err(|e| io_error(&self.workspace, e))?;
        for (rel, meta) in files {
            let git_path = rel.as_os_str().as_bytes().to_vec();
            let is_link = meta.file_type().is_symlink();
            if !is_link && meta.len() > MAX_CHECKPOINT_FILE_BYTES {
                unknown.insert(rel);
                continue;
            }
            let mode = if is_link {
                u32::from(FileMode::Link)
            } else if meta.permissions().mode() & 0o111 != 0 {
                u32::from(FileMode::BlobExecutable)
            } else {
                u32::from(FileMode::Blob)
            };
            let cached = old
                .as_ref()
                .and_then(|idx| idx.get_path(&rel, 0))
                .filter(|e| {
                    e.mode == mode
                        && u64::from(e.file_size) == meta.len()
                        && i64::from(e.mtime.seconds()) == meta.mtime()
                        && i64::from(e.mtime.nanoseconds()) == meta.mtime_nsec()
                        && i64::from(e.ctime.seconds()) == meta.ctime()
                        && u64::from(e.ino) == meta.ino() & 0xffff_ffff
                        && i64::from(e.mtime.seconds()) < cache_mtime
                        && odb.exists(e.id)
                })
                .map(|e| e.id);
            let id = match cached {
                Some(id) => id,
                None => {
                    let read = if is_link {
                        anchor.read_link(&rel)
                    } else {
                        anchor
                            .read(&rel, MAX_CHECKPOINT_FILE_BYTES)
                            .and_then(|found| found.ok_or(std::io::ErrorKind::NotFound.into()))
                    };
                    match read {
                        Ok(bytes) => self.repo.blob(&bytes)?,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                        Err(_) => {
                            unknown.insert(rel);
                            continue;
                        }
                    }
                }
            };
            let added = index.add(&IndexEntry {
                ctime: IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32),
                mtime: IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32),
                dev: meta.dev() as u32,
                ino: meta.ino() as u32,
                mode,
                uid: 0,
                gid: 0,
                file_size: meta.len() as u32,
                id,
                flags: git_path.len().min(0xfff) as u16,
                flags_extended: 0,
                path: git_path,
            });
            // libgit2 refuses names git itself would take for `.git` on some filesystem
            // (`.GIT`, `git~1`, `.git.`): such a file, which any command can create, made the
            // whole snapshot fail, so the turn that created it could not be undone. It is left
            // out instead, as a file that cannot be read is.
            if added.is_err() && check_relative(&rel).is_ok() {
                unknown.insert(rel);
            }
        }
        let files_tree = index.write_tree_to(&self.repo)?;
        // The cache is written after the tree: a failure here only costs rehashing next time.
        let _ = index.write();
        let mut listed = Vec::new();
        for path in &unknown {
            listed.extend_from_slice(path.as_os_str().as_bytes());
            listed.push(0);
        }
        self.commit_snapshot(files_tree, &listed)
    }

    /// Opens snapshot `id` without reading all of it (undo on a big tree only visits what
    /// changed): verified to be a commit of this store made for this workspace; each path read
    /// from it is checked where it is used (`Opened::entry`, `changed_paths`).
    pub fn open_snapshot(&self, id: &str) -> Result<Opened<'_>, CheckpointError> {
        let damaged = |why: String| CheckpointError::Damaged {
            id: id.to_string(),
            why,
        };
        let oid = Oid::from_str(id).map_err(|_| damaged("not an object id".into()))?;
        let commit = self
            .repo
            .find_commit(oid)
            .map_err(|_| damaged("not in this workspace's checkpoint store".into()))?;
        let expected = format!("workspace {}", self.workspace.display());
        if !commit
            .message()
            .unwrap_or("")
            .lines()
            .any(|l| l == expected)
        {
            return Err(damaged("taken of another workspace".into()));
        }
        let root = commit.tree()?;
        let files = root
            .get_name("files")
            .filter(|e| e.kind() == Some(ObjectType::Tree))
            .ok_or_else(|| damaged("no file tree".into()))?;
        let files = self.repo.find_tree(files.id())?;
        let mut unknown = BTreeSet::new();
        if let Some(entry) = root.get_name("unknown") {
            let blob = self.repo.find_blob(entry.id())?;
            for name in blob.content().split(|b| *b == 0).filter(|n| !n.is_empty()) {
                let path = PathBuf::from(OsStr::from_bytes(name));
                check_relative(&path).map_err(damaged)?;
                unknown.insert(path);
            }
        }
        Ok(Opened {
            id: id.to_string(),
            files,
            unknown,
        })
    }

    /// The paths whose file differs between two snapshots' trees (identical folders are
    /// skipped by their ids, so this costs what changed, not the tree's size).
    pub fn changed_paths(
        &self,
        a: &Opened,
        b: &Opened,
    ) -> Result<BTreeSet<PathBuf>, CheckpointError> {
        let mut opts = git2::DiffOptions::new();
        opts.include_typechange(true);
        let diff = self
            .repo
            .diff_tree_to_tree(Some(&a.files), Some(&b.files), Some(&mut opts))?;
        let mut paths = BTreeSet::new();
        for delta in diff.deltas() {
            for file in [delta.old_file(), delta.new_file()] {
                if let Some(path) = file.path() {
                    check_relative(path).map_err(|why| CheckpointError::Damaged {
                        id: format!("{} or {}", a.id, b.id),
                        why,
                    })?;
                    paths.insert(path.to_path_buf());
                }
            }
        }
        Ok(paths)
    }

    /// A snapshot made from snapshot `base` with `changes` applied (`None`: the file is gone),
    /// without walking the workspace again: what undo knows it just did.
    pub fn derive(
        &self,
        base: &str,
        changes: &[(PathBuf, Option<Entry>)],
    ) -> Result<String, CheckpointError> {
        let opened = self.open_snapshot(base)?;
        // Removals first, then additions, in two passes: a file `d` removed and `d/f` added
        // (a folder coming back where a link was) is a conflict within one pass.
        let mut removals = git2::build::TreeUpdateBuilder::new();
        let mut additions = git2::build::TreeUpdateBuilder::new();
        for (path, entry) in changes {
            check_relative(path).map_err(|why| opened.damaged(why))?;
            let path = path.as_os_str().as_bytes();
            match entry {
                Some(e) => {
                    let mode = if e.is_link() {
                        FileMode::Link
                    } else if e.is_executable() {
                        FileMode::BlobExecutable
                    } else {
                        FileMode::Blob
                    };
                    additions.upsert(path, e.id, mode);
                }
                None => {
                    removals.remove(path);
                }
            }
        }
        let pruned = removals.create_updated(&self.repo, &opened.files)?;
        let pruned = self.repo.find_tree(pruned)?;
        let files = additions.create_updated(&self.repo, &pruned)?;
        let mut listed = Vec::new();
        for path in &opened.unknown {
            listed.extend_from_slice(path.as_os_str().as_bytes());
            listed.push(0);
        }
        self.commit_snapshot(files, &listed)
    }

    fn commit_snapshot(&self, files: Oid, unknown: &[u8]) -> Result<String, CheckpointError> {
        let unknown_blob = self.repo.blob(unknown)?;
        let mut root = self.repo.treebuilder(None)?;
        root.insert("files", files, i32::from(FileMode::Tree))?;
        root.insert("unknown", unknown_blob, i32::from(FileMode::Blob))?;
        let root = self.repo.find_tree(root.write()?)?;
        let who = Signature::now("baton", "baton@localhost")?;
        let message = format!(
            "baton checkpoint\n\nworkspace {}\n",
            self.workspace.display()
        );
        let commit = self.repo.commit(None, &who, &who, &message, &root, &[])?;
        // A ref per snapshot keeps its objects should anyone run `git gc` in the store.
        self.repo
            .reference(&format!("refs/snapshots/{commit}"), commit, true, "")?;
        Ok(commit.to_string())
    }

    /// Loads snapshot `id` and verifies it: a commit of this store, made for this workspace,
    /// whose every entry is a plain name (no `..`, `/`, `.git`) of a file, symlink or folder.
    pub fn load(&self, id: &str) -> Result<Snapshot, CheckpointError> {
        let opened = self.open_snapshot(id)?;
        let mut snapshot = Snapshot::default();
        self.collect(&opened.files, Path::new(""), &mut snapshot, 0)
            .map_err(|why| CheckpointError::Damaged {
                id: id.to_string(),
                why,
            })?;
        snapshot.unknown = opened.unknown;
        Ok(snapshot)
    }

    fn collect(
        &self,
        tree: &git2::Tree,
        dir: &Path,
        out: &mut Snapshot,
        depth: usize,
    ) -> Result<(), String> {
        if depth > 4096 {
            return Err("folders nested too deep".into());
        }
        for entry in tree.iter() {
            let name = entry.name_bytes();
            check_name(name)?;
            let path = dir.join(OsStr::from_bytes(name));
            let mode = entry.filemode() as u32;
            if mode == u32::from(FileMode::Tree) {
                let sub = self
                    .repo
                    .find_tree(entry.id())
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                self.collect(&sub, &path, out, depth + 1)?;
            } else if mode == u32::from(FileMode::Blob)
                || mode == u32::from(FileMode::BlobExecutable)
                || mode == u32::from(FileMode::Link)
            {
                out.files.insert(
                    path,
                    Entry {
                        id: entry.id(),
                        mode,
                    },
                );
            } else {
                return Err(format!("{}: mode {mode:o} is not a file", path.display()));
            }
        }
        Ok(())
    }

    /// The bytes of a blob of this store.
    pub fn content(&self, id: Oid) -> Result<Vec<u8>, CheckpointError> {
        Ok(self.repo.find_blob(id)?.content().to_vec())
    }
}

/// A tree entry's name must be one plain path component that is not `.git`.
fn check_name(name: &[u8]) -> Result<(), String> {
    let shown = String::from_utf8_lossy(name);
    if name.is_empty()
        || name == b"."
        || name == b".."
        || name.contains(&b'/')
        || name.contains(&0)
        || name.eq_ignore_ascii_case(b".git")
    {
        return Err(format!("refused entry name {shown:?}"));
    }
    Ok(())
}

fn check_relative(path: &Path) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("an empty path".into());
    }
    for c in path.components() {
        match c {
            std::path::Component::Normal(n) => check_name(n.as_bytes())?,
            _ => return Err(format!("refused path {:?}", path.display().to_string())),
        }
    }
    Ok(())
}

pub(super) fn io_error(path: &Path, e: std::io::Error) -> CheckpointError {
    CheckpointError::Io {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

/// The path an ignore-crate error is about, when it names one.
fn error_path(e: &ignore::Error) -> Option<&Path> {
    match e {
        ignore::Error::WithPath { path, .. } => Some(path),
        ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
            error_path(err)
        }
        _ => None,
    }
}

/// Regular files and symlinks of the workspace as snapshots see them: .gitignore respected,
/// `.git` and `.baton` skipped, `exclude` (baton's own folders) and what `hidden` hides
/// skipped, no symlink followed. Folders that cannot be read go into `unknown`.
fn walk(
    workspace: &Path,
    exclude: &[PathBuf],
    hidden: crate::sandbox::visibility::Hidden,
    unknown: &mut BTreeSet<PathBuf>,
) -> Vec<(PathBuf, std::fs::Metadata)> {
    let exclude: Vec<PathBuf> = exclude
        .iter()
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    let root = workspace.to_path_buf();
    // A folder whose ignore files the walker would block on is not walked: its files are
    // unknown to the snapshot, as an unreadable folder's are.
    if crate::untrusted_fs::walk_would_block_at(workspace).is_some() {
        unknown.insert(PathBuf::new());
        return Vec::new();
    }
    let refused = std::sync::Arc::new(std::sync::Mutex::new(Vec::<PathBuf>::new()));
    let refused_by_filter = refused.clone();
    let walker = ignore::WalkBuilder::new(workspace)
        .hidden(false)
        .ignore(false)
        .parents(true)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |e| {
            let name = e.file_name();
            // `.GIT`, `.Git`: names a snapshot refuses, in any case (see `check_name`).
            if name.as_encoded_bytes().eq_ignore_ascii_case(b".git")
                || (name == ".baton" && e.path().parent() == Some(root.as_path()))
            {
                return false;
            }
            if !crate::tool::search::walkable(e) {
                refused_by_filter
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(e.path().to_path_buf());
                return false;
            }
            !exclude.iter().any(|x| e.path() == x) && hidden.hides(e.path()).is_none()
        })
        .build();
    let mut files = Vec::new();
    for entry in walker {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                if let Some(rel) = error_path(&e).and_then(|p| p.strip_prefix(workspace).ok())
                    && !rel.as_os_str().is_empty()
                {
                    unknown.insert(rel.to_path_buf());
                }
                continue;
            }
        };
        let Some(kind) = entry.file_type() else {
            continue;
        };
        if !(kind.is_file() || kind.is_symlink()) {
            continue;
        }
        let abs = entry.into_path();
        let Ok(rel) = abs.strip_prefix(workspace) else {
            continue;
        };
        let rel = rel.to_path_buf();
        match std::fs::symlink_metadata(&abs) {
            Ok(meta) => files.push((rel, meta)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => {
                unknown.insert(rel);
            }
        }
    }
    for folder in refused.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        if let Ok(rel) = folder.strip_prefix(workspace) {
            unknown.insert(rel.to_path_buf());
        }
    }
    files
}
