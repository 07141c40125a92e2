//! The user's trusted folders: the only project folders whose `.baton/config.toml` may lower
//! baton's safety settings. The list lives in the user's config folder (`trusted.toml`, never
//! inside a workspace) and records, per folder, a SHA-256 of the config file as it was when
//! the user trusted it: a file rewritten afterwards (by a command of a session, say) loses its
//! power until the user trusts it again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::ConfigLoadError;

/// Where the list lives: `$XDG_CONFIG_HOME/baton/trusted.toml`.
pub fn trust_list_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("baton").join("trusted.toml"))
}

/// The project config file of a folder.
pub fn folder_config(folder: &Path) -> PathBuf {
    folder.join(".baton").join("config.toml")
}

/// One trusted folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustEntry {
    /// The folder holding `.baton/`, canonical.
    pub path: PathBuf,
    /// SHA-256 (hex) of its `.baton/config.toml` when trusted; `None`: there was no file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_sha256: Option<String>,
    /// SHA-256 (hex) of its `.baton/hooks.json` when trusted; `None`: there was no file. The
    /// hooks run outside the sandbox, so a hooks file that appears or changes after the user
    /// trusted the folder (a `git pull`, a checkout) must not run until it is trusted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks_sha256: Option<String>,
    /// When the user trusted it (RFC 3339), for `baton trust --list`.
    #[serde(default)]
    pub trusted_at: String,
    /// The files' text as the user saw it when trusting, so the next `baton trust` shows what
    /// changed since (each kept up to [`KEPT_TEXT_BYTES`]).
    #[serde(default, skip_serializing_if = "TrustedTexts::is_empty")]
    pub texts: TrustedTexts,
}

/// The text of a trusted folder's project files; `None`: no such file, or too large to keep.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustedTexts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_json: Option<String>,
}

impl TrustedTexts {
    pub fn is_empty(&self) -> bool {
        self.config.is_none() && self.hooks.is_none() && self.mcp_json.is_none()
    }
}

/// The most text of one file a trust entry keeps for the next diff.
pub const KEPT_TEXT_BYTES: usize = 64 * 1024;

/// A folder's project files as `baton trust` shows and hashes them: each read once, so what
/// the user is shown is what the entry's digests cover.
#[derive(Debug)]
pub struct TrustedFiles {
    pub project: ProjectFiles,
    /// `.baton/hooks.json`.
    pub hooks: std::io::Result<Vec<u8>>,
}

impl TrustedFiles {
    pub fn read(folder: &Path) -> TrustedFiles {
        TrustedFiles {
            project: ProjectFiles::read(folder),
            hooks: read_project_file(&hooks_path(folder)),
        }
    }

    /// The files' text, each when it is text of at most [`KEPT_TEXT_BYTES`].
    pub fn texts(&self) -> TrustedTexts {
        let kept = |read: &std::io::Result<Vec<u8>>| {
            text_of(read)
                .ok()
                .filter(|t| t.len() <= KEPT_TEXT_BYTES)
                .map(str::to_string)
        };
        TrustedTexts {
            config: kept(&self.project.config),
            hooks: kept(&self.hooks),
            mcp_json: kept(&self.project.servers),
        }
    }
}

/// What the list says of one folder's config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustStatus {
    /// Trusted, and the file is the one the user trusted.
    Trusted,
    /// Trusted once, but the file changed (or appeared, or went) since.
    Changed,
    /// Not on the list.
    Untrusted,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrustList {
    #[serde(default, rename = "folder")]
    pub entries: Vec<TrustEntry>,
}

impl TrustList {
    /// Reads the list; a missing file is an empty list.
    pub fn load() -> Result<TrustList, ConfigLoadError> {
        match trust_list_path() {
            Some(path) => Self::load_from(&path),
            None => Ok(TrustList::default()),
        }
    }

