//! `baton eval` end to end: task loading (Harbor, TB1, skipped Docker tasks), the whole
//! tools/tbench suite under the oracle (100%) and nop (0%) agents, the `cmd:` agent with a
//! baton-style event stream, reward file variants, timeouts and the plain-folder fallback.

use std::path::{Path, PathBuf};

use crate::support::{MockEngine, MockReply, Script};
use baton::cli::eval::{EvalArgs, prepare};
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
        resume_job: None,
        timeout_multiplier: 1.0,
        include: Vec::new(),
        exclude: Vec::new(),
        baton_bin: None,
        exec_args: Vec::new(),
        hooks: None,
        mcp_config: None,
        pass_env: Vec::new(),
        task_env: Vec::new(),
        isolation: IsolationChoice::Auto,
        share: Vec::new(),
        keep_workdirs: false,
        min_score: None,
        no_progress: false,
        list: false,
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
    write(
        &dir.join("instruction.md"),
        "Write 42 into /app/answer.txt.\n",
    );
    write(&dir.join("environment/seed.txt"), "seed\n");
    write(
        &dir.join("solution/solve.sh"),
        "echo 42 > /app/answer.txt\n",
    );
    write(&dir.join("tests/test.sh"), test_sh);
    dir
}

const REWARD_TXT: &str = "if [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n";

