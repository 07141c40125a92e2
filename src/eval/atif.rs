//! Converts a `baton --exec --json` event stream into an ATIF (Agent Trajectory Interchange
//! Format) v1.7 trajectory, the format Harbor's viewer and tools read.
//!
//! Every model call is one agent step naming its expert in `extra.expert` and carrying its own
//! `metrics`: the route hop (L0's label as the message), each answer hop (its text, reasoning,
//! tool calls, and the tool results as the step's observation), each summary hop (the summary
//! text, which the user never sees but an evaluator should) and each compaction hop (the
//! handoff summary), followed by a system step marking the compaction boundary with
//! `extra.context_management = {type: compaction, boundary: replace}`. The instruction is the
//! user step; warnings and errors are system steps. The events carry no summary texts, so they
//! come from the session file ([`SessionTexts`]).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::events::usage_tokens;
use crate::session::Record;

pub const SCHEMA_VERSION: &str = "ATIF-v1.7";

/// The texts a session file holds and the event stream leaves out: task summaries by task id,
/// and the handoff summaries of compactions in the order they were written.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SessionTexts {
    summaries: HashMap<u64, String>,
    compactions: Vec<String>,
}

impl SessionTexts {
    pub fn from_records(records: &[Record]) -> SessionTexts {
        let mut texts = SessionTexts::default();
        for r in records {
            match r {
                Record::Summary { task_id, text, .. } => {
                    texts.summaries.insert(*task_id, text.clone());
                }
                Record::Compacted { summary, .. } => texts.compactions.push(summary.clone()),
                _ => {}
            }
        }
        texts
    }

    /// The texts of the session the events ran in, read from `sessions_dir` (the folder given to
    /// `--session-dir`), where the file has the name the `session` event gave it. `None` when
    /// there is no such file.
    pub fn find(sessions_dir: &Path, events: &[Value]) -> Option<SessionTexts> {
        let path = session_file_in(sessions_dir, events)?;
        // The trial wrote that folder: nothing in it, nor the folder, is followed as a link.
        let anchor = sessions_dir.parent().unwrap_or(sessions_dir);
        crate::session::read_records_beneath(&path, &[anchor])
            .ok()
            .map(|records| SessionTexts::from_records(&records))
    }
}

/// The session file the `session` event names, looked up by its file name in `sessions_dir`
/// (the path in the event is the agent's view, which may be a container's or a sandbox's).
pub fn session_file_in(sessions_dir: &Path, events: &[Value]) -> Option<PathBuf> {
    let session = events
        .iter()
        .find(|e| e.get("type").and_then(Value::as_str) == Some("session"))?;
    let name = session
        .get("session_file")
        .and_then(Value::as_str)
        .and_then(|p| Path::new(p).file_name().map(|n| n.to_os_string()))
        .or_else(|| {
            let id = session.get("session_id").and_then(Value::as_str)?;
            // An id is a file name, never a path: a hostile stream cannot point elsewhere.
            (!id.is_empty() && !id.contains(['/', '\\']) && id != "..")
                .then(|| format!("{id}.jsonl").into())
        })?;
    let path = sessions_dir.join(name);
    std::fs::symlink_metadata(&path)
        .is_ok_and(|m| m.is_file())
        .then_some(path)
}

