//! The command line: clap definitions and dispatch to the frontends and subcommands.

// The subcommands (`doctor`, `sessions`, `engine`, `undo`, …) own stdout: their output is the
// product.
#![allow(clippy::print_stdout)]

use crate::protocol::stdio::eprintln;
mod args;
mod choices;
mod doctor;
pub mod engine;
pub mod eval;
mod mcp;
mod repl;
pub(crate) mod sandbox;
mod serve;
mod sessions;
mod trajectory;
mod trust;
pub mod undo;

pub use args::{Cli, Command, CommonArgs};

use clap::CommandFactory;

use crate::app::Frontend;

pub use crate::protocol::exit;

/// Runs the CLI and returns the process exit code. Whatever way it ends, every command its
/// shell sessions still run is killed and audited first (`end_every_session`), and what the
/// audit undid is said on stderr.
pub fn main() -> i32 {
    take_other_stop_signals_as_sigterm();
    let code = run_cli();
    for warning in crate::tool::shell::end_every_session() {
        crate::protocol::stdio::eprintln!(
            "baton: warning: {}",
            crate::protocol::terminal_safe(&warning)
        );
    }
    code
}

/// The signals whose default action ends a process, other than those each mode handles
/// itself (SIGTERM, SIGHUP, SIGINT, SIGQUIT): each is taken as SIGTERM, so that it too stops
/// the turn or the sandbox and makes the audit, instead of killing baton in the middle of a
/// command (whose audit it would skip). Programs baton starts get the default back at exec.
fn take_other_stop_signals_as_sigterm() {
    extern "C" fn as_sigterm(_: libc::c_int) {
        // SAFETY: kill(2) and getpid(2) are async-signal-safe.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGTERM);
        }
    }
    use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};
    let action = SigAction::new(
        SigHandler::Handler(as_sigterm),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [
        Signal::SIGUSR1,
        Signal::SIGUSR2,
        Signal::SIGALRM,
        Signal::SIGVTALRM,
        Signal::SIGPROF,
        Signal::SIGIO,
        Signal::SIGPWR,
        Signal::SIGXCPU,
        Signal::SIGXFSZ,
        Signal::SIGSTKFLT,
    ] {
        // SAFETY: the handler only calls async-signal-safe functions.
        let _ = unsafe { sigaction(sig, &action) };
    }
}

