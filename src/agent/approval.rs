//! Approval policy plumbing: which tool calls run, which ask a human, which are declined.
//!
//! Tools say what a call needs (`ApprovalNeed`); the policy decides what happens. With no human
//! to ask (headless runs, policy `never`) anything that would need one is declined and the
//! model is told why, so a run never blocks on a terminal.

use crate::tool::ApprovalNeed;

/// `--approval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApprovalPolicy {
    /// Ask before edits and before commands that are not known to be safe.
    Ask,
    /// Apply edits without asking; ask before commands.
    AutoEdit,
    /// Run everything without asking, inside the sandbox.
    FullAuto,
    /// Never ask: anything that would need a human is declined (headless default).
    Never,
}

impl ApprovalPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalPolicy::Ask => "ask",
            ApprovalPolicy::AutoEdit => "auto-edit",
            ApprovalPolicy::FullAuto => "full-auto",
            ApprovalPolicy::Never => "never",
        }
    }
}

/// What to do with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Run,
    Ask,
    /// Declined without asking; the text is what the model is told.
    Decline(String),
}

/// Decides a call from the policy, what the call needs, whether a human can be asked, and the
/// argv prefixes the user approved for this session.
pub fn decide(
    policy: ApprovalPolicy,
    need: &ApprovalNeed,
    human_available: bool,
    approved_prefixes: &[Vec<String>],
) -> Verdict {
    let wants_human = match (policy, need) {
        (_, ApprovalNeed::None) => false,
        (ApprovalPolicy::FullAuto, _) => false,
        (ApprovalPolicy::AutoEdit, ApprovalNeed::Edit { .. }) => false,
        (_, ApprovalNeed::Command { argv, .. })
            if approved_prefixes
                .iter()
                .any(|p| !p.is_empty() && argv.starts_with(p)) =>
        {
            false
        }
        _ => true,
    };
    if !wants_human {
        return Verdict::Run;
    }
    let what = match need {
        ApprovalNeed::Edit { path, .. } => format!("editing {path}"),
        ApprovalNeed::Command { command, .. } => format!("running `{command}`"),
        ApprovalNeed::None => "this call".into(),
    };
    if policy == ApprovalPolicy::Never || !human_available {
        return Verdict::Decline(format!(
            "Declined: {what} needs approval, and the approval policy is `{}` with no human to \
             ask. Do not retry it; continue with what you can do without it, or explain what the \
             user should run.",
            if human_available {
                policy.as_str()
            } else {
                "headless"
            }
        ));
    }
    Verdict::Ask
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(argv: &[&str]) -> ApprovalNeed {
        ApprovalNeed::Command {
            command: argv.join(" "),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            cwd: ".".into(),
        }
    }

    #[test]
    fn never_declines_what_needs_a_human_and_runs_the_rest() {
        assert_eq!(
            decide(ApprovalPolicy::Never, &ApprovalNeed::None, false, &[]),
            Verdict::Run
        );
        assert!(matches!(
            decide(ApprovalPolicy::Never, &cmd(&["rm", "x"]), false, &[]),
            Verdict::Decline(_)
        ));
    }

    #[test]
    fn auto_edit_runs_edits_and_asks_for_commands() {
        let edit = ApprovalNeed::Edit {
            path: "a".into(),
            diff: String::new(),
        };
        assert_eq!(
            decide(ApprovalPolicy::AutoEdit, &edit, true, &[]),
            Verdict::Run
        );
        assert_eq!(
            decide(ApprovalPolicy::AutoEdit, &cmd(&["make"]), true, &[]),
            Verdict::Ask
        );
    }

    #[test]
    fn approved_prefixes_skip_the_question() {
        let prefixes = vec![vec!["cargo".to_string(), "test".to_string()]];
        assert_eq!(
            decide(
                ApprovalPolicy::Ask,
                &cmd(&["cargo", "test", "-q"]),
                true,
                &prefixes
            ),
            Verdict::Run
        );
        assert_eq!(
            decide(
                ApprovalPolicy::Ask,
                &cmd(&["cargo", "run"]),
                true,
                &prefixes
            ),
            Verdict::Ask
        );
    }

    #[test]
    fn asking_without_a_human_declines() {
        assert!(matches!(
            decide(ApprovalPolicy::Ask, &cmd(&["make"]), false, &[]),
            Verdict::Decline(_)
        ));
    }
}
