//! `POST /v1/responses`: the Responses API over the same turns. `previous_response_id` forks
//! the stored state of that response (a chain and a fork are the same operation); without
//! one, the input is the whole history and the conversation is found from it, as on the Chat
//! path (codex and other stateless clients). Function tools only; text input only.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

use super::admission::Admitted;
use super::relay::{Frames, Relay};
use super::{AppState, next_event, now_secs, with_conversation};
use crate::protocol::{TurnEvent, TurnHandle, TurnInput};
use serde_json::{Map, Value, json};

use super::chat;
use super::errors::ApiError;
use crate::protocol::{
    ChatMessage, Role, ToolCall, ToolSpec, TurnDone, TurnFinish, TurnOptions, TurnRouted,
};

/// A checked Responses request.
#[derive(Debug, Clone)]
pub struct ResponsesBody {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// Tools of kinds this server cannot offer the model, by `type:name`.
    pub dropped_tools: Vec<String>,
    /// The tools as the client sent them, echoed in the response.
    pub tools_json: Value,
    pub tool_choice_json: Value,
    pub options: TurnOptions,
    pub stream: bool,
    pub store: bool,
    pub previous: Option<String>,
    /// `reasoning.summary` asked for one (`auto`, `concise`, `detailed`): the model's
    /// reasoning is also sent as the reasoning item's summary, which clients such as Codex
    /// show where they do not show raw reasoning.
    pub reasoning_summary: bool,
}

/// The input items as chat messages: assistant text and function calls in a row become one
/// assistant message, function call outputs tool messages; reasoning items are dropped (the
/// stored state keeps the model's own).
fn input_messages(body: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out: Vec<ChatMessage> = Vec::new();
    if let Some(instructions) = body.get("instructions").and_then(Value::as_str)
        && !instructions.is_empty()
    {
        out.push(ChatMessage::system(instructions));
    }
    let items = match body.get("input") {
        Some(Value::String(s)) => {
            out.push(ChatMessage::user(s.clone()));
            return Ok(out);
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        _ => {
            return Err(ApiError::bad_request(
                "invalid_input",
                "input must be a string or a non-empty list",
            )
            .param("input"));
        }
    };
    let mut open_assistant: Option<ChatMessage> = None;
    let flush = |open: &mut Option<ChatMessage>, out: &mut Vec<ChatMessage>| {
        if let Some(m) = open.take() {
            out.push(m);
        }
    };
    for (i, item) in items.iter().enumerate() {
        let param = format!("input[{i}]");
        let kind =
            item.get("type")
                .and_then(Value::as_str)
                .unwrap_or(if item.get("role").is_some() {
                    "message"
                } else {
                    ""
                });
        match kind {
            "message" => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let text =
                    super::chat::text_of(item.get("content").unwrap_or(&Value::Null), &param)?;
                match role {
                    "assistant" => {
                        let m = open_assistant.get_or_insert_with(|| ChatMessage::assistant(""));
                        m.content.push_str(&text);
                    }
                    "user" | "system" | "developer" => {
                        flush(&mut open_assistant, &mut out);
                        out.push(if role == "user" {
                            ChatMessage::user(text)
                        } else {
                            ChatMessage::system(text)
                        });
                    }
                    _ => {
                        return Err(ApiError::bad_request(
                            "invalid_input",
                            format!("unknown role '{role}'"),
                        )
                        .param(&param));
                    }
                }
            }
            "function_call" => {
                let call_id = item.get("call_id").and_then(Value::as_str);
                let name = item.get("name").and_then(Value::as_str);
                let arguments = item.get("arguments").and_then(Value::as_str);
                let (Some(id), Some(name), Some(arguments)) = (call_id, name, arguments) else {
                    return Err(ApiError::bad_request(
                        "invalid_input",
                        "a function_call needs call_id, name and string arguments",
                    )
                    .param(&param));
                };
                open_assistant
                    .get_or_insert_with(|| ChatMessage::assistant(""))
                    .tool_calls
                    .push(ToolCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: arguments.to_string(),
                    });
            }
            "function_call_output" => {
                flush(&mut open_assistant, &mut out);
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                let Some(call_id) = call_id else {
                    return Err(ApiError::bad_request(
                        "invalid_input",
                        "a function_call_output needs call_id",
                    )
                    .param(&param));
                };
                let output = match item.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => super::chat::text_of(v, &param)?,
                    _ => String::new(),
                };
                out.push(ChatMessage::tool_result(call_id, output));
            }
            "reasoning" => {}
            other => {
                return Err(ApiError::bad_request(
                    "unsupported_parameter",
                    format!("input items of type '{other}' are not supported"),
                )
                .param(&param));
            }
        }
    }
    flush(&mut open_assistant, &mut out);
    // A system head that came after other items is not a head: keep it where the chat path
    // expects one, first.
    Ok(out)
}

