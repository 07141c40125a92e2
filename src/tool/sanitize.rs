//! Terminal output made safe: one vte pass turns raw PTY bytes into two texts. For the model,
//! every control sequence is stripped and carriage-return overwrites are applied (a progress
//! bar ends as its last state). For the UI, only SGR colour/style sequences survive: no OSC
//! (titles, clipboard OSC 52, hyperlinks), no cursor movement, no DCS/APC, no C1 controls, no
//! DEL, no bidi or invisible characters (`protocol::is_spoofing_char`), so
//! command output can never drive the user's terminal out of its output cell.

use vte::{Params, Parser, Perform};

use crate::protocol::is_spoofing_char;

/// Longest incomplete line held back for carriage-return overwrite before it is flushed.
const MAX_PENDING_LINE: usize = 4096;

/// What one chunk of raw output became.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Filtered {
    /// Plain text for the model (complete lines; see `OutputFilter::flush`).
    pub model: String,
    /// Text with SGR sequences only, for the UI.
    pub ui: String,
    /// Characters that look binary (NUL, stray C0/C1 controls, invalid UTF-8).
    pub suspicious: usize,
    /// Printable characters seen.
    pub printable: usize,
}

impl Filtered {
    /// Whether the chunk was mostly binary data rather than text.
    #[cfg(test)]
    fn looks_binary(&self) -> bool {
        self.suspicious >= 4 && self.suspicious * 10 > self.printable + self.suspicious
    }
}

/// A streaming filter: feed raw chunks in order; escape sequences may span chunks.
#[derive(Default)]
pub struct OutputFilter {
    parser: Parser,
    state: FilterState,
    /// The parser may be inside an escape sequence: plain chunks must go through it too.
    in_sequence: bool,
}

#[derive(Default)]
struct FilterState {
    out: Filtered,
    /// The model's current line, not yet terminated by `\n`.
    line: String,
    /// A `\r` arrived: the next printable character starts the line over.
    model_cr: bool,
    /// A `\r` arrived and the UI has not yet been told how it ends (`\r\n` or overwrite).
    ui_cr: bool,
}

impl OutputFilter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Filters one chunk. The model text holds only lines completed so far.
    pub fn feed(&mut self, bytes: &[u8]) -> Filtered {
        if !self.in_sequence
            && let Some(text) = plain_text(bytes)
        {
            // Most output is plain text: skip the per-character parser.
            self.state.push_plain(text);
        } else {
            self.parser.advance(&mut self.state, bytes);
            self.in_sequence = match memchr_last(0x1b, bytes) {
                // A sequence started after the last newline may still be open.
                Some(esc) => !bytes[esc..].contains(&b'\n'),
                None => self.in_sequence && !bytes.contains(&b'\n'),
            };
            if !self.in_sequence {
                // Leave no half-parsed state behind for the next plain chunk (a sequence
                // that really spans a newline loses only its tail, which prints as text).
                self.parser = Parser::new();
            }
        }
        std::mem::take(&mut self.state.out)
    }

    /// Filters a chunk already known to be plain (see `plain_text`) and not inside a sequence.
    pub fn feed_plain(&mut self, text: &str) -> Filtered {
        debug_assert!(!self.in_sequence);
        self.state.push_plain(text);
        std::mem::take(&mut self.state.out)
    }

    /// The parser may be inside an escape sequence started by an earlier chunk.
    pub fn in_sequence(&self) -> bool {
        self.in_sequence
    }

    /// Releases the model's pending partial line (a prompt waiting for input, a last line
    /// without newline). Call at the end of a window or of the stream.
    pub fn flush(&mut self) -> String {
        self.state.model_cr = false;
        std::mem::take(&mut self.state.line)
    }
}

