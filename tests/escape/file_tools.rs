//! Escape tests for file tools: races, special files and huge files.
//!
//! Each test plays a hostile model (tool calls) together with a hostile command (a concurrent
//! process or thread that rearranges the workspace between the tools' path check and their use
//! of the path) and asserts that nothing outside the workspace is written, overwritten, deleted
//! or left behind, and that no file in the workspace can hang a turn or exhaust memory.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use baton::protocol::{EventSink, ToolStatus};
use baton::tool::registry::standard_tools;
use baton::tool::{ToolContext, ToolResult, ToolState};
use serde_json::{Value, json};

struct Workspace {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ctx: ToolContext,
}

fn workspace() -> Workspace {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (events, _rx) = EventSink::channel();
    let ctx = ToolContext {
        workspace: root.clone(),
        call_id: "call-1".into(),
        events,
        cancel: Default::default(),
        state: Arc::new(ToolState::default()),
    };
    Workspace {
        _dir: dir,
        root,
        ctx,
    }
}

async fn call(ctx: &ToolContext, tool: &str, args: Value) -> ToolResult {
    standard_tools().get(tool).unwrap().run(args, ctx).await
}

/// [`call`] given 10 s; `None` when it was still held then, after playing the writer a hostile
/// command never provides on each of `fifos`, so that the held reader returns and the test
/// can end.
async fn call_unless_held(
    ctx: &ToolContext,
    tool: &str,
    args: Value,
    fifos: &[PathBuf],
) -> Option<ToolResult> {
    use std::os::unix::fs::OpenOptionsExt;
    let run = call(ctx, tool, args);
    let result = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .ok();
    if result.is_none() {
        for fifo in fifos {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(fifo);
        }
    }
    result
}

/// A fresh "outside" directory. Run as an unprivileged user, the fixture base (the build's
/// target dir) may not be writable: then the user's own cache, fixture_base's next candidate.
fn outside_dir(name: &str) -> tempfile::TempDir {
    let builder = || {
        let mut b = tempfile::Builder::new();
        b.prefix(name);
        b
    };
    builder()
        .tempdir_in(crate::support::outside::fixture_base())
        .or_else(|_| {
            let home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
            let base = home.join(".cache/baton-tests");
            std::fs::create_dir_all(&base)?;
            builder().tempdir_in(base)
        })
        .unwrap()
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// Every file under `dir` with its content, sorted.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            (name, bytes)
        })
        .collect();
    out.sort();
    out
}

/// The attacker: swaps the names `a` and `b` with `renameat2(RENAME_EXCHANGE)` as fast as it can
/// until `stop` is set. Returns how many swaps it made.
pub(super) fn swap_forever(
    a: PathBuf,
    b: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    swap_forever_repairing(a, b, stop, || {})
}

/// [`swap_forever`], calling `repair` after each swap that failed (to put back what the
/// defender moved aside).
pub(super) fn swap_forever_repairing(
    a: PathBuf,
    b: PathBuf,
    stop: Arc<AtomicBool>,
    repair: impl Fn() + Send + 'static,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let (a, b) = (cstring(&a), cstring(&b));
        let mut swaps = 0usize;
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
            let rc = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            if rc == 0 {
                swaps += 1;
            } else {
                repair();
            }
        }
        swaps
    })
}

