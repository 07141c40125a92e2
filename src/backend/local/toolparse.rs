//! Splits generated text into answer text, `<think>…</think>` reasoning and
//! `<tool_call>{"name": …, "arguments": …}</tool_call>` blocks, incrementally: answer text and
//! reasoning stream as they arrive, a tool-call block is held until it closes and then comes out
//! as one call. A block whose JSON is broken still comes out as a call (never a panic, never
//! silently dropped) so the agent can tell the model what was wrong; see [`INVALID_TOOL_NAME`].
//!
//! Whitespace is shaped the way Qwen templates re-render an assistant turn (reasoning without
//! surrounding newlines, content without leading newlines after `</think>` and without trailing
//! whitespace before a call), so the next request's prompt repeats the generated tokens and the
//! engine's prefix cache hits.

use rand::Rng;
use serde_json::Value as Json;

use crate::protocol::ToolCall;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";

/// Name given to a tool call whose block names no tool (its JSON is broken or has no `name`).
/// No tool has this name, so the agent answers it as an unknown tool; the arguments carry the
/// block's raw text.
pub const INVALID_TOOL_NAME: &str = "invalid_tool_call";

/// One piece of parsed output.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputEvent {
    Text(String),
    Reasoning(String),
    /// A complete tool call. `error` says why the block was malformed; then `call.arguments`
    /// holds the block's raw text, which is not a valid JSON object.
    ToolCall {
        call: ToolCall,
        error: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Text,
    Reasoning,
    ToolCall,
}

/// The incremental parser for one generated message.
#[derive(Debug)]
pub struct OutputParser {
    mode: Mode,
    /// Text not yet handed out: a possible partial tag, held whitespace, or a call body.
    buf: String,
    /// Nothing but whitespace has been seen in this mode yet (drop leading newlines).
    at_mode_start: bool,
    /// A `<think>` may still open (only before any answer text).
    think_allowed: bool,
    calls: usize,
}

impl OutputParser {
    /// `starts_in_reasoning`: the prompt already opened `<think>` (some templates end the
    /// generation prompt with it), so output is reasoning until `</think>`.
    pub fn new(starts_in_reasoning: bool) -> Self {
        OutputParser {
            mode: if starts_in_reasoning {
                Mode::Reasoning
            } else {
                Mode::Text
            },
            buf: String::new(),
            at_mode_start: true,
            think_allowed: !starts_in_reasoning,
            calls: 0,
        }
    }

    /// Whether a rendered prompt leaves the model inside a `<think>` block.
    pub fn prompt_opens_reasoning(prompt: &str) -> bool {
        match (prompt.rfind(THINK_OPEN), prompt.rfind(THINK_CLOSE)) {
            (Some(open), Some(close)) => open > close && prompt[open..].trim() == THINK_OPEN,
            (Some(open), None) => prompt[open..].trim() == THINK_OPEN,
            _ => false,
        }
    }

    /// Feeds generated text; returns what can be handed out now.
    pub fn push(&mut self, text: &str) -> Vec<OutputEvent> {
        self.buf.push_str(text);
        let mut events = Vec::new();
        while self.step(&mut events) {}
        events
    }

    /// Ends the message: flushes held text and turns an unclosed call block into a call.
    pub fn finish(&mut self) -> Vec<OutputEvent> {
        let mut events = Vec::new();
        while self.step(&mut events) {}
        let rest = std::mem::take(&mut self.buf);
        match self.mode {
            // Trailing whitespace of the answer is dropped, as the template drops it; a held
            // partial tag that never completed is ordinary text.
            Mode::Text => {
                let rest = rest.trim_end().to_string();
                self.emit_text(rest, &mut events);
            }
            Mode::Reasoning => {
                let rest = rest.trim_end_matches('\n');
                if !rest.is_empty() {
                    events.push(OutputEvent::Reasoning(rest.to_string()));
                }
            }
            // The model stopped (eos or length) inside a block: parse what is there.
            Mode::ToolCall => events.push(self.tool_call(&rest)),
        }
        events
    }

