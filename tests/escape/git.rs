//! Escape tests for git as a code-execution path: config, hooks, commondir, submodule gitdirs,
//! gitlinks and hooksPath written by a sandboxed command, and `.baton/` policy files. Each test
//! plays the hostile command through the real shell tool, then runs the user's own `git`
//! outside any sandbox, as the user would next, and checks that the planted program (which
//! appends to a marker file outside the workspace) never ran.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use baton::protocol::{Event, EventSink, SandboxMode, ToolStatus};
use baton::sandbox::SandboxPolicy;
use baton::tool::shell::{ShellConfig, shell_tools};
use baton::tool::{Tool, ToolContext, ToolResult, ToolState};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::outside;

/// A user's repository (with one commit) and a marker file outside every writable root.
struct Repo {
    _root: tempfile::TempDir,
    /// A workspace under /tmp instead, for the cases where that matters.
    _tmp: Option<tempfile::TempDir>,
    mode: SandboxMode,
    base: PathBuf,
    ws: PathBuf,
    marker: PathBuf,
    home: PathBuf,
}

fn enforceable() -> bool {
    crate::support::external::sandbox_enforceable("git escape tests")
}

/// `ws` under a fresh folder outside the temp roots; `git init` unless `init` is false.
fn repo_at(sub: &str, init: bool) -> Repo {
    let root = tempfile::Builder::new()
        .prefix("baton-git")
        .tempdir_in(outside::fixture_base())
        .expect("tempdir");
    let base = root.path().canonicalize().expect("canon");
    let ws = base.join(sub);
    let home = base.join("home");
    for d in [&ws, &home, &base.join("outside")] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let r = Repo {
        marker: base.join("outside/marker"),
        _root: root,
        _tmp: None,
        mode: SandboxMode::WorkspaceWrite,
        base,
        ws,
        home,
    };
    if init {
        r.git(&r.ws, &["init", "-q", "-b", "main"]);
        r.git(&r.ws, &["commit", "-q", "--allow-empty", "-m", "first"]);
    }
    r
}

fn repo() -> Repo {
    repo_at("ws", true)
}

impl Repo {
    /// `baton sandbox -- sh -c SCRIPT` in the workspace, as the user runs it: the fixture's
    /// home and XDG folders.
    fn baton_sandbox(&self, script: &str) -> Command {
        self.baton_sandbox_with(&[], script)
    }

    /// [`Repo::baton_sandbox`] with `baton sandbox` flags before the command.
    fn baton_sandbox_with(&self, flags: &[&str], script: &str) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
        c.arg("sandbox")
            .args(flags)
            .args(["--", "sh", "-c", script])
            .current_dir(&self.ws)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env("XDG_DATA_HOME", self.home.join(".local/share"))
            .env("XDG_STATE_HOME", self.home.join(".local/state"));
        c
    }

    /// Builds the C program `source` with `cc` as `name` in the workspace (for the command).
    fn compile_into_workspace(&self, name: &str, source: &str) {
        let file = self.base.join(format!("{name}.c"));
        std::fs::write(&file, source).expect("write the C source");
        let built = Command::new("cc")
            .arg("-O2")
            .arg("-o")
            .arg(self.ws.join(name))
            .arg(&file)
            .output()
            .expect("run cc");
        assert!(built.status.success(), "{built:?}");
    }

    /// [`Repo::baton_sandbox`] run to its end with no input: its output and both streams.
    fn run_baton_sandbox(&self, script: &str) -> (Output, String, String) {
        let out = self
            .baton_sandbox(script)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run baton sandbox");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out, stdout, stderr)
    }

    /// The user's own git, outside any sandbox: their environment, no system config, a home
    /// of its own, never looking above the fixture for a repository.
    fn git_output(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CEILING_DIRECTORIES", &self.base)
            .env("GIT_AUTHOR_NAME", "u")
            .env("GIT_AUTHOR_EMAIL", "u@example.com")
            .env("GIT_COMMITTER_NAME", "u")
            .env("GIT_COMMITTER_EMAIL", "u@example.com")
            .output()
            .expect("git runs")
    }

    fn git(&self, dir: &Path, args: &[&str]) -> String {
        let o = self.git_output(dir, args);
        self.assert_not_run(&format!("git {}", args.join(" ")));
        assert!(
            o.status.success(),
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A script that appends to the marker, written where the command could have written it.
    fn evil_script(&self, at: &Path) -> PathBuf {
        std::fs::write(
            at,
            format!(
                "#!/bin/sh\necho pwned \"$@\" >> '{}'\n",
                self.marker.display()
            ),
        )
        .expect("script");
        let _ = Command::new("chmod").arg("755").arg(at).status();
        at.to_path_buf()
    }

    /// Runs `command` through the real shell tool (workspace-write, `writable` extra roots);
    /// returns the result and the warnings the session emitted.
    async fn hostile(&self, command: &str, writable: &[PathBuf]) -> (ToolResult, Vec<String>) {
        let (events, mut rx) = EventSink::channel();
        let ctx = ToolContext {
            workspace: self.ws.clone(),
            call_id: "call-1".into(),
            events,
            cancel: CancellationToken::new(),
            state: Arc::new(ToolState::default()),
        };
        let tools: Vec<Arc<dyn Tool>> = shell_tools(ShellConfig {
            sandbox: self.mode,
            writable: writable.to_vec(),
            ..ShellConfig::default()
        });
        let shell = tools.iter().find(|t| t.name() == "shell").expect("shell");
        let script = format!(
            "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a \
             GIT_COMMITTER_EMAIL=a@x HOME={}; {command}",
            self.home.display()
        );
        let r = shell.run(json!({ "command": script }), &ctx).await;
        let mut warnings = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            if let Event::Warning { message } = ev {
                warnings.push(message);
            }
        }
        (r, warnings)
    }

    /// The user commits in `dir`, as they would after the session (hooks and config run).
    fn user_commits(&self, dir: &Path) {
        self.git(
            dir,
            &["commit", "-q", "--allow-empty", "-m", "user's commit"],
        );
    }

    /// The user's next `git status` (and whatever else they run) must not run the planted
    /// program.
    fn assert_not_run(&self, what: &str) {
        assert!(
            !self.marker.exists(),
            "{what}: the user's git ran the planted program ({})",
            std::fs::read_to_string(&self.marker).unwrap_or_default()
        );
    }
}

#[tokio::test]
async fn a_planted_commondir_does_not_make_the_users_git_run_its_fsmonitor() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (_res, warnings) = r
        .hostile(
            &format!(
                "cp -r .git planted && git config -f planted/config core.fsmonitor {} && \
                 echo \"$PWD/planted\" > .git/commondir",
                evil.display()
            ),
            &[],
        )
        .await;
    r.git(&r.ws, &["status"]);
    r.assert_not_run("commondir → a repository with core.fsmonitor");
    assert!(!r.ws.join(".git/commondir").exists());
    assert_warned(&warnings, "commondir");
}

#[tokio::test]
async fn a_config_file_the_repository_includes_from_the_work_tree_is_not_a_way_in() {
    // Projects share settings with `git config include.path ../.gitconfig` (relative to
    // `.git/`: the work tree's `.gitconfig`), and many add an optional local file the same
    // way. git reads both as part of the repository's own config.
    if !enforceable() {
        return;
    }
    let r = repo();
    std::fs::write(r.ws.join(".gitconfig"), "[alias]\n\tst = status\n").expect("shared");
    std::fs::create_dir_all(r.ws.join("conf")).expect("mkdir");
    std::fs::write(r.ws.join("conf/git.cfg"), "[alias]\n\tci = commit\n").expect("nested");
    r.git(&r.ws, &["config", "--add", "include.path", "../.gitconfig"]);
    r.git(
        &r.ws,
        &["config", "--add", "include.path", "../.gitconfig.local"],
    );
    r.git(
        &r.ws,
        &[
            "config",
            "--add",
            "includeIf.onbranch:main.path",
            "../conf/git.cfg",
        ],
    );
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let plant = |file: &str| {
        format!(
            "printf '[core]\\n\\tfsmonitor = {}\\n' >> {file}",
            evil.display()
        )
    };
    let mut ran = Vec::new();
    for (what, command) in [
        ("an included file that exists", plant(".gitconfig")),
        (
            "an included file that did not exist",
            plant(".gitconfig.local"),
        ),
        ("an includeIf file", plant("conf/git.cfg")),
        (
            "an includeIf file whose folder was swapped",
            format!("mv conf conf.old; mkdir conf; {}", plant("conf/git.cfg")),
        ),
    ] {
        let _ = r.hostile(&command, &[]).await;
        let _ = r.git_output(&r.ws, &["status"]);
        if r.marker.exists() {
            ran.push(what);
            std::fs::remove_file(&r.marker).expect("rm marker");
        }
    }
    assert!(
        ran.is_empty(),
        "the user's git ran what was planted in: {ran:?}"
    );
}