#[test]
fn suite_oracle_scores_100_and_nop_scores_0() {
    let out = tempfile::tempdir().unwrap();
    let dirs = task::discover(&[suite_dir()]).unwrap();
    assert!(dirs.len() >= 20, "the suite has {} tasks", dirs.len());

    // rust-crate-fix builds a crate: without a cargo this user can run (as an unprivileged
    // user where the toolchain lives under root's 0700 home) it is skipped, loudly, and fails
    // under CI.
    let cargo_runs = std::process::Command::new("cargo")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let skipped: Vec<String> =
        crate::support::external::require("cargo (task rust-crate-fix)", cargo_runs.then_some(()))
            .map_or_else(|| vec!["rust-crate-fix".to_string()], |()| Vec::new());

    let started = std::time::Instant::now();
    let mut oracle_args = args(vec![suite_dir()], "oracle", out.path());
    oracle_args.exclude = skipped.clone();
    // BATON_EVAL_ONLY=glob narrows the run while working on one task.
    if let Ok(only) = std::env::var("BATON_EVAL_ONLY") {
        oracle_args.include = vec![only];
        oracle_args.keep_workdirs = true;
        oracle_args.out = std::env::temp_dir().join("baton-eval-debug");
    }
    // BATON_EVAL_ISOLATION=none checks the plain-folder fallback over the whole suite.
    let isolation = match std::env::var("BATON_EVAL_ISOLATION").as_deref() {
        Ok("none") => IsolationChoice::None,
        _ => IsolationChoice::Auto,
    };
    oracle_args.isolation = isolation;
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
    assert_eq!(oracle.trials.len(), dirs.len() - skipped.len());
    assert_eq!(oracle.score.accuracy, Some(1.0));

    let mut nop_args = args(vec![suite_dir()], "nop", out.path());
    nop_args.exclude = skipped;
    nop_args.isolation = isolation;
    let nop = run(nop_args);
    for t in &nop.trials {
        assert_eq!(
            t.reward,
            Some(0.0),
            "nop passed {}: {:?}",
            t.task_name,
            t.exception_info
        );
    }
    assert_eq!(nop.score.accuracy, Some(0.0));
    assert!(
        out.path()
            .join(oracle.job_dir.file_name().unwrap())
            .join("result.json")
            .is_file()
    );

    // The whole cost of a trial that does nothing: folders, two sandboxes, result files.
    let bare_root = tempfile::tempdir().unwrap();
    let bare = answer_task(
        bare_root.path(),
        "bare",
        60.0,
        "echo 0 > /logs/verifier/reward.txt\n",
    );
    let mut bare_args = args(vec![bare], "nop", out.path());
    bare_args.trials = 5;
    bare_args.concurrency = 1;
    bare_args.isolation = isolation;
    let bare_report = run(bare_args);
    let bare_total: f64 = bare_report
        .trials
        .iter()
        .map(|t| t.timings.total_sec)
        .sum::<f64>()
        / bare_report.trials.len() as f64;
    println!("empty trial (nop agent, trivial verifier): {bare_total:.3} s total per trial");
    let per_trial: f64 = oracle
        .trials
        .iter()
        .map(|t| t.timings.runner_overhead_sec)
        .sum::<f64>()
        / oracle.trials.len() as f64;
    let nop_total: f64 =
        nop.trials.iter().map(|t| t.timings.total_sec).sum::<f64>() / nop.trials.len() as f64;
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

fn load_ready(dir: &Path) -> task::Task {
    match task::load(dir).expect("loads") {
        Loaded::Ready(t) => *t,
        Loaded::Skipped(s) => panic!("{} skipped: {}", s.name, s.reason),
    }
}

fn skip_reason(dir: &Path) -> String {
    match task::load(dir).expect("loads") {
        Loaded::Skipped(s) => s.reason,
        Loaded::Ready(t) => panic!("{} was not skipped", t.name),
    }
}

#[test]
fn loads_harbor_tb1_and_skips_what_needs_docker() {
    let root = tempfile::tempdir().unwrap();
    let harbor = answer_task(root.path(), "harbor-one", 120.0, REWARD_TXT);
    let t = load_ready(&harbor);
    assert_eq!(t.format, TaskFormat::Harbor);
    assert_eq!(t.name, "harbor-one");
    assert_eq!(t.agent_timeout.map(|d| d.as_secs()), Some(120));
    assert_eq!(t.verifier_timeout.as_secs(), 30);
    assert!(!t.allow_internet);
    assert_eq!(t.test_entry, "test.sh");

    let tb1 = root.path().join("tb1-one");
    write(
        &tb1.join("task.yaml"),
        "instruction: |-\n  Write 42 into /app/answer.txt.\n  Nothing else.\nauthor_name: someone\ndifficulty: easy\ntags:\n  - demo\nmax_agent_timeout_sec: 90\nmax_test_timeout_sec: 20\n",
    );
    write(
        &tb1.join("Dockerfile"),
        "FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n",
    );
    write(&tb1.join("seed.txt"), "seed\n");
    write(&tb1.join("solution.sh"), "echo 42 > /app/answer.txt\n");
    // A pytest -rA summary, as TB1's run-tests.sh prints it.
    write(
        &tb1.join("run-tests.sh"),
        "test -f /app/seed.txt || exit 1\nif [ \"$(cat /app/answer.txt 2>/dev/null)\" = 42 ]; then s=PASSED; else s=FAILED; fi\necho '=========================== short test summary info ============================'\necho \"$s $TEST_DIR/test_outputs.py::test_answer\"\necho \"PASSED $TEST_DIR/test_outputs.py::test_seed\"\n",
    );
    write(
        &tb1.join("tests/test_outputs.py"),
        "def test_answer():\n    pass\n",
    );
    let t = load_ready(&tb1);
    assert_eq!(t.format, TaskFormat::Tb1);
    assert_eq!(
        t.instruction,
        "Write 42 into /app/answer.txt.\nNothing else."
    );
    assert_eq!(t.agent_timeout.map(|d| d.as_secs()), Some(90));
    assert_eq!(t.verifier_timeout.as_secs(), 20);
    assert_eq!(t.test_entry, "run-tests.sh");

    // TB2.1 layout: a pinned image built from a Dockerfile baton can replay locally.
    let tb2 = root.path().join("tb2-pinned");
    write(
        &tb2.join("task.toml"),
        "schema_version = \"1.1\"\n[task]\nname = \"org/tb2-pinned\"\n[agent]\ntimeout_sec = 900.0\n[verifier]\ntimeout_sec = 900.0\n[environment]\ndocker_image = \"someone/tb2-pinned:20260101\"\nallow_internet = true\n[verifier.env]\n[environment.env]\n",
    );
    write(
        &tb2.join("instruction.md"),
        "Write 42 into answer.txt in the current folder.\n",
    );
    write(
        &tb2.join("environment/Dockerfile"),
        "# canary\nFROM python:3.13-slim-bookworm\nWORKDIR /app\nRUN apt-get update && apt-get install -y git\nCOPY setup.sh ./\nCOPY resources /app/resources\nRUN bash /app/setup.sh && rm -rf /app/resources /app/setup.sh\nWORKDIR /app/site\n",
    );
    write(
        &tb2.join("environment/setup.sh"),
        "mkdir -p /app/site && cp /app/resources/seed.txt /app/site/\n",
    );
    write(&tb2.join("environment/resources/seed.txt"), "seed\n");
    write(&tb2.join("solution/solve.sh"), "echo 42 > answer.txt\n");
    write(
        &tb2.join("tests/test.sh"),
        "cd /app/site && test -f seed.txt && test ! -e /app/resources && test ! -e /app/setup.sh && test \"$(cat answer.txt)\" = 42 && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    );
    let t = load_ready(&tb2);
    assert_eq!(t.name, "tb2-pinned");
    assert_eq!(t.environment.workdir, "/app/site");

    let image = root.path().join("needs-image");
    write(
        &image.join("task.toml"),
        "[environment]\ndocker_image = \"ghcr.io/acme/gpu-env:3\"\n",
    );
    write(&image.join("instruction.md"), "Train it.\n");
    write(
        &image.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    assert!(skip_reason(&image).contains("ghcr.io/acme/gpu-env:3"));

    let custom = root.path().join("custom-base");
    write(&custom.join("task.toml"), "[agent]\ntimeout_sec = 60\n");
    write(&custom.join("instruction.md"), "Fix it.\n");
    write(
        &custom.join("environment/Dockerfile"),
        "FROM nvidia/cuda:12.4.0-devel-ubuntu22.04\nWORKDIR /app\n",
    );
    write(
        &custom.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    assert!(skip_reason(&custom).contains("nvidia/cuda"));

    let compose = root.path().join("multi");
    write(&compose.join("task.toml"), "");
    write(&compose.join("instruction.md"), "Serve.\n");
    write(
        &compose.join("environment/docker-compose.yaml"),
        "services:\n  a:\n    image: x\n  b:\n    image: y\n",
    );
    write(
        &compose.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    assert!(skip_reason(&compose).contains("docker-compose"));

    // A folder of tasks: `--list` sees three runnable and three skipped; the oracle passes the
    // runnable ones and the skipped ones are reported.
    let out = tempfile::tempdir().unwrap();
    let mut listing = args(vec![root.path().to_path_buf()], "oracle", out.path());
    let set = baton::cli::eval::load_tasks(&listing).unwrap();
    assert_eq!(
        (set.tasks.len(), set.skipped.len(), set.failed.len()),
        (3, 3, 0)
    );
    listing.list = true;
    assert_eq!(baton::cli::eval::run(listing), 0);
    let report = run(args(vec![root.path().to_path_buf()], "oracle", out.path()));
    assert_eq!(report.trials.len(), 3);
    assert!(
        report.trials.iter().all(|t| t.reward == Some(1.0)),
        "{:#?}",
        report.trials
    );
    let tb1_trial = report
        .trials
        .iter()
        .find(|t| t.task_name == "tb1-one")
        .unwrap();
    assert_eq!(tb1_trial.reward_source.as_deref(), Some("pytest"));
    assert_eq!(
        tb1_trial.tests.get("test_answer").map(String::as_str),
        Some("PASSED")
    );
    assert_eq!(report.skipped.len(), 3);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(report.job_dir.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(json["skipped"].as_array().unwrap().len(), 3);
    assert!(
        json["skipped"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["reason"].as_str().unwrap().contains("acme"))
    );
}

#[test]
fn reward_files_pytest_output_and_missing_rewards() {
    let root = tempfile::tempdir().unwrap();
    answer_task(
        root.path(),
        "json-reward",
        60.0,
        "if [ -f /app/answer.txt ]; then echo '{\"reward\": 1, \"style\": 0.5}'; else echo '{\"reward\": 0}'; fi > /logs/verifier/reward.json\n",
    );
    answer_task(
        root.path(),
        "pytest-only",
        60.0,
        "if [ -f /app/answer.txt ]; then r=passed; else r=failed; fi\necho \"============================== 3 $r in 0.02s ===============================\"\n",
    );
    answer_task(
        root.path(),
        "no-reward",
        60.0,
        "echo 'verifier forgot the reward'\n",
    );
    answer_task(
        root.path(),
        "garbage-reward",
        60.0,
        "echo maybe > /logs/verifier/reward.txt\n",
    );
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![root.path().to_path_buf()], "oracle", out.path()));
    let by = |name: &str| {
        report
            .trials
            .iter()
            .find(|t| t.task_name == name)
            .unwrap()
            .clone()
    };

    let j = by("json-reward");
    assert_eq!(j.reward, Some(1.0));
    assert_eq!(j.verifier_rewards.get("style"), Some(&0.5));
    assert_eq!(j.reward_source.as_deref(), Some("reward.json"));

    let p = by("pytest-only");
    assert_eq!(p.reward, Some(1.0));
    assert_eq!(p.reward_source.as_deref(), Some("pytest"));

    for (name, kind) in [
        ("no-reward", "RewardFileNotFoundError"),
        ("garbage-reward", "RewardFileParseError"),
    ] {
        let e = by(name);
        assert_eq!(e.reward, None, "{name} must not be scored");
        assert!(e.infrastructure_error);
        assert_eq!(e.exception_info.as_ref().unwrap().exception_type, kind);
    }
    // Errors are left out of the score: two scored tasks, both passed.
    assert_eq!(report.score.n_errors, 2);
    assert_eq!(report.score.accuracy, Some(1.0));
    assert_eq!(report.score.n_tasks_scored, 2);
}

#[test]
fn an_agent_timeout_scores_zero_even_if_the_work_was_done() {
    let root = tempfile::tempdir().unwrap();
    let task = answer_task(root.path(), "slow", 1.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    let report = run(args(
        vec![task],
        "cmd:echo 42 > /app/answer.txt; sleep 30",
        out.path(),
    ));
    let t = &report.trials[0];
    assert!(t.agent_exit.timed_out);
    assert_eq!(t.reward, Some(0.0));
    assert!(!t.infrastructure_error);
    assert_eq!(
        t.exception_info.as_ref().unwrap().exception_type,
        "AgentTimeoutError"
    );
    // The verifier still ran after the timeout and saw the work.
    assert_eq!(t.verifier_rewards.get("reward"), Some(&1.0));
    assert_eq!(report.score.n_timeouts, 1);
}

/// A `cmd:` agent that behaves like `baton --exec --json`: reads $INSTRUCTION, does the work
/// and prints an event stream, which the runner turns into tokens, routes and a trajectory.
#[test]
fn cmd_agent_end_to_end_with_an_event_stream() {
    let root = tempfile::tempdir().unwrap();
    let task = answer_task(root.path(), "events", 60.0, REWARD_TXT);
    let script = r#"case "$INSTRUCTION" in *"Write 42"*) ;; *) exit 9;; esac
test "$HOME" = /root && test "$(pwd)" = /app && test -f /app/seed.txt || exit 8
test ! -e /tests || exit 7
echo 42 > /app/answer.txt
cat <<'EV'
{"type":"session","session_id":"s-1","mode":"mol","backend":"http://127.0.0.1:1/v1","workspace":"/app","resumed":false}
{"type":"turn_started","turn_id":1,"text":"Write 42 into /app/answer.txt."}
{"type":"hop_started","turn_id":1,"hop":"route","expert":"L0"}
{"type":"hop_completed","turn_id":1,"hop":"route","expert":"L0","latency_ms":15,"usage":{"prompt_tokens":50,"completion_tokens":1}}
{"type":"route_decided","turn_id":1,"expert":"L2","decision":"model","latency_ms":15}
{"type":"message_final","turn_id":1,"expert":"L2","text":"Writing the answer."}
{"type":"hop_completed","turn_id":1,"hop":"answer","expert":"L2","latency_ms":400,"ttft_ms":90,"usage":{"prompt_tokens":300,"completion_tokens":20,"cached_tokens":200}}
{"type":"tool_begin","turn_id":1,"call_id":"call_1","tool":"shell","arguments":{"command":"echo 42 > /app/answer.txt"},"title":"echo 42"}
{"type":"tool_end","call_id":"call_1","status":"ok","exit_code":0,"duration_ms":3,"output":""}
{"type":"route_decided","turn_id":1,"expert":"L2","decision":"sticky","latency_ms":0}
{"type":"message_final","turn_id":1,"expert":"L2","text":"Done."}
{"type":"hop_completed","turn_id":1,"hop":"answer","expert":"L2","latency_ms":200,"usage":{"prompt_tokens":340,"completion_tokens":5}}
{"type":"turn_completed","turn_id":1,"status":"done","answer":"Done.","expert":"L2","duration_ms":700,"usage":{"prompt_tokens":690,"completion_tokens":26}}
EV"#;
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![task], &format!("cmd:{script}"), out.path()));
    let t = &report.trials[0];
    assert_eq!(
        t.reward,
        Some(1.0),
        "{:?} (see {})",
        t.exception_info,
        t.trial_dir.display()
    );
    assert_eq!(t.tokens.input, 690);
    assert_eq!(t.tokens.output, 26);
    assert_eq!(t.tokens.cached, 200);
    assert_eq!(t.routes.get("L2"), Some(&2));
    assert_eq!(t.route_decisions.get("sticky"), Some(&1));
    assert_eq!(t.hop_latency["answer"].count, 2);
    assert_eq!(t.hop_latency["route"].max_ms, 15);
    assert_eq!(t.tool_calls, 1);
    assert_eq!(t.turn_status.as_deref(), Some("done"));

    let traj: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(t.trajectory_path.as_ref().unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(traj["schema_version"], "ATIF-v1.7");
    let steps = traj["steps"].as_array().unwrap();
    assert_eq!(steps[0]["source"], "user");
    // The route hop is L0's step, then the answer hop with its call and result.
    assert_eq!(steps[1]["extra"]["hop"], "route");
    assert_eq!(steps[1]["extra"]["expert"], "L0");
    assert_eq!(steps[2]["tool_calls"][0]["function_name"], "shell");
    assert_eq!(
        steps[2]["observation"]["results"][0]["source_call_id"],
        "call_1"
    );
    assert_eq!(traj["final_metrics"]["total_prompt_tokens"], 690);

    let trial_json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(t.trial_dir.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(trial_json["routes"]["L2"], 2);
    assert!(
        trial_json["timings"]["agent_execution"]["duration_sec"]
            .as_f64()
            .is_some()
    );
    assert!(t.trial_dir.join("verifier/test-stdout.txt").is_file());
    assert!(t.trial_dir.join("agent/stdout.txt").is_file());
    // Scratch folders are gone unless --keep-workdirs.
    assert!(!t.trial_dir.join("work").exists());
}

#[test]
fn plain_folders_when_isolation_is_off() {
    let root = tempfile::tempdir().unwrap();
    let task = answer_task(root.path(), "plain", 60.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![task.clone()], "oracle", out.path());
    a.isolation = IsolationChoice::None;
    let report = run(a);
    assert_eq!(report.isolation.kind, "plain");
    assert!(report.isolation.fallback_reason.is_some());
    assert_eq!(
        report.trials[0].reward,
        Some(1.0),
        "{:?}",
        report.trials[0].exception_info
    );
    let mut a = args(vec![task], "nop", out.path());
    a.isolation = IsolationChoice::None;
    assert_eq!(run(a).trials[0].reward, Some(0.0));
}

/// The runner, `baton --exec` and the mock engine meet end to end: the engine plays a
/// known-good trajectory (route to L2, a `read_file` call, the answer) inside a bwrap trial.
/// `--exec` registers only read-only tools so far, so the task is one that reads and reports
/// without changing the workspace.
#[test]
fn scripted_engine_trajectory_through_baton_exec() {
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_1", "read_file", r#"{"path":"notes.txt"}"#)
                    .usage(400, 12),
            )
            .answer(
                "L2",
                MockReply::text("The release is on Friday.").usage(450, 8),
            ),
    );
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("read-notes");
    write(
        &dir.join("task.toml"),
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\n",
    );
    write(
        &dir.join("instruction.md"),
        "Read /app/notes.txt and tell me the release day. Change nothing.\n",
    );
    write(&dir.join("environment/notes.txt"), "release: friday\n");
    write(
        &dir.join("tests/test.sh"),
        "if [ \"$(cat /app/notes.txt)\" = 'release: friday' ] && [ \"$(ls -A /app)\" = notes.txt ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n",
    );
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![dir], "baton", out.path());
    a.baton_bin = Some(PathBuf::from(env!("CARGO_BIN_EXE_baton")));
    a.exec_args = vec!["--endpoint".into(), engine.url()];
    let report = run(a);
    let t = &report.trials[0];
    let stderr = std::fs::read_to_string(t.trial_dir.join("agent/stderr.txt")).unwrap_or_default();
    assert_eq!(
        t.reward,
        Some(1.0),
        "{:?}; agent stderr: {stderr}",
        t.exception_info
    );
    assert_eq!(t.agent_exit.exit_code, Some(0), "agent stderr: {stderr}");
    assert!(
        t.routes.get("L2").copied().unwrap_or(0) >= 1,
        "{:?}",
        t.routes
    );
    assert!(t.tokens.input >= 850, "{:?}", t.tokens);
    assert!(t.hop_latency.contains_key("answer"));
    assert_eq!(t.tool_calls, 1);
    let traj: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(t.trajectory_path.as_ref().unwrap()).unwrap(),
    )
    .unwrap();
    let steps = traj["steps"].as_array().unwrap();
    let call_step = steps
        .iter()
        .find(|s| s["tool_calls"].is_array())
        .expect("a step with the tool call");
    assert_eq!(call_step["tool_calls"][0]["function_name"], "read_file");
    assert!(
        call_step["observation"]["results"][0]["content"]
            .as_str()
            .unwrap()
            .contains("release: friday")
    );
    assert!(
        steps
            .iter()
            .any(|s| s["message"] == "The release is on Friday.")
    );
    // The model saw the instruction; the trial's session file landed in the agent logs.
    assert!(engine.requests().iter().any(|r| r.mentions("release day")));
    assert!(t.trial_dir.join("agent/sessions").is_dir());
}

/// `--mcp-config` reaches the trial's fresh HOME: the agent starts the server there and the
/// model's call to its tool is answered.
#[test]
fn mcp_servers_reach_the_agent_inside_a_trial() {
    let Some(python) = crate::support::external::require(
        "the Python `mcp` SDK",
        crate::support::external::python_with(&["mcp"]),
    ) else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/py_server.py");
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_1", "mcp__py__add", r#"{"a":20,"b":22}"#),
            )
            .answer("L2", MockReply::text("42.")),
    );
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("with-mcp");
    write(
        &dir.join("task.toml"),
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\n",
    );
    write(&dir.join("instruction.md"), "Add 20 and 22.\n");
    write(&dir.join("environment/notes.txt"), "nothing\n");
    write(
        &dir.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    let servers = root.path().join("mcp.toml");
    write(
        &servers,
        &format!(
            "[mcp_servers.py]\ncommand = {:?}\nargs = [{:?}]\nrequired = true\nstartup_timeout_sec = 30\n",
            python.display().to_string(),
            script.display().to_string()
        ),
    );
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![dir], "baton", out.path());
    a.baton_bin = Some(PathBuf::from(env!("CARGO_BIN_EXE_baton")));
    a.exec_args = vec!["--endpoint".into(), engine.url()];
    a.mcp_config = Some(servers);
    // The test's Python lives wherever the deps folder is (maybe under a hidden /tmp): plain
    // folders keep it reachable; what is checked is that the servers reach the trial's agent.
    a.isolation = IsolationChoice::None;
    let report = run(a);
    let t = &report.trials[0];
    let stderr = std::fs::read_to_string(t.trial_dir.join("agent/stderr.txt")).unwrap_or_default();
    assert_eq!(t.agent_exit.exit_code, Some(0), "agent stderr: {stderr}");
    let requests = engine.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.tool_names().iter().any(|t| t == "mcp__py__add")),
        "the server's tool was never offered; agent stderr: {stderr}"
    );
    // 20 + 22, computed by the server in the trial (the prompt never says 42).
    assert!(
        requests.iter().any(|r| r.mentions("42")),
        "the tool result never reached the model; agent stderr: {stderr}"
    );
}