/// Builds the trajectory. `instruction` is used when the stream has no `turn_started`.
pub fn trajectory(
    events: &[Value],
    texts: &SessionTexts,
    instruction: &str,
    agent_name: &str,
    agent_version: &str,
) -> Value {
    let mut b = Builder {
        compactions: texts
            .compactions
            .iter()
            .rev()
            .take(count_hops(events, "compaction"))
            .rev()
            .cloned()
            .collect(),
        ..Builder::default()
    };
    let mut session = None;
    let mut turn_status = None;
    let mut saw_user = false;
    for ev in events {
        let ty = ev.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "session" => session = Some(ev),
            "turn_started" => {
                b.close_answer();
                saw_user = true;
                let mut s = step("user", &text(ev, "text"));
                s.insert("extra".into(), json!({"turn_id": ev.get("turn_id")}));
                b.steps.push(s);
            }
            "hop_started" if text(ev, "hop") == "answer" => {
                b.close_answer();
                b.open_answer(ev.get("expert"));
            }
            "hop_completed" => b.hop_completed(ev),
            "route_decided" => b.route_decided(ev),
            "reasoning_delta" => b.reasoning.push_str(&text(ev, "delta")),
            "message_final" => b.message_final(ev),
            "tool_begin" => b.tool_begin(ev),
            "tool_end" => b.tool_end(ev),
            "summary_recorded" => b.summary_recorded(ev, texts),
            "context_compacted" => {
                b.close_answer();
                let mut s = step("system", &system_message(ty, ev));
                s.insert(
                    "extra".into(),
                    json!({
                        "context_management": {"type": "compaction", "boundary": "replace"},
                        "expert": ev.get("expert"),
                        "tokens_before": ev.get("tokens_before"),
                        "tokens_after": ev.get("tokens_after"),
                        "method": ev.get("method"),
                    }),
                );
                b.steps.push(s);
            }
            "warning" | "error" => {
                b.close_answer();
                let mut s = step("system", &system_message(ty, ev));
                s.insert("extra".into(), json!({"event": ev}));
                b.steps.push(s);
            }
            "turn_completed" => {
                b.close_answer();
                turn_status = ev.get("status").cloned();
            }
            _ => {}
        }
    }
    b.close_answer();
    if !saw_user {
        b.steps.insert(0, step("user", instruction));
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
    let mut root_extra = Map::new();
    if let Some(ev) = session {
        if let Some(m) = ev
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
        {
            agent["model_name"] = Value::String(m.to_string());
        }
        agent["extra"] = json!({"mode": ev.get("mode"), "backend": ev.get("backend")});
    }
    if let Some(status) = turn_status {
        root_extra.insert("turn_status".into(), status);
    }
    let session_id = session
        .map(|ev| text(ev, "session_id"))
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let mut by_hop = Map::new();
    for (hop, t) in &b.by_hop {
        by_hop.insert(
            hop.clone(),
            json!({"prompt_tokens": t.0, "completion_tokens": t.1, "cached_tokens": t.2}),
        );
    }
    let mut traj = json!({
        "schema_version": SCHEMA_VERSION,
        "session_id": session_id,
        "trajectory_id": uuid::Uuid::now_v7().to_string(),
        "agent": agent,
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": b.totals.0,
            "total_completion_tokens": b.totals.1,
            "total_cached_tokens": b.totals.2,
            "total_steps": n_steps,
            "extra": {"by_hop": by_hop},
        },
    });
    if !root_extra.is_empty() {
        traj["extra"] = Value::Object(root_extra);
    }
    traj
}

fn count_hops(events: &[Value], hop: &str) -> usize {
    events
        .iter()
        .filter(|e| {
            e.get("type").and_then(Value::as_str) == Some("hop_completed")
                && e.get("hop").and_then(Value::as_str) == Some(hop)
        })
        .count()
}

/// The answer step being built: an answer hop's text, usage and tool calls arrive as separate
/// events, in an order that depends on the backend (usage before or after the final text).
struct Answer {
    step: Map<String, Value>,
    has_message: bool,
    has_metrics: bool,
}

#[derive(Default)]
struct Builder {
    steps: Vec<Map<String, Value>>,
    answer: Option<Answer>,
    reasoning: String,
    /// The route decision that the next answer step follows.
    pending_route: Option<Value>,
    /// The last route step, whose message (the label) comes with `route_decided`.
    route_step: Option<usize>,
    /// Summary steps waiting for their `summary_recorded`, by expert.
    summary_steps: HashMap<String, VecDeque<usize>>,
    /// This run's compaction summaries, oldest first.
    compactions: VecDeque<String>,
    totals: (u64, u64, u64),
    by_hop: std::collections::BTreeMap<String, (u64, u64, u64)>,
}

