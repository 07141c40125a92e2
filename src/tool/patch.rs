//! `apply_patch`: the Codex patch envelope (`*** Begin Patch` … `*** End Patch`) with added,
//! deleted, updated and moved files. Hunks are located by their context lines (no line
//! numbers), tolerating trailing-whitespace differences. All-or-nothing: every hunk of every
//! file is validated in memory before the first write, and a write that fails midway rolls the
//! earlier ones back. Hunks are found in time linear in the file (lines interned to ids, then
//! a KMP search over the ids), and every file is changed through `fs::Beneath`.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::path::PathBuf;

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use crate::protocol::Event;
use crate::protocol::ToolSpec;
use crate::tool::call::{into_result, parse_args, run_blocking};
use crate::tool::diff::unified_diff_moved;
use crate::tool::fs::{
    Beneath, LineEnding, UnreadPolicy, check_fresh, read_existing, record_stamp,
};
use crate::tool::path::resolve_for_write;
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolError, ToolResult};

/// One file operation of a patch, as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

/// One `@@` section of an update: context/removed lines to find, and what replaces them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    /// The text after `@@`, a line (e.g. a function signature) to find before the hunk.
    pub context: Option<String>,
    pub old: Vec<String>,
    pub new: Vec<String>,
    /// `*** End of File`: the hunk is anchored at the end of the file.
    pub end_of_file: bool,
}

/// Parses a patch. Tolerates whitespace around markers and text (e.g. a heredoc) around the
/// envelope. Errors name the line.
pub fn parse_patch(text: &str) -> Result<Vec<PatchOp>, ToolError> {
    let lines: Vec<&str> = text.lines().collect();
    let begin = lines
        .iter()
        .position(|l| l.trim() == "*** Begin Patch")
        .ok_or_else(|| malformed("the patch must start with a line '*** Begin Patch'"))?;
    let end = lines
        .iter()
        .rposition(|l| l.trim() == "*** End Patch")
        .filter(|&e| e > begin)
        .ok_or_else(|| malformed("the patch must end with a line '*** End Patch'"))?;
    let mut ops = Vec::new();
    let mut i = begin + 1;
    while i < end {
        let line = lines[i].trim();
        let number = i + 1;
        if let Some(path) = line.strip_prefix("*** Add File:") {
            let path = nonempty_path(path, number)?;
            i += 1;
            let mut content = String::new();
            while i < end && !is_file_marker(lines[i]) {
                // Blank lines between the added file and the next marker are separators.
                if lines[i].trim().is_empty()
                    && lines[i..end]
                        .iter()
                        .take_while(|l| !is_file_marker(l))
                        .all(|l| l.trim().is_empty())
                {
                    i += 1;
                    continue;
                }
                let body = lines[i].strip_prefix('+').ok_or_else(|| {
                    malformed(format!(
                        "line {}: every line of an added file must start with '+': '{}'",
                        i + 1,
                        lines[i]
                    ))
                })?;
                content.push_str(body);
                content.push('\n');
                i += 1;
            }
            ops.push(PatchOp::Add { path, content });
        } else if let Some(path) = line.strip_prefix("*** Delete File:") {
            ops.push(PatchOp::Delete {
                path: nonempty_path(path, number)?,
            });
            i += 1;
        } else if let Some(path) = line.strip_prefix("*** Update File:") {
            let path = nonempty_path(path, number)?;
            i += 1;
            let mut move_to = None;
            if i < end
                && let Some(target) = lines[i].trim().strip_prefix("*** Move to:")
            {
                move_to = Some(nonempty_path(target, i + 1)?);
                i += 1;
            }
            let mut chunks: Vec<Chunk> = Vec::new();
            while i < end && !is_file_marker(lines[i]) {
                let raw = lines[i];
                let trimmed = raw.trim();
                if trimmed == "*** End of File" {
                    chunks
                        .last_mut()
                        .ok_or_else(|| {
                            malformed(format!("line {}: '*** End of File' before any hunk", i + 1))
                        })?
                        .end_of_file = true;
                } else if let Some(header) = trimmed.strip_prefix("@@") {
                    let header = header.trim();
                    chunks.push(Chunk {
                        context: (!header.is_empty()).then(|| header.to_string()),
                        ..Chunk::default()
                    });
                } else {
                    if chunks.is_empty() || chunks.last().is_some_and(|c| c.end_of_file) {
                        chunks.push(Chunk::default());
                    }
                    let chunk = chunks
                        .last_mut()
                        .ok_or(ToolError::Internal { what: "no chunk" })?;
                    match raw.chars().next() {
                        None => {
                            chunk.old.push(String::new());
                            chunk.new.push(String::new());
                        }
                        Some(' ') => {
                            chunk.old.push(raw[1..].to_string());
                            chunk.new.push(raw[1..].to_string());
                        }
                        Some('-') => chunk.old.push(raw[1..].to_string()),
                        Some('+') => chunk.new.push(raw[1..].to_string()),
                        Some(_) => {
                            return Err(malformed(format!(
                                "line {}: in the update of {path}, a line must start with ' ', \
                                 '-', '+' or '@@': '{raw}'",
                                i + 1
                            )));
                        }
                    }
                }
                i += 1;
            }
            chunks.retain(|c| !(c.old.is_empty() && c.new.is_empty() && c.context.is_none()));
            if chunks.is_empty() && move_to.is_none() {
                return Err(malformed(format!(
                    "line {number}: the update of {path} has no hunks"
                )));
            }
            ops.push(PatchOp::Update {
                path,
                move_to,
                chunks,
            });
        } else if line.is_empty() {
            i += 1;
        } else {
            return Err(malformed(format!(
                "line {number}: expected '*** Add File:', '*** Delete File:' or '*** Update \
                 File:', found '{}'",
                lines[i]
            )));
        }
    }
    if ops.is_empty() {
        return Err(malformed("the patch changes no files"));
    }
    Ok(ops)
}

