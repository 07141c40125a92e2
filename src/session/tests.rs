//! Session files: append, list, find, and replay after a crash.

use super::*;
use crate::backend::ChatMessage;
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

    let (_file, restored) = SessionFile::resume(dir.path(), "last").expect("resume");
    let t = &restored.timeline;
    assert_eq!(t.tasks.len(), 2);
    assert!(t.tasks[0].closed && t.tasks[0].summary.is_none());
    assert_eq!(
        t.unsummarized(),
        vec![1],
        "the closed task still needs its summary"
    );
    assert!(t.tasks[1].closed, "the crashed open task is abandoned");
    assert_eq!(t.tasks[1].summary.as_deref(), Some(""));
}

#[test]
fn sessions_are_found_by_id_prefix_and_last() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    let b = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    assert_eq!(find(dir.path(), &a.id).expect("by id"), a.path);
    assert!(find(dir.path(), "last").is_ok());
    assert!(matches!(
        find(dir.path(), "zzzz"),
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
    let err = SessionFile::resume(dir.path(), &f.id).expect_err("corrupt");
    assert!(err.to_string().contains("line 2"), "{err}");
}
