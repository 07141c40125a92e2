//! Summary hops off the critical path (B2): started in the background when a task closes,
//! awaited only by a turn whose expert needs that summary, or by shutdown. A summary missing
//! from a resumed session is made by the first turn that needs it.

use std::sync::Arc;
use std::time::Instant;

use super::{Shared, lock, mol_bridge};
use crate::backend::collect;
use crate::protocol::{Event, Hop};
use crate::session::Record;

/// Starts the summary hop of a closed task in the background.
pub(crate) fn spawn(shared: &Arc<Shared>, turn_id: u64, task_id: u64) {
    let s = shared.clone();
    let handle = tokio::spawn(async move { summarize(&s, turn_id, task_id, false).await });
    lock(&shared.summaries).insert(task_id, handle);
}

/// Makes sure every summary `expert`'s view needs is there: waits for those in flight, runs
/// the missing ones now. A summary that cannot be made is recorded empty (not injected, B4).
pub(crate) async fn ensure_for(
    shared: &Arc<Shared>,
    turn_id: u64,
    expert: crate::protocol::Expert,
) {
    let needed = lock(&shared.timeline).summaries_needed_by(expert);
    for task_id in needed {
        let in_flight = lock(&shared.summaries).remove(&task_id);
        if let Some(handle) = in_flight {
            let _ = handle.await;
        }
        let missing = lock(&shared.timeline)
            .task(task_id)
            .is_some_and(|t| t.summary.is_none());
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
    let request = {
        let timeline = lock(&shared.timeline);
        mol_bridge::summary_request(
            &timeline,
            task_id,
            &shared.cfg.system_prompt,
            &shared.cfg.profile,
        )
    };
    let Some(request) = request else { return };
    let expert = crate::protocol::Expert::parse(&request.model);
    shared.events.emit(Event::HopStarted {
        turn_id,
        hop: Hop::Summary,
        expert,
    });
    let started = Instant::now();
    let result = match shared.backend.chat(request).await {
        Ok(stream) => collect(stream).await,
        Err(e) => Err(e),
    };
    let latency_ms = started.elapsed().as_millis() as u64;
    let (text, usage) = match result {
        Ok(done) => (
            mol_bridge::summary_text(&done),
            done.usage.unwrap_or_default(),
        ),
        Err(e) => {
            shared.events.emit(Event::Warning {
                message: format!("summary of task {task_id} failed: {e}"),
            });
            if !settle {
                return;
            }
            (String::new(), Default::default())
        }
    };
    shared.events.emit(Event::HopCompleted {
        turn_id,
        hop: Hop::Summary,
        expert,
        latency_ms,
        ttft_ms: None,
        usage,
    });
    lock(&shared.timeline).set_summary(task_id, text.clone());
    let owner = expert.unwrap_or(crate::protocol::Expert::L2);
    shared.record(Record::Summary {
        task_id,
        expert: owner,
        text: text.clone(),
    });
    shared.events.emit(Event::SummaryRecorded {
        expert: owner,
        task_id,
        latency_ms,
        tokens: usage.completion_tokens,
        empty: text.trim().is_empty(),
    });
}
