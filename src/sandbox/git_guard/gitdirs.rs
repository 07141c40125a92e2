//! Where git looks: gitdirs and their common dirs, hooks paths, and the configs it reads.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::config;
use super::snapshot::MAX_TRACKED_BYTES;

/// How deep submodule gitdirs (`modules/a/modules/b/…`, names with `/`) are followed.
pub(super) const MAX_GITDIR_DEPTH: usize = 8;

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
    let named = gitfile_target(&text)?;
    let base = dot_git.parent()?;
    let p = base.join(named);
    Some(p.canonicalize().unwrap_or(p))
}

/// The path a `.git` file names, read as git reads it (`read_gitfile_gently`): the file
/// starts with `gitdir: `, and the path is the rest, less trailing line ends only. A blank
/// at its end, or a second line, is part of the path for git: reading it any other way
/// would audit another folder than the one git then uses.
fn gitfile_target(text: &[u8]) -> Option<PathBuf> {
    let rest = text.strip_prefix(b"gitdir: ")?;
    let named = trim_line_ends(rest);
    (!named.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(named)))
}

/// `bytes` without the `\n` and `\r` at their end, as git trims the files that name a path.
fn trim_line_ends(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| *b != b'\n' && *b != b'\r')
        .map_or(0, |i| i + 1);
    &bytes[..end]
}

/// The common dir a gitdir's `commondir` file names, when it has one (git trims only the
/// line ends of it too).
pub(super) fn commondir_of(gitdir: &Path) -> Option<PathBuf> {
    let text = read_small(&gitdir.join("commondir"))?;
    let named = trim_line_ends(&text);
    if named.is_empty() {
        return None;
    }
    let p = gitdir.join(std::ffi::OsStr::from_bytes(named));
    Some(p.canonicalize().unwrap_or(p))
}

