use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Map, json};

use super::file::parse;
use super::*;

fn hooks_of(text: &str) -> Hooks {
    let parsed = parse(text, Path::new("hooks.json")).unwrap();
    Hooks::from_groups(parsed.groups)
}

fn base(dir: &Path) -> HookBase {
    HookBase {
        session_id: "s1".into(),
        transcript_path: dir.join("s1.jsonl"),
        cwd: dir.to_path_buf(),
        permission_mode: "ask".into(),
    }
}

fn one(event: &str, matcher: &str, command: &str, timeout: f64) -> String {
    json!({"hooks": {event: [{"matcher": matcher, "hooks": [
        {"type": "command", "command": command, "timeout": timeout}
    ]}]}})
    .to_string()
}

#[test]
fn matchers_are_anchored_regexes_and_star_or_empty_is_all() {
    let m = Matcher::new(Some("shell|write_file")).unwrap();
    assert!(m.matches("shell") && m.matches("write_file"));
    assert!(!m.matches("shell2") && !m.matches("read_file"));
    let m = Matcher::new(Some("mcp__github__.*")).unwrap();
    assert!(m.matches("mcp__github__create_issue") && !m.matches("mcp__gitlab__x"));
    for all in [None, Some(""), Some("*")] {
        assert!(Matcher::new(all).unwrap().matches("anything"));
    }
    assert!(Matcher::new(Some("(")).is_err());
}

#[test]
fn malformed_files_name_the_entry_and_unknown_events_are_skipped() {
    let p = Path::new("h.json");
    assert!(parse("not json", p).unwrap_err().contains("not valid JSON"));
    assert!(parse("{}", p).unwrap_err().contains("\"hooks\""));
    let bad = r#"{"hooks":{"PreToolUse":[{"matcher":"(","hooks":[]}]}}"#;
    assert!(parse(bad, p).unwrap_err().contains("PreToolUse[0].matcher"));
    let bad = r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"x","timeout":-1}]}]}}"#;
    assert!(
        parse(bad, p)
            .unwrap_err()
            .contains("Stop[0].hooks[0].timeout")
    );
    let mixed = r#"{"hooks":{"SessionEnd":[{"hooks":[{"command":"x"}]}],
        "Stop":[{"hooks":[{"type":"prompt","prompt":"p"},{"command":"true"}]}]}}"#;
    let parsed = parse(mixed, p).unwrap();
    assert_eq!(parsed.groups.len(), 1);
    assert_eq!(parsed.skipped.len(), 1, "{:?}", parsed.skipped);
    // Another agent's event is a note for `doctor`, not a warning on every run.
    assert_eq!(parsed.unfired.len(), 1, "{:?}", parsed.unfired);
    assert!(parsed.unfired[0].contains("SessionEnd"));
}

#[tokio::test]
async fn exit_2_blocks_with_stderr_and_the_input_reaches_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let hooks = hooks_of(&one(
        "PreToolUse",
        "shell",
        "cat > \"$BATON_PROJECT_DIR/input.json\"; echo 'no rm -rf here' >&2; exit 2",
        10.0,
    ));
    let mut fields = Map::new();
    fields.insert("tool_name".into(), "shell".into());
    fields.insert("tool_input".into(), json!({"command": "rm -rf /"}));
    let out = hooks
        .fire(HookEvent::PreToolUse, "shell", &base(dir.path()), fields)
        .await;
    assert_eq!(
        out.blocked.as_deref(),
        Some("no rm -rf here"),
        "{:?}",
        out.messages
    );
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("input.json")).unwrap())
            .unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_input"]["command"], "rm -rf /");
    assert_eq!(input["session_id"], "s1");
    assert_eq!(input["cwd"], dir.path().display().to_string());
    // Another tool does not match.
    let out = hooks
        .fire(
            HookEvent::PreToolUse,
            "read_file",
            &base(dir.path()),
            Map::new(),
        )
        .await;
    assert_eq!(out.ran, 0);
}

#[tokio::test]
async fn json_answers_carry_decisions_input_and_context() {
    let dir = tempfile::tempdir().unwrap();
    let answer = json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "allow", "updatedInput": {"command": "echo safe"},
        "additionalContext": "rewritten"}});
    let hooks = hooks_of(&one("PreToolUse", "", &format!("echo '{answer}'"), 10.0));
    let out = hooks
        .fire(
            HookEvent::PreToolUse,
            "shell",
            &base(dir.path()),
            Map::new(),
        )
        .await;
    assert_eq!(out.permission, Some(Permission::Allow));
    assert_eq!(out.updated_input, Some(json!({"command": "echo safe"})));
    assert_eq!(out.context, vec!["rewritten".to_string()]);
    assert!(out.blocked.is_none());

    let hooks = hooks_of(&one(
        "PreToolUse",
        "*",
        r#"echo '{"permissionDecision":"deny","permissionDecisionReason":"not today"}'"#,
        10.0,
    ));
    let out = hooks
        .fire(
            HookEvent::PreToolUse,
            "shell",
            &base(dir.path()),
            Map::new(),
        )
        .await;
    assert_eq!(out.blocked.as_deref(), Some("not today"));
    assert_eq!(out.permission, Some(Permission::Deny));

    let hooks = hooks_of(&one(
        "Stop",
        "",
        r#"echo '{"continue":false,"stopReason":"enough","systemMessage":"hi"}'"#,
        10.0,
    ));
    let out = hooks
        .fire(HookEvent::Stop, "", &base(dir.path()), Map::new())
        .await;
    assert_eq!(out.stop.as_deref(), Some("enough"));
    assert_eq!(out.messages, vec!["hi".to_string()]);
}

