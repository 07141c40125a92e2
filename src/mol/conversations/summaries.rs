//! Summary hops: run in the background for closed tasks, resumed when a restart lost them.

use futures_util::future::FutureExt;

use super::Conversations;
use super::state::{PendingSummary, State};
use crate::backend::ChatRequest;
use crate::mol::timeline::{Task, Timeline, with_identity};
use crate::protocol::{ChatMessage, Hop, HopSample};

impl Conversations {
    /// The summary hop of a closed task, in the background; shared, so the conversation, its
    /// stored responses and their forks wait for the same hop.
    /// `request`: the summary request of task `task_id` (`summary_request_extending`: the
    /// owner's last answer request, with its tools, plus the summary prompt).
    pub(super) fn spawn_summary(&self, task_id: u64, request: ChatRequest) -> PendingSummary {
        let backend = self.backend.clone();
        let observer = self.observer.clone();
        let handle = self.summaries.spawn(async move {
            let outcome = crate::mol::summary::run(backend.as_ref(), request).await;
            observer.hop(HopSample {
                hop: Hop::Summary,
                latency: outcome.latency,
                usage: outcome.usage,
                ok: outcome.error.is_none(),
            });
            outcome.text
        });
        // A summary task that panicked is an empty summary, never a stuck turn.
        let text = handle.map(Result::unwrap_or_default).boxed().shared();
        PendingSummary { task_id, text }
    }

    /// Closed tasks still waiting for a summary that no hop is making (the server that
    /// started it stopped before it was in): made now, while this turn routes. Returns
    /// whether it started any.
    pub(super) fn resume_lost_summaries(&self, state: &mut State, head: &[ChatMessage]) -> bool {
        let mut started = false;
        for id in state.core.timeline.pending_summaries() {
            if state.summaries.iter().any(|s| s.task_id == id) {
                continue;
            }
            if let Some(task) = state.core.timeline.task(id) {
                let pending = match crate::mol::answer_as_summary(task) {
                    Some(answer) => PendingSummary::ready(id, answer.to_string()),
                    None => {
                        let head = self.view_head(head, &state.core.context);
                        // The tools the answer hops offered are not kept across a restart.
                        let request =
                            self.summary_request(&state.core.timeline, task, &head, Vec::new());
                        self.spawn_summary(id, request)
                    }
                };
                state.summaries.push(pending);
                started = true;
            }
        }
        started
    }

    /// The summary request of a closed `task`: its owner's view up to it (as the last answer
    /// hop saw it, `tools` included) plus the summary prompt, so the engine's prefix cache
    /// holds all but the prompt. The agent sends the same (`agent::summaries`).
    pub(super) fn summary_request(
        &self,
        timeline: &Timeline,
        task: &Task,
        head: &[ChatMessage],
        tools: Vec<crate::protocol::ToolSpec>,
    ) -> ChatRequest {
        crate::mol::summary_request_for(
            self.backend.as_ref(),
            &self.profile,
            timeline,
            task,
            head,
            tools,
        )
    }

    /// The system head every hop of a conversation shows: the client's system messages with
    /// the identity prompt, then history brought from elsewhere.
    pub(super) fn view_head(
        &self,
        head: &[ChatMessage],
        context: &[ChatMessage],
    ) -> Vec<ChatMessage> {
        let mut out = with_identity(head, &self.profile.intro);
        out.extend(context.iter().cloned());
        out
    }
}
