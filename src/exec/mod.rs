//! Headless mode (`baton --exec`): one turn to completion, answer on stdout, events as JSON Lines.
//!
//! Never waits on a terminal: the prompt comes from argv or piped stdin, approvals are declined
//! (policy `never` unless set), and the run is bounded by `--max-turns` and `--timeout`. The
//! answer is printed the moment the turn completes; the summary hop is then awaited only to
//! save it in the session before the process exits. The agent comes built from the command
//! line (after the prompt is read, so a bad prompt fails before anything starts).

use crate::protocol::stdio::eprintln;
mod output;
mod prompt;
mod stdin_file;

pub use prompt::InputError;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::Config;
use std::collections::HashMap;

use crate::protocol::{AgentHandle, Event, Op, ToolStatus, TurnStatus, exit};
use output::Output;

/// How long a turn may take to stop after `--timeout` before the process exits anyway.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long `--exec` waits, after the answer, for the summary to be saved.
const SUMMARY_SAVE_LIMIT: Duration = Duration::from_secs(60);

/// What `--exec` was asked to do, besides the configuration.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// The prompt; `None` or `-` = read stdin.
    pub prompt: Option<String>,
    /// A `-` after the prompt: append piped stdin to it. Without it a prompt argument runs
    /// alone and stdin is never read (a `while read` loop keeps its input).
    pub append_stdin: bool,
    pub json: bool,
    /// `-o FILE`: also write the last answer here.
    pub output: Option<PathBuf>,
    pub resume: Option<String>,
}

/// The prompt of the run: the argument (with stdin appended when `-` follows it), or piped
/// stdin for `None` or `-`.
pub fn read_prompt(opts: &ExecOptions) -> Result<String, InputError> {
    prompt::read(opts.prompt.as_deref(), opts.append_stdin)
}

/// The folders commands may write (the workspace and `--write` folders): a `-o FILE` beneath
/// them may be a link a command planted, one elsewhere is the user's own to name.
fn writable_roots(config: &Config) -> Vec<&Path> {
    std::iter::once(config.workspace.as_path())
        .chain(config.writable.iter().map(PathBuf::as_path))
        .collect()
}

/// Checks that `-o FILE` can be written before the turn runs (and costs a request). Beneath a
/// folder commands may write, FILE's folder is reached without following a link and a temp
/// file is created there and removed; FILE itself is not touched. Elsewhere (`/dev/stdout`, a
/// file of the user's), FILE is opened for appending as the user named it, and a new one is
/// removed again.
pub fn check_output(opts: &ExecOptions, config: &Config) -> Result<(), InputError> {
    let Some(path) = &opts.output else {
        return Ok(());
    };
    let unwritable = |source| InputError::OutputUnwritable {
        path: path.clone(),
        source,
    };
    let roots = writable_roots(config);
    if !crate::untrusted_fs::is_beneath(path, &roots) {
        let existed = path.exists();
        if path.is_dir() {
            return Err(InputError::OutputIsFolder(path.clone()));
        }
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(unwritable)?;
        if !existed {
            let _ = std::fs::remove_file(path);
        }
        return Ok(());
    }
    let (dir, name) = match crate::untrusted_fs::locate(path, &roots) {
        Ok(found) => found,
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => {
            return Err(InputError::OutputIsFolder(path.clone()));
        }
        Err(e) => return Err(unwritable(e)),
    };
    match dir.lstat(Path::new(&name)).map_err(unwritable)? {
        Some(meta) if meta.is_dir() => return Err(InputError::OutputIsFolder(path.clone())),
        // A link is replaced by the answer, never written through; a FIFO or device refused.
        Some(meta) if !meta.is_file() && !meta.is_symlink() => {
            return Err(unwritable(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "{}, not a regular file",
                    crate::untrusted_fs::kind_name(meta.kind)
                ),
            )));
        }
        _ => {}
    }
    dir.check_writable().map_err(unwritable)
}

/// Writes `-o FILE`. Beneath a folder commands may write it is replaced as a whole (a temp
/// file renamed over the name), so a symlink a command planted there is replaced, not
/// followed; elsewhere it is written as the user named it (`/dev/stdout` stays a device).
fn write_output(path: &Path, text: &str, config: &Config) -> std::io::Result<()> {
    let roots = writable_roots(config);
    if crate::untrusted_fs::is_beneath(path, &roots) {
        crate::untrusted_fs::write_file(path, &roots, text.as_bytes(), None)
    } else {
        std::fs::write(path, text)
    }
}

