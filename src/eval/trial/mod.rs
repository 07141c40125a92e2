//! One trial of one task: prepare `/app` from the environment, run the agent under its time
//! limit, copy the tests in only then, run the verifier, read the reward, write the trial's
//! `result.json`, trajectory and logs.
//!
//! [`run_trial`] runs the phases in order; each has a module: the environment's `setup` and
//! `users`, the `agent` (and the `baton_agent`'s gateway), the `verifier`, the `steps` of a
//! multi-step task. What a trial leaves behind: its `result`, `trajectory`, `artifacts` and
//! `config`.

mod agent;
mod artifacts;
mod baton_agent;
mod config;
mod files;
mod network;
mod phase;
mod result;
mod settings;
mod setup;
mod steps;
mod trajectory;
mod users;
mod verifier;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::events::Tokens;
use super::fsutil::{copy_tree, remove_tree};
use super::isolation::{IsolationKind, TrialPaths, TrialUser};
use super::task::Task;

use agent::agent_and_verifier;
use artifacts::collect_artifacts;
use config::{harbor_trial_config, task_checksum, write_config};
use phase::{Pass, PhaseError, infra, scaled};
use result::verifier_result;
use setup::run_setup_script;
use steps::run_steps;
use users::trial_users;

pub(crate) use baton_agent::api_key_var;
pub use network::{is_network_var, network_env, network_files};
pub use result::{
    AgentExit, ExceptionInfo, PhaseTiming, StepRecord, TimingInfo, Timings, TrialResult,
};
pub use settings::{AgentKind, BatonOptions, TrialSettings, UnknownAgent};

/// Runs one trial into `trial_dir` and returns its record (also written as `result.json`).
pub fn run_trial(
    task: &Task,
    trial_name: &str,
    trial_dir: &Path,
    settings: &TrialSettings,
) -> TrialResult {
    let wall = Instant::now();
    let started_at = Utc::now();
    let paths = TrialPaths::new(trial_dir)
        .with_extra_roots(&task.environment.extra_roots)
        .with_system_mounts(&task.environment.system_mounts);
    let mut r = TrialResult {
        id: uuid::Uuid::now_v7().to_string(),
        task_name: task.name.clone(),
        trial_name: trial_name.to_string(),
        trial_uri: format!("file://{}", trial_dir.display()),
        task_id: serde_json::json!({ "path": task.dir }),
        task_checksum: task
            .checksum
            .get_or_init(|| task_checksum(&task.dir))
            .clone(),
        config: harbor_trial_config(task, trial_name, trial_dir, settings),
        agent_info: serde_json::json!({
            "name": settings.agent.name(),
            "version": env!("CARGO_PKG_VERSION"),
            "model_info": serde_json::Value::Null,
        }),
        agent_result: serde_json::json!({}),
        verifier_result: None,
        environment_setup: None,
        agent_setup: None,
        agent_execution: None,
        verifier: None,
        step_results: None,
        trial_dir: trial_dir.to_path_buf(),
        task_dir: task.dir.clone(),
        task_format: task.format.as_str().to_string(),
        agent: settings.agent.name().to_string(),
        isolation: settings.isolation.kind.as_str().to_string(),
        reward: None,
        verifier_rewards: BTreeMap::new(),
        reward_source: None,
        tests: BTreeMap::new(),
        infrastructure_error: false,
        exception_info: None,
        agent_exit: AgentExit::default(),
        timings: Timings::default(),
        tokens: Tokens::default(),
        routes: BTreeMap::new(),
        route_decisions: BTreeMap::new(),
        hop_latency: BTreeMap::new(),
        hops: Vec::new(),
        tool_calls: 0,
        turn_status: None,
        trajectory_path: None,
        started_at,
        finished_at: started_at,
    };
    let mut process_time = Duration::ZERO;
    if let Err((kind, message)) = trial_phases(task, &paths, settings, &mut r, &mut process_time) {
        r.exception_info = Some(ExceptionInfo {
            exception_type: kind.to_string(),
            exception_traceback: message.clone(),
            message,
            occurred_at: Utc::now(),
        });
    }
    if r.infrastructure_error {
        r.reward = None;
    }
    // A container's artifacts were copied out before it ended (the verifier's phase).
    if task.steps.is_empty() && !settings.isolation.kind.is_runtime() {
        collect_artifacts(&task.artifacts, &paths);
    }
    r.environment_setup = r.timings.environment_setup.as_ref().map(TimingInfo::from);
    r.agent_execution = r.timings.agent_execution.as_ref().map(TimingInfo::from);
    r.verifier = r.timings.verifier.as_ref().map(TimingInfo::from);
    r.agent_result = serde_json::json!({
        "n_input_tokens": r.tokens.input,
        "n_cache_tokens": r.tokens.cached,
        "n_output_tokens": r.tokens.output,
    });
    r.verifier_result = verifier_result(r.reward, &r.verifier_rewards);
    if !settings.keep_workdirs {
        let _ = remove_tree(&trial_dir.join("work"));
    }
    r.finished_at = Utc::now();
    r.timings.total_sec = wall.elapsed().as_secs_f64();
    r.timings.runner_overhead_sec = (wall.elapsed().saturating_sub(process_time)).as_secs_f64();
    if let Ok(json) = serde_json::to_string_pretty(&r) {
        let _ = std::fs::write(trial_dir.join("result.json"), json);
    }
    r
}

