//! End to end: the real `baton` binary (TUI over the agent core) against the mock engine, in a
//! real terminal (tmux). Types a prompt, watches the streamed answer and the expert in the
//! status line, approves a command in the modal, runs /undo (the file comes back), quits with
//! Ctrl+C twice, and checks the terminal was restored and the conversation printed.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::{MockEngine, MockReply, Script};

struct Tmux {
    socket: String,
    /// Where the pane's shell writes baton's exit code: tmux 3.3 does not always record a
    /// dead pane's status, so the tests read it from here.
    exit_file: std::path::PathBuf,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn capture(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "t", "-S", "-200"])
    }

    fn format(&self, f: &str) -> String {
        self.cmd(&["display-message", "-p", "-t", "t", f])
            .trim()
            .to_string()
    }

    /// Waits until the pane shows `needle` (the deadline only guards against a hung run).
    fn wait_for(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.capture();
            if screen.contains(needle) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "'{needle}' never appeared; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the pane no longer shows `needle`.
    fn wait_for_gone(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let screen = self.capture();
            if !screen.contains(needle) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "'{needle}' still shown after {within:?}; screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the approval modal on screen takes keys (it ignores those typed within
    /// its arming delay, and says so).
    fn wait_until_armed(&self) {
        self.wait_for_gone("answer in a moment", Duration::from_secs(30));
    }

    /// baton's exit code as the pane's shell saw it ("143" after SIGTERM).
    fn exit_code(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(code) = std::fs::read_to_string(&self.exit_file)
                && !code.trim().is_empty()
            {
                return code.trim().to_string();
            }
            if Instant::now() > deadline {
                return String::new();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of baton itself (the child of the pane's shell).
    fn baton_pid(&self) -> String {
        let shell = self.format("#{pane_pid}");
        let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children"))
            .unwrap_or_default();
        children
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    }

    fn wait_until_dead(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.format("#{pane_dead}") != "1" {
            assert!(
                Instant::now() < deadline,
                "the UI did not exit; screen:\n{}",
                self.capture()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .arg("kill-server")
            .output();
    }
}

/// Starts the UI host in a fresh tmux server, in `workspace`, with extra environment entries.
fn start_ui(engine: &MockEngine, workspace: &Path, home: &Path, extra_env: &[String]) -> Tmux {
    start_baton(
        &format!("--endpoint {}", engine.url()),
        workspace,
        home,
        extra_env,
    )
}

/// Starts `baton BACKEND_ARGS` (the model flags: `--endpoint URL`, `--local DIR`) like `start_ui`.
fn start_baton(backend_args: &str, workspace: &Path, home: &Path, extra_env: &[String]) -> Tmux {
    let exe = env!("CARGO_BIN_EXE_baton");
    static SESSIONS: AtomicUsize = AtomicUsize::new(0);
    let n = SESSIONS.fetch_add(1, Ordering::SeqCst);
    let tmux = Tmux {
        socket: format!("baton-tui-test-{}-{n}", std::process::id()),
        exit_file: home.join("baton-exit-code"),
    };
    let env = |k: &str, v: &Path| format!("{k}={}", v.display());
    let host = format!(
        "{exe} {backend_args} --session-dir {}; echo $? > {}",
        workspace.join("sessions").display(),
        tmux.exit_file.display()
    );
    let mut envs = vec![
        env("HOME", home),
        env("XDG_CONFIG_HOME", &home.join(".config")),
        env("XDG_DATA_HOME", &home.join(".local/share")),
        "TERM=xterm-256color".to_string(),
    ];
    envs.extend(extra_env.iter().cloned());
    let ws = workspace.display().to_string();
    let mut args: Vec<&str> = vec![
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "32",
        "-c",
        &ws,
    ];
    for e in &envs {
        args.push("-e");
        args.push(e);
    }
    args.push(&host);
    tmux.cmd(&args);
    tmux.cmd(&["set-option", "-t", "t", "remain-on-exit", "on"]);
    tmux
}

/// Whether tmux runs here; when it does not, the test `skip`s (a failure under CI).
fn tmux_available() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        crate::support::external::skip("tmux is not installed: the terminal end-to-end test");
    }
    found
}

#[test]
fn prompt_answer_undo_and_quit_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let answer =
        "Here is the **plan**:\n\n1. read the code\n2. fix the bug\n\n```rust\nfn main() {}\n```\n";
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "call_1",
                    "shell",
                    r#"{"command":"echo changed > notes.txt"}"#,
                ),
            )
            .answer(
                "L2",
                MockReply::text(answer)
                    .chunk_chars(4)
                    .chunk_delay(Duration::from_millis(5)),
            )
            .default_summary("The user asked for a plan."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    // A git workspace, so the turn's checkpoint can be undone.
    std::fs::write(workspace.join("notes.txt"), "original\n").expect("write");
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&workspace)
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "notes.txt"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-qm",
        "init",
    ]);
    let tmux = start_ui(&engine, &workspace, &home, &[]);

    tmux.wait_for("Ask baton");
    assert_eq!(
        tmux.format("#{alternate_on}"),
        "1",
        "the UI runs on the alternate screen"
    );
    tmux.cmd(&["send-keys", "-t", "t", "-l", "make a plan"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    // The command writes a file: the approval modal shows it; approve once.
    let screen = tmux.wait_for("echo changed > notes.txt");
    assert!(screen.contains("Yes"), "the modal offers yes: {screen}");
    tmux.wait_until_armed();
    tmux.cmd(&["send-keys", "-t", "t", "y"]);
    let screen = tmux.wait_for("fix the bug");
    assert!(screen.contains("› make a plan"), "{screen}");
    let screen = tmux.wait_for("● ready");
    assert!(
        screen.contains("L2 coding (routed)") || screen.contains("L2 coding (sticky)"),
        "status line names the expert and how it was chosen: {screen}"
    );
    assert!(
        screen.contains("route ") && screen.contains("answer "),
        "hop latencies: {screen}"
    );
    assert!(screen.contains("fn main() {}"), "{screen}");

    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).expect("read"),
        "changed\n",
        "the approved command ran"
    );
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/undo"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    // The plan comes first, and nothing changes until it is confirmed.
    tmux.wait_for("Apply? (y/n)");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).expect("read"),
        "changed\n",
        "undo waits for y"
    );
    tmux.cmd(&["send-keys", "-t", "t", "y"]);
    tmux.wait_for("Undo: files restored");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).expect("read"),
        "original\n",
        "undo restored the file"
    );
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/rename the plan"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("Session named the plan");

    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "0", "clean exit: {}", tmux.capture());
    assert_eq!(tmux.format("#{alternate_on}"), "0", "alternate screen left");
    // tmux keeps a dead pane's modes, so these show what the UI left behind (its cursor flag is
    // not kept, so cursor visibility cannot be checked this way).
    assert_eq!(tmux.format("#{mouse_any_flag}"), "0", "mouse capture off");
    assert_eq!(
        tmux.format("#{mouse_standard_flag}"),
        "0",
        "mouse capture off"
    );
    let after = tmux.capture();
    assert!(
        after.contains("› make a plan") && after.contains("2. fix the bug"),
        "conversation printed on exit:\n{after}"
    );
    let sessions: Vec<_> = std::fs::read_dir(workspace.join("sessions"))
        .expect("sessions dir")
        .flatten()
        .collect();
    assert_eq!(sessions.len(), 1, "the session was saved");
    let path = sessions[0].path();
    let id = path.file_stem().and_then(|s| s.to_str()).expect("id");
    assert!(
        after.contains(&format!("To continue this session: baton --resume {id}")),
        "resume hint on exit:\n{after}"
    );
    assert_eq!(engine.requests_for_hop("route").len(), 1);
}

