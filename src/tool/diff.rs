//! Unified diffs of file changes, for `Event::FileDiff` and `ApprovalNeed::Edit`.

use similar::TextDiff;

/// A unified diff (3 lines of context) from `old` to `new` of the file at `path`.
/// `None` for a side means the file does not exist there (created or deleted).
pub fn unified_diff(path: &str, old: Option<&[u8]>, new: Option<&[u8]>) -> String {
    unified_diff_moved(path, path, old, new)
}

/// Like `unified_diff`, for a file that also moved from `old_path` to `path`.
pub fn unified_diff_moved(
    old_path: &str,
    path: &str,
    old: Option<&[u8]>,
    new: Option<&[u8]>,
) -> String {
    let old_text = old.map(String::from_utf8_lossy).unwrap_or_default();
    let new_text = new.map(String::from_utf8_lossy).unwrap_or_default();
    let old_header = if old.is_some() {
        format!("a/{old_path}")
    } else {
        "/dev/null".to_string()
    };
    let new_header = if new.is_some() {
        format!("b/{path}")
    } else {
        "/dev/null".to_string()
    };
    let diff = TextDiff::from_lines(old_text.as_ref(), new_text.as_ref());
    let body = diff
        .unified_diff()
        .context_radius(3)
        .header(&old_header, &new_header)
        .to_string();
    if body.is_empty() {
        if old.is_none() && new.is_some() {
            return format!("--- /dev/null\n+++ b/{path}\n(new empty file)\n");
        }
        if old.is_some() && new.is_none() {
            return format!("--- a/{path}\n+++ /dev/null\n(deleted empty file)\n");
        }
        if old_path != path {
            return format!("--- a/{old_path}\n+++ b/{path}\n(moved without changes)\n");
        }
        if old != new {
            return format!("--- a/{path}\n+++ b/{path}\n(binary or whitespace-only change)\n");
        }
    }
    body
}

/// Counts added and removed lines of a unified diff (for one-line summaries).
pub fn line_counts(diff: &str) -> (usize, usize) {
    let mut added = 0;
    let mut removed = 0;
    for line in diff.lines() {
        if line.starts_with("+++") || line.starts_with("---") {
            continue;
        }
        if line.starts_with('+') {
            added += 1;
        } else if line.starts_with('-') {
            removed += 1;
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_has_headers_and_hunks() {
        let d = unified_diff("a.txt", Some(b"one\ntwo\n"), Some(b"one\nTWO\n"));
        assert!(d.contains("--- a/a.txt\n+++ b/a.txt\n"), "{d}");
        assert!(d.contains("-two\n+TWO\n"), "{d}");
        assert_eq!(line_counts(&d), (1, 1));
        let created = unified_diff("n.txt", None, Some(b"x\n"));
        assert!(
            created.starts_with("--- /dev/null\n+++ b/n.txt\n"),
            "{created}"
        );
        let deleted = unified_diff("n.txt", Some(b""), None);
        assert!(deleted.contains("deleted empty file"));
    }
}
