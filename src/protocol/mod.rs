//! The ground floor: the one protocol between the agent core and every frontend (`Op` goes in,
//! `Event` comes out) and the types that more than one layer names — chat messages and tool
//! schemas, the run options, error kinds and exit codes.
//!
//! This module holds only types and imports nothing else of the crate. The TUI, the headless
//! `--exec` runner and the tests are all clients of it. `Event` serializes to the stable
//! `--exec --json` schema (docs/events.md): one JSON object a line, tagged by `type`, names in
//! snake_case.

mod chat;
mod error;
pub mod host_programs;
mod mcp;
mod options;
mod service;
pub(crate) mod stdio;
mod terminal_text;
mod tls;

pub use chat::{ChatMessage, ReasoningEffort, Role, ToolCall, ToolSpec};
pub use error::{ErrorKind, exit};
pub use mcp::McpServerSpec;
pub use options::{
    ApprovalPolicy, Choice, DeviceChoice, FollowUps, Mode, RouteConstraint, SandboxBackend,
    SandboxMode, Speculate, UnknownName, default_memory_bound,
};
pub use service::{
    HopSample, MolService, ServiceFuture, ServiceObserver, SpeculationOutcome, SpeculationSample,
    StateEvent, TurnDone, TurnError, TurnErrorKind, TurnEvent, TurnFinish, TurnHandle, TurnInput,
    TurnOptions, TurnRouted,
};
pub use terminal_text::{is_spoofing_char, terminal_safe, terminal_safe_json, terminal_safe_line};
pub use tls::install_tls_provider;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

/// The tools L0 (chat) is offered unless configured (`l0_tools`): `handoff` (pass the turn to
/// another expert) and `mcp` (every MCP tool); L1–L3 are offered every tool. Here so the agent
/// and the project-trust rules read one list.
pub const L0_DEFAULT_TOOLS: [&str; 2] = ["handoff", "mcp"];

/// One of the four LoRA experts of a MoL model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Expert {
    L0,
    L1,
    L2,
    L3,
}

impl Expert {
    pub const ALL: [Expert; 4] = [Expert::L0, Expert::L1, Expert::L2, Expert::L3];

    pub fn label(self) -> &'static str {
        match self {
            Expert::L0 => "L0",
            Expert::L1 => "L1",
            Expert::L2 => "L2",
            Expert::L3 => "L3",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// Parses a canonical label, case-insensitively (`"l2"` → L2). Anything else is `None`.
    pub fn parse(label: &str) -> Option<Expert> {
        match label.trim().to_ascii_uppercase().as_str() {
            "L0" => Some(Expert::L0),
            "L1" => Some(Expert::L1),
            "L2" => Some(Expert::L2),
            "L3" => Some(Expert::L3),
            _ => None,
        }
    }
}

impl std::fmt::Display for Expert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

impl std::str::FromStr for Expert {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Expert::parse(s).ok_or_else(|| format!("'{s}' is not an expert label (L0, L1, L2 or L3)"))
    }
}

/// A hop of the MoL loop, or a plain request in `proxy`/`single` mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hop {
    Route,
    Answer,
    Summary,
    Compaction,
}

impl Hop {
    pub fn as_str(self) -> &'static str {
        match self {
            Hop::Route => "route",
            Hop::Answer => "answer",
            Hop::Summary => "summary",
            Hop::Compaction => "compaction",
        }
    }
}

impl std::fmt::Display for Hop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the expert of a turn was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteDecision {
    /// L0 produced a valid label.
    Model,
    /// The route hop failed or gave garbage; the fallback rule chose.
    Fallback,
    /// The user pinned an expert (`--expert`, `/expert`).
    Pinned,
    /// A tool result continued on the expert that issued the call: no route hop.
    Sticky,
    /// A short follow-up stayed with the expert that answered the previous request: no route
    /// hop (`follow_ups = "sticky"`).
    FollowUp,
    /// `single` or `proxy` mode: there is no client-side routing.
    None,
}

/// The user's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum ApprovalDecision {
    Approve,
    /// Approve, and do not ask again for commands with this argv prefix in this session.
    ApproveForPrefix {
        prefix: Vec<String>,
    },
    Deny,
    /// Deny and tell the model why.
    DenyWithReason {
        reason: String,
    },
}

