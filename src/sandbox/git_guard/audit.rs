//! The audit after a command: what it planted where nothing could be pinned, undone and told.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use super::config;
use super::gitdirs::commondir_of;
use super::roots::{inside_any, program_roots};
use super::snapshot::{AuditSnapshot, Kind, MAX_WALK_ENTRIES, Tracked, collect};
use crate::protocol::SandboxMode;
use crate::sandbox::policy::SandboxPolicy;

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
    let fix = Fixer { roots: &host };
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
        if let Some(w) = undo_change(&fix, &after, path, then, now, git.as_deref()) {
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
    for (work_tree, how) in &after.hooks_run_work_tree {
        if told_once(work_tree) {
            warnings.push(format!(
                "baton: the git hooks of {} start programs from inside it ({}): a command can \
                 change what they run, and your next `git commit` there runs it outside the \
                 sandbox. Review the session's changes, ignored files too (`git status \
                 --ignored`), before committing, or skip the hooks with `git commit --no-verify`",
                work_tree.display(),
                how.iter()
                    .map(|h| crate::protocol::terminal_safe_line(h).into_owned())
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    if after.incomplete {
        warnings.push(format!(
            "baton: the check for planted git config and hooks stopped after {MAX_WALK_ENTRIES} \
             entries; run `git config --list --show-origin` before trusting this workspace"
        ));
    }
    warnings
}

/// True the first time this process asks about `work_tree`: a standing condition of the
/// repository is told once, not after every command.
fn told_once(work_tree: &Path) -> bool {
    static TOLD: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut told = TOLD.lock().unwrap_or_else(|e| e.into_inner());
    if told.iter().any(|t| t == work_tree) {
        return false;
    }
    told.push(work_tree.to_path_buf());
    true
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

/// Undoes the change a command made to the tracked file `path` (`then` before, `now` after),
/// as its kind calls for; the warning for the user, or `None` when nothing needed undoing.
fn undo_change(
    fix: &Fixer,
    after: &AuditSnapshot,
    path: &Path,
    then: Option<&Tracked>,
    now: &Tracked,
    git: Option<&Path>,
) -> Option<String> {
    match now.kind {
        Kind::GitConfig => undo_config_change(fix, path, then, now, git),
        Kind::Redirect | Kind::Baton => put_back(fix, after, path, then, now),
        Kind::Hook => move_hook_aside(fix, path, then),
        Kind::Todo => disarm_todo(fix, path, then, now),
        Kind::GitLink => undo_git_link(fix, path, then, now),
        Kind::Shadow => move_shadow_aside(fix, path, then),
    }
}

/// A link in a gitdir the command made or changed: git would write through it, outside the
/// workspace, at the user's next commit, checkout or fetch. A changed one is put back; a new
/// one is removed (a link holds no data; its target is in the warning).
fn undo_git_link(
    fix: &Fixer,
    path: &Path,
    then: Option<&Tracked>,
    now: &Tracked,
) -> Option<String> {
    if then.is_some_and(|t| t.link.is_some()) {
        return restore_as_before(fix, path, then, now);
    }
    let shown = path.display();
    let target = now
        .link
        .as_deref()
        .map(|t| crate::protocol::terminal_safe_line(&t.to_string_lossy()).into_owned())
        .unwrap_or_default();
    Some(if fix.remove_link(path).is_ok() {
        format!(
            "baton: a command left {shown} as a link to {target} in a git directory, where \
             git writes through it (outside the workspace); the link was removed"
        )
    } else {
        format!(
            "baton: a command left {shown} as a link to {target} in a git directory, where \
             git writes through it, and it could not be removed: remove it before running git \
             there"
        )
    })
}

/// A todo list with `exec` lines it did not have before the command is renamed aside:
/// continuing the rebase outside the sandbox would run them with the user's rights. One
/// without new commands (a rebase the model stopped on a conflict) is left as it is.
fn disarm_todo(fix: &Fixer, path: &Path, then: Option<&Tracked>, now: &Tracked) -> Option<String> {
    let before = then
        .and_then(|t| t.content.as_deref())
        .map(|c| exec_lines(path, c))
        .unwrap_or_default();
    let added = match &now.content {
        Some(c) => exec_lines(path, c)
            .into_iter()
            .find(|l| !before.contains(l)),
        // Content baton could not read as git would: it may hold anything.
        None => Some("(unreadable)".to_string()),
    };
    let line = added?;
    let shown = path.display();
    let aside = aside_name(path);
    let line = crate::protocol::terminal_safe_line(&line);
    Some(if fix.rename(path, &aside).is_ok() {
        format!(
            "baton: a command left {shown}, the todo list of a rebase or cherry-pick in \
             progress, with commands git would run when you continue it, outside the sandbox \
             (`{line}`); it was moved to {} (`git rebase --abort` ends that rebase)",
            aside.display()
        )
    } else {
        format!(
            "baton: a command left {shown}, the todo list of a rebase or cherry-pick in \
             progress, with commands git would run when you continue it (`{line}`), and it \
             could not be moved aside: run `git rebase --abort` before continuing"
        )
    })
}

/// What an operation's state file makes git run when the operation is continued: the
/// `exec` (`x`) lines of a todo list, as git reads its commands; a merge strategy other than
/// git's own (`rebase-merge/strategy` holds the name alone, `sequencer/opts` is a git config
/// whose `strategy` key names it), which git runs as the program `git-merge-NAME`.
fn exec_lines(path: &Path, state: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(state);
    let lines = text.lines().map(str::trim);
    let strategies: Vec<String> = match path.file_name().and_then(|n| n.to_str()) {
        // As git's `read_oneliner`: one line end off, nothing else (`ort\r\r\n` is `ort\r`).
        Some("strategy") => {
            let name = text.strip_suffix('\n').unwrap_or(&text);
            vec![name.strip_suffix('\r').unwrap_or(name).to_string()]
        }
        // Read with the audit's config reader (a key on its section's line, quotes,
        // continuations); `strategy-option` passes options to the strategy and runs nothing.
        Some("opts") => super::config::parse(&text)
            .into_iter()
            .filter(|e| e.key.contains("strategy") && e.key != "strategy-option")
            .map(|e| e.value)
            .collect(),
        _ => {
            return lines
                .filter(|l| matches!(l.split_whitespace().next(), Some("exec" | "x")))
                .map(str::to_string)
                .collect();
        }
    };
    strategies
        .into_iter()
        .filter(|name| !GIT_STRATEGIES.contains(&name.as_str()))
        .map(|name| format!("merge strategy {name}"))
        .collect()
}

/// The merge strategies git carries itself; any other runs a program `git-merge-NAME`.
const GIT_STRATEGIES: &[&str] = &["ort", "recursive", "resolve", "octopus", "ours", "subtree"];

/// A git config: the code-running entries it did not hold before are commented out (checked
/// with `git` when there is one); the file is moved aside when that fails.
fn undo_config_change(
    fix: &Fixer,
    path: &Path,
    then: Option<&Tracked>,
    now: &Tracked,
    git: Option<&Path>,
) -> Option<String> {
    let shown = path.display();
    let Some(now_content) = now.content.as_deref() else {
        // Not a regular file baton can read as git would (a link through
        // `/proc/self/cwd`, a FIFO): what git finds there is unknown.
        return move_unknown_config_aside(fix, path);
    };
    let text = String::from_utf8_lossy(now_content).into_owned();
    let old = then
        .and_then(|t| t.content.as_deref())
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .unwrap_or_default();
    // A `core.worktree` naming a folder commands may not write (`~`): the user's own git would
    // then stage and commit that folder. Submodules' and separate gitdirs' stay inside.
    let gitdir = path.parent().unwrap_or(Path::new("/"));
    let worktree_outside = |e: &config::Entry| {
        e.section == "core" && e.subsection.is_none() && e.key == "worktree" && {
            let named = gitdir.join(&e.value);
            let real = named.canonicalize().unwrap_or(named);
            !fix.roots.iter().any(|r| real.starts_with(r))
        }
    };
    let guarded = |e: &config::Entry| e.runs_code() || worktree_outside(e);
    let kept: Vec<(String, String)> = config::parse(&old)
        .into_iter()
        .filter(guarded)
        .map(|e| (e.name(), e.value))
        .collect();
    let planted: Vec<config::Entry> = config::parse(&text)
        .into_iter()
        .filter(|e| guarded(e) && !kept.contains(&(e.name(), e.value.clone())))
        .collect();
    if planted.is_empty() && !config::git_sees_new_code(git, path, &kept) {
        return None;
    }
    let names: Vec<String> = planted.iter().map(config::Entry::name).collect();
    // A link is moved aside, never replaced by what it points at: that may be a file the
    // sandbox hides (`~/.aws/credentials`, which git reads as a config too), and its content
    // written into the workspace would hand it to the next command.
    let fixed = config::disable(&text, &planted);
    let ok = now.link.is_none()
        && fix.replace_file(path, fixed.as_bytes()).is_ok()
        && !config::git_sees_new_code(git, path, &kept);
    if ok {
        Some(format!(
            "baton: a command planted code-running git settings in {shown} ({}); they \
             were commented out",
            names.join(", ")
        ))
    } else {
        let aside = aside_name(path);
        let moved = fix.rename(path, &aside).is_ok();
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

/// A redirect or a `.baton/` file: a changed one is put back, a new one moved aside (a new
/// `commondir` that redirects nowhere new is left).
fn put_back(
    fix: &Fixer,
    after: &AuditSnapshot,
    path: &Path,
    then: Option<&Tracked>,
    now: &Tracked,
) -> Option<String> {
    let shown = path.display();
    if let Some(gitdir) = pointer_into(fix, path) {
        // A `.git` pointer the command made or changed to a gitdir commands may write:
        // what that gitdir holds is audited like any, but one that lay there unused before
        // (a clone's tracked `vendor/lib.git`) is judged by what it would run now. A changed
        // pointer is put back (below); a new one is moved aside.
        let runs = wakes_code(after, &gitdir)?;
        if then.is_some() {
            return restore_as_before(fix, path, then, now);
        }
        let aside = aside_name(path);
        return Some(if fix.rename(path, &aside).is_ok() {
            format!(
                "baton: a command pointed {shown} at {}, a repository that {runs}; the \
                 pointer was moved to {}",
                gitdir.display(),
                aside.display()
            )
        } else {
            format!(
                "baton: a command pointed {shown} at {}, a repository that {runs}; it \
                 could not be moved aside: remove it before running git there",
                gitdir.display()
            )
        });
    }
    restore_as_before(fix, path, then, now)
}

/// [`put_back`]'s restoring part: the file or link as it was, or a new one moved aside.
fn restore_as_before(
    fix: &Fixer,
    path: &Path,
    then: Option<&Tracked>,
    now: &Tracked,
) -> Option<String> {
    let shown = path.display();
    let restored = match then {
        Some(Tracked {
            link: Some(target), ..
        }) => fix.replace_with_symlink(path, target).is_ok(),
        Some(Tracked {
            content: Some(c), ..
        }) => fix.replace_file(path, c).is_ok(),
        Some(_) => false,
        None => {
            if now.kind == Kind::Redirect && redirect_is_harmless(path) {
                return None;
            }
            let aside = aside_name(path);
            return Some(if fix.rename(path, &aside).is_ok() {
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

/// A hook, new or changed, is renamed aside so that it never runs.
fn move_hook_aside(fix: &Fixer, path: &Path, then: Option<&Tracked>) -> Option<String> {
    let shown = path.display();
    // Hooks, and what a hook (manager) runs or reads: a configuration, a program it names.
    let is_hook = path
        .parent()
        .is_some_and(|p| p.ends_with("hooks") || p.iter().any(|c| c == ".husky"));
    let what = if is_hook {
        format!("the git hook {shown}")
    } else {
        format!("{shown}, which a git hook runs or reads at each commit")
    };
    Some(rename_aside_saying(fix, path, then, &what))
}

/// A new or changed entry of a folder the hooks search first (husky's `node_modules/.bin`)
/// that is named like a program of the system (`sh`, `git`, `node`): every hook would start
/// it in that program's place, outside the sandbox. A package's own command (`eslint`) is
/// the project's code, and left.
fn move_shadow_aside(fix: &Fixer, path: &Path, then: Option<&Tracked>) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    crate::protocol::host_programs::find_program(name, fix.roots)?;
    let what = format!(
        "{}, which the repository's hooks start in place of the system's `{name}` (their PATH \
         searches that folder first)",
        path.display()
    );
    Some(rename_aside_saying(fix, path, then, &what))
}

/// Renames `path` aside and says so: "a command created/changed WHAT; it was moved to …".
fn rename_aside_saying(fix: &Fixer, path: &Path, then: Option<&Tracked>, what: &str) -> String {
    let aside = aside_name(path);
    let moved = fix.rename(path, &aside).is_ok();
    format!(
        "baton: a command {} {what}; {}",
        if then.is_some() { "changed" } else { "created" },
        if moved {
            format!("it was moved to {} and will not run", aside.display())
        } else {
            "it could not be moved aside: remove it before running git here".into()
        }
    )
}

/// Moves a git config whose content the audit cannot know out of git's way (None when it is
/// gone already).
fn move_unknown_config_aside(fix: &Fixer, path: &Path) -> Option<String> {
    std::fs::symlink_metadata(path).ok()?;
    let shown = path.display();
    let what = "something baton cannot read as git does (a link through /proc, a FIFO, a device)";
    let aside = aside_name(path);
    Some(if fix.rename(path, &aside).is_ok() {
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

/// The gitdir a `.git` file or link at `path` names, when that lies inside the folders
/// commands may write (where the audit also tracks the gitdir itself).
fn pointer_into(fix: &Fixer, path: &Path) -> Option<PathBuf> {
    if path.file_name()? != ".git" {
        return None;
    }
    let gitdir = super::gitdirs::gitdir_of(path)?.canonicalize().ok()?;
    inside_any(&gitdir, fix.roots).then_some(gitdir)
}

/// What `gitdir` would run for git started beside a pointer to it, as the snapshot after the
/// command found it (it tracks every gitdir inside the writable roots): its config's
/// code-running entries and its hooks (git's `*.sample` files are not tracked); `None` when
/// nothing.
fn wakes_code(after: &AuditSnapshot, gitdir: &Path) -> Option<String> {
    let config = after
        .files
        .get(&gitdir.join("config"))
        .and_then(|t| t.content.as_deref())
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .unwrap_or_default();
    let entries: Vec<String> = config::parse(&config)
        .into_iter()
        .filter(config::Entry::runs_code)
        .map(|e| e.name())
        .collect();
    let hooks_dir = gitdir.join("hooks");
    let hooks: Vec<String> = after
        .files
        .iter()
        .filter(|(p, t)| t.kind == Kind::Hook && p.parent() == Some(hooks_dir.as_path()))
        .filter_map(|(p, _)| p.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let mut what = Vec::new();
    if !entries.is_empty() {
        what.push(format!("sets {}", entries.join(", ")));
    }
    if !hooks.is_empty() {
        what.push(format!("has hooks {}", hooks.join(", ")));
    }
    (!what.is_empty()).then(|| what.join(" and "))
}

fn what_it_does(kind: Kind) -> &'static str {
    match kind {
        Kind::Redirect => "points git at another repository's config and hooks",
        Kind::Baton => "is baton's project configuration",
        Kind::GitConfig | Kind::Hook | Kind::Todo => "git runs",
        Kind::GitLink => "git writes through",
        Kind::Shadow => "the hooks start",
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

/// Where the audit changes files: only beneath the folders commands may write (`roots`), and
/// there only through the folder's descriptor, reached from its root without following a
/// link. A command still running (a session sent to the background) may swap a folder on the
/// way for a link to anywhere between the check and the change; by descriptor, the change
/// lands in the folder that was checked or fails.
struct Fixer<'a> {
    roots: &'a [PathBuf],
}

impl Fixer<'_> {
    fn folder_of(&self, path: &Path) -> std::io::Result<(crate::untrusted_fs::Dir, OsString)> {
        let anchors: Vec<&Path> = self.roots.iter().map(PathBuf::as_path).collect();
        let parent = path.parent().unwrap_or(Path::new("/"));
        if !crate::untrusted_fs::is_beneath(parent, &anchors) {
            return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        }
        crate::untrusted_fs::locate(path, &anchors)
    }

    /// Runs `change` on `path`'s folder and name. A folder its owner (this user) made
    /// unwritable (`chmod 555 .git/hooks`, which a command may do to keep what it planted
    /// there) gets write and search permission back for its owner, as the walk gives read
    /// permission back, and the change is tried once more.
    fn in_folder<T>(
        &self,
        path: &Path,
        change: impl Fn(&crate::untrusted_fs::Dir, &OsStr) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let (dir, name) = self.folder_of(path)?;
        match change(&dir, &name) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                give_write_back(&dir)?;
                change(&dir, &name)
            }
            other => other,
        }
    }

    /// Renames `path` to `aside` (a name in the same folder), never over an existing file.
    fn rename(&self, path: &Path, aside: &Path) -> std::io::Result<()> {
        let to = aside
            .file_name()
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        self.in_folder(path, |dir, name| {
            rustix::fs::renameat_with(
                dir.fd(),
                name,
                dir.fd(),
                to,
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(std::io::Error::from)
        })
    }

    /// Puts `bytes` at `path` by a new file renamed over it: a link there is replaced, never
    /// written through.
    fn replace_file(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.in_folder(path, |dir, name| dir.replace(name, bytes, Some(0o644)))
    }

    /// Removes the link at `path`; anything else standing there by then is left.
    fn remove_link(&self, path: &Path) -> std::io::Result<()> {
        self.in_folder(path, |dir, name| {
            let st = rustix::fs::statat(dir.fd(), name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                .map_err(std::io::Error::from)?;
            if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::Symlink {
                return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
            }
            rustix::fs::unlinkat(dir.fd(), name, rustix::fs::AtFlags::empty())
                .map_err(std::io::Error::from)
        })
    }

    fn replace_with_symlink(&self, path: &Path, target: &Path) -> std::io::Result<()> {
        self.in_folder(path, |dir, name| {
            let mut temp = name.to_os_string();
            temp.push(format!(".baton-tmp-{}", std::process::id()));
            rustix::fs::symlinkat(target, dir.fd(), &temp).map_err(std::io::Error::from)?;
            rustix::fs::renameat(dir.fd(), &temp, dir.fd(), name)
                .map_err(std::io::Error::from)
                .inspect_err(|_| {
                    let _ = rustix::fs::unlinkat(dir.fd(), &temp, rustix::fs::AtFlags::empty());
                })
        })
    }
}

/// Gives `dir`'s owner write and search permission on it when that owner is this user (who
/// may, like the command that took them away); anything else stays a permission error.
fn give_write_back(dir: &crate::untrusted_fs::Dir) -> std::io::Result<()> {
    let denied = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
    let st = rustix::fs::fstat(dir.fd()).map_err(std::io::Error::from)?;
    if st.st_uid != rustix::process::geteuid().as_raw() || st.st_mode & 0o300 == 0o300 {
        return Err(denied());
    }
    crate::untrusted_fs::chmod_held(dir.fd(), (st.st_mode | 0o300) & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::git_guard::snapshot;

    use crate::sandbox::git_guard::ws;

    #[test]
    fn the_audits_changes_never_go_through_a_folder_swapped_for_a_link() {
        // A command still running swaps a workspace folder for a link to another repository
        // of the user's between the audit's check and its change (second red team: the
        // victim's config was moved aside, once overwritten).
        let (_d, base) = ws();
        let ws = base.join("ws");
        let victim = base.join("victim/.git");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(&victim).unwrap();
        std::fs::write(victim.join("config"), "[core]\n\tbare = false\n").unwrap();
        std::os::unix::fs::symlink(base.join("victim"), ws.join("sub")).unwrap();
        let roots = vec![ws.clone()];
        let fix = Fixer { roots: &roots };
        let through = ws.join("sub/.git/config");
        assert!(fix.rename(&through, &aside_name(&through)).is_err());
        assert!(
            fix.replace_file(&through, b"[core]\n\tfsmonitor = x\n")
                .is_err()
        );
        assert!(fix.replace_with_symlink(&through, Path::new("/x")).is_err());
        assert_eq!(
            std::fs::read_to_string(victim.join("config")).unwrap(),
            "[core]\n\tbare = false\n"
        );
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 1);
        // The same changes in a real folder of the workspace are made.
        let own = ws.join("own/.git");
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("config"), "x").unwrap();
        let config = own.join("config");
        fix.replace_file(&config, b"y").unwrap();
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "y");
        let aside = aside_name(&config);
        fix.rename(&config, &aside).unwrap();
        assert!(aside.exists() && !config.exists());
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
        // The link in the workspace is the command's and goes; the folder it named is left.
        let w = audit(&before, &policy);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("link"), "{w:?}");
        assert!(outside_hooks.path().join("pre-commit").exists());
        assert!(!ws.join("n/.git/hooks").exists());
    }

    #[test]
    fn merge_strategies_other_than_gits_own_are_what_an_operation_runs() {
        let opts = b"[options]\n\tstrategy = ../../x\n\tstrategy-option = theirs\n";
        assert_eq!(
            exec_lines(Path::new("sequencer/opts"), opts),
            ["merge strategy ../../x"]
        );
        let ours = b"[options]\n\tstrategy = ort\n\tstrategy-option = theirs\n";
        assert!(exec_lines(Path::new("sequencer/opts"), ours).is_empty());
        assert!(exec_lines(Path::new("rebase-merge/strategy"), b"recursive\n").is_empty());
        assert!(exec_lines(Path::new("rebase-merge/strategy"), b"ort\r\n").is_empty());
        assert_eq!(
            exec_lines(Path::new("rebase-merge/strategy"), b"ort\r\r\n"),
            ["merge strategy ort\r"]
        );
        assert_eq!(
            exec_lines(Path::new("rebase-merge/strategy"), b"custom\n"),
            ["merge strategy custom"]
        );
        let header_line = b"[options] strategy = ../../x\n";
        assert_eq!(
            exec_lines(Path::new("sequencer/opts"), header_line),
            ["merge strategy ../../x"]
        );
        let todo = b"pick 123 two\nexec make\nx ./evil\n";
        assert_eq!(
            exec_lines(Path::new("rebase-merge/git-rebase-todo"), todo),
            ["exec make", "x ./evil"]
        );
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
