//! Errors in plain words: what to try, chosen by the error's kind (never by its English text).

use crate::protocol::ErrorKind;

/// What to try after an error of `kind`. `endpoint` is the configured server (empty for the
/// local engine) and `mol_mode` whether the client routes between experts.
pub fn advice_for(kind: ErrorKind, endpoint: &str, mol_mode: bool) -> Option<String> {
    let server = if endpoint.is_empty() {
        "the model server".to_string()
    } else {
        endpoint.to_string()
    };
    let hint = match kind {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_follow_the_kind_not_the_wording() {
        let h = advice_for(ErrorKind::Unreachable, "http://127.0.0.1:8000/v1", true).expect("hint");
        assert!(h.contains("http://127.0.0.1:8000/v1"));
        let overflow = advice_for(ErrorKind::ContextOverflow, "", true).expect("hint");
        assert!(overflow.contains("/compact"));
        assert!(!overflow.contains("API key"));
        let malformed = advice_for(ErrorKind::BadResponse, "", true).expect("hint");
        assert!(malformed.contains("server's fault"));
        assert!(!malformed.contains("rate"));
        assert!(
            advice_for(ErrorKind::ModelNotFound, "", true)
                .expect("hint")
                .contains("baton doctor")
        );
        assert!(advice_for(ErrorKind::Cancelled, "", true).is_none());
    }
}
