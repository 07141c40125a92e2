//! `baton doctor`: checks the configuration, the profile, the endpoint and its models, and
//! says in plain words what is wrong and what to do.

use super::exit;
use crate::backend::BackendError;
use crate::config::{Config, ConfigLoadError};
use crate::protocol::Expert;
use crate::protocol::Mode;
use crate::protocol::stdio::println;

struct Report {
    problems: usize,
}

// What a check reports may quote a server's answer, a model list or a file name: every line
// passes the terminal sanitizer.
impl Report {
    fn ok(&self, what: &str) {
        println!("{}", report_line("ok", what));
    }
    fn bad(&mut self, what: &str) {
        self.problems += 1;
        println!("{}", report_line("PROBLEM", what));
    }
    fn note(&self, what: &str) {
        println!("{}", report_line("note", what));
    }
    fn setting(&self, what: &str) {
        println!("{}", report_line("set", what));
    }
}

/// `  TAG      text`, the text's further lines indented under its first.
fn report_line(tag: &str, what: &str) -> String {
    let mut out = format!("  {tag:<9}");
    for (i, line) in what.lines().enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(&" ".repeat(11));
        }
        out.push_str(&crate::protocol::terminal_safe_line(line));
    }
    out
}

/// Whether the project file in use may lower safety settings, and why not.
fn trust_report(r: &Report, config: &Config) {
    use crate::config::{TrustList, TrustStatus};
    let Ok(list) = TrustList::load() else {
        return; // the load's own warning is listed above
    };
    for file in config
        .files
        .iter()
        .filter(|f| f.parent().is_some_and(|d| d.ends_with(".baton")))
    {
        let Some(folder) = file.parent().and_then(std::path::Path::parent) else {
            continue;
        };
        // A warning above already names this file, its keys and the command.
        let named = file.display().to_string();
        if config.warnings.iter().any(|w| w.starts_with(&named)) {
            continue;
        }
        match list.status(folder) {
            TrustStatus::Trusted => r.ok(&format!(
                "{} is trusted: it may lower safety settings",
                folder.display()
            )),
            TrustStatus::Changed => r.note(&format!(
                "{} changed since you trusted it: keys that lower safety are ignored until \
                 `baton trust {}`",
                file.display(),
                folder.display()
            )),
            TrustStatus::Untrusted => r.note(&format!(
                "{} is not trusted: its keys that lower safety are ignored (`baton trust {}` \
                 if you wrote it)",
                folder.display(),
                folder.display()
            )),
        }
    }
}

/// The hooks that would run here: each file, each group, and whether each command parses and
/// names a program that exists.
fn hooks_report(r: &mut Report, config: &Config) {
    println!("hooks");
    if config.no_hooks {
        r.note("hooks are off for this run (--no-hooks)");
        return;
    }
    let trust = crate::config::TrustList::load().unwrap_or_default();
    let found = crate::hooks::discover(&config.workspace, &trust);
    if found.user.is_none() && found.project.is_none() {
        r.note(&format!(
            "no hooks file ({} or .baton/hooks.json)",
            crate::hooks::user_hooks_path()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "hooks.json in the user config folder".into())
        ));
        return;
    }
    if let Some(notice) = found.notice() {
        r.note(&notice);
    }
    let hooks = match crate::hooks::Hooks::load(&found) {
        Ok(h) => h,
        Err(e) => {
            r.bad(&format!(
                "{e} (every run stops on it; --no-hooks skips hooks)"
            ));
            return;
        }
    };
    for f in &hooks.files {
        r.ok(&format!("{} is valid", f.display()));
    }
    for n in hooks
        .notices
        .iter()
        .chain(&hooks.unfired)
        .filter(|n| Some(*n) != found.notice().as_ref())
    {
        r.note(n);
    }
    for (event, group) in hooks.groups() {
        for hook in &group.hooks {
            let line = crate::hooks::hook_line(*event, group, hook);
            match check_hook_command(&hook.command, &config.workspace) {
                Ok(()) => r.ok(&line),
                Err(why) => r.bad(&format!("{line}: {why}")),
            }
        }
    }
}

