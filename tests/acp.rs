//! `baton acp` driven by a real ACP client — the official Python SDK (`agent-client-protocol`,
//! pinned in tools/test-deps.sh) running tests/fixtures/acp/client.py — against the mock
//! engine: streaming, permissions, diffs, command output, cancel, load of a saved session; and
//! raw JSON-RPC garbage and a closed stdin, written by hand.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::env::Env;
use crate::support::external;
use crate::support::{MockEngine, MockReply, Script};

fn client_script() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/acp/client.py")
        .display()
        .to_string()
}

/// Runs the scripted client over `baton acp` with `steps`; the client's report.
fn drive(env: &Env, engine: &MockEngine, extra: &[&str], steps: Value) -> Option<Value> {
    let python = external::require(
        "the Python ACP SDK (agent-client-protocol)",
        external::python_with(&["acp"]),
    )?;
    let baton = assert_cmd::cargo::cargo_bin("baton");
    let mut command = vec![
        baton.display().to_string(),
        "acp".to_string(),
        "--endpoint".to_string(),
        engine.url(),
        "--session-dir".to_string(),
        env.sessions.display().to_string(),
    ];
    command.extend(extra.iter().map(|s| s.to_string()));
    let path = std::env::var("PATH").unwrap_or_default();
    let plan = json!({
        "command": command,
        "cwd": env.workspace,
        "env": {
            "HOME": env.home,
            "XDG_CONFIG_HOME": env.home.join(".config"),
            "XDG_DATA_HOME": env.home.join(".local/share"),
            "PATH": path,
        },
        "steps": steps,
    });
    let out = assert_cmd::Command::new(python)
        .env_clear()
        .env("HOME", &env.home)
        .env("PATH", &path)
        .arg(client_script())
        .arg(plan.to_string())
        .timeout(Duration::from_secs(180))
        .output()
        .expect("run the ACP client");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "client failed: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("report: {e}; stderr: {stderr}"));
    // Closing stdin ends baton cleanly, sessions saved.
    assert_eq!(report["exit_code"], 0, "{stderr}");
    Some(report)
}

fn step(report: &Value, i: usize) -> &Value {
    let s = &report["steps"][i];
    assert!(s.get("error").is_none(), "step {i} failed: {s:#}");
    s
}

fn updates<'a>(s: &'a Value, kind: &str) -> Vec<&'a Value> {
    s["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

fn chunk_text(chunks: &[&Value]) -> String {
    chunks
        .iter()
        .map(|u| u["content"]["text"].as_str().unwrap_or(""))
        .collect()
}

fn start(env: &Env) -> Vec<Value> {
    vec![
        json!({"op": "initialize"}),
        json!({"op": "new_session", "cwd": env.workspace}),
    ]
}

#[test]
fn a_prompt_streams_back_with_the_expert_that_answered() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new().route("L1").answer(
            "L1",
            MockReply::text("Booked a table for two.")
                .with_reasoning("CHECKING-THE-CALENDAR")
                .chunk_chars(4),
        ),
    );
    let mut steps = start(&env);
    steps.push(json!({"op": "prompt", "text": "book a table"}));
    let Some(report) = drive(&env, &engine, &[], json!(steps)) else {
        return;
    };
    let init = step(&report, 0);
    assert_eq!(
        init["response"]["agentCapabilities"]["loadSession"], true,
        "{init:#}"
    );
    assert_eq!(init["response"]["agentInfo"]["name"], "baton");
    let session = step(&report, 1);
    assert!(session["response"]["sessionId"].as_str().unwrap().len() > 8);
    let prompt = step(&report, 2);
    assert_eq!(prompt["response"]["stopReason"], "end_turn", "{prompt:#}");
    let chunks = updates(prompt, "agent_message_chunk");
    assert!(chunks.len() > 1, "streamed in pieces: {chunks:?}");
    assert_eq!(chunk_text(&chunks), "Booked a table for two.");
    for c in &chunks {
        assert_eq!(c["_meta"]["baton"]["expert"], "L1", "{c}");
    }
    let thoughts = chunk_text(&updates(prompt, "agent_thought_chunk"));
    assert!(thoughts.contains("[L1 · routed by L0]"), "{thoughts}");
    assert!(thoughts.contains("CHECKING-THE-CALENDAR"), "{thoughts}");
    // The user's words reached the model.
    let answer = &engine.requests_for_hop("answer")[0];
    assert_eq!(answer.last_user_text().as_deref(), Some("book a table"));
}

