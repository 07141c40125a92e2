//! What a sandboxed command may do: the policy (`read-only | workspace-write | off`, network,
//! extra writable directories, process bound) and the paths it makes writable or protects.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::env::EnvPolicy;
use crate::protocol::SandboxMode;

/// What builds the sandbox (defined with the other policy choices in `protocol`).
pub use crate::protocol::SandboxBackend as Backend;

/// Default bound on live processes a sandboxed command may have (fork bombs stop here).
pub const DEFAULT_MAX_PROCESSES: u32 = 1024;

/// The full policy for one sandboxed command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxPolicy {
    pub mode: SandboxMode,
    /// Allow network sockets (AF_INET, AF_INET6, …). AF_UNIX is always allowed.
    #[serde(default)]
    pub network: bool,
    /// The workspace root (writable under `workspace-write`).
    pub workspace: PathBuf,
    /// Extra writable directories (`--write DIR`, `[sandbox] writable = [...]`).
    #[serde(default)]
    pub writable: Vec<PathBuf>,
    /// Paths of the user's home commands may read besides the toolchain folders
    /// (`--read PATH`, `[sandbox] readable = [...]`); one naming a hidden credential shows it.
    #[serde(default)]
    pub readable: Vec<PathBuf>,
    /// Pathname unix sockets (or folders of them) of the host commands may connect to
    /// (`--allow-unix-socket PATH`, `[sandbox] allow_unix_sockets = [...]`).
    #[serde(default)]
    pub unix_sockets: Vec<PathBuf>,
    /// Bound on processes the command may create (pids cgroup, or RLIMIT_NPROC headroom).
    #[serde(default = "default_max_processes")]
    pub max_processes: u32,
    /// Bound on the memory the command may use, in bytes (`None`: the default, half of RAM).
    #[serde(default)]
    pub max_memory: Option<u64>,
    #[serde(default)]
    pub backend: Backend,
    /// Which of baton's environment variables reach the command.
    #[serde(default)]
    pub env: EnvPolicy,
}

fn default_max_processes() -> u32 {
    DEFAULT_MAX_PROCESSES
}

impl SandboxPolicy {
    /// A policy for `workspace` with the given mode, no network and default limits.
    pub fn new(mode: SandboxMode, workspace: impl Into<PathBuf>) -> Self {
        SandboxPolicy {
            mode,
            network: false,
            workspace: workspace.into(),
            writable: Vec::new(),
            readable: Vec::new(),
            unix_sockets: Vec::new(),
            max_processes: DEFAULT_MAX_PROCESSES,
            max_memory: None,
            backend: Backend::default(),
            env: EnvPolicy::default(),
        }
    }

    pub fn max_memory(mut self, bytes: Option<u64>) -> Self {
        self.max_memory = bytes;
        self
    }

    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The memory bound this policy enforces: `max_memory`, or half of this machine's RAM.
    pub fn memory_limit(&self) -> u64 {
        self.max_memory
            .unwrap_or_else(crate::protocol::default_memory_bound)
    }

    pub fn network(mut self, allowed: bool) -> Self {
        self.network = allowed;
        self
    }

