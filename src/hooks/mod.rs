//! Hooks: the user's own commands that baton runs at points of a session (before and after a
//! tool, when a prompt is sent, when a turn stops…), in the `hooks.json` schema Claude Code and
//! Codex share, so existing hook scripts run unchanged. This module owns the file format, which
//! files apply (`discover`: the project file only from a trusted folder), running one event's
//! commands (outside the sandbox, with a timeout that kills the whole process group) and what
//! their exit codes and JSON answers mean. The agent core decides where events fire.

mod file;
mod run;

pub use file::{HookCommand, HookError, HookEvent, HookGroup, Matcher};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::config::{TrustList, TrustStatus};

/// A hook's timeout when its entry names none (Claude Code's default).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The user's hooks file: `$XDG_CONFIG_HOME/baton/hooks.json`.
pub fn user_hooks_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("baton").join("hooks.json"))
}

/// The hooks file of a project folder.
pub fn project_hooks_path(folder: &Path) -> PathBuf {
    folder.join(".baton").join("hooks.json")
}

/// Which hooks files apply to a workspace, and why a project file does not.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// The user's file, when it exists.
    pub user: Option<PathBuf>,
    /// The nearest `.baton/hooks.json` at or above the workspace, with its trust (its folder
    /// trusted, and the file the one the user trusted).
    pub project: Option<(PathBuf, TrustStatus)>,
    /// That file's bytes as its trust was judged on them: what [`Hooks::load`] parses, so a
    /// file swapped after the check (by a command of another session) is never the one run.
    pub project_bytes: Option<Vec<u8>>,
}

impl Discovery {
    /// The files whose hooks run: the user's, and the project's only from a trusted folder
    /// (its hooks run outside the sandbox, and anyone who wrote the repository wrote them).
    pub fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = self.user.iter().cloned().collect();
        if let Some((path, TrustStatus::Trusted)) = &self.project {
            files.push(path.clone());
        }
        files
    }

    /// What the user must be told: a project file that is not run, and why.
    pub fn notice(&self) -> Option<String> {
        let (path, status) = self.project.as_ref()?;
        let folder = path
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let why = match status {
            TrustStatus::Trusted => return None,
            TrustStatus::Untrusted => "its folder is not trusted",
            TrustStatus::Changed => {
                "this file or its folder's .baton/config.toml changed since the folder was trusted"
            }
        };
        Some(format!(
            "project hooks in {} are not run: {why} (`baton trust {}` to run them)",
            path.display(),
            folder.display()
        ))
    }
}

/// Each hook of a hooks file's bytes as `EVENT [MATCHER] COMMAND (timeout Ns)`: what
/// `baton trust` shows before it lets a project's hooks run.
pub fn describe(bytes: &[u8], path: &Path) -> Result<Vec<String>, HookError> {
    let parsed = file::parse_bytes(bytes, path)?;
    Ok(parsed
        .groups
        .iter()
        .flat_map(|(event, group)| group.hooks.iter().map(move |h| hook_line(*event, group, h)))
        .collect())
}

/// One hook as `doctor` and `baton trust` show it: `EVENT [MATCHER] COMMAND (timeout Ns)`.
pub fn hook_line(event: HookEvent, group: &HookGroup, hook: &HookCommand) -> String {
    format!(
        "{} [{}] {} (timeout {}s)",
        event.name(),
        group.matcher.source(),
        hook.command,
        hook.timeout.as_secs_f64()
    )
}

/// Finds the hooks files for `workspace`: the user's, and the nearest `.baton/hooks.json` in
/// the workspace or a folder above it.
pub fn discover(workspace: &Path, trust: &TrustList) -> Discovery {
    let user = user_hooks_path().filter(|p| p.is_file());
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let found = workspace.ancestors().find_map(|dir| {
        let file = project_hooks_path(dir);
        if !file.is_file() {
            return None;
        }
        let read = crate::config::read_hooks_file(dir);
        let status = trust.hooks_status_of(dir, &read);
        Some((file, status, read.ok()))
    });
    let (project, project_bytes) = match found {
        Some((file, status, bytes)) => (Some((file, status)), bytes),
        None => (None, None),
    };
    Discovery {
        user,
        project,
        project_bytes,
    }
}

/// The hooks of a run: every group of every file that applies, by event. Empty = none
/// configured, or `--no-hooks`.
#[derive(Debug, Clone, Default)]
pub struct Hooks {
    groups: Arc<Vec<(HookEvent, HookGroup)>>,
    /// The files the hooks came from, for `doctor` and the docs' "which hooks ran".
    pub files: Vec<PathBuf>,
    /// What the user must be told once the session starts (a project file not run).
    pub notices: Vec<String>,
    /// Events of other agents' files (Claude Code's `SessionEnd`, …) that baton never fires:
    /// shown by `doctor`, not on every run.
    pub unfired: Vec<String>,
    /// Whether hooks run in the workspace (its folder is trusted), decided at the first event.
    in_workspace: Arc<std::sync::OnceLock<bool>>,
}

/// What every event's input carries besides its own fields.
#[derive(Debug, Clone)]
pub struct HookBase {
    pub session_id: String,
    /// The session file: the transcript of the conversation, one JSON record a line.
    pub transcript_path: PathBuf,
    /// The workspace; hooks run in it.
    pub cwd: PathBuf,
    /// The approval policy in force, as its config name.
    pub permission_mode: String,
}

/// What a hook's `permissionDecision` (or the older `decision: approve|block`) asks for a
/// tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    /// Run without asking (the sandbox still applies).
    Allow,
    /// Ask the user even where the policy would run it (declined when nobody can answer).
    Ask,
    /// Do not run it; the reason goes to the model.
    Deny,
}

