//! Short follow-ups that stay with the previous expert. The route hop sees only the newest
//! user text (the adapters were trained that way), so "do the same for February" after an L1
//! task reaches L0 without the task it refers to. A deterministic rule catches the common
//! case: a short, one-line request that refers back, after a task of L1, L2 or L3, goes to
//! that expert with no route hop (`RouteDecision::FollowUp`). `follow_ups = "route"` turns it
//! off.

use crate::mol::handoff::handed_over;
use crate::mol::timeline::Timeline;
use crate::protocol::{Expert, FollowUps};

/// Words at most in a follow-up.
const MAX_WORDS: usize = 12;
/// Characters at most in a follow-up.
const MAX_CHARS: usize = 120;

/// Words that ask for more of the same kind of work. A pronoun alone ("turn that plan into
/// code") refers to the previous result but may need another expert: it is routed.
const BACK_REFERENCES: [&str; 10] = [
    "same",
    "again",
    "also",
    "too",
    "instead",
    "another",
    "rest",
    "continue",
    "likewise",
    "similarly",
];

/// Openings that continue the previous request. "now …" and "then …" alone are not among
/// them: "now book a table" is a new request.
const CONTINUATIONS: [&str; 7] = [
    "and for ",
    "now for ",
    "what about ",
    "how about ",
    "and what about ",
    "same for ",
    "go on",
];

/// The expert a follow-up `text` stays with, or `None` when it is routed: the owner of the
/// newest task (a handed-over task counts as the one it handed to), unless that is L0.
pub fn follow_up_expert(policy: FollowUps, timeline: &Timeline, text: &str) -> Option<Expert> {
    if policy == FollowUps::Route || !is_follow_up(text) {
        return None;
    }
    let previous = timeline.tasks.iter().rev().find(|t| !handed_over(t))?;
    (previous.owner != Expert::L0).then_some(previous.owner)
}

/// Whether `text` reads as a short follow-up that refers back.
pub fn is_follow_up(text: &str) -> bool {
    let text = text.trim();
    if text.is_empty() || text.contains('\n') || text.chars().count() > MAX_CHARS {
        return false;
    }
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() || words.len() > MAX_WORDS {
        return false;
    }
    CONTINUATIONS.iter().any(|c| lower.starts_with(c))
        || words.iter().any(|w| BACK_REFERENCES.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ChatMessage;

    fn after(owner: Expert) -> Timeline {
        let mut t = Timeline::new();
        t.open(owner, "book the January report");
        t.push(ChatMessage::assistant("Done."));
        t.close(true);
        t
    }

    #[test]
    fn a_short_request_that_refers_back_stays_with_the_previous_expert() {
        let t = after(Expert::L1);
        for text in [
            "do the same for February",
            "now for February",
            "and for March?",
            "what about the tests",
            "run it again",
            "Fix that too.",
        ] {
            assert_eq!(
                follow_up_expert(FollowUps::Sticky, &t, text),
                Some(Expert::L1),
                "{text}"
            );
        }
    }

    #[test]
    fn new_requests_long_ones_and_chat_are_routed() {
        let t = after(Expert::L2);
        for text in [
            "write a poem about the sea",
            "hello",
            "what is git?",
            "now book a table",
            "and now?",
            "Now turn that plan into a Python dict in plan.py.",
            "implement it",
            "please refactor the parser so that it handles quoted fields, escaped quotes and \
             multi-line records, then add tests for all of them",
            "do the same\nfor these three files",
        ] {
            assert_eq!(
                follow_up_expert(FollowUps::Sticky, &t, text),
                None,
                "{text}"
            );
        }
        // After a chat answer the router decides; with `route` it always does; and a first
        // request has nothing to follow.
        assert_eq!(
            follow_up_expert(FollowUps::Sticky, &after(Expert::L0), "same again"),
            None
        );
        assert_eq!(follow_up_expert(FollowUps::Route, &t, "same again"), None);
        assert_eq!(
            follow_up_expert(FollowUps::Sticky, &Timeline::new(), "same again"),
            None
        );
    }
}
