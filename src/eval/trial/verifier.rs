//! The verifier's phase: the tests copied in only now, the test run, and the reward it gives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::files::rewrite_text_files;
use super::phase::{Pass, PhaseError, cancelled, infra, run_phase, scaled};
use super::{PhaseTiming, TrialResult, TrialSettings};
use crate::eval::container::{Container, Job};
use crate::eval::fsutil::{
    MAX_TRIAL_OUTPUT, copy_task_file, copy_tree, create_trial_output, empty_trial_folder,
    read_trial_output, read_trial_tail,
};
use crate::eval::isolation::{Phase, TrialPaths};
use crate::eval::process::Exit;
use crate::eval::reward;
use crate::eval::task::{Task, TaskFormat};

/// The verifier of one pass: in the agent's sandbox when there is one (`container`, ended
/// here before anything the trial wrote is read), else in a sandbox of its own.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_verifier(
    task: &Task,
    pass: &Pass,
    paths: &TrialPaths,
    settings: &TrialSettings,
    task_env: &BTreeMap<String, String>,
    container: Option<Container>,
    process_time: &mut Duration,
    r: &mut TrialResult,
) -> Result<(), PhaseError> {
    let iso = &settings.isolation;
    // A sandbox whose supervisor the agent's commands ended is gone, with their processes.
    let mut container = container;
    if container.as_mut().is_some_and(|c| !c.alive()) {
        container = None;
    }
    if container.is_none() && iso.kind.is_runtime() {
        return Err(infra(
            r,
            "VerifierSetupError",
            "the trial's container ended before its verifier could run (its commands can end its first process)".into(),
        ));
    }
    stage_tests(task, pass, paths, container.as_ref(), r)?;
    rewrite_text_files(iso, paths, None, &paths.tests);
    let mut env = task_env.clone();
    env.extend(pass.verifier_env.clone());
    let phase = Phase {
        paths,
        workdir: &task.environment.workdir,
        network: task.allow_internet,
        tests: true,
        solution: false,
        setup: false,
        build_context: None,
        env,
        gateway: None,
        user: pass.verifier_user,
        control: None,
    };
    let test_args = [format!("/tests/{}", task.test_entry)];
    let out_path = paths.verifier_logs.join("test-stdout.txt");
    let err_path = paths.verifier_logs.join("test-stderr.txt");
    let dir = &paths.verifier_logs;
    // The agent could write here (a reward of its own): the verifier starts from nothing.
    if let Err(e) = empty_trial_folder(dir) {
        return Err(infra(
            r,
            "VerifierSetupError",
            format!("cannot empty {}: {e}", dir.display()),
        ));
    }
    let logs = || {
        Ok((
            create_trial_output(dir, &out_path)?,
            create_trial_output(dir, &err_path)?,
        ))
    };
    let setup_error = |r: &mut TrialResult, e: std::io::Error| {
        infra(
            r,
            "VerifierSetupError",
            format!("cannot create the verifier's logs: {e}"),
        )
    };
    if let Err(e) = logs() {
        return Err(setup_error(r, e));
    }
    let limit = scaled(pass.verifier_timeout, settings.timeout_multiplier);
    let outcome = match container.as_mut() {
        Some(c) => {
            let job_env = iso.sandbox_env(pass.verifier_user, &phase.env);
            let prelude = c.tests_prelude();
            let job = Job {
                user: pass.verifier_user.map(|u| u.name.as_str()),
                workdir: &task.environment.workdir,
                env: &job_env,
                prelude: &prelude,
                program: "bash",
                args: &[format!("/tests/{}", task.test_entry)],
                stdout: "/logs/verifier/test-stdout.txt",
                stderr: "/logs/verifier/test-stderr.txt",
            };
            c.run(&job, limit, settings.cancel)
        }
        None => match run_phase(
            iso,
            || iso.command(&phase, "bash", &test_args),
            logs,
            &err_path,
            limit,
            settings.cancel,
        ) {
            Ok(outcome) => outcome,
            Err(e) => return Err(setup_error(r, e)),
        },
    };
    if let Some(c) = container.as_mut().filter(|_| iso.kind.is_runtime()) {
        super::artifacts::copy_artifacts_out(c, &task.artifacts, paths, settings.cancel);
    }
    // The next step of a multi-step trial starts from the files this one left.
    if let (Some(c), Some(step)) = (container.as_ref(), pass.step)
        && let Err(e) = c.commit(step.save_as)
    {
        tracing::warn!("cannot save the step's container for the next step: {e}");
    }
    // The trial ends here: whatever it left running is gone before its results are read.
    drop(container);
    *process_time += outcome.duration;
    r.timings.verifier = Some(PhaseTiming::from(&outcome));
    match &outcome.exit {
        Exit::TimedOut => {
            r.reward = Some(0.0);
            return Err((
                "VerifierTimeoutError",
                format!(
                    "the verifier did not finish within {:.0} s",
                    limit.as_secs_f64()
                ),
            ));
        }
        Exit::SpawnFailed(m) => return Err(infra(r, "VerifierSpawnError", m.clone())),
        Exit::Cancelled => return Err(cancelled(r)),
        _ => {}
    }
    score(task, paths, &outcome.exit, &out_path, &err_path, r)
}

