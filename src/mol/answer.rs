//! The answer hop request: the chosen expert answers from its own view, with the options the
//! harness forwards and its reasoning mapping (MOL-PROTOCOL §4.5).

use serde::{Deserialize, Serialize};

use crate::backend::ChatRequest;
use crate::protocol::Hop;
use crate::protocol::{ChatMessage, ReasoningEffort, ToolSpec};

/// The answer options a user or config may set; unset ones are not sent (server defaults),
/// except temperature, which the harness forces to 0.0 when unset.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AnswerOptions {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    #[serde(default)]
    pub stop: Vec<String>,
    pub tool_choice: Option<String>,
    pub parallel_tool_calls: Option<bool>,
    pub max_tokens: Option<u32>,
    pub reasoning: Option<ReasoningEffort>,
}

/// How reasoning is controlled on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningWire {
    /// `mol` mode, talking to the engine: the harness's mapping (none → effort "none" and
    /// thinking off; anything else, or nothing, → effort "high" and thinking on).
    HarnessMapping,
    /// `proxy` and `single` modes: send the effort as given, nothing when unset.
    PassThrough,
}

/// Builds an answer (or tool continuation) request for `model` from a ready view.
pub fn answer_request(
    model: &str,
    view: Vec<ChatMessage>,
    tools: Vec<ToolSpec>,
    opts: &AnswerOptions,
    wire: ReasoningWire,
) -> ChatRequest {
    let mut req = ChatRequest::new(model, view, Hop::Answer);
    req.tools = tools;
    req.stream = true;
    req.sampling.temperature = Some(opts.temperature.unwrap_or(0.0));
    req.sampling.top_p = opts.top_p;
    req.sampling.seed = opts.seed;
    req.sampling.stop = opts.stop.clone();
    req.tool_choice = opts.tool_choice.clone();
    req.parallel_tool_calls = opts.parallel_tool_calls;
    req.max_tokens = opts.max_tokens;
    apply_reasoning(&mut req, opts.reasoning, wire);
    req
}

/// Sets `reasoning_effort` and `chat_template_kwargs.enable_thinking`.
pub fn apply_reasoning(
    req: &mut ChatRequest,
    effort: Option<ReasoningEffort>,
    wire: ReasoningWire,
) {
    match wire {
        ReasoningWire::HarnessMapping => {
            let thinking = !matches!(effort, Some(ReasoningEffort::None));
            req.reasoning_effort = Some(if thinking {
                ReasoningEffort::High
            } else {
                ReasoningEffort::None
            });
            req.enable_thinking = Some(thinking);
        }
        ReasoningWire::PassThrough => {
            req.reasoning_effort = effort;
            req.enable_thinking = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harness_mapping_turns_thinking_on_unless_none() {
        let mut opts = AnswerOptions::default();
        let req = answer_request("L2", vec![], vec![], &opts, ReasoningWire::HarnessMapping);
        assert_eq!(req.reasoning_effort, Some(ReasoningEffort::High));
        assert_eq!(req.enable_thinking, Some(true));
        assert_eq!(req.sampling.temperature, Some(0.0));
        assert!(req.stream);

        opts.reasoning = Some(ReasoningEffort::Low);
        let req = answer_request("L2", vec![], vec![], &opts, ReasoningWire::HarnessMapping);
        assert_eq!(req.reasoning_effort, Some(ReasoningEffort::High));

        opts.reasoning = Some(ReasoningEffort::None);
        let req = answer_request("L2", vec![], vec![], &opts, ReasoningWire::HarnessMapping);
        assert_eq!(req.reasoning_effort, Some(ReasoningEffort::None));
        assert_eq!(req.enable_thinking, Some(false));
    }

    #[test]
    fn pass_through_sends_only_what_was_set() {
        let opts = AnswerOptions {
            temperature: Some(0.7),
            seed: Some(3),
            ..Default::default()
        };
        let req = answer_request("gpt", vec![], vec![], &opts, ReasoningWire::PassThrough);
        assert_eq!(req.reasoning_effort, None);
        assert_eq!(req.enable_thinking, None);
        assert_eq!(req.sampling.temperature, Some(0.7));
        assert_eq!(req.sampling.seed, Some(3));
    }
}
