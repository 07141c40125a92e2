//! One user turn: route (unless pinned, sticky or not in `mol` mode) → answer hops on the chosen
//! expert, streaming deltas, with tool calls executed and fed back on the SAME expert, until an
//! answer without tool calls or a limit → close the task, start its summary in the background.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{Shared, context, lock, summaries, tool_calls};
use crate::backend::{BackendError, ChatCompletion, ChatDelta, ChatRequest, FinishReason};
use crate::mol::{AnswerOptions, ReasoningWire};
use crate::protocol::{Event, Expert, Hop, Mode, RouteDecision, TurnStatus};
use crate::session::Record;

/// Why a turn stopped early.
pub(crate) enum Stop {
    Interrupted,
    Failed(BackendError),
}

struct TurnCtx {
    shared: Arc<Shared>,
    turn_id: u64,
    cancel: CancellationToken,
}

pub(crate) async fn run_turn(
    shared: Arc<Shared>,
    turn_id: u64,
    text: String,
    cancel: CancellationToken,
) {
    let started = Instant::now();
    shared.events.emit(Event::TurnStarted {
        turn_id,
        text: text.clone(),
    });
    let mut ctx = TurnCtx {
        shared: shared.clone(),
        turn_id,
        cancel,
    };
    let mut summary_task = None;
    let (status, answer, expert) = match drive(&mut ctx, &text).await {
        Ok(Outcome {
            status,
            answer,
            expert,
            summarize,
        }) => {
            summary_task = summarize;
            (status, answer, expert)
        }
        Err((stop, expert)) => {
            abandon(&shared);
            match stop {
                Stop::Interrupted => (TurnStatus::Interrupted, None, expert),
                Stop::Failed(e) => {
                    shared.events.emit(Event::Error {
                        message: e.to_string(),
                        kind: e.kind(),
                        hop: Some(e.hop()),
                    });
                    (TurnStatus::Error, None, expert)
                }
            }
        }
    };
    shared.commit(Record::TurnEnded {
        turn_id,
        status,
        answer: answer.clone(),
    });
    let (usage_by_hop, session_usage) = {
        let state = shared.state();
        let turn = if state.turn_id == turn_id {
            state.turn_usage
        } else {
            Default::default()
        };
        (turn, state.usage)
    };
    shared.events.emit(Event::TurnCompleted {
        turn_id,
        status,
        answer,
        expert: public_expert(&shared, expert),
        duration_ms: started.elapsed().as_millis() as u64,
        usage: usage_by_hop.total,
        usage_by_hop: Box::new(usage_by_hop),
        session_usage: Box::new(session_usage),
    });
    // Started after the turn is reported, so the turn's numbers never depend on how fast the
    // summary is: its tokens go to the session total.
    if let Some(task_id) = summary_task {
        summaries::spawn(&shared, turn_id, task_id);
    }
}

struct Outcome {
    status: TurnStatus,
    answer: Option<String>,
    expert: Option<Expert>,
    /// The closed task whose summary hop starts once the turn is reported.
    summarize: Option<u64>,
}

/// Experts are a client-side notion only in `mol` mode.
fn public_expert(shared: &Shared, expert: Option<Expert>) -> Option<Expert> {
    (shared.cfg.mode == Mode::Mol).then_some(expert).flatten()
}

