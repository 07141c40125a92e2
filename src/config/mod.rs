//! Configuration: flags > env > project `.baton/config.toml` > user config > defaults.
//! A project file lowers safety settings only from a folder the user trusted (`project`,
//! `trust`).
//!
//! Every setting has one name used everywhere: the config key (`api_key_env`), the env var
//! (`BATON_API_KEY_ENV`) and the long flag (`--api-key-env`). Values from every source are
//! parsed by the same function, so a bad value reads the same wherever it came from, and each
//! error names the source (file or variable), the key and the reason. A file's value reaches
//! it with its TOML type (`Input`): a number there is written as a number, not as a string.

pub mod commands;
pub mod defs;
pub mod dotfiles;
mod input;
pub mod mcp;
mod project;
mod settings;
mod trust;
pub mod workspace;

pub use input::Input;
pub use mcp::{McpServer, McpTransport};
pub use settings::{Settings, command_prefix, not_a_folder};
pub use trust::{
    ProjectFiles, TrustEntry, TrustList, TrustStatus, TrustedFiles, TrustedTexts, config_digest,
    folder_config, hooks_path, read_hooks_file, trust_list_path,
};

use std::path::{Path, PathBuf};

use crate::protocol::{
    ApprovalPolicy, DeviceChoice, Expert, Mode, ReasoningEffort, RouteConstraint, SandboxMode,
    Speculate,
};

/// A configuration problem, always naming where it came from.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{source_name}: key `{key}`: {reason}")]
pub struct ConfigError {
    /// The file path, `environment variable BATON_X` or `flag --x`.
    pub source_name: String,
    pub key: String,
    pub reason: String,
}

/// A file-level problem (unreadable, not TOML).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ConfigLoadError {
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error(transparent)]
    Key(#[from] ConfigError),
}

/// The remote backend's timeouts in seconds (`connect_timeout`, `request_timeout`,
/// `idle_timeout`); `None` keeps the backend's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackendTimeouts {
    pub connect: Option<u64>,
    pub request: Option<u64>,
    pub idle: Option<u64>,
}

/// The fully resolved configuration the rest of baton runs on.
#[derive(Debug, Clone)]
pub struct Config {
    pub endpoint: Option<String>,
    /// Name of the env var holding the API key (never the key itself).
    pub api_key_env: String,
    pub mode: Mode,
    pub model: Option<String>,
    pub profile: Option<PathBuf>,
    pub expert: Option<Expert>,
    pub workspace: PathBuf,
    pub reasoning: Option<ReasoningEffort>,
    /// `None` = the frontend's default (ask interactively, never headless).
    pub approval: Option<ApprovalPolicy>,
    pub sandbox: SandboxMode,
    pub session_dir: PathBuf,
    pub local: Option<PathBuf>,
    pub device: DeviceChoice,
    pub max_turns: Option<u32>,
    pub timeout_secs: Option<u64>,
    pub backend_timeouts: BackendTimeouts,
    /// A file whose text replaces the built-in system prompt of the experts.
    pub system_prompt: Option<PathBuf>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub seed: Option<u64>,
    pub max_tokens: Option<u32>,
    pub route_constraint: RouteConstraint,
    /// Whether a new user turn's answer hop is sent with its route hop (`mol` mode, and
    /// `baton serve`).
    pub speculate: Speculate,
    /// Whether a short follow-up stays with the previous expert (`mol` mode, `baton serve`).
    pub follow_ups: crate::protocol::FollowUps,
    pub context_window: Option<u64>,
    /// Compaction threshold as a fraction of the context window (`None` = 0.85).
    pub compact_at: Option<f64>,
    /// TUI colour theme (a built-in name or a file in ~/.config/baton/themes/).
    pub theme: Option<String>,
    /// Commands may use the network (`[sandbox] network`).
    pub network: bool,
    /// Commands run in a login shell (`bash -lc`, reads the profile); default `bash -c`.
    pub login_shell: bool,
    /// Extra writable folders for commands (`[sandbox] writable`).
    pub writable: Vec<PathBuf>,
    /// Paths of the home commands may read besides its toolchains (`[sandbox] readable`).
    pub readable: Vec<PathBuf>,
    /// Host unix sockets (or their folders) commands may connect to
    /// (`[sandbox] allow_unix_sockets`).
    pub unix_sockets: Vec<PathBuf>,
    /// Live processes a command may have (`[sandbox] max_processes`).
    pub max_processes: Option<u32>,
    /// What builds the sandbox (`[sandbox] backend`; `landlock` is the named weaker mode).
    pub sandbox_backend: crate::protocol::SandboxBackend,
    /// Memory bound of one command in MiB (`[sandbox] max_memory`; default half of RAM).
    pub max_memory: Option<u64>,
    /// Variables passed to commands although named like secrets (`[sandbox] env_keep`).
    pub env_keep: Vec<String>,
    /// More variables kept from commands (`[sandbox] env_drop`).
    pub env_drop: Vec<String>,
    /// Command prefixes that run without asking (`[approval] allow`).
    pub allow: Vec<String>,
    /// The tools offered to the model, by name; `None` = all (small context windows).
    pub tools: Option<Vec<String>>,
    /// Per expert (L0..L3): the tools it is offered (`l0_tools` …); `None` = baton's default.
    pub expert_tools: [Option<Vec<String>>; 4],
    /// Per expert: a file whose text is its system prompt (`l0_system_prompt` …).
    pub expert_system_prompt: [Option<PathBuf>; 4],
    /// The files that were read, in order of increasing precedence (for `doctor`).
    pub files: Vec<PathBuf>,
    /// The keys some layer sets, each with its value and where it came from (for `doctor`).
    pub origins: Vec<Origin>,
    /// `--no-color`: commands get `NO_COLOR=1` as well as the TUI losing its colours.
    pub no_color: bool,
    /// `--no-hooks`: no hook command runs in this run.
    pub no_hooks: bool,
    /// `--defer-summary` (with `--exec`): the run ends without its summary hop.
    pub defer_summary: bool,
    /// What the user must be told about the configuration before anything runs: project
    /// settings withheld because their folder is not trusted, project files not read.
    pub warnings: Vec<String>,
    /// The MCP servers to start: the user's, then those of a trusted project (`mcp`).
    pub mcp_servers: Vec<McpServer>,
}

