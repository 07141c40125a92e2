//! The shell tools end to end, with real PTYs inside the real sandbox: exit codes, timeouts
//! (exit 124, SIGTERM-ignoring commands still die), yield + poll + write_stdin, Ctrl-C, the
//! session limit, capped output for 100 MB, binary output, and escape sequences that must
//! never reach the model or the UI.

use std::sync::Arc;
use std::time::Duration;

use baton::protocol::SandboxMode;
use baton::protocol::{Event, EventSink, ToolStatus};
use baton::sandbox::probe;
use baton::tool::shell::{MAX_SESSIONS, ShellConfig, shell_tools};
use baton::tool::{ApprovalNeed, Tool, ToolContext, ToolResult, ToolState};
use serde_json::{Value, json};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script, outside};

struct Harness {
    _dir: tempfile::TempDir,
    ctx: ToolContext,
    events: UnboundedReceiver<Event>,
    tools: Vec<Arc<dyn Tool>>,
}

fn sandbox_mode() -> SandboxMode {
    let support = probe();
    if support.enforceable {
        SandboxMode::WorkspaceWrite
    } else {
        eprintln!(
            "SANDBOX NOT ENFORCEABLE HERE — shell tests run with --sandbox off; the refusal is \
             asserted in `commands_are_refused_when_the_sandbox_cannot_be_enforced`:\n{}",
            support.report().join("\n")
        );
        SandboxMode::Off
    }
}

fn harness_with(config: ShellConfig) -> Harness {
    let dir = tempfile::Builder::new()
        .prefix("baton-shell")
        .tempdir_in(crate::support::outside::fixture_base())
        .expect("tempdir");
    let ws = dir.path().canonicalize().expect("canon");
    std::fs::create_dir_all(ws.join("sub")).expect("mkdir");
    // The workspace sits under the target dir, inside this project's own repository: without a
    // repository of its own, the checkpoint taken before a command would find the project's
    // and snapshot it.
    git2::Repository::init(&ws).expect("git init");
    let (events, rx) = EventSink::channel();
    let ctx = ToolContext {
        workspace: ws,
        call_id: "call-1".into(),
        events,
        cancel: CancellationToken::new(),
        state: Arc::new(ToolState::default()),
    };
    Harness {
        _dir: dir,
        ctx,
        events: rx,
        tools: shell_tools(config),
    }
}

fn harness() -> Harness {
    harness_with(ShellConfig {
        sandbox: sandbox_mode(),
        kill_grace: Duration::from_millis(500),
        // Login profiles on CI machines can take seconds and print noise; one test below
        // covers the login shell.
        login: false,
        ..ShellConfig::default()
    })
}

impl Harness {
    fn tool(&self, name: &str) -> &Arc<dyn Tool> {
        self.tools.iter().find(|t| t.name() == name).expect("tool")
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.tool(name).run(args, &self.ctx).await
    }

    fn ui_text(&mut self) -> String {
        let mut s = String::new();
        while let Ok(ev) = self.events.try_recv() {
            if let Event::ToolOutput { chunk, .. } = ev {
                s.push_str(&chunk);
            }
        }
        s
    }
}