    pub fn load_from(path: &Path) -> Result<TrustList, ConfigLoadError> {
        let text = match crate::untrusted_fs::read_following(path, MAX_PROJECT_FILE) {
            Ok(t) => String::from_utf8_lossy(&t).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TrustList::default()),
            Err(e) => {
                return Err(ConfigLoadError::File {
                    path: path.display().to_string(),
                    reason: format!("cannot read: {e}"),
                });
            }
        };
        toml::from_str(&text).map_err(|e| ConfigLoadError::File {
            path: path.display().to_string(),
            reason: format!("not a trust list: {}", e.message().trim_end()),
        })
    }

    /// Writes the list to its usual place (see `save_to`).
    pub fn save(&self) -> std::io::Result<PathBuf> {
        let path = trust_list_path().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotFound, "no user config folder")
        })?;
        self.save_to(&path)?;
        Ok(path)
    }

    /// Writes the list through a temp file and a rename, so a reader never sees half of it.
    pub fn save_to(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let body = toml::to_string(self).map_err(std::io::Error::other)?;
        let text = format!(
            "# Folders whose .baton/config.toml may lower baton's safety settings (sandbox,\n\
             # approval, network, credentials…). Managed with `baton trust`; a config file\n\
             # changed since it was trusted is not trusted until `baton trust` is run again.\n\n{body}"
        );
        // Owner-only, as before; a link at the name is replaced, not written through.
        crate::untrusted_fs::write_file(path, &[], text.as_bytes(), Some(0o600))
    }

    /// The entry for a folder (canonical path), if any.
    pub fn entry(&self, folder: &Path) -> Option<&TrustEntry> {
        let folder = canonical(folder);
        self.entries.iter().find(|e| e.path == folder)
    }

    /// Whether `folder`'s config file may lower safety settings now.
    pub fn status(&self, folder: &Path) -> TrustStatus {
        self.status_of(folder, &ProjectFiles::read(folder))
    }

    /// [`status`](Self::status) of `folder`'s project files as `files` holds them: the
    /// bytes the caller goes on to parse and use.
    pub fn status_of(&self, folder: &Path, files: &ProjectFiles) -> TrustStatus {
        match self.entry(folder) {
            None => TrustStatus::Untrusted,
            Some(e) if e.config_sha256 == files.digest(folder) => TrustStatus::Trusted,
            Some(_) => TrustStatus::Changed,
        }
    }

    /// Whether `folder`'s `.baton/hooks.json` may run now: the folder is trusted and the hooks
    /// file is byte for byte the one the user trusted (absent then and now counts as the same).
    pub fn hooks_status(&self, folder: &Path) -> TrustStatus {
        self.hooks_status_of(folder, &read_hooks_file(folder))
    }

    /// [`hooks_status`](Self::hooks_status) of the hooks file's bytes as `hooks` holds them:
    /// the bytes the caller goes on to parse and run.
    pub fn hooks_status_of(&self, folder: &Path, hooks: &std::io::Result<Vec<u8>>) -> TrustStatus {
        match self.status(folder) {
            TrustStatus::Trusted => {
                let same = self
                    .entry(folder)
                    .is_some_and(|e| e.hooks_sha256 == hooks_digest_of(hooks));
                if same {
                    TrustStatus::Trusted
                } else {
                    TrustStatus::Changed
                }
            }
            other => other,
        }
    }

    /// Trusts `folder` with its config and hooks files as they are now (replacing an older
    /// entry).
    pub fn trust(&mut self, folder: &Path) -> TrustEntry {
        let files = TrustedFiles::read(folder);
        self.trust_files(folder, &files)
    }

    /// [`trust`](Self::trust) of the files as `files` holds them: what the user was shown.
    pub fn trust_files(&mut self, folder: &Path, files: &TrustedFiles) -> TrustEntry {
        let folder = canonical(folder);
        self.entries.retain(|e| e.path != folder);
        let entry = TrustEntry {
            config_sha256: files.project.digest(&folder),
            hooks_sha256: hooks_digest_of(&files.hooks),
            texts: files.texts(),
            path: folder,
            trusted_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        self.entries.push(entry.clone());
        entry
    }

    /// Removes `folder`; whether it was on the list.
    pub fn remove(&mut self, folder: &Path) -> bool {
        let folder = canonical(folder);
        let before = self.entries.len();
        self.entries.retain(|e| e.path != folder);
        self.entries.len() != before
    }
}

/// SHA-256 (hex) of `folder`'s `.baton/config.toml`, and of its `.mcp.json` when it has one
/// (the servers it declares run with the user's rights, so trusting the folder trusts that
/// file as it is now); `None` when there is neither.
pub fn config_digest(folder: &Path) -> Option<String> {
    ProjectFiles::read(folder).digest(folder)
}

/// A folder's `.baton/config.toml` and `.mcp.json`, each read once. Start-up hashes, parses
/// and uses these same bytes: reading the files again after the trust check would let a
/// command still running in another session swap one in between.
#[derive(Debug)]
pub struct ProjectFiles {
    /// `.baton/config.toml` (see [`read_project_file`]).
    pub config: std::io::Result<Vec<u8>>,
    /// `.mcp.json`.
    pub servers: std::io::Result<Vec<u8>>,
}

impl ProjectFiles {
    pub fn read(folder: &Path) -> ProjectFiles {
        ProjectFiles {
            config: read_project_file(&folder_config(folder)),
            servers: read_project_file(&folder.join(super::mcp::PROJECT_JSON)),
        }
    }

    /// The digest [`config_digest`] gives for these bytes.
    pub fn digest(&self, folder: &Path) -> Option<String> {
        let config = digest_input(&self.config);
        let servers = digest_input(&self.servers);
        let mut hasher = Sha256::new();
        match (config, servers) {
            (None, None) => return None,
            // Alone, config.toml hashes as it always did: existing trust entries stay valid.
            (Some(config), None) => hasher.update(&config),
            (config, Some(servers)) => {
                hasher.update(config.unwrap_or_default());
                hasher.update(b"\0.mcp.json\0");
                hasher.update(&servers);
            }
        }
        // The servers' programs in the folder are writable to the model's commands: trust
        // covers those files as they are now, too (the servers run in the sandbox, but with
        // `--sandbox off` outside it).
        for path in server_programs(folder, self) {
            hasher.update(b"\0program\0");
            hasher.update(path.as_os_str().as_encoded_bytes());
            hasher.update(b"\0");
            hash_program(&mut hasher, &path);
        }
        Some(
            hasher
                .finalize()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        )
    }
}

