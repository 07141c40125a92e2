//! `baton eval` end to end: task loading (Harbor, TB1, skipped Docker tasks), the whole
//! tools/tbench suite under the oracle (100%) and nop (0%) agents, the `cmd:` agent with a
//! baton-style event stream, reward file variants, timeouts and the plain-folder fallback.

use std::path::{Path, PathBuf};

use baton::eval::cli::{EvalArgs, prepare};
use baton::eval::isolation::IsolationChoice;
use baton::eval::job::{JobReport, run_job};
use baton::eval::task::{self, Loaded, TaskFormat};

fn suite_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/tbench")
}

fn args(tasks: Vec<PathBuf>, agent: &str, out: &Path) -> EvalArgs {
    EvalArgs {
        tasks,
        agent: agent.to_string(),
        trials: 1,
        concurrency: 2,
        out: out.to_path_buf(),
        job_name: None,
        timeout_multiplier: 1.0,
        include: Vec::new(),
        exclude: Vec::new(),
        baton_bin: None,
        exec_args: Vec::new(),
        pass_env: Vec::new(),
        isolation: IsolationChoice::Auto,
        share: Vec::new(),
        keep_workdirs: false,
        min_score: None,
        no_progress: false,
        trailing_exec_args: Vec::new(),
    }
}

fn run(a: EvalArgs) -> JobReport {
    let cfg = prepare(&a).expect("job config");
    run_job(cfg).expect("job runs")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A Harbor task whose verifier passes when /app/answer.txt holds `42`.
fn answer_task(root: &Path, name: &str, agent_timeout: f64, test_sh: &str) -> PathBuf {
    let dir = root.join(name);
    write(
        &dir.join("task.toml"),
        &format!(
            "[task]\nname = \"t/{name}\"\n[agent]\ntimeout_sec = {agent_timeout}\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\n"
        ),
    );
    write(&dir.join("instruction.md"), "Write 42 into /app/answer.txt.\n");
    write(&dir.join("environment/seed.txt"), "seed\n");
    write(&dir.join("solution/solve.sh"), "echo 42 > /app/answer.txt\n");
    write(&dir.join("tests/test.sh"), test_sh);
    dir
}

const REWARD_TXT: &str = "if [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

#[test]
fn suite_oracle_scores_100_and_nop_scores_0() {
    let out = tempfile::tempdir().unwrap();
    let dirs = task::discover(&[suite_dir()]).unwrap();
    assert!(dirs.len() >= 20, "the suite has {} tasks", dirs.len());

    let started = std::time::Instant::now();
    let mut oracle_args = args(vec![suite_dir()], "oracle", out.path());
    // BATON_EVAL_ONLY=glob narrows the run while working on one task.
    if let Ok(only) = std::env::var("BATON_EVAL_ONLY") {
        oracle_args.include = vec![only];
        oracle_args.keep_workdirs = true;
        oracle_args.out = std::env::temp_dir().join("baton-eval-debug");
    }
    let narrowed = !oracle_args.include.is_empty();
    let oracle = run(oracle_args.clone());
    let oracle_wall = started.elapsed();
    for t in &oracle.trials {
        assert_eq!(
            t.reward,
            Some(1.0),
            "oracle failed {}: {:?}; see {}",
            t.task_name,
            t.exception_info,
            t.trial_dir.display()
        );
    }
    if narrowed {
        return;
    }
    assert_eq!(oracle.trials.len(), dirs.len());
    assert_eq!(oracle.score.accuracy, Some(1.0));

    let nop = run(args(vec![suite_dir()], "nop", out.path()));
    for t in &nop.trials {
        assert_eq!(t.reward, Some(0.0), "nop passed {}: {:?}", t.task_name, t.exception_info);
    }
    assert_eq!(nop.score.accuracy, Some(0.0));
    assert!(out.path().join(oracle.job_dir.file_name().unwrap()).join("result.json").is_file());

    let per_trial: f64 = oracle.trials.iter().map(|t| t.timings.runner_overhead_sec).sum::<f64>()
        / oracle.trials.len() as f64;
    let nop_total: f64 = nop.trials.iter().map(|t| t.timings.total_sec).sum::<f64>() / nop.trials.len() as f64;
    println!(
        "suite: {} tasks, isolation {}; oracle {:.0}% in {:.1} s wall at concurrency 2; nop {:.0}% in {:.1} s; runner overhead {:.3} s/trial (oracle), nop trial total {:.3} s",
        dirs.len(),
        oracle.isolation.kind,
        oracle.score.accuracy.unwrap_or(0.0) * 100.0,
        oracle_wall.as_secs_f64(),
        nop.score.accuracy.unwrap_or(0.0) * 100.0,
        nop.wall_sec,
        per_trial,
        nop_total
    );
}
