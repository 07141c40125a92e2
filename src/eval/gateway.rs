//! The model gateway of a `baton` agent trial: an HTTP proxy run by the runner on the host side
//! that forwards the agent's requests to the real endpoint and adds the API key there, so the
//! key never exists inside the trial. With the trial in its own network namespace, the
//! gateway's listening socket is created inside that namespace (between fork and exec of bwrap)
//! and handed back to the runner over a unix socket pair; the trial reaches nothing else.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The port the gateway listens on inside a trial's private network namespace (nothing else
/// lives there, so a fixed port cannot collide).
pub const TRIAL_PORT: u16 = 18080;

/// The largest request head and body the gateway forwards.
const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Requests the gateway serves at once (an agent makes one or two).
const MAX_CONNECTIONS: usize = 16;

/// Why the gateway could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the model endpoint '{0}' is not an http(s) URL")]
    BadEndpoint(String),
    #[error("cannot set up the model gateway: {0}")]
    Io(#[from] io::Error),
}

/// Where the real endpoint is and what the trial's agent uses instead.
#[derive(Debug)]
struct Upstream {
    /// `scheme://host:port`.
    origin: String,
    /// The endpoint's path without a trailing slash (`/v1`), which every request must start with.
    base_path: String,
    key: Option<String>,
    /// A listener on the host's loopback can be reached by every local user: it answers only
    /// requests whose path starts with `/` and this secret (the agent's URL holds it, and the
    /// agent gets that URL in its environment, which only its own user may read).
    secret: Option<String>,
}

/// A running gateway for one agent phase. Dropping it stops the proxy.
#[derive(Debug)]
pub struct Gateway {
    upstream: Arc<Upstream>,
    /// The URL the agent inside the trial is given.
    trial_url: String,
    /// The end a trial's setup sends its listening socket through (isolated namespace only).
    child_end: Option<UnixStream>,
    waker: Option<UnixStream>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Starts a gateway to `endpoint` that adds `key`. With `host_network`, it listens on the
    /// host's loopback (the trial shares the host network); otherwise it waits for the listening
    /// socket that [`NetnsSetup`] creates inside the trial's own network namespace.
    pub fn start(
        endpoint: &str,
        key: Option<String>,
        host_network: bool,
    ) -> Result<Gateway, GatewayError> {
        let url = reqwest::Url::parse(endpoint)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| GatewayError::BadEndpoint(endpoint.to_string()))?;
        let base_path = url.path().trim_end_matches('/').to_string();
        let secret = host_network.then(|| uuid::Uuid::new_v4().simple().to_string());
        let upstream = Arc::new(Upstream {
            origin: url.origin().ascii_serialization(),
            base_path,
            key,
            secret,
        });
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let (source, child_end, waker, port) = if host_network {
            let listener = TcpListener::bind(("127.0.0.1", 0))?;
            let port = listener.local_addr()?.port();
            (ListenerSource::Ready(listener), None, None, port)
        } else {
            let (parent, child) = UnixStream::pair()?;
            let waker = parent.try_clone()?;
            (
                ListenerSource::Handoff(parent),
                Some(child),
                Some(waker),
                TRIAL_PORT,
            )
        };
        let secret_prefix = upstream
            .secret
            .as_ref()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        let trial_url = format!(
            "http://127.0.0.1:{port}{secret_prefix}{}",
            upstream.base_path
        );
        let up = upstream.clone();
        let thread = std::thread::Builder::new()
            .name("eval-gateway".into())
            .spawn(move || serve(source, up, stop_rx))?;
        Ok(Gateway {
            upstream,
            trial_url,
            child_end,
            waker,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// The endpoint URL the agent inside the trial must use.
    pub fn trial_url(&self) -> &str {
        &self.trial_url
    }

    /// What the child of bwrap must do before exec so that the trial's own network namespace
    /// holds the gateway's listener; `None` when the gateway listens on the host.
    pub fn netns_setup(&self) -> Option<NetnsSetup> {
        let child = self.child_end.as_ref()?;
        let uid = rustix::process::getuid().as_raw();
        let gid = rustix::process::getgid().as_raw();
        Some(NetnsSetup {
            send_fd: child.as_raw_fd(),
            root: uid == 0,
            uid_map: format!("{uid} {uid} 1").into_bytes(),
            gid_map: format!("{gid} {gid} 1").into_bytes(),
        })
    }

    /// Puts the gateway's listener into a network namespace that exists already (a container's,
    /// `netns` its `/proc/PID/ns/net`): a thread of its own joins it, binds there and hands
    /// the socket over, so no process of the trial ever holds it. Needs the privilege to join
    /// that namespace (root, for a rootful container runtime).
    pub fn listen_in(&self, netns: std::fs::File) -> io::Result<()> {
        let Some(child) = self.child_end.as_ref() else {
            return Err(io::Error::other("the gateway listens on the host"));
        };
        let send = child.try_clone()?;
        let joined = std::thread::Builder::new()
            .name("eval-gateway-netns".into())
            .spawn(move || -> io::Result<()> {
                // Only this thread changes namespace; it ends right after.
                nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .map_err(io::Error::from)?;
                let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, TRIAL_PORT))?;
                send_fd(&send, &listener)
            })?
            .join();
        joined.unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
    }

