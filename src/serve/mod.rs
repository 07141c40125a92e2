//! `baton serve`: the MoL loop behind an OpenAI-compatible HTTP endpoint. `GET /health`,
//! `GET /v1/models`, `POST /v1/chat/completions` (stream and non-stream, tools,
//! `X-Conversation-Id`), `GET /metrics`; bearer keys, a body limit, admission control, an
//! idle-stream timeout and a graceful drain on SIGTERM.
//!
//! This is a frontend: the loop itself (route → answer → summary, views, fallback) is the
//! `MolService` the builder hands over; here are only HTTP, auth and the wire format.

use crate::protocol::stdio::eprintln;
mod admission;
pub mod auth;
mod chat;
mod conn;
mod errors;
mod json_body;
pub mod metrics;
mod relay;
mod responses;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};

use crate::protocol::{MolService, TurnEvent, TurnHandle, TurnInput, TurnRouted};
pub use admission::AdmissionLimits;
use admission::{Admission, Admitted};
pub use auth::Keys;
use errors::ApiError;
pub use metrics::Metrics;
use relay::{Frames, Relay};

/// The conversation header clients echo.
const CONVERSATION_HEADER: &str = "x-conversation-id";

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub listen: SocketAddr,
    pub keys: Keys,
    pub allow_unauthenticated: bool,
    pub max_body_bytes: usize,
    /// Most items in any array of a request body (`messages`, `input`, parts, tools).
    pub max_messages: usize,
    pub admission: AdmissionLimits,
    /// A turn that reports nothing for this long is ended with an error (a stalled upstream).
    pub idle_timeout: Duration,
    /// An SSE comment this often keeps proxies from closing a quiet stream.
    pub keepalive: Duration,
    /// How long SIGTERM waits for open requests, and then for summaries.
    pub drain_timeout: Duration,
    /// How long a client has to send a request's head, and then its body.
    pub read_timeout: Duration,
}

struct AppState {
    service: Arc<dyn MolService>,
    keys: Keys,
    metrics: Arc<Metrics>,
    admission: Admission,
    max_messages: usize,
    idle_timeout: Duration,
    keepalive: Duration,
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Exposure(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Raises the soft limit on open descriptors to the hard limit: every connection holds one
/// from its first byte (before its key can be checked), and at the common soft limit of 1024
/// about 1,100 idle connections locked every client out. The hard limit is the operator's.
fn raise_descriptor_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_err()
    {
        eprintln!("baton serve: could not raise the open-file limit from {soft} to {hard}");
    }
}

/// Serves until SIGTERM or Ctrl-C, then drains.
pub async fn run(
    service: Arc<dyn MolService>,
    metrics: Arc<Metrics>,
    opts: ServeOptions,
) -> Result<(), ServeError> {
    auth::check_exposure(opts.listen, &opts.keys, opts.allow_unauthenticated)
        .map_err(ServeError::Exposure)?;
    let listener = tokio::net::TcpListener::bind(opts.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: opts.listen,
            source,
        })?;
    let addr = listener.local_addr()?;
    raise_descriptor_limit();
    eprintln!(
        "baton serve: listening on http://{addr}/v1 (model {}, {})",
        service.served_model(),
        if opts.keys.is_empty() {
            "no API keys".to_string()
        } else {
            format!("{} API key(s)", opts.keys.len())
        }
    );
    let app = router(service.clone(), metrics, &opts);
    let cut = conn::serve(
        listener,
        app,
        opts.read_timeout,
        shutdown_signal(),
        opts.drain_timeout,
    )
    .await;
    if cut > 0 {
        eprintln!(
            "baton serve: closed {cut} connection(s) still open after {} s",
            opts.drain_timeout.as_secs()
        );
    }
    eprintln!("baton serve: draining summaries");
    let _ = tokio::time::timeout(opts.drain_timeout, service.drain()).await;
    Ok(())
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = term => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    eprintln!("baton serve: shutting down (no new requests; running turns finish)");
}

/// The HTTP routes over a service.
pub fn router(service: Arc<dyn MolService>, metrics: Arc<Metrics>, opts: &ServeOptions) -> Router {
    let guard = conn::GuardConfig {
        keys: opts.keys.clone(),
        loopback_hosts_only: opts.keys.is_empty() && opts.listen.ip().is_loopback(),
        max_body_bytes: opts.max_body_bytes,
        read_timeout: opts.read_timeout,
        metrics: metrics.clone(),
    };
    let state = Arc::new(AppState {
        service,
        keys: opts.keys.clone(),
        admission: Admission::new(opts.admission.clone(), metrics.clone()),
        metrics,
        max_messages: opts.max_messages,
        idle_timeout: opts.idle_timeout,
        keepalive: opts.keepalive,
    });
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses_api))
        .route("/metrics", get(metrics_page))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(DefaultBodyLimit::max(opts.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(guard, conn::guard))
        .with_state(state)
}

type Shared = State<Arc<AppState>>;

fn authorize(state: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    state.keys.check(value).map_err(|_| unauthorized())
}