/// Input to the agent core.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// A new user turn.
    UserTurn { text: String },
    /// The answer to an `Event::ApprovalRequested`.
    Approval {
        call_id: String,
        decision: ApprovalDecision,
    },
    /// Stop the running turn; the session stays usable.
    Interrupt,
    /// [`Op::Interrupt`] for a reason other than the user's: what the model is told of the
    /// calls it stops ("the run's time limit (--timeout) was reached").
    InterruptFor { reason: String },
    /// Undo the last turn's file changes (or redo the last undo). With `apply: false` only
    /// the plan is worked out and shown (`Event::UndoPlanned`): the TUI asks before applying.
    Undo {
        redo: bool,
        apply: bool,
        force: bool,
    },
    /// Compact the active expert's view now (`/compact`).
    Compact,
    /// Pin an expert (skip routing) or unpin with `None`.
    PinExpert { expert: Option<Expert> },
    /// Run a shell command typed by the user (`!cmd` in the TUI) through the sandboxed shell tool.
    UserShell { command: String },
    /// Start a fresh session (`/new`).
    NewSession,
    /// Switch to a saved session (`/resume ID`, `last` for the newest).
    ResumeSession { id: String },
    /// Change the model name (`/model`, proxy and single modes).
    SetModel { model: String },
    /// Name the open session (`/rename NAME`; empty clears it): recorded in its file, shown by
    /// `baton sessions` and the `/resume` picker.
    RenameSession { name: String },
    /// Change when tool calls ask first (`/approvals`, Shift+Tab); from the next tool call on,
    /// the running turn's included. Confirmed by `Event::ApprovalPolicyChanged`.
    SetApprovalPolicy { policy: ApprovalPolicy },
    /// End the session: save, kill children, emit `ShutdownComplete`.
    Shutdown,
    /// The workspace's changes against HEAD plus untracked files (`/diff`); answered by one
    /// `Event::WorkspaceDiff`, also while a turn runs.
    WorkspaceDiff,
    /// The MCP servers with their state (`/mcp`); answered by one `Event::McpServers`.
    McpStatus,
}

/// What kind of action waits for approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApprovalRequest {
    /// A shell command (argv as parsed, and the raw text).
    Command {
        command: String,
        argv: Vec<String>,
        cwd: String,
        /// What "yes, don't ask again" would remember, exactly; `None` when not offered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remember: Option<Vec<String>>,
    },
    /// A file change, shown as a unified diff.
    Edit { path: String, diff: String },
}

/// Where an MCP server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpServerState {
    Starting,
    Ready,
    Failed,
    Disabled,
}

/// One MCP server as `/mcp` and `baton mcp list` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpServerStatus {
    pub name: String,
    pub state: McpServerState,
    /// The command line or URL.
    pub transport: String,
    pub required: bool,
    /// The tools offered, as the model calls them (`mcp__SERVER__TOOL`).
    pub tools: Vec<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Status of one plan item (`update_plan` tool).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Completed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub step: String,
    pub status: PlanStatus,
}

/// How a tool call ended (the wire values are documented in docs/events.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolStatus {
    /// The tool did what was asked; a command exited 0 (or is still running in a session).
    Ok,
    /// The tool could not do what was asked (bad arguments, unknown tool, I/O error, a command
    /// that could not be started).
    Error,
    /// A command ran to its end and exited non-zero: the command's own failure, not the tool's.
    Failed,
    /// Declined by the approval policy or the user.
    Declined,
    /// A command ran past its timeout and was killed, or blocked waiting for input.
    TimedOut,
    /// Stopped by the user (Ctrl+C, `/stop`) or a command killed on request.
    Interrupted,
}

/// How a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    Done,
    Interrupted,
    /// `--max-turns` or `--timeout` was reached.
    LimitReached,
    Error,
}

/// Token counts of one request, or accumulated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens served from a prefix cache, when the server reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Counted by baton from the text (about four characters a token) because the server
    /// reported no usage; a sum is estimated when any of its parts is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