    /// Whether requests go to the host named in the endpoint, for messages.
    pub fn upstream_origin(&self) -> &str {
        &self.upstream.origin
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        // A trial that never started leaves the serving thread waiting for its socket.
        self.child_end = None;
        if let Some(w) = self.waker.take() {
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

enum ListenerSource {
    Ready(TcpListener),
    Handoff(UnixStream),
}

fn serve(
    source: ListenerSource,
    upstream: Arc<Upstream>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let (first, handoff) = match source {
        ListenerSource::Ready(l) => (l, None),
        ListenerSource::Handoff(parent) => match receive_fd(&parent) {
            Ok(Some(fd)) => (TcpListener::from(fd), Some(parent)),
            _ => return,
        },
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(async move {
        let Some(mut listener) = async_listener(first) else {
            return;
        };
        let mut handoff = handoff.and_then(|p| {
            p.set_nonblocking(true).ok()?;
            tokio::net::UnixStream::from_std(p).ok()
        });
        crate::protocol::install_tls_provider();
        // A redirect is relayed to the agent, never followed with the trial's request body.
        let Ok(client) = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(std::time::Duration::from_secs(30))
            .build()
        else {
            return;
        };
        // Bounds what a trial can make the runner hold: requests in flight, each at most
        // MAX_HEAD + MAX_BODY bytes.
        let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let accept = async {
            loop {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    // A sandbox started again (its first start lost a host socket's cover)
                    // is a new network namespace: its agent reaches the newest listener.
                    newer = next_listener(&mut handoff) => {
                        listener = newer;
                        continue;
                    }
                };
                let Ok((sock, _)) = accepted else {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let client = client.clone();
                let up = upstream.clone();
                tokio::spawn(async move {
                    let _ = forward(sock, &client, &up).await;
                    drop(permit);
                });
            }
        };
        tokio::select! {
            _ = stop => {}
            _ = accept => {}
        }
    });
}

fn async_listener(l: TcpListener) -> Option<tokio::net::TcpListener> {
    l.set_nonblocking(true).ok()?;
    tokio::net::TcpListener::from_std(l).ok()
}

/// The next listener a restarted trial sends; never resolves once the runner's end is closed.
async fn next_listener(handoff: &mut Option<tokio::net::UnixStream>) -> tokio::net::TcpListener {
    if let Some(h) = handoff.as_ref() {
        loop {
            if h.readable().await.is_err() {
                break;
            }
            let got = h.try_io(tokio::io::Interest::READABLE, || receive_fd(h));
            match got {
                Ok(Some(l)) => match async_listener(TcpListener::from(l)) {
                    Some(l) => return l,
                    None => continue,
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                _ => break,
            }
        }
    }
    *handoff = None;
    std::future::pending().await
}

/// Whether a trial's request header is kept off the upstream request. The user's key goes with
/// every request, so only what a model call needs passes: the body's type and encoding, what
/// the client accepts, its user agent, and the conversation and idempotency headers OpenAI
/// clients and MoL routers use. Everything else is dropped: hop-by-hop headers, the client's
/// own host and credentials, and headers that would steer the upstream on the user's account
/// (`x-http-method-override`, `x-forwarded-host`, `openai-organization`, found by the attack
/// round after #27).
fn dropped_request_header(name: &str) -> bool {
    !matches!(
        name.to_ascii_lowercase().as_str(),
        "content-type"
            | "content-encoding"
            | "accept"
            | "accept-encoding"
            | "user-agent"
            | "x-conversation-id"
            | "x-request-id"
            | "idempotency-key"
    )
}

fn dropped_response_header(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "connection" | "keep-alive" | "content-length" | "transfer-encoding" | "trailer"
    )
}

/// One request per connection: read it, send it upstream with the key, stream the answer back
/// with `Connection: close`.
async fn forward(
    mut sock: tokio::net::TcpStream,
    client: &reqwest::Client,
    up: &Upstream,
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return reply(&mut sock, 431, "request head too large").await;
        }
        let mut chunk = [0u8; 8192];
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap_or_default().split(' ');
    let (method, target) = (
        request_line.next().unwrap_or_default(),
        request_line.next().unwrap_or_default(),
    );
    // Only paths of the configured endpoint, judged after `..` and `%2e` are resolved: the
    // gateway is no open proxy to other hosts or to the rest of the endpoint's server.
    // A listener on the host's loopback: only the agent knows the path.
    let target = match &up.secret {
        Some(secret) => match target
            .strip_prefix('/')
            .and_then(|t| t.strip_prefix(secret.as_str()))
            .filter(|rest| rest.starts_with('/'))
        {
            Some(rest) => rest,
            None => return reply(&mut sock, 404, "not found").await,
        },
        None => target,
    };
    let Some(url) = forward_url(up, target) else {
        return reply(
            &mut sock,
            403,
            "the gateway forwards only the model endpoint",
        )
        .await;
    };
    // The key is the user's for the whole provider API: the agent gets the model calls only,
    // not files, batches, fine-tuning or a server's adapter loading.
    if !model_call(up, method, &url) {
        return reply(
            &mut sock,
            403,
            "the gateway forwards only GET /models, POST /chat/completions and POST /responses",
        )
        .await;
    }
    let Ok(method) = reqwest::Method::from_bytes(method.as_bytes()) else {
        return reply(&mut sock, 400, "bad method").await;
    };
    let mut headers = reqwest::header::HeaderMap::new();
    let mut content_length = 0usize;
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else {
            return reply(&mut sock, 400, "bad header").await;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return reply(&mut sock, 411, "send a Content-Length").await;
        }
        if name.eq_ignore_ascii_case("content-length") {
            content_length = match value.parse() {
                Ok(n) if n <= MAX_BODY => n,
                _ => return reply(&mut sock, 413, "body too large").await,
            };
        }
        if dropped_request_header(name) {
            continue;
        }
        if let (Ok(n), Ok(v)) = (
            reqwest::header::HeaderName::from_bytes(name.as_bytes()),
            reqwest::header::HeaderValue::from_str(value),
        ) {
            headers.append(n, v);
        }
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < content_length {
        let mut chunk = vec![0u8; (content_length - body.len()).min(64 * 1024)];
        let n = sock.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(content_length);
    let mut req = client.request(method, url).headers(headers).body(body);
    if let Some(key) = &up.key {
        req = req.bearer_auth(key);
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(_) => return reply(&mut sock, 502, "the model endpoint is unreachable").await,
    };
    let status = resp.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (name, value) in resp.headers() {
        if dropped_response_header(name.as_str()) {
            continue;
        }
        if let Ok(v) = value.to_str() {
            out.push_str(&format!("{}: {v}\r\n", name.as_str()));
        }
    }
    out.push_str("connection: close\r\n\r\n");
    sock.write_all(out.as_bytes()).await?;
    let mut resp = resp;
    while let Ok(Some(chunk)) = resp.chunk().await {
        sock.write_all(&chunk).await?;
    }
    sock.shutdown().await
}

/// The upstream URL for a request target, when it stays on the endpoint's origin and path.
fn forward_url(up: &Upstream, target: &str) -> Option<reqwest::Url> {
    if !target.starts_with('/') || target.starts_with("//") {
        return None;
    }
    let url = reqwest::Url::parse(&format!("{}{}", up.origin, target)).ok()?;
    let path = url.path();
    let inside = up.base_path.is_empty()
        || path == up.base_path
        || path
            .strip_prefix(up.base_path.as_str())
            .is_some_and(|rest| rest.starts_with('/'));
    let lowered = path.to_ascii_lowercase();
    (inside
        && url.origin().ascii_serialization() == up.origin
        && !lowered.contains("%2e")
        && !lowered.contains("%2f"))
    .then_some(url)
}

/// Whether `method` on `url` (already inside the endpoint, [`forward_url`]) is one of the calls
/// a coding agent makes: the model list, chat completions, responses.
fn model_call(up: &Upstream, method: &str, url: &reqwest::Url) -> bool {
    let rest = url
        .path()
        .strip_prefix(up.base_path.as_str())
        .unwrap_or_default();
    matches!(
        (method, rest.trim_end_matches('/')),
        ("GET", "/models") | ("POST", "/chat/completions") | ("POST", "/responses")
    )
}

async fn reply(sock: &mut tokio::net::TcpStream, status: u16, text: &str) -> io::Result<()> {
    let msg = format!(
        "HTTP/1.1 {status} gateway\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    sock.write_all(msg.as_bytes()).await?;
    sock.shutdown().await
}

/// Runs in the forked child before bwrap is executed: a new network namespace (and, for a user
/// without privileges, the user namespace that lets it create one) whose loopback is up and
/// holds the gateway's listener, sent back to the runner. Only async-signal-safe calls: every
/// buffer was made before the fork.
#[derive(Debug, Clone)]
pub struct NetnsSetup {
    send_fd: RawFd,
    root: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl NetnsSetup {
    /// # Safety
    /// Call only in a freshly forked child (it changes the calling process's namespaces).
    pub unsafe fn run(&self) -> io::Result<()> {
        use rustix::net::{AddressFamily, SocketFlags, SocketType};
        use rustix::thread::UnshareFlags;
        let flags = if self.root {
            UnshareFlags::NEWNET
        } else {
            UnshareFlags::NEWUSER | UnshareFlags::NEWNET
        };
        // SAFETY: no FILES flag: the descriptor table stays the one this process has.
        unsafe { rustix::thread::unshare_unsafe(flags) }?;
        if !self.root {
            // baton is not dumpable (its environment holds the API key), which makes
            // /proc/self/* root's: only a dumpable process may write its maps. This
            // child's copy of baton's memory is gone at its exec.
            rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable)?;
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", &self.uid_map)?;
            write_file(c"/proc/self/gid_map", &self.gid_map)?;
        }
        loopback_up()?;
        let l = rustix::net::socket_with(
            AddressFamily::INET,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let addr = std::net::SocketAddrV4::new(std::net::Ipv4Addr::LOCALHOST, TRIAL_PORT);
        rustix::net::bind(&l, &addr)?;
        rustix::net::listen(&l, 64)?;
        // SAFETY: the runner's end of the socket pair, open in this child (it is closed only
        // when the gateway is dropped, in the runner).
        let sock = unsafe { BorrowedFd::borrow_raw(self.send_fd) };
        send_fd(sock, &l)
    }
}

/// Writes `data` to the file at `path` in one write(2); no allocation (it runs between fork
/// and exec).
fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::open(path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())?;
    let n = rustix::io::write(&fd, data)?;
    if n != data.len() {
        // A short write of a map: the kernel took only part of it.
        return Err(io::Error::from(rustix::io::Errno::IO));
    }
    Ok(())
}

fn loopback_up() -> io::Result<()> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let s = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: an ifreq on the stack, passed to the two interface-flag ioctls on a socket we
    // own (rustix has no wrapper for the interface flags).
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        req.ifr_name[0] = b'l' as libc::c_char;
        req.ifr_name[1] = b'o' as libc::c_char;
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) < 0 {
            return Err(io::Error::last_os_error());
        }
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &req) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Sends `fd` over the Unix socket `sock` (SCM_RIGHTS, one byte of data). Everything is on the
/// stack: it runs between fork and exec.
fn send_fd(sock: impl AsFd, fd: impl AsFd) -> io::Result<()> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let fds = [fd.as_fd()];
    if !control.push(SendAncillaryMessage::ScmRights(&fds)) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let byte = [0u8; 1];
    rustix::net::sendmsg(
        sock,
        &[io::IoSlice::new(&byte)],
        &mut control,
        SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Receives a listener the trial's setup sends: `Ok(None)` when the trial's end is closed
/// (it never started, or the gateway stops).
fn receive_fd(sock: &impl AsFd) -> io::Result<Option<OwnedFd>> {
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut byte = [0u8; 1];
    let mut space = [std::mem::MaybeUninit::uninit(); 64];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = rustix::net::recvmsg(
        sock,
        &mut [io::IoSliceMut::new(&mut byte)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )?;
    if got.bytes == 0 {
        return Ok(None);
    }
    // The first control message, if it carries descriptors: its first one (any other is
    // closed when the buffer is dropped).
    let first = control.drain().next();
    Ok(match first {
        Some(RecvAncillaryMessage::ScmRights(mut fds)) => fds.next(),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_endpoint_path_is_forwarded_and_credentials_are_replaced() {
        assert!(dropped_request_header("Authorization"));
        assert!(dropped_request_header("host"));
        assert!(!dropped_request_header("content-type"));
        assert!(!dropped_request_header("X-Conversation-Id"));
        for steering in [
            "x-http-method-override",
            "x-forwarded-host",
            "openai-organization",
            "openai-project",
            "cookie",
        ] {
            assert!(dropped_request_header(steering), "{steering}");
        }
        assert!(matches!(
            Gateway::start("unix:/x", None, true),
            Err(GatewayError::BadEndpoint(_))
        ));
        let g = Gateway::start("http://127.0.0.1:9/v1/", Some("k".into()), true).unwrap();
        assert!(g.trial_url().starts_with("http://127.0.0.1:"));
        assert!(g.trial_url().ends_with("/v1"));
        assert!(g.netns_setup().is_none());
        let up = Upstream {
            origin: "http://127.0.0.1:9".into(),
            base_path: "/v1".into(),
            key: None,
            secret: None,
        };
        let ok = |t: &str| forward_url(&up, t).map(|u| u.to_string());
        assert_eq!(
            ok("/v1/chat/completions?x=1").as_deref(),
            Some("http://127.0.0.1:9/v1/chat/completions?x=1")
        );
        assert!(ok("/v1").is_some());
        let call = |m: &str, t: &str| forward_url(&up, t).is_some_and(|u| model_call(&up, m, &u));
        assert!(call("POST", "/v1/chat/completions"));
        assert!(call("POST", "/v1/responses"));
        assert!(call("GET", "/v1/models"));
        for (m, t) in [
            ("DELETE", "/v1/files/file-abc"),
            ("GET", "/v1/files/file-abc"),
            ("PUT", "/v1/files/file-abc"),
            ("POST", "/v1/load_lora_adapter"),
            ("POST", "/v1/fine_tuning/jobs"),
            ("GET", "/v1/chat/completions"),
            ("POST", "/v1/models"),
            ("POST", "/v1"),
        ] {
            assert!(!call(m, t), "{m} {t}");
        }
        for bad in [
            "/v1/../admin",
            "/v1/%2e%2e/admin",
            "/v1x",
            "/admin",
            "//evil.example/v1",
            "http://evil.example/v1",
            "/v1/..%2fadmin",
        ] {
            assert_eq!(ok(bad), None, "{bad}");
        }
    }

    /// An upstream that answers 307 to another origin gets its redirect relayed to the agent:
    /// the trial's request (its whole prompt) is never sent to the origin named.
    #[test]
    fn an_upstream_redirect_is_relayed_not_followed() {
        use std::io::{Read, Write};
        let elsewhere = TcpListener::bind("127.0.0.1:0").unwrap();
        elsewhere.set_nonblocking(true).unwrap();
        let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
        let location = format!(
            "http://{}/v1/chat/completions",
            elsewhere.local_addr().unwrap()
        );
        let up_addr = upstream.local_addr().unwrap();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = upstream.accept() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                );
            }
        });
        let g = Gateway::start(&format!("http://{up_addr}/v1"), None, true).unwrap();
        let url = reqwest::Url::parse(g.trial_url()).unwrap();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", url.port().unwrap())).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let body = r#"{"model":"L2","messages":[{"role":"user","content":"secret prompt"}]}"#;
        write!(
            c,
            "POST {}/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            url.path(),
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 307"), "{answer:?}");
        assert!(
            elsewhere.accept().is_err(),
            "the request was sent to the origin the redirect named"
        );
    }

    /// A trial's sandbox started a second time sends a second listener (a new network
    /// namespace): the gateway serves the newest, or the agent's requests wait unanswered.
    #[test]
    fn the_newest_listener_a_restarted_trial_sends_is_served() {
        use std::io::{Read, Write};
        let g = Gateway::start("http://127.0.0.1:9/v1", None, false).unwrap();
        let setup = g.netns_setup().unwrap();
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let second = TcpListener::bind("127.0.0.1:0").unwrap();
        for l in [&first, &second] {
            // SAFETY: the runner's end of the socket pair, open while `g` lives.
            let sock = unsafe { BorrowedFd::borrow_raw(setup.send_fd) };
            send_fd(sock, l).unwrap();
        }
        let mut c = std::net::TcpStream::connect(second.local_addr().unwrap()).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        c.write_all(b"GET /admin HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer:?}");
    }

    /// A gateway on the host's loopback answers only the path its agent was given: another
    /// local user who finds the port gets a 404, never the key's upstream.
    #[test]
    fn a_host_loopback_gateway_answers_only_its_agents_secret_path() {
        use std::io::{Read, Write};
        let g = Gateway::start("http://127.0.0.1:9/v1", Some("k".into()), true).unwrap();
        let url = reqwest::Url::parse(g.trial_url()).unwrap();
        let port = url.port().unwrap();
        let secret_path = url.path().to_string();
        assert!(secret_path.len() > "/v1".len() + 16, "{secret_path}");
        let status = |path: &str| {
            let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(sock, "GET {path}/models HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
            let mut answer = String::new();
            let _ = sock.read_to_string(&mut answer);
            answer.lines().next().unwrap_or_default().to_string()
        };
        assert!(
            status("/v1").starts_with("HTTP/1.1 404"),
            "{}",
            status("/v1")
        );
        // The agent's path reaches the upstream (unreachable here: 502).
        let agents = status(&secret_path);
        assert!(agents.starts_with("HTTP/1.1 502"), "{agents}");
    }
}
