//! The run options every layer names: how baton talks to the model (`Mode`), when to ask before
//! tools act (`ApprovalPolicy`), what commands may touch (`SandboxMode`), where the local engine
//! runs (`DeviceChoice`) and how the route constraint is spelled (`RouteConstraint`).
//!
//! Each is a closed set of names (`Choice`): config files, environment variables and flags all
//! parse them through `Choice::parse_name`, and the command line builds its value lists from
//! `Choice::ALL`, so a name is spelled one way everywhere.

use serde::{Deserialize, Serialize};

/// A closed set of named values, parsed case-insensitively.
pub trait Choice: Copy + PartialEq + Sized + 'static {
    const ALL: &'static [Self];

    /// The one spelling used in config, flags, events and messages.
    fn name(self) -> &'static str;

    /// One line of help for `--help` value lists; empty when the name says it all.
    fn help(self) -> &'static str {
        ""
    }

    fn parse_name(text: &str) -> Option<Self> {
        let text = text.trim();
        Self::ALL
            .iter()
            .copied()
            .find(|v| v.name().eq_ignore_ascii_case(text))
    }

    /// Parses `text`, or says which names exist.
    fn parse_or_list(text: &str) -> Result<Self, UnknownName> {
        Self::parse_name(text).ok_or_else(|| UnknownName {
            given: text.to_string(),
            known: Self::ALL.iter().map(|v| v.name()).collect(),
        })
    }
}

/// A name that is none of a `Choice`'s names; says which ones exist.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{given}' is not one of {}", known.join(", "))]
pub struct UnknownName {
    pub given: String,
    pub known: Vec<&'static str>,
}

/// `Display` and `FromStr` through `Choice`, so every spelling goes through one table.
macro_rules! display_by_name {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(Choice::name(*self))
            }
        }
        impl std::str::FromStr for $t {
            type Err = UnknownName;
            fn from_str(s: &str) -> Result<Self, UnknownName> {
                <$t as Choice>::parse_or_list(s)
            }
        }
    )*};
}

/// How baton talks to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Client-side MoL routing against an engine serving L0–L3 as model names.
    #[default]
    Mol,
    /// A server that routes by itself: one public model name, `X-Conversation-Id` echoed.
    Proxy,
    /// Any OpenAI-compatible model, no routing.
    Single,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        self.name()
    }

    /// Only `mol` mode routes between experts on the client.
    pub fn routes_client_side(self) -> bool {
        self == Mode::Mol
    }
}

impl Choice for Mode {
    const ALL: &'static [Self] = &[Mode::Mol, Mode::Proxy, Mode::Single];
    fn name(self) -> &'static str {
        match self {
            Mode::Mol => "mol",
            Mode::Proxy => "proxy",
            Mode::Single => "single",
        }
    }
    fn help(self) -> &'static str {
        match self {
            Mode::Mol => "route between L0–L3 here, against an engine serving them as model names",
            Mode::Proxy => "a server that routes by itself (one public model name)",
            Mode::Single => "any OpenAI-compatible model, no routing",
        }
    }
}

/// When to ask the user before a tool call runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Ask for file edits and for commands not on the read-only safe list.
    #[default]
    Ask,
    /// File edits run without asking; commands off the safe list ask.
    AutoEdit,
    /// Everything runs without asking (commands stay inside the sandbox).
    FullAuto,
    /// Never ask: whatever would need a human is declined and the model is told why.
    Never,
}

