//! A full-screen pager over prepared lines (/diff, /help): scroll, search with `/`, n / N.

use ratatui::text::Line;

pub struct Pager {
    pub title: String,
    pub lines: Vec<Line<'static>>,
    /// First visible line.
    pub top: usize,
    /// `Some` while typing a search query.
    pub search_input: Option<String>,
    pub query: String,
    pub message: Option<String>,
}

impl Pager {
    pub fn new(title: impl Into<String>, lines: Vec<Line<'static>>) -> Pager {
        Pager {
            title: title.into(),
            lines,
            top: 0,
            search_input: None,
            query: String::new(),
            message: None,
        }
    }

    pub fn max_top(&self, height: usize) -> usize {
        self.lines.len().saturating_sub(height)
    }

    pub fn scroll(&mut self, delta: isize, height: usize) {
        let top = self.top as isize + delta;
        self.top = top.clamp(0, self.max_top(height) as isize) as usize;
    }

    fn plain(&self, i: usize) -> String {
        self.lines[i]
            .spans
            .iter()
            .map(|s| s.content.as_ref())
            .collect::<String>()
            .to_lowercase()
    }

    /// Jumps to the next (or previous) line containing the query.
    pub fn find(&mut self, forward: bool, height: usize) -> bool {
        let needle = self.query.to_lowercase();
        if needle.is_empty() {
            return false;
        }
        let n = self.lines.len();
        let hit = if forward {
            (self.top + 1..n).find(|&i| self.plain(i).contains(&needle))
        } else {
            (0..self.top.min(n))
                .rev()
                .find(|&i| self.plain(i).contains(&needle))
        };
        match hit {
            Some(i) => {
                self.top = i.min(self.max_top(height));
                self.message = None;
                true
            }
            None => {
                self.message = Some(format!("no more matches for '{}'", self.query));
                false
            }
        }
    }
}
