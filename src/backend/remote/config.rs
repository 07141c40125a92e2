//! Settings of the remote backend (endpoint, API key, timeouts, retries, constraint dialect)
//! and the validation of the endpoint URL.

use std::time::Duration;

use crate::protocol::RouteConstraint;

/// Everything the remote backend needs. Build it with `RemoteBackend::builder`.
#[derive(Clone)]
pub struct RemoteConfig {
    /// The API root, usually ending in `/v1` (no trailing slash once validated).
    pub base_url: String,
    /// Sent as `Authorization: Bearer …`; never logged, never in an error message.
    pub api_key: Option<String>,
    /// Time to establish the TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// Time until the response headers arrive (and, for a non-streamed request, its body).
    pub request_timeout: Duration,
    /// Longest silence allowed inside a streamed response.
    pub idle_timeout: Duration,
    /// Retries after the first attempt (connect errors, 429, 5xx; never once output flowed).
    pub max_retries: u32,
    /// First backoff; doubled per retry, with jitter.
    pub backoff_base: Duration,
    /// Largest backoff between two attempts.
    pub backoff_max: Duration,
    /// Largest `Retry-After` honoured; longer waits are cut to this.
    pub retry_after_cap: Duration,
    pub dialect: RouteConstraint,
}

impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_retries", &self.max_retries)
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

impl RemoteConfig {
    /// Defaults for `base_url`: generous timeouts because long prompts take a while to prefill.
    pub fn new(base_url: impl Into<String>) -> Self {
        RemoteConfig {
            base_url: base_url.into(),
            api_key: None,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(180),
            max_retries: 3,
            backoff_base: Duration::from_millis(500),
            backoff_max: Duration::from_secs(8),
            retry_after_cap: Duration::from_secs(30),
            dialect: RouteConstraint::Choice,
        }
    }
}

/// A setting the backend cannot work with.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteConfigError {
    #[error("endpoint {url:?}: {reason}")]
    InvalidEndpoint { url: String, reason: String },
    #[error("the API key is unusable: {0}")]
    InvalidApiKey(String),
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

