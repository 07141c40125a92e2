//! `baton --exec` end to end: the real binary against the in-process mock engine on loopback.
//! Covers the MoL loop's wire shapes (route, answer, summary), stickiness, fallbacks, modes,
//! resume across runs, limits and the JSON event stream.

use std::path::{Path, PathBuf};

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, RecordedRequest, Script};
use serde_json::Value;
use std::time::Duration;

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn events(out: &std::process::Output) -> Vec<Value> {
    stdout_of(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == ty).collect()
}

#[test]
fn a_turn_routes_answers_on_the_routed_adapter_and_summarizes_off_stdout() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L1")
            .answer("L1", "Hello from L1.")
            .summary("L1", "SECRET-SUMMARY"),
    );
    let out = env
        .exec(&engine, "  plan my week  ", &[])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "Hello from L1.\n");
    assert!(!stderr_of(&out).contains("SECRET-SUMMARY"));

    let routes = engine.requests_for_hop("route");
    assert_eq!(routes.len(), 1);
    let r = &routes[0].body;
    assert_eq!(r["model"], "L0");
    assert_eq!(r["max_tokens"], 24);
    assert_eq!(r["temperature"], 0.0);
    assert_eq!(r["stream"], false);
    assert_eq!(r["continue_final_message"], true);
    assert_eq!(r["add_generation_prompt"], false);
    assert_eq!(r["chat_template_kwargs"]["enable_thinking"], false);
    assert_eq!(
        r["structured_outputs"]["choice"],
        serde_json::json!(["L0", "L1", "L2", "L3"])
    );
    assert!(r.get("tools").is_none());
    let t = routes[0].transcript();
    assert_eq!(t.len(), 2);
    assert_eq!(t[0].0, "user");
    assert!(t[0].1.starts_with("plan my week\n\n"), "{}", t[0].1);
    assert!(!t[0].1.trim_end().ends_with("model_id="));
    assert_eq!(t[1], ("assistant".to_string(), "model_id=".to_string()));

    let answers = engine.requests_for_hop("answer");
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].model(), "L1");
    assert!(answers[0].is_stream());
    assert!(answers[0].tool_names().contains(&"read_file".to_string()));

    let summaries = engine.requests_for_hop("summary");
    assert_eq!(summaries.len(), 1);
    let s = &summaries[0];
    assert_eq!(s.model(), "L1");
    assert_eq!(s.body["max_tokens"], 192);
    assert_eq!(s.body["chat_template_kwargs"]["enable_thinking"], false);
    // The summary extends the answer request (same tools, text only), so it hits the
    // engine's prefix cache.
    assert_eq!(s.body.get("tools"), answers[0].body.get("tools"));
    assert_eq!(s.body["tool_choice"], "none");
    let st = s.transcript();
    assert_eq!(st.last().map(|m| m.0.as_str()), Some("user"));
    assert!(
        st.iter()
            .any(|(r, c)| r == "assistant" && c == "Hello from L1.")
    );

    // The summary is in the session file, saved before the process exited.
    let files: Vec<_> = std::fs::read_dir(&env.sessions)
        .expect("sessions")
        .collect();
    assert_eq!(files.len(), 1);
    let text = std::fs::read_to_string(files[0].as_ref().expect("entry").path()).expect("read");
    assert!(text.contains("SECRET-SUMMARY"));
}

#[test]
fn a_second_turn_on_another_expert_sees_the_summary_not_the_raw_answer() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L1"])
            .answer("L2", "RAW-ANSWER-ONE")
            .summary("L2", "SUMMARY-ONE")
            .answer("L1", "second answer"),
    );
    let first = env
        .exec(&engine, "fix the build", &[])
        .output()
        .expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    let second = env
        .exec(&engine, "now book a table", &["--resume", "last"])
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    assert_eq!(stdout_of(&second), "second answer\n");

    let l1 = engine.requests_for_model("L1");
    let answer = l1
        .iter()
        .find(|r| r.hop() == Some("answer"))
        .expect("L1 answer");
    assert!(answer.mentions("SUMMARY-ONE"));
    assert!(answer.mentions("fix the build"));
    assert!(!answer.mentions("RAW-ANSWER-ONE"));
    assert_eq!(answer.last_user_text().as_deref(), Some("now book a table"));
    // The route hop sees only the new request.
    let routes = engine.requests_for_hop("route");
    assert_eq!(routes.len(), 2);
    assert!(!routes[1].mentions("fix the build"));
}

#[test]
fn resuming_on_the_same_expert_sees_its_own_answer_verbatim() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer("L2", "FIRST-RAW")
            .answer("L2", "second"),
    );
    let first = env.exec(&engine, "one", &[]).output().expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    let second = env
        .exec(&engine, "two", &["--resume", "last"])
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    let answers = engine.requests_for_hop("answer");
    let t = answers[1].transcript();
    let roles: Vec<&str> = t.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(t[2].1, "FIRST-RAW");
}

#[test]
fn tool_results_continue_on_the_same_expert_without_a_route_hop() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "FILE-CONTENT-42").expect("write");
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_1", "read_file", r#"{"path":"notes.txt"}"#),
            )
            .answer("L2", MockReply::tool_call("call_2", "no_such_tool", "{}"))
            .answer("L2", "The file says 42."),
    );
    let out = env
        .exec(&engine, "what is in notes.txt?", &["--json"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(engine.requests_for_hop("route").len(), 1);
    let answers = engine.requests_for_hop("answer");
    assert_eq!(answers.len(), 3);
    assert!(answers.iter().all(|a| a.model() == "L2"));
    let tool_msgs: Vec<(String, String)> = answers[2]
        .transcript()
        .into_iter()
        .filter(|(r, _)| r == "tool")
        .collect();
    assert_eq!(tool_msgs.len(), 2);
    assert!(tool_msgs[0].1.contains("FILE-CONTENT-42"));
    // An unknown tool is reported to the model, not a dead turn.
    assert!(tool_msgs[1].1.contains("no tool named `no_such_tool`"));

    let ev = events(&out);
    let decisions: Vec<&str> = of_type(&ev, "route_decided")
        .iter()
        .filter_map(|e| e["decision"].as_str())
        .collect();
    assert_eq!(decisions, ["model", "sticky", "sticky"]);
    assert_eq!(of_type(&ev, "tool_begin").len(), 2);
    let done = of_type(&ev, "turn_completed");
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["answer"], "The file says 42.");
    assert_eq!(done[0]["status"], "done");
    assert_eq!(of_type(&ev, "summary_recorded").len(), 1);
    // The summary's text is never part of the output, not even in JSON mode.
    assert!(!stdout_of(&out).contains("summary by L2"));
    assert_eq!(engine.requests_for_hop("summary").len(), 1);
    assert_eq!(ev[0]["type"], "session");
    assert_eq!(
        ev.last().map(|e| e["type"].clone()),
        Some("shutdown_complete".into())
    );
}

#[test]
fn a_garbage_label_falls_back_to_l2() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("banana")
            .answer("L2", "fallback answer"),
    );
    let out = env.exec(&engine, "hm", &["--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let ev = events(&out);
    let route = of_type(&ev, "route_decided");
    assert_eq!(route[0]["decision"], "fallback");
    assert_eq!(route[0]["expert"], "L2");
    assert!(route[0]["reason"].as_str().unwrap_or("").contains("banana"));
    assert_eq!(engine.requests_for_hop("answer")[0].model(), "L2");
}

#[test]
fn an_l0_error_falls_back_to_l2() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route_reply(MockReply::error(400, "L0 is not loaded", "bad_request"))
            .answer("L2", "still answered"),
    );
    let out = env.exec(&engine, "hi", &[]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "still answered\n");
    assert!(stderr_of(&out).contains("fallback"));
}