/// The trial's phases in order: its folders and `config.json`, the environment (fixture files,
/// setup script, working dir, users), then one agent-and-verifier pass, or one per step.
fn trial_phases(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    let iso = &settings.isolation;
    paths.create().map_err(|e| {
        infra(
            r,
            "EnvironmentSetupError",
            format!("{}: cannot create trial folders: {e}", paths.root.display()),
        )
    })?;
    // A trial's root is the runner's user on the folders it writes (a container's root, or
    // bwrap's when the runner is root, is the host's root there): a setuid file or a device
    // node it leaves must be out of other users' reach.
    {
        use std::os::unix::fs::PermissionsExt;
        let private = std::fs::Permissions::from_mode(0o700);
        std::fs::set_permissions(&paths.root, private).map_err(|e| {
            infra(
                r,
                "EnvironmentSetupError",
                format!("{}: {e}", paths.root.display()),
            )
        })?;
    }
    write_config(task, paths, settings);
    if let Some(runtime) = &iso.runtime {
        let (task, image, image_user) = task_image(task, paths, settings, runtime, r)?;
        let mut env = settings.network_env.clone();
        env.extend(task.environment.env.clone());
        // As `docker exec`: a phase runs as the task's user for it, else as the image's USER.
        // The image's user database resolves the name: uid and gid are the runtime's.
        let in_image = |spec: Option<&String>| {
            spec.or(image_user.as_ref())
                .filter(|s| !users::is_root(s))
                .map(|s| TrialUser {
                    name: s.clone(),
                    uid: 0,
                    gid: 0,
                })
        };
        if !task.steps.is_empty() {
            let specs = task
                .steps
                .iter()
                .flat_map(|s| [&s.agent_user, &s.verifier_user]);
            let users: BTreeMap<String, TrialUser> = [&task.agent_user, &task.verifier_user]
                .into_iter()
                .chain(specs)
                .chain([&image_user])
                .filter_map(|spec| in_image(spec.as_ref()))
                .map(|u| (u.name.clone(), u))
                .collect();
            let run = steps::ImageRun {
                tag: image,
                default_user: image_user.clone(),
            };
            return run_steps(
                &task,
                paths,
                settings,
                &env,
                &env,
                &users,
                Some(&run),
                r,
                process_time,
            );
        }
        let agent_user = in_image(task.agent_user.as_ref());
        let verifier_user = in_image(task.verifier_user.as_ref());
        let pass = Pass::whole_task(
            &task,
            settings.timeout_multiplier,
            (agent_user.as_ref(), verifier_user.as_ref()),
            Some(&image),
        );
        return agent_and_verifier(
            &task,
            paths,
            settings,
            &env,
            env.clone(),
            &pass,
            r,
            process_time,
        );
    }

    // Environment: fixture files, then the setup script inside the sandbox.
    if let Some(from) = &task.environment.files_from {
        copy_tree(from, &paths.app, &task.environment.exclude)
            .map_err(|e| infra(r, "EnvironmentSetupError", e.to_string()))?;
    }
    let mut env = settings.network_env.clone();
    env.extend(task.environment.env.clone());
    // The agent's view adds keys and the instruction; neither reaches the verifier.
    let agent_env = env.clone();
    if let Some(script) = &task.environment.setup_script {
        run_setup_script(task, paths, settings, script, &env, r, process_time)?;
    }
    // Create the working dir before the agent runs (WORKDIR may be below /app).
    // The setup wrote those folders: a link it left on the way is never followed out.
    if let Some(rel) = paths
        .host_path(&task.environment.workdir)
        .and_then(|host| host.strip_prefix(&paths.root).ok().map(Path::to_path_buf))
    {
        let _ = crate::untrusted_fs::Dir::open(&paths.root).and_then(|d| d.dir(&rel, Some(0o755)));
    }

    let users = trial_users(task, paths).map_err(|e| infra(r, "UserSetupError", e))?;
    if !users.is_empty() && iso.kind == IsolationKind::Plain {
        let names: Vec<&str> = users.keys().map(String::as_str).collect();
        return Err(infra(
            r,
            "UserSetupError",
            format!(
                "the task runs phases as {} and plain folders (no sandbox) run everything as this process's user; use --isolation bwrap",
                names.join(", ")
            ),
        ));
    }
    let user = |spec: Option<&str>| spec.and_then(|s| users.get(s));
    if task.steps.is_empty() {
        let pass = Pass::whole_task(
            task,
            settings.timeout_multiplier,
            (
                user(task.agent_user.as_deref()),
                user(task.verifier_user.as_deref()),
            ),
            None,
        );
        return agent_and_verifier(
            task,
            paths,
            settings,
            &env,
            agent_env,
            &pass,
            r,
            process_time,
        );
    }
    run_steps(
        task,
        paths,
        settings,
        &env,
        &agent_env,
        &users,
        None,
        r,
        process_time,
    )
}

