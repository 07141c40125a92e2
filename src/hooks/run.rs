//! Running one hook command and reading its answer: `sh -c COMMAND` in its own process group,
//! outside the sandbox (hooks are the user's programs) — in the workspace only when its folder
//! is trusted, with no PATH or module search path into it (see `confine`) — the event's JSON on
//! stdin; killed with its whole group at its timeout or when the caller gives up on it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use super::{HookCommand, HookEvent, HookOutcome, Permission};
use crate::protocol::host_programs;

/// What is kept of each of a hook's output streams; the rest is read and dropped, so a hook
/// that prints without end neither blocks on a full pipe nor fills memory.
const OUTPUT_CAP: usize = 256 * 1024;

/// How long the output is still read after the hook exited: a background child it left behind
/// may hold the pipes open for ever.
const DRAIN_GRACE: Duration = Duration::from_millis(300);

/// Kills a process group when dropped, unless disarmed: a hook abandoned mid-run (the turn was
/// interrupted, the timeout struck) leaves nothing behind.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            kill_group(pgid);
        }
    }
}

fn kill_group(pgid: i32) {
    if pgid > 1 {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

async fn read_capped(mut r: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// A hook's raw result.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Shortens text to `max` bytes, saying how much was cut.
fn cut_to(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}… [{} more bytes cut]", &text[..cut], text.len() - cut)
}

/// Shortens text for a message to the user.
fn short(text: &str) -> String {
    cut_to(text, 2000)
}

/// What one hook may put in front of the model (a reason, context): it is read on every later
/// request of the task, so a chatty hook must not fill the window.
const MODEL_TEXT_CAP: usize = 10_000;

fn for_model(text: &str) -> String {
    cut_to(text, MODEL_TEXT_CAP)
}

/// Where a hook runs and what it finds by name. Hooks run outside the sandbox, and `sh`
/// looks programs up in PATH, interpreters load modules from the working directory
/// (`python -m`, `npx`) and their search paths: PATH and those search paths never keep a
/// folder in the workspace (an activated `.venv/bin` holds what commands put there), and
/// the working directory is the workspace only when its folder is trusted, else a folder no
/// command could have written (the home, else `/`). `BATON_PROJECT_DIR` names the workspace
/// either way.
fn confine(cmd: &mut tokio::process::Command, workspace: &Path, in_workspace: bool) {
    let roots = host_programs::writable_roots_with(workspace);
    if in_workspace {
        cmd.current_dir(workspace);
    } else {
        cmd.current_dir(host_programs::neutral_dir(&roots));
    }
    cmd.env_clear()
        .envs(host_programs::host_program_environment(&roots));
}

async fn spawn_and_wait(
    hook: &HookCommand,
    stdin: &str,
    cwd: &Path,
    in_workspace: bool,
) -> Result<Ran, String> {
    // A hook of an untrusted workspace's session whose program (or script) lies where
    // commands may write — a link into the workspace counts (`~/bin/hk -> ~/proj/tools/hk`,
    // red team round 35) — would run what a command left there, outside the sandbox: not
    // run. A trusted folder's hooks may.
    if !in_workspace {
        let roots = host_programs::writable_roots_with(cwd);
        // Split where the shell splits words, quotes kept inside them (`"$HOME"/proj/x` is
        // one word to the shell, and to the rule, round 37).
        let words = hook
            .command
            .split(|c: char| c.is_whitespace() || ";&|()<>`=".contains(c));
        let search = host_programs::host_program_environment(&roots)
            .into_iter()
            .find(|(name, _)| name == "PATH")
            .map(|(_, value)| value)
            .unwrap_or_default();
        if let Some(why) = host_programs::runs_from_writable_root(words, &roots, &search) {
            return Err(format!(
                "not run: {why} (a link into the workspace counts), which would run outside \
                 the sandbox; keep its program elsewhere, or trust the folder (`baton trust`)"
            ));
        }
    }
    let mut cmd = tokio::process::Command::new("/bin/sh");
    confine(&mut cmd, cwd, in_workspace);
    cmd.arg("-c")
        .arg(&hook.command)
        // Scripts written for Claude Code find the project through this variable.
        .env("BATON_PROJECT_DIR", cwd)
        .env("CLAUDE_PROJECT_DIR", cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let guard = GroupGuard(child.id().and_then(|id| i32::try_from(id).ok()));
    let mut input = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let payload = stdin.as_bytes().to_vec();
    // A hook that never reads its stdin must not block the write: it runs beside the wait.
    let writer = tokio::spawn(async move {
        if let Some(w) = input.as_mut() {
            let _ = w.write_all(&payload).await;
            let _ = w.shutdown().await;
        }
        drop(input);
    });
    let out_task = tokio::spawn(async move {
        match stdout {
            Some(s) => read_capped(s).await,
            None => Vec::new(),
        }
    });
    let err_task = tokio::spawn(async move {
        match stderr {
            Some(s) => read_capped(s).await,
            None => Vec::new(),
        }
    });
    let status = tokio::time::timeout(hook.timeout, child.wait()).await;
    let status = match status {
        Ok(s) => s.map_err(|e| format!("cannot wait for it: {e}"))?,
        Err(_) => {
            drop(guard);
            writer.abort();
            out_task.abort();
            err_task.abort();
            let _ = child.wait().await;
            return Err(format!(
                "timed out after {}s and was killed",
                hook.timeout.as_secs_f64()
            ));
        }
    };
    // The hook is done; whatever it left running in its group goes with it.
    drop(guard);
    writer.abort();
    let grab = |t: tokio::task::JoinHandle<Vec<u8>>| async move {
        match tokio::time::timeout(DRAIN_GRACE, t).await {
            Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            _ => String::new(),
        }
    };
    let stdout = grab(out_task).await;
    let stderr = grab(err_task).await;
    Ok(Ran {
        code: status.code(),
        stdout,
        stderr,
    })
}

/// Runs one hook and reads its answer for `event`.
pub(crate) async fn run_command(
    hook: &HookCommand,
    stdin: &str,
    cwd: &Path,
    in_workspace: bool,
    event: HookEvent,
) -> HookOutcome {
    let mut out = HookOutcome {
        ran: 1,
        ..HookOutcome::default()
    };
    let name = format!("{} hook `{}`", event.name(), short(&hook.command));
    let ran = match spawn_and_wait(hook, stdin, cwd, in_workspace).await {
        Ok(r) => r,
        Err(why) => {
            out.messages.push(format!("{name} {why}"));
            return out;
        }
    };
    match ran.code {
        Some(0) => read_answer(&mut out, &name, &ran.stdout, event),
        Some(2) => {
            let why = ran.stderr.trim();
            out.blocked = Some(if why.is_empty() {
                format!("blocked by a {} hook", event.name())
            } else {
                for_model(why)
            });
        }
        code => {
            let code = code.map_or("a signal".to_string(), |c| format!("exit code {c}"));
            let stderr = short(&ran.stderr);
            out.messages.push(if stderr.is_empty() {
                format!("{name} failed with {code}")
            } else {
                format!("{name} failed with {code}: {stderr}")
            });
        }
    }
    out
}

/// Exit 0: a JSON object on stdout is an answer; other text is context where the event takes
/// stdout as context, and ignored elsewhere.
fn read_answer(out: &mut HookOutcome, name: &str, stdout: &str, event: HookEvent) {
    let text = stdout.trim();
    if text.is_empty() {
        return;
    }
    let json = if text.starts_with('{') {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => Some(map),
            _ => {
                out.messages
                    .push(format!("{name} printed output that is not a JSON object"));
                None
            }
        }
    } else {
        None
    };
    let Some(map) = json else {
        if event.stdout_is_context() && !text.starts_with('{') {
            out.context.push(for_model(text));
        }
        return;
    };
    // Claude Code nests an event's fields in `hookSpecificOutput`; Codex and older scripts
    // put them at the top. Both are read, the nested ones winning.
    let specific = map
        .get("hookSpecificOutput")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let field = |key: &str| specific.get(key).or_else(|| map.get(key));
    let text_of = |key: &str| field(key).and_then(Value::as_str).map(str::to_string);

    if map.get("continue").and_then(Value::as_bool) == Some(false) {
        out.stop = Some(
            text_of("stopReason")
                .map(|r| short(&r))
                .unwrap_or_else(|| format!("stopped by a {} hook", event.name())),
        );
    }
    if let Some(msg) = text_of("systemMessage") {
        out.messages.push(short(&msg));
    }
    let reason = text_of("permissionDecisionReason")
        .or_else(|| text_of("reason"))
        .map(|r| for_model(&r));
    let permission = match field("permissionDecision").and_then(Value::as_str) {
        Some("allow") => Some(Permission::Allow),
        Some("ask") => Some(Permission::Ask),
        Some("deny") => Some(Permission::Deny),
        Some(other) => {
            out.messages.push(format!(
                "{name}: unknown permissionDecision `{other}` (allow, deny or ask); ignored"
            ));
            None
        }
        None => None,
    };
    let decision = map.get("decision").and_then(Value::as_str);
    match (permission, decision) {
        (Some(Permission::Deny), _) | (None, Some("block" | "deny")) => {
            out.blocked = Some(
                reason
                    .clone()
                    .unwrap_or_else(|| format!("blocked by a {} hook", event.name())),
            );
            if event == HookEvent::PreToolUse {
                out.permission = Some(Permission::Deny);
            }
        }
        (None, Some("approve" | "allow")) => out.permission = Some(Permission::Allow),
        (p, _) => out.permission = p,
    }
    if let Some(input) = field("updatedInput") {
        if input.is_object() {
            out.updated_input = Some(input.clone());
        } else {
            out.messages
                .push(format!("{name}: updatedInput must be an object; ignored"));
        }
    }
    if let Some(ctx) = text_of("additionalContext") {
        out.context.push(for_model(&ctx));
    }
}