/// The function tools of a request, and what was left out: hosted tools (`web_search`, …) run
/// on OpenAI's side and namespaced tool groups have no Chat Completions form, so the model
/// behind this server cannot be offered them. They are named in `metadata.mol_dropped_tools`
/// rather than failing clients (codex) that always send them.
fn tools(v: Option<&Value>) -> Result<(Vec<ToolSpec>, Vec<String>), ApiError> {
    let Some(list) = v.filter(|v| !v.is_null()) else {
        return Ok((Vec::new(), Vec::new()));
    };
    let list = list.as_array().ok_or_else(|| {
        ApiError::bad_request("invalid_request", "tools must be a list").param("tools")
    })?;
    let mut specs = Vec::new();
    let mut dropped = Vec::new();
    for t in list {
        let kind = t.get("type").and_then(Value::as_str).unwrap_or("");
        let name = t
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty());
        match (kind, name) {
            ("function", Some(name)) => {
                let parameters = t
                    .get("parameters")
                    .filter(|p| !p.is_null())
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
                if !parameters.is_object() {
                    return Err(ApiError::bad_request(
                        "invalid_request",
                        format!("tool '{name}': parameters must be an object"),
                    )
                    .param("tools"));
                }
                specs.push(ToolSpec {
                    name: name.to_string(),
                    description: t
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                    parameters,
                });
            }
            ("function", None) => {
                return Err(ApiError::bad_request(
                    "invalid_request",
                    "a function tool needs a name",
                )
                .param("tools"));
            }
            (kind, name) => dropped.push(match name {
                Some(n) => format!("{kind}:{n}"),
                None => kind.to_string(),
            }),
        }
    }
    Ok((specs, dropped))
}

fn flag(body: &Map<String, Value>, key: &str, default: bool) -> Result<bool, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::bad_request(
            "invalid_request",
            format!("{key} must be a boolean"),
        )
        .param(key)),
    }
}

pub fn parse(body: &Map<String, Value>, served_model: &str) -> Result<ResponsesBody, ApiError> {
    if let Some(m) = body.get("model").and_then(Value::as_str)
        && m != served_model
    {
        return Err(ApiError::new(
            axum::http::StatusCode::NOT_FOUND,
            "model_not_found",
            format!("the model '{m}' does not exist; this server serves '{served_model}'"),
        )
        .param("model"));
    }
    // Encrypted reasoning is asked for by stateless clients (codex); this server keeps the
    // model's reasoning itself and returns none, which such clients accept. Anything else
    // `include` names would be a silent gap, so it is refused.
    if let Some(include) = body.get("include").filter(|v| !v.is_null()) {
        let ok = include.as_array().is_some_and(|list| {
            list.iter()
                .all(|v| v.as_str() == Some("reasoning.encrypted_content"))
        });
        if !ok {
            return Err(ApiError::bad_request(
                "unsupported_parameter",
                "include supports only reasoning.encrypted_content",
            )
            .param("include"));
        }
    }
    let mut options = chat::options(body, &["max_output_tokens"])?;
    options.reasoning = chat::reasoning(
        body.get("reasoning").and_then(|r| r.get("effort")),
        "reasoning.effort",
    )?;
    if let Some(format) = response_format(body)? {
        options.extra.insert("response_format".into(), format);
    }
    if body
        .get("top_logprobs")
        .is_some_and(|v| !v.is_null() && v.as_u64() != Some(0))
    {
        return Err(ApiError::bad_request(
            "unsupported_parameter",
            "top_logprobs are not supported: the MoL loop keeps no token log-probabilities",
        )
        .param("top_logprobs"));
    }
    let previous = match body.get("previous_response_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                "previous_response_id must be a string",
            )
            .param("previous_response_id"));
        }
    };
    let (tools, dropped_tools) = tools(body.get("tools"))?;
    Ok(ResponsesBody {
        messages: input_messages(body)?,
        tools,
        dropped_tools,
        tools_json: body.get("tools").cloned().unwrap_or_else(|| json!([])),
        tool_choice_json: body
            .get("tool_choice")
            .cloned()
            .unwrap_or_else(|| json!("auto")),
        options,
        stream: flag(body, "stream", false)?,
        store: flag(body, "store", true)?,
        previous,
        reasoning_summary: body
            .get("reasoning")
            .and_then(|r| r.get("summary"))
            .and_then(Value::as_str)
            .is_some_and(|s| matches!(s, "auto" | "concise" | "detailed")),
    })
}

