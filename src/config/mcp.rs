//! The MCP servers baton may start: `[mcp_servers.NAME]` tables in config.toml (Codex's keys,
//! so a user's existing entries copy over) and a project's `.mcp.json` (Claude Code's format).
//! A server a project declares is kept only when the user trusted that folder (it then runs
//! in the sandbox, read-only, with the network: see `tool::mcp::connect`); otherwise it is
//! withheld with a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::ConfigLoadError;
use crate::protocol::McpServerSpec;

/// The table key in config.toml.
pub const SECTION: &str = "mcp_servers";

/// The file a project declares servers in, Claude Code's name for it.
pub const PROJECT_JSON: &str = ".mcp.json";

const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

/// One configured server, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServer {
    pub name: String,
    pub transport: McpTransport,
    /// `enabled = false` keeps the entry but starts nothing.
    pub enabled: bool,
    /// A required server that fails makes `--exec` exit 2 and the TUI refuse the turn.
    pub required: bool,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
    /// Only these tools are offered (`None` = all).
    pub enabled_tools: Option<Vec<String>>,
    pub disabled_tools: Vec<String>,
    /// Tools the server marks `readOnlyHint` run without asking (the user's opt-in: the hint
    /// is the server's word, not something baton can check).
    pub trust_read_only_hint: bool,
    /// Where it was declared (a file path), for `baton mcp get` and messages.
    pub source: String,
    /// Declared by a project (`.mcp.json`, a project's `.baton/config.toml`), kept only from a
    /// trusted folder: it starts in the workspace. The user's own servers and an editor's
    /// start in a folder outside it (see `tool::mcp::connect`).
    pub project: bool,
    /// The variables of baton's environment the server takes values from: a stdio server's
    /// command, arguments or `env` (`${VAR}`, `env_vars`), an HTTP server's address and headers
    /// (`${VAR}`, `bearer_token_env_var`, `env_http_headers`). A project's server gets them
    /// only where the sandbox would give them to a command.
    pub reads_env: Vec<String>,
}

/// Whether the user trusted the workspace or a folder above it (`baton trust`, unchanged
/// since): what baton starts outside the sandbox (a user's MCP server with a `cwd` there,
/// hooks) may then run in the workspace. An unreadable trust list trusts nothing.
pub fn workspace_trusted(workspace: &Path) -> bool {
    let trust = super::TrustList::load().unwrap_or_default();
    workspace
        .ancestors()
        .any(|dir| trust.entry(dir).is_some() && trust.status(dir) == super::TrustStatus::Trusted)
}

/// Whether the config file at `path` is a project's `.baton/config.toml` (the user's is
/// `…/baton/config.toml`, never under a `.baton` folder).
fn is_project_file(path: &Path) -> bool {
    path.parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == ".baton")
}

/// How baton reaches a server.
#[derive(Debug, Clone, PartialEq)]
pub enum McpTransport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        /// The variable holding the bearer token (never the token itself).
        bearer_token_env_var: Option<String>,
        http_headers: BTreeMap<String, String>,
        /// Header name → the variable its value is read from.
        env_http_headers: BTreeMap<String, String>,
    },
}

impl McpTransport {
    /// `npx -y pkg` or the URL: what a listing shows.
    pub fn describe(&self) -> String {
        match self {
            McpTransport::Stdio { command, args, .. } => {
                let mut words = vec![command.as_str()];
                words.extend(args.iter().map(String::as_str));
                shlex::try_join(words).unwrap_or_else(|_| command.clone())
            }
            McpTransport::Http { url, .. } => url.clone(),
        }
    }
}

