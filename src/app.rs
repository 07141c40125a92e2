//! The one builder: turns a resolved `Config` into a running agent core plus the facts a
//! frontend shows (backend, device, profile, sandbox, session). The command line calls it and
//! hands the result to a frontend (TUI, line REPL, `--exec`); no frontend assembles an agent.
//! Every failure here is a setup problem (exit 2) with a message that says what to do.

use crate::protocol::stdio::eprintln;
use std::path::PathBuf;
use std::sync::Arc;

use crate::agent::{AgentConfig, DEFAULT_SYSTEM_PROMPT};
use crate::backend::ChatBackend;
use crate::config::Config;
use crate::mol::SessionState;
use crate::mol::{Profile, ProfileNames};
use crate::protocol::{AgentHandle, AgentInfo, ApprovalPolicy, ErrorKind, Mode};
use crate::session::SessionFile;

/// Shown when there is nothing to talk to; `{config}` is the user config file as this process
/// would read it (`$XDG_CONFIG_HOME` honoured), so the advice points at the right file.
fn no_backend_help(user_config: Option<&std::path::Path>) -> String {
    format!(
        "{} `baton doctor` checks the result.",
        no_backend_advice(user_config)
    )
}

/// [`no_backend_help`] without the pointer to `baton doctor` (which doctor itself prints).
pub fn no_backend_advice(user_config: Option<&std::path::Path>) -> String {
    let config = match user_config {
        Some(p) => format!("`endpoint = \"…\"` in {}", p.display()),
        None => "`endpoint = \"…\"` in the user config file".to_string(),
    };
    format!(
        "no model to talk to. Point baton at an OpenAI-compatible server with
`--endpoint http://HOST:PORT/v1` (or {config}, or
BATON_ENDPOINT); the API key is read from $BATON_API_KEY. A MoL engine serving L0–L3 works as
is (--mode mol); for a routing proxy use --mode proxy --model NAME, for any other model
--mode single --model NAME. To run a local model instead, use --local ROOT (a folder with
base/ and loras/L0..L3)."
    )
}

/// Why an agent could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{}", no_backend_help(user_config.as_deref()))]
    NoBackend { user_config: Option<PathBuf> },
    #[error("--mode {0} needs a model name: pass --model NAME (or `model` in config.toml)")]
    ModelNameNeeded(Mode),
    #[error("local engine at {root}: {message}")]
    LocalEngine { root: PathBuf, message: String },
    #[error("{0}")]
    Endpoint(String),
    #[error("system_prompt {path}: cannot read: {source}")]
    SystemPrompt {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Profile(#[from] crate::mol::profile::ProfileError),
    #[error("profile {0} (--profile DIR, or `profile` in config.toml)")]
    ProfileFolder(String),
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    #[error(transparent)]
    StateDir(#[from] crate::mol::persist::StateDirError),
    #[error("{0} (fix it, or run with --no-hooks)")]
    Hooks(#[from] crate::hooks::HookError),
}

impl SetupError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            SetupError::LocalEngine { .. } => ErrorKind::Engine,
            SetupError::Session(_) | SetupError::SystemPrompt { .. } | SetupError::StateDir(_) => {
                ErrorKind::Io
            }
            _ => ErrorKind::Config,
        }
    }
}

/// Who the agent runs for: decides the default approval policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontend {
    /// A person at a terminal (TUI, line REPL): ask before acting.
    Interactive,
    /// `--exec`, eval trials: nobody to ask, so whatever needs a human is declined.
    Headless,
}