/// The text of a project file read by [`read_project_file`].
pub(super) fn text_of(read: &std::io::Result<Vec<u8>>) -> std::io::Result<&str> {
    match read {
        Ok(bytes) => std::str::from_utf8(bytes)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
        Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
    }
}

/// What a digest takes of a project file: its content; `None` when it does not exist; for
/// anything else (a FIFO, a device, a folder, unreadable) a marker, so the folder counts as
/// changed rather than as having no such file.
fn digest_input(read: &std::io::Result<Vec<u8>>) -> Option<std::borrow::Cow<'_, [u8]>> {
    match read {
        Ok(bytes) => Some(bytes.into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("\0not a readable file: {e}\0").into_bytes().into()),
    }
}

/// Project files bigger than this are refused (a config or server list is a few KiB; a sparse
/// file of gigabytes a command left would otherwise be read whole into memory at every start).
const MAX_PROJECT_FILE: u64 = 4 << 20;

/// Reads a project file (`.baton/config.toml`, `.baton/hooks.json`, `.mcp.json`), symlinks
/// followed, with [`read_regular`].
pub(super) fn read_project_file(path: &Path) -> std::io::Result<Vec<u8>> {
    read_regular(path, MAX_PROJECT_FILE)
}

/// Reads `path` (symlinks followed) when it is a regular file of at most `max` bytes. Files
/// of a project may be what its commands left: a FIFO (or a link to one, or to a terminal)
/// would wait for a writer for good, so it is never opened, and a huge file is refused with
/// `FileTooLarge` before its bytes are held.
pub(super) fn read_regular(path: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    crate::untrusted_fs::read_following(path, max)
}

/// Program files bigger than this are hashed by size, inode and change time.
const MAX_PROGRAM_BYTES: u64 = 64 << 20;

/// Extensions of the scripts an interpreter named as `command` runs (`node mcp/server.js`).
const SCRIPT_EXTENSIONS: &[&str] = &[
    "js", "mjs", "cjs", "ts", "mts", "cts", "py", "pyz", "sh", "bash", "zsh", "rb", "pl", "php",
    "lua", "jar", "tcl", "r", "jl", "ps1",
];

/// The files inside `folder` that its project's stdio MCP servers (`.mcp.json` and
/// `[mcp_servers]` of `.baton/config.toml`) execute or hand to an interpreter: the program,
/// and every argument naming a regular file there that is executable or a script by its
/// extension (`./tools/db-mcp`, `node mcp/server.js`; not a database the server keeps
/// changing), relative paths read from the server's `cwd` or the folder, with their content.
/// What those files load in turn is not followed.
fn server_programs(folder: &Path, files: &ProjectFiles) -> Vec<PathBuf> {
    let json = folder.join(super::mcp::PROJECT_JSON);
    let mut servers = super::mcp::parse_json(&json, &files.servers).unwrap_or_default();
    servers
        .extend(super::mcp::parse_toml(&folder_config(folder), &files.config).unwrap_or_default());
    let folder = canonical(folder);
    let mut out: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
    for server in servers {
        let super::mcp::McpTransport::Stdio {
            command,
            args,
            cwd,
            env,
        } = server.transport
        else {
            continue;
        };
        let base = cwd.map_or_else(|| folder.clone(), |c| folder.join(c));
        let loaded = loaded_from_the_folder(&command, &args, &env, &base);
        // A `--flag=value` word is looked at as its value too (`--require=./hook.js`).
        let values: Vec<String> = args
            .iter()
            .filter_map(|a| a.split_once('=').map(|(_, value)| value.to_string()))
            .collect();
        let words = std::iter::once((command, true))
            .chain(args.into_iter().map(|a| (a, false)))
            .chain(values.into_iter().map(|v| (v, false)))
            .take(MAX_PROGRAM_WORDS)
            .chain(loaded.into_iter().map(|path| (path, true)));
        for (word, is_program) in words {
            let Ok(real) = base.join(&word).canonicalize() else {
                continue;
            };
            if !real.starts_with(&folder) || out.contains(&real) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(&real) else {
                continue;
            };
            if meta.is_file() && (is_program || runs_as_script(&real)) {
                out.insert(real);
            }
        }
    }
    out.into_iter().collect()
}

