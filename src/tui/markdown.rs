//! Markdown (pulldown-cmark) to styled, wrapped lines: headings, emphasis, links, lists, task
//! lists, quotes, tables, rules and highlighted code blocks.

use pulldown_cmark::{Alignment, CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};

use super::highlight::highlight;
use super::theme::Theme;
use super::wrap::{hard_wrap, str_width, wrap_spans};

#[derive(Debug, Clone)]
enum Block {
    Paragraph(Vec<Span<'static>>),
    Heading(HeadingLevel, Vec<Span<'static>>),
    Code {
        lang: String,
        text: String,
    },
    List {
        start: Option<u64>,
        items: Vec<Item>,
    },
    Quote(Vec<Block>),
    Table {
        aligns: Vec<Alignment>,
        rows: Vec<Vec<Vec<Span<'static>>>>,
    },
    Rule,
}

/// One table row: cells of inline spans.
type TableRow = Vec<Vec<Span<'static>>>;

#[derive(Debug, Clone, Default)]
struct Item {
    checked: Option<bool>,
    blocks: Vec<Block>,
}

/// Renders `text` as Markdown for `width` columns.
pub fn render_markdown(text: &str, width: usize, theme: &Theme) -> Vec<Line<'static>> {
    // Sequences go whole before the text is cut into spans (a highlighted code block splits
    // one into tokens, which no later pass could recognise).
    let text = crate::protocol::terminal_safe(text);
    let blocks = parse(&text, theme);
    let mut out = Vec::new();
    layout_blocks(&blocks, width.max(8), theme, &mut out);
    out
}

/// How deep quotes and lists nest in what is drawn. A model's text is untrusted: nested
/// thousands deep, the block tree (laid out and dropped by recursion) took the stack of the
/// thread drawing it, and the TUI with it; deeper content is drawn at this depth.
const MAX_NESTING: usize = 32;

/// Builds the block tree from pulldown-cmark events. Containers are a stack of open blocks.
fn parse(text: &str, theme: &Theme) -> Vec<Block> {
    let p = &theme.colors;
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    enum Open {
        Root(Vec<Block>),
        Quote(Vec<Block>),
        List(Option<u64>, Vec<Item>),
        Item(Item),
    }
    let mut stack: Vec<Open> = vec![Open::Root(Vec::new())];
    let mut inline: Vec<Span<'static>> = Vec::new();
    let mut styles: Vec<Style> = vec![Style::new().fg(p.fg)];
    let mut link_urls: Vec<String> = Vec::new();
    let mut code: Option<(String, String)> = None;
    let mut table: Option<(Vec<Alignment>, Vec<TableRow>)> = None;
    let mut heading: Option<HeadingLevel> = None;
    // Quotes, lists and items opened beyond MAX_NESTING: their content goes to the deepest
    // container kept, and their ends close nothing.
    let mut flattened: usize = 0;

    fn push_block(stack: &mut [Open], block: Block) {
        match stack.last_mut() {
            Some(Open::Root(b)) | Some(Open::Quote(b)) => b.push(block),
            Some(Open::Item(item)) => item.blocks.push(block),
            Some(Open::List(_, items)) => {
                // Content directly in a list (tight items end up in Item) — keep it visible.
                if let Some(last) = items.last_mut() {
                    last.blocks.push(block);
                }
            }
            None => {}
        }
    }
    // Text of a tight list item arrives without a Paragraph: flush it as one when needed.
    let flush_inline = |stack: &mut Vec<Open>, inline: &mut Vec<Span<'static>>| {
        if !inline.is_empty() {
            push_block(stack, Block::Paragraph(std::mem::take(inline)));
        }
    };