/// The chunk as text when it holds only printable UTF-8, newlines and tabs.
pub fn plain_text(bytes: &[u8]) -> Option<&str> {
    if bytes
        .iter()
        .any(|b| (*b < 0x20 && *b != b'\n' && *b != b'\t') || *b == 0x7f)
    {
        return None;
    }
    // C1 controls (U+0080–U+009F) are valid UTF-8 but act as controls on some terminals.
    let text = std::str::from_utf8(bytes).ok()?;
    if bytes.contains(&0xc2) && text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)) {
        return None;
    }
    if !text.is_ascii() && text.chars().any(is_spoofing_char) {
        return None;
    }
    Some(text)
}

fn memchr_last(needle: u8, bytes: &[u8]) -> Option<usize> {
    bytes.iter().rposition(|b| *b == needle)
}

impl FilterState {
    /// The plain-text path: same result as feeding the characters through the parser.
    fn push_plain(&mut self, text: &str) {
        self.resolve_ui_cr(text.starts_with('\n'));
        self.out.ui.push_str(text);
        self.out.printable += text.len();
        if self.model_cr {
            self.model_cr = false;
            if !text.starts_with('\n') {
                self.line.clear();
            }
        }
        match text.rfind('\n') {
            Some(i) => {
                self.out.model.push_str(&self.line);
                self.line.clear();
                self.out.model.push_str(&text[..=i]);
                self.line.push_str(&text[i + 1..]);
            }
            None => self.line.push_str(text),
        }
        if self.line.len() >= MAX_PENDING_LINE {
            self.out.model.push_str(&self.line);
            self.line.clear();
        }
    }

    fn resolve_ui_cr(&mut self, next_is_newline: bool) {
        if self.ui_cr {
            self.ui_cr = false;
            if !next_is_newline {
                // A lone `\r` would move the real cursor; show the overwrite as a new line.
                self.out.ui.push('\n');
            }
        }
    }

    fn push_model_char(&mut self, c: char) {
        if self.model_cr {
            self.model_cr = false;
            self.line.clear();
        }
        self.line.push(c);
        if self.line.len() >= MAX_PENDING_LINE {
            self.out.model.push_str(&self.line);
            self.line.clear();
        }
    }
}

impl Perform for FilterState {
    fn print(&mut self, c: char) {
        // vte hands DEL to `print`; terminals act on it (it erases on some).
        if ('\u{80}'..='\u{9f}').contains(&c) || c == '\u{7f}' {
            // UTF-8-encoded C1 controls: some terminals act on them (U+009B is CSI).
            self.out.suspicious += 1;
            return;
        }
        if is_spoofing_char(c) {
            // Bidi overrides and invisible characters make a line read as something else.
            return;
        }
        self.resolve_ui_cr(false);
        if c == '\u{FFFD}' {
            self.out.suspicious += 1;
        } else {
            self.out.printable += 1;
        }
        self.out.ui.push(c);
        self.push_model_char(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                self.resolve_ui_cr(true);
                self.out.ui.push('\n');
                self.model_cr = false;
                self.out.model.push_str(&self.line);
                self.out.model.push('\n');
                self.line.clear();
                self.out.printable += 1;
            }
            b'\r' => {
                self.resolve_ui_cr(false);
                self.ui_cr = true;
                self.model_cr = true;
            }
            b'\t' => {
                self.resolve_ui_cr(false);
                self.out.ui.push('\t');
                self.push_model_char('\t');
                self.out.printable += 1;
            }
            0 => {
                self.resolve_ui_cr(false);
                self.out.ui.push('␀');
                self.push_model_char('␀');
                self.out.suspicious += 1;
            }
            // BEL, backspace, shift in/out: ordinary in text output, meaningless here.
            0x07 | 0x08 | 0x0e | 0x0f => {}
            _ => self.out.suspicious += 1,
        }
    }

    fn csi_dispatch(&mut self, params: &Params, intermediates: &[u8], ignore: bool, action: char) {
        if action != 'm' || !intermediates.is_empty() || ignore {
            return;
        }
        self.resolve_ui_cr(false);
        let params: Vec<&[u16]> = params.iter().collect();
        let canonical = canonical_sgr(&params);
        if params.is_empty() || !canonical.is_empty() {
            self.out.ui.push_str(&format!("\x1b[{canonical}m"));
        }
    }
}

