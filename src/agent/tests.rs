//! The agent core against an in-process scripted backend: the summary stays off the user's
//! path, the next turn waits only when another expert needs the summary, interrupts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::*;
use crate::backend::{
    BackendError, ChatCompletion, ChatDelta, ChatRequest, ChatStream, FinishReason, ModelInfo,
};
use crate::mol::SessionState;
use crate::protocol::ChatMessage;
use crate::protocol::{ApprovalPolicy, Event, Hop, Op, RouteDecision, TurnStatus};

/// Answers route hops from a label queue, answers with `answer by <model>`, and holds every
/// summary hop until `release` is notified. Records every request.
struct FakeBackend {
    labels: Mutex<VecDeque<&'static str>>,
    release: Arc<Notify>,
    hang_answers: bool,
    /// Scripted answer messages (tool calls); plain `answer by <model>` once empty.
    answers: Mutex<VecDeque<ChatMessage>>,
    seen: Mutex<Vec<ChatRequest>>,
    /// Every completion reports usage (prompt: a quarter of the request's characters).
    report_usage: bool,
    /// Summary hops answer at once instead of waiting for `release`.
    free_summaries: bool,
}

/// A scripted answer whose content is this hangs until interrupted.
const HANG: &str = "<hang>";
/// A scripted answer whose content is this is the plain `answer by <model>`.
const PLAIN: &str = "<plain>";

fn completion(text: &str) -> ChatCompletion {
    ChatCompletion {
        message: ChatMessage::assistant(text),
        finish_reason: FinishReason::Stop,
        usage: None,
        ttft: None,
        latency: Duration::ZERO,
        conversation_id: None,
    }
}

impl ChatBackend for FakeBackend {
    fn chat(&self, req: ChatRequest) -> BoxFuture<'_, Result<ChatStream, BackendError>> {
        Box::pin(async move {
            lock(&self.seen).push(req.clone());
            let usage = self.report_usage.then(|| crate::protocol::TokenUsage {
                prompt_tokens: crate::mol::prompt_chars(&req.messages, &req.tools) / 4,
                completion_tokens: 2 + req.messages.len() as u64,
                cached_tokens: None,
                estimated: false,
            });
            let scripted = if req.hop == Hop::Answer {
                lock(&self.answers).pop_front()
            } else {
                None
            };
            match scripted {
                Some(m) if m.content == HANG => {
                    std::future::pending::<()>().await;
                }
                Some(m) if m.content == PLAIN => {}
                Some(message) => {
                    let mut done = completion("");
                    done.message = message;
                    done.finish_reason = FinishReason::ToolCalls;
                    done.usage = usage;
                    let items: Vec<Result<ChatDelta, BackendError>> =
                        vec![Ok(ChatDelta::Completed(done))];
                    return Ok(Box::pin(futures_util::stream::iter(items)) as ChatStream);
                }
                None => {}
            }
            let text = match req.hop {
                Hop::Route => lock(&self.labels).pop_front().unwrap_or("L2").to_string(),
                Hop::Summary => {
                    if !self.free_summaries {
                        self.release.notified().await;
                    }
                    format!("summary by {}", req.model)
                }
                _ if self.hang_answers => {
                    std::future::pending::<()>().await;
                    String::new()
                }
                _ => format!("answer by {}", req.model),
            };
            let mut done = completion(&text);
            done.usage = usage;
            let items: Vec<Result<ChatDelta, BackendError>> = vec![Ok(ChatDelta::Completed(done))];
            Ok(Box::pin(futures_util::stream::iter(items)) as ChatStream)
        })
    }

    fn list_models(&self) -> BoxFuture<'_, Result<Vec<ModelInfo>, BackendError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn describe(&self) -> String {
        "fake".into()
    }
}

struct Harness {
    handle: crate::protocol::AgentHandle,
    backend: Arc<FakeBackend>,
    release: Arc<Notify>,
    _dir: tempfile::TempDir,
}

fn start(labels: Vec<&'static str>, hang_answers: bool) -> Harness {
    start_with(
        labels,
        hang_answers,
        Vec::new(),
        crate::tool::registry::standard_tools(),
    )
}

fn start_with(
    labels: Vec<&'static str>,
    hang_answers: bool,
    answers: Vec<ChatMessage>,
    tools: crate::tool::ToolRegistry,
) -> Harness {
    start_full(labels, hang_answers, answers, tools, None)
}

fn start_full(
    labels: Vec<&'static str>,
    hang_answers: bool,
    answers: Vec<ChatMessage>,
    tools: crate::tool::ToolRegistry,
    context_window: Option<u64>,
) -> Harness {
    let release = Arc::new(Notify::new());
    let backend = FakeBackend {
        labels: Mutex::new(labels.into()),
        release: release.clone(),
        hang_answers,
        answers: Mutex::new(answers.into()),
        seen: Mutex::new(Vec::new()),
        report_usage: false,
        free_summaries: false,
    };
    launch(backend, tools, context_window).0
}

