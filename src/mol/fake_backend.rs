//! A fake model backend for the MoL layer's unit tests: every request gets one scripted label
//! (or an error), and the hop of every request is remembered.

use std::sync::Mutex;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::backend::{
    BackendError, ChatBackend, ChatCompletion, ChatDelta, ChatRequest, ChatStream, FinishReason,
    ModelInfo,
};
use crate::protocol::{ChatMessage, Hop, TokenUsage};

/// Answers every route request with one scripted label (or an error) and remembers the hop
/// of every request it got.
pub(crate) struct Router {
    reply: Result<&'static str, &'static str>,
    /// Fail as a server that cannot be connected to, instead of `reply`.
    unreachable: bool,
    seen: Mutex<Vec<Hop>>,
}

impl Router {
    pub(crate) fn answering(label: &'static str) -> Self {
        Router {
            reply: Ok(label),
            unreachable: false,
            seen: Mutex::new(Vec::new()),
        }
    }
    pub(crate) fn failing(error: &'static str) -> Self {
        Router {
            reply: Err(error),
            unreachable: false,
            seen: Mutex::new(Vec::new()),
        }
    }
    pub(crate) fn refusing() -> Self {
        Router {
            reply: Err("unused"),
            unreachable: true,
            seen: Mutex::new(Vec::new()),
        }
    }
    /// Requests of any hop received so far.
    pub(crate) fn requests(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub(crate) fn route_requests(&self) -> usize {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter().filter(|h| **h == Hop::Route).count()
    }
}

impl ChatBackend for Router {
    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(req.hop);
        let reply = self.reply;
        let unreachable = self.unreachable;
        Box::pin(async move {
            if unreachable {
                return Err(BackendError::Connect {
                    hop: req.hop,
                    url: "http://127.0.0.1:9/v1/chat/completions".into(),
                    message: "tcp connect error: Connection refused".into(),
                });
            }
            let label = reply.map_err(|body| BackendError::Http {
                hop: req.hop,
                url: "http://mock/v1".into(),
                status: 500,
                body: body.into(),
            })?;
            let done = ChatCompletion {
                message: ChatMessage::assistant(label),
                finish_reason: FinishReason::Stop,
                usage: Some(TokenUsage {
                    prompt_tokens: 40,
                    completion_tokens: 2,
                    ..Default::default()
                }),
                ttft: None,
                latency: Duration::ZERO,
                conversation_id: None,
            };
            let items = vec![Ok(ChatDelta::Completed(done))];
            Ok(Box::pin(futures_util::stream::iter(items)) as ChatStream)
        })
    }
    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
        Box::pin(async { Ok(vec![]) })
    }
    fn describe(&self) -> String {
        "router".into()
    }
}
