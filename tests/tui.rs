//! TUI tests: rendered screens (ratatui TestBackend + insta snapshots), and the UI state machine
//! driven through keys and protocol events (queueing, approvals, slash commands, Ctrl+C).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use baton::protocol::{
    ApprovalDecision, ApprovalPolicy, ApprovalRequest, Event, Expert, Hop, Op, PlanItem,
    PlanStatus, RouteDecision, TokenUsage, ToolStatus, TurnStatus,
};
use baton::tui::status::status_line;
use baton::tui::{App, ColorDepth, Effect, Popup, TuiOptions, render};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;

fn options() -> TuiOptions {
    let mut o = TuiOptions::new(PathBuf::from("/home/dev/project"));
    o.endpoint = "http://127.0.0.1:8000/v1".into();
    o.sandbox = "workspace-write".into();
    o.approval = "ask".into();
    o
}

fn app_with(opts: TuiOptions, depth: ColorDepth) -> App {
    App::with_depth(opts, depth, Instant::now())
}

fn app() -> App {
    app_with(options(), ColorDepth::TrueColor)
}

fn draw(app: &App, width: u16, height: u16) -> Terminal<TestBackend> {
    let mut t = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    t.draw(|f| render(app, f)).expect("draw");
    t
}

fn screen(app: &App, width: u16, height: u16) -> String {
    draw(app, width, height).backend().to_string()
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn ctrl(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL)
}

fn type_text(app: &mut App, text: &str) {
    for c in text.chars() {
        app.handle_key(key(KeyCode::Char(c)));
    }
}

/// The approval modal as the event loop leaves it once drawn and read: on screen, and armed
/// (keys answer it only `ARMING_DELAY` after it was first drawn).
fn modal_read(app: &mut App) {
    let shown = app.now - Duration::from_millis(500);
    app.frame_drawn(shown);
}

fn ops(app: &mut App) -> Vec<Op> {
    app.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Op(op) => Some(op),
            _ => None,
        })
        .collect()
}

/// A user turn as the core reports it: started, routed to L2, answer hop begun.
fn start_turn(app: &mut App, text: &str) {
    type_text(app, text);
    app.handle_key(key(KeyCode::Enter));
    app.handle_event(Event::TurnStarted {
        turn_id: 1,
        text: text.into(),
    });
    app.handle_event(Event::HopStarted {
        turn_id: 1,
        hop: Hop::Route,
        expert: Some(Expert::L0),
    });
    app.handle_event(Event::RouteDecided {
        turn_id: 1,
        expert: Expert::L2,
        decision: RouteDecision::Model,
        latency_ms: 120,
        reason: None,
    });
    app.handle_event(Event::HopCompleted {
        turn_id: 1,
        hop: Hop::Route,
        expert: Some(Expert::L0),
        latency_ms: 120,
        ttft_ms: None,
        usage: TokenUsage::default(),
    });
    app.handle_event(Event::HopStarted {
        turn_id: 1,
        hop: Hop::Answer,
        expert: Some(Expert::L2),
    });
}

fn finish_turn(app: &mut App) {
    app.handle_event(Event::HopCompleted {
        turn_id: 1,
        hop: Hop::Answer,
        expert: Some(Expert::L2),
        latency_ms: 3400,
        ttft_ms: Some(300),
        usage: TokenUsage {
            prompt_tokens: 1200,
            completion_tokens: 350,
            cached_tokens: None,
            estimated: false,
        },
    });
    // The core's session total after that hop (the status line shows it).
    let mut session = baton::protocol::UsageTotals::default();
    session.add(
        Hop::Answer,
        &TokenUsage {
            prompt_tokens: 1200,
            completion_tokens: 350,
            cached_tokens: None,
            estimated: false,
        },
    );
    app.handle_event(Event::SessionUsage { usage: session });
    app.handle_event(Event::Usage {
        turn_id: 1,
        usage: TokenUsage {
            prompt_tokens: 1200,
            completion_tokens: 350,
            cached_tokens: None,
            estimated: false,
        },
        context_used: Some(12_400),
        context_window: Some(32_768),
    });
    app.handle_event(Event::TurnCompleted {
        turn_id: 1,
        status: TurnStatus::Done,
        answer: None,
        expert: Some(Expert::L2),
        duration_ms: 3600,
        usage: TokenUsage::default(),
        usage_by_hop: Default::default(),
        session_usage: Box::new(session),
    });
}

const ANSWER: &str = "## Fixing the parser\n\nThe bug is in `parse_line`: it **drops** the last field. See [the docs](https://docs.rs/csv).\n\n1. Split on commas\n2. Keep empty fields\n\n```rust\nfn parse_line(s: &str) -> Vec<&str> {\n    s.split(',').collect() // keeps empties\n}\n```\n\n| case | before | after |\n|------|-------:|------:|\n| `a,b,` | 2 | 3 |\n";

#[test]
fn empty_start() {
    insta::assert_snapshot!(screen(&app(), 80, 20));
}

#[test]
fn streamed_markdown_answer_with_code() {
    let mut app = app();
    start_turn(&mut app, "fix the csv parser");
    // Stream in uneven chunks; stop in the middle of the code block.
    let cut = ANSWER.find("collect()").expect("marker");
    let chars: Vec<char> = ANSWER[..cut].chars().collect();
    for chunk in chars.chunks(7) {
        app.handle_event(Event::MessageDelta {
            turn_id: 1,
            expert: Some(Expert::L2),
            delta: chunk.iter().collect(),
        });
    }
    insta::assert_snapshot!("streaming_mid_code_block", screen(&app, 80, 30));
    app.handle_event(Event::MessageDelta {
        turn_id: 1,
        expert: Some(Expert::L2),
        delta: ANSWER[cut..].into(),
    });
    app.handle_event(Event::MessageFinal {
        turn_id: 1,
        expert: Some(Expert::L2),
        text: ANSWER.into(),
    });
    finish_turn(&mut app);
    insta::assert_snapshot!("streamed_answer_final", screen(&app, 80, 34));
}

#[test]
fn streaming_never_rewraps_finished_lines() {
    let mut app = app();
    start_turn(&mut app, "q");
    let first =
        "First paragraph is long enough to wrap across more than one line at this width.\n\n";
    app.handle_event(Event::MessageDelta {
        turn_id: 1,
        expert: None,
        delta: first.into(),
    });
    let rows_of_first = |screen: &str| -> Vec<String> {
        screen
            .lines()
            .filter(|l| l.contains("First paragraph") || l.contains("this width."))
            .map(str::to_string)
            .collect()
    };
    let finished = rows_of_first(&screen(&app, 60, 24));
    assert_eq!(finished.len(), 2, "the paragraph wraps to two rows");
    for word in "Second one streams slowly, word by word, and grows **bold** and `code` too."
        .split_inclusive(' ')
    {
        app.handle_event(Event::MessageDelta {
            turn_id: 1,
            expert: None,
            delta: word.into(),
        });
        assert_eq!(
            rows_of_first(&screen(&app, 60, 24)),
            finished,
            "finished rows changed after '{word}'"
        );
    }
}

#[test]
fn reasoning_streams_dimmed_then_folds() {
    let mut app = app();
    start_turn(&mut app, "think first");
    for line in [
        "Let me look at the parser.",
        "The last field is dropped.",
        "A filter removes empties.",
        "Fix: keep them.",
    ] {
        app.handle_event(Event::ReasoningDelta {
            turn_id: 1,
            delta: format!("{line}\n"),
        });
    }
    insta::assert_snapshot!("reasoning_streaming", screen(&app, 70, 16));
    app.handle_event(Event::MessageDelta {
        turn_id: 1,
        expert: Some(Expert::L2),
        delta: "Done.".into(),
    });
    let folded = screen(&app, 70, 16);
    assert!(
        folded.contains("∴ Thought · 4 lines (ctrl+o to expand)"),
        "{folded}"
    );
    assert!(!folded.contains("A filter removes empties."), "{folded}");
    app.handle_key(ctrl('o'));
    assert!(screen(&app, 70, 20).contains("A filter removes empties."));
}