fn malformed(reason: impl Into<String>) -> ToolError {
    ToolError::MalformedPatch {
        reason: reason.into(),
    }
}

fn is_file_marker(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("*** Add File:")
        || t.starts_with("*** Delete File:")
        || t.starts_with("*** Update File:")
        || t == "*** End Patch"
}

fn nonempty_path(text: &str, line: usize) -> Result<String, ToolError> {
    let path = text.trim();
    if path.is_empty() {
        return Err(malformed(format!("line {line}: missing file path")));
    }
    Ok(path.to_string())
}

/// One file line: its text without the line ending, and the ending itself.
struct Line<'a> {
    text: &'a [u8],
    ending: &'a [u8],
}

fn split_lines(data: &[u8]) -> Vec<Line<'_>> {
    data.split_inclusive(|&b| b == b'\n')
        .map(|raw| {
            let text_len = if raw.ends_with(b"\r\n") {
                raw.len() - 2
            } else if raw.ends_with(b"\n") {
                raw.len() - 1
            } else {
                raw.len()
            };
            Line {
                text: &raw[..text_len],
                ending: &raw[text_len..],
            }
        })
        .collect()
}

fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |p| p + 1);
    &bytes[..end]
}

fn trim(bytes: &[u8]) -> &[u8] {
    let t = trim_end(bytes);
    let start = t
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(t.len());
    &t[start..]
}

/// Reduces a line to what a comparison mode looks at.
type Normalize = fn(&[u8]) -> &[u8];

/// How strictly a patch line must equal a file line, strictest first.
const MODES: [Normalize; 3] = [|a| a, trim_end, trim];

/// Under one mode: the id of each distinct normalized line, and the file as a run of ids.
type Numbering<'a> = (HashMap<&'a [u8], u32>, Vec<u32>);

/// The file's lines as small integers, one numbering per comparison mode (built when first
/// needed): equal ids mean equal lines under that mode, so a hunk is a run of ids to find.
struct LineIndex<'a> {
    lines: &'a [Line<'a>],
    modes: [OnceCell<Numbering<'a>>; 3],
}

