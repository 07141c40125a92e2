//! The folders a policy lets a command write, and which of them hold a project or `.baton/`.

use std::path::{Path, PathBuf};

use crate::protocol::SandboxMode;
use crate::sandbox::policy::SandboxPolicy;

/// The writable folders that hold a project (canonical, existing): under `workspace-write`
/// the workspace and the extra writable directories; under `read-only` the workspace when it
/// lies in a temp root anyway (a checkout in `/tmp` is writable through `/tmp`).
pub(super) fn project_roots(policy: &SandboxPolicy, writable: &[PathBuf]) -> Vec<PathBuf> {
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
pub(super) fn writable_dirs(policy: &SandboxPolicy) -> Vec<PathBuf> {
    policy
        .writable_roots()
        .into_iter()
        .filter(|p| p.is_dir() && !p.starts_with("/dev/pts"))
        .collect()
}

pub(super) fn inside_any(p: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| p.starts_with(r))
}

/// Folders whose `.baton/` a command could write and a later session would read as project
/// config: every project root, every writable directory, and every folder above the workspace
/// that lies inside one (project config is looked up in the workspace's parents too).
pub(super) fn baton_homes(policy: &SandboxPolicy, writable: &[PathBuf]) -> Vec<PathBuf> {
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
pub(super) fn writable_ancestors(policy: &SandboxPolicy, writable: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(ws) = policy.workspace.canonicalize() else {
        return Vec::new();
    };
    ws.ancestors()
        .skip(1)
        .filter(|a| inside_any(a, writable))
        .map(Path::to_path_buf)
        .collect()
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
