//! Git and `.baton/` as code-execution paths: which paths a sandboxed command may not write
//! (pinned read-only before it starts), and the audit that neutralizes what it planted where
//! nothing could be pinned (a new repository, a new nested repo behind a gitlink, a new
//! `.baton/`). Git runs programs named in its config (`core.fsmonitor`, `core.hooksPath`,
//! filters, aliases…), runs hooks, and follows `commondir` and `.git` files to other gitdirs;
//! anything a command leaves there runs later, outside the sandbox, when the user runs git.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::protocol::SandboxMode;

use super::policy::SandboxPolicy;

/// Files and directories inside a gitdir that git executes or trusts.
const GITDIR_TRUSTED: &[&str] = &["config", "config.worktree", "hooks", "commondir", "info"];

/// Subtrees of a gitdir that hold other gitdirs (submodules, linked worktrees).
const GITDIR_NESTED: &[&str] = &["modules", "worktrees"];

/// Files in a linked worktree's gitdir (`.git/worktrees/NAME/`) that redirect git.
const WORKTREE_REDIRECTS: &[&str] = &["commondir", "gitdir", "config.worktree"];

/// Of those, what the audit tracks (`gitdir` only tells `git worktree prune` where the
/// worktree is; a new one is what `git worktree add` writes).
const WORKTREE_AUDITED: &[(&str, Kind)] = &[
    ("commondir", Kind::Redirect),
    ("config.worktree", Kind::GitConfig),
];

/// How deep submodule gitdirs (`modules/a/modules/b/…`, names with `/`) are followed.
const MAX_GITDIR_DEPTH: usize = 8;

/// What the launcher pins for one policy.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Protection {
    /// Existing files and directories bound read-only.
    pub read_only: Vec<PathBuf>,
    /// Existing directories bound onto themselves first: a mount point cannot be renamed or
    /// removed, so a protected directory can't be moved aside and replaced by a writable copy.
    pub pinned: Vec<PathBuf>,
    /// Everything refused to file tools, existing or not (a subtree each).
    pub denied: Vec<PathBuf>,
}

impl Protection {
    fn read_only(&mut self, p: PathBuf) {
        if !self.read_only.contains(&p) {
            self.read_only.push(p);
        }
    }
    fn pin(&mut self, p: PathBuf) {
        if !self.pinned.contains(&p) {
            self.pinned.push(p);
        }
    }
    fn deny(&mut self, p: PathBuf) {
        if !self.denied.contains(&p) {
            self.denied.push(p);
        }
    }
}

/// The writable folders that hold a project (canonical, existing): under `workspace-write`
/// the workspace and the extra writable directories; under `read-only` the workspace when it
/// lies in a temp root anyway (a checkout in `/tmp` is writable through `/tmp`).
fn project_roots(policy: &SandboxPolicy, writable: &[PathBuf]) -> Vec<PathBuf> {
    let candidates: Vec<&PathBuf> = match policy.mode {
        SandboxMode::Off => return Vec::new(),
        SandboxMode::WorkspaceWrite => std::iter::once(&policy.workspace)
            .chain(policy.writable.iter())
            .collect(),
        SandboxMode::ReadOnly => vec![&policy.workspace],
    };
    let mut out = Vec::new();
    for r in candidates {
        if let Ok(c) = r.canonicalize()
            && c.is_dir()
            && inside_any(&c, writable)
            && !out.contains(&c)
        {
            out.push(c);
        }
    }
    out
}

/// Writable directories (not devices) of the policy. Each root costs a `readlink` per path
/// component and a `stat`: callers compute this once and pass it on.
fn writable_dirs(policy: &SandboxPolicy) -> Vec<PathBuf> {
    policy
        .writable_roots()
        .into_iter()
        .filter(|p| p.is_dir() && !p.starts_with("/dev/pts"))
        .collect()
}

fn inside_any(p: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| p.starts_with(r))
}

/// Folders whose `.baton/` a command could write and a later session would read as project
/// config: every project root, every writable directory, and every folder above the workspace
/// that lies inside one (project config is looked up in the workspace's parents too).
fn baton_homes(policy: &SandboxPolicy, writable: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = project_roots(policy, writable);
    for w in writable {
        if !out.contains(w) {
            out.push(w.clone());
        }
    }
    let ws = policy
        .workspace
        .canonicalize()
        .unwrap_or_else(|_| policy.workspace.clone());
    for a in ws.ancestors() {
        if inside_any(a, writable) && !out.iter().any(|o| o == a) {
            out.push(a.to_path_buf());
        }
    }
    out
}

/// Folders above the workspace, inside a writable root, where git would find a repository
/// for the workspace if it has none of its own (`git init /tmp` covers `/tmp/ws`).
fn writable_ancestors(policy: &SandboxPolicy, writable: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(ws) = policy.workspace.canonicalize() else {
        return Vec::new();
    };
    ws.ancestors()
        .skip(1)
        .filter(|a| inside_any(a, writable))
        .map(Path::to_path_buf)
        .collect()
}

/// The gitdir a `.git` entry names: the directory itself, the target of a symlink, or the
/// `gitdir:` line of a file (relative to the file's folder). None when absent or unreadable.
pub fn gitdir_of(dot_git: &Path) -> Option<PathBuf> {
    let meta = std::fs::symlink_metadata(dot_git).ok()?;
    if meta.is_dir() {
        return Some(dot_git.to_path_buf());
    }
    if meta.file_type().is_symlink() {
        return dot_git.canonicalize().ok().filter(|p| p.is_dir());
    }
    let text = read_small(dot_git)?;
    let named = String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("gitdir:").map(|r| r.trim().to_string()))?;
    let base = dot_git.parent()?;
    let p = base.join(named);
    Some(p.canonicalize().unwrap_or(p))
}

/// The common dir a gitdir's `commondir` file names, when it has one.
fn commondir_of(gitdir: &Path) -> Option<PathBuf> {
    let text = read_small(&gitdir.join("commondir"))?;
    let named = String::from_utf8_lossy(&text).trim().to_string();
    if named.is_empty() {
        return None;
    }
    let p = gitdir.join(named);
    Some(p.canonicalize().unwrap_or(p))
}

fn read_small(p: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let f = open_regular(p)?;
    let mut buf = Vec::new();
    f.take(MAX_TRACKED_BYTES as u64 + 1)
        .read_to_end(&mut buf)
        .ok()?;
    Some(buf)
}

