//! A job: every (task, trial) pair run by a bounded pool of worker threads into one job folder,
//! then scored and written to `result.json`.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::error::{EvalError, LoadError};
use super::progress::{Finish, Progress};
use super::report::{self, Score, TaskScore};
use super::task::{Skipped, Task};
use super::trial::{TrialResult, TrialSettings, run_trial};

/// What to run.
pub struct JobConfig {
    pub tasks: Vec<Task>,
    pub skipped: Vec<Skipped>,
    /// Task folders that cannot be loaded: error rows of the report.
    pub failed: Vec<LoadError>,
    pub trials: usize,
    pub concurrency: usize,
    /// The job folder (created).
    pub job_dir: PathBuf,
    pub settings: TrialSettings,
    pub progress: bool,
    /// `job_dir` is a job that was stopped: its finished trials are kept, the rest run.
    pub resume: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SkippedEntry {
    pub task: String,
    pub task_dir: PathBuf,
    pub reason: String,
}

/// A task folder that could not be loaded, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LoadErrorEntry {
    pub task: String,
    pub task_dir: PathBuf,
    pub error: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct IsolationInfo {
    pub kind: &'static str,
    /// Why bwrap is not used; absent when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
}

/// The job's `result.json`: Harbor's `JobResult` fields (`id`, `started_at`, `updated_at`,
/// `finished_at`, `n_total_trials`, `stats`), then baton's.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    pub id: String,
    pub updated_at: DateTime<Utc>,
    pub n_total_trials: usize,
    /// Harbor's `JobStats`.
    pub stats: serde_json::Value,
    /// The job was interrupted (SIGINT or SIGTERM): `trials` holds those that ran, the
    /// running ones as `CancelledError`; `n_pending_trials` never started.
    pub interrupted: bool,
    pub n_pending_trials: usize,
    pub job_dir: PathBuf,
    pub agent: &'static str,
    pub baton_version: &'static str,
    pub isolation: IsolationInfo,
    pub n_trials_per_task: usize,
    pub concurrency: usize,
    pub timeout_multiplier: f64,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub wall_sec: f64,
    pub score: Score,
    pub tasks: Vec<TaskScore>,
    pub skipped: Vec<SkippedEntry>,
    pub load_errors: Vec<LoadErrorEntry>,
    pub trials: Vec<TrialResult>,
}

/// Harbor's `ShortUUID` alphabet (no 0/1/I/O/l).
const SHORT_ID_ALPHABET: &[u8] = b"23456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// A trial's name as Harbor makes it: `<task name, at most 32 characters>__<7 random
/// characters>`; the org prefix of a name is left out (the folder is named after the trial).
pub fn trial_name(task: &str, taken: &std::collections::HashSet<String>) -> String {
    let short = task.rsplit('/').next().unwrap_or(task);
    let short: String = short
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    let short = short.trim_end_matches(['_', '-']);
    let short = if short.is_empty() || short.starts_with('.') {
        "task"
    } else {
        short
    };
    loop {
        // The low 62 bits of a v7 UUID are random.
        let mut n = uuid::Uuid::now_v7().as_u128() & ((1u128 << 62) - 1);
        let id: String = (0..7)
            .map(|_| {
                let c = SHORT_ID_ALPHABET[(n % SHORT_ID_ALPHABET.len() as u128) as usize];
                n /= SHORT_ID_ALPHABET.len() as u128;
                c as char
            })
            .collect();
        let name = format!("{short}__{id}");
        if !taken.contains(&name) {
            return name;
        }
    }
}

/// Harbor's `JobStats` of these trials: completed and errored counts, and per agent/dataset
/// the scored trials, errors, mean reward, and which trials got which reward or exception.
fn harbor_stats(
    agent: &str,
    trials: &[TrialResult],
    score: &Score,
    n_pending: usize,
) -> serde_json::Value {
    let mut reward_stats: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    let mut exception_stats: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut n_scored = 0;
    let mut n_errors = 0;
    for t in trials {
        if let Some(serde_json::Value::Object(rewards)) =
            t.verifier_result.as_ref().and_then(|v| v.get("rewards"))
        {
            n_scored += 1;
            for (k, v) in rewards {
                reward_stats
                    .entry(k.clone())
                    .or_default()
                    .entry(v.to_string())
                    .or_default()
                    .push(t.trial_name.clone());
            }
        }
        if let Some(e) = &t.exception_info {
            n_errors += 1;
            exception_stats
                .entry(e.exception_type.clone())
                .or_default()
                .push(t.trial_name.clone());
        }
    }
    let mut evals = serde_json::Map::new();
    evals.insert(
        format!("{agent}__adhoc"),
        serde_json::json!({
            "n_trials": n_scored,
            "n_errors": n_errors,
            "metrics": score.accuracy.map(|a| vec![serde_json::json!({ "mean": a })]).unwrap_or_default(),
            "pass_at_k": {},
            "reward_stats": reward_stats,
            "exception_stats": exception_stats,
        }),
    );
    serde_json::json!({
        "n_completed_trials": trials.len(),
        "n_errored_trials": n_errors,
        "n_running_trials": 0,
        "n_pending_trials": n_pending,
        "n_cancelled_trials": trials
            .iter()
            .filter(|t| t
                .exception_info
                .as_ref()
                .is_some_and(|e| e.exception_type == "CancelledError"))
            .count(),
        "n_retries": 0,
        "evals": evals,
        "n_input_tokens": score.tokens.input,
        "n_cache_tokens": score.tokens.cached,
        "n_output_tokens": score.tokens.output,
    })
}

