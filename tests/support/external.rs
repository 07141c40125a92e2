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

/// Returns `Some(value)` when the dependency is present; otherwise `skip`s (a failure under CI).
pub fn require<T>(what: &str, found: Option<T>) -> Option<T> {
    if found.is_none() {
        skip(&format!(
            "{what} is not installed (run tools/test-deps.sh; deps folder {})",
            deps_dir().display()
        ));
    }
    found
}

/// Whether this run is CI's: `.ci/run` exports `CI`, and installs everything the tests need.
pub fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

/// The one way a test skips for something missing (a tool, an enforceable sandbox, a file
/// system feature). Under CI that is a failure, so a green CI run proves every test ran;
/// elsewhere the skip is printed straight to stderr (libtest captures only the print macros)
/// and appended to `skipped-external.log` in the deps folder, so a local run shows what it
/// did not test.
pub fn skip(reason: &str) {
    let line = format!("SKIPPED: {reason}");
    assert!(!under_ci(), "{line} (a skip is a failure under CI)");
    let _ = writeln!(std::io::stderr(), "{line}");
    let _ = std::fs::create_dir_all(deps_dir());
    if let Ok(mut log) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(deps_dir().join("skipped-external.log"))
    {
        let _ = writeln!(log, "{line}");
    }
}

/// Whether this kernel enforces baton's sandbox; when it does not, the test `skip`s (a failure
/// under CI, whose machine enforces it).
pub fn sandbox_enforceable(test: &str) -> bool {
    let support = baton::sandbox::probe();
    if !support.enforceable {
        skip(&format!(
            "{test}: the sandbox is not enforceable here:\n{}",
            support.report().join("\n")
        ));
    }
    support.enforceable
}
