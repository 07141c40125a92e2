//! `baton serve` end to end: the real binary in front of the mock engine, driven over HTTP by
//! a plain client, by the OpenAI Python SDK, by baton's own `--mode proxy` and by codex.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, RecordedRequest, Script};

pub const MODEL: &str = "test-mol";

/// A running `baton serve`; killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT/v1`
    pub url: String,
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Server {
    pub fn start(env: &Env, engine: &MockEngine, extra: &[&str]) -> Server {
        Server::start_with_env(env, &engine.url(), extra, &[])
    }

    pub fn start_with_env(
        env: &Env,
        endpoint: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Server {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("baton"));
        cmd.env_clear()
            .env("HOME", &env.home)
            .env("XDG_CONFIG_HOME", env.home.join(".config"))
            .env("XDG_DATA_HOME", env.home.join(".local/share"))
            .current_dir(&env.workspace)
            .args(["serve", "--listen", "127.0.0.1:0", "--endpoint", endpoint])
            .args(["--served-model-name", MODEL])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn baton serve");
        let stderr = child.stderr.take().expect("stderr");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let url = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(url);
                }
                sink.lock().unwrap().push(line);
            }
        });
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!("baton serve did not start: {:?}", lines.lock().unwrap());
            }
        };
        Server {
            child,
            url,
            stderr: lines,
        }
    }

    /// What the server wrote to stderr so far, a line each.
    pub fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    baton::protocol::install_tls_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

pub async fn post(server: &Server, body: Value, conversation: Option<&str>) -> reqwest::Response {
    let mut req = client()
        .post(format!("{}/chat/completions", server.url))
        .json(&body);
    if let Some(id) = conversation {
        req = req.header("X-Conversation-Id", id);
    }
    req.send().await.unwrap()
}

pub fn chat(messages: Value) -> Value {
    json!({"model": MODEL, "messages": messages})
}

pub fn answers(engine: &MockEngine) -> Vec<RecordedRequest> {
    engine
        .chat_requests()
        .into_iter()
        .filter(|r| r.hop_or_answer() == "answer")
        .collect()
}

pub fn hops(engine: &MockEngine) -> Vec<String> {
    engine
        .chat_requests()
        .iter()
        .map(|r| format!("{}:{}", r.hop_or_answer(), r.model()))
        .collect()
}

/// Waits until the engine has seen `n` chat requests (summaries run in the background).
fn wait_for_requests(engine: &MockEngine, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while engine.chat_requests().len() < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Parses an SSE body into its `data:` payloads (`[DONE]` kept as a string).
fn sse_events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|frame| frame.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or(Value::String(d.to_string())))
        .collect()
}

