//! The user's message cell.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::tui::wrap::wrap_spans;

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
        for (i, line) in self.text.lines().enumerate() {
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
        if out.is_empty() {
            out.push(Line::from(Span::styled(
                marker,
                Style::new().fg(p.user_marker),
            )));
        }
        out
    }
}
