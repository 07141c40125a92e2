//! What `--exec` prints: the answer on stdout and short progress lines on stderr, or (with
//! `--json`) every event as one JSON line on stdout, flushed line by line. Token counts are the
//! core's (`turn_completed` for the turn, `session_usage` for the session): nothing is counted
//! here.

use crate::protocol::stdio::eprintln;
use std::cell::RefCell;
use std::io::Write;

use crate::protocol::{
    Event, Hop, RouteDecision, ToolStatus, TurnStatus, UsageTotals, terminal_safe,
    terminal_safe_json, terminal_safe_line,
};

pub struct Output {
    json: bool,
    /// What the session event said the run talks to, for the hints under errors.
    server: RefCell<Server>,
}

/// The endpoint (empty for the local engine) and whether the client routes between experts.
#[derive(Debug, Default, Clone)]
struct Server {
    endpoint: String,
    mol_mode: bool,
}

impl Output {
    pub fn new(json: bool) -> Self {
        Output {
            json,
            server: RefCell::new(Server::default()),
        }
    }

    /// A note from the runner itself (stderr in both modes: stdout stays machine-readable).
    pub fn note(&self, text: &str) {
        eprintln!("baton: {}", terminal_safe(text));
    }

    pub fn answer(&self, text: &str) {
        if self.json {
            return; // carried by the turn_completed event
        }
        // The model's words, possibly quoting a hostile file: nothing in them may drive the
        // terminal (titles, clipboard writes, clearing the screen).
        let text = terminal_safe(text);
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        if !text.ends_with('\n') {
            let _ = stdout.write_all(b"\n");
        }
        let _ = stdout.flush();
    }

    /// A call that did not run, and why (plain mode; `--json` has the event).
    pub fn declined(&self, title: &str, cause: &super::Declined) {
        if self.json {
            return;
        }
        let why = match cause {
            super::Declined::Hook => "blocked by a hook",
            super::Declined::Mcp(_) => "an MCP tool not allowed by --allow",
            super::Declined::Approval => "needs approval; nobody can approve in --exec",
        };
        eprintln!("tool declined: {} ({why})", terminal_safe_line(title));
    }

    /// The session's tokens, once, when the run ends (the summary hop included): a stderr
    /// line in plain mode; `--json` readers have the `session_usage` events.
    pub fn session_usage(&self, usage: &UsageTotals) {
        if self.json {
            return;
        }
        eprintln!("{}", session_line(usage));
    }

    /// How to continue the session, when the run ends: a stderr line in plain mode; `--json`
    /// readers have the `session` event's id.
    pub fn resume_hint(&self, session_id: &str) {
        if self.json {
            return;
        }
        eprintln!(
            "To continue this session: baton --resume {}",
            terminal_safe_line(session_id)
        );
    }

    pub fn event(&self, event: &Event) {
        if self.json {
            if let Ok(line) = serde_json::to_string(event) {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{}", terminal_safe_json(&line));
                let _ = stdout.flush();
            }
            return;
        }
        if let Event::Session { mode, backend, .. } = event {
            *self.server.borrow_mut() = Server {
                endpoint: if backend.starts_with("local:") {
                    String::new()
                } else {
                    backend.clone()
                },
                mol_mode: mode == "mol",
            };
        }
        let server = self.server.borrow().clone();
        if let Some(line) = progress_line(event, &server) {
            // Every field of the line may come from the model, a command or a server; the
            // fields that must stay on one line were made so in `progress_line`.
            eprintln!("{}", terminal_safe(&line));
        }
    }
}

fn session_line(usage: &UsageTotals) -> String {
    let hops: Vec<String> = [Hop::Route, Hop::Answer, Hop::Summary, Hop::Compaction]
        .iter()
        .filter_map(|&hop| {
            let u = usage.hop(hop);
            let n = u.prompt_tokens + u.completion_tokens;
            (n > 0).then(|| format!("{hop} {n}"))
        })
        .collect();
    format!(
        "session: {}{} prompt + {} completion tokens ({})",
        if usage.total.estimated { "about " } else { "" },
        usage.total.prompt_tokens,
        usage.total.completion_tokens,
        if hops.is_empty() {
            "none reported".to_string()
        } else {
            hops.join(", ")
        }
    )
}

