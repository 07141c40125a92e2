//! `baton eval` on Harbor's task model beyond one agent and one verifier: multi-step tasks
//! (`[[steps]]`), agent and verifier `user`s, and Dockerfile `COPY` into system folders.

use std::path::{Path, PathBuf};

use baton::cli::eval::{EvalArgs, prepare};
use baton::eval::isolation::IsolationChoice;
use baton::eval::job::{JobReport, run_job};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/eval")
        .join(name)
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
        isolation: std::env::var("BATON_EVAL_ISOLATION")
            .ok()
            .filter(|v| v == "none")
            .map_or(IsolationChoice::Auto, |_| IsolationChoice::None),
        share: Vec::new(),
        keep_workdirs: false,
        min_score: None,
        no_progress: true,
        list: false,
        trailing_exec_args: Vec::new(),
    }
}

fn run(a: EvalArgs) -> JobReport {
    let cfg = prepare(&a).expect("job config");
    run_job(cfg).expect("job runs")
}

fn result_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Harbor's models read a trial folder's `result.json` (`TrialResult`, with `step_results`);
/// prints what `check` prints.
fn harbor_reads(trial_dir: &Path, check: &str) -> Option<String> {
    let python = crate::support::external::require(
        "the harbor package (PyPI) in the test venv",
        crate::support::external::python_with(&["harbor.models.trial.result"]),
    )?;
    let script = format!(
        "import pathlib, sys\nfrom harbor.models.trial.result import TrialResult\nr = TrialResult.model_validate_json(pathlib.Path(sys.argv[1]).read_text())\n{check}\n"
    );
    let out = std::process::Command::new(python)
        .args(["-c", &script])
        .arg(trial_dir.join("result.json"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A multi-step task runs each step's agent with its own instruction, in order, in one
/// environment: the step's `workdir/` files and `setup.sh` before its agent, its verifier with
/// the task's tests and the step's over them (and none of the previous step's), the step's
/// verifier env over the task's. The trial's reward is the per-key mean of the steps'.
#[test]
fn multi_step_tasks_run_every_step_in_one_environment() {
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![fixture("multi-step")], "oracle", out.path()));
    assert_eq!(report.trials.len(), 1);
    let t = &report.trials[0];
    let steps = t.step_results.as_ref().expect("step results");
    let show = |s: &baton::eval::trial::StepRecord| {
        format!(
            "{}: {:?} {:?}; {}",
            s.step_name,
            s.reward,
            s.exception_info,
            std::fs::read_to_string(s.dir.join("verifier/test-stdout.txt")).unwrap_or_default()
        )
    };
    assert_eq!(
        steps.len(),
        2,
        "{:?}",
        steps.iter().map(show).collect::<Vec<_>>()
    );
    for s in steps {
        assert_eq!(s.reward, Some(1.0), "{}", show(s));
    }
    assert_eq!(t.reward, Some(1.0), "{:?}", t.exception_info);
    // `style` is only in the second step's rewards: a missing key counts 0 in the mean.
    assert_eq!(t.verifier_rewards.get("style"), Some(&0.25));
    assert!(!t.infrastructure_error);
    // Each step's logs are under steps/<name>/, as Harbor lays out a multi-step trial.
    let create = t.trial_dir.join("steps/create");
    let extend = t.trial_dir.join("steps/extend");
    assert!(create.join("verifier/reward.txt").is_file());
    assert!(extend.join("verifier/reward.json").is_file());
    assert_eq!(
        std::fs::read_to_string(extend.join("artifacts/greeting.txt")).unwrap(),
        "hello\n7\n"
    );
    let json = result_json(&t.trial_dir.join("result.json"));
    assert_eq!(json["step_results"][0]["step_name"], "create");
    assert_eq!(
        json["step_results"][1]["verifier_result"]["rewards"]["style"],
        0.5
    );
    assert_eq!(json["verifier_result"]["rewards"]["reward"], 1.0);
    if let Some(seen) = harbor_reads(
        &t.trial_dir,
        "print([s.step_name for s in r.step_results], r.step_results[1].verifier_result.rewards['style'], r.verifier_result.rewards['reward'])",
    ) {
        assert_eq!(seen, "['create', 'extend'] 0.5 1.0");
    }
    // The trial's config.json is a Harbor `TrialConfig` (the task by path, the trial's name).
    if let Some(python) = crate::support::external::require(
        "the harbor package (PyPI) in the test venv",
        crate::support::external::python_with(&["harbor.models.trial.config"]),
    ) {
        let out = std::process::Command::new(python)
            .args([
                "-c",
                "import pathlib, sys\nfrom harbor.models.trial.config import TrialConfig\n\
                 c = TrialConfig.model_validate_json(pathlib.Path(sys.argv[1]).read_text())\n\
                 print(c.task.path.name, c.trial_name == pathlib.Path(sys.argv[1]).parent.name, \
                 c.agent.name, c.timeout_multiplier)",
            ])
            .arg(t.trial_dir.join("config.json"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "steps True oracle 1.0"
        );
    }

    // The agent gets each step's instruction in turn; nothing solved, so the first step's
    // `min_reward = 1` stops the trial after it.
    let cmd = "echo \"$INSTRUCTION\" >> /tmp/instructions.txt";
    let report = run(args(
        vec![fixture("multi-step")],
        &format!("cmd:{cmd}"),
        out.path(),
    ));
    let t = &report.trials[0];
    let steps = t.step_results.as_ref().unwrap();
    assert_eq!(steps.len(), 1, "min_reward stops the trial");
    assert_eq!(steps[0].reward, Some(0.0));
    assert_eq!(t.reward, Some(0.0));
    assert!(
        std::fs::read_to_string(t.trial_dir.join("steps/create/agent/instruction.md"))
            .unwrap()
            .contains("/app/greeting.txt holding the single line")
    );
    assert!(!t.trial_dir.join("steps/extend").exists());
}

/// `[agent].user` / `[verifier].user` and the Dockerfile's `USER`: those phases run as that
/// user (its own uid, its name in the trial's `/etc/passwd`, `USER` set), the setup as root,
/// and the environment's files are the user's to write. Without a sandbox it is an error row.
#[test]
fn agent_and_verifier_users() {
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![fixture("users")], "oracle", out.path());
    if std::env::var("BATON_EVAL_ISOLATION").is_ok_and(|v| v == "none") {
        return;
    }
    let report = run(a.clone());
    assert_eq!(report.trials.len(), 2);
    for t in &report.trials {
        let log = std::fs::read_to_string(t.trial_dir.join("verifier/test-stdout.txt"))
            .unwrap_or_default();
        assert_eq!(
            t.reward,
            Some(1.0),
            "{}: {:?} {log}",
            t.task_name,
            t.exception_info
        );
    }
    let nop = run(args(vec![fixture("users")], "nop", out.path()));
    assert!(nop.trials.iter().all(|t| t.reward == Some(0.0)));

    a.isolation = IsolationChoice::None;
    let plain = run(a);
    for t in &plain.trials {
        assert!(t.infrastructure_error, "{}", t.task_name);
        let e = t.exception_info.as_ref().unwrap();
        assert_eq!(e.exception_type, "UserSetupError");
        assert!(e.message.contains("--isolation bwrap"), "{}", e.message);
    }
}

/// Dockerfile `COPY` and `WORKDIR` into system folders: the paths the host lacks
/// (`/opt/greeter`, `/var/lib/greeter`, `/etc/greeter.conf`) and a file in a folder it has
/// (`/usr/local/bin/…`) are the trial's own, mounted there in every phase with variables
/// expanded; the rest of each folder is the host's (under a layer of the trial's own when the runner is root), and the host is untouched.
#[test]
fn copies_into_system_folders_are_the_trials() {
    let dir = fixture("copy-system");
    let task = match baton::eval::task::load(&dir).unwrap() {
        baton::eval::task::Loaded::Ready(t) => t,
        baton::eval::task::Loaded::Skipped(s) => panic!("skipped: {}", s.reason),
    };
    let mounts: Vec<(String, bool)> = task
        .environment
        .system_mounts
        .iter()
        .map(|m| (m.path.clone(), m.file))
        .collect();
    let expected = [
        ("/etc/greeter.conf", true),
        ("/opt/greeter", false),
        ("/usr/local/bin/baton-fixture-greet", true),
        ("/var/lib/greeter", false),
    ];
    assert_eq!(mounts, expected.map(|(p, f)| (p.to_string(), f)).to_vec());
    if std::env::var("BATON_EVAL_ISOLATION").is_ok_and(|v| v == "none") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![dir.clone()], "oracle", out.path());
    a.isolation = IsolationChoice::Bwrap;
    a.keep_workdirs = true;
    let report = run(a);
    let t = &report.trials[0];
    assert_eq!(
        t.reward,
        Some(1.0),
        "{:?} {}",
        t.exception_info,
        std::fs::read_to_string(t.trial_dir.join("verifier/test-stdout.txt")).unwrap_or_default()
    );
    let kept = t.trial_dir.join("work/system");
    assert_eq!(
        std::fs::read_to_string(kept.join("var/lib/greeter/message.txt")).unwrap(),
        "hello from /opt\n"
    );
    for (path, _) in expected {
        assert!(!Path::new(path).exists(), "{path} appeared on the host");
    }
    let nop = run(args(vec![dir], "nop", out.path()));
    assert_eq!(
        nop.trials[0].reward,
        Some(0.0),
        "{:?}",
        nop.trials[0].exception_info
    );
}