impl Config {
    /// The API key from the environment, if the named variable is set and non-empty.
    pub fn api_key(&self) -> Option<String> {
        std::env::var(&self.api_key_env)
            .ok()
            .filter(|k| !k.trim().is_empty())
    }
}

/// Where the user config lives: `$XDG_CONFIG_HOME/baton/config.toml`.
pub fn user_config_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("baton").join("config.toml"))
}

/// The default session folder: `$XDG_DATA_HOME/baton/sessions`.
pub fn default_session_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("baton")
        .join("sessions")
}

/// The `.baton/config.toml` that applies to `workspace`: in the workspace or the nearest
/// folder above it, above the workspace only inside the user's home or in a trusted folder.
pub fn project_config_path(workspace: &Path) -> Option<PathBuf> {
    let trust = TrustList::load().unwrap_or_default();
    project::find(workspace, dirs::home_dir().as_deref(), &trust)
        .folder
        .map(|f| folder_config(&f))
}

/// Reads the settings of one TOML file. A missing file is no settings; anything else wrong
/// with it is an error naming the file, and the line (and column, for TOML syntax) it is on.
pub fn read_file(path: &Path) -> Result<Settings, ConfigLoadError> {
    all_or_first_error(parse_file(path, &trust::read_project_file(path)))
}

/// Settings, and the mistakes of the keys left out of them.
type Partial = (Settings, Vec<ConfigLoadError>);

/// The settings when no key was wrong, else the first mistake.
fn all_or_first_error(read: Result<Partial, ConfigLoadError>) -> Result<Settings, ConfigLoadError> {
    let (settings, mistakes) = read?;
    match mistakes.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(settings),
    }
}

