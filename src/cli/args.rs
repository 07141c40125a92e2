//! The clap definitions of the command line. Every root option is also a config key and a
//! `BATON_*` variable (docs/configuration.md); `flag_settings` turns the options given into a
//! settings layer for `config::load`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{ConfigError, Settings};
use crate::protocol::{ApprovalPolicy, DeviceChoice, Expert, Mode, ReasoningEffort, SandboxMode};

const AFTER_HELP: &str = "\
Examples:
  baton                                   interactive session in the current folder
  baton --exec \"fix the failing test\"     one headless turn; answer on stdout
  git diff | baton --exec - --json        prompt from stdin, events as JSON Lines
  git diff | baton --exec \"review this\" -  the prompt, with stdin appended
  baton --exec --resume last \"and now?\"   continue the newest saved session
  baton doctor                            check endpoint, models, profile and config

Configuration: ~/.config/baton/config.toml, then .baton/config.toml in the project, then
BATON_* environment variables, then flags (each later one wins). See docs/configuration.md.

Exit codes: 0 done, 1 model or agent error, 2 usage or config error, 3 a limit was reached
(--max-turns, --timeout), 4 every tool call was declined (--exec needs --approval
auto-edit|full-auto to let them run), 130 interrupted (143 SIGTERM, 129 SIGHUP: the turn is
stopped and saved the same way).";

/// baton: a terminal coding agent on a Mixture-of-LoRA model.
#[derive(Debug, Parser)]
#[command(
    name = "baton",
    version,
    about = "A terminal coding agent on a Mixture-of-LoRA model",
    long_about = "A terminal coding agent on a Mixture-of-LoRA model.\n\nEvery turn is routed \
                  to one of four LoRA experts (L0 chat, L1 agent work, L2 code and terminal, L3 \
                  generative UI), answered with tools in your workspace, and summarized in the \
                  background so the other experts can follow the conversation.",
    after_help = AFTER_HELP
)]
pub struct Cli {
    /// The first message (interactive), or the task for --exec ('-' = read stdin).
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,

    /// With --exec after a PROMPT: '-' appends piped stdin to it as a <stdin> block
    /// (`git diff | baton --exec "review this" -`). Without it stdin is left alone.
    #[arg(value_name = "-", value_parser = ["-"], requires = "exec", help_heading = "Headless")]
    pub stdin: Option<String>,

    /// Run one turn headless: answer on stdout, progress on stderr, never waits on a terminal.
    #[arg(short = 'e', long, help_heading = "Headless")]
    pub exec: bool,

    /// With --exec: print events as JSON Lines on stdout instead (docs/events.md).
    #[arg(long, requires = "exec", help_heading = "Headless")]
    pub json: bool,

    /// With --exec: end without the summary hop (a later turn that needs the summary makes
    /// it); for runs nobody resumes, such as eval trials.
    #[arg(long, requires = "exec", help_heading = "Headless")]
    pub defer_summary: bool,

    /// With --exec: also write the last answer to FILE.
    #[arg(
        short = 'o',
        long = "output-last-message",
        value_name = "FILE",
        requires = "exec",
        help_heading = "Headless"
    )]
    pub output: Option<PathBuf>,

    /// Colour theme of the interactive UI: dark, light, high-contrast, or a user theme name.
    #[arg(long, value_name = "NAME", help_heading = "Interface")]
    pub theme: Option<String>,

    /// No colours in the interactive UI, and NO_COLOR=1 for commands (also when NO_COLOR is set).
    #[arg(long, help_heading = "Interface")]
    pub no_color: bool,

    /// Run no hook command (hooks.json) in this run.
    #[arg(long)]
    pub no_hooks: bool,

    #[command(flatten)]
    pub common: CommonArgs,

    #[command(flatten)]
    pub settings: SettingArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Options shared by the root command and the subcommands that talk to a backend.
#[derive(Debug, Clone, Default, Args)]
pub struct CommonArgs {
    /// OpenAI-compatible base URL, ending in /v1 (e.g. http://127.0.0.1:8000/v1).
    #[arg(long, value_name = "URL", global = true, help_heading = "Model")]
    pub endpoint: Option<String>,

