//! The clap definitions of the command line. Every root option is also a config key and a
//! `BATON_*` variable (docs/configuration.md); `flag_settings` turns the options given into a
//! settings layer for `config::load`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{ConfigError, Settings, defs};
use crate::protocol::SandboxMode;

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

    /// No colours in the interactive UI, and NO_COLOR=1 for commands (also when NO_COLOR is set).
    #[arg(long, help_heading = "Interface")]
    pub no_color: bool,

    /// Run no hook command (hooks.json) in this run.
    #[arg(long)]
    pub no_hooks: bool,

    #[command(flatten)]
    pub common: CommonArgs,

    #[command(flatten)]
    pub settings: SettingFlags<ROOT>,

    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// The settings layer the flags given make: the global ones, the root command's own and a
    /// subcommand's (`baton serve --speculate …`).
    pub fn flag_settings(&self) -> Result<Settings, ConfigError> {
        let sub: &[(&'static str, String)] = match &self.command {
            Some(Command::Serve(a)) => &a.settings.given,
            _ => &[],
        };
        flag_settings(&[&self.common.settings.given, &self.settings.given, sub])
    }
}

/// Options shared by the root command and the subcommands that talk to a backend.
#[derive(Debug, Clone, Default, Args)]
pub struct CommonArgs {
    /// The settings every command takes (`--endpoint`, `-C/--cd`, `--sandbox`, …).
    #[command(flatten)]
    pub settings: SettingFlags<GLOBAL>,

    /// Accept a workspace of `/`, your home folder (or a folder above it) or the system's temp
    /// folder, which are refused otherwise (commands could write your dotfiles and sockets).
    #[arg(long, global = true, help_heading = "Workspace")]
    pub allow_broad_workspace: bool,

    /// Continue a saved session: its id (or a unique prefix), or `last` (the newest of this
    /// workspace).
    #[arg(long, value_name = "ID", global = true, help_heading = "Sessions")]
    pub resume: Option<String>,

    /// Every workspace, not only this one: `--resume last` takes the newest of all, `baton
    /// sessions` lists all.
    #[arg(long, global = true, help_heading = "Sessions")]
    pub all: bool,
}

/// [`SettingFlags`] of the flags every command has (`global`).
pub const GLOBAL: u8 = 0;
/// [`SettingFlags`] of the root command's own flags.
pub const ROOT: u8 = 1;
/// [`SettingFlags`] of `baton serve`.
pub const SERVE: u8 = 2;

/// The setting flags of one command (`WHICH`: [`GLOBAL`], [`ROOT`] or [`SERVE`]), made from
/// the settings' definitions (`config::defs`). Values stay text here and go through the config
/// parser in [`flag_settings`], so a bad value reads the same as in config.toml.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SettingFlags<const WHICH: u8> {
    /// The settings given, in the order of the definitions: (key, value as text).
    pub given: Vec<(&'static str, String)>,
}

impl<const WHICH: u8> SettingFlags<WHICH> {
    fn defs() -> impl Iterator<Item = (&'static defs::Def, defs::Flag)> {
        defs::DEFS.iter().filter_map(|d| {
            let flag = d.flag?;
            let here = match WHICH {
                GLOBAL => flag.global,
                ROOT => !flag.global,
                _ => flag.serve,
            };
            here.then_some((d, flag))
        })
    }

    /// The value given for `key`, if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.given
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl<const WHICH: u8> clap::FromArgMatches for SettingFlags<WHICH> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let mut given = Vec::new();
        for (def, _) in Self::defs() {
            // `try_`: a command that lacks the argument (a hidden local copy) is not an error.
            let text = match def.kind {
                defs::Kind::Switch => match matches.try_get_one::<bool>(def.key) {
                    Ok(Some(true)) => "true".to_string(),
                    _ => continue,
                },
                kind => {
                    let values: Vec<&String> = match matches.try_get_many::<String>(def.key) {
                        Ok(Some(values)) => values.collect(),
                        _ => continue,
                    };
                    match kind {
                        // Newline-ended lines, as TOML arrays travel, so a comma inside one
                        // value (a folder name, a quoted prefix) is not taken for a separator.
                        defs::Kind::Lines => values.iter().map(|v| format!("{v}\n")).collect(),
                        defs::Kind::Names => values
                            .iter()
                            .map(|v| v.as_str())
                            .collect::<Vec<_>>()
                            .join(","),
                        _ => values.last().map(|v| v.to_string()).unwrap_or_default(),
                    }
                }
            };
            given.push((def.key, text));
        }
        Ok(SettingFlags { given })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl<const WHICH: u8> Args for SettingFlags<WHICH> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        use clap::ArgAction;
        use clap::builder::{PossibleValue, PossibleValuesParser};
        cmd.args(Self::defs().map(|(def, flag)| {
            let mut arg = clap::Arg::new(def.key)
                .long(flag.long)
                .help(def.help())
                .help_heading(flag.heading)
                .global(flag.global && WHICH == GLOBAL);
            if let Some(c) = flag.short {
                arg = arg.short(c);
            }
            if let Some(alias) = flag.alias {
                arg = arg.visible_alias(alias);
            }
            arg = match def.kind {
                defs::Kind::Switch => arg.action(ArgAction::SetTrue),
                defs::Kind::One => arg.action(ArgAction::Set).value_name(flag.value_name),
                defs::Kind::Lines | defs::Kind::Names => {
                    arg.action(ArgAction::Append).value_name(flag.value_name)
                }
            };
            if let Some(choices) = def.choices {
                let values = choices().into_iter().map(|(name, help)| match help {
                    "" => PossibleValue::new(name),
                    help => PossibleValue::new(name).help(help),
                });
                arg = arg
                    .value_parser(PossibleValuesParser::new(values))
                    .ignore_case(true);
            }
            arg
        }))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
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
                read: Vec::new(),
                allow_unix_socket: Vec::new(),
                workspace: None,
                allow_broad_workspace: false,
                env_keep: Vec::new(),
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

/// The settings layer the flags make, from each command's setting flags. Flag values go
/// through the same parser as config values.
pub fn flag_settings(given: &[&[(&'static str, String)]]) -> Result<Settings, ConfigError> {
    let mut s = Settings::default();
    for (key, value) in given.iter().copied().flatten() {
        let flag = defs::find(key)
            .and_then(defs::Def::flag_name)
            .unwrap_or_else(|| format!("--{key}"));
        s.set(key, value, &format!("flag {flag}"), None)?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn settings(argv: &[&str]) -> Result<Settings, ConfigError> {
        Cli::try_parse_from(argv).unwrap().flag_settings()
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
        assert_eq!(s.approval, Some(crate::protocol::ApprovalPolicy::FullAuto));
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
