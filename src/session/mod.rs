//! Persistent sessions: one JSONL file per session, appended as it goes, and resume.
//!
//! A session file lives at `<session_dir>/<id>.jsonl` (id: a time-ordered UUID v7). Each line is
//! a `Record`; every append is flushed, so a crash mid-turn leaves a readable file whose records
//! rebuild the routing state (timeline, summaries, pending summaries), not only the text. This
//! module reads and writes records; the state they rebuild is folded one layer up, by the same
//! function the live agent applies them with.
//!
//! An open session file holds an advisory lock (`flock`) for as long as it is open, and its
//! holder's pid sits next to it in `<id>.pid`: a second process opening the same session gets
//! `SessionError::Busy`, never an interleaved file.

mod checkpoints;
mod read;
mod record;

pub use checkpoints::{TurnSnapshots, UndoLog, UndoneChange};
pub use record::{HeadMove, Record};

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// What can go wrong with a session file or folder; messages name the path.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("session folder {path}: {reason}")]
    Folder { path: String, reason: String },
    #[error("session file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("no session '{id}' in {dir}")]
    NotFound { id: String, dir: String },
    /// `last` (of every workspace) with no saved session at all.
    #[error("no saved sessions in {dir} yet")]
    Empty { dir: String },
    /// `last` in a workspace that has no saved session (others may have some: `--all`).
    #[error(
        "no sessions in this workspace ({workspace}) yet{}",
        if *.elsewhere > 0 { format!("; {} in other workspaces (--all widens `last` to them)", .elsewhere) } else { String::new() }
    )]
    NoneHere { workspace: String, elsewhere: usize },
    #[error(
        "session {id} is open in another baton process{}",
        .pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Busy { id: String, pid: Option<u32> },
}

/// An open session file, appended to as the session goes, locked while it is open.
#[derive(Debug)]
pub struct SessionFile {
    pub id: String,
    pub path: PathBuf,
    /// The file's first record (`Record::Meta`).
    header: Record,
    /// `None` once closed: the lock is released with it.
    file: Option<Flock<File>>,
    pid_path: PathBuf,
}

impl SessionFile {
    /// Creates a new session file with its `Meta` record.
    pub fn create(
        dir: &Path,
        mode: &str,
        backend: &str,
        workspace: &Path,
    ) -> Result<SessionFile, SessionError> {
        private_dir(dir).map_err(|e| SessionError::Folder {
            path: dir.display().to_string(),
            reason: format!("cannot create: {e}"),
        })?;
        let id = uuid::Uuid::now_v7().to_string();
        let path = dir.join(format!("{id}.jsonl"));
        let file = crate::untrusted_fs::create_new(&path, &[], PRIVATE_FILE).map_err(|e| {
            SessionError::File {
                path: path.display().to_string(),
                reason: format!("cannot create: {e}"),
            }
        })?;
        let header = Record::Meta {
            id: id.clone(),
            created: chrono::Utc::now().to_rfc3339(),
            mode: mode.to_string(),
            backend: backend.to_string(),
            workspace: workspace.display().to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        };
        let (file, pid_path) = lock(file, &path, &id)?;
        let mut session = SessionFile {
            id,
            path,
            header: header.clone(),
            file: Some(file),
            pid_path,
        };
        session.append(&header)?;
        Ok(session)
    }

    /// Opens a saved session (`id`, a unique id prefix, or `last`) and reads its records.
    /// `last` is the newest session of `workspace` when it has one, else the newest of all.
    /// A torn last line is cut off so the next record starts a line of its own.
    pub fn resume(
        dir: &Path,
        id: &str,
        workspace: Option<&Path>,
    ) -> Result<(SessionFile, Vec<Record>), SessionError> {
        let path = find(dir, id, workspace)?;
        Self::open(&path)
    }

