//! The agent core against an in-process scripted backend: the summary stays off the user's
//! path (B2), the next turn waits only when another expert needs the summary, interrupts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::Notify;

use super::*;
use crate::backend::{
    BackendError, ChatCompletion, ChatDelta, ChatRequest, ChatStream, FinishReason, ModelInfo,
};
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
}

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
            if req.hop == Hop::Answer
                && let Some(message) = lock(&self.answers).pop_front()
            {
                let mut done = completion("");
                done.message = message;
                done.finish_reason = FinishReason::ToolCalls;
                let items: Vec<Result<ChatDelta, BackendError>> =
                    vec![Ok(ChatDelta::Completed(done))];
                return Ok(Box::pin(futures_util::stream::iter(items)) as ChatStream);
            }
            let text = match req.hop {
                Hop::Route => lock(&self.labels).pop_front().unwrap_or("L2").to_string(),
                Hop::Summary => {
                    self.release.notified().await;
                    format!("summary by {}", req.model)
                }
                _ if self.hang_answers => {
                    std::future::pending::<()>().await;
                    String::new()
                }
                _ => format!("answer by {}", req.model),
            };
            let items: Vec<Result<ChatDelta, BackendError>> =
                vec![Ok(ChatDelta::Completed(completion(&text)))];
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
    let dir = tempfile::tempdir().expect("tempdir");
    let release = Arc::new(Notify::new());
    let backend = Arc::new(FakeBackend {
        labels: Mutex::new(labels.into()),
        release: release.clone(),
        hang_answers,
        answers: Mutex::new(answers.into()),
        seen: Mutex::new(Vec::new()),
    });
    let cfg = AgentConfig {
        mode: Mode::Mol,
        model: None,
        pinned: None,
        reasoning: None,
        approval: ApprovalPolicy::Never,
        allowed_commands: Vec::new(),
        headless: true,
        max_round_trips: None,
        system_prompt: DEFAULT_SYSTEM_PROMPT.into(),
        profile: Profile::builtin(&crate::mol::ProfileNames::default()),
        workspace: dir.path().to_path_buf(),
        session_dir: dir.path().join("sessions"),
        temperature: None,
        top_p: None,
        seed: None,
        max_tokens: None,
        context_window,
        compact_at: None,
    };
    std::fs::write(
        dir.path().join("big.txt"),
        "all work and no play makes jack a dull boy\n".repeat(300),
    )
    .expect("write");
    let session =
        SessionFile::create(&cfg.session_dir, "mol", "fake", dir.path()).expect("session");
    let handle = spawn_agent(cfg, backend.clone(), tools, session, None);
    Harness {
        handle,
        backend,
        release,
        _dir: dir,
    }
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
