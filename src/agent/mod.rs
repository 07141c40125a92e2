//! The agent core: sessions of turns, the turn loop (stream → tool calls → results), approvals.
//!
//! `spawn_agent` starts the core on tokio and returns an `AgentHandle`: `Op`s go in, `Event`s
//! come out. The TUI, the line REPL, `--exec` and the tests are all clients of that handle.
//! One turn runs at a time; user turns sent while one runs are queued. Summary hops run as
//! background tasks after their turn and are awaited only by a turn whose expert needs them
//! and by shutdown. Session state changes only through `Shared::commit`: a record applied to
//! the in-memory state and appended to the session file in one call, with the same fold
//! resume uses.

pub(crate) mod approval;
mod context;
mod core_loop;
mod environment;
mod hooks;
pub(crate) mod instructions;
mod probe;
mod summaries;
mod tool_calls;
mod turn;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::backend::ChatBackend;
use crate::mol::{Profile, SessionState};
use crate::protocol::{AgentHandle, ApprovalDecision, Event, EventSink, Expert, Hop, TokenUsage};
use crate::protocol::{ApprovalPolicy, Mode};
use crate::protocol::{ChatMessage, ReasoningEffort, ToolSpec};
use crate::session::{Record, SessionFile};
use crate::tool::{ToolRegistry, ToolState};

/// The built-in system prompt of the coding expert (L2), and of the one model of `proxy` and
/// `single` modes (overridable with `system_prompt` in config).
pub const DEFAULT_SYSTEM_PROMPT: &str = include_str!("prompts/system.md");

/// baton's built-in prompts of the other experts: L0 chat, L1 long tool-using tasks, L3
/// generative UI (TSX components).
pub const DEFAULT_EXPERT_PROMPTS: [&str; 4] = [
    include_str!("prompts/L0.md"),
    include_str!("prompts/L1.md"),
    DEFAULT_SYSTEM_PROMPT,
    include_str!("prompts/L3.md"),
];

/// The entry of an expert's tool list that stands for every MCP server's tools.
pub const MCP_TOOLS: &str = "mcp";

/// What each expert of `mol` mode is given: its own system prompt and its own tool set.
/// Outside `mol` mode there are no experts: `AgentConfig::system_prompt` and every tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertSetup {
    /// Per expert (index = L0..L3): its system prompt; `None` = `AgentConfig::system_prompt`.
    pub prompts: [Option<String>; 4],
    /// Per expert: the names of the tools it is offered (built-in names, `handoff`, and `mcp`
    /// for every MCP tool); `None` = every tool of the registry.
    pub tools: [Option<Vec<String>>; 4],
}

impl Default for ExpertSetup {
    /// baton's defaults: each expert its own prompt; L0 (chat) no workspace tools, only
    /// `handoff` (and MCP tools, its "simple lookup"); L1–L3 every tool.
    fn default() -> Self {
        ExpertSetup {
            prompts: DEFAULT_EXPERT_PROMPTS.map(|p| Some(p.to_string())),
            tools: [
                Some(
                    crate::protocol::L0_DEFAULT_TOOLS
                        .map(str::to_string)
                        .to_vec(),
                ),
                None,
                None,
                None,
            ],
        }
    }
}

impl ExpertSetup {
    /// One prompt and every tool for all experts (the behaviour before per-expert setups).
    pub fn uniform() -> Self {
        ExpertSetup {
            prompts: [None, None, None, None],
            tools: [None, None, None, None],
        }
    }
}

/// Everything the core needs to know about how to run turns.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub mode: Mode,
    /// The model name in `proxy` and `single` modes.
    pub model: Option<String>,
    /// `--expert`: skip routing.
    pub pinned: Option<Expert>,
    pub reasoning: Option<ReasoningEffort>,
    pub approval: ApprovalPolicy,
    /// Command prefixes allowed without asking (`[approval] allow`), as parsed argv words.
    pub allowed_commands: Vec<Vec<String>>,
    /// No human is there to answer approval requests (`--exec`).
    pub headless: bool,
    /// Model round trips allowed per user turn (`--max-turns`).
    pub max_round_trips: Option<u32>,
    pub system_prompt: String,
    /// Each expert's own prompt and tools (`mol` mode).
    pub experts: ExpertSetup,
    pub profile: Profile,
    pub workspace: PathBuf,
    pub session_dir: PathBuf,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    /// The sandbox commands run in and whether they have the network, as the environment
    /// block tells the experts.
    pub sandbox: crate::protocol::SandboxMode,
    pub network: bool,
    /// The experts' context window in tokens; `None` = ask the server (`/models`).
    pub context_window: Option<u64>,
    /// Compact when a view passes this fraction of the window (`compact_at`; default 0.85).
    pub compact_at: Option<f64>,
    /// The user's hook commands (none with `--no-hooks`).
    pub hooks: crate::hooks::Hooks,
    /// Whether a new user turn's answer hop is sent with its route hop (`mol` mode).
    pub speculate: crate::protocol::Speculate,
    /// Whether a short follow-up stays with the previous expert (`mol::follow_up`).
    pub follow_ups: crate::protocol::FollowUps,
    /// No summary hop when a task closes: a later turn that needs the summary makes it
    /// (`--defer-summary`).
    pub defer_summaries: bool,
}

