//! Drawing one frame from the state: transcript, queued messages, status line, composer, footer,
//! and the overlays (popup, approval modal, pager). Pure: `render(&App, &mut Frame)` works on any
//! ratatui backend, so tests draw into a `TestBackend`.

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::{Position, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Padding, Paragraph, Widget};

use super::app::{App, Popup};
use super::approval::PendingApproval;
use super::cell::render_diff_lines;
use super::status::status_line;
use super::wrap::{hard_wrap, str_width, truncate, wrap_spans};
use crate::protocol::ApprovalRequest;

const MAX_COMPOSER_ROWS: usize = 8;
const MAX_QUEUED_SHOWN: usize = 3;

pub fn render(app: &App, frame: &mut Frame<'_>) {
    let area = frame.area();
    let p = &app.theme.colors;
    let buf = frame.buffer_mut();
    buf.set_style(area, Style::new().fg(p.fg).bg(p.bg));
    if area.width < 4 || area.height < 4 {
        return;
    }
    if let Some(pager) = &app.pager {
        draw_pager(app, pager, area, buf);
        app.viewport
            .set((area.width, area.height.saturating_sub(2)));
        return;
    }

    let prompt_w = 2usize;
    let (rows, cursor) = app
        .composer
        .layout((area.width as usize).saturating_sub(prompt_w + 1));
    let composer_h = rows.len().clamp(1, MAX_COMPOSER_ROWS) as u16;
    let queued_h = app.queue.len().min(MAX_QUEUED_SHOWN) as u16
        + u16::from(app.queue.len() > MAX_QUEUED_SHOWN);
    let fixed = composer_h + queued_h + 2; // status + footer
    let transcript_h = area.height.saturating_sub(fixed);
    let transcript_area = Rect::new(area.x, area.y, area.width, transcript_h);
    let mut y = area.y + transcript_h;
    let queued_area = Rect::new(area.x, y, area.width, queued_h);
    y += queued_h;
    let status_area = Rect::new(area.x, y, area.width, 1);
    y += 1;
    let composer_area = Rect::new(area.x, y, area.width, composer_h);
    y += composer_h;
    let footer_area = Rect::new(area.x, y, area.width, 1);

    app.viewport
        .set((transcript_area.width, transcript_area.height));
    let ctx = app.ctx();
    app.transcript.draw(transcript_area, buf, &ctx);
    draw_queue(app, queued_area, buf);
    buf.set_line(
        status_area.x,
        status_area.y,
        &status_line(
            &app.status,
            &app.opts.experts,
            &app.theme,
            app.now,
            area.width as usize,
        ),
        area.width,
    );
    let cursor_pos = draw_composer(app, &rows, cursor, composer_area, buf);
    draw_footer(app, footer_area, buf);
    draw_popup(app, transcript_area, buf);
    if let Some(approval) = app.approvals.front() {
        draw_approval(app, approval, area, buf);
    } else if let Some(pos) = cursor_pos {
        frame.set_cursor_position(pos);
    }
}

fn draw_queue(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.theme.colors;
    for (i, text) in app.queue.iter().take(MAX_QUEUED_SHOWN).enumerate() {
        let first = text.lines().next().unwrap_or("");
        let line = Line::from(vec![
            Span::styled("  ↳ queued: ", Style::new().fg(p.queued)),
            Span::styled(
                truncate(first, (area.width as usize).saturating_sub(13)),
                Style::new().fg(p.dim),
            ),
        ]);
        buf.set_line(area.x, area.y + i as u16, &line, area.width);
    }
    if app.queue.len() > MAX_QUEUED_SHOWN {
        let more = Line::from(Span::styled(
            format!(
                "  … {} more queued (Esc drops them)",
                app.queue.len() - MAX_QUEUED_SHOWN
            ),
            Style::new().fg(p.dim),
        ));
        buf.set_line(area.x, area.y + MAX_QUEUED_SHOWN as u16, &more, area.width);
    }
}

