//! The MCP client: starts the configured servers (stdio child processes in their own process
//! group, or streamable HTTP) in the background, offers their tools to every expert as
//! `mcp__SERVER__TOOL`, and runs calls with the server's timeouts. A server that fails to
//! start, hangs, crashes or talks garbage is reported once (a `warning` event) and its tools
//! are simply absent; only a `required` one stops a turn. Nothing here blocks startup: the
//! registry asks for the tools that are ready when each request is built.
//!
//! `McpHub::start(servers, workspace)` is the one entry point: the builder calls it with the
//! configured servers, and a frontend that gets servers from its client (ACP's `mcpServers`)
//! passes those the same way.

mod connect;

pub use connect::ProjectSandbox;
mod result;
pub(crate) mod schema;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::CallToolRequestParams;
use tokio::sync::watch;

use super::{ApprovalNeed, Tool, ToolContext, ToolResult};
use crate::config::McpServer;
use crate::config::McpTransport;
use crate::protocol::{Event, EventSink, McpServerState, McpServerStatus, ToolSpec};

/// The most text one call gives the model: the shell tool's default output cap.
const OUTPUT_CAP: usize = 16 * 1024;
/// How often a ready server's connection is checked for having gone away.
const LIVENESS_POLL: Duration = Duration::from_millis(500);
/// The most tools one server may offer; past this its list is cut (each tool costs tokens on
/// every request, and a server listing thousands would crowd out the conversation).
const MAX_TOOLS: usize = 128;
/// How long stopped servers get between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_millis(300);

/// Process groups of the stdio servers still running, for `stop_all` at exit.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Ends every server process group this process started: SIGTERM, a short grace, SIGKILL.
/// Called when baton exits (a server outlives nothing of ours) and when a hub is dropped.
pub fn stop_all() {
    let groups: Vec<i32> = std::mem::take(&mut *lock(&LIVE_GROUPS))
        .into_iter()
        .collect();
    stop_groups(&groups);
}

fn stop_groups(groups: &[i32]) {
    use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
    // A group id is a server's pid (it leads its own group); 0 would mean our own group.
    let groups: Vec<Pid> = groups.iter().filter_map(|&g| Pid::from_raw(g)).collect();
    if groups.is_empty() {
        return;
    }
    // A group that is gone answers ESRCH: nothing to stop.
    for &pgid in &groups {
        let _ = kill_process_group(pgid, Signal::TERM);
    }
    let until = std::time::Instant::now() + STOP_GRACE;
    // Signal 0 only checks that the group exists.
    while std::time::Instant::now() < until
        && groups.iter().any(|&g| test_kill_process_group(g).is_ok())
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    for &pgid in &groups {
        let _ = kill_process_group(pgid, Signal::KILL);
    }
}

/// One tool of a ready server, as offered to the model.
#[derive(Debug, Clone)]
struct Entry {
    qualified: String,
    original: String,
    spec: ToolSpec,
    read_only: bool,
}

/// A server's connection once `initialize` and `tools/list` succeeded.
struct Live {
    peer: rmcp::Peer<rmcp::RoleClient>,
    tools: Vec<Entry>,
    /// Kept so the transport (and the child it owns) lives as long as the connection.
    _service: connect::Service,
}

#[derive(Clone)]
enum State {
    Starting,
    Ready(Arc<Live>),
    Failed(String),
    Disabled,
}

struct Server {
    config: McpServer,
    state: watch::Sender<State>,
    /// The stdio server's process group, while it runs.
    pgid: Mutex<Option<i32>>,
    stderr: connect::StderrTail,
}

