//! One trial of one task: prepare `/app` from the environment, run the agent under its time
//! limit, copy the tests in only then, run the verifier, read the reward, write the trial's
//! `result.json`, trajectory and logs.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::atif;
use super::container::{Container, Job};
use super::events::{self, EventStats, HopLatency, HopRecord, Tokens};
use super::fsutil::{copy_task_file, copy_tree, remove_tree};
use super::gateway::{Gateway, GatewayError};
use super::isolation::{Isolation, IsolationKind, Phase, TrialPaths, TrialUser};
use super::process::{self, Exit, Outcome};
use super::reward;
use super::task::{StepReward, Task, TaskFormat};

/// Which agent plays the trial.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentKind {
    /// `baton --exec --json --sandbox off --approval full-auto -C <workdir>
    /// --session-dir /logs/agent/sessions ARGS -- <instruction>`.
    Baton {
        binary: PathBuf,
        extra_args: Vec<String>,
        /// Host env vars passed into the sandbox (API keys, endpoints).
        pass_env: Vec<String>,
        /// A hooks file (`baton eval --hooks`) installed as the trial's user hooks.json.
        hooks: Option<PathBuf>,
        /// MCP servers (`baton eval --mcp-config`) installed as the trial's user config.toml.
        mcp_config: Option<PathBuf>,
    },
    /// Runs the task's reference solution.
    Oracle,
    /// Does nothing: the tests must fail.
    Nop,
    /// A shell command; the instruction is in `$INSTRUCTION`.
    Cmd(String),
}

impl AgentKind {
    /// Parses `baton`, `oracle`, `nop` or `cmd:COMMAND`.
    pub fn parse(spec: &str, baton: BatonOptions) -> Result<AgentKind, UnknownAgent> {
        match spec {
            "baton" => Ok(AgentKind::Baton {
                binary: baton.binary,
                extra_args: baton.extra_args,
                pass_env: baton.pass_env,
                hooks: baton.hooks,
                mcp_config: baton.mcp_config,
            }),
            "oracle" => Ok(AgentKind::Oracle),
            "nop" => Ok(AgentKind::Nop),
            other => match other.strip_prefix("cmd:") {
                Some(c) if !c.trim().is_empty() => Ok(AgentKind::Cmd(c.to_string())),
                _ => Err(UnknownAgent {
                    spec: other.to_string(),
                }),
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            AgentKind::Baton { .. } => "baton",
            AgentKind::Oracle => "oracle",
            AgentKind::Nop => "nop",
            AgentKind::Cmd(_) => "cmd",
        }
    }
}

/// An `--agent` value that names no agent (or a `cmd:` without a command).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent '{spec}': use baton, oracle, nop or cmd:\"COMMAND\"")]
pub struct UnknownAgent {
    pub spec: String,
}

/// What the `baton` agent needs besides the instruction.
#[derive(Debug, Clone, Default)]
pub struct BatonOptions {
    pub binary: PathBuf,
    pub extra_args: Vec<String>,
    pub pass_env: Vec<String>,
    pub hooks: Option<PathBuf>,
    pub mcp_config: Option<PathBuf>,
}

/// Settings shared by every trial of a job.
#[derive(Debug, Clone)]
pub struct TrialSettings {
    pub agent: AgentKind,
    pub timeout_multiplier: f64,
    pub keep_workdirs: bool,
    pub isolation: Isolation,
    /// CA bundles, proxies and package-index settings from the host ([`network_env`]): every
    /// phase gets them, under the task's own variables.
    pub network_env: BTreeMap<String, String>,
    /// Set when the job is interrupted: running phases end, the trial is a `CancelledError`.
    pub cancel: &'static std::sync::atomic::AtomicBool,
}

/// Whether a host variable configures network access (certificates, proxies, package
/// indexes): such variables reach every phase of a trial, as they do every process on the
/// host. Credentials (by name) stay out.
pub fn is_network_var(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let named = [
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "FTP_PROXY",
        "NO_PROXY",
    ];
    // `https_proxy` is as common as `HTTPS_PROXY`; `Https_Proxy` is nobody's.
    let known =
        named.contains(&upper.as_str()) && (name == upper || name == name.to_ascii_lowercase());
    (known || name.starts_with("PIP_") || name.starts_with("UV_")) && !is_secret_name(name)
}

/// The host's network variables ([`is_network_var`]), from `vars`. When a proxy is set, the
/// loopback addresses (the model gateway's) are added to `NO_PROXY`/`no_proxy` so that the
/// agent never sends its model traffic to the proxy.
pub fn network_env(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = vars.filter(|(k, _)| is_network_var(k)).collect();
    let proxied = env.keys().any(|k| {
        let u = k.to_ascii_uppercase();
        u.ends_with("_PROXY") && u != "NO_PROXY"
    });
    if proxied {
        for key in ["NO_PROXY", "no_proxy"] {
            let mut list: Vec<String> = env
                .get(key)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            for local in ["127.0.0.1", "localhost", "::1"] {
                if !list.iter().any(|l| l == local) {
                    list.push(local.to_string());
                }
            }
            env.insert(key.to_string(), list.join(","));
        }
    }
    env
}

/// Host files the network variables name (a CA bundle under a home folder): they must be
/// readable inside the sandbox. Files only: a folder named there (`SSL_CERT_DIR=~`) would
/// bring everything in it along.
pub fn network_files(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    env.iter()
        .filter(|(k, _)| {
            let u = k.to_ascii_uppercase();
            u.contains("CERT") || u.contains("CA_BUNDLE") || u.ends_with("CAINFO")
        })
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute() && p.is_file())
        .collect()
}

