//! Terminal setup and restore: raw mode, alternate screen, bracketed paste, mouse capture,
//! focus reports (for notifications), keyboard enhancement (Shift+Enter); restored on exit, on panic (hook) and on SIGTERM (the event
//! loop's signal branch). Restoring twice is harmless.

use std::io::{Write, stdout};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};

use crossterm::event::{
    DisableBracketedPaste, DisableFocusChange, DisableMouseCapture, EnableBracketedPaste,
    EnableFocusChange, EnableMouseCapture, KeyboardEnhancementFlags, PopKeyboardEnhancementFlags,
    PushKeyboardEnhancementFlags,
};
use crossterm::terminal::{
    EnterAlternateScreen, LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use crossterm::{cursor, execute};

static ACTIVE: AtomicBool = AtomicBool::new(false);
static KEYBOARD_FLAGS: AtomicBool = AtomicBool::new(false);
static MOUSE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Switches the terminal into the UI's mode.
pub fn enter(mouse_capture: bool) -> std::io::Result<()> {
    enable_raw_mode()?;
    ACTIVE.store(true, Ordering::SeqCst);
    let mut out = stdout();
    execute!(
        out,
        EnterAlternateScreen,
        EnableBracketedPaste,
        EnableFocusChange,
        cursor::Hide
    )?;
    set_mouse_capture(mouse_capture)?;
    // Shift+Enter is only distinguishable with the kitty keyboard protocol; terminals without it
    // still have Ctrl+J and a trailing backslash for new lines.
    if crossterm::terminal::supports_keyboard_enhancement().unwrap_or(false) {
        execute!(
            out,
            PushKeyboardEnhancementFlags(KeyboardEnhancementFlags::DISAMBIGUATE_ESCAPE_CODES)
        )?;
        KEYBOARD_FLAGS.store(true, Ordering::SeqCst);
    }
    Ok(())
}

pub fn set_mouse_capture(on: bool) -> std::io::Result<()> {
    let mut out = stdout();
    if on {
        execute!(out, EnableMouseCapture)?;
    } else {
        execute!(out, DisableMouseCapture)?;
    }
    MOUSE.store(on, Ordering::SeqCst);
    Ok(())
}

/// Puts the terminal back as it was. Safe to call more than once and from the panic hook.
pub fn restore() {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return;
    }
    let mut out = stdout();
    if KEYBOARD_FLAGS.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, PopKeyboardEnhancementFlags);
    }
    if MOUSE.swap(false, Ordering::SeqCst) {
        let _ = execute!(out, DisableMouseCapture);
    }
    let _ = execute!(
        out,
        DisableBracketedPaste,
        DisableFocusChange,
        LeaveAlternateScreen,
        cursor::Show
    );
    let _ = disable_raw_mode();
    let _ = out.flush();
}

/// A desktop notification where the terminal has them (OSC 9: iTerm2, WezTerm, Windows
/// Terminal, Ghostty, kitty), then a bell for the others (and for tmux, which flags the window).
/// Terminals that do not know OSC 9 swallow it whole.
pub fn notify(text: &str) -> std::io::Result<()> {
    let clean = crate::protocol::terminal_safe_line(text);
    let mut out = stdout();
    write!(out, "\x1b]9;{clean}\x07\x07")?;
    out.flush()
}

/// Restores the terminal before the panic message is printed, so it is readable.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}
