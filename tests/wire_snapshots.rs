//! Snapshots of baton's stable wire formats for one full MoL turn with a tool call against the
//! mock engine: the `--exec --json` event stream on stdout, and the route, answer and summary
//! requests the engine received. A change to either is a change other programs see, so it
//! shows up here for review (`cargo insta review`) instead of slipping through.
//!
//! What varies between runs is replaced before snapshotting: the session id, the temp folder
//! (workspace, session file), the engine's port, every `*_ms` timing, and the environment
//! block's date and OS. Token counts are
//! fixed by the script (the mock would otherwise estimate them from text that holds the temp
//! path), so `usage` and `context_used` are checked as they are.

use serde_json::{Map, Value, json};

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, RecordedRequest, Script};

/// One turn: route → L2, L2 reads notes.txt, L2 answers, then the summary hop.
pub(crate) struct Turn {
    pub(crate) env: Env,
    pub(crate) engine: MockEngine,
    stdout: String,
}

/// The prompt of the snapshotted turn.
pub(crate) const PROMPT: &str = "what is in notes.txt?";

/// The engine's script of the snapshotted turn.
pub(crate) fn turn_script() -> Script {
    Script::new()
        .route_reply(MockReply::label("L2").usage(507, 1))
        .answer(
            "L2",
            MockReply::tool_call("call_1", "read_file", r#"{"path":"notes.txt"}"#).usage(411, 7),
        )
        .answer("L2", MockReply::text("The file says 42.").usage(423, 4))
        .summary("L2", MockReply::text("Read notes.txt.").usage(470, 3))
}

fn run_turn() -> Turn {
    run_turn_via(|env, engine| {
        env.exec(engine, PROMPT, &["--json"])
            .output()
            .expect("run baton")
    })
}

/// The snapshotted turn, with the client run by `client` (a workspace holding notes.txt and
/// the scripted engine are ready for it).
pub(crate) fn run_turn_via(client: impl FnOnce(&Env, &MockEngine) -> std::process::Output) -> Turn {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "FILE-CONTENT-42\n").expect("write");
    let engine = MockEngine::scripted_blocking(turn_script());
    let out = client(&env, &engine);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Turn {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        env,
        engine,
    }
}

impl Turn {
    /// The session id baton announced in its first event.
    fn session_id(&self) -> String {
        let first = self.stdout.lines().next().expect("a first event");
        let event: Value = serde_json::from_str(first).expect("JSON event");
        event["session_id"]
            .as_str()
            .expect("the session event carries the id")
            .to_string()
    }

    /// `value` with every run-specific string and timing replaced by a placeholder.
    pub(crate) fn normalize(&self, value: Value) -> Value {
        let tmp = self
            .env
            .workspace
            .parent()
            .expect("the workspace sits in the temp root")
            .display()
            .to_string();
        let engine = self.engine.addr().to_string();
        let session = self.session_id();
        let os = format!("OS: {} ({})", std::env::consts::OS, std::env::consts::ARCH);
        let text = |s: &str| {
            undated(
                &s.replace(&tmp, "[TMP]")
                    .replace(&engine, "[ENGINE]")
                    .replace(&session, "[SESSION_ID]")
                    .replace(&os, "OS: [OS]"),
            )
        };
        normalize_value(value, &text)
    }
}

/// The environment block's date (`- date: 2026-12-03`) as `[DATE]`.
fn undated(s: &str) -> String {
    const MARK: &str = "- date: ";
    match s.find(MARK) {
        Some(i) if s.len() >= i + MARK.len() + 10 => {
            let end = i + MARK.len() + 10;
            format!("{}[DATE]{}", &s[..i + MARK.len()], &s[end..])
        }
        _ => s.to_string(),
    }
}

fn normalize_value(value: Value, text: &impl Fn(&str) -> String) -> Value {
    match value {
        Value::String(s) => Value::String(text(&s)),
        Value::Array(items) => items
            .into_iter()
            .map(|v| normalize_value(v, text))
            .collect(),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| {
                    let v = if k.ends_with("_ms") && v.is_number() {
                        Value::String("[ms]".into())
                    } else {
                        normalize_value(v, text)
                    };
                    (k, v)
                })
                .collect(),
        ),
        other => other,
    }
}

