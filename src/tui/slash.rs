//! Slash commands: the list shown in the popup and /help, and parsing of what the user typed.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlashCommand {
    Help,
    New,
    Resume,
    Rename,
    Sessions,
    Expert,
    Mode,
    Model,
    Approvals,
    Undo,
    Redo,
    Diff,
    Mcp,
    Status,
    Compact,
    Init,
    Copy,
    Theme,
    Mouse,
    Quit,
}

impl SlashCommand {
    /// Popup order: most used first.
    pub const ALL: [SlashCommand; 20] = [
        SlashCommand::Help,
        SlashCommand::New,
        SlashCommand::Resume,
        SlashCommand::Rename,
        SlashCommand::Sessions,
        SlashCommand::Expert,
        SlashCommand::Mode,
        SlashCommand::Model,
        SlashCommand::Approvals,
        SlashCommand::Undo,
        SlashCommand::Redo,
        SlashCommand::Diff,
        SlashCommand::Mcp,
        SlashCommand::Status,
        SlashCommand::Compact,
        SlashCommand::Init,
        SlashCommand::Copy,
        SlashCommand::Theme,
        SlashCommand::Mouse,
        SlashCommand::Quit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SlashCommand::Help => "help",
            SlashCommand::New => "new",
            SlashCommand::Resume => "resume",
            SlashCommand::Rename => "rename",
            SlashCommand::Sessions => "sessions",
            SlashCommand::Expert => "expert",
            SlashCommand::Mode => "mode",
            SlashCommand::Model => "model",
            SlashCommand::Approvals => "approvals",
            SlashCommand::Undo => "undo",
            SlashCommand::Redo => "redo",
            SlashCommand::Diff => "diff",
            SlashCommand::Mcp => "mcp",
            SlashCommand::Status => "status",
            SlashCommand::Compact => "compact",
            SlashCommand::Init => "init",
            SlashCommand::Copy => "copy",
            SlashCommand::Theme => "theme",
            SlashCommand::Mouse => "mouse",
            SlashCommand::Quit => "quit",
        }
    }

    pub fn usage(self) -> &'static str {
        match self {
            SlashCommand::Resume => "/resume [ID|last]",
            SlashCommand::Rename => "/rename [NAME]",
            SlashCommand::Expert => "/expert [L0-L3|auto]",
            SlashCommand::Model => "/model [NAME]",
            SlashCommand::Approvals => "/approvals [POLICY]",
            SlashCommand::Theme => "/theme [NAME]",
            _ => "",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            SlashCommand::Help => "keys and commands",
            SlashCommand::New => "start a fresh session",
            SlashCommand::Resume => "resume a saved session (picker without an ID)",
            SlashCommand::Rename => "name this session (shown by /resume and baton sessions)",
            SlashCommand::Sessions => "list saved sessions",
            SlashCommand::Expert => "pin an expert (skip routing) or unpin with 'auto'",
            SlashCommand::Mode => "show the mode (mol, proxy, single)",
            SlashCommand::Model => "show or change the model name (proxy, single)",
            SlashCommand::Approvals => "when tool calls ask first (Shift+Tab cycles)",
            SlashCommand::Undo => "revert the last turn's file changes (shows the plan, asks y/n)",
            SlashCommand::Redo => "revert the last /undo (until the next turn)",
            SlashCommand::Diff => "git diff of the workspace, untracked files included",
            SlashCommand::Mcp => "MCP servers: state, tools, last error",
            SlashCommand::Status => "endpoint, mode, profile, sandbox, tokens, session",
            SlashCommand::Compact => "summarize the active expert's context now",
            SlashCommand::Init => "draft an AGENTS.md for this repository (you approve it)",
            SlashCommand::Copy => "copy the last answer to the clipboard",
            SlashCommand::Theme => "switch theme (dark, light, high-contrast, yours)",
            SlashCommand::Mouse => "toggle mouse capture (off: select text with the mouse)",
            SlashCommand::Quit => "save the session and exit",
        }
    }

    /// Commands that only read state or change the UI work while a turn runs; the others would
    /// race the running turn.
    pub fn available_during_turn(self) -> bool {
        !matches!(
            self,
            SlashCommand::New
                | SlashCommand::Resume
                | SlashCommand::Undo
                | SlashCommand::Redo
                | SlashCommand::Compact
                | SlashCommand::Init
                | SlashCommand::Model
        )
    }

    pub fn from_name(name: &str) -> Option<SlashCommand> {
        let name = name.to_ascii_lowercase();
        if name == "exit" || name == "q" {
            return Some(SlashCommand::Quit);
        }
        SlashCommand::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// `/name args` → (command, trimmed args). `Err` names what was typed when it is no command.
pub fn parse_slash(input: &str) -> Option<Result<(SlashCommand, String), String>> {
    let rest = input.trim().strip_prefix('/')?;
    // "/ something" or "//path" is text, not a command.
    if rest.is_empty() || rest.starts_with(['/', ' ']) {
        return None;
    }
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    // "/usr/bin/env is …" is a path in a sentence, not a command.
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return None;
    }
    Some(match SlashCommand::from_name(name) {
        Some(cmd) => Ok((cmd, args.trim().to_string())),
        None => Err(format!("/{name}")),
    })
}