/// Start and end of one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseTiming {
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration_sec: f64,
}

impl From<&Outcome> for PhaseTiming {
    fn from(o: &Outcome) -> Self {
        PhaseTiming {
            started_at: o.started_at,
            finished_at: o.finished_at,
            duration_sec: o.duration.as_secs_f64(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_setup: Option<PhaseTiming>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_execution: Option<PhaseTiming>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifier: Option<PhaseTiming>,
    /// Wall time of the whole trial.
    pub total_sec: f64,
    /// Time spent by the runner itself: the total minus the time the task's and agent's
    /// processes ran (copying, sandbox setup, reading results).
    pub runner_overhead_sec: f64,
}

/// How the agent process ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentExit {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub timed_out: bool,
}

/// Harbor's `exception_info`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExceptionInfo {
    pub exception_type: String,
    #[serde(rename = "exception_message")]
    pub message: String,
    /// Harbor's field; baton's errors are values, so this holds the message again.
    pub exception_traceback: String,
    pub occurred_at: DateTime<Utc>,
}

/// Harbor's `TimingInfo`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimingInfo {
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

impl From<&PhaseTiming> for TimingInfo {
    fn from(p: &PhaseTiming) -> Self {
        TimingInfo {
            started_at: p.started_at,
            finished_at: p.finished_at,
        }
    }
}

/// One step of a multi-step trial: Harbor's `StepResult` fields, then baton's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub step_name: String,
    /// Harbor's `AgentContext`: token counts.
    pub agent_result: serde_json::Value,
    /// `{ "rewards": … }`, absent when the step was not scored.
    pub verifier_result: Option<serde_json::Value>,
    pub exception_info: Option<ExceptionInfo>,
    pub agent_execution: Option<TimingInfo>,
    pub verifier: Option<TimingInfo>,
    pub reward: Option<f64>,
    pub infrastructure_error: bool,
    pub agent_exit: AgentExit,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tests: BTreeMap<String, String>,
    /// `steps/<name>/` of the trial folder: this step's `agent/`, `verifier/`, `artifacts/`.
    pub dir: PathBuf,
}

/// Per-trial record in `result.json`: Harbor's `TrialResult` fields (so Harbor's viewer and
/// tools read baton's jobs), then baton's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialResult {
    pub id: String,
    pub task_name: String,
    pub trial_name: String,
    /// `file://` URI of the trial folder.
    pub trial_uri: String,
    /// Harbor's `LocalTaskId`: `{ "path": … }`.
    pub task_id: serde_json::Value,
    /// SHA-256 over the task folder's file names and contents.
    pub task_checksum: String,
    /// Harbor's `TrialConfig` for this trial.
    pub config: serde_json::Value,
    pub agent_info: serde_json::Value,
    /// Harbor's `AgentContext`: token counts.
    pub agent_result: serde_json::Value,
    /// Harbor's `VerifierResult`: `{ "rewards": { "reward": … } }`, absent when unscored.
    pub verifier_result: Option<serde_json::Value>,
    pub environment_setup: Option<TimingInfo>,
    pub agent_setup: Option<TimingInfo>,
    pub agent_execution: Option<TimingInfo>,
    pub verifier: Option<TimingInfo>,
    /// Harbor's `step_results`: one entry per step run, for a multi-step task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_results: Option<Vec<StepRecord>>,
    pub trial_dir: PathBuf,
    pub task_dir: PathBuf,
    pub task_format: String,
    pub agent: String,
    pub isolation: String,
    /// The scored reward; `None` for an infrastructure error (not scored).
    pub reward: Option<f64>,
    /// What the verifier said, even when the scored reward is 0 because the agent timed out.
    pub verifier_rewards: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward_source: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tests: BTreeMap<String, String>,
    /// True when the trial is excluded from the score.
    pub infrastructure_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exception_info: Option<ExceptionInfo>,
    pub agent_exit: AgentExit,
    pub timings: Timings,
    pub tokens: Tokens,
    pub routes: BTreeMap<String, u64>,
    pub route_decisions: BTreeMap<String, u64>,
    pub hop_latency: BTreeMap<String, HopLatency>,
    pub hops: Vec<HopRecord>,
    pub tool_calls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trajectory_path: Option<PathBuf>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

