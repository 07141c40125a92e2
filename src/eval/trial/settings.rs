//! The settings every trial of a job shares, and which agent plays it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::eval::isolation::Isolation;

/// Which agent plays the trial.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentKind {
    /// `baton --exec --json --sandbox off --approval full-auto -C <workdir>
    /// --session-dir /logs/agent/sessions ARGS -- <instruction>`.
    Baton {
        binary: PathBuf,
        extra_args: Vec<String>,
        /// Host env vars passed into the sandbox (API keys, endpoints).
        pass_env: Vec<String>,
        /// A hooks file (`baton eval --hooks`) installed as the trial's user hooks.json.
        hooks: Option<PathBuf>,
        /// MCP servers (`baton eval --mcp-config`) installed as the trial's user config.toml.
        mcp_config: Option<PathBuf>,
    },
    /// Runs the task's reference solution.
    Oracle,
    /// Does nothing: the tests must fail.
    Nop,
    /// A shell command; the instruction is in `$INSTRUCTION`.
    Cmd(String),
}

impl AgentKind {
    /// Parses `baton`, `oracle`, `nop` or `cmd:COMMAND`.
    pub fn parse(spec: &str, baton: BatonOptions) -> Result<AgentKind, UnknownAgent> {
        match spec {
            "baton" => Ok(AgentKind::Baton {
                binary: baton.binary,
                extra_args: baton.extra_args,
                pass_env: baton.pass_env,
                hooks: baton.hooks,
                mcp_config: baton.mcp_config,
            }),
            "oracle" => Ok(AgentKind::Oracle),
            "nop" => Ok(AgentKind::Nop),
            other => match other.strip_prefix("cmd:") {
                Some(c) if !c.trim().is_empty() => Ok(AgentKind::Cmd(c.to_string())),
                _ => Err(UnknownAgent {
                    spec: other.to_string(),
                }),
            },
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            AgentKind::Baton { .. } => "baton",
            AgentKind::Oracle => "oracle",
            AgentKind::Nop => "nop",
            AgentKind::Cmd(_) => "cmd",
        }
    }
}

/// An `--agent` value that names no agent (or a `cmd:` without a command).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent '{spec}': use baton, oracle, nop or cmd:\"COMMAND\"")]
pub struct UnknownAgent {
    pub spec: String,
}

/// What the `baton` agent needs besides the instruction.
#[derive(Debug, Clone, Default)]
pub struct BatonOptions {
    pub binary: PathBuf,
    pub extra_args: Vec<String>,
    pub pass_env: Vec<String>,
    pub hooks: Option<PathBuf>,
    pub mcp_config: Option<PathBuf>,
}

/// Settings shared by every trial of a job.
#[derive(Debug, Clone)]
pub struct TrialSettings {
    pub agent: AgentKind,
    pub timeout_multiplier: f64,
    pub keep_workdirs: bool,
    pub isolation: Isolation,
    /// CA bundles, proxies and package-index settings from the host
    /// ([`super::network_env`]): every phase gets them, under the task's own variables.
    pub network_env: BTreeMap<String, String>,
    /// Set when the job is interrupted: running phases end, the trial is a `CancelledError`.
    pub cancel: &'static std::sync::atomic::AtomicBool,
}
