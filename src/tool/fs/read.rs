//! `read_file`: numbered lines of a text file, a line range at a time, with guards for binary
//! and very large files. Records what the model saw for stale-edit detection. The file is
//! streamed: memory stays bounded by the output cap whatever the file's size or line length.

use std::io::{BufRead, BufReader, Read};

use futures_util::future::BoxFuture;
use serde::Deserialize;
use serde_json::json;

use super::{BINARY_SAMPLE, Beneath, invalid_utf8_bytes, looks_binary, record_stamp};
use crate::protocol::ToolSpec;
use crate::tool::call::{clip_line, into_result, parse_args, run_blocking};
use crate::tool::path::resolve_visible;
use crate::tool::{ApprovalNeed, IoOp, Tool, ToolContext, ToolError, ToolResult};

/// Bytes of one line kept to show it: enough for `MAX_LINE_CHARS` characters of any width.
const MAX_LINE_BYTES: usize = MAX_LINE_CHARS * 4;

/// Lines returned when the model gives no `limit`.
pub const DEFAULT_LINE_LIMIT: usize = 2000;
/// Most bytes of file text returned by one call.
pub const OUTPUT_CAP_BYTES: usize = 64 * 1024;
/// Longer lines are cut (minified files would otherwise fill the cap with one line).
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes of a file one call reads at most, to find the lines asked for and count the rest: a
/// sparse file of a terabyte with no newline would otherwise keep the turn reading for minutes.
pub const MAX_SCAN_BYTES: u64 = 1 << 30;

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

/// The lines wanted so far, built as the file streams by.
struct Collector {
    first: usize,
    limit: usize,
    out: String,
    line_no: usize,
    last_shown: usize,
    capped_at: Option<usize>,
    invalid: bool,
    /// The kept head of the line being read (at most `MAX_LINE_BYTES`).
    line: Vec<u8>,
    /// Whether bytes of an unfinished line have been seen.
    open_line: bool,
}

impl Collector {
    fn wants_current(&self) -> bool {
        let n = self.line_no + 1;
        n >= self.first && n < self.first.saturating_add(self.limit) && self.capped_at.is_none()
    }

    /// Takes the next bytes of the file. Lines outside the range are only counted.
    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let newline = memchr::memchr(b'\n', data);
            if self.wants_current() {
                let part = &data[..newline.unwrap_or(data.len())];
                let room = MAX_LINE_BYTES.saturating_sub(self.line.len());
                self.line.extend_from_slice(&part[..part.len().min(room)]);
            }
            self.open_line = true;
            match newline {
                Some(i) => {
                    self.finish_line();
                    data = &data[i + 1..];
                }
                None => data = &[],
            }
        }
    }

    fn finish_line(&mut self) {
        if !self.open_line {
            return;
        }
        let wanted = self.wants_current();
        self.line_no += 1;
        self.open_line = false;
        let mut raw = std::mem::take(&mut self.line);
        if !wanted {
            return;
        }
        let clipped = raw.len() >= MAX_LINE_BYTES;
        if raw.ends_with(b"\r") {
            raw.pop();
        }
        if clipped {
            // A character cut in two at the clip is not an invalid byte of the file.
            if let Err(e) = std::str::from_utf8(&raw)
                && e.error_len().is_none()
            {
                raw.truncate(e.valid_up_to());
            }
        }
        let decoded = String::from_utf8_lossy(&raw);
        if matches!(decoded, std::borrow::Cow::Owned(_)) {
            self.invalid = true;
        }
        let mut shown = clip_line(&decoded, MAX_LINE_CHARS);
        if clipped && !shown.ends_with("[line truncated]") {
            shown.push_str("… [line truncated]");
        }
        let line_no = self.line_no;
        if self.out.len() + shown.len() + 8 > OUTPUT_CAP_BYTES && self.last_shown >= self.first {
            self.capped_at = Some(self.last_shown);
            return;
        }
        self.out.push_str(&format!("{line_no:>6}\t{shown}\n"));
        self.last_shown = line_no;
    }
}