#[test]
fn a_pinned_expert_skips_routing() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new().answer("L3", "ui"));
    let out = env
        .exec(&engine, "x", &["--expert", "L3"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert!(engine.requests_for_hop("route").is_empty());
    assert_eq!(engine.requests_for_hop("answer")[0].model(), "L3");
}

/// In a small window the tool schemas are sent lean (first sentence, no parameter
/// descriptions): an 8k window spent half its tokens on the coding expert's full schemas, and
/// every file read then compacted. A window with room gets them in full.
#[test]
fn a_small_window_gets_lean_tool_schemas() {
    let env = Env::new();
    let tools_of = |window: &str| {
        let engine = MockEngine::scripted_blocking(Script::new().answer("L2", "ok"));
        let out = env
            .exec(
                &engine,
                "x",
                &["--expert", "L2", "--context-window", window],
            )
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        engine.requests_for_hop("answer")[0].body["tools"].clone()
    };
    let full = tools_of("131072");
    let lean = tools_of("8192");
    let names = |tools: &serde_json::Value| -> Vec<String> {
        tools
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&full), names(&lean), "the same tools");
    assert!(
        lean.to_string().len() * 2 < full.to_string().len(),
        "lean {} bytes, full {} bytes",
        lean.to_string().len(),
        full.to_string().len()
    );
    let read_file = |tools: &serde_json::Value| {
        tools
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["function"]["name"] == "read_file")
            .unwrap()["function"]
            .clone()
    };
    let (full_read, lean_read) = (read_file(&full), read_file(&lean));
    assert!(full_read["parameters"]["properties"]["path"]["description"].is_string());
    assert!(lean_read["parameters"]["properties"]["path"]["description"].is_null());
    assert_eq!(
        lean_read["parameters"]["required"],
        full_read["parameters"]["required"]
    );
}

#[test]
fn proxy_mode_echoes_the_conversation_id() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .answer(
                "Macaron-V1-Tall",
                MockReply::text("first")
                    .header("X-Conversation-Id", "molc_server_token_0123456789"),
            )
            .answer("Macaron-V1-Tall", "second"),
    );
    let flags = ["--mode", "proxy", "--model", "Macaron-V1-Tall"];
    let first = env.exec(&engine, "one", &flags).output().expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    let mut resume = flags.to_vec();
    resume.extend(["--resume", "last"]);
    let second = env.exec(&engine, "two", &resume).output().expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    let reqs = engine.chat_requests();
    assert_eq!(reqs.len(), 2, "no route or summary hops in proxy mode");
    assert_eq!(
        reqs[1].conversation_id(),
        Some("molc_server_token_0123456789")
    );
    assert!(
        reqs[1].mentions("first"),
        "the whole history goes to the proxy"
    );
}

#[test]
fn single_mode_sends_one_model_and_no_hops() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().answer("plain-model", "single answer"));
    let out = env
        .exec(
            &engine,
            "hello",
            &["--mode", "single", "--model", "plain-model"],
        )
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "single answer\n");
    let reqs = engine.chat_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].model(), "plain-model");
}

#[test]
fn the_prompt_can_come_from_stdin_and_the_answer_from_a_file() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "piped answer"));
    let out_file = env.workspace.join("answer.md");
    let out = env
        .session_baton()
        .args(["--exec", "--endpoint", &engine.url(), "-o"])
        .arg(&out_file)
        .arg("-")
        .write_stdin("prompt from stdin")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(
        std::fs::read_to_string(&out_file).expect("-o file"),
        "piped answer"
    );
    assert_eq!(
        engine.requests_for_hop("answer")[0]
            .last_user_text()
            .as_deref(),
        Some("prompt from stdin")
    );
}

#[test]
fn max_turns_stops_a_tool_loop_with_exit_3() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::tool_call("c1", "list_dir", "{}")),
    );
    let out = env
        .exec(&engine, "loop", &["--max-turns", "1"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    assert_eq!(engine.requests_for_hop("answer").len(), 1);
}

#[test]
fn a_hanging_server_hits_the_timeout_with_exit_3() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", MockReply::hang()));
    let out = env
        .exec(&engine, "wait", &["--timeout", "2"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("--timeout"));
}

/// A command cut short by `--timeout` is reported to the model as the time limit's doing, not
/// the user's: the resumed turn's request carries why the call stopped.
#[test]
fn a_call_stopped_by_the_timeout_tells_the_model_so() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer(
                "L2",
                MockReply::tool_call(
                    "c1",
                    "shell",
                    r#"{"command":"sleep 30","timeout_ms":60000,"yield_ms":60000}"#,
                ),
            )
            .answer("L2", "resumed"),
    );
    let out = env
        .exec(
            &engine,
            "wait",
            &[
                "--timeout",
                "2",
                "--sandbox",
                "off",
                "--approval",
                "full-auto",
            ],
        )
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    let again = env
        .exec(&engine, "go on", &["--resume", "last", "--sandbox", "off"])
        .output()
        .expect("run");
    assert_eq!(again.status.code(), Some(0), "{}", stderr_of(&again));
    let last = engine.requests_for_hop("answer").pop().expect("an answer");
    assert!(
        last.mentions("Interrupted: the run's time limit (--timeout 2 s) was reached."),
        "{:?}",
        last.messages()
    );
    assert!(!last.mentions("Interrupted by the user."));
}

/// No two user messages in a row anywhere in a request's messages.
fn assert_turns_alternate(request: &RecordedRequest) {
    let roles: Vec<(String, String)> = request.transcript();
    for pair in roles.windows(2) {
        assert!(
            !(pair[0].0 == "user" && pair[1].0 == "user"),
            "two user messages in a row: {roles:?}"
        );
    }
}

/// An answer cut short mid-stream is in the next request as the model wrote it, marked as
/// incomplete and saying why (before, it was dropped and nothing said the turn was cut off).
#[test]
fn an_answer_cut_short_reaches_the_next_request_marked_incomplete() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer(
                "L2",
                MockReply::text("First part of the answer, and then the rest of it")
                    .chunk_chars(10)
                    .hang_after(3),
            )
            .answer("L2", "resumed"),
    );
    let out = env
        .exec(&engine, "explain", &["--timeout", "2"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(3), "{}", stderr_of(&out));
    let again = env
        .exec(&engine, "go on", &["--resume", "last"])
        .output()
        .expect("run");
    assert_eq!(again.status.code(), Some(0), "{}", stderr_of(&again));
    let last = engine.requests_for_hop("answer").pop().expect("an answer");
    let cut = last
        .transcript()
        .into_iter()
        .find(|(role, text)| role == "assistant" && text.contains("First part"))
        .unwrap_or_else(|| panic!("the partial answer is kept: {:?}", last.transcript()));
    assert!(
        cut.1.ends_with(
            "[Interrupted: the run's time limit (--timeout 2 s) was reached. The answer above \
             is incomplete.]"
        ),
        "{cut:?}"
    );
    assert_turns_alternate(&last);
}