#[test]
fn an_allowed_edit_runs_with_its_diff_and_a_rejected_command_does_not_run() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "keep me").unwrap();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer(
                "L2",
                MockReply::tool_call(
                    "w1",
                    "write_file",
                    r#"{"path":"made.txt","content":"NEW-CONTENT\n"}"#,
                ),
            )
            .answer("L2", "Wrote it.")
            .answer(
                "L2",
                MockReply::tool_call("r1", "shell", r#"{"command":"rm notes.txt"}"#),
            )
            .answer("L2", "You said no."),
    );
    let mut steps = start(&env);
    steps.push(json!({"op": "prompt", "text": "make a file", "permissions": ["allow_once"]}));
    steps.push(json!({"op": "prompt", "text": "remove notes", "permissions": ["reject_once"]}));
    let Some(report) = drive(&env, &engine, &[], json!(steps)) else {
        return;
    };

    let edit = step(&report, 2);
    assert_eq!(edit["response"]["stopReason"], "end_turn", "{edit:#}");
    let asked = edit["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "{edit:#}");
    assert_eq!(asked[0]["tool_call"]["toolCallId"], "w1");
    let kinds: Vec<&str> = asked[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["allow_once", "allow_always", "reject_once"]);
    // The dialog shows the edit as a diff of a new file.
    let shown = &asked[0]["tool_call"]["content"][0];
    assert_eq!(shown["type"], "diff", "{shown}");
    assert_eq!(shown["newText"], "NEW-CONTENT\n");
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("made.txt")).unwrap(),
        "NEW-CONTENT\n"
    );
    let calls = updates(edit, "tool_call");
    assert_eq!(calls[0]["kind"], "edit");
    assert_eq!(calls[0]["_meta"]["baton"]["expert"], "L2");
    let progress = updates(edit, "tool_call_update");
    let diff = progress
        .iter()
        .flat_map(|u| u["content"].as_array().cloned().unwrap_or_default())
        .find(|c| c["type"] == "diff")
        .expect("a diff in tool_call_update");
    assert_eq!(
        diff["path"],
        env.workspace.join("made.txt").display().to_string()
    );
    assert_eq!(diff["newText"], "NEW-CONTENT\n");
    assert!(diff.get("oldText").is_none(), "a new file: {diff}");
    assert_eq!(progress.last().unwrap()["status"], "completed");

    let rejected = step(&report, 3);
    assert_eq!(rejected["response"]["stopReason"], "end_turn");
    assert_eq!(rejected["permissions"].as_array().unwrap().len(), 1);
    assert_eq!(
        rejected["permissions"][0]["tool_call"]["title"],
        "rm notes.txt"
    );
    let last = updates(rejected, "tool_call_update");
    assert_eq!(last.last().unwrap()["status"], "failed", "{rejected:#}");
    assert_eq!(
        last.last().unwrap()["rawOutput"]["status"],
        "declined",
        "{rejected:#}"
    );
    assert!(env.workspace.join("notes.txt").exists(), "the command ran");
    let told = engine
        .requests_for_hop("answer")
        .into_iter()
        .any(|r| r.mentions("The user declined this call."));
    assert!(told, "the model hears the call was declined");
}