impl TrialResult {
    pub fn passed(&self) -> bool {
        self.reward.is_some_and(|r| r >= 1.0)
    }

    pub fn timed_out(&self) -> bool {
        self.agent_exit.timed_out
    }
}

/// The agent's limit when the task sets none (Harbor's default): a week, which a run never
/// reaches but which keeps deadlines representable.
const NO_AGENT_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

fn scaled(d: Duration, multiplier: f64) -> Duration {
    Duration::from_secs_f64((d.as_secs_f64() * multiplier).max(0.001))
}

fn log_files(path: &Path) -> std::io::Result<(File, File)> {
    let f = File::create(path)?;
    let g = f.try_clone()?;
    Ok((f, g))
}

/// Runs the phase command `command` makes with its output into the files `logs` opens (stderr
/// into `stderr`), once more (twice at most) when it never started because bwrap lost the
/// cover of a host socket that went away meanwhile ([`Isolation::lost_a_socket_cover`]).
fn run_phase(
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
    if task.steps.is_empty() {
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

/// Harbor's `VerifierResult` of a scored reward: the verifier's keys, `reward` the score.
fn verifier_result(
    reward: Option<f64>,
    rewards: &BTreeMap<String, f64>,
) -> Option<serde_json::Value> {
    reward.map(|reward| {
        let mut map: serde_json::Map<String, serde_json::Value> = rewards
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .collect();
        map.insert("reward".into(), serde_json::json!(reward));
        serde_json::json!({ "rewards": map })
    })
}

type PhaseError = (&'static str, String);

/// What one agent-then-verifier pass runs: the whole task, or one step of a multi-step task.
struct Pass<'a> {
    instruction: &'a str,
    agent_limit: Duration,
    /// The oracle's folder for this pass.
    solution_dir: Option<&'a Path>,
    /// Folders copied to `/tests` in order (later ones over earlier ones).
    tests: Vec<PathBuf>,
    verifier_env: BTreeMap<String, String>,
    verifier_timeout: Duration,
    agent_user: Option<&'a TrialUser>,
    verifier_user: Option<&'a TrialUser>,
}

/// Whether a `user` value means root.
fn is_root(spec: &str) -> bool {
    matches!(spec.split(':').next(), Some("root" | "0" | ""))
}

/// The task's users (task, step and Dockerfile `USER` values other than root) with the uids
/// they get in the trial: a number as written, a name the first uid from 1000 up that the
/// host's user database does not use (as `useradd` picks in an image), in name order. Their
/// entries are added to the trial's copy of `/etc/passwd` and `/etc/group`.
fn trial_users(task: &Task, paths: &TrialPaths) -> Result<BTreeMap<String, TrialUser>, String> {
    let mut specs: Vec<&str> = [task.agent_user.as_deref(), task.verifier_user.as_deref()]
        .into_iter()
        .chain(
            task.steps
                .iter()
                .flat_map(|s| [s.agent_user.as_deref(), s.verifier_user.as_deref()]),
        )
        .flatten()
        .filter(|u| !is_root(u))
        .collect();
    specs.sort();
    specs.dedup();
    if specs.is_empty() {
        return Ok(BTreeMap::new());
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let group = std::fs::read_to_string("/etc/group").unwrap_or_default();
    let ids = |db: &str| -> Vec<(String, u32)> {
        db.lines()
            .filter_map(|l| {
                let mut f = l.split(':');
                let name = f.next()?.to_string();
                let id = f.nth(1)?.parse().ok()?;
                Some((name, id))
            })
            .collect()
    };
    let host_users = ids(&passwd);
    let host_groups = ids(&group);
    let valid = |n: &str| {
        !n.is_empty()
            && n.len() <= 32
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            && !n.starts_with('-')
    };
    let mut next = 1000u32;
    let mut fresh = |taken: &dyn Fn(u32) -> bool| {
        while taken(next) {
            next += 1;
        }
        next += 1;
        next - 1
    };
    let mut users = BTreeMap::new();
    let mut passwd_extra = String::new();
    let mut group_extra = String::new();
    for spec in specs {
        let (name, group_name) = match spec.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (spec, None),
        };
        if !valid(name) || group_name.is_some_and(|g| !valid(g)) {
            return Err(format!(
                "user '{spec}' is not a user name or uid (letters, digits, '_', '-', '.')"
            ));
        }
        let uid = match name.parse::<u32>() {
            // bwrap takes any uid, but (uid_t)-1 and beyond 2^31 are nobody's.
            Ok(n) if n >= 1 << 31 => return Err(format!("user '{spec}': uid out of range")),
            Ok(n) => n,
            Err(_) => fresh(&|id| {
                host_users.iter().any(|(_, u)| *u == id)
                    || users.values().any(|u: &TrialUser| u.uid == id)
            }),
        };
        let gid = match group_name {
            None => uid,
            Some(g) => match g.parse::<u32>() {
                Ok(n) if n >= 1 << 31 => return Err(format!("user '{spec}': gid out of range")),
                Ok(n) => n,
                Err(_) => host_groups
                    .iter()
                    .find(|(n, _)| n == g)
                    .map(|(_, id)| *id)
                    .unwrap_or(uid),
            },
        };
        let shown = if name.parse::<u32>().is_ok() {
            format!("u{uid}")
        } else {
            name.to_string()
        };
        if !host_users.iter().any(|(n, _)| *n == shown) {
            passwd_extra.push_str(&format!("{shown}:x:{uid}:{gid}::/root:/bin/bash\n"));
        }
        if !host_groups.iter().any(|(_, id)| *id == gid) {
            group_extra.push_str(&format!("{shown}:x:{gid}:\n"));
        }
        users.insert(
            spec.to_string(),
            TrialUser {
                name: shown,
                uid,
                gid,
            },
        );
    }
    let with_newline = |s: &str| {
        if s.is_empty() || s.ends_with('\n') {
            s.to_string()
        } else {
            format!("{s}\n")
        }
    };
    std::fs::create_dir_all(&paths.identity)
        .and_then(|()| {
            std::fs::write(
                paths.identity.join("passwd"),
                with_newline(&passwd) + &passwd_extra,
            )
        })
        .and_then(|()| {
            std::fs::write(
                paths.identity.join("group"),
                with_newline(&group) + &group_extra,
            )
        })
        .map_err(|e| format!("cannot write the trial's user database: {e}"))?;
    Ok(users)
}

/// The job was interrupted while this trial ran: not scored.
fn cancelled(r: &mut TrialResult) -> PhaseError {
    infra(
        r,
        "CancelledError",
        "the job was interrupted (SIGINT or SIGTERM) while this trial ran".into(),
    )
}

fn infra(r: &mut TrialResult, kind: &'static str, message: String) -> PhaseError {
    r.infrastructure_error = true;
    (kind, message)
}

fn trial_phases(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    let iso = &settings.isolation;
    let ctx = task.environment.build_context.as_deref();
    paths.create().map_err(|e| {
        infra(
            r,
            "EnvironmentSetupError",
            format!("{}: cannot create trial folders: {e}", paths.root.display()),
        )
    })?;
    write_config(task, paths, settings);

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
            // The Dockerfile's failing RUN names its line there.
            let failed = failed_run_line(&paths.root.join("setup.log"))
                .map(|l| format!(" ({l})"))
                .unwrap_or_default();
            return Err(infra(
                r,
                "EnvironmentSetupError",
                format!(
                    "the setup script {why}{failed}; see {}",
                    paths.root.join("setup.log").display()
                ),
            ));
        }
    }
    // Create the working dir before the agent runs (WORKDIR may be below /app).
    if let Some(host) = paths.host_path(&task.environment.workdir) {
        let _ = std::fs::create_dir_all(host);
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
        let pass = Pass {
            instruction: &task.instruction,
            agent_limit: task
                .agent_timeout
                .map_or(NO_AGENT_LIMIT, |t| scaled(t, settings.timeout_multiplier)),
            solution_dir: task.solution_dir.as_deref(),
            tests: task.tests_dir.iter().cloned().collect(),
            verifier_env: task.verifier_env.clone(),
            verifier_timeout: task.verifier_timeout,
            agent_user: user(task.agent_user.as_deref()),
            verifier_user: user(task.verifier_user.as_deref()),
        };
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
        r,
        process_time,
    )
}

