//! Sandbox-escape suite: every attempt must fail closed. Runs real commands through
//! `baton::sandbox::sandboxed_command` (the same launch path the shell tool uses). When the
//! kernel can't enforce the sandbox, the suite asserts the refusal instead, and says so.

use crate::support::{external, outside};

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};

use baton::protocol::SandboxMode;
use baton::sandbox::{SandboxPolicy, Session, probe, sandboxed_command};

struct Outcome {
    code: i32,
    out: String,
}

fn run_in(policy: &SandboxPolicy, script: &str) -> Outcome {
    let argv = vec!["bash".to_string(), "-c".to_string(), script.to_string()];
    let (mut cmd, _guard) =
        sandboxed_command(policy, &argv, Session::NewGroup).expect("sandbox prepares");
    let out = cmd
        .current_dir(&policy.workspace)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("spawn");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
    }
}

/// A workspace (a git repo) and an outside directory, both in a fresh temp dir.
struct Fixture {
    _root: tempfile::TempDir,
    ws: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let root = tempfile::Builder::new()
        .prefix("baton-sbx")
        .tempdir_in(outside::fixture_base())
        .expect("tempdir");
    let base = root.path().canonicalize().expect("canon");
    let ws = base.join("ws");
    let outside = base.join("outside");
    std::fs::create_dir_all(ws.join(".git/hooks")).expect("mkdir");
    std::fs::write(ws.join(".git/config"), "[core]\n").expect("config");
    std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::create_dir_all(&outside).expect("mkdir");
    std::fs::write(outside.join("victim.txt"), "original\n").expect("victim");
    Fixture {
        _root: root,
        ws,
        outside,
    }
}

/// True when this kernel enforces the sandbox; otherwise asserts the refusal path and prints it.
fn enforceable_or_refusal_checked() -> bool {
    let support = probe();
    if support.enforceable {
        return true;
    }
    eprintln!(
        "SANDBOX NOT ENFORCEABLE ON THIS KERNEL — asserting refusal instead:\n{}",
        support.report().join("\n")
    );
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    let Err(err) = sandboxed_command(&policy, &["true".into()], Session::NewGroup) else {
        panic!("an unenforceable sandbox must refuse");
    };
    assert!(err.to_string().contains("refusing"), "{err}");
    external::skip("the sandbox is not enforceable here (its refusal was checked)");
    false
}

fn victim_untouched(f: &Fixture) {
    let text = std::fs::read_to_string(f.outside.join("victim.txt")).expect("victim");
    assert_eq!(
        text, "original\n",
        "a file outside the workspace was modified"
    );
}

#[test]
fn writes_inside_the_workspace_and_tmp_succeed() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    let o = run_in(
        &policy,
        "echo hi > inside.txt && mkdir -p sub/dir && echo x > sub/dir/f && \
         t=$(mktemp) && echo tmp > \"$t\" && rm \"$t\" && echo > /dev/null && echo ok",
    );
    assert_eq!(o.code, 0, "{}", o.out);
    assert_eq!(
        std::fs::read_to_string(f.ws.join("inside.txt")).unwrap(),
        "hi\n"
    );
}

#[test]
fn writes_outside_the_workspace_fail_closed() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let victim = f.outside.join("victim.txt");
    std::os::unix::fs::symlink(&victim, f.ws.join("link-to-victim")).expect("symlink");
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    let v = victim.display();
    let attempts = [
        format!("echo pwned > {v}"),
        "echo pwned > ../outside/victim.txt".to_string(),
        "echo pwned > link-to-victim".to_string(),
        "ln -s ../outside/victim.txt l2 && echo pwned > l2".to_string(),
        format!("ln {v} hardlink && echo pwned > hardlink"),
        "echo pwned > /proc/self/cwd/../outside/victim.txt".to_string(),
        format!("rm {v}"),
        format!("mv {v} ./stolen.txt"),
        format!("truncate -s 0 {v}"),
        format!("echo new > {}/created.txt", f.outside.display()),
        "echo pwned > /etc/baton-sandbox-test".to_string(),
    ];
    for a in &attempts {
        let o = run_in(&policy, a);
        assert_ne!(o.code, 0, "escape attempt succeeded: {a}");
        victim_untouched(&f);
    }
    assert!(!f.outside.join("created.txt").exists());
    assert!(!Path::new("/etc/baton-sandbox-test").exists());
}

