//! Configuration errors, `baton doctor` and the checks `--exec` makes before it sends
//! anything, through the real binary (issue: a developer's first week).

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script};
use predicates::prelude::*;

#[test]
fn a_missing_cd_folder_names_the_flag() {
    Env::new()
        .baton()
        .args(["--cd", "/nonexistent/baton-ws", "--exec", "x"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("flag -C/--cd").and(predicate::str::contains(
                "/nonexistent/baton-ws: folder not found",
            )),
        );
}

#[test]
fn config_errors_name_the_line_and_the_nearest_key() {
    let env = Env::new();
    let path = env.user_config("endpoint = \"http://127.0.0.1:9/v1\"\napprovals = \"ask\"\n");
    env.baton()
        .args(["--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{}:2: key `approvals`: unknown key, did you mean `approval`?",
            path.display()
        )));
    env.user_config("endpoint = \"http://127.0.0.1:9/v1\"\n[sandbox]\nnetwork = yes\n");
    env.baton()
        .args(["--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!(
            "{}:3:11: not valid TOML",
            path.display()
        )));
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unwritable_output_file_fails_before_any_request() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new().route("L0").answer("L0", "hi"));
    let out = env
        .exec(
            &engine,
            "hello",
            &["-o", "/nonexistent/baton-out/answer.txt"],
        )
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("-o /nonexistent/baton-out/answer.txt: cannot write"),
        "{}",
        stderr_of(&out)
    );
    assert!(engine.requests().is_empty(), "a request was sent");
    // A writable one is only created by the answer.
    let path = env.workspace.join("answer.txt");
    let out = env
        .exec(&engine, "hello", &["-o", path.to_str().unwrap()])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "hi");
}

#[test]
fn the_no_endpoint_message_names_the_config_file_xdg_points_at() {
    let env = Env::new();
    let elsewhere = env.home.join("elsewhere");
    let out = env
        .baton()
        .env("XDG_CONFIG_HOME", &elsewhere)
        .args(["--exec", "x"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = stderr_of(&out);
    let path = elsewhere.join("baton/config.toml");
    assert!(err.contains(&format!("in {}", path.display())), "{err}");
    assert!(!err.contains("~/.config"), "{err}");
}

#[test]
fn a_turn_whose_every_call_is_declined_says_how_to_allow_it_and_exits_4() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "keep me").unwrap();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("c1", "shell", r#"{"command":"rm notes.txt"}"#),
            )
            .answer("L2", "I could not remove it."),
    );
    let out = env
        .exec(&engine, "remove notes.txt", &[])
        .output()
        .expect("run");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("tool declined: rm notes.txt (needs approval; nobody can approve in --exec)"),
        "{err}"
    );
    assert!(
        err.contains("--approval auto-edit") && err.contains("--approval full-auto"),
        "{err}"
    );
    // The text meant for the model stays with the model.
    assert!(!err.contains("Do not retry"), "{err}");
    assert!(env.workspace.join("notes.txt").exists());
}

#[test]
fn a_decline_next_to_work_that_ran_still_exits_0_with_the_hint() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "keep me").unwrap();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("c1", "read_file", r#"{"path":"notes.txt"}"#),
            )
            .answer(
                "L2",
                MockReply::tool_call("c2", "shell", r#"{"command":"rm notes.txt"}"#),
            )
            .answer("L2", "Read it; could not remove it."),
    );
    let out = env
        .exec(&engine, "read then remove", &[])
        .output()
        .expect("run");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("1 tool call was declined"), "{err}");
}

#[test]
fn doctor_lists_a_config_error_and_still_runs_the_other_checks() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new());
    let path = env.user_config("approvals = \"ask\"\n");
    let out = env
        .baton()
        .args(["doctor", "--endpoint", &engine.url()])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "PROBLEM  {}:1: key `approvals`: unknown key, did you mean `approval`?",
            path.display()
        )),
        "{stdout}"
    );
    // The endpoint, sandbox and profile were still checked.
    assert!(stdout.contains("L0–L3 are served"), "{stdout}");
    assert!(stdout.contains("built-in default profile"), "{stdout}");
    assert!(stdout.contains("1 problem(s) found"), "{stdout}");
}