    for event in Parser::new_ext(text, options) {
        let style = *styles.last().unwrap_or(&Style::new());
        match event {
            Event::Start(tag) => match tag {
                Tag::Paragraph => flush_inline(&mut stack, &mut inline),
                Tag::Heading { level, .. } => {
                    flush_inline(&mut stack, &mut inline);
                    heading = Some(level);
                    let mut s = Style::new().fg(p.heading).add_modifier(Modifier::BOLD);
                    if level == HeadingLevel::H1 {
                        s = s.add_modifier(Modifier::UNDERLINED);
                    }
                    styles.push(s);
                }
                Tag::BlockQuote(_) | Tag::List(_) | Tag::Item if stack.len() > MAX_NESTING => {
                    flush_inline(&mut stack, &mut inline);
                    flattened += 1;
                }
                Tag::BlockQuote(_) => {
                    flush_inline(&mut stack, &mut inline);
                    stack.push(Open::Quote(Vec::new()));
                    styles.push(style.fg(p.quote).add_modifier(Modifier::ITALIC));
                }
                Tag::CodeBlock(kind) => {
                    flush_inline(&mut stack, &mut inline);
                    let lang = match kind {
                        CodeBlockKind::Fenced(info) => info.to_string(),
                        CodeBlockKind::Indented => String::new(),
                    };
                    code = Some((lang, String::new()));
                }
                Tag::List(start) => {
                    flush_inline(&mut stack, &mut inline);
                    stack.push(Open::List(start, Vec::new()));
                }
                Tag::Item => {
                    flush_inline(&mut stack, &mut inline);
                    stack.push(Open::Item(Item::default()));
                }
                Tag::Table(aligns) => {
                    flush_inline(&mut stack, &mut inline);
                    table = Some((aligns, Vec::new()));
                }
                Tag::TableHead | Tag::TableRow => {
                    if let Some((_, rows)) = table.as_mut() {
                        rows.push(Vec::new());
                    }
                    if matches!(tag, Tag::TableHead) {
                        styles.push(style.add_modifier(Modifier::BOLD));
                    }
                }
                Tag::TableCell => inline.clear(),
                Tag::Emphasis => styles.push(style.add_modifier(Modifier::ITALIC)),
                Tag::Strong => styles.push(style.add_modifier(Modifier::BOLD)),
                Tag::Strikethrough => styles.push(style.add_modifier(Modifier::CROSSED_OUT)),
                Tag::Link { dest_url, .. } => {
                    link_urls.push(dest_url.to_string());
                    styles.push(style.fg(p.link).add_modifier(Modifier::UNDERLINED));
                }
                Tag::Image { dest_url, .. } => {
                    link_urls.push(dest_url.to_string());
                    inline.push(Span::styled("[image: ", style.fg(p.dim)));
                    styles.push(style.fg(p.dim));
                }
                _ => {}
            },
            Event::End(end) => match end {
                TagEnd::Paragraph => flush_inline(&mut stack, &mut inline),
                TagEnd::Heading(_) => {
                    styles.pop();
                    let level = heading.take().unwrap_or(HeadingLevel::H3);
                    push_block(
                        &mut stack,
                        Block::Heading(level, std::mem::take(&mut inline)),
                    );
                }
                TagEnd::BlockQuote(_) | TagEnd::List(_) | TagEnd::Item if flattened > 0 => {
                    flush_inline(&mut stack, &mut inline);
                    flattened -= 1;
                }
                TagEnd::BlockQuote(_) => {
                    flush_inline(&mut stack, &mut inline);
                    styles.pop();
                    if let Some(Open::Quote(blocks)) = stack.pop() {
                        push_block(&mut stack, Block::Quote(blocks));
                    }
                }
                TagEnd::CodeBlock => {
                    if let Some((lang, text)) = code.take() {
                        push_block(&mut stack, Block::Code { lang, text });
                    }
                }
                TagEnd::List(_) => {
                    flush_inline(&mut stack, &mut inline);
                    if let Some(Open::List(start, items)) = stack.pop() {
                        push_block(&mut stack, Block::List { start, items });
                    }
                }
                TagEnd::Item => {
                    flush_inline(&mut stack, &mut inline);
                    if let Some(Open::Item(item)) = stack.pop()
                        && let Some(Open::List(_, items)) = stack.last_mut()
                    {
                        items.push(item);
                    }
                }
                TagEnd::TableCell => {
                    if let Some((_, rows)) = table.as_mut()
                        && let Some(row) = rows.last_mut()
                    {
                        row.push(std::mem::take(&mut inline));
                    }
                }
                TagEnd::TableHead => {
                    styles.pop();
                }
                TagEnd::Table => {
                    if let Some((aligns, rows)) = table.take() {
                        push_block(&mut stack, Block::Table { aligns, rows });
                    }
                }
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                    styles.pop();
                }
                TagEnd::Link => {
                    styles.pop();
                    if let Some(url) = link_urls.pop() {
                        let shown: String = inline
                            .iter()
                            .rev()
                            .take(1)
                            .map(|s| s.content.to_string())
                            .collect();
                        if !url.is_empty() && shown != url && !url.starts_with('#') {
                            inline.push(Span::styled(format!(" ({url})"), Style::new().fg(p.dim)));
                        }
                    }
                }
                TagEnd::Image => {
                    styles.pop();
                    link_urls.pop();
                    inline.push(Span::styled("]", style.fg(p.dim)));
                }
                _ => {}
            },
            Event::Text(t) => {
                if let Some((_, buf)) = code.as_mut() {
                    buf.push_str(&t);
                } else {
                    inline.push(Span::styled(t.to_string(), style));
                }
            }
            Event::Code(t) => inline.push(Span::styled(t.to_string(), style.fg(p.inline_code))),
            Event::InlineMath(t) | Event::DisplayMath(t) => {
                inline.push(Span::styled(t.to_string(), style.fg(p.inline_code)))
            }
            Event::Html(t) | Event::InlineHtml(t) => {
                let t = t.trim_end_matches('\n').to_string();
                inline.push(Span::styled(t, style.fg(p.dim)));
            }
            Event::SoftBreak => inline.push(Span::styled(" ", style)),
            Event::HardBreak => {
                // A hard break ends the visual line: flush as its own paragraph line.
                flush_inline(&mut stack, &mut inline);
            }
            Event::Rule => {
                flush_inline(&mut stack, &mut inline);
                push_block(&mut stack, Block::Rule);
            }
            Event::TaskListMarker(checked) => {
                if let Some(Open::Item(item)) = stack.last_mut() {
                    item.checked = Some(checked);
                }
            }
            Event::FootnoteReference(name) => {
                inline.push(Span::styled(format!("[^{name}]"), style.fg(p.dim)))
            }
        }
    }
    flush_inline(&mut stack, &mut inline);
    // Unclosed containers (a stream cut mid-block) are closed in order.
    while stack.len() > 1 {
        match stack.pop() {
            Some(Open::Quote(blocks)) => push_block(&mut stack, Block::Quote(blocks)),
            Some(Open::List(start, items)) => push_block(&mut stack, Block::List { start, items }),
            Some(Open::Item(item)) => {
                if let Some(Open::List(_, items)) = stack.last_mut() {
                    items.push(item);
                }
            }
            _ => {}
        }
    }
    if let Some((lang, text)) = code.take() {
        push_block(&mut stack, Block::Code { lang, text });
    }
    match stack.pop() {
        Some(Open::Root(blocks)) => blocks,
        _ => Vec::new(),
    }
}

