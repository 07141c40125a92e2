//! One streamed (SSE) answer between a turn and hyper, for both APIs: the frames the turn's
//! events make wait in a queue; a quiet turn sends a keepalive comment, and one whose upstream
//! stays silent past the idle timeout fails; once hyper has taken the last frame the turn is
//! told it was delivered (so it commits) and the request is counted; a body hyper drops before
//! its end is a client gone, and the turn's handle, dropped with it, rolls the conversation
//! back.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::admission::Admitted;
use super::errors::ApiError;
use super::{AppState, with_conversation};
use crate::protocol::{TurnEvent, TurnHandle};

const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// What both APIs' streams keep of the turn they relay.
pub(super) struct Relay {
    pub(super) state: Arc<AppState>,
    handle: TurnHandle,
    admitted: Option<Admitted>,
    pub(super) frames: VecDeque<Bytes>,
    started: Instant,
    /// The last frame is queued; `Some(true)` when the turn succeeded (commit once sent).
    pub(super) finished: Option<bool>,
    delivered: Option<tokio::sync::oneshot::Sender<()>>,
    last_event: Instant,
    ended: bool,
    /// The endpoint, for the metrics.
    path: &'static str,
}

impl Relay {
    /// Relays `handle`'s turn; the first frame is a keepalive, so headers go out at once.
    pub(super) fn new(
        state: Arc<AppState>,
        mut handle: TurnHandle,
        admitted: Admitted,
        started: Instant,
        path: &'static str,
    ) -> Relay {
        let (placeholder, _) = tokio::sync::oneshot::channel();
        let delivered = std::mem::replace(&mut handle.delivered, placeholder);
        Relay {
            state,
            handle,
            admitted: Some(admitted),
            frames: VecDeque::from([Bytes::from_static(KEEPALIVE)]),
            started,
            finished: None,
            delivered: Some(delivered),
            last_event: Instant::now(),
            ended: false,
            path,
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if !self.ended {
            self.state
                .metrics
                .client_gone(self.path, self.started.elapsed());
        }
    }
}

/// An API's framing of the turn's events (chat completion chunks, Responses events).
pub(super) trait Frames: Send + 'static {
    fn relay(&mut self) -> &mut Relay;
    /// Queues the frames of `ev`; the last one sets [`Relay::finished`].
    fn on_event(&mut self, ev: TurnEvent);
    /// Queues the frames that end the stream with `e`, and sets [`Relay::finished`].
    fn fail(&mut self, e: ApiError);
}

/// The next frame, or `None` at the end (after which the turn is committed).
async fn next_frame<F: Frames>(f: &mut F) -> Option<Bytes> {
    loop {
        let r = f.relay();
        if let Some(frame) = r.frames.pop_front() {
            return Some(frame);
        }
        if let Some(ok) = r.finished {
            // Hyper asked for more after the last frame: everything was handed over.
            if ok && let Some(tx) = r.delivered.take() {
                let _ = tx.send(());
            }
            r.admitted = None;
            r.ended = true;
            let status = if ok { 200 } else { 502 };
            r.state.metrics.request(r.path, status, r.started.elapsed());
            return None;
        }
        let waited = tokio::time::timeout(r.state.keepalive, r.handle.events.recv()).await;
        let r = f.relay();
        match waited {
            Ok(Some(ev)) => {
                r.last_event = Instant::now();
                f.on_event(ev);
            }
            Ok(None) => f.fail(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "turn_failed",
                "the turn ended without an answer",
            )),
            Err(_) if r.last_event.elapsed() >= r.state.idle_timeout => {
                let quiet = r.state.idle_timeout.as_secs();
                f.fail(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "upstream_idle_timeout",
                    format!("the upstream model sent nothing for {quiet} s"),
                ))
            }
            Err(_) => return Some(Bytes::from_static(KEEPALIVE)),
        }
    }
}

/// The SSE response that streams `frames`, tagged with the turn's conversation.
pub(super) fn sse_response<F: Frames>(frames: F, conversation: &str) -> Response {
    let body = futures_util::stream::unfold(frames, |mut f| async move {
        let frame = next_frame(&mut f).await?;
        Some((Ok::<Bytes, Infallible>(frame), f))
    });
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        // nginx buffers a proxied response unless told not to; a held-back stream is one burst.
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(body));
    match response {
        Ok(r) => with_conversation(r, conversation),
        Err(e) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
            .into_response(),
    }
}
