//! Sandbox and shell-tool benchmark, side by side with a baseline, reported as ratios
//! (`cargo bench --bench sandbox`):
//! 1. spawn + wait of `true` sandboxed (workspace-write, via the same launch path as the shell
//!    tool) vs plain `true`: median of many runs; target ≤ 10 ms extra. When the `baton sandbox`
//!    subcommand is wired into the CLI, `baton sandbox -- true` is measured too.
//! 2. a command printing 100 MB through the shell tool vs `cat` of the same 100 MB to /dev/null:
//!    wall time (target < 2×) and this process's peak RSS growth (target < 64 MB).
//! 3. the shell tool's round trip of `true` in an empty repository vs one of 50,000 files in
//!    5,000 folders (the git audit walks the tree before and after every command; folders
//!    unchanged since the last walk are not read again).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use baton::protocol::SandboxMode;
use baton::protocol::{Event, EventSink};
use baton::sandbox::{SandboxPolicy, Session, probe, sandboxed_command};
use baton::tool::shell::pty::{Pty, WindowSize};
use baton::tool::shell::{ShellConfig, shell_tools};
use baton::tool::{ToolContext, ToolState};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 200;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn time_runs(mut run: impl FnMut()) -> Duration {
    for _ in 0..10 {
        run();
    }
    median(
        (0..RUNS)
            .map(|_| {
                let t = Instant::now();
                run();
                t.elapsed()
            })
            .collect(),
    )
}

fn quiet(cmd: &mut Command) -> &mut Command {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
}

