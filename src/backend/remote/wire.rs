//! The Chat Completions wire format: `ChatRequest` → JSON request body (as the reference
//! harness sends it), and JSON response bodies → messages, usage, models.

use serde_json::{Map, Value, json};

use crate::backend::{ChatRequest, Constraint, FinishReason, ModelInfo};
use crate::protocol::RouteConstraint;
use crate::protocol::{ChatMessage, ReasoningEffort, Role, ToolCall};
use crate::protocol::{Hop, TokenUsage};

/// The JSON body of `POST /v1/chat/completions` for `req`.
///
/// Optional fields are sent only when set, so the engine's defaults apply otherwise. Key order
/// follows the reference harness, which makes captured bodies easy to compare.
pub fn request_body(req: &ChatRequest, dialect: RouteConstraint) -> Value {
    let route = req.hop == Hop::Route;
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert(
        "messages".into(),
        Value::Array(req.messages.iter().map(message_json).collect()),
    );
    if !req.tools.is_empty() {
        let tools = req
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": { "name": t.name, "description": t.description, "parameters": t.parameters }
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &req.tool_choice {
        body.insert("tool_choice".into(), tool_choice_json(choice));
    }
    if let Some(parallel) = req.parallel_tool_calls {
        body.insert("parallel_tool_calls".into(), json!(parallel));
    }
    if let Some(max) = req.max_tokens {
        body.insert("max_tokens".into(), json!(max));
        // The reference sends both on the route hop (engines differ in which one they honour).
        if route {
            body.insert("max_completion_tokens".into(), json!(max));
        }
    }
    let sampling = &req.sampling;
    if let Some(t) = sampling.temperature {
        body.insert("temperature".into(), decimal(t));
    }
    if let Some(p) = sampling.top_p {
        body.insert("top_p".into(), decimal(p));
    }
    if let Some(k) = sampling.top_k {
        body.insert("top_k".into(), json!(k));
    }
    if let Some(seed) = sampling.seed {
        body.insert("seed".into(), json!(seed));
    }
    body.insert("stream".into(), json!(req.stream));
    if req.stream {
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    if req.continue_final_message || !req.add_generation_prompt {
        body.insert(
            "continue_final_message".into(),
            json!(req.continue_final_message),
        );
        body.insert(
            "add_generation_prompt".into(),
            json!(req.add_generation_prompt),
        );
    }
    if !sampling.stop.is_empty() {
        body.insert("stop".into(), json!(sampling.stop));
    } else if route {
        body.insert("stop".into(), Value::Null);
    }
    if let Some(thinking) = req.enable_thinking {
        body.insert(
            "chat_template_kwargs".into(),
            json!({ "enable_thinking": thinking }),
        );
    }
    if let Some(effort) = req.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(effort_name(effort)));
    }
    for (key, value) in &req.extra {
        if !body.contains_key(key) {
            body.insert(key.clone(), value.clone());
        }
    }
    if let Some(Constraint::Choice { options }) = &req.constraint {
        match dialect {
            RouteConstraint::Choice => {
                body.insert("structured_outputs".into(), json!({ "choice": options }));
            }
            RouteConstraint::Regex => {
                body.insert("regex".into(), json!(choice_regex(options)));
            }
        }
    }
    Value::Object(body)
}

/// SGLang's native form of a choice constraint: `(L0|L1|L2|L3)`, options escaped.
pub fn choice_regex(options: &[String]) -> String {
    let alternatives: Vec<String> = options.iter().map(|o| regex::escape(o)).collect();
    format!("({})", alternatives.join("|"))
}

fn effort_name(effort: ReasoningEffort) -> &'static str {
    match effort {
        ReasoningEffort::None => "none",
        ReasoningEffort::Low => "low",
        ReasoningEffort::Medium => "medium",
        ReasoningEffort::High => "high",
    }
}

