//! The model's chat template: the Jinja source from tokenizer_config.json (or
//! chat_template.jinja), rendered with minijinja the way HF `apply_chat_template` renders it.
//!
//! Fidelity matters more than features: the prompt bytes decide the tokens, and the adapters were
//! trained on HF's rendering. So the environment copies HF's (`trim_blocks`, `lstrip_blocks`,
//! Python string/dict methods, `raise_exception`, `strftime_now`, a `tojson` that writes what
//! Python's `json.dumps` writes) and `continue_final_message` cuts the text after the final
//! message's content, as HF does, for templates that do not handle it themselves.

use std::path::{Path, PathBuf};

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind};
use serde_json::{Map, Value as Json, json};

use super::pyjson::{self, PyJsonStyle};
use crate::protocol::{ChatMessage, Role, ToolSpec};

/// A chat-template failure, naming the file or the render step and the reason.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("{path}: no chat template (neither a `chat_template` key nor chat_template.jinja)")]
    Missing { path: PathBuf },
    #[error("chat template from {path} does not parse: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("chat template from {path}: {message}")]
    Render { path: PathBuf, message: String },
    #[error(
        "continue_final_message is set but the final message's text does not appear in the \
         rendered prompt (the template drops or rewrites it)"
    )]
    FinalMessageLost,
}

/// What one rendering needs: the conversation and the switches of `apply_chat_template`.
#[derive(Debug, Clone, Default)]
pub struct TemplateInput {
    /// Messages in the OpenAI/HF dict shape (see [`messages_to_json`]).
    pub messages: Vec<Json>,
    /// Tool schemas in the OpenAI shape (see [`tools_to_json`]); `None` renders `tools` as none.
    pub tools: Option<Vec<Json>>,
    pub add_generation_prompt: bool,
    /// End the prompt inside the final message (an assistant prefill to continue).
    pub continue_final_message: bool,
    /// Further template variables (`enable_thinking`, …), as HF's `**template_kwargs`.
    pub kwargs: Map<String, Json>,
}

/// A loaded chat template, ready to render.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// Named variants (`default`, `tool_use`) when tokenizer_config.json holds a list.
    has_tool_use: bool,
    /// `bos_token`, `eos_token`, … as HF passes them to every rendering.
    special_tokens: Map<String, Json>,
    source_path: PathBuf,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("source_path", &self.source_path)
            .finish()
    }
}

const DEFAULT_NAME: &str = "default";
const TOOL_USE_NAME: &str = "tool_use";

impl ChatTemplate {
    /// Loads the template of a model directory: `chat_template.jinja` when present (HF prefers
    /// it), else `chat_template` of tokenizer_config.json (a string, or a list of
    /// `{name, template}`). Special tokens come from tokenizer_config.json either way.
    pub fn load(base_dir: &Path) -> Result<ChatTemplate, TemplateError> {
        let config_path = base_dir.join("tokenizer_config.json");
        let config: Json = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| TemplateError::Read {
                path: config_path.clone(),
                message: format!("not valid JSON: {e}"),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Json::Object(Map::new()),
            Err(e) => {
                return Err(TemplateError::Read {
                    path: config_path,
                    message: e.to_string(),
                });
            }
        };
        let jinja_path = base_dir.join("chat_template.jinja");
        if jinja_path.is_file() {
            let source = std::fs::read_to_string(&jinja_path).map_err(|e| TemplateError::Read {
                path: jinja_path.clone(),
                message: e.to_string(),
            })?;
            return Self::build(vec![(DEFAULT_NAME.into(), source)], &config, jinja_path);
        }
        let sources = match config.get("chat_template") {
            Some(Json::String(source)) => vec![(DEFAULT_NAME.to_string(), source.clone())],
            Some(Json::Array(list)) => list
                .iter()
                .filter_map(|item| {
                    let name = item.get("name")?.as_str()?;
                    let template = item.get("template")?.as_str()?;
                    Some((name.to_string(), template.to_string()))
                })
                .collect(),
            _ => Vec::new(),
        };
        if sources.is_empty() {
            return Err(TemplateError::Missing { path: config_path });
        }
        Self::build(sources, &config, config_path)
    }

