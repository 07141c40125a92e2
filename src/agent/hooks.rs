//! Where the core fires the user's hooks, and what it does with their answers: the common
//! input (session, transcript, workspace), messages for the user as warnings, and the text a
//! hook gives the model.

use serde_json::{Map, Value};

use super::{Shared, lock};
use crate::hooks::{HookBase, HookEvent, HookOutcome};
use crate::protocol::{Choice, Event};

/// The common input of every event of this session.
fn base(shared: &Shared) -> HookBase {
    let (session_id, transcript_path) = shared.session_file();
    HookBase {
        session_id,
        transcript_path,
        cwd: shared.cfg.workspace.clone(),
        permission_mode: lock(&shared.approval).name().to_string(),
    }
}

/// Runs `event`'s hooks that match `subject` and tells the user what they reported. Free when
/// no hook of the event matches.
pub(crate) async fn fire(
    shared: &Shared,
    event: HookEvent,
    subject: &str,
    fields: Map<String, Value>,
) -> HookOutcome {
    if !shared.cfg.hooks.wants(event, subject) {
        return HookOutcome::default();
    }
    let outcome = shared
        .cfg
        .hooks
        .fire(event, subject, &base(shared), fields)
        .await;
    for message in &outcome.messages {
        shared.events.emit(Event::Warning {
            message: format!("hook: {message}"),
        });
    }
    outcome
}

/// The user interrupted the turn while its hooks ran (they were killed).
pub(crate) struct Interrupted;

/// `fire` for events inside a turn: an interrupt kills the running hooks at once instead of
/// waiting for their timeout. The caller must treat `Err` as an interrupt, never as "no hook
/// objected": a guard hook cut short must not let its call through.
pub(crate) async fn fire_in_turn(
    shared: &Shared,
    event: HookEvent,
    subject: &str,
    fields: Map<String, Value>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<HookOutcome, Interrupted> {
    tokio::select! {
        biased;
        _ = cancel.cancelled() => Err(Interrupted),
        out = fire(shared, event, subject, fields) => Ok(out),
    }
}

/// The notes of the loaded hooks (a project file not run, entries skipped), once per session.
pub(crate) fn announce(shared: &Shared) {
    for notice in &shared.cfg.hooks.notices {
        shared.events.emit(Event::Warning {
            message: notice.clone(),
        });
    }
}

/// A JSON object of `(key, value)` pairs: an event's own fields.
pub(crate) fn fields<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// How hook text is shown to the model, so it can tell it from the tool's or the user's own.
pub(crate) fn for_model(event: HookEvent, text: &str) -> String {
    format!("[{} hook]\n{}", event.name(), text.trim())
}
