//! The command line without a model: flags, configuration layers and their errors, help,
//! completions, `sessions` and `doctor` (against the mock engine on loopback).

use crate::support::env::Env;
use crate::support::{MockEngine, Script};
use assert_cmd::Command;
use predicates::prelude::*;

#[test]
fn help_lists_the_main_options_and_exit_codes() {
    Env::new().baton().arg("--help").assert().success().stdout(
        predicate::str::contains("--exec")
            .and(predicate::str::contains("--endpoint"))
            .and(predicate::str::contains("--resume"))
            .and(predicate::str::contains("Exit codes"))
            .and(predicate::str::contains("143 SIGTERM"))
            // In mol mode `--reasoning low` is sent as high: the help says so.
            .and(predicate::str::contains("any other value is")),
    );
}

#[test]
fn completions_are_generated() {
    Env::new()
        .baton()
        .args(["completions", "bash"])
        .assert()
        .success()
        .stdout(predicate::str::contains("baton"));
}

#[test]
fn a_bad_flag_value_is_a_usage_error() {
    Env::new()
        .baton()
        .args(["--mode", "bogus", "--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bogus"));
    Env::new()
        .baton()
        .args(["--max-turns", "zero", "--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--max-turns").and(predicate::str::contains("zero")));
    Env::new()
        .baton()
        .args(["--endpoint", "localhost:8000", "--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("endpoint"));
}

#[test]
fn an_unknown_config_key_names_the_file_and_the_key() {
    let env = Env::new();
    let path = env.user_config("endpoint = \"http://127.0.0.1:9/v1\"\nmodle = \"x\"\n");
    env.baton().args(["--exec", "x"]).assert().code(2).stderr(
        predicate::str::contains(path.display().to_string())
            .and(predicate::str::contains("modle"))
            .and(predicate::str::contains("unknown key")),
    );
}

#[test]
fn a_bad_config_value_names_the_file_the_key_and_the_reason() {
    let env = Env::new();
    let path = env.project_config("approval = \"sometimes\"\n");
    env.baton().args(["--exec", "x"]).assert().code(2).stderr(
        predicate::str::contains(path.display().to_string())
            .and(predicate::str::contains("approval"))
            .and(predicate::str::contains("sometimes")),
    );
    let env = Env::new();
    env.user_config("mode = [1, 2]\n");
    env.baton()
        .args(["--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("mode"));
    let env = Env::new();
    env.user_config("this is not toml");
    env.baton()
        .args(["--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("not valid TOML"));
}

#[test]
fn a_bad_env_value_names_the_variable() {
    Env::new()
        .baton()
        .env("BATON_TIMEOUT", "soon")
        .args(["--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("BATON_TIMEOUT"));
}

#[test]
fn no_endpoint_and_no_local_model_explains_how_to_configure_one() {
    Env::new()
        .baton()
        .args(["--exec", "hello"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("--endpoint")
                .and(predicate::str::contains("--local"))
                .and(predicate::str::contains("BATON_API_KEY")),
        );
}

#[test]
fn exec_without_a_prompt_on_an_empty_stdin_is_a_usage_error() {
    Env::new()
        .baton()
        .args(["--exec", "--endpoint", "http://127.0.0.1:9/v1"])
        .write_stdin("")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("empty"));
}

#[test]
fn precedence_is_flag_then_env_then_project_then_user() {
    let engine = MockEngine::scripted_blocking(Script::new().otherwise("ok"));
    let env = Env::new();
    env.user_config(&format!(
        "endpoint = \"{}\"\nmode = \"single\"\nmodel = \"from-user\"\n",
        engine.url()
    ));
    let run = |cmd: &mut Command| {
        cmd.args(["--session-dir", "s", "--exec", "x"])
            .assert()
            .success();
    };
    run(&mut env.baton());
    env.project_config("model = \"from-project\"\n");
    run(&mut env.baton());
    run(env.baton().env("BATON_MODEL", "from-env"));
    run(env
        .baton()
        .env("BATON_MODEL", "from-env")
        .args(["--model", "from-flag"]));
    let models: Vec<String> = engine
        .chat_requests()
        .iter()
        .map(|r| r.model().to_string())
        .collect();
    assert_eq!(
        models,
        ["from-user", "from-project", "from-env", "from-flag"]
    );
}

/// Red team finding 15: an untrusted `.baton/config.toml` with `local = "wts"` switched a run
/// the user pointed at an endpoint to the repository's own weights (parsed by the unsandboxed
/// process). `local` is the user's choice only, like `endpoint`: the run goes to the endpoint
/// and the key is named as ignored.
#[test]
fn an_untrusted_project_cannot_switch_the_run_to_its_own_weights() {
    let engine = MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "hi"));
    let env = Env::new();
    let wts = env.workspace.join(".baton/wts");
    std::fs::create_dir_all(wts.join("base")).expect("mkdir");
    env.project_config("local = \"wts\"\n");
    let out = env
        .session_baton()
        .args(["--endpoint", &engine.url(), "--exec", "hi"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("local engine"), "{stderr}");
    assert!(stderr.contains("ignored `local`"), "{stderr}");
    assert!(!engine.chat_requests().is_empty(), "the endpoint answered");
}

#[test]
fn sessions_lists_saved_sessions() {
    let engine = MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "hi"));
    let env = Env::new();
    env.baton()
        .args([
            "--session-dir",
            "s",
            "--exec",
            "--endpoint",
            &engine.url(),
            "list my sessions please",
        ])
        .assert()
        .success();
    env.baton()
        .args(["sessions", "--session-dir", "s"])
        .assert()
        .success()
        .stdout(predicate::str::contains("list my sessions please"));
}

#[test]
fn resume_of_an_unknown_session_is_a_usage_error() {
    let engine = MockEngine::scripted_blocking(Script::new());
    Env::new()
        .baton()
        .args([
            "--session-dir",
            "s",
            "--exec",
            "--endpoint",
            &engine.url(),
            "--resume",
            "nope",
            "x",
        ])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no session 'nope'"));
}

#[test]
fn doctor_reports_a_healthy_endpoint() {
    let engine = MockEngine::scripted_blocking(Script::new());
    Env::new()
        .baton()
        .args(["doctor", "--endpoint", &engine.url()])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("L0–L3 are served")
                .and(predicate::str::contains("All checks passed")),
        );
}

#[test]
fn doctor_names_missing_adapters_and_an_unreachable_endpoint() {
    let engine = MockEngine::builder()
        .models([("L0", None), ("L2", None)])
        .start_blocking(|_: &crate::support::RecordedRequest| crate::support::MockReply::text("x"));
    Env::new()
        .baton()
        .args(["doctor", "--endpoint", &engine.url()])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("missing: L1, L3"));
    Env::new()
        .baton()
        .args(["doctor", "--endpoint", "http://127.0.0.1:9/v1"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("PROBLEM"));
}

#[test]
fn doctor_checks_a_profile_folder() {
    let env = Env::new();
    let profile = env.workspace.join("prof");
    std::fs::create_dir_all(&profile).expect("mkdir");
    std::fs::write(
        profile.join("lora.md"),
        "## L0\nadapter_name: L0\n### Description\nchat\n",
    )
    .expect("write");
    std::fs::write(
        profile.join("route.md"),
        "{{LORA_DESCRIPTIONS}}\n{{ROUTE_LABELS}}\nmodel_id=",
    )
    .expect("write");
    std::fs::write(profile.join("intro.md"), "I am baton").expect("write");
    std::fs::write(profile.join("summary.md"), "Summarize.").expect("write");
    env.baton()
        .args(["doctor", "--profile", "prof"])
        .assert()
        .code(1)
        .stdout(predicate::str::contains("exactly L0, L1, L2, L3"));
}

#[test]
fn the_line_repl_answers_each_line_and_exits_at_end_of_input() {
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L0"])
            .answer("L2", "first answer")
            .answer("L0", "second answer"),
    );
    let env = Env::new();
    let out = env
        .baton()
        .args(["--session-dir", "s", "--endpoint", &engine.url()])
        .write_stdin("hello\nhow are you\n")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("first answer"), "{stdout}");
    assert!(stdout.contains("second answer"), "{stdout}");
    assert_eq!(engine.requests_for_hop("answer").len(), 2);
}

#[test]
fn root_options_before_a_subcommand_do_not_turn_it_into_a_prompt() {
    let env = Env::new();
    env.baton()
        .args([
            "--endpoint",
            "http://127.0.0.1:9/v1",
            "sessions",
            "--session-dir",
            "s",
        ])
        .write_stdin("")
        .assert()
        .success()
        .stderr(predicate::str::contains("No sessions"));
}

/// `baton sessions | head`, `baton doctor | head -1`, `baton completions bash | head`: the
/// reader goes away early; baton ends quietly (no panic, no backtrace, no exit 101).
#[test]
fn a_closed_stdout_ends_a_report_quietly() {
    use std::io::Read;
    use std::process::Stdio;
    let env = Env::new();
    for args in [
        vec!["completions", "bash"],
        vec!["sessions"],
        vec!["doctor", "--endpoint", "http://127.0.0.1:9/v1"],
    ] {
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("baton"))
            .env_clear()
            .env("HOME", &env.home)
            .env("XDG_CONFIG_HOME", env.home.join(".config"))
            .env("XDG_DATA_HOME", env.home.join(".local/share"))
            .current_dir(&env.workspace)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn baton");
        // The reader is gone before baton writes a byte (`| head -c0`).
        drop(child.stdout.take());
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("read stderr");
        let status = child.wait().expect("wait");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        assert_ne!(status.code(), Some(101), "{args:?}: {stderr}");
    }
}

#[test]
fn sessions_help_is_about_sessions_not_the_model() {
    let out = Env::new()
        .baton()
        .args(["sessions", "--help"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--json", "--all", "--limit", "--session-dir"] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
    }
    for flag in [
        "--endpoint",
        "--model",
        "--reasoning",
        "--device",
        "--sandbox",
    ] {
        assert!(!help.contains(flag), "{flag} listed:\n{help}");
    }
}

/// Two sessions here (one named from the line REPL), one in another folder: `sessions` lists
/// this workspace's, `--all` every one, `--json` the same as data; `--resume last` never takes
/// the other folder's session unless `--all` says so, and then warns.
#[test]
fn sessions_and_resume_last_are_per_workspace() {
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L0", "L1", "L2"])
            .answer("L2", "one")
            .answer("L0", "two")
            .answer("L1", "three")
            .answer("L2", "four"),
    );
    let env = Env::new();
    let other = env.home.join("other-project");
    std::fs::create_dir_all(&other).expect("mkdir");
    let run = |args: &[&str]| {
        env.session_baton()
            .args(["--endpoint", &engine.url()])
            .args(args)
            .output()
            .expect("run")
    };
    let first = run(&["--exec", "fix the parser"]);
    assert_eq!(first.status.code(), Some(0));
    let hint = String::from_utf8_lossy(&first.stderr);
    assert!(
        hint.contains("To continue this session: baton --resume "),
        "{hint}"
    );
    let repl = env
        .session_baton()
        .args(["--endpoint", &engine.url()])
        .write_stdin("add tests\n/rename parser work\n")
        .output()
        .expect("repl");
    assert_eq!(repl.status.code(), Some(0));
    let elsewhere = run(&["-C", other.to_str().expect("utf-8"), "--exec", "deploy"]);
    assert_eq!(elsewhere.status.code(), Some(0));

    let listed = run(&["sessions"]);
    let table = String::from_utf8_lossy(&listed.stdout);
    assert!(
        table.contains("LAST ACTIVITY") && table.contains("WORKSPACE"),
        "{table}"
    );
    assert!(table.contains("[parser work] add tests"), "{table}");
    assert!(
        table.contains("fix the parser") && !table.contains("deploy"),
        "{table}"
    );
    assert!(String::from_utf8_lossy(&listed.stderr).contains("1 in other workspaces"));
    let all = run(&["sessions", "--all", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&all.stdout).expect("json");
    let list = list.as_array().expect("array");
    assert_eq!(list.len(), 3);
    assert_eq!(list[0]["first_message"], "deploy");
    assert_eq!(list[0]["workspace"], other.display().to_string());
    assert_eq!(list[1]["name"], "parser work");
    assert_eq!(list[1]["turns"], 1);
    assert!(list[2]["name"].is_null());
    assert!(
        list[2]["last_activity"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );

    // The newest session overall is the other folder's; `last` here is this folder's.
    let fresh = env.home.join("fresh");
    std::fs::create_dir_all(&fresh).expect("mkdir");
    let none = run(&[
        "-C",
        fresh.to_str().expect("utf-8"),
        "--exec",
        "--resume",
        "last",
        "x",
    ]);
    assert_eq!(none.status.code(), Some(2));
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("no sessions in this workspace"), "{err}");
    assert!(err.contains("--all"), "{err}");
    let widened = run(&[
        "-C",
        fresh.to_str().expect("utf-8"),
        "--exec",
        "--resume",
        "last",
        "--all",
        "and now?",
    ]);
    assert_eq!(widened.status.code(), Some(0));
    let err = String::from_utf8_lossy(&widened.stderr);
    assert!(
        err.contains(&format!("this session was made in {}", other.display())),
        "{err}"
    );
    let continued = std::fs::read_to_string(list[0]["path"].as_str().expect("path")).expect("read");
    assert!(continued.contains("and now?"), "{continued}");
}

/// `/quit` right after a line: the line's turn is answered before the REPL leaves.
#[test]
fn the_line_repl_finishes_queued_turns_before_quit() {
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L0"])
            .answer("L2", "first answer")
            .answer("L0", "second answer"),
    );
    let env = Env::new();
    let out = env
        .baton()
        .args(["--session-dir", "s", "--endpoint", &engine.url()])
        .write_stdin("hello\nhow are you\n/quit\nnot sent\n")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("first answer"), "{stdout}");
    assert!(stdout.contains("second answer"), "{stdout}");
    assert_eq!(engine.requests_for_hop("answer").len(), 2);
}

