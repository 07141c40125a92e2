//! Transcript cells: each kind knows how to lay itself out for a width; `HistoryCell` caches the
//! laid-out lines per (width, render generation) so finished cells are wrapped once.

mod assistant;
mod diff;
mod notice;
mod plan;
mod reasoning;
mod tool;
mod user;

use std::cell::RefCell;
use std::sync::Arc;

use ratatui::text::Line;

pub use assistant::AssistantCell;
pub use diff::{DiffCell, render_diff_lines};
pub use notice::{NoticeCell, NoticeLevel};
pub use plan::PlanCell;
pub use reasoning::ReasoningCell;
pub use tool::{ToolCell, format_duration};
pub use user::UserCell;

use super::options::ExpertNames;
use super::theme::Theme;

/// What a cell needs to lay itself out.
pub struct RenderCtx<'a> {
    pub theme: &'a Theme,
    /// Ctrl+O: tool output and reasoning shown in full.
    pub expanded: bool,
    pub experts: &'a ExpertNames,
    /// Bumped when the theme or `expanded` changes: every cached layout is stale then.
    pub generation: u64,
}

pub enum CellKind {
    User(UserCell),
    Assistant(AssistantCell),
    Reasoning(ReasoningCell),
    Tool(ToolCell),
    Diff(DiffCell),
    Plan(PlanCell),
    Notice(NoticeCell),
}

struct Cached {
    width: u16,
    generation: u64,
    lines: Arc<Vec<Line<'static>>>,
}

pub struct HistoryCell {
    kind: CellKind,
    cache: RefCell<Option<Cached>>,
}

impl HistoryCell {
    pub fn new(kind: CellKind) -> HistoryCell {
        HistoryCell {
            kind,
            cache: RefCell::new(None),
        }
    }

    pub fn kind(&self) -> &CellKind {
        &self.kind
    }

    /// Mutable access drops the cached layout: the content is about to change.
    pub fn kind_mut(&mut self) -> &mut CellKind {
        *self.cache.get_mut() = None;
        &mut self.kind
    }

    /// The cell's lines at `width`, from the cache when still valid.
    pub fn lines(&self, width: u16, ctx: &RenderCtx<'_>) -> Arc<Vec<Line<'static>>> {
        if let Some(c) = self.cache.borrow().as_ref()
            && c.width == width
            && c.generation == ctx.generation
        {
            return c.lines.clone();
        }
        let lines = Arc::new(self.layout(width as usize, ctx));
        *self.cache.borrow_mut() = Some(Cached {
            width,
            generation: ctx.generation,
            lines: lines.clone(),
        });
        lines
    }

    /// Number of screen rows, including the blank separator line after the cell.
    pub fn height(&self, width: u16, ctx: &RenderCtx<'_>) -> usize {
        self.lines(width, ctx).len() + 1
    }

    fn layout(&self, width: usize, ctx: &RenderCtx<'_>) -> Vec<Line<'static>> {
        let width = width.max(10);
        match &self.kind {
            CellKind::User(c) => c.layout(width, ctx),
            CellKind::Assistant(c) => c.layout(width, ctx),
            CellKind::Reasoning(c) => c.layout(width, ctx),
            CellKind::Tool(c) => c.layout(width, ctx),
            CellKind::Diff(c) => c.layout(width, ctx),
            CellKind::Plan(c) => c.layout(width, ctx),
            CellKind::Notice(c) => c.layout(width, ctx),
        }
    }

    /// Plain text for the print-on-exit transcript and for search.
    pub fn plain_lines(&self, width: u16, ctx: &RenderCtx<'_>) -> Vec<String> {
        self.lines(width, ctx)
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }
}
