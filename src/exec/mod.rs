//! Headless mode (`baton --exec`): one turn to completion, answer on stdout, events as JSON Lines.
//!
//! Never waits on a terminal: the prompt comes from argv or piped stdin, approvals are declined
//! (policy `never` unless set), and the run is bounded by `--max-turns` and `--timeout`. The
//! answer is printed the moment the turn completes; the summary hop (B2) is then awaited only
//! to save it in the session before the process exits.

mod output;
mod prompt;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cli::exit;
use crate::cli::setup;
use crate::config::Config;
use crate::protocol::{Event, Op, TurnStatus};
use output::Output;

/// What `--exec` was asked to do, besides the configuration.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    /// The prompt; `None` or `-` = read stdin.
    pub prompt: Option<String>,
    pub json: bool,
    /// `-o FILE`: also write the last answer here.
    pub output: Option<PathBuf>,
    pub resume: Option<String>,
}

/// Runs one headless turn and returns the exit code.
pub async fn run(opts: ExecOptions, config: &Config) -> i32 {
    let text = match prompt::read(opts.prompt.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("baton: {e}");
            return exit::USAGE;
        }
    };
    let prepared = setup::build_backend(config).and_then(|backend| {
        let agent = setup::agent_config(config, true)?;
        let (file, restored) =
            setup::open_session(config, backend.as_ref(), opts.resume.as_deref())?;
        Ok((backend, agent, file, restored))
    });
    let (backend, agent_cfg, file, restored) = match prepared {
        Ok(p) => p,
        Err(e) => {
            eprintln!("baton: {e}");
            return exit::USAGE;
        }
    };
    let tools = crate::agent::basic_tools::basic_registry();
    let mut handle = crate::agent::spawn_agent(agent_cfg, backend, tools, file, restored);
    let out = Output::new(opts.json);

    let deadline = config
        .timeout_secs
        .map(|s| Instant::now() + Duration::from_secs(s));
    let _ = handle.ops.send(Op::UserTurn { text });

    let mut code: Option<i32> = None;
    let mut interrupted_by_user = false;
    let mut timed_out = false;
    let mut shutting_down = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let until_deadline = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let event = tokio::select! {
            ev = handle.events.recv() => ev,
            _ = &mut ctrl_c, if !interrupted_by_user => {
                interrupted_by_user = true;
                out.note("interrupted: stopping the turn and saving the session");
                let _ = handle.ops.send(Op::Interrupt);
                if shutting_down { return code.unwrap_or(exit::INTERRUPTED); }
                continue;
            }
            _ = until_deadline, if !timed_out => {
                timed_out = true;
                if shutting_down {
                    // The answer is out; an unsaved summary is made by the next turn that needs it.
                    out.note("timeout while saving the summary; the next turn will make it");
                    return code.unwrap_or(exit::OK);
                }
                out.note(&format!("--timeout {} s reached: stopping the turn", config.timeout_secs.unwrap_or(0)));
                let _ = handle.ops.send(Op::Interrupt);
                continue;
            }
        };
        let Some(event) = event else {
            return code.unwrap_or(exit::AGENT_ERROR);
        };
        out.event(&event);
        match &event {
            Event::TurnCompleted { status, answer, .. } if code.is_none() => {
                if let Some(answer) = answer {
                    out.answer(answer);
                    if let Some(path) = &opts.output
                        && let Err(e) = std::fs::write(path, answer)
                    {
                        eprintln!("baton: cannot write {}: {e}", path.display());
                        code = Some(exit::AGENT_ERROR);
                    }
                }
                code = code.or(Some(match status {
                    TurnStatus::Done => exit::OK,
                    TurnStatus::Error => exit::AGENT_ERROR,
                    TurnStatus::LimitReached => exit::LIMIT,
                    TurnStatus::Interrupted if timed_out => exit::LIMIT,
                    TurnStatus::Interrupted => exit::INTERRUPTED,
                }));
                shutting_down = true;
                let _ = handle.ops.send(Op::Shutdown);
            }
            Event::ShutdownComplete => return code.unwrap_or(exit::AGENT_ERROR),
            _ => {}
        }
    }
}