#[test]
fn read_only_mode_allows_only_temp_writes() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::ReadOnly, &f.ws);
    let o = run_in(&policy, "echo x > in-ws.txt");
    assert_ne!(o.code, 0);
    assert!(!f.ws.join("in-ws.txt").exists());
    let o = run_in(
        &policy,
        "cat .git/HEAD && t=$(mktemp) && echo y > $t && rm $t && echo done",
    );
    assert_eq!(o.code, 0, "{}", o.out);
    assert!(o.out.contains("ref: refs/heads/main") && o.out.contains("done"));
}

#[test]
fn git_hooks_and_config_stay_read_only() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    let attempts = [
        "echo evil > .git/hooks/pre-commit",
        "echo '[core] hooksPath=/tmp' >> .git/config",
        "rm .git/config",
        "mv .git/hooks .git/hooks-old",
        "mv .git .git-old",
        "rm -rf .git/hooks",
        "cp .git/config /tmp/c && mv /tmp/c .git/config",
    ];
    for a in attempts {
        let o = run_in(&policy, a);
        assert_ne!(o.code, 0, "git protection bypassed: {a}");
    }
    assert!(!f.ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(f.ws.join(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(f.ws.join(".git/hooks").is_dir());
    // The rest of .git stays writable (refs, objects, index).
    let o = run_in(
        &policy,
        "echo ref > .git/HEAD.new && mv .git/HEAD.new .git/HEAD2",
    );
    assert_eq!(o.code, 0, "{}", o.out);
}

#[test]
fn network_is_denied_unless_allowed() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected >&3 && echo OK");
    let off = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    let o = run_in(&off, &script);
    assert_ne!(o.code, 0, "connected with network off: {}", o.out);
    assert!(listener.accept().is_err(), "the listener saw a connection");
    // UNIX sockets keep working (many tools use socketpair IPC).
    let o = run_in(
        &off,
        "python3 -c 'import socket; a,b=socket.socketpair(); a.send(b\"u\"); print(b.recv(1))' || echo no-python",
    );
    assert!(
        o.out.contains("b'u'") || o.out.contains("no-python"),
        "{}",
        o.out
    );

    let on = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws).network(true);
    let o = run_in(&on, &script);
    assert_eq!(o.code, 0, "network on must connect: {}", o.out);
    listener.set_nonblocking(false).unwrap();
    let (mut s, _) = listener.accept().expect("accept");
    let mut got = String::new();
    s.read_to_string(&mut got).unwrap();
    assert_eq!(got, "connected\n");
}

#[test]
fn ptrace_of_a_sibling_is_denied() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    let o = run_in(
        &policy,
        "sleep 30 & pid=$!; python3 - $pid <<'PY'\n\
import ctypes, sys\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
r = libc.ptrace(16, int(sys.argv[1]), 0, 0)\n\
print('ptrace', r, ctypes.get_errno())\n\
PY\nkill $pid",
    );
    assert!(
        o.out.contains("ptrace -1 1"),
        "ptrace was not denied with EPERM: {}",
        o.out
    );
}

/// Forks up to 200 sleeping children and reports how many forks succeeded.
const FORK_BOMB: &str = r#"
import os, time
n = 0
for i in range(200):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        os.close(1)
        os.close(2)
        time.sleep(30)
        os._exit(0)
    n += 1
print('started', n, flush=True)
"#;

#[test]
fn a_fork_bomb_is_bounded() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    assert_the_fork_bomb_is_bounded(0);
}

/// Where RLIMIT_NPROC is the bound (an unprivileged user without a delegated pids cgroup),
/// baton sets it with headroom for what the user runs when the command is prepared; inside the
/// command's user namespace only its own tasks count, so processes of the user that end
/// before the command runs used to widen the bound by their number (72–80 under a bound of 64).
#[test]
fn a_fork_bomb_is_bounded_after_other_processes_of_the_user_end() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    assert_the_fork_bomb_is_bounded(40);
}

