//! Writing to stdout and stderr without ever panicking.
//!
//! `std`'s `println!` and `eprintln!` panic when the write fails: a reader that went away
//! (`baton --exec … 2>&1 | head -3` closes the pipe: EPIPE) or a terminal that was closed
//! (EIO after SIGHUP). baton ignores SIGPIPE (src/main.rs), so such a write is an error, and
//! inside `--exec` that panic aborted the process mid-turn, before the turn's checkpoint was
//! recorded. A progress line nobody reads is not worth a turn: these macros write the same
//! text and drop the error. Modules that print import them by the std names
//! (`use crate::protocol::stdio::{eprintln, println};`), which shadows the prelude's.

use std::io::Write;

/// One line to stderr; a failed write (closed pipe, closed terminal) is dropped.
pub fn stderr_line(args: std::fmt::Arguments<'_>) {
    // One write for the whole line: lines of concurrent writers do not interleave.
    let mut line = args.to_string();
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// Text to stderr without a newline; a failed write is dropped.
pub fn stderr_text(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr()
        .lock()
        .write_all(args.to_string().as_bytes());
}

/// One line to stdout; a failed write is dropped (the report subcommands restore the default
/// SIGPIPE action first, so `baton sessions | head` still ends quietly at the first write).
pub fn stdout_line(args: std::fmt::Arguments<'_>) {
    let mut line = args.to_string();
    line.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
}

/// Text to stdout without a newline; a failed write is dropped.
pub fn stdout_text(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stdout()
        .lock()
        .write_all(args.to_string().as_bytes());
}

/// `eprintln!` that never panics.
macro_rules! eprintln {
    () => {
        $crate::protocol::stdio::stderr_line(::std::format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::protocol::stdio::stderr_line(::std::format_args!($($arg)*))
    };
}

/// `eprint!` that never panics.
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::protocol::stdio::stderr_text(::std::format_args!($($arg)*))
    };
}

/// `println!` that never panics.
macro_rules! println {
    () => {
        $crate::protocol::stdio::stdout_line(::std::format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::protocol::stdio::stdout_line(::std::format_args!($($arg)*))
    };
}

/// `print!` that never panics.
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::protocol::stdio::stdout_text(::std::format_args!($($arg)*))
    };
}

pub(crate) use {eprint, eprintln, print, println};