/// The model backend the configuration names, and the device notice of a local engine.
pub fn build_backend(
    config: &Config,
) -> Result<(Arc<dyn ChatBackend>, Option<String>), SetupError> {
    if let Some(root) = &config.local {
        let backend =
            crate::backend::local::LocalBackend::open(root, config.device).map_err(|e| {
                SetupError::LocalEngine {
                    root: root.clone(),
                    message: format!("{e:#}"),
                }
            })?;
        let device = Some(backend.device_name().to_string());
        if let Some(notice) = backend.device_notice() {
            eprintln!("baton: {notice}");
        }
        return Ok((Arc::new(backend), device));
    }
    let Some(endpoint) = &config.endpoint else {
        return Err(SetupError::NoBackend {
            user_config: crate::config::user_config_path(),
        });
    };
    if config.mode != Mode::Mol && config.model.is_none() {
        return Err(SetupError::ModelNameNeeded(config.mode));
    }
    let mut builder = crate::backend::remote::RemoteBackend::builder(endpoint.clone())
        .api_key(config.api_key())
        .dialect(config.route_constraint);
    let secs = std::time::Duration::from_secs;
    let t = config.backend_timeouts;
    if let Some(n) = t.connect {
        builder = builder.connect_timeout(secs(n));
    }
    if let Some(n) = t.request {
        builder = builder.request_timeout(secs(n));
    }
    if let Some(n) = t.idle {
        builder = builder.idle_timeout(secs(n));
    }
    builder
        .build()
        .map(|b| (Arc::new(b) as Arc<dyn ChatBackend>, None))
        .map_err(|e| SetupError::Endpoint(e.to_string()))
}

/// The experts' system prompt: the configured file, else the built-in one; then the project
/// instructions (AGENTS.md files) for the workspace.
pub fn system_prompt(config: &Config) -> Result<String, SetupError> {
    let prompt = match &config.system_prompt {
        Some(path) => read_prompt(config, path)?,
        None => DEFAULT_SYSTEM_PROMPT.to_string(),
    };
    Ok(with_project_context(config, prompt))
}

/// Reads a prompt file. One in a folder commands write (the workspace, `[sandbox] writable`)
/// is read beneath that folder with no link followed and no FIFO opened: a command could
/// have swapped it for a link to `~/.ssh/id_rsa`, which the next session would have sent to
/// the model (red team round 36; the trust digest covers the project's config, not the
/// files it names). One elsewhere is the user's own, read where its links lead.
fn read_prompt(config: &Config, path: &std::path::Path) -> Result<String, SetupError> {
    const MAX_PROMPT_BYTES: u64 = 1 << 20;
    let roots: Vec<&std::path::Path> = std::iter::once(config.workspace.as_path())
        .chain(config.writable.iter().map(std::path::PathBuf::as_path))
        .collect();
    let bytes = if crate::untrusted_fs::is_beneath(path, &roots) {
        crate::untrusted_fs::read_file(path, &roots, MAX_PROMPT_BYTES)
    } else {
        crate::untrusted_fs::read_following(path, MAX_PROMPT_BYTES)
    };
    let error = |source| SetupError::SystemPrompt {
        path: path.to_path_buf(),
        source,
    };
    let bytes = bytes.map_err(error)?;
    String::from_utf8(bytes)
        .map_err(|e| error(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))
}

/// Each expert's prompt and tools (`mol` mode). Prompt: its `lN_system_prompt` file, else the
/// profile's `experts/LN.md`, else the `system_prompt` file when one is set (it then stands for
/// every expert), else baton's built-in prompt for that expert; then the project instructions
/// and skills, as for the one prompt. Tools: `lN_tools`, else baton's default for the expert.
pub fn expert_setup(
    config: &Config,
    profile: &Profile,
) -> Result<crate::agent::ExpertSetup, SetupError> {
    let defaults = crate::agent::ExpertSetup::default();
    let mut setup = defaults.clone();
    for i in 0..4 {
        let own = match (&config.expert_system_prompt[i], &profile.expert_prompts[i]) {
            (Some(path), _) => Some(read_prompt(config, path)?),
            (None, Some(text)) => Some(text.clone()),
            (None, None) if config.system_prompt.is_some() => None,
            (None, None) => defaults.prompts[i].clone(),
        };
        setup.prompts[i] = own.map(|p| with_project_context(config, p));
        if let Some(tools) = &config.expert_tools[i] {
            setup.tools[i] = Some(tools.clone());
        }
    }
    Ok(setup)
}

