//! Turning what a server said into a `BackendError` a user can act on: the OpenAI error
//! envelope summarised, bodies truncated, context overflows recognised, and
//! the API key scrubbed from anything that reaches a message.

use serde_json::Value;

use crate::backend::BackendError;
use crate::protocol::Hop;

/// How much of a server's answer goes into an error message.
const BODY_LIMIT: usize = 500;

/// The phrases vLLM, SGLang, llama.cpp and OpenAI use for a prompt that does not fit.
const OVERFLOW_PHRASES: [&str; 9] = [
    "maximum context length",
    "maximum sequence length",
    "longer than the model's context length",
    "longer than the maximum model length",
    "exceeds the context length",
    "exceeds the context window",
    // llama.cpp's server: HTTP 400, or an error frame inside a 200 stream.
    "exceeds the available context size",
    "exceed_context_size_error",
    "context_length_exceeded",
];

/// Context for the errors of one request.
#[derive(Clone)]
pub struct ErrorContext {
    pub hop: Hop,
    pub url: String,
    api_key: Option<String>,
}

impl ErrorContext {
    pub fn new(hop: Hop, url: String, api_key: Option<String>) -> Self {
        ErrorContext { hop, url, api_key }
    }

    /// `text` with the API key replaced, in case a server or library echoed it.
    pub fn scrub(&self, text: &str) -> String {
        match &self.api_key {
            Some(key) if !key.is_empty() => text.replace(key.as_str(), "<api-key>"),
            _ => text.to_string(),
        }
    }

    /// An HTTP error answer: a context overflow, or `Http` with what the server said.
    pub fn http(&self, status: u16, body: &str) -> BackendError {
        let said = self.scrub(&summarize_body(body));
        if (400..500).contains(&status) && is_context_overflow(body) {
            return BackendError::ContextOverflow {
                hop: self.hop,
                url: self.url.clone(),
                message: said,
            };
        }
        BackendError::Http {
            hop: self.hop,
            url: self.url.clone(),
            status,
            body: said,
        }
    }

    /// An error object inside a 200 response (non-streamed body or stream frame).
    pub fn server_error(&self, message: &str, code: Option<&str>) -> BackendError {
        let said = self.scrub(&truncate(message));
        if is_context_overflow(message) || code == Some("context_length_exceeded") {
            return BackendError::ContextOverflow {
                hop: self.hop,
                url: self.url.clone(),
                message: said,
            };
        }
        // The error's code says what kind it is, like the status of an HTTP error would: an
        // HTTP status (vLLM and SGLang put one there) or an OpenAI code. A rate limit sent in
        // a stream frame is a rate limit, not a malformed answer.
        let status = code.and_then(|c| match c {
            "rate_limit_exceeded" => Some(429),
            "invalid_api_key" => Some(401),
            "model_not_found" => Some(404),
            _ => c.parse::<u16>().ok().filter(|s| (400..600).contains(s)),
        });
        if let (Some(status), Some(code)) = (status, code) {
            return BackendError::Http {
                hop: self.hop,
                url: self.url.clone(),
                status,
                body: format!("the server reported an error ({code}): {said}"),
            };
        }
        let said = match code {
            Some(code) => format!("the server reported an error ({code}): {said}"),
            None => format!("the server reported an error: {said}"),
        };
        self.protocol(said)
    }

    pub fn protocol(&self, message: impl Into<String>) -> BackendError {
        BackendError::Protocol {
            hop: self.hop,
            url: self.url.clone(),
            message: self.scrub(&message.into()),
        }
    }

    pub fn connect(&self, message: &str) -> BackendError {
        BackendError::Connect {
            hop: self.hop,
            url: self.url.clone(),
            message: self.scrub(message),
        }
    }

    pub fn timeout(&self, secs: u64, what: impl Into<String>) -> BackendError {
        BackendError::Timeout {
            hop: self.hop,
            url: self.url.clone(),
            secs,
            what: what.into(),
        }
    }
}

/// Whether a server's message says the prompt is longer than the context window.
pub fn is_context_overflow(text: &str) -> bool {
    let lower = text.to_lowercase();
    OVERFLOW_PHRASES.iter().any(|p| lower.contains(p))
}