    /// Handles one tag or one run of text in `buf`; false when it must wait for more text.
    fn step(&mut self, events: &mut Vec<OutputEvent>) -> bool {
        match self.mode {
            Mode::Text => {
                if self.at_mode_start {
                    let trimmed = self.buf.trim_start().len();
                    self.buf.drain(..self.buf.len() - trimmed);
                }
                let mut tags = vec![CALL_OPEN];
                if self.think_allowed {
                    tags.push(THINK_OPEN);
                }
                if let Some((at, tag)) = find_first(&self.buf, &tags) {
                    let before = self.buf[..at].trim_end().to_string();
                    self.emit_text(before, events);
                    self.buf.drain(..at + tag.len());
                    self.mode = if tag == CALL_OPEN {
                        Mode::ToolCall
                    } else {
                        Mode::Reasoning
                    };
                    self.think_allowed = false;
                    self.at_mode_start = true;
                    return true;
                }
                // Hold a possible partial tag and trailing whitespace (it may precede a call).
                let keep = partial_tag_len(&self.buf, &tags);
                let ready = self.buf[..self.buf.len() - keep].trim_end().len();
                let out: String = self.buf.drain(..ready).collect();
                self.emit_text(out, events);
                false
            }
            Mode::Reasoning => {
                if self.at_mode_start {
                    let trimmed = self.buf.trim_start_matches('\n').len();
                    self.buf.drain(..self.buf.len() - trimmed);
                }
                if let Some(at) = self.buf.find(THINK_CLOSE) {
                    let before = self.buf[..at].trim_end_matches('\n').to_string();
                    if !before.is_empty() {
                        events.push(OutputEvent::Reasoning(before));
                    }
                    self.buf.drain(..at + THINK_CLOSE.len());
                    self.mode = Mode::Text;
                    self.think_allowed = false;
                    self.at_mode_start = true;
                    return true;
                }
                let keep = partial_tag_len(&self.buf, &[THINK_CLOSE]);
                let ready = self.buf[..self.buf.len() - keep]
                    .trim_end_matches('\n')
                    .len();
                if ready > 0 {
                    let out: String = self.buf.drain(..ready).collect();
                    self.at_mode_start = false;
                    events.push(OutputEvent::Reasoning(out));
                }
                false
            }
            Mode::ToolCall => {
                let Some(at) = self.buf.find(CALL_CLOSE) else {
                    return false;
                };
                let body: String = self.buf.drain(..at).collect();
                self.buf.drain(..CALL_CLOSE.len());
                events.push(self.tool_call(&body));
                self.mode = Mode::Text;
                self.at_mode_start = true;
                true
            }
        }
    }

    fn emit_text(&mut self, text: String, events: &mut Vec<OutputEvent>) {
        if text.is_empty() {
            return;
        }
        if !text.trim().is_empty() {
            self.think_allowed = false;
        }
        self.at_mode_start = false;
        events.push(OutputEvent::Text(text));
    }

    fn tool_call(&mut self, body: &str) -> OutputEvent {
        self.calls += 1;
        let (name, arguments, error) = match parse_call_body(body) {
            Ok((name, arguments)) => (name, arguments, None),
            Err(error) => (
                recover_name(body).unwrap_or_else(|| INVALID_TOOL_NAME.to_string()),
                body.trim().to_string(),
                Some(error.to_string()),
            ),
        };
        OutputEvent::ToolCall {
            call: ToolCall {
                id: new_call_id(),
                name,
                arguments,
            },
            error,
        }
    }
}

/// `call_` + 24 random letters and digits, unique per call like OpenAI's ids.
pub fn new_call_id() -> String {
    let suffix: String = rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(24)
        .map(char::from)
        .collect();
    format!("call_{suffix}")
}

/// Why a `<tool_call>` block is not a call. The messages are written for the model to read:
/// they go back to it as the tool result.
#[derive(Debug, thiserror::Error)]
pub enum CallBodyError {
    #[error(
        "the <tool_call> block is not valid JSON ({0}); write exactly one object \
         {{\"name\": <tool name>, \"arguments\": {{...}}}} between <tool_call> and </tool_call>"
    )]
    NotJson(#[source] serde_json::Error),
    #[error("the <tool_call> block must hold one JSON object with \"name\" and \"arguments\"")]
    NotAnObject,
    #[error("the <tool_call> object has no \"name\" string naming the tool to call")]
    NoName,
}