/// Whether `sh` can parse a hook's command and its program exists (a command that starts
/// with a variable or a shell keyword is only parsed).
fn check_hook_command(command: &str, workspace: &std::path::Path) -> Result<(), String> {
    let parsed = std::process::Command::new("/bin/sh")
        .args(["-n", "-c", command])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run /bin/sh: {e}"))?;
    if !parsed.status.success() {
        return Err(format!(
            "sh cannot parse it: {}",
            String::from_utf8_lossy(&parsed.stderr).trim()
        ));
    }
    let first = shlex::split(command)
        .and_then(|w| w.into_iter().next())
        .unwrap_or_default();
    const SHELL_WORDS: &[&str] = &[
        "case", "if", "for", "while", "until", "{", "(", "!", "[", "test", "echo", "printf",
        "exit", "true", "false", ":", ".", "cd", "read", "set", "export", "exec", "eval",
        "command", "trap",
    ];
    if first.is_empty()
        || first.contains('$')
        || first.contains('=')
        || SHELL_WORDS.contains(&first.as_str())
    {
        return Ok(());
    }
    // `sh` expands a leading `~` (the docs' own example is `~/.config/baton/hooks/…`);
    // `~user/…` is left to the shell.
    let first = match (first.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest).display().to_string(),
        _ if first.starts_with('~') => return Ok(()),
        _ => first,
    };
    if first.contains('/') {
        let path = workspace.join(&first);
        return if path.exists() {
            Ok(())
        } else {
            Err(format!("{first} does not exist"))
        };
    }
    let on_path = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(&first).is_file()));
    if on_path {
        Ok(())
    } else {
        Err(format!("`{first}` is not on PATH"))
    }
}

/// Custom slash commands and skills found here.
fn commands_report(r: &Report, config: &Config) {
    println!("commands and skills");
    let (commands, notes) = crate::config::commands::discover_commands(&config.workspace);
    for c in &commands {
        r.ok(&format!("{} ({})", c.usage(), c.path.display()));
    }
    for n in &notes {
        r.note(n);
    }
    let (skills, notes) = crate::config::commands::discover_skills(&config.workspace);
    for s in &skills {
        r.ok(&format!("skill {} ({})", s.name, s.path.display()));
    }
    for n in &notes {
        r.note(n);
    }
    if commands.is_empty() && skills.is_empty() {
        r.note("no custom commands (.baton/commands/*.md) or skills (SKILL.md folders)");
    }
}

