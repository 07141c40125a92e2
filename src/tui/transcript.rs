//! The scrollable transcript: the list of cells, the scroll position (rows up from the bottom, so
//! new output never moves what the user is reading), search, and drawing the visible rows. Only the
//! cells on screen are laid out when following the bottom, which keeps long sessions fast.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;

use super::cell::{HistoryCell, RenderCtx};
use super::wrap::char_width;

#[derive(Default)]
pub struct Transcript {
    pub cells: Vec<HistoryCell>,
    /// Rows scrolled up from the bottom; 0 follows new output.
    pub scroll: usize,
    /// The search query whose matches are highlighted, and the row (from the top) of the current hit.
    pub search: Option<SearchState>,
}

#[derive(Debug, Clone, Default)]
pub struct SearchState {
    pub query: String,
    /// Row from the top of the whole transcript of the current match.
    pub current_row: Option<usize>,
    /// Rows that match the query (a step moves by rows, so this is what "n/m" counts).
    pub matches: usize,
    /// The current match's number among them, from the top (1-based).
    pub position: Option<usize>,
}

impl SearchState {
    /// What the search bar shows after the query: `3/12`, `12 matches`, `no match`.
    pub fn count_label(&self) -> String {
        match (self.position, self.matches) {
            (_, 0) if self.query.is_empty() => String::new(),
            (_, 0) => "no match".into(),
            (Some(n), m) => format!("{n}/{m}"),
            (None, 1) => "1 match".into(),
            (None, m) => format!("{m} matches"),
        }
    }
}

impl Transcript {
    pub fn push(&mut self, cell: HistoryCell) {
        self.cells.push(cell);
    }

    /// Rows of the cells from index `from` to the end (used to keep a scrolled view still while
    /// output grows below it).
    pub fn tail_height(&self, from: usize, width: u16, ctx: &RenderCtx<'_>) -> usize {
        self.cells
            .iter()
            .skip(from)
            .map(|c| c.height(width, ctx))
            .sum()
    }

    /// Total rows at `width` (lays out every cell once; cached afterwards).
    pub fn total_height(&self, width: u16, ctx: &RenderCtx<'_>) -> usize {
        self.cells.iter().map(|c| c.height(width, ctx)).sum()
    }

    pub fn scroll_up(&mut self, rows: usize, width: u16, height: u16, ctx: &RenderCtx<'_>) {
        let max = self
            .total_height(width, ctx)
            .saturating_sub(height as usize);
        self.scroll = (self.scroll + rows).min(max);
    }

    pub fn scroll_down(&mut self, rows: usize) {
        self.scroll = self.scroll.saturating_sub(rows);
    }

    pub fn scroll_to_top(&mut self, width: u16, height: u16, ctx: &RenderCtx<'_>) {
        self.scroll = self
            .total_height(width, ctx)
            .saturating_sub(height as usize);
    }

