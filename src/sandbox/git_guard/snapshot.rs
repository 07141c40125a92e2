//! The audit's snapshot: every file git or baton trusts that a command could write, as it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::gitdirs::{
    GitConfigs, MAX_GITDIR_DEPTH, commondir_of, gitdir_of, hooks_dirs, husky_dir, list_dirs,
    open_regular,
};
use super::hook_managers;
use super::roots::{baton_homes, inside_any, project_roots, writable_ancestors};
use crate::protocol::SandboxMode;
use crate::sandbox::policy::SandboxPolicy;
use crate::sandbox::tree_index::Found;

/// Files bigger than this are tracked by their stamp only (no git config or hook is that
/// big): a config's content past it could not be checked, so a changed one is moved aside.
pub(super) const MAX_TRACKED_BYTES: usize = 1 << 20;

/// Content one snapshot keeps at most, all files together; past it files are tracked by their
/// stamp only. A command can make any number of tracked files (hooks of a nested repository,
/// links to one big file), and a baton that ran out of memory would undo nothing.
const MAX_SNAPSHOT_BYTES: usize = 64 << 20;

/// Entries the audit's walk visits at most per root; past it the audit says it is incomplete.
pub(super) const MAX_WALK_ENTRIES: usize = 2_000_000;

/// Entries of a folder the hooks search first that are tracked at most.
const MAX_SHADOWING_ENTRIES: usize = 10_000;

/// Entries of one gitdir (objects aside) looked at for links at most: loose refs and their
/// logs, one each per branch and tag.
const MAX_GITDIR_ENTRIES: usize = 200_000;

/// Of those, what the audit tracks (`gitdir` only tells `git worktree prune` where the
/// worktree is; a new one is what `git worktree add` writes).
const WORKTREE_AUDITED: &[(&str, Kind)] = &[
    ("commondir", Kind::Redirect),
    ("config.worktree", Kind::GitConfig),
];

/// What a tracked file is for, which decides how a change to it is undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A git config: new code-running entries are commented out.
    GitConfig,
    /// `commondir` or a `.git` file: a changed one is put back, a new one removed.
    Redirect,
    /// A hook (or husky script): a new or changed one is renamed aside.
    Hook,
    /// A file under `.baton/`: put back, or renamed aside when new.
    Baton,
    /// A symlink anywhere in a gitdir (its objects aside): git opens some of its own files
    /// there to write, following a link (`logs/HEAD`, `COMMIT_EDITMSG`, `FETCH_HEAD`), and
    /// creates others in folders that may be links (`refs/heads/`): a new one is removed, a
    /// changed one put back.
    GitLink,
    /// An entry of a folder the hooks search before the system's PATH (husky's
    /// `node_modules/.bin`): a new or changed one named like a system program is moved aside.
    Shadow,
    /// The state of a rebase or cherry-pick in progress that names what git runs when the
    /// operation is continued, outside the sandbox too (its todo list's `exec` lines, a merge
    /// strategy other than git's own): one that names something new is renamed aside.
    Todo,
}

/// The state files of operations in progress, relative to a gitdir (a worktree's own
/// included), that `git rebase --continue` or `git cherry-pick --continue` runs something
/// from: the todo lists, and the merge strategy (`git-merge-NAME`, found on the exec path or
/// PATH, or through `..` in NAME).
pub(super) const TODO_LISTS: &[&str] = &[
    "rebase-merge/git-rebase-todo",
    "sequencer/todo",
    "rebase-merge/strategy",
    "sequencer/opts",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tracked {
    pub(super) kind: Kind,
    /// Content (followed through symlinks, as git reads it); None when unreadable, not a
    /// regular file, reached through a magic link (see [`open_regular`]), bigger than
    /// [`MAX_TRACKED_BYTES`] or past the snapshot's [`MAX_SNAPSHOT_BYTES`].
    pub(super) content: Option<Vec<u8>>,
    /// The regular file read (or not read) for `content`.
    stamp: Option<FileStamp>,
    /// A symlink's target, when the path itself is one.
    pub(super) link: Option<PathBuf>,
    /// The execute bits of the regular file read: git runs a hook only when they are set, so
    /// a hook made executable is a changed hook.
    exec: Option<u32>,
}

/// What tells a file's content apart without reading it: a write moves the inode's change
/// time to now, which nothing a sandboxed command can do sets back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    dev: u64,
    ino: u64,
    size: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    mode: u32,
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size() as i64,
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mode: meta.mode(),
        }
    }
}

