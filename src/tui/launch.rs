//! Starting the interactive UI from a resolved configuration: builds the same agent as the line
//! REPL and `--exec` (backend, session file, tools) and runs the TUI as its frontend. This is what
//! the CLI calls for `baton [PROMPT]` on a terminal.

use std::path::PathBuf;

use super::options::{ExpertNames, TuiOptions};
use crate::cli::setup;
use crate::config::Config;

/// What the CLI adds to the configuration for the UI.
#[derive(Debug, Clone, Default)]
pub struct LaunchArgs {
    pub prompt: Option<String>,
    pub resume: Option<String>,
    /// `--theme`; falls back to `BATON_THEME`, then `dark`.
    pub theme: Option<String>,
    pub no_color: bool,
}

/// Runs the UI until the user quits; returns the process exit code (2 for setup problems, with
/// the reason on stderr, like the other frontends).
pub async fn launch(config: &Config, args: LaunchArgs) -> i32 {
    let prepared = setup::build_backend(config).and_then(|backend| {
        let agent = setup::agent_config(config, false)?;
        let (file, restored) =
            setup::open_session(config, backend.as_ref(), args.resume.as_deref())?;
        Ok((backend, agent, file, restored))
    });
    let (backend, agent_cfg, file, restored) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("baton: {e}");
            return 2;
        }
    };
    let opts = options_for(
        config,
        &args,
        agent_cfg.approval.as_str(),
        file.path.clone(),
    );
    let tools = setup::tool_registry(config);
    let handle = crate::agent::spawn_agent(agent_cfg, backend, tools, file, restored);
    match super::run(handle, opts).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("baton: the terminal UI failed: {e:#}");
            1
        }
    }
}

fn options_for(
    config: &Config,
    args: &LaunchArgs,
    approval: &str,
    session_file: PathBuf,
) -> TuiOptions {
    let mut o = TuiOptions::new(config.workspace.clone());
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
    o.endpoint = config.endpoint.clone().unwrap_or_default();
    o.mode = config.mode.as_str().to_string();
    o.profile = config
        .profile
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "built-in".into());
    o.sandbox = kebab(&format!("{:?}", config.sandbox));
    o.approval = approval.to_string();
    o.model = config.model.clone();
    o.session_file = Some(session_file);
    o.sessions_dir = Some(config.session_dir.clone());
    o.history_file = dirs::data_dir().map(|d| d.join("baton").join("history.jsonl"));
    o.config_dir = dirs::config_dir().map(|d| d.join("baton"));
    o.no_color = args.no_color;
    o
}

/// `WorkspaceWrite` → `workspace-write` (the config file's spelling).
fn kebab(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('-');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}
