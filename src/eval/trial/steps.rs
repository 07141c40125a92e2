//! The steps of a multi-step task, run in order in the one environment, and their rewards.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::agent::agent_and_verifier;
use super::artifacts::collect_artifacts;
use super::phase::{
    ContainerStep, NO_AGENT_LIMIT, Pass, PhaseError, cancelled, infra, log_files, run_phase, scaled,
};
use super::result::verifier_result;
use super::{
    AgentExit, ExceptionInfo, PhaseTiming, StepRecord, TimingInfo, Timings, TrialResult,
    TrialSettings,
};
use crate::eval::events::Tokens;
use crate::eval::fsutil::{copy_tree, remove_tree};
use crate::eval::isolation::{Phase, TrialPaths, TrialUser};
use crate::eval::process::Exit;
use crate::eval::task::{Step, StepReward, Task};

/// Runs the steps of a multi-step task in order in the one environment, as Harbor's
/// `MultiStepTrial` does: each step's `workdir/` files (and its `setup.sh`), its agent with
/// its own instruction, and its verifier with the task's tests and the step's over them.
/// A step that errors without a reward, or whose rewards are below its `min_reward`, ends
/// the trial. The trial's reward is the steps' mean per key (or the last step's).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_steps(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    env: &BTreeMap<String, String>,
    agent_env: &BTreeMap<String, String>,
    users: &BTreeMap<String, TrialUser>,
    image: Option<&ImageRun>,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    // Under a runtime each step's container starts from the image the step before left.
    let saved: Vec<String> = (0..task.steps.len())
        .map(|i| format!("localhost/baton-step-{}:{}", r.id.replace('-', ""), i + 1))
        .collect();
    let mut records: Vec<StepRecord> = Vec::new();
    let mut first_error: Option<PhaseError> = None;
    let mut agent_started = None;
    let mut agent_finished = None;
    let mut verifier_started = None;
    let mut verifier_finished = None;
    for (i, step) in task.steps.iter().enumerate() {
        let step_root = paths.root.join("steps").join(&step.name);
        let step_paths = TrialPaths {
            agent_logs: step_root.join("agent"),
            verifier_logs: step_root.join("verifier"),
            artifacts: step_root.join("artifacts"),
            ..paths.clone()
        };
        // Each step's verifier sees only its own tests, and the next agent none of them.
        let _ = remove_tree(&paths.tests);
        let mut sr = fresh_step_result(r);
        let in_image = image.map(|im| StepImage {
            start: if i == 0 { &im.tag } else { &saved[i - 1] },
            save_as: &saved[i],
            default_user: im.default_user.as_deref(),
        });
        let outcome = run_step(
            task,
            step,
            &step_paths,
            settings,
            env,
            agent_env,
            users,
            in_image,
            &mut sr,
            process_time,
        );
        let mut artifacts = task.artifacts.clone();
        artifacts.extend(step.artifacts.iter().cloned());
        collect_artifacts(&artifacts, &step_paths);
        if sr.infrastructure_error {
            sr.reward = None;
        }
        let exception_info = outcome.as_ref().err().map(|(kind, message)| ExceptionInfo {
            exception_type: kind.to_string(),
            exception_traceback: message.clone(),
            message: message.clone(),
            occurred_at: Utc::now(),
        });
        if let Err(e) = &outcome {
            first_error.get_or_insert_with(|| e.clone());
        }
        if let Some(a) = &sr.timings.agent_execution {
            agent_started.get_or_insert(a.started_at);
            agent_finished = Some(a.finished_at);
        }
        if let Some(v) = &sr.timings.verifier {
            verifier_started.get_or_insert(v.started_at);
            verifier_finished = Some(v.finished_at);
        }
        let record = step_record(step, &sr, exception_info, step_root);
        add_step_totals(r, &sr);
        let stop = ends_the_trial(step, &record, &sr);
        records.push(record);
        if stop {
            break;
        }
    }
    if let Some(runtime) = image.and(settings.isolation.runtime.as_ref()) {
        for tag in &saved {
            runtime.remove_image(tag);
        }
    }
    let phase = |s: Option<DateTime<Utc>>, f: Option<DateTime<Utc>>| match (s, f) {
        (Some(started_at), Some(finished_at)) => Some(PhaseTiming {
            started_at,
            finished_at,
            duration_sec: (finished_at - started_at).num_milliseconds() as f64 / 1000.0,
        }),
        _ => None,
    };
    r.timings.agent_execution = phase(agent_started, agent_finished);
    r.timings.verifier = phase(verifier_started, verifier_finished);
    let rewards = step_rewards(task.step_reward, &records);
    r.reward = rewards
        .as_ref()
        .and_then(|m| m.get("reward").or_else(|| m.values().next()).copied());
    r.verifier_rewards = rewards.unwrap_or_default();
    r.step_results = Some(records);
    match first_error {
        // An error in a step that still left a reward is that step's, as in Harbor; a
        // trial without any reward is an error of the trial.
        Some(e) if r.reward.is_none() => {
            r.infrastructure_error = true;
            Err(e)
        }
        _ => Ok(()),
    }
}

