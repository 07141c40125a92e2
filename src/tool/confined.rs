//! Work the tools do in baton's own, unsandboxed process on folders a command can lay out, run
//! on a thread of its own that Landlock confines, so that the kernel, not a check made before,
//! keeps it inside: the `git` tool's reads and commits, and the walks of `list_dir`, `glob`,
//! `grep` and `outline`, which open folders by path and would follow a folder that a command
//! swapped for a symlink in the middle of a walk.

use std::path::{Path, PathBuf};

use crate::tool::ToolError;

/// Runs `work` on a new thread whose reads Landlock keeps beneath `read` and `write` and whose
/// writes beneath `write` ([`crate::sandbox::confine_thread`]), and returns what it returned.
/// Threads that `work` starts inherit the confinement (grep's parallel walker); a thread that
/// already exists cannot be released from it, hence a new one per call, ending with the work.
/// Where the kernel has no Landlock the work runs unconfined, as it always did there (commands
/// are refused then, so none could have laid anything out, unless the sandbox is off).
pub(crate) fn run_confined<T: Send>(
    read: &[PathBuf],
    write: &[PathBuf],
    work: impl FnOnce() -> T + Send,
) -> Result<T, ToolError> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("baton-confined".into())
            .spawn_scoped(scope, || {
                crate::sandbox::confine_thread(read, write).map_err(ToolError::Sandbox)?;
                Ok(work())
            })
            .map_err(|_| ToolError::Internal {
                what: "could not start a confined tool thread",
            })?;
        thread.join().unwrap_or(Err(ToolError::Internal {
            what: "a confined tool thread panicked",
        }))
    })
}

/// Runs a walk of the workspace (`list_dir`, `glob`, `grep`, `outline`) on a thread that may
/// read only the workspace and the ignore files the `ignore` walker reads outside it
/// ([`walk_readable`]), and write nothing: a folder swapped for a link to `~/.ssh` or another
/// repository in the middle of the walk is then refused by the kernel (`EACCES`) and skipped
/// like any unreadable folder, instead of being listed.
pub(crate) fn walk_confined<T: Send>(
    workspace: &Path,
    work: impl FnOnce() -> T + Send,
) -> Result<T, ToolError> {
    run_confined(&walk_readable(workspace), &[], work)
}

/// What a walk of `workspace` reads: the workspace, and, so that the walk ignores what it
/// ignored before it was confined, the ignore files the walker reads outside it: the
/// `.gitignore` and `.ignore` of each folder above, the `info/exclude` of the repository
/// enclosing the workspace (or, for a git worktree, of its main repository), git's settings
/// that name the global excludes file, and that file.
fn walk_readable(workspace: &Path) -> Vec<PathBuf> {
    let root = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    let mut read = vec![root.clone()];
    for dir in root.ancestors().skip(1) {
        // Only regular files: a link planted in a writable folder above would otherwise widen
        // the rule to whatever it points at (the rule is on the file the path reaches).
        read.extend(
            [".gitignore", ".ignore"]
                .map(|name| dir.join(name))
                .into_iter()
                .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file())),
        );
    }
    for dir in root.ancestors() {
        read.extend(git_exclude_files(dir));
    }
    read.extend(global_ignore_files());
    // What lies in the workspace its own rule covers: a rule of its own would be made on what
    // a link a command planted there points at (`.git/info/exclude` → `~/.ssh`). What lies
    // outside is read only where it is a plain file that no link leads to.
    let (mut kept, mut outside): (Vec<PathBuf>, Vec<PathBuf>) =
        read.into_iter().partition(|p| p == &root);
    outside.retain(|p| !p.starts_with(&root) && plain_file(p));
    kept.append(&mut outside);
    kept
}

/// A regular file at `path`, reached without a link on the way: its canonical path is the
/// path itself, `..` taken lexically (a `..` after a link would lead elsewhere).
fn plain_file(path: &Path) -> bool {
    let lexical = crate::untrusted_fs::lexical(path);
    path.is_absolute()
        && std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
        && std::fs::canonicalize(path).is_ok_and(|c| c == lexical)
}

/// The files the walker reads to find the `info/exclude` of the repository whose `.git` is in
/// `dir`: `.git/info/exclude`, or, where `.git` is a file (a worktree, a submodule), the
/// `commondir` of the gitdir it names and the `info/exclude` there.
fn git_exclude_files(dir: &Path) -> Vec<PathBuf> {
    let dot_git = dir.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
        return Vec::new();
    };
    if meta.is_dir() {
        return vec![dot_git.join("info").join("exclude")];
    }
    // Read without following a link or opening a FIFO: the workspace's `.git` is a command's
    // to replace.
    let Some(text) = crate::untrusted_fs::Dir::open(dir)
        .and_then(|d| d.read(Path::new(".git"), 4096))
        .ok()
        .flatten()
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&text);
    let Some(gitdir) = text.lines().next().and_then(|l| l.strip_prefix("gitdir: ")) else {
        return Vec::new();
    };
    // The walker takes the gitdir as written, a relative one from the process's folder.
    let gitdir = PathBuf::from(gitdir);
    let commondir_file = gitdir.join("commondir");
    let mut files = vec![commondir_file.clone()];
    if let Ok(Some(line)) = crate::untrusted_fs::read_following(&commondir_file, 4096).map(|t| {
        String::from_utf8_lossy(&t)
            .lines()
            .next()
            .map(str::to_string)
    }) {
        files.push(gitdir.join(line).join("info").join("exclude"));
    }
    files
}

