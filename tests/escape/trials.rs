//! Escape tests for evaluation trials: capabilities, mounts, network, secrets and the host files a task-controlled trial can reach.
//!
//! Each test writes a tiny Harbor task in a temp dir and plays the task's hostile side for
//! real: a `cmd:` agent, or the `baton` agent driven by the mock engine to run shell commands.
//! Trials run in bwrap (`--isolation bwrap`): the tests fail where it cannot work.

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::mock_engine::content_text;
use crate::support::{MockEngine, MockReply, RecordedRequest};
use baton::cli::eval::{EvalArgs, prepare};
use baton::eval::isolation::IsolationChoice;
use baton::eval::job::{JobReport, run_job};

fn args(tasks: Vec<PathBuf>, agent: &str, out: &Path) -> EvalArgs {
    EvalArgs {
        tasks,
        agent: agent.to_string(),
        trials: 1,
        concurrency: 2,
        out: out.to_path_buf(),
        job_name: None,
        resume_job: None,
        timeout_multiplier: 1.0,
        include: Vec::new(),
        exclude: Vec::new(),
        baton_bin: None,
        exec_args: Vec::new(),
        hooks: None,
        mcp_config: None,
        pass_env: Vec::new(),
        task_env: Vec::new(),
        isolation: IsolationChoice::Bwrap,
        share: Vec::new(),
        keep_workdirs: false,
        min_score: None,
        no_progress: true,
        list: false,
        trailing_exec_args: Vec::new(),
    }
}

fn run(a: EvalArgs) -> JobReport {
    let cfg = prepare(&a).expect("job config (is bwrap installed?)");
    run_job(cfg).expect("job runs")
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// An offline task whose instruction is `instruction` and whose verifier always scores 0.
fn task(root: &Path, name: &str, instruction: &str) -> PathBuf {
    let dir = root.join(name);
    write(
        &dir.join("task.toml"),
        "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = false\n",
    );
    write(&dir.join("instruction.md"), &format!("{instruction}\n"));
    write(&dir.join("environment/seed.txt"), "seed\n");
    write(&dir.join("solution/solve.sh"), "true\n");
    write(
        &dir.join("tests/test.sh"),
        "echo 0 > /logs/verifier/reward.txt\n",
    );
    dir
}

/// What a `cmd:` agent printed.
fn agent_stdout(report: &JobReport) -> String {
    let t = &report.trials[0];
    assert_eq!(t.isolation, "bwrap");
    std::fs::read_to_string(t.trial_dir.join("agent/stdout.txt")).unwrap_or_default()
}

fn after_tool(req: &RecordedRequest) -> bool {
    req.messages()
        .last()
        .and_then(|m| m.get("role"))
        .and_then(|r| r.as_str())
        == Some("tool")
}

/// An engine that has the agent run one shell command (picked by the instruction), then stop.
fn engine_running(pick: impl Fn(&RecordedRequest) -> String + Send + Sync + 'static) -> MockEngine {
    MockEngine::start_blocking(move |req| {
        if req.is_route() {
            return MockReply::label("L2");
        }
        if req.is_summary() {
            return MockReply::text("Ran the command.");
        }
        if after_tool(req) {
            return MockReply::text("Done.");
        }
        let args = serde_json::json!({
            "command": pick(req),
            "timeout_ms": 30000,
            "yield_ms": 30000,
        });
        MockReply::tool_call("call_1", "shell", args.to_string())
    })
}

/// The shell outputs the model was sent back, for requests that mention `marker`.
fn tool_outputs(engine: &MockEngine, marker: &str) -> String {
    engine
        .requests()
        .iter()
        .filter(|r| after_tool(r) && r.mentions(marker))
        .filter_map(|r| r.messages().last().map(content_text))
        .collect::<Vec<_>>()
        .join("\n")
}

fn baton_args(tasks: Vec<PathBuf>, engine: &MockEngine, out: &Path) -> EvalArgs {
    let mut a = args(tasks, "baton", out);
    a.baton_bin = Some(PathBuf::from(env!("CARGO_BIN_EXE_baton")));
    a.trailing_exec_args = vec!["--endpoint".into(), engine.url()];
    a
}

/// Runs `command` through the baton agent in one trial and returns what the model saw of it.
fn baton_runs(command: &str) -> String {
    baton_runs_in(command, false)
}

fn baton_runs_in(command: &str, internet: bool) -> String {
    let command = command.to_string();
    let engine = engine_running(move |_| command.clone());
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "probe", "Run the probe.");
    if internet {
        write(
            &t.join("task.toml"),
            "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[environment]\nallow_internet = true\n",
        );
    }
    let out = tempfile::tempdir().unwrap();
    let report = run(baton_args(vec![t], &engine, out.path()));
    let trial = &report.trials[0];
    assert_eq!(trial.isolation, "bwrap");
    let stderr =
        std::fs::read_to_string(trial.trial_dir.join("agent/stderr.txt")).unwrap_or_default();
    assert_eq!(
        trial.agent_exit.exit_code,
        Some(0),
        "the agent must reach its engine; exit {:?}, exception {:?}, stderr: {stderr}; stdout: {}; requests: {}",
        trial.agent_exit,
        trial.exception_info.as_ref().map(|e| &e.message),
        std::fs::read_to_string(trial.trial_dir.join("agent/stdout.txt")).unwrap_or_default(),
        engine.requests().len(),
    );
    tool_outputs(&engine, "PROBE_END")
}