/// One misspelt key leaves only that key out: the endpoint two lines above it still counts,
/// so doctor does not also report "no model to talk to" (it did, dropping the whole file).
/// A bad `BATON_*` variable leaves out only itself too.
#[test]
fn doctor_leaves_out_only_the_key_with_a_mistake() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new());
    let path = env.user_config(&format!(
        "endpoint = \"{}\"\nmodle = \"x\"\ntemperature = 9\n",
        engine.url()
    ));
    let out = env
        .baton()
        .env("BATON_MAX_TURNS", "none")
        .env("BATON_SEED", "7")
        .arg("doctor")
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("PROBLEM  {}:2: key `modle`", path.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("PROBLEM  {}:3: key `temperature`", path.display())),
        "{stdout}"
    );
    assert!(stdout.contains("BATON_MAX_TURNS"), "{stdout}");
    assert!(!stdout.contains("no model to talk to"), "{stdout}");
    assert!(stdout.contains("L0–L3 are served"), "{stdout}");
    assert!(stdout.contains("3 problem(s) found"), "{stdout}");
    // A run still refuses the file as a whole: nothing runs on a half-read configuration.
    let run = env.baton().args(["--exec", "x"]).output().expect("run");
    assert_eq!(run.status.code(), Some(2));
}

/// `baton doctor` says what set each key in effect and to what, from every layer, and a list
/// key written as a TOML array (`l2_tools`, which was refused as "found array") reads.
#[test]
fn doctor_names_the_value_and_source_of_every_key_set() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new());
    let user = env.user_config(&format!(
        "endpoint = \"{}\"\nmodel = \"from-user\"\nl2_tools = [\"read_file\", \"shell\"]\n",
        engine.url()
    ));
    // A value with a line break, as a hostile repository would write one to fake a line.
    let project = env.project_config(
        "theme = \"dark\\nset      sandbox = off (flag --sandbox)\"\n[sandbox]\nmode = \"read-only\"\n",
    );
    let out = env
        .baton()
        .env("BATON_MAX_TURNS", "8")
        .args(["--follow-ups", "route", "doctor", "--model", "from-flag"])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    for line in [
        format!("set      endpoint = {} ({})", engine.url(), user.display()),
        "set      model = from-flag (flag --model)".to_string(),
        format!("set      sandbox = read-only ({})", project.display()),
        "set      max_turns = 8 (environment variable BATON_MAX_TURNS)".to_string(),
        "set      follow_ups = route (flag --follow-ups)".to_string(),
        format!("set      l2_tools = read_file, shell ({})", user.display()),
    ] {
        assert!(stdout.contains(&line), "missing {line:?} in\n{stdout}");
    }
    assert!(!stdout.contains("PROBLEM"), "{stdout}");
    assert!(
        stdout.contains("set      theme = dark\\nset      sandbox = off (flag --sandbox) ("),
        "{stdout}"
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.trim_start().starts_with("set      sandbox = off")),
        "{stdout}"
    );
}

/// Without an endpoint doctor gives the advice indented under its PROBLEM line, without
/// pointing at itself.
#[test]
fn doctor_without_an_endpoint_indents_its_advice() {
    let env = Env::new();
    let out = env.baton().arg("doctor").output().expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("  PROBLEM  no model to talk to."),
        "{stdout}"
    );
    assert!(
        stdout.contains("\n           `--endpoint http://HOST:PORT/v1`"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("`baton doctor` checks the result"),
        "{stdout}"
    );
}

#[test]
fn doctor_names_the_models_probe_and_a_missing_profile_folder() {
    let env = Env::new();
    let engine = MockEngine::builder()
        .models_reply(MockReply::status(500, "boom"))
        .start_blocking(|_: &crate::support::RecordedRequest| MockReply::text("x"));
    let out = env
        .baton()
        .args([
            "doctor",
            "--endpoint",
            &engine.url(),
            "--profile",
            "no-such-profile",
        ])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "models probe: GET {}/models answered HTTP 500",
            engine.url()
        )),
        "{stdout}"
    );
    assert!(!stdout.contains("answer hop"), "{stdout}");
    assert!(
        stdout.contains("profile no-such-profile: folder not found"),
        "{stdout}"
    );
}

#[test]
fn a_failing_models_endpoint_costs_the_first_turn_little_and_is_said() {
    let env = Env::new();
    let engine = MockEngine::builder()
        .models_reply(MockReply::status(500, "boom"))
        .start_blocking({
            let script = Script::new().route("L0").answer("L0", "hi");
            move |req: &crate::support::RecordedRequest| script.reply(req)
        });
    let out = env
        .exec(&engine, "hello", &["--json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The probe's own retries are announced as warnings too; the one that matters says what
    // the turn falls back to.
    let warning = events
        .iter()
        .filter(|e| e["type"] == "warning")
        .filter_map(|e| e["message"].as_str())
        .find(|m| m.contains("could not read the context window"))
        .unwrap_or_else(|| panic!("no context-window warning: {stdout}"));
    assert!(warning.contains("using 131072 tokens"), "{warning}");
    // Retrying the 500 with backoff (four requests, ~3 s) held the turn; the probe now gives up
    // at its bound, before the backoff's last retry.
    let probes = engine
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/models")
        .count();
    assert!(probes <= 3, "{probes} /models requests");
}