/// A turn killed outright (SIGKILL, no chance to record anything) leaves an open task; on
/// resume the model sees it ended without an answer instead of two user messages in a row.
#[test]
fn a_killed_turn_is_marked_for_the_model_on_resume() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer("L2", MockReply::hang())
            .answer("L2", "resumed"),
    );
    let mut child = env
        .exec_child(&engine, "third, will be killed", &[])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while engine.requests_for_hop("answer").is_empty() {
        assert!(std::time::Instant::now() < deadline, "no answer hop");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("kill");
    child.wait().expect("wait");
    let again = env
        .exec(&engine, "fourth after kill", &["--resume", "last"])
        .output()
        .expect("run");
    assert_eq!(again.status.code(), Some(0), "{}", stderr_of(&again));
    let last = engine.requests_for_hop("answer").pop().expect("an answer");
    assert!(
        last.mentions("(Interrupted: the session ended before this request was finished.)"),
        "{:?}",
        last.transcript()
    );
    assert_turns_alternate(&last);
}

/// "Do the same for February" after an L1 task stays with L1 without a route hop (the route
/// hop sees only that one line, with nothing to say what "the same" is); `--follow-ups route`
/// routes it as the reference harness does.
#[test]
fn a_short_follow_up_stays_with_the_previous_expert_without_a_route_hop() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L1", "L2"])
            .default_answer("Done.")
            .default_summary("Made the January report."),
    );
    let run = |prompt: &str, extra: &[&str]| {
        let mut args = vec!["--json"];
        args.extend_from_slice(extra);
        let out = env.exec(&engine, prompt, &args).output().expect("run");
        assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
        events(&out)
    };
    run("make the January sales report", &[]);
    let ev = run("do the same for February", &["--resume", "last"]);
    let route = &of_type(&ev, "route_decided")[0];
    assert_eq!(route["decision"], "follow_up", "{route}");
    assert_eq!(route["expert"], "L1");
    assert_eq!(
        engine.requests_for_hop("route").len(),
        1,
        "no second route hop"
    );
    assert_eq!(
        engine.requests_for_hop("answer").last().unwrap().model(),
        "L1"
    );
    // A new request is routed; with `--follow-ups route` a follow-up is too.
    let ev = run(
        "do the same for March",
        &["--resume", "last", "--follow-ups", "route"],
    );
    assert_eq!(of_type(&ev, "route_decided")[0]["decision"], "model");
    assert_eq!(engine.requests_for_hop("route").len(), 2);
}

/// Piped stdin is also saved in the workspace (`.baton/stdin/<id>.txt`, a folder that ignores
/// itself), named after the `<stdin>` block, and the model's `read_file` of that path reads
/// it; `git status` stays clean.
#[test]
fn piped_stdin_is_saved_as_a_file_the_tools_can_read() {
    let env = Env::new();
    env.git(&["init", "-q"]);
    let log: String = (0..2000)
        .map(|i| format!("line {i}: ok\n"))
        .chain(std::iter::once("line 2000: ERROR disk full\n".to_string()))
        .collect();
    let engine = MockEngine::start_blocking(|req| {
        if req.is_route() {
            return MockReply::label("L2");
        }
        if req.is_summary() {
            return MockReply::text("Read the log.");
        }
        let saved = req.messages().iter().find_map(|m| {
            let text = crate::support::mock_engine::content_text(m);
            let at = text.find("saved in the workspace as ")?;
            let rest = &text[at + "saved in the workspace as ".len()..];
            Some(rest[..rest.find(':')?].to_string())
        });
        match (saved, req.transcript().iter().any(|(r, _)| r == "tool")) {
            (Some(path), false) => MockReply::tool_call(
                "r1",
                "read_file",
                serde_json::json!({"path": path, "offset": 2000}).to_string(),
            ),
            _ => MockReply::text("The disk is full."),
        }
    });
    let out = env
        .session_baton()
        .args(["--exec", "--endpoint", &engine.url(), "find the error", "-"])
        .write_stdin(log)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let last = engine.requests_for_hop("answer").pop().expect("an answer");
    let result = last
        .transcript()
        .into_iter()
        .find(|(role, _)| role == "tool")
        .map(|(_, text)| text)
        .expect("the read_file result");
    assert!(result.contains("ERROR disk full"), "{result}");
    assert_eq!(
        env.git(&["status", "--porcelain"]),
        "",
        "the folder ignores itself"
    );
}

#[test]
fn a_failing_answer_hop_exits_1_naming_the_hop() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::error(400, "bad things", "bad_request")),
    );
    let out = env.exec(&engine, "x", &[]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    let err = stderr_of(&out);
    assert!(err.contains("answer hop"), "{err}");
    assert!(err.contains("bad things"), "{err}");
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

#[test]
fn a_dead_endpoint_fails_at_once_with_its_hint_and_no_done_line() {
    let env = Env::new();
    let url = format!("http://127.0.0.1:{}/v1", closed_port());
    let run = |json: bool| {
        let mut c = env.session_baton();
        c.args(["--exec", "--endpoint", &url]);
        if json {
            c.arg("--json");
        }
        c.arg("hi").output().expect("run")
    };

    let out = run(false);
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("error: route hop: cannot connect to") && err.contains("Connection refused"),
        "{err}"
    );
    assert!(
        err.contains(&format!("hint: Could not reach {url}")),
        "the hint of the kind follows the error: {err}"
    );
    assert!(!err.contains("done in"), "no 'done' after an error: {err}");
    assert!(
        !err.contains("fallback"),
        "no fallback to the same dead server: {err}"
    );

    let out = run(true);
    let events = events(&out);
    let errors = of_type(&events, "error");
    assert_eq!(errors.len(), 1, "{events:?}");
    assert_eq!(errors[0]["kind"], "unreachable");
    assert_eq!(errors[0]["hop"], "route");
    assert!(of_type(&events, "route_decided").is_empty(), "{events:?}");
    let answer_hops: Vec<_> = of_type(&events, "hop_started")
        .into_iter()
        .filter(|e| e["hop"] == "answer")
        .collect();
    assert!(answer_hops.is_empty(), "{events:?}");
    // One attempt: a refused connection is not retried (a retry would be a warning).
    assert!(of_type(&events, "warning").is_empty(), "{events:?}");
    let done = of_type(&events, "turn_completed");
    assert_eq!(done[0]["status"], "error");
}

#[test]
fn server_errors_before_an_answer_are_announced_as_warnings() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::status(500, "engine warming up"))
            .answer("L2", MockReply::status(500, "engine warming up"))
            .answer("L2", "ready now")
            .default_summary("s"),
    );
    let out = env.exec(&engine, "hi", &["--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let events = events(&out);
    let warnings: Vec<&str> = of_type(&events, "warning")
        .iter()
        .filter_map(|w| w["message"].as_str())
        .collect();
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    for (i, w) in warnings.iter().enumerate() {
        assert!(
            w.starts_with("answer hop: retrying in ")
                && w.contains(&format!(
                    "(retry {} of 3): HTTP 500: engine warming up",
                    i + 1
                )),
            "{w}"
        );
    }
    assert_eq!(engine.requests_for_hop("answer").len(), 3);

    // Plain mode says the same on stderr.
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::status(503, "busy"))
            .answer("L2", "ok")
            .default_summary("s"),
    );
    let out = env.exec(&engine, "hi", &[]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("warning: answer hop: retrying in ") && err.contains("HTTP 503: busy"),
        "{err}"
    );
}

