//! Settings layers: parsing, errors naming source and key, overlay precedence.

use super::*;
use defs::Kind;

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

#[test]
fn speculate_takes_one_of_its_names_and_lists_them_otherwise() {
    let mut s = Settings::default();
    s.set("speculate", "Sticky", "f", None).expect("sticky");
    assert_eq!(s.speculate, Some(crate::protocol::Speculate::Sticky));
    let e = s
        .set("speculate", "sometimes", "env BATON_SPECULATE", None)
        .expect_err("not a name");
    let text = e.to_string();
    assert!(
        text.contains("speculate") && text.contains("off, sticky, always"),
        "{text}"
    );
}

#[test]
fn compact_at_takes_a_fraction_or_a_percentage() {
    let mut s = Settings::default();
    s.set("compact_at", "0.7", "f", None).expect("fraction");
    assert_eq!(s.compact_at, Some(0.7));
    s.set("compact_at", "90%", "f", None).expect("percentage");
    assert_eq!(s.compact_at, Some(0.9));
    let e = s
        .set("compact_at", "1.5", "f", None)
        .expect_err("too large");
    assert!(e.to_string().contains("compact_at"), "{e}");
    assert!(s.set("compact_at", "lots", "f", None).is_err());
}

fn file_error(text: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("config.toml");
    std::fs::write(&path, text).expect("write");
    read_file(&path).expect_err("a bad file").to_string()
}

#[test]
fn a_toml_syntax_error_names_its_line_and_column() {
    let e = file_error("endpoint = \"http://h/v1\"\nmode = mol\n");
    assert!(e.contains("config.toml:2:8: not valid TOML"), "{e}");
}

#[test]
fn a_key_error_names_the_line_it_is_on() {
    let e = file_error("# mine\nendpoint = \"http://h/v1\"\n\n[sandbox]\nnetwork = \"yes\"\n");
    assert!(e.contains("config.toml:5: key `network`"), "{e}");
}

#[test]
fn a_misspelt_key_gets_the_nearest_name() {
    let e = file_error("approvals = \"ask\"\n");
    assert!(
        e.contains("key `approvals`: unknown key, did you mean `approval`?"),
        "{e}"
    );
    let e = file_error("modle = \"x\"\n");
    assert!(e.contains("did you mean `model`?"), "{e}");
    // Nothing near: the whole list.
    let e = file_error("colour = \"red\"\n");
    assert!(e.contains("known keys: endpoint,"), "{e}");
    // An unknown table is an unknown key too, not "expected a string".
    let e = file_error("[ui]\ntheme = \"dark\"\n");
    assert!(e.contains("key `ui`: unknown key"), "{e}");
}

#[test]
fn an_unknown_key_in_a_section_lists_that_sections_keys() {
    let e = file_error("[sandbox]\nnetwrk = true\n");
    assert!(
        e.contains(
            "config.toml:2: key `sandbox.netwrk`: unknown key in [sandbox], did you mean \
             `network`? ([sandbox] keys: mode, network, writable, readable, allow_unix_sockets, max_processes, backend, max_memory, env_keep, env_drop)"
        ),
        "{e}"
    );
    let e = file_error("[approval]\nalways = [\"ls\"]\n");
    assert!(e.contains("[approval] keys: policy, allow"), "{e}");
}

#[test]
fn network_is_only_true_or_false() {
    let mut s = Settings::default();
    for bad in ["yes", "banana", "1", "on"] {
        let e = s.set("network", bad, "f", None).expect_err(bad);
        assert!(e.to_string().contains("is not true or false"), "{e}");
    }
    s.set("network", "true", "f", None).expect("true");
    assert_eq!(s.network, Some(true));
    s.set("network", "false", "f", None).expect("false");
    assert_eq!(s.network, Some(false));
    let e = file_error("network = \"yes\"\n");
    assert!(
        e.contains("key `network`: expected a boolean (true or false), found string"),
        "{e}"
    );
}

#[test]
fn a_missing_workspace_names_its_source() {
    let mut s = Settings::default();
    let e = s
        .set(
            "workspace",
            "/nonexistent/here",
            "environment variable BATON_WORKSPACE",
            None,
        )
        .expect_err("missing");
    let text = e.to_string();
    assert!(
        text.contains("BATON_WORKSPACE") && text.contains("/nonexistent/here: folder not found"),
        "{text}"
    );
}