fn run_cli() -> i32 {
    // bubblewrap runs this binary as the sandbox's inner helper: nothing else may run first.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(code) = crate::sandbox::inner::run_if_requested(&argv) {
        return code;
    }
    crate::sandbox::inner::this_binary_is_the_helper();
    // baton's environment holds the API key for as long as it runs, and without a pid
    // namespace (`--sandbox off`, the landlock backend) a command running as the same user
    // could read it from /proc/PID/environ (or mem): a process that is not dumpable has
    // those files owned by root. Programs baton starts are dumpable again after their exec.
    // prctl(PR_SET_DUMPABLE) on this process only.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    if let Some((common, mut args)) = args::parse_sandbox(&argv) {
        init_logging();
        let flags = match args::flag_settings(&[&common.settings.given]) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("baton: {e}");
                return exit::USAGE;
            }
        };
        sandbox::take_global_flags(&mut args, flags, common.allow_broad_workspace);
        return sandbox::run(args);
    }
    let cli = match args::parse() {
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
    if prints_a_report(cli.command.as_ref()) {
        end_quietly_on_closed_stdout();
    }
    // `doctor` lists configuration mistakes among its checks instead of stopping at the first.
    let doctor = matches!(cli.command, Some(Command::Doctor));
    let mut config_problems = Vec::new();
    let flags = match cli.flag_settings() {
        Ok(f) => f,
        Err(e) if doctor => {
            config_problems.push(e.into());
            crate::config::Settings::default()
        }
        Err(e) => {
            eprintln!("baton: {e}");
            return exit::USAGE;
        }
    };
    // Subcommands that need neither the configuration nor the async runtime.
    match cli.command {
        Some(Command::Completions { shell }) => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "baton", &mut std::io::stdout());
            return exit::OK;
        }
        Some(Command::Sandbox(mut args)) => {
            sandbox::take_global_flags(&mut args, flags, cli.common.allow_broad_workspace);
            return sandbox::run(args);
        }
        Some(Command::Trust(mut args)) => {
            args.workspace = flags.workspace.clone();
            return trust::run(args);
        }
        Some(Command::Trajectory(mut args)) => {
            args.session_dir = flags.session_dir.clone();
            return trajectory::run(args);
        }
        Some(Command::Engine(args)) => return run_engine(args, &flags),
        Some(Command::Eval(mut args)) => {
            args.exec_args.extend(trial_flags(&cli.common));
            return eval::run(args);
        }
        _ => {}
    }
    let loaded = if doctor {
        crate::config::load_reporting(&flags, &mut config_problems)
    } else {
        crate::config::load(&flags)
    };
    let mut config = match loaded {
        Ok(c) => c,
        Err(e) => {
            // A value quoted from a project file is the model's to write.
            eprintln!(
                "baton: configuration error: {}",
                crate::protocol::terminal_safe(&e.to_string())
            );
            return exit::USAGE;
        }
    };
    config.no_color = cli.no_color;
    config.no_hooks = cli.no_hooks;
    config.defer_summary = cli.defer_summary;
    let resume = match resume_id(&config, &cli.common) {
        Ok(r) if cli.command.is_none() => r,
        Ok(_) => None,
        Err(e) => {
            eprintln!("baton: {e}");
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
    let allow_broad = cli.common.allow_broad_workspace;
    let code = runtime.block_on(async {
        match &cli.command {
            Some(Command::Sessions(a)) => sessions::run(&config, a, cli.common.all),
            Some(Command::Doctor) => doctor::run(&config, &config_problems).await,
            Some(Command::Serve(a)) => serve::run(&config, a).await,
            Some(Command::Mcp(a)) => mcp::run(&config, a).await,
            Some(Command::Undo(a)) => undo::run(&config.workspace, &config.session_dir, a),
            Some(Command::Acp) => serve_acp(&flags, cli.no_color, allow_broad).await,
            Some(
                Command::Completions { .. }
                | Command::Sandbox(_)
                | Command::Trust(_)
                | Command::Engine(_)
                | Command::Eval(_)
                | Command::Trajectory(_),
            ) => exit::OK,
            None if cli.exec => {
                let opts = crate::exec::ExecOptions {
                    prompt: cli.prompt.clone(),
                    append_stdin: cli.stdin.is_some(),
                    json: cli.json,
                    output: cli.output.clone(),
                    resume: resume.clone(),
                };
                let text = match crate::exec::read_prompt(&opts) {
                    Ok(t) => t,
                    Err(e) => {
                        eprintln!("baton: {e}");
                        return exit::USAGE;
                    }
                };
                // `baton --exec "/review src/"` runs a custom command as it would in the UI.
                let (commands, _) = crate::config::commands::discover_commands(&config.workspace);
                let text =
                    crate::config::commands::expand_command(&text, &commands).unwrap_or(text);
                if let Err(e) = crate::exec::check_output(&opts, &config) {
                    eprintln!("baton: {e}");
                    return exit::USAGE;
                }
                match start(
                    &config,
                    Frontend::Headless,
                    opts.resume.as_deref(),
                    allow_broad,
                ) {
                    Ok((handle, _info)) => crate::exec::run(handle, text, opts, &config).await,
                    Err(code) => code,
                }
            }
            None if interactive_terminal() => {
                let args = crate::tui::LaunchArgs {
                    prompt: cli.prompt.clone(),
                    resume: resume.clone(),
                    theme: config.theme.clone(),
                    no_color: cli.no_color,
                    config_warnings: config.warnings.clone(),
                };
                match start(
                    &config,
                    Frontend::Interactive,
                    args.resume.as_deref(),
                    allow_broad,
                ) {
                    Ok((handle, info)) => crate::tui::launch(handle, info, args).await,
                    Err(code) => code,
                }
            }
            None => match start(
                &config,
                Frontend::Interactive,
                resume.as_deref(),
                allow_broad,
            ) {
                Ok((handle, _info)) => {
                    for w in &config.warnings {
                        eprintln!("warning: {}", crate::protocol::terminal_safe(w));
                    }
                    repl::run(handle, cli.prompt.clone()).await
                }
                Err(code) => code,
            },
        }
    });
    // Background work (a hung summary, a stuck tool) must not keep a finished run alive.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    // No MCP server outlives baton, whatever the frontend left running.
    crate::tool::mcp::stop_all();
    code
}

/// The session `--resume` names. `last` is the newest of this workspace (the session module
/// decides it); with `--all` it is the newest of every workspace, resolved to its id here.
fn resume_id(
    config: &crate::config::Config,
    common: &CommonArgs,
) -> Result<Option<String>, crate::session::SessionError> {
    match common.resume.as_deref() {
        Some("last") if common.all => {
            let path = crate::session::find(&config.session_dir, "last", None)?;
            let id = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "last".into());
            Ok(Some(id))
        }
        other => Ok(other.map(str::to_string)),
    }
}

/// Starts the agent through the builder; a setup failure is printed and becomes exit 2.
fn start(
    config: &crate::config::Config,
    frontend: Frontend,
    resume: Option<&str>,
    allow_broad: bool,
) -> Result<(crate::protocol::AgentHandle, crate::protocol::AgentInfo), i32> {
    if let Err(e) = check_workspace(config, allow_broad) {
        eprintln!("baton: {e}");
        return Err(exit::USAGE);
    }
    if config.sandbox != crate::protocol::SandboxMode::Off
        && config.sandbox_backend == crate::sandbox::Backend::Landlock
    {
        eprintln!(
            "baton: WEAKER SANDBOX (backend = \"landlock\"): commands are not isolated from \
             your terminal, unix sockets, other processes, your home's secrets or outside \
             files' metadata"
        );
    }
    crate::app::start(config, frontend, resume).map_err(|e| {
        eprintln!("baton: {}", crate::protocol::terminal_safe(&e.to_string()));
        exit::USAGE
    })
}

