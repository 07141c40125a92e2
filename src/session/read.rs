//! Reading a session file back as its records. A torn last line (crash mid-write) is ignored
//! and cut off before anything is appended, so the next record starts on a line of its own; a
//! bad line anywhere else is an error naming it. What the records rebuild is not decided here:
//! the layer that owns the state folds them (the MoL layer's `SessionState`).

use std::path::Path;

use super::{Record, SessionError};

/// The records of a file's text, and the length of the text they came from: anything after it
/// (a torn last line) must go before the file is appended to.
pub(super) struct Loaded {
    pub records: Vec<Record>,
    /// Bytes up to and including the newline of the last good line.
    pub good_len: u64,
    /// The last good line has no newline yet.
    pub needs_newline: bool,
}

/// The file's bytes as text. A crash can tear the last line inside a multi-byte character:
/// that line is torn like any other (cut before the next append), so the text ends before
/// it. Invalid UTF-8 on an earlier line is corruption, an error naming the line.
pub(super) fn text_of<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a str, SessionError> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(e) => {
            let valid = e.valid_up_to();
            // `valid` is a char boundary, and what precedes it is UTF-8.
            let head = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
            if !bytes[valid..].contains(&b'\n') {
                Ok(head)
            } else {
                Err(SessionError::File {
                    path: path.display().to_string(),
                    reason: format!("line {}: not UTF-8", head.matches('\n').count() + 1),
                })
            }
        }
    }
}

pub(super) fn parse_records(text: &str, path: &Path) -> Result<Loaded, SessionError> {
    let mut records = Vec::new();
    let mut offset = 0usize;
    let mut good_len = 0usize;
    let mut needs_newline = false;
    let mut lines = text.split_inclusive('\n').enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        offset += line.len();
        let last = lines.peek().is_none();
        let body = line.strip_suffix('\n').unwrap_or(line);
        if body.trim().is_empty() {
            good_len = offset;
            continue;
        }
        match serde_json::from_str::<Record>(body) {
            Ok(r) => {
                records.push(r);
                good_len = offset;
                needs_newline = !line.ends_with('\n');
            }
            // Only the last line may be torn by a crash; anything earlier is corruption.
            Err(_) if last => break,
            Err(e) => {
                return Err(SessionError::File {
                    path: path.display().to_string(),
                    reason: format!("line {}: {e}", n + 1),
                });
            }
        }
    }
    Ok(Loaded {
        records,
        good_len: good_len as u64,
        needs_newline,
    })
}
