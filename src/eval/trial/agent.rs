//! The agent's phase: the command each kind of agent runs, and its run in the trial's sandbox.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;

use super::baton_agent::{baton_agent_setup, baton_args, install_user_config};
use super::files::{rewrite_text_files, write_fresh};
use super::phase::{Pass, PhaseError, cancelled, infra, run_phase};
use super::trajectory::record_events;
use super::verifier::run_verifier;
use super::{AgentKind, PhaseTiming, TrialResult, TrialSettings};
use crate::eval::container::{Container, ContainerRun, Job};
use crate::eval::fsutil::{copy_task_file, copy_tree, create_trial_output, remove_tree};
use crate::eval::gateway::Gateway;
use crate::eval::isolation::{IsolationKind, Phase, TrialPaths};
use crate::eval::process::Exit;
use crate::eval::task::{Task, TaskFormat};

/// The agent, then the verifier, of one pass; the agent's failure (timeout, exit code) is
/// reported after the verifier has run, as Harbor grades such trials too.
#[allow(clippy::too_many_arguments)]
pub(super) fn agent_and_verifier(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    env: &BTreeMap<String, String>,
    mut agent_env: BTreeMap<String, String>,
    pass: &Pass,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    let iso = &settings.isolation;
    let ctx = task.environment.build_context.as_deref();
    // Agent.
    let instruction = iso.rewrite(paths, ctx, pass.instruction);
    let _ = write_fresh(
        &paths.agent_logs.join("instruction.md"),
        instruction.as_bytes(),
    );
    let agent_limit = pass.agent_limit;
    let command = agent_command(task, paths, settings, pass, &instruction, &mut agent_env, r)?;
    let container = run_agent(
        task,
        paths,
        settings,
        pass,
        command,
        &agent_env,
        r,
        process_time,
    )?;
    let _ = remove_tree(&paths.solution);

    // Verifier: the tests appear only now.
    let verify = run_verifier(task, pass, paths, settings, env, container, process_time, r);
    let agent_error = agent_failure(r, agent_limit, paths);
    match verify {
        Err(e) => Err(e),
        Ok(()) => match agent_error {
            Some((kind, msg)) => {
                if r.agent_exit.timed_out {
                    r.reward = Some(0.0);
                }
                Err((kind, msg))
            }
            None => Ok(()),
        },
    }
}

/// What runs as the agent, and how.
struct AgentCommand {
    /// The program; none for `nop`, which runs nothing.
    program: Option<String>,
    args: Vec<String>,
    network: bool,
    /// Whether `/solution` is there (the oracle's).
    solution: bool,
    /// Lives until the agent has exited: the agent's only way to its model endpoint.
    gateway: Option<Gateway>,
}

/// The command of the trial's agent: the oracle's solution copied in, a `cmd:` with the
/// instruction in `$INSTRUCTION`, or `baton` with its hooks, MCP servers and gateway
/// installed; `agent_env` gets what the agent needs besides.
fn agent_command(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    pass: &Pass,
    instruction: &str,
    agent_env: &mut BTreeMap<String, String>,
    r: &mut TrialResult,
) -> Result<AgentCommand, PhaseError> {
    let iso = &settings.isolation;
    let ctx = task.environment.build_context.as_deref();
    let mut gateway: Option<Gateway> = None;
    let (program, args, network, solution) = match &settings.agent {
        AgentKind::Nop => (None, Vec::new(), task.allow_internet, false),
        AgentKind::Oracle => {
            let Some(dir) = pass.solution_dir else {
                return Err(infra(
                    r,
                    "SolutionMissingError",
                    format!("{}: the task has no solution", task.dir.display()),
                ));
            };
            let copied = if task.format == TaskFormat::Tb1 {
                // A task file: never through a link out of the task folder.
                std::fs::create_dir_all(&paths.solution)
                    .and_then(|_| {
                        copy_task_file(
                            &task.dir,
                            &dir.join(&task.solution_script),
                            &paths.solution.join(&task.solution_script),
                        )
                    })
                    .map_err(|e| format!("{}: {e}", dir.join(&task.solution_script).display()))
            } else {
                copy_tree(dir, &paths.solution, &[]).map_err(|e| e.to_string())
            };
            copied.map_err(|e| infra(r, "SolutionCopyError", e))?;
            rewrite_text_files(iso, paths, ctx, &paths.solution);
            agent_env.extend(task.solution_env.clone());
            (
                Some("bash".to_string()),
                vec![format!("/solution/{}", task.solution_script)],
                task.allow_internet,
                true,
            )
        }
        AgentKind::Cmd(c) => {
            agent_env.insert("INSTRUCTION".into(), instruction.to_string());
            (
                Some("bash".to_string()),
                vec!["-c".into(), c.clone()],
                task.allow_internet,
                false,
            )
        }
        AgentKind::Baton {
            binary,
            extra_args,
            pass_env,
            hooks,
            mcp_config,
        } => {
            install_user_config(paths, hooks, mcp_config)
                .map_err(|e| infra(r, "AgentSetupError", e))?;
            // Plain folders share the host network: the gateway listens on its loopback then.
            // A container has a namespace of its own either way: the gateway's listener goes there.
            let host_network =
                (task.allow_internet && !iso.kind.is_runtime()) || iso.kind == IsolationKind::Plain;
            let agent = baton_agent_setup(extra_args, pass_env, host_network)
                .map_err(|e| infra(r, "AgentSetupError", e.to_string()))?;
            agent_env.extend(agent.env);
            gateway = agent.gateway;
            let args = baton_args(&task.environment.workdir, agent.extra_args, instruction);
            (
                Some(binary.to_string_lossy().into_owned()),
                args,
                task.allow_internet,
                false,
            )
        }
    };
    Ok(AgentCommand {
        program,
        args,
        network,
        solution,
        gateway,
    })
}