#[tokio::test]
async fn plain_stdout_is_context_only_where_the_event_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = one("UserPromptSubmit", "", "echo 'branch: main'", 10.0);
    let out = hooks_of(&text)
        .fire(
            HookEvent::UserPromptSubmit,
            "",
            &base(dir.path()),
            Map::new(),
        )
        .await;
    assert_eq!(out.context_text().as_deref(), Some("branch: main"));
    let text = one("PostToolUse", "", "echo 'just a log line'", 10.0);
    let out = hooks_of(&text)
        .fire(
            HookEvent::PostToolUse,
            "shell",
            &base(dir.path()),
            Map::new(),
        )
        .await;
    assert!(out.context.is_empty() && out.messages.is_empty());
}

#[tokio::test]
async fn other_exit_codes_are_messages_and_a_hang_is_killed_with_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let out = hooks_of(&one("Stop", "", "echo oops >&2; exit 1", 10.0))
        .fire(HookEvent::Stop, "", &base(dir.path()), Map::new())
        .await;
    assert!(out.blocked.is_none());
    assert!(
        out.messages[0].contains("exit code 1: oops"),
        "{:?}",
        out.messages
    );

    // The child sleeps in the background too: the whole group must go. Its marker lies
    // outside the workspace: a user's hook that names a path there is not run.
    let markers = tempfile::tempdir().unwrap();
    let marker = markers.path().join("survived");
    let cmd = format!("(sleep 3; touch {}) & sleep 30", marker.display());
    let started = Instant::now();
    let out = hooks_of(&one("Stop", "", &cmd, 0.5))
        .fire(HookEvent::Stop, "", &base(dir.path()), Map::new())
        .await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(out.messages[0].contains("timed out"), "{:?}", out.messages);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert!(!marker.exists(), "a child of the hook outlived its timeout");
}

#[tokio::test]
async fn what_a_hook_gives_the_model_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let out = hooks_of(&one(
        "UserPromptSubmit",
        "",
        "head -c 100000 /dev/zero | tr '\\0' y; head -c 100000 /dev/zero | tr '\\0' z >&2; exit 2",
        20.0,
    ))
    .fire(
        HookEvent::UserPromptSubmit,
        "",
        &base(dir.path()),
        Map::new(),
    )
    .await;
    let why = out.blocked.unwrap();
    assert!(
        why.len() < 10_100 && why.ends_with("more bytes cut]"),
        "{}",
        why.len()
    );
}

#[tokio::test]
async fn a_hook_that_ignores_stdin_and_floods_stdout_still_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let out = hooks_of(&one(
        "PostToolUse",
        "",
        "head -c 5000000 /dev/zero | tr '\\0' x",
        20.0,
    ))
    .fire(HookEvent::PostToolUse, "x", &base(dir.path()), {
        let mut m = Map::new();
        m.insert("tool_response".into(), "y".repeat(2_000_000).into());
        m
    })
    .await;
    assert_eq!(out.ran, 1);
    assert!(out.messages.is_empty(), "{:?}", out.messages);
}

/// The project hooks file is read once: the bytes its trust was judged on are the ones
/// loaded, so a file swapped between the check and the load (by a command of another session
/// still running) is never run.
#[test]
fn project_hooks_load_the_bytes_their_trust_was_judged_on() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(folder.join(".baton")).unwrap();
    let file = folder.join(".baton/hooks.json");
    std::fs::write(&file, one("Stop", "", "echo trusted", 5.0)).unwrap();
    let mut trust = crate::config::TrustList::default();
    trust.trust(&folder);
    let found = discover(&folder, &trust);
    assert!(matches!(found.project, Some((_, TrustStatus::Trusted))));
    std::fs::write(&file, one("Stop", "", "echo swapped-in", 5.0)).unwrap();
    let hooks = Hooks::load(&found).unwrap();
    let commands: Vec<&str> = hooks
        .groups()
        .iter()
        .flat_map(|(_, g)| g.hooks.iter().map(|h| h.command.as_str()))
        .collect();
    assert_eq!(commands, ["echo trusted"]);
}