/// A directory `d` of the workspace and a symlink `l` to an outside directory swap names in a
/// tight loop while the model writes new files into `d`, overwrites and deletes files there
/// with `apply_patch`, and adds files with `apply_patch`. The outside directory holds files
/// of the same names. Nothing outside may change, and no temp file may be left there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_symlink_swap_race_cannot_write_or_delete_outside_the_workspace() {
    const ROUNDS: usize = 150;
    let ws = workspace();
    let outside = outside_dir("race-outside-");
    let d = ws.root.join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..ROUNDS {
        std::fs::write(d.join(format!("victim{i}")), "inside\n").unwrap();
        std::fs::write(d.join(format!("upd{i}")), "line\n").unwrap();
        std::fs::write(outside.path().join(format!("victim{i}")), "outside\n").unwrap();
        std::fs::write(outside.path().join(format!("upd{i}")), "line\n").unwrap();
        std::fs::write(outside.path().join(format!("w{i}.txt")), "outside\n").unwrap();
    }
    std::os::unix::fs::symlink(outside.path(), ws.root.join("l")).unwrap();
    let before = snapshot(outside.path());

    let stop = Arc::new(AtomicBool::new(false));
    let attacker = swap_forever(d.clone(), ws.root.join("l"), stop.clone());
    let refused = AtomicUsize::new(0);
    for i in 0..ROUNDS {
        let results = [
            call(
                &ws.ctx,
                "write_file",
                json!({"path": format!("d/w{i}.txt"), "content": "model\n"}),
            )
            .await,
            call(
                &ws.ctx,
                "apply_patch",
                json!({"input": format!(
                    "*** Begin Patch\n*** Add File: d/a{i}\n+model\n*** Delete File: d/victim{i}\n\
                     *** Update File: d/upd{i}\n-line\n+model\n*** End Patch\n"
                )}),
            )
            .await,
        ];
        for r in &results {
            if r.status != ToolStatus::Ok {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = attacker.join().unwrap();

    let after = snapshot(outside.path());
    let changed: Vec<String> = before
        .iter()
        .filter(|entry| !after.contains(entry))
        .map(|(name, _)| format!("changed or deleted: {name}"))
        .chain(
            after
                .iter()
                .filter(|(name, _)| !before.iter().any(|(b, _)| b == name))
                .map(|(name, _)| format!("created: {name}")),
        )
        .collect();
    println!(
        "race: {swaps} swaps, {} of {} tool calls refused, {} outside changes",
        refused.load(Ordering::Relaxed),
        2 * ROUNDS,
        changed.len()
    );
    assert!(swaps > 0, "the attacker never swapped");
    assert!(
        changed.is_empty(),
        "{} changes outside the workspace:\n{}",
        changed.len(),
        changed.join("\n")
    );
}

/// The same race against `edit` and a move done by `apply_patch` (`*** Move to:`), whose
/// destination directory is the one being swapped: the moved file must land inside.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_symlink_swap_race_cannot_redirect_edits_or_moves_outside() {
    const ROUNDS: usize = 100;
    let ws = workspace();
    let outside = outside_dir("race-move-outside-");
    let d = ws.root.join("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::create_dir(ws.root.join("src")).unwrap();
    for i in 0..ROUNDS {
        std::fs::write(ws.root.join(format!("src/m{i}")), "move me\n").unwrap();
        std::fs::write(d.join(format!("e{i}")), "old text\n").unwrap();
        std::fs::write(outside.path().join(format!("e{i}")), "old text\n").unwrap();
    }
    std::os::unix::fs::symlink(outside.path(), ws.root.join("l")).unwrap();
    let before = snapshot(outside.path());
    for i in 0..ROUNDS {
        // The model has read each file, so `edit` is allowed to change it.
        call(&ws.ctx, "read_file", json!({"path": format!("d/e{i}")})).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = swap_forever(d.clone(), ws.root.join("l"), stop.clone());
    for i in 0..ROUNDS {
        call(
            &ws.ctx,
            "edit",
            json!({"path": format!("d/e{i}"), "old_string": "old text", "new_string": "model"}),
        )
        .await;
        call(
            &ws.ctx,
            "apply_patch",
            json!({"input": format!(
                "*** Begin Patch\n*** Update File: src/m{i}\n*** Move to: d/moved{i}\n\
                 -move me\n+moved\n*** End Patch\n"
            )}),
        )
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    attacker.join().unwrap();
    let after = snapshot(outside.path());
    let changed: Vec<&String> = after
        .iter()
        .filter(|entry| !before.contains(entry))
        .map(|(name, _)| name)
        .collect();
    assert!(
        changed.is_empty() && before.len() == after.len(),
        "{} files outside the workspace created or changed: {changed:?}",
        changed.len()
    );
}

/// A FIFO in the workspace: opening it for reading blocks until a writer comes, which a
/// hostile command never provides. Every file tool must answer at once with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_in_the_workspace_cannot_hang_a_file_tool() {
    let ws = workspace();
    let fifo = ws.root.join("pipe");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(cstring(&fifo).as_ptr(), 0o644) }, 0);
    // The model "read" it first so write_file and edit get past the unread check.
    let calls = [
        ("read_file", json!({"path": "pipe"})),
        ("write_file", json!({"path": "pipe", "content": "x"})),
        (
            "edit",
            json!({"path": "pipe", "old_string": "a", "new_string": "b"}),
        ),
        (
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Update File: pipe\n-a\n+b\n*** End Patch\n"}),
        ),
        (
            "apply_patch",
            json!({"input": "*** Begin Patch\n*** Delete File: pipe\n*** End Patch\n"}),
        ),
        ("grep", json!({"pattern": "x", "path": "pipe"})),
        ("grep", json!({"pattern": "x"})),
        ("list_dir", json!({"path": "."})),
    ];
    let mut hung = Vec::new();
    for (tool, args) in calls {
        match call_unless_held(&ws.ctx, tool, args.clone(), std::slice::from_ref(&fifo)).await {
            Some(result) => {
                if tool == "read_file" || tool == "write_file" || tool == "edit" {
                    assert_eq!(
                        result.status,
                        ToolStatus::Error,
                        "{tool}: {}",
                        result.content
                    );
                    assert!(
                        result.content.contains("FIFO"),
                        "{tool} should say it is a FIFO: {}",
                        result.content
                    );
                }
            }
            None => hung.push(format!("{tool} {args}")),
        }
    }
    assert!(
        std::fs::symlink_metadata(&fifo).is_ok(),
        "the FIFO was removed"
    );
    assert!(hung.is_empty(), "file tools hung on a FIFO: {hung:?}");
}

/// Round 26 (medium): a command's `mkfifo sub/.gitignore` held baton's process for good at
/// the next `list_dir`, `glob`, `grep` or `outline` (the `ignore` crate's walker opens every
/// folder's ignore files by name) and at every later session's start (libgit2's status). A
/// walk leaves such a folder out; one rooted under it, and git's status, diff and commit,
/// are refused with a clear error. A `.gitignore` leading to `/proc/kmsg` (regular to `stat`,
/// its read waits for the kernel's next message) is treated alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_among_the_ignore_files_holds_no_walk_and_no_git_look() {
    let ws = workspace();
    let git = std::process::Command::new("git")
        .args(["init", "-q", "."])
        .current_dir(&ws.root)
        .status()
        .expect("git init");
    assert!(git.success());
    std::fs::create_dir_all(ws.root.join("sub")).unwrap();
    std::fs::create_dir_all(ws.root.join("attr")).unwrap();
    std::fs::write(ws.root.join("sub/a.txt"), "hi\n").unwrap();
    std::fs::write(ws.root.join("top.rs"), "fn hi() {}\n").unwrap();
    // A kernel file looks regular and waits in its read (as root): the same.
    std::fs::create_dir_all(ws.root.join("kmsg")).unwrap();
    std::fs::write(ws.root.join("kmsg/b.txt"), "hi\n").unwrap();
    std::os::unix::fs::symlink("/proc/kmsg", ws.root.join("kmsg/.gitignore")).unwrap();
    let fifos = [
        ws.root.join("sub/.gitignore"),
        ws.root.join("attr/.gitattributes"),
    ];
    for fifo in &fifos {
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(cstring(fifo).as_ptr(), 0o644) }, 0);
    }
    let calls = [
        ("list_dir", json!({"path": "."}), true),
        ("glob", json!({"pattern": "**/*.txt"}), true),
        ("grep", json!({"pattern": "hi"}), true),
        ("outline", json!({"path": "."}), true),
        ("list_dir", json!({"path": "sub"}), false),
        ("grep", json!({"pattern": "hi", "path": "sub"}), false),
        ("git", json!({"action": "status"}), false),
        ("git", json!({"action": "diff"}), false),
        ("git", json!({"action": "commit", "message": "m"}), false),
    ];
    let mut hung = Vec::new();
    for (tool, args, answers) in calls {
        match call_unless_held(&ws.ctx, tool, args.clone(), &fifos).await {
            Some(result) if answers => {
                assert_eq!(
                    result.status,
                    ToolStatus::Ok,
                    "{tool} {args}: {}",
                    result.content
                );
                assert!(
                    !result.content.contains("a.txt") && !result.content.contains("b.txt"),
                    "{tool}: {}",
                    result.content
                );
            }
            Some(result) => {
                assert_eq!(
                    result.status,
                    ToolStatus::Error,
                    "{tool} {args}: {}",
                    result.content
                );
                assert!(
                    result.content.contains("is not a regular file"),
                    "{tool} {args}: {}",
                    result.content
                );
            }
            None => hung.push(format!("{tool} {args}")),
        }
    }
    assert!(hung.is_empty(), "walks or git hung on a FIFO: {hung:?}");
    // In the gitdir, which libgit2 opens by name: the index a command made a FIFO.
    for fifo in &fifos {
        std::fs::remove_file(fifo).unwrap();
    }
    std::fs::remove_file(ws.root.join("kmsg/.gitignore")).unwrap();
    let index = ws.root.join(".git/index");
    let _ = std::fs::remove_file(&index);
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(cstring(&index).as_ptr(), 0o644) }, 0);
    let status = json!({"action": "status"});
    let result = call_unless_held(&ws.ctx, "git", status, std::slice::from_ref(&index))
        .await
        .expect("git status held by a FIFO index");
    assert!(
        result.status == ToolStatus::Error && result.content.contains(".git/index"),
        "{}",
        result.content
    );
}

