//! The approval modal: what waits (a command or a diff), the four answers, and the reason input of
//! "no, and tell the model why".

use crate::protocol::{ApprovalDecision, ApprovalRequest};

pub struct PendingApproval {
    pub call_id: String,
    pub request: ApprovalRequest,
    /// `Some` while the user types the reason for a denial.
    pub reason: Option<String>,
    /// Scroll offset of a long diff.
    pub scroll: usize,
}

impl PendingApproval {
    pub fn new(call_id: String, request: ApprovalRequest) -> PendingApproval {
        PendingApproval {
            call_id,
            request,
            reason: None,
            scroll: 0,
        }
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