impl<'a> LineIndex<'a> {
    fn new(lines: &'a [Line<'a>]) -> Self {
        LineIndex {
            lines,
            modes: Default::default(),
        }
    }

    fn mode(&self, mode: usize) -> &Numbering<'a> {
        self.modes[mode].get_or_init(|| {
            let norm = MODES[mode];
            let mut ids: HashMap<&'a [u8], u32> = HashMap::new();
            let seq = self
                .lines
                .iter()
                .map(|line| {
                    let next = ids.len() as u32;
                    *ids.entry(norm(line.text)).or_insert(next)
                })
                .collect();
            (ids, seq)
        })
    }

    /// The ids of `pattern` under `mode`; a line the file does not hold gets an id no file
    /// line has.
    fn pattern_ids(&self, mode: usize, pattern: &[String]) -> Vec<u32> {
        let (ids, _) = self.mode(mode);
        let norm = MODES[mode];
        pattern
            .iter()
            .map(|p| ids.get(norm(p.as_bytes())).copied().unwrap_or(u32::MAX))
            .collect()
    }
}

/// First start of `pattern` in `haystack` (Knuth–Morris–Pratt: linear in both).
fn find_run(haystack: &[u32], pattern: &[u32]) -> Option<usize> {
    if pattern.is_empty() {
        return Some(0);
    }
    let mut fail = vec![0usize; pattern.len()];
    let mut k = 0;
    for i in 1..pattern.len() {
        while k > 0 && pattern[i] != pattern[k] {
            k = fail[k - 1];
        }
        if pattern[i] == pattern[k] {
            k += 1;
        }
        fail[i] = k;
    }
    let mut q = 0;
    for (i, &h) in haystack.iter().enumerate() {
        while q > 0 && h != pattern[q] {
            q = fail[q - 1];
        }
        if h == pattern[q] {
            q += 1;
            if q == pattern.len() {
                return Some(i + 1 - pattern.len());
            }
        }
    }
    None
}

/// Finds `pattern` in the file at or after `from`: exact first, then ignoring trailing
/// whitespace, then ignoring surrounding whitespace. With `at_end`, the end of file is tried
/// first.
fn seek(index: &LineIndex, pattern: &[String], from: usize, at_end: bool) -> Option<usize> {
    let total = index.lines.len();
    if pattern.len() > total || from > total {
        return None;
    }
    let last_start = total - pattern.len();
    for mode in 0..MODES.len() {
        let wanted = index.pattern_ids(mode, pattern);
        let (_, seq) = index.mode(mode);
        if at_end && last_start >= from && seq[last_start..] == wanted[..] {
            return Some(last_start);
        }
        if let Some(found) = find_run(&seq[from..], &wanted) {
            return Some(from + found);
        }
    }
    None
}

