//! `baton mcp`: the MCP servers baton would start here — list them, show one, add one to the
//! user's config.toml (`-- CMD…` for a stdio server, `--url` for streamable HTTP), remove one.
//! Edits keep the rest of the file as written (comments, order).

use crate::protocol::stdio::{eprintln, print, println};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use super::exit;
use crate::config::mcp::{SECTION, check_name};
use crate::config::{Config, McpServer, McpTransport};
use crate::protocol::{terminal_safe_json, terminal_safe_line};

#[derive(Debug, Clone, Args)]
pub struct McpArgs {
    #[command(subcommand)]
    pub command: McpCommand,
}

#[derive(Debug, Clone, Subcommand)]
pub enum McpCommand {
    /// The configured servers: name, transport, where each was declared.
    List {
        /// One JSON object a line.
        #[arg(long)]
        json: bool,
    },
    /// One server's whole configuration.
    Get { name: String },
    /// Add a server to the user config: `baton mcp add NAME -- CMD ARGS…` or
    /// `baton mcp add NAME --url URL`.
    Add {
        name: String,
        /// A streamable HTTP server's URL (instead of a command).
        #[arg(long, value_name = "URL", conflicts_with = "command")]
        url: Option<String>,
        /// Variables for a stdio server, `KEY=VALUE` (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// The variable holding an HTTP server's bearer token.
        #[arg(long, value_name = "VAR", requires = "url")]
        bearer_token_env_var: Option<String>,
        /// Do not start a command server once to check it (and let `npx`, `uvx` … fetch
        /// its package, which a first start needs time for).
        #[arg(long)]
        no_check: bool,
        /// The command and its arguments, after `--`.
        #[arg(last = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Remove a server from the user config.
    Remove { name: String },
}

/// Runs `baton mcp …`; returns the exit code.
pub async fn run(config: &Config, args: &McpArgs) -> i32 {
    match &args.command {
        McpCommand::List { json } => list(config, *json),
        McpCommand::Get { name } => get(config, name),
        McpCommand::Add {
            name,
            url,
            env,
            bearer_token_env_var,
            no_check,
            command,
        } => match crate::config::user_config_path() {
            Some(path) => {
                let code = add(
                    &path,
                    name,
                    url.as_deref(),
                    env,
                    bearer_token_env_var.as_deref(),
                    command,
                );
                if code != exit::OK || *no_check || command.is_empty() {
                    return code;
                }
                first_start(&path, name, config).await
            }
            None => fail("no user config folder (set HOME or XDG_CONFIG_HOME)"),
        },
        McpCommand::Remove { name } => match crate::config::user_config_path() {
            Some(path) => remove(&path, name, config),
            None => fail("no user config folder (set HOME or XDG_CONFIG_HOME)"),
        },
    }
}

fn fail(message: &str) -> i32 {
    eprintln!("baton mcp: {}", terminal_safe_line(message));
    exit::USAGE
}

fn list(config: &Config, json: bool) -> i32 {
    if json {
        for s in &config.mcp_servers {
            let line = serde_json::json!({
                "name": s.name,
                "transport": match s.transport { McpTransport::Stdio { .. } => "stdio", McpTransport::Http { .. } => "http" },
                "target": s.transport.describe(),
                "enabled": s.enabled,
                "required": s.required,
                "source": s.source,
            });
            println!("{}", terminal_safe_json(&line.to_string()));
        }
        return exit::OK;
    }
    if config.mcp_servers.is_empty() {
        println!(
            "no MCP servers configured. Add one with `baton mcp add NAME -- CMD ARGS…` or \
             `baton mcp add NAME --url URL` (docs/mcp.md)"
        );
    }
    for s in &config.mcp_servers {
        let mut flags = Vec::new();
        if !s.enabled {
            flags.push("disabled");
        }
        if s.required {
            flags.push("required");
        }
        let flags = if flags.is_empty() {
            String::new()
        } else {
            format!(" [{}]", flags.join(", "))
        };
        println!(
            "{}{flags}  {}  ({})",
            terminal_safe_line(&s.name),
            terminal_safe_line(&s.transport.describe()),
            terminal_safe_line(&s.source)
        );
    }
    for w in config
        .warnings
        .iter()
        .filter(|w| w.starts_with("MCP servers declared"))
    {
        eprintln!("warning: {}", terminal_safe_line(w));
    }
    exit::OK
}

fn get(config: &Config, name: &str) -> i32 {
    let Some(s) = config.mcp_servers.iter().find(|s| s.name == name) else {
        return fail(&format!(
            "no MCP server named `{name}` is configured here (`baton mcp list`)"
        ));
    };
    print!("{}", describe(s));
    exit::OK
}

/// A server's configuration as `baton mcp get` prints it; secrets are shown by the name of
/// the variable that holds them, values of `env` and headers by their keys only.
fn describe(s: &McpServer) -> String {
    let mut out = format!("{}\n", terminal_safe_line(&s.name));
    let mut line =
        |k: &str, v: String| out.push_str(&format!("  {k:<20} {}\n", terminal_safe_line(&v)));
    match &s.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            line("transport", "stdio".into());
            line("command", command.clone());
            line("args", format!("{args:?}"));
            if !env.is_empty() {
                line("env", env.keys().cloned().collect::<Vec<_>>().join(", "));
            }
            if let Some(cwd) = cwd {
                line("cwd", cwd.display().to_string());
            }
        }
        McpTransport::Http {
            url,
            bearer_token_env_var,
            http_headers,
            env_http_headers,
        } => {
            line("transport", "streamable http".into());
            line("url", url.clone());
            if let Some(var) = bearer_token_env_var {
                line("bearer_token_env_var", var.clone());
            }
            if !http_headers.is_empty() || !env_http_headers.is_empty() {
                let names: Vec<String> = http_headers
                    .keys()
                    .chain(env_http_headers.keys())
                    .cloned()
                    .collect();
                line("headers", names.join(", "));
            }
        }
    }
    line("enabled", s.enabled.to_string());
    line("required", s.required.to_string());
    line(
        "startup_timeout_sec",
        s.startup_timeout.as_secs_f64().to_string(),
    );
    line("tool_timeout_sec", s.tool_timeout.as_secs_f64().to_string());
    if let Some(only) = &s.enabled_tools {
        line("enabled_tools", only.join(", "));
    }
    if !s.disabled_tools.is_empty() {
        line("disabled_tools", s.disabled_tools.join(", "));
    }
    if s.trust_read_only_hint {
        line("trust_read_only_hint", "true".into());
    }
    line("declared in", s.source.clone());
    out
}

