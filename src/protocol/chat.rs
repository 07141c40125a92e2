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
