//! `baton trust`: the user's list of folders whose `.baton/config.toml` may lower safety
//! settings — add one (as its config file is now), list them, remove one.

use crate::protocol::stdio::{eprintln, println};
use std::path::{Path, PathBuf};

use clap::Args;

use super::exit;
use crate::config::{TrustEntry, TrustList, TrustStatus, TrustedFiles, folder_config};
use crate::protocol::{terminal_safe, terminal_safe_line};

#[derive(Debug, Clone, Args)]
pub struct TrustArgs {
    /// The folder holding `.baton/` (default: the one whose config applies here, else the
    /// workspace).
    #[arg(value_name = "PATH", conflicts_with_all = ["list", "remove"])]
    pub path: Option<PathBuf>,
    /// List the trusted folders and whether each config file is still the one trusted.
    #[arg(long)]
    pub list: bool,
    /// Stop trusting a folder.
    #[arg(long, value_name = "PATH", conflicts_with = "list")]
    pub remove: Option<PathBuf>,
    /// The workspace (the global `-C/--cd` flag; default: the current directory).
    #[arg(skip)]
    pub workspace: Option<PathBuf>,
}

/// Runs `baton trust`; returns the exit code.
pub fn run(args: TrustArgs) -> i32 {
    let mut list = match TrustList::load() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("baton trust: {}", terminal_safe(&e.to_string()));
            return exit::USAGE;
        }
    };
    if args.list {
        print_list(&list);
        return exit::OK;
    }
    if let Some(path) = args.remove {
        let path = path.canonicalize().unwrap_or(path);
        if !list.remove(&path) {
            eprintln!(
                "baton trust: {} is not a trusted folder",
                shown(&path.display().to_string())
            );
            return exit::USAGE;
        }
        return match list.save() {
            Ok(_) => {
                println!("no longer trusted: {}", shown(&path.display().to_string()));
                exit::OK
            }
            Err(e) => {
                eprintln!("baton trust: cannot write the trust list: {e}");
                exit::AGENT_ERROR
            }
        };
    }
    let folder = match folder_to_trust(args.path, args.workspace) {
        Ok(f) => f,
        Err(why) => {
            eprintln!("baton trust: {}", terminal_safe(&why));
            return exit::USAGE;
        }
    };
    // Read once: what is shown is what the entry's digests cover.
    let files = TrustedFiles::read(&folder);
    let previous = list.entry(&folder).cloned();
    let entry = list.trust_files(&folder, &files);
    let saved = match list.save() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("baton trust: cannot write the trust list: {e}");
            return exit::AGENT_ERROR;
        }
    };
    println!("trusted {}", shown(&entry.path.display().to_string()));
    show_trusted(&entry.path, &files);
    if let Some(previous) = previous {
        show_changes(&previous, &entry);
    }
    println!("(list: {})", shown(&saved.display().to_string()));
    exit::OK
}

/// What trusting `folder` lets apply or run outside the sandbox, from the bytes trusted.
fn show_trusted(folder: &Path, files: &TrustedFiles) {
    let config = folder_config(folder);
    match std::str::from_utf8(files.project.config.as_deref().unwrap_or_default()) {
        Ok(text) if files.project.config.is_ok() => {
            println!(
                "its {} may now lower safety settings; as trusted:",
                shown(&config.display().to_string())
            );
            for line in text.lines() {
                println!("    {}", terminal_safe_line(line));
            }
        }
        _ => println!(
            "it has no .baton/config.toml yet; one written later is not trusted until you run \
             baton trust again"
        ),
    }
    let hooks_path = crate::config::hooks_path(folder);
    if let Ok(bytes) = &files.hooks {
        println!(
            "hooks it lets run outside the sandbox ({}):",
            shown(&hooks_path.display().to_string())
        );
        match crate::hooks::describe(bytes, &hooks_path) {
            Ok(hooks) if hooks.is_empty() => println!("    (none)"),
            Ok(hooks) => {
                for h in hooks {
                    println!("    {}", terminal_safe_line(&h));
                }
            }
            Err(e) => println!(
                "    {} (no hook runs until it parses)",
                terminal_safe_line(&e.to_string())
            ),
        }
    }
    let json = folder.join(crate::config::mcp::PROJECT_JSON);
    let mut servers = Vec::new();
    for parsed in [
        crate::config::mcp::parse_json(&json, &files.project.servers),
        crate::config::mcp::parse_toml(&config, &files.project.config),
    ] {
        match parsed {
            Ok(found) => servers.extend(found),
            // Say so: a file whose servers cannot be read now would start them once it can.
            Err(e) => println!(
                "MCP servers it declares cannot be read now ({}); they start in a session where \
                 they can be",
                terminal_safe_line(&e.to_string())
            ),
        }
    }
    if !servers.is_empty() {
        println!(
            "MCP servers it lets start (stdio ones in the sandbox, read-only, with the network; \
             outside it with --sandbox off; http ones are sent what their entry names):"
        );
        for s in servers {
            println!(
                "    {}: {}",
                terminal_safe_line(&s.name),
                terminal_safe_line(&s.transport.describe())
            );
            if let crate::config::McpTransport::Stdio { env, .. } = &s.transport
                && !env.is_empty()
            {
                let names: Vec<&str> = env.keys().map(String::as_str).collect();
                println!("      env: {}", terminal_safe_line(&names.join(", ")));
            }
            if !s.reads_env.is_empty() {
                println!(
                    "      takes from your environment: {}",
                    terminal_safe_line(&s.reads_env.join(", "))
                );
            }
        }
    }
}

