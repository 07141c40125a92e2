//! `session/load`: a saved session's conversation sent back to the client as the updates it
//! would have seen, each with the expert that produced it.

use std::collections::HashMap;
use std::path::Path;

use agent_client_protocol::v1::schema::{
    SessionUpdate, ToolCall, ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
};

use crate::acp::updates::{fenced, locations, text_chunk, tool_kind};
use crate::protocol::{Expert, Role};
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
                            let tool_call =
                                ToolCall::new(call.id.clone(), title(&call.name, &args))
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
                            .status(ToolCallStatus::Completed)
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
}