#[tokio::test]
async fn a_submodules_gitdir_config_and_hooks_are_read_only() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let upstream = r.base.join("upstream");
    std::fs::create_dir_all(&upstream).expect("mkdir");
    r.git(&upstream, &["init", "-q", "-b", "main"]);
    r.git(&upstream, &["commit", "-q", "--allow-empty", "-m", "lib"]);
    let url = upstream.display().to_string();
    r.git(
        &r.ws,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &url,
            "lib",
        ],
    );
    r.git(&r.ws, &["commit", "-q", "-m", "add lib"]);
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let e = evil.display();
    let (res, _) = r
        .hostile(
            &format!(
                "git -C lib config core.fsmonitor {e}; \
                 printf '[core]\\n\\tfsmonitor = {e}\\n' >> .git/modules/lib/config; \
                 cp {e} .git/modules/lib/hooks/pre-commit; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.git(&r.ws.join("lib"), &["status"]);
    r.user_commits(&r.ws.join("lib"));
    // Moving the gitdir (or all of `modules/`) aside to put a writable copy in its place.
    let (res, _) = r
        .hostile(
            &format!(
                "mv .git/modules/lib .git/modules/lib.old && cp -r .git/modules/lib.old \
                 .git/modules/lib && git -C lib config core.fsmonitor {e}; \
                 mv .git/modules .git/modules.old && mkdir -p .git/modules && \
                 cp -r .git/modules.old/lib .git/modules/ && git -C lib config core.fsmonitor {e}; \
                 echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.git(&r.ws.join("lib"), &["status"]);
    r.assert_not_run("submodule gitdir config / hooks");
}

#[tokio::test]
async fn a_gitlink_over_a_nested_repo_with_fsmonitor_is_neutralized() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, warnings) = r
        .hostile(
            &format!(
                "git init -q nested && git -C nested commit -q --allow-empty -m x && \
                 git -C nested config core.fsmonitor {} && \
                 git update-index --add --cacheinfo 160000,$(git -C nested rev-parse HEAD),nested \
                 && echo planted",
                evil.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("planted"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.git(&r.ws.join("nested"), &["status"]);
    r.assert_not_run("gitlink over a nested repo with core.fsmonitor");
    assert_warned(&warnings, "core.fsmonitor");
    // The rest of the nested repository is left as the command made it.
    r.git(&r.ws.join("nested"), &["log", "--oneline"]);
}

#[tokio::test]
async fn a_git_symlink_to_a_gitdir_in_the_workspace_is_protected() {
    if !enforceable() {
        return;
    }
    let r = repo();
    std::fs::create_dir_all(r.ws.join("meta")).expect("mkdir");
    std::fs::rename(r.ws.join(".git"), r.ws.join("meta/repo.git")).expect("mv");
    std::os::unix::fs::symlink("meta/repo.git", r.ws.join(".git")).expect("symlink");
    r.git(&r.ws, &["status"]);
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let e = evil.display();
    let (res, _) = r
        .hostile(
            &format!(
                "git config core.fsmonitor {e}; cp {e} .git/hooks/pre-commit; \
                 cp {e} meta/repo.git/hooks/post-commit; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.user_commits(&r.ws);
    r.assert_not_run(".git symlink → gitdir in the workspace");
}

#[tokio::test]
async fn a_git_symlink_repointed_at_a_planted_gitdir_is_neutralized() {
    if !enforceable() {
        return;
    }
    let r = repo();
    std::fs::create_dir_all(r.ws.join("meta")).expect("mkdir");
    std::fs::rename(r.ws.join(".git"), r.ws.join("meta/repo.git")).expect("mv");
    std::os::unix::fs::symlink("meta/repo.git", r.ws.join(".git")).expect("symlink");
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, warnings) = r
        .hostile(
            &format!(
                "cp -r meta/repo.git planted.git && \
                 git config -f planted.git/config core.fsmonitor {} && \
                 rm .git && ln -s planted.git .git && echo done",
                evil.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.assert_not_run(".git symlink repointed at a planted gitdir");
    assert!(!warnings.is_empty());
}

#[tokio::test]
async fn a_separate_gitdir_inside_the_workspace_is_protected() {
    if !enforceable() {
        return;
    }
    let r = repo_at("ws", false);
    r.git(
        &r.ws,
        &["init", "-q", "-b", "main", "--separate-git-dir", ".store"],
    );
    r.git(&r.ws, &["commit", "-q", "--allow-empty", "-m", "first"]);
    assert!(r.ws.join(".git").is_file());
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let e = evil.display();
    let (res, _) = r
        .hostile(
            &format!(
                "git config core.fsmonitor {e}; \
                 printf '[core]\\n\\tfsmonitor = {e}\\n' >> .store/config; \
                 cp {e} .store/hooks/pre-commit; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.user_commits(&r.ws);
    let (res, _) = r
        .hostile(
            &format!(
                "cp -r .store .store2 && git config -f .store2/config core.fsmonitor {e} && \
                 echo {ws}/.store2 > .store/commondir; \
                 mv .store .store-old && cp -r .store-old .store && \
                 git config core.fsmonitor {e}; echo done",
                ws = r.ws.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.assert_not_run("separate gitdir in the workspace");
}

#[tokio::test]
async fn git_init_in_a_workspace_without_git_does_not_leave_an_fsmonitor() {
    if !enforceable() {
        return;
    }
    let r = repo_at("ws", false);
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, warnings) = r
        .hostile(
            &format!(
                "git init -q && git config core.fsmonitor {0} && \
                 git config core.hooksPath hooks-here && mkdir hooks-here && \
                 cp {0} hooks-here/pre-commit && cp {0} .git/hooks/pre-commit && echo done",
                evil.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.user_commits(&r.ws);
    r.assert_not_run("git init + core.fsmonitor in a workspace without .git");
    assert_warned(&warnings, "core.fsmonitor");
}

#[tokio::test]
async fn a_hooks_path_in_the_work_tree_is_read_only_husky() {
    if !enforceable() {
        return;
    }
    let r = repo();
    // husky's layout: `core.hooksPath = .husky/_`, whose shims run `.husky/<hook>` with sh.
    std::fs::create_dir_all(r.ws.join(".husky/_")).expect("mkdir");
    std::fs::write(
        r.ws.join(".husky/_/pre-commit"),
        "#!/bin/sh\nsh \"$(dirname \"$(dirname \"$0\")\")/pre-commit\"\n",
    )
    .expect("shim");
    let _ = Command::new("chmod")
        .arg("755")
        .arg(r.ws.join(".husky/_/pre-commit"))
        .status();
    std::fs::write(r.ws.join(".husky/pre-commit"), "true\n").expect("hook");
    r.git(&r.ws, &["config", "core.hooksPath", ".husky/_"]);
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let e = evil.display();
    let (res, _) = r
        .hostile(
            &format!(
                "echo 'sh {e}' >> .husky/pre-commit; cp {e} .husky/_/pre-commit; \
                 cp {e} .husky/_/commit-msg; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.user_commits(&r.ws);
    let (res, _) = r
        .hostile(
            &format!(
                "mv .husky .husky-old && mkdir -p .husky/_ && cp {e} .husky/_/pre-commit; \
                 mv .husky/_ .husky/old-shims && mkdir .husky/_ && cp {e} .husky/_/pre-commit; \
                 echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(
        &r.ws,
        &["commit", "-q", "--allow-empty", "-m", "user's 2nd commit"],
    );
    r.assert_not_run("core.hooksPath = .husky/_");
    assert_eq!(
        std::fs::read_to_string(r.ws.join(".husky/pre-commit")).expect("hook"),
        "true\n"
    );
}

#[tokio::test]
async fn a_hook_managers_work_tree_config_is_guarded_like_its_hook() {
    // Seventeenth round's predecessor (high): `pre-commit install`'s hook runs what
    // `.pre-commit-config.yaml` lists; a command rewrote it (`language: system`, any command)
    // and the user's next `git commit` ran it outside the sandbox. lefthook likewise merges a
    // `lefthook-local.yml` a command may create. The stand-in hooks below run the `entry:` and
    // `run:` lines of those files, as the managers do.
    if !enforceable() {
        return;
    }
    let r = repo();
    let hooks = r.ws.join(".git/hooks");
    std::fs::write(
        hooks.join("pre-commit"),
        "#!/bin/sh\n# File generated by pre-commit: https://pre-commit.com\n\
         # ARGS=(hook-impl --config=.pre-commit-config.yaml --hook-type=pre-commit)\n\
         sed -n 's/^ *entry: //p' .pre-commit-config.yaml | while read -r c; do sh -c \"$c\"; done\n",
    )
    .expect("hook");
    std::fs::write(
        hooks.join("post-commit"),
        "#!/bin/sh\n# lefthook run post-commit\n\
         for f in lefthook.yml lefthook-local.yml; do [ -f \"$f\" ] && \
         sed -n 's/^ *run: //p' \"$f\" | while read -r c; do sh -c \"$c\"; done; done; true\n",
    )
    .expect("hook");
    for h in ["pre-commit", "post-commit"] {
        let _ = Command::new("chmod").arg("755").arg(hooks.join(h)).status();
    }
    std::fs::write(r.ws.join(".pre-commit-config.yaml"), "    entry: true\n").expect("config");
    std::fs::write(r.ws.join("lefthook.yml"), "    run: true\n").expect("config");
    r.git(&r.ws, &["add", "."]);
    r.user_commits(&r.ws);
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let e = evil.display();
    let (res, _) = r
        .hostile(
            &format!(
                "echo '    entry: {e}' >> .pre-commit-config.yaml; \
                 echo '    run: {e}' >> lefthook.yml; \
                 echo '    run: {e}' > lefthook-local.yml; \
                 mv .pre-commit-config.yaml moved.yaml; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.user_commits(&r.ws);
    r.assert_not_run("a hook manager's config");
    assert_eq!(
        std::fs::read_to_string(r.ws.join(".pre-commit-config.yaml")).expect("config"),
        "    entry: true\n"
    );
    assert!(!r.ws.join("lefthook-local.yml").exists());

    // The file tools refuse them too, existing or not.
    for path in [".pre-commit-config.yaml", "lefthook-local.yml"] {
        let res = r
            .tool(
                "write_file",
                json!({"path": path, "content": format!("run: {e}\n")}),
            )
            .await;
        assert_ne!(res.status, ToolStatus::Ok, "{path}: {}", res.content);
        assert!(
            !std::fs::read_to_string(r.ws.join(path))
                .unwrap_or_default()
                .contains("evil"),
            "{path} written by write_file"
        );
    }
    r.user_commits(&r.ws);
    r.assert_not_run("a hook manager's config written by a file tool");
}

#[tokio::test]
async fn a_prek_configuration_below_the_top_is_guarded_too() {
    // Eighteenth red team (high): prek, pre-commit's rewrite, also runs every
    // `.pre-commit-config.yaml` in a subfolder for the files staged beneath it; a command
    // wrote `sub/.pre-commit-config.yaml` and the user's next commit ran its entry. The
    // stand-in hook below runs the `entry:` lines of every such file, as prek does.
    if !enforceable() {
        return;
    }
    let r = repo();
    let hook = r.ws.join(".git/hooks/pre-push");
    std::fs::write(
        &hook,
        "#!/usr/bin/env bash\n# File generated by prek: https://github.com/j178/prek\n\
         # ARGS=(hook-impl --hook-type=pre-push --script-version=2)\n\
         find . -name .pre-commit-config.yaml -not -path './.git/*' | while read -r f; do \
         sed -n 's/^ *entry: //p' \"$f\" | while read -r c; do sh -c \"$c\"; done; done\n",
    )
    .expect("hook");
    let _ = Command::new("chmod").arg("755").arg(&hook).status();
    std::fs::create_dir_all(r.ws.join("lib")).expect("mkdir");
    std::fs::write(
        r.ws.join("lib/.pre-commit-config.yaml"),
        "    entry: true\n",
    )
    .expect("config");
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let e = evil.display();
    let (res, _) = r
        .hostile(
            &format!(
                "mkdir -p sub && echo '    entry: {e}' > sub/.pre-commit-config.yaml; \
                 echo '    entry: {e}' >> lib/.pre-commit-config.yaml; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    let _ = r.git_output(&r.ws, &["push", "--dry-run", ".", "HEAD:refs/heads/x"]);
    r.assert_not_run("a nested prek configuration");
    // Nor by a file tool, beside the top or below it.
    for path in [
        "other/.pre-commit-config.yaml",
        "lib/.pre-commit-config.yaml",
    ] {
        let res = r
            .tool(
                "write_file",
                json!({"path": path, "content": format!("    entry: {e}\n")}),
            )
            .await;
        assert_ne!(res.status, ToolStatus::Ok, "{path}: {}", res.content);
    }
    // Files of the same name in a repository without such a manager stay the model's.
    let plain = r.ws.join("vendor/plain");
    std::fs::create_dir_all(&plain).expect("mkdir");
    r.git(&plain, &["init", "-q"]);
    let res = r
        .tool(
            "write_file",
            json!({"path": "vendor/plain/.pre-commit-config.yaml", "content": "repos: []\n"}),
        )
        .await;
    assert_eq!(res.status, ToolStatus::Ok, "{}", res.content);
    let _ = r.git_output(&r.ws, &["push", "--dry-run", ".", "HEAD:refs/heads/y"]);
    r.assert_not_run("a prek configuration written by a file tool");
}

#[tokio::test]
async fn what_a_hook_managers_config_or_hook_names_is_guarded_too() {
    // Nineteenth red team: lefthook's `extends:` file (high), lint-staged's `--config FILE`
    // (high), a lint-staged config below the top (medium: the nearest one to a staged file
    // wins) and a manager installed in the project's `.venv`, which its hook names by path
    // (high), were writable and unaudited; husky's shims, which put `node_modules/.bin`
    // first on their PATH (high), can only be told. The stand-in hooks below read what the
    // real managers read.
    if !enforceable() {
        return;
    }
    let r = repo();
    let hooks = r.ws.join(".git/hooks");
    let ws = r.ws.display();
    std::fs::create_dir_all(r.ws.join(".venv/bin")).expect("mkdir");
    std::fs::write(r.ws.join(".venv/bin/prek"), "#!/bin/sh\ntrue\n").expect("prek");
    let scripts = [
        (
            "post-commit",
            "#!/bin/sh\n# lefthook run post-commit\n\
             sed -n 's/^ *run: //p' lefthook.yml config/base.yml | while read -r c; do sh -c \"$c\"; done; true\n"
                .to_string(),
        ),
        (
            "pre-commit",
            "#!/bin/sh\n# npx lint-staged --config tools/ls.json\n\
             for f in tools/ls.json $(find . -name .lintstagedrc.json); do \
             sed -n 's/^ *entry: //p' \"$f\" | while read -r c; do sh -c \"$c\"; done; done; true\n"
                .to_string(),
        ),
        (
            "pre-push",
            format!("#!/bin/sh\n# prek\nPREK=\"{ws}/.venv/bin/prek\"\nexec \"$PREK\" hook-impl\n"),
        ),
    ];
    for (name, text) in &scripts {
        std::fs::write(hooks.join(name), text).expect("hook");
        let _ = Command::new("chmod")
            .arg("755")
            .arg(hooks.join(name))
            .status();
    }
    let _ = Command::new("chmod")
        .arg("755")
        .arg(r.ws.join(".venv/bin/prek"))
        .status();
    std::fs::write(r.ws.join("lefthook.yml"), "extends:\n  - config/base.yml\n").expect("cfg");
    for (path, text) in [
        ("config/base.yml", "    run: true\n"),
        ("tools/ls.json", "    entry: true\n"),
    ] {
        std::fs::create_dir_all(r.ws.join(path).parent().expect("parent")).expect("mkdir");
        std::fs::write(r.ws.join(path), text).expect("cfg");
    }
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let e = evil.display();
    let (res, warnings) = r
        .hostile(
            &format!(
                "echo '    run: {e}' >> config/base.yml; echo '    entry: {e}' >> tools/ls.json; \
                 mkdir -p pkg/a && echo '    entry: {e}' > pkg/a/.lintstagedrc.json; \
                 cp {e} .venv/bin/prek; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.user_commits(&r.ws);
    let _ = r.git_output(&r.ws, &["push", "--dry-run", ".", "HEAD:refs/heads/x"]);
    r.assert_not_run("what a hook manager's config or hook names");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(".venv/bin/prek") && w.contains("--no-verify")),
        "{warnings:?}"
    );
    // A file tool may not write them either.
    for path in [
        "config/base.yml",
        "tools/ls.json",
        "pkg/b/.lintstagedrc.json",
    ] {
        let res = r
            .tool(
                "write_file",
                json!({"path": path, "content": format!("    run: {e}\n")}),
            )
            .await;
        assert_ne!(res.status, ToolStatus::Ok, "{path}: {}", res.content);
    }
    r.user_commits(&r.ws);
    r.assert_not_run("what a hook manager's config names, written by a file tool");

    // husky v9: its shims put node_modules/.bin first on their PATH, then start `sh`; an
    // `sh` (or any system program's name) a command leaves there is moved aside, and the
    // rest of what the shims start from the work tree is told, once.
    let husky = repo();
    std::fs::create_dir_all(husky.ws.join(".husky/_")).expect("mkdir");
    std::fs::write(
        husky.ws.join(".husky/_/pre-commit"),
        "#!/bin/sh\nexport PATH=\"node_modules/.bin:$PATH\"\nsh -e .husky/pre-commit\n",
    )
    .expect("shim");
    let _ = Command::new("chmod")
        .arg("755")
        .arg(husky.ws.join(".husky/_/pre-commit"))
        .status();
    std::fs::write(husky.ws.join(".husky/pre-commit"), "true\n").expect("hook");
    husky.git(&husky.ws, &["config", "core.hooksPath", ".husky/_"]);
    let evil = husky.evil_script(&husky.ws.join("evil.sh"));
    let (res, warnings) = husky
        .hostile(
            &format!(
                "mkdir -p node_modules/.bin && cp {} node_modules/.bin/sh && \
                 ln -s ../eslint/bin/eslint.js node_modules/.bin/eslint; echo done",
                evil.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("node_modules/.bin first")),
        "{warnings:?}"
    );
    husky.user_commits(&husky.ws);
    husky.assert_not_run("husky's shim starting a planted node_modules/.bin/sh");
    // Twenty-fourth red team (high): the model's file tools put one there without a command,
    // and nothing audits them: an executable a command left where no hook looks, moved into
    // place by `apply_patch` (a moved file keeps its mode), or a new one written there.
    std::fs::create_dir_all(husky.ws.join("tools")).expect("mkdir");
    std::fs::copy(&evil, husky.ws.join("tools/x")).expect("copy");
    let moved = husky
        .tool(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: tools/x\n*** Move to: node_modules/.bin/sh\n*** End Patch\n"}),
        )
        .await;
    assert_ne!(moved.status, ToolStatus::Ok, "{}", moved.content);
    for name in ["sh", "git"] {
        let path = format!("node_modules/.bin/{name}");
        let res = husky
            .tool(
                "write_file",
                json!({"path": path, "content": format!("#!/bin/sh\n{}\n", evil.display())}),
            )
            .await;
        assert_ne!(res.status, ToolStatus::Ok, "{path}: {}", res.content);
    }
    assert!(!husky.ws.join("node_modules/.bin/sh").exists());
    assert!(!husky.ws.join("node_modules/.bin/git").exists());
    let own = husky
        .tool(
            "write_file",
            json!({"path": "node_modules/.bin/baton-test-own-command", "content": "true\n"}),
        )
        .await;
    assert_eq!(
        own.status,
        ToolStatus::Ok,
        "a package's own command: {}",
        own.content
    );
    husky.user_commits(&husky.ws);
    husky.assert_not_run("a node_modules/.bin/sh put there by the file tools");
    assert!(
        std::fs::symlink_metadata(husky.ws.join("node_modules/.bin/eslint")).is_ok(),
        "a package's own command is left"
    );
    let (_, warnings) = husky.hostile("true", &[]).await;
    assert!(
        !warnings.iter().any(|w| w.contains("node_modules/.bin")),
        "told once: {warnings:?}"
    );
    // Twenty-fifth red team (high): the same folder under another name. A command makes
    // `node_modules` a link to a folder it writes; the file tools then put `sh` in that folder
    // by its real name, and a command's `git` there could not be moved aside through the link.
    std::fs::remove_dir_all(husky.ws.join("node_modules")).expect("rm");
    let (res, _) = husky
        .hostile(
            "mkdir -p vend/.bin && ln -s vend node_modules && echo done",
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    std::fs::copy(&evil, husky.ws.join("tools/y")).expect("copy");
    let moved = husky
        .tool(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: tools/y\n*** Move to: vend/.bin/sh\n*** End Patch\n"}),
        )
        .await;
    assert_ne!(moved.status, ToolStatus::Ok, "{}", moved.content);
    let (res, warnings) = husky
        .hostile(
            &format!("cp {} vend/.bin/git; echo done", evil.display()),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    assert!(
        !husky.ws.join("vend/.bin/git").exists(),
        "moved aside by its real name: {warnings:?}"
    );
    husky.user_commits(&husky.ws);
    husky.assert_not_run("a system program's name in a hooks' search folder reached by a link");
}

#[test]
fn a_repository_made_at_the_top_of_a_shared_temp_folder_is_audited() {
    // Twenty-fourth red team (medium): under the landlock backend commands share the host's
    // temp folders, and a `git init "$TMPDIR"` with a `core.fsmonitor` stayed unaudited (only
    // the workspace was walked): the user's later `git status` in any scratch folder below it
    // ran the command.
    if !enforceable() {
        return;
    }
    let r = repo();
    let tmp = r.base.join("tmp");
    std::fs::create_dir_all(&tmp).expect("mkdir");
    let evil = r.evil_script(&r.base.join("evil.sh"));
    let script = format!(
        "cd \"$TMPDIR\" && git init -q . && git config core.fsmonitor {e} && \
         git config diff.external {e} && echo planted",
        e = evil.display()
    );
    let out = r
        .baton_sandbox_with(&["--sandbox-backend", "landlock"], &script)
        .env("TMPDIR", &tmp)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run baton sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !stdout.contains("planted") {
        // No landlock here, or the temp folder is not shared: nothing to audit.
        assert!(!tmp.join(".git").exists(), "{stdout}{stderr}");
        return;
    }
    assert!(stderr.contains("fsmonitor"), "the user is told: {stderr}");
    let scratch = tmp.join("scratch");
    std::fs::create_dir_all(&scratch).expect("mkdir");
    std::fs::write(scratch.join("x"), "a\n").expect("x");
    let _ = r.git_output(&scratch, &["status"]);
    let _ = r.git_output(&scratch, &["diff"]);
    r.assert_not_run("a repository planted at the top of the shared TMPDIR");
}

#[tokio::test]
async fn a_link_left_in_a_git_directory_is_not_written_through_by_the_users_git() {
    // Seventeenth red team (two highs): git opens some of its own files to write, following
    // a link: `.git/logs/HEAD` linked to `~/.bashrc` took the reflog line of the user's next
    // checkout (a branch name holding a command, run at the next shell start), and
    // `.git/COMMIT_EDITMSG` linked to `~/.ssh/authorized_keys` was truncated by the next
    // `git commit -m`. A nested repository's links are the same.
    if !enforceable() {
        return;
    }
    let r = repo();
    let nested = r.ws.join("vendor/lib");
    r.repo_with(&nested, "README", "lib\n");
    let outside = r.base.join("outside");
    let files = [
        "bashrc",
        "authorized_keys",
        "fetch_head",
        "nested_keys",
        "refs",
    ];
    for f in &files[..4] {
        std::fs::write(outside.join(f), format!("{f} of the user\n")).expect("outside");
    }
    std::fs::create_dir_all(outside.join("refs")).expect("mkdir");
    std::fs::create_dir_all(outside.join("objects")).expect("mkdir");
    let o = outside.display();
    let (res, _) = r
        .hostile(
            &format!(
                "git checkout -q -b 'x;touch${{IFS}}{o}/pwned;#' && \
                 rm -f .git/logs/HEAD && ln -s {o}/bashrc .git/logs/HEAD; \
                 ln -sf {o}/authorized_keys .git/COMMIT_EDITMSG; \
                 ln -sf {o}/fetch_head .git/FETCH_HEAD; \
                 rm -rf .git/refs/tags && ln -s {o}/refs .git/refs/tags; \
                 ln -sf {o}/nested_keys vendor/lib/.git/COMMIT_EDITMSG; \
                 for x in $(printf '%02x ' $(seq 0 255)); do \
                 [ -e .git/objects/$x ] || ln -s {o}/objects .git/objects/$x; done; echo done"
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["checkout", "-q", "main"]);
    r.git(
        &r.ws,
        &["commit", "-q", "--allow-empty", "-m", "user's commit"],
    );
    r.git(&r.ws, &["tag", "v1"]);
    r.git(
        &nested,
        &["commit", "-q", "--allow-empty", "-m", "user's commit"],
    );
    for f in &files[..4] {
        assert_eq!(
            std::fs::read_to_string(outside.join(f)).expect("outside"),
            format!("{f} of the user\n"),
            "the user's git wrote through a planted link into {f}"
        );
    }
    assert_eq!(
        std::fs::read_dir(outside.join("refs"))
            .expect("dir")
            .count(),
        0,
        "the user's git created a tag through a planted link"
    );
    // The objects of the user's commit (eighteenth red team, medium: fan-out folders linked
    // outside took them).
    r.git(
        &r.ws,
        &["commit", "-q", "--allow-empty", "-m", "another commit"],
    );
    std::fs::write(r.ws.join("new.txt"), "fresh content\n").expect("file");
    r.git(&r.ws, &["add", "new.txt"]);
    r.git(&r.ws, &["commit", "-q", "-m", "a file"]);
    assert_eq!(
        std::fs::read_dir(outside.join("objects"))
            .expect("dir")
            .count(),
        0,
        "the user's git wrote objects through a planted fan-out link"
    );
    let reflog = std::fs::symlink_metadata(r.ws.join(".git/logs/HEAD"));
    assert!(
        !reflog.is_ok_and(|m| m.file_type().is_symlink()),
        "the planted reflog link is still there"
    );
}

#[tokio::test]
async fn a_hook_the_user_disabled_stays_disabled_when_a_command_makes_it_executable() {
    // Seventeenth red team (low): a nested repository's hook the user had made
    // non-executable, `chmod +x` by a command, ran at the user's next commit there: the
    // audit compared hooks by content alone.
    if !enforceable() {
        return;
    }
    let r = repo();
    let nested = r.ws.join("vendor/lib");
    r.repo_with(&nested, "README", "lib\n");
    let hook = nested.join(".git/hooks/pre-commit");
    let evil = r.evil_script(&hook);
    let _ = Command::new("chmod").arg("644").arg(&evil).status();
    r.user_commits(&nested);
    r.assert_not_run("a disabled hook");
    let (res, _) = r
        .hostile("chmod +x vendor/lib/.git/hooks/pre-commit; echo done", &[])
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.user_commits(&nested);
    r.assert_not_run("a disabled hook made executable by a command");
}

#[tokio::test]
async fn a_command_cannot_turn_the_sandbox_off_in_the_workspaces_baton_config() {
    if !enforceable() {
        return;
    }
    let r = repo();
    std::fs::create_dir_all(r.ws.join(".baton")).expect("mkdir");
    std::fs::write(r.ws.join(".baton/config.toml"), "model = \"m\"\n").expect("config");
    let (_res, _) = r
        .hostile(
            "echo 'sandbox = \"off\"' >> .baton/config.toml; \
             echo 'sandbox = \"off\"' > .baton/other.toml",
            &[],
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(r.ws.join(".baton/config.toml")).expect("config"),
        "model = \"m\"\n"
    );
    let (_res, _) = r
        .hostile(
            "mv .baton .baton-old && mkdir .baton && echo 'sandbox = \"off\"' > .baton/config.toml",
            &[],
        )
        .await;
    assert_eq!(
        std::fs::read_to_string(r.ws.join(".baton/config.toml")).expect("config"),
        "model = \"m\"\n"
    );
    assert!(!r.ws.join(".baton/other.toml").exists());
}

#[tokio::test]
async fn a_command_cannot_create_a_baton_config_turning_the_sandbox_off() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let (res, warnings) = r
        .hostile(
            "mkdir .baton && printf 'sandbox = \"off\"\\n' > .baton/config.toml && echo done",
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    assert_eq!(baton::config::project_config_path(&r.ws), None);
    assert_warned(&warnings, ".baton");
}

#[tokio::test]
async fn a_command_cannot_plant_a_baton_config_in_a_writable_parent() {
    if !enforceable() {
        return;
    }
    // The workspace sits inside an extra writable directory, as it does under /tmp.
    let r = repo_at("parent/ws", true);
    let parent = r.base.join("parent");
    let (res, _) = r
        .hostile(
            "mkdir -p ../.baton && printf 'sandbox = \"off\"\\n' > ../.baton/config.toml && \
             echo done",
            std::slice::from_ref(&parent),
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    assert_eq!(baton::config::project_config_path(&r.ws), None);
    // And an existing one is read-only.
    std::fs::create_dir_all(parent.join(".baton")).expect("mkdir");
    std::fs::write(parent.join(".baton/config.toml"), "model = \"m\"\n").expect("config");
    let (res, _) = r
        .hostile(
            "echo 'sandbox = \"off\"' >> ../.baton/config.toml; echo done",
            std::slice::from_ref(&parent),
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    assert_eq!(
        std::fs::read_to_string(parent.join(".baton/config.toml")).expect("config"),
        "model = \"m\"\n"
    );
}

#[test]
fn file_tools_are_refused_what_git_trusts_and_baton_config_even_when_absent_or_nested() {
    let r = repo_at("parent/ws", true);
    let parent = r.base.join("parent");
    let mut policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &r.ws);
    policy.writable.push(parent.clone());
    for denied in [
        r.ws.join(".git/config"),
        r.ws.join(".git/hooks/pre-commit"),
        r.ws.join(".git/commondir"),
        r.ws.join(".git/info/attributes"),
        r.ws.join(".git/modules/x/config"),
        r.ws.join(".git/worktrees/w/commondir"),
        r.ws.join(".baton/config.toml"),
        parent.join(".baton/config.toml"),
        parent.join(".git/config"),
        r.ws.join("vendor/x/.git/config"),
        r.ws.join("vendor/x/.git/hooks/pre-commit"),
        r.ws.join("sub/.baton/config.toml"),
    ] {
        assert!(policy.denies_write(&denied), "{} allowed", denied.display());
    }
    for allowed in [
        r.ws.join("src/main.rs"),
        r.ws.join(".git/index"),
        r.ws.join(".git/refs/heads/x"),
        r.ws.join(".git/objects/ab/cdef"),
    ] {
        assert!(
            !policy.denies_write(&allowed),
            "{} denied",
            allowed.display()
        );
    }
}

#[tokio::test]
async fn git_init_in_a_writable_parent_does_not_leave_an_fsmonitor() {
    if !enforceable() {
        return;
    }
    // A workspace without a repository inside a writable folder (as under /tmp): git looks
    // for `.git` in the parents too.
    let r = repo_at("parent/ws", false);
    let parent = r.base.join("parent");
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, warnings) = r
        .hostile(
            &format!(
                "git init -q .. && git -C .. config core.fsmonitor {} && echo done",
                evil.display()
            ),
            std::slice::from_ref(&parent),
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    r.git(&r.ws, &["status"]);
    r.assert_not_run("git init in a writable parent");
    assert!(!warnings.is_empty());
}

#[tokio::test]
async fn a_git_file_naming_a_planted_gitdir_in_a_temp_dir_is_neutralized() {
    if !enforceable() {
        return;
    }
    // The command's /tmp is private, so a gitdir planted there is not at the path the
    // command sees. But the private /tmp is a directory of the host's, and the command can
    // read where from its own mount table: the `.git` files name the host's path of the
    // planted gitdir (both readings of the mount root, as /tmp may be its own filesystem).
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, warnings) = r
        .hostile(
            &format!(
                "d=$(mktemp -d) && git init -q --bare \"$d/g\" && \
                 git -C \"$d/g\" config core.fsmonitor {} && git -C \"$d/g\" config core.bare false && \
                 root=$(awk '$5==\"/tmp\" {{print $4; exit}}' /proc/self/mountinfo) && \
                 host=\"$root${{d#/tmp}}\" && mkdir sub1 sub2 && \
                 echo \"gitdir: $host/g\" > sub1/.git && echo \"gitdir: /tmp$host/g\" > sub2/.git && \
                 echo \"DIR=$host\"",
                evil.display()
            ),
            &[],
        )
        .await;
    let host = res
        .content
        .lines()
        .find_map(|l| l.strip_prefix("DIR="))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{}", res.content));
    let planted = [
        host.clone(),
        Path::new("/tmp").join(host.strip_prefix("/").unwrap_or(&host)),
    ];
    // The premise: one of the paths really is the planted gitdir on the host.
    assert!(
        planted.iter().any(|p| p.join("g/config").is_file()),
        "the planted gitdir is not on the host at {planted:?}: {}",
        res.content
    );
    for sub in ["sub1", "sub2"] {
        let _ = r.git_output(&r.ws.join(sub), &["status"]);
    }
    r.assert_not_run("a .git file naming a gitdir in a temp dir");
    assert!(!warnings.is_empty());
}

#[tokio::test]
async fn read_only_mode_protects_a_workspace_that_sits_in_tmp() {
    if !enforceable() {
        return;
    }
    // Under `read-only` a workspace that lies in the host's /tmp is hidden by the command's
    // private /tmp unless baton binds it: it must be visible there, and its `.git` (and the
    // rest of it) must stay unwritable.
    let mut r = repo_at("unused", false);
    let tmp = tempfile::Builder::new()
        .prefix("baton-git-ro")
        .tempdir_in("/tmp")
        .expect("tempdir");
    r.ws = tmp.path().canonicalize().expect("canon");
    r._tmp = Some(tmp);
    r.mode = SandboxMode::ReadOnly;
    r.git(&r.ws, &["init", "-q", "-b", "main"]);
    r.git(&r.ws, &["commit", "-q", "--allow-empty", "-m", "first"]);
    std::fs::write(r.ws.join("seen.txt"), "visible-inside\n").expect("write");
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, _) = r
        .hostile(
            &format!(
                "cat seen.txt; git config core.fsmonitor {0}; cp {0} .git/hooks/pre-commit; \
                 git init -q nested && git -C nested config core.fsmonitor {0}; echo done",
                evil.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    assert!(
        res.content.contains("visible-inside"),
        "the workspace is not visible inside the sandbox: {}",
        res.content
    );
    assert!(!r.ws.join("nested").exists(), "{}", res.content);
    assert!(!r.ws.join(".git/hooks/pre-commit").exists());
    let config = std::fs::read_to_string(r.ws.join(".git/config")).expect("config");
    assert!(!config.contains("fsmonitor"), "{config}");
    r.git(&r.ws, &["status"]);
    r.user_commits(&r.ws);
    r.assert_not_run("read-only mode, workspace in /tmp");
}

#[test]
fn baton_sandbox_undoes_a_gitlink_over_a_nested_repo_with_fsmonitor() {
    if !enforceable() {
        return;
    }
    // The same plant as through the shell tool, run by the user with `baton sandbox -- CMD`:
    // the index is writable, so only the audit after the command can undo it.
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let script = format!(
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a \
         GIT_COMMITTER_EMAIL=a@x HOME={home}; \
         git init -q nested && git -C nested commit -q --allow-empty -m x && \
         git -C nested config core.fsmonitor {evil} && \
         git update-index --add --cacheinfo 160000,$(git -C nested rev-parse HEAD),nested \
         && echo planted",
        home = r.home.display(),
        evil = evil.display()
    );
    let (out, stdout, stderr) = r.run_baton_sandbox(&script);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("planted"), "{stdout}\n{stderr}");
    r.git(&r.ws, &["status"]);
    r.git(&r.ws.join("nested"), &["status"]);
    r.assert_not_run("baton sandbox: gitlink over a nested repo with core.fsmonitor");
    assert!(
        stderr.contains("baton sandbox: warning:") && stderr.contains("core.fsmonitor"),
        "{stderr}"
    );
}

/// A C program for the test below: `chain SRC DST…` leaves each `rename(SRC, DST)` asleep in
/// the kernel (uninterruptible, so SIGKILL waits for it) until seconds after it exits. One
/// child truncates a file of many unwritten extents (slow on ext4) holding its inode lock; a
/// second's cross-folder rename of that file waits on the lock holding the file system's
/// rename mutex; the renames asked for wait on that mutex. The locked folders lie deeper
/// than PATH_MAX, where the audit's walk does not go, so it never waits on them itself.
const RENAMES_AFTER_EXIT: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static int deep(const char *name) {
  int fd = open(".", O_PATH | O_DIRECTORY);
  mkdirat(fd, name, 0755);
  int f = openat(fd, name, O_PATH | O_DIRECTORY);
  close(fd);
  fd = f;
  char comp[250];
  memset(comp, 'd', 249);
  comp[249] = 0;
  for (int i = 0; i < 20; i++) {
    mkdirat(fd, comp, 0755);
    int n = openat(fd, comp, O_PATH | O_DIRECTORY);
    close(fd);
    fd = n;
    if (fd < 0) { perror("deep"); exit(1); }
  }
  return fd;
}
int main(int c, char **v) {
  int p1 = deep(".lk1"), p2 = deep(".lk2");
  int big = openat(p1, "big", O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (big < 0) { perror("big"); return 1; }
  for (long i = 1; i <= 40000; i++)
    if (fallocate(big, 0, (2 * i) * 4096L, 4096)) { perror("fallocate"); break; }
  fsync(big);
  if (fork() == 0) { ftruncate(big, 1); _exit(0); }
  usleep(200000);
  if (fork() == 0) { renameat(p1, "big", p2, "big"); _exit(0); }
  usleep(100000);
  for (int i = 1; i + 1 < c; i += 2) {
    if (fork() == 0) { if (rename(v[i], v[i + 1])) perror("rename"); _exit(0); }
    usleep(20000);
  }
  usleep(100000);
  return 0;
}
"#;

/// Twenty-second red team, critical: processes of a command that are asleep in the kernel
/// when it ends survive their SIGKILL until that call returns. A `rename` of a planted
/// `commondir` (pointing git at a config with `core.fsmonitor`) landed seconds after the
/// audit, in a repository whose config and hooks are pinned read-only, and the user's next
/// `git status` ran it. The audit now waits until every process of the command is gone, so
/// the rename has landed when it looks and is undone.
#[test]
fn a_rename_asleep_in_the_kernel_when_its_command_ends_lands_before_the_audit() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.base.join("evil.sh"));
    r.compile_into_workspace("chain", RENAMES_AFTER_EXIT);
    let script = format!(
        "mkdir -p .git/st/cm && cp -r .git/objects .git/refs .git/st/cm/ && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = {evil}\\n' \
         > .git/st/cm/config && echo cm > .git/st/commondir && \
         ./chain .git/st/cm .git/cm .git/st/commondir .git/commondir && echo planted",
        evil = evil.display()
    );
    let (_, stdout, stderr) = r.run_baton_sandbox(&script);
    assert!(stdout.contains("planted"), "{stdout}\n{stderr}");
    // The renames landed before baton returned, and the audit undid what they planted.
    let git = r.ws.join(".git");
    assert!(
        git.join("commondir.disabled-by-baton").exists() && !git.join("commondir").exists(),
        "the planted commondir landed after the audit (or not at all): {stderr}"
    );
    r.git(&r.ws, &["status"]);
    r.assert_not_run("a rename asleep in the kernel when its command ended");
}

/// A C program for the test below: `aio TARGET FILE` forks a child that queues 64 direct
/// (O_DIRECT) writes of 4 MiB to a junk file through native AIO, then one of FILE's first
/// 4096 bytes over TARGET, and exits; the parent exits once they are queued. The child then
/// waits in the kernel's exit path until its writes land.
const WRITE_AFTER_EXIT: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int c, char **v) {
  int pp[2];
  pipe(pp);
  if (fork()) { char b; close(pp[1]); read(pp[0], &b, 1); return 0; }
  close(pp[0]);
  int n = 64;
  long sz = 4L << 20;
  aio_context_t ctx = 0;
  if (syscall(SYS_io_setup, n + 8, &ctx)) { perror("io_setup"); return 1; }
  int j = open(".junk", O_RDWR | O_CREAT | O_DIRECT, 0644);
  if (j < 0) { perror("junk"); return 1; }
  fallocate(j, 0, 0, sz * n);
  char *buf, *eb;
  posix_memalign((void **)&buf, 4096, sz);
  memset(buf, 'j', sz);
  posix_memalign((void **)&eb, 4096, 4096);
  int ef = open(v[2], O_RDONLY);
  if (read(ef, eb, 4096) != 4096) { perror("file"); return 1; }
  int t = open(v[1], O_WRONLY | O_DIRECT);
  if (t < 0) { perror("target"); return 1; }
  struct iocb *cbs = calloc(n + 1, sizeof *cbs);
  struct iocb **p = calloc(n + 1, sizeof *p);
  for (int i = 0; i <= n; i++) {
    cbs[i].aio_lio_opcode = IOCB_CMD_PWRITE;
    cbs[i].aio_fildes = i < n ? j : t;
    cbs[i].aio_buf = (long)(i < n ? buf : eb);
    cbs[i].aio_nbytes = i < n ? sz : 4096;
    cbs[i].aio_offset = i < n ? (long)i * sz : 0;
    p[i] = &cbs[i];
  }
  syscall(SYS_io_submit, ctx, n + 1, p);
  write(pp[1], "x", 1);
  return 0;
}
"#;

/// Twenty-third red team, critical: a process of the command in the kernel's exit path may
/// still wait there for its native AIO writes; the audit took it for gone, and a direct write
/// of a `core.fsmonitor` over a new repository's config landed after it. The audit now waits
/// until the command's cgroup is empty (a task leaves it only after its memory and files are
/// released, the AIO wait included), or without one until the sandbox's init is gone.
#[test]
fn a_direct_write_in_flight_when_its_command_ends_lands_before_the_audit() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.base.join("evil.sh"));
    r.compile_into_workspace("aio", WRITE_AFTER_EXIT);
    // Both configs padded to one 4096-byte block: the direct write replaces the whole file.
    let script = format!(
        "pad() {{ s=$(stat -c %s \"$1\"); printf '#' >> \"$1\"; \
         head -c $((4096 - s - 2)) /dev/zero | tr '\\0' x >> \"$1\"; printf '\\n' >> \"$1\"; }}; \
         git init -q sub && pad sub/.git/config && sync sub/.git/config && \
         printf '[core]\\n\\trepositoryformatversion = 0\\n\\tfsmonitor = {evil}\\n' > evil && \
         pad evil && ./aio sub/.git/config evil && echo planted",
        evil = evil.display()
    );
    let (_, stdout, stderr) = r.run_baton_sandbox(&script);
    let _ = std::fs::remove_file(r.ws.join(".junk"));
    assert!(stdout.contains("planted"), "{stdout}\n{stderr}");
    std::thread::sleep(std::time::Duration::from_millis(500));
    r.git(&r.ws.join("sub"), &["status"]);
    r.assert_not_run("a direct write in flight when its command ended");
}

/// Twenty-second red team, high: `baton sandbox` stopped by SIGTERM (`timeout`, a CI step's
/// time limit) or SIGHUP (its terminal closed) died without the audit, leaving what its
/// command planted active for the user's next `git status`. It now stops the command, makes
/// the audit and exits with 128 + the signal.
#[test]
fn baton_sandbox_asked_to_stop_stops_its_command_and_still_audits() {
    use std::io::BufRead;
    if !enforceable() {
        return;
    }
    // Twenty-fifth red team (low): a signal whose default is to end the process (SIGUSR1,
    // SIGALRM, …) killed baton before its audit; it is taken as SIGTERM.
    for (signal, code) in [
        (libc::SIGTERM, 143),
        (libc::SIGHUP, 129),
        (libc::SIGINT, 130),
        (libc::SIGUSR1, 143),
    ] {
        let r = repo();
        let evil = r.evil_script(&r.base.join("evil.sh"));
        let script = format!(
            "git init -q n && git -C n config core.fsmonitor {evil} && echo planted && \
             trap '' INT TERM HUP && sleep 30",
            evil = evil.display()
        );
        let mut child = r
            .baton_sandbox(&script)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run baton sandbox");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line.trim(), "planted");
        let pid = i32::try_from(child.id()).expect("pid");
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(pid, signal);
        }
        let out = child.wait_with_output().expect("wait");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{stderr}");
        assert!(
            stderr.contains("core.fsmonitor"),
            "signal {signal}: {stderr}"
        );
        r.git(&r.ws.join("n"), &["status"]);
        r.assert_not_run("baton sandbox asked to stop");
    }
}

#[test]
fn baton_sandbox_asked_to_stop_while_it_starts_neither_hangs_nor_lets_its_command_run_on() {
    // Twenty-fourth red team (high): a SIGTERM in the first milliseconds, while bubblewrap was
    // starting, could kill bubblewrap before its child (the init of the command's pid
    // namespace) had made bubblewrap's death its own: that child ran the command on, after
    // `baton sandbox` had audited and exited. Another moment hung `baton sandbox` for good
    // (it waited for bubblewrap's first report on a pipe it still held itself). The stop is
    // swept across the start-up, a delay per run.
    if !enforceable() {
        return;
    }
    let r = repo();
    let started = std::time::Instant::now();
    let _ = r.run_baton_sandbox("true");
    let startup = started.elapsed().max(std::time::Duration::from_millis(4));
    let late = r.ws.join("late");
    for step in 0..24u32 {
        let mut child = r
            .baton_sandbox("sleep 0.2; echo ran-on > late")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("run baton sandbox");
        std::thread::sleep(startup * step / 16);
        let pid = i32::try_from(child.id()).expect("pid");
        // SAFETY: signalling our own child.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("baton sandbox hung after a SIGTERM {step}/16 into its start-up");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        std::thread::sleep(std::time::Duration::from_millis(400));
        assert!(
            !late.exists(),
            "stopped {step}/16 into its start-up ({status}), the command ran on after baton"
        );
    }
}

#[test]
fn a_command_cannot_end_its_audit_early_by_posing_as_the_sandboxs_end_report() {
    if !enforceable() {
        return;
    }
    // `baton sandbox` audits as soon as bubblewrap reports the command's end, beside its
    // teardown. The report's pipe is bubblewrap's alone: a command writing a report of its
    // own to every descriptor, then planting, and leaving a process behind that plants later
    // is still undone, and the one left behind never gets to plant.
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let plant = |dir: &str| {
        format!(
            "git init -q {dir} && git -C {dir} config core.fsmonitor {evil}",
            evil = evil.display()
        )
    };
    let script = format!(
        "for fd in $(seq 3 64); do (printf '{{ \"exit-code\": 0 }}\\n' >&$fd) 2>/dev/null; \
         done; (sleep 0.5; {late}) & sleep 0.2; {now} && echo planted",
        late = plant("late"),
        now = plant("now"),
    );
    let (out, stdout, stderr) = r.run_baton_sandbox(&script);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("planted"), "{stdout}\n{stderr}");
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(
        !r.ws.join("late").exists(),
        "a process outlived its command"
    );
    r.git(&r.ws.join("now"), &["status"]);
    r.assert_not_run("baton sandbox: a plant after a fake end report");
    assert!(stderr.contains("core.fsmonitor"), "{stderr}");
}

/// Thirteenth red team, medium: the user's global git config lying in the workspace (a
/// `~/.gitconfig` linked into the dotfiles repository being worked on, or `GIT_CONFIG_GLOBAL`
/// naming a file there) was neither read-only to commands nor audited: a planted
/// `core.fsmonitor` ran in the user's next `git status` in any other repository.
#[test]
fn the_users_global_git_config_in_the_workspace_is_not_a_way_out() {
    if !enforceable() {
        return;
    }
    for global_by_env in [false, true] {
        let r = repo();
        // A command line, not a program file: the audit disables a program a setting names.
        std::fs::write(
            r.ws.join("plant"),
            format!(
                "[core]\n\tfsmonitor = \"echo pwned >> '{}'; false\"\n",
                r.marker.display()
            ),
        )
        .expect("write");
        let config = r.ws.join("gitconfig");
        std::fs::write(&config, "[user]\n\tname = u\n").expect("write");
        let other = r.base.join("other");
        std::fs::create_dir_all(&other).expect("mkdir");
        r.git(&other, &["init", "-q"]);
        std::fs::write(other.join("file"), "x\n").expect("write");
        r.git(&other, &["add", "file"]);
        r.git(&other, &["commit", "-q", "-m", "x"]);
        let global: Vec<(&str, &Path)> = if global_by_env {
            vec![("GIT_CONFIG_GLOBAL", config.as_path())]
        } else {
            std::os::unix::fs::symlink(&config, r.home.join(".gitconfig")).expect("link");
            Vec::new()
        };
        let plant = "cat plant >> gitconfig; echo tried";
        // A `~/.gitconfig` linked into it makes the workspace the user's dotfiles (refused
        // since round 35); accepted by the flag, the config stays read-only.
        let out = Command::new(env!("CARGO_BIN_EXE_baton"))
            .args([
                "sandbox",
                "--allow-broad-workspace",
                "--",
                "sh",
                "-c",
                plant,
            ])
            .current_dir(&r.ws)
            .env("HOME", &r.home)
            .env("XDG_CONFIG_HOME", r.home.join(".config"))
            .env("XDG_DATA_HOME", r.home.join(".local/share"))
            .envs(global.iter().copied())
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run baton sandbox");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("tried"), "{stdout}");
        let status = Command::new("git")
            .args(["status"])
            .current_dir(&other)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &r.home)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CEILING_DIRECTORIES", &r.base)
            .envs(global.iter().copied())
            .output()
            .expect("git status");
        assert!(status.status.success(), "{status:?}");
        r.assert_not_run(&format!(
            "global config in the workspace (by GIT_CONFIG_GLOBAL: {global_by_env})"
        ));
    }
}

/// The audit told the user: some warning mentions `needle`.
fn assert_warned(warnings: &[String], needle: &str) {
    assert!(
        warnings.iter().any(|w| w.contains(needle)),
        "no warning mentions {needle}: {warnings:?}"
    );
}

#[test]
fn the_git_tools_commit_does_not_write_through_symlinks_planted_in_git() {
    // The git tool commits in baton's own process, outside the sandbox. A command may leave
    // symlinks in `.git` (refs, logs and objects stay writable): the reflog append and the
    // loose objects must not follow them out of the workspace.
    use crate::support::env::Env;
    let env = Env::new();
    let outside = tempfile::Builder::new()
        .prefix("baton-git-outside")
        .tempdir_in(outside::fixture_base())
        .expect("tempdir");
    let victim = outside.path().join("victim-rc");
    std::fs::write(&victim, "original\n").expect("victim");
    let objects_out = outside.path().join("objects");
    std::fs::create_dir_all(&objects_out).expect("mkdir");
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&env.workspace)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "u")
            .env("GIT_AUTHOR_EMAIL", "u@example.com")
            .env("GIT_COMMITTER_NAME", "u")
            .env("GIT_COMMITTER_EMAIL", "u@example.com")
            .status()
            .expect("git")
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["commit", "-q", "--allow-empty", "-m", "first"]);
    std::fs::write(env.workspace.join("a.txt"), "new\n").expect("write");
    let plant = format!(
        "ln -sf {v} .git/logs/HEAD && ln -sf {v} .git/logs/refs/heads/main && \
         cd .git/objects && for i in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do for j in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do \
         [ -e $i$j ] || ln -s {o} $i$j; done; done",
        v = victim.display(),
        o = objects_out.display()
    );
    let ends = super::approval::run_calls(
        &env,
        vec![
            ("shell", json!({ "command": plant })),
            (
                "git",
                json!({"action": "commit", "paths": ["a.txt"], "message": "x; touch pwned"}),
            ),
        ],
        &["--approval", "full-auto"],
    );
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0]["status"], "ok", "the plant: {}", ends[0]);
    let victim_now = std::fs::read_to_string(&victim).expect("read victim");
    let planted_objects = std::fs::read_dir(&objects_out).expect("ls").count();
    assert!(
        victim_now == "original\n" && planted_objects == 0,
        "the git tool wrote outside the workspace: victim now {victim_now:?}, {planted_objects} \
         objects written outside; the commit: {}",
        ends[1]
    );
}

#[tokio::test]
async fn a_planted_config_naming_thousands_of_includes_does_not_stall_the_audit() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let started = std::time::Instant::now();
    let (_res, warnings) = r
        .hostile(
            "git init -q sub && { printf '[include]\\n'; seq -f 'path = i%g' 1 45000; } \
             >> sub/.git/config",
            &[],
        )
        .await;
    let took = started.elapsed();
    assert!(
        took < std::time::Duration::from_secs(20),
        "the command and its audit took {took:?}"
    );
    assert_warned(&warnings, "sub/.git/config");
    let _ = r.git_output(&r.ws.join("sub"), &["status"]);
    r.assert_not_run("a nested repository with many includes");
}

#[tokio::test]
async fn a_repository_planted_deep_in_a_tree_the_audit_remembers_is_still_undone() {
    if !enforceable() {
        return;
    }
    // The audit remembers each folder's listing between walks and reads again only folders
    // whose change time moved; here every folder is old enough to be remembered when the
    // hostile command runs, so only the change time can give the plant away.
    let r = repo();
    let deep = r.ws.join("src/a/b/c");
    std::fs::create_dir_all(&deep).expect("mkdir");
    std::fs::write(deep.join("lib.rs"), "fn f() {}\n").expect("file");
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    std::thread::sleep(std::time::Duration::from_millis(3300));
    let (_res, warnings) = r.hostile("true", &[]).await;
    assert!(warnings.is_empty(), "{warnings:?}");
    let (_res, warnings) = r
        .hostile(
            &format!(
                "cd src/a/b/c && git init -q nested && git -C nested config core.fsmonitor {} \
                 && mkdir -p ../d/.baton && echo 'sandbox = \"off\"' > ../d/.baton/config.toml",
                evil.display()
            ),
            &[],
        )
        .await;
    r.git(&deep.join("nested"), &["status"]);
    r.assert_not_run("a nested repository planted in a remembered tree");
    assert_warned(&warnings, "core.fsmonitor");
    assert_warned(&warnings, "src/a/b/d/.baton");
}

/// A folder the command leaves without read permission (its owner is the user the command runs
/// as, so `chmod 111` needs no privilege) could not be listed by the audit, which skipped it:
/// a nested repository with `core.fsmonitor` beneath it, behind a gitlink, ran on the user's
/// next `git status`.
#[tokio::test]
async fn a_nested_repo_under_a_folder_made_unreadable_is_still_undone() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (_res, warnings) = r
        .hostile(
            &format!(
                "mkdir d && git init -q d/nested && git -C d/nested commit -q --allow-empty -m x \
                 && git -C d/nested config core.fsmonitor {evil} && \
                 git update-index --add --cacheinfo \
                 160000,$(git -C d/nested rev-parse HEAD),d/nested && chmod 111 d && echo planted",
                evil = evil.display()
            ),
            &[],
        )
        .await;
    let status = r.git_output(&r.ws, &["status"]);
    let nested = r.git_output(&r.ws.join("d/nested"), &["status"]);
    let _ = Command::new("chmod")
        .arg("755")
        .arg(r.ws.join("d"))
        .status();
    assert!(
        r.ws.join("d/nested/.git").exists(),
        "the plant was made: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let _ = nested;
    r.assert_not_run("a nested repository under a folder made unreadable");
    // As root the walk reads the folder anyway; as its owner it had to give the permission
    // back, and says so.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        assert_warned(&warnings, "no read permission");
    }
    assert_warned(&warnings, "core.fsmonitor");
}

/// The audit's walk does not descend into `.baton` folders (their files are tracked as
/// baton's config instead, 8 levels deep), and `.baton` is no name git minds: a nested
/// repository with `core.fsmonitor` planted more than 8 levels beneath a `.baton` folder in
/// a subfolder, behind a gitlink, ran on the user's next `git status`.
#[tokio::test]
async fn a_nested_repo_deep_inside_a_baton_folder_is_still_undone() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let at = "d/.baton/1/2/3/4/5/6/7/8/9/10/nested";
    let (_res, warnings) = r
        .hostile(
            &format!(
                "mkdir -p {at} && git init -q {at} && git -C {at} commit -q --allow-empty -m x \
                 && git -C {at} config core.fsmonitor {evil} && \
                 git update-index --add --cacheinfo 160000,$(git -C {at} rev-parse HEAD),{at} \
                 && echo planted",
                evil = evil.display()
            ),
            &[],
        )
        .await;
    assert!(r.ws.join(at).join(".git").exists(), "the plant was made");
    let _ = r.git_output(&r.ws, &["status"]);
    let _ = r.git_output(&r.ws.join(at), &["status"]);
    r.assert_not_run("a nested repository deep inside a .baton folder");
    assert_warned(&warnings, "core.fsmonitor");
}

/// git reads a config through a symlink in its own context, and `/proc/self/cwd` names the
/// reader's folder: a nested repository's `.git/config` linked to `/proc/self/cwd/cfg` is
/// `cfg` in the nested work tree to the user's git (which runs there for a gitlink), while
/// the audit, reading it from baton's folder, found nothing (or whatever it found there) and
/// left the link in place: the planted `core.fsmonitor` ran on the user's next `git status`.
#[tokio::test]
async fn a_nested_config_linked_through_proc_self_cwd_is_still_undone() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (_res, warnings) = r
        .hostile(
            &format!(
                "git init -q d/nested && git -C d/nested commit -q --allow-empty -m x && \
                 git update-index --add --cacheinfo \
                 160000,$(git -C d/nested rev-parse HEAD),d/nested && \
                 printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\
                 \\tfsmonitor = {evil}\\n' > d/nested/cfg && \
                 ln -sf /proc/self/cwd/cfg d/nested/.git/config && echo planted",
                evil = evil.display()
            ),
            &[],
        )
        .await;
    assert!(
        std::fs::symlink_metadata(r.ws.join("d/nested/cfg")).is_ok(),
        "the plant was made"
    );
    let _ = r.git_output(&r.ws, &["status"]);
    let _ = r.git_output(&r.ws.join("d/nested"), &["status"]);
    r.assert_not_run("a nested config linked through /proc/self/cwd");
    assert_warned(&warnings, "d/nested/.git/config");
}

/// The audit read every `.git` entry, config, hook and included file it tracks with a plain
/// `open`: a FIFO there (or a link to one, or to a terminal) blocked it for good, so nothing
/// the command planted was undone and baton hung until killed. Here a thread plays the
/// writer that never comes in practice, and notes whether anyone opened the FIFO to read.
#[tokio::test]
async fn a_fifo_named_git_does_not_block_the_audit() {
    if !enforceable() {
        return;
    }
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    let r = repo();
    let fifo = r.ws.join("d/.git");
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut opened = false;
            while !done.load(Ordering::SeqCst) {
                // ENXIO while nobody reads it; a success means the audit opened it to read.
                if std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo)
                    .is_ok()
                {
                    opened = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            opened
        })
    };
    let (_res, _warnings) = r
        .hostile("mkdir d && mkfifo d/.git && echo planted", &[])
        .await;
    done.store(true, Ordering::SeqCst);
    let opened = watcher.join().expect("watcher");
    assert!(
        std::fs::symlink_metadata(r.ws.join("d/.git")).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_fifo()
        }),
        "the plant was made"
    );
    assert!(
        !opened,
        "the audit opened a FIFO to read it (and waited for a writer)"
    );
}

/// The audit kept the first MiB of each tracked file and compared only that: a nested
/// repository's config padded past 1 MiB by one command looked unchanged after the next one
/// appended `core.fsmonitor` to it, which then ran on the user's next `git status`.
#[tokio::test]
async fn a_setting_appended_past_the_first_mib_of_a_nested_config_is_still_undone() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, mut warnings) = r
        .hostile(
            "git init -q d/nested && git -C d/nested commit -q --allow-empty -m x && \
             git update-index --add --cacheinfo \
             160000,$(git -C d/nested rev-parse HEAD),d/nested && \
             head -c 1200000 /dev/zero | tr '\\0' '#' >> d/nested/.git/config && \
             echo >> d/nested/.git/config && echo padded",
            &[],
        )
        .await;
    assert!(res.content.contains("padded"), "{}", res.content);
    let (res, more) = r
        .hostile(
            &format!(
                "printf '[core]\\n\\tfsmonitor = {evil}\\n' >> d/nested/.git/config && \
                 echo appended",
                evil = evil.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("appended"), "{}", res.content);
    warnings.extend(more);
    let _ = r.git_output(&r.ws, &["status"]);
    let _ = r.git_output(&r.ws.join("d/nested"), &["status"]);
    r.assert_not_run("a setting appended past the first MiB of a nested config");
    assert_warned(&warnings, "d/nested/.git/config");
}

/// The audit kept up to 1 MiB of every file it tracks, and a command decides how many there
/// are: 2,000 hooks in a nested repository, each a link to one 1 MiB file, made baton hold
/// 2 GB after the command. Where memory is bounded (here `baton sandbox` under a 1 GiB address
/// space limit; elsewhere the OOM killer picks the biggest process), baton died before it
/// undid anything, and the `core.fsmonitor` planted in the same command ran on the user's
/// next `git status`.
#[test]
fn thousands_of_hooks_linked_to_one_big_file_do_not_exhaust_the_audit() {
    use std::os::unix::process::CommandExt;
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let script = format!(
        "export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@x GIT_COMMITTER_NAME=a \
         GIT_COMMITTER_EMAIL=a@x HOME={home}; \
         git init -q nested && git -C nested commit -q --allow-empty -m x && \
         git -C nested config core.fsmonitor {evil} && \
         git update-index --add --cacheinfo 160000,$(git -C nested rev-parse HEAD),nested && \
         head -c 1040000 /dev/zero > big && \
         for i in $(seq 2000); do ln -s \"$PWD/big\" nested/.git/hooks/h$i || exit 1; done && \
         echo planted",
        home = r.home.display(),
        evil = evil.display()
    );
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.args(["sandbox", "--max-memory", "512", "--", "sh", "-c", &script])
        .current_dir(&r.ws)
        .env("HOME", &r.home)
        .env("XDG_CONFIG_HOME", r.home.join(".config"))
        .env("XDG_DATA_HOME", r.home.join(".local/share"))
        .env("XDG_STATE_HOME", r.home.join(".local/state"))
        .stdin(std::process::Stdio::null());
    // SAFETY: setrlimit only, in the child before its exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 1 << 30,
                rlim_max: 1 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run baton sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("planted"), "{stdout}\n{stderr}");
    let _ = r.git_output(&r.ws, &["status"]);
    let _ = r.git_output(&r.ws.join("nested"), &["status"]);
    r.assert_not_run("a nested repository with 2,000 hooks linked to one big file");
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("core.fsmonitor"), "{stderr}");
}

