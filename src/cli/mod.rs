//! The command line: clap definitions and dispatch to the frontends and subcommands.

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    0
}