fn session_id(r: &ToolResult) -> u64 {
    let marker = "still running as session ";
    let at = r
        .content
        .find(marker)
        .unwrap_or_else(|| panic!("no session in {:?}", r.content));
    r.content[at + marker.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .expect("session id")
}

#[tokio::test]
async fn a_command_runs_in_the_workspace_and_reports_its_exit_code() {
    let h = harness();
    let r = h
        .call("shell", json!({"command": "pwd; echo hello; exit 3"}))
        .await;
    assert_eq!(r.exit_code, Some(3), "{}", r.content);
    // The command ran and said no: `failed`, which the TUI draws as ✗ and `--json` reports.
    assert_eq!(r.status, ToolStatus::Failed);
    assert!(r.content.contains("[exit code 3]"), "{}", r.content);
    assert!(
        r.content.contains(&h.ctx.workspace.display().to_string()),
        "{}",
        r.content
    );
    assert!(r.content.contains("hello\n"), "{}", r.content);
    assert!(!r.content.contains('\r'), "{:?}", r.content);

    let r = h
        .call("shell", json!({"command": "pwd", "workdir": "sub"}))
        .await;
    assert_eq!(r.exit_code, Some(0));
    assert_eq!(r.status, ToolStatus::Ok);
    assert!(r.content.contains("/sub\n"), "{}", r.content);

    for bad in ["..", "/etc", "sub/../.."] {
        let r = h
            .call("shell", json!({"command": "pwd", "workdir": bad}))
            .await;
        assert_eq!(r.status, ToolStatus::Error, "{bad}: {}", r.content);
        assert!(
            r.content.contains("outside the workspace"),
            "{bad}: {}",
            r.content
        );
    }
}

#[test]
fn secrets_in_the_environment_are_not_passed_on() {
    // Through the real binary: the variables are set in baton's environment, never in this
    // process's, whose environment other tests' threads read while they run.
    let env = Env::new();
    let command =
        "echo key=${BATON_TEST_API_KEY:-unset} plain=$BATON_TEST_PLAIN sbx=$BATON_SANDBOX";
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_1", "shell", json!({ "command": command }).to_string()),
            )
            .answer("L2", "done."),
    );
    let sandbox = match sandbox_mode() {
        SandboxMode::Off => "off",
        _ => "workspace-write",
    };
    let out = env
        .exec(
            &engine,
            "print the key",
            &["--approval", "full-auto", "--sandbox", sandbox],
        )
        .env("BATON_TEST_API_KEY", "sk-secret")
        .env("BATON_TEST_PLAIN", "visible")
        .output()
        .expect("run baton");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answers = engine.requests_for_hop("answer");
    let (_, tool) = answers
        .last()
        .expect("an answer after the tool")
        .transcript()
        .into_iter()
        .find(|(role, _)| role == "tool")
        .expect("the shell result");
    assert!(tool.contains("key=unset"), "{tool}");
    assert!(tool.contains("plain=visible"), "{tool}");
    assert!(tool.contains("sbx="), "{tool}");
}

/// Runs `command` as the model's one shell call through the real binary with `--json`;
/// returns the `tool_end` event and what the model was told.
fn run_one_command(extra: &[&str], env_vars: &[(&str, &str)], command: &str) -> (Value, String) {
    let env = Env::new();
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call("call_1", "shell", json!({ "command": command }).to_string()),
            )
            .answer("L2", "done."),
    );
    let sandbox = match sandbox_mode() {
        SandboxMode::Off => "off",
        _ => "workspace-write",
    };
    let mut args = vec!["--json", "--approval", "full-auto", "--sandbox", sandbox];
    args.extend_from_slice(extra);
    let mut cmd = env.exec(&engine, "run it", &args);
    cmd.env_remove("NO_COLOR");
    for (k, v) in env_vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run baton");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let end: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "tool_end")
        .unwrap_or_else(|| panic!("no tool_end in {stdout}"));
    let told = end["output"].as_str().unwrap_or_default().to_string();
    (end, told)
}

#[test]
fn a_non_zero_exit_is_failed_in_the_json_events() {
    let (end, told) = run_one_command(&[], &[], "echo about to fail; exit 1");
    assert_eq!(end["status"], "failed", "{end}");
    assert_eq!(end["exit_code"], 1, "{end}");
    assert!(told.contains("[exit code 1]"), "{told}");
    let (end, _) = run_one_command(&[], &[], "true");
    assert_eq!(end["status"], "ok", "{end}");
    assert_eq!(end["exit_code"], 0, "{end}");
}

#[test]
fn no_color_reaches_commands_from_the_flag_and_the_environment() {
    let probe = "echo nc=${NO_COLOR:-unset}";
    let (_, told) = run_one_command(&["--no-color"], &[], probe);
    assert!(told.contains("nc=1"), "--no-color: {told}");
    let (_, told) = run_one_command(&[], &[("NO_COLOR", "yes")], probe);
    assert!(told.contains("nc=yes"), "the user's NO_COLOR: {told}");
    let (_, told) = run_one_command(&[], &[], probe);
    assert!(told.contains("nc=unset"), "neither: {told}");
}

#[tokio::test]
async fn approval_carries_the_parsed_argv() {
    let h = harness();
    let need = h
        .tool("shell")
        .approval(&json!({"command": "cargo test -- 'a b'"}), &h.ctx);
    let ApprovalNeed::Command { argv, cwd, .. } = need else {
        panic!("{need:?}")
    };
    assert_eq!(argv, ["cargo", "test", "--", "a b"]);
    assert_eq!(cwd, h.ctx.workspace.display().to_string());
}

