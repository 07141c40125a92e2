//! The remote backend against the in-process mock engine: wire shapes, streaming, errors,
//! retries, timeouts and cancellation, all on loopback.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{MockEngine, MockReply, Script, sequence};
use baton::backend::remote::{RemoteBackend, RetryNotice};
use baton::backend::{
    BackendError, ChatBackend, ChatCompletion, ChatDelta, ChatRequest, FinishReason,
};
use baton::protocol::Hop;
use baton::protocol::RouteConstraint;
use baton::protocol::{ChatMessage, ToolSpec};
use futures_util::StreamExt;
use serde_json::json;

const KEY: &str = "sk-test-0123456789-secret";

fn backend_for(engine: &MockEngine) -> RemoteBackend {
    builder_for(engine).build().expect("valid endpoint")
}

fn builder_for(engine: &MockEngine) -> baton::backend::remote::RemoteBackendBuilder {
    RemoteBackend::builder(engine.url())
        .api_key(Some(KEY.into()))
        .backoff(Duration::from_millis(1), Duration::from_millis(10))
        .request_timeout(Duration::from_secs(10))
        .idle_timeout(Duration::from_secs(10))
        .max_retries(3)
}

fn answer_request(model: &str, text: &str) -> ChatRequest {
    ChatRequest::new(model, vec![ChatMessage::user(text)], Hop::Answer)
}

/// The route hop exactly as the MoL layer builds it (built-in profile).
fn route_request() -> ChatRequest {
    let profile = baton::mol::Profile::builtin(&baton::mol::ProfileNames::default());
    baton::mol::route_request(&profile, "fix the failing test")
}

/// Runs a request to the end: every delta before the completion, and how it ended.
async fn run(
    backend: &RemoteBackend,
    req: ChatRequest,
) -> (Vec<ChatDelta>, Result<ChatCompletion, BackendError>) {
    let mut stream = match backend.chat(req).await {
        Ok(stream) => stream,
        Err(error) => return (Vec::new(), Err(error)),
    };
    let mut deltas = Vec::new();
    while let Some(item) = stream.next().await {
        match item {
            Ok(ChatDelta::Completed(done)) => return (deltas, Ok(done)),
            Ok(delta) => deltas.push(delta),
            Err(error) => return (deltas, Err(error)),
        }
    }
    panic!("stream ended without a completion or an error");
}

fn notices() -> (
    Arc<Mutex<Vec<RetryNotice>>>,
    impl Fn(&RetryNotice) + Send + Sync,
) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    (seen, move |n: &RetryNotice| {
        sink.lock().unwrap().push(n.clone())
    })
}

#[tokio::test]
async fn route_request_has_the_reference_shape() {
    let engine = MockEngine::scripted(Script::new().route("L2")).await;
    let (deltas, done) = run(&backend_for(&engine), route_request()).await;
    assert!(
        deltas.is_empty(),
        "non-streamed requests yield only the completion"
    );
    let done = done.unwrap();
    assert_eq!(done.message.content, "L2");
    assert_eq!(done.finish_reason, FinishReason::Stop);

    let requests = engine.chat_requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.hop(), Some("route"));
    assert_eq!(sent.header("content-type"), Some("application/json"));
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let instruction = route_request().messages[0].content.clone();
    assert!(instruction.starts_with("fix the failing test\n\nThe text above"));
    assert_eq!(
        sent.body,
        json!({
            "model": "L0",
            "messages": [
                {"role": "user", "content": instruction},
                {"role": "assistant", "content": "model_id="}
            ],
            "max_tokens": 24,
            "max_completion_tokens": 24,
            "temperature": 0.0,
            "stream": false,
            "continue_final_message": true,
            "add_generation_prompt": false,
            "stop": null,
            "chat_template_kwargs": {"enable_thinking": false},
            "structured_outputs": {"choice": ["L0", "L1", "L2", "L3"]}
        })
    );
}

#[tokio::test]
async fn sglang_dialect_sends_a_regex() {
    let engine = MockEngine::scripted(Script::new().route("L1")).await;
    let backend = builder_for(&engine)
        .dialect(RouteConstraint::Regex)
        .build()
        .unwrap();
    let done = run(&backend, route_request()).await.1.unwrap();
    assert_eq!(done.message.content, "L1");
    let body = &engine.chat_requests()[0].body;
    assert_eq!(body["regex"], "(L0|L1|L2|L3)");
    assert!(body.get("structured_outputs").is_none());
}