/// Starts the agent on `backend`; also returns its shared state, for tests that compare it.
fn launch(
    backend: FakeBackend,
    tools: crate::tool::ToolRegistry,
    context_window: Option<u64>,
) -> (Harness, Arc<Shared>) {
    launch_configured(backend, tools, context_window, |_| {})
}

/// `launch` with the agent configuration changed by `configure` first.
fn launch_configured(
    backend: FakeBackend,
    tools: crate::tool::ToolRegistry,
    context_window: Option<u64>,
    configure: impl FnOnce(&mut AgentConfig),
) -> (Harness, Arc<Shared>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let release = backend.release.clone();
    let backend = Arc::new(backend);
    let mut cfg = AgentConfig {
        mode: Mode::Mol,
        model: None,
        pinned: None,
        reasoning: None,
        approval: ApprovalPolicy::Never,
        allowed_commands: Vec::new(),
        headless: true,
        max_round_trips: None,
        system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
        experts: Default::default(),
        profile: Profile::builtin(&crate::mol::ProfileNames::default()),
        workspace: dir.path().to_path_buf(),
        session_dir: dir.path().join("sessions"),
        temperature: None,
        top_p: None,
        seed: None,
        max_tokens: None,
        context_window,
        sandbox: Default::default(),
        network: false,
        compact_at: None,
        speculate: Default::default(),
        follow_ups: Default::default(),
        defer_summaries: false,
        hooks: crate::hooks::Hooks::none(),
    };
    configure(&mut cfg);
    std::fs::write(
        dir.path().join("big.txt"),
        "all work and no play makes jack a dull boy\n".repeat(300),
    )
    .expect("write");
    let session =
        SessionFile::create(&cfg.session_dir, "mol", "fake", dir.path()).expect("session");
    let (handle, shared) = super::start(cfg, backend.clone(), tools, session, None);
    let harness = Harness {
        handle,
        backend,
        release,
        _dir: dir,
    };
    (harness, shared)
}

async fn next_matching(h: &mut Harness, want: impl Fn(&Event) -> bool) -> Event {
    loop {
        let ev = h.handle.events.recv().await.expect("agent alive");
        if want(&ev) {
            return ev;
        }
    }
}

#[tokio::test]
async fn the_answer_is_delivered_before_the_summary_finishes() {
    let mut h = start(vec!["L2"], false);
    h.handle
        .ops
        .send(Op::UserTurn { text: "hi".into() })
        .expect("send");
    // The summary hop is held back, yet the turn completes with its answer.
    let done = next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    let Event::TurnCompleted { status, answer, .. } = done else {
        unreachable!()
    };
    assert_eq!(status, TurnStatus::Done);
    assert_eq!(answer.as_deref(), Some("answer by L2"));
    h.release.notify_one();
    let rec = next_matching(&mut h, |e| matches!(e, Event::SummaryRecorded { .. })).await;
    assert!(matches!(rec, Event::SummaryRecorded { empty: false, .. }));
}

#[tokio::test]
async fn a_turn_on_the_same_expert_does_not_wait_for_the_summary() {
    let mut h = start(vec!["L2", "L2"], false);
    for text in ["one", "two"] {
        h.handle
            .ops
            .send(Op::UserTurn { text: text.into() })
            .expect("send");
    }
    // Both turns complete while the first summary is still held.
    for _ in 0..2 {
        next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    }
    let summaries = lock(&h.backend.seen)
        .iter()
        .filter(|r| r.hop == Hop::Summary)
        .count();
    assert!(summaries >= 1);
    h.release.notify_waiters();
}

#[tokio::test]
async fn a_turn_on_another_expert_waits_for_the_summary_it_needs() {
    let mut h = start(vec!["L2", "L1"], false);
    h.handle
        .ops
        .send(Op::UserTurn { text: "one".into() })
        .expect("send");
    next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    h.handle
        .ops
        .send(Op::UserTurn { text: "two".into() })
        .expect("send");
    next_matching(&mut h, |e| {
        matches!(
            e,
            Event::RouteDecided {
                decision: RouteDecision::Model,
                expert: Expert::L1,
                ..
            }
        )
    })
    .await;
    // No L1 answer hop is sent until the L2 summary is released.
    tokio::task::yield_now().await;
    assert!(
        !lock(&h.backend.seen)
            .iter()
            .any(|r| r.hop == Hop::Answer && r.model == "L1")
    );
    h.release.notify_one();
    let done = next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    assert!(matches!(
        done,
        Event::TurnCompleted {
            status: TurnStatus::Done,
            ..
        }
    ));
    let seen = lock(&h.backend.seen);
    let l1 = seen
        .iter()
        .find(|r| r.hop == Hop::Answer && r.model == "L1")
        .expect("L1 answer");
    assert!(
        l1.messages
            .iter()
            .any(|m| m.content.contains("summary by L2"))
    );
    assert!(!l1.messages.iter().any(|m| m.content == "answer by L2"));
}