/// The files an interpreter loads by name rather than by path, relative to the folder it starts
/// in (and to the `PYTHONPATH` entries its `env` names): `python3 -m pkg.mod` (also `-mpkg.mod`,
/// through `env` or `uv run`) imports `pkg/__init__.py`, then `pkg/mod.py` or the package
/// `pkg/mod/` (`__init__.py`, `__main__.py`); `npx -y pkg` runs `node_modules/.bin/pkg`, and
/// `npx -p pkg bin` runs `node_modules/.bin/bin`; an interpreter handed a folder runs what the
/// folder names ([`run_from_folder`]); a package manager's script runner runs what
/// `package.json` says ([`package_scripts`]). `base` is the folder the server starts in.
fn loaded_from_the_folder(
    command: &str,
    args: &[String],
    env: &std::collections::BTreeMap<String, String>,
    base: &Path,
) -> Vec<String> {
    let mut words: Vec<&str> = std::iter::once(command)
        .chain(args.iter().map(String::as_str))
        .collect();
    // Launchers that run the next program: `/usr/bin/env python3 …`, `uv run python …`.
    loop {
        let program = program_name(words.first().copied().unwrap_or(""));
        let skip = match program.as_str() {
            "env" => {
                1 + words[1..]
                    .iter()
                    .take_while(|w| w.starts_with('-') || w.contains('='))
                    .count()
            }
            "uv" | "poetry" | "pipenv" | "pdm" | "hatch" if words.get(1) == Some(&"run") => 2,
            _ => break,
        };
        if skip >= words.len() {
            break;
        }
        words.drain(..skip);
    }
    let program = program_name(words.first().copied().unwrap_or(""));
    // `uv run -m mod` leaves `-m mod`: the interpreter's options with no interpreter word.
    let (python, rest): (bool, &[&str]) = if words.first() == Some(&"-m") {
        (true, &words[..])
    } else {
        (program.starts_with("python"), words.get(1..).unwrap_or(&[]))
    };
    let mut out = Vec::new();
    let module = rest
        .iter()
        .enumerate()
        .find_map(|(i, w)| match w.strip_prefix("-m") {
            Some("") => rest.get(i + 1).copied(),
            Some(joined) if !joined.starts_with('-') => Some(joined),
            _ => None,
        });
    if let Some(module) = module.filter(|_| python) {
        let mut roots = vec![String::new()];
        if let Some(path) = env.get("PYTHONPATH") {
            roots.extend(
                path.split(':')
                    .filter(|p| !p.is_empty())
                    .map(|p| format!("{}/", p.trim_end_matches('/'))),
            );
        }
        let parts: Vec<&str> = module.split('.').collect();
        for root in &roots {
            for depth in 1..parts.len() {
                out.push(format!("{root}{}/__init__.py", parts[..depth].join("/")));
            }
            let path = format!("{root}{}", parts.join("/"));
            out.push(format!("{path}.py"));
            out.push(format!("{path}/__init__.py"));
            out.push(format!("{path}/__main__.py"));
        }
    }
    if matches!(program.as_str(), "npx" | "bunx" | "pnpx") {
        let mut i = 0;
        let mut bin = None;
        while i < rest.len() {
            let w = rest[i];
            if matches!(w, "-p" | "--package") {
                i += 2;
                continue;
            }
            if !w.starts_with('-') {
                bin = Some(w);
                break;
            }
            i += 1;
        }
        let packages = rest
            .iter()
            .enumerate()
            .filter(|(_, w)| matches!(**w, "-p" | "--package"))
            .filter_map(|(i, _)| rest.get(i + 1).copied());
        for name in bin.into_iter().chain(packages) {
            // `@scope/name@1.2` runs the bin `name`.
            let unversioned = match name.rfind('@') {
                Some(at) if at > 0 => &name[..at],
                _ => name,
            };
            let bin = unversioned.rsplit('/').next().unwrap_or(unversioned);
            out.push(format!("node_modules/.bin/{bin}"));
        }
    }
    let positional = || rest.iter().copied().filter(|w| !w.starts_with('-'));
    let interpreter = if python {
        Some(Interpreter::Python)
    } else if matches!(program.as_str(), "node" | "nodejs" | "bun") {
        Some(Interpreter::Node)
    } else {
        None
    };
    if let Some(kind) = interpreter {
        for word in positional().filter(|w| base.join(w).is_dir()) {
            out.extend(run_from_folder(kind, word, base));
        }
    }
    if matches!(program.as_str(), "npm" | "pnpm" | "yarn" | "bun") {
        out.extend(package_scripts(
            &program,
            &positional().collect::<Vec<_>>(),
            base,
        ));
    }
    out
}

#[derive(Debug, Clone, Copy)]
enum Interpreter {
    Python,
    Node,
}

/// What an interpreter runs when handed the folder `dir` (relative to `base`): `python3 DIR`
/// its `__main__.py`; `node DIR` (`node .`) the file its `package.json` names as `main` (with
/// the extensions and `index` files node tries), else its `index.js`; the `package.json`
/// itself, since it decides.
fn run_from_folder(kind: Interpreter, dir: &str, base: &Path) -> Vec<String> {
    let dir = dir.trim_end_matches('/');
    match kind {
        Interpreter::Python => vec![format!("{dir}/__main__.py")],
        Interpreter::Node => {
            let manifest = package_json(&base.join(dir));
            let mut out = vec![format!("{dir}/package.json")];
            let main = manifest
                .as_ref()
                .and_then(|m| m.get("main"))
                .and_then(|m| m.as_str())
                .map(|m| m.trim_start_matches("./").trim_end_matches('/').to_string());
            for stem in main.into_iter().chain([String::from("index")]) {
                out.push(format!("{dir}/{stem}"));
                for ext in NODE_EXTENSIONS {
                    out.push(format!("{dir}/{stem}.{ext}"));
                    out.push(format!("{dir}/{stem}/index.{ext}"));
                }
            }
            out
        }
    }
}