    /// Opens the session file at `path` and reads its records.
    pub fn open(path: &Path) -> Result<(SessionFile, Vec<Record>), SessionError> {
        let file_error = |reason: String| SessionError::File {
            path: path.display().to_string(),
            reason,
        };
        // Not through a symlink: where the session folder lies in a folder commands may write
        // (a `session_dir` in the workspace), one could point the file at a file of the user's.
        let file = crate::untrusted_fs::append_file(path, &[], None)
            .map_err(|e| file_error(format!("cannot open for appending: {e}")))?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        // Locked before reading: nobody appends while the records are read.
        let (mut file, pid_path) = lock(file, path, &stem)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| file_error(format!("cannot read: {e}")))?;
        let text = read::text_of(&bytes, path)?;
        let loaded = read::parse_records(text, path)?;
        let (id, header) = match loaded.records.first() {
            Some(header @ Record::Meta { id, .. }) => (id.clone(), header.clone()),
            _ => {
                return Err(file_error(
                    "no meta record: not a baton session file".into(),
                ));
            }
        };
        if loaded.good_len < bytes.len() as u64 {
            file.set_len(loaded.good_len)
                .map_err(|e| file_error(format!("cannot cut a torn last line: {e}")))?;
        }
        let mut session = SessionFile {
            id,
            path: path.to_path_buf(),
            header,
            file: Some(file),
            pid_path,
        };
        if loaded.needs_newline {
            session.write_line("\n")?;
        }
        Ok((session, loaded.records))
    }

    /// The file's first record (`Record::Meta`): what a state built from this file starts at.
    pub fn header(&self) -> &Record {
        &self.header
    }

    /// Appends one record as one line and flushes it.
    pub fn append(&mut self, record: &Record) -> Result<(), SessionError> {
        let mut line = serde_json::to_string(record).map_err(|e| SessionError::File {
            path: self.path.display().to_string(),
            reason: format!("cannot encode a record: {e}"),
        })?;
        line.push('\n');
        self.write_line(&line)
    }

    fn write_line(&mut self, line: &str) -> Result<(), SessionError> {
        let path = self.path.display().to_string();
        let Some(file) = self.file.as_mut() else {
            return Err(SessionError::File {
                path,
                reason: "cannot write: the session is closed".into(),
            });
        };
        file.write_all(line.as_bytes())
            .and_then(|_| file.flush())
            .map_err(|e| SessionError::File {
                path,
                reason: format!("cannot write: {e}"),
            })
    }

    /// Closes the file and releases its lock now (another process may open the session from
    /// here on); later appends fail. Dropping the `SessionFile` does the same.
    pub fn close(&mut self) {
        if self.file.is_some() {
            // The pid note goes first, while the lock is still held: removed after, it could
            // be the note of the next process that took the lock.
            let _ = crate::untrusted_fs::remove_file(&self.pid_path, &[]);
            // The lock itself goes with the file.
            self.file = None;
        }
    }
}

impl Drop for SessionFile {
    fn drop(&mut self) {
        self.close();
    }
}

/// Session files hold whole conversations (code, command output, perhaps secrets): only
/// their owner may read them, whatever the umask.
pub const PRIVATE_FILE: u32 = 0o600;
/// The folders baton creates for them, likewise.
pub const PRIVATE_DIR: u32 = 0o700;

/// Creates `dir` and its missing parents as owner-only folders. An existing folder keeps its
/// mode: the user chose it (a `--session-dir` shared on purpose stays shared).
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(PRIVATE_DIR)
        .create(dir)
}

/// Takes the session's advisory lock (without waiting) and notes this process's pid next to
/// the file. A lock held elsewhere is `SessionError::Busy` with the holder's pid when known.
fn lock(file: File, path: &Path, id: &str) -> Result<(Flock<File>, PathBuf), SessionError> {
    let pid_path = path.with_extension("pid");
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => {
            // Best effort: the pid only improves the message another process shows.
            let pid = std::process::id().to_string();
            let _ =
                crate::untrusted_fs::write_file(&pid_path, &[], pid.as_bytes(), Some(PRIVATE_FILE));
            Ok((locked, pid_path))
        }
        Err((_, e)) if e == Errno::EWOULDBLOCK => {
            let pid = crate::untrusted_fs::read_file(&pid_path, &[], 64)
                .ok()
                .and_then(|b| String::from_utf8_lossy(&b).trim().parse().ok());
            Err(SessionError::Busy {
                id: id.to_string(),
                pid,
            })
        }
        Err((_, e)) => Err(SessionError::File {
            path: path.display().to_string(),
            reason: format!("cannot lock: {e}"),
        }),
    }
}