/// Runs the fork bomb under a bound of 64 with `ending` other processes of this user alive
/// while the command is prepared and gone before it runs.
fn assert_the_fork_bomb_is_bounded(ending: usize) {
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws).max_processes(64);
    let mut others: Vec<std::process::Child> = (0..ending)
        .map(|_| {
            Command::new("sleep")
                .arg("30")
                .stdin(Stdio::null())
                .spawn()
                .expect("sleep")
        })
        .collect();
    let (mut cmd, guard) = sandboxed_command(
        &policy,
        &["python3".into(), "-c".into(), FORK_BOMB.into()],
        Session::NewGroup,
    )
    .expect("prepare");
    if let Some(why) = guard.unenforced_bound() {
        panic!("process bound not enforceable here: {why}");
    }
    for o in &mut others {
        let _ = o.kill();
        let _ = o.wait();
    }
    let out = cmd
        .current_dir(&f.ws)
        .stdin(Stdio::null())
        .output()
        .expect("spawn");
    eprintln!("stderr: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let started: u32 = text
        .trim()
        .strip_prefix("started ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {text}"));
    assert!(
        started > 0 && started < 64,
        "{started} processes started with a bound of 64 ({ending} other processes ended \
         before the command ran)"
    );
    drop(guard);
}

#[test]
fn no_new_privs_and_seccomp_are_in_force() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::ReadOnly, &f.ws);
    let o = run_in(
        &policy,
        "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status",
    );
    assert!(o.out.contains("NoNewPrivs:\t1"), "{}", o.out);
    assert!(o.out.contains("Seccomp:\t2"), "{}", o.out);
    // io_uring would bypass the per-syscall checks: io_uring_setup (425) must fail with EPERM.
    let o = run_in(
        &policy,
        "python3 -c 'import ctypes as c; l = c.CDLL(None, use_errno=True); \
         p = (c.c_byte * 120)(); print(\"uring\", l.syscall(425, 1, p), c.get_errno())'",
    );
    assert!(
        o.out.contains("uring -1 1"),
        "io_uring not denied: {}",
        o.out
    );
}

#[test]
fn sandbox_off_runs_unrestricted() {
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::Off, &f.ws);
    let o = run_in(
        &policy,
        &format!("echo changed > {}/victim.txt", f.outside.display()),
    );
    assert_eq!(o.code, 0);
    assert_eq!(
        std::fs::read_to_string(f.outside.join("victim.txt")).unwrap(),
        "changed\n"
    );
}

/// Binary-level check of `baton sandbox`.
#[test]
fn baton_sandbox_subcommand_denies_outside_writes() {
    let f = fixture();
    let status = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["sandbox", "--"])
        .args(["bash", "-c"])
        .arg(format!("echo pwned > {}/victim.txt", f.outside.display()))
        .current_dir(&f.ws)
        .status()
        .expect("run baton");
    assert_ne!(status.code(), Some(0));
    victim_untouched(&f);
    let status = Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["sandbox", "--", "true"])
        .current_dir(&f.ws)
        .status()
        .expect("run baton");
    assert_eq!(status.code(), Some(0));
}

/// A baton installed under /tmp (a checkout or download there) still finds its own helper
/// inside the sandbox, whose private /tmp covers the host's.
#[test]
fn a_baton_binary_under_tmp_still_runs_sandboxed_commands() {
    if !external::sandbox_enforceable("sandbox") {
        return;
    }
    let f = fixture();
    // Alone (baton is its own helper) and with the small helper beside it: either one lives
    // under the private /tmp that hides the host's copy, so it must be bound into the world.
    for with_helper in [false, true] {
        let dir = tempfile::Builder::new()
            .prefix("baton-bin")
            .tempdir_in("/tmp")
            .expect("tempdir in /tmp");
        let bin = dir.path().join("baton");
        let mut programs = vec![(env!("CARGO_BIN_EXE_baton"), bin.clone())];
        if with_helper {
            programs.push((
                env!("CARGO_BIN_EXE_baton-sandbox-inner"),
                dir.path().join("baton-sandbox-inner"),
            ));
        }
        for (from, to) in programs {
            copy_program(Path::new(from), &to);
        }
        let out = Command::new(&bin)
            .args(["sandbox", "--", "sh", "-c", "echo ran-inside"])
            .current_dir(&f.ws)
            .stdin(Stdio::null())
            .env_remove("BATON_SANDBOX_HELPER")
            .output()
            .expect("run baton sandbox");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("ran-inside"),
            "with helper {with_helper}: status {:?}\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_helper_program_beside_baton_is_the_one_bubblewrap_runs() {
    if !external::sandbox_enforceable("sandbox") {
        return;
    }
    let f = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("baton");
    copy_program(Path::new(env!("CARGO_BIN_EXE_baton")), &bin);
    // A stand-in that says it ran and fails: inside the world only the helper's own path is
    // bound, so it could not hand over to a real helper under a hidden /tmp anyway.
    let helper = dir.path().join("baton-sandbox-inner");
    std::fs::write(
        &helper,
        "#!/bin/sh\necho helper-beside-baton-ran >&2\nexit 42\n",
    )
    .expect("write helper");
    let status = Command::new("chmod")
        .arg("755")
        .arg(&helper)
        .status()
        .expect("chmod");
    assert!(status.success());
    let out = Command::new(&bin)
        .args(["sandbox", "--", "sh", "-c", "echo ran-inside"])
        .current_dir(&f.ws)
        .stdin(Stdio::null())
        .env_remove("BATON_SANDBOX_HELPER")
        .output()
        .expect("run baton sandbox");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(42)
            && stderr.contains("helper-beside-baton-ran")
            && !String::from_utf8_lossy(&out.stdout).contains("ran-inside"),
        "status {:?}\nstderr: {stderr}",
        out.status
    );
    // Run by hand, the helper says what it is for instead of running anything.
    let out = Command::new(env!("CARGO_BIN_EXE_baton-sandbox-inner"))
        .arg("ls")
        .output()
        .expect("run the helper by hand");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not meant to be run by hand"));
}