/// Why a call of the turn did not run, for what the user is told to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Declined {
    /// It needed approval and nobody can give it in --exec: `--approval`, `--allow`.
    Approval,
    /// A tool of MCP server `0`: `--allow mcp__SERVER`.
    Mcp(String),
    /// A hook (hooks.json) blocked it or asked for a human: no approval flag overrides it.
    Hook,
}

impl Declined {
    /// The cause of a declined call, from its tool's name and the result the model was given
    /// (the agent's own wording for hook blocks, src/agent/tool_calls.rs).
    fn of(tool: &str, output: &str) -> Declined {
        if output.starts_with("A PreToolUse hook blocked this call")
            || output.starts_with("A hook asked for the user's approval")
        {
            Declined::Hook
        } else if let Some(rest) = tool.strip_prefix("mcp__") {
            Declined::Mcp(rest.split("__").next().unwrap_or(rest).to_string())
        } else {
            Declined::Approval
        }
    }
}

/// "1 tool call was" / "3 tool calls were".
fn calls(count: usize) -> String {
    if count == 1 {
        "1 tool call was".to_string()
    } else {
        format!("{count} tool calls were")
    }
}

/// What the user is told after a turn in which calls were declined: how to let them run, by
/// cause (a hook's block is not an approval matter, an MCP tool is allowed by its server).
fn declined_hint(declined: &[Declined]) -> Vec<String> {
    let mut lines = Vec::new();
    let approval = declined
        .iter()
        .filter(|d| **d == Declined::Approval)
        .count();
    if approval > 0 {
        lines.push(format!(
            "{} declined: --exec never asks, so whatever needs approval is declined. To let \
             them run, pass --approval auto-edit (file edits) or --approval full-auto (edits and \
             commands), or allow command prefixes with --allow \"PREFIX\" ([approval] allow)",
            calls(approval)
        ));
    }
    let mut servers: Vec<&str> = declined
        .iter()
        .filter_map(|d| match d {
            Declined::Mcp(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    if !servers.is_empty() {
        let count = servers.len();
        servers.sort_unstable();
        servers.dedup();
        let flags: Vec<String> = servers
            .iter()
            .map(|s| format!("--allow mcp__{s}"))
            .collect();
        lines.push(format!(
            "{} declined (MCP tools): they run outside the sandbox, so --exec runs them only \
             when allowed by name: pass {}",
            calls(count),
            flags.join(" ")
        ));
    }
    let hooks = declined.iter().filter(|d| **d == Declined::Hook).count();
    if hooks > 0 {
        lines.push(format!(
            "{} blocked by a hook (hooks.json), not for want of approval: no --approval \
             setting overrides it; change the hook, or run without hooks (--no-hooks)",
            calls(hooks)
        ));
    }
    lines
}

/// Runs one headless turn of `text` on a started agent and returns the exit code.
///
/// `-o FILE` holds this run's answer, or nothing: a run that ends without one (an error, a
/// limit, an interrupt) leaves FILE empty, so a script never takes the previous run's answer
/// for this one's.
pub async fn run(handle: AgentHandle, text: String, opts: ExecOptions, config: &Config) -> i32 {
    let mut answered = false;
    let code = drive(handle, text, &opts, config, &mut answered).await;
    if !answered
        && let Some(path) = &opts.output
        && let Err(e) = write_output(path, "", config)
    {
        eprintln!("baton: cannot empty {}: {e}", path.display());
    }
    code
}

/// The turn itself; `answered` is set once the answer was written to `-o FILE` (or tried).
async fn drive(
    mut handle: AgentHandle,
    text: String,
    opts: &ExecOptions,
    config: &Config,
    answered: &mut bool,
) -> i32 {
    let out = Output::new(opts.json);

    let mut deadline = config
        .timeout_secs
        .map(|s| Instant::now() + Duration::from_secs(s));
    let mut text = text;
    // Said after the session line, with the configuration's warnings.
    let stdin_warning = stdin_file::save(&mut text, &config.workspace)
        .err()
        .map(|e| {
            format!(
                "piped stdin was not saved under {} ({e}); it is in the prompt only",
                stdin_file::STDIN_FOLDER
            )
        });
    let _ = handle.ops.send(Op::UserTurn { text });

    let mut code: Option<i32> = None;
    let mut timed_out = false;
    let mut shutting_down = false;
    // The core's session total, last seen (it grows after the answer: the summary hop).
    let mut session_usage = None;
    // The session this run wrote to, for the resume hint at the end.
    let mut session_id: Option<String> = None;
    let mut signals = StopSignals::new();
    // The signal that is stopping the turn (the first one; a second one leaves at once).
    let mut stopped_by: Option<StopSignal> = None;
    // The tool calls of the turn: titles by call id, those declined, and how many ran.
    let mut titles: HashMap<String, (String, String)> = HashMap::new();
    let mut declined: Vec<Declined> = Vec::new();
    let mut ran = 0usize;
    let mut refused = false;
    loop {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            ev = handle.events.recv() => ev,
            signal = signals.recv() => {
                if stopped_by.is_some() || shutting_down {
                    // A second signal, or one while only the summary is being saved: leave now.
                    return code.unwrap_or(signal.exit_code());
                }
                stopped_by = Some(signal);
                out.note(&match signal {
                    StopSignal::Interrupt => "interrupted: stopping the turn and saving the \
                                              session (Ctrl-C again to quit now)"
                        .to_string(),
                    _ => format!(
                        "{}: stopping the turn and saving the session",
                        signal.name()
                    ),
                });
                let _ = handle.ops.send(match signal {
                    StopSignal::Interrupt => Op::Interrupt,
                    _ => Op::InterruptFor {
                        reason: format!("baton received {}", signal.name()),
                    },
                });
                // Ctrl-C waits for the user; SIGTERM and SIGHUP come from a supervisor (timeout,
                // CI, a closed terminal) that will not wait long: the turn gets a bounded grace.
                if signal != StopSignal::Interrupt {
                    let by = Instant::now() + STOP_GRACE;
                    deadline = Some(deadline.map_or(by, |d| d.min(by)));
                }
                continue;
            }
            _ = until_deadline => {
                if let Some(signal) = stopped_by
                    && !shutting_down
                {
                    out.note("the turn did not stop in time; exiting");
                    return signal.exit_code();
                }
                if shutting_down {
                    // The answer is out; an unsaved summary is made by the next turn that needs it.
                    out.note("timeout while saving the summary; the next turn will make it");
                    return code.unwrap_or(exit::OK);
                }
                if timed_out {
                    out.note("the turn did not stop in time after the timeout; exiting");
                    return exit::LIMIT;
                }
                timed_out = true;
                out.note(&format!(
                    "--timeout {} s reached: stopping the turn",
                    config.timeout_secs.unwrap_or(0)
                ));
                let _ = handle.ops.send(Op::InterruptFor {
                    reason: format!(
                        "the run's time limit (--timeout {} s) was reached",
                        config.timeout_secs.unwrap_or(0)
                    ),
                });
                // Grace for the turn to stop and the session to be saved.
                deadline = Some(Instant::now() + STOP_GRACE);
                continue;
            }
        };
        let Some(event) = event else {
            return code.unwrap_or(exit::AGENT_ERROR);
        };
        out.event(&event);
        match &event {
            Event::SessionUsage { usage } => session_usage = Some(*usage),
            // Only a turn refused before it began has no hop: a required MCP server is down,
            // a setup problem like any other (exit 2).
            Event::Error {
                kind: crate::protocol::ErrorKind::Config,
                hop: None,
                ..
            } => refused = true,
            Event::Session { session_id: id, .. } => {
                // Right after the session line (the first event a reader expects): what the
                // configuration withheld, as `warning` events in --json and lines on stderr.
                if session_id.is_none() {
                    for message in config.warnings.iter().chain(stdin_warning.iter()) {
                        out.event(&Event::Warning {
                            message: message.clone(),
                        });
                    }
                }
                session_id = Some(id.clone());
            }
            Event::ToolBegin {
                call_id,
                tool,
                title,
                ..
            } => {
                titles.insert(call_id.clone(), (tool.clone(), title.clone()));
            }
            Event::ToolEnd {
                call_id,
                status: ToolStatus::Declined,
                output,
                ..
            } => {
                let (tool, title) = titles
                    .remove(call_id)
                    .unwrap_or_else(|| (String::new(), call_id.clone()));
                let cause = Declined::of(&tool, output);
                out.declined(&title, &cause);
                declined.push(cause);
            }
            Event::ToolEnd { call_id, .. } => {
                titles.remove(call_id);
                ran += 1;
            }
            Event::TurnCompleted {
                status,
                answer,
                session_usage: total,
                ..
            } if code.is_none() => {
                session_usage = Some(**total);
                if let Some(answer) = answer {
                    out.answer(answer);
                    if let Some(path) = &opts.output {
                        *answered = true;
                        if let Err(e) = write_output(path, answer, config) {
                            eprintln!("baton: cannot write {}: {e}", path.display());
                            code = Some(exit::AGENT_ERROR);
                        }
                    }
                }
                for line in declined_hint(&declined) {
                    out.note(&line);
                }
                code = code.or(Some(match status {
                    // Every tool call the task needed was declined: the answer is only an
                    // explanation, and a script must not take it for the work done.
                    TurnStatus::Done if ran == 0 && !declined.is_empty() => exit::DECLINED,
                    TurnStatus::Done => exit::OK,
                    TurnStatus::Error if refused => exit::USAGE,
                    TurnStatus::Error => exit::AGENT_ERROR,
                    TurnStatus::LimitReached => exit::LIMIT,
                    TurnStatus::Interrupted if timed_out => exit::LIMIT,
                    TurnStatus::Interrupted => {
                        stopped_by.map_or(exit::INTERRUPTED, StopSignal::exit_code)
                    }
                }));
                shutting_down = true;
                let _ = handle.ops.send(Op::Shutdown);
                // The summary is saved if it comes in time; if not, the next turn makes it.
                let save_by = Instant::now() + SUMMARY_SAVE_LIMIT;
                deadline = Some(deadline.map_or(save_by, |d| d.min(save_by)));
            }
            Event::ShutdownComplete => {
                if let Some(usage) = &session_usage {
                    out.session_usage(usage);
                }
                if let Some(id) = &session_id {
                    out.resume_hint(id);
                }
                return code.unwrap_or(exit::AGENT_ERROR);
            }
            _ => {}
        }
    }
}

/// A signal that ends the turn the way Ctrl-C does: the running command is killed, the turn's
/// checkpoint and the session are saved, then the process exits with 128 + the signal's number
/// (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP; docs/events.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopSignal {
    Interrupt,
    Terminate,
    Hangup,
}

impl StopSignal {
    fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "interrupted",
            StopSignal::Terminate => "SIGTERM",
            StopSignal::Hangup => "SIGHUP",
        }
    }

    fn exit_code(self) -> i32 {
        match self {
            StopSignal::Interrupt => exit::INTERRUPTED,
            StopSignal::Terminate => 128 + libc::SIGTERM,
            StopSignal::Hangup => 128 + libc::SIGHUP,
        }
    }
}