impl TokenUsage {
    /// Adds `other`, saturating: the numbers come from a server, and an absurd report must
    /// not panic the turn (or, replayed, every resume of the session).
    pub fn add(&mut self, other: &TokenUsage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
        if let Some(c) = other.cached_tokens {
            let cached = self.cached_tokens.get_or_insert(0);
            *cached = cached.saturating_add(c);
        }
        self.estimated |= other.estimated;
    }

    pub fn is_zero(&self) -> bool {
        self.prompt_tokens == 0 && self.completion_tokens == 0 && self.cached_tokens.is_none()
    }
}

/// Token use broken down by hop, with the sum over all hops: of one turn, or of a session.
/// Made by the core only, so every frontend shows the same numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageTotals {
    /// The sum of the four hops below.
    pub total: TokenUsage,
    #[serde(default)]
    pub route: TokenUsage,
    #[serde(default)]
    pub answer: TokenUsage,
    #[serde(default)]
    pub summary: TokenUsage,
    #[serde(default)]
    pub compaction: TokenUsage,
}

impl UsageTotals {
    /// Counts one hop's usage.
    pub fn add(&mut self, hop: Hop, usage: &TokenUsage) {
        self.total.add(usage);
        match hop {
            Hop::Route => self.route.add(usage),
            Hop::Answer => self.answer.add(usage),
            Hop::Summary => self.summary.add(usage),
            Hop::Compaction => self.compaction.add(usage),
        }
    }

    pub fn hop(&self, hop: Hop) -> TokenUsage {
        match hop {
            Hop::Route => self.route,
            Hop::Answer => self.answer,
            Hop::Summary => self.summary,
            Hop::Compaction => self.compaction,
        }
    }
}

/// How a path of the workspace differs from HEAD (`Event::WorkspaceDiff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileChange {
    Added,
    Modified,
    Deleted,
    Renamed,
    /// File ↔ symlink, or the executable bit.
    TypeChanged,
    /// Not tracked and not ignored.
    Untracked,
}

/// One changed path of the workspace, relative to the repository root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedFile {
    pub path: String,
    pub change: FileChange,
    /// The path in HEAD, for a rename.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
}