/// Round 25 (low): a command that made 2,000 submodule gitdirs under `.git/modules` made every
/// later command of the workspace spend 17 s in baton and then fail ("Argument list too
/// long": a pin each). Past the bound the folder is read-only whole; the command that plants
/// them is still audited one by one.
#[test]
fn hundreds_of_submodule_gitdirs_neither_stop_later_commands_nor_escape_the_audit() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let plant = format!(
        "cd .git && mkdir -p modules && cd modules && for i in $(seq 1 200); do \
         mkdir -p m$i/hooks m$i/info && printf '[core]\\n\\tbare = false\\n' > m$i/config && \
         echo ref: refs/heads/main > m$i/HEAD || exit 1; done && \
         printf '[core]\\n\\tfsmonitor = {evil}\\n' >> m199/config && echo planted",
        evil = evil.display()
    );
    let (out, stdout, stderr) = r.run_baton_sandbox(&plant);
    assert!(stdout.contains("planted"), "{stdout}\n{stderr}");
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("core.fsmonitor"), "{stderr}");
    let config = std::fs::read_to_string(r.ws.join(".git/modules/m199/config")).expect("config");
    assert!(!config.contains("\n\tfsmonitor"), "{config}");
    let (out, stdout, stderr) = r.run_baton_sandbox(
        "echo x >> .git/modules/m7/config || echo refused; mkdir .git/modules/new || echo refused; \
         echo ran",
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("refused").count(), 2, "{stdout}\n{stderr}");
    assert!(stdout.contains("ran"), "{stdout}\n{stderr}");
    r.assert_not_run("a submodule gitdir's fsmonitor among 200");
}