/// An `--mcp-config` file that holds anything but MCP servers is refused before any trial.
#[test]
fn an_mcp_config_with_other_settings_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("mcp.toml");
    write(
        &file,
        "endpoint = \"http://evil.invalid/v1\"\n[mcp_servers.x]\ncommand = \"true\"\n",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["eval", "--agent", "oracle", "--mcp-config"])
        .arg(&file)
        .arg(root.path())
        .env("HOME", root.path())
        .env("XDG_CONFIG_HOME", root.path().join("config"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("only [mcp_servers.NAME]") && stderr.contains("endpoint"),
        "{stderr}"
    );
}

#[test]
fn hooks_fire_inside_a_trial() {
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_1", "read_file", r#"{"path":"notes.txt"}"#),
            )
            .answer("L2", MockReply::text("Friday.")),
    );
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("hooked");
    write(
        &dir.join("task.toml"),
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\n",
    );
    write(&dir.join("instruction.md"), "Read notes.txt.\n");
    write(&dir.join("environment/notes.txt"), "release: friday\n");
    write(
        &dir.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    let hooks = root.path().join("hooks.json");
    write(
        &hooks,
        r#"{"hooks": {
            "PostToolUse": [{"matcher": "read_file", "hooks": [{"type": "command", "command": "cat >> \"$HOME/hooks.log\"; echo >> \"$HOME/hooks.log\""}]}],
            "Stop": [{"hooks": [{"type": "command", "command": "cat >> \"$HOME/hooks.log\"; echo >> \"$HOME/hooks.log\""}]}]
        }}"#,
    );
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![dir], "baton", out.path());
    a.baton_bin = Some(PathBuf::from(env!("CARGO_BIN_EXE_baton")));
    a.exec_args = vec!["--endpoint".into(), engine.url()];
    a.hooks = Some(hooks);
    a.keep_workdirs = true;
    let report = run(a);
    let t = &report.trials[0];
    let stderr = std::fs::read_to_string(t.trial_dir.join("agent/stderr.txt")).unwrap_or_default();
    assert_eq!(t.agent_exit.exit_code, Some(0), "agent stderr: {stderr}");
    let log = std::fs::read_to_string(t.trial_dir.join("work/home/hooks.log"))
        .unwrap_or_else(|e| panic!("no hook log ({e}); agent stderr: {stderr}"));
    let events: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["hook_event_name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["PostToolUse", "Stop"], "{log}");
    assert!(
        events[0]["tool_response"]["output"]
            .as_str()
            .unwrap()
            .contains("release: friday")
    );
}

/// The headless contract as the runner sees it: `--max-turns` reached is exit code 3, recorded
/// as a non-zero agent exit (scored by the verifier, not an infrastructure error).
#[test]
fn scripted_engine_turn_limit_is_exit_code_3() {
    let engine = MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer(
        MockReply::tool_call("call_n", "list_dir", r#"{"path":"."}"#).usage(100, 5),
    ));
    let root = tempfile::tempdir().unwrap();
    let task = answer_task(root.path(), "looping", 60.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![task], "baton", out.path());
    a.baton_bin = Some(PathBuf::from(env!("CARGO_BIN_EXE_baton")));
    a.trailing_exec_args = vec![
        "--endpoint".into(),
        engine.url(),
        "--max-turns".into(),
        "2".into(),
    ];
    let report = run(a);
    let t = &report.trials[0];
    assert_eq!(t.agent_exit.exit_code, Some(3), "{:?}", t.exception_info);
    assert_eq!(
        t.exception_info.as_ref().unwrap().exception_type,
        "NonZeroAgentExitCodeError"
    );
    assert!(!t.infrastructure_error);
    assert_eq!(t.reward, Some(0.0));
    assert_eq!(t.turn_status.as_deref(), Some("limit_reached"));
}

/// `baton eval`'s entry point: the summary table on stdout and `--min-score` as the exit code.
#[test]
fn run_prints_a_summary_and_honours_min_score() {
    let root = tempfile::tempdir().unwrap();
    answer_task(root.path(), "one", 60.0, REWARD_TXT);
    answer_task(root.path(), "two", 60.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![root.path().to_path_buf()], "oracle", out.path());
    a.min_score = Some(1.0);
    a.trials = 2;
    assert_eq!(baton::cli::eval::run(a.clone()), 0);
    a.agent = "nop".into();
    assert_eq!(baton::cli::eval::run(a.clone()), 1);

    a.agent = "oracle".into();
    let report = run(a);
    let mut table = Vec::new();
    baton::eval::report::print_table(
        &mut table,
        &report.tasks,
        &report.score,
        &[],
        &[],
        report.wall_sec,
        &report.job_dir,
    )
    .unwrap();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("score 4 passed / 4 scored (100.0%); 0 errored (0 trial(s) without a reward, 0 task(s) that cannot load); 0 skipped; mean reward 100.0% ± 0.0 over 2 task(s); 0 failed"),
        "{table}"
    );
    assert_eq!(
        report.score.stderr_method,
        "tb: sqrt(sum_t p(1-p)/(n_t-1)) / N"
    );
    // Harbor's trial names: `<task>__<7 characters>`, one folder each.
    let ones: Vec<&str> = report
        .trials
        .iter()
        .map(|t| t.trial_name.as_str())
        .filter(|n| n.starts_with("one__"))
        .collect();
    assert_eq!(ones.len(), 2, "{ones:?}");
    assert!(
        ones.iter().all(|n| n.len() == "one__".len() + 7
            && report.job_dir.join(n).join("result.json").is_file())
    );
    assert_ne!(ones[0], ones[1]);

    let mut bad = args(vec![root.path().join("missing")], "oracle", out.path());
    bad.min_score = None;
    assert_eq!(baton::cli::eval::run(bad), 2);
}

const ROMAN_SOLUTION: &str = r#"_T = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
      (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(n):
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 3999:
        raise ValueError(n)
    out = ""
    for v, s in _T:
        while n >= v:
            out += s
            n -= v
    return out


_BACK = {to_roman(i): i for i in range(1, 4000)}


def from_roman(s):
    if not isinstance(s, str) or s not in _BACK:
        raise ValueError(s)
    return _BACK[s]
"#;

const VERSION_REGEX: &str = "(?<![\\w.-])(v(?:0|[1-9]\\d*)\\.(?:0|[1-9]\\d*)\\.(?:0|[1-9]\\d*)(?:-rc\\.(?:0|[1-9]\\d*))?)(?![\\w.-])\n";

/// The known-good trajectory for two suite tasks: route to L2, one `write_file` call with the
/// solution, then a final answer. Chosen by the instruction, so one engine serves both trials.
fn two_task_trajectory(req: &crate::support::RecordedRequest) -> MockReply {
    if req.is_route() {
        return MockReply::label("L2");
    }
    if req.is_summary() {
        return MockReply::text("Wrote the solution file.");
    }
    let after_tool = req
        .messages()
        .last()
        .and_then(|m| m.get("role"))
        .and_then(|r| r.as_str())
        == Some("tool");
    if after_tool {
        return MockReply::text("Done: the file is written.").usage(900, 10);
    }
    let (path, content) = if req.mentions("roman.py") {
        ("roman.py", ROMAN_SOLUTION)
    } else {
        ("version.re", VERSION_REGEX)
    };
    let args = serde_json::json!({"path": path, "content": content}).to_string();
    MockReply::tool_call("call_write", "write_file", args).usage(800, 300)
}

/// Two real suite tasks solved through `baton --exec` by a scripted engine (reward 1 each):
/// the runner, the agent, the tools and the verifier meet end to end.
#[test]
fn scripted_engine_solves_two_suite_tasks() {
    let engine = MockEngine::start_blocking(two_task_trajectory);
    let out = tempfile::tempdir().unwrap();
    let mut a = args(
        vec![
            suite_dir().join("roman-numerals"),
            suite_dir().join("regex-versions"),
        ],
        "baton",
        out.path(),
    );
    a.baton_bin = Some(PathBuf::from(env!("CARGO_BIN_EXE_baton")));
    a.trailing_exec_args = vec!["--endpoint".into(), engine.url()];
    let report = run(a);
    assert!(
        engine
            .requests()
            .iter()
            .any(|r| r.tool_names().iter().any(|n| n == "write_file")),
        "--exec did not offer write_file"
    );
    for t in &report.trials {
        let stderr =
            std::fs::read_to_string(t.trial_dir.join("agent/stderr.txt")).unwrap_or_default();
        assert_eq!(
            t.reward,
            Some(1.0),
            "{}: {:?}; agent stderr: {stderr}",
            t.task_name,
            t.exception_info
        );
        assert_eq!(t.tool_calls, 1);
        assert!(t.trajectory_path.is_some());
    }
    assert_eq!(report.score.accuracy, Some(1.0));
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/eval")
        .join(name)
}

fn result_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Dockerfile variables: `ENV PATH="${TOOLS}:${PATH}"` keeps bash reachable and puts the
/// tool folder first; ARG defaults, `${VAR:-d}`, `${VAR:+w}`, single quotes, WORKDIR and COPY
/// expand; `[environment.env]` takes `${VAR:-default}`.
#[test]
fn dockerfile_variables_fixture() {
    let dir = fixture("docker-vars");
    let t = load_ready(&dir);
    let path = &t.environment.env["PATH"];
    assert!(
        path.starts_with("/app/bin:") && !path.contains('$'),
        "{path}"
    );
    assert_eq!(t.environment.env["GREETING"], "hello");
    assert_eq!(t.environment.env["SUFFIX"], "set");
    assert_eq!(t.environment.env["LITERAL"], "$TOOLS");
    assert_eq!(t.environment.env["MODE"], "fast");
    assert_eq!(t.environment.workdir, "/app/work");
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![dir.clone()], "oracle", out.path()));
    let trial = &report.trials[0];
    assert_eq!(
        trial.reward,
        Some(1.0),
        "{:?}; see {}",
        trial.exception_info,
        trial.trial_dir.display()
    );
    let nop = run(args(vec![dir], "nop", out.path()));
    assert_eq!(
        nop.trials[0].reward,
        Some(0.0),
        "{:?}",
        nop.trials[0].exception_info
    );
}

