//! Connections: the accept loop (HTTP/1 with a deadline on every request head, and room made
//! by closing connections that never showed a key), a body that must arrive in time and only
//! after the key was checked, and a shutdown that waits for open requests only as long as the
//! operator allows.
//!
//! `axum::serve` reads headers without a deadline and waits for every connection on shutdown,
//! so one client that sends half a request holds a socket forever and keeps SIGTERM from ever
//! finishing; hence a loop of our own over hyper.

use crate::protocol::stdio::eprintln;
use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::task::TaskTracker;

use super::auth::Keys;
use super::errors::ApiError;
use super::metrics::Metrics;

/// What the request guard needs.
#[derive(Clone)]
pub struct GuardConfig {
    pub keys: Keys,
    /// A key-less server on a loopback address answers only requests naming a loopback host:
    /// a DNS-rebinding page's `Host` is its own domain, and a same-origin `GET` carries no
    /// `Origin` to refuse it by.
    pub loopback_hosts_only: bool,
    pub max_body_bytes: usize,
    pub read_timeout: Duration,
    pub metrics: Arc<Metrics>,
}

/// The metrics label of a path: only the fixed endpoints, never what a client typed.
fn path_label(path: &str) -> Option<&'static str> {
    match path {
        "/v1/chat/completions" => Some("/v1/chat/completions"),
        "/v1/responses" => Some("/v1/responses"),
        _ => None,
    }
}

/// Checks the key before a byte of the body is read (a client without one cannot make the
/// server buffer megabytes), then reads the body whole within the read timeout (a client that
/// trickles it cannot hold a connection open).
pub async fn guard(State(cfg): State<GuardConfig>, request: Request, next: Next) -> Response {
    let label = path_label(request.uri().path());
    if request.uri().path() == "/health" {
        return next.run(request).await;
    }
    if cfg.loopback_hosts_only && !names_loopback(request.headers()) {
        return refuse(&cfg, label, not_a_loopback_host(), Duration::ZERO);
    }
    let authorization = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if cfg.keys.check(authorization).is_err() {
        return refuse(&cfg, label, super::unauthorized(), Duration::ZERO);
    }
    if let Some(connection) = request.extensions().get::<Connection>() {
        connection.proven();
    }
    // A web page's request (a browser always names its page's origin, and a DNS-rebinding
    // page is "same-origin" only to the browser): refused before anything is read, so no page
    // a user visits can drive a server on their loopback.
    if request.headers().contains_key(axum::http::header::ORIGIN) {
        return refuse(&cfg, label, from_a_web_page(), Duration::ZERO);
    }
    let declared = request
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cfg.max_body_bytes as u64) {
        return refuse(&cfg, label, super::too_large(), Duration::ZERO);
    }
    let (parts, body) = request.into_parts();
    let started = std::time::Instant::now();
    let read = read_body(body, cfg.max_body_bytes);
    let error = match tokio::time::timeout(cfg.read_timeout, read).await {
        // A body that is not declared JSON is refused: a browser sends `text/plain` and form
        // bodies cross-origin without asking first (a "simple request").
        Ok(Ok(_)) if parts.method == axum::http::Method::POST && !declared_json(&parts.headers) => {
            not_json()
        }
        Ok(Ok(bytes)) => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await;
        }
        Ok(Err(error)) => error,
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            format!(
                "the request body did not arrive within {} s",
                cfg.read_timeout.as_secs_f64()
            ),
        ),
    };
    refuse(&cfg, label, error, started.elapsed())
}

/// An error before the handler ran, counted like the handler's own.
/// Whether the request's `Content-Type` is JSON (`application/json`, any parameters).
fn declared_json(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

fn not_json() -> ApiError {
    ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "send the body as JSON with `Content-Type: application/json`",
    )
}

/// Whether the request's `Host` is a loopback name (`localhost`, `127.0.0.1`, `[::1]`, any
/// port) or absent (HTTP/1.0).
fn names_loopback(headers: &axum::http::HeaderMap) -> bool {
    let Some(host) = headers.get(axum::http::header::HOST) else {
        return true;
    };
    let Ok(host) = host.to_str() else {
        return false;
    };
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((name, "")) => (name, None),
            Some((name, after)) => match after.strip_prefix(':') {
                Some(port) => (name, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    if port.is_some_and(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn not_a_loopback_host() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "host_not_allowed",
        "a server without API keys answers only requests to localhost, 127.0.0.1 or [::1] \
         (a web page reaching it by another name is refused); behind a proxy that passes \
         another Host, give the server a key",
    )
}

fn from_a_web_page() -> ApiError {
    ApiError::new(
        StatusCode::FORBIDDEN,
        "cross_origin_request",
        "requests from web pages (with an Origin header) are refused: baton serve is an API \
         for programs, not browsers",
    )
}

fn refuse(cfg: &GuardConfig, label: Option<&str>, error: ApiError, took: Duration) -> Response {
    if let Some(path) = label {
        cfg.metrics.request(path, error.status.as_u16(), took);
    }
    let mut response = error.into_response();
    // What is left of the body is never read: the connection cannot carry another request.
    response.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    response
}

/// The whole body, refused once it grows past `limit` bytes.
async fn read_body(body: Body, limit: usize) -> Result<Vec<u8>, ApiError> {
    let mut frames = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(frame) = frames.next().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request("invalid_body", format!("reading the body: {e}")))?;
        if bytes.len().saturating_add(frame.len()) > limit {
            return Err(super::too_large());
        }
        bytes.extend_from_slice(&frame);
    }
    Ok(bytes)
}