/// `text.format` as the Chat Completions `response_format` the answer hop carries: `None` for
/// plain text.
fn response_format(body: &Map<String, Value>) -> Result<Option<Value>, ApiError> {
    let Some(format) = body
        .get("text")
        .and_then(|t| t.get("format"))
        .filter(|f| !f.is_null())
    else {
        return Ok(None);
    };
    let bad = |why: &str| {
        Err(ApiError::bad_request("invalid_request", why.to_string()).param("text.format"))
    };
    match format.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let Some(schema) = format.get("schema").filter(|s| s.is_object()) else {
                return bad("text.format json_schema needs a schema object");
            };
            let mut spec = Map::new();
            spec.insert(
                "name".into(),
                format
                    .get("name")
                    .cloned()
                    .unwrap_or_else(|| json!("response")),
            );
            spec.insert("schema".into(), schema.clone());
            for key in ["strict", "description"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    spec.insert(key.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": spec})))
        }
        _ => bad("text.format type must be text, json_object or json_schema"),
    }
}

/// Ids of the output items, derived from the response id so a response reads the same when
/// streamed and when returned whole.
pub struct ItemIds {
    pub reasoning: String,
    pub message: String,
}

impl ItemIds {
    pub fn new(response_id: &str) -> Self {
        let tail = response_id.trim_start_matches("resp_");
        ItemIds {
            reasoning: format!("rs_{tail}"),
            message: format!("msg_{tail}"),
        }
    }

    pub fn call(&self, index: usize) -> String {
        format!("fc_{}_{index}", self.message.trim_start_matches("msg_"))
    }
}

pub fn reasoning_item(id: &str, text: &str, done: bool, summary: bool) -> Value {
    let summary = if done && summary {
        json!([{"type": "summary_text", "text": text}])
    } else {
        json!([])
    };
    json!({
        "type": "reasoning",
        "id": id,
        "summary": summary,
        "content": if done { json!([{"type": "reasoning_text", "text": text}]) } else { json!([]) },
        "status": if done { "completed" } else { "in_progress" },
    })
}

pub fn message_item(id: &str, text: Option<&str>) -> Value {
    json!({
        "type": "message",
        "id": id,
        "status": if text.is_some() { "completed" } else { "in_progress" },
        "role": "assistant",
        "content": match text {
            Some(t) => json!([{"type": "output_text", "text": t, "annotations": []}]),
            None => json!([]),
        },
    })
}

pub fn call_item(id: &str, call: &ToolCall, done: bool) -> Value {
    json!({
        "type": "function_call",
        "id": id,
        "call_id": call.id,
        "name": call.name,
        "arguments": if done { call.arguments.as_str() } else { "" },
        "status": if done { "completed" } else { "in_progress" },
    })
}

/// The output items of a finished answer.
pub fn output(ids: &ItemIds, message: &ChatMessage, summary: bool) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(r) = message.reasoning.as_deref().filter(|r| !r.is_empty()) {
        items.push(reasoning_item(&ids.reasoning, r, true, summary));
    }
    if !message.content.is_empty() || message.tool_calls.is_empty() {
        items.push(message_item(&ids.message, Some(&message.content)));
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        items.push(call_item(&ids.call(i), call, true));
    }
    items
}

/// `metadata` with string values, as the Responses API allows.
fn metadata(routed: &TurnRouted, done: Option<&TurnDone>) -> Value {
    let m = chat::metadata(routed, done);
    let Value::Object(map) = m else {
        return json!({});
    };
    Value::Object(
        map.into_iter()
            .map(|(k, v)| {
                let s = match v {
                    Value::String(s) => s,
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                (k, Value::String(s))
            })
            .collect(),
    )
}

pub struct ResponseShape<'a> {
    pub id: &'a str,
    pub created_at: i64,
    pub model: &'a str,
    pub request: &'a ResponsesBody,
}