#[test]
fn editor_diff_pager_and_resize_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", "Edited prompt received.")
            .default_route("L2")
            .default_answer("Paste received.")
            .default_summary("ok"),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .arg("-C")
            .arg(&workspace)
            .args(args)
            .output()
            .expect("git")
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["config", "user.email", "t@example.com"]);
    git(&["config", "user.name", "t"]);
    std::fs::write(workspace.join("tracked.txt"), "old line\n").expect("write");
    std::fs::write(workspace.join(".gitignore"), "sessions/\n").expect("write");
    git(&["add", "."]);
    git(&["commit", "-qm", "init"]);
    std::fs::write(workspace.join("tracked.txt"), "new line\n").expect("write");
    std::fs::write(workspace.join("untracked.txt"), "brand new file\n").expect("write");
    // The "editor" writes the prompt into the file it is given, and notes where it started
    // and what it was given.
    let markers = root.path().join("markers");
    std::fs::create_dir_all(&markers).expect("mkdir");
    std::fs::write(
        markers.join("editor.sh"),
        format!(
            "pwd > {m}/pwd; env > {m}/env; printf 'from the editor' > \"$1\"\n",
            m = markers.display()
        ),
    )
    .expect("editor script");
    let editor = format!("EDITOR=sh {}/editor.sh", markers.display());
    // Round 31's class: a variable of the user's naming what a command wrote in a way no
    // rule spots (a glob) never reaches the editor; it gets a short list of variables.
    let glob = format!(
        "GIT_SSH_COMMAND=ssh -F {}/w?/.ssh/config",
        root.path().display()
    );
    let tmux = start_ui(
        &engine,
        &workspace,
        &home,
        &[editor, glob, "VIMINIT=source .exrc".to_string()],
    );

    tmux.wait_for("Ask baton");
    tmux.cmd(&["send-keys", "-t", "t", "C-g"]);
    tmux.wait_for("› from the editor");
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("Edited prompt received.");
    assert_eq!(
        engine.requests_for_hop("answer")[0]
            .last_user_text()
            .as_deref(),
        Some("from the editor")
    );
    let editor_env = std::fs::read_to_string(markers.join("env")).expect("editor env");
    for gone in ["GIT_SSH_COMMAND=", "VIMINIT=", "OLDPWD="] {
        assert!(!editor_env.contains(gone), "{gone}: {editor_env}");
    }
    assert!(editor_env.contains("TERM="), "{editor_env}");
    let started = std::fs::read_to_string(markers.join("pwd")).expect("editor pwd");
    assert_eq!(started.trim(), home.display().to_string(), "{editor_env}");
    assert!(
        editor_env.contains(&format!("PWD={}\n", home.display())),
        "{editor_env}"
    );

    // A bracketed paste of many lines collapses to a placeholder and is sent whole.
    let pasted: String = (1..=20).map(|i| format!("log line {i}\n")).collect();
    tmux.cmd(&["set-buffer", "-b", "p", &pasted]);
    tmux.cmd(&["paste-buffer", "-p", "-b", "p", "-t", "t"]);
    tmux.wait_for("[Pasted text #1: 20 lines]");
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("Paste received.");
    let sent = engine.requests_for_hop("answer")[1]
        .last_user_text()
        .unwrap_or_default();
    assert!(
        sent.contains("log line 1\n") && sent.contains("log line 20"),
        "{sent}"
    );

    tmux.cmd(&["send-keys", "-t", "t", "-l", "/diff"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    let pager = tmux.wait_for("git diff (untracked included)");
    assert!(
        pager.contains("-old line") && pager.contains("+new line"),
        "{pager}"
    );
    assert!(
        pager.contains("+brand new file"),
        "untracked files are in the diff: {pager}"
    );
    tmux.cmd(&["send-keys", "-t", "t", "q"]);
    tmux.wait_for("Ask baton");

    for (w, h) in [("60", "20"), ("200", "50"), ("61", "12")] {
        tmux.cmd(&["resize-window", "-t", "t", "-x", w, "-y", h]);
        let screen = tmux.wait_for("Paste received.");
        assert!(
            screen
                .lines()
                .all(|l| l.chars().count() <= w.parse::<usize>().unwrap_or(0)),
            "{screen}"
        );
    }
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
    assert_eq!(
        tmux.exit_code(),
        "0",
        "clean exit after resizing: {}",
        tmux.capture()
    );
    assert_eq!(tmux.format("#{alternate_on}"), "0", "alternate screen left");
}

#[test]
fn sigterm_restores_the_terminal() {
    if !tmux_available() {
        return;
    }
    let engine = MockEngine::scripted_blocking(Script::new());
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let tmux = start_ui(&engine, &workspace, &home, &["NO_COLOR=1".into()]);
    tmux.wait_for("Ask baton");
    assert_eq!(
        tmux.format("#{mouse_any_flag}"),
        "1",
        "mouse capture is on while the UI runs"
    );
    let pid = tmux.baton_pid();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "143", "SIGTERM exit code");
    assert_eq!(tmux.format("#{alternate_on}"), "0", "alternate screen left");
    assert_eq!(tmux.format("#{mouse_any_flag}"), "0", "mouse capture off");
    assert!(
        tmux.capture().contains("baton — terminal coding agent"),
        "transcript printed on exit"
    );
}

