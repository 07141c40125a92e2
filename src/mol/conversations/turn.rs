//! One turn: route (or stay with the expert whose tool calls are answered), answer, commit.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};

use super::Conversations;
use super::outcome::{finish_of, upstream_error};
use super::request::{Split, Tail, digest, split};
use super::state::{Core, PendingSummary, PendingTools, State};
use super::store::Conversation;
use crate::backend::{BackendError, ChatCompletion, ChatDelta, ChatRequest, ChatStream};
use crate::mol::answer::{AnswerInput, AnswerOptions, answer_hop_request};
use crate::mol::decide::{ExpertChoice, Step, decide};
use crate::mol::speculate::{self, Resolved, Speculation};
use crate::protocol::{
    ChatMessage, Expert, Hop, HopSample, Mode, TokenUsage, TurnDone, TurnError, TurnEvent,
    TurnFinish, TurnHandle, TurnInput, TurnRouted,
};

impl Conversations {
    pub(super) async fn start(self: &Arc<Self>, input: TurnInput) -> Result<TurnHandle, TurnError> {
        let split = split(&input.messages)?;
        let conversation = match &input.fork_from {
            Some(parent) => self.fork(&input, parent, &split).await?,
            None => self.conversation_for(&input, &split.earlier),
        };
        let guard = conversation.state.clone().lock_owned().await;
        let (tx, rx) = mpsc::channel(256);
        let (delivered_tx, delivered_rx) = oneshot::channel();
        let this = self.clone();
        let conversation_id = conversation.key.id.clone();
        // Tracked like the summaries: a drain waits for running turns, which start their
        // summaries before they end.
        self.summaries.spawn(async move {
            this.run_turn(conversation, guard, input, split, tx, delivered_rx)
                .await;
        });
        Ok(TurnHandle {
            conversation_id,
            events: rx,
            delivered: delivered_tx,
        })
    }

    async fn run_turn(
        self: Arc<Self>,
        conversation: Arc<Conversation>,
        mut state: OwnedMutexGuard<State>,
        input: TurnInput,
        split: Split,
        tx: mpsc::Sender<TurnEvent>,
        delivered: oneshot::Receiver<()>,
    ) {
        state.collect_finished();
        if self.resume_lost_summaries(&mut state, &split.head) {
            // Kept even if this turn fails.
            self.write_again_after_summaries(&conversation, &state);
        }
        let work = tokio::select! {
            result = self.turn(&conversation, &mut state, &input, &split, &tx) => result,
            // The client is gone: nothing to deliver, nothing to keep.
            _ = tx.closed() => return,
        };
        let (work, done, restarted) = match work {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send(TurnEvent::Error(e)).await;
                return;
            }
        };
        let old_digest = state.core.digest.clone();
        let new_digest = work.digest.clone().unwrap_or_default();
        // A client that sends no id may send its next request the moment the last byte is
        // out, before this commit: its history must already lead here (it then waits for this
        // conversation's lock), not to a new conversation that lacks the turn.
        self.expect_history(&conversation, &new_digest);
        // The same for a response stored under an id: a fork of it asked for the moment the
        // client has it finds it, and waits for this commit to fill it.
        let reserved = match &input.snapshot_as {
            Some(id) => Some(self.reserve_snapshot(&conversation, id).await),
            None => None,
        };
        if tx.send(TurnEvent::Done(done.clone())).await.is_err() || delivered.await.is_err() {
            self.forget_history(&conversation, old_digest.as_deref(), &new_digest);
            if let Some((c, _)) = &reserved {
                self.forget_snapshot(c);
            }
            return;
        }
        let closed_task = done
            .summary_started
            .then(|| work.timeline.tasks.last().cloned())
            .flatten();
        if restarted {
            // Started over: the summaries still running belong to the history left behind.
            state.summaries.clear();
        }
        state.core = work;
        conversation.bytes.store(
            state.core.approx_bytes(),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.remember_history(&conversation, old_digest.as_deref(), &new_digest);
        if let Some(task) = closed_task {
            let pending = match crate::mol::answer_as_summary(&task) {
                // A short L0 answer is its own summary: no hop (as the agent does).
                Some(answer) => PendingSummary::ready(task.id, answer.to_string()),
                None => {
                    let head = self.view_head(&split.head, &state.core.context);
                    let request = self.summary_request(
                        &state.core.timeline,
                        &task,
                        &head,
                        input.tools.clone(),
                    );
                    self.spawn_summary(task.id, request)
                }
            };
            state.summaries.push(pending);
        }
        let snapshot = reserved.map(|(c, mut guard)| {
            *guard = state.clone();
            c.bytes.store(
                guard.core.approx_bytes(),
                std::sync::atomic::Ordering::Relaxed,
            );
            (c, guard)
        });
        if self.disk.is_some() {
            if !conversation.snapshot && self.holds(&conversation) {
                self.save(&conversation, &state).await;
            }
            if let Some((c, guard)) = &snapshot
                && self.holds(c)
            {
                self.save(c, guard).await;
            }
        }
    }