/// `p` opened to read as git reads it (symlinks followed), when that is a regular file.
/// Anything else is None, unopened: a FIFO would block the audit for good (and a terminal
/// hand it the user's keys), a device may act on being opened; and a path through a magic
/// link (`/proc/self/cwd/…`, `/dev/stdin`) names a different file for each reader, so what
/// baton would read there is not what git reads.
fn open_regular(p: &Path) -> Option<std::fs::File> {
    crate::untrusted_fs::open_following(p)
        .ok()
        .map(|(file, _)| file)
}

/// What the launcher pins and the file tools refuse for `policy`.
pub fn protection(policy: &SandboxPolicy) -> Protection {
    let mut out = Protection::default();
    if policy.mode == SandboxMode::Off {
        return out;
    }
    let writable = writable_dirs(policy);
    let roots = project_roots(policy, &writable);
    let mut repo_tops: Vec<PathBuf> = roots.clone();
    repo_tops.extend(writable_ancestors(policy, &writable));
    for top in &repo_tops {
        let dot_git = top.join(".git");
        for name in GITDIR_TRUSTED.iter().chain(GITDIR_NESTED) {
            out.deny(dot_git.join(name));
        }
        let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
            continue;
        };
        if meta.is_file() {
            // A `gitdir:` pointer (worktree, submodule): repointing it would be an escape.
            out.read_only(dot_git.clone());
            out.deny(dot_git.clone());
        } else if meta.file_type().is_symlink() {
            out.deny(dot_git.clone());
        }
        if let Some(gitdir) = gitdir_of(&dot_git) {
            protect_gitdir(&gitdir, &writable, &mut out, 0);
            if let Some(hooks) = hooks_path(&gitdir, top) {
                protect_hooks_path(&hooks, &writable, &mut out);
            }
            for included in included_configs(&gitdir) {
                protect_included(&included, &writable, &mut out);
            }
        }
    }
    for home in baton_homes(policy, &writable) {
        let b = home.join(".baton");
        out.deny(b.clone());
        if std::fs::symlink_metadata(&b).is_ok_and(|m| !m.file_type().is_symlink()) {
            out.read_only(b);
        }
    }
    // Parents before children: a pin must exist before a read-only bind beneath it.
    out.pinned.sort_by_key(|p| p.components().count());
    out
}

/// What decides whether a path lies in a folder a later session or the user's git would
/// trust (see [`TrustedFolders::holds`]): the writable directories and the repository tops,
/// resolved once.
#[derive(Debug, Clone, Default)]
pub struct TrustedFolders {
    writable: Vec<PathBuf>,
    tops: Vec<PathBuf>,
}

impl TrustedFolders {
    pub fn of(policy: &SandboxPolicy) -> TrustedFolders {
        let writable = writable_dirs(policy);
        let mut tops = project_roots(policy, &writable);
        tops.extend(writable_ancestors(policy, &writable));
        TrustedFolders { writable, tops }
    }

    /// Whether `path` (absolute, resolved) lies in a `.baton` folder, or in a nested
    /// repository's `.git`, inside a writable root: a session started in that folder, or the
    /// user's git run there, would trust it. (The `.git` of the workspace, of a `--write` root
    /// or of a folder above the workspace has finer rules: its refs, objects and index stay
    /// writable.)
    pub fn holds(&self, path: &Path) -> bool {
        let (writable, tops) = (&self.writable, &self.tops);
        if !inside_any(path, writable) {
            return false;
        }
        // git takes a folder holding a `HEAD` for a git directory when it runs there, so a
        // `HEAD` may not be written, nor what git trusts beside one.
        if path.file_name().is_some_and(|n| n == "HEAD") {
            return true;
        }
        let beside_head = path
            .ancestors()
            .skip(1)
            .take_while(|a| inside_any(a, writable))
            .any(|a| {
                a.join("HEAD").is_file()
                    && path
                        .strip_prefix(a)
                        .ok()
                        .and_then(|r| r.iter().next())
                        .is_some_and(|first| {
                            ["config", "config.worktree", "commondir", "hooks", "info"]
                                .iter()
                                .any(|n| first == *n)
                        })
            });
        beside_head
            || path
                .ancestors()
                .take_while(|a| inside_any(a, writable))
                .any(|a| match a.file_name() {
                    Some(n) if n == ".baton" => true,
                    Some(n) if n == ".git" => {
                        a.parent().is_some_and(|p| !tops.iter().any(|t| t == p))
                    }
                    _ => false,
                })
    }
}

fn protect_gitdir(gitdir: &Path, writable: &[PathBuf], out: &mut Protection, depth: usize) {
    if depth > MAX_GITDIR_DEPTH || !gitdir.is_dir() {
        return;
    }
    let inside = inside_any(gitdir, writable);
    for name in GITDIR_TRUSTED.iter().chain(GITDIR_NESTED) {
        out.deny(gitdir.join(name));
    }
    if inside {
        out.pin(gitdir.to_path_buf());
        for name in GITDIR_TRUSTED {
            let p = gitdir.join(name);
            if p.exists() {
                out.read_only(p);
            }
        }
    }
    if let Some(common) = commondir_of(gitdir)
        && common != gitdir
        && depth == 0
    {
        protect_gitdir(&common, writable, out, depth + 1);
    }
    let modules = gitdir.join("modules");
    if modules.is_dir() {
        if inside {
            out.pin(modules.clone());
        }
        protect_module_tree(&modules, writable, out, depth + 1);
    }
    let worktrees = gitdir.join("worktrees");
    if worktrees.is_dir() && inside {
        out.pin(worktrees.clone());
        for wt in list_dirs(&worktrees) {
            out.pin(wt.clone());
            for name in WORKTREE_REDIRECTS {
                let p = wt.join(name);
                if p.exists() {
                    out.read_only(p);
                }
            }
        }
    }
}

/// `modules/` holds submodule gitdirs, whose names may contain `/`: a folder with a `HEAD`
/// is a gitdir, any other folder is a level of a name and is searched further.
fn protect_module_tree(dir: &Path, writable: &[PathBuf], out: &mut Protection, depth: usize) {
    if depth > MAX_GITDIR_DEPTH {
        return;
    }
    for sub in list_dirs(dir) {
        if inside_any(&sub, writable) {
            out.pin(sub.clone());
        }
        if sub.join("HEAD").exists() {
            protect_gitdir(&sub, writable, out, depth);
        } else {
            protect_module_tree(&sub, writable, out, depth + 1);
        }
    }
}

