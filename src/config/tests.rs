//! Settings layers: parsing, errors naming source and key, overlay precedence.

use super::*;

#[test]
fn values_from_any_source_parse_the_same_way() {
    let mut s = Settings::default();
    s.set("mode", "Proxy", "x", None).expect("mode");
    s.set("approval", "auto-edit", "x", None).expect("approval");
    s.set("expert", "l3", "x", None).expect("expert");
    s.set("max_turns", "7", "x", None).expect("max_turns");
    assert_eq!(s.mode, Some(Mode::Proxy));
    assert_eq!(s.approval, Some(ApprovalPolicy::AutoEdit));
    assert_eq!(s.expert, Some(Expert::L3));
    assert_eq!(s.max_turns, Some(7));
}

#[test]
fn errors_name_the_source_the_key_and_the_reason() {
    let mut s = Settings::default();
    let e = s
        .set("sandbox", "maybe", "/etc/baton.toml", None)
        .expect_err("bad value");
    let text = e.to_string();
    assert!(text.contains("/etc/baton.toml") && text.contains("sandbox") && text.contains("maybe"));
    let e = s.set("colour", "red", "f", None).expect_err("unknown key");
    assert!(e.to_string().contains("unknown key"));
    assert!(s.set("endpoint", "ftp://x", "f", None).is_err());
    assert!(s.set("api_key_env", "sk-abc-123", "f", None).is_err());
}

#[test]
fn later_layers_win_key_by_key() {
    let mut base = Settings {
        model: Some("user".into()),
        timeout: Some(5),
        ..Settings::default()
    };
    base.overlay(Settings {
        model: Some("flag".into()),
        ..Settings::default()
    });
    assert_eq!(base.model.as_deref(), Some("flag"));
    assert_eq!(base.timeout, Some(5));
}

#[test]
fn relative_paths_in_a_file_resolve_against_its_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, "profile = \"profiles/tall\"\ntimeout = 30\n").expect("write");
    let s = read_file(&path).expect("read");
    assert_eq!(s.profile, Some(dir.path().join("profiles/tall")));
    assert_eq!(s.timeout, Some(30));
}
