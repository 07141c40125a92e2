//! Saved sessions for /sessions and /resume, as the session module lists them (the UI never
//! reads session files for this itself): this workspace's sessions first, newest first, then
//! the others.

use std::path::Path;

use crate::session::SessionInfo;

pub type SessionEntry = SessionInfo;

/// The sessions of `dir`: those of `workspace` first, each group newest first. A missing
/// directory is an empty list.
pub fn list_sessions(dir: &Path, workspace: &Path) -> Result<Vec<SessionEntry>, String> {
    let all = crate::session::list(dir).map_err(|e| e.to_string())?;
    let (mut here, elsewhere): (Vec<_>, Vec<_>) = all.into_iter().partition(|s| s.is_of(workspace));
    here.extend(elsewhere);
    Ok(here)
}

/// How a session reads in the picker and in /sessions: its name or first message, then when it
/// was last active, how many turns it has and (when not this one) its workspace.
pub fn describe(s: &SessionEntry, workspace: &Path) -> (String, String) {
    let about = match (&s.name, s.title.is_empty()) {
        (Some(name), true) => name.clone(),
        (Some(name), false) => format!("{name} · {}", s.title),
        (None, false) => s.title.clone(),
        (None, true) => "(no message yet)".into(),
    };
    let mut detail = format!(
        "{} · {} turn{}",
        s.last_activity(),
        s.turns,
        if s.turns == 1 { "" } else { "s" }
    );
    if !s.is_of(workspace) {
        detail.push_str(" · ");
        detail.push_str(&s.workspace);
    }
    detail.push_str(" · ");
    detail.push_str(s.id.get(..8).unwrap_or(&s.id));
    (about, detail)
}
