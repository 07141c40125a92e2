//! One definition per setting: its key, `[section]` spelling, flag, kind of value, parser,
//! default, documentation and trust level. Config files, `BATON_*` variables, the flags, the
//! project-trust rules, docs/configuration.md's table and `baton doctor` all read them here, so
//! a new setting is one entry in [`DEFS`] (and its field in `Settings` and `Config`).

use std::path::{Path, PathBuf};

use super::input::{Input, Number, wrong_type};
use super::settings::{Settings, command_prefix, not_a_folder};
use crate::protocol::{
    ApprovalPolicy, Choice, DeviceChoice, Expert, FollowUps, Mode, ReasoningEffort,
    RouteConstraint, SandboxBackend, SandboxMode, Speculate,
};

/// How a setting's value is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One value; the flag takes it once.
    One,
    /// `true` or `false`; the flag is a switch that means `true`.
    Switch,
    /// A list whose entries may hold commas (folders, command prefixes): a TOML array, one
    /// flag per entry, commas between entries in a `BATON_*` variable.
    Lines,
    /// A list of names: a TOML array, or comma-separated in a flag and a variable.
    Names,
}

/// The flag of a setting and the commands that have it.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub long: &'static str,
    pub short: Option<char>,
    pub alias: Option<&'static str>,
    pub value_name: &'static str,
    /// One line of `--help`; the default is added from the definition.
    pub help: &'static str,
    pub heading: &'static str,
    /// On every subcommand too (`baton doctor --endpoint …`), not the root command only.
    pub global: bool,
    /// Also a flag of `baton serve`.
    pub serve: bool,
    /// Passed on to every `baton --exec` that `baton eval` runs.
    pub to_trials: bool,
}

impl Flag {
    const fn new(long: &'static str, value_name: &'static str, heading: &'static str) -> Self {
        Flag {
            long,
            short: None,
            alias: None,
            value_name,
            help: "",
            heading,
            global: false,
            serve: false,
            to_trials: false,
        }
    }
    const fn help(mut self, help: &'static str) -> Self {
        self.help = help;
        self
    }
    const fn global(mut self) -> Self {
        self.global = true;
        self
    }
    const fn serve(mut self) -> Self {
        self.serve = true;
        self
    }
    const fn to_trials(mut self) -> Self {
        self.to_trials = true;
        self
    }
    const fn short(mut self, c: char) -> Self {
        self.short = Some(c);
        self
    }
    const fn alias(mut self, alias: &'static str) -> Self {
        self.alias = Some(alias);
        self
    }
}

/// Reads and writes one setting's field of a [`Settings`] layer.
#[derive(Clone, Copy)]
pub struct Slot {
    /// Parses a value (`base` resolves relative paths: a config file's folder) and sets the
    /// field; the error is the reason alone.
    pub set: fn(&mut Settings, Input, Option<&Path>) -> Result<(), String>,
    pub is_set: fn(&Settings) -> bool,
    /// Takes the field from the second layer when it sets it.
    pub take: fn(&mut Settings, &Settings),
    pub clear: fn(&mut Settings),
    /// The value as one line, for `baton doctor`.
    pub show: fn(&Settings) -> Option<String>,
}

/// A value's name and its line of help (empty when the name says it all).
pub type NameAndHelp = (&'static str, &'static str);

/// A setting.
pub struct Def {
    /// The config key; the variable is `BATON_` + its upper case.
    pub key: &'static str,
    /// Also written as `[section] name`.
    pub section: Option<(&'static str, &'static str)>,
    pub kind: Kind,
    /// The names a flag offers (and completes), when the value is one of a fixed set.
    pub choices: Option<fn() -> Vec<NameAndHelp>>,
    pub flag: Option<Flag>,
    /// A project file from a folder the user has not trusted may set it only to a value no
    /// weaker than the user's own (`project::withhold_lowering`).
    pub guarded: bool,
    /// docs/configuration.md's columns: the values, the default and the meaning.
    pub values: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
    pub slot: Slot,
}

impl Def {
    /// The environment variable.
    pub fn env(&self) -> String {
        format!("BATON_{}", self.key.to_ascii_uppercase())
    }

    /// The flag as messages name it: `--endpoint`, `-C/--cd`.
    pub fn flag_name(&self) -> Option<String> {
        let flag = self.flag?;
        Some(match flag.short {
            Some(c) => format!("-{c}/--{}", flag.long),
            None => format!("--{}", flag.long),
        })
    }

    /// One line of `--help`: the flag's text (without its full stop, as clap writes help) and,
    /// where there is one, the default.
    pub fn help(&self) -> String {
        let help = self.flag.map(|f| f.help).unwrap_or_default();
        let help = help.strip_suffix('.').unwrap_or(help);
        if self.default == "—" || self.kind == Kind::Switch {
            help.to_string()
        } else {
            format!("{help} [default: {}]", self.default.replace('`', ""))
        }
    }
}

/// The definition of `key`.
pub fn find(key: &str) -> Option<&'static Def> {
    DEFS.iter().find(|d| d.key == key)
}

/// Every key, in the order of [`DEFS`].
pub fn keys() -> impl Iterator<Item = &'static str> {
    DEFS.iter().map(|d| d.key)
}

/// The flat key a `[section] name` stands for.
pub fn flat_key(section: &str, name: &str) -> Option<&'static str> {
    DEFS.iter()
        .find(|d| d.section == Some((section, name)))
        .map(|d| d.key)
}