/// Whether an accept error concerns one connection (the next accept may well succeed).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// The connections that have not yet sent a request with a valid key, oldest first. A server
/// out of descriptors closes some of them to take new connections: otherwise anyone who can
/// reach the port locks every client out by opening connections and sending nothing. They are
/// taken from the address holding the most, oldest first, so a flood from one address closes
/// its own connections rather than a client's that is still sending its request.
#[derive(Default)]
struct Unproven {
    next_id: AtomicU64,
    waiting: Mutex<VecDeque<Waiting>>,
}

struct Waiting {
    id: u64,
    peer: std::net::IpAddr,
    evict: Arc<tokio::sync::Notify>,
}

/// Connections closed per accept that failed for want of descriptors.
const EVICTED_AT_ONCE: usize = 16;

impl Unproven {
    /// A new connection from `peer`, unproven until its first request with a valid key.
    fn enter(self: &Arc<Self>, peer: std::net::IpAddr) -> (Connection, Arc<tokio::sync::Notify>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(tokio::sync::Notify::new());
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.push_back(Waiting {
                id,
                peer,
                evict: evict.clone(),
            });
        }
        let connection = Connection {
            id,
            unproven: self.clone(),
        };
        (connection, evict)
    }

    fn leave(&self, id: u64) {
        if let Ok(mut waiting) = self.waiting.lock() {
            waiting.retain(|w| w.id != id);
        }
    }

    /// Closes up to `n` unproven connections, each the oldest of the address that holds the
    /// most; how many it closed.
    fn evict(&self, n: usize) -> usize {
        let Ok(mut waiting) = self.waiting.lock() else {
            return 0;
        };
        let mut per_peer: std::collections::HashMap<std::net::IpAddr, usize> =
            std::collections::HashMap::new();
        for w in waiting.iter() {
            *per_peer.entry(w.peer).or_default() += 1;
        }
        let mut closed = 0;
        while closed < n {
            let Some((&busiest, _)) = per_peer.iter().max_by_key(|(_, count)| **count) else {
                break;
            };
            let Some(w) = waiting
                .iter()
                .position(|w| w.peer == busiest)
                .and_then(|at| waiting.remove(at))
            else {
                break;
            };
            // A stored permit: the connection's task sees it even if it is not waiting yet.
            w.evict.notify_one();
            closed += 1;
            match per_peer.get_mut(&busiest) {
                Some(count) if *count > 1 => *count -= 1,
                _ => {
                    per_peer.remove(&busiest);
                }
            }
        }
        closed
    }
}

/// One connection, as a request's extension: the guard marks it proven once a request shows
/// a valid key.
#[derive(Clone)]
struct Connection {
    id: u64,
    unproven: Arc<Unproven>,
}

impl Connection {
    fn proven(&self) {
        self.unproven.leave(self.id);
    }

    fn closed(&self) {
        self.unproven.leave(self.id);
    }
}

/// Serves `app` until `shutdown` resolves; then stops accepting, lets open requests finish
/// for at most `drain`, and returns how many connections it had to close.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> usize {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(());
    let open = TaskTracker::new();
    let unproven = Arc::new(Unproven::default());
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok((stream, peer)) => (stream, peer.ip()),
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of descriptors, most likely: make room by closing connections that never
                // showed a key; else wait for connections to close rather than spin.
                let closed = unproven.evict(EVICTED_AT_ONCE);
                if closed == 0 {
                    eprintln!("baton serve: accepting a connection failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(if closed > 0 { 5 } else { 200 })).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (connection, evict) = unproven.enter(peer);
        let app = TowerToHyperService::new(app.clone());
        let mark = connection.clone();
        let service = hyper::service::service_fn(move |mut request: Request<_>| {
            request.extensions_mut().insert(mark.clone());
            hyper::service::Service::call(&app, request)
        });
        let mut stop = stop_rx.clone();
        open.spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(read_timeout);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
                // Dropping the connection closes its socket.
                () = evict.notified() => {}
            }
            connection.closed();
        });
    }
    drop(listener);
    drop(stop_tx);
    open.close();
    match tokio::time::timeout(drain, open.wait()).await {
        Ok(()) => 0,
        Err(_) => open.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_hosts_with_numeric_ports_name_loopback() {
        let named = |host: &str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert(axum::http::header::HOST, host.parse().unwrap());
            names_loopback(&headers)
        };
        for good in [
            "localhost",
            "LOCALHOST:8200",
            "127.0.0.1:1",
            "127.9.9.9",
            "[::1]",
            "[::1]:80",
        ] {
            assert!(named(good), "{good}");
        }
        for bad in [
            "evil.example:8200",
            "localhost:1@evil.com",
            "localhost:",
            "[::1]junk",
            "[::1",
            "10.0.0.1:80",
            "localhost.evil.example",
        ] {
            assert!(!named(bad), "{bad}");
        }
        assert!(names_loopback(&axum::http::HeaderMap::new()));
    }
}