    /// A template from its Jinja source, with special tokens from a tokenizer_config object.
    pub fn from_source(
        source: &str,
        tokenizer_config: &Json,
    ) -> Result<ChatTemplate, TemplateError> {
        Self::build(
            vec![(DEFAULT_NAME.into(), source.to_string())],
            tokenizer_config,
            PathBuf::from("<inline template>"),
        )
    }

    fn build(
        sources: Vec<(String, String)>,
        config: &Json,
        source_path: PathBuf,
    ) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        let mut has_default = false;
        let mut has_tool_use = false;
        for (name, source) in sources {
            has_default |= name == DEFAULT_NAME;
            has_tool_use |= name == TOOL_USE_NAME;
            env.add_template_owned(name.clone(), source)
                .map_err(|e| TemplateError::Parse {
                    path: source_path.clone(),
                    message: format!("template `{name}`: {}", error_chain(&e)),
                })?;
        }
        if !has_default {
            return Err(TemplateError::Missing { path: source_path });
        }
        Ok(ChatTemplate {
            env,
            has_tool_use,
            special_tokens: special_tokens(config),
            source_path,
        })
    }

    /// Renders the prompt text for `input`, as `apply_chat_template(..., tokenize=False)`.
    pub fn render(&self, input: &TemplateInput) -> Result<String, TemplateError> {
        let has_tools = input.tools.as_ref().is_some_and(|t| !t.is_empty());
        let name = if has_tools && self.has_tool_use {
            TOOL_USE_NAME
        } else {
            DEFAULT_NAME
        };
        let template = self
            .env
            .get_template(name)
            .map_err(|e| self.render_error(&e))?;
        // HF passes the special tokens first, then the caller's kwargs over them.
        let mut vars = self.special_tokens.clone();
        for (key, value) in &input.kwargs {
            vars.insert(key.clone(), value.clone());
        }
        vars.insert("messages".into(), Json::Array(input.messages.clone()));
        vars.insert(
            "tools".into(),
            match &input.tools {
                Some(tools) => Json::Array(tools.clone()),
                None => Json::Null,
            },
        );
        vars.insert("documents".into(), Json::Null);
        vars.insert(
            "add_generation_prompt".into(),
            Json::Bool(input.add_generation_prompt),
        );
        vars.insert(
            "continue_final_message".into(),
            Json::Bool(input.continue_final_message),
        );
        let rendered = template
            .render(Value::from_serialize(&vars))
            .map_err(|e| self.render_error(&e))?;
        if input.continue_final_message {
            cut_after_final_message(rendered, input.messages.last())
        } else {
            Ok(rendered)
        }
    }

    fn render_error(&self, e: &minijinja::Error) -> TemplateError {
        TemplateError::Render {
            path: self.source_path.clone(),
            message: error_chain(e),
        }
    }
}

/// HF's `continue_final_message`: the prompt ends right after the final message's text, so the
/// model continues it (the route hop's `model_id=` prefill).
fn cut_after_final_message(rendered: String, last: Option<&Json>) -> Result<String, TemplateError> {
    let Some(final_text) = last.and_then(final_message_text) else {
        return Err(TemplateError::FinalMessageLost);
    };
    let stripped = final_text.trim();
    let Some(at) = rendered.rfind(stripped) else {
        return Err(TemplateError::FinalMessageLost);
    };
    let lstripped = final_text.trim_start();
    // The template kept the text with its trailing spacing: cut after all of it; else it
    // trimmed the text, so cut after the trimmed form.
    let end = if rendered[at..].starts_with(lstripped) {
        at + lstripped.len()
    } else {
        at + stripped.len()
    };
    let mut rendered = rendered;
    rendered.truncate(end);
    Ok(rendered)
}