async fn drive(ctx: &mut TurnCtx, text: &str) -> Result<Outcome, (Stop, Option<Expert>)> {
    let shared = ctx.shared.clone();
    // A tool loop left open by an interrupted turn is abandoned; its expert is the fallback (B1).
    let open_owner = shared.state().timeline.open_task().map(|t| t.owner);
    abandon(&shared);

    let expert = choose_expert(ctx, text, open_owner)
        .await
        .map_err(|s| (s, None))?;
    let task_id = shared.state().timeline.tasks.last().map_or(1, |t| t.id + 1);
    shared.commit(Record::TaskOpened {
        task_id,
        owner: expert,
        user_text: text.to_string(),
    });
    if shared.cfg.mode == Mode::Mol {
        tokio::select! {
            _ = summaries::ensure_for(&shared, ctx.turn_id, expert) => {}
            _ = ctx.cancel.cancelled() => return Err((Stop::Interrupted, Some(expert))),
        }
    }

    let mut round_trips = 0u32;
    loop {
        if let Some(max) = shared.cfg.max_round_trips
            && round_trips >= max
        {
            shared.events.emit(Event::Warning {
                message: format!("--max-turns {max} reached before the model finished"),
            });
            abandon(&shared);
            return Ok(Outcome {
                status: TurnStatus::LimitReached,
                answer: None,
                expert: Some(expert),
                summarize: None,
            });
        }
        if round_trips > 0 && shared.cfg.mode == Mode::Mol {
            // A tool result continues on the expert that issued the call: no route hop.
            shared.events.emit(Event::RouteDecided {
                turn_id: ctx.turn_id,
                expert,
                decision: RouteDecision::Sticky,
                latency_ms: 0,
                reason: None,
            });
        }
        round_trips += 1;
        let request = if shared.cfg.mode == Mode::Mol {
            let build = || answer_request(&shared, expert);
            context::fit(&shared, ctx.turn_id, task_id, expert, &ctx.cancel, build).await
        } else {
            answer_request(&shared, expert)
        };
        let shape = context::shape(&request);
        let mut done = answer_hop(ctx, request, expert)
            .await
            .map_err(|s| (s, Some(expert)))?;
        if let Some(usage) = done.usage {
            context::observe(&shared, shape, usage.prompt_tokens);
        }
        if let Some(id) = done.conversation_id.clone()
            && shared.cfg.mode == Mode::Proxy
        {
            let changed = shared.state().conversation_id_or_default() != id;
            if changed {
                shared.commit(Record::ConversationId { id });
            }
        }
        // A truncated answer's tool calls are incomplete: drop them (§4.8).
        if matches!(
            done.finish_reason,
            FinishReason::Length | FinishReason::ContentFilter
        ) {
            done.message.tool_calls.clear();
        }
        let message = done.message;
        let calls = message.tool_calls.clone();
        shared.commit(Record::Message {
            task_id,
            message: message.clone(),
        });
        if calls.is_empty() {
            shared.commit(Record::TaskClosed { task_id });
            return Ok(Outcome {
                status: TurnStatus::Done,
                answer: Some(message.content),
                expert: Some(expert),
                summarize: (shared.cfg.mode == Mode::Mol).then_some(task_id),
            });
        }
        for call in &calls {
            let result = tool_calls::execute(&shared, ctx.turn_id, call, &ctx.cancel).await;
            shared.commit(Record::Message {
                task_id,
                message: result,
            });
            if ctx.cancel.is_cancelled() {
                return Err((Stop::Interrupted, Some(expert)));
            }
        }
    }
}

/// Pinned, routed by L0, or (outside `mol` mode) nobody: the task owner is then a fixed
/// internal label so the whole history is one expert's own view.
async fn choose_expert(
    ctx: &mut TurnCtx,
    text: &str,
    open_owner: Option<Expert>,
) -> Result<Expert, Stop> {
    let shared = ctx.shared.clone();
    if shared.cfg.mode != Mode::Mol {
        return Ok(Expert::L2);
    }
    let pinned = *lock(&shared.pinned);
    let (expert, decision, reason, latency_ms) = match pinned {
        Some(p) => (p, RouteDecision::Pinned, None, 0),
        None => {
            shared.events.emit(Event::HopStarted {
                turn_id: ctx.turn_id,
                hop: Hop::Route,
                expert: Some(Expert::L0),
            });
            let outcome = tokio::select! {
                o = crate::mol::route(shared.backend.as_ref(), &shared.cfg.profile, text, open_owner) => o,
                _ = ctx.cancel.cancelled() => return Err(Stop::Interrupted),
            };
            let latency_ms = outcome.latency.as_millis() as u64;
            shared.hop_completed(
                ctx.turn_id,
                Hop::Route,
                Some(Expert::L0),
                latency_ms,
                None,
                outcome.usage,
            );
            // The raw label of a model decision is noise; a fallback's reason is the point.
            let reason = (outcome.decision == RouteDecision::Fallback)
                .then_some(outcome.reason)
                .flatten();
            (outcome.expert, outcome.decision, reason, latency_ms)
        }
    };
    shared.events.emit(Event::RouteDecided {
        turn_id: ctx.turn_id,
        expert,
        decision,
        latency_ms,
        reason: reason.clone(),
    });
    shared.commit(Record::Route {
        turn_id: ctx.turn_id,
        expert,
        decision,
        reason,
        latency_ms,
    });
    Ok(expert)
}