impl ApprovalPolicy {
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

impl Choice for ApprovalPolicy {
    const ALL: &'static [Self] = &[
        ApprovalPolicy::Ask,
        ApprovalPolicy::AutoEdit,
        ApprovalPolicy::FullAuto,
        ApprovalPolicy::Never,
    ];
    fn name(self) -> &'static str {
        match self {
            ApprovalPolicy::Ask => "ask",
            ApprovalPolicy::AutoEdit => "auto-edit",
            ApprovalPolicy::FullAuto => "full-auto",
            ApprovalPolicy::Never => "never",
        }
    }
    fn help(self) -> &'static str {
        match self {
            ApprovalPolicy::Ask => "ask for edits and for commands off the read-only list",
            ApprovalPolicy::AutoEdit => "edits run without asking; other commands ask",
            ApprovalPolicy::FullAuto => "everything runs without asking, inside the sandbox",
            ApprovalPolicy::Never => "never ask: what would need a human is declined",
        }
    }
}

/// The memory bound of a sandboxed command when none is configured, in bytes: half of this
/// machine's RAM (`MemTotal`), 4 GiB when /proc/meminfo can't tell. Config judges a project's
/// `max_memory` against it and the sandbox applies it, so both read it here.
pub fn default_memory_bound() -> u64 {
    // The machine's memory does not change while baton runs; the sandbox asks several times
    // per command.
    static BOUND: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *BOUND.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(4 << 30, |kib| kib * 1024 / 2)
    })
}

/// What builds the sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxBackend {
    /// Each command in its own namespaces (bubblewrap), with Landlock and seccomp inside.
    #[default]
    Bubblewrap,
    /// The weaker mode, only when the user names it (`[sandbox] backend = "landlock"`):
    /// Landlock + seccomp in the user's own namespaces; the terminal, sockets, other
    /// processes and metadata of outside files are not isolated.
    Landlock,
}

impl SandboxBackend {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxBackend::Bubblewrap => "bubblewrap",
            SandboxBackend::Landlock => "landlock",
        }
    }
}

impl std::str::FromStr for SandboxBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "bubblewrap" | "bwrap" => Ok(SandboxBackend::Bubblewrap),
            "landlock" => Ok(SandboxBackend::Landlock),
            other => Err(format!(
                "unknown sandbox backend `{other}` (expected bubblewrap or landlock)"
            )),
        }
    }
}

/// How much of the filesystem a command may change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// No writes except temp dirs and harmless devices (/dev/null, /dev/tty, …).
    ReadOnly,
    /// The workspace, temp dirs and the configured writable dirs; `.git/hooks` and
    /// `.git/config` stay read-only.
    #[default]
    WorkspaceWrite,
    /// No sandbox at all. Only on explicit request; frontends mark it.
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

impl Choice for SandboxMode {
    const ALL: &'static [Self] = &[
        SandboxMode::ReadOnly,
        SandboxMode::WorkspaceWrite,
        SandboxMode::Off,
    ];
    fn name(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::Off => "off",
        }
    }
    fn help(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "no writes except temp dirs",
            SandboxMode::WorkspaceWrite => "the workspace and temp dirs are writable",
            SandboxMode::Off => "no sandbox at all",
        }
    }
}

/// Which device the user asked the local engine to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    /// CUDA when built and present, else the CPU.
    #[default]
    Auto,
    Cpu,
    Cuda,
}

impl Choice for DeviceChoice {
    const ALL: &'static [Self] = &[DeviceChoice::Auto, DeviceChoice::Cpu, DeviceChoice::Cuda];
    fn name(self) -> &'static str {
        match self {
            DeviceChoice::Auto => "auto",
            DeviceChoice::Cpu => "cpu",
            DeviceChoice::Cuda => "cuda",
        }
    }
    fn help(self) -> &'static str {
        match self {
            DeviceChoice::Auto => "CUDA when present, else the CPU",
            _ => "",
        }
    }
}

/// How the route hop's label constraint is spelled for a remote engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteConstraint {
    /// vLLM: `structured_outputs: {choice: [...]}` (what the reference harness sends).
    #[default]
    Choice,
    /// SGLang: `regex: "(L0|L1|L2|L3)"`.
    Regex,
}