/// SGR parameters in the common semicolon form that every reader parses (the TUI's
/// `ansi-to-tui`, scripts reading `tool_output`): the ITU colon forms of colours
/// (`38:2:[cs]:r:g:b`, `38:5:n`) become `38;2;r;g;b` / `38;5;n`, other sub-parameters (`4:3`,
/// a curly underline) keep their main value, and underline colours (58/59), which most readers
/// take for unrelated attributes, are dropped.
fn canonical_sgr(params: &[&[u16]]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < params.len() {
        let p = params[i];
        let code = p.first().copied().unwrap_or(0);
        i += 1;
        let colour = matches!(code, 38 | 48 | 58);
        let values: Vec<u16> = if colour && p.len() > 1 {
            // Colon form: everything is inside this one parameter.
            match p.get(1) {
                Some(2) if p.len() >= 5 => {
                    let rgb = &p[p.len() - 3..];
                    vec![code, 2, rgb[0], rgb[1], rgb[2]]
                }
                Some(5) if p.len() >= 3 => vec![code, 5, p[2]],
                _ => continue,
            }
        } else if colour {
            // Semicolon form: the colour takes the next 2 or 4 parameters.
            let at = i;
            let first = |k: usize| params.get(at + k).and_then(|q| q.first().copied());
            match first(0) {
                Some(2) => {
                    let rgb = (first(1), first(2), first(3));
                    i += 4;
                    match rgb {
                        (Some(r), Some(g), Some(b)) => vec![code, 2, r, g, b],
                        _ => continue,
                    }
                }
                Some(5) => {
                    i += 2;
                    match first(1) {
                        Some(n) => vec![code, 5, n],
                        None => continue,
                    }
                }
                _ => continue,
            }
        } else {
            vec![code]
        };
        if matches!(code, 58 | 59) {
            continue;
        }
        out.extend(values.iter().map(u16::to_string));
    }
    out.join(";")
}

/// Strips all control sequences from a complete text (for one-shot use).
#[cfg(test)]
fn strip_for_model(bytes: &[u8]) -> String {
    let mut f = OutputFilter::new();
    let mut s = f.feed(bytes).model;
    s.push_str(&f.flush());
    s
}

