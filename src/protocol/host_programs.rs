//! What baton itself starts outside the sandbox (the audit's `git`, bubblewrap, MCP servers,
//! hooks) and the one rule for it: never a program, working directory or interpreter search
//! path that a sandboxed command could have written. A PATH entry inside the workspace (an
//! activated `.venv/bin`, direnv's `PATH_add bin`, `node_modules/.bin`) holds whatever a command
//! put there, so such entries, and relative ones (which name the working directory), are
//! dropped before baton looks a program up or hands PATH to a child; the same goes for the
//! module search paths of interpreters (`PYTHONPATH`, `NODE_PATH`…) and npm's folders. The
//! "writable roots" each caller passes are host paths a command may write (the workspace,
//! `--write` folders…). Pure functions over paths and variables: every layer that starts a
//! program calls them.

use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

/// Variables holding `:`-separated folders where an interpreter or tool looks up code.
pub const SEARCH_PATH_VARS: &[&str] = &[
    "PATH",
    "PYTHONPATH",
    "NODE_PATH",
    "PERL5LIB",
    "PERLLIB",
    "RUBYLIB",
    "GEM_PATH",
    "GEM_HOME",
    "CLASSPATH",
    "LD_LIBRARY_PATH",
];

/// Variables whose value makes a program load code named in it (`NODE_OPTIONS="--require
/// x.js"`, `BASH_ENV` for every `bash -c` a hook runs, `PYTHONSTARTUP`, `LD_PRELOAD`…): dropped
/// when any path in them lies where a command could have written.
pub const CODE_OPTION_VARS: &[&str] = &[
    "NODE_OPTIONS",
    "BASH_ENV",
    "ENV",
    "PYTHONSTARTUP",
    "PERL5OPT",
    "RUBYOPT",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "LD_PRELOAD",
    "LD_AUDIT",
    // Variables naming a program or command line other programs run (ssh's `-F config` and
    // `ProxyCommand`, an askpass helper, a pager's input filter).
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "SSH_ASKPASS",
    "GIT_ASKPASS",
    "SUDO_ASKPASS",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_PAGER",
    "GIT_EXTERNAL_DIFF",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "LESSOPEN",
    "LESSCLOSE",
    "BROWSER",
    "PROMPT_COMMAND",
];

/// Variables naming a folder or file a program loads code or settings that run code from
/// (`PYTHONUSERBASE`'s `.pth` files, `GCONV_PATH`'s modules, `GIT_EXEC_PATH`, a `JAVA_HOME`,
/// `DOTNET_STARTUP_HOOKS`, `XDG_CONFIG_HOME`'s `git/config`…): treated as [`CODE_OPTION_VARS`]
/// wherever they come from, a server's configured variables included.
pub const LOADER_VARS: &[&str] = &[
    "PYTHONUSERBASE",
    "PYTHONHOME",
    "PYTHONPYCACHEPREFIX",
    "GCONV_PATH",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GOPATH",
    "GOROOT",
    "GOMODCACHE",
    "GOFLAGS",
    "GOTOOLCHAIN",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "JAVA_HOME",
    "LUA_PATH",
    "LUA_CPATH",
    "LUA_INIT",
    "DOTNET_STARTUP_HOOKS",
    "DOTNET_ROOT",
    "JULIA_LOAD_PATH",
    "JULIA_DEPOT_PATH",
    "R_LIBS",
    "R_LIBS_USER",
    "R_LIBS_SITE",
    "R_PROFILE",
    "R_PROFILE_USER",
    "R_ENVIRON",
    "R_ENVIRON_USER",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "TCLLIBPATH",
    "ERL_LIBS",
    "GUILE_LOAD_PATH",
    "GUILE_LOAD_COMPILED_PATH",
    "OCAMLPATH",
    "BUNDLE_GEMFILE",
    "BUNDLE_PATH",
    "BUNDLE_APP_CONFIG",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PIPENV_PIPFILE",
    "PYENV_ROOT",
    "RBENV_ROOT",
    "NVM_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CONFIG_DIRS",
    "XDG_DATA_DIRS",
];

/// Variables of baton's own environment that name the workspace as a place, not as code to
/// load: passed as they are (so are baton's own `BATON_*`).
const NAMES_A_PLACE: &[&str] = &["PWD", "OLDPWD", "CLAUDE_PROJECT_DIR"];

