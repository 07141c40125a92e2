//! One layer of settings (a file, the environment or the flags) and how layers merge.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError, default_session_dir};
use crate::protocol::{
    ApprovalPolicy, Choice, DeviceChoice, Expert, Mode, ReasoningEffort, RouteConstraint,
    SandboxMode, Speculate,
};

/// One layer of settings; `None` = this layer says nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    pub endpoint: Option<String>,
    pub api_key_env: Option<String>,
    pub mode: Option<Mode>,
    pub model: Option<String>,
    pub profile: Option<PathBuf>,
    pub expert: Option<Expert>,
    pub workspace: Option<PathBuf>,
    pub reasoning: Option<ReasoningEffort>,
    pub approval: Option<ApprovalPolicy>,
    pub sandbox: Option<SandboxMode>,
    pub session_dir: Option<PathBuf>,
    pub local: Option<PathBuf>,
    pub device: Option<DeviceChoice>,
    pub max_turns: Option<u32>,
    pub timeout: Option<u64>,
    /// Seconds, for the remote backend.
    pub backend_timeouts: super::BackendTimeouts,
    pub system_prompt: Option<PathBuf>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub route_constraint: Option<RouteConstraint>,
    /// Send a new user turn's answer hop speculatively, with its route hop.
    pub speculate: Option<Speculate>,
    /// A short follow-up stays with the previous expert (`sticky`) or is routed (`route`).
    pub follow_ups: Option<crate::protocol::FollowUps>,
    pub context_window: Option<u64>,
    /// Compact an expert's view when it would pass this fraction of the window.
    pub compact_at: Option<f64>,
    pub theme: Option<String>,
    pub network: Option<bool>,
    pub login_shell: Option<bool>,
    pub writable: Option<Vec<PathBuf>>,
    pub max_processes: Option<u32>,
    pub sandbox_backend: Option<crate::protocol::SandboxBackend>,
    /// MiB.
    pub max_memory: Option<u64>,
    pub env_keep: Option<Vec<String>>,
    pub env_drop: Option<Vec<String>>,
    pub allow: Option<Vec<String>>,
    pub tools: Option<Vec<String>>,
    /// Per expert (L0..L3, `l0_tools` …): the tools it is offered.
    pub expert_tools: [Option<Vec<String>>; 4],
    /// Per expert (`l0_system_prompt` …): a file whose text is its system prompt.
    pub expert_system_prompt: [Option<PathBuf>; 4],
}

/// The expert a per-expert key (`l2_tools`, `l0_system_prompt`) is about, and the rest of its
/// name (`tools`, `system_prompt`).
pub fn expert_key(key: &str) -> Option<(usize, &str)> {
    let rest = key.strip_prefix('l')?;
    let (digit, name) = rest.split_once('_')?;
    let i: usize = digit.parse().ok()?;
    (i < 4 && digit.len() == 1).then_some((i, name))
}

fn choice<T: Choice>(value: &str) -> Result<T, String> {
    T::parse_or_list(value).map_err(|e| e.to_string())
}

/// Parses a configured command prefix such as `"cargo test"` into words (shell quoting
/// allowed). `None` for an empty or unparsable prefix.
pub fn command_prefix(prefix: &str) -> Option<Vec<String>> {
    shlex::split(prefix).filter(|w| !w.is_empty())
}

fn number<T: std::str::FromStr>(value: &str, what: &str) -> Result<T, String> {
    value
        .trim()
        .parse::<T>()
        .map_err(|_| format!("'{value}' is not {what}"))
}

/// A list value as text: entries separated by newlines (TOML arrays are joined that way) or,
/// in environment variables, by commas.
fn split_list(value: &str) -> Vec<String> {
    let sep = if value.contains('\n') { '\n' } else { ',' };
    value
        .split(sep)
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect()
}

/// Why `dir` cannot be a workspace, or `None` when it is a folder.
pub fn not_a_folder(dir: &Path) -> Option<String> {
    if dir.is_dir() {
        None
    } else if dir.exists() {
        Some(format!("{} is not a folder", dir.display()))
    } else {
        Some(format!("{}: folder not found", dir.display()))
    }
}

fn path(value: &str, base: Option<&Path>) -> PathBuf {
    let p = if let Some(rest) = value.strip_prefix("~/") {
        dirs::home_dir()
            .map(|h| h.join(rest))
            .unwrap_or_else(|| PathBuf::from(value))
    } else {
        PathBuf::from(value)
    };
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}

/// The keys of the `[sandbox]` and `[approval]` sections (`mode` and `policy` stand for the
/// `sandbox` and `approval` keys).
pub const SECTIONS: [(&str, &[&str]); 2] = [
    (
        "sandbox",
        &[
            "mode",
            "network",
            "writable",
            "max_processes",
            "backend",
            "max_memory",
            "env_keep",
            "env_drop",
        ],
    ),
    ("approval", &["policy", "allow"]),
];

