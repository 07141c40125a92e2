//! The shell tools: `shell` runs a command line (`bash -c`) in a PTY inside the sandbox, in
//! the workspace or a subdirectory of it; a command still running after the yield time becomes
//! a session the model continues with `write_stdin` (keys, Ctrl-C as `\u0003`) and `poll`.
//! Output reaches the model stripped of control sequences and capped head + tail; the UI gets
//! every chunk, sanitized, as `Event::ToolOutput`.

pub(crate) mod output;
pub mod pty;
pub(crate) mod session;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

pub use session::{Ending, MAX_SESSIONS, SessionTable, ShellSession, Snapshot, end_every_session};

use crate::protocol::SandboxMode;
use crate::protocol::ToolSpec;
use crate::protocol::ToolStatus;
use crate::sandbox::SandboxPolicy;
use crate::tool::approval::SessionInput;
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolError, ToolResult};

/// Exit code reported for a command killed at its timeout (as `timeout(1)` does).
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// How the shell tools run commands.
#[derive(Debug, Clone)]
pub struct ShellConfig {
    pub sandbox: SandboxMode,
    pub network: bool,
    /// Extra writable directories under `workspace-write`.
    pub writable: Vec<PathBuf>,
    /// Paths of the home commands may read besides its toolchains.
    pub readable: Vec<PathBuf>,
    /// Host unix sockets (or folders of them) commands may connect to.
    pub unix_sockets: Vec<PathBuf>,
    pub max_processes: u32,
    /// What builds the sandbox (`landlock` is the named weaker mode).
    pub backend: crate::sandbox::Backend,
    /// Memory bound of one command in bytes (`None`: half of RAM).
    pub max_memory: Option<u64>,
    /// Names passed on although they look like secrets, and more names to drop.
    pub env_keep: Vec<String>,
    pub env_drop: Vec<String>,
    /// The shell run with `-c COMMAND` (`-lc` when `login` is set).
    pub shell: String,
    /// Run the shell as a login shell (reads the profile: PATH from version managers etc.).
    /// Off by default: a profile that writes under $HOME (pyenv shims, nvm) fails in the
    /// sandbox and prints its errors into every command's output.
    pub login: bool,
    pub default_timeout: Duration,
    /// Highest `timeout_ms` the model may ask for.
    pub max_timeout: Duration,
    pub default_yield: Duration,
    /// Bytes of output the model sees per look (head + tail).
    pub output_cap: usize,
    /// Between SIGTERM and SIGKILL when a command is killed.
    pub kill_grace: Duration,
    /// Pass variables named like secrets (`*KEY*`, `*SECRET*`, `*TOKEN*`, `*PASSWORD*`) on
    /// to commands. Off by default: the model's commands don't need baton's API keys.
    pub pass_secret_env: bool,
    /// Set `NO_COLOR=1` for commands (`--no-color`). Commands run in a PTY with
    /// `TERM=xterm-256color`, so without it git, cargo and pytest colour their output; a
    /// `NO_COLOR` in baton's own environment reaches them either way.
    pub no_color: bool,
}

impl Default for ShellConfig {
    fn default() -> Self {
        ShellConfig {
            sandbox: SandboxMode::WorkspaceWrite,
            network: false,
            writable: Vec::new(),
            readable: Vec::new(),
            unix_sockets: Vec::new(),
            max_processes: crate::sandbox::policy::DEFAULT_MAX_PROCESSES,
            backend: crate::sandbox::Backend::default(),
            max_memory: None,
            env_keep: Vec::new(),
            env_drop: Vec::new(),
            shell: "bash".into(),
            login: false,
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(30 * 60),
            default_yield: Duration::from_secs(10),
            output_cap: 16 * 1024,
            kill_grace: Duration::from_secs(2),
            pass_secret_env: false,
            no_color: false,
        }
    }
}

