//! The host's network variables (certificates, proxies, package indexes) a trial inherits.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Whether a host variable configures network access (certificates, proxies, package
/// indexes): such variables reach every phase of a trial, as they do every process on the
/// host. Credentials (by name) stay out.
pub fn is_network_var(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let named = [
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "FTP_PROXY",
        "NO_PROXY",
    ];
    // `https_proxy` is as common as `HTTPS_PROXY`; `Https_Proxy` is nobody's.
    let known =
        named.contains(&upper.as_str()) && (name == upper || name == name.to_ascii_lowercase());
    (known || name.starts_with("PIP_") || name.starts_with("UV_"))
        && !crate::sandbox::env::looks_secret(name)
}

/// The host's network variables ([`is_network_var`]), from `vars`. When a proxy is set, the
/// loopback addresses (the model gateway's) are added to `NO_PROXY`/`no_proxy` so that the
/// agent never sends its model traffic to the proxy.
pub fn network_env(vars: impl Iterator<Item = (String, String)>) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = vars.filter(|(k, _)| is_network_var(k)).collect();
    let proxied = env.keys().any(|k| {
        let u = k.to_ascii_uppercase();
        u.ends_with("_PROXY") && u != "NO_PROXY"
    });
    if proxied {
        for key in ["NO_PROXY", "no_proxy"] {
            let mut list: Vec<String> = env
                .get(key)
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            for local in ["127.0.0.1", "localhost", "::1"] {
                if !list.iter().any(|l| l == local) {
                    list.push(local.to_string());
                }
            }
            env.insert(key.to_string(), list.join(","));
        }
    }
    env
}

/// Host files the network variables name (a CA bundle under a home folder): they must be
/// readable inside the sandbox. Files only: a folder named there (`SSL_CERT_DIR=~`) would
/// bring everything in it along.
pub fn network_files(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    env.iter()
        .filter(|(k, _)| {
            let u = k.to_ascii_uppercase();
            u.contains("CERT") || u.contains("CA_BUNDLE") || u.ends_with("CAINFO")
        })
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute() && p.is_file())
        .collect()
}
