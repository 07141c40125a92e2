//! The model's reasoning: dimmed; while streaming the last lines show, once finished it collapses
//! to one line (Ctrl+O expands every reasoning and tool cell).

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::tui::wrap::wrap_spans;

pub struct ReasoningCell {
    pub text: String,
    pub streaming: bool,
}

const LIVE_TAIL: usize = 3;

impl ReasoningCell {
    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let p = &ctx.theme.colors;
        let style = Style::new().fg(p.reasoning).add_modifier(Modifier::ITALIC);
        let mut body = Vec::new();
        for line in self.text.trim().lines() {
            body.extend(wrap_spans(
                &[Span::styled(line.to_string(), style)],
                width,
                &[Span::raw("  ")],
                &[Span::raw("  ")],
            ));
        }
        let header_style = Style::new().fg(p.reasoning);
        let mut out = Vec::new();
        if self.streaming {
            out.push(Line::from(Span::styled("∴ Thinking…", header_style)));
            let skip = if ctx.expanded {
                0
            } else {
                body.len().saturating_sub(LIVE_TAIL)
            };
            out.extend(body.into_iter().skip(skip));
        } else if ctx.expanded {
            out.push(Line::from(Span::styled("∴ Thought", header_style)));
            out.extend(body);
        } else {
            out.push(Line::from(vec![
                Span::styled(format!("∴ Thought · {} lines", body.len()), header_style),
                Span::styled(" (ctrl+o to expand)", Style::new().fg(p.dim)),
            ]));
        }
        out
    }
}