/// A step's record to fill: the trial's so far, without what a step measures.
fn fresh_step_result(r: &TrialResult) -> TrialResult {
    let mut sr = r.clone();
    sr.reward = None;
    sr.verifier_rewards = BTreeMap::new();
    sr.reward_source = None;
    sr.tests = BTreeMap::new();
    sr.infrastructure_error = false;
    sr.agent_exit = AgentExit::default();
    sr.timings = Timings::default();
    sr.tokens = Tokens::default();
    sr.trajectory_path = None;
    sr
}

/// One step: its folders, its setup, then its agent and verifier, recorded in `sr`.
#[allow(clippy::too_many_arguments)]
fn run_step(
    task: &Task,
    step: &Step,
    step_paths: &TrialPaths,
    settings: &TrialSettings,
    env: &BTreeMap<String, String>,
    agent_env: &BTreeMap<String, String>,
    users: &BTreeMap<String, TrialUser>,
    image: Option<StepImage>,
    sr: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    for d in [
        &step_paths.agent_logs,
        &step_paths.verifier_logs,
        &step_paths.artifacts,
    ] {
        std::fs::create_dir_all(d).map_err(|e| {
            infra(
                sr,
                "EnvironmentSetupError",
                format!("{}: cannot create the step's folders: {e}", d.display()),
            )
        })?;
    }
    let default_user = image.and_then(|i| i.default_user);
    let user = |spec: Option<&str>| spec.or(default_user).and_then(|s| users.get(s));
    let agent_user = user(step.agent_user.as_deref().or(task.agent_user.as_deref()));
    let files = step.dir.join("workdir");
    if image.is_none() {
        step_setup(
            task,
            step,
            step_paths,
            settings,
            env,
            agent_user,
            sr,
            process_time,
        )?;
    }
    let pass = Pass {
        instruction: &step.instruction,
        agent_limit: step
            .agent_timeout
            .map_or(NO_AGENT_LIMIT, |t| scaled(t, settings.timeout_multiplier)),
        solution_dir: step
            .solution_dir
            .as_deref()
            .or(task.solution_dir.as_deref()),
        tests: task
            .tests_dir
            .iter()
            .cloned()
            .chain(Some(step.dir.join("tests")).filter(|t| t.is_dir()))
            .collect(),
        verifier_env: {
            let mut e = task.verifier_env.clone();
            e.extend(step.verifier_env.clone());
            e
        },
        verifier_timeout: step.verifier_timeout,
        agent_user,
        verifier_user: user(
            step.verifier_user
                .as_deref()
                .or(task.verifier_user.as_deref()),
        ),
        image: image.map(|i| i.start),
        step: image.map(|i| ContainerStep {
            files: Some(files.as_path()).filter(|f| f.is_dir()),
            save_as: i.save_as,
        }),
    };
    agent_and_verifier(
        task,
        step_paths,
        settings,
        env,
        agent_env.clone(),
        &pass,
        sr,
        process_time,
    )
}