fn layout_blocks(blocks: &[Block], width: usize, theme: &Theme, out: &mut Vec<Line<'static>>) {
    for (i, block) in blocks.iter().enumerate() {
        // Blank line between blocks, except between a tight list's paragraphs.
        if i > 0 {
            out.push(Line::default());
        }
        layout_block(block, width, theme, out);
    }
}

fn layout_block(block: &Block, width: usize, theme: &Theme, out: &mut Vec<Line<'static>>) {
    let p = &theme.colors;
    match block {
        Block::Paragraph(spans) => out.extend(wrap_spans(spans, width, &[], &[])),
        Block::Heading(level, spans) => {
            let hashes = match level {
                HeadingLevel::H1 | HeadingLevel::H2 => String::new(),
                other => format!("{} ", "#".repeat(*other as usize)),
            };
            let prefix = if hashes.is_empty() {
                vec![]
            } else {
                vec![Span::styled(hashes, Style::new().fg(p.heading))]
            };
            out.extend(wrap_spans(spans, width, &prefix, &[]));
        }
        Block::Code { lang, text } => {
            let label = if lang.trim().is_empty() {
                "code".to_string()
            } else {
                lang.trim().to_string()
            };
            out.push(Line::from(Span::styled(
                format!("  ╭─ {label}"),
                Style::new().fg(p.code_label),
            )));
            let bar = Span::styled("  │ ", Style::new().fg(p.code_label));
            for spans in highlight(lang, text, p) {
                let mut line = vec![bar.clone()];
                line.extend(spans);
                out.extend(hard_wrap(
                    Line::from(line),
                    width,
                    std::slice::from_ref(&bar),
                ));
            }
            out.push(Line::from(Span::styled(
                "  ╰─",
                Style::new().fg(p.code_label),
            )));
        }
        Block::List { start, items } => {
            for (n, item) in items.iter().enumerate() {
                let marker = match (start, item.checked) {
                    (_, Some(true)) => "☑ ".to_string(),
                    (_, Some(false)) => "☐ ".to_string(),
                    (Some(s), None) => format!("{}. ", s + n as u64),
                    (None, None) => "• ".to_string(),
                };
                let indent = " ".repeat(str_width(&marker));
                let mut inner = Vec::new();
                layout_blocks(
                    &item.blocks,
                    width.saturating_sub(indent.len()).max(4),
                    theme,
                    &mut inner,
                );
                if inner.is_empty() {
                    inner.push(Line::default());
                }
                for (k, line) in inner.into_iter().enumerate() {
                    let lead = if k == 0 {
                        Span::styled(marker.clone(), Style::new().fg(p.list_marker))
                    } else {
                        Span::raw(indent.clone())
                    };
                    let mut spans = vec![lead];
                    spans.extend(line.spans);
                    out.push(Line::from(spans));
                }
            }
        }
        Block::Quote(blocks) => {
            let mut inner = Vec::new();
            layout_blocks(blocks, width.saturating_sub(2).max(4), theme, &mut inner);
            for line in inner {
                let mut spans = vec![Span::styled("▌ ", Style::new().fg(p.quote))];
                spans.extend(line.spans);
                out.push(Line::from(spans));
            }
        }
        Block::Rule => out.push(Line::from(Span::styled(
            "─".repeat(width.min(80)),
            Style::new().fg(p.rule),
        ))),
        Block::Table { aligns, rows } => layout_table(aligns, rows, width, theme, out),
    }
}

