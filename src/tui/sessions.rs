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

/// The shortest prefix of each id (at least 8 characters) that no other listed id shares, for
/// `/resume PREFIX`. Session ids are UUIDv7: their first 8 characters are a timestamp of about a
/// minute, the same for every session started in that minute.
pub fn short_ids(list: &[SessionEntry]) -> Vec<String> {
    list.iter()
        .map(|s| {
            let shared = list
                .iter()
                .filter(|o| o.id != s.id)
                .map(|o| {
                    s.id.bytes()
                        .zip(o.id.bytes())
                        .take_while(|(a, b)| a == b)
                        .count()
                })
                .max()
                .unwrap_or(0);
            let len = (shared + 1).max(8);
            // Ids are ASCII (hex and dashes); a stranger one is shown whole.
            s.id.get(..len).unwrap_or(&s.id).to_string()
        })
        .collect()
}

/// How a session reads in the picker and in /sessions: its name or first message, then when it
/// was last active, how many turns it has, (when not this one) its workspace, and `short_id`
/// (from `short_ids`).
pub fn describe(s: &SessionEntry, workspace: &Path, short_id: &str) -> (String, String) {
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
    detail.push_str(short_id);
    (about, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> SessionEntry {
        SessionEntry {
            id: id.into(),
            path: format!("/s/{id}.jsonl").into(),
            created: String::new(),
            workspace: "/w".into(),
            turns: 1,
            title: "t".into(),
            name: None,
            modified: std::time::SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn ids_of_one_minute_are_told_apart() {
        // Three sessions started in the same minute share their first 8 characters.
        let list = [
            entry("01a23888-1a2b-7000-8000-000000000001"),
            entry("01a23888-1a9c-7000-8000-000000000002"),
            entry("01a23999-0000-7000-8000-000000000003"),
        ];
        let ids = short_ids(&list);
        assert_eq!(ids, ["01a23888-1a2", "01a23888-1a9", "01a23999"]);
        let (_, detail) = describe(&list[0], Path::new("/w"), &ids[0]);
        assert!(detail.ends_with(" · 01a23888-1a2"), "{detail}");
    }
}
