//! Red team round 7, finding 04 (high): the file tools read and wrote what the sandbox hides
//! from commands. With `~/.config` as the workspace (accepted without
//! `--allow-broad-workspace`), `shell` could not see `gh/hosts.yml` but `read_file` and `grep`
//! returned it to the model, and `write_file baton/hooks.json` planted a hook every later
//! session ran outside the sandbox; with the home as a broad workspace, `~/.ssh/id_rsa` and
//! `~/.aws/credentials` were read the same way.
//!
//! The fix is one answer (`sandbox::WriteRules::hides`, read from the world bubblewrap builds
//! for the policy): the tests here check that commands and the file tools get the same answer
//! for a table of paths, that the real binary never hands a hidden file to the model nor
//! writes baton's own configuration, and that a workspace holding baton's configuration is a
//! broad one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton::protocol::{EventSink, SandboxMode, ToolStatus};
use baton::sandbox::{SandboxPolicy, Session, sandboxed_command};
use baton::tool::registry::standard_tools;
use baton::tool::{ToolContext, ToolResult, ToolState};
use serde_json::{Value, json};

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script};

/// Every fixture file holds this and its own path, so a leak is seen in any output.
const MARK: &str = "HIDDEN-TABLE-MARK";

/// The environment variable naming the child's home (the parent made it).
const TABLE_HOME: &str = "BATON_TEST_HIDDEN_TABLE_HOME";

/// The table: for each workspace (relative to the home; "" is the home itself, a broad
/// workspace), the files in it and whether commands must not see them.
const TABLE: &[(&str, &[(&str, bool)])] = &[
    (
        ".config",
        &[
            ("gh/hosts.yml", true),
            ("gcloud/application_default_credentials.json", true),
            ("op/config", true),
            ("git/credentials", true),
            ("baton/hooks.json", true),
            ("baton/config.toml", true),
            ("git/ignore", false),
            ("nvim/init.lua", false),
        ],
    ),
    (
        "",
        &[
            (".ssh/id_rsa", true),
            (".aws/credentials", true),
            (".docker/config.json", true),
            (".cargo/config.toml", true),
            (".bash_history", true),
            (".config/gh/hosts.yml", true),
            (".config/baton/hooks.json", true),
            (".local/share/baton/history.jsonl", true),
            (".cache/baton/ptx/k.ptx", true),
            (".cargo/env", false),
            (".bashrc", false),
            (".config/nvim/init.lua", false),
            ("notes/todo.txt", false),
        ],
    ),
];

async fn call(ctx: &ToolContext, tool: &str, args: Value) -> ToolResult {
    standard_tools().get(tool).unwrap().run(args, ctx).await
}

fn context(workspace: &Path) -> ToolContext {
    let (events, _rx) = EventSink::channel();
    ToolContext {
        workspace: workspace.to_path_buf(),
        call_id: "table".into(),
        events,
        cancel: Default::default(),
        state: Arc::new(ToolState::default()),
    }
}