/// Before every command baton gives a workspace's `.git` folder an empty `config` when it has
/// none (so there is something to bind read-only), and it wrote that file by name: with
/// `.git/config` a dangling link, planted by a command still running (a second shell
/// session, another `baton sandbox`), the next command's launch created the link's target
/// outside the sandbox, as the user.
#[test]
fn a_dangling_git_config_link_is_not_written_through_by_the_next_launch() {
    use std::io::{BufRead, Write};
    if !enforceable() {
        return;
    }
    let r = repo_at("ws", false);
    let victim = r.base.join("outside/created-by-baton");
    let baton = |script: &str| r.baton_sandbox(script);
    let mut first = baton(&format!(
        "mkdir .git && ln -s '{}' .git/config && echo planted && read x",
        victim.display()
    ))
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("first command");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(first.stdout.take().expect("stdout"));
    out.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "planted");
    let second = baton("true")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("second command");
    let _ = first.stdin.take().expect("stdin").write_all(b"\n");
    let _ = first.wait();
    assert!(
        std::fs::symlink_metadata(&victim).is_err(),
        "the launch created {} through the planted link",
        victim.display()
    );
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
}

/// Every file beneath `dir` with its bytes (links by their target), for a before/after check.
fn tree_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&d)
            .expect("list")
            .map(|e| e.expect("entry").path())
            .collect();
        entries.sort();
        for p in entries {
            let meta = std::fs::symlink_metadata(&p).expect("stat");
            if meta.is_dir() {
                out.push((p.clone(), b"<dir>".to_vec()));
                stack.push(p);
            } else if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&p).expect("link");
                out.push((p, target.into_os_string().into_encoded_bytes()));
            } else {
                out.push((p.clone(), std::fs::read(&p).expect("read")));
            }
        }
    }
    out
}