/// Every folder commands may write in this process, of every session it has had (workspaces,
/// `--write`, `[sandbox] writable`), recorded when a configuration is resolved: hooks and MCP
/// servers are started far from where the configuration is read, and must skip those folders
/// too — another session's included (round 28: in `baton acp`, session B's hook loaded what
/// session A's command wrote where a variable named A's workspace).
static WRITABLE_ROOTS: std::sync::RwLock<Vec<PathBuf>> = std::sync::RwLock::new(Vec::new());

/// Adds the folders one session's commands may write (its workspace and extra writable
/// folders) to those of the process.
pub fn add_writable_roots(roots: &[PathBuf]) {
    let mut held = WRITABLE_ROOTS.write().unwrap_or_else(|e| e.into_inner());
    for r in roots {
        if !held.contains(r) {
            held.push(r.clone());
        }
    }
}

/// `workspace` and every folder recorded by [`add_writable_roots`]: what a program baton
/// starts outside the sandbox must not be found in, run in, or load code from.
pub fn writable_roots_with(workspace: &Path) -> Vec<PathBuf> {
    let mut roots = vec![workspace.to_path_buf()];
    let held = WRITABLE_ROOTS.read().unwrap_or_else(|e| e.into_inner());
    for r in held.iter() {
        if !roots.contains(r) {
            roots.push(r.clone());
        }
    }
    roots
}

/// `p` made absolute and resolved as far as it exists (symlinks of the existing part
/// followed, `..` and `.` folded), so a folder not created yet is still placed where it would
/// be. None for a relative path: it names the working directory, wherever that is.
fn placed(p: &Path) -> Option<PathBuf> {
    if !p.is_absolute() {
        return None;
    }
    let mut lexical = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                lexical.pop();
            }
            Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut missing = Vec::new();
    let mut existing = lexical.as_path();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for name in missing.iter().rev() {
                out.push(name);
            }
            return Some(out);
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                existing = parent;
            }
            _ => return Some(lexical),
        }
    }
}

