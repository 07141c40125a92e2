//! One answer to "may this path be written", per policy: the writable roots, and within them
//! what is read-only (git's config, hooks and redirects, `.baton/`, included configs — see
//! `git_guard`). Every consumer reads the same value: the bubblewrap binds and the landlock
//! backend's mounts (`read_only`, `pinned`), Landlock (`roots`), the file tools (`denies`,
//! `file_tools_deny`), undo and redo (`undo_denies`) and the shell tool's reading of a
//! denial. It is computed from the disk as it is when asked (a `git init` by the last command
//! adds a gitdir to protect), once per launch, per file-tool write or per undo, never kept
//! across commands.
//!
//! Where commands and file tools are meant to differ, it says so here: file tools never write
//! inside a `.git` of the workspace (refs, objects and the index stay writable to commands:
//! agents run `git add` and `git commit`), and what cannot be pinned before a command runs
//! (a nested repository's gitdir, a new `.baton/`, a `HEAD` laid out as a bare gitdir) is
//! refused to file tools and undone after a command by the audit.
//!
//! It also answers "may the model see this path" (`hides`): what the bubblewrap world of the
//! policy does not show to commands (the credentials of the deny-list, the home outside its
//! view, …), read from that world itself, and baton's own configuration and state. The file
//! tools refuse to read or write such a path and their walks skip it. Where they differ:
//! baton's own folders are refused to the file tools even where the world would show them
//! (a `--read` naming them is ignored by both; a workspace inside one is a broad workspace),
//! and the tools judge with the workspace-write policy of the workspace alone, so a `--read`
//! that shows a credential to commands does not show it to the tools.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::git_guard::{self, Protection};
use super::policy::SandboxPolicy;
use super::visibility::{Hidden, Hiding};
use crate::protocol::SandboxMode;

/// The write rules of one policy, as the disk is now. Each part is worked out the first time
/// a consumer asks for it (a launch needs the binds, a file tool the answer for one path), and
/// then kept for as long as the value lives.
#[derive(Debug, Clone)]
pub struct WriteRules {
    policy: SandboxPolicy,
    /// Folders (and devices) beneath which writing is allowed; canonical, existing.
    roots: OnceLock<Vec<PathBuf>>,
    protection: OnceLock<Protection>,
    /// [`WriteRules::denied_as_named`].
    denied_real: OnceLock<Vec<PathBuf>>,
    /// What [`git_guard::TrustedFolders::holds`] needs.
    trusted: OnceLock<git_guard::TrustedFolders>,
    /// What commands do not see ([`WriteRules::hides`]).
    hidden: OnceLock<Hidden>,
}

impl WriteRules {
    /// The rules of `policy`.
    pub fn of(policy: &SandboxPolicy) -> WriteRules {
        WriteRules {
            policy: policy.clone(),
            roots: OnceLock::new(),
            protection: OnceLock::new(),
            denied_real: OnceLock::new(),
            trusted: OnceLock::new(),
            hidden: OnceLock::new(),
        }
    }

    /// The writable roots (Landlock's rules; bubblewrap binds the workspace and `--write`
    /// folders among them read-write, and gives the command temp folders of its own).
    pub fn roots(&self) -> &[PathBuf] {
        self.roots.get_or_init(|| self.policy.writable_roots())
    }

    fn protection(&self) -> &Protection {
        self.protection
            .get_or_init(|| git_guard::protection(&self.policy))
    }

    /// Existing paths inside the roots bound read-only for commands.
    pub fn read_only(&self) -> &[PathBuf] {
        &self.protection().read_only
    }

    /// Directories bound onto themselves before the read-only binds (parents first).
    pub fn pinned(&self) -> &[PathBuf] {
        &self.protection().pinned
    }

    /// Whether `path` (absolute) may not be written: nothing is forbidden with the sandbox
    /// off; otherwise a path outside every root, a protected one (existing or not), or one
    /// inside a `.baton` folder or a nested repository's `.git` is. A path that does not
    /// exist yet is judged by its nearest existing parent, resolved.
    pub fn denies(&self, path: &Path) -> bool {
        if self.policy.mode == SandboxMode::Off {
            return false;
        }
        let Some(real) = resolved(path) else {
            return false;
        };
        let trusted = self
            .trusted
            .get_or_init(|| git_guard::TrustedFolders::of(&self.policy));
        let protection = self.protection();
        if trusted.holds(&real)
            || protection.denied.iter().any(|p| real.starts_with(p))
            || protection.shadows(&real, self.roots())
            || protection.shadows(path, self.roots())
        {
            return true;
        }
        !self.roots().iter().any(|r| real.starts_with(r))
    }

