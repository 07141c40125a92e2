//! Session files: append, list, find, and replay after a crash.

use super::*;
use crate::mol::SummaryState;
use crate::protocol::ChatMessage;
use crate::protocol::Expert;

#[test]
fn a_torn_last_line_replays_and_an_open_task_is_abandoned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut f = SessionFile::create(dir.path(), "mol", "http://x/v1", dir.path()).expect("create");
    f.append(&Record::TaskOpened {
        task_id: 1,
        owner: Expert::L2,
        user_text: "one".into(),
    })
    .expect("append");
    f.append(&Record::Message {
        task_id: 1,
        message: ChatMessage::assistant("a1"),
    })
    .expect("append");
    f.append(&Record::TaskClosed { task_id: 1 })
        .expect("append");
    f.append(&Record::TaskOpened {
        task_id: 2,
        owner: Expert::L1,
        user_text: "two".into(),
    })
    .expect("append");
    let path = f.path.clone();
    drop(f);
    // A crash in the middle of writing a line.
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str("{\"record\":\"message\",\"task_id\":2,\"mess");
    std::fs::write(&path, text).expect("write");

    let (_file, restored) = SessionFile::resume(dir.path(), "last", None).expect("resume");
    let t = &restored.timeline;
    assert_eq!(t.tasks.len(), 2);
    assert!(t.tasks[0].closed && t.tasks[0].summary == SummaryState::Pending);
    assert_eq!(
        t.pending_summaries(),
        vec![1],
        "the closed task still needs its summary"
    );
    assert!(t.tasks[1].closed, "the crashed open task is abandoned");
    assert_eq!(t.tasks[1].summary, SummaryState::Skipped);
}

#[test]
fn abandoning_a_task_answers_its_dangling_tool_calls() {
    let mut t = crate::mol::Timeline::new();
    t.open(Expert::L2, "go");
    let mut call = ChatMessage::assistant("");
    for id in ["a", "b"] {
        call.tool_calls.push(crate::protocol::ToolCall {
            id: id.into(),
            name: "list_dir".into(),
            arguments: "{}".into(),
        });
    }
    t.push(call);
    t.push(ChatMessage::tool_result("a", "done"));
    assert_eq!(abandon_open_task(&mut t), Some(1));
    let msgs = &t.tasks[0].messages;
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[2].tool_call_id.as_deref(), Some("b"));
    assert_eq!(abandon_open_task(&mut t), None);
}

#[test]
fn sessions_are_found_by_id_prefix_and_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    let b = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    assert_eq!(find(dir.path(), &a.id, None).expect("by id"), a.path);
    assert!(find(dir.path(), "last", None).is_ok());
    assert!(matches!(
        find(dir.path(), "zzzz", None),
        Err(SessionError::NotFound { .. })
    ));
    assert_eq!(list(dir.path()).expect("list").len(), 2);
    let _ = b;
}

#[test]
fn a_corrupt_line_in_the_middle_is_an_error_naming_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    let mut text = std::fs::read_to_string(&f.path).expect("read");
    text.push_str("garbage\n{\"record\":\"task_closed\",\"task_id\":1}\n");
    std::fs::write(&f.path, text).expect("write");
    let err = SessionFile::resume(dir.path(), &f.id, None).expect_err("corrupt");
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[test]
fn last_prefers_the_newest_session_of_the_workspace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws_a = dir.path().join("a");
    let ws_b = dir.path().join("b");
    let a = SessionFile::create(dir.path(), "mol", "x", &ws_a).expect("create");
    let b = SessionFile::create(dir.path(), "mol", "x", &ws_b).expect("create");
    assert_eq!(find(dir.path(), "last", Some(&ws_a)).expect("a"), a.path);
    assert_eq!(find(dir.path(), "last", Some(&ws_b)).expect("b"), b.path);
    let elsewhere = dir.path().join("c");
    assert_eq!(
        find(dir.path(), "last", Some(&elsewhere)).expect("any"),
        b.path
    );
}
