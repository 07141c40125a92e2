//! `baton trust`: the user's list of folders whose `.baton/config.toml` may lower safety
//! settings — add one (as its config file is now), list them, remove one.

use crate::protocol::stdio::{eprintln, println};
use std::path::{Path, PathBuf};

use clap::Args;

use super::exit;
use crate::config::{TrustList, TrustStatus, folder_config};
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
    let entry = list.trust(&folder);
    let saved = match list.save() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("baton trust: cannot write the trust list: {e}");
            return exit::AGENT_ERROR;
        }
    };
    let file = folder_config(&entry.path);
    println!("trusted {}", shown(&entry.path.display().to_string()));
    match std::fs::read_to_string(&file) {
        Ok(text) => {
            // What the user just trusted, as it is now: a later change needs a new `baton trust`.
            println!(
                "its {} may now lower safety settings; as trusted:",
                shown(&file.display().to_string())
            );
            for line in text.lines() {
                println!("    {}", terminal_safe_line(line));
            }
        }
        Err(_) => println!(
            "it has no .baton/config.toml yet; one written later is not trusted until you run \
             baton trust again"
        ),
    }
    println!("(list: {})", shown(&saved.display().to_string()));
    exit::OK
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
