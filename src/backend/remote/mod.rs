//! The OpenAI-compatible remote backend: Chat Completions over HTTP (reqwest, rustls), SSE
//! streaming, retries before any output, per-request and idle-stream timeouts.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use baton::backend::remote::RemoteBackend;
//! use baton::protocol::RouteConstraint;
//! let backend = RemoteBackend::builder("http://127.0.0.1:8000/v1")
//!     .api_key(std::env::var("BATON_API_KEY").ok())
//!     .dialect(RouteConstraint::Choice)
//!     .build()?;
//! let models = backend.probe().await?;
//! # Ok(()) }
//! ```
//!
//! Submodules: `config` (settings, URL validation), `wire` (JSON bodies), `sse` (event parser),
//! `assemble` (stream chunks → deltas and the final message), `retry` (backoff), `failure`
//! (errors a user can act on).

pub(crate) mod assemble;
pub(crate) mod config;
pub(crate) mod failure;
pub(crate) mod retry;
pub(crate) mod sse;
pub(crate) mod wire;

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

pub use config::{RemoteConfig, RemoteConfigError};

use crate::protocol::RouteConstraint;
pub use retry::RetryNotice;

use self::assemble::{ChunkError, StreamAssembler};
use self::failure::{ErrorContext, error_chain};
use self::retry::{QUICK_RETRY, RetryPolicy, is_retryable_status};
use self::sse::{SseEvent, SseParser};
use super::{
    BackendError, ChatBackend, ChatCompletion, ChatDelta, ChatRequest, ChatStream, ModelInfo,
};
use crate::protocol::Hop;

/// Called before each retry.
pub type RetryObserver = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

/// How long the model list asked for after a 404 may take: it only decorates the error.
const MODELS_AFTER_404_TIMEOUT: Duration = Duration::from_secs(3);

/// How many served model names a 404 error lists.
const MODELS_LISTED: usize = 12;

/// Header naming the MoL hop of a request (the reference sends it on the route hop).
pub const HOP_HEADER: &str = "X-MOL-Internal-Hop";
/// Header carrying the proxy-mode conversation id, both ways.
pub const CONVERSATION_HEADER: &str = "X-Conversation-Id";

/// Builds a `RemoteBackend`; defaults are those of `RemoteConfig::new`.
pub struct RemoteBackendBuilder {
    config: RemoteConfig,
    on_retry: Option<RetryObserver>,
}

impl RemoteBackendBuilder {
    /// The key sent as `Authorization: Bearer …` (surrounding whitespace, e.g. the newline of
    /// a key file, is dropped; an empty key means none).
    pub fn api_key(mut self, key: Option<String>) -> Self {
        self.config.api_key = key;
        self
    }
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        self.config.idle_timeout = timeout;
        self
    }
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.config.max_retries = retries;
        self
    }
    /// First backoff and the largest one.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.config.backoff_base = base;
        self.config.backoff_max = max;
        self
    }
    pub fn retry_after_cap(mut self, cap: Duration) -> Self {
        self.config.retry_after_cap = cap;
        self
    }
    pub fn dialect(mut self, dialect: RouteConstraint) -> Self {
        self.config.dialect = dialect;
        self
    }
    /// Reports every retry (e.g. to show "retrying in 2 s" in the UI).
    pub fn on_retry(mut self, observer: impl Fn(&RetryNotice) + Send + Sync + 'static) -> Self {
        self.on_retry = Some(Arc::new(observer));
        self
    }
    pub fn build(self) -> Result<RemoteBackend, RemoteConfigError> {
        RemoteBackend::from_config(self.config, self.on_retry)
    }
}

/// A Chat Completions endpoint (vLLM, SGLang, a MoL proxy, any OpenAI-compatible server).
#[derive(Clone)]
pub struct RemoteBackend {
    inner: Arc<Inner>,
}