/// Malformed multi-step tasks are error rows that say what is wrong: a step name that is a
/// path, a step without a test script, a step folder that links out of the task, a bad
/// `min_reward` or `multi_step_reward_strategy`; a bad `user` is an error row of the trial.
#[test]
fn malformed_steps_and_users_are_error_rows() {
    let root = tempfile::tempdir().unwrap();
    let task = |name: &str, toml: &str, files: &[(&str, &str)]| {
        let dir = root.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("task.toml"), toml).unwrap();
        for (path, text) in files {
            let p = dir.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        dir
    };
    let load_err = |dir: &Path| baton::eval::task::load(dir).unwrap_err().to_string();
    let step_files = [
        ("steps/one/instruction.md", "do one"),
        (
            "steps/one/tests/test.sh",
            "echo 1 > /logs/verifier/reward.txt",
        ),
    ];
    let e = load_err(&task(
        "slash",
        "[[steps]]\nname = \"../one\"\n",
        &step_files,
    ));
    assert!(e.contains("steps[].name"), "{e}");
    let e = load_err(&task(
        "no-test",
        "[[steps]]\nname = \"one\"\n",
        &[("steps/one/instruction.md", "do one")],
    ));
    assert!(
        e.contains("step 'one' has no steps/one/tests/test.sh"),
        "{e}"
    );
    let e = load_err(&task(
        "gate",
        "[[steps]]\nname = \"one\"\nmin_reward = \"high\"\n",
        &step_files,
    ));
    assert!(e.contains("min_reward"), "{e}");
    let e = load_err(&task(
        "strategy",
        "multi_step_reward_strategy = \"best\"\n[[steps]]\nname = \"one\"\n",
        &step_files,
    ));
    assert!(e.contains("multi_step_reward_strategy"), "{e}");
    let e = load_err(&task("empty", "steps = []\n", &[]));
    assert!(e.contains("at least one step"), "{e}");
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("instruction.md"), "from outside").unwrap();
    let linked = task(
        "linked",
        "[[steps]]\nname = \"one\"\n",
        &[("tests/test.sh", "true")],
    );
    std::fs::create_dir_all(linked.join("steps")).unwrap();
    std::os::unix::fs::symlink(outside.path(), linked.join("steps/one")).unwrap();
    let e = load_err(&linked);
    assert!(e.contains("a link out of it"), "{e}");

    let bad_user = task(
        "bad-user",
        "[agent]\nuser = \"a b\"\n[environment]\nallow_internet = false\n",
        &[
            ("instruction.md", "x"),
            ("tests/test.sh", "echo 1 > /logs/verifier/reward.txt"),
        ],
    );
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![bad_user], "nop", out.path()));
    let t = &report.trials[0];
    assert!(t.infrastructure_error);
    let e = t.exception_info.as_ref().unwrap();
    assert_eq!(e.exception_type, "UserSetupError");
    assert!(e.message.contains("'a b'"), "{}", e.message);
}