/// pip options that take values are not package names, `-r`/`-c` files are read from the
/// build context, and the harness-only tmux/asciinema do not block the task.
#[test]
fn pip_options_fixture() {
    let dir = fixture("pip-options");
    let t = load_ready(&dir);
    let script = t.environment.setup_script.as_deref().unwrap();
    assert!(!script.contains("pip install"), "{script}");
    assert!(!script.contains("tmux"), "{script}");
    assert!(
        script.contains("echo installed > /app/marker.txt"),
        "{script}"
    );
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![dir], "oracle", out.path()));
    assert_eq!(
        report.trials[0].reward,
        Some(1.0),
        "{:?}",
        report.trials[0].exception_info
    );
}

/// A folder that cannot load is an error row, never an aborted job (`steps/` without
/// `[[steps]]` is one: Harbor reads it as a single-step task without an instruction);
/// `--exclude` works on names read before loading, so it can leave out a malformed task.
#[test]
fn unloadable_tasks_are_rows_and_filters_come_first() {
    let dir = fixture("unloadable");
    let out = tempfile::tempdir().unwrap();
    let a = args(vec![dir.clone()], "oracle", out.path());
    let set = baton::cli::eval::load_tasks(&a).unwrap();
    let names = |v: &[String]| v.join(",");
    assert_eq!(
        names(&set.tasks.iter().map(|t| t.name.clone()).collect::<Vec<_>>()),
        "runs"
    );
    assert!(set.skipped.is_empty(), "{:?}", set.skipped);
    let mut failed: Vec<String> = set.failed.iter().map(|e| e.task_name()).collect();
    failed.sort();
    assert_eq!(names(&failed), "bad-toml,multi-step,no-test-sh");

    let report = run(a.clone());
    assert_eq!(report.trials.len(), 1);
    assert_eq!(report.trials[0].reward, Some(1.0));
    assert_eq!(report.load_errors.len(), 3);
    assert_eq!(report.score.n_load_errors, 3);
    assert_eq!(report.score.n_skipped, 0);
    // One of four tasks passed: the gate sees 1/4, the headline says why.
    assert!((report.score.strict_accuracy.unwrap() - 1.0 / 4.0).abs() < 1e-9);
    let line = baton::eval::report::headline(&report.score);
    assert!(
        line.starts_with("score 1 passed / 1 scored (100.0%); 3 errored (0 trial(s) without a reward, 3 task(s) that cannot load); 0 skipped"),
        "{line}"
    );
    let json = result_json(&report.job_dir.join("result.json"));
    let errors = json["load_errors"].to_string();
    assert!(errors.contains("invalid TOML"), "{errors}");
    assert!(errors.contains("instruction.md"), "{errors}");

    let mut only = a.clone();
    only.exclude = vec![
        "no-test-sh".into(),
        "bad-*".into(),
        "fixtures/multi-*".into(),
    ];
    let set = baton::cli::eval::load_tasks(&only).unwrap();
    assert_eq!(
        (set.tasks.len(), set.skipped.len(), set.failed.len()),
        (1, 0, 0)
    );
    let mut list = a;
    list.list = true;
    assert_eq!(baton::cli::eval::run(list), 0);
}

/// CA-bundle, proxy and package-index variables reach the setup script, the agent and the
/// verifier alike; credentials by name do not; loopback is added to NO_PROXY.
#[test]
fn network_variables_reach_every_phase() {
    let host = [
        ("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"),
        ("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt"),
        ("PIP_INDEX_URL", "https://pypi.example/simple"),
        ("UV_INDEX_URL", "https://pypi.example/simple"),
        ("HTTPS_PROXY", "http://proxy.example:3128"),
        ("https_proxy", "http://proxy.example:3128"),
        ("NO_PROXY", "internal.example"),
        ("PIP_PASSWORD", "hunter2"),
        ("UV_INDEX_PRIVATE_TOKEN", "hunter2"),
        ("OPENAI_API_KEY", "sk-x"),
        ("Https_Proxy", "nobody"),
    ];
    let env =
        baton::eval::trial::network_env(host.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let keys: Vec<&str> = env.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        vec![
            "HTTPS_PROXY",
            "NO_PROXY",
            "PIP_INDEX_URL",
            "REQUESTS_CA_BUNDLE",
            "SSL_CERT_FILE",
            "UV_INDEX_URL",
            "https_proxy",
            "no_proxy"
        ]
    );
    assert_eq!(env["NO_PROXY"], "internal.example,127.0.0.1,localhost,::1");

    let out = tempfile::tempdir().unwrap();
    let mut cfg = prepare(&args(vec![fixture("network-env")], "oracle", out.path())).unwrap();
    cfg.settings.network_env = env;
    let report = run_job(cfg).unwrap();
    let trial = &report.trials[0];
    assert_eq!(trial.reward, Some(1.0), "{:?}", trial.exception_info);
    let seen = std::fs::read_to_string(trial.trial_dir.join("verifier/verifier-env.txt")).unwrap();
    assert!(
        seen.contains("PIP_INDEX_URL=https://pypi.example/simple"),
        "{seen}"
    );
    assert!(
        seen.contains("https_proxy=http://proxy.example:3128"),
        "{seen}"
    );
    assert!(!seen.contains("hunter2"), "{seen}");
}

/// Harbor layout: COPY/WORKDIR into `/workspace` and `/data`, artifacts collected with a
/// manifest, verifier stdout and stderr apart, org-prefixed names that would collide, and
/// `result.json` / `config.json` in Harbor's schema.
#[test]
fn harbor_layout_fixture() {
    let dir = fixture("harbor-layout");
    let out = tempfile::tempdir().unwrap();
    let a = args(vec![dir], "oracle", out.path());
    let set = baton::cli::eval::load_tasks(&a).unwrap();
    let mut names: Vec<&str> = set.tasks.iter().map(|t| t.name.as_str()).collect();
    names.sort();
    assert_eq!(names, vec!["org-a/same", "org-b/same"]);
    let a_task = set.tasks.iter().find(|t| t.name == "org-a/same").unwrap();
    assert_eq!(a_task.environment.extra_roots, vec!["/data", "/workspace"]);
    assert!(!a_task.allow_internet);
    assert_eq!(a_task.artifacts.len(), 3);

    let report = run(a);
    assert_eq!(report.trials.len(), 2);
    for t in &report.trials {
        assert_eq!(
            t.reward,
            Some(1.0),
            "{}: {:?}",
            t.trial_name,
            t.exception_info
        );
        assert!(t.trial_name.starts_with("same__"), "{}", t.trial_name);
    }
    let t = report
        .trials
        .iter()
        .find(|t| t.task_name == "org-a/same")
        .unwrap();
    let art = t.trial_dir.join("artifacts");
    assert_eq!(
        std::fs::read_to_string(art.join("result.txt")).unwrap(),
        "seed\n"
    );
    assert!(art.join("data-copy/table.csv").is_file());
    let manifest = result_json(&art.join("manifest.json"));
    assert_eq!(manifest[2]["status"], "missing");
    let v = t.trial_dir.join("verifier");
    assert_eq!(
        std::fs::read_to_string(v.join("test-stdout.txt")).unwrap(),
        "checking result.txt\n"
    );
    assert_eq!(
        std::fs::read_to_string(v.join("test-stderr.txt")).unwrap(),
        "to stderr\n"
    );

    // The fields Harbor's TrialResult and JobResult models require, with their types.
    let trial = result_json(&t.trial_dir.join("result.json"));
    for key in [
        "id",
        "task_name",
        "trial_name",
        "trial_uri",
        "task_checksum",
    ] {
        assert!(trial[key].is_string(), "{key}: {}", trial[key]);
    }
    assert!(trial["task_id"]["path"].is_string());
    assert!(trial["config"]["task"]["path"].is_string());
    assert_eq!(trial["agent_info"]["name"], "oracle");
    assert!(trial["agent_info"]["version"].is_string());
    assert_eq!(trial["verifier_result"]["rewards"]["reward"], 1.0);
    assert!(trial["agent_execution"]["started_at"].is_string());
    assert!(trial["verifier"]["finished_at"].is_string());
    let job = result_json(&report.job_dir.join("result.json"));
    assert_eq!(job["n_total_trials"], 2);
    assert_eq!(job["stats"]["n_completed_trials"], 2);
    assert_eq!(job["stats"]["evals"]["oracle__adhoc"]["n_trials"], 2);
    assert!(job["updated_at"].is_string());
    let config = result_json(&report.job_dir.join("config.json"));
    assert_eq!(config["n_attempts"], 1);
    assert_eq!(config["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(config["agents"][0]["name"], "oracle");
}

/// A trial that never ran is beside the score, not hidden by it: the headline is
/// `passed / scored` with the errored count, and `--min-score` counts it as a failure.
#[test]
fn errored_trials_are_beside_the_score() {
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![fixture("errored")], "oracle", out.path());
    let report = run(a.clone());
    assert_eq!(report.score.accuracy, Some(1.0));
    assert_eq!(
        (
            report.score.n_passed,
            report.score.n_scored,
            report.score.n_errors
        ),
        (1, 1, 1)
    );
    assert_eq!(report.score.strict_accuracy, Some(0.5));
    let err = report
        .trials
        .iter()
        .find(|t| t.task_name == "setup-fails")
        .unwrap();
    let info = err.exception_info.as_ref().unwrap();
    assert_eq!(info.exception_type, "EnvironmentSetupError");
    let line = baton::eval::report::headline(&report.score);
    assert!(
        line.starts_with(
            "score 1 passed / 1 scored (100.0%); 1 errored (1 trial(s) without a reward"
        ),
        "{line}"
    );
    let trial = result_json(&err.trial_dir.join("result.json"));
    assert!(
        trial["exception_info"]["exception_message"]
            .as_str()
            .unwrap()
            .contains("setup script")
    );
    assert!(trial["verifier_result"].is_null());
    a.min_score = Some(0.9);
    assert_eq!(baton::cli::eval::run(a), 1);
}

/// Hostile tasks and agents: an artifact path through a link the agent planted does not read
/// host files, and a task's env table cannot copy a host credential into its trial.
#[test]
fn artifacts_and_env_templates_stay_inside() {
    let root = tempfile::tempdir().unwrap();
    let dir = answer_task(root.path(), "sneaky", 60.0, REWARD_TXT);
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    write(
        &dir.join("task.toml"),
        &format!("artifacts = [\"/app/link/etc/hostname\", \"/app/answer.txt\"]\n{toml}"),
    );
    write(
        &dir.join("solution/solve.sh"),
        "echo 42 > /app/answer.txt\nln -s / /app/link\n",
    );
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![dir.clone()], "oracle", out.path());
    a.isolation = IsolationChoice::None;
    let report = run(a);
    let t = &report.trials[0];
    assert_eq!(t.reward, Some(1.0), "{:?}", t.exception_info);
    let art = t.trial_dir.join("artifacts");
    assert!(!art.join("hostname").exists());
    assert_eq!(
        std::fs::read_to_string(art.join("answer.txt")).unwrap(),
        "42\n"
    );
    let manifest = result_json(&art.join("manifest.json"));
    assert!(
        manifest[0]["status"].as_str().unwrap().contains("outside"),
        "{manifest}"
    );

    // A host variable the user did not name is unset (HOME is set) and the model's key is
    // refused: the default is taken instead.
    write(
        &dir.join("task.toml"),
        &format!(
            "{toml}[environment.env]\nA = \"${{HOME:-unnamed}}\"\nB = \"${{BATON_API_KEY:-none}}\"\n"
        ),
    );
    let t = load_ready(&dir);
    assert_eq!(t.environment.env["B"], "none");
    assert_eq!(t.environment.env["A"], "unnamed");
    write(
        &dir.join("task.toml"),
        &format!("{toml}[environment.env]\nB = \"${{SOME_SECRET_TOKEN}}\"\n"),
    );
    let err = task::load(&dir).unwrap_err();
    assert!(err.to_string().contains("SOME_SECRET_TOKEN"), "{err}");
}

