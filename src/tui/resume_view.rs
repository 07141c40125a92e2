//! After `/resume` (or `--resume`), the earlier conversation is shown again: the user turns, the
//! tool calls the model made, and the final answers of the session's records (read by the
//! session module), so a resumed session is not a blank screen. A turn that did not finish
//! says so.

use std::path::Path;

use crate::protocol::{Expert, Role, TurnStatus};
use crate::session::Record;

/// One exchange of a saved session.
#[derive(Debug, Clone, PartialEq)]
pub struct PastTurn {
    pub user: String,
    pub expert: Option<Expert>,
    pub answer: Option<String>,
    /// One line per tool call of the turn (`$ cargo test`, `read_file src/main.rs`).
    pub tools: Vec<String>,
    /// How the turn ended; `None`: its process died before it ended.
    pub ended: Option<TurnStatus>,
}

/// A tool call as one line: the command of a shell call, else the tool and its path.
fn call_line(name: &str, arguments: &str) -> String {
    let args: serde_json::Value = serde_json::from_str(arguments).unwrap_or_default();
    let field = |k: &str| args.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let line = match (field("command"), field("path")) {
        (Some(command), _) => format!("$ {command}"),
        (None, Some(path)) => format!("{name} {path}"),
        (None, None) => name.to_string(),
    };
    // One line, and not a screenful.
    let line = line.lines().next().unwrap_or_default().to_string();
    match line.char_indices().nth(100) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None => line,
    }
}

/// At most this many earlier turns are shown (the newest ones).
const MAX_TURNS: usize = 200;

/// The turns of a session file. Lines that do not parse are skipped: a file cut off by a crash
/// still shows what it holds.
pub fn past_turns(path: &Path) -> Result<Vec<PastTurn>, String> {
    let records = crate::session::read_records(path).map_err(|e| e.to_string())?;
    let mut turns: Vec<PastTurn> = Vec::new();
    for record in records {
        match record {
            Record::Turn { text, .. } => turns.push(PastTurn {
                user: text,
                expert: None,
                answer: None,
                tools: Vec::new(),
                ended: None,
            }),
            Record::Message { message, .. } if message.role == Role::Assistant => {
                if let Some(t) = turns.last_mut() {
                    t.tools.extend(
                        message
                            .tool_calls
                            .iter()
                            .map(|c| call_line(&c.name, &c.arguments)),
                    );
                }
            }
            Record::Route { expert, .. } => {
                if let Some(t) = turns.last_mut() {
                    t.expert = Some(expert);
                }
            }
            Record::TurnEnded { answer, status, .. } => {
                if let Some(t) = turns.last_mut() {
                    t.answer = answer.filter(|a| !a.trim().is_empty());
                    t.ended = Some(status);
                }
            }
            _ => {}
        }
    }
    let skip = turns.len().saturating_sub(MAX_TURNS);
    Ok(turns.split_off(skip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{RouteDecision, TurnStatus};

    #[test]
    fn reads_turns_routes_and_answers() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.jsonl");
        let records = [
            Record::Turn {
                turn_id: 1,
                text: "hi".into(),
                at: "t".into(),
            },
            Record::Route {
                turn_id: 1,
                expert: Expert::L0,
                decision: RouteDecision::Model,
                reason: None,
                latency_ms: 5,
            },
            Record::Message {
                task_id: 1,
                message: crate::protocol::ChatMessage {
                    role: Role::Assistant,
                    content: String::new(),
                    reasoning: None,
                    tool_calls: vec![
                        crate::protocol::ToolCall {
                            id: "c1".into(),
                            name: "shell".into(),
                            arguments: r#"{"command":"cargo test\nsecond line"}"#.into(),
                        },
                        crate::protocol::ToolCall {
                            id: "c2".into(),
                            name: "read_file".into(),
                            arguments: r#"{"path":"src/main.rs"}"#.into(),
                        },
                    ],
                    tool_call_id: None,
                },
            },
            Record::TurnEnded {
                turn_id: 1,
                status: TurnStatus::Done,
                answer: Some("hello!".into()),
            },
            Record::Turn {
                turn_id: 2,
                text: "unfinished".into(),
                at: "t".into(),
            },
        ];
        let mut text: String = records
            .iter()
            .map(|r| serde_json::to_string(r).expect("json") + "\n")
            .collect();
        text.push_str("{\"record\": \"cut off");
        std::fs::write(&path, text).expect("write");
        let turns = past_turns(&path).expect("read");
        assert_eq!(turns.len(), 2);
        assert_eq!(
            turns[0],
            PastTurn {
                user: "hi".into(),
                expert: Some(Expert::L0),
                answer: Some("hello!".into()),
                tools: vec!["$ cargo test".into(), "read_file src/main.rs".into()],
                ended: Some(TurnStatus::Done),
            }
        );
        assert_eq!(turns[1].answer, None);
        assert_eq!(turns[1].ended, None, "cut off: it never ended");
        assert!(past_turns(&dir.path().join("missing.jsonl")).is_err());
    }
}
