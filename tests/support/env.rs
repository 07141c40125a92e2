//! A throwaway home and workspace for running the real `baton` binary: HOME and the XDG folders
//! point into a temp dir and the environment is otherwise empty, so no user config, key or
//! session of the machine running the tests leaks in.

use std::path::PathBuf;
use std::time::Duration;

use assert_cmd::Command;

use super::MockEngine;

pub struct Env {
    _root: tempfile::TempDir,
    pub home: PathBuf,
    pub workspace: PathBuf,
    /// Where `session_baton` keeps session files (created by baton on first use).
    pub sessions: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        Env::in_root(tempfile::tempdir().expect("tempdir"))
    }

    /// As [`Env::new`], in a folder outside the temp dirs ([`super::outside::fixture_base`]):
    /// a home there is the host's as a sandbox sees it, not one its private /tmp covers.
    pub fn outside_tmp() -> Env {
        Env::in_root(tempfile::tempdir_in(super::outside::fixture_base()).expect("tempdir"))
    }

    fn in_root(root: tempfile::TempDir) -> Env {
        let home = root.path().join("home");
        let workspace = root.path().join("ws");
        let sessions = root.path().join("sessions");
        for d in [&home, &workspace] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        Env {
            home,
            workspace,
            sessions,
            _root: root,
        }
    }

    /// `baton` with only HOME and XDG set (no PATH: nothing to find), the workspace as cwd.
    pub fn baton(&self) -> Command {
        let mut c = Command::cargo_bin("baton").expect("binary");
        c.env_clear()
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .current_dir(&self.workspace)
            .timeout(Duration::from_secs(60));
        c
    }

    /// `baton` for running turns: PATH kept (the tools spawn commands) and the session folder set.
    pub fn session_baton(&self) -> Command {
        let mut c = self.baton();
        c.env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .arg("--session-dir")
            .arg(&self.sessions);
        c
    }

    /// `baton --exec --endpoint <engine> [extra…] <prompt>` in a session.
    pub fn exec(&self, engine: &MockEngine, prompt: &str, extra: &[&str]) -> Command {
        let mut c = self.session_baton();
        c.args(["--exec", "--endpoint", &engine.url()])
            .args(extra)
            .arg(prompt);
        c
    }

    /// `exec` as a plain `std::process::Command` (stdin closed), for a run the test signals or
    /// kills mid-turn.
    pub fn exec_child(
        &self,
        engine: &MockEngine,
        prompt: &str,
        extra: &[&str],
    ) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("baton"));
        c.env_clear()
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(&self.workspace)
            .arg("--session-dir")
            .arg(&self.sessions)
            .args(["--exec", "--endpoint", &engine.url()])
            .args(extra)
            .arg(prompt)
            .stdin(std::process::Stdio::null());
        c
    }

    /// `git ARGS` in the workspace with a fixed identity and no signing; its stdout, trimmed.
    pub fn git(&self, args: &[&str]) -> String {
        git_in(&self.workspace, args)
    }

    pub fn user_config(&self, text: &str) -> PathBuf {
        let dir = self.home.join(".config/baton");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("config.toml");
        std::fs::write(&path, text).expect("write");
        path
    }

    pub fn project_config(&self, text: &str) -> PathBuf {
        let dir = self.workspace.join(".baton");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("config.toml");
        std::fs::write(&path, text).expect("write");
        path
    }
}

/// `git ARGS` in `dir` with a fixed identity and no signing; its stdout, trimmed. Panics with
/// git's output when it fails.
pub fn git_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .trim()
        .to_string()
}

/// Copies a program with `cp` in a process of its own: a file this process wrote can be held
/// open by a child another test thread forks meanwhile, and exec of it fails with ETXTBSY.
pub fn copy_program(from: &std::path::Path, to: &std::path::Path) {
    let status = std::process::Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success(), "cp {} {}", from.display(), to.display());
}
