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

/// Programs whose first argument is a subcommand: "don't ask again" covers `git status`, not all
/// of `git`.
const SUBCOMMAND_TOOLS: &[&str] = &[
    "git", "cargo", "npm", "pnpm", "yarn", "go", "docker", "kubectl", "pip", "pip3", "uv", "make",
    "poetry", "rustup", "apt", "brew", "dotnet", "gradle", "mvn", "bun", "deno", "python",
    "python3",
];

/// The argv prefix that "yes, don't ask again" approves: the program, plus its subcommand for
/// tools like git or cargo (`python -m pytest` keeps the module too).
pub fn approval_prefix(argv: &[String]) -> Vec<String> {
    let Some(program) = argv.first() else {
        return Vec::new();
    };
    let base = program.rsplit('/').next().unwrap_or(program);
    let mut prefix = vec![program.clone()];
    if SUBCOMMAND_TOOLS.contains(&base)
        && let Some(sub) = argv.get(1)
    {
        if sub == "-m" {
            if let Some(module) = argv.get(2) {
                prefix.push(sub.clone());
                prefix.push(module.clone());
            }
        } else if !sub.starts_with('-') && !sub.contains('/') && !sub.contains('.') {
            prefix.push(sub.clone());
        }
    }
    prefix
}

/// Shell syntax that chains, pipes, redirects or substitutes commands.
fn is_compound(command: &str) -> bool {
    ["&&", "||", ";", "|", "`", "$(", ">", "<", "\n", "&"]
        .iter()
        .any(|op| command.contains(op))
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

    /// "Yes, and don't ask again" exists for simple commands only: an edit has no prefix to
    /// remember, and for a compound shell command (`cd x && rm -rf y`) the first words would
    /// approve far more than what was shown.
    pub fn prefix(&self) -> Option<Vec<String>> {
        match &self.request {
            ApprovalRequest::Command { command, .. } if is_compound(command) => None,
            ApprovalRequest::Command { argv, command, .. } => {
                let argv = if argv.is_empty() {
                    shlex::split(command).unwrap_or_default()
                } else {
                    argv.clone()
                };
                let prefix = approval_prefix(&argv);
                (!prefix.is_empty()).then_some(prefix)
            }
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
    fn prefixes_keep_subcommands_of_multi_command_tools() {
        assert_eq!(
            approval_prefix(&argv("git status --short")),
            argv("git status")
        );
        assert_eq!(
            approval_prefix(&argv("cargo test --lib x")),
            argv("cargo test")
        );
        assert_eq!(approval_prefix(&argv("ls -la /tmp")), argv("ls"));
        assert_eq!(
            approval_prefix(&argv("python3 -m pytest -q")),
            argv("python3 -m pytest")
        );
        assert_eq!(approval_prefix(&argv("python3 script.py")), argv("python3"));
        assert!(approval_prefix(&[]).is_empty());
    }

    #[test]
    fn keys_map_to_decisions() {
        let req = ApprovalRequest::Command {
            command: "git push origin".into(),
            argv: vec![],
            cwd: "/w".into(),
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
