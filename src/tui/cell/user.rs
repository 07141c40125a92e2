//! The user's message cell.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::tui::wrap::wrap_spans;

/// A long message (a big paste) shows its first lines until expanded with Ctrl+O.
const MAX_FOLDED_LINES: usize = 12;

pub struct UserCell {
    pub text: String,
    /// `!cmd` shell commands are shown with a `$` marker.
    pub shell: bool,
}

impl UserCell {
    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let p = &ctx.theme.colors;
        let marker = if self.shell { "$ " } else { "› " };
        let text_style = Style::new().fg(p.user_fg).bg(p.user_bg);
        let mut out = Vec::new();
        let total = self.text.lines().count();
        let shown = if ctx.expanded || total <= MAX_FOLDED_LINES {
            total
        } else {
            MAX_FOLDED_LINES
        };
        for (i, line) in self.text.lines().take(shown).enumerate() {
            let first = if i == 0 {
                Span::styled(
                    marker,
                    Style::new().fg(p.user_marker).add_modifier(Modifier::BOLD),
                )
            } else {
                Span::raw("  ")
            };
            out.extend(wrap_spans(
                &[Span::styled(line.to_string(), text_style)],
                width,
                &[first],
                &[Span::raw("  ")],
            ));
        }
        if shown < total {
            out.push(Line::from(Span::styled(
                format!("  … {} more lines (ctrl+o to expand)", total - shown),
                Style::new().fg(p.dim),
            )));
        }
        if out.is_empty() {
            out.push(Line::from(Span::styled(
                marker,
                Style::new().fg(p.user_marker),
            )));
        }
        out
    }
}
