//! The trial's record: Harbor's `TrialResult` and `StepResult` fields, then baton's own.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::eval::events::{HopLatency, HopRecord, Tokens};
use crate::eval::process::Outcome;

/// Start and end of one phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseTiming {
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration_sec: f64,
}

impl From<&Outcome> for PhaseTiming {
    fn from(o: &Outcome) -> Self {
        PhaseTiming {
            started_at: o.started_at,
            finished_at: o.finished_at,
            duration_sec: o.duration.as_secs_f64(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Timings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment_setup: Option<PhaseTiming>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_execution: Option<PhaseTiming>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifier: Option<PhaseTiming>,
    /// Wall time of the whole trial.
    pub total_sec: f64,
    /// Time spent by the runner itself: the total minus the time the task's and agent's
    /// processes ran (copying, sandbox setup, reading results).
    pub runner_overhead_sec: f64,
}

/// How the agent process ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentExit {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    pub timed_out: bool,
}

/// Harbor's `exception_info`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExceptionInfo {
    pub exception_type: String,
    #[serde(rename = "exception_message")]
    pub message: String,
    /// Harbor's field; baton's errors are values, so this holds the message again.
    pub exception_traceback: String,
    pub occurred_at: DateTime<Utc>,
}

/// Harbor's `TimingInfo`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TimingInfo {
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

impl From<&PhaseTiming> for TimingInfo {
    fn from(p: &PhaseTiming) -> Self {
        TimingInfo {
            started_at: p.started_at,
            finished_at: p.finished_at,
        }
    }
}

/// One step of a multi-step trial: Harbor's `StepResult` fields, then baton's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepRecord {
    pub step_name: String,
    /// Harbor's `AgentContext`: token counts.
    pub agent_result: serde_json::Value,
    /// `{ "rewards": … }`, absent when the step was not scored.
    pub verifier_result: Option<serde_json::Value>,
    pub exception_info: Option<ExceptionInfo>,
    pub agent_execution: Option<TimingInfo>,
    pub verifier: Option<TimingInfo>,
    pub reward: Option<f64>,
    pub infrastructure_error: bool,
    pub agent_exit: AgentExit,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tests: BTreeMap<String, String>,
    /// `steps/<name>/` of the trial folder: this step's `agent/`, `verifier/`, `artifacts/`.
    pub dir: PathBuf,
}

/// Per-trial record in `result.json`: Harbor's `TrialResult` fields (so Harbor's viewer and
/// tools read baton's jobs), then baton's own.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrialResult {
    pub id: String,
    pub task_name: String,
    pub trial_name: String,
    /// `file://` URI of the trial folder.
    pub trial_uri: String,
    /// Harbor's `LocalTaskId`: `{ "path": … }`.
    pub task_id: serde_json::Value,
    /// SHA-256 over the task folder's file names and contents.
    pub task_checksum: String,
    /// Harbor's `TrialConfig` for this trial.
    pub config: serde_json::Value,
    pub agent_info: serde_json::Value,
    /// Harbor's `AgentContext`: token counts.
    pub agent_result: serde_json::Value,
    /// Harbor's `VerifierResult`: `{ "rewards": { "reward": … } }`, absent when unscored.
    pub verifier_result: Option<serde_json::Value>,
    pub environment_setup: Option<TimingInfo>,
    pub agent_setup: Option<TimingInfo>,
    pub agent_execution: Option<TimingInfo>,
    pub verifier: Option<TimingInfo>,
    /// Harbor's `step_results`: one entry per step run, for a multi-step task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_results: Option<Vec<StepRecord>>,
    pub trial_dir: PathBuf,
    pub task_dir: PathBuf,
    pub task_format: String,
    pub agent: String,
    pub isolation: String,
    /// The scored reward; `None` for an infrastructure error (not scored).
    pub reward: Option<f64>,
    /// What the verifier said, even when the scored reward is 0 because the agent timed out.
    pub verifier_rewards: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward_source: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tests: BTreeMap<String, String>,
    /// True when the trial is excluded from the score.
    pub infrastructure_error: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exception_info: Option<ExceptionInfo>,
    pub agent_exit: AgentExit,
    pub timings: Timings,
    pub tokens: Tokens,
    pub routes: BTreeMap<String, u64>,
    pub route_decisions: BTreeMap<String, u64>,
    pub hop_latency: BTreeMap<String, HopLatency>,
    pub hops: Vec<HopRecord>,
    pub tool_calls: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trajectory_path: Option<PathBuf>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
}

impl TrialResult {
    pub fn passed(&self) -> bool {
        self.reward.is_some_and(|r| r >= 1.0)
    }

    pub fn timed_out(&self) -> bool {
        self.agent_exit.timed_out
    }
}

/// Harbor's `VerifierResult` of a scored reward: the verifier's keys, `reward` the score.
pub(super) fn verifier_result(
    reward: Option<f64>,
    rewards: &BTreeMap<String, f64>,
) -> Option<serde_json::Value> {
    reward.map(|reward| {
        let mut map: serde_json::Map<String, serde_json::Value> = rewards
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .collect();
        map.insert("reward".into(), serde_json::json!(reward));
        serde_json::json!({ "rewards": map })
    })
}
