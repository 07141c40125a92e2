//! The Agent Client Protocol frontend (`baton acp`): editors (Zed, JetBrains, Neovim) and
//! harnesses (Harbor's `acp` runner) drive baton over JSON-RPC on stdin and stdout.
//!
//! Each ACP session is one agent core, started by the command line's factory (this module
//! never assembles an agent) and named by baton's own session id, so `session/load` of an id is
//! `--resume` of it: the MoL timeline, the per-expert views and the routing state come back
//! from the session file. The core's events become `session/update` notifications
//! (`updates`), its approval requests `session/request_permission` (`permission`).
//!
//! stdout is the protocol channel and nothing else may write to it: `serve_stdio` moves the
//! real stdout to a private descriptor and points descriptor 1 at stderr, so a stray print or
//! a child process that inherits stdout cannot corrupt the stream.

use crate::protocol::stdio::eprintln;
mod diff;
mod permission;
mod replay;
mod updates;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::Responder;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, EmbeddedResourceResource, Implementation,
    InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, McpServer, Meta, NewSessionRequest, NewSessionResponse, PromptCapabilities,
    PromptRequest, PromptResponse, RequestPermissionRequest, SessionNotification, SessionUpdate,
};
use agent_client_protocol::{Agent, Client, Error};
use tokio::sync::mpsc;

use crate::protocol::{AgentHandle, AgentInfo, Event, Expert, McpServerSpec, Op};
use updates::{Out, Translator};

/// The connection to the editor, as the handlers get it.
type Connection = agent_client_protocol::v1::ConnectionTo<Client>;

/// A line longer than this is dropped (answered as a parse error) instead of buffered.
const MAX_LINE_BYTES: usize = 64 << 20;

/// Sessions one connection may hold open: each is an agent with its own backend and tools,
/// and a client that opens them in a loop must not exhaust the machine.
const MAX_SESSIONS: usize = 32;

/// How long the sessions get to save and stop after the editor closed the connection.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// What the editor asked for: a session in `cwd`, new or the saved one `load` names.
#[derive(Debug, Clone)]
pub struct SessionRequest {
    pub cwd: PathBuf,
    /// A saved session's exact id (`session/load`); `None` for `session/new`.
    pub load: Option<String>,
    /// The editor's MCP servers, started with the session beside the configured ones.
    pub mcp_servers: Vec<McpServerSpec>,
}

/// A started agent for one ACP session.
pub struct StartedSession {
    pub handle: AgentHandle,
    pub info: AgentInfo,
    /// What the editor should be told about the setup (configuration warnings, MCP servers
    /// that were not connected): logged and sent in the response's `_meta`.
    pub warnings: Vec<String>,
}

/// Starts an agent for a session; the error is the message the editor is shown. Called on a
/// blocking thread inside the runtime (it may load a local model).
pub type SessionFactory =
    Arc<dyn Fn(SessionRequest) -> Result<StartedSession, String> + Send + Sync + 'static>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn log(line: &str) {
    eprintln!("baton acp: {}", crate::protocol::terminal_safe(line));
}

/// A JSON-RPC error whose message the editor shows.
fn failure(code: Error, message: impl Into<String>) -> Error {
    let message = message.into();
    Error::new(code.code, message.clone()).data(serde_json::json!({ "message": message }))
}

/// The editor's MCP servers in baton's own form.
pub fn mcp_specs(servers: &[McpServer]) -> Vec<McpServerSpec> {
    servers
        .iter()
        .filter_map(|s| match s {
            McpServer::Stdio(s) => Some(McpServerSpec::Stdio {
                name: s.name.clone(),
                command: s.command.clone(),
                args: s.args.clone(),
                env: s
                    .env
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect(),
            }),
            McpServer::Http(s) => Some(McpServerSpec::Http {
                name: s.name.clone(),
                url: s.url.clone(),
                headers: s
                    .headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            }),
            McpServer::Sse(s) => Some(McpServerSpec::Sse {
                name: s.name.clone(),
                url: s.url.clone(),
                headers: s
                    .headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            }),
            // A transport this version of the schema added after baton was written.
            _ => None,
        })
        .collect()
}

