//! An in-process OpenAI-compatible mock engine for tests and benchmarks: serves
//! `POST /v1/chat/completions` (SSE or JSON) and `GET /v1/models` on 127.0.0.1, answers every
//! request through a scripted handler, and records every request it receives.
//!
//! Dependency-light on purpose (axum, tokio, serde_json, futures-util; no baton imports): the
//! tests compile it once as `support::mock_engine`, and a `[[bench]]` includes it with `#[path]`
//! (that way only: nothing in tests/ reaches into tools/).
//!
//! ```ignore
//! let engine = MockEngine::scripted(
//!     Script::new()
//!         .route("L2")
//!         .answer("L2", MockReply::text("Done.").with_reasoning("thinking"))
//!         .summary("L2", "Fixed the build."),
//! )
//! .await;
//! // point the code under test at engine.url() ("http://127.0.0.1:PORT/v1") …
//! assert!(engine.requests_for_hop("route")[0].is_route());
//! ```
//!
//! The server runs on its own thread with its own runtime, so it keeps serving while a test
//! blocks (e.g. on an `assert_cmd` child process), and `MockEngine::start_blocking` works from
//! plain `#[test]` functions. Dropping the engine stops the server.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{Value, json};

/// Decides the reply to one request. Called for every chat request (and for `/v1/models` only
/// when no model list reply was configured on the builder — see `MockEngineBuilder`).
pub type Handler = Arc<dyn Fn(&RecordedRequest) -> MockReply + Send + Sync>;

/// Adapters a MoL engine serves, with the context window the reference engines run.
pub const DEFAULT_MODELS: [&str; 4] = ["L0", "L1", "L2", "L3"];
pub const DEFAULT_MAX_MODEL_LEN: u64 = 262_144;

// ---------------------------------------------------------------------------------------------
// Recorded requests
// ---------------------------------------------------------------------------------------------

/// One request as the engine received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    /// Path without the query string, e.g. `/v1/chat/completions`.
    pub path: String,
    /// Header names lower-cased, in arrival order.
    pub headers: Vec<(String, String)>,
    /// Parsed JSON body; `Value::Null` when the body was empty or not JSON.
    pub body: Value,
    /// The body as text (lossy UTF-8), for byte-level assertions.
    pub raw_body: String,
}

impl RecordedRequest {
    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `model` of the body, or "" when absent.
    pub fn model(&self) -> &str {
        self.body.get("model").and_then(Value::as_str).unwrap_or("")
    }

    /// The `X-MOL-Internal-Hop` header (`route`, `answer`, `summary`, `compaction`).
    pub fn hop(&self) -> Option<&str> {
        self.header("x-mol-internal-hop")
    }

    pub fn is_chat(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/chat/completions")
    }

    /// A route hop: marked by the hop header, or (for clients that do not send it) shaped like
    /// one — a choice/regex constraint on a continued `model_id=` prefill.
    pub fn is_route(&self) -> bool {
        if let Some(hop) = self.hop() {
            return hop == "route";
        }
        self.body.get("structured_outputs").is_some() || self.body.get("regex").is_some()
    }

    pub fn is_summary(&self) -> bool {
        self.hop() == Some("summary")
    }

    /// The hop this request is for: the header, else `route` for route-shaped bodies, else
    /// `answer`.
    pub fn hop_or_answer(&self) -> &str {
        match self.hop() {
            Some(h) => h,
            None if self.is_route() => "route",
            None => "answer",
        }
    }

