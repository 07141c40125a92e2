//! The op loop: receives `Op`s, runs one turn at a time (queueing user turns that arrive
//! meanwhile), forwards approvals and interrupts to the running turn, and shuts down cleanly.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::{Shared, context, lock, summaries, turn};
use crate::mol::SessionState;
use crate::protocol::{ErrorKind, Event, Op};
use crate::session::{Record, SessionError, SessionFile};

struct Running {
    handle: tokio::task::JoinHandle<()>,
    cancel: CancellationToken,
}

pub(crate) async fn run(shared: Arc<Shared>, mut ops: UnboundedReceiver<Op>, resumed: bool) {
    emit_session(&shared, resumed, false);
    super::hooks::announce(&shared);
    // Before the first turn is taken: what these hooks say is context for that turn.
    session_start(&shared, if resumed { "resume" } else { "startup" }).await;
    // After the session event, so a frontend knows what the warning is about. Nobody watches
    // a headless run before its turn, and that turn reports the same failure.
    if !shared.cfg.headless {
        super::probe::spawn_startup_probe(&shared);
    }
    let mut queue: VecDeque<String> = VecDeque::new();
    let mut running: Option<Running> = None;
    // `/compact` sent while a turn runs: done as soon as it ends, before queued turns.
    let mut compact_pending = false;
    loop {
        if running.is_none() && compact_pending {
            compact_pending = false;
            compact_last_task(&shared).await;
        }
        if running.is_none()
            && let Some(text) = queue.pop_front()
        {
            running = Some(start_turn(&shared, text));
        }
        let op = match running.as_mut() {
            Some(r) => {
                tokio::select! {
                    op = ops.recv() => op,
                    _ = &mut r.handle => {
                        running = None;
                        // Commands left running in the background die with their turn.
                        shared.tool_state.shell_sessions.kill_all();
                        continue;
                    }
                }
            }
            None => ops.recv().await,
        };
        let Some(op) = op else {
            // Every frontend went away: finish like a shutdown, without anyone to tell.
            shutdown(&shared, running.take()).await;
            return;
        };
        match op {
            Op::UserTurn { text } => queue.push_back(text),
            Op::Interrupt | Op::InterruptFor { .. } => {
                queue.clear();
                if let Some(r) = &running {
                    *lock(&shared.stop_reason) = match op {
                        Op::InterruptFor { reason } => Some(reason),
                        _ => None,
                    };
                    r.cancel.cancel();
                }
            }
            Op::Approval { call_id, decision } => {
                if let Some(tx) = lock(&shared.pending_approvals).remove(&call_id) {
                    let _ = tx.send(decision);
                }
            }
            Op::PinExpert { expert } => *lock(&shared.pinned) = expert,
            Op::SetModel { model } => *lock(&shared.model) = Some(model),
            // A record like every other change: the one writer applies it and appends it.
            Op::RenameSession { name } => shared.commit(Record::Renamed { name }),
            Op::SetApprovalPolicy { policy } => {
                *lock(&shared.approval) = policy;
                shared.events.emit(Event::ApprovalPolicyChanged { policy });
            }
            Op::NewSession => {
                compact_pending = false;
                finish_running(running.take()).await;
                switch_session(&shared, None).await;
            }
            Op::ResumeSession { id } => {
                compact_pending = false;
                finish_running(running.take()).await;
                switch_session(&shared, Some(id)).await;
            }
            Op::Compact if running.is_none() => compact_last_task(&shared).await,
            Op::Compact => compact_pending = true,
            Op::Undo { redo, apply, force } if running.is_none() => {
                undo(&shared, redo, apply, force).await
            }
            Op::Undo { .. } => shared.events.emit(Event::Warning {
                message: "a turn is running: interrupt it (Esc) before /undo".into(),
            }),
            Op::UserShell { command } => user_shell(&shared, command).await,
            Op::WorkspaceDiff => {
                // Off the loop: a big diff must not hold up an interrupt or an approval.
                let workspace = shared.cfg.workspace.clone();
                let events = shared.events.clone();
                tokio::task::spawn_blocking(move || {
                    events.emit(crate::tool::git::workspace_diff_event(&workspace));
                });
            }
            Op::McpStatus => shared.events.emit(Event::McpServers {
                servers: shared.tools.mcp().map(|h| h.status()).unwrap_or_default(),
            }),
            Op::Shutdown => {
                shutdown(&shared, running.take()).await;
                shared.events.emit(Event::ShutdownComplete);
                return;
            }
        }
    }
}