#[tokio::test]
async fn an_interrupt_ends_a_hanging_turn_and_shutdown_completes() {
    let mut h = start(vec!["L2"], true);
    h.handle
        .ops
        .send(Op::UserTurn {
            text: "wait".into(),
        })
        .expect("send");
    next_matching(&mut h, |e| {
        matches!(
            e,
            Event::HopStarted {
                hop: Hop::Answer,
                ..
            }
        )
    })
    .await;
    h.handle.ops.send(Op::Interrupt).expect("send");
    let done = next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    assert!(matches!(
        done,
        Event::TurnCompleted {
            status: TurnStatus::Interrupted,
            ..
        }
    ));
    h.handle.ops.send(Op::Shutdown).expect("send");
    next_matching(&mut h, |e| matches!(e, Event::ShutdownComplete)).await;
}

/// A tool that always needs approval to run a command, and records whether it ran.
struct Dangerous(Arc<Mutex<bool>>);

impl crate::tool::Tool for Dangerous {
    fn name(&self) -> &'static str {
        "dangerous"
    }
    fn spec(&self) -> crate::protocol::ToolSpec {
        crate::protocol::ToolSpec {
            name: "dangerous".into(),
            description: "runs rm".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    fn approval(
        &self,
        _args: &serde_json::Value,
        _ctx: &crate::tool::ToolContext,
    ) -> crate::tool::ApprovalNeed {
        crate::tool::ApprovalNeed::Command {
            command: "rm -rf build".into(),
            argv: vec!["rm".into(), "-rf".into(), "build".into()],
            cwd: ".".into(),
        }
    }
    fn title(&self, _args: &serde_json::Value) -> String {
        "rm -rf build".into()
    }
    fn run<'a>(
        &'a self,
        _args: serde_json::Value,
        _ctx: &'a crate::tool::ToolContext,
    ) -> BoxFuture<'a, crate::tool::ToolResult> {
        Box::pin(async move {
            *lock(&self.0) = true;
            crate::tool::ToolResult::ok("removed")
        })
    }
}

#[tokio::test]
async fn a_tool_duration_starts_when_its_approval_is_answered() {
    let ran = Arc::new(Mutex::new(false));
    let mut tools = crate::tool::registry::standard_tools();
    tools.register(Arc::new(Dangerous(ran.clone())));
    let mut call = ChatMessage::assistant("");
    call.tool_calls.push(crate::protocol::ToolCall {
        id: "c1".into(),
        name: "dangerous".into(),
        arguments: "{}".into(),
    });
    let backend = FakeBackend {
        labels: Mutex::new(vec!["L2"].into()),
        release: Arc::new(Notify::new()),
        hang_answers: false,
        answers: Mutex::new(vec![call].into()),
        seen: Mutex::new(Vec::new()),
        report_usage: false,
        free_summaries: false,
    };
    let (mut h, _) = launch_configured(backend, tools, None, |cfg| {
        cfg.headless = false;
        cfg.approval = ApprovalPolicy::Ask;
    });
    h.handle
        .ops
        .send(Op::UserTurn {
            text: "clean".into(),
        })
        .expect("send");
    next_matching(&mut h, |e| matches!(e, Event::ApprovalRequested { .. })).await;
    // The user reads the modal for a while; the tool itself takes no time.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    h.handle
        .ops
        .send(Op::Approval {
            call_id: "c1".into(),
            decision: crate::protocol::ApprovalDecision::Approve,
        })
        .expect("send");
    let end = next_matching(&mut h, |e| matches!(e, Event::ToolEnd { .. })).await;
    let Event::ToolEnd {
        status,
        duration_ms,
        ..
    } = end
    else {
        unreachable!("matched a tool end")
    };
    assert_eq!(status, crate::protocol::ToolStatus::Ok);
    assert!(*lock(&ran), "approved, the command ran");
    assert!(
        duration_ms < 300,
        "the wait for approval is not the tool's time: {duration_ms} ms"
    );
    h.release.notify_one();
}

#[tokio::test]
async fn headless_declines_a_call_that_needs_approval_and_tells_the_model() {
    let ran = Arc::new(Mutex::new(false));
    let mut tools = crate::tool::registry::standard_tools();
    tools.register(Arc::new(Dangerous(ran.clone())));
    let mut call = ChatMessage::assistant("");
    call.tool_calls.push(crate::protocol::ToolCall {
        id: "c1".into(),
        name: "dangerous".into(),
        arguments: "{}".into(),
    });
    let mut h = start_with(vec!["L2"], false, vec![call], tools);
    h.handle
        .ops
        .send(Op::UserTurn {
            text: "clean".into(),
        })
        .expect("send");
    let end = next_matching(&mut h, |e| matches!(e, Event::ToolEnd { .. })).await;
    assert!(matches!(
        end,
        Event::ToolEnd {
            status: crate::protocol::ToolStatus::Declined,
            ..
        }
    ));
    next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    assert!(!*lock(&ran), "the command must not run");
    let seen = lock(&h.backend.seen);
    let second = seen
        .iter()
        .filter(|r| r.hop == Hop::Answer)
        .nth(1)
        .expect("continuation");
    let told = second
        .messages
        .iter()
        .any(|m| m.role == crate::protocol::Role::Tool && m.content.contains("Declined"));
    assert!(told, "the model is told the call was declined");
    h.release.notify_one();
}