/// SIGINT, SIGTERM and SIGHUP as one stream. A signal whose handler cannot be installed keeps
/// its default action (the process ends at once), as before.
struct StopSignals {
    interrupt: Option<tokio::signal::unix::Signal>,
    terminate: Option<tokio::signal::unix::Signal>,
    hangup: Option<tokio::signal::unix::Signal>,
}

impl StopSignals {
    fn new() -> StopSignals {
        use tokio::signal::unix::{SignalKind, signal};
        StopSignals {
            interrupt: signal(SignalKind::interrupt()).ok(),
            terminate: signal(SignalKind::terminate()).ok(),
            hangup: signal(SignalKind::hangup()).ok(),
        }
    }

    async fn recv(&mut self) -> StopSignal {
        async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    if s.recv().await.is_none() {
                        std::future::pending::<()>().await;
                    }
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            _ = next(&mut self.interrupt) => StopSignal::Interrupt,
            _ = next(&mut self.terminate) => StopSignal::Terminate,
            _ = next(&mut self.hangup) => StopSignal::Hangup,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_of_a_decline_gets_its_own_advice() {
        let hook = Declined::of(
            "shell",
            "A PreToolUse hook blocked this call: rm -rf is not allowed",
        );
        let mcp = Declined::of("mcp__everything__echo", "needs approval");
        let plain = Declined::of("shell", "needs approval");
        assert_eq!(hook, Declined::Hook);
        assert_eq!(mcp, Declined::Mcp("everything".into()));
        assert_eq!(plain, Declined::Approval);
        let only_hook = declined_hint(std::slice::from_ref(&hook)).join("\n");
        assert!(only_hook.contains("blocked by a hook"), "{only_hook}");
        assert!(!only_hook.contains("--approval full-auto"), "{only_hook}");
        let all = declined_hint(&[plain, mcp.clone(), mcp, hook]).join("\n");
        assert!(
            all.contains("1 tool call was declined: --exec never asks"),
            "{all}"
        );
        assert!(
            all.contains("2 tool calls were declined (MCP tools)"),
            "{all}"
        );
        assert!(all.contains("pass --allow mcp__everything"), "{all}");
    }
}