/// The writable roots as they lie on disk (symlinks resolved), for comparisons.
fn placed_roots(roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for r in roots {
        for p in [Some(r.clone()), placed(r)].into_iter().flatten() {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Whether a command could have written what `entry` names: it is relative or empty (the
/// working directory), or it lies in one of `roots` as written or once resolved.
pub fn entry_is_writable(entry: &Path, roots: &[PathBuf]) -> bool {
    let roots = placed_roots(roots);
    writable_against(entry, &roots)
}

fn writable_against(entry: &Path, placed_roots: &[PathBuf]) -> bool {
    if entry.as_os_str().is_empty() {
        return true;
    }
    // glibc's loader takes `;` as a separator too (`LD_LIBRARY_PATH=/a;/ws/lib`), and Lua's
    // search paths are `;`-separated: each part is judged.
    let text = entry.as_os_str().as_encoded_bytes();
    if text.contains(&b';') {
        return entry
            .as_os_str()
            .to_string_lossy()
            .split(';')
            .filter(|part| !part.is_empty())
            .any(|part| writable_against(Path::new(part), placed_roots));
    }
    let Some(real) = placed(entry) else {
        return true;
    };
    placed_roots
        .iter()
        .any(|r| real.starts_with(r) || entry.starts_with(r))
}

/// The entries of a `:`-separated search path that lie outside `roots`, in order.
pub fn safe_entries(value: &OsStr, roots: &[PathBuf]) -> Vec<PathBuf> {
    let roots = placed_roots(roots);
    std::env::split_paths(value)
        .filter(|e| !writable_against(e, &roots))
        .collect()
}

/// The entries of a search path a command could have written (for the start-up warning).
pub fn writable_entries(value: &OsStr, roots: &[PathBuf]) -> Vec<PathBuf> {
    let roots = placed_roots(roots);
    std::env::split_paths(value)
        .filter(|e| !e.as_os_str().is_empty() && writable_against(e, &roots))
        .collect()
}

/// `value` without its entries inside `roots` (None when nothing is left), nor a folder
/// holding a link into one (`~/bin/srv -> ~/proj/tools/srv`, round 34; `/usr/local/bin`
/// after `npm link`, round 35): a program a hook or a server names is found through PATH by
/// the child, where no check of baton's runs.
pub fn safe_search_path(value: &OsStr, roots: &[PathBuf]) -> Option<OsString> {
    let placed = placed_roots(roots);
    let kept: Vec<PathBuf> = safe_entries(value, roots)
        .into_iter()
        .filter(|dir| !holds_links_into(dir, &placed))
        .collect();
    if kept.is_empty() {
        return None;
    }
    std::env::join_paths(kept).ok()
}

/// The folders a program baton looks up before any workspace policy is known must not come
/// from: every temp root and the folder baton started in (the workspace, as a rule).
pub fn startup_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .map(PathBuf::from)
        .chain(std::env::var_os("TMPDIR").map(PathBuf::from))
        .collect();
    roots.extend(std::env::current_dir().ok());
    roots
}

/// Whether the folder `dir` holds a link that leads into one of `placed_roots` (round 35:
/// `npm link` puts one in `/usr/local/bin`, not only in the home). The links of each folder
/// are listed once per process and again when the folder changes (its mtime): `/usr/bin`
/// holds thousands of entries, and a hook runs at every tool call.
fn holds_links_into(dir: &Path, placed_roots: &[PathBuf]) -> bool {
    type Links = std::collections::HashMap<PathBuf, (std::time::SystemTime, Vec<PathBuf>)>;
    static LINKS: std::sync::Mutex<Option<Links>> = std::sync::Mutex::new(None);
    let Ok(mtime) = std::fs::metadata(dir).and_then(|m| m.modified()) else {
        return false;
    };
    let mut cache = LINKS.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(Links::new);
    let fresh = cache.get(dir).is_some_and(|(seen, _)| *seen == mtime);
    if !fresh {
        let links = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_symlink()))
            // A link whose target is not there yet leads where that target would be made.
            .filter_map(|e| {
                let path = e.path();
                path.canonicalize().ok().or_else(|| {
                    let target = std::fs::read_link(&path).ok()?;
                    placed(&dir.join(target))
                })
            })
            .collect();
        cache.insert(dir.to_path_buf(), (mtime, links));
    }
    cache.get(dir).is_some_and(|(_, targets)| {
        targets
            .iter()
            .any(|t| placed_roots.iter().any(|r| t.starts_with(r)))
    })
}

/// Why a command line baton runs outside the sandbox (a user's hook or MCP server) would run
/// what a command could have written, if it would. One rule, whatever the launcher: a word
/// naming a path in `roots` — the program, a script of any name or none, a folder given with
/// `--prefix`, `-C`, `--chdir=` or as a server's root (no list of the ways a launcher is
/// pointed at code is complete: red team round 36) — or a text file outside them that a word
/// names, or the program `search` finds for the first word, whose text names one (a wrapper
/// `exec python3 ~/proj/x.py`). Links are followed.
pub fn runs_from_writable_root<'a>(
    words: impl IntoIterator<Item = &'a str>,
    roots: &[PathBuf],
    search: &OsStr,
) -> Option<String> {
    const MAX_SCRIPT: u64 = 256 * 1024;
    let home = dirs::home_dir();
    // (file, whether it is run for sure: the program, or the script an interpreter is given)
    let mut files: Vec<(PathBuf, bool)> = Vec::new();
    let mut interpreter = false;
    let mut script_given = false;
    // Relative words lead from the folder the program starts in — the home, which may hold
    // the workspace (`python3 tools/srv.py`, red team round 38).
    let start = neutral_dir(roots);
    for (i, word) in words.into_iter().filter(|w| !w.is_empty()).enumerate() {
        let relative = !word.starts_with(['/', '~', '$', '-']) && (i > 0 || word.contains('/'));
        if names_a_writable_path(OsStr::new(word), roots, false)
            || (relative && names_a_writable_path(start.join(word).as_os_str(), roots, false))
        {
            return Some(format!("it names {word}, in a folder commands may write"));
        }
        let spelled = super::normalized(word);
        let word = spelled.as_str();
        let in_home = word
            .strip_prefix("~/")
            .or_else(|| word.strip_prefix("$HOME/"));
        let path = match (in_home, &home) {
            (Some(rest), Some(h)) => Some(h.join(rest)),
            _ if word.starts_with('/') => Some(PathBuf::from(word)),
            _ if i == 0 => find_in(word, search, roots),
            _ => None,
        };
        let the_script = interpreter && !script_given && !word.starts_with('-');
        script_given |= the_script;
        if i == 0 {
            let name = path
                .as_deref()
                .and_then(Path::file_name)
                .unwrap_or(OsStr::new(word));
            interpreter = is_an_interpreter(&name.to_string_lossy());
        }
        files.extend(path.map(|p| (p, i == 0 || the_script)));
    }
    for (file, run) in files.iter().take(16) {
        let Ok(meta) = std::fs::metadata(file) else {
            continue;
        };
        let executable = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111 != 0;
        if !meta.is_file() || !(*run || executable) {
            continue;
        }
        let mut bytes = Vec::new();
        let read = std::fs::File::open(file).and_then(|f| {
            std::io::Read::read_to_end(&mut std::io::Read::take(f, MAX_SCRIPT), &mut bytes)
        });
        if read.is_err() {
            continue;
        }
        // A binary program is not a script that names paths.
        if bytes.iter().take(8192).any(|b| *b == 0) {
            continue;
        }
        // A script too long to read whole could name one past what was read (round 37).
        if meta.len() > MAX_SCRIPT {
            return Some(format!(
                "it runs {}, a script too long to check for what it runs (over {} KiB)",
                file.display(),
                MAX_SCRIPT / 1024
            ));
        }
        let text = String::from_utf8_lossy(&bytes);
        if text
            .lines()
            .any(|line| names_a_writable_path(OsStr::new(line), roots, false))
        {
            return Some(format!(
                "it runs {}, a script that names a folder commands may write",
                file.display()
            ));
        }
    }
    None
}

