//! `edit`: exact string replacement in one file. The old text must occur exactly once (unless
//! `replace_all`); otherwise the error shows where the nearest or the competing matches are.
//! Works on bytes, so CRLF and non-UTF-8 content outside the edited text stays byte for byte.

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use super::{
    Beneath, LineEnding, UnreadPolicy, check_fresh, find_all, line_of, read_existing, write_change,
};
use crate::protocol::ToolSpec;
use crate::tool::call::{cap_text, clip_line, into_result, parse_args, run_blocking};
use crate::tool::diff::{line_counts, unified_diff};
use crate::tool::path::resolve_for_write;
use crate::tool::{ApprovalNeed, Tool, ToolContext, ToolError, ToolResult};

#[derive(Deserialize)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

pub struct EditTool;

struct PlannedEdit {
    beneath: Beneath,
    abs: std::path::PathBuf,
    rel: String,
    old: Vec<u8>,
    new: Vec<u8>,
    replacements: usize,
}

impl Tool for EditTool {
    fn name(&self) -> &'static str {
        "edit"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Replace an exact piece of text in an existing file. `old_string` must \
                match the file exactly (whitespace and indentation included, without the line \
                number prefixes read_file shows) and must occur exactly once, unless \
                `replace_all` is true; include a few surrounding lines to make it unique. You \
                must have read the file with read_file first, and it must not have changed \
                since. The file's line endings are kept. To create a file use write_file."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace root (or absolute inside it)."},
                    "old_string": {"type": "string", "description": "The exact text to replace (must be non-empty)."},
                    "new_string": {"type": "string", "description": "The text to put in its place (may be empty to delete)."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence instead of requiring exactly one (default false)."}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, args: &serde_json::Value, ctx: &ToolContext) -> ApprovalNeed {
        match plan_edit(args, ctx) {
            Ok(plan) => ApprovalNeed::Edit {
                diff: unified_diff(&plan.rel, Some(&plan.old), Some(&plan.new)),
                path: plan.rel,
            },
            Err(reason) => ApprovalNeed::Edit {
                path: args["path"].as_str().unwrap_or("?").to_string(),
                diff: format!("(this edit will fail: {reason})"),
            },
        }
    }

    fn title(&self, args: &serde_json::Value) -> String {
        format!("edit {}", args["path"].as_str().unwrap_or("?"))
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(edit_file(&args, ctx)))
    }
}

fn edit_file(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let plan = plan_edit(args, ctx)?;
    check_fresh(ctx, &plan.abs, &plan.rel, UnreadPolicy::Refuse)?;
    let diff = write_change(
        ctx,
        &plan.beneath,
        &plan.abs,
        &plan.rel,
        Some(&plan.old),
        &plan.new,
    )?;
    let (added, removed) = line_counts(&diff);
    Ok(format!(
        "Edited {}: {} replacement{} (+{added} -{removed} lines)\n{}",
        plan.rel,
        plan.replacements,
        if plan.replacements == 1 { "" } else { "s" },
        cap_text(diff, 4096)
    ))
}