/// Runs the `SessionStart` hooks (`source`: startup, resume or clear, the matcher's subject);
/// their context waits for the next user turn.
async fn session_start(shared: &Shared, source: &str) {
    let out = super::hooks::fire(
        shared,
        crate::hooks::HookEvent::SessionStart,
        source,
        super::hooks::fields([("source", source.into())]),
    )
    .await;
    if let Some(text) = out.context_text() {
        lock(&shared.hook_context).push(super::hooks::for_model(
            crate::hooks::HookEvent::SessionStart,
            &text,
        ));
    }
}

/// `Session`, then the session's token total when it has one (a resumed session) or when
/// `always` (a switch: frontends must not keep the last session's numbers).
fn emit_session(shared: &Shared, resumed: bool, always: bool) {
    let (id, path) = shared.session_file();
    shared.events.emit(Event::Session {
        session_id: id,
        mode: shared.cfg.mode.as_str().to_string(),
        backend: shared.backend.describe(),
        model: session_model(shared),
        workspace: shared.cfg.workspace.display().to_string(),
        resumed,
        session_file: Some(path.display().to_string()),
        instructions: context::instruction_files(&shared.cfg),
    });
    // Resuming a session made in another folder (`--resume ID`, `--all`) runs its
    // conversation against this folder's files: say so, every frontend shows warnings.
    let made_in = shared.state().workspace.clone();
    if resumed && !made_in.is_empty() && std::path::Path::new(&made_in) != shared.cfg.workspace {
        shared.events.emit(Event::Warning {
            message: format!(
                "this session was made in {made_in}; it continues here, in {}",
                shared.cfg.workspace.display()
            ),
        });
    }
    let usage = shared.state().usage;
    if always || usage != Default::default() {
        shared.events.emit(Event::SessionUsage { usage });
    }
}

/// What a harness should name as the model: in `mol` mode the experts are adapters of the
/// profile's model, so that name; otherwise the model the requests name.
fn session_model(shared: &Shared) -> Option<String> {
    match shared.cfg.mode {
        crate::protocol::Mode::Mol => Some(shared.cfg.profile.model_name.clone()),
        _ => lock(&shared.model).clone().filter(|m| !m.is_empty()),
    }
}

fn start_turn(shared: &Arc<Shared>, text: String) -> Running {
    crate::tool::checkpoint::begin_turn(&shared.tool_state);
    // A reason given to stop an earlier turn is not this one's.
    *lock(&shared.stop_reason) = None;
    let cancel = CancellationToken::new();
    // The turn's id is taken and recorded here, before the turn runs: nothing that happens
    // meanwhile (`/compact`, `!cmd`) can see a stale id.
    let turn_id = shared.state().next_turn_id;
    shared.commit(Record::Turn {
        turn_id,
        text: text.clone(),
        at: chrono::Utc::now().to_rfc3339(),
    });
    let handle = tokio::spawn(turn::run_turn(
        shared.clone(),
        turn_id,
        text,
        cancel.clone(),
    ));
    Running { handle, cancel }
}

/// Interrupts a running turn and waits until it has written its end.
async fn finish_running(running: Option<Running>) {
    if let Some(r) = running {
        r.cancel.cancel();
        let _ = r.handle.await;
    }
}

async fn shutdown(shared: &Arc<Shared>, running: Option<Running>) {
    finish_running(running).await;
    shared.tool_state.shell_sessions.kill_all();
    // Answers were delivered already; the summaries are saved before the process ends.
    summaries::wait_all(shared).await;
    shared.close_session();
}