#[test]
fn approvals_model_and_timed_hints_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "call_1",
                    "shell",
                    r#"{"command":"echo changed > notes.txt"}"#,
                ),
            )
            .answer("L2", MockReply::text("all done"))
            .default_summary("The user asked for a change."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(workspace.join("notes.txt"), "original\n").expect("write");
    let tmux = start_ui(&engine, &workspace, &home, &[]);
    let screen = tmux.wait_for("Ask baton");
    assert!(screen.contains("approvals ask"), "{screen}");

    // `/model` typed in full runs on the first Enter; in mol mode it points to /expert.
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/model"]);
    tmux.wait_for("show or change the model");
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    let screen = tmux.wait_for("routing picks the expert");
    assert!(screen.contains("/expert L2 pins"), "{screen}");

    // Shift+Tab twice: full-auto, confirmed by the core (the hint comes from its event).
    tmux.cmd(&["send-keys", "-t", "t", "BTab"]);
    tmux.wait_for("approvals: auto-edit");
    tmux.cmd(&["send-keys", "-t", "t", "BTab"]);
    let screen = tmux.wait_for("approvals: full-auto");
    assert!(screen.contains("approvals full-auto"), "{screen}");
    // The command that `ask` would have put in a modal now runs unasked.
    tmux.cmd(&["send-keys", "-t", "t", "-l", "change the notes"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    let screen = tmux.wait_for("all done");
    assert!(!screen.contains("Yes"), "no approval modal: {screen}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("notes.txt")).expect("read"),
        "changed\n",
        "the command ran under full-auto"
    );
    tmux.wait_for("● ready");

    // The "press Ctrl+C again" hint goes away by itself once its second is over.
    tmux.cmd(&["send-keys", "-t", "t", "C-c"]);
    tmux.wait_for("press Ctrl+C again to quit");
    tmux.wait_for_gone("press Ctrl+C again to quit", Duration::from_secs(5));
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "0", "clean exit: {}", tmux.capture());
}

#[test]
fn a_local_run_shows_its_device_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-qwen3");
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    // An endpoint in the user's config is not what a --local run talks to: the header must
    // not show it (it did).
    std::fs::create_dir_all(home.join(".config/baton")).expect("mkdir");
    std::fs::write(
        home.join(".config/baton/config.toml"),
        "endpoint = \"http://127.0.0.1:47011/v1\"\n",
    )
    .expect("write");
    let tmux = start_baton(
        &format!("--local {} --device cpu", model.display()),
        &workspace,
        &home,
        &[],
    );
    let screen = tmux.wait_for("Ask baton");
    assert!(screen.contains("device     cpu ("), "header: {screen}");
    assert!(
        !screen.contains("127.0.0.1:47011"),
        "the unused endpoint is not in the header: {screen}"
    );
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/status"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    let screen = tmux.wait_for("approval   ");
    assert_eq!(
        screen.matches("device     cpu (").count(),
        2,
        "header and /status: {screen}"
    );
    // mol mode has no one model: it said "(server default)".
    assert!(screen.contains("model      L0–L3"), "{screen}");
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "0", "clean exit: {}", tmux.capture());
}

