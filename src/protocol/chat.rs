//! The chat types every layer shares: messages, tool calls, the tool schema offered to the model,
//! and the reasoning effort of a request.

use serde::{Deserialize, Serialize};

use super::options::Choice;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One tool call made by the model. `arguments` is the raw JSON text the model produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// One chat message, in the shape every backend understands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    #[serde(default)]
    pub content: String,
    /// Reasoning text of an assistant message (kept apart from the answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the id of the call this message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        Self::plain(Role::System, text)
    }
    pub fn user(text: impl Into<String>) -> Self {
        Self::plain(Role::User, text)
    }
    pub fn assistant(text: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, text)
    }
    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: Some(call_id.into()),
            ..Self::plain(Role::Tool, text)
        }
    }
    /// The trimmed content, else the trimmed reasoning (servers whose reasoning parser puts a
    /// short answer in the reasoning field), and whether it came from the reasoning.
    pub fn text_or_reasoning(&self) -> (&str, bool) {
        let content = self.content.trim();
        if content.is_empty() {
            (self.reasoning.as_deref().unwrap_or("").trim(), true)
        } else {
            (content, false)
        }
    }

    fn plain(role: Role, text: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: text.into(),
            reasoning: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A function tool offered to the model (JSON schema parameters).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

impl ToolSpec {
    /// The same tool in fewer tokens, for a small context window: the description's first
    /// sentence, and the parameters without their descriptions (names, types, enums and what
    /// is required stay).
    pub fn lean(&self) -> ToolSpec {
        let first_line = self.description.lines().next().unwrap_or("");
        let sentence = match first_line.find(". ") {
            Some(end) => &first_line[..=end],
            None => first_line,
        };
        let mut parameters = self.parameters.clone();
        strip_descriptions(&mut parameters);
        ToolSpec {
            name: self.name.clone(),
            description: sentence.trim().to_string(),
            parameters,
        }
    }
}

/// Removes `description` from a JSON schema and the schemas inside it (properties, items,
/// alternatives); a property that is itself named `description` stays.
fn strip_descriptions(schema: &mut serde_json::Value) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    object.remove("description");
    if let Some(properties) = object.get_mut("properties").and_then(|p| p.as_object_mut()) {
        properties.values_mut().for_each(strip_descriptions);
    }
    if let Some(items) = object.get_mut("items") {
        strip_descriptions(items);
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(list) = object.get_mut(key).and_then(|l| l.as_array_mut()) {
            list.iter_mut().for_each(strip_descriptions);
        }
    }
}

/// Reasoning effort as the harness maps it (`--reasoning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningEffort {
    None,
    Low,
    Medium,
    High,
}

impl Choice for ReasoningEffort {
    const ALL: &'static [Self] = &[
        ReasoningEffort::None,
        ReasoningEffort::Low,
        ReasoningEffort::Medium,
        ReasoningEffort::High,
    ];
    fn name(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lean_tool_keeps_names_types_and_what_is_required() {
        let spec = ToolSpec {
            name: "grep".into(),
            description: "Searches files for a pattern. Long explanation follows.\nMore.".into(),
            parameters: json!({
                "type": "object",
                "description": "the arguments",
                "properties": {
                    "pattern": {"type": "string", "description": "a regular expression"},
                    "description": {"type": "string", "description": "a field named so"},
                    "paths": {"type": "array", "items": {"type": "string", "description": "a path"}},
                    "mode": {"anyOf": [{"type": "string", "enum": ["a", "b"], "description": "x"}]}
                },
                "required": ["pattern"]
            }),
        };
        let lean = spec.lean();
        assert_eq!(lean.name, "grep");
        assert_eq!(lean.description, "Searches files for a pattern.");
        assert_eq!(
            lean.parameters,
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "description": {"type": "string"},
                    "paths": {"type": "array", "items": {"type": "string"}},
                    "mode": {"anyOf": [{"type": "string", "enum": ["a", "b"]}]}
                },
                "required": ["pattern"]
            })
        );
        // A one-sentence description stays whole.
        let short = ToolSpec {
            description: "Lists a folder".into(),
            ..spec
        };
        assert_eq!(short.lean().description, "Lists a folder");
    }
}