/// What `cat PATH` prints inside the sandbox of `policy`.
fn cat_in_sandbox(policy: &SandboxPolicy, path: &Path) -> String {
    let argv = vec!["cat".to_string(), path.display().to_string()];
    // A command the sandbox could not start (under the suite's load another test's socket
    // the world covers can vanish between the look and the mount, a documented way for one
    // command to fail) is tried again; `cat`'s own answer is not.
    let mut attempts = 0;
    loop {
        attempts += 1;
        let (mut cmd, _guard) =
            sandboxed_command(policy, &argv, Session::NewGroup).expect("sandbox prepares");
        let out = cmd
            .current_dir(&policy.workspace)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("spawn");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || stderr.starts_with("cat:") || attempts == 3 {
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        println!(
            "the sandbox could not start `cat` ({}), again",
            stderr.trim()
        );
    }
}

/// Commands and the file tools get the same answer for each path of [`TABLE`]: a command's
/// `cat` (or, where the kernel cannot run the sandbox, the world bubblewrap would be given)
/// does not see the file exactly when `read_file` and `write_file` refuse it, `grep` over the
/// workspace leaves it out, and both match the table. A `--read` naming baton's own
/// configuration does not show it to commands either. Runs in a child process whose HOME is a
/// throwaway folder (the world and the tools read the home from the environment). The git
/// tool's diff and commit in a dotfiles repository at `~/.config` leave the hidden files out.
/// The old code let the tools read every hidden file, the git tool diff and commit them, and
/// showed `~/.config/baton` to a `--read` naming it.
#[test]
fn commands_and_file_tools_hide_the_same_paths() {
    let root = tempfile::Builder::new()
        .prefix("baton-hidden")
        .tempdir_in(crate::support::outside::fixture_base())
        .unwrap();
    let home = root.path().canonicalize().unwrap().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "escape::hidden::hidden_table_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_clear()
        .env("HOME", &home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(TABLE_HOME, &home)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "the child failed:\n{text}");
    assert!(
        text.contains("TABLE CHECKED"),
        "the child checked nothing:\n{text}"
    );
}

/// The child half of the test above.
#[test]
#[ignore = "run by commands_and_file_tools_hide_the_same_paths"]
fn hidden_table_child() {
    let Some(home) = std::env::var_os(TABLE_HOME).map(PathBuf::from) else {
        return;
    };
    for (ws, rows) in TABLE {
        for (path, _) in *rows {
            let file = home.join(ws).join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            let shown = file.strip_prefix(&home).unwrap().display().to_string();
            std::fs::write(&file, format!("{MARK} {shown}\n")).unwrap();
        }
    }
    // The broad-workspace check and the sandbox name the same folders of baton's own.
    assert_eq!(
        baton::config::workspace::own_dirs(),
        baton::sandbox::visibility::baton_dirs()
    );
    let enforced = baton::sandbox::probe().enforceable;
    println!("commands run in the sandbox: {enforced}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (ws, rows) in TABLE {
        let ws = home.join(ws).canonicalize().unwrap();
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws);
        let world = baton::sandbox::bwrap::world(&policy).unwrap();
        let ctx = context(&ws);
        let grep = runtime.block_on(call(
            &ctx,
            "grep",
            json!({"pattern": MARK, "path": ".", "hidden": true}),
        ));
        for (path, hidden) in *rows {
            let abs = ws.join(path);
            let commands_hide = if enforced {
                !cat_in_sandbox(&policy, &abs).contains(MARK)
            } else {
                !world.shows_host(&abs)
            };
            let read = runtime.block_on(call(&ctx, "read_file", json!({"path": path})));
            let refused = |r: &ToolResult| {
                r.status == ToolStatus::Error && r.content.contains("out of the model's sight")
            };
            let before = std::fs::read(&abs).unwrap();
            let write = runtime.block_on(call(
                &ctx,
                "write_file",
                json!({"path": path, "content": "planted\n"}),
            ));
            let after = std::fs::read(&abs).unwrap();
            // A visible file read first is written: put it back for the next workspace.
            std::fs::write(&abs, &before).unwrap();
            let shown = abs.strip_prefix(&home).unwrap().display().to_string();
            let in_grep = grep.content.contains(&format!("{MARK} {shown}"));
            println!(
                "{}/{path}: commands hide {commands_hide}, read_file refuses {}, write_file \
                 refuses {}, grep shows {in_grep}",
                ws.display(),
                refused(&read),
                refused(&write)
            );
            assert_eq!(commands_hide, *hidden, "{path}: commands");
            assert_eq!(
                refused(&read),
                *hidden,
                "{path}: read_file: {}",
                read.content
            );
            assert_eq!(
                read.content.contains(MARK),
                !*hidden,
                "{path}: {}",
                read.content
            );
            assert_eq!(
                refused(&write),
                *hidden,
                "{path}: write_file: {}",
                write.content
            );
            assert_eq!(in_grep, !*hidden, "{path}: grep: {}", grep.content);
            if *hidden {
                assert_eq!(before, after, "{path} was written");
            }
        }
    }
    // A dotfiles repository at ~/.config: the git tool's diff shows untracked content and its
    // commit stages what a folder holds; neither takes what the model may not see.
    let dotfiles = home.join(".config").canonicalize().unwrap();
    for args in [
        &["init", "-q"][..],
        &["config", "user.name", "t"],
        &["config", "user.email", "t@t"],
    ] {
        crate::support::env::git_in(&dotfiles, args);
    }
    let ctx = context(&dotfiles);
    let diff = runtime.block_on(call(&ctx, "git", json!({"action": "diff"})));
    assert_eq!(diff.status, ToolStatus::Ok, "{}", diff.content);
    assert!(diff.content.contains("nvim/init.lua"), "{}", diff.content);
    assert!(!diff.content.contains(".config/gh/"), "{}", diff.content);
    assert!(!diff.content.contains(".config/baton/"), "{}", diff.content);
    let commit = runtime.block_on(call(
        &ctx,
        "git",
        json!({"action": "commit", "paths": ["."], "message": "dotfiles"}),
    ));
    assert_eq!(commit.status, ToolStatus::Ok, "{}", commit.content);
    let committed =
        crate::support::env::git_in(&dotfiles, &["ls-tree", "-r", "--name-only", "HEAD"]);
    assert!(committed.contains("nvim/init.lua"), "{committed}");
    for hidden in ["gh/", "gcloud/", "op/", "git/credentials", "baton/"] {
        assert!(
            !committed.contains(hidden),
            "{hidden} committed: {committed}"
        );
    }
    // A `--read` shows a credential it names, never baton's own configuration.
    let proj = home.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    let mut policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &proj);
    policy.readable = vec![home.join(".config/baton"), home.join(".aws")];
    let world = baton::sandbox::bwrap::world(&policy).unwrap();
    for (path, hidden) in [
        (".config/baton/config.toml", true),
        (".aws/credentials", false),
    ] {
        let abs = home.join(path);
        let commands_hide = if enforced {
            !cat_in_sandbox(&policy, &abs).contains(MARK)
        } else {
            !world.shows_host(&abs)
        };
        assert_eq!(commands_hide, hidden, "--read {path}");
    }
    println!("TABLE CHECKED");
}