/// Output of the agent core. The serde form is the `--exec --json` schema: keep names stable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    /// First event of every run: what this session talks to.
    Session {
        session_id: String,
        /// `mol`, `proxy` or `single`.
        mode: String,
        /// Endpoint URL, or `local:ROOT` for the in-process engine.
        backend: String,
        /// The model the session talks to: the profile's public model name in `mol` mode (its
        /// experts are that model's adapters), the `--model` name in `proxy` and `single`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        workspace: String,
        resumed: bool,
        /// Path of the session file.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session_file: Option<String>,
        /// The project instruction files (AGENTS.md / CLAUDE.md) given to every expert, in the
        /// order they are given (for `/status`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        instructions: Vec<String>,
    },
    TurnStarted {
        turn_id: u64,
        text: String,
    },
    /// A hop request was sent (status line phases: routing / answering / summarizing).
    HopStarted {
        turn_id: u64,
        hop: Hop,
        expert: Option<Expert>,
    },
    /// A hop finished: latency, time to first token, tokens.
    HopCompleted {
        turn_id: u64,
        hop: Hop,
        expert: Option<Expert>,
        latency_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttft_ms: Option<u64>,
        usage: TokenUsage,
    },
    RouteDecided {
        turn_id: u64,
        expert: Expert,
        decision: RouteDecision,
        latency_ms: u64,
        /// Why a fallback happened, or the raw label text.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An answer hop was sent speculatively, together with the route hop, to the expert the
    /// route will probably pick (`speculate = sticky | always`). Its deltas are held back until
    /// `speculation_resolved` says it was a hit.
    SpeculationStarted {
        turn_id: u64,
        expert: Expert,
    },
    /// The route decided about a speculative answer hop. A hit keeps it (its `hop_started` and
    /// held deltas follow); a miss cancelled it, and the chosen expert's answer hop starts. The
    /// wasted tokens are what the cancelled request cost: exact when it had finished, else the
    /// prompt estimated and the completion counted in streamed chunks. Zero on a hit.
    SpeculationResolved {
        turn_id: u64,
        expert: Expert,
        hit: bool,
        wasted_prompt_tokens: u64,
        wasted_completion_tokens: u64,
    },
    ReasoningDelta {
        turn_id: u64,
        delta: String,
    },
    MessageDelta {
        turn_id: u64,
        expert: Option<Expert>,
        delta: String,
    },
    /// The complete text of one assistant message (also messages that carry tool calls).
    MessageFinal {
        turn_id: u64,
        expert: Option<Expert>,
        text: String,
    },
    ToolBegin {
        turn_id: u64,
        call_id: String,
        tool: String,
        /// The arguments as the model sent them (JSON).
        arguments: serde_json::Value,
        /// One line for display, e.g. the command.
        title: String,
    },
    ToolOutput {
        call_id: String,
        /// Sanitized output chunk: SGR colour/style sequences kept for display, every other
        /// control sequence removed (the model's copy, in `ToolEnd::output`, is plain).
        chunk: String,
    },
    ToolEnd {
        call_id: String,
        status: ToolStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        duration_ms: u64,
        /// What the model was told (truncated head + tail).
        output: String,
    },
    /// A file changed by a tool: unified diff.
    FileDiff {
        call_id: String,
        path: String,
        diff: String,
    },
    PlanUpdated {
        items: Vec<PlanItem>,
    },
    ApprovalRequested {
        call_id: String,
        request: ApprovalRequest,
    },
    SummaryRecorded {
        expert: Expert,
        task_id: u64,
        latency_ms: u64,
        tokens: u64,
        /// An empty summary is recorded but never injected.
        empty: bool,
    },
    /// Token use of the last request and the context use of the active expert.
    Usage {
        turn_id: u64,
        usage: TokenUsage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_used: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        context_window: Option<u64>,
    },
    ContextCompacted {
        expert: Expert,
        tokens_before: u64,
        tokens_after: u64,
        /// `summary` or `dropped_tool_outputs` (fallback when the summary request failed).
        method: String,
    },
    /// What an undo (or redo) would do, asked with `Op::Undo { apply: false, .. }`: one line
    /// per path, sanitized. `actionable` is false when there is nothing to do.
    UndoPlanned {
        redo: bool,
        lines: Vec<String>,
        actionable: bool,
    },
    UndoCompleted {
        restored: Vec<String>,
        removed: Vec<String>,
        /// Paths left as they are, with why (changed since, not in the checkpoint, …).
        #[serde(default)]
        kept: Vec<String>,
        #[serde(default)]
        redo: bool,
    },
    /// The answer to `Op::WorkspaceDiff`.
    WorkspaceDiff {
        /// Tracked changes first (staged and not, against HEAD), then untracked files.
        files: Vec<ChangedFile>,
        /// One unified diff of them all, in the same order; empty when nothing changed.
        diff: String,
        /// Why there is no diff (not a git repository, a bare one, a git error).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Warning {
        message: String,
    },
    /// The answer to `Op::McpStatus`: every configured MCP server.
    McpServers {
        servers: Vec<McpServerStatus>,
    },
    /// The approval policy now in force, after an `Op::SetApprovalPolicy`.
    ApprovalPolicyChanged {
        policy: ApprovalPolicy,
    },
    Error {
        message: String,
        /// What kind of failure, for programs (hints, retries, exit codes).
        kind: ErrorKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hop: Option<Hop>,
    },
    TurnCompleted {
        turn_id: u64,
        status: TurnStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expert: Option<Expert>,
        duration_ms: u64,
        /// The tokens of the hops this turn ran (`usage_by_hop.total`).
        usage: TokenUsage,
        /// The same, by hop. A summary that finishes after the turn is not in it; it is in
        /// the session total.
        #[serde(default)]
        usage_by_hop: Box<UsageTotals>,
        /// The session's total when the turn ended (it continues across resume).
        #[serde(default)]
        session_usage: Box<UsageTotals>,
    },
    /// The session's token total changed (after every hop that reported usage, summaries
    /// that finish after their turn included), or a session was opened with one.
    SessionUsage {
        usage: UsageTotals,
    },
    ShutdownComplete,
}

