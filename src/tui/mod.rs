//! The interactive terminal UI (ratatui), a client of the Op/Event protocol.
