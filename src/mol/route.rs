//! The route hop: L0 classifies the user's request into one expert label,
//! with baton's fallback instead of a dead turn.

use std::time::{Duration, Instant};

use crate::backend::{
    BackendError, ChatBackend, ChatCompletion, ChatRequest, Constraint, complete,
};
use crate::mol::profile::{Profile, ROUTE_PREFILL};
use crate::protocol::ChatMessage;
use crate::protocol::{Expert, Hop, RouteDecision, TokenUsage};

/// The reference's router token budget (ROUTER_MAX_TOKENS).
pub const ROUTER_MAX_TOKENS: u32 = 24;

/// The expert chosen when nothing else decides: the profile's rule for ambiguous requests.
pub const DEFAULT_EXPERT: Expert = Expert::L2;

/// The most characters of the user's text a route hop carries (about 1.7k tokens at 3.6
/// characters a token, under 2k even at 3): a classifier needs the request, not a 440 KB log
/// piped with it. The answer hop still gets everything.
pub const ROUTE_TEXT_CHARS: usize = 6000;

/// Of a text over the budget, how much of the budget goes to its head (the rest to its tail).
const ROUTE_HEAD_SHARE: f64 = 0.7;

/// The user's text as the router sees it: every `<stdin>` block replaced by a one-line
/// description, then, when still over `ROUTE_TEXT_CHARS`, its head and tail (cut at line
/// ends where there is one near) with a line saying how much was left out.
pub fn route_excerpt(user_text: &str) -> String {
    let text = describe_blocks(user_text.trim());
    let total = text.chars().count();
    if total <= ROUTE_TEXT_CHARS {
        return text;
    }
    let head_chars = (ROUTE_TEXT_CHARS as f64 * ROUTE_HEAD_SHARE) as usize;
    let tail_chars = ROUTE_TEXT_CHARS - head_chars;
    let head_end = line_cut(&text, char_offset(&text, head_chars), false);
    let tail_start = line_cut(&text, char_offset(&text, total - tail_chars), true);
    let (head, tail) = (&text[..head_end], &text[tail_start..]);
    let omitted = text[head_end..tail_start].chars().count();
    format!(
        "{}\n[… {omitted} characters of the request left out here …]\n{}",
        head.trim_end(),
        tail.trim_start()
    )
}

/// The byte offset of the `n`th character.
fn char_offset(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

/// `at` moved to a line boundary within 200 bytes (backwards for a head's end, forwards for a
/// tail's start), else left where it is.
fn line_cut(text: &str, at: usize, forward: bool) -> usize {
    const NEAR: usize = 200;
    if forward {
        let end = (at + NEAR).min(text.len());
        text.get(at..end)
            .and_then(|w| w.find('\n'))
            .map_or(at, |i| at + i + 1)
    } else {
        let start = at.saturating_sub(NEAR);
        (start..=at)
            .rev()
            .find(|&i| text.is_char_boundary(i) && text[..i].ends_with('\n'))
            .unwrap_or(at)
    }
}

/// Every `<stdin>…</stdin>` block (what `--exec` appends for piped input) as one line.
fn describe_blocks(text: &str) -> String {
    const OPEN: &str = "<stdin>\n";
    const CLOSE: &str = "</stdin>";
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        let body = &rest[start + OPEN.len()..];
        let Some(end) = body.find(CLOSE) else { break };
        let block = &body[..end];
        out.push_str(&rest[..start]);
        out.push_str(&format!(
            "[stdin: {} lines, {} KB of piped input, given to the expert, not shown here; it starts: {}]",
            block.lines().count(),
            block.len().div_ceil(1024),
            first_line(block)
        ));
        rest = &body[end + CLOSE.len()..];
    }
    out.push_str(rest);
    out
}

/// The first non-empty line of `text`, at most 120 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut s: String = line.trim().chars().take(120).collect();
    if s.len() < line.trim().len() {
        s.push('…');
    }
    s
}

