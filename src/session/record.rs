//! The records of a session file: one JSON object a line, appended as the session goes.
//!
//! Records describe changes (a task opened, a message added, a summary recorded) rather than
//! snapshots, so a file cut off at any line still replays to a consistent state. The live
//! agent changes its state only by applying records (the same fold replay uses), so a resumed
//! session is the session it continues. New variants may be added; existing ones keep their
//! names and fields, so old files still resume.

use serde::{Deserialize, Serialize};

use crate::protocol::ChatMessage;
use crate::protocol::{Expert, Hop, RouteDecision, TokenUsage, TurnStatus};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "record", rename_all = "snake_case")]
pub enum Record {
    /// First line of every file.
    Meta {
        id: String,
        created: String,
        mode: String,
        backend: String,
        workspace: String,
        version: String,
    },
    /// A user turn began.
    Turn {
        turn_id: u64,
        text: String,
        at: String,
    },
    /// How the turn's expert was chosen.
    Route {
        turn_id: u64,
        expert: Expert,
        decision: RouteDecision,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        latency_ms: u64,
    },
    /// A task of the MoL timeline opened.
    TaskOpened {
        task_id: u64,
        owner: Expert,
        user_text: String,
    },
    /// A message produced inside a task (assistant answers, tool calls, tool results).
    Message {
        task_id: u64,
        message: ChatMessage,
    },
    TaskClosed {
        task_id: u64,
    },
    /// How a tool call ended (its result is the `Message` before this record) and the title
    /// it was shown with, for a client that replays the session (ACP `session/load`).
    ToolEnded {
        call_id: String,
        status: crate::protocol::ToolStatus,
        title: String,
    },
    /// A task abandoned by an interrupt, an error, a limit or a new turn: closed, never
    /// summarized. `note`: why, told to the model where the task ended without an answer
    /// (none for a handoff, whose call result says it all).
    TaskAbandoned {
        task_id: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    Summary {
        task_id: u64,
        expert: Expert,
        text: String,
    },
    /// Old tool outputs of a task are shown shrunk from here on.
    ToolOutputsShrunk {
        task_id: u64,
        keep_recent: usize,
    },
    /// A task's older steps were replaced by a handoff summary.
    Compacted {
        task_id: u64,
        summary: String,
        keep_steps: usize,
    },
    /// An expert's own closed tasks before `before_task` are shown as summaries from here on.
    TasksFolded {
        expert: Expert,
        before_task: u64,
    },
    /// The characters-per-token ratio the context budget learned from the server's usage.
    TokenRatio {
        chars_per_token: f64,
    },
    /// `proxy` mode: the conversation id the server gave.
    ConversationId {
        id: String,
    },
    /// The tokens one hop used (counted into the turn's and the session's totals).
    Usage {
        turn_id: u64,
        hop: Hop,
        usage: TokenUsage,
    },
    /// The user named the session (`/rename`); the latest name counts, an empty one clears it.
    Renamed {
        name: String,
    },
    /// The turn changed files: the ids of its snapshots in baton's checkpoint store, taken
    /// before its first change and when it ended (what undo reverts between).
    Checkpoint {
        turn_id: u64,
        before: String,
        after: String,
        /// The workspace repository's HEAD moved during the turn (a commit, a reset): undo
        /// restores files, never commits, and says so.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        head: Option<HeadMove>,
    },
    /// The turn's changes were undone; `before`/`after` are the files just before and after
    /// the undo (what redo reverts between).
    Undone {
        turn_id: u64,
        before: String,
        after: String,
    },
    /// The last undo was redone.
    Redone {
        turn_id: u64,
    },
    TurnEnded {
        turn_id: u64,
        status: TurnStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
    },
}

impl Record {
    /// What an applied undo (or, with `redo`, its redo) of `turn_id` records: an undo keeps the
    /// files just before and after it, which is what a redo goes back between.
    pub fn reverted(turn_id: u64, redo: bool, before: &str, after: &str) -> Record {
        if redo {
            Record::Redone { turn_id }
        } else {
            Record::Undone {
                turn_id,
                before: before.to_string(),
                after: after.to_string(),
            }
        }
    }
}

/// How the workspace repository's HEAD moved during a turn: the commit before (none: no
/// commit yet) and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadMove {
    pub from: Option<String>,
    pub to: String,
}

impl HeadMove {
    /// What undo tells the user and the model of a turn whose HEAD moved: files are restored,
    /// the commits stay (rewriting history is the user's call, with the command to do it).
    pub fn undo_note(&self, turn_id: u64) -> String {
        let short = |id: &str| id.chars().take(12).collect::<String>();
        let to = short(&self.to);
        match &self.from {
            Some(from) => format!(
                "turn {turn_id} also moved the git HEAD from {} to {to} (a commit or reset): undo \
                 restored the files, not the commits. `git reset {}` takes the commits back too \
                 (it leaves the files as undo left them)",
                short(from),
                short(from)
            ),
            None => format!(
                "turn {turn_id} also made the repository's first commit ({to}): undo restored \
                 the files, not the commit"
            ),
        }
    }
}