#[test]
fn per_expert_keys_set_one_expert_and_overlay_key_by_key() {
    let mut base = Settings::default();
    base.set("l0_tools", "read_file,handoff", "x", None)
        .expect("l0_tools");
    base.set("l3_system_prompt", "/p/ui.md", "x", None)
        .expect("l3_system_prompt");
    assert_eq!(
        base.expert_tools,
        [
            Some(vec!["read_file".to_string(), "handoff".to_string()]),
            None,
            None,
            None
        ]
    );
    assert_eq!(base.expert_system_prompt[3], Some("/p/ui.md".into()));
    let mut top = Settings::default();
    top.set("l2_tools", "shell", "y", None).expect("l2_tools");
    base.overlay(top);
    assert!(base.expert_tools[0].is_some() && base.expert_tools[2].is_some());
    // Not an expert: an unknown key, not a silent no-op.
    assert!(base.set("l4_tools", "shell", "z", None).is_err());
    assert!(base.set("l0_colour", "red", "z", None).is_err());
}

#[test]
fn every_list_key_reads_a_toml_array_and_one_entry_may_hold_a_comma() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.toml");
    // `l2_tools` was refused as "expected a string or number, found array" while the docs
    // showed it as a list; `writable` split one folder holding a comma in two.
    let text = "l2_tools = [\"read_file\", \"shell\"]\nwritable = [\"/tmp/a,b\"]\n\
                [sandbox]\nenv_keep = [\"GH_TOKEN\"]\n";
    let (s, mistakes) = parse_file(&path, &Ok(text.as_bytes().to_vec())).unwrap();
    assert!(mistakes.is_empty(), "{mistakes:?}");
    assert_eq!(
        s.expert_tools[2],
        Some(vec!["read_file".to_string(), "shell".to_string()])
    );
    assert_eq!(s.writable, Some(vec![PathBuf::from("/tmp/a,b")]));
    assert_eq!(s.env_keep, Some(vec!["GH_TOKEN".to_string()]));
    for def in defs::DEFS {
        let value = if matches!(def.kind, Kind::Lines | Kind::Names) {
            "[\"cargo test\"]"
        } else {
            continue;
        };
        let text = format!("{} = {value}\n", def.key);
        let (s, mistakes) = parse_file(&path, &Ok(text.into_bytes())).unwrap();
        assert!(mistakes.is_empty(), "{}: {mistakes:?}", def.key);
        assert!((def.slot.is_set)(&s), "{}", def.key);
    }
}

#[test]
fn origins_name_the_layer_that_wins_each_key() {
    let user = Path::new("/home/u/.config/baton/config.toml");
    let project = Path::new("/src/app/.baton/config.toml");
    let mut u = Settings::default();
    u.set("model", "from-user", "u", None).unwrap();
    u.set("timeout", "5", "u", None).unwrap();
    let mut p = Settings::default();
    p.set("timeout", "9", "p", None).unwrap();
    p.set("sandbox", "read-only", "p", None).unwrap();
    let mut e = Settings::default();
    e.set("max_turns", "8", "e", None).unwrap();
    let mut f = Settings::default();
    f.set("model", "from-flag", "f", None).unwrap();
    f.set("workspace", "/", "f", None).unwrap();
    let got = origins(&[
        (&f, Layer::Flags),
        (&e, Layer::Env),
        (&p, Layer::File(Some(project))),
        (&u, Layer::File(Some(user))),
    ]);
    let lines: Vec<String> = got
        .iter()
        .map(|o| format!("{} = {} ({})", o.key, o.value, o.source))
        .collect();
    assert_eq!(
        lines,
        [
            "model = from-flag (flag --model)",
            "workspace = / (flag -C/--cd)",
            "sandbox = read-only (/src/app/.baton/config.toml)",
            "max_turns = 8 (environment variable BATON_MAX_TURNS)",
            "timeout = 9 (/src/app/.baton/config.toml)",
        ]
    );
}