    /// Name of the environment variable holding the API key [default: BATON_API_KEY].
    #[arg(long, value_name = "VAR", global = true, help_heading = "Model")]
    pub api_key_env: Option<String>,

    /// mol: route between L0–L3 here; proxy: a server that routes; single: one plain model.
    #[arg(long, value_enum, global = true, help_heading = "Model")]
    pub mode: Option<Mode>,

    /// Model name (proxy and single modes).
    #[arg(long, value_name = "NAME", global = true, help_heading = "Model")]
    pub model: Option<String>,

    /// MoL profile folder (lora.md, route.md, intro.md, summary.md) [default: built in].
    #[arg(long, value_name = "DIR", global = true, help_heading = "Model")]
    pub profile: Option<PathBuf>,

    /// Pin an expert (L0, L1, L2 or L3): skip routing.
    #[arg(long, value_name = "LABEL", global = true, help_heading = "Model")]
    pub expert: Option<Expert>,

    /// Reasoning effort of answers. In mol mode none turns thinking off; any other value is
    /// sent as asked, with thinking on (docs/modes.md).
    #[arg(long, value_enum, global = true, help_heading = "Model")]
    pub reasoning: Option<ReasoningEffort>,

    /// Run the local engine on the model folder ROOT (base/ and loras/L0..L3) instead of an endpoint.
    #[arg(long, value_name = "ROOT", global = true, help_heading = "Model")]
    pub local: Option<PathBuf>,

    /// Device of the local engine.
    #[arg(long, value_enum, global = true, help_heading = "Model")]
    pub device: Option<DeviceChoice>,

    /// Workspace folder [default: the current folder].
    #[arg(
        short = 'C',
        long = "cd",
        value_name = "DIR",
        global = true,
        help_heading = "Workspace"
    )]
    pub cd: Option<PathBuf>,

    /// Accept a workspace of `/`, your home folder (or a folder above it) or the system's temp
    /// folder, which are refused otherwise (commands could write your dotfiles and sockets).
    #[arg(long, global = true, help_heading = "Workspace")]
    pub allow_broad_workspace: bool,

    /// When to ask before tools act [default: ask; never with --exec].
    #[arg(
        long,
        visible_alias = "ask-for-approval",
        value_enum,
        global = true,
        help_heading = "Workspace"
    )]
    pub approval: Option<ApprovalPolicy>,

    /// What commands may touch [default: workspace-write].
    #[arg(long, value_enum, global = true, help_heading = "Workspace")]
    pub sandbox: Option<SandboxMode>,

    /// Where session files go [default: ~/.local/share/baton/sessions].
    #[arg(long, value_name = "DIR", global = true, help_heading = "Sessions")]
    pub session_dir: Option<PathBuf>,

    /// Continue a saved session: its id (or a unique prefix), or `last` (the newest of this
    /// workspace).
    #[arg(long, value_name = "ID", global = true, help_heading = "Sessions")]
    pub resume: Option<String>,

    /// Every workspace, not only this one: `--resume last` takes the newest of all, `baton
    /// sessions` lists all.
    #[arg(long, global = true, help_heading = "Sessions")]
    pub all: bool,

    /// Model round trips allowed per turn (exit 3 when reached).
    #[arg(long, value_name = "N", global = true, help_heading = "Limits")]
    pub max_turns: Option<String>,

    /// Seconds allowed for the whole --exec run (exit 3 when reached).
    #[arg(long, value_name = "SECS", global = true, help_heading = "Limits")]
    pub timeout: Option<String>,
}

/// The settings that are flags of the root command only: `--network`, `--write`, the sampling
/// options, … (the config keys that had no flag). Not `global`: `baton sandbox` and
/// `baton engine generate` have flags of the same names that mean the same thing there.
/// Numbers and lists stay text here and go through the config parser in `flag_settings`, so a
/// bad value reads the same as in config.toml.
#[derive(Debug, Clone, Default, Args)]
pub struct SettingArgs {
    /// Commands may use the network (key `network`, `[sandbox] network`).
    #[arg(long, help_heading = "Workspace")]
    pub network: bool,