#[tokio::test]
async fn a_timeout_kills_the_group_and_reports_124() {
    let h = harness();
    let r = h
        .call(
            "shell",
            json!({"command": "echo start; sleep 30 & sleep 30; echo never", "timeout_ms": 300}),
        )
        .await;
    assert_eq!(r.exit_code, Some(124), "{}", r.content);
    assert_eq!(r.status, ToolStatus::TimedOut);
    assert!(
        r.content.contains("start") && r.content.contains("timed out"),
        "{}",
        r.content
    );
    assert!(!r.content.contains("never"));
}

#[tokio::test]
async fn a_command_ignoring_sigterm_still_dies() {
    let h = harness();
    let marker = h.ctx.workspace.join("pid");
    let r = h
        .call(
            "shell",
            // Long enough for the first heartbeat on a loaded 2-core machine (the whole
            // suite in parallel), where setting up the sandbox alone can take 100s of ms.
            json!({"command": format!("trap '' TERM; while true; do date +%s%N > {}; sleep 0.05; done", marker.display()), "timeout_ms": 1500}),
        )
        .await;
    assert_eq!(r.exit_code, Some(124), "{}", r.content);
    // The command runs in its own pid namespace (its `$$` is not a host pid): it is dead
    // when its heartbeat stops.
    let beat = std::fs::read_to_string(&marker).expect("heartbeat");
    std::thread::sleep(std::time::Duration::from_millis(400));
    let later = std::fs::read_to_string(&marker).expect("heartbeat");
    assert_eq!(beat, later, "the SIGTERM-ignoring shell survived");
}

#[tokio::test]
async fn yield_then_write_stdin_then_poll() {
    let mut h = harness();
    let r = h
        .call("shell", json!({"command": "echo ready; read x; echo got $x; sleep 0.5; echo bye", "yield_ms": 300}))
        .await;
    assert_eq!(r.exit_code, None, "{}", r.content);
    assert!(r.content.contains("ready"), "{}", r.content);
    let id = session_id(&r);
    let r = h
        .call(
            "write_stdin",
            json!({"session_id": id, "chars": "hello\n", "yield_ms": 100}),
        )
        .await;
    let r = if r.content.contains("got hello") {
        r
    } else {
        h.call("poll", json!({"session_id": id, "yield_ms": 5000}))
            .await
    };
    assert!(r.content.contains("got hello"), "{}", r.content);
    let mut last = r;
    while last.exit_code.is_none() {
        last = h
            .call("poll", json!({"session_id": id, "yield_ms": 5000}))
            .await;
    }
    assert_eq!(last.exit_code, Some(0), "{}", last.content);
    let ui = h.ui_text();
    assert!(ui.contains("got hello") && ui.contains("bye"), "{ui}");
    let r = h.call("poll", json!({"session_id": id})).await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(r.content.contains("no running session"), "{}", r.content);
}

#[tokio::test]
async fn ctrl_c_interrupts_a_running_sleep() {
    let h = harness();
    let r = h
        .call("shell", json!({"command": "sleep 60", "yield_ms": 200}))
        .await;
    let id = session_id(&r);
    let r = h
        .call(
            "write_stdin",
            json!({"session_id": id, "chars": "\u{3}", "yield_ms": 10000}),
        )
        .await;
    assert_eq!(r.exit_code, Some(130), "{}", r.content);
}

#[tokio::test]
async fn the_command_gets_its_own_controlling_pty_and_no_other_descriptors() {
    let h = harness();
    // Another session holds its PTY open meanwhile: the new command must not inherit it.
    let other = h
        .call("shell", json!({"command": "sleep 5", "yield_ms": 100}))
        .await;
    let other = session_id(&other);
    let r = h
        .call(
            "shell",
            json!({"command": "tty; stty size; : < /dev/tty && echo controlling; \
                for f in /proc/$$/fd/*; do echo \"fd $(readlink $f)\"; done"}),
        )
        .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.content);
    // Inside the sandbox's own /dev the PTY is named /dev/console; descriptors show the
    // host's name for it, which fd 0 gives.
    assert!(
        r.content
            .lines()
            .any(|l| l.starts_with("/dev/pts/") || l == "/dev/console"),
        "no tty in {}",
        r.content
    );
    let tty = r
        .content
        .lines()
        .find_map(|l| l.strip_prefix("fd "))
        .unwrap_or_else(|| panic!("no fd 0 in {}", r.content));
    assert!(r.content.contains("48 160\n"), "{}", r.content);
    assert!(r.content.contains("controlling\n"), "{}", r.content);
    // Descriptors baton itself inherited without close-on-exec are not this test's business;
    // terminals are: only its own PTY, never a master or another command's slave.
    let fds: Vec<&str> = r.content.lines().filter(|l| l.starts_with("fd ")).collect();
    assert!(fds.len() >= 3, "{}", r.content);
    for fd in &fds {
        let terminal = fd.contains("/dev/pts/") || fd.contains("ptmx");
        assert!(
            !terminal || fd.ends_with(tty),
            "inherited {fd}: {}",
            r.content
        );
    }
    h.call("poll", json!({"session_id": other, "kill": true}))
        .await;
}

