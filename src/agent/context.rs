//! Keeping an expert's view inside its context window during long tool loops: old tool outputs
//! shrink first, then the older steps of the task are compacted into a handoff summary the
//! expert writes itself (`crate::mol::compact`). Both are recorded in the session so a resumed
//! session shows the same views.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Shared, lock};
use crate::backend::{ChatRequest, complete};
use crate::mol::{ContextBudget, SummaryState, TokenEstimator, prompt_chars};
use crate::protocol::{Event, Expert, Hop, ToolSpec};
use crate::session::Record;

/// Tool results kept at full length when old ones shrink.
const KEEP_RECENT_OUTPUTS: usize = 3;
/// Assistant steps kept verbatim after a compaction.
const KEEP_STEPS: usize = 2;
/// How long the one `/models` probe for the context window may take.
const WINDOW_PROBE_LIMIT: Duration = Duration::from_millis(1500);
/// Used when neither the server nor the configuration says how large the window is.
pub const DEFAULT_CONTEXT_WINDOW: u64 = 131_072;

/// What the core learns about context use over a session.
#[derive(Debug, Default)]
pub(crate) struct ContextState {
    /// The context window: `None` = not asked yet; `Some(None)` = nobody reports one.
    window: Option<Option<u64>>,
}

/// The estimator of this session: the ratio learned so far (kept in the timeline, so a resumed
/// session starts from it), else the default.
fn estimator(shared: &Shared) -> TokenEstimator {
    shared
        .state()
        .timeline
        .token_ratio
        .map(TokenEstimator::with_ratio)
        .unwrap_or_default()
}

/// Estimated prompt tokens of a request (cheap: no tokenizing).
pub(crate) fn estimate_request(shared: &Shared, req: &ChatRequest) -> u64 {
    estimator(shared).estimate(&req.messages, &req.tools)
}

/// Tokens of `expert`'s answer request for `view` (with the tools offered), counted like
/// `prompt_tokens`: the before and after of a compaction are measured the same way.
pub(crate) fn view_tokens(
    shared: &Shared,
    expert: Expert,
    view: Vec<crate::protocol::ChatMessage>,
) -> u64 {
    let tools = fitting_tools(shared, shared.tool_specs(expert));
    let req = crate::mol::view_request(&shared.cfg.profile, expert, view, tools);
    prompt_tokens(shared, &req)
}

/// The backend's model list: fetched once, shared by every caller (a failed fetch is not kept,
/// so a later caller asks again).
pub(crate) async fn model_list(
    shared: &Shared,
) -> Result<Vec<crate::backend::ModelInfo>, crate::backend::BackendError> {
    shared
        .models
        .get_or_try_init(|| shared.backend.list_models())
        .await
        .cloned()
}

/// The context window of `model` as reported: the configured one, else what `/models` says
/// (`max_model_len`, or the local engine's config). Asked once per session.
pub(crate) async fn reported_window(shared: &Shared, model: &str) -> Option<u64> {
    if let Some(w) = shared.cfg.context_window {
        return Some(w);
    }
    if let Some(known) = lock(&shared.context).window {
        return known;
    }
    // Short: this runs before the first answer, and a `/models` that fails (a 500 retried with
    // backoff) must not hold the turn up for seconds. One try per session, said when it fails.
    let listed = tokio::time::timeout(WINDOW_PROBE_LIMIT, model_list(shared)).await;
    let found = match listed {
        Ok(Ok(models)) => models
            .iter()
            .find(|m| m.id == model)
            .and_then(|m| m.context_window),
        failed => {
            let why = match failed {
                // A failing server is retried with backoff inside `list_models`: its status
                // is not known when the limit cuts the retries short.
                Err(_) => format!("no list within {:.1} s", WINDOW_PROBE_LIMIT.as_secs_f64()),
                Ok(Err(crate::backend::BackendError::Http { status, .. })) => {
                    format!("HTTP {status}")
                }
                Ok(Err(e)) => e.kind().to_string(),
                Ok(Ok(_)) => String::new(),
            };
            shared.events.emit(Event::Warning {
                message: format!(
                    "could not read the context window from {}/models ({why}); using \
                     {DEFAULT_CONTEXT_WINDOW} tokens. Set context_window to skip this probe",
                    shared.backend.describe()
                ),
            });
            None
        }
    };
    lock(&shared.context).window = Some(found);
    found
}

/// The window as far as it is known without asking: the configured one, else the one
/// `/models` reported when it was asked.
fn known_window(shared: &Shared) -> Option<u64> {
    shared
        .cfg
        .context_window
        .or_else(|| lock(&shared.context).window.flatten())
}

/// The share of the window tool schemas may take before they are sent lean.
const TOOLS_SHARE: f64 = 0.25;