#[test]
fn resume_picker_shows_name_first_message_turns_and_workspace_of_the_session_listing() {
    use baton::session::{Record, SessionFile};
    let dir = tempfile::tempdir().expect("tempdir");
    let here = PathBuf::from("/home/dev/project");
    let session = |workspace: &std::path::Path, text: &str, name: Option<&str>| {
        let mut f = SessionFile::create(dir.path(), "mol", "x", workspace).expect("create");
        f.append(&Record::Turn {
            turn_id: 1,
            text: text.into(),
            at: String::new(),
        })
        .expect("turn");
        if let Some(name) = name {
            f.append(&Record::Renamed { name: name.into() })
                .expect("name");
        }
        std::thread::sleep(Duration::from_millis(20));
        f.id.clone()
    };
    let old = session(&here, "fix the flaky test", Some("flaky"));
    let other = session(std::path::Path::new("/srv/elsewhere"), "deploy it", None);
    let new = session(&here, "add a --json flag", None);
    // Not a session file: the listing skips it.
    std::fs::write(dir.path().join("junk.jsonl"), "{}\n").expect("write");
    let mut o = options();
    o.sessions_dir = Some(dir.path().to_path_buf());
    let mut app = app_with(o, ColorDepth::TrueColor);
    app.composer.set_text("/resume");
    app.handle_key(key(KeyCode::Enter));
    let ids = match app.popup() {
        Popup::Sessions(list) => list.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        p => panic!("no picker: {p:?}"),
    };
    // This workspace's sessions first, newest first; then the others.
    assert_eq!(ids, vec![new.clone(), old.clone(), other.clone()]);
    let s = screen(&app, 110, 16);
    assert!(s.contains("flaky · fix the flaky test"), "{s}");
    assert!(s.contains("1 turn"), "{s}");
    assert!(s.contains("/srv/elsewhere"), "{s}");
    assert!(s.contains("add a --json flag"), "{s}");
    app.handle_key(key(KeyCode::Down));
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(ops(&mut app), vec![Op::ResumeSession { id: old }]);
    assert_eq!(app.popup(), Popup::None);
}

#[test]
fn tool_cell_collapsed_and_expanded() {
    let mut app = app();
    start_turn(&mut app, "run the tests");
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: "c1".into(),
        tool: "shell".into(),
        arguments: serde_json::json!({"command": "cargo test"}),
        title: "cargo test".into(),
    });
    let output: String = (1..=20)
        .map(|i| format!("test case_{i} ... ok\n"))
        .collect();
    app.handle_event(Event::ToolOutput {
        call_id: "c1".into(),
        chunk: output.clone(),
    });
    insta::assert_snapshot!("tool_running", screen(&app, 80, 16));
    app.handle_event(Event::ToolEnd {
        call_id: "c1".into(),
        status: ToolStatus::Failed,
        exit_code: Some(101),
        duration_ms: 4250,
        output,
    });
    insta::assert_snapshot!("tool_finished", screen(&app, 80, 16));
    app.handle_key(ctrl('o'));
    insta::assert_snapshot!("tool_expanded", screen(&app, 80, 30));
}

/// An MCP tool's title already names the tool: the cell shows it once
/// (`mcp__everything__echo {…}`), not `mcp__everything__echo: mcp__everything__echo {…}`.
#[test]
fn an_mcp_tool_cell_names_its_tool_once() {
    let mut app = app();
    start_turn(&mut app, "echo");
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: "c1".into(),
        tool: "mcp__everything__echo".into(),
        arguments: serde_json::json!({"message": "one"}),
        title: r#"mcp__everything__echo {"message":"one"}"#.into(),
    });
    let s = screen(&app, 100, 12);
    let cell = s.lines().find(|l| l.contains('⋯')).expect("the tool cell");
    assert_eq!(cell.matches("mcp__everything__echo").count(), 1, "{s}");
    assert!(
        cell.contains(r#"mcp__everything__echo {"message":"one"}"#),
        "{s}"
    );
    // Other tools keep their name as the prefix.
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: "c2".into(),
        tool: "read_file".into(),
        arguments: serde_json::json!({"path": "a.txt"}),
        title: "read a.txt".into(),
    });
    assert!(screen(&app, 100, 12).contains("read_file: read a.txt"));
}

const DIFF: &str = "--- a/src/parse.rs\n+++ b/src/parse.rs\n@@ -10,4 +10,5 @@ fn parse_line\n     let fields = s\n-        .split(',')\n-        .filter(|f| !f.is_empty())\n+        .split(',')\n+        // keep empty fields\n+        .map(str::trim)\n         .collect();\n";

#[test]
fn diff_and_plan_cells() {
    let mut app = app();
    app.handle_event(Event::PlanUpdated {
        items: vec![
            PlanItem {
                step: "Reproduce the bug".into(),
                status: PlanStatus::Completed,
            },
            PlanItem {
                step: "Fix parse_line".into(),
                status: PlanStatus::InProgress,
            },
            PlanItem {
                step: "Add a regression test".into(),
                status: PlanStatus::Pending,
            },
        ],
    });
    app.handle_event(Event::FileDiff {
        call_id: "c2".into(),
        path: "src/parse.rs".into(),
        diff: DIFF.into(),
    });
    insta::assert_snapshot!(screen(&app, 80, 24));
}

/// Red team finding 20: `git status`, 60 newlines, then `touch …` showed `$ git status`, blank
/// `$` rows and "(31 more lines: Up/Down scroll)" with the second command below the fold. A run
/// of blank lines is one line saying how many, so the whole command is on screen.
#[test]
fn blank_lines_cannot_push_a_command_below_the_approval_fold() {
    let mut app = app();
    start_turn(&mut app, "check");
    ops(&mut app);
    let command = format!(
        "git status{}touch /tmp/HIDDEN_SECOND_COMMAND",
        "\n".repeat(61)
    );
    app.handle_event(Event::ApprovalRequested {
        call_id: "c1".into(),
        request: ApprovalRequest::Command {
            command,
            argv: vec![],
            cwd: "/home/dev/project".into(),
            remember: None,
        },
    });
    modal_read(&mut app);
    let s = screen(&app, 80, 20);
    assert!(s.contains("HIDDEN_SECOND_COMMAND"), "{s}");
    assert!(s.contains("(60 blank lines)"), "{s}");
    assert!(!s.contains("more lines"), "{s}");
}

#[test]
fn approval_modal_for_a_command_and_answers() {
    let mut app = app();
    start_turn(&mut app, "push it");
    ops(&mut app);
    let request = ApprovalRequest::Command {
        command: "git push origin main".into(),
        argv: vec!["git".into(), "push".into(), "origin".into(), "main".into()],
        cwd: "/home/dev/project".into(),
        remember: Some(vec!["git".into(), "push".into()]),
    };
    app.handle_event(Event::ApprovalRequested {
        call_id: "c9".into(),
        request: request.clone(),
    });
    modal_read(&mut app);
    insta::assert_snapshot!("approval_command", screen(&app, 80, 20));

    app.handle_key(key(KeyCode::Char('a')));
    assert_eq!(
        ops(&mut app),
        vec![Op::Approval {
            call_id: "c9".into(),
            decision: ApprovalDecision::ApproveForPrefix {
                prefix: vec!["git".into(), "push".into()]
            }
        }]
    );

    app.handle_event(Event::ApprovalRequested {
        call_id: "c10".into(),
        request,
    });
    modal_read(&mut app);
    app.handle_key(key(KeyCode::Char('r')));
    type_text(&mut app, "use a PR");
    insta::assert_snapshot!("approval_reason", screen(&app, 80, 20));
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(
        ops(&mut app),
        vec![Op::Approval {
            call_id: "c10".into(),
            decision: ApprovalDecision::DenyWithReason {
                reason: "use a PR".into()
            }
        }]
    );
    assert!(app.approvals.is_empty());
}