#[test]
fn a_command_streams_its_output_into_the_tool_call() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "s1",
                    "shell",
                    r#"{"command":"printf 'ACP-%s\n' OUTPUT-42"}"#,
                ),
            )
            .answer("L2", "It printed."),
    );
    let mut steps = start(&env);
    steps.push(json!({"op": "prompt", "text": "print", "permissions": ["allow_once"]}));
    // The sandbox is not what this test is about, and the test machine may lack it.
    let Some(report) = drive(&env, &engine, &["--sandbox", "off"], json!(steps)) else {
        return;
    };
    let prompt = step(&report, 2);
    assert_eq!(prompt["response"]["stopReason"], "end_turn", "{prompt:#}");
    let calls = updates(prompt, "tool_call");
    assert_eq!(calls[0]["kind"], "execute", "{prompt:#}");
    let progress = updates(prompt, "tool_call_update");
    let texts: Vec<String> = progress
        .iter()
        .flat_map(|u| u["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["content"]["text"].as_str().map(str::to_string))
        .collect();
    assert!(
        texts.iter().any(|t| t.contains("ACP-OUTPUT-42")),
        "{prompt:#}"
    );
    let done = progress.last().unwrap();
    assert_eq!(done["status"], "completed", "{prompt:#}");
    assert_eq!(done["rawOutput"]["exit_code"], 0);
}

#[test]
fn always_allow_remembers_the_offered_prefix_and_the_plan_is_shown() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "p1",
                    "update_plan",
                    r#"{"plan":[{"step":"make one","status":"in_progress"},{"step":"make two","status":"pending"}]}"#,
                ),
            )
            .answer(
                "L2",
                MockReply::tool_call("t1", "shell", r#"{"command":"touch one.txt"}"#),
            )
            .answer(
                "L2",
                MockReply::tool_call("t2", "shell", r#"{"command":"touch two.txt"}"#),
            )
            .answer("L2", "Both made."),
    );
    let mut steps = start(&env);
    steps.push(json!({"op": "prompt", "text": "make files", "permissions": ["allow_always"]}));
    let Some(report) = drive(&env, &engine, &["--sandbox", "off"], json!(steps)) else {
        return;
    };
    let prompt = step(&report, 2);
    assert_eq!(prompt["response"]["stopReason"], "end_turn", "{prompt:#}");
    let asked = prompt["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1, "the second touch is not asked: {prompt:#}");
    let always = asked[0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["kind"] == "allow_always")
        .expect("an always option");
    assert!(
        always["name"].as_str().unwrap().contains("`touch`"),
        "{always}"
    );
    assert!(env.workspace.join("one.txt").exists());
    assert!(env.workspace.join("two.txt").exists());
    let plans = updates(prompt, "plan");
    assert_eq!(plans.len(), 1, "{prompt:#}");
    let entries = plans[0]["entries"].as_array().unwrap();
    assert_eq!(entries[0]["content"], "make one");
    assert_eq!(entries[0]["status"], "in_progress");
    assert_eq!(entries[1]["status"], "pending");
}

#[test]
fn cancel_stops_the_turn_and_the_session_goes_on() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer(
                "L2",
                MockReply::text("this answer never finishes")
                    .chunk_chars(2)
                    .hang_after(3),
            )
            .answer("L2", "Fine after all."),
    );
    let mut steps = start(&env);
    steps.push(json!({"op": "prompt", "text": "slow", "cancel_on": "agent_message_chunk"}));
    steps.push(json!({"op": "prompt", "text": "again"}));
    let started = Instant::now();
    let Some(report) = drive(&env, &engine, &[], json!(steps)) else {
        return;
    };
    let cancelled = step(&report, 2);
    assert_eq!(
        cancelled["response"]["stopReason"], "cancelled",
        "{cancelled:#}"
    );
    let again = step(&report, 3);
    assert_eq!(again["response"]["stopReason"], "end_turn", "{again:#}");
    assert_eq!(
        chunk_text(&updates(again, "agent_message_chunk")),
        "Fine after all."
    );
    assert!(started.elapsed() < Duration::from_secs(60));
}

#[test]
fn a_loaded_session_replays_its_history_and_keeps_its_routing_state() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "FILE-CONTENT-42").unwrap();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L3", "L1"])
            .answer("L3", MockReply::tool_call("c0", "no_such_tool", "{}"))
            .answer(
                "L3",
                MockReply::tool_call("c1", "read_file", r#"{"path":"notes.txt"}"#),
            )
            .answer("L3", "The notes say 42.")
            .summary("L3", "L3-SUMMARY: read the notes")
            .answer("L1", "Lunch is booked."),
    );
    let mut first = start(&env);
    first.push(json!({"op": "prompt", "text": "read the notes"}));
    let Some(report) = drive(&env, &engine, &[], json!(first)) else {
        return;
    };
    let id = step(&report, 1)["response"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    // The continuation after the tool result stayed on L3 without a route hop (sticky).
    assert_eq!(engine.requests_for_hop("route").len(), 1);
    engine.clear_requests();

    let second = json!([
        {"op": "initialize"},
        {"op": "load_session", "cwd": env.workspace, "session_id": id},
        {"op": "prompt", "text": "now book lunch"},
    ]);
    let report = drive(&env, &engine, &[], second).unwrap();
    let load = step(&report, 1);
    let kinds: Vec<&str> = load["updates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message_chunk",
            "tool_call",
            "tool_call_update",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk"
        ],
        "{load:#}"
    );
    let user = &load["updates"][0];
    assert_eq!(user["content"]["text"], "read the notes");
    assert!(user["_meta"].is_null(), "{user}");
    let answer = &load["updates"][5];
    assert_eq!(answer["content"]["text"], "The notes say 42.");
    assert_eq!(answer["_meta"]["baton"]["expert"], "L3", "{answer}");
    // Each call replays with the status it ended with: the unknown tool failed, as it did live.
    assert_eq!(load["updates"][2]["status"], "failed", "{load:#}");
    assert_eq!(load["updates"][4]["status"], "completed", "{load:#}");
    let result = &load["updates"][4];
    assert!(
        result["content"][0]["content"]["text"]
            .as_str()
            .unwrap()
            .contains("FILE-CONTENT-42"),
        "{result}"
    );

    let prompt = step(&report, 2);
    assert_eq!(prompt["response"]["stopReason"], "end_turn", "{prompt:#}");
    let chunks = updates(prompt, "agent_message_chunk");
    assert_eq!(chunk_text(&chunks), "Lunch is booked.");
    assert_eq!(chunks[0]["_meta"]["baton"]["expert"], "L1");
    // L1's view of the resumed timeline: L3's task as its user text and summary, not raw.
    let l1 = engine
        .requests_for_model("L1")
        .into_iter()
        .find(|r| r.hop() == Some("answer"))
        .expect("L1 answer");
    assert!(l1.mentions("L3-SUMMARY: read the notes"));
    assert!(l1.mentions("read the notes"));
    assert!(!l1.mentions("FILE-CONTENT-42"));
}