/// The user's text of a prompt: text blocks as they are, embedded files quoted with their
/// URI, links to files named. Images and audio are not read (not advertised either).
pub fn prompt_text(blocks: &[ContentBlock]) -> String {
    let mut text = String::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => text.push_str(&t.text),
            ContentBlock::ResourceLink(link) => {
                text.push_str(&format!("[{}]({})", link.name, link.uri));
            }
            ContentBlock::Resource(resource) => match &resource.resource {
                EmbeddedResourceResource::TextResourceContents(r) => {
                    text.push_str(&format!(
                        "\n\n<file uri=\"{}\">\n{}\n</file>\n",
                        r.uri, r.text
                    ));
                }
                EmbeddedResourceResource::BlobResourceContents(r) => {
                    text.push_str(&format!("\n[binary resource {} not shown]\n", r.uri));
                }
                _ => {}
            },
            _ => text.push_str("\n[an image or audio block was left out: baton reads text]\n"),
        }
    }
    text
}

/// One open ACP session.
struct Session {
    ops: mpsc::UnboundedSender<Op>,
    /// The prompt now running: answered when its turn completes.
    prompt: Mutex<Option<Responder<PromptResponse>>>,
    /// The turn now running. A permission answer that comes after its turn ended is dropped:
    /// models reuse call ids, and a late "allow" must not approve a later turn's call.
    turn: std::sync::atomic::AtomicU64,
}

struct Server {
    factory: SessionFactory,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Ids of sessions being loaded, so one cannot be opened twice at once.
    opening: Mutex<Vec<String>>,
    pumps: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// A place among the sessions being opened; given back when dropped.
struct Slot<'a> {
    server: &'a Server,
    key: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        lock(&self.server.opening).retain(|o| *o != self.key);
    }
}

impl Server {
    fn session(&self, id: &str) -> Option<Arc<Session>> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Starts (or loads) a session and its event pump; the id and the response `_meta`.
    async fn open(
        self: &Arc<Self>,
        cx: &Connection,
        request: SessionRequest,
    ) -> Result<(String, Option<Meta>), Error> {
        if !request.cwd.is_absolute() {
            return Err(failure(
                Error::invalid_params(),
                format!(
                    "cwd must be an absolute path, not {}",
                    request.cwd.display()
                ),
            ));
        }
        // A slot is taken under one lock, so sessions started at once cannot pass the limit
        // together, nor one id be loaded twice: a new session holds an anonymous one.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let slot = match &request.load {
            Some(id) => id.clone(),
            None => format!(
                "\0new-{}",
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ),
        };
        {
            let mut opening = lock(&self.opening);
            let sessions = lock(&self.sessions);
            if sessions.contains_key(&slot) || opening.contains(&slot) {
                return Err(failure(
                    Error::invalid_request(),
                    format!("session {slot} is already open on this connection"),
                ));
            }
            if sessions.len() + opening.len() >= MAX_SESSIONS {
                return Err(failure(
                    Error::invalid_request(),
                    format!(
                        "{MAX_SESSIONS} sessions are open on this connection: close other threads first"
                    ),
                ));
            }
            opening.push(slot.clone());
        }
        // Held until the session is registered (or failed): the slot is freed on every path.
        let _slot = Slot {
            server: self,
            key: slot,
        };
        let load = request.load.clone();
        let factory = self.factory.clone();
        let started = tokio::task::spawn_blocking(move || factory(request)).await;
        let started = match started {
            Ok(Ok(s)) => s,
            Ok(Err(message)) => return Err(failure(Error::internal_error(), message)),
            Err(e) => {
                return Err(failure(
                    Error::internal_error(),
                    format!("starting the session failed: {e}"),
                ));
            }
        };
        let StartedSession {
            handle,
            info,
            warnings,
        } = started;
        if let Some(id) = &load
            && *id != info.session_id
        {
            let _ = handle.ops.send(Op::Shutdown);
            return Err(failure(
                Error::internal_error(),
                format!("session {id} opened as {}", info.session_id),
            ));
        }
        let id = info.session_id.clone();
        for w in &warnings {
            log(&format!("session {id}: warning: {w}"));
        }
        if load.is_some() {
            // Replayed before the response, as the protocol asks: the client shows the history,
            // then the session is live.
            match crate::session::read_records(&info.session_file) {
                Ok(records) => {
                    for (expert, update) in replay::updates(&info.workspace, &records) {
                        notify(cx, &id, expert, update);
                    }
                }
                Err(e) => log(&format!("session {id}: cannot replay its history: {e}")),
            }
        }
        let session = Arc::new(Session {
            ops: handle.ops.clone(),
            prompt: Mutex::new(None),
            turn: std::sync::atomic::AtomicU64::new(0),
        });
        lock(&self.sessions).insert(id.clone(), session.clone());
        let pump = tokio::spawn(pump(
            self.clone(),
            cx.clone(),
            id.clone(),
            handle,
            session,
            Translator::new(info.workspace.clone()),
        ));
        lock(&self.pumps).push(pump);
        let meta = (!warnings.is_empty()).then(|| {
            let mut baton = serde_json::Map::new();
            baton.insert("warnings".into(), serde_json::json!(warnings));
            baton.insert("session_file".into(), serde_json::json!(info.session_file));
            let mut meta = Meta::new();
            meta.insert("baton".into(), serde_json::Value::Object(baton));
            meta
        });
        Ok((id, meta))
    }

    /// After the editor is gone: every session saves and stops, within the grace.
    async fn shutdown(&self) {
        let sessions: Vec<Arc<Session>> = lock(&self.sessions).values().cloned().collect();
        for s in sessions {
            // A turn nobody will see the end of stops; a summary still running is waited for
            // (the core's shutdown saves it).
            if lock(&s.prompt).is_some() {
                let _ = s.ops.send(Op::Interrupt);
            }
            let _ = s.ops.send(Op::Shutdown);
        }
        let pumps: Vec<_> = lock(&self.pumps).drain(..).collect();
        let all = futures_util::future::join_all(pumps);
        if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
            log("a session did not stop in time after the editor closed the connection");
        }
    }
}

