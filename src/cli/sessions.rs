//! `baton sessions`: the saved sessions, newest first.

use super::args::SessionsArgs;
use super::exit;
use crate::config::Config;

pub fn run(config: &Config, args: &SessionsArgs) -> i32 {
    let sessions = match crate::session::list(&config.session_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("baton: {e}");
            return exit::AGENT_ERROR;
        }
    };
    if sessions.is_empty() {
        eprintln!("No sessions in {}.", config.session_dir.display());
        return exit::OK;
    }
    println!(
        "{:<36}  {:<20}  {:>5}  FIRST MESSAGE",
        "ID", "CREATED", "TURNS"
    );
    for s in sessions.iter().take(args.limit) {
        let created: String = s
            .created
            .chars()
            .take(19)
            .collect::<String>()
            .replace('T', " ");
        println!("{:<36}  {:<20}  {:>5}  {}", s.id, created, s.turns, s.title);
    }
    if sessions.len() > args.limit {
        eprintln!(
            "({} more; --limit N shows more)",
            sessions.len() - args.limit
        );
    }
    exit::OK
}