async fn switch_session(shared: &Arc<Shared>, resume: Option<String>) {
    summaries::wait_all(shared).await;
    let dir = shared.cfg.session_dir.clone();
    let workspace = shared.cfg.workspace.clone();
    let result: Result<Option<(SessionFile, SessionState)>, SessionError> = match &resume {
        Some(id) => crate::session::find(&dir, id, Some(&workspace)).and_then(|path| {
            // The open session again: its state already is what its file replays to (one
            // writer), and reopening it would wait on this process's own lock.
            if path == shared.session_file().1 {
                return Ok(None);
            }
            let (file, records) = SessionFile::open(&path)?;
            crate::mol::restore(file, &records).map(Some)
        }),
        None => SessionFile::create(
            &dir,
            shared.cfg.mode.as_str(),
            &shared.backend.describe(),
            &workspace,
        )
        .map(|f| {
            let state = SessionState::of_new_file(&f);
            Some((f, state))
        }),
    };
    match result {
        Ok(None) => emit_session(shared, true, true),
        Ok(Some((file, state))) => {
            shared.adopt(file, state);
            emit_session(shared, resume.is_some(), true);
            lock(&shared.hook_context).clear();
            session_start(shared, if resume.is_some() { "resume" } else { "clear" }).await;
        }
        Err(e) => shared.events.emit(Event::Error {
            message: e.to_string(),
            kind: ErrorKind::Io,
            hop: None,
        }),
    }
}

/// `/compact`: compacts the last task of the timeline on its owner's view now.
async fn compact_last_task(shared: &Arc<Shared>) {
    let last = shared
        .state()
        .timeline
        .tasks
        .last()
        .map(|t| (t.id, t.owner));
    let Some((task_id, owner)) = last else {
        shared.events.emit(Event::Warning {
            message: "nothing to compact yet".into(),
        });
        return;
    };
    let head = shared.head(owner);
    let view = shared.state().timeline.view(owner, &head);
    let tokens = context::view_tokens(shared, owner, view.clone());
    let turn_id = shared.state().next_turn_id.saturating_sub(1);
    let cancel = CancellationToken::new();
    if !context::compact(shared, turn_id, task_id, owner, view, tokens, true, &cancel).await {
        shared.events.emit(Event::Warning {
            message: "the last task is too short to compact".into(),
        });
    }
}

/// `/undo`, `/redo` and `Op::Undo`: works out (and with `apply`, applies) the revert of the
/// last turn's changes, or of the last undo. The snapshot ids come from the session's own
/// records; the outcome is recorded so that the next undo goes one turn further back and a
/// redo can revert this one.
async fn undo(shared: &Arc<Shared>, redo: bool, apply: bool, force: bool) {
    let log = shared.state().undo.clone();
    let target = if redo {
        log.next_redo()
            .map(|u| (u.turn_id, u.before.clone(), u.after.clone(), None))
    } else {
        log.next_undo()
            .map(|t| (t.turn_id, t.before.clone(), t.after.clone(), t.head.clone()))
    };
    let Some((turn_id, back_to, left, head)) = target else {
        shared.events.emit(Event::Warning {
            message: if redo {
                "nothing to redo (only an undo since the last turn can be redone)".into()
            } else {
                "nothing to undo in this session (no turn changed files)".into()
            },
        });
        return;
    };
    let config = crate::tool::checkpoint::StoreConfig::for_session_dir(&shared.cfg.session_dir);
    let workspace = shared.cfg.workspace.clone();
    let result = tokio::task::spawn_blocking(move || {
        let (store, plan) =
            crate::tool::checkpoint::plan_revert(&config, &workspace, &back_to, &left, force)?;
        if !apply {
            return Ok(Err((plan.lines(), !plan.is_empty())));
        }
        crate::tool::checkpoint::apply(&config, &store, &plan).map(Ok)
    })
    .await;
    let fail = |message: String| Event::Error {
        message,
        kind: ErrorKind::Io,
        hop: None,
    };
    match result {
        Ok(Ok(Err((lines, actionable)))) => shared.events.emit(Event::UndoPlanned {
            redo,
            lines,
            actionable,
        }),
        Ok(Ok(Ok(done))) => {
            let head_note = head.map(|h| h.undo_note(turn_id));
            // An undo that did nothing is not recorded and the model is not told of it.
            if done.is_recorded() {
                shared.commit(Record::reverted(turn_id, redo, &done.before, &done.after));
                note_for_model(
                    shared,
                    undo_note(turn_id, redo, &done.applied, head_note.as_deref()),
                );
            }
            shared.events.emit(done.to_event(redo));
            for message in &done.audit {
                shared.events.emit(Event::Warning {
                    message: message.clone(),
                });
            }
            if let Some(message) = head_note {
                shared.events.emit(Event::Warning { message });
            }
        }
        Ok(Err(e)) => shared.events.emit(fail(e.to_string())),
        Err(e) => shared.events.emit(fail(format!("undo failed: {e}"))),
    }
}