#[tokio::test]
async fn the_approval_policy_changes_while_the_session_runs() {
    let ran = Arc::new(Mutex::new(false));
    let mut tools = crate::tool::registry::standard_tools();
    tools.register(Arc::new(Dangerous(ran.clone())));
    let mut call = ChatMessage::assistant("");
    call.tool_calls.push(crate::protocol::ToolCall {
        id: "c1".into(),
        name: "dangerous".into(),
        arguments: "{}".into(),
    });
    // Started with `never`: the call would be declined, as in the test above.
    let mut h = start_with(vec!["L2"], false, vec![call], tools);
    h.handle
        .ops
        .send(Op::SetApprovalPolicy {
            policy: ApprovalPolicy::FullAuto,
        })
        .expect("send");
    let changed = next_matching(&mut h, |e| matches!(e, Event::ApprovalPolicyChanged { .. })).await;
    assert_eq!(
        changed,
        Event::ApprovalPolicyChanged {
            policy: ApprovalPolicy::FullAuto
        }
    );
    h.handle
        .ops
        .send(Op::UserTurn {
            text: "clean".into(),
        })
        .expect("send");
    let end = next_matching(&mut h, |e| matches!(e, Event::ToolEnd { .. })).await;
    assert!(
        matches!(
            end,
            Event::ToolEnd {
                status: crate::protocol::ToolStatus::Ok,
                ..
            }
        ),
        "{end:?}"
    );
    next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    assert!(*lock(&ran), "full-auto runs the command");
    h.release.notify_one();
}

#[tokio::test]
async fn a_long_tool_loop_is_compacted_to_fit_the_window() {
    let read = |id: &str| {
        let mut m = ChatMessage::assistant("");
        m.tool_calls.push(crate::protocol::ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: r#"{"path":"big.txt"}"#.into(),
        });
        m
    };
    let answers = vec![read("r1"), read("r2"), read("r3")];
    let mut h = start_full(
        vec!["L2"],
        false,
        answers,
        crate::tool::registry::standard_tools(),
        Some(4096),
    );
    h.handle
        .ops
        .send(Op::UserTurn {
            text: "read it thrice".into(),
        })
        .expect("send");
    let compacted = next_matching(&mut h, |e| matches!(e, Event::ContextCompacted { .. })).await;
    let Event::ContextCompacted {
        tokens_before,
        tokens_after,
        method,
        ..
    } = compacted
    else {
        unreachable!()
    };
    assert!(tokens_after < tokens_before);
    assert_eq!(method, "summary");
    let done = next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    assert!(matches!(
        done,
        Event::TurnCompleted {
            status: TurnStatus::Done,
            ..
        }
    ));
    let seen = lock(&h.backend.seen);
    assert!(seen.iter().any(|r| r.hop == Hop::Compaction));
    let last = seen
        .iter()
        .rfind(|r| r.hop == Hop::Answer)
        .expect("answers");
    assert!(last.messages.iter().any(|m| {
        m.content
            .contains("Earlier steps of this task were compacted")
    }));
    h.release.notify_one();
}

/// A scripted tool call of `read_file` on the workspace's big file.
fn read_big(id: &str) -> ChatMessage {
    let mut m = ChatMessage::assistant("");
    m.tool_calls.push(crate::protocol::ToolCall {
        id: id.into(),
        name: "read_file".into(),
        arguments: r#"{"path":"big.txt"}"#.into(),
    });
    m
}

/// Sends a user turn and returns the events up to its `TurnCompleted`.
async fn run_turn_to_end(h: &mut Harness, text: &str, events: &mut Vec<Event>) -> Event {
    h.handle
        .ops
        .send(Op::UserTurn { text: text.into() })
        .expect("send");
    loop {
        let ev = h.handle.events.recv().await.expect("agent alive");
        events.push(ev.clone());
        if matches!(ev, Event::TurnCompleted { .. }) {
            return ev;
        }
    }
}