/// Columns get their natural width when the table fits; otherwise the widest columns shrink and
/// their cells wrap, so a table never runs off the screen.
fn layout_table(
    aligns: &[Alignment],
    rows: &[Vec<Vec<Span<'static>>>],
    width: usize,
    theme: &Theme,
    out: &mut Vec<Line<'static>>,
) {
    let p = &theme.colors;
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    if cols == 0 {
        return;
    }
    let cell_w =
        |cell: &Vec<Span<'static>>| cell.iter().map(|s| str_width(&s.content)).sum::<usize>();
    let mut widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(cell_w)
                .max()
                .unwrap_or(0)
                .max(1)
        })
        .collect();
    let chrome = 3 * cols + 1;
    let room = width.saturating_sub(chrome).max(cols);
    while widths.iter().sum::<usize>() > room {
        let Some((i, _)) = widths.iter().enumerate().max_by_key(|(_, w)| **w) else {
            break;
        };
        if widths[i] <= 1 {
            break;
        }
        widths[i] -= 1;
    }
    let border = Style::new().fg(p.table_border);
    let rule = |left: &str, mid: &str, right: &str| {
        let mut s = left.to_string();
        for (i, w) in widths.iter().enumerate() {
            s.push_str(&"─".repeat(w + 2));
            s.push_str(if i + 1 == widths.len() { right } else { mid });
        }
        Line::from(Span::styled(s, border))
    };
    out.push(rule("┌", "┬", "┐"));
    for (r, row) in rows.iter().enumerate() {
        let wrapped: Vec<Vec<Line<'static>>> = (0..cols)
            .map(|c| {
                let cell = row.get(c).cloned().unwrap_or_default();
                wrap_spans(&cell, widths[c], &[], &[])
            })
            .collect();
        let height = wrapped.iter().map(Vec::len).max().unwrap_or(1);
        for k in 0..height {
            let mut spans = vec![Span::styled("│", border)];
            for (c, lines) in wrapped.iter().enumerate() {
                let line = lines.get(k).cloned().unwrap_or_default();
                let used: usize = line.spans.iter().map(|s| str_width(&s.content)).sum();
                let pad = widths[c].saturating_sub(used);
                let (left, right) = match aligns.get(c) {
                    Some(Alignment::Right) => (pad, 0),
                    Some(Alignment::Center) => (pad / 2, pad - pad / 2),
                    _ => (0, pad),
                };
                spans.push(Span::raw(" ".repeat(left + 1)));
                spans.extend(line.spans);
                spans.push(Span::raw(" ".repeat(right + 1)));
                spans.push(Span::styled("│", border));
            }
            out.push(Line::from(spans));
        }
        if r == 0 && rows.len() > 1 {
            out.push(rule("├", "┼", "┤"));
        }
    }
    out.push(rule("└", "┴", "┘"));
}

