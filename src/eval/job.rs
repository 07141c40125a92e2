//! A job: every (task, trial) pair run by a bounded pool of worker threads into one job folder,
//! then scored and written to `result.json`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::error::EvalError;
use super::progress::{Finish, Progress};
use super::report::{self, Score, TaskScore};
use super::task::{Skipped, Task};
use super::trial::{TrialResult, TrialSettings, run_trial};

/// What to run.
pub struct JobConfig {
    pub tasks: Vec<Task>,
    pub skipped: Vec<Skipped>,
    pub trials: usize,
    pub concurrency: usize,
    /// The job folder (created).
    pub job_dir: PathBuf,
    pub settings: TrialSettings,
    pub progress: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct SkippedEntry {
    pub task: String,
    pub task_dir: PathBuf,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct IsolationInfo {
    pub kind: &'static str,
    /// Why bwrap is not used; absent when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback_reason: Option<String>,
}

/// The job's `result.json`.
#[derive(Debug, Clone, Serialize)]
pub struct JobReport {
    pub id: String,
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
    pub trials: Vec<TrialResult>,
}

/// A fresh folder name under `out`: the UTC time, with a suffix if it is taken.
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
    let mut queue = VecDeque::new();
    for (ti, task) in cfg.tasks.iter().enumerate() {
        for k in 0..cfg.trials {
            let name = if cfg.trials == 1 {
                task.name.clone()
            } else {
                format!("{}__{}", task.name, k + 1)
            };
            queue.push_back((ti, name));
        }
    }
    let total = queue.len();
    let progress = Progress::new(total, cfg.progress);
    let renderer = progress.spawn_renderer();
    let queue = Arc::new(Mutex::new(queue));
    let results: Arc<Mutex<Vec<TrialResult>>> = Arc::new(Mutex::new(Vec::with_capacity(total)));
    let workers = cfg.concurrency.max(1).min(total.max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            let queue = Arc::clone(&queue);
            let results = Arc::clone(&results);
            let progress = progress.clone();
            let cfg = &cfg;
            scope.spawn(move || {
                loop {
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
                    progress.finished(&name, how, &detail);
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
    let mut trials = std::mem::take(&mut *results.lock().unwrap_or_else(|p| p.into_inner()));
    trials.sort_by(|a, b| a.trial_name.cmp(&b.trial_name));
    let tasks = report::task_scores(&trials);
    let score = report::score(&tasks, &trials);
    let report = JobReport {
        id: uuid::Uuid::now_v7().to_string(),
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
        finished_at: Utc::now(),
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
        trials,
    };
    let path = cfg.job_dir.join("result.json");
    let json = serde_json::to_string_pretty(&report).map_err(EvalError::SerializeResult)?;
    std::fs::write(&path, json).map_err(|source| EvalError::WriteResult { path, source })?;
    Ok(report)
}