/// Refuses a workspace too broad to be one (`/`, the home folder, the temp folder) unless
/// `--allow-broad-workspace`; the one decision is `config::workspace::check`.
fn check_workspace(
    config: &crate::config::Config,
    allow_broad: bool,
) -> Result<(), crate::config::workspace::BroadWorkspace> {
    let sandboxed = config.sandbox != crate::protocol::SandboxMode::Off;
    crate::config::workspace::check(&config.workspace, &config.writable, sandboxed, allow_broad)
}

/// `baton acp`: every ACP session gets an agent of its own, built by `app::start` with the
/// configuration of its folder (the editor's `cwd` stands in for `--cd`).
async fn serve_acp(flags: &crate::config::Settings, no_color: bool, allow_broad: bool) -> i32 {
    let flags = flags.clone();
    let factory: crate::acp::SessionFactory =
        std::sync::Arc::new(move |req: crate::acp::SessionRequest| {
            let mut flags = flags.clone();
            flags.workspace = Some(req.cwd.clone());
            let mut config =
                crate::config::load(&flags).map_err(|e| format!("configuration error: {e}"))?;
            config.no_color = no_color;
            // The editor's `cwd` is the workspace: `/` or the home folder is refused as on
            // the command line.
            check_workspace(&config, allow_broad).map_err(|e| e.to_string())?;
            if let Some(id) = &req.load {
                // Exactly this id: `--resume` also takes prefixes and `last`, an editor's
                // session id is a name, not a search.
                let known = crate::session::list(&config.session_dir)
                    .map_err(|e| e.to_string())?
                    .iter()
                    .any(|s| s.id == *id);
                if !known {
                    return Err(format!(
                        "no saved session {id} in {}",
                        config.session_dir.display()
                    ));
                }
            }
            let mut warnings = config.warnings.clone();
            if config.sandbox != crate::protocol::SandboxMode::Off
                && config.sandbox_backend == crate::sandbox::Backend::Landlock
            {
                warnings.push(
                    "WEAKER SANDBOX (backend = \"landlock\"): commands are not isolated from \
                     unix sockets, other processes, your home's secrets or outside files' \
                     metadata"
                        .into(),
                );
            }
            // The editor's servers join the configured ones (an editor's entry replaces a
            // configured one of the same name) and start like them, with the session.
            let mut editor_servers = Vec::new();
            for spec in &req.mcp_servers {
                match crate::config::mcp::from_client(spec, "the editor (ACP)") {
                    Ok(server) => editor_servers.push(server),
                    Err(e) => warnings.push(format!("the editor's MCP server {e}: not used")),
                }
            }
            crate::config::mcp::merge(&mut config.mcp_servers, editor_servers);
            let (handle, info) =
                crate::app::start(&config, Frontend::Interactive, req.load.as_deref())
                    .map_err(|e| e.to_string())?;
            Ok(crate::acp::StartedSession {
                handle,
                info,
                warnings,
            })
        });
    crate::acp::serve_stdio(factory).await
}

/// The model and limit flags given to `baton eval`, passed on to every `baton --exec` it runs
/// (the settings whose flag is marked `to_trials`).
fn trial_flags(common: &CommonArgs) -> Vec<String> {
    common
        .settings
        .given
        .iter()
        .filter_map(|(key, value)| {
            let flag = crate::config::defs::find(key)?.flag?;
            flag.to_trials.then(|| format!("--{}={value}", flag.long))
        })
        .collect()
}

/// `baton engine …` with the global `--local`, `--device` and `--profile` flags filled in.
fn run_engine(args: engine::EngineArgs, flags: &crate::config::Settings) -> i32 {
    let device = flags.device.unwrap_or_default();
    match args.with_globals(flags.local.clone(), device, flags.profile.clone()) {
        Ok(args) => engine::run(args),
        Err(e) => {
            eprintln!("{e}");
            exit::USAGE
        }
    }
}

/// The full-screen UI needs a terminal on both ends; otherwise the line REPL serves (pipes,
/// `script`, dumb terminals).
/// Subcommands whose whole job is printing to stdout (`baton sessions | head`).
fn prints_a_report(command: Option<&Command>) -> bool {
    matches!(
        command,
        Some(
            Command::Completions { .. }
                | Command::Sessions(_)
                | Command::Doctor
                | Command::Engine(_)
                | Command::Undo(_)
                | Command::Trust(_)
                | Command::Trajectory(_)
                | Command::Mcp(_)
        )
    )
}

/// A reader that stops reading (`| head`) ends a report: the default SIGPIPE action ends the
/// process quietly, as it does for `ls` or `git log`. Rust starts programs with SIGPIPE
/// ignored, which turns that into an EPIPE error and a panic inside `println!`. Only the
/// report subcommands get this: the agent frontends handle a closed pipe themselves, and must
/// not die of one raised by a child's pipe.
fn end_quietly_on_closed_stdout() {
    // SAFETY: setting a signal's disposition to the default has no preconditions; it runs
    // before any thread of ours starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn interactive_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal()
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
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
