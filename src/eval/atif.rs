//! Converts a `baton --exec --json` event stream into an ATIF (Agent Trajectory Interchange
//! Format, v1.4) trajectory: the instruction as a user step, one agent step per assistant
//! message with its tool calls, their results as the step's observation, and hop usage as
//! the step's metrics.

use serde_json::{Map, Value, json};

use super::events::usage_tokens;

pub const SCHEMA_VERSION: &str = "ATIF-v1.4";

/// Builds the trajectory. `instruction` is used when the stream has no `turn_started`.
pub fn trajectory(
    events: &[Value],
    instruction: &str,
    agent_name: &str,
    agent_version: &str,
) -> Value {
    let mut b = Builder::default();
    let mut session_id = String::new();
    let mut model = None;
    let mut saw_user = false;
    for ev in events {
        let ty = ev.get("type").and_then(Value::as_str).unwrap_or("");
        let ts = ev
            .get("timestamp")
            .and_then(Value::as_str)
            .map(str::to_string);
        match ty {
            "session" => {
                session_id = text(ev, "session_id");
                model = ev
                    .get("backend")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            "turn_started" => {
                b.close_agent();
                saw_user = true;
                b.push(step("user", &text(ev, "text"), ts));
            }
            "route_decided" => {
                b.close_agent();
                b.pending_route = Some(json!({
                    "expert": ev.get("expert"),
                    "decision": ev.get("decision"),
                    "latency_ms": ev.get("latency_ms"),
                }));
            }
            "reasoning_delta" => b.reasoning.push_str(&text(ev, "delta")),
            "message_final" => {
                b.close_agent();
                let mut s = step("agent", &text(ev, "text"), ts);
                if !b.reasoning.is_empty() {
                    s.insert(
                        "reasoning_content".into(),
                        Value::String(std::mem::take(&mut b.reasoning)),
                    );
                }
                let mut extra = Map::new();
                if let Some(e) = ev.get("expert").filter(|e| !e.is_null()) {
                    extra.insert("expert".into(), e.clone());
                }
                if let Some(r) = b.pending_route.take() {
                    extra.insert("route".into(), r);
                }
                if !extra.is_empty() {
                    s.insert("extra".into(), Value::Object(extra));
                }
                b.agent = Some(s);
            }
            "hop_completed" => {
                let t = usage_tokens(ev);
                let hop = text(ev, "hop");
                if let Some(agent) = b.agent.as_mut().filter(|_| hop == "answer") {
                    agent.insert(
                        "metrics".into(),
                        json!({
                            "prompt_tokens": t.input,
                            "completion_tokens": t.output,
                            "cached_tokens": t.cached,
                            "extra": {"latency_ms": ev.get("latency_ms"), "ttft_ms": ev.get("ttft_ms")},
                        }),
                    );
                }
                b.totals.0 += t.input;
                b.totals.1 += t.output;
                b.totals.2 += t.cached;
            }
            "tool_begin" => {
                let agent = b.agent.get_or_insert_with(|| step("agent", "", None));
                let calls = agent
                    .entry("tool_calls")
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(calls) = calls {
                    let arguments = match ev.get("arguments") {
                        Some(Value::Object(o)) => Value::Object(o.clone()),
                        Some(Value::String(s)) => serde_json::from_str(s)
                            .ok()
                            .filter(Value::is_object)
                            .unwrap_or_else(|| json!({"raw": s})),
                        Some(other) if !other.is_null() => json!({"value": other}),
                        _ => json!({}),
                    };
                    calls.push(json!({
                        "tool_call_id": text(ev, "call_id"),
                        "function_name": text(ev, "tool"),
                        "arguments": arguments,
                    }));
                }
            }
            "tool_end" => {
                let agent = b.agent.get_or_insert_with(|| step("agent", "", None));
                let obs = agent
                    .entry("observation")
                    .or_insert_with(|| json!({"results": []}));
                if let Some(Value::Array(results)) = obs.get_mut("results") {
                    let mut content = text(ev, "output");
                    if let Some(code) = ev.get("exit_code").and_then(Value::as_i64) {
                        content = format!("{content}\n[exit code {code}]");
                    }
                    results
                        .push(json!({"source_call_id": text(ev, "call_id"), "content": content}));
                }
            }
            "summary_recorded" | "context_compacted" | "warning" | "error" => {
                b.close_agent();
                let mut s = step("system", &system_message(ty, ev), ts);
                s.insert("extra".into(), json!({"event": ev}));
                b.push(s);
            }
            _ => {}
        }
    }
    b.close_agent();
    if !saw_user {
        b.steps.insert(0, step("user", instruction, None));
    }
    let steps: Vec<Value> = b
        .steps
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            s.insert("step_id".into(), json!(i + 1));
            Value::Object(s)
        })
        .collect();
    let n_steps = steps.len();
    let mut agent = json!({"name": agent_name, "version": agent_version});
    if let Some(m) = model {
        agent["model_name"] = Value::String(m);
    }
    json!({
        "schema_version": SCHEMA_VERSION,
        "session_id": if session_id.is_empty() { uuid::Uuid::now_v7().to_string() } else { session_id },
        "agent": agent,
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": b.totals.0,
            "total_completion_tokens": b.totals.1,
            "total_cached_tokens": b.totals.2,
            "total_steps": n_steps,
        },
    })
}