/// Runs every check. `config_problems` are the configuration mistakes found while loading:
/// the layer each came from was left out of `config`, and the checks run on the rest.
pub async fn run(config: &Config, config_problems: &[ConfigLoadError]) -> i32 {
    let mut r = Report { problems: 0 };
    println!("configuration");
    for e in config_problems {
        r.bad(&format!("{e} (left out: the checks below run without it)"));
    }
    if config.files.is_empty() && config_problems.is_empty() {
        r.note("no config file found (flags, BATON_* variables and defaults only)");
    }
    for f in &config.files {
        // A file with a mistake was still read (without that key): the problem says so.
        let path = f.display().to_string();
        if !config_problems
            .iter()
            .any(|e| e.to_string().starts_with(&format!("{path}:")))
        {
            r.ok(&format!("{path} is valid"));
        }
    }
    // Every key something sets, and what set it: the answer to "why is it doing that?".
    // A value from a project file is the repository's to write: a line break in it must not
    // print as a line of its own (a made-up `set` line).
    let one_line = |text: &str| text.replace('\n', "\\n");
    for o in &config.origins {
        r.setting(&format!(
            "{} = {} ({})",
            o.key,
            one_line(&o.value),
            one_line(&o.source)
        ));
    }
    for w in &config.warnings {
        r.note(w);
    }
    trust_report(&r, config);
    r.ok(&format!("workspace {}", config.workspace.display()));
    let writable = std::fs::create_dir_all(&config.session_dir)
        .and_then(|_| tempfile::tempfile_in(&config.session_dir).map(|_| ()));
    match writable {
        Ok(()) => r.ok(&format!("sessions go to {}", config.session_dir.display())),
        Err(e) => r.bad(&format!(
            "cannot write sessions to {}: {e} (set session_dir or --session-dir)",
            config.session_dir.display()
        )),
    }
    match crate::app::system_prompt(config) {
        Ok(_) => r.ok(match &config.system_prompt {
            Some(_) => "system prompt file readable",
            None => "built-in system prompt",
        }),
        Err(e) => r.bad(&e.to_string()),
    }

    for f in &crate::app::project_instructions(config).files {
        r.ok(&format!("project instructions from {}", f.display()));
    }

    println!("sandbox");
    if config.sandbox == crate::protocol::SandboxMode::Off {
        r.note("sandbox is off: commands run with your full permissions (--sandbox off)");
    } else {
        let support = crate::sandbox::probe::probe_backend(config.sandbox_backend);
        for line in support.report() {
            if support.enforceable {
                r.ok(&line);
            } else {
                r.bad(&line);
            }
        }
    }

    hooks_report(&mut r, config);
    commands_report(&r, config);

    println!("profile");
    match (&config.profile, crate::app::profile(config)) {
        (_, Err(e)) => r.bad(&e.to_string()),
        (Some(dir), Ok(_)) => r.ok(&format!("{} is a valid MoL profile", dir.display())),
        (None, Ok(_)) => r.ok("built-in default profile"),
    }

    mcp_report(&mut r, config).await;

    println!("model");
    let backend = match crate::app::build_backend(config).map(|(b, _)| b) {
        Ok(b) => b,
        Err(crate::app::SetupError::NoBackend { user_config }) => {
            r.bad(&crate::app::no_backend_advice(user_config.as_deref()));
            return finish(&r);
        }
        Err(e) => {
            r.bad(&e.to_string());
            return finish(&r);
        }
    };
    if config.api_key().is_some() {
        r.ok(&format!("API key found in ${}", config.api_key_env));
    } else {
        r.note(&format!(
            "${} is not set: requests go without an API key",
            config.api_key_env
        ));
    }
    let listing =
        tokio::time::timeout(std::time::Duration::from_secs(15), backend.list_models()).await;
    match listing {
        Err(_) => r.bad(&format!(
            "models probe: {} did not answer GET /models within 15 s",
            backend.describe()
        )),
        Ok(Err(e)) => r.bad(&models_probe_error(&e)),
        Ok(Ok(models)) => {
            let names: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
            r.ok(&format!(
                "{} is reachable and lists {} model(s): {}",
                backend.describe(),
                names.len(),
                names.join(", ")
            ));
            match config.mode {
                Mode::Mol => {
                    let missing: Vec<&str> = Expert::ALL
                        .iter()
                        .map(|e| e.label())
                        .filter(|l| !names.contains(l))
                        .collect();
                    if missing.is_empty() {
                        r.ok("all four experts L0–L3 are served (mode mol)");
                    } else {
                        r.bad(&format!(
                            "mode mol needs the adapters L0–L3 as model names; missing: {}. \
                             Register them with the engine (vLLM --lora-modules L0=… ), or use \
                             --mode proxy/single --model NAME",
                            missing.join(", ")
                        ));
                    }
                }
                Mode::Proxy | Mode::Single => {
                    let model = config.model.as_deref().unwrap_or("");
                    if names.contains(&model) {
                        r.ok(&format!("model {model} is served"));
                    } else {
                        r.bad(&format!(
                            "model '{model}' is not among the served models; pick one of: {}",
                            names.join(", ")
                        ));
                    }
                }
            }
        }
    }
    finish(&r)
}