/// The sections and the names each may hold, in the order of [`DEFS`].
pub fn sections() -> Vec<(&'static str, Vec<&'static str>)> {
    let mut out: Vec<(&'static str, Vec<&'static str>)> = Vec::new();
    for (section, name) in DEFS.iter().filter_map(|d| d.section) {
        match out.iter_mut().find(|(s, _)| *s == section) {
            Some((_, names)) => names.push(name),
            None => out.push((section, vec![name])),
        }
    }
    out
}

/// docs/configuration.md's table of keys, as the definitions give it.
pub fn docs_table() -> String {
    let mut out = String::from("| key | values | default | meaning |\n|---|---|---|---|\n");
    for d in DEFS {
        let mut also = Vec::new();
        if let Some((section, name)) = d.section {
            also.push(format!("also `[{section}] {name}`"));
        }
        if let Some(flag) = &d.flag
            && flag.long != d.key.replace('_', "-")
        {
            also.push(format!("flag `{}`", d.flag_name().unwrap_or_default()));
        }
        let also = if also.is_empty() {
            String::new()
        } else {
            format!(" ({})", also.join("; "))
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {}{also} |\n",
            d.key, d.values, d.default, d.meaning
        ));
    }
    out
}

/// The names and help lines of a `Choice`, for a flag's possible values.
fn names_of<T: Choice>() -> Vec<NameAndHelp> {
    T::ALL.iter().map(|v| (v.name(), v.help())).collect()
}

/// The text form of a value, for `baton doctor`.
pub trait Show {
    fn show(&self) -> String;
}

macro_rules! show_by_display {
    ($($t:ty),*) => { $(impl Show for $t { fn show(&self) -> String { self.to_string() } })* };
}
show_by_display!(String, bool, u32, u64, f32, f64, Expert);

macro_rules! show_by_name {
    ($($t:ty),*) => { $(impl Show for $t { fn show(&self) -> String { self.name().to_string() } })* };
}
show_by_name!(
    Mode,
    ReasoningEffort,
    ApprovalPolicy,
    SandboxMode,
    DeviceChoice,
    RouteConstraint,
    Speculate,
    FollowUps
);

impl Show for SandboxBackend {
    fn show(&self) -> String {
        self.as_str().to_string()
    }
}

impl Show for PathBuf {
    fn show(&self) -> String {
        self.display().to_string()
    }
}

impl<T: Show> Show for Vec<T> {
    fn show(&self) -> String {
        self.iter().map(Show::show).collect::<Vec<_>>().join(", ")
    }
}

/// The [`Slot`] of a field of `Settings` (`endpoint`, `backend_timeouts.idle`,
/// `expert_tools[2]`), whose value is read by `parse(input, base)`.
macro_rules! slot {
    ($($field:ident).+ $([$i:literal])?, $parse:expr) => {
        Slot {
            set: |s, input, base| {
                s.$($field).+$([$i])? = Some(($parse)(input, base)?);
                Ok(())
            },
            is_set: |s| s.$($field).+$([$i])?.is_some(),
            take: |to, from| {
                if from.$($field).+$([$i])?.is_some() {
                    to.$($field).+$([$i])? = from.$($field).+$([$i])?.clone();
                }
            },
            clear: |s| s.$($field).+$([$i])? = None,
            show: |s| s.$($field).+$([$i])?.as_ref().map(Show::show),
        }
    };
}

// Parsers: a value (and the folder relative paths are relative to) to a setting's value, or
// the reason. Each takes from a file only the TOML types [`Input`]'s methods allow it.

fn choice<T: Choice>(input: Input, _: Option<&Path>) -> Result<T, String> {
    let names: Vec<&str> = T::ALL.iter().map(|v| v.name()).collect();
    let text = input.text(&format!("one of {}", names.join(", ")))?;
    T::parse_or_list(text).map_err(|e| e.to_string())
}

fn at_least<T: Number + PartialOrd + std::fmt::Display>(
    input: Input,
    what: &str,
    least: T,
    why: &str,
) -> Result<T, String> {
    let n: T = input.number(what)?;
    if n < least {
        return Err(format!("{n} is {why} (at least {least})"));
    }
    Ok(n)
}

fn seconds(input: Input, _: Option<&Path>) -> Result<u64, String> {
    let n: u64 = input.number("a number of seconds")?;
    if n == 0 {
        return Err("must be at least 1 second".into());
    }
    Ok(n)
}