impl Builder {
    fn open_answer(&mut self, expert: Option<&Value>) {
        let route = self.pending_route.take();
        self.answer = Some(new_answer(expert, route));
    }

    fn answer_mut(&mut self, expert: Option<&Value>) -> &mut Answer {
        let route = if self.answer.is_none() {
            self.pending_route.take()
        } else {
            None
        };
        self.answer.get_or_insert_with(|| new_answer(expert, route))
    }

    fn close_answer(&mut self) {
        if let Some(mut a) = self.answer.take() {
            if !self.reasoning.is_empty() {
                a.step.insert(
                    "reasoning_content".into(),
                    Value::String(std::mem::take(&mut self.reasoning)),
                );
            }
            self.steps.push(a.step);
        }
    }

    fn message_final(&mut self, ev: &Value) {
        if self.answer.as_ref().is_some_and(|a| a.has_message) {
            self.close_answer();
        }
        let a = self.answer_mut(ev.get("expert"));
        a.step
            .insert("message".into(), Value::String(text(ev, "text")));
        a.has_message = true;
    }

    fn hop_completed(&mut self, ev: &Value) {
        let t = usage_tokens(ev);
        let hop = text(ev, "hop");
        self.totals.0 += t.input;
        self.totals.1 += t.output;
        self.totals.2 += t.cached;
        let h = self.by_hop.entry(hop.clone()).or_default();
        h.0 += t.input;
        h.1 += t.output;
        h.2 += t.cached;
        let metrics = metrics(ev);
        match hop.as_str() {
            "answer" => {
                if self.answer.as_ref().is_some_and(|a| a.has_metrics) {
                    self.close_answer();
                }
                let a = self.answer_mut(ev.get("expert"));
                a.step.insert("metrics".into(), metrics);
                a.has_metrics = true;
            }
            "route" => {
                self.close_answer();
                self.route_step = Some(self.steps.len());
                self.steps.push(hop_step("route", ev, "", metrics));
            }
            "summary" => {
                self.close_answer();
                let expert = text(ev, "expert");
                self.summary_steps
                    .entry(expert)
                    .or_default()
                    .push_back(self.steps.len());
                self.steps.push(hop_step("summary", ev, "", metrics));
            }
            "compaction" => {
                self.close_answer();
                let summary = self.compactions.pop_front().unwrap_or_default();
                self.steps
                    .push(hop_step("compaction", ev, &summary, metrics));
            }
            _ => {
                self.close_answer();
                self.steps.push(hop_step(&hop, ev, "", metrics));
            }
        }
    }

    fn route_decided(&mut self, ev: &Value) {
        self.close_answer();
        let route = json!({
            "expert": ev.get("expert"),
            "decision": ev.get("decision"),
            "latency_ms": ev.get("latency_ms"),
            "reason": ev.get("reason"),
        });
        // The route hop's answer is the label it chose (a fallback's hop answered nothing usable).
        if let Some(i) = self.route_step.take()
            && let Some(s) = self.steps.get_mut(i)
        {
            if text(ev, "decision") == "model" {
                s.insert("message".into(), Value::String(text(ev, "expert")));
            }
            if let Some(Value::Object(extra)) = s.get_mut("extra") {
                extra.insert("route".into(), route.clone());
            }
        }
        self.pending_route = Some(route);
    }

