//! The one sanitizer for text that baton prints to a terminal outside the live UI (`--exec`
//! plain output, the transcript printed on exit, the REPL, `doctor`, `sessions`, `undo`): model-
//! and command-controlled strings lose every escape sequence, control character and the
//! invisible or direction-changing characters that can make a line read as something else.
//!
//! It lives on the ground floor because every frontend and the CLI print such text and none of
//! them may see the others.

use std::borrow::Cow;

/// `text` as it may reach a terminal: ESC sequences (CSI, OSC, DCS, SOS, PM, APC and the
/// two-byte ones) removed with their payloads, the same for their 8-bit C1 forms, every other
/// C0/C1 control and DEL removed, `\r\n` read as `\n`, and bidi overrides, isolates, marks and
/// zero-width or tag characters removed. Newlines and tabs are kept.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    clean(text, false)
}

/// `terminal_safe` for text that must stay on one line (a title, a path, a session name):
/// newlines and tabs become spaces too, so a value cannot print a fake line of its own.
pub fn terminal_safe_line(text: &str) -> Cow<'_, str> {
    clean(text, true)
}

/// A line of JSON (as `serde_json` writes it) as it may reach a terminal: every character
/// `terminal_safe` would drop that JSON leaves raw — C1 controls such as U+009B (CSI) and
/// U+009D (OSC), DEL, bidi overrides, zero-width characters — written as a `\uXXXX` escape
/// instead. Outside strings JSON is ASCII, so only string contents change, and a parser reads
/// them back exactly.
pub fn terminal_safe_json(json: &str) -> Cow<'_, str> {
    if !json.chars().any(is_unsafe) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if is_unsafe(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Characters that change how the text around them reads without showing themselves: bidi
/// embeddings, overrides, isolates and marks (the "Trojan Source" characters), zero-width
/// spaces and joiners' look-alikes, word joiners and invisible operators, the byte-order mark,
/// soft hyphen, the Mongolian vowel separator, interlinear annotations and tag characters
/// (which hide ASCII text from the reader). ZWJ and ZWNJ are kept: scripts and emoji need them.
pub fn is_spoofing_char(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{E0000}'..='\u{E007F}'
    )
}

/// Whether `c` may not reach the terminal as itself (see `terminal_safe`; `\n` and `\t` are
/// let through here and decided by the caller).
fn is_unsafe(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || is_spoofing_char(c)
}

fn clean(text: &str, one_line: bool) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| is_unsafe(c) || (one_line && (c == '\n' || c == '\t')))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' if one_line => out.push(' '),
            '\n' | '\t' => out.push(c),
            '\u{1b}' => match chars.next() {
                Some('[') => skip_csi(&mut chars),
                Some(']' | 'P' | 'X' | '^' | '_') => skip_string(&mut chars),
                // nF sequences (`ESC ( B`): intermediates, then one final character.
                Some(' '..='/') => {
                    while chars.next_if(|c| (' '..='/').contains(c)).is_some() {}
                    chars.next();
                }
                // Two-character sequences (`ESC c` resets the terminal, `ESC 7` saves the
                // cursor): the second character goes with the ESC.
                Some(_) | None => {}
            },
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{98}' | '\u{9d}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if is_unsafe(c) => {}
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The rest of a CSI sequence: parameter and intermediate characters, then the final one.
/// Anything else ends it early (a terminal would abort the sequence there too).
fn skip_csi(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while chars
        .next_if(|c| ('\u{20}'..='\u{3f}').contains(c))
        .is_some()
    {}
    chars.next_if(|c| ('\u{40}'..='\u{7e}').contains(c));
}

/// The rest of a string sequence (OSC, DCS, SOS, PM, APC): up to BEL or a string terminator
/// (`ESC \` or U+009C), or the end of the text, which the terminal would swallow as well.
fn skip_string(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{07}' | '\u{9c}' => return,
            '\u{1b}' => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_keeps_its_meaning_and_loses_what_a_terminal_acts_on() {
        let value = serde_json::json!({ "a": "x\u{9b}2J\u{7f}\u{202e}\u{E0041}y\n\u{1b}" });
        let raw = serde_json::to_string(&value).expect("json");
        let safe = terminal_safe_json(&raw);
        assert!(safe.chars().all(|c| !is_unsafe(c)), "{safe:?}");
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&safe).ok(),
            Some(value)
        );
        assert!(matches!(
            terminal_safe_json("{\"a\":\"é👋\"}"),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn plain_text_is_borrowed_unchanged() {
        let text = "fn main() {\n\tprintln!(\"héllo 👋\");\n}\n";
        assert!(matches!(terminal_safe(text), Cow::Borrowed(_)));
        assert_eq!(terminal_safe(text), text);
    }

    #[test]
    fn escape_sequences_go_with_their_payloads() {
        let raw = "a\u{1b}]0;evil title\u{7}b\u{1b}]52;c;ZXZpbA==\u{1b}\\c\u{1b}[2J\u{1b}[10;10Hd\
                   \u{1b}Pqdcs\u{1b}\\e\u{1b}_apc\u{1b}\\f\u{1b}^pm\u{7}g\u{1b}Xsos\u{1b}\\h\u{1b}ci\
                   \u{1b}(Bj\u{1b}[?1049hk";
        assert_eq!(terminal_safe(raw), "abcdefghijk");
    }

    #[test]
    fn eight_bit_controls_and_del_are_removed() {
        let raw = "a\u{9b}2Jb\u{9d}0;t\u{9c}c\u{7f}d\u{8}e\u{7}f\u{0}g\r\nh\ri\u{85}j";
        assert_eq!(terminal_safe(raw), "abcdefg\nhij");
    }

    #[test]
    fn an_unterminated_sequence_swallows_the_rest_as_a_terminal_would() {
        assert_eq!(terminal_safe("ok\u{1b}]52;c;AAAA"), "ok");
        assert_eq!(terminal_safe("ok\u{1b}"), "ok");
        assert_eq!(terminal_safe("ok\u{1b}[12"), "ok");
    }

    #[test]
    fn bidi_and_invisible_characters_are_removed() {
        let raw = "if admin\u{202E} \u{2066}x\u{2069}\u{200B}\u{FEFF}\u{E0041}\u{E0042}!";
        assert_eq!(terminal_safe(raw), "if admin x!");
        // Joiners that real text needs stay.
        let family = "👨\u{200D}👩\u{200D}👧";
        assert_eq!(terminal_safe(family), family);
    }

    #[test]
    fn one_line_text_cannot_print_a_line_of_its_own() {
        assert_eq!(
            terminal_safe_line("ls\ndone in 0.1 s\tx\u{1b}[1A"),
            "ls done in 0.1 s x"
        );
    }
}