#[test]
fn keys_typed_ahead_of_an_approval_go_to_the_composer_not_the_modal() {
    let mut app = app();
    start_turn(&mut app, "fix the code");
    ops(&mut app);
    type_text(&mut app, "yes p");
    app.handle_event(Event::ApprovalRequested {
        call_id: "c1".into(),
        request: ApprovalRequest::Command {
            command: "touch APPROVED".into(),
            argv: vec!["touch".into(), "APPROVED".into()],
            cwd: "/home/dev/project".into(),
            remember: Some(vec!["touch".into()]),
        },
    });
    // Not drawn yet, then drawn: the typing goes on, one key every 120 ms.
    type_text(&mut app, "l");
    app.frame_drawn(app.now);
    for c in "ease and then stop".chars() {
        app.now += Duration::from_millis(120);
        app.handle_key(key(KeyCode::Char(c)));
    }
    assert_eq!(ops(&mut app), vec![], "no key answered the modal");
    assert_eq!(app.approvals.len(), 1);
    assert!(
        screen(&app, 80, 24).contains("keys typed now go to your message"),
        "the modal says it is not taking keys yet"
    );
    assert_eq!(app.composer.text(), "yes please and then stop");
    // Once the typing pauses, the modal takes keys.
    app.now += Duration::from_millis(450);
    app.handle_key(key(KeyCode::Char('n')));
    assert_eq!(
        ops(&mut app),
        vec![Op::Approval {
            call_id: "c1".into(),
            decision: ApprovalDecision::Deny
        }]
    );
    assert_eq!(app.composer.text(), "yes please and then stop");
}

#[test]
fn approval_modal_for_an_edit() {
    let mut app = app();
    app.handle_event(Event::ApprovalRequested {
        call_id: "e1".into(),
        request: ApprovalRequest::Edit {
            path: "src/parse.rs".into(),
            diff: DIFF.into(),
        },
    });
    modal_read(&mut app);
    insta::assert_snapshot!(screen(&app, 80, 24));
    app.handle_key(key(KeyCode::Char('y')));
    assert_eq!(
        ops(&mut app),
        vec![Op::Approval {
            call_id: "e1".into(),
            decision: ApprovalDecision::Approve
        }]
    );
}

#[test]
fn a_short_l0_answer_saved_as_its_summary_shows_no_summary_time() {
    // No summary hop ran: "summary 0 ms" would say one did.
    let mut app = app();
    app.handle_event(Event::TurnStarted {
        turn_id: 1,
        text: "hello".into(),
    });
    finish_turn(&mut app);
    app.handle_event(Event::SummaryRecorded {
        expert: Expert::L0,
        task_id: 1,
        latency_ms: 0,
        tokens: 0,
        empty: false,
    });
    let shown = |app: &App| -> String {
        status_line(&app.status, &app.opts.experts, &app.theme, app.now, 120)
            .spans
            .iter()
            .map(|s| s.content.to_string())
            .collect()
    };
    assert!(!shown(&app).contains("summary"), "{}", shown(&app));
    // A real hop's summary is shown.
    app.handle_event(Event::SummaryRecorded {
        expert: Expert::L2,
        task_id: 2,
        latency_ms: 310,
        tokens: 30,
        empty: false,
    });
    assert!(shown(&app).contains("summary"), "{}", shown(&app));
}

#[test]
fn status_line_during_each_mol_phase() {
    let mut app = app();
    let line = |app: &App, width: usize| -> String {
        status_line(&app.status, &app.opts.experts, &app.theme, app.now, width)
            .spans
            .iter()
            .map(|s| s.content.to_string())
            .collect::<String>()
            .trim_end()
            .to_string()
    };
    let mut out = Vec::new();
    out.push(format!("idle:        {}", line(&app, 120)));
    type_text(&mut app, "hello");
    app.handle_key(key(KeyCode::Enter));
    out.push(format!("sent:        {}", line(&app, 120)));
    app.handle_event(Event::TurnStarted {
        turn_id: 1,
        text: "hello".into(),
    });
    app.handle_event(Event::HopStarted {
        turn_id: 1,
        hop: Hop::Route,
        expert: Some(Expert::L0),
    });
    out.push(format!("routing:     {}", line(&app, 120)));
    app.handle_event(Event::RouteDecided {
        turn_id: 1,
        expert: Expert::L2,
        decision: RouteDecision::Model,
        latency_ms: 95,
        reason: None,
    });
    app.handle_event(Event::HopCompleted {
        turn_id: 1,
        hop: Hop::Route,
        expert: Some(Expert::L0),
        latency_ms: 95,
        ttft_ms: None,
        usage: TokenUsage::default(),
    });
    app.handle_event(Event::HopStarted {
        turn_id: 1,
        hop: Hop::Answer,
        expert: Some(Expert::L2),
    });
    out.push(format!("answering:   {}", line(&app, 120)));
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: "t".into(),
        tool: "shell".into(),
        arguments: serde_json::json!({}),
        title: "ls".into(),
    });
    out.push(format!("tool:        {}", line(&app, 120)));
    app.handle_event(Event::ToolEnd {
        call_id: "t".into(),
        status: ToolStatus::Ok,
        exit_code: Some(0),
        duration_ms: 12,
        output: String::new(),
    });
    app.handle_event(Event::RouteDecided {
        turn_id: 1,
        expert: Expert::L2,
        decision: RouteDecision::Sticky,
        latency_ms: 0,
        reason: None,
    });
    out.push(format!("sticky:      {}", line(&app, 120)));
    finish_turn(&mut app);
    app.handle_event(Event::HopStarted {
        turn_id: 1,
        hop: Hop::Summary,
        expert: Some(Expert::L2),
    });
    out.push(format!("summarizing: {}", line(&app, 120)));
    app.handle_event(Event::HopCompleted {
        turn_id: 1,
        hop: Hop::Summary,
        expert: Some(Expert::L2),
        latency_ms: 310,
        ttft_ms: None,
        usage: TokenUsage::default(),
    });
    out.push(format!("done:        {}", line(&app, 120)));
    out.push(format!("done@60:     {}", line(&app, 60)));
    app.handle_event(Event::RouteDecided {
        turn_id: 2,
        expert: Expert::L2,
        decision: RouteDecision::Fallback,
        latency_ms: 40,
        reason: Some("label 'L9' invalid".into()),
    });
    out.push(format!("fallback:    {}", line(&app, 120)));
    app.handle_key(key(KeyCode::Char('/')));
    type_text(&mut app, "expert l1");
    app.handle_key(key(KeyCode::Enter));
    out.push(format!("pinned:      {}", line(&app, 120)));
    insta::assert_snapshot!(out.join("\n"));
}

/// Cell-by-cell colours of a screen, run-length encoded per row.
fn style_dump(buf: &Buffer) -> String {
    let fmt = |c: Color| match c {
        Color::Rgb(r, g, b) => format!("#{r:02x}{g:02x}{b:02x}"),
        Color::Indexed(i) => format!("i{i}"),
        other => format!("{other:?}"),
    };
    let mut out = String::new();
    for y in 0..buf.area.height {
        let mut runs: Vec<(String, String)> = Vec::new();
        for x in 0..buf.area.width {
            let cell = &buf[(x, y)];
            let key = format!(
                "{}/{}{}",
                fmt(cell.fg),
                fmt(cell.bg),
                if cell.modifier.is_empty() {
                    String::new()
                } else {
                    format!(" {:?}", cell.modifier)
                }
            );
            match runs.last_mut() {
                Some((k, text)) if *k == key => text.push_str(cell.symbol()),
                _ => runs.push((key, cell.symbol().to_string())),
            }
        }
        let row: Vec<String> = runs
            .into_iter()
            .filter(|(_, t)| !t.trim().is_empty())
            .map(|(k, t)| format!("[{k}] {}", t.trim_end()))
            .collect();
        if !row.is_empty() {
            out.push_str(&format!("{y:2}: {}\n", row.join(" | ")));
        }
    }
    out
}

fn themed_app(theme: &str, depth: ColorDepth) -> App {
    let mut o = options();
    o.theme = theme.into();
    let mut app = app_with(o, depth);
    start_turn(&mut app, "hi");
    app.handle_event(Event::MessageDelta {
        turn_id: 1,
        expert: Some(Expert::L2),
        delta: "Use `ls`:\n\n```sh\nls -la # list\n```\n".into(),
    });
    app.handle_event(Event::FileDiff {
        call_id: "d".into(),
        path: "a.txt".into(),
        diff: "@@ -1 +1 @@\n-old\n+new\n".into(),
    });
    app
}