impl Server {
    fn fail(&self, hub: &McpHub, why: String) {
        // The reason may quote the server: no control characters reach a terminal.
        let why: String = why
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let why = match self.stderr.last() {
            Some(line) if !why.contains(&line) => format!("{why} (its last stderr line: {line})"),
            _ => why,
        };
        let was_ready = matches!(*self.state.borrow(), State::Ready(_));
        self.state.send_replace(State::Failed(why.clone()));
        if let Some(pgid) = lock(&self.pgid).take() {
            lock(&LIVE_GROUPS).remove(&pgid);
            stop_groups(&[pgid]);
        }
        let what = if was_ready {
            "stopped working"
        } else {
            "could not start"
        };
        let required = if self.config.required {
            " It is required (`required = true`): turns are refused until it works."
        } else {
            " Its tools are not offered."
        };
        hub.warn(format!(
            "MCP server `{}` {what}: {why}.{required}",
            self.config.name
        ));
    }

    fn status(&self) -> McpServerStatus {
        let (state, tools, error) = match &*self.state.borrow() {
            State::Starting => (McpServerState::Starting, Vec::new(), None),
            State::Ready(live) => (
                McpServerState::Ready,
                live.tools.iter().map(|t| t.qualified.clone()).collect(),
                None,
            ),
            State::Failed(why) => (McpServerState::Failed, Vec::new(), Some(why.clone())),
            State::Disabled => (McpServerState::Disabled, Vec::new(), None),
        };
        McpServerStatus {
            name: self.config.name.clone(),
            state,
            transport: self.config.transport.describe(),
            required: self.config.required,
            tools,
            error,
        }
    }

    /// Waits until the server is no longer starting (each start is bounded by its timeout).
    async fn settled(&self) -> State {
        let mut rx = self.state.subscribe();
        loop {
            let state = rx.borrow_and_update().clone();
            if !matches!(state, State::Starting) {
                return state;
            }
            if rx.changed().await.is_err() {
                return State::Failed("the MCP client stopped".into());
            }
        }
    }
}

/// For a server run by a package runner, why its first start may take longer than the timeout.
fn first_run_hint(transport: &McpTransport) -> String {
    let McpTransport::Stdio { command, .. } = transport else {
        return String::new();
    };
    let program = std::path::Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(command);
    if matches!(program, "npx" | "uvx" | "bunx" | "pnpx" | "pipx") {
        format!(
            "; `{program}` downloads the package on its first run: `baton mcp add` starts the \
             server once to fetch it, or raise `startup_timeout_sec`"
        )
    } else {
        String::new()
    }
}

/// The running MCP servers of one agent.
pub struct McpHub {
    servers: Vec<Arc<Server>>,
    events: Mutex<Option<EventSink>>,
    /// Warnings from before a frontend was listening.
    pending: Mutex<Vec<String>>,
    stopped: AtomicBool,
}