/// The last "the Dockerfile's line N failed" line of a setup log (its last 64 KiB).
fn failed_run_line(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = File::open(log).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(64 << 10))).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("baton: "))
        .filter(|l| l.starts_with("the Dockerfile's line"))
        .map(|l| l.chars().take(300).collect())
}

/// Runs the steps of a multi-step task in order in the one environment, as Harbor's
/// `MultiStepTrial` does: each step's `workdir/` files (and its `setup.sh`), its agent with
/// its own instruction, and its verifier with the task's tests and the step's over them.
/// A step that errors without a reward, or whose rewards are below its `min_reward`, ends
/// the trial. The trial's reward is the steps' mean per key (or the last step's).
#[allow(clippy::too_many_arguments)]
fn run_steps(
    task: &Task,
    paths: &TrialPaths,
    settings: &TrialSettings,
    env: &BTreeMap<String, String>,
    agent_env: &BTreeMap<String, String>,
    users: &BTreeMap<String, TrialUser>,
    r: &mut TrialResult,
    process_time: &mut Duration,
) -> Result<(), PhaseError> {
    let mut records: Vec<StepRecord> = Vec::new();
    let mut first_error: Option<PhaseError> = None;
    let mut agent_started = None;
    let mut agent_finished = None;
    let mut verifier_started = None;
    let mut verifier_finished = None;
    for step in &task.steps {
        let step_root = paths.root.join("steps").join(&step.name);
        let step_paths = TrialPaths {
            agent_logs: step_root.join("agent"),
            verifier_logs: step_root.join("verifier"),
            artifacts: step_root.join("artifacts"),
            ..paths.clone()
        };
        // Each step's verifier sees only its own tests, and the next agent none of them.
        let _ = remove_tree(&paths.tests);
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
        let outcome = (|| {
            for d in [
                &step_paths.agent_logs,
                &step_paths.verifier_logs,
                &step_paths.artifacts,
            ] {
                std::fs::create_dir_all(d).map_err(|e| {
                    infra(
                        &mut sr,
                        "EnvironmentSetupError",
                        format!("{}: cannot create the step's folders: {e}", d.display()),
                    )
                })?;
            }
            let user = |spec: Option<&str>| spec.and_then(|s| users.get(s));
            let agent_user = user(step.agent_user.as_deref().or(task.agent_user.as_deref()));
            step_setup(
                task,
                step,
                &step_paths,
                settings,
                env,
                agent_user,
                &mut sr,
                process_time,
            )?;
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
            };
            agent_and_verifier(
                task,
                &step_paths,
                settings,
                env,
                agent_env.clone(),
                &pass,
                &mut sr,
                process_time,
            )
        })();
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
        let timing = |t: &Option<PhaseTiming>| t.as_ref().map(TimingInfo::from);
        if let Some(a) = &sr.timings.agent_execution {
            agent_started.get_or_insert(a.started_at);
            agent_finished = Some(a.finished_at);
        }
        if let Some(v) = &sr.timings.verifier {
            verifier_started.get_or_insert(v.started_at);
            verifier_finished = Some(v.finished_at);
        }
        let record = StepRecord {
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
        };
        // The trial's totals are the steps' sums; its environment setup is the first's.
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
        let stop = match &record.verifier_result {
            None => record.exception_info.is_some(),
            Some(_) => step.min_reward.iter().any(|(key, threshold)| {
                let actual = if key == "reward" {
                    record.reward
                } else {
                    sr.verifier_rewards.get(key).copied()
                };
                actual.is_none_or(|a| a < *threshold)
            }),
        };
        records.push(record);
        if stop {
            break;
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
    step: &super::task::Step,
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

/// The agent, then the verifier, of one pass; the agent's failure (timeout, exit code) is
/// reported after the verifier has run, as Harbor grades such trials too.
#[allow(clippy::too_many_arguments)]
fn agent_and_verifier(
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
    let _ = std::fs::write(paths.agent_logs.join("instruction.md"), &instruction);
    let agent_limit = pass.agent_limit;
    let stdout_path = paths.agent_logs.join("stdout.txt");
    // Lives until the agent has exited: the agent's only way to its model endpoint.
    let mut gateway: Option<Gateway> = None;
    let agent_user = pass.agent_user.cloned();
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
            agent_env.insert("INSTRUCTION".into(), instruction.clone());
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
            // The trial's HOME is fresh: the hooks and MCP servers come in as its user's own
            // files, so they work in the trial as in any `--exec` run.
            for (file, name) in [(hooks, "hooks.json"), (mcp_config, "config.toml")] {
                let Some(file) = file else {
                    continue;
                };
                let dest = paths.home.join(".config/baton").join(name);
                let copied = dest
                    .parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|_| std::fs::copy(file, &dest).map(|_| ()));
                copied.map_err(|e| {
                    infra(
                        r,
                        "AgentSetupError",
                        format!("cannot install {} as {name}: {e}", file.display()),
                    )
                })?;
            }
            // Plain folders share the host network: the gateway listens on its loopback then.
            let host_network =
                task.allow_internet || iso.kind == super::isolation::IsolationKind::Plain;
            let agent = baton_agent_setup(extra_args, pass_env, host_network)
                .map_err(|e| infra(r, "AgentSetupError", e.to_string()))?;
            agent_env.extend(agent.env);
            gateway = agent.gateway;
            let mut args = vec![
                "--exec".to_string(),
                "--json".into(),
                "--sandbox".into(),
                "off".into(),
                "--approval".into(),
                "full-auto".into(),
                "-C".into(),
                task.environment.workdir.clone(),
                "--session-dir".into(),
                "/logs/agent/sessions".into(),
                // Nobody resumes a trial's session: its summary hop would only delay the end.
                "--defer-summary".into(),
            ];
            args.extend(agent.extra_args);
            // After `--` the instruction is the prompt even when it starts with a dash.
            args.push("--".into());
            args.push(instruction.clone());
            (
                Some(binary.to_string_lossy().into_owned()),
                args,
                task.allow_internet,
                false,
            )
        }
    };
    // The agent and the verifier share one sandbox, as they share one container in Docker,
    // under bwrap: what the agent leaves running (a server it was asked to start) is there for
    // the verifier, and ends with it.
    let mut container: Option<Container> = None;
    if let Some(program) = program {
        let control = paths.root.join("work").join("control");
        // Root only: the verifier's /tests is made in the sandbox's own root folder when it
        // starts (the agent never sees one), which only root may write.
        if iso.kind == IsolationKind::Bwrap
            && pass.agent_user.is_none()
            && pass.verifier_user.is_none()
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
        let logs = || Ok((File::create(&stdout_path)?, File::create(&stderr_path)?));
        if let Err(e) = logs() {
            return Err(infra(
                r,
                "AgentSetupError",
                format!("cannot create agent logs: {e}"),
            ));
        }
        let outcome = match container.as_mut() {
            Some(c) => {
                let job_env = iso.sandbox_env(agent_user.as_ref(), &agent_env);
                let job = Job {
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
        match &outcome.exit {
            Exit::Code(c) => r.agent_exit.exit_code = Some(*c),
            Exit::Signal(s) => r.agent_exit.signal = Some(*s),
            Exit::TimedOut => r.agent_exit.timed_out = true,
            Exit::SpawnFailed(m) => return Err(infra(r, "AgentSpawnError", m.clone())),
            Exit::Cancelled => return Err(cancelled(r)),
        }
        record_events(pass.instruction, paths, settings, r, &stdout_path);
    } else {
        let now = Utc::now();
        r.timings.agent_execution = Some(PhaseTiming {
            started_at: now,
            finished_at: now,
            duration_sec: 0.0,
        });
    }
    let _ = remove_tree(&paths.solution);

    // Verifier: the tests appear only now.
    let verify = run_verifier(task, pass, paths, settings, env, container, process_time, r);
    let agent_error = if r.agent_exit.timed_out {
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
    };
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

/// What the `baton` agent is given instead of the host's key and endpoint.
struct BatonAgentSetup {
    /// `BATON_*` variables without any that holds a credential, and the `--pass-env` ones; the
    /// endpoint, when it came from the environment, points at the gateway.
    env: BTreeMap<String, String>,
    /// The extra arguments, with `--endpoint` pointing at the gateway.
    extra_args: Vec<String>,
    gateway: Option<Gateway>,
}

/// Whether a variable's name says it holds a credential; such variables never enter a trial.
pub(crate) fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

/// The value of `--flag V` or `--flag=V` in `args` (the last one wins, as in clap).
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            found = it.next().map(String::as_str);
        } else if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            found = Some(v);
        }
    }
    found
}