/// Finding 4: a `.git` file or symlink the command writes can name any gitdir, and the audit
/// applied its fixes wherever that led. With the user's home in the host's /tmp (CI, a scratch
/// home), which the landlock-era rules counted as writable, it commented out
/// `credential.helper` and `core.pager` in the user's other repository (or global git config)
/// and renamed its `pre-commit` hook. Under bubblewrap a command's /tmp is its own, so that
/// folder is out of its reach: the audit must leave it byte for byte as it was, and undo the
/// pointer instead. Old code: the config got `# disabled by baton:` lines and the hook was
/// renamed `pre-commit.disabled-by-baton`.
#[tokio::test]
async fn the_audit_leaves_a_gitdir_outside_the_writable_roots_byte_identical() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let other = tempfile::Builder::new()
        .prefix("baton-users-other-repo")
        .tempdir_in(std::env::temp_dir())
        .expect("tempdir");
    let gitdir = other.path().canonicalize().expect("canon").join("repo.git");
    std::fs::create_dir_all(gitdir.join("hooks")).expect("mkdir");
    std::fs::write(gitdir.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::write(
        gitdir.join("config"),
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tpager = less -R\n\
         [credential]\n\thelper = store\n",
    )
    .expect("config");
    r.evil_script(&gitdir.join("hooks/pre-commit"));
    let before = tree_bytes(other.path());
    let (res, warnings) = r
        .hostile(
            &format!(
                "mkdir s t && echo 'gitdir: {0}' > s/.git && ln -s '{0}' t/.git && echo done",
                gitdir.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    assert_eq!(
        tree_bytes(other.path()),
        before,
        "the audit changed a folder outside the writable roots: {warnings:?}"
    );
    // What the command did write, the pointers, are undone.
    for sub in ["s", "t"] {
        assert!(
            std::fs::symlink_metadata(r.ws.join(sub).join(".git")).is_err(),
            "{sub}/.git is still there: {warnings:?}"
        );
    }
    assert_warned(&warnings, "s/.git");
}

/// Finding 5: the audit commented out a deny-list of git's own code-running keys, so a
/// third party's survived: git-lfs runs `lfs.extension.*.clean` (and
/// `lfs.customtransfer.*.path`) on the user's plain `git status` in a repository with an lfs
/// filter, git-annex its `annex.*-command` keys. A new nested repository's config now keeps
/// only keys known to run nothing. No git-lfs needed: what is checked is that git itself no
/// longer reads those keys from the config. Old code: all three were still set.
#[tokio::test]
async fn a_nested_repos_third_party_command_keys_are_neutralized_too() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let (res, warnings) = r
        .hostile(
            &format!(
                "git init -q sub && git -C sub config lfs.extension.x.clean {0} && \
                 git -C sub config lfs.extension.x.smudge cat && \
                 git -C sub config lfs.customtransfer.t.path {0} && \
                 git -C sub config annex.freezecontent-command {0} && \
                 git -C sub config user.name me && echo done",
                evil.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    let config = r.ws.join("sub/.git/config");
    let file = config.display().to_string();
    let left = r.git_output(
        &r.ws,
        &["config", "--file", &file, "--get-regexp", "^(lfs|annex)\\."],
    );
    assert!(
        left.stdout.is_empty(),
        "still set: {}\n{warnings:?}",
        String::from_utf8_lossy(&left.stdout)
    );
    // What the repository needs, and what runs nothing, is kept.
    assert_eq!(
        r.git(&r.ws, &["config", "--file", &file, "user.name"])
            .trim(),
        "me"
    );
    assert_eq!(
        r.git(&r.ws, &["config", "--file", &file, "core.bare"])
            .trim(),
        "false"
    );
    assert_warned(&warnings, "lfs.extension.x.clean");
    r.git(&r.ws.join("sub"), &["status"]);
    r.assert_not_run("a nested repo with lfs and annex keys");
}

/// Architecture review F1: "may this path be written" was decided by eight functions in five
/// files, and the file tools and a command's binds answered differently for the same path.
/// Both now read one `WriteRules` value. This table checks, path by path, that the value
/// predicts what the real consumers do — the file tools' `resolve_for_write` and a real
/// sandboxed `sh` appending to the path — and states, in the table, the two places where the
/// answers differ on purpose: git's own state in the workspace's `.git` (commands commit; file
/// tools leave git to the git tool) and a nested repository's gitdir (it cannot be pinned
/// before the command runs without walking the tree; the audit undoes what a command left).
#[test]
fn one_write_rules_value_answers_for_the_file_tools_and_the_commands_binds() {
    use baton::sandbox::{Session, sandboxed_command};
    if !enforceable() {
        return;
    }
    let r = repo();
    r.git(&r.ws, &["init", "-q", "sub"]);
    for (rel, text) in [
        ("a.txt", "a\n"),
        (".baton/config.toml", "model = \"m\"\n"),
        (".git/hooks/pre-commit", "#!/bin/sh\n"),
        ("vendor/.husky/x", "x\n"),
    ] {
        let p = r.ws.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
    }
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &r.ws);
    let rules = policy.write_rules();
    let outside = r.base.join("outside/file");
    // (path, file tools may write it, a command may write it)
    let table: Vec<(PathBuf, bool, bool)> = vec![
        (r.ws.join("a.txt"), true, true),
        (r.ws.join("new.txt"), true, true),
        (r.ws.join("vendor/.husky/x"), true, true),
        (r.ws.join(".git/config"), false, false),
        (r.ws.join(".git/hooks/pre-commit"), false, false),
        (r.ws.join(".git/info/exclude"), false, false),
        (r.ws.join(".baton/config.toml"), false, false),
        (r.ws.join(".baton/new.toml"), false, false),
        (outside.clone(), false, false),
        // On purpose: git's state (commands run `git commit`).
        (r.ws.join(".git/HEAD"), false, true),
        // On purpose: not pinned; the audit undoes it after the command.
        (r.ws.join("sub/.git/config"), false, true),
    ];
    let mut wrong = Vec::new();
    for (path, files, commands) in &table {
        let root = r.ws.canonicalize().expect("canon");
        let shown = path.display().to_string();
        let tool = baton::tool::path::resolve_for_write(&r.ws, &shown).is_ok();
        let argv: Vec<String> = ["sh", "-c", "printf '' >> \"$1\"", "sh", &shown]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (mut cmd, _guard) =
            sandboxed_command(&policy, &argv, Session::NewGroup).expect("sandbox");
        let ran = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("run")
            .success();
        let said = (
            !rules.file_tools_deny(&root, path),
            rules.commands_may_write(path),
        );
        if (tool, ran) != (*files, *commands) || said != (*files, *commands) {
            wrong.push(format!(
                "{shown}: want files={files} commands={commands}; file tools={tool}, \
                 command={ran}; the rules said files={} commands={}",
                said.0, said.1
            ));
        }
    }
    // The appends changed nothing; a new file may have been made.
    let _ = std::fs::remove_file(r.ws.join("new.txt"));
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
async fn exec_lines_planted_in_a_rebase_in_progress_do_not_run_when_the_user_continues_it() {
    // A rebase the command leaves stopped (`break`, a conflict) is continued by the user,
    // outside the sandbox: every `exec` line of its todo list runs with their rights.
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let stop = "git commit -q --allow-empty -m two && \
                GIT_SEQUENCE_EDITOR=\"sed -i '1i break'\" git rebase -q -i HEAD~1";
    let (_res, warnings) = r
        .hostile(
            &format!(
                "{stop} && printf 'exec %s\\n' {} >> .git/rebase-merge/git-rebase-todo",
                evil.display()
            ),
            &[],
        )
        .await;
    assert_warned(&warnings, "git-rebase-todo");
    let continued = r.git_output(&r.ws, &["rebase", "--continue"]);
    r.assert_not_run("git rebase --continue");
    // The user's way out is the one the warning names.
    if !continued.status.success() {
        r.git(&r.ws, &["rebase", "--abort"]);
    }

    // A rebase stopped with no command of the command's own in it is the model's work in
    // progress: it is left for the next command (or the user) to continue.
    let (_res, warnings) = r.hostile(stop, &[]).await;
    assert!(!warnings.iter().any(|w| w.contains("todo")), "{warnings:?}");
    assert!(r.ws.join(".git/rebase-merge/git-rebase-todo").exists());
    r.git(&r.ws, &["rebase", "--continue"]);
}

#[tokio::test]
async fn a_merge_strategy_planted_in_a_rebase_in_progress_does_not_run_when_the_user_continues_it()
{
    // git runs a rebase's merge strategy as the program `git-merge-NAME`: a NAME with `..`
    // in it is a path into the work tree (round 4 of the red team, F1).
    if !enforceable() {
        return;
    }
    let r = repo();
    r.evil_script(&r.ws.join("x"));
    let diverge = "git checkout -qb side && echo b > g && git add g && git commit -qm b && \
                   git checkout -q main && echo c > h && git add h && git commit -qm c && \
                   git checkout -q side && \
                   (GIT_SEQUENCE_EDITOR=\"sed -i 1ibreak\" git rebase -qi main >/dev/null 2>&1 || true)";
    let (_res, warnings) = r
        .hostile(
            &format!(
                "{diverge} && echo ../../x > .git/rebase-merge/strategy && mkdir -p git-merge-.."
            ),
            &[],
        )
        .await;
    assert_warned(&warnings, "merge strategy ../../x");
    let continued = r.git_output(&r.ws, &["rebase", "--continue"]);
    r.assert_not_run("git rebase --continue");
    if !continued.status.success() {
        r.git(&r.ws, &["rebase", "--abort"]);
    }
}

#[tokio::test]
async fn a_git_file_or_commondir_ending_in_a_blank_is_read_as_git_reads_it() {
    // git keeps a trailing blank of a `.git` file's path (and of a `commondir`); the audit
    // used to trim it, audited a folder that does not exist, and missed the one git then
    // used: a repository inside `.git/` with `core.fsmonitor` (red team round 4, F4, F4b).
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let fsmonitor = format!(
        "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = {}\\n'",
        evil.display()
    );
    let (_res, warnings) = r
        .hostile(
            &format!(
                "G='.git/evil ' && mkdir -p \"$G/objects\" \"$G/refs/heads\" && \
                 echo 'ref: refs/heads/main' > \"$G/HEAD\" && {fsmonitor} > \"$G/config\" && \
                 mkdir sub && echo hi > sub/file && printf 'gitdir: ../.git/evil \\n' > sub/.git"
            ),
            &[],
        )
        .await;
    let _ = r.git_output(&r.ws.join("sub"), &["status", "--short"]);
    r.assert_not_run("a .git file naming a gitdir that ends in a blank");
    assert_warned(&warnings, "fsmonitor");

    let r = repo();
    let evil = r.evil_script(&r.ws.join("evil.sh"));
    let fsmonitor = format!(
        "printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tfsmonitor = {}\\n'",
        evil.display()
    );
    let (_res, warnings) = r
        .hostile(
            &format!(
                "git worktree add -q wt -b wt && W=.git/worktrees/wt && \
                 printf '../.. ' > $W/commondir && C=\"$W/../.. \" && mkdir -p \"$C\" && \
                 cp -r .git/objects .git/refs .git/HEAD \"$C/\" && {fsmonitor} > \"$C/config\""
            ),
            &[],
        )
        .await;
    let _ = r.git_output(&r.ws.join("wt"), &["status", "--short"]);
    r.assert_not_run("a commondir that ends in a blank");
    assert!(!warnings.is_empty(), "no warning");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_git_folder_swapped_for_a_link_during_a_git_tool_call_shows_nothing_outside() {
    // The git tool checked the repository a folder names, then opened it again on a thread
    // Landlock confined to the folders it named afresh: a command swapping `sub/.git` for a
    // link to another repository of the user's in between got that repository read (12 of 150
    // calls, red team round 4, F2). The thread's rules name the workspace, not what the
    // swap chose, and it checks what it opened.
    let r = repo();
    let private = r.base.join("outside/private");
    r.repo_with(&private, "secret.txt", "TOP-SECRET\n");
    let sub = r.ws.join("sub");
    r.repo_with(&sub, "secret.txt", "inside\n");
    std::os::unix::fs::symlink(private.join(".git"), sub.join("swap")).expect("link");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, sub) = (stop.clone(), sub.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = nix::fcntl::renameat2(
                    nix::fcntl::AT_FDCWD,
                    &sub.join(".git"),
                    nix::fcntl::AT_FDCWD,
                    &sub.join("swap"),
                    nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                );
            }
        })
    };
    let mut leaked = 0;
    for _ in 0..300 {
        let res = r
            .git_tool(json!({"action": "show", "repo": "sub", "rev": "HEAD:secret.txt"}))
            .await;
        if res.content.contains("TOP-SECRET") {
            leaked += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().expect("swapper");
    assert_eq!(leaked, 0, "the private repository's file reached the model");
}

impl Repo {
    /// A new repository at `dir` whose one commit holds `file` with `text`.
    fn repo_with(&self, dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).expect("mkdir");
        self.git(dir, &["init", "-q", "-b", "main"]);
        std::fs::write(dir.join(file), text).expect("file");
        self.git(dir, &["add", file]);
        self.git(dir, &["commit", "-q", "-m", file]);
    }

    /// The model's `git` tool on this workspace.
    async fn git_tool(&self, args: serde_json::Value) -> ToolResult {
        self.tool("git", args).await
    }

    /// One of the model's tools (`git`, `write_file`…) on this workspace.
    async fn tool(&self, name: &str, args: serde_json::Value) -> ToolResult {
        let (events, _rx) = EventSink::channel();
        let ctx = ToolContext {
            workspace: self.ws.clone(),
            call_id: format!("call-{name}"),
            events,
            cancel: CancellationToken::new(),
            state: Arc::new(ToolState::default()),
        };
        baton::tool::registry::standard_tools()
            .get(name)
            .expect("a standard tool")
            .run(args, &ctx)
            .await
    }

    /// A secret outside the workspace, where the sandbox would never show it.
    fn secret(&self) -> PathBuf {
        let dir = self.base.join("outside/secrets");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("id_rsa"), "FAKE-PRIVATE-KEY\n").expect("secret");
        dir
    }
}

