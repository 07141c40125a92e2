//! `baton sessions`: the saved sessions of this workspace (`--all`: of every workspace), newest
//! first, as a table or (`--json`) one JSON array.

use super::args::SessionsArgs;
use super::exit;
use crate::config::Config;
use crate::protocol::stdio::{eprintln, println};
use crate::protocol::{terminal_safe_json, terminal_safe_line};
use crate::session::SessionInfo;

pub fn run(config: &Config, args: &SessionsArgs, all: bool) -> i32 {
    let mut sessions = match crate::session::list(&config.session_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("baton: {e}");
            return exit::AGENT_ERROR;
        }
    };
    let total = sessions.len();
    if !all {
        sessions.retain(|s| s.is_of(&config.workspace));
    }
    let elsewhere = total - sessions.len();
    let more = sessions.len().saturating_sub(args.limit);
    sessions.truncate(args.limit);
    if args.json {
        let list: Vec<serde_json::Value> = sessions.iter().map(to_json).collect();
        let list = serde_json::Value::Array(list).to_string();
        println!("{}", terminal_safe_json(&list));
        return exit::OK;
    }
    if sessions.is_empty() {
        if all || elsewhere == 0 {
            eprintln!("No sessions in {}.", config.session_dir.display());
        } else {
            eprintln!(
                "No sessions in this workspace ({}) yet; {elsewhere} in other workspaces \
                 (--all lists them).",
                config.workspace.display()
            );
        }
        return exit::OK;
    }
    println!(
        "{:<36}  {:<16}  {:>5}  {:<24}  NAME / FIRST MESSAGE",
        "ID", "LAST ACTIVITY", "TURNS", "WORKSPACE"
    );
    for s in &sessions {
        let about = match &s.name {
            Some(name) if s.title.is_empty() => format!("[{name}]"),
            Some(name) => format!("[{name}] {}", s.title),
            None => s.title.clone(),
        };
        // Names, first messages and even ids come from session files, which hold what the
        // model and the user typed: printed as one line each, with nothing that can act.
        println!(
            "{:<36}  {:<16}  {:>5}  {:<24}  {}",
            terminal_safe_line(&s.id),
            s.last_activity(),
            s.turns,
            terminal_safe_line(&short_workspace(&s.workspace, 24)),
            terminal_safe_line(&about),
        );
    }
    if more > 0 {
        eprintln!("({more} more; --limit N shows more)");
    }
    if !all && elsewhere > 0 {
        eprintln!("({elsewhere} in other workspaces; --all lists them)");
    }
    exit::OK
}

fn to_json(s: &SessionInfo) -> serde_json::Value {
    serde_json::json!({
        "id": s.id,
        "name": s.name,
        "workspace": s.workspace,
        "created": s.created,
        "last_activity": s.last_activity_rfc3339(),
        "turns": s.turns,
        "first_message": s.title,
        "path": s.path.display().to_string(),
    })
}

/// The workspace in at most `width` characters: `~` for the home folder, then its tail.
pub fn short_workspace(workspace: &str, width: usize) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let shown = match workspace.strip_prefix(&home) {
        Some(rest) if !home.is_empty() && (rest.is_empty() || rest.starts_with('/')) => {
            format!("~{rest}")
        }
        _ => workspace.to_string(),
    };
    let count = shown.chars().count();
    if count <= width {
        return shown;
    }
    let tail: String = shown.chars().skip(count - (width - 1)).collect();
    format!("…{tail}")
}