#[tokio::test]
async fn at_most_sixteen_sessions_and_kill_all() {
    let h = harness();
    for _ in 0..MAX_SESSIONS {
        let r = h
            .call("shell", json!({"command": "sleep 60", "yield_ms": 0}))
            .await;
        assert_eq!(r.exit_code, None, "{}", r.content);
    }
    let r = h
        .call(
            "shell",
            json!({"command": "echo one too many", "yield_ms": 0}),
        )
        .await;
    assert_eq!(r.status, ToolStatus::Error);
    assert!(
        r.content.contains("16 commands are already running"),
        "{}",
        r.content
    );
    assert_eq!(h.ctx.state.shell_sessions.live_ids().len(), MAX_SESSIONS);
    h.ctx.state.shell_sessions.kill_all();
    assert!(h.ctx.state.shell_sessions.live_ids().is_empty());
    let r = h.call("shell", json!({"command": "echo room again"})).await;
    assert_eq!(r.exit_code, Some(0), "{}", r.content);
}

#[tokio::test]
async fn poll_with_kill_stops_a_session() {
    let h = harness();
    let r = h
        .call("shell", json!({"command": "sleep 60", "yield_ms": 0}))
        .await;
    let id = session_id(&r);
    let r = h
        .call("poll", json!({"session_id": id, "kill": true}))
        .await;
    assert_eq!(r.status, ToolStatus::Interrupted, "{}", r.content);
    assert!(r.content.contains("killed"));
}

#[tokio::test]
async fn cancelling_the_turn_kills_the_command() {
    let h = harness();
    let cancel = h.ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        cancel.cancel();
    });
    let r = h.call("shell", json!({"command": "sleep 60"})).await;
    assert_eq!(r.status, ToolStatus::Interrupted, "{}", r.content);
}

#[tokio::test]
async fn a_hundred_megabytes_is_capped_for_the_model() {
    let mut h = harness();
    let r = h
        .call("shell", json!({"command": "yes 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ | head -c 100000000; echo; echo END", "yield_ms": 600000, "timeout_ms": 600000}))
        .await;
    assert_eq!(
        r.exit_code,
        Some(0),
        "{}",
        &r.content[..r.content.len().min(2000)]
    );
    assert!(
        r.content.len() < 17 * 1024 + 512,
        "model output not capped: {} bytes",
        r.content.len()
    );
    assert!(
        r.content.contains("of output omitted; total"),
        "{}",
        &r.content[..2000.min(r.content.len())]
    );
    assert!(r.content.contains("END\n"));
    // The UI got everything (sanitized): ~100 MB, drained as we go.
    let mut ui_bytes = 0usize;
    while let Ok(ev) = h.events.try_recv() {
        if let Event::ToolOutput { chunk, .. } = ev {
            ui_bytes += chunk.len();
        }
    }
    assert!(ui_bytes >= 100_000_000, "UI saw only {ui_bytes} bytes");
}

#[tokio::test]
async fn binary_output_becomes_a_note() {
    let mut h = harness();
    let r = h
        .call(
            "shell",
            json!({"command": "head -c 20000 /dev/urandom; echo; echo after"}),
        )
        .await;
    assert_eq!(r.exit_code, Some(0));
    assert!(r.content.contains("[binary output: "), "{}", r.content);
    assert!(r.content.contains("after"));
    assert!(r.content.len() < 2000, "{}", r.content);
    let ui = h.ui_text();
    assert!(ui.contains("[binary output: "), "{ui}");
}