impl McpHub {
    /// Starts every enabled server in the background and returns at once. Must be called
    /// inside a tokio runtime.
    pub fn start(
        servers: Vec<McpServer>,
        workspace: PathBuf,
        sandbox: connect::ProjectSandbox,
    ) -> Arc<McpHub> {
        let hub = Arc::new(McpHub {
            servers: servers
                .into_iter()
                .map(|config| {
                    let state = if config.enabled {
                        State::Starting
                    } else {
                        State::Disabled
                    };
                    Arc::new(Server {
                        config,
                        state: watch::channel(state).0,
                        pgid: Mutex::new(None),
                        stderr: connect::StderrTail::default(),
                    })
                })
                .collect(),
            events: Mutex::new(None),
            pending: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
        });
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            for server in &hub.servers {
                server
                    .state
                    .send_replace(State::Failed("baton started it outside its runtime".into()));
            }
            return hub;
        };
        for server in &hub.servers {
            if server.config.enabled {
                runtime.spawn(run_server(
                    Arc::downgrade(&hub),
                    server.clone(),
                    workspace.clone(),
                    sandbox.clone(),
                ));
            }
        }
        hub
    }

    /// Where warnings go from now on; those from before are sent first.
    pub fn attach(&self, events: EventSink) {
        for message in std::mem::take(&mut *lock(&self.pending)) {
            events.emit(Event::Warning { message });
        }
        *lock(&self.events) = Some(events);
    }

    fn warn(&self, message: String) {
        match &*lock(&self.events) {
            Some(events) => events.emit(Event::Warning { message }),
            None => lock(&self.pending).push(message),
        }
    }

    /// The tools of the servers that are ready now.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.servers
            .iter()
            .filter_map(|s| match &*s.state.borrow() {
                State::Ready(live) => Some(
                    live.tools
                        .iter()
                        .map(|t| t.spec.clone())
                        .collect::<Vec<_>>(),
                ),
                _ => None,
            })
            .flatten()
            .collect()
    }

    /// The tool a call names: one of a ready server, or, for a server still starting, one
    /// that waits for it (the model may have seen the name in an earlier request or guessed
    /// it; the server decides whether it exists).
    pub fn tool(&self, name: &str) -> Option<Arc<dyn Tool>> {
        for server in &self.servers {
            let prefix = schema::qualified_name(&server.config.name, "");
            match &*server.state.borrow() {
                State::Ready(live) => {
                    if let Some(entry) = live.tools.iter().find(|t| t.qualified == name) {
                        return Some(Arc::new(McpTool {
                            server: server.clone(),
                            name: name.to_string(),
                            entry: Some(entry.clone()),
                        }));
                    }
                }
                State::Starting if name.starts_with(&prefix) => {
                    return Some(Arc::new(McpTool {
                        server: server.clone(),
                        name: name.to_string(),
                        entry: None,
                    }));
                }
                _ => {}
            }
        }
        None
    }

    /// The names of the ready servers' tools.
    pub fn names(&self) -> Vec<String> {
        self.specs().into_iter().map(|s| s.name).collect()
    }

    /// Every server with its state, tools and last error.
    pub fn status(&self) -> Vec<McpServerStatus> {
        self.servers.iter().map(|s| s.status()).collect()
    }

    /// Waits for the required servers to settle; the refusal to show when one is not
    /// available.
    pub async fn required_problem(&self) -> Option<String> {
        let mut problems = Vec::new();
        for server in self.servers.iter().filter(|s| s.config.required) {
            match server.settled().await {
                State::Ready(_) => {}
                State::Failed(why) => problems.push(format!("`{}`: {why}", server.config.name)),
                State::Disabled => problems.push(format!(
                    "`{}` is disabled (`enabled = false`)",
                    server.config.name
                )),
                State::Starting => {}
            }
        }
        (!problems.is_empty()).then(|| {
            format!(
                "a required MCP server is not available, so the turn was not started: {}. Fix \
                 the server, or set `required = false` for it (`baton mcp get NAME` shows its \
                 configuration)",
                problems.join("; ")
            )
        })
    }

    /// The servers still starting, each with its startup timeout.
    pub fn starting(&self) -> Vec<(String, Duration)> {
        self.servers
            .iter()
            .filter(|s| matches!(&*s.state.borrow(), State::Starting))
            .map(|s| (s.config.name.clone(), s.config.startup_timeout))
            .collect()
    }

    /// Waits until no server is starting (for `baton doctor`).
    pub async fn settled(&self) {
        for server in &self.servers {
            server.settled().await;
        }
    }

    /// Stops this hub's servers now.
    pub fn stop(&self) {
        if self.stopped.swap(true, Ordering::SeqCst) {
            return;
        }
        let groups: Vec<i32> = self
            .servers
            .iter()
            .filter_map(|s| lock(&s.pgid).take())
            .collect();
        {
            let mut live = lock(&LIVE_GROUPS);
            for g in &groups {
                live.remove(g);
            }
        }
        stop_groups(&groups);
    }
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Connects one server, then watches that it stays up.
async fn run_server(
    hub: std::sync::Weak<McpHub>,
    server: Arc<Server>,
    workspace: PathBuf,
    sandbox: connect::ProjectSandbox,
) {
    let started = connect::start(
        &server.config,
        &workspace,
        &sandbox,
        &server.stderr,
        |pgid| {
            lock(&LIVE_GROUPS).insert(pgid);
            *lock(&server.pgid) = Some(pgid);
        },
    );
    let outcome = tokio::time::timeout(server.config.startup_timeout, started).await;
    let weak_hub = hub;
    let Some(hub) = weak_hub.upgrade() else {
        return;
    };
    let (service, tools) = match outcome {
        Ok(Ok(ok)) => ok,
        Ok(Err(why)) => {
            server.fail(&hub, why);
            return;
        }
        Err(_) => {
            server.fail(
                &hub,
                format!(
                    "it did not finish `initialize` and `tools/list` within {} s \
                     (`startup_timeout_sec`){}",
                    server.config.startup_timeout.as_secs_f64(),
                    first_run_hint(&server.config.transport)
                ),
            );
            return;
        }
    };
    let offered = tools.len();
    let mut entries = entries(&server.config, tools);
    if entries.len() > MAX_TOOLS {
        entries.truncate(MAX_TOOLS);
        hub.warn(format!(
            "MCP server `{}` lists {offered} tools; only the first {MAX_TOOLS} are offered (choose \
             with `enabled_tools`)",
            server.config.name
        ));
    }
    let peer = service.peer().clone();
    server.state.send_replace(State::Ready(Arc::new(Live {
        peer: peer.clone(),
        tools: entries,
        _service: service,
    })));
    drop(hub);
    // A server that exits or closes its pipe is noticed even when no call is running.
    let weak = Arc::downgrade(&server);
    drop(server);
    loop {
        tokio::time::sleep(LIVENESS_POLL).await;
        let Some(server) = weak.upgrade() else {
            return;
        };
        if !matches!(*server.state.borrow(), State::Ready(_)) {
            return;
        }
        if peer.is_transport_closed() {
            if let Some(hub) = weak_hub.upgrade() {
                server.fail(&hub, "its connection closed (the server exited)".into());
            }
            return;
        }
    }
}