fn read_doc(path: &Path) -> Result<toml_edit::DocumentMut, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("{}: cannot read: {e}", path.display())),
    };
    text.parse::<toml_edit::DocumentMut>()
        .map_err(|e| format!("{}: not valid TOML: {}", path.display(), e.message()))
}

fn write_doc(path: &Path, doc: &toml_edit::DocumentMut) -> Result<(), String> {
    let dir = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let tmp =
        tempfile::NamedTempFile::new_in(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(tmp.path(), doc.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
    tmp.persist(path)
        .map_err(|e| format!("{}: {}", path.display(), e.error))?;
    Ok(())
}

fn add(
    path: &Path,
    name: &str,
    url: Option<&str>,
    env: &[String],
    bearer: Option<&str>,
    command: &[String],
) -> i32 {
    if let Err(e) = check_name(name) {
        return fail(&format!("`{name}`: {e}"));
    }
    let mut doc = match read_doc(path) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let mut table = toml_edit::Table::new();
    match (url, command.split_first()) {
        (Some(url), None) => {
            if !env.is_empty() {
                return fail(
                    "--env is for command servers; an HTTP server gets headers (docs/mcp.md)",
                );
            }
            table["url"] = toml_edit::value(url);
            if let Some(var) = bearer {
                table["bearer_token_env_var"] = toml_edit::value(var);
            }
        }
        (None, Some((program, args))) => {
            table["command"] = toml_edit::value(program.as_str());
            let mut list = toml_edit::Array::new();
            for a in args {
                list.push(a.as_str());
            }
            table["args"] = toml_edit::value(list);
            if !env.is_empty() {
                let mut vars = toml_edit::InlineTable::new();
                for pair in env {
                    let Some((k, v)) = pair.split_once('=') else {
                        return fail(&format!("--env {pair}: expected KEY=VALUE"));
                    };
                    vars.insert(k, v.into());
                }
                table["env"] = toml_edit::value(vars);
            }
        }
        _ => {
            return fail(
                "give the server's command after `--` (baton mcp add NAME -- npx -y PKG) or \
                 --url URL",
            );
        }
    }
    let section = doc.entry(SECTION).or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    let Some(section) = section.as_table_mut() else {
        return fail(&format!("{}: `{SECTION}` is not a table", path.display()));
    };
    let replaced = section.contains_key(name);
    section.insert(name, toml_edit::Item::Table(table));
    // Check the result parses as baton reads it before writing anything.
    let parsed: Result<toml::Table, _> = toml::from_str(&doc.to_string());
    match parsed
        .map_err(|e| e.to_string())
        .and_then(|t| crate::config::mcp::servers_from_table(&t, path).map_err(|e| e.to_string()))
    {
        Ok(_) => {}
        Err(e) => return fail(&e),
    }
    if let Err(e) = write_doc(path, &doc) {
        return fail(&e);
    }
    println!(
        "{} MCP server `{name}` in {}",
        if replaced { "replaced" } else { "added" },
        path.display()
    );
    exit::OK
}

/// How long the check after `add` lets a server take: a package runner's first start
/// downloads the package.
const FIRST_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(300);

/// Starts the command server `name` just added to `path` once, so a package runner fetches
/// its package now rather than at the first turn, and says whether it answered.
async fn first_start(path: &Path, name: &str, config: &Config) -> i32 {
    let server = crate::config::mcp::read_toml(path)
        .ok()
        .and_then(|list| list.into_iter().find(|s| s.name == name));
    let Some(mut server) = server else {
        return fail(&format!(
            "`{name}` is not in {} after writing it",
            path.display()
        ));
    };
    server.startup_timeout = server.startup_timeout.max(FIRST_START_LIMIT);
    server.enabled = true;
    eprintln!(
        "starting `{name}` once to check it (a first `npx`/`uvx` run fetches the package; up \
         to {} s; --no-check skips this)",
        FIRST_START_LIMIT.as_secs()
    );
    let (_, status) = super::doctor::start_once(vec![server], config).await;
    match status.first() {
        Some(s) if s.state == crate::protocol::McpServerState::Ready => {
            println!("`{name}` is ready: {} tools", s.tools.len());
            exit::OK
        }
        Some(s) => {
            eprintln!(
                "baton mcp: `{name}` was added but did not start: {}",
                terminal_safe_line(s.error.as_deref().unwrap_or("unknown error"))
            );
            eprintln!("fix its command, then check it with `baton doctor`");
            exit::AGENT_ERROR
        }
        None => exit::OK,
    }
}

fn remove(path: &Path, name: &str, config: &Config) -> i32 {
    let mut doc = match read_doc(path) {
        Ok(d) => d,
        Err(e) => return fail(&e),
    };
    let removed = doc
        .get_mut(SECTION)
        .and_then(|s| s.as_table_like_mut())
        .and_then(|s| s.remove(name))
        .is_some();
    if !removed {
        let elsewhere = config
            .mcp_servers
            .iter()
            .find(|s| s.name == name)
            .map(|s| format!(" (it is declared in {}: edit that file)", s.source))
            .unwrap_or_default();
        return fail(&format!(
            "no MCP server `{name}` in {}{elsewhere}",
            path.display()
        ));
    }
    if let Err(e) = write_doc(path, &doc) {
        return fail(&e);
    }
    println!("removed MCP server `{name}` from {}", path.display());
    exit::OK
}