/// Byte offset up to which a streaming Markdown text is made of finished blocks: after the last
/// blank line that is outside a code fence. Rendering that prefix once and caching it keeps a
/// long answer from being re-laid-out on every token.
pub fn stable_prefix_len(text: &str) -> usize {
    let mut in_fence = false;
    let mut offset = 0;
    let mut stable = 0;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
        }
        offset += line.len();
        if !in_fence && line.ends_with('\n') && line.trim().is_empty() {
            stable = offset;
        }
    }
    stable
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::color_depth::ColorDepth;

    fn plain(lines: &[Line<'_>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }

    #[test]
    fn renders_lists_code_and_tables() {
        let theme = Theme::default_for(ColorDepth::TrueColor);
        let md = "# Title\n\n- one\n- two **bold**\n\n```rust\nfn x() {}\n```\n\n| a | b |\n|---|--:|\n| 1 | 22 |\n";
        let text = plain(&render_markdown(md, 40, &theme));
        assert_eq!(text[0], "Title");
        assert!(text.contains(&"• one".to_string()), "{text:?}");
        assert!(text.contains(&"• two bold".to_string()), "{text:?}");
        assert!(text.contains(&"  │ fn x() {}".to_string()), "{text:?}");
        assert!(text.iter().any(|l| l == "│ 1 │ 22 │"), "{text:?}");
    }

    #[test]
    fn stable_prefix_ignores_blank_lines_inside_fences() {
        let t = "para\n\n```\ncode\n\nmore\n";
        assert_eq!(stable_prefix_len(t), 6);
        let t = "para\n\n```\ncode\n\n```\n\ntail";
        assert_eq!(stable_prefix_len(t), t.len() - 4);
    }

    #[test]
    fn unfinished_markdown_renders_without_panicking() {
        let theme = Theme::default_for(ColorDepth::TrueColor);
        for md in [
            "```py\nprint(",
            "> quote\n> - item",
            "| a |\n|--",
            "**bold",
            "1. x\n   - y\n     ```",
        ] {
            let _ = render_markdown(md, 60, &theme);
        }
    }

    #[test]
    fn deeply_nested_model_text_renders_on_a_small_stack() {
        // A model's answer is untrusted input to the renderer: nesting thousands deep must not
        // take the stack (the TUI, and the audits of running commands, would die with it).
        let texts = [
            ">".repeat(20_000) + " deep",
            (0..3000)
                .map(|i| format!("{}- item\n", "  ".repeat(i)))
                .collect::<String>(),
            "[".repeat(20_000) + &"]".repeat(20_000),
            "*".repeat(20_000) + "x" + &"*".repeat(20_000),
        ];
        std::thread::Builder::new()
            .stack_size(512 << 10)
            .spawn(move || {
                let theme = Theme::default_for(ColorDepth::TrueColor);
                for text in &texts {
                    let lines = render_markdown(text, 80, &theme);
                    assert!(!lines.is_empty(), "{}", &text[..20]);
                }
                let quoted = render_markdown(&(">".repeat(20_000) + " deep"), 80, &theme);
                assert!(plain(&quoted).concat().contains("deep"));
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
