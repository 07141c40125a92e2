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
    // A client certificate holds its private key (pip's `--client-cert`): a credential.
    let client_identity = upper.contains("CLIENT_CERT") || upper.contains("CLIENT_KEY");
    (known || name.starts_with("PIP_") || name.starts_with("UV_"))
        && !crate::sandbox::env::looks_secret(name)
        && !client_identity
}

/// The variables naming a CA file (certificates a client trusts, never its own identity):
/// the files a trial needs mounted.
const CA_FILE_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "PIP_CERT",
];

/// The most of a CA file read to check that it holds no private key.
const CA_FILE_MAX: u64 = 16 << 20;

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

/// Host files the CA variables name ([`CA_FILE_VARS`], a CA bundle under a home folder):
/// they must be readable inside the sandbox. Files only (a folder named there,
/// `SSL_CERT_DIR=~`, would bring everything in it along), and never one holding a private key.
pub fn network_files(env: &BTreeMap<String, String>) -> Vec<PathBuf> {
    env.iter()
        .filter(|(k, _)| CA_FILE_VARS.contains(&k.to_ascii_uppercase().as_str()))
        .map(|(_, v)| PathBuf::from(v))
        .filter(|p| p.is_absolute() && p.is_file())
        .filter(|p| {
            crate::untrusted_fs::read_following(p, CA_FILE_MAX)
                .is_ok_and(|bytes| !bytes.windows(11).any(|w| w == b"PRIVATE KEY"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Round 27 (high): `PIP_CLIENT_CERT` (pip's client certificate, private key included)
    /// entered trials and its file was mounted as a CA file.
    #[test]
    fn a_client_identity_is_neither_passed_nor_mounted() {
        assert!(!is_network_var("PIP_CLIENT_CERT"));
        assert!(!is_network_var("SSL_CLIENT_KEY"));
        assert!(is_network_var("PIP_INDEX_URL") && is_network_var("PIP_CERT"));
        let d = tempfile::tempdir().unwrap();
        let (ca, keyed) = (d.path().join("ca.pem"), d.path().join("client.pem"));
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        std::fs::write(&keyed, "-----BEGIN PRIVATE KEY-----\n").unwrap();
        let env: BTreeMap<String, String> = [
            ("SSL_CERT_FILE", &ca),
            ("PIP_CERT", &keyed),
            ("PIP_CLIENT_CERT", &ca),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.display().to_string()))
        .collect();
        assert_eq!(network_files(&env), vec![ca]);
    }
}