/// A `[mcp_servers.NAME]` table as written (Codex's keys, plus baton's
/// `trust_read_only_hint`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlServer {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    /// Variables passed through from baton's own environment, by name.
    #[serde(default)]
    env_vars: Vec<String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    bearer_token_env_var: Option<String>,
    #[serde(default)]
    http_headers: BTreeMap<String, String>,
    #[serde(default)]
    env_http_headers: BTreeMap<String, String>,
    enabled: Option<bool>,
    required: Option<bool>,
    startup_timeout_sec: Option<f64>,
    startup_timeout_ms: Option<u64>,
    tool_timeout_sec: Option<f64>,
    enabled_tools: Option<Vec<String>>,
    #[serde(default)]
    disabled_tools: Vec<String>,
    trust_read_only_hint: Option<bool>,
}

/// One `mcpServers` entry of `.mcp.json` as Claude Code writes it.
#[derive(Debug, Deserialize)]
struct JsonServer {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct JsonFile {
    #[serde(rename = "mcpServers", default)]
    mcp_servers: BTreeMap<String, serde_json::Value>,
}

/// Why a server name cannot be used: it becomes part of tool names (`mcp__NAME__TOOL`), which
/// the model APIs restrict to letters, digits, `_` and `-`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 40 {
        return Err("a server name has 1 to 40 characters".into());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err("a server name may hold only letters, digits, `_` and `-`".into());
    }
    // `__` separates the server from the tool in `mcp__SERVER__TOOL`.
    if name.contains("__") {
        return Err("a server name may not contain `__`".into());
    }
    Ok(())
}

fn seconds(value: f64, key: &str) -> Result<Duration, String> {
    if !value.is_finite() || value <= 0.0 || value > 86_400.0 {
        return Err(format!("`{key}` must be a number of seconds above 0"));
    }
    Ok(Duration::from_secs_f64(value))
}

fn key_error(path: &Path, name: &str, reason: impl std::fmt::Display) -> ConfigLoadError {
    ConfigLoadError::File {
        path: path.display().to_string(),
        reason: format!("[{SECTION}.{name}]: {reason}"),
    }
}

/// The text of a file that declares servers; None when it does not exist (no servers).
fn text_if_any<'a>(
    path: &Path,
    read: &'a std::io::Result<Vec<u8>>,
) -> Result<Option<&'a str>, ConfigLoadError> {
    match super::trust::text_of(read) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ConfigLoadError::File {
            path: path.display().to_string(),
            reason: format!("cannot read: {e}"),
        }),
    }
}

/// Reads the `[mcp_servers]` tables of a config.toml. A missing file or section is no servers.
pub fn read_toml(path: &Path) -> Result<Vec<McpServer>, ConfigLoadError> {
    parse_toml(path, &super::trust::read_project_file(path))
}

/// [`read_toml`] of bytes already read from `path` (what a trust check hashed).
pub fn parse_toml(
    path: &Path,
    read: &std::io::Result<Vec<u8>>,
) -> Result<Vec<McpServer>, ConfigLoadError> {
    let Some(text) = text_if_any(path, read)? else {
        return Ok(Vec::new());
    };
    let table: toml::Table = toml::from_str(text).map_err(|e| ConfigLoadError::File {
        path: path.display().to_string(),
        reason: format!("not valid TOML: {}", e.message().trim_end()),
    })?;
    servers_from_table(&table, path)
}

/// The servers of an already parsed config table.
pub fn servers_from_table(
    table: &toml::Table,
    path: &Path,
) -> Result<Vec<McpServer>, ConfigLoadError> {
    let Some(section) = table.get(SECTION) else {
        return Ok(Vec::new());
    };
    let Some(section) = section.as_table() else {
        return Err(ConfigLoadError::File {
            path: path.display().to_string(),
            reason: format!("`{SECTION}` must be a table of servers ([{SECTION}.NAME])"),
        });
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let mut out = Vec::new();
    for (name, value) in section {
        check_name(name).map_err(|e| key_error(path, name, e))?;
        let raw: TomlServer = value
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| key_error(path, name, e.message().trim_end()))?;
        out.push(from_toml(name, raw, path, base).map_err(|e| key_error(path, name, e))?);
    }
    Ok(out)
}