/// A short L0 answer is its own summary in `baton serve` too (one MoL turn step): no summary
/// hop is sent for it, and the next expert reads it where the summary would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_l0_answer_is_its_own_summary_and_the_next_expert_reads_it() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L0", "L2"])
            .answer("L0", MockReply::text("Paris is the capital of France."))
            .answer("L2", MockReply::text("Here is the script."))
            .default_summary(MockReply::text("Wrote a script.")),
    );
    let server = Server::start(&env, &engine, &[]);
    let first = post(
        &server,
        chat(json!([{"role": "user", "content": "capital of France?"}])),
        None,
    )
    .await;
    assert_eq!(first.status(), 200);
    let conversation = first.headers()["x-conversation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let second = post(
        &server,
        chat(json!([
            {"role": "user", "content": "capital of France?"},
            {"role": "assistant", "content": "Paris is the capital of France."},
            {"role": "user", "content": "now write a script"}
        ])),
        Some(&conversation),
    )
    .await;
    assert_eq!(second.status(), 200);
    wait_for_requests(&engine, 5);
    assert_eq!(
        hops(&engine),
        [
            "route:L0",
            "answer:L0",
            "route:L0",
            "answer:L2",
            "summary:L2"
        ]
    );
    let l2 = &answers(&engine)[1];
    let expected = "(This request was handled by the L0 expert. Summary of its result: \
                    Paris is the capital of France.)";
    assert!(
        l2.transcript().iter().any(|(_, text)| text == expected),
        "{:?}",
        l2.transcript()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_route_answer_and_summarize_with_the_summary_off_the_critical_path() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L1", "L2"])
            .answer(
                "L1",
                MockReply::text("RAW-L1-ANSWER: booked for 7pm.").usage(50, 6),
            )
            .summary(
                "L1",
                MockReply::text("Booked a table at 7pm.").after(Duration::from_secs(5)),
            )
            .answer("L2", MockReply::text("Here is the script."))
            .summary("L2", MockReply::text("Wrote a script.")),
    );
    let server = Server::start(&env, &engine, &[]);

    let started = Instant::now();
    let first = post(
        &server,
        chat(json!([
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "book a table"}
        ])),
        None,
    )
    .await;
    let took = started.elapsed();
    assert_eq!(first.status(), 200);
    let conversation = first
        .headers()
        .get("x-conversation-id")
        .expect("the conversation id is echoed")
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = first.json().await.unwrap();
    assert!(
        took < Duration::from_secs(4),
        "the answer waited for the 5 s summary: {took:?}"
    );
    assert_eq!(body["model"], MODEL);
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "RAW-L1-ANSWER: booked for 7pm."
    );
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["usage"]["prompt_tokens"], 50);
    let meta = &body["metadata"];
    assert_eq!(meta["mol_selected_route"], "L1");
    assert_eq!(meta["mol_decision"], "pure_model_route");
    assert_eq!(meta["mol_conversation_id"], conversation.as_str());
    assert_eq!(meta["mol_summary_recorded"], true);
    assert_eq!(meta["mol_convo_completed"], 0);

    let second = post(
        &server,
        chat(json!([
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "book a table"},
            {"role": "assistant", "content": "RAW-L1-ANSWER: booked for 7pm."},
            {"role": "user", "content": "now write a script"}
        ])),
        Some(&conversation),
    )
    .await;
    assert_eq!(second.status(), 200);
    assert_eq!(second.headers()["x-conversation-id"], conversation.as_str());
    let body: Value = second.json().await.unwrap();
    assert_eq!(body["metadata"]["mol_selected_route"], "L2");
    assert_eq!(body["metadata"]["mol_convo_completed"], 1);

    wait_for_requests(&engine, 6);
    assert_eq!(
        hops(&engine),
        [
            "route:L0",
            "answer:L1",
            "summary:L1",
            "route:L0",
            "answer:L2",
            "summary:L2"
        ]
    );
    let l2 = &answers(&engine)[1];
    assert!(
        l2.mentions("Booked a table at 7pm."),
        "L2 sees L1's summary: {:?}",
        l2.transcript()
    );
    assert!(
        !l2.mentions("RAW-L1-ANSWER"),
        "L2 never sees L1's raw answer"
    );
    let system = l2.system_text().unwrap();
    assert!(system.starts_with("You are helpful."), "{system}");
    // The route hop classifies only the new user text.
    let route = &engine.chat_requests()[3];
    assert!(
        route.messages()[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("now write a script\n\n")
    );
    // The identity prompt joins the client's system message on answer hops.
    assert!(system.len() > "You are helpful.".len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_tool_loop_stays_on_its_expert_and_the_stream_has_the_openai_shape() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_7", "read_file", r#"{"path":"a.txt"}"#),
            )
            .answer("L2", MockReply::text("The file says hi.").usage(30, 5))
            .summary("L2", MockReply::text("Read a.txt.")),
    );
    let server = Server::start(&env, &engine, &[]);
    let tools = json!([{"type": "function", "function": {
        "name": "read_file", "description": "read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}
    }}]);
    let mut body = chat(json!([{"role": "user", "content": "what is in a.txt?"}]));
    body["tools"] = tools.clone();
    body["stream"] = json!(true);
    let response = post(&server, body, None).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    // Behind nginx a stream without this header arrives in one burst at the end.
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let conversation = response.headers()["x-conversation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let events = sse_events(&response.text().await.unwrap());
    assert_eq!(events.last().unwrap(), "[DONE]");
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(events[0]["metadata"]["mol_selected_route"], "L2");
    let calls: Vec<&Value> = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"].get("tool_calls"))
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0][0]["id"], "call_7");
    assert_eq!(calls[0][0]["function"]["name"], "read_file");
    let finish = events
        .iter()
        .find(|e| e["choices"][0]["finish_reason"].is_string())
        .unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(finish["metadata"]["mol_pending_tool_route"], "L2");
    let usage = &events[events.len() - 2];
    assert_eq!(usage["choices"], json!([]));
    assert!(usage["usage"].is_object());

    // The results go back (the SDK way: the whole history, no header needed).
    let mut body = chat(json!([
        {"role": "user", "content": "what is in a.txt?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_7", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\":\"a.txt\"}"}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": "hi"}
    ]));
    body["tools"] = tools;
    body["stream"] = json!(true);
    let response = post(&server, body, None).await;
    assert_eq!(
        response.headers()["x-conversation-id"],
        conversation.as_str(),
        "found from its history"
    );
    let text = response.text().await.unwrap();
    let events = sse_events(&text);
    assert_eq!(
        events[0]["metadata"]["mol_decision"],
        "sticky_tool_continuation"
    );
    let content: String = events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "The file says hi.");
    wait_for_requests(&engine, 4);
    assert_eq!(
        hops(&engine),
        ["route:L0", "answer:L2", "answer:L2", "summary:L2"]
    );
    let second = &answers(&engine)[1];
    let roles: Vec<String> = second.transcript().into_iter().map(|(r, _)| r).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_route_falls_back_and_a_failed_answer_leaves_no_trace() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["banana", "L1", "L1"])
            .answer("L2", MockReply::text("fallback answer"))
            .answer("L1", MockReply::error(400, "engine refused", "bad_request"))
            .answer("L1", MockReply::text("second try"))
            .default_summary(MockReply::text("s")),
    );
    let server = Server::start(&env, &engine, &["--max-queued", "4"]);
    let first = post(
        &server,
        chat(json!([{"role": "user", "content": "hello"}])),
        None,
    )
    .await;
    assert_eq!(first.status(), 200);
    let conversation = first.headers()["x-conversation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = first.json().await.unwrap();
    assert_eq!(body["metadata"]["mol_decision"], "fallback");
    assert_eq!(body["metadata"]["mol_selected_route"], "L2");
    assert!(
        body["metadata"]["mol_fallback_reason"]
            .as_str()
            .unwrap()
            .contains("banana")
    );

    let history = json!([
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "fallback answer"},
        {"role": "user", "content": "plan my week"}
    ]);
    let failed = post(&server, chat(history.clone()), Some(&conversation)).await;
    assert_eq!(failed.status(), 502);
    let error: Value = failed.json().await.unwrap();
    assert_eq!(error["error"]["code"], "upstream_error");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("answer hop")
    );

    let retried = post(&server, chat(history), Some(&conversation)).await;
    assert_eq!(retried.status(), 200);
    let body: Value = retried.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "second try");
    let last = answers(&engine).pop().unwrap();
    let users: Vec<String> = last
        .transcript()
        .into_iter()
        .filter(|(r, _)| r == "user")
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        users,
        ["hello", "plan my week"],
        "the failed turn was rolled back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_mid_stream_rolls_its_turn_back() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L2"])
            .answer(
                "L2",
                MockReply::text("never delivered").after(Duration::from_secs(3)),
            )
            .answer("L2", MockReply::text("delivered"))
            .default_summary(MockReply::text("s")),
    );
    let server = Server::start(&env, &engine, &[]);
    let mut body = chat(json!([{"role": "user", "content": "go"}]));
    body["stream"] = json!(true);
    let request = client()
        .post(format!("{}/chat/completions", server.url))
        .header("X-Conversation-Id", "conversation-0000001")
        .json(&body)
        .timeout(Duration::from_millis(600))
        .send()
        .await
        .unwrap();
    let cut = request.text().await;
    assert!(cut.is_err(), "the client gave up before the answer");
    tokio::time::sleep(Duration::from_secs(3)).await;
    body["stream"] = json!(false);
    let again = post(&server, body, Some("conversation-0000001")).await;
    assert_eq!(again.status(), 200);
    let answer: Value = again.json().await.unwrap();
    assert_eq!(
        answer["metadata"]["mol_convo_completed"], 0,
        "the abandoned turn left nothing"
    );
    let last = answers(&engine).pop().unwrap();
    assert_eq!(
        last.transcript()
            .iter()
            .filter(|(r, _)| r == "user")
            .count(),
        1
    );
    let metrics = client()
        .get(format!("{}/metrics", server.url.trim_end_matches("/v1")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("baton_serve_client_disconnects_total 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_use_the_openai_envelope() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer("ok"));
    let server = Server::start(&env, &engine, &["--max-body-bytes", "2000"]);
    let base = server.url.trim_end_matches("/v1").to_string();
    let c = client();
    let wrong_model = post(
        &server,
        json!({"model": "L2", "messages": [{"role": "user", "content": "x"}]}),
        None,
    )
    .await;
    assert_eq!(wrong_model.status(), 404);
    let e: Value = wrong_model.json().await.unwrap();
    assert_eq!(e["error"]["code"], "model_not_found");
    assert_eq!(e["error"]["type"], "not_found_error");

    let bad_json = c
        .post(format!("{}/chat/completions", server.url))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status(), 400);
    assert_eq!(
        bad_json.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_json"
    );

    let huge = "x".repeat(5000);
    let too_big = post(
        &server,
        chat(json!([{"role": "user", "content": huge}])),
        None,
    )
    .await;
    assert_eq!(too_big.status(), 413);
    assert_eq!(
        too_big.json::<Value>().await.unwrap()["error"]["code"],
        "request_too_large"
    );

    let orphan = post(
        &server,
        chat(json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "nope", "content": "r"}])),
        None,
    )
    .await;
    assert_eq!(orphan.status(), 400);
    assert_eq!(
        orphan.json::<Value>().await.unwrap()["error"]["code"],
        "orphan_tool_turn"
    );

    let bad_id = post(
        &server,
        chat(json!([{"role": "user", "content": "x"}])),
        Some("short"),
    )
    .await;
    assert_eq!(bad_id.status(), 400);
    assert_eq!(
        bad_id.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_conversation_id"
    );

    let nowhere = c.get(format!("{base}/v1/nothing")).send().await.unwrap();
    assert_eq!(nowhere.status(), 404);
    assert_eq!(
        nowhere.json::<Value>().await.unwrap()["error"]["code"],
        "endpoint_not_found"
    );

    let models: Value = c
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], MODEL);
    let health = c.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.json::<Value>().await.unwrap()["status"], "ok");
    // Nothing of the refused requests reached the engine.
    assert!(engine.chat_requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_required_when_configured_and_exposure_without_them_is_refused() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer("ok"));
    let server = Server::start_with_env(
        &env,
        &engine.url(),
        &[],
        &[("BATON_SERVE_API_KEYS", "k-one,k-two")],
    );
    let c = client();
    let models = format!("{}/models", server.url);
    let none = c.get(&models).send().await.unwrap();
    assert_eq!(none.status(), 401);
    assert_eq!(none.headers()["www-authenticate"], "Bearer");
    assert_eq!(
        none.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_api_key"
    );
    let wrong = c.get(&models).bearer_auth("k-three").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let right = c.get(&models).bearer_auth("k-two").send().await.unwrap();
    assert_eq!(right.status(), 200);
    // /health stays open for load balancers.
    let health = c
        .get(format!("{}/health", server.url.trim_end_matches("/v1")))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);

    let out = env
        .baton()
        .args([
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--endpoint",
            &engine.url(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("without API keys") && stderr.contains("--allow-unauthenticated"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_running_turns_and_summaries() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::text("slow answer").after(Duration::from_millis(800)),
            )
            .summary("L2", MockReply::text("s").after(Duration::from_millis(800))),
    );
    let server = Server::start(&env, &engine, &[]);
    let url = format!("{}/chat/completions", server.url);
    let turn = tokio::spawn(async move {
        client()
            .post(url)
            .json(&chat(json!([{"role": "user", "content": "x"}])))
            .send()
            .await
            .unwrap()
            .status()
    });
    // SIGTERM while the answer hop runs (its request has reached the engine).
    let deadline = Instant::now() + Duration::from_secs(20);
    while engine.chat_requests().len() < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let code = tokio::task::spawn_blocking(move || {
        let log = server.stderr.clone();
        let code = server.terminate();
        (code, log.lock().unwrap().join("\n"))
    })
    .await
    .unwrap();
    let (code, log) = code;
    assert!(log.contains("draining"), "{log}");
    assert_eq!(turn.await.unwrap(), 200, "the running turn finished");
    assert_eq!(code, Some(0));
    assert!(
        engine.chat_requests().iter().any(|r| r.is_summary()),
        "the summary ran before exit"
    );
}

/// Every conversation's turns route by a marker in the user text and answer with a marker of
/// their own, so a view holding another conversation's marker is crossed state.
fn load_engine(route: Duration, answer: Duration, summary: Duration) -> MockEngine {
    MockEngine::start_blocking(move |req: &RecordedRequest| {
        if req.is_route() {
            let text = req.messages()[0]["content"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let label = ["L0", "L1", "L2", "L3"]
                .into_iter()
                .find(|l| text.contains(&format!("use {l}")))
                .unwrap_or("L2");
            return MockReply::label(label).after(route);
        }
        let user = req.last_user_text().unwrap_or_default();
        if req.is_summary() {
            let own = req
                .transcript()
                .into_iter()
                .filter(|(r, _)| r == "user")
                .nth_back(1)
                .map(|(_, t)| t)
                .unwrap_or_default();
            return MockReply::text(format!("summary of [{own}]")).after(summary);
        }
        MockReply::text(format!("answer to [{user}]")).after(answer)
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// 64 conversations × 5 turns at the reference's hop latencies: no crossed state, and the
/// per-turn latency stays at route + answer (the summary is off the critical path).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_conversations_keep_their_state_apart() {
    let env = Env::new();
    let (route, answer, summary) = (
        Duration::from_millis(200),
        Duration::from_millis(1240),
        Duration::from_millis(320),
    );
    let engine = load_engine(route, answer, summary);
    let server = Arc::new(Server::start(&env, &engine, &[]));
    let mut tasks = Vec::new();
    for conv in 0..64 {
        let server = server.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("load-conversation-{conv:04}");
            let mut history: Vec<Value> = Vec::new();
            let mut latencies = Vec::new();
            for turn in 0..5 {
                let expert = ["L1", "L2", "L1", "L3", "L2"][turn];
                let text = format!("c{conv} t{turn} use {expert}");
                history.push(json!({"role": "user", "content": text}));
                let started = Instant::now();
                let response = post(&server, chat(Value::Array(history.clone())), Some(&id)).await;
                assert_eq!(response.status(), 200);
                let body: Value = response.json().await.unwrap();
                latencies.push(started.elapsed());
                let content = body["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string();
                assert_eq!(content, format!("answer to [{text}]"));
                assert_eq!(body["metadata"]["mol_selected_route"], expert);
                assert_eq!(body["metadata"]["mol_convo_completed"], turn);
                history.push(json!({"role": "assistant", "content": content}));
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    all.sort();
    let (p50, p99) = (percentile(&all, 0.5), percentile(&all, 0.99));
    println!(
        "serve load: 64 conversations x 5 turns, route 0.20 s + answer 1.24 s: p50 {:.3} s, p99 {:.3} s",
        p50.as_secs_f64(),
        p99.as_secs_f64()
    );
    // Timing is reported, not asserted: on a loaded test machine it says little; the
    // benchmark (tools/bench/serve_latency.rs) measures it on a release build.
    assert!(
        p50 >= route + answer,
        "p50 {p50:?} is below the engine's own latency"
    );
    // No crossed state: every answer view holds only its own conversation's markers.
    for req in answers(&engine) {
        let own = req.last_user_text().unwrap();
        let conv = own.split_whitespace().next().unwrap().to_string();
        for (_, text) in req.transcript().iter().skip(1) {
            for marker in text
                .split(['[', ' '])
                .filter(|w| w.starts_with('c') && w[1..].parse::<u32>().is_ok())
            {
                assert_eq!(marker, conv, "crossed state in {:?}", req.transcript());
            }
        }
    }
    // The last turn (L2) sees its own earlier L2 task verbatim and the others as summaries.
    let last = answers(&engine)
        .into_iter()
        .find(|r| r.last_user_text().unwrap() == "c7 t4 use L2")
        .unwrap();
    assert!(
        last.mentions("answer to [c7 t1 use L2]"),
        "own task verbatim"
    );
    assert!(
        !last.mentions("answer to [c7 t0 use L1]"),
        "another expert's raw answer"
    );
    assert!(
        last.mentions("summary of [c7 t0 use L1]"),
        "another expert's summary"
    );
    let metrics = client()
        .get(format!("{}/metrics", server.url.trim_end_matches("/v1")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("baton_serve_conversations 64"),
        "{metrics}"
    );
}

const SDK_SCRIPT: &str = r#"
import json, sys
import openai
from openai import OpenAI

url, key, model = sys.argv[1:4]
c = OpenAI(base_url=url, api_key=key, max_retries=0)
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "the weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
msgs = [{"role": "user", "content": "weather in Paris?"}]
raw = c.chat.completions.with_raw_response.create(model=model, messages=msgs, tools=tools)
conv = raw.headers.get("x-conversation-id")
r1 = raw.parse()
call = r1.choices[0].message.tool_calls[0]
msgs.append(r1.choices[0].message.model_dump(exclude_none=True))
msgs.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
r2 = c.chat.completions.create(model=model, messages=msgs, tools=tools,
                               extra_headers={"X-Conversation-Id": conv})
msgs.append({"role": "assistant", "content": r2.choices[0].message.content})
msgs.append({"role": "user", "content": "book a table"})
stream = c.chat.completions.create(model=model, messages=msgs, stream=True,
                                   stream_options={"include_usage": True},
                                   extra_headers={"X-Conversation-Id": conv})
text, usage = "", None
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        text += chunk.choices[0].delta.content
    if chunk.usage:
        usage = chunk.usage.total_tokens
errors = {}
try:
    c.chat.completions.create(model="L2", messages=msgs)
except openai.NotFoundError as e:
    errors["model"] = [e.status_code, e.code]
try:
    OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
except openai.AuthenticationError as e:
    errors["auth"] = [e.status_code, e.code]
try:
    c.chat.completions.create(model=model, messages=[{"role": "tool", "tool_call_id": "x", "content": "y"}])
except openai.BadRequestError as e:
    errors["orphan"] = [e.status_code, e.code]
print(json.dumps({
    "conversation": conv,
    "first_finish": r1.choices[0].finish_reason,
    "call": [call.id, call.function.name, call.function.arguments],
    "second": r2.choices[0].message.content,
    # `metadata` is a declared field of ChatCompletion in SDK 3.x, an extra one in 2.x.
    "second_decision": (getattr(r2, "metadata", None) or (r2.model_extra or {}).get("metadata") or {}).get("mol_decision"),
    "streamed": text,
    "usage": usage,
    "errors": errors,
    "models": [m.id for m in c.models.list().data],
}))
"#;

#[test]
fn the_openai_python_sdk_drives_chat_with_tools_streams_and_errors() {
    let Some(python) = python_sdk() else {
        return;
    };
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L2", "L1"])
            .answer(
                "L2",
                MockReply::tool_call("call_w", "get_weather", r#"{"city":"Paris"}"#),
            )
            .answer("L2", MockReply::text("It is sunny in Paris."))
            .answer("L1", MockReply::text("Booked for two.").usage(20, 4))
            .default_summary(MockReply::text("done")),
    );
    let (_server, r) = run_sdk_script(&python, &env, &engine, SDK_SCRIPT);
    assert_eq!(r["first_finish"], "tool_calls");
    assert_eq!(
        r["call"],
        json!(["call_w", "get_weather", r#"{"city":"Paris"}"#])
    );
    assert_eq!(r["second"], "It is sunny in Paris.");
    assert_eq!(r["second_decision"], "sticky_tool_continuation");
    assert_eq!(r["streamed"], "Booked for two.");
    assert_eq!(r["usage"], 24);
    assert_eq!(r["errors"]["model"], json!([404, "model_not_found"]));
    assert_eq!(r["errors"]["auth"], json!([401, "invalid_api_key"]));
    assert_eq!(r["errors"]["orphan"], json!([400, "orphan_tool_turn"]));
    assert_eq!(r["models"], json!([MODEL]));
    wait_for_requests(&engine, 7);
    assert_eq!(
        hops(&engine),
        [
            "route:L0",
            "answer:L2",
            "answer:L2",
            "summary:L2",
            "route:L0",
            "answer:L1",
            "summary:L1"
        ]
    );
    let l1 = answers(&engine).pop().unwrap();
    assert!(l1.mentions("done"), "L1 sees L2's summary");
    assert!(
        !l1.mentions("It is sunny in Paris."),
        "but not L2's raw answer"
    );
}

const FORWARD_SCRIPT: &str = r#"
import json, sys
import openai
from openai import OpenAI

url, key, model = sys.argv[1:4]
c = OpenAI(base_url=url, api_key=key, max_retries=0)
schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
r = c.chat.completions.create(
    model=model, messages=[{"role": "user", "content": "FORMAT-CHAT"}],
    response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
    presence_penalty=0.5, frequency_penalty=0.25, n=1, logprobs=False,
    extra_body={"top_k": 7, "min_p": 0.1, "repetition_penalty": 1.1})
rr = c.responses.create(model=model, input="FORMAT-RESPONSES",
                        text={"format": {"type": "json_schema", "name": "city", "schema": schema, "strict": True}})
errors = {}
for name, extra in [("n", {"n": 2}), ("logprobs", {"logprobs": True}), ("top_logprobs", {"top_logprobs": 3})]:
    try:
        c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], **extra)
    except openai.BadRequestError as e:
        errors[name] = [e.status_code, e.code, e.param]
summary, kinds = "", []
for ev in c.responses.create(model=model, input="SUMMARY-STREAM", reasoning={"summary": "auto"}, stream=True):
    kinds.append(ev.type)
    if ev.type == "response.reasoning_summary_text.delta":
        summary += ev.delta
whole = c.responses.create(model=model, input="SUMMARY-WHOLE", reasoning={"summary": "detailed"})
plain = c.responses.create(model=model, input="NO-SUMMARY")
print(json.dumps({"chat": r.choices[0].message.content, "responses": rr.output_text, "errors": errors,
                  "summary_streamed": summary, "kinds": kinds,
                  "summary_whole": [s.text for o in whole.output if o.type == "reasoning" for s in o.summary],
                  "summary_plain": [s.text for o in plain.output if o.type == "reasoning" for s in o.summary]}))
"#;

/// What a client sets that changes its answer reaches the answer hop as sent (Chat
/// `response_format`, penalties, vLLM extras; Responses `text.format` as `response_format`),
/// never the route or summary hop; what this server cannot give back (`n` > 1, log-probs) is
/// refused by name instead of dropped with a 200.
#[test]
fn structured_output_and_sampling_fields_reach_the_answer_hop() {
    let Some(python) = python_sdk() else {
        return;
    };
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer(MockReply::text(r#"{"city":"Paris"}"#).with_reasoning("CITY-IS-PARIS"))
            .default_summary(MockReply::text("done")),
    );
    let (_server, r) = run_sdk_script(&python, &env, &engine, FORWARD_SCRIPT);
    assert_eq!(r["chat"], r#"{"city":"Paris"}"#);
    // `reasoning.summary` (Codex asks for it): the reasoning is the summary too.
    assert_eq!(r["summary_streamed"], "CITY-IS-PARIS");
    let kinds: Vec<&str> = r["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for kind in [
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
    ] {
        assert!(kinds.contains(&kind), "{kind}: {kinds:?}");
    }
    assert_eq!(r["summary_whole"], json!(["CITY-IS-PARIS"]));
    assert_eq!(r["summary_plain"], json!([]));
    assert_eq!(r["responses"], r#"{"city":"Paris"}"#);
    assert_eq!(r["errors"]["n"], json!([400, "unsupported_parameter", "n"]));
    assert_eq!(
        r["errors"]["logprobs"],
        json!([400, "unsupported_parameter", "logprobs"])
    );
    assert_eq!(
        r["errors"]["top_logprobs"],
        json!([400, "unsupported_parameter", "top_logprobs"])
    );
    wait_for_requests(&engine, 6);
    let answers = answers(&engine);
    let chat = answers.iter().find(|a| a.mentions("FORMAT-CHAT")).unwrap();
    let b = &chat.body;
    assert_eq!(b["response_format"]["json_schema"]["name"], "city");
    assert_eq!(b["presence_penalty"], 0.5);
    assert_eq!(b["frequency_penalty"], 0.25);
    assert_eq!(b["top_k"], 7);
    assert_eq!(b["min_p"], 0.1);
    assert_eq!(b["repetition_penalty"], 1.1);
    assert!(b.get("n").is_none() && b.get("logprobs").is_none());
    let responses = answers
        .iter()
        .find(|a| a.mentions("FORMAT-RESPONSES"))
        .unwrap();
    assert_eq!(
        responses.body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "city", "strict": true,
            "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}})
    );
    for other in engine
        .chat_requests()
        .iter()
        .filter(|r| r.hop_or_answer() != "answer")
    {
        assert!(
            other.body.get("response_format").is_none()
                && other.body.get("presence_penalty").is_none(),
            "{} hop: {}",
            other.hop_or_answer(),
            other.body
        );
    }
}

/// baton's own `--mode proxy` against `baton serve`: the engine behind the server sees the
/// same route, answer and summary requests, byte for byte, as behind `--mode mol`.
#[test]
fn baton_in_proxy_mode_through_serve_puts_the_mol_wire_on_the_engine() {
    use crate::wire_snapshots::{PROMPT, request_view, run_turn_via};
    let direct =
        run_turn_via(|env, engine| env.exec(engine, PROMPT, &["--json"]).output().unwrap());
    let proxied = run_turn_via(|env, engine| {
        let server = Server::start(env, engine, &[]);
        let out = env
            .session_baton()
            .args([
                "--exec",
                "--json",
                "--endpoint",
                &server.url,
                "--mode",
                "proxy",
                "--model",
                MODEL,
            ])
            .arg(PROMPT)
            .output()
            .unwrap();
        wait_for_requests(engine, 4);
        drop(server);
        out
    });
    let view = |turn: &crate::wire_snapshots::Turn| -> Vec<Value> {
        turn.engine
            .chat_requests()
            .iter()
            .map(|r| turn.normalize(request_view(r)))
            .collect()
    };
    let (direct_wire, proxied_wire) = (view(&direct), view(&proxied));
    assert_eq!(direct_wire.len(), 4, "route, answer, answer, summary");
    assert_eq!(proxied_wire.len(), direct_wire.len());
    for (d, p) in direct_wire.iter().zip(&proxied_wire) {
        assert_eq!(p, d, "the proxied request differs from the direct one");
    }
}

const RESPONSES_SCRIPT: &str = r#"
import json, sys
import openai
from openai import OpenAI

url, key, model = sys.argv[1:4]
c = OpenAI(base_url=url, api_key=key, max_retries=0)
tools = [{"type": "function", "name": "get_weather", "description": "the weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
r1 = c.responses.create(model=model, input="weather in Paris?", tools=tools, instructions="be brief")
call = [o for o in r1.output if o.type == "function_call"][0]
r2 = c.responses.create(model=model, previous_response_id=r1.id, tools=tools, instructions="be brief",
                        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
# Two forks of the same response: neither sees the other.
fork_a = c.responses.create(model=model, previous_response_id=r2.id, input="fork A: plan a trip")
fork_b = c.responses.create(model=model, previous_response_id=r2.id, input="fork B: write a poem")
events = []
text = ""
for ev in c.responses.create(model=model, previous_response_id=fork_a.id, input="stream it", stream=True):
    events.append(ev.type)
    if ev.type == "response.output_text.delta":
        text += ev.delta
    if ev.type == "response.completed":
        completed = ev.response
errors = {}
try:
    c.responses.create(model=model, previous_response_id="resp_missing", input="x")
except openai.NotFoundError as e:
    errors["missing"] = [e.status_code, e.code]
try:
    c.responses.create(model=model, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}])
except openai.BadRequestError as e:
    errors["image"] = [e.status_code, e.code]
print(json.dumps({
    "r1_status": r1.status, "call": [call.call_id, call.name, call.arguments],
    "r2_text": r2.output_text, "r2_previous": r2.previous_response_id,
    "fork_a": fork_a.output_text, "fork_b": fork_b.output_text,
    "events": events, "streamed": text, "completed_text": completed.output_text,
    "completed_id": completed.id, "errors": errors,
}))
"#;

#[test]
fn the_openai_python_sdk_chains_forks_and_streams_responses() {
    let Some(python) = python_sdk() else {
        return;
    };
    let env = Env::new();
    let engine = MockEngine::start_blocking(|req: &RecordedRequest| {
        if req.is_route() {
            let text = req.messages()[0]["content"]
                .as_str()
                .unwrap_or("")
                .to_string();
            return MockReply::label(if text.starts_with("fork B") {
                "L3"
            } else {
                "L2"
            });
        }
        if req.is_summary() {
            return MockReply::text("summary");
        }
        let user = req.last_user_text().unwrap_or_default();
        let tool_result = req.messages().last().and_then(|m| m["role"].as_str()) == Some("tool");
        if user == "weather in Paris?" && !tool_result {
            return MockReply::tool_call("call_p", "get_weather", r#"{"city":"Paris"}"#);
        }
        // Each answer says which fork texts its view holds.
        let seen: Vec<&str> = ["fork A", "fork B"]
            .into_iter()
            .filter(|f| req.mentions(f))
            .collect();
        MockReply::text(format!("answer to '{user}' seeing {seen:?}"))
    });
    let server = Server::start(&env, &engine, &["--follow-ups", "route"]);
    let r = run_script(
        &python,
        &env,
        RESPONSES_SCRIPT,
        &[&server.url, "unused", MODEL],
    );
    assert_eq!(r["r1_status"], "completed");
    assert_eq!(
        r["call"],
        json!(["call_p", "get_weather", r#"{"city":"Paris"}"#])
    );
    assert_eq!(r["r2_text"], "answer to 'weather in Paris?' seeing []");
    assert_eq!(
        r["fork_a"],
        "answer to 'fork A: plan a trip' seeing [\"fork A\"]"
    );
    assert_eq!(
        r["fork_b"],
        "answer to 'fork B: write a poem' seeing [\"fork B\"]"
    );
    assert_eq!(r["streamed"], "answer to 'stream it' seeing [\"fork A\"]");
    assert_eq!(r["completed_text"], r["streamed"]);
    let events: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(events.first(), Some(&"response.created"));
    assert_eq!(events[1], "response.in_progress");
    assert!(events.contains(&"response.output_text.delta"));
    assert_eq!(events.last(), Some(&"response.completed"));
    assert_eq!(
        r["errors"]["missing"],
        json!([404, "previous_response_not_found"])
    );
    assert_eq!(r["errors"]["image"], json!([400, "unsupported_content"]));
    // The tool result continued on L2 without a route hop; each fork was routed.
    let routes = engine
        .chat_requests()
        .iter()
        .filter(|r| r.is_route())
        .count();
    assert_eq!(
        routes, 4,
        "r1, fork A, fork B, the stream; not the tool result"
    );
}

/// The arguments of a command call for whichever shell tool codex offers.
fn codex_shell_call(req: &RecordedRequest, command: &str) -> Option<(String, String)> {
    let names = req.tool_names();
    let pick = |n: &str| names.iter().any(|t| t == n);
    if pick("shell") {
        let args = json!({"command": ["bash", "-lc", command]});
        Some(("shell".into(), args.to_string()))
    } else if pick("shell_command") {
        Some((
            "shell_command".into(),
            json!({"command": command}).to_string(),
        ))
    } else if pick("exec_command") {
        Some(("exec_command".into(), json!({"cmd": command}).to_string()))
    } else {
        None
    }
}

/// codex (`@openai/codex`, Responses API) with `baton serve` as a custom model provider: one
/// scripted turn in which the model runs a command through codex's shell tool.
#[test]
fn codex_runs_a_tool_call_turn_through_serve() {
    let Some(codex) = crate::support::external::require(
        "codex (@openai/codex)",
        crate::support::external::node_bin("codex"),
    ) else {
        return;
    };
    let env = Env::new();
    let offered = Arc::new(Mutex::new(Vec::new()));
    let seen = offered.clone();
    let engine = MockEngine::start_blocking(move |req: &RecordedRequest| {
        if req.is_route() {
            return MockReply::label("L2");
        }
        if req.is_summary() {
            return MockReply::text("Wrote out.txt with codex.");
        }
        seen.lock().unwrap().push(req.tool_names());
        let after_tool = req.messages().last().and_then(|m| m["role"].as_str()) == Some("tool");
        if after_tool {
            return MockReply::text("CODEX-DONE: the file is written.");
        }
        match codex_shell_call(req, "echo CODEX-OK > out.txt") {
            Some((name, args)) => MockReply::tool_call("call_codex_1", &name, &args),
            None => MockReply::text("no shell tool offered"),
        }
    });
    let server = Server::start(&env, &engine, &[]);
    let codex_home = env.home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"{MODEL}\"\nmodel_provider = \"baton\"\n\n[model_providers.baton]\n\
             name = \"baton serve\"\nbase_url = \"{}\"\nwire_api = \"responses\"\n\
             env_key = \"BATON_SERVE_KEY\"\n",
            server.url
        ),
    )
    .unwrap();
    let git = Command::new("git")
        .arg("init")
        .arg("-q")
        .current_dir(&env.workspace)
        .status();
    assert!(git.is_ok_and(|s| s.success()), "git init");
    let out = Command::new(&codex)
        .args([
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
        ])
        .arg("write CODEX-OK into out.txt")
        .current_dir(&env.workspace)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &env.home)
        .env("CODEX_HOME", &codex_home)
        .env("BATON_SERVE_KEY", "unused")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let offered = offered.lock().unwrap().clone();
    assert!(
        out.status.success(),
        "codex failed\nstdout: {stdout}\nstderr: {stderr}\ntools offered: {offered:?}"
    );
    let written = std::fs::read_to_string(env.workspace.join("out.txt")).unwrap_or_default();
    assert_eq!(
        written.trim(),
        "CODEX-OK",
        "the tool call ran\nstdout: {stdout}\nstderr: {stderr}\ntools: {offered:?}"
    );
    assert!(
        stdout.contains("CODEX-DONE") || stderr.contains("CODEX-DONE"),
        "the final answer reached codex\nstdout: {stdout}\nstderr: {stderr}"
    );
    let answers = answers(&engine);
    assert_eq!(
        answers.len(),
        2,
        "one answer with the call, one after the result"
    );
    assert!(answers.iter().all(|a| a.model() == "L2"));
}

/// `baton serve --local ROOT`: the same loop over the in-process engine (the tiny fixture on
/// the CPU; its random weights say nothing sensible, but every hop runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_runs_the_loop_over_the_local_engine() {
    let env = Env::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3");
    let server = Server::start_with_env(
        &env,
        "http://127.0.0.1:9/v1",
        &["--local", root.to_str().unwrap(), "--device", "cpu"],
        &[],
    );
    let mut body = chat(json!([{"role": "user", "content": "hello"}]));
    body["max_tokens"] = json!(4);
    let response = post(&server, body, None).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["metadata"]["mol_decision"], "pure_model_route",
        "the engine's constrained route gave a label"
    );
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() <= 4);
    assert_eq!(body["choices"][0]["finish_reason"], "length");
}

/// A hung upstream ends the turn at the idle timeout (504), releases the conversation, and a
/// retry of the same request gets through; a broken upstream stream is a 502 that names no
/// upstream address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_and_broken_upstreams_end_the_turn_cleanly() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer("L2", MockReply::hang())
            .answer("L2", MockReply::malformed_sse())
            .answer("L2", MockReply::text("finally"))
            .default_summary(MockReply::text("s")),
    );
    let server = Server::start(&env, &engine, &["--idle-timeout", "1"]);
    let request = chat(json!([{"role": "user", "content": "go"}]));
    let id = "retried-conversation-01";
    let hung = post(&server, request.clone(), Some(id)).await;
    assert_eq!(hung.status(), 504);
    assert_eq!(
        hung.json::<Value>().await.unwrap()["error"]["code"],
        "upstream_idle_timeout"
    );
    let broken = post(&server, request.clone(), Some(id)).await;
    assert_eq!(broken.status(), 502);
    let message = broken.json::<Value>().await.unwrap()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        !message.contains("127.0.0.1"),
        "the upstream address stays in the log: {message}"
    );
    let ok = post(&server, request, Some(id)).await;
    assert_eq!(ok.status(), 200);
    let body: Value = ok.json().await.unwrap();
    assert_eq!(
        body["metadata"]["mol_convo_completed"], 0,
        "neither failed turn left a task"
    );
}

/// Two requests of one conversation at once (a client's retry) serialize on its lock; both
/// are answered and the conversation stays consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_of_one_conversation_serialize() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .default_answer(MockReply::text("answer").after(Duration::from_millis(500)))
            .default_summary(MockReply::text("s")),
    );
    let server = Arc::new(Server::start(&env, &engine, &[]));
    let request = chat(json!([{"role": "user", "content": "same"}]));
    let started = Instant::now();
    let (a, b) = tokio::join!(
        post(&server, request.clone(), Some("serialized-conversation")),
        post(&server, request.clone(), Some("serialized-conversation"))
    );
    assert_eq!(
        (a.status(), b.status()),
        (reqwest::StatusCode::OK, reqwest::StatusCode::OK)
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "the second waited for the first"
    );
    let starts: Vec<_> = answers(&engine);
    assert_eq!(starts.len(), 2);
}

/// Two turns of one conversation; the second streamed when `stream`. Returns its body.
async fn two_turns(server: &Server, conversation: &str, stream: bool) -> String {
    let first = post(
        server,
        chat(json!([{"role": "user", "content": "one"}])),
        Some(conversation),
    )
    .await;
    assert_eq!(first.status(), 200);
    let first: Value = first.json().await.unwrap();
    let said = first["choices"][0]["message"]["content"].clone();
    let mut body = chat(json!([
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "two"}
    ]));
    body["stream"] = json!(stream);
    let second = post(server, body, Some(conversation)).await;
    assert_eq!(second.status(), 200);
    second.text().await.unwrap()
}

pub(crate) async fn metrics_page(server: &Server) -> String {
    client()
        .get(format!("{}/metrics", server.url.trim_end_matches("/v1")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the metric line `name` (labels included in `name`, if any).
pub(crate) fn metric(page: &str, name: &str) -> u64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {page}"))
}

/// The OpenAI Python SDK in the test venv (a counted skip, or a failure under CI, without it).
pub(crate) fn python_sdk() -> Option<PathBuf> {
    crate::support::external::require(
        "the openai Python SDK",
        crate::support::external::python_with(&["openai"]),
    )
}

/// Runs a Python `script` against `baton serve` in front of `engine` (the API key `sdk-key`),
/// with the server URL, the key and the model name as its arguments. The server is returned
/// running: it still makes the summaries of the last turns.
fn run_sdk_script(python: &Path, env: &Env, engine: &MockEngine, script: &str) -> (Server, Value) {
    let server = Server::start_with_env(
        env,
        &engine.url(),
        &[],
        &[("BATON_SERVE_API_KEYS", "sdk-key")],
    );
    let out = run_script(python, env, script, &[&server.url, "sdk-key", MODEL]);
    (server, out)
}

/// Runs a Python `script` with `args`; it must succeed and print one JSON value.
pub(crate) fn run_script(python: &Path, env: &Env, script: &str, args: &[&str]) -> Value {
    let path = env.workspace.join("sdk_script.py");
    std::fs::write(&path, script).unwrap();
    let out = Command::new(python)
        .arg(&path)
        .args(args)
        .env("HOME", &env.home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speculative_hit_sends_the_bytes_the_unspeculated_turn_sends() {
    let script = || {
        Script::new()
            .routes(["L2", "L2"])
            .answer("L2", "FIRST")
            .answer("L2", "SECOND-ANSWER")
            .default_summary(MockReply::text("did one"))
    };
    let env = Env::new();
    let (off_engine, on_engine, capped_engine) = (
        MockEngine::scripted_blocking(script()),
        MockEngine::scripted_blocking(script()),
        MockEngine::scripted_blocking(script()),
    );
    let off = Server::start(&env, &off_engine, &[]);
    let on = Server::start(&env, &on_engine, &["--speculate", "sticky"]);
    // At a cap of one upstream request there is no slot to spare beside the route hop's.
    let capped = Server::start(
        &env,
        &capped_engine,
        &["--speculate", "sticky", "--upstream-concurrency", "1"],
    );
    for server in [&off, &on, &capped] {
        let body = two_turns(server, "conversation-spec-hit", false).await;
        assert!(body.contains("SECOND-ANSWER"), "{body}");
    }
    let off_answers = answers(&off_engine);
    for engine in [&on_engine, &capped_engine] {
        let got = answers(engine);
        assert_eq!(
            got.len(),
            2,
            "one answer request a turn: {:?}",
            hops(engine)
        );
        assert_eq!(
            got[1].raw_body, off_answers[1].raw_body,
            "the speculative request is the one the unspeculated turn sends"
        );
    }
    let page = metrics_page(&on).await;
    assert_eq!(
        metric(&page, "baton_serve_speculations_total{outcome=\"hit\"}"),
        1
    );
    assert_eq!(
        metric(&page, "baton_serve_speculations_total{outcome=\"miss\"}"),
        0
    );
    let page = metrics_page(&capped).await;
    assert_eq!(
        metric(&page, "baton_serve_speculations_total{outcome=\"hit\"}"),
        0
    );
    assert_eq!(
        metric(&page, "baton_serve_speculations_total{outcome=\"no_slot\"}"),
        1
    );
    let page = metrics_page(&off).await;
    assert_eq!(
        metric(&page, "baton_serve_speculations_total{outcome=\"hit\"}"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speculative_miss_is_cancelled_upstream_and_never_reaches_the_stream() {
    let script = || {
        Script::new()
            .route("L2")
            .route_reply(MockReply::label("L1").after(Duration::from_millis(300)))
            .answer("L2", "FIRST")
            .answer(
                "L2",
                MockReply::text("WRONG-EXPERT ".repeat(300))
                    .chunk_chars(1)
                    .chunk_delay(Duration::from_millis(10)),
            )
            .answer("L1", "RIGHT-EXPERT")
            .default_route("L1")
            .default_answer(MockReply::text("later"))
            .default_summary(MockReply::text("did one"))
    };
    let env = Env::new();
    let (off_engine, on_engine) = (
        MockEngine::scripted_blocking(script()),
        MockEngine::scripted_blocking(script()),
    );
    let off = Server::start(&env, &off_engine, &[]);
    let on = Server::start(&env, &on_engine, &["--speculate", "sticky"]);
    for server in [&off, &on] {
        let body = two_turns(server, "conversation-spec-miss", true).await;
        let text: String = sse_events(&body)
            .iter()
            .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
            .collect();
        assert_eq!(
            text, "RIGHT-EXPERT",
            "nothing of the cancelled answer: {body}"
        );
        assert_eq!(sse_events(&body).last().unwrap(), "[DONE]");
    }
    assert!(
        on_engine
            .wait_for_abandoned_streams(1, Duration::from_secs(10))
            .await,
        "the engine saw the speculative request dropped"
    );
    let l1 = |engine: &MockEngine| {
        answers(engine)
            .into_iter()
            .find(|r| r.model() == "L1")
            .expect("L1 answered")
    };
    assert_eq!(
        l1(&on_engine).raw_body,
        l1(&off_engine).raw_body,
        "after a miss the chosen expert gets the unspeculated request"
    );
    assert!(l1(&on_engine).mentions("did one"), "L1 sees L2's summary");
    let page = metrics_page(&on).await;
    assert_eq!(
        metric(&page, "baton_serve_speculations_total{outcome=\"miss\"}"),
        1
    );
    assert_eq!(
        metric(&page, "baton_serve_speculations_total{outcome=\"hit\"}"),
        0
    );
    assert!(
        metric(
            &page,
            "baton_serve_speculation_wasted_tokens_total{kind=\"prompt\"}"
        ) > 0
    );

    // The conversation goes on: the next turn, on L1, bets on L1.
    let third = post(
        &on,
        chat(json!([
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": "FIRST"},
            {"role": "user", "content": "two"},
            {"role": "assistant", "content": "RIGHT-EXPERT"},
            {"role": "user", "content": "three"}
        ])),
        Some("conversation-spec-miss"),
    )
    .await;
    assert_eq!(third.status(), 200);
    let page = metrics_page(&on).await;
    let speculated = metric(&page, "baton_serve_speculations_total{outcome=\"hit\"}")
        + metric(&page, "baton_serve_speculations_total{outcome=\"miss\"}");
    assert_eq!(speculated, 2, "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_during_a_speculated_turn_drops_it_and_leaves_no_trace() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .route_reply(MockReply::label("L2").after(Duration::from_secs(2)))
            .answer("L2", "FIRST")
            .answer(
                "L2",
                MockReply::text("SPECULATED ".repeat(300))
                    .chunk_chars(1)
                    .chunk_delay(Duration::from_millis(10)),
            )
            .default_route("L2")
            .default_answer(MockReply::text("AGAIN"))
            .default_summary(MockReply::text("did one")),
    );
    let server = Server::start(&env, &engine, &["--speculate", "sticky"]);
    let conversation = "conversation-spec-leaves";
    let first = post(
        &server,
        chat(json!([{"role": "user", "content": "one"}])),
        Some(conversation),
    )
    .await;
    assert_eq!(first.status(), 200);
    let _ = first.text().await;
    let second = chat(json!([
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "FIRST"},
        {"role": "user", "content": "two"}
    ]));
    let gone = client()
        .post(format!("{}/chat/completions", server.url))
        .header("X-Conversation-Id", conversation)
        .json(&second)
        .timeout(Duration::from_millis(500))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up while the route ran");
    assert!(
        engine
            .wait_for_abandoned_streams(1, Duration::from_secs(10))
            .await,
        "the speculative request was dropped with its turn"
    );
    let again = post(&server, second, Some(conversation)).await;
    assert_eq!(again.status(), 200);
    let body: Value = again.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "AGAIN");
    assert_eq!(
        body["metadata"]["mol_convo_completed"], 1,
        "the abandoned turn left nothing"
    );
}

/// The `host:port` of a server.
fn server_addr(server: &Server) -> String {
    server
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string()
}

/// Writes `request` on a fresh connection, then reads until the server closes it (or `wait`
/// passes): what came back, and whether the server closed the connection.
async fn raw_exchange(addr: &str, request: &[u8], wait: Duration) -> (String, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    let closed = loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
            Err(_) => break false,
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), closed)
}

/// Slowloris: a client that never finishes its headers is disconnected, one that trickles its
/// body gets 408, at the read timeout — neither holds a connection for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_request_is_cut_off() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer("ok"));
    let server = Server::start(&env, &engine, &["--read-timeout", "1"]);
    let addr = server_addr(&server);
    let started = Instant::now();
    let (_, closed) = raw_exchange(
        &addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nX-Half: ",
        Duration::from_secs(10),
    )
    .await;
    assert!(closed, "a half-sent head is dropped");
    assert!(started.elapsed() < Duration::from_secs(8));
    let started = Instant::now();
    let (reply, closed) = raw_exchange(
        &addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{",
        Duration::from_secs(10),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 408"), "{reply}");
    assert!(reply.contains("request_timeout"), "{reply}");
    assert!(closed, "the connection is closed after a 408");
    assert!(started.elapsed() < Duration::from_secs(8));
    // A well-behaved client is still served.
    let ok = post(
        &server,
        chat(json!([{"role": "user", "content": "hi"}])),
        None,
    )
    .await;
    assert_eq!(ok.status(), 200);
}

/// A client without a key is answered 401 before its body is read (it cannot make the server
/// buffer megabytes), a declared body over the limit is 413 at once, and a conversation id
/// sent twice is refused rather than one of them picked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_and_the_size_are_checked_before_the_body_is_read() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer("ok"));
    let server = Server::start_with_env(
        &env,
        &engine.url(),
        &["--max-body-bytes", "1000"],
        &[("BATON_SERVE_API_KEYS", "k-one")],
    );
    let addr = server_addr(&server);
    let (reply, _) = raw_exchange(
        &addr,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4000000\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 401"), "{reply:?}");
    let (reply, _) = raw_exchange(
        &addr,
        b"POST /v1/responses HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer k-one\r\nContent-Length: 4000000\r\n\r\n",
        Duration::from_secs(5),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply:?}");
    assert!(reply.contains("request_too_large"), "{reply}");
    // Chunked, no length declared: refused once the limit is passed.
    let mut chunked = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer k-one\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"200\r\n");
        chunked.extend_from_slice(&[b' '; 0x200]);
        chunked.extend_from_slice(b"\r\n");
    }
    let (reply, _) = raw_exchange(&addr, &chunked, Duration::from_secs(5)).await;
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply:?}");
    let twice = client()
        .post(format!("{}/chat/completions", server.url))
        .bearer_auth("k-one")
        .header("X-Conversation-Id", "first-conversation-id")
        .header("X-Conversation-Id", "second-conversation-id")
        .json(&chat(json!([{"role": "user", "content": "hi"}])))
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), 400);
    assert_eq!(
        twice.json::<Value>().await.unwrap()["error"]["code"],
        "invalid_conversation_id"
    );
    assert!(
        engine.chat_requests().is_empty(),
        "nothing reached the engine"
    );
    let metrics = client()
        .get(format!("http://{addr}/metrics"))
        .bearer_auth("k-one")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains(r#"baton_serve_requests_total{path="/v1/chat/completions",status="401"} 1"#),
        "{metrics}"
    );
    assert!(!metrics.contains("k-one"), "no key in the metrics");

    let out = env
        .baton()
        .env("BATON_SERVE_API_KEYS", " , ")
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--endpoint",
            &engine.url(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("BATON_SERVE_API_KEYS is set but holds no key"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGTERM while a client holds a half-sent request open: the server waits for it only the
/// drain timeout, then exits 0 saying how many connections it closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_does_not_wait_forever_for_a_half_sent_request() {
    use tokio::io::AsyncWriteExt;
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer("ok"));
    // The read timeout (30 s by default) is far off: only the drain timeout ends this.
    let server = Server::start(&env, &engine, &["--drain-timeout", "1"]);
    let mut half = tokio::net::TcpStream::connect(server_addr(&server))
        .await
        .unwrap();
    half.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n{",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (code, log) = tokio::task::spawn_blocking(move || {
        let log = server.stderr.clone();
        let code = server.terminate();
        (code, log.lock().unwrap().join("\n"))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("closed 1 connection(s)"), "{log}");
    drop(half);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_stream_tells_reverse_proxies_not_to_buffer_it() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L0")
            .answer("L0", MockReply::text("Hello."))
            .summary("L0", MockReply::text("Said hello.")),
    );
    let server = Server::start(&env, &engine, &[]);
    let response = client()
        .post(format!("{}/responses", server.url))
        .json(&json!({"model": MODEL, "input": "hi", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    let body = response.text().await.unwrap();
    assert!(body.contains("response.completed"), "{body}");
}

/// Chat Completions and Responses read a message of several text parts the same way: the two
/// APIs joined them with "\n" and with "" (the same conversation reached the model as
/// "PARTONE\nPARTTWO" through one and "PARTONEPARTTWO" through the other).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_apis_join_text_parts_alike() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L0", "L0"])
            .answer("L0", MockReply::text("One."))
            .answer("L0", MockReply::text("Two."))
            .summary("L0", MockReply::text("Answered.")),
    );
    let server = Server::start(&env, &engine, &[]);
    let parts = json!([
        {"type": "text", "text": "PARTONE"},
        {"type": "text", "text": "PARTTWO"}
    ]);
    let chat = post(
        &server,
        chat(json!([{"role": "user", "content": parts}])),
        None,
    )
    .await;
    assert_eq!(chat.status(), 200);
    let input_parts = json!([
        {"type": "input_text", "text": "PARTONE"},
        {"type": "input_text", "text": "PARTTWO"}
    ]);
    let responses = client()
        .post(format!("{}/responses", server.url))
        .json(&json!({"model": MODEL, "input": [{"role": "user", "content": input_parts}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(responses.status(), 200);
    let answers: Vec<_> = engine
        .requests()
        .into_iter()
        .filter(|r| !r.is_route() && r.mentions("PARTONE"))
        .collect();
    assert!(answers.len() >= 2, "{} answer hops", answers.len());
    for r in &answers {
        assert!(r.mentions("PARTONE\nPARTTWO"), "{:?}", r.messages());
    }
}

/// An engine that streams no usage gets baton's estimate, and the client is told it is one:
/// `"estimated": true` in the usage of both APIs; an exact count keeps OpenAI's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_the_engine_never_sent_is_marked_estimated_on_both_apis() {
    let env = Env::new();
    let no_usage = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"twelve chars\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n"
    );
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .routes(["L0", "L0", "L0"])
            .answer("L0", MockReply::raw_sse(no_usage))
            .answer("L0", MockReply::raw_sse(no_usage))
            .answer("L0", MockReply::text("Exact.").usage(30, 2))
            .summary("L0", MockReply::text("Answered.")),
    );
    let server = Server::start(&env, &engine, &[]);
    let chat_body: Value = post(
        &server,
        chat(json!([{"role": "user", "content": "hi"}])),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    let usage = &chat_body["usage"];
    assert_eq!(usage["estimated"], true, "{usage}");
    assert!(usage["prompt_tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(
        usage["completion_tokens"], 3,
        "twelve chars ≈ 3 tokens: {usage}"
    );

    let responses: Value = client()
        .post(format!("{}/responses", server.url))
        .json(&json!({"model": MODEL, "input": "hello"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let usage = &responses["usage"];
    assert_eq!(usage["estimated"], true, "{usage}");
    assert!(usage["input_tokens"].as_u64().unwrap() > 0, "{usage}");

    let exact: Value = post(
        &server,
        chat(json!([{"role": "user", "content": "once more"}])),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(exact["usage"]["prompt_tokens"], 30);
    assert!(
        exact["usage"].get("estimated").is_none(),
        "{}",
        exact["usage"]
    );
}

/// The client's reasoning effort reaches the engine as sent (the report: `low` became `high`),
/// with thinking switched as the adapters were trained: on for `low`, off for `minimal`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_reasoning_effort_is_forwarded_with_thinking_switched() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L0")
            .default_answer(MockReply::text("Fine."))
            .default_summary("Answered."),
    );
    let server = Server::start(&env, &engine, &[]);
    for (effort, sent, thinking) in [("low", "low", true), ("minimal", "none", false)] {
        let mut body = chat(json!([{"role": "user", "content": format!("effort {effort}")}]));
        body["reasoning_effort"] = json!(effort);
        assert_eq!(post(&server, body, None).await.status(), 200);
        let answer = answers(&engine).pop().expect("an answer hop");
        assert_eq!(answer.body["reasoning_effort"], sent, "{effort}");
        assert_eq!(
            answer.body["chat_template_kwargs"]["enable_thinking"], thinking,
            "{effort}"
        );
    }
}

/// Through `baton serve` too: a short follow-up stays on the previous turn's expert without a
/// route hop, named `sticky_follow_up` in the metadata and counted in /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_stays_on_its_expert_through_serve() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L1")
            .default_answer(MockReply::text("Done."))
            .default_summary("Made the report."),
    );
    let server = Server::start(&env, &engine, &[]);
    let first = post(
        &server,
        chat(json!([{"role": "user", "content": "make the January sales report"}])),
        None,
    )
    .await;
    let conversation = first.headers()["x-conversation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let second: Value = post(
        &server,
        chat(json!([
            {"role": "user", "content": "make the January sales report"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "do the same for February"}
        ])),
        Some(&conversation),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(second["metadata"]["mol_selected_route"], "L1");
    assert_eq!(second["metadata"]["mol_decision"], "sticky_follow_up");
    assert_eq!(engine.requests_for_hop("route").len(), 1);
    let metrics = client()
        .get(format!("{}/metrics", server.url.trim_end_matches("/v1")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("decision=\"follow_up\""), "{metrics}");
}

/// Red team finding 11: a web page could drive a key-less loopback server with a `text/plain`
/// POST (a CORS "simple request", no preflight) or through DNS rebinding. A request with an
/// `Origin` header (every browser request names its page) is refused with 403 before anything
/// is read, and a POST body not declared JSON with 415; SDK clients (JSON, no Origin) are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_from_web_pages_and_non_json_bodies_are_refused() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L0")
            .default_answer(MockReply::text("Hi."))
            .default_summary("Greeted."),
    );
    let server = Server::start(&env, &engine, &[]);
    let body = chat(json!([{"role": "user", "content": "hi"}])).to_string();
    let send = |content_type: &'static str, origin: Option<&'static str>| {
        let mut req = client()
            .post(format!("{}/chat/completions", server.url))
            .header("content-type", content_type)
            .body(body.clone());
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        req.send()
    };
    let plain = send("text/plain", None).await.unwrap();
    assert_eq!(plain.status(), 415);
    let text: Value = plain.json().await.unwrap();
    assert_eq!(text["error"]["code"], "unsupported_media_type", "{text}");
    let page = send("application/json", Some("http://evil.example"))
        .await
        .unwrap();
    assert_eq!(page.status(), 403);
    let page = send("text/plain", Some("http://evil.example"))
        .await
        .unwrap();
    assert_eq!(page.status(), 403);
    assert!(
        engine.chat_requests().is_empty(),
        "nothing reached the engine"
    );
    let sdk = send("application/json; charset=utf-8", None).await.unwrap();
    assert_eq!(sdk.status(), 200);
    // A DNS-rebinding page's same-origin GET carries no Origin, but names the page's host
    // (eighteenth red team, low: `/metrics` and `/v1/models` were read so).
    let port = server
        .url
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_string();
    for path in ["/metrics", "/v1/models"] {
        let base = server.url.trim_end_matches("/v1");
        let get = |host: String| {
            client()
                .get(format!("{base}{path}"))
                .header("host", host)
                .send()
        };
        let rebound = get(format!("attacker.example:{port}")).await.unwrap();
        assert_eq!(rebound.status(), 403, "{path}");
        let error: Value = rebound.json().await.unwrap();
        assert_eq!(error["error"]["code"], "host_not_allowed", "{error}");
        for host in [
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            "[::1]".into(),
        ] {
            assert_eq!(
                get(host.clone()).await.unwrap().status(),
                200,
                "{path} {host}"
            );
        }
    }
}

/// Red team finding 12: a 7.8 MiB body of 225,000 one-character messages took the server from
/// 16 to 463 MiB (59×, kept afterwards). Every array of a body is bounded while it is parsed
/// (`--max-messages`, 10,000 by default): past it the request gets a 413 before it becomes
/// objects, on both APIs, and nothing reaches the engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_more_messages_than_the_bound_is_refused_while_parsing() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L0")
            .default_answer(MockReply::text("Hi."))
            .default_summary("Greeted."),
    );
    let server = Server::start(&env, &engine, &["--max-messages", "3"]);
    let messages = |n: usize| {
        Value::Array(
            (0..n)
                .map(|_| json!({"role": "user", "content": "a"}))
                .collect(),
        )
    };
    let too_many = client()
        .post(format!("{}/chat/completions", server.url))
        .json(&chat(messages(4)))
        .send()
        .await
        .unwrap();
    assert_eq!(too_many.status(), 413);
    let error: Value = too_many.json().await.unwrap();
    assert_eq!(error["error"]["code"], "too_many_messages", "{error}");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--max-messages"),
        "{error}"
    );
    // The Responses API's `input`, and an array nested in a message, have the same bound.
    let input = client()
        .post(format!("{}/responses", server.url))
        .json(&json!({"model": "baton", "input": messages(4)}))
        .send()
        .await
        .unwrap();
    assert_eq!(input.status(), 413);
    let parts = json!([{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"},
        {"type": "text", "text": "c"}, {"type": "text", "text": "d"}
    ]}]);
    let nested = client()
        .post(format!("{}/chat/completions", server.url))
        .json(&chat(parts))
        .send()
        .await
        .unwrap();
    assert_eq!(nested.status(), 413);
    assert!(
        engine.chat_requests().is_empty(),
        "nothing reached the engine"
    );
    let within = client()
        .post(format!("{}/chat/completions", server.url))
        .json(&chat(messages(3)))
        .send()
        .await
        .unwrap();
    assert_eq!(within.status(), 200);
}

/// `baton serve` on a loopback port with its open-file limit set before it starts: the soft
/// limit lowered to at most `soft`, and the hard one to `hard` when given. Returns the server
/// and its address, once it listens (what it prints later is drained).
fn serve_with_file_limit(
    env: &Env,
    engine: &MockEngine,
    keys: Option<&str>,
    args: &[&str],
    soft: u64,
    hard: Option<u64>,
) -> (Child, String) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("baton"));
    cmd.env_clear()
        .env("HOME", &env.home)
        .current_dir(&env.workspace)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--endpoint",
            &engine.url(),
        ])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(keys) = keys {
        cmd.env("BATON_SERVE_API_KEYS", keys);
    }
    // SAFETY: getrlimit and setrlimit are async-signal-safe; they only lower the child's own
    // limits.
    unsafe {
        cmd.pre_exec(move || {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
            lim.rlim_max = hard.unwrap_or(lim.rlim_max);
            lim.rlim_cur = lim.rlim_cur.min(soft).min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("spawn baton serve");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines().map_while(Result::ok);
    let addr = lines
        .find_map(|l| {
            l.split("listening on http://")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .map(str::to_string)
        })
        .expect("listening line");
    std::thread::spawn(move || lines.for_each(drop));
    (child, addr)
}

/// Red team finding 16: at the common soft limit of 1024 descriptors, about 1,100 idle
/// connections (each holds one before its key can be checked) locked every client out.
/// `baton serve` raises its soft limit to the hard one at start.
#[test]
fn serve_raises_its_open_file_limit_to_the_hard_limit() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new());
    let (mut child, _) = serve_with_file_limit(&env, &engine, None, &[], 256, None);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("the limit");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    assert_eq!(numbers[0], numbers[1], "soft raised to hard: {line}");
    let hard = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .unwrap()
        .1;
    if hard > 256 {
        assert_ne!(numbers[0], "256", "{line}");
    }
}