/// One `baton --exec` session in `dir` (full-auto: nothing waits for approval) whose model
/// makes `calls`; returns the `tool_end` events and every request the engine received, as
/// text.
pub(super) fn session(
    env: &Env,
    dir: &Path,
    calls: &[(&str, Value)],
    extra: &[&str],
) -> (Vec<Value>, String) {
    let mut script = Script::new().route("L2");
    for (i, (tool, args)) in calls.iter().enumerate() {
        script = script.answer(
            "L2",
            MockReply::tool_call(format!("call_{i}"), *tool, args.to_string()),
        );
    }
    let engine = MockEngine::scripted_blocking(script.answer("L2", "done."));
    let sandbox = if baton::sandbox::probe().enforceable {
        "workspace-write"
    } else {
        "off"
    };
    let dir = dir.display().to_string();
    let mut args = vec![
        "--json",
        "--sandbox",
        sandbox,
        "--approval",
        "full-auto",
        "-C",
        &dir,
    ];
    args.extend_from_slice(extra);
    let out = env
        .exec(&engine, "look around", &args)
        .output()
        .expect("run baton");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ends = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_end")
        .collect();
    let sent: String = engine
        .requests()
        .iter()
        .map(|r| serde_json::to_string(r.messages()).unwrap_or_default())
        .collect();
    (ends, sent)
}

/// The file tools ask what a command's world would show: asking made that world's private
/// `/tmp` folder on the host (`$TMPDIR/baton-sandbox-UID-PID`, left behind), even with the
/// sandbox off, where no command ever uses it.
#[test]
fn file_tools_leave_no_private_tmp_folder_behind() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "hello\n").expect("write");
    let tmpdir = tempfile::tempdir().expect("tempdir");
    let script = Script::new()
        .route("L2")
        .answer(
            "L2",
            MockReply::tool_call("c0", "read_file", json!({"path": "notes.txt"}).to_string()),
        )
        .answer(
            "L2",
            MockReply::tool_call("c1", "list_dir", json!({"path": "."}).to_string()),
        )
        .answer("L2", "done.");
    let engine = MockEngine::scripted_blocking(script);
    let out = env
        .exec(
            &engine,
            "look",
            &["--json", "--sandbox", "off", "--approval", "full-auto"],
        )
        .env("TMPDIR", tmpdir.path())
        .output()
        .expect("run baton");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("hello"),
        "the file tool did not run: {stdout}"
    );
    let left: Vec<String> = std::fs::read_dir(tmpdir.path())
        .expect("read tmpdir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("baton-sandbox-"))
        .collect();
    assert!(left.is_empty(), "private /tmp folders left: {left:?}");
}