fn read_file(args: &serde_json::Value, ctx: &ToolContext) -> Result<String, ToolError> {
    let args: ReadArgs = parse_args("read_file", args)?;
    let beneath = Beneath::new(&ctx.workspace)?;
    let target = resolve_visible(&ctx.workspace, &args.path, beneath.rules())?;
    let rel = &target.rel;
    let (file, len) =
        beneath
            .open_regular(&target.abs, rel)?
            .ok_or_else(|| ToolError::NotFound {
                path: rel.clone(),
                what: "no such file",
            })?;
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
            bytes: len,
        });
    }
    let mut lines = Collector {
        first: args.offset.unwrap_or(1).max(1),
        limit: args.limit.unwrap_or(DEFAULT_LINE_LIMIT).max(1),
        out: String::new(),
        line_no: 0,
        last_shown: 0,
        capped_at: None,
        invalid: invalid_utf8_bytes(&sample) > 0,
        line: Vec::new(),
        open_line: false,
    };
    lines.feed(&sample);
    let mut scanned = sample.len() as u64;
    let mut stopped = false;
    let scan_bound = ctx.state.limits.read_scan_bytes.max(1);
    loop {
        if ctx.cancel.is_cancelled() {
            return Err(ToolError::rejected(format!("{rel}: reading was cancelled")));
        }
        if scanned >= scan_bound {
            stopped = true;
            break;
        }
        let block = reader
            .fill_buf()
            .map_err(|e| ToolError::io(IoOp::Read, rel, e))?;
        if block.is_empty() {
            break;
        }
        let n = block.len().min((scan_bound - scanned) as usize);
        lines.feed(&block[..n]);
        reader.consume(n);
        scanned += n as u64;
    }
    lines.finish_line();
    record_stamp(ctx, &target.abs);
    let (first, last_shown, total) = (lines.first, lines.last_shown, lines.line_no);
    if total == 0 {
        return Ok(format!("{rel}: (empty file)"));
    }
    let scanned_size = binary_size(scan_bound);
    if first > total && stopped {
        return Err(ToolError::rejected(format!(
            "{rel}: line {first} is not in the first {scanned_size} of this {len}-byte file, \
             which is as far as read_file reads; use the shell for the rest (`tail -c`, `sed -n`)"
        )));
    }
    if first > total {
        return Err(ToolError::rejected(format!(
            "{rel}: offset {first} is past the end of the file, which has {total} lines"
        )));
    }
    let mut header = if stopped {
        format!(
            "{rel} (lines {first}-{last_shown} of at least {total}: read_file stopped after the \
             first {scanned_size} of {len} bytes)"
        )
    } else {
        format!("{rel} (lines {first}-{last_shown} of {total})")
    };
    if lines.invalid {
        header.push_str(
            " [not valid UTF-8: invalid bytes are shown as U+FFFD and cannot be matched by edit]",
        );
    }
    let mut result = format!("{header}\n{}", lines.out);
    let more = if stopped { "at least " } else { "" };
    if let Some(last) = lines.capped_at {
        result.push_str(&format!(
            "[output capped at {} KiB after line {last}; the file has {more}{total} lines ({len} \
             bytes). Continue with offset={} and a smaller limit.]\n",
            OUTPUT_CAP_BYTES / 1024,
            last + 1
        ));
    } else if last_shown < total {
        result.push_str(&format!(
            "[{more}{} more lines; continue with offset={}]\n",
            total - last_shown,
            last_shown + 1
        ));
    }
    Ok(result)
}

/// `bytes` as the largest binary unit that divides it: "1 GiB", "64 MiB", "1000 bytes".
fn binary_size(bytes: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::{MAX_SCAN_BYTES, binary_size};

    #[test]
    fn the_scan_bound_is_told_in_its_largest_whole_unit() {
        assert_eq!(binary_size(MAX_SCAN_BYTES), "1 GiB");
        assert_eq!(binary_size(64 << 20), "64 MiB");
        assert_eq!(binary_size(1536 << 20), "1536 MiB");
        assert_eq!(binary_size(1000), "1000 bytes");
    }
}
