//! The answer hop request: the chosen expert answers from its own view, with the options the
//! harness forwards and its reasoning mapping.

use serde::{Deserialize, Serialize};

use crate::backend::ChatRequest;
use crate::mol::profile::Profile;
use crate::mol::timeline::Timeline;
use crate::protocol::{ChatMessage, ReasoningEffort, ToolSpec};
use crate::protocol::{Expert, Hop, Mode};

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
    /// Fields sent as given (`ChatRequest::extra`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// How reasoning is controlled on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningWire {
    /// `mol` mode, talking to the engine: thinking as the adapters were trained (none →
    /// effort "none" and thinking off; anything else, or nothing, → thinking on), and the
    /// effort the user or client asked for (nothing → "high", as the harness sends). The
    /// harness sends "high" for low and medium too; chat templates that read only
    /// `enable_thinking` see no difference, and those that read the effort get what was asked.
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
    req.extra = opts.extra.clone();
    apply_reasoning(&mut req, opts.reasoning, wire);
    req
}

/// What an answer hop's request is made of, besides the mode and the profile.
#[derive(Debug, Clone)]
pub struct AnswerInput<'a> {
    /// The expert that answers (its view, in `mol` mode).
    pub expert: Expert,
    pub timeline: &'a Timeline,
    /// The system head (see `system_head`).
    pub head: &'a [ChatMessage],
    pub tools: Vec<ToolSpec>,
    /// With tools offered and no tool choice set, `auto` is sent.
    pub options: AnswerOptions,
    /// The model name of `proxy` and `single` modes; none sends an empty name.
    pub model: Option<&'a str>,
    /// The conversation id a `proxy` server gets back.
    pub conversation_id: Option<&'a str>,
}

/// The answer (or tool continuation) request of a turn. In `mol` mode the expert's adapter
/// answers from the expert's own view, with the harness's reasoning mapping; in `proxy` and
/// `single` the configured model gets the whole history and the reasoning effort as given, and
/// a proxy gets its conversation id back.
pub fn answer_hop_request(mode: Mode, profile: &Profile, input: AnswerInput<'_>) -> ChatRequest {
    let AnswerInput {
        expert,
        timeline,
        head,
        tools,
        mut options,
        model,
        conversation_id,
    } = input;
    if options.tool_choice.is_none() && !tools.is_empty() {
        options.tool_choice = Some("auto".to_string());
    }
    match mode {
        Mode::Mol => answer_request(
            profile.adapter(expert),
            timeline.view(expert, head),
            tools,
            &options,
            ReasoningWire::HarnessMapping,
        ),
        Mode::Proxy | Mode::Single => {
            let mut req = answer_request(
                model.unwrap_or_default(),
                timeline.full_history(head),
                tools,
                &options,
                ReasoningWire::PassThrough,
            );
            if mode == Mode::Proxy {
                req.conversation_id = conversation_id.map(str::to_string);
            }
            req
        }
    }
}

/// What a prompt-token count of `expert`'s answer request over `view` sees: its adapter, the
/// view and the tools offered. Compaction measures a view before and after with it.
pub fn view_request(
    profile: &Profile,
    expert: Expert,
    view: Vec<ChatMessage>,
    tools: Vec<ToolSpec>,
) -> ChatRequest {
    let mut req = ChatRequest::new(profile.adapter(expert), view, Hop::Answer);
    req.tools = tools;
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
            let effort = effort.unwrap_or(ReasoningEffort::High);
            req.reasoning_effort = Some(effort);
            req.enable_thinking = Some(effort != ReasoningEffort::None);
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

        // What was asked is sent, with thinking on (the harness sent "high").
        opts.reasoning = Some(ReasoningEffort::Low);
        let req = answer_request("L2", vec![], vec![], &opts, ReasoningWire::HarnessMapping);
        assert_eq!(req.reasoning_effort, Some(ReasoningEffort::Low));
        assert_eq!(req.enable_thinking, Some(true));

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

    fn two_experts_timeline() -> Timeline {
        let mut t = Timeline::default();
        t.open(Expert::L0, "hello");
        t.push(ChatMessage::assistant("Hi there."));
        t.close(true);
        t.open(Expert::L2, "fix the build");
        t
    }

    fn input<'a>(timeline: &'a Timeline, head: &'a [ChatMessage]) -> AnswerInput<'a> {
        AnswerInput {
            expert: Expert::L2,
            timeline,
            head,
            tools: vec![ToolSpec {
                name: "shell".into(),
                description: "run a command".into(),
                parameters: serde_json::json!({"type": "object"}),
            }],
            options: AnswerOptions {
                reasoning: Some(ReasoningEffort::Low),
                ..Default::default()
            },
            model: Some("Macaron-V1-Tall"),
            conversation_id: Some("baton-1"),
        }
    }

    #[test]
    fn mol_answers_on_the_adapter_from_the_experts_own_view() {
        let profile = Profile::builtin(&crate::mol::ProfileNames::default());
        let timeline = two_experts_timeline();
        let head = [ChatMessage::system("sys")];
        let req = answer_hop_request(Mode::Mol, &profile, input(&timeline, &head));
        assert_eq!(req.model, profile.adapter(Expert::L2));
        assert_eq!(req.messages, timeline.view(Expert::L2, &head));
        // L0's task is closed without a summary yet: L2 sees its user text, not its answer.
        assert!(req.messages.iter().all(|m| m.content != "Hi there."));
        assert_eq!(req.tool_choice.as_deref(), Some("auto"));
        assert_eq!(req.reasoning_effort, Some(ReasoningEffort::Low));
        assert_eq!(req.enable_thinking, Some(true));
        assert_eq!(req.conversation_id, None);
    }

    #[test]
    fn proxy_and_single_send_the_model_name_and_the_whole_history() {
        let profile = Profile::builtin(&crate::mol::ProfileNames::default());
        let timeline = two_experts_timeline();
        let head = [ChatMessage::system("sys")];
        for (mode, conversation) in [(Mode::Proxy, Some("baton-1")), (Mode::Single, None)] {
            let req = answer_hop_request(mode, &profile, input(&timeline, &head));
            assert_eq!(req.model, "Macaron-V1-Tall");
            assert_eq!(req.messages, timeline.full_history(&head));
            assert!(req.messages.iter().any(|m| m.content == "Hi there."));
            assert_eq!(req.reasoning_effort, Some(ReasoningEffort::Low));
            assert_eq!(req.enable_thinking, None);
            assert_eq!(req.conversation_id.as_deref(), conversation, "{mode:?}");
        }
        let mut no_tools = input(&timeline, &head);
        no_tools.tools.clear();
        let req = answer_hop_request(Mode::Single, &profile, no_tools);
        assert_eq!(req.tool_choice, None);
    }
}