/// Git's settings the walker reads for `core.excludesFile` (as the `ignore` crate looks for
/// them), and the excludes file they name or git's default one.
fn global_ignore_files() -> Vec<PathBuf> {
    let env_path = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = env_path("HOME");
    let mut files: Vec<PathBuf> = Vec::new();
    files.extend(env_path("GIT_CONFIG_GLOBAL"));
    files.extend(home.as_ref().map(|h| h.join(".gitconfig")));
    files.extend(
        env_path("XDG_CONFIG_HOME")
            .or_else(|| home.as_ref().map(|h| h.join(".config")))
            .map(|x| x.join("git").join("config")),
    );
    files.push(env_path("GIT_CONFIG_SYSTEM").unwrap_or_else(|| PathBuf::from("/etc/gitconfig")));
    files.extend(ignore::gitignore::gitconfig_excludes_path());
    files
}

/// Whether Landlock confines a thread on this kernel (the tests of the confinement are
/// skipped, loudly, where it does not).
#[cfg(test)]
pub(crate) fn landlock_here() -> bool {
    std::thread::spawn(|| crate::sandbox::confine_thread(&[], &[]))
        .join()
        .is_ok_and(|r| r.is_ok_and(|enforced| enforced))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_the_confined_work_starts_are_confined_too() {
        if !landlock_here() {
            eprintln!("no Landlock on this kernel: the confinement is not checked");
            return;
        }
        let inside = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(inside.path().join("f"), "inside").unwrap();
        std::fs::write(outside.path().join("secret"), "SECRET").unwrap();
        let read = [inside.path().to_path_buf()];
        let secret = outside.path().join("secret");
        let (own, child, allowed) = run_confined(&read, &[], || {
            let own = std::fs::read(&secret);
            // A thread started on the confined thread, and one started by that: every thread
            // of grep's walker pool is one of these.
            let path = secret.clone();
            let child = std::thread::spawn(move || {
                std::thread::spawn(move || std::fs::read(path))
                    .join()
                    .unwrap()
            })
            .join()
            .unwrap();
            let allowed = std::fs::read(inside.path().join("f"));
            (own, child, allowed)
        })
        .unwrap();
        assert_eq!(
            own.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
        assert_eq!(
            child.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
        assert_eq!(allowed.unwrap(), b"inside");
        // Writes are refused inside too, and the calling thread is left as it was.
        let wrote = run_confined(&read, &[], || std::fs::write(inside.path().join("g"), "x"));
        assert!(wrote.unwrap().is_err());
        assert_eq!(
            std::fs::read(outside.path().join("secret")).unwrap(),
            b"SECRET"
        );
    }

    #[test]
    fn a_panic_in_the_confined_work_is_an_error_not_a_crash() {
        let out: Result<(), ToolError> = run_confined(&[], &[], || panic!("boom"));
        assert!(matches!(out, Err(ToolError::Internal { .. })));
    }

    /// The walk still ignores what the ignore files above the workspace say: a `.gitignore` of
    /// the enclosing folder, and the `info/exclude` of a worktree's main repository.
    #[test]
    fn a_confined_walk_still_reads_the_ignore_files_above_the_workspace() {
        let top = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(top.path()).unwrap();
        std::fs::write(top.join(".gitignore"), "by-parent.txt\n").unwrap();
        let main_git = top.join("main/.git");
        std::fs::create_dir_all(main_git.join("info")).unwrap();
        std::fs::create_dir_all(main_git.join("worktrees/w")).unwrap();
        std::fs::write(main_git.join("info/exclude"), "by-exclude.txt\n").unwrap();
        std::fs::write(main_git.join("worktrees/w/commondir"), "../..\n").unwrap();
        let ws = top.join("ws");
        std::fs::create_dir(&ws).unwrap();
        std::fs::write(
            ws.join(".git"),
            format!("gitdir: {}\n", main_git.join("worktrees/w").display()),
        )
        .unwrap();
        for name in ["by-parent.txt", "by-exclude.txt", "kept.txt"] {
            std::fs::write(ws.join(name), "x").unwrap();
        }
        let names = || {
            let mut names: Vec<String> = ignore::WalkBuilder::new(&ws)
                .require_git(false)
                .build()
                .flatten()
                .filter(|e| e.depth() > 0)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(), ["kept.txt"], "the walk unconfined");
        assert_eq!(walk_confined(&ws, names).unwrap(), ["kept.txt"]);
        let readable = walk_readable(&ws);
        assert!(readable.contains(&top.join(".gitignore")), "{readable:?}");
        assert!(!readable.contains(&top), "{readable:?}");
    }

    /// A command may make the workspace's `.git/info/exclude` a link to `~/.ssh`: the rules
    /// of the walk were made on what the link points at, and a folder swapped mid-walk then
    /// showed `~/.ssh` (red team round 6). What lies in the workspace gets no rule of its own.
    #[test]
    fn a_link_in_the_workspace_never_widens_what_a_walk_may_read() {
        let top = tempfile::tempdir().unwrap();
        let top = std::fs::canonicalize(top.path()).unwrap();
        let secrets = top.join("home/.ssh");
        std::fs::create_dir_all(&secrets).unwrap();
        std::fs::write(secrets.join("id_rsa"), "SECRETKEY").unwrap();
        let ws = top.join("ws");
        std::fs::create_dir_all(ws.join(".git/info")).unwrap();
        std::os::unix::fs::symlink(&secrets, ws.join(".git/info/exclude")).unwrap();
        std::os::unix::fs::symlink(secrets.join("id_rsa"), ws.join(".gitignore")).unwrap();
        let readable = walk_readable(&ws);
        assert!(
            readable
                .iter()
                .all(|p| !p.starts_with(&secrets) && !p.starts_with(&ws) || p == &ws),
            "{readable:?}"
        );
        if landlock_here() {
            let read = walk_confined(&ws, || std::fs::read(secrets.join("id_rsa"))).unwrap();
            assert!(read.is_err(), "the walk read the key");
        }
    }
}
