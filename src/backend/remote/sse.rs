//! Server-sent events: a byte-level parser that turns arbitrary chunks of an HTTP body into
//! complete events (WHATWG rules: `data:` lines joined with `\n`, `:` comments ignored, CR, LF
//! or CRLF line ends, events dispatched on a blank line).
//!
//! Chunks may split anywhere — inside a line, between `\r` and `\n`, inside a UTF-8 character:
//! bytes are only decoded once a whole line has arrived.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when the server sent one (OpenAI streams do not).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The most one event may hold (its lines and their data together). A server that sends more
/// without an event end is broken or hostile, and holding it all would let it fill memory.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// Incremental parser state.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// Bytes of the `data:` lines of the event being read.
    data_bytes: usize,
    /// An event passed `MAX_EVENT_BYTES`: the parser takes nothing more.
    overflowed: bool,
    /// The previous byte was `\r`: a following `\n` belongs to the same line end.
    after_cr: bool,
    data_lines: Vec<String>,
    event: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether an event grew past `MAX_EVENT_BYTES` (the stream must be abandoned).
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Feeds the next chunk of the body and returns the events it completed.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in bytes {
            if self.overflowed {
                break;
            }
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' => self.end_line(&mut events),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line(&mut events);
                }
                other => {
                    if self.line.len() + self.data_bytes >= MAX_EVENT_BYTES {
                        self.overflowed = true;
                        self.line = Vec::new();
                        self.data_lines = Vec::new();
                        break;
                    }
                    self.line.push(other);
                }
            }
        }
        events
    }

    /// The body ended: completes a last line without a line end and dispatches a last event
    /// without its blank line. (Strictly such an event is discarded; servers that close right
    /// after `data: [DONE]` are common enough to be lenient.)
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut events);
        }
        self.dispatch(&mut events);
        events
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) {
        let line = String::from_utf8_lossy(&self.line).into_owned();
        self.line.clear();
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                self.data_bytes += value.len() + 1;
                self.data_lines.push(value.to_string());
            }
            "event" => self.event = Some(value.to_string()),
            // `id` and `retry` only matter to reconnecting browsers.
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        self.data_bytes = 0;
        if self.data_lines.is_empty() {
            self.event = None;
            return;
        }
        events.push(SseEvent {
            event: self.event.take(),
            data: std::mem::take(&mut self.data_lines).join("\n"),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn an_event_without_end_stops_the_parser_instead_of_filling_memory() {
        let mut p = SseParser::new();
        assert_eq!(data(&p.feed(b"data: small\n\n")), ["small"]);
        let block = vec![b'a'; 1 << 20];
        let mut fed = 0;
        p.feed(b"data: ");
        while !p.overflowed() && fed < 2 * MAX_EVENT_BYTES {
            p.feed(&block);
            fed += block.len();
        }
        assert!(p.overflowed(), "a line longer than the cap overflows");
        assert!(fed <= MAX_EVENT_BYTES + block.len());
        assert!(p.feed(b"\n\ndata: x\n\n").is_empty(), "nothing after");
        // Many short data lines of one event count together.
        let mut p = SseParser::new();
        let line = [b"data: ".as_slice(), &vec![b'b'; 1 << 20], b"\n"].concat();
        for _ in 0..(MAX_EVENT_BYTES >> 20) + 1 {
            p.feed(&line);
        }
        assert!(p.overflowed());
        // Events at the cap's edge, each ended, are fine.
        let mut p = SseParser::new();
        let event = [
            b"data: ".as_slice(),
            &vec![b'c'; MAX_EVENT_BYTES / 2],
            b"\n\n",
        ]
        .concat();
        for _ in 0..4 {
            assert_eq!(p.feed(&event).len(), 1);
        }
        assert!(!p.overflowed());
    }

    #[test]
    fn single_and_multi_line_events() {
        let mut p = SseParser::new();
        let events = p.feed(b"data: one\n\ndata: a\ndata: b\n\ndata:no-space\n\n");
        assert_eq!(data(&events), ["one", "a\nb", "no-space"]);
    }

    #[test]
    fn comments_event_and_unknown_fields_are_tolerated() {
        let mut p = SseParser::new();
        let events =
            p.feed(b": keepalive\n\nevent: message\nid: 7\nretry: 100\ndata: x\n\n: ping\n\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event.as_deref(), Some("message"));
        assert_eq!(events[0].data, "x");
    }

    #[test]
    fn crlf_and_cr_line_ends() {
        let mut p = SseParser::new();
        let events = p.feed(b"data: a\r\n\r\ndata: b\r\rdata: c\r\n");
        let mut all = events;
        all.extend(p.feed(b"\r\n"));
        assert_eq!(data(&all), ["a", "b", "c"]);
    }

    #[test]
    fn crlf_split_between_chunks_is_one_line_end() {
        let mut p = SseParser::new();
        let mut all = p.feed(b"data: a\r");
        all.extend(p.feed(b"\n"));
        all.extend(p.feed(b"\r"));
        all.extend(p.feed(b"\ndata: b\n\n"));
        assert_eq!(data(&all), ["a", "b"]);
    }

    #[test]
    fn every_split_point_gives_the_same_events_including_inside_utf8() {
        let body = "data: {\"content\":\"héllo → 世界\"}\r\n\r\n: c\n\ndata: x\ndata: y\n\ndata: [DONE]\n\n";
        let bytes = body.as_bytes();
        let mut whole = SseParser::new();
        let expected = whole.feed(bytes);
        assert_eq!(expected.len(), 3);
        for split in 0..bytes.len() {
            for second in split..bytes.len() {
                let mut p = SseParser::new();
                let mut got = p.feed(&bytes[..split]);
                got.extend(p.feed(&bytes[split..second]));
                got.extend(p.feed(&bytes[second..]));
                got.extend(p.finish());
                assert_eq!(got, expected, "split at {split}/{second}");
            }
        }
    }

    #[test]
    fn finish_flushes_an_unterminated_last_event() {
        let mut p = SseParser::new();
        assert!(p.feed(b"data: [DONE]").is_empty());
        assert_eq!(data(&p.finish()), ["[DONE]"]);
        let mut q = SseParser::new();
        assert!(q.feed(b"data: x\n").is_empty());
        assert_eq!(data(&q.finish()), ["x"]);
    }

    #[test]
    fn empty_data_line_still_dispatches_but_blank_lines_alone_do_not() {
        let mut p = SseParser::new();
        let events = p.feed(b"\n\n\ndata:\n\nevent: only\n\n");
        assert_eq!(data(&events), [""]);
    }
}