/// The offered tools of a server's `tools/list`, after `enabled_tools` and `disabled_tools`.
fn entries(config: &McpServer, tools: Vec<rmcp::model::Tool>) -> Vec<Entry> {
    let mut seen = BTreeSet::new();
    tools
        .into_iter()
        .filter(|t| {
            config
                .enabled_tools
                .as_ref()
                .is_none_or(|only| only.iter().any(|n| n == t.name.as_ref()))
                && !config.disabled_tools.iter().any(|n| n == t.name.as_ref())
        })
        .filter_map(|t| {
            let qualified = schema::qualified_name(&config.name, &t.name);
            // Two names that clean to the same one: the first keeps it.
            if !seen.insert(qualified.clone()) {
                return None;
            }
            let read_only = t
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false);
            Some(Entry {
                spec: ToolSpec {
                    name: qualified.clone(),
                    description: schema::description(
                        &config.name,
                        &t.name,
                        t.description.as_deref(),
                    ),
                    parameters: schema::sanitize(&t.input_schema),
                },
                qualified,
                original: t.name.to_string(),
                read_only,
            })
        })
        .collect()
}

/// One MCP tool as the agent calls it.
struct McpTool {
    server: Arc<Server>,
    name: String,
    /// `None` while the server is still starting.
    entry: Option<Entry>,
}

