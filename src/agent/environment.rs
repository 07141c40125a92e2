//! The environment block of the experts' system prompt: the date, the OS, the shell commands
//! run with, the workspace's git state, the approval policy and the sandbox — what a model
//! would otherwise learn by running `date` or from a declined call.
//!
//! It is taken once, when the session starts, and then kept byte for byte (only the approval
//! policy, which the user may change mid-session, is read when a request is built): a block
//! that changed from one request to the next would break the engine's prefix cache at the
//! system message, the very start of every request.

use std::path::Path;

use crate::protocol::{ApprovalPolicy, SandboxMode};

/// What does not change during a session, rendered once.
#[derive(Debug, Clone)]
pub(crate) struct Environment {
    fixed: String,
    /// The date and OS line alone: all an expert with no workspace tool is told.
    date_os: String,
}

/// What an expert's tools reach, which decides what of the environment concerns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Workspace tools (shell, files, git…): the whole block.
    Workspace,
    /// No workspace tool, but tools that may need approval (MCP tools): the date, the OS and
    /// the approval policy.
    Approved,
    /// Nothing that touches the machine (L0's default: only `handoff`): the date and the OS.
    Nothing,
}

impl Environment {
    /// Takes the date, OS and git state now.
    pub fn take(workspace: &Path, sandbox: SandboxMode, network: bool) -> Environment {
        let date = chrono::Local::now().format("%Y-%m-%d");
        let sandbox = match sandbox {
            SandboxMode::Off => {
                "off: commands run directly on this machine; the network is not restricted"
                    .to_string()
            }
            mode => format!(
                "{mode}; network {}",
                if network { "allowed" } else { "blocked" }
            ),
        };
        let date_os = format!(
            "date: {date}; OS: {} ({})",
            std::env::consts::OS,
            std::env::consts::ARCH
        );
        let fixed = format!(
            "Environment (taken at session start):\n\
             - {date_os}; commands run with bash\n\
             - git: {}\n\
             - sandbox: {sandbox}",
            git_state(workspace),
        );
        Environment { fixed, date_os }
    }

    /// The block for an expert whose tools reach `reach`, with the approval policy in force.
    /// An expert with no workspace tool is told neither the workspace's git state nor the
    /// sandbox its commands would run in (it runs none): for L0 answering a question, that
    /// was a third of its system prompt.
    pub fn render_for(&self, reach: Reach, approval: ApprovalPolicy, headless: bool) -> String {
        match reach {
            Reach::Workspace => self.render(approval, headless),
            Reach::Approved => format!(
                "Environment (taken at session start):\n- {}\n{}",
                self.date_os,
                approval_line(approval, headless)
            ),
            Reach::Nothing => format!("Environment: {}", self.date_os),
        }
    }

    /// The whole block, with the approval policy in force.
    pub fn render(&self, approval: ApprovalPolicy, headless: bool) -> String {
        format!("{}\n{}", self.fixed, approval_line(approval, headless))
    }
}

/// `- approval: …`, and whether anyone can answer.
fn approval_line(approval: ApprovalPolicy, headless: bool) -> String {
    let approval = match approval {
        ApprovalPolicy::Ask => {
            "ask: edits and commands that are not read-only wait for the user's approval"
        }
        ApprovalPolicy::AutoEdit => {
            "auto-edit: edits run; commands that are not read-only wait for approval"
        }
        ApprovalPolicy::FullAuto => "full-auto: edits and commands run without asking",
        ApprovalPolicy::Never => "never: whatever would need approval is declined",
    };
    let headless = if headless {
        "; this run is headless: nobody can answer questions or approve actions"
    } else {
        ""
    };
    format!("- approval: {approval}{headless}")
}

