//! Opening one server's connection: the stdio child (own process group, a small fixed
//! environment plus the configured one, stderr kept as a short tail for error messages) or the
//! streamable HTTP client, then `initialize` and `tools/list`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use rmcp::ServiceExt;
use rmcp::model::{ClientConfig, Implementation};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use tokio::io::AsyncBufReadExt;

use crate::config::{McpServer, McpTransport};
use crate::protocol::{SandboxBackend, SandboxMode, host_programs};
use crate::sandbox::env::COMMAND_ONLY_PREFIX;

/// The client side of one connection, with the child process it talks to (killed on drop).
pub struct Service {
    running: rmcp::service::RunningService<rmcp::RoleClient, ClientConfig>,
    _child: Option<Box<dyn process_wrap::tokio::ChildWrapper>>,
}

impl Service {
    pub fn peer(&self) -> &rmcp::Peer<rmcp::RoleClient> {
        self.running.peer()
    }
}

/// The longest JSON-RPC line read from a stdio server. rmcp's default (16 MiB) drops a 10 MB
/// text result that the Python SDK sends twice (as text and as structured content), and a
/// dropped response leaves its call waiting for `tool_timeout_sec`; the result is capped for
/// the model anyway.
const MAX_LINE: usize = 64 << 20;

/// How long a server whose handshake failed is given to exit and finish its stderr.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

const STDERR_LINES: usize = 20;
const STDERR_LINE_CHARS: usize = 300;

/// The last lines a server wrote to stderr.
#[derive(Default, Clone)]
pub struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: &str) {
        let line: String = line
            .chars()
            .filter(|c| !c.is_control())
            .take(STDERR_LINE_CHARS)
            .collect();
        if line.trim().is_empty() {
            return;
        }
        let mut lines = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == STDERR_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// The last non-empty line, if any.
    pub fn last(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .back()
            .cloned()
    }
}

fn client_info() -> ClientConfig {
    let mut info = ClientConfig::default();
    info.client_info = Implementation::new("baton", env!("CARGO_PKG_VERSION"));
    info
}