/// Red team round 7, finding 03: a task's `${VAR}` copied the model's API key into its trial
/// when the key's variable has no credential word in its name (`--api-key-env LLM`). The key
/// variable the runner knows of (`--api-key-env`, `BATON_API_KEY_ENV`) and any variable that
/// holds the key count as unset: `${VAR}` makes the task an error row, `${VAR:-d}` gives `d`.
/// Round 26 (medium): credentials whose names said nothing (`GITHUB_PAT`, a `DATABASE_URL`
/// with its password) reached the trial: only variables named with `--task-env` are given.
#[test]
fn the_model_key_never_reaches_a_tasks_env_table() {
    let root = tempfile::tempdir().unwrap();
    let tasks = root.path().join("tasks");
    let key = "sk-live-rt7-0123456789";
    for (name, value) in [
        ("byflag", "${LLM}"),
        ("byenv", "${MYLLM}"),
        ("copy", "${COPY}"),
        ("inurl", "${URL}"),
        ("plain", "${PLAIN}"),
        ("fallback", "${LLM:-none}"),
        ("pat", "${GITHUB_PAT}"),
        ("dsn", "${DATABASE_URL}"),
    ] {
        let dir = answer_task(&tasks, name, 60.0, REWARD_TXT);
        let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
        write(
            &dir.join("task.toml"),
            &format!("{toml}[verifier.env]\nV = \"{value}\"\n"),
        );
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .args(["eval", "--list"])
        .arg(&tasks)
        .args(["LLM", "MYLLM", "COPY", "URL", "PLAIN"].map(|v| format!("--task-env={v}")))
        .args(["--", "--api-key-env", "LLM", "--mode", "single"])
        .env("HOME", root.path())
        .env("XDG_CONFIG_HOME", root.path().join("config"))
        .env("LLM", key)
        .env("BATON_API_KEY_ENV", "MYLLM")
        .env("MYLLM", "sk-other-9876543210")
        .env("COPY", key)
        .env("URL", format!("https://u:{key}@example.invalid/v1"))
        .env("PLAIN", "harmless")
        .env("GITHUB_PAT", "ghp_rt26_s3cret")
        .env("DATABASE_URL", "postgres://app:db-rt26-s3cret@db/app")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // `--list` prints a task that loads as `NAME<TAB>harbor…`, one that cannot as `NAME<TAB>error…`.
    let row = |name: &str| {
        stdout
            .lines()
            .find(|l| l.split('\t').next() == Some(name))
            .unwrap_or_default()
            .to_string()
    };
    for name in ["plain", "fallback"] {
        assert!(row(name).contains("\tharbor\t"), "{stdout}{stderr}");
    }
    for (name, var) in [
        ("byflag", "LLM"),
        ("byenv", "MYLLM"),
        ("copy", "COPY"),
        ("inurl", "URL"),
        ("pat", "GITHUB_PAT"),
        ("dsn", "DATABASE_URL"),
    ] {
        let line = row(name);
        assert!(
            line.contains("\terror\t") && line.contains(&format!("${{{var}}}")),
            "{name}: the task loaded with the key in its env: {stdout}{stderr}"
        );
    }
    assert!(!stderr.contains(key) && !stdout.contains(key), "{stderr}");
    assert!(
        !stderr.contains("s3cret") && !stdout.contains("s3cret"),
        "{stderr}"
    );

    // In a job's own loading, a default is taken instead (HOME, set in every test run,
    // stands for the key's variable here).
    let only = tasks.join("fallback");
    write(
        &only.join("task.toml"),
        "[task]\nname = \"fallback\"\n[verifier.env]\nV = \"${HOME:-none}\"\nW = \"${HOME:-}x\"\n",
    );
    let mut a = args(vec![only.clone()], "oracle", root.path());
    a.task_env = vec!["HOME".into()];
    a.trailing_exec_args = vec!["--api-key-env".into(), "HOME".into()];
    let set = baton::cli::eval::load_tasks(&a).unwrap();
    assert_eq!(set.tasks.len(), 1, "{:?}", set.failed);
    assert_eq!(set.tasks[0].verifier_env["V"], "none");
    assert_eq!(set.tasks[0].verifier_env["W"], "x");
    a.trailing_exec_args.clear();
    let set = baton::cli::eval::load_tasks(&a).unwrap();
    assert_ne!(set.tasks[0].verifier_env["V"], "none");
}

/// Round 26 (high): the `baton` agent's trial got the user's `BATON_*` variables through a
/// six-word name filter: `BATON_COMMAND_ENV_GITHUB_PAT` (a token meant for one sandboxed
/// command of the user's own sessions) and a `BATON_*` URL with a password reached the task's
/// commands. They are left out; a harmless `BATON_*` still goes in.
#[test]
fn tokens_meant_for_the_users_own_commands_never_reach_a_trial() {
    let root = tempfile::tempdir().unwrap();
    let tasks = root.path().join("tasks");
    let check = "if grep -q s3cret /app/env.txt || ! grep -q BATON_PLAIN=harmless /app/env.txt; \
                 then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n";
    let task = answer_task(&tasks, "envdump", 60.0, check);
    let agent = root.path().join("fake-baton");
    write(&agent, "#!/bin/sh\nenv > /app/env.txt\n");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root.path())
        .env("XDG_CONFIG_HOME", root.path().join("config"))
        .env("BATON_COMMAND_ENV_GITHUB_PAT", "ghp_rt26_s3cret")
        .env(
            "BATON_COMMAND_ENV_DATABASE_URL",
            "postgres://a:b@db/c-s3cret",
        )
        .env("BATON_CI_JOB_JWT", "jwt-s3cret")
        .env("BATON_MIRROR", "https://u:pw-s3cret@mirror.example/")
        .env("BATON_PLAIN", "harmless")
        .args(["eval", "--agent", "baton", "--no-progress", "--baton-bin"])
        .arg(&agent)
        .arg("--out")
        .arg(root.path().join("jobs"))
        .arg(&task)
        .output()
        .unwrap();
    assert_scored_one(
        &out,
        "a token reached the trial, or the plain variable did not",
    );
}

/// That a `baton eval` run of one task scored it (its verifier's check held).
fn assert_scored_one(out: &std::process::Output, otherwise: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("score 1 passed / 1 scored"),
        "{otherwise}: {stdout}{stderr}"
    );
}