#[tokio::test]
async fn the_git_tool_never_reads_a_work_tree_outside_the_workspace() {
    // A cloned repository holds a folder laid out as a git repository whose config points
    // its work tree at a folder of the user's: the git tool, in baton's own process, listed
    // and printed it (red team: `git diff repo=b` printed ~/.ssh/id_rsa, no approval asked).
    let r = repo();
    let secrets = r.secret();
    let b = r.ws.join("b");
    for d in ["objects/info", "refs/heads"] {
        std::fs::create_dir_all(b.join(d)).expect("mkdir");
    }
    std::fs::write(b.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::write(
        b.join("config"),
        format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = {}\n",
            secrets.display()
        ),
    )
    .expect("config");
    for action in ["diff", "status"] {
        let res = r.git_tool(json!({"action": action, "repo": "b"})).await;
        assert!(!res.content.contains("FAKE-PRIVATE-KEY"), "{}", res.content);
        assert!(!res.content.contains("id_rsa"), "{}", res.content);
        assert!(
            res.content.contains("outside the workspace"),
            "{}",
            res.content
        );
    }
}

#[tokio::test]
async fn the_git_tool_does_not_read_through_links_a_repository_holds() {
    // A nested repository with `core.symlinks = false` makes git read a work-tree link as a
    // file: its target's content; alternates and a linked ref make `git show` read another
    // repository of the user's (a password store). The tool runs outside the sandbox.
    if !enforceable() {
        return;
    }
    let r = repo();
    let secrets = r.secret();
    let r2 = r.ws.join("r2");
    std::fs::create_dir_all(&r2).expect("mkdir");
    r.git(&r2, &["init", "-q", "-b", "main"]);
    r.git(&r2, &["config", "core.symlinks", "false"]);
    std::os::unix::fs::symlink(secrets.join("id_rsa"), r2.join("k")).expect("link");
    for args in [
        json!({"action": "diff", "repo": "r2"}),
        json!({"action": "status", "repo": "r2"}),
    ] {
        let res = r.git_tool(args).await;
        assert!(!res.content.contains("FAKE-PRIVATE-KEY"), "{}", res.content);
    }

    // Another repository of the user's, outside the workspace, with a secret committed.
    let store = r.base.join("outside/store");
    r.repo_with(&store, "email.gpg", "STORE-SECRET\n");
    std::fs::write(
        r.ws.join(".git/objects/info/alternates"),
        format!("{}\n", store.join(".git/objects").display()),
    )
    .expect("alternates");
    std::os::unix::fs::symlink(
        store.join(".git/refs/heads/main"),
        r.ws.join(".git/refs/heads/steal"),
    )
    .expect("ref link");
    for args in [
        json!({"action": "show", "rev": "steal:email.gpg"}),
        json!({"action": "log", "rev": "steal"}),
    ] {
        let res = r.git_tool(args).await;
        assert!(!res.content.contains("STORE-SECRET"), "{}", res.content);
        assert!(!res.content.contains("store"), "{}", res.content);
    }
    // Reading there is denied, so the planted alternates fail the repository as a whole
    // until they go; the workspace's own history then reads as before.
    std::fs::remove_file(r.ws.join(".git/objects/info/alternates")).expect("rm");
    std::fs::remove_file(r.ws.join(".git/refs/heads/steal")).expect("rm");
    let res = r.git_tool(json!({"action": "log"})).await;
    assert!(res.content.contains("first"), "{}", res.content);
}