/// Under umask 022 the session file is still owner-only, in an owner-only folder.
#[test]
fn session_files_are_private_under_umask_022() {
    use std::os::unix::fs::PermissionsExt;
    let engine = MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "hi"));
    let env = Env::new();
    // assert_cmd cannot set a umask: the binary runs through `sh -c 'umask 022 && exec …'`.
    let exe = assert_cmd::cargo::cargo_bin("baton");
    let sessions = env.home.join("private-sessions");
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg("umask 022 && exec \"$0\" \"$@\"")
        .arg(&exe)
        .args(["--session-dir"])
        .arg(&sessions)
        .args(["--exec", "--endpoint", &engine.url(), "hello"])
        .env_clear()
        .env("HOME", &env.home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&env.workspace)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("sh");
    assert!(status.status.success(), "{status:?}");
    let mode =
        |p: &std::path::Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&sessions), 0o700);
    let files: Vec<_> = std::fs::read_dir(&sessions)
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(!files.is_empty());
    for f in files {
        assert_eq!(mode(&f), 0o600, "{}", f.display());
    }
}

#[test]
fn the_line_repl_offers_always_for_what_the_core_remembers_only() {
    use crate::support::MockReply;
    use std::io::{Read, Write};
    use std::process::Stdio;
    let call = |id: &str, cmd: &str| {
        MockReply::tool_call(
            id,
            "shell",
            serde_json::json!({ "command": cmd }).to_string(),
        )
    };
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer("L2", call("c1", "touch a.txt"))
            .answer("L2", call("c2", "touch b.txt"))
            .answer("L2", call("c3", "sudo touch c.txt"))
            .answer("L2", "done"),
    );
    let env = Env::new();
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("baton"));
    cmd.env_clear()
        .env("HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&env.workspace)
        .args([
            "--session-dir",
            "s",
            "--endpoint",
            &engine.url(),
            "--approval",
            "ask",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stderr = child.stderr.take().expect("stderr");
    let mut seen = String::new();
    // Reads stderr until `want` has appeared `n` times.
    let mut wait_for = |seen: &mut String, want: &str, n: usize| {
        let mut buf = [0u8; 4096];
        while seen.matches(want).count() < n {
            let got = stderr.read(&mut buf).expect("read stderr");
            assert!(got > 0, "baton ended before `{want}`: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..got]));
        }
    };
    stdin.write_all(b"make files\n").expect("write");
    wait_for(&mut seen, "approve: ", 1);
    stdin.write_all(b"a\n").expect("write");
    wait_for(&mut seen, "approve: ", 2);
    stdin.write_all(b"n\n").expect("write");
    drop(stdin);
    let _ = stderr.read_to_string(&mut seen);
    let _ = child.wait();
    // `touch` is offered and remembered: the second touch is not asked.
    assert!(seen.contains("[a]lways for `touch`"), "{seen}");
    assert_eq!(seen.matches("run `touch").count(), 1, "{seen}");
    // A wrapper has no "always".
    assert!(
        seen.contains("approve: run `sudo touch c.txt`? [y]es / [n]o: "),
        "{seen}"
    );
}

/// An interactive session checks the endpoint at start (`/models`); the first turn's
/// context-window lookup uses that answer instead of asking again.
#[test]
fn an_interactive_session_asks_for_the_model_list_once() {
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L0"])
            .answer("L2", "first answer")
            .answer("L0", "second answer"),
    );
    let env = Env::new();
    let out = env
        .baton()
        .args(["--session-dir", "s", "--endpoint", &engine.url()])
        .write_stdin("hello\nhow are you\n")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    let listings = engine
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/models")
        .count();
    assert_eq!(
        listings, 1,
        "one /models request for the check and the window"
    );
}

#[test]
fn doctor_expands_a_tilde_in_hook_commands_as_sh_does() {
    // The docs' example hook is `~/.config/baton/hooks/no-rm-rf.sh`: it runs (sh expands `~`),
    // and doctor called it a PROBLEM ("does not exist") with exit 1.
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new());
    let script = env.home.join("bin/guard.sh");
    std::fs::create_dir_all(script.parent().expect("parent")).expect("mkdir");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write");
    let hooks = env.home.join(".config/baton/hooks.json");
    std::fs::create_dir_all(hooks.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &hooks,
        r#"{"hooks":{"PreToolUse":[{"matcher":"shell","hooks":[
            {"type":"command","command":"~/bin/guard.sh","timeout":5},
            {"type":"command","command":"~/bin/missing.sh","timeout":5}]}]}}"#,
    )
    .expect("write hooks");
    let out = env
        .baton()
        .args(["doctor", "--endpoint", &engine.url()])
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ok       PreToolUse [shell] ~/bin/guard.sh (timeout 5s)"),
        "{text}"
    );
    assert!(
        text.contains("PROBLEM  PreToolUse [shell] ~/bin/missing.sh (timeout 5s):")
            && text.contains("bin/missing.sh does not exist"),
        "{text}"
    );
}