/// Returns where the terminal cursor goes.
fn draw_composer(
    app: &App,
    rows: &[String],
    cursor: (usize, usize),
    area: Rect,
    buf: &mut Buffer,
) -> Option<Position> {
    let p = &app.theme.colors;
    if let Some(query) = &app.search_input {
        let line = Line::from(vec![
            Span::styled(
                "search: ",
                Style::new().fg(p.accent).add_modifier(Modifier::BOLD),
            ),
            Span::styled(query.clone(), Style::new().fg(p.fg)),
            Span::styled(
                app.transcript
                    .search
                    .as_ref()
                    .filter(|s| &s.query == query)
                    .map(|s| format!("  {}", s.count_label()))
                    .unwrap_or_default(),
                Style::new().fg(p.dim),
            ),
        ]);
        buf.set_line(area.x, area.y, &line, area.width);
        return Some(Position::new(area.x + 8 + str_width(query) as u16, area.y));
    }
    let prompt = Span::styled(
        "› ",
        Style::new()
            .fg(p.composer_prompt)
            .add_modifier(Modifier::BOLD),
    );
    if app.composer.is_empty() {
        let hint = if app.status.working {
            "type to queue a message for after this turn"
        } else {
            "Ask baton… (/ commands · @ files · ! shell)"
        };
        let line = Line::from(vec![
            prompt,
            Span::styled(
                truncate(hint, area.width as usize - 2),
                Style::new().fg(p.composer_placeholder),
            ),
        ]);
        buf.set_line(area.x, area.y, &line, area.width);
        return Some(Position::new(area.x + 2, area.y));
    }
    // Keep the cursor row visible when the text is taller than the box.
    let height = area.height as usize;
    let first = cursor.0.saturating_sub(height.saturating_sub(1));
    for (i, row) in rows.iter().skip(first).take(height).enumerate() {
        let lead = if i == 0 && first == 0 {
            prompt.clone()
        } else {
            Span::raw("  ")
        };
        let line = Line::from(vec![lead, Span::styled(row.clone(), Style::new().fg(p.fg))]);
        buf.set_line(area.x, area.y + i as u16, &line, area.width);
    }
    Some(Position::new(
        area.x + 2 + cursor.1 as u16,
        area.y + (cursor.0 - first) as u16,
    ))
}

fn draw_footer(app: &App, area: Rect, buf: &mut Buffer) {
    let p = &app.theme.colors;
    let text = if let Some(h) = &app.hint {
        Line::from(Span::styled(format!("  {h}"), Style::new().fg(p.warning)))
    } else if app.transcript.scroll > 0 {
        Line::from(Span::styled(
            format!(
                "  ↑ {} rows up · End returns to the bottom · Ctrl+F search",
                app.transcript.scroll
            ),
            Style::new().fg(p.accent),
        ))
    } else {
        let mouse = if app.mouse_capture { "on" } else { "off" };
        let keys = format!(
            "  Enter send · Shift+Enter newline · Ctrl+O expand · Ctrl+F search · PgUp scroll · F2 mouse {mouse} · Ctrl+C quit"
        );
        Line::from(Span::styled(keys, Style::new().fg(p.dim)))
    };
    let width = area.width as usize;
    let content: String = text.spans.iter().map(|s| s.content.as_ref()).collect();
    let style = text.spans.first().map(|s| s.style).unwrap_or_default();
    buf.set_line(
        area.x,
        area.y,
        &Line::from(Span::styled(truncate(&content, width), style)),
        area.width,
    );
}

