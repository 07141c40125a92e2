//! Figures from a `baton --exec --json` event stream: tokens, route distribution, per-hop
//! latencies, the final turn status. Lines that are not events (another agent's output) are
//! ignored, so the same reader serves every agent.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

/// Token totals of a trial.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Tokens {
    pub input: u64,
    pub cached: u64,
    pub output: u64,
}

impl Tokens {
    /// Adds `other` in, saturating: the counts come from the agent's own stream, which a
    /// hostile trial writes, and must never overflow.
    pub fn add(&mut self, other: Tokens) {
        self.input = self.input.saturating_add(other.input);
        self.cached = self.cached.saturating_add(other.cached);
        self.output = self.output.saturating_add(other.output);
    }
}

/// Latency figures of one hop kind (`route`, `answer` …).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct HopLatency {
    pub count: usize,
    pub mean_ms: f64,
    pub p50_ms: u64,
    pub max_ms: u64,
}

/// One completed hop.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct HopRecord {
    pub hop: String,
    pub expert: Option<String>,
    pub latency_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<u64>,
}

/// Everything the runner reports from an agent's events.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EventStats {
    /// Number of lines that parsed as baton events.
    pub n_events: usize,
    pub tokens: Tokens,
    /// Turns routed to each expert.
    pub routes: BTreeMap<String, u64>,
    /// How the routes were decided (`model`, `fallback`, `sticky` …).
    pub route_decisions: BTreeMap<String, u64>,
    pub hops: Vec<HopRecord>,
    pub hop_latency: BTreeMap<String, HopLatency>,
    pub tool_calls: u64,
    /// `status` of the last `turn_completed` (`done`, `limit_reached` …).
    pub turn_status: Option<String>,
    pub errors: Vec<String>,
    pub session_id: Option<String>,
}

/// Parses the JSON Lines in `text`.
pub fn parse_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("type").and_then(Value::as_str).is_some())
        .collect()
}

fn u64_at(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn str_at(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// Token counts of a `usage` object (`TokenUsage`).
pub fn usage_tokens(v: &Value) -> Tokens {
    let usage = v.get("usage").unwrap_or(&Value::Null);
    Tokens {
        input: u64_at(usage, "prompt_tokens"),
        cached: u64_at(usage, "cached_tokens"),
        output: u64_at(usage, "completion_tokens"),
    }
}

/// Sums the figures of `events`.
pub fn stats(events: &[Value]) -> EventStats {
    let mut s = EventStats {
        n_events: events.len(),
        ..Default::default()
    };
    let mut hop_tokens = Tokens::default();
    let mut turn_tokens = Tokens::default();
    for ev in events {
        match ev.get("type").and_then(Value::as_str).unwrap_or("") {
            "session" => s.session_id = str_at(ev, "session_id"),
            "route_decided" => {
                if let Some(expert) = str_at(ev, "expert") {
                    *s.routes.entry(expert).or_default() += 1;
                }
                if let Some(d) = str_at(ev, "decision") {
                    *s.route_decisions.entry(d).or_default() += 1;
                }
            }
            "hop_completed" => {
                let t = usage_tokens(ev);
                hop_tokens.add(t);
                s.hops.push(HopRecord {
                    hop: str_at(ev, "hop").unwrap_or_else(|| "unknown".into()),
                    expert: str_at(ev, "expert"),
                    latency_ms: u64_at(ev, "latency_ms"),
                    ttft_ms: ev.get("ttft_ms").and_then(Value::as_u64),
                });
            }
            "tool_begin" => s.tool_calls += 1,
            "turn_completed" => {
                let t = usage_tokens(ev);
                turn_tokens.add(t);
                s.turn_status = str_at(ev, "status");
            }
            "error" => s.errors.push(str_at(ev, "message").unwrap_or_default()),
            _ => {}
        }
    }
    // Hop usage is the finest grain; a backend that reports only per-turn totals still counts.
    s.tokens = if s.hops.is_empty() {
        turn_tokens
    } else {
        hop_tokens
    };
    let mut by_hop: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for h in &s.hops {
        by_hop.entry(h.hop.clone()).or_default().push(h.latency_ms);
    }
    for (hop, mut lat) in by_hop {
        lat.sort_unstable();
        let n = lat.len();
        s.hop_latency.insert(
            hop,
            HopLatency {
                count: n,
                mean_ms: lat.iter().map(|&l| l as f64).sum::<f64>() / n as f64,
                p50_ms: lat[(n - 1) / 2],
                max_ms: lat[n - 1],
            },
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_a_hostile_stream_writes_saturate_instead_of_overflowing() {
        let line = r#"{"type":"hop_completed","hop":"answer","expert":"L2","latency_ms":18446744073709551615,"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":18446744073709551615}}"#;
        let s = stats(&parse_lines(&format!("{line}\n{line}\n")));
        assert_eq!(s.tokens.input, u64::MAX);
        assert_eq!(s.tokens.output, u64::MAX);
        let mut total = s.tokens;
        total.add(s.tokens);
        assert_eq!(total.input, u64::MAX);
    }

    #[test]
    fn sums_hops_routes_and_tokens() {
        let text = r#"not json
{"type":"session","session_id":"s1","mode":"mol","backend":"x","workspace":"/app","resumed":false}
{"type":"route_decided","turn_id":1,"expert":"L2","decision":"model","latency_ms":12}
{"type":"hop_completed","turn_id":1,"hop":"route","expert":"L0","latency_ms":12,"usage":{"prompt_tokens":100,"completion_tokens":1}}
{"type":"hop_completed","turn_id":1,"hop":"answer","expert":"L2","latency_ms":300,"usage":{"prompt_tokens":120,"completion_tokens":40,"cached_tokens":100}}
{"type":"route_decided","turn_id":1,"expert":"L2","decision":"sticky","latency_ms":0}
{"type":"hop_completed","turn_id":1,"hop":"answer","expert":"L2","latency_ms":100,"usage":{"prompt_tokens":200,"completion_tokens":10}}
{"type":"turn_completed","turn_id":1,"status":"done","duration_ms":500,"usage":{"prompt_tokens":420,"completion_tokens":51}}
"#;
        let s = stats(&parse_lines(text));
        assert_eq!(s.n_events, 7);
        assert_eq!(
            s.tokens,
            Tokens {
                input: 420,
                cached: 100,
                output: 51
            }
        );
        assert_eq!(s.routes["L2"], 2);
        assert_eq!(s.route_decisions["sticky"], 1);
        assert_eq!(s.hop_latency["answer"].count, 2);
        assert_eq!(s.hop_latency["answer"].max_ms, 300);
        assert_eq!(s.turn_status.as_deref(), Some("done"));
        assert_eq!(s.session_id.as_deref(), Some("s1"));
    }
}