/// Whether a program's file name is a shell's or an interpreter's, whose first argument that
/// is not an option is the script it runs. A data file named elsewhere on the line (a hook's
/// log, which records the workspace's path) is not read for paths.
fn is_an_interpreter(name: &str) -> bool {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    [
        "sh",
        "bash",
        "dash",
        "zsh",
        "ksh",
        "mksh",
        "fish",
        "python",
        "pypy",
        "node",
        "nodejs",
        "deno",
        "bun",
        "ruby",
        "perl",
        "php",
        "lua",
        "luajit",
        "rscript",
        "tclsh",
        "osascript",
        "pwsh",
        "env",
    ]
    .contains(&base.to_ascii_lowercase().as_str())
}

/// The program `name` (a bare name) as the first executable file in baton's PATH outside
/// `roots`, with its absolute path; a name holding a `/` is taken as given when it is
/// absolute and outside `roots`. None when there is none.
pub fn find_program(name: &str, roots: &[PathBuf]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    find_in(name, &path, roots)
}

/// [`find_program`] over the search path `path`.
pub fn find_in(name: &str, path: &OsStr, roots: &[PathBuf]) -> Option<PathBuf> {
    if name.is_empty() {
        return None;
    }
    if name.contains('/') {
        let p = Path::new(name);
        return (p.is_absolute() && !entry_is_writable(p, roots) && is_executable(p))
            .then(|| p.to_path_buf());
    }
    // The program found is judged where it really is: `~/bin/git` linked into the workspace
    // (a wrapper kept in a tools repository) is what a command wrote (round 34).
    safe_entries(path, roots)
        .into_iter()
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p) && !entry_is_writable(p, roots))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A working directory for a program baton starts outside the sandbox that no command could
/// have written: the user's home when it lies outside `roots` (a workspace inside the home
/// is fine; the home inside a root, or a root itself, is not), else `/`. A module or package an interpreter finds "in the current folder"
/// (`python -m`, `npx`, `uv run`, pyenv's `.python-version`) is then the user's own.
pub fn neutral_dir(roots: &[PathBuf]) -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h.is_dir())
        .and_then(|h| h.canonicalize().ok());
    match home {
        Some(h) if !entry_is_writable(&h, roots) => h,
        _ => PathBuf::from("/"),
    }
}