/// Sends one update, with the expert it came from in `_meta.baton.expert`.
fn notify(cx: &Connection, session_id: &str, expert: Option<Expert>, update: SessionUpdate) {
    let note =
        SessionNotification::new(session_id.to_string(), update).meta(updates::expert_meta(expert));
    // A closed connection: the shutdown that follows stops the session.
    let _ = cx.send_notification(note);
}

/// Forwards one session's events to the editor until its agent stops.
async fn pump(
    server: Arc<Server>,
    cx: Connection,
    id: String,
    mut handle: AgentHandle,
    session: Arc<Session>,
    mut tr: Translator,
) {
    let mut tick = tokio::time::interval(updates::OUTPUT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let outs = tokio::select! {
            event = handle.events.recv() => match event {
                None | Some(Event::ShutdownComplete) => break,
                Some(event) => {
                    if let Event::TurnStarted { turn_id, .. } = &event {
                        session.turn.store(*turn_id, Ordering::SeqCst);
                    }
                    tr.translate(&event)
                }
            },
            _ = tick.tick() => tr.flush(),
        };
        for out in outs {
            match out {
                Out::Update(update) => notify(&cx, &id, tr.expert(), *update),
                Out::Permission {
                    call_id,
                    request,
                    tool_call,
                } => {
                    let ask = RequestPermissionRequest::new(
                        id.clone(),
                        *tool_call,
                        permission::options(&request),
                    );
                    let cx = cx.clone();
                    let ops = handle.ops.clone();
                    let session = session.clone();
                    let asked_in = session.turn.load(Ordering::SeqCst);
                    // Not awaited here: the answer comes through the dispatch loop while events
                    // keep flowing (a cancel, other output).
                    tokio::spawn(async move {
                        let outcome = match cx.send_request(ask).block_task().await {
                            Ok(response) => Some(response.outcome),
                            Err(e) => {
                                log(&format!("permission request for {call_id} failed: {e}"));
                                None
                            }
                        };
                        if session.turn.load(Ordering::SeqCst) != asked_in {
                            return;
                        }
                        for op in permission::answer(&call_id, &request, outcome.as_ref()) {
                            let _ = ops.send(op);
                        }
                    });
                }
                Out::TurnEnded(end) => {
                    let Some(responder) = lock(&session.prompt).take() else {
                        continue;
                    };
                    let sent = match end {
                        Ok(reason) => responder.respond(PromptResponse::new(reason)),
                        Err(message) => {
                            responder.respond_with_error(failure(Error::internal_error(), message))
                        }
                    };
                    if let Err(e) = sent {
                        log(&format!("session {id}: cannot answer the prompt: {e}"));
                    }
                }
                Out::Log(line) => log(&format!("session {id}: {line}")),
            }
        }
    }
    lock(&server.sessions).remove(&id);
    if let Some(responder) = lock(&session.prompt).take() {
        let _ = responder.respond_with_error(failure(
            Error::internal_error(),
            "the agent stopped before the turn ended",
        ));
    }
}