/// A host folder shared read-only with `--share`, remounted read-write from inside a trial
/// (`mount -o remount,bind,rw`, and `mount_setattr(2)` clearing the read-only flag), must not
/// take a write: trial root holds no capability and the mount syscalls are filtered.
#[test]
fn remounting_a_shared_host_folder_read_write_does_not_write_the_host() {
    // The fixture base may be a build folder an unprivileged user cannot write: then HOME.
    let outside = tempfile::tempdir_in(crate::support::outside::fixture_base())
        .or_else(|_| tempfile::tempdir_in(std::env::var_os("HOME").unwrap()))
        .unwrap();
    let dir = outside.path().canonicalize().unwrap();
    let d = dir.display();
    let script = format!(
        r#"mount -o remount,bind,rw {d}; echo remount-ro-bind > {d}/by-remount
mount -o remount,rw /opt; touch /opt/.baton-trial-escape
python3 - <<'PY'
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class Attr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ('set', 'clr', 'prop', 'userns')]
a = Attr(0, 1, 0, 0)  # clear MOUNT_ATTR_RDONLY
r = libc.syscall(442, -100, b'{d}', 0, ctypes.byref(a), ctypes.sizeof(a))
print('mount_setattr', r, ctypes.get_errno())
try:
    open('{d}/by-mount-setattr', 'w').write('x')
except OSError as e:
    print('write refused', e)
PY
echo END"#
    );
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "remount", "Remount.");
    let out = tempfile::tempdir().unwrap();
    let mut a = args(vec![t], &format!("cmd:{script}"), out.path());
    a.share = vec![dir.clone()];
    let report = run(a);
    let opt_planted = Path::new("/opt/.baton-trial-escape").exists();
    let _ = std::fs::remove_file("/opt/.baton-trial-escape");
    let stdout = agent_stdout(&report);
    assert!(stdout.contains("END"), "the script ran: {stdout}");
    let planted: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert!(
        planted.is_empty(),
        "the trial wrote a read-only host folder: {planted:?}"
    );
    assert!(!opt_planted, "the trial wrote the host's /opt");
    assert!(stdout.contains("mount_setattr -1"), "{stdout}");
}

/// Root in a trial is root only in its own user namespace: no effective capability, no clock,
/// no hostname, no device nodes, no mounts, no new user namespace.
#[test]
fn trial_root_cannot_set_the_clock_hostname_or_make_devices() {
    let script = "grep CapEff /proc/self/status; \
        mknod /app/null c 1 3 2>/dev/null && echo MKNOD_OK; \
        mknod /app/disk b 8 0 2>/dev/null && echo BLOCK_OK; \
        hostname evil 2>/dev/null && echo HOSTNAME_OK; \
        date -s \"@$(date +%s)\" >/dev/null 2>&1 && echo DATE_OK; \
        unshare -U true 2>/dev/null && echo USERNS_OK; \
        unshare -rn true 2>/dev/null && echo NETNS_OK; \
        mount -t tmpfs none /tmp 2>/dev/null && echo MOUNT_OK; \
        ip link set lo down 2>/dev/null && echo NETADMIN_OK; \
        dmesg >/dev/null 2>&1 && echo DMESG_OK; \
        echo END";
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "caps", "Caps.");
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![t], &format!("cmd:{script}"), out.path()));
    let stdout = agent_stdout(&report);
    assert!(stdout.contains("END"), "the script ran: {stdout}");
    assert!(
        stdout.contains("CapEff:\t0000000000000000"),
        "trial root holds capabilities: {stdout}"
    );
    for ok in [
        "MKNOD_OK",
        "BLOCK_OK",
        "HOSTNAME_OK",
        "DATE_OK",
        "USERNS_OK",
        "NETNS_OK",
        "MOUNT_OK",
        "NETADMIN_OK",
        "DMESG_OK",
    ] {
        assert!(!stdout.contains(ok), "{ok}: {stdout}");
    }
}

