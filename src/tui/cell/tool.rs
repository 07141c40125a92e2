//! A tool call: status, title (the command), exit code, duration, and the first/last lines of its
//! output (all of it when expanded with Ctrl+O).

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::protocol::ToolStatus;
use crate::tui::wrap::{hard_wrap, truncate, wrap_spans};

pub struct ToolCell {
    pub call_id: String,
    pub tool: String,
    pub title: String,
    pub output: String,
    /// `None` while running.
    pub status: Option<ToolStatus>,
    pub exit_code: Option<i32>,
    pub duration_ms: Option<u64>,
}

const HEAD: usize = 2;
const TAIL: usize = 3;
const LIVE_TAIL: usize = 5;

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
        }
    }

    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let p = &ctx.theme.colors;
        let (icon, color, word) = match self.status {
            None => ("⋯", p.tool_running, "running"),
            Some(ToolStatus::Ok) => ("✓", p.tool_ok, ""),
            Some(ToolStatus::Error) => ("✗", p.tool_error, "failed"),
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

        let lines: Vec<&str> = self.output.trim_end_matches('\n').lines().collect();
        if lines.is_empty() || (lines.len() == 1 && lines[0].is_empty()) {
            return out;
        }
        let out_style = Style::new().fg(p.tool_output);
        let bar = Span::styled("  │ ", Style::new().fg(p.border));
        let expanded = ctx.expanded;
        let push = |out: &mut Vec<Line<'static>>, text: &str| {
            if expanded {
                let line = Line::from(vec![bar.clone(), Span::styled(text.to_string(), out_style)]);
                out.extend(hard_wrap(line, width, std::slice::from_ref(&bar)));
            } else {
                // Folded, a line is one row: a 100 KB line of minified JSON must not fill the screen.
                let shown = truncate(text, width.saturating_sub(4));
                out.push(Line::from(vec![
                    bar.clone(),
                    Span::styled(shown, out_style),
                ]));
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
            lines.iter().for_each(|l| push(&mut out, l));
        } else if self.status.is_none() {
            fold_note(&mut out, lines.len() - LIVE_TAIL);
            lines[lines.len() - LIVE_TAIL..]
                .iter()
                .for_each(|l| push(&mut out, l));
        } else {
            lines[..HEAD].iter().for_each(|l| push(&mut out, l));
            fold_note(&mut out, lines.len() - HEAD - TAIL);
            lines[lines.len() - TAIL..]
                .iter()
                .for_each(|l| push(&mut out, l));
        }
        out
    }
}
