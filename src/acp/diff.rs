//! Whole-file texts for ACP's `diff` content from the unified diffs baton's tools report: ACP
//! wants the old and the new text of a file, a tool event carries only the diff, so one side
//! is read from disk and the other rebuilt by applying the diff forward or backward.

use std::path::Path;

/// Files above this are shown as the unified diff only: a diff update carries the whole text.
const MAX_TEXT_BYTES: u64 = 2 << 20;

/// One line of a hunk: `' '` context, `'-'` removed, `'+'` added, with its line ending.
#[derive(Debug, Clone, PartialEq)]
struct Line {
    kind: char,
    text: String,
}

#[derive(Debug, Clone, PartialEq)]
struct Hunk {
    old_start: usize,
    new_start: usize,
    lines: Vec<Line>,
}

/// The hunks of a unified diff; `None` when a hunk header does not parse.
fn parse(diff: &str) -> Option<Vec<Hunk>> {
    let mut hunks: Vec<Hunk> = Vec::new();
    for raw in diff.split_inclusive('\n') {
        let line = raw.strip_suffix('\n').unwrap_or(raw);
        if let Some(header) = line.strip_prefix("@@ ") {
            let mut parts = header.split_whitespace();
            let old = parts.next()?.strip_prefix('-')?;
            let new = parts.next()?.strip_prefix('+')?;
            let start = |range: &str| range.split(',').next()?.parse::<usize>().ok();
            hunks.push(Hunk {
                old_start: start(old)?,
                new_start: start(new)?,
                lines: Vec::new(),
            });
            continue;
        }
        let Some(hunk) = hunks.last_mut() else {
            // The file headers (`---`, `+++`) and anything else before the first hunk.
            continue;
        };
        if line.starts_with('\\') {
            // "\ No newline at end of file": the line before has no line ending.
            if let Some(prev) = hunk.lines.last_mut()
                && prev.text.ends_with('\n')
            {
                prev.text.pop();
            }
            continue;
        }
        let mut chars = line.chars();
        let kind = match chars.next() {
            Some(k @ (' ' | '-' | '+')) => k,
            // A blank context line of a diff whose trailing spaces were trimmed.
            None => ' ',
            Some(_) => return None,
        };
        hunk.lines.push(Line {
            kind,
            text: format!("{}\n", chars.as_str()),
        });
    }
    Some(hunks)
}

/// Applies `hunks` to `base`: forward (old → new), or with `reverse` backward (new → old).
/// `None` when a context or removed line does not match the base.
fn apply(base: &str, hunks: &[Hunk], reverse: bool) -> Option<String> {
    let base_lines: Vec<&str> = base.split_inclusive('\n').collect();
    let mut out = String::with_capacity(base.len());
    let mut pos = 0usize;
    let (removed, added) = if reverse { ('+', '-') } else { ('-', '+') };
    for hunk in hunks {
        let start = if reverse {
            hunk.new_start
        } else {
            hunk.old_start
        };
        // A range of zero lines starts after its line, not at it.
        let has_base_lines = hunk
            .lines
            .iter()
            .any(|l| l.kind == ' ' || l.kind == removed);
        let first = if has_base_lines {
            start.saturating_sub(1)
        } else {
            start
        };
        if first < pos || first > base_lines.len() {
            return None;
        }
        for line in &base_lines[pos..first] {
            out.push_str(line);
        }
        pos = first;
        for line in &hunk.lines {
            match line.kind {
                k if k == added => out.push_str(&line.text),
                _ => {
                    let have = base_lines.get(pos)?;
                    if *have != line.text {
                        return None;
                    }
                    if line.kind == ' ' {
                        out.push_str(have);
                    }
                    pos += 1;
                }
            }
        }
    }
    for line in base_lines.get(pos..)? {
        out.push_str(line);
    }
    Some(out)
}

/// The old and new text of a change, `old` `None` for a created file.
#[derive(Debug, Clone, PartialEq)]
pub struct Texts {
    pub old: Option<String>,
    pub new: String,
}

/// A file was changed already (`Event::FileDiff`): the new text is on disk, the old one is
/// the diff applied backward. `None` when that cannot be done faithfully, or when `file` is
/// not inside `workspace` (read for display only, and never from outside).
pub fn after_change(workspace: &Path, file: &Path, diff: &str) -> Option<Texts> {
    let created = diff.lines().any(|l| l == "--- /dev/null");
    let deleted = diff.lines().any(|l| l == "+++ /dev/null");
    let new = if deleted {
        String::new()
    } else {
        read_text(workspace, file)?
    };
    if created {
        return Some(Texts { old: None, new });
    }
    let old = apply(&new, &parse(diff)?, true)?;
    Some(Texts {
        old: Some(old),
        new,
    })
}