/// A failed `GET /models`, named as the models probe it is (the backend's message names a hop,
/// and listing models is none of the turn's hops).
fn models_probe_error(e: &BackendError) -> String {
    let what = match e {
        BackendError::Connect { url, message, .. } => {
            format!("cannot connect to {url}: {message}")
        }
        BackendError::Timeout {
            url, secs, what, ..
        } => {
            format!("{url} did not answer within {secs} s ({what})")
        }
        BackendError::Http {
            url, status, body, ..
        } => format!("GET {url} answered HTTP {status}: {body}"),
        BackendError::Protocol { url, message, .. } => {
            format!("bad response from GET {url}: {message}")
        }
        BackendError::ContextOverflow { url, message, .. } => format!("{url}: {message}"),
        BackendError::Engine { message, .. } => format!("local engine: {message}"),
        BackendError::Cancelled { .. } => "cancelled".to_string(),
    };
    format!("models probe: {what}")
}

/// Starts `servers`, waits until none is starting (each bounded by its startup timeout), stops
/// them, and returns their tools and states: what `doctor` and `baton mcp add` report.
pub(crate) async fn start_once(
    servers: Vec<crate::config::McpServer>,
    config: &crate::config::Config,
) -> (
    Vec<crate::protocol::ToolSpec>,
    Vec<crate::protocol::McpServerStatus>,
) {
    if servers.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // A server that exits closes its pipe: writing to it must be an error for the client to
    // report, not the SIGPIPE that ends a report command (see `end_quietly_on_closed_stdout`).
    // SAFETY: changing a signal's disposition has no preconditions.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let hub = crate::tool::mcp::McpHub::start(
        servers,
        config.workspace.clone(),
        crate::app::project_sandbox(config),
    );
    hub.settled().await;
    let specs = hub.specs();
    let status = hub.status();
    hub.stop();
    drop(hub);
    // SAFETY: as above; the servers are stopped, so no write to them is left.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    (specs, status)
}

/// Starts each configured MCP server as a session would, and says which answered, with how
/// many tools and how large their part of every request is.
async fn mcp_report(r: &mut Report, config: &Config) {
    use crate::protocol::McpServerState;
    let withheld: Vec<&String> = config
        .warnings
        .iter()
        .filter(|w| w.starts_with("MCP servers declared"))
        .collect();
    if config.mcp_servers.is_empty() && withheld.is_empty() {
        return;
    }
    println!("mcp servers");
    for w in withheld {
        r.note(w);
    }
    let (specs, status) = start_once(config.mcp_servers.clone(), config).await;
    for s in status {
        let prefix = crate::tool::mcp::schema::qualified_name(&s.name, "");
        let bytes: usize = specs
            .iter()
            .filter(|t| t.name.starts_with(&prefix))
            .map(|t| serde_json::to_string(t).map_or(0, |j| j.len()))
            .sum();
        match s.state {
            McpServerState::Ready => r.ok(&format!(
                "{}: ready, {} tools ({} bytes of tool list, about {} tokens per request) — {}",
                s.name,
                s.tools.len(),
                bytes,
                bytes / 4,
                s.transport
            )),
            McpServerState::Disabled => {
                r.note(&format!("{}: disabled (`enabled = false`)", s.name))
            }
            McpServerState::Failed | McpServerState::Starting => {
                let why = s.error.unwrap_or_else(|| "did not start".into());
                let line = format!("{}: {} — {}", s.name, why, s.transport);
                if s.required {
                    r.bad(&format!("{line} (required: turns are refused)"));
                } else {
                    r.bad(&line);
                }
            }
        }
    }
}

fn finish(r: &Report) -> i32 {
    if r.problems == 0 {
        println!("All checks passed.");
        exit::OK
    } else {
        println!("{} problem(s) found.", r.problems);
        exit::AGENT_ERROR
    }
}
