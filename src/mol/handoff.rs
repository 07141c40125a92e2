//! The `handoff` tool: how an expert without the tools a request needs (L0, the chat expert,
//! has none by default) passes the turn to one that has them, inside the same turn.
//!
//! The agent core offers it (it is not a workspace tool: it changes who answers, which is
//! `mol`'s decision). When an expert calls it, the core abandons that expert's task and opens a
//! task for the named expert with the same user text; the abandoned task keeps the call, so its
//! owner remembers handing over, and is invisible to every other expert's view (the new task
//! carries the request), so no expert sees the request twice.

use serde_json::{Value, json};

use crate::mol::timeline::{SummaryState, Task};
use crate::protocol::{Expert, Role, ToolSpec};

/// The tool's name, as the model calls it and as an expert's tool list names it.
pub const HANDOFF_TOOL: &str = "handoff";

/// The expert a handoff goes to when the call names none (or names one it may not).
pub const HANDOFF_DEFAULT: Expert = Expert::L2;

/// The tool's schema. Short on purpose: it is the only tool the chat expert pays for.
pub fn handoff_spec() -> ToolSpec {
    ToolSpec {
        name: HANDOFF_TOOL.into(),
        description: "Hand this request to an expert with the tools it needs; it answers \
                      in your place."
            .into(),
        parameters: json!({
            "type": "object",
            "properties": {
                "expert": {"type": "string", "enum": ["L1", "L2", "L3"],
                           "description": "L2 code/terminal, L1 long tool-using tasks, L3 generative UI"},
                "reason": {"type": "string", "description": "What it needs, in one line"}
            },
            "required": ["expert"],
            "additionalProperties": false
        }),
    }
}

/// The expert and reason of a `handoff` call's arguments. A missing, unparsable or
/// self-referring expert goes to the default (the router's rule for anything unclear).
pub fn parse_handoff(arguments: &str, from: Expert) -> (Expert, String) {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let to = args
        .get("expert")
        .and_then(Value::as_str)
        .and_then(Expert::parse)
        .filter(|e| *e != from && *e != Expert::L0)
        .unwrap_or(HANDOFF_DEFAULT);
    let reason = args
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .chars()
        .take(200)
        .collect();
    (to, reason)
}

/// Whether `task` was handed over: abandoned after its owner called `handoff`.
pub fn handed_over(task: &Task) -> bool {
    task.closed
        && task.summary == SummaryState::Skipped
        && task.messages.iter().any(|m| {
            m.role == Role::Assistant && m.tool_calls.iter().any(|c| c.name == HANDOFF_TOOL)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_name_the_expert_else_the_default() {
        assert_eq!(
            parse_handoff(r#"{"expert":"L1","reason":" plan a trip "}"#, Expert::L0),
            (Expert::L1, "plan a trip".to_string())
        );
        assert_eq!(parse_handoff("{}", Expert::L0).0, Expert::L2);
        assert_eq!(parse_handoff("not json", Expert::L0).0, Expert::L2);
        // Back to itself or to the chat expert is no handoff: the default takes it.
        assert_eq!(
            parse_handoff(r#"{"expert":"L0"}"#, Expert::L0).0,
            Expert::L2
        );
        assert_eq!(
            parse_handoff(r#"{"expert":"L1"}"#, Expert::L1).0,
            Expert::L2
        );
    }

    #[test]
    fn the_schema_is_small() {
        // L0 pays for it on every answer: keep it near 100 tokens.
        let spec = handoff_spec();
        let chars = spec.description.len() + spec.parameters.to_string().len();
        assert!(chars < 400, "{chars}");
    }
}
