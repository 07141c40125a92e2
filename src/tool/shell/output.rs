//! Bounded output for the model: the first half of the cap verbatim, a ring buffer of the last
//! half, and counts of everything in between, so 100 MB of output costs a few KiB of memory.
//! Rendered as head + a line saying how many bytes and lines were dropped + tail.

use std::collections::VecDeque;

use crate::tool::sanitize::{Filtered, OutputFilter, plain_text};

/// Head + tail text with counts of what fell out of the middle.
#[derive(Debug, Clone)]
pub struct CappedText {
    head_cap: usize,
    tail_cap: usize,
    head: String,
    tail: VecDeque<u8>,
    total_bytes: u64,
    total_lines: u64,
}

impl CappedText {
    /// `cap` bytes in all: half kept from the start, half from the end.
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(64);
        CappedText {
            head_cap: cap / 2,
            tail_cap: cap - cap / 2,
            head: String::new(),
            tail: VecDeque::new(),
            total_bytes: 0,
            total_lines: 0,
        }
    }

    pub fn push(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.total_bytes += text.len() as u64;
        self.total_lines += text.bytes().filter(|b| *b == b'\n').count() as u64;
        let mut rest = text;
        if self.head.len() < self.head_cap {
            let mut take = (self.head_cap - self.head.len()).min(rest.len());
            while !rest.is_char_boundary(take) {
                take -= 1;
            }
            self.head.push_str(&rest[..take]);
            rest = &rest[take..];
            if take == 0 && !rest.is_empty() {
                // The next char doesn't fit: the head is full.
                self.head_cap = self.head.len();
            }
        }
        if rest.is_empty() {
            return;
        }
        let bytes = rest.as_bytes();
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            self.tail.extend(bytes);
            let excess = self.tail.len().saturating_sub(self.tail_cap);
            self.tail.drain(..excess);
        }
    }

    /// Head, a dropped-bytes line when anything was dropped, then tail.
    pub fn render(&self) -> String {
        let (a, b) = self.tail.as_slices();
        let mut tail_bytes = Vec::with_capacity(self.tail.len());
        tail_bytes.extend_from_slice(a);
        tail_bytes.extend_from_slice(b);
        let kept = self.head.len() as u64 + tail_bytes.len() as u64;
        if kept >= self.total_bytes {
            let mut s = self.head.clone();
            s.push_str(&String::from_utf8_lossy(&tail_bytes));
            return s;
        }
        // The ring may start inside a character or line: start the tail at the next line
        // if that is close, else at the next character.
        let mut start = 0;
        while start < tail_bytes.len() && (tail_bytes[start] & 0xC0) == 0x80 {
            start += 1;
        }
        if let Some(nl) = tail_bytes[start..].iter().position(|b| *b == b'\n')
            && nl < tail_bytes.len() / 4
        {
            start += nl + 1;
        }
        let tail = String::from_utf8_lossy(&tail_bytes[start..]);
        let head_lines = self.head.bytes().filter(|b| *b == b'\n').count() as u64;
        let tail_lines = tail.bytes().filter(|b| *b == b'\n').count() as u64;
        let dropped_bytes = self.total_bytes - self.head.len() as u64 - tail.len() as u64;
        let dropped_lines = self.total_lines.saturating_sub(head_lines + tail_lines);
        let mut s = self.head.clone();
        if !s.ends_with('\n') {
            s.push('\n');
        }
        s.push_str(&format!(
            "[… {dropped_bytes} bytes ({dropped_lines} lines) of output omitted; total {} bytes, {} lines …]\n",
            self.total_bytes, self.total_lines
        ));
        s.push_str(&tail);
        s
    }
}

/// Splits raw output into runs of text and of binary data, line by line. Text is the common
/// case and takes one scan; only chunks with NUL/stray control bytes or invalid UTF-8 are split.
fn split_binary_runs(raw: &[u8]) -> Vec<(bool, &[u8])> {
    if suspicious_bytes(raw) == 0 {
        return vec![(false, raw)];
    }
    let mut runs: Vec<(bool, usize, usize)> = Vec::new();
    let mut start = 0;
    while start < raw.len() {
        let end = raw[start..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(raw.len(), |i| start + i + 1);
        let bad = suspicious_bytes(&raw[start..end]);
        let binary = bad >= 4 && bad * 10 > end - start;
        match runs.last_mut() {
            Some((b, _, e)) if *b == binary => *e = end,
            _ => runs.push((binary, start, end)),
        }
        start = end;
    }
    runs.into_iter().map(|(b, s, e)| (b, &raw[s..e])).collect()
}

/// Bytes that don't belong in terminal text: C0 controls other than tab/newline/CR/ESC/BEL/BS,
/// and invalid UTF-8 sequences.
fn suspicious_bytes(raw: &[u8]) -> usize {
    let controls = raw
        .iter()
        .filter(|b| matches!(**b, 0..=6 | 0x0b | 0x0c | 0x0e..=0x1a | 0x1c..=0x1f | 0x7f))
        .count();
    let mut invalid = 0;
    let mut rest = raw;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(_) => break,
            Err(e) => {
                invalid += 1;
                let skip = e.valid_up_to() + e.error_len().unwrap_or(rest.len() - e.valid_up_to());
                rest = &rest[skip..];
            }
        }
    }
    controls + invalid
}