#[test]
fn an_unreachable_route_hop_sends_no_answer_hop() {
    let env = Env::new();
    let engine = MockEngine::start_blocking(|req| {
        if req.is_route() {
            MockReply::reset()
        } else {
            MockReply::text("must not be asked")
        }
    });
    let out = env.exec(&engine, "hi", &["--json"]).output().expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert!(!engine.requests_for_hop("route").is_empty());
    assert!(
        engine.requests_for_hop("answer").is_empty(),
        "the answer hop went to a server the route hop could not reach"
    );
    let events = events(&out);
    let errors = of_type(&events, "error");
    assert_eq!(errors.len(), 1, "{events:?}");
    assert_eq!(errors[0]["kind"], "unreachable");
    assert_eq!(errors[0]["hop"], "route");
}

#[test]
fn a_404_model_in_mol_mode_points_to_doctor_and_the_served_names() {
    let env = Env::new();
    let engine = MockEngine::builder()
        .models([("Qwen3-8B", Some(32768))])
        .start_blocking(|req| {
            if req.is_route() {
                MockReply::label("L2")
            } else {
                MockReply::error(404, "The model `L2` does not exist.", "404")
            }
        });
    let out = env.exec(&engine, "hi", &[]).output().expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    let err = stderr_of(&out);
    assert!(
        err.contains("does not exist") && err.contains("(the server serves: Qwen3-8B)"),
        "{err}"
    );
    assert!(
        err.contains("hint: ") && err.contains("`baton doctor`"),
        "{err}"
    );
    assert!(!err.contains("done in"), "{err}");
}

fn session_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .expect("sessions")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .next()
        .expect("one session")
}

#[test]
fn a_summary_missing_from_a_session_is_made_by_the_next_turn_that_needs_it() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L1"])
            .answer("L2", "first")
            .summary("L2", "LATE-SUMMARY")
            .answer("L1", "second"),
    );
    let first = env.exec(&engine, "one", &[]).output().expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    // Simulate a process killed before its summary was saved: drop the summary record.
    let path = session_file(&env.sessions);
    let text = std::fs::read_to_string(&path).expect("read");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"record\":\"summary\""))
        .collect();
    std::fs::write(&path, kept.join("\n") + "\n").expect("write");
    engine.clear_requests();
    let second = env
        .exec(&engine, "two", &["--resume", "last"])
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    let summaries = engine.requests_for_hop("summary");
    assert!(summaries.iter().any(|s| s.model() == "L2"));
    let answer = engine
        .requests_for_hop("answer")
        .into_iter()
        .find(|r| r.model() == "L1")
        .expect("L1 answer");
    assert!(answer.mentions("summary by L2"));
}

/// `--defer-summary` (what `baton eval` passes its agent) ends the run without a summary hop;
/// a resumed turn of another expert makes the summary it needs, as after a lost one.
#[test]
fn a_deferred_summary_is_made_by_the_next_turn_that_needs_it() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2", "L1"])
            .answer("L2", "first")
            .answer("L2", "again")
            .summary("L2", "LATE-SUMMARY")
            .answer("L1", "second"),
    );
    let first = env
        .exec(&engine, "one", &["--defer-summary"])
        .output()
        .expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    assert!(engine.requests_for_hop("summary").is_empty());
    let saved = std::fs::read_to_string(session_file(&env.sessions)).expect("read");
    assert!(!saved.contains("\"record\":\"summary\""));
    // The same expert reads its own task verbatim: no summary is needed yet.
    let again = env
        .exec(&engine, "more", &["--resume", "last", "--defer-summary"])
        .output()
        .expect("run");
    assert_eq!(again.status.code(), Some(0), "{}", stderr_of(&again));
    assert!(engine.requests_for_hop("summary").is_empty());
    let second = env
        .exec(&engine, "two", &["--resume", "last"])
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    // L2's two tasks summarized for L1's view first; L1's own, as usual, after its answer.
    let summaries: Vec<String> = engine
        .requests_for_hop("summary")
        .iter()
        .map(|s| s.model().to_string())
        .collect();
    assert_eq!(summaries, ["L2", "L2", "L1"], "{:?}", engine.hop_log());
    let answer = engine
        .requests_for_hop("answer")
        .into_iter()
        .find(|r| r.model() == "L1")
        .expect("L1 answer");
    assert!(
        answer.mentions("LATE-SUMMARY"),
        "the L1 view shows the summary"
    );
    let out = env
        .baton()
        .args(["--defer-summary", "x"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "--defer-summary needs --exec");
}

#[test]
fn ctrl_c_stops_the_turn_saves_the_session_and_exits_130() {
    use std::io::{BufRead, BufReader};
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", MockReply::hang()));
    let mut child = env
        .exec_child(&engine, "wait forever", &["--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    // Wait until the answer hop is in flight, then interrupt.
    for line in lines.by_ref() {
        let line = line.expect("line");
        if line.contains("\"hop_started\"") && line.contains("\"answer\"") {
            break;
        }
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(130));
    assert!(
        rest.iter()
            .any(|l| l.contains("\"status\":\"interrupted\""))
    );
    assert!(rest.last().is_some_and(|l| l.contains("shutdown_complete")));
    let saved = std::fs::read_to_string(session_file(&env.sessions)).expect("session");
    assert!(saved.contains("\"record\":\"turn_ended\""));
    assert!(saved.contains("\"record\":\"task_abandoned\""));
}

#[test]
fn the_api_key_is_sent_but_never_printed_or_saved() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::error(401, "bad key", "invalid_api_key")),
    );
    let out = env
        .exec(&engine, "hi", &["--json", "--api-key-env", "MY_KEY"])
        .env("MY_KEY", "sk-very-secret-123")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        engine.requests_for_hop("answer")[0].header("authorization"),
        Some("Bearer sk-very-secret-123")
    );
    assert!(!stdout_of(&out).contains("sk-very-secret"));
    assert!(!stderr_of(&out).contains("sk-very-secret"));
    let saved = std::fs::read_to_string(session_file(&env.sessions)).expect("session");
    assert!(!saved.contains("sk-very-secret"));
}

#[test]
fn the_api_key_never_reaches_a_command_whatever_its_variable_is_named() {
    // `--api-key-env LLM_ACCESS`: a name the credential patterns do not match, so commands
    // got baton's key (second red team).
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("c1", "shell", r#"{"command":"env; echo listed"}"#),
            )
            .answer("L2", "done"),
    );
    let out = env
        .exec(
            &engine,
            "hi",
            &["--api-key-env", "LLM_ACCESS", "--approval", "full-auto"],
        )
        .env("LLM_ACCESS", "sk-named-oddly-123")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let last = engine.requests_for_hop("answer").pop().expect("an answer");
    assert!(last.mentions("listed"), "{:?}", last.messages());
    assert!(!last.mentions("sk-named-oddly"), "{:?}", last.messages());
    assert_eq!(
        last.header("authorization"),
        Some("Bearer sk-named-oddly-123")
    );
}