/// The settings of bytes already read from `path` (what a trust check hashed): an error when
/// the file cannot be used at all (unreadable, not TOML, a bad `[mcp_servers]`), else every
/// good key, with the mistake of each key left out.
fn parse_file(path: &Path, read: &std::io::Result<Vec<u8>>) -> Result<Partial, ConfigLoadError> {
    let text = trust::text_of(read).map_err(|e| ConfigLoadError::File {
        path: path.display().to_string(),
        reason: format!("cannot read: {e}"),
    })?;
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        let at = e
            .span()
            .map(|span| {
                let (line, column) = line_and_column(text, span.start);
                format!(":{line}:{column}")
            })
            .unwrap_or_default();
        ConfigLoadError::File {
            path: format!("{}{at}", path.display()),
            reason: format!("not valid TOML: {}", e.message().trim_end()),
        }
    })?;
    let base = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let mut settings = Settings::default();
    let mut mistakes = Vec::new();
    // Structured, read by `mcp::servers_from_table`; checked here so a mistake in it stops
    // the load like any other key's.
    mcp::servers_from_table(&table, path)?;
    for (key, value) in &flatten_sections(&table) {
        if let Err(e) = parse_key(&mut settings, key, value, text, path, &base) {
            mistakes.push(e);
        }
    }
    Ok((settings, mistakes))
}

/// One key of a config file into `settings`. Its value reaches the setting's parser with its
/// TOML type, so `temperature = "0.5"` (a string) is not taken for a number.
fn parse_key(
    settings: &mut Settings,
    key: &String,
    value: &toml::Value,
    text: &str,
    path: &Path,
    base: &Path,
) -> Result<(), ConfigLoadError> {
    if key == mcp::SECTION {
        return Ok(());
    }
    // `path:line`, so an editor can jump to the key.
    let source = match key_line(text, key) {
        Some(line) => format!("{}:{line}", path.display()),
        None => path.display().to_string(),
    };
    if let Some(reason) = settings::unknown_key(key) {
        return Err(ConfigError {
            source_name: source,
            key: key.clone(),
            reason,
        }
        .into());
    }
    settings.set_input(key, Input::Toml(value), &source, Some(base))?;
    Ok(())
}

/// The 1-based line and column (in characters) of a byte offset.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut line = 1;
    let mut column = 1;
    for (i, c) in text.char_indices() {
        if i >= offset {
            break;
        }
        if c == '\n' {
            line += 1;
            column = 1;
        } else {
            column += 1;
        }
    }
    (line, column)
}

/// The 1-based line a key (flat, `sandbox.network` or a section key's flat name) is set on,
/// found by reading the lines as written: `key =` under the right `[section]` header, or a
/// dotted `section.key =`. `None` when it cannot tell (the message then names the file only).
fn key_line(text: &str, flat: &str) -> Option<usize> {
    // The names the key may be written as: (section, key in it).
    let mut written: Vec<(&str, &str)> = match flat.split_once('.') {
        Some((section, key)) => vec![(section, key)],
        None => vec![("", flat)],
    };
    written.extend(defs::find(flat).and_then(|d| d.section));
    let mut section = String::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            section = header.trim_end_matches(']').trim().to_string();
            continue;
        }
        let Some((name, _)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim().trim_matches('"');
        let (in_section, key) = match name.split_once('.') {
            Some((s, k)) if section.is_empty() => (s.trim(), k.trim()),
            _ => (section.as_str(), name),
        };
        if written.iter().any(|&(s, k)| s == in_section && k == key) {
            return Some(n + 1);
        }
    }
    None
}

/// The section tables (`[sandbox]`, `[approval]`) as the flat keys their entries stand for
/// (`[sandbox] mode` is `sandbox`). An entry that stands for none keeps a dotted name, so the
/// error names it.
fn flatten_sections(table: &toml::Table) -> Vec<(String, toml::Value)> {
    let mut out = Vec::new();
    for (key, value) in table {
        match (key.as_str(), value) {
            (name, toml::Value::Table(section))
                if defs::sections().iter().any(|(s, _)| *s == name) =>
            {
                for (sub, v) in section {
                    let flat = match defs::flat_key(key, sub) {
                        Some(flat) => flat.to_string(),
                        None => format!("{key}.{sub}"),
                    };
                    out.push((flat, v.clone()));
                }
            }
            _ => out.push((key.clone(), value.clone())),
        }
    }
    out
}

/// Reads every `BATON_*` variable that names a setting. Other `BATON_*` variables (the API key,
/// `BATON_LOG`) are left alone.
pub fn read_env() -> Result<Settings, ConfigError> {
    let (settings, mistakes) = env_settings();
    match mistakes.into_iter().next() {
        Some(first) => Err(first),
        None => Ok(settings),
    }
}

