//! Summary hops off the critical path: started in the background when a task closes,
//! awaited only by a turn whose expert needs that summary, or by shutdown. A summary missing
//! from a resumed session is made by the first turn that needs it.

use std::sync::Arc;

use super::{Shared, lock};
use crate::mol::SummaryState;
use crate::protocol::{Event, Hop};
use crate::session::Record;

/// Whether a task closed now gets its summary hop at once. A `--defer-summary` run ends after
/// its turn: its summary is made by the first turn that needs it (a later turn of another
/// expert, [`ensure_for`]). Every other run makes it now, in the background: other experts
/// read it, and so does the same expert once its older tasks fold.
pub(crate) fn read_in_this_process(shared: &Shared) -> bool {
    !shared.cfg.defer_summaries
}

/// Starts the summary hop of a closed task in the background.
pub(crate) fn spawn(shared: &Arc<Shared>, turn_id: u64, task_id: u64) {
    let s = shared.clone();
    let handle = tokio::spawn(async move { summarize(&s, turn_id, task_id, false).await });
    lock(&shared.summaries).insert(task_id, handle);
}

/// Makes sure every summary `expert`'s view needs is there: waits for those in flight, runs
/// the missing ones now. A summary that cannot be made is recorded empty (never injected).
pub(crate) async fn ensure_for(
    shared: &Arc<Shared>,
    turn_id: u64,
    expert: crate::protocol::Expert,
) {
    let needed = shared.state().timeline.summaries_needed_by(expert);
    for task_id in needed {
        let in_flight = lock(&shared.summaries).remove(&task_id);
        if let Some(handle) = in_flight {
            let _ = handle.await;
        }
        let missing = shared
            .state()
            .timeline
            .task(task_id)
            .is_some_and(|t| t.summary == SummaryState::Pending);
        if missing {
            summarize(shared, turn_id, task_id, true).await;
        }
    }
}

/// Waits for every summary in flight (shutdown, session switch).
pub(crate) async fn wait_all(shared: &Shared) {
    let handles: Vec<_> = lock(&shared.summaries).drain().map(|(_, h)| h).collect();
    for h in handles {
        let _ = h.await;
    }
}

/// Runs one summary hop and records its result. `settle`: on failure record an empty summary
/// instead of leaving it for a later retry.
async fn summarize(shared: &Shared, turn_id: u64, task_id: u64, settle: bool) {
    let task = shared.state().timeline.task(task_id).cloned();
    let Some(task) = task else { return };
    // A short L0 answer is its own summary: recorded as one, with no hop to wait for.
    if let Some(answer) = crate::mol::answer_as_summary(&task) {
        let answer = answer.to_string();
        record(shared, &task, answer, 0, 0).await;
        return;
    }
    let expert = Some(task.owner);
    shared.events.emit(Event::HopStarted {
        turn_id,
        hop: Hop::Summary,
        expert,
    });
    // The owner's last answer request plus the summary prompt: the engine has all of it but
    // the prompt cached (same adapter, same head, same tools, same messages).
    let request = {
        let head = shared.head(task.owner);
        let tools = super::context::fitting_tools(shared, shared.tool_specs(task.owner));
        let state = shared.state();
        crate::mol::summary_request_for(
            shared.backend.as_ref(),
            &shared.cfg.profile,
            &state.timeline,
            &task,
            &head,
            tools,
        )
    };
    let outcome = crate::mol::summary::run(shared.backend.as_ref(), request).await;
    let latency_ms = outcome.latency.as_millis() as u64;
    if let Some(error) = &outcome.error {
        shared.events.emit(Event::Warning {
            message: format!("summary of task {task_id} failed: {error}"),
        });
        if !settle {
            return; // left pending: the next turn that needs it tries again
        }
    }
    shared.hop_completed(
        turn_id,
        Hop::Summary,
        expert,
        latency_ms,
        None,
        outcome.usage,
    );
    record(
        shared,
        &task,
        outcome.text,
        latency_ms,
        outcome.usage.completion_tokens,
    )
    .await;
}

/// Saves `text` as the summary of `task`, says so, and runs the `ExpertSummary` hooks.
async fn record(
    shared: &Shared,
    task: &crate::mol::Task,
    text: String,
    latency_ms: u64,
    tokens: u64,
) {
    let task_id = task.id;
    shared.commit(Record::Summary {
        task_id,
        expert: task.owner,
        text: text.clone(),
    });
    shared.events.emit(Event::SummaryRecorded {
        expert: task.owner,
        task_id,
        latency_ms,
        tokens,
        empty: text.trim().is_empty(),
    });
    super::hooks::fire(
        shared,
        crate::hooks::HookEvent::ExpertSummary,
        task.owner.label(),
        super::hooks::fields([
            ("expert", task.owner.label().into()),
            ("task_id", task_id.into()),
            ("summary", text.into()),
        ]),
    )
    .await;
}