pub(super) fn read_small(p: &Path) -> Option<Vec<u8>> {
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
pub(super) fn open_regular(p: &Path) -> Option<std::fs::File> {
    crate::untrusted_fs::open_following(p)
        .ok()
        .map(|(file, _)| file)
}

/// At most this many submodule gitdirs (nested ones included) are guarded one by one: each
/// costs the command a handful of mounts. Past it, a `modules/` folder is guarded whole.
pub(super) const MAX_MODULE_GITDIRS: usize = 64;

/// The submodule gitdirs directly in a `modules/` folder (not those nested in them) and the
/// folders their names pass through (`modules/a/b` for a module named `a/b`, a folder with a
/// `HEAD` being a gitdir). None when there are more gitdirs than `budget` allows (what is left
/// of [`MAX_MODULE_GITDIRS`], reduced by what is found) or the folders are too many to look
/// through: the caller then guards the folder as a whole, so neither the pins nor the walk
/// grow with what a command made there.
pub(super) struct ModuleTree {
    pub levels: Vec<PathBuf>,
    pub gitdirs: Vec<PathBuf>,
}

pub(super) fn module_gitdirs(modules: &Path, budget: &mut usize) -> Option<ModuleTree> {
    let mut tree = ModuleTree {
        levels: Vec::new(),
        gitdirs: Vec::new(),
    };
    let mut folders_left = MAX_MODULE_GITDIRS * 4;
    let mut todo = vec![(modules.to_path_buf(), 0)];
    while let Some((dir, depth)) = todo.pop() {
        if depth > MAX_GITDIR_DEPTH {
            continue;
        }
        for sub in list_dirs(&dir) {
            folders_left = folders_left.checked_sub(1)?;
            tree.levels.push(sub.clone());
            if sub.join("HEAD").exists() {
                *budget = budget.checked_sub(1)?;
                tree.gitdirs.push(sub);
            } else {
                todo.push((sub, depth + 1));
            }
        }
    }
    Some(tree)
}

pub(super) fn list_dirs(dir: &Path) -> Vec<PathBuf> {
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

/// What git's config files say for one repository, each file read once: the files its git
/// could read (its own config and `config.worktree`, the user's global ones, the system one,
/// and every file they include) and every entry in them and in baton's environment.
pub(super) struct GitConfigs {
    included: Vec<PathBuf>,
    entries: Vec<config::Entry>,
}

impl GitConfigs {
    pub(super) fn read(gitdir: &Path) -> Self {
        let (included, mut entries) = walk_configs(repo_configs(gitdir));
        entries.extend(config::parse(&environment_config()));
        GitConfigs { included, entries }
    }

    /// Every file git reads in any repository, links resolved: the user's global configs and
    /// the system's ([`user_configs`]) and what they include. One of them in a writable root
    /// (a `~/.gitconfig` linked into a dotfiles repository, `GIT_CONFIG_GLOBAL` there) would
    /// let a command plant a setting that runs a program in the user's every repository.
    pub(super) fn user_files() -> Vec<PathBuf> {
        let starts = user_configs();
        let (included, _) = walk_configs(starts.clone());
        let mut files: Vec<PathBuf> = starts.iter().map(|f| normalize(f)).collect();
        for f in included {
            if !files.contains(&f) {
                files.push(f);
            }
        }
        files
    }

    /// The files the repository's config pulls in with `include.path` and `includeIf.*.path`
    /// (projects share settings with `include.path = ../.gitconfig`), followed through
    /// included files, resolved as git does: `~/` from HOME, a relative path from the
    /// including file's folder. Every `includeIf` counts, whatever its condition: which one
    /// holds depends on the branch checked out and where the repository lies, both of which
    /// a command can change.
    pub(super) fn included(&self) -> &[PathBuf] {
        &self.included
    }

    /// Every `core.hooksPath` the repository's git could use, in any of its files, in force
    /// now or not (a hooks folder named in an included, tracked `.gitconfig` was left
    /// writable), resolved the way git does: `~/` from HOME, relative from the work tree.
    pub(super) fn hooks_paths(&self, work_tree: &Path) -> Vec<PathBuf> {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut out: Vec<PathBuf> = Vec::new();
        for e in &self.entries {
            if e.name() != "core.hookspath" {
                continue;
            }
            let value = e.value.trim();
            if value.is_empty() {
                continue;
            }
            let p = if let Some(rest) = value.strip_prefix("~/") {
                let Some(h) = &home else { continue };
                h.join(rest)
            } else {
                work_tree.join(value)
            };
            let p = normalize(&p);
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// The files of the work tree that git's settings name in a value that runs code
    /// (`core.fsmonitor = scripts/fsmon`, a filter's `clean`, a diff's `textconv`, an alias
    /// `!scripts/x`): any word of it that is an existing file there (relative paths from the
    /// work tree, as git runs them) — the program, or the script it hands an interpreter
    /// (`sh bin/fsmon`, `python3 bin/clean.py`, red team round 37). The settings themselves
    /// are the user's (a command cannot add one: the configs are protected), but what they
    /// name would be an ordinary workspace file a command could rewrite for the user's next
    /// `git`.
    pub(super) fn program_files(&self, work_tree: &Path) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = Vec::new();
        for e in &self.entries {
            if !e.runs_code() {
                continue;
            }
            let words = e
                .value
                .split(|c: char| c.is_whitespace() || ";&|()<>`".contains(c));
            for word in words {
                let word = word
                    .trim_start_matches('!')
                    .trim_matches(|c| c == '"' || c == '\'');
                if word.is_empty() || word.starts_with(['~', '-', '$']) {
                    continue;
                }
                let path = normalize(&work_tree.join(word));
                if path.starts_with(work_tree) && path.is_file() && !out.contains(&path) {
                    out.push(path);
                }
            }
        }
        out
    }
}

/// The settings git takes from baton's environment, which the user's git has too
/// (`GIT_CONFIG_COUNT` with `GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`, and the `-c` pairs of
/// `GIT_CONFIG_PARAMETERS`), written as config text.
fn environment_config() -> String {
    let mut pairs: Vec<(String, String)> = Vec::new();
    let count: usize = std::env::var("GIT_CONFIG_COUNT")
        .ok()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    for i in 0..count.min(1024) {
        if let (Ok(key), Ok(value)) = (
            std::env::var(format!("GIT_CONFIG_KEY_{i}")),
            std::env::var(format!("GIT_CONFIG_VALUE_{i}")),
        ) {
            pairs.push((key, value));
        }
    }
    // `'core.hooksPath'='x' 'a.b'='c'`: single-quoted words, `'\''` for a quote inside.
    if let Ok(params) = std::env::var("GIT_CONFIG_PARAMETERS") {
        let words: Vec<String> = params
            .split("' '")
            .map(|w| w.trim().trim_matches('\'').replace("'\\''", "'"))
            .collect();
        for w in words {
            if let Some((k, v)) = w.split_once("'='") {
                pairs.push((k.to_string(), v.to_string()));
            } else if let Some((k, v)) = w.split_once('=') {
                pairs.push((k.to_string(), v.to_string()));
            }
        }
    }
    let mut text = String::new();
    for (key, value) in pairs {
        let Some((section, name)) = key.rsplit_once('.') else {
            continue;
        };
        let header = match section.split_once('.') {
            Some((s, sub)) => format!(
                "[{s} \"{}\"]",
                sub.replace('\\', "\\\\").replace('"', "\\\"")
            ),
            None => format!("[{section}]"),
        };
        let value = value.replace('\\', "\\\\").replace('"', "\\\"");
        text.push_str(&format!("{header}\n\t{name} = \"{value}\"\n"));
    }
    text
}

/// The config files git reads for a repository, most specific first: its own config and
/// `config.worktree`, the user's global ones, the system one.
fn repo_configs(gitdir: &Path) -> Vec<PathBuf> {
    let common = commondir_of(gitdir).unwrap_or_else(|| gitdir.to_path_buf());
    let mut files = vec![common.join("config"), gitdir.join("config.worktree")];
    files.extend(user_configs());
    files
}

/// The config files git reads in every repository: the user's global ones, the system one,
/// and those `GIT_CONFIG_GLOBAL`/`GIT_CONFIG_SYSTEM` name instead.
pub(super) fn user_configs() -> Vec<PathBuf> {
    let mut files = Vec::new();
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
    // Where the user's git is pointed at other files, it reads those.
    for var in ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"] {
        if let Some(f) = std::env::var_os(var).map(PathBuf::from)
            && f.is_absolute()
        {
            files.push(f);
        }
    }
    files
}

/// git follows includes inside included files up to this depth.
const MAX_INCLUDE_DEPTH: usize = 10;

/// Included files looked at per repository: a planted config naming thousands must not stall
/// every command (it loses its includes to the audit anyway, `include.*` being code-running).
const MAX_INCLUDES: usize = 256;

/// Reads the repository's config files and, through them, every file they include: the
/// included files (see [`GitConfigs::included`]) and the entries of every file git could
/// read, each file read once.
fn walk_configs(starts: Vec<PathBuf>) -> (Vec<PathBuf>, Vec<config::Entry>) {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut included: Vec<PathBuf> = Vec::new();
    let mut entries: Vec<config::Entry> = Vec::new();
    let mut read: Vec<PathBuf> = Vec::new();
    let mut queue: Vec<(PathBuf, usize)> = starts.into_iter().map(|f| (f, 0)).collect();
    let parse = |file: &Path, read: &mut Vec<PathBuf>| -> Option<Vec<config::Entry>> {
        read.push(file.to_path_buf());
        let text = read_small(file)?;
        Some(config::parse(&String::from_utf8_lossy(&text)))
    };
    'walk: while let Some((file, depth)) = queue.pop() {
        let Some(file_entries) = parse(&file, &mut read) else {
            continue;
        };
        let dir = file.parent().unwrap_or(Path::new("/"));
        for e in &file_entries {
            // git stops following includes this deep; what the file says still counts.
            if depth > MAX_INCLUDE_DEPTH
                || e.key != "path"
                || !matches!(e.section.as_str(), "include" | "includeif")
            {
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
            if included.len() >= MAX_INCLUDES {
                entries.extend(file_entries);
                break 'walk;
            }
            if !included.contains(&target) {
                included.push(target.clone());
                queue.push((target, depth + 1));
            }
        }
        entries.extend(file_entries);
    }
    // Files named but not walked (past the limit) still count for what they say.
    for file in &included {
        if !read.contains(file)
            && let Some(more) = parse(file, &mut read)
        {
            entries.extend(more);
        }
    }
    (included, entries)
}

/// `a/./b/../c` → `a/c` without touching the filesystem (the target may not exist yet).
fn normalize(p: &Path) -> PathBuf {
    let out = crate::untrusted_fs::lexical(p);
    out.canonicalize().unwrap_or(out)
}

/// Every folder git takes hooks from for `gitdir` (its own, its common gitdir's, each
/// `core.hooksPath`), with husky's scripts beside a `.husky/_` shims folder.
pub(super) fn hooks_dirs(gitdir: &Path, configs: &GitConfigs, work_tree: &Path) -> Vec<PathBuf> {
    let mut out = vec![gitdir.join("hooks")];
    if let Some(common) = commondir_of(gitdir).filter(|c| c != gitdir) {
        out.push(common.join("hooks"));
    }
    for hooks in configs.hooks_paths(work_tree) {
        if let Some(husky) = husky_dir(&hooks) {
            out.push(husky);
        }
        out.push(hooks);
    }
    out
}

pub(super) fn husky_dir(hooks: &Path) -> Option<PathBuf> {
    hooks
        .ancestors()
        .take(2)
        .find(|a| a.file_name().is_some_and(|n| n == ".husky"))
        .map(Path::to_path_buf)
}
