//! External programs the tests drive for real (MCP servers from npm, the Python SDKs, codex,
//! the `harbor` package): where `tools/test-deps.sh` installs them, and what a test does when
//! one is missing — under CI that is a failure, elsewhere a counted, loudly printed skip.

#![allow(dead_code)] // each test uses the part it needs

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The folder `tools/test-deps.sh` installs into: `$BATON_TEST_DEPS`, else `.test-deps` in the
/// checkout.
pub fn deps_dir() -> PathBuf {
    match std::env::var_os("BATON_TEST_DEPS") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join(".test-deps"),
    }
}

/// An executable an npm package installed (`node_modules/.bin/NAME`), if it is there.
pub fn node_bin(name: &str) -> Option<PathBuf> {
    let path = deps_dir().join("node/node_modules/.bin").join(name);
    path.is_file().then_some(path)
}

/// The test virtualenv's Python, if the venv exists.
pub fn python() -> Option<PathBuf> {
    let path = deps_dir().join("venv/bin/python");
    path.is_file().then_some(path)
}

/// The test virtualenv's Python, when it can import every one of `modules`.
pub fn python_with(modules: &[&str]) -> Option<PathBuf> {
    let python = python()?;
    let imports = modules
        .iter()
        .map(|m| format!("import {m}"))
        .collect::<Vec<_>>()
        .join("; ");
    let ok = Command::new(&python)
        .args(["-c", &imports])
        .output()
        .map(|out| out.status.success())
        .unwrap_or(false);
    ok.then_some(python)
}

/// Returns `Some(value)` when the dependency is present. When it is missing: under CI (`CI`
/// set) the test fails, since `.ci/run` installs everything; elsewhere the skip is printed and
/// appended to `skipped-external.log` in the deps folder, so a local run shows what it did not
/// test.
pub fn require<T>(what: &str, found: Option<T>) -> Option<T> {
    if found.is_some() {
        return found;
    }
    let line = format!(
        "SKIPPED: {what} is not installed (run tools/test-deps.sh; deps folder {})",
        deps_dir().display()
    );
    assert!(std::env::var_os("CI").is_none(), "{line}");
    eprintln!("{line}");
    let _ = std::fs::create_dir_all(deps_dir());
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(deps_dir().join("skipped-external.log"))
    {
        let _ = writeln!(log, "{line}");
    }
    None
}
