//! What the backend's answers and failures become for the client: finishes and turn errors.

use crate::backend::{BackendError, FinishReason};
use crate::protocol::{ErrorKind, Hop, TurnError, TurnErrorKind, TurnFinish};

pub(super) fn upstream_error(e: &BackendError) -> TurnError {
    let kind = e.kind();
    let (kind, code) = match kind {
        ErrorKind::ContextOverflow => (TurnErrorKind::ContextOverflow, "context_length_exceeded"),
        ErrorKind::Cancelled => (TurnErrorKind::Upstream(kind), "cancelled"),
        _ => (TurnErrorKind::Upstream(kind), "upstream_error"),
    };
    let what = match e {
        BackendError::Http { status, .. } => format!("the model server answered HTTP {status}"),
        BackendError::Connect { .. } => "the model server cannot be reached".to_string(),
        BackendError::Timeout { secs, .. } => {
            format!("the model server did not answer within {secs} s")
        }
        BackendError::ContextOverflow { .. } => {
            "the prompt does not fit the model's context window".to_string()
        }
        BackendError::Protocol { .. } => "the model server's answer was malformed".to_string(),
        BackendError::Engine { .. } => "the local engine failed".to_string(),
        BackendError::Cancelled { .. } => "cancelled".to_string(),
    };
    TurnError {
        kind,
        code: code.to_string(),
        message: format!("{}: {what}", hop_failed(e.hop())),
        detail: Some(e.to_string()),
    }
}

fn hop_failed(hop: Hop) -> &'static str {
    match hop {
        Hop::Route => "the route hop failed",
        Hop::Answer => "the answer hop failed",
        Hop::Summary => "the summary hop failed",
        Hop::Compaction => "the compaction hop failed",
    }
}

pub(super) fn finish_of(reason: FinishReason) -> TurnFinish {
    match reason {
        FinishReason::Length => TurnFinish::Length,
        FinishReason::ToolCalls => TurnFinish::ToolCalls,
        FinishReason::ContentFilter => TurnFinish::ContentFilter,
        FinishReason::Stop | FinishReason::Other => TurnFinish::Stop,
    }
}
