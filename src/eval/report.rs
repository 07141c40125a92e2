//! Scores a job the way the TB leaderboard does (infrastructure errors left out, timeouts count
//! 0, mean over tasks of the per-task mean) and prints the summary table.

use std::collections::BTreeMap;
use std::io::Write;

use serde::Serialize;

use super::events::Tokens;
use super::task::Skipped;
use super::trial::TrialResult;

/// One task's row.
#[derive(Debug, Clone, Serialize)]
pub struct TaskScore {
    pub task: String,
    pub n_trials: usize,
    /// Trials with a reward (not infrastructure errors).
    pub n_scored: usize,
    pub n_errors: usize,
    pub n_passed: usize,
    pub n_timeouts: usize,
    /// Mean reward over scored trials; `None` when every trial errored.
    pub mean_reward: Option<f64>,
    pub mean_agent_sec: f64,
    pub tokens: Tokens,
}

/// The job's totals.
#[derive(Debug, Clone, Serialize)]
pub struct Score {
    /// Mean over scored tasks of their mean reward.
    pub accuracy: Option<f64>,
    pub stderr: Option<f64>,
    /// How `stderr` was computed.
    pub stderr_method: &'static str,
    pub n_tasks_scored: usize,
    /// Mean over every task the job meant to run (tasks whose trials all errored, and tasks
    /// that cannot load, count 0; skipped tasks are left out): what `--min-score` checks.
    pub strict_accuracy: Option<f64>,
    pub n_trials: usize,
    /// Trials with a reward: the denominator of the headline `passed / scored`.
    pub n_scored: usize,
    pub n_passed: usize,
    pub n_failed: usize,
    pub n_errors: usize,
    /// Task folders that cannot be loaded (error rows; no trial ran).
    pub n_load_errors: usize,
    /// Tasks baton cannot run here (Docker image, GPU, …).
    pub n_skipped: usize,
    pub n_timeouts: usize,
    /// Tasks with at least one passing trial, over scored tasks.
    pub pass_at_k: Option<f64>,
    pub tokens: Tokens,
    pub mean_runner_overhead_sec: f64,
}

pub fn task_scores(trials: &[TrialResult]) -> Vec<TaskScore> {
    let mut by_task: BTreeMap<&str, Vec<&TrialResult>> = BTreeMap::new();
    for t in trials {
        by_task.entry(&t.task_name).or_default().push(t);
    }
    by_task
        .into_iter()
        .map(|(task, ts)| {
            let scored: Vec<f64> = ts.iter().filter_map(|t| t.reward).collect();
            let mut tokens = Tokens::default();
            for t in &ts {
                tokens.add(t.tokens);
            }
            let agent_secs: f64 = ts
                .iter()
                .map(|t| {
                    t.timings
                        .agent_execution
                        .as_ref()
                        .map_or(0.0, |p| p.duration_sec)
                })
                .sum();
            TaskScore {
                task: task.to_string(),
                n_trials: ts.len(),
                n_scored: scored.len(),
                n_errors: ts.len() - scored.len(),
                n_passed: ts.iter().filter(|t| t.passed()).count(),
                n_timeouts: ts.iter().filter(|t| t.timed_out()).count(),
                mean_reward: (!scored.is_empty())
                    .then(|| scored.iter().sum::<f64>() / scored.len() as f64),
                mean_agent_sec: agent_secs / ts.len() as f64,
                tokens,
            }
        })
        .collect()
}

pub fn score(
    tasks: &[TaskScore],
    trials: &[TrialResult],
    n_skipped: usize,
    n_load_errors: usize,
) -> Score {
    let scored: Vec<&TaskScore> = tasks.iter().filter(|t| t.mean_reward.is_some()).collect();
    let n = scored.len();
    let p: Vec<f64> = scored.iter().filter_map(|t| t.mean_reward).collect();
    let accuracy = (n > 0).then(|| p.iter().sum::<f64>() / n as f64);
    // TB's formula needs ≥ 2 trials per task; with one trial each, use the spread across tasks.
    let (stderr, stderr_method) = if n > 0 && scored.iter().all(|t| t.n_scored >= 2) {
        let sum: f64 = scored
            .iter()
            .map(|t| {
                let pt = t.mean_reward.unwrap_or(0.0);
                pt * (1.0 - pt) / (t.n_scored as f64 - 1.0)
            })
            .sum();
        (
            Some(sum.sqrt() / n as f64),
            "tb: sqrt(sum_t p(1-p)/(n_t-1)) / N",
        )
    } else if n >= 2 {
        let mean = accuracy.unwrap_or(0.0);
        let var = p.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n as f64 - 1.0);
        (
            Some((var / n as f64).sqrt()),
            "across tasks: sd(p_t) / sqrt(N)",
        )
    } else {
        (None, "none: fewer than 2 tasks")
    };
    let mut tokens = Tokens::default();
    for t in tasks {
        tokens.add(t.tokens);
    }
    let n_errors = trials.iter().filter(|t| t.reward.is_none()).count();
    let n_passed = trials.iter().filter(|t| t.passed()).count();
    let meant = tasks.len() + n_load_errors;
    let strict_accuracy = (meant > 0).then(|| {
        tasks
            .iter()
            .map(|t| t.mean_reward.unwrap_or(0.0) * t.n_scored as f64 / t.n_trials.max(1) as f64)
            .sum::<f64>()
            / meant as f64
    });
    Score {
        accuracy,
        stderr,
        stderr_method,
        n_tasks_scored: n,
        strict_accuracy,
        n_trials: trials.len(),
        n_scored: trials.len() - n_errors,
        n_load_errors,
        n_skipped,
        n_passed,
        n_failed: trials.len() - n_errors - n_passed,
        n_errors,
        n_timeouts: trials.iter().filter(|t| t.timed_out()).count(),
        pass_at_k: (n > 0)
            .then(|| scored.iter().filter(|t| t.n_passed > 0).count() as f64 / n as f64),
        tokens,
        mean_runner_overhead_sec: if trials.is_empty() {
            0.0
        } else {
            trials
                .iter()
                .map(|t| t.timings.runner_overhead_sec)
                .sum::<f64>()
                / trials.len() as f64
        },
    }
}

