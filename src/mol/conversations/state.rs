//! What a turn works on: a conversation's timeline and pending tool calls, and its summaries.

use futures_util::future::{BoxFuture, FutureExt, Shared};
use serde::{Deserialize, Serialize};

use crate::mol::timeline::Timeline;
use crate::protocol::{ChatMessage, Expert};

/// Tool calls of the open task that wait for their results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct PendingTools {
    pub(super) expert: Expert,
    pub(super) ids: Vec<String>,
}

/// What a turn changes, copied at its start and written back on delivery; what the state
/// folder keeps of a conversation.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(super) struct Core {
    pub(super) timeline: Timeline,
    /// History a client brought that this server never saw (a conversation that started
    /// elsewhere, or before a restart): shown to every expert after the system head.
    pub(super) context: Vec<ChatMessage>,
    pub(super) pending_tools: Option<PendingTools>,
    /// Digest of the client-side history (after the system head) as this conversation ends
    /// now, answer included: the next request's earlier history must match it.
    pub(super) digest: Option<String>,
}

impl Core {
    /// The bytes of text this state holds, near enough for a memory budget.
    pub(super) fn approx_bytes(&self) -> usize {
        let message = |m: &ChatMessage| {
            m.content.len()
                + m.reasoning.as_ref().map_or(0, String::len)
                + m.tool_calls
                    .iter()
                    .map(|c| c.arguments.len() + c.name.len() + c.id.len())
                    .sum::<usize>()
                + 64
        };
        let tasks: usize = self
            .timeline
            .tasks
            .iter()
            .map(|t| t.user_text.len() + t.messages.iter().map(message).sum::<usize>())
            .sum();
        tasks + self.context.iter().map(message).sum::<usize>()
    }
}

/// A summary hop in flight; shared, so a forked conversation waits for the same hop.
#[derive(Clone)]
pub(super) struct PendingSummary {
    pub(super) task_id: u64,
    pub(super) text: Shared<BoxFuture<'static, String>>,
}

impl PendingSummary {
    /// A summary known without a hop (`answer_as_summary`).
    pub(super) fn ready(task_id: u64, text: String) -> PendingSummary {
        PendingSummary {
            task_id,
            text: futures_util::future::ready(text).boxed().shared(),
        }
    }
}

#[derive(Default, Clone)]
pub(super) struct State {
    pub(super) core: Core,
    pub(super) summaries: Vec<PendingSummary>,
}

impl State {
    /// Records every summary that has finished, without waiting.
    pub(super) fn collect_finished(&mut self) {
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.summaries)
            .into_iter()
            .partition(|s| s.text.peek().is_some());
        self.summaries = running;
        for s in done {
            if let Some(text) = s.text.peek() {
                self.core.timeline.record_summary(s.task_id, text.clone());
            }
        }
    }

    /// Waits for the summaries of `tasks` still in flight and records them.
    pub(super) async fn await_summaries(&mut self, tasks: &[u64]) {
        let (wanted, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.summaries)
            .into_iter()
            .partition(|s| tasks.contains(&s.task_id));
        self.summaries = rest;
        for s in wanted {
            let text = s.text.await;
            self.core.timeline.record_summary(s.task_id, text);
        }
    }
}