/// Sockets and (as root) device nodes in the workspace are refused with a clear error rather
/// than read or replaced.
#[tokio::test]
async fn sockets_and_device_files_in_the_workspace_are_refused() {
    let ws = workspace();
    let _listener = std::os::unix::net::UnixListener::bind(ws.root.join("sock")).unwrap();
    let mut special = vec!["sock"];
    let null = cstring(&ws.root.join("null"));
    // SAFETY: a valid path; makedev(1, 3) is /dev/null. Fails without CAP_MKNOD, which is fine.
    if unsafe { libc::mknod(null.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0 {
        special.push("null");
    }
    for name in special {
        let read = call(&ws.ctx, "read_file", json!({"path": name})).await;
        assert_eq!(read.status, ToolStatus::Error, "{name}: {}", read.content);
        assert!(
            read.content.contains("not a regular file"),
            "{name}: {}",
            read.content
        );
        let write = call(&ws.ctx, "write_file", json!({"path": name, "content": "x"})).await;
        assert_eq!(write.status, ToolStatus::Error, "{name}: {}", write.content);
        let meta = std::fs::symlink_metadata(ws.root.join(name)).unwrap();
        assert!(!meta.is_file(), "{name} was replaced by a regular file");
    }
}

/// Size of the hostile file: 384 MiB, no newline (sparse, so it costs no disk).
const HUGE_FILE_BYTES: u64 = 384 << 20;
/// The scan bound the child sets: read_file's own 1 GiB would cost the test 5 s a GiB for
/// nothing more; what matters is that it reads past a bound far above the RSS limit.
const HUGE_SCAN_BYTES: u64 = 256 << 20;
/// The most a `read_file` child process may use (peak RSS) to read it: half the line it scans.
const HUGE_READ_RSS_LIMIT_KIB: i64 = 128 << 10;
const HUGE_FILE_ENV: &str = "BATON_ESCAPE_HUGE_FILE";

/// A 384 MiB file whose first 8 KiB are text and which holds no newline: reading it line by
/// line must not hold the whole "line" in memory. The read runs in a child process (this test
/// binary, re-run on the helper below) so its peak RSS can be measured alone.
#[test]
fn read_file_of_a_huge_file_without_newlines_uses_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.txt");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&[b'a'; 8192]).unwrap();
        f.set_len(HUGE_FILE_BYTES).unwrap();
    }
    let exe = std::env::current_exe().unwrap();
    // Reaped by the wait4 below, which also returns the child's own peak RSS.
    #[allow(clippy::zombie_processes)]
    let child = std::process::Command::new(exe)
        .args([
            "--exact",
            "escape::file_tools::huge_read_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HUGE_FILE_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data, zero-initialised; pid is our own child, waited once.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid);
    let mut stdout = String::new();
    if let Some(mut out) = child.stdout {
        use std::io::Read;
        out.read_to_string(&mut stdout).unwrap();
    }
    // The child's own high-water mark after its exec: ru_maxrss also counts the moments
    // before the exec, when the child still maps this test process, whose size depends on what
    // the other tests of the run hold (470 MB was seen with 6 test threads).
    let peak_kib: i64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(usage.ru_maxrss);
    println!("read_file of a {HUGE_FILE_BYTES}-byte line: peak RSS {peak_kib} KiB");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed ({status}): {stdout}"
    );
    assert!(
        stdout.contains(
            "huge.txt (lines 1-1 of at least 1: read_file stopped after the first 256 MiB"
        ),
        "unexpected read_file output: {stdout}"
    );
    assert!(
        peak_kib < HUGE_READ_RSS_LIMIT_KIB,
        "read_file held {peak_kib} KiB at its peak (limit {HUGE_READ_RSS_LIMIT_KIB} KiB)"
    );
}

/// The child half of the test above: reads the file named by the environment and prints the
/// head of the result. Ignored, so it runs only when the parent asks for it.
#[test]
#[ignore = "run by read_file_of_a_huge_file_without_newlines_uses_bounded_memory"]
fn huge_read_child() {
    let Some(path) = std::env::var_os(HUGE_FILE_ENV) else {
        return;
    };
    let path = PathBuf::from(path);
    let root = path.parent().unwrap().canonicalize().unwrap();
    let (events, _rx) = EventSink::channel();
    let state = ToolState {
        limits: baton::tool::ToolLimits {
            read_scan_bytes: HUGE_SCAN_BYTES,
        },
        ..Default::default()
    };
    let ctx = ToolContext {
        workspace: root,
        call_id: "huge".into(),
        events,
        cancel: Default::default(),
        state: Arc::new(state),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = runtime.block_on(call(&ctx, "read_file", json!({"path": "huge.txt"})));
    assert_eq!(result.status, ToolStatus::Ok, "{}", result.content);
    let head: String = result.content.chars().take(200).collect();
    println!("{head}");
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    if let Some(hwm) = status.lines().find(|l| l.starts_with("VmHWM:")) {
        println!("{hwm}");
    }
}

/// A sparse terabyte whose first 8 KiB are text and which holds no newline: read to its end,
/// it kept the turn busy for minutes (the whole line had to be passed to find line 2). The
/// read stops after its scan bound and says so; a line past that bound is refused with a
/// pointer to the shell.
#[tokio::test]
async fn read_file_of_a_sparse_terabyte_stops_after_its_scan_bound() {
    let mut ws = workspace();
    // A bound the test can afford (the default 1 GiB is read at 5 s a GiB in a debug build).
    ws.ctx.state = Arc::new(ToolState {
        limits: baton::tool::ToolLimits {
            read_scan_bytes: 64 << 20,
        },
        ..Default::default()
    });
    let path = ws.root.join("tera.txt");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(&[b'a'; 8192]).unwrap();
        if let Err(e) = f.set_len(1 << 40) {
            crate::support::external::skip(&format!(
                "this file system holds no sparse terabyte ({e})"
            ));
            return;
        }
    }
    let first = call(&ws.ctx, "read_file", json!({"path": "tera.txt"})).await;
    assert_eq!(first.status, ToolStatus::Ok, "{}", first.content);
    assert!(
        first
            .content
            .starts_with("tera.txt (lines 1-1 of at least 1: read_file stopped after the first 64 MiB of 1099511627776 bytes)"),
        "{}",
        first.content.chars().take(300).collect::<String>()
    );
    let past = call(
        &ws.ctx,
        "read_file",
        json!({"path": "tera.txt", "offset": 2}),
    )
    .await;
    assert_eq!(past.status, ToolStatus::Error, "{}", past.content);
    assert!(
        past.content.contains("line 2 is not in the first 64 MiB")
            && past.content.contains("shell"),
        "{}",
        past.content
    );
}

/// Paths the sandbox protects inside the workspace (git hooks and config, and whatever else
/// the policy lists) are refused to `write_file` and `apply_patch`, also through a symlink
/// the model plants inside the workspace.
#[tokio::test]
async fn protected_paths_are_refused_to_file_tools() {
    let ws = workspace();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&ws.root)
        .status();
    if !git.is_ok_and(|s| s.success()) {
        return;
    }
    std::fs::create_dir_all(ws.root.join(".git/hooks")).unwrap();
    let policy =
        baton::sandbox::SandboxPolicy::new(baton::protocol::SandboxMode::WorkspaceWrite, &ws.root);
    let protected = policy.protected_paths();
    assert!(!protected.is_empty(), "the policy protects nothing here");
    std::os::unix::fs::symlink(".git", ws.root.join("g")).unwrap();
    for path in protected {
        let rel = path.strip_prefix(&ws.root).unwrap();
        let target = if path.is_dir() {
            rel.join("planted")
        } else {
            rel.to_path_buf()
        };
        let before = std::fs::read(ws.root.join(&target)).ok();
        let via_link = Path::new("g").join(target.strip_prefix(".git").unwrap_or(&target));
        for shown in [target.clone(), via_link] {
            let shown = shown.to_string_lossy().into_owned();
            let write = call(
                &ws.ctx,
                "write_file",
                json!({"path": shown, "content": "[core]\nfsmonitor = evil\n"}),
            )
            .await;
            assert_eq!(
                write.status,
                ToolStatus::Error,
                "{shown}: {}",
                write.content
            );
            let patch = call(
                &ws.ctx,
                "apply_patch",
                json!({"input": format!(
                    "*** Begin Patch\n*** Add File: {shown}.new\n+x\n*** End Patch\n"
                )}),
            )
            .await;
            assert_eq!(
                patch.status,
                ToolStatus::Error,
                "{shown}: {}",
                patch.content
            );
        }
        assert_eq!(std::fs::read(ws.root.join(&target)).ok(), before);
    }
}

