//! Persistent sessions: one JSONL file per session, appended as it goes, and resume.
//!
//! A session file lives at `<session_dir>/<id>.jsonl` (id: a time-ordered UUID v7). Each line is
//! a `Record`; every append is flushed, so a crash mid-turn leaves a readable file whose replay
//! restores the routing state (timeline, summaries, pending summaries), not only the text.

mod record;
mod replay;

pub use record::Record;
pub use replay::Restored;

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// What can go wrong with a session file or folder; messages name the path.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session folder {path}: {reason}")]
    Folder { path: String, reason: String },
    #[error("session file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("no session '{id}' in {dir}")]
    NotFound { id: String, dir: String },
}

/// An open session file, appended to as the session goes.
#[derive(Debug)]
pub struct SessionFile {
    pub id: String,
    pub path: PathBuf,
    file: File,
}

impl SessionFile {
    /// Creates a new session file with its `Meta` record.
    pub fn create(
        dir: &Path,
        mode: &str,
        backend: &str,
        workspace: &Path,
    ) -> Result<SessionFile, SessionError> {
        std::fs::create_dir_all(dir).map_err(|e| SessionError::Folder {
            path: dir.display().to_string(),
            reason: format!("cannot create: {e}"),
        })?;
        let id = uuid::Uuid::now_v7().to_string();
        let path = dir.join(format!("{id}.jsonl"));
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(|e| SessionError::File {
                path: path.display().to_string(),
                reason: format!("cannot create: {e}"),
            })?;
        let mut session = SessionFile { id, path, file };
        session.append(&Record::Meta {
            id: session.id.clone(),
            created: chrono::Utc::now().to_rfc3339(),
            mode: mode.to_string(),
            backend: backend.to_string(),
            workspace: workspace.display().to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        })?;
        Ok(session)
    }

    /// Opens a saved session (`id`, a unique id prefix, or `last`) and replays it.
    pub fn resume(dir: &Path, id: &str) -> Result<(SessionFile, Restored), SessionError> {
        let path = find(dir, id)?;
        let restored = replay::replay_file(&path)?;
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| SessionError::File {
                path: path.display().to_string(),
                reason: format!("cannot open for appending: {e}"),
            })?;
        let id = restored.id.clone();
        Ok((SessionFile { id, path, file }, restored))
    }

    /// Appends one record as one line and flushes it.
    pub fn append(&mut self, record: &Record) -> Result<(), SessionError> {
        let mut line = serde_json::to_string(record).map_err(|e| SessionError::File {
            path: self.path.display().to_string(),
            reason: format!("cannot encode a record: {e}"),
        })?;
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|_| self.file.flush())
            .map_err(|e| SessionError::File {
                path: self.path.display().to_string(),
                reason: format!("cannot write: {e}"),
            })
    }
}

/// One saved session as `baton sessions` lists it.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: String,
    pub path: PathBuf,
    pub created: String,
    pub workspace: String,
    pub turns: usize,
    /// The first user turn's text, for recognising the session.
    pub title: String,
    pub modified: std::time::SystemTime,
}

/// Lists the sessions in `dir`, newest first. Unreadable files are skipped.
pub fn list(dir: &Path) -> Result<Vec<SessionInfo>, SessionError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(SessionError::Folder {
                path: dir.display().to_string(),
                reason: format!("cannot list: {e}"),
            });
        }
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("jsonl") {
            continue;
        }
        if let Some(info) = summarize(&path) {
            out.push(info);
        }
    }
    out.sort_by(|a, b| b.modified.cmp(&a.modified).then(b.id.cmp(&a.id)));
    Ok(out)
}

fn summarize(path: &Path) -> Option<SessionInfo> {
    let file = File::open(path).ok()?;
    let modified = file.metadata().and_then(|m| m.modified()).ok()?;
    let mut info = SessionInfo {
        id: String::new(),
        path: path.to_path_buf(),
        created: String::new(),
        workspace: String::new(),
        turns: 0,
        title: String::new(),
        modified,
    };
    for line in BufReader::new(file).lines() {
        let Ok(line) = line else { break };
        match serde_json::from_str::<Record>(&line) {
            Ok(Record::Meta {
                id,
                created,
                workspace,
                ..
            }) => {
                info.id = id;
                info.created = created;
                info.workspace = workspace;
            }
            Ok(Record::Turn { text, .. }) => {
                if info.turns == 0 {
                    info.title = text.lines().next().unwrap_or("").chars().take(60).collect();
                }
                info.turns += 1;
            }
            _ => {}
        }
    }
    (!info.id.is_empty()).then_some(info)
}

/// Finds a session file by id, unique id prefix, or `last` (the most recently written).
pub fn find(dir: &Path, id: &str) -> Result<PathBuf, SessionError> {
    let not_found = || SessionError::NotFound {
        id: id.to_string(),
        dir: dir.display().to_string(),
    };
    let all = list(dir)?;
    if id == "last" {
        return all.first().map(|s| s.path.clone()).ok_or_else(not_found);
    }
    if let Some(exact) = all.iter().find(|s| s.id == id) {
        return Ok(exact.path.clone());
    }
    let matches: Vec<&SessionInfo> = all.iter().filter(|s| s.id.starts_with(id)).collect();
    match matches.as_slice() {
        [one] => Ok(one.path.clone()),
        [] => Err(not_found()),
        _ => Err(SessionError::NotFound {
            id: format!("{id} (ambiguous: {} sessions start with it)", matches.len()),
            dir: dir.display().to_string(),
        }),
    }
}

#[cfg(test)]
mod tests;
