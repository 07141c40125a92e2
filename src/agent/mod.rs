//! The agent core: sessions of turns, the turn loop (stream → tool calls → results), approvals.
//!
//! `spawn_agent` starts the core on tokio and returns an `AgentHandle`: `Op`s go in, `Event`s
//! come out. The TUI, the line REPL, `--exec` and the tests are all clients of that handle.
//! One turn runs at a time; user turns sent while one runs are queued. Summary hops run as
//! background tasks after their turn (B2) and are awaited only by a turn whose expert needs them
//! and by shutdown.

pub mod approval;
pub mod basic_tools;
mod core_loop;
pub mod mol_bridge;
mod summaries;
mod tool_calls;
mod turn;

pub use approval::ApprovalPolicy;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::backend::{ChatBackend, ReasoningEffort};
use crate::config::Mode;
use crate::protocol::{AgentHandle, ApprovalDecision, EventSink, Expert};
use crate::session::{Record, Restored, SessionFile};
use crate::tool::{ToolRegistry, ToolState};
use mol_bridge::{Profile, Timeline};

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
}

/// Locks a mutex, recovering the data if a panicking thread poisoned it (a panic is a bug,
/// but the session file must still be written).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
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
    let shared = Arc::new(Shared {
        pinned: Mutex::new(cfg.pinned),
        model: Mutex::new(cfg.model.clone()),
        cfg,
        backend,
        tools,
        tool_state: Arc::new(ToolState::default()),
        events,
        timeline: Mutex::new(restored.timeline),
        session: Mutex::new(session),
        conversation_id: Mutex::new(conversation_id),
        next_turn_id: Mutex::new(restored.next_turn_id.max(1)),
        approved_prefixes: Mutex::new(Vec::new()),
        pending_approvals: Mutex::new(HashMap::new()),
        summaries: Mutex::new(HashMap::new()),
    });
    tokio::spawn(core_loop::run(shared, ops_rx, resumed));
    AgentHandle {
        ops: ops_tx,
        events: events_rx,
    }
}

#[cfg(test)]
mod tests;