/// vsock is not confined by the network namespace (a VM's vsock reaches its hypervisor, CID 2,
/// and the VM's own services), and `clone3` carries its namespace flags in memory a filter
/// can't read: a trial's seccomp program refuses both (the old one let both through, and for
/// x32 it missed the ABI's own `ioctl` number).
#[test]
fn a_trial_gets_no_vsock_socket_and_no_clone3() {
    let script = "python3 -c \"
import socket, ctypes
try:
    socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    print(chr(86) + str(1))
except OSError as e:
    print(chr(86) + str(0), e.errno)
libc = ctypes.CDLL(None, use_errno=True)
args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)
r = libc.syscall(435, ctypes.byref(args), 88)
print(chr(67), r, ctypes.get_errno())
\"; echo END";
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "vsock", "Vsock.");
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![t], &format!("cmd:{script}"), out.path()));
    let stdout = agent_stdout(&report);
    assert!(stdout.contains("END"), "the script ran: {stdout}");
    assert!(stdout.contains("V0 1"), "a vsock socket was made: {stdout}");
    assert!(
        stdout.contains(&format!("C -1 {}", libc::ENOSYS)),
        "clone3 reached the kernel: {stdout}"
    );
}

/// A listener on the host's loopback is out of reach of the agent's commands (which the old
/// runner gave the host network because the agent needs its endpoint).
#[test]
fn a_trial_cannot_reach_a_host_tcp_listener_on_loopback() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let stop = Instant::now() + Duration::from_secs(60);
    let acceptor = std::thread::spawn(move || {
        while Instant::now() < stop && counter.load(Ordering::SeqCst) == 0 {
            match listener.accept() {
                Ok(_) => {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    let seen = baton_runs(&format!(
        "(echo probe > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo TCP_REACHED || echo TCP_BLOCKED; echo PROBE_END"
    ));
    let connections = accepted.swap(1, Ordering::SeqCst);
    let _ = acceptor.join();
    assert!(seen.contains("TCP_BLOCKED"), "the probe ran: {seen}");
    assert_eq!(connections, 0, "a trial connected to the host's loopback");
}

/// Abstract unix sockets belong to the network namespace: the host's are not reachable.
#[test]
fn a_trial_cannot_reach_a_host_abstract_unix_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("baton-trial-escape-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    let seen = baton_runs(&format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect(b'\\0{name}'); s.send(b'x'); print('ABSTRACT_REACHED')\" 2>/dev/null || echo ABSTRACT_BLOCKED; echo PROBE_END"
    ));
    let reached = listener.accept().is_ok();
    assert!(seen.contains("ABSTRACT_BLOCKED"), "the probe ran: {seen}");
    assert!(!reached, "a trial connected to a host abstract socket");
}

/// Two trials running at once each have their own loopback: one cannot reach a port the other
/// listens on.
#[test]
fn two_concurrent_trials_cannot_reach_each_others_port() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = format!(
        "python3 -c \"\nimport socket, time\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind(('127.0.0.1', {port})); s.listen(5); s.settimeout(6)\ntry:\n    s.accept(); print('SERVER_CONTACTED')\nexcept socket.timeout:\n    print('SERVER_ALONE')\n\"; echo PROBE_END"
    );
    let client = format!(
        "python3 -c \"\nimport socket, time\nend = time.time() + 5\nwhile time.time() < end:\n    try:\n        socket.create_connection(('127.0.0.1', {port}), timeout=1); print('PEER_REACHED'); break\n    except OSError:\n        time.sleep(0.1)\nelse:\n    print('PEER_BLOCKED')\n\"; echo PROBE_END"
    );
    let engine = engine_running(move |req| {
        if req.mentions("Serve") {
            server.clone()
        } else {
            client.clone()
        }
    });
    let root = tempfile::tempdir().unwrap();
    let a = task(root.path(), "server", "Serve.");
    let b = task(root.path(), "client", "Connect.");
    let out = tempfile::tempdir().unwrap();
    let report = run(baton_args(vec![a, b], &engine, out.path()));
    assert_eq!(report.trials.len(), 2);
    let seen = tool_outputs(&engine, "PROBE_END");
    assert!(
        seen.contains("SERVER_ALONE") && seen.contains("PEER_BLOCKED"),
        "one trial reached the other: {seen}"
    );
}

/// `baton eval` run by a user whose environment holds keys: a hostile command in the trial
/// looks for them in its environment, every process's environ and the trial's files. The
/// agent still reaches its engine, which sees the key only as the gateway's Authorization.
#[test]
fn the_api_key_is_not_visible_to_the_tasks_commands() {
    const KEY: &str = "sk-trial-escape-baton-key-7f3a";
    const OPENAI: &str = "sk-trial-escape-openai-key-91c2";
    const TOKEN: &str = "ghp_trial_escape_token_55d0";
    let engine = engine_running(|_| {
        "env; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do tr '\\0' '\\n' < $f; done 2>/dev/null; \
         grep -rash 'sk-trial-escape\\|ghp_trial' /root /tmp /logs /app /proc/[0-9]*/fd 2>/dev/null | head -5; \
         echo PROBE_END"
            .to_string()
    });
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "keys", "Find the keys.");
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join(".config"))
        .env("XDG_DATA_HOME", home.path().join(".local/share"))
        .env("BATON_ENDPOINT", engine.url())
        .env("BATON_API_KEY", KEY)
        .env("OPENAI_API_KEY", OPENAI)
        .env("BATON_GITHUB_TOKEN", TOKEN)
        .arg("eval")
        .arg(&t)
        .args(["--agent", "baton", "--isolation", "bwrap", "--no-progress"])
        .arg("--out")
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "baton eval failed: {status}");
    let seen = tool_outputs(&engine, "PROBE_END");
    assert!(
        seen.contains("PROBE_END") && seen.contains("HOME=/root"),
        "the probe ran: {seen}"
    );
    for secret in [KEY, OPENAI, TOKEN] {
        assert!(!seen.contains(secret), "a command saw {secret}:\n{seen}");
        for r in engine.requests() {
            assert!(
                !r.raw_body.contains(secret),
                "{secret} reached a request body"
            );
        }
    }
    // The key did its job on the host side of the trial.
    assert!(
        engine
            .requests()
            .iter()
            .all(|r| r.header("authorization") == Some(&format!("Bearer {KEY}")[..])),
        "every request carries the key"
    );
}

