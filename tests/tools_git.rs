//! The git tool and checkpoints/undo against real repositories in temp dirs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use baton::cli::undo::{UndoArgs, run as run_undo};
use baton::protocol::{ChangedFile, Event, EventSink, FileChange, ToolStatus};
use baton::session::{Record, SessionFile};
use baton::tool::checkpoint::{self, Reverted, StoreConfig, TurnCheckpoint};
use baton::tool::git;
use baton::tool::registry::standard_tools;
use baton::tool::{ApprovalNeed, ToolContext, ToolResult, ToolState};
use git2::{Repository, Signature};
use serde_json::{Value, json};

struct Repo {
    _dir: tempfile::TempDir,
    /// baton's own folders (sessions, the checkpoint store), outside the workspace.
    state: tempfile::TempDir,
    root: PathBuf,
    repo: Repository,
    ctx: ToolContext,
    store: StoreConfig,
}

/// A tool context for `workspace`, with its own tool state.
fn tool_context(workspace: &Path) -> ToolContext {
    ToolContext {
        workspace: workspace.to_path_buf(),
        call_id: "call-1".into(),
        events: EventSink::discard(),
        cancel: Default::default(),
        state: Arc::new(ToolState::default()),
    }
}

fn repo() -> Repo {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let repo = Repository::init(&root).unwrap();
    let mut config = repo.config().unwrap();
    config.set_str("user.name", "Test User").unwrap();
    config.set_str("user.email", "test@example.com").unwrap();
    let ctx = tool_context(&root);
    let state = tempfile::tempdir().unwrap();
    let store = StoreConfig::at(state.path().join("checkpoints"), state.path());
    checkpoint::configure(&ctx.state, store.clone());
    Repo {
        _dir: dir,
        state,
        root,
        repo,
        ctx,
        store,
    }
}

impl Repo {
    fn write(&self, rel: &str, bytes: impl AsRef<[u8]>) {
        let path = self.root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn commit_all(&self, message: &str) {
        let mut index = self.repo.index().unwrap();
        index
            .add_all(["*"], git2::IndexAddOption::DEFAULT, None)
            .unwrap();
        index.update_all(["*"], None).unwrap();
        index.write().unwrap();
        let tree = self.repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = Signature::now("Test User", "test@example.com").unwrap();
        let parent = self.repo.head().ok().map(|h| h.peel_to_commit().unwrap());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        self.repo
            .commit(Some("HEAD"), &sig, &sig, message, &tree, &parents)
            .unwrap();
    }

    /// Ends the running turn and returns its two snapshots.
    fn end_turn(&self) -> TurnCheckpoint {
        checkpoint::end_turn(&self.ctx.state, &self.root)
            .expect("the turn changed files, so it took a checkpoint")
            .unwrap()
    }

    /// Undoes a turn in `workspace` (the repository root unless a subfolder is the workspace).
    fn undo_in(&self, workspace: &Path, cp: &TurnCheckpoint) -> Reverted {
        let (store, plan) =
            checkpoint::plan_revert(&self.store, workspace, &cp.before, &cp.after, false).unwrap();
        checkpoint::apply(&self.store, &store, &plan).unwrap()
    }

    fn undo(&self, cp: &TurnCheckpoint) -> Reverted {
        self.undo_in(&self.root, cp)
    }

    async fn call(&self, tool: &str, args: Value) -> ToolResult {
        standard_tools()
            .get(tool)
            .unwrap()
            .run(args, &self.ctx)
            .await
    }

    async fn git(&self, args: Value) -> String {
        let result = self.call("git", args).await;
        assert_eq!(result.status, ToolStatus::Ok, "{}", result.content);
        result.content
    }

    /// Every file under the root except .git: path → (bytes, mode or link target).
    fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.file_name().unwrap() == ".git" {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let rel = path.strip_prefix(&self.root).unwrap().to_path_buf();
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path).unwrap();
                    out.insert(
                        rel,
                        (target.into_os_string().into_encoded_bytes(), 0o120000),
                    );
                } else if meta.is_dir() {
                    out.insert(rel, (Vec::new(), 0o040000));
                    stack.push(path);
                } else {
                    let mode = meta.permissions().mode() & 0o777;
                    out.insert(rel, (std::fs::read(&path).unwrap(), mode));
                }
            }
        }
        out
    }

    fn git_state(&self) -> (Option<String>, Vec<u8>, Vec<String>) {
        let head = self
            .repo
            .head()
            .ok()
            .and_then(|h| h.target())
            .map(|o| o.to_string());
        let index = std::fs::read(self.root.join(".git/index")).unwrap_or_default();
        let branches = self
            .repo
            .references()
            .unwrap()
            .flatten()
            .filter_map(|r| r.name().map(String::from))
            .filter(|n| !n.starts_with("refs/baton/"))
            .collect();
        (head, index, branches)
    }
}