    /// Run commands in a login shell (`bash -lc`: reads the shell profile; key `login_shell`).
    #[arg(long, help_heading = "Workspace")]
    pub login_shell: bool,

    /// Another folder commands may write under workspace-write (repeatable; key `writable`).
    #[arg(
        long = "write",
        visible_alias = "writable",
        value_name = "DIR",
        help_heading = "Workspace"
    )]
    pub write: Vec<String>,

    /// A command prefix that runs without asking, e.g. "cargo test" (repeatable; key `allow`).
    #[arg(long, value_name = "PREFIX", help_heading = "Workspace")]
    pub allow: Vec<String>,

    /// Live processes one command may have [default: 1024].
    #[arg(long, value_name = "N", help_heading = "Workspace")]
    pub max_processes: Option<String>,

    /// What builds the sandbox: bubblewrap, or the weaker landlock (key `sandbox_backend`).
    #[arg(long, value_name = "BACKEND", help_heading = "Workspace")]
    pub sandbox_backend: Option<String>,

    /// Memory one command may use, in MiB [default: half of RAM].
    #[arg(long, value_name = "MIB", help_heading = "Workspace")]
    pub max_memory: Option<String>,

    /// An environment variable commands get although it looks like a secret (repeatable).
    #[arg(long, value_name = "NAME", help_heading = "Workspace")]
    pub env_keep: Vec<String>,

    /// An environment variable commands never get (repeatable).
    #[arg(long, value_name = "NAME", help_heading = "Workspace")]
    pub env_drop: Vec<String>,

    /// The tools offered to the model, comma-separated (e.g. read_file,list_dir,shell).
    #[arg(long, value_name = "NAMES", help_heading = "Model")]
    pub tools: Option<String>,

    /// A file whose text replaces the built-in system prompt (of every expert without its own).
    #[arg(long, value_name = "FILE", help_heading = "Model")]
    pub system_prompt: Option<String>,

    /// The tools L0 (chat) is offered, comma-separated [default: handoff,mcp].
    #[arg(long, value_name = "NAMES", help_heading = "Experts")]
    pub l0_tools: Option<String>,

    /// The tools L1 (long tool-using tasks) is offered [default: all].
    #[arg(long, value_name = "NAMES", help_heading = "Experts")]
    pub l1_tools: Option<String>,

    /// The tools L2 (coding) is offered [default: all].
    #[arg(long, value_name = "NAMES", help_heading = "Experts")]
    pub l2_tools: Option<String>,

    /// The tools L3 (generative UI) is offered [default: all].
    #[arg(long, value_name = "NAMES", help_heading = "Experts")]
    pub l3_tools: Option<String>,

    /// A file whose text is L0's system prompt.
    #[arg(long, value_name = "FILE", help_heading = "Experts")]
    pub l0_system_prompt: Option<String>,

    /// A file whose text is L1's system prompt.
    #[arg(long, value_name = "FILE", help_heading = "Experts")]
    pub l1_system_prompt: Option<String>,

    /// A file whose text is L2's system prompt.
    #[arg(long, value_name = "FILE", help_heading = "Experts")]
    pub l2_system_prompt: Option<String>,

    /// A file whose text is L3's system prompt.
    #[arg(long, value_name = "FILE", help_heading = "Experts")]
    pub l3_system_prompt: Option<String>,

    /// Answer sampling temperature, 0–2 [default: 0].
    #[arg(long, value_name = "T", help_heading = "Sampling")]
    pub temperature: Option<String>,

    /// Answer nucleus sampling, (0, 1] [default: the server's].
    #[arg(long, value_name = "P", help_heading = "Sampling")]
    pub top_p: Option<String>,

    /// Answer sampling seed.
    #[arg(long, value_name = "N", help_heading = "Sampling")]
    pub seed: Option<String>,

    /// Answer length limit in tokens [default: the server's].
    #[arg(long, value_name = "N", help_heading = "Sampling")]
    pub max_tokens: Option<String>,

    /// The experts' context window in tokens [default: what /models reports, else 131072].
    #[arg(long, value_name = "TOKENS", help_heading = "Context")]
    pub context_window: Option<String>,

    /// Compact an expert's view past this fraction of the window (0.85 or 85%).
    #[arg(long, value_name = "FRACTION", help_heading = "Context")]
    pub compact_at: Option<String>,

    /// Seconds to establish the connection to the endpoint [default: 10].
    #[arg(long, value_name = "SECS", help_heading = "Model")]
    pub connect_timeout: Option<String>,

    /// Seconds an endpoint may take to start answering a hop [default: 600].
    #[arg(long, value_name = "SECS", help_heading = "Model")]
    pub request_timeout: Option<String>,

    /// Longest silence, in seconds, inside a streamed answer [default: 180].
    #[arg(long, value_name = "SECS", help_heading = "Model")]
    pub idle_timeout: Option<String>,

    /// How the route label is constrained: choice (vLLM) or regex (SGLang).
    #[arg(long, value_name = "KIND", help_heading = "Model")]
    pub route_constraint: Option<String>,

    /// Send the answer hop with the route hop, to the expert the route will probably pick:
    /// off, sticky (the previous turn's expert) or always (sticky, else the default expert).
    #[arg(long, value_name = "WHEN", help_heading = "Model")]
    pub speculate: Option<String>,

    /// A short follow-up ("do the same for February") stays with the expert that answered the
    /// previous request, without a route hop (sticky, the default), or is routed (route).
    #[arg(long, value_name = "HOW", help_heading = "Model")]
    pub follow_ups: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List saved sessions, newest first.
    Sessions(SessionsArgs),
    /// Check the endpoint, its models, the profile and the configuration.
    Doctor,
    /// Run a command inside baton's sandbox (the same path the shell tool uses).
    Sandbox(super::sandbox::SandboxArgs),
    /// Restore the working tree to the last checkpoint baton took before a turn's changes.
    Undo(super::undo::UndoArgs),
    /// Trust a folder's .baton/config.toml to lower safety settings (sandbox, approval,
    /// network, credentials); --list, --remove PATH.
    Trust(super::trust::TrustArgs),
    /// Serve the MoL loop as an OpenAI-compatible endpoint (a drop-in for the reference
    /// harness's proxy) in front of --endpoint or --local.
    Serve(super::serve::ServeArgs),
    /// MCP servers: list, get NAME, add NAME -- CMD… | add NAME --url URL, remove NAME.
    Mcp(super::mcp::McpArgs),
    /// Run Terminal-Bench / Harbor format tasks with an agent and score them.
    Eval(super::eval::EvalArgs),
    /// Turn a `baton --exec --json` event stream into an ATIF v1.7 trajectory (what `baton
    /// eval` writes per trial; Harbor's adapter runs it in the task container).
    Trajectory(super::trajectory::TrajectoryArgs),
    /// Serve the Agent Client Protocol on stdin/stdout, for editors (Zed, JetBrains, Neovim)
    /// and harnesses (docs/acp.md).
    Acp,
    /// The local engine's tools: generate text, route a request (scripting and debugging).
    Engine(crate::cli::engine::EngineArgs),
    /// Print a shell completion script (e.g. `baton completions bash > /etc/bash_completion.d/baton`).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