#[tokio::test]
async fn route_label_in_the_reasoning_field_is_passed_on_as_is() {
    let engine = MockEngine::scripted(
        Script::new().route_reply(MockReply::reasoning_only("L3").reasoning_key("reasoning")),
    )
    .await;
    let done = run(&backend_for(&engine), route_request()).await.1.unwrap();
    assert_eq!(done.message.content, "");
    assert_eq!(done.message.reasoning.as_deref(), Some("L3"));
}

#[tokio::test]
async fn streaming_keeps_text_and_reasoning_apart_and_reports_usage() {
    let engine = MockEngine::start(|_req| {
        MockReply::text("The answer is 42.")
            .with_reasoning("Let me think about it.")
            .chunk_chars(3)
            .usage(120, 17)
            .cached_tokens(64)
            .keepalive()
    })
    .await;
    let (deltas, done) = run(&backend_for(&engine), answer_request("L2", "question")).await;
    let done = done.unwrap();
    let text: String = deltas
        .iter()
        .filter_map(|d| match d {
            ChatDelta::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let reasoning: String = deltas
        .iter()
        .filter_map(|d| match d {
            ChatDelta::Reasoning(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "The answer is 42.");
    assert_eq!(reasoning, "Let me think about it.");
    assert!(deltas.len() > 2, "streamed in pieces: {deltas:?}");
    assert_eq!(done.message.content, "The answer is 42.");
    assert_eq!(
        done.message.reasoning.as_deref(),
        Some("Let me think about it.")
    );
    assert_eq!(done.finish_reason, FinishReason::Stop);
    let usage = done.usage.expect("usage chunk");
    assert_eq!((usage.prompt_tokens, usage.completion_tokens), (120, 17));
    assert_eq!(usage.cached_tokens, Some(64));
    assert!(done.ttft.is_some());

    let sent = &engine.chat_requests()[0];
    assert_eq!(sent.hop(), Some("answer"));
    assert_eq!(sent.header("accept"), Some("text/event-stream"));
    assert_eq!(sent.body["stream"], true);
    assert_eq!(sent.body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn tool_calls_are_assembled_across_fragments() {
    let engine = MockEngine::start(|_req| {
        MockReply::text("Let me look.")
            .with_tool_call("call_a", "read_file", r#"{"path":"src/main.rs"}"#)
            .with_tool_call("call_b", "list_dir", r#"{"path":"."}"#)
            .chunk_chars(2)
    })
    .await;
    let mut req = answer_request("L2", "look around");
    req.tools = vec![ToolSpec {
        name: "read_file".into(),
        description: "Reads a file".into(),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }];
    req.tool_choice = Some("auto".into());
    let (deltas, done) = run(&backend_for(&engine), req).await;
    let done = done.unwrap();
    assert_eq!(done.finish_reason, FinishReason::ToolCalls);
    let calls = &done.message.tool_calls;
    assert_eq!(calls.len(), 2);
    assert_eq!(
        (
            calls[0].id.as_str(),
            calls[0].name.as_str(),
            calls[0].arguments.as_str()
        ),
        ("call_a", "read_file", r#"{"path":"src/main.rs"}"#)
    );
    assert_eq!(calls[1].arguments, r#"{"path":"."}"#);
    let started: Vec<_> = deltas
        .iter()
        .filter(|d| matches!(d, ChatDelta::ToolCallStarted { .. }))
        .collect();
    assert_eq!(
        started,
        [
            &ChatDelta::ToolCallStarted {
                index: 0,
                id: "call_a".into(),
                name: "read_file".into()
            },
            &ChatDelta::ToolCallStarted {
                index: 1,
                id: "call_b".into(),
                name: "list_dir".into()
            },
        ]
    );
    let first_args: String = deltas
        .iter()
        .filter_map(|d| match d {
            ChatDelta::ToolCallArguments { index: 0, fragment } => Some(fragment.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(first_args, r#"{"path":"src/main.rs"}"#);
    let body = &engine.chat_requests()[0].body;
    assert_eq!(body["tools"][0]["function"]["name"], "read_file");
    assert_eq!(body["tool_choice"], "auto");
}

#[tokio::test]
async fn tool_history_is_sent_in_chat_shape() {
    let engine = MockEngine::start(|_req| MockReply::text("done")).await;
    let mut assistant = ChatMessage::assistant("");
    assistant.reasoning = Some("need the file".into());
    assistant.tool_calls = vec![baton::protocol::ToolCall {
        id: "call_1".into(),
        name: "read_file".into(),
        arguments: r#"{"path":"a"}"#.into(),
    }];
    let req = ChatRequest::new(
        "L2",
        vec![
            ChatMessage::user("read a"),
            assistant,
            ChatMessage::tool_result("call_1", "contents of a"),
        ],
        Hop::Answer,
    );
    run(&backend_for(&engine), req).await.1.unwrap();
    assert_eq!(
        engine.chat_requests()[0].body["messages"],
        json!([
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": "", "reasoning_content": "need the file",
             "tool_calls": [{"id": "call_1", "type": "function",
                             "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]},
            {"role": "tool", "content": "contents of a", "tool_call_id": "call_1"}
        ])
    );
}

#[tokio::test]
async fn non_streamed_answers_parse_into_the_same_completion() {
    let engine = MockEngine::start(|_req| {
        MockReply::text("short")
            .with_reasoning("hmm")
            .with_tool_call("c1", "list_dir", "{}")
            .usage(9, 3)
    })
    .await;
    let mut req = answer_request("L1", "x");
    req.stream = false;
    let done = run(&backend_for(&engine), req).await.1.unwrap();
    assert_eq!(done.message.content, "short");
    assert_eq!(done.message.reasoning.as_deref(), Some("hmm"));
    assert_eq!(done.message.tool_calls[0].name, "list_dir");
    assert_eq!(done.finish_reason, FinishReason::ToolCalls);
    assert_eq!(done.usage.unwrap().prompt_tokens, 9);
    assert!(done.ttft.is_none());
}

#[tokio::test]
async fn raw_sse_with_crlf_multiline_data_and_comments_is_understood() {
    let body = concat!(
        ": keep-alive\r\n\r\n",
        "event: message\r\n",
        "data: {\"choices\":[{\"index\":0,\r\n",
        "data: \"delta\":{\"content\":\"a\\u00e9\"},\"finish_reason\":null}]}\r\n\r\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\r\n\r\n",
        "data: [DONE]\r\n\r\n",
    );
    let engine = MockEngine::start(move |_req| MockReply::raw_sse(body)).await;
    let (deltas, done) = run(&backend_for(&engine), answer_request("L2", "x")).await;
    assert_eq!(deltas, [ChatDelta::Text("aé".into())]);
    let done = done.unwrap();
    assert_eq!(done.finish_reason, FinishReason::Length);
    // No usage in the stream: baton counts it from the text and says so.
    let usage = done.usage.expect("an estimated usage");
    assert!(usage.estimated, "{usage:?}");
    assert_eq!(usage.completion_tokens, 1, "2 characters");
    assert!(usage.prompt_tokens >= 1);
}

#[tokio::test]
async fn malformed_sse_is_a_protocol_error_naming_hop_and_url() {
    let engine = MockEngine::start(|_req| MockReply::malformed_sse()).await;
    let (_, done) = run(&backend_for(&engine), answer_request("L2", "x")).await;
    let error = done.unwrap_err();
    assert!(matches!(error, BackendError::Protocol { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.starts_with("answer hop:"), "{text}");
    assert!(
        text.contains(&format!("{}/chat/completions", engine.url())),
        "{text}"
    );
    assert!(text.contains("malformed SSE data"), "{text}");
}

#[tokio::test]
async fn truncated_stream_is_an_error_not_a_silent_truncation() {
    let engine = MockEngine::start(|_req| MockReply::truncated("partial answ")).await;
    let (deltas, done) = run(&backend_for(&engine), answer_request("L2", "x")).await;
    assert!(!deltas.is_empty(), "the partial text was streamed");
    let error = done.unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, BackendError::Protocol { .. }), "{error:?}");
    assert!(
        text.contains("stream ended before finish_reason: truncated response"),
        "{text}"
    );
    assert!(text.contains(&engine.url()), "{text}");
    assert_eq!(
        engine.chat_requests().len(),
        1,
        "never retried after output"
    );

    let no_done = MockEngine::start(|_req| MockReply::text("complete").no_done()).await;
    let error = run(&backend_for(&no_done), answer_request("L2", "x"))
        .await
        .1
        .unwrap_err();
    assert!(error.to_string().contains("without [DONE]"), "{error}");
}

/// llama-cpp-python's function-calling format cannot stream `tool_choice: auto`: it sends a
/// `: ping` and closes the stream. The same request unstreamed is answered, replayed as deltas;
/// later requests go unstreamed at once, and the frontends are told once. Before, the user got
/// "stream ended before finish_reason: truncated response" after the server's delay.
#[tokio::test]
async fn a_server_that_cannot_stream_a_request_gets_it_unstreamed() {
    let engine = MockEngine::start(|req| {
        if req.is_stream() {
            MockReply::raw_sse(": ping\n\n")
        } else {
            MockReply::text("")
                .with_tool_call("c1", "list_dir", "{}")
                .usage(12, 4)
        }
    })
    .await;
    let (seen, observer) = notices();
    let backend = builder_for(&engine).on_retry(observer).build().unwrap();
    let (deltas, done) = run(&backend, answer_request("L2", "x")).await;
    let done = done.expect("answered unstreamed");
    assert_eq!(done.message.tool_calls[0].name, "list_dir");
    assert_eq!(
        done.usage.unwrap().prompt_tokens,
        12,
        "the server's own count"
    );
    assert!(
        deltas
            .iter()
            .any(|d| matches!(d, ChatDelta::ToolCallStarted { .. })),
        "replayed as deltas: {deltas:?}"
    );
    let streamed: Vec<bool> = engine
        .chat_requests()
        .iter()
        .map(|r| r.is_stream())
        .collect();
    assert_eq!(streamed, [true, false]);
    let second = engine.chat_requests()[1].body.clone();
    assert!(second.get("stream_options").is_none(), "{second}");

    let (_, again) = run(&backend, answer_request("L2", "y")).await;
    assert!(again.is_ok());
    let streamed: Vec<bool> = engine
        .chat_requests()
        .iter()
        .map(|r| r.is_stream())
        .collect();
    assert_eq!(
        streamed,
        [true, false, false],
        "later requests go unstreamed at once"
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "told once: {seen:?}");
    assert!(
        seen[0].reason.contains("unstreamed from now on"),
        "{seen:?}"
    );
}

/// A stream that ends empty and whose unstreamed retry fails reports the retry's error with
/// its kind (here a context overflow, as llama-cpp-python sends it), not a truncated stream.
#[tokio::test]
async fn an_empty_stream_whose_retry_fails_keeps_the_servers_error() {
    let engine = MockEngine::start(|req| {
        if req.is_stream() {
            MockReply::raw_sse(": ping\n\n")
        } else {
            MockReply::context_overflow()
        }
    })
    .await;
    let (_, done) = run(&backend_for(&engine), answer_request("L2", "x")).await;
    let error = done.unwrap_err();
    assert_eq!(
        error.kind(),
        baton::protocol::ErrorKind::ContextOverflow,
        "{error}"
    );
}

#[tokio::test]
async fn server_error_then_success_is_retried() {
    let engine = MockEngine::start(sequence(vec![
        MockReply::status(500, "engine restarting"),
        MockReply::text("recovered"),
    ]))
    .await;
    let (seen, observer) = notices();
    let backend = builder_for(&engine).on_retry(observer).build().unwrap();
    let done = run(&backend, answer_request("L2", "x")).await.1.unwrap();
    assert_eq!(done.message.content, "recovered");
    assert_eq!(engine.chat_requests().len(), 2);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].retry, 1);
    assert_eq!(seen[0].hop, Hop::Answer);
    assert!(seen[0].reason.contains("HTTP 500") && seen[0].reason.contains("engine restarting"));
}

#[tokio::test]
async fn rate_limit_honours_retry_after() {
    let engine = MockEngine::start(sequence(vec![
        MockReply::too_many_requests(1),
        MockReply::text("after the wait"),
    ]))
    .await;
    let (seen, observer) = notices();
    let backend = builder_for(&engine).on_retry(observer).build().unwrap();
    let done = run(&backend, answer_request("L2", "x")).await.1.unwrap();
    assert_eq!(done.message.content, "after the wait");
    assert_eq!(engine.chat_requests().len(), 2);
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen[0].delay,
        Duration::from_secs(1),
        "Retry-After: 1 is the wait"
    );
    assert!(seen[0].reason.contains("HTTP 429"), "{}", seen[0].reason);
}

#[tokio::test]
async fn retries_give_up_with_the_last_server_answer() {
    let engine = MockEngine::start(|_req| MockReply::status(503, "overloaded")).await;
    let backend = builder_for(&engine).max_retries(2).build().unwrap();
    let error = run(&backend, answer_request("L3", "x"))
        .await
        .1
        .unwrap_err();
    assert!(
        matches!(error, BackendError::Http { status: 503, .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("overloaded"));
    assert_eq!(engine.chat_requests().len(), 3, "first attempt + 2 retries");
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let engine = MockEngine::start(|_req| {
        MockReply::error(404, "The model `L9` does not exist.", "model_not_found")
    })
    .await;
    let error = run(&backend_for(&engine), answer_request("L9", "x"))
        .await
        .1
        .unwrap_err();
    assert_eq!(engine.chat_requests().len(), 1);
    let text = error.to_string();
    assert!(
        text.contains("HTTP 404")
            && text.contains("The model `L9` does not exist. (code model_not_found)"),
        "{text}"
    );
}

/// Red team finding 18: a 307/308 from the upstream re-POSTed the whole prompt to the origin it
/// named. A redirect is never followed: it is an HTTP error, and the other origin gets nothing.
#[tokio::test]
async fn an_upstream_redirect_is_not_followed() {
    let elsewhere = MockEngine::start(|_req| MockReply::text("stolen")).await;
    let target = format!("{}/chat/completions", elsewhere.url());
    let engine =
        MockEngine::start(move |_req| MockReply::status(307, "").header("location", &target)).await;
    let error = run(&backend_for(&engine), answer_request("L2", "secret prompt"))
        .await
        .1
        .unwrap_err();
    assert!(error.to_string().contains("HTTP 307"), "{error}");
    assert!(
        elsewhere.chat_requests().is_empty(),
        "the prompt went elsewhere"
    );
}

#[tokio::test]
async fn context_overflow_is_classified() {
    let engine = MockEngine::start(|_req| MockReply::context_overflow()).await;
    let error = run(&backend_for(&engine), answer_request("L2", "huge"))
        .await
        .1
        .unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::ContextOverflow {
                hop: Hop::Answer,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("maximum context length is 262144")
    );
    assert_eq!(engine.chat_requests().len(), 1, "not retried");

    let in_stream = MockEngine::start(|_req| {
        MockReply::raw_sse(
            "data: {\"error\":{\"message\":\"prompt exceeds the context length\",\"code\":400}}\n\ndata: [DONE]\n\n",
        )
    })
    .await;
    let error = run(&backend_for(&in_stream), answer_request("L2", "huge"))
        .await
        .1
        .unwrap_err();
    assert!(
        matches!(error, BackendError::ContextOverflow { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_hits_the_request_timeout() {
    let engine = MockEngine::start(|_req| MockReply::hang()).await;
    let backend = builder_for(&engine)
        .request_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let error = run(&backend, answer_request("L2", "x"))
        .await
        .1
        .unwrap_err();
    assert!(
        matches!(error, BackendError::Timeout { secs: 1, .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("did not answer within 1 s") && text.contains("request timeout"),
        "{text}"
    );
}

#[tokio::test]
async fn a_stream_that_goes_silent_hits_the_idle_timeout() {
    let engine =
        MockEngine::start(|_req| MockReply::text("first words, then nothing").hang_after(3)).await;
    let backend = builder_for(&engine)
        .idle_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let (deltas, done) = run(&backend, answer_request("L2", "x")).await;
    assert!(!deltas.is_empty(), "output arrived before the silence");
    let error = done.unwrap_err();
    assert!(matches!(error, BackendError::Timeout { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("idle timeout") && text.contains("answer hop"),
        "{text}"
    );
    assert_eq!(
        engine.chat_requests().len(),
        1,
        "no retry once output was streamed"
    );
}

#[tokio::test]
async fn api_key_is_sent_as_bearer_and_never_shown() {
    let engine = MockEngine::start(|req| {
        let echoed = req.header("authorization").unwrap_or("").to_string();
        MockReply::error(
            401,
            &format!("invalid api key: {echoed}"),
            "invalid_api_key",
        )
    })
    .await;
    let error = run(&backend_for(&engine), answer_request("L2", "x"))
        .await
        .1
        .unwrap_err();
    let sent = &engine.chat_requests()[0];
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let text = error.to_string();
    assert!(
        text.contains("HTTP 401") && text.contains("invalid api key"),
        "{text}"
    );
    assert!(!text.contains(KEY), "{text}");
    assert!(!format!("{error:?}").contains(KEY));
    assert!(!format!("{:?}", backend_for(&engine).config()).contains(KEY));

    let anonymous = RemoteBackend::builder(engine.url()).build().unwrap();
    let _ = run(&anonymous, answer_request("L2", "x")).await;
    assert_eq!(engine.chat_requests()[1].header("authorization"), None);
}

#[tokio::test]
async fn a_closed_port_fails_at_the_first_attempt() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let (seen, observer) = notices();
    // The default policy retries a 500 three times; a refused connection gets none of them.
    let backend = RemoteBackend::builder(format!("http://127.0.0.1:{port}/v1"))
        .api_key(Some(KEY.into()))
        .max_retries(3)
        .on_retry(observer)
        .build()
        .unwrap();
    let error = run(&backend, route_request()).await.1.unwrap_err();
    assert!(
        matches!(
            error,
            BackendError::Connect {
                hop: Hop::Route,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.kind(), baton::protocol::ErrorKind::Unreachable);
    let text = error.to_string();
    assert!(
        text.starts_with("route hop: cannot connect to http://127.0.0.1:")
            && text.contains("Connection refused"),
        "{text}"
    );
    assert!(!text.contains(KEY));
    let retries = seen.lock().unwrap().len();
    assert!(
        retries + 1 < 2,
        "{} attempts against a closed port",
        retries + 1
    );
}

#[tokio::test]
async fn retry_notices_read_as_one_line_naming_what_is_retried() {
    let engine = MockEngine::builder()
        .models_reply(MockReply::status(503, "models warming up"))
        .start(sequence(vec![
            MockReply::status(500, "engine restarting"),
            MockReply::text("recovered"),
        ]))
        .await;
    let (seen, observer) = notices();
    let backend = builder_for(&engine)
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .max_retries(1)
        .on_retry(observer)
        .build()
        .unwrap();
    run(&backend, answer_request("L2", "x")).await.1.unwrap();
    let _ = backend.probe().await;
    let lines: Vec<String> = seen.lock().unwrap().iter().map(|n| n.message()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with("answer hop: retrying in ")
            && lines[0].ends_with("(retry 1 of 1): HTTP 500: engine restarting"),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("model list: retrying in "),
        "{lines:?}"
    );
}

#[tokio::test]
async fn a_404_model_names_the_models_the_server_serves() {
    let engine = MockEngine::builder()
        .models([("Qwen3-8B", None), ("Qwen3-32B", None)])
        .start(|_req| MockReply::error(404, "The model `L2` does not exist.", "404"))
        .await;
    let error = run(&backend_for(&engine), answer_request("L2", "x"))
        .await
        .1
        .unwrap_err();
    assert_eq!(error.kind(), baton::protocol::ErrorKind::ModelNotFound);
    let text = error.to_string();
    assert!(
        text.contains("does not exist") && text.contains("the server serves: Qwen3-8B, Qwen3-32B"),
        "{text}"
    );
}

#[tokio::test]
async fn a_malformed_chunk_error_quotes_the_line_the_server_sent() {
    let line = r#"{"id":"x","choices":"not-a-list"}"#;
    let engine =
        MockEngine::start(move |_req| MockReply::raw_sse(format!("data: {line}\n\n"))).await;
    let error = run(&backend_for(&engine), answer_request("L2", "x"))
        .await
        .1
        .unwrap_err();
    assert_eq!(error.kind(), baton::protocol::ErrorKind::BadResponse);
    let text = error.to_string();
    assert!(
        text.contains("not an array") && text.contains(&format!("the server sent: {line}")),
        "{text}"
    );
}

#[tokio::test]
async fn conversation_id_goes_out_and_comes_back() {
    let engine = MockEngine::start(|req| {
        let id = req
            .conversation_id()
            .unwrap_or("molc_minted_by_server_0000")
            .to_string();
        MockReply::text("hi").header("X-Conversation-Id", &id)
    })
    .await;
    let scripted =
        MockEngine::scripted(Script::new().conversation_ids().default_answer("ok")).await;
    let minted = run(
        &backend_for(&scripted),
        answer_request("Macaron-V1-Tall", "x"),
    )
    .await
    .1
    .unwrap()
    .conversation_id
    .expect("minted id");
    assert!(
        minted.starts_with("molc_") && minted.len() == 37,
        "{minted}"
    );
    let mut again = answer_request("Macaron-V1-Tall", "x2");
    again.conversation_id = Some(minted.clone());
    let echoed = run(&backend_for(&scripted), again).await.1.unwrap();
    assert_eq!(echoed.conversation_id, Some(minted));

    let mut req = answer_request("Macaron-V1-Tall", "x");
    req.conversation_id = Some("conv_0123456789abcdef".into());
    let done = run(&backend_for(&engine), req).await.1.unwrap();
    assert_eq!(
        done.conversation_id.as_deref(),
        Some("conv_0123456789abcdef")
    );
    assert_eq!(
        engine.chat_requests()[0].conversation_id(),
        Some("conv_0123456789abcdef")
    );
    let fresh = run(
        &backend_for(&engine),
        answer_request("Macaron-V1-Tall", "y"),
    )
    .await
    .1
    .unwrap();
    assert_eq!(
        fresh.conversation_id.as_deref(),
        Some("molc_minted_by_server_0000")
    );
}

#[tokio::test]
async fn models_are_listed_with_their_context_window() {
    let engine = MockEngine::builder()
        .models([("L0", Some(262_144)), ("L1", None)])
        .start(|_req| MockReply::text("unused"))
        .await;
    let backend = backend_for(&engine);
    let models = backend.list_models().await.unwrap();
    assert_eq!(models.len(), 2);
    assert_eq!(
        (models[0].id.as_str(), models[0].context_window),
        ("L0", Some(262_144))
    );
    assert_eq!(models[1].context_window, None);
    assert_eq!(backend.probe().await.unwrap(), models);
    let sent = &engine.requests()[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(backend.describe(), engine.url());

    let locked = MockEngine::builder()
        .models_reply(MockReply::error(401, "missing key", "invalid_api_key"))
        .start(|_req| MockReply::text("unused"))
        .await;
    let error = backend_for(&locked).probe().await.unwrap_err().to_string();
    assert!(
        error.contains("/v1/models") && error.contains("HTTP 401"),
        "{error}"
    );
}

#[tokio::test]
async fn dropping_the_stream_aborts_the_request() {
    let engine = MockEngine::start(|_req| {
        MockReply::text("a long answer that the user interrupts").hang_after(3)
    })
    .await;
    let backend = backend_for(&engine);
    let mut stream = backend.chat(answer_request("L2", "x")).await.unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first, ChatDelta::Text(_)), "{first:?}");
    drop(stream);
    assert!(
        engine
            .wait_for_abandoned_streams(1, Duration::from_secs(10))
            .await,
        "the server saw the client go away"
    );
}

#[test]
fn bad_endpoints_are_rejected_with_a_reason() {
    let error = RemoteBackend::builder("http://127.0.0.1:8000/v1/chat/completions")
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(error.contains("e.g. http://127.0.0.1:8000/v1"), "{error}");
    // Any API root is accepted: Gemini's, or a server's bare root.
    assert!(
        RemoteBackend::builder("https://generativelanguage.googleapis.com/v1beta/openai/")
            .build()
            .is_ok()
    );
    assert!(RemoteBackend::builder("127.0.0.1:8000/v1").build().is_err());
}

#[tokio::test]
async fn mock_script_answers_per_hop_and_model() {
    let script = Script::new()
        .routes(["L2", "L1"])
        .answer("L2", MockReply::tool_call("c1", "read_file", "{}"))
        .answer("L2", "fixed")
        .answer_any("generic")
        .summary("L2", "Fixed the bug.");
    let engine = MockEngine::scripted(script.clone()).await;
    let backend = backend_for(&engine);
    let summary = |model: &str| {
        let mut req = ChatRequest::new(model, vec![ChatMessage::user("summarize")], Hop::Summary);
        req.stream = false;
        req
    };
    let content = |done: Result<ChatCompletion, BackendError>| done.unwrap().message.content;

    assert_eq!(content(run(&backend, route_request()).await.1), "L2");
    let tool = run(&backend, answer_request("L2", "a")).await.1.unwrap();
    assert_eq!(tool.message.tool_calls[0].name, "read_file");
    assert_eq!(
        content(run(&backend, answer_request("L2", "b")).await.1),
        "fixed"
    );
    assert_eq!(
        content(run(&backend, summary("L2")).await.1),
        "Fixed the bug."
    );
    assert_eq!(content(run(&backend, route_request()).await.1), "L1");
    assert_eq!(
        content(run(&backend, answer_request("L1", "c")).await.1),
        "generic"
    );
    assert_eq!(
        content(run(&backend, summary("L1")).await.1),
        "summary by L1"
    );
    assert_eq!(script.remaining(), 0);
    let exhausted = run(&backend, answer_request("L3", "d"))
        .await
        .1
        .unwrap_err();
    assert!(
        exhausted
            .to_string()
            .contains("no reply left for hop 'answer' on model 'L3'"),
        "{exhausted}"
    );
    script.push("answer", Some("L3"), "late addition");
    assert_eq!(
        content(run(&backend, answer_request("L3", "e")).await.1),
        "late addition"
    );
    assert_eq!(
        engine.hop_log()[..4],
        [
            ("route".to_string(), "L0".to_string()),
            ("answer".to_string(), "L2".to_string()),
            ("answer".to_string(), "L2".to_string()),
            ("summary".to_string(), "L2".to_string()),
        ]
    );
    assert_eq!(engine.requests_for_hop("summary").len(), 2);
    assert_eq!(
        engine.requests_for_model("L2")[1]
            .last_user_text()
            .as_deref(),
        Some("b")
    );
}

#[tokio::test]
async fn a_json_answer_to_a_streamed_request_is_replayed_as_deltas() {
    let body = json!({"choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "whole", "reasoning": "why"}}]})
    .to_string();
    let engine = MockEngine::start(move |_req| {
        MockReply::status(200, body.clone()).header("Content-Type", "application/json")
    })
    .await;
    let (deltas, done) = run(&backend_for(&engine), answer_request("L2", "x")).await;
    assert_eq!(
        deltas,
        [
            ChatDelta::Reasoning("why".into()),
            ChatDelta::Text("whole".into())
        ]
    );
    assert_eq!(done.unwrap().message.content, "whole");
}

#[test]
fn mock_engine_serves_synchronous_tests_too() {
    use std::io::{Read, Write};
    let engine = MockEngine::start_blocking(|_req| MockReply::text("unused"));
    let mut socket = std::net::TcpStream::connect(engine.addr()).unwrap();
    socket
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    socket.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"max_model_len\":262144"), "{answer}");
    assert_eq!(engine.requests()[0].path, "/v1/models");
}

/// A server that sends one endless SSE line, or a whole body beyond any answer's size, is a
/// protocol error once the cap is passed, not a process that grows until it is killed.
#[tokio::test]
async fn an_endless_sse_event_or_a_huge_body_is_an_error_not_a_memory_sink() {
    let line = format!("data: {}", "a".repeat(17 << 20));
    let engine = MockEngine::start(move |_req| MockReply::raw_sse(line.clone())).await;
    let (_, done) = run(&backend_for(&engine), answer_request("L2", "x")).await;
    let error = done.unwrap_err();
    assert!(matches!(error, BackendError::Protocol { .. }), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("an SSE event longer than 16 MiB"),
        "{error}"
    );

    let body = "b".repeat(65 << 20);
    let engine = MockEngine::start(move |_req| MockReply::status(200, body.clone())).await;
    let mut req = answer_request("L2", "x");
    req.stream = false;
    let error = run(&backend_for(&engine), req).await.1.unwrap_err();
    assert!(error.to_string().contains("larger than 64 MiB"), "{error}");
}