fn positive_u32(input: Input, _: Option<&Path>) -> Result<u32, String> {
    let n: u32 = input.number("a positive whole number")?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

fn non_empty(input: Input, what: &str) -> Result<String, String> {
    let v = input.text(&format!("a {what}"))?.trim();
    if v.is_empty() {
        return Err(format!("the {what} is empty"));
    }
    Ok(v.to_string())
}

fn strict_bool(input: Input, _: Option<&Path>) -> Result<bool, String> {
    input.boolean()
}

/// A path; `~/` is the home folder and a relative one is relative to `base` (a file's folder).
fn path(input: Input, base: Option<&Path>) -> Result<PathBuf, String> {
    Ok(path_of(input.text("a path")?, base))
}

fn path_of(text: &str, base: Option<&Path>) -> PathBuf {
    let p = match text.strip_prefix("~/") {
        Some(rest) => dirs::home_dir()
            .map(|h| h.join(rest))
            .unwrap_or_else(|| PathBuf::from(text)),
        None => PathBuf::from(text),
    };
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}

/// A list value as text: entries separated by newlines (repeated flags are joined that way)
/// or, in environment variables and name lists, by commas.
pub fn split_list(text: &str) -> Vec<String> {
    let sep = if text.contains('\n') { '\n' } else { ',' };
    text.split(sep)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

fn names(input: Input, _: Option<&Path>) -> Result<Vec<String>, String> {
    input.entries()
}

fn endpoint(input: Input, _: Option<&Path>) -> Result<String, String> {
    let text = input.text("a URL")?;
    let v = text.trim().trim_end_matches('/');
    if !(v.starts_with("http://") || v.starts_with("https://")) {
        return Err(format!(
            "'{text}' is not an http(s) URL (expected e.g. http://127.0.0.1:8000/v1)"
        ));
    }
    Ok(v.to_string())
}

fn variable_name(input: Input, _: Option<&Path>) -> Result<String, String> {
    let text = input.text("a variable name")?;
    let v = text.trim();
    if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "'{text}' is not an environment variable name (the key itself never goes in config)"
        ));
    }
    Ok(v.to_string())
}

/// A folder that exists, checked here (not only when resolving) so the error names its source.
fn workspace(input: Input, base: Option<&Path>) -> Result<PathBuf, String> {
    let dir = path(input, base)?;
    let at = match std::env::current_dir() {
        Ok(cwd) => cwd.join(&dir),
        Err(_) => dir.clone(),
    };
    match not_a_folder(&at) {
        Some(why) => Err(why),
        None => Ok(dir),
    }
}

fn fraction_of_window(input: Input, _: Option<&Path>) -> Result<f64, String> {
    const WHAT: &str = "a fraction of the window (0.85 or 85%)";
    // A percentage is text; in a file that is a TOML string, and a string must be one.
    let text = match input {
        Input::Text(text) => Some(text.trim()),
        Input::Toml(toml::Value::String(s)) if s.trim().ends_with('%') => Some(s.trim()),
        Input::Toml(value @ toml::Value::String(_)) => {
            return Err(wrong_type(
                "a fraction (0.85) or a percentage (\"85%\")",
                value,
                |s| s.trim().parse::<f64>().is_ok(),
            ));
        }
        Input::Toml(_) => None,
    };
    let f = match text {
        Some(text) => match text.strip_suffix('%') {
            Some(p) => Input::Text(p.trim()).number::<f64>(WHAT)? / 100.0,
            None => Input::Text(text).number(WHAT)?,
        },
        None => input.number(WHAT)?,
    };
    if !(0.2..=0.98).contains(&f) {
        let shown = text.map_or_else(|| f.to_string(), str::to_string);
        return Err(format!(
            "{shown} is outside 0.2..0.98 of the window (20%..98%)"
        ));
    }
    Ok(f)
}

fn temperature(input: Input, _: Option<&Path>) -> Result<f32, String> {
    let t: f32 = input.number("a number")?;
    if !(0.0..=2.0).contains(&t) {
        return Err(format!("{t} is outside 0..2"));
    }
    Ok(t)
}

fn top_p(input: Input, _: Option<&Path>) -> Result<f32, String> {
    let t: f32 = input.number("a number")?;
    if !(t > 0.0 && t <= 1.0) {
        return Err(format!("{t} is outside (0, 1]"));
    }
    Ok(t)
}

fn allow_list(input: Input, _: Option<&Path>) -> Result<Vec<String>, String> {
    let entries = input.entries()?;
    if let Some(bad) = entries.iter().find(|e| command_prefix(e).is_none()) {
        return Err(format!(
            "allow entry {bad:?} is empty or has unbalanced quotes"
        ));
    }
    Ok(entries)
}

fn folders(input: Input, base: Option<&Path>) -> Result<Vec<PathBuf>, String> {
    Ok(input.entries()?.iter().map(|v| path_of(v, base)).collect())
}

const MODEL: &str = "Model";
const WORKSPACE: &str = "Workspace";
const SESSIONS: &str = "Sessions";
const LIMITS: &str = "Limits";
const EXPERTS: &str = "Experts";
const SAMPLING: &str = "Sampling";
const CONTEXT: &str = "Context";
const INTERFACE: &str = "Interface";

const EXPERT_PROMPT_MEANING: &str = "one expert's system prompt in `mol` mode \
     ([modes.md](modes.md#each-expert-its-own-prompt-and-tools))";
const EXPERT_TOOLS_MEANING: &str = "the tools one expert is offered in `mol` mode: built-in \
     tool names, `handoff` (pass the turn to another expert), `mcp` for every MCP tool \
     ([modes.md](modes.md#each-expert-its-own-prompt-and-tools))";