#[test]
fn project_instructions_reach_the_experts() {
    let env = Env::new();
    std::fs::write(env.workspace.join("AGENTS.md"), "Always run cargo fmt.").expect("write");
    let engine = MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "ok"));
    let out = env.exec(&engine, "hi", &[]).output().expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let answer = &engine.requests_for_hop("answer")[0];
    assert!(
        answer
            .system_text()
            .unwrap_or_default()
            .contains("Always run cargo fmt.")
    );
    assert!(!engine.requests_for_hop("route")[0].mentions("Always run cargo fmt."));
}

#[test]
fn a_hanging_summary_does_not_hold_back_the_answer() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", "prompt answer")
            .summary("L2", MockReply::hang()),
    );
    let out = env
        .exec(&engine, "hi", &["--timeout", "2"])
        .output()
        .expect("run");
    // The turn finished: exit 0 with the answer, although the summary never came.
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "prompt answer\n");
    assert!(stderr_of(&out).contains("next turn will make it"));
    let saved = std::fs::read_to_string(session_file(&env.sessions)).expect("session");
    assert!(!saved.contains("\"record\":\"summary\""));
}

#[test]
fn the_whole_loop_runs_on_the_local_tiny_model() {
    let env = Env::new();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3");
    let out = env
        .session_baton()
        .env("BATON_MAX_TOKENS", "4")
        // The tiny model's window is 4096 tokens: offer two tools, not the full set.
        .env("BATON_TOOLS", "read_file,list_dir")
        .args(["--exec", "--json", "--device", "cpu", "--local"])
        .arg(&model)
        .arg("hello there")
        // CPU-bound in a debug build: with the suite's other threads on 2 cores, a minute
        // was not always enough.
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let ev = events(&out);
    assert!(
        ev[0]["backend"]
            .as_str()
            .unwrap_or("")
            .starts_with("local:")
    );
    let route = of_type(&ev, "route_decided");
    assert_eq!(route.len(), 1);
    assert_eq!(
        route[0]["decision"], "model",
        "the constraint yields a label"
    );
    let done = of_type(&ev, "turn_completed");
    assert_eq!(done[0]["status"], "done");
    assert_eq!(of_type(&ev, "summary_recorded").len(), 1);
}

#[test]
fn the_whole_loop_runs_on_the_local_tiny_moe_model() {
    // The hybrid Qwen3.5-MoE fixture: route, answer and summary through the same loop.
    let env = Env::new();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3-5-moe");
    let out = env
        .session_baton()
        .env("BATON_MAX_TOKENS", "4")
        .env("BATON_TOOLS", "read_file,list_dir")
        .args(["--exec", "--json", "--device", "cpu", "--local"])
        .arg(&model)
        .arg("hello there")
        // CPU-bound in a debug build: with the suite's other threads on 2 cores, a minute
        // was not always enough.
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let ev = events(&out);
    let route = of_type(&ev, "route_decided");
    assert_eq!(route.len(), 1);
    assert_eq!(
        route[0]["decision"], "model",
        "the constraint yields a label"
    );
    let done = of_type(&ev, "turn_completed");
    assert_eq!(done[0]["status"], "done");
    assert_eq!(of_type(&ev, "summary_recorded").len(), 1);
}

/// `{prompt_tokens, completion_tokens}` of a usage object, for comparing.
fn tokens(v: &Value) -> (u64, u64) {
    (
        v["prompt_tokens"].as_u64().unwrap_or(u64::MAX),
        v["completion_tokens"].as_u64().unwrap_or(u64::MAX),
    )
}

fn last_session_usage(events: &[Value]) -> Value {
    of_type(events, "session_usage")
        .last()
        .map(|e| e["usage"].clone())
        .expect("a session_usage event")
}

#[test]
fn usage_is_counted_by_hop_per_turn_and_per_session_across_resume() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "remember the milk\n").expect("write");
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route_reply(MockReply::label("L2").usage(10, 1))
            .answer(
                "L2",
                MockReply::tool_call("c1", "read_file", r#"{"path":"notes.txt"}"#).usage(100, 20),
            )
            .answer("L2", MockReply::text("Milk.").usage(200, 30))
            .summary("L2", MockReply::text("Read the notes.").usage(50, 5))
            .route_reply(MockReply::label("L2").usage(11, 1))
            .answer("L2", MockReply::text("Still milk.").usage(300, 40))
            .summary("L2", MockReply::text("Answered again.").usage(60, 6)),
    );
    let first = env
        .exec(&engine, "what do my notes say?", &["--json"])
        .output()
        .expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    let ev = events(&first);
    let done = of_type(&ev, "turn_completed")[0];
    let by_hop = &done["usage_by_hop"];
    assert_eq!(tokens(&by_hop["route"]), (10, 1));
    assert_eq!(tokens(&by_hop["answer"]), (300, 50), "both answer hops");
    assert_eq!(
        tokens(&by_hop["summary"]),
        (0, 0),
        "the summary comes later"
    );
    assert_eq!(tokens(&by_hop["compaction"]), (0, 0));
    assert_eq!(tokens(&by_hop["total"]), (310, 51));
    assert_eq!(tokens(&done["usage"]), (310, 51));
    assert_eq!(tokens(&done["session_usage"]["total"]), (310, 51));
    // The session total after the run includes the summary hop, finished after the answer.
    let session = last_session_usage(&ev);
    assert_eq!(tokens(&session["summary"]), (50, 5));
    assert_eq!(tokens(&session["total"]), (360, 56));

    // Plain mode prints the core's session total; a resumed run continues from it.
    let second = env
        .exec(&engine, "and now?", &["--resume", "last"])
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    let err = stderr_of(&second);
    assert!(
        err.contains("done in") && err.contains("(311 prompt + 41 completion tokens this turn)"),
        "{err}"
    );
    assert!(
        err.contains(
            "session: 731 prompt + 103 completion tokens (route 23, answer 690, summary 121)"
        ),
        "{err}"
    );
    // The session file holds the totals: a third, JSON run starts from them.
    let engine_ev = env
        .exec(&engine, "and once more?", &["--json", "--resume", "last"])
        .output()
        .expect("run");
    let ev = events(&engine_ev);
    let opened = of_type(&ev, "session_usage")
        .first()
        .map(|e| tokens(&e["usage"]["total"]));
    assert_eq!(opened, Some((731, 103)), "the resumed total comes first");
}