fn list_dirs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// The `core.hooksPath` in force for a repository (its own config, then the user's global and
/// the system config), resolved the way git does: `~/` from HOME, relative from the work tree.
fn hooks_path(gitdir: &Path, work_tree: &Path) -> Option<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let value = repo_configs(gitdir).iter().find_map(|f| {
        let text = read_small(f)?;
        config::parse(&String::from_utf8_lossy(&text))
            .into_iter()
            .rev()
            .find(|e| e.name() == "core.hookspath")
            .map(|e| e.value)
    })?;
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let p = if let Some(rest) = value.strip_prefix("~/") {
        home?.join(rest)
    } else {
        work_tree.join(value)
    };
    Some(normalize(&p))
}

/// The config files git reads for a repository, most specific first: its own config and
/// `config.worktree`, the user's global ones, the system one.
fn repo_configs(gitdir: &Path) -> Vec<PathBuf> {
    let common = commondir_of(gitdir).unwrap_or_else(|| gitdir.to_path_buf());
    let mut files = vec![common.join("config"), gitdir.join("config.worktree")];
    let home = std::env::var_os("HOME").map(PathBuf::from);
    if let Some(h) = &home {
        files.push(h.join(".gitconfig"));
    }
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".config")));
    if let Some(x) = xdg {
        files.push(x.join("git/config"));
    }
    files.push(PathBuf::from("/etc/gitconfig"));
    files
}

/// git follows includes inside included files up to this depth.
const MAX_INCLUDE_DEPTH: usize = 10;

/// Included files looked at per repository: a planted config naming thousands must not stall
/// every command (it loses its includes to the audit anyway, `include.*` being code-running).
const MAX_INCLUDES: usize = 256;

/// The files the repository's config pulls in with `include.path` and `includeIf.*.path`
/// (projects share settings with `include.path = ../.gitconfig`), followed through included
/// files, resolved as git does: `~/` from HOME, a relative path from the including file's
/// folder. Every `includeIf` counts, whatever its condition: which one holds depends on the
/// branch checked out and where the repository lies, both of which a command can change.
fn included_configs(gitdir: &Path) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut out: Vec<PathBuf> = Vec::new();
    let mut queue: Vec<(PathBuf, usize)> =
        repo_configs(gitdir).into_iter().map(|f| (f, 0)).collect();
    while let Some((file, depth)) = queue.pop() {
        if depth > MAX_INCLUDE_DEPTH {
            continue;
        }
        let Some(text) = read_small(&file) else {
            continue;
        };
        let dir = file.parent().unwrap_or(Path::new("/"));
        for e in config::parse(&String::from_utf8_lossy(&text)) {
            if e.key != "path" || !matches!(e.section.as_str(), "include" | "includeif") {
                continue;
            }
            let value = e.value.trim();
            let target = if value.is_empty() {
                continue;
            } else if let Some(rest) = value.strip_prefix("~/") {
                let Some(h) = &home else { continue };
                h.join(rest)
            } else {
                dir.join(value)
            };
            let target = normalize(&target);
            if out.len() >= MAX_INCLUDES {
                return out;
            }
            if !out.contains(&target) {
                out.push(target.clone());
                queue.push((target, depth + 1));
            }
        }
    }
    out
}

/// An included config inside a writable root is read-only and refused to file tools; the
/// folders between the root and it are pinned, so it can't be swapped out with its folder.
/// One that does not exist yet is left to the audit.
fn protect_included(included: &Path, writable: &[PathBuf], out: &mut Protection) {
    if !inside_any(included, writable) {
        return;
    }
    out.deny(included.to_path_buf());
    if !included.exists() {
        return;
    }
    for dir in included.ancestors().skip(1) {
        if !inside_any(dir, writable) || writable.iter().any(|w| w == dir) {
            break;
        }
        out.pin(dir.to_path_buf());
    }
    out.read_only(included.to_path_buf());
}

/// `a/./b/../c` → `a/c` without touching the filesystem (the target may not exist yet).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out.canonicalize().unwrap_or(out)
}

/// A hooks directory inside a writable root is read-only; so is husky's `.husky/` around its
/// `_/` shims, since the shims run the scripts one level up with `sh`.
fn protect_hooks_path(hooks: &Path, writable: &[PathBuf], out: &mut Protection) {
    if !inside_any(hooks, writable) {
        return;
    }
    let mut targets = vec![hooks.to_path_buf()];
    if let Some(husky) = husky_dir(hooks) {
        targets.push(husky);
    }
    for t in targets {
        out.deny(t.clone());
        if t.exists() {
            out.read_only(t);
        }
    }
}

fn husky_dir(hooks: &Path) -> Option<PathBuf> {
    hooks
        .ancestors()
        .take(2)
        .find(|a| a.file_name().is_some_and(|n| n == ".husky"))
        .map(Path::to_path_buf)
}

// ---------------------------------------------------------------------------------------------
// The audit: what a command planted where no bind could pin it.

/// Files bigger than this are tracked by their stamp only (no git config or hook is that
/// big): a config's content past it could not be checked, so a changed one is moved aside.
const MAX_TRACKED_BYTES: usize = 1 << 20;

/// Content one snapshot keeps at most, all files together; past it files are tracked by their
/// stamp only. A command can make any number of tracked files (hooks of a nested repository,
/// links to one big file), and a baton that ran out of memory would undo nothing.
const MAX_SNAPSHOT_BYTES: usize = 64 << 20;

/// Entries the audit's walk visits at most per root; past it the audit says it is incomplete.
const MAX_WALK_ENTRIES: usize = 2_000_000;

/// What a tracked file is for, which decides how a change to it is undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A git config: new code-running entries are commented out.
    GitConfig,
    /// `commondir` or a `.git` file: a changed one is put back, a new one removed.
    Redirect,
    /// A hook (or husky script): a new or changed one is renamed aside.
    Hook,
    /// A file under `.baton/`: put back, or renamed aside when new.
    Baton,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Tracked {
    kind: Kind,
    /// Content (followed through symlinks, as git reads it); None when unreadable, not a
    /// regular file, reached through a magic link (see [`open_regular`]), bigger than
    /// [`MAX_TRACKED_BYTES`] or past the snapshot's [`MAX_SNAPSHOT_BYTES`].
    content: Option<Vec<u8>>,
    /// The regular file read (or not read) for `content`.
    stamp: Option<FileStamp>,
    /// A symlink's target, when the path itself is one.
    link: Option<PathBuf>,
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
}