/// Closes the open task, if any, without a summary, and records that.
fn abandon(shared: &Shared) {
    let open = shared.state().timeline.open_task().map(|t| t.id);
    if let Some(task_id) = open {
        shared.commit(Record::TaskAbandoned { task_id });
    }
}

/// The answer request of `expert` from the current timeline.
fn answer_request(shared: &Shared, expert: Expert) -> ChatRequest {
    let cfg = &shared.cfg;
    let head = shared.head();
    let (model, view, wire) = {
        let state = shared.state();
        let timeline = &state.timeline;
        match cfg.mode {
            Mode::Mol => (
                cfg.profile.adapter(expert).to_string(),
                timeline.view(expert, &head),
                ReasoningWire::HarnessMapping,
            ),
            Mode::Proxy | Mode::Single => (
                lock(&shared.model).clone().unwrap_or_default(),
                timeline.full_history(&head),
                ReasoningWire::PassThrough,
            ),
        }
    };
    let tools = shared.tools.specs();
    let opts = AnswerOptions {
        temperature: cfg.temperature,
        top_p: cfg.top_p,
        seed: cfg.seed,
        stop: Vec::new(),
        tool_choice: (!tools.is_empty()).then(|| "auto".to_string()),
        parallel_tool_calls: None,
        max_tokens: cfg.max_tokens,
        reasoning: cfg.reasoning,
    };
    let mut req = crate::mol::answer_request(&model, view, tools, &opts, wire);
    if cfg.mode == Mode::Proxy {
        req.conversation_id = Some(shared.state().conversation_id_or_default());
    }
    req
}

/// Runs one streamed answer hop, turning deltas into events.
async fn answer_hop(
    ctx: &mut TurnCtx,
    request: ChatRequest,
    expert: Expert,
) -> Result<ChatCompletion, Stop> {
    let shared = ctx.shared.clone();
    let public = public_expert(&shared, Some(expert));
    let turn_id = ctx.turn_id;
    shared.events.emit(Event::HopStarted {
        turn_id,
        hop: Hop::Answer,
        expert: public,
    });
    let started = Instant::now();
    // Context use when the server reports no usage (the local engine always does).
    let estimated = context::estimate_request(&shared, &request);
    let window = context::reported_window(&shared, &request.model).await;
    let mut stream = tokio::select! {
        r = shared.backend.chat(request) => r.map_err(Stop::Failed)?,
        _ = ctx.cancel.cancelled() => return Err(Stop::Interrupted),
    };
    let done = loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = ctx.cancel.cancelled() => return Err(Stop::Interrupted),
        };
        match item {
            Some(Ok(ChatDelta::Text(delta))) => shared.events.emit(Event::MessageDelta {
                turn_id,
                expert: public,
                delta,
            }),
            Some(Ok(ChatDelta::Reasoning(delta))) => {
                shared.events.emit(Event::ReasoningDelta { turn_id, delta })
            }
            Some(Ok(ChatDelta::ToolCallStarted { .. } | ChatDelta::ToolCallArguments { .. })) => {}
            Some(Ok(ChatDelta::Completed(done))) => break done,
            Some(Err(e)) => return Err(Stop::Failed(e)),
            None => {
                return Err(Stop::Failed(BackendError::Protocol {
                    hop: Hop::Answer,
                    url: shared.backend.describe(),
                    message: "the response stream ended without a completion".into(),
                }));
            }
        }
    };
    let usage = done.usage.unwrap_or_default();
    shared.hop_completed(
        turn_id,
        Hop::Answer,
        public,
        started.elapsed().as_millis() as u64,
        done.ttft.map(|d| d.as_millis() as u64),
        usage,
    );
    shared.events.emit(Event::MessageFinal {
        turn_id,
        expert: public,
        text: done.message.content.clone(),
    });
    shared.events.emit(Event::Usage {
        turn_id,
        usage,
        context_used: Some(
            done.usage
                .map_or(estimated, |u| u.prompt_tokens + u.completion_tokens),
        ),
        context_window: window,
    });
    Ok(done)
}