/// A regular file and a symlink to an outside secret swap names in a tight loop while the
/// model reads and greps the file: the secret must never reach the model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_symlink_swap_race_cannot_read_outside_through_read_file_or_grep() {
    const ROUNDS: usize = 150;
    let ws = workspace();
    let outside = outside_dir("race-secret-");
    std::fs::write(outside.path().join("secret"), "SECRET-7f3a outside\n").unwrap();
    std::fs::write(ws.root.join("f"), "inside\n").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), ws.root.join("s")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let attacker = swap_forever(ws.root.join("f"), ws.root.join("s"), stop.clone());
    let mut leaks = 0usize;
    for _ in 0..ROUNDS {
        let read = call(&ws.ctx, "read_file", json!({"path": "f"})).await;
        let grep = call(&ws.ctx, "grep", json!({"pattern": "SECRET"})).await;
        leaks += [read, grep]
            .iter()
            .filter(|r| r.content.contains("SECRET-7f3a"))
            .count();
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = attacker.join().unwrap();
    println!(
        "read race: {swaps} swaps, {leaks} of {} results leaked",
        2 * ROUNDS
    );
    assert_eq!(
        leaks, 0,
        "the outside secret reached the model {leaks} times"
    );
}

/// Hostile arguments and names: an offset at the top of the integer range, a file whose name
/// is not UTF-8 reached through a symlink, and a binary file: each gets an answer, none a
/// panic.
#[tokio::test]
async fn hostile_offsets_names_and_binary_files_get_answers_not_panics() {
    let ws = workspace();
    std::fs::write(ws.root.join("a.txt"), "one\ntwo\n").unwrap();
    let read = call(
        &ws.ctx,
        "read_file",
        json!({"path": "a.txt", "offset": u64::MAX, "limit": u64::MAX}),
    )
    .await;
    assert_eq!(read.status, ToolStatus::Error, "{}", read.content);
    assert!(read.content.contains("past the end"), "{}", read.content);
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(ws.root.join(odd), "latin-1 name\n").unwrap();
    std::os::unix::fs::symlink(odd, ws.root.join("link.txt")).unwrap();
    let read = call(&ws.ctx, "read_file", json!({"path": "link.txt"})).await;
    assert_eq!(read.status, ToolStatus::Ok, "{}", read.content);
    assert!(read.content.contains("latin-1 name"), "{}", read.content);
    let write = call(
        &ws.ctx,
        "write_file",
        json!({"path": "link.txt", "content": "replaced\n"}),
    )
    .await;
    assert_eq!(write.status, ToolStatus::Ok, "{}", write.content);
    assert_eq!(
        std::fs::read(ws.root.join(odd)).unwrap(),
        b"replaced\n",
        "the write did not reach the file the link names"
    );
    std::fs::write(ws.root.join("bin"), [0u8, 159, 146, 150, 0, 1]).unwrap();
    let read = call(&ws.ctx, "read_file", json!({"path": "bin"})).await;
    assert_eq!(read.status, ToolStatus::Error, "{}", read.content);
    assert!(read.content.contains("binary"), "{}", read.content);
}