struct Inner {
    config: RemoteConfig,
    client: reqwest::Client,
    chat_url: String,
    models_url: String,
    /// Everyone told of a retry: the builder's observer and those added later (the agent's).
    observers: RwLock<Vec<RetryObserver>>,
    /// The server ended a stream without one data event and answered the same request
    /// whole: it cannot stream such requests (llama-cpp-python refuses to stream tool calls
    /// with `tool_choice: auto` and closes the stream), so they are sent unstreamed and
    /// replayed as deltas from then on. Indexed by whether the request offers tools: a server
    /// that cannot stream tool calls still streams plain answers.
    streams_unusable: [std::sync::atomic::AtomicBool; 2],
}

impl std::fmt::Debug for RemoteBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBackend")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl RemoteBackend {
    /// Starts a builder for the endpoint `base_url` (ending in `/v1`).
    pub fn builder(base_url: impl Into<String>) -> RemoteBackendBuilder {
        RemoteBackendBuilder {
            config: RemoteConfig::new(base_url),
            on_retry: None,
        }
    }

    /// A backend from a complete configuration.
    pub fn new(config: RemoteConfig) -> Result<Self, RemoteConfigError> {
        Self::from_config(config, None)
    }

    fn from_config(
        mut config: RemoteConfig,
        on_retry: Option<RetryObserver>,
    ) -> Result<Self, RemoteConfigError> {
        config.base_url = config::validate_base_url(&config.base_url)?;
        config.api_key = config::normalize_api_key(config.api_key.take())?;
        crate::protocol::install_tls_provider();
        // A redirect is never followed: a 307/308 would re-send the whole prompt to the origin
        // the server names (a hostile or misconfigured proxy's choice). It is an HTTP error.
        let mut client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("baton/", env!("CARGO_PKG_VERSION")));
        // A local engine must not be sent through an HTTP(S)_PROXY from the environment.
        if config::is_loopback(&config.base_url) {
            client = client.no_proxy();
        }
        let client = client
            .build()
            .map_err(|e| RemoteConfigError::Client(error_chain(&e)))?;
        Ok(RemoteBackend {
            inner: Arc::new(Inner {
                chat_url: format!("{}/chat/completions", config.base_url),
                models_url: format!("{}/models", config.base_url),
                config,
                client,
                observers: RwLock::new(on_retry.into_iter().collect()),
                streams_unusable: Default::default(),
            }),
        })
    }

    pub fn config(&self) -> &RemoteConfig {
        &self.inner.config
    }

    /// Adds an observer of every retry, besides the builder's (clones share them).
    pub fn add_retry_observer(&self, observer: RetryObserver) {
        self.inner
            .observers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(observer);
    }

    /// Checks the endpoint for `baton doctor`: reachable, authorised, and which models it
    /// serves.
    pub async fn probe(&self) -> Result<Vec<ModelInfo>, BackendError> {
        self.fetch_models().await
    }

    async fn fetch_models(&self) -> Result<Vec<ModelInfo>, BackendError> {
        let inner = &self.inner;
        // There is no "models" hop; errors say "answer hop" and name the /models URL.
        let ctx = inner.error_context(Hop::Answer, &inner.models_url);
        let (response, deadline) = inner
            .send_with_retries(&ctx, || {
                inner.authorised(inner.client.get(&inner.models_url))
            })
            .await?;
        let body = read_body(response, &ctx, deadline, inner.config.request_timeout).await?;
        let json: Value = serde_json::from_str(&body).map_err(|e| {
            ctx.protocol(format!(
                "the model list is not JSON ({e}): {}",
                failure::truncate(&body)
            ))
        })?;
        wire::parse_models(&json).map_err(|m| ctx.protocol(m.to_string()))
    }

    /// Sends `req`; `whole`: asks for one JSON body even when `req` streams (its deltas are
    /// then replayed from the completion).
    async fn start_chat(&self, req: ChatRequest, whole: bool) -> Result<ChatStream, BackendError> {
        let streamed = req.stream && !whole;
        let sent = self.send_chat(&req, streamed).await?;
        // Some servers ignore `stream: true` and answer with one JSON body: replay it as deltas.
        if !streamed || sent.answered_json {
            let items = self.whole_answer(sent, req.stream).await?;
            return Ok(Box::pin(futures_util::stream::iter(items)));
        }
        let state = StreamState {
            body: Box::pin(sent.response.bytes_stream()),
            parser: SseParser::new(),
            assembler: Some(StreamAssembler::new()),
            pending: VecDeque::new(),
            ended: false,
            ctx: sent.ctx,
            idle: self.inner.config.idle_timeout,
            started: sent.started,
            ttft: None,
            conversation_id: sent.conversation_id,
            received: 0,
            request_bytes: sent.request_bytes,
            data_events: 0,
            unstreamed_retry: Some((self.clone(), req)),
        };
        Ok(Box::pin(futures_util::stream::unfold(state, next_item)))
    }

    /// Sends `req` (as a stream or not, whatever `req.stream` says) until a 2xx arrives.
    async fn send_chat(&self, req: &ChatRequest, streamed: bool) -> Result<Sent, BackendError> {
        let inner = &self.inner;
        let started = Instant::now();
        let ctx = inner.error_context(req.hop, &inner.chat_url);
        let mut body = wire::request_body(req, inner.config.dialect);
        if !streamed && let Some(fields) = body.as_object_mut() {
            fields.insert("stream".into(), Value::Bool(false));
            fields.remove("stream_options");
        }
        let body = Bytes::from(body.to_string());
        // The body as sent stands for the request's text when a usage must be estimated.
        let request_bytes = body.len();
        tracing::debug!(hop = %req.hop, model = %req.model, url = %inner.chat_url, stream = streamed, "chat request");
        let sent = inner
            .send_with_retries(&ctx, || {
                let mut builder = inner
                    .client
                    .post(&inner.chat_url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .header(HOP_HEADER, req.hop.as_str())
                    .body(body.clone());
                if streamed {
                    builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
                }
                if let Some(id) = &req.conversation_id {
                    builder = builder.header(CONVERSATION_HEADER, id);
                }
                inner.authorised(builder)
            })
            .await;
        let (response, deadline) = match sent {
            Err(BackendError::Http {
                hop,
                url,
                status: 404,
                body,
            }) => {
                // A 404 on the chat URL is nearly always a model name the server does not
                // serve: say which names it does, so the fix is one look away.
                let body = match inner.served_models().await {
                    Some(names) => format!("{body} (the server serves: {names})"),
                    // Neither answers: the API root itself is likely wrong.
                    None if config::is_unusual_root(&inner.config.base_url) => format!(
                        "{body} ({} does not answer either: most servers serve their API \
                         under /v1, e.g. {}/v1)",
                        inner.models_url, inner.config.base_url
                    ),
                    None => body,
                };
                return Err(BackendError::Http {
                    hop,
                    url,
                    status: 404,
                    body,
                });
            }
            other => other?,
        };
        let conversation_id = response
            .headers()
            .get(CONVERSATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let answered_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        Ok(Sent {
            response,
            deadline,
            ctx,
            started,
            request_bytes,
            conversation_id,
            answered_json,
        })
    }

    /// Reads a whole (not streamed) answer: its deltas replayed when `replay`, then the
    /// completion, with a usage estimated where the server reported none.
    async fn whole_answer(
        &self,
        sent: Sent,
        replay: bool,
    ) -> Result<Vec<Result<ChatDelta, BackendError>>, BackendError> {
        let timeout = self.inner.config.request_timeout;
        let body = read_body(sent.response, &sent.ctx, sent.deadline, timeout).await?;
        let mut completion = parse_full_body(&body, &sent.ctx, sent.started, sent.conversation_id)?;
        completion.usage = completion.usage.or_else(|| {
            Some(crate::backend::estimated_usage(
                sent.request_bytes,
                &completion.message,
            ))
        });
        let mut items: Vec<Result<ChatDelta, BackendError>> = Vec::new();
        if replay {
            items.extend(replayed_deltas(&completion).into_iter().map(Ok));
        }
        items.push(Ok(ChatDelta::Completed(completion)));
        Ok(items)
    }
}

/// A chat request the server accepted: its response, not read yet.
struct Sent {
    response: reqwest::Response,
    deadline: Instant,
    ctx: ErrorContext,
    started: Instant,
    request_bytes: usize,
    conversation_id: Option<String>,
    answered_json: bool,
}

impl Inner {
    /// The served model ids, comma-separated, from one quick `GET /models` without retries;
    /// `None` when that fails too (then the endpoint itself is likely wrong).
    async fn served_models(&self) -> Option<String> {
        let request = self.authorised(self.client.get(&self.models_url)).send();
        let response = tokio::time::timeout(MODELS_AFTER_404_TIMEOUT, request)
            .await
            .ok()?
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        let body = tokio::time::timeout(MODELS_AFTER_404_TIMEOUT, response.text())
            .await
            .ok()?
            .ok()?;
        let json: Value = serde_json::from_str(&body).ok()?;
        let models = wire::parse_models(&json).ok()?;
        if models.is_empty() {
            return None;
        }
        let mut names: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
        let more = names.len().saturating_sub(MODELS_LISTED);
        names.truncate(MODELS_LISTED);
        let mut text = names.join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        Some(text)
    }

    fn error_context(&self, hop: Hop, url: &str) -> ErrorContext {
        ErrorContext::new(hop, url.to_string(), self.config.api_key.clone())
    }

    fn authorised(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.config.api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.config.max_retries,
            base: self.config.backoff_base,
            max: self.config.backoff_max,
            retry_after_cap: self.config.retry_after_cap,
        }
    }

    /// Tells every observer of `notice`.
    fn notify(&self, notice: &RetryNotice) {
        // Cloned out so no observer runs under the lock.
        let observers = self
            .observers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        for observer in &observers {
            observer(notice);
        }
    }

    /// Sends until a 2xx arrives; returns it with the deadline of that attempt (the request
    /// timeout counts per attempt). Retries connect errors, 429 and 5xx; everything happens
    /// before a single byte of output reached the caller, so a retry can never duplicate text.
    async fn send_with_retries(
        &self,
        ctx: &ErrorContext,
        build: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<(reqwest::Response, Instant), BackendError> {
        let policy = self.policy();
        let request_timeout = self.config.request_timeout;
        let mut retry = 0u32;
        loop {
            let deadline = Instant::now() + request_timeout;
            let sent = tokio::time::timeout_at(deadline.into(), build().send()).await;
            let (failure, delay) = match sent {
                Err(_) => {
                    return Err(ctx.timeout(
                        request_timeout.as_secs(),
                        "request timeout: waiting for the response headers",
                    ));
                }
                Ok(Err(error)) => {
                    let message = error_chain(&error);
                    if retry >= connection_retries(&error, policy.max_retries) {
                        if error.is_timeout() && error.is_connect() {
                            return Err(ctx.timeout(
                                self.config.connect_timeout.as_secs(),
                                format!("connecting: {}", ctx.scrub(&message)),
                            ));
                        }
                        return Err(ctx.connect(&message));
                    }
                    let delay = if error.is_connect() {
                        QUICK_RETRY
                    } else {
                        policy.backoff(retry + 1)
                    };
                    (ctx.scrub(&message), delay)
                }
                Ok(Ok(response)) => {
                    let status = response.status().as_u16();
                    if response.status().is_success() {
                        return Ok((response, deadline));
                    }
                    let retry_after = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let body = read_body(response, ctx, deadline, request_timeout)
                        .await
                        .unwrap_or_default();
                    let error = ctx.http(status, &body);
                    if !is_retryable_status(status) || retry >= policy.max_retries {
                        return Err(error);
                    }
                    let reason = format!(
                        "HTTP {status}: {}",
                        ctx.scrub(&failure::summarize_body(&body))
                    );
                    (reason, policy.delay(retry + 1, retry_after.as_deref()))
                }
            };
            retry += 1;
            tracing::warn!(hop = %ctx.hop, url = %ctx.url, retry, delay_ms = delay.as_millis() as u64, reason = %failure, "retrying");
            // The model list has no hop of its own: name it, not the hop its errors borrow.
            let what = if ctx.url == self.models_url {
                "model list".to_string()
            } else {
                format!("{} hop", ctx.hop)
            };
            let notice = RetryNotice {
                hop: ctx.hop,
                what,
                retry,
                max_retries: policy.max_retries,
                delay,
                reason: failure,
            };
            self.notify(&notice);
            tokio::time::sleep(delay).await;
        }
    }
}

/// How many retries a request that failed before any answer gets. A refused connection fails
/// at once (nothing listens there; the backoff's seconds will not change that), as does a
/// connect timeout (it already waited the connect timeout); another connect failure (DNS, TLS,
/// a reset during the handshake) gets one quick retry; a connection that broke after it was
/// made (a server restarting mid-request) gets the full policy.
fn connection_retries(error: &reqwest::Error, max_retries: u32) -> u32 {
    if error.is_connect() {
        if error.is_timeout() || is_connection_refused(error) {
            0
        } else {
            max_retries.min(1)
        }
    } else if error.is_request() {
        max_retries
    } else {
        0
    }
}

/// Whether an I/O error in `error`'s causes is a refused connection.
fn is_connection_refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = current.source();
    }
    false
}

