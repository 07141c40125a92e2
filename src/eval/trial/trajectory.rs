//! The agent's event stream read back: the trial's figures and its ATIF trajectory.

use std::path::Path;

use super::files::write_fresh;
use super::{TrialResult, TrialSettings};
use crate::eval::atif;
use crate::eval::events::{self, EventStats};
use crate::eval::fsutil::{MAX_TRIAL_OUTPUT, read_trial_output};
use crate::eval::isolation::TrialPaths;

pub(super) fn record_events(
    instruction: &str,
    paths: &TrialPaths,
    settings: &TrialSettings,
    r: &mut TrialResult,
    stdout: &Path,
) {
    let text = read_trial_output(&paths.agent_logs, stdout, MAX_TRIAL_OUTPUT).unwrap_or_default();
    let evs = events::parse_lines(&text);
    if evs.is_empty() {
        return;
    }
    let EventStats {
        tokens,
        routes,
        route_decisions,
        hops,
        hop_latency,
        tool_calls,
        turn_status,
        ..
    } = events::stats(&evs);
    r.tokens = tokens;
    r.routes = routes;
    r.route_decisions = route_decisions;
    r.hops = hops;
    r.hop_latency = hop_latency;
    r.tool_calls = tool_calls;
    r.turn_status = turn_status;
    // The summaries' texts are in the session file the agent wrote under its logs.
    let texts =
        atif::SessionTexts::find(&paths.agent_logs.join("sessions"), &evs).unwrap_or_default();
    let traj = atif::trajectory(
        &evs,
        &texts,
        instruction,
        settings.agent.name(),
        env!("CARGO_PKG_VERSION"),
    );
    let path = paths.agent_logs.join("trajectory.json");
    if let Ok(json) = serde_json::to_string_pretty(&traj)
        && write_fresh(&path, json.as_bytes()).is_ok()
    {
        r.trajectory_path = Some(path);
    }
}