/// How much of a note (an undo's file list, a `!cmd`'s output) the next request carries.
const NOTE_LIMIT: usize = 4000;

/// Something the user did outside a turn that the model must know to reason about the files:
/// it goes with the next user turn's text (as the hooks' context does), bounded.
fn note_for_model(shared: &Shared, note: String) {
    lock(&shared.hook_context).push(bounded(note, NOTE_LIMIT));
}

/// `text` cut to about `limit` bytes, keeping its head and tail (a command's error is at its
/// end), with the cut said.
fn bounded(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let half = limit / 2;
    let mut head_end = half;
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let mut tail_start = text.len() - half;
    while !text.is_char_boundary(tail_start) {
        tail_start += 1;
    }
    let cut = tail_start - head_end;
    format!(
        "{}\n[… {cut} bytes cut …]\n{}",
        &text[..head_end],
        &text[tail_start..]
    )
}

/// The note of an applied undo (or redo): what the files are now, so the model does not build
/// on edits that are gone.
fn undo_note(
    turn_id: u64,
    redo: bool,
    applied: &crate::tool::checkpoint::Applied,
    head: Option<&str>,
) -> String {
    let mut lines = vec![if redo {
        format!(
            "[note from baton] The user redid turn {turn_id} (/redo): its file changes are back."
        )
    } else {
        format!(
            "[note from baton] The user undid turn {turn_id} (/undo): the files it changed are \
             as they were before it, so the edits of that turn are no longer in the workspace."
        )
    }];
    if !applied.restored.is_empty() {
        lines.push(format!("Restored: {}", applied.restored.join(", ")));
    }
    if !applied.removed.is_empty() {
        lines.push(format!("Removed: {}", applied.removed.join(", ")));
    }
    lines.extend(head.map(|h| format!("Git: {h}.")));
    lines.join("\n")
}

/// The note of a `!cmd`: the command, its exit code and its output (already capped and
/// stripped of control sequences by the shell tool).
fn shell_note(command: &str, exit_code: Option<i32>, output: &str) -> String {
    let status = exit_code.map_or_else(|| "no exit code".to_string(), |c| format!("exit {c}"));
    format!(
        "[note from baton] The user ran a command in the workspace (`!` in the UI):\n$ {command}\n({status})\n{}",
        output.trim_end()
    )
}

/// `!cmd` typed by the user: runs through the sandboxed shell tool and is shown like a tool
/// call. The user typed it, so it needs no approval; the model is told of it (command and
/// output) with the next turn.
async fn user_shell(shared: &Arc<Shared>, command: String) {
    let Some(tool) = shared.tools.get("shell") else {
        shared.events.emit(Event::Error {
            message: "no shell tool is configured".into(),
            kind: ErrorKind::Config,
            hop: None,
        });
        return;
    };
    let turn_id = shared.state().next_turn_id;
    let call_id = format!("user-shell-{}", uuid::Uuid::now_v7().simple());
    let args = serde_json::json!({ "command": command });
    let ctx = crate::tool::ToolContext {
        workspace: shared.cfg.workspace.clone(),
        call_id: call_id.clone(),
        events: shared.events.clone(),
        cancel: CancellationToken::new(),
        state: shared.tool_state.clone(),
    };
    shared.events.emit(Event::ToolBegin {
        turn_id,
        call_id: call_id.clone(),
        tool: "shell".into(),
        arguments: args.clone(),
        title: tool.title(&args),
    });
    let started = std::time::Instant::now();
    let result = tool.run(args, &ctx).await;
    note_for_model(
        shared,
        shell_note(&command, result.exit_code, &result.content),
    );
    shared.events.emit(Event::ToolEnd {
        call_id,
        status: result.status,
        exit_code: result.exit_code,
        duration_ms: started.elapsed().as_millis() as u64,
        output: result.content,
    });
}
