//! Errors, warnings and information (help, /status, session lists) in plain words.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::tui::wrap::wrap_spans;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeLevel {
    Error,
    Warning,
    Info,
}

pub struct NoticeCell {
    pub level: NoticeLevel,
    pub title: String,
    /// Further lines: details, what to do. Lines starting with two spaces keep their indent.
    pub body: Vec<String>,
}

impl NoticeCell {
    pub fn new(level: NoticeLevel, title: impl Into<String>, body: Vec<String>) -> NoticeCell {
        NoticeCell {
            level,
            title: title.into(),
            body,
        }
    }

    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let p = &ctx.theme.colors;
        let (icon, color) = match self.level {
            NoticeLevel::Error => ("✗ ", p.error),
            NoticeLevel::Warning => ("⚠ ", p.warning),
            NoticeLevel::Info => ("• ", p.info),
        };
        let mut out = wrap_spans(
            &[Span::styled(
                self.title.clone(),
                Style::new().fg(color).add_modifier(Modifier::BOLD),
            )],
            width,
            &[Span::styled(icon, Style::new().fg(color))],
            &[Span::raw("  ")],
        );
        for line in &self.body {
            let indent = line.len() - line.trim_start().len();
            let rest = format!("  {}", " ".repeat(indent));
            out.extend(wrap_spans(
                &[Span::styled(
                    line.trim_start().to_string(),
                    Style::new().fg(p.fg),
                )],
                width,
                &[Span::raw(rest.clone())],
                &[Span::raw(rest)],
            ));
        }
        out
    }
}