#[test]
fn each_theme_colours() {
    for (theme, depth) in [
        ("dark", ColorDepth::TrueColor),
        ("light", ColorDepth::TrueColor),
        ("high-contrast", ColorDepth::TrueColor),
        ("dark", ColorDepth::Ansi256),
        ("dark", ColorDepth::Ansi16),
    ] {
        let app = themed_app(theme, depth);
        let t = draw(&app, 64, 24);
        insta::assert_snapshot!(
            format!("theme_{theme}_{depth:?}"),
            style_dump(t.backend().buffer())
        );
    }
}

#[test]
fn no_color_draws_no_colours() {
    let app = themed_app("dark", ColorDepth::None);
    let t = draw(&app, 64, 24);
    let buf = t.backend().buffer();
    for y in 0..buf.area.height {
        for x in 0..buf.area.width {
            let cell = &buf[(x, y)];
            assert_eq!(
                (cell.fg, cell.bg),
                (Color::Reset, Color::Reset),
                "colour at {x},{y}"
            );
        }
    }
}

#[test]
fn narrow_terminal() {
    let mut app = app();
    start_turn(
        &mut app,
        "a fairly long question that has to wrap on a narrow terminal",
    );
    app.handle_event(Event::MessageDelta {
        turn_id: 1,
        expert: Some(Expert::L2),
        delta: ANSWER.into(),
    });
    insta::assert_snapshot!(screen(&app, 60, 40));
}

#[test]
fn resizing_to_any_size_never_panics() {
    let mut app = themed_app("dark", ColorDepth::TrueColor);
    app.handle_event(Event::ApprovalRequested {
        call_id: "x".into(),
        request: ApprovalRequest::Edit {
            path: "p".into(),
            diff: DIFF.into(),
        },
    });
    app.handle_event(Event::MessageDelta {
        turn_id: 1,
        expert: None,
        delta: ANSWER.into(),
    });
    for (w, h) in [
        (1, 1),
        (2, 3),
        (5, 5),
        (10, 4),
        (20, 6),
        (59, 10),
        (60, 24),
        (61, 7),
        (200, 60),
        (80, 2),
    ] {
        draw(&app, w, h);
    }
    app.approvals.clear();
    type_text(&mut app, "/");
    for w in [1, 3, 8, 30, 60] {
        draw(&app, w, 12);
    }
}

#[test]
fn typing_while_working_queues_and_sends_after_the_turn() {
    let mut app = app();
    start_turn(&mut app, "first");
    assert_eq!(
        ops(&mut app),
        vec![Op::UserTurn {
            text: "first".into()
        }]
    );
    type_text(&mut app, "second");
    app.handle_key(key(KeyCode::Enter));
    type_text(&mut app, "!ls");
    app.handle_key(key(KeyCode::Enter));
    assert!(
        ops(&mut app).is_empty(),
        "nothing is sent while the turn runs"
    );
    assert_eq!(app.queue.len(), 2);
    insta::assert_snapshot!(screen(&app, 70, 14));
    finish_turn(&mut app);
    assert_eq!(
        ops(&mut app),
        vec![Op::UserTurn {
            text: "second".into()
        }]
    );
    app.handle_event(Event::TurnCompleted {
        turn_id: 2,
        status: TurnStatus::Done,
        answer: None,
        expert: None,
        duration_ms: 1,
        usage: TokenUsage::default(),
        usage_by_hop: Default::default(),
        session_usage: Default::default(),
    });
    assert_eq!(
        ops(&mut app),
        vec![Op::UserShell {
            command: "ls".into()
        }]
    );
    assert!(app.queue.is_empty());
}

#[test]
fn ctrl_c_interrupts_then_quits_on_a_second_press() {
    let mut app = app();
    start_turn(&mut app, "long job");
    ops(&mut app);
    app.handle_key(ctrl('c'));
    assert_eq!(ops(&mut app), vec![Op::Interrupt]);
    app.now += Duration::from_millis(500);
    app.handle_key(ctrl('c'));
    assert_eq!(ops(&mut app), vec![Op::Shutdown]);
    app.handle_event(Event::ShutdownComplete);
    assert_eq!(app.exit, Some(0));

    // A second press after more than a second only interrupts again.
    let mut app = app_with(options(), ColorDepth::TrueColor);
    app.handle_key(ctrl('c'));
    app.now += Duration::from_millis(1500);
    app.handle_key(ctrl('c'));
    assert!(ops(&mut app).is_empty());
    assert!(app.shutdown_started.is_none());
}

#[test]
fn esc_interrupts_and_denies_pending_approvals() {
    let mut app = app();
    start_turn(&mut app, "x");
    ops(&mut app);
    app.handle_key(key(KeyCode::Esc));
    assert_eq!(ops(&mut app), vec![Op::Interrupt]);
    app.handle_event(Event::TurnCompleted {
        turn_id: 1,
        status: TurnStatus::Interrupted,
        answer: None,
        expert: None,
        duration_ms: 5,
        usage: TokenUsage::default(),
        usage_by_hop: Default::default(),
        session_usage: Default::default(),
    });
    assert!(screen(&app, 80, 20).contains("Interrupted"));
}

#[test]
fn slash_commands_send_their_ops() {
    let mut app = app();
    for (typed, expected) in [
        (
            "/expert L2",
            Some(Op::PinExpert {
                expert: Some(Expert::L2),
            }),
        ),
        (
            "/expert coding",
            Some(Op::PinExpert {
                expert: Some(Expert::L2),
            }),
        ),
        ("/expert auto", Some(Op::PinExpert { expert: None })),
        (
            "/undo",
            Some(Op::Undo {
                redo: false,
                apply: false,
                force: false,
            }),
        ),
        (
            "/redo",
            Some(Op::Undo {
                redo: true,
                apply: false,
                force: false,
            }),
        ),
        ("/diff", Some(Op::WorkspaceDiff)),
        ("/compact", Some(Op::Compact)),
        ("/new", Some(Op::NewSession)),
        (
            "/approvals full-auto",
            Some(Op::SetApprovalPolicy {
                policy: ApprovalPolicy::FullAuto,
            }),
        ),
        (
            "/resume 0190abc",
            Some(Op::ResumeSession {
                id: "0190abc".into(),
            }),
        ),
        (
            "/rename flaky test fix",
            Some(Op::RenameSession {
                name: "flaky test fix".into(),
            }),
        ),
        ("/status", None),
        ("/help", None),
    ] {
        app.composer.set_text(typed);
        app.handle_key(key(KeyCode::Enter));
        let sent = ops(&mut app);
        assert_eq!(sent, expected.into_iter().collect::<Vec<_>>(), "{typed}");
    }
    let text = screen(&app, 100, 60);
    assert!(
        text.contains("Status") || text.contains("Commands and keys"),
        "{text}"
    );
    app.composer.set_text("/quit");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(ops(&mut app), vec![Op::Shutdown]);
}

#[test]
fn slash_popup_lists_and_completes() {
    let mut app = app();
    type_text(&mut app, "/co");
    assert!(matches!(app.popup(), Popup::Slash(ref c) if c.len() == 2));
    insta::assert_snapshot!(screen(&app, 80, 16));
    app.handle_key(key(KeyCode::Down));
    app.handle_key(key(KeyCode::Tab));
    assert_eq!(app.composer.text(), "/copy ");
}

#[test]
fn copy_and_theme_and_mouse_commands() {
    let mut app = app();
    app.composer.set_text("/copy");
    app.handle_key(key(KeyCode::Enter));
    assert!(app.take_effects().is_empty(), "nothing to copy yet");
    app.handle_event(Event::MessageFinal {
        turn_id: 1,
        expert: None,
        text: "the answer".into(),
    });
    app.composer.set_text("/copy");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(app.take_effects(), vec![Effect::Copy("the answer".into())]);
    app.composer.set_text("/theme light");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(app.theme.name, "light");
    app.handle_key(KeyEvent::new(KeyCode::F(2), KeyModifiers::NONE));
    assert_eq!(app.take_effects(), vec![Effect::SetMouseCapture(false)]);
}

