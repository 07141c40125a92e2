//! What every phase of a trial shares: time limits, log files, the process run, its errors.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::TrialResult;
use crate::eval::isolation::{Isolation, TrialUser};
use crate::eval::process::{self, Exit, Outcome};

/// The agent's limit when the task sets none (Harbor's default): a week, which a run never
/// reaches but which keeps deadlines representable.
pub(super) const NO_AGENT_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

pub(super) fn scaled(d: Duration, multiplier: f64) -> Duration {
    Duration::from_secs_f64((d.as_secs_f64() * multiplier).max(0.001))
}

pub(super) fn log_files(path: &Path) -> std::io::Result<(File, File)> {
    let f = File::create(path)?;
    let g = f.try_clone()?;
    Ok((f, g))
}

/// Runs the phase command `command` makes with its output into the files `logs` opens (stderr
/// into `stderr`), once more (twice at most) when it never started because bwrap lost the
/// cover of a host socket that went away meanwhile ([`Isolation::lost_a_socket_cover`]).
pub(super) fn run_phase(
    iso: &Isolation,
    command: impl Fn() -> std::process::Command,
    logs: impl Fn() -> std::io::Result<(File, File)>,
    stderr: &Path,
    limit: Duration,
    cancel: &std::sync::atomic::AtomicBool,
) -> std::io::Result<Outcome> {
    let mut tries = 0;
    loop {
        let (out, err) = logs()?;
        let outcome = process::run(command(), limit, out, err, cancel);
        tries += 1;
        let lost = outcome.exit == Exit::Code(1)
            && tries < 3
            && std::fs::read(stderr).is_ok_and(|e| iso.lost_a_socket_cover(&e));
        if !lost {
            return Ok(outcome);
        }
    }
}

pub(super) type PhaseError = (&'static str, String);

/// What one agent-then-verifier pass runs: the whole task, or one step of a multi-step task.
pub(super) struct Pass<'a> {
    pub(super) instruction: &'a str,
    pub(super) agent_limit: Duration,
    /// The oracle's folder for this pass.
    pub(super) solution_dir: Option<&'a Path>,
    /// Folders copied to `/tests` in order (later ones over earlier ones).
    pub(super) tests: Vec<PathBuf>,
    pub(super) verifier_env: BTreeMap<String, String>,
    pub(super) verifier_timeout: Duration,
    pub(super) agent_user: Option<&'a TrialUser>,
    pub(super) verifier_user: Option<&'a TrialUser>,
    /// Under a container runtime: the image the trial's container runs.
    pub(super) image: Option<&'a str>,
    /// Under a container runtime, for a step of a multi-step task: its `workdir/` files,
    /// copied into the working dir (and its `setup.sh` run there) in the container before
    /// the agent, and the image the container's files are saved as after the verifier, which
    /// the next step starts from.
    pub(super) step: Option<ContainerStep<'a>>,
}

/// What a step of a multi-step task adds to a pass in a runtime's container.
#[derive(Clone, Copy)]
pub(super) struct ContainerStep<'a> {
    pub(super) files: Option<&'a Path>,
    pub(super) save_as: &'a str,
}

impl<'a> Pass<'a> {
    /// The one pass of a single-step task, its agent and verifier run as the users given (and,
    /// under a container runtime, in `image`).
    pub(super) fn whole_task(
        task: &'a crate::eval::task::Task,
        timeout_multiplier: f64,
        users: (Option<&'a TrialUser>, Option<&'a TrialUser>),
        image: Option<&'a str>,
    ) -> Pass<'a> {
        Pass {
            instruction: &task.instruction,
            agent_limit: task
                .agent_timeout
                .map_or(NO_AGENT_LIMIT, |t| scaled(t, timeout_multiplier)),
            solution_dir: task.solution_dir.as_deref(),
            tests: task.tests_dir.iter().cloned().collect(),
            verifier_env: task.verifier_env.clone(),
            verifier_timeout: task.verifier_timeout,
            agent_user: users.0,
            verifier_user: users.1,
            image,
            step: None,
        }
    }
}

/// The job was interrupted while this trial ran: not scored.
pub(super) fn cancelled(r: &mut TrialResult) -> PhaseError {
    infra(
        r,
        "CancelledError",
        "the job was interrupted (SIGINT or SIGTERM) while this trial ran".into(),
    )
}

pub(super) fn infra(r: &mut TrialResult, kind: &'static str, message: String) -> PhaseError {
    r.infrastructure_error = true;
    (kind, message)
}