impl Tracked {
    /// Whether `self` and `other` show git the same thing: the same content where both were
    /// read, else the same file unchanged.
    fn same_as(&self, other: &Tracked) -> bool {
        self.link == other.link
            && match (&self.content, &other.content) {
                (Some(a), Some(b)) => a == b,
                _ => self.stamp == other.stamp,
            }
    }
}

/// The state of every file the audit cares about, taken before a command runs.
#[derive(Debug, Clone, Default)]
pub struct AuditSnapshot {
    files: BTreeMap<PathBuf, Tracked>,
    /// Content bytes `files` holds (at most [`MAX_SNAPSHOT_BYTES`]).
    held: usize,
    incomplete: bool,
    /// Folders of the user's the walk made readable again to list them.
    reopened: Vec<PathBuf>,
}

/// Takes the snapshot the audit after the command compares against.
pub fn snapshot(policy: &SandboxPolicy) -> AuditSnapshot {
    if policy.mode == SandboxMode::Off {
        return AuditSnapshot::default();
    }
    collect(policy)
}

/// Compares the files git and baton trust with `before`, undoes what the command planted
/// (code-running config entries commented out, new hooks renamed aside, redirects put back
/// or removed, `.baton/` files put back or renamed aside) and returns one warning per change,
/// for the user. Run it once the command's processes are gone.
pub fn audit(before: &AuditSnapshot, policy: &SandboxPolicy) -> Vec<String> {
    if policy.mode == SandboxMode::Off {
        return Vec::new();
    }
    let after = collect(policy);
    let host = policy.write_rules().command_roots();
    let mut warnings = Vec::new();
    let mut git = None;
    for (path, now) in &after.files {
        let then = before.files.get(path);
        if then.is_some_and(|t| t.same_as(now)) {
            continue;
        }
        if !may_change(path, &host) {
            warnings.push(format!(
                "baton: {} changed while a command ran, but it lies outside the folders \
                 commands may write, so baton left it as it is: check it before running git there",
                path.display()
            ));
            continue;
        }
        // Looked up once per audit, and only when something changed.
        let git = git.get_or_insert_with(|| audit_git(policy));
        if let Some(w) = undo_change(path, then, now, git.as_deref()) {
            warnings.push(w);
        }
    }
    let mut reopened: Vec<&PathBuf> = before.reopened.iter().chain(&after.reopened).collect();
    reopened.sort();
    reopened.dedup();
    for dir in reopened {
        warnings.push(format!(
            "{}: could not be listed (no read permission, as `chmod` by a command leaves it); \
             baton gave its owner read and search permission back to check it for planted \
             git config",
            dir.display()
        ));
    }
    if after.incomplete {
        warnings.push(format!(
            "baton: the check for planted git config and hooks stopped after {MAX_WALK_ENTRIES} \
             entries; run `git config --list --show-origin` before trusting this workspace"
        ));
    }
    warnings
}

/// Whether the audit may rewrite, rename or create `path`: only inside a folder a command
/// could write. Every change the audit makes is to an entry of `path`'s folder (a file
/// renamed over it, it renamed aside), so that folder, resolved, is what must lie inside;
/// [`collect`] tracks nothing else, and this keeps it so.
fn may_change(path: &Path, host: &[PathBuf]) -> bool {
    path.parent()
        .and_then(|p| p.canonicalize().ok())
        .is_some_and(|p| inside_any(&p, host))
}

/// The folders a sandboxed command under `policy` may have written programs into, as far as
/// baton's own lookups are concerned: every writable root, and the workspace and `--write`
/// folders whatever the mode (a PATH entry there is the project's, never baton's).
pub fn program_roots(policy: &SandboxPolicy) -> Vec<PathBuf> {
    let mut roots = policy.writable_roots();
    for p in std::iter::once(&policy.workspace).chain(&policy.writable) {
        if !roots.contains(p) {
            roots.push(p.clone());
        }
    }
    roots
}

/// The `git` the audit asks for a second opinion: the first in baton's PATH outside
/// [`program_roots`], by absolute path, looked up once per process and set of roots. A `git`
/// found first in an activated in-project `.venv/bin` is what a command planted there, and
/// the audit runs it outside the sandbox.
fn audit_git(policy: &SandboxPolicy) -> Option<PathBuf> {
    type Found = (Vec<PathBuf>, Option<PathBuf>);
    static LAST: std::sync::Mutex<Option<Found>> = std::sync::Mutex::new(None);
    let roots = program_roots(policy);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((r, git)) = last.as_ref()
        && *r == roots
    {
        return git.clone();
    }
    let git = crate::protocol::host_programs::find_program("git", &roots);
    *last = Some((roots, git.clone()));
    git
}

fn undo_change(
    path: &Path,
    then: Option<&Tracked>,
    now: &Tracked,
    git: Option<&Path>,
) -> Option<String> {
    let shown = path.display();
    match now.kind {
        Kind::GitConfig => {
            let Some(now_content) = now.content.as_deref() else {
                // Not a regular file baton can read as git would (a link through
                // `/proc/self/cwd`, a FIFO): what git finds there is unknown.
                return move_unknown_config_aside(path);
            };
            let text = String::from_utf8_lossy(now_content).into_owned();
            let old = then
                .and_then(|t| t.content.as_deref())
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .unwrap_or_default();
            let kept: Vec<(String, String)> = config::parse(&old)
                .into_iter()
                .filter(config::Entry::runs_code)
                .map(|e| (e.name(), e.value))
                .collect();
            let planted: Vec<config::Entry> = config::parse(&text)
                .into_iter()
                .filter(|e| e.runs_code() && !kept.contains(&(e.name(), e.value.clone())))
                .collect();
            if planted.is_empty() && !config::git_sees_new_code(git, path, &kept) {
                return None;
            }
            let names: Vec<String> = planted.iter().map(config::Entry::name).collect();
            let fixed = config::disable(&text, &planted);
            let ok = replace_file(path, fixed.as_bytes()).is_ok()
                && !config::git_sees_new_code(git, path, &kept);
            if ok {
                Some(format!(
                    "baton: a command planted code-running git settings in {shown} ({}); they \
                     were commented out",
                    names.join(", ")
                ))
            } else {
                let aside = aside_name(path);
                let moved = std::fs::rename(path, &aside).is_ok();
                Some(format!(
                    "baton: a command planted code-running git settings in {shown}; {}",
                    if moved {
                        format!("the file was moved to {}", aside.display())
                    } else {
                        "it could not be neutralized: check it before running git here".into()
                    }
                ))
            }
        }
        Kind::Redirect | Kind::Baton => {
            let restored = match then {
                Some(Tracked {
                    link: Some(target), ..
                }) => replace_with_symlink(path, target).is_ok(),
                Some(Tracked {
                    content: Some(c), ..
                }) => replace_file(path, c).is_ok(),
                Some(_) => false,
                None => {
                    if now.kind == Kind::Redirect && redirect_is_harmless(path) {
                        return None;
                    }
                    let aside = aside_name(path);
                    return Some(if std::fs::rename(path, &aside).is_ok() {
                        format!(
                            "baton: a command created {shown}, which {}; it was moved to {}",
                            what_it_does(now.kind),
                            aside.display()
                        )
                    } else {
                        format!(
                            "baton: a command created {shown}, which {}; it could not be \
                             moved aside: remove it before running baton or git here",
                            what_it_does(now.kind)
                        )
                    });
                }
            };
            Some(if restored {
                format!(
                    "baton: a command changed {shown}, which {}; it was put back",
                    what_it_does(now.kind)
                )
            } else {
                format!(
                    "baton: a command changed {shown}, which {}; it could not be put back: \
                     check it before running baton or git here",
                    what_it_does(now.kind)
                )
            })
        }
        Kind::Hook => {
            let aside = aside_name(path);
            let moved = std::fs::rename(path, &aside).is_ok();
            Some(format!(
                "baton: a command {} the git hook {shown}; {}",
                if then.is_some() { "changed" } else { "created" },
                if moved {
                    format!("it was moved to {} and will not run", aside.display())
                } else {
                    "it could not be moved aside: remove it before running git here".into()
                }
            ))
        }
    }
}

