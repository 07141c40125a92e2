//! One layer of settings (a file, the environment or the flags) and how layers merge.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

use super::{Config, ConfigError, default_session_dir};
use crate::agent::ApprovalPolicy;
use crate::backend::ReasoningEffort;
use crate::protocol::Expert;

/// How baton talks to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Mode {
    /// Client-side MoL routing against an engine serving L0–L3 as model names.
    #[default]
    Mol,
    /// A server that routes by itself: one public model name, `X-Conversation-Id` echoed.
    Proxy,
    /// Any OpenAI-compatible model, no routing.
    Single,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Mol => "mol",
            Mode::Proxy => "proxy",
            Mode::Single => "single",
        }
    }
}

/// What commands run by tools may touch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum SandboxMode {
    ReadOnly,
    #[default]
    WorkspaceWrite,
    /// No sandbox (only when asked for explicitly).
    Off,
}

/// Where the local engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Device {
    #[default]
    Auto,
    Cpu,
    Cuda,
}

/// How the route hop's label constraint is sent: vLLM `structured_outputs.choice`, or an
/// SGLang-style `regex`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum RouteConstraint {
    #[default]
    Choice,
    Regex,
}

/// One layer of settings; `None` = this layer says nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub endpoint: Option<String>,
    pub api_key_env: Option<String>,
    pub mode: Option<Mode>,
    pub model: Option<String>,
    pub profile: Option<PathBuf>,
    pub expert: Option<Expert>,
    pub workspace: Option<PathBuf>,
    pub reasoning: Option<ReasoningEffort>,
    pub approval: Option<ApprovalPolicy>,
    pub sandbox: Option<SandboxMode>,
    pub session_dir: Option<PathBuf>,
    pub local: Option<PathBuf>,
    pub device: Option<Device>,
    pub max_turns: Option<u32>,
    pub timeout: Option<u64>,
    pub system_prompt: Option<PathBuf>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub route_constraint: Option<RouteConstraint>,
}

fn choice<T: ValueEnum>(value: &str) -> Result<T, String> {
    T::from_str(value.trim(), true).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
            .collect();
        format!("'{value}' is not one of {}", names.join(", "))
    })
}

fn number<T: std::str::FromStr>(value: &str, what: &str) -> Result<T, String> {
    value
        .trim()
        .parse::<T>()
        .map_err(|_| format!("'{value}' is not {what}"))
}

fn path(value: &str, base: Option<&Path>) -> PathBuf {
    let p = if let Some(rest) = value.strip_prefix("~/") {
        dirs::home_dir()
            .map(|h| h.join(rest))
            .unwrap_or_else(|| PathBuf::from(value))
    } else {
        PathBuf::from(value)
    };
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}

impl Settings {
    /// Every key, as written in config.toml (the env var is `BATON_` + upper case).
    pub const KEYS: [&'static str; 21] = [
        "endpoint",
        "api_key_env",
        "mode",
        "model",
        "profile",
        "expert",
        "workspace",
        "reasoning",
        "approval",
        "sandbox",
        "session_dir",
        "local",
        "device",
        "max_turns",
        "timeout",
        "system_prompt",
        "temperature",
        "top_p",
        "seed",
        "max_tokens",
        "route_constraint",
    ];