#[test]
fn a_sandboxed_command_dies_of_a_closed_pipe_instead_of_printing_broken_pipe() {
    if !external::sandbox_enforceable("sandbox") {
        return;
    }
    let f = fixture();
    // With the small helper beside baton, and with baton alone (its own helper, whose Rust
    // runtime ignores SIGPIPE: an ignored signal stays ignored across exec).
    let alone = tempfile::tempdir().expect("tempdir");
    let copy = alone.path().join("baton");
    copy_program(Path::new(env!("CARGO_BIN_EXE_baton")), &copy);
    for bin in [Path::new(env!("CARGO_BIN_EXE_baton")), copy.as_path()] {
        let out = Command::new(bin)
            .args([
                "sandbox",
                "--",
                "bash",
                "-c",
                "grep SigIgn /proc/self/status; yes | head -1 >/dev/null; echo \"yes: ${PIPESTATUS[0]}\"",
            ])
            .current_dir(&f.ws)
            .stdin(Stdio::null())
            .env_remove("BATON_SANDBOX_HELPER")
            .output()
            .expect("run baton sandbox");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let ignored = stdout
            .lines()
            .find_map(|l| l.strip_prefix("SigIgn:"))
            .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
            .unwrap_or_else(|| panic!("{}: no SigIgn line: {stdout}{stderr}", bin.display()));
        assert_eq!(
            ignored & (1 << (libc::SIGPIPE - 1)),
            0,
            "{}: SIGPIPE ignored: {stdout}",
            bin.display()
        );
        // Killed by SIGPIPE: 128 + 13.
        assert!(
            stdout.contains("yes: 141") && !stderr.contains("Broken pipe"),
            "{}: stdout: {stdout}\nstderr: {stderr}",
            bin.display()
        );
    }
}

use crate::support::env::copy_program;

