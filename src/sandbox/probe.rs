//! What this machine's kernel can enforce, for `baton doctor` and for the refusal message.
//! The probe runs a real sandboxed `true` in a throwaway workspace with a `.git`, so what it
//! reports is what commands will get.

use std::process::Stdio;

use serde::Serialize;

use super::launch::Session;
use super::policy::SandboxPolicy;
use super::{SandboxError, fs_rules, sandboxed_command};
use crate::protocol::SandboxMode;

/// The sandbox features available here.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SandboxSupport {
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
                if self.enforceable {
                    "enforced (Landlock + seccomp + no_new_privs)"
                } else {
                    "NOT AVAILABLE: commands are refused unless --sandbox off"
                }
            ),
            format!("  landlock ABI: {}", self.landlock_abi),
            format!("  landlock TCP rules: {}", yes(self.landlock_network)),
            format!("  landlock signal scoping: {}", yes(self.landlock_scopes)),
            format!("  seccomp: {}", yes(self.seccomp)),
            format!("  process bound: {}", self.process_bound),
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

/// Probes the kernel by running sandboxed `true` (read-only, then workspace-write with a git dir).
pub fn probe() -> SandboxSupport {
    let abi = fs_rules::kernel_abi();
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    let mut support = SandboxSupport {
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
    for mode in [SandboxMode::ReadOnly, SandboxMode::WorkspaceWrite] {
        let policy = SandboxPolicy::new(mode, &ws);
        match run_true(&policy) {
            Ok(bound) => {
                support.process_bound = bound;
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
    #[error("sandboxed `true` exited with {0}")]
    Exit(std::process::ExitStatus),
}

/// Runs sandboxed `true` under `policy`; on success, says how the process count was bounded.
fn run_true(policy: &SandboxPolicy) -> Result<String, ProbeFailure> {
    let argv = ["true".to_string()];
    let (mut cmd, prepared) = sandboxed_command(policy, &argv, Session::NewGroup)?;
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(ProbeFailure::Start)?;
    if !status.success() {
        return Err(ProbeFailure::Exit(status));
    }
    Ok(if let Some(cg) = prepared.cgroup() {
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
    })
}