/// What a frontend shows about the agent it drives: what it talks to and under which policy.
/// Made once by the builder; the `Event::Session` of a run says the same for event readers.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentInfo {
    pub session_id: String,
    pub session_file: std::path::PathBuf,
    /// The endpoint URL, or `local:ROOT`.
    pub backend: String,
    pub endpoint: Option<String>,
    pub mode: Mode,
    pub model: Option<String>,
    /// The local engine's device (`cpu (2 threads)`, a GPU name), `None` for a remote backend.
    pub device: Option<String>,
    /// The profile folder, or `built-in`.
    pub profile: String,
    pub sandbox: SandboxMode,
    /// Commands run in the named weaker sandbox (Landlock + seccomp only, no namespaces).
    pub weaker_sandbox: bool,
    pub approval: ApprovalPolicy,
    pub workspace: std::path::PathBuf,
    pub session_dir: std::path::PathBuf,
}

/// A running agent core as a frontend sees it: ops go in, events come out.
pub struct AgentHandle {
    pub ops: mpsc::UnboundedSender<Op>,
    pub events: mpsc::UnboundedReceiver<Event>,
}

/// Where the core and the tools send events. Never blocks the sender: a slow frontend must not
/// stall the agent, and a frontend that went away is not an error.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<Event>,
}

impl EventSink {
    pub fn channel() -> (EventSink, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink { tx }, rx)
    }

    /// A sink that drops everything (tests, tools run outside a session).
    pub fn discard() -> EventSink {
        let (tx, _rx) = mpsc::unbounded_channel();
        EventSink { tx }
    }

    pub fn emit(&self, event: Event) {
        let _ = self.tx.send(event);
    }
}

/// Where baton keeps its own configuration (`hooks.json`, `config.toml`, the trust list), data
/// (sessions, history, undo's snapshots), state and cache: each XDG folder's `baton` and the
/// home's defaults. What is written there runs outside the sandbox (hooks) or changes what
/// the sandbox allows, so commands never see these folders, the file tools never touch them
/// and a workspace holding one is a broad workspace (the sandbox and the configuration both
/// ask this one list).
pub fn baton_own_dirs() -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> = Vec::new();
    let xdg = [
        dirs::config_dir(),
        dirs::data_dir(),
        dirs::state_dir(),
        dirs::cache_dir(),
    ];
    let home = dirs::home_dir()
        .into_iter()
        .flat_map(|h| [".config", ".local/share", ".local/state", ".cache"].map(|d| h.join(d)));
    for dir in xdg
        .into_iter()
        .flatten()
        .chain(home)
        .map(|d| d.join("baton"))
    {
        if dir.is_absolute() && !out.contains(&dir) {
            out.push(dir);
        }
    }
    out
}

/// Folders of the home whose files programs read or run at start (relative to the home):
/// where GNU stow links file by file once the folder exists (red team round 34:
/// `~/.bashrc.d/aliases.sh`, fish's `conf.d`, a systemd user unit, `~/.ssh/config.d/*`).
/// A list, looked at entry by entry: a walk of the whole home at every command would cost
/// more than the command.
pub const HOME_STARTUP_FOLDERS: &[&str] = &[
    ".config",
    ".ssh",
    ".ssh/config.d",
    ".local/bin",
    ".bashrc.d",
    ".bash_profile.d",
    ".profile.d",
    ".zshrc.d",
    ".config/zsh",
    ".config/fish",
    ".config/fish/conf.d",
    ".config/fish/functions",
    ".config/systemd/user",
    ".config/autostart",
    ".config/environment.d",
    ".config/nvim",
    ".config/nvim/lua",
    ".config/nvim/plugin",
    ".config/direnv",
    ".config/git",
    ".config/tmux",
    ".vim",
    ".vim/plugin",
    ".emacs.d",
    ".ipython/profile_default/startup",
    ".local/share/applications",
    ".config/git/hooks",
    ".git-templates/hooks",
    ".config/git/template/hooks",
    // Round 36: stow's `bin/` linked into `~/bin` (on `PATH` through Debian's `~/.profile`),
    // oh-my-zsh's custom plugins, zsh's function folders.
    "bin",
    ".oh-my-zsh/custom",
    ".oh-my-zsh/custom/plugins",
    ".oh-my-zsh/custom/themes",
    ".zsh",
    ".zfunc",
];