    pub fn writable_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.writable.push(dir.into());
        self
    }

    pub fn max_processes(mut self, n: u32) -> Self {
        self.max_processes = n;
        self
    }

    /// Directories (and device files) the command may write beneath. Only existing paths are
    /// returned, canonicalized, so a rule never targets a symlink's name.
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        let mut roots: Vec<PathBuf> = Vec::new();
        let mut push = |p: &Path| {
            // Landlock opens its rules' paths following links: only a root whose remembered
            // path still has no link on the way gets one.
            if let Some(c) = resolved_once(p)
                && crate::untrusted_fs::has_no_link_on_the_way(&c)
                && !roots.contains(&c)
            {
                roots.push(c);
            }
        };
        for dev in WRITABLE_DEVICES {
            push(Path::new(dev));
        }
        push(Path::new("/tmp"));
        push(Path::new("/var/tmp"));
        push(Path::new("/dev/shm"));
        if let Some(t) = std::env::var_os("TMPDIR") {
            push(Path::new(&t));
        }
        if self.mode == SandboxMode::WorkspaceWrite {
            push(&self.workspace);
            for w in &self.writable {
                push(w);
            }
        }
        roots
    }

    /// Whether this policy forbids writing `path` (absolute): nothing is forbidden with the
    /// sandbox off; otherwise a path outside every writable root, a protected one (existing or
    /// not), or one inside a `.baton` folder or a nested repository's `.git` is. A path that
    /// does not exist yet is judged by its nearest existing parent.
    pub fn denies_write(&self, path: &Path) -> bool {
        self.write_rules().denies(path)
    }

    /// The write rules of this policy as the disk is now: the one value the binds, Landlock
    /// and the file tools read (see `write_rules`).
    pub fn write_rules(&self) -> super::write_rules::WriteRules {
        super::write_rules::WriteRules::of(self)
    }

    /// Existing paths inside writable roots that commands may not write (bound read-only,
    /// files and directories): what git executes or trusts (config, hooks, commondir, info/,
    /// submodule and worktree gitdirs, the gitdir a `.git` file or symlink names, a
    /// `core.hooksPath` inside a writable root) and `.baton/` wherever a later session would
    /// read it. See `git_guard`.
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        super::git_guard::protection(self).read_only
    }

    /// Directories bound onto themselves before the read-only binds (parents first): a mount
    /// point cannot be renamed, so a gitdir can't be moved aside and replaced by a copy.
    pub fn pinned_git_dirs(&self) -> Vec<PathBuf> {
        super::git_guard::protection(self).pinned
    }
}

/// Character devices every command may write to (writes there change nothing on disk).
pub const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/random",
    "/dev/urandom",
];

/// The path as this process first resolved it ([`crate::untrusted_fs::resolved_once`]).
pub use crate::untrusted_fs::resolved_once;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_makes_only_temp_and_devices_writable() {
        let ws = tempfile::tempdir().unwrap();
        let p = SandboxPolicy::new(SandboxMode::ReadOnly, ws.path());
        let roots = p.writable_roots();
        assert!(roots.contains(&PathBuf::from("/dev/null")));
        assert!(roots.contains(&Path::new("/tmp").canonicalize().unwrap()));
        let ws_real = ws.path().canonicalize().unwrap();
        // The temp dir itself lives under /tmp here; what matters is that the workspace
        // is not a root of its own.
        assert!(!roots.contains(&ws_real));
        assert!(p.protected_paths().is_empty());
    }

    #[test]
    fn workspace_write_protects_git_hooks_and_config() {
        let ws = tempfile::tempdir().unwrap();
        let ws_real = ws.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws_real.join(".git/hooks")).unwrap();
        std::fs::write(ws_real.join(".git/config"), "").unwrap();
        let p = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws_real);
        assert!(p.writable_roots().contains(&ws_real));
        assert_eq!(
            p.protected_paths(),
            vec![ws_real.join(".git/config"), ws_real.join(".git/hooks")]
        );
        assert_eq!(p.pinned_git_dirs(), vec![ws_real.join(".git")]);
    }

    #[test]
    fn a_gitdir_pointer_file_is_protected_itself() {
        let ws = tempfile::tempdir().unwrap();
        let ws_real = ws.path().canonicalize().unwrap();
        std::fs::write(ws_real.join(".git"), "gitdir: /elsewhere\n").unwrap();
        let p = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws_real);
        assert_eq!(p.protected_paths(), vec![ws_real.join(".git")]);
        assert!(p.pinned_git_dirs().is_empty());
    }

    #[test]
    fn policies_round_trip_as_json() {
        let p = SandboxPolicy::new(SandboxMode::WorkspaceWrite, "/ws")
            .network(true)
            .writable_dir("/cache");
        let back: SandboxPolicy =
            serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }
}