#[derive(Debug, Clone, Args)]
pub struct SessionsArgs {
    /// Show at most N sessions.
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,

    /// Print the sessions as one JSON array (id, name, workspace, created, last_activity,
    /// turns, first_message, path).
    #[arg(long)]
    pub json: bool,
}

/// The global options `baton sessions` has no use for: they still parse there (a shell alias
/// may add them to every call) but stay out of its `--help`, which is about listing sessions.
const NOT_FOR_SESSIONS: &[&str] = &[
    "endpoint",
    "api_key_env",
    "mode",
    "model",
    "profile",
    "expert",
    "reasoning",
    "local",
    "device",
    "approval",
    "sandbox",
    "resume",
    "max_turns",
    "timeout",
];

/// The command line as parsed: `Cli`'s definition, with the global model and workspace options
/// hidden from the help of the subcommands they do not concern.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    let cmd = Cli::command();
    // A subcommand that has an option of a global's id keeps its own copy (clap copies a global
    // only where it is missing): a hidden, local copy parses the same and stays out of --help.
    let hidden: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| NOT_FOR_SESSIONS.contains(&a.get_id().as_str()))
        .map(|a| a.clone().global(false).hide(true))
        .collect();
    // `baton trajectory` reads a file; only `--session-dir` of the globals matters to it.
    cmd.mut_subcommand("sessions", |sub| sub.args(hidden.clone()))
        .mut_subcommand("trajectory", |sub| sub.args(hidden))
}