/// Moves a git config whose content the audit cannot know out of git's way (None when it is
/// gone already).
fn move_unknown_config_aside(path: &Path) -> Option<String> {
    std::fs::symlink_metadata(path).ok()?;
    let shown = path.display();
    let what = "something baton cannot read as git does (a link through /proc, a FIFO, a device)";
    let aside = aside_name(path);
    Some(if std::fs::rename(path, &aside).is_ok() {
        format!(
            "baton: a command left the git config {shown} as {what}; it was moved to {}",
            aside.display()
        )
    } else {
        format!(
            "baton: a command left the git config {shown} as {what}, and it could not be moved \
             aside: check it before running git here"
        )
    })
}

fn what_it_does(kind: Kind) -> &'static str {
    match kind {
        Kind::Redirect => "points git at another repository's config and hooks",
        Kind::Baton => "is baton's project configuration",
        Kind::GitConfig | Kind::Hook => "git runs",
    }
}

/// A new `commondir` that names its own gitdir's owner (what `git worktree add` writes into
/// `.git/worktrees/NAME/`) redirects nowhere new.
fn redirect_is_harmless(path: &Path) -> bool {
    let Some(dir) = path.parent() else {
        return false;
    };
    if path.file_name().is_some_and(|n| n == "commondir") {
        let owner = dir.parent().and_then(Path::parent);
        let is_worktree = dir
            .parent()
            .is_some_and(|p| p.file_name().is_some_and(|n| n == "worktrees"));
        return is_worktree && commondir_of(dir).is_some_and(|c| owner.is_some_and(|o| c == o));
    }
    false
}

fn aside_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".disabled-by-baton");
    let mut aside = path.with_file_name(&name);
    let mut n = 1;
    while std::fs::symlink_metadata(&aside).is_ok() {
        let mut numbered = name.clone();
        numbered.push(format!(".{n}"));
        aside = path.with_file_name(numbered);
        n += 1;
    }
    aside
}

