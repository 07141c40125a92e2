//! Rebuilds a session's state from its records: the timeline with its summaries, the turn count
//! and the proxy conversation id. A torn last line (crash mid-write) is ignored.

use std::io::{BufRead, BufReader};
use std::path::Path;

use super::{Record, SessionError};
use crate::mol::Timeline;
use crate::protocol::{ChatMessage, Role};

/// The state a resumed session continues from.
#[derive(Debug, Clone, Default)]
pub struct Restored {
    pub id: String,
    pub mode: String,
    pub workspace: String,
    pub timeline: Timeline,
    /// The id the next turn gets.
    pub next_turn_id: u64,
    pub conversation_id: Option<String>,
    /// Text of the last answer (shown when resuming interactively).
    pub last_answer: Option<String>,
}

pub fn replay_file(path: &Path) -> Result<Restored, SessionError> {
    let file = std::fs::File::open(path).map_err(|e| SessionError::File {
        path: path.display().to_string(),
        reason: format!("cannot open: {e}"),
    })?;
    let mut lines = Vec::new();
    for line in BufReader::new(file).lines() {
        match line {
            Ok(l) => lines.push(l),
            Err(e) => {
                return Err(SessionError::File {
                    path: path.display().to_string(),
                    reason: format!("cannot read: {e}"),
                });
            }
        }
    }
    let count = lines.len();
    let mut records = Vec::with_capacity(count);
    for (n, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => records.push(r),
            // Only the last line may be torn by a crash; anything earlier is corruption.
            Err(_) if n + 1 == count => break,
            Err(e) => {
                return Err(SessionError::File {
                    path: path.display().to_string(),
                    reason: format!("line {}: {e}", n + 1),
                });
            }
        }
    }
    let restored = replay(records);
    if restored.id.is_empty() {
        return Err(SessionError::File {
            path: path.display().to_string(),
            reason: "no meta record: not a baton session file".into(),
        });
    }
    Ok(restored)
}

pub fn replay(records: impl IntoIterator<Item = Record>) -> Restored {
    let mut r = Restored {
        next_turn_id: 1,
        ..Restored::default()
    };
    for record in records {
        match record {
            Record::Meta {
                id,
                mode,
                workspace,
                ..
            } => {
                r.id = id;
                r.mode = mode;
                r.workspace = workspace;
            }
            Record::Turn { turn_id, .. } => r.next_turn_id = r.next_turn_id.max(turn_id + 1),
            Record::Route { .. } => {}
            Record::TaskOpened {
                owner, user_text, ..
            } => {
                r.timeline.open(owner, user_text);
            }
            Record::Message { message, .. } => {
                r.timeline.push(message);
            }
            Record::TaskClosed { .. } => {
                r.timeline.close(r.mode == "mol");
            }
            Record::TaskAbandoned { .. } => {
                abandon_open_task(&mut r.timeline);
            }
            Record::Summary { task_id, text, .. } => r.timeline.record_summary(task_id, text),
            Record::ToolOutputsShrunk {
                task_id,
                keep_recent,
            } => {
                r.timeline.shrink_old_tool_outputs(task_id, keep_recent);
            }
            Record::Compacted {
                task_id,
                summary,
                keep_steps,
            } => {
                r.timeline.compact(task_id, &summary, keep_steps);
            }
            Record::TasksFolded {
                expert,
                before_task,
            } => {
                // Unconditionally: a summary the fold relied on may be recorded a line later.
                let folded = r.timeline.folded_before.entry(expert).or_insert(0);
                *folded = (*folded).max(before_task);
            }
            Record::TokenRatio { chars_per_token } => {
                r.timeline.token_ratio = Some(chars_per_token)
            }
            Record::ConversationId { id } => r.conversation_id = Some(id),
            Record::TurnEnded { answer, .. } => {
                if answer.is_some() {
                    r.last_answer = answer;
                }
            }
        }
    }
    // A task left open by a crash can never be continued (its tool results are lost): abandon it.
    abandon_open_task(&mut r.timeline);
    r
}

/// Closes the open task without a summary. Tool calls it left without results (an interrupt,
/// a crash) get a result saying so, so the owner's view stays a valid conversation.
/// Returns the task's id, or `None` when no task was open.
pub fn abandon_open_task(timeline: &mut Timeline) -> Option<u64> {
    let task = timeline.open_task_mut()?;
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
    timeline.close(false)
}