    /// Route and answer on a copy of the conversation; the copy and the answer come back.
    async fn turn(
        &self,
        conversation: &Conversation,
        state: &mut State,
        input: &TurnInput,
        split: &Split,
        tx: &mpsc::Sender<TurnEvent>,
    ) -> Result<(Core, TurnDone, bool), TurnError> {
        let continues = state.core.digest.as_deref() == Some(digest(&split.earlier).as_str());
        // Not the history this conversation holds: start over from the client's (committed
        // only with the turn).
        let mut work = if continues {
            state.core.clone()
        } else {
            Core {
                context: split.earlier.clone(),
                ..Core::default()
            }
        };
        let step = self.step(&work, &split.tail)?;
        let speculation = match (&split.tail, step) {
            // A follow-up needs no route hop, so there is nothing to speculate past.
            (
                _,
                Step::UserTurn {
                    follow_up: Some(_), ..
                },
            ) => None,
            (Tail::User(text), _) => self.speculate(&work, &split.head, input, text),
            (Tail::ToolResults(_), _) => None,
        };
        let (choice, speculation) = self.route(step, speculation).await?;
        let expert = choice.expert;
        // The summaries this expert's view shows must be in before it answers; the route hop
        // above ran while they were being made.
        summaries_in_view(state, &mut work, expert).await;
        match &split.tail {
            Tail::User(text) => {
                work.timeline.open(expert, text.clone());
                work.pending_tools = None;
            }
            Tail::ToolResults(results) => {
                for r in results {
                    work.timeline.push(r.clone());
                }
            }
        }
        let completed_tasks = work.timeline.tasks.iter().filter(|t| t.closed).count();
        let _ = tx
            .send(TurnEvent::Routed(TurnRouted {
                conversation_id: conversation.key.id.clone(),
                expert,
                decision: choice.decision,
                fallback_reason: choice.reason.clone(),
                completed_tasks,
            }))
            .await;

        let request = self.answer_request(expert, &work, &split.head, input);
        let (held, started) = self.held_answer(speculation, expert, &request);
        let answered = self.answer(request, held, tx).await;
        let latency = started.elapsed();
        let done = match answered {
            Ok(done) => done,
            Err(e) => {
                self.observer.hop(HopSample {
                    hop: Hop::Answer,
                    latency,
                    usage: TokenUsage::default(),
                    ok: false,
                });
                return Err(upstream_error(&e));
            }
        };
        let usage = done.usage.unwrap_or_default();
        self.observer.hop(HopSample {
            hop: Hop::Answer,
            latency,
            usage,
            ok: true,
        });
        Ok(record_answer(work, expert, done, usage, split, continues))
    }