    fn tool_begin(&mut self, ev: &Value) {
        let a = self.answer_mut(None);
        let calls = a
            .step
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
            let mut call = json!({
                "tool_call_id": text(ev, "call_id"),
                "function_name": text(ev, "tool"),
                "arguments": arguments,
            });
            if let Some(title) = ev.get("title").filter(|t| !t.is_null()) {
                call["extra"] = json!({"title": title});
            }
            calls.push(call);
        }
    }

    fn tool_end(&mut self, ev: &Value) {
        let call_id = text(ev, "call_id");
        let mut result = json!({"source_call_id": call_id, "content": text(ev, "output")});
        let mut extra = Map::new();
        for key in ["status", "exit_code", "duration_ms"] {
            if let Some(v) = ev.get(key).filter(|v| !v.is_null()) {
                extra.insert(key.into(), v.clone());
            }
        }
        if !extra.is_empty() {
            result["extra"] = Value::Object(extra);
        }
        // A result belongs to the step that made the call (ATIF checks the reference); one whose
        // call is unknown is kept, unreferenced, on the current step.
        let owner = match self.answer.as_mut() {
            Some(a) if has_call(&a.step, &call_id) => Some(&mut a.step),
            _ => self.steps.iter_mut().rev().find(|s| has_call(s, &call_id)),
        };
        let step = match owner {
            Some(s) => s,
            None => {
                result["source_call_id"] = Value::Null;
                &mut self.answer_mut(None).step
            }
        };
        let obs = step
            .entry("observation")
            .or_insert_with(|| json!({"results": []}));
        if let Some(Value::Array(results)) = obs.get_mut("results") {
            results.push(result);
        }
    }

    fn summary_recorded(&mut self, ev: &Value, texts: &SessionTexts) {
        let expert = text(ev, "expert");
        let task_id = ev.get("task_id").and_then(Value::as_u64);
        let text = task_id
            .and_then(|id| texts.summaries.get(&id))
            .cloned()
            .unwrap_or_default();
        let extra = json!({
            "task_id": task_id,
            "empty": ev.get("empty"),
            "visibility": "hidden from the user; given to the other experts",
        });
        let slot = self
            .summary_steps
            .get_mut(&expert)
            .and_then(VecDeque::pop_front)
            .and_then(|i| self.steps.get_mut(i));
        match slot {
            Some(s) => {
                s.insert("message".into(), Value::String(text));
                if let Some(Value::Object(e)) = s.get_mut("extra")
                    && let Value::Object(more) = extra
                {
                    e.extend(more);
                }
            }
            // A stream without the summary hop's usage: the summary still gets its step.
            None => {
                self.close_answer();
                let mut s = hop_step("summary", ev, &text, Value::Null);
                s.remove("metrics");
                if let Some(Value::Object(e)) = s.get_mut("extra")
                    && let Value::Object(more) = extra
                {
                    e.extend(more);
                }
                self.steps.push(s);
            }
        }
    }
}

fn new_answer(expert: Option<&Value>, route: Option<Value>) -> Answer {
    let mut s = step("agent", "");
    let mut extra = Map::new();
    extra.insert("hop".into(), json!("answer"));
    if let Some(e) = expert.filter(|e| !e.is_null()) {
        extra.insert("expert".into(), e.clone());
    }
    if let Some(r) = route {
        extra.insert("route".into(), r);
    }
    s.insert("extra".into(), Value::Object(extra));
    s.insert("llm_call_count".into(), json!(1));
    Answer {
        step: s,
        has_message: false,
        has_metrics: false,
    }
}

fn has_call(step: &Map<String, Value>, call_id: &str) -> bool {
    step.get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|calls| calls.iter().any(|c| c["tool_call_id"] == call_id))
}

/// One model call that is not an answer: an agent step with its expert and metrics.
fn hop_step(hop: &str, ev: &Value, message: &str, metrics: Value) -> Map<String, Value> {
    let mut s = step("agent", message);
    let mut extra = Map::new();
    extra.insert("hop".into(), json!(hop));
    if let Some(e) = ev.get("expert").filter(|e| !e.is_null()) {
        extra.insert("expert".into(), e.clone());
    }
    if let Some(t) = ev.get("turn_id").filter(|t| !t.is_null()) {
        extra.insert("turn_id".into(), t.clone());
    }
    s.insert("extra".into(), Value::Object(extra));
    if !metrics.is_null() {
        s.insert("metrics".into(), metrics);
        s.insert("llm_call_count".into(), json!(1));
    }
    s
}