#[test]
fn shell_commands_and_history_recall() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut o = options();
    o.history_file = Some(dir.path().join("history.jsonl"));
    let mut app = app_with(o.clone(), ColorDepth::TrueColor);
    type_text(&mut app, "!git status");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(
        ops(&mut app),
        vec![Op::UserShell {
            command: "git status".into()
        }]
    );
    let mut app = app_with(o, ColorDepth::TrueColor);
    app.handle_key(key(KeyCode::Up));
    assert_eq!(
        app.composer.text(),
        "!git status",
        "history persisted across sessions"
    );
}

#[test]
fn multi_line_input_and_paste_placeholder() {
    let mut app = app();
    type_text(&mut app, "line one");
    app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::SHIFT));
    type_text(&mut app, "two");
    app.handle_key(ctrl('j'));
    app.handle_paste(&"pasted\n".repeat(30));
    assert!(
        app.composer.text().ends_with("[Pasted text #1: 30 lines]"),
        "{}",
        app.composer.text()
    );
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(
        ops(&mut app),
        vec![Op::UserTurn {
            text: format!("line one\ntwo\n{}", "pasted\n".repeat(30))
        }]
    );
}

#[test]
fn file_completion_with_at() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("src")).expect("mkdir");
    std::fs::write(dir.path().join("src/parser.rs"), "").expect("write");
    std::fs::write(dir.path().join("README.md"), "").expect("write");
    let mut app = app_with(
        TuiOptions::new(dir.path().to_path_buf()),
        ColorDepth::TrueColor,
    );
    type_text(&mut app, "look at @prs");
    assert_eq!(app.popup(), Popup::Files(vec!["src/parser.rs".into()]));
    app.handle_key(key(KeyCode::Tab));
    assert_eq!(app.composer.text(), "look at src/parser.rs ");
}

#[test]
fn scrollback_keeps_everything_and_search_finds_old_text() {
    let mut app = app();
    for i in 0..200 {
        app.handle_event(Event::MessageFinal {
            turn_id: i,
            expert: None,
            text: format!("answer number {i}"),
        });
    }
    draw(&app, 80, 20);
    app.handle_key(key(KeyCode::PageUp));
    assert!(app.transcript.scroll > 0);
    // New output while scrolled up does not move the view.
    let before = screen(&app, 80, 20);
    app.handle_event(Event::MessageFinal {
        turn_id: 999,
        expert: None,
        text: "late arrival".into(),
    });
    let after = screen(&app, 80, 20);
    let body = |s: &str| s.lines().take(12).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(body(&before), body(&after));
    // Search jumps back to the first answer.
    app.handle_key(ctrl('f'));
    type_text(&mut app, "answer number 3");
    app.handle_key(key(KeyCode::Enter));
    let mut found = Vec::new();
    for _ in 0..12 {
        let s = screen(&app, 80, 20);
        if s.contains("answer number 3 ")
            || s.lines().any(|l| l.trim_end().ends_with("answer number 3"))
        {
            found.push(s);
            break;
        }
        app.handle_key(key(KeyCode::Enter));
    }
    assert!(!found.is_empty(), "search reached 'answer number 3'");
    app.handle_key(key(KeyCode::Esc));
    app.handle_key(ctrl('l'));
    assert_eq!(app.transcript.scroll, 0);
}

#[test]
fn errors_are_explained() {
    let mut app = app();
    app.handle_event(Event::Error {
        message: "error sending request: connection refused".into(),
        kind: baton::protocol::ErrorKind::Unreachable,
        hop: Some(Hop::Answer),
    });
    let s = screen(&app, 90, 16);
    assert!(
        s.contains("Could not reach http://127.0.0.1:8000/v1"),
        "{s}"
    );
}

/// The hint follows the error's kind: a context overflow whose server text mentions a 401-like
/// number or "rate" is still a context overflow.
#[test]
fn hints_come_from_the_error_kind() {
    let mut app = app();
    app.handle_event(Event::Error {
        message: "answer hop: HTTP 400: rate 401 exceeded maximum context length".into(),
        kind: baton::protocol::ErrorKind::ContextOverflow,
        hop: Some(Hop::Answer),
    });
    let s = screen(&app, 90, 16);
    assert!(s.contains("/compact"), "{s}");
    assert!(!s.contains("API key"), "{s}");
    assert!(!s.contains("rate-limiting"), "{s}");
}

#[test]
fn print_on_exit_contains_the_whole_conversation() {
    let mut app = app_with(options(), ColorDepth::None);
    start_turn(&mut app, "question");
    app.handle_event(Event::MessageFinal {
        turn_id: 1,
        expert: Some(Expert::L2),
        text: "**answer** text".into(),
    });
    let mut out = Vec::new();
    baton::tui::print_transcript(&app, 80, &mut out).expect("print");
    let text = String::from_utf8(out).expect("utf8");
    assert!(
        text.contains("› question") && text.contains("● answer text"),
        "{text}"
    );
    assert!(!text.contains('\x1b'), "NO_COLOR prints plain text");
}

#[test]
fn the_expert_badge_is_not_repeated_within_a_turn() {
    let mut app = app();
    start_turn(&mut app, "two steps");
    app.handle_event(Event::MessageFinal {
        turn_id: 1,
        expert: Some(Expert::L2),
        text: "Looking first.".into(),
    });
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: "c".into(),
        tool: "read_file".into(),
        arguments: serde_json::json!({"path": "a.rs"}),
        title: "a.rs".into(),
    });
    app.handle_event(Event::ToolEnd {
        call_id: "c".into(),
        status: ToolStatus::Ok,
        exit_code: None,
        duration_ms: 3,
        output: "fn a() {}".into(),
    });
    app.handle_event(Event::MessageFinal {
        turn_id: 1,
        expert: Some(Expert::L2),
        text: "Done.".into(),
    });
    let s = screen(&app, 80, 24);
    assert_eq!(
        s.matches("L2 coding").count(),
        2,
        "one badge in the transcript, one in the status line:\n{s}"
    );
    assert!(s.contains("✓ read_file: a.rs"), "{s}");
}

#[test]
fn a_resumed_session_shows_the_earlier_conversation() {
    use baton::session::Record;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("0190-abc.jsonl");
    let records = [
        Record::Turn {
            turn_id: 1,
            text: "what does parse_line do?".into(),
            at: "2026-11-30T10:00:00Z".into(),
        },
        Record::Route {
            turn_id: 1,
            expert: Expert::L2,
            decision: RouteDecision::Model,
            reason: None,
            latency_ms: 80,
        },
        Record::TurnEnded {
            turn_id: 1,
            status: TurnStatus::Done,
            answer: Some("It splits a **CSV** line.".into()),
        },
    ];
    let text: String = records
        .iter()
        .map(|r| serde_json::to_string(r).expect("json") + "\n")
        .collect();
    std::fs::write(&path, text).expect("write");
    let mut app = app();
    app.handle_event(Event::Session {
        session_id: "0190-abc".into(),
        mode: "mol".into(),
        backend: "http://127.0.0.1:8000/v1".into(),
        model: Some("baton".into()),
        workspace: "/home/dev/project".into(),
        resumed: true,
        session_file: Some(path.display().to_string()),
        instructions: Vec::new(),
    });
    let s = screen(&app, 80, 24);
    assert!(s.contains("Resumed session 0190-abc"), "{s}");
    assert!(s.contains("› what does parse_line do?"), "{s}");
    assert!(s.contains("● It splits a CSV line."), "{s}");
    assert_eq!(
        app.last_answer.as_deref(),
        Some("It splits a **CSV** line."),
        "/copy works right after resuming"
    );
}

#[test]
fn diff_pager_scrolls_and_searches() {
    let mut app = app();
    let diff = format!(
        "diff --git a/src/parse.rs b/src/parse.rs\n{DIFF}diff --git a/new.txt b/new.txt\nnew file mode 100644\n--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+fresh\n+file\n"
    );
    let lines = baton::tui::cell::render_diff_lines(&diff, 80, &app.theme, false);
    app.pager = Some(baton::tui::pager::Pager::new(
        "git diff (untracked included)",
        lines,
    ));
    insta::assert_snapshot!(screen(&app, 80, 20));
    draw(&app, 80, 8);
    app.handle_key(key(KeyCode::Char('/')));
    type_text(&mut app, "fresh");
    app.handle_key(key(KeyCode::Enter));
    let s = screen(&app, 80, 8);
    assert!(
        s.contains("+fresh") && s.contains("8-13 of 13"),
        "search moved the view:\n{s}"
    );
    app.handle_key(key(KeyCode::Char('q')));
    assert!(app.pager.is_none());
}