#[test]
fn a_turn_that_ends_while_unfocused_rings_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L0")
            .answer("L0", MockReply::text("hello back"))
            .default_summary("Greeting."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let tmux = start_ui(&engine, &workspace, &home, &["BATON_NOTIFY_AFTER=0".into()]);
    tmux.wait_for("Ask baton");
    assert_eq!(tmux.format("#{window_bell_flag}"), "0");
    // The terminal reports that it lost the focus (CSI O), as it does when the user switches away.
    tmux.cmd(&["send-keys", "-t", "t", "-H", "1b", "5b", "4f"]);
    tmux.cmd(&["send-keys", "-t", "t", "-l", "hello"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("hello back");
    tmux.wait_for("● ready");
    let deadline = Instant::now() + Duration::from_secs(10);
    while tmux.format("#{window_bell_flag}") != "1" {
        assert!(
            Instant::now() < deadline,
            "no bell after the unfocused turn; screen:\n{}",
            tmux.capture()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "0", "clean exit: {}", tmux.capture());
}

#[test]
fn init_drafts_agents_md_through_the_edit_approval_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "call_1",
                    "write_file",
                    r##"{"path":"AGENTS.md","content":"# Agents\n\nRun `make test` before a commit.\n"}"##,
                ),
            )
            .answer("L2", MockReply::text("AGENTS.md is written."))
            .default_summary("Drafted AGENTS.md."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let tmux = start_ui(&engine, &workspace, &home, &[]);
    tmux.wait_for("Ask baton");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/init"]);
    tmux.wait_for("draft an AGENTS.md");
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    // The draft arrives as an edit to approve, with its diff.
    let screen = tmux.wait_for("Apply this edit to AGENTS.md?");
    assert!(
        screen.contains("+Run `make test` before a commit."),
        "{screen}"
    );
    assert!(
        !workspace.join("AGENTS.md").exists(),
        "nothing written before yes"
    );
    tmux.wait_until_armed();
    tmux.cmd(&["send-keys", "-t", "t", "y"]);
    tmux.wait_for("AGENTS.md is written.");
    assert_eq!(
        std::fs::read_to_string(workspace.join("AGENTS.md")).expect("read"),
        "# Agents\n\nRun `make test` before a commit.\n"
    );
    let sent = engine.requests_for_hop("answer");
    assert!(
        sent[0].raw_body.contains("Write an AGENTS.md"),
        "the fixed prompt was sent"
    );
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "0", "clean exit: {}", tmux.capture());
}