/// The environment under a container runtime: the task's image, built (or pulled) unless the
/// runtime has it, as the trial's environment setup; the task as the trial runs it (its
/// working dir the image's WORKDIR unless the task names one), and the image's tag.
fn task_image(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    runtime: &crate::eval::runtime::Runtime,
    r: &mut TrialResult,
) -> Result<(Task, String, Option<String>), PhaseError> {
    let started_at = Utc::now();
    let checksum = task
        .checksum
        .get_or_init(|| task_checksum(&task.dir))
        .clone();
    let image = runtime.image(
        task,
        &checksum,
        &paths.root.join("setup.log"),
        scaled(task.setup_timeout, settings.timeout_multiplier),
        settings.cancel,
    );
    let finished_at = Utc::now();
    r.timings.environment_setup = Some(PhaseTiming {
        started_at,
        finished_at,
        duration_sec: (finished_at - started_at).as_seconds_f64(),
    });
    if settings.cancel.load(std::sync::atomic::Ordering::SeqCst) {
        return Err(phase::cancelled(r));
    }
    let image = image.map_err(|e| infra(r, "EnvironmentSetupError", e))?;
    let mut task = task.clone();
    if task.environment.workdir.is_empty() {
        task.environment.workdir = image.workdir.clone();
    }
    let user = (!image.runs_as_root()).then(|| image.user.clone());
    Ok((task, image.tag, user))
}