    /// Sets one key from its text form. `base` resolves relative paths (a file's folder).
    pub fn set(
        &mut self,
        key: &str,
        value: &str,
        source: &str,
        base: Option<&Path>,
    ) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError {
            source_name: source.to_string(),
            key: key.to_string(),
            reason,
        };
        match key {
            "endpoint" => {
                let v = value.trim().trim_end_matches('/');
                if !(v.starts_with("http://") || v.starts_with("https://")) {
                    return Err(err(format!(
                        "'{value}' is not an http(s) URL (expected e.g. http://127.0.0.1:8000/v1)"
                    )));
                }
                self.endpoint = Some(v.to_string());
            }
            "api_key_env" => {
                let v = value.trim();
                if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(err(format!(
                        "'{value}' is not an environment variable name (the key itself never goes in config)"
                    )));
                }
                self.api_key_env = Some(v.to_string());
            }
            "mode" => self.mode = Some(choice(value).map_err(err)?),
            "model" => {
                if value.trim().is_empty() {
                    return Err(err("the model name is empty".into()));
                }
                self.model = Some(value.trim().to_string());
            }
            "profile" => self.profile = Some(path(value, base)),
            "expert" => self.expert = Some(value.parse::<Expert>().map_err(err)?),
            "workspace" => self.workspace = Some(path(value, base)),
            "reasoning" => self.reasoning = Some(choice(value).map_err(err)?),
            "approval" => self.approval = Some(choice(value).map_err(err)?),
            "sandbox" => self.sandbox = Some(choice(value).map_err(err)?),
            "session_dir" => self.session_dir = Some(path(value, base)),
            "local" => self.local = Some(path(value, base)),
            "device" => self.device = Some(choice(value).map_err(err)?),
            "max_turns" => {
                let n: u32 = number(value, "a positive whole number").map_err(err)?;
                if n == 0 {
                    return Err(err("must be at least 1".into()));
                }
                self.max_turns = Some(n);
            }
            "timeout" => {
                let n: u64 = number(value, "a number of seconds").map_err(err)?;
                if n == 0 {
                    return Err(err("must be at least 1 second".into()));
                }
                self.timeout = Some(n);
            }
            "system_prompt" => self.system_prompt = Some(path(value, base)),
            "temperature" => {
                let t: f32 = number(value, "a number").map_err(err)?;
                if !(0.0..=2.0).contains(&t) {
                    return Err(err(format!("{t} is outside 0..2")));
                }
                self.temperature = Some(t);
            }
            "top_p" => {
                let t: f32 = number(value, "a number").map_err(err)?;
                if !(t > 0.0 && t <= 1.0) {
                    return Err(err(format!("{t} is outside (0, 1]")));
                }
                self.top_p = Some(t);
            }
            "seed" => self.seed = Some(number(value, "a whole number").map_err(err)?),
            "max_tokens" => {
                let n: u32 = number(value, "a positive whole number").map_err(err)?;
                if n == 0 {
                    return Err(err("must be at least 1".into()));
                }
                self.max_tokens = Some(n);
            }
            "route_constraint" => self.route_constraint = Some(choice(value).map_err(err)?),
            _ => {
                return Err(err(format!(
                    "unknown key (known keys: {})",
                    Self::KEYS.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Lays `top` over `self`: every key `top` sets wins.
    pub fn overlay(&mut self, top: Settings) {
        macro_rules! take {
            ($($f:ident),*) => { $( if top.$f.is_some() { self.$f = top.$f; } )* };
        }
        take!(
            endpoint,
            api_key_env,
            mode,
            model,
            profile,
            expert,
            workspace,
            reasoning,
            approval,
            sandbox,
            session_dir,
            local,
            device,
            max_turns,
            timeout,
            system_prompt,
            temperature,
            top_p,
            seed,
            max_tokens,
            route_constraint
        );
    }

    /// Fills defaults and checks what only makes sense across keys.
    pub fn resolve(self, cwd: &Path) -> Result<Config, ConfigError> {
        let workspace = match self.workspace {
            Some(w) if w.is_relative() => cwd.join(w),
            Some(w) => w,
            None => cwd.to_path_buf(),
        };
        if !workspace.is_dir() {
            return Err(ConfigError {
                source_name: "configuration".into(),
                key: "workspace".into(),
                reason: format!("{} is not a folder", workspace.display()),
            });
        }
        let workspace = workspace.canonicalize().unwrap_or(workspace);
        Ok(Config {
            endpoint: self.endpoint,
            api_key_env: self.api_key_env.unwrap_or_else(|| "BATON_API_KEY".into()),
            mode: self.mode.unwrap_or_default(),
            model: self.model,
            profile: self.profile,
            expert: self.expert,
            workspace,
            reasoning: self.reasoning,
            approval: self.approval,
            sandbox: self.sandbox.unwrap_or_default(),
            session_dir: self.session_dir.unwrap_or_else(default_session_dir),
            local: self.local,
            device: self.device.unwrap_or_default(),
            max_turns: self.max_turns,
            timeout_secs: self.timeout,
            system_prompt: self.system_prompt,
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            max_tokens: self.max_tokens,
            route_constraint: self.route_constraint.unwrap_or_default(),
            files: Vec::new(),
        })
    }
}
