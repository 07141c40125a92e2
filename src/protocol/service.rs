//! The seam between an HTTP frontend and the MoL loop it serves: what one client request asks
//! of a conversation ([`TurnInput`]), what comes back while it runs ([`TurnEvent`]), how it
//! fails ([`TurnError`]), and the [`MolService`] trait the builder implements. Types only: the
//! frontend sees no backend, profile or timeline, and the loop sees no HTTP.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::chat::{ChatMessage, ReasoningEffort, ToolSpec};
use super::error::ErrorKind;
use super::{Expert, Hop, RouteDecision, TokenUsage};

/// The answer options a client may set on one request; unset ones keep the loop's defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnOptions {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Vec<String>,
    /// `auto`, `none`, `required` or a function name.
    pub tool_choice: Option<String>,
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<u32>,
    pub reasoning: Option<ReasoningEffort>,
    /// Answer-hop fields sent upstream as the client gave them (structured output, penalties,
    /// engine sampling extras); never on the route or summary hop.
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// One client request to a conversation: the client's messages as sent (the whole history on
/// the Chat Completions path), the tools it offers, and its options.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnInput {
    /// The conversation id the client named (`X-Conversation-Id`, already validated); `None`
    /// lets the service find the conversation from the history, or start one.
    pub conversation: Option<String>,
    /// Who is asking, as an opaque digest of the credentials: conversations found from history
    /// alone never cross between clients.
    pub client: String,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub options: TurnOptions,
    /// Responses API: continue from this stored response's state (a fork: the parent stays
    /// as it was, and siblings never see each other).
    pub fork_from: Option<String>,
    /// Responses API: keep the conversation as this turn leaves it under this id, so a later
    /// request can fork from it.
    pub snapshot_as: Option<String>,
}

/// How the expert of a turn was chosen, as a client is told it.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRouted {
    pub conversation_id: String,
    pub expert: Expert,
    pub decision: RouteDecision,
    /// Why the route fell back, when it did.
    pub fallback_reason: Option<String>,
    /// Tasks of the conversation completed before this turn.
    pub completed_tasks: usize,
}

/// How a turn's answer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnFinish {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

impl TurnFinish {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnFinish::Stop => "stop",
            TurnFinish::Length => "length",
            TurnFinish::ToolCalls => "tool_calls",
            TurnFinish::ContentFilter => "content_filter",
        }
    }
}

/// The finished answer of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnDone {
    pub message: ChatMessage,
    pub finish: TurnFinish,
    /// The answer hop's usage (what the client's tokens cost upstream).
    pub usage: TokenUsage,
    /// The expert that owns the tool calls of `message`, when there are any: the next request
    /// of this conversation with their results continues there.
    pub pending_tool_expert: Option<Expert>,
    /// Whether a summary hop was started for the task this answer closed.
    pub summary_started: bool,
}

/// What a running turn reports, in order: `Routed` once, deltas, then `Done` — or an `Error`
/// at any point.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    Routed(TurnRouted),
    Text(String),
    Reasoning(String),
    Done(TurnDone),
    Error(TurnError),
}

/// Why a turn did not run or did not finish. `code` is the OpenAI-style error code a client
/// can match on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct TurnError {
    pub kind: TurnErrorKind,
    pub code: String,
    /// What the client is told: never the upstream's address or its raw answer.
    pub message: String,
    /// The full story for the operator's log (the upstream URL, status and body).
    pub detail: Option<String>,
}

/// What a frontend does with a [`TurnError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnErrorKind {
    /// The request itself is wrong (bad tool results, an unknown conversation): 4xx.
    BadRequest,
    /// What the request continues from does not exist (an unknown or expired response id).
    NotFound,
    /// The prompt does not fit the model's window.
    ContextOverflow,
    /// The upstream model failed in a way the client cannot fix: 5xx, with the upstream kind.
    Upstream(ErrorKind),
    /// The service is at capacity: try again later.
    Busy,
}

impl TurnError {
    pub fn bad_request(code: &str, message: impl Into<String>) -> Self {
        TurnError {
            kind: TurnErrorKind::BadRequest,
            code: code.to_string(),
            message: message.into(),
            detail: None,
        }
    }
}

/// A turn under way. Dropping it before `delivered` is sent (the client went away, or the
/// frontend failed to deliver the answer) rolls the conversation back as if the request had
/// never come; sending `delivered` after the last byte commits it.
pub struct TurnHandle {
    /// The conversation the turn belongs to (named by the client, found, or new).
    pub conversation_id: String,
    pub events: mpsc::Receiver<TurnEvent>,
    pub delivered: oneshot::Sender<()>,
}

/// One hop the service ran, for a frontend's metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HopSample {
    pub hop: Hop,
    pub latency: Duration,
    pub usage: TokenUsage,
    pub ok: bool,
}

/// What happened to the service's state folder (`--state-dir`), for metrics and the operator's
/// log.
#[derive(Debug, Clone, PartialEq)]
pub enum StateEvent {
    /// A conversation or stored response was written.
    Persisted,
    /// Startup read this many entries back.
    Loaded(usize),
    /// A file that could not be read back: skipped and moved aside.
    Corrupt { file: String, reason: String },
    /// A file left as it is (a newer format, not a regular file, unreadable, an older copy).
    Ignored { file: String, reason: String },
    /// Files deleted because their entries expired or were evicted.
    Deleted(usize),
    /// A write or delete failed: the state is still held in memory.
    WriteFailed { reason: String },
}

/// How a speculative answer hop ended, for a frontend's metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpeculationOutcome {
    /// The route picked the expert speculated on; its answer was kept.
    Hit,
    /// The route picked another expert (or the view changed); the request was cancelled.
    Miss,
    /// Speculation was due but no upstream slot was free beyond the route hop's: not sent.
    NoSlot,
}

/// One speculative answer hop, for a frontend's metrics. The wasted tokens are zero but on
/// a miss: exact when the cancelled request had finished, else estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpeculationSample {
    pub outcome: SpeculationOutcome,
    pub wasted_prompt_tokens: u64,
    pub wasted_completion_tokens: u64,
}

/// What the service tells an observer (metrics) as it works; calls must be cheap.
pub trait ServiceObserver: Send + Sync {
    fn hop(&self, sample: HopSample);
    fn route(&self, expert: Expert, decision: RouteDecision);
    /// How many conversations are held now.
    fn conversations(&self, _count: usize) {}
    /// The state folder changed (only with `--state-dir`).
    fn state(&self, _event: StateEvent) {}
    /// A speculative answer hop was decided on (kept, cancelled, or never sent).
    fn speculation(&self, _sample: SpeculationSample) {}
}

pub type ServiceFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The MoL loop as a service of conversations: the builder assembles one from the
/// configuration, a frontend (`baton serve`) drives it per request.
pub trait MolService: Send + Sync {
    /// The public model name clients ask for.
    fn served_model(&self) -> &str;

    /// Starts a turn on the conversation `input` names (or finds, or opens). Returns once the
    /// conversation is this request's (requests of one conversation serialize).
    fn start_turn(&self, input: TurnInput) -> ServiceFuture<'_, Result<TurnHandle, TurnError>>;

    /// Whether the upstream model answers (`/health`).
    fn ready(&self) -> ServiceFuture<'_, bool>;

    /// Waits until every running turn has ended and every summary hop has been recorded
    /// (graceful shutdown).
    fn drain(&self) -> ServiceFuture<'_, ()>;
}
