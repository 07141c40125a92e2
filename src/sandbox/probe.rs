//! What this machine's kernel can enforce, for `baton doctor` and for the refusal message.
//! The probe runs a real sandboxed `true` in a throwaway workspace with a `.git`, so what it
//! reports is what commands will get.

use std::process::Stdio;

use serde::Serialize;

use super::launch::Session;
use super::policy::{Backend, SandboxPolicy};
use super::{SandboxError, bwrap, fs_rules, sandboxed_command};
use crate::protocol::SandboxMode;

/// The sandbox features available here.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SandboxSupport {
    /// The backend probed (`bubblewrap`, or the named weaker `landlock`).
    pub backend: String,
    /// Where bubblewrap is, when found.
    pub bwrap: Option<String>,
    /// How the memory bound is enforced.
    pub memory_bound: String,
    /// Landlock ABI version (0 = none).
    pub landlock_abi: i64,
    /// Landlock TCP rules (ABI ≥ 4): a second network layer under seccomp.
    pub landlock_network: bool,
    /// Signal and abstract-socket scoping (ABI ≥ 6).
    pub landlock_scopes: bool,
    /// seccomp filters are available.
    pub seccomp: bool,
    /// How the process count is bounded (`pids cgroup`, `RLIMIT_NPROC`, or why not).
    pub process_bound: String,
    /// `workspace-write` commands ran with read-only git hooks/config.
    pub git_protection: bool,
    /// Commands can run sandboxed. When false, `reason` says why and they are refused.
    pub enforceable: bool,
    pub reason: Option<String>,
}

impl SandboxSupport {
    /// Lines for `baton doctor`.
    pub fn report(&self) -> Vec<String> {
        let yes = |b: bool| if b { "yes" } else { "no" };
        let mut lines = vec![
            format!(
                "sandbox: {}",
                match (self.enforceable, self.backend.as_str()) {
                    (true, "bubblewrap") =>
                        "enforced (bubblewrap namespaces + Landlock + seccomp + no_new_privs)",
                    (true, _) =>
                        "WEAKER MODE (landlock backend: Landlock + seccomp only; the terminal, \
                         sockets, other processes, the home's secrets and outside files' metadata \
                         are not isolated)",
                    (false, _) => "NOT AVAILABLE: commands are refused unless --sandbox off",
                }
            ),
            format!("  backend: {}", self.backend),
            format!(
                "  bubblewrap: {}",
                self.bwrap
                    .as_deref()
                    .unwrap_or("not found (install bubblewrap)")
            ),
            format!("  landlock ABI: {}", self.landlock_abi),
            format!("  landlock TCP rules: {}", yes(self.landlock_network)),
            format!("  landlock signal scoping: {}", yes(self.landlock_scopes)),
            format!("  seccomp: {}", yes(self.seccomp)),
            format!("  process bound: {}", self.process_bound),
            format!("  memory bound: {}", self.memory_bound),
            format!(
                "  read-only .git/hooks and .git/config: {}",
                yes(self.git_protection)
            ),
        ];
        if let Some(r) = &self.reason {
            lines.push(format!("  reason: {r}"));
        }
        lines
    }
}

/// Probes the default (bubblewrap) backend by running sandboxed `true` (read-only, then
/// workspace-write with a git dir).
pub fn probe() -> SandboxSupport {
    probe_backend(Backend::Bubblewrap)
}

/// Probes `backend` the same way.
pub fn probe_backend(backend: Backend) -> SandboxSupport {
    let abi = fs_rules::kernel_abi();
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    let mut support = SandboxSupport {
        backend: backend.as_str().into(),
        bwrap: bwrap::bwrap_path().ok().map(|p| p.display().to_string()),
        memory_bound: "unknown".into(),
        landlock_abi: abi,
        landlock_network: abi >= 4,
        landlock_scopes: abi >= 6,
        seccomp,
        process_bound: "unknown".into(),
        git_protection: false,
        enforceable: false,
        reason: None,
    };
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => {
            support.reason = Some(format!("no temp dir for the probe: {e}"));
            return support;
        }
    };
    let ws = dir.path().join("ws");
    if let Err(e) = std::fs::create_dir_all(ws.join(".git/hooks")) {
        support.reason = Some(format!("creating {}: {e}", ws.display()));
        return support;
    }
    let _ = std::fs::write(ws.join(".git/config"), b"");
    if backend == Backend::Bubblewrap
        && let Err(e) = bwrap::check_namespaces()
    {
        support.reason = Some(e.to_string());
        return support;
    }
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let policy = SandboxPolicy::new(mode, &ws).backend(backend);
        match run_true(&policy) {
            Ok((bound, memory)) => {
                support.process_bound = bound;
                support.memory_bound = memory;
                if mode == SandboxMode::WorkspaceWrite {
                    support.git_protection = true;
                }
            }
            Err(e) => {
                support.reason = Some(format!("{mode}: {e}"));
                return support;
            }
        }
    }
    support.enforceable = true;
    support
}

/// Why the probe's sandboxed `true` did not run cleanly.
#[derive(Debug, thiserror::Error)]
enum ProbeFailure {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("sandboxed `true` failed to start: {0}")]
    Start(#[source] std::io::Error),
    #[error("sandboxed `true` exited with {0}: {1}")]
    Exit(std::process::ExitStatus, String),
}

/// Runs sandboxed `true` under `policy`; on success, says how the process count and the
/// memory were bounded.
fn run_true(policy: &SandboxPolicy) -> Result<(String, String), ProbeFailure> {
    let argv = ["true".to_string()];
    let (mut cmd, prepared) = sandboxed_command(policy, &argv, Session::NewGroup)?;
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(ProbeFailure::Start)?;
    if !out.status.success() {
        return Err(ProbeFailure::Exit(
            out.status,
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    let memory = prepared.memory_bound().unwrap_or_else(|| "none".into());
    let bound = if let Some(cg) = prepared.cgroup() {
        format!(
            "pids cgroup ({})",
            cg.dir()
                .parent()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        )
    } else if let Some(why) = prepared.unenforced_bound() {
        format!("not enforced: {why}")
    } else {
        "RLIMIT_NPROC".into()
    };
    Ok((bound, memory))
}