/// The settings of a config file's text, and the mistakes of its keys in line order.
fn file_settings(text: &str) -> (Settings, Vec<String>) {
    let path = Path::new("/nowhere/config.toml");
    let (s, mistakes) = parse_file(path, &Ok(text.as_bytes().to_vec())).expect("TOML");
    let mut mistakes: Vec<String> = mistakes.iter().map(ToString::to_string).collect();
    mistakes.sort();
    (s, mistakes)
}

#[test]
fn a_number_or_a_boolean_written_as_a_string_is_refused_saying_how_to_write_it() {
    // While file values went through text, `"0.5"` and `0.5` were one value.
    let (_, mistakes) = file_settings("temperature = \"0.5\"\n");
    assert_eq!(
        mistakes,
        [
            "/nowhere/config.toml:1: key `temperature`: expected a number, found string \
          (write it without quotes: 0.5)"
        ]
    );
    let (_, mistakes) = file_settings("[sandbox]\nnetwork = \"true\"\nmax_memory = \"512\"\n");
    assert_eq!(
        mistakes,
        [
            "/nowhere/config.toml:2: key `network`: expected a boolean (true or false), \
             found string (write it without quotes: true)",
            "/nowhere/config.toml:3: key `max_memory`: expected a whole number, found string \
             (write it without quotes: 512)",
        ]
    );
    // Not a number even without quotes: no advice to drop them.
    let (_, mistakes) = file_settings("timeout = \"soon\"\n");
    assert_eq!(
        mistakes,
        ["/nowhere/config.toml:1: key `timeout`: expected a whole number, found string"]
    );
}

#[test]
fn each_kind_of_setting_takes_its_own_toml_types() {
    let (s, mistakes) = file_settings(
        "temperature = 1\ntop_p = 0.5\ntimeout = 30\nnetwork = true\nmode = \"single\"\n\
         compact_at = \"80%\"\n",
    );
    assert!(mistakes.is_empty(), "{mistakes:?}");
    assert_eq!(
        (
            s.temperature,
            s.top_p,
            s.timeout,
            s.network,
            s.mode,
            s.compact_at
        ),
        (
            Some(1.0),
            Some(0.5),
            Some(30),
            Some(true),
            Some(Mode::Single),
            Some(0.8)
        )
    );
    let (_, mistakes) = file_settings(
        "timeout = 30.0\nmode = 1\nmodel = false\ncompact_at = \"0.7\"\nmax_turns = -1\n",
    );
    assert_eq!(
        mistakes,
        [
            "/nowhere/config.toml:1: key `timeout`: expected a whole number, found float",
            "/nowhere/config.toml:2: key `mode`: expected one of mol, proxy, single, found integer",
            "/nowhere/config.toml:3: key `model`: expected a model name, found boolean",
            "/nowhere/config.toml:4: key `compact_at`: expected a fraction (0.85) or a \
             percentage (\"85%\"), found string (write it without quotes: 0.7)",
            "/nowhere/config.toml:5: key `max_turns`: -1 is not a positive whole number",
        ]
    );
}

#[test]
fn a_list_is_a_toml_array_of_strings_each_entry_whole() {
    let (s, mistakes) =
        file_settings("env_keep = [\"A,B\"]\nallow = [\"git log --format=%h,%s\", \" \"]\n");
    assert!(mistakes.is_empty(), "{mistakes:?}");
    assert_eq!(s.env_keep, Some(vec!["A,B".to_string()]));
    // An empty entry is dropped, as it is from a variable.
    assert_eq!(s.allow, Some(vec!["git log --format=%h,%s".to_string()]));
    let (_, mistakes) = file_settings(
        "tools = \"read_file,shell\"\nwritable = 5\nl2_tools = [\"shell\", 1]\n\
         readable = [\"~/notes\\nrm\"]\n",
    );
    assert_eq!(
        mistakes,
        [
            "/nowhere/config.toml:1: key `tools`: expected a list of strings ([\"…\", \"…\"]), \
             found string",
            "/nowhere/config.toml:2: key `writable`: expected a list of strings ([\"…\", \"…\"]), \
             found integer",
            "/nowhere/config.toml:3: key `l2_tools`: expected a list of strings, found integer \
             in the list",
            "/nowhere/config.toml:4: key `readable`: list entry \"~/notes\\nrm\" holds a line break",
        ]
    );
}