/// Applies the chunks of an update to `original`, or says which hunk does not fit.
pub fn apply_chunks(original: &[u8], chunks: &[Chunk], rel: &str) -> Result<Vec<u8>, ToolError> {
    let lines = split_lines(original);
    let index = LineIndex::new(&lines);
    let eol = LineEnding::detect(original).as_str().as_bytes();
    let mut replacements: Vec<(usize, usize, &[String])> = Vec::new();
    let mut cursor = 0usize;
    for (n, chunk) in chunks.iter().enumerate() {
        let hunk = n + 1;
        if let Some(context) = &chunk.context {
            let found =
                seek(&index, std::slice::from_ref(context), cursor, false).ok_or_else(|| {
                    ToolError::PatchDoesNotApply {
                        reason: format!(
                            "{rel}: hunk {hunk}: context line '@@ {context}' was not found"
                        ),
                    }
                })?;
            cursor = found + 1;
        }
        if chunk.old.is_empty() {
            let at = if chunk.context.is_some() && !chunk.end_of_file {
                cursor
            } else {
                lines.len()
            };
            replacements.push((at, 0, &chunk.new));
            continue;
        }
        let mut old: &[String] = &chunk.old;
        let mut new: &[String] = &chunk.new;
        let mut found = seek(&index, old, cursor, chunk.end_of_file);
        // A trailing empty context line often stands for the end of the file.
        if found.is_none() && old.last().is_some_and(|l| l.is_empty()) {
            old = &old[..old.len() - 1];
            if new.last().is_some_and(|l| l.is_empty()) {
                new = &new[..new.len() - 1];
            }
            found = if old.is_empty() {
                Some(lines.len())
            } else {
                seek(&index, old, cursor, chunk.end_of_file)
            };
        }
        let start = found.ok_or_else(|| {
            let preview: Vec<&str> = chunk.old.iter().take(3).map(String::as_str).collect();
            ToolError::PatchDoesNotApply {
                reason: format!(
                    "{rel}: hunk {hunk} does not match the file: could not find the lines\n{}\n\
                     (read the file again; hunks must be in file order and their ' ' and '-' \
                     lines must match the file)",
                    preview.join("\n")
                ),
            }
        })?;
        replacements.push((start, old.len(), new));
        cursor = start + old.len();
    }
    let mut out = Vec::with_capacity(original.len() + 256);
    let mut next = 0usize;
    for (start, removed, new) in replacements {
        for line in &lines[next..start] {
            out.extend_from_slice(line.text);
            out.extend_from_slice(line.ending);
        }
        if !out.is_empty() && !out.ends_with(b"\n") && !new.is_empty() {
            out.extend_from_slice(eol);
        }
        let reaches_end = start + removed == lines.len();
        let ended_without_newline = lines.last().is_some_and(|l| l.ending.is_empty());
        for (i, text) in new.iter().enumerate() {
            out.extend_from_slice(text.as_bytes());
            let last_of_file = reaches_end && i + 1 == new.len();
            if !(last_of_file && ended_without_newline && removed > 0) {
                out.extend_from_slice(eol);
            }
        }
        next = start + removed;
    }
    for line in &lines[next..] {
        out.extend_from_slice(line.text);
        out.extend_from_slice(line.ending);
    }
    Ok(out)
}

/// One file change of a validated patch.
struct FileChange {
    /// Where the original is (None for added files).
    source: Option<(PathBuf, String)>,
    /// Where the result goes (None for deleted files).
    target: Option<(PathBuf, String)>,
    old: Option<Vec<u8>>,
    new: Option<Vec<u8>>,
}

impl FileChange {
    fn summary(&self) -> String {
        match (&self.source, &self.target) {
            (None, Some((_, rel))) => format!("A {rel}"),
            (Some((_, rel)), None) => format!("D {rel}"),
            (Some((_, from)), Some((_, to))) if from != to => format!("R {from} -> {to}"),
            (_, Some((_, rel))) => format!("M {rel}"),
            (None, None) => String::new(),
        }
    }

    fn diff(&self) -> String {
        let old_rel = self.source.as_ref().map(|s| s.1.as_str());
        let new_rel = self.target.as_ref().map(|t| t.1.as_str());
        let (from, to) = match (old_rel, new_rel) {
            (Some(a), Some(b)) => (a, b),
            (Some(a), None) | (None, Some(a)) => (a, a),
            (None, None) => ("", ""),
        };
        unified_diff_moved(from, to, self.old.as_deref(), self.new.as_deref())
    }

    fn display_path(&self) -> String {
        self.target
            .as_ref()
            .or(self.source.as_ref())
            .map(|p| p.1.clone())
            .unwrap_or_default()
    }
}

