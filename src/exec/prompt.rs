//! The `--exec` prompt: from argv, or from piped stdin (`-` or no prompt). Never reads a terminal.
//!
//! Stdin is read only when asked for. A prompt argument followed by `-`
//! (`git diff | baton --exec "review this" -`) takes stdin as the material the prompt is
//! about: it is appended as a delimited `<stdin>` block, capped. A prompt argument alone
//! leaves stdin alone: `while read f; do baton --exec "review $f"; done < list` keeps the rest
//! of its list, and a CI step whose stdin stays open does not wait for its end. When a pipe
//! holds input that was not asked for, a note on stderr says how to append it.

use std::io::{IsTerminal, Read};

use crate::protocol::stdio::eprintln;

/// The most of a piped stdin appended to a prompt argument; the rest is cut with a note.
pub const STDIN_CAP: usize = 1024 * 1024;

/// Why `--exec` cannot start: its input (the prompt, stdin, `-o FILE`) is unusable.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error(
        "--exec needs a prompt: pass it as an argument, or pipe it on stdin \
         (e.g. `echo \"…\" | baton --exec -`)"
    )]
    NoPrompt,
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error("cannot read {what} from stdin: {source}")]
    Stdin {
        what: &'static str,
        source: std::io::Error,
    },
    #[error(
        "stdin is binary, not text: baton appends piped text to the prompt; pass a binary \
         file's path in the prompt instead, or redirect stdin from /dev/null"
    )]
    BinaryStdin,
    #[error("-o {0}: is a folder, not a file to write the answer to")]
    OutputIsFolder(std::path::PathBuf),
    #[error("-o {path}: cannot write: {source}")]
    OutputUnwritable {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

pub fn read(arg: Option<&str>, append_stdin: bool) -> Result<String, InputError> {
    let text = match arg {
        Some(p) if p != "-" => {
            let mut text = p.to_string();
            if !append_stdin {
                if pipe_holds_input() {
                    eprintln!(
                        "baton: stdin was not read; to append it to the prompt, put - after \
                         it: … | baton --exec \"PROMPT\" -"
                    );
                }
            } else if let Some(block) = piped_stdin_block()? {
                text.push_str("\n\n");
                text.push_str(&block);
            }
            text
        }
        _ => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(InputError::NoPrompt);
            }
            let mut buf = String::new();
            stdin
                .lock()
                .read_to_string(&mut buf)
                .map_err(|source| InputError::Stdin {
                    what: "the prompt",
                    source,
                })?;
            buf
        }
    };
    if text.trim().is_empty() {
        return Err(InputError::EmptyPrompt);
    }
    Ok(text)
}

/// Whether stdin is a pipe with bytes waiting in it now (`git diff | baton --exec "…"`
/// without the `-`). A file (the list of a `while read` loop), a terminal or an empty pipe
/// is not: nothing is said for those.
fn pipe_holds_input() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let stdin = std::io::stdin();
    let fd = stdin.as_fd();
    let is_fifo = fd
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.file_type().is_fifo());
    if !is_fifo {
        return false;
    }
    // FIONREAD on our own stdin: nothing is read from the pipe.
    rustix::io::ioctl_fionread(fd).is_ok_and(|waiting| waiting > 0)
}

/// Stdin as a `<stdin>` block when something is piped or redirected from a file into it. A
/// terminal, `/dev/null` or a closed stdin is no input: those are what a prompt alone runs with.
fn piped_stdin_block() -> Result<Option<String>, InputError> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let stdin = std::io::stdin();
    let piped = stdin
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
        .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_file());
    if !piped {
        return Ok(None);
    }
    let mut bytes = Vec::new();
    stdin
        .lock()
        .take(STDIN_CAP as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Stdin {
            what: "the input",
            source,
        })?;
    stdin_block(bytes)
}

/// The block for `bytes` read from stdin (at most `STDIN_CAP + 1` of them: one more than the
/// cap says there was more). Binary input is refused: the model cannot use it, and a NUL or
/// invalid UTF-8 in the prompt would only produce a confusing answer.
fn stdin_block(mut bytes: Vec<u8>) -> Result<Option<String>, InputError> {
    let cut = bytes.len() > STDIN_CAP;
    bytes.truncate(STDIN_CAP);
    let text = match String::from_utf8(bytes) {
        Ok(t) => t,
        // Cut inside a character: drop its first bytes, not the input.
        Err(e) if cut && e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).map_err(|_| InputError::BinaryStdin)?
        }
        Err(_) => return Err(InputError::BinaryStdin),
    };
    if text.contains('\0') {
        return Err(InputError::BinaryStdin);
    }
    if text.trim().is_empty() {
        return Ok(None);
    }
    let mut block = String::from("<stdin>\n");
    block.push_str(&text);
    if !text.ends_with('\n') {
        block.push('\n');
    }
    block.push_str("</stdin>");
    if cut {
        block.push_str(&format!(
            "\n(stdin was cut at {} KiB; the rest was not read)",
            STDIN_CAP / 1024
        ));
    }
    Ok(Some(block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_delimited_and_a_long_input_is_cut_with_a_note() {
        let block = stdin_block(b"diff --git a b".to_vec()).expect("text");
        assert_eq!(block.as_deref(), Some("<stdin>\ndiff --git a b\n</stdin>"));
        assert_eq!(stdin_block(b"  \n".to_vec()).expect("blank"), None);
        // One byte over the cap, the cap landing inside a two-byte character.
        let mut big = vec![b'a'; STDIN_CAP - 1];
        big.extend("é".as_bytes());
        let block = stdin_block(big).expect("cut").expect("some");
        assert!(block.ends_with("</stdin>\n(stdin was cut at 1024 KiB; the rest was not read)"));
        assert!(block.contains(&"a".repeat(STDIN_CAP - 1)));
        assert!(!block.contains('é'));
    }

    #[test]
    fn binary_input_is_refused() {
        assert!(stdin_block(vec![0x7f, b'E', b'L', b'F', 0, 1]).is_err());
        assert!(stdin_block(vec![0xff, 0xfe, b'a']).is_err());
    }
}