/// A change waits for approval (`ApprovalRequest::Edit`): the old text is on disk, the new one
/// is the diff applied forward. The path is the model's, not yet checked by the tool: a file
/// outside `workspace` (or a link that leads out) is not read.
pub fn before_change(workspace: &Path, file: &Path, diff: &str) -> Option<Texts> {
    let created = diff.lines().any(|l| l == "--- /dev/null");
    let old = if created {
        String::new()
    } else {
        read_text(workspace, file)?
    };
    let new = apply(&old, &parse(diff)?, false)?;
    Some(Texts {
        old: (!created).then_some(old),
        new,
    })
}

fn read_text(workspace: &Path, file: &Path) -> Option<String> {
    let root = workspace.canonicalize().ok()?;
    let real = file.canonicalize().ok()?;
    if !real.starts_with(&root) {
        return None;
    }
    let meta = std::fs::metadata(&real).ok()?;
    if !meta.is_file() || meta.len() > MAX_TEXT_BYTES {
        return None;
    }
    String::from_utf8(std::fs::read(&real).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unified(old: &str, new: &str) -> String {
        similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .context_radius(3)
            .header("a/f", "b/f")
            .to_string()
    }

    #[test]
    fn a_diff_applied_forward_and_backward_gives_both_texts() {
        let old = (1..=30).map(|i| format!("line {i}\n")).collect::<String>();
        let new = old
            .replace("line 3\n", "LINE THREE\n")
            .replace("line 20\n", "")
            .replace("line 29\n", "line 29\nadded\n");
        let hunks = parse(&unified(&old, &new)).unwrap();
        assert_eq!(hunks.len(), 3);
        assert_eq!(apply(&old, &hunks, false).as_deref(), Some(new.as_str()));
        assert_eq!(apply(&new, &hunks, true).as_deref(), Some(old.as_str()));
    }

    #[test]
    fn a_missing_final_newline_survives_the_round_trip() {
        let old = "a\nb";
        let new = "a\nb\nc\n";
        let hunks = parse(&unified(old, new)).unwrap();
        assert_eq!(apply(old, &hunks, false).as_deref(), Some(new));
        assert_eq!(apply(new, &hunks, true).as_deref(), Some(old));
    }

    #[test]
    fn an_insertion_into_an_empty_file_and_a_file_emptied() {
        let hunks = parse(&unified("", "x\ny\n")).unwrap();
        assert_eq!(apply("", &hunks, false).as_deref(), Some("x\ny\n"));
        assert_eq!(apply("x\ny\n", &hunks, true).as_deref(), Some(""));
    }

    #[test]
    fn a_base_that_does_not_match_the_diff_is_refused() {
        let hunks = parse(&unified("a\nb\nc\n", "a\nB\nc\n")).unwrap();
        assert_eq!(apply("something else\n", &hunks, false), None);
        assert_eq!(apply("a\nb\nc\n", &hunks, true), None);
        assert_eq!(parse("@@ garbage @@\n"), None);
    }

    #[test]
    fn the_file_on_disk_gives_the_other_side() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        let diff = unified("one\ntwo\n", "one\n2\n");
        let ws = dir.path();
        let before = before_change(ws, &path, &diff).unwrap();
        assert_eq!(before.old.as_deref(), Some("one\ntwo\n"));
        assert_eq!(before.new, "one\n2\n");
        std::fs::write(&path, "one\n2\n").unwrap();
        let after = after_change(ws, &path, &diff).unwrap();
        assert_eq!(after.old.as_deref(), Some("one\ntwo\n"));
        assert_eq!(after.new, "one\n2\n");
        // A file changed again since the diff: no made-up old text.
        std::fs::write(&path, "three\n").unwrap();
        assert_eq!(after_change(ws, &path, &diff), None);
    }

    #[test]
    fn nothing_outside_the_workspace_is_read_for_display() {
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret");
        std::fs::write(&secret, "one\ntwo\n").unwrap();
        let ws = tempfile::tempdir().unwrap();
        let diff = unified("one\ntwo\n", "one\n2\n");
        assert_eq!(before_change(ws.path(), &secret, &diff), None);
        let link = ws.path().join("link");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        assert_eq!(before_change(ws.path(), &link, &diff), None);
        assert_eq!(
            before_change(ws.path(), &ws.path().join("../x"), &diff),
            None
        );
    }
}
