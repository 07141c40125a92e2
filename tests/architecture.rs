//! The layer map of docs/architecture.md, enforced: reads every file of `src/` and fails on any
//! reference to a module that the map does not let that layer see (a `use` that points up the
//! layers, or from one frontend into another).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of `src/` and what it may name with `crate::`. The order is the layer
/// order, bottom first; a module may only see modules listed before it (checked below), so the
/// map itself has no cycles.
const LAYERS: &[(&str, &[&str])] = &[
    // The ground floor: types only.
    ("protocol", &[]),
    // The one reader/writer of files a command or a repository may have touched: every layer
    // reads and writes those through it; it sees nothing of baton.
    ("untrusted_fs", &[]),
    // The engine is self-contained; from the ground floor it takes the device choice.
    ("engine", &["protocol", "untrusted_fs"]),
    ("config", &["protocol", "untrusted_fs"]),
    ("session", &["protocol", "untrusted_fs"]),
    ("sandbox", &["protocol", "untrusted_fs"]),
    // The user's hook commands: their files (trust decides the project's) and how they run.
    ("hooks", &["protocol", "untrusted_fs", "config"]),
    ("backend", &["protocol", "untrusted_fs", "engine"]),
    // Tools never reach a model.
    (
        "tool",
        &["protocol", "untrusted_fs", "config", "session", "sandbox"],
    ),
    (
        "mol",
        &["protocol", "untrusted_fs", "config", "session", "backend"],
    ),
    (
        "agent",
        &[
            "protocol",
            "untrusted_fs",
            "config",
            "session",
            "backend",
            "mol",
            "tool",
            "hooks",
        ],
    ),
    // The one builder.
    (
        "app",
        &[
            "protocol",
            "untrusted_fs",
            "config",
            "session",
            "engine",
            "backend",
            "sandbox",
            "hooks",
            "tool",
            "mol",
            "agent",
        ],
    ),
    // Frontends: the protocol, their options, saved sessions; never each other.
    ("exec", &["protocol", "untrusted_fs", "config", "session"]),
    ("tui", &["protocol", "untrusted_fs", "config", "session"]),
    // The Agent Client Protocol server (`baton acp`): agents come from the command line.
    ("acp", &["protocol", "untrusted_fs", "config", "session"]),
    // Trials reuse the sandbox's seccomp filter.
    (
        "eval",
        &["protocol", "untrusted_fs", "config", "session", "sandbox"],
    ),
    // The MoL proxy: HTTP over the `MolService` the builder hands it.
    ("serve", &["protocol", "untrusted_fs", "config", "session"]),
    // The command line parses and dispatches: it may see everything.
    (
        "cli",
        &[
            "protocol",
            "untrusted_fs",
            "engine",
            "config",
            "session",
            "sandbox",
            "hooks",
            "backend",
            "tool",
            "mol",
            "agent",
            "app",
            "exec",
            "tui",
            "eval",
            "acp",
            "serve",
        ],
    ),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/agent/turn.rs` → `agent`, `src/app.rs` → `app`).
/// `src/bin/` holds programs of their own (like `main.rs`), which reach the library as `baton::`.
fn owner(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src_dir()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main" | "bin")).then(|| name.to_string())
}

/// The code of a file without comments and string literals, so doc examples and messages that
/// mention a path do not count as references.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let b: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '/' if b.get(i + 1) == Some(&'/') => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            '/' if b.get(i + 1) == Some(&'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == '*' && b[i + 1] == '/') {
                    i += 1;
                }
                i += 2;
            }
            'r' if matches!(b.get(i + 1), Some('"') | Some('#'))
                && (i == 0 || !(b[i - 1].is_alphanumeric() || b[i - 1] == '_')) =>
            {
                // A raw string: r"…", r#"…"#.
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) != Some(&'"') {
                    out.push(b[i]);
                    i += 1;
                    continue;
                }
                j += 1;
                loop {
                    if j >= b.len() {
                        break;
                    }
                    if b[j] == '"' && (0..hashes).all(|h| b.get(j + 1 + h) == Some(&'#')) {
                        j += 1 + hashes;
                        break;
                    }
                    j += 1;
                }
                i = j;
                out.push_str("\"\"");
            }
            '"' => {
                i += 1;
                while i < b.len() && b[i] != '"' {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push_str("\"\"");
            }
            '\'' if b.get(i + 2) == Some(&'\'') || b.get(i + 1) == Some(&'\\') => {
                // A char literal ('"', '\n'); lifetimes ('a) are left alone.
                let mut j = i + 1;
                if b.get(j) == Some(&'\\') {
                    j += 1;
                }
                while j < b.len() && b[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Every top-level module named after `crate::`, including inside `crate::{a, b::c}` groups.
fn referenced_modules(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut rest = code;
    while let Some(pos) = rest.find("crate::") {
        let preceded_by_ident = rest[..pos]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        rest = &rest[pos + "crate::".len()..];
        if preceded_by_ident {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group, at brace depth 0.
            let mut depth = 0;
            let mut start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 0 => {
                        found.insert(ident(&group[i..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty() && m != "self");
    found
}

/// The module path of a file (`src/tool/approval.rs` → `tool::approval`, `src/tool/mod.rs` →
/// `tool`): how many `super::` it takes to reach the crate root from its top.
fn module_depth(file: &Path) -> usize {
    let Ok(rel) = file.strip_prefix(src_dir()) else {
        return 0;
    };
    let parts: Vec<&str> = rel
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .collect();
    match parts.last() {
        Some(&"mod.rs") => parts.len() - 1,
        _ => parts.len(),
    }
}

/// Top-level modules reached with `super::` chains that climb to the crate root
/// (`super::super::agent::X` from `src/tool/approval.rs`). Inline `mod name { … }` blocks add
/// a level, so the `super::super` of a test module inside a file stays in that file's module.
fn super_references(code: &str, file_depth: usize) -> BTreeSet<String> {
    let b: Vec<char> = code.chars().collect();
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let word_at = |i: usize| -> String { b[i..].iter().take_while(|c| is_ident(**c)).collect() };
    let skip_space = |mut k: usize| {
        while k < b.len() && b[k].is_whitespace() {
            k += 1;
        }
        k
    };
    let mut found = BTreeSet::new();
    let mut depth = 0usize;
    let mut inline_mods: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if is_ident(c) && (i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == ':')) {
            let w = word_at(i);
            if w == "super" {
                let mut n = 0;
                let mut j = i;
                while b[j..].starts_with(&['s', 'u', 'p', 'e', 'r', ':', ':']) {
                    n += 1;
                    j += "super::".len();
                }
                if n > 0 && n >= file_depth + inline_mods.len() {
                    found.insert(word_at(j));
                }
                i = j.max(i + w.len());
                continue;
            }
            if w == "mod" {
                // `mod name {` opens an inline module; `mod name;` declares a file.
                let name_at = skip_space(i + w.len());
                let name = word_at(name_at);
                let after = skip_space(name_at + name.len());
                if !name.is_empty() && b.get(after) == Some(&'{') {
                    inline_mods.push(depth + 1);
                }
            }
            i += w.len();
            continue;
        }
        match c {
            '{' => depth += 1,
            '}' => {
                if inline_mods.last() == Some(&depth) {
                    inline_mods.pop();
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
        i += 1;
    }
    found.retain(|m| !m.is_empty() && m != "self" && m != "super");
    found
}

/// Ways to name a module the scanner could not follow: an alias of the crate root
/// (`use crate as c;`, `crate::{self as c}`, `extern crate self as baton;`) or a file of
/// another module compiled in with `#[path]`.
fn opaque_references(code: &str) -> Vec<String> {
    let flat: String = code.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut bad = Vec::new();
    for (needle, what) in [
        ("crate as ", "an alias of the crate root (`crate as …`)"),
        (
            "crate::{self",
            "an alias of the crate root (`crate::{self …}`)",
        ),
        (
            "crate::{ self",
            "an alias of the crate root (`crate::{self …}`)",
        ),
        ("crate::self", "an alias of the crate root (`crate::self`)"),
        ("extern crate self", "`extern crate self`"),
        ("#[path", "a `#[path]` include"),
        ("# [path", "a `#[path]` include"),
    ] {
        if flat.contains(needle) {
            bad.push(what.to_string());
        }
    }
    bad
}

/// All references that break the map: (file, module it names).
fn violations() -> Vec<(String, String)> {
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    files.sort();
    let mut bad = Vec::new();
    for file in files {
        let Some(module) = owner(&file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("read source");
        let rel = file
            .strip_prefix(src_dir())
            .unwrap_or(&file)
            .display()
            .to_string();
        let Some(may_see) = allowed.get(module.as_str()) else {
            bad.push((rel, format!("module `{module}` is not on the layer map")));
            continue;
        };
        let code = code_only(&text);
        for what in opaque_references(&code) {
            bad.push((rel.clone(), what));
        }
        let mut targets = referenced_modules(&code);
        targets.extend(super_references(&code, module_depth(&file)));
        for target in targets {
            if target != module && !may_see.contains(&target.as_str()) {
                bad.push((rel.clone(), target));
            }
        }
    }
    bad
}

#[test]
fn no_module_reaches_up_or_across_the_layer_map() {
    let bad = violations();
    assert!(
        bad.is_empty(),
        "{} reference(s) break the layer map (docs/architecture.md):\n{}",
        bad.len(),
        bad.iter()
            .map(|(file, target)| format!("  src/{file} -> crate::{target}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_layer_map_has_no_cycles_and_covers_every_module() {
    for (i, (module, may_see)) in LAYERS.iter().enumerate() {
        let below: Vec<&str> = LAYERS[..i].iter().map(|(m, _)| *m).collect();
        for dep in *may_see {
            assert!(
                below.contains(dep),
                "`{module}` may see `{dep}`, which is not below it"
            );
        }
    }
    let mut top_level = BTreeSet::new();
    for entry in std::fs::read_dir(src_dir()).expect("read src") {
        let path = entry.expect("dir entry").path();
        if let Some(m) = owner(&path) {
            top_level.insert(m);
        }
    }
    let mapped: BTreeSet<String> = LAYERS.iter().map(|(m, _)| m.to_string()).collect();
    assert_eq!(top_level, mapped, "every module of src/ is on the map");
}

#[test]
fn the_scanner_sees_grouped_and_inline_references_but_not_comments_or_strings() {
    let code = code_only(
        "use crate::{agent::X, tool};\n// crate::tui\nlet s = \"crate::exec\";\nfn f() { crate::mol::route(); }\n/* crate::eval */ let c = '\"'; crate::cli::x();",
    );
    let found = referenced_modules(&code);
    let want: BTreeSet<String> = ["agent", "tool", "mol", "cli"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(found, want);
}

#[test]
fn the_scanner_follows_super_chains_to_the_crate_root_and_refuses_aliases() {
    // From src/tool/approval.rs (depth 2), two `super`s reach the root.
    let code = code_only("use super::super::agent::Shared;\nuse super::ApprovalNeed;\n");
    let want: BTreeSet<String> = ["agent".to_string()].into();
    assert_eq!(super_references(&code, 2), want);
    // In an inline test module one more is needed; there, two stay in the file's module.
    let code = code_only(
        "fn a() {}\n#[cfg(test)]\nmod tests {\n    use super::super::Thing;\n    fn t() { super::super::super::tui::x(); }\n}\nfn b() { super::super::exec::y(); }",
    );
    let want: BTreeSet<String> = ["tui".to_string(), "exec".to_string()].into();
    assert_eq!(super_references(&code, 2), want);
    // `mod x;` declares a file, it opens no level.
    let code = code_only("mod shell;\npub(crate) mod pty;\nuse super::super::app::start;");
    let want: BTreeSet<String> = ["app".to_string()].into();
    assert_eq!(super_references(&code, 2), want);
    for aliased in [
        "use crate as root;\nfn f() { root::agent::x(); }",
        "use crate::{self as root, protocol};",
        "extern crate self as baton;",
        "#[path = \"../agent/turn.rs\"]\nmod turn;",
    ] {
        assert_eq!(opaque_references(&code_only(aliased)).len(), 1, "{aliased}");
    }
    assert!(opaque_references(&code_only("pub(crate) use crate::protocol::Op;")).is_empty());
}