/// `prompt` with the project instructions (AGENTS.md files) and the skills listing appended.
fn with_project_context(config: &Config, mut prompt: String) -> String {
    let instructions = project_instructions(config);
    if !instructions.text.is_empty() {
        prompt = format!("{}\n\n{}", prompt.trim_end(), instructions.text);
    }
    let skills = skills(config);
    if !skills.is_empty() {
        prompt = format!(
            "{}\n\n{}",
            prompt.trim_end(),
            crate::tool::skill::listing(&skills)
        );
    }
    prompt
}

/// The skills the experts are offered: none when `tools` leaves out the `skill` tool that
/// reads them.
pub fn skills(config: &Config) -> Vec<crate::config::commands::Skill> {
    if config
        .tools
        .as_ref()
        .is_some_and(|t| !t.iter().any(|n| n == "skill"))
    {
        return Vec::new();
    }
    crate::config::commands::discover_skills(&config.workspace).0
}

/// AGENTS.md (or CLAUDE.md) files from the repository root down to the workspace, plus the
/// user's own in the user config folder.
pub fn project_instructions(config: &Config) -> crate::agent::instructions::ProjectInstructions {
    let user_dir = dirs::config_dir().map(|d| d.join("baton"));
    crate::agent::instructions::discover(&config.workspace, user_dir.as_deref())
}

/// The MoL profile: the configured folder, else the built-in default.
pub fn profile(config: &Config) -> Result<Profile, SetupError> {
    match &config.profile {
        Some(dir) => {
            // Before reading its files: "cannot read lora.md" would hide that the folder is
            // missing altogether.
            if let Some(why) = crate::config::not_a_folder(dir) {
                return Err(SetupError::ProfileFolder(why));
            }
            Ok(Profile::load(dir, &ProfileNames::default())?)
        }
        None => Ok(Profile::builtin(&ProfileNames::default())),
    }
}

/// The approval policy in force: the configured one, else the frontend's default.
pub fn approval_policy(config: &Config, frontend: Frontend) -> ApprovalPolicy {
    config.approval.unwrap_or(match frontend {
        Frontend::Interactive => ApprovalPolicy::Ask,
        Frontend::Headless => ApprovalPolicy::Never,
    })
}

pub fn agent_config(config: &Config, frontend: Frontend) -> Result<AgentConfig, SetupError> {
    let profile = profile(config)?;
    Ok(AgentConfig {
        mode: config.mode,
        model: config.model.clone(),
        pinned: config.expert,
        reasoning: config.reasoning,
        approval: approval_policy(config, frontend),
        allowed_commands: config
            .allow
            .iter()
            .filter_map(|p| crate::config::command_prefix(p))
            .collect(),
        headless: frontend == Frontend::Headless,
        max_round_trips: config.max_turns,
        system_prompt: system_prompt(config)?,
        experts: expert_setup(config, &profile)?,
        profile,
        workspace: config.workspace.clone(),
        session_dir: config.session_dir.clone(),
        temperature: config.temperature,
        top_p: config.top_p,
        seed: config.seed,
        max_tokens: config.max_tokens,
        context_window: config.context_window,
        sandbox: config.sandbox,
        network: config.network,
        compact_at: config.compact_at,
        speculate: config.speculate,
        follow_ups: config.follow_ups,
        defer_summaries: config.defer_summary,
        hooks: hooks(config)?,
    })
}

/// The hooks of this run: the user's file and a trusted project's, none with `--no-hooks`.
pub fn hooks(config: &Config) -> Result<crate::hooks::Hooks, SetupError> {
    if config.no_hooks {
        return Ok(crate::hooks::Hooks::none());
    }
    // An unreadable trust list trusts nothing (the config layer has said so already).
    let trust = crate::config::TrustList::load().unwrap_or_default();
    let found = crate::hooks::discover(&config.workspace, &trust);
    Ok(crate::hooks::Hooks::load(&found)?)
}