impl Tracked {
    /// Whether `self` and `other` show git the same thing: the same content where both were
    /// read, else the same file unchanged.
    pub(super) fn same_as(&self, other: &Tracked) -> bool {
        self.link == other.link
            && (self.kind != Kind::Hook || self.exec == other.exec)
            && match (&self.content, &other.content) {
                (Some(a), Some(b)) => a == b,
                _ => self.stamp == other.stamp,
            }
    }
}

/// The state of every file the audit cares about, taken before a command runs.
#[derive(Debug, Clone, Default)]
pub struct AuditSnapshot {
    pub(super) files: BTreeMap<PathBuf, Tracked>,
    /// Content bytes `files` holds (at most [`MAX_SNAPSHOT_BYTES`]).
    held: usize,
    pub(super) incomplete: bool,
    /// Folders of the user's the walk made readable again to list them.
    pub(super) reopened: Vec<PathBuf>,
    /// Work trees whose hooks start programs from inside them, and how.
    pub(super) hooks_run_work_tree: Vec<(PathBuf, Vec<String>)>,
}

/// Takes the snapshot the audit after the command compares against.
pub fn snapshot(policy: &SandboxPolicy) -> AuditSnapshot {
    if policy.mode == SandboxMode::Off {
        return AuditSnapshot::default();
    }
    collect(policy)
}

/// Everything the audit tracks for `policy`, as it is now.
pub(super) fn collect(policy: &SandboxPolicy) -> AuditSnapshot {
    let mut snap = AuditSnapshot::default();
    // Only what a command could have written is tracked, and so only that is ever changed.
    let writable = policy.write_rules().command_roots();
    let mut found = Found::default();
    let projects = project_roots(policy, &writable);
    for root in &projects {
        if !walk(root, &mut found, MAX_WALK_ENTRIES) {
            snap.incomplete = true;
        }
    }
    // The other folders commands write (under the landlock backend the host's shared temp
    // folders): a repository made at the top of one (`git init "$TMPDIR"`, or the folder laid
    // out as a bare gitdir) is found by the user's later git in every folder below it (a
    // `mktemp -d` scratch folder). Their tops are looked at, not walked.
    for root in writable.iter().filter(|w| !projects.contains(w)) {
        look_at_top(root, &mut found);
    }
    let Found {
        git: mut found_git,
        baton: mut found_baton,
        bare: found_bare,
        reopened,
        manager_configs,
    } = found;
    snap.reopened = reopened;
    // git takes a folder that is itself a git directory as a repository when it runs there
    // (no `.git` needed; with `core.bare = false` and `core.worktree` it even has a work tree
    // and runs `core.fsmonitor`), so a folder holding a `HEAD` is audited as a gitdir.
    for gitdir in &found_bare {
        if inside_any(gitdir, &writable) {
            snap.track_gitdir(gitdir, &writable, 0);
            snap.track_included(&GitConfigs::read(gitdir), &writable);
        }
    }
    for file in GitConfigs::user_files() {
        if inside_any(&file, &writable) {
            snap.track(&file, Kind::GitConfig);
        }
    }
    for a in writable_ancestors(policy, &writable) {
        found_git.push(a.join(".git"));
    }
    for home in baton_homes(policy, &writable) {
        found_baton.push(home.join(".baton"));
    }
    for dot_git in &found_git {
        // A new or repointed `.git` file or symlink is not undone: the gitdir it names is
        // tracked below like any other, so what it points at is audited instead.
        let Some(gitdir) = gitdir_of(dot_git) else {
            continue;
        };
        let work_tree = dot_git.parent().unwrap_or(Path::new("/"));
        // A gitdir outside every writable root is the user's: the command could not write it,
        // and the audit only reads it. What the command could have written is the pointer: a
        // new or changed `.git` file or symlink naming such a gitdir (the user's global git
        // config folder, another repository, another user's) is undone like a `commondir`.
        let pointer_writable = || {
            dot_git
                .parent()
                .and_then(|p| p.canonicalize().ok())
                .is_some_and(|p| inside_any(&p, &writable))
        };
        if inside_any(&gitdir, &writable) {
            snap.track_gitdir(&gitdir, &writable, 0);
            // Tracked too: a new pointer may wake a gitdir that lay there unused (a clone's
            // tracked `vendor/lib.git` holding an fsmonitor), which the audit judges then.
            if *dot_git != gitdir && pointer_writable() {
                snap.track_pointer(dot_git);
            }
        } else if pointer_writable() {
            snap.track_pointer(dot_git);
        }
        let configs = GitConfigs::read(&gitdir);
        for hooks in configs.hooks_paths(work_tree) {
            if !inside_any(&hooks, &writable) {
                continue;
            }
            snap.track_dir(&hooks, Kind::Hook, &writable);
            if let Some(husky) = husky_dir(&hooks) {
                snap.track_dir(&husky, Kind::Hook, &writable);
            }
        }
        let dirs = hooks_dirs(&gitdir, &configs, work_tree);
        let from = hook_managers::managed(&dirs, work_tree);
        let obeyed = &from.obeyed;
        for program in &from.programs {
            if inside_any(program, &writable) {
                snap.track(program, Kind::Hook);
            }
        }
        for dir in &from.shadowing {
            if inside_any(dir, &writable) {
                snap.track_shadowing(dir);
            }
        }
        if !from.told.is_empty() {
            snap.hooks_run_work_tree
                .push((work_tree.to_path_buf(), from.told));
        }
        // prek and lint-staged also take their configuration from folders below the top.
        let nested = manager_configs.iter().filter(|p| {
            p.starts_with(work_tree)
                && obeyed.iter().any(|o| {
                    o.file_name() == p.file_name() && hook_managers::applies_below_the_top(o)
                })
        });
        for file in obeyed.iter().chain(nested) {
            if inside_any(file, &writable) {
                snap.track_tree(file, Kind::Hook, 0);
            }
        }
        snap.track_included(&configs, &writable);
        for program in configs.program_files(work_tree) {
            if inside_any(&program, &writable) {
                snap.track(&program, Kind::Hook);
            }
        }
    }
    for b in &found_baton {
        snap.track_tree(b, Kind::Baton, 0);
    }
    snap
}