/// The combined answer of every hook an event ran.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookOutcome {
    /// Exit 2 (its stderr), `decision: "block"` (its reason) or `permissionDecision: "deny"`.
    pub blocked: Option<String>,
    /// The strongest permission asked for (deny > ask > allow).
    pub permission: Option<Permission>,
    /// A replacement for the tool's input (`updatedInput`; the last hook's wins).
    pub updated_input: Option<Value>,
    /// Text for the model: `additionalContext`, and plain stdout where the event takes it.
    pub context: Vec<String>,
    /// `continue: false`: the turn stops, with this reason for the user.
    pub stop: Option<String>,
    /// For the user: failed hooks (another exit code, a timeout, bad JSON) and
    /// `systemMessage`s.
    pub messages: Vec<String>,
    /// How many commands ran.
    pub ran: usize,
}

impl HookOutcome {
    fn merge(&mut self, other: HookOutcome) {
        if let Some(b) = other.blocked {
            self.blocked = Some(match self.blocked.take() {
                Some(a) => format!("{a}\n{b}"),
                None => b,
            });
        }
        self.permission = self.permission.max(other.permission);
        if other.updated_input.is_some() {
            self.updated_input = other.updated_input;
        }
        self.context.extend(other.context);
        if other.stop.is_some() && self.stop.is_none() {
            self.stop = other.stop;
        }
        self.messages.extend(other.messages);
        self.ran += other.ran;
    }

    /// The context text, joined; `None` when no hook gave any.
    pub fn context_text(&self) -> Option<String> {
        let parts: Vec<&str> = self
            .context
            .iter()
            .map(|c| c.trim())
            .filter(|c| !c.is_empty())
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

impl Hooks {
    /// No hooks at all (`--no-hooks`, or nothing configured).
    pub fn none() -> Hooks {
        Hooks::default()
    }

    /// Reads the files `discovery` lets run. A file that is not valid is an error naming it:
    /// a guard hook silently dropped would let through what it was written to stop.
    pub fn load(discovery: &Discovery) -> Result<Hooks, HookError> {
        let mut groups = Vec::new();
        let mut notices: Vec<String> = discovery.notice().into_iter().collect();
        let mut unfired = Vec::new();
        let files = discovery.files();
        let trusted_project = match &discovery.project {
            Some((path, TrustStatus::Trusted)) => Some(path),
            _ => None,
        };
        for path in &files {
            let parsed = match (trusted_project, &discovery.project_bytes) {
                (Some(project), Some(bytes)) if project == path => file::parse_bytes(bytes, path)?,
                _ => file::read(path)?,
            };
            groups.extend(parsed.groups);
            notices.extend(parsed.skipped);
            unfired.extend(parsed.unfired);
        }
        Ok(Hooks {
            groups: Arc::new(groups),
            files,
            notices,
            unfired,
            in_workspace: Arc::default(),
        })
    }

    /// Hooks built from groups directly (tests).
    pub fn from_groups(groups: Vec<(HookEvent, HookGroup)>) -> Hooks {
        Hooks {
            groups: Arc::new(groups),
            ..Hooks::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Every configured group, in file order (for `doctor`).
    pub fn groups(&self) -> &[(HookEvent, HookGroup)] {
        &self.groups
    }

    /// Whether any hook of `event` matches `subject` (a tool name, a session source…).
    pub fn wants(&self, event: HookEvent, subject: &str) -> bool {
        self.matching(event, subject).next().is_some()
    }

    fn matching<'a>(
        &'a self,
        event: HookEvent,
        subject: &'a str,
    ) -> impl Iterator<Item = &'a HookCommand> + 'a {
        self.groups
            .iter()
            .filter(move |(e, g)| *e == event && g.matcher.matches(subject))
            .flat_map(|(_, g)| g.hooks.iter())
    }

    /// Runs every hook of `event` whose matcher takes `subject`, in parallel, each with the
    /// input `base` + `fields` on stdin, and combines their answers. Identical commands run
    /// once. Nothing here fails: a hook that cannot start, fails or times out is a message
    /// for the user in the outcome.
    pub async fn fire(
        &self,
        event: HookEvent,
        subject: &str,
        base: &HookBase,
        fields: Map<String, Value>,
    ) -> HookOutcome {
        let mut commands: Vec<&HookCommand> = Vec::new();
        for c in self.matching(event, subject) {
            if !commands.iter().any(|d| d.command == c.command) {
                commands.push(c);
            }
        }
        if commands.is_empty() {
            return HookOutcome::default();
        }
        let mut input = Map::new();
        input.insert("session_id".into(), base.session_id.clone().into());
        input.insert(
            "transcript_path".into(),
            base.transcript_path.display().to_string().into(),
        );
        input.insert("cwd".into(), base.cwd.display().to_string().into());
        input.insert(
            "permission_mode".into(),
            base.permission_mode.clone().into(),
        );
        input.insert("hook_event_name".into(), event.name().into());
        input.extend(fields);
        let stdin = Value::Object(input).to_string();
        let in_workspace = *self
            .in_workspace
            .get_or_init(|| crate::config::mcp::workspace_trusted(&base.cwd));
        let runs = commands
            .iter()
            .map(|c| run::run_command(c, &stdin, &base.cwd, in_workspace, event));
        let mut outcome = HookOutcome::default();
        for one in futures_util::future::join_all(runs).await {
            outcome.merge(one);
        }
        outcome
    }
}

#[cfg(test)]
mod tests;