#[test]
fn loading_an_unknown_or_partial_session_id_fails_cleanly() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "hi"));
    let mut first = start(&env);
    first.push(json!({"op": "prompt", "text": "hello"}));
    let Some(report) = drive(&env, &engine, &[], json!(first)) else {
        return;
    };
    let id = step(&report, 1)["response"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let report = drive(
        &env,
        &engine,
        &[],
        json!([
            {"op": "initialize"},
            {"op": "load_session", "cwd": env.workspace, "session_id": &id[..6]},
            {"op": "load_session", "cwd": env.workspace, "session_id": "../../etc/passwd"},
            {"op": "load_session", "cwd": "relative/dir", "session_id": id},
            {"op": "load_session", "cwd": env.workspace, "session_id": id},
        ]),
    )
    .unwrap();
    for i in 1..=3 {
        let s = &report["steps"][i];
        assert!(s.get("error").is_some(), "step {i} should fail: {s:#}");
    }
    assert!(
        report["steps"][1]["error"]
            .as_str()
            .unwrap()
            .contains("no saved session"),
        "{:#}",
        report["steps"][1]
    );
    step(&report, 4);
}

/// `baton acp` spoken to by hand: one JSON-RPC line in, the answers read back.
struct Raw {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Every message read so far, in order.
    seen: std::cell::RefCell<Vec<Value>>,
}

impl Raw {
    fn start(env: &Env, engine: &MockEngine) -> Raw {
        Raw::start_with(env, engine, &[])
    }

    /// [`Raw::start`] with more variables in baton's environment.
    fn start_with(env: &Env, engine: &MockEngine, vars: &[(&str, &std::ffi::OsStr)]) -> Raw {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("baton"))
            .env_clear()
            .envs(vars.iter().copied())
            .env("HOME", &env.home)
            .env("XDG_CONFIG_HOME", env.home.join(".config"))
            .env("XDG_DATA_HOME", env.home.join(".local/share"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&env.workspace)
            .args(["acp", "--endpoint", &engine.url(), "--session-dir"])
            .arg(&env.sessions)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn baton acp");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Raw {
            child,
            lines,
            seen: Default::default(),
        }
    }

    fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The answer with this id, read or already seen.
    fn answer(&self, id: i64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(v) = self.seen.borrow().iter().find(|v| v["id"] == id) {
                return v.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.lines.recv_timeout(left).expect("an answer in time");
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carries only JSON-RPC: {e}: {line}"));
            self.seen.borrow_mut().push(v);
        }
    }

    /// Every message, the rest read until stdout closes.
    fn all(&self) -> Vec<Value> {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(40)) {
            let v = serde_json::from_str(&line).expect("JSON on stdout");
            self.seen.borrow_mut().push(v);
        }
        self.seen.borrow().clone()
    }
}

/// A `session/new` request with this id for `cwd`, no MCP server.
fn new_session_request(id: i64, cwd: &Path) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "session/new",
           "params": {"cwd": cwd, "mcpServers": []}})
    .to_string()
}