fn ok(result: &ToolResult) {
    assert_eq!(result.status, ToolStatus::Ok, "{}", result.content);
}

#[tokio::test]
async fn status_diff_log_show_and_commit_of_chosen_paths() {
    let r = repo();
    r.write("a.txt", "one\n");
    r.write("b.txt", "bee\n");
    r.commit_all("initial commit");
    r.write("a.txt", "one\ntwo\n");
    r.write("b.txt", "bee changed\n");
    r.write("new.txt", "fresh\n");

    let status = r.git(json!({"action": "status"})).await;
    assert!(status.contains("On branch"), "{status}");
    assert!(
        status.contains(" M a.txt") && status.contains("?? new.txt"),
        "{status}"
    );

    let diff = r.git(json!({"action": "diff"})).await;
    assert!(diff.contains("+two") && diff.contains("+fresh"), "{diff}");
    let limited = r.git(json!({"action": "diff", "paths": ["a.txt"]})).await;
    assert!(
        limited.contains("+two") && !limited.contains("bee"),
        "{limited}"
    );
    assert_eq!(
        r.git(json!({"action": "diff", "staged": true})).await,
        "no differences\n"
    );

    let need = standard_tools().get("git").unwrap().approval(
        &json!({"action": "commit", "paths": ["a.txt"], "message": "add two"}),
        &r.ctx,
    );
    let ApprovalNeed::Command { argv, .. } = need else {
        panic!("commit must need command approval")
    };
    assert_eq!(argv, ["git", "commit", "-m", "add two", "--", "a.txt"]);
    assert_eq!(
        standard_tools()
            .get("git")
            .unwrap()
            .approval(&json!({"action": "status"}), &r.ctx),
        ApprovalNeed::None
    );

    let committed = r
        .git(json!({"action": "commit", "paths": ["a.txt", "new.txt"], "message": "add two\n\nbody"}))
        .await;
    assert!(
        committed.contains("committed") && committed.contains("2 files changed"),
        "{committed}"
    );
    let status = r.git(json!({"action": "status"})).await;
    assert!(
        status.contains(" M b.txt"),
        "b.txt must stay uncommitted: {status}"
    );
    assert!(
        !status.contains("a.txt") && !status.contains("new.txt"),
        "{status}"
    );

    let log = r.git(json!({"action": "log"})).await;
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].ends_with("add two") && lines[1].ends_with("initial commit"));
    let only_new = r.git(json!({"action": "log", "paths": ["new.txt"]})).await;
    assert_eq!(only_new.lines().count(), 1, "{only_new}");

    let show = r.git(json!({"action": "show"})).await;
    assert!(show.contains("    add two") && show.contains("+two") && show.contains("+fresh"));
    let file = r
        .git(json!({"action": "show", "rev": "HEAD~1:a.txt"}))
        .await;
    assert_eq!(file, "one\n");
    let against = r.git(json!({"action": "diff", "rev": "HEAD~1"})).await;
    assert!(
        against.contains("+two") && against.contains("+bee changed"),
        "{against}"
    );

    let nothing = r
        .call(
            "git",
            json!({"action": "commit", "paths": ["a.txt"], "message": "again"}),
        )
        .await;
    assert_eq!(nothing.status, ToolStatus::Error);
    assert!(nothing.content.contains("nothing to commit"));
    let no_message = r
        .call(
            "git",
            json!({"action": "commit", "paths": ["b.txt"], "message": " "}),
        )
        .await;
    assert_eq!(no_message.status, ToolStatus::Error);
    let push = r.call("git", json!({"action": "push"})).await;
    assert_eq!(push.status, ToolStatus::Error);
}