/// One saved session as `baton sessions` and the `/resume` picker list it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    pub path: PathBuf,
    pub created: String,
    pub workspace: String,
    pub turns: usize,
    /// The first line of the first user turn (at most 60 characters), for recognising it.
    pub title: String,
    /// The name given with `/rename`, the latest one.
    pub name: Option<String>,
    /// Last activity: when the file was last written.
    pub modified: std::time::SystemTime,
}

impl SessionInfo {
    /// The last activity as local time, `2025-01-31 14:05`.
    pub fn last_activity(&self) -> String {
        let at: chrono::DateTime<chrono::Local> = self.modified.into();
        at.format("%Y-%m-%d %H:%M").to_string()
    }

    /// The last activity as RFC 3339 (UTC), for machines.
    pub fn last_activity_rfc3339(&self) -> String {
        let at: chrono::DateTime<chrono::Utc> = self.modified.into();
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    /// Whether the session was made in `workspace`.
    pub fn is_of(&self, workspace: &Path) -> bool {
        Path::new(&self.workspace) == workspace
    }
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
    // Never a FIFO or a link: the session folder may lie where commands write.
    let (file, _) = crate::untrusted_fs::open_file(path, &[]).ok()?;
    let modified = file.metadata().and_then(|m| m.modified()).ok()?;
    let mut info = SessionInfo {
        id: String::new(),
        path: path.to_path_buf(),
        created: String::new(),
        workspace: String::new(),
        turns: 0,
        title: String::new(),
        name: None,
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
            Ok(Record::Renamed { name }) => {
                info.name = Some(name.trim().to_string()).filter(|n| !n.is_empty());
            }
            _ => {}
        }
    }
    (!info.id.is_empty()).then_some(info)
}

/// The records of the session file at `path`, read without opening the session (no lock: it
/// may be open in this very process), for showing what it holds. Lines that do not parse are
/// skipped, so a file cut off by a crash still shows what it has.
pub fn read_records(path: &Path) -> Result<Vec<Record>, SessionError> {
    read_records_beneath(path, &[])
}

/// [`read_records`] of a session file below one of `anchors`, a folder someone else could
/// write (a trial's `/logs/agent/sessions`): no link below the anchor is followed either.
pub fn read_records_beneath(path: &Path, anchors: &[&Path]) -> Result<Vec<Record>, SessionError> {
    let (file, _) =
        crate::untrusted_fs::open_file(path, anchors).map_err(|e| SessionError::File {
            path: path.display().to_string(),
            reason: format!("cannot open: {e}"),
        })?;
    Ok(BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter_map(|line| serde_json::from_str::<Record>(&line).ok())
        .collect())
}

/// Finds a session file by id, unique id prefix, or `last`: the most recently written session
/// of `workspace`, or of any workspace when `workspace` is `None` (`--all`). A session of
/// another workspace is never taken for `last` silently: continuing it here would run its
/// conversation against the wrong files.
pub fn find(dir: &Path, id: &str, workspace: Option<&Path>) -> Result<PathBuf, SessionError> {
    let not_found = || SessionError::NotFound {
        id: id.to_string(),
        dir: dir.display().to_string(),
    };
    let all = list(dir)?;
    if id == "last" {
        let Some(here) = workspace else {
            return all
                .first()
                .map(|s| s.path.clone())
                .ok_or_else(|| SessionError::Empty {
                    dir: dir.display().to_string(),
                });
        };
        return all
            .iter()
            .find(|s| s.is_of(here))
            .map(|s| s.path.clone())
            .ok_or_else(|| SessionError::NoneHere {
                workspace: here.display().to_string(),
                elsewhere: all.len(),
            });
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