    /// `stream` of the body (false when absent).
    pub fn is_stream(&self) -> bool {
        self.body
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// Whether the client asked for a usage chunk (`stream_options.include_usage`).
    pub fn wants_usage_chunk(&self) -> bool {
        self.body
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `messages` of the body (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// `(role, content text)` of every message.
    pub fn transcript(&self) -> Vec<(String, String)> {
        self.messages()
            .iter()
            .map(|m| {
                let role = m.get("role").and_then(Value::as_str).unwrap_or("");
                (role.to_string(), content_text(m))
            })
            .collect()
    }

    /// The text of the last `user` message.
    pub fn last_user_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .map(content_text)
    }

    /// The text of the first `system` message.
    pub fn system_text(&self) -> Option<String> {
        self.messages()
            .iter()
            .find(|m| m.get("role").and_then(Value::as_str) == Some("system"))
            .map(content_text)
    }

    /// Whether any message's text contains `needle`.
    pub fn mentions(&self, needle: &str) -> bool {
        self.messages()
            .iter()
            .any(|m| content_text(m).contains(needle))
    }

    /// Names of the tools offered (`tools[].function.name`).
    pub fn tool_names(&self) -> Vec<String> {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map(|tools| {
                tools
                    .iter()
                    .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `X-Conversation-Id` request header.
    pub fn conversation_id(&self) -> Option<&str> {
        self.header("x-conversation-id")
    }
}

/// A message's content as text: strings as is, part arrays joined by spaces.
pub fn content_text(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                p.get("text")
                    .or_else(|| p.get("content"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------------

/// One tool call the mock model makes.
#[derive(Debug, Clone)]
pub struct MockToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A model completion, sent as SSE (when the request has `stream: true`) or as one JSON body.
#[derive(Debug, Clone)]
pub struct MockCompletion {
    /// `None` = `content: null` (e.g. a GLM route label that arrives in the reasoning field).
    pub content: Option<String>,
    pub reasoning: Option<String>,
    /// The key reasoning is sent under: `reasoning_content` (default) or `reasoning`.
    pub reasoning_key: String,
    pub tool_calls: Vec<MockToolCall>,
    /// `(prompt_tokens, completion_tokens)`; `None` = estimated from the text (chars / 4).
    pub usage: Option<(u64, u64)>,
    pub cached_tokens: Option<u64>,
    /// Characters per streamed delta (content, reasoning, tool arguments alike).
    pub chunk_chars: usize,
    /// Pause before each streamed frame.
    pub chunk_delay: Duration,
    /// Streaming: send no chunk with a `finish_reason`.
    pub omit_finish: bool,
    /// Streaming: do not send `data: [DONE]`.
    pub omit_done: bool,
    /// Streaming: after this many frames, stop sending but keep the connection open.
    pub hang_after_frames: Option<usize>,
    /// Streaming: send an SSE comment (`: keepalive`) before the first chunk.
    pub keepalive: bool,
}

impl MockCompletion {
    fn new(content: Option<String>) -> Self {
        MockCompletion {
            content,
            reasoning: None,
            reasoning_key: "reasoning_content".into(),
            tool_calls: Vec::new(),
            usage: None,
            cached_tokens: None,
            chunk_chars: 8,
            chunk_delay: Duration::ZERO,
            omit_finish: false,
            omit_done: false,
            hang_after_frames: None,
            keepalive: false,
        }
    }

    /// `tool_calls` when there are tool calls, else `stop`.
    fn effective_finish(&self) -> String {
        if self.tool_calls.is_empty() {
            "stop"
        } else {
            "tool_calls"
        }
        .into()
    }

    fn effective_usage(&self, request: &RecordedRequest) -> Value {
        let (prompt, completion) = self.usage.unwrap_or_else(|| {
            let prompt_chars: usize = request
                .messages()
                .iter()
                .map(|m| content_text(m).len())
                .sum();
            let completion_chars = self.content.as_deref().map_or(0, str::len)
                + self.reasoning.as_deref().map_or(0, str::len)
                + self
                    .tool_calls
                    .iter()
                    .map(|t| t.arguments.len() + t.name.len())
                    .sum::<usize>();
            (
                (prompt_chars / 4).max(1) as u64,
                (completion_chars / 4).max(1) as u64,
            )
        });
        let mut usage = json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        });
        if let Some(cached) = self.cached_tokens {
            usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
        }
        usage
    }
}

/// What the engine does with one request.
#[derive(Debug, Clone)]
pub enum MockReply {
    /// A normal completion (streamed or JSON per the request).
    Completion {
        completion: MockCompletion,
        headers: Vec<(String, String)>,
    },
    /// A plain HTTP answer, e.g. 500, or 429 with `Retry-After`.
    Status {
        status: u16,
        body: String,
        headers: Vec<(String, String)>,
    },
    /// A `200 text/event-stream` with exactly this body (malformed or hand-written SSE).
    RawSse {
        body: String,
        headers: Vec<(String, String)>,
    },
    /// Never answers (no status line, no headers).
    Hang,
    /// Breaks the connection instead of answering: the client sees it drop, as when the
    /// server dies under it.
    Reset,
    /// Waits, then answers with `reply` (simulated engine latency).
    #[allow(dead_code)] // built by `after`, which only the mol_latency bench calls
    Delayed {
        delay: Duration,
        reply: Box<MockReply>,
    },
}

impl From<&str> for MockReply {
    fn from(text: &str) -> Self {
        MockReply::text(text)
    }
}

impl From<String> for MockReply {
    fn from(text: String) -> Self {
        MockReply::text(text)
    }
}

impl MockReply {
    /// A completion whose content is `text`.
    pub fn text(text: impl Into<String>) -> Self {
        MockReply::Completion {
            completion: MockCompletion::new(Some(text.into())),
            headers: Vec::new(),
        }
    }

    /// A route answer: the label as content (same as `text`).
    pub fn label(label: impl Into<String>) -> Self {
        MockReply::text(label)
    }

    /// `content: null` with the text in the reasoning field (GLM's reasoning parser).
    pub fn reasoning_only(reasoning: impl Into<String>) -> Self {
        MockReply::Completion {
            completion: MockCompletion::new(None),
            headers: Vec::new(),
        }
        .with_reasoning(reasoning)
    }

    /// A completion that makes one tool call (no content).
    pub fn tool_call(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        MockReply::Completion {
            completion: MockCompletion::new(None),
            headers: Vec::new(),
        }
        .with_tool_call(id, name, arguments)
    }

    /// An HTTP status with a plain body.
    pub fn status(status: u16, body: impl Into<String>) -> Self {
        MockReply::Status {
            status,
            body: body.into(),
            headers: Vec::new(),
        }
    }

    /// An HTTP status with an OpenAI error envelope `{"error":{message,type,code}}`.
    pub fn error(status: u16, message: &str, code: &str) -> Self {
        let body = json!({
            "error": { "message": message, "type": "invalid_request_error", "code": code, "param": null }
        });
        MockReply::status(status, body.to_string())
    }

    /// The vLLM context overflow answer (HTTP 400).
    pub fn context_overflow() -> Self {
        MockReply::error(
            400,
            "This model's maximum context length is 262144 tokens. However, you requested 300000 tokens in the messages.",
            "context_length_exceeded",
        )
    }

    /// 429 with `Retry-After: secs`.
    pub fn too_many_requests(retry_after_secs: u64) -> Self {
        MockReply::error(429, "rate limited", "rate_limit_exceeded")
            .header("Retry-After", &retry_after_secs.to_string())
    }

    /// A `200 text/event-stream` with exactly this body.
    pub fn raw_sse(body: impl Into<String>) -> Self {
        MockReply::RawSse {
            body: body.into(),
            headers: Vec::new(),
        }
    }

    /// A stream whose chunk is not JSON.
    pub fn malformed_sse() -> Self {
        MockReply::raw_sse(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\n\ndata: this is not json\n\ndata: [DONE]\n\n",
        )
    }

    /// A stream that delivers `text` and ends without a `finish_reason` and without `[DONE]`.
    pub fn truncated(text: impl Into<String>) -> Self {
        MockReply::text(text).no_finish().no_done()
    }

    /// Never answers.
    pub fn hang() -> Self {
        MockReply::Hang
    }

    /// Drops the connection without an answer.
    pub fn reset() -> Self {
        MockReply::Reset
    }

    // ---- modifiers -------------------------------------------------------------------------

    /// Waits `delay` before answering (before the status line): the mol_latency bench's hop
    /// timings; no test needs a slow engine that still answers.
    #[allow(dead_code)]
    pub fn after(self, delay: Duration) -> Self {
        MockReply::Delayed {
            delay,
            reply: Box::new(self),
        }
    }

    /// Adds a response header (e.g. `X-Conversation-Id`, `Retry-After`).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        match &mut self {
            MockReply::Completion { headers, .. }
            | MockReply::Status { headers, .. }
            | MockReply::RawSse { headers, .. } => headers.push((name.into(), value.into())),
            MockReply::Delayed { reply, .. } => {
                let inner = std::mem::replace(reply.as_mut(), MockReply::Hang);
                **reply = inner.header(name, value);
            }
            MockReply::Hang | MockReply::Reset => {}
        }
        self
    }

    pub fn with_reasoning(self, reasoning: impl Into<String>) -> Self {
        let reasoning = reasoning.into();
        self.map_completion(|c| c.reasoning = Some(reasoning))
    }

    /// Sends reasoning under `reasoning` instead of `reasoning_content`.
    pub fn reasoning_key(self, key: &str) -> Self {
        self.map_completion(|c| c.reasoning_key = key.into())
    }

    pub fn with_tool_call(
        self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        let call = MockToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        self.map_completion(|c| c.tool_calls.push(call))
    }

    pub fn usage(self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.map_completion(|c| c.usage = Some((prompt_tokens, completion_tokens)))
    }

    pub fn cached_tokens(self, cached: u64) -> Self {
        self.map_completion(|c| c.cached_tokens = Some(cached))
    }

    pub fn chunk_chars(self, chars: usize) -> Self {
        self.map_completion(|c| c.chunk_chars = chars.max(1))
    }

    pub fn chunk_delay(self, delay: Duration) -> Self {
        self.map_completion(|c| c.chunk_delay = delay)
    }

    pub fn no_finish(self) -> Self {
        self.map_completion(|c| c.omit_finish = true)
    }

    pub fn no_done(self) -> Self {
        self.map_completion(|c| c.omit_done = true)
    }

    /// Streams `frames` SSE frames, then goes silent with the connection open.
    pub fn hang_after(self, frames: usize) -> Self {
        self.map_completion(|c| c.hang_after_frames = Some(frames))
    }

    pub fn keepalive(self) -> Self {
        self.map_completion(|c| c.keepalive = true)
    }

    fn map_completion(mut self, f: impl FnOnce(&mut MockCompletion)) -> Self {
        match &mut self {
            MockReply::Completion { completion, .. } => f(completion),
            MockReply::Delayed { reply, .. } => {
                let inner = std::mem::replace(reply.as_mut(), MockReply::Hang);
                **reply = inner.map_completion(f);
            }
            other => panic!("mock engine: this modifier applies to completions, not {other:?}"),
        }
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Scripts
// ---------------------------------------------------------------------------------------------

/// Answers the replies in order, repeating the last one when they run out.
pub fn sequence(replies: Vec<MockReply>) -> impl Fn(&RecordedRequest) -> MockReply + Send + Sync {
    let queue = Mutex::new(VecDeque::from(replies));
    move |_req| {
        let mut queue = queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.len() > 1 {
            queue
                .pop_front()
                .unwrap_or_else(|| MockReply::status(500, "empty sequence"))
        } else {
            queue
                .front()
                .cloned()
                .unwrap_or_else(|| MockReply::status(500, "mock engine: empty reply sequence"))
        }
    }
}

/// Scripted MoL conversations: reply queues per hop and model.
///
/// Lookup for a request with hop H and model M: the queue for (H, M), then the queue for
/// (H, any model), then the default for (H, M), then the default for H (the built-in summary
/// default is `"summary by M"`), then `otherwise`; when nothing fits the engine answers HTTP 418
/// with a body saying which script entry was missing, so a wrong test fails loudly.
///
/// Cloning shares the queues: keep a clone to push more replies between turns.
///
/// ```ignore
/// let script = Script::new()
///     .routes(["L2", "L1"])                         // first turn → L2, second → L1
///     .answer("L2", MockReply::tool_call("c1", "read_file", r#"{"path":"a"}"#))
///     .answer("L2", "Here is the fix.")
///     .summary("L2", "Fixed a.")
///     .answer("L1", "Booked.");
/// ```
#[derive(Clone, Default)]
pub struct Script {
    inner: Arc<Mutex<ScriptState>>,
}

#[derive(Default)]
struct ScriptState {
    queues: HashMap<(String, Option<String>), VecDeque<MockReply>>,
    defaults: HashMap<(String, Option<String>), MockReply>,
    builtin_summary: bool,
    otherwise: Option<MockReply>,
    /// Proxy-mode behaviour: answer with `X-Conversation-Id` (echoed, or minted).
    conversation_ids: bool,
    minted: u64,
}

impl Script {
    /// An empty script that answers summary hops with `"summary by <model>"`.
    pub fn new() -> Self {
        let script = Script::default();
        script.lock().builtin_summary = true;
        script
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ScriptState> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a reply for `hop` (`route`, `answer`, `summary`, `compaction`) on `model`
    /// (`None` = any model).
    pub fn push(&self, hop: &str, model: Option<&str>, reply: impl Into<MockReply>) {
        self.lock()
            .queues
            .entry((hop.to_string(), model.map(str::to_string)))
            .or_default()
            .push_back(reply.into());
    }

    /// Sets the reply for `hop` on `model` (`None` = any model) once its queues are empty.
    pub fn set_default(&self, hop: &str, model: Option<&str>, reply: impl Into<MockReply>) {
        self.lock()
            .defaults
            .insert((hop.to_string(), model.map(str::to_string)), reply.into());
    }

    /// Queues a route label (answered as content).
    pub fn route(self, label: &str) -> Self {
        self.push("route", None, MockReply::label(label));
        self
    }

    /// Queues several route labels, one per route hop.
    pub fn routes<'a>(self, labels: impl IntoIterator<Item = &'a str>) -> Self {
        for label in labels {
            self.push("route", None, MockReply::label(label));
        }
        self
    }

    /// Queues any reply for the next route hop (an error, garbage, a delay …).
    pub fn route_reply(self, reply: impl Into<MockReply>) -> Self {
        self.push("route", None, reply);
        self
    }

    /// The label for route hops once the queue is empty.
    pub fn default_route(self, label: &str) -> Self {
        self.set_default("route", None, MockReply::label(label));
        self
    }

    /// Queues the next answer of `model` (`"L2"`, or the model name in single/proxy mode).
    pub fn answer(self, model: &str, reply: impl Into<MockReply>) -> Self {
        self.push("answer", Some(model), reply);
        self
    }

    /// Queues the next answer of whichever model is asked.
    pub fn answer_any(self, reply: impl Into<MockReply>) -> Self {
        self.push("answer", None, reply);
        self
    }

    /// The answer of every model once the answer queues are empty.
    pub fn default_answer(self, reply: impl Into<MockReply>) -> Self {
        self.set_default("answer", None, reply);
        self
    }

    /// Queues the next summary of `model`.
    pub fn summary(self, model: &str, reply: impl Into<MockReply>) -> Self {
        self.push("summary", Some(model), reply);
        self
    }

    /// The summary of every model once the summary queues are empty (replaces the built-in
    /// `"summary by <model>"`).
    pub fn default_summary(self, reply: impl Into<MockReply>) -> Self {
        self.set_default("summary", None, reply);
        self
    }

    /// Behaves like the MoL proxy towards `X-Conversation-Id`: every reply carries the header,
    /// echoing the request's or minting `molc_<32 hex>` when there was none.
    pub fn conversation_ids(self) -> Self {
        self.lock().conversation_ids = true;
        self
    }

    /// The reply when nothing else is scripted (instead of an HTTP 418).
    pub fn otherwise(self, reply: impl Into<MockReply>) -> Self {
        self.lock().otherwise = Some(reply.into());
        self
    }

    /// How many scripted replies are still queued (all hops).
    pub fn remaining(&self) -> usize {
        self.lock().queues.values().map(VecDeque::len).sum()
    }

    /// The reply for one request (pops the matching queue).
    pub fn reply(&self, req: &RecordedRequest) -> MockReply {
        let hop = req.hop_or_answer().to_string();
        let model = req.model().to_string();
        let mut state = self.lock();
        let mut reply = Self::pick(&mut state, &hop, &model);
        if state.conversation_ids {
            let id = match req.conversation_id() {
                Some(id) => id.to_string(),
                None => {
                    state.minted += 1;
                    format!("molc_{:032x}", state.minted)
                }
            };
            reply = reply.header("X-Conversation-Id", &id);
        }
        reply
    }

    fn pick(state: &mut ScriptState, hop: &str, model: &str) -> MockReply {
        let keys = [
            (hop.to_string(), Some(model.to_string())),
            (hop.to_string(), None),
        ];
        for key in &keys {
            if let Some(reply) = state.queues.get_mut(key).and_then(VecDeque::pop_front) {
                return reply;
            }
        }
        for key in &keys {
            if let Some(reply) = state.defaults.get(key) {
                return reply.clone();
            }
        }
        if hop == "summary" && state.builtin_summary {
            return MockReply::text(format!("summary by {model}"));
        }
        if let Some(reply) = &state.otherwise {
            return reply.clone();
        }
        // 418: not retried by clients (a 5xx would be), and unmistakably a test-script gap.
        MockReply::error(
            418,
            &format!("mock engine script: no reply left for hop '{hop}' on model '{model}'"),
            "mock_script_exhausted",
        )
    }
}

// ---------------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------------

struct Shared {
    handler: Handler,
    requests: Mutex<Vec<RecordedRequest>>,
    models: Vec<(String, Option<u64>)>,
    models_reply: Option<MockReply>,
    abandoned_streams: AtomicUsize,
}

/// Configures the model list before starting.
pub struct MockEngineBuilder {
    models: Vec<(String, Option<u64>)>,
    models_reply: Option<MockReply>,
}

impl MockEngineBuilder {
    /// The ids (and `max_model_len`) `/v1/models` lists. Default: L0–L3 with 262144.
    pub fn models<'a>(mut self, models: impl IntoIterator<Item = (&'a str, Option<u64>)>) -> Self {
        self.models = models
            .into_iter()
            .map(|(id, len)| (id.to_string(), len))
            .collect();
        self
    }

    /// Answers `/v1/models` with this reply instead of the list (e.g. a 401 or 500).
    pub fn models_reply(mut self, reply: MockReply) -> Self {
        self.models_reply = Some(reply);
        self
    }

    pub async fn start(
        self,
        handler: impl Fn(&RecordedRequest) -> MockReply + Send + Sync + 'static,
    ) -> MockEngine {
        self.start_blocking(handler)
    }

    pub fn start_blocking(
        self,
        handler: impl Fn(&RecordedRequest) -> MockReply + Send + Sync + 'static,
    ) -> MockEngine {
        let shared = Arc::new(Shared {
            handler: Arc::new(handler),
            requests: Mutex::new(Vec::new()),
            models: self.models,
            models_reply: self.models_reply,
            abandoned_streams: AtomicUsize::new(0),
        });
        MockEngine::spawn(shared)
    }
}

/// A running mock engine. Stops when dropped.
pub struct MockEngine {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl MockEngine {
    pub fn builder() -> MockEngineBuilder {
        MockEngineBuilder {
            models: DEFAULT_MODELS
                .iter()
                .map(|id| (id.to_string(), Some(DEFAULT_MAX_MODEL_LEN)))
                .collect(),
            models_reply: None,
        }
    }

    /// Starts a server answering every chat request with `handler`.
    pub async fn start(
        handler: impl Fn(&RecordedRequest) -> MockReply + Send + Sync + 'static,
    ) -> MockEngine {
        MockEngine::builder().start_blocking(handler)
    }

    /// `start` for synchronous tests.
    pub fn start_blocking(
        handler: impl Fn(&RecordedRequest) -> MockReply + Send + Sync + 'static,
    ) -> MockEngine {
        MockEngine::builder().start_blocking(handler)
    }

    /// Starts a server answering from a `Script`.
    pub async fn scripted(script: Script) -> MockEngine {
        MockEngine::scripted_blocking(script)
    }

    pub fn scripted_blocking(script: Script) -> MockEngine {
        MockEngine::builder().start_blocking(move |req| script.reply(req))
    }

    fn spawn(shared: Arc<Shared>) -> MockEngine {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("mock engine: cannot bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("mock engine: cannot make the listener non-blocking");
        let addr = listener
            .local_addr()
            .expect("mock engine: no local address");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server_state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("mock-engine".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("mock engine: cannot build a tokio runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("mock engine: cannot register the listener");
                    let app = axum::Router::new().fallback(move |req: Request| {
                        let state = server_state.clone();
                        async move { serve_request(state, req).await }
                    });
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = stop_rx => {}
                    }
                });
                // Hanging replies never finish: do not wait for them.
                runtime.shutdown_background();
            })
            .expect("mock engine: cannot spawn its thread");
        MockEngine {
            addr,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Base URL ending in `/v1`, e.g. `http://127.0.0.1:40123/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far, in arrival order (including `/v1/models`).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Only `POST /v1/chat/completions` requests.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(RecordedRequest::is_chat)
            .collect()
    }

    /// Chat requests of one hop (`route`, `answer` — also requests without a hop header that are
    /// not route-shaped —, `summary`, `compaction`).
    pub fn requests_for_hop(&self, hop: &str) -> Vec<RecordedRequest> {
        self.chat_requests()
            .into_iter()
            .filter(|r| r.hop_or_answer() == hop)
            .collect()
    }

    /// Chat requests sent to one model (adapter).
    pub fn requests_for_model(&self, model: &str) -> Vec<RecordedRequest> {
        self.chat_requests()
            .into_iter()
            .filter(|r| r.model() == model)
            .collect()
    }

    /// `(hop, model)` of every chat request in order, for compact assertions such as
    /// `[("route", "L0"), ("answer", "L2"), ("summary", "L2")]`.
    pub fn hop_log(&self) -> Vec<(String, String)> {
        self.chat_requests()
            .iter()
            .map(|r| (r.hop_or_answer().to_string(), r.model().to_string()))
            .collect()
    }

    pub fn clear_requests(&self) {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Streamed replies whose client went away before the stream ended (cancellation).
    pub fn abandoned_streams(&self) -> usize {
        self.shared.abandoned_streams.load(Ordering::SeqCst)
    }

    /// Waits until `abandoned_streams() >= n` or `limit` passed; returns whether it did.
    pub async fn wait_for_abandoned_streams(&self, n: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.abandoned_streams() >= n {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for MockEngine {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve_request(shared: Arc<Shared>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 64 * 1024 * 1024)
        .await
        .unwrap_or_default();
    let raw_body = String::from_utf8_lossy(&bytes).into_owned();
    let recorded = RecordedRequest {
        method: parts.method.as_str().to_string(),
        path: parts.uri.path().to_string(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_ascii_lowercase(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        raw_body,
    };
    shared
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(recorded.clone());

    let path = recorded.path.trim_end_matches('/');
    // The same API under Gemini's OpenAI-compatible root, for endpoints that are not `…/v1`.
    let path = match path.strip_prefix("/v1beta/openai") {
        Some(rest) => format!("/v1{rest}"),
        None => path.to_string(),
    };
    let path = path.as_str();
    let reply = if recorded.method == "GET" && path == "/v1/models" {
        match &shared.models_reply {
            Some(reply) => reply.clone(),
            None => return models_response(&shared.models),
        }
    } else if recorded.method == "POST" && path == "/v1/chat/completions" {
        (shared.handler)(&recorded)
    } else {
        MockReply::error(
            404,
            &format!("no route for {} {}", recorded.method, recorded.path),
            "endpoint_not_found",
        )
    };
    render_reply(&shared, reply, &recorded).await
}

fn models_response(models: &[(String, Option<u64>)]) -> Response {
    let data: Vec<Value> = models
        .iter()
        .map(|(id, len)| {
            let mut entry =
                json!({ "id": id, "object": "model", "created": 0, "owned_by": "mock" });
            if let Some(len) = len {
                entry["max_model_len"] = json!(len);
            }
            entry
        })
        .collect();
    json_response(
        200,
        json!({ "object": "list", "data": data }).to_string(),
        &[],
    )
}

async fn render_reply(
    shared: &Arc<Shared>,
    mut reply: MockReply,
    req: &RecordedRequest,
) -> Response {
    loop {
        match reply {
            MockReply::Delayed {
                delay,
                reply: inner,
            } => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            MockReply::Hang => std::future::pending::<()>().await,
            MockReply::Reset => {
                // A body that fails at once makes the server abort the connection.
                let broken = futures_util::stream::once(async {
                    Err::<Bytes, std::io::Error>(std::io::Error::other("mock engine: reset"))
                });
                return with_headers(200, "application/json", Body::from_stream(broken), &[]);
            }
            MockReply::Status {
                status,
                body,
                headers,
            } => {
                let content_type = if body.trim_start().starts_with('{') {
                    "application/json"
                } else {
                    "text/plain"
                };
                return with_headers(status, content_type, Body::from(body), &headers);
            }
            MockReply::RawSse { body, headers } => {
                return with_headers(200, "text/event-stream", Body::from(body), &headers);
            }
            MockReply::Completion {
                completion,
                headers,
            } => {
                if req.is_stream() {
                    let frames = sse_frames(&completion, req);
                    let body = frame_stream(shared.clone(), frames, &completion);
                    return with_headers(200, "text/event-stream", body, &headers);
                }
                let body = completion_json(&completion, req).to_string();
                return json_response(200, body, &headers);
            }
        }
    }
}

fn json_response(status: u16, body: String, headers: &[(String, String)]) -> Response {
    with_headers(status, "application/json", Body::from(body), headers)
}

fn with_headers(
    status: u16,
    content_type: &str,
    body: Body,
    headers: &[(String, String)],
) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let map = response.headers_mut();
    map.insert(
        "content-type",
        HeaderValue::from_str(content_type).unwrap_or(HeaderValue::from_static("text/plain")),
    );
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            map.insert(name, value);
        }
    }
    response
}

fn completion_json(c: &MockCompletion, req: &RecordedRequest) -> Value {
    let mut message = json!({ "role": "assistant", "content": c.content });
    if let Some(reasoning) = &c.reasoning {
        message[c.reasoning_key.as_str()] = json!(reasoning);
    }
    if !c.tool_calls.is_empty() {
        message["tool_calls"] = Value::Array(
            c.tool_calls
                .iter()
                .map(|t| {
                    json!({ "id": t.id, "type": "function", "function": { "name": t.name, "arguments": t.arguments } })
                })
                .collect(),
        );
    }
    json!({
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 0,
        "model": req.model(),
        "choices": [{ "index": 0, "message": message, "finish_reason": c.effective_finish() }],
        "usage": c.effective_usage(req),
    })
}

/// The SSE frames of a streamed completion, each a complete `data: …\n\n` (or comment) frame.
fn sse_frames(c: &MockCompletion, req: &RecordedRequest) -> Vec<String> {
    let model = req.model();
    let chunk = |delta: Value, finish: Option<String>| {
        let body = json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        });
        format!("data: {body}\n\n")
    };
    let mut frames = Vec::new();
    if c.keepalive {
        frames.push(": keepalive\n\n".to_string());
    }
    frames.push(chunk(json!({ "role": "assistant", "content": "" }), None));
    if let Some(reasoning) = &c.reasoning {
        for piece in split_chars(reasoning, c.chunk_chars) {
            frames.push(chunk(json!({ c.reasoning_key.as_str(): piece }), None));
        }
    }
    if let Some(content) = &c.content {
        for piece in split_chars(content, c.chunk_chars) {
            frames.push(chunk(json!({ "content": piece }), None));
        }
    }
    for (index, call) in c.tool_calls.iter().enumerate() {
        frames.push(chunk(
            json!({ "tool_calls": [{
                "index": index, "id": call.id, "type": "function",
                "function": { "name": call.name, "arguments": "" }
            }] }),
            None,
        ));
        for piece in split_chars(&call.arguments, c.chunk_chars) {
            frames.push(chunk(
                json!({ "tool_calls": [{ "index": index, "function": { "arguments": piece } }] }),
                None,
            ));
        }
    }
    if !c.omit_finish {
        frames.push(chunk(json!({}), Some(c.effective_finish())));
    }
    if req.wants_usage_chunk() {
        let body = json!({
            "id": "chatcmpl-mock",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [],
            "usage": c.effective_usage(req),
        });
        frames.push(format!("data: {body}\n\n"));
    }
    if !c.omit_done {
        frames.push("data: [DONE]\n\n".to_string());
    }
    frames
}

fn split_chars(text: &str, chars: usize) -> Vec<String> {
    let chars_vec: Vec<char> = text.chars().collect();
    chars_vec
        .chunks(chars.max(1))
        .map(|c| c.iter().collect())
        .collect()
}

/// Counts a stream as abandoned when the client drops it before the last frame was sent.
struct StreamGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.abandoned_streams.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn frame_stream(shared: Arc<Shared>, frames: Vec<String>, c: &MockCompletion) -> Body {
    let delay = c.chunk_delay;
    let hang_after = c.hang_after_frames;
    let state = (
        VecDeque::from(frames),
        0usize,
        StreamGuard {
            shared,
            finished: false,
        },
    );
    let stream =
        futures_util::stream::unfold(state, move |(mut frames, sent, mut guard)| async move {
            if hang_after.is_some_and(|limit| sent >= limit) {
                std::future::pending::<()>().await;
            }
            let frame = frames.pop_front()?;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if frames.is_empty() {
                guard.finished = true;
            }
            Some((
                Ok::<Bytes, std::convert::Infallible>(Bytes::from(frame)),
                (frames, sent + 1, guard),
            ))
        });
    Body::from_stream(stream)
}
