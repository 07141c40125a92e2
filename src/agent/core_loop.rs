//! The op loop: receives `Op`s, runs one turn at a time (queueing user turns that arrive
//! meanwhile), forwards approvals and interrupts to the running turn, and shuts down cleanly.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use super::{Shared, lock, summaries, turn};
use crate::protocol::{Event, Op};
use crate::session::SessionFile;

struct Running {
    handle: tokio::task::JoinHandle<()>,
    cancel: CancellationToken,
}

pub(crate) async fn run(shared: Arc<Shared>, mut ops: UnboundedReceiver<Op>, resumed: bool) {
    emit_session(&shared, resumed);
    let mut queue: VecDeque<String> = VecDeque::new();
    let mut running: Option<Running> = None;
    loop {
        if running.is_none()
            && let Some(text) = queue.pop_front()
        {
            running = Some(start_turn(&shared, text));
        }
        let op = match running.as_mut() {
            Some(r) => {
                tokio::select! {
                    op = ops.recv() => op,
                    _ = &mut r.handle => { running = None; continue; }
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
            Op::Interrupt => {
                queue.clear();
                if let Some(r) = &running {
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
            Op::NewSession => {
                finish_running(&shared, running.take()).await;
                switch_session(&shared, None).await;
            }
            Op::ResumeSession { id } => {
                finish_running(&shared, running.take()).await;
                switch_session(&shared, Some(id)).await;
            }
            Op::Undo | Op::Compact | Op::UserShell { .. } => shared.events.emit(Event::Warning {
                message: "this operation is not available in this build of the agent core".into(),
            }),
            Op::Shutdown => {
                shutdown(&shared, running.take()).await;
                shared.events.emit(Event::ShutdownComplete);
                return;
            }
        }
    }
}

fn emit_session(shared: &Shared, resumed: bool) {
    let session = lock(&shared.session);
    shared.events.emit(Event::Session {
        session_id: session.id.clone(),
        mode: shared.cfg.mode.as_str().to_string(),
        backend: shared.backend.describe(),
        workspace: shared.cfg.workspace.display().to_string(),
        resumed,
        session_file: Some(session.path.display().to_string()),
    });
}

fn start_turn(shared: &Arc<Shared>, text: String) -> Running {
    let cancel = CancellationToken::new();
    let turn_id = {
        let mut next = lock(&shared.next_turn_id);
        let id = *next;
        *next += 1;
        id
    };
    let handle = tokio::spawn(turn::run_turn(
        shared.clone(),
        turn_id,
        text,
        cancel.clone(),
    ));
    Running { handle, cancel }
}

/// Interrupts a running turn and waits until it has written its end.
async fn finish_running(_shared: &Shared, running: Option<Running>) {
    if let Some(r) = running {
        r.cancel.cancel();
        let _ = r.handle.await;
    }
}

async fn shutdown(shared: &Arc<Shared>, running: Option<Running>) {
    finish_running(shared, running).await;
    // Answers were delivered already; the summaries are saved before the process ends (B2).
    summaries::wait_all(shared).await;
}

async fn switch_session(shared: &Arc<Shared>, resume: Option<String>) {
    summaries::wait_all(shared).await;
    let dir = shared.cfg.session_dir.clone();
    let result = match &resume {
        Some(id) => SessionFile::resume(&dir, id).map(|(f, r)| (f, Some(r))),
        None => SessionFile::create(
            &dir,
            shared.cfg.mode.as_str(),
            &shared.backend.describe(),
            &shared.cfg.workspace,
        )
        .map(|f| (f, None)),
    };
    match result {
        Ok((file, restored)) => {
            let restored = restored.unwrap_or_default();
            let resumed = !restored.id.is_empty();
            *lock(&shared.conversation_id) = restored
                .conversation_id
                .clone()
                .or_else(|| Some(format!("baton-{}", file.id.replace('-', ""))));
            *lock(&shared.timeline) = restored.timeline;
            *lock(&shared.next_turn_id) = restored.next_turn_id.max(1);
            *lock(&shared.session) = file;
            emit_session(shared, resumed);
        }
        Err(e) => shared.events.emit(Event::Error {
            message: e.to_string(),
            hop: None,
        }),
    }
}