/// Output of a running command between two looks by the model, plus the stream filter state.
pub struct OutputStream {
    filter: OutputFilter,
    window: CappedText,
    cap: usize,
    /// Raw bytes in the current run of binary-looking chunks.
    binary_run: u64,
    /// Raw bytes read in all.
    pub raw_bytes: u64,
}

/// What a chunk gives the UI.
pub type UiChunk = String;

impl OutputStream {
    pub fn new(cap: usize) -> Self {
        OutputStream {
            filter: OutputFilter::new(),
            window: CappedText::new(cap),
            cap,
            binary_run: 0,
            raw_bytes: 0,
        }
    }

    /// Feeds raw PTY bytes; returns the sanitized text for the UI (may be empty).
    pub fn feed(&mut self, raw: &[u8]) -> UiChunk {
        self.raw_bytes += raw.len() as u64;
        let mut ui = String::new();
        if self.binary_run == 0
            && !self.filter.in_sequence()
            && let Some(text) = plain_text(raw)
        {
            // The common case: plain text, one pass.
            let f = self.filter.feed_plain(text);
            self.window.push(&f.model);
            return f.ui;
        }
        for (binary, piece) in split_binary_runs(raw) {
            if binary {
                self.binary_run += piece.len() as u64;
                // A partial line before the binary data is kept; the data itself never reaches
                // the terminal parser.
                continue;
            }
            ui.push_str(&self.end_binary_run());
            let f: Filtered = self.filter.feed(piece);
            self.window.push(&f.model);
            ui.push_str(&f.ui);
        }
        ui
    }

    /// Closes a pending binary run: the note goes to the model window and back for the UI.
    fn end_binary_run(&mut self) -> String {
        if self.binary_run == 0 {
            return String::new();
        }
        let note = format!("[binary output: {} bytes]\n", self.binary_run);
        self.binary_run = 0;
        self.window.push(&note);
        note
    }

    /// Ends the window: returns what the model sees for it and starts a new one. The UI part
    /// returned is any binary-run note not yet shown.
    pub fn take_window(&mut self) -> (String, UiChunk) {
        let ui = self.end_binary_run();
        let partial = self.filter.flush();
        self.window.push(&partial);
        let text = self.window.render();
        self.window = CappedText::new(self.cap);
        (text, ui)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = CappedText::new(100);
        c.push("hello\n");
        c.push("world\n");
        assert_eq!(c.render(), "hello\nworld\n");
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_counts_the_rest() {
        let mut c = CappedText::new(1000);
        for i in 0..10_000 {
            c.push(&format!("line {i}\n"));
        }
        let r = c.render();
        assert!(r.starts_with("line 0\nline 1\n"));
        assert!(r.ends_with("line 9999\n"));
        assert!(r.contains("lines) of output omitted; total"), "{r}");
        assert!(r.len() < 1200);
        let dropped: u64 = r
            .split("[… ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let marker = r.lines().find(|l| l.starts_with("[… ")).unwrap().len() as u64 + 1;
        let kept = r.len() as u64 - marker;
        // render() may add one newline after a head that ends mid-line.
        assert!(
            dropped + kept - c.total_bytes <= 1,
            "{dropped} + {kept} vs {}",
            c.total_bytes
        );
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        let mut c = CappedText::new(64);
        for _ in 0..100 {
            c.push("ééééé€€€\n");
        }
        let r = c.render();
        assert!(!r.contains('\u{FFFD}'), "{r}");
    }

    #[test]
    fn binary_runs_become_a_note() {
        let mut s = OutputStream::new(1000);
        let bin: Vec<u8> = (0..=255u8).cycle().take(8192).collect();
        assert_eq!(s.feed(&bin), "");
        let ui = s.feed(b"text after\r\n");
        assert_eq!(ui, "[binary output: 8192 bytes]\ntext after\n");
        let (model, _) = s.take_window();
        assert_eq!(model, "[binary output: 8192 bytes]\ntext after\n");
    }
}
