//! The `hooks.json` format: `{"hooks": {"EVENT": [{"matcher": "…", "hooks": [{"type":
//! "command", "command": "…", "timeout": 30}]}]}}`. Events baton does not fire and hook types
//! other than `command` are skipped with a note, so a file written for another agent still
//! loads; anything malformed is an error naming the file and the entry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// The points of a session where hooks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookEvent {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PostToolUse,
    Stop,
    PreCompact,
    PostCompact,
    Notification,
    /// After an expert's hidden summary of a task is recorded (baton's own).
    ExpertSummary,
}

impl HookEvent {
    pub const ALL: [HookEvent; 9] = [
        HookEvent::SessionStart,
        HookEvent::UserPromptSubmit,
        HookEvent::PreToolUse,
        HookEvent::PostToolUse,
        HookEvent::Stop,
        HookEvent::PreCompact,
        HookEvent::PostCompact,
        HookEvent::Notification,
        HookEvent::ExpertSummary,
    ];

    pub fn name(self) -> &'static str {
        match self {
            HookEvent::SessionStart => "SessionStart",
            HookEvent::UserPromptSubmit => "UserPromptSubmit",
            HookEvent::PreToolUse => "PreToolUse",
            HookEvent::PostToolUse => "PostToolUse",
            HookEvent::Stop => "Stop",
            HookEvent::PreCompact => "PreCompact",
            HookEvent::PostCompact => "PostCompact",
            HookEvent::Notification => "Notification",
            HookEvent::ExpertSummary => "ExpertSummary",
        }
    }

    pub fn parse(name: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether plain stdout of a hook that exits 0 is added to the model's context (as in
    /// Claude Code: only where the hook runs before the model reads the conversation).
    pub fn stdout_is_context(self) -> bool {
        matches!(self, HookEvent::SessionStart | HookEvent::UserPromptSubmit)
    }
}

/// Which subjects (tool names, a session's source, a compaction's trigger, an expert) a group
/// applies to: a regex over the whole name; empty, missing or `*` = all.
#[derive(Debug, Clone)]
pub enum Matcher {
    All,
    Pattern { source: String, regex: regex::Regex },
}

impl Matcher {
    pub fn new(pattern: Option<&str>) -> Result<Matcher, regex::Error> {
        match pattern.map(str::trim) {
            None | Some("") | Some("*") => Ok(Matcher::All),
            Some(p) => Ok(Matcher::Pattern {
                source: p.to_string(),
                // Anchored, so `Write` is that tool and not every name containing it, while
                // `shell|write_file` and `mcp__github__.*` work as written.
                regex: regex::Regex::new(&format!("^(?:{p})$"))?,
            }),
        }
    }

    pub fn matches(&self, subject: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Pattern { regex, .. } => regex.is_match(subject),
        }
    }

    /// As written in the file (`*` for all).
    pub fn source(&self) -> &str {
        match self {
            Matcher::All => "*",
            Matcher::Pattern { source, .. } => source,
        }
    }
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct HookCommand {
    /// Run with `sh -c`.
    pub command: String,
    pub timeout: Duration,
    /// The file it came from (named in messages about it).
    pub file: PathBuf,
}

/// A matcher and the commands it runs.
#[derive(Debug, Clone)]
pub struct HookGroup {
    pub matcher: Matcher,
    pub hooks: Vec<HookCommand>,
}

#[derive(Debug, Clone, thiserror::Error)]
#[error("hooks file {path}: {reason}")]
pub struct HookError {
    pub path: String,
    pub reason: String,
}

/// Longest timeout a hook may ask for: a typo (`"timeout": 30000`, meant as ms) must not hang
/// a turn for a week.
const MAX_TIMEOUT_SECS: f64 = 3600.0;

/// What a file holds: its groups by event, and notes on entries skipped.
#[derive(Debug)]
pub(crate) struct Parsed {
    pub groups: Vec<(HookEvent, HookGroup)>,
    pub skipped: Vec<String>,
    /// Notes on events baton never fires (their hooks never run).
    pub unfired: Vec<String>,
}

