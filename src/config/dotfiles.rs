//! Whether a folder is the user's configuration: the home's dotfiles and start-up folders
//! name it or link into it, so the user's next shell, `ssh`, `git`, editor or Python loads
//! what lies there, outside the sandbox. Such a folder is no workspace (`workspace::check`).

use std::path::{Path, PathBuf};

/// At most this many files are read, each at most [`MAX_FILE`] bytes: the look runs before
/// every `baton sandbox` command.
const MAX_FILES: usize = 2_000;
const MAX_FILE: u64 = 256 * 1024;

/// What makes `ws` (canonical) the user's configuration, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Configuration {
    /// A link among the home's dotfiles or in a start-up folder leads into it (GNU stow,
    /// yadm, rcm).
    Linked(PathBuf),
    /// A dotfile or a file of a start-up folder names it by path.
    Named(PathBuf),
    /// It is, or lies in, a folder programs load from: a dotted folder of the home
    /// (`~/.vim`, `~/.config/nvim`, `~/.emacs.d`, `~/.oh-my-zsh`), an XDG folder wherever
    /// it is, a start-up folder (`~/bin`).
    Inside(PathBuf),
}

impl Configuration {
    /// The link or file, for the user.
    pub fn file(&self) -> &Path {
        match self {
            Configuration::Linked(p) | Configuration::Named(p) | Configuration::Inside(p) => p,
        }
    }
}

/// Whether `ws` is the user's configuration as `home`'s files make it. A link to a folder
/// above `ws` is a way to a project; one to `ws` itself or into it is configuration
/// (`~/.vim -> ~/dotfiles/vim`). Any mention by path counts (`export PATH=~/tools/bin:…`,
/// `set rtp+=…`, `ProxyCommand …`, `script-shell=…`, a `.pth` line): see
/// [`crate::protocol::names_folder`] for the few that go there without loading anything.
pub fn configuration_of(home: &Path, ws: &Path) -> Option<Configuration> {
    if let Some(folder) = loading_folder_holding(home, ws) {
        return Some(Configuration::Inside(folder));
    }
    let link_folders = LINK_FOLDERS.iter().map(|f| home.join(f));
    for folder in std::iter::once(home.to_path_buf())
        .chain(crate::protocol::home_startup_folders(home))
        .chain(link_folders)
    {
        let top = folder == home;
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let dotfile = entry.file_name().as_encoded_bytes().starts_with(b".");
            if entry.file_type().is_ok_and(|t| t.is_symlink())
                && (dotfile || !top)
                && link_target(&entry.path()).starts_with(ws)
            {
                return Some(Configuration::Linked(entry.path()));
            }
        }
    }
    let canonical_home = home.canonicalize().ok();
    let homes: Vec<&Path> = std::iter::once(home)
        .chain(canonical_home.as_deref())
        .collect();
    // The workspace as configuration may name it: by its path, or through a link of the
    // user's that leads to it or above it (`~/t -> ~/tools`, `~/src -> /data/src`, round 37).
    let mut names: Vec<PathBuf> = vec![ws.to_path_buf()];
    for folder in
        std::iter::once(home.to_path_buf()).chain(crate::protocol::home_startup_folders(home))
    {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            if !entry.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            if let Ok(target) = entry.path().canonicalize()
                && let Ok(rest) = ws.strip_prefix(&target)
            {
                names.push(entry.path().join(rest));
            }
        }
    }
    let spellings: Vec<String> = names
        .iter()
        .flat_map(|name| crate::protocol::spellings_of(name, &homes))
        .collect();
    // Every spelling ends with one of these names: a file without them names nothing there,
    // and most files are ruled out by one search each.
    let tails: Vec<Vec<u8>> = names
        .iter()
        .filter_map(|n| n.file_name().map(|t| t.as_encoded_bytes().to_vec()))
        .collect();
    let finders: Vec<memchr::memmem::Finder<'_>> =
        tails.iter().map(memchr::memmem::Finder::new).collect();
    let mut queue = configuration_files(home);
    let mut seen: std::collections::HashSet<PathBuf> = queue.iter().cloned().collect();
    let mut at = 0;
    let mut resolved: std::collections::HashMap<PathBuf, bool> = std::collections::HashMap::new();
    while at < queue.len() && at < MAX_FILES {
        let file = queue[at].clone();
        at += 1;
        // A link anywhere in what is read (`~/.vim/pack/dev/start/x -> ~/tools`,
        // `~/.git-templates/hooks -> ~/tools/hooks`, round 37).
        if std::fs::symlink_metadata(&file).is_ok_and(|m| m.is_symlink())
            && link_target(&file).starts_with(ws)
        {
            return Some(Configuration::Linked(file));
        }
        let Some(bytes) = text_of(&file) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        if finders.iter().any(|f| f.find(&bytes).is_some())
            && crate::protocol::names_folder(&text, &spellings)
        {
            return Some(Configuration::Named(file));
        }
        // A path that leads there through a link of anyone's (`/opt/x/tl -> ~/tools`):
        // each path the configuration names, resolved once.
        let paths = paths_named(&text, home, file.parent().unwrap_or(home));
        if leads_into(&paths, ws, &mut resolved) {
            return Some(Configuration::Named(file));
        }
        // What it includes or sources is configuration too (round 37), followed a few steps.
        for named in files_in_home(&paths, &homes) {
            if seen.len() < MAX_FILES && seen.insert(named.clone()) {
                queue.push(named);
            }
        }
    }
    None
}