/// The tools as offered, or lean (`ToolSpec::lean`) when their schemas would take more than a
/// quarter of a known window: in an 8k window a coding expert's full schemas are half of it,
/// and every file read then pushed the view into compaction.
pub(crate) fn fitting_tools(shared: &Shared, tools: Vec<ToolSpec>) -> Vec<ToolSpec> {
    let Some(window) = known_window(shared) else {
        return tools;
    };
    let tokens = estimator(shared).estimate(&[], &tools);
    if tokens as f64 <= window as f64 * TOOLS_SHARE {
        return tools;
    }
    tools.iter().map(ToolSpec::lean).collect()
}

/// The window to budget against: the reported one, else a conservative default.
pub(crate) async fn window(shared: &Shared, model: &str) -> u64 {
    reported_window(shared, model)
        .await
        .unwrap_or(DEFAULT_CONTEXT_WINDOW)
}

/// The budget of a window: compaction at `compact_at` of it (config; 85% by default).
fn budget(shared: &Shared, window: u64) -> ContextBudget {
    let budget = ContextBudget::new(window);
    match shared.cfg.compact_at {
        Some(fraction) => budget.with_compact_at(fraction),
        None => budget,
    }
}

/// Prompt tokens of a request: exact when the backend can count, else estimated.
pub(crate) fn prompt_tokens(shared: &Shared, req: &ChatRequest) -> u64 {
    shared
        .backend
        .count_prompt_tokens(req)
        .unwrap_or_else(|| estimator(shared).estimate(&req.messages, &req.tools))
}

/// What the estimator needs to remember about a request it will learn from.
pub(crate) fn shape(req: &ChatRequest) -> (u64, usize) {
    (prompt_chars(&req.messages, &req.tools), req.messages.len())
}

/// Teaches the estimator the server's real count for a request that was sent, and records the
/// learned ratio in the session when it changed.
pub(crate) fn observe(shared: &Shared, shape: (u64, usize), prompt_tokens: u64) {
    if prompt_tokens == 0 {
        return;
    }
    let mut est = estimator(shared);
    est.observe(shape.0, shape.1, prompt_tokens);
    // Recorded exactly on every change: a resumed session must estimate (and so shrink and
    // compact) bit for bit like the one it continues. One short line per answer at most.
    shared.commit_change(Record::TokenRatio {
        chars_per_token: est.chars_per_token(),
    });
}

/// Waits for the summary hops still running for `expert`'s own closed tasks before `before`.
async fn await_own_summaries(
    shared: &Shared,
    expert: Expert,
    before: u64,
    cancel: &CancellationToken,
) {
    let pending: Vec<u64> = shared
        .state()
        .timeline
        .tasks
        .iter()
        .filter(|t| {
            t.owner == expert && t.closed && t.id < before && t.summary == SummaryState::Pending
        })
        .map(|t| t.id)
        .collect();
    for task_id in pending {
        let in_flight = lock(&shared.summaries).remove(&task_id);
        if let Some(mut handle) = in_flight {
            tokio::select! {
                _ = &mut handle => {}
                _ = cancel.cancelled() => {
                    // Still running: shutdown waits for it.
                    lock(&shared.summaries).insert(task_id, handle);
                    return;
                }
            }
        }
    }
}

fn record_fold(shared: &Shared, expert: Expert, task_id: u64) -> bool {
    // A fold that hides nothing now is not recorded (replay applies every recorded fold).
    let hides = shared.state().timeline.fold_hides(expert, task_id);
    if hides {
        shared.commit(Record::TasksFolded {
            expert,
            before_task: task_id,
        });
    }
    hides
}

fn record_shrink(shared: &Shared, task_id: u64, keep_recent: usize) -> bool {
    shared.commit_change(Record::ToolOutputsShrunk {
        task_id,
        keep_recent,
    })
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
    let known = known_window(shared).is_some();
    let req = build();
    let budget = budget(shared, window(shared, &req.model).await);
    // Built again once the window is known: the tools it offers depend on it.
    let req = if known { req } else { build() };
    let tokens = prompt_tokens(shared, &req);
    // The request again after the timeline's view changed, else the same one (counting an
    // exact prompt means tokenizing it: done only when something changed).
    let redo = |changed: bool, req: ChatRequest, tokens: u64| {
        if changed {
            let req = build();
            let tokens = prompt_tokens(shared, &req);
            (req, tokens)
        } else {
            (req, tokens)
        }
    };
    if !budget.needs_shrink(tokens) {
        return req;
    }
    let (req, tokens) = redo(
        record_shrink(shared, task_id, KEEP_RECENT_OUTPUTS),
        req,
        tokens,
    );
    if !budget.needs_compaction(tokens) {
        return req;
    }
    // Under pressure, every output but the newest shrinks before a model call is spent: one
    // large output just read must not make each following step compact again.
    let (req, tokens) = redo(record_shrink(shared, task_id, 1), req, tokens);
    if !budget.needs_compaction(tokens) {
        return req;
    }
    // The expert's own older tasks (verbatim so far) fold to their summaries: no model call,
    // and a new task too short to compact still fits. Summaries still in flight are waited
    // for: the view needs them now.
    await_own_summaries(shared, expert, task_id, cancel).await;
    let (req, tokens) = redo(record_fold(shared, expert, task_id), req, tokens);
    if !budget.needs_compaction(tokens) {
        return req;
    }
    let view = req.messages.clone();
    let compacted = compact(
        shared, turn_id, task_id, expert, view, tokens, false, cancel,
    )
    .await;
    let (req, tokens) = redo(compacted, req, tokens);
    // Last resort: the newest output alone does not fit; it shrinks too.
    if tokens > budget.hard_limit() && record_shrink(shared, task_id, 0) {
        return build();
    }
    req
}