/// Runs the agent `command` names (nothing for `nop`); returns the sandbox it shares with the
/// verifier, when there is one, still running.
#[allow(clippy::too_many_arguments)]
fn run_agent(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    pass: &Pass,
    command: AgentCommand,
    agent_env: &BTreeMap<String, String>,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<Option<Container>, PhaseError> {
    let iso = &settings.isolation;
    let agent_limit = pass.agent_limit;
    let stdout_path = paths.agent_logs.join("stdout.txt");
    let agent_user = pass.agent_user.cloned();
    let AgentCommand {
        program,
        args,
        network,
        solution,
        mut gateway,
    } = command;
    let control = paths.root.join("work").join("control");
    // A step before this one left its sandbox's control files (its FIFO among them).
    let _ = remove_tree(&control);
    // Under a container runtime every phase runs in the trial's one container, the `nop`
    // agent's verifier too.
    let mut container: Option<Container> = match pass.image {
        Some(image) => Some(start_container(
            task,
            paths,
            iso,
            image,
            network,
            solution,
            pass.agent_user.is_some() || pass.verifier_user.is_some(),
            gateway.as_ref(),
            &control,
            r,
        )?),
        None => None,
    };
    if let (Some(c), Some(files)) = (container.as_mut(), pass.step.and_then(|s| s.files)) {
        step_setup_in(
            c,
            task,
            settings,
            files,
            agent_user.as_ref(),
            r,
            process_time,
        )?;
    }
    let Some(program) = program else {
        let now = Utc::now();
        r.timings.agent_execution = Some(PhaseTiming {
            started_at: now,
            finished_at: now,
            duration_sec: 0.0,
        });
        return Ok(container);
    };
    // The agent and the verifier share one sandbox, as they share one container in Docker,
    // under bwrap: what the agent leaves running (a server it was asked to start) is there for
    // the verifier, and ends with it.
    // Root only: the verifier's /tests is made in the sandbox's own root folder when it
    // starts (the agent never sees one), which only root may write.
    if iso.kind == IsolationKind::Bwrap
        && pass.agent_user.is_none()
        && pass.verifier_user.is_none()
        && container.is_none()
    {
        let phase = Phase {
            paths,
            workdir: &task.environment.workdir,
            network,
            tests: false,
            solution,
            setup: false,
            build_context: None,
            env: BTreeMap::new(),
            gateway: gateway.as_ref(),
            user: agent_user.as_ref(),
            control: Some(&control),
        };
        let log = paths.root.join("work").join("container.log");
        match Container::start(iso, &phase, &control, &log) {
            Ok(c) => container = Some(c),
            // A sandbox per phase then, as before.
            Err(e) => tracing::warn!("{}: no shared sandbox: {e}", paths.root.display()),
        }
    }
    let phase = Phase {
        paths,
        workdir: &task.environment.workdir,
        network,
        tests: false,
        solution,
        setup: false,
        build_context: None,
        env: agent_env.clone(),
        gateway: gateway.as_ref(),
        user: agent_user.as_ref(),
        control: None,
    };
    let stderr_path = paths.agent_logs.join("stderr.txt");
    let dir = &paths.agent_logs;
    let logs = || {
        Ok((
            create_trial_output(dir, &stdout_path)?,
            create_trial_output(dir, &stderr_path)?,
        ))
    };
    if let Err(e) = logs() {
        return Err(infra(
            r,
            "AgentSetupError",
            format!("cannot create agent logs: {e}"),
        ));
    }
    let outcome = match container.as_mut() {
        Some(c) => {
            let job_env = iso.sandbox_env(agent_user.as_ref(), agent_env);
            let job = Job {
                user: agent_user.as_ref().map(|u| u.name.as_str()),
                workdir: &task.environment.workdir,
                env: &job_env,
                prelude: "",
                program: &program,
                args: &args,
                stdout: "/logs/agent/stdout.txt",
                stderr: "/logs/agent/stderr.txt",
            };
            c.run(&job, agent_limit, settings.cancel)
        }
        None => match run_phase(
            iso,
            || iso.command(&phase, &program, &args),
            logs,
            &stderr_path,
            agent_limit,
            settings.cancel,
        ) {
            Ok(outcome) => outcome,
            Err(e) => {
                return Err(infra(
                    r,
                    "AgentSetupError",
                    format!("cannot create agent logs: {e}"),
                ));
            }
        },
    };
    drop(gateway.take());
    *process_time += outcome.duration;
    r.timings.agent_execution = Some(PhaseTiming::from(&outcome));
    record_agent_exit(r, &outcome.exit)?;
    record_events(pass.instruction, paths, settings, r, &stdout_path);
    Ok(container)
}

/// A step's `workdir/` files copied into the working dir in the trial's container, and its
/// `setup.sh` run there as the step's agent user, as the bwrap trial does it
/// (`steps::step_setup`); the output goes to the step's `agent/setup.log`.
#[allow(clippy::too_many_arguments)]
fn step_setup_in(
    c: &mut Container,
    task: &Task,
    settings: &TrialSettings,
    files: &std::path::Path,
    user: Option<&crate::eval::isolation::TrialUser>,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    let staged = c.staging().join("step");
    let _ = remove_tree(&staged);
    copy_tree(files, &staged, &[]).map_err(|e| infra(r, "StepSetupError", e.to_string()))?;
    let from = format!("{}/in/step", crate::eval::container::CONTROL);
    let script = format!(
        "exec 2>&1; cp -a --no-preserve=ownership {from}/. \"$1\"/ && if [ -f {from}/setup.sh ]; then bash \"$1/setup.sh\"; fi"
    );
    let args = [
        "-c".to_string(),
        script,
        "step-setup".to_string(),
        task.environment.workdir.clone(),
    ];
    let env = BTreeMap::new();
    let job = Job {
        user: user.map(|u| u.name.as_str()),
        workdir: &task.environment.workdir,
        env: &env,
        prelude: "",
        program: "bash",
        args: &args,
        stdout: "/logs/agent/setup.log",
        stderr: "/dev/null",
    };
    let outcome = c.run(
        &job,
        super::phase::scaled(task.setup_timeout, settings.timeout_multiplier),
        settings.cancel,
    );
    *process_time += outcome.duration;
    let _ = remove_tree(&staged);
    match outcome.exit {
        Exit::Cancelled => Err(super::phase::cancelled(r)),
        e if e.success() => Ok(()),
        e => Err(infra(
            r,
            "StepSetupError",
            format!(
                "copying the step's workdir/ or its setup.sh ended with {e:?}; see agent/setup.log"
            ),
        )),
    }
}

/// Starts the trial's container of `image` under the runtime: the trial's log folders, the
/// oracle's `/solution` and the shared host paths (the baton agent's binary) mounted as in the
/// bwrap sandbox, and the model gateway's listener put into its network namespace.
#[allow(clippy::too_many_arguments)]
fn start_container(
    task: &Task,
    paths: &TrialPaths,
    iso: &crate::eval::isolation::Isolation,
    image: &str,
    network: bool,
    solution: bool,
    non_root_jobs: bool,
    gateway: Option<&Gateway>,
    control: &std::path::Path,
    r: &mut TrialResult,
) -> Result<Container, PhaseError> {
    let Some(runtime) = &iso.runtime else {
        return Err(infra(r, "AgentSetupError", "no container runtime".into()));
    };
    if non_root_jobs {
        // A phase of another user writes its logs there, as root's do. The trial's folder
        // above is the runner's alone.
        use std::os::unix::fs::PermissionsExt;
        for dir in [&paths.agent_logs, &paths.verifier_logs, &paths.artifacts] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).map_err(|e| {
                infra(
                    r,
                    "EnvironmentStartError",
                    format!("{}: {e}", dir.display()),
                )
            })?;
        }
    }
    let mut mounts = vec![
        (paths.agent_logs.clone(), "/logs/agent".to_string(), false),
        (
            paths.verifier_logs.clone(),
            "/logs/verifier".to_string(),
            false,
        ),
        (
            paths.artifacts.clone(),
            "/logs/artifacts".to_string(),
            false,
        ),
    ];
    if solution {
        mounts.push((paths.solution.clone(), "/solution".to_string(), true));
    }
    let user_config = paths.home.join(".config/baton");
    if user_config.is_dir() {
        mounts.push((user_config, "/root/.config/baton".to_string(), true));
    }
    for shared in iso.shared() {
        mounts.push((shared.clone(), shared.to_string_lossy().into_owned(), true));
    }
    let name = format!("baton-trial-{}", r.id);
    let run = ContainerRun {
        image,
        name: &name,
        trial_dir: &paths.root,
        network,
        workdir: &task.environment.workdir,
        mounts,
        non_root_jobs,
    };
    let log = paths.root.join("work").join("container.log");
    let mut container = Container::start_in(runtime, &run, control, &log).map_err(|e| {
        infra(
            r,
            "EnvironmentStartError",
            format!("cannot start the trial's container: {e}"),
        )
    })?;
    if !container.alive() {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        return Err(infra(
            r,
            "EnvironmentStartError",
            format!("the trial's container did not start: {}", log.trim()),
        ));
    }
    // The agent reaches its model only through the gateway, on the container's loopback.
    if let Some(gateway) = gateway {
        let joined = runtime
            .init_pid(&name)
            .and_then(|pid| {
                std::fs::File::open(format!("/proc/{pid}/ns/net")).map_err(|e| e.to_string())
            })
            .and_then(|netns| gateway.listen_in(netns).map_err(|e| e.to_string()));
        joined.map_err(|e| {
            infra(
                r,
                "AgentSetupError",
                format!("cannot put the model gateway into the trial's container: {e}"),
            )
        })?;
    }
    Ok(container)
}

