//! Turns the agent core's events into ACP session updates: message and thought chunks, tool
//! calls with their output and diffs, the plan, and the expert that produced each of them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Diff, Meta, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    SessionUpdate, StopReason, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};

use crate::protocol::{
    ApprovalRequest, Event, Expert, PlanItem, PlanStatus, RouteDecision, ToolStatus, TurnStatus,
};

/// How much of a running command's output one update carries: the tail, so a command that
/// prints megabytes costs the editor a bounded message per chunk.
const OUTPUT_TAIL_BYTES: usize = 32 * 1024;

/// Output updates of one call are at most this often (the rest is sent by `flush`): a command
/// printing in thousands of small chunks must not become thousands of 32 KiB messages.
pub const OUTPUT_INTERVAL: Duration = Duration::from_millis(100);

/// What the frontend does with one event.
#[derive(Debug)]
pub enum Out {
    /// A `session/update` notification.
    Update(Box<SessionUpdate>),
    /// Ask the client (`session/request_permission`).
    Permission {
        call_id: String,
        request: ApprovalRequest,
        tool_call: Box<ToolCallUpdate>,
    },
    /// The running prompt ends: its stop reason, or the error it failed with.
    TurnEnded(Result<StopReason, String>),
    /// Something for the log (stderr), not for the protocol.
    Log(String),
}

#[derive(Debug, Default)]
struct ToolState {
    tool: String,
    output: String,
    diffs: Vec<Diff>,
    /// A diff that could not be turned into whole texts, shown as the unified diff.
    raw_diffs: Vec<String>,
    /// When output was last sent, and whether more came since.
    last_sent: Option<Instant>,
    unsent: bool,
}

/// The translation state of one session.
#[derive(Debug)]
pub struct Translator {
    workspace: PathBuf,
    expert: Option<Expert>,
    tools: HashMap<String, ToolState>,
    /// Whether the message now streaming sent any delta (one that did not is sent whole).
    streamed: bool,
    turn_error: Option<String>,
}

fn update(u: SessionUpdate) -> Out {
    Out::Update(Box::new(u))
}

/// `_meta` naming the expert an update came from.
pub fn expert_meta(expert: Option<Expert>) -> Option<Meta> {
    let expert = expert?;
    let mut baton = serde_json::Map::new();
    baton.insert("expert".into(), expert.label().into());
    let mut meta = Meta::new();
    meta.insert("baton".into(), serde_json::Value::Object(baton));
    Some(meta)
}

pub fn text_chunk(text: impl Into<String>) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(text.into()))
}

