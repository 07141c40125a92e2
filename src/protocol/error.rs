//! What went wrong, as a kind a frontend can act on (a hint, an exit code, a retry), and the
//! process exit codes every frontend uses.

use serde::{Deserialize, Serialize};

/// The kind of a failure. Errors carry their full text for people; the kind is for programs:
/// a frontend picks its hint from it, never from the English of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The server refused the credentials (HTTP 401/403).
    Auth,
    /// The server is rate-limiting (HTTP 429).
    RateLimit,
    /// The prompt does not fit the model's context window.
    ContextOverflow,
    /// The server could not be reached (connection refused, DNS, TLS).
    Unreachable,
    /// The server took too long.
    Timeout,
    /// The server does not serve the requested model (HTTP 404).
    ModelNotFound,
    /// The server failed (HTTP 5xx or another status).
    Server,
    /// The server's answer was malformed (bad JSON, a broken event stream).
    BadResponse,
    /// The in-process engine failed.
    Engine,
    /// The user or a limit stopped the work.
    Cancelled,
    /// The sandbox could not be set up on this system.
    SandboxUnavailable,
    /// Bad configuration or command line.
    Config,
    /// Reading or writing a file baton owns failed (session files, checkpoints).
    Io,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Auth => "auth",
            ErrorKind::RateLimit => "rate_limit",
            ErrorKind::ContextOverflow => "context_overflow",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::ModelNotFound => "model_not_found",
            ErrorKind::Server => "server",
            ErrorKind::BadResponse => "bad_response",
            ErrorKind::Engine => "engine",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::SandboxUnavailable => "sandbox_unavailable",
            ErrorKind::Config => "config",
            ErrorKind::Io => "io",
        }
    }

    /// The kind an HTTP status means.
    pub fn from_http_status(status: u16) -> ErrorKind {
        match status {
            401 | 403 => ErrorKind::Auth,
            404 => ErrorKind::ModelNotFound,
            408 => ErrorKind::Timeout,
            413 => ErrorKind::ContextOverflow,
            429 => ErrorKind::RateLimit,
            _ => ErrorKind::Server,
        }
    }
}

impl ErrorKind {
    /// What to try after an error of this kind, in plain words — the one source of hints for
    /// every frontend (the TUI under its error cell, `--exec` on stderr). `endpoint` is the
    /// configured server (empty for the local engine); `mol_mode` whether the client routes
    /// between experts.
    pub fn hint(self, endpoint: &str, mol_mode: bool) -> Option<String> {
        let server = if endpoint.is_empty() {
            "the model server".to_string()
        } else {
            endpoint.to_string()
        };
        let hint = match self {
            ErrorKind::Unreachable => format!(
                "Could not reach {server}. Is the server running, and is the endpoint right (--endpoint or the config file)?"
            ),
            ErrorKind::Auth => {
                "The server refused the credentials. Check the API key in your config or environment."
                    .into()
            }
            ErrorKind::RateLimit => {
                "The server is rate-limiting requests. Wait a moment and send again.".into()
            }
            ErrorKind::ContextOverflow => "The conversation no longer fits the model's context. Run /compact, or /new for a fresh session.".into(),
            ErrorKind::ModelNotFound if mol_mode => format!(
                "{server} does not serve this expert's model name. Run `baton doctor` to see the model names it serves (a MoL engine serves L0..L3)."
            ),
            ErrorKind::ModelNotFound => {
                "The server does not know this model. Check the model name (/model NAME) or the endpoint."
                    .into()
            }
            ErrorKind::Timeout => "The request took too long. The server may be overloaded; try again, or raise the timeout in the config.".into(),
            ErrorKind::BadResponse => format!(
                "{server} sent a malformed response: that is the server's fault, not your request's. The message above has the line it sent."
            ),
            ErrorKind::Server => format!("{server} failed on its side. Try again; if it persists, check the server's logs."),
            ErrorKind::SandboxUnavailable => "The sandbox could not be set up on this system. `baton doctor` says what the kernel must allow.".into(),
            ErrorKind::Engine
            | ErrorKind::Cancelled
            | ErrorKind::Config
            | ErrorKind::Io => return None,
        };
        Some(hint)
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Process exit codes of `baton` (documented in README.md and `baton --help`).
pub mod exit {
    pub const OK: i32 = 0;
    /// The agent failed: a backend error, a failed turn.
    pub const AGENT_ERROR: i32 = 1;
    /// Usage or setup problem: bad flags, bad config, nothing to talk to.
    pub const USAGE: i32 = 2;
    /// `--max-turns` or `--timeout` reached.
    pub const LIMIT: i32 = 3;
    /// `--exec`: every tool call of the turn was declined for want of approval, so nothing the
    /// task asked could run (`--approval auto-edit|full-auto` lets them).
    pub const DECLINED: i32 = 4;
    pub const INTERRUPTED: i32 = 130;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_serialize_as_their_names() {
        for kind in [
            ErrorKind::Auth,
            ErrorKind::RateLimit,
            ErrorKind::ContextOverflow,
            ErrorKind::SandboxUnavailable,
        ] {
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
        }
        assert_eq!(ErrorKind::from_http_status(429), ErrorKind::RateLimit);
        assert_eq!(ErrorKind::from_http_status(401), ErrorKind::Auth);
        assert_eq!(ErrorKind::from_http_status(503), ErrorKind::Server);
    }
}