impl ShellConfig {
    fn policy(&self, workspace: &Path) -> SandboxPolicy {
        let mut p = SandboxPolicy::new(self.sandbox, workspace)
            .network(self.network)
            .max_processes(self.max_processes);
        p.writable = self.writable.clone();
        p.readable = self.readable.clone();
        if self.login {
            // A login shell reads its profile: the one reason to show these start-up files.
            let home = dirs::home_dir();
            let profiles = crate::sandbox::visibility::LOGIN_PROFILES.iter();
            p.readable.extend(
                home.iter()
                    .flat_map(|h| profiles.clone().map(|f| h.join(f))),
            );
        }
        p.unix_sockets = self.unix_sockets.clone();
        p.env.pass_secrets = self.pass_secret_env;
        p.env.keep = self.env_keep.clone();
        p.env.drop = self.env_drop.clone();
        p.max_memory = self.max_memory;
        p.backend = self.backend;
        p
    }
}

/// The three shell tools sharing one configuration.
pub fn shell_tools(config: ShellConfig) -> Vec<Arc<dyn Tool>> {
    let config = Arc::new(config);
    vec![
        Arc::new(ShellTool {
            config: Arc::clone(&config),
        }),
        Arc::new(WriteStdinTool {
            config: Arc::clone(&config),
        }),
        Arc::new(PollTool { config }),
    ]
}

/// `shell`: run a command line.
pub struct ShellTool {
    pub config: Arc<ShellConfig>,
}

/// `write_stdin`: send keys to a running session.
pub struct WriteStdinTool {
    pub config: Arc<ShellConfig>,
}

/// `poll`: wait for more output of a running session (or kill it).
pub struct PollTool {
    pub config: Arc<ShellConfig>,
}

fn ms(args: &Value, key: &str) -> Option<Duration> {
    args.get(key)
        .and_then(Value::as_u64)
        .map(Duration::from_millis)
}

/// Why a shell `workdir` was refused.
#[derive(Debug, thiserror::Error)]
pub enum WorkdirError {
    /// The directory cannot be resolved (it does not exist, or cannot be searched).
    #[error("workdir {workdir:?}: {source}")]
    Unresolvable {
        workdir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("workdir {workdir:?} is outside the workspace {workspace}")]
    OutsideWorkspace { workdir: String, workspace: String },
    #[error("workdir {workdir:?} leads outside the workspace (symlink to {target})")]
    SymlinkEscape { workdir: String, target: String },
    #[error("workdir {workdir:?} is not a directory")]
    NotADirectory { workdir: String },
}

/// Resolves `workdir` inside the workspace (relative to it, or absolute under it).
pub fn resolve_workdir(workspace: &Path, workdir: Option<&str>) -> Result<PathBuf, WorkdirError> {
    let Some(w) = workdir.filter(|w| !w.is_empty()) else {
        return Ok(workspace.to_path_buf());
    };
    let lexical = crate::untrusted_fs::lexical(&workspace.join(w));
    let real = lexical
        .canonicalize()
        .map_err(|source| WorkdirError::Unresolvable {
            workdir: w.to_string(),
            source,
        })?;
    if !real.starts_with(workspace) && !lexical.starts_with(workspace) {
        return Err(WorkdirError::OutsideWorkspace {
            workdir: w.to_string(),
            workspace: workspace.display().to_string(),
        });
    }
    if !real.starts_with(workspace) {
        return Err(WorkdirError::SymlinkEscape {
            workdir: w.to_string(),
            target: real.display().to_string(),
        });
    }
    if !real.is_dir() {
        return Err(WorkdirError::NotADirectory {
            workdir: w.to_string(),
        });
    }
    Ok(real)
}

/// Whether a failed command's output shows the sandbox saying no: a denial that names a path
/// this policy does not let commands write, or a network error while the network is off. A
/// "Permission denied" on a path the policy allows (a script without its exec bit, a file owned
/// by another user) is the command's own failure, and the model is not sent to the sandbox.
fn denied_by_policy(output: &str, policy: &SandboxPolicy, cwd: &Path) -> bool {
    const DENIALS: [&str; 3] = [
        "permission denied",
        "operation not permitted",
        "read-only file system",
    ];
    for line in output.lines() {
        let lower = line.to_ascii_lowercase();
        let network_error = lower.contains("network is unreachable")
            || lower.contains("address family not supported")
            || (lower.contains("socket") && lower.contains("not permitted"));
        if !policy.network && network_error {
            return true;
        }
        if lower.contains("no such file or directory")
            && denied_subjects(line).iter().any(|s| {
                let path = Path::new(s);
                path.is_absolute() && crate::sandbox::visibility::hidden_in_home(path, policy)
            })
        {
            return true;
        }
        if !DENIALS.iter().any(|d| lower.contains(d)) {
            continue;
        }
        for subject in denied_subjects(line) {
            let path = Path::new(&subject);
            let abs = if path.is_absolute() {
                path.to_path_buf()
            } else {
                cwd.join(path)
            };
            if policy.denies_write(&abs) {
                return true;
            }
        }
    }
    false
}

