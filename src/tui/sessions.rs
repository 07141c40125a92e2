//! Saved sessions for /sessions and /resume: the core writes one JSONL file per session; the UI
//! lists their names and modification times and resumes by id (the file stem).

use std::path::Path;

use chrono::{DateTime, Local};

#[derive(Debug, Clone, PartialEq)]
pub struct SessionEntry {
    pub id: String,
    pub modified: String,
    pub bytes: u64,
}

/// Session files in `dir`, newest first. A missing directory is an empty list.
pub fn list_sessions(dir: &Path) -> Result<Vec<SessionEntry>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: cannot list sessions: {e}", dir.display())),
    };
    let mut found: Vec<(std::time::SystemTime, SessionEntry)> = entries
        .flatten()
        .filter_map(|e| {
            let path = e.path();
            if path.extension()? != "jsonl" {
                return None;
            }
            let meta = e.metadata().ok()?;
            let mtime = meta.modified().ok()?;
            let modified: DateTime<Local> = mtime.into();
            Some((
                mtime,
                SessionEntry {
                    id: path.file_stem()?.to_str()?.to_string(),
                    modified: modified.format("%Y-%m-%d %H:%M").to_string(),
                    bytes: meta.len(),
                },
            ))
        })
        .collect();
    found.sort_by_key(|e| std::cmp::Reverse(e.0));
    Ok(found.into_iter().map(|(_, e)| e).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_jsonl_files_newest_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("a.jsonl"), "{}\n").expect("write");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.path().join("b.jsonl"), "{}\n").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "").expect("write");
        let list = list_sessions(dir.path()).expect("list");
        let ids: Vec<&str> = list.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, vec!["b", "a"]);
        assert!(
            list_sessions(&dir.path().join("missing"))
                .expect("empty")
                .is_empty()
        );
    }
}