/// State shared by the op loop, the running turn and the background summary tasks.
/// Locks are held only for short, non-async sections.
pub(crate) struct Shared {
    pub cfg: AgentConfig,
    pub backend: Arc<dyn ChatBackend>,
    pub tools: ToolRegistry,
    pub tool_state: Arc<ToolState>,
    pub events: EventSink,
    /// The session's state and its file, changed only by `commit`.
    session: Mutex<Store>,
    pub pinned: Mutex<Option<Expert>>,
    /// Why the running turn is being stopped, for the model (`None`: by the user).
    pub stop_reason: Mutex<Option<String>>,
    pub model: Mutex<Option<String>>,
    /// The approval policy in force: `cfg.approval` at start, changed by
    /// `Op::SetApprovalPolicy` while the session runs.
    pub approval: Mutex<ApprovalPolicy>,
    pub approved_prefixes: Mutex<Vec<Vec<String>>>,
    pub pending_approvals: Mutex<HashMap<String, oneshot::Sender<ApprovalDecision>>>,
    pub summaries: Mutex<HashMap<u64, tokio::task::JoinHandle<()>>>,
    pub context: Mutex<context::ContextState>,
    /// The backend's model list, asked at most once while it answers: the start-up check and
    /// the first turn's context-window lookup share it.
    pub models: tokio::sync::OnceCell<Vec<crate::backend::ModelInfo>>,
    /// What `SessionStart` hooks gave the model, added to the next user turn.
    pub hook_context: Mutex<Vec<String>>,
    /// The environment block of the system prompt, taken at start.
    environment: environment::Environment,
}

/// A session's state with the file its records go to: one lock, so the order of records in
/// the file is the order they were applied in.
struct Store {
    state: SessionState,
    file: SessionFile,
}

/// Read access to the session state (changes go through `Shared::commit`).
pub(crate) struct StateRef<'a>(MutexGuard<'a, Store>);

impl std::ops::Deref for StateRef<'_> {
    type Target = SessionState;
    fn deref(&self) -> &SessionState {
        &self.0.state
    }
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (a panic is a bug,
/// but the session file must still be written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The expert's own setup, in `mol` mode (none outside it: one prompt, every tool).
    fn expert_setup(&self, expert: Expert) -> (Option<&str>, Option<&[String]>) {
        if self.cfg.mode != Mode::Mol {
            return (None, None);
        }
        let i = expert.index();
        (
            self.cfg.experts.prompts[i].as_deref(),
            self.cfg.experts.tools[i].as_deref(),
        )
    }

    /// The tools `expert` is offered: its list (built-in names, `handoff`, `mcp` for every MCP
    /// tool), else every tool of the registry.
    pub fn tool_specs(&self, expert: Expert) -> Vec<ToolSpec> {
        let (_, list) = self.expert_setup(expert);
        let Some(list) = list else {
            return self.tools.specs();
        };
        let mcp = list.iter().any(|n| n == MCP_TOOLS);
        let mut specs: Vec<ToolSpec> = self
            .tools
            .specs()
            .into_iter()
            .filter(|s| list.contains(&s.name) || (mcp && s.name.starts_with("mcp__")))
            .collect();
        if list.iter().any(|n| n == crate::mol::HANDOFF_TOOL) {
            specs.push(crate::mol::handoff_spec());
        }
        specs
    }

    /// Whether `expert` is offered the tool `name` (a call of any other is answered as a
    /// tool that does not exist).
    pub fn offers(&self, expert: Expert, name: &str) -> bool {
        match self.expert_setup(expert).1 {
            None => self.tools.get(name).is_some(),
            Some(_) => self.tool_specs(expert).iter().any(|s| s.name == name),
        }
    }

    /// What `expert`'s tools reach: the workspace (any built-in tool), else what may need
    /// approval (MCP tools), else nothing (`handoff` alone).
    fn reach(&self, expert: Expert) -> environment::Reach {
        let tools = self.tool_specs(expert);
        let names = || {
            tools
                .iter()
                .map(|t| t.name.as_str())
                .filter(|n| *n != crate::mol::HANDOFF_TOOL)
        };
        if names().any(|n| !n.starts_with("mcp__")) {
            environment::Reach::Workspace
        } else if names().next().is_some() {
            environment::Reach::Approved
        } else {
            environment::Reach::Nothing
        }
    }

    /// The system head of `expert`'s answer and summary requests: its system prompt, the
    /// workspace and the environment as far as its tools reach (`environment::Reach`), with
    /// the profile's identity prompt appended in `mol` mode.
    pub fn head(&self, expert: Expert) -> Vec<ChatMessage> {
        let prompt = self
            .expert_setup(expert)
            .0
            .unwrap_or(&self.cfg.system_prompt);
        let reach = self.reach(expert);
        let environment =
            self.environment
                .render_for(reach, *lock(&self.approval), self.cfg.headless);
        let system = match reach {
            environment::Reach::Workspace => format!(
                "{}\n\nWorkspace: {}\n{environment}",
                prompt.trim_end(),
                self.cfg.workspace.display(),
            ),
            _ => format!("{}\n\n{environment}", prompt.trim_end()),
        };
        let head = [ChatMessage::system(system)];
        crate::mol::modes::system_head(self.cfg.mode, &self.cfg.profile, &head)
    }

    /// The session state, read-only; hold it only for short, non-async sections.
    pub fn state(&self) -> StateRef<'_> {
        StateRef(lock(&self.session))
    }

    /// The open session file's id and path.
    pub fn session_file(&self) -> (String, PathBuf) {
        let store = lock(&self.session);
        (store.file.id.clone(), store.file.path.clone())
    }

    /// Applies a record to the session state and appends it to the session file, in one
    /// call; a failed write becomes a warning, never a dead turn.
    pub fn commit(&self, record: Record) {
        let result = {
            let mut store = lock(&self.session);
            let Store { state, file } = &mut *store;
            state.commit(file, record)
        };
        if let Err(e) = result {
            self.events.emit(Event::Warning {
                message: e.to_string(),
            });
        }
    }

    /// `commit` for a record that may have nothing to do (a shrink, a compaction): written
    /// only when it changed the state. Returns whether it did.
    pub fn commit_change(&self, record: Record) -> bool {
        let result = {
            let mut store = lock(&self.session);
            let Store { state, file } = &mut *store;
            state.commit_change(file, record)
        };
        result.unwrap_or_else(|e| {
            self.events.emit(Event::Warning {
                message: e.to_string(),
            });
            true
        })
    }

    /// Closes the session file and releases its lock (shutdown): the session may be resumed
    /// by another process as soon as `ShutdownComplete` is out.
    fn close_session(&self) {
        lock(&self.session).file.close();
    }

    /// Replaces the session (`/new`, `/resume`): its file and the state its records rebuild.
    fn adopt(&self, file: SessionFile, state: SessionState) {
        *lock(&self.session) = Store { state, file };
    }

    /// Reports a finished hop: `HopCompleted`, its usage recorded into the turn's and the
    /// session's totals, and the new session total.
    pub fn hop_completed(
        &self,
        turn_id: u64,
        hop: Hop,
        expert: Option<Expert>,
        latency_ms: u64,
        ttft_ms: Option<u64>,
        usage: TokenUsage,
    ) {
        self.events.emit(Event::HopCompleted {
            turn_id,
            hop,
            expert,
            latency_ms,
            ttft_ms,
            usage,
        });
        if usage.is_zero() {
            return;
        }
        self.commit(Record::Usage {
            turn_id,
            hop,
            usage,
        });
        let total = self.state().usage;
        self.events.emit(Event::SessionUsage { usage: total });
    }
}