#[tokio::test]
async fn undo_restores_edits_creations_and_deletions_exactly() {
    let r = repo();
    r.write(".gitignore", "target/\n");
    r.write("src/main.rs", "fn main() {}\r\n");
    r.write("run.sh", "#!/bin/sh\necho hi\n");
    std::fs::set_permissions(
        r.root.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    r.write("docs/guide.md", "# guide\n");
    std::os::unix::fs::symlink("docs/guide.md", r.root.join("guide-link")).unwrap();
    r.commit_all("initial");
    r.write("notes.txt", "untracked but not ignored\n");
    r.write("target/build.out", "ignored output\n");
    let before = r.snapshot();
    let git_before = r.git_state();

    checkpoint::begin_turn(&r.ctx.state);
    ok(&r.call("read_file", json!({"path": "src/main.rs"})).await);
    ok(&r
        .call(
            "edit",
            json!({"path": "src/main.rs", "old_string": "fn main() {}", "new_string": "fn main() { panic!() }"}),
        )
        .await);
    ok(&r
        .call(
            "write_file",
            json!({"path": "new/dir/created.txt", "content": "new\n"}),
        )
        .await);
    ok(&r
        .call(
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Delete File: docs/guide.md\n*** Delete File: notes.txt\n*** End Patch"}),
        )
        .await);
    std::fs::set_permissions(
        r.root.join("run.sh"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    r.write("target/build.out", "rebuilt\n");
    let cp = r.end_turn();

    let report = r.undo(&cp).applied;
    assert!(
        report.removed.contains(&"new/dir/created.txt".to_string()),
        "{report:?}"
    );
    for restored in ["src/main.rs", "docs/guide.md", "notes.txt", "run.sh"] {
        assert!(
            report.restored.contains(&restored.to_string()),
            "{restored}: {report:?}"
        );
    }
    let mut after = r.snapshot();
    // Ignored files are not part of checkpoints: the rebuilt output stays as it is now.
    let ignored = PathBuf::from("target/build.out");
    assert_eq!(after.remove(&ignored).unwrap().0, b"rebuilt\n");
    let mut expected = before.clone();
    expected.remove(&ignored);
    assert_eq!(after, expected);
    assert_eq!(
        r.git_state(),
        git_before,
        "HEAD, index and branches must be untouched"
    );
    // The checkpoint lives in baton's store, not in the repository's refs.
    assert!(
        r.repo
            .references_glob("refs/baton/*")
            .unwrap()
            .next()
            .is_none()
    );
    // Undoing the same turn again finds nothing left to do.
    let again = r.undo(&cp).applied;
    assert!(
        again.restored.is_empty() && again.removed.is_empty(),
        "{again:?}"
    );
}

#[tokio::test]
async fn undo_works_in_a_repo_with_no_commits_and_walks_back_turn_by_turn() {
    let r = repo();
    r.write("a.txt", "version 1\n");
    let original = r.snapshot();

    checkpoint::begin_turn(&r.ctx.state);
    ok(&r.call("read_file", json!({"path": "a.txt"})).await);
    ok(&r
        .call(
            "write_file",
            json!({"path": "a.txt", "content": "version 2\n"}),
        )
        .await);
    let first = r.end_turn();
    let after_first = r.snapshot();

    checkpoint::begin_turn(&r.ctx.state);
    ok(&r
        .call(
            "write_file",
            json!({"path": "a.txt", "content": "version 3\n"}),
        )
        .await);
    ok(&r
        .call("write_file", json!({"path": "b.txt", "content": "b\n"}))
        .await);
    let second = r.end_turn();
    assert_ne!(first, second);
    assert!(r.repo.head().is_err(), "HEAD must stay unborn");

    r.undo(&second);
    assert_eq!(r.snapshot(), after_first);
    r.undo(&first);
    assert_eq!(r.snapshot(), original);
    assert!(r.repo.head().is_err());
}

#[test]
fn a_turn_that_changed_nothing_takes_no_checkpoint() {
    let r = repo();
    checkpoint::begin_turn(&r.ctx.state);
    assert!(checkpoint::end_turn(&r.ctx.state, &r.root).is_none());
}

#[test]
fn undo_cli_without_a_session_says_there_is_nothing_to_undo() {
    let r = repo();
    let sessions = r.state.path().join("sessions");
    assert_eq!(run_undo(&r.root, &sessions, &UndoArgs::default()), 1);
}

#[test]
fn undo_cli_reverts_the_turn_its_session_file_names() {
    let env = crate::support::env::Env::new();
    let ws = std::fs::canonicalize(&env.workspace).unwrap();
    std::fs::write(ws.join("keep.txt"), "keep\n").unwrap();
    // Where the binary, with the test's XDG_DATA_HOME, keeps its checkpoints.
    let store = StoreConfig::at(
        env.home.join(".local/share/baton/checkpoints"),
        &env.sessions,
    );
    let before = checkpoint::snapshot(&store, &ws).unwrap();
    std::fs::write(ws.join("keep.txt"), "changed\n").unwrap();
    std::fs::write(ws.join("extra.txt"), "extra\n").unwrap();
    let after = checkpoint::snapshot(&store, &ws).unwrap();
    let mut file = SessionFile::create(&env.sessions, "mol", "test", &ws).unwrap();
    file.append(&Record::Checkpoint {
        turn_id: 1,
        before,
        after,
        head: None,
    })
    .unwrap();
    drop(file);
    let undo = |args: &[&str]| {
        env.session_baton()
            .arg("undo")
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(undo(&[]), Some(0));
    assert_eq!(std::fs::read(ws.join("keep.txt")).unwrap(), b"keep\n");
    assert!(!ws.join("extra.txt").exists());
    // Recorded: a second undo has no turn left, and redo brings the turn back.
    assert_eq!(undo(&[]), Some(1));
    assert_eq!(undo(&["--redo"]), Some(0));
    assert_eq!(std::fs::read(ws.join("keep.txt")).unwrap(), b"changed\n");
    assert!(ws.join("extra.txt").exists());
}

#[test]
fn undo_is_scoped_to_the_workspace_subdirectory() {
    let r = repo();
    r.write("outer.txt", "outer\n");
    r.write("pkg/inner.txt", "inner\n");
    r.commit_all("initial");
    let pkg = r.root.join("pkg");
    let before = checkpoint::snapshot(&r.store, &pkg).unwrap();
    r.write("outer.txt", "outer changed by the user\n");
    r.write("pkg/inner.txt", "inner changed\n");
    let after = checkpoint::snapshot(&r.store, &pkg).unwrap();
    let report = r
        .undo_in(
            &pkg,
            &TurnCheckpoint {
                before,
                after,
                head: None,
            },
        )
        .applied;
    assert_eq!(report.restored, ["inner.txt"]);
    assert_eq!(std::fs::read(pkg.join("inner.txt")).unwrap(), b"inner\n");
    assert_eq!(
        std::fs::read(r.root.join("outer.txt")).unwrap(),
        b"outer changed by the user\n"
    );
    assert!(Path::new(&r.root).join(".git").exists());
}

/// The turn un-ignores `secrets/` (so its file shows up in the snapshot after the turn) and
/// replaces the folder `dir/` with a file: undo removes the file `dir` and brings the folder
/// back, and never removes what was ignored when the checkpoint was taken.
#[test]
fn undo_keeps_ignored_files_even_when_the_turn_changed_gitignore() {
    let r = repo();
    r.write(".gitignore", "secrets/\n");
    r.write("dir/x.txt", "x\n");
    r.commit_all("initial");
    r.write("secrets/key.txt", "do not delete\n");
    let before_files = r.snapshot();
    let before = checkpoint::snapshot(&r.store, &r.root).unwrap();
    r.write(".gitignore", "");
    std::fs::remove_dir_all(r.root.join("dir")).unwrap();
    r.write("dir", "now a file\n");
    let after = checkpoint::snapshot(&r.store, &r.root).unwrap();
    let done = r.undo(&TurnCheckpoint {
        before,
        after,
        head: None,
    });
    assert_eq!(done.applied.removed, ["dir"], "{done:?}");
    assert_eq!(r.snapshot(), before_files);
}

fn change_of(files: &[ChangedFile], path: &str) -> Option<FileChange> {
    files.iter().find(|f| f.path == path).map(|f| f.change)
}

#[test]
fn workspace_diff_shows_staged_unstaged_deleted_binary_and_untracked_changes() {
    let r = repo();
    r.write("keep.txt", "same\n");
    r.write("edit.txt", "old line\n");
    r.write("staged.txt", "before\n");
    r.write("gone.txt", "bye\n");
    r.write("blob.bin", [0u8, 1, 2, 3, 0, 255]);
    r.write(
        "moved_from.txt",
        "a file long enough\nto be found\nas a rename\n",
    );
    r.write(".gitignore", "*.log\n");
    r.commit_all("base");
    let (files, diff) = git::workspace_diff(&r.root).unwrap();
    assert!(files.is_empty() && diff.is_empty(), "{files:?} {diff}");

    r.write("edit.txt", "new line\n");
    r.write("staged.txt", "after\n");
    std::fs::remove_file(r.root.join("gone.txt")).unwrap();
    r.write("blob.bin", [0u8, 9, 9, 9, 0, 255, 7]);
    r.write("fresh/new.txt", "brand new\n");
    r.write("fresh/pic.bin", [0u8, 0, 7]);
    r.write("noise.log", "ignored\n");
    std::fs::rename(r.root.join("moved_from.txt"), r.root.join("moved_to.txt")).unwrap();
    let mut index = r.repo.index().unwrap();
    index.add_path(Path::new("staged.txt")).unwrap();
    index.remove_path(Path::new("moved_from.txt")).unwrap();
    index.add_path(Path::new("moved_to.txt")).unwrap();
    index.write().unwrap();

    let (files, diff) = git::workspace_diff(&r.root).unwrap();
    let expect = [
        ("edit.txt", FileChange::Modified),
        ("staged.txt", FileChange::Modified),
        ("gone.txt", FileChange::Deleted),
        ("blob.bin", FileChange::Modified),
        ("moved_to.txt", FileChange::Renamed),
        ("fresh/new.txt", FileChange::Untracked),
        ("fresh/pic.bin", FileChange::Untracked),
    ];
    for (path, change) in expect {
        assert_eq!(change_of(&files, path), Some(change), "{path}: {files:?}");
    }
    assert_eq!(files.len(), expect.len(), "{files:?}");
    let renamed = files.iter().find(|f| f.path == "moved_to.txt").unwrap();
    assert_eq!(renamed.old_path.as_deref(), Some("moved_from.txt"));
    // Tracked changes first, untracked files last, as the file list says.
    let untracked_at = files.iter().position(|f| f.change == FileChange::Untracked);
    assert_eq!(untracked_at, Some(5), "{files:?}");
    for needle in [
        "diff --git a/edit.txt b/edit.txt",
        "-old line\n",
        "+new line\n",
        "-before\n",
        "+after\n",
        "deleted file mode 100644",
        "-bye\n",
        "Binary files a/blob.bin and b/blob.bin differ",
        "rename from moved_from.txt\nrename to moved_to.txt",
        "new file mode 100644",
        "+++ b/fresh/new.txt",
        "+brand new\n",
        "Binary files /dev/null and b/fresh/pic.bin differ",
    ] {
        assert!(diff.contains(needle), "missing {needle:?} in:\n{diff}");
    }
    assert!(diff.find("+new line") < diff.find("+brand new"), "{diff}");
    for absent in ["keep.txt", "noise.log", ".gitignore"] {
        assert!(!diff.contains(absent), "{absent} in:\n{diff}");
    }

    // The same, seen from a subdirectory of the repository: paths stay repository-relative.
    let (sub_files, sub_diff) = git::workspace_diff(&r.root.join("fresh")).unwrap();
    assert_eq!(sub_files, files);
    assert_eq!(sub_diff, diff);
}

#[test]
fn workspace_diff_in_a_repository_with_no_commits_compares_with_the_empty_tree() {
    let r = repo();
    r.write("staged.txt", "first\n");
    r.write("loose.txt", "second\n");
    let mut index = r.repo.index().unwrap();
    index.add_path(Path::new("staged.txt")).unwrap();
    index.write().unwrap();
    let (files, diff) = git::workspace_diff(&r.root).unwrap();
    assert_eq!(change_of(&files, "staged.txt"), Some(FileChange::Added));
    assert_eq!(change_of(&files, "loose.txt"), Some(FileChange::Untracked));
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(
        diff.contains("+first\n") && diff.contains("+second\n"),
        "{diff}"
    );
}

#[test]
fn workspace_diff_outside_a_repository_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = git::workspace_diff(dir.path()).unwrap_err().to_string();
    assert!(err.contains("not a git repository"), "{err}");
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    let missing = dir.path().join("no/such/dir");
    assert!(git::workspace_diff(&missing).is_err());
    match git::workspace_diff_event(dir.path()) {
        Event::WorkspaceDiff { files, diff, error } => {
            assert!(files.is_empty() && diff.is_empty());
            assert!(error.is_some_and(|e| e.contains("not a git repository")));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn workspace_diff_event_serializes_in_snake_case() {
    let r = repo();
    r.write("a.txt", "x\n");
    let event = git::workspace_diff_event(&r.root);
    let v = serde_json::to_value(&event).unwrap();
    assert_eq!(v["type"], "workspace_diff");
    assert_eq!(v["files"][0]["path"], "a.txt");
    assert_eq!(v["files"][0]["change"], "untracked");
    assert!(v["files"][0].get("old_path").is_none(), "{v}");
    assert!(v.get("error").is_none(), "{v}");
    assert!(v["diff"].as_str().unwrap().contains("+x\n"), "{v}");
}

/// `/diff` used to be `git diff HEAD` plus `git diff --no-index /dev/null FILE` per untracked
/// file; the git2 version must print the same bytes (checked where git is installed).
#[test]
fn workspace_diff_prints_what_the_git_command_line_prints() {
    let r = repo();
    r.write("edit.txt", "old line\nctx\n");
    r.write("staged.txt", "before\n");
    r.write("gone.txt", "bye\n");
    r.write("blob.bin", [0u8, 1, 2, 3, 0, 255]);
    r.write(
        "moved_from.txt",
        "a file long enough\nto be found\nas a rename\n",
    );
    r.write("no_newline.txt", "no newline");
    r.commit_all("base");
    // Every change alters the size: within the second the index was written, git trusts a
    // same-size file's stat data and would not see the change (racy git), libgit2 would.
    r.write("edit.txt", "newer line\nctx\n");
    r.write("no_newline.txt", "no newline either");
    r.write("staged.txt", "after\n");
    std::fs::remove_file(r.root.join("gone.txt")).unwrap();
    r.write("blob.bin", [0u8, 9, 9, 9, 0, 255, 7]);
    r.write("fresh/new.txt", "brand new\n");
    r.write("fresh/pic.bin", [0u8, 0, 7]);
    std::fs::rename(r.root.join("moved_from.txt"), r.root.join("moved_to.txt")).unwrap();
    let mut index = r.repo.index().unwrap();
    index.add_path(Path::new("staged.txt")).unwrap();
    index.remove_path(Path::new("moved_from.txt")).unwrap();
    index.add_path(Path::new("moved_to.txt")).unwrap();
    index.write().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&r.root)
            .args(args)
            // The user's own git settings (noprefix, renames off, abbrev) are not the point.
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let Some(mut cli) = run(&["diff", "--no-color", "--no-ext-diff", "HEAD"]) else {
        eprintln!("no git command here: nothing to compare with");
        return;
    };
    let untracked = run(&["ls-files", "--others", "--exclude-standard", "-z"]).unwrap();
    for file in untracked.split('\0').filter(|f| !f.is_empty()) {
        let args = ["diff", "--no-color", "--no-ext-diff", "--no-index", "--"];
        cli.push_str(&run(&[&args[..], &["/dev/null", file]].concat()).unwrap());
    }
    let (_, ours) = git::workspace_diff(&r.root).unwrap();
    assert!(
        cli.contains("rename from") && cli.contains("+brand new"),
        "{cli}"
    );
    assert_eq!(ours, cli);
}

#[test]
fn workspace_diff_text_is_capped_but_the_file_list_is_complete() {
    let r = repo();
    r.write("a_small.txt", "small\n");
    r.write(
        "big.txt",
        "a line of an enormous generated file\n".repeat(250_000),
    );
    r.write("z_after.txt", "after\n");
    let (files, diff) = git::workspace_diff(&r.root).unwrap();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(diff.len() < 9 << 20, "{} bytes", diff.len());
    assert!(diff.contains("+small\n"));
    assert!(!diff.contains("+after\n"));
    assert!(
        diff.ends_with("\n[diff cut at 8 MiB; 3 files changed in all]\n"),
        "{}",
        &diff[diff.len() - 200..]
    );
}

#[tokio::test]
async fn commit_in_a_linked_worktree_writes_the_main_repositorys_gitdir() {
    // The commit's writes are confined to the work tree and the repository's gitdirs: a
    // linked worktree's objects and refs live in the main repository, outside the workspace.
    let r = repo();
    r.write("a.txt", "one\n");
    r.commit_all("initial commit");
    let base = tempfile::tempdir().unwrap();
    let wt_path = std::fs::canonicalize(base.path()).unwrap().join("wt");
    r.repo.worktree("wt", &wt_path, None).unwrap();
    std::fs::write(wt_path.join("a.txt"), "two\n").unwrap();
    let ctx = ToolContext {
        workspace: wt_path.clone(),
        ..r.ctx.clone()
    };
    let result = standard_tools()
        .get("git")
        .unwrap()
        .run(
            json!({"action": "commit", "paths": ["a.txt"], "message": "from the worktree"}),
            &ctx,
        )
        .await;
    assert!(result.content.contains("committed"), "{}", result.content);
    let wt_repo = Repository::open(&wt_path).unwrap();
    let head = wt_repo.head().unwrap().peel_to_commit().unwrap();
    assert_eq!(head.summary(), Some("from the worktree"));
}

/// Terminal-Bench tasks keep the repository in a subfolder: `repo` names it. A `.git` file a
/// command planted in a subfolder, pointing at a repository outside the workspace, is refused
/// rather than read or committed to.
#[tokio::test]
async fn the_repo_argument_names_a_repository_in_a_subfolder_but_not_one_outside() {
    let dir = tempfile::tempdir().unwrap();
    let ws = std::fs::canonicalize(dir.path()).unwrap();
    let app = ws.join("app");
    let inner = Repository::init(&app).unwrap();
    let mut config = inner.config().unwrap();
    config.set_str("user.name", "Test User").unwrap();
    config.set_str("user.email", "test@example.com").unwrap();
    std::fs::write(app.join("x.txt"), "x\n").unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = Repository::init(elsewhere.path()).unwrap();
    std::fs::create_dir(ws.join("planted")).unwrap();
    std::fs::write(
        ws.join("planted/.git"),
        format!("gitdir: {}\n", outside.path().display()),
    )
    .unwrap();
    let ctx = tool_context(&ws);
    let git = |args: Value| {
        let ctx = ctx.clone();
        async move { standard_tools().get("git").unwrap().run(args, &ctx).await }
    };
    let plain = git(json!({"action": "status"})).await;
    assert!(
        plain.content.contains("not a git repository"),
        "{}",
        plain.content
    );
    let status = git(json!({"action": "status", "repo": "app"})).await;
    ok(&status);
    assert!(status.content.contains("?? x.txt"), "{}", status.content);
    let commit = git(json!({"action": "commit", "repo": "app", "paths": ["app/x.txt"], "message": "in the subfolder"})).await;
    ok(&commit);
    let head = inner.head().unwrap().peel_to_commit().unwrap();
    assert_eq!(head.summary(), Some("in the subfolder"));

    for action in ["status", "log"] {
        let refused = git(json!({"action": action, "repo": "planted"})).await;
        assert_eq!(refused.status, ToolStatus::Error);
        assert!(
            refused.content.contains("outside the workspace"),
            "{}",
            refused.content
        );
    }
    let refused =
        git(json!({"action": "commit", "repo": "planted", "paths": ["planted"], "message": "m"}))
            .await;
    assert_eq!(refused.status, ToolStatus::Error);
    assert!(
        outside.head().is_err(),
        "nothing was committed to the outside repository"
    );
    let escape = git(json!({"action": "status", "repo": "../"})).await;
    assert_eq!(escape.status, ToolStatus::Error, "{}", escape.content);
    let missing = git(json!({"action": "status", "repo": "nope"})).await;
    assert!(
        missing.content.contains("no such folder"),
        "{}",
        missing.content
    );
}

/// The agent commits its edit (`git commit` in a sandboxed command): undo restores the file
/// and says the commit stays, with the command that takes it back, in the CLI, its dry run,
/// and (through the agent core) the model's next note. Before, undo said nothing of it and the
/// user was left with HEAD at the agent's commit and its change reversed in the worktree.
#[test]
fn undo_after_an_agent_commit_says_the_commit_stays_and_how_to_drop_it() {
    use crate::support::{MockEngine, MockReply, Script};
    let env = crate::support::env::Env::new();
    let ws = std::fs::canonicalize(&env.workspace).unwrap();
    let git = |args: &[&str]| env.git(args);
    git(&["init", "-q"]);
    std::fs::write(ws.join("setup.py"), "base\n").unwrap();
    git(&["add", "setup.py"]);
    git(&["commit", "-qm", "base"]);
    let base = git(&["rev-parse", "HEAD"]);
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .route("L2")
            .answer(
                "L2",
                MockReply::tool_call(
                    "c1",
                    "shell",
                    r#"{"command":"echo change >> setup.py && git add setup.py && git -c user.name=a -c user.email=a@a -c commit.gpgsign=false commit -qm agent-commit"}"#,
                ),
            )
            .answer("L2", "Committed."),
    );
    let out = env
        .exec(&engine, "change and commit", &["--approval", "full-auto"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let agent = git(&["rev-parse", "HEAD"]);
    assert_ne!(agent, base, "the agent's command committed");
    let undo = |args: &[&str]| {
        let out = env.session_baton().arg("undo").args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let note = format!(
        "also moved the git HEAD from {} to {}",
        &base[..12],
        &agent[..12]
    );
    let dry = undo(&["--dry-run"]);
    assert!(dry.contains(&note), "{dry}");
    let done = undo(&[]);
    assert!(done.contains("restored setup.py"), "{done}");
    assert!(done.contains(&note), "{done}");
    assert!(
        done.contains(&format!("`git reset {}`", &base[..12])),
        "{done}"
    );
    // The files are back; the commit is the user's to drop, and the command given does it.
    assert_eq!(std::fs::read(ws.join("setup.py")).unwrap(), b"base\n");
    assert_eq!(git(&["rev-parse", "HEAD"]), agent);
    git(&["reset", "-q", &base[..12]]);
    assert_eq!(git(&["status", "--porcelain"]), "");
}
