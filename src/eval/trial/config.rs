//! The trial's configuration as Harbor reads it: `config.json`, `TrialConfig`, the task's checksum.

use std::path::Path;

use super::TrialSettings;
use super::files::walk_files;
use crate::eval::isolation::TrialPaths;
use crate::eval::task::Task;

/// The trial's `config.json`, in Harbor's `TrialConfig` shape (the task by path, the trial's
/// name and folder, the agent by name, the timeout multiplier), which Harbor's own model
/// reads; what only baton knows is under `baton`.
pub(super) fn write_config(task: &Task, paths: &TrialPaths, settings: &TrialSettings) {
    let config = serde_json::json!({
        "schema_version": 1,
        "task": { "path": task.dir },
        "trial_name": paths.root.file_name().map(|n| n.to_string_lossy().into_owned()),
        "trials_dir": paths.root.parent(),
        "timeout_multiplier": settings.timeout_multiplier,
        "agent": { "name": settings.agent.name() },
        "baton": {
            "task": task.name,
            "format": task.format.as_str(),
            "agent_timeout_sec": task.agent_timeout.map(|t| t.as_secs_f64()),
            "verifier_timeout_sec": task.verifier_timeout.as_secs_f64(),
            "allow_internet": task.allow_internet,
            "workdir": task.environment.workdir,
            "isolation": settings.isolation.kind.as_str(),
        },
    });
    if let Ok(json) = serde_json::to_string_pretty(&config) {
        let _ = std::fs::write(paths.root.join("config.json"), json);
    }
}

/// SHA-256 over the task folder's relative file names and contents, in name order.
pub(super) fn task_checksum(dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let mut files = walk_files(dir);
    files.sort();
    let mut h = Sha256::new();
    for f in files {
        let rel = f.strip_prefix(dir).unwrap_or(&f);
        h.update(rel.to_string_lossy().as_bytes());
        h.update([0]);
        if let Ok(bytes) = std::fs::read(&f) {
            h.update(&bytes);
        }
        h.update([0]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Harbor's `TrialConfig` for one trial: the task by path, the timeouts, the agent by name.
pub(super) fn harbor_trial_config(
    task: &Task,
    trial_name: &str,
    trial_dir: &Path,
    settings: &TrialSettings,
) -> serde_json::Value {
    serde_json::json!({
        "task": { "path": task.dir },
        "trial_name": trial_name,
        "trials_dir": trial_dir.parent(),
        "timeout_multiplier": settings.timeout_multiplier,
        "agent": {
            "name": settings.agent.name(),
            "override_timeout_sec": task.agent_timeout.map(|t| t.as_secs_f64()),
        },
        "verifier": { "override_timeout_sec": task.verifier_timeout.as_secs_f64() },
        "artifacts": task.artifacts.iter().map(|a| serde_json::json!({
            "source": a.source,
            "destination": a.destination,
        })).collect::<Vec<_>>(),
    })
}