/// Red team finding 16, in full: with the descriptors all taken by connections that sent half
/// a request line and nothing more, a client with a key still gets its answer. The server
/// closes the oldest connections that never showed a key to make room (before, everyone
/// waited for the idle ones' read timeout: here 600 s).
#[test]
fn connections_that_never_showed_a_key_make_room_for_a_client_that_has_one() {
    use std::io::{Read, Write};
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new());
    let (mut child, addr) = serve_with_file_limit(
        &env,
        &engine,
        Some("k-one"),
        &["--read-timeout", "600"],
        128,
        Some(128),
    );
    let idle: Vec<std::net::TcpStream> = (0..200)
        .filter_map(|_| {
            let mut s = std::net::TcpStream::connect(&addr).ok()?;
            s.write_all(b"GET /v1/models HTTP/1.1\r\n").ok()?;
            Some(s)
        })
        .collect();
    assert_eq!(
        idle.len(),
        200,
        "the kernel queues what the server cannot take"
    );
    let answer = models_with_key(&addr, "k-one", Duration::ZERO);
    // Closed by the server: end of stream or a reset; an open one times out.
    let closed = idle
        .iter()
        .filter(|s| {
            let _ = s.set_read_timeout(Some(Duration::from_millis(20)));
            let mut reader: &std::net::TcpStream = s;
            match reader.read(&mut [0u8; 1]) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
            }
        })
        .count();
    let _ = child.kill();
    let _ = child.wait();
    let answer = answer.expect("the client with a key got no answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(closed > 0, "no idle connection was closed to make room");
}

