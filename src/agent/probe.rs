//! What the person waiting hears of the endpoint outside a turn's own events: every retry of a
//! failed request (as a warning, the moment it is scheduled), and — for an interactive
//! session — a background check at start, so a dead endpoint is reported before the first
//! turn is typed rather than after it.

use std::sync::Arc;
use std::time::Duration;

use super::Shared;
use crate::backend::{BackendError, RetryNotice};
use crate::protocol::{Event, EventSink};

/// How long the start-up check waits for the model list. A slow answer is not an error; the
/// check then stays quiet and the first turn finds out.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Reports the backend's retries as `warning` events on `events`.
pub(crate) fn report_retries(shared: &Shared, events: EventSink) {
    shared
        .backend
        .observe_retries(Arc::new(move |notice: &RetryNotice| {
            events.emit(Event::Warning {
                message: notice.message(),
            });
        }));
}

/// Asks for the model list in the background and warns when the answer says turns will fail:
/// the server cannot be reached, or it refuses the credentials. Other failures (a server
/// without `/models`, a 500 there) say nothing about chat requests, so they stay quiet.
pub(crate) fn spawn_startup_probe(shared: &Arc<Shared>) {
    let shared = shared.clone();
    tokio::spawn(async move {
        let Ok(Err(error)) =
            tokio::time::timeout(PROBE_TIMEOUT, super::context::model_list(&shared)).await
        else {
            return;
        };
        if let Some(message) = startup_warning(&error) {
            shared.events.emit(Event::Warning { message });
        }
    });
}

/// The warning for a failed start-up check, `None` when the failure does not doom turns.
fn startup_warning(error: &BackendError) -> Option<String> {
    match error {
        BackendError::Connect { url, message, .. } => Some(format!(
            "the model server is unreachable: cannot connect to {url}: {message}. Is it running, \
             and is the endpoint right? Turns will fail until it answers."
        )),
        BackendError::Http { url, status, .. } if matches!(status, 401 | 403) => Some(format!(
            "{url} refused the credentials (HTTP {status}): check the API key before the first turn."
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Hop;

    #[test]
    fn only_failures_that_doom_turns_warn() {
        let connect = BackendError::Connect {
            hop: Hop::Answer,
            url: "http://127.0.0.1:9/v1/models".into(),
            message: "Connection refused".into(),
        };
        let text = startup_warning(&connect).expect("a dead endpoint warns");
        assert!(
            text.contains("unreachable") && text.contains("127.0.0.1:9"),
            "{text}"
        );
        assert!(!text.contains("answer hop"), "the check is no hop: {text}");
        let http = |status| BackendError::Http {
            hop: Hop::Answer,
            url: "http://h/v1/models".into(),
            status,
            body: "x".into(),
        };
        assert!(startup_warning(&http(401)).is_some_and(|t| t.contains("API key")));
        assert!(startup_warning(&http(500)).is_none());
        assert!(startup_warning(&http(404)).is_none());
    }
}