/// Whether a path `text` names where it may load from ([`crate::protocol::loading_parts`])
/// leads into `ws` once resolved: its existing part with links followed, the rest as
/// The paths configuration `text` names where it may load from
/// ([`crate::protocol::loading_parts`]): `~/x` and `$HOME/x` in the home, absolute ones, and
/// relative ones with a folder in them from where their program starts — the home for a
/// shell, a hook or a server (`cd; . tools/env.sh`, a hook `tools/bin/notify`, round 38) and
/// the file's own folder (`beside`) for an include. Not URLs (`https://host/x` split at its
/// colon is `//host/x`) or `/proc`, `/sys`, `/dev`.
fn paths_named(text: &str, home: &Path, beside: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for part in crate::protocol::loading_parts(text) {
        for word in part.split(|c: char| c.is_whitespace() || "=:,;()<>|&`{}[]".contains(c)) {
            if word.is_empty() || word.starts_with("//") {
                continue;
            }
            match word
                .strip_prefix("~/")
                .or_else(|| word.strip_prefix("$HOME/"))
            {
                Some(rest) => out.push(home.join(rest)),
                None if word.starts_with('/') => out.push(PathBuf::from(word)),
                None if word.starts_with("./") || word.starts_with("../") => {
                    out.extend([beside.join(word), home.join(word)]);
                }
                None if word.contains('/') && !word.starts_with(['$', '-']) => {
                    out.extend([home.join(word), beside.join(word)]);
                }
                None => {}
            }
        }
    }
    out.retain(|p| !["/proc", "/sys", "/dev"].iter().any(|d| p.starts_with(d)));
    out
}

/// Whether a path `paths` holds leads into `ws` once resolved: its existing part with links
/// followed, the rest as written. At most 2,000 paths are resolved in all (`resolved`
/// remembers them).
fn leads_into(
    paths: &[PathBuf],
    ws: &Path,
    resolved: &mut std::collections::HashMap<PathBuf, bool>,
) -> bool {
    for path in paths {
        let into = match resolved.get(path) {
            Some(&into) => into,
            None if resolved.len() >= 2_000 => return false,
            None => {
                let into = crate::untrusted_fs::real_or_planned(path).starts_with(ws);
                resolved.insert(path.clone(), into);
                into
            }
        };
        if into {
            return true;
        }
    }
    false
}

/// The regular files of the home among `paths`, to read next (git's `[include] path =
/// ~/dotfiles/git/extra`, a sourced `~/dotfiles/shell/env`): at most 64. Not a history the
/// start-up file points its shell at (`HISTFILE=~/.zsh_history`), which records every folder
/// the user went to.
fn files_in_home(paths: &[PathBuf], homes: &[&Path]) -> Vec<PathBuf> {
    paths
        .iter()
        .filter(|p| homes.iter().any(|h| p.starts_with(h)))
        .filter(|p| {
            !p.file_name()
                .is_some_and(|n| is_a_record(&n.to_string_lossy()))
        })
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .take(64)
        .cloned()
        .collect()
}

