//! One user turn: ask `mol` who answers (and announce how it was decided) → answer hops on that
//! expert, streaming deltas, with tool calls executed and fed back on the SAME expert, until an
//! answer without tool calls or a limit → close the task, start its summary in the background.

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{Shared, context, hooks, lock, summaries, tool_calls};
use crate::backend::{BackendError, ChatCompletion, ChatDelta, ChatRequest, FinishReason};
use crate::hooks::HookEvent;
use crate::mol::{
    AnswerInput, AnswerOptions, ExpertChoice, Resolved, Speculation, Step, Timeline, modes,
};
use crate::protocol::ChatMessage;
use crate::protocol::{
    ErrorKind, Event, Expert, Hop, SpeculationOutcome, SpeculationSample, TurnStatus,
};
use crate::session::Record;

/// Why a turn stopped early.
pub(crate) enum Stop {
    Interrupted,
    Failed(BackendError),
    /// A hook refused the user's prompt; the text is for the user.
    Blocked(String),
    /// The turn could not start (a required MCP server is down); the text says why.
    Refused(String),
}

/// How often a Stop hook may send the expert back to work in one turn: a hook that never
/// checks `stop_hook_active` must not loop for ever.
const MAX_STOP_CONTINUATIONS: u32 = 8;

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
            abandon(&shared, Some(stop.note(&shared)));
            match stop {
                Stop::Interrupted => (TurnStatus::Interrupted, None, expert),
                Stop::Refused(message) => {
                    shared.events.emit(Event::Error {
                        message,
                        kind: ErrorKind::Config,
                        hop: None,
                    });
                    (TurnStatus::Error, None, expert)
                }
                Stop::Failed(e) => {
                    shared.events.emit(Event::Error {
                        message: e.to_string(),
                        kind: e.kind(),
                        hop: Some(e.hop()),
                    });
                    (TurnStatus::Error, None, expert)
                }
                Stop::Blocked(message) => {
                    shared.events.emit(Event::Error {
                        message,
                        kind: crate::protocol::ErrorKind::Cancelled,
                        hop: None,
                    });
                    (TurnStatus::Error, None, expert)
                }
            }
        }
    };
    end_checkpoint(&shared, turn_id).await;
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
    if let Some(task_id) = summary_task
        && summaries::read_in_this_process(&shared)
    {
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

/// The expert a frontend is told about (none outside `mol` mode).
/// Takes the turn's closing snapshot when the turn changed files, and records both snapshot
/// ids in the session file: the only place undo takes them from.
async fn end_checkpoint(shared: &Arc<Shared>, turn_id: u64) {
    let state = shared.tool_state.clone();
    let workspace = shared.cfg.workspace.clone();
    let taken =
        tokio::task::spawn_blocking(move || crate::tool::checkpoint::end_turn(&state, &workspace))
            .await
            .ok()
            .flatten();
    match taken {
        Some(Ok(cp)) => shared.commit(Record::Checkpoint {
            turn_id,
            before: cp.before,
            after: cp.after,
            head: cp.head,
        }),
        Some(Err(e)) => shared.events.emit(Event::Warning {
            message: format!("checkpoint failed, undo will not cover this turn: {e}"),
        }),
        None => {}
    }
}

fn public_expert(shared: &Shared, expert: Option<Expert>) -> Option<Expert> {
    modes::shown_expert(shared.cfg.mode, expert)
}

async fn drive(ctx: &mut TurnCtx, text: &str) -> Result<Outcome, (Stop, Option<Expert>)> {
    let shared = ctx.shared.clone();
    // Servers still starting are waited for, so the first request offers their tools (each
    // start is bounded by its timeout); a required one that failed stops the turn before any
    // model call.
    if let Some(hub) = shared.tools.mcp() {
        let starting = hub.starting();
        if !starting.is_empty() {
            let names: Vec<String> = starting
                .iter()
                .map(|(name, limit)| format!("`{name}` (up to {} s)", limit.as_secs_f64()))
                .collect();
            shared.events.emit(Event::Warning {
                message: format!("waiting for MCP server {} to start", names.join(", ")),
            });
        }
        let problem = tokio::select! {
            p = async {
                hub.settled().await;
                hub.required_problem().await
            } => p,
            _ = ctx.cancel.cancelled() => return Err((Stop::Interrupted, None)),
        };
        if let Some(problem) = problem {
            return Err((Stop::Refused(problem), None));
        }
    }
    // A tool loop left open by an interrupted turn is abandoned; its expert is the fallback.
    let open_owner = shared.state().timeline.open_task().map(|t| t.owner);
    abandon(
        &shared,
        Some("Interrupted: a new request came before this one was finished.".into()),
    );

    let prompt = hooks::fire_in_turn(
        &shared,
        HookEvent::UserPromptSubmit,
        "",
        hooks::fields([("prompt", text.into())]),
        &ctx.cancel,
    )
    .await
    .map_err(|hooks::Interrupted| (Stop::Interrupted, None))?;
    if let Some(why) = prompt.blocked.clone().or(prompt.stop.clone()) {
        // The prompt never reaches a model: no task is opened for it.
        return Err((
            Stop::Blocked(format!(
                "the prompt was blocked by a UserPromptSubmit hook: {why}"
            )),
            None,
        ));
    }
    // What hooks add goes with the user's text into the task, where every expert sees it.
    let mut context: Vec<String> = std::mem::take(&mut *lock(&shared.hook_context));
    context.extend(prompt.context_text());
    let user_text = if context.is_empty() {
        text.to_string()
    } else {
        format!("{text}\n\n{}", context.join("\n\n"))
    };

    let follow_up =
        crate::mol::follow_up_expert(shared.cfg.follow_ups, &shared.state().timeline, text);
    let step = Step::UserTurn {
        text,
        open_owner,
        follow_up,
    };
    // A follow-up needs no route hop, so there is nothing to speculate past.
    let mut speculation = match follow_up {
        Some(_) => None,
        None => speculate(ctx, &user_text, open_owner),
    };
    let mut expert = choose_expert(ctx, step).await.map_err(|s| (s, None))?;
    // A miss stops at once, before the summaries and the view fitting the turn waits for.
    if let Some(s) = speculation.take_if(|s| s.expert() != expert) {
        resolved(ctx, s.expert(), s.cancel());
    }
    let mut task_id = open_task(ctx, expert, &user_text).await?;

    let mut round_trips = 0u32;
    let mut stop_continuations = 0u32;
    let mut handoffs = 0u32;
    loop {
        if let Some(max) = shared.cfg.max_round_trips
            && round_trips >= max
        {
            shared.events.emit(Event::Warning {
                message: format!("--max-turns {max} reached before the model finished"),
            });
            abandon(
                &shared,
                Some(format!(
                    "Stopped: the turn's limit of {max} model calls (--max-turns) was reached \
                     before an answer."
                )),
            );
            return Ok(Outcome {
                status: TurnStatus::LimitReached,
                answer: None,
                expert: Some(expert),
                summarize: None,
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
        let mut done = answer_hop(ctx, request, task_id, expert, speculation.take())
            .await
            .map_err(|s| (s, Some(expert)))?;
        // Only a server's count calibrates the estimator (not baton's own estimate).
        if let Some(usage) = done.usage.filter(|u| !u.estimated) {
            context::observe(&shared, shape, usage.prompt_tokens);
        }
        if let Some(id) = done.conversation_id.clone()
            && modes::keeps_conversation_id(shared.cfg.mode)
        {
            let changed = shared.state().conversation_id_or_default() != id;
            if changed {
                shared.commit(Record::ConversationId { id });
            }
        }
        // A truncated answer's tool calls are incomplete: drop them.
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
            // Interrupted while the Stop hooks run: the answer stands, the turn ends.
            let stop = hooks::fire_in_turn(
                &shared,
                HookEvent::Stop,
                "",
                hooks::fields([
                    ("stop_hook_active", (stop_continuations > 0).into()),
                    ("last_assistant_message", message.content.clone().into()),
                ]),
                &ctx.cancel,
            )
            .await
            .unwrap_or_default();
            if let Some(why) = stop.blocked.filter(|_| stop.stop.is_none()) {
                if stop_continuations < MAX_STOP_CONTINUATIONS {
                    // The hook wants more work: its reason is the next thing the expert reads.
                    stop_continuations += 1;
                    shared.commit(Record::Message {
                        task_id,
                        message: ChatMessage::user(hooks::for_model(HookEvent::Stop, &why)),
                    });
                    continue;
                }
                shared.events.emit(Event::Warning {
                    message: format!(
                        "a Stop hook blocked the end of the turn {MAX_STOP_CONTINUATIONS} times; \
                         the turn ends anyway"
                    ),
                });
            }
            shared.commit(Record::TaskClosed { task_id });
            return Ok(Outcome {
                status: TurnStatus::Done,
                answer: Some(message.content),
                expert: Some(expert),
                summarize: modes::summarizes(shared.cfg.mode).then_some(task_id),
            });
        }
        if let Some(to) = handoff(ctx, task_id, expert, &calls, &mut handoffs) {
            // The same request, now the other expert's task: it answers in this turn.
            expert = to;
            task_id = open_task(ctx, expert, &user_text).await?;
            continue;
        }
        for call in &calls {
            let done = tool_calls::execute(&shared, ctx.turn_id, expert, call, &ctx.cancel).await;
            shared.commit(Record::Message {
                task_id,
                message: done.message,
            });
            shared.commit(Record::ToolEnded {
                call_id: call.id.clone(),
                status: done.status,
                title: done.title,
            });
            if ctx.cancel.is_cancelled() {
                return Err((Stop::Interrupted, Some(expert)));
            }
            if let Some(why) = done.stop {
                shared.events.emit(Event::Warning {
                    message: format!("a hook stopped the turn: {why}"),
                });
                abandon(&shared, Some(format!("Stopped by a hook: {why}")));
                return Ok(Outcome {
                    status: TurnStatus::Done,
                    answer: None,
                    expert: Some(expert),
                    summarize: None,
                });
            }
        }
    }
}

/// Handoffs allowed in one turn: an expert configured with `handoff` that hands back and
/// forth must not loop.
const MAX_HANDOFFS: u32 = 2;

/// When `calls` hand the request over (`handoff`, offered to `expert`): answers every call,
/// abandons `expert`'s task (kept, invisible to the others: `mol::handed_over`), announces
/// the new expert and returns it. `None`: no handoff, or the turn's handoffs are used up (the
/// call is then answered as refused and the expert continues).
/// Opens `expert`'s task for `user_text` (the turn's, or the same request handed over) and
/// waits for the summaries its view needs; returns the task's id.
async fn open_task(
    ctx: &TurnCtx,
    expert: Expert,
    user_text: &str,
) -> Result<u64, (Stop, Option<Expert>)> {
    let shared = &ctx.shared;
    let task_id = shared.state().timeline.tasks.last().map_or(1, |t| t.id + 1);
    shared.commit(Record::TaskOpened {
        task_id,
        owner: expert,
        user_text: user_text.to_string(),
    });
    if modes::summarizes(shared.cfg.mode) {
        tokio::select! {
            _ = summaries::ensure_for(shared, ctx.turn_id, expert) => {}
            _ = ctx.cancel.cancelled() => return Err((Stop::Interrupted, Some(expert))),
        }
    }
    Ok(task_id)
}

fn handoff(
    ctx: &TurnCtx,
    task_id: u64,
    expert: Expert,
    calls: &[crate::protocol::ToolCall],
    handoffs: &mut u32,
) -> Option<Expert> {
    let shared = &ctx.shared;
    let call = calls
        .iter()
        .find(|c| c.name == crate::mol::HANDOFF_TOOL && shared.offers(expert, &c.name))?;
    if *handoffs >= MAX_HANDOFFS {
        shared.commit(Record::Message {
            task_id,
            message: ChatMessage::tool_result(
                &call.id,
                "No more handoffs in this turn: answer the request yourself.",
            ),
        });
        for other in calls.iter().filter(|c| c.id != call.id) {
            shared.commit(Record::Message {
                task_id,
                message: ChatMessage::tool_result(&other.id, "Not run: send it again."),
            });
        }
        return None;
    }
    *handoffs += 1;
    let (to, reason) = crate::mol::parse_handoff(&call.arguments, expert);
    for c in calls {
        let text = if c.id == call.id {
            format!("Handed over to {to}.")
        } else {
            format!("Not run: the request was handed over to {to}.")
        };
        shared.commit(Record::Message {
            task_id,
            message: ChatMessage::tool_result(&c.id, text),
        });
    }
    shared.commit(Record::TaskAbandoned {
        task_id,
        note: None,
    });
    shared.events.emit(Event::RouteDecided {
        turn_id: ctx.turn_id,
        expert: to,
        decision: crate::protocol::RouteDecision::Model,
        latency_ms: 0,
        reason: Some(if reason.is_empty() {
            format!("handoff from {expert}")
        } else {
            format!("handoff from {expert}: {reason}")
        }),
    });
    Some(to)
}

/// Asks `mol` who answers a new user turn, announces it and records it in the session.
async fn choose_expert(ctx: &mut TurnCtx, step: Step<'_>) -> Result<Expert, Stop> {
    let shared = ctx.shared.clone();
    let choice = decide(ctx, step).await?;
    if choice.is_announced() {
        announce(ctx, &choice);
        shared.commit(Record::Route {
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
        ) => c.map_err(Stop::Failed)?,
        _ = ctx.cancel.cancelled() => return Err(Stop::Interrupted),
    };
    if let Some(hop) = choice.route_hop {
        shared.hop_completed(
            turn_id,
            Hop::Route,
            Some(Expert::L0),
            hop.latency.as_millis() as u64,
            None,
            hop.usage,
        );
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

/// Closes the open task, if any, without a summary, and records that. `note`: why, which the
/// owner's view shows where the task has no answer.
fn abandon(shared: &Shared, note: Option<String>) {
    let open = shared.state().timeline.open_task().map(|t| t.id);
    if let Some(task_id) = open {
        shared.commit(Record::TaskAbandoned { task_id, note });
    }
}

impl Stop {
    /// What the model is told of a task this stop ended without an answer.
    fn note(&self, shared: &Shared) -> String {
        match self {
            Stop::Interrupted => super::tool_calls::stopped_text(shared),
            Stop::Failed(e) => format!("The turn ended with an error: {e}"),
            Stop::Refused(why) | Stop::Blocked(why) => format!("The turn was stopped: {why}"),
        }
    }
}

/// Sends the answer hop of the expert this turn bets on together with its route hop
/// (`speculate`): only where the route hop runs here (`mol` mode, no pinned expert) and that
/// expert's view needs no summary still being made. The request is the one the turn would
/// send that expert, built over a copy of the timeline with the turn's task opened.
fn speculate(ctx: &TurnCtx, user_text: &str, open_owner: Option<Expert>) -> Option<Speculation> {
    let shared = &ctx.shared;
    if !shared.cfg.mode.routes_client_side() || lock(&shared.pinned).is_some() {
        return None;
    }
    let (expert, bet) = {
        let state = shared.state();
        let expert =
            crate::mol::speculative_expert(shared.cfg.speculate, &state.timeline, open_owner)?;
        if !crate::mol::view_is_ready(&state.timeline, expert) {
            return None;
        }
        let mut bet = state.timeline.clone();
        bet.open(expert, user_text);
        (expert, bet)
    };
    let request = answer_request_over(shared, expert, Some(&bet));
    let speculation = Speculation::start(&shared.backend, expert, request).ok()?;
    shared.events.emit(Event::SpeculationStarted {
        turn_id: ctx.turn_id,
        expert,
    });
    Some(speculation)
}

/// Tells the frontends how a speculative answer hop ended.
fn resolved(ctx: &TurnCtx, expert: Expert, sample: SpeculationSample) {
    ctx.shared.events.emit(Event::SpeculationResolved {
        turn_id: ctx.turn_id,
        expert,
        hit: sample.outcome == SpeculationOutcome::Hit,
        wasted_prompt_tokens: sample.wasted_prompt_tokens,
        wasted_completion_tokens: sample.wasted_completion_tokens,
    });
}

/// The answer request of `expert` from the current timeline, built by `mol` for the mode.
fn answer_request(shared: &Shared, expert: Expert) -> ChatRequest {
    answer_request_over(shared, expert, None)
}

/// The answer request of `expert` over `timeline`, else over the session's.
fn answer_request_over(
    shared: &Shared,
    expert: Expert,
    timeline: Option<&Timeline>,
) -> ChatRequest {
    let cfg = &shared.cfg;
    let head = shared.head(expert);
    let tools = super::context::fitting_tools(shared, shared.tool_specs(expert));
    // Taken first: the session state is never held while taking another lock.
    let model = lock(&shared.model).clone();
    let options = AnswerOptions {
        temperature: cfg.temperature,
        top_p: cfg.top_p,
        seed: cfg.seed,
        stop: Vec::new(),
        tool_choice: None,
        parallel_tool_calls: None,
        max_tokens: cfg.max_tokens,
        reasoning: cfg.reasoning,
        extra: Default::default(),
    };
    let state = shared.state();
    let conversation_id = state.conversation_id_or_default();
    let input = AnswerInput {
        expert,
        timeline: timeline.unwrap_or(&state.timeline),
        head: &head,
        tools,
        options,
        model: model.as_deref(),
        conversation_id: Some(conversation_id.as_str()),
    };
    crate::mol::answer_hop_request(cfg.mode, &cfg.profile, input)
}

/// Runs one streamed answer hop, turning deltas into events. `speculation`: the answer sent
/// with the route hop, kept when `request` is the one it sent (its held deltas come first),
/// else cancelled.
async fn answer_hop(
    ctx: &mut TurnCtx,
    request: ChatRequest,
    task_id: u64,
    expert: Expert,
    speculation: Option<Speculation>,
) -> Result<ChatCompletion, Stop> {
    let shared = ctx.shared.clone();
    let public = public_expert(&shared, Some(expert));
    let turn_id = ctx.turn_id;
    let held = match speculation.map(|s| (s.expert(), s.resolve(expert, &request))) {
        Some((_, Resolved::Hit { stream, started })) => {
            resolved(ctx, expert, crate::mol::speculate::hit_sample());
            Some((stream, started))
        }
        Some((bet, Resolved::Miss(sample))) => {
            resolved(ctx, bet, sample);
            None
        }
        None => None,
    };
    shared.events.emit(Event::HopStarted {
        turn_id,
        hop: Hop::Answer,
        expert: public,
    });
    // Context use when the server reports no usage (the local engine always does).
    let estimated = context::estimate_request(&shared, &request);
    let window = context::reported_window(&shared, &request.model).await;
    let (mut stream, started) = match held {
        Some(held) => held,
        None => {
            let started = Instant::now();
            let stream = tokio::select! {
                r = shared.backend.chat(request) => r.map_err(Stop::Failed)?,
                _ = ctx.cancel.cancelled() => return Err(Stop::Interrupted),
            };
            (stream, started)
        }
    };
    // The text shown so far: an answer cut short stays in the task, marked as cut short.
    let mut partial = String::new();
    let done = loop {
        let item = tokio::select! {
            item = stream.next() => item,
            _ = ctx.cancel.cancelled() => {
                let why = super::tool_calls::stopped_text(&shared);
                keep_partial_answer(&shared, task_id, &partial, &why);
                return Err(Stop::Interrupted);
            }
        };
        match item {
            Some(Ok(ChatDelta::Text(delta))) => {
                partial.push_str(&delta);
                shared.events.emit(Event::MessageDelta {
                    turn_id,
                    expert: public,
                    delta,
                })
            }
            Some(Ok(ChatDelta::Reasoning(delta))) => {
                shared.events.emit(Event::ReasoningDelta { turn_id, delta })
            }
            Some(Ok(ChatDelta::ToolCallStarted { .. } | ChatDelta::ToolCallArguments { .. })) => {}
            Some(Ok(ChatDelta::Completed(done))) => break done,
            Some(Err(e)) => {
                keep_partial_answer(
                    &shared,
                    task_id,
                    &partial,
                    &format!("Cut off by an error: {e}"),
                );
                return Err(Stop::Failed(e));
            }
            None => {
                let e = BackendError::Protocol {
                    hop: Hop::Answer,
                    url: shared.backend.describe(),
                    message: "the response stream ended without a completion".into(),
                };
                keep_partial_answer(
                    &shared,
                    task_id,
                    &partial,
                    &format!("Cut off by an error: {e}"),
                );
                return Err(Stop::Failed(e));
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
                .filter(|u| !u.estimated)
                .map_or(estimated, |u| u.prompt_tokens + u.completion_tokens),
        ),
        context_window: window,
    });
    Ok(done)
}

/// Records the text an answer hop streamed before it was cut short, marked as cut short (the
/// user saw it; the model's next request must show it, and that it is incomplete).
fn keep_partial_answer(shared: &Shared, task_id: u64, partial: &str, why: &str) {
    if partial.trim().is_empty() {
        return;
    }
    shared.commit(Record::Message {
        task_id,
        message: ChatMessage::assistant(format!(
            "{partial}\n\n[{why} The answer above is incomplete.]"
        )),
    });
}