/// Why `e` happened, on one short line (some rmcp errors print whole messages).
fn short(e: impl std::fmt::Display) -> String {
    let text = e.to_string().replace('\n', " ");
    match text.char_indices().nth(400) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The folder a stdio server starts in. It runs outside the sandbox, and interpreters load
/// code from their working directory (`python -m mod` imports `./mod.py`, `npx -y pkg` runs
/// `./node_modules/.bin/pkg`, `uv run` reads `./pyproject.toml`): a user's or an editor's
/// server starts in a folder no command could have written ([`host_programs::neutral_dir`]:
/// the home, else `/`), or in its configured `cwd` when that lies outside the workspace or
/// the workspace's folder is trusted. A trusted project's own server starts in the workspace
/// (in the sandbox: [`ProjectSandbox`]).
fn working_dir(server: &McpServer, cwd: Option<&Path>, workspace: &Path) -> PathBuf {
    let roots = host_programs::writable_roots_with(workspace);
    if server.project {
        return cwd.unwrap_or(workspace).to_path_buf();
    }
    match cwd {
        Some(c)
            if !host_programs::entry_is_writable(c, &roots)
                || crate::config::mcp::workspace_trusted(workspace) =>
        {
            c.to_path_buf()
        }
        _ => host_programs::neutral_dir(&roots),
    }
}

/// Why a server started outside the sandbox would run what a command could have written, if
/// it would: [`host_programs::runs_from_writable_root`] for its command line (its program or
/// a script in a writable root, `~/proj/.venv/bin/python` or `python ~/proj/server.py`, red
/// team round 33; a folder it is pointed at, `npm --prefix ~/proj`, a wrapper naming one,
/// round 36; code given with `-c` naming one however spelled, round 34), or the `.pth` files
/// of its Python. A server given the workspace itself as data (the filesystem server's root)
/// is not started either: one rule for every word is the only one no launcher gets around.
fn runs_what_commands_write(
    command: &str,
    args: &[String],
    dir: &Path,
    workspace: &Path,
    search: &std::ffi::OsStr,
) -> Option<String> {
    let roots = host_programs::writable_roots_with(workspace);
    let advice = "baton does not start it outside the sandbox (keep the program and what it \
                  runs elsewhere, or make it a project server in .mcp.json, which runs in the \
                  sandbox)";
    if let Some(path_file) = python_paths_into(command, dir, &roots) {
        return Some(format!(
            "its Python loads modules from a folder commands may write ({} points there: an \
             editable install of a project in the workspace): baton does not start it outside \
             the sandbox (install it normally, or make it a project server in .mcp.json)",
            path_file.display()
        ));
    }
    // Code given on the command line (`sh -c "cd ~/proj && ./srv"`): a pattern may name one.
    let code = args
        .windows(2)
        .filter(|w| matches!(w[0].as_str(), "-c" | "-e" | "--eval" | "-lc" | "-ic"))
        .map(|w| &w[1]);
    for text in code {
        if text.contains(['*', '?', '['])
            || host_programs::names_a_writable_path(std::ffi::OsStr::new(text), &roots, true)
        {
            return Some(format!(
                "its command line `{text}` names a folder commands may write: {advice}"
            ));
        }
    }
    // Relative words lead from the folder it starts in.
    let placed: Vec<String> = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .map(|w| {
            if w.contains('/') && !w.starts_with(['/', '~']) {
                dir.join(w).display().to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    host_programs::runs_from_writable_root(placed.iter().map(String::as_str), &roots, search)
        .map(|why| format!("{why}: {advice}"))
}

/// For a Python interpreter `command`: the first `.pth` file or editable-install finder of
/// its environment's site-packages (and the user's) that names a path in `roots` (round 34:
/// `pip install -e ~/proj` into a venv outside the workspace made `python -m mysrv` import
/// what commands wrote). Each file read up to 64 KiB.
fn python_paths_into(command: &str, dir: &Path, roots: &[PathBuf]) -> Option<PathBuf> {
    let name = Path::new(command).file_name()?.to_str()?;
    if !name.starts_with("python") {
        return None;
    }
    let program = if command.contains('/') {
        dir.join(command)
    } else {
        host_programs::find_program(command, roots)?
    };
    // The interpreter's prefix: a venv's `bin/..`, or `/usr` for `/usr/bin/python3`.
    let prefix = program.parent()?.parent()?.to_path_buf();
    let mut lib_dirs = vec![prefix.join("lib"), prefix.join("local/lib")];
    lib_dirs.extend(dirs::home_dir().map(|h| h.join(".local/lib")));
    for lib in lib_dirs {
        for version in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
            if !version.file_name().to_string_lossy().starts_with("python") {
                continue;
            }
            for packages in ["site-packages", "dist-packages"] {
                let folder = version.path().join(packages);
                for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
                    let file = entry.file_name().to_string_lossy().into_owned();
                    let loads = file.ends_with(".pth")
                        || (file.starts_with("__editable__") && file.ends_with(".py"));
                    if !loads {
                        continue;
                    }
                    let Ok(text) = crate::untrusted_fs::read_following(&entry.path(), 64 * 1024)
                    else {
                        continue;
                    };
                    let text = String::from_utf8_lossy(&text);
                    let names = text.lines().any(|line| {
                        host_programs::names_a_writable_path(
                            std::ffi::OsStr::new(line.trim()),
                            roots,
                            false,
                        )
                    });
                    if names {
                        return Some(entry.path());
                    }
                }
            }
        }
    }
    None
}

/// A stdio server's environment: the variables of baton's that every program started outside
/// the sandbox gets ([`host_programs::HOST_PROGRAM_ENVIRONMENT`]) and the configured ones, with PATH never naming a folder in the workspace (the program is looked up in the
/// server's PATH, and an activated `.venv/bin` holds what commands put there). A user's or an
/// editor's server also loses the workspace entries of interpreters' search paths
/// (`PYTHONPATH`, `NODE_PATH`…) and npm folders that lie there. A server in the sandbox
/// (`sandboxed`) gets its configured variables but PATH as command-only ones
/// ([`COMMAND_ONLY_PREFIX`]): baton and bubblewrap start it from outside the sandbox, and what a
/// project names (`LD_PRELOAD`, `HOME`, `XDG_CONFIG_HOME`…) must reach the server alone.
fn child_env(
    project: bool,
    configured: &BTreeMap<String, String>,
    workspace: &Path,
    sandboxed: bool,
) -> Vec<(OsString, OsString)> {
    let roots = host_programs::writable_roots_with(workspace);
    let mut vars: BTreeMap<String, OsString> = BTreeMap::new();
    for name in host_programs::HOST_PROGRAM_ENVIRONMENT {
        if let Some(value) = std::env::var_os(name) {
            vars.insert(name.to_string(), value);
        }
    }
    let mut command_only: Vec<(OsString, OsString)> = Vec::new();
    for (name, value) in configured {
        if sandboxed && name != "PATH" {
            command_only.push((format!("{COMMAND_ONLY_PREFIX}{name}").into(), value.into()));
        } else {
            vars.insert(name.clone(), value.into());
        }
    }
    vars.into_iter()
        .filter_map(|(name, value)| {
            let kept = if project && name != "PATH" {
                Some(value)
            } else if configured.contains_key(&name) {
                host_programs::scrub_var(&name, &value, &roots)
            } else {
                host_programs::scrub_inherited(&name, &value, &roots)
            };
            kept.map(|v| (OsString::from(name), v))
        })
        .chain(command_only)
        .collect()
}

/// The sandbox a project's stdio servers run in: the session's (its backend, the paths and
/// sockets it lets commands reach, the variables it keeps), read-only, with the network on.
/// A trusted project's server is still code of the workspace, which the model's commands may
/// edit (its imports, its `package.json`, a `__pycache__`…): no record of its files could be
/// complete, so it runs where such an edit can reach nothing: it reads the workspace and
/// writes only its own `/tmp`. With the session's sandbox off (`mode` `Off`), it runs as the
/// session's commands do: outside.
#[derive(Debug, Clone, Default)]
pub struct ProjectSandbox {
    pub mode: SandboxMode,
    pub backend: SandboxBackend,
    pub readable: Vec<PathBuf>,
    pub unix_sockets: Vec<PathBuf>,
    pub env_keep: Vec<String>,
    /// Dropped from commands besides the sandbox's patterns (baton's API key variable).
    pub env_drop: Vec<String>,
}

impl ProjectSandbox {
    /// Why a project's server may not start with the values it takes from baton's
    /// environment (`reads_env`): one the sandbox would not give a command (a credential by
    /// name or value, the API key's variable) goes to no code of the workspace either, which
    /// the model's commands may edit and which has the network. `None`: it may.
    fn refuses(&self, server: &McpServer) -> Option<String> {
        let policy = crate::sandbox::env::EnvPolicy {
            pass_secrets: false,
            keep: self.env_keep.clone(),
            drop: self.env_drop.clone(),
        };
        let withheld: Vec<&str> = server
            .reads_env
            .iter()
            .filter(|name| {
                let value = std::env::var_os(name).unwrap_or_default();
                !policy.passes(std::ffi::OsStr::new(name), &value)
            })
            .map(String::as_str)
            .collect();
        let why = match server.transport {
            McpTransport::Stdio { .. } => {
                "a project's server is code of the workspace, which the model's commands may \
                 edit, and it has the network"
            }
            McpTransport::Http { .. } => {
                "baton would send it to the address a project's file names, which is no \
                 address of yours"
            }
        };
        (!withheld.is_empty()).then(|| {
            format!(
                "it takes {} from baton's environment, which the sandbox keeps from commands: \
                 {why}. Pass it to commands too (`[sandbox] env_keep`) or declare the server \
                 in your own config",
                withheld.join(", ")
            )
        })
    }

    /// `command args` as `baton sandbox` runs it with `workspace` as its workspace, started in
    /// `dir` (the server's `cwd`; `baton sandbox` starts its command at the workspace's top):
    /// the program is this very binary (`/proc/self/exe`, whatever has since been written at
    /// its path). The server's own variables travel as command-only ones ([`child_env`]).
    fn wrap(
        &self,
        workspace: &Path,
        dir: &Path,
        command: &str,
        args: &[String],
    ) -> (PathBuf, Vec<OsString>) {
        let mut out: Vec<OsString> = Vec::new();
        for name in &self.env_keep {
            out.extend(["--env-keep".into(), name.into()]);
        }
        out.extend(["sandbox".into(), "-C".into(), workspace.into()]);
        // Read-only: the server writes nothing a later `git` or baton would act on, so it
        // needs no audit after it ends, which for a server lasting the whole session would
        // judge the user's own edits of that time as its doing.
        out.extend(["--sandbox".into(), SandboxMode::ReadOnly.as_str().into()]);
        out.extend(["--sandbox-backend".into(), self.backend.as_str().into()]);
        out.push("--network".into());
        for (flag, paths) in [
            ("--read", &self.readable),
            ("--allow-unix-socket", &self.unix_sockets),
        ] {
            for p in paths {
                out.extend([flag.into(), p.into()]);
            }
        }
        out.push("--".into());
        if dir != workspace {
            out.extend([
                "/bin/sh".into(),
                "-c".into(),
                r#"cd -- "$1" && shift && exec "$@""#.into(),
                "sh".into(),
                dir.into(),
            ]);
        }
        out.push(command.into());
        out.extend(args.iter().map(OsString::from));
        (PathBuf::from("/proc/self/exe"), out)
    }
}

/// Starts the server and lists its tools. `on_group` is told the child's process group as
/// soon as it exists, so it is stopped even when the handshake never finishes.
pub async fn start(
    server: &McpServer,
    workspace: &Path,
    sandbox: &ProjectSandbox,
    stderr: &StderrTail,
    on_group: impl FnOnce(i32),
) -> Result<(Service, Vec<rmcp::model::Tool>), String> {
    let service = match &server.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let dir = working_dir(server, cwd.as_deref(), workspace);
            let sandboxed = server.project && sandbox.mode != SandboxMode::Off;
            if sandboxed && let Some(why) = sandbox.refuses(server) {
                return Err(why);
            }
            let vars = child_env(server.project, env, workspace, sandboxed);
            // Where the program is looked up: the server's own PATH.
            let search = vars
                .iter()
                .find(|(name, _)| name == "PATH")
                .map(|(_, value)| value.clone())
                .unwrap_or_default();
            // With the sandbox off commands write anywhere: nothing to tell apart.
            if !server.project
                && sandbox.mode != SandboxMode::Off
                && let Some(why) = runs_what_commands_write(command, args, &dir, workspace, &search)
            {
                return Err(why);
            }
            let mut cmd = if sandboxed {
                let (program, wrapped) = sandbox.wrap(workspace, &dir, command, args);
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(wrapped);
                cmd
            } else {
                let mut cmd = tokio::process::Command::new(command);
                cmd.args(args);
                cmd
            };
            cmd.env_clear().current_dir(&dir).kill_on_drop(true);
            for (name, value) in vars {
                cmd.env(name, value);
            }
            let mut wrap = process_wrap::tokio::CommandWrap::from(cmd);
            // Its own group: Ctrl-C in the terminal does not reach it, and stopping it stops
            // whatever it started (`npx` runs node under it).
            wrap.wrap(process_wrap::tokio::ProcessGroup::leader());
            wrap.command_mut()
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = wrap
                .spawn()
                .map_err(|e| format!("cannot start `{command}`: {e}"))?;
            if let Some(pid) = child.id() {
                on_group(pid as i32);
            }
            let (Some(stdout), Some(stdin)) = (
                child.inner_mut().stdout().take(),
                child.inner_mut().stdin().take(),
            ) else {
                return Err(format!("`{command}`: no pipes to talk to it"));
            };
            let mut drained = None;
            if let Some(err) = child.inner_mut().stderr().take() {
                let tail = stderr.clone();
                drained = Some(tokio::spawn(async move {
                    let mut lines = tokio::io::BufReader::new(err).lines();
                    while let Ok(Some(line)) = lines.next_line().await {
                        tail.push(&line);
                    }
                }));
            }
            let transport =
                AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_LINE);
            let running = match client_info().serve(transport).await {
                Ok(r) => r,
                Err(e) => {
                    // A server that died says why on stderr: give it a moment to be read.
                    let exited = tokio::time::timeout(EXIT_GRACE, child.wait()).await;
                    if let Some(task) = drained {
                        let _ = tokio::time::timeout(EXIT_GRACE, task).await;
                    }
                    return Err(match exited {
                        Ok(Ok(status)) => {
                            format!("it exited ({status}) before answering `initialize`")
                        }
                        _ => format!("`initialize` failed: {}", short(e)),
                    });
                }
            };
            Service {
                running,
                _child: Some(child),
            }
        }
        McpTransport::Http {
            url,
            bearer_token_env_var,
            http_headers,
            env_http_headers,
        } => {
            if server.project
                && sandbox.mode != SandboxMode::Off
                && let Some(why) = sandbox.refuses(server)
            {
                return Err(why);
            }
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(var) = bearer_token_env_var {
                let token = std::env::var(var)
                    .ok()
                    .filter(|t| !t.trim().is_empty())
                    .ok_or_else(|| format!("`bearer_token_env_var`: {var} is not set"))?;
                config = config.auth_header(token);
            }
            config = config.custom_headers(headers(http_headers, env_http_headers)?);
            crate::protocol::install_tls_provider();
            let transport = StreamableHttpClientTransport::from_config(config);
            let running = client_info()
                .serve(transport)
                .await
                .map_err(|e| format!("`initialize` failed: {}", short(e)))?;
            Service {
                running,
                _child: None,
            }
        }
    };
    let tools = service
        .running
        .list_all_tools()
        .await
        .map_err(|e| format!("`tools/list` failed: {}", short(e)))?;
    Ok((service, tools))
}

