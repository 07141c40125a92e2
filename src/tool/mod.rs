//! The tools experts act through, behind one `Tool` trait, and the registry the agent core
//! offers to the model. Every tool resolves paths against the workspace and reports what it does
//! as events (`ToolBegin` is emitted by the agent; tools emit output chunks and diffs).

pub(crate) mod approval;
pub mod mcp;
pub(crate) mod sanitize;
pub mod shell;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::protocol::ToolSpec;
use crate::protocol::{EventSink, PlanItem, ToolStatus};

pub use error::{IoOp, ToolError};

pub(crate) mod call;
pub mod checkpoint;
pub(crate) mod confined;
pub(crate) mod diff;
pub(crate) mod error;
pub(crate) mod fs;
pub mod git;
pub(crate) mod outline;
pub(crate) mod patch;
pub mod path;
pub(crate) mod plan;
pub mod registry;
pub mod search;
pub mod skill;

/// What a call needs before it may run, decided by the tool from its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalNeed {
    /// Read-only: never asks.
    None,
    /// Changes files in the workspace.
    Edit { path: String, diff: String },
    /// Runs a command (argv as parsed from the command line).
    Command {
        command: String,
        argv: Vec<String>,
        cwd: String,
    },
    /// Calls a tool of an MCP server: another program, outside the sandbox, that may do
    /// anything its author made it do.
    Mcp {
        /// `mcp__SERVER__TOOL`.
        tool: String,
        server: String,
        /// The arguments as JSON (clipped), for the prompt.
        arguments: String,
    },
    /// Types text into a running session whose program may run it as code (a REPL, an
    /// editor, a pager, a script): always asks, never remembered.
    Input {
        session: u32,
        program: String,
        text: String,
    },
}

/// The result of one tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// Text for the model (already capped: head + tail with a dropped-bytes line).
    pub content: String,
    pub status: ToolStatus,
    pub exit_code: Option<i32>,
}

impl ToolResult {
    pub fn ok(content: impl Into<String>) -> Self {
        ToolResult {
            content: content.into(),
            status: ToolStatus::Ok,
            exit_code: None,
        }
    }
    pub fn error(content: impl Into<String>) -> Self {
        ToolResult {
            content: content.into(),
            status: ToolStatus::Error,
            exit_code: None,
        }
    }
}

/// Everything a tool call may use: where it runs, where its events go, how it is cancelled.
#[derive(Clone)]
pub struct ToolContext {
    /// The workspace root (canonical). No path may escape it.
    pub workspace: PathBuf,
    pub call_id: String,
    pub events: EventSink,
    pub cancel: CancellationToken,
    /// State shared by all tools of one session (read times, shell sessions, plan, …).
    pub state: Arc<ToolState>,
}

/// Session-wide state the tools share. Tools keep their own typed state in here.
#[derive(Default)]
pub struct ToolState {
    /// Live shell sessions (`shell` commands still running); killed when dropped.
    pub shell_sessions: shell::SessionTable,
    /// Last time each file was read by the model (stale-edit detection): path → mtime+len seen.
    pub read_stamps: std::sync::Mutex<BTreeMap<PathBuf, FileStamp>>,
    /// The expert's current plan (`update_plan`).
    pub plan: std::sync::Mutex<Vec<PlanItem>>,
    /// Checkpoints taken before file changes (one per turn), for undo.
    pub checkpoints: std::sync::Mutex<checkpoint::CheckpointState>,
    /// The tools' bounds: the product's defaults, which tests lower to prove them cheaply.
    pub limits: ToolLimits,
}

/// Bounds the tools hold to whatever the model asks for.
#[derive(Debug, Clone, Copy)]
pub struct ToolLimits {
    /// Bytes of a file one `read_file` call reads at most.
    pub read_scan_bytes: u64,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            read_scan_bytes: fs::MAX_SCAN_BYTES,
        }
    }
}

/// What a file looked like when the model last read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    pub modified: std::time::SystemTime,
    pub len: u64,
}

/// One tool the model may call.
pub trait Tool: Send + Sync {
    /// The function name the model uses.
    fn name(&self) -> &str;

    /// JSON-schema'd description for the model.
    fn spec(&self) -> ToolSpec;

    /// Whether this call needs approval, decided from its arguments (before it runs).
    fn approval(&self, args: &serde_json::Value, ctx: &ToolContext) -> ApprovalNeed;

    /// A one-line title for display (e.g. the command, or `read src/lib.rs`).
    fn title(&self, args: &serde_json::Value) -> String;

    /// Runs the call. Errors are results with `ToolStatus::Error` the model can read, not panics.
    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult>;
}

/// The tools offered to the model, by name: the built-in ones, then those of the MCP servers
/// that are ready when the list is asked for.
#[derive(Default, Clone)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    mcp: Option<Arc<mcp::McpHub>>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// Offers the tools of these MCP servers too.
    pub fn with_mcp(mut self, hub: Arc<mcp::McpHub>) -> Self {
        self.mcp = Some(hub);
        self
    }

    /// The MCP servers, when there are any.
    pub fn mcp(&self) -> Option<&Arc<mcp::McpHub>> {
        self.mcp.as_ref()
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        if let Some(tool) = self.tools.get(name) {
            return Some(tool.clone());
        }
        self.mcp.as_ref().and_then(|hub| hub.tool(name))
    }

    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.tools.keys().cloned().collect();
        if let Some(hub) = &self.mcp {
            names.extend(hub.names());
        }
        names
    }

    /// The built-in tools restricted to `names` (unknown names are ignored). MCP tools are
    /// chosen per server (`enabled_tools`, `disabled_tools`).
    pub fn only(mut self, names: &[String]) -> Self {
        self.tools.retain(|name, _| names.iter().any(|n| n == name));
        self
    }

    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self.tools.values().map(|t| t.spec()).collect();
        if let Some(hub) = &self.mcp {
            specs.extend(hub.specs());
        }
        specs
    }
}