/// Reads a whole body as text before `deadline`.
async fn read_body(
    response: reqwest::Response,
    ctx: &ErrorContext,
    deadline: Instant,
    limit: Duration,
) -> Result<String, BackendError> {
    let read = async {
        let mut response = response;
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if bytes.len().saturating_add(chunk.len()) > MAX_BODY_BYTES {
                return Ok(None);
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok::<_, reqwest::Error>(Some(bytes))
    };
    match tokio::time::timeout_at(deadline.into(), read).await {
        Err(_) => Err(ctx.timeout(
            limit.as_secs(),
            "request timeout: reading the response body",
        )),
        Ok(Err(e)) => Err(ctx.connect(&format!(
            "the connection broke while reading the response: {}",
            error_chain(&e)
        ))),
        Ok(Ok(None)) => Err(ctx.protocol(format!(
            "the response body is larger than {} MiB",
            MAX_BODY_BYTES >> 20
        ))),
        Ok(Ok(Some(bytes))) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

fn parse_full_body(
    body: &str,
    ctx: &ErrorContext,
    started: Instant,
    conversation_id: Option<String>,
) -> Result<ChatCompletion, BackendError> {
    let json: Value = serde_json::from_str(body).map_err(|e| {
        ctx.protocol(format!(
            "the response is not JSON ({e}): {}",
            failure::truncate(body)
        ))
    })?;
    if let Some(error) = json.get("error").filter(|e| !e.is_null()) {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_string);
        let code = error.get("code").and_then(Value::as_str);
        return Err(ctx.server_error(&message, code));
    }
    let parsed = wire::parse_completion(&json)
        .map_err(|m| ctx.protocol(format!("{m}; the server sent: {}", line_excerpt(body))))?;
    Ok(ChatCompletion {
        message: parsed.message,
        finish_reason: parsed.finish_reason,
        usage: parsed.usage,
        ttft: None,
        latency: started.elapsed(),
        conversation_id,
    })
}

/// The deltas a stream would have carried for `completion`.
fn replayed_deltas(completion: &ChatCompletion) -> Vec<ChatDelta> {
    let message = &completion.message;
    let mut deltas = Vec::new();
    if let Some(reasoning) = message.reasoning.as_ref().filter(|r| !r.is_empty()) {
        deltas.push(ChatDelta::Reasoning(reasoning.clone()));
    }
    if !message.content.is_empty() {
        deltas.push(ChatDelta::Text(message.content.clone()));
    }
    for (index, call) in message.tool_calls.iter().enumerate() {
        deltas.push(ChatDelta::ToolCallStarted {
            index,
            id: call.id.clone(),
            name: call.name.clone(),
        });
        if !call.arguments.is_empty() {
            deltas.push(ChatDelta::ToolCallArguments {
                index,
                fragment: call.arguments.clone(),
            });
        }
    }
    deltas
}

/// How much of a malformed line goes into an error message.
const LINE_EXCERPT: usize = 200;

/// `line` cut to `LINE_EXCERPT` characters on a character boundary, marked when cut.
fn line_excerpt(line: &str) -> String {
    let line = line.trim();
    match line.char_indices().nth(LINE_EXCERPT) {
        Some((cut, _)) => format!("{}… (truncated)", &line[..cut]),
        None => line.to_string(),
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// One streamed response being read. Dropping it drops the connection, which aborts the
/// request on the server (cancellation).
struct StreamState {
    body: ByteStream,
    parser: SseParser,
    /// `None` once the completion (or an error) was produced.
    assembler: Option<StreamAssembler>,
    pending: VecDeque<Result<ChatDelta, BackendError>>,
    ended: bool,
    ctx: ErrorContext,
    idle: Duration,
    started: Instant,
    ttft: Option<Duration>,
    conversation_id: Option<String>,
    /// Body bytes read so far.
    received: usize,
    /// The request body's size, to estimate a usage the server does not report.
    request_bytes: usize,
    /// SSE events with data seen so far (comments and keepalives not counted).
    data_events: usize,
    /// The request, to send again unstreamed if the stream ends without one data event.
    unstreamed_retry: Option<(RemoteBackend, ChatRequest)>,
}

/// The most a streamed answer may send (a 262k-token answer in OpenAI chunks is ~60 MiB).
const MAX_STREAM_BYTES: usize = 256 << 20;

/// The most a whole (not streamed) response body may hold.
const MAX_BODY_BYTES: usize = 64 << 20;

async fn next_item(
    mut state: StreamState,
) -> Option<(Result<ChatDelta, BackendError>, StreamState)> {
    loop {
        if let Some(item) = state.pending.pop_front() {
            return Some((item, state));
        }
        if state.ended {
            return None;
        }
        match tokio::time::timeout(state.idle, state.body.next()).await {
            Err(_) => {
                let secs = state.idle.as_secs();
                let error = state.ctx.timeout(
                    secs,
                    "stream idle timeout: no data in the middle of the answer",
                );
                state.fail(error);
            }
            Ok(Some(Err(error))) => {
                let message = format!("the connection broke mid-stream: {}", error_chain(&error));
                let error = state.ctx.connect(&message);
                state.fail(error);
            }
            Ok(Some(Ok(bytes))) => {
                state.received = state.received.saturating_add(bytes.len());
                let events = state.parser.feed(&bytes);
                state.handle_events(events);
                // A hostile or broken server must not fill memory: one endless event, or an
                // answer that never ends.
                let too_much = if state.ended {
                    None
                } else if state.parser.overflowed() {
                    Some(format!(
                        "an SSE event longer than {} MiB",
                        sse::MAX_EVENT_BYTES >> 20
                    ))
                } else if state.received > MAX_STREAM_BYTES {
                    Some(format!(
                        "the stream passed {} MiB without ending",
                        MAX_STREAM_BYTES >> 20
                    ))
                } else {
                    None
                };
                if let Some(message) = too_much {
                    let error = state.ctx.protocol(message);
                    state.fail(error);
                }
            }
            Ok(None) => {
                let events = state.parser.finish();
                state.handle_events(events);
                if !state.ended
                    && state.data_events == 0
                    && let Some((backend, req)) = state.unstreamed_retry.take()
                {
                    // Nothing at all came (a server that cannot stream this request closes
                    // the stream): the same request, unstreamed, says what it can do.
                    state.ended = true;
                    match backend.answer_unstreamed(req, &state.ctx).await {
                        Ok(items) => state.pending.extend(items),
                        Err(error) => state.pending.push_back(Err(error)),
                    }
                    continue;
                }
                if !state.ended {
                    let message = match &state.assembler {
                        Some(asm) if asm.has_finish() => {
                            "stream ended without [DONE]: truncated response"
                        }
                        _ => "stream ended before finish_reason: truncated response",
                    };
                    let error = state.ctx.protocol(message);
                    state.fail(error);
                }
            }
        }
    }
}

impl StreamState {
    fn fail(&mut self, error: BackendError) {
        self.pending.push_back(Err(error));
        self.assembler = None;
        self.ended = true;
    }

    fn handle_events(&mut self, events: Vec<SseEvent>) {
        for event in events {
            if self.ended {
                return;
            }
            self.handle_event(event);
        }
    }

    fn handle_event(&mut self, event: SseEvent) {
        let data = event.data.trim();
        if data.is_empty() {
            return;
        }
        self.data_events += 1;
        if data == "[DONE]" {
            self.complete();
            return;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                let message = format!(
                    "malformed SSE data, not JSON ({e}); the server sent: {}",
                    line_excerpt(data)
                );
                let error = self.ctx.protocol(message);
                self.fail(error);
                return;
            }
        };
        let Some(assembler) = self.assembler.as_mut() else {
            return;
        };
        match assembler.apply(&chunk) {
            Ok(deltas) => {
                if self.ttft.is_none() && !deltas.is_empty() {
                    self.ttft = Some(self.started.elapsed());
                }
                self.pending.extend(deltas.into_iter().map(Ok));
            }
            Err(ChunkError::Malformed(message)) => {
                // The line itself, so whoever runs the server sees what it sent.
                let message = format!("{message}; the server sent: {}", line_excerpt(data));
                let error = self.ctx.protocol(message);
                self.fail(error);
            }
            Err(error) => {
                let error = self.chunk_error(error);
                self.fail(error);
            }
        }
    }

    fn chunk_error(&self, error: ChunkError) -> BackendError {
        match error {
            ChunkError::Server { message, code } => {
                self.ctx.server_error(&message, code.as_deref())
            }
            ChunkError::Malformed(message) => self.ctx.protocol(message),
        }
    }

    fn complete(&mut self) {
        let Some(assembler) = self.assembler.take() else {
            return;
        };
        match assembler.finish() {
            Ok(done) => {
                self.pending
                    .push_back(Ok(ChatDelta::Completed(ChatCompletion {
                        usage: done.usage.or_else(|| {
                            Some(crate::backend::estimated_usage(
                                self.request_bytes,
                                &done.message,
                            ))
                        }),
                        message: done.message,
                        finish_reason: done.finish_reason,
                        ttft: self.ttft,
                        latency: self.started.elapsed(),
                        conversation_id: self.conversation_id.take(),
                    })));
                self.ended = true;
            }
            Err(error) => {
                let error = self.chunk_error(error);
                self.fail(error);
            }
        }
    }
}

impl RemoteBackend {
    /// Sends `req` again unstreamed after its stream ended empty, and returns every item of the
    /// answer. When that works, the server cannot stream such requests: later ones are sent
    /// unstreamed, and the frontends are told once (as a retry notice).
    async fn answer_unstreamed(
        &self,
        req: ChatRequest,
        ctx: &ErrorContext,
    ) -> Result<Vec<Result<ChatDelta, BackendError>>, BackendError> {
        use std::sync::atomic::Ordering;
        let again = async {
            let sent = self.send_chat(&req, false).await?;
            self.whole_answer(sent, true).await
        };
        // Its error as it is: a context overflow or an auth error keeps its kind.
        let items = again.await?;
        let kind = &self.inner.streams_unusable[usize::from(!req.tools.is_empty())];
        if !kind.swap(true, Ordering::Relaxed) {
            let notice = RetryNotice {
                hop: ctx.hop,
                what: format!("{} hop", ctx.hop),
                retry: 1,
                max_retries: 1,
                delay: Duration::ZERO,
                reason: format!(
                    "the server ended the stream without sending anything and answered the \
                     same request unstreamed: baton sends requests {} tools unstreamed from now on",
                    if req.tools.is_empty() {
                        "without"
                    } else {
                        "with"
                    }
                ),
            };
            tracing::warn!(hop = %ctx.hop, "streams unusable: {}", notice.reason);
            self.inner.notify(&notice);
        }
        Ok(items)
    }
}

impl ChatBackend for RemoteBackend {
    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        use std::sync::atomic::Ordering;
        let whole =
            self.inner.streams_unusable[usize::from(!req.tools.is_empty())].load(Ordering::Relaxed);
        Box::pin(self.start_chat(req, whole))
    }

    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
        Box::pin(self.fetch_models())
    }

    fn describe(&self) -> String {
        self.inner.config.base_url.clone()
    }

    fn observe_retries(&self, observer: RetryObserver) {
        self.add_retry_observer(observer);
    }
}