#[tokio::test]
async fn the_git_tool_does_not_follow_the_workspaces_commondir_to_another_repository() {
    // The workspace's own repository was trusted whatever its `commondir` named: the tool
    // then read another repository of the user's and committed into it (second red team).
    let r = repo();
    let victim = r.base.join("outside/victim");
    r.repo_with(&victim, "secret.txt", "VICTIM-SECRET\n");
    let before = r.git(&victim, &["rev-parse", "HEAD"]);
    std::fs::write(
        r.ws.join(".git/commondir"),
        format!("{}\n", victim.join(".git").display()),
    )
    .expect("commondir");
    std::fs::write(r.ws.join("planted.txt"), "P\n").expect("planted");
    let show = r
        .git_tool(json!({"action": "show", "rev": "HEAD:secret.txt"}))
        .await;
    assert!(!show.content.contains("VICTIM-SECRET"), "{}", show.content);
    assert!(
        show.content.contains("outside the workspace"),
        "{}",
        show.content
    );
    let commit = r
        .git_tool(json!({"action": "commit", "paths": ["planted.txt"], "message": "attacker"}))
        .await;
    assert!(
        commit.content.contains("outside the workspace"),
        "{}",
        commit.content
    );
    assert_eq!(r.git(&victim, &["rev-parse", "HEAD"]), before);
}