#[test]
fn malformed_lines_get_errors_and_a_closed_stdin_ends_the_process_cleanly() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", MockReply::hang()));
    let mut raw = Raw::start(&env, &engine);
    raw.send("this is not json");
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize""#);
    raw.send(&"x".repeat(100_000));
    raw.send("\u{0}\u{1}\u{ff}");
    raw.send(r#"{"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersion":1}}"#);
    let init = raw.answer(5);
    assert_eq!(
        init["result"]["agentCapabilities"]["loadSession"], true,
        "{init}"
    );
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"nonsense":true}}"#);
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"no/such/method","params":{}}"#);
    raw.send(
        r#"{"jsonrpc":"2.0","id":4,"method":"session/prompt","params":{"sessionId":"nope","prompt":[{"type":"text","text":"hi"}]}}"#,
    );
    raw.send(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"nope"}}"#);
    raw.send(r#"{"jsonrpc":"2.0","id":7,"method":"session/new","params":{"cwd":"/no/such/dir","mcpServers":[]}}"#);
    assert_eq!(raw.answer(2)["error"]["code"], -32602);
    assert_eq!(raw.answer(3)["error"]["code"], -32601);
    let unknown = raw.answer(4);
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no session nope"),
        "{unknown}"
    );
    let missing = raw.answer(7);
    assert!(
        missing["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/no/such/dir"),
        "{missing}"
    );
    // A session, then the editor goes away in the middle of a turn.
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":6,"method":"session/new","params":{{"cwd":"{}","mcpServers":[{{"name":"files","command":"/bin/true","args":[],"env":[]}},{{"type":"sse","name":"oldsse","url":"http://127.0.0.1:9/sse","headers":[]}}]}}}}"#,
        env.workspace.display()
    ));
    let created = raw.answer(6);
    let warnings = created["result"]["_meta"]["baton"]["warnings"].to_string();
    // The stdio server is handed to the MCP client (it fails later, as a warning event); the
    // SSE one is refused at once.
    assert!(
        warnings.contains("oldsse") && warnings.contains("SSE") && !warnings.contains("files"),
        "{created}"
    );
    let id = created["result"]["sessionId"].as_str().unwrap().to_string();
    raw.send(&format!(
        r#"{{"jsonrpc":"2.0","id":8,"method":"session/prompt","params":{{"sessionId":"{id}","prompt":[{{"type":"text","text":"wait"}}]}}}}"#
    ));
    // The answer hop hangs; the editor goes away while it does.
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.requests_for_hop("answer").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the turn never reached the engine"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(raw.child.stdin.take());
    let all = raw.all();
    // Not JSON, cut off, the long line, the binary garbage: each a parse error, none fatal.
    let parse_errors = all.iter().filter(|v| v["error"]["code"] == -32700).count();
    assert!(parse_errors >= 3, "{all:?}");
    let started = Instant::now();
    let status = loop {
        if let Some(s) = raw.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "baton acp did not exit after stdin closed"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(raw.child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// Red team round 3, finding 6 for ACP: an editor passing the home folder (or `/`) as `cwd`
/// got a session whose commands could write the user's dotfiles. `session/new` now fails for
/// it, as `-C` does on the command line; a project folder still opens.
#[test]
fn a_broad_cwd_is_refused_by_session_new() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "hi"));
    let mut raw = Raw::start(&env, &engine);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#);
    raw.answer(1);
    raw.send(&new_session_request(2, &env.home));
    raw.send(&new_session_request(3, Path::new("/")));
    raw.send(&new_session_request(4, &env.workspace));
    for id in [2, 3] {
        let refused = raw.answer(id);
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("--allow-broad-workspace"), "{refused}");
    }
    let opened = raw.answer(4);
    assert!(opened["result"]["sessionId"].is_string(), "{opened}");
    drop(raw.child.stdin.take());
    let _ = raw.child.wait();
}

