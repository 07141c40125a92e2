//! Model access: one chat request type for every backend and the `ChatBackend` trait that the
//! remote (OpenAI-compatible HTTP) and local (in-process engine) backends implement.
//!
//! The MoL layer builds `ChatRequest`s (route, answer, summary hops); a backend turns them into
//! its own wire form. The route hop is an ordinary request with a `Constraint::Choice`.

pub mod local;
pub mod remote;
pub mod upstream;

pub use remote::{RetryNotice, RetryObserver};

use std::pin::Pin;
use std::time::Duration;

use futures_util::Stream;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::protocol::{ChatMessage, ReasoningEffort, ToolSpec};
use crate::protocol::{ErrorKind, Hop, TokenUsage};

/// Output constraint. Each backend enforces it its own way (vLLM `structured_outputs.choice`,
/// SGLang `regex`, the local engine a token trie).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Constraint {
    Choice { options: Vec<String> },
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub seed: Option<u64>,
    #[serde(default)]
    pub stop: Vec<String>,
}

/// One chat request, the same type for every backend and every hop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The model name on the wire: an adapter (`L0`..`L3`) in `mol` mode, else the model name.
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub tools: Vec<ToolSpec>,
    /// `auto`, `none`, `required` or a function name; `None` = server default.
    #[serde(default)]
    pub tool_choice: Option<String>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub sampling: Sampling,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub constraint: Option<Constraint>,
    /// Continue the final (assistant) message instead of opening a new turn (route prefill).
    #[serde(default)]
    pub continue_final_message: bool,
    /// Open a fresh assistant turn at the end of the prompt (normally true).
    #[serde(default = "default_true")]
    pub add_generation_prompt: bool,
    /// `chat_template_kwargs.enable_thinking`; `None` = not sent.
    #[serde(default)]
    pub enable_thinking: Option<bool>,
    #[serde(default)]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// Stream the answer (SSE) or ask for one JSON body.
    #[serde(default)]
    pub stream: bool,
    /// Which MoL hop this is (headers, error messages, events).
    pub hop: Hop,
    /// `proxy` mode: sent as `X-Conversation-Id`.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Fields of the body sent as they are, where baton sets no field of that name
    /// (`baton serve` forwards a client's `response_format`, penalties …). The remote backend
    /// sends them; the local engine has no use for them.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

fn default_true() -> bool {
    true
}

impl ChatRequest {
    /// A plain streamed answer request with server defaults for everything else.
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>, hop: Hop) -> Self {
        ChatRequest {
            model: model.into(),
            messages,
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: None,
            sampling: Sampling::default(),
            max_tokens: None,
            constraint: None,
            continue_final_message: false,
            add_generation_prompt: true,
            enable_thinking: None,
            reasoning_effort: None,
            stream: true,
            hop,
            conversation_id: None,
            extra: serde_json::Map::new(),
        }
    }
}

/// Characters a token is taken to hold when a server reports no usage: English text and code
/// under common BPE vocabularies average 3.5–4.5.
const CHARS_PER_TOKEN_GUESS: usize = 4;

fn message_chars(m: &ChatMessage) -> usize {
    m.content.chars().count()
        + m.reasoning.as_deref().map_or(0, |r| r.chars().count())
        + m.tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.chars().count())
            .sum::<usize>()
}

/// The usage of a hop whose server reported none, counted from the request's size (its body
/// as sent) and the answer's text: marked `estimated`.
pub fn estimated_usage(request_bytes: usize, answer: &ChatMessage) -> TokenUsage {
    let tokens = |chars: usize| chars.div_ceil(CHARS_PER_TOKEN_GUESS) as u64;
    TokenUsage {
        prompt_tokens: tokens(request_bytes),
        completion_tokens: tokens(message_chars(answer)),
        cached_tokens: None,
        estimated: true,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
    Other,
}

/// The assembled result of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletion {
    /// The assistant message: content, reasoning and tool calls assembled.
    pub message: ChatMessage,
    pub finish_reason: FinishReason,
    pub usage: Option<TokenUsage>,
    /// Time from sending the request to the first streamed token (streaming only).
    pub ttft: Option<Duration>,
    /// Time from sending the request to the end of the response.
    pub latency: Duration,
    /// `X-Conversation-Id` the server answered with (proxy mode).
    pub conversation_id: Option<String>,
}

/// One item of a response stream. The last item is `Completed` or an error.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatDelta {
    Text(String),
    Reasoning(String),
    /// A tool call started (its id and name are known).
    ToolCallStarted {
        index: usize,
        id: String,
        name: String,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolCallArguments {
        index: usize,
        fragment: String,
    },
    Completed(ChatCompletion),
}

pub type ChatStream = Pin<Box<dyn Stream<Item = Result<ChatDelta, BackendError>> + Send>>;

/// A model the backend offers (`/v1/models`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub id: String,
    /// Context window, when the server reports it (`max_model_len`).
    pub context_window: Option<u64>,
}

/// What went wrong talking to a model. Every message names the hop, the URL and what the
/// server said, so a user can act on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BackendError {
    #[error("{hop} hop: cannot connect to {url}: {message}")]
    Connect {
        hop: Hop,
        url: String,
        message: String,
    },
    #[error("{hop} hop: {url} did not answer within {secs} s ({what})")]
    Timeout {
        hop: Hop,
        url: String,
        secs: u64,
        what: String,
    },
    #[error("{hop} hop: {url} answered HTTP {status}: {body}")]
    Http {
        hop: Hop,
        url: String,
        status: u16,
        body: String,
    },
    #[error("{hop} hop: the prompt does not fit the model's context window ({url}: {message})")]
    ContextOverflow {
        hop: Hop,
        url: String,
        message: String,
    },
    #[error("{hop} hop: bad response from {url}: {message}")]
    Protocol {
        hop: Hop,
        url: String,
        message: String,
    },
    #[error("{hop} hop: local engine: {message}")]
    Engine { hop: Hop, message: String },
    #[error("{hop} hop: cancelled")]
    Cancelled { hop: Hop },
}