#[test]
fn a_session_open_in_one_baton_process_is_refused_by_a_second() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer("L2", "first")
            .answer("L2", MockReply::hang()),
    );
    let first = env.exec(&engine, "one", &[]).output().expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    let id = std::fs::read_dir(&env.sessions)
        .expect("sessions")
        .flatten()
        .find_map(|e| {
            let p = e.path();
            (p.extension().and_then(|x| x.to_str()) == Some("jsonl"))
                .then(|| p.file_stem().and_then(|s| s.to_str()).map(String::from))
                .flatten()
        })
        .expect("a session file");
    let before = std::fs::read_to_string(env.sessions.join(format!("{id}.jsonl"))).expect("read");

    // Process A resumes the session and hangs in its answer hop, holding the session open.
    let mut a = std::process::Command::new(assert_cmd::cargo::cargo_bin("baton"));
    a.env_clear()
        .env("HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("XDG_DATA_HOME", env.home.join(".local/share"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&env.workspace)
        .arg("--session-dir")
        .arg(&env.sessions)
        .args([
            "--exec",
            "--endpoint",
            &engine.url(),
            "--resume",
            &id,
            "two",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut a = a.spawn().expect("spawn A");
    let started = std::time::Instant::now();
    while engine.requests_for_hop("answer").len() < 2 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "A never answered"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    // `baton sessions` still lists the open session, with A's turn.
    let listed = env
        .session_baton()
        .arg("sessions")
        .output()
        .expect("run sessions");
    assert_eq!(listed.status.code(), Some(0), "{}", stderr_of(&listed));
    let row = stdout_of(&listed)
        .lines()
        .find(|l| l.starts_with(&id))
        .map(String::from)
        .unwrap_or_else(|| panic!("{id} not listed: {}", stdout_of(&listed)));
    // Columns: id, last activity, turns, workspace, first message.
    let turns = row.split_whitespace().nth(3);
    assert_eq!(turns, Some("2"), "{row}");
    assert!(row.trim_end().ends_with("one"), "{row}");

    // Process B on the same session: a clear error naming A, and nothing written.
    let b = env
        .exec(&engine, "three", &["--resume", &id])
        .output()
        .expect("run B");
    // A dies without closing anything (a crash): its pid note stays behind.
    let _ = a.kill();
    let _ = a.wait();
    assert_ne!(b.status.code(), Some(0));
    let err = stderr_of(&b);
    assert!(
        err.contains(&format!(
            "session {id} is open in another baton process (pid {})",
            a.id()
        )),
        "{err}"
    );
    let after = std::fs::read_to_string(env.sessions.join(format!("{id}.jsonl"))).expect("read");
    assert!(after.starts_with(&before), "B must not touch the file");
    assert!(!after.contains("three"), "B wrote nothing: {after}");
    assert_eq!(
        engine.requests_for_hop("route").len(),
        2,
        "B sent nothing to the model"
    );

    // After the crash the lock is gone with A; the stale pid note does not block C, and C
    // closes the turn A left open before its own.
    assert!(
        env.sessions.join(format!("{id}.pid")).exists(),
        "A's note is stale"
    );
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer("after the crash"),
    );
    let c = env
        .exec(&engine, "four", &["--resume", &id])
        .output()
        .expect("run C");
    assert_eq!(c.status.code(), Some(0), "{}", stderr_of(&c));
    assert_eq!(stdout_of(&c), "after the crash\n");
    let text = std::fs::read_to_string(env.sessions.join(format!("{id}.jsonl"))).expect("read");
    assert!(text.contains("\"record\":\"task_abandoned\""), "{text}");
    assert!(
        !env.sessions.join(format!("{id}.pid")).exists(),
        "C removed its note"
    );
}

/// `git diff | baton --exec "review this"`: the piped text reaches the model as a delimited
/// block after the prompt; binary input is refused before anything runs.
#[test]
fn a_piped_stdin_is_appended_to_a_prompt_argument_and_binary_is_refused() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", "LGTM"));
    let with_stdin = |prompt: &str| {
        let mut c = env.session_baton();
        c.args(["--exec", "--endpoint", &engine.url(), prompt, "-"]);
        c
    };
    let out = with_stdin("review this")
        .write_stdin("diff --git a/x.rs b/x.rs\n+fn x() {}\n")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr_of(&out));
    let answers = engine.requests_for_hop("answer");
    let t = answers[0].transcript();
    let user = t
        .iter()
        .find(|(role, _)| role == "user")
        .map(|(_, text)| text.clone())
        .expect("user message");
    assert!(
        user.contains("review this\n\n<stdin>\ndiff --git a/x.rs b/x.rs\n+fn x() {}\n</stdin>"),
        "{user}"
    );

    let refused = with_stdin("what is this")
        .write_stdin(vec![0x7fu8, b'E', b'L', b'F', 0, 0, 1])
        .output()
        .expect("run");
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        stderr_of(&refused).contains("stdin is binary"),
        "{}",
        stderr_of(&refused)
    );
    assert_eq!(engine.requests_for_hop("answer").len(), 1, "nothing ran");
}

/// The `error` event of a failed `--exec --json` run.
fn error_event(out: &std::process::Output) -> Value {
    let ev = events(out);
    let errors = of_type(&ev, "error");
    assert_eq!(
        errors.len(),
        1,
        "one error event: {ev:?}\n{}",
        stderr_of(out)
    );
    errors[0].clone()
}

/// llama.cpp's server's answer to a prompt longer than its context (`-c`).
const LLAMA_CPP_OVERFLOW: &str = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;

#[test]
fn each_failure_reaches_the_json_error_event_with_its_kind() {
    let env = Env::new();
    for (reply, kind) in [
        (MockReply::context_overflow(), "context_overflow"),
        // llama.cpp's server: a 400, or an error frame inside a 200 stream.
        (
            MockReply::status(400, LLAMA_CPP_OVERFLOW),
            "context_overflow",
        ),
        (
            MockReply::raw_sse(format!("data: {LLAMA_CPP_OVERFLOW}\n\n")),
            "context_overflow",
        ),
        (MockReply::error(401, "bad key", "invalid_api_key"), "auth"),
        (MockReply::too_many_requests(0), "rate_limit"),
        (MockReply::malformed_sse(), "bad_response"),
        // A rate limit reported inside the stream (vLLM and SGLang put the status in `code`).
        (
            MockReply::raw_sse(
                "data: {\"error\":{\"message\":\"Rate limit reached\",\"code\":429}}\n\n",
            ),
            "rate_limit",
        ),
    ] {
        let engine =
            MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer(reply));
        let out = env.exec(&engine, "x", &["--json"]).output().expect("run");
        assert_eq!(out.status.code(), Some(1), "{kind}: {}", stderr_of(&out));
        let err = error_event(&out);
        assert_eq!(err["kind"], kind, "{err}");
        assert_eq!(err["hop"], "answer", "{err}");
    }
    // Nobody listening on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let out = env
        .session_baton()
        .args(["--exec", "--json", "--endpoint"])
        .arg(format!("http://127.0.0.1:{port}/v1"))
        .arg("x")
        .output()
        .expect("run");
    assert_ne!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let err = error_event(&out);
    assert_eq!(err["kind"], "unreachable", "{err}");
}

fn index_of(events: &[Value], ty: &str) -> usize {
    events
        .iter()
        .position(|e| e["type"] == ty)
        .unwrap_or_else(|| panic!("no {ty} event in {events:?}"))
}

#[test]
fn a_speculative_hit_keeps_the_answer_sent_with_the_route_hop() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer("L2", "FIRST")
            .answer("L2", "SECOND-ANSWER"),
    );
    let first = env.exec(&engine, "one", &[]).output().expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    let second = env
        .exec(
            &engine,
            "two",
            &["--resume", "last", "--speculate", "sticky", "--json"],
        )
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    let events = events(&second);
    let started = of_type(&events, "speculation_started");
    assert_eq!(started.len(), 1, "{events:?}");
    assert_eq!(started[0]["expert"], "L2");
    let resolved = of_type(&events, "speculation_resolved");
    assert_eq!(resolved.len(), 1);
    assert_eq!(resolved[0]["hit"], true);
    assert_eq!(resolved[0]["wasted_prompt_tokens"], 0);
    // Sent with the route hop, shown only once the route confirmed it.
    assert!(index_of(&events, "speculation_started") < index_of(&events, "route_decided"));
    assert!(index_of(&events, "route_decided") < index_of(&events, "speculation_resolved"));
    assert!(index_of(&events, "speculation_resolved") < index_of(&events, "message_delta"));
    let done = of_type(&events, "turn_completed");
    assert_eq!(done[0]["answer"], "SECOND-ANSWER");
    // One answer request for the second turn: the speculative one was the turn's.
    let answers = engine.requests_for_hop("answer");
    assert_eq!(answers.len(), 2, "{:?}", engine.hop_log());
    assert_eq!(answers[1].last_user_text().as_deref(), Some("two"));
    assert!(answers[1].mentions("FIRST"), "L2 sees its own first answer");
}