/// Toolchains under HOME stay usable, but not what sits beside them: a cargo registry token in
/// `~/.cargo/credentials.toml` (or `config.toml`), and other dotfiles of the user.
#[test]
fn a_credentials_file_under_cargo_home_is_not_visible() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().canonicalize().unwrap();
    write(&h.join(".cargo/bin/marker"), "tool\n");
    write(
        &h.join(".cargo/credentials.toml"),
        "[registry]\ntoken = \"cargo-escape-token-1\"\n",
    );
    write(
        &h.join(".cargo/config.toml"),
        "[registry]\ntoken = \"cargo-escape-token-2\"\n",
    );
    write(&h.join(".cargo/registry/cache/marker"), "cache\n");
    write(&h.join(".rustup/settings.toml"), "version = \"12\"\n");
    write(&h.join(".ssh/id_ed25519"), "ssh-escape-key\n");
    write(
        &h.join(".npmrc"),
        "//registry/:_authToken=npm-escape-token\n",
    );
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "creds", "Creds.");
    let out = tempfile::tempdir().unwrap();
    let hd = h.display();
    let script = format!(
        "cat {hd}/.cargo/bin/marker {hd}/.cargo/registry/cache/marker {hd}/.rustup/settings.toml; \
         cat {hd}/.cargo/credentials.toml {hd}/.cargo/config.toml {hd}/.ssh/id_ed25519 {hd}/.npmrc; \
         grep -rs escape-token {hd} /root; echo END"
    );
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .env_clear()
        .env(
            "PATH",
            format!("{hd}/.cargo/bin:/usr/local/bin:/usr/bin:/bin"),
        )
        .env("HOME", &h)
        .env("XDG_CONFIG_HOME", h.join(".config"))
        .env("XDG_DATA_HOME", h.join(".local/share"))
        .arg("eval")
        .arg(&t)
        .arg("--agent")
        .arg(format!("cmd:{script}"))
        .args(["--isolation", "bwrap", "--no-progress"])
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let mut stdout = String::new();
    for job in std::fs::read_dir(out.path()).unwrap().flatten() {
        if let Ok(mut f) =
            std::fs::File::open(trial_dir(&job.path(), "creds").join("agent/stdout.txt"))
        {
            f.read_to_string(&mut stdout).unwrap();
        }
    }
    assert!(stdout.contains("END"), "the script ran: {stdout}");
    assert!(
        stdout.contains("tool") && stdout.contains("cache") && stdout.contains("version"),
        "the toolchains stay visible: {stdout}"
    );
    for secret in ["cargo-escape-token", "ssh-escape-key", "npm-escape-token"] {
        assert!(!stdout.contains(secret), "{secret} visible: {stdout}");
    }
}

