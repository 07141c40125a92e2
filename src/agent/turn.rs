//! One user turn: ask `mol` who answers (and announce how it was decided) → answer hops on that
//! expert, streaming deltas, with tool calls executed and fed back on the SAME expert, until an
//! answer without tool calls or a limit → close the task, start its summary in the background.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{Shared, context, lock, summaries, tool_calls};
use crate::backend::{BackendError, ChatCompletion, ChatDelta, ChatRequest, FinishReason};
use crate::mol::{AnswerInput, AnswerOptions, ExpertChoice, Step, modes};
use crate::protocol::{Event, Expert, Hop, TokenUsage, TurnStatus};
use crate::session::{Record, abandon_open_task};

/// Why a turn stopped early.
pub(crate) enum Stop {
    Interrupted,
    Failed(BackendError),
}

struct TurnCtx {
    shared: Arc<Shared>,
    turn_id: u64,
    cancel: CancellationToken,
    usage: TokenUsage,
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
    shared.record(Record::Turn {
        turn_id,
        text: text.clone(),
        at: chrono::Utc::now().to_rfc3339(),
    });
    let mut ctx = TurnCtx {
        shared: shared.clone(),
        turn_id,
        cancel,
        usage: TokenUsage::default(),
    };
    let (status, answer, expert) = match drive(&mut ctx, &text).await {
        Ok(Outcome {
            status,
            answer,
            expert,
        }) => (status, answer, expert),
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
    shared.record(Record::TurnEnded {
        turn_id,
        status,
        answer: answer.clone(),
    });
    shared.events.emit(Event::TurnCompleted {
        turn_id,
        status,
        answer,
        expert: public_expert(&shared, expert),
        duration_ms: started.elapsed().as_millis() as u64,
        usage: ctx.usage,
    });
}

struct Outcome {
    status: TurnStatus,
    answer: Option<String>,
    expert: Option<Expert>,
}

/// The expert a frontend is told about (none outside `mol` mode).
fn public_expert(shared: &Shared, expert: Option<Expert>) -> Option<Expert> {
    modes::shown_expert(shared.cfg.mode, expert)
}

async fn drive(ctx: &mut TurnCtx, text: &str) -> Result<Outcome, (Stop, Option<Expert>)> {
    let shared = ctx.shared.clone();
    // A tool loop left open by an interrupted turn is abandoned; its expert is the fallback (B1).
    let open_owner = lock(&shared.timeline).open_task().map(|t| t.owner);
    abandon(&shared);

    let step = Step::UserTurn { text, open_owner };
    let expert = choose_expert(ctx, step).await.map_err(|s| (s, None))?;
    let task_id = lock(&shared.timeline).open(expert, text);
    shared.record(Record::TaskOpened {
        task_id,
        owner: expert,
        user_text: text.to_string(),
    });
    if modes::summarizes(shared.cfg.mode) {
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
            });
        }
        if round_trips > 0 {
            let step = Step::ToolResults { issuer: expert };
            let choice = decide(ctx, step).await.map_err(|s| (s, Some(expert)))?;
            announce(ctx, &choice);
        }
        round_trips += 1;
        let request = if modes::fits_views(shared.cfg.mode) {
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
            && modes::keeps_conversation_id(shared.cfg.mode)
        {
            let changed = lock(&shared.conversation_id).as_deref() != Some(id.as_str());
            if changed {
                *lock(&shared.conversation_id) = Some(id.clone());
                shared.record(Record::ConversationId { id });
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
        lock(&shared.timeline).push(message.clone());
        shared.record(Record::Message {
            task_id,
            message: message.clone(),
        });
        if calls.is_empty() {
            lock(&shared.timeline).close(modes::summarizes(shared.cfg.mode));
            shared.record(Record::TaskClosed { task_id });
            if modes::summarizes(shared.cfg.mode) {
                summaries::spawn(&shared, ctx.turn_id, task_id);
            }
            return Ok(Outcome {
                status: TurnStatus::Done,
                answer: Some(message.content),
                expert: Some(expert),
            });
        }
        for call in &calls {
            let result = tool_calls::execute(&shared, ctx.turn_id, call, &ctx.cancel).await;
            lock(&shared.timeline).push(result.clone());
            shared.record(Record::Message {
                task_id,
                message: result,
            });
            if ctx.cancel.is_cancelled() {
                return Err((Stop::Interrupted, Some(expert)));
            }
        }
    }
}

/// Asks `mol` who answers a new user turn, announces it and records it in the session.
async fn choose_expert(ctx: &mut TurnCtx, step: Step<'_>) -> Result<Expert, Stop> {
    let shared = ctx.shared.clone();
    let choice = decide(ctx, step).await?;
    if choice.is_announced() {
        announce(ctx, &choice);
        shared.record(Record::Route {
            turn_id: ctx.turn_id,
            expert: choice.expert,
            decision: choice.decision,
            latency_ms: choice.latency().as_millis() as u64,
            reason: choice.reason,
        });
    }
    Ok(choice.expert)
}

/// Runs `mol`'s decision for `step`, with the route hop (when one is sent) announced as a hop
/// and counted in the turn's usage.
async fn decide(ctx: &mut TurnCtx, step: Step<'_>) -> Result<ExpertChoice, Stop> {
    let shared = ctx.shared.clone();
    let turn_id = ctx.turn_id;
    let pinned = *lock(&shared.pinned);
    let announce_hop = || {
        shared.events.emit(Event::HopStarted {
            turn_id,
            hop: Hop::Route,
            expert: Some(Expert::L0),
        })
    };
    let choice = tokio::select! {
        // A decision that needs no hop is ready at once and must win over a cancel.
        biased;
        c = crate::mol::decide(
            shared.backend.as_ref(),
            &shared.cfg.profile,
            shared.cfg.mode,
            pinned,
            step,
            announce_hop,
        ) => c,
        _ = ctx.cancel.cancelled() => return Err(Stop::Interrupted),
    };
    if let Some(hop) = choice.route_hop {
        ctx.usage.add(&hop.usage);
        shared.events.emit(Event::HopCompleted {
            turn_id,
            hop: Hop::Route,
            expert: Some(Expert::L0),
            latency_ms: hop.latency.as_millis() as u64,
            ttft_ms: None,
            usage: hop.usage,
        });
    }
    Ok(choice)
}

/// Tells the frontends who answers and why (nothing where the mode chooses no expert).
fn announce(ctx: &TurnCtx, choice: &ExpertChoice) {
    if choice.is_announced() {
        ctx.shared.events.emit(Event::RouteDecided {
            turn_id: ctx.turn_id,
            expert: choice.expert,
            decision: choice.decision,
            latency_ms: choice.latency().as_millis() as u64,
            reason: choice.reason.clone(),
        });
    }
}

/// Closes the open task, if any, without a summary, and records that.
fn abandon(shared: &Shared) {
    let abandoned = abandon_open_task(&mut lock(&shared.timeline));
    if let Some(task_id) = abandoned {
        shared.record(Record::TaskAbandoned { task_id });
    }
}

/// The answer request of `expert` from the current timeline, built by `mol` for the mode.
fn answer_request(shared: &Shared, expert: Expert) -> ChatRequest {
    let cfg = &shared.cfg;
    let head = shared.head();
    let tools = shared.tools.specs();
    // Taken first: the timeline lock is never held while taking another.
    let model = lock(&shared.model).clone();
    let conversation_id = lock(&shared.conversation_id).clone();
    let options = AnswerOptions {
        temperature: cfg.temperature,
        top_p: cfg.top_p,
        seed: cfg.seed,
        stop: Vec::new(),
        tool_choice: None,
        parallel_tool_calls: None,
        max_tokens: cfg.max_tokens,
        reasoning: cfg.reasoning,
    };
    let timeline = lock(&shared.timeline);
    let input = AnswerInput {
        expert,
        timeline: &timeline,
        head: &head,
        tools,
        options,
        model: model.as_deref(),
        conversation_id: conversation_id.as_deref(),
    };
    crate::mol::answer_hop_request(cfg.mode, &cfg.profile, input)
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
    ctx.usage.add(&usage);
    shared.events.emit(Event::HopCompleted {
        turn_id,
        hop: Hop::Answer,
        expert: public,
        latency_ms: started.elapsed().as_millis() as u64,
        ttft_ms: done.ttft.map(|d| d.as_millis() as u64),
        usage,
    });
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
