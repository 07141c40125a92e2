//! Turns a task's Dockerfile into a local setup script when it only needs what this machine has.
//!
//! TB tasks build on generic Debian/Ubuntu/Python images and mostly `COPY` fixtures into `/app`
//! (or a new top-level folder such as `/workspace`) and `RUN` a few commands. Those run as a
//! setup script inside the trial sandbox, with package installs dropped when the packages are
//! already installed on the host. Variables follow Dockerfile semantics (`ARG`, `ENV`, `$VAR`,
//! `${VAR:-default}` …). Anything else (a bespoke base image, multi-stage builds, packages
//! missing here) makes the task skipped, with the reason.
//!
//! [`translate`] reads it a logical line at a time (`words` splits and expands them) and turns
//! each instruction into a step of the script (`translate`, `copy`, `run`); `paths` says where
//! what it writes lands in the trial, `installs` which package installs this machine satisfies
//! (`host_packages`), `image` which base images it stands in for.

mod copy;
mod host_packages;
mod image;
mod installs;
mod paths;
mod problem;
mod run;
mod translate;
mod words;

use std::collections::BTreeMap;
use std::path::Path;

use host_packages::host_has_package;
use translate::translate_inner;

pub use paths::SystemMount;
pub use problem::DockerfileError;

/// A Dockerfile rewritten as a setup script.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalEnv {
    pub script: String,
    pub workdir: String,
    pub env: BTreeMap<String, String>,
    /// Top-level folders besides `/app`, `/root` and `/tmp` that the Dockerfile writes to
    /// (`/workspace`): each is a writable folder of the trial.
    pub extra_roots: Vec<String>,
    /// Paths in system folders (`/opt/tool`, `/etc/app.conf`) that `COPY`/`ADD`/`WORKDIR`
    /// write: each is a folder or file of the trial mounted there, over the host's read-only
    /// system folder, in every phase.
    pub system_mounts: Vec<SystemMount>,
    /// The last `USER` (`name`, `uid`, `name:group`): who the agent and verifier run as when
    /// the task names nobody; `None` for root.
    pub user: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DockerPlan {
    Local(LocalEnv),
    /// The task needs Docker (or the network, or packages this machine lacks).
    Unsupported(DockerfileError),
}

/// Whether the Dockerfile `text` may hold a `RUN --mount` step: what older container
/// builders let reach the host's files. Not a parse (round 34: a `# escape=` directive's
/// backtick, an empty line inside a continuation, passed one): any `--mount` once comment and
/// empty lines are dropped and every continuation, with `\` or a backtick, is joined. A
/// `--mount` in a comment or a string counts too: refusing a build for one is the safe
/// mistake.
pub fn uses_run_mount(text: &str) -> bool {
    let kept: Vec<&str> = text
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect();
    let mut joined = kept.join("\n");
    for escape in ['\\', '`'] {
        let mut out = String::with_capacity(joined.len());
        let mut rest = joined.as_str();
        while let Some(at) = rest.find(escape) {
            out.push_str(&rest[..at]);
            let after = &rest[at + escape.len_utf8()..];
            let blanks = after.len() - after.trim_start_matches([' ', '\t']).len();
            match after[blanks..].strip_prefix('\n') {
                Some(next) => rest = next,
                None => {
                    out.push(escape);
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        joined = out;
    }
    joined.to_ascii_lowercase().contains("--mount")
}

/// Translates `text`, whose build context is `context` (visible at `/environment` while the
/// script runs). Installed packages are looked up once per process.
pub fn translate(text: &str, network: bool, context: &Path) -> DockerPlan {
    match translate_inner(text, network, Some(context), &host_has_package) {
        Ok(local) => DockerPlan::Local(local),
        Err(reason) => DockerPlan::Unsupported(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_steps_that_mount_are_found_in_every_spelling() {
        assert!(uses_run_mount(
            "FROM x\nRUN --mount=type=cache,target=/c pip install y\n"
        ));
        assert!(uses_run_mount(
            "FROM x\nrun --network=none \\\n  --mount=from=a,source=/,target=/h true\n"
        ));
        // Round 34: a backtick continuation under `# escape=`, an empty line or a comment
        // inside a continuation, a flag split by one.
        assert!(uses_run_mount(
            "# escape=`\nFROM x\nRUN `\n  --mount=from=a,source=/,target=/h true\n"
        ));
        assert!(uses_run_mount("FROM x\nRUN \\\n\n--mount=from=a true\n"));
        assert!(uses_run_mount("FROM x\nRUN --mou\\\n# c\nnt=from=a true\n"));
        assert!(uses_run_mount("FROM x\r\nRUN --MOUNT=from=a true\r\n"));
        assert!(!uses_run_mount(
            "FROM x\n# RUN --mount=type=bind true\nCOPY . /app\nRUN echo ok\n"
        ));
    }
}