/// The paths a denial line is about, in the shapes tools print them: `PROGRAM: PATH: Permission
/// denied`, `cannot touch 'PATH': …`, and Python's `Permission denied: 'PATH'`.
fn denied_subjects(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let quoted = |s: &str| {
        let t = s.trim().trim_end_matches(':').trim();
        t.trim_matches(|c| matches!(c, '\'' | '"' | '`' | '‘' | '’'))
            .to_string()
    };
    let lower = line.to_ascii_lowercase();
    for denial in [
        "permission denied",
        "operation not permitted",
        "read-only file system",
        "no such file or directory",
    ] {
        let Some(at) = lower.find(denial) else {
            continue;
        };
        // Before the denial: the last `: `-separated field (`bash: line 1: PATH: …`).
        if let Some(before) = line[..at].trim_end().strip_suffix(':')
            && let Some(field) = before.rsplit(": ").next()
        {
            let field = field.rsplit(' ').next().unwrap_or(field);
            out.push(quoted(field));
        }
        // After it: `Permission denied: 'PATH'`.
        let after = line[at + denial.len()..].trim_start();
        if let Some(rest) = after.strip_prefix(':') {
            out.push(quoted(rest));
        }
    }
    out.retain(|p| !p.is_empty() && !p.contains(char::is_whitespace));
    out
}

fn render(
    snapshot: &Snapshot,
    session_id: u32,
    timeout: Duration,
    limits: Option<(&str, &SandboxPolicy, &Path)>,
) -> ToolResult {
    let mut content = snapshot.output.clone();
    if !content.is_empty() && !content.ends_with('\n') {
        content.push('\n');
    }
    let secs = snapshot.elapsed.as_secs_f64();
    match snapshot.ending {
        None => {
            content.push_str(&format!(
                "[still running as session {session_id} after {secs:.1}s; continue with poll \
                 or write_stdin (session_id {session_id}), send \"\\u0003\" to interrupt]"
            ));
            ToolResult {
                content,
                status: ToolStatus::Ok,
                exit_code: None,
            }
        }
        Some(Ending::Exited(code)) => {
            content.push_str(&format!("[exit code {code}]"));
            if code != 0
                && let Some((limits, policy, cwd)) = limits
                && denied_by_policy(&snapshot.output, policy, cwd)
            {
                content.push_str(&format!("\n[this may be the {limits}]"));
            }
            ToolResult {
                content,
                // A non-zero exit is the command's failure, not the tool's: `Failed`, not `Error`.
                status: if code == 0 {
                    ToolStatus::Ok
                } else {
                    ToolStatus::Failed
                },
                exit_code: Some(code),
            }
        }
        Some(Ending::TimedOut) => {
            content.push_str(&format!(
                "[timed out after {:.1}s: the process group was killed; exit code {TIMEOUT_EXIT_CODE}]",
                timeout.as_secs_f64()
            ));
            ToolResult {
                content,
                status: ToolStatus::TimedOut,
                exit_code: Some(TIMEOUT_EXIT_CODE),
            }
        }
        Some(Ending::Killed) => {
            content.push_str("[killed: the process group was terminated]");
            ToolResult {
                content,
                status: ToolStatus::Interrupted,
                exit_code: None,
            }
        }
    }
}

/// Waits on a session and turns what it saw into a result; forgets finished sessions.
async fn wait_and_render(
    session: Arc<ShellSession>,
    yield_for: Duration,
    ctx: &ToolContext,
) -> ToolResult {
    let snap = session.wait(yield_for, &ctx.cancel).await;
    if snap.ending.is_some() {
        ctx.state.shell_sessions.remove(session.id);
    }
    render(
        &snap,
        session.id,
        session.timeout,
        session
            .sandbox_limits
            .as_deref()
            .map(|limits| (limits, &session.policy, session.cwd.as_path())),
    )
}

