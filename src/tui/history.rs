//! Prompt history, persisted as one JSON string per line (multi-line prompts survive), newest last.

use std::io::Write;
use std::path::{Path, PathBuf};

const MAX_ENTRIES: usize = 1000;

/// Largest history file read (it only grows; the newest `MAX_ENTRIES` are kept from it). The
/// file lies in the data folder, which a command could reach when that is inside a writable
/// root: a FIFO or a sparse file of gigabytes there must not hang or fill the UI.
const MAX_FILE_BYTES: u64 = 64 << 20;

#[derive(Debug, Default)]
pub struct History {
    entries: Vec<String>,
    file: Option<PathBuf>,
}

impl History {
    /// Loads `file` if it exists; unreadable lines are skipped (a damaged history must not stop
    /// the UI). Returns a warning to show when the file could not be read.
    pub fn load(file: Option<&Path>) -> (History, Option<String>) {
        let mut history = History {
            entries: Vec::new(),
            file: file.map(Path::to_path_buf),
        };
        let Some(path) = file else {
            return (history, None);
        };
        match crate::untrusted_fs::read_file(path, &[], MAX_FILE_BYTES) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                history.entries = text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<String>(l).ok())
                    .collect();
                let excess = history.entries.len().saturating_sub(MAX_ENTRIES);
                history.entries.drain(..excess);
                (history, None)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (history, None),
            Err(e) => (
                history,
                Some(format!("{}: cannot read history: {e}", path.display())),
            ),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&str> {
        self.entries.get(i).map(String::as_str)
    }

    /// Adds an entry (not a repeat of the last) and appends it to the file.
    pub fn push(&mut self, entry: &str) -> Result<(), String> {
        if entry.trim().is_empty() || self.entries.last().is_some_and(|l| l == entry) {
            return Ok(());
        }
        self.entries.push(entry.to_string());
        let Some(path) = &self.file else {
            return Ok(());
        };
        let line = serde_json::to_string(entry).map_err(|e| e.to_string())?;
        if let Some(dir) = path.parent() {
            let _ = crate::session::private_dir(dir);
        }
        // Prompts can hold anything the user pasted: owner-only, like the session files; and
        // never through a link or into a FIFO, as for them: with the data folder inside a
        // writable root (baton started in the home folder) a command could point the file at
        // one of the user's (`~/.bashrc`), which every prompt would then be appended to.
        crate::untrusted_fs::append_file(path, &[], Some(crate::session::PRIVATE_FILE))
            .and_then(|mut f| writeln!(f, "{line}"))
            .map_err(|e| format!("{}: cannot write history: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::composer::Composer;

    /// The history file in a data folder commands can reach, replaced by a FIFO: loading it
    /// (std::fs::read_to_string) waited for a writer for good before the UI came up.
    #[test]
    fn a_history_file_replaced_by_a_fifo_is_never_opened() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("hist.jsonl");
        let watch = crate::untrusted_fs::fifo_watch::fifo_watch(&file);
        let (mut h, warning) = History::load(Some(&file));
        assert!(h.push("ls").is_err());
        assert!(!watch.was_opened(), "the history opened the FIFO");
        assert!(warning.is_some_and(|w| w.contains("not a regular file")));
    }

    #[test]
    fn a_history_file_replaced_by_a_link_is_not_written_through() {
        let dir = tempfile::tempdir().expect("tempdir");
        let victim = dir.path().join("bashrc");
        std::fs::write(&victim, "user's own\n").expect("victim");
        let file = dir.path().join("hist.jsonl");
        std::os::unix::fs::symlink(&victim, &file).expect("link");
        let (mut h, _) = History::load(Some(&file));
        assert!(h.push("touch /tmp/x").is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "user's own\n");
    }

    #[test]
    fn history_persists_and_recalls_multiline_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("hist.jsonl");
        let (mut h, warn) = History::load(Some(&file));
        assert!(warn.is_none());
        h.push("first").expect("push");
        h.push("second\nline").expect("push");
        h.push("second\nline").expect("dedup");
        let (h, _) = History::load(Some(&file));
        assert_eq!(h.len(), 2);

        let mut c = Composer::default();
        c.insert_str("draft");
        assert!(c.history_prev(&h));
        assert_eq!(c.text(), "second\nline");
        assert!(c.history_prev(&h));
        assert_eq!(c.text(), "first");
        assert!(!c.history_prev(&h));
        assert!(c.history_next(&h));
        assert!(c.history_next(&h));
        assert_eq!(c.text(), "draft");
    }

    /// Prompts are as private as the sessions: 0600 in a 0700 folder under umask 022.
    #[test]
    fn the_history_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        // umask only changes the mode of files created from here on; 022 is the usual.
        let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
        let root = tempfile::tempdir().expect("tempdir");
        let file = root.path().join("state/baton/history.jsonl");
        let (mut h, _) = History::load(Some(&file));
        let pushed = h.push("a secret token");
        rustix::process::umask(old);
        pushed.expect("push");
        let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(&root.path().join("state/baton")), 0o700);
    }
}