/// How the agent process ended, in the record; one that never started, or a job that was
/// interrupted, ends the pass.
fn record_agent_exit(r: &mut TrialResult, exit: &Exit) -> Result<(), PhaseError> {
    match exit {
        Exit::Code(c) => r.agent_exit.exit_code = Some(*c),
        Exit::Signal(s) => r.agent_exit.signal = Some(*s),
        Exit::TimedOut => r.agent_exit.timed_out = true,
        Exit::SpawnFailed(m) => return Err(infra(r, "AgentSpawnError", m.clone())),
        Exit::Cancelled => return Err(cancelled(r)),
    }
    Ok(())
}

/// The agent's own failure (its time limit, an exit code or signal), reported once the
/// verifier has run.
fn agent_failure(r: &TrialResult, agent_limit: Duration, paths: &TrialPaths) -> Option<PhaseError> {
    if r.agent_exit.timed_out {
        Some((
            "AgentTimeoutError",
            format!(
                "the agent did not finish within {:.0} s",
                agent_limit.as_secs_f64()
            ),
        ))
    } else if r.agent_exit.exit_code.is_some_and(|c| c != 0) || r.agent_exit.signal.is_some() {
        Some((
            "NonZeroAgentExitCodeError",
            format!(
                "the agent exited with {}; see {}",
                r.agent_exit
                    .exit_code
                    .map(|c| format!("code {c}"))
                    .unwrap_or_else(|| format!("signal {}", r.agent_exit.signal.unwrap_or(0))),
                paths.agent_logs.join("stderr.txt").display()
            ),
        ))
    } else {
        None
    }
}