/// The home's start-up folders: [`HOME_STARTUP_FOLDERS`] and the user's Python site folders
/// (`~/.local/lib/python3.12/site-packages`: every Python the user runs loads their `.pth`
/// files, round 36).
pub fn home_startup_folders(home: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<std::path::PathBuf> =
        HOME_STARTUP_FOLDERS.iter().map(|f| home.join(f)).collect();
    let lib = home.join(".local/lib");
    for entry in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
        if entry.file_name().as_encoded_bytes().starts_with(b"python") {
            out.push(entry.path().join("site-packages"));
        }
    }
    out
}

/// Where the links among the home's dotfiles and the entries of [`HOME_STARTUP_FOLDERS`]
/// lead, resolved as the programs that read them will: what the user's next shell, `ssh`,
/// `git` or editor loads. A folder `skip` says no to is not read (one inside a writable
/// root is the command's own). Undotted links of the home itself (`~/work -> ~/src/proj`)
/// are ways to a project, not start-up files.
pub fn home_startup_link_targets(
    home: &std::path::Path,
    skip: impl Fn(&std::path::Path) -> bool,
) -> Vec<std::path::PathBuf> {
    let folders = std::iter::once(home.to_path_buf()).chain(home_startup_folders(home));
    let mut out = Vec::new();
    for folder in folders.filter(|f| !skip(f)) {
        let top = folder == home;
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let dotfile = entry.file_name().as_encoded_bytes().starts_with(b".");
            if !entry.file_type().is_ok_and(|t| t.is_symlink()) || (top && !dotfile) {
                continue;
            }
            if let Ok(target) = entry.path().canonicalize()
                && !out.contains(&target)
            {
                out.push(target);
            }
        }
    }
    out
}

/// The ways a configuration file or a command line spells `folder`: its full path, and where
/// it lies in one of `homes` (the home as `$HOME` names it and where it really is), `~/rel`
/// and `$HOME/rel` (`${HOME}` and quotes are read as `$HOME` before matching: [`normalized`]).
pub fn spellings_of(folder: &std::path::Path, homes: &[&std::path::Path]) -> Vec<String> {
    let mut out = vec![folder.display().to_string()];
    for home in homes {
        if let Ok(rel) = folder.strip_prefix(home) {
            out.push(home.join(rel).display().to_string());
            if rel.as_os_str().is_empty() {
                out.extend(["~".to_string(), "$HOME".to_string()]);
            } else {
                let rel = rel.display();
                out.extend([format!("~/{rel}"), format!("$HOME/{rel}")]);
            }
        }
    }
    out.retain(|s| s.len() > 1);
    out.sort();
    out.dedup();
    out
}

/// Whether configuration `text` names the folder `spellings` spell, or a path inside it, in
/// a way that can lead a program there: any spelling on any line (`export PATH=~/tools/bin:…`,
/// `set rtp+=~/tools/vim`, `ProxyCommand ~/tools/jump`, `script-shell=…`), whatever the
/// syntax — no list of the ways a program loads a file is complete (red team rounds 35–37) —
/// and however quoted (`"$HOME"/tools`, `$HOME/"tools"`, `${HOME-}/tools`: quotes are gone
/// and `${HOME…}` is `$HOME` before looking). Not a comment, a `cd`/`pushd` an alias makes,
/// git's `safe.directory`, an `includeIf "gitdir:"` condition, a `file://` bookmark, or the
/// quoted key of a JSON member or a TOML table (Codex's and Claude Code's trusted projects,
/// baton's trust list): those go to a folder or record it, and run nothing.
pub fn names_folder(text: &str, spellings: &[String]) -> bool {
    loading_parts(text).iter().any(|line| {
        spellings.iter().any(|s| {
            line.match_indices(s.as_str()).any(|(at, _)| {
                // `~/tools` names `~/tools/x`, not `~/tools-old`.
                let whole = line[at + s.len()..]
                    .chars()
                    .next()
                    .is_none_or(|c| c == '/' || !(c.is_alphanumeric() || "-_.".contains(c)));
                let before = line[..at].trim_end().to_ascii_lowercase();
                whole && !before.ends_with("gitdir:") && !before.ends_with("gitdir/i:")
            })
        })
    })
}