fn initialize_response() -> InitializeResponse {
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                .prompt_capabilities(PromptCapabilities::new().embedded_context(true))
                .mcp_capabilities(McpCapabilities::new().http(true)),
        )
        .agent_info(Implementation::new("baton", env!("CARGO_PKG_VERSION")).title("baton"))
}

/// Serves ACP on `transport` until the editor closes it; then every session is saved and
/// stopped. Returns the exit code.
pub async fn serve(
    factory: SessionFactory,
    transport: impl agent_client_protocol::ConnectTo<Agent> + 'static,
) -> i32 {
    let server = Arc::new(Server {
        factory,
        sessions: Mutex::new(HashMap::new()),
        opening: Mutex::new(Vec::new()),
        pumps: Mutex::new(Vec::new()),
    });
    let s_new = server.clone();
    let s_load = server.clone();
    let s_prompt = server.clone();
    let s_cancel = server.clone();
    let result = Agent
        .v1()
        .name("baton")
        .on_receive_request(
            async move |_req: InitializeRequest, responder: Responder<InitializeResponse>, _cx| {
                responder.respond(initialize_response())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: Responder<NewSessionResponse>,
                        cx: Connection| {
                let server = s_new.clone();
                // Off the dispatch loop: starting an agent may take a while (a local model).
                tokio::spawn(async move {
                    let request = SessionRequest {
                        cwd: req.cwd,
                        load: None,
                        mcp_servers: mcp_specs(&req.mcp_servers),
                    };
                    let _ = match server.open(&cx, request).await {
                        Ok((id, meta)) => responder.respond(NewSessionResponse::new(id).meta(meta)),
                        Err(e) => responder.respond_with_error(e),
                    };
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: Responder<LoadSessionResponse>,
                        cx: Connection| {
                let server = s_load.clone();
                tokio::spawn(async move {
                    let request = SessionRequest {
                        cwd: req.cwd,
                        load: Some(req.session_id.0.to_string()),
                        mcp_servers: mcp_specs(&req.mcp_servers),
                    };
                    let _ = match server.open(&cx, request).await {
                        Ok((_, meta)) => responder.respond(LoadSessionResponse::new().meta(meta)),
                        Err(e) => responder.respond_with_error(e),
                    };
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder: Responder<PromptResponse>, _cx| {
                let id = req.session_id.0.to_string();
                let Some(session) = s_prompt.session(&id) else {
                    return responder.respond_with_error(failure(
                        Error::invalid_params(),
                        format!(
                            "no session {id} on this connection (session/new or session/load first)"
                        ),
                    ));
                };
                let text = prompt_text(&req.prompt);
                if text.trim().is_empty() {
                    return responder.respond_with_error(failure(
                        Error::invalid_params(),
                        "the prompt is empty",
                    ));
                }
                let mut running = lock(&session.prompt);
                if running.is_some() {
                    drop(running);
                    return responder.respond_with_error(failure(
                        Error::invalid_request(),
                        "a prompt is already running in this session (session/cancel it first)",
                    ));
                }
                if session.ops.send(Op::UserTurn { text }).is_err() {
                    drop(running);
                    return responder.respond_with_error(failure(
                        Error::internal_error(),
                        "the session's agent has stopped",
                    ));
                }
                *running = Some(responder);
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |note: CancelNotification, _cx| {
                if let Some(session) = s_cancel.session(&note.session_id.0) {
                    let _ = session.ops.send(Op::Interrupt);
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await;
    server.shutdown().await;
    match result {
        Ok(()) => crate::protocol::exit::OK,
        Err(e) => {
            log(&format!("connection failed: {e}"));
            crate::protocol::exit::AGENT_ERROR
        }
    }
}

/// Reads one line of at most `max` bytes; a longer one is consumed and replaced by a note that
/// is not JSON (answered as a parse error). `None` at the end of input.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
) -> std::io::Result<Option<String>> {
    use tokio::io::AsyncBufReadExt;
    let mut buf = Vec::new();
    let mut over = false;
    loop {
        let chunk = reader.fill_buf().await?;
        if chunk.is_empty() {
            if buf.is_empty() && !over {
                return Ok(None);
            }
            break;
        }
        let (take, end) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !over {
            if buf.len() + take > max {
                over = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        reader.consume(take);
        if end {
            break;
        }
    }
    if over {
        return Ok(Some(format!("baton: a line over {max} bytes was dropped")));
    }
    while matches!(buf.last(), Some(b'\n' | b'\r')) {
        buf.pop();
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

/// Takes stdout for the protocol: the real stdout moves to a private descriptor (closed in
/// children), and descriptor 1 becomes a copy of stderr.
fn take_stdout() -> std::io::Result<std::fs::File> {
    let private = rustix::io::fcntl_dupfd_cloexec(rustix::stdio::stdout(), 3)?;
    // Descriptor 1 is replaced atomically.
    rustix::stdio::dup2_stdout(rustix::stdio::stderr())?;
    Ok(std::fs::File::from(private))
}

/// Serves ACP on this process's stdin and stdout (`baton acp`).
pub async fn serve_stdio(factory: SessionFactory) -> i32 {
    let out = match take_stdout() {
        Ok(f) => tokio::fs::File::from_std(f),
        Err(e) => {
            log(&format!("cannot take stdout for the protocol: {e}"));
            return crate::protocol::exit::AGENT_ERROR;
        }
    };
    let input = tokio::io::BufReader::new(tokio::io::stdin());
    let incoming = futures_util::stream::unfold(input, async |mut input| {
        loop {
            match read_line(&mut input, MAX_LINE_BYTES).await {
                Ok(Some(line)) if line.trim().is_empty() => continue,
                Ok(Some(line)) => return Some((Ok(line), input)),
                Ok(None) => return None,
                Err(e) => return Some((Err(e), input)),
            }
        }
    });
    let outgoing = futures_util::sink::unfold(out, async |mut out, line: String| {
        use tokio::io::AsyncWriteExt;
        out.write_all(line.as_bytes()).await?;
        out.write_all(b"\n").await?;
        out.flush().await?;
        Ok::<_, std::io::Error>(out)
    });
    let transport = agent_client_protocol::Lines::new(Box::pin(outgoing), Box::pin(incoming));
    serve(factory, transport).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_bounded_and_the_end_of_input_is_none() {
        let data = format!("{{\"a\":1}}\r\n{}\nlast", "x".repeat(100));
        let mut reader = tokio::io::BufReader::with_capacity(8, data.as_bytes());
        assert_eq!(
            read_line(&mut reader, 50).await.unwrap().as_deref(),
            Some("{\"a\":1}")
        );
        let dropped = read_line(&mut reader, 50).await.unwrap().unwrap();
        assert!(dropped.contains("dropped"), "{dropped}");
        assert_eq!(
            read_line(&mut reader, 50).await.unwrap().as_deref(),
            Some("last")
        );
        assert_eq!(read_line(&mut reader, 50).await.unwrap(), None);
    }

    #[test]
    fn a_prompt_keeps_text_and_quotes_embedded_files() {
        let blocks: Vec<ContentBlock> = serde_json::from_value(serde_json::json!([
            {"type": "text", "text": "explain "},
            {"type": "resource_link", "name": "main.rs", "uri": "file:///ws/main.rs"},
            {"type": "resource", "resource": {"uri": "file:///ws/a.txt", "text": "A-TEXT"}},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"}
        ]))
        .unwrap();
        let text = prompt_text(&blocks);
        assert!(
            text.starts_with("explain [main.rs](file:///ws/main.rs)"),
            "{text}"
        );
        assert!(text.contains("<file uri=\"file:///ws/a.txt\">\nA-TEXT\n</file>"));
        assert!(text.contains("image or audio block was left out"));
    }

    #[test]
    fn mcp_servers_keep_every_field() {
        let servers: Vec<McpServer> = serde_json::from_value(serde_json::json!([
            {"name": "fs", "command": "/bin/mcp-fs", "args": ["--root", "/ws"],
             "env": [{"name": "TOKEN", "value": "t"}]},
            {"type": "http", "name": "web", "url": "https://example.test/mcp",
             "headers": [{"name": "Authorization", "value": "Bearer x"}]}
        ]))
        .unwrap();
        assert_eq!(
            mcp_specs(&servers),
            [
                McpServerSpec::Stdio {
                    name: "fs".into(),
                    command: "/bin/mcp-fs".into(),
                    args: vec!["--root".into(), "/ws".into()],
                    env: vec![("TOKEN".into(), "t".into())],
                },
                McpServerSpec::Http {
                    name: "web".into(),
                    url: "https://example.test/mcp".into(),
                    headers: vec![("Authorization".into(), "Bearer x".into())],
                },
            ]
        );
    }
}