/// The response object; `done` is `None` while it is in progress.
pub fn response_object(
    shape: &ResponseShape<'_>,
    routed: Option<&TurnRouted>,
    done: Option<&TurnDone>,
) -> Value {
    let ids = ItemIds::new(shape.id);
    let (status, incomplete) = match done.map(|d| d.finish) {
        None => ("in_progress", Value::Null),
        Some(TurnFinish::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some(TurnFinish::ContentFilter) => ("incomplete", json!({"reason": "content_filter"})),
        Some(_) => ("completed", Value::Null),
    };
    let usage = done.map(|d| {
        let u = &d.usage;
        let mut usage = json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": u.cached_tokens.unwrap_or(0)},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens.saturating_add(u.completion_tokens),
        });
        super::chat::mark_estimated(&mut usage, u);
        usage
    });
    let mut meta = routed
        .map(|r| metadata(r, done))
        .unwrap_or_else(|| json!({}));
    if !shape.request.dropped_tools.is_empty() {
        meta["mol_dropped_tools"] = json!(shape.request.dropped_tools.join(","));
    }
    json!({
        "id": shape.id,
        "object": "response",
        "created_at": shape.created_at,
        "model": shape.model,
        "status": status,
        "error": null,
        "incomplete_details": incomplete,
        "previous_response_id": shape.request.previous,
        "output": done
            .map(|d| output(&ids, &d.message, shape.request.reasoning_summary))
            .unwrap_or_default(),
        "parallel_tool_calls": shape.request.options.parallel_tool_calls.unwrap_or(true),
        "tool_choice": shape.request.tool_choice_json,
        "tools": shape.request.tools_json,
        "store": shape.request.store,
        "usage": usage,
        "metadata": meta,
    })
}