/// Red team (today's round): while a flood kept the server out of descriptors, a client with a
/// key that paused before sending its request was closed with the flood's connections (oldest
/// first reached it). The connections closed are taken from the address holding the most, so
/// a flood from one address closes its own.
#[test]
fn a_flood_from_one_address_does_not_close_a_slow_client_from_another() {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(Script::new());
    let (mut child, addr) = serve_with_file_limit(
        &env,
        &engine,
        Some("k-one"),
        &["--read-timeout", "600"],
        128,
        Some(128),
    );
    let port: u16 = addr.rsplit(':').next().unwrap().parse().unwrap();
    // The flood comes from 127.0.0.2 and keeps coming while the client pauses.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let mut held = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
                let target = std::net::SocketAddr::from(([127, 0, 0, 1], port));
                if let Ok(Ok(mut s)) = rt.block_on(async {
                    tokio::time::timeout(Duration::from_millis(200), socket.connect(target)).await
                }) {
                    let _ = rt.block_on(async {
                        use tokio::io::AsyncWriteExt;
                        s.write_all(b"GET /v1/models HTTP/1.1\r\n").await
                    });
                    held.push(s);
                }
                if held.len() > 2000 {
                    held.drain(..1000);
                }
            }
            held.len()
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    // Longer than the flood needs to cycle every unproven connection of the server.
    let answer = models_with_key(&addr, "k-one", Duration::from_millis(1500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = flood.join();
    let _ = child.kill();
    let _ = child.wait();
    let answer = answer.expect("the client with a key was closed");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
}

/// `GET /v1/models` with `key` on a raw connection to `addr`, its head sent `pause` after
/// connecting; the whole answer as the server closes it.
fn models_with_key(addr: &str, key: &str, pause: Duration) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut client = std::net::TcpStream::connect(addr)?;
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    std::thread::sleep(pause);
    client.write_all(
        format!(
            "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {key}\r\n\
             Connection: close\r\n\r\n"
        )
        .as_bytes(),
    )?;
    let mut answer = String::new();
    client.read_to_string(&mut answer)?;
    Ok(answer)
}