/// `baton sandbox` starts bubblewrap without forking itself where it can (stdio not a
/// terminal, no rlimit to set): the inner helper then joins the command's cgroups through
/// the descriptors bubblewrap inherits, so the command still runs inside the bound baton made
/// for it. Its /tmp and /var/tmp are tmpfs mounts of its own (mode 1777), not host folders,
/// and a descriptor the caller left open still does not reach it.
#[test]
fn baton_sandbox_runs_its_command_in_its_cgroup_with_a_tmp_of_its_own() {
    if !external::sandbox_enforceable("sandbox") {
        return;
    }
    let env = crate::support::env::Env::new();
    std::fs::create_dir_all(env.workspace.join(".git/hooks")).expect("mkdir");
    std::fs::write(env.workspace.join(".git/config"), "[core]\n").expect("config");
    let marker = format!("left-by-{}", std::process::id());
    let script = format!(
        "grep -E ':(pids|memory):' /proc/self/cgroup; stat -c 'mode %a' /tmp /var/tmp; \
         grep -E ' /(var/)?tmp ' /proc/self/mounts; ls /proc/self/fd | tr '\\n' ' '; echo; \
         echo x > /tmp/{marker} && echo wrote"
    );
    let log = env.workspace.join("caller-log");
    let file = std::fs::File::create(&log).expect("log");
    // As `Env::baton` sets it up, on a std `Command` (the caller's descriptor needs a hook).
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
    cmd.env_clear()
        .env("HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.home.join(".config"))
        .env("XDG_DATA_HOME", env.home.join(".local/share"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(&env.workspace)
        .args(["sandbox", "--", "sh", "-c", &script])
        .stdin(Stdio::null());
    // The caller's fd 9, open without close-on-exec.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    // SAFETY: dup2 in the child before exec, onto a descriptor number it does not use.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            if libc::dup2(fd, 9) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run baton sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("wrote"), "{stdout}\n{stderr}");
    assert_eq!(stdout.matches("mode 1777").count(), 2, "{stdout}");
    assert!(
        stdout.contains("tmpfs /tmp tmpfs") && stdout.contains("tmpfs /var/tmp tmpfs"),
        "{stdout}"
    );
    assert!(!Path::new("/tmp").join(&marker).exists());
    let fds = stdout
        .lines()
        .find(|l| l.starts_with("0 1 2"))
        .unwrap_or_else(|| panic!("no descriptor list: {stdout}"));
    assert!(
        !fds.split_whitespace().any(|n| n == "9"),
        "fd 9 reached the command: {fds}"
    );
    // Where baton can make a pids cgroup for the command (as this test's user, with the same
    // policy), the command is in it.
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &env.workspace);
    let (_, guard) =
        sandboxed_command(&policy, &["true".into()], Session::NewGroup).expect("prepare");
    if guard.cgroup().is_some() {
        let pids = stdout
            .lines()
            .find(|l| l.contains(":pids:"))
            .unwrap_or_else(|| panic!("no pids line: {stdout}"));
        assert!(pids.contains("/baton-"), "not in baton's cgroup: {pids}");
    }
    drop(file);
}

#[test]
fn the_sandbox_reports_a_held_commands_end_with_its_status_before_its_own_exit() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    for (script, code) in [("exit 3", 3), ("kill -9 $$", 137), ("true", 0)] {
        let argv: Vec<String> = ["sh", "-c", script].map(String::from).into();
        let (mut cmd, guard, mut watch) =
            baton::sandbox::watched_command(&policy, &argv, Session::NewGroup)
                .expect("sandbox prepares");
        cmd.current_dir(&f.ws).stdin(Stdio::null());
        let mut child = guard.spawn_alone(&mut cmd).expect("spawn");
        watch.started();
        // Reported once the command's process has ended, as bubblewrap exits with it.
        assert_eq!(watch.ended(), Some(code), "{script}");
        assert_eq!(watch.ended(), Some(code), "asked again: {script}");
        assert_eq!(child.wait().expect("wait").code(), Some(code), "{script}");
    }
}

#[test]
fn a_held_command_runs_only_once_its_gate_opens_and_never_when_the_gate_is_dropped() {
    if !enforceable_or_refusal_checked() {
        return;
    }
    let f = fixture();
    let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws);
    let marker = f.ws.join("ran");
    let argv: Vec<String> = ["sh", "-c", "echo ran > ran"].map(String::from).into();
    let spawn = || {
        let (mut cmd, guard, watch) =
            baton::sandbox::watched_command(&policy, &argv, Session::NewGroup)
                .expect("sandbox prepares");
        cmd.current_dir(&f.ws).stdin(Stdio::null());
        let child = guard.spawn_alone(&mut cmd).expect("spawn");
        (child, guard, watch)
    };

    let (mut child, _guard, mut watch) = spawn();
    // bubblewrap builds the world in far less than this; the command must still wait.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "gone before the gate opened"
    );
    assert!(!marker.exists(), "the command ran before its gate opened");
    watch.started();
    assert!(child.wait().expect("wait").success());
    assert!(marker.exists(), "the command did not run once released");
    assert!(watch.audit().is_empty(), "{:?}", watch.audit());

    std::fs::remove_file(&marker).expect("rm marker");
    let (mut child, _guard, watch) = spawn();
    drop(watch);
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(126), "{status:?}");
    assert!(!marker.exists(), "a command whose gate was dropped ran");
}
