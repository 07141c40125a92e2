//! A tool call: status, title (the command), exit code, duration, and the first/last lines of its
//! output (all of it when expanded with Ctrl+O). Commands colour their own output (they run in a
//! PTY with `TERM=xterm-256color`); the core passes SGR sequences through and nothing else, and
//! they are drawn here as styles, adapted to the terminal's colour depth.

use ansi_to_tui::IntoText;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::protocol::ToolStatus;
use crate::tui::color_depth::ColorDepth;
use crate::tui::wrap::{char_width, hard_wrap, wrap_spans};

pub struct ToolCell {
    pub call_id: String,
    pub tool: String,
    pub title: String,
    pub output: String,
    /// `None` while running.
    pub status: Option<ToolStatus>,
    pub exit_code: Option<i32>,
    pub duration_ms: Option<u64>,
    /// The approval modal for this call is open: it has not started running.
    pub awaiting_approval: bool,
    /// A `±` cell shows this call's diff: the output stops where a unified diff starts (what
    /// `edit` appends after its summary), so the diff is drawn once.
    pub diff_shown: bool,
}

const HEAD: usize = 2;
const TAIL: usize = 3;
const LIVE_TAIL: usize = 5;
/// Columns between tab stops, as in a terminal (`read_file` puts a tab after line numbers).
const TAB_STOP: usize = 8;

pub fn format_duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

impl ToolCell {
    pub fn new(call_id: String, tool: String, title: String) -> ToolCell {
        ToolCell {
            call_id,
            tool,
            title,
            output: String::new(),
            status: None,
            exit_code: None,
            duration_ms: None,
            awaiting_approval: false,
            diff_shown: false,
        }
    }

    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let p = &ctx.theme.colors;
        let (icon, color, word) = match self.status {
            None if self.awaiting_approval => ("?", p.warning, "waiting for approval"),
            None => ("⋯", p.tool_running, "running"),
            Some(ToolStatus::Ok) => ("✓", p.tool_ok, ""),
            Some(ToolStatus::Error) => ("✗", p.tool_error, "error"),
            Some(ToolStatus::Failed) => ("✗", p.tool_error, "failed"),
            Some(ToolStatus::Declined) => ("⊘", p.warning, "declined"),
            Some(ToolStatus::TimedOut) => ("⏱", p.tool_error, "timed out"),
            Some(ToolStatus::Interrupted) => ("■", p.warning, "interrupted"),
        };
        let mut meta = Vec::new();
        if !word.is_empty() {
            meta.push(word.to_string());
        }
        if let Some(code) = self.exit_code {
            meta.push(format!("exit {code}"));
        }
        if let Some(ms) = self.duration_ms {
            meta.push(format_duration(ms));
        }
        let title = if self.title.trim().is_empty() {
            self.tool.clone()
        } else {
            self.title.clone()
        };
        let shown_title = if self.tool == "shell" || self.tool == "user_shell" {
            format!("$ {title}")
        } else if title.starts_with(&self.tool) {
            // A title that names its tool already (an MCP tool's) is not prefixed again.
            title
        } else {
            format!("{}: {title}", self.tool)
        };
        let mut header = vec![
            Span::styled(
                format!("{icon} "),
                Style::new().fg(color).add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                shown_title,
                Style::new().fg(p.tool_command).add_modifier(Modifier::BOLD),
            ),
        ];
        if !meta.is_empty() {
            header.push(Span::styled(
                format!("  {}", meta.join(" · ")),
                Style::new().fg(color),
            ));
        }
        let mut out = wrap_spans(&header, width, &[], &[Span::raw("  ")]);