/// A descriptor the runner inherited (`baton eval … 7>>outside-log`) does not reach the
/// trial's commands, which could otherwise write outside through it.
#[test]
fn an_inherited_descriptor_does_not_reach_the_trial() {
    let outside = tempfile::tempdir_in(crate::support::outside::fixture_base())
        .or_else(|_| tempfile::tempdir_in(std::env::var_os("HOME").unwrap()))
        .unwrap();
    let log = outside.path().join("log");
    std::fs::write(&log, "").unwrap();
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "fd", "Fd.");
    let home = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("bash")
        .arg("-c")
        .arg("exec \"$0\" eval \"$1\" --agent 'cmd:echo escaped >&7; echo escaped > /proc/self/fd/7; echo END' --isolation bwrap --no-progress --out \"$2\" 7>>\"$3\"")
        .arg(env!("CARGO_BIN_EXE_baton"))
        .arg(&t)
        .arg(out.path())
        .arg(&log)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let mut ran = false;
    for job in std::fs::read_dir(out.path()).unwrap().flatten() {
        ran |= std::fs::read_to_string(trial_dir(&job.path(), "fd").join("agent/stdout.txt"))
            .is_ok_and(|s| s.contains("END"));
    }
    assert!(ran, "the agent ran");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "",
        "the trial wrote through fd 7"
    );
}

/// Users' homes, service sockets under `/run` (docker, D-Bus, systemd) and the host's password
/// hashes are not part of a trial's world.
#[test]
fn host_homes_run_sockets_and_password_hashes_are_not_in_the_trial() {
    let script = "for p in /home /mnt /media /srv /boot; do test -e $p && echo PRESENT:$p; done; \
        test -s /etc/shadow && echo PRESENT:/etc/shadow; \
        ls -A /run/ 2>/dev/null | grep -q . && echo PRESENT:/run; \
        ls /var/run/ 2>/dev/null | grep -q . && echo PRESENT:/var/run; \
        test -d /usr/bin && echo SYSTEM_OK; echo END";
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "host-files", "Look around.");
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![t], &format!("cmd:{script}"), out.path()));
    let stdout = agent_stdout(&report);
    assert!(
        stdout.contains("END") && stdout.contains("SYSTEM_OK"),
        "the script ran: {stdout}"
    );
    assert!(!stdout.contains("PRESENT:"), "{stdout}");
}

/// A task that allows the internet shares the host network, so the gateway listens on the
/// host's loopback: the agent still reaches its engine and its commands still get no key.
#[test]
fn an_online_task_reaches_its_engine_through_the_gateway_without_a_key() {
    // `baton_runs_in` asserts that the agent finished its turn with the engine.
    let seen = baton_runs_in("env; echo PROBE_END", true);
    assert!(seen.contains("HOME=/root"), "{seen}");
    assert!(!seen.contains("API_KEY"), "{seen}");
}

/// With `--isolation none` the agent runs on the host; it still gets its endpoint only through
/// the gateway (on the host's loopback) and no key in its environment.
#[test]
fn plain_folder_trials_reach_the_engine_through_the_gateway() {
    let engine = engine_running(|_| "env; echo PROBE_END".to_string());
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "plain", "Run the probe.");
    let out = tempfile::tempdir().unwrap();
    let mut a = baton_args(vec![t], &engine, out.path());
    a.isolation = IsolationChoice::None;
    let report = run(a);
    let trial = &report.trials[0];
    assert_eq!(trial.isolation, "plain");
    assert_eq!(
        trial.agent_exit.exit_code,
        Some(0),
        "{:?}",
        trial.exception_info
    );
    let seen = tool_outputs(&engine, "PROBE_END");
    assert!(seen.contains("PROBE_END"), "{seen}");
    assert!(
        !seen.contains(&engine.url()),
        "the agent was given the engine itself: {seen}"
    );
}

/// The folder of a job's one trial of `task` (trials are named `<task>__<id>`).
fn trial_dir(job: &Path, task: &str) -> PathBuf {
    std::fs::read_dir(job)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{task}__")))
        })
        .unwrap_or_else(|| job.join(task))
}

