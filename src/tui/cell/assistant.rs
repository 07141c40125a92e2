//! The assistant's answer cell: Markdown, streamed. While streaming, the finished blocks (up to
//! the last blank line outside a code fence) are laid out once and cached; only the tail block is
//! re-rendered per delta, so finished lines never re-wrap or flicker.

use std::cell::RefCell;

use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::RenderCtx;
use crate::protocol::Expert;
use crate::tui::markdown::{render_markdown, stable_prefix_len};

/// Layout of the finished-blocks prefix: (width, generation, prefix length, lines).
type PrefixLayout = (usize, u64, usize, Vec<Line<'static>>);

pub struct AssistantCell {
    pub text: String,
    pub expert: Option<Expert>,
    pub streaming: bool,
    /// (width, generation, prefix length, lines of that prefix).
    prefix_cache: RefCell<Option<PrefixLayout>>,
}

impl AssistantCell {
    pub fn new(expert: Option<Expert>, streaming: bool) -> AssistantCell {
        AssistantCell {
            text: String::new(),
            expert,
            streaming,
            prefix_cache: RefCell::new(None),
        }
    }

    pub fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let p = &ctx.theme.colors;
        let body_width = width.saturating_sub(2).max(8);
        let body = if self.streaming {
            self.streaming_body(body_width, ctx)
        } else {
            render_markdown(&self.text, body_width, ctx.theme)
        };
        let mut out = Vec::with_capacity(body.len() + 1);
        let marker = Span::styled("● ", Style::new().fg(p.assistant_marker));
        for (i, line) in body.into_iter().enumerate() {
            let lead = if i == 0 {
                marker.clone()
            } else {
                Span::raw("  ")
            };
            let mut spans = Vec::with_capacity(line.spans.len() + 1);
            spans.push(lead);
            spans.extend(line.spans);
            out.push(Line::from(spans));
        }
        if out.is_empty() && self.streaming {
            out.push(Line::from(vec![
                marker,
                Span::styled("…", Style::new().fg(p.dim)),
            ]));
        }
        if let Some(expert) = self.expert
            && !out.is_empty()
        {
            let name = ctx.experts.name(expert);
            let color = expert_color(expert, ctx);
            let mut tag = vec![Span::styled(
                format!("{expert} {name}"),
                Style::new().fg(color).add_modifier(Modifier::DIM),
            )];
            tag.insert(0, Span::raw("  "));
            // The badge sits on its own line above the answer so copied answers stay clean.
            out.insert(0, Line::from(tag));
        }
        out
    }

    fn streaming_body(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let stable = stable_prefix_len(&self.text);
        let mut cache = self.prefix_cache.borrow_mut();
        let same_layout = |c: &PrefixLayout| c.0 == width && c.1 == ctx.generation;
        match cache.as_mut() {
            Some(c) if same_layout(c) && c.2 == stable => {}
            // New finished blocks: lay out only them and append; the earlier ones stay as they were.
            Some(c) if same_layout(c) && c.2 < stable && self.text.is_char_boundary(c.2) => {
                let added = render_markdown(&self.text[c.2..stable], width, ctx.theme);
                if !c.3.is_empty() && !added.is_empty() {
                    c.3.push(Line::default());
                }
                c.3.extend(added);
                c.2 = stable;
            }
            _ => {
                let lines = if stable == 0 {
                    Vec::new()
                } else {
                    render_markdown(&self.text[..stable], width, ctx.theme)
                };
                *cache = Some((width, ctx.generation, stable, lines));
            }
        }
        let mut out = cache
            .as_ref()
            .map(|(_, _, _, l)| l.clone())
            .unwrap_or_default();
        let tail = &self.text[stable..];
        if !tail.trim().is_empty() {
            if !out.is_empty() {
                out.push(Line::default());
            }
            out.extend(render_markdown(tail, width, ctx.theme));
        }
        out
    }
}

pub fn expert_color(expert: Expert, ctx: &RenderCtx<'_>) -> ratatui::style::Color {
    let p = &ctx.theme.colors;
    match expert {
        Expert::L0 => p.expert_l0,
        Expert::L1 => p.expert_l1,
        Expert::L2 => p.expert_l2,
        Expert::L3 => p.expert_l3,
    }
}
