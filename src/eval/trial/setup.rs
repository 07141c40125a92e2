//! The environment's setup script (the task's own or its Dockerfile's), run before the agent.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::time::Duration;

use super::phase::{PhaseError, cancelled, infra, log_files, run_phase, scaled};
use super::{PhaseTiming, TrialResult, TrialSettings};
use crate::eval::fsutil::remove_tree;
use crate::eval::isolation::{IsolationKind, Phase, TrialPaths};
use crate::eval::process::Exit;
use crate::eval::task::Task;

/// Runs `script` as `/setup/setup.sh` in the sandbox, under the task's setup timeout; a
/// failure names the Dockerfile line that failed, when the script says which.
pub(super) fn run_setup_script(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    script: &str,
    env: &BTreeMap<String, String>,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    let iso = &settings.isolation;
    let ctx = task.environment.build_context.as_deref();
    std::fs::create_dir_all(&paths.setup)
        .and_then(|_| {
            std::fs::write(
                paths.setup.join("setup.sh"),
                iso.rewrite(paths, ctx, script),
            )
        })
        .map_err(|e| {
            infra(
                r,
                "EnvironmentSetupError",
                format!("cannot write the setup script: {e}"),
            )
        })?;
    let phase = Phase {
        paths,
        workdir: "/app",
        network: task.allow_internet,
        tests: false,
        solution: false,
        setup: true,
        build_context: ctx,
        env: env.clone(),
        gateway: None,
        user: None,
        control: None,
    };
    let log = paths.root.join("setup.log");
    let outcome = run_phase(
        iso,
        || iso.command(&phase, "bash", &["/setup/setup.sh".into()]),
        || log_files(&log),
        &log,
        scaled(task.setup_timeout, settings.timeout_multiplier),
        settings.cancel,
    )
    .map_err(|e| {
        infra(
            r,
            "EnvironmentSetupError",
            format!("cannot create setup.log: {e}"),
        )
    })?;
    *process_time += outcome.duration;
    r.timings.environment_setup = Some(PhaseTiming::from(&outcome));
    if outcome.exit == Exit::Cancelled {
        return Err(cancelled(r));
    }
    let _ = remove_tree(&paths.setup);
    if !outcome.exit.success() {
        let why = match &outcome.exit {
            Exit::TimedOut => "timed out".to_string(),
            other => format!("ended with {other:?}"),
        };
        let tail = log_tail(&paths.root.join("setup.log")).unwrap_or_default();
        // The Dockerfile's failing RUN names its line there.
        let failed = failed_run_line(&tail)
            .map(|l| format!(" ({l})"))
            .unwrap_or_default();
        let read_only = match &iso.system_overlay {
            Err(why)
                if iso.kind == IsolationKind::Bwrap && tail.contains("Read-only file system") =>
            {
                format!(
                    "; /usr, /etc and /opt are read-only in these trials ({why}): writable layers need baton eval run as root, or --env podman|docker"
                )
            }
            _ => String::new(),
        };
        return Err(infra(
            r,
            "EnvironmentSetupError",
            format!(
                "the setup script {why}{failed}; see {}{read_only}",
                paths.root.join("setup.log").display()
            ),
        ));
    }
    Ok(())
}

/// The last 64 KiB of a setup log.
fn log_tail(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(log).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(64 << 10))).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The last "the Dockerfile's line N failed" line of a setup log's tail.
fn failed_run_line(tail: &str) -> Option<String> {
    tail.lines()
        .rev()
        .find_map(|l| l.strip_prefix("baton: "))
        .filter(|l| l.starts_with("the Dockerfile's line"))
        .map(|l| l.chars().take(300).collect())
}