impl Choice for RouteConstraint {
    const ALL: &'static [Self] = &[RouteConstraint::Choice, RouteConstraint::Regex];
    fn name(self) -> &'static str {
        match self {
            RouteConstraint::Choice => "choice",
            RouteConstraint::Regex => "regex",
        }
    }
    fn help(self) -> &'static str {
        match self {
            RouteConstraint::Choice => "vLLM structured_outputs.choice",
            RouteConstraint::Regex => "SGLang regex",
        }
    }
}

/// Whether an answer hop is sent speculatively, at the same time as the route hop, to the
/// expert the route will probably pick. A hit saves the route hop's latency; a miss is
/// cancelled and costs the tokens the engine spent on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Speculate {
    /// Route first, then answer (the reference harness's order).
    #[default]
    Off,
    /// Speculate on the expert that answered the conversation's previous turn.
    Sticky,
    /// As `sticky`, and on a conversation's first turn speculate on the route's fallback
    /// expert (the open task's, else the profile's default, L2).
    Always,
}

impl Choice for Speculate {
    const ALL: &'static [Self] = &[Speculate::Off, Speculate::Sticky, Speculate::Always];
    fn name(self) -> &'static str {
        match self {
            Speculate::Off => "off",
            Speculate::Sticky => "sticky",
            Speculate::Always => "always",
        }
    }
    fn help(self) -> &'static str {
        match self {
            Speculate::Off => "route, then answer",
            Speculate::Sticky => "answer on the previous turn's expert while routing",
            Speculate::Always => "sticky, and the default expert on a first turn",
        }
    }
}

/// Whether a short follow-up ("do the same for February") stays with the expert that answered
/// the previous request, without a route hop. The route hop sees only the newest user text,
/// so it cannot tell what "the same" refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FollowUps {
    /// A short follow-up that refers back stays with the previous expert (not after L0).
    #[default]
    Sticky,
    /// Every request is routed (the reference harness's behaviour).
    Route,
}

impl Choice for FollowUps {
    const ALL: &'static [Self] = &[FollowUps::Sticky, FollowUps::Route];
    fn name(self) -> &'static str {
        match self {
            FollowUps::Sticky => "sticky",
            FollowUps::Route => "route",
        }
    }
    fn help(self) -> &'static str {
        match self {
            FollowUps::Sticky => "a short follow-up stays with the previous expert",
            FollowUps::Route => "route every request",
        }
    }
}

display_by_name!(
    Mode,
    Speculate,
    FollowUps,
    ApprovalPolicy,
    SandboxMode,
    DeviceChoice,
    RouteConstraint,
    super::ReasoningEffort
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The serde spelling (session files, events, `[approval] policy`) and the `Choice` spelling
    /// (flags, config values, messages) must never drift apart.
    fn serde_matches_name<T: Choice + Serialize + std::fmt::Debug>() {
        for v in T::ALL {
            assert_eq!(
                serde_json::to_value(v).unwrap(),
                serde_json::json!(v.name())
            );
            assert_eq!(T::parse_name(&v.name().to_uppercase()), Some(*v));
        }
    }

    #[test]
    fn every_choice_has_one_spelling() {
        serde_matches_name::<Mode>();
        serde_matches_name::<ApprovalPolicy>();
        serde_matches_name::<SandboxMode>();
        serde_matches_name::<DeviceChoice>();
        serde_matches_name::<RouteConstraint>();
        serde_matches_name::<Speculate>();
        serde_matches_name::<super::super::ReasoningEffort>();
    }

    #[test]
    fn unknown_names_list_the_known_ones() {
        let err = ApprovalPolicy::parse_or_list("banana").unwrap_err();
        assert_eq!(err.known, ["ask", "auto-edit", "full-auto", "never"]);
        assert_eq!(
            err.to_string(),
            "'banana' is not one of ask, auto-edit, full-auto, never"
        );
        assert_eq!(
            " Full-Auto ".parse::<ApprovalPolicy>(),
            Ok(ApprovalPolicy::FullAuto)
        );
    }
}
