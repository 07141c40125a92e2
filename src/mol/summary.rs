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
    let started = Instant::now();
    let result = complete(backend, summary_request(profile, task, head)).await;
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