/// `args` with every `--flag` value replaced by `value`.
fn replace_flag(args: &[String], flag: &str, value: &str) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == flag {
            out.push(a.clone());
            if it.next().is_some() {
                out.push(value.to_string());
            }
        } else if a.starts_with(&format!("{flag}=")) {
            out.push(format!("{flag}={value}"));
        } else {
            out.push(a.clone());
        }
    }
    out
}

/// Finds the endpoint and key the agent would use (flags first, then `BATON_*`), starts a
/// gateway that holds the key, and gives the agent the gateway's URL and no credential.
fn baton_agent_setup(
    extra_args: &[String],
    pass_env: &[String],
    host_network: bool,
) -> Result<BatonAgentSetup, GatewayError> {
    let key_var = flag_value(extra_args, "--api-key-env")
        .map(str::to_string)
        .or_else(|| std::env::var("BATON_API_KEY_ENV").ok())
        .unwrap_or_else(|| "BATON_API_KEY".into());
    let key = std::env::var(&key_var)
        .ok()
        .filter(|k| !k.trim().is_empty());
    let mut env = BTreeMap::new();
    for (k, v) in std::env::vars() {
        // `--pass-env` names are the user's explicit choice; the automatic `BATON_*` set
        // leaves out anything that looks like a credential.
        let wanted = pass_env.contains(&k) || (k.starts_with("BATON_") && !is_secret_name(&k));
        if wanted && k != key_var && k != "BATON_API_KEY" {
            env.insert(k, v);
        }
    }
    let from_args = flag_value(extra_args, "--endpoint").map(str::to_string);
    let endpoint = from_args
        .clone()
        .or_else(|| env.get("BATON_ENDPOINT").cloned());
    let Some(endpoint) = endpoint else {
        return Ok(BatonAgentSetup {
            env,
            extra_args: extra_args.to_vec(),
            gateway: None,
        });
    };
    let gateway = Gateway::start(&endpoint, key, host_network)?;
    let url = gateway.trial_url().to_string();
    if env.contains_key("BATON_ENDPOINT") {
        env.insert("BATON_ENDPOINT".into(), url.clone());
    }
    let extra_args = if from_args.is_some() {
        replace_flag(extra_args, "--endpoint", &url)
    } else {
        extra_args.to_vec()
    };
    Ok(BatonAgentSetup {
        env,
        extra_args,
        gateway: Some(gateway),
    })
}

