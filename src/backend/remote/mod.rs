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
use std::sync::Arc;
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
use self::retry::{RetryPolicy, is_retryable_status};
use self::sse::{SseEvent, SseParser};
use super::{
    BackendError, ChatBackend, ChatCompletion, ChatDelta, ChatRequest, ChatStream, ModelInfo,
};
use crate::protocol::Hop;

/// Called before each retry.
pub type RetryObserver = Arc<dyn Fn(&RetryNotice) + Send + Sync>;

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
    on_retry: Option<RetryObserver>,
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
        let mut client = reqwest::Client::builder()
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
                on_retry,
            }),
        })
    }

    pub fn config(&self) -> &RemoteConfig {
        &self.inner.config
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

    async fn start_chat(&self, req: ChatRequest) -> Result<ChatStream, BackendError> {
        let inner = self.inner.clone();
        let started = Instant::now();
        let ctx = inner.error_context(req.hop, &inner.chat_url);
        let body = wire::request_body(&req, inner.config.dialect);
        let body = Bytes::from(body.to_string());
        tracing::debug!(hop = %req.hop, model = %req.model, url = %inner.chat_url, stream = req.stream, "chat request");
        let (response, deadline) = inner
            .send_with_retries(&ctx, || {
                let mut builder = inner
                    .client
                    .post(&inner.chat_url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .header(HOP_HEADER, req.hop.as_str())
                    .body(body.clone());
                if req.stream {
                    builder = builder.header(reqwest::header::ACCEPT, "text/event-stream");
                }
                if let Some(id) = &req.conversation_id {
                    builder = builder.header(CONVERSATION_HEADER, id);
                }
                inner.authorised(builder)
            })
            .await?;
        let conversation_id = response
            .headers()
            .get(CONVERSATION_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // Some servers ignore `stream: true` and answer with one JSON body: replay it as deltas.
        let answered_json = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| t.starts_with("application/json"));
        if !req.stream || answered_json {
            let body = read_body(response, &ctx, deadline, inner.config.request_timeout).await?;
            let completion = parse_full_body(&body, &ctx, started, conversation_id)?;
            let mut items: Vec<Result<ChatDelta, BackendError>> = Vec::new();
            if req.stream {
                items.extend(replayed_deltas(&completion).into_iter().map(Ok));
            }
            items.push(Ok(ChatDelta::Completed(completion)));
            return Ok(Box::pin(futures_util::stream::iter(items)));
        }
        let state = StreamState {
            body: Box::pin(response.bytes_stream()),
            parser: SseParser::new(),
            assembler: Some(StreamAssembler::new()),
            pending: VecDeque::new(),
            ended: false,
            ctx,
            idle: inner.config.idle_timeout,
            started,
            ttft: None,
            conversation_id,
        };
        Ok(Box::pin(futures_util::stream::unfold(state, next_item)))
    }
}

impl Inner {
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
                    let retryable = error.is_connect() || error.is_request();
                    if !retryable || retry >= policy.max_retries {
                        if error.is_timeout() && error.is_connect() {
                            return Err(ctx.timeout(
                                self.config.connect_timeout.as_secs(),
                                format!("connecting: {}", ctx.scrub(&message)),
                            ));
                        }
                        return Err(ctx.connect(&message));
                    }
                    (ctx.scrub(&message), policy.backoff(retry + 1))
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
            if let Some(observer) = &self.on_retry {
                observer(&RetryNotice {
                    hop: ctx.hop,
                    retry,
                    delay,
                    reason: failure,
                });
            }
            tokio::time::sleep(delay).await;
        }
    }
}

/// Reads a whole body as text before `deadline`.
async fn read_body(
    response: reqwest::Response,
    ctx: &ErrorContext,
    deadline: Instant,
    limit: Duration,
) -> Result<String, BackendError> {
    match tokio::time::timeout_at(deadline.into(), response.bytes()).await {
        Err(_) => Err(ctx.timeout(
            limit.as_secs(),
            "request timeout: reading the response body",
        )),
        Ok(Err(e)) => Err(ctx.connect(&format!(
            "the connection broke while reading the response: {}",
            error_chain(&e)
        ))),
        Ok(Ok(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
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
    let parsed = wire::parse_completion(&json).map_err(|m| ctx.protocol(m.to_string()))?;
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
}

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
                let events = state.parser.feed(&bytes);
                state.handle_events(events);
            }
            Ok(None) => {
                let events = state.parser.finish();
                state.handle_events(events);
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
        if data == "[DONE]" {
            self.complete();
            return;
        }
        let chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                let message = format!(
                    "malformed SSE data, not JSON ({e}): {}",
                    failure::truncate(data)
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
                        message: done.message,
                        finish_reason: done.finish_reason,
                        usage: done.usage,
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

impl ChatBackend for RemoteBackend {
    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        Box::pin(self.start_chat(req))
    }

    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
        Box::pin(self.fetch_models())
    }

    fn describe(&self) -> String {
        self.inner.config.base_url.clone()
    }
}