/// The job's `config.json` (Harbor's `JobConfig` shape: the tasks by path, the agent by name).
fn write_job_config(cfg: &JobConfig) -> Result<(), EvalError> {
    let config = serde_json::json!({
        "job_name": cfg.job_dir.file_name().map(|n| n.to_string_lossy().into_owned()),
        "jobs_dir": cfg.job_dir.parent(),
        "n_attempts": cfg.trials,
        "timeout_multiplier": cfg.settings.timeout_multiplier,
        "n_concurrent_trials": cfg.concurrency,
        "agents": [{ "name": cfg.settings.agent.name() }],
        "tasks": cfg.tasks.iter().map(|t| serde_json::json!({ "path": t.dir })).collect::<Vec<_>>(),
        "baton": {
            "version": env!("CARGO_PKG_VERSION"),
            "isolation": cfg.settings.isolation.kind.as_str(),
            "skipped": cfg.skipped.iter().map(|s| serde_json::json!({ "task": s.name, "task_dir": s.dir, "reason": s.reason })).collect::<Vec<_>>(),
            "load_errors": cfg.failed.iter().map(|e| serde_json::json!({ "task": e.task_name(), "task_dir": e.dir, "error": e.to_string() })).collect::<Vec<_>>(),
        },
    });
    let path = cfg.job_dir.join("config.json");
    let json = serde_json::to_string_pretty(&config).map_err(EvalError::SerializeResult)?;
    std::fs::write(&path, json).map_err(|source| EvalError::WriteResult { path, source })
}

