//! The summary hop: after a task closes, its owner writes a short hidden note that other experts
//! inherit. baton runs it off the user's critical path.

use std::time::{Duration, Instant};

use crate::backend::{ChatBackend, ChatCompletion, ChatRequest, complete};
use crate::mol::profile::Profile;
use crate::mol::timeline::Task;
use crate::protocol::ChatMessage;
use crate::protocol::{Hop, TokenUsage};

/// The reference's summary budget (SUMMARY_MAX_OUT).
pub const SUMMARY_MAX_TOKENS: u32 = 192;

/// When the content is empty, this much of the reasoning stands in for the summary.
const REASONING_FALLBACK_CHARS: usize = 160;

/// The longest answer that is its own summary: what a summary hop may write (192 tokens) at 3
/// characters a token, a low ratio, so the answer is never longer than the summary could be.
pub const ANSWER_AS_SUMMARY_CHARS: usize = 3 * SUMMARY_MAX_TOKENS as usize;

/// The summary of a closed task that needs no summary hop: an L0 (chat) task that is one
/// answer — no tool call, no compaction, no hook's continuation — of at most
/// [`ANSWER_AS_SUMMARY_CHARS`] characters. That answer is recorded as the task's summary, so
/// the next expert reads it exactly where it would have read the summary (`handover_message`),
/// and the hop, which for an L0 question cost more prompt tokens than the route and answer
/// hops (670 of 1,817, `cargo test --bench mol_tokens`), is not sent. Only L0: its tasks are
/// short answers by design, and the reference harness's Chat path never summarizes L0 at all,
/// so its adapters are used to reading L0's own words; tasks of the other experts keep the
/// profile's summary hop.
pub fn answer_as_summary(task: &Task) -> Option<&str> {
    if task.owner != crate::protocol::Expert::L0 || !task.closed || task.compaction.is_some() {
        return None;
    }
    let [answer] = task.messages.as_slice() else {
        return None;
    };
    if answer.role != crate::protocol::Role::Assistant || !answer.tool_calls.is_empty() {
        return None;
    }
    let text = answer.content.trim();
    (!text.is_empty() && text.chars().count() <= ANSWER_AS_SUMMARY_CHARS).then_some(text)
}

/// The summary request: the owner's adapter, `head` (system messages with identity), the task's
/// user text and own messages, then the profile's summary prompt as the last user message.
/// Greedy, not streamed, 192 tokens, thinking off, no tools.
pub fn summary_request(profile: &Profile, task: &Task, head: &[ChatMessage]) -> ChatRequest {
    let mut messages = head.to_vec();
    messages.push(ChatMessage::user(task.user_text.clone()));
    // The task as its owner sees it: a compacted task is summarized from its handoff and recent
    // steps, so a task of any length still gets a summary that fits the window.
    messages.extend(crate::mol::compact::own_messages(task));
    messages.push(ChatMessage::user(profile.summary_prompt.clone()));
    let mut req = ChatRequest::new(profile.adapter(task.owner), messages, Hop::Summary);
    req.sampling.temperature = Some(0.0);
    req.stream = false;
    req.max_tokens = Some(SUMMARY_MAX_TOKENS);
    req.enable_thinking = Some(false);
    req
}

/// The summary request of a closed task as an extension of its owner's last answer request
/// (the prefix-cache friendly form): `view` is the owner's view up to and including the task
/// (`Timeline::view_until`) with the same system head, `tools` the tools its answer hops
/// offered; then the profile's summary prompt as one more user message. The engine has that
/// whole prefix cached from the answer hop, so only the prompt is prefilled. Tool choice
/// `none`: a summary is text. Greedy, not streamed, 192 tokens, thinking off.
pub fn summary_request_extending(
    profile: &Profile,
    owner: crate::protocol::Expert,
    mut view: Vec<ChatMessage>,
    tools: Vec<crate::protocol::ToolSpec>,
) -> ChatRequest {
    view.push(ChatMessage::user(profile.summary_prompt.clone()));
    let mut req = ChatRequest::new(profile.adapter(owner), view, Hop::Summary);
    if !tools.is_empty() {
        req.tool_choice = Some("none".into());
    }
    req.tools = tools;
    req.sampling.temperature = Some(0.0);
    req.stream = false;
    req.max_tokens = Some(SUMMARY_MAX_TOKENS);
    req.enable_thinking = Some(false);
    req
}

/// The summary request of closed task `task` for `backend`: `summary_request_extending` over
/// its owner's view up to it (`head`, `tools` as its answer hops had them), so a server's
/// prefix cache holds all but the prompt — except on a backend that counts prompts itself
/// (the local engine): its cache did not hit the extended form (0 cached tokens) and the
/// longer prompt cost 2.6x (27.5 s against 10.6 s on the tiny MoE fixture), so it gets the
/// task-only `summary_request`. The agent and `baton serve` both build it here.
pub fn summary_request_for(
    backend: &dyn ChatBackend,
    profile: &Profile,
    timeline: &crate::mol::timeline::Timeline,
    task: &Task,
    head: &[ChatMessage],
    tools: Vec<crate::protocol::ToolSpec>,
) -> ChatRequest {
    let short = summary_request(profile, task, head);
    if backend.count_prompt_tokens(&short).is_some() {
        return short;
    }
    summary_request_extending(
        profile,
        task.owner,
        timeline.view_until(task.owner, head, task.id),
        tools,
    )
}

