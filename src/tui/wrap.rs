//! Word wrapping of styled text to a column width (unicode-width aware), with line prefixes.

use ratatui::style::Style;
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

pub fn char_width(c: char) -> usize {
    if c == '\t' { 4 } else { c.width().unwrap_or(0) }
}

pub fn str_width(s: &str) -> usize {
    s.chars().map(char_width).sum()
}

/// Total display width of a line.
pub fn line_width(line: &Line<'_>) -> usize {
    line.spans.iter().map(|s| str_width(&s.content)).sum()
}

/// Cuts `s` to at most `width` columns, adding `…` when something was cut.
pub fn truncate(s: &str, width: usize) -> String {
    if str_width(s) <= width {
        return s.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let w = char_width(c);
        if used + w + 1 > width {
            break;
        }
        out.push(c);
        used += w;
    }
    if width > 0 {
        out.push('…');
    }
    out
}

/// Wraps styled `spans` into lines of at most `width` columns. The first line starts with
/// `first_prefix`, the others with `rest_prefix` (list bullets, quote bars, indents). Breaks at
/// spaces; a word longer than the room left is split by characters. Tabs become spaces.
pub fn wrap_spans(
    spans: &[Span<'_>],
    width: usize,
    first_prefix: &[Span<'static>],
    rest_prefix: &[Span<'static>],
) -> Vec<Line<'static>> {
    let first_w: usize = first_prefix.iter().map(|s| str_width(&s.content)).sum();
    let rest_w: usize = rest_prefix.iter().map(|s| str_width(&s.content)).sum();
    let mut out: Vec<Line<'static>> = Vec::new();
    let mut current: Vec<Span<'static>> = first_prefix.to_vec();
    let mut used = first_w;

    // Words: maximal runs of non-space or of space characters, each with its style.
    let mut words: Vec<(String, Style, bool)> = Vec::new();
    for span in spans {
        let content = span.content.replace('\t', "    ");
        let mut word = String::new();
        let mut word_is_space = false;
        for c in content.chars() {
            let is_space = c == ' ';
            if !word.is_empty() && is_space != word_is_space {
                words.push((std::mem::take(&mut word), span.style, word_is_space));
            }
            word_is_space = is_space;
            word.push(c);
        }
        if !word.is_empty() {
            words.push((word, span.style, word_is_space));
        }
    }

    let line_start_w = |out: &Vec<Line<'static>>| if out.is_empty() { first_w } else { rest_w };
    let push_line = |out: &mut Vec<Line<'static>>, current: &mut Vec<Span<'static>>| {
        // Trailing spaces at a wrap point are invisible noise when copying text.
        loop {
            let len = current.len();
            let Some(last) = current.last_mut() else {
                break;
            };
            let trimmed = last.content.trim_end_matches(' ').to_string();
            if trimmed.is_empty() && len > 1 {
                current.pop();
                continue;
            }
            last.content = trimmed.into();
            break;
        }
        out.push(Line::from(std::mem::take(current)));
    };

    for (word, style, is_space) in words {
        let w = str_width(&word);
        if is_space {
            if used + w <= width {
                push_span(&mut current, word, style);
                used += w;
            } else {
                push_line(&mut out, &mut current);
                current = rest_prefix.to_vec();
                used = rest_w;
            }
            continue;
        }
        if used + w > width && used > line_start_w(&out) {
            push_line(&mut out, &mut current);
            current = rest_prefix.to_vec();
            used = rest_w;
        }
        if used + w <= width {
            push_span(&mut current, word, style);
            used += w;
            continue;
        }
        // Split a word longer than a whole line by characters.
        let mut piece = String::new();
        for c in word.chars() {
            let cw = char_width(c);
            if used + cw > width && (used > line_start_w(&out) || !piece.is_empty()) {
                push_span(&mut current, std::mem::take(&mut piece), style);
                push_line(&mut out, &mut current);
                current = rest_prefix.to_vec();
                used = rest_w;
            }
            piece.push(c);
            used += cw;
        }
        if !piece.is_empty() {
            push_span(&mut current, piece, style);
        }
    }
    let only_prefix = !out.is_empty() && current.len() <= rest_prefix.len() && used == rest_w;
    if out.is_empty() || (!current.is_empty() && !only_prefix) {
        push_line(&mut out, &mut current);
    }
    out
}

fn push_span(current: &mut Vec<Span<'static>>, text: String, style: Style) {
    if let Some(last) = current.last_mut()
        && last.style == style
    {
        let mut s = last.content.to_string();
        s.push_str(&text);
        last.content = s.into();
        return;
    }
    current.push(Span::styled(text, style));
}

/// Hard-wraps one line (no word breaks: code, tool output, diffs) to `width` columns, continuing
/// with `rest_prefix`.
pub fn hard_wrap(
    line: Line<'static>,
    width: usize,
    rest_prefix: &[Span<'static>],
) -> Vec<Line<'static>> {
    if line_width(&line) <= width || width == 0 {
        return vec![line];
    }
    let rest_w: usize = rest_prefix.iter().map(|s| str_width(&s.content)).sum();
    let mut out = Vec::new();
    let mut current: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    let line_style = line.style;
    for span in line.spans {
        let mut piece = String::new();
        for c in span.content.chars() {
            let c = if c == '\t' { ' ' } else { c };
            let cw = char_width(c);
            if used + cw > width && used > 0 {
                if !piece.is_empty() {
                    current.push(Span::styled(std::mem::take(&mut piece), span.style));
                }
                out.push(Line::from(std::mem::take(&mut current)).style(line_style));
                current = rest_prefix.to_vec();
                used = rest_w;
            }
            piece.push(c);
            used += cw;
        }
        if !piece.is_empty() {
            current.push(Span::styled(piece, span.style));
        }
    }
    if !current.is_empty() {
        out.push(Line::from(current).style(line_style));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }

    #[test]
    fn wraps_at_spaces_with_prefixes() {
        let spans = [Span::raw("the quick brown fox jumps over")];
        let lines = wrap_spans(&spans, 12, &[Span::raw("• ")], &[Span::raw("  ")]);
        assert_eq!(
            text(&lines),
            vec!["• the quick", "  brown fox", "  jumps over"]
        );
    }

    #[test]
    fn splits_long_words_and_never_exceeds_width() {
        let spans = [Span::raw("abcdefghijklmnopqrstuvwxyz and 日本語の文章です")];
        for width in 1..30 {
            for l in wrap_spans(&spans, width, &[], &[]) {
                assert!(line_width(&l) <= width.max(2), "width {width}: {l:?}");
            }
        }
    }

    #[test]
    fn hard_wrap_keeps_all_characters() {
        let line = Line::from("0123456789abcdef");
        let lines = hard_wrap(line, 6, &[]);
        assert_eq!(text(&lines), vec!["012345", "6789ab", "cdef"]);
    }
}
