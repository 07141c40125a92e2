//! The interactive terminal UI (ratatui + crossterm), a client of the Op/Event protocol: it sends
//! `Op`s and renders `Event`s, and never calls a backend. State and drawing are pure (`App`,
//! `render`) so tests drive them over ratatui's `TestBackend`; `event_loop` wires them to a real
//! terminal. See docs/tui.md.

mod advice;
pub mod app;
mod approval;
pub mod cell;
mod clipboard;
pub mod color_depth;
mod commands;
pub mod composer;
mod event_loop;
mod file_complete;
mod highlight;
pub mod history;
mod input_reader;
mod keys;
mod launch;
pub mod markdown;
pub mod options;
pub mod pager;
mod print_exit;
pub mod render;
mod resume_view;
pub mod sessions;
pub mod slash;
pub mod status;
mod terminal;
pub mod theme;
pub mod transcript;
pub mod wrap;

pub use app::{App, Effect, Popup};
pub use color_depth::ColorDepth;
pub use event_loop::run;
pub use launch::{LaunchArgs, launch};
pub use options::{ExpertNames, TuiOptions};
pub use print_exit::print_transcript;
pub use render::render;
pub use theme::Theme;