#[tokio::test]
async fn a_replayed_session_file_rebuilds_the_live_state_exactly() {
    let plain = || ChatMessage::assistant(PLAIN);
    let hang = || ChatMessage::assistant(HANG);
    let answers = vec![
        // Turn 1 (L2): three big reads in a small window force shrinks and a compaction.
        read_big("r1"),
        read_big("r2"),
        read_big("r3"),
        plain(),
        // Turn 2 (L1): a plain answer that needs L2's summary first.
        plain(),
        // Turn 3 (L2): one tool call, then an answer that hangs until interrupted.
        read_big("r4"),
        hang(),
        // Turn 4 (L3): after the interrupted turn.
        plain(),
    ];
    let backend = FakeBackend {
        labels: Mutex::new(vec!["L2", "L1", "L2", "L3"].into()),
        release: Arc::new(Notify::new()),
        hang_answers: false,
        answers: Mutex::new(answers.into()),
        seen: Mutex::new(Vec::new()),
        report_usage: true,
        free_summaries: true,
    };
    let (mut h, shared) = launch(backend, crate::tool::registry::standard_tools(), Some(4096));
    let mut events = Vec::new();

    let t1 = run_turn_to_end(&mut h, "read it thrice", &mut events).await;
    assert!(matches!(
        t1,
        Event::TurnCompleted {
            status: TurnStatus::Done,
            ..
        }
    ));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::ContextCompacted { .. })),
        "turn 1 must compact"
    );
    let t2 = run_turn_to_end(&mut h, "now something else", &mut events).await;
    assert!(matches!(
        t2,
        Event::TurnCompleted {
            status: TurnStatus::Done,
            ..
        }
    ));

    h.handle
        .ops
        .send(Op::UserTurn {
            text: "read it again".into(),
        })
        .expect("send");
    loop {
        let ev = h.handle.events.recv().await.expect("agent alive");
        events.push(ev.clone());
        // The second answer hop of turn 3 hangs: interrupt it.
        if matches!(ev, Event::ToolEnd { .. }) {
            break;
        }
    }
    next_matching(&mut h, |e| {
        matches!(
            e,
            Event::HopStarted {
                hop: Hop::Answer,
                ..
            }
        )
    })
    .await;
    h.handle.ops.send(Op::Interrupt).expect("send");
    loop {
        let ev = h.handle.events.recv().await.expect("agent alive");
        events.push(ev.clone());
        if let Event::TurnCompleted { status, .. } = ev {
            assert_eq!(status, TurnStatus::Interrupted);
            break;
        }
    }
    let t4 = run_turn_to_end(&mut h, "draw me a card", &mut events).await;
    assert!(matches!(
        t4,
        Event::TurnCompleted {
            status: TurnStatus::Done,
            ..
        }
    ));
    h.handle.ops.send(Op::Shutdown).expect("send");
    loop {
        let ev = h.handle.events.recv().await.expect("agent alive");
        let end = matches!(ev, Event::ShutdownComplete);
        events.push(ev);
        if end {
            break;
        }
    }

    let live = shared.state().clone();
    let (_, path) = shared.session_file();
    let (_file, records) = SessionFile::open(&path).expect("the lock is released at shutdown");
    let replayed = SessionState::from_records(&records);

    // Every part separately first (a failure names what differs), then the whole.
    assert_eq!(replayed.timeline.tasks, live.timeline.tasks);
    assert_eq!(replayed.timeline.folded_before, live.timeline.folded_before);
    assert_eq!(replayed.timeline.token_ratio, live.timeline.token_ratio);
    let head = shared.head(Expert::L2);
    for expert in Expert::ALL {
        assert_eq!(
            replayed.timeline.view(expert, &head),
            live.timeline.view(expert, &head),
            "{expert}'s view"
        );
    }
    assert_eq!(replayed.next_turn_id, 5);
    assert_eq!(replayed.next_turn_id, live.next_turn_id);
    assert_eq!(replayed.last_answer, live.last_answer);
    assert_eq!(replayed.conversation_id, live.conversation_id);
    assert_eq!(replayed.usage, live.usage);
    assert_eq!(replayed.turn_usage, live.turn_usage);
    assert_eq!(replayed, live);

    // What the session went through, so the equality above is about something.
    let t = &live.timeline;
    assert_eq!(t.tasks.len(), 4);
    assert!(t.tasks[0].compaction.is_some(), "task 1 compacted");
    assert!(t.tasks[0].shrunk_before > 0, "task 1's old outputs shrunk");
    assert!(matches!(
        t.tasks[0].summary,
        crate::mol::SummaryState::Recorded { .. }
    ));
    assert_eq!(
        t.tasks[2].summary,
        crate::mol::SummaryState::Skipped,
        "interrupted"
    );
    assert!(t.tasks.iter().all(|t| t.closed));
    assert!(t.token_ratio.is_some());
    // The session total is every hop the events reported, summaries and compaction included.
    let mut seen = crate::protocol::UsageTotals::default();
    for e in &events {
        if let Event::HopCompleted { hop, usage, .. } = e {
            seen.add(*hop, usage);
        }
    }
    assert_eq!(live.usage, seen);
    assert!(live.usage.summary.prompt_tokens > 0);
    assert!(live.usage.compaction.prompt_tokens > 0);
    assert!(live.usage.route.prompt_tokens > 0);
    let last_total = events.iter().rev().find_map(|e| match e {
        Event::SessionUsage { usage } => Some(*usage),
        _ => None,
    });
    assert_eq!(last_total, Some(live.usage));
}