fn from_toml(name: &str, raw: TomlServer, path: &Path, base: &Path) -> Result<McpServer, String> {
    let mut reads_env = Vec::new();
    let transport = match (raw.command, raw.url) {
        (Some(_), Some(_)) => return Err("set `command` or `url`, not both".into()),
        (None, None) => {
            return Err("needs `command` (a program to start) or `url` (streamable HTTP)".into());
        }
        (Some(command), None) => {
            if !raw.http_headers.is_empty()
                || !raw.env_http_headers.is_empty()
                || raw.bearer_token_env_var.is_some()
            {
                return Err(
                    "HTTP keys (`http_headers`, `bearer_token_env_var`…) need `url`".into(),
                );
            }
            if command.trim().is_empty() {
                return Err("`command` is empty".into());
            }
            check_env_names(&raw.env)?;
            let mut env = raw.env;
            for var in &raw.env_vars {
                if let Ok(value) = std::env::var(var)
                    && !env.contains_key(var)
                {
                    env.insert(var.clone(), value);
                    reads_env.push(var.clone());
                }
            }
            McpTransport::Stdio {
                command,
                args: raw.args,
                env,
                cwd: raw
                    .cwd
                    .map(|c| if c.is_relative() { base.join(c) } else { c }),
            }
        }
        (None, Some(url)) => {
            if !raw.args.is_empty()
                || !raw.env.is_empty()
                || !raw.env_vars.is_empty()
                || raw.cwd.is_some()
            {
                return Err("`args`, `env`, `env_vars` and `cwd` are for `command` servers".into());
            }
            check_url(&url)?;
            reads_env.extend(raw.bearer_token_env_var.iter().cloned());
            reads_env.extend(raw.env_http_headers.values().cloned());
            McpTransport::Http {
                url,
                bearer_token_env_var: raw.bearer_token_env_var,
                http_headers: raw.http_headers,
                env_http_headers: raw.env_http_headers,
            }
        }
    };
    let startup_timeout = match (raw.startup_timeout_sec, raw.startup_timeout_ms) {
        (Some(s), _) => seconds(s, "startup_timeout_sec")?,
        (None, Some(ms)) => seconds(ms as f64 / 1000.0, "startup_timeout_ms")?,
        (None, None) => DEFAULT_STARTUP_TIMEOUT,
    };
    let tool_timeout = match raw.tool_timeout_sec {
        Some(s) => seconds(s, "tool_timeout_sec")?,
        None => DEFAULT_TOOL_TIMEOUT,
    };
    Ok(McpServer {
        name: name.to_string(),
        transport,
        enabled: raw.enabled.unwrap_or(true),
        required: raw.required.unwrap_or(false),
        startup_timeout,
        tool_timeout,
        enabled_tools: raw.enabled_tools,
        disabled_tools: raw.disabled_tools,
        trust_read_only_hint: raw.trust_read_only_hint.unwrap_or(false),
        source: path.display().to_string(),
        project: is_project_file(path),
        reads_env,
    })
}

/// A variable's name as `env` may give it: not empty, no `=` (which would end the name and
/// start the value in the server's environment) and no NUL.
fn check_env_names(env: &BTreeMap<String, String>) -> Result<(), String> {
    match env.keys().find(|k| k.is_empty() || k.contains(['=', '\0'])) {
        Some(bad) => Err(format!(
            "`env`: {bad:?} is not a variable name (empty, or holding `=` or NUL)"
        )),
        None => Ok(()),
    }
}

fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(format!(
            "`url` must start with http:// or https:// (got `{url}`)"
        ))
    }
}