/// An engine that routes every turn to L2 and answers `answer to [USER TEXT]`: what an answer
/// hop's prompt holds shows whose history reached it.
pub fn echo_engine() -> MockEngine {
    MockEngine::start_blocking(|req: &RecordedRequest| {
        if req.is_route() {
            return MockReply::label("L2");
        }
        if req.is_summary() {
            return MockReply::text("summary");
        }
        let user = req.last_user_text().unwrap_or_default();
        MockReply::text(format!("answer to [{user}]"))
    })
}

/// A chat turn sent with the API key `key`, naming the conversation `id`, of the user texts
/// `users` (each earlier one followed by the echo engine's answer to it): the id the server
/// echoed and the body.
pub async fn chat_as(server: &Server, key: &str, id: &str, users: &[&str]) -> (String, Value) {
    let mut messages = Vec::new();
    for (i, text) in users.iter().enumerate() {
        messages.push(json!({"role": "user", "content": text}));
        if i + 1 < users.len() {
            messages.push(json!({"role": "assistant", "content": format!("answer to [{text}]")}));
        }
    }
    let response = client()
        .post(format!("{}/chat/completions", server.url))
        .bearer_auth(key)
        .header("X-Conversation-Id", id)
        .json(&chat(Value::Array(messages)))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let echoed = response.headers()["x-conversation-id"]
        .to_str()
        .unwrap()
        .to_string();
    (echoed, response.json().await.unwrap())
}