/// Creates a new session file, or opens `resume` (an id, a prefix, or `last`) with the state
/// its records rebuild.
pub fn open_session(
    config: &Config,
    backend: &dyn ChatBackend,
    resume: Option<&str>,
) -> Result<(SessionFile, Option<SessionState>), SetupError> {
    Ok(match resume {
        Some(id) => {
            let (file, restored) =
                crate::mol::resume_session(&config.session_dir, id, Some(&config.workspace))?;
            (file, Some(restored))
        }
        None => (
            SessionFile::create(
                &config.session_dir,
                config.mode.as_str(),
                &backend.describe(),
                &config.workspace,
            )?,
            None,
        ),
    })
}

/// The tools offered to the model: files, search, outline, git, plan, the sandboxed shell,
/// and the tools of the configured MCP servers (started here, in the background).
pub fn tool_registry(config: &Config) -> crate::tool::ToolRegistry {
    let registry = builtin_tools(config);
    match mcp_servers(config) {
        Some(hub) => registry.with_mcp(hub),
        None => registry,
    }
}

/// Starts the configured MCP servers (`config.mcp_servers`: the user's, a trusted project's,
/// and any a frontend added from its client), none when there are none.
pub fn mcp_servers(config: &Config) -> Option<Arc<crate::tool::mcp::McpHub>> {
    if config.mcp_servers.is_empty() {
        return None;
    }
    Some(crate::tool::mcp::McpHub::start(
        config.mcp_servers.clone(),
        config.workspace.clone(),
        project_sandbox(config),
    ))
}

/// The sandbox a trusted project's stdio MCP servers run in: the session's, read-only.
pub fn project_sandbox(config: &Config) -> crate::tool::mcp::ProjectSandbox {
    crate::tool::mcp::ProjectSandbox {
        mode: config.sandbox,
        backend: config.sandbox_backend,
        readable: config.readable.clone(),
        unix_sockets: config.unix_sockets.clone(),
        env_keep: config.env_keep.clone(),
        env_drop: commands_env_drop(config),
    }
}

/// What the sandbox drops from commands' environment besides its patterns: `env_drop`, and
/// the variable holding baton's API key, whatever its name (`--api-key-env`).
fn commands_env_drop(config: &Config) -> Vec<String> {
    config
        .env_drop
        .iter()
        .cloned()
        .chain(std::iter::once(config.api_key_env.clone()))
        .collect()
}

fn builtin_tools(config: &Config) -> crate::tool::ToolRegistry {
    let mut registry = crate::tool::registry::standard_tools();
    let defaults = crate::tool::shell::ShellConfig::default();
    let shell = crate::tool::shell::ShellConfig {
        sandbox: config.sandbox,
        network: config.network,
        writable: config.writable.clone(),
        readable: config.readable.clone(),
        unix_sockets: config.unix_sockets.clone(),
        max_processes: config.max_processes.unwrap_or(defaults.max_processes),
        backend: config.sandbox_backend,
        max_memory: config.max_memory.map(|m| m << 20),
        env_keep: config.env_keep.clone(),
        env_drop: commands_env_drop(config),
        login: config.login_shell,
        no_color: config.no_color,
        ..defaults
    };
    for tool in crate::tool::shell::shell_tools(shell) {
        registry.register(tool);
    }
    let skills = skills(config);
    if !skills.is_empty() {
        registry.register(Arc::new(crate::tool::skill::SkillTool::new(skills)));
    }
    match &config.tools {
        Some(names) => registry.only(names),
        None => registry,
    }
}