/// What changed in the folder's files since `before` was trusted, as unified diffs.
fn show_changes(before: &TrustEntry, now: &TrustEntry) {
    if before.config_sha256 == now.config_sha256 && before.hooks_sha256 == now.hooks_sha256 {
        println!(
            "nothing changed since you trusted it ({})",
            shown(&before.trusted_at)
        );
        return;
    }
    println!(
        "changed since you trusted it ({}):",
        shown(&before.trusted_at)
    );
    if before.texts.is_empty() {
        println!("    (that trust kept no copy of the files to compare with)");
        return;
    }
    let pairs = [
        (
            ".baton/config.toml",
            &before.texts.config,
            &now.texts.config,
        ),
        (".baton/hooks.json", &before.texts.hooks, &now.texts.hooks),
        (".mcp.json", &before.texts.mcp_json, &now.texts.mcp_json),
    ];
    for (name, old, new) in pairs {
        if old == new {
            continue;
        }
        let (old, new) = (old.as_deref().unwrap_or(""), new.as_deref().unwrap_or(""));
        let diff = similar::TextDiff::from_lines(old, new);
        let text = diff
            .unified_diff()
            .context_radius(2)
            .header(
                &format!("{name} (trusted before)"),
                &format!("{name} (now)"),
            )
            .to_string();
        for line in text.lines() {
            println!("    {}", terminal_safe_line(line));
        }
    }
}

fn shown(text: &str) -> String {
    terminal_safe_line(text).into_owned()
}

/// The folder `baton trust` without PATH means: the one whose project config applies to the
/// workspace (looked up without the home limit, so a file the limit skipped can be trusted),
/// else the workspace itself.
fn folder_to_trust(path: Option<PathBuf>, workspace: Option<PathBuf>) -> Result<PathBuf, String> {
    let cwd = std::env::current_dir().map_err(|e| format!("no current directory: {e}"))?;
    if let Some(path) = path {
        let folder = cwd.join(path);
        return folder
            .canonicalize()
            .ok()
            .filter(|f| f.is_dir())
            .ok_or_else(|| format!("{} is not a folder", folder.display()));
    }
    let workspace = cwd.join(workspace.unwrap_or_else(|| cwd.clone()));
    let workspace = workspace
        .canonicalize()
        .map_err(|e| format!("{}: {e}", workspace.display()))?;
    Ok(nearest_config_folder(&workspace).unwrap_or(workspace))
}

fn nearest_config_folder(workspace: &Path) -> Option<PathBuf> {
    workspace
        .ancestors()
        .find(|d| folder_config(d).is_file())
        .map(Path::to_path_buf)
}

fn print_list(list: &TrustList) {
    if list.entries.is_empty() {
        println!("no trusted folders (baton trust PATH adds one)");
        return;
    }
    for e in &list.entries {
        let state = if !e.path.is_dir() {
            "folder gone"
        } else {
            match list.status(&e.path) {
                TrustStatus::Trusted if list.hooks_status(&e.path) != TrustStatus::Trusted => {
                    "hooks.json changed since trusted: its hooks do not run (baton trust it again)"
                }
                TrustStatus::Trusted => "trusted",
                TrustStatus::Changed => {
                    "config changed since trusted: not applied (baton trust it again)"
                }
                TrustStatus::Untrusted => "not trusted",
            }
        };
        println!(
            "{}  {}  {state}",
            shown(&e.trusted_at),
            shown(&e.path.display().to_string())
        );
    }
}