/// Reads one hooks file.
pub(crate) fn read(path: &Path) -> Result<Parsed, HookError> {
    let fail = |reason: String| HookError {
        path: path.display().to_string(),
        reason,
    };
    // A FIFO or a huge file at the name is refused, not waited on or read whole.
    let bytes = crate::untrusted_fs::read_following(path, MAX_FILE_BYTES)
        .map_err(|e| fail(format!("cannot read: {e}")))?;
    parse_bytes(&bytes, path)
}

/// The most a hooks file may hold.
const MAX_FILE_BYTES: u64 = 4 << 20;

/// Parses a hooks file's bytes, read already.
pub(crate) fn parse_bytes(bytes: &[u8], path: &Path) -> Result<Parsed, HookError> {
    let fail = |reason: String| HookError {
        path: path.display().to_string(),
        reason,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8: {e}")))?;
    parse(text, path).map_err(fail)
}

pub(crate) fn parse(text: &str, path: &Path) -> Result<Parsed, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Some(events) = value.get("hooks") else {
        return Err("expected an object with a \"hooks\" key".into());
    };
    let Some(events) = events.as_object() else {
        return Err("\"hooks\" must be an object of event names".into());
    };
    let mut out = Parsed {
        groups: Vec::new(),
        skipped: Vec::new(),
        unfired: Vec::new(),
    };
    for (name, groups) in events {
        let Some(event) = HookEvent::parse(name) else {
            out.unfired.push(format!(
                "{}: event `{name}` is not one baton fires; its hooks never run",
                path.display()
            ));
            continue;
        };
        let Some(groups) = groups.as_array() else {
            return Err(format!("{name}: expected a list of matcher groups"));
        };
        for (i, group) in groups.iter().enumerate() {
            let at = format!("{name}[{i}]");
            let Some(group) = group.as_object() else {
                return Err(format!("{at}: expected an object"));
            };
            let matcher = match group.get("matcher") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.as_str()),
                Some(_) => return Err(format!("{at}.matcher: expected a string")),
            };
            let matcher = Matcher::new(matcher)
                .map_err(|e| format!("{at}.matcher: not a valid regex: {e}"))?;
            let Some(hooks) = group.get("hooks").and_then(Value::as_array) else {
                return Err(format!("{at}: expected a \"hooks\" list"));
            };
            let mut commands = Vec::new();
            for (j, hook) in hooks.iter().enumerate() {
                let at = format!("{at}.hooks[{j}]");
                let kind = hook
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("command");
                if kind != "command" {
                    out.skipped.push(format!(
                        "{}: {at}: hook type `{kind}` is not supported (only `command`); skipped",
                        path.display()
                    ));
                    continue;
                }
                let Some(command) = hook.get("command").and_then(Value::as_str) else {
                    return Err(format!("{at}: expected a \"command\" string"));
                };
                if command.trim().is_empty() {
                    return Err(format!("{at}: the command is empty"));
                }
                let timeout = match hook.get("timeout") {
                    None | Some(Value::Null) => super::DEFAULT_TIMEOUT,
                    Some(v) => match v.as_f64() {
                        Some(s) if s > 0.0 && s <= MAX_TIMEOUT_SECS => Duration::from_secs_f64(s),
                        _ => {
                            return Err(format!(
                                "{at}.timeout: expected seconds, more than 0 and at most {MAX_TIMEOUT_SECS}"
                            ));
                        }
                    },
                };
                commands.push(HookCommand {
                    command: command.to_string(),
                    timeout,
                    file: path.to_path_buf(),
                });
            }
            if !commands.is_empty() {
                out.groups.push((
                    event,
                    HookGroup {
                        matcher,
                        hooks: commands,
                    },
                ));
            }
        }
    }
    Ok(out)
}