/// What of baton's own environment a program baton starts outside the sandbox (a hook, the
/// editor, a user's MCP server) gets: these variables, each still scrubbed by
/// [`scrub_inherited`], and no other. No rule for telling a path in a value apart is complete
/// (round 31: `ssh -F <ws-parent>/w?/.ssh/config`, `${CLAUDE_PROJECT_DIR}/.bashenv` in
/// `GIT_SSH_COMMAND`), so a program that needs another variable is given it in its own
/// configuration (an MCP server's `env`, a hook's command line). The `XDG_*_HOME` folders
/// are taken literally by the programs that read them: the scrub judges them whole.
pub const HOST_PROGRAM_ENVIRONMENT: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_MESSAGES",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "XDG_RUNTIME_DIR",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_CACHE_HOME",
    "SSH_AUTH_SOCK",
];

/// The environment a program baton starts outside the sandbox begins with
/// ([`HOST_PROGRAM_ENVIRONMENT`], scrubbed against `roots`).
pub fn host_program_environment(roots: &[PathBuf]) -> Vec<(OsString, OsString)> {
    HOST_PROGRAM_ENVIRONMENT
        .iter()
        .filter_map(|name| {
            let value = std::env::var_os(name)?;
            scrub_inherited(name, &value, roots).map(|kept| (OsString::from(name), kept))
        })
        .collect()
}

/// Whether `value` names a path in `roots`: a root, as given or as it lies on disk, anywhere
/// in it (glued to an option, `-F/ws/.ssh/config`, `||/ws/x`), or a path found at blanks,
/// `=`, `:`, `;`, `,` and quotes that leads into one (`/ws/../ws/x`, a link); relative ones
/// (with a `/`) too where `relative` is true (else a program baton starts runs in a folder no
/// command could have written, where a relative path leads).
pub fn names_a_writable_path(value: &OsStr, roots: &[PathBuf], relative: bool) -> bool {
    // Quotes join what they surround in a shell (`"$HOME"/proj`), and `${HOME-}` is `$HOME`:
    // both gone before looking.
    let text = super::normalized(&value.to_string_lossy());
    if root_spellings(roots)
        .iter()
        .any(|r| text.contains(r.as_str()))
    {
        return true;
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let start = neutral_dir(roots);
    text.split(|c: char| {
        c.is_whitespace()
            || matches!(
                c,
                '=' | ':'
                    | ';'
                    | ','
                    | '|'
                    | '<'
                    | '>'
                    | '('
                    | ')'
                    | '['
                    | ']'
                    | '{'
                    | '}'
                    | '@'
                    | '#'
                    | '&'
            )
    })
    .flat_map(path_candidates)
    .filter(|t| t.contains('/'))
    .any(|t| {
        let expanded = match (&home, t.split_once('/')) {
            (Some(h), Some(("~" | "$HOME" | "${HOME}", rest))) => h.join(rest),
            _ => PathBuf::from(t),
        };
        if expanded.is_absolute() {
            entry_is_writable(&expanded, roots)
        } else {
            // Relative: where the program starts (a folder no command wrote, the home as a
            // rule, whose `proj/x` may be the workspace), or anywhere where `relative` says.
            relative || entry_is_writable(&start.join(&expanded), roots)
        }
    })
}

/// A token and, for an option with a path glued to it (`-F/ws/x`, `-Fproj/x`, `--opt=x` is
/// split already), what follows its first one to three letters.
fn path_candidates(token: &str) -> Vec<&str> {
    let mut out = vec![token];
    if let Some(rest) = token.strip_prefix('-') {
        let rest = rest.trim_start_matches('-');
        for cut in 1..=3 {
            if let Some(tail) = rest.get(cut..).filter(|t| !t.is_empty()) {
                out.push(tail);
            }
        }
    }
    out
}

/// How `roots` may be written in a value: as given, as they lie on disk, and under the home
/// as `~/…` and `$HOME/…` (ssh, git and shells expand those themselves): `spellings_of`.
fn root_spellings(roots: &[PathBuf]) -> Vec<String> {
    let homes: Vec<PathBuf> = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute() && h.parent().is_some())
        .into_iter()
        .flat_map(|h| [h.canonicalize().ok(), Some(h)])
        .flatten()
        .collect();
    let homes: Vec<&Path> = homes.iter().map(PathBuf::as_path).collect();
    placed_roots(roots)
        .iter()
        .flat_map(|r| super::spellings_of(r, &homes))
        .collect()
}

