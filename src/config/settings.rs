//! One layer of settings (a file, the environment or the flags) and how layers merge.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError, Input, default_session_dir, defs};
use crate::protocol::{
    ApprovalPolicy, DeviceChoice, Expert, Mode, ReasoningEffort, RouteConstraint, SandboxMode,
    Speculate,
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
    pub readable: Option<Vec<PathBuf>>,
    pub unix_sockets: Option<Vec<PathBuf>>,
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

/// Parses a configured command prefix such as `"cargo test"` into words (shell quoting
/// allowed). `None` for an empty or unparsable prefix.
pub fn command_prefix(prefix: &str) -> Option<Vec<String>> {
    shlex::split(prefix).filter(|w| !w.is_empty())
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

/// Why `key` (flat, or `section.key` as a config file writes it) is not a setting, with the
/// nearest known name when one is a typo away; `None` for a known key.
pub fn unknown_key(key: &str) -> Option<String> {
    if let Some((section, sub)) = key.split_once('.') {
        let sections = defs::sections();
        let Some((_, keys)) = sections.iter().find(|(s, _)| *s == section) else {
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
    if defs::find(key).is_some() {
        return None;
    }
    let sections: Vec<String> = defs::sections()
        .iter()
        .map(|(s, _)| format!("[{s}]"))
        .collect();
    Some(match nearest(key, defs::keys()) {
        Some(k) => format!("unknown key, did you mean `{k}`?"),
        None => format!(
            "unknown key (known keys: {}; sections {})",
            defs::keys().collect::<Vec<_>>().join(", "),
            sections.join(" and ")
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
    /// Sets one key from its text form (a flag, a variable). `base` resolves relative paths.
    pub fn set(
        &mut self,
        key: &str,
        value: &str,
        source: &str,
        base: Option<&Path>,
    ) -> Result<(), ConfigError> {
        self.set_input(key, Input::Text(value), source, base)
    }

    /// Sets one key from a value as its source gives it (a config file's typed TOML value).
    /// `base` resolves relative paths (a file's folder).
    pub fn set_input(
        &mut self,
        key: &str,
        value: Input,
        source: &str,
        base: Option<&Path>,
    ) -> Result<(), ConfigError> {
        let err = |reason: String| ConfigError {
            source_name: source.to_string(),
            key: key.to_string(),
            reason,
        };
        let def = defs::find(key)
            .ok_or_else(|| err(unknown_key(key).unwrap_or_else(|| "unknown key".into())))?;
        (def.slot.set)(self, value, base).map_err(err)
    }

    /// Lays `top` over `self`: every key `top` sets wins.
    pub fn overlay(&mut self, top: Settings) {
        for def in defs::DEFS {
            (def.slot.take)(self, &top);
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
        // The folders commands get are remembered as they resolve now, before any command
        // could rename one on the way (the sandbox binds what is remembered).
        let workspace = crate::untrusted_fs::resolved_once(&workspace).unwrap_or(workspace);
        for folder in self.writable.iter().chain(&self.readable).flatten() {
            if folder.is_absolute() {
                crate::untrusted_fs::resolved_once(folder);
            }
        }
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
            readable: self.readable.unwrap_or_default(),
            unix_sockets: self.unix_sockets.unwrap_or_default(),
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
            origins: Vec::new(),
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
