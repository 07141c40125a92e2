//! Approval plumbing of the core: the rules live in `tool::approval` (safe list, argv prefixes);
//! this adds what only the core knows — whether a human is there to ask. With no human
//! (headless runs, policy `never`) anything that would need one is declined and the model is
//! told why, so a run never blocks on a terminal.

use crate::protocol::ApprovalPolicy;
use crate::tool::ApprovalNeed;
use crate::tool::approval::{self, Decision};

/// What to do with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Run,
    Ask,
    /// Declined without asking; the text is what the model is told.
    Decline(String),
}

/// Decides a call from the policy, what the call needs, whether a human can be asked, the
/// command prefixes allowed in config and those the user approved during this session.
pub fn decide(
    policy: ApprovalPolicy,
    need: &ApprovalNeed,
    human_available: bool,
    allowed: &[Vec<String>],
    session: &[Vec<String>],
) -> Verdict {
    let why = match approval::decide(policy, need, allowed, session) {
        Decision::Allow => return Verdict::Run,
        Decision::Ask if human_available => return Verdict::Ask,
        Decision::Ask => match need {
            ApprovalNeed::Edit { path, .. } => format!("editing {path} needs approval"),
            ApprovalNeed::Command { command, .. } => format!(
                "running `{command}` needs approval (it is not a known read-only command or an \
                 allowed prefix)"
            ),
            ApprovalNeed::Input {
                session, program, ..
            } => format!(
                "typing into session {session} (`{program}`) needs approval: that program may \
                 run what it reads"
            ),
            ApprovalNeed::Mcp { tool, .. } => format!(
                "calling the MCP tool `{tool}` needs approval (allow it by name in `[approval] \
                 allow`)"
            ),
            ApprovalNeed::None => "this call needs approval".into(),
        },
        Decision::Decline(why) => why,
    };
    let context = if human_available {
        String::new()
    } else {
        " There is no human to ask in this headless run.".into()
    };
    Verdict::Decline(format!(
        "Declined: {why}.{context} Do not retry it; continue with what you can do without it, or \
         explain what the user should run."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(line: &str) -> ApprovalNeed {
        ApprovalNeed::Command {
            command: line.into(),
            argv: shlex::split(line).unwrap_or_default(),
            cwd: ".".into(),
        }
    }

    #[test]
    fn never_declines_what_needs_a_human_and_runs_the_rest() {
        assert_eq!(
            decide(ApprovalPolicy::Never, &ApprovalNeed::None, false, &[], &[]),
            Verdict::Run
        );
        assert_eq!(
            decide(ApprovalPolicy::Never, &cmd("ls -la"), false, &[], &[]),
            Verdict::Run
        );
        let Verdict::Decline(why) = decide(ApprovalPolicy::Never, &cmd("rm x"), false, &[], &[])
        else {
            panic!("rm must be declined")
        };
        assert!(
            why.contains("`rm x`") && why.contains("Do not retry"),
            "{why}"
        );
    }

    #[test]
    fn auto_edit_runs_edits_and_asks_for_commands() {
        let edit = ApprovalNeed::Edit {
            path: "a".into(),
            diff: String::new(),
        };
        assert_eq!(
            decide(ApprovalPolicy::AutoEdit, &edit, true, &[], &[]),
            Verdict::Run
        );
        assert_eq!(
            decide(ApprovalPolicy::AutoEdit, &cmd("make"), true, &[], &[]),
            Verdict::Ask
        );
    }

    #[test]
    fn allowed_and_session_prefixes_skip_the_question() {
        let allowed = vec![vec!["cargo".to_string(), "test".to_string()]];
        assert_eq!(
            decide(
                ApprovalPolicy::Ask,
                &cmd("cargo test -q"),
                true,
                &allowed,
                &[]
            ),
            Verdict::Run
        );
        assert_eq!(
            decide(ApprovalPolicy::Ask, &cmd("cargo run"), true, &allowed, &[]),
            Verdict::Ask
        );
        let session = vec![vec!["make".to_string()]];
        assert_eq!(
            decide(ApprovalPolicy::Ask, &cmd("make all"), true, &[], &session),
            Verdict::Run
        );
    }

    #[test]
    fn asking_without_a_human_declines() {
        let Verdict::Decline(why) = decide(ApprovalPolicy::Ask, &cmd("make"), false, &[], &[])
        else {
            panic!("must decline")
        };
        assert!(why.contains("headless"), "{why}");
    }
}