/// Round 27 (high, high, medium): a trial read `~/.pyenv/versions/*/pip.conf` inside the
/// mounted `~/.pyenv` (eval covered a shorter list of names than the shell sandbox hides),
/// the private key of `PIP_CLIENT_CERT` (mounted as if it were a CA file), and, with a PATH
/// entry `~/.cargo/bin/../..`, the whole home (`~/.pgpass`). Toolchains are now judged where
/// they lead, against the shell sandbox's allow-list, and covered with its one deny-list.
#[test]
fn a_trial_sees_no_credential_of_the_home_through_its_toolchains_or_network_files() {
    let root = tempfile::tempdir().unwrap();
    let home = root.path().canonicalize().unwrap().join("home");
    for dir in [
        ".pyenv/shims",
        ".pyenv/versions/3.11.9",
        ".cargo/bin",
        ".certs",
    ] {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    let secrets = [
        ".pyenv/versions/3.11.9/pip.conf",
        ".pyenv/versions/3.11.9/pip.conf.bak",
        ".pgpass",
        ".certs/client.pem",
    ];
    for file in secrets {
        write(&home.join(file), "-----BEGIN PRIVATE KEY-----\ns3cret\n");
    }
    let tasks = root.path().join("tasks");
    let task = answer_task(
        &tasks,
        "homeleak",
        60.0,
        "if grep -q s3cret /app/leak 2>/dev/null || ! [ -d /app/saw-shims ]; \
         then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n",
    );
    let reads: Vec<String> = secrets
        .iter()
        .map(|f| format!("cat {} >> /app/leak 2>/dev/null", home.join(f).display()))
        .collect();
    write(
        &task.join("solution/solve.sh"),
        &format!(
            "{}\n[ -d {} ] && mkdir /app/saw-shims\necho 42 > /app/answer.txt\n",
            reads.join("\n"),
            home.join(".pyenv/shims").display()
        ),
    );
    let path = format!(
        "{}/.cargo/bin/../..:{}/.pyenv/shims:{}",
        home.display(),
        home.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .env("PATH", path)
        .env("HOME", &home)
        .env("PIP_CLIENT_CERT", home.join(".certs/client.pem"))
        .env("SSL_CERT_FILE", home.join(".certs/client.pem"))
        .args(["eval", "--agent", "oracle", "--no-progress", "--out"])
        .arg(root.path().join("jobs"))
        .arg(&task)
        .output()
        .unwrap();
    assert_scored_one(
        &out,
        "a credential of the home reached the trial, or the toolchain did not",
    );
}

/// Round 30 (high): trials hid `/home` and `/root` but not a home elsewhere: with the home in
/// `/opt` (a system folder trials see), a task's oracle read `~/.ssh/id_rsa`. Such a home is
/// an empty folder in trials now. Root only (`/opt` is not writable to others).
#[test]
fn a_home_inside_a_system_folder_is_not_shown_to_trials() {
    let Ok(home) = tempfile::tempdir_in("/opt") else {
        eprintln!("/opt is not writable here: not checked");
        return;
    };
    let home_path = home.path().canonicalize().unwrap();
    write(&home_path.join(".ssh/id_rsa"), "s3cret\n");
    // Round 31: XDG folders and a moved cargo home in a system folder too.
    let xdg = tempfile::tempdir_in("/opt").unwrap();
    let xdg_path = xdg.path().canonicalize().unwrap();
    write(
        &xdg_path.join("baton/config.toml"),
        "api_key = \"s3cret\"\n",
    );
    let cargo = tempfile::tempdir_in("/opt").unwrap();
    let cargo_path = cargo.path().canonicalize().unwrap();
    write(&cargo_path.join("credentials.toml"), "token = \"s3cret\"\n");
    // Round 32: a key its own variable names (`GNUPGHOME`), and another account's home in
    // `/opt` (added to a copy of `/etc/passwd` bound in a mount namespace of the test's own).
    let others = tempfile::tempdir_in("/opt").unwrap();
    let others_path = others.path().canonicalize().unwrap();
    write(&others_path.join("gnupg/k.key"), "s3cret\n");
    let alice = others_path.join("alice");
    write(&alice.join(".pypirc"), "password = s3cret\n");
    for p in [&alice, &alice.join(".pypirc")] {
        std::os::unix::fs::chown(p, Some(1001), Some(1001)).unwrap();
    }
    // Round 32: a home entry linked into `/opt` (dotfiles on another volume), and
    // `CARGO_HOME` named through a link (its cover failed every trial's sandbox, and `auto`
    // ran the trials unsandboxed).
    write(&others_path.join("dot/aws/credentials"), "s3cret\n");
    std::os::unix::fs::symlink(others_path.join("dot/aws"), home_path.join(".aws")).unwrap();
    let cargo_link = others_path.join("cargo-link");
    std::os::unix::fs::symlink(&cargo_path, &cargo_link).unwrap();
    let mut passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    passwd.push_str(&format!("alice:x:1001:1001::{}:/bin/sh\n", alice.display()));
    write(&others_path.join("passwd"), &passwd);
    // Round 32: the tasks and the job folder in `/opt` too; the hidden tests stay hidden.
    let root = tempfile::tempdir_in("/opt").unwrap();
    let tasks = root.path().canonicalize().unwrap().join("tasks");
    let task = answer_task(
        &tasks,
        "optleak",
        60.0,
        "if grep -q s3cret /app/leak 2>/dev/null || [ -s /app/shadow ] || [ -s /app/tests_seen ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n",
    );
    write(
        &task.join("solution/solve.sh"),
        &format!(
            "cat {}/.ssh/id_rsa {}/baton/config.toml {}/credentials.toml {o}/gnupg/k.key \
             {o}/alice/.pypirc {o}/dot/aws/credentials {o}/cargo-link/credentials.toml \
             > /app/leak 2>/dev/null\n\
             cat /etc/shadow /etc/gshadow /etc/ssl/private/* > /app/shadow 2>/dev/null\n\
             cat {t}/optleak/tests/test.sh > /app/tests_seen 2>/dev/null\n\
             echo 42 > /app/answer.txt\n",
            home_path.display(),
            xdg_path.display(),
            cargo_path.display(),
            o = others_path.display(),
            t = tasks.display()
        ),
    );
    let mut baton = std::process::Command::new(env!("CARGO_BIN_EXE_baton"));
    baton
        .env_clear()
        .env("GNUPGHOME", others_path.join("gnupg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home_path)
        .env("XDG_CONFIG_HOME", &xdg_path)
        .env("CARGO_HOME", &cargo_link)
        .args(["eval", "--agent", "oracle", "--no-progress", "--out"])
        .arg(root.path().join("jobs"))
        .arg(&task);
    let passwd = others_path.join("passwd");
    let out = crate::support::outside::with_bind(&passwd, Path::new("/etc/passwd"), &baton)
        .output()
        .unwrap();
    assert_scored_one(&out, "a key of a home under /opt reached the trial");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("NOT isolated"), "{stderr}");
}

/// Harbor's own models read baton's job folder: every trial's `result.json` as a
/// `TrialResult`, the job's as a `JobResult`, its `config.json` as a `JobConfig`.
#[test]
fn harbor_models_read_baton_job_folders() {
    let Some(python) = crate::support::external::require(
        "the harbor package (PyPI) in the test venv",
        crate::support::external::python_with(&[
            "harbor.models.trial.result",
            "harbor.models.job.result",
            "harbor.models.job.config",
        ]),
    ) else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let report = run(args(
        vec![fixture("harbor-layout"), fixture("errored")],
        "oracle",
        out.path(),
    ));
    assert_eq!(report.trials.len(), 4);
    let check = r#"
import pathlib, sys
from harbor.models.trial.result import TrialResult
from harbor.models.job.result import JobResult
from harbor.models.job.config import JobConfig
job = pathlib.Path(sys.argv[1])
rewards = sorted(
    str(TrialResult.model_validate_json(p.read_text()).verifier_result)
    for p in job.glob("*/result.json")
)
r = JobResult.model_validate_json((job / "result.json").read_text())
c = JobConfig.model_validate_json((job / "config.json").read_text())
print(rewards, r.n_total_trials, r.stats.n_errored_trials, len(c.tasks), c.agents[0].name)
"#;
    let output = std::process::Command::new(python)
        .args(["-c", check])
        .arg(&report.job_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        stdout.trim(),
        "['None', \"rewards={'reward': 1.0}\", \"rewards={'reward': 1.0}\", \"rewards={'reward': 1.0}\"] 4 1 4 oracle"
    );
}

/// A task folder is anyone's (a download, a clone): its files are read only where they resolve
/// inside it. `instruction.md`, `task.toml` and the Dockerfile of a Harbor task, and a TB1
/// task's `solution.sh`, as links to a host file: the host file's text reaches neither the
/// agent, the load error, nor the trial.
#[test]
fn task_files_are_not_read_through_links_out_of_the_task() {
    let root = tempfile::tempdir().unwrap();
    let secret = root.path().join("id_rsa");
    std::fs::write(&secret, "HOST-SECRET-KEY\n").unwrap();
    let tasks = root.path().join("tasks");
    let link = |at: &Path| {
        let _ = std::fs::remove_file(at);
        std::os::unix::fs::symlink(&secret, at).unwrap();
    };

    let instr = answer_task(&tasks, "instr", 60.0, REWARD_TXT);
    link(&instr.join("instruction.md"));
    let toml = answer_task(&tasks, "toml", 60.0, REWARD_TXT);
    link(&toml.join("task.toml"));
    let docker = answer_task(&tasks, "docker", 60.0, REWARD_TXT);
    std::fs::remove_dir_all(docker.join("environment")).unwrap();
    std::fs::create_dir_all(docker.join("environment")).unwrap();
    link(&docker.join("environment/Dockerfile"));
    for dir in [&instr, &toml, &docker] {
        let err = task::load(dir).expect_err("a link out is refused");
        assert!(
            err.to_string().contains("link out of the task folder"),
            "{err}"
        );
        assert!(!err.to_string().contains("HOST-SECRET"), "{err}");
    }

    // A TB1 task whose solution.sh is a link to the host file: the oracle's trial errors, and
    // nothing of the host file is in the trial's folder.
    let tb1 = tasks.join("tb1");
    write(
        &tb1.join("task.yaml"),
        "instruction: |\n  Write 42 into /app/answer.txt.\n",
    );
    write(
        &tb1.join("run-tests.sh"),
        "cat /tests/../solution/solution.sh 2>/dev/null; echo '=== 1 passed in 0.01s ==='\n",
    );
    link(&tb1.join("solution.sh"));
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![tb1.clone()], "oracle", out.path());
    a.keep_workdirs = true;
    let report = run(a);
    let t = &report.trials[0];
    let info = t.exception_info.as_ref().expect("an error");
    assert_eq!(info.exception_type, "SolutionCopyError", "{info:?}");
    assert!(
        info.message.contains("link out of the task folder"),
        "{info:?}"
    );
    let leaked = std::process::Command::new("grep")
        .args(["-r", "-l", "HOST-SECRET"])
        .arg(&t.trial_dir)
        .output()
        .unwrap();
    assert!(
        leaked.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&leaked.stdout)
    );
}

/// The summary table prints task names as the task wrote them, but never its escape
/// sequences: an OSC title or a colour change in `[task].name` does not reach the terminal.
#[test]
fn the_summary_table_prints_task_names_without_escapes() {
    let root = tempfile::tempdir().unwrap();
    let dir = answer_task(root.path(), "escapes", 60.0, REWARD_TXT);
    let toml = std::fs::read_to_string(dir.join("task.toml")).unwrap();
    write(
        &dir.join("task.toml"),
        &toml.replace(
            "name = \"t/escapes\"",
            "name = \"t/x\\u001b]0;TASKNAME\\u0007y\\u001b[31m\"",
        ),
    );
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![dir], "nop", out.path()));
    let mut table = Vec::new();
    baton::eval::report::print_table(
        &mut table,
        &report.tasks,
        &report.score,
        &[],
        &[],
        report.wall_sec,
        &report.job_dir,
    )
    .unwrap();
    let table = String::from_utf8(table).unwrap();
    // The OSC sequence goes whole (its payload too); the name's own text stays.
    assert!(table.lines().any(|l| l.starts_with("xy ")), "{table}");
    assert!(
        !table.contains('\u{1b}') && !table.contains('\u{7}'),
        "{table:?}"
    );
}

/// Docker's `RUN` semantics: each `RUN` is its own `/bin/sh -c` with its own exit status. A
/// failure inside an `&&` chain fails the build (the next `RUN` never runs, and the error and
/// setup.log name the line); `RUN false; echo ok` succeeds. Files a `RUN` writes into a new
/// top-level folder (`/data`) are there for the agent and the verifier. Before: the lines ran
/// as one `set -e` script (the chain went on, the `;` line failed with an empty log), and
/// `/data` vanished after setup.
#[test]
fn docker_run_semantics_fixture() {
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![fixture("docker-run")], "oracle", out.path()));
    let by_name = |n: &str| {
        report
            .trials
            .iter()
            .find(|t| t.task_name == n)
            .unwrap_or_else(|| panic!("no trial of {n}"))
    };
    let chain = by_name("and-chain");
    let info = chain.exception_info.as_ref().expect("the build fails");
    assert_eq!(info.exception_type, "EnvironmentSetupError", "{info:?}");
    assert!(
        info.message
            .contains("the Dockerfile's line 2 failed with exit status 1: RUN echo step1 && false"),
        "{info:?}"
    );
    let log = std::fs::read_to_string(chain.trial_dir.join("setup.log")).unwrap();
    assert!(
        log.lines().any(|l| l == "step1") && !log.lines().any(|l| l == "never"),
        "{log}"
    );
    assert!(log.contains("line 2 failed"), "{log}");
    for name in ["semicolon", "toplevel-folder"] {
        let t = by_name(name);
        assert_eq!(
            t.reward,
            Some(1.0),
            "{name}: {:?}; see {}",
            t.exception_info,
            t.trial_dir.display()
        );
    }
}

/// A verifier whose test runner could not be set up (uvx without its Python) scored 0 without
/// judging anything: an error row, not a failure. A verifier that ran its check after a
/// harmless failed download is a real 0. Before, both were "failed (reward 0)".
#[test]
fn a_verifier_that_never_ran_its_tests_is_an_error_not_a_zero() {
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![fixture("verifier-bootstrap")], "nop", out.path()));
    let by_name = |n: &str| report.trials.iter().find(|t| t.task_name == n).unwrap();
    let missing = by_name("runner-missing");
    assert_eq!(missing.reward, None);
    assert!(missing.infrastructure_error);
    let info = missing.exception_info.as_ref().unwrap();
    assert_eq!(info.exception_type, "VerifierBootstrapError", "{info:?}");
    assert!(info.message.contains("No interpreter found"), "{info:?}");
    let zero = by_name("real-zero");
    assert_eq!(zero.reward, Some(0.0), "{:?}", zero.exception_info);
    assert!(!zero.infrastructure_error);
    assert_eq!(
        (report.score.n_scored, report.score.n_errors),
        (1, 1),
        "{:?}",
        report.score
    );
}