/// An `f32` as the decimal the user wrote (`0.7`, not `0.699999988079071`).
fn decimal(value: f32) -> Value {
    value
        .to_string()
        .parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

fn tool_choice_json(choice: &str) -> Value {
    match choice {
        "auto" | "none" | "required" => json!(choice),
        name => json!({ "type": "function", "function": { "name": name } }),
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn message_json(m: &ChatMessage) -> Value {
    let mut out = Map::new();
    out.insert("role".into(), json!(role_name(m.role)));
    out.insert("content".into(), json!(m.content));
    if let Some(reasoning) = &m.reasoning {
        out.insert("reasoning_content".into(), json!(reasoning));
    }
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments }
                })
            })
            .collect();
        out.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    Value::Object(out)
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// A parsed (non-streamed) completion.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCompletion {
    pub message: ChatMessage,
    pub finish_reason: FinishReason,
    pub usage: Option<TokenUsage>,
}

pub fn finish_reason(name: &str) -> FinishReason {
    match name {
        "stop" | "eos" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// Tool calls present ⇒ the finish is `tool_calls`, unless the output was cut
/// (`length`) or filtered — then the calls may be incomplete and the caller must know.
pub fn effective_finish(finish: FinishReason, has_tool_calls: bool) -> FinishReason {
    match finish {
        FinishReason::Length | FinishReason::ContentFilter => finish,
        _ if has_tool_calls => FinishReason::ToolCalls,
        other => other,
    }
}

/// `usage` of a response or of the final stream chunk.
pub fn usage(value: &Value) -> Option<TokenUsage> {
    let usage = value.as_object()?;
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    Some(TokenUsage {
        prompt_tokens: count("prompt_tokens")?,
        completion_tokens: count("completion_tokens").unwrap_or(0),
        cached_tokens: value
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64),
        estimated: false,
    })
}

/// Content as text: a string as is, an array of parts flattened (text parts joined by spaces,
/// as the reference does), null as "".
pub fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| {
                p.get("text")
                    .or_else(|| p.get("content"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
            })
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

/// Reasoning text of a message or delta: `reasoning` (newer vLLM), else `reasoning_content`.
/// Some servers send both with the same text; taking one avoids doubling it.
pub fn reasoning_text(object: &Value) -> Option<&str> {
    object
        .get("reasoning")
        .and_then(Value::as_str)
        .or_else(|| object.get("reasoning_content").and_then(Value::as_str))
}

/// Arguments as the raw JSON text (a few servers send an object instead of a string).
pub fn arguments_text(arguments: Option<&Value>) -> Option<String> {
    match arguments {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Null) | None => None,
        Some(other) => Some(other.to_string()),
    }
}

/// An id for a tool call the server sent without one.
pub fn fresh_call_id() -> String {
    format!("call_{}", uuid::Uuid::now_v7().simple())
}

/// What a JSON body from the server lacks; the caller wraps it as a protocol error of its hop.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("the response has no `choices` array")]
    NoChoices,
    #[error("the response has no choice with index 0")]
    NoFirstChoice,
    #[error("the response's choice has no `message` object")]
    NoMessage,
    #[error("tool call #{position} has no function name")]
    UnnamedToolCall { position: usize },
    /// A server that stops mid-generation sends `finish_reason: null`.
    #[error("the response has no finish_reason: truncated response")]
    NoFinishReason,
    #[error("the model list has no `data` array")]
    NoModelList,
    #[error("model entry #{position} has no `id`")]
    ModelWithoutId { position: usize },
}

/// Parses a non-streamed `chat.completion` body. `Err` says what is wrong with it.
pub fn parse_completion(body: &Value) -> Result<ParsedCompletion, WireError> {
    let choices = body
        .get("choices")
        .and_then(Value::as_array)
        .ok_or(WireError::NoChoices)?;
    let choice = choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        .ok_or(WireError::NoFirstChoice)?;
    let message = choice
        .get("message")
        .filter(|m| m.is_object())
        .ok_or(WireError::NoMessage)?;
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (position, call) in calls.iter().enumerate() {
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or(WireError::UnnamedToolCall { position })?;
            tool_calls.push(ToolCall {
                id: call
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map_or_else(fresh_call_id, str::to_string),
                name: name.to_string(),
                arguments: arguments_text(call.pointer("/function/arguments")).unwrap_or_default(),
            });
        }
    }
    let finish = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .ok_or(WireError::NoFinishReason)?;
    let finish_reason = effective_finish(finish_reason(finish), !tool_calls.is_empty());
    Ok(ParsedCompletion {
        message: ChatMessage {
            role: Role::Assistant,
            content: content_text(message.get("content")),
            reasoning: reasoning_text(message).map(str::to_string),
            tool_calls,
            tool_call_id: None,
        },
        finish_reason,
        usage: body.get("usage").and_then(usage),
    })
}