/// Checks an endpoint URL and returns it without a trailing slash.
pub fn validate_base_url(url: &str) -> Result<String, RemoteConfigError> {
    let invalid = |reason: String| RemoteConfigError::InvalidEndpoint {
        url: url.to_string(),
        reason,
    };
    let parsed = reqwest::Url::parse(url.trim()).map_err(|e| {
        invalid(format!(
            "not a URL ({e}); expected something like http://127.0.0.1:8000/v1"
        ))
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "scheme {:?} is not http or https",
            parsed.scheme()
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid("the URL has no host".into()));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(invalid(
            "credentials in the URL would end up in logs; put the API key in the environment \
             variable named by --api-key-env instead"
                .into(),
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(invalid(
            "the base URL must not have a query or fragment".into(),
        ));
    }
    let trimmed = parsed.as_str().trim_end_matches('/').to_string();
    // Any API root is accepted (`/v1` for most servers, `/v1beta/openai` for Gemini, a proxy's
    // own prefix): what is checked is that it answers `/models` (`baton doctor`, and the hint
    // of a 404). Only the URL of one endpoint under the root is refused, with the root to use.
    let path = parsed.path().trim_end_matches('/');
    if let Some(suffix) = ENDPOINT_SUFFIXES.iter().find(|s| path.ends_with(*s)) {
        let root = &trimmed[..trimmed.len() - suffix.len()];
        return Err(invalid(format!(
            "that is the URL of one endpoint ({suffix}); give the API root it is under, e.g. \
             {root}"
        )));
    }
    Ok(trimmed)
}

/// Paths of the endpoints under an OpenAI-compatible root, which a base URL must not include.
const ENDPOINT_SUFFIXES: &[&str] = &[
    "/chat/completions",
    "/completions",
    "/responses",
    "/models",
    "/embeddings",
];

/// Whether the (validated) base URL is not the usual `…/v1` root: when it does not answer,
/// the hint says that most servers serve their API under `/v1`.
pub fn is_unusual_root(base_url: &str) -> bool {
    !base_url.trim_end_matches('/').ends_with("/v1")
}

/// Whether the (validated) endpoint is on this machine.
pub fn is_loopback(base_url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base_url) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The key trimmed (a key file's trailing newline is common), `None` when empty. A key that
/// cannot be an HTTP header value is refused without repeating it.
pub fn normalize_api_key(key: Option<String>) -> Result<Option<String>, RemoteConfigError> {
    let Some(key) = key.map(|k| k.trim().to_string()).filter(|k| !k.is_empty()) else {
        return Ok(None);
    };
    if key.chars().any(|c| !c.is_ascii_graphic() && c != ' ') {
        return Err(RemoteConfigError::InvalidApiKey(
            "it contains characters an HTTP header cannot carry (control or non-ASCII characters)"
                .into(),
        ));
    }
    Ok(Some(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_v1_urls_and_trims_the_slash() {
        assert_eq!(
            validate_base_url("http://127.0.0.1:8000/v1/").unwrap(),
            "http://127.0.0.1:8000/v1"
        );
        assert_eq!(
            validate_base_url("https://api.example.com/proxy/v1").unwrap(),
            "https://api.example.com/proxy/v1"
        );
    }

    #[test]
    fn any_api_root_is_accepted() {
        // Gemini's OpenAI-compatible root, a bare server, a proxy prefix.
        assert_eq!(
            validate_base_url("https://generativelanguage.googleapis.com/v1beta/openai/").unwrap(),
            "https://generativelanguage.googleapis.com/v1beta/openai"
        );
        assert_eq!(
            validate_base_url("http://127.0.0.1:8000").unwrap(),
            "http://127.0.0.1:8000"
        );
        assert!(is_unusual_root("http://127.0.0.1:8000"));
        assert!(!is_unusual_root("http://127.0.0.1:8000/v1"));
    }

    #[test]
    fn rejects_with_a_reason() {
        // The URL of the chat endpoint: the fix is its root, not one more /v1.
        let err = validate_base_url("http://127.0.0.1:8000/v1/chat/completions")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/chat/completions") && err.ends_with("e.g. http://127.0.0.1:8000/v1"),
            "{err}"
        );
        assert!(validate_base_url("localhost:8000/v1").is_err());
        assert!(
            validate_base_url("ftp://h/v1")
                .unwrap_err()
                .to_string()
                .contains("scheme")
        );
        let creds = validate_base_url("http://u:secret@h/v1")
            .unwrap_err()
            .to_string();
        assert!(creds.contains("credentials"));
        assert!(validate_base_url("http://h/v1?x=1").is_err());
        assert!(
            validate_base_url("not a url")
                .unwrap_err()
                .to_string()
                .contains("not a URL")
        );
    }

    #[test]
    fn api_keys_are_trimmed_and_checked_without_being_echoed() {
        assert_eq!(
            normalize_api_key(Some(" sk-abc\n".into()))
                .unwrap()
                .as_deref(),
            Some("sk-abc")
        );
        assert_eq!(normalize_api_key(Some("  ".into())).unwrap(), None);
        assert_eq!(normalize_api_key(None).unwrap(), None);
        let err = normalize_api_key(Some("sk-\u{1}secret".into()))
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains("secret") && err.contains("HTTP header"),
            "{err}"
        );
    }

    #[test]
    fn loopback_endpoints() {
        assert!(is_loopback("http://127.0.0.1:8000/v1"));
        assert!(is_loopback("http://localhost:8000/v1"));
        assert!(is_loopback("http://[::1]:8000/v1"));
        assert!(!is_loopback("https://api.example.com/v1"));
    }

    #[test]
    fn debug_hides_the_key() {
        let mut config = RemoteConfig::new("http://h/v1");
        config.api_key = Some("sk-very-secret".into());
        assert!(!format!("{config:?}").contains("sk-very-secret"));
    }
}