/// Where a command runs, as the model is told: true for every mode (with the sandbox off
/// nothing is confined, the network included).
fn where_it_runs(config: &ShellConfig) -> String {
    match config.sandbox {
        SandboxMode::Off => {
            "directly on this machine, with no sandbox (sandbox: off; network not restricted)"
                .into()
        }
        mode => format!(
            "inside the sandbox (sandbox: {mode}; network {})",
            if config.network { "allowed" } else { "blocked" }
        ),
    }
}

impl Tool for ShellTool {
    fn name(&self) -> &'static str {
        "shell"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "shell".into(),
            description: format!(
                "Run a shell command line with `{} {}` in a terminal (PTY) {}. Runs in the \
                 workspace root unless `workdir` names a \
                 directory inside it. Output is plain text with control sequences removed; long \
                 output keeps the start and the end with a line saying what was omitted. If the \
                 command is still running after `yield_ms`, you get its output so far and a \
                 session_id: continue with `poll`, answer prompts with `write_stdin`. At \
                 `timeout_ms` the whole process group is killed and the exit code is 124.",
                self.config.shell,
                if self.config.login { "-lc" } else { "-c" },
                where_it_runs(&self.config),
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command line, e.g. `cargo test -q 2>&1 | tail -20`."},
                    "workdir": {"type": "string", "description": "Directory to run in, relative to the workspace root (default: the root)."},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": format!("Kill the command after this many ms (default {}, at most {}).", self.config.default_timeout.as_millis(), self.config.max_timeout.as_millis())},
                    "yield_ms": {"type": "integer", "minimum": 0, "description": format!("Return with a session_id if still running after this many ms (default {}).", self.config.default_yield.as_millis())}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, args: &Value, ctx: &ToolContext) -> ApprovalNeed {
        let command = args
            .get("command")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let cwd = resolve_workdir(&ctx.workspace, args.get("workdir").and_then(Value::as_str))
            .unwrap_or_else(|_| ctx.workspace.clone());
        ApprovalNeed::Command {
            command: command.to_string(),
            argv: shlex::split(command).unwrap_or_else(|| vec![command.to_string()]),
            cwd: cwd.display().to_string(),
        }
    }

    fn title(&self, args: &Value) -> String {
        let command = args
            .get("command")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let first = command.lines().next().unwrap_or_default();
        if command.contains('\n') {
            format!("{first} …")
        } else {
            first.to_string()
        }
    }

    fn run<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let Some(command) = args.get("command").and_then(Value::as_str) else {
                return ToolResult::error("missing required argument `command` (a string)");
            };
            if command.trim().is_empty() {
                return ToolResult::error("`command` is empty");
            }
            let cwd = match resolve_workdir(
                &ctx.workspace,
                args.get("workdir").and_then(Value::as_str),
            ) {
                Ok(c) => c,
                Err(e) => return ToolError::from(e).into(),
            };
            let timeout = ms(&args, "timeout_ms")
                .unwrap_or(self.config.default_timeout)
                .min(self.config.max_timeout)
                .max(Duration::from_millis(1));
            let yield_for = ms(&args, "yield_ms").unwrap_or(self.config.default_yield);
            let id = match ctx.state.shell_sessions.reserve_id() {
                Ok(id) => id,
                Err(e) => return e.into(),
            };
            // A command that may write gets the turn's checkpoint first, so undo covers it too;
            // read-only commands (the safe list) skip the snapshot.
            if self.config.sandbox != SandboxMode::ReadOnly
                && !crate::tool::approval::command_is_auto_approved(command, &[], &[])
            {
                let snapshot_ctx = ctx.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    crate::tool::checkpoint::before_change(&snapshot_ctx)
                })
                .await;
            }
            let policy = self.config.policy(&ctx.workspace);
            let config = Arc::clone(&self.config);
            let req = session::SpawnRequest {
                command,
                shell: &config.shell,
                login: config.login,
                strip_secret_env: !config.pass_secret_env,
                no_color: config.no_color,
                cwd: &cwd,
                policy: &policy,
                timeout,
                kill_grace: config.kill_grace,
                output_cap: config.output_cap,
                events: ctx.events.clone(),
                call_id: ctx.call_id.clone(),
            };
            let session = match ShellSession::spawn(id, req) {
                Ok(s) => s,
                Err(e) => return e.into(),
            };
            ctx.state.shell_sessions.insert(Arc::clone(&session));
            wait_and_render(session, yield_for, ctx).await
        })
    }
}