    /// What the route hop decides about: a new user turn, or the results of the pending tool
    /// calls, which must answer exactly those calls.
    fn step<'a>(&self, work: &Core, tail: &'a Tail) -> Result<Step<'a>, TurnError> {
        let step = match tail {
            Tail::User(text) => Step::UserTurn {
                text,
                open_owner: work.timeline.open_task().map(|t| t.owner),
                follow_up: crate::mol::follow_up_expert(self.follow_ups, &work.timeline, text),
            },
            Tail::ToolResults(results) => {
                let pending = work.pending_tools.clone().ok_or_else(|| {
                    TurnError::bad_request(
                        "orphan_tool_turn",
                        "tool results, but this conversation has no tool calls waiting for them",
                    )
                })?;
                let given: HashSet<&str> = results
                    .iter()
                    .filter_map(|m| m.tool_call_id.as_deref())
                    .collect();
                let wanted: HashSet<&str> = pending.ids.iter().map(String::as_str).collect();
                if given != wanted || given.len() != results.len() {
                    return Err(TurnError::bad_request(
                        "invalid_tool_outputs",
                        format!(
                            "the tool results must answer exactly the pending calls ({})",
                            pending.ids.join(", ")
                        ),
                    ));
                }
                Step::ToolResults {
                    issuer: pending.expert,
                }
            }
        };
        Ok(step)
    }

    /// The route hop of `step`, observed (none for a follow-up or tool results); a speculative
    /// answer that bet on another expert is cancelled at once.
    async fn route(
        &self,
        step: Step<'_>,
        speculation: Option<Speculation>,
    ) -> Result<(ExpertChoice, Option<Speculation>), TurnError> {
        let choice = decide(
            self.backend.as_ref(),
            &self.profile,
            Mode::Mol,
            None,
            step,
            || {},
        )
        .await;
        let choice = match choice {
            Ok(c) => c,
            Err(e) => {
                if let Some(s) = speculation {
                    self.observer.speculation(s.cancel());
                }
                self.observer.hop(HopSample {
                    hop: Hop::Route,
                    latency: Duration::ZERO,
                    usage: TokenUsage::default(),
                    ok: false,
                });
                return Err(upstream_error(&e));
            }
        };
        if let Some(hop) = choice.route_hop {
            self.observer.hop(HopSample {
                hop: Hop::Route,
                latency: hop.latency,
                usage: hop.usage,
                ok: choice.reason.is_none(),
            });
        }
        self.observer.route(choice.expert, choice.decision);
        let expert = choice.expert;
        // A miss stops at once, before anything else the turn waits for.
        let speculation = match speculation {
            Some(s) if s.expert() != expert => {
                self.observer.speculation(s.cancel());
                None
            }
            other => other,
        };
        Ok((choice, speculation))
    }

    /// The answer stream a speculative hop already holds, when it was a hit for `expert` and
    /// `request`, with when it started; else none, and the answer hop starts now.
    fn held_answer(
        &self,
        speculation: Option<Speculation>,
        expert: Expert,
        request: &ChatRequest,
    ) -> (Option<ChatStream>, Instant) {
        match speculation.map(|s| s.resolve(expert, request)) {
            Some(Resolved::Hit { stream, started }) => {
                self.observer.speculation(speculate::hit_sample());
                (Some(stream), started)
            }
            Some(Resolved::Miss(sample)) => {
                self.observer.speculation(sample);
                (None, Instant::now())
            }
            None => (None, Instant::now()),
        }
    }

    /// `expert`'s answer request over `work`, the turn's copy of the conversation.
    fn answer_request(
        &self,
        expert: Expert,
        work: &Core,
        head: &[ChatMessage],
        input: &TurnInput,
    ) -> ChatRequest {
        let head = self.view_head(head, &work.context);
        let o = &input.options;
        let options = AnswerOptions {
            temperature: o.temperature,
            top_p: o.top_p,
            seed: o.seed,
            stop: o.stop.clone(),
            tool_choice: o.tool_choice.clone(),
            parallel_tool_calls: o.parallel_tool_calls,
            max_tokens: o.max_tokens,
            reasoning: o.reasoning,
            extra: o.extra.clone(),
        };
        answer_hop_request(
            Mode::Mol,
            &self.profile,
            AnswerInput {
                expert,
                timeline: &work.timeline,
                head: &head,
                tools: input.tools.clone(),
                options,
                model: None,
                conversation_id: None,
            },
        )
    }

    /// The speculative answer of a new user turn, sent before its route hop: the request the
    /// turn would send the expert it bets on, built on a copy with the task opened.
    fn speculate(
        &self,
        work: &Core,
        head: &[ChatMessage],
        input: &TurnInput,
        text: &str,
    ) -> Option<Speculation> {
        let open_owner = work.timeline.open_task().map(|t| t.owner);
        let expert = speculate::speculative_expert(self.speculate, &work.timeline, open_owner)?;
        if !speculate::view_is_ready(&work.timeline, expert) {
            return None;
        }
        let mut bet = work.clone();
        bet.timeline.open(expert, text.to_string());
        let request = self.answer_request(expert, &bet, head, input);
        Speculation::start(&self.backend, expert, request)
            .map_err(|skipped| self.observer.speculation(skipped))
            .ok()
    }

    /// Streams the answer hop, passing text and reasoning on as they come: from `held`, the
    /// speculative answer that was a hit, else from a request sent now.
    async fn answer(
        &self,
        request: ChatRequest,
        held: Option<ChatStream>,
        tx: &mpsc::Sender<TurnEvent>,
    ) -> Result<crate::backend::ChatCompletion, BackendError> {
        let mut stream = match held {
            Some(stream) => stream,
            None => self.backend.chat(request).await?,
        };
        while let Some(item) = stream.next().await {
            match item? {
                ChatDelta::Text(t) => {
                    let _ = tx.send(TurnEvent::Text(t)).await;
                }
                ChatDelta::Reasoning(t) => {
                    let _ = tx.send(TurnEvent::Reasoning(t)).await;
                }
                ChatDelta::ToolCallStarted { .. } | ChatDelta::ToolCallArguments { .. } => {}
                ChatDelta::Completed(done) => return Ok(done),
            }
        }
        Err(BackendError::Protocol {
            hop: Hop::Answer,
            url: self.backend.describe(),
            message: "the response stream ended without a completion".into(),
        })
    }
}

