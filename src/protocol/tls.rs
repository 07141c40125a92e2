//! The process's TLS crypto provider: every HTTP client baton builds (the model backend, the
//! eval gateway, MCP over HTTP) uses rustls on ring, and rustls needs that named once.

/// Installs ring as the process's rustls provider, once; call it before building an HTTP
/// client. A provider installed already (by an embedder) serves as well.
pub fn install_tls_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