fn session_arg(args: &Value, ctx: &ToolContext) -> Result<Arc<ShellSession>, ToolError> {
    let id = args
        .get("session_id")
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .ok_or_else(|| {
            ToolError::invalid_argument("missing required argument `session_id` (an integer)")
        })?;
    let no_session = || ToolError::NoSession {
        id,
        running: ctx.state.shell_sessions.live_ids(),
    };
    let small = u32::try_from(id).map_err(|_| no_session())?;
    ctx.state.shell_sessions.get(small).ok_or_else(no_session)
}

fn session_schema(extra: Value, required: &[&str], default_yield: Duration) -> Value {
    let mut props = json!({
        "session_id": {"type": "integer", "description": "The session_id a `shell` call returned."},
        "yield_ms": {"type": "integer", "minimum": 0, "description": format!("Wait at most this many ms for the command to finish (default {}).", default_yield.as_millis())}
    });
    if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            p.insert(k.clone(), v.clone());
        }
    }
    json!({"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

impl Tool for WriteStdinTool {
    fn name(&self) -> &'static str {
        "write_stdin"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "write_stdin".into(),
            description: "Type text into a running shell session's terminal, then wait like \
                `poll`. Include \"\\n\" to press Enter; \"\\u0003\" is Ctrl-C, \"\\u0004\" Ctrl-D \
                (end of input). Returns the output produced since the last look."
                .into(),
            parameters: session_schema(
                json!({"chars": {"type": "string", "description": "Text or control keys to send."}}),
                &["session_id", "chars"],
                self.config.default_yield,
            ),
        }
    }

    fn approval(&self, args: &Value, ctx: &ToolContext) -> ApprovalNeed {
        let (Ok(session), Some(text)) = (
            session_arg(args, ctx),
            args.get("chars").and_then(Value::as_str),
        ) else {
            // The call fails before anything is typed.
            return ApprovalNeed::None;
        };
        match crate::tool::approval::judge_session_input(&session.command, text) {
            SessionInput::Data => ApprovalNeed::None,
            SessionInput::ShellCommand(line) => ApprovalNeed::Command {
                argv: shlex::split(&line).unwrap_or_else(|| vec![line.clone()]),
                command: line,
                cwd: format!(
                    "session {} (`{}`), {}",
                    session.id,
                    session.command,
                    session.cwd.display()
                ),
            },
            SessionInput::Code => ApprovalNeed::Input {
                session: session.id,
                program: session.command.clone(),
                text: text.to_string(),
            },
        }
    }

    fn title(&self, args: &Value) -> String {
        let chars = args
            .get("chars")
            .and_then(Value::as_str)
            .unwrap_or_default();
        format!(
            "stdin → session {}: {}",
            args.get("session_id")
                .map(|v| v.to_string())
                .unwrap_or_default(),
            chars.escape_debug()
        )
    }

    fn run<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let session = match session_arg(&args, ctx) {
                Ok(s) => s,
                Err(e) => return e.into(),
            };
            let Some(chars) = args.get("chars").and_then(Value::as_str) else {
                return ToolResult::error("missing required argument `chars` (a string)");
            };
            session.retarget(ctx.events.clone(), ctx.call_id.clone());
            if let Err(e) = session.write(chars).await {
                return e.into();
            }
            let yield_for = ms(&args, "yield_ms").unwrap_or(self.config.default_yield);
            wait_and_render(session, yield_for, ctx).await
        })
    }
}

