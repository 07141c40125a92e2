//! Who may use the server: bearer API keys read from a file or the environment, compared in
//! constant time, and the rule that a server reachable from other machines has keys unless
//! its operator said otherwise.

use std::net::SocketAddr;
use std::path::Path;

use sha2::{Digest, Sha256};

/// The environment variable of comma-separated client keys.
pub const KEYS_ENV: &str = "BATON_SERVE_API_KEYS";

/// The accepted keys, kept as digests: equal-length values compare in constant time, and the
/// keys themselves are not held in memory longer than loading takes.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    digests: Vec<[u8; 32]>,
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Constant-time equality of two digests.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Keys {
    /// Keys from `file` (one a line; blank lines and `#` comments skipped) and from
    /// `env_value` (comma-separated).
    pub fn load(file: Option<&Path>, env_value: Option<&str>) -> Result<Keys, String> {
        let mut keys: Vec<String> = Vec::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("--api-keys-file {}: {e}", path.display()))?;
            let before = keys.len();
            keys.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string),
            );
            if keys.len() == before {
                return Err(format!(
                    "--api-keys-file {}: no key in the file",
                    path.display()
                ));
            }
        }
        if let Some(value) = env_value {
            let before = keys.len();
            keys.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(str::to_string),
            );
            if keys.len() == before {
                // Set but empty (`KEYS="$UNSET"`): serving without keys is not what was meant.
                return Err(format!("{KEYS_ENV} is set but holds no key"));
            }
        }
        if keys.iter().any(|k| k.chars().any(char::is_whitespace)) {
            return Err("an API key contains whitespace".into());
        }
        Ok(Keys {
            digests: keys.iter().map(|k| digest(k)).collect(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    pub fn len(&self) -> usize {
        self.digests.len()
    }

    /// Checks an `Authorization` header value. `Ok(client)` is an opaque id of the caller
    /// (conversations found from history stay within it); no keys configured lets everyone
    /// in as one client.
    pub fn check(&self, authorization: Option<&str>) -> Result<String, Unauthorized> {
        if self.digests.is_empty() {
            return Ok("anonymous".into());
        }
        // The scheme is case-insensitive (RFC 7235); the key is not.
        let presented = authorization
            .filter(|v| {
                v.len() > 7 && v.is_char_boundary(7) && v[..7].eq_ignore_ascii_case("bearer ")
            })
            .map(|v| v[7..].trim())
            .ok_or(Unauthorized)?;
        let d = digest(presented);
        // Every key is compared, so the time taken does not say which one matched.
        let matched = self
            .digests
            .iter()
            .fold(false, |found, k| found | same(k, &d));
        if matched {
            Ok(d.iter().take(8).map(|b| format!("{b:02x}")).collect())
        } else {
            Err(Unauthorized)
        }
    }
}

/// A request without an accepted key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unauthorized;

/// Refuses a listen address other machines can reach without keys, unless allowed.
pub fn check_exposure(
    addr: SocketAddr,
    keys: &Keys,
    allow_unauthenticated: bool,
) -> Result<(), String> {
    if keys.is_empty() && !addr.ip().is_loopback() && !allow_unauthenticated {
        return Err(format!(
            "refusing to listen on {addr} without API keys: anyone who can reach it could use \
             the model. Give keys with --api-keys-file FILE or {KEYS_ENV}, listen on 127.0.0.1, \
             or pass --allow-unauthenticated"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_exactly_and_name_the_client() {
        let keys = Keys::load(None, Some("alpha, beta")).unwrap();
        assert_eq!(keys.len(), 2);
        let a = keys.check(Some("Bearer alpha")).unwrap();
        let b = keys.check(Some("Bearer beta")).unwrap();
        assert_ne!(a, b);
        assert!(keys.check(Some("Bearer alph")).is_err());
        assert!(keys.check(Some("alpha")).is_err());
        assert!(keys.check(Some("bearer alpha")).is_ok());
        assert!(keys.check(Some("Bearer ALPHA")).is_err());
        assert!(keys.check(Some("Bearerékey")).is_err());
        assert!(keys.check(None).is_err());
        assert!(Keys::default().check(None).is_ok());
    }

    #[test]
    fn an_exposed_address_needs_keys_or_consent() {
        let open: SocketAddr = "0.0.0.0:30000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:30000".parse().unwrap();
        assert!(check_exposure(open, &Keys::default(), false).is_err());
        assert!(check_exposure(open, &Keys::default(), true).is_ok());
        assert!(check_exposure(local, &Keys::default(), false).is_ok());
        let keys = Keys::load(None, Some("k")).unwrap();
        assert!(check_exposure(open, &keys, false).is_ok());
    }

    #[test]
    fn a_key_file_skips_comments_and_must_hold_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, "# ops\n\nsecret-1\n").unwrap();
        let keys = Keys::load(Some(&path), None).unwrap();
        assert!(keys.check(Some("Bearer secret-1")).is_ok());
        std::fs::write(&path, "# nothing\n").unwrap();
        assert!(Keys::load(Some(&path), None).is_err());
    }

    #[test]
    fn a_keys_variable_that_is_set_but_empty_is_an_error_not_an_open_server() {
        for value in ["", " ", ",", " , ,"] {
            let e = Keys::load(None, Some(value)).unwrap_err();
            assert!(e.contains(KEYS_ENV), "{e}");
        }
        assert!(Keys::load(None, None).unwrap().is_empty());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys");
        std::fs::write(&path, "from-file\r\n").unwrap();
        assert!(Keys::load(Some(&path), Some(",")).is_err());
        let keys = Keys::load(Some(&path), None).unwrap();
        assert!(keys.check(Some("Bearer from-file")).is_ok(), "CRLF trimmed");
    }
}