impl BackendError {
    /// What kind of failure this is, for frontends to act on.
    pub fn kind(&self) -> ErrorKind {
        match self {
            BackendError::Connect { .. } => ErrorKind::Unreachable,
            BackendError::Timeout { .. } => ErrorKind::Timeout,
            BackendError::Http { status, .. } => ErrorKind::from_http_status(*status),
            BackendError::ContextOverflow { .. } => ErrorKind::ContextOverflow,
            BackendError::Protocol { .. } => ErrorKind::BadResponse,
            BackendError::Engine { .. } => ErrorKind::Engine,
            BackendError::Cancelled { .. } => ErrorKind::Cancelled,
        }
    }

    pub fn hop(&self) -> Hop {
        match self {
            BackendError::Connect { hop, .. }
            | BackendError::Timeout { hop, .. }
            | BackendError::Http { hop, .. }
            | BackendError::ContextOverflow { hop, .. }
            | BackendError::Protocol { hop, .. }
            | BackendError::Engine { hop, .. }
            | BackendError::Cancelled { hop } => *hop,
        }
    }
}

/// A request slot held for a request not sent yet. A speculative request takes one only when
/// a backend has one to spare, and never waits for it; dropping the slot frees it.
pub struct Slot(#[allow(dead_code)] Option<Box<dyn std::any::Any + Send + Sync>>);

impl Slot {
    /// The slot of a backend without a cap on requests in flight.
    pub fn unlimited() -> Slot {
        Slot(None)
    }

    /// A slot that stays taken while `held` (a semaphore permit) lives.
    pub fn holding(held: impl std::any::Any + Send + Sync) -> Slot {
        Slot(Some(Box::new(held)))
    }
}

/// A model backend: the remote OpenAI-compatible endpoint or the local engine.
pub trait ChatBackend: Send + Sync {
    /// Sends one request. The stream yields deltas (when `req.stream`) and ends with
    /// `ChatDelta::Completed`; a stream that ends otherwise is an error.
    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>>;

    /// The models the backend serves (`GET /v1/models`; the adapters for the local engine).
    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>>;

    /// One line for `/status` and the session event: the URL or `local:ROOT`.
    fn describe(&self) -> String;

    /// The exact prompt token count of a request, when the backend can tell without sending it
    /// (the local engine's tokenizer). Remote backends return `None`; callers estimate and
    /// correct with the server's reported usage.
    fn count_prompt_tokens(&self, _req: &ChatRequest) -> Option<u64> {
        None
    }

    /// A slot for a request that must neither wait for one nor take the last one another
    /// request (the route hop sent next) needs; `None` when there is none to spare. A backend
    /// without a cap always has one.
    fn spare_slot(&self) -> Option<Slot> {
        Some(Slot::unlimited())
    }

    /// Sends `req` on a slot [`ChatBackend::spare_slot`] gave; the slot is held until the
    /// response stream ends or is dropped.
    fn chat_in_slot(
        &self,
        req: ChatRequest,
        slot: Slot,
    ) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        drop(slot);
        self.chat(req)
    }

    /// Calls `observer` before every retry of a failed request, so the person waiting hears
    /// of it. Backends that never retry (the local engine) ignore it.
    fn observe_retries(&self, _observer: RetryObserver) {}
}

/// Sends a request and waits for its completion (for hops whose deltas nobody watches).
pub async fn complete(
    backend: &dyn ChatBackend,
    req: ChatRequest,
) -> Result<ChatCompletion, BackendError> {
    let hop = req.hop;
    let stream = backend.chat(req).await?;
    collect(stream, hop, &backend.describe()).await
}

/// Drains a stream and returns its completion (for callers that need no deltas). `hop` and
/// `url` name the request in the error of a stream that ends without a completion.
pub async fn collect(
    mut stream: ChatStream,
    hop: Hop,
    url: &str,
) -> Result<ChatCompletion, BackendError> {
    use futures_util::StreamExt;
    while let Some(item) = stream.next().await {
        if let ChatDelta::Completed(done) = item? {
            return Ok(done);
        }
    }
    Err(BackendError::Protocol {
        hop,
        url: url.to_string(),
        message: "the response stream ended without a completion".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A backend whose streams end before their completion.
    struct Truncating;

    impl ChatBackend for Truncating {
        fn chat(&self, _req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
            Box::pin(async {
                let items: Vec<Result<ChatDelta, BackendError>> =
                    vec![Ok(ChatDelta::Text("partial".into()))];
                Ok(Box::pin(futures_util::stream::iter(items)) as ChatStream)
            })
        }
        fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn describe(&self) -> String {
            "http://127.0.0.1:9/v1".into()
        }
    }

    #[tokio::test]
    async fn a_stream_without_completion_names_its_hop_and_server() {
        let req = ChatRequest::new("L2", vec![ChatMessage::user("hi")], Hop::Summary);
        let err = complete(&Truncating, req).await.unwrap_err();
        assert_eq!(err.hop(), Hop::Summary);
        assert_eq!(err.kind(), ErrorKind::BadResponse);
        let text = err.to_string();
        assert!(text.starts_with("summary hop"), "{text}");
        assert!(text.contains("http://127.0.0.1:9/v1"), "{text}");
    }
}
