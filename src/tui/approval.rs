//! The approval modal: what waits (a command or a diff), the four answers, and the reason input of
//! "no, and tell the model why".
//!
//! A modal that opens while the user is typing must not take the keys of the words in flight
//! (the `a` of "please" once approved an unseen command for the whole session): it is armed
//! only once it has been on screen for `ARMING_DELAY` with no key typed meanwhile. Keys before
//! that go where they would have gone without the modal, the composer.

use std::time::{Duration, Instant};

use crate::protocol::{ApprovalDecision, ApprovalRequest};

/// How long the modal must have been on screen, and the keyboard quiet, before keys answer it.
/// Long enough to cover the gap between two keys of fast typing (≈100–250 ms), short enough
/// not to be noticed by someone who reads the modal before answering.
pub const ARMING_DELAY: Duration = Duration::from_millis(400);

pub struct PendingApproval {
    pub call_id: String,
    pub request: ApprovalRequest,
    /// `Some` while the user types the reason for a denial.
    pub reason: Option<String>,
    /// Scroll offset of a long diff.
    pub scroll: usize,
    /// When the modal was first drawn (`None`: not yet on screen, so no key can answer it).
    pub shown_at: Option<Instant>,
    /// The last key that arrived while the modal was not armed (it went to the composer).
    pub typed_at: Option<Instant>,
}

impl PendingApproval {
    pub fn new(call_id: String, request: ApprovalRequest) -> PendingApproval {
        PendingApproval {
            call_id,
            request,
            reason: None,
            scroll: 0,
            shown_at: None,
            typed_at: None,
        }
    }

    /// When keys start answering the modal: `ARMING_DELAY` after it was drawn and after the
    /// last key typed ahead, whichever is later (`None` while it has not been drawn).
    pub fn armed_at(&self) -> Option<Instant> {
        let shown = self.shown_at?;
        let quiet_since = self.typed_at.map_or(shown, |t| t.max(shown));
        Some(quiet_since + ARMING_DELAY)
    }

    pub fn is_armed(&self, now: Instant) -> bool {
        self.armed_at().is_some_and(|at| now >= at)
    }

    /// The prefix "yes, and don't ask again" remembers, as the core offered it (`None`: the
    /// option is not offered, e.g. for an edit or a compound command).
    pub fn prefix(&self) -> Option<Vec<String>> {
        match &self.request {
            ApprovalRequest::Command { remember, .. } => remember.clone(),
            ApprovalRequest::Edit { .. } => None,
        }
    }

    /// The decision for key `c`, or `None` when the key means something else (e.g. 'r' opens the
    /// reason input).
    pub fn decision_for_key(&mut self, c: char) -> Option<ApprovalDecision> {
        match c.to_ascii_lowercase() {
            'y' => Some(ApprovalDecision::Approve),
            'a' => self
                .prefix()
                .map(|prefix| ApprovalDecision::ApproveForPrefix { prefix }),
            'n' | 'd' => Some(ApprovalDecision::Deny),
            'r' => {
                self.reason = Some(String::new());
                None
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modal_arms_after_it_was_shown_and_typing_paused() {
        let req = ApprovalRequest::Edit {
            path: "a".into(),
            diff: String::new(),
        };
        let mut p = PendingApproval::new("c".into(), req);
        let t0 = Instant::now();
        assert!(!p.is_armed(t0 + Duration::from_secs(60)), "never drawn");
        p.shown_at = Some(t0);
        assert!(!p.is_armed(t0 + ARMING_DELAY / 2));
        assert!(p.is_armed(t0 + ARMING_DELAY));
        // A key typed ahead at +300 ms pushes arming to +700 ms.
        p.typed_at = Some(t0 + Duration::from_millis(300));
        assert!(!p.is_armed(t0 + ARMING_DELAY));
        assert!(p.is_armed(t0 + Duration::from_millis(300) + ARMING_DELAY));
    }

    fn argv(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn keys_map_to_decisions() {
        let req = ApprovalRequest::Command {
            command: "git push origin".into(),
            argv: vec![],
            cwd: "/w".into(),
            remember: Some(argv("git push")),
        };
        let mut p = PendingApproval::new("c1".into(), req);
        assert_eq!(p.decision_for_key('y'), Some(ApprovalDecision::Approve));
        assert_eq!(
            p.decision_for_key('a'),
            Some(ApprovalDecision::ApproveForPrefix {
                prefix: argv("git push")
            })
        );
        assert_eq!(p.decision_for_key('n'), Some(ApprovalDecision::Deny));
        assert_eq!(p.decision_for_key('r'), None);
        assert_eq!(p.reason.as_deref(), Some(""));
        let compound = ApprovalRequest::Command {
            command: "cd src && rm -rf build".into(),
            argv: vec![],
            cwd: "/w".into(),
            remember: None,
        };
        let mut p = PendingApproval::new("c3".into(), compound);
        assert_eq!(
            p.decision_for_key('a'),
            None,
            "no blanket approval for a compound command"
        );
        let mut edit = PendingApproval::new(
            "c2".into(),
            ApprovalRequest::Edit {
                path: "a".into(),
                diff: String::new(),
            },
        );
        assert_eq!(edit.decision_for_key('a'), None);
    }
}
