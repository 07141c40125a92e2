//! Folds streamed `chat.completion.chunk` objects into deltas for the caller and one final
//! message: content and reasoning kept apart, tool calls assembled by
//! `index`, the usage-only chunk, and the finish reason.

use std::collections::HashMap;

use serde_json::Value;

use super::wire;
use crate::backend::{ChatDelta, FinishReason};
use crate::protocol::TokenUsage;
use crate::protocol::{ChatMessage, Role, ToolCall};

/// Why a chunk could not be folded in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkError {
    /// The server sent an error object in the stream (`data: {"error": …}`).
    Server {
        message: String,
        code: Option<String>,
    },
    /// The chunk does not have the expected shape.
    Malformed(String),
}

#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
    /// `ToolCallStarted` was emitted.
    started: bool,
    /// Argument fragments that arrived before the name (emitted once the call starts).
    early_arguments: String,
}

/// The fold state of one streamed response.
#[derive(Debug, Default)]
pub struct StreamAssembler {
    content: String,
    reasoning: String,
    calls: Vec<PartialCall>,
    /// Server tool-call index → position in `calls` (the dense index the caller sees).
    positions: HashMap<u64, usize>,
    finish: Option<String>,
    usage: Option<TokenUsage>,
}

/// The assembled result once the stream ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Assembled {
    pub message: ChatMessage,
    pub finish_reason: FinishReason,
    pub usage: Option<TokenUsage>,
}

impl StreamAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a chunk carried a `finish_reason`.
    pub fn has_finish(&self) -> bool {
        self.finish.is_some()
    }

    /// Folds one chunk in and returns the deltas it produced, in order.
    pub fn apply(&mut self, chunk: &Value) -> Result<Vec<ChatDelta>, ChunkError> {
        if let Some(error) = chunk.get("error") {
            return Err(server_error(error));
        }
        if let Some(usage) = chunk.get("usage").and_then(wire::usage) {
            self.usage = Some(usage);
        }
        let Some(choices) = chunk.get("choices") else {
            // A usage-only chunk may omit choices entirely; anything else is not a chunk.
            if chunk.get("usage").is_some() {
                return Ok(Vec::new());
            }
            return Err(ChunkError::Malformed(
                "a stream chunk has neither `choices` nor `usage`".into(),
            ));
        };
        let choices = choices
            .as_array()
            .ok_or_else(|| ChunkError::Malformed("`choices` is not an array".into()))?;
        let mut deltas = Vec::new();
        for choice in choices {
            // One answer per request (n = 1); other indices are not ours to show.
            if choice.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.get("delta").filter(|d| d.is_object()) {
                self.apply_delta(delta, &mut deltas)?;
            }
            if let Some(finish) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish = Some(finish.to_string());
            }
        }
        Ok(deltas)
    }

    fn apply_delta(&mut self, delta: &Value, out: &mut Vec<ChatDelta>) -> Result<(), ChunkError> {
        if let Some(reasoning) = wire::reasoning_text(delta).filter(|r| !r.is_empty()) {
            self.reasoning.push_str(reasoning);
            out.push(ChatDelta::Reasoning(reasoning.to_string()));
        }
        let content = wire::content_text(delta.get("content"));
        if !content.is_empty() {
            self.content.push_str(&content);
            out.push(ChatDelta::Text(content));
        }
        if let Some(calls) = delta.get("tool_calls").filter(|c| !c.is_null()) {
            let calls = calls
                .as_array()
                .ok_or_else(|| ChunkError::Malformed("`tool_calls` is not an array".into()))?;
            for fragment in calls {
                self.apply_tool_fragment(fragment, out);
            }
        }
        Ok(())
    }

    fn apply_tool_fragment(&mut self, fragment: &Value, out: &mut Vec<ChatDelta>) {
        // A missing index means a server that only ever sends one call at a time.
        let server_index = fragment.get("index").and_then(Value::as_u64).unwrap_or(0);
        let next_position = self.calls.len();
        let position = *self.positions.entry(server_index).or_insert(next_position);
        if position == next_position {
            self.calls.push(PartialCall::default());
        }
        let call = &mut self.calls[position];
        if call.id.is_none()
            && let Some(id) = fragment
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
        {
            call.id = Some(id.to_string());
        }
        if !call.started
            && let Some(name) = fragment
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
        {
            call.name = name.to_string();
            let id = call.id.get_or_insert_with(wire::fresh_call_id).clone();
            call.started = true;
            out.push(ChatDelta::ToolCallStarted {
                index: position,
                id,
                name: call.name.clone(),
            });
            if !call.early_arguments.is_empty() {
                out.push(ChatDelta::ToolCallArguments {
                    index: position,
                    fragment: std::mem::take(&mut call.early_arguments),
                });
            }
        }
        if let Some(arguments) =
            wire::arguments_text(fragment.pointer("/function/arguments")).filter(|a| !a.is_empty())
        {
            call.arguments.push_str(&arguments);
            if call.started {
                out.push(ChatDelta::ToolCallArguments {
                    index: position,
                    fragment: arguments,
                });
            } else {
                call.early_arguments.push_str(&arguments);
            }
        }
    }

    /// The final message. `Err` when the stream never said how it finished or a tool call
    /// never got a name.
    pub fn finish(self) -> Result<Assembled, ChunkError> {
        let finish = self.finish.ok_or_else(|| {
            ChunkError::Malformed("stream ended before finish_reason: truncated response".into())
        })?;
        let mut tool_calls = Vec::with_capacity(self.calls.len());
        for (position, call) in self.calls.into_iter().enumerate() {
            if !call.started {
                return Err(ChunkError::Malformed(format!(
                    "tool call #{position} never got a function name"
                )));
            }
            tool_calls.push(ToolCall {
                id: call.id.unwrap_or_else(wire::fresh_call_id),
                name: call.name,
                arguments: call.arguments,
            });
        }
        let finish_reason =
            wire::effective_finish(wire::finish_reason(&finish), !tool_calls.is_empty());
        Ok(Assembled {
            message: ChatMessage {
                role: Role::Assistant,
                content: self.content,
                reasoning: (!self.reasoning.is_empty()).then_some(self.reasoning),
                tool_calls,
                tool_call_id: None,
            },
            finish_reason,
            usage: self.usage,
        })
    }
}