/// Parses `GET /v1/models`: `data[].id` and `max_model_len` when present.
pub fn parse_models(body: &Value) -> Result<Vec<ModelInfo>, WireError> {
    let data = body
        .get("data")
        .and_then(Value::as_array)
        .ok_or(WireError::NoModelList)?;
    data.iter()
        .enumerate()
        .map(|(position, entry)| {
            let id = entry
                .get("id")
                .and_then(Value::as_str)
                .ok_or(WireError::ModelWithoutId { position })?;
            Ok(ModelInfo {
                id: id.to_string(),
                context_window: entry.get("max_model_len").and_then(Value::as_u64),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Sampling;
    use crate::protocol::ToolSpec;

    fn route_request() -> ChatRequest {
        ChatRequest {
            max_tokens: Some(24),
            sampling: Sampling {
                temperature: Some(0.0),
                ..Sampling::default()
            },
            constraint: Some(Constraint::Choice {
                options: ["L0", "L1", "L2", "L3"].map(String::from).to_vec(),
            }),
            continue_final_message: true,
            add_generation_prompt: false,
            enable_thinking: Some(false),
            stream: false,
            ..ChatRequest::new(
                "L0",
                vec![
                    ChatMessage::user("fix the build\n\nclassify"),
                    ChatMessage::assistant("model_id="),
                ],
                Hop::Route,
            )
        }
    }

    #[test]
    fn route_body_matches_the_reference_key_for_key() {
        let body = request_body(&route_request(), RouteConstraint::Choice);
        let expected = json!({
            "model": "L0",
            "messages": [
                {"role": "user", "content": "fix the build\n\nclassify"},
                {"role": "assistant", "content": "model_id="}
            ],
            "max_tokens": 24,
            "max_completion_tokens": 24,
            "temperature": 0.0,
            "stream": false,
            "continue_final_message": true,
            "add_generation_prompt": false,
            "stop": null,
            "chat_template_kwargs": {"enable_thinking": false},
            "structured_outputs": {"choice": ["L0", "L1", "L2", "L3"]}
        });
        assert_eq!(body, expected);
        let keys: Vec<&String> = body.as_object().unwrap().keys().collect();
        let expected_keys: Vec<&String> = expected.as_object().unwrap().keys().collect();
        assert_eq!(
            keys, expected_keys,
            "key order follows the reference route hop"
        );
    }

    #[test]
    fn sglang_dialect_sends_an_escaped_regex() {
        let body = request_body(&route_request(), RouteConstraint::Regex);
        assert_eq!(body["regex"], "(L0|L1|L2|L3)");
        assert!(body.get("structured_outputs").is_none());
        let odd = ["a.b", "c|d", "(e)"].map(String::from);
        assert_eq!(choice_regex(&odd), r"(a\.b|c\|d|\(e\))");
    }

    #[test]
    fn answer_body_sends_only_what_is_set() {
        let mut assistant = ChatMessage::assistant("");
        assistant.reasoning = Some("think".into());
        assistant.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "read_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        }];
        let mut req = ChatRequest::new(
            "L2",
            vec![
                ChatMessage::system("sys"),
                ChatMessage::user("hi"),
                assistant,
                ChatMessage::tool_result("call_1", "contents"),
            ],
            Hop::Answer,
        );
        req.tools = vec![ToolSpec {
            name: "read_file".into(),
            description: "Reads".into(),
            parameters: json!({"type": "object"}),
        }];
        req.tool_choice = Some("read_file".into());
        req.parallel_tool_calls = Some(false);
        req.sampling = Sampling {
            temperature: Some(0.7),
            top_p: Some(0.95),
            top_k: Some(20),
            seed: Some(7),
            stop: vec!["END".into()],
        };
        req.max_tokens = Some(4096);
        req.enable_thinking = Some(true);
        req.reasoning_effort = Some(ReasoningEffort::High);
        let body = request_body(&req, RouteConstraint::Choice);
        assert_eq!(
            body,
            json!({
                "model": "L2",
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "", "reasoning_content": "think",
                     "tool_calls": [{"id": "call_1", "type": "function",
                                     "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]},
                    {"role": "tool", "content": "contents", "tool_call_id": "call_1"}
                ],
                "tools": [{"type": "function", "function": {"name": "read_file", "description": "Reads", "parameters": {"type": "object"}}}],
                "tool_choice": {"type": "function", "function": {"name": "read_file"}},
                "parallel_tool_calls": false,
                "max_tokens": 4096,
                "temperature": 0.7,
                "top_p": 0.95,
                "top_k": 20,
                "seed": 7,
                "stream": true,
                "stream_options": {"include_usage": true},
                "stop": ["END"],
                "chat_template_kwargs": {"enable_thinking": true},
                "reasoning_effort": "high"
            })
        );
        let plain = request_body(
            &ChatRequest::new("L1", vec![ChatMessage::user("x")], Hop::Answer),
            RouteConstraint::Choice,
        );
        assert_eq!(
            plain,
            json!({"model": "L1", "messages": [{"role": "user", "content": "x"}], "stream": true,
                   "stream_options": {"include_usage": true}})
        );
    }

    #[test]
    fn completion_body_with_null_content_keeps_reasoning_apart() {
        let body = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": null, "reasoning_content": "L2"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 4}}});
        let parsed = parse_completion(&body).unwrap();
        assert_eq!(parsed.message.content, "");
        assert_eq!(parsed.message.reasoning.as_deref(), Some("L2"));
        assert_eq!(parsed.finish_reason, FinishReason::Stop);
        assert_eq!(
            parsed.usage,
            Some(TokenUsage {
                prompt_tokens: 10,
                completion_tokens: 1,
                cached_tokens: Some(4),
                estimated: false,
            })
        );
    }

    #[test]
    fn completion_with_tool_calls_forces_the_finish() {
        let body = json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}}]});
        let parsed = parse_completion(&body).unwrap();
        assert_eq!(parsed.message.content, "a b");
        assert_eq!(parsed.finish_reason, FinishReason::ToolCalls);
        assert_eq!(parsed.message.tool_calls[0].arguments, "{\"x\":1}");
        let cut = json!({"choices": [{"index": 0, "finish_reason": "length",
            "message": {"content": "", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{"}}]}}]});
        assert_eq!(
            parse_completion(&cut).unwrap().finish_reason,
            FinishReason::Length
        );
    }

    #[test]
    fn bad_completion_bodies_say_what_is_missing() {
        assert_eq!(parse_completion(&json!({})), Err(WireError::NoChoices));
        assert!(
            parse_completion(&json!({}))
                .unwrap_err()
                .to_string()
                .contains("choices")
        );
        let no_finish =
            json!({"choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": null}]});
        assert!(
            parse_completion(&no_finish)
                .unwrap_err()
                .to_string()
                .contains("truncated")
        );
        let nameless = json!({"choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]}}]});
        assert_eq!(
            parse_completion(&nameless).map(|_| ()),
            Err(WireError::UnnamedToolCall { position: 0 })
        );
        assert_eq!(
            WireError::UnnamedToolCall { position: 0 }.to_string(),
            "tool call #0 has no function name"
        );
    }

    #[test]
    fn models_list() {
        let body = json!({"data": [{"id": "L0", "max_model_len": 262144}, {"id": "other"}]});
        let models = parse_models(&body).unwrap();
        assert_eq!(models[0].context_window, Some(262144));
        assert_eq!(models[1].id, "other");
        assert_eq!(models[1].context_window, None);
        assert_eq!(
            parse_models(&json!({"data": [{}]})),
            Err(WireError::ModelWithoutId { position: 0 })
        );
    }
}