impl McpTool {
    fn arguments(
        &self,
        args: &serde_json::Value,
    ) -> Result<serde_json::Map<String, serde_json::Value>, String> {
        let value = match args {
            serde_json::Value::String(text) if text.trim().is_empty() => serde_json::json!({}),
            serde_json::Value::String(text) => serde_json::from_str(text)
                .map_err(|e| format!("invalid arguments for {}: not JSON: {e}", self.name))?,
            serde_json::Value::Null => serde_json::json!({}),
            other => other.clone(),
        };
        match value {
            serde_json::Value::Object(map) => Ok(map),
            other => Err(format!(
                "invalid arguments for {}: expected a JSON object, got {}",
                self.name,
                match other {
                    serde_json::Value::Array(_) => "an array",
                    serde_json::Value::String(_) => "a string",
                    serde_json::Value::Number(_) => "a number",
                    serde_json::Value::Bool(_) => "a boolean",
                    _ => "null",
                }
            )),
        }
    }

    async fn call(&self, args: serde_json::Value, ctx: &ToolContext) -> ToolResult {
        let arguments = match self.arguments(&args) {
            Ok(a) => a,
            Err(e) => return ToolResult::error(e),
        };
        let config = &self.server.config;
        let live = match self.server.settled().await {
            State::Ready(live) => live,
            State::Failed(why) => {
                return ToolResult::error(format!(
                    "MCP server `{}` is not available: {why}",
                    config.name
                ));
            }
            _ => {
                return ToolResult::error(format!("MCP server `{}` is disabled", config.name));
            }
        };
        let Some(entry) = live.tools.iter().find(|t| t.qualified == self.name) else {
            return ToolResult::error(format!(
                "unknown tool `{}`: MCP server `{}` offers {}",
                self.name,
                config.name,
                if live.tools.is_empty() {
                    "no tools".to_string()
                } else {
                    live.tools
                        .iter()
                        .map(|t| t.qualified.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            ));
        };
        let params = CallToolRequestParams::new(entry.original.clone()).with_arguments(arguments);
        let call = live.peer.call_tool(params);
        let outcome = tokio::select! {
            r = tokio::time::timeout(config.tool_timeout, call) => r,
            _ = ctx.cancel.cancelled() => {
                return ToolResult::error("Interrupted before the MCP server answered.");
            }
        };
        match outcome {
            Ok(Ok(result)) => match serde_json::to_value(&result) {
                Ok(value) => result::to_tool_result(&value, OUTPUT_CAP),
                Err(e) => {
                    ToolResult::error(format!("unreadable result from `{}`: {e}", config.name))
                }
            },
            Ok(Err(rmcp::ServiceError::McpError(e))) => ToolResult::error(format!(
                "MCP server `{}` answered with an error: {}",
                config.name,
                result::plain(&clip(&e.message, 2000))
            )),
            Ok(Err(e)) => {
                let why = result::plain(&clip(&e.to_string(), 500));
                if live.peer.is_transport_closed() {
                    ToolResult::error(format!(
                        "MCP server `{}` closed its connection during the call ({why}); its \
                         tools are no longer available",
                        config.name
                    ))
                } else {
                    ToolResult::error(format!("the call to `{}` failed: {why}", config.name))
                }
            }
            Err(_) => ToolResult::error(format!(
                "MCP server `{}` did not answer within {} s (`tool_timeout_sec`); the call was \
                 cancelled",
                config.name,
                config.tool_timeout.as_secs_f64()
            )),
        }
    }
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn spec(&self) -> ToolSpec {
        match &self.entry {
            Some(e) => e.spec.clone(),
            None => ToolSpec {
                name: self.name.clone(),
                description: format!("A tool of the MCP server `{}`.", self.server.config.name),
                parameters: serde_json::json!({"type": "object", "properties": {}}),
            },
        }
    }

    fn approval(&self, args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        let trusted_read_only = self.server.config.trust_read_only_hint
            && self.entry.as_ref().is_some_and(|e| e.read_only);
        if trusted_read_only {
            return ApprovalNeed::None;
        }
        ApprovalNeed::Mcp {
            tool: self.name.clone(),
            server: self.server.config.name.clone(),
            arguments: clip(&args.to_string(), 2000),
        }
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!("{} {}", self.name, clip(&args.to_string(), 120))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        Box::pin(self.call(args, ctx))
    }
}
