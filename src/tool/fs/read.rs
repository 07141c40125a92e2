//! `read_file`: numbered lines of a text file, a line range at a time, with guards for binary
//! and very large files. Records what the model saw for stale-edit detection.

use std::io::{BufRead, BufReader, Read};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use super::{BINARY_SAMPLE, invalid_utf8_bytes, looks_binary, record_stamp};
use crate::protocol::ToolSpec;
use crate::tool::call::{clip_line, into_result, parse_args, run_blocking};
use crate::tool::path::resolve;
use crate::tool::{ApprovalNeed, IoOp, Tool, ToolContext, ToolError, ToolResult};

/// Lines returned when the model gives no `limit`.
pub const DEFAULT_LINE_LIMIT: usize = 2000;
/// Most bytes of file text returned by one call.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024;
/// Longer lines are cut (minified files would otherwise fill the cap with one line).
pub const MAX_LINE_CHARS: usize = 2000;

#[derive(Deserialize)]
struct ReadArgs {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

pub struct ReadFileTool;

impl Tool for ReadFileTool {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Read a text file from the workspace. Returns numbered lines as `<line number>\\t<text>`; \
                 the numbers are not part of the file. By default returns the first {DEFAULT_LINE_LIMIT} \
                 lines; pass `offset` (1-based first line) and `limit` (number of lines) to read a range \
                 of a long file. Output is capped at {} KiB; the result says how to continue. Binary files \
                 are detected and not shown. You must read a file before editing or overwriting it.",
                OUTPUT_CAP_BYTES / 1024
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace root (or absolute inside it)."},
                    "offset": {"type": "integer", "minimum": 1, "description": "1-based line number to start reading from (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "description": format!("Maximum number of lines to return (default {DEFAULT_LINE_LIMIT}).")}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    fn approval(&self, _args: &serde_json::Value, _ctx: &ToolContext) -> ApprovalNeed {
        ApprovalNeed::None
    }

    fn title(&self, args: &serde_json::Value) -> String {
        let path = args.get("path").and_then(|p| p.as_str()).unwrap_or("?");
        match args.get("offset").and_then(|o| o.as_u64()) {
            Some(offset) => format!("read {path} from line {offset}"),
            None => format!("read {path}"),
        }
    }

    fn run<'a>(
        &'a self,
        args: serde_json::Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, ToolResult> {
        run_blocking(ctx, move |ctx| into_result(read_file(&args, ctx)))
    }
}

fn read_file(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: ReadArgs = parse_args("read_file", args)?;
    let target = resolve(&ctx.workspace, &args.path)?;
    let rel = &target.rel;
    let meta = std::fs::metadata(&target.abs).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::NotFound {
            path: rel.clone(),
            what: "no such file",
        },
        _ => ToolError::io(IoOp::Inspect, rel, e),
    })?;
    if meta.is_dir() {
        return Err(ToolError::rejected(format!(
            "{rel} is a directory; use list_dir to see its contents"
        )));
    }
    let file = std::fs::File::open(&target.abs).map_err(|e| ToolError::io(IoOp::Open, rel, e))?;
    let mut reader = BufReader::with_capacity(64 * 1024, file);
    let mut sample = Vec::with_capacity(BINARY_SAMPLE);
    (&mut reader)
        .take(BINARY_SAMPLE as u64)
        .read_to_end(&mut sample)
        .map_err(|e| ToolError::io(IoOp::Read, rel, e))?;
    if looks_binary(&sample) {
        record_stamp(ctx, &target.abs);
        return Err(ToolError::Binary {
            path: rel.clone(),
            bytes: meta.len(),
        });
    }
    let first = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_LINE_LIMIT).max(1);
    let mut out = String::new();
    let mut line_no = 0usize;
    let mut last_shown = 0usize;
    let mut capped_at: Option<usize> = None;
    let mut invalid = invalid_utf8_bytes(&sample) > 0;
    let mut line = sample;
    // The sample is the start of the first line(s): finish its last line before splitting.
    reader
        .read_until(b'\n', &mut line)
        .map_err(|e| ToolError::io(IoOp::Read, rel, e))?;
    let mut pending = line;
    loop {
        if pending.is_empty() {
            break;
        }
        for raw in pending.split_inclusive(|&b| b == b'\n') {
            line_no += 1;
            if line_no < first || line_no >= first + limit || capped_at.is_some() {
                continue;
            }
            let text = raw.strip_suffix(b"\n").unwrap_or(raw);
            let text = text.strip_suffix(b"\r").unwrap_or(text);
            let decoded = String::from_utf8_lossy(text);
            if matches!(decoded, std::borrow::Cow::Owned(_)) {
                invalid = true;
            }
            let shown = clip_line(&decoded, MAX_LINE_CHARS);
            if out.len() + shown.len() + 8 > OUTPUT_CAP_BYTES && last_shown >= first {
                capped_at = Some(last_shown);
                continue;
            }
            out.push_str(&format!("{line_no:>6}\t{shown}\n"));
            last_shown = line_no;
        }
        pending = Vec::new();
        reader
            .read_until(b'\n', &mut pending)
            .map_err(|e| ToolError::io(IoOp::Read, rel, e))?;
    }
    record_stamp(ctx, &target.abs);
    let total = line_no;
    if total == 0 {
        return Ok(format!("{rel}: (empty file)"));
    }
    if first > total {
        return Err(ToolError::rejected(format!(
            "{rel}: offset {first} is past the end of the file, which has {total} lines"
        )));
    }
    let mut header = format!("{rel} (lines {first}-{last_shown} of {total})");
    if invalid {
        header.push_str(
            " [not valid UTF-8: invalid bytes are shown as U+FFFD and cannot be matched by edit]",
        );
    }
    let mut result = format!("{header}\n{out}");
    if let Some(last) = capped_at {
        result.push_str(&format!(
            "[output capped at {} KiB after line {last}; the file has {total} lines ({} bytes). \
             Continue with offset={} and a smaller limit.]\n",
            OUTPUT_CAP_BYTES / 1024,
            meta.len(),
            last + 1
        ));
    } else if last_shown < total {
        result.push_str(&format!(
            "[{} more lines; continue with offset={}]\n",
            total - last_shown,
            last_shown + 1
        ));
    }
    Ok(result)
}