/// Parses `{"name": "...", "arguments": {...}}`. The arguments are returned as the model wrote
/// them (a string value is taken as the JSON text it holds); missing arguments are `{}`.
/// The error text is written for the model to read.
pub fn parse_call_body(body: &str) -> Result<(String, String), CallBodyError> {
    let trimmed = body.trim();
    let (value, body) = match serde_json::from_str::<Json>(trimmed) {
        Ok(value) => (value, trimmed.to_string()),
        Err(e) => repair_closing_braces(trimmed).ok_or(CallBodyError::NotJson(e))?,
    };
    let body = body.as_str();
    let Json::Object(fields) = &value else {
        return Err(CallBodyError::NotAnObject);
    };
    let name = match fields.get("name") {
        Some(Json::String(name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => return Err(CallBodyError::NoName),
    };
    let key = if fields.contains_key("arguments") {
        "arguments"
    } else {
        "parameters"
    };
    let arguments = match fields.get(key) {
        None | Some(Json::Null) => "{}".to_string(),
        Some(Json::String(text)) => text.clone(),
        Some(_) => match top_level_value_span(body, key) {
            Some(raw) => raw.to_string(),
            None => serde_json::to_string(&fields[key]).unwrap_or_else(|_| "{}".to_string()),
        },
    };
    Ok((name, arguments))
}

/// Models (and generations cut at the end) often drop the object's last `}`: accept the block
/// when one or two closing braces make it valid JSON.
fn repair_closing_braces(body: &str) -> Option<(Json, String)> {
    ["}", "}}"].iter().find_map(|closing| {
        let candidate = format!("{body}{closing}");
        serde_json::from_str::<Json>(&candidate)
            .ok()
            .map(|value| (value, candidate))
    })
}

/// The tool name of a broken block, when `"name": "..."` can still be read.
fn recover_name(body: &str) -> Option<String> {
    let at = body.find("\"name\"")?;
    let rest = body[at + 6..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let end = rest.find('"')?;
    let name = rest[..end].trim();
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'));
    valid.then(|| name.to_string())
}

/// The raw text of the value of top-level `key` in the JSON object `text` (already validated).
fn top_level_value_span<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    let mut expecting_key = false;
    let mut current_key: Option<String> = None;
    let mut value_start: Option<usize> = None;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                if depth == 1 && expecting_key {
                    current_key = serde_json::from_str(text.get(start..=i)?).ok();
                    expecting_key = false;
                }
            }
            b'{' | b'[' => {
                depth += 1;
                if depth == 1 {
                    expecting_key = true;
                }
            }
            b':' if depth == 1 && current_key.as_deref() == Some(key) => {
                value_start = Some(i + 1);
            }
            b',' | b'}' | b']' => {
                if depth == 1
                    && let Some(start) = value_start
                {
                    return Some(text[start..i].trim());
                }
                if bytes[i] == b',' {
                    if depth == 1 {
                        expecting_key = true;
                        current_key = None;
                    }
                } else {
                    depth = depth.checked_sub(1)?;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The earliest occurrence of any of `tags` in `text`.
fn find_first<'t>(text: &str, tags: &[&'t str]) -> Option<(usize, &'t str)> {
    tags.iter()
        .filter_map(|tag| text.find(tag).map(|at| (at, *tag)))
        .min_by_key(|(at, _)| *at)
}

/// Length of the longest suffix of `text` that is a proper prefix of one of `tags`.
fn partial_tag_len(text: &str, tags: &[&str]) -> usize {
    let mut best = 0;
    for tag in tags {
        for len in (1..tag.len()).rev() {
            if len <= best {
                break;
            }
            if text.len() >= len
                && text.is_char_boundary(text.len() - len)
                && text.ends_with(&tag[..len])
            {
                best = len;
                break;
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_span_is_the_raw_text() {
        let body = r#"{"name": "shell", "arguments": {"cmd": "ls, -l", "n": [1, {"a": "}"}]}}"#;
        assert_eq!(
            top_level_value_span(body, "arguments"),
            Some(r#"{"cmd": "ls, -l", "n": [1, {"a": "}"}]}"#)
        );
        assert_eq!(top_level_value_span(body, "name"), Some("\"shell\""));
        assert_eq!(
            top_level_value_span(r#"{"arguments" : 5 , "name":"x"}"#, "arguments"),
            Some("5")
        );
    }

    #[test]
    fn partial_tags_are_held() {
        assert_eq!(partial_tag_len("abc <tool_", &[CALL_OPEN]), 6);
        assert_eq!(partial_tag_len("abc <", &[CALL_OPEN, THINK_OPEN]), 1);
        assert_eq!(partial_tag_len("abc", &[CALL_OPEN]), 0);
        assert_eq!(partial_tag_len("é<thi", &[THINK_OPEN]), 4);
    }
}
