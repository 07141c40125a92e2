//! The agent core: sessions of turns, the turn loop (stream → tool calls → results), approvals.
//!
//! `spawn_agent` starts the core on tokio and returns an `AgentHandle`: `Op`s go in, `Event`s
//! come out. The TUI, the line REPL, `--exec` and the tests are all clients of that handle.
//! One turn runs at a time; user turns sent while one runs are queued. Summary hops run as
//! background tasks after their turn and are awaited only by a turn whose expert needs them
//! and by shutdown.

pub mod approval;
mod context;
mod core_loop;
pub mod instructions;
mod summaries;
mod tool_calls;
mod turn;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::backend::ChatBackend;
use crate::mol::{Profile, Timeline};
use crate::protocol::{AgentHandle, ApprovalDecision, EventSink, Expert};
use crate::protocol::{ApprovalPolicy, Mode};
use crate::protocol::{ChatMessage, ReasoningEffort};
use crate::session::{Record, Restored, SessionFile};
use crate::tool::{ToolRegistry, ToolState};

/// The experts' built-in system prompt (overridable with `system_prompt` in config).
pub const DEFAULT_SYSTEM_PROMPT: &str = include_str!("prompts/system.md");

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
    pub profile: Profile,
    pub workspace: PathBuf,
    pub session_dir: PathBuf,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    /// The experts' context window in tokens; `None` = ask the server (`/models`).
    pub context_window: Option<u64>,
    /// Compact when a view passes this fraction of the window (`compact_at`; default 0.85).
    pub compact_at: Option<f64>,
}

/// State shared by the op loop, the running turn and the background summary tasks.
/// Locks are held only for short, non-async sections.
pub(crate) struct Shared {
    pub cfg: AgentConfig,
    pub backend: Arc<dyn ChatBackend>,
    pub tools: ToolRegistry,
    pub tool_state: Arc<ToolState>,
    pub events: EventSink,
    pub timeline: Mutex<Timeline>,
    pub session: Mutex<SessionFile>,
    pub pinned: Mutex<Option<Expert>>,
    pub model: Mutex<Option<String>>,
    pub conversation_id: Mutex<Option<String>>,
    pub next_turn_id: Mutex<u64>,
    pub approved_prefixes: Mutex<Vec<Vec<String>>>,
    pub pending_approvals: Mutex<HashMap<String, oneshot::Sender<ApprovalDecision>>>,
    pub summaries: Mutex<HashMap<u64, tokio::task::JoinHandle<()>>>,
    pub context: Mutex<context::ContextState>,
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (a panic is a bug,
/// but the session file must still be written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// The system head of every answer and summary request: the experts' system prompt, with
    /// the profile's identity prompt appended in `mol` mode (§4.3).
    pub fn head(&self) -> Vec<ChatMessage> {
        let mut system = format!(
            "{}\n\nWorkspace: {}",
            self.cfg.system_prompt.trim_end(),
            self.cfg.workspace.display()
        );
        if self.cfg.headless {
            system.push_str(
                "\nThis run is headless: nobody can answer questions or approve actions.",
            );
        }
        let head = [ChatMessage::system(system)];
        crate::mol::modes::system_head(self.cfg.mode, &self.cfg.profile, &head)
    }

    /// Appends a session record; a failed write becomes a warning, never a dead turn.
    pub fn record(&self, record: Record) {
        if let Err(e) = lock(&self.session).append(&record) {
            self.events.emit(crate::protocol::Event::Warning {
                message: e.to_string(),
            });
        }
    }
}

/// Starts the agent core on the current tokio runtime. `restored` continues a saved session.
pub fn spawn_agent(
    cfg: AgentConfig,
    backend: Arc<dyn ChatBackend>,
    tools: ToolRegistry,
    session: SessionFile,
    restored: Option<Restored>,
) -> AgentHandle {
    let (events, events_rx) = EventSink::channel();
    let (ops_tx, ops_rx) = tokio::sync::mpsc::unbounded_channel();
    let resumed = restored.is_some();
    let restored = restored.unwrap_or_default();
    let conversation_id = restored
        .conversation_id
        .clone()
        .or_else(|| Some(format!("baton-{}", session.id.replace('-', ""))));
    let tool_state = Arc::new(ToolState::default());
    crate::tool::checkpoint::set_session(&tool_state, &session.id);
    let shared = Arc::new(Shared {
        pinned: Mutex::new(cfg.pinned),
        model: Mutex::new(cfg.model.clone()),
        cfg,
        backend,
        tools,
        tool_state,
        events,
        timeline: Mutex::new(restored.timeline),
        session: Mutex::new(session),
        conversation_id: Mutex::new(conversation_id),
        next_turn_id: Mutex::new(restored.next_turn_id.max(1)),
        approved_prefixes: Mutex::new(Vec::new()),
        pending_approvals: Mutex::new(HashMap::new()),
        summaries: Mutex::new(HashMap::new()),
        context: Mutex::new(context::ContextState::default()),
    });
    tokio::spawn(core_loop::run(shared, ops_rx, resumed));
    AgentHandle {
        ops: ops_tx,
        events: events_rx,
    }
}

#[cfg(test)]
mod tests;