/// The reproducer of finding 04 through the real binary: with `~/.config` as the workspace
/// (accepted with the flag), `read_file`, `grep`, `glob`, `list_dir` and `outline` never
/// hand `gh/hosts.yml` to the model, and `write_file`, `edit` and `apply_patch` never create
/// `baton/hooks.json`; with the home as the workspace, `~/.ssh/id_rsa` and
/// `~/.aws/credentials` stay out of every answer. The old code sent both tokens to the
/// engine and wrote the hook.
#[test]
fn the_binary_never_hands_hidden_files_to_the_model_nor_writes_batons_config() {
    let env = Env::new();
    let config = env.home.join(".config");
    std::fs::create_dir_all(config.join("gh")).unwrap();
    std::fs::write(config.join("gh/hosts.yml"), "oauth_token: gho_SECRET_04\n").unwrap();
    std::fs::create_dir_all(env.home.join(".ssh")).unwrap();
    std::fs::write(env.home.join(".ssh/id_rsa"), "KEY_SECRET_04\n").unwrap();
    std::fs::create_dir_all(env.home.join(".aws")).unwrap();
    std::fs::write(env.home.join(".aws/credentials"), "AWS_SECRET_04\n").unwrap();
    let hook = json!({"hooks": {"SessionStart": [{"hooks": [
        {"type": "command", "command": "touch /nonexistent/HOOK_RAN"}
    ]}]}})
    .to_string();
    let patch =
        format!("*** Begin Patch\n*** Add File: baton/hooks.json\n+{hook}\n*** End Patch\n");
    let (ends, sent) = session(
        &env,
        &config,
        &[
            ("read_file", json!({"path": "gh/hosts.yml"})),
            ("read_file", json!({"path": config.join("gh/hosts.yml")})),
            (
                "grep",
                json!({"pattern": "SECRET", "path": ".", "hidden": true}),
            ),
            ("grep", json!({"pattern": "SECRET", "path": "gh"})),
            ("glob", json!({"pattern": "**/*.yml"})),
            ("list_dir", json!({"path": ".", "hidden": true})),
            ("list_dir", json!({"path": "gh"})),
            ("outline", json!({"path": "."})),
            (
                "write_file",
                json!({"path": "baton/hooks.json", "content": hook}),
            ),
            ("apply_patch", json!({"input": patch})),
            (
                "write_file",
                json!({"path": "gh/hosts.yml", "content": "x"}),
            ),
        ],
        &["--allow-broad-workspace"],
    );
    assert_eq!(ends.len(), 11, "{ends:?}");
    for end in &ends {
        assert!(!end.to_string().contains("gho_SECRET_04"), "{end}");
    }
    // The walks of the whole workspace (grep, glob, list_dir, outline) leave gh/ out.
    for walk in [2, 4, 5, 7] {
        assert!(
            !ends[walk].to_string().contains("hosts.yml"),
            "{}",
            ends[walk]
        );
    }
    for refused in [0, 1, 3, 6, 8, 9, 10] {
        assert!(
            ends[refused]
                .to_string()
                .contains("out of the model's sight"),
            "{}",
            ends[refused]
        );
    }
    assert!(
        !sent.contains("gho_SECRET_04"),
        "the token reached the engine"
    );
    assert!(
        !config.join("baton/hooks.json").exists(),
        "write_file or apply_patch created ~/.config/baton/hooks.json"
    );
    assert_eq!(
        std::fs::read_to_string(config.join("gh/hosts.yml")).unwrap(),
        "oauth_token: gho_SECRET_04\n"
    );

    let (ends, sent) = session(
        &env,
        &env.home,
        &[
            ("read_file", json!({"path": ".ssh/id_rsa"})),
            (
                "grep",
                json!({"pattern": "SECRET", "path": ".", "hidden": true}),
            ),
            ("grep", json!({"pattern": "SECRET", "path": ".aws"})),
            ("read_file", json!({"path": ".config/baton/config.toml"})),
        ],
        &["--allow-broad-workspace"],
    );
    assert_eq!(ends.len(), 4, "{ends:?}");
    for secret in ["KEY_SECRET_04", "AWS_SECRET_04", "gho_SECRET_04"] {
        assert!(!sent.contains(secret), "{secret} reached the engine");
    }
}

