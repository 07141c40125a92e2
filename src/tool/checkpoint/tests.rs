use std::path::Path;

use git2::{ObjectType, Signature};

use super::beneath::{self, Found, PutMode};
use super::store::Store;
use super::{CheckpointError, StoreConfig};

fn raw_tree(entries: &[(&str, &[u8], git2::Oid)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (mode, name, id) in entries {
        out.extend_from_slice(mode.as_bytes());
        out.push(b' ');
        out.extend_from_slice(name);
        out.push(0);
        out.extend_from_slice(id.as_bytes());
    }
    out
}

/// A commit in the store, made for `workspace`, whose file tree is `files_tree`.
fn plant(store: &Store, files_tree: git2::Oid, workspace: &Path) -> String {
    let odb = store.repo.odb().unwrap();
    let unknown = odb.write(ObjectType::Blob, b"").unwrap();
    let root = odb
        .write(
            ObjectType::Tree,
            &raw_tree(&[
                ("40000", b"files", files_tree),
                ("100644", b"unknown", unknown),
            ]),
        )
        .unwrap();
    let root = store.repo.find_tree(root).unwrap();
    let who = Signature::now("x", "x@x").unwrap();
    let message = format!("baton checkpoint\n\nworkspace {}\n", workspace.display());
    store
        .repo
        .commit(None, &who, &who, &message, &root, &[])
        .unwrap()
        .to_string()
}

#[test]
fn snapshots_with_climbing_or_git_entries_are_refused() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = StoreConfig::at(state.path().join("checkpoints"), state.path());
    let store = config.open(ws.path()).unwrap();
    let odb = store.repo.odb().unwrap();
    let blob = odb.write(ObjectType::Blob, b"payload").unwrap();
    for name in [&b".."[..], b".", b".git", b".GIT", b"a/b", b"/etc"] {
        let tree = odb
            .write(ObjectType::Tree, &raw_tree(&[("100644", name, blob)]))
            .unwrap();
        let id = plant(&store, tree, &store.workspace);
        let err = store.load(&id).unwrap_err();
        assert!(
            matches!(err, CheckpointError::Damaged { .. }),
            "{}: {err}",
            String::from_utf8_lossy(name)
        );
    }
    // A gitlink (a submodule commit) is no file either.
    let tree = odb
        .write(ObjectType::Tree, &raw_tree(&[("160000", b"sub", blob)]))
        .unwrap();
    assert!(store.load(&plant(&store, tree, &store.workspace)).is_err());
}

#[test]
fn a_snapshot_of_another_workspace_or_an_unknown_id_is_refused() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = StoreConfig::at(state.path().join("checkpoints"), state.path());
    let store = config.open(ws.path()).unwrap();
    let empty = store
        .repo
        .odb()
        .unwrap()
        .write(ObjectType::Tree, b"")
        .unwrap();
    let elsewhere = plant(&store, empty, Path::new("/somewhere/else"));
    assert!(store.load(&elsewhere).is_err());
    assert!(store.load(&plant(&store, empty, &store.workspace)).is_ok());
    assert!(
        store
            .load("0123456789012345678901234567890123456789")
            .is_err()
    );
    assert!(store.load("../../etc/passwd").is_err());
}

#[test]
fn snapshots_leave_out_git_baton_and_the_excluded_folders_and_note_big_files() {
    let ws = tempfile::tempdir().unwrap();
    let root = ws.path();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::write(root.join(".git/config"), "x").unwrap();
    std::fs::create_dir_all(root.join(".baton")).unwrap();
    std::fs::write(root.join(".baton/config.toml"), "x").unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    std::fs::write(
        root.join("big.bin"),
        vec![0u8; (super::MAX_CHECKPOINT_FILE_BYTES + 1) as usize],
    )
    .unwrap();
    // The session folder (and so the store) inside the workspace.
    let config = StoreConfig::at(root.join("sessions/checkpoints"), &root.join("sessions"));
    std::fs::create_dir_all(root.join("sessions")).unwrap();
    std::fs::write(root.join("sessions/s.jsonl"), "{}").unwrap();
    let id = super::snapshot(&config, root).unwrap();
    let store = config.open(root).unwrap();
    let snap = store.load(&id).unwrap();
    let names: Vec<String> = snap.files.keys().map(|p| p.display().to_string()).collect();
    assert_eq!(names, ["a.txt"]);
    assert!(snap.is_unknown(Path::new("big.bin")));
}