/// The verifier of one pass: in the agent's sandbox when there is one (`container`, ended
/// here before anything the trial wrote is read), else in a sandbox of its own.
#[allow(clippy::too_many_arguments)]
fn run_verifier(
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
    // With the agent's processes still running, the tests are staged where the trial cannot
    // write and copied into /tests from inside it: a link a process plants in /tests while
    // the runner copies must resolve in the trial, never on the host.
    let tests_dest = match &container {
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
    let logs = || Ok((File::create(&out_path)?, File::create(&err_path)?));
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
            let prelude = format!(
                "rm -rf /tests && mkdir /tests && cp -a --no-preserve=ownership {}/in/tests/. /tests/ || exit 126",
                super::container::CONTROL
            );
            let job = Job {
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
    let output = std::fs::read_to_string(&out_path).unwrap_or_default();
    match reward::read(
        &paths.verifier_logs,
        &output,
        task.format == TaskFormat::Tb1,
    ) {
        Ok(v) if v.reward == 0.0 && !tests_ran(&v, &output, &paths.verifier_logs) => {
            let stderr = read_tail(&err_path, 256 << 10);
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
                outcome.exit,
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
        || ["ctrf.json", "junit.xml", "report.xml"]
            .iter()
            .any(|f| logs.join(f).is_file())
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

/// The last `max` bytes of a log file, as text.
fn read_tail(path: &Path, max: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(max))).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = f.by_ref().take(max).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

fn record_events(
    instruction: &str,
    paths: &TrialPaths,
    settings: &TrialSettings,
    r: &mut TrialResult,
    stdout: &Path,
) {
    let text = std::fs::read_to_string(stdout).unwrap_or_default();
    let evs = events::parse_lines(&text);
    if evs.is_empty() {
        return;
    }
    let EventStats {
        tokens,
        routes,
        route_decisions,
        hops,
        hop_latency,
        tool_calls,
        turn_status,
        ..
    } = events::stats(&evs);
    r.tokens = tokens;
    r.routes = routes;
    r.route_decisions = route_decisions;
    r.hops = hops;
    r.hop_latency = hop_latency;
    r.tool_calls = tool_calls;
    r.turn_status = turn_status;
    // The summaries' texts are in the session file the agent wrote under its logs.
    let texts =
        atif::SessionTexts::find(&paths.agent_logs.join("sessions"), &evs).unwrap_or_default();
    let traj = atif::trajectory(
        &evs,
        &texts,
        instruction,
        settings.agent.name(),
        env!("CARGO_PKG_VERSION"),
    );
    let path = paths.agent_logs.join("trajectory.json");
    if let Ok(json) = serde_json::to_string_pretty(&traj)
        && write_fresh(&path, json.as_bytes()).is_ok()
    {
        r.trajectory_path = Some(path);
    }
}

/// The trial's `config.json`, in Harbor's `TrialConfig` shape (the task by path, the trial's
/// name and folder, the agent by name, the timeout multiplier), which Harbor's own model
/// reads; what only baton knows is under `baton`.
fn write_config(task: &Task, paths: &TrialPaths, settings: &TrialSettings) {
    let config = serde_json::json!({
        "schema_version": 1,
        "task": { "path": task.dir },
        "trial_name": paths.root.file_name().map(|n| n.to_string_lossy().into_owned()),
        "trials_dir": paths.root.parent(),
        "timeout_multiplier": settings.timeout_multiplier,
        "agent": { "name": settings.agent.name() },
        "baton": {
            "task": task.name,
            "format": task.format.as_str(),
            "agent_timeout_sec": task.agent_timeout.map(|t| t.as_secs_f64()),
            "verifier_timeout_sec": task.verifier_timeout.as_secs_f64(),
            "allow_internet": task.allow_internet,
            "workdir": task.environment.workdir,
            "isolation": settings.isolation.kind.as_str(),
        },
    });
    if let Ok(json) = serde_json::to_string_pretty(&config) {
        let _ = std::fs::write(paths.root.join("config.json"), json);
    }
}

/// Plain mode only: scripts copied into the trial refer to `/app`, `/tests` …; point them at
/// the trial's folders. Binary and large files are left alone.
fn rewrite_text_files(iso: &Isolation, paths: &TrialPaths, ctx: Option<&Path>, dir: &Path) {
    if iso.kind == super::isolation::IsolationKind::Bwrap {
        return;
    }
    for entry in walk_files(dir) {
        let Ok(meta) = std::fs::metadata(&entry) else {
            continue;
        };
        if meta.len() > 1 << 20 {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&entry) {
            let new = iso.rewrite(paths, ctx, &text);
            if new != text {
                let _ = std::fs::write(&entry, new);
            }
        }
    }
}

fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out
}

/// SHA-256 over the task folder's relative file names and contents, in name order.
fn task_checksum(dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut files = walk_files(dir);
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let rel = f.strip_prefix(dir).unwrap_or(&f);
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        if let Ok(bytes) = std::fs::read(&f) {
            h.update(&bytes);
        }
        h.update([0]);
    }
    format!("{:x}", h.finalize())
}

/// Harbor's `TrialConfig` for one trial: the task by path, the timeouts, the agent by name.
fn harbor_trial_config(
    task: &Task,
    trial_name: &str,
    trial_dir: &Path,
    settings: &TrialSettings,
) -> serde_json::Value {
    serde_json::json!({
        "task": { "path": task.dir },
        "trial_name": trial_name,
        "trials_dir": trial_dir.parent(),
        "timeout_multiplier": settings.timeout_multiplier,
        "agent": {
            "name": settings.agent.name(),
            "override_timeout_sec": task.agent_timeout.map(|t| t.as_secs_f64()),
        },
        "verifier": { "override_timeout_sec": task.verifier_timeout.as_secs_f64() },
        "artifacts": task.artifacts.iter().map(|a| serde_json::json!({
            "source": a.source,
            "destination": a.destination,
        })).collect::<Vec<_>>(),
    })
}

/// Writes `bytes` to a new file at `path` in a folder the trial could write: whatever it left
/// there (a link to a host file) is removed first, never written through.
fn write_fresh(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => remove_tree(path)?,
        Ok(_) => std::fs::remove_file(path)?,
        Err(_) => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)?
        .write_all(bytes)
}

/// Makes `root/rel` free for a copy: no folder on the way is a link (`Err` then), and
/// whatever is at it is removed.
fn clear_destination(root: &Path, rel: &str) -> Result<(), ()> {
    let mut at = root.to_path_buf();
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return Ok(()),
            Ok(m) if i + 1 == parts.len() => {
                let removed = if m.is_dir() {
                    remove_tree(&at)
                } else {
                    std::fs::remove_file(&at)
                };
                return removed.map_err(|_| ());
            }
            Ok(m) if m.file_type().is_symlink() || !m.is_dir() => return Err(()),
            Ok(_) => {}
        }
    }
    Ok(())
}

