//! `baton [PROMPT]` when stdin or stdout is not a terminal (a pipe, `script`, TERM=dumb) and
//! `--exec` is not given: a plain line-mode REPL over the same `AgentHandle`, one line a turn.
//! Answers stream to stdout; progress, approvals and errors go to stderr. Turns typed while one
//! runs are queued; `/quit` and the end of input both finish the queued turns before leaving.

use crate::protocol::stdio::{eprint, eprintln, print, println};
use std::io::Write;

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::protocol::{
    AgentHandle, ApprovalDecision, ApprovalRequest, Event, Expert, Op, exit, terminal_safe,
    terminal_safe_line,
};

const HELP: &str = "commands: /expert L0..L3|auto, /new, /resume ID|last, /rename NAME, /quit (Ctrl-C stops a running turn)";

pub async fn run(mut handle: AgentHandle, first: Option<String>) -> i32 {
    eprintln!("{HELP}");

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut in_flight = 0usize;
    let mut pending_approval: Option<(String, Vec<String>)> = None;
    let mut stdin_open = true;
    // Whether answer text was printed since the last message ended (to end its line).
    let mut streamed = false;
    if let Some(text) = first.filter(|t| !t.trim().is_empty()) {
        in_flight += 1;
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
                        streamed = true;
                        print!("{}", terminal_safe(delta));
                        let _ = std::io::stdout().flush();
                    }
                    Event::MessageFinal { .. } if streamed => {
                        streamed = false;
                        println!();
                    }
                    Event::RouteDecided { expert, decision, latency_ms, reason, .. }
                        if !matches!(decision, crate::protocol::RouteDecision::Sticky) =>
                    {
                        let why = reason.as_deref().map(|r| format!(" · {r}")).unwrap_or_default();
                        eprintln!("[{expert} · {decision:?} · {latency_ms} ms{}]", terminal_safe_line(&why));
                    }
                    Event::ToolBegin { title, .. } => eprintln!("[tool] {}", terminal_safe_line(title)),
                    // Nothing will be read any more (`/quit` or end of input): nobody can answer.
                    Event::ApprovalRequested { call_id, .. } if !stdin_open => {
                        eprintln!("approval declined: no more input to answer it");
                        let _ = handle.ops.send(Op::Approval { call_id: call_id.clone(), decision: ApprovalDecision::Deny });
                    }
                    Event::ApprovalRequested { call_id, request } => {
                        // "always" remembers what the core offers (`remember`), shown as such;
                        // where it offers nothing, there is no "always".
                        let (what, prefix) = match request {
                            ApprovalRequest::Command { command, remember, .. } => (format!("run `{command}`"), remember.clone().unwrap_or_default()),
                            ApprovalRequest::Edit { path, diff } => (format!("edit {path}\n{diff}"), Vec::new()),
                        };
                        if prefix.is_empty() {
                            eprint!("approve: {}? [y]es / [n]o: ", terminal_safe(&what));
                        } else {
                            eprint!("approve: {}? [y]es / [n]o / [a]lways for `{}`: ", terminal_safe(&what), terminal_safe_line(&prefix.join(" ")));
                        }
                        pending_approval = Some((call_id.clone(), prefix));
                    }
                    Event::Warning { message } => eprintln!("warning: {}", terminal_safe(message)),
                    Event::Error { message, .. } => eprintln!("error: {}", terminal_safe(message)),
                    Event::Session { session_id, resumed, .. } => {
                        eprintln!("{} session {session_id}", if *resumed { "resumed" } else { "new" });
                    }
                    Event::TurnCompleted { .. } => {
                        in_flight = in_flight.saturating_sub(1);
                        if !stdin_open && in_flight == 0 {
                            let _ = handle.ops.send(Op::Shutdown);
                        } else if in_flight == 0 {
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
                        if in_flight == 0 { let _ = handle.ops.send(Op::Shutdown); }
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
                    "" => { if in_flight == 0 { prompt(); } }
                    "/quit" | "/exit" => {
                        // Like the end of input: the turns already sent are answered first.
                        stdin_open = false;
                        if in_flight == 0 { let _ = handle.ops.send(Op::Shutdown); }
                    }
                    "/new" => { let _ = handle.ops.send(Op::NewSession); prompt(); }
                    "/help" => { eprintln!("{HELP}"); prompt(); }
                    _ if text.starts_with("/resume ") => {
                        let id = text.trim_start_matches("/resume ").trim().to_string();
                        let _ = handle.ops.send(Op::ResumeSession { id });
                        prompt();
                    }
                    _ if text == "/rename" || text.starts_with("/rename ") => {
                        let name = text.trim_start_matches("/rename").trim().to_string();
                        let _ = handle.ops.send(Op::RenameSession { name });
                        if in_flight == 0 { prompt(); }
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
                        in_flight += 1;
                        let _ = handle.ops.send(Op::UserTurn { text: text.to_string() });
                    }
                }
            }
            _ = tokio::signal::ctrl_c() => {
                if in_flight > 0 {
                    // An interrupt also drops the queued turns.
                    in_flight = 1;
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