/// A multi-step trial's image under a container runtime, and whom its phases run as when the
/// task names nobody (the image's USER).
pub(super) struct ImageRun {
    pub(super) tag: String,
    pub(super) default_user: Option<String>,
}

/// Where one step's container starts from and what it is saved as.
#[derive(Clone, Copy)]
struct StepImage<'a> {
    start: &'a str,
    save_as: &'a str,
    default_user: Option<&'a str>,
}

/// The `step_results` entry of a step that ran into `sr`.
fn step_record(
    step: &Step,
    sr: &TrialResult,
    exception_info: Option<ExceptionInfo>,
    step_root: PathBuf,
) -> StepRecord {
    let timing = |t: &Option<PhaseTiming>| t.as_ref().map(TimingInfo::from);
    StepRecord {
        step_name: step.name.clone(),
        agent_result: serde_json::json!({
            "n_input_tokens": sr.tokens.input,
            "n_cache_tokens": sr.tokens.cached,
            "n_output_tokens": sr.tokens.output,
        }),
        verifier_result: verifier_result(sr.reward, &sr.verifier_rewards),
        exception_info,
        agent_execution: timing(&sr.timings.agent_execution),
        verifier: timing(&sr.timings.verifier),
        reward: sr.reward,
        infrastructure_error: sr.infrastructure_error,
        agent_exit: sr.agent_exit.clone(),
        tests: sr.tests.clone(),
        dir: step_root,
    }
}