/// Copies the task's `artifacts` out of the trial's folders into `artifacts/`, with a
/// `manifest.json` saying what was found. Links are not followed; paths outside the trial's
/// folders are not read.
fn collect_artifacts(artifacts: &[super::task::Artifact], paths: &TrialPaths) {
    if artifacts.is_empty() {
        return;
    }
    let mut manifest = Vec::new();
    for a in artifacts {
        let dest = paths.artifacts.join(&a.destination);
        // A link the agent planted on the way (`/app/link -> /`) must not lead out.
        let inside = |p: &Path| {
            let root = std::fs::canonicalize(&paths.root).unwrap_or_else(|_| paths.root.clone());
            p.parent()
                .and_then(|d| std::fs::canonicalize(d).ok())
                .is_some_and(|d| d.starts_with(&root))
        };
        let status = match paths.host_path(a.source.trim_end_matches('/')) {
            // The artifacts folder is the agent's to write (`/logs/artifacts`): a link it
            // left on the way to the destination must not lead the copy out.
            _ if clear_destination(&paths.artifacts, &a.destination).is_err() => {
                "the destination is a link the trial made".to_string()
            }
            None => "outside the trial's folders".to_string(),
            Some(src) if !inside(&src) => {
                "outside the trial's folders (through a link)".to_string()
            }
            Some(src) => match std::fs::symlink_metadata(&src) {
                Err(_) => "missing".to_string(),
                Ok(m) if m.is_dir() => match copy_tree(&src, &dest, &[]) {
                    Ok(()) => "ok".to_string(),
                    Err(e) => e.to_string(),
                },
                Ok(m) if m.is_file() => {
                    let copied = dest
                        .parent()
                        .map_or(Ok(()), std::fs::create_dir_all)
                        .and_then(|()| std::fs::copy(&src, &dest).map(|_| ()));
                    match copied {
                        Ok(()) => "ok".to_string(),
                        Err(e) => e.to_string(),
                    }
                }
                Ok(_) => "not a file or folder (links are not followed)".to_string(),
            },
        };
        manifest.push(serde_json::json!({
            "source": a.source,
            "destination": a.destination,
            "status": status,
        }));
    }
    if let Ok(json) = serde_json::to_string_pretty(&manifest) {
        let _ = write_fresh(&paths.artifacts.join("manifest.json"), json.as_bytes());
    }
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