/// Every good `BATON_*` variable, and the mistake of each one left out.
fn env_settings() -> (Settings, Vec<ConfigError>) {
    let mut settings = Settings::default();
    let mut mistakes = Vec::new();
    for def in defs::DEFS {
        let var = def.env();
        if let Ok(value) = std::env::var(&var) {
            if value.is_empty() {
                continue;
            }
            let source = format!("environment variable {var}");
            if let Err(e) = settings.set(def.key, &value, &source, None) {
                mistakes.push(e);
            }
        }
    }
    (settings, mistakes)
}

/// Resolves the configuration from all layers. `flags` holds what was given on the command line.
pub fn load(flags: &Settings) -> Result<Config, ConfigLoadError> {
    load_layers(flags, None)
}

/// `load` for `baton doctor`: a key with a mistake (or a file that cannot be read as TOML) is
/// left out and its error added to `problems`, so the other checks still run on what is left
/// (a workspace that is not a folder falls back to the current one). Fails only when not even
/// that resolves.
pub fn load_reporting(
    flags: &Settings,
    problems: &mut Vec<ConfigLoadError>,
) -> Result<Config, ConfigLoadError> {
    load_layers(flags, Some(problems))
}

/// Where a setting in effect came from (`baton doctor` lists them).
#[derive(Debug, Clone, PartialEq)]
pub struct Origin {
    pub key: &'static str,
    pub value: String,
    /// `flag --x`, `environment variable BATON_X` or the file's path.
    pub source: String,
}

/// A settings layer, for naming where a value came from.
enum Layer<'a> {
    Flags,
    Env,
    File(Option<&'a Path>),
}

/// Each key some layer sets, with the value and the source of the layer that wins (`layers`
/// from the highest precedence down).
fn origins(layers: &[(&Settings, Layer)]) -> Vec<Origin> {
    defs::DEFS
        .iter()
        .filter_map(|def| {
            let (settings, layer) = layers.iter().find(|(s, _)| (def.slot.is_set)(s))?;
            let source = match layer {
                Layer::Flags => format!("flag {}", def.flag_name().unwrap_or_default()),
                Layer::Env => format!("environment variable {}", def.env()),
                Layer::File(path) => path.map(|p| p.display().to_string()).unwrap_or_default(),
            };
            Some(Origin {
                key: def.key,
                value: (def.slot.show)(settings).unwrap_or_default(),
                source,
            })
        })
        .collect()
}