/// [`scrub_var`] for a variable of baton's own environment (not one the user configured for
/// a server): no list of loader variables is complete, so any that names a path in `roots`
/// is dropped, the places in [`NAMES_A_PLACE`] and baton's own `BATON_*` aside.
pub fn scrub_inherited(name: &str, value: &OsStr, roots: &[PathBuf]) -> Option<OsString> {
    let kept = scrub_var(name, value, roots)?;
    let passes_as_is = SEARCH_PATH_VARS.contains(&name)
        || NAMES_A_PLACE.contains(&name)
        || name.starts_with("BATON_");
    (passes_as_is || !names_a_writable_path(&kept, roots, false)).then_some(kept)
}

/// Whether an environment variable may reach a program baton starts outside the sandbox as it
/// is: the search paths come back without their entries in `roots` (`None`: drop the
/// variable), npm's `npm_config_*` folders (a prefix, a cache, a userconfig) are dropped when
/// they lie in `roots`. Anything else is kept unchanged.
pub fn scrub_var(name: &str, value: &OsStr, roots: &[PathBuf]) -> Option<OsString> {
    if SEARCH_PATH_VARS.contains(&name) {
        return safe_search_path(value, roots);
    }
    if CODE_OPTION_VARS.contains(&name) || LOADER_VARS.contains(&name) {
        return (!names_a_writable_path(value, roots, true)).then(|| value.to_owned());
    }
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("npm_config_") {
        let p = Path::new(value);
        // Only a value naming a folder or file can point into the workspace; `true`, a URL
        // or a number cannot.
        let names_path = p.is_absolute()
            || value.to_string_lossy().starts_with('.')
            || value.to_string_lossy().contains('/');
        if names_path && entry_is_writable(p, roots) {
            return None;
        }
    }
    Some(value.to_owned())
}