/// The parts of configuration `text` that may lead a program to a path, as a shell or git
/// reads them ([`normalized`]): each line but comments, git's `safe.directory`, `hash -d`,
/// `CDPATH`, TOML table headers, the quoted key of a JSON member or TOML key (the value is
/// kept), `file://` bookmarks, and an alias that only goes to a folder (`alias p='cd ~/p'`;
/// one that goes there and runs something, `cd ~/p && ./x`, is kept, round 37).
pub fn loading_parts(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let lower = trimmed.to_ascii_lowercase();
        let inert_line = ["#", ";", "--"].iter().any(|c| trimmed.starts_with(c))
            || (lower.starts_with("directory") && lower.contains('='))
            || lower.starts_with("hash -d")
            || lower.starts_with("cdpath")
            || lower.starts_with("export cdpath")
            || (trimmed.starts_with('[') && trimmed.trim_end().ends_with(']'));
        if inert_line {
            continue;
        }
        let mut part = normalized(value_part(trimmed));
        while let Some(at) = part.find("file://") {
            let end = part[at..]
                .find(char::is_whitespace)
                .map_or(part.len(), |e| at + e);
            part.replace_range(at..end, "");
        }
        if lower.starts_with("alias ") || lower.starts_with("abbr ") {
            let body = part.split_once('=').map_or_else(
                || part.split_whitespace().skip(2).collect::<Vec<_>>(),
                |(_, b)| b.split_whitespace().collect(),
            );
            if body.len() == 2 && matches!(body[0], "cd" | "pushd") {
                continue;
            }
        }
        out.push(part);
    }
    out
}

/// What follows the quoted key of a JSON member or TOML key (`"/w": {…}`, `"/w" = …`): the
/// key records a path, the value may run one. The whole line where it starts otherwise.
fn value_part(line: &str) -> &str {
    let Some(rest) = line.strip_prefix(['"', '\'']) else {
        return line;
    };
    let quote = &line[..1];
    let Some(end) = rest.find(quote) else {
        return line;
    };
    let after = rest[end + 1..].trim_start();
    match after.strip_prefix([':', '=']) {
        Some(value) => value,
        None => line,
    }
}

/// `line` with quotes gone and `${HOME}`, `${HOME-…}`, `${HOME:-…}`, `${HOME%/}` written `$HOME`: how
/// a shell or git reads `"$HOME"/tools` and `$HOME/"tools"`.
pub(crate) fn normalized(line: &str) -> String {
    let mut out: String = line.chars().filter(|c| !matches!(c, '"' | '\'')).collect();
    while let Some(at) = out.find("${HOME") {
        let close = out[at..].find('}').map(|c| at + c + 1);
        let next = out[at + 6..].chars().next();
        match (close, next) {
            (Some(close), Some('}' | '-' | ':' | '=' | '+' | '?' | '%' | '#' | '/')) => {
                out.replace_range(at..close, "$HOME");
            }
            _ => break,
        }
    }
    out
}

/// The home's start-up files whose text may name another file it loads (`. ~/dotfiles/x`,
/// `Include ~/dotfiles/ssh/hosts`, `[include] path = …`, `core.hooksPath`): a workspace they
/// name is the user's configuration (red team round 35).
pub const HOME_STARTUP_FILES: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".config/fish/config.fish",
    ".ssh/config",
    ".gitconfig",
    ".config/git/config",
    ".vimrc",
    ".config/nvim/init.vim",
    ".config/nvim/init.lua",
    ".tmux.conf",
    ".inputrc",
    ".xprofile",
    ".xinitrc",
];

