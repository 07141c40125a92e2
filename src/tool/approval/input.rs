//! Input typed into a running session (`write_stdin`) is a command when what reads it can run
//! one: text for a shell is judged like any command line; text for a pager, an editor, a REPL
//! or any program not known to treat its input as plain data (`python3`, `less`, `vi`, a
//! script the user approved) asks every time, since the rules cannot read it as that program
//! will. Keys that run nothing (Ctrl-C, Ctrl-D, Enter alone, a pager's scrolling) never ask.

use super::parse;

/// How input to a session is judged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionInput {
    /// Runs nothing: data for a program that only reads it, or keys that run nothing.
    Data,
    /// A command line for a shell: judged like a `shell` call's command (safe list, prefixes).
    ShellCommand(String),
    /// Text the session's program may run as code: asks (never remembered).
    Code,
}

/// Programs that read their input as data and never run it.
const DATA_SINKS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "wc",
    "sort",
    "uniq",
    "tee",
    "grep",
    "egrep",
    "fgrep",
    "tr",
    "cut",
    "base64",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "od",
    "xxd",
    "hexdump",
    "rev",
    "nl",
    "paste",
    "fold",
    "column",
    "tac",
    "true",
    "false",
    "sleep",
    "read",
    "jq",
    "echo",
    "printf",
];

/// Shells: what they read is a command line.
const SHELLS: &[&str] = &["bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "fish"];

/// Pagers: their single-letter commands scroll, search and quit, but `!`, `|`, `s`, `v` and
/// `:e` run commands, write files or open an editor.
const PAGERS: &[&str] = &["less", "more", "most", "man", "pg"];

/// Keys a pager takes without running anything: scrolling, paging and quitting.
fn is_pager_navigation(text: &str) -> bool {
    text.chars().all(|c| {
        matches!(
            c,
            'q' | 'Q'
                | 'j'
                | 'k'
                | 'g'
                | 'G'
                | 'b'
                | 'f'
                | 'd'
                | 'u'
                | 'n'
                | 'N'
                | ' '
                | '\n'
                | '\r'
        )
    })
}

/// Keys that run nothing themselves: Enter alone (it submits only what earlier input typed,
/// which was judged then), Ctrl-C, Ctrl-D, Ctrl-\.
fn is_harmless_keys(text: &str) -> bool {
    !text.is_empty()
        && text
            .chars()
            .all(|c| matches!(c, '\n' | '\r' | '\u{3}' | '\u{4}' | '\u{1c}'))
}

/// `read -e` reads its line with readline, whose bindings run what is typed (Esc Ctrl-E,
/// shell-expand-line, performs the `$(…)` on the line): not a data sink. Any option word
/// holding an `e`, or one the rules cannot read, counts.
fn reads_with_readline(cmd: &parse::SimpleCommand) -> bool {
    cmd.program().map(program_name) == Some("read")
        && cmd.words[1..].iter().any(|w| match w.literal() {
            Some(a) => a.starts_with('-') && a.contains('e'),
            None => true,
        })
}

fn program_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Judges `text` sent to a session started with `session_command`.
pub fn judge_session_input(session_command: &str, text: &str) -> SessionInput {
    if is_harmless_keys(text) {
        return SessionInput::Data;
    }
    let Some(cmds) = parse::simple_commands(session_command) else {
        return SessionInput::Code;
    };
    let names: Vec<&str> = cmds
        .iter()
        .filter_map(|c| c.program())
        .map(program_name)
        .collect();
    if names.len() != cmds.len() || cmds.iter().any(reads_with_readline) {
        return SessionInput::Code;
    }
    if names.iter().any(|n| SHELLS.contains(n)) {
        return shell_line(text);
    }
    if names.iter().all(|n| DATA_SINKS.contains(n)) {
        return SessionInput::Data;
    }
    if names
        .iter()
        .all(|n| PAGERS.contains(n) || DATA_SINKS.contains(n))
        && is_pager_navigation(text)
    {
        return SessionInput::Data;
    }
    SessionInput::Code
}

/// A line for an interactive shell. Refused as code (asked) when the shell would not run what
/// the rules see: a partial line (Enter later submits it whole), control keys and escape
/// sequences (line editing, history recall with the arrow keys), a Tab (completion inserts
/// words, and its "Display all N possibilities? (y or n)" eats the keys typed after it up to
/// the answer: `\t\t#n…` hides a comment's `#` from bash), `!` history expansion and
/// `^old^new` substitution.
fn shell_line(text: &str) -> SessionInput {
    let Some(line) = text.strip_suffix('\n').or_else(|| text.strip_suffix('\r')) else {
        return SessionInput::Code;
    };
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line
        .chars()
        .any(|c| (c.is_control() && c != '\n') || c == '!' || c == '\u{7f}')
        || line.trim_start().starts_with('^')
        || line.trim().is_empty()
    {
        return SessionInput::Code;
    }
    SessionInput::ShellCommand(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use SessionInput::{Code, Data, ShellCommand};

    #[test]
    fn input_is_judged_by_what_reads_it() {
        let table: &[(&str, &str, SessionInput)] = &[
            ("cat", "hello\n", Data),
            ("sort | uniq", "b\na\n", Data),
            ("echo ready; read x; echo got $x", "hello\n", Data),
            ("read -re x", "$(id)\u{1b}\u{5}\n", Code),
            ("read x; eval \"$x\"", "rm -rf ~\n", Code),
            ("bash", "ls -la\n", ShellCommand("ls -la".into())),
            ("bash", "rm -rf x", Code),
            ("bash", "!!\n", Code),
            ("bash", "^ls^rm\n", Code),
            ("bash", "\u{1b}[A\n", Code),
            ("bash", "\n", Data),
            ("bash", "\u{3}", Data),
            ("bash", "ls\n\t\t#ntouch x\n", Code),
            ("python3", "print(1)\n", Code),
            ("python3 script.py", "yes\n", Code),
            ("less README.md", "q", Data),
            ("less README.md", "!touch x\n", Code),
            ("less README.md", "echo !rm x\n", Code),
            ("vi notes.txt", ":q\n", Code),
            ("cat | sh", "id\n", ShellCommand("id".into())),
            ("$x", "q", Code),
        ];
        for (program, text, want) in table {
            assert_eq!(
                &judge_session_input(program, text),
                want,
                "{program:?} ← {text:?}"
            );
        }
    }
}