/// The text of a configuration file: at most [`MAX_FILE`] bytes, none for a binary (a program
/// in `~/bin`, an image in a toolchain's checkout), which is left after its first block. Not
/// opened where it is not a regular file (links followed: a dotfile linked into a workspace
/// where a command made a FIFO).
fn text_of(file: &Path) -> Option<Vec<u8>> {
    use std::io::Read;
    let (file, _) = crate::untrusted_fs::open_following(file).ok()?;
    let mut reader = file.take(MAX_FILE);
    let mut bytes = vec![0; 4096];
    let first = reader.read(&mut bytes).ok()?;
    bytes.truncate(first);
    if bytes.contains(&0) {
        return None;
    }
    reader.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The folder programs load from that is or holds `ws`, if any (red team round 36: a
/// command in `~/.vim` rewrote the plugin the next `vim` ran). The home's own dotted folders
/// but its caches and `~/.local/src`, where people keep source, and the XDG folders a
/// variable moves elsewhere.
fn loading_folder_holding(home: &Path, ws: &Path) -> Option<PathBuf> {
    let canonical_home = home.canonicalize().ok();
    for home in std::iter::once(home).chain(canonical_home.as_deref()) {
        let Ok(rel) = ws.strip_prefix(home) else {
            continue;
        };
        let mut parts = rel.components();
        let first = parts.next()?.as_os_str().to_string_lossy().into_owned();
        let second = parts
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        let kept_source = first == ".local" && second.as_deref() == Some("src");
        if first.starts_with('.') && first != ".cache" && !kept_source {
            return Some(home.join(first));
        }
        if crate::protocol::HOME_STARTUP_FOLDERS.contains(&first.as_str()) {
            return Some(home.join(first));
        }
    }
    ["XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .filter(|d| d.is_absolute())
        .map(|d| d.canonicalize().unwrap_or(d))
        .find(|d| ws.starts_with(d))
}

/// Where a link leads, also when what it names does not exist yet (a command could make it).
pub(super) fn link_target(link: &Path) -> PathBuf {
    link.canonicalize().unwrap_or_else(|_| {
        let named = std::fs::read_link(link).unwrap_or_default();
        let beside = link.parent().unwrap_or(Path::new("/")).join(named);
        crate::untrusted_fs::real_or_planned(&beside)
    })
}

/// Folders of the home that hold trees of what their program loads at start (Vim's `after/`,
/// `ftplugin/`, `pack/*/start/*/plugin/`; Emacs's, fish's and oh-my-zsh's trees): read whole,
/// to this depth (round 37).
const PLUGIN_TREES: &[&str] = &[
    ".vim",
    ".config/nvim",
    ".local/share/nvim/site",
    ".emacs.d",
    ".config/emacs",
    ".config/fish",
    ".oh-my-zsh/custom",
    ".zsh",
    ".config/zsh",
    ".bashrc.d",
    ".config/tmux",
    ".config/git",
    // `Include config.d/*/*` (round 38).
    ".ssh",
];
const PLUGIN_TREE_DEPTH: usize = 6;

/// Folders of the home where a tool manager links what it runs from wherever the user keeps
/// it (`rustup toolchain link`, `npm link` under a prefix in the home, global installs):
/// only their links are looked at, one level down (round 38).
const LINK_FOLDERS: &[&str] = &[
    ".rustup/toolchains",
    ".npm-global/lib/node_modules",
    ".npm-global/bin",
    ".local/lib/node_modules",
    ".bun/install/global/node_modules",
    ".cargo/bin",
    "go/bin",
];

/// The system's start-up files and folders, which every account's shell, `git`, `ssh`, vim and
/// tmux read (a shared tools folder in `/opt` put on `PATH` by `/etc/profile.d`, round 37).
const SYSTEM_CONFIGURATION: &[&str] = &[
    "/etc/profile",
    "/etc/profile.d",
    "/etc/bash.bashrc",
    "/etc/bashrc",
    "/etc/bash_completion.d",
    "/etc/environment",
    "/etc/zshenv",
    "/etc/zshrc",
    "/etc/zprofile",
    "/etc/zsh",
    "/etc/fish",
    "/etc/fish/conf.d",
    "/etc/gitconfig",
    "/etc/vimrc",
    "/etc/vim",
    "/etc/xdg/nvim",
    "/etc/ssh/ssh_config",
    "/etc/ssh/ssh_config.d",
    "/etc/tmux.conf",
    "/etc/inputrc",
    "/etc/npmrc",
    "/etc/pip.conf",
];

/// The files whose text is configuration: the home's dotfiles, the files directly in each of
/// its dotted folders and in each folder of `~/.config` and of a `$XDG_CONFIG_HOME` elsewhere
/// (`~/.cargo/config.toml`, `~/.gnupg/gpg-agent.conf`, `~/.config/starship.toml`: no list of
/// the programs that run what their settings name is complete, rounds 36–37), the trees of
/// [`PLUGIN_TREES`], the files of the start-up folders (`~/.bashrc.d`, `~/bin`, fish's
/// `conf.d`), the `.pth` and `*customize.py` files of the user's Python site folders, and the
/// system's ([`SYSTEM_CONFIGURATION`]). Not histories, caches or other records of what was
/// done, which name every folder the user went to.
fn configuration_files(home: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    // baton's sessions and state name every project it worked in, and its trust list the
    // ones the user trusts: records. Its configuration (hooks, servers) is configuration.
    let own = crate::protocol::baton_own_dirs();
    let own_config = own.first().cloned();
    let records: Vec<PathBuf> = own.iter().skip(1).cloned().collect();
    let trust_list = own_config.as_ref().map(|c| c.join("trusted.toml"));
    let mut add_files_of = |folder: &Path, only_dotfiles: bool, only_site: bool| {
        let mut folders = Vec::new();
        for entry in std::fs::read_dir(folder).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let site_file = name.ends_with(".pth") || name.ends_with("customize.py");
            if (only_dotfiles && !name.starts_with('.'))
                || (only_site && !site_file)
                || is_a_record(&name)
                || is_documentation(&name)
                || trust_list.as_ref() == Some(&entry.path())
            {
                continue;
            }
            // A link anywhere here is configuration for where it leads: one into the workspace
            // is found where the list is read, a file it leads to is read there, a folder
            // walked. Anything else is what the folder listing says it is (no `stat`).
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let link = kind.is_symlink();
            let dir = if link {
                std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir())
            } else {
                kind.is_dir()
            };
            if link || kind.is_file() {
                out.push(entry.path());
            }
            if dir && !records.contains(&entry.path()) {
                folders.push(entry.path());
            }
        }
        folders
    };
    let dotted = add_files_of(home, true, false);
    let config = home.join(".config");
    let moved_config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && *d != config);
    for folder in dotted {
        let below = add_files_of(&folder, false, false);
        if folder == config {
            for app in below {
                add_files_of(&app, false, false);
            }
        }
    }
    if let Some(moved) = &moved_config {
        for app in add_files_of(moved, false, false) {
            add_files_of(&app, false, false);
        }
    }
    let trees = PLUGIN_TREES
        .iter()
        .map(|t| home.join(t))
        .chain(moved_config.iter().flat_map(|m| {
            PLUGIN_TREES
                .iter()
                .filter_map(|t| t.strip_prefix(".config/"))
                .map(|t| m.join(t))
        }));
    for tree in trees {
        let mut level = vec![tree];
        for _ in 0..PLUGIN_TREE_DEPTH {
            let mut next = Vec::new();
            for folder in &level {
                next.extend(add_files_of(folder, false, false));
            }
            level = next;
        }
    }
    for folder in crate::protocol::home_startup_folders(home) {
        let Some(parent) = folder.parent() else {
            continue;
        };
        // Read above already: a dotted folder of the home, or a folder of `~/.config`.
        let dotted = folder
            .file_name()
            .is_some_and(|n| n.as_encoded_bytes().starts_with(b"."));
        if (parent == home && dotted) || parent == config {
            continue;
        }
        let site = folder.ends_with("site-packages");
        add_files_of(&folder, false, site);
    }
    for site in python_site_folders(home) {
        add_files_of(&site, false, true);
    }
    let mut system_files: Vec<PathBuf> = ["GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .filter(|f| f.is_absolute() && f.is_file())
        .collect();
    for system in SYSTEM_CONFIGURATION.iter().map(Path::new) {
        if system.is_dir() {
            add_files_of(system, false, false);
        } else if system.is_file() {
            system_files.push(system.to_path_buf());
        }
    }
    out.extend(system_files);
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(p.clone()));
    out
}