fn draw_popup(app: &App, above: Rect, buf: &mut Buffer) {
    let p = &app.theme.colors;
    let items: Vec<(String, String)> = match app.popup() {
        Popup::None => return,
        Popup::Slash(entries) => entries
            .iter()
            .map(|e| (e.label(), e.description().to_string()))
            .collect(),
        Popup::Files(files) => files.iter().map(|f| (f.clone(), String::new())).collect(),
        Popup::Sessions(list) => list
            .iter()
            .zip(super::sessions::short_ids(&list))
            .map(|(s, id)| super::sessions::describe(s, &app.opts.workspace, &id))
            .collect(),
    };
    let height = (items.len() as u16).min(10).min(above.height);
    if height == 0 {
        return;
    }
    let area = Rect::new(
        above.x,
        above.y + above.height - height,
        above.width,
        height,
    );
    Clear.render(area, buf);
    let selected = app.popup_selected.min(items.len() - 1);
    let first = selected.saturating_sub(height as usize - 1);
    let name_w = items
        .iter()
        .map(|(n, _)| str_width(n))
        .max()
        .unwrap_or(0)
        .min(40);
    for (row, (i, (name, desc))) in items
        .iter()
        .enumerate()
        .skip(first)
        .take(height as usize)
        .enumerate()
    {
        let is_sel = i == selected;
        let (fg, bg) = if is_sel {
            (p.popup_selected_fg, p.popup_selected_bg)
        } else {
            (p.popup_fg, p.popup_bg)
        };
        let mut style = Style::new().fg(fg).bg(bg);
        if is_sel && app.theme.no_color {
            style = style.add_modifier(Modifier::REVERSED);
        }
        let desc_style = if is_sel {
            style
        } else {
            Style::new().fg(p.popup_description).bg(bg)
        };
        let pad = name_w.saturating_sub(str_width(name));
        let line = Line::from(vec![
            Span::styled(
                format!("  {}{}  ", truncate(name, 40), " ".repeat(pad)),
                style,
            ),
            Span::styled(desc.clone(), desc_style),
        ]);
        let y = area.y + row as u16;
        buf.set_style(Rect::new(area.x, y, area.width, 1), Style::new().bg(bg));
        buf.set_line(area.x, y, &line, area.width);
    }
}