/// The extensions node tries for a module named without one.
const NODE_EXTENSIONS: &[&str] = &["js", "mjs", "cjs", "json", "node"];

/// A folder's `package.json`, read as a project file (bounded, never a FIFO).
fn package_json(dir: &Path) -> Option<serde_json::Value> {
    let bytes = read_project_file(&dir.join("package.json")).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// What `npm run NAME` (`npm start`, `npm test`, `yarn NAME`, `pnpm NAME`, `bun run NAME`)
/// runs in `base`: `package.json`, which holds the scripts, and the files the script and its
/// `pre`/`post` scripts name (their words relative to `base`, and each command word's
/// `node_modules/.bin/` program); `npm start` without a script runs `server.js`.
fn package_scripts(program: &str, words: &[&str], base: &Path) -> Vec<String> {
    const SUBCOMMANDS: &[&str] = &[
        "install", "i", "ci", "add", "remove", "exec", "x", "dlx", "init", "create", "publish",
        "pack", "link", "update", "upgrade", "audit", "outdated", "ls", "list", "config",
    ];
    let script = match words {
        ["run" | "run-script" | "rr", name, ..] => Some(*name),
        [name @ ("start" | "test" | "restart" | "stop"), ..] => Some(*name),
        // `yarn NAME`, `pnpm NAME`, `bun NAME` run a script of that name.
        [name, ..] if program != "npm" && !SUBCOMMANDS.contains(name) => Some(*name),
        _ => None,
    };
    let Some(script) = script else {
        return Vec::new();
    };
    let mut out = vec![String::from("package.json")];
    let scripts = package_json(base)
        .and_then(|m| m.get("scripts").cloned())
        .unwrap_or_default();
    if script == "start" && scripts.get("start").is_none() {
        out.push(String::from("server.js"));
    }
    for name in [
        format!("pre{script}"),
        script.to_string(),
        format!("post{script}"),
    ] {
        let Some(line) = scripts.get(&name).and_then(|l| l.as_str()) else {
            continue;
        };
        let commands = line.split([';', '&', '|', '(', ')', '\n']);
        for command in commands.take(MAX_PROGRAM_WORDS) {
            let mut command_word = true;
            for word in command.split_whitespace().take(MAX_PROGRAM_WORDS) {
                let word = word.trim_matches(|c| c == '"' || c == '\'');
                if command_word && !word.contains('=') {
                    // The program itself, found where the script runner looks first.
                    out.push(format!("node_modules/.bin/{word}"));
                    out.push(word.to_string());
                    command_word = false;
                    continue;
                }
                // Its arguments count as the server's own do: scripts, not data.
                let value = word.split_once('=').map_or(word, |(_, value)| value);
                if runs_as_script(&base.join(value)) {
                    out.push(value.to_string());
                }
            }
        }
    }
    out
}

/// Whether `path` is a file an interpreter would run: executable, or a script by its
/// extension.
fn runs_as_script(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|meta| {
        meta.is_file()
            && (meta.permissions().mode() & 0o111 != 0
                || path.extension().is_some_and(|x| {
                    SCRIPT_EXTENSIONS.contains(&x.to_string_lossy().to_lowercase().as_str())
                }))
    })
}