/// Whether Landlock confines a thread here: without it the walks run unconfined, as before,
/// and the tests of their confinement are skipped, loudly.
fn landlock_here() -> bool {
    std::thread::spawn(|| baton::sandbox::confine_thread(&[], &[]))
        .join()
        .is_ok_and(|r| r.is_ok_and(|enforced| enforced))
}

/// Counts the opens (inotify `IN_OPEN`) of a folder and of the files in it: whether a walk
/// reached the folder, whatever its output shows.
struct OpenWatch {
    fd: std::os::fd::OwnedFd,
}

impl OpenWatch {
    fn new(dir: &Path) -> OpenWatch {
        use std::os::fd::FromRawFd;
        // SAFETY: no pointer is passed; the descriptor returned is owned here.
        let raw = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            raw >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: `raw` was just returned by inotify_init1 and nothing else owns it.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        // SAFETY: a valid NUL-terminated path and a descriptor we own.
        let wd = unsafe { libc::inotify_add_watch(raw, cstring(dir).as_ptr(), libc::IN_OPEN) };
        assert!(
            wd >= 0,
            "inotify_add_watch: {}",
            std::io::Error::last_os_error()
        );
        OpenWatch { fd }
    }

    /// The opens seen since the last call.
    fn opens(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut opens = 0;
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            let Ok(n) = usize::try_from(n) else {
                return opens;
            };
            let mut at = 0;
            while at + 16 <= n {
                // struct inotify_event: wd, mask, cookie, len, then `len` bytes of name.
                let mask = u32::from_ne_bytes(buf[at + 4..at + 8].try_into().unwrap());
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap());
                if mask & libc::IN_OPEN != 0 {
                    opens += 1;
                }
                at += 16 + len as usize;
            }
        }
    }
}