/// The useful part of an error body: `error.message` (and `code`) of the OpenAI envelope, a
/// top-level `message`/`detail`, or the raw text — at most ~500 characters.
pub fn summarize_body(body: &str) -> String {
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty body)".into();
    }
    let Ok(json) = serde_json::from_str::<Value>(trimmed) else {
        return truncate(trimmed);
    };
    let error = json.get("error").unwrap_or(&json);
    let message = error
        .get("message")
        .or_else(|| error.get("detail"))
        .and_then(Value::as_str)
        .or_else(|| error.as_str());
    let code = error.get("code").and_then(|c| match c {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    match (message, code) {
        (Some(m), Some(c)) => truncate(&format!("{m} (code {c})")),
        (Some(m), None) => truncate(m),
        _ => truncate(trimmed),
    }
}

/// At most `BODY_LIMIT` characters, cut on a character boundary, marked when cut.
pub fn truncate(text: &str) -> String {
    match text.char_indices().nth(BODY_LIMIT) {
        Some((cut, _)) => format!("{}… (truncated)", &text[..cut]),
        None => text.to_string(),
    }
}

/// An error and its causes on one line (reqwest hides the useful part in `source()`).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> ErrorContext {
        ErrorContext::new(
            Hop::Answer,
            "http://h/v1/chat/completions".into(),
            Some("sk-secret".into()),
        )
    }

    #[test]
    fn envelope_is_summarised() {
        let body = r#"{"error":{"message":"model L9 not found","type":"x","code":404}}"#;
        assert_eq!(summarize_body(body), "model L9 not found (code 404)");
        assert_eq!(summarize_body(r#"{"detail":"bad"}"#), "bad");
        assert_eq!(summarize_body("  "), "(empty body)");
        let long = "é".repeat(2000);
        let cut = summarize_body(&long);
        assert!(cut.ends_with("(truncated)") && cut.chars().count() < 520);
    }

    #[test]
    fn overflow_is_classified_by_phrase_or_code() {
        let body = r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":400}}"#;
        assert!(matches!(
            ctx().http(400, body),
            BackendError::ContextOverflow { .. }
        ));
        let coded = r#"{"error":{"message":"too long","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            ctx().http(400, coded),
            BackendError::ContextOverflow { .. }
        ));
        assert!(matches!(
            ctx().http(500, body),
            BackendError::Http { status: 500, .. }
        ));
        assert!(matches!(
            ctx().server_error("too long", Some("context_length_exceeded")),
            BackendError::ContextOverflow { .. }
        ));
        // llama.cpp's server, as an HTTP 400 and as a stream frame with a numeric code.
        let llama = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        assert!(matches!(
            ctx().http(400, llama),
            BackendError::ContextOverflow { .. }
        ));
        assert!(matches!(
            ctx().server_error(
                "the request exceeds the available context size, try increasing it",
                Some("400")
            ),
            BackendError::ContextOverflow { .. }
        ));
    }

    #[test]
    fn an_error_inside_a_200_answer_has_the_kind_its_code_names() {
        use crate::protocol::ErrorKind;
        for (code, kind) in [
            (Some("rate_limit_exceeded"), ErrorKind::RateLimit),
            (Some("429"), ErrorKind::RateLimit),
            (Some("invalid_api_key"), ErrorKind::Auth),
            (Some("404"), ErrorKind::ModelNotFound),
            (Some("500"), ErrorKind::Server),
            (Some("some_other_code"), ErrorKind::BadResponse),
            (Some("7"), ErrorKind::BadResponse),
            (None, ErrorKind::BadResponse),
        ] {
            let err = ctx().server_error("slow down", code);
            assert_eq!(err.kind(), kind, "{code:?}: {err}");
            assert!(err.to_string().contains("slow down"), "{err}");
        }
    }

    #[test]
    fn the_key_never_reaches_a_message() {
        let err = ctx().http(401, "invalid key sk-secret");
        let text = err.to_string();
        assert!(
            !text.contains("sk-secret") && text.contains("<api-key>"),
            "{text}"
        );
        assert!(text.contains("answer hop") && text.contains("http://h/v1/chat/completions"));
    }
}
