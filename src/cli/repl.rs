//! `baton [PROMPT]` until the TUI lands: a plain line-mode REPL over the same `AgentHandle`.
//! Answers stream to stdout; progress, approvals and errors go to stderr.

use std::io::Write;

use tokio::io::{AsyncBufReadExt, BufReader};

use super::{exit, setup};
use crate::config::Config;
use crate::protocol::{ApprovalDecision, ApprovalRequest, Event, Expert, Op};

const HELP: &str =
    "commands: /expert L0..L3|auto, /new, /resume ID|last, /quit (Ctrl-C stops a running turn)";

pub async fn run(config: &Config, first: Option<String>, resume: Option<String>) -> i32 {
    let prepared = setup::build_backend(config).and_then(|backend| {
        let agent = setup::agent_config(config, false)?;
        let (file, restored) = setup::open_session(config, backend.as_ref(), resume.as_deref())?;
        Ok((backend, agent, file, restored))
    });
    let (backend, agent_cfg, file, restored) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("baton: {e}");
            return exit::USAGE;
        }
    };
    let tools = crate::agent::basic_tools::basic_registry();
    let mut handle = crate::agent::spawn_agent(agent_cfg, backend, tools, file, restored);
    eprintln!("{HELP}");

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut busy = false;
    let mut pending_approval: Option<(String, Vec<String>)> = None;
    let mut stdin_open = true;
    if let Some(text) = first.filter(|t| !t.trim().is_empty()) {
        busy = true;
        let _ = handle.ops.send(Op::UserTurn { text });
    } else {
        prompt();
    }
    loop {
        tokio::select! {
            ev = handle.events.recv() => {
                let Some(ev) = ev else { return exit::AGENT_ERROR };
                match &ev {
                    Event::MessageDelta { delta, .. } => {
                        print!("{delta}");
                        let _ = std::io::stdout().flush();
                    }
                    Event::MessageFinal { .. } => println!(),
                    Event::RouteDecided { expert, decision, latency_ms, reason, .. }
                        if !matches!(decision, crate::protocol::RouteDecision::Sticky) =>
                    {
                        let why = reason.as_deref().map(|r| format!(" · {r}")).unwrap_or_default();
                        eprintln!("[{expert} · {decision:?} · {latency_ms} ms{why}]");
                    }
                    Event::ToolBegin { title, .. } => eprintln!("[tool] {title}"),
                    Event::ApprovalRequested { call_id, request } => {
                        let (what, argv) = match request {
                            ApprovalRequest::Command { command, argv, .. } => (format!("run `{command}`"), argv.clone()),
                            ApprovalRequest::Edit { path, diff } => (format!("edit {path}\n{diff}"), Vec::new()),
                        };
                        eprint!("approve: {what}? [y]es / [n]o / [a]lways for this command: ");
                        pending_approval = Some((call_id.clone(), argv));
                    }
                    Event::Warning { message } => eprintln!("warning: {message}"),
                    Event::Error { message, .. } => eprintln!("error: {message}"),
                    Event::Session { session_id, resumed, .. } => {
                        eprintln!("{} session {session_id}", if *resumed { "resumed" } else { "new" });
                    }
                    Event::TurnCompleted { .. } => {
                        busy = false;
                        if !stdin_open {
                            let _ = handle.ops.send(Op::Shutdown);
                        } else {
                            prompt();
                        }
                    }
                    Event::ShutdownComplete => return exit::OK,
                    _ => {}
                }
            }
            line = lines.next_line(), if stdin_open => {
                let line = match line {
                    Ok(Some(l)) => l,
                    _ => {
                        stdin_open = false;
                        if !busy { let _ = handle.ops.send(Op::Shutdown); }
                        continue;
                    }
                };
                if let Some((call_id, argv)) = pending_approval.take() {
                    let decision = match line.trim() {
                        "y" | "yes" => ApprovalDecision::Approve,
                        "a" | "always" if !argv.is_empty() => ApprovalDecision::ApproveForPrefix { prefix: argv },
                        _ => ApprovalDecision::Deny,
                    };
                    let _ = handle.ops.send(Op::Approval { call_id, decision });
                    continue;
                }
                let text = line.trim();
                match text {
                    "" => { if !busy { prompt(); } }
                    "/quit" | "/exit" => { let _ = handle.ops.send(Op::Shutdown); }
                    "/new" => { let _ = handle.ops.send(Op::NewSession); prompt(); }
                    "/help" => { eprintln!("{HELP}"); prompt(); }
                    _ if text.starts_with("/resume ") => {
                        let id = text.trim_start_matches("/resume ").trim().to_string();
                        let _ = handle.ops.send(Op::ResumeSession { id });
                        prompt();
                    }
                    _ if text.starts_with("/expert ") => {
                        let arg = text.trim_start_matches("/expert ").trim();
                        let expert = if arg == "auto" { Some(None) } else { arg.parse::<Expert>().ok().map(Some) };
                        match expert {
                            Some(e) => { let _ = handle.ops.send(Op::PinExpert { expert: e }); }
                            None => eprintln!("'{arg}' is not L0, L1, L2, L3 or auto"),
                        }
                        prompt();
                    }
                    _ => {
                        busy = true;
                        let _ = handle.ops.send(Op::UserTurn { text: text.to_string() });
                    }
                }
            }
            _ = tokio::signal::ctrl_c() => {
                if busy {
                    let _ = handle.ops.send(Op::Interrupt);
                } else {
                    let _ = handle.ops.send(Op::Shutdown);
                }
            }
        }
    }
}

fn prompt() {
    eprint!("> ");
}