/// The user's secrets, relative to their home: credentials of ssh, gpg, clouds, container and
/// package registries, git hosts, other coding agents and model hubs, browsers' cookies and
/// saved logins, shell and REPL histories (typed tokens and passwords), and baton's own
/// configuration, sessions and state: hidden wherever they are visible (the home view shows
/// toolchain folders, whose credential files are among these; `--read` may show more).
pub const HOME_CREDENTIALS: &[&str] = &[
    ".codex/auth.json",
    ".claude/.credentials.json",
    ".cache/huggingface/token",
    ".huggingface/token",
    ".vault-token",
    ".terraform.d/credentials.tfrc.json",
    ".config/containers/auth.json",
    ".config/op",
    ".config/rclone",
    ".config/glab-cli",
    ".kaggle",
    ".s3cfg",
    ".boto",
    ".oci",
    ".m2/settings.xml",
    ".m2/settings-security.xml",
    ".gradle/gradle.properties",
    ".dockercfg",
    ".mozilla",
    ".thunderbird",
    ".config/google-chrome",
    ".config/chromium",
    ".config/BraveSoftware",
    // Red team round 33: shown through `--read ~/.config` or a moved XDG folder.
    ".config/microsoft-edge",
    ".config/vivaldi",
    ".config/opera",
    ".config/1Password",
    ".config/Bitwarden",
    ".config/Slack",
    ".config/discord",
    ".config/github-copilot",
    ".config/kaggle",
    ".config/composer/auth.json",
    ".config/pypoetry/auth.toml",
    ".config/pip/pip.conf",
    ".config/uv/uv.toml",
    ".config/helm/registry",
    ".config/doctl",
    ".config/hcloud",
    ".local/share/gem/credentials",
    ".local/state/nvim/shada",
    ".local/share/nvim/shada",
    "snap/firefox/common/.mozilla",
    "snap/chromium/common/chromium",
    ".var/app/org.mozilla.firefox/.mozilla",
    ".mylogin.cnf",
    ".pg_service.conf",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".node_repl_history",
    ".sqlite_history",
    ".local/share/fish/fish_history",
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".netrc",
    ".git-credentials",
    ".config/gh",
    ".config/hub",
    ".config/git/credentials",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    // Registry tokens in the configuration of toolchains the home view shows.
    ".cargo/config",
    ".cargo/config.toml",
    ".npm-global/etc/npmrc",
    ".rye/credentials",
    ".local/share/uv/credentials",
    ".cabal/config",
    ".gradle/init.gradle",
    ".gradle/init.gradle.kts",
    ".gradle/init.d",
    ".gradle/develocity",
    ".gradle/enterprise",
    ".rye/config.toml",
    ".rye/self/pip.conf",
    // A REPL's history and a certificate store's private keys inside shown toolchains.
    ".julia/logs",
    ".dotnet/corefx",
    ".npmrc",
    ".yarnrc",
    ".pypirc",
    ".gem/credentials",
    ".password-store",
    ".local/share/keyrings",
    ".pgpass",
    ".my.cnf",
    ".config/baton",
    ".local/share/baton",
    ".local/state/baton",
    ".cache/baton",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absurd_usage_report_saturates_instead_of_panicking() {
        let huge = TokenUsage {
            prompt_tokens: u64::MAX,
            completion_tokens: u64::MAX - 1,
            cached_tokens: Some(u64::MAX),
            estimated: false,
        };
        let mut totals = UsageTotals::default();
        totals.add(Hop::Answer, &huge);
        totals.add(Hop::Summary, &huge);
        assert_eq!(totals.total.prompt_tokens, u64::MAX);
        assert_eq!(totals.total.completion_tokens, u64::MAX);
        assert_eq!(totals.total.cached_tokens, Some(u64::MAX));
        assert_eq!(totals.answer, huge);
    }

    #[test]
    fn expert_labels_parse_case_insensitively() {
        assert_eq!(Expert::parse(" l2\n"), Some(Expert::L2));
        assert_eq!(Expert::parse("L4"), None);
        assert_eq!(Expert::parse("L2 because"), None);
    }

    #[test]
    fn events_serialize_with_a_type_tag() {
        let ev = Event::RouteDecided {
            turn_id: 1,
            expert: Expert::L2,
            decision: RouteDecision::Fallback,
            latency_ms: 12,
            reason: Some("garbage label".into()),
        };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["type"], "route_decided");
        assert_eq!(v["expert"], "L2");
        assert_eq!(v["decision"], "fallback");
    }
}
