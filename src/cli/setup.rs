//! Turning a `Config` into running parts: the backend, the agent configuration, the session.
//! Every failure here is a usage or setup problem (exit 2) with a message that says what to do.

use std::sync::Arc;

use crate::agent::{AgentConfig, ApprovalPolicy, DEFAULT_SYSTEM_PROMPT};
use crate::backend::ChatBackend;
use crate::backend::remote::ConstraintDialect;
use crate::config::{Config, Device, Mode, RouteConstraint};
use crate::engine::DeviceChoice;
use crate::mol::{Profile, ProfileNames};
use crate::session::{Restored, SessionFile};

/// Shown when there is nothing to talk to.
pub const NO_BACKEND_HELP: &str = "\
no model to talk to. Point baton at an OpenAI-compatible server with
`--endpoint http://HOST:PORT/v1` (or `endpoint = \"…\"` in ~/.config/baton/config.toml, or
BATON_ENDPOINT); the API key is read from $BATON_API_KEY. A MoL engine serving L0–L3 works as
is (--mode mol); for a routing proxy use --mode proxy --model NAME, for any other model
--mode single --model NAME. To run a local model instead, use --local ROOT (a folder with
base/ and loras/L0..L3). `baton doctor` checks the result.";

/// Builds the model backend the configuration names.
pub fn build_backend(config: &Config) -> Result<Arc<dyn ChatBackend>, String> {
    if let Some(root) = &config.local {
        let device = device_choice(config.device);
        let backend = crate::backend::local::LocalBackend::open(root, device)
            .map_err(|e| format!("local engine at {}: {e:#}", root.display()))?;
        if let Some(notice) = backend.device_notice() {
            eprintln!("baton: {notice}");
        }
        return Ok(Arc::new(backend));
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

/// The engine's device for the configured one.
pub fn device_choice(device: Device) -> DeviceChoice {
    match device {
        Device::Auto => DeviceChoice::Auto,
        Device::Cpu => DeviceChoice::Cpu,
        Device::Cuda => DeviceChoice::Cuda,
    }
}

/// The experts' system prompt: the configured file, else the built-in one; then the project
/// instructions (AGENTS.md files) for the workspace.
pub fn system_prompt(config: &Config) -> Result<String, String> {
    let mut prompt = match &config.system_prompt {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("system_prompt {}: cannot read: {e}", path.display()))?,
        None => DEFAULT_SYSTEM_PROMPT.to_string(),
    };
    let instructions = project_instructions(config);
    if !instructions.text.is_empty() {
        prompt = format!("{}\n\n{}", prompt.trim_end(), instructions.text);
    }
    Ok(prompt)
}

/// AGENTS.md (or CLAUDE.md) files from the repository root down to the workspace, plus the
/// user's own in `~/.config/baton/`.
pub fn project_instructions(config: &Config) -> crate::agent::instructions::ProjectInstructions {
    let user_dir = dirs::config_dir().map(|d| d.join("baton"));
    crate::agent::instructions::discover(&config.workspace, user_dir.as_deref())
}

/// The MoL profile: the configured folder, else the built-in default.
pub fn profile(config: &Config) -> Result<Profile, String> {
    match &config.profile {
        Some(dir) => Profile::load(dir, &ProfileNames::default()).map_err(|e| e.to_string()),
        None => Ok(Profile::builtin(&ProfileNames::default())),
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
        allowed_commands: config
            .allow
            .iter()
            .filter_map(|p| crate::tool::approval::parse_prefix(p))
            .collect(),
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
        context_window: config.context_window,
        compact_at: config.compact_at,
    })
}

/// Creates a new session file, or opens `resume` (an id, a prefix, or `last`).
pub fn open_session(
    config: &Config,
    backend: &dyn ChatBackend,
    resume: Option<&str>,
) -> Result<(SessionFile, Option<Restored>), String> {
    match resume {
        Some(id) => SessionFile::resume(&config.session_dir, id, Some(&config.workspace))
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

/// The tools offered to the model: files, search, outline, git, plan, and the sandboxed shell.
pub fn tool_registry(config: &Config) -> crate::tool::ToolRegistry {
    let mut registry = crate::tool::registry::standard_tools();
    let defaults = crate::tool::shell::ShellConfig::default();
    let shell = crate::tool::shell::ShellConfig {
        sandbox: config.sandbox,
        network: config.network,
        writable: config.writable.clone(),
        max_processes: config.max_processes.unwrap_or(defaults.max_processes),
        ..defaults
    };
    for tool in crate::tool::shell::shell_tools(shell) {
        registry.register(tool);
    }
    match &config.tools {
        Some(names) => registry.only(names),
        None => registry,
    }
}

/// Builds everything from the configuration and starts the agent core on the current tokio
/// runtime: the entry point for every frontend (TUI, line REPL, `--exec`). `resume` is a
/// session id, a unique prefix, or `last`. Errors are setup problems (exit 2).
pub fn start_agent(
    config: &Config,
    headless: bool,
    resume: Option<&str>,
) -> Result<crate::protocol::AgentHandle, String> {
    let backend = build_backend(config)?;
    let agent = agent_config(config, headless)?;
    let (file, restored) = open_session(config, backend.as_ref(), resume)?;
    Ok(crate::agent::spawn_agent(
        agent,
        backend,
        tool_registry(config),
        file,
        restored,
    ))
}
