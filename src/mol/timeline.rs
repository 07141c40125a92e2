//! The timeline of tasks and each expert's view of it.
//!
//! A task is one routing decision: the user's text, the owner's own messages (answers, tool
//! calls, tool results) and, once closed, a summary. An expert's view is its own tasks verbatim
//! and, for every other expert's closed task, the user text plus one assistant message holding
//! that task's summary. The timeline is append-only, so each expert's view on re-entry is the
//! view it last saw plus a new tail: engine prefix caches keep hitting.

use serde::{Deserialize, Serialize};

use crate::protocol::Expert;
use crate::protocol::{ChatMessage, Role};
use crate::session::Record;

/// Where a task's summary stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SummaryState {
    /// Closed, summary not made yet (running, or the process died before it finished).
    Pending,
    /// The summary hop answered (an empty text is recorded but never injected).
    Recorded { text: String },
    /// Never summarized: a tool loop abandoned by a new user turn, or a mode without experts.
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub id: u64,
    pub owner: Expert,
    pub user_text: String,
    /// The owner's own messages inside the task, verbatim.
    pub messages: Vec<ChatMessage>,
    pub closed: bool,
    pub summary: SummaryState,
    /// The older part of the task replaced by a handoff summary (long tool loops).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<Compaction>,
    /// Tool results at message indices below this are shown shrunk to head + tail.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub shrunk_before: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// How the older part of a task is shown after compaction: the handoff summary, the plan and the
/// files touched, then the task's messages from `keep_from` on, verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    /// The handoff summary the owner wrote (empty when the summary request failed).
    pub summary: String,
    /// The plan at compaction time, verbatim (the last `update_plan` arguments).
    pub plan: Option<String>,
    /// Files the task changed so far (kept across every compaction).
    pub files_touched: Vec<String>,
    /// First message index shown verbatim.
    pub keep_from: usize,
    /// How many compactions this task went through.
    pub count: u32,
}

impl Task {
    /// The summary text to inject into other experts' views, if there is a non-empty one.
    pub fn summary_text(&self) -> Option<&str> {
        match &self.summary {
            SummaryState::Recorded { text } if !text.trim().is_empty() => Some(text.trim()),
            _ => None,
        }
    }

    /// The last assistant message's text (the task's answer).
    pub fn answer(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
            .map(|m| m.content.as_str())
    }
}

/// The one assistant message that stands for another expert's task in a view.
pub fn summary_message(owner: Expert, summary: &str) -> ChatMessage {
    ChatMessage::assistant(format!(
        "(This request was handled by the {owner} expert. Summary of its result: {summary})"
    ))
}

/// The one assistant message that stands for another expert's closed task in a view: its
/// summary, then the ledger baton keeps of it (`mol::ledger`: files, commands, tests, plan,
/// values). A task without a usable summary still gets a line saying who handled it (and that
/// it was cut short, when it was abandoned), so a view never has two user messages in a row.
/// `None` while the summary is pending (a turn that needs it waits for it), so the message
/// never changes once shown.
pub fn handover_message(task: &Task) -> Option<ChatMessage> {
    if task.summary == SummaryState::Pending {
        return None;
    }
    let ledger = crate::mol::ledger::ledger(task);
    let mut message = match task.summary_text() {
        Some(summary) => summary_message(task.owner, summary),
        None if task.summary == SummaryState::Skipped => ChatMessage::assistant(format!(
            "(This request was handled by the {} expert; it was cut short before it \
             finished.)",
            task.owner
        )),
        None => ChatMessage::assistant(format!(
            "(This request was handled by the {} expert.)",
            task.owner
        )),
    };
    if !ledger.is_empty() {
        message.content.push_str("\n\n");
        message.content.push_str(&ledger);
    }
    Some(message)
}

/// Appends the identity prompt to the first system message of the leading system run, or
/// inserts it as a new system message at the front. Already present ⇒ unchanged.
pub fn with_identity(head: &[ChatMessage], intro: &str) -> Vec<ChatMessage> {
    let mut out = head.to_vec();
    let leading = out.iter().take_while(|m| m.role == Role::System).count();
    match out[..leading].first_mut() {
        Some(first) => {
            if !first.content.contains(intro) {
                if !first.content.is_empty() {
                    first.content.push_str("\n\n");
                }
                first.content.push_str(intro);
            }
        }
        None => out.insert(0, ChatMessage::system(intro)),
    }
    out
}