/// Builds everything from the configuration and starts the agent core on the current tokio
/// runtime: the entry point for every frontend. `resume` is a session id, a unique prefix, or
/// `last`.
pub fn start(
    config: &Config,
    frontend: Frontend,
    resume: Option<&str>,
) -> Result<(AgentHandle, AgentInfo), SetupError> {
    let (backend, device) = build_backend(config)?;
    let agent = agent_config(config, frontend)?;
    let (file, restored) = open_session(config, backend.as_ref(), resume)?;
    let info = AgentInfo {
        session_id: file.id.clone(),
        session_file: file.path.clone(),
        backend: backend.describe(),
        endpoint: config.endpoint.clone(),
        mode: config.mode,
        model: config.model.clone(),
        device,
        profile: config
            .profile
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in".into()),
        sandbox: config.sandbox,
        weaker_sandbox: config.sandbox != crate::protocol::SandboxMode::Off
            && config.sandbox_backend == crate::sandbox::Backend::Landlock,
        approval: agent.approval,
        workspace: config.workspace.clone(),
        session_dir: config.session_dir.clone(),
    };
    let handle = crate::agent::spawn_agent(agent, backend, tool_registry(config), file, restored);
    Ok((handle, info))
}

/// What `baton serve` asks of the builder besides the configuration.
#[derive(Debug, Clone, Default)]
pub struct ServeSetup {
    /// The public model name; `None` = the profile's.
    pub served_model_name: Option<String>,
    /// SGLang's `BASE:ADAPTER` model names; `Some(None)` = take the base from `/v1/models`.
    pub base_colon_adapter: Option<Option<String>>,
    /// Requests in flight upstream at most (`None` = no cap).
    pub upstream_concurrency: Option<usize>,
    pub limits: crate::mol::StoreLimits,
    /// Where conversations and stored responses survive a restart (`None`: memory only).
    pub state_dir: Option<PathBuf>,
}

/// Assembles the MoL loop as a service of conversations over the configured backend, for a
/// server frontend: the same backend, profile and `mol/` code the agent runs on.
pub async fn mol_service(
    config: &Config,
    setup: &ServeSetup,
    observer: Arc<dyn crate::protocol::ServiceObserver>,
) -> Result<Arc<dyn crate::protocol::MolService>, SetupError> {
    let (backend, _device) = build_backend(config)?;
    let profile = profile(config)?;
    let naming = match &setup.base_colon_adapter {
        None => crate::backend::upstream::AdapterNaming::Adapter,
        Some(Some(base)) => {
            crate::backend::upstream::AdapterNaming::BaseColonAdapter { base: base.clone() }
        }
        Some(None) => {
            let models = backend.list_models().await.map_err(|e| {
                SetupError::Endpoint(format!(
                    "--lora-name-style base:adapter needs the base model's name: {e} \
                     (name it with --lora-base NAME)"
                ))
            })?;
            let adapters: Vec<&str> = profile
                .experts
                .iter()
                .map(|e| e.adapter_name.as_str())
                .collect();
            let base = models
                .iter()
                .map(|m| m.id.clone())
                .find(|id| !adapters.contains(&id.as_str()))
                .ok_or_else(|| {
                    SetupError::Endpoint(
                        "--lora-name-style base:adapter: the endpoint lists no base model \
                         (name it with --lora-base NAME)"
                            .into(),
                    )
                })?;
            crate::backend::upstream::AdapterNaming::BaseColonAdapter { base }
        }
    };
    let upstream: Arc<dyn ChatBackend> = Arc::new(crate::backend::upstream::Upstream::new(
        backend,
        setup.upstream_concurrency,
        naming,
    ));
    let served = setup
        .served_model_name
        .clone()
        .unwrap_or_else(|| profile.model_name.clone());
    let mut conversations =
        crate::mol::Conversations::new(upstream, profile, served, setup.limits.clone(), observer)
            .speculating(config.speculate)
            .following_up(config.follow_ups);
    if let Some(dir) = &setup.state_dir {
        conversations.persist_to(dir)?;
    }
    let conversations = Arc::new(conversations);
    conversations.spawn_sweeper();
    Ok(Arc::new(crate::mol::ConversationService(conversations)))
}
