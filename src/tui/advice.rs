//! Errors in plain words: what to try, chosen by the error's kind (never by its English text).

use crate::protocol::ErrorKind;

/// What to try after an error of `kind`. `endpoint` is the configured server (empty for the
/// local engine) and `mol_mode` whether the client routes between experts. The words live with
/// the kind (`ErrorKind::hint`) so `--exec` prints the same ones.
pub fn advice_for(kind: ErrorKind, endpoint: &str, mol_mode: bool) -> Option<String> {
    kind.hint(endpoint, mol_mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_follow_the_kind_not_the_wording() {
        let h = advice_for(ErrorKind::Unreachable, "http://127.0.0.1:8000/v1", true).expect("hint");
        assert!(h.contains("http://127.0.0.1:8000/v1"));
        let overflow = advice_for(ErrorKind::ContextOverflow, "", true).expect("hint");
        assert!(overflow.contains("/compact"));
        assert!(!overflow.contains("API key"));
        let malformed = advice_for(ErrorKind::BadResponse, "", true).expect("hint");
        assert!(malformed.contains("server's fault"));
        assert!(!malformed.contains("rate"));
        assert!(
            advice_for(ErrorKind::ModelNotFound, "", true)
                .expect("hint")
                .contains("baton doctor")
        );
        assert!(advice_for(ErrorKind::Cancelled, "", true).is_none());
        assert!(overflow.contains("/new"));
        let plain = advice_for(ErrorKind::ModelNotFound, "", false).expect("hint");
        assert!(!plain.contains("baton doctor") && plain.contains("/model"));
    }
}