/// Public tasks that did not run before: an official image named through a registry mirror
/// (`public.ecr.aws/docker/library/python`), a multi-step task without a top-level `tests/`,
/// a TB1 `task.yaml` whose instruction is a plain multi-line scalar. A Dockerfile whose
/// ENTRYPOINT does something is skipped with the reason, never scored without it.
#[test]
fn harbor_compat_fixture() {
    let dir = fixture("harbor-compat");
    let reason = skip_reason(&dir.join("entrypoint"));
    assert!(
        reason.contains("ENTRYPOINT [\"/entry.sh\"] runs when the container starts"),
        "{reason}"
    );
    let tb1 = load_ready(&dir.join("tb1-plain-yaml"));
    assert_eq!(
        tb1.instruction,
        "Write 42 into /app/answer.txt.\nNothing else."
    );
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![dir], "oracle", out.path()));
    assert_eq!(report.trials.len(), 3, "the entrypoint task is skipped");
    for t in &report.trials {
        assert_eq!(
            t.reward,
            Some(1.0),
            "{}: {:?}; see {}",
            t.task_name,
            t.exception_info,
            t.trial_dir.display()
        );
    }
}

/// As in one container: a server the agent starts and leaves running (`nohup … &`) is still
/// running when the verifier runs, and is gone when the trial ends. Before, each phase was a
/// sandbox of its own and the verifier got "Connection refused".
#[test]
fn a_server_the_agent_leaves_running_is_there_for_the_verifier() {
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![fixture("services")], "oracle", out.path());
    a.isolation = IsolationChoice::Bwrap;
    let report = run(a);
    let t = &report.trials[0];
    assert_eq!(t.isolation, "bwrap");
    assert_eq!(
        t.reward,
        Some(1.0),
        "{:?}; see {}",
        t.exception_info,
        t.trial_dir.display()
    );
    // Ended with the trial: no process of the host runs the fixture's server any more. The
    // trial's end kills bwrap, whose PID namespace takes the server with it, and waits for
    // the namespace to empty (before, the kernel finished that a moment after bwrap was
    // reaped: a loaded CI run once saw the server still listed right after the trial).
    let running = || -> Vec<String> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
            .filter(|c| c.contains("baton-bg-server-fixture") && c.contains("python3"))
            .collect()
    };
    assert!(running().is_empty(), "{:?}", running());
}

/// Ctrl-C during a job: the running trial is ended and recorded as cancelled, no new trial
/// starts, and the job's `result.json` holds what ran (Harbor's stats count the cancelled and
/// pending trials); exit code 130. Progress lines name the whole task, not the 32-character
/// trial name. Before, SIGINT killed baton at once and left no job `result.json`, and the
/// progress line of a long-named task read `a-task-with-a-rather-long-name-b__XXXXXXX`.
#[test]
fn ctrl_c_writes_the_partial_results_and_progress_names_whole_tasks() {
    let root = tempfile::tempdir().unwrap();
    let long = "a-task-with-a-rather-long-name-beyond-thirty-two-characters";
    answer_task(root.path(), long, 60.0, REWARD_TXT);
    let slow = answer_task(root.path(), "b-slow", 120.0, REWARD_TXT);
    write(&slow.join("instruction.md"), "Take your time.\n");
    answer_task(root.path(), "c-pending", 60.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    let agent = r#"cmd:case "$INSTRUCTION" in *time*) touch /logs/agent/started; sleep 120;; esac"#;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("eval")
        .arg(root.path())
        .args([
            "--agent",
            agent,
            "--trials",
            "1",
            "--concurrency",
            "1",
            "--job-name",
            "j",
        ])
        .arg("--out")
        .arg(out.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let job = out.path().join("j");
    // The slow trial's agent is running (no timed assertion: the wait is only bounded).
    let started = (0..1200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
            panic!("baton eval ended early ({status}): {err}");
        }
        std::fs::read_dir(&job)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name().to_string_lossy().starts_with("b-slow__")
                    && e.path().join("agent/started").exists()
            })
    });
    assert!(started, "the slow trial never started");
    // SAFETY: kill(2) of the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let result = result_json(&job.join("result.json"));
    assert_eq!(result["interrupted"], true);
    assert_eq!(result["n_pending_trials"], 1);
    assert_eq!(result["stats"]["n_cancelled_trials"], 1);
    assert_eq!(result["stats"]["n_pending_trials"], 1);
    let trials = result["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2, "{trials:?}");
    let cancelled = trials.iter().find(|t| t["task_name"] == "b-slow").unwrap();
    assert_eq!(
        cancelled["exception_info"]["exception_type"], "CancelledError",
        "{cancelled}"
    );
    assert!(cancelled["reward"].is_null());
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with(&format!("[1/3] {long} (")) && l.contains("failed")),
        "{stderr}"
    );
    assert!(
        stderr.contains("interrupted: 1 trial(s) never started"),
        "{stderr}"
    );
}

/// `/var/log` (and `/var/tmp`, `/var/spool` …) is the trial's own and writable, and what the
/// build and the agent wrote there is there for the verifier. Before, `/var` was the host's,
/// read-only: `RUN mkdir /var/log/app` failed the setup, and a server's `>/var/log/x` failed.
#[test]
fn var_log_is_writable_and_kept_across_phases() {
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![fixture("var-log")], "oracle", out.path());
    a.isolation = IsolationChoice::Bwrap;
    let report = run(a);
    let t = &report.trials[0];
    assert_eq!(
        t.reward,
        Some(1.0),
        "{:?}; see {}",
        t.exception_info,
        t.trial_dir.display()
    );
}

/// `RUN` lines, the agent and the verifier write into `/opt`, `/etc`, `/usr/local` and where
/// pip installs (a pyenv Python's folder under the host's HOME here) as in an image, each
/// phase seeing what the earlier ones wrote, when the runner is root: the trial's own layers
/// over the host's folders, which never change. Not root: those folders stay
/// read-only and the setup error says why and what to do. Before, both failed the setup with
/// a bare "Read-only file system" (2 of 56 public tasks).
#[test]
fn system_folders_are_writable_layers_of_the_trial_when_the_runner_is_root() {
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![fixture("system-layers")], "oracle", out.path());
    a.isolation = IsolationChoice::Bwrap;
    let report = run(a);
    let t = &report.trials[0];
    if nix::unistd::geteuid().is_root() {
        assert_eq!(
            t.reward,
            Some(1.0),
            "{:?} {}",
            t.exception_info,
            std::fs::read_to_string(t.trial_dir.join("verifier/test-stdout.txt"))
                .unwrap_or_default()
        );
    } else {
        let e = t.exception_info.as_ref().expect("the setup fails");
        assert_eq!(e.exception_type, "EnvironmentSetupError", "{e:?}");
        assert!(e.message.contains("line 2 failed"), "{}", e.message);
        assert!(
            e.message
                .contains("read-only in these trials (the runner is not root)"),
            "{}",
            e.message
        );
    }
    for host in [
        "/opt/baton-fixture-baked.txt",
        "/etc/baton-fixture.conf",
        "/usr/local/share/baton-fixture",
        "/usr/local/bin/baton-fixture-made",
    ] {
        assert!(!Path::new(host).exists(), "{host} appeared on the host");
    }
    let purelib = std::process::Command::new("python3")
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let module =
        Path::new(String::from_utf8_lossy(&purelib.stdout).trim()).join("baton_fixture_layer.py");
    assert!(
        !module.exists(),
        "{} appeared on the host",
        module.display()
    );
}

/// The trial's layers are mounted on folders of its own and bound at `/usr` in its world:
/// bwrap, its loader and libraries always come from the host's `/usr` and `/etc`. Before,
/// the layers were mounted over the host's folders in the namespace bwrap was started in, so
/// a `RUN` line that swapped `/usr/bin/bwrap` in the layer had the next phase run its program
/// as the runner (root) with every capability (red team round 5, critical). And a relative
/// `--out` works as root too (the layers' mounts left bwrap in `/`).
#[test]
fn a_trials_layer_never_supplies_the_programs_the_runner_starts() {
    let root = tempfile::tempdir().unwrap();
    let marker = root.path().join("ran-as-the-runner");
    let task = answer_task(root.path(), "trojan", 30.0, REWARD_TXT);
    write(
        &task.join("environment/Dockerfile"),
        &format!(
            "FROM debian:bookworm\nRUN B=$(command -v bwrap) && cp $B $B.real && printf '#!/bin/sh\\necho ran > {}\\nexec %s.real \"$@\"\\n' $B > $B.new && chmod 755 $B.new && mv $B.new $B\nWORKDIR /app\n",
            marker.display()
        ),
    );
    let eval = |out: &Path| {
        let run = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
            .current_dir(root.path())
            .args([
                "eval",
                "--agent",
                "oracle",
                "--env",
                "bwrap",
                "--no-progress",
                "--out",
            ])
            .arg(out)
            .arg(&task)
            .output()
            .expect("baton eval");
        let said = String::from_utf8_lossy(&run.stdout).into_owned();
        said + &String::from_utf8_lossy(&run.stderr)
    };
    let said = eval(&root.path().join("absolute"));
    assert!(
        !marker.exists(),
        "the trial's bwrap ran outside the sandbox"
    );
    if nix::unistd::geteuid().is_root() {
        assert!(said.contains("score 1 passed / 1 scored"), "{said}");
        let said = eval(Path::new("relative"));
        assert!(said.contains("score 1 passed / 1 scored"), "{said}");
    }
}

/// bwrap, running as the runner, follows links on the way to a mount point. The toolchains
/// under a HOME of `/root` are mounted inside the trial's own `/root`: a `RUN` line that
/// renamed `/root/.cargo` and left a link to a host folder in its place had the next phase's
/// bwrap make `bin/` and `registry/` there, as root (red team round 5, medium). The runner
/// now makes the folders on the way plain folders before each phase.
#[test]
fn a_link_a_trial_leaves_on_the_way_to_a_toolchain_leads_bwrap_nowhere() {
    let root = tempfile::tempdir().unwrap();
    let host = root.path().join("host-folder");
    std::fs::create_dir(&host).unwrap();
    let task = answer_task(root.path(), "toolchain-link", 30.0, REWARD_TXT);
    write(
        &task.join("environment/Dockerfile"),
        &format!(
            "FROM debian:bookworm\nRUN (mv /root/.cargo /root/.cargo-moved || true) && ln -s /oldroot{} /root/.cargo\nWORKDIR /app\n",
            host.display()
        ),
    );
    // The user database is bound into the trial's /etc from the agent's phase on, when the
    // task has users: the setup could leave a link there in its layer (red team round 6).
    let users = answer_task(root.path(), "passwd-link", 30.0, REWARD_TXT);
    let toml = std::fs::read_to_string(users.join("task.toml")).unwrap();
    write(
        &users.join("task.toml"),
        &toml.replace("[agent]\n", "[agent]\nuser = \"agentu\"\n"),
    );
    write(
        &users.join("environment/Dockerfile"),
        &format!(
            "FROM debian:bookworm\nRUN (rm -f /etc/passwd && ln -s /oldroot{} /etc/passwd) || true\nWORKDIR /app\nRUN chmod 777 /app\n",
            host.join("passwd").display()
        ),
    );
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![task, users], "oracle", out.path());
    a.isolation = IsolationChoice::Bwrap;
    let report = run(a);
    let made: Vec<_> = std::fs::read_dir(&host)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(made.is_empty(), "bwrap made {made:?} on the host");
    if nix::unistd::geteuid().is_root() {
        for t in &report.trials {
            assert_eq!(
                t.reward,
                Some(1.0),
                "{}: {:?}",
                t.task_name,
                t.exception_info
            );
        }
    }
}