/// The append-only list of tasks of one session.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub tasks: Vec<Task>,
    /// Per expert: its own closed tasks with a lower id are shown as user text + summary, like
    /// other experts' tasks (set by compaction, so long sessions fit the window).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub folded_before: std::collections::BTreeMap<Expert, u64>,
    /// Characters per token learned from the server's usage, so a resumed session estimates
    /// (and so shrinks and compacts) exactly like the session it continues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ratio: Option<f64>,
}

impl Timeline {
    pub fn new() -> Self {
        Self::default()
    }

    /// The task still open (an answer or tool loop in progress), if any.
    pub fn open_task(&self) -> Option<&Task> {
        self.tasks.last().filter(|t| !t.closed)
    }

    pub fn open_task_mut(&mut self) -> Option<&mut Task> {
        self.tasks.last_mut().filter(|t| !t.closed)
    }

    pub fn task(&self, id: u64) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    pub fn task_mut(&mut self, id: u64) -> Option<&mut Task> {
        self.tasks.iter_mut().find(|t| t.id == id)
    }

    /// Opens a task for a new user turn. A task still open (a tool loop the user walked away
    /// from) is closed first and never summarized.
    pub fn open(&mut self, owner: Expert, user_text: impl Into<String>) -> u64 {
        if let Some(open) = self.open_task_mut() {
            open.closed = true;
            open.summary = SummaryState::Skipped;
        }
        let id = self.tasks.last().map(|t| t.id + 1).unwrap_or(1);
        self.tasks.push(Task {
            id,
            owner,
            user_text: user_text.into(),
            messages: Vec::new(),
            closed: false,
            summary: SummaryState::Pending,
            compaction: None,
            shrunk_before: 0,
        });
        id
    }

    /// Appends a message to the open task. Returns false when no task is open.
    pub fn push(&mut self, message: ChatMessage) -> bool {
        match self.open_task_mut() {
            Some(task) => {
                task.messages.push(message);
                true
            }
            None => false,
        }
    }

    /// Closes the open task; its summary becomes `Pending` (or `Skipped` if `summarize` is false).
    pub fn close(&mut self, summarize: bool) -> Option<u64> {
        let task = self.open_task_mut()?;
        task.closed = true;
        task.summary = if summarize {
            SummaryState::Pending
        } else {
            SummaryState::Skipped
        };
        Some(task.id)
    }

    pub fn record_summary(&mut self, task_id: u64, text: impl Into<String>) {
        if let Some(task) = self.task_mut(task_id) {
            task.summary = SummaryState::Recorded {
                text: text.into().trim().to_string(),
            };
        }
    }

    /// Closed tasks of other experts whose summaries `target`'s view needs and that are not
    /// recorded yet: the next turn on `target` waits for (or makes) exactly these.
    pub fn summaries_needed_by(&self, target: Expert) -> Vec<u64> {
        self.tasks
            .iter()
            .filter(|t| t.closed && t.owner != target && t.summary == SummaryState::Pending)
            .map(|t| t.id)
            .collect()
    }

    /// Every closed task whose summary is still pending (resume after a crash).
    pub fn pending_summaries(&self) -> Vec<u64> {
        self.tasks
            .iter()
            .filter(|t| t.closed && t.summary == SummaryState::Pending)
            .map(|t| t.id)
            .collect()
    }

    /// `target`'s view: `head` (system messages, identity already injected), then its own tasks
    /// verbatim and other experts' closed tasks as user text + summary. Another expert's task
    /// without a usable summary contributes only its user text (nothing empty is injected).
    pub fn view(&self, target: Expert, head: &[ChatMessage]) -> Vec<ChatMessage> {
        self.view_until(target, head, u64::MAX)
    }

    /// `view` as it was while task `last` was the newest: tasks after it left out (the
    /// summary of `last`, sent once it closed, extends the view its answer hops saw).
    pub fn view_until(&self, target: Expert, head: &[ChatMessage], last: u64) -> Vec<ChatMessage> {
        let mut out = head.to_vec();
        let folded_before = self.folded_before.get(&target).copied().unwrap_or(0);
        for task in self.tasks.iter().take_while(|t| t.id <= last) {
            let folded = task.closed && task.id < folded_before && task.summary_text().is_some();
            if task.owner == target && !folded {
                out.push(ChatMessage::user(task.user_text.clone()));
                out.extend(crate::mol::compact::own_messages(task));
            } else if task.closed && !crate::mol::handoff::handed_over(task) {
                // A handed-over task is invisible here: the task it handed to carries the
                // same request.
                out.push(ChatMessage::user(task.user_text.clone()));
                if let Some(message) = handover_message(task) {
                    out.push(message);
                }
            }
        }
        out
    }