/// The baton agent's binary is mounted into the trial so the agent can run. Its whole folder
/// was: from a build, `target/debug` with every test binary and build artifact of the host,
/// which the task's commands could read (a test's own secrets are strings in its binary).
/// Only the binary itself is there now.
#[test]
fn the_agent_binarys_folder_is_not_visible_in_the_trial() {
    let binary = Path::new(env!("CARGO_BIN_EXE_baton"));
    let folder = binary.parent().unwrap();
    let seen = baton_runs(&format!("ls -a {}; echo PROBE_END", folder.display()));
    assert!(
        seen.contains("baton\n"),
        "the agent's binary is there: {seen}"
    );
    for sibling in ["deps", "build", "baton-sandbox-inner"] {
        assert!(
            !seen.lines().any(|l| l.trim() == sibling),
            "{sibling} of {} is visible in the trial: {seen}",
            folder.display()
        );
    }
}

/// A pathname unix socket of a host service in a system folder a trial sees (`/var/tmp` here,
/// as lxd's under `/var/snap` or mysql's under `/var/lib`): an offline trial cannot connect to
/// it, and the host's `/var/tmp` is not the trial's. Before, a trial reached such a socket and
/// a root daemon behind it ran what it was sent.
#[test]
fn a_trial_cannot_reach_a_host_pathname_socket_under_var() {
    let dir = tempfile::Builder::new()
        .prefix("baton-trial-escape-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let path = dir.path().join("daemon.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        "test -e {0} && echo SEEN_HOST_VAR_TMP; python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{1}'); s.send(b'x'); print('PATH_SOCKET_REACHED')\" 2>/dev/null || echo PATH_SOCKET_BLOCKED; echo END",
        dir.path().display(),
        path.display()
    );
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "var-socket", "Look around.");
    let out = tempfile::tempdir().unwrap();
    let report = run(args(vec![t], &format!("cmd:{script}"), out.path()));
    let stdout = agent_stdout(&report);
    let reached = listener.accept().is_ok();
    assert!(stdout.contains("END"), "the probe ran: {stdout}");
    assert!(stdout.contains("PATH_SOCKET_BLOCKED"), "{stdout}");
    assert!(!stdout.contains("SEEN_HOST_VAR_TMP"), "{stdout}");
    assert!(!reached, "a trial connected to a host pathname socket");
}

/// A service socket in the host's `/opt` (or `/etc`) is covered in the trial: a trial cannot
/// connect to it. One that goes away after the job started does not break the trials (bwrap
/// would fail making a mount point for it in the read-only folder). Needs root (it writes
/// `/opt`); it says so and is counted otherwise.
#[test]
fn a_host_socket_in_opt_is_covered_and_one_that_goes_away_is_harmless() {
    // SAFETY: geteuid has no preconditions.
    let root_user = unsafe { libc::geteuid() } == 0;
    if crate::support::external::require("root (to put a socket in /opt)", root_user.then_some(()))
        .is_none()
    {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("baton-trial-escape-")
        .tempdir_in("/opt")
        .unwrap();
    let stays = dir.path().join("stays.sock");
    let goes = dir.path().join("goes.sock");
    let listener = std::os::unix::net::UnixListener::bind(&stays).unwrap();
    listener.set_nonblocking(true).unwrap();
    let gone = std::os::unix::net::UnixListener::bind(&goes).unwrap();
    let script = format!(
        "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{}'); s.send(b'x'); print('OPT_SOCKET_REACHED')\" 2>/dev/null || echo OPT_SOCKET_BLOCKED; echo END",
        stays.display()
    );
    let root = tempfile::tempdir().unwrap();
    let t = task(root.path(), "opt-socket", "Look around.");
    let out = tempfile::tempdir().unwrap();
    let cfg = prepare(&args(vec![t], &format!("cmd:{script}"), out.path())).unwrap();
    // Gone after the job's start (its scan of /opt).
    drop(gone);
    std::fs::remove_file(&goes).unwrap();
    let report = run_job(cfg).unwrap();
    let stdout = agent_stdout(&report);
    let reached = listener.accept().is_ok();
    assert!(
        stdout.contains("END"),
        "the probe ran: {stdout}; {:?}",
        report.trials[0].exception_info
    );
    assert!(stdout.contains("OPT_SOCKET_BLOCKED"), "{stdout}");
    assert!(!reached, "a trial connected to a host socket in /opt");
}
