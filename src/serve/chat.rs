//! `POST /v1/chat/completions`: the OpenAI request read into a turn, and the turn's events
//! written back as one JSON body or as a stream of `chat.completion.chunk` events.

use serde_json::{Map, Value, json};

use super::errors::ApiError;
use crate::protocol::{
    ChatMessage, ReasoningEffort, Role, RouteDecision, ToolCall, ToolSpec, TurnDone, TurnOptions,
    TurnRouted,
};

/// What a Chat Completions request asks for, checked.
#[derive(Debug, Clone)]
pub struct ChatBody {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub options: TurnOptions,
    pub stream: bool,
}

/// The text of a message's `content` on either API: a string, or text parts (`text`,
/// `input_text`, `output_text`) joined with "\n" as vLLM joins them for a chat template. Chat
/// Completions and Responses read one message the same way through this one function.
pub(super) fn text_of(content: &Value, param: &str) -> Result<String, ApiError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            for p in parts {
                let kind = p.get("type").and_then(Value::as_str).unwrap_or("text");
                match (kind, p.get("text").and_then(Value::as_str)) {
                    ("text" | "input_text" | "output_text", Some(t)) => texts.push(t),
                    _ => {
                        return Err(ApiError::bad_request(
                            "unsupported_content",
                            format!("only text content parts are supported (got '{kind}')"),
                        )
                        .param(param));
                    }
                }
            }
            Ok(texts.join("\n"))
        }
        _ => Err(
            ApiError::bad_request("invalid_messages", "content must be a string or parts")
                .param(param),
        ),
    }
}

fn message(i: usize, m: &Value) -> Result<ChatMessage, ApiError> {
    let param = format!("messages[{i}]");
    let obj = m.as_object().ok_or_else(|| {
        ApiError::bad_request("invalid_messages", "each message must be an object").param(&param)
    })?;
    let role = obj.get("role").and_then(Value::as_str).unwrap_or("");
    let content = text_of(obj.get("content").unwrap_or(&Value::Null), &param)?;
    let mut out = match role {
        "system" | "developer" => ChatMessage::system(content),
        "user" => ChatMessage::user(content),
        "assistant" => ChatMessage::assistant(content),
        "tool" => {
            let id = obj
                .get("tool_call_id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    ApiError::bad_request("invalid_messages", "a tool message needs tool_call_id")
                        .param(&param)
                })?;
            ChatMessage::tool_result(id, content)
        }
        other => {
            return Err(ApiError::bad_request(
                "invalid_messages",
                format!("unknown role '{other}'"),
            )
            .param(&param));
        }
    };
    if out.role == Role::Assistant {
        out.reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_str))
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        if let Some(calls) = obj.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                let f = c.get("function");
                let id = c.get("id").and_then(Value::as_str);
                let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str);
                match (id, name, args) {
                    (Some(id), Some(name), Some(args)) => out.tool_calls.push(ToolCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: args.to_string(),
                    }),
                    _ => {
                        return Err(ApiError::bad_request(
                            "invalid_messages",
                            "a tool call needs id, function.name and string function.arguments",
                        )
                        .param(&param));
                    }
                }
            }
        }
    }
    Ok(out)
}

fn tools(v: Option<&Value>) -> Result<Vec<ToolSpec>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let list = v.as_array().ok_or_else(|| {
        ApiError::bad_request("invalid_request", "tools must be an array").param("tools")
    })?;
    list.iter()
        .map(|t| {
            let f = t.get("function").filter(|_| {
                t.get("type").and_then(Value::as_str).unwrap_or("function") == "function"
            });
            let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
            match (f, name) {
                (Some(f), Some(name)) if !name.is_empty() => {
                    let parameters = f
                        .get("parameters")
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                    if !parameters.is_object() {
                        return Err(ApiError::bad_request(
                            "invalid_request",
                            format!("tool '{name}': parameters must be an object"),
                        )
                        .param("tools"));
                    }
                    Ok(ToolSpec {
                        name: name.to_string(),
                        description: f
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        parameters,
                    })
                }
                _ => Err(ApiError::bad_request(
                    "invalid_request",
                    "only function tools with a name are supported",
                )
                .param("tools")),
            }
        })
        .collect()
}

/// A reasoning effort as OpenAI clients spell it (`minimal` and the max-class names included).
pub fn reasoning(v: Option<&Value>, param: &str) -> Result<Option<ReasoningEffort>, ApiError> {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match v.as_str() {
        Some("none" | "minimal") => Ok(Some(ReasoningEffort::None)),
        Some("low") => Ok(Some(ReasoningEffort::Low)),
        Some("medium") => Ok(Some(ReasoningEffort::Medium)),
        Some("high" | "xhigh" | "max" | "xmax" | "ultra" | "ultracode") => {
            Ok(Some(ReasoningEffort::High))
        }
        _ => Err(ApiError::bad_request(
            "invalid_request",
            format!("{param} must be none, minimal, low, medium or high"),
        )
        .param(param)),
    }
}

