//! The multi-line prompt editor: cursor movement and editing, bracketed pastes that collapse to a
//! placeholder when large (expanded again on send), and history recall at the first/last line.

use super::history::History;
use super::wrap::{char_width, str_width};

/// Pastes with more lines or characters than this become a `[Pasted text #N: L lines]` placeholder.
const PASTE_COLLAPSE_LINES: usize = 6;
const PASTE_COLLAPSE_CHARS: usize = 800;

#[derive(Debug, Default, Clone)]
pub struct Composer {
    text: String,
    /// Byte offset of the cursor in `text` (always on a char boundary).
    cursor: usize,
    pastes: Vec<(String, String)>,
    paste_counter: usize,
    /// Position in history while recalling (None = editing a fresh draft).
    history_index: Option<usize>,
    draft: String,
}

impl Composer {
    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn cursor(&self) -> usize {
        self.cursor
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }

    pub fn set_text(&mut self, text: &str) {
        self.text = text.to_string();
        self.cursor = self.text.len();
    }

    pub fn clear(&mut self) {
        self.text.clear();
        self.cursor = 0;
        self.pastes.clear();
        self.history_index = None;
    }

    pub fn insert_char(&mut self, c: char) {
        self.text.insert(self.cursor, c);
        self.cursor += c.len_utf8();
        self.history_index = None;
    }

    pub fn insert_str(&mut self, s: &str) {
        self.text.insert_str(self.cursor, s);
        self.cursor += s.len();
        self.history_index = None;
    }

    pub fn newline(&mut self) {
        self.insert_char('\n');
    }

    /// A bracketed paste: small ones are inserted as typed, large ones as a placeholder.
    pub fn paste(&mut self, pasted: &str) {
        let normalized = pasted.replace("\r\n", "\n").replace('\r', "\n");
        let lines = normalized.lines().count();
        if lines > PASTE_COLLAPSE_LINES || normalized.chars().count() > PASTE_COLLAPSE_CHARS {
            self.paste_counter += 1;
            let placeholder = format!(
                "[Pasted text #{}: {} lines]",
                self.paste_counter,
                lines.max(1)
            );
            self.insert_str(&placeholder);
            self.pastes.push((placeholder, normalized));
        } else {
            self.insert_str(&normalized);
        }
    }

    /// The text to send: placeholders still present are replaced by what was pasted.
    pub fn expanded_text(&self) -> String {
        let mut out = self.text.clone();
        for (placeholder, content) in &self.pastes {
            if let Some(pos) = out.find(placeholder.as_str()) {
                out.replace_range(pos..pos + placeholder.len(), content);
            }
        }
        out
    }

    /// Takes the text to send and clears the editor.
    pub fn take_submission(&mut self) -> String {
        let text = self.expanded_text();
        self.clear();
        text
    }

    pub fn backspace(&mut self) {
        if self.cursor == 0 {
            return;
        }
        // A placeholder is deleted as one unit.
        for (placeholder, _) in &self.pastes {
            if self.text[..self.cursor].ends_with(placeholder.as_str()) {
                let start = self.cursor - placeholder.len();
                self.text.replace_range(start..self.cursor, "");
                self.cursor = start;
                return;
            }
        }
        let prev = self.prev_boundary(self.cursor);
        self.text.replace_range(prev..self.cursor, "");
        self.cursor = prev;
    }

    pub fn delete(&mut self) {
        if self.cursor < self.text.len() {
            let next = self.next_boundary(self.cursor);
            self.text.replace_range(self.cursor..next, "");
        }
    }