/// Waits for the summaries `expert`'s view shows and copies them into `work`, the turn's copy
/// of the conversation.
async fn summaries_in_view(state: &mut State, work: &mut Core, expert: Expert) {
    let needed = work.timeline.summaries_needed_by(expert);
    if !needed.is_empty() {
        state.await_summaries(&needed).await;
        for id in needed {
            if let Some(t) = state.core.timeline.task(id) {
                let summary = t.summary.clone();
                if let Some(w) = work.timeline.task_mut(id) {
                    w.summary = summary;
                }
            }
        }
    }
}

/// The answer `done` recorded in `work`: its finish (a call cut off mid-arguments is none),
/// the tool calls it leaves pending, and the digest the client's next history must match.
fn record_answer(
    mut work: Core,
    expert: Expert,
    mut done: ChatCompletion,
    usage: TokenUsage,
    split: &Split,
    continues: bool,
) -> (Core, TurnDone, bool) {
    let mut finish = finish_of(done.finish_reason);
    if matches!(finish, TurnFinish::Length | TurnFinish::ContentFilter) {
        // A call cut off mid-arguments is no call to run.
        done.message.tool_calls.clear();
    } else if !done.message.tool_calls.is_empty() {
        finish = TurnFinish::ToolCalls;
    }
    if finish == TurnFinish::ToolCalls && done.message.tool_calls.is_empty() {
        finish = TurnFinish::Stop;
    }
    let message = done.message;
    work.timeline.push(message.clone());
    let pending_tool_expert = if message.tool_calls.is_empty() {
        work.timeline.close(true);
        work.pending_tools = None;
        None
    } else {
        work.pending_tools = Some(PendingTools {
            expert,
            ids: message.tool_calls.iter().map(|c| c.id.clone()).collect(),
        });
        Some(expert)
    };
    let mut after = split.after_head.clone();
    after.push(message.clone());
    work.digest = Some(digest(&after));
    (
        work,
        TurnDone {
            message,
            finish,
            usage,
            pending_tool_expert,
            summary_started: pending_tool_expert.is_none(),
        },
        !continues,
    )
}
