//! Errors in plain words: a hint at what to do for the failures users meet most.

/// What to try, for an error message from the core (`endpoint` is the configured server).
pub fn advice_for(message: &str, endpoint: &str) -> Option<String> {
    let m = message.to_lowercase();
    let server = if endpoint.is_empty() {
        "the model server".to_string()
    } else {
        endpoint.to_string()
    };
    let hint = if m.contains("connection refused")
        || m.contains("error sending request")
        || m.contains("dns")
        || m.contains("connect") && m.contains("fail")
    {
        format!(
            "Could not reach {server}. Is the server running, and is the endpoint right (--endpoint or the config file)?"
        )
    } else if m.contains("401")
        || m.contains("403")
        || m.contains("unauthorized")
        || m.contains("api key")
    {
        "The server refused the credentials. Check the API key in your config or environment."
            .into()
    } else if m.contains("429") || m.contains("rate limit") {
        "The server is rate-limiting requests. Wait a moment and send again.".into()
    } else if m.contains("context")
        && (m.contains("length") || m.contains("too long") || m.contains("exceed"))
    {
        "The conversation no longer fits the model's context. Run /compact, or /new for a fresh session.".into()
    } else if m.contains("404") || m.contains("model not found") || m.contains("does not exist") {
        "The server does not know this model. Check the model name (/model NAME) or the endpoint."
            .into()
    } else if m.contains("timed out") || m.contains("timeout") {
        "The request took too long. The server may be overloaded; try again, or raise the timeout in the config.".into()
    } else if m.contains("sandbox") || m.contains("landlock") || m.contains("seccomp") {
        "The sandbox could not be set up on this system. See docs/sandbox.md for what the kernel must allow.".into()
    } else {
        return None;
    };
    Some(hint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_failures_get_a_hint() {
        let h = advice_for(
            "error sending request: Connection refused (os error 111)",
            "http://127.0.0.1:8000/v1",
        )
        .expect("hint");
        assert!(h.contains("http://127.0.0.1:8000/v1"));
        assert!(advice_for("HTTP 401 Unauthorized", "").is_some());
        assert!(
            advice_for("maximum context length exceeded", "")
                .expect("hint")
                .contains("/compact")
        );
        assert!(advice_for("something odd", "").is_none());
    }
}