/// A tool that asks to run `command` and counts its runs.
struct Asks(Arc<Mutex<u32>>, &'static str);

impl crate::tool::Tool for Asks {
    fn name(&self) -> &'static str {
        "asks"
    }
    fn spec(&self) -> crate::protocol::ToolSpec {
        crate::protocol::ToolSpec {
            name: "asks".into(),
            description: "runs a command".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    fn approval(
        &self,
        _args: &serde_json::Value,
        _ctx: &crate::tool::ToolContext,
    ) -> crate::tool::ApprovalNeed {
        crate::tool::ApprovalNeed::Command {
            command: self.1.into(),
            argv: Vec::new(),
            cwd: ".".into(),
        }
    }
    fn title(&self, _args: &serde_json::Value) -> String {
        self.1.into()
    }
    fn run<'a>(
        &'a self,
        _args: serde_json::Value,
        _ctx: &'a crate::tool::ToolContext,
    ) -> BoxFuture<'a, crate::tool::ToolResult> {
        Box::pin(async move {
            *lock(&self.0) += 1;
            crate::tool::ToolResult::ok("done")
        })
    }
}

#[tokio::test]
async fn a_frontend_cannot_remember_a_wider_prefix_than_the_core_offered() {
    for (command, answered, remembered) in [
        // Nothing is narrow enough for a wrapper; "don't ask again" for `sudo` approves once.
        ("sudo make install", vec!["sudo"], false),
        // Wider than the offered `git commit`.
        ("git commit -m wip", vec!["git"], false),
        // The offered prefix, and a narrower one (the REPL remembers the whole argv).
        ("git commit -m wip", vec!["git", "commit"], true),
        (
            "git commit -m wip",
            vec!["git", "commit", "-m", "wip"],
            true,
        ),
    ] {
        let runs = Arc::new(Mutex::new(0));
        let mut tools = crate::tool::registry::standard_tools();
        tools.register(Arc::new(Asks(runs.clone(), command)));
        let call = |id: &str| {
            let mut m = ChatMessage::assistant("");
            m.tool_calls.push(crate::protocol::ToolCall {
                id: id.into(),
                name: "asks".into(),
                arguments: "{}".into(),
            });
            m
        };
        let backend = FakeBackend {
            labels: Mutex::new(vec!["L2"].into()),
            release: Arc::new(Notify::new()),
            hang_answers: false,
            answers: Mutex::new(vec![call("c1"), call("c2"), ChatMessage::assistant(PLAIN)].into()),
            seen: Mutex::new(Vec::new()),
            report_usage: false,
            free_summaries: true,
        };
        let (mut h, _shared) = launch_configured(backend, tools, None, |cfg| {
            cfg.approval = ApprovalPolicy::Ask;
            cfg.headless = false;
        });
        h.handle
            .ops
            .send(Op::UserTurn { text: "go".into() })
            .expect("send");
        let mut asked = 0;
        loop {
            let ev = h.handle.events.recv().await.expect("agent alive");
            match ev {
                Event::ApprovalRequested { call_id, .. } => {
                    asked += 1;
                    let decision = ApprovalDecision::ApproveForPrefix {
                        prefix: answered.iter().map(|w| w.to_string()).collect(),
                    };
                    h.handle
                        .ops
                        .send(Op::Approval { call_id, decision })
                        .expect("send");
                }
                Event::TurnCompleted { .. } => break,
                _ => {}
            }
        }
        assert_eq!(*lock(&runs), 2, "{command}: both calls ran");
        let want = if remembered { 1 } else { 2 };
        assert_eq!(asked, want, "{command} answered with {answered:?}");
        h.handle.ops.send(Op::Shutdown).expect("send");
        next_matching(&mut h, |e| matches!(e, Event::ShutdownComplete)).await;
    }
}

#[tokio::test]
async fn compaction_fires_pre_and_post_compact_hooks() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("compact.log");
    let hook = |event| {
        (
            event,
            crate::hooks::HookGroup {
                matcher: crate::hooks::Matcher::new(Some("auto")).expect("matcher"),
                hooks: vec![crate::hooks::HookCommand {
                    command: format!("cat >> {0}; echo >> {0}", log.display()),
                    timeout: std::time::Duration::from_secs(10),
                    file: "hooks.json".into(),
                }],
            },
        )
    };
    let hooks = crate::hooks::Hooks::from_groups(vec![
        hook(crate::hooks::HookEvent::PreCompact),
        hook(crate::hooks::HookEvent::PostCompact),
    ]);
    let release = Arc::new(Notify::new());
    let backend = FakeBackend {
        labels: Mutex::new(vec!["L2"].into()),
        release: release.clone(),
        hang_answers: false,
        answers: Mutex::new(vec![read_big("r1"), read_big("r2"), read_big("r3")].into()),
        seen: Mutex::new(Vec::new()),
        report_usage: false,
        free_summaries: false,
    };
    let (mut h, _) = launch_configured(
        backend,
        crate::tool::registry::standard_tools(),
        Some(4096),
        |cfg| cfg.hooks = hooks,
    );
    h.handle
        .ops
        .send(Op::UserTurn {
            text: "read it thrice".into(),
        })
        .expect("send");
    next_matching(&mut h, |e| matches!(e, Event::TurnCompleted { .. })).await;
    let text = std::fs::read_to_string(&log).expect("the hooks ran");
    let events: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert!(events.len() >= 2, "{text}");
    assert_eq!(events[0]["hook_event_name"], "PreCompact");
    assert_eq!(events[0]["trigger"], "auto");
    assert_eq!(events[1]["hook_event_name"], "PostCompact");
    assert_eq!(events[1]["expert"], "L2");
    assert!(events[1]["tokens_after"].as_u64() < events[1]["tokens_before"].as_u64());
    h.release.notify_one();
}