fn draw_approval(app: &App, approval: &PendingApproval, area: Rect, buf: &mut Buffer) {
    let p = &app.theme.colors;
    let width = area.width.saturating_sub(4).min(100);
    let inner_w = width.saturating_sub(4) as usize; // borders + padding
    let mut body: Vec<Line<'static>> = Vec::new();
    let title = match &approval.request {
        ApprovalRequest::Command { command, cwd, .. } => {
            // A run of blank lines is one line saying how many: padding must not push the
            // rest of the command below the fold ("git status" + 60 newlines + "touch …").
            let mut blanks = 0usize;
            let flush_blanks = |blanks: &mut usize, body: &mut Vec<Line<'static>>| {
                if *blanks > 1 {
                    body.push(Line::from(Span::styled(
                        format!("  ({blanks} blank lines)"),
                        Style::new().fg(p.dim),
                    )));
                } else if *blanks == 1 {
                    body.push(Line::from(Span::styled("$ ", Style::new().fg(p.accent))));
                }
                *blanks = 0;
            };
            for l in command.lines() {
                if l.trim().is_empty() {
                    blanks += 1;
                    continue;
                }
                flush_blanks(&mut blanks, &mut body);
                body.extend(hard_wrap(
                    Line::from(vec![
                        Span::styled("$ ", Style::new().fg(p.accent)),
                        Span::styled(
                            l.to_string(),
                            Style::new().fg(p.tool_command).add_modifier(Modifier::BOLD),
                        ),
                    ]),
                    inner_w,
                    &[Span::raw("  ")],
                ));
            }
            flush_blanks(&mut blanks, &mut body);
            body.push(Line::from(Span::styled(
                format!("in {cwd}"),
                Style::new().fg(p.dim),
            )));
            " Run this command? ".to_string()
        }
        ApprovalRequest::Edit { path, diff } => {
            body.extend(render_diff_lines(diff, inner_w, &app.theme, true));
            format!(" Apply this edit to {path}? ")
        }
    };
    let mut options: Vec<Line<'static>> = Vec::new();
    if let Some(reason) = &approval.reason {
        options.push(Line::from(Span::styled(
            "Tell the model why (Enter sends, Esc goes back):",
            Style::new().fg(p.fg),
        )));
        options.push(Line::from(vec![
            Span::styled("› ", Style::new().fg(p.accent)),
            Span::styled(reason.clone(), Style::new().fg(p.fg)),
        ]));
    } else {
        let key = |k: &str, text: String| {
            Line::from(vec![
                Span::styled(
                    format!("[{k}] "),
                    Style::new().fg(p.modal_key).add_modifier(Modifier::BOLD),
                ),
                Span::styled(text, Style::new().fg(p.fg)),
            ])
        };
        options.push(key("y", "Yes".into()));
        if let Some(prefix) = approval.prefix() {
            options.extend(wrap_spans(
                &key(
                    "a",
                    format!(
                        "Yes, and don't ask again for `{} …` this session",
                        // Quoted as a shell would read it: `python3 'a b.py'` is one script.
                        shlex::try_join(prefix.iter().map(String::as_str))
                            .unwrap_or_else(|_| prefix.join(" "))
                    ),
                )
                .spans,
                inner_w,
                &[],
                &[Span::raw("    ")],
            ));
        }
        options.push(key("n", "No (Esc)".into()));
        options.push(key("r", "No, and tell the model why".into()));
        if !approval.is_armed(app.now) {
            // Typed-ahead keys go to the composer until the modal arms: say so, and dim the
            // answers that do not work yet.
            for line in &mut options {
                for span in &mut line.spans {
                    span.style = Style::new().fg(p.dim);
                }
            }
            options.push(Line::from(Span::styled(
                "(keys typed now go to your message; answer in a moment)",
                Style::new().fg(p.dim),
            )));
        }
    }
    let max_body = (area.height as usize)
        .saturating_sub(options.len() + 5)
        .max(1);
    let scroll = approval.scroll.min(body.len().saturating_sub(max_body));
    let shown: Vec<Line<'static>> = body.iter().skip(scroll).take(max_body).cloned().collect();
    let hidden = body.len().saturating_sub(shown.len());
    let mut lines = shown;
    if hidden > 0 {
        lines.push(Line::from(Span::styled(
            format!("({hidden} more lines: Up/Down scroll)"),
            Style::new().fg(p.dim),
        )));
    }
    lines.push(Line::default());
    lines.extend(options);
    let height = (lines.len() as u16 + 2).min(area.height);
    let modal = Rect::new(
        area.x + (area.width - width) / 2,
        area.y + area.height.saturating_sub(height) / 2,
        width,
        height,
    );
    Clear.render(modal, buf);
    let block = Block::default()
        .borders(Borders::ALL)
        .padding(Padding::horizontal(1))
        .border_style(Style::new().fg(p.modal_border))
        .title(Span::styled(
            title,
            Style::new().fg(p.modal_title).add_modifier(Modifier::BOLD),
        ))
        .style(Style::new().fg(p.fg).bg(p.bg));
    Paragraph::new(lines).block(block).render(modal, buf);
}

fn draw_pager(app: &App, pager: &super::pager::Pager, area: Rect, buf: &mut Buffer) {
    let p = &app.theme.colors;
    let body_h = area.height.saturating_sub(2) as usize;
    let title = Line::from(vec![
        Span::styled(
            format!(" {} ", pager.title),
            Style::new()
                .fg(p.status_fg)
                .bg(p.status_bg)
                .add_modifier(Modifier::BOLD),
        ),
        Span::styled(
            format!(" {} lines", pager.lines.len()),
            Style::new().fg(p.dim),
        ),
    ]);
    buf.set_line(area.x, area.y, &title, area.width);
    for (i, line) in pager.lines.iter().skip(pager.top).take(body_h).enumerate() {
        buf.set_line(area.x, area.y + 1 + i as u16, line, area.width);
    }
    let footer = if let Some(input) = &pager.search_input {
        format!("/{input}")
    } else if let Some(m) = &pager.message {
        m.clone()
    } else {
        let end = (pager.top + body_h).min(pager.lines.len());
        format!(
            "{}-{} of {} · ↑↓ PgUp PgDn scroll · / search · n N next · q close",
            pager.top + 1,
            end,
            pager.lines.len()
        )
    };
    let line = Line::from(Span::styled(
        truncate(&footer, area.width as usize),
        Style::new().fg(p.accent),
    ));
    buf.set_line(area.x, area.y + area.height - 1, &line, area.width);
}