#[test]
fn workspace_diff_event_opens_the_pager_or_says_why_not() {
    let mut app = app();
    app.handle_event(Event::WorkspaceDiff {
        files: Vec::new(),
        diff: String::new(),
        error: Some("/tmp/x: not a git repository".into()),
    });
    assert!(app.pager.is_none());
    let s = screen(&app, 80, 20);
    assert!(s.contains("/diff: /tmp/x: not a git repository"), "{s}");
    app.handle_event(Event::WorkspaceDiff {
        files: Vec::new(),
        diff: String::new(),
        error: None,
    });
    assert!(app.pager.is_none());
    let s = screen(&app, 80, 20);
    assert!(s.contains("No changes in the workspace"), "{s}");
    app.handle_event(Event::WorkspaceDiff {
        files: vec![baton::protocol::ChangedFile {
            path: "src/parse.rs".into(),
            change: baton::protocol::FileChange::Modified,
            old_path: None,
        }],
        diff: format!("diff --git a/src/parse.rs b/src/parse.rs\n{DIFF}"),
        error: None,
    });
    let s = screen(&app, 80, 20);
    assert!(app.pager.is_some());
    assert!(
        s.contains("git diff (untracked included)") && s.contains("// keep empty fields"),
        "{s}"
    );
}

#[test]
fn mouse_wheel_scrolls_and_end_returns() {
    use crossterm::event::{MouseEvent, MouseEventKind};
    let mut app = app();
    for i in 0..50 {
        app.handle_event(Event::MessageFinal {
            turn_id: i,
            expert: None,
            text: format!("line {i}"),
        });
    }
    draw(&app, 80, 20);
    let wheel = |kind| MouseEvent {
        kind,
        column: 0,
        row: 0,
        modifiers: KeyModifiers::NONE,
    };
    app.handle_mouse(wheel(MouseEventKind::ScrollUp));
    app.handle_mouse(wheel(MouseEventKind::ScrollUp));
    assert_eq!(app.transcript.scroll, 6);
    assert!(screen(&app, 80, 20).contains("↑ 6 rows up"));
    app.handle_mouse(wheel(MouseEventKind::ScrollDown));
    assert_eq!(app.transcript.scroll, 3);
    app.handle_key(key(KeyCode::End));
    assert_eq!(app.transcript.scroll, 0);
    // Scrolling never goes past the top.
    for _ in 0..1000 {
        app.handle_mouse(wheel(MouseEventKind::ScrollUp));
    }
    let top = screen(&app, 80, 20);
    assert!(top.contains("baton — terminal coding agent"), "{top}");
}

#[test]
fn long_messages_and_output_lines_are_folded_until_expanded() {
    let mut app = app();
    app.handle_paste(
        &(1..=40)
            .map(|i| format!("pasted {i}\n"))
            .collect::<String>(),
    );
    app.handle_key(key(KeyCode::Enter));
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: "j".into(),
        tool: "shell".into(),
        arguments: serde_json::json!({}),
        title: "cat big.json".into(),
    });
    app.handle_event(Event::ToolEnd {
        call_id: "j".into(),
        status: ToolStatus::Ok,
        exit_code: Some(0),
        duration_ms: 5,
        output: format!("{{\"data\": \"{}\"}}", "x".repeat(5000)),
    });
    let folded = screen(&app, 80, 40);
    assert!(
        folded.contains("… 28 more lines (ctrl+o to expand)"),
        "{folded}"
    );
    assert!(!folded.contains("pasted 13"), "{folded}");
    assert_eq!(
        folded.lines().filter(|l| l.contains("xxxxxxxxxx")).count(),
        1,
        "a huge output line is one row"
    );
    app.handle_key(ctrl('o'));
    let expanded = screen(&app, 80, 200);
    assert!(expanded.contains("pasted 40"));
    assert!(
        expanded
            .lines()
            .filter(|l| l.contains("xxxxxxxxxx"))
            .count()
            > 50
    );
}

/// The status line's text at `width`.
fn status_text(app: &App, width: usize) -> String {
    status_line(&app.status, &app.opts.experts, &app.theme, app.now, width)
        .spans
        .iter()
        .map(|s| s.content.to_string())
        .collect()
}

#[test]
fn enter_on_a_complete_command_in_the_popup_runs_it() {
    let mut app = app();
    // `/model` takes an optional argument: typed in full, Enter runs it, not only completes.
    type_text(&mut app, "/model");
    assert!(matches!(app.popup(), Popup::Slash(_)));
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(
        app.composer.text(),
        "",
        "the command ran and left the composer"
    );
    assert!(screen(&app, 100, 30).contains("routing picks the expert"));
    // On a prefix, Enter completes the selected command (nothing is glued on later).
    type_text(&mut app, "/mod");
    app.handle_key(key(KeyCode::Down));
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(app.composer.text(), "/model ");
    type_text(&mut app, "L2");
    app.handle_key(key(KeyCode::Enter));
    // mol mode: no model is set, and the user is sent to /expert.
    assert!(ops(&mut app).is_empty());
    let text = screen(&app, 100, 30);
    assert!(
        text.contains("/model L2 does nothing in mol mode"),
        "{text}"
    );
    assert!(text.contains("/expert L2 pins"), "{text}");
    assert!(!text.contains("Model set to"), "{text}");
}

#[test]
fn model_switches_in_proxy_mode() {
    let mut o = options();
    o.mode = "proxy".into();
    let mut app = app_with(o, ColorDepth::TrueColor);
    app.composer.set_text("/model qwen3-coder");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(
        ops(&mut app),
        vec![Op::SetModel {
            model: "qwen3-coder".into()
        }]
    );
    assert!(screen(&app, 100, 30).contains("Model set to qwen3-coder"));
}

#[test]
fn approvals_switch_at_runtime_and_show_in_the_status_line() {
    let mut app = app();
    assert!(status_text(&app, 100).contains("approvals ask"));
    // Shift+Tab cycles ask → auto-edit → full-auto → ask, one op each.
    let cycle = [
        ApprovalPolicy::AutoEdit,
        ApprovalPolicy::FullAuto,
        ApprovalPolicy::Ask,
    ];
    for policy in cycle {
        app.handle_key(KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT));
        assert_eq!(ops(&mut app), vec![Op::SetApprovalPolicy { policy }]);
        assert!(
            status_text(&app, 100).contains(&format!("approvals {}", policy.as_str())),
            "{}",
            status_text(&app, 100)
        );
    }
    // /approvals NAME; the core's confirmation is what the status line and /status keep.
    app.composer.set_text("/approvals auto-edit");
    app.handle_key(key(KeyCode::Enter));
    assert_eq!(
        ops(&mut app),
        vec![Op::SetApprovalPolicy {
            policy: ApprovalPolicy::AutoEdit
        }]
    );
    app.handle_event(Event::ApprovalPolicyChanged {
        policy: ApprovalPolicy::AutoEdit,
    });
    assert!(status_text(&app, 40).contains("approvals auto-edit"));
    assert!(app.hint.as_deref().unwrap_or("").contains("auto-edit"));
    app.composer.set_text("/status");
    app.handle_key(key(KeyCode::Enter));
    assert!(screen(&app, 100, 40).contains("approval   auto-edit"));
    // A wrong name is refused with the list of names, and nothing is sent.
    app.composer.set_text("/approvals yolo");
    app.handle_key(key(KeyCode::Enter));
    assert!(ops(&mut app).is_empty());
    assert!(screen(&app, 100, 40).contains("'yolo' is not an approval policy"));
}