/// Holds the next opener of one file until the test lets it go: fanotify's permission event
/// for opens (`FAN_OPEN_PERM`), which keeps the opening thread in the kernel until it is
/// answered. Needs CAP_SYS_ADMIN (root); `None` elsewhere. Opens not asked to be held are
/// allowed at once by a thread of its own.
struct OpenHold {
    hold_next: Arc<AtomicBool>,
    held: std::sync::mpsc::Receiver<(i32, std::sync::mpsc::Sender<()>)>,
    stop: Arc<AtomicBool>,
}

impl OpenHold {
    fn of(file: &Path) -> Option<OpenHold> {
        // SAFETY: flags only; the descriptor returned is owned by the thread below.
        let fd = unsafe {
            libc::fanotify_init(
                libc::FAN_CLASS_CONTENT | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK,
                libc::O_RDONLY as u32,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just returned; the path is a valid NUL-terminated string.
        let marked = unsafe {
            libc::fanotify_mark(
                fd,
                libc::FAN_MARK_ADD,
                libc::FAN_OPEN_PERM,
                libc::AT_FDCWD,
                cstring(file).as_ptr(),
            )
        };
        if marked < 0 {
            // SAFETY: `fd` is ours and not used after.
            unsafe { libc::close(fd) };
            return None;
        }
        let hold_next = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, held) = std::sync::mpsc::channel();
        let (next, done) = (hold_next.clone(), stop.clone());
        std::thread::spawn(move || {
            let answer = |event_fd: i32| {
                let response = libc::fanotify_response {
                    fd: event_fd,
                    response: libc::FAN_ALLOW,
                };
                // SAFETY: writes one response struct to our fanotify descriptor; closes the
                // event's descriptor, which the kernel gave to us.
                unsafe {
                    libc::write(
                        fd,
                        (&response as *const libc::fanotify_response).cast(),
                        std::mem::size_of::<libc::fanotify_response>(),
                    );
                    libc::close(event_fd);
                }
            };
            while !done.load(Ordering::SeqCst) {
                let mut event = std::mem::MaybeUninit::<libc::fanotify_event_metadata>::zeroed();
                // SAFETY: reads at most one event's metadata into memory we own.
                let n = unsafe {
                    libc::read(
                        fd,
                        event.as_mut_ptr().cast(),
                        std::mem::size_of::<libc::fanotify_event_metadata>(),
                    )
                };
                if n < std::mem::size_of::<libc::fanotify_event_metadata>() as isize {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                // SAFETY: the kernel filled the whole struct (n checked above).
                let event = unsafe { event.assume_init() };
                if next.swap(false, Ordering::SeqCst) {
                    let (let_go, wait) = std::sync::mpsc::channel();
                    if tx.send((event.pid, let_go)).is_ok() {
                        let _ = wait.recv();
                    }
                }
                answer(event.fd);
            }
            // SAFETY: `fd` is ours and not used after.
            unsafe { libc::close(fd) };
        });
        Some(OpenHold {
            hold_next,
            held,
            stop,
        })
    }

    /// Holds the next open: call it before whatever opens the file starts.
    fn hold_next_open(&self) {
        self.hold_next.store(true, Ordering::SeqCst);
    }

    /// Waits (up to 30 s) for the held open, and returns what lets it go.
    fn held_open(&self) -> Option<std::sync::mpsc::Sender<()>> {
        let held = self.held.recv_timeout(Duration::from_secs(30)).ok();
        held.map(|(_, let_go)| let_go)
    }
}

impl Drop for OpenHold {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn exchange(a: &Path, b: &Path) {
    // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cstring(a).as_ptr(),
            libc::AT_FDCWD,
            cstring(b).as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    assert_eq!(rc, 0, "exchange: {}", std::io::Error::last_os_error());
}

/// A name outside the workspace, and a line of a file there, that no tool may show.
const OUTSIDE_MARK: &str = "7f3a";

/// A pattern for the outside line that does not itself hold [`OUTSIDE_MARK`] (grep's answer
/// repeats it).
const GREP_OUTSIDE: &str = "SECRET-7f3[a]";

/// The outside folder a swapped folder leads to: a source file whose name and lines carry
/// [`OUTSIDE_MARK`].
fn outside_with_a_secret(prefix: &str) -> tempfile::TempDir {
    let outside = outside_dir(prefix);
    std::fs::write(
        outside.path().join(format!("outside-{OUTSIDE_MARK}.rs")),
        format!("fn outside_{OUTSIDE_MARK}() {{}}\n// SECRET-{OUTSIDE_MARK}\n"),
    )
    .unwrap();
    outside
}

/// A folder of the workspace swapped for a link to an outside folder in the middle of a walk,
/// made deterministic: the walk is held in its open of a folder's `.gitignore` (the `ignore`
/// walker opens it when it enters the folder; fanotify keeps the open waiting, so root only)
/// after it listed the folder holding the targets and before it descends into them; the
/// targets are swapped for links then, and the walk let go. Before the walks were confined, `list_dir`, `glob` and `outline` listed the
/// outside file's name and all four opened the outside folder. Each of `list_dir`, `glob`,
/// `grep` and `outline` must neither show it nor open anything there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_swapped_for_a_link_mid_walk_is_not_walked() {
    if !landlock_here() {
        eprintln!("no Landlock on this kernel: the walks run unconfined; not checked");
        return;
    }
    let ws = workspace();
    let outside = outside_with_a_secret("walk-outside-");
    let stash = ws.root.join("stash");
    std::fs::create_dir(&stash).unwrap();
    for name in ["a", "b", "c", "d"] {
        std::fs::create_dir(ws.root.join(name)).unwrap();
        std::fs::write(ws.root.join(name).join("inside.rs"), "fn inside() {}\n").unwrap();
    }
    // The held folder: the first of them in the order the walkers read the workspace, so the
    // others come after it (the sequential walkers read a folder's entries at once, then
    // descend by path). Its own subfolder `t` serves the walkers that descend from the
    // entries they listed before they read the folder's ignore files (the sorted one of
    // `list_dir`, grep's parallel one).
    let held = std::fs::read_dir(&ws.root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n != "stash")
        .unwrap();
    let gitignore = ws.root.join(&held).join(".gitignore");
    std::fs::write(&gitignore, "*.tmp\n").unwrap();
    let Some(hold) = OpenHold::of(&gitignore) else {
        eprintln!("fanotify's permission events need root: the walk cannot be held; not checked");
        return;
    };
    std::fs::create_dir(ws.root.join(&held).join("t")).unwrap();
    let mut targets = vec![ws.root.join(&held).join("t")];
    targets.extend(
        ["a", "b", "c", "d"]
            .iter()
            .filter(|n| **n != held)
            .map(|n| ws.root.join(n)),
    );
    let links: Vec<PathBuf> = (0..targets.len())
        .map(|i| {
            let link = stash.join(format!("l{i}"));
            std::os::unix::fs::symlink(outside.path(), &link).unwrap();
            link
        })
        .collect();
    let watch = OpenWatch::new(outside.path());

    let calls = [
        ("list_dir", json!({"path": ".", "depth": 4})),
        ("glob", json!({"pattern": "*.rs"})),
        ("grep", json!({"pattern": GREP_OUTSIDE})),
        ("outline", json!({"path": "."})),
    ];
    let mut failures = Vec::new();
    for (tool, args) in calls {
        let ctx = ws.ctx.clone();
        // Armed before the call starts: its walk may open the file at once.
        hold.hold_next_open();
        let run = tokio::spawn(async move { call(&ctx, tool, args).await });
        let let_go = tokio::task::block_in_place(|| hold.held_open());
        let Some(let_go) = let_go else {
            panic!(
                "{tool} never opened the .gitignore in {held}: this test's way of holding \
                 the walk is gone; hold it some other way"
            );
        };
        for (target, link) in targets.iter().zip(&links) {
            exchange(target, link);
        }
        let _ = let_go.send(());
        let result = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .unwrap_or_else(|_| panic!("{tool} hung"))
            .unwrap();
        for (target, link) in targets.iter().zip(&links) {
            exchange(target, link);
        }
        let opens = watch.opens();
        println!(
            "{tool}: {opens} opens outside; {}",
            result.content.replace('\n', " | ")
        );
        if result.content.contains(OUTSIDE_MARK) {
            failures.push(format!(
                "{tool} showed the outside file: {}",
                result.content
            ));
        }
        if opens > 0 {
            failures.push(format!("{tool} opened the outside folder {opens} times"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The same swap raced for real: a folder and a link to an outside folder swap names in a
/// tight loop for about 2 s while the model lists, globs, greps and outlines the workspace.
/// Nothing outside may be shown or opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_symlink_swap_race_cannot_list_or_search_outside() {
    if !landlock_here() {
        eprintln!("no Landlock on this kernel: the walks run unconfined; not checked");
        return;
    }
    let ws = workspace();
    let outside = outside_with_a_secret("walk-race-outside-");
    let d = ws.root.join("d");
    std::fs::create_dir(&d).unwrap();
    std::fs::write(d.join("inside.rs"), "fn inside() {}\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.root.join("l")).unwrap();
    let watch = OpenWatch::new(outside.path());

    let stop = Arc::new(AtomicBool::new(false));
    let attacker = swap_forever(d.clone(), ws.root.join("l"), stop.clone());
    let calls = [
        ("list_dir", json!({"path": ".", "depth": 3})),
        ("list_dir", json!({"path": "d"})),
        ("glob", json!({"pattern": "*.rs"})),
        ("grep", json!({"pattern": GREP_OUTSIDE})),
        ("outline", json!({"path": "."})),
    ];
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    let (mut rounds, mut leaks) = (0usize, Vec::new());
    while std::time::Instant::now() < deadline {
        for (tool, args) in &calls {
            let result = call(&ws.ctx, tool, args.clone()).await;
            if result.content.contains(OUTSIDE_MARK) {
                leaks.push(format!("{tool} {args}: {}", result.content));
            }
        }
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = attacker.join().unwrap();
    let opens = watch.opens();
    println!(
        "walk race: {swaps} swaps, {rounds} rounds of {} calls, {} leaks, {opens} opens outside",
        calls.len(),
        leaks.len()
    );
    assert!(swaps > 0, "the attacker never swapped");
    assert!(
        leaks.is_empty(),
        "{} results showed the outside folder:\n{}",
        leaks.len(),
        leaks.join("\n")
    );
    assert_eq!(opens, 0, "the walks opened the outside folder");
}