    /// Applies one session record: the only way the agent changes its timeline, live and on
    /// replay alike. `summarize_on_close`: a closed task waits for its summary (`mol` mode)
    /// rather than being skipped. Returns whether the timeline changed; records that are not
    /// about the timeline change nothing.
    pub fn apply(&mut self, record: &Record, summarize_on_close: bool) -> bool {
        match record {
            Record::TaskOpened {
                owner, user_text, ..
            } => {
                self.open(*owner, user_text.clone());
                true
            }
            Record::Message { message, .. } => self.push(message.clone()),
            Record::TaskClosed { .. } => self.close(summarize_on_close).is_some(),
            Record::TaskAbandoned { note, .. } => self.abandon_open_task(note.as_deref()).is_some(),
            Record::Summary { task_id, text, .. } => {
                let known = self.task(*task_id).is_some();
                self.record_summary(*task_id, text.clone());
                known
            }
            Record::ToolOutputsShrunk {
                task_id,
                keep_recent,
            } => self.shrink_old_tool_outputs(*task_id, *keep_recent),
            Record::Compacted {
                task_id,
                summary,
                keep_steps,
            } => self.compact(*task_id, summary, *keep_steps),
            Record::TasksFolded {
                expert,
                before_task,
            } => {
                // Unconditionally: in files written before records and state had one writer,
                // a summary the fold relied on may be recorded a line later.
                let folded = self.folded_before.entry(*expert).or_insert(0);
                let moved = *before_task > *folded;
                *folded = (*folded).max(*before_task);
                moved
            }
            Record::TokenRatio { chars_per_token } => {
                let changed = self.token_ratio != Some(*chars_per_token);
                self.token_ratio = Some(*chars_per_token);
                changed
            }
            Record::Meta { .. }
            | Record::Turn { .. }
            | Record::Route { .. }
            | Record::ConversationId { .. }
            | Record::Usage { .. }
            | Record::Renamed { .. }
            | Record::Checkpoint { .. }
            | Record::Undone { .. }
            | Record::Redone { .. }
            | Record::ToolEnded { .. }
            | Record::TurnEnded { .. } => false,
        }
    }