#[tokio::test]
async fn an_approval_question_fires_the_notification_hook_while_it_waits() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log = logs.path().join("notify.log");
    let hooks = crate::hooks::Hooks::from_groups(vec![(
        crate::hooks::HookEvent::Notification,
        crate::hooks::HookGroup {
            matcher: crate::hooks::Matcher::new(None).expect("matcher"),
            hooks: vec![crate::hooks::HookCommand {
                command: format!("cat > {}", log.display()),
                timeout: std::time::Duration::from_secs(10),
                file: "hooks.json".into(),
            }],
        },
    )]);
    let mut call = ChatMessage::assistant("");
    call.tool_calls.push(crate::protocol::ToolCall {
        id: "c1".into(),
        name: "write_file".into(),
        arguments: r#"{"path":"x.txt","content":"x"}"#.into(),
    });
    let backend = FakeBackend {
        labels: Mutex::new(vec!["L2"].into()),
        release: Arc::new(Notify::new()),
        hang_answers: false,
        answers: Mutex::new(vec![call].into()),
        seen: Mutex::new(Vec::new()),
        report_usage: false,
        free_summaries: false,
    };
    let (mut h, _) = launch_configured(
        backend,
        crate::tool::registry::standard_tools(),
        None,
        |cfg| {
            cfg.headless = false;
            cfg.approval = ApprovalPolicy::Ask;
            cfg.hooks = hooks;
        },
    );
    h.handle
        .ops
        .send(Op::UserTurn {
            text: "write".into(),
        })
        .expect("send");
    next_matching(&mut h, |e| matches!(e, Event::ApprovalRequested { .. })).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let input = loop {
        if let Ok(text) = std::fs::read_to_string(&log)
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "no notification");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(input["hook_event_name"], "Notification");
    assert_eq!(input["notification_type"], "permission_prompt");
    assert_eq!(
        input["message"],
        "baton needs your permission to use write_file"
    );
    h.handle
        .ops
        .send(Op::Approval {
            call_id: "c1".into(),
            decision: crate::protocol::ApprovalDecision::Deny,
        })
        .expect("send");
    next_matching(&mut h, |e| matches!(e, Event::ToolEnd { .. })).await;
}

fn handoff_call(id: &str, args: &str) -> ChatMessage {
    let mut m = ChatMessage::assistant("");
    m.tool_calls.push(crate::protocol::ToolCall {
        id: id.into(),
        name: crate::mol::HANDOFF_TOOL.into(),
        arguments: args.into(),
    });
    m
}

fn tool_names(req: &ChatRequest) -> Vec<String> {
    req.tools.iter().map(|t| t.name.clone()).collect()
}

#[tokio::test]
async fn each_expert_gets_its_own_prompt_and_tool_set() {
    // Turn 1 → L0, which tries a workspace tool it is not offered; turn 2 → L2.
    let mut h = start_with(
        vec!["L0", "L2"],
        false,
        vec![read_big("c1")],
        crate::tool::registry::standard_tools(),
    );
    let mut events = Vec::new();
    run_turn_to_end(&mut h, "what is a monad?", &mut events).await;
    h.release.notify_one();
    run_turn_to_end(&mut h, "fix the build", &mut events).await;
    let seen = lock(&h.backend.seen).clone();
    let answers: Vec<&ChatRequest> = seen.iter().filter(|r| r.hop == Hop::Answer).collect();
    let l0 = answers
        .iter()
        .find(|r| r.model == "L0")
        .expect("an L0 answer");
    let l2 = answers
        .iter()
        .find(|r| r.model == "L2")
        .expect("an L2 answer");
    assert_eq!(tool_names(l0), vec!["handoff"]);
    assert!(
        l0.messages[0]
            .content
            .starts_with("You are baton's conversation expert")
    );
    // L0 runs nothing on the machine: the date and OS, no workspace, git, sandbox or approval.
    let l0_system = &l0.messages[0].content;
    assert!(l0_system.contains("Environment: date: "), "{l0_system}");
    for absent in ["Workspace:", "git:", "sandbox:", "approval:"] {
        assert!(!l0_system.contains(absent), "{absent} in {l0_system}");
    }
    let l2_system = &l2.messages[0].content;
    for present in ["Workspace:", "- date: ", "git:", "sandbox:", "approval:"] {
        assert!(
            l2_system.contains(present),
            "{present} missing from {l2_system}"
        );
    }
    assert!(tool_names(l2).len() >= 10, "{:?}", tool_names(l2));
    assert!(!tool_names(l2).contains(&"handoff".to_string()));
    assert!(
        l2.messages[0]
            .content
            .starts_with("You are baton, a coding agent")
    );
    // L0's read_file call was answered as a tool that does not exist for it.
    let refused = answers
        .iter()
        .filter(|r| r.model == "L0")
        .flat_map(|r| r.messages.iter())
        .find(|m| m.tool_call_id.as_deref() == Some("c1"))
        .expect("the call's result");
    assert!(
        refused
            .content
            .starts_with("There is no tool named `read_file`. Available tools: handoff."),
        "{}",
        refused.content
    );
    // The whole L0 question costs little: no tool schemas but the handoff's.
    let tokens = crate::mol::prompt_chars(&l0.messages, &l0.tools) as f64 / 3.6;
    assert!(tokens < 1200.0, "{tokens}");
}