impl Tool for PollTool {
    fn name(&self) -> &'static str {
        "poll"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "poll".into(),
            description: "Wait for a running shell session to produce output or finish, and \
                return the output since the last look. With `kill: true`, stop it (SIGTERM, \
                then SIGKILL) instead."
                .into(),
            parameters: session_schema(
                json!({"kill": {"type": "boolean", "description": "Kill the session's whole process group."}}),
                &["session_id"],
                self.config.default_yield,
            ),
        }
    }

    fn approval(&self, _args: &Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &Value) -> String {
        let id = args
            .get("session_id")
            .map(|v| v.to_string())
            .unwrap_or_default();
        if args.get("kill").and_then(Value::as_bool) == Some(true) {
            format!("kill session {id}")
        } else {
            format!("poll session {id}")
        }
    }

    fn run<'a>(&'a self, args: Value, ctx: &'a ToolContext) -> BoxFuture<'a, ToolResult> {
        Box::pin(async move {
            let session = match session_arg(&args, ctx) {
                Ok(s) => s,
                Err(e) => return e.into(),
            };
            session.retarget(ctx.events.clone(), ctx.call_id.clone());
            if args.get("kill").and_then(Value::as_bool) == Some(true) {
                session.kill(Ending::Killed).await;
            }
            let yield_for = ms(&args, "yield_ms").unwrap_or(self.config.default_yield);
            wait_and_render(session, yield_for, ctx).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_is_about_the_path_it_names() {
        let subjects = |l: &str| denied_subjects(l);
        assert_eq!(
            subjects("bash: line 1: /etc/x: Permission denied"),
            ["/etc/x"]
        );
        assert_eq!(
            subjects("touch: cannot touch '/opt/y': Read-only file system"),
            ["/opt/y"]
        );
        assert_eq!(
            subjects("PermissionError: [Errno 13] Permission denied: '/root/z'"),
            ["/root/z"]
        );
        assert_eq!(subjects("bash: ./run.sh: Permission denied"), ["./run.sh"]);
        let dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(dir.path()).unwrap();
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws);
        let outside = "bash: line 1: /usr/lib/z: Permission denied";
        assert!(denied_by_policy(outside, &policy, &ws));
        assert!(!denied_by_policy(
            "bash: ./run.sh: Permission denied",
            &policy,
            &ws
        ));
        // Network errors point at the sandbox only when it is the sandbox that has it off.
        let refused = "curl: (7) Couldn't connect: Network is unreachable";
        assert!(denied_by_policy(refused, &policy, &ws));
        assert!(!denied_by_policy(
            refused,
            &policy.clone().network(true),
            &ws
        ));
    }

    #[test]
    fn workdirs_are_resolved_inside_the_workspace_or_refused_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        assert_eq!(resolve_workdir(&root, None).unwrap(), root);
        assert_eq!(
            resolve_workdir(&root, Some("sub")).unwrap(),
            root.join("sub")
        );
        let err = resolve_workdir(&root, Some("file")).unwrap_err();
        assert!(matches!(err, WorkdirError::NotADirectory { .. }), "{err}");
        assert_eq!(err.to_string(), "workdir \"file\" is not a directory");
        let err = resolve_workdir(&root, Some("missing")).unwrap_err();
        assert!(matches!(err, WorkdirError::Unresolvable { .. }), "{err}");
        let err = resolve_workdir(&root, Some("../..")).unwrap_err();
        assert!(
            matches!(err, WorkdirError::OutsideWorkspace { .. }),
            "{err}"
        );
        std::os::unix::fs::symlink("/tmp", root.join("out")).unwrap();
        let err = resolve_workdir(&root, Some("out")).unwrap_err();
        assert!(matches!(err, WorkdirError::SymlinkEscape { .. }), "{err}");
    }
}

#[cfg(test)]
mod description_tests {
    use super::*;

    #[test]
    fn the_description_says_what_confines_a_command() {
        let off = ShellConfig {
            sandbox: SandboxMode::Off,
            ..ShellConfig::default()
        };
        let text = ShellTool {
            config: Arc::new(off),
        }
        .spec()
        .description;
        // With the sandbox off nothing blocks the network: the model must not be told it does.
        assert!(!text.contains("blocked"), "{text}");
        assert!(text.contains("no sandbox (sandbox: off; network not restricted)"));
        let on = ShellTool {
            config: Arc::new(ShellConfig::default()),
        }
        .spec()
        .description;
        assert!(on.contains("inside the sandbox (sandbox: workspace-write; network blocked)"));
    }
}