#[tokio::test]
async fn escape_sequences_never_reach_the_model_or_the_terminal() {
    let mut h = harness();
    let script = r"printf '\033]0;pwned title\007\033]52;c;cHduZWQ=\007\033[2J\033[H\033P1$r\033\\\033[31mred\033[0m plain\n'";
    let r = h.call("shell", json!({"command": script})).await;
    assert_eq!(r.exit_code, Some(0), "{}", r.content);
    assert!(r.content.contains("red plain"), "{:?}", r.content);
    assert!(!r.content.contains('\u{1b}'), "{:?}", r.content);
    assert!(!r.content.contains("pwned"), "{:?}", r.content);
    let ui = h.ui_text();
    assert!(ui.contains("\u{1b}[31mred\u{1b}[0m plain"), "{ui:?}");
    assert!(
        !ui.contains("\u{1b}]") && !ui.contains("\u{1b}[2J") && !ui.contains("\u{1b}P"),
        "{ui:?}"
    );
    assert!(!ui.contains("pwned") && !ui.contains('\u{7}'), "{ui:?}");
}

#[tokio::test]
async fn sandboxed_shell_cannot_write_outside() {
    if sandbox_mode() == SandboxMode::Off {
        return;
    }
    let h = harness();
    let outside = tempfile::tempdir_in(outside::fixture_base()).expect("tempdir");
    let target = outside.path().join("x");
    let r = h
        .call(
            "shell",
            json!({"command": format!("echo pwned > {}", target.display())}),
        )
        .await;
    assert_ne!(r.exit_code, Some(0), "{}", r.content);
    // Outside the workspace is read-only, or not there at all where it lies in the home
    // (only toolchains and what the user names are shown there).
    assert!(
        r.content.contains("Permission denied")
            || r.content.contains("Read-only file system")
            || r.content.contains("No such file or directory"),
        "{}",
        r.content
    );
    assert!(
        r.content
            .contains("[this may be the sandbox (workspace-write)"),
        "{}",
        r.content
    );
    assert!(!target.exists());
}

#[tokio::test]
async fn commands_are_refused_when_the_sandbox_cannot_be_enforced() {
    let support = probe();
    // The default configuration: a plain (non-login) shell, workspace-write.
    let h = harness_with(ShellConfig::default());
    let r = h.call("shell", json!({"command": "echo hi"})).await;
    if support.enforceable {
        assert_eq!(r.exit_code, Some(0), "{}", r.content);
        assert!(r.content.contains("hi\n"), "{}", r.content);
    } else {
        eprintln!(
            "asserting refusal: {}",
            support.reason.clone().unwrap_or_default()
        );
        assert_eq!(r.status, ToolStatus::Error);
        assert!(
            r.content.contains("refusing to run commands"),
            "{}",
            r.content
        );
    }
}

/// A "Permission denied" on something the sandbox allows (a script without its exec bit, in
/// the writable workspace) is the command's own failure: the model is not sent to the sandbox.
#[tokio::test]
async fn a_denial_the_policy_does_not_make_gets_no_sandbox_hint() {
    if sandbox_mode() == SandboxMode::Off {
        return;
    }
    let h = harness();
    std::fs::write(h.ctx.workspace.join("run.sh"), "#!/bin/sh\necho ran\n").expect("write");
    let r = h.call("shell", json!({"command": "./run.sh"})).await;
    assert_ne!(r.exit_code, Some(0), "{}", r.content);
    assert!(r.content.contains("Permission denied"), "{}", r.content);
    assert!(
        !r.content.contains("this may be the sandbox"),
        "{}",
        r.content
    );
}

/// Commands run in a plain shell by default: a profile that fails in the sandbox (a version
/// manager writing its shims under $HOME) adds nothing to their output. `--login-shell` (the
/// `login_shell` setting) reads it.
#[test]
fn commands_skip_the_login_profile_unless_asked() {
    let home = tempfile::tempdir().expect("home");
    std::fs::write(home.path().join(".bash_profile"), "echo PROFILE-WAS-READ\n").expect("profile");
    let home = home.path().to_str().expect("utf-8 path");
    let (_, plain) = run_one_command(&[], &[("HOME", home)], "echo body");
    assert!(plain.contains("body"), "{plain}");
    assert!(!plain.contains("PROFILE-WAS-READ"), "{plain}");
    let (_, login) = run_one_command(&["--login-shell"], &[("HOME", home)], "echo body");
    assert!(login.contains("PROFILE-WAS-READ"), "{login}");
}