/// Parses and validates a patch against the disk without writing anything.
fn plan_patch(text: &str, ctx: &ToolContext) -> Result<Vec<FileChange>, ToolError> {
    let ops = parse_patch(text)?;
    let beneath = Beneath::new(&ctx.workspace)?;
    let mut changes = Vec::new();
    let mut touched: Vec<PathBuf> = Vec::new();
    let mut claim = |path: &PathBuf, rel: &str| -> Result<(), ToolError> {
        if touched.contains(path) {
            return Err(malformed(format!(
                "{rel} appears more than once in the patch"
            )));
        }
        touched.push(path.clone());
        Ok(())
    };
    for op in ops {
        match op {
            PatchOp::Add { path, content } => {
                let target = resolve_for_write(&ctx.workspace, &path)?;
                claim(&target.abs, &target.rel)?;
                if beneath.lstat(&target.abs).is_some() {
                    return Err(ToolError::rejected(format!(
                        "{}: already exists; use '*** Update File:' to change it",
                        target.rel
                    )));
                }
                changes.push(FileChange {
                    source: None,
                    target: Some((target.abs, target.rel)),
                    old: None,
                    new: Some(content.into_bytes()),
                });
            }
            PatchOp::Delete { path } => {
                let source = resolve_for_write(&ctx.workspace, &path)?;
                claim(&source.abs, &source.rel)?;
                let old = read_existing(&beneath, &source.abs, &source.rel)?.ok_or_else(|| {
                    ToolError::NotFound {
                        path: source.rel.clone(),
                        what: "cannot delete, no such file",
                    }
                })?;
                check_fresh(ctx, &source.abs, &source.rel, UnreadPolicy::Allow)?;
                changes.push(FileChange {
                    source: Some((source.abs, source.rel)),
                    target: None,
                    old: Some(old),
                    new: None,
                });
            }
            PatchOp::Update {
                path,
                move_to,
                chunks,
            } => {
                let source = resolve_for_write(&ctx.workspace, &path)?;
                claim(&source.abs, &source.rel)?;
                let old = read_existing(&beneath, &source.abs, &source.rel)?.ok_or_else(|| {
                    ToolError::NotFound {
                        path: source.rel.clone(),
                        what: "cannot update, no such file (use '*** Add File:')",
                    }
                })?;
                check_fresh(ctx, &source.abs, &source.rel, UnreadPolicy::Allow)?;
                let new = apply_chunks(&old, &chunks, &source.rel)?;
                let target = match move_to {
                    Some(dest) => {
                        let t = resolve_for_write(&ctx.workspace, &dest)?;
                        if t.abs != source.abs {
                            claim(&t.abs, &t.rel)?;
                            if beneath.lstat(&t.abs).is_some() {
                                return Err(ToolError::rejected(format!(
                                    "{}: cannot move {} there, the file already exists",
                                    t.rel, source.rel
                                )));
                            }
                        }
                        (t.abs, t.rel)
                    }
                    None => (source.abs.clone(), source.rel.clone()),
                };
                changes.push(FileChange {
                    source: Some((source.abs, source.rel)),
                    target: Some(target),
                    old: Some(old),
                    new: Some(new),
                });
            }
        }
    }
    Ok(changes)
}

/// Writes validated changes; on a failure, puts back what was already written.
fn commit_changes(changes: &[FileChange], ctx: &ToolContext) -> Result<(), ToolError> {
    let beneath = Beneath::new(&ctx.workspace)?;
    crate::tool::checkpoint::before_change(ctx);
    // (path, as shown, what it held before) for every path touched so far.
    let mut undo_log: Vec<(&PathBuf, &str, Option<Vec<u8>>)> = Vec::new();
    let mut outcome = Ok(());
    'files: for change in changes {
        if let Some((abs, rel)) = &change.target {
            let before = beneath.read_existing(abs, rel).ok().flatten();
            undo_log.push((abs, rel, before));
            // A moved file keeps its permissions.
            let mode = match &change.source {
                Some((src, _)) if src != abs => beneath.mode_of(src),
                _ => None,
            };
            let bytes = change.new.as_deref().unwrap_or_default();
            if let Err(e) = beneath.write_atomic(abs, rel, bytes, mode) {
                outcome = Err(e);
                break 'files;
            }
        }
        if let Some((abs, rel)) = &change.source {
            let moved_away = change.target.as_ref().is_some_and(|(t, _)| t != abs);
            if change.target.is_none() || moved_away {
                undo_log.push((abs, rel, change.old.clone()));
                if let Err(e) = beneath.remove_file(abs, rel) {
                    outcome = Err(e);
                    break 'files;
                }
            }
        }
    }
    if let Err(cause) = outcome {
        for (path, rel, before) in undo_log.into_iter().rev() {
            let _ = match before {
                Some(bytes) => beneath.write_atomic(path, rel, &bytes, None),
                None => beneath.remove_file(path, rel),
            };
        }
        return Err(ToolError::RolledBack {
            cause: Box::new(cause),
        });
    }
    Ok(())
}

