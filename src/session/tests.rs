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
    file.append(&Record::TaskAbandoned {
        task_id: 2,
        note: None,
    })
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
fn last_is_the_newest_session_of_the_workspace_and_never_of_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws_a = dir.path().join("a");
    let ws_b = dir.path().join("b");
    let a = SessionFile::create(dir.path(), "mol", "x", &ws_a).expect("create");
    let b = SessionFile::create(dir.path(), "mol", "x", &ws_b).expect("create");
    assert_eq!(find(dir.path(), "last", Some(&ws_a)).expect("a"), a.path);
    assert_eq!(find(dir.path(), "last", Some(&ws_b)).expect("b"), b.path);
    // A workspace without sessions does not get another's: that needs `--all` (no workspace).
    let elsewhere = dir.path().join("c");
    let err = find(dir.path(), "last", Some(&elsewhere)).expect_err("none here");
    assert_eq!(
        err.to_string(),
        format!(
            "no sessions in this workspace ({}) yet; 2 in other workspaces (--all widens `last` to them)",
            elsewhere.display()
        )
    );
    assert_eq!(find(dir.path(), "last", None).expect("any"), b.path);
    let empty = tempfile::tempdir().expect("tempdir");
    let err = find(empty.path(), "last", Some(&elsewhere)).expect_err("no sessions at all");
    assert_eq!(
        err.to_string(),
        format!(
            "no sessions in this workspace ({}) yet",
            elsewhere.display()
        )
    );
}

#[test]
fn the_listing_has_what_the_pickers_show_and_the_latest_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("ws");
    let mut f = SessionFile::create(dir.path(), "mol", "x", &ws).expect("create");
    for (turn_id, text) in [(1, "fix the build\nplease"), (2, "and the tests")] {
        f.append(&Record::Turn {
            turn_id,
            text: text.into(),
            at: String::new(),
        })
        .expect("turn");
    }
    f.append(&Record::Renamed {
        name: "first".into(),
    })
    .expect("name");
    f.append(&Record::Renamed {
        name: " build fix ".into(),
    })
    .expect("rename");
    let list = list(dir.path()).expect("list");
    assert_eq!(list.len(), 1);
    let s = &list[0];
    assert_eq!(s.id, f.id);
    assert_eq!(s.turns, 2);
    assert_eq!(s.title, "fix the build");
    assert_eq!(s.name.as_deref(), Some("build fix"));
    assert!(s.is_of(&ws));
    assert_eq!(s.last_activity().len(), "2025-01-31 14:05".len());
    f.append(&Record::Renamed {
        name: String::new(),
    })
    .expect("clear");
    assert_eq!(super::list(dir.path()).expect("list")[0].name, None);
}

/// Conversations are private: under the common umask 022 a session file is still 0600, in a
/// 0700 folder baton created.
#[test]
fn session_files_and_their_folder_are_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    // umask only changes the mode of files created from here on; 022 is the usual one.
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let root = tempfile::tempdir().expect("tempdir");
    let dir = root.path().join("data/sessions");
    let f = SessionFile::create(&dir, "mol", "x", root.path()).expect("create");
    rustix::process::umask(old);
    let mode = |p: &Path| std::fs::metadata(p).expect("stat").permissions().mode() & 0o777;
    assert_eq!(mode(&f.path), 0o600);
    assert_eq!(mode(&f.path.with_extension("pid")), 0o600);
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&root.path().join("data")), 0o700);
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

#[test]
fn a_line_torn_inside_a_multibyte_character_is_cut_like_any_torn_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    let path = f.path.clone();
    drop(f);
    // A crash after the first byte of "é" (serde_json writes non-ASCII text raw).
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.extend_from_slice(b"{\"record\":\"turn\",\"turn_id\":1,\"text\":\"caf");
    bytes.push("é".as_bytes()[0]);
    std::fs::write(&path, bytes).expect("write");

    let (mut file, records) = SessionFile::open(&path).expect("a torn line never loses a session");
    assert_eq!(records.len(), 1);
    file.append(&Record::TaskClosed { task_id: 1 })
        .expect("append");
    drop(file);
    let (_file, records) = SessionFile::open(&path).expect("open again");
    assert_eq!(records.last(), Some(&Record::TaskClosed { task_id: 1 }));
    assert_eq!(records.len(), 2);
}

#[test]
fn invalid_utf8_before_the_last_line_is_still_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    let path = f.path.clone();
    drop(f);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.extend_from_slice(b"{\"record\":\"turn\",\"turn_id\":1,\"text\":\"\xff\",\"at\":\"\"}\n");
    bytes.extend_from_slice(b"{\"record\":\"task_closed\",\"task_id\":1}\n");
    std::fs::write(&path, bytes).expect("write");
    let err = SessionFile::open(&path).expect_err("corrupt");
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[test]
fn a_learned_token_ratio_survives_the_file_bit_for_bit() {
    // The estimator's ratio is `chars / tokens`; a resumed session must shrink and compact
    // exactly like the live one, so the f64 must come back from JSON unchanged.
    let mut bad = Vec::new();
    for chars in (1_000u64..200_000).step_by(997) {
        for tokens in (100u64..20_000).step_by(89) {
            let ratio = chars as f64 / tokens as f64;
            let line = serde_json::to_string(&Record::TokenRatio {
                chars_per_token: ratio,
            })
            .expect("encode");
            match serde_json::from_str::<Record>(&line).expect("decode") {
                Record::TokenRatio { chars_per_token } if chars_per_token == ratio => {}
                other => bad.push((ratio, other)),
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} ratios changed, e.g. {:?}",
        bad.len(),
        bad.first()
    );
}

#[test]
fn links_planted_in_a_session_folder_are_not_written_through() {
    // A session folder configured inside a folder commands may write: a command replaces a
    // session file, or the pid note beside it, with a link to a file of the user's.
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let victim = outside.path().join("bashrc");
    std::fs::write(&victim, "user's own\n").expect("victim");
    let mut f = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    let (id, path) = (f.id.clone(), f.path.clone());
    f.close();
    let pid = path.with_extension("pid");
    std::os::unix::fs::symlink(&victim, &pid).expect("link pid");
    let (mut resumed, _) = SessionFile::resume(dir.path(), &id, None).expect("resume");
    resumed.close();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "user's own\n");

    let real = std::fs::read(&path).expect("read");
    std::fs::remove_file(&path).expect("rm");
    std::fs::write(outside.path().join("copy.jsonl"), &real).expect("copy");
    std::os::unix::fs::symlink(outside.path().join("copy.jsonl"), &path).expect("link");
    // Not even listed (the listing opens no link either); opened by its path, refused.
    let err = SessionFile::resume(dir.path(), &id, None).expect_err("a link is refused");
    assert!(err.to_string().contains("no session"), "{err}");
    let err = SessionFile::open(&path).expect_err("a link is refused");
    assert!(err.to_string().contains("cannot open"), "{err}");
    assert_eq!(
        std::fs::read(outside.path().join("copy.jsonl")).unwrap(),
        real
    );
}

/// A FIFO named like a session file in the session folder (which may lie where commands
/// write): `baton sessions` opened it to summarize it and waited for a writer for good.
#[test]
fn a_fifo_in_the_session_folder_is_never_opened_by_the_listing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = SessionFile::create(dir.path(), "mol", "x", dir.path()).expect("create");
    drop(f);
    let watch = crate::untrusted_fs::fifo_watch::fifo_watch(&dir.path().join("evil.jsonl"));
    let listed = list(dir.path()).expect("list");
    assert!(!watch.was_opened(), "the listing opened the FIFO");
    assert_eq!(listed.len(), 1);
}