/// How long the start of a session waits for git's look at the work tree.
const GIT_STATE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// [`git_state_now`] on a thread of its own, waited for [`GIT_STATE_WAIT`]: libgit2 opens
/// every folder's ignore and attributes files by name, and a FIFO a command left among them
/// would hold the session's start for good. A look still under way then is left behind.
fn git_state(workspace: &Path) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    let ws = workspace.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("git-state".into())
        .spawn(move || {
            let _ = tx.send(git_state_now(&ws));
        });
    if spawned.is_err() {
        return "git state not known (no thread to look with)".into();
    }
    rx.recv_timeout(GIT_STATE_WAIT).unwrap_or_else(|_| {
        format!(
            "git state not known: git's look at the work tree did not end within {} s",
            GIT_STATE_WAIT.as_secs()
        )
    })
}

/// `branch NAME, clean` / `branch NAME, N changed files` / `not a git repository`.
fn git_state_now(workspace: &Path) -> String {
    if let Some(file) = crate::untrusted_fs::gitdir_would_block_at(workspace) {
        return format!(
            "git state not known: {} is not a regular file (a FIFO, socket or device)",
            file.display()
        );
    }
    let Ok(repo) = git2::Repository::discover(workspace) else {
        return "the workspace is not in a git repository".into();
    };
    let branch = match repo.head() {
        Ok(head) => head
            .shorthand()
            .map(|b| format!("branch {b}"))
            .unwrap_or_else(|| "detached HEAD".into()),
        Err(_) => "no commits yet".into(),
    };
    let mut opts = git2::StatusOptions::new();
    opts.include_untracked(true).include_ignored(false);
    let changed = repo.statuses(Some(&mut opts)).map(|s| s.len());
    match changed {
        Ok(0) => format!("{branch}, no uncommitted changes"),
        Ok(n) => format!("{branch}, {n} files with uncommitted changes"),
        Err(_) => branch,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_says_the_truth_about_the_sandbox_and_git() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Environment::take(dir.path(), SandboxMode::Off, false);
        let text = env.render(ApprovalPolicy::Never, true);
        assert!(
            text.contains(
                "sandbox: off: commands run directly on this machine; the network is not restricted"
            ),
            "{text}"
        );
        assert!(text.contains("not in a git repository"), "{text}");
        assert!(text.contains("approval: never"), "{text}");
        assert!(text.contains("headless"), "{text}");
        let repo = git2::Repository::init(dir.path()).expect("init");
        std::fs::write(dir.path().join("a.txt"), "x").expect("write");
        drop(repo);
        let env = Environment::take(dir.path(), SandboxMode::WorkspaceWrite, false);
        let text = env.render(ApprovalPolicy::Ask, false);
        assert!(
            text.contains("git: no commits yet, 1 files with uncommitted changes"),
            "{text}"
        );
        assert!(
            text.contains("sandbox: workspace-write; network blocked"),
            "{text}"
        );
        // Stable: rendering again gives the same bytes.
        assert_eq!(text, env.render(ApprovalPolicy::Ask, false));
    }

    #[test]
    fn an_expert_is_told_only_what_its_tools_reach() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = Environment::take(dir.path(), SandboxMode::Off, false);
        let whole = env.render(ApprovalPolicy::Never, true);
        assert_eq!(
            env.render_for(Reach::Workspace, ApprovalPolicy::Never, true),
            whole
        );
        let nothing = env.render_for(Reach::Nothing, ApprovalPolicy::Never, true);
        assert!(nothing.starts_with("Environment: date: "), "{nothing}");
        assert!(nothing.contains(std::env::consts::OS), "{nothing}");
        assert!(!nothing.contains('\n'), "{nothing}");
        let approved = env.render_for(Reach::Approved, ApprovalPolicy::Never, true);
        assert!(approved.contains("approval: never"), "{approved}");
        assert!(approved.contains("headless"), "{approved}");
        for block in [&nothing, &approved] {
            for absent in ["git:", "sandbox:", "commands run with"] {
                assert!(!block.contains(absent), "{absent} in {block}");
            }
        }
    }
}
