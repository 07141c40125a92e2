//! What `--exec` prints: the answer on stdout and short progress lines on stderr, or (with
//! `--json`) every event as one JSON line on stdout, flushed line by line.

use std::io::Write;

use crate::protocol::{Event, RouteDecision, ToolStatus};

pub struct Output {
    json: bool,
}

impl Output {
    pub fn new(json: bool) -> Self {
        Output { json }
    }

    /// A note from the runner itself (stderr in both modes: stdout stays machine-readable).
    pub fn note(&self, text: &str) {
        eprintln!("baton: {text}");
    }

    pub fn answer(&self, text: &str) {
        if self.json {
            return; // carried by the turn_completed event
        }
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(text.as_bytes());
        if !text.ends_with('\n') {
            let _ = stdout.write_all(b"\n");
        }
        let _ = stdout.flush();
    }

    pub fn event(&self, event: &Event) {
        if self.json {
            if let Ok(line) = serde_json::to_string(event) {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{line}");
                let _ = stdout.flush();
            }
            return;
        }
        if let Some(line) = progress_line(event) {
            eprintln!("{line}");
        }
    }
}

/// One human line on stderr for the events worth showing; deltas are not.
fn progress_line(event: &Event) -> Option<String> {
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
            RouteDecision::Fallback => format!(
                "route: {expert} (fallback: {})",
                reason.as_deref().unwrap_or("no label")
            ),
        },
        Event::ToolBegin { title, .. } => format!("tool: {title}"),
        Event::ToolEnd { status, output, .. } if *status != ToolStatus::Ok => {
            let first = output.lines().next().unwrap_or("");
            let what = match status {
                ToolStatus::Ok => "ok",
                ToolStatus::Error => "failed",
                ToolStatus::Declined => "declined",
                ToolStatus::TimedOut => "timed out",
                ToolStatus::Interrupted => "interrupted",
            };
            format!("tool {what}: {first}")
        }
        Event::Warning { message } => format!("warning: {message}"),
        Event::Error { message, .. } => format!("error: {message}"),
        Event::TurnCompleted {
            duration_ms, usage, ..
        } => format!(
            "done in {:.1} s ({} prompt + {} completion tokens)",
            *duration_ms as f64 / 1000.0,
            usage.prompt_tokens,
            usage.completion_tokens
        ),
        _ => return None,
    })
}