/// Writes `bytes` to a new file beside `path` and renames it over `path`: a symlink at `path`
/// is replaced, never written through.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = aside_name(&path.with_extension("baton-tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = f.write_all(bytes).and_then(|_| f.sync_all());
    if let Err(e) = written.and_then(|_| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

fn replace_with_symlink(path: &Path, target: &Path) -> std::io::Result<()> {
    let tmp = aside_name(&path.with_extension("baton-tmp"));
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Everything the audit tracks for `policy`, as it is now.
fn collect(policy: &SandboxPolicy) -> AuditSnapshot {
    let mut snap = AuditSnapshot::default();
    // Only what a command could have written is tracked, and so only that is ever changed.
    let writable = policy.write_rules().command_roots();
    let mut found = super::tree_index::Found::default();
    for root in project_roots(policy, &writable) {
        if !walk(&root, &mut found, MAX_WALK_ENTRIES) {
            snap.incomplete = true;
        }
    }
    let super::tree_index::Found {
        git: mut found_git,
        baton: mut found_baton,
        bare: found_bare,
        reopened,
    } = found;
    snap.reopened = reopened;
    // git takes a folder that is itself a git directory as a repository when it runs there
    // (no `.git` needed; with `core.bare = false` and `core.worktree` it even has a work tree
    // and runs `core.fsmonitor`), so a folder holding a `HEAD` is audited as a gitdir.
    for gitdir in &found_bare {
        if inside_any(gitdir, &writable) {
            snap.track_gitdir(gitdir, &writable, 0);
            snap.track_included(gitdir, &writable);
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
        if inside_any(&gitdir, &writable) {
            snap.track_gitdir(&gitdir, &writable, 0);
        } else if dot_git
            .parent()
            .and_then(|p| p.canonicalize().ok())
            .is_some_and(|p| inside_any(&p, &writable))
        {
            snap.track_pointer(dot_git);
        }
        if let Some(hooks) = hooks_path(&gitdir, work_tree)
            && inside_any(&hooks, &writable)
        {
            snap.track_dir(&hooks, Kind::Hook, &writable);
            if let Some(husky) = husky_dir(&hooks) {
                snap.track_dir(&husky, Kind::Hook, &writable);
            }
        }
        snap.track_included(&gitdir, &writable);
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
fn walk(root: &Path, found: &mut super::tree_index::Found, limit: usize) -> bool {
    // The root's own `.git`, `.baton` and `HEAD` are looked up by name before the walk: a top
    // folder with more entries than the limit must not hide them (git uses them first).
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
    // Beneath the root: folders unchanged since the last walk are not read again.
    super::tree_index::scan(root, limit, found).complete
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
        let stamp = FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size() as i64,
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        };
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
        }
        self.track_modules(&gitdir.join("modules"), writable, depth + 1);
    }

    /// The configs the repository includes that a command could have written or created.
    fn track_included(&mut self, gitdir: &Path, writable: &[PathBuf]) {
        for included in included_configs(gitdir) {
            if inside_any(&included, writable) {
                self.track(&included, Kind::GitConfig);
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

/// Reading git's config format far enough to find, and comment out, entries that run code.
mod config {
    use std::path::Path;

    /// One `name = value` of a config file.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Entry {
        /// Lowercased section name.
        pub section: String,
        /// Subsection as written (case matters), if any.
        pub subsection: Option<String>,
        /// Lowercased key.
        pub key: String,
        pub value: String,
        /// First line of the entry (0-based) and how many lines it spans.
        pub line: usize,
        pub lines: usize,
        /// Byte offset of the key in its first line (non-zero after a `[section]` header).
        pub column: usize,
    }

    impl Entry {
        /// `section.subsection.key` with section and key lowercased, as `git config -l` prints.
        pub fn name(&self) -> String {
            match &self.subsection {
                Some(s) => format!("{}.{}.{}", self.section, s, self.key),
                None => format!("{}.{}", self.section, self.key),
            }
        }

        /// Whether git may run a program (or read more config) because of this entry: any
        /// entry but the known-inert ones (see [`runs_code`]).
        pub fn runs_code(&self) -> bool {
            runs_code(
                &self.section,
                self.subsection.is_some(),
                &self.key,
                &self.value,
            )
        }
    }

    /// Whether git may run a program (or read more config, or reach further) because of this
    /// entry: every key but those known to name no program. An allow-list, because a
    /// deny-list of git's command-running keys cannot know third-party ones (git-lfs's
    /// `lfs.extension.*.clean`, `lfs.customtransfer.*.path`, git-annex's `annex.*-command`),
    /// and `git` runs them all. The keys kept are what `git init`, `git clone`, `git submodule`
    /// and `git worktree` write and the everyday settings beside them: layout and format
    /// (`core.*` below, `extensions.*`), where to fetch and push (`remote.*` URLs and
    /// refspecs: `ext::` URLs stay refused by git's own `protocol.allow` default), branch
    /// tracking, submodule registration, the author's name and e-mail, and a few behaviour
    /// switches whose values are words or numbers.
    pub fn runs_code(section: &str, has_sub: bool, key: &str, value: &str) -> bool {
        !inert(section, has_sub, key, value)
    }

    fn inert(section: &str, has_sub: bool, key: &str, value: &str) -> bool {
        match (section, has_sub) {
            ("core", false) => matches!(
                key,
                "repositoryformatversion"
                    | "bare"
                    | "filemode"
                    | "logallrefupdates"
                    | "ignorecase"
                    | "precomposeunicode"
                    | "symlinks"
                    | "worktree"
                    | "autocrlf"
                    | "eol"
                    | "safecrlf"
                    | "quotepath"
                    | "sparsecheckout"
                    | "sparsecheckoutcone"
                    | "checkstat"
                    | "trustctime"
                    | "abbrev"
                    | "compression"
                    | "longpaths"
                    | "untrackedcache"
                    | "splitindex"
                    | "preloadindex"
                    | "commitgraph"
                    | "multipackindex"
                    | "protecthfs"
                    | "protectntfs"
                    | "warnambiguousrefs"
            ),
            ("extensions", false) => matches!(
                key,
                "objectformat"
                    | "refstorage"
                    | "worktreeconfig"
                    | "partialclone"
                    | "preciousobjects"
                    | "noop"
            ),
            ("remote", true) => matches!(
                key,
                "url"
                    | "pushurl"
                    | "fetch"
                    | "push"
                    | "tagopt"
                    | "prune"
                    | "prunetags"
                    | "mirror"
                    | "promisor"
                    | "partialclonefilter"
                    | "skipdefaultupdate"
                    | "skipfetchall"
            ),
            ("branch", true) => matches!(
                key,
                "remote" | "merge" | "rebase" | "pushremote" | "description"
            ),
            ("submodule", true) => match key {
                "url" | "active" | "branch" | "fetchrecursesubmodules" | "ignore" | "shallow" => {
                    true
                }
                // `!command` runs it; the named strategies don't.
                "update" => matches!(value.trim(), "checkout" | "rebase" | "merge" | "none"),
                _ => false,
            },
            ("user", false) => matches!(key, "name" | "email"),
            ("init", false) => key == "defaultbranch",
            ("pull", false) => matches!(key, "rebase" | "ff"),
            ("push", false) => matches!(key, "default" | "autosetupremote"),
            ("fetch", false) => matches!(key, "prune" | "prunetags"),
            ("merge", false) => matches!(key, "conflictstyle" | "ff"),
            ("rerere", false) => key == "enabled",
            ("index", false) => key == "version",
            ("gc", false) => matches!(key, "auto" | "autodetach"),
            ("lfs", false) => key == "repositoryformatversion",
            _ => false,
        }
    }

    /// Parses config text. Lenient: what it can't read it skips (git would refuse the file).
    pub fn parse(text: &str) -> Vec<Entry> {
        let lines: Vec<&str> = text.split('\n').collect();
        let mut out = Vec::new();
        let mut section = String::new();
        let mut subsection: Option<String> = None;
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            let trimmed = line.trim_start();
            let mut start = line.len() - trimmed.len();
            if trimmed.starts_with('[') {
                match parse_header(&line[start..]) {
                    Some((sec, sub, used)) => {
                        section = sec;
                        subsection = sub;
                        start += used;
                    }
                    None => {
                        i += 1;
                        continue;
                    }
                }
            }
            let rest = &line[start..];
            let key_off = rest.len() - rest.trim_start().len();
            let rest = rest.trim_start();
            let key_len = rest
                .bytes()
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'-')
                .count();
            if key_len == 0 || section.is_empty() {
                i += 1;
                continue;
            }
            let key = rest[..key_len].to_ascii_lowercase();
            let after = rest[key_len..].trim_start();
            let (value, used_lines) = if let Some(v) = after.strip_prefix('=') {
                parse_value(v, &lines[i + 1..])
            } else {
                (String::new(), 0)
            };
            out.push(Entry {
                section: section.clone(),
                subsection: subsection.clone(),
                key,
                value,
                line: i,
                lines: used_lines + 1,
                column: start + key_off,
            });
            i += used_lines + 1;
        }
        out
    }

    /// `[section]`, `[section "sub"]` or `[section.sub]`; returns the bytes it used.
    fn parse_header(s: &str) -> Option<(String, Option<String>, usize)> {
        let b = s.as_bytes();
        let mut i = 1;
        let name_start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'-' || b[i] == b'.') {
            i += 1;
        }
        let name = &s[name_start..i];
        let mut sub = None;
        while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        if i < b.len() && b[i] == b'"' {
            i += 1;
            let mut v = String::new();
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' && i + 1 < b.len() {
                    i += 1;
                }
                let ch = s[i..].chars().next()?;
                v.push(ch);
                i += ch.len_utf8();
            }
            if i >= b.len() {
                return None;
            }
            i += 1;
            sub = Some(v);
        }
        if i >= b.len() || b[i] != b']' {
            return None;
        }
        let (sec, sub) = match (sub, name.split_once('.')) {
            (Some(sub), _) => (name.to_ascii_lowercase(), Some(sub)),
            (None, Some((sec, rest))) => {
                (sec.to_ascii_lowercase(), Some(rest.to_ascii_lowercase()))
            }
            (None, None) => (name.to_ascii_lowercase(), None),
        };
        if sec.is_empty() {
            return None;
        }
        Some((sec, sub, i + 1))
    }

    /// A value: quotes, escapes, comments, and `\` at the end of a line continuing it.
    fn parse_value(first: &str, more: &[&str]) -> (String, usize) {
        let mut v = String::new();
        let mut quoted = false;
        let mut used = 0;
        let mut cur = first;
        loop {
            let mut chars = cur.chars().peekable();
            let mut continued = false;
            while let Some(c) = chars.next() {
                match c {
                    '\\' => match chars.next() {
                        None => {
                            continued = true;
                            break;
                        }
                        Some('\r') if chars.peek().is_none() => {
                            continued = true;
                            break;
                        }
                        Some('n') => v.push('\n'),
                        Some('t') => v.push('\t'),
                        Some(o) => v.push(o),
                    },
                    '"' => quoted = !quoted,
                    '#' | ';' if !quoted => break,
                    o => v.push(o),
                }
            }
            if !continued || used >= more.len() {
                break;
            }
            cur = more[used];
            used += 1;
        }
        (v.trim().to_string(), used)
    }

    /// `text` with `entries` commented out (a key after a `[section]` header is cut from its
    /// line, the header kept, so later keys stay in their section).
    pub fn disable(text: &str, entries: &[Entry]) -> String {
        let mut lines: Vec<String> = text.split('\n').map(str::to_string).collect();
        for e in entries {
            for n in e.line..(e.line + e.lines).min(lines.len()) {
                if n == e.line && e.column > 0 && lines[n][..e.column].contains(']') {
                    let (head, tail) = lines[n].split_at(e.column);
                    lines[n] = format!("{head}\n# disabled by baton: {tail}");
                } else {
                    lines[n] = format!("# disabled by baton: {}", lines[n]);
                }
            }
        }
        lines.join("\n")
    }

    /// Asks git itself (`git`, when one was found outside the writable roots) whether `path`
    /// still holds code-running entries other than `kept`: a second opinion on this parser, in
    /// case git reads the file differently.
    pub fn git_sees_new_code(git: Option<&Path>, path: &Path, kept: &[(String, String)]) -> bool {
        let Some(git) = git else { return false };
        let out = std::process::Command::new(git)
            .args(["config", "--no-includes", "--null", "--list", "--file"])
            .arg(path)
            .current_dir("/")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CEILING_DIRECTORIES", "/")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output();
        let Ok(out) = out else { return false };
        if !out.status.success() {
            return false;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        text.split('\0').filter(|r| !r.is_empty()).any(|record| {
            let (name, value) = record.split_once('\n').unwrap_or((record, ""));
            let Some((head, key)) = name.rsplit_once('.') else {
                return false;
            };
            let (section, has_sub) = match head.split_once('.') {
                Some((s, _)) => (s, true),
                None => (head, false),
            };
            runs_code(section, has_sub, key, value)
                && !kept.iter().any(|(n, v)| n == name && v == value)
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn finds_keys_in_every_header_form() {
            let text = "[core]\n\tbare = false\n[core] fsmonitor = /x/y\n[diff \"pdf\"]\n\
                        textconv = \"a \\\n b\"\n[Alias]\n st = status\n ev = !sh -c x\n\
                        [remote.origin]\n uploadpack = z ; comment\n";
            let names: Vec<String> = parse(text)
                .iter()
                .filter(|e| e.runs_code())
                .map(Entry::name)
                .collect();
            assert_eq!(
                names,
                [
                    "core.fsmonitor",
                    "diff.pdf.textconv",
                    // Not only `!` aliases: `st = -c core.pager=X log` runs X too.
                    "alias.st",
                    "alias.ev",
                    "remote.origin.uploadpack"
                ]
            );
            let e = parse(text);
            let tc = e.iter().find(|e| e.key == "textconv").unwrap();
            assert_eq!((tc.value.as_str(), tc.lines), ("a  b", 2));
        }

        /// An allow-list: what `git init`, `git clone` and `git submodule` write is kept,
        /// every other key counts as code, a third party's included (finding 5: git-lfs's
        /// `lfs.extension.*.clean` ran on the user's `git status`).
        #[test]
        fn only_keys_known_to_run_nothing_are_kept() {
            let text = r#"[core]
	repositoryformatversion = 0
	filemode = true
	bare = false
	logallrefupdates = true
	worktree = ../../../lib
[remote "origin"]
	url = https://example.com/x.git
	fetch = +refs/heads/*:refs/remotes/origin/*
[branch "main"]
	remote = origin
	merge = refs/heads/main
[submodule "lib"]
	url = ../lib
	active = true
	update = rebase
[user]
	name = me
	email = me@example.com
[lfs]
	repositoryformatversion = 0
[lfs "extension.x"]
	clean = ./c.sh
	smudge = cat
[lfs "customtransfer.t"]
	path = ./t.sh
[lfs]
	standalonetransferagent = t
[annex]
	freezecontent-command = ./f.sh
[submodule "evil"]
	update = !./u.sh
[core]
	fsmonitor = ./m.sh
"#;
            let names: Vec<String> = parse(text)
                .iter()
                .filter(|e| e.runs_code())
                .map(Entry::name)
                .collect();
            assert_eq!(
                names,
                [
                    "lfs.extension.x.clean",
                    "lfs.extension.x.smudge",
                    "lfs.customtransfer.t.path",
                    "lfs.standalonetransferagent",
                    "annex.freezecontent-command",
                    "submodule.evil.update",
                    "core.fsmonitor",
                ]
            );
        }

        #[test]
        fn disabling_keeps_the_header_and_later_keys_in_their_section() {
            let text = "[alias]\n\tx = log\n[core] fsmonitor = /evil\n\tbare = false\n";
            let bad: Vec<Entry> = parse(text).into_iter().filter(Entry::runs_code).collect();
            let fixed = disable(text, &bad);
            let after = parse(&fixed);
            assert!(after.iter().all(|e| !e.runs_code()), "{fixed}");
            assert!(after.iter().any(|e| e.name() == "core.bare"), "{fixed}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().canonicalize().unwrap();
        (d, p)
    }

    #[test]
    fn a_top_folder_past_the_walk_limit_still_shows_its_own_git_and_baton() {
        let (_d, ws) = ws();
        for i in 0..300 {
            std::fs::write(ws.join(format!("f{i}")), "").unwrap();
        }
        std::fs::create_dir(ws.join(".git")).unwrap();
        std::fs::create_dir(ws.join(".baton")).unwrap();
        std::fs::write(ws.join("HEAD"), "ref: refs/heads/main").unwrap();
        let mut found = super::super::tree_index::Found::default();
        let stopped = !walk(&ws, &mut found, 5);
        assert!(stopped, "the limit must still stop the walk");
        assert_eq!(found.git, [ws.join(".git")]);
        assert_eq!(found.baton, [ws.join(".baton")]);
        assert_eq!(found.bare, std::slice::from_ref(&ws));
    }

    #[test]
    fn submodule_and_worktree_gitdirs_are_protected_and_pinned() {
        let (_d, ws) = ws();
        let g = ws.join(".git");
        for d in ["hooks", "info", "modules/lib/a/hooks", "worktrees/w"] {
            std::fs::create_dir_all(g.join(d)).unwrap();
        }
        std::fs::write(g.join("config"), "").unwrap();
        std::fs::write(g.join("modules/lib/a/HEAD"), "x").unwrap();
        std::fs::write(g.join("modules/lib/a/config"), "").unwrap();
        std::fs::write(g.join("worktrees/w/commondir"), "../..").unwrap();
        let p = protection(&SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws));
        for ro in [
            "config",
            "hooks",
            "info",
            "modules/lib/a/config",
            "modules/lib/a/hooks",
            "worktrees/w/commondir",
        ] {
            assert!(p.read_only.contains(&g.join(ro)), "{ro}: {p:?}");
        }
        for pin in ["", "modules", "modules/lib", "modules/lib/a", "worktrees/w"] {
            let want = if pin.is_empty() {
                g.clone()
            } else {
                g.join(pin)
            };
            assert!(p.pinned.contains(&want), "{pin}: {p:?}");
        }
        assert!(p.denied.contains(&g.join("commondir")));
        assert!(p.denied.contains(&ws.join(".baton")));
    }

    #[test]
    fn a_relative_hooks_path_protects_husky() {
        let (_d, ws) = ws();
        std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
        std::fs::create_dir_all(ws.join(".husky/_")).unwrap();
        std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = .husky/_\n").unwrap();
        let p = protection(&SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws));
        assert!(p.read_only.contains(&ws.join(".husky/_")), "{p:?}");
        assert!(p.read_only.contains(&ws.join(".husky")), "{p:?}");
    }

    #[test]
    fn the_audit_comments_out_planted_settings_and_keeps_the_rest() {
        let (_d, ws) = ws();
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws);
        let before = snapshot(&policy);
        let sub = ws.join("vendor/x/.git");
        std::fs::create_dir_all(sub.join("hooks")).unwrap();
        std::fs::write(
            sub.join("config"),
            "[core]\n\tfsmonitor = /evil\n[user]\n\tname = me\n",
        )
        .unwrap();
        std::fs::write(sub.join("hooks/pre-commit"), "#!/bin/sh\n").unwrap();
        std::fs::write(sub.join("hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
        let warnings = audit(&before, &policy);
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        let text = std::fs::read_to_string(sub.join("config")).unwrap();
        assert!(
            config::parse(&text).iter().all(|e| !e.runs_code()),
            "{text}"
        );
        assert!(text.contains("name = me"));
        assert!(!sub.join("hooks/pre-commit").exists());
        assert!(sub.join("hooks/pre-commit.sample").exists());
        // Nothing changed since: nothing to say.
        assert!(audit(&snapshot(&policy), &policy).is_empty());
    }

    /// A folder no policy makes writable (not under a temp root, where a checkout may live).
    fn outside_base() -> PathBuf {
        let temp: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
            .iter()
            .filter_map(|t| Path::new(t).canonicalize().ok())
            .collect();
        [
            Some(PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/baton-tests")),
            Some(PathBuf::from("/var/cache/baton-tests")),
        ]
        .into_iter()
        .flatten()
        .find_map(|d| {
            std::fs::create_dir_all(&d).ok()?;
            let d = d.canonicalize().ok()?;
            // Run as another user, the source folder may not be writable: the next one then.
            let writable = tempfile::tempdir_in(&d).is_ok();
            (writable && !temp.iter().any(|t| d.starts_with(t))).then_some(d)
        })
        .expect("a writable folder outside the temp roots")
    }

    #[test]
    fn the_audit_leaves_a_hooks_folder_outside_the_writable_roots_alone() {
        let (_d, ws) = ws();
        let outside_hooks = tempfile::tempdir_in(outside_base()).unwrap();
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws);
        let before = snapshot(&policy);
        std::fs::create_dir_all(ws.join("n/.git")).unwrap();
        std::fs::write(ws.join("n/.git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(outside_hooks.path().join("pre-commit"), "#!/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(outside_hooks.path(), ws.join("n/.git/hooks")).unwrap();
        let w = audit(&before, &policy);
        assert!(w.is_empty(), "{w:?}");
        assert!(outside_hooks.path().join("pre-commit").exists());
    }

    #[test]
    fn the_audit_puts_back_a_changed_baton_config() {
        let (_d, ws) = ws();
        std::fs::create_dir_all(ws.join(".baton")).unwrap();
        std::fs::write(ws.join(".baton/config.toml"), "model = \"m\"\n").unwrap();
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws);
        let before = snapshot(&policy);
        std::fs::write(ws.join(".baton/config.toml"), "sandbox = \"off\"\n").unwrap();
        let w = audit(&before, &policy);
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(
            std::fs::read_to_string(ws.join(".baton/config.toml")).unwrap(),
            "model = \"m\"\n"
        );
    }
}