/// One human line on stderr for the events worth showing (an error's hint on a second line);
/// deltas are not.
fn progress_line(event: &Event, server: &Server) -> Option<String> {
    Some(match event {
        Event::Session {
            session_id,
            mode,
            backend,
            resumed,
            ..
        } => format!(
            "baton: {} session {session_id} ({mode}, {backend})",
            if *resumed { "resumed" } else { "new" }
        ),
        Event::RouteDecided {
            expert,
            decision,
            latency_ms,
            reason,
            ..
        } => match decision {
            RouteDecision::Sticky | RouteDecision::None => return None,
            RouteDecision::Model => format!("route: {expert} ({latency_ms} ms)"),
            RouteDecision::Pinned => format!("route: {expert} (pinned)"),
            RouteDecision::FollowUp => format!("route: {expert} (follow-up, no route hop)"),
            RouteDecision::Fallback => format!(
                "route: {expert} (fallback: {})",
                terminal_safe_line(reason.as_deref().unwrap_or("no label"))
            ),
        },
        Event::ToolBegin { title, .. } => format!("tool: {}", terminal_safe_line(title)),
        // The command's title is on the `tool:` line above; its own output's first line says
        // nothing about the failure, the exit code does.
        Event::ToolEnd {
            status: ToolStatus::Failed,
            exit_code,
            ..
        } => match exit_code {
            Some(code) => format!("tool failed: exit {code}"),
            None => "tool failed".to_string(),
        },
        // What the model was told of a decline is for the model; the runner says it to the
        // user in their terms (`Output::declined`).
        Event::ToolEnd {
            status: ToolStatus::Declined,
            ..
        } => return None,
        Event::ToolEnd { status, output, .. } if *status != ToolStatus::Ok => {
            let first = output.lines().next().unwrap_or("");
            let what = match status {
                ToolStatus::Ok => "ok",
                ToolStatus::Error => "error",
                ToolStatus::Failed => "failed",
                ToolStatus::Declined => "declined",
                ToolStatus::TimedOut => "timed out",
                ToolStatus::Interrupted => "interrupted",
            };
            format!("tool {what}: {}", terminal_safe_line(first))
        }
        Event::ContextCompacted {
            expert,
            tokens_before,
            tokens_after,
            ..
        } => {
            format!("context: compacted {expert}'s view, ~{tokens_before} → ~{tokens_after} tokens")
        }
        Event::Warning { message } => format!("warning: {message}"),
        Event::Error { message, kind, .. } => match kind.hint(&server.endpoint, server.mol_mode) {
            Some(hint) => format!("error: {message}\nhint: {hint}"),
            None => format!("error: {message}"),
        },
        Event::TurnCompleted {
            status,
            duration_ms,
            usage,
            ..
        } => {
            let what = match status {
                TurnStatus::Done => "done in",
                // The error line said what happened; "done" after it would be a lie.
                TurnStatus::Error => return None,
                TurnStatus::Interrupted => "interrupted after",
                TurnStatus::LimitReached => "stopped at the limit after",
            };
            format!(
                "{what} {:.1} s ({} prompt + {} completion tokens this turn)",
                *duration_ms as f64 / 1000.0,
                usage.prompt_tokens,
                usage.completion_tokens
            )
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ErrorKind, TokenUsage};

    #[test]
    fn a_failed_command_is_reported_with_its_exit_code() {
        let end = |status, exit_code, output: &str| Event::ToolEnd {
            call_id: "c".into(),
            status,
            exit_code,
            duration_ms: 1,
            output: output.into(),
        };
        let server = Server::default();
        let progress_line = |event: &Event| progress_line(event, &server);
        assert_eq!(
            progress_line(&end(ToolStatus::Failed, Some(1), "FAILED x\n[exit code 1]")),
            Some("tool failed: exit 1".into())
        );
        assert_eq!(
            progress_line(&end(ToolStatus::Error, None, "no tool named `x`")),
            Some("tool error: no tool named `x`".into())
        );
        assert_eq!(progress_line(&end(ToolStatus::Ok, Some(0), "ok")), None);
    }

    #[test]
    fn the_session_line_names_the_hops_that_used_tokens() {
        let mut u = UsageTotals::default();
        let tokens = |p, c| TokenUsage {
            prompt_tokens: p,
            completion_tokens: c,
            cached_tokens: None,
            estimated: false,
        };
        u.add(Hop::Route, &tokens(10, 1));
        u.add(Hop::Answer, &tokens(100, 20));
        u.add(Hop::Summary, &tokens(50, 5));
        assert_eq!(
            session_line(&u),
            "session: 160 prompt + 26 completion tokens (route 11, answer 120, summary 55)"
        );
        assert!(session_line(&UsageTotals::default()).ends_with("(none reported)"));
        u.add(
            Hop::Answer,
            &TokenUsage {
                estimated: true,
                ..tokens(10, 1)
            },
        );
        assert!(
            session_line(&u).starts_with("session: about 170 prompt"),
            "{}",
            session_line(&u)
        );
    }

    fn completed(status: TurnStatus) -> Event {
        Event::TurnCompleted {
            turn_id: 1,
            status,
            answer: None,
            expert: None,
            duration_ms: 1500,
            usage: TokenUsage::default(),
            usage_by_hop: Box::default(),
            session_usage: Box::default(),
        }
    }

    #[test]
    fn no_done_line_after_an_error() {
        let server = Server::default();
        assert!(progress_line(&completed(TurnStatus::Error), &server).is_none());
        let done = progress_line(&completed(TurnStatus::Done), &server).expect("a done line");
        assert!(done.starts_with("done in 1.5 s"), "{done}");
        let stopped = progress_line(&completed(TurnStatus::Interrupted), &server).expect("a line");
        assert!(stopped.starts_with("interrupted after"), "{stopped}");
    }

    #[test]
    fn errors_carry_the_hint_of_their_kind() {
        let server = Server {
            endpoint: "http://127.0.0.1:9/v1".into(),
            mol_mode: true,
        };
        let error = |kind| Event::Error {
            message: "boom".into(),
            kind,
            hop: None,
        };
        let unreachable = progress_line(&error(ErrorKind::Unreachable), &server).expect("line");
        assert!(
            unreachable.starts_with("error: boom\nhint: Could not reach http://127.0.0.1:9/v1"),
            "{unreachable}"
        );
        let overflow = progress_line(&error(ErrorKind::ContextOverflow), &server).expect("line");
        assert!(
            overflow.contains("/compact") && overflow.contains("/new"),
            "{overflow}"
        );
        let missing = progress_line(&error(ErrorKind::ModelNotFound), &server).expect("line");
        assert!(missing.contains("baton doctor"), "{missing}");
        let cancelled = progress_line(&error(ErrorKind::Cancelled), &server).expect("line");
        assert_eq!(cancelled, "error: boom");
    }
}