/// Copies the pass's tests in for the verifier. With the agent's processes still running, the
/// tests are staged where the trial cannot write and copied into /tests from inside it: a link
/// a process plants in /tests while the runner copies must resolve in the trial, never on the
/// host.
fn stage_tests(
    task: &Task,
    pass: &Pass,
    paths: &TrialPaths,
    container: Option<&Container>,
    r: &mut TrialResult,
) -> Result<(), PhaseError> {
    let tests_dest = match container {
        Some(c) => c.staging().join("tests"),
        None => paths.tests.clone(),
    };
    std::fs::create_dir_all(&tests_dest).map_err(|e| {
        infra(
            r,
            "VerifierSetupError",
            format!("cannot create the tests folder: {e}"),
        )
    })?;
    for dir in &pass.tests {
        copy_tree(dir, &tests_dest, &[])
            .map_err(|e| infra(r, "VerifierSetupError", e.to_string()))?;
    }
    for file in &task.tests_extra_files {
        let name = file.file_name().map(PathBuf::from).unwrap_or_default();
        copy_task_file(&task.dir, file, &tests_dest.join(name)).map_err(|e| {
            infra(
                r,
                "VerifierSetupError",
                format!("{}: cannot copy: {e}", file.display()),
            )
        })?;
    }
    Ok(())
}

/// Reads the verifier's reward into the record: a verifier that scored 0 without running a
/// test because its test runner could not be set up judged nothing, and is an error.
fn score(
    task: &Task,
    paths: &TrialPaths,
    exit: &Exit,
    out_path: &Path,
    err_path: &Path,
    r: &mut TrialResult,
) -> Result<(), PhaseError> {
    let logs = &paths.verifier_logs;
    let output = read_trial_output(logs, out_path, MAX_TRIAL_OUTPUT).unwrap_or_default();
    match reward::read(
        &paths.verifier_logs,
        &output,
        task.format == TaskFormat::Tb1,
    ) {
        Ok(v) if v.reward == 0.0 && !tests_ran(&v, &output, &paths.verifier_logs) => {
            let stderr = read_trial_tail(logs, err_path, 256 << 10);
            match bootstrap_failure(&output, &stderr) {
                // Its test runner never started: no verdict on the agent's work.
                Some(sign) => Err(infra(
                    r,
                    "VerifierBootstrapError",
                    format!(
                        "the verifier scored 0 without running its tests: its test runner could not be set up (\"{sign}\"); see {}",
                        err_path.display()
                    ),
                )),
                None => {
                    record_verdict(r, v);
                    Ok(())
                }
            }
        }
        Ok(v) => {
            record_verdict(r, v);
            Ok(())
        }
        Err(e) => Err(infra(
            r,
            e.exception_type(),
            format!(
                "{} (exit {:?}); see {}",
                e.message(),
                exit,
                out_path.display()
            ),
        )),
    }
}

/// Scores the verifier's verdict (0 when the agent timed out).
fn record_verdict(r: &mut TrialResult, v: reward::Verdict) {
    r.reward = Some(if r.agent_exit.timed_out {
        0.0
    } else {
        v.reward
    });
    r.verifier_rewards = v.rewards;
    r.reward_source = Some(v.source.to_string());
    r.tests = v.tests;
}

/// Whether the verifier got as far as running tests: per-test results, a pytest summary line,
/// or a CTRF / JUnit report in its logs.
fn tests_ran(v: &reward::Verdict, output: &str, logs: &Path) -> bool {
    static SUMMARY: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(?m)^=+ .*\b(passed|failed|errors?|no tests ran|skipped)\b.* in [0-9.]+s",
        )
        .ok()
    });
    !v.tests.is_empty()
        || SUMMARY.as_ref().is_some_and(|re| re.is_match(output))
        || ["ctrf.json", "junit.xml", "report.xml"].iter().any(|f| {
            // The file itself, never what a link the trial left points at.
            std::fs::symlink_metadata(logs.join(f)).is_ok_and(|m| m.is_file())
        })
}

/// What test runners print when they cannot be set up (uv/uvx fetching a Python or a package,
/// pip without an index, the runner missing): a verifier that printed one of these and ran no
/// test judged nothing of the agent's work. Network errors alone are not on the list: a
/// verifier's failed `curl` of an installer is common and harmless when the host has the tool.
const BOOTSTRAP_FAILURES: &[&str] = &[
    "uvx: command not found",
    "uv: command not found",
    "pytest: command not found",
    "python3: command not found",
    "pip3: command not found",
    "pip: command not found",
    "No module named pytest",
    "No module named 'pytest'",
    "No interpreter found for Python",
    "No download found for request",
    "Failed to download",
    "Failed to fetch",
    "No matching distribution found",
    "Could not find a version that satisfies the requirement",
];

fn bootstrap_failure(stdout: &str, stderr: &str) -> Option<&'static str> {
    BOOTSTRAP_FAILURES
        .iter()
        .copied()
        .find(|s| stdout.contains(s) || stderr.contains(s))
}
