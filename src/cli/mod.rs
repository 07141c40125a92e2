//! The command line: clap definitions and dispatch to the frontends and subcommands.

mod args;
mod doctor;
mod repl;
mod sessions;
pub mod setup;

pub use args::{Cli, Command, CommonArgs};

use clap::{CommandFactory, Parser};

/// Exit codes (README, docs/modes.md).
pub mod exit {
    pub const OK: i32 = 0;
    pub const AGENT_ERROR: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const LIMIT: i32 = 3;
    pub const INTERRUPTED: i32 = 130;
}

/// Runs the CLI and returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
        }
    };
    init_logging();
    if let Some(Command::Completions { shell }) = &cli.command {
        let mut cmd = Cli::command();
        clap_complete::generate(*shell, &mut cmd, "baton", &mut std::io::stdout());
        return exit::OK;
    }
    let flags = match args::flag_settings(&cli.common) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("baton: {e}");
            return exit::USAGE;
        }
    };
    let config = match crate::config::load(&flags) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("baton: configuration error: {e}");
            return exit::USAGE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("baton: cannot start the async runtime: {e}");
            return exit::AGENT_ERROR;
        }
    };
    let code = runtime.block_on(async {
        match &cli.command {
            Some(Command::Sessions(a)) => sessions::run(&config, a),
            Some(Command::Doctor) => doctor::run(&config).await,
            Some(Command::Completions { .. }) => exit::OK,
            None if cli.exec => {
                let opts = crate::exec::ExecOptions {
                    prompt: cli.prompt.clone(),
                    json: cli.json,
                    output: cli.output.clone(),
                    resume: cli.common.resume.clone(),
                };
                crate::exec::run(opts, &config).await
            }
            None => repl::run(&config, cli.prompt.clone(), cli.common.resume.clone()).await,
        }
    });
    // Background work (a hung summary, a stuck tool) must not keep a finished run alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    code
}

/// Logs go to stderr, off unless `BATON_LOG` asks (e.g. `BATON_LOG=debug`).
fn init_logging() {
    if let Ok(filter) = std::env::var("BATON_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .try_init();
    }
}