#[test]
fn command_colours_and_failures_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let engine = MockEngine::scripted_blocking(Script::new().default_summary("ok"));
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let tmux = start_ui(&engine, &workspace, &home, &[]);
    tmux.wait_for("Ask baton");
    // `!cmd` runs in the same PTY the model's commands get (TERM=xterm-256color).
    tmux.cmd(&[
        "send-keys",
        "-t",
        "t",
        "-l",
        r"!printf '\033[31mRED\033[0m plain\n'; exit 3",
    ]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    // The command line itself holds `\033[31m`; the output under it must not.
    // The output is drawn before the exit status: wait for the status, the last of the two.
    let screen = tmux.wait_for("failed · exit 3");
    assert!(screen.contains("│ RED plain"), "{screen}");
    assert!(
        !screen
            .lines()
            .any(|l| l.contains("│") && l.contains("[31m")),
        "{screen}"
    );
    assert!(screen.contains("✗ $ printf"), "{screen}");
    // With escapes: "RED" is drawn in red (palette colour 1), "plain" is not.
    let styled = tmux.cmd(&["capture-pane", "-p", "-e", "-t", "t", "-S", "-200"]);
    let line = styled
        .lines()
        .find(|l| l.contains("RED"))
        .unwrap_or_else(|| panic!("no RED line: {styled:?}"));
    let before = &line[..line.find("RED").unwrap_or(0)];
    let last_sgr = before.rsplit('\u{1b}').next().unwrap_or("");
    assert!(
        last_sgr.contains("31") || last_sgr.contains("38;5;1m"),
        "RED is red: {line:?}"
    );
    tmux.cmd(&["send-keys", "-t", "t", "C-c"]);
    tmux.cmd(&["send-keys", "-t", "t", "C-c"]);
    tmux.wait_until_dead();
}