/// Finds every `.git` and `.baton` entry beneath `root`, and every folder holding a `HEAD`
/// (what a bare git directory looks like), beneath `.baton` folders too, without following
/// symlinks or entering a `.git` directory, visiting at most `limit` entries (see
/// `tree_index`). False when it stopped at that bound.
fn walk(root: &Path, found: &mut Found, limit: usize) -> bool {
    // The root's own `.git`, `.baton` and `HEAD` are looked up by name before the walk: a top
    // folder with more entries than the limit must not hide them (git uses them first).
    look_at_top(root, found);
    // Beneath the root: folders unchanged since the last walk are not read again.
    crate::sandbox::tree_index::scan(root, limit, found).complete
}

/// `root`'s own `.git`, `.baton` and `HEAD` (`root` laid out as a bare gitdir), by name.
fn look_at_top(root: &Path, found: &mut Found) {
    let at_root = [".git", ".baton", "HEAD"];
    for name in at_root {
        let path = root.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        match name {
            ".git" => found.git.push(path),
            ".baton" => found.baton.push(path),
            _ if !meta.is_dir() => found.bare.push(root.to_path_buf()),
            _ => {}
        }
    }
}

impl AuditSnapshot {
    fn track(&mut self, path: &Path, kind: Kind) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        let link = if meta.file_type().is_symlink() {
            std::fs::read_link(path).ok()
        } else {
            None
        };
        if meta.is_dir() || (link.is_some() && path.is_dir()) {
            return;
        }
        let (stamp, content) = self.read_tracked(path);
        self.files.insert(
            path.to_path_buf(),
            Tracked {
                kind,
                content,
                exec: stamp.map(|s| s.mode & 0o111),
                stamp,
                link,
            },
        );
    }

    /// A `.git` file (by its content) or symlink (by its target), as a redirect.
    fn track_pointer(&mut self, path: &Path) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if meta.file_type().is_symlink() {
            self.files.insert(
                path.to_path_buf(),
                Tracked {
                    kind: Kind::Redirect,
                    content: None,
                    stamp: None,
                    exec: None,
                    link: std::fs::read_link(path).ok(),
                },
            );
        } else if meta.is_file() {
            self.track(path, Kind::Redirect);
        }
    }

    /// The stamp of the regular file git would read at `path`, and its content where it is
    /// small enough and the snapshot has room for it.
    fn read_tracked(&mut self, path: &Path) -> (Option<FileStamp>, Option<Vec<u8>>) {
        use std::io::Read;
        use std::os::unix::fs::MetadataExt;
        let Some(f) = open_regular(path) else {
            return (None, None);
        };
        let Ok(meta) = f.metadata() else {
            return (None, None);
        };
        let stamp = FileStamp::of(&meta);
        let size = meta.size() as usize;
        if size > MAX_TRACKED_BYTES || self.held + size > MAX_SNAPSHOT_BYTES {
            return (Some(stamp), None);
        }
        let mut buf = Vec::new();
        let read = f
            .take(MAX_TRACKED_BYTES as u64 + 1)
            .read_to_end(&mut buf)
            .is_ok();
        // A file that grew past the bound while it was read is not known in full.
        if !read || buf.len() > MAX_TRACKED_BYTES || self.held + buf.len() > MAX_SNAPSHOT_BYTES {
            return (Some(stamp), None);
        }
        self.held += buf.len();
        (Some(stamp), Some(buf))
    }

    /// The regular files (and symlinks) directly in `dir`, when it resolves inside a writable
    /// root: a hooks folder symlinked elsewhere holds nothing the command could have written,
    /// and renaming in there would touch files outside.
    fn track_dir(&mut self, dir: &Path, kind: Kind, writable: &[PathBuf]) {
        let Ok(dir) = dir.canonicalize() else {
            return;
        };
        if !inside_any(&dir, writable) {
            return;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let is_sample = p.extension().is_some_and(|x| x == "sample");
            let is_aside = p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains(".disabled-by-baton"));
            if !is_sample && !is_aside {
                self.track(&p, kind);
            }
        }
    }

    fn track_tree(&mut self, dir: &Path, kind: Kind, depth: usize) {
        if depth > MAX_GITDIR_DEPTH {
            return;
        }
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return self.track(dir, kind),
            Err(_) => return,
        }
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.to_string_lossy().contains(".disabled-by-baton") {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.track_tree(&p, kind, depth + 1);
            } else {
                self.track(&p, kind);
            }
        }
    }

    fn track_gitdir(&mut self, gitdir: &Path, writable: &[PathBuf], depth: usize) {
        if depth > MAX_GITDIR_DEPTH {
            return;
        }
        self.track(&gitdir.join("config"), Kind::GitConfig);
        self.track(&gitdir.join("config.worktree"), Kind::GitConfig);
        self.track(&gitdir.join("commondir"), Kind::Redirect);
        self.track_dir(&gitdir.join("hooks"), Kind::Hook, writable);
        for todo in TODO_LISTS {
            self.track(&gitdir.join(todo), Kind::Todo);
        }
        if depth == 0
            && let Some(common) = commondir_of(gitdir)
            && common != gitdir
            && inside_any(&common, writable)
        {
            self.track_gitdir(&common, writable, depth + 1);
        }
        for wt in list_dirs(&gitdir.join("worktrees")) {
            for (name, kind) in WORKTREE_AUDITED {
                self.track(&wt.join(name), *kind);
            }
            for todo in TODO_LISTS {
                self.track(&wt.join(todo), Kind::Todo);
            }
        }
        self.track_modules(&gitdir.join("modules"), writable, depth + 1);
        let mut budget = MAX_GITDIR_ENTRIES;
        self.track_links(gitdir, 0, &mut budget);
        if budget == 0 {
            self.incomplete = true;
        }
    }

    /// The entries of a folder the hooks search first, by what stands there (a link's target,
    /// a file's stamp), unread: `node_modules/.bin` holds hundreds.
    fn track_shadowing(&mut self, dir: &Path) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten().take(MAX_SHADOWING_ENTRIES) {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                continue;
            }
            let path = e.path();
            let link = meta
                .file_type()
                .is_symlink()
                .then(|| std::fs::read_link(&path).ok())
                .flatten();
            let stamp = FileStamp::of(&meta);
            if let std::collections::btree_map::Entry::Vacant(slot) = self.files.entry(path) {
                slot.insert(Tracked {
                    kind: Kind::Shadow,
                    content: None,
                    stamp: Some(stamp),
                    exec: None,
                    link,
                });
            }
        }
    }

    /// An objects folder's own entries: git writes each object into its fan-out folder
    /// (`objects/ab/`), so one that is a link takes the user's next commit outside; the
    /// objects themselves are new files renamed into place, and are not listed.
    fn track_object_links(&mut self, objects: &Path, depth: usize, budget: &mut usize) {
        let Ok(rd) = std::fs::read_dir(objects) else {
            return;
        };
        for e in rd.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            match e.file_type() {
                Ok(t) if t.is_symlink() => self.track_link(e.path()),
                Ok(t) if t.is_dir() && e.file_name() == "info" => {
                    self.track_links(&e.path(), depth + 2, budget);
                }
                _ => {}
            }
        }
    }

    /// A symlink in a gitdir, unless another kind tracks that path already.
    fn track_link(&mut self, path: PathBuf) {
        if let std::collections::btree_map::Entry::Vacant(slot) = self.files.entry(path) {
            let link = std::fs::read_link(slot.key()).ok();
            slot.insert(Tracked {
                kind: Kind::GitLink,
                content: None,
                stamp: None,
                exec: None,
                link,
            });
        }
    }

    /// Every symlink beneath `dir`, a gitdir or a folder of one, that no other kind tracks.
    /// Objects are left out but for the entries of `objects/` and `objects/info`
    /// ([`Self::track_object_links`]); submodules' gitdirs are tracked as gitdirs of their own.
    fn track_links(&mut self, dir: &Path, depth: usize, budget: &mut usize) {
        if depth > MAX_GITDIR_DEPTH {
            return;
        }
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let Ok(kind) = e.file_type() else { continue };
            let path = e.path();
            if kind.is_symlink() {
                self.track_link(path);
                continue;
            }
            if !kind.is_dir() {
                continue;
            }
            let name = e.file_name();
            if depth == 0 && name == "modules" {
                continue;
            }
            if name == "objects" {
                self.track_object_links(&path, depth, budget);
            } else {
                self.track_links(&path, depth + 1, budget);
            }
        }
    }

    /// The configs the repository includes that a command could have written or created.
    fn track_included(&mut self, configs: &GitConfigs, writable: &[PathBuf]) {
        for included in configs.included() {
            if inside_any(included, writable) {
                self.track(included, Kind::GitConfig);
            }
        }
    }

    fn track_modules(&mut self, dir: &Path, writable: &[PathBuf], depth: usize) {
        if depth > MAX_GITDIR_DEPTH {
            return;
        }
        for sub in list_dirs(dir) {
            if sub.join("HEAD").exists() {
                self.track_gitdir(&sub, writable, depth);
            } else {
                self.track_modules(&sub, writable, depth + 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sandbox::git_guard::ws;

    #[test]
    fn a_top_folder_past_the_walk_limit_still_shows_its_own_git_and_baton() {
        let (_d, ws) = ws();
        for i in 0..300 {
            std::fs::write(ws.join(format!("f{i}")), "").unwrap();
        }
        std::fs::create_dir(ws.join(".git")).unwrap();
        std::fs::create_dir(ws.join(".baton")).unwrap();
        std::fs::write(ws.join("HEAD"), "ref: refs/heads/main").unwrap();
        let mut found = Found::default();
        let stopped = !walk(&ws, &mut found, 5);
        assert!(stopped, "the limit must still stop the walk");
        assert_eq!(found.git, [ws.join(".git")]);
        assert_eq!(found.baton, [ws.join(".baton")]);
        assert_eq!(found.bare, std::slice::from_ref(&ws));
    }
}