        let output = if self.diff_shown {
            without_diff(&self.output)
        } else {
            &self.output
        }
        .trim_end_matches('\n');
        let lines: Vec<&str> = output.lines().collect();
        if lines.is_empty() || (lines.len() == 1 && lines[0].is_empty()) {
            return out;
        }
        let out_style = Style::new().fg(p.tool_output);
        let bar = Span::styled("  │ ", Style::new().fg(p.border));
        let depth = ctx.theme.depth;
        let expanded = ctx.expanded;
        // Lines are styled in runs (`styled_lines`), so a colour set on one line carries on
        // to the next, as on a terminal, within what is shown.
        let push = |out: &mut Vec<Line<'static>>, run: &[&str]| {
            for spans in styled_lines(run, out_style, depth) {
                let mut line = vec![bar.clone()];
                if expanded {
                    line.extend(spans);
                    out.extend(hard_wrap(
                        Line::from(line),
                        width,
                        std::slice::from_ref(&bar),
                    ));
                } else {
                    // Folded, a line is one row: a 100 KB line of minified JSON must not fill
                    // the screen.
                    line.extend(truncate_spans(spans, width.saturating_sub(4)));
                    out.push(Line::from(line));
                }
            }
        };
        let fold_note = |out: &mut Vec<Line<'static>>, n: usize| {
            out.push(Line::from(vec![
                bar.clone(),
                Span::styled(
                    format!("… {n} more lines (ctrl+o to expand)"),
                    Style::new().fg(p.dim),
                ),
            ]));
        };
        if ctx.expanded || lines.len() <= HEAD + TAIL + 1 {
            push(&mut out, &lines);
        } else if self.status.is_none() {
            fold_note(&mut out, lines.len() - LIVE_TAIL);
            push(&mut out, &lines[lines.len() - LIVE_TAIL..]);
        } else {
            push(&mut out, &lines[..HEAD]);
            fold_note(&mut out, lines.len() - HEAD - TAIL);
            push(&mut out, &lines[lines.len() - TAIL..]);
        }
        out
    }
}

/// `output` up to the line where a unified diff begins (`--- a/…` followed by `+++ `).
fn without_diff(output: &str) -> &str {
    let mut at = 0;
    for line in output.split_inclusive('\n') {
        if line.starts_with("--- ") && output[at + line.len()..].starts_with("+++ ") {
            return &output[..at];
        }
        at += line.len();
    }
    output
}

/// A run of output lines as styled spans: SGR sequences become styles over `base` (the theme's
/// output colour), their colours adapted to `depth` (none at all under `NO_COLOR`), and tabs
/// become spaces to the next tab stop (the terminal would drop a raw tab).
fn styled_lines(run: &[&str], base: Style, depth: ColorDepth) -> Vec<Vec<Span<'static>>> {
    // The parser also ends lines at `\r`: one left inside a line must not split it.
    let joined = run.join("\n").replace('\r', "");
    // The parser cannot fail on text without SGR sequences; should it fail on any other,
    // the text still shows, without escape bytes.
    let mut parsed: Vec<Vec<Span<'_>>> = match joined.to_text() {
        Ok(text) => text.lines.into_iter().map(|l| l.spans).collect(),
        Err(_) => joined
            .split('\n')
            .map(|l| vec![Span::raw(l.replace('\u{1b}', ""))])
            .collect(),
    };
    // A run ending in an empty line parses one line short: one row per line, always.
    parsed.resize_with(run.len(), Vec::new);
    parsed
        .into_iter()
        .map(|spans| {
            let mut column = 0;
            spans
                .into_iter()
                .filter(|s| !s.content.is_empty())
                .map(|s| {
                    let text = expand_tabs(&s.content, &mut column);
                    Span::styled(text, base.patch(adapt_style(s.style, depth)))
                })
                .collect()
        })
        .collect()
}

/// A command's SGR style as the terminal can show it. `Reset` colours mean "the default", which
/// here is the theme's output colour, so they are dropped rather than forced.
fn adapt_style(style: Style, depth: ColorDepth) -> Style {
    let adapt = |c: Option<Color>| match c {
        None | Some(Color::Reset) => None,
        Some(_) if depth == ColorDepth::None => None,
        Some(c) => Some(depth.adapt(c)),
    };
    let mut out = Style::new()
        .add_modifier(style.add_modifier)
        .remove_modifier(style.sub_modifier);
    out.fg = adapt(style.fg);
    out.bg = adapt(style.bg);
    out
}

/// Replaces tabs with spaces up to the next tab stop; `column` carries across a line's spans.
fn expand_tabs(text: &str, column: &mut usize) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '\t' {
            let n = TAB_STOP - *column % TAB_STOP;
            out.extend(std::iter::repeat_n(' ', n));
            *column += n;
        } else {
            out.push(c);
            *column += char_width(c);
        }
    }
    out
}