#[test]
fn the_ctrl_c_hint_goes_away_after_its_window() {
    let mut app = app();
    app.handle_key(ctrl('c'));
    assert_eq!(app.hint.as_deref(), Some("press Ctrl+C again to quit"));
    let deadline = app.next_deadline().expect("a timed hint");
    assert!(!app.expire_hint(deadline - Duration::from_millis(1)));
    assert!(app.hint.is_some());
    assert!(app.expire_hint(deadline));
    assert_eq!(app.hint, None);
    assert!(!screen(&app, 100, 20).contains("again to quit"));
    // A hint that replaced it is not taken down by the old deadline.
    app.now += Duration::from_secs(2);
    app.handle_key(ctrl('c'));
    let deadline = app.next_deadline().expect("a timed hint");
    app.hint = Some("something else".into());
    assert!(!app.expire_hint(deadline));
    assert_eq!(app.hint.as_deref(), Some("something else"));
}

#[test]
fn compacting_hint_ends_with_the_answer() {
    for answer in [
        Event::Warning {
            message: "the last task is too short to compact".into(),
        },
        Event::ContextCompacted {
            expert: Expert::L2,
            tokens_before: 9000,
            tokens_after: 1200,
            method: "summary".into(),
        },
    ] {
        let mut app = app();
        app.composer.set_text("/compact");
        app.handle_key(key(KeyCode::Enter));
        assert!(screen(&app, 100, 20).contains("compacting"));
        app.handle_event(answer);
        assert_eq!(app.hint, None);
        assert!(!screen(&app, 100, 20).contains("compacting the context"));
    }
}

#[test]
fn unpinning_drops_pinned_from_the_status_line() {
    let mut app = app();
    app.composer.set_text("/expert L2");
    app.handle_key(key(KeyCode::Enter));
    assert!(status_text(&app, 100).contains("(pinned)"));
    app.composer.set_text("/expert auto");
    app.handle_key(key(KeyCode::Enter));
    let line = status_text(&app, 100);
    assert!(!line.contains("pinned"), "{line}");

    // Unpinned while a pinned turn runs: the label lasts until that turn ends.
    app.composer.set_text("/expert L2");
    app.handle_key(key(KeyCode::Enter));
    start_turn(&mut app, "go");
    app.handle_event(Event::RouteDecided {
        turn_id: 1,
        expert: Expert::L2,
        decision: RouteDecision::Pinned,
        reason: None,
        latency_ms: 0,
    });
    app.composer.set_text("/expert auto");
    app.handle_key(key(KeyCode::Enter));
    finish_turn(&mut app);
    let line = status_text(&app, 100);
    assert!(!line.contains("pinned"), "{line}");
}

#[test]
fn new_session_forgets_the_last_turns_timings() {
    let mut app = app();
    start_turn(&mut app, "fix it");
    app.handle_event(Event::HopCompleted {
        turn_id: 1,
        hop: Hop::Route,
        expert: Some(Expert::L0),
        latency_ms: 120,
        ttft_ms: None,
        usage: TokenUsage::default(),
    });
    finish_turn(&mut app);
    let before = status_text(&app, 160);
    assert!(before.contains("turn 3.6s"), "{before}");
    assert!(before.contains("answer 3.4s"), "{before}");
    app.composer.set_text("/new");
    app.handle_key(key(KeyCode::Enter));
    let after = status_text(&app, 160);
    for stale in ["turn ", "answer ", "route ", "L2"] {
        assert!(!after.contains(stale), "{stale}: {after}");
    }
}

#[test]
fn the_local_device_is_in_the_header_and_status() {
    let mut o = options();
    o.endpoint = "local:/models/qwen3".into();
    o.device = Some("cpu (8 threads, avx2+fma, f32)".into());
    let mut app = app_with(o, ColorDepth::TrueColor);
    let header = screen(&app, 100, 20);
    assert!(
        header.contains("device     cpu (8 threads, avx2+fma, f32)"),
        "{header}"
    );
    app.composer.set_text("/status");
    app.handle_key(key(KeyCode::Enter));
    let status = screen(&app, 100, 50);
    assert!(status.contains("device     cpu (8 threads"), "{status}");
    // A remote backend has no device of its own.
    let mut remote = app_with(options(), ColorDepth::TrueColor);
    assert!(!screen(&remote, 100, 20).contains("device "));
    remote.composer.set_text("/status");
    remote.handle_key(key(KeyCode::Enter));
    assert!(screen(&remote, 100, 50).contains("device     remote"));
}

#[test]
fn transcript_search_counts_its_matches() {
    let mut app = app();
    for i in 0..30 {
        app.handle_event(Event::MessageFinal {
            turn_id: i,
            expert: None,
            text: format!("answer {i} {}", if i % 10 == 0 { "needle" } else { "hay" }),
        });
    }
    draw(&app, 80, 20);
    app.handle_key(ctrl('f'));
    type_text(&mut app, "needle");
    let bar = |app: &App| {
        screen(app, 80, 20)
            .lines()
            .find(|l| l.contains("search: "))
            .unwrap_or_default()
            .to_string()
    };
    assert!(bar(&app).contains("3 matches"), "{}", bar(&app));
    // Enter goes to the newest match first, then older ones: 3/3, 2/3, 1/3.
    for n in [3, 2, 1] {
        app.handle_key(key(KeyCode::Enter));
        assert!(bar(&app).contains(&format!("{n}/3")), "{}", bar(&app));
    }
    app.handle_key(ctrl('n'));
    assert!(bar(&app).contains("2/3"), "{}", bar(&app));
    type_text(&mut app, "zzz");
    assert!(bar(&app).contains("no match"), "{}", bar(&app));
}

#[test]
fn a_long_turn_that_ends_unfocused_notifies() {
    let done = |ms: u64| Event::TurnCompleted {
        turn_id: 1,
        status: TurnStatus::Done,
        answer: None,
        expert: Some(Expert::L2),
        duration_ms: ms,
        usage: TokenUsage::default(),
        usage_by_hop: Default::default(),
        session_usage: Default::default(),
    };
    let notices = |app: &mut App| {
        app.take_effects()
            .into_iter()
            .filter_map(|e| match e {
                Effect::Notify(text) => Some(text),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let mut app = app();
    start_turn(&mut app, "a long build");
    app.take_effects();
    app.focused = false;
    app.handle_event(done(42_000));
    assert_eq!(
        notices(&mut app),
        vec!["baton: the turn finished after 42.0s"]
    );
    // Short turns, or turns the user watched, say nothing.
    for (focused, ms) in [(false, 2_000), (true, 42_000)] {
        let mut app = app_with(options(), ColorDepth::TrueColor);
        start_turn(&mut app, "x");
        app.take_effects();
        app.focused = focused;
        app.handle_event(done(ms));
        assert!(notices(&mut app).is_empty(), "focused {focused}, {ms} ms");
    }
}

#[test]
fn init_asks_the_expert_to_write_agents_md() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut o = options();
    o.workspace = dir.path().to_path_buf();
    let mut app = app_with(o.clone(), ColorDepth::TrueColor);
    type_text(&mut app, "/init");
    app.handle_key(key(KeyCode::Enter));
    let sent = ops(&mut app);
    let [Op::UserTurn { text }] = sent.as_slice() else {
        panic!("one user turn: {sent:?}");
    };
    assert!(
        text.contains("AGENTS.md") && text.contains("write_file"),
        "{text}"
    );
    // The transcript shows the command, once, not the long prompt.
    app.handle_event(Event::TurnStarted {
        turn_id: 1,
        text: text.clone(),
    });
    let screen = screen(&app, 100, 30);
    assert_eq!(screen.matches("› /init").count(), 1, "{screen}");
    assert!(!screen.contains("write_file"), "{screen}");
    assert!(app.status.working);

    // An AGENTS.md that exists is not redrafted.
    std::fs::write(dir.path().join("AGENTS.md"), "# rules\n").expect("write");
    let mut app = app_with(o, ColorDepth::TrueColor);
    app.composer.set_text("/init");
    app.handle_key(key(KeyCode::Enter));
    assert!(ops(&mut app).is_empty());
    assert!(screen_of(&app).contains("AGENTS.md already exists"));
}

fn screen_of(app: &App) -> String {
    screen(app, 100, 30)
}

/// A finished tool call, as the core reports it.
fn tool_call(
    app: &mut App,
    id: &str,
    tool: &str,
    title: &str,
    end: Option<(ToolStatus, i32, &str)>,
) {
    app.handle_event(Event::ToolBegin {
        turn_id: 1,
        call_id: id.into(),
        tool: tool.into(),
        arguments: serde_json::json!({}),
        title: title.into(),
    });
    if let Some((status, code, output)) = end {
        app.handle_event(Event::ToolEnd {
            call_id: id.into(),
            status,
            exit_code: Some(code),
            duration_ms: 12,
            output: output.into(),
        });
    }
}

/// The cell whose symbol starts the first occurrence of `text` on screen.
fn cell_at<'a>(buf: &'a Buffer, text: &str) -> &'a ratatui::buffer::Cell {
    for y in 0..buf.area.height {
        let row: String = (0..buf.area.width).map(|x| buf[(x, y)].symbol()).collect();
        if let Some(at) = row.find(text) {
            let x = row[..at].chars().count() as u16;
            return &buf[(x, y)];
        }
    }
    panic!("{text:?} not on screen");
}