/// `--resume` continues a stopped job as `harbor jobs resume` does: the trials that finished
/// are kept (not run again), a trial without a result (running when the job was killed) is
/// removed and runs again, and the job's result.json holds them all.
#[test]
fn resume_keeps_finished_trials_and_reruns_the_rest() {
    let root = tempfile::tempdir().unwrap();
    answer_task(root.path(), "one", 60.0, REWARD_TXT);
    answer_task(root.path(), "two", 60.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![root.path().to_path_buf()], "oracle", out.path());
    a.job_name = Some("j".into());
    let first = run(a.clone());
    assert_eq!(first.trials.len(), 2);
    let one = first.trials.iter().find(|t| t.task_name == "one").unwrap();
    let two = first.trials.iter().find(|t| t.task_name == "two").unwrap();
    // As if killed while `two` ran: no job result, no result for `two`.
    std::fs::remove_file(first.job_dir.join("result.json")).unwrap();
    std::fs::remove_file(two.trial_dir.join("result.json")).unwrap();

    a.job_name = None;
    a.resume_job = Some("j".into());
    let resumed = run(a.clone());
    assert_eq!(resumed.job_dir, first.job_dir);
    assert_eq!(resumed.trials.len(), 2);
    assert_eq!(resumed.n_total_trials, 2);
    let kept = resumed
        .trials
        .iter()
        .find(|t| t.task_name == "one")
        .unwrap();
    assert_eq!((&kept.id, &kept.trial_name), (&one.id, &one.trial_name));
    let rerun = resumed
        .trials
        .iter()
        .find(|t| t.task_name == "two")
        .unwrap();
    assert_ne!(rerun.trial_name, two.trial_name);
    assert_eq!(rerun.reward, Some(1.0));
    assert!(
        !two.trial_dir.exists(),
        "the unfinished trial's folder is removed"
    );
    assert_eq!(resumed.score.n_passed, 2);
    assert!(first.job_dir.join("result.json").is_file());

    // Nothing to resume: a job folder that does not exist.
    a.resume_job = Some("missing".into());
    assert!(prepare(&a).is_err());
}

/// What a trial writes where the runner reads it back is a trial's, not the host's: a reward
/// file or an agent log left as a FIFO must not block the runner (the job used to hang for
/// ever on the first), and a reward file left as a link to a host file must not be read (its
/// `1` used to become the trial's reward). A well-behaved task beside them still scores.
#[test]
fn trial_outputs_are_never_read_through_links_or_fifos() {
    let root = tempfile::tempdir().unwrap();
    let host_reward = root.path().join("host-reward.txt");
    write(&host_reward, "1\n");
    let fifo_reward = answer_task(
        root.path(),
        "fifo-reward",
        30.0,
        "mkfifo /logs/verifier/reward.txt\n",
    );
    let link_reward = answer_task(
        root.path(),
        "link-reward",
        30.0,
        &format!(
            "ln -s {} /logs/verifier/reward.txt\n",
            host_reward.display()
        ),
    );
    let honest = answer_task(root.path(), "honest", 30.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    // Every agent leaves its own log as a FIFO, and solves the task.
    let agent = "cmd:rm -f /logs/agent/stdout.txt && mkfifo /logs/agent/stdout.txt && echo 42 > /app/answer.txt";
    let trials = eval_bounded(agent, out.path(), &[&fifo_reward, &link_reward, &honest]);
    let rewards: std::collections::BTreeMap<_, _> = trials
        .iter()
        .map(|(name, t)| {
            let error = t["exception_info"]["exception_type"].clone();
            (name.clone(), (t["reward"].clone(), error))
        })
        .collect();
    assert_eq!(rewards["honest"].0, 1.0, "{rewards:?}");
    for name in ["fifo-reward", "link-reward"] {
        let (reward, error) = &rewards[name];
        assert!(reward.is_null(), "{name}: {rewards:?}");
        assert!(
            error.as_str().is_some_and(|e| e.starts_with("Reward")),
            "{name}: {rewards:?}"
        );
    }
}

/// The agent can write the verifier's log folder before the verifier runs (they share one
/// sandbox, as in one container): a link it leaves where the runner creates the verifier's
/// output files must be replaced, not written through (the host file it points at used to be
/// truncated by the runner).
#[test]
fn a_link_the_agent_leaves_for_the_verifiers_logs_is_not_written_through() {
    let root = tempfile::tempdir().unwrap();
    let precious = root.path().join("precious.txt");
    write(&precious, "the user's data\n");
    let task = answer_task(root.path(), "plant", 30.0, REWARD_TXT);
    let out = tempfile::tempdir().unwrap();
    let agent = format!(
        "cmd:mkdir -p /logs/verifier && ln -sf {0} /logs/verifier/test-stdout.txt && ln -sf {0} /logs/verifier/test-stderr.txt && ln -sf {0} /logs/agent/instruction.md; echo 42 > /app/answer.txt",
        precious.display()
    );
    let report = run(args(vec![task], &agent, out.path()));
    assert_eq!(
        std::fs::read_to_string(&precious).unwrap(),
        "the user's data\n"
    );
    let t = &report.trials[0];
    assert_eq!(t.reward, Some(1.0), "{:?}", t.exception_info);
    let logs = t.trial_dir.join("verifier/test-stdout.txt");
    assert!(!std::fs::symlink_metadata(&logs).unwrap().is_symlink());
    // The trial's root may be the host's root on these folders (a runner run as root): what
    // it leaves (a setuid file) is out of other users' reach.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&t.trial_dir)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

/// The environment's setup writes the trial's HOME and `/app`: links it leaves there are
/// never followed by the runner, which installs the `--hooks` file into that HOME (it used to
/// overwrite the host file a planted `hooks.json` link pointed at) and creates the working
/// dir (it used to create it in the host folder a planted link pointed at).
#[test]
fn links_the_setup_leaves_are_not_followed_by_the_runner() {
    let root = tempfile::tempdir().unwrap();
    let victim = root.path().join("victim.conf");
    write(&victim, "the user's config\n");
    let host_dir = root.path().join("host-dir");
    std::fs::create_dir_all(&host_dir).unwrap();
    let dir = root.path().join("planted");
    write(
        &dir.join("task.toml"),
        "[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\nworkdir = \"/app/x/made-by-baton\"\n",
    );
    write(&dir.join("instruction.md"), "Nothing to do.\n");
    write(
        &dir.join("environment/setup.sh"),
        &format!(
            "mkdir -p /root/.config/baton && ln -s {} /root/.config/baton/hooks.json\nln -s {} /app/x\n",
            victim.display(),
            host_dir.display()
        ),
    );
    write(
        &dir.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    );
    let hooks = root.path().join("hooks.json");
    write(&hooks, r#"{"hooks": {}}"#);
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![dir], "baton", out.path());
    a.baton_bin = Some(PathBuf::from(env!("CARGO_BIN_EXE_baton")));
    a.exec_args = vec!["--endpoint".into(), "http://127.0.0.1:9/v1".into()];
    a.hooks = Some(hooks);
    a.isolation = IsolationChoice::Bwrap;
    let _ = run(a);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "the user's config\n"
    );
    assert!(!host_dir.join("made-by-baton").exists());
}

/// The agent shares its sandbox with the verifier and can reach the supervisor's control
/// folders: jamming the job FIFO (the runner used to block for ever on it, leaving the job
/// without results) is an error of that trial; a job status written in advance for every job
/// script it can see, with a reward of its own in the verifier's logs (which used to end the
/// verifier at once and score the agent's 1), finds no job script to name, and the verifier
/// starts from an empty log folder.
#[test]
fn the_agent_cannot_jam_the_supervisor_or_forge_the_verifiers_status() {
    let root = tempfile::tempdir().unwrap();
    let jam = answer_task(root.path(), "jam", 30.0, REWARD_TXT);
    write(&jam.join("instruction.md"), "jam\n");
    let forge = answer_task(
        root.path(),
        "forge",
        30.0,
        "sleep 2; echo 0 > /logs/verifier/reward.txt\n",
    );
    write(&forge.join("instruction.md"), "forge\n");
    let out = tempfile::tempdir().unwrap();
    let agent = r#"cmd:case "$INSTRUCTION" in
jam*) mkfifo /.baton-trial/out/99.pid; echo "kill 99" > /.baton-trial/in/jobs; setsid bash -c 'cat /dev/zero > /.baton-trial/in/jobs' </dev/null >/dev/null 2>&1 & ;;
forge*) echo 1 > /logs/verifier/reward.txt; setsid bash -c 'while :; do for f in /.baton-trial/in/*.sh; do id=${f##*/}; echo 0 > "/.baton-trial/out/${id%.sh}.rc"; done; echo 1 > /logs/verifier/reward.json; sleep 0.05; done' </dev/null >/dev/null 2>&1 & ;;
esac"#;
    let trials = eval_bounded(agent, out.path(), &[&jam, &forge]);
    let jam = &trials["jam"];
    // The send fails after its 2 s (an infrastructure error, no reward) or, when the FIFO had
    // room at that moment, the supervisor reading the flood never starts the verifier in time
    // (a verifier timeout, scored 0 as any verifier that overruns): never a hung job and never
    // the verifier's 1.
    let timed_out = jam["exception_info"]["exception_type"] == "VerifierTimeoutError";
    if timed_out {
        assert_eq!(jam["reward"], 0.0, "{jam:#}");
    } else {
        assert!(jam["reward"].is_null(), "{jam:#}");
        assert!(jam["infrastructure_error"].as_bool().unwrap(), "{jam:#}");
    }
    let forge = &trials["forge"];
    assert_eq!(forge["reward"], 0.0, "{forge:#}");
}

/// Runs `baton eval` under bwrap with `agent` on `tasks`, killed if it runs past 2 minutes (a
/// hung runner is the failure some tests look for); the trials' results by task name.
fn eval_bounded(
    agent: &str,
    out: &Path,
    tasks: &[&Path],
) -> std::collections::BTreeMap<String, serde_json::Value> {
    // A hung runner ignores SIGTERM (it waits on its trials): KILL follows.
    let run = std::process::Command::new("timeout")
        .args(["-k", "5", "120"])
        .arg(env!("CARGO_BIN_EXE_baton"))
        .args([
            "eval",
            "--agent",
            agent,
            "--env",
            "bwrap",
            "--no-progress",
            "--out",
        ])
        .arg(out)
        .args(tasks)
        .output()
        .expect("baton eval");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_ne!(run.status.code(), Some(124), "the job hung: {stderr}");
    let job = std::fs::read_dir(out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("result.json").is_file())
        .unwrap_or_else(|| panic!("no job result: {stderr}"));
    let mut trials = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&job).unwrap().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("result.json")) else {
            continue;
        };
        let t: serde_json::Value = serde_json::from_str(&text).unwrap();
        trials.insert(t["task_name"].as_str().unwrap().to_string(), t);
    }
    trials
}