#[test]
fn a_speculative_miss_is_cancelled_and_the_routed_expert_answers() {
    let env = Env::new();
    let slow_wrong = MockReply::text("WRONG-EXPERT ".repeat(200))
        .chunk_chars(1)
        .chunk_delay(std::time::Duration::from_millis(20));
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .route_reply(MockReply::label("L1").after(std::time::Duration::from_millis(300)))
            .answer("L2", "FIRST")
            .answer("L2", slow_wrong)
            .answer("L1", "RIGHT-EXPERT"),
    );
    let first = env.exec(&engine, "one", &[]).output().expect("run");
    assert_eq!(first.status.code(), Some(0), "{}", stderr_of(&first));
    let second = env
        .exec(
            &engine,
            "two",
            &["--resume", "last", "--speculate", "sticky", "--json"],
        )
        .output()
        .expect("run");
    assert_eq!(second.status.code(), Some(0), "{}", stderr_of(&second));
    let events = events(&second);
    let resolved = of_type(&events, "speculation_resolved");
    assert_eq!(resolved.len(), 1, "{events:?}");
    assert_eq!(resolved[0]["hit"], false);
    assert_eq!(resolved[0]["expert"], "L2");
    assert!(resolved[0]["wasted_prompt_tokens"].as_u64().unwrap() > 0);
    // Nothing of the cancelled answer reached the user.
    assert!(!stdout_of(&second).contains("WRONG-EXPERT"));
    for delta in of_type(&events, "message_delta") {
        assert!(!delta["delta"].as_str().unwrap().contains("WRONG"));
    }
    assert_eq!(
        of_type(&events, "turn_completed")[0]["answer"],
        "RIGHT-EXPERT"
    );
    let log: Vec<String> = engine
        .hop_log()
        .into_iter()
        .map(|(h, m)| format!("{h}:{m}"))
        .collect();
    let second_turn = &log[log.len() - 4..];
    let mut sorted = second_turn.to_vec();
    sorted.sort();
    assert_eq!(
        sorted,
        ["answer:L1", "answer:L2", "route:L0", "summary:L1"],
        "{log:?}"
    );
    // The engine notices the dropped stream at its next write: give a loaded machine time.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while engine.abandoned_streams() == 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(
        engine.abandoned_streams() >= 1,
        "the wrong answer was dropped"
    );
}

/// `baton --exec` as a plain `std` command (its stdio set by the caller), in `env`'s session.
fn exec_command(env: &Env, engine: &MockEngine, extra: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("baton"));
    c.env_clear()
        .env("HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("XDG_DATA_HOME", env.home.join(".local/share"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&env.workspace)
        .arg("--session-dir")
        .arg(&env.sessions)
        .args(["--exec", "--endpoint", &engine.url()])
        .args(extra)
        .stdin(std::process::Stdio::null());
    c
}

/// What `baton undo --dry-run` would do in `env`'s workspace.
fn undo_plan(env: &Env) -> String {
    let out = env
        .session_baton()
        .args(["undo", "--dry-run"])
        .output()
        .expect("undo");
    format!("{}{}", stdout_of(&out), stderr_of(&out))
}

#[test]
fn a_closed_stderr_neither_aborts_the_turn_nor_loses_its_checkpoint() {
    // `baton --exec … 2>&1 | head -3`: the reader is gone, every progress line fails with
    // EPIPE. On the old code the first one panicked and aborted the process (134) after the
    // write, before the turn's checkpoint was recorded.
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "c1",
                    "write_file",
                    r#"{"path":"AB.md","content":"written by the agent\n"}"#,
                ),
            )
            .answer(
                "L2",
                MockReply::tool_call("c2", "shell", r#"{"command":"echo hi"}"#),
            )
            .answer("L2", "All done.")
            .default_summary("Wrote AB.md."),
    );
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = exec_command(&env, &engine, &["--approval", "full-auto", "fix the code"])
        .stdout(std::process::Stdio::piped())
        .stderr(writer)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "status {:?}", out.status);
    assert_eq!(
        stdout_of(&out),
        "All done.\n",
        "the answer still reaches stdout"
    );
    assert_eq!(
        std::fs::read_to_string(env.workspace.join("AB.md")).expect("AB.md"),
        "written by the agent\n"
    );
    let plan = undo_plan(&env);
    assert!(plan.contains("AB.md"), "undo finds the turn: {plan}");
}

/// Whether a process whose command line holds `marker` is still running.
fn process_running(marker: &str) -> bool {
    std::fs::read_dir("/proc")
        .expect("proc")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .any(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
}

#[test]
fn sigterm_mid_command_kills_it_and_saves_the_session_and_checkpoint() {
    // `timeout 600 baton --exec …`, a cancelled CI job: SIGTERM while a command runs. On the
    // old code the process died at once (143) with no checkpoint: `baton undo` had nothing.
    let env = Env::new();
    let marker = format!("sleep 30.{}", std::process::id());
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "c1",
                    "shell",
                    serde_json::json!({
                        "command": format!("echo agent-change >> setup.cfg; {marker}")
                    })
                    .to_string(),
                ),
            )
            .default_summary("Changed setup.cfg."),
    );
    std::fs::write(env.workspace.join("setup.cfg"), "[metadata]\n").expect("write");
    let child = exec_command(&env, &engine, &["--approval", "full-auto", "change setup"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(std::fs::read_to_string(env.workspace.join("setup.cfg"))
        .unwrap_or_default()
        .contains("agent-change")
        && process_running(&marker))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().expect("wait");
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(143), "{stderr}");
    assert!(stderr.contains("SIGTERM: stopping the turn"), "{stderr}");
    // Killed: gone a moment after (the kernel ends its PID namespace after bwrap; a `sleep 30`
    // that survived would still be there long after this).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while process_running(&marker) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!process_running(&marker), "the command was killed");
    let saved = std::fs::read_to_string(session_file(&env.sessions)).expect("session");
    assert!(saved.contains("\"record\":\"turn_ended\""), "{saved}");
    let plan = undo_plan(&env);
    assert!(plan.contains("setup.cfg"), "undo finds the turn: {plan}");
}

