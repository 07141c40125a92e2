//! The interactive terminal UI (ratatui + crossterm), a client of the Op/Event protocol: it sends
//! `Op`s and renders `Event`s, and never calls a backend. State and drawing are pure (`App`,
//! `render`) so tests drive them over ratatui's `TestBackend`; `event_loop` wires them to a real
//! terminal. See docs/tui.md.

mod advice;
pub(crate) mod app;
mod approval;
pub mod cell;
mod clipboard;
pub(crate) mod color_depth;
mod commands;
pub(crate) mod composer;
mod event_loop;
mod file_complete;
mod highlight;
pub(crate) mod history;
mod input_reader;
mod keys;
mod launch;
pub(crate) mod markdown;
pub(crate) mod options;
pub mod pager;
mod print_exit;
pub mod render;
mod resume_view;
pub(crate) mod sessions;
pub(crate) mod slash;
pub mod status;
mod terminal;
pub(crate) mod theme;
pub(crate) mod transcript;
pub(crate) mod wrap;

pub use app::{App, Effect, Popup};
pub use color_depth::ColorDepth;
pub use event_loop::run;
pub use launch::{LaunchArgs, launch};
pub use options::{ExpertNames, TuiOptions};
pub use print_exit::print_transcript;
pub use render::render;
pub use theme::Theme;