fn headers(
    fixed: &BTreeMap<String, String>,
    from_env: &BTreeMap<String, String>,
) -> Result<HashMap<http::HeaderName, http::HeaderValue>, String> {
    let mut out = HashMap::new();
    let mut add = |name: &str, value: &str| -> Result<(), String> {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not a valid HTTP header name"))?;
        let value = http::HeaderValue::from_str(value)
            .map_err(|_| format!("the value of header `{name}` is not valid in HTTP"))?;
        out.insert(header, value);
        Ok(())
    };
    for (name, value) in fixed {
        add(name, value)?;
    }
    for (name, var) in from_env {
        let value = std::env::var(var)
            .map_err(|_| format!("`env_http_headers`: {var} (for header `{name}`) is not set"))?;
        add(name, &value)?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A project's server is started by `baton sandbox` with the session's settings, in its
    /// own `cwd` when that is not the workspace's top.
    #[test]
    fn a_project_server_is_wrapped_in_baton_sandbox_in_its_own_folder() {
        let sandbox = ProjectSandbox {
            mode: SandboxMode::WorkspaceWrite,
            backend: SandboxBackend::Bubblewrap,
            readable: vec![PathBuf::from("/r")],
            unix_sockets: Vec::new(),
            env_keep: vec!["A_TOKEN".into()],
            env_drop: Vec::new(),
        };
        let words = |dir: &str| {
            let (program, args) = sandbox.wrap(
                Path::new("/ws"),
                Path::new(dir),
                "python3",
                &["srv.py".into()],
            );
            assert_eq!(program, Path::new("/proc/self/exe"));
            args.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            words("/ws"),
            "--env-keep A_TOKEN sandbox -C /ws --sandbox read-only \
             --sandbox-backend bubblewrap --network --read /r -- python3 srv.py"
        );
        let in_tools = words("/ws/tools");
        assert!(
            in_tools.ends_with(
                r#"-- /bin/sh -c cd -- "$1" && shift && exec "$@" sh /ws/tools python3 srv.py"#
            ),
            "{in_tools}"
        );
    }

    /// What a project's server sets reaches the launcher (baton, bubblewrap, which start it
    /// from outside the sandbox) only under a name nothing there reads; PATH, which finds the
    /// program, stays a plain, scrubbed variable.
    #[test]
    fn a_sandboxed_servers_own_variables_are_command_only() {
        let configured: BTreeMap<String, String> = [
            ("HOME", "/var/empty"),
            ("LD_PRELOAD", "./evil.so"),
            ("GITHUB_TOKEN", "t"),
            ("PATH", "/opt/node/bin"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let env = child_env(true, &configured, Path::new("/ws"), true);
        let value = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        for name in ["LD_PRELOAD", "GITHUB_TOKEN"] {
            assert_eq!(value(name), None, "{name} reached the launcher");
        }
        assert_ne!(value("HOME").as_deref(), Some("/var/empty"));
        assert_eq!(
            value("BATON_COMMAND_ENV_HOME").as_deref(),
            Some("/var/empty")
        );
        let preload = value("BATON_COMMAND_ENV_LD_PRELOAD");
        assert_eq!(preload.as_deref(), Some("./evil.so"));
        assert_eq!(value("PATH").as_deref(), Some("/opt/node/bin"));
        // Outside the sandbox (`--sandbox off`) the server gets them under their own names.
        let outside = child_env(true, &configured, Path::new("/ws"), false);
        assert!(
            outside
                .iter()
                .any(|(k, v)| k == "HOME" && v == "/var/empty")
        );
    }
}