/// The settings, in the order docs/configuration.md lists them.
pub static DEFS: &[Def] = &[
    Def {
        key: "endpoint",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("endpoint", "URL", MODEL)
                .global()
                .to_trials()
                .help("OpenAI-compatible base URL, ending in /v1 (e.g. http://127.0.0.1:8000/v1)."),
        ),
        guarded: true,
        values: "URL",
        default: "—",
        meaning: "OpenAI-compatible base URL ending in `/v1`",
        slot: slot!(endpoint, endpoint),
    },
    Def {
        key: "api_key_env",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("api-key-env", "VAR", MODEL)
                .global()
                .to_trials()
                .help("Name of the environment variable holding the API key."),
        ),
        guarded: true,
        values: "variable name",
        default: "`BATON_API_KEY`",
        meaning: "the environment variable that holds the API key. The key itself is never \
                  read from a file, printed or written anywhere",
        slot: slot!(api_key_env, variable_name),
    },
    Def {
        key: "mode",
        section: None,
        kind: Kind::One,
        choices: Some(names_of::<Mode>),
        flag: Some(
            Flag::new("mode", "MODE", MODEL)
                .global()
                .to_trials()
                .help("mol: route between L0–L3 here; proxy: a server that routes; single: one plain model."),
        ),
        guarded: false,
        values: "`mol` \\| `proxy` \\| `single`",
        default: "`mol`",
        meaning: "see [modes.md](modes.md)",
        slot: slot!(mode, choice::<Mode>),
    },
    Def {
        key: "model",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("model", "NAME", MODEL)
                .global()
                .to_trials()
                .help("Model name (proxy and single modes)."),
        ),
        guarded: false,
        values: "name",
        default: "—",
        meaning: "model name in `proxy` and `single` mode (required there)",
        slot: slot!(model, |v: Input, _| non_empty(v, "model name")),
    },
    Def {
        key: "profile",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("profile", "DIR", MODEL)
                .global()
                .to_trials()
                .help("MoL profile folder (lora.md, route.md, intro.md, summary.md)."),
        ),
        guarded: true,
        values: "folder",
        default: "built in",
        meaning: "MoL profile folder (`lora.md`, `route.md`, `intro.md`, `summary.md`)",
        slot: slot!(profile, path),
    },
    Def {
        key: "expert",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("expert", "LABEL", MODEL)
                .global()
                .to_trials()
                .help("Pin an expert (L0, L1, L2 or L3): skip routing."),
        ),
        guarded: false,
        values: "`L0`–`L3`",
        default: "—",
        meaning: "pin one expert, skip routing",
        slot: slot!(expert, |v: Input, _| v
            .text("an expert label (L0, L1, L2 or L3)")?
            .parse::<Expert>()),
    },
    Def {
        key: "reasoning",
        section: None,
        kind: Kind::One,
        choices: Some(names_of::<ReasoningEffort>),
        flag: Some(
            Flag::new("reasoning", "EFFORT", MODEL).global().help(
                "Reasoning effort of answers. In mol mode none turns thinking off; any other \
                 value is sent as asked, with thinking on (docs/modes.md).",
            ),
        ),
        guarded: false,
        values: "`none` \\| `low` \\| `medium` \\| `high`",
        default: "`high` in `mol` mode (the harness default), else server default",
        meaning: "reasoning effort of answers; in `mol` mode `none` turns thinking off and any \
                  other value is sent as asked, with thinking on (docs/modes.md)",
        slot: slot!(reasoning, choice::<ReasoningEffort>),
    },
    Def {
        key: "workspace",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("cd", "DIR", WORKSPACE)
                .global()
                .short('C')
                .help("Workspace folder."),
        ),
        guarded: true,
        values: "folder",
        default: "current folder",
        meaning: "the folder tools work in",
        slot: slot!(workspace, workspace),
    },
    Def {
        key: "approval",
        section: Some(("approval", "policy")),
        kind: Kind::One,
        choices: Some(names_of::<ApprovalPolicy>),
        flag: Some(
            Flag::new("approval", "POLICY", WORKSPACE)
                .global()
                .alias("ask-for-approval")
                .help("When to ask before tools act."),
        ),
        guarded: true,
        values: "`ask` \\| `auto-edit` \\| `full-auto` \\| `never`",
        default: "`ask`; `never` with `--exec`",
        meaning: "when to ask before tools act",
        slot: slot!(approval, choice::<ApprovalPolicy>),
    },
    Def {
        key: "sandbox",
        section: Some(("sandbox", "mode")),
        kind: Kind::One,
        choices: Some(names_of::<SandboxMode>),
        flag: Some(
            Flag::new("sandbox", "MODE", WORKSPACE)
                .global()
                .help("What commands may touch."),
        ),
        guarded: true,
        values: "`read-only` \\| `workspace-write` \\| `off`",
        default: "`workspace-write`",
        meaning: "what commands may touch",
        slot: slot!(sandbox, choice::<SandboxMode>),
    },
    Def {
        key: "session_dir",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("session-dir", "DIR", SESSIONS)
                .global()
                .help("Where session files go."),
        ),
        guarded: true,
        values: "folder",
        default: "`~/.local/share/baton/sessions`",
        meaning: "where session files go",
        slot: slot!(session_dir, path),
    },
    Def {
        key: "local",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("local", "ROOT", MODEL)
                .global()
                .to_trials()
                .help("Run the local engine on the model folder ROOT (base/ and loras/L0..L3) instead of an endpoint."),
        ),
        guarded: true,
        values: "folder",
        default: "—",
        meaning: "run the local engine on ROOT (`base/`, `loras/L0..L3`) instead of an endpoint",
        slot: slot!(local, path),
    },
    Def {
        key: "device",
        section: None,
        kind: Kind::One,
        choices: Some(names_of::<DeviceChoice>),
        flag: Some(
            Flag::new("device", "DEVICE", MODEL)
                .global()
                .help("Device of the local engine."),
        ),
        guarded: false,
        values: "`auto` \\| `cpu` \\| `cuda`",
        default: "`auto`",
        meaning: "device of the local engine",
        slot: slot!(device, choice::<DeviceChoice>),
    },
    Def {
        key: "max_turns",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("max-turns", "N", LIMITS)
                .global()
                .to_trials()
                .help("Model round trips allowed per turn (exit 3 when reached)."),
        ),
        guarded: false,
        values: "whole number ≥ 1",
        default: "unlimited",
        meaning: "model round trips allowed per user turn",
        slot: slot!(max_turns, positive_u32),
    },
    Def {
        key: "timeout",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("timeout", "SECS", LIMITS)
                .global()
                .help("Seconds allowed for the whole --exec run (exit 3 when reached)."),
        ),
        guarded: false,
        values: "seconds ≥ 1",
        default: "none",
        meaning: "time allowed for a whole `--exec` run",
        slot: slot!(timeout, seconds),
    },
    Def {
        key: "connect_timeout",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("connect-timeout", "SECS", MODEL)
                .help("Seconds to establish the connection to the endpoint."),
        ),
        guarded: false,
        values: "seconds ≥ 1",
        default: "`10`",
        meaning: "endpoint: time to establish the TCP/TLS connection \
                  ([backend.md](backend.md#timeouts))",
        slot: slot!(backend_timeouts.connect, seconds),
    },
    Def {
        key: "request_timeout",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("request-timeout", "SECS", MODEL)
                .help("Seconds an endpoint may take to start answering a hop."),
        ),
        guarded: false,
        values: "seconds ≥ 1",
        default: "`600`",
        meaning: "endpoint: per attempt, until the response headers arrive (a non-streamed \
                  hop: its whole body)",
        slot: slot!(backend_timeouts.request, seconds),
    },
    Def {
        key: "idle_timeout",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("idle-timeout", "SECS", MODEL)
                .help("Longest silence, in seconds, inside a streamed answer."),
        ),
        guarded: false,
        values: "seconds ≥ 1",
        default: "`180`",
        meaning: "endpoint: the longest silence inside a streamed answer",
        slot: slot!(backend_timeouts.idle, seconds),
    },
    Def {
        key: "system_prompt",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(Flag::new("system-prompt", "FILE", MODEL).help(
            "A file whose text replaces the built-in system prompt (of every expert without \
             its own).",
        )),
        guarded: true,
        values: "file",
        default: "built in",
        meaning: "replaces the system prompt: of every expert that has none of its own \
                  (`lN_system_prompt`, or the profile's `experts/LN.md`), and of the one model \
                  of `proxy` and `single` modes (built in: `src/agent/prompts/system.md`)",
        slot: slot!(system_prompt, path),
    },
    Def {
        key: "l0_system_prompt",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("l0-system-prompt", "FILE", EXPERTS)
                .help("A file whose text is L0's system prompt."),
        ),
        guarded: true,
        values: "file",
        default: "built in",
        meaning: EXPERT_PROMPT_MEANING,
        slot: slot!(expert_system_prompt[0], path),
    },
    Def {
        key: "l1_system_prompt",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("l1-system-prompt", "FILE", EXPERTS)
                .help("A file whose text is L1's system prompt."),
        ),
        guarded: true,
        values: "file",
        default: "built in",
        meaning: EXPERT_PROMPT_MEANING,
        slot: slot!(expert_system_prompt[1], path),
    },
    Def {
        key: "l2_system_prompt",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("l2-system-prompt", "FILE", EXPERTS)
                .help("A file whose text is L2's system prompt."),
        ),
        guarded: true,
        values: "file",
        default: "built in",
        meaning: EXPERT_PROMPT_MEANING,
        slot: slot!(expert_system_prompt[2], path),
    },
    Def {
        key: "l3_system_prompt",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("l3-system-prompt", "FILE", EXPERTS)
                .help("A file whose text is L3's system prompt."),
        ),
        guarded: true,
        values: "file",
        default: "built in",
        meaning: EXPERT_PROMPT_MEANING,
        slot: slot!(expert_system_prompt[3], path),
    },
    Def {
        key: "l0_tools",
        section: None,
        kind: Kind::Names,
        choices: None,
        flag: Some(
            Flag::new("l0-tools", "NAMES", EXPERTS)
                .help("The tools L0 (chat) is offered, comma-separated."),
        ),
        guarded: true,
        values: "list of tool names",
        default: "`[\"handoff\", \"mcp\"]`",
        meaning: EXPERT_TOOLS_MEANING,
        slot: slot!(expert_tools[0], names),
    },
    Def {
        key: "l1_tools",
        section: None,
        kind: Kind::Names,
        choices: None,
        flag: Some(
            Flag::new("l1-tools", "NAMES", EXPERTS)
                .help("The tools L1 (long tool-using tasks) is offered."),
        ),
        guarded: true,
        values: "list of tool names",
        default: "all",
        meaning: EXPERT_TOOLS_MEANING,
        slot: slot!(expert_tools[1], names),
    },
    Def {
        key: "l2_tools",
        section: None,
        kind: Kind::Names,
        choices: None,
        flag: Some(
            Flag::new("l2-tools", "NAMES", EXPERTS).help("The tools L2 (coding) is offered."),
        ),
        guarded: true,
        values: "list of tool names",
        default: "all",
        meaning: EXPERT_TOOLS_MEANING,
        slot: slot!(expert_tools[2], names),
    },
    Def {
        key: "l3_tools",
        section: None,
        kind: Kind::Names,
        choices: None,
        flag: Some(
            Flag::new("l3-tools", "NAMES", EXPERTS)
                .help("The tools L3 (generative UI) is offered."),
        ),
        guarded: true,
        values: "list of tool names",
        default: "all",
        meaning: EXPERT_TOOLS_MEANING,
        slot: slot!(expert_tools[3], names),
    },
    Def {
        key: "compact_at",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("compact-at", "FRACTION", CONTEXT)
                .help("Compact an expert's view past this fraction of the window (0.85 or 85%)."),
        ),
        guarded: false,
        values: "fraction 0.2–0.98, or a percentage (`80%`)",
        default: "`0.85`",
        meaning: "compact an expert's view when it would pass this fraction of the context \
                  window ([context.md](context.md))",
        slot: slot!(compact_at, fraction_of_window),
    },
    Def {
        key: "context_window",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("context-window", "TOKENS", CONTEXT)
                .help("The experts' context window in tokens."),
        ),
        guarded: false,
        values: "tokens ≥ 1024",
        default: "what `/models` reports, else 131072",
        meaning: "the experts' context window: long tool loops shrink old outputs, then \
                  compact, to stay inside it",
        slot: slot!(context_window, |v: Input, _| at_least(
            v,
            "a number of tokens",
            1024u64,
            "tokens, too small"
        )),
    },
    Def {
        key: "route_constraint",
        section: None,
        kind: Kind::One,
        choices: Some(names_of::<RouteConstraint>),
        flag: Some(
            Flag::new("route-constraint", "KIND", MODEL)
                .serve()
                .help("How the route label is constrained: choice (vLLM) or regex (SGLang)."),
        ),
        guarded: false,
        values: "`choice` \\| `regex`",
        default: "`choice`",
        meaning: "route label constraint: vLLM `structured_outputs.choice`, or SGLang `regex`",
        slot: slot!(route_constraint, choice::<RouteConstraint>),
    },
    Def {
        key: "follow_ups",
        section: None,
        kind: Kind::One,
        choices: Some(names_of::<FollowUps>),
        flag: Some(
            Flag::new("follow-ups", "HOW", MODEL).serve().help(
                "A short follow-up (\"do the same for February\") stays with the expert that \
                 answered the previous request, without a route hop (sticky), or is routed \
                 (route).",
            ),
        ),
        guarded: false,
        values: "`sticky` \\| `route`",
        default: "`sticky`",
        meaning: "a short follow-up that refers back (\"do the same for February\") stays \
                  with the expert that answered the previous request, without a route hop; \
                  `route` routes every request. `mol` mode and `baton serve` \
                  ([modes.md](modes.md#follow-ups))",
        slot: slot!(follow_ups, choice::<FollowUps>),
    },
    Def {
        key: "speculate",
        section: None,
        kind: Kind::One,
        choices: Some(names_of::<Speculate>),
        flag: Some(
            Flag::new("speculate", "WHEN", MODEL).serve().help(
                "Send the answer hop with the route hop, to the expert the route will probably \
                 pick: off, sticky (the previous turn's expert) or always (sticky, else the \
                 default expert).",
            ),
        ),
        guarded: false,
        values: "`off` \\| `sticky` \\| `always`",
        default: "`off`",
        meaning: "send a new user turn's answer hop together with its route hop, to the \
                  expert the route will probably pick (`sticky`: the previous turn's; \
                  `always`: that, else the default expert L2); a miss is cancelled. `mol` \
                  mode and `baton serve` ([modes.md](modes.md#speculative-answer))",
        slot: slot!(speculate, choice::<Speculate>),
    },
    Def {
        key: "temperature",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("temperature", "T", SAMPLING).help("Answer sampling temperature, 0–2."),
        ),
        guarded: false,
        values: "0–2",
        default: "0 (the harness default)",
        meaning: "answer sampling",
        slot: slot!(temperature, temperature),
    },
    Def {
        key: "top_p",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(Flag::new("top-p", "P", SAMPLING).help("Answer nucleus sampling, (0, 1].")),
        guarded: false,
        values: "(0, 1]",
        default: "server default",
        meaning: "answer sampling",
        slot: slot!(top_p, top_p),
    },
    Def {
        key: "seed",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(Flag::new("seed", "N", SAMPLING).help("Answer sampling seed.")),
        guarded: false,
        values: "whole number",
        default: "—",
        meaning: "answer sampling",
        slot: slot!(seed, |v: Input, _| v.number::<u64>("a whole number")),
    },
    Def {
        key: "max_tokens",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("max-tokens", "N", SAMPLING).help("Answer length limit in tokens."),
        ),
        guarded: false,
        values: "whole number ≥ 1",
        default: "server default",
        meaning: "answer length limit",
        slot: slot!(max_tokens, positive_u32),
    },
    Def {
        key: "network",
        section: Some(("sandbox", "network")),
        kind: Kind::Switch,
        choices: None,
        flag: Some(Flag::new("network", "", WORKSPACE).help("Commands may use the network.")),
        guarded: true,
        values: "`true` \\| `false`",
        default: "`false`",
        meaning: "commands may use the network",
        slot: slot!(network, strict_bool),
    },
    Def {
        key: "login_shell",
        section: None,
        kind: Kind::Switch,
        choices: None,
        flag: Some(
            Flag::new("login-shell", "", WORKSPACE)
                .help("Run commands in a login shell (`bash -lc`: reads the shell profile)."),
        ),
        guarded: true,
        values: "`true` \\| `false`",
        default: "`false`",
        meaning: "commands run in a login shell (`bash -lc`, reads the shell profile); the \
                  default `bash -c` skips a profile that would fail in the sandbox",
        slot: slot!(login_shell, strict_bool),
    },
    Def {
        key: "writable",
        section: Some(("sandbox", "writable")),
        kind: Kind::Lines,
        choices: None,
        flag: Some(
            Flag::new("write", "DIR", WORKSPACE)
                .alias("writable")
                .help("Another folder commands may write under workspace-write (repeatable)."),
        ),
        guarded: true,
        values: "list of folders",
        default: "—",
        meaning: "extra folders commands may write under `workspace-write`",
        slot: slot!(writable, folders),
    },
    Def {
        key: "readable",
        section: Some(("sandbox", "readable")),
        kind: Kind::Lines,
        choices: None,
        flag: Some(Flag::new("read", "PATH", WORKSPACE).help(
            "A path of your home commands may read besides its toolchains (repeatable).",
        )),
        guarded: true,
        values: "list of paths",
        default: "—",
        meaning: "paths of your home commands may read: under bubblewrap the home is empty \
                  but for toolchain folders ([sandbox.md](sandbox.md#your-home)); naming a \
                  hidden credential shows it",
        slot: slot!(readable, folders),
    },
    Def {
        key: "unix_sockets",
        section: Some(("sandbox", "allow_unix_sockets")),
        kind: Kind::Lines,
        choices: None,
        flag: Some(Flag::new("allow-unix-socket", "PATH", WORKSPACE).help(
            "A unix socket of the host (or a folder of them) commands may connect to (repeatable).",
        )),
        guarded: true,
        values: "list of paths",
        default: "—",
        meaning: "host unix sockets (or folders of them) commands may connect to; the others \
                  a daemon listens on are masked ([sandbox.md](sandbox.md#host-sockets))",
        slot: slot!(unix_sockets, folders),
    },
    Def {
        key: "max_processes",
        section: Some(("sandbox", "max_processes")),
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("max-processes", "N", WORKSPACE)
                .help("Live processes one command may have."),
        ),
        guarded: true,
        values: "whole number ≥ 16",
        default: "1024",
        meaning: "live processes one command may have (fork bombs stop there)",
        slot: slot!(max_processes, |v: Input, _| at_least(
            v,
            "a positive whole number",
            16u32,
            "too few for a shell"
        )),
    },
    Def {
        key: "sandbox_backend",
        section: Some(("sandbox", "backend")),
        kind: Kind::One,
        // Free text: `bwrap` is accepted for `bubblewrap`.
        choices: None,
        flag: Some(
            Flag::new("sandbox-backend", "BACKEND", WORKSPACE)
                .help("What builds the sandbox: bubblewrap, or the weaker landlock."),
        ),
        guarded: true,
        values: "`bubblewrap` \\| `landlock`",
        default: "`bubblewrap`",
        meaning: "what builds the sandbox; `landlock` is the named weaker mode \
                  ([sandbox.md](sandbox.md))",
        slot: slot!(sandbox_backend, |v: Input, _| v
            .text("bubblewrap or landlock")?
            .trim()
            .parse::<SandboxBackend>()),
    },
    Def {
        key: "max_memory",
        section: Some(("sandbox", "max_memory")),
        kind: Kind::One,
        choices: None,
        flag: Some(
            Flag::new("max-memory", "MIB", WORKSPACE).help("Memory one command may use, in MiB."),
        ),
        guarded: true,
        values: "MiB ≥ 64",
        default: "half of RAM",
        meaning: "memory one command may use",
        slot: slot!(max_memory, |v: Input, _| at_least(
            v,
            "a whole number of MiB",
            64u64,
            "MiB, too little for a shell"
        )),
    },
    Def {
        key: "env_keep",
        section: Some(("sandbox", "env_keep")),
        kind: Kind::Lines,
        choices: None,
        flag: Some(Flag::new("env-keep", "NAME", WORKSPACE).help(
            "An environment variable commands get although it looks like a secret (repeatable).",
        )),
        guarded: true,
        values: "list of variable names",
        default: "—",
        meaning: "variables commands get although they are named like secrets \
                  ([sandbox.md](sandbox.md))",
        slot: slot!(env_keep, names),
    },
    Def {
        key: "env_drop",
        section: Some(("sandbox", "env_drop")),
        kind: Kind::Lines,
        choices: None,
        flag: Some(
            Flag::new("env-drop", "NAME", WORKSPACE)
                .help("An environment variable commands never get (repeatable)."),
        ),
        guarded: true,
        values: "list of variable names",
        default: "—",
        meaning: "more variables commands never get",
        slot: slot!(env_drop, names),
    },
    Def {
        key: "allow",
        section: Some(("approval", "allow")),
        kind: Kind::Lines,
        choices: None,
        flag: Some(Flag::new("allow", "PREFIX", WORKSPACE).help(
            "A command prefix that runs without asking, e.g. \"cargo test\" (repeatable).",
        )),
        guarded: true,
        values: "list of command prefixes",
        default: "—",
        meaning: "commands that run without asking, matched on the parsed words (`\"cargo \
                  test\"` allows `cargo test -q`, not `cargo testfoo`)",
        slot: slot!(allow, allow_list),
    },
    Def {
        key: "tools",
        section: None,
        kind: Kind::Names,
        choices: None,
        flag: Some(
            Flag::new("tools", "NAMES", MODEL)
                .help("The tools offered to the model, comma-separated (e.g. read_file,list_dir,shell)."),
        ),
        guarded: true,
        values: "list of tool names",
        default: "all",
        meaning: "the tools offered to the model (for models with small context windows), e.g. \
                  `[\"read_file\", \"list_dir\", \"shell\"]`",
        slot: slot!(tools, names),
    },
    Def {
        key: "theme",
        section: None,
        kind: Kind::One,
        choices: None,
        flag: Some(Flag::new("theme", "NAME", INTERFACE).help(
            "Colour theme of the interactive UI: dark, light, high-contrast, or a user theme name.",
        )),
        guarded: false,
        values: "`dark` \\| `light` \\| `high-contrast` \\| a user theme",
        default: "`dark`",
        meaning: "colours of the interactive UI (`--no-color` or `NO_COLOR` for none)",
        slot: slot!(theme, |v: Input, _| non_empty(v, "theme name")),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[ignore = "writes docs/configuration.md's keys table to /tmp/docs_table.md"]
    fn write_the_docs_table() {
        std::fs::write("/tmp/docs_table.md", docs_table()).unwrap();
    }

    #[test]
    fn keys_flags_and_sections_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for d in DEFS {
            assert!(seen.insert(d.key.to_string()), "key {} twice", d.key);
            if let Some(f) = d.flag {
                assert!(seen.insert(format!("--{}", f.long)), "flag --{}", f.long);
                if let Some(a) = f.alias {
                    assert!(seen.insert(format!("--{a}")), "alias --{a}");
                }
                assert!(!f.help.is_empty(), "{} has no help", d.key);
                assert!(f.help.ends_with('.'), "{}: help is a sentence", d.key);
            }
            if let Some((s, n)) = d.section {
                assert!(seen.insert(format!("[{s}] {n}")), "[{s}] {n}");
            }
        }
    }

    #[test]
    fn every_choice_a_flag_offers_parses() {
        for d in DEFS {
            let Some(choices) = d.choices else { continue };
            for (name, _) in choices() {
                let mut s = Settings::default();
                (d.slot.set)(&mut s, Input::Text(name), None)
                    .unwrap_or_else(|e| panic!("{} = {name}: {e}", d.key));
                assert_eq!((d.slot.show)(&s).as_deref(), Some(name), "{}", d.key);
            }
        }
    }

    /// A good value of each setting, as text.
    fn sample(d: &Def) -> String {
        match d.kind {
            Kind::Switch => "true".to_string(),
            _ if d.choices.is_some() => d.choices.map(|c| c()[0].0).unwrap_or("").to_string(),
            _ => match d.key {
                "endpoint" => "http://127.0.0.1:1/v1".into(),
                "expert" => "L2".into(),
                "workspace" => "/".into(),
                "compact_at" => "0.5".into(),
                "top_p" => "0.5".into(),
                "temperature" => "1".into(),
                "allow" => "cargo test".into(),
                "sandbox_backend" => "landlock".into(),
                "model" | "theme" | "api_key_env" => "X".into(),
                "profile" | "session_dir" | "local" => "/p".into(),
                k if k.ends_with("system_prompt") => "/p/prompt.md".into(),
                _ => "4096".into(),
            },
        }
    }

    /// The same value as a config file writes it.
    fn toml_sample(d: &Def) -> toml::Value {
        let text = sample(d);
        match d.kind {
            Kind::Switch => toml::Value::Boolean(text == "true"),
            Kind::Lines | Kind::Names => toml::Value::Array(vec![toml::Value::String(text)]),
            Kind::One => match (text.parse::<i64>(), text.parse::<f64>()) {
                (Ok(i), _) => toml::Value::Integer(i),
                (_, Ok(f)) => toml::Value::Float(f),
                _ => toml::Value::String(text),
            },
        }
    }

    #[test]
    fn a_files_typed_value_sets_what_its_text_sets_and_a_quoted_number_is_refused() {
        for d in DEFS {
            let (mut from_text, mut from_toml) = (Settings::default(), Settings::default());
            (d.slot.set)(&mut from_text, Input::Text(&sample(d)), None)
                .unwrap_or_else(|e| panic!("{}: {e}", d.key));
            let value = toml_sample(d);
            (d.slot.set)(&mut from_toml, Input::Toml(&value), None)
                .unwrap_or_else(|e| panic!("{} = {value}: {e}", d.key));
            assert_eq!(from_toml, from_text, "{}", d.key);
            if !value.is_str() {
                // `temperature = "1"`, `network = "true"`, `tools = "x"`: the wrong type.
                let quoted = toml::Value::String(sample(d));
                let e = (d.slot.set)(&mut Settings::default(), Input::Toml(&quoted), None)
                    .expect_err(d.key);
                assert!(e.contains("found string"), "{}: {e}", d.key);
            }
        }
    }

    #[test]
    fn a_slot_sets_takes_shows_and_clears_its_own_field_only() {
        for d in DEFS {
            let mut s = Settings::default();
            (d.slot.set)(&mut s, Input::Text(&sample(d)), None)
                .unwrap_or_else(|e| panic!("{}: {e}", d.key));
            for other in DEFS {
                assert_eq!(
                    (other.slot.is_set)(&s),
                    other.key == d.key,
                    "setting {} touched {}",
                    d.key,
                    other.key
                );
            }
            assert!((d.slot.show)(&s).is_some(), "{}", d.key);
            let mut to = Settings::default();
            (d.slot.take)(&mut to, &s);
            assert_eq!(to, s, "{}", d.key);
            (d.slot.clear)(&mut s);
            assert_eq!(s, Settings::default(), "{}", d.key);
        }
    }
}