/// What kind of action a baton tool is, for the client's icon and grouping.
pub fn tool_kind(tool: &str) -> ToolKind {
    match tool {
        "read_file" => ToolKind::Read,
        "write_file" | "edit" | "apply_patch" => ToolKind::Edit,
        "list_dir" | "glob" | "grep" | "outline" => ToolKind::Search,
        "shell" | "write_stdin" | "poll" | "git" => ToolKind::Execute,
        "update_plan" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

/// The file a tool call is about, when its arguments name one.
pub fn locations(workspace: &Path, arguments: &serde_json::Value) -> Vec<ToolCallLocation> {
    arguments
        .get("path")
        .and_then(|p| p.as_str())
        .map(|p| vec![ToolCallLocation::new(workspace.join(p))])
        .unwrap_or_default()
}

/// A text block in a code fence that the text cannot close early.
pub fn fenced(text: &str) -> ContentBlock {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest.max(2) + 1);
    let body = text.strip_suffix('\n').unwrap_or(text);
    ContentBlock::from(format!("{fence}\n{body}\n{fence}"))
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

pub fn plan_entries(items: &[PlanItem]) -> Vec<PlanEntry> {
    items
        .iter()
        .map(|item| {
            let status = match item.status {
                PlanStatus::Pending => PlanEntryStatus::Pending,
                PlanStatus::InProgress => PlanEntryStatus::InProgress,
                PlanStatus::Completed => PlanEntryStatus::Completed,
            };
            PlanEntry::new(item.step.clone(), PlanEntryPriority::Medium, status)
        })
        .collect()
}

impl Translator {
    pub fn new(workspace: PathBuf) -> Translator {
        Translator {
            workspace,
            expert: None,
            tools: HashMap::new(),
            streamed: false,
            turn_error: None,
        }
    }

    /// The expert the updates come from now.
    pub fn expert(&self) -> Option<Expert> {
        self.expert
    }

    fn content_of(&self, state: &ToolState, done_output: Option<&str>) -> Vec<ToolCallContent> {
        let mut content: Vec<ToolCallContent> = state
            .diffs
            .iter()
            .cloned()
            .map(ToolCallContent::from)
            .collect();
        for raw in &state.raw_diffs {
            content.push(ToolCallContent::from(fenced(raw)));
        }
        let output = done_output.unwrap_or(&state.output);
        // An edit's result line ("edited f") says nothing its diff does not; a command's output
        // is the point.
        let show_output = state.diffs.is_empty() && state.raw_diffs.is_empty()
            || tool_kind(&state.tool) == ToolKind::Execute;
        if show_output && !output.is_empty() {
            content.push(ToolCallContent::from(fenced(tail(
                output,
                OUTPUT_TAIL_BYTES,
            ))));
        }
        content
    }

    /// The running output of a call, marked sent.
    fn output_update(&mut self, call_id: &str) -> Option<Out> {
        let state = self.tools.get_mut(call_id)?;
        state.unsent = false;
        state.last_sent = Some(Instant::now());
        let state = self.tools.get(call_id)?;
        let fields = ToolCallUpdateFields::new()
            .status(ToolCallStatus::InProgress)
            .content(self.content_of(state, None));
        Some(update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            call_id.to_string(),
            fields,
        ))))
    }

    /// Output held back by the interval, now that it has passed.
    pub fn flush(&mut self) -> Vec<Out> {
        let due: Vec<String> = self
            .tools
            .iter()
            .filter(|(_, s)| {
                s.unsent && s.last_sent.is_none_or(|at| at.elapsed() >= OUTPUT_INTERVAL)
            })
            .map(|(id, _)| id.clone())
            .collect();
        due.iter().filter_map(|id| self.output_update(id)).collect()
    }

    pub fn translate(&mut self, event: &Event) -> Vec<Out> {
        match event {
            Event::TurnStarted { .. } => {
                self.turn_error = None;
                self.streamed = false;
                self.tools.clear();
                Vec::new()
            }
            Event::RouteDecided {
                expert,
                decision,
                reason,
                ..
            } => {
                self.expert = Some(*expert);
                let why = match decision {
                    RouteDecision::Model => "routed by L0".to_string(),
                    RouteDecision::Pinned => "pinned".to_string(),
                    RouteDecision::FollowUp => "follow-up of its previous request".to_string(),
                    RouteDecision::Fallback => format!(
                        "fallback: {}",
                        reason.as_deref().unwrap_or("the route hop failed")
                    ),
                    // A tool result continues on the same expert: nothing new to say.
                    RouteDecision::Sticky | RouteDecision::None => return Vec::new(),
                };
                vec![update(SessionUpdate::AgentThoughtChunk(text_chunk(
                    format!("[{expert} · {why}]\n"),
                )))]
            }
            Event::HopStarted {
                expert: Some(expert),
                hop: crate::protocol::Hop::Answer,
                ..
            } => {
                self.expert = Some(*expert);
                Vec::new()
            }
            Event::ReasoningDelta { delta, .. } if !delta.is_empty() => vec![update(
                SessionUpdate::AgentThoughtChunk(text_chunk(delta.clone())),
            )],
            Event::MessageDelta { expert, delta, .. } if !delta.is_empty() => {
                if expert.is_some() {
                    self.expert = *expert;
                }
                self.streamed = true;
                vec![update(SessionUpdate::AgentMessageChunk(text_chunk(
                    delta.clone(),
                )))]
            }
            Event::MessageFinal { text, expert, .. } => {
                let streamed = std::mem::replace(&mut self.streamed, false);
                if streamed || text.is_empty() {
                    return Vec::new();
                }
                if expert.is_some() {
                    self.expert = *expert;
                }
                vec![update(SessionUpdate::AgentMessageChunk(text_chunk(
                    text.clone(),
                )))]
            }
            Event::ToolBegin {
                call_id,
                tool,
                arguments,
                title,
                ..
            } => {
                self.tools.insert(
                    call_id.clone(),
                    ToolState {
                        tool: tool.clone(),
                        ..ToolState::default()
                    },
                );
                let call = ToolCall::new(call_id.clone(), title.clone())
                    .kind(tool_kind(tool))
                    .status(ToolCallStatus::Pending)
                    .locations(locations(&self.workspace, arguments))
                    .raw_input(arguments.clone());
                vec![update(SessionUpdate::ToolCall(call))]
            }
            Event::ApprovalRequested { call_id, request } => {
                let tool_call =
                    crate::acp::permission::tool_call(&self.workspace, call_id, request);
                vec![Out::Permission {
                    call_id: call_id.clone(),
                    request: request.clone(),
                    tool_call: Box::new(tool_call),
                }]
            }
            Event::ToolOutput { call_id, chunk } => {
                let Some(state) = self.tools.get_mut(call_id) else {
                    return Vec::new();
                };
                state.output.push_str(chunk);
                if state.output.len() > 2 * OUTPUT_TAIL_BYTES {
                    state.output = tail(&state.output, OUTPUT_TAIL_BYTES).to_string();
                }
                state.unsent = true;
                let due = state
                    .last_sent
                    .is_none_or(|at| at.elapsed() >= OUTPUT_INTERVAL);
                if !due {
                    return Vec::new();
                }
                self.output_update(call_id).into_iter().collect()
            }
            Event::FileDiff {
                call_id,
                path,
                diff,
            } => {
                let file = self.workspace.join(path);
                let texts = crate::acp::diff::after_change(&self.workspace, &file, diff);
                let Some(state) = self.tools.get_mut(call_id) else {
                    return Vec::new();
                };
                match texts {
                    Some(t) => state.diffs.push(Diff::new(file, t.new).old_text(t.old)),
                    None => state.raw_diffs.push(diff.clone()),
                }
                let Some(state) = self.tools.get(call_id) else {
                    return Vec::new();
                };
                let fields = ToolCallUpdateFields::new()
                    .status(ToolCallStatus::InProgress)
                    .content(self.content_of(state, None));
                vec![update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call_id.clone(),
                    fields,
                )))]
            }
            Event::ToolEnd {
                call_id,
                status,
                exit_code,
                output,
                ..
            } => {
                let state = self.tools.remove(call_id).unwrap_or_default();
                let acp_status = match status {
                    ToolStatus::Ok => ToolCallStatus::Completed,
                    _ => ToolCallStatus::Failed,
                };
                let raw = serde_json::json!({
                    "status": status,
                    "exit_code": exit_code,
                    "output": output,
                });
                let fields = ToolCallUpdateFields::new()
                    .status(acp_status)
                    .content(self.content_of(&state, Some(output)))
                    .raw_output(raw);
                vec![update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call_id.clone(),
                    fields,
                )))]
            }
            Event::PlanUpdated { items } => {
                vec![update(SessionUpdate::Plan(Plan::new(plan_entries(items))))]
            }
            Event::Error { message, hop, .. } => {
                // A summary that failed after the turn is not the turn's failure.
                if *hop != Some(crate::protocol::Hop::Summary) {
                    self.turn_error = Some(message.clone());
                }
                vec![Out::Log(format!("error: {message}"))]
            }
            Event::Warning { message } => vec![Out::Log(format!("warning: {message}"))],
            Event::TurnCompleted { status, .. } => {
                let end = match status {
                    TurnStatus::Done => Ok(StopReason::EndTurn),
                    TurnStatus::Interrupted => Ok(StopReason::Cancelled),
                    TurnStatus::LimitReached => Ok(StopReason::MaxTurnRequests),
                    TurnStatus::Error => Err(self
                        .turn_error
                        .take()
                        .unwrap_or_else(|| "the turn failed".to_string())),
                };
                self.tools.clear();
                vec![Out::TurnEnded(end)]
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(out: &Out) -> serde_json::Value {
        match out {
            Out::Update(u) => serde_json::to_value(&**u).unwrap(),
            other => panic!("not an update: {other:?}"),
        }
    }

    #[test]
    fn a_command_streams_its_output_and_ends_failed_on_a_non_zero_exit() {
        let mut t = Translator::new(PathBuf::from("/ws"));
        let begin = t.translate(&Event::ToolBegin {
            turn_id: 1,
            call_id: "c1".into(),
            tool: "shell".into(),
            arguments: serde_json::json!({"command": "make"}),
            title: "make".into(),
        });
        let v = json(&begin[0]);
        assert_eq!(v["sessionUpdate"], "tool_call");
        assert_eq!(v["kind"], "execute");
        // Pending is the default, which the wire leaves out.
        assert!(
            matches!(v["status"].as_str(), None | Some("pending")),
            "{v}"
        );
        let out = t.translate(&Event::ToolOutput {
            call_id: "c1".into(),
            chunk: "building ```x```\n".into(),
        });
        let v = json(&out[0]);
        assert_eq!(v["sessionUpdate"], "tool_call_update");
        let text = v["content"][0]["content"]["text"].as_str().unwrap();
        assert!(text.starts_with("````\n"), "{text}");
        assert!(text.contains("building ```x```"));
        let end = t.translate(&Event::ToolEnd {
            call_id: "c1".into(),
            status: ToolStatus::Failed,
            exit_code: Some(2),
            duration_ms: 5,
            output: "exit 2".into(),
        });
        let v = json(&end[0]);
        assert_eq!(v["status"], "failed");
        assert_eq!(v["rawOutput"]["exit_code"], 2);
    }

    #[test]
    fn huge_output_is_sent_as_a_bounded_tail() {
        let mut t = Translator::new(PathBuf::from("/ws"));
        t.translate(&Event::ToolBegin {
            turn_id: 1,
            call_id: "c".into(),
            tool: "shell".into(),
            arguments: serde_json::json!({}),
            title: "yes".into(),
        });
        let mut sent = 0;
        for _ in 0..200 {
            sent += t
                .translate(&Event::ToolOutput {
                    call_id: "c".into(),
                    chunk: "é".repeat(1000),
                })
                .len();
        }
        // The first chunk goes at once, the rest waits for the interval.
        assert_eq!(sent, 1);
        assert!(t.flush().is_empty() || OUTPUT_INTERVAL.is_zero());
        std::thread::sleep(OUTPUT_INTERVAL);
        let mut flushed = t.flush();
        assert_eq!(flushed.len(), 1);
        assert!(t.flush().is_empty(), "sent once");
        let v = json(&flushed.pop().unwrap());
        let text = v["content"][0]["content"]["text"].as_str().unwrap();
        assert!(text.len() <= OUTPUT_TAIL_BYTES + 16, "{}", text.len());
    }

    #[test]
    fn a_failed_turn_ends_with_its_error_and_an_interrupt_is_a_cancel() {
        let mut t = Translator::new(PathBuf::from("/ws"));
        let completed = |status| Event::TurnCompleted {
            turn_id: 1,
            status,
            answer: None,
            expert: None,
            duration_ms: 1,
            usage: Default::default(),
            usage_by_hop: Default::default(),
            session_usage: Default::default(),
        };
        t.translate(&Event::Error {
            message: "rate limited".into(),
            kind: crate::protocol::ErrorKind::RateLimit,
            hop: Some(crate::protocol::Hop::Answer),
        });
        match t.translate(&completed(TurnStatus::Error)).pop() {
            Some(Out::TurnEnded(Err(m))) => assert_eq!(m, "rate limited"),
            other => panic!("{other:?}"),
        }
        match t.translate(&completed(TurnStatus::Interrupted)).pop() {
            Some(Out::TurnEnded(Ok(StopReason::Cancelled))) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_route_is_told_once_and_the_expert_is_kept() {
        let mut t = Translator::new(PathBuf::from("/ws"));
        let out = t.translate(&Event::RouteDecided {
            turn_id: 1,
            expert: Expert::L3,
            decision: RouteDecision::Model,
            latency_ms: 3,
            reason: None,
        });
        assert_eq!(json(&out[0])["sessionUpdate"], "agent_thought_chunk");
        assert_eq!(t.expert(), Some(Expert::L3));
        let sticky = t.translate(&Event::RouteDecided {
            turn_id: 1,
            expert: Expert::L3,
            decision: RouteDecision::Sticky,
            latency_ms: 0,
            reason: None,
        });
        assert!(sticky.is_empty());
        let meta = expert_meta(t.expert()).unwrap();
        assert_eq!(meta["baton"]["expert"], "L3");
    }
}