#[test]
fn beneath_never_walks_through_a_symlink_and_replaces_a_final_link_itself() {
    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("f"), "outside").unwrap();
    std::os::unix::fs::symlink(out.path(), ws.path().join("d")).unwrap();
    std::os::unix::fs::symlink(out.path().join("f"), ws.path().join("link")).unwrap();
    let root = beneath::open_root(ws.path()).unwrap();
    assert!(beneath::open_parent(&root, Path::new("d/f"), true).is_err());
    assert_eq!(
        beneath::read_path(&root, Path::new("d/f"), 1024).unwrap(),
        Found::Missing
    );
    assert!(beneath::remove_empty_dir(&root, Path::new("d")).is_err());
    let (dir, name) = beneath::open_parent(&root, Path::new("link"), false).unwrap();
    beneath::put_at(&dir, name, b"inside", PutMode::File { executable: false }).unwrap();
    assert_eq!(
        std::fs::read_to_string(out.path().join("f")).unwrap(),
        "outside"
    );
    assert_eq!(
        std::fs::read_to_string(ws.path().join("link")).unwrap(),
        "inside"
    );
    assert!(!ws.path().join("link").is_symlink());
    assert!(beneath::open_parent(&root, Path::new("../x"), true).is_err());
}

#[test]
fn undo_refuses_a_snapshot_whose_changed_paths_climb_out() {
    // The workspace's parent is the test's own, so what would land there is its to check.
    let parent = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir_in(parent.path()).unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = StoreConfig::at(state.path().join("checkpoints"), state.path());
    std::fs::write(ws.path().join("a.txt"), "a").unwrap();
    let real = super::snapshot(&config, ws.path()).unwrap();
    let store = config.open(ws.path()).unwrap();
    let odb = store.repo.odb().unwrap();
    let blob = odb.write(ObjectType::Blob, b"payload").unwrap();
    let inner = odb
        .write(ObjectType::Tree, &raw_tree(&[("100644", b"x", blob)]))
        .unwrap();
    let climbing = odb
        .write(ObjectType::Tree, &raw_tree(&[("40000", b"..", inner)]))
        .unwrap();
    let planted = plant(&store, climbing, &store.workspace);
    for (target, left) in [(&planted, &real), (&real, &planted)] {
        let result = super::plan_revert(&config, ws.path(), target, left, true);
        assert!(
            matches!(result, Err(CheckpointError::Damaged { .. })),
            "{:?}",
            result.map(|(_, plan)| plan.lines())
        );
    }
    assert!(!ws.path().parent().unwrap().join("x").exists());
}

#[test]
fn the_snapshot_undo_derives_equals_a_fresh_one_when_a_link_becomes_a_folder() {
    let ws = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let config = StoreConfig::at(state.path().join("checkpoints"), state.path());
    let root = ws.path();
    std::fs::create_dir_all(root.join("d")).unwrap();
    std::fs::write(root.join("d/f.txt"), "f").unwrap();
    let before = super::snapshot(&config, root).unwrap();
    std::fs::remove_dir_all(root.join("d")).unwrap();
    std::os::unix::fs::symlink("/elsewhere", root.join("d")).unwrap();
    let after = super::snapshot(&config, root).unwrap();
    let (store, plan) = super::plan_revert(&config, root, &before, &after, false).unwrap();
    let done = super::apply(&config, &store, &plan).unwrap();
    assert_eq!(done.applied.removed, ["d"]);
    assert_eq!(done.applied.restored, ["d/f.txt"]);
    let fresh = super::snapshot(&config, root).unwrap();
    let tree = |id: &str| {
        let commit = store
            .repo
            .find_commit(git2::Oid::from_str(id).unwrap())
            .unwrap();
        commit.tree().unwrap().id()
    };
    assert_eq!(tree(&done.after), tree(&fresh));
    assert!(store.derive(&plan.current, &done.applied.changes).is_ok());
}