#[derive(Default)]
struct Builder {
    steps: Vec<Map<String, Value>>,
    agent: Option<Map<String, Value>>,
    reasoning: String,
    pending_route: Option<Value>,
    totals: (u64, u64, u64),
}

impl Builder {
    fn close_agent(&mut self) {
        if let Some(a) = self.agent.take() {
            self.steps.push(a);
        }
    }

    fn push(&mut self, s: Map<String, Value>) {
        self.steps.push(s);
    }
}

fn step(source: &str, message: &str, timestamp: Option<String>) -> Map<String, Value> {
    let mut m = Map::new();
    // step_id is filled in once the order is final; keep it first for readability.
    m.insert("step_id".into(), json!(0));
    if let Some(ts) = timestamp {
        m.insert("timestamp".into(), Value::String(ts));
    }
    m.insert("source".into(), Value::String(source.into()));
    m.insert("message".into(), Value::String(message.into()));
    m
}

fn text(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn system_message(ty: &str, ev: &Value) -> String {
    match ty {
        "summary_recorded" => format!("task summary recorded for {}", text(ev, "expert")),
        "context_compacted" => format!(
            "context of {} compacted from {} to {} tokens",
            text(ev, "expert"),
            ev.get("tokens_before").and_then(Value::as_u64).unwrap_or(0),
            ev.get("tokens_after").and_then(Value::as_u64).unwrap_or(0)
        ),
        "warning" => format!("warning: {}", text(ev, "message")),
        _ => format!("error: {}", text(ev, "message")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::events::parse_lines;

    #[test]
    fn tool_calls_and_observations_land_on_the_agent_step() {
        let text = r#"{"type":"session","session_id":"s1","mode":"mol","backend":"http://x","workspace":"/app","resumed":false}
{"type":"turn_started","turn_id":1,"text":"fix it"}
{"type":"route_decided","turn_id":1,"expert":"L2","decision":"model","latency_ms":12}
{"type":"message_final","turn_id":1,"expert":"L2","text":"running ls"}
{"type":"hop_completed","turn_id":1,"hop":"answer","expert":"L2","latency_ms":300,"usage":{"prompt_tokens":120,"completion_tokens":40}}
{"type":"tool_begin","turn_id":1,"call_id":"c1","tool":"shell","arguments":{"command":"ls"},"title":"ls"}
{"type":"tool_end","call_id":"c1","status":"ok","exit_code":0,"duration_ms":5,"output":"a.txt"}
{"type":"message_final","turn_id":1,"expert":"L2","text":"done"}
{"type":"turn_completed","turn_id":1,"status":"done","duration_ms":500,"usage":{"prompt_tokens":120,"completion_tokens":40}}
"#;
        let t = trajectory(&parse_lines(text), "unused", "baton", "0.1.0");
        assert_eq!(t["schema_version"], SCHEMA_VERSION);
        assert_eq!(t["session_id"], "s1");
        let steps = t["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[0]["source"], "user");
        assert_eq!(steps[1]["tool_calls"][0]["function_name"], "shell");
        assert_eq!(
            steps[1]["observation"]["results"][0]["source_call_id"],
            "c1"
        );
        assert_eq!(steps[1]["metrics"]["prompt_tokens"], 120);
        assert_eq!(steps[1]["extra"]["route"]["expert"], "L2");
        assert_eq!(steps[2]["message"], "done");
        assert_eq!(steps[2]["step_id"], 3);
        assert_eq!(t["final_metrics"]["total_completion_tokens"], 40);
    }
}