/// A fresh folder name under `out`: the UTC time, with a suffix if it is taken.
/// The trials of a stopped job (`--resume`) to keep: each trial folder whose `result.json`
/// reads and names one of `tasks` (by folder), unless the trial was cancelled. The other
/// trial folders (a trial running when the job was killed, a cancelled one) are removed:
/// their trials run again, as `harbor jobs resume` does.
fn finished_trials(job_dir: &Path, tasks: &[Task]) -> Vec<(usize, TrialResult)> {
    let mut kept = Vec::new();
    let Ok(entries) = std::fs::read_dir(job_dir) else {
        return kept;
    };
    let mut dirs: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let result = super::fsutil::read_task_bytes(&dir, &dir.join("result.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<TrialResult>(&b).ok());
        let task = result.as_ref().and_then(|r| {
            tasks
                .iter()
                .position(|t| t.dir == r.task_dir && t.name == r.task_name)
        });
        match (result, task) {
            (Some(r), Some(ti))
                if r.exception_info
                    .as_ref()
                    .is_none_or(|e| e.exception_type != "CancelledError") =>
            {
                kept.push((ti, r));
            }
            _ => {
                let _ = super::fsutil::remove_tree(&dir);
            }
        }
    }
    kept
}

pub fn new_job_dir(out: &Path, name: Option<&str>) -> Result<PathBuf, EvalError> {
    let base = name
        .map(str::to_string)
        .unwrap_or_else(|| Utc::now().format("%Y-%m-%d__%H-%M-%S").to_string());
    std::fs::create_dir_all(out).map_err(|source| EvalError::CreateJobDir {
        path: out.to_path_buf(),
        source,
    })?;
    for n in 0..1000 {
        let dir = if n == 0 {
            out.join(&base)
        } else {
            out.join(format!("{base}-{n}"))
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(source) => return Err(EvalError::CreateJobDir { path: dir, source }),
        }
    }
    Err(EvalError::NoFreeJobName {
        out: out.to_path_buf(),
        name: base,
    })
}

/// Runs the job and writes `job_dir/result.json`.
pub fn run_job(cfg: JobConfig) -> Result<JobReport, EvalError> {
    let started_at = Utc::now();
    let wall = Instant::now();
    write_job_config(&cfg)?;
    let mut queue = VecDeque::new();
    let mut taken = std::collections::HashSet::new();
    let kept = if cfg.resume {
        finished_trials(&cfg.job_dir, &cfg.tasks)
    } else {
        Vec::new()
    };
    for (ti, task) in cfg.tasks.iter().enumerate() {
        let done = kept.iter().filter(|(i, _)| *i == ti).count();
        taken.extend(
            kept.iter()
                .filter(|(i, _)| *i == ti)
                .map(|(_, t)| t.trial_name.clone()),
        );
        for _ in done.min(cfg.trials)..cfg.trials {
            let name = trial_name(&task.name, &taken);
            taken.insert(name.clone());
            queue.push_back((ti, name));
        }
    }
    let total = queue.len();
    let progress = Progress::new(total, cfg.progress);
    let renderer = progress.spawn_renderer();
    let queue = Arc::new(Mutex::new(queue));
    let n_kept = kept.len();
    let results: Arc<Mutex<Vec<TrialResult>>> =
        Arc::new(Mutex::new(kept.into_iter().map(|(_, t)| t).collect()));
    let workers = cfg.concurrency.max(1).min(total.max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let queue = Arc::clone(&queue);
            let results = Arc::clone(&results);
            let progress = progress.clone();
            let cfg = &cfg;
            scope.spawn(move || {
                loop {
                    // Interrupted: no new trial starts (the queue's rest is left pending).
                    if cfg
                        .settings
                        .cancel
                        .load(std::sync::atomic::Ordering::SeqCst)
                    {
                        break;
                    }
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
                    let Some((ti, name)) = next else { break };
                    progress.started();
                    let task = &cfg.tasks[ti];
                    let result = run_trial(task, &name, &cfg.job_dir.join(&name), &cfg.settings);
                    let how = match result.reward {
                        None => Finish::Error,
                        Some(_) if result.passed() => Finish::Passed,
                        Some(_) => Finish::Failed,
                    };
                    let detail = match (&result.reward, &result.exception_info) {
                        (_, Some(e)) => format!("({}: {})", e.exception_type, e.message),
                        (Some(r), None) => {
                            format!("(reward {r}, {:.1} s)", result.timings.total_sec)
                        }
                        (None, None) => String::new(),
                    };
                    // The task's whole name: trial names are cut at 32 characters, and tasks
                    // of one set often share their first 32.
                    let label = format!("{} ({name})", task.name);
                    progress.finished(&label, how, &detail);
                    results
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(result);
                }
            });
        }
    });
    progress.finish();
    if let Some(h) = renderer {
        let _ = h.join();
    }
    let n_pending = queue.lock().unwrap_or_else(|p| p.into_inner()).len();
    let interrupted = cfg
        .settings
        .cancel
        .load(std::sync::atomic::Ordering::SeqCst);
    let mut trials = std::mem::take(&mut *results.lock().unwrap_or_else(|p| p.into_inner()));
    trials.sort_by(|a, b| a.trial_name.cmp(&b.trial_name));
    let tasks = report::task_scores(&trials);
    let score = report::score(&tasks, &trials, cfg.skipped.len(), cfg.failed.len());
    let finished_at = Utc::now();
    let report = JobReport {
        id: uuid::Uuid::now_v7().to_string(),
        updated_at: finished_at,
        n_total_trials: total + n_kept,
        stats: harbor_stats(cfg.settings.agent.name(), &trials, &score, n_pending),
        interrupted,
        n_pending_trials: n_pending,
        job_dir: cfg.job_dir.clone(),
        agent: cfg.settings.agent.name(),
        baton_version: env!("CARGO_PKG_VERSION"),
        isolation: IsolationInfo {
            kind: cfg.settings.isolation.kind.as_str(),
            fallback_reason: cfg.settings.isolation.fallback_reason.clone(),
        },
        n_trials_per_task: cfg.trials,
        concurrency: workers,
        timeout_multiplier: cfg.settings.timeout_multiplier,
        started_at,
        finished_at,
        wall_sec: wall.elapsed().as_secs_f64(),
        score,
        tasks,
        skipped: cfg
            .skipped
            .iter()
            .map(|s| SkippedEntry {
                task: s.name.clone(),
                task_dir: s.dir.clone(),
                reason: s.reason.clone(),
            })
            .collect(),
        load_errors: cfg
            .failed
            .iter()
            .map(|e| LoadErrorEntry {
                task: e.task_name(),
                task_dir: e.dir.clone(),
                error: e.to_string(),
            })
            .collect(),
        trials,
    };
    let path = cfg.job_dir.join("result.json");
    let json = serde_json::to_string_pretty(&report).map_err(EvalError::SerializeResult)?;
    std::fs::write(&path, json).map_err(|source| EvalError::WriteResult { path, source })?;
    Ok(report)
}
