//! `baton trajectory`: turns a saved `baton --exec --json` event stream into the ATIF v1.7
//! trajectory `baton eval` writes for each trial, for harnesses that run baton themselves
//! (Harbor's installed agent runs it in the task's container after the agent's turn).

use crate::protocol::stdio::eprintln;
use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Args;

use super::exit;
use crate::eval::atif;
use crate::eval::events::parse_lines;

/// Bigger than any event stream a trial makes; a larger file is refused, not loaded.
const MAX_EVENTS_BYTES: u64 = 1 << 30;

#[derive(Debug, Clone, Args)]
pub struct TrajectoryArgs {
    /// The events file: the JSON Lines of `baton --exec --json` (`-` = stdin). Lines that are
    /// not events are skipped.
    #[arg(value_name = "EVENTS")]
    pub events: PathBuf,
    /// Write the trajectory to FILE (atomically) instead of stdout.
    #[arg(long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// A file with the instruction, for a stream that has no turn (a run that failed before
    /// it began); a missing file is no instruction.
    #[arg(long, value_name = "FILE")]
    pub instruction_file: Option<PathBuf>,
    /// The agent's name in the trajectory.
    #[arg(long, value_name = "NAME", default_value = "baton")]
    pub agent_name: String,
    /// Where the run's session file is (the global `--session-dir` given to the run; default:
    /// the folder the stream's `session` event names). The summary texts come from it.
    #[arg(skip)]
    pub session_dir: Option<PathBuf>,
}

/// Runs `baton trajectory`; returns the exit code.
pub fn run(args: TrajectoryArgs) -> i32 {
    let text = match read_events(&args.events) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("baton trajectory: {}: {e}", args.events.display());
            return exit::USAGE;
        }
    };
    let events = parse_lines(&text);
    if events.is_empty() {
        eprintln!(
            "baton trajectory: {}: no baton events in it (expected the output of `baton --exec --json`)",
            args.events.display()
        );
        return exit::USAGE;
    }
    let dir = args.session_dir.clone().or_else(|| session_folder(&events));
    let texts = match dir
        .as_deref()
        .and_then(|d| atif::SessionTexts::find(d, &events))
    {
        Some(t) => t,
        None => {
            eprintln!(
                "baton trajectory: the run's session file was not found{}; summary texts are left out (pass --session-dir)",
                dir.map(|d| format!(" in {}", d.display()))
                    .unwrap_or_default()
            );
            atif::SessionTexts::default()
        }
    };
    let instruction = args
        .instruction_file
        .as_deref()
        .and_then(|p| std::fs::read(p).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let traj = atif::trajectory(
        &events,
        &texts,
        &instruction,
        &args.agent_name,
        env!("CARGO_PKG_VERSION"),
    );
    let json = match serde_json::to_string_pretty(&traj) {
        Ok(j) => j + "\n",
        Err(e) => {
            eprintln!("baton trajectory: {e}");
            return exit::AGENT_ERROR;
        }
    };
    let written = match &args.out {
        Some(path) => write_atomically(path, json.as_bytes()),
        None => std::io::stdout().lock().write_all(json.as_bytes()),
    };
    match written {
        Ok(()) => exit::OK,
        Err(e) => {
            let to = args
                .out
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "stdout".into());
            eprintln!("baton trajectory: cannot write {to}: {e}");
            exit::AGENT_ERROR
        }
    }
}

fn read_events(path: &std::path::Path) -> std::io::Result<String> {
    let mut bytes = Vec::new();
    let reader: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(path)?)
    };
    reader.take(MAX_EVENTS_BYTES + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_EVENTS_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB",
            MAX_EVENTS_BYTES >> 20
        )));
    }
    // A stream cut inside a character (a killed run) still converts.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The folder of the session file the `session` event names.
fn session_folder(events: &[serde_json::Value]) -> Option<PathBuf> {
    events
        .iter()
        .find(|e| e.get("type").and_then(|t| t.as_str()) == Some("session"))?
        .get("session_file")?
        .as_str()
        .and_then(|p| std::path::Path::new(p).parent().map(PathBuf::from))
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