#[test]
fn a_dead_endpoint_is_reported_at_start_before_any_turn() {
    if !tmux_available() {
        return;
    }
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let url = format!("http://127.0.0.1:{port}/v1");
    let tmux = start_baton(
        &format!("--endpoint {}", url),
        &workspace,
        &home,
        &["NO_COLOR=1".into()],
    );
    // Nothing typed: the background check at start says so on its own.
    let screen = tmux.wait_for("model server is unreachable");
    assert!(screen.contains(&format!("127.0.0.1:{port}")), "{screen}");
    tmux.cmd(&["send-keys", "-t", "t", "C-c"]);
    tmux.cmd(&["send-keys", "-t", "t", "C-c"]);
    tmux.wait_until_dead();
}

#[test]
fn a_custom_command_with_arguments_in_a_real_terminal() {
    if !tmux_available() {
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::text("Reviewed it."))
            .default_summary("Reviewed."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(workspace.join(".baton/commands")).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(
        workspace.join(".baton/commands/review.md"),
        "---\ndescription: Review a folder for bugs\nargument-hint: [path] [focus]\n---\n\
         Review $1 and look hard at $2.\n",
    )
    .expect("write");
    let tmux = start_ui(&engine, &workspace, &home, &[]);
    tmux.wait_for("Ask baton");
    // The popup lists it with its hint and description.
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/rev"]);
    let screen = tmux.wait_for("Review a folder for bugs");
    assert!(screen.contains("/review [path] [focus]"), "{screen}");
    tmux.cmd(&["send-keys", "-t", "t", "Tab"]);
    tmux.cmd(&["send-keys", "-t", "t", "-l", "src/ locking"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("Reviewed it.");
    let sent = engine.requests_for_hop("answer");
    assert_eq!(
        sent[0].last_user_text().as_deref(),
        Some("Review src/ and look hard at locking.")
    );
    // /help lists it too.
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/help"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    let screen = tmux.wait_for("Custom commands");
    assert!(screen.contains("/review [path] [focus]"), "{screen}");
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "0", "clean exit: {}", tmux.capture());
}

#[test]
fn keys_typed_while_an_approval_opens_do_not_answer_it() {
    if !tmux_available() {
        eprintln!("tmux is not installed: skipping the terminal end-to-end test");
        return;
    }
    // The command needing approval arrives while the user is still typing their next message.
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "call_1",
                    "shell",
                    r#"{"command":"touch APPROVED_BY_TYPING"}"#,
                )
                .after(Duration::from_millis(700)),
            )
            .answer("L2", MockReply::text("declined, fine"))
            .default_route("L2")
            .default_answer("second answer")
            .default_summary("The user declined a command."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let tmux = start_ui(&engine, &workspace, &home, &[]);
    tmux.wait_for("Ask baton");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "fix the code"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    // Keep typing "yes please " in bursts until the modal has been up for a while: on the old
    // code its `y`, `a` or `n` answered the modal the moment it opened. Three typists keep the
    // gaps between bursts short even when spawning `tmux` is slow on a loaded machine.
    let bursts = std::sync::Arc::new(AtomicUsize::new(0));
    let typing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let delivered: std::sync::Arc<std::sync::Mutex<Vec<Instant>>> = Default::default();
    let typists: Vec<_> = (0..3)
        .map(|_| {
            let (socket, bursts, typing, delivered) = (
                tmux.socket.clone(),
                bursts.clone(),
                typing.clone(),
                delivered.clone(),
            );
            std::thread::spawn(move || {
                while typing.load(Ordering::SeqCst) {
                    let _ = Command::new("tmux")
                        .args(["-L", &socket, "send-keys", "-t", "t", "-l", "yes please "])
                        .output();
                    bursts.fetch_add(1, Ordering::SeqCst);
                    delivered.lock().unwrap().push(Instant::now());
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let started = Instant::now();
    let mut modal_seen: Option<Instant> = None;
    // Typing goes on for a second after the modal is seen: on the old code its first burst
    // answered it.
    while modal_seen.is_none_or(|at| at.elapsed() < Duration::from_secs(1)) {
        if modal_seen.is_none() && tmux.capture().contains("Run this command?") {
            modal_seen = Some(Instant::now());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the approval never opened: {}",
            tmux.capture()
        );
        std::thread::sleep(Duration::from_millis(30));
    }
    typing.store(false, Ordering::SeqCst);
    for t in typists {
        t.join().unwrap();
    }
    let bursts = bursts.load(Ordering::SeqCst);
    // The modal arms after a pause of its arming delay (400 ms): a pause that long in the
    // typing, which a loaded machine can make, would make the next burst a deliberate answer.
    let mut times = delivered.lock().unwrap().clone();
    times.sort();
    let longest_pause = times
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    if workspace.join("APPROVED_BY_TYPING").exists() {
        assert!(
            longest_pause >= Duration::from_millis(400),
            "a typed-ahead key approved the command though the typing never paused for 400 ms \
             (longest pause {longest_pause:?}): {}",
            tmux.capture()
        );
        eprintln!(
            "inconclusive: this machine paused the typing for {longest_pause:?}, so the modal \
             armed in between"
        );
        tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
        tmux.wait_until_dead();
        return;
    }
    let screen = tmux.capture();
    assert!(
        screen.contains("Run this command?"),
        "the typing did not answer the modal: {screen}"
    );
    // Once the typing pauses the modal takes keys: decline it deliberately.
    tmux.wait_until_armed();
    tmux.cmd(&["send-keys", "-t", "t", "n"]);
    tmux.wait_for("declined, fine");
    tmux.wait_for("● ready");
    assert!(!workspace.join("APPROVED_BY_TYPING").exists());
    // The composer kept every key typed ahead: sent now, it reaches the model whole.
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("second answer");
    let typed = vec!["yes please"; bursts].join(" ");
    let sent = engine
        .requests_for_hop("answer")
        .last()
        .and_then(|r| r.last_user_text())
        .unwrap_or_default();
    assert_eq!(sent.trim(), typed, "{bursts} bursts typed");
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
}

#[test]
fn the_model_is_told_of_undo_and_of_shell_commands_in_a_real_terminal() {
    if !tmux_available() {
        eprintln!("tmux is not installed: skipping the terminal end-to-end test");
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "call_1",
                    "shell",
                    r#"{"command":"echo changed > notes.txt && git -c user.name=a -c user.email=a@a -c commit.gpgsign=false commit -qam agent-commit"}"#,
                ),
            )
            .answer("L2", MockReply::text("first done"))
            .default_route("L2")
            .default_answer("second done")
            .default_summary("Changed the notes."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(workspace.join("notes.txt"), "original\n").expect("write");
    // A repository, so the turn's commit moves HEAD: undo restores the file, not the commit,
    // and says so to the user and the model.
    for args in [
        &["init", "-q"][..],
        &["add", "notes.txt"],
        &["commit", "-qm", "base"],
    ] {
        crate::support::env::git_in(&workspace, args);
    }
    let tmux = start_ui(
        &engine,
        &workspace,
        &home,
        &["BATON_APPROVAL=full-auto".into()],
    );
    tmux.wait_for("Ask baton");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "change the notes"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("first done");
    tmux.wait_for("● ready");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/undo"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("Apply? (y/n)");
    tmux.cmd(&["send-keys", "-t", "t", "y"]);
    tmux.wait_for("Undo: files restored");
    tmux.wait_for("also moved the git HEAD");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "!echo shell-marker-$((6*7))"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("shell-marker-42");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "is it fixed now?"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("second done");
    let sent = engine
        .requests_for_hop("answer")
        .last()
        .and_then(|r| r.last_user_text())
        .unwrap_or_default();
    assert!(sent.starts_with("is it fixed now?"), "{sent}");
    assert!(
        sent.contains("The user undid turn 1") && sent.contains("Restored: notes.txt"),
        "the model is told of the undo: {sent}"
    );
    assert!(
        sent.contains("Git: turn 1 also moved the git HEAD"),
        "the model is told the commit stays: {sent}"
    );
    assert!(
        sent.contains("$ echo shell-marker-$((6*7))") && sent.contains("shell-marker-42"),
        "the model is told of the command and its output: {sent}"
    );
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
}

#[test]
fn copy_reaches_tmux_with_set_clipboard_on() {
    if !tmux_available() {
        eprintln!("tmux is not installed: skipping the terminal end-to-end test");
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::text("copy me please"))
            .default_summary("Answered."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let tmux = start_ui(&engine, &workspace, &home, &[]);
    // What the docs tell a tmux user to set.
    tmux.cmd(&["set-option", "-g", "set-clipboard", "on"]);
    tmux.wait_for("Ask baton");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "say something"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("copy me please");
    tmux.wait_for("● ready");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/copy"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("sent to the clipboard");
    // tmux made a paste buffer of it (tmux 3.3 dropped the passthrough-only form baton sent).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let buffer = tmux.cmd(&["show-buffer"]);
        if buffer.contains("copy me please") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no tmux buffer holds the answer: {buffer:?}; screen:\n{}",
            tmux.capture()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
}

#[test]
fn quit_typed_while_scrolled_up_quits_in_a_real_terminal() {
    if !tmux_available() {
        eprintln!("tmux is not installed: skipping the terminal end-to-end test");
        return;
    }
    let long: String = (1..=120)
        .map(|i| format!("line {i} of a long answer\n\n"))
        .collect();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer("L2", MockReply::text(long))
            .default_summary("Answered."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let tmux = start_ui(&engine, &workspace, &home, &[]);
    tmux.wait_for("Ask baton");
    tmux.cmd(&["send-keys", "-t", "t", "-l", "write a lot"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_for("line 120 of a long answer");
    tmux.wait_for("● ready");
    tmux.cmd(&["send-keys", "-t", "t", "PPage"]);
    tmux.wait_for_gone("line 120 of a long answer", Duration::from_secs(30));
    // On the old code this opened a search for "quit" and stayed.
    tmux.cmd(&["send-keys", "-t", "t", "-l", "/quit"]);
    tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
    tmux.wait_until_dead();
    assert_eq!(tmux.exit_code(), "0", "clean exit: {}", tmux.capture());
}

#[test]
fn a_resumed_session_replays_its_tool_calls_in_a_real_terminal() {
    if !tmux_available() {
        eprintln!("tmux is not installed: skipping the terminal end-to-end test");
        return;
    }
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_1", "shell", r#"{"command":"echo hi > f.txt"}"#),
            )
            .answer("L2", MockReply::text("wrote f.txt"))
            .default_summary("Wrote f.txt."),
    );
    let root = tempfile::tempdir().expect("tempdir");
    let workspace = root.path().join("ws");
    let home = root.path().join("home");
    std::fs::create_dir_all(&workspace).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    let env = ["BATON_APPROVAL=full-auto".to_string()];
    {
        let tmux = start_ui(&engine, &workspace, &home, &env);
        tmux.wait_for("Ask baton");
        tmux.cmd(&["send-keys", "-t", "t", "-l", "write the file"]);
        tmux.cmd(&["send-keys", "-t", "t", "Enter"]);
        tmux.wait_for("wrote f.txt");
        tmux.wait_for("● ready");
        tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
        tmux.wait_until_dead();
    }
    let tmux = start_baton(
        &format!("--endpoint {} --resume last", engine.url()),
        &workspace,
        &home,
        &env,
    );
    let screen = tmux.wait_for("End of the earlier conversation");
    // On the old code the replay showed the prompt and the answer only.
    assert!(
        screen.contains("1 tool call") && screen.contains("$ echo hi > f.txt"),
        "{screen}"
    );
    assert!(!screen.contains("interrupted"), "{screen}");
    tmux.cmd(&["send-keys", "-t", "t", "C-c", "C-c"]);
    tmux.wait_until_dead();
}