/// Cuts styled spans to at most `width` columns, ending with `…` when something was cut.
fn truncate_spans(spans: Vec<Span<'static>>, width: usize) -> Vec<Span<'static>> {
    let total: usize = spans
        .iter()
        .map(|s| s.content.chars().map(char_width).sum::<usize>())
        .sum();
    if total <= width {
        return spans;
    }
    let mut out = Vec::new();
    let mut used = 0;
    let mut last_style = Style::new();
    'spans: for span in spans {
        last_style = span.style;
        let mut piece = String::new();
        for c in span.content.chars() {
            let w = char_width(c);
            if used + w + 1 > width {
                if !piece.is_empty() {
                    out.push(Span::styled(piece, span.style));
                }
                break 'spans;
            }
            piece.push(c);
            used += w;
        }
        out.push(Span::styled(piece, span.style));
    }
    if width > 0 {
        out.push(Span::styled("…", last_style));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(spans: &[Span<'_>]) -> String {
        spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn sgr_colours_become_styles_and_no_escape_bytes_remain() {
        let base = Style::new().fg(Color::Gray);
        let lines = styled_lines(
            &[
                "\u{1b}[31mM\u{1b}[0m src/util.rs",
                "\u{1b}[1;32mok\u{1b}[m plain",
            ],
            base,
            ColorDepth::TrueColor,
        );
        assert_eq!(plain(&lines[0]), "M src/util.rs");
        assert_eq!(lines[0][0].style.fg, Some(Color::Red));
        // A reset falls back to the theme's output colour, not the terminal default.
        assert_eq!(lines[0][1].style.fg, Some(Color::Gray));
        assert_eq!(plain(&lines[1]), "ok plain");
        assert!(lines[1][0].style.add_modifier.contains(Modifier::BOLD));
        assert_eq!(lines[1][0].style.fg, Some(Color::Green));
        assert!(!lines[1][1].style.add_modifier.contains(Modifier::BOLD));
    }

    #[test]
    fn every_line_of_a_run_is_one_row_even_empty_or_with_a_carriage_return() {
        let lines = styled_lines(&["a", "", "b\rc", ""], Style::new(), ColorDepth::TrueColor);
        let shown: Vec<String> = lines.iter().map(|l| plain(l)).collect();
        assert_eq!(shown, ["a", "", "bc", ""]);
    }

    #[test]
    fn a_colour_carries_to_the_next_line_of_a_run() {
        let lines = styled_lines(
            &["\u{1b}[33mstart", "still yellow\u{1b}[0m"],
            Style::new(),
            ColorDepth::Ansi16,
        );
        assert_eq!(lines[1][0].style.fg, Some(Color::Yellow));
    }

    #[test]
    fn colours_follow_the_depth_and_vanish_without_colour() {
        let raw = ["\u{1b}[38;2;255;0;0;1mred\u{1b}[0m"];
        let none = styled_lines(&raw, Style::new(), ColorDepth::None);
        assert_eq!(none[0][0].style.fg, None);
        assert!(none[0][0].style.add_modifier.contains(Modifier::BOLD));
        let ansi16 = styled_lines(&raw, Style::new(), ColorDepth::Ansi16);
        assert!(!matches!(ansi16[0][0].style.fg, Some(Color::Rgb(..))));
        let full = styled_lines(&raw, Style::new(), ColorDepth::TrueColor);
        assert_eq!(full[0][0].style.fg, Some(Color::Rgb(255, 0, 0)));
    }

    #[test]
    fn tabs_expand_to_tab_stops() {
        let lines = styled_lines(
            &["     1\tdef add", "\u{1b}[2m12\u{1b}[0m\tx"],
            Style::new(),
            ColorDepth::TrueColor,
        );
        assert_eq!(plain(&lines[0]), "     1  def add");
        assert_eq!(plain(&lines[1]), "12      x");
    }

    #[test]
    fn colon_sgr_forms_are_dropped_without_losing_text() {
        let lines = styled_lines(
            &["a\u{1b}[38:2:1:2:3mb\u{1b}[0mc"],
            Style::new(),
            ColorDepth::TrueColor,
        );
        assert_eq!(plain(&lines[0]), "abc");
    }

    #[test]
    fn the_diff_is_cut_from_an_edit_result_and_summaries_stay() {
        let edit = "Edited a.rs: 1 replacement (+1 -1 lines)\n--- a/a.rs\n+++ b/a.rs\n@@ -1 +1 @@\n-x\n+y\n";
        assert_eq!(
            without_diff(edit),
            "Edited a.rs: 1 replacement (+1 -1 lines)\n"
        );
        let patch = "Success. Updated the following files:\nM a.rs\nA b.rs\n";
        assert_eq!(without_diff(patch), patch);
        assert_eq!(
            without_diff("--- not a diff\nplain\n"),
            "--- not a diff\nplain\n"
        );
    }

    #[test]
    fn truncation_keeps_styles_and_marks_the_cut() {
        let spans = vec![
            Span::styled("abc", Style::new().fg(Color::Red)),
            Span::raw("defgh"),
        ];
        let cut = truncate_spans(spans, 6);
        assert_eq!(plain(&cut), "abcde…");
        assert_eq!(cut[0].style.fg, Some(Color::Red));
    }
}