/// The site folders of the Pythons the user runs from the home: the user site, virtual
/// environments (`~/.venv`, `~/.virtualenvs/*`, `~/venvs/*`), pyenv's versions. Every Python
/// there loads their `.pth` and `*customize.py` files at start (an editable install of the
/// workspace, round 37).
fn python_site_folders(home: &Path) -> Vec<PathBuf> {
    let mut prefixes = vec![home.join(".local"), home.join(".venv"), home.join("venv")];
    for parent in [
        ".virtualenvs",
        "venvs",
        ".pyenv/versions",
        ".local/share/virtualenvs",
        // Tools installed editable from a folder (`pipx install -e ~/tools`, round 38).
        ".local/share/pipx/venvs",
        ".local/pipx/venvs",
        ".local/share/uv/tools",
    ] {
        for entry in std::fs::read_dir(home.join(parent))
            .into_iter()
            .flatten()
            .flatten()
        {
            prefixes.push(entry.path());
        }
    }
    let mut out = Vec::new();
    for prefix in prefixes {
        for lib in ["lib", "lib64"] {
            for version in std::fs::read_dir(prefix.join(lib))
                .into_iter()
                .flatten()
                .flatten()
            {
                if version
                    .file_name()
                    .as_encoded_bytes()
                    .starts_with(b"python")
                {
                    out.push(version.path().join("site-packages"));
                }
            }
        }
    }
    out
}