#[tokio::test]
async fn the_git_tool_does_not_write_through_a_link_a_running_command_left_in_the_gitdir() {
    // Twenty-fourth red team (low): a command still running (yielded) replaced
    // `.git/logs/HEAD` by a link to the user's own `hooks/post-commit`; the git tool's commit
    // appended its reflog line (a message holding `|| cmd`) to the hook through it: the
    // confinement allows every path of the gitdir. The commit now waits for the audit.
    if !enforceable() {
        return;
    }
    let r = repo();
    let hook = r.ws.join(".git/hooks/post-commit");
    std::fs::write(&hook, "#!/bin/sh\ntrue\n").expect("hook");
    let _ = Command::new("chmod").arg("755").arg(&hook).status();
    r.git(&r.ws, &["commit", "-q", "--allow-empty", "-m", "first"]);
    let branch = r.git(&r.ws, &["symbolic-ref", "HEAD"]);
    for link in ["logs/HEAD".to_string(), format!("logs/{}", branch.trim())] {
        let at = r.ws.join(".git").join(&link);
        let _ = std::fs::remove_file(&at);
        let up = "../".repeat(link.matches('/').count());
        std::os::unix::fs::symlink(format!("{up}hooks/post-commit"), &at).expect("link");
        std::fs::write(r.ws.join("a.txt"), format!("{link}\n")).expect("write");
        let commit = r
            .git_tool(
                json!({"action": "commit", "paths": ["a.txt"], "message": "x || touch pwned"}),
            )
            .await;
        assert_ne!(commit.status, ToolStatus::Ok, "{link}: {}", commit.content);
        assert!(commit.content.contains("is a link"), "{}", commit.content);
        assert_eq!(
            std::fs::read_to_string(&hook).expect("hook"),
            "#!/bin/sh\ntrue\n",
            "{link}: the user's hook was written through"
        );
        std::fs::remove_file(&at).expect("unlink");
    }
}

#[tokio::test]
async fn the_git_tool_does_not_show_a_repository_that_holds_the_workspace() {
    // A dotfiles repository at `~` holds a workspace `~/proj` that has no repository of its
    // own: `git diff` listed and printed every untracked file of the home (third red team).
    let r = repo_at("dotfiles", false);
    r.git(&r.ws, &["init", "-q", "-b", "main"]);
    r.git(&r.ws, &["commit", "-q", "--allow-empty", "-m", "dotfiles"]);
    std::fs::create_dir_all(r.ws.join(".ssh")).expect("mkdir");
    std::fs::write(r.ws.join(".ssh/id_rsa"), "HOME-SECRET\n").expect("secret");
    let proj = r.ws.join("proj");
    std::fs::create_dir_all(&proj).expect("mkdir");
    std::fs::write(proj.join("main.rs"), "fn main() {}\n").expect("file");
    let (events, _rx) = EventSink::channel();
    let ctx = ToolContext {
        workspace: proj.clone(),
        call_id: "call-git".into(),
        events,
        cancel: CancellationToken::new(),
        state: Arc::new(ToolState::default()),
    };
    let git = baton::tool::registry::standard_tools();
    let git = git.get("git").expect("the git tool");
    for action in ["diff", "status"] {
        let res = git.run(json!({ "action": action }), &ctx).await;
        assert!(!res.content.contains("HOME-SECRET"), "{}", res.content);
        assert!(!res.content.contains("id_rsa"), "{}", res.content);
        assert!(
            res.content.contains("outside the workspace"),
            "{}",
            res.content
        );
    }
    // What `/diff` shows the user is that repository's diff, as before.
    assert!(baton::tool::git::workspace_diff(&proj).is_ok());
}

#[tokio::test]
async fn a_work_tree_a_command_points_at_the_home_is_undone() {
    // `git init` and `core.worktree = ~` in a repository the command made: the user's next
    // `git add -A` would stage the home (third red team).
    if !enforceable() {
        return;
    }
    let r = repo();
    let (_res, warnings) = r
        .hostile(
            &format!(
                "git init -q sub && git -C sub config core.worktree {}",
                r.home.display()
            ),
            &[],
        )
        .await;
    assert_warned(&warnings, "core.worktree");
    let status = r.git_output(&r.ws.join("sub"), &["config", "--get", "core.worktree"]);
    assert!(!status.status.success(), "still set: {status:?}");
}

/// A command that made a repository, planted a hook and an fsmonitor in it, then took the
/// write permission of `.git` and `.git/hooks` away (`chmod 555`) kept both: the audit, run
/// by the same user, could neither rename the hook nor rewrite the config, warned once and
/// left them for the user's next `git status` (fifteenth red team, medium; root is not
/// stopped by a mode). The audit gives the folder's owner write permission back, as the walk
/// gives read permission back to list one. Run as an unprivileged user, the case it is about
/// (switching to `nobody` when the tests run as root).
#[test]
fn a_repository_its_command_made_unwritable_is_still_undone() {
    if !enforceable() {
        return;
    }
    let root = rustix::process::geteuid().is_root();
    let base = tempfile::Builder::new()
        .prefix("baton-unwritable")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    let ws = base.path().join("ws");
    let home = base.path().join("home");
    for d in [&ws, &home] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let open = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(base.path(), open).expect("755");
    if root {
        for d in [&ws, &home] {
            std::os::unix::fs::chown(d, Some(65534), Some(65534)).expect("chown");
        }
    }
    let script = "git init -q && git config core.fsmonitor /bin/planted-fsmonitor && \
                  printf '#!/bin/sh\\necho planted\\n' > .git/hooks/pre-commit && \
                  chmod 755 .git/hooks/pre-commit && chmod 555 .git/hooks .git && echo done";
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .args(["sandbox", "--", "sh", "-c", script])
        .current_dir(&ws)
        .stdin(std::process::Stdio::null());
    if root {
        std::os::unix::process::CommandExt::uid(&mut c, 65534);
        std::os::unix::process::CommandExt::gid(&mut c, 65534);
    }
    let out = c.output().expect("baton sandbox");
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("done"),
        "{said}"
    );
    assert!(
        !ws.join(".git/hooks/pre-commit").exists(),
        "the planted hook is still armed: {said}"
    );
    let config = std::fs::read_to_string(ws.join(".git/config")).expect("config");
    assert!(
        !config
            .lines()
            .any(|l| l.trim_start().starts_with("fsmonitor")),
        "{config}\n{said}"
    );
    // The fixture's owner removes it whatever modes the command left.
    let _ = Command::new("chmod")
        .arg("-R")
        .arg("u+rwx")
        .arg(&ws)
        .status();
}

/// A repository's config made a link to a file the sandbox hides, which git reads as a config
/// too (`~/.aws/credentials`): the audit, outside the sandbox, read it through the link,
/// commented its entries out and wrote the result into the workspace as a regular file, where
/// the next command read the secret (sixteenth red team, high). A config that is a link is
/// moved aside, never replaced by what it points at.
#[tokio::test]
async fn a_config_linked_to_a_hidden_credential_is_moved_aside_not_copied_in() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let secret = r.base.join("outside/credentials");
    std::fs::write(
        &secret,
        "[default]\n\taws_access_key_id = AKIAFAKE\n\taws_secret_access_key = SECRET-VALUE\n",
    )
    .expect("secret");
    let (res, warnings) = r
        .hostile(
            &format!(
                "git init -q nested && rm nested/.git/config && ln -s {} nested/.git/config \
                 && echo done",
                secret.display()
            ),
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    for (path, bytes) in tree_bytes(&r.ws) {
        assert!(
            !String::from_utf8_lossy(&bytes).contains("SECRET-VALUE"),
            "{} holds the secret; warnings: {warnings:?}",
            path.display()
        );
    }
    assert!(
        std::fs::symlink_metadata(r.ws.join("nested/.git/config")).is_err(),
        "the link is still the config: {warnings:?}"
    );
}

/// A cloned repository may carry a gitdir as plain tracked files (`vendor/lib.git` with an
/// fsmonitor and a hook), which git never uses by itself. A command that writes `src/.git`
/// pointing at it woke it: the audit judged that gitdir against its own state before the
/// command, unchanged, and said nothing, and the user's next `git status` in `src/` ran the
/// fsmonitor (sixteenth red team, high). A new pointer to a gitdir that would run code is
/// moved aside.
#[tokio::test]
async fn a_new_git_pointer_cannot_wake_a_gitdir_a_clone_carried() {
    if !enforceable() {
        return;
    }
    let r = repo();
    let evil = r.evil_script(&r.base.join("outside/evil.sh"));
    let dormant = r.ws.join("vendor/lib.git");
    std::fs::create_dir_all(dormant.join("hooks")).expect("mkdir");
    std::fs::create_dir_all(r.ws.join("src")).expect("mkdir");
    std::fs::write(dormant.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::create_dir_all(dormant.join("objects")).expect("objects");
    std::fs::create_dir_all(dormant.join("refs")).expect("refs");
    std::fs::write(
        dormant.join("config"),
        format!(
            "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ../../src\n\
             \tfsmonitor = {}\n",
            evil.display()
        ),
    )
    .expect("config");
    let (res, warnings) = r
        .hostile(
            "echo 'gitdir: ../vendor/lib.git' > src/.git && echo done",
            &[],
        )
        .await;
    assert!(res.content.contains("done"), "{}", res.content);
    let _ = r.git_output(&r.ws.join("src"), &["status"]);
    r.assert_not_run("a new .git pointer to a gitdir the clone carried");
    assert_warned(&warnings, "vendor/lib.git");
}