/// What an agent leaves in its folders cannot make the runner write on the host: a link in
/// the working dir where the next step's `workdir/` files go, and a link in `/logs/artifacts`
/// where an artifact is copied, both aimed at a host file.
#[test]
fn links_a_hostile_agent_leaves_do_not_lead_the_runner_out() {
    if std::env::var("BATON_EVAL_ISOLATION").is_ok_and(|v| v == "none") {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let victim = out.path().join("victim.txt");
    std::fs::write(&victim, "untouched\n").unwrap();
    let v = victim.display();
    let cmd = format!(
        "cmd:case \"$INSTRUCTION\" in *Create*) echo hello > /app/greeting.txt; ln -s {v} /app/data.txt;; *) ln -s {v} /logs/artifacts/greeting.txt;; esac"
    );
    let report = run(args(vec![fixture("multi-step")], &cmd, out.path()));
    let t = &report.trials[0];
    let steps = t.step_results.as_ref().unwrap();
    assert_eq!(steps[0].reward, Some(1.0), "{:?}", steps[0].exception_info);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");

    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("art");
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(
        dir.join("task.toml"),
        "artifacts = [\"/app/out.txt\"]\n[environment]\nallow_internet = false\n",
    )
    .unwrap();
    std::fs::write(dir.join("instruction.md"), "x").unwrap();
    std::fs::write(
        dir.join("tests/test.sh"),
        "echo 1 > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let cmd = format!(
        "cmd:echo pwned > /app/out.txt; ln -s {v} /logs/artifacts/out.txt; ln -s {v} /logs/artifacts/manifest.json"
    );
    let report = run(args(vec![dir], &cmd, out.path()));
    let t = &report.trials[0];
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched\n");
    let manifest = std::fs::read_to_string(t.trial_dir.join("artifacts/manifest.json")).unwrap();
    assert!(manifest.contains("\"ok\""), "{manifest}");
    assert_eq!(
        std::fs::read_to_string(t.trial_dir.join("artifacts/out.txt")).unwrap(),
        "pwned\n"
    );
}