    /// Closes the open task without a summary. Tool calls it left without results (an
    /// interrupt, a crash) get a result saying so, and a task that ends without an answer gets
    /// `note` as its last assistant message, so the owner's view stays a valid conversation
    /// (never two user messages in a row) and says why nothing came. Returns the task's id, or
    /// `None` when no task was open.
    pub fn abandon_open_task(&mut self, note: Option<&str>) -> Option<u64> {
        let task = self.open_task_mut()?;
        let mut unanswered: Vec<String> = Vec::new();
        for m in &task.messages {
            match m.role {
                Role::Assistant => unanswered.extend(m.tool_calls.iter().map(|c| c.id.clone())),
                Role::Tool => unanswered.retain(|id| Some(id) != m.tool_call_id.as_ref()),
                _ => {}
            }
        }
        for id in unanswered {
            task.messages.push(ChatMessage::tool_result(
                id,
                "Not run: the turn was interrupted before this call.",
            ));
        }
        let answered = task
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Assistant && m.tool_calls.is_empty());
        if let Some(note) = note.filter(|_| !answered) {
            task.messages
                .push(ChatMessage::assistant(format!("({note})")));
        }
        self.close(false)
    }

    /// Whether folding `owner`'s own closed tasks before `before` hides anything now (a task
    /// with a summary): only then is a fold worth recording.
    pub fn fold_hides(&self, owner: Expert, before: u64) -> bool {
        let current = self.folded_before.get(&owner).copied().unwrap_or(0);
        self.tasks.iter().any(|t| {
            t.owner == owner
                && t.closed
                && t.id >= current
                && t.id < before
                && t.summary_text().is_some()
        })
    }

    /// Everything verbatim, whoever answered (`single` mode, and the history a `proxy` server
    /// routes by itself).
    pub fn full_history(&self, head: &[ChatMessage]) -> Vec<ChatMessage> {
        let mut out = head.to_vec();
        for task in &self.tasks {
            out.push(ChatMessage::user(task.user_text.clone()));
            out.extend(task.messages.iter().cloned());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolCall;

    fn head() -> Vec<ChatMessage> {
        vec![ChatMessage::system("sys")]
    }

    #[test]
    fn other_experts_are_seen_through_their_summaries_only() {
        let mut t = Timeline::new();
        t.open(Expert::L0, "hello");
        t.push(ChatMessage::assistant("hi there, raw L0 answer"));
        let first = t.close(true).unwrap();
        assert_eq!(t.summaries_needed_by(Expert::L2), vec![first]);
        assert!(t.summaries_needed_by(Expert::L0).is_empty());
        t.record_summary(first, "  Greeted the user. ");

        t.open(Expert::L2, "fix the test");
        let view = t.view(Expert::L2, &head());
        let texts: Vec<&str> = view.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts[0], "sys");
        assert_eq!(texts[1], "hello");
        assert!(texts[2].contains("L0 expert") && texts[2].contains("Greeted the user."));
        assert_eq!(texts[3], "fix the test");
        assert!(!texts.iter().any(|t| t.contains("raw L0 answer")));

        // L0's own view keeps its raw answer.
        let l0 = t.view(Expert::L0, &head());
        assert!(l0.iter().any(|m| m.content.contains("raw L0 answer")));
    }

    #[test]
    fn views_are_append_only_for_the_same_expert() {
        let mut t = Timeline::new();
        t.open(Expert::L2, "a");
        let mut call = ChatMessage::assistant("");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: "{}".into(),
        });
        t.push(call);
        let before = t.view(Expert::L2, &head());
        t.push(ChatMessage::tool_result("c1", "contents"));
        let after = t.view(Expert::L2, &head());
        assert_eq!(&after[..before.len()], &before[..]);
        assert_eq!(after.len(), before.len() + 1);
    }

    #[test]
    fn tasks_without_a_summary_still_answer_their_user_text_in_other_views() {
        let mut t = Timeline::new();
        t.open(Expert::L1, "book a table");
        t.push(ChatMessage::assistant("done"));
        let id = t.close(true).unwrap();
        t.record_summary(id, "   ");
        t.open(Expert::L3, "open loop");
        let second = t.open(Expert::L2, "next");
        assert_eq!(t.task(second - 1).unwrap().summary, SummaryState::Skipped);
        let view = t.view(Expert::L2, &[]);
        let roles: Vec<Role> = view.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [
                Role::User,
                Role::Assistant,
                Role::User,
                Role::Assistant,
                Role::User
            ]
        );
        // No summary text is made up: the empty one says who answered, the abandoned one
        // that it was cut short.
        assert_eq!(
            view[1].content,
            "(This request was handled by the L1 expert.)"
        );
        assert!(view[3].content.contains("L3 expert; it was cut short"));
    }

    #[test]
    fn an_abandoned_task_without_an_answer_ends_with_its_note() {
        let mut t = Timeline::new();
        t.open(Expert::L2, "run it");
        let mut call = ChatMessage::assistant("");
        call.tool_calls.push(ToolCall {
            id: "c1".into(),
            name: "shell".into(),
            arguments: "{}".into(),
        });
        t.push(call);
        t.abandon_open_task(Some("Interrupted by the user."));
        let own = t.view(Expert::L2, &[]);
        let last = own.last().unwrap();
        assert_eq!(last.role, Role::Assistant);
        assert_eq!(last.content, "(Interrupted by the user.)");
        // The unanswered call got its result before the note: a valid conversation.
        assert_eq!(own[own.len() - 2].role, Role::Tool);

        // A partial answer already kept ends the task: no second assistant message.
        t.open(Expert::L2, "explain");
        t.push(ChatMessage::assistant("half an answer [cut short]"));
        t.abandon_open_task(Some("Interrupted by the user."));
        let own = t.view(Expert::L2, &[]);
        assert_eq!(own.last().unwrap().content, "half an answer [cut short]");

        // Without a note (a handoff: its call result says it all) nothing is added.
        t.open(Expert::L0, "fix it");
        t.push(ChatMessage::user("hook says: go on"));
        t.abandon_open_task(None);
        assert_eq!(t.tasks.last().unwrap().messages.len(), 1);
    }

    #[test]
    fn identity_goes_into_the_first_system_message_once() {
        let v = with_identity(&head(), "I am baton.");
        assert_eq!(v[0].content, "sys\n\nI am baton.");
        assert_eq!(with_identity(&v, "I am baton."), v);
        let none = with_identity(&[], "I am baton.");
        assert_eq!(none[0].role, Role::System);
    }

    #[test]
    fn timeline_round_trips_through_json() {
        let mut t = Timeline::new();
        t.open(Expert::L2, "x");
        t.push(ChatMessage::assistant("y"));
        let id = t.close(true).unwrap();
        t.record_summary(id, "s");
        let json = serde_json::to_string(&t).unwrap();
        let back: Timeline = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
    }
}