/// The score line: `passed / scored`, with the errored (trials that never got a reward, and
/// tasks that cannot load) and skipped counts beside it, always.
pub fn headline(score: &Score) -> String {
    let pct = if score.n_scored > 0 {
        format!(
            " ({:.1}%)",
            score.n_passed as f64 * 100.0 / score.n_scored as f64
        )
    } else {
        String::new()
    };
    let acc = score
        .accuracy
        .map_or("—".to_string(), |a| format!("{:.1}%", a * 100.0));
    let se = score
        .stderr
        .map_or(String::new(), |s| format!(" ± {:.1}", s * 100.0));
    format!(
        "score {} passed / {} scored{pct}; {} errored ({} trial(s) without a reward, {} task(s) that cannot load); {} skipped; mean reward {acc}{se} over {} task(s); {} failed, {} timeout(s)",
        score.n_passed,
        score.n_scored,
        score.n_errors + score.n_load_errors,
        score.n_errors,
        score.n_load_errors,
        score.n_skipped,
        score.n_tasks_scored,
        score.n_failed,
        score.n_timeouts
    )
}

fn fmt_tokens(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

/// Writes the summary table.
pub fn print_table(
    out: &mut dyn Write,
    tasks: &[TaskScore],
    score: &Score,
    skipped: &[Skipped],
    load_errors: &[super::job::LoadErrorEntry],
    wall_sec: f64,
    job_dir: &std::path::Path,
) -> std::io::Result<()> {
    // A task's name is the task's to choose: escape sequences in it never reach the terminal.
    let names: Vec<String> = tasks
        .iter()
        .map(|t| crate::protocol::terminal_safe_line(&t.task).into_owned())
        .collect();
    let width = names
        .iter()
        .map(|n| n.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    writeln!(
        out,
        "{:<width$}  {:>6}  {:>6}  {:>6}  {:>8}  {:>8}  {:>9}",
        "task", "trials", "passed", "errors", "reward", "agent s", "tokens"
    )?;
    writeln!(out, "{}", "-".repeat(width + 56))?;
    for (t, name) in tasks.iter().zip(&names) {
        let reward = t.mean_reward.map_or("—".to_string(), |r| format!("{r:.3}"));
        let tokens = format!(
            "{}/{}",
            fmt_tokens(t.tokens.input),
            fmt_tokens(t.tokens.output)
        );
        writeln!(
            out,
            "{:<width$}  {:>6}  {:>6}  {:>6}  {:>8}  {:>8.1}  {:>9}",
            name, t.n_trials, t.n_passed, t.n_errors, reward, t.mean_agent_sec, tokens
        )?;
    }
    writeln!(out, "{}", "-".repeat(width + 56))?;
    writeln!(out, "{}", headline(score))?;
    writeln!(
        out,
        "time {:.1} s wall; tokens {} in ({} cached) / {} out; runner overhead {:.3} s/trial",
        wall_sec,
        fmt_tokens(score.tokens.input),
        fmt_tokens(score.tokens.cached),
        fmt_tokens(score.tokens.output),
        score.mean_runner_overhead_sec
    )?;
    for s in skipped {
        writeln!(
            out,
            "skipped {}: {}",
            crate::protocol::terminal_safe_line(&s.name),
            crate::protocol::terminal_safe_line(&s.reason)
        )?;
    }
    for e in load_errors {
        writeln!(
            out,
            "error {}: cannot load: {}",
            crate::protocol::terminal_safe_line(&e.task),
            crate::protocol::terminal_safe_line(&e.error)
        )?;
    }
    writeln!(out, "results: {}", job_dir.join("result.json").display())
}