/// The text of a message's `content`: a string, or the last text part of a parts list.
fn final_message_text(message: &Json) -> Option<&str> {
    match message.get("content")? {
        Json::String(text) => Some(text),
        Json::Array(parts) => parts
            .iter()
            .rev()
            .find_map(|part| part.get("text").and_then(Json::as_str)),
        _ => None,
    }
}

/// The messages of a conversation in the dict shape HF templates expect: `role`, `content`,
/// `reasoning_content` (Qwen templates' name), `tool_calls` as
/// `{id, type, function: {name, arguments}}` with the arguments as the model wrote them, and
/// `tool_call_id` on tool results.
pub fn messages_to_json(messages: &[ChatMessage]) -> Vec<Json> {
    messages.iter().map(message_to_json).collect()
}

fn message_to_json(message: &ChatMessage) -> Json {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    out.insert("content".into(), json!(message.content));
    if let Some(reasoning) = &message.reasoning {
        out.insert("reasoning_content".into(), json!(reasoning));
    }
    if !message.tool_calls.is_empty() {
        let calls: Vec<Json> = message
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                })
            })
            .collect();
        out.insert("tool_calls".into(), Json::Array(calls));
    }
    if let Some(id) = &message.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    Json::Object(out)
}

/// Tool schemas in the OpenAI shape `{type: "function", function: {name, description,
/// parameters}}`, keys in that order (templates print them with `tojson`).
pub fn tools_to_json(tools: &[ToolSpec]) -> Vec<Json> {
    tools
        .iter()
        .map(|tool| {
            json!({
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            })
        })
        .collect()
}

/// `bos_token`, `eos_token`, … from tokenizer_config.json (a string or `{content: …}`).
fn special_tokens(config: &Json) -> Map<String, Json> {
    let mut out = Map::new();
    for key in [
        "bos_token",
        "eos_token",
        "unk_token",
        "sep_token",
        "pad_token",
        "cls_token",
        "mask_token",
    ] {
        let text = match config.get(key) {
            Some(Json::String(s)) => Some(s.clone()),
            Some(Json::Object(o)) => o.get("content").and_then(Json::as_str).map(str::to_string),
            _ => None,
        };
        if let Some(text) = text {
            out.insert(key.into(), Json::String(text));
        }
    }
    if let Some(Json::Array(extra)) = config.get("additional_special_tokens") {
        let texts: Vec<Json> = extra
            .iter()
            .filter_map(|t| match t {
                Json::String(s) => Some(json!(s)),
                Json::Object(o) => o.get("content").cloned(),
                _ => None,
            })
            .collect();
        out.insert("additional_special_tokens".into(), Json::Array(texts));
    }
    out
}

/// HF's `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, minijinja::Error> {
    let indent = match indent {
        Some(v) => Some(v),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let indent = match indent {
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => Some(usize::try_from(v)?),
        None => None,
    };
    let separators = match kwargs.get::<Option<Value>>("separators")? {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let parts: Vec<String> = v
                .try_iter()?
                .map(|p| p.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    )
                })?;
            match parts.as_slice() {
                [item, key] => Some((item.clone(), key.clone())),
                _ => {
                    return Err(minijinja::Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be two strings",
                    ));
                }
            }
        }
        _ => None,
    };
    let style = PyJsonStyle {
        indent,
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        separators,
    };
    kwargs.assert_all_used()?;
    Ok(Value::from_safe_string(pyjson::dumps(value, &style)?))
}

fn raise_exception(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("the template raised: {message}"),
    ))
}

fn strftime_now(format: String) -> Result<String, minijinja::Error> {
    use std::fmt::Write;
    let mut out = String::new();
    // chrono reports a bad format only when writing; `to_string` would panic on it.
    write!(out, "{}", chrono::Local::now().format(&format)).map_err(|_| {
        minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: invalid format {format:?}"),
        )
    })?;
    Ok(out)
}

/// A minijinja error with its causes and template location, on one line.
fn error_chain(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
