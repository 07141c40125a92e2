//! Turning a `Config` into running parts: the backend, the agent configuration, the session.
//! Every failure here is a usage or setup problem (exit 2) with a message that says what to do.

use std::sync::Arc;

use crate::agent::mol_bridge::Profile;
use crate::agent::{AgentConfig, ApprovalPolicy, DEFAULT_SYSTEM_PROMPT};
use crate::backend::ChatBackend;
use crate::backend::remote::ConstraintDialect;
use crate::config::{Config, Mode, RouteConstraint};
use crate::session::{Restored, SessionFile};

/// Shown when there is nothing to talk to.
pub const NO_BACKEND_HELP: &str = "\
baton has no model to talk to. Point it at an OpenAI-compatible server with
`--endpoint http://HOST:PORT/v1` (or `endpoint = \"…\"` in ~/.config/baton/config.toml, or
BATON_ENDPOINT); the API key is read from $BATON_API_KEY. A MoL engine serving L0–L3 works as
is (--mode mol); for a routing proxy use --mode proxy --model NAME, for any other model
--mode single --model NAME. To run a local model instead, use --local ROOT (a folder with
base/ and loras/L0..L3). `baton doctor` checks the result.";

/// Builds the model backend the configuration names.
pub fn build_backend(config: &Config) -> Result<Arc<dyn ChatBackend>, String> {
    if let Some(root) = &config.local {
        return Err(format!(
            "the local engine is not available in this build (asked for --local {}); use \
             --endpoint with an OpenAI-compatible server",
            root.display()
        ));
    }
    let Some(endpoint) = &config.endpoint else {
        return Err(NO_BACKEND_HELP.to_string());
    };
    if config.mode != Mode::Mol && config.model.is_none() {
        return Err(format!(
            "--mode {} needs a model name: pass --model NAME (or `model` in config.toml)",
            config.mode.as_str()
        ));
    }
    let dialect = match config.route_constraint {
        RouteConstraint::Choice => ConstraintDialect::Vllm,
        RouteConstraint::Regex => ConstraintDialect::Sglang,
    };
    crate::backend::remote::RemoteBackend::builder(endpoint.clone())
        .api_key(config.api_key())
        .dialect(dialect)
        .build()
        .map(|b| Arc::new(b) as Arc<dyn ChatBackend>)
        .map_err(|e| e.to_string())
}

/// The experts' system prompt: the configured file, else the built-in one.
pub fn system_prompt(config: &Config) -> Result<String, String> {
    match &config.system_prompt {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("system_prompt {}: cannot read: {e}", path.display())),
        None => Ok(DEFAULT_SYSTEM_PROMPT.to_string()),
    }
}

/// The MoL profile: the configured folder, else the built-in default.
pub fn profile(config: &Config) -> Result<Profile, String> {
    match &config.profile {
        Some(dir) => crate::agent::mol_bridge::load_profile(dir),
        None => Ok(Profile::builtin()),
    }
}

pub fn agent_config(config: &Config, headless: bool) -> Result<AgentConfig, String> {
    let default_policy = if headless {
        ApprovalPolicy::Never
    } else {
        ApprovalPolicy::Ask
    };
    Ok(AgentConfig {
        mode: config.mode,
        model: config.model.clone(),
        pinned: config.expert,
        reasoning: config.reasoning,
        approval: config.approval.unwrap_or(default_policy),
        headless,
        max_round_trips: config.max_turns,
        system_prompt: system_prompt(config)?,
        profile: profile(config)?,
        workspace: config.workspace.clone(),
        session_dir: config.session_dir.clone(),
        temperature: config.temperature,
        top_p: config.top_p,
        seed: config.seed,
        max_tokens: config.max_tokens,
    })
}

/// Creates a new session file, or opens `resume` (an id, a prefix, or `last`).
pub fn open_session(
    config: &Config,
    backend: &dyn ChatBackend,
    resume: Option<&str>,
) -> Result<(SessionFile, Option<Restored>), String> {
    match resume {
        Some(id) => SessionFile::resume(&config.session_dir, id)
            .map(|(f, r)| (f, Some(r)))
            .map_err(|e| e.to_string()),
        None => SessionFile::create(
            &config.session_dir,
            config.mode.as_str(),
            &backend.describe(),
            &config.workspace,
        )
        .map(|f| (f, None))
        .map_err(|e| e.to_string()),
    }
}