fn number(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_f64().map(Some).ok_or_else(|| {
            ApiError::bad_request("invalid_request", format!("{key} must be a number")).param(key)
        }),
    }
}

fn boolean(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad_request(
            "invalid_request",
            format!("{key} must be a boolean"),
        )
        .param(key)),
    }
}

/// The answer options shared by both APIs.
pub fn options(
    obj: &Map<String, Value>,
    max_tokens_keys: &[&str],
) -> Result<TurnOptions, ApiError> {
    let max_tokens = max_tokens_keys
        .iter()
        .find_map(|k| obj.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)));
    let max_tokens = match max_tokens {
        None => None,
        Some((k, v)) => Some(
            v.as_u64()
                .filter(|n| *n >= 1)
                .map(|n| n.min(u32::MAX as u64) as u32)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_request",
                        format!("{k} must be a positive integer"),
                    )
                    .param(k)
                })?,
        ),
    };
    let stop = match obj.get("stop") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "stop must be a string or a list",
            )
            .param("stop"));
        }
    };
    let tool_choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if ["auto", "none", "required"].contains(&s.as_str()) => {
            Some(s.clone())
        }
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .or_else(|| o.get("name"))
                .and_then(Value::as_str);
            match name {
                Some(n) => Some(n.to_string()),
                None => {
                    return Err(ApiError::bad_request(
                        "invalid_request",
                        "tool_choice names no function",
                    )
                    .param("tool_choice"));
                }
            }
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "tool_choice must be none, auto, required or a function",
            )
            .param("tool_choice"));
        }
    };
    Ok(TurnOptions {
        temperature: number(obj, "temperature")?.map(|t| t as f32),
        top_p: number(obj, "top_p")?.map(|t| t as f32),
        seed: obj.get("seed").and_then(Value::as_u64),
        stop,
        tool_choice,
        parallel_tool_calls: boolean(obj, "parallel_tool_calls")?,
        max_tokens,
        reasoning: None,
        extra: Map::new(),
    })
}

/// Chat Completions fields sent on to the answer hop as the client gave them: structured
/// output, penalties and the sampling extras vLLM and SGLang take.
pub const FORWARDED: [&str; 7] = [
    "response_format",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "top_k",
    "min_p",
    "repetition_penalty",
];

/// The [`FORWARDED`] fields of a Chat body, each checked for its JSON type. Fields whose
/// answer this server cannot give back are refused by name rather than dropped: `n` above 1
/// (a MoL turn makes one answer) and `logprobs` (the loop keeps no token log-probabilities).
pub fn forwarded(obj: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    let unsupported = |param: &str, why: &str| {
        Err(ApiError::bad_request("unsupported_parameter", why.to_string()).param(param))
    };
    match obj.get("n") {
        None | Some(Value::Null) => {}
        Some(v) if v.as_u64() == Some(1) => {}
        Some(_) => return unsupported("n", "n must be 1: a MoL turn makes one answer"),
    }
    if obj
        .get("logprobs")
        .is_some_and(|v| v.as_bool() == Some(true))
    {
        return unsupported(
            "logprobs",
            "logprobs are not supported: the MoL loop keeps no token log-probabilities",
        );
    }
    if obj
        .get("top_logprobs")
        .is_some_and(|v| !v.is_null() && v.as_u64() != Some(0))
    {
        return unsupported("top_logprobs", "top_logprobs are not supported");
    }
    let mut out = Map::new();
    for key in FORWARDED {
        let Some(value) = obj.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let fits = match key {
            "response_format" | "logit_bias" => value.is_object(),
            "top_k" => value.is_i64(),
            _ => value.is_number(),
        };
        if !fits {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("{key} has the wrong type"),
            )
            .param(key));
        }
        out.insert(key.to_string(), value.clone());
    }
    Ok(out)
}

/// Reads and checks a Chat Completions request body.
pub fn parse(body: &Map<String, Value>, served_model: &str) -> Result<ChatBody, ApiError> {
    match body.get("model").and_then(Value::as_str) {
        Some(m) if m == served_model => {}
        other => {
            return Err(ApiError::new(
                axum::http::StatusCode::NOT_FOUND,
                "model_not_found",
                format!(
                    "the model '{}' does not exist; this server serves '{served_model}'",
                    other.unwrap_or("")
                ),
            )
            .param("model"));
        }
    }
    let list = body
        .get("messages")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("invalid_messages", "messages must be a non-empty array")
                .param("messages")
        })?;
    let messages = list
        .iter()
        .enumerate()
        .map(|(i, m)| message(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    let mut options = options(body, &["max_completion_tokens", "max_tokens"])?;
    options.reasoning = reasoning(body.get("reasoning_effort"), "reasoning_effort")?;
    options.extra = forwarded(body)?;
    let tools = tools(body.get("tools"))?;
    if options.tool_choice.as_deref() == Some("required") && tools.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "tool_choice 'required' without tools",
        )
        .param("tool_choice"));
    }
    Ok(ChatBody {
        messages,
        tools,
        options,
        stream: boolean(body, "stream")?.unwrap_or(false),
    })
}