/// An MCP server the client names in `session/new` (`mcpServers`, stdio: the Python `mcp`
/// SDK's server of tests/fixtures/mcp) is started for the session: the model sees its tools,
/// its call runs there (the server computes the sum), the result reaches the model on the
/// wire, and the client sees the call as `tool_call` and `tool_call_update` updates.
#[test]
fn an_mcp_server_from_session_new_serves_the_models_tool_call() {
    let Some(python) = external::require("the Python `mcp` SDK", external::python_with(&["mcp"]))
    else {
        return;
    };
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/py_server.py");
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("m1", "mcp__py__add", r#"{"a":40,"b":2}"#),
            )
            .answer("L2", "The server says 42."),
    );
    let steps = json!([
        {"op": "initialize"},
        {"op": "new_session", "cwd": env.workspace, "mcp_servers": [{
            "name": "py",
            "command": python.display().to_string(),
            "args": [server.display().to_string()],
            "env": [],
        }]},
        {"op": "prompt", "text": "add 40 and 2 with the tool", "permissions": ["allow_once"]},
    ]);
    let Some(report) = drive(&env, &engine, &["--sandbox", "off"], steps) else {
        return;
    };
    let prompt = step(&report, 2);
    assert_eq!(prompt["response"]["stopReason"], "end_turn", "{prompt:#}");

    // The server starts in the background (a call to one still starting waits for it), so
    // its tools are offered from the request after it is ready: the one after the call.
    let answers = engine.requests_for_hop("answer");
    assert_eq!(answers.len(), 2);
    let offered: Vec<String> = answers[1]
        .body
        .get("tools")
        .and_then(|t| t.as_array())
        .map(|tools| {
            tools
                .iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    assert!(offered.iter().any(|n| n == "mcp__py__add"), "{offered:?}");
    let results: Vec<String> = answers
        .last()
        .unwrap()
        .transcript()
        .into_iter()
        .filter(|(role, _)| role == "tool")
        .map(|(_, text)| text)
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("42"), "{results:?}");

    // The client saw the call start and finish, with the server's output.
    let calls = updates(prompt, "tool_call");
    assert_eq!(calls.len(), 1, "{prompt:#}");
    assert_eq!(calls[0]["toolCallId"], "m1", "{prompt:#}");
    assert!(
        calls[0]["title"].as_str().unwrap_or("").contains("add") || calls[0]["rawInput"]["a"] == 40,
        "{prompt:#}"
    );
    let progress = updates(prompt, "tool_call_update");
    let done = progress.last().expect("a tool_call_update");
    assert_eq!(done["toolCallId"], "m1");
    assert_eq!(done["status"], "completed", "{prompt:#}");
    let shown = serde_json::to_string(&progress).unwrap();
    assert!(shown.contains("42"), "{prompt:#}");
    assert_eq!(
        chunk_text(&updates(prompt, "agent_message_chunk")),
        "The server says 42."
    );
}

/// Round 28 (high): in `baton acp` the variables of baton's environment naming a writable
/// folder were left out of hooks against the session's own folders only: session B's hook got
/// `PYTHONUSERBASE` naming session A's workspace, and ran a `.pth` file A's command wrote.
/// Every session's folders count now.
#[test]
fn a_second_sessions_hook_gets_no_variable_naming_the_first_sessions_workspace() {
    let env = Env::new();
    let project_b = env.home.parent().expect("root").join("project-b");
    std::fs::create_dir_all(&project_b).expect("mkdir");
    let seen = env.home.parent().expect("root").join("hook-env-b");
    let hooks = json!({"hooks": {"UserPromptSubmit": [{"hooks": [
        {"type": "command", "command": format!("env > '{}'", seen.display()), "timeout": 30}
    ]}]}});
    std::fs::create_dir_all(env.home.join(".config/baton")).expect("mkdir");
    std::fs::write(env.home.join(".config/baton/hooks.json"), hooks.to_string()).expect("hooks");
    let engine =
        MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer("ok"));
    let user_base = env.workspace.join(".pyuser");
    let mut raw = Raw::start_with(&env, &engine, &[("PYTHONUSERBASE", user_base.as_os_str())]);
    raw.send(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#);
    raw.answer(1);
    raw.send(&new_session_request(2, &env.workspace));
    raw.answer(2);
    raw.send(&new_session_request(3, &project_b));
    let b = raw.answer(3);
    let b = b["result"]["sessionId"]
        .as_str()
        .expect("session B")
        .to_string();
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                "params": {"sessionId": b, "prompt": [{"type": "text", "text": "hi"}]}})
        .to_string(),
    );
    let answered = raw.answer(4);
    assert!(answered.get("result").is_some(), "{answered}");
    drop(raw.child.stdin.take());
    let _ = raw.child.wait();
    let hook_env = std::fs::read_to_string(&seen).expect("session B's hook ran");
    assert!(hook_env.contains("HOME="), "{hook_env}");
    assert!(
        !hook_env.contains("PYTHONUSERBASE="),
        "session B's hook got a variable naming session A's workspace: {hook_env}"
    );
}
