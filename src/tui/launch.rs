//! Starting the interactive UI on an agent the builder started: the UI's options from the
//! configuration and the agent's facts. This is what the CLI calls for `baton [PROMPT]` on a
//! terminal.

use super::options::{ExpertNames, TuiOptions};
use crate::protocol::stdio::eprintln;
use crate::protocol::{AgentHandle, AgentInfo, exit};

/// What the CLI adds to the configuration for the UI.
#[derive(Debug, Clone, Default)]
pub struct LaunchArgs {
    pub prompt: Option<String>,
    pub resume: Option<String>,
    /// `--theme`; falls back to `BATON_THEME`, then `dark`.
    pub theme: Option<String>,
    pub no_color: bool,
    /// The configuration's warnings (`Config::warnings`).
    pub config_warnings: Vec<String>,
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
    // A --local run talks to its in-process engine: an endpoint from the config is unused.
    o.endpoint = if info.backend.starts_with("local:") {
        String::new()
    } else {
        info.endpoint.clone().unwrap_or_default()
    };
    o.mode = info.mode.as_str().to_string();
    o.profile = info.profile.clone();
    o.sandbox = if info.weaker_sandbox {
        format!("{} (WEAKER: landlock backend)", info.sandbox.as_str())
    } else {
        info.sandbox.as_str().to_string()
    };
    o.approval = info.approval.as_str().to_string();
    o.model = info.model.clone();
    o.device = info.device.clone();
    o.session_file = Some(info.session_file.clone());
    o.sessions_dir = Some(info.session_dir.clone());
    o.history_file = dirs::data_dir().map(|d| d.join("baton").join("history.jsonl"));
    o.config_dir = dirs::config_dir().map(|d| d.join("baton"));
    o.no_color = args.no_color;
    o.config_warnings = args.config_warnings.clone();
    let (commands, notes) = crate::config::commands::discover_commands(&info.workspace);
    o.commands = commands;
    o.config_warnings.extend(notes);
    if let Some(after) = std::env::var("BATON_NOTIFY_AFTER")
        .ok()
        .and_then(|v| notify_after(&v))
    {
        o.notify_after = after;
    }
    o
}

/// `BATON_NOTIFY_AFTER`: seconds (`0` announces every turn), or `off`. Anything else keeps the
/// default rather than stopping the UI over a notification setting.
fn notify_after(value: &str) -> Option<Option<std::time::Duration>> {
    let value = value.trim();
    if value.eq_ignore_ascii_case("off") || value.eq_ignore_ascii_case("never") {
        return Some(None);
    }
    value
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Some(std::time::Duration::from_secs_f64(s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_device_reaches_the_ui() {
        let info = AgentInfo {
            session_id: "s".into(),
            session_file: "/tmp/s.jsonl".into(),
            backend: "local:/m".into(),
            endpoint: None,
            mode: crate::protocol::Mode::Mol,
            model: None,
            device: Some("cpu (4 threads, avx2+fma, f32)".into()),
            profile: "built-in".into(),
            sandbox: crate::protocol::SandboxMode::default(),
            weaker_sandbox: false,
            approval: crate::protocol::ApprovalPolicy::AutoEdit,
            workspace: "/w".into(),
            session_dir: "/tmp".into(),
        };
        let o = options_for(&info, &LaunchArgs::default());
        assert_eq!(o.device.as_deref(), Some("cpu (4 threads, avx2+fma, f32)"));
        assert_eq!(o.approval, "auto-edit");
    }

    #[test]
    fn notify_after_reads_seconds_or_off() {
        use std::time::Duration;
        assert_eq!(notify_after("0"), Some(Some(Duration::ZERO)));
        assert_eq!(notify_after(" 30 "), Some(Some(Duration::from_secs(30))));
        assert_eq!(notify_after("off"), Some(None));
        assert_eq!(notify_after("soon"), None);
        assert_eq!(notify_after("-1"), None);
    }
}
