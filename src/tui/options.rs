//! What the CLI tells the TUI at startup (`TuiOptions`), and the experts' display names.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::protocol::Expert;

/// Display names of the experts from the profile (e.g. L2 = "coding").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExpertNames(pub BTreeMap<Expert, String>);

impl ExpertNames {
    /// The default profile's roles (ARCHITECTURE.md): L0 chat + router, L1 agent, L2 coding, L3 GenUI.
    pub fn defaults() -> ExpertNames {
        ExpertNames(BTreeMap::from([
            (Expert::L0, "chat".to_string()),
            (Expert::L1, "agent".to_string()),
            (Expert::L2, "coding".to_string()),
            (Expert::L3, "genui".to_string()),
        ]))
    }

    pub fn name(&self, expert: Expert) -> &str {
        self.0.get(&expert).map(String::as_str).unwrap_or("")
    }
}

/// Startup options of the interactive UI.
#[derive(Debug, Clone)]
pub struct TuiOptions {
    /// Sent as the first user turn once the UI is up.
    pub initial_prompt: Option<String>,
    /// Theme name (built-in or `<config_dir>/themes/NAME.toml`) or a path to a theme file.
    pub theme: String,
    pub experts: ExpertNames,
    /// Endpoint URL or backend description, for the header and `/status`.
    pub endpoint: String,
    /// `mol`, `proxy` or `single`.
    pub mode: String,
    pub profile: String,
    pub sandbox: String,
    pub approval: String,
    /// The model name, when known (`/model` without an argument shows it).
    pub model: Option<String>,
    /// The local engine's device (`cpu (…)`, a GPU name) for the header and `/status`;
    /// `None` for a remote backend.
    pub device: Option<String>,
    pub session_file: Option<PathBuf>,
    /// Directory of session files (`/sessions`, `/resume`); defaults to the session file's folder.
    pub sessions_dir: Option<PathBuf>,
    /// Composer history (one JSON string per line).
    pub history_file: Option<PathBuf>,
    pub workspace: PathBuf,
    /// User themes are read from `<config_dir>/themes/`.
    pub config_dir: Option<PathBuf>,
    /// `--no-color` (NO_COLOR in the environment is honoured as well).
    pub no_color: bool,
    /// Capture the mouse at start (wheel scrolls the transcript); F2 toggles it.
    pub mouse_capture: bool,
    /// A turn that took at least this long and ends while the terminal is not focused is
    /// announced (OSC 9 notification and a bell); `None` never notifies.
    pub notify_after: Option<std::time::Duration>,
    /// What the configuration withheld or skipped (an untrusted project file), shown as
    /// warning notices before anything else happens.
    pub config_warnings: Vec<String>,
    /// Custom slash commands (`.baton/commands/*.md`, the user's `commands/*.md`).
    pub commands: Vec<crate::config::commands::CustomCommand>,
}

impl TuiOptions {
    /// Options with neutral defaults for `workspace`; the CLI fills in the rest.
    pub fn new(workspace: PathBuf) -> TuiOptions {
        TuiOptions {
            initial_prompt: None,
            theme: "dark".into(),
            experts: ExpertNames::defaults(),
            endpoint: String::new(),
            mode: "mol".into(),
            profile: "default".into(),
            sandbox: String::new(),
            approval: String::new(),
            model: None,
            device: None,
            session_file: None,
            sessions_dir: None,
            history_file: None,
            workspace,
            config_dir: None,
            no_color: false,
            mouse_capture: true,
            notify_after: Some(std::time::Duration::from_secs(10)),
            config_warnings: Vec::new(),
            commands: Vec::new(),
        }
    }
}