fn apply_patch(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: PatchArgs = parse_args("apply_patch", args)?;
    let changes = plan_patch(&args.input, ctx)?;
    commit_changes(&changes, ctx)?;
    let mut summary = String::from("Success. Updated the following files:\n");
    for change in &changes {
        if let Some((abs, _)) = &change.target {
            record_stamp(ctx, abs);
        }
        ctx.events.emit(Event::FileDiff {
            call_id: ctx.call_id.clone(),
            path: change.display_path(),
            diff: change.diff(),
        });
        summary.push_str(&change.summary());
        summary.push('\n');
    }
    Ok(summary)
}

#[derive(Deserialize)]
struct PatchArgs {
    #[serde(alias = "patch")]
    input: String,
}

pub struct ApplyPatchTool;

impl Tool for ApplyPatchTool {
    fn name(&self) -> &'static str {
        "apply_patch"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Add, delete, update and move files with one patch. All-or-nothing: if \
                any hunk does not apply, no file is changed. Format:\n\
                *** Begin Patch\n\
                *** Add File: path/new.txt\n\
                +every line of the new file, prefixed with +\n\
                *** Delete File: path/old.txt\n\
                *** Update File: path/file.py\n\
                *** Move to: path/renamed.py   (optional)\n\
                @@ def some_function():   (optional: a line to find first, e.g. a signature)\n\
                 context line (prefix: one space)\n\
                -removed line\n\
                +added line\n\
                *** End of File   (optional: the hunk is at the end of the file)\n\
                *** End Patch\n\
                No line numbers: hunks are located by their context and removed lines, which \
                must match the file (trailing whitespace may differ). Give about 3 lines of \
                context around each change, hunks in file order. Paths are relative to the \
                workspace. A file you read earlier must not have changed since."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "input": {"type": "string", "description": "The whole patch, from '*** Begin Patch' to '*** End Patch'."}
                },
                "required": ["input"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, args: &serde_json::Value, ctx: &ToolContext) -> ApprovalNeed {
        let plan =
            parse_args::<PatchArgs>("apply_patch", args).and_then(|a| plan_patch(&a.input, ctx));
        match plan {
            Ok(changes) => ApprovalNeed::Edit {
                path: changes
                    .iter()
                    .map(FileChange::display_path)
                    .collect::<Vec<_>>()
                    .join(", "),
                diff: changes.iter().map(FileChange::diff).collect(),
            },
            Err(reason) => ApprovalNeed::Edit {
                path: "(patch)".into(),
                diff: format!("(this patch will fail: {reason})"),
            },
        }
    }

    fn title(&self, args: &serde_json::Value) -> String {
        let text = args["input"]
            .as_str()
            .or_else(|| args["patch"].as_str())
            .unwrap_or("");
        let files: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                let t = l.trim();
                t.strip_prefix("*** Add File:")
                    .or_else(|| t.strip_prefix("*** Update File:"))
                    .or_else(|| t.strip_prefix("*** Delete File:"))
                    .map(str::trim)
            })
            .collect();
        format!("patch {}", files.join(", "))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(apply_patch(&args, ctx)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update(chunks_text: &str, original: &str) -> Result<String, ToolError> {
        let patch = format!("*** Begin Patch\n*** Update File: f\n{chunks_text}\n*** End Patch\n");
        let ops = parse_patch(&patch)?;
        let PatchOp::Update { chunks, .. } = &ops[0] else {
            panic!("not an update")
        };
        apply_chunks(original.as_bytes(), chunks, "f").map(|b| String::from_utf8(b).unwrap())
    }

    #[test]
    fn parses_all_operations() {
        let ops = parse_patch(
            "*** Begin Patch\n*** Add File: a.txt\n+hello\n*** Delete File: b.txt\n\
             *** Update File: c.txt\n*** Move to: d.txt\n@@ fn x\n-old\n+new\n*** End Patch",
        )
        .unwrap();
        assert_eq!(ops.len(), 3);
        let spaced = parse_patch(
            "*** Begin Patch\n*** Add File: a\n+x\n\n*** Delete File: b\n*** End Patch",
        )
        .unwrap();
        assert_eq!(spaced.len(), 2);
        assert_eq!(
            ops[0],
            PatchOp::Add {
                path: "a.txt".into(),
                content: "hello\n".into()
            }
        );
        let PatchOp::Update {
            move_to, chunks, ..
        } = &ops[2]
        else {
            panic!()
        };
        assert_eq!(move_to.as_deref(), Some("d.txt"));
        assert_eq!(chunks[0].context.as_deref(), Some("fn x"));
    }

    #[test]
    fn hunks_located_by_context_and_whitespace_tolerant() {
        let original = "fn a() {\n    1\n}\nfn b() {\n    1   \n}\n";
        let out = update("@@ fn b() {\n-    1\n+    2\n }", original).unwrap();
        assert_eq!(out, "fn a() {\n    1\n}\nfn b() {\n    2\n}\n");
    }

    #[test]
    fn crlf_is_kept_and_missing_lines_fail() {
        let out = update(" a\n-b\n+B\n c", "a\r\nb\r\nc\r\n").unwrap();
        assert_eq!(out, "a\r\nB\r\nc\r\n");
        let err = update(" a\n-zzz\n+B", "a\nb\n").unwrap_err();
        assert!(matches!(err, ToolError::PatchDoesNotApply { .. }), "{err}");
        assert!(err.to_string().contains("hunk 1 does not match"), "{err}");
    }

    #[test]
    fn pure_additions_and_end_of_file() {
        assert_eq!(update("+c", "a\nb\n").unwrap(), "a\nb\nc\n");
        assert_eq!(update("@@ a\n+x", "a\nb\n").unwrap(), "a\nx\nb\n");
        assert_eq!(
            update(" b\n-a\n+z\n*** End of File", "a\nb\na\nb\na\n").unwrap(),
            "a\nb\na\nb\nz\n"
        );
        assert_eq!(update("-b\n+c", "a\nb").unwrap(), "a\nc");
    }

    #[test]
    fn hunk_search_handles_repeats_and_partial_matches() {
        assert_eq!(find_run(&[1, 1, 1, 2], &[1, 1, 2]), Some(1));
        assert_eq!(find_run(&[1, 2, 1, 2, 1, 3], &[1, 2, 1, 3]), Some(2));
        assert_eq!(find_run(&[1, 2, 3], &[2, 4]), None);
        assert_eq!(find_run(&[], &[1]), None);
        let original = "x\nx\nx\nx\ny\nx\n";
        assert_eq!(
            update(" x\n x\n-y\n+z", original).unwrap(),
            "x\nx\nx\nx\nz\nx\n"
        );
        // A patch line the file does not hold anywhere never matches.
        assert!(update(" x\n-nowhere\n+z", original).is_err());
    }

    #[test]
    fn malformed_patches_are_rejected_with_line_numbers() {
        assert!(parse_patch("nothing").is_err());
        let err = parse_patch("*** Begin Patch\n*** Frobnicate: x\n*** End Patch").unwrap_err();
        assert!(matches!(err, ToolError::MalformedPatch { .. }), "{err}");
        assert!(err.to_string().contains("line 2"), "{err}");
        let err =
            parse_patch("*** Begin Patch\n*** Add File: x\nno plus\n*** End Patch").unwrap_err();
        assert!(err.to_string().contains("line 3"), "{err}");
    }
}