/// One line of the slash popup: a built-in command or one of the user's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlashEntry {
    Builtin(SlashCommand),
    Custom {
        name: String,
        usage: String,
        description: String,
        /// It names arguments (`argument-hint`): Enter completes instead of sending.
        takes_arguments: bool,
    },
}

impl SlashEntry {
    pub fn name(&self) -> &str {
        match self {
            SlashEntry::Builtin(c) => c.name(),
            SlashEntry::Custom { name, .. } => name,
        }
    }

    /// `/name` or its usage line, as the popup shows it.
    pub fn label(&self) -> String {
        match self {
            SlashEntry::Builtin(c) if c.usage().is_empty() => format!("/{}", c.name()),
            SlashEntry::Builtin(c) => c.usage().to_string(),
            SlashEntry::Custom { usage, .. } => usage.clone(),
        }
    }

    pub fn description(&self) -> &str {
        match self {
            SlashEntry::Builtin(c) => c.description(),
            SlashEntry::Custom { description, .. } => description,
        }
    }
}

/// Built-in commands, then the custom ones, whose name starts with (then contains) `prefix`.
/// A custom command named like a built-in one is not listed: the built-in runs.
pub fn matching_entries(
    prefix: &str,
    custom: &[crate::config::commands::CustomCommand],
) -> Vec<SlashEntry> {
    let mut out: Vec<SlashEntry> = matching_commands(prefix)
        .into_iter()
        .map(SlashEntry::Builtin)
        .collect();
    let lower = prefix.to_ascii_lowercase();
    let usable = custom
        .iter()
        .filter(|c| SlashCommand::from_name(&c.name).is_none());
    let (starts, contains): (Vec<_>, Vec<_>) = usable
        .filter(|c| c.name.to_ascii_lowercase().contains(&lower))
        .partition(|c| c.name.to_ascii_lowercase().starts_with(&lower));
    out.extend(
        starts
            .into_iter()
            .chain(contains)
            .map(|c| SlashEntry::Custom {
                name: c.name.clone(),
                usage: c.usage(),
                description: c.description.clone(),
                takes_arguments: c.argument_hint.is_some(),
            }),
    );
    out
}

/// Commands whose name starts with (then contains) `prefix`, for the popup.
pub fn matching_commands(prefix: &str) -> Vec<SlashCommand> {
    let prefix = prefix.to_ascii_lowercase();
    let mut out: Vec<SlashCommand> = SlashCommand::ALL
        .into_iter()
        .filter(|c| c.name().starts_with(&prefix))
        .collect();
    out.extend(
        SlashCommand::ALL
            .into_iter()
            .filter(|c| !c.name().starts_with(&prefix) && c.name().contains(&prefix)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands_with_arguments() {
        assert_eq!(
            parse_slash("/expert L2"),
            Some(Ok((SlashCommand::Expert, "L2".into())))
        );
        assert_eq!(
            parse_slash("  /QUIT "),
            Some(Ok((SlashCommand::Quit, String::new())))
        );
        assert_eq!(
            parse_slash("/exit"),
            Some(Ok((SlashCommand::Quit, String::new())))
        );
        assert_eq!(parse_slash("/nope x"), Some(Err("/nope".into())));
        assert_eq!(parse_slash("hello /help"), None);
        assert_eq!(parse_slash("/"), None);
        assert_eq!(parse_slash("/usr/bin is a path"), None);
        assert_eq!(parse_slash("//comment"), None);
    }

    #[test]
    fn popup_matches_prefix_then_substring() {
        assert_eq!(
            matching_commands("co"),
            vec![SlashCommand::Compact, SlashCommand::Copy]
        );
        assert_eq!(matching_commands("")[0], SlashCommand::Help);
        assert!(matching_commands("ode").contains(&SlashCommand::Mode));
    }
}
