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
            predicate::str::contains("flag -C/--cd")
                .and(predicate::str::contains("/nonexistent/baton-ws: folder not found")),
        );
}

#[test]
fn config_errors_name_the_line_and_the_nearest_key() {
    let env = Env::new();
    let path = env.user_config("endpoint = \"http://127.0.0.1:9/v1\"\napprovals = \"ask\"\n");
    env.baton().args(["--exec", "x"]).assert().code(2).stderr(predicate::str::contains(
        format!(
            "{}:2: key `approvals`: unknown key, did you mean `approval`?",
            path.display()
        ),
    ));
    env.user_config("endpoint = \"http://127.0.0.1:9/v1\"\n[sandbox]\nnetwork = yes\n");
    env.baton()
        .args(["--exec", "x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains(format!("{}:3:11: not valid TOML", path.display())));
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_unwritable_output_file_fails_before_any_request() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new().route("L0").answer("L0", "hi"));
    let out = env
        .exec(&engine, "hello", &["-o", "/nonexistent/baton-out/answer.txt"])
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
    let out = env.exec(&engine, "remove notes.txt", &[]).output().expect("run");
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
    let out = env.exec(&engine, "read then remove", &[]).output().expect("run");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("1 tool call was declined"), "{err}");
}