/// Adds a step's figures to the trial's: the trial's totals are the steps' sums; its
/// environment setup is the first's.
fn add_step_totals(r: &mut TrialResult, sr: &TrialResult) {
    r.tokens.input += sr.tokens.input;
    r.tokens.cached += sr.tokens.cached;
    r.tokens.output += sr.tokens.output;
    for (k, v) in &sr.routes {
        *r.routes.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &sr.route_decisions {
        *r.route_decisions.entry(k.clone()).or_default() += v;
    }
    r.hops = sr.hops.clone();
    r.hop_latency = sr.hop_latency.clone();
    r.tool_calls += sr.tool_calls;
    r.turn_status = sr.turn_status.clone();
    r.trajectory_path = sr.trajectory_path.clone().or(r.trajectory_path.take());
    r.agent_exit = sr.agent_exit.clone();
    if sr.timings.environment_setup.is_some() {
        r.timings.environment_setup = sr.timings.environment_setup.clone();
    }
}

/// Whether the trial ends after this step: it failed without a verifier result, or a reward
/// is below the step's `min_reward`.
fn ends_the_trial(step: &Step, record: &StepRecord, sr: &TrialResult) -> bool {
    match &record.verifier_result {
        None => record.exception_info.is_some(),
        Some(_) => step.min_reward.iter().any(|(key, threshold)| {
            let actual = if key == "reward" {
                record.reward
            } else {
                sr.verifier_rewards.get(key).copied()
            };
            actual.is_none_or(|a| a < *threshold)
        }),
    }
}

/// The trial's rewards from its steps' (Harbor's `multi_step_reward_strategy`): per-key means
/// over the steps that have a verifier result, missing keys counting 0; or the last step's.
fn step_rewards(strategy: StepReward, steps: &[StepRecord]) -> Option<BTreeMap<String, f64>> {
    let rewards = |s: &StepRecord| -> Option<BTreeMap<String, f64>> {
        let map = s.verifier_result.as_ref()?.get("rewards")?.as_object()?;
        Some(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
                .collect(),
        )
    };
    match strategy {
        StepReward::Final => steps.last().and_then(rewards),
        StepReward::Mean => {
            let scored: Vec<BTreeMap<String, f64>> = steps.iter().filter_map(rewards).collect();
            if scored.is_empty() {
                return None;
            }
            let keys: std::collections::BTreeSet<&String> =
                scored.iter().flat_map(|m| m.keys()).collect();
            let n = scored.len() as f64;
            Some(
                keys.into_iter()
                    .map(|k| {
                        let sum: f64 = scored
                            .iter()
                            .map(|m| m.get(k).copied().unwrap_or(0.0))
                            .sum();
                        (k.clone(), sum / n)
                    })
                    .collect(),
            )
        }
    }
}

/// A step's `workdir/` files go into the working dir, and its `workdir/setup.sh` runs there
/// (as the step's agent user), before the step's agent.
#[allow(clippy::too_many_arguments)]
fn step_setup(
    task: &Task,
    step: &Step,
    paths: &TrialPaths,
    settings: &TrialSettings,
    env: &BTreeMap<String, String>,
    user: Option<&TrialUser>,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    let files = step.dir.join("workdir");
    if !files.is_dir() {
        return Ok(());
    }
    let workdir = &task.environment.workdir;
    // The files go in from inside the sandbox: the working dir is the previous agent's, and a
    // link it left there must resolve in the trial, never on the host.
    let _ = remove_tree(&paths.setup);
    copy_tree(&files, &paths.setup, &[]).map_err(|e| infra(r, "StepSetupError", e.to_string()))?;
    let phase = Phase {
        paths,
        workdir,
        network: task.allow_internet,
        tests: false,
        solution: false,
        setup: true,
        build_context: None,
        env: env.clone(),
        gateway: None,
        user,
        control: None,
    };
    let script = "cp -a --no-preserve=ownership /setup/. \"$1\"/ && if [ -f /setup/setup.sh ]; then bash \"$1/setup.sh\"; fi";
    let args = [
        "-c".into(),
        script.into(),
        "step-setup".into(),
        workdir.clone(),
    ];
    let log = paths.agent_logs.join("setup.log");
    let outcome = run_phase(
        &settings.isolation,
        || settings.isolation.command(&phase, "bash", &args),
        || log_files(&log),
        &log,
        scaled(task.setup_timeout, settings.timeout_multiplier),
        settings.cancel,
    )
    .map_err(|e| {
        infra(
            r,
            "StepSetupError",
            format!("cannot create {}: {e}", log.display()),
        )
    })?;
    *process_time += outcome.duration;
    let _ = remove_tree(&paths.setup);
    if outcome.exit == Exit::Cancelled {
        return Err(cancelled(r));
    }
    if outcome.exit.success() {
        return Ok(());
    }
    Err(infra(
        r,
        "StepSetupError",
        format!(
            "step '{}': copying workdir/ or its setup.sh ended with {:?}; see {}",
            step.name,
            outcome.exit,
            log.display()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(name: &str, rewards: Option<&[(&str, f64)]>) -> StepRecord {
        let map: BTreeMap<String, f64> = rewards
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        StepRecord {
            step_name: name.into(),
            agent_result: serde_json::json!({}),
            verifier_result: rewards.map(|_| serde_json::json!({ "rewards": map })),
            exception_info: None,
            agent_execution: None,
            verifier: None,
            reward: None,
            infrastructure_error: false,
            agent_exit: AgentExit::default(),
            tests: BTreeMap::new(),
            dir: PathBuf::new(),
        }
    }

    /// Harbor's strategies: `mean` per key over the steps with a verifier result (a missing
    /// key counts 0, an unscored step is left out); `final` the last step's, even unscored.
    #[test]
    fn step_rewards_follow_harbors_strategies() {
        let steps = [
            step("a", Some(&[("reward", 1.0), ("style", 1.0)])),
            step("b", None),
            step("c", Some(&[("reward", 0.0)])),
        ];
        let mean = step_rewards(StepReward::Mean, &steps).unwrap();
        assert_eq!(mean["reward"], 0.5);
        assert_eq!(mean["style"], 0.5);
        let last = step_rewards(StepReward::Final, &steps).unwrap();
        assert_eq!(last["reward"], 0.0);
        assert!(!last.contains_key("style"));
        assert_eq!(step_rewards(StepReward::Final, &steps[..2]), None);
        assert_eq!(step_rewards(StepReward::Mean, &steps[1..2]), None);
    }
}
