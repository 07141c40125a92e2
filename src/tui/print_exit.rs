//! After the UI closes, the whole conversation is printed to the normal screen, so it stays in the
//! terminal's own scrollback (searchable, selectable) — the alternate screen alone would lose it.
//! Every span passes `protocol::terminal_safe_line` on the way out.

use std::io::Write;

use crossterm::queue;
use crossterm::style::{
    Attribute, Color as CtColor, Print, ResetColor, SetAttribute, SetBackgroundColor,
    SetForegroundColor,
};
use ratatui::style::{Color, Modifier};

use super::app::App;
use crate::protocol::terminal_safe_line;

fn to_crossterm(c: Color) -> Option<CtColor> {
    Some(match c {
        Color::Reset => return None,
        Color::Black => CtColor::Black,
        Color::Red => CtColor::DarkRed,
        Color::Green => CtColor::DarkGreen,
        Color::Yellow => CtColor::DarkYellow,
        Color::Blue => CtColor::DarkBlue,
        Color::Magenta => CtColor::DarkMagenta,
        Color::Cyan => CtColor::DarkCyan,
        Color::Gray => CtColor::Grey,
        Color::DarkGray => CtColor::DarkGrey,
        Color::LightRed => CtColor::Red,
        Color::LightGreen => CtColor::Green,
        Color::LightYellow => CtColor::Yellow,
        Color::LightBlue => CtColor::Blue,
        Color::LightMagenta => CtColor::Magenta,
        Color::LightCyan => CtColor::Cyan,
        Color::White => CtColor::White,
        Color::Rgb(r, g, b) => CtColor::Rgb { r, g, b },
        Color::Indexed(i) => CtColor::AnsiValue(i),
    })
}

/// Writes every cell of the transcript at `width`, styled unless colours are off.
pub fn print_transcript(app: &App, width: u16, out: &mut impl Write) -> std::io::Result<()> {
    let ctx = app.ctx();
    let plain = app.theme.no_color;
    for cell in &app.transcript.cells {
        for line in cell.lines(width, &ctx).iter() {
            for span in &line.spans {
                let style = line.style.patch(span.style);
                if !plain {
                    if let Some(fg) = style.fg.and_then(to_crossterm) {
                        queue!(out, SetForegroundColor(fg))?;
                    }
                    if let Some(bg) = style.bg.and_then(to_crossterm) {
                        queue!(out, SetBackgroundColor(bg))?;
                    }
                    if style.add_modifier.contains(Modifier::BOLD) {
                        queue!(out, SetAttribute(Attribute::Bold))?;
                    }
                    if style.add_modifier.contains(Modifier::ITALIC) {
                        queue!(out, SetAttribute(Attribute::Italic))?;
                    }
                }
                // Spans hold model and command text as it came (the live UI draws it through
                // ratatui's buffer, this goes to the terminal raw): nothing in it may act.
                queue!(out, Print(terminal_safe_line(span.content.as_ref())))?;
                if !plain {
                    queue!(out, SetAttribute(Attribute::Reset), ResetColor)?;
                }
            }
            queue!(out, Print("\r\n"))?;
        }
        queue!(out, Print("\r\n"))?;
    }
    out.flush()
}