    /// The rows to show in a viewport of `height`, bottom-aligned: walks cells from the end and
    /// stops as soon as the viewport (plus the scroll offset) is covered.
    pub fn visible_lines(
        &self,
        width: u16,
        height: u16,
        ctx: &RenderCtx<'_>,
    ) -> Vec<Line<'static>> {
        let need = self.scroll + height as usize;
        let mut chunks = Vec::new();
        let mut rows = 0;
        for cell in self.cells.iter().rev() {
            let lines = cell.lines(width, ctx);
            rows += lines.len() + 1;
            chunks.push(lines);
            if rows >= need {
                break;
            }
        }
        let mut all: Vec<Line<'static>> = Vec::with_capacity(rows);
        for lines in chunks.iter().rev() {
            all.extend(lines.iter().cloned());
            all.push(Line::default());
        }
        // Drop the trailing separator so the last cell sits on the bottom row.
        all.pop();
        let end = all.len().saturating_sub(self.scroll);
        let start = end.saturating_sub(height as usize);
        all[start..end].to_vec()
    }

    /// Every row of the transcript as plain text, with the blank row between cells that
    /// `visible_lines` draws.
    fn plain_rows(&self, width: u16, ctx: &RenderCtx<'_>) -> Vec<String> {
        let mut rows: Vec<String> = Vec::new();
        for cell in &self.cells {
            rows.extend(cell.plain_lines(width, ctx));
            rows.push(String::new());
        }
        rows.pop();
        rows
    }

    /// A new query typed in the search bar: highlighted and counted, no match chosen yet.
    pub fn set_search_query(&mut self, query: &str, width: u16, ctx: &RenderCtx<'_>) {
        let needle = query.to_lowercase();
        let matches = if needle.is_empty() {
            0
        } else {
            self.plain_rows(width, ctx)
                .iter()
                .filter(|r| r.to_lowercase().contains(&needle))
                .count()
        };
        self.search = Some(SearchState {
            query: query.to_string(),
            current_row: None,
            matches,
            position: None,
        });
    }

    /// Finds the next match of `query` above (`older`) or below the current match, scrolls to it,
    /// and returns whether one was found.
    pub fn search_step(
        &mut self,
        query: &str,
        older: bool,
        width: u16,
        height: u16,
        ctx: &RenderCtx<'_>,
    ) -> bool {
        let needle = query.to_lowercase();
        if needle.is_empty() {
            return false;
        }
        let rows = self.plain_rows(width, ctx);
        let total = rows.len();
        let view_bottom = total.saturating_sub(self.scroll);
        let from = match self
            .search
            .as_ref()
            .and_then(|s| (s.query == query).then_some(s.current_row).flatten())
        {
            Some(r) => r,
            None => view_bottom,
        };
        let hit = if older {
            (0..from.min(total))
                .rev()
                .find(|&r| rows[r].to_lowercase().contains(&needle))
        } else {
            (from + 1..total).find(|&r| rows[r].to_lowercase().contains(&needle))
        };
        let hits = |r: &String| r.to_lowercase().contains(&needle);
        let current_row = hit.or(self
            .search
            .as_ref()
            .filter(|s| s.query == query)
            .and_then(|s| s.current_row));
        self.search = Some(SearchState {
            query: query.to_string(),
            current_row,
            matches: rows.iter().filter(|r| hits(r)).count(),
            position: current_row.map(|row| rows.iter().take(row + 1).filter(|r| hits(r)).count()),
        });
        let Some(row) = hit else { return false };
        // Put the hit in the middle of the viewport.
        let half = height as usize / 2;
        let bottom = (row + half + 1).min(total);
        self.scroll = total - bottom;
        let max = total.saturating_sub(height as usize);
        self.scroll = self.scroll.min(max);
        true
    }

    /// Draws the visible rows into `area`, highlighting search matches.
    pub fn draw(&self, area: Rect, buf: &mut Buffer, ctx: &RenderCtx<'_>) {
        if area.height == 0 || area.width == 0 {
            return;
        }
        let lines = self.visible_lines(area.width, area.height, ctx);
        // Short transcripts start at the top, like a document.
        let y0 = area.y;
        for (i, line) in lines.iter().enumerate() {
            let y = y0 + i as u16;
            buf.set_line(area.x, y, line, area.width);
            if let Some(search) = &self.search
                && !search.query.is_empty()
            {
                highlight_matches(buf, area.x, y, area.width, line, &search.query, ctx);
            }
        }
    }
}

fn highlight_matches(
    buf: &mut Buffer,
    x: u16,
    y: u16,
    width: u16,
    line: &Line<'_>,
    query: &str,
    ctx: &RenderCtx<'_>,
) {
    let text: String = line.spans.iter().map(|s| s.content.as_ref()).collect();
    let lower = text.to_lowercase();
    let needle = query.to_lowercase();
    if lower.len() != text.len() {
        return; // Case folding changed byte offsets (rare scripts): skip highlighting this row.
    }
    let p = &ctx.theme.colors;
    let style = if ctx.theme.no_color {
        Style::new().add_modifier(Modifier::REVERSED)
    } else {
        Style::new().fg(p.search_fg).bg(p.search_bg)
    };
    let mut from = 0;
    while let Some(pos) = lower[from..].find(&needle) {
        let start = from + pos;
        let col: usize = text[..start].chars().map(char_width).sum();
        let w: usize = text[start..start + needle.len()]
            .chars()
            .map(char_width)
            .sum();
        let area = Rect::new(
            x + col.min(width as usize) as u16,
            y,
            (w.min((width as usize).saturating_sub(col))) as u16,
            1,
        );
        buf.set_style(area, style);
        from = start + needle.len().max(1);
    }
}
