//! Headless mode (`baton --exec`): one turn to completion, answer on stdout, events as JSON Lines.