/// The summary text of a completion: trimmed content, else the start of the reasoning.
pub fn summary_text(done: &ChatCompletion) -> String {
    match done.message.text_or_reasoning() {
        (content, false) => content.to_string(),
        (reasoning, true) => reasoning.chars().take(REASONING_FALLBACK_CHARS).collect(),
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SummaryOutcome {
    /// The summary (empty when the hop failed or the model said nothing).
    pub text: String,
    pub latency: Duration,
    pub usage: TokenUsage,
    /// The error, when the hop failed (the summary is then empty; no retry).
    pub error: Option<String>,
}

/// Runs the summary hop. Never fails: an error gives an empty summary and says why.
pub async fn summarize(
    backend: &dyn ChatBackend,
    profile: &Profile,
    task: &Task,
    head: &[ChatMessage],
) -> SummaryOutcome {
    run(backend, summary_request(profile, task, head)).await
}

/// Sends a summary request. Never fails: an error gives an empty summary and says why.
pub async fn run(backend: &dyn ChatBackend, request: ChatRequest) -> SummaryOutcome {
    let started = Instant::now();
    let result = complete(backend, request).await;
    match result {
        Ok(done) => SummaryOutcome {
            text: summary_text(&done),
            latency: started.elapsed(),
            usage: done.usage.unwrap_or_default(),
            error: None,
        },
        Err(e) => SummaryOutcome {
            text: String::new(),
            latency: started.elapsed(),
            usage: TokenUsage::default(),
            error: Some(e.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mol::profile::ProfileNames;
    use crate::mol::timeline::Timeline;
    use crate::protocol::Expert;

    #[test]
    fn the_extending_summary_request_is_the_last_answer_request_plus_the_prompt() {
        let p = Profile::builtin(&ProfileNames::default());
        let head = [ChatMessage::system("sys")];
        let tools = vec![crate::protocol::ToolSpec {
            name: "shell".into(),
            description: "run".into(),
            parameters: serde_json::json!({"type": "object"}),
        }];
        let mut t = Timeline::new();
        t.open(Expert::L2, "fix it");
        // What the last answer hop sent: the view before the final answer.
        let mut answered = t.view(Expert::L2, &head);
        t.push(ChatMessage::assistant("Fixed."));
        t.close(true);
        // A later task must not leak into the summary of this one.
        t.open(Expert::L2, "next");
        let req = summary_request_extending(
            &p,
            Expert::L2,
            t.view_until(Expert::L2, &head, 1),
            tools.clone(),
        );
        answered.push(ChatMessage::assistant("Fixed."));
        answered.push(ChatMessage::user(p.summary_prompt.clone()));
        assert_eq!(req.messages, answered);
        assert_eq!(req.tools, tools);
        assert_eq!(req.tool_choice.as_deref(), Some("none"));
        assert_eq!((req.hop, req.max_tokens), (Hop::Summary, Some(192)));
        assert!(!req.stream);
    }

    #[test]
    fn a_short_l0_answer_is_its_own_summary_and_nothing_else_is() {
        let closed = |owner: Expert, messages: Vec<ChatMessage>| {
            let mut t = Timeline::new();
            t.open(owner, "question");
            for m in messages {
                t.push(m);
            }
            t.close(true);
            t.tasks[0].clone()
        };
        let short = ChatMessage::assistant(" Week 1 holds the first Thursday. ");
        assert_eq!(
            answer_as_summary(&closed(Expert::L0, vec![short.clone()])),
            Some("Week 1 holds the first Thursday.")
        );
        // Another expert's task keeps its summary hop.
        assert_eq!(
            answer_as_summary(&closed(Expert::L2, vec![short.clone()])),
            None
        );
        // Longer than a summary may be: summarized.
        let long = ChatMessage::assistant("x".repeat(ANSWER_AS_SUMMARY_CHARS + 1));
        assert_eq!(answer_as_summary(&closed(Expert::L0, vec![long])), None);
        let fits = ChatMessage::assistant("x".repeat(ANSWER_AS_SUMMARY_CHARS));
        assert!(answer_as_summary(&closed(Expert::L0, vec![fits])).is_some());
        // A task with more than its answer (a tool round, a hook's continuation): summarized.
        let call = ChatMessage {
            tool_calls: vec![crate::protocol::ToolCall {
                id: "c1".into(),
                name: "mcp__time__now".into(),
                arguments: "{}".into(),
            }],
            ..ChatMessage::assistant("")
        };
        let result = ChatMessage::tool_result("c1", "12:00");
        assert_eq!(
            answer_as_summary(&closed(Expert::L0, vec![call, result, short.clone()])),
            None
        );
        let hook = ChatMessage::user("A Stop hook asks for more.");
        assert_eq!(
            answer_as_summary(&closed(
                Expert::L0,
                vec![short.clone(), hook, short.clone()]
            )),
            None
        );
        // Empty, or still open: nothing.
        assert_eq!(
            answer_as_summary(&closed(Expert::L0, vec![ChatMessage::assistant("  ")])),
            None
        );
        let mut open = Timeline::new();
        open.open(Expert::L0, "question");
        open.push(short);
        assert_eq!(answer_as_summary(&open.tasks[0]), None);
    }

    #[test]
    fn summary_request_has_the_reference_shape() {
        let p = Profile::builtin(&ProfileNames::default());
        let mut t = Timeline::new();
        t.open(Expert::L1, "plan my week");
        t.push(ChatMessage::assistant("Here is the plan."));
        t.close(true);
        let req = summary_request(&p, &t.tasks[0], &[ChatMessage::system("sys")]);
        assert_eq!(req.model, "L1");
        assert_eq!(req.hop, Hop::Summary);
        assert_eq!(req.max_tokens, Some(192));
        assert_eq!(req.sampling.temperature, Some(0.0));
        assert!(!req.stream && req.tools.is_empty());
        assert_eq!(req.enable_thinking, Some(false));
        let contents: Vec<&str> = req.messages.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            contents,
            vec![
                "sys",
                "plan my week",
                "Here is the plan.",
                p.summary_prompt.as_str()
            ]
        );
    }
}