/// Sanitizes a complete text for display: SGR only.
#[cfg(test)]
fn sanitize_for_ui(bytes: &[u8]) -> String {
    OutputFilter::new().feed(bytes).ui
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_clipboard_and_cursor_moves_are_removed() {
        let raw =
            b"a\x1b]0;evil title\x07b\x1b]52;c;ZXZpbA==\x1b\\c\x1b[2J\x1b[10;10Hd\x1bPqdcs\x1b\\e";
        assert_eq!(strip_for_model(raw), "abcde");
        assert_eq!(sanitize_for_ui(raw), "abcde");
    }

    #[test]
    fn colours_survive_for_the_ui_only() {
        let raw = b"\x1b[1;31mred\x1b[0m \x1b[38:2:1:2:3mx\x1b[m";
        assert_eq!(
            sanitize_for_ui(raw),
            "\x1b[1;31mred\x1b[0m \x1b[38;2;1;2;3mx\x1b[0m"
        );
        assert_eq!(strip_for_model(raw), "red x");
    }

    #[test]
    fn sgr_is_rewritten_in_the_semicolon_form() {
        let ui = |raw: &[u8]| sanitize_for_ui(raw);
        assert_eq!(ui(b"\x1b[38:2::10:20:30mx"), "\x1b[38;2;10;20;30mx");
        assert_eq!(ui(b"\x1b[48:5:208mx"), "\x1b[48;5;208mx");
        assert_eq!(
            ui(b"\x1b[1;38;5;9;48;2;1;2;3mx"),
            "\x1b[1;38;5;9;48;2;1;2;3mx"
        );
        assert_eq!(ui(b"\x1b[4:3mx"), "\x1b[4mx");
        assert_eq!(ui(b"\x1b[4;58;2;9;9;9;31mx"), "\x1b[4;31mx");
        assert_eq!(ui(b"\x1b[58:5:1mx\x1b[59mz"), "xz");
        // A colour cut short is dropped, not read as other attributes.
        assert_eq!(ui(b"\x1b[38;2;1mx"), "x");
    }

    #[test]
    fn carriage_returns_overwrite_for_the_model() {
        let raw = b"10%\r50%\r100%\r\ndone\r\n";
        assert_eq!(strip_for_model(raw), "100%\ndone\n");
        assert_eq!(sanitize_for_ui(raw), "10%\n50%\n100%\ndone\n");
    }

    #[test]
    fn c1_controls_and_invalid_utf8_are_flagged() {
        let mut f = OutputFilter::new();
        let out = f.feed(b"\x9b31mx\xff\xfe\x01\x02\xc2\x9b2J");
        assert!(!out.ui.contains('\u{9b}'), "{out:?}");
        assert!(out.suspicious >= 4, "{out:?}");
    }

    #[test]
    fn del_and_spoofing_characters_never_reach_the_ui() {
        for raw in [
            "a\u{7f}b".as_bytes(),
            "a\u{202e}b\u{2066}".as_bytes(),
            "x\x1b[1ma\u{7f}\u{200b}b\x1b[0m".as_bytes(),
        ] {
            let mut f = OutputFilter::new();
            let out = f.feed(raw);
            let model = format!("{}{}", out.model, f.flush());
            for text in [&out.ui, &model] {
                assert!(
                    !text.contains('\u{7f}') && !text.chars().any(is_spoofing_char),
                    "{raw:?} -> {text:?}"
                );
            }
        }
    }

    #[test]
    fn binary_looks_binary_and_text_does_not() {
        let bin: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        assert!(OutputFilter::new().feed(&bin).looks_binary());
        assert!(
            !OutputFilter::new()
                .feed(b"hello\tworld\r\n\x1b[1mok\x1b[0m\n")
                .looks_binary()
        );
    }

    #[test]
    fn the_plain_path_matches_the_parser() {
        let chunks: &[&[u8]] = &[
            b"abc\n",
            b"de",
            b"f\r",
            b"\nxyz\r",
            b"new\n",
            b"\x1b[1mb\x1b[0m\n",
            b"t\tu\n",
        ];
        let mut fast = OutputFilter::new();
        let mut slow = OutputFilter::new();
        let (mut fm, mut fu, mut sm, mut su) =
            (String::new(), String::new(), String::new(), String::new());
        for c in chunks {
            let f = fast.feed(c);
            fm.push_str(&f.model);
            fu.push_str(&f.ui);
            slow.parser.advance(&mut slow.state, c);
            let s = std::mem::take(&mut slow.state.out);
            sm.push_str(&s.model);
            su.push_str(&s.ui);
        }
        fm.push_str(&fast.flush());
        sm.push_str(&slow.flush());
        assert_eq!(fm, sm);
        assert_eq!(fu, su);
        assert_eq!(fm, "abc\ndef\nnew\nb\nt\tu\n");
    }

    #[test]
    fn a_sequence_split_right_before_plain_text_is_still_removed() {
        let mut f = OutputFilter::new();
        let a = f.feed(b"x\x1b]0;ti");
        let b = f.feed(b"tle");
        let c = f.feed(b"\x07y\n");
        assert_eq!(format!("{}{}{}", a.ui, b.ui, c.ui), "xy\n");
    }

    #[test]
    fn sequences_split_across_chunks_are_still_removed() {
        let mut f = OutputFilter::new();
        let a = f.feed(b"x\x1b]0;ti");
        let b = f.feed(b"tle\x07y\n");
        assert_eq!(format!("{}{}", a.ui, b.ui), "xy\n");
    }
}
