//! Session files: append, list, find, torn lines, corrupt lines and the advisory lock.

use super::*;
use crate::protocol::Expert;

#[test]
fn a_torn_last_line_is_ignored_and_cut_before_the_next_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut f = SessionFile::create(dir.path(), "mol", "http://x/v1", dir.path()).expect("create");
    f.append(&Record::TaskOpened {
        task_id: 1,
        owner: Expert::L2,
        user_text: "one".into(),
    })
    .expect("append");
    let path = f.path.clone();
    drop(f);
    // A crash in the middle of writing a line.
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str("{\"record\":\"message\",\"task_id\":1,\"mess");
    std::fs::write(&path, text).expect("write");

    let (mut file, records) = SessionFile::resume(dir.path(), "last", None).expect("resume");
    assert_eq!(records.len(), 2, "meta and the opened task: {records:?}");
    file.append(&Record::TaskClosed { task_id: 1 })
        .expect("append");
    drop(file);
    let (_file, records) = SessionFile::resume(dir.path(), "last", None).expect("resume again");
    assert_eq!(records.last(), Some(&Record::TaskClosed { task_id: 1 }));
    assert_eq!(records.len(), 3);
}

#[test]
fn a_last_line_without_its_newline_is_kept_and_ended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    let path = f.path.clone();
    drop(f);
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str("{\"record\":\"task_closed\",\"task_id\":1}");
    std::fs::write(&path, text).expect("write");
    let (mut file, records) = SessionFile::open(&path).expect("open");
    assert_eq!(records.len(), 2);
    file.append(&Record::TaskAbandoned { task_id: 2 })
        .expect("append");
    drop(file);
    let (_file, records) = SessionFile::open(&path).expect("open again");
    assert_eq!(records.len(), 3, "{records:?}");
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
    let (id, path) = (f.id.clone(), f.path.clone());
    drop(f);
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str("garbage\n{\"record\":\"task_closed\",\"task_id\":1}\n");
    std::fs::write(&path, text).expect("write");
    let err = SessionFile::resume(dir.path(), &id, None).expect_err("corrupt");
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

#[test]
fn an_open_session_is_locked_and_a_second_open_names_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    // flock locks belong to an open file description: a second open conflicts even in the
    // same process, as it would in another one.
    let err = SessionFile::resume(dir.path(), &first.id, None).expect_err("locked");
    match &err {
        SessionError::Busy { id, pid } => {
            assert_eq!(id, &first.id);
            assert_eq!(*pid, Some(std::process::id()));
        }
        other => panic!("not Busy: {other}"),
    }
    assert_eq!(
        err.to_string(),
        format!(
            "session {} is open in another baton process (pid {})",
            first.id,
            std::process::id()
        )
    );
    // Nothing was written by the refused open.
    first
        .append(&Record::ConversationId { id: "c".into() })
        .expect("the holder still writes");
    let lines = std::fs::read_to_string(&first.path).expect("read");
    assert_eq!(lines.lines().count(), 2);
    // Closing releases the lock (and the pid note).
    first.close();
    assert!(!first.path.with_extension("pid").exists());
    let (_again, records) = SessionFile::resume(dir.path(), &first.id, None).expect("released");
    assert_eq!(records.len(), 2);
    assert!(first.append(&Record::TaskClosed { task_id: 1 }).is_err());
}

#[test]
fn a_file_without_a_meta_record_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("x.jsonl");
    std::fs::write(&path, "{\"record\":\"task_closed\",\"task_id\":1}\n").expect("write");
    let err = SessionFile::open(&path).expect_err("no meta");
    assert!(err.to_string().contains("no meta record"), "{err}");
}