/// A request as the engine saw it: method, path, the headers a server can act on (not the
/// host, length or user agent, which say nothing about the format), and the JSON body.
pub(crate) fn request_view(req: &RecordedRequest) -> Value {
    let headers: Map<String, Value> = req
        .headers
        .iter()
        .filter(|(name, _)| !["host", "content-length", "user-agent"].contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), Value::String(value.clone())))
        .collect();
    json!({
        "method": req.method,
        "path": req.path,
        "headers": headers,
        "body": req.body,
    })
}

/// Pretty JSON in the order the keys were sent (serde_json keeps it: `preserve_order`).
fn pretty(value: Value) -> String {
    serde_json::to_string_pretty(&value).expect("serialize")
}

/// The summary hop's events: `hop_*` with `"hop": "summary"`, and `summary_recorded`.
fn is_summary_event(event: &Value) -> bool {
    event["type"] == "summary_recorded"
        || (event["hop"] == "summary"
            && event["type"]
                .as_str()
                .is_some_and(|t| t.starts_with("hop_")))
}

#[test]
fn exec_json_event_stream_of_a_turn_with_a_tool_call() {
    let turn = run_turn();
    let events: Vec<Value> = turn
        .stdout
        .lines()
        .map(|line| {
            let event: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
            turn.normalize(event)
        })
        .collect();
    // The summary hop runs beside the end of the turn (off the answer's critical path), so its
    // events may come before or after `turn_completed`; what is fixed is that it starts after
    // the last answer hop and ends before shutdown. The snapshot lists it after the turn.
    let position = |want: &dyn Fn(&Value) -> bool| events.iter().rposition(want);
    let last_answer = position(&|e| e["type"] == "hop_completed" && e["hop"] == "answer");
    let summary_start = position(&|e| e["type"] == "hop_started" && e["hop"] == "summary");
    assert!(
        last_answer < summary_start,
        "the summary hop starts after the last answer: {events:#?}"
    );
    assert_eq!(
        events.last().map(|e| &e["type"]),
        Some(&Value::from("shutdown_complete"))
    );
    let (summary, mut ordered): (Vec<Value>, Vec<Value>) =
        events.into_iter().partition(is_summary_event);
    let shutdown = ordered.pop();
    ordered.extend(summary);
    ordered.extend(shutdown);
    // One event per line, as on stdout: the key order is part of the format.
    let lines: Vec<String> = ordered
        .iter()
        .map(|e| serde_json::to_string(e).expect("serialize"))
        .collect();
    insta::assert_snapshot!("exec_json_events", lines.join("\n"));
}

#[test]
fn route_answer_and_summary_requests_of_a_turn_with_a_tool_call() {
    let turn = run_turn();
    assert_eq!(
        turn.engine.hop_log(),
        [
            ("route".to_string(), "L0".to_string()),
            ("answer".to_string(), "L2".to_string()),
            ("answer".to_string(), "L2".to_string()),
            ("summary".to_string(), "L2".to_string()),
        ]
    );
    let route = turn.engine.requests_for_hop("route");
    let answers = turn.engine.requests_for_hop("answer");
    let summary = turn.engine.requests_for_hop("summary");

    insta::assert_snapshot!(
        "route_request",
        pretty(turn.normalize(request_view(&route[0])))
    );
    insta::assert_snapshot!(
        "answer_request",
        pretty(turn.normalize(request_view(&answers[0])))
    );

    // The tool loop's second answer offers the same tools; only what changed is snapshotted.
    let mut second = request_view(&answers[1]);
    assert_eq!(
        second["body"]["tools"], answers[0].body["tools"],
        "the tools offered mid tool loop"
    );
    second["body"]["tools"] = Value::String("[as in the first answer request]".into());
    insta::assert_snapshot!(
        "answer_request_after_the_tool",
        pretty(turn.normalize(second))
    );

    insta::assert_snapshot!(
        "summary_request",
        pretty(turn.normalize(request_view(&summary[0])))
    );
}