fn kib_status(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn cat_through_bare_pty(file: &std::path::Path) -> Duration {
    use std::io::Read;
    let Pty {
        master: mut reader,
        slave,
    } = Pty::open(WindowSize { rows: 24, cols: 80 }).expect("openpty");
    if let Ok(mut t) = nix::sys::termios::tcgetattr(&slave) {
        t.output_flags.remove(nix::sys::termios::OutputFlags::OPOST);
        let _ = nix::sys::termios::tcsetattr(&slave, nix::sys::termios::SetArg::TCSANOW, &t);
    }
    let t = Instant::now();
    let mut child = Command::new("cat")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(slave.try_clone().expect("dup"))
        .stderr(Stdio::null())
        .spawn()
        .expect("cat");
    drop(slave);
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(n) = reader.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
    let _ = child.wait();
    t.elapsed()
}

fn main() {
    let support = probe();
    println!("{}", support.report().join("\n"));
    if !support.enforceable {
        println!("sandbox not enforceable here: nothing to measure");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canon");
    std::fs::create_dir_all(ws.join(".git/hooks")).expect("git dir");

    // 1. spawn overhead
    let plain = time_runs(|| {
        quiet(&mut Command::new("true")).status().expect("true");
    });
    let plain_git = ws.join("no-git");
    std::fs::create_dir_all(&plain_git).expect("dir");
    let variants = [
        (
            "workspace-write, git workspace",
            SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws),
        ),
        (
            "workspace-write, no .git",
            SandboxPolicy::new(SandboxMode::WorkspaceWrite, &plain_git),
        ),
        ("read-only", SandboxPolicy::new(SandboxMode::ReadOnly, &ws)),
    ];
    println!(
        "\nspawn + wait of `true`, median of {RUNS}: plain {:.2} ms",
        plain.as_secs_f64() * 1e3
    );
    for (name, policy) in &variants {
        let sandboxed = time_runs(|| {
            let (mut cmd, guard) =
                sandboxed_command(policy, &["true".into()], Session::NewGroup).expect("sandbox");
            quiet(&mut cmd).status().expect("sandboxed true");
            drop(guard);
        });
        println!(
            "  sandboxed ({name}): {:.2} ms: +{:.2} ms ({:.1}×)",
            sandboxed.as_secs_f64() * 1e3,
            (sandboxed.as_secs_f64() - plain.as_secs_f64()) * 1e3,
            sandboxed.as_secs_f64() / plain.as_secs_f64()
        );
    }
    let prep = time_runs(|| {
        let p = baton::sandbox::PreparedSandbox::prepare(&variants[0].1, Session::NewGroup)
            .expect("prepare");
        drop(p);
    });
    println!(
        "  of which preparing in the parent (ruleset, filter, cgroup): {:.2} ms",
        prep.as_secs_f64() * 1e3
    );
    let baton = env!("CARGO_BIN_EXE_baton");
    let wired = Command::new(baton)
        .args(["sandbox", "--probe"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("landlock ABI"));
    if wired {
        let cli = time_runs(|| {
            quiet(
                Command::new(baton)
                    .args(["sandbox", "--", "true"])
                    .current_dir(&ws),
            )
            .status()
            .expect("baton sandbox");
        });
        println!(
            "`baton sandbox -- true`: {:.2} ms: +{:.2} ms over plain `true` ({:.1}×)",
            cli.as_secs_f64() * 1e3,
            (cli.as_secs_f64() - plain.as_secs_f64()) * 1e3,
            cli.as_secs_f64() / plain.as_secs_f64()
        );
    } else {
        println!(
            "`baton sandbox` is not wired into the CLI yet: measured through the library only"
        );
    }

    // 2. 100 MB through the shell tool
    let big = ws.join("big.txt");
    let line = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyz\n";
    let mut data = Vec::with_capacity(100 << 20);
    while data.len() < 100_000_000 {
        data.extend_from_slice(line);
    }
    std::fs::write(&big, &data).expect("write big file");
    drop(data);
    let cat_times: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            quiet(Command::new("cat").arg(&big)).status().expect("cat");
            t.elapsed()
        })
        .collect();
    let cat = median(cat_times);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let tools = shell_tools(ShellConfig {
        login: false,
        ..ShellConfig::default()
    });
    let shell = tools
        .iter()
        .find(|t| t.name() == "shell")
        .expect("shell tool");
    // Reset the peak-RSS counter so the figure is these runs'.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss_before = kib_status("VmRSS:");
    // Interleaved with the floor for any PTY-based tool (the same `cat` into a bare PTY,
    // drained by a read loop), so both see the same machine load.
    let mut floor_times = Vec::new();
    let mut tool_times = Vec::new();
    let mut last = None;
    for _ in 0..5 {
        floor_times.push(cat_through_bare_pty(&big));
        let (events, mut rx) = EventSink::channel();
        let drain = rt.spawn(async move {
            let mut n = 0usize;
            while let Some(ev) = rx.recv().await {
                if let Event::ToolOutput { chunk, .. } = ev {
                    n += chunk.len();
                }
            }
            n
        });
        let ctx = ToolContext {
            workspace: ws.clone(),
            call_id: "bench".into(),
            events,
            cancel: CancellationToken::new(),
            state: Arc::new(ToolState::default()),
        };
        let t = Instant::now();
        let result = rt.block_on(shell.run(
            json!({"command": "cat big.txt", "yield_ms": 600000, "timeout_ms": 600000}),
            &ctx,
        ));
        tool_times.push(t.elapsed());
        drop(ctx);
        let ui_bytes = rt.block_on(drain).unwrap_or(0);
        last = Some((result, ui_bytes));
    }
    let peak = kib_status("VmHWM:");
    let (tool_time, pty_floor) = (median(tool_times), median(floor_times));
    if let Some((result, ui_bytes)) = last {
        println!(
            "\n100 MB through the shell tool, median of 5: {:.3} s vs `cat` to /dev/null {:.3} s \
             ({:.1}×); model got {} bytes, UI got {} bytes; exit {:?}",
            tool_time.as_secs_f64(),
            cat.as_secs_f64(),
            tool_time.as_secs_f64() / cat.as_secs_f64(),
            result.content.len(),
            ui_bytes,
            result.exit_code
        );
    }
    println!(
        "bare PTY floor (same cat, no sandbox, no processing), median of 5: {:.3} s; \
         baton / floor = {:.2}×",
        pty_floor.as_secs_f64(),
        tool_time.as_secs_f64() / pty_floor.as_secs_f64()
    );
    println!(
        "RSS: {} MiB before, peak {} MiB during (growth {} MiB; target: peak < 64 MiB)",
        rss_before / 1024,
        peak / 1024,
        peak.saturating_sub(rss_before) / 1024
    );
    std::fs::remove_file(&big).expect("rm big file");

    // 3. shell round trip, small and big tree
    let tree = tempfile::tempdir().expect("tempdir");
    let tree_ws = tree.path().canonicalize().expect("canon");
    std::fs::create_dir_all(tree_ws.join(".git/hooks")).expect("git dir");
    for d in 0..5_000 {
        let folder = tree_ws.join(format!("d{}/s{}", d / 100, d % 100));
        std::fs::create_dir_all(&folder).expect("mkdir");
        for f in 0..10 {
            std::fs::write(folder.join(format!("f{f}.txt")), "x").expect("file");
        }
    }
    // Older than the audit's settling time: what a checkout looks like between commands.
    std::thread::sleep(Duration::from_millis(3500));
    let round_trip = |workspace: &std::path::Path| {
        let (events, _rx) = EventSink::channel();
        let ctx = ToolContext {
            workspace: workspace.to_path_buf(),
            call_id: "bench".into(),
            events,
            cancel: CancellationToken::new(),
            state: Arc::new(ToolState::default()),
        };
        let t = Instant::now();
        let r = rt.block_on(shell.run(json!({"command": "true"}), &ctx));
        assert_eq!(r.exit_code, Some(0), "{}", r.content);
        t.elapsed()
    };
    let first_big = round_trip(&tree_ws);
    let (mut small, mut large) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        small.push(round_trip(&ws));
        large.push(round_trip(&tree_ws));
    }
    let (small, large) = (median(small), median(large));
    println!(
        "\nshell tool round trip of `true`, median of 20 interleaved: empty repository {:.2} ms, \
         50,000 files in 5,000 folders {:.2} ms (+{:.2} ms; the first command there, which \
         reads every folder, {:.2} ms)",
        small.as_secs_f64() * 1e3,
        large.as_secs_f64() * 1e3,
        (large.as_secs_f64() - small.as_secs_f64()) * 1e3,
        first_big.as_secs_f64() * 1e3
    );
}