/// A workspace or `--write` folder holding baton's own configuration or state (`~/.config`,
/// `~/.local/share`, `~/.cache`), or inside it, is refused like the other broad workspaces,
/// also where the folder does not exist yet, and accepted with the flag. The old code took
/// `-C ~/.config` and `--write ~/.config` silently.
#[test]
fn a_workspace_holding_batons_config_is_a_broad_workspace() {
    let env = Env::new();
    let engine =
        MockEngine::scripted_blocking(Script::new().default_route("L2").default_answer("hi"));
    let config = env.home.join(".config");
    let inside = config.join("baton");
    let data = env.home.join(".local/share");
    let cache = env.home.join(".cache");
    for d in [&inside, &data, &cache] {
        std::fs::create_dir_all(d).unwrap();
    }
    let project = env.workspace.display().to_string();
    let cases: Vec<Vec<String>> = vec![
        vec!["-C".into(), config.display().to_string()],
        vec!["-C".into(), inside.display().to_string()],
        vec!["-C".into(), data.display().to_string()],
        vec!["-C".into(), cache.display().to_string()],
        vec![
            "-C".into(),
            project.clone(),
            "--write".into(),
            config.display().to_string(),
        ],
    ];
    for case in &cases {
        let args: Vec<&str> = case.iter().map(String::as_str).collect();
        let out = env
            .exec(
                &engine,
                "hello",
                &[&["--sandbox", "workspace-write"], &args[..]].concat(),
            )
            .output()
            .expect("run baton");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case:?}: {stderr}");
        assert!(
            stderr.contains("--allow-broad-workspace"),
            "{case:?}: {stderr}"
        );
        assert!(stderr.contains("baton's own"), "{case:?}: {stderr}");
    }
    assert!(engine.requests().is_empty(), "a request was sent");
    // A folder of baton's that does not exist yet counts the same.
    std::fs::remove_dir_all(&inside).unwrap();
    let out = env
        .exec(
            &engine,
            "hello",
            &[
                "--sandbox",
                "workspace-write",
                "-C",
                &config.display().to_string(),
            ],
        )
        .output()
        .expect("run baton");
    assert_eq!(out.status.code(), Some(2));
    // With the flag it runs (and baton's folder is made, for the sandbox to hide).
    let out = env
        .exec(
            &engine,
            "hello",
            &[
                "--sandbox",
                "workspace-write",
                "-C",
                &config.display().to_string(),
                "--allow-broad-workspace",
            ],
        )
        .output()
        .expect("run baton");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(inside.is_dir(), "~/.config/baton was not made");
}

/// With the home as a broad workspace, a turn's undo snapshots leave out what the sandbox
/// hides (eleventh red team, low: the store kept `~/.ssh`'s key and `gh`'s token, every
/// version a turn saw).
#[test]
fn undo_snapshots_leave_out_what_the_sandbox_hides() {
    let env = Env::new();
    let home = env.home.clone();
    std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVKEY_IN_STORE\n").expect("key");
    std::fs::write(home.join("notes.txt"), "x\n").expect("notes");
    let calls = [("shell", json!({"command": "echo y >> notes.txt"}))];
    let (ends, _) = session(&env, &home, &calls, &["--allow-broad-workspace"]);
    assert_eq!(ends.len(), 1, "{ends:?}");
    let stores: Vec<PathBuf> = std::fs::read_dir(home.join(".local/share/baton/checkpoints"))
        .expect("a checkpoint store")
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(!stores.is_empty());
    for store in stores {
        let out = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&store)
            .args(["cat-file", "--batch-all-objects", "--batch"])
            .output()
            .expect("git cat-file");
        let objects = String::from_utf8_lossy(&out.stdout);
        assert!(objects.contains("notes.txt"), "the turn was not snapshot");
        assert!(
            !objects.contains("PRIVKEY_IN_STORE"),
            "the key is in {}",
            store.display()
        );
    }
}