/// Whether a file's name says it is documentation or an image (a toolchain checkout's
/// `README.md`, `CHANGELOG.md`, `LICENSE`, screenshots): read by people, loaded by no program.
fn is_documentation(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    let stem = lower.split('.').next().unwrap_or("");
    [
        ".md", ".rst", ".txt", ".html", ".png", ".gif", ".jpg", ".jpeg", ".svg", ".pdf",
    ]
    .iter()
    .any(|ext| lower.ends_with(ext))
        || [
            "license",
            "licence",
            "copying",
            "changelog",
            "authors",
            "notice",
        ]
        .contains(&stem)
}

/// Whether a dotfile's name says it records what was done (histories, caches, recent files,
/// editor state) rather than configuring what runs.
fn is_a_record(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ([
        "hist",
        "hsts",
        "cache",
        "recent",
        "viminfo",
        "lesshst",
        "authority",
        "errors",
        ".log",
        "state",
        "lock",
        "zcompdump",
        "known_hosts",
    ]
    .iter()
    .any(|w| lower.contains(w))
        // Directory jumpers' databases (z, fasd) list every folder the user went to.
        || [".z", ".fasd"].contains(&lower.as_str()))
        // A script is loaded whatever its name (`~/.bashrc.d/history.sh`, round 37).
        && !SCRIPTS.iter().any(|ext| lower.ends_with(ext))
}