/// `metadata.mol_decision` as the reference names its decisions.
pub fn decision_name(d: RouteDecision) -> &'static str {
    match d {
        RouteDecision::Model => "pure_model_route",
        RouteDecision::Sticky => "sticky_tool_continuation",
        RouteDecision::FollowUp => "sticky_follow_up",
        RouteDecision::Fallback => "fallback",
        RouteDecision::Pinned => "pinned",
        RouteDecision::None => "none",
    }
}

/// The `metadata` object of a response (`done` once the answer is in).
pub fn metadata(routed: &TurnRouted, done: Option<&TurnDone>) -> Value {
    let mut m = json!({
        "mol_selected_route": routed.expert.label(),
        "mol_decision": decision_name(routed.decision),
        "mol_convo_completed": routed.completed_tasks,
        "mol_conversation_id": routed.conversation_id,
    });
    if let Some(reason) = &routed.fallback_reason {
        m["mol_fallback_reason"] = json!(reason);
    }
    if let Some(done) = done {
        m["mol_pending_tool_route"] = json!(done.pending_tool_expert.map(|e| e.label()));
        m["mol_summary_recorded"] = json!(done.summary_started);
        m["mol_cached_tokens"] = json!(done.usage.cached_tokens.unwrap_or(0));
        m["mol_prompt_tokens"] = json!(done.usage.prompt_tokens);
    }
    m
}

pub fn usage_json(done: &TurnDone) -> Value {
    let u = &done.usage;
    let mut usage = json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens.saturating_add(u.completion_tokens),
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens.unwrap_or(0)},
    });
    mark_estimated(&mut usage, u);
    usage
}

/// Adds `"estimated": true` to a usage object whose counts are baton's own estimate (the
/// engine reported none): a client must not bill or calibrate on them as exact. Exact counts
/// keep OpenAI's shape unchanged.
pub fn mark_estimated(usage: &mut Value, counts: &crate::protocol::TokenUsage) {
    if counts.estimated {
        usage["estimated"] = json!(true);
    }
}

fn tool_calls_json(calls: &[ToolCall]) -> Value {
    Value::Array(
        calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            })
            .collect(),
    )
}

/// The non-stream response body.
pub fn completion_body(
    id: &str,
    model: &str,
    created: i64,
    routed: &TurnRouted,
    done: &TurnDone,
) -> Value {
    let m = &done.message;
    let mut message = json!({
        "role": "assistant",
        "content": if m.content.is_empty() && !m.tool_calls.is_empty() { Value::Null } else { json!(m.content) },
    });
    if let Some(r) = &m.reasoning {
        message["reasoning_content"] = json!(r);
    }
    if !m.tool_calls.is_empty() {
        message["tool_calls"] = tool_calls_json(&m.tool_calls);
    }
    json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": message,
            "finish_reason": done.finish.as_str(),
            "logprobs": null,
        }],
        "usage": usage_json(done),
        "metadata": metadata(routed, Some(done)),
    })
}

/// One `chat.completion.chunk`.
pub fn chunk(id: &str, model: &str, created: i64, delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": null}],
    })
}

/// The tool-call delta of a finished answer: every call whole, with its index.
pub fn tool_calls_delta(calls: &[ToolCall]) -> Value {
    let list: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            json!({
                "index": i,
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            })
        })
        .collect();
    json!({"tool_calls": list})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_request_with_history_and_tools_parses() {
        let b = parse(
            &body(json!({
                "model": "M",
                "messages": [
                    {"role": "developer", "content": "be brief"},
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
                ],
                "tools": [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}],
                "max_tokens": 50, "stream": true, "reasoning_effort": "minimal", "stop": "END"
            })),
            "M",
        )
        .unwrap();
        assert_eq!(b.messages.len(), 4);
        assert_eq!(b.messages[0].role, Role::System);
        assert_eq!(b.messages[2].tool_calls[0].name, "ls");
        assert_eq!(b.messages[3].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(b.tools[0].name, "ls");
        assert_eq!(b.options.max_tokens, Some(50));
        assert_eq!(b.options.reasoning, Some(ReasoningEffort::None));
        assert_eq!(b.options.stop, vec!["END".to_string()]);
        assert!(b.stream);
    }

    #[test]
    fn bad_requests_get_codes_a_client_can_match() {
        let code = |v: Value| parse(&body(v), "M").unwrap_err().code;
        assert_eq!(
            code(json!({"model": "L2", "messages": []})),
            "model_not_found"
        );
        assert_eq!(
            code(json!({"model": "M", "messages": []})),
            "invalid_messages"
        );
        assert_eq!(
            code(
                json!({"model": "M", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})
            ),
            "unsupported_content"
        );
        assert_eq!(
            code(
                json!({"model": "M", "messages": [{"role": "user", "content": "x"}], "stream": "yes"})
            ),
            "invalid_request"
        );
        assert_eq!(
            code(
                json!({"model": "M", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search"}]})
            ),
            "invalid_request"
        );
        assert_eq!(
            code(
                json!({"model": "M", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "lots"})
            ),
            "invalid_request"
        );
    }
}