/// Builds the route hop request as the reference sends it: one user message (request text,
/// blank line, rendered instruction without its `model_id=` stem) and the assistant prefill
/// `model_id=`, continued; greedy, 24 tokens, thinking off, a choice constraint. The request
/// text is `route_excerpt`: bounded, whatever the user sent.
pub fn route_request(profile: &Profile, user_text: &str) -> ChatRequest {
    let content = format!(
        "{}\n\n{}",
        route_excerpt(user_text),
        profile.route_instruction
    );
    let mut req = ChatRequest::new(
        profile.adapter(Expert::L0),
        vec![
            ChatMessage::user(content),
            ChatMessage::assistant(ROUTE_PREFILL),
        ],
        Hop::Route,
    );
    req.max_tokens = Some(ROUTER_MAX_TOKENS);
    req.sampling.temperature = Some(0.0);
    req.stream = false;
    req.continue_final_message = true;
    req.add_generation_prompt = false;
    req.enable_thinking = Some(false);
    req.constraint = Some(Constraint::Choice {
        options: profile.route_labels(),
    });
    req
}

/// The label text of a route answer: content, else the reasoning field (GLM's reasoning parser
/// can put the label there), trimmed.
pub fn label_text(done: &ChatCompletion) -> String {
    done.message.text_or_reasoning().0.to_string()
}

/// Why a route answer is not a label. The text is the fallback reason the route records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// Nothing but whitespace.
    #[error("the router returned an empty label")]
    Empty,
    /// One word that names no expert (`L4`, `banana`); `text` is shortened to 60 characters.
    #[error("the router returned '{text}', not a label")]
    Unknown { text: String },
    /// A label followed by more text (`L2 because it is code`): the strict mode rejects it.
    #[error("the router returned '{text}', not a label")]
    ExtraText { label: Expert, text: String },
}

/// Strict parse of the reference's "pure model route" mode: optional whitespace, `L<digits>`,
/// optional whitespace, case-insensitive, one of the profile's labels.
pub fn parse_label(text: &str) -> Result<Expert, LabelError> {
    let t = text.trim();
    if t.is_empty() {
        return Err(LabelError::Empty);
    }
    if let Some(expert) = Expert::parse(t) {
        return Ok(expert);
    }
    let first = t.split_whitespace().next().and_then(Expert::parse);
    let text = shorten(t);
    Err(match first {
        Some(label) => LabelError::ExtraText { label, text },
        None => LabelError::Unknown { text },
    })
}

fn shorten(text: &str) -> String {
    let mut s: String = text.chars().take(60).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}

/// The fallback rule: the expert of the open task, else the default.
pub fn fallback_expert(open_task_owner: Option<Expert>) -> Expert {
    open_task_owner.unwrap_or(DEFAULT_EXPERT)
}

/// What the route hop decided.
#[derive(Debug, Clone)]
pub struct RouteOutcome {
    pub expert: Expert,
    pub decision: RouteDecision,
    pub latency: Duration,
    /// Why it fell back (error text), or the raw label when the model decided.
    pub reason: Option<String>,
    pub usage: TokenUsage,
    /// The route hop's error, when it failed (the caller decides whether it is worth a
    /// fallback: an unreachable server is not).
    pub error: Option<BackendError>,
}

