//! A plan update (`update_plan` tool) as a checklist.

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::protocol::{PlanItem, PlanStatus};
use crate::tui::wrap::wrap_spans;

pub struct PlanCell {
    pub items: Vec<PlanItem>,
}

impl PlanCell {
    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let p = &ctx.theme.colors;
        let done = self
            .items
            .iter()
            .filter(|i| i.status == PlanStatus::Completed)
            .count();
        let mut out = vec![Line::from(vec![
            Span::styled(
                "☰ Plan",
                Style::new().fg(p.accent).add_modifier(Modifier::BOLD),
            ),
            Span::styled(
                format!("  {done}/{} done", self.items.len()),
                Style::new().fg(p.dim),
            ),
        ])];
        for item in &self.items {
            let (mark, style) = match item.status {
                PlanStatus::Completed => (
                    "  ☑ ",
                    Style::new()
                        .fg(p.plan_done)
                        .add_modifier(Modifier::CROSSED_OUT),
                ),
                PlanStatus::InProgress => (
                    "  ◐ ",
                    Style::new().fg(p.plan_active).add_modifier(Modifier::BOLD),
                ),
                PlanStatus::Pending => ("  ☐ ", Style::new().fg(p.plan_pending)),
            };
            let mark_style = style.remove_modifier(Modifier::CROSSED_OUT);
            out.extend(wrap_spans(
                &[Span::styled(item.step.clone(), style)],
                width,
                &[Span::styled(mark, mark_style)],
                &[Span::raw("    ")],
            ));
        }
        out
    }
}