/// `${VAR}` and `${VAR:-default}` replaced from the environment, as Claude Code does in
/// `.mcp.json`. An unset variable without a default is an error naming it.
fn expand(text: &str, read: &mut Vec<String>) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(format!("unclosed `${{` in `{text}`"));
        };
        let inner = &after[..end];
        let (var, default) = match inner.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (inner, None),
        };
        match (std::env::var(var).ok().filter(|v| !v.is_empty()), default) {
            (Some(value), _) => {
                out.push_str(&value);
                if !read.iter().any(|r| r == var) {
                    read.push(var.to_string());
                }
            }
            (None, Some(d)) => out.push_str(d),
            (None, None) => {
                return Err(format!("environment variable {var} is not set"));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn expand_map(
    map: BTreeMap<String, String>,
    read: &mut Vec<String>,
) -> Result<BTreeMap<String, String>, String> {
    map.into_iter()
        .map(|(k, v)| Ok((k, expand(&v, read)?)))
        .collect()
}

/// Reads a project's `.mcp.json`. A missing file is no servers.
pub fn read_json(path: &Path) -> Result<Vec<McpServer>, ConfigLoadError> {
    parse_json(path, &super::trust::read_project_file(path))
}

/// [`read_json`] of bytes already read from `path` (what a trust check hashed).
pub fn parse_json(
    path: &Path,
    read: &std::io::Result<Vec<u8>>,
) -> Result<Vec<McpServer>, ConfigLoadError> {
    let Some(text) = text_if_any(path, read)? else {
        return Ok(Vec::new());
    };
    let file: JsonFile = serde_json::from_str(text).map_err(|e| ConfigLoadError::File {
        path: path.display().to_string(),
        reason: format!("not an MCP server list (`{{\"mcpServers\": {{…}}}}`): {e}"),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    let error = |name: &str, reason: String| ConfigLoadError::File {
        path: path.display().to_string(),
        reason: format!("mcpServers.{name}: {reason}"),
    };
    let mut out = Vec::new();
    for (name, value) in file.mcp_servers {
        check_name(&name).map_err(|e| error(&name, e))?;
        let raw: JsonServer =
            serde_json::from_value(value).map_err(|e| error(&name, e.to_string()))?;
        let kind = raw
            .kind
            .as_deref()
            .unwrap_or(if raw.url.is_some() { "http" } else { "stdio" });
        check_env_names(&raw.env).map_err(|e| error(&name, e))?;
        let mut reads_env = Vec::new();
        let transport = match (kind, raw.command, raw.url) {
            ("stdio", Some(command), None) => McpTransport::Stdio {
                command: expand(&command, &mut reads_env).map_err(|e| error(&name, e))?,
                args: raw
                    .args
                    .iter()
                    .map(|a| expand(a, &mut reads_env))
                    .collect::<Result<_, _>>()
                    .map_err(|e| error(&name, e))?,
                env: expand_map(raw.env, &mut reads_env).map_err(|e| error(&name, e))?,
                cwd: raw
                    .cwd
                    .map(|c| if c.is_relative() { base.join(c) } else { c }),
            },
            ("http", None, Some(url)) => {
                let url = expand(&url, &mut reads_env).map_err(|e| error(&name, e))?;
                check_url(&url).map_err(|e| error(&name, e))?;
                McpTransport::Http {
                    url,
                    bearer_token_env_var: None,
                    http_headers: expand_map(raw.headers, &mut reads_env)
                        .map_err(|e| error(&name, e))?,
                    env_http_headers: BTreeMap::new(),
                }
            }
            ("sse", ..) => {
                return Err(error(
                    &name,
                    "the legacy SSE transport is not supported; use the server's streamable \
                     HTTP endpoint (`\"type\": \"http\"`)"
                        .into(),
                ));
            }
            ("stdio" | "http", ..) => {
                return Err(error(
                    &name,
                    "a stdio server needs `command`, an http server `url` (and not both)".into(),
                ));
            }
            (other, ..) => {
                return Err(error(
                    &name,
                    format!("unknown type `{other}` (stdio or http)"),
                ));
            }
        };
        out.push(McpServer {
            name,
            transport,
            enabled: true,
            required: false,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            enabled_tools: None,
            disabled_tools: Vec::new(),
            trust_read_only_hint: false,
            source: path.display().to_string(),
            project: true,
            reads_env,
        });
    }
    Ok(out)
}

/// One server an editor declares for its session (ACP `mcpServers` of `session/new` and
/// `session/load`, parsed by the ACP frontend): stdio or streamable HTTP; the older SSE
/// transport is refused. `source` says who declared it (shown by `/mcp` and in messages).
pub fn from_client(spec: &McpServerSpec, source: &str) -> Result<McpServer, String> {
    let name = spec.name().to_string();
    check_name(&name).map_err(|e| format!("`{name}`: {e}"))?;
    let transport = match spec {
        McpServerSpec::Stdio {
            command, args, env, ..
        } => McpTransport::Stdio {
            command: command.display().to_string(),
            args: args.clone(),
            env: env.iter().cloned().collect(),
            cwd: None,
        },
        McpServerSpec::Http { url, headers, .. } => {
            check_url(url)?;
            McpTransport::Http {
                url: url.clone(),
                bearer_token_env_var: None,
                http_headers: headers.iter().cloned().collect(),
                env_http_headers: BTreeMap::new(),
            }
        }
        McpServerSpec::Sse { .. } => {
            return Err(format!("`{name}`: the SSE transport is not supported"));
        }
    };
    Ok(McpServer {
        name,
        transport,
        enabled: true,
        required: false,
        startup_timeout: DEFAULT_STARTUP_TIMEOUT,
        tool_timeout: DEFAULT_TOOL_TIMEOUT,
        enabled_tools: None,
        disabled_tools: Vec::new(),
        trust_read_only_hint: false,
        source: source.to_string(),
        project: false,
        reads_env: Vec::new(),
    })
}

/// Adds `servers` to `into`, a later one replacing an earlier one of the same name (a project
/// entry overrides the user's).
pub fn merge(into: &mut Vec<McpServer>, servers: Vec<McpServer>) {
    for server in servers {
        into.retain(|s| s.name != server.name);
        into.push(server);
    }
}

/// The warning for servers a project declares in a folder the user has not trusted.
pub fn withheld_warning(folder: &Path, names: &[String], changed: bool) -> String {
    let why = if changed {
        "its configuration, or a program of the folder its servers run, changed since you trusted it"
    } else {
        "you have not trusted it"
    };
    format!(
        "MCP servers declared by {} not started ({}): {} — they would run programs of the \
         project, with the network. Review them, then run `baton trust {}`",
        folder.display(),
        why,
        names.join(", "),
        folder.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml_servers(text: &str) -> Result<Vec<McpServer>, ConfigLoadError> {
        let table: toml::Table = toml::from_str(text).unwrap();
        servers_from_table(&table, Path::new("/p/config.toml"))
    }

    #[test]
    fn codex_keys_parse_with_defaults() {
        let servers = toml_servers(
            r#"
[mcp_servers.docs]
command = "npx"
args = ["-y", "server"]
env = { TOKEN = "x" }
cwd = "sub"
enabled_tools = ["search"]
tool_timeout_sec = 5

[mcp_servers.remote]
url = "https://example.test/mcp"
bearer_token_env_var = "REMOTE_TOKEN"
http_headers = { "X-Team" = "a" }
required = true
startup_timeout_sec = 2.5
"#,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        let docs = &servers[0];
        assert_eq!(docs.name, "docs");
        assert_eq!(docs.startup_timeout, Duration::from_secs(10));
        assert_eq!(docs.tool_timeout, Duration::from_secs(5));
        assert_eq!(
            docs.enabled_tools.as_deref(),
            Some(&["search".to_string()][..])
        );
        match &docs.transport {
            McpTransport::Stdio { cwd, env, .. } => {
                assert_eq!(cwd.as_deref(), Some(Path::new("/p/sub")));
                assert_eq!(env["TOKEN"], "x");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(docs.transport.describe(), "npx -y server");
        let remote = &servers[1];
        assert!(remote.required);
        assert_eq!(remote.startup_timeout, Duration::from_millis(2500));
        assert!(
            matches!(&remote.transport, McpTransport::Http { bearer_token_env_var: Some(v), .. } if v == "REMOTE_TOKEN")
        );
    }

    #[test]
    fn mistakes_name_the_server_and_the_key() {
        let err = toml_servers("[mcp_servers.a]\ncommand = \"x\"\ncomand = \"y\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("[mcp_servers.a]") && err.contains("comand"),
            "{err}"
        );
        let err = toml_servers("[mcp_servers.a]\nargs = []\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("needs `command`"), "{err}");
        let err = toml_servers("[mcp_servers.\"a b\"]\ncommand = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("letters, digits"), "{err}");
        let err = toml_servers("[mcp_servers.a]\nurl = \"ftp://x\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("http://"), "{err}");
        let err = toml_servers("[mcp_servers.a]\ncommand = \"x\"\nstartup_timeout_sec = -1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("startup_timeout_sec"), "{err}");
        assert!(toml_servers("mcp_servers = 3\n").is_err());
    }

    #[test]
    fn servers_an_editor_declares() {
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        let stdio = from_client(
            &McpServerSpec::Stdio {
                name: "fs".into(),
                command: "/bin/srv".into(),
                args: vec!["-x".into()],
                env: vec![pair("A", "1")],
            },
            "ACP client",
        )
        .unwrap();
        assert!(
            matches!(&stdio.transport, McpTransport::Stdio { env, args, .. } if env["A"] == "1" && args == &["-x"])
        );
        let http = from_client(
            &McpServerSpec::Http {
                name: "w".into(),
                url: "http://127.0.0.1:1/mcp".into(),
                headers: vec![pair("X", "y")],
            },
            "ACP client",
        )
        .unwrap();
        assert!(
            matches!(&http.transport, McpTransport::Http { http_headers, .. } if http_headers["X"] == "y")
        );
        let sse = McpServerSpec::Sse {
            name: "s".into(),
            url: "http://x".into(),
            headers: Vec::new(),
        };
        assert!(from_client(&sse, "c").unwrap_err().contains("SSE"));
        let bad_name = McpServerSpec::Stdio {
            name: "a b".into(),
            command: "x".into(),
            args: Vec::new(),
            env: Vec::new(),
        };
        assert!(from_client(&bad_name, "c").is_err());
    }

    #[test]
    fn claude_code_json_expands_variables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(PROJECT_JSON);
        // SAFETY: the variable is unique to this test.
        unsafe { std::env::set_var("BATON_TEST_MCP_EXPAND", "/opt/x") };
        std::fs::write(
            &path,
            r#"{"mcpServers": {
                "fs": {"command": "${BATON_TEST_MCP_EXPAND}/bin/srv", "args": ["${NOPE_UNSET_X:-dflt}"]},
                "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"A": "b"}}
            }}"#,
        )
        .unwrap();
        let servers = read_json(&path).unwrap();
        assert_eq!(servers.len(), 2);
        match &servers[0].transport {
            McpTransport::Stdio { command, args, .. } => {
                assert_eq!(command, "/opt/x/bin/srv");
                assert_eq!(args, &["dflt"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(servers[1].transport, McpTransport::Http { .. }));
        std::fs::write(
            &path,
            r#"{"mcpServers": {"a": {"command": "${NOPE_UNSET_Y}"}}}"#,
        )
        .unwrap();
        let err = read_json(&path).unwrap_err().to_string();
        assert!(err.contains("NOPE_UNSET_Y"), "{err}");
        std::fs::write(
            &path,
            r#"{"mcpServers": {"a": {"type": "sse", "url": "http://x"}}}"#,
        )
        .unwrap();
        assert!(read_json(&path).unwrap_err().to_string().contains("SSE"));
        std::fs::write(&path, "[1,2").unwrap();
        assert!(read_json(&path).is_err());
    }
}
