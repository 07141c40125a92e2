//! Keeping an expert's view inside its context window during long tool loops: old tool outputs
//! shrink first, then the older steps of the task are compacted into a handoff summary the
//! expert writes itself (`crate::mol::compact`). Both are recorded in the session so a resumed
//! session shows the same views.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Shared, lock};
use crate::backend::{ChatRequest, collect};
use crate::mol::{ContextBudget, TokenEstimator, compaction_request, prompt_chars};
use crate::protocol::{Event, Expert, Hop};
use crate::session::Record;

/// Tool results kept at full length when old ones shrink.
const KEEP_RECENT_OUTPUTS: usize = 3;
/// Assistant steps kept verbatim after a compaction.
const KEEP_STEPS: usize = 2;
/// Used when neither the server nor the configuration says how large the window is.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 131_072;

/// What the core learns about context use over a session.
#[derive(Debug, Default)]
pub(crate) struct ContextState {
    estimator: TokenEstimator,
    /// The context window, once known (asked from the server on first use).
    window: Option<u64>,
}

impl ContextState {
    pub(crate) fn estimate(&self, view: &[crate::backend::ChatMessage]) -> u64 {
        self.estimator.estimate(view, &[])
    }
}

/// The context window of `model`: the configured one, else what `/models` reports, else a
/// conservative default. Asked once per session.
pub(crate) async fn window(shared: &Shared, model: &str) -> u64 {
    if let Some(w) = shared.cfg.context_window.or(lock(&shared.context).window) {
        return w;
    }
    let listed = tokio::time::timeout(Duration::from_secs(10), shared.backend.list_models()).await;
    let found = match listed {
        Ok(Ok(models)) => models
            .iter()
            .find(|m| m.id == model)
            .and_then(|m| m.context_window),
        _ => None,
    };
    let w = found.unwrap_or(DEFAULT_CONTEXT_WINDOW);
    lock(&shared.context).window = Some(w);
    w
}

/// Prompt tokens of a request: exact when the backend can count, else estimated.
pub(crate) fn prompt_tokens(shared: &Shared, req: &ChatRequest) -> u64 {
    shared.backend.count_prompt_tokens(req).unwrap_or_else(|| {
        lock(&shared.context)
            .estimator
            .estimate(&req.messages, &req.tools)
    })
}

/// What the estimator needs to remember about a request it will learn from.
pub(crate) fn shape(req: &ChatRequest) -> (u64, usize) {
    (prompt_chars(&req.messages, &req.tools), req.messages.len())
}

/// Teaches the estimator the server's real count for a request that was sent.
pub(crate) fn observe(shared: &Shared, shape: (u64, usize), prompt_tokens: u64) {
    if prompt_tokens > 0 {
        lock(&shared.context)
            .estimator
            .observe(shape.0, shape.1, prompt_tokens);
    }
}

/// The window, if known yet (for usage events).
pub(crate) fn known_window(shared: &Shared) -> Option<u64> {
    shared.cfg.context_window.or(lock(&shared.context).window)
}

/// Makes the open task's view fit before an answer hop: shrink, then compact if still needed.
/// `build` makes the answer request from the current timeline. Returns the request to send.
pub(crate) async fn fit(
    shared: &Shared,
    turn_id: u64,
    task_id: u64,
    expert: Expert,
    cancel: &CancellationToken,
    build: impl Fn() -> ChatRequest,
) -> ChatRequest {
    let req = build();
    let budget = ContextBudget::new(window(shared, &req.model).await);
    let tokens = prompt_tokens(shared, &req);
    if !budget.needs_shrink(tokens) {
        return req;
    }
    let shrunk = lock(&shared.timeline).shrink_old_tool_outputs(task_id, KEEP_RECENT_OUTPUTS);
    if shrunk {
        shared.record(Record::ToolOutputsShrunk {
            task_id,
            keep_recent: KEEP_RECENT_OUTPUTS,
        });
    }
    let req = if shrunk { build() } else { req };
    let tokens = prompt_tokens(shared, &req);
    if !budget.needs_compaction(tokens) {
        return req;
    }
    if compact(
        shared,
        turn_id,
        task_id,
        expert,
        req.messages.clone(),
        tokens,
        cancel,
    )
    .await
    {
        build()
    } else {
        req
    }
}

/// Compacts a task from `view` (its owner's current view). Returns whether anything changed.
pub(crate) async fn compact(
    shared: &Shared,
    turn_id: u64,
    task_id: u64,
    expert: Expert,
    view: Vec<crate::backend::ChatMessage>,
    tokens_before: u64,
    cancel: &CancellationToken,
) -> bool {
    let can = lock(&shared.timeline)
        .task(task_id)
        .is_some_and(|t| crate::mol::keep_from_for(t, KEEP_STEPS).is_some());
    if !can {
        return false;
    }
    shared.events.emit(Event::HopStarted {
        turn_id,
        hop: Hop::Compaction,
        expert: Some(expert),
    });
    let started = std::time::Instant::now();
    let request = compaction_request(&shared.cfg.profile, expert, view);
    let result = tokio::select! {
        r = async {
            let stream = shared.backend.chat(request).await?;
            collect(stream).await
        } => r,
        _ = cancel.cancelled() => return false,
    };
    let (summary, usage) = match result {
        Ok(done) => (
            crate::mol::summary_text(&done),
            done.usage.unwrap_or_default(),
        ),
        Err(e) => {
            shared.events.emit(Event::Warning {
                message: format!("compaction summary failed, dropping old steps instead: {e}"),
            });
            (String::new(), Default::default())
        }
    };
    shared.events.emit(Event::HopCompleted {
        turn_id,
        hop: Hop::Compaction,
        expert: Some(expert),
        latency_ms: started.elapsed().as_millis() as u64,
        ttft_ms: None,
        usage,
    });
    let changed = lock(&shared.timeline).compact(task_id, &summary, KEEP_STEPS);
    if !changed {
        return false;
    }
    shared.record(Record::Compacted {
        task_id,
        summary: summary.clone(),
        keep_steps: KEEP_STEPS,
    });
    let after = {
        let head = shared.head();
        let view = lock(&shared.timeline).view(expert, &head);
        lock(&shared.context).estimator.estimate(&view, &[])
    };
    shared.events.emit(Event::ContextCompacted {
        expert,
        tokens_before,
        tokens_after: after,
        method: if summary.is_empty() {
            "dropped_tool_outputs".into()
        } else {
            "summary".into()
        },
    });
    true
}