/// The warning for a PATH with entries a command could write, once at start-up: baton itself
/// skips them, but the user's own shell does not.
pub fn path_warning(roots: &[PathBuf]) -> Vec<String> {
    let mut warnings = Vec::new();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let entries = writable_entries(&path, roots);
    if !entries.is_empty() {
        let shown: Vec<String> = entries.iter().map(|e| e.display().to_string()).collect();
        warnings.push(format!(
            "PATH has entries inside the workspace, which sandboxed commands may write ({}): \
             baton does not run programs from them itself (git, MCP servers, hooks), but your \
             own shell will run whatever a command left there",
            shown.join(", ")
        ));
    }
    let mut dropped: Vec<String> = std::env::vars_os()
        .filter_map(|(name, value)| {
            let text = name.to_str()?;
            (text != "PATH" && scrub_inherited(text, &value, roots).as_ref() != Some(&value))
                .then(|| text.to_string())
        })
        .collect();
    dropped.sort();
    if !dropped.is_empty() {
        warnings.push(format!(
            "{} name folders inside the workspace, which sandboxed commands may write: hooks, \
             MCP servers and the editor baton starts do not get them (or get them without those \
             folders), but your own shell and the programs it starts will load what a command \
             left there",
            dropped.join(", ")
        ));
    }
    warnings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe(p: &Path) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// Round 34 (critical): the audit's `git` was `~/bin/git`, a link into the workspace a
    /// command rewrote; a program found through PATH is judged where it really is.
    #[test]
    fn a_program_linked_into_a_writable_root_is_not_found() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let ws = base.join("ws");
        exe(&ws.join("tools/git"));
        exe(&base.join("usr/bin/git"));
        std::fs::create_dir_all(base.join("bin")).unwrap();
        std::os::unix::fs::symlink(ws.join("tools/git"), base.join("bin/git")).unwrap();
        let roots = vec![ws.clone()];
        let path = std::env::join_paths([base.join("bin"), base.join("usr/bin")]).unwrap();
        assert_eq!(
            find_in("git", &path, &roots),
            Some(base.join("usr/bin/git"))
        );
        let only = std::env::join_paths([base.join("bin")]).unwrap();
        assert_eq!(find_in("git", &only, &roots), None);
        // Round 35: hooks and servers look their programs up themselves; a folder holding
        // such a link leaves their PATH, wherever it is (`npm link` into /usr/local/bin),
        // also when the link's target is not made yet.
        assert_eq!(
            safe_search_path(&path, &roots),
            Some(OsString::from(base.join("usr/bin")))
        );
        std::fs::create_dir_all(base.join("opt/bin")).unwrap();
        std::os::unix::fs::symlink(ws.join("later/srv"), base.join("opt/bin/srv")).unwrap();
        let later = std::env::join_paths([base.join("opt/bin"), base.join("usr/bin")]).unwrap();
        assert_eq!(
            safe_search_path(&later, &roots),
            Some(OsString::from(base.join("usr/bin")))
        );
    }

    /// Round 27 (high): only a list of loader variables was checked; any variable of baton's
    /// own environment naming a writable path is now left out, its own and places aside.
    #[test]
    fn a_variable_of_batons_environment_naming_the_workspace_is_left_out() {
        let d = tempfile::tempdir().unwrap();
        let ws = d.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let roots = vec![ws.clone()];
        let at = |p: &str| OsString::from(ws.join(p));
        assert_eq!(
            scrub_inherited("PYTHONUSERBASE", &at(".pyuser"), &roots),
            None
        );
        let option = OsString::from(format!("--load={}", ws.join("plugins").display()));
        assert_eq!(scrub_inherited("MYTOOL_PLUGINS", &option, &roots), None);
        for kept in ["PWD", "OLDPWD", "BATON_NOTES"] {
            assert_eq!(
                scrub_inherited(kept, &at(""), &roots),
                Some(at("")),
                "{kept}"
            );
        }
        let outside = OsString::from("/usr/share/x:/opt/y");
        assert_eq!(
            scrub_inherited("XDG_DATA_DIRS", &outside, &roots),
            Some(outside.clone())
        );
        assert_eq!(
            scrub_inherited("LANG", OsStr::new("C.UTF-8"), &roots).unwrap(),
            "C.UTF-8"
        );
        // Round 28: `;` separates paths for glibc's loader and for Lua.
        let semi = OsString::from(format!("/usr/local/lib;{}", ws.join(".libs").display()));
        assert_eq!(scrub_inherited("LD_LIBRARY_PATH", &semi, &roots), None);
        let lua = OsString::from(format!("/usr/share/lua/?.lua;{}/m/?.lua;;", ws.display()));
        assert_eq!(scrub_inherited("LUA_PATH", &lua, &roots), None);
        assert_eq!(scrub_inherited("MY_LIST", &lua, &roots), None);
        // Round 29: a path glued to an option or a pipe sign.
        for glued in ["ssh -F{}/.ssh/config", "||{}/x %s", "-I{}/lib"] {
            let value = OsString::from(glued.replace("{}", &ws.display().to_string()));
            assert!(names_a_writable_path(&value, &roots, false), "{value:?}");
        }
        // Round 29: under the home, as ssh and shells expand it.
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
            let proj = vec![home.join("proj-r29")];
            for spelled in ["ssh -F ~/proj-r29/.ssh/config", "x=$HOME/proj-r29/a"] {
                assert!(
                    names_a_writable_path(OsStr::new(spelled), &proj, false),
                    "{spelled}"
                );
            }
            assert!(!names_a_writable_path(
                OsStr::new("ssh -F ~/.ssh/config"),
                &proj,
                false
            ));
            // Round 30: relative to the home a program starts in, quoted, doubled slashes.
            for spelled in [
                "ssh -F proj-r29/.ssh/config",
                "ssh -F \"$HOME\"/proj-r29/.ssh/config",
                "ssh -Fproj-r29/../proj-r29/.ssh/config",
            ] {
                assert!(
                    names_a_writable_path(OsStr::new(spelled), &proj, false),
                    "{spelled}"
                );
            }
        }
        let doubled = OsString::from(format!("ssh -F/{}/./.ssh//config", ws.display()));
        assert!(
            names_a_writable_path(&doubled, &roots, false),
            "{doubled:?}"
        );
        // A server's configured variable: the loaders' list, relative paths included.
        assert_eq!(scrub_var("PYTHONUSERBASE", &at(".pyuser"), &roots), None);
        assert_eq!(
            scrub_var("DB_FILE", &at("db.sqlite"), &roots),
            Some(at("db.sqlite"))
        );
    }

    #[test]
    fn a_program_in_a_workspace_path_entry_is_skipped_for_one_outside() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let ws = base.join("ws");
        exe(&ws.join(".venv/bin/git"));
        exe(&base.join("usr/bin/git"));
        let path = std::env::join_paths([
            ws.join(".venv/bin"),
            PathBuf::from("rel/bin"),
            PathBuf::new(),
            base.join("usr/bin"),
        ])
        .unwrap();
        let roots = vec![ws.clone()];
        assert_eq!(
            find_in("git", &path, &roots),
            Some(base.join("usr/bin/git"))
        );
        // No root: the first one wins (what a plain PATH lookup does).
        assert_eq!(find_in("git", &path, &[]), Some(ws.join(".venv/bin/git")));
        // A symlink to the workspace, or `..` out of and back into it, is still inside.
        std::os::unix::fs::symlink(&ws, base.join("link")).unwrap();
        for sneaky in [
            base.join("link/.venv/bin"),
            base.join("usr/../ws/.venv/bin"),
        ] {
            assert!(entry_is_writable(&sneaky, &roots), "{}", sneaky.display());
        }
        // A folder not created yet is placed where it would be.
        assert!(entry_is_writable(&ws.join("later/bin"), &roots));
        assert!(!entry_is_writable(&base.join("usr/bin"), &roots));
        assert_eq!(
            writable_entries(&path, &roots),
            [ws.join(".venv/bin"), PathBuf::from("rel/bin")]
        );
    }

    #[test]
    fn search_paths_and_npm_folders_lose_what_lies_in_the_workspace() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let roots = vec![ws.clone()];
        let pp = std::env::join_paths([ws.join("lib"), base.join("tools")]).unwrap();
        assert_eq!(
            scrub_var("PYTHONPATH", &pp, &roots),
            Some(base.join("tools").into_os_string())
        );
        assert_eq!(
            scrub_var("NODE_PATH", ws.join("node_modules").as_os_str(), &roots),
            None
        );
        assert_eq!(scrub_var("npm_config_prefix", ws.as_os_str(), &roots), None);
        assert_eq!(
            scrub_var("npm_config_offline", OsStr::new("true"), &roots),
            Some(OsString::from("true"))
        );
        assert_eq!(
            scrub_var("NPM_CONFIG_CACHE", base.join("cache").as_os_str(), &roots),
            Some(base.join("cache").into_os_string())
        );
    }

    /// A hook's `node` loaded `NODE_OPTIONS="--require WS/.pnp.cjs"`, a file a command wrote
    /// (found by the attack round after the PATH fix); options naming only outside files stay.
    #[test]
    fn code_loading_options_naming_a_writable_file_are_dropped() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let ws = base.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let roots = vec![ws.clone()];
        let planted = format!("--require {}", ws.join(".pnp.cjs").display());
        assert_eq!(
            scrub_var("NODE_OPTIONS", OsStr::new(&planted), &roots),
            None
        );
        assert_eq!(
            scrub_var("NODE_OPTIONS", OsStr::new("--require ./x.js"), &roots),
            None
        );
        let env_file = ws.join("env.sh");
        assert_eq!(scrub_var("BASH_ENV", env_file.as_os_str(), &roots), None);
        let kept = OsStr::new("--max-old-space-size=4096");
        assert_eq!(
            scrub_var("NODE_OPTIONS", kept, &roots),
            Some(kept.to_owned())
        );
        let outside = base.join("outside.js");
        let other = format!("--require={}", outside.display());
        assert_eq!(
            scrub_var("NODE_OPTIONS", OsStr::new(&other), &roots),
            Some(OsString::from(other.clone()))
        );
    }

    /// `--write` folders count as much as the workspace for what baton starts itself, and so
    /// do the folders of every other session of the process (round 28: `baton acp`).
    #[test]
    fn the_recorded_writable_roots_join_the_workspace() {
        let ws = PathBuf::from("/w/ws");
        let extra = PathBuf::from("/w/extra");
        add_writable_roots(&[ws.clone(), extra.clone()]);
        let roots = writable_roots_with(&ws);
        assert!(roots.contains(&ws) && roots.contains(&extra), "{roots:?}");
        assert!(find_in("tool", OsStr::new("/w/extra/bin"), &roots).is_none());
        let other = PathBuf::from("/w/other-session");
        add_writable_roots(std::slice::from_ref(&other));
        let roots = writable_roots_with(&other);
        assert!(roots.contains(&ws) && roots.contains(&other), "{roots:?}");
    }
}
