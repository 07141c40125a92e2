//! `session/load`: a saved session's conversation sent back to the client as the updates it
//! would have seen, each with the expert that produced it.

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol::v1::schema::{
    SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};

use crate::acp::updates::{fenced, locations, text_chunk, tool_kind};
use crate::protocol::{Expert, Role, ToolStatus};
use crate::session::Record;

/// A tool result longer than this is replayed as its tail.
const RESULT_TAIL_CHARS: usize = 8 * 1024;

/// A short title for a call the session file only has name and arguments of.
fn title(name: &str, args: &serde_json::Value) -> String {
    for key in ["command", "path", "pattern"] {
        if let Some(v) = args.get(key).and_then(|v| v.as_str()) {
            return format!("{name}: {v}");
        }
    }
    name.to_string()
}

fn tail_chars(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    text.chars().skip(count - max).collect()
}

/// The updates that replay `records`, in order, each with its expert (`None`: the user's).
pub fn updates(workspace: &Path, records: &[Record]) -> Vec<(Option<Expert>, SessionUpdate)> {
    let mut out = Vec::new();
    let mut owners: HashMap<u64, Expert> = HashMap::new();
    // How each call ended and its live title. A file that records them has one for every call
    // that ran: a result without one was written for a call that never ran (an interrupted
    // turn). Older files record none: their calls replay as completed.
    let ended: HashMap<&str, (ToolStatus, &str)> = records
        .iter()
        .filter_map(|r| match r {
            Record::ToolEnded {
                call_id,
                status,
                title,
            } => Some((call_id.as_str(), (*status, title.as_str()))),
            _ => None,
        })
        .collect();
    let status_of = |call_id: &str| match ended.get(call_id) {
        Some((ToolStatus::Ok, _)) => ToolCallStatus::Completed,
        Some(_) => ToolCallStatus::Failed,
        None if ended.is_empty() => ToolCallStatus::Completed,
        None => ToolCallStatus::Failed,
    };
    for record in records {
        match record {
            Record::Turn { text, .. } => {
                out.push((
                    None,
                    SessionUpdate::UserMessageChunk(text_chunk(text.clone())),
                ));
            }
            Record::TaskOpened { task_id, owner, .. } => {
                owners.insert(*task_id, *owner);
            }
            Record::Message { task_id, message } => {
                let expert = owners.get(task_id).copied();
                match message.role {
                    Role::Assistant => {
                        if let Some(reasoning) =
                            message.reasoning.as_deref().filter(|r| !r.is_empty())
                        {
                            out.push((
                                expert,
                                SessionUpdate::AgentThoughtChunk(text_chunk(reasoning)),
                            ));
                        }
                        if !message.content.is_empty() {
                            out.push((
                                expert,
                                SessionUpdate::AgentMessageChunk(text_chunk(
                                    message.content.clone(),
                                )),
                            ));
                        }
                        for call in &message.tool_calls {
                            let args = serde_json::from_str::<serde_json::Value>(&call.arguments)
                                .unwrap_or_else(|_| {
                                    serde_json::Value::String(call.arguments.clone())
                                });
                            let shown = match ended.get(call.id.as_str()) {
                                Some((_, live)) => live.to_string(),
                                None => title(&call.name, &args),
                            };
                            let tool_call = ToolCall::new(call.id.clone(), shown)
                                .kind(tool_kind(&call.name))
                                .status(ToolCallStatus::InProgress)
                                .locations(locations(workspace, &args))
                                .raw_input(args);
                            out.push((expert, SessionUpdate::ToolCall(tool_call)));
                        }
                    }
                    Role::Tool => {
                        let Some(call_id) = &message.tool_call_id else {
                            continue;
                        };
                        let text = tail_chars(&message.content, RESULT_TAIL_CHARS);
                        let fields = ToolCallUpdateFields::new()
                            .status(status_of(call_id))
                            .content(vec![ToolCallContent::from(fenced(&text))]);
                        out.push((
                            expert,
                            SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                                call_id.clone(),
                                fields,
                            )),
                        ));
                    }
                    Role::User | Role::System => {}
                }
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ChatMessage, ToolCall as Call};

    #[test]
    fn a_turn_with_a_tool_call_replays_in_order_with_its_owner() {
        let mut call = ChatMessage::assistant("");
        call.tool_calls = vec![Call {
            id: "c1".into(),
            name: "read_file".into(),
            arguments: r#"{"path":"a.txt"}"#.into(),
        }];
        let records = vec![
            Record::Turn {
                turn_id: 1,
                text: "read a".into(),
                at: String::new(),
            },
            Record::TaskOpened {
                task_id: 1,
                owner: Expert::L3,
                user_text: "read a".into(),
            },
            Record::Message {
                task_id: 1,
                message: call,
            },
            Record::Message {
                task_id: 1,
                message: ChatMessage::tool_result("c1", "hello"),
            },
            Record::Message {
                task_id: 1,
                message: ChatMessage::assistant("it says hello"),
            },
        ];
        let out = updates(Path::new("/ws"), &records);
        let kinds: Vec<(Option<Expert>, String)> = out
            .iter()
            .map(|(e, u)| {
                let v = serde_json::to_value(u).unwrap();
                (*e, v["sessionUpdate"].as_str().unwrap().to_string())
            })
            .collect();
        assert_eq!(
            kinds,
            [
                (None, "user_message_chunk".to_string()),
                (Some(Expert::L3), "tool_call".to_string()),
                (Some(Expert::L3), "tool_call_update".to_string()),
                (Some(Expert::L3), "agent_message_chunk".to_string()),
            ]
        );
        let v = serde_json::to_value(&out[1].1).unwrap();
        assert_eq!(v["title"], "read_file: a.txt");
        assert_eq!(v["locations"][0]["path"], "/ws/a.txt");
    }

    /// A declined, an interrupted and a never-run call replay as `failed`, as they ended live,
    /// under the title they were shown with; without `ToolEnded` records (older files) calls
    /// replay as completed.
    #[test]
    fn calls_replay_with_the_status_and_title_they_ended_with() {
        let calls = ["ok", "declined", "cut", "never"];
        let mut ask = ChatMessage::assistant("");
        ask.tool_calls = calls
            .iter()
            .map(|id| Call {
                id: (*id).into(),
                name: "shell".into(),
                arguments: r#"{"command":"sed -n 1p a"}"#.into(),
            })
            .collect();
        let mut records = vec![
            Record::TaskOpened {
                task_id: 1,
                owner: Expert::L2,
                user_text: "go".into(),
            },
            Record::Message {
                task_id: 1,
                message: ask,
            },
        ];
        for (id, status) in [
            ("ok", Some(ToolStatus::Ok)),
            ("declined", Some(ToolStatus::Declined)),
            ("cut", Some(ToolStatus::Interrupted)),
            ("never", None),
        ] {
            records.push(Record::Message {
                task_id: 1,
                message: ChatMessage::tool_result(id, "text"),
            });
            if let Some(status) = status {
                records.push(Record::ToolEnded {
                    call_id: id.into(),
                    status,
                    title: "sed -n 1p a".into(),
                });
            }
        }
        let replayed = |records: &[Record]| -> Vec<(String, String)> {
            updates(Path::new("/ws"), records)
                .iter()
                .map(|(_, u)| serde_json::to_value(u).unwrap())
                .map(|v| {
                    let label = v["title"].as_str().unwrap_or("update").to_string();
                    (label, v["status"].as_str().unwrap_or_default().to_string())
                })
                .collect()
        };
        let statuses: Vec<String> = replayed(&records)[4..]
            .iter()
            .map(|(_, s)| s.clone())
            .collect();
        assert_eq!(statuses, ["completed", "failed", "failed", "failed"]);
        assert_eq!(replayed(&records)[0].0, "sed -n 1p a", "the live title");
        let old: Vec<Record> = records
            .into_iter()
            .filter(|r| !matches!(r, Record::ToolEnded { .. }))
            .collect();
        let statuses: Vec<String> = replayed(&old)[4..].iter().map(|(_, s)| s.clone()).collect();
        assert_eq!(statuses, ["completed"; 4]);
        assert_eq!(replayed(&old)[0].0, "shell: sed -n 1p a");
    }
}