/// A hop's usage as ATIF step metrics (`prompt_tokens` includes the cached ones, as in the
/// OpenAI usage baton reports).
fn metrics(ev: &Value) -> Value {
    let t = usage_tokens(ev);
    let mut extra = Map::new();
    for key in ["latency_ms", "ttft_ms"] {
        if let Some(v) = ev.get(key).filter(|v| !v.is_null()) {
            extra.insert(key.into(), v.clone());
        }
    }
    let mut m = json!({
        "prompt_tokens": t.input,
        "completion_tokens": t.output,
        "cached_tokens": t.cached,
    });
    if !extra.is_empty() {
        m["extra"] = Value::Object(extra);
    }
    m
}

fn step(source: &str, message: &str) -> Map<String, Value> {
    let mut m = Map::new();
    // step_id is filled in once the order is final; keep it first for readability.
    m.insert("step_id".into(), json!(0));
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
        "context_compacted" => format!(
            "context of {} compacted from {} to {} tokens ({})",
            text(ev, "expert"),
            ev.get("tokens_before").and_then(Value::as_u64).unwrap_or(0),
            ev.get("tokens_after").and_then(Value::as_u64).unwrap_or(0),
            text(ev, "method"),
        ),
        "warning" => format!("warning: {}", text(ev, "message")),
        _ => format!("error ({}): {}", text(ev, "kind"), text(ev, "message")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::events::parse_lines;

    const STREAM: &str = r#"{"type":"session","session_id":"s1","mode":"mol","backend":"http://x/v1","model":"baton","workspace":"/app","resumed":false,"session_file":"/logs/agent/sessions/s1.jsonl"}
{"type":"turn_started","turn_id":1,"text":"fix it"}
{"type":"hop_started","turn_id":1,"hop":"route","expert":"L0"}
{"type":"hop_completed","turn_id":1,"hop":"route","expert":"L0","latency_ms":12,"usage":{"prompt_tokens":50,"completion_tokens":1}}
{"type":"route_decided","turn_id":1,"expert":"L2","decision":"model","latency_ms":12}
{"type":"hop_started","turn_id":1,"hop":"answer","expert":"L2"}
{"type":"reasoning_delta","turn_id":1,"delta":"look first"}
{"type":"hop_completed","turn_id":1,"hop":"answer","expert":"L2","latency_ms":300,"usage":{"prompt_tokens":120,"completion_tokens":40,"cached_tokens":30}}
{"type":"message_final","turn_id":1,"expert":"L2","text":"running ls"}
{"type":"tool_begin","turn_id":1,"call_id":"c1","tool":"shell","arguments":"{\"command\":\"ls\"}","title":"ls"}
{"type":"tool_end","call_id":"c1","status":"ok","exit_code":0,"duration_ms":5,"output":"a.txt"}
{"type":"route_decided","turn_id":1,"expert":"L2","decision":"sticky","latency_ms":0}
{"type":"hop_started","turn_id":1,"hop":"compaction","expert":"L2"}
{"type":"hop_completed","turn_id":1,"hop":"compaction","expert":"L2","latency_ms":80,"usage":{"prompt_tokens":500,"completion_tokens":20}}
{"type":"context_compacted","expert":"L2","tokens_before":900,"tokens_after":200,"method":"summary"}
{"type":"hop_started","turn_id":1,"hop":"answer","expert":"L2"}
{"type":"message_final","turn_id":1,"expert":"L2","text":"done"}
{"type":"hop_completed","turn_id":1,"hop":"answer","expert":"L2","latency_ms":100,"usage":{"prompt_tokens":200,"completion_tokens":5}}
{"type":"turn_completed","turn_id":1,"status":"done","duration_ms":500,"usage":{"prompt_tokens":870,"completion_tokens":66}}
{"type":"hop_started","turn_id":1,"hop":"summary","expert":"L2"}
{"type":"hop_completed","turn_id":1,"hop":"summary","expert":"L2","latency_ms":40,"usage":{"prompt_tokens":210,"completion_tokens":9}}
{"type":"summary_recorded","expert":"L2","task_id":1,"latency_ms":40,"tokens":9,"empty":false}
{"type":"shutdown_complete"}
"#;

    fn texts() -> SessionTexts {
        SessionTexts {
            summaries: HashMap::from([(1, "listed the files".to_string())]),
            compactions: vec![
                "an older run's handoff".into(),
                "handoff: ls showed a.txt".into(),
            ],
        }
    }

    #[test]
    fn every_hop_is_a_step_naming_its_expert() {
        let t = trajectory(&parse_lines(STREAM), &texts(), "unused", "baton", "0.1.0");
        assert_eq!(t["schema_version"], SCHEMA_VERSION);
        assert_eq!(t["session_id"], "s1");
        assert!(t["trajectory_id"].as_str().is_some_and(|s| s.len() == 36));
        assert_eq!(t["agent"]["model_name"], "baton");
        assert_eq!(t["agent"]["extra"]["backend"], "http://x/v1");
        let steps = t["steps"].as_array().unwrap();
        let kinds: Vec<(String, String)> = steps
            .iter()
            .map(|s| {
                (
                    s["source"].as_str().unwrap().to_string(),
                    s["extra"]["hop"].as_str().unwrap_or("-").to_string(),
                )
            })
            .collect();
        let expect = [
            ("user", "-"),
            ("agent", "route"),
            ("agent", "answer"),
            ("agent", "compaction"),
            ("system", "-"),
            ("agent", "answer"),
            ("agent", "summary"),
        ];
        let expect: Vec<(String, String)> = expect
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        assert_eq!(kinds, expect);
        for (i, s) in steps.iter().enumerate() {
            assert_eq!(s["step_id"], i + 1);
        }
        // The route hop: L0's call, its label as the message, its own usage.
        assert_eq!(steps[1]["extra"]["expert"], "L0");
        assert_eq!(steps[1]["message"], "L2");
        assert_eq!(steps[1]["metrics"]["prompt_tokens"], 50);
        // The answer hop: text, reasoning, call, result and usage on one step.
        let a = &steps[2];
        assert_eq!(a["extra"]["expert"], "L2");
        assert_eq!(a["extra"]["route"]["decision"], "model");
        assert_eq!(a["message"], "running ls");
        assert_eq!(a["reasoning_content"], "look first");
        assert_eq!(a["tool_calls"][0]["arguments"]["command"], "ls");
        assert_eq!(a["observation"]["results"][0]["source_call_id"], "c1");
        assert_eq!(a["observation"]["results"][0]["extra"]["exit_code"], 0);
        assert_eq!(a["metrics"]["cached_tokens"], 30);
        assert_eq!(a["metrics"]["extra"]["latency_ms"], 300);
        // This run's compaction gets the newest handoff text, then the boundary.
        assert_eq!(steps[3]["message"], "handoff: ls showed a.txt");
        assert_eq!(steps[3]["metrics"]["prompt_tokens"], 500);
        assert_eq!(
            steps[4]["extra"]["context_management"],
            json!({"type": "compaction", "boundary": "replace"})
        );
        assert!(steps[4].get("metrics").is_none());
        assert_eq!(steps[5]["extra"]["route"]["decision"], "sticky");
        assert_eq!(steps[5]["metrics"]["prompt_tokens"], 200);
        // The summary is recorded for evaluators.
        assert_eq!(steps[6]["message"], "listed the files");
        assert_eq!(steps[6]["extra"]["task_id"], 1);
        assert_eq!(steps[6]["metrics"]["completion_tokens"], 9);
        // Per-step metrics add up to the totals.
        let sum: u64 = steps
            .iter()
            .filter_map(|s| s["metrics"]["prompt_tokens"].as_u64())
            .sum();
        assert_eq!(t["final_metrics"]["total_prompt_tokens"], sum);
        assert_eq!(sum, 50 + 120 + 500 + 200 + 210);
        assert_eq!(t["final_metrics"]["total_steps"], 7);
        assert_eq!(
            t["final_metrics"]["extra"]["by_hop"]["summary"]["prompt_tokens"],
            210
        );
        assert_eq!(t["extra"]["turn_status"], "done");
    }

    #[test]
    fn the_endpoint_is_never_the_model_and_odd_streams_still_convert() {
        // No model in the session event (an older baton): no model_name rather than the URL.
        let text = r#"{"type":"session","session_id":"s2","mode":"mol","backend":"http://x/v1","workspace":"/app","resumed":false}
{"type":"message_final","turn_id":1,"expert":"L2","text":"a"}
{"type":"message_final","turn_id":1,"expert":"L2","text":"b"}
{"type":"tool_end","call_id":"nobody","status":"error","duration_ms":1,"output":"?"}
{"type":"summary_recorded","expert":"L1","task_id":7,"latency_ms":1,"tokens":0,"empty":true}
"#;
        let t = trajectory(
            &parse_lines(text),
            &SessionTexts::default(),
            "do it",
            "baton",
            "0.1.0",
        );
        assert!(t["agent"].get("model_name").is_none());
        let steps = t["steps"].as_array().unwrap();
        assert_eq!(steps[0]["message"], "do it");
        assert_eq!(steps[1]["message"], "a");
        assert_eq!(steps[2]["message"], "b");
        // A result whose call is unknown keeps no dangling reference.
        assert!(steps[2]["observation"]["results"][0]["source_call_id"].is_null());
        assert_eq!(steps[3]["extra"]["hop"], "summary");
        assert!(steps[3].get("metrics").is_none());
    }

    #[test]
    fn session_file_names_never_leave_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s1.jsonl"), "").unwrap();
        let ev = |v: Value| vec![v];
        let found = session_file_in(
            dir.path(),
            &ev(json!({"type":"session","session_id":"x","session_file":"/elsewhere/s1.jsonl"})),
        );
        assert_eq!(found, Some(dir.path().join("s1.jsonl")));
        assert_eq!(
            session_file_in(
                dir.path(),
                &ev(json!({"type":"session","session_id":"../s1"}))
            ),
            None
        );
    }

    /// The trial writes its sessions folder: a folder or a file there that is a link (to the
    /// user's own sessions, say) is not read; the trial's own file is.
    #[test]
    fn a_session_file_or_folder_left_as_a_link_is_not_read() {
        let host = tempfile::tempdir().unwrap();
        let users = host.path().join("users-sessions");
        std::fs::create_dir_all(&users).unwrap();
        std::fs::write(users.join("s1.jsonl"), "").unwrap();
        let logs = host.path().join("agent");
        std::fs::create_dir_all(&logs).unwrap();
        let events = vec![json!({"type":"session","session_id":"s1"})];
        // The folder is a link.
        std::os::unix::fs::symlink(&users, logs.join("sessions")).unwrap();
        assert!(SessionTexts::find(&logs.join("sessions"), &events).is_none());
        // The file is a link.
        std::fs::remove_file(logs.join("sessions")).unwrap();
        std::fs::create_dir_all(logs.join("sessions")).unwrap();
        std::os::unix::fs::symlink(users.join("s1.jsonl"), logs.join("sessions/s1.jsonl")).unwrap();
        assert!(SessionTexts::find(&logs.join("sessions"), &events).is_none());
        // The trial's own file.
        std::fs::remove_file(logs.join("sessions/s1.jsonl")).unwrap();
        std::fs::write(logs.join("sessions/s1.jsonl"), "").unwrap();
        assert!(SessionTexts::find(&logs.join("sessions"), &events).is_some());
    }
}