/// Why `key` (flat, or `section.key` as a config file writes it) is not a setting, with the
/// nearest known name when one is a typo away; `None` for a known key.
pub fn unknown_key(key: &str) -> Option<String> {
    if let Some((section, sub)) = key.split_once('.') {
        let Some((_, keys)) = SECTIONS.iter().find(|(s, _)| *s == section) else {
            return unknown_key(section);
        };
        if keys.contains(&sub) {
            return None;
        }
        let hint = nearest(sub, keys.iter().copied())
            .map(|k| format!(", did you mean `{k}`?"))
            .unwrap_or_default();
        return Some(format!(
            "unknown key in [{section}]{hint} ([{section}] keys: {})",
            keys.join(", ")
        ));
    }
    if Settings::KEYS.contains(&key) {
        return None;
    }
    Some(match nearest(key, Settings::KEYS.iter().copied()) {
        Some(k) => format!("unknown key, did you mean `{k}`?"),
        None => format!(
            "unknown key (known keys: {}; sections [sandbox] and [approval])",
            Settings::KEYS.join(", ")
        ),
    })
}

/// The candidate closest to `word` by edit distance (a swap of two letters counts as one),
/// when it is close enough to be a typo: at most 1 edit for short words, 2 for longer ones.
/// A tie goes to the candidate of the same length (`modle` is `model` typed fast, not `mode`).
fn nearest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    let limit = if word.chars().count() <= 4 { 1 } else { 2 };
    candidates
        .map(|c| (edit_distance(&word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, c.len().abs_diff(word.len())))
        .map(|(_, c)| c)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in d[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

impl Settings {
    /// Every key, as written in config.toml (the env var is `BATON_` + upper case).
    pub const KEYS: [&'static str; 47] = [
        "endpoint",
        "api_key_env",
        "mode",
        "model",
        "profile",
        "expert",
        "workspace",
        "reasoning",
        "approval",
        "sandbox",
        "session_dir",
        "local",
        "device",
        "max_turns",
        "timeout",
        "connect_timeout",
        "request_timeout",
        "idle_timeout",
        "system_prompt",
        "temperature",
        "top_p",
        "seed",
        "max_tokens",
        "route_constraint",
        "speculate",
        "follow_ups",
        "context_window",
        "compact_at",
        "theme",
        "network",
        "login_shell",
        "writable",
        "max_processes",
        "sandbox_backend",
        "max_memory",
        "env_keep",
        "env_drop",
        "allow",
        "tools",
        "l0_tools",
        "l1_tools",
        "l2_tools",
        "l3_tools",
        "l0_system_prompt",
        "l1_system_prompt",
        "l2_system_prompt",
        "l3_system_prompt",
    ];

    /// Sets one key from its text form. `base` resolves relative paths (a file's folder).
    pub fn set(
        &mut self,
        key: &str,
        value: &str,
        source: &str,
        base: Option<&Path>,
    ) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError {
            source_name: source.to_string(),
            key: key.to_string(),
            reason,
        };
        match key {
            "endpoint" => {
                let v = value.trim().trim_end_matches('/');
                if !(v.starts_with("http://") || v.starts_with("https://")) {
                    return Err(err(format!(
                        "'{value}' is not an http(s) URL (expected e.g. http://127.0.0.1:8000/v1)"
                    )));
                }
                self.endpoint = Some(v.to_string());
            }
            "api_key_env" => {
                let v = value.trim();
                if v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(err(format!(
                        "'{value}' is not an environment variable name (the key itself never goes in config)"
                    )));
                }
                self.api_key_env = Some(v.to_string());
            }
            "mode" => self.mode = Some(choice(value).map_err(err)?),
            "model" => {
                if value.trim().is_empty() {
                    return Err(err("the model name is empty".into()));
                }
                self.model = Some(value.trim().to_string());
            }
            "profile" => self.profile = Some(path(value, base)),
            "expert" => self.expert = Some(value.parse::<Expert>().map_err(err)?),
            "workspace" => {
                let dir = path(value, base);
                // Checked here, not only when resolving, so the error names its source.
                let at = match std::env::current_dir() {
                    Ok(cwd) => cwd.join(&dir),
                    Err(_) => dir.clone(),
                };
                if let Some(why) = not_a_folder(&at) {
                    return Err(err(why));
                }
                self.workspace = Some(dir);
            }
            "reasoning" => self.reasoning = Some(choice(value).map_err(err)?),
            "approval" => self.approval = Some(choice(value).map_err(err)?),
            "sandbox" => self.sandbox = Some(choice(value).map_err(err)?),
            "session_dir" => self.session_dir = Some(path(value, base)),
            "local" => self.local = Some(path(value, base)),
            "device" => self.device = Some(choice(value).map_err(err)?),
            "max_turns" => {
                let n: u32 = number(value, "a positive whole number").map_err(err)?;
                if n == 0 {
                    return Err(err("must be at least 1".into()));
                }
                self.max_turns = Some(n);
            }
            "timeout" => {
                let n: u64 = number(value, "a number of seconds").map_err(err)?;
                if n == 0 {
                    return Err(err("must be at least 1 second".into()));
                }
                self.timeout = Some(n);
            }
            "connect_timeout" | "request_timeout" | "idle_timeout" => {
                let n: u64 = number(value, "a number of seconds").map_err(err)?;
                if n == 0 {
                    return Err(err("must be at least 1 second".into()));
                }
                let t = &mut self.backend_timeouts;
                *match key {
                    "connect_timeout" => &mut t.connect,
                    "request_timeout" => &mut t.request,
                    _ => &mut t.idle,
                } = Some(n);
            }
            "system_prompt" => self.system_prompt = Some(path(value, base)),
            "temperature" => {
                let t: f32 = number(value, "a number").map_err(err)?;
                if !(0.0..=2.0).contains(&t) {
                    return Err(err(format!("{t} is outside 0..2")));
                }
                self.temperature = Some(t);
            }
            "top_p" => {
                let t: f32 = number(value, "a number").map_err(err)?;
                if !(t > 0.0 && t <= 1.0) {
                    return Err(err(format!("{t} is outside (0, 1]")));
                }
                self.top_p = Some(t);
            }
            "seed" => self.seed = Some(number(value, "a whole number").map_err(err)?),
            "max_tokens" => {
                let n: u32 = number(value, "a positive whole number").map_err(err)?;
                if n == 0 {
                    return Err(err("must be at least 1".into()));
                }
                self.max_tokens = Some(n);
            }
            "route_constraint" => self.route_constraint = Some(choice(value).map_err(err)?),
            "speculate" => self.speculate = Some(choice(value).map_err(err)?),
            "follow_ups" => self.follow_ups = Some(choice(value).map_err(err)?),
            "context_window" => {
                let n: u64 = number(value, "a number of tokens").map_err(err)?;
                if n < 1024 {
                    return Err(err(format!("{n} tokens is too small (at least 1024)")));
                }
                self.context_window = Some(n);
            }
            "compact_at" => {
                let text = value.trim();
                let (number_text, scale) = match text.strip_suffix('%') {
                    Some(p) => (p.trim(), 100.0),
                    None => (text, 1.0),
                };
                let f: f64 =
                    number(number_text, "a fraction of the window (0.85 or 85%)").map_err(err)?;
                let f = f / scale;
                if !(0.2..=0.98).contains(&f) {
                    return Err(err(format!(
                        "{text} is outside 0.2..0.98 of the window (20%..98%)"
                    )));
                }
                self.compact_at = Some(f);
            }
            // Only the two TOML spellings: `"yes"` or `1` read as true in one place and as a
            // typo in another would be a surprise in a security setting.
            "network" => {
                self.network = Some(match value.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(err(format!("'{value}' is not true or false"))),
                })
            }
            "login_shell" => {
                self.login_shell = Some(match value.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(err(format!("'{value}' is not true or false"))),
                })
            }
            "writable" => {
                self.writable = Some(
                    split_list(value)
                        .into_iter()
                        .map(|v| path(&v, base))
                        .collect(),
                )
            }
            "max_processes" => {
                let n: u32 = number(value, "a positive whole number").map_err(err)?;
                if n < 16 {
                    return Err(err(format!("{n} is too few for a shell (at least 16)")));
                }
                self.max_processes = Some(n);
            }
            "sandbox_backend" => {
                self.sandbox_backend = Some(value.trim().parse().map_err(err)?);
            }
            "max_memory" => {
                let n: u64 = number(value, "a whole number of MiB").map_err(err)?;
                if n < 64 {
                    return Err(err(format!(
                        "{n} MiB is too little for a shell (at least 64)"
                    )));
                }
                self.max_memory = Some(n);
            }
            "env_keep" => self.env_keep = Some(split_list(value)),
            "env_drop" => self.env_drop = Some(split_list(value)),
            "allow" => {
                let entries = split_list(value);
                for e in &entries {
                    if command_prefix(e).is_none() {
                        return Err(err(format!(
                            "allow entry {e:?} is empty or has unbalanced quotes"
                        )));
                    }
                }
                self.allow = Some(entries);
            }
            "tools" => self.tools = Some(split_list(value)),
            k if expert_key(k).is_some_and(|(_, name)| name == "tools") => {
                if let Some((i, _)) = expert_key(k) {
                    self.expert_tools[i] = Some(split_list(value));
                }
            }
            k if expert_key(k).is_some_and(|(_, name)| name == "system_prompt") => {
                if let Some((i, _)) = expert_key(k) {
                    self.expert_system_prompt[i] = Some(path(value, base));
                }
            }
            "theme" => {
                let v = value.trim();
                if v.is_empty() {
                    return Err(err("the theme name is empty".into()));
                }
                self.theme = Some(v.to_string());
            }
            _ => {
                return Err(err(unknown_key(key).unwrap_or_else(|| "unknown key".into())));
            }
        }
        Ok(())
    }

    /// Lays `top` over `self`: every key `top` sets wins.
    pub fn overlay(&mut self, top: Settings) {
        macro_rules! take {
            ($($f:ident),*) => { $( if top.$f.is_some() { self.$f = top.$f; } )* };
        }
        take!(
            endpoint,
            api_key_env,
            mode,
            model,
            profile,
            expert,
            workspace,
            reasoning,
            approval,
            sandbox,
            session_dir,
            local,
            device,
            max_turns,
            timeout,
            system_prompt,
            temperature,
            top_p,
            seed,
            max_tokens,
            route_constraint,
            speculate,
            follow_ups,
            context_window,
            compact_at,
            theme,
            network,
            login_shell,
            writable,
            max_processes,
            sandbox_backend,
            max_memory,
            env_keep,
            env_drop,
            allow,
            tools
        );
        let (mine, theirs) = (&mut self.backend_timeouts, top.backend_timeouts);
        for (m, t) in [
            (&mut mine.connect, theirs.connect),
            (&mut mine.request, theirs.request),
            (&mut mine.idle, theirs.idle),
        ] {
            if t.is_some() {
                *m = t;
            }
        }
        for (mine, theirs) in self.expert_tools.iter_mut().zip(top.expert_tools) {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
        for (mine, theirs) in self
            .expert_system_prompt
            .iter_mut()
            .zip(top.expert_system_prompt)
        {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
    }

    /// Fills defaults and checks what only makes sense across keys.
    pub fn resolve(self, cwd: &Path) -> Result<Config, ConfigError> {
        let workspace = match self.workspace {
            Some(w) if w.is_relative() => cwd.join(w),
            Some(w) => w,
            None => cwd.to_path_buf(),
        };
        if !workspace.is_dir() {
            return Err(ConfigError {
                source_name: "configuration".into(),
                key: "workspace".into(),
                reason: format!("{} is not a folder", workspace.display()),
            });
        }
        let workspace = workspace.canonicalize().unwrap_or(workspace);
        Ok(Config {
            endpoint: self.endpoint,
            api_key_env: self.api_key_env.unwrap_or_else(|| "BATON_API_KEY".into()),
            mode: self.mode.unwrap_or_default(),
            model: self.model,
            profile: self.profile,
            expert: self.expert,
            workspace,
            reasoning: self.reasoning,
            approval: self.approval,
            sandbox: self.sandbox.unwrap_or_default(),
            session_dir: self.session_dir.unwrap_or_else(default_session_dir),
            local: self.local,
            device: self.device.unwrap_or_default(),
            max_turns: self.max_turns,
            timeout_secs: self.timeout,
            backend_timeouts: self.backend_timeouts,
            system_prompt: self.system_prompt,
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
            max_tokens: self.max_tokens,
            route_constraint: self.route_constraint.unwrap_or_default(),
            speculate: self.speculate.unwrap_or_default(),
            follow_ups: self.follow_ups.unwrap_or_default(),
            context_window: self.context_window,
            compact_at: self.compact_at,
            theme: self.theme,
            network: self.network.unwrap_or(false),
            login_shell: self.login_shell.unwrap_or(false),
            writable: self.writable.unwrap_or_default(),
            max_processes: self.max_processes,
            sandbox_backend: self.sandbox_backend.unwrap_or_default(),
            max_memory: self.max_memory,
            env_keep: self.env_keep.unwrap_or_default(),
            env_drop: self.env_drop.unwrap_or_default(),
            allow: self.allow.unwrap_or_default(),
            expert_tools: self.expert_tools,
            expert_system_prompt: self.expert_system_prompt,
            tools: self.tools,
            files: Vec::new(),
            // A flag only (`--no-color`); NO_COLOR in the environment reaches commands as is.
            no_color: false,
            // A flag only (`--no-hooks`).
            no_hooks: false,
            // A flag only (`--defer-summary`).
            defer_summary: false,
            warnings: Vec::new(),
            mcp_servers: Vec::new(),
        })
    }
}