#[tokio::test]
async fn l0_hands_a_request_that_needs_tools_to_another_expert_in_the_same_turn() {
    let mut h = start_with(
        vec!["L0"],
        false,
        vec![handoff_call(
            "h1",
            r#"{"expert":"L1","reason":"needs the files"}"#,
        )],
        crate::tool::registry::standard_tools(),
    );
    let mut events = Vec::new();
    let done = run_turn_to_end(&mut h, "tidy my notes folder", &mut events).await;
    let Event::TurnCompleted { answer, expert, .. } = done else {
        unreachable!()
    };
    assert_eq!(answer.as_deref(), Some("answer by L1"));
    assert_eq!(expert, Some(Expert::L1));
    assert!(events.iter().any(|e| matches!(
        e,
        Event::RouteDecided { expert: Expert::L1, reason: Some(r), .. } if r.contains("handoff from L0: needs the files")
    )));
    let seen = lock(&h.backend.seen).clone();
    // (The summary hop of L1's task may follow, after the turn.)
    let models: Vec<(Hop, String)> = seen
        .iter()
        .take(3)
        .map(|r| (r.hop, r.model.clone()))
        .collect();
    assert_eq!(
        models,
        vec![
            (Hop::Route, "L0".to_string()),
            (Hop::Answer, "L0".to_string()),
            (Hop::Answer, "L1".to_string()),
        ]
    );
    // L1 sees the request once, as its own task, and nothing of L0's handoff.
    let l1 = &seen[2];
    let users: Vec<&str> = l1
        .messages
        .iter()
        .filter(|m| m.role == crate::protocol::Role::User)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(users, vec!["tidy my notes folder"]);
    assert!(l1.messages.iter().all(|m| m.tool_calls.is_empty()));
    assert!(tool_names(l1).contains(&"read_file".to_string()));
}

#[test]
fn l0s_default_tools_name_the_handoff_and_every_mcp_tool() {
    assert_eq!(
        crate::protocol::L0_DEFAULT_TOOLS,
        [crate::mol::HANDOFF_TOOL, MCP_TOOLS]
    );
}

/// Stands for a tool an MCP server offers (the registry names those `mcp__server__tool`).
struct McpClock;

impl crate::tool::Tool for McpClock {
    fn name(&self) -> &'static str {
        "mcp__clock__now"
    }
    fn spec(&self) -> crate::protocol::ToolSpec {
        crate::protocol::ToolSpec {
            name: "mcp__clock__now".into(),
            description: "the time".into(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }
    fn approval(
        &self,
        _args: &serde_json::Value,
        _ctx: &crate::tool::ToolContext,
    ) -> crate::tool::ApprovalNeed {
        crate::tool::ApprovalNeed::None
    }
    fn title(&self, _args: &serde_json::Value) -> String {
        "now".into()
    }
    fn run<'a>(
        &'a self,
        _args: serde_json::Value,
        _ctx: &'a crate::tool::ToolContext,
    ) -> BoxFuture<'a, crate::tool::ToolResult> {
        Box::pin(async move { crate::tool::ToolResult::ok("12:00") })
    }
}

/// What an expert is told of the environment follows its tools: L0 with an MCP tool is told
/// the approval policy (such calls may need approval), still no workspace, git or sandbox;
/// L2 gets the whole block.
#[tokio::test]
async fn l0_with_an_mcp_tool_is_told_the_approval_policy_but_not_the_workspace() {
    let mut tools = crate::tool::registry::standard_tools();
    tools.register(Arc::new(McpClock));
    let backend = FakeBackend {
        labels: Mutex::new(Vec::new().into()),
        release: Arc::new(Notify::new()),
        hang_answers: false,
        answers: Mutex::new(Vec::new().into()),
        seen: Mutex::new(Vec::new()),
        report_usage: false,
        free_summaries: false,
    };
    let (_h, shared) = launch(backend, tools, None);
    let l0 = shared.head(Expert::L0)[0].content.clone();
    assert!(l0.contains("- approval: "), "{l0}");
    for absent in ["Workspace:", "git:", "sandbox:", "commands run with"] {
        assert!(!l0.contains(absent), "{absent} in {l0}");
    }
    let l2 = shared.head(Expert::L2)[0].content.clone();
    for present in ["Workspace:", "git:", "sandbox:", "- approval: "] {
        assert!(l2.contains(present), "{present} missing from {l2}");
    }
}