/// `baton sandbox …` (the subcommand first), parsed by a command that has only its options
/// and the global ones: building all of `Cli` takes about half a millisecond, paid by every
/// sandboxed command run this way. `None` for any other command line, and wherever this one
/// is not a plain success (help, an error): [`parse`] then reads it, so what is printed stays
/// the same.
pub fn parse_sandbox(
    argv: &[std::ffi::OsString],
) -> Option<(CommonArgs, super::sandbox::SandboxArgs)> {
    use clap::FromArgMatches;
    if argv.get(1).is_none_or(|a| a != "sandbox") {
        return None;
    }
    // `baton sandbox -- CMD…`, the form scripts use: no option to read, nothing for clap to do.
    if argv.get(2).is_some_and(|a| a == "--") && argv.len() > 3 {
        let command: Option<Vec<String>> = argv[3..]
            .iter()
            .map(|a| a.to_str().map(str::to_owned))
            .collect();
        return Some((
            CommonArgs::default(),
            super::sandbox::SandboxArgs {
                mode: SandboxMode::default(),
                network: false,
                write: Vec::new(),
                workspace: None,
                allow_broad_workspace: false,
                backend: None,
                max_memory: None,
                probe: false,
                command: command?,
            },
        ));
    }
    let cmd = CommonArgs::augment_args(clap::Command::new("baton")).subcommand(
        super::sandbox::SandboxArgs::augment_args(clap::Command::new("sandbox")),
    );
    let matches = cmd.try_get_matches_from(argv).ok()?;
    let ("sandbox", sub) = matches.subcommand()? else {
        return None;
    };
    let common = CommonArgs::from_arg_matches(&matches).ok()?;
    let args = super::sandbox::SandboxArgs::from_arg_matches(sub).ok()?;
    Some((common, args))
}

/// Parses the process's arguments with `command()`.
pub fn parse() -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut cmd = command();
    let matches = cmd.try_get_matches_from_mut(std::env::args_os())?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// The settings layer the flags make. Flag values go through the same parser as config values.