#[test]
fn an_api_root_other_than_v1_is_accepted_when_it_serves_the_api() {
    // Gemini's OpenAI-compatible root is `…/v1beta/openai/`: the old `/v1` rule refused it
    // (exit 2, suggesting `…/v1beta/openai/v1`).
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new().otherwise("Hello from the root."));
    let root = format!("http://{}/v1beta/openai/", engine.addr());
    let out = env
        .session_baton()
        .args([
            "--exec",
            "--mode",
            "single",
            "--model",
            "L2",
            "--endpoint",
            &root,
        ])
        .arg("hi")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr_of(&out));
    assert_eq!(stdout_of(&out), "Hello from the root.\n");
    let chat = engine.chat_requests();
    assert_eq!(chat.len(), 1);
    assert_eq!(chat[0].path, "/v1beta/openai/chat/completions");

    // The URL of the chat endpoint itself is refused, and the fix is its root.
    let out = env
        .session_baton()
        .args(["--exec", "--mode", "single", "--model", "L2", "--endpoint"])
        .arg(format!("http://{}/v1/chat/completions", engine.addr()))
        .arg("hi")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains(&format!("e.g. http://{}/v1", engine.addr()))
            && !stderr_of(&out).contains("/chat/completions/v1"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn a_while_read_loop_keeps_its_input_and_each_run_gets_its_own_prompt() {
    // `while read f; do baton --exec "review $f"; done < list`: a prompt argument alone must
    // not read stdin. On the old code the first run swallowed the rest of the list: one
    // iteration, the other names appended as a <stdin> block.
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer("LGTM")
            .default_summary("Reviewed."),
    );
    std::fs::write(env.workspace.join("list"), "a.py\nb.py\nc.py\n").expect("write");
    let script = format!(
        "while read f; do \"$BATON\" --session-dir \"$SESSIONS\" --exec --endpoint {} \"review $f\" \
         || exit 9; done < list",
        engine.url()
    );
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env_clear()
        .env("HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("XDG_DATA_HOME", env.home.join(".local/share"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("BATON", assert_cmd::cargo::cargo_bin("baton"))
        .env("SESSIONS", &env.sessions)
        .current_dir(&env.workspace)
        .output()
        .expect("run the loop");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let prompts: Vec<String> = engine
        .requests_for_hop("answer")
        .iter()
        .filter_map(|r| r.last_user_text())
        .collect();
    assert_eq!(prompts, ["review a.py", "review b.py", "review c.py"]);

    // A pipe with input nobody asked for is left alone, with a note saying how to append it.
    let (reader, mut writer) = std::io::pipe().expect("pipe");
    std::io::Write::write_all(&mut writer, b"not asked for\n").expect("fill the pipe");
    drop(writer);
    let out = exec_command(&env, &engine, &["hello"])
        .stdin(reader)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let last = engine.requests_for_hop("answer").pop().expect("answer");
    assert_eq!(last.last_user_text().as_deref(), Some("hello"));
    assert!(
        stderr_of(&out).contains("stdin was not read"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn a_failed_run_leaves_no_stale_answer_in_the_output_file() {
    // A CI step reading `-o FILE` after a failed run got the answer of an earlier run.
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer(MockReply::error(401, "bad key", "invalid_api_key")),
    );
    let file = env.workspace.join("answer.txt");
    std::fs::write(&file, "OLD ANSWER\n").expect("write");
    let out = env
        .exec(&engine, "x", &["-o", file.to_str().expect("utf-8 path")])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1), "{}", stderr_of(&out));
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "");
}

#[test]
fn a_call_blocked_by_a_hook_is_not_blamed_on_the_approval_policy() {
    // `--approval full-auto` with a PreToolUse hook that blocks `rm -rf`: stderr told the user
    // to pass --approval full-auto, which they had.
    let env = Env::new();
    let hooks = env.home.join(".config/baton/hooks.json");
    std::fs::create_dir_all(hooks.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &hooks,
        serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "shell", "hooks": [{
            "type": "command",
            "command": "echo 'rm -rf is not allowed here' >&2; exit 2",
            "timeout": 10
        }]}]}})
        .to_string(),
    )
    .expect("write hooks");
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("c1", "shell", r#"{"command":"rm -rf build"}"#),
            )
            .answer("L2", "It was blocked.")
            .default_summary("Blocked."),
    );
    let out = env
        .exec(&engine, "clean up", &["--approval", "full-auto"])
        .output()
        .expect("run");
    let stderr = stderr_of(&out);
    assert!(stderr.contains("blocked by a hook"), "{stderr}");
    assert!(
        !stderr.contains("pass --approval"),
        "the advice is not an approval flag: {stderr}"
    );
}

#[test]
fn undo_list_names_each_turn_by_its_prompt() {
    // `baton undo --list` printed only "turn 1  can be undone".
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "c1",
                    "write_file",
                    r#"{"path":"notes.md","content":"agent notes\n"}"#,
                ),
            )
            .answer("L2", "Written.")
            .default_summary("Wrote notes.md."),
    );
    let out = env
        .exec(
            &engine,
            "write the release notes",
            &["--approval", "full-auto"],
        )
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let listed = env
        .session_baton()
        .args(["undo", "--list"])
        .output()
        .expect("undo --list");
    let text = stdout_of(&listed);
    assert!(
        text.contains("turn 1  can be undone  write the release notes"),
        "{text}"
    );
}

/// The endpoint timeouts are settings like any other: `idle_timeout` from config.toml and
/// `--request-timeout` as a flag reach the backend, and the error names the limit that ended
/// the hop (the defaults, 180 s and 600 s, would hold this test for minutes).
#[test]
fn endpoint_timeouts_are_settings_that_end_a_stalled_hop() {
    let env = Env::new();
    env.user_config("idle_timeout = 1\n");
    let silent = MockEngine::scripted_blocking(Script::new().route("L2").answer(
        "L2",
        MockReply::text("first words, then nothing").hang_after(3),
    ));
    let out = env.exec(&silent, "go", &[]).output().expect("run");
    let err = stderr_of(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("within 1 s") && err.contains("idle timeout"),
        "{err}"
    );

    let env = Env::new();
    let hung =
        MockEngine::scripted_blocking(Script::new().route("L2").answer("L2", MockReply::hang()));
    let out = env
        .exec(&hung, "go", &["--request-timeout", "1"])
        .output()
        .expect("run");
    let err = stderr_of(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("within 1 s") && err.contains("request timeout"),
        "{err}"
    );

    let out = env
        .baton()
        .args(["--idle-timeout", "0", "--exec", "x"])
        .output()
        .expect("run");
    assert!(
        stderr_of(&out)
            .contains("flag --idle-timeout: key `idle_timeout`: must be at least 1 second"),
        "{}",
        stderr_of(&out)
    );
}

/// A server that streams no usage (llama.cpp builds that ignore `stream_options`) gets
/// baton's own count, marked `estimated`, in the hop, the turn and the plain summary line.
#[test]
fn a_server_that_reports_no_usage_gets_an_estimate_marked_as_such() {
    let env = Env::new();
    let body = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"twelve chars\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer(MockReply::raw_sse(body)),
    );
    let out = env
        .exec(&engine, "hi", &["--json", "--defer-summary"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0), "{}", stderr_of(&out));
    let ev = events(&out);
    let answer = of_type(&ev, "hop_completed")
        .into_iter()
        .find(|e| e["hop"] == "answer")
        .expect("the answer hop")
        .clone();
    assert_eq!(answer["usage"]["estimated"], true, "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 3, "12 characters");
    let route = of_type(&ev, "hop_completed")
        .into_iter()
        .find(|e| e["hop"] == "route")
        .expect("the route hop")
        .clone();
    assert!(route["usage"].get("estimated").is_none(), "{route}");
    assert_eq!(
        of_type(&ev, "turn_completed")[0]["usage"]["estimated"],
        true
    );
    let plain = env
        .exec(&engine, "again", &["--defer-summary"])
        .output()
        .expect("run");
    assert!(
        stderr_of(&plain).contains("session: about "),
        "{}",
        stderr_of(&plain)
    );
}