/// Starts the agent core on the current tokio runtime. `restored` continues a saved session
/// (the state its records rebuild: `crate::mol::resume_session`).
pub fn spawn_agent(
    cfg: AgentConfig,
    backend: Arc<dyn ChatBackend>,
    tools: ToolRegistry,
    session: SessionFile,
    restored: Option<SessionState>,
) -> AgentHandle {
    start(cfg, backend, tools, session, restored).0
}

fn start(
    cfg: AgentConfig,
    backend: Arc<dyn ChatBackend>,
    tools: ToolRegistry,
    session: SessionFile,
    restored: Option<SessionState>,
) -> (AgentHandle, Arc<Shared>) {
    let (events, events_rx) = EventSink::channel();
    if let Some(hub) = tools.mcp() {
        hub.attach(events.clone());
    }
    let (ops_tx, ops_rx) = tokio::sync::mpsc::unbounded_channel();
    let resumed = restored.is_some();
    let state = restored.unwrap_or_else(|| SessionState::of_new_file(&session));
    let tool_state = Arc::new(ToolState::default());
    crate::tool::checkpoint::configure(
        &tool_state,
        crate::tool::checkpoint::StoreConfig::for_session_dir(&cfg.session_dir),
    );
    let environment = environment::Environment::take(&cfg.workspace, cfg.sandbox, cfg.network);
    let shared = Arc::new(Shared {
        environment,
        pinned: Mutex::new(cfg.pinned),
        stop_reason: Mutex::new(None),
        model: Mutex::new(cfg.model.clone()),
        approval: Mutex::new(cfg.approval),
        cfg,
        backend,
        tools,
        tool_state,
        events,
        session: Mutex::new(Store {
            state,
            file: session,
        }),
        approved_prefixes: Mutex::new(Vec::new()),
        pending_approvals: Mutex::new(HashMap::new()),
        summaries: Mutex::new(HashMap::new()),
        context: Mutex::new(context::ContextState::default()),
        models: tokio::sync::OnceCell::new(),
        hook_context: Mutex::new(Vec::new()),
    });
    probe::report_retries(&shared, shared.events.clone());
    tokio::spawn(core_loop::run(shared.clone(), ops_rx, resumed));
    (
        AgentHandle {
            ops: ops_tx,
            events: events_rx,
        },
        shared,
    )
}

#[cfg(test)]
mod tests;