/// The endings of files a shell, an editor or an interpreter loads.
const SCRIPTS: &[&str] = &[
    ".sh", ".bash", ".zsh", ".fish", ".vim", ".lua", ".el", ".py", ".pth", ".rc", ".conf", ".toml",
    ".json", ".js", ".rb", ".pl",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn home_and_ws() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let base = tempfile::tempdir().expect("tempdir");
        let home = base.path().canonicalize().expect("canonical").join("home");
        let ws = home.join("tools");
        std::fs::create_dir_all(&ws).expect("mkdir");
        (base, home, ws)
    }

    #[test]
    fn any_mention_by_path_in_a_dotfile_or_start_up_folder_makes_it_configuration() {
        let (_base, home, ws) = home_and_ws();
        for (file, text) in [
            (".bashrc", "export PATH=\"$HOME/tools/bin:$PATH\"\n"),
            (".bashrc", "PROMPT_COMMAND=~/tools/bin/prompt\n"),
            (".bashrc", "[ -f ~/tools/env.sh ] && . ~/tools/env.sh\n"),
            (".vimrc", "set rtp+=~/tools/vim\n"),
            (".npmrc", "script-shell=${HOME}/tools/bin/shx\n"),
            (".gdbinit", &format!("source {}/gdb.gdb\n", ws.display())),
            (".gitconfig", "[core]\n\tfsmonitor = ~/tools/bin/watch\n"),
            (".ssh/config", "Match exec \"~/tools/bin/jump %h\"\n"),
            (".bashrc.d/tools.sh", ". ~/tools/env.sh\n"),
            (
                ".local/lib/python3.11/site-packages/t.pth",
                &format!("{}\n", ws.display()),
            ),
            (".tmux.conf", "run-shell ~/tools\n"),
            (
                ".cargo/config.toml",
                "[target.x86_64-unknown-linux-gnu]\nrunner = \"~/tools/run\"\n",
            ),
            (".gnupg/gpg-agent.conf", "pinentry-program ~/tools/pin\n"),
            (
                ".config/starship.toml",
                "[custom.x]\ncommand = \"~/tools/x\"\n",
            ),
            (".config/direnv/direnvrc", "source ~/tools/direnv.sh\n"),
            (
                "bin/wrapper",
                "#!/bin/sh\nexec python3 ~/tools/main.py \"$@\"\n",
            ),
            // Round 37: quoted as a shell or git reads it, deeper in a plugin tree, a Python
            // start-up hook.
            (".bashrc", "export PATH=\"$HOME\"/tools/bin:$PATH\n"),
            (".bashrc", "PATH=${HOME-}/tools/bin:$PATH\n"),
            (
                ".gitconfig",
                "[core]\n\tpager = \"$HOME\"/\"tools/bin/pager\"\n",
            ),
            (".vim/after/ftplugin/sh.vim", "source ~/tools/sh.vim\n"),
            (
                ".vim/pack/me/start/x/plugin/x.vim",
                "runtime ~/tools/x.vim\n",
            ),
            (
                ".local/lib/python3.11/site-packages/usercustomize.py",
                "exec(open('~/tools/h.py').read())\n",
            ),
        ] {
            let path = home.join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, text).expect("write");
            assert_eq!(
                configuration_of(&home, &ws),
                Some(Configuration::Named(path.clone())),
                "{file}: {text}"
            );
            std::fs::remove_file(&path).expect("rm");
        }
    }

    #[test]
    fn what_configuration_includes_and_links_to_the_workspace_count_too() {
        let (_base, home, ws) = home_and_ws();
        std::fs::create_dir_all(home.join("dotfiles/git")).expect("mkdir");
        std::fs::write(
            home.join("dotfiles/git/extra"),
            "[core]\n\tfsmonitor = ~/tools/w\n",
        )
        .expect("write");
        std::fs::write(
            home.join(".gitconfig"),
            "[include]\n\tpath = ~/dotfiles/git/extra\n",
        )
        .expect("write");
        assert_eq!(
            configuration_of(&home, &ws),
            Some(Configuration::Named(home.join("dotfiles/git/extra")))
        );
        std::fs::remove_file(home.join(".gitconfig")).expect("rm");
        std::os::unix::fs::symlink(&ws, home.join("t")).expect("link");
        std::fs::write(home.join(".bashrc"), "export PATH=~/t/bin:$PATH\n").expect("write");
        assert_eq!(
            configuration_of(&home, &ws),
            Some(Configuration::Named(home.join(".bashrc")))
        );
    }

    #[test]
    fn round_37_links_anywhere_scripts_named_like_records_and_aliases_that_run_count() {
        let (base, home, ws) = home_and_ws();
        let outside = base.path().canonicalize().expect("canonical").join("opt");
        std::fs::create_dir_all(&outside).expect("mkdir");
        std::os::unix::fs::symlink(&ws, outside.join("tl")).expect("link");
        let tl = outside.join("tl/bin");
        for (file, text) in [
            (".bashrc", format!("export PATH={}:$PATH\n", tl.display())),
            (
                ".bashrc",
                "alias deploy='cd ~/tools && ./bin/deploy'\n".to_string(),
            ),
            (
                ".bashrc.d/history.sh",
                "PROMPT_COMMAND=~/tools/bin/p\n".to_string(),
            ),
            (".bashrc", "PATH=${HOME%/}/tools/bin:$PATH\n".to_string()),
            (".bashrc", "cd\n. tools/env.sh\n".to_string()),
            (
                ".ssh/config.d/team/client",
                "ProxyCommand ~/tools/jump %h\n".to_string(),
            ),
            (
                ".local/share/pipx/venvs/mytool/lib/python3.11/site-packages/_mytool.pth",
                format!("{}\n", ws.display()),
            ),
            (
                ".venv/lib/python3.11/site-packages/__editable__.tools.pth",
                format!("{}\n", ws.display()),
            ),
        ] {
            let path = home.join(file);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, &text).expect("write");
            assert_eq!(
                configuration_of(&home, &ws),
                Some(Configuration::Named(path.clone())),
                "{file}: {text}"
            );
            std::fs::remove_file(&path).expect("rm");
        }
        for link in [
            ".vim/pack/dev/start/mine",
            ".git-templates/hooks",
            // Round 38: tool managers' links.
            ".rustup/toolchains/stage1",
            ".npm-global/lib/node_modules/mytool",
        ] {
            let path = home.join(link);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::os::unix::fs::symlink(&ws, &path).expect("link");
            assert_eq!(
                configuration_of(&home, &ws),
                Some(Configuration::Linked(path.clone())),
                "{link}"
            );
            std::fs::remove_file(&path).expect("rm");
        }
    }

    #[test]
    fn going_there_comments_records_and_other_folders_are_not_configuration() {
        let (_base, home, ws) = home_and_ws();
        std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
        for (file, text) in [
            (
                ".bashrc",
                "alias t='cd ~/tools'\n# . ~/tools/env.sh\nexport X=~/tools-old\n",
            ),
            (
                ".gitconfig",
                "[safe]\n\tdirectory = ~/tools\n[includeIf \"gitdir:~/tools/\"]\n",
            ),
            (".bash_history", ". ~/tools/env.sh\n"),
            (".viminfo", "> ~/tools/x.txt\n"),
            (".profile", "export GOPATH=~/go\n"),
            (
                ".claude.json",
                "{\"projects\": {\n  \"~/tools\": {\"allowedTools\": []}}}\n",
            ),
            (".z", "~/tools|12|1700000000\n"),
            (".zshrc", "HISTFILE=~/.zsh_history\n_Z_DATA=\"$HOME/.z\"\n"),
            (".zsh_history", ": 1700000000:0;. ~/tools/env.sh\n"),
        ] {
            std::fs::write(home.join(file), text).expect("write");
        }
        assert_eq!(configuration_of(&home, &ws), None);
    }

    #[test]
    fn a_folder_programs_load_from_is_configuration_a_cache_or_kept_source_is_not() {
        let (_base, home, _ws) = home_and_ws();
        for inside in [
            ".vim",
            ".config/nvim",
            ".emacs.d/lisp",
            ".oh-my-zsh/custom",
            "bin",
        ] {
            let ws = home.join(inside);
            std::fs::create_dir_all(&ws).expect("mkdir");
            let top = home.join(inside.split('/').next().expect("first"));
            assert_eq!(
                configuration_of(&home, &ws),
                Some(Configuration::Inside(top)),
                "{inside}"
            );
        }
        for kept in [".cache/yay/pkg", ".local/src/dwm", "src/proj"] {
            let ws = home.join(kept);
            std::fs::create_dir_all(&ws).expect("mkdir");
            assert_eq!(configuration_of(&home, &ws), None, "{kept}");
        }
    }

    #[test]
    fn links_into_it_from_bin_and_dotfiles_make_it_configuration_links_to_above_do_not() {
        let (_base, home, ws) = home_and_ws();
        std::fs::create_dir_all(ws.join("bin")).expect("mkdir");
        std::fs::create_dir_all(home.join("bin")).expect("mkdir");
        std::os::unix::fs::symlink(&home, home.join("work")).expect("link");
        std::os::unix::fs::symlink(home.parent().expect("base"), home.join(".up")).expect("link");
        assert_eq!(configuration_of(&home, &ws), None);
        std::os::unix::fs::symlink(ws.join("bin/gs"), home.join("bin/gs")).expect("link");
        assert_eq!(
            configuration_of(&home, &ws),
            Some(Configuration::Linked(home.join("bin/gs")))
        );
        std::fs::remove_file(home.join("bin/gs")).expect("rm");
        std::os::unix::fs::symlink(&ws, home.join(".vim")).expect("link");
        assert_eq!(
            configuration_of(&home, &ws),
            Some(Configuration::Linked(home.join(".vim")))
        );
    }
}