fn load_layers(
    flags: &Settings,
    mut problems: Option<&mut Vec<ConfigLoadError>>,
) -> Result<Config, ConfigLoadError> {
    // A mistake: an error for `load`; for `doctor` a listed problem, and the layer without
    // the key (or without the whole file, when it could not be parsed).
    let mut layer = |result: Result<Partial, ConfigLoadError>| match (result, problems.as_mut()) {
        (Ok((s, mistakes)), Some(list)) => {
            list.extend(mistakes);
            Ok(s)
        }
        (result, None) => all_or_first_error(result),
        (Err(e), Some(list)) => {
            list.push(e);
            Ok(Settings::default())
        }
    };
    let (env, env_mistakes) = env_settings();
    let env = layer(Ok((
        env,
        env_mistakes.into_iter().map(Into::into).collect(),
    )))?;
    let mut files = Vec::new();

    let mut mcp_servers = Vec::new();
    let user_path = user_config_path().filter(|p| p.is_file());
    let user = match &user_path {
        Some(p) => {
            let s = parse_file(p, &trust::read_project_file(p));
            if s.is_ok() {
                mcp::merge(&mut mcp_servers, mcp::read_toml(p).unwrap_or_default());
                files.push(p.clone());
            }
            layer(s)?
        }
        None => Settings::default(),
    };

    // The project file is looked up from the workspace as the flag, env or user file give it.
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let workspace_hint = flags
        .workspace
        .clone()
        .or_else(|| env.workspace.clone())
        .or_else(|| user.workspace.clone())
        .unwrap_or_else(|| cwd.clone());
    let workspace_hint = cwd.join(workspace_hint);
    let mut warnings = Vec::new();
    // An unreadable trust list trusts nothing: the project file may then only raise safety.
    let trust = match TrustList::load() {
        Ok(t) => t,
        Err(e) => {
            warnings.push(format!("{e} (no folder is trusted until it is fixed)"));
            TrustList::default()
        }
    };
    let lookup = project::find(&workspace_hint, dirs::home_dir().as_deref(), &trust);
    warnings.extend(
        lookup
            .passed_over
            .iter()
            .map(|f| project::passed_over_warning(f)),
    );
    // The folder a project's `.mcp.json` is read from: the one whose `.baton/` applies, else
    // the workspace itself.
    let mcp_folder = lookup.folder.clone().unwrap_or_else(|| {
        workspace_hint
            .canonicalize()
            .unwrap_or(workspace_hint.clone())
    });
    // Read once: the trust check hashes the very bytes parsed below, so a file swapped in
    // between (by a command still running in another session) is never used as trusted.
    let project_files = ProjectFiles::read(&mcp_folder);
    // Of `mcp_folder`, which is also the folder whose `.baton/` applies (when one does): the
    // digest hashes the servers' programs too, so it is taken once.
    let project_status = trust.status_of(&mcp_folder, &project_files);
    let mut project_servers = Vec::new();
    let json = mcp_folder.join(mcp::PROJECT_JSON);
    if json.is_file() {
        match mcp::parse_json(&json, &project_files.servers) {
            Ok(servers) => {
                files.push(json);
                mcp::merge(&mut project_servers, servers);
            }
            Err(e) => {
                layer(Err(e))?;
            }
        }
    }
    let project_path = lookup.folder.as_deref().map(folder_config);
    let project = match lookup.folder {
        Some(folder) => {
            let p = folder_config(&folder);
            let s = parse_file(&p, &project_files.config);
            if s.is_ok() {
                files.push(p.clone());
                mcp::merge(
                    &mut project_servers,
                    mcp::parse_toml(&p, &project_files.config).unwrap_or_default(),
                );
            }
            let mut s = layer(s)?;
            let status = project_status;
            if status != TrustStatus::Trusted {
                let mut base = user.clone();
                base.overlay(env.clone());
                let withheld = project::withhold_lowering(&mut s, &base, &folder);
                // Keys a flag or variable sets anyway would not have applied: no warning.
                let shown: Vec<&str> = withheld
                    .into_iter()
                    .filter(|k| !project::sets(&env, k) && !project::sets(flags, k))
                    .collect();
                if !shown.is_empty() {
                    warnings.push(project::withheld_warning(&p, &folder, status, &shown));
                }
            }
            s
        }
        None => Settings::default(),
    };
    if !project_servers.is_empty() {
        match project_status {
            TrustStatus::Trusted => mcp::merge(&mut mcp_servers, project_servers),
            status => {
                let names: Vec<String> = project_servers.iter().map(|s| s.name.clone()).collect();
                warnings.push(mcp::withheld_warning(
                    &mcp_folder,
                    &names,
                    status == TrustStatus::Changed,
                ));
            }
        }
    }

    let origins = origins(&[
        (flags, Layer::Flags),
        (&env, Layer::Env),
        (&project, Layer::File(project_path.as_deref())),
        (&user, Layer::File(user_path.as_deref())),
    ]);
    let mut merged = Settings::default();
    merged.overlay(user);
    merged.overlay(project);
    merged.overlay(env);
    merged.overlay(flags.clone());
    let mut config = match (merged.clone().resolve(&cwd), problems) {
        (Ok(c), _) => c,
        (Err(e), Some(list)) => {
            list.push(e.into());
            merged.workspace = None;
            merged.resolve(&cwd)?
        }
        (Err(e), None) => return Err(e.into()),
    };
    config.files = files;
    config.origins = origins;
    let mut roots = vec![config.workspace.clone()];
    roots.extend(config.writable.iter().cloned());
    warnings.extend(crate::protocol::host_programs::path_warning(&roots));
    crate::protocol::host_programs::add_writable_roots(&roots);
    config.warnings = warnings;
    config.mcp_servers = mcp_servers;
    Ok(config)
}

#[cfg(test)]
mod tests;