fn plan_edit(args: &serde_json::Value, ctx: &ToolContext) -> Result<PlannedEdit, ToolError> {
    let args: EditArgs = parse_args("edit", args)?;
    let target = resolve_for_write(&ctx.workspace, &args.path)?;
    let rel = target.rel;
    let beneath = Beneath::new(&ctx.workspace)?;
    let old = read_existing(&beneath, &target.abs, &rel)?.ok_or_else(|| ToolError::NotFound {
        path: rel.clone(),
        what: "no such file; use write_file to create it",
    })?;
    if args.old_string.is_empty() {
        return Err(ToolError::invalid_argument(
            "old_string is empty; give the exact text to replace",
        ));
    }
    if args.old_string == args.new_string {
        return Err(ToolError::invalid_argument(
            "old_string and new_string are identical; nothing would change",
        ));
    }
    // The model writes `\n`; in a CRLF file the same text is stored with `\r\n`.
    let ending = LineEnding::detect(&old);
    let mut needle = ending.apply(&args.old_string);
    let mut replacement = ending.apply(&args.new_string);
    let mut starts = find_all(&old, &needle);
    if starts.is_empty() && needle != args.old_string {
        needle = args.old_string.clone();
        replacement = args.new_string.clone();
        starts = find_all(&old, &needle);
    }
    match starts.len() {
        0 => {
            return Err(ToolError::rejected(no_match_message(
                &rel,
                &old,
                &args.old_string,
            )));
        }
        1 => {}
        n if !args.replace_all => {
            return Err(ToolError::rejected(ambiguous_message(
                &rel, &old, &starts, n,
            )));
        }
        _ => {}
    }
    let mut new = Vec::with_capacity(old.len() + starts.len() * replacement.len());
    let mut from = 0;
    for &start in &starts {
        new.extend_from_slice(&old[from..start]);
        new.extend_from_slice(replacement.as_bytes());
        from = start + needle.len();
    }
    new.extend_from_slice(&old[from..]);
    Ok(PlannedEdit {
        beneath,
        abs: target.abs,
        rel,
        replacements: starts.len(),
        old,
        new,
    })
}

fn ambiguous_message(rel: &str, data: &[u8], starts: &[usize], count: usize) -> String {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.lines().collect();
    let mut message = format!(
        "{rel}: old_string occurs {count} times; it must occur exactly once. Add surrounding \
         lines to make it unique, or set replace_all to true. Matches start at:\n"
    );
    for &start in starts.iter().take(10) {
        let line_no = line_of(data, start);
        let line = lines.get(line_no - 1).copied().unwrap_or("");
        message.push_str(&format!("{line_no:>6}\t{}\n", clip_line(line, 200)));
    }
    if count > 10 {
        message.push_str(&format!("… and {} more\n", count - 10));
    }
    message
}

/// Files longer than this get only the cheap whitespace checks, not fuzzy line scoring.
const FUZZY_LINE_LIMIT: usize = 20_000;

fn no_match_message(rel: &str, data: &[u8], old_string: &str) -> String {
    let text = String::from_utf8_lossy(data);
    let lines: Vec<&str> = text.lines().collect();
    let mut message = format!("{rel}: old_string was not found in the file.");
    let numbered = regex::Regex::new(r"^\s*\d+\t").ok();
    if let Some(re) = numbered
        && old_string.lines().next().is_some_and(|l| re.is_match(l))
    {
        message.push_str(
            " It seems to include the line-number prefixes shown by read_file; leave them out.",
        );
    }
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    if squash(&text).contains(&squash(old_string)) {
        message.push_str(
            " The text exists with different whitespace or indentation; copy it exactly.",
        );
    }
    let probe = old_string
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let best = nearest_lines(&lines, probe);
    if best.is_empty() {
        message.push_str(" Read the file again to see its current content.");
        return message;
    }
    message.push_str("\nNearest lines to the first line of old_string:\n");
    for line_no in best {
        let from = line_no.saturating_sub(2).max(1);
        let to = (line_no + 2).min(lines.len());
        for n in from..=to {
            let marker = if n == line_no { ">" } else { " " };
            message.push_str(&format!(
                "{marker}{n:>5}\t{}\n",
                clip_line(lines[n - 1], 200)
            ));
        }
        message.push_str("   ...\n");
    }
    message
}

/// Up to three 1-based line numbers of the lines most similar to `probe`.
fn nearest_lines(lines: &[&str], probe: &str) -> Vec<usize> {
    if probe.is_empty() || lines.is_empty() {
        return Vec::new();
    }
    let mut scored: Vec<(f32, usize)> = if lines.len() > FUZZY_LINE_LIMIT {
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| l.contains(probe) || probe.contains(l.trim()) && !l.trim().is_empty())
            .map(|(i, _)| (1.0, i + 1))
            .collect()
    } else {
        lines
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                let ratio = similar::TextDiff::from_chars(probe, l.trim()).ratio();
                (ratio, i + 1)
            })
            .filter(|(ratio, _)| *ratio >= 0.5)
            .collect()
    };
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}