fn server_error(error: &Value) -> ChunkError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_string);
    let code = error.get("code").and_then(|c| match c {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    ChunkError::Server { message, code }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    #[test]
    fn text_and_reasoning_stay_apart() {
        let mut asm = StreamAssembler::new();
        let mut deltas = asm
            .apply(&chunk(json!({"role": "assistant", "content": ""}), None))
            .unwrap();
        deltas.extend(
            asm.apply(&chunk(json!({"reasoning_content": "think "}), None))
                .unwrap(),
        );
        deltas.extend(
            asm.apply(&chunk(json!({"reasoning": "more"}), None))
                .unwrap(),
        );
        deltas.extend(asm.apply(&chunk(json!({"content": "Hi"}), None)).unwrap());
        deltas.extend(asm.apply(&chunk(json!({}), Some("stop"))).unwrap());
        deltas.extend(
            asm.apply(
                &json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
            )
            .unwrap(),
        );
        assert_eq!(
            deltas,
            [
                ChatDelta::Reasoning("think ".into()),
                ChatDelta::Reasoning("more".into()),
                ChatDelta::Text("Hi".into()),
            ]
        );
        let done = asm.finish().unwrap();
        assert_eq!(done.message.content, "Hi");
        assert_eq!(done.message.reasoning.as_deref(), Some("think more"));
        assert_eq!(done.finish_reason, FinishReason::Stop);
        assert_eq!(done.usage.unwrap().completion_tokens, 2);
    }

    #[test]
    fn both_reasoning_keys_in_one_delta_are_not_doubled() {
        let mut asm = StreamAssembler::new();
        let deltas = asm
            .apply(&chunk(
                json!({"reasoning": "x", "reasoning_content": "x"}),
                Some("stop"),
            ))
            .unwrap();
        assert_eq!(deltas, [ChatDelta::Reasoning("x".into())]);
    }

    #[test]
    fn tool_calls_assembled_by_index_with_dense_positions() {
        let mut asm = StreamAssembler::new();
        let mut deltas = Vec::new();
        for c in [
            json!({"tool_calls": [{"index": 3, "id": "a", "type": "function", "function": {"name": "read_file", "arguments": ""}}]}),
            json!({"tool_calls": [{"index": 3, "function": {"arguments": "{\"pa"}}]}),
            json!({"tool_calls": [{"index": 5, "function": {"arguments": "{}"}}]}),
            json!({"tool_calls": [{"index": 5, "id": "b", "function": {"name": "list_dir"}}]}),
            json!({"tool_calls": [{"index": 3, "function": {"arguments": "th\":1}"}}]}),
        ] {
            deltas.extend(asm.apply(&chunk(c, None)).unwrap());
        }
        deltas.extend(asm.apply(&chunk(json!({}), Some("stop"))).unwrap());
        assert_eq!(
            deltas,
            [
                ChatDelta::ToolCallStarted {
                    index: 0,
                    id: "a".into(),
                    name: "read_file".into()
                },
                ChatDelta::ToolCallArguments {
                    index: 0,
                    fragment: "{\"pa".into()
                },
                ChatDelta::ToolCallStarted {
                    index: 1,
                    id: "b".into(),
                    name: "list_dir".into()
                },
                ChatDelta::ToolCallArguments {
                    index: 1,
                    fragment: "{}".into()
                },
                ChatDelta::ToolCallArguments {
                    index: 0,
                    fragment: "th\":1}".into()
                },
            ]
        );
        let done = asm.finish().unwrap();
        assert_eq!(
            done.finish_reason,
            FinishReason::ToolCalls,
            "tool calls force the tool_calls finish"
        );
        assert_eq!(done.message.tool_calls[0].arguments, "{\"path\":1}");
        assert_eq!(done.message.tool_calls[1].id, "b");
    }

    #[test]
    fn missing_finish_or_nameless_call_is_an_error() {
        let mut asm = StreamAssembler::new();
        asm.apply(&chunk(json!({"content": "x"}), None)).unwrap();
        let err = asm.finish().unwrap_err();
        assert_eq!(
            err,
            ChunkError::Malformed("stream ended before finish_reason: truncated response".into())
        );
        let mut asm = StreamAssembler::new();
        asm.apply(&chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
            Some("tool_calls"),
        ))
        .unwrap();
        assert!(matches!(asm.finish(), Err(ChunkError::Malformed(m)) if m.contains("name")));
    }

    #[test]
    fn error_frames_and_bad_shapes() {
        let mut asm = StreamAssembler::new();
        let err = asm
            .apply(&json!({"error": {"message": "boom", "code": 500}}))
            .unwrap_err();
        assert_eq!(
            err,
            ChunkError::Server {
                message: "boom".into(),
                code: Some("500".into())
            }
        );
        assert!(matches!(
            asm.apply(&json!({"x": 1})),
            Err(ChunkError::Malformed(_))
        ));
        assert!(matches!(
            asm.apply(&json!({"choices": 1})),
            Err(ChunkError::Malformed(_))
        ));
    }
}