/// How many recent steps a compaction keeps verbatim: `KEEP_STEPS`, or only the newest when
/// those steps alone take more than a quarter of the window. Keeping two large outputs in a
/// small window left the view above the threshold right after compacting, so every following
/// step compacted again (5 compactions in 7 reads of 8 KB files in an 8k window); with only
/// the newest kept, the view lands well below the threshold and the next steps fit.
fn steps_to_keep(shared: &Shared, task_id: u64, window: u64) -> usize {
    let estimator = estimator(shared);
    let state = shared.state();
    let Some(task) = state.timeline.task(task_id) else {
        return KEEP_STEPS;
    };
    let Some(from) = crate::mol::keep_from_for(task, KEEP_STEPS) else {
        return KEEP_STEPS;
    };
    let kept = estimator.estimate(&task.messages[from..], &[]);
    if kept > window / 4 { 1 } else { KEEP_STEPS }
}

/// Compacts a task from `view` (its owner's current view). Returns whether anything changed.
/// `manual`: asked for with `/compact` (the hooks' `trigger`), else the context was full.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn compact(
    shared: &Shared,
    turn_id: u64,
    task_id: u64,
    expert: Expert,
    view: Vec<crate::protocol::ChatMessage>,
    tokens_before: u64,
    manual: bool,
    cancel: &CancellationToken,
) -> bool {
    let window_now = window(shared, shared.cfg.profile.adapter(expert)).await;
    let keep_steps = steps_to_keep(shared, task_id, window_now);
    // The steps kept verbatim are not summarized: the request is the view before them (the
    // previous answer hop's prompt, near enough, plus one message), smaller and mostly
    // cached.
    let kept_messages =
        shared.state().timeline.task(task_id).and_then(|t| {
            crate::mol::keep_from_for(t, keep_steps).map(|from| t.messages.len() - from)
        });
    let Some(kept_messages) = kept_messages else {
        return false;
    };
    let mut view = view;
    if kept_messages < view.len() {
        view.truncate(view.len() - kept_messages);
    }
    let trigger = if manual { "manual" } else { "auto" };
    super::hooks::fire(
        shared,
        crate::hooks::HookEvent::PreCompact,
        trigger,
        super::hooks::fields([
            ("trigger", trigger.into()),
            ("custom_instructions", "".into()),
            ("expert", expert.label().into()),
        ]),
    )
    .await;
    shared.events.emit(Event::HopStarted {
        turn_id,
        hop: Hop::Compaction,
        expert: Some(expert),
    });
    let started = std::time::Instant::now();
    let profile = &shared.cfg.profile;
    let window = window(shared, profile.adapter(expert)).await;
    let tools = fitting_tools(shared, shared.tool_specs(expert));
    let request =
        crate::mol::fitted_compaction_request(profile, expert, view, tools, window, |r| {
            prompt_tokens(shared, r)
        });
    let result = tokio::select! {
        r = complete(shared.backend.as_ref(), request) => r,
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
    shared.hop_completed(
        turn_id,
        Hop::Compaction,
        Some(expert),
        started.elapsed().as_millis() as u64,
        None,
        usage,
    );
    let changed = shared.commit_change(Record::Compacted {
        task_id,
        summary: summary.clone(),
        keep_steps,
    });
    if !changed {
        return false;
    }
    let after = {
        let head = shared.head(expert);
        let view = shared.state().timeline.view(expert, &head);
        view_tokens(shared, expert, view)
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
    super::hooks::fire(
        shared,
        crate::hooks::HookEvent::PostCompact,
        trigger,
        super::hooks::fields([
            ("trigger", trigger.into()),
            ("expert", expert.label().into()),
            ("compact_summary", summary.into()),
            ("tokens_before", tokens_before.into()),
            ("tokens_after", after.into()),
        ]),
    )
    .await;
    true
}

/// The project instruction files the experts' system prompt was given (`/status`): found the
/// same way the setup finds them (the workspace, and `baton/` in the user's config dir).
pub(crate) fn instruction_files(cfg: &super::AgentConfig) -> Vec<String> {
    let user_dir = dirs::config_dir().map(|d| d.join("baton"));
    super::instructions::discover(&cfg.workspace, user_dir.as_deref())
        .files
        .iter()
        .map(|p| p.display().to_string())
        .collect()
}
