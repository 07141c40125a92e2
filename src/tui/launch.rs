//! Starting the interactive UI on an agent the builder started: the UI's options from the
//! configuration and the agent's facts. This is what the CLI calls for `baton [PROMPT]` on a
//! terminal.

use super::options::{ExpertNames, TuiOptions};
use crate::protocol::{AgentHandle, AgentInfo, exit};

/// What the CLI adds to the configuration for the UI.
#[derive(Debug, Clone, Default)]
pub struct LaunchArgs {
    pub prompt: Option<String>,
    pub resume: Option<String>,
    /// `--theme`; falls back to `BATON_THEME`, then `dark`.
    pub theme: Option<String>,
    pub no_color: bool,
}

/// Runs the UI on a started agent until the user quits; returns the process exit code.
pub async fn launch(handle: AgentHandle, info: AgentInfo, args: LaunchArgs) -> i32 {
    let opts = options_for(&info, &args);
    match super::run(handle, opts).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("baton: the terminal UI failed: {e:#}");
            exit::AGENT_ERROR
        }
    }
}

fn options_for(info: &AgentInfo, args: &LaunchArgs) -> TuiOptions {
    let mut o = TuiOptions::new(info.workspace.clone());
    o.initial_prompt = args.prompt.clone();
    o.theme = args
        .theme
        .clone()
        .or_else(|| {
            std::env::var("BATON_THEME")
                .ok()
                .filter(|t| !t.trim().is_empty())
        })
        .unwrap_or_else(|| "dark".into());
    o.experts = ExpertNames::defaults();
    o.endpoint = info.endpoint.clone().unwrap_or_default();
    o.mode = info.mode.as_str().to_string();
    o.profile = info.profile.clone();
    o.sandbox = info.sandbox.as_str().to_string();
    o.approval = info.approval.as_str().to_string();
    o.model = info.model.clone();
    o.device = info.device.clone();
    o.session_file = Some(info.session_file.clone());
    o.sessions_dir = Some(info.session_dir.clone());
    o.history_file = dirs::data_dir().map(|d| d.join("baton").join("history.jsonl"));
    o.config_dir = dirs::config_dir().map(|d| d.join("baton"));
    o.no_color = args.no_color;
    o
}
