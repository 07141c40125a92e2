//! Reading a verifier's verdict: Harbor's `reward.txt` / `reward.json`, or pytest's `-rA`
//! short summary (TB1's parser), into one reward and the per-test statuses.

use std::collections::BTreeMap;
use std::path::Path;

/// What the verifier decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The scored value: `reward` from the files, or 1/0 from pytest (all tests pass).
    pub reward: f64,
    /// Every named reward (`reward.json` may carry several).
    pub rewards: BTreeMap<String, f64>,
    /// Per-test statuses from pytest output, when there was any.
    pub tests: BTreeMap<String, String>,
    /// `reward.txt`, `reward.json` or `pytest`.
    pub source: &'static str,
}

/// Why there is no verdict: an infrastructure error, not a failure.
#[derive(Debug, Clone, PartialEq)]
pub enum RewardError {
    /// No reward file and no pytest summary.
    Missing(String),
    /// A reward file that cannot be read or parsed.
    Invalid(String),
}

impl RewardError {
    /// Harbor-style exception type.
    pub fn exception_type(&self) -> &'static str {
        match self {
            RewardError::Missing(_) => "RewardFileNotFoundError",
            RewardError::Invalid(_) => "RewardFileParseError",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            RewardError::Missing(m) | RewardError::Invalid(m) => m,
        }
    }
}

/// Reads `verifier_dir/reward.txt`, then `reward.json`, then the pytest summary in `output`.
pub fn read(
    verifier_dir: &Path,
    output: &str,
    prefer_pytest: bool,
) -> Result<Verdict, RewardError> {
    let tests = parse_pytest(output);
    if prefer_pytest && let Some(v) = pytest_verdict(&tests) {
        return Ok(v);
    }
    let txt = verifier_dir.join("reward.txt");
    if let Some(text) = reward_file(verifier_dir, &txt)? {
        let reward = parse_reward_text(&text)
            .map_err(|e| RewardError::Invalid(format!("{}: {e}", txt.display())))?;
        return Ok(Verdict {
            reward,
            rewards: BTreeMap::from([("reward".to_string(), reward)]),
            tests: tests.unwrap_or_default(),
            source: "reward.txt",
        });
    }
    let json = verifier_dir.join("reward.json");
    if let Some(text) = reward_file(verifier_dir, &json)? {
        let rewards = parse_reward_json(&text)
            .map_err(|e| RewardError::Invalid(format!("{}: {e}", json.display())))?;
        let reward = scored_reward(&rewards);
        return Ok(Verdict {
            reward,
            rewards,
            tests: tests.unwrap_or_default(),
            source: "reward.json",
        });
    }
    pytest_verdict(&tests).ok_or_else(|| {
        RewardError::Missing(
            "the verifier wrote no /logs/verifier/reward.txt or reward.json and printed no pytest summary".to_string(),
        )
    })
}

/// The largest reward file read.
const MAX_REWARD_FILE: u64 = 1 << 20;

/// A reward file the verifier wrote, read as a trial's output
/// ([`crate::eval::fsutil::open_trial_output`]: never through a link, never a FIFO); `None`
/// when there is none.
fn reward_file(dir: &Path, file: &Path) -> Result<Option<String>, RewardError> {
    use std::io::Read;
    let cannot =
        |e: std::io::Error| RewardError::Invalid(format!("{}: cannot read: {e}", file.display()));
    let Some(f) = crate::eval::fsutil::open_trial_output(dir, file).map_err(cannot)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    f.take(MAX_REWARD_FILE)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

fn pytest_verdict(tests: &Option<BTreeMap<String, String>>) -> Option<Verdict> {
    let tests = tests.as_ref()?;
    let passed = tests
        .values()
        .all(|s| matches!(s.as_str(), "PASSED" | "SKIPPED" | "XFAIL"));
    let reward = if passed { 1.0 } else { 0.0 };
    Some(Verdict {
        reward,
        rewards: BTreeMap::from([("reward".to_string(), reward)]),
        tests: tests.clone(),
        source: "pytest",
    })
}

/// What is wrong with the contents of a reward file.
#[derive(Debug, thiserror::Error)]
pub enum RewardParseError {
    /// `reward.txt` holds something other than a number (the first 40 characters).
    #[error("expected a number, found '{found}'")]
    NotANumber { found: String },
    #[error("the reward {0} is not finite")]
    NotFinite(f64),
    #[error("invalid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("expected a JSON object of rewards")]
    NotAnObject,
    #[error("'{key}' is not a finite number")]
    KeyNotFinite { key: String },
    #[error("'{key}' must be a number, found {found}")]
    KeyNotANumber { key: String, found: String },
    #[error("the reward object is empty")]
    Empty,
}

/// A number, optionally surrounded by whitespace; `true`/`false` are accepted as 1/0.
pub fn parse_reward_text(text: &str) -> Result<f64, RewardParseError> {
    let t = text.trim();
    let value = match t.to_ascii_lowercase().as_str() {
        "true" | "pass" | "passed" => 1.0,
        "false" | "fail" | "failed" => 0.0,
        _ => t.parse::<f64>().map_err(|_| RewardParseError::NotANumber {
            found: t.chars().take(40).collect(),
        })?,
    };
    if !value.is_finite() {
        return Err(RewardParseError::NotFinite(value));
    }
    Ok(value)
}

/// A flat JSON object of numbers (booleans count as 1/0).
pub fn parse_reward_json(text: &str) -> Result<BTreeMap<String, f64>, RewardParseError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(RewardParseError::Json)?;
    if let Some(n) = value.as_f64() {
        return Ok(BTreeMap::from([("reward".to_string(), n)]));
    }
    let obj = value.as_object().ok_or(RewardParseError::NotAnObject)?;
    let mut out = BTreeMap::new();
    for (k, v) in obj {
        let n = match v {
            serde_json::Value::Number(n) => n
                .as_f64()
                .ok_or_else(|| RewardParseError::KeyNotFinite { key: k.clone() })?,
            serde_json::Value::Bool(b) => f64::from(u8::from(*b)),
            other => {
                return Err(RewardParseError::KeyNotANumber {
                    key: k.clone(),
                    found: other.to_string(),
                });
            }
        };
        out.insert(k.clone(), n);
    }
    if out.is_empty() {
        return Err(RewardParseError::Empty);
    }
    Ok(out)
}