/// The file name of a program word (`/usr/bin/python3.12` → `python3.12`).
fn program_name(word: &str) -> String {
    Path::new(word)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// At most this many words of each server are looked at (a hostile list could name
/// thousands).
const MAX_PROGRAM_WORDS: usize = 64;

/// Feeds `path`'s content to `hasher` in pieces, opened without following a final symlink
/// and without blocking (a FIFO swapped in since the look must not hang the start): its
/// size, inode and change time instead when it is bigger than [`MAX_PROGRAM_BYTES`], a marker
/// when it is not a regular file any more or cannot be read.
fn hash_program(hasher: &mut Sha256, path: &Path) {
    use std::io::Read;
    let (mut file, meta) = match crate::untrusted_fs::open_file(path, &[]) {
        Ok(opened) => opened,
        Err(e) if crate::untrusted_fs::not_regular_kind(&e).is_some() => {
            hasher.update(b"\0not a file\0");
            return;
        }
        Err(_) => {
            hasher.update(b"\0unreadable\0");
            return;
        }
    };
    if meta.len > MAX_PROGRAM_BYTES {
        // The change time, not the modification time: a command can set the latter back
        // (`touch -d`), while every write moves the former and nothing can set it.
        hasher.update(format!(
            "\0{} bytes, inode {}:{}, changed {}.{}\0",
            meta.len, meta.dev, meta.ino, meta.ctime, meta.ctime_nsec
        ));
        return;
    }
    // The length first, so no content can pass for another file's delimiters.
    hasher.update(meta.len.to_le_bytes());
    // One byte past the size is enough to see that it grew (a writer appending meanwhile
    // must not keep the read going).
    match hash_reader(&mut (&mut file).take(meta.len + 1), hasher) {
        Ok(n) if n == meta.len => {}
        Ok(_) => hasher.update(b"\0changed while read\0"),
        Err(_) => hasher.update(b"\0read error\0"),
    }
}

/// Feeds everything `reader` gives to `hasher`; how many bytes that was.
fn hash_reader(reader: &mut impl std::io::Read, hasher: &mut Sha256) -> std::io::Result<u64> {
    let mut buf = [0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                hasher.update(&buf[..n]);
                total += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// SHA-256 (hex) of a `.baton/hooks.json` as read; `None` when there is none to read.
fn hooks_digest_of(read: &std::io::Result<Vec<u8>>) -> Option<String> {
    let bytes = digest_input(read)?;
    let digest = Sha256::digest(&bytes);
    Some(digest.iter().map(|b| format!("{b:02x}")).collect())
}

/// A folder's `.baton/hooks.json`.
pub fn hooks_path(folder: &Path) -> PathBuf {
    folder.join(".baton").join("hooks.json")
}

/// Reads a folder's `.baton/hooks.json` as every project file is read ([`read_project_file`]).
pub fn read_hooks_file(folder: &Path) -> std::io::Result<Vec<u8>> {
    read_project_file(&hooks_path(folder))
}

fn canonical(folder: &Path) -> PathBuf {
    folder
        .canonicalize()
        .unwrap_or_else(|_| folder.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A command may leave a FIFO named `.mcp.json` (or a config or hooks file linked to one)
    /// in a trusted folder: the next start must not open it, or it waits for a writer for good.
    #[test]
    fn a_fifo_in_a_trusted_folder_is_never_opened() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        std::fs::create_dir_all(folder.join(".baton")).expect("mkdir");
        std::fs::write(folder_config(folder), "model = \"m\"\n").expect("write");
        let mut list = TrustList::default();
        list.trust(folder);
        let fifo = folder.join(super::super::mcp::PROJECT_JSON);
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // A writer that gets through its open only once a reader opened the FIFO; on the old
        // code that reader was the digest, which then read to the writer's close.
        // It closes at once (each reader sees an empty file) and waits for the next reader.
        let opened = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (fifo, opened, stop) = (fifo.clone(), opened.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let f = std::fs::OpenOptions::new().write(true).open(&fifo);
                    if !stop.load(Ordering::SeqCst) {
                        opened.store(true, Ordering::SeqCst);
                    }
                    drop(f);
                }
            })
        };
        let status = list.status(folder);
        let hooks = list.hooks_status(folder);
        let read_by_start = opened.load(Ordering::SeqCst);
        stop.store(true, Ordering::SeqCst);
        // Let the writer go: open the read end ourselves.
        let _reader = {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
                .expect("reader")
        };
        writer.join().expect("writer");
        assert!(!read_by_start, "the trust check opened the FIFO");
        assert_eq!(status, TrustStatus::Changed);
        assert_eq!(hooks, TrustStatus::Changed);
    }

    /// A command may leave a sparse `.mcp.json` of gigabytes (read at every start, trusted or
    /// not): it was read whole into memory; now it is refused after its first 4 MiB.
    #[test]
    fn a_huge_project_file_is_refused_not_held() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(super::super::mcp::PROJECT_JSON);
        let f = std::fs::File::create(&path).expect("create");
        f.set_len(1 << 30).expect("a sparse GiB");
        let err = read_project_file(&path).expect_err("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge, "{err}");
        assert!(err.to_string().contains("4096 KiB"), "{err}");
    }

    #[test]
    fn trusting_a_folder_records_its_mcp_json_too() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        std::fs::write(folder.join(".mcp.json"), "{\"mcpServers\": {}}").expect("write");
        let mut list = TrustList::default();
        list.trust(folder);
        assert_eq!(list.status(folder), TrustStatus::Trusted);
        std::fs::write(folder.join(".mcp.json"), "{\"mcpServers\": {\"x\": {}}}").expect("write");
        assert_eq!(list.status(folder), TrustStatus::Changed);
        // config.toml alone hashes as before .mcp.json was read, so old entries stay valid.
        let other = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(other.path().join(".baton")).expect("mkdir");
        std::fs::write(folder_config(other.path()), "a = 1\n").expect("write");
        let plain: String = Sha256::digest(b"a = 1\n")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(config_digest(other.path()), Some(plain));
    }

    #[test]
    fn trust_covers_the_scripts_a_project_server_runs_but_not_its_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        std::fs::write(
            folder.join(".mcp.json"),
            r#"{"mcpServers": {"s": {"command": "node", "args": ["srv/main.js", "--db", "data.db"]}}}"#,
        )
        .expect("write");
        std::fs::create_dir_all(folder.join("srv")).expect("mkdir");
        std::fs::write(folder.join("srv/main.js"), "serve()\n").expect("write");
        std::fs::write(folder.join("data.db"), "rows").expect("write");
        let mut list = TrustList::default();
        list.trust(folder);
        std::fs::write(folder.join("data.db"), "more rows").expect("write");
        assert_eq!(list.status(folder), TrustStatus::Trusted);
        std::fs::write(folder.join("srv/main.js"), "evil()\n").expect("write");
        assert_eq!(list.status(folder), TrustStatus::Changed);
    }

    /// `python3 -m mod` imports `./mod.py` and `npx -y pkg` runs `./node_modules/.bin/pkg`:
    /// code the trusted servers run although no argument names the file.
    #[test]
    fn trust_covers_modules_and_packages_an_interpreter_loads_by_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        std::fs::write(
            folder.join(".mcp.json"),
            r#"{"mcpServers": {
                "py": {"command": "python3", "args": ["-m", "tools.mcp"]},
                "js": {"command": "npx", "args": ["-y", "@acme/mcp-server@1.2"]}
            }}"#,
        )
        .expect("write");
        std::fs::create_dir_all(folder.join("tools/mcp")).expect("mkdir");
        std::fs::write(folder.join("tools/mcp/__main__.py"), "serve()\n").expect("write");
        std::fs::create_dir_all(folder.join("node_modules/.bin")).expect("mkdir");
        std::fs::write(folder.join("node_modules/.bin/mcp-server"), "#!/bin/sh\n").expect("write");
        let mut list = TrustList::default();
        list.trust(folder);
        assert_eq!(list.status(folder), TrustStatus::Trusted);
        std::fs::write(folder.join("tools/mcp/__main__.py"), "evil()\n").expect("write");
        assert_eq!(list.status(folder), TrustStatus::Changed);
        list.trust(folder);
        std::fs::write(
            folder.join("node_modules/.bin/mcp-server"),
            "#!/bin/sh\nevil\n",
        )
        .expect("write");
        assert_eq!(list.status(folder), TrustStatus::Changed);
        // A module file that appears after trust is a change too (it was absent when hashed).
        list.trust(folder);
        std::fs::write(folder.join("tools/mcp.py"), "evil()\n").expect("write");
        assert_eq!(list.status(folder), TrustStatus::Changed);
    }

    /// Twelfth red team, high: `node .`, `npm run mcp` and `python3 srv` run files no argument
    /// names (`package.json`, its `main`, a script's program, `srv/__main__.py`); a command
    /// edited them and the next start ran the edit outside the sandbox, trust unchanged.
    #[test]
    fn an_interpreter_handed_a_folder_or_a_script_runner_is_covered() {
        let package = r#"{"main": "lib/main.js", "scripts": {"mcp": "node srv/run.js --db data.db", "premcp": "./prep.sh"}}"#;
        let cases: &[(&str, &str)] = &[
            (r#""command": "node", "args": ["."]"#, "lib/main.js"),
            (r#""command": "node", "args": ["."]"#, "package.json"),
            (r#""command": "node", "args": ["web"]"#, "web/index.js"),
            (
                r#""command": "npm", "args": ["run", "mcp"]"#,
                "package.json",
            ),
            (r#""command": "npm", "args": ["run", "mcp"]"#, "srv/run.js"),
            (r#""command": "npm", "args": ["run", "mcp"]"#, "prep.sh"),
            (r#""command": "yarn", "args": ["mcp"]"#, "srv/run.js"),
            (r#""command": "npm", "args": ["start"]"#, "server.js"),
            (
                r#""command": "python3", "args": ["srv"]"#,
                "srv/__main__.py",
            ),
            (
                r#""command": "python3", "args": ["-u", "srv/"]"#,
                "srv/__main__.py",
            ),
        ];
        for (server, loaded) in cases {
            let files = [
                "lib/main.js",
                "web/index.js",
                "srv/run.js",
                "srv/__main__.py",
                "server.js",
                "prep.sh",
                "data.db",
            ];
            let dir = one_server_folder(server, &files);
            std::fs::write(dir.path().join("package.json"), package).expect("write");
            // The data a server keeps changing is not code: trust holds.
            edit_after_trust(dir.path(), server, "data.db", TrustStatus::Trusted);
            edit_after_trust(dir.path(), server, loaded, TrustStatus::Changed);
        }
    }

    /// A folder whose `.mcp.json` declares one server (`server`: the inside of its JSON
    /// object) and holding `files`, each "ok".
    fn one_server_folder(server: &str, files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join(".mcp.json"),
            format!(r#"{{"mcpServers": {{"s": {{{server}}}}}}}"#),
        )
        .expect("write");
        for file in files {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, "ok\n").expect("write");
        }
        dir
    }

    /// Trusts `folder`, rewrites `file` in it and asserts the trust is then `expected`.
    fn edit_after_trust(folder: &Path, server: &str, file: &str, expected: TrustStatus) {
        let mut list = TrustList::default();
        list.trust(folder);
        assert_eq!(list.status(folder), TrustStatus::Trusted, "{server}");
        std::fs::write(folder.join(file), "edited()\n").expect("write");
        assert_eq!(list.status(folder), expected, "{server}: {file}");
    }

    /// The red team's spellings of "loaded by name": each server's loaded file, edited after
    /// trust, makes the trust "changed".
    #[test]
    fn every_spelling_of_a_module_or_package_run_by_name_is_covered() {
        let cases: &[(&str, &str)] = &[
            // The package's own __init__.py runs first.
            (
                r#""command": "python3", "args": ["-m", "tools.mcp"]"#,
                "tools/__init__.py",
            ),
            (
                r#""command": "python3", "args": ["-mtools.mcp"]"#,
                "tools/mcp/__main__.py",
            ),
            (
                r#""command": "python3", "args": ["-m", "srv"], "env": {"PYTHONPATH": "src"}"#,
                "src/srv.py",
            ),
            (
                r#""command": "/usr/bin/env", "args": ["python3", "-m", "srv"]"#,
                "srv.py",
            ),
            (r#""command": "uv", "args": ["run", "-m", "srv"]"#, "srv.py"),
            (
                r#""command": "uv", "args": ["run", "python", "-m", "srv"]"#,
                "srv.py",
            ),
            (
                r#""command": "npx", "args": ["-y", "-p", "@acme/tools", "acme-mcp"]"#,
                "node_modules/.bin/acme-mcp",
            ),
            (
                r#""command": "node", "args": ["--require=./hook.js", "server.js"]"#,
                "hook.js",
            ),
        ];
        for (server, loaded) in cases {
            let files = [
                "tools/__init__.py",
                "tools/mcp/__main__.py",
                "src/srv.py",
                "srv.py",
                "node_modules/.bin/acme-mcp",
                "hook.js",
                "server.js",
            ];
            let dir = one_server_folder(server, &files);
            edit_after_trust(dir.path(), server, loaded, TrustStatus::Changed);
        }
    }

    #[test]
    fn a_config_rewritten_after_trust_is_no_longer_trusted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        std::fs::create_dir_all(folder.join(".baton")).expect("mkdir");
        std::fs::write(folder_config(folder), "sandbox = \"read-only\"\n").expect("write");
        let mut list = TrustList::default();
        assert_eq!(list.status(folder), TrustStatus::Untrusted);
        list.trust(folder);
        assert_eq!(list.status(folder), TrustStatus::Trusted);
        std::fs::write(folder_config(folder), "sandbox = \"off\"\n").expect("write");
        assert_eq!(list.status(folder), TrustStatus::Changed);
        list.trust(folder);
        assert_eq!(list.status(folder), TrustStatus::Trusted);
        assert!(list.remove(folder));
        assert_eq!(list.status(folder), TrustStatus::Untrusted);
    }

    #[test]
    fn a_folder_trusted_without_a_config_does_not_trust_one_written_later() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut list = TrustList::default();
        list.trust(dir.path());
        assert_eq!(list.status(dir.path()), TrustStatus::Trusted);
        std::fs::create_dir_all(dir.path().join(".baton")).expect("mkdir");
        std::fs::write(folder_config(dir.path()), "sandbox = \"off\"\n").expect("write");
        assert_eq!(list.status(dir.path()), TrustStatus::Changed);
    }

    #[test]
    fn hooks_that_appear_or_change_after_trust_do_not_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let folder = dir.path();
        let hooks = folder.join(".baton/hooks.json");
        let mut list = TrustList::default();
        list.trust(folder);
        assert_eq!(list.hooks_status(folder), TrustStatus::Trusted);
        std::fs::create_dir_all(folder.join(".baton")).expect("mkdir");
        std::fs::write(&hooks, r#"{"hooks":{}}"#).expect("write");
        assert_eq!(list.hooks_status(folder), TrustStatus::Changed);
        // The config side is not affected by the hooks file.
        assert_eq!(list.status(folder), TrustStatus::Trusted);
        list.trust(folder);
        assert_eq!(list.hooks_status(folder), TrustStatus::Trusted);
        std::fs::write(&hooks, r#"{"hooks":{"Stop":[]}}"#).expect("write");
        assert_eq!(list.hooks_status(folder), TrustStatus::Changed);
        // An entry written before hooks were pinned does not vouch for a hooks file.
        let old: TrustList = toml::from_str(&format!(
            "[[folder]]\npath = {:?}\ntrusted_at = \"\"\n",
            folder.canonicalize().expect("canonical")
        ))
        .expect("old list");
        assert_eq!(old.hooks_status(folder), TrustStatus::Changed);
    }

    #[test]
    fn the_list_survives_a_round_trip_through_its_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("conf/trusted.toml");
        let mut list = TrustList::default();
        list.trust(dir.path());
        list.save_to(&file).expect("save");
        assert_eq!(TrustList::load_from(&file).expect("load"), list);
        assert_eq!(
            TrustList::load_from(&dir.path().join("none.toml")).expect("missing"),
            TrustList::default()
        );
        std::fs::write(&file, "folder = 3").expect("write");
        assert!(TrustList::load_from(&file).is_err());
    }
}
