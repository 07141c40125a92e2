//! Escape tests for undo and checkpoints: planted refs, swapped symlinks, unsnapshotted files, the user's own edits.
//!
//! Each test runs real turns of the real binary (`baton --exec` against the mock engine, the
//! model's tool calls doing the damage), plays the attacker with real processes (`git`, `sh`)
//! in a real `git init` workspace, and then runs `baton undo` as the user would.

use std::path::{Path, PathBuf};
use std::process::Command as Std;

use serde_json::json;

use crate::support::env::Env;
use crate::support::{MockEngine, MockReply, Script};

/// A folder outside every writable root, holding the "outside" the attacks aim at.
fn outside() -> tempfile::TempDir {
    tempfile::tempdir_in(crate::support::outside::fixture_base()).expect("outside dir")
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Std::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn sh(dir: &Path, script: &str) {
    let out = Std::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(out.status.success(), "{script}: {out:?}");
}

/// A workspace that is its own git repository with `files` committed.
fn repo_with(env: &Env, files: &[(&str, &str)]) {
    git(&env.workspace, &["init", "-q"]);
    for (path, content) in files {
        let p = env.workspace.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    git(&env.workspace, &["add", "-A"]);
    git(&env.workspace, &["commit", "-qm", "initial"]);
}

fn shell_call(id: &str, command: &str) -> Vec<MockReply> {
    vec![MockReply::tool_call(
        id,
        "shell",
        json!({ "command": command }).to_string(),
    )]
}

/// `read_file` then `write_file` of `path` (an existing file must be read before it is
/// overwritten; for a new file the read just fails).
fn write_call(id: &str, path: &str, content: &str) -> Vec<MockReply> {
    vec![
        MockReply::tool_call(
            format!("{id}-read"),
            "read_file",
            json!({ "path": path }).to_string(),
        ),
        MockReply::tool_call(
            id,
            "write_file",
            json!({ "path": path, "content": content }).to_string(),
        ),
    ]
}

/// Runs one turn whose model makes `calls`, then answers "done".
fn turn(env: &Env, calls: Vec<Vec<MockReply>>) {
    let mut script = Script::new().default_route("L2");
    for call in calls.into_iter().flatten() {
        script = script.answer("L2", call);
    }
    let engine = MockEngine::scripted_blocking(script.answer("L2", "done"));
    let out = env
        .exec(&engine, "change the files", &["--approval", "full-auto"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `baton undo ARGS`; returns (exit code, stdout + stderr).
fn undo(env: &Env, args: &[&str]) -> (i32, String) {
    let out = env
        .session_baton()
        .arg("undo")
        .args(args)
        .output()
        .expect("undo");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

/// The raw bytes of a tree object with these (mode, name, hex id) entries, names unchecked.
fn raw_tree(entries: &[(&str, &str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (mode, name, hex) in entries {
        out.extend_from_slice(format!("{mode} {name}\0").as_bytes());
        let id: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        out.extend_from_slice(&id);
    }
    out
}

/// `git hash-object --literally`: writes any object, however malformed its names.
fn write_literally(repo: &Path, kind: &str, bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = Std::new("git")
        .args(["hash-object", "-w", "--literally", "-t", kind, "--stdin"])
        .current_dir(repo)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("git hash-object");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The path from `from` up to `/` and down to `to`, as tree entries: `..` names, then `to`'s.
fn climb(from: &Path, to: &Path) -> Vec<String> {
    let ups = from.components().count() - 1;
    let mut names: Vec<String> = vec!["..".to_string(); ups];
    names.extend(
        to.components()
            .skip(1)
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    names
}

/// Nests `leaf` (mode, id) under the names of `path`, innermost last; returns the root tree.
fn nest(repo: &Path, path: &[String], leaf_mode: &str, leaf_id: &str) -> String {
    let (last, dirs) = path.split_last().unwrap();
    let mut id = write_literally(repo, "tree", &raw_tree(&[(leaf_mode, last, leaf_id)]));
    for name in dirs.iter().rev() {
        id = write_literally(repo, "tree", &raw_tree(&[("40000", name, &id)]));
    }
    id
}

#[test]
fn planted_checkpoint_ref_cannot_write_outside_the_workspace() {
    let env = Env::new();
    let out = outside();
    let victim = out.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("keep.txt"), "the user's outside file\n").unwrap();
    repo_with(&env, &[("a.txt", "original\n")]);
    turn(
        &env,
        vec![write_call("c1", "a.txt", "changed by the turn\n")],
    );
    assert_eq!(read(env.workspace.join("a.txt")), "changed by the turn\n");

    // The attacker (any command of a turn: `.git/refs` and `.git/objects` are writable)
    // plants a checkpoint dated in the future whose tree climbs out of the workspace: a new
    // file outside, and a blob where a real outside folder is.
    let ws = std::fs::canonicalize(&env.workspace).unwrap();
    let payload = write_literally(&ws, "blob", b"written by the attacker\n");
    let mut to_new = climb(&ws, out.path());
    to_new.push("planted.txt".into());
    let mut to_victim = climb(&ws, out.path());
    to_victim.push("victim".into());
    let tree_new = nest(&ws, &to_new, "100644", &payload);
    let tree_victim = nest(&ws, &to_victim, "100644", &payload);
    // Two top-level ".." trees merged into one root is not a valid tree; one root per entry,
    // each planted under its own ref, both newer than the real checkpoint.
    for (n, tree) in [tree_new, tree_victim].iter().enumerate() {
        let commit = Std::new("git")
            .args(["commit-tree", tree, "-m", "baton checkpoint: planted"])
            .current_dir(&ws)
            .env("GIT_AUTHOR_NAME", "a")
            .env("GIT_AUTHOR_EMAIL", "a@a")
            .env("GIT_COMMITTER_NAME", "a")
            .env("GIT_COMMITTER_EMAIL", "a@a")
            .env(
                "GIT_COMMITTER_DATE",
                format!("2099-01-0{} 00:00:00 +0000", n + 1),
            )
            .env("GIT_AUTHOR_DATE", "2099-01-01 00:00:00 +0000")
            .output()
            .unwrap();
        assert!(commit.status.success(), "{commit:?}");
        let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
        git(
            &ws,
            &[
                "update-ref",
                &format!("refs/baton/checkpoints/zzz-planted/{}", n + 1),
                &commit,
            ],
        );
    }

    // The user undoes twice (the planted refs were "newest" to the old undo, twice over).
    let (_, first) = undo(&env, &[]);
    let (_, second) = undo(&env, &[]);
    assert_eq!(
        read(victim.join("keep.txt")),
        "the user's outside file\n",
        "undo removed an outside folder: {first}{second}"
    );
    assert!(
        !out.path().join("planted.txt").exists(),
        "undo wrote outside the workspace: {first}{second}"
    );
    // The real checkpoint, named by the session file, is the one undone.
    assert_eq!(read(env.workspace.join("a.txt")), "original\n", "{first}");
}

#[test]
fn a_directory_swapped_for_a_symlink_during_the_turn_is_restored_not_followed() {
    let env = Env::new();
    let out = outside();
    std::fs::write(out.path().join("f.txt"), "outside content\n").unwrap();
    std::fs::write(out.path().join("other.txt"), "outside other\n").unwrap();
    repo_with(&env, &[("d/f.txt", "original\n")]);
    let target = out.path().display().to_string();
    turn(
        &env,
        vec![shell_call(
            "c1",
            &format!("echo changed > d/f.txt && mv d d.orig && ln -s '{target}' d"),
        )],
    );
    assert!(env.workspace.join("d").is_symlink());

    let (code, text) = undo(&env, &[]);
    assert_eq!(
        read(out.path().join("f.txt")),
        "outside content\n",
        "{text}"
    );
    assert_eq!(
        read(out.path().join("other.txt")),
        "outside other\n",
        "{text}"
    );
    assert_eq!(code, 0, "{text}");
    let d = env.workspace.join("d");
    assert!(
        !d.is_symlink() && d.is_dir(),
        "d/ must be a folder again: {text}"
    );
    assert_eq!(read(d.join("f.txt")), "original\n", "{text}");
    assert!(!env.workspace.join("d.orig").exists(), "{text}");
}

#[test]
fn a_symlink_swapped_in_after_the_turn_is_never_followed_by_undo() {
    let env = Env::new();
    let out = outside();
    std::fs::write(out.path().join("f.txt"), "outside content\n").unwrap();
    std::fs::write(out.path().join("new.txt"), "created by the turn\n").unwrap();
    repo_with(&env, &[("d/f.txt", "original\n"), ("n/keep.txt", "k\n")]);
    turn(
        &env,
        vec![
            write_call("c1", "d/f.txt", "changed\n"),
            write_call("c2", "n/new.txt", "created by the turn\n"),
        ],
    );
    assert_eq!(read(env.workspace.join("d/f.txt")), "changed\n");
    // A process left running (or anyone) swaps both folders for links to the outside, where
    // the files look exactly like what the turn left.
    let target = out.path().display().to_string();
    sh(
        &env.workspace,
        &format!("mv d d.orig && ln -s '{target}' d && mv n n.orig && ln -s '{target}' n"),
    );

    let (_, text) = undo(&env, &[]);
    assert_eq!(
        read(out.path().join("f.txt")),
        "outside content\n",
        "{text}"
    );
    assert_eq!(
        read(out.path().join("new.txt")),
        "created by the turn\n",
        "undo deleted an outside file through a symlink: {text}"
    );
    assert!(env.workspace.join("d").is_symlink(), "{text}");
}

#[test]
fn files_too_large_to_snapshot_are_not_deleted_by_undo() {
    let env = Env::new();
    repo_with(&env, &[("a.txt", "a\n")]);
    // Bigger than the snapshot cap, untracked: not in the checkpoint.
    let big = env.workspace.join("data.bin");
    std::fs::write(&big, vec![b'x'; 11 * 1024 * 1024]).unwrap();
    turn(
        &env,
        vec![shell_call(
            "c1",
            "echo changed > a.txt && head -c 100 data.bin > t && mv t data.bin",
        )],
    );
    let (_, text) = undo(&env, &[]);
    assert!(big.exists(), "undo deleted a file it never saved: {text}");
    assert_eq!(std::fs::metadata(&big).unwrap().len(), 100, "{text}");
    assert_eq!(read(env.workspace.join("a.txt")), "a\n", "{text}");
}

#[test]
fn unreadable_files_are_not_deleted_by_undo() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new();
    repo_with(&env, &[("a.txt", "a\n")]);
    // Unreadable to baton when it runs as an ordinary user (root reads it, and saves it).
    let secret = env.workspace.join("secret.txt");
    std::fs::write(&secret, "the user's secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    turn(&env, vec![write_call("c1", "a.txt", "changed\n")]);
    assert_eq!(read(env.workspace.join("a.txt")), "changed\n");
    let (_, text) = undo(&env, &[]);
    assert!(
        secret.exists(),
        "undo deleted a file it could not read: {text}"
    );
    assert_eq!(read(env.workspace.join("a.txt")), "a\n", "{text}");
}

#[test]
fn undo_keeps_the_users_later_edits_and_new_files_and_can_be_redone() {
    let env = Env::new();
    repo_with(
        &env,
        &[
            ("a.txt", "a original\n"),
            ("b.txt", "b original\n"),
            ("c.txt", "c original\n"),
        ],
    );
    turn(
        &env,
        vec![
            write_call("c1", "a.txt", "a by the turn\n"),
            write_call("c2", "b.txt", "b by the turn\n"),
            write_call("c3", "t.txt", "created by the turn\n"),
        ],
    );
    assert_eq!(read(env.workspace.join("t.txt")), "created by the turn\n");
    assert_eq!(read(env.workspace.join("b.txt")), "b by the turn\n");
    // After the turn, the user edits a file the turn changed, one it did not, and adds one.
    std::fs::write(env.workspace.join("b.txt"), "b by the user\n").unwrap();
    std::fs::write(env.workspace.join("c.txt"), "c by the user\n").unwrap();
    std::fs::write(env.workspace.join("u.txt"), "the user's new file\n").unwrap();

    // The plan first: nothing changes.
    let (code, plan) = undo(&env, &["--dry-run"]);
    assert_eq!(code, 0, "{plan}");
    assert!(plan.contains("restore  a.txt"), "{plan}");
    assert!(plan.contains("remove   t.txt"), "{plan}");
    assert!(plan.contains("keep     b.txt"), "{plan}");
    assert!(!plan.contains("c.txt") && !plan.contains("u.txt"), "{plan}");
    assert_eq!(read(env.workspace.join("a.txt")), "a by the turn\n");

    let (_, text) = undo(&env, &[]);
    assert_eq!(read(env.workspace.join("a.txt")), "a original\n", "{text}");
    assert!(!env.workspace.join("t.txt").exists(), "{text}");
    assert_eq!(
        read(env.workspace.join("b.txt")),
        "b by the user\n",
        "{text}"
    );
    assert_eq!(
        read(env.workspace.join("c.txt")),
        "c by the user\n",
        "{text}"
    );
    assert_eq!(
        read(env.workspace.join("u.txt")),
        "the user's new file\n",
        "{text}"
    );
    assert!(
        text.contains("b.txt") && text.contains("changed since"),
        "{text}"
    );

    // The undo can be undone: the turn's changes come back, the user's stay.
    let (code, text) = undo(&env, &["--redo"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        read(env.workspace.join("a.txt")),
        "a by the turn\n",
        "{text}"
    );
    assert_eq!(
        read(env.workspace.join("t.txt")),
        "created by the turn\n",
        "{text}"
    );
    assert_eq!(
        read(env.workspace.join("b.txt")),
        "b by the user\n",
        "{text}"
    );
    assert_eq!(
        read(env.workspace.join("u.txt")),
        "the user's new file\n",
        "{text}"
    );

    // And the checkpoint is still there: undo again, this time overriding the conflict.
    let (code, text) = undo(&env, &["--force"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(read(env.workspace.join("b.txt")), "b original\n", "{text}");
    assert_eq!(
        read(env.workspace.join("u.txt")),
        "the user's new file\n",
        "{text}"
    );
    // --force overwrote the user's b.txt, and redo brings that back too.
    let (_, text) = undo(&env, &["--redo"]);
    assert_eq!(
        read(env.workspace.join("b.txt")),
        "b by the user\n",
        "{text}"
    );
}

#[test]
fn the_session_folder_inside_the_workspace_is_never_snapshotted_or_reverted() {
    let env = Env::new();
    repo_with(&env, &[("a.txt", "a\n")]);
    // `--session-dir` pointing into the workspace: the session file changes during the turn.
    let sessions: PathBuf = env.workspace.join("sessions-here");
    let engine = MockEngine::scripted_blocking(
        Script::new()
            .default_route("L2")
            .answer("L2", write_call("c1", "a.txt", "changed\n").remove(0))
            .answer("L2", write_call("c1", "a.txt", "changed\n").remove(1))
            .answer("L2", "done"),
    );
    let out = env
        .baton()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["--session-dir"])
        .arg(&sessions)
        .args([
            "--exec",
            "--endpoint",
            &engine.url(),
            "--approval",
            "full-auto",
        ])
        .arg("change a")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(read(env.workspace.join("a.txt")), "changed\n");
    let session_file = std::fs::read_dir(&sessions)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .expect("session file");
    let before = read(&session_file);
    let out = env
        .baton()
        .arg("--session-dir")
        .arg(&sessions)
        .arg("undo")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let after = read(&session_file);
    assert!(
        after.starts_with(&before),
        "undo rewrote the session file: {text}"
    );
    assert_eq!(read(env.workspace.join("a.txt")), "a\n", "{text}");
}

#[test]
fn undo_works_in_a_workspace_without_git() {
    let env = Env::new();
    std::fs::write(env.workspace.join("a.txt"), "a\n").unwrap();
    turn(
        &env,
        vec![
            write_call("c1", "a.txt", "changed\n"),
            write_call("c2", "new/b.txt", "b\n"),
        ],
    );
    assert_eq!(read(env.workspace.join("new/b.txt")), "b\n");
    assert_eq!(read(env.workspace.join("a.txt")), "changed\n");
    let (code, text) = undo(&env, &[]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(read(env.workspace.join("a.txt")), "a\n", "{text}");
    assert!(!env.workspace.join("new").exists(), "{text}");
    assert!(!env.workspace.join(".git").exists());
}

#[test]
fn undo_prints_paths_through_the_sanitizer() {
    let env = Env::new();
    repo_with(&env, &[("a.txt", "a\n")]);
    let evil = "x\u{1b}]0;pwned\u{7}\u{1b}[2J.txt";
    turn(
        &env,
        vec![shell_call(
            "c1",
            "touch \"$(printf 'x\\033]0;pwned\\007\\033[2J.txt')\"",
        )],
    );
    assert!(env.workspace.join(evil).exists());
    let (code, text) = undo(&env, &["--dry-run"]);
    assert_eq!(code, 0, "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    let (_, text) = undo(&env, &[]);
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}'),
        "{text:?}"
    );
    assert!(!env.workspace.join(evil).exists(), "{text:?}");
}

#[test]
fn a_file_named_like_git_cannot_make_the_turn_that_made_it_impossible_to_undo() {
    // libgit2 refuses index paths it takes for `.git` on some filesystem (`.GIT`, `git~1`,
    // `.git.`): a turn that wrecks the files and leaves one behind failed its closing snapshot,
    // recorded no checkpoint, and so could not be undone (nor could any turn after it while
    // the file stayed).
    let env = Env::new();
    repo_with(&env, &[("a.txt", "a\n"), ("src/lib.rs", "fn main() {}\n")]);
    turn(
        &env,
        vec![shell_call(
            "c1",
            "echo wrecked > a.txt && rm -r src && touch .GIT 'git~1' && mkdir .Git && echo x > .Git/config",
        )],
    );
    assert_eq!(read(env.workspace.join("a.txt")), "wrecked\n");
    let (code, text) = undo(&env, &[]);
    assert_eq!(read(env.workspace.join("a.txt")), "a\n", "{text}");
    assert_eq!(
        read(env.workspace.join("src/lib.rs")),
        "fn main() {}\n",
        "{text}"
    );
    assert_eq!(code, 0, "{text}");
    // What no snapshot could hold is never touched.
    assert!(env.workspace.join("git~1").exists(), "{text}");
    assert!(env.workspace.join(".GIT").exists(), "{text}");
}

/// A file the user keeps out of git with `.git/info/exclude` or the global excludes file
/// (`~/.config/git/ignore`) was never in a snapshot. A turn that un-ignores it with a
/// `.gitignore` whitelist makes it appear in the closing snapshot as if the turn had created it;
/// undo must still leave it alone: it was there before, and nothing saved it.
#[test]
fn a_file_unignored_by_the_turn_is_not_deleted_by_undo() {
    let env = Env::new();
    repo_with(&env, &[("a.txt", "a\n")]);
    std::fs::write(env.workspace.join(".git/info/exclude"), "notes.md\n").unwrap();
    let global = env.home.join(".config/git");
    std::fs::create_dir_all(&global).unwrap();
    std::fs::write(global.join("ignore"), ".env.local\n").unwrap();
    std::fs::write(env.workspace.join("notes.md"), "the user's notes\n").unwrap();
    std::fs::write(env.workspace.join(".env.local"), "TOKEN=the user's\n").unwrap();
    turn(
        &env,
        vec![
            write_call("c1", "a.txt", "changed\n"),
            write_call("c2", ".gitignore", "!notes.md\n!.env.local\n"),
        ],
    );
    let (_, text) = undo(&env, &[]);
    assert_eq!(read(env.workspace.join("a.txt")), "a\n", "{text}");
    assert!(
        !env.workspace.join(".gitignore").exists(),
        "the turn's .gitignore stayed: {text}"
    );
    for name in ["notes.md", ".env.local"] {
        assert!(
            env.workspace.join(name).exists(),
            "undo deleted {name}, which no snapshot held: {text}"
        );
    }
}

/// Red team finding 14: a turn that replaces a file, or a folder, with a FIFO defeated undo
/// ("changed while undo ran", "(no file was changed)") and used the turn up, so after the FIFO
/// was gone `baton undo` said "nothing to undo" while the content sat in the store. A FIFO,
/// socket or device node holds no data: undo replaces it. Non-git workspace, as reported.
#[test]
fn files_and_folders_replaced_by_fifos_are_restored_by_undo() {
    let env = Env::new();
    std::fs::write(env.workspace.join("notes.txt"), "precious user notes\n").unwrap();
    std::fs::create_dir(env.workspace.join("d")).unwrap();
    std::fs::write(env.workspace.join("d/b.txt"), "b\n").unwrap();
    turn(
        &env,
        vec![shell_call(
            "c1",
            "rm notes.txt && mkfifo notes.txt && rm -r d && mkfifo d",
        )],
    );
    let (code, text) = undo(&env, &[]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(
        read(env.workspace.join("notes.txt")),
        "precious user notes\n",
        "{text}"
    );
    assert_eq!(read(env.workspace.join("d/b.txt")), "b\n", "{text}");
}

/// An undo that could do nothing (the user's file with data stands where the turn removed a
/// folder, which undo never overwrites) is not recorded: once the user moves the file away,
/// the same undo works.
#[test]
fn an_undo_that_did_nothing_does_not_use_up_the_turn() {
    let env = Env::new();
    std::fs::create_dir(env.workspace.join("d")).unwrap();
    std::fs::write(env.workspace.join("d/b.txt"), "b\n").unwrap();
    turn(&env, vec![shell_call("c1", "rm -r d")]);
    std::fs::write(env.workspace.join("d"), "data\n").unwrap();
    let (code, text) = undo(&env, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("can still be undone"), "{text}");
    std::fs::rename(env.workspace.join("d"), env.workspace.join("d.mine")).unwrap();
    let (code, text) = undo(&env, &[]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(read(env.workspace.join("d/b.txt")), "b\n", "{text}");
    assert_eq!(read(env.workspace.join("d.mine")), "data\n");
}

/// Red team round 7, finding 02: undo wrote, in baton's own unsandboxed process, a hook into
/// the `core.hooksPath` folder of the user's global git config, which git then ran on the
/// next commit. Undo and redo obey the write rules the file tools obey, worked out when undo
/// applies: here the hooks folder is only named (in `~/.gitconfig`) after the turn, so the
/// snapshots hold `.githooks/pre-commit` as an ordinary file. The step is refused and said to
/// be, in the dry run and when applied (with `--force` too); the rest of the turn is undone.
#[test]
fn undo_never_restores_a_hook_into_the_hooks_folder_git_runs() {
    let env = Env::new();
    repo_with(&env, &[("a.txt", "a\n")]);
    let hooks = env.workspace.join(".githooks");
    std::fs::create_dir(&hooks).unwrap();
    let hook = hooks.join("pre-commit");
    std::fs::write(&hook, "#!/bin/sh\ntouch \"$(pwd)/HOOK_RAN\"\n").unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    turn(
        &env,
        vec![
            write_call("c1", "a.txt", "changed\n"),
            shell_call("c2", "rm .githooks/pre-commit"),
        ],
    );
    assert!(!hook.exists(), "the turn removed the hook");
    // The user's global git config names the hooks folder (relative: of the work tree).
    std::fs::write(
        env.home.join(".gitconfig"),
        "[user]\n\tname = t\n\temail = t@t\n[core]\n\thooksPath = .githooks\n",
    )
    .unwrap();

    let (_, plan) = undo(&env, &["--dry-run"]);
    let line = plan
        .lines()
        .find(|l| l.contains(".githooks/pre-commit"))
        .unwrap_or_else(|| panic!("the dry run does not mention the hook: {plan}"));
    assert!(line.trim_start().starts_with("refuse"), "{plan}");
    assert!(line.contains("protected"), "{plan}");

    let (code, text) = undo(&env, &[]);
    assert!(
        !hook.exists(),
        "undo wrote a hook into the folder git runs hooks from: {text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains(".githooks/pre-commit"))
        .unwrap_or_else(|| panic!("undo does not report the hook: {text}"));
    assert!(line.contains("refused"), "{text}");
    assert_eq!(code, 1, "a refused step is not done: {text}");
    assert_eq!(read(env.workspace.join("a.txt")), "a\n", "{text}");

    // Nor with --force, nor by a redo and a second undo.
    let (_, text) = undo(&env, &["--force"]);
    assert!(!hook.exists(), "{text}");
    let (_, text) = undo(&env, &["--redo"]);
    assert!(!hook.exists(), "{text}");
    let (_, text) = undo(&env, &["--force"]);
    assert!(!hook.exists(), "{text}");

    // git, as the user runs it, finds no hook to run.
    let out = Std::new("git")
        .args(["commit", "-q", "--allow-empty", "-m", "t"])
        .current_dir(&env.workspace)
        .env("HOME", &env.home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git");
    assert!(out.status.success(), "{out:?}");
    assert!(!env.workspace.join("HOOK_RAN").exists());
}