fn unauthorized() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "invalid_api_key",
        "missing or wrong API key (Authorization: Bearer KEY)",
    )
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "request_too_large",
        "the request body is larger than this server accepts",
    )
}

async fn health(State(state): Shared) -> Response {
    if state.service.ready().await {
        (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "not_ready"})),
        )
            .into_response()
    }
}

async fn models(State(state): Shared, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": state.service.served_model(),
            "object": "model",
            "created": 0,
            "owned_by": "baton",
        }],
    }))
    .into_response()
}

async fn metrics_page(State(state): Shared, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

async fn not_found(State(state): Shared, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    ApiError::new(
        StatusCode::NOT_FOUND,
        "endpoint_not_found",
        "no such endpoint",
    )
    .into_response()
}

/// The conversation id a request names, checked: 16–128 of `[A-Za-z0-9._~-]`.
fn conversation_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let mut named = headers.get_all(CONVERSATION_HEADER).iter();
    let Some(v) = named.next() else {
        return Ok(None);
    };
    if named.next().is_some() {
        // Two ids (one added by a proxy on the way?): continuing either could be the wrong one.
        return Err(ApiError::bad_request(
            "invalid_conversation_id",
            "X-Conversation-Id was sent more than once",
        ));
    }
    let ok = v.to_str().ok().filter(|s| {
        (16..=128).contains(&s.len())
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._~-".contains(&b))
    });
    match ok {
        Some(s) => Ok(Some(s.to_string())),
        None => Err(ApiError::bad_request(
            "invalid_conversation_id",
            "X-Conversation-Id must be 16 to 128 characters of A-Z a-z 0-9 . _ ~ -",
        )),
    }
}

/// A request read from its body by `read`, through the JSON object of the body (its arrays
/// bounded by `--max-messages`). The body and the object are gone when this returns, and after
/// a large body the allocator gives the freed memory back: a turn may run for minutes, and
/// the raw text and the object tree are several times the request's own size.
fn read_request<T>(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
    read: impl FnOnce(&Map<String, Value>) -> Result<T, ApiError>,
) -> Result<T, ApiError> {
    let large = body.as_ref().is_ok_and(|b| b.len() >= LARGE_BODY);
    let request = json_object(body, state.max_messages).and_then(|object| read(&object));
    if large {
        give_back_freed_memory();
    }
    request
}

/// The values a body may hold in all, per message of `--max-messages`: a message with tool
/// calls and content parts is a few dozen; tools' schemas share the rest.
const VALUES_PER_MESSAGE: usize = 20;

/// A body this large (bytes) is followed by handing freed memory back to the system.
const LARGE_BODY: usize = 1 << 20;

/// Returns the heap's free pages to the system (glibc keeps them otherwise).
fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The JSON object of a request body, its arrays bounded by `max_messages`.
fn json_object(
    body: Result<Bytes, BytesRejection>,
    max_messages: usize,
) -> Result<Map<String, Value>, ApiError> {
    let bytes = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            too_large()
        } else {
            ApiError::bad_request("invalid_body", e.body_text())
        }
    })?;
    json_body::parse_object(&bytes, max_messages, max_messages * VALUES_PER_MESSAGE).map_err(|e| {
        match e {
            json_body::BodyError::TooManyItems(n) => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_many_messages",
                format!(
                    "the request has more than {n} messages (or items in another array); this \
                 server takes at most {n} (baton serve --max-messages)"
                ),
            ),
            json_body::BodyError::TooManyValues(n) => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_many_values",
                format!(
                    "the request holds more than {n} JSON values; this server takes at most \
                 {VALUES_PER_MESSAGE} per message it accepts (baton serve --max-messages)"
                ),
            ),
            json_body::BodyError::NotAnObject => {
                ApiError::bad_request("invalid_json_body", "the body must be a JSON object")
            }
            json_body::BodyError::NotJson(e) => {
                ApiError::bad_request("invalid_json", format!("the body is not JSON: {e}"))
            }
        }
    })
}

fn new_completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::now_v7().simple())
}

fn now_secs() -> i64 {
    chrono::Utc::now().timestamp()
}

fn with_conversation(mut response: Response, id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(id) {
        response.headers_mut().insert(CONVERSATION_HEADER, v);
    }
    response
}

async fn chat_completions(
    State(state): Shared,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let path = "/v1/chat/completions";
    let result = chat_turn(&state, &headers, body, started).await;
    match result {
        Ok(response) => response,
        Err(e) => {
            state
                .metrics
                .request(path, e.status.as_u16(), started.elapsed());
            e.into_response()
        }
    }
}

async fn responses_api(
    State(state): Shared,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    match responses::handle(&state, &headers, body, started).await {
        Ok(response) => response,
        Err(e) => {
            state
                .metrics
                .request("/v1/responses", e.status.as_u16(), started.elapsed());
            e.into_response()
        }
    }
}