#[test]
fn command_colours_are_drawn_as_colours_not_escape_fragments() {
    for depth in [ColorDepth::TrueColor, ColorDepth::Ansi16, ColorDepth::None] {
        let mut app = app_with(options(), depth);
        tool_call(&mut app, "g", "shell", "git status --short", None);
        app.handle_event(Event::ToolOutput {
            call_id: "g".into(),
            chunk: "\u{1b}[31mM\u{1b}[0m src/util.rs\n\u{1b}[1mdiff --git a/x b/x\u{1b}[0m\n"
                .into(),
        });
        let t = draw(&app, 60, 12);
        let shown = t.backend().to_string();
        assert!(shown.contains("M src/util.rs"), "{shown}");
        assert!(shown.contains("diff --git a/x b/x"), "{shown}");
        assert!(!shown.contains("[31m") && !shown.contains("[0m"), "{shown}");
        let buf = t.backend().buffer();
        let m = cell_at(buf, "M src/util.rs");
        let diff = cell_at(buf, "diff --git");
        if depth == ColorDepth::None {
            assert_eq!(m.fg, Color::Reset, "no colours under NO_COLOR");
        } else {
            assert_eq!(m.fg, Color::Red, "{depth:?}");
        }
        assert!(
            diff.modifier.contains(ratatui::style::Modifier::BOLD),
            "{depth:?}"
        );
    }
}

#[test]
fn a_command_that_exits_non_zero_is_a_red_cross() {
    let mut app = app();
    tool_call(
        &mut app,
        "f",
        "shell",
        "false",
        Some((ToolStatus::Failed, 1, "[exit code 1]")),
    );
    tool_call(
        &mut app,
        "t",
        "shell",
        "true",
        Some((ToolStatus::Ok, 0, "[exit code 0]")),
    );
    let t = draw(&app, 60, 14);
    let shown = t.backend().to_string();
    assert!(
        shown.contains("✗ $ false  failed · exit 1 · 12ms"),
        "{shown}"
    );
    assert!(shown.contains("✓ $ true  exit 0 · 12ms"), "{shown}");
    let buf = t.backend().buffer();
    assert_eq!(cell_at(buf, "✗ $ false").fg, app.theme.colors.tool_error);
    assert_ne!(app.theme.colors.tool_error, app.theme.colors.tool_ok);
}

#[test]
fn read_file_output_keeps_the_tab_after_line_numbers() {
    let mut app = app();
    tool_call(
        &mut app,
        "r",
        "read_file",
        "a.py",
        Some((
            ToolStatus::Ok,
            0,
            "a.py (lines 1-2 of 2)\n     1\tdef add(a, b):\n     2\t    return a + b\n",
        )),
    );
    let shown = screen(&app, 60, 12);
    assert!(shown.contains("     1  def add(a, b):"), "{shown}");
    assert!(shown.contains("     2      return a + b"), "{shown}");
}

#[test]
fn a_call_waiting_for_approval_says_so_until_answered() {
    let mut app = app();
    start_turn(&mut app, "push it");
    tool_call(&mut app, "p", "shell", "git push", None);
    app.handle_event(Event::ApprovalRequested {
        call_id: "p".into(),
        request: ApprovalRequest::Command {
            command: "git push".into(),
            argv: vec!["git".into(), "push".into()],
            cwd: "/home/dev/project".into(),
            remember: None,
        },
    });
    let waiting = screen(&app, 80, 30);
    assert!(
        waiting.contains("$ git push  waiting for approval"),
        "{waiting}"
    );
    assert!(!waiting.contains("git push  running"), "{waiting}");
    modal_read(&mut app);
    app.handle_key(key(KeyCode::Char('y')));
    let running = screen(&app, 80, 30);
    assert!(running.contains("$ git push  running"), "{running}");
}

#[test]
fn an_edit_shows_its_diff_once() {
    let mut app = app();
    tool_call(&mut app, "e", "edit", "src/parse.rs", None);
    app.handle_event(Event::FileDiff {
        call_id: "e".into(),
        path: "src/parse.rs".into(),
        diff: DIFF.into(),
    });
    app.handle_event(Event::ToolEnd {
        call_id: "e".into(),
        status: ToolStatus::Ok,
        exit_code: None,
        duration_ms: 3,
        output: format!("Edited src/parse.rs: 1 replacement (+3 -2 lines)\n{DIFF}"),
    });
    for expanded in [false, true] {
        let shown = screen(&app, 80, 40);
        assert!(shown.contains("edit: src/parse.rs"), "{shown}");
        assert!(
            shown.contains("Edited src/parse.rs: 1 replacement"),
            "{shown}"
        );
        assert_eq!(
            shown.matches("// keep empty fields").count(),
            1,
            "expanded: {expanded}\n{shown}"
        );
        app.handle_key(ctrl('o'));
    }
}

#[test]
fn undo_shows_its_plan_and_applies_only_after_y() {
    let mut app = app();
    let plan = |app: &mut App| {
        app.handle_event(Event::UndoPlanned {
            redo: false,
            lines: vec!["restore  a.txt".into(), "remove   t.txt".into()],
            actionable: true,
        })
    };
    plan(&mut app);
    let shown = screen(&app, 80, 20);
    assert!(shown.contains("Apply? (y/n)"), "{shown}");
    assert!(shown.contains("restore  a.txt"), "{shown}");
    app.handle_key(key(KeyCode::Char('n')));
    assert!(ops(&mut app).is_empty(), "n applies nothing");
    assert!(screen(&app, 80, 20).contains("Undo cancelled"));
    // After a cancel the keys type again: no answer is pending.
    type_text(&mut app, "y");
    assert!(ops(&mut app).is_empty());
    assert_eq!(app.composer.text(), "y");
    app.composer.clear();

    plan(&mut app);
    app.handle_key(key(KeyCode::Char('y')));
    assert_eq!(
        ops(&mut app),
        [Op::Undo {
            redo: false,
            apply: true,
            force: false,
        }]
    );
}

#[test]
fn slash_while_scrolled_up_runs_a_command_by_its_name_and_searches_anything_else() {
    let mut app = app();
    for i in 0..200 {
        app.handle_event(Event::MessageFinal {
            turn_id: i,
            expert: None,
            text: format!("answer number {i}, quit early"),
        });
    }
    draw(&app, 80, 20);
    app.handle_key(key(KeyCode::PageUp));
    assert!(app.transcript.scroll > 0);
    // A word that is no command: searched, as before.
    type_text(&mut app, "/number");
    assert_eq!(app.search_input.as_deref(), Some("number"));
    app.handle_key(key(KeyCode::Enter));
    assert!(app.shutdown_started.is_none());
    app.handle_key(key(KeyCode::Esc));
    // `/quit` from habit (the transcript says "quit" too): the command runs.
    type_text(&mut app, "/quit");
    app.handle_key(key(KeyCode::Enter));
    assert!(app.search_input.is_none());
    assert!(app.shutdown_started.is_some(), "/quit quits");
    assert!(ops(&mut app).contains(&Op::Shutdown));
}