/// `reward` when present, else the only value, else the mean of all values.
fn scored_reward(rewards: &BTreeMap<String, f64>) -> f64 {
    if let Some(r) = rewards.get("reward") {
        return *r;
    }
    rewards.values().sum::<f64>() / rewards.len() as f64
}

/// Test statuses from pytest's "short test summary info" block (`-rA`), or, without it, from
/// the final `N passed, M failed` line (tests then named `passed_1` …). `None` when pytest
/// printed neither.
pub fn parse_pytest(output: &str) -> Option<BTreeMap<String, String>> {
    const STATUSES: [&str; 6] = ["PASSED", "FAILED", "ERROR", "SKIPPED", "XFAIL", "XPASS"];
    let mut tests = BTreeMap::new();
    if let Some(at) = output.rfind("short test summary info") {
        for line in output[at..].lines().skip(1) {
            let mut parts = line.trim().splitn(2, ' ');
            let status = parts.next().unwrap_or("");
            if !STATUSES.contains(&status) {
                continue;
            }
            let rest = parts.next().unwrap_or("").trim();
            let name = rest.split(" - ").next().unwrap_or(rest).trim();
            let name = name.rsplit("::").next().unwrap_or(name);
            tests.insert(name.to_string(), status.to_string());
        }
    }
    if !tests.is_empty() {
        return Some(tests);
    }
    let line = output.lines().rev().find(|l| {
        let t = l.trim();
        t.starts_with("==")
            && t.contains(" in ")
            && [" passed", " failed", " error"]
                .iter()
                .any(|w| t.contains(w))
    })?;
    let count = |word: &str| -> usize {
        regex::Regex::new(&format!(r"(\d+) {}", regex::escape(word)))
            .ok()
            .and_then(|re| re.captures(line).and_then(|c| c[1].parse().ok()))
            .unwrap_or(0)
    };
    for (word, status) in [
        ("passed", "PASSED"),
        ("failed", "FAILED"),
        ("error", "ERROR"),
    ] {
        for n in 0..count(word) {
            tests.insert(format!("{word}_{}", n + 1), status.to_string());
        }
    }
    (!tests.is_empty()).then_some(tests)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reward_text_variants() {
        assert_eq!(parse_reward_text("1\n").unwrap(), 1.0);
        assert_eq!(parse_reward_text(" 0.5 ").unwrap(), 0.5);
        assert_eq!(parse_reward_text("false").unwrap(), 0.0);
        assert!(matches!(
            parse_reward_text("yes please"),
            Err(RewardParseError::NotANumber { found }) if found == "yes please"
        ));
        assert!(parse_reward_text("").is_err());
        assert!(matches!(
            parse_reward_text("inf"),
            Err(RewardParseError::NotFinite(_))
        ));
    }

    #[test]
    fn reward_json_variants() {
        assert_eq!(parse_reward_json("{\"reward\": 1}").unwrap()["reward"], 1.0);
        let multi = parse_reward_json("{\"a\": 1, \"b\": false}").unwrap();
        assert_eq!(scored_reward(&multi), 0.5);
        let err = parse_reward_json("{\"reward\": \"x\"}").unwrap_err();
        assert_eq!(err.to_string(), "'reward' must be a number, found \"x\"");
        assert!(matches!(
            parse_reward_json("[1]"),
            Err(RewardParseError::NotAnObject)
        ));
        assert!(matches!(
            parse_reward_json("{}"),
            Err(RewardParseError::Empty)
        ));
    }

    #[test]
    fn pytest_summary_block_and_count_line() {
        let out = "....\n=========================== short test summary info ============================\nPASSED tests/test_outputs.py::test_a\nFAILED tests/test_outputs.py::test_b - AssertionError: x\n========================= 1 failed, 1 passed in 0.12s ==========================\n";
        let t = parse_pytest(out).unwrap();
        assert_eq!(t["test_a"], "PASSED");
        assert_eq!(t["test_b"], "FAILED");
        let only_count = parse_pytest("==== 3 passed in 0.01s ====\n").unwrap();
        assert_eq!(only_count.len(), 3);
        assert!(parse_pytest("no tests here").is_none());
    }
}
