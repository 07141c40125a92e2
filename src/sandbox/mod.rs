//! The Linux sandbox every command runs in: its own namespaces built by bubblewrap (`bwrap`:
//! the host read-only, only the writable roots writable, own /dev, /proc, /tmp, secrets and
//! runtime sockets hidden, no capabilities), and inside it baton's helper (`inner`) applies
//! Landlock, seccomp and no_new_privs; pids and memory cgroups (or rlimits) bound the command.
//! `git_guard` decides what git executes or trusts (and `.baton/`), bound read-only, and audits
//! what a command planted where nothing could be pinned.
//! The older Landlock + seccomp mode in the user's own namespaces stays as a weaker backend
//! the user must name. See docs/sandbox.md for the design and the threat model.
//!
//! ```no_run
//! use baton::protocol::SandboxMode;
//! use baton::sandbox::{SandboxPolicy, Session, sandboxed_command};
//! let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, "/path/to/workspace");
//! let (mut cmd, _guard) =
//!     sandboxed_command(&policy, &["ls".into()], Session::NewGroup).expect("sandbox");
//! let status = cmd.status();
//! ```

pub mod bwrap;
pub mod env;
pub(crate) mod fs_rules;
pub mod git_guard;
pub mod inner;
pub(crate) mod launch;
pub(crate) mod memory;
pub(crate) mod pidns;
pub(crate) mod pids;
pub(crate) mod policy;
pub mod probe;
pub mod syscall_filter;
mod tree_index;
pub mod visibility;
mod watched;
pub mod write_rules;

use std::process::Command;
use std::sync::Arc;

pub use env::EnvPolicy;
pub use fs_rules::confine_thread;
pub use launch::{PreparedSandbox, Session, StartGate};
pub use policy::{Backend, SandboxPolicy};
pub use watched::{GitWatch, watched_command, watched_command_admitted};
pub use write_rules::WriteRules;

use crate::protocol::SandboxMode;
pub use probe::{SandboxSupport, probe};

/// Why a command could not be sandboxed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// The kernel cannot enforce the policy: commands are refused (only `--sandbox off` runs).
    #[error(
        "the sandbox cannot be enforced on this system: {0}; refusing to run commands (use `--sandbox off` to run them unsandboxed, at your own risk)"
    )]
    Unsupported(String),
    /// Preparing the sandbox failed (a path, a filter, a cgroup).
    #[error("preparing the sandbox failed: {0}")]
    Setup(String),
    /// The caller's check, run beside the preparation, refused the command; the caller
    /// knows why.
    #[error("refused before it started")]
    NotAdmitted,
    /// A file of the sandbox's own machinery (`/proc`, a cgroup) could not be used; `action`
    /// is the verb ("reading", "creating", …).
    #[error("{action} {}: {source}", .path.display())]
    Io {
        action: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// This process's cgroup may not create pids-limited children.
    #[error(
        "the pids controller is not delegated to {} (cgroup.subtree_control)",
        .cgroup.display()
    )]
    PidsNotDelegated { cgroup: std::path::PathBuf },
    /// Neither a cgroup v1 pids hierarchy nor a v2 unified one is mounted.
    #[error("no pids cgroup hierarchy is mounted")]
    NoPidsHierarchy,
}

/// A `Command` for `argv` that runs under `policy`, and the guard that must outlive the
/// command's processes (it owns the pids cgroup; dropping it kills what is left in there).
pub fn sandboxed_command(
    policy: &SandboxPolicy,
    argv: &[String],
    session: Session,
) -> Result<(Command, Arc<PreparedSandbox>), SandboxError> {
    let (prepared, mut cmd) = prepared_command(policy, argv, session, || true, |_| Ok(()))?;
    let prepared = Arc::new(prepared);
    prepared.install(&mut cmd);
    Ok((cmd, prepared))
}

pub(crate) fn prepared_command(
    policy: &SandboxPolicy,
    argv: &[String],
    session: Session,
    admitted: impl FnOnce() -> bool + Send,
    before_command: impl FnOnce(&mut PreparedSandbox) -> Result<(), SandboxError>,
) -> Result<(PreparedSandbox, Command), SandboxError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(SandboxError::Setup("no command given".into()));
    };
    let mut prepared = PreparedSandbox::prepare_admitted(policy, session, admitted)?;
    before_command(&mut prepared)?;
    let mut cmd = prepared.command(program, args)?;
    set_sandbox_env(&mut cmd, policy);
    Ok((prepared, cmd))
}

/// Environment markers commands (and their test suites) can read.
pub fn set_sandbox_env(cmd: &mut Command, policy: &SandboxPolicy) {
    cmd.env("BATON_SANDBOX", policy.mode.as_str());
    if policy.mode != SandboxMode::Off {
        cmd.env("BATON_SANDBOX_BACKEND", policy.backend.as_str());
    }
    if policy.mode != SandboxMode::Off && !policy.network {
        cmd.env("BATON_SANDBOX_NETWORK_DISABLED", "1");
    } else {
        cmd.env_remove("BATON_SANDBOX_NETWORK_DISABLED");
    }
}