/// Runs the route hop. Never fails: an error or a bad label falls back and says why.
pub async fn route(
    backend: &dyn ChatBackend,
    profile: &Profile,
    user_text: &str,
    open_task_owner: Option<Expert>,
) -> RouteOutcome {
    let started = Instant::now();
    let result = complete(backend, route_request(profile, user_text)).await;
    let latency = started.elapsed();
    let fallback = |reason: String, usage: TokenUsage| RouteOutcome {
        expert: fallback_expert(open_task_owner),
        decision: RouteDecision::Fallback,
        latency,
        reason: Some(reason),
        usage,
        error: None,
    };
    match result {
        Err(e) => RouteOutcome {
            error: Some(e.clone()),
            ..fallback(e.to_string(), TokenUsage::default())
        },
        Ok(done) => {
            let usage = done.usage.unwrap_or_default();
            let raw = label_text(&done);
            match parse_label(&raw) {
                Ok(expert) if profile.experts.iter().any(|e| e.id == expert) => RouteOutcome {
                    expert,
                    decision: RouteDecision::Model,
                    latency,
                    reason: Some(raw),
                    usage,
                    error: None,
                },
                Ok(_) => fallback(format!("label '{raw}' is not in the profile"), usage),
                Err(why) => fallback(why.to_string(), usage),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mol::profile::ProfileNames;

    #[test]
    fn route_request_has_the_reference_shape() {
        let p = Profile::builtin(&ProfileNames::default());
        let req = route_request(&p, "  fix the build \n");
        assert_eq!(req.model, "L0");
        assert_eq!(req.messages.len(), 2);
        assert!(
            req.messages[0]
                .content
                .starts_with("fix the build\n\nThe text above")
        );
        assert!(!req.messages[0].content.ends_with("model_id="));
        assert_eq!(req.messages[1].content, "model_id=");
        assert_eq!(req.max_tokens, Some(24));
        assert_eq!(req.sampling.temperature, Some(0.0));
        assert!(!req.stream && req.continue_final_message && !req.add_generation_prompt);
        assert_eq!(req.enable_thinking, Some(false));
        assert!(req.tools.is_empty());
        assert_eq!(
            req.constraint,
            Some(Constraint::Choice {
                options: vec!["L0".into(), "L1".into(), "L2".into(), "L3".into()]
            })
        );
    }

    #[test]
    fn the_route_hop_is_bounded_whatever_the_input() {
        let p = Profile::builtin(&ProfileNames::default());
        let log: String = (0..12_000)
            .map(|i| format!("2026-03-01 INFO worker-{i} harbor lantern meadow\n"))
            .collect();
        assert!(log.len() > 440_000);
        let text = format!("What is the most frequent word in this log?\n\n<stdin>\n{log}</stdin>");
        let req = route_request(&p, &text);
        let content = &req.messages[0].content;
        // About 2.5k tokens at most (3.6 characters a token), with the instruction.
        assert!(content.len() < 9000, "{}", content.len());
        assert!(
            content.starts_with(
                "What is the most frequent word in this log?\n\n[stdin: 12000 lines, "
            )
        );
        assert!(content.contains("it starts: 2026-03-01 INFO worker-0 harbor lantern meadow]"));
        assert!(content.contains("The text above is a request"));

        // Long text without a block: its head and tail, cut at line ends.
        let long: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        let excerpt = route_excerpt(&long);
        assert!(
            excerpt.chars().count() <= ROUTE_TEXT_CHARS + 80,
            "{}",
            excerpt.len()
        );
        assert!(excerpt.starts_with("line 0\nline 1\n"));
        assert!(excerpt.ends_with("line 1999"));
        assert!(excerpt.contains("characters of the request left out here"));
        assert!(
            excerpt
                .lines()
                .all(|l| l.starts_with("line ") || l.starts_with("[…"))
        );
        // A short request is sent as it is.
        assert_eq!(route_excerpt("  fix the build \n"), "fix the build");
    }

    #[test]
    fn labels_parse_strictly() {
        assert_eq!(parse_label(" l2\n"), Ok(Expert::L2));
        assert_eq!(
            parse_label("L4"),
            Err(LabelError::Unknown { text: "L4".into() })
        );
        assert_eq!(
            parse_label("L2 because it is code"),
            Err(LabelError::ExtraText {
                label: Expert::L2,
                text: "L2 because it is code".into()
            })
        );
        assert_eq!(
            parse_label("banana").unwrap_err().to_string(),
            "the router returned 'banana', not a label"
        );
        assert_eq!(parse_label(" \n"), Err(LabelError::Empty));
        assert!(parse_label("").unwrap_err().to_string().contains("empty"));
    }

    #[test]
    fn fallback_prefers_the_open_task() {
        assert_eq!(fallback_expert(Some(Expert::L1)), Expert::L1);
        assert_eq!(fallback_expert(None), Expert::L2);
    }
}

#[cfg(test)]
mod hop_tests {
    use super::*;
    use crate::mol::fake_backend::Router;
    use crate::mol::profile::ProfileNames;

    #[tokio::test]
    async fn route_decides_or_falls_back_with_a_reason() {
        let p = Profile::builtin(&ProfileNames::default());
        let ok = route(&Router::answering(" L1 "), &p, "book", None).await;
        assert_eq!((ok.expert, ok.decision), (Expert::L1, RouteDecision::Model));

        let garbage = route(&Router::answering("banana"), &p, "x", Some(Expert::L3)).await;
        assert_eq!(garbage.expert, Expert::L3);
        assert_eq!(garbage.decision, RouteDecision::Fallback);
        assert!(garbage.reason.unwrap().contains("banana"));

        let down = route(&Router::failing("engine down"), &p, "x", None).await;
        assert_eq!(
            (down.expert, down.decision),
            (Expert::L2, RouteDecision::Fallback)
        );
        let reason = down.reason.unwrap();
        assert!(
            reason.contains("route hop") && reason.contains("engine down"),
            "{reason}"
        );
    }
}