    pub fn delete_word_before(&mut self) {
        let before = &self.text[..self.cursor];
        let trimmed = before.trim_end();
        let start = trimmed
            .rfind(|c: char| c.is_whitespace())
            .map(|i| i + 1)
            .unwrap_or(0);
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    pub fn kill_to_line_start(&mut self) {
        let start = self.line_start(self.cursor);
        self.text.replace_range(start..self.cursor, "");
        self.cursor = start;
    }

    pub fn kill_to_line_end(&mut self) {
        let end = self.line_end(self.cursor);
        self.text.replace_range(self.cursor..end, "");
    }

    pub fn left(&mut self) {
        self.cursor = self.prev_boundary(self.cursor);
    }

    pub fn right(&mut self) {
        self.cursor = self.next_boundary(self.cursor);
    }

    pub fn word_left(&mut self) {
        let before = self.text[..self.cursor].trim_end();
        self.cursor = before
            .rfind(|c: char| c.is_whitespace())
            .map(|i| i + 1)
            .unwrap_or(0);
    }

    pub fn word_right(&mut self) {
        let after = &self.text[self.cursor..];
        let skipped = after.len() - after.trim_start().len();
        let word = after
            .trim_start()
            .find(char::is_whitespace)
            .unwrap_or(after.trim_start().len());
        self.cursor += skipped + word;
    }

    pub fn home(&mut self) {
        self.cursor = self.line_start(self.cursor);
    }

    pub fn end(&mut self) {
        self.cursor = self.line_end(self.cursor);
    }

    pub fn on_first_line(&self) -> bool {
        !self.text[..self.cursor].contains('\n')
    }

    pub fn on_last_line(&self) -> bool {
        !self.text[self.cursor..].contains('\n')
    }

    /// Moves the cursor one line up keeping the column; false when already on the first line.
    pub fn up(&mut self) -> bool {
        if self.on_first_line() {
            return false;
        }
        let col = str_width(&self.text[self.line_start(self.cursor)..self.cursor]);
        let prev_end = self.line_start(self.cursor) - 1;
        let prev_start = self.line_start(prev_end);
        self.cursor = self.at_column(prev_start, prev_end, col);
        true
    }

    pub fn down(&mut self) -> bool {
        if self.on_last_line() {
            return false;
        }
        let col = str_width(&self.text[self.line_start(self.cursor)..self.cursor]);
        let next_start = self.line_end(self.cursor) + 1;
        let next_end = self.line_end(next_start);
        self.cursor = self.at_column(next_start, next_end, col);
        true
    }

    /// Up at the first line recalls the previous history entry (the draft is kept).
    pub fn history_prev(&mut self, history: &History) -> bool {
        let next = match self.history_index {
            None if history.is_empty() => return false,
            None => {
                self.draft = self.text.clone();
                history.len() - 1
            }
            Some(0) => return false,
            Some(i) => i - 1,
        };
        if let Some(entry) = history.get(next) {
            self.history_index = Some(next);
            self.text = entry.to_string();
            self.cursor = self.text.len();
            return true;
        }
        false
    }

    pub fn history_next(&mut self, history: &History) -> bool {
        let Some(i) = self.history_index else {
            return false;
        };
        if i + 1 < history.len() {
            self.history_index = Some(i + 1);
            self.text = history.get(i + 1).unwrap_or("").to_string();
        } else {
            self.history_index = None;
            self.text = std::mem::take(&mut self.draft);
        }
        self.cursor = self.text.len();
        true
    }

    /// The `@token` (or `/command`) word under the cursor: (start byte, text without the sigil).
    pub fn token_at_cursor(&self, sigil: char) -> Option<(usize, &str)> {
        let before = &self.text[..self.cursor];
        let start = before
            .rfind(char::is_whitespace)
            .map(|i| i + 1)
            .unwrap_or(0);
        let word = &before[start..];
        word.strip_prefix(sigil).map(|rest| (start, rest))
    }

    /// Replaces the word under the cursor starting at `start` with `replacement`.
    pub fn replace_token(&mut self, start: usize, replacement: &str) {
        let end = self.text[self.cursor..]
            .find(char::is_whitespace)
            .map(|i| self.cursor + i)
            .unwrap_or(self.text.len());
        self.text.replace_range(start..end, replacement);
        self.cursor = start + replacement.len();
    }

    fn at_column(&self, start: usize, end: usize, col: usize) -> usize {
        let mut used = 0;
        for (i, c) in self.text[start..end].char_indices() {
            if used >= col {
                return start + i;
            }
            used += char_width(c);
        }
        end
    }

    fn line_start(&self, pos: usize) -> usize {
        self.text[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0)
    }

    fn line_end(&self, pos: usize) -> usize {
        self.text[pos..]
            .find('\n')
            .map(|i| pos + i)
            .unwrap_or(self.text.len())
    }

    fn prev_boundary(&self, pos: usize) -> usize {
        self.text[..pos]
            .char_indices()
            .next_back()
            .map(|(i, _)| i)
            .unwrap_or(0)
    }

    fn next_boundary(&self, pos: usize) -> usize {
        self.text[pos..]
            .chars()
            .next()
            .map(|c| pos + c.len_utf8())
            .unwrap_or(pos)
    }

    /// Wraps the text to `width` columns: rows of text and the cursor's (row, column).
    pub fn layout(&self, width: usize) -> (Vec<String>, (usize, usize)) {
        let width = width.max(2);
        let mut rows = vec![String::new()];
        let mut col = 0;
        let mut cursor = (0, 0);
        for (i, c) in self.text.char_indices() {
            if i == self.cursor {
                cursor = (rows.len() - 1, col);
            }
            if c == '\n' {
                rows.push(String::new());
                col = 0;
                continue;
            }
            let w = char_width(c);
            if col + w > width {
                rows.push(String::new());
                col = 0;
            }
            if let Some(r) = rows.last_mut() {
                r.push(if c == '\t' { ' ' } else { c });
            }
            col += w;
        }
        if self.cursor >= self.text.len() {
            if col >= width {
                rows.push(String::new());
                col = 0;
            }
            cursor = (rows.len() - 1, col);
        }
        (rows, cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editing_moves_by_characters_and_lines() {
        let mut c = Composer::default();
        for ch in "héllo".chars() {
            c.insert_char(ch);
        }
        c.left();
        c.left();
        c.backspace();
        assert_eq!(c.text(), "hélo");
        c.end();
        c.newline();
        c.insert_str("world");
        assert!(c.up());
        assert_eq!(c.cursor(), 4 + 1, "column kept on the shorter line");
        assert!(!c.up());
        assert!(c.down());
        c.delete_word_before();
        assert_eq!(
            c.text(),
            "hélo\nd",
            "column 4 kept going down, word before it deleted"
        );
    }

    #[test]
    fn large_paste_collapses_and_expands_on_send() {
        let mut c = Composer::default();
        c.insert_str("see: ");
        let big: String = (0..20).map(|i| format!("line {i}\n")).collect();
        c.paste(&big);
        assert_eq!(c.text(), "see: [Pasted text #1: 20 lines]");
        assert_eq!(c.take_submission(), format!("see: {big}"));
        assert!(c.is_empty());
        c.paste("small");
        assert_eq!(c.text(), "small");
    }

    #[test]
    fn backspace_removes_a_placeholder_whole() {
        let mut c = Composer::default();
        c.paste(&"x\n".repeat(50));
        c.backspace();
        assert_eq!(c.text(), "");
        assert_eq!(c.expanded_text(), "");
    }

    #[test]
    fn layout_wraps_and_places_the_cursor() {
        let mut c = Composer::default();
        c.insert_str("abcdef\ngh");
        let (rows, cursor) = c.layout(4);
        assert_eq!(rows, vec!["abcd", "ef", "gh"]);
        assert_eq!(cursor, (2, 2));
    }

    #[test]
    fn token_under_cursor_is_found_and_replaced() {
        let mut c = Composer::default();
        c.insert_str("open @src/ma");
        let (start, q) = c.token_at_cursor('@').expect("token");
        assert_eq!(q, "src/ma");
        c.replace_token(start, "src/main.rs ");
        assert_eq!(c.text(), "open src/main.rs ");
    }
}