pub fn flag_settings(args: &CommonArgs, more: &SettingArgs) -> Result<Settings, ConfigError> {
    let mut s = Settings {
        mode: args.mode,
        profile: args.profile.clone(),
        expert: args.expert,
        reasoning: args.reasoning,
        local: args.local.clone(),
        device: args.device,
        workspace: args.cd.clone(),
        approval: args.approval,
        sandbox: args.sandbox,
        session_dir: args.session_dir.clone(),
        ..Settings::default()
    };
    if let Some(dir) = &args.cd
        && let Some(reason) = crate::config::not_a_folder(dir)
    {
        return Err(ConfigError {
            source_name: "flag -C/--cd".into(),
            key: "workspace".into(),
            reason,
        });
    }
    let text = [
        ("endpoint", "--endpoint", &args.endpoint),
        ("api_key_env", "--api-key-env", &args.api_key_env),
        ("model", "--model", &args.model),
        ("max_turns", "--max-turns", &args.max_turns),
        ("timeout", "--timeout", &args.timeout),
    ];
    for (key, flag, value) in text {
        if let Some(v) = value {
            s.set(key, v, &format!("flag {flag}"), None)?;
        }
    }
    let more_text = [
        ("max_processes", "--max-processes", &more.max_processes),
        (
            "sandbox_backend",
            "--sandbox-backend",
            &more.sandbox_backend,
        ),
        ("max_memory", "--max-memory", &more.max_memory),
        ("tools", "--tools", &more.tools),
        ("system_prompt", "--system-prompt", &more.system_prompt),
        ("l0_tools", "--l0-tools", &more.l0_tools),
        ("l1_tools", "--l1-tools", &more.l1_tools),
        ("l2_tools", "--l2-tools", &more.l2_tools),
        ("l3_tools", "--l3-tools", &more.l3_tools),
        (
            "l0_system_prompt",
            "--l0-system-prompt",
            &more.l0_system_prompt,
        ),
        (
            "l1_system_prompt",
            "--l1-system-prompt",
            &more.l1_system_prompt,
        ),
        (
            "l2_system_prompt",
            "--l2-system-prompt",
            &more.l2_system_prompt,
        ),
        (
            "l3_system_prompt",
            "--l3-system-prompt",
            &more.l3_system_prompt,
        ),
        ("temperature", "--temperature", &more.temperature),
        ("top_p", "--top-p", &more.top_p),
        ("seed", "--seed", &more.seed),
        ("max_tokens", "--max-tokens", &more.max_tokens),
        ("context_window", "--context-window", &more.context_window),
        (
            "connect_timeout",
            "--connect-timeout",
            &more.connect_timeout,
        ),
        (
            "request_timeout",
            "--request-timeout",
            &more.request_timeout,
        ),
        ("idle_timeout", "--idle-timeout", &more.idle_timeout),
        ("compact_at", "--compact-at", &more.compact_at),
        (
            "route_constraint",
            "--route-constraint",
            &more.route_constraint,
        ),
        ("speculate", "--speculate", &more.speculate),
        ("follow_ups", "--follow-ups", &more.follow_ups),
    ];
    for (key, flag, value) in more_text {
        if let Some(v) = value {
            s.set(key, v, &format!("flag {flag}"), None)?;
        }
    }
    if more.network {
        s.set("network", "true", "flag --network", None)?;
    }
    if more.login_shell {
        s.set("login_shell", "true", "flag --login-shell", None)?;
    }
    // Lists travel as newline-ended lines, as TOML arrays do, so a comma inside one value
    // (a folder name, a quoted prefix) is not taken for a separator.
    let lists = [
        ("writable", "--write", &more.write),
        ("allow", "--allow", &more.allow),
        ("env_keep", "--env-keep", &more.env_keep),
        ("env_drop", "--env-drop", &more.env_drop),
    ];
    for (key, flag, values) in lists {
        if !values.is_empty() {
            s.set(
                key,
                &format!("{}\n", values.join("\n")),
                &format!("flag {flag}"),
                None,
            )?;
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn settings(argv: &[&str]) -> Result<Settings, ConfigError> {
        let cli = Cli::try_parse_from(argv).unwrap();
        flag_settings(&cli.common, &cli.settings)
    }

    #[test]
    fn the_sandbox_fast_path_reads_what_the_full_parser_reads() {
        use clap::FromArgMatches;
        let cases: &[&[&str]] = &[
            &["baton", "sandbox", "--", "true"],
            &[
                "baton", "sandbox", "--", "sh", "-c", "exit 3", "--", "--help", "-C",
            ],
            &["baton", "sandbox", "--", "--version"],
            &["baton", "sandbox", "true", "-x", "--y"],
            &[
                "baton",
                "sandbox",
                "--network",
                "--write",
                "/a",
                "--write",
                "b",
                "--",
                "ls",
            ],
            &[
                "baton",
                "sandbox",
                "--sandbox",
                "read-only",
                "-C",
                "/tmp",
                "--",
                "ls",
                "-l",
            ],
            &[
                "baton",
                "sandbox",
                "--max-memory",
                "64",
                "--sandbox-backend",
                "landlock",
                "x",
            ],
            &["baton", "sandbox", "--probe"],
            &[
                "baton",
                "sandbox",
                "--model",
                "m",
                "--endpoint",
                "http://h/v1",
                "--",
                "echo",
            ],
            &["baton", "sandbox"],
            &["baton", "sandbox", "--bogus", "--", "true"],
        ];
        for argv in cases {
            let os: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            let (common, fast) = parse_sandbox(&os).expect("the fast path takes it");
            let matches = command().try_get_matches_from(argv.iter()).unwrap();
            let cli = Cli::from_arg_matches(&matches).unwrap();
            let Some(Command::Sandbox(full)) = cli.command else {
                panic!("not a sandbox command: {argv:?}");
            };
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{argv:?}");
            assert_eq!(
                format!("{common:?}"),
                format!("{:?}", cli.common),
                "{argv:?}"
            );
        }
        // Where the fast path takes a command line at all, it reads it as the full one does.
        for argv in [
            &["baton", "sandbox", "--version"][..],
            &["baton", "sandbox", "-h", "--", "true"],
            &["baton", "sandbox", "--", "--help"],
            &["baton", "sandbox", "-C"],
            &["baton", "sandbox", "--write"],
            &["baton", "sandbox", "--all", "--resume", "last", "x"],
        ] {
            let os: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            let Some((common, fast)) = parse_sandbox(&os) else {
                continue;
            };
            let matches = command().try_get_matches_from(argv.iter()).unwrap();
            let cli = Cli::from_arg_matches(&matches).unwrap();
            let Some(Command::Sandbox(full)) = cli.command else {
                panic!("not a sandbox command: {argv:?}");
            };
            assert_eq!(format!("{fast:?}"), format!("{full:?}"), "{argv:?}");
            assert_eq!(
                format!("{common:?}"),
                format!("{:?}", cli.common),
                "{argv:?}"
            );
        }
        // What the full parser reports (help, errors) or another command is left to it.
        for argv in [
            &["baton", "sandbox", "--help"][..],
            &["baton", "sandbox", "--probe", "true"],
            &["baton", "sandbox", "--sandbox", "nonsense", "--", "true"],
            &["baton", "--exec", "sandbox"],
            &["baton", "doctor"],
            &["baton"],
        ] {
            let os: Vec<std::ffi::OsString> = argv.iter().map(Into::into).collect();
            assert!(parse_sandbox(&os).is_none(), "{argv:?}");
        }
    }

    #[test]
    fn the_setting_flags_reach_the_config_layer() {
        let s = settings(&[
            "baton",
            "--network",
            "--write",
            "/tmp/a,b",
            "--writable",
            "/tmp/c",
            "--allow",
            "cargo test",
            "--ask-for-approval",
            "full-auto",
            "--max-tokens",
            "64",
            "--temperature",
            "0.2",
            "--top-p",
            "0.9",
            "--seed",
            "7",
            "--tools",
            "read_file,list_dir",
            "--compact-at",
            "80%",
            "--context-window",
            "4096",
            "--max-processes",
            "64",
        ])
        .unwrap();
        assert_eq!(s.network, Some(true));
        // A comma inside one --write value is part of the folder name.
        assert_eq!(
            s.writable,
            Some(vec![
                Path::new("/tmp/a,b").into(),
                Path::new("/tmp/c").into()
            ])
        );
        assert_eq!(s.allow, Some(vec!["cargo test".to_string()]));
        assert_eq!(s.approval, Some(ApprovalPolicy::FullAuto));
        assert_eq!(s.max_tokens, Some(64));
        assert_eq!(s.temperature, Some(0.2));
        assert_eq!(s.top_p, Some(0.9));
        assert_eq!(s.seed, Some(7));
        assert_eq!(
            s.tools,
            Some(vec!["read_file".to_string(), "list_dir".to_string()])
        );
        assert_eq!(s.compact_at, Some(0.8));
        assert_eq!(s.context_window, Some(4096));
        assert_eq!(s.max_processes, Some(64));
        // Nothing given, nothing said: the lower layers decide.
        assert_eq!(settings(&["baton"]).unwrap(), Settings::default());
    }

    #[test]
    fn a_bad_setting_flag_is_named_like_a_config_key() {
        let e = settings(&["baton", "--temperature", "5"]).unwrap_err();
        assert_eq!(e.source_name, "flag --temperature");
        assert_eq!(e.key, "temperature");
        let e = settings(&["baton", "--cd", "/nonexistent/x"]).unwrap_err();
        assert_eq!(e.source_name, "flag -C/--cd");
        assert!(e.reason.contains("folder not found"), "{e}");
    }
}