    /// The folders on the host a command can write, as baton's own process names them: under
    /// bubblewrap a command's `/tmp`, `/var/tmp` and `/dev/shm` are its own, so the host's
    /// temp folders are out of its reach, and what is left is the workspace and the `--write`
    /// folders (under `workspace-write`) and the host folder behind its private `/tmp`; under
    /// the landlock backend commands share the host's temp folders: every root that is a
    /// directory. What the audit tracks and may change.
    pub fn command_roots(&self) -> Vec<PathBuf> {
        let policy = &self.policy;
        if policy.mode == SandboxMode::Off {
            return Vec::new();
        }
        match policy.backend {
            super::Backend::Landlock => self
                .roots()
                .iter()
                .filter(|p| p.is_dir() && !p.starts_with("/dev/pts"))
                .cloned()
                .collect(),
            super::Backend::Bubblewrap => {
                let mut out: Vec<PathBuf> = Vec::new();
                if policy.mode == SandboxMode::WorkspaceWrite {
                    for p in std::iter::once(&policy.workspace).chain(&policy.writable) {
                        if let Some(c) = super::policy::resolved_once(p)
                            && c.is_dir()
                            && !out.contains(&c)
                        {
                            out.push(c);
                        }
                    }
                }
                out.extend(super::bwrap::private_tmp_dir());
                out
            }
        }
    }

    /// Whether a command under the policy can write `path` (absolute, as baton's process
    /// names it): it lies in one of [`WriteRules::command_roots`] and beneath no read-only
    /// bind. What the audit undoes afterwards is not counted here.
    pub fn commands_may_write(&self, path: &Path) -> bool {
        if self.policy.mode == SandboxMode::Off {
            return true;
        }
        let Some(real) = resolved(path) else {
            return false;
        };
        self.command_roots().iter().any(|r| real.starts_with(r))
            && !self.read_only().iter().any(|p| real.starts_with(p))
    }

    /// The protected subtrees (refused to file tools), each as named and, when a link on the
    /// way leads elsewhere, where it leads.
    fn denied_as_named(&self) -> &[PathBuf] {
        self.denied_real.get_or_init(|| {
            let mut out: Vec<PathBuf> = Vec::new();
            for p in &self.protection().denied {
                for q in std::iter::once(p.clone()).chain(resolved(p)) {
                    if !out.contains(&q) {
                        out.push(q);
                    }
                }
            }
            out
        })
    }

    /// What undo and redo refuse for `path` (absolute, in the workspace `root`, canonical):
    /// what the file tools refuse there, judged on the path as named, without resolving it.
    /// Undo reaches every folder beneath the workspace without following a link and replaces
    /// the last component (a link standing there is replaced, never written through), so the
    /// path it names is where the write lands: `root` joined with the step's relative path
    /// when planning, the real path of the folder it opened (read back from the descriptor)
    /// and the name when writing. A protected folder reached through a link of its own
    /// (`.githooks` linking to `scripts/hooks`) is judged by where the link leads as well.
    pub fn undo_denies(&self, root: &Path, path: &Path) -> bool {
        let in_git = path
            .strip_prefix(root)
            .map(|rel| rel.components().any(|c| c.as_os_str() == ".git"))
            .unwrap_or(true);
        if in_git {
            return true;
        }
        if self.policy.mode == SandboxMode::Off {
            return false;
        }
        let trusted = self
            .trusted
            .get_or_init(|| git_guard::TrustedFolders::of(&self.policy));
        if trusted.holds(path) {
            return true;
        }
        if self.denied_as_named().iter().any(|p| path.starts_with(p))
            || self.protection().shadows(path, self.roots())
        {
            return true;
        }
        // A file the model may not see (baton's own hooks, a credential) is not restored
        // either: a command could have planted it while the turn's snapshot was taken.
        if self.hides(path).is_some() {
            return true;
        }
        !self.roots().iter().any(|r| path.starts_with(r))
    }

    /// What commands under the policy's bubblewrap world do not see (credentials of the
    /// deny-list, the home outside its view, other users' homes, the host's `/tmp`, `/run`,
    /// `/proc`), and baton's own configuration and state whatever the policy: the paths the
    /// file tools neither read nor write, and their walks skip. `path` is absolute, links
    /// resolved. The world is built by the function a launch calls (`bwrap::world`), so
    /// the same path gets the same answer for commands and file tools.
    pub fn hides(&self, path: &Path) -> Option<Hiding> {
        self.hidden().hides(path)
    }

    /// The value behind [`WriteRules::hides`], to hand to a walk's filter.
    pub fn hidden(&self) -> &Hidden {
        self.hidden.get_or_init(|| Hidden::of(&self.policy))
    }

    /// What the file tools refuse to write for `path` (absolute, as resolved) in the
    /// workspace `root` (canonical): anything [`WriteRules::denies`] or
    /// [`WriteRules::hides`], and anything inside a `.git` of the workspace (the git tool
    /// commits; file tools never touch git's internals).
    pub fn file_tools_deny(&self, root: &Path, path: &Path) -> bool {
        let in_git = path
            .strip_prefix(root)
            .map(|rel| rel.components().any(|c| c.as_os_str() == ".git"))
            .unwrap_or(true);
        in_git || self.denies(path) || self.hides(path).is_some()
    }
}

/// `path` with its existing part resolved (symlinks followed) and the rest appended: where a
/// write to it would land. None when no part of it exists or resolves.
fn resolved(path: &Path) -> Option<PathBuf> {
    let mut existing = path;
    let mut missing = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                existing = parent;
            }
            _ => return None,
        }
    }
    let mut real = existing.canonicalize().ok()?;
    for name in missing.iter().rev() {
        real.push(name);
    }
    Some(real)
}