/// Red-team finding 21: with keys, a named conversation id was echoed when free and replaced
/// when another key held it — an oracle of which ids exist. Each key has ids of its own: B
/// naming A's id gets it back and a conversation of its own (nothing of A's reaches B's
/// prompt), A goes on in its own, and a response A stored is a 404 to B exactly like an id
/// that never existed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_naming_another_keys_id_gets_its_own_and_learns_nothing() {
    let env = Env::new();
    let engine = echo_engine();
    let server = Server::start_with_env(
        &env,
        &engine.url(),
        &[],
        &[("BATON_SERVE_API_KEYS", "k-alice,k-bob")],
    );
    let id = "abc-conversation-0001";
    let (echoed, _) = chat_as(&server, "k-alice", id, &["alice: the secret plan"]).await;
    assert_eq!(echoed, id);
    let (echoed, body) = chat_as(&server, "k-bob", id, &["bob: hello"]).await;
    assert_eq!(echoed, id, "echoed as a free id is");
    assert_eq!(body["metadata"]["mol_convo_completed"], 0, "a fresh one");
    assert!(!answers(&engine).pop().unwrap().mentions("secret plan"));

    let (echoed, body) = chat_as(
        &server,
        "k-alice",
        id,
        &["alice: the secret plan", "alice: and then?"],
    )
    .await;
    assert_eq!(echoed, id);
    assert_eq!(
        body["metadata"]["mol_convo_completed"], 1,
        "A's own goes on"
    );
    let prompt = answers(&engine).pop().unwrap();
    assert!(prompt.mentions("secret plan") && !prompt.mentions("bob"));
    let (_, body) = chat_as(&server, "k-bob", id, &["bob: hello", "bob: again"]).await;
    assert_eq!(body["metadata"]["mol_convo_completed"], 1);
    assert!(!answers(&engine).pop().unwrap().mentions("alice"));

    // A stored response of A's is to B what an id nobody ever had is: the same 404.
    let respond = |key: &'static str, body: Value| {
        client()
            .post(format!("{}/responses", server.url))
            .bearer_auth(key)
            .json(&body)
            .send()
    };
    let stored: Value = respond("k-alice", json!({"model": MODEL, "input": "keep this"}))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let theirs = stored["id"].as_str().unwrap().to_string();
    let nobodys = format!("resp_{}", "0".repeat(32));
    let mut refusals = Vec::new();
    for parent in [&theirs, &nobodys] {
        let r = respond(
            "k-bob",
            json!({"model": MODEL, "input": "more", "previous_response_id": parent}),
        )
        .await
        .unwrap();
        let status = r.status().as_u16();
        refusals.push((
            status,
            r.text().await.unwrap().replace(parent.as_str(), "ID"),
        ));
    }
    assert_eq!(refusals[0].0, 404, "{refusals:?}");
    assert_eq!(refusals[0], refusals[1]);
    let own = respond(
        "k-alice",
        json!({"model": MODEL, "input": "more", "previous_response_id": theirs}),
    )
    .await
    .unwrap();
    assert_eq!(own.status(), 200);
}