/// The role of the last message, for the input check before a turn starts.
pub fn ends_in_user_or_tool(messages: &[ChatMessage]) -> bool {
    messages
        .last()
        .is_some_and(|m| matches!(m.role, Role::User | Role::Tool))
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

const PATH: &str = "/v1/responses";

fn new_response_id() -> String {
    format!("resp_{}", uuid::Uuid::now_v7().simple())
}

pub(super) async fn handle(
    state: &Arc<AppState>,
    headers: &HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
    started: Instant,
) -> Result<Response, ApiError> {
    let client = super::authorize(state, headers)?;
    let conversation = super::conversation_header(headers)?;
    // Admitted first: the objects a body becomes are bounded by the turns let in at once.
    let admitted = state.admission.enter().await?;
    let mut request = super::read_request(state, body, |b| parse(b, state.service.served_model()))?;
    if !ends_in_user_or_tool(&request.messages) {
        return Err(ApiError::bad_request(
            "invalid_input",
            "the input must end with a user message or function call outputs",
        )
        .param("input"));
    }
    let id = new_response_id();
    let input = TurnInput {
        conversation,
        client,
        // Taken, not copied: only the turn reads the messages.
        messages: std::mem::take(&mut request.messages),
        tools: request.tools.clone(),
        options: request.options.clone(),
        fork_from: request.previous.clone(),
        snapshot_as: request.store.then(|| id.clone()),
    };
    let handle = state.service.start_turn(input).await?;
    let created_at = now_secs();
    if request.stream {
        Ok(stream(
            state.clone(),
            handle,
            admitted,
            started,
            id,
            created_at,
            request,
        ))
    } else {
        whole(state, handle, admitted, started, &id, created_at, &request).await
    }
}

async fn whole(
    state: &AppState,
    mut handle: TurnHandle,
    admitted: Admitted,
    started: Instant,
    id: &str,
    created_at: i64,
    request: &ResponsesBody,
) -> Result<Response, ApiError> {
    let mut routed = None;
    let done = loop {
        match next_event(&mut handle, state.idle_timeout).await? {
            TurnEvent::Routed(r) => routed = Some(r),
            TurnEvent::Text(_) | TurnEvent::Reasoning(_) => {}
            TurnEvent::Done(d) => break d,
            TurnEvent::Error(e) => return Err(e.into()),
        }
    };
    let shape = ResponseShape {
        id,
        created_at,
        model: state.service.served_model(),
        request,
    };
    let body = response_object(&shape, routed.as_ref(), Some(&done));
    let _ = handle.delivered.send(());
    drop(admitted);
    state.metrics.request(PATH, 200, started.elapsed());
    Ok(with_conversation(
        axum::Json(body).into_response(),
        &handle.conversation_id,
    ))
}

/// One Responses SSE stream while hyper pulls it.
struct EventStream {
    relay: Relay,
    request: ResponsesBody,
    id: String,
    created_at: i64,
    sequence: u64,
    routed: Option<TurnRouted>,
    next_index: usize,
    reasoning: Option<(usize, String)>,
    text: Option<(usize, String)>,
}

impl EventStream {
    fn shape(&self) -> ResponseShape<'_> {
        ResponseShape {
            id: &self.id,
            created_at: self.created_at,
            model: self.relay.state.service.served_model(),
            request: &self.request,
        }
    }

    fn emit(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        self.relay
            .frames
            .push_back(Bytes::from(format!("event: {kind}\ndata: {data}\n\n")));
    }

    /// Opens the output message (its item and its one text part), which text then extends.
    fn open_message(&mut self, ids: &ItemIds) {
        let index = self.next_index;
        self.next_index += 1;
        self.text = Some((index, String::new()));
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": message_item(&ids.message, None)}),
        );
        self.emit(
            "response.content_part.added",
            json!({"item_id": ids.message, "output_index": index, "content_index": 0,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
    }

    fn ids(&self) -> ItemIds {
        ItemIds::new(&self.id)
    }

    fn finish(&mut self, done: TurnDone) {
        let ids = self.ids();
        if let Some((index, text)) = self.reasoning.take() {
            let summary = self.request.reasoning_summary;
            self.emit(
                "response.reasoning_text.done",
                json!({"item_id": ids.reasoning, "output_index": index, "content_index": 0, "text": text}),
            );
            if summary {
                self.emit(
                    "response.reasoning_summary_text.done",
                    json!({"item_id": ids.reasoning, "output_index": index, "summary_index": 0, "text": text}),
                );
                self.emit(
                    "response.reasoning_summary_part.done",
                    json!({"item_id": ids.reasoning, "output_index": index, "summary_index": 0,
                           "part": {"type": "summary_text", "text": text}}),
                );
            }
            self.emit(
                "response.output_item.done",
                json!({"output_index": index, "item": reasoning_item(&ids.reasoning, &text, true, summary)}),
            );
        }
        let message = &done.message;
        if self.text.is_none() && message.tool_calls.is_empty() {
            // Nothing was said: the response still holds one (empty) message.
            self.open_message(&ids);
        }
        if let Some((index, text)) = self.text.take() {
            self.emit(
                "response.output_text.done",
                json!({"item_id": ids.message, "output_index": index, "content_index": 0, "text": text}),
            );
            self.emit(
                "response.content_part.done",
                json!({"item_id": ids.message, "output_index": index, "content_index": 0,
                       "part": {"type": "output_text", "text": text, "annotations": []}}),
            );
            self.emit(
                "response.output_item.done",
                json!({"output_index": index, "item": message_item(&ids.message, Some(&text))}),
            );
        }
        for (i, call) in message.tool_calls.iter().enumerate() {
            let index = self.next_index;
            self.next_index += 1;
            let item_id = ids.call(i);
            self.emit(
                "response.output_item.added",
                json!({"output_index": index, "item": call_item(&item_id, call, false)}),
            );
            self.emit(
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": index, "delta": call.arguments}),
            );
            self.emit(
                "response.function_call_arguments.done",
                json!({"item_id": item_id, "output_index": index, "arguments": call.arguments}),
            );
            self.emit(
                "response.output_item.done",
                json!({"output_index": index, "item": call_item(&item_id, call, true)}),
            );
        }
        let response = response_object(&self.shape(), self.routed.as_ref(), Some(&done));
        let kind = if response["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        self.emit(kind, json!({"response": response}));
        self.relay.finished = Some(true);
    }
}

impl Frames for EventStream {
    fn relay(&mut self) -> &mut Relay {
        &mut self.relay
    }

    fn on_event(&mut self, ev: TurnEvent) {
        match ev {
            TurnEvent::Routed(r) => {
                self.routed = Some(r);
                let response = response_object(&self.shape(), self.routed.as_ref(), None);
                self.emit("response.created", json!({"response": response.clone()}));
                self.emit("response.in_progress", json!({"response": response}));
            }
            TurnEvent::Reasoning(t) => {
                let ids = self.ids();
                if self.reasoning.is_none() {
                    let index = self.next_index;
                    self.next_index += 1;
                    self.reasoning = Some((index, String::new()));
                    self.emit(
                        "response.output_item.added",
                        json!({"output_index": index, "item": reasoning_item(&ids.reasoning, "", false, false)}),
                    );
                    if self.request.reasoning_summary {
                        self.emit(
                            "response.reasoning_summary_part.added",
                            json!({"item_id": ids.reasoning, "output_index": index, "summary_index": 0,
                                   "part": {"type": "summary_text", "text": ""}}),
                        );
                    }
                }
                if let Some((index, text)) = &mut self.reasoning {
                    text.push_str(&t);
                    let index = *index;
                    self.emit(
                        "response.reasoning_text.delta",
                        json!({"item_id": ids.reasoning, "output_index": index, "content_index": 0, "delta": t}),
                    );
                    if self.request.reasoning_summary {
                        self.emit(
                            "response.reasoning_summary_text.delta",
                            json!({"item_id": ids.reasoning, "output_index": index, "summary_index": 0, "delta": t}),
                        );
                    }
                }
            }
            TurnEvent::Text(t) => {
                let ids = self.ids();
                if self.text.is_none() {
                    self.open_message(&ids);
                }
                if let Some((index, text)) = &mut self.text {
                    text.push_str(&t);
                    let index = *index;
                    self.emit(
                        "response.output_text.delta",
                        json!({"item_id": ids.message, "output_index": index, "content_index": 0, "delta": t}),
                    );
                }
            }
            TurnEvent::Done(done) => self.finish(done),
            TurnEvent::Error(e) => self.fail(e.into()),
        }
    }

    fn fail(&mut self, e: ApiError) {
        let mut response = response_object(&self.shape(), self.routed.as_ref(), None);
        response["status"] = json!("failed");
        response["error"] = json!({"code": e.code, "message": e.message});
        self.emit("response.failed", json!({"response": response}));
        self.relay.finished = Some(false);
    }
}

fn stream(
    state: Arc<AppState>,
    handle: TurnHandle,
    admitted: Admitted,
    started: Instant,
    id: String,
    created_at: i64,
    request: ResponsesBody,
) -> Response {
    let conversation = handle.conversation_id.clone();
    let s = EventStream {
        relay: Relay::new(state, handle, admitted, started, PATH),
        request,
        id,
        created_at,
        sequence: 0,
        routed: None,
        next_index: 0,
        reasoning: None,
        text: None,
    };
    super::relay::sse_response(s, &conversation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_items_become_the_chat_history() {
        let body = json!({
            "model": "M",
            "instructions": "be brief",
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "reasoning", "summary": []},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "let me look"}]},
                {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}
            ],
            "tools": [{"type": "function", "name": "ls", "parameters": {"type": "object"}}],
            "max_output_tokens": 100,
            "reasoning": {"effort": "low"}
        });
        let b = parse(body.as_object().unwrap(), "M").unwrap();
        let roles: Vec<Role> = b.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::Tool]
        );
        assert_eq!(b.messages[2].content, "let me look");
        assert_eq!(b.messages[2].tool_calls[0].id, "c1");
        assert_eq!(b.tools[0].name, "ls");
        assert_eq!(b.options.max_tokens, Some(100));
        assert!(b.store && !b.stream);
    }

    #[test]
    fn unsupported_input_is_refused_by_name() {
        let code = |v: Value| parse(v.as_object().unwrap(), "M").unwrap_err().code;
        assert_eq!(
            code(json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})),
            "unsupported_content"
        );
        assert_eq!(
            code(json!({"input": "x", "tools": [{"type": "function"}]})),
            "invalid_request"
        );
        let hosted = json!({"input": "x", "tools": [
            {"type": "web_search"},
            {"type": "namespace", "name": "agents", "tools": []},
            {"type": "function", "name": "ls"}
        ]});
        let b = parse(hosted.as_object().unwrap(), "M").unwrap();
        assert_eq!(b.tools.len(), 1);
        assert_eq!(b.dropped_tools, ["web_search", "namespace:agents"]);
        assert_eq!(code(json!({"input": []})), "invalid_input");
        assert_eq!(
            code(json!({"input": "x", "model": "other"})),
            "model_not_found"
        );
        assert_eq!(
            code(json!({"input": "x", "include": ["file_search_call.results"]})),
            "unsupported_parameter"
        );
    }
}
