//! File tools (`read_file`, `write_file`, `edit`) and what they share with `apply_patch`:
//! read stamps for stale-edit detection, atomic writes that keep permissions, line-ending and
//! binary detection. Every open, create, rename and unlink goes through `Beneath`.

mod beneath;
mod edit;
mod read;
mod write;

pub use beneath::Beneath;
pub use edit::EditTool;
pub use read::{MAX_SCAN_BYTES, ReadFileTool};
pub use write::WriteFileTool;

use std::path::Path;

use super::{FileStamp, ToolContext, ToolError};

/// The stamp of a file on disk now, `None` when it does not exist or is not a regular file.
pub fn current_stamp(path: &Path) -> Option<FileStamp> {
    // Never follows a symlink: tool::path has already resolved the ones inside the workspace.
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    Some(FileStamp {
        modified: meta.modified().ok()?,
        len: meta.len(),
    })
}

/// Remembers that the model has seen `path` as it is on disk now.
pub fn record_stamp(ctx: &ToolContext, path: &Path) {
    if let Some(stamp) = current_stamp(path)
        && let Ok(mut stamps) = ctx.state.read_stamps.lock()
    {
        stamps.insert(path.to_path_buf(), stamp);
    }
}

/// Whether a change to an existing file the model never read is allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreadPolicy {
    /// `write_file` and `edit`: the model must have read an existing file first.
    Refuse,
    /// `apply_patch`: its context lines already prove what the model expects to find.
    Allow,
}

/// Refuses a change to `path` (shown as `rel`) when the file changed on disk since the model
/// last read it, or (per `policy`) when the model never read it. New files always pass.
pub fn check_fresh(
    ctx: &ToolContext,
    path: &Path,
    rel: &str,
    policy: UnreadPolicy,
) -> Result<(), ToolError> {
    let Some(now) = current_stamp(path) else {
        return Ok(());
    };
    let seen = ctx
        .state
        .read_stamps
        .lock()
        .map_err(|_| ToolError::Internal {
            what: "read stamps are poisoned",
        })?
        .get(path)
        .copied();
    match seen {
        Some(stamp) if stamp == now => Ok(()),
        Some(_) => Err(ToolError::Stale {
            path: rel.to_string(),
        }),
        None if policy == UnreadPolicy::Allow => Ok(()),
        None => Err(ToolError::Unread {
            path: rel.to_string(),
        }),
    }
}

/// Writes a change the model asked for: checkpoint (first change of the turn), atomic write,
/// a fresh read stamp (the model knows what it wrote), and a `FileDiff` event. Returns the diff.
pub fn write_change(
    ctx: &ToolContext,
    beneath: &Beneath,
    path: &Path,
    rel: &str,
    old: Option<&[u8]>,
    new: &[u8],
) -> Result<String, ToolError> {
    crate::tool::checkpoint::before_change(ctx);
    beneath.write_atomic(path, rel, new, None)?;
    record_stamp(ctx, path);
    let diff = crate::tool::diff::unified_diff(rel, old, Some(new));
    ctx.events.emit(crate::protocol::Event::FileDiff {
        call_id: ctx.call_id.clone(),
        path: rel.to_string(),
        diff: diff.clone(),
    });
    Ok(diff)
}

/// Reads a regular file that may not exist: `Ok(None)` when it does not. Special files and
/// files over `MAX_EDIT_BYTES` are refused.
pub fn read_existing(
    beneath: &Beneath,
    path: &Path,
    rel: &str,
) -> Result<Option<Vec<u8>>, ToolError> {
    beneath.read_existing(path, rel)
}

/// Line ending of a text file, by majority.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnding {
    Lf,
    CrLf,
}

impl LineEnding {
    pub fn detect(bytes: &[u8]) -> LineEnding {
        let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
        let crlf = bytes.windows(2).filter(|w| w == b"\r\n").count();
        if crlf > 0 && crlf * 2 >= newlines {
            LineEnding::CrLf
        } else {
            LineEnding::Lf
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LineEnding::Lf => "\n",
            LineEnding::CrLf => "\r\n",
        }
    }

    /// `text` (with any line endings) rewritten to use this one.
    pub fn apply(self, text: &str) -> String {
        let lf = text.replace("\r\n", "\n");
        match self {
            LineEnding::Lf => lf,
            LineEnding::CrLf => lf.replace('\n', "\r\n"),
        }
    }
}

/// Bytes looked at to decide whether a file is binary.
pub const BINARY_SAMPLE: usize = 8192;

/// Binary if the sample has a NUL byte or more than 30% of it is not valid UTF-8.
pub fn looks_binary(sample: &[u8]) -> bool {
    if sample.contains(&0) {
        return true;
    }
    invalid_utf8_bytes(sample) * 10 > sample.len() * 3
}

/// Bytes of `data` that are not part of valid UTF-8 (a sequence cut at the end counts as valid).
pub fn invalid_utf8_bytes(data: &[u8]) -> usize {
    let mut invalid = 0;
    let mut rest = data;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(_) => break,
            Err(e) => match e.error_len() {
                Some(len) => {
                    invalid += len;
                    rest = &rest[e.valid_up_to() + len..];
                }
                None => break,
            },
        }
    }
    invalid
}

/// Finds every start offset of `needle` in `haystack` (non-overlapping).
pub fn find_all(haystack: &[u8], needle: &str) -> Vec<usize> {
    let mut found = Vec::new();
    if needle.is_empty() || needle.len() > haystack.len() {
        return found;
    }
    let finder = regex::bytes::RegexBuilder::new(&regex::escape(needle))
        .size_limit(64 << 20)
        .build();
    if let Ok(re) = finder {
        found.extend(re.find_iter(haystack).map(|m| m.start()));
    }
    found
}

/// 1-based line number of byte `offset` in `data`.
pub fn line_of(data: &[u8], offset: usize) -> usize {
    data[..offset.min(data.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_endings_are_detected_and_applied() {
        assert_eq!(LineEnding::detect(b"a\r\nb\r\n"), LineEnding::CrLf);
        assert_eq!(LineEnding::detect(b"a\nb\n"), LineEnding::Lf);
        assert_eq!(LineEnding::CrLf.apply("a\nb\r\n"), "a\r\nb\r\n");
        assert_eq!(LineEnding::Lf.apply("a\r\nb\n"), "a\nb\n");
    }

    #[test]
    fn binary_detection() {
        assert!(looks_binary(b"abc\0def"));
        assert!(!looks_binary("héllo wörld".as_bytes()));
        assert!(!looks_binary(b"caf\xe9 au lait, a latin-1 line of text"));
        assert!(looks_binary(&[0xff, 0xfe, 0x80, 0x81, 0x41, 0x90, 0x91]));
    }

    #[test]
    fn find_all_and_line_of() {
        let data = b"a x\nb x\nc";
        assert_eq!(find_all(data, "x"), vec![2, 6]);
        assert_eq!(line_of(data, 6), 2);
    }
}