async fn chat_turn(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    started: Instant,
) -> Result<Response, ApiError> {
    let client = authorize(state, headers)?;
    let conversation = conversation_header(headers)?;
    // Admitted first: the objects a body becomes are bounded by the turns let in at once.
    let admitted = state.admission.enter().await?;
    let request = read_request(state, body, |b| {
        chat::parse(b, state.service.served_model())
    })?;
    let input = TurnInput {
        conversation,
        client,
        messages: request.messages,
        tools: request.tools,
        options: request.options,
        fork_from: None,
        snapshot_as: None,
    };
    let handle = state.service.start_turn(input).await?;
    if request.stream {
        Ok(stream_response(state.clone(), handle, admitted, started))
    } else {
        non_stream(state, handle, admitted, started).await
    }
}

/// Waits for the next event, ending the turn when it stalls past the idle timeout.
async fn next_event(handle: &mut TurnHandle, idle: Duration) -> Result<TurnEvent, ApiError> {
    match tokio::time::timeout(idle, handle.events.recv()).await {
        Ok(Some(ev)) => Ok(ev),
        Ok(None) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "turn_failed",
            "the turn ended without an answer",
        )),
        Err(_) => Err(ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_idle_timeout",
            format!("the upstream model sent nothing for {} s", idle.as_secs()),
        )),
    }
}

async fn non_stream(
    state: &AppState,
    mut handle: TurnHandle,
    admitted: Admitted,
    started: Instant,
) -> Result<Response, ApiError> {
    let mut routed: Option<TurnRouted> = None;
    let done = loop {
        match next_event(&mut handle, state.idle_timeout).await? {
            TurnEvent::Routed(r) => routed = Some(r),
            TurnEvent::Text(_) | TurnEvent::Reasoning(_) => {}
            TurnEvent::Done(d) => break d,
            TurnEvent::Error(e) => return Err(e.into()),
        }
    };
    let Some(routed) = routed else {
        return Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            "turn_failed",
            "the turn answered without routing",
        ));
    };
    let body = chat::completion_body(
        &new_completion_id(),
        state.service.served_model(),
        now_secs(),
        &routed,
        &done,
    );
    let _ = handle.delivered.send(());
    drop(admitted);
    state
        .metrics
        .request("/v1/chat/completions", 200, started.elapsed());
    Ok(with_conversation(
        axum::Json(body).into_response(),
        &handle.conversation_id,
    ))
}

/// One chat completion streamed as SSE chunks while hyper pulls frames.
struct ChatStream {
    relay: Relay,
    routed: Option<TurnRouted>,
    id: String,
    created: i64,
}

fn sse(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

impl ChatStream {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        chat::chunk(
            &self.id,
            self.relay.state.service.served_model(),
            self.created,
            delta,
            finish,
        )
    }
}

impl Frames for ChatStream {
    fn relay(&mut self) -> &mut Relay {
        &mut self.relay
    }

    fn on_event(&mut self, ev: TurnEvent) {
        match ev {
            TurnEvent::Routed(r) => {
                let mut c = self.chunk(json!({"role": "assistant", "content": ""}), None);
                c["metadata"] = chat::metadata(&r, None);
                self.relay.frames.push_back(sse(&c));
                self.routed = Some(r);
            }
            TurnEvent::Text(t) => {
                let c = self.chunk(json!({"content": t}), None);
                self.relay.frames.push_back(sse(&c));
            }
            TurnEvent::Reasoning(t) => {
                let c = self.chunk(json!({"reasoning_content": t}), None);
                self.relay.frames.push_back(sse(&c));
            }
            TurnEvent::Done(done) => {
                let Some(routed) = self.routed.clone() else {
                    self.fail(ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "turn_failed",
                        "the turn answered without routing",
                    ));
                    return;
                };
                if !done.message.tool_calls.is_empty() {
                    let c = self.chunk(chat::tool_calls_delta(&done.message.tool_calls), None);
                    self.relay.frames.push_back(sse(&c));
                }
                let mut last = self.chunk(json!({}), Some(done.finish.as_str()));
                last["metadata"] = chat::metadata(&routed, Some(&done));
                self.relay.frames.push_back(sse(&last));
                let mut usage = self.chunk(json!({}), None);
                usage["choices"] = json!([]);
                usage["usage"] = chat::usage_json(&done);
                self.relay.frames.push_back(sse(&usage));
                self.relay
                    .frames
                    .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
                self.relay.finished = Some(true);
            }
            TurnEvent::Error(e) => self.fail(e.into()),
        }
    }

    fn fail(&mut self, e: ApiError) {
        self.relay.frames.push_back(sse(&e.body()));
        self.relay
            .frames
            .push_back(Bytes::from_static(b"data: [DONE]\n\n"));
        self.relay.finished = Some(false);
    }
}

fn stream_response(
    state: Arc<AppState>,
    handle: TurnHandle,
    admitted: Admitted,
    started: Instant,
) -> Response {
    let conversation = handle.conversation_id.clone();
    let stream = ChatStream {
        relay: Relay::new(state, handle, admitted, started, "/v1/chat/completions"),
        routed: None,
        id: new_completion_id(),
        created: now_secs(),
    };
    relay::sse_response(stream, &conversation)
}
