//! `baton sandbox [--sandbox MODE] [--network] [--write DIR]… -- CMD…`: runs one command in the
//! same sandbox the shell tool uses, in the current directory as the workspace. The command
//! never gets the caller's terminal: when one of stdin/stdout/stderr is a terminal, it runs on
//! a new PTY that this process relays (raw mode, window size), so `TIOCSTI` and escape
//! sequences reach only that PTY. Once it ends, what it planted for git (see
//! `sandbox::git_guard`) is undone, with a warning on stderr. Also `baton sandbox --probe`: what the kernel can enforce.

use crate::protocol::stdio::{eprintln, println};
use std::io::{IsTerminal, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

use crate::protocol::{SandboxMode, terminal_safe_line};
use crate::sandbox::{
    Backend, GitWatch, PreparedSandbox, SandboxPolicy, Session, probe, watched_command_admitted,
};
use crate::tool::shell::pty::{Pty, WindowSize};

/// Arguments of `baton sandbox`.
#[derive(Debug, Clone, clap::Args)]
pub struct SandboxArgs {
    /// Policy: read-only, workspace-write or off (the global `--sandbox` flag).
    #[arg(skip)]
    pub mode: SandboxMode,
    /// Allow network access (AF_INET/AF_INET6 sockets).
    #[arg(long)]
    pub network: bool,
    /// Another writable directory (repeatable).
    #[arg(long = "write", value_name = "DIR")]
    pub write: Vec<PathBuf>,
    /// A path of your home commands may read besides its toolchains (repeatable).
    #[arg(long = "read", value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// A host unix socket, or a folder of them, the command may connect to (repeatable).
    #[arg(long = "allow-unix-socket", value_name = "PATH")]
    pub allow_unix_socket: Vec<PathBuf>,
    /// Workspace root (the global `-C/--cd` flag; default: the current directory).
    #[arg(skip)]
    pub workspace: Option<PathBuf>,
    /// Accept a broad workspace (the global `--allow-broad-workspace` flag).
    #[arg(skip)]
    pub allow_broad_workspace: bool,
    /// Variables passed to the command although named like secrets (the global
    /// `--env-keep` flag).
    #[arg(skip)]
    pub env_keep: Vec<String>,
    /// The weaker Landlock-only backend (`landlock`) instead of bubblewrap.
    #[arg(long = "sandbox-backend", value_name = "BACKEND")]
    pub backend: Option<Backend>,
    /// Memory bound for the command, in MiB (default: half of this machine's RAM).
    #[arg(long, value_name = "MIB")]
    pub max_memory: Option<u64>,
    /// Print what the kernel can enforce and exit.
    #[arg(long, conflicts_with = "command")]
    pub probe: bool,
    /// The command and its arguments.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// What the global flags (`baton --write DIR sandbox …`) say for `baton sandbox`: the mode,
/// the workspace, the network, the folders and sockets it may reach, added to its own flags.
pub fn take_global_flags(
    args: &mut SandboxArgs,
    flags: crate::config::Settings,
    allow_broad_workspace: bool,
) {
    args.mode = flags.sandbox.unwrap_or_default();
    args.workspace = flags.workspace;
    args.allow_broad_workspace = allow_broad_workspace;
    args.network |= flags.network == Some(true);
    args.write.extend(flags.writable.unwrap_or_default());
    args.read.extend(flags.readable.unwrap_or_default());
    args.allow_unix_socket
        .extend(flags.unix_sockets.unwrap_or_default());
    args.env_keep.extend(flags.env_keep.unwrap_or_default());
}

/// Runs `baton sandbox`; returns the command's exit code (128+N when killed by signal N),
/// or 1 when the sandbox could not be set up.
pub fn run(args: SandboxArgs) -> i32 {
    if args.probe {
        let support = probe();
        for line in support.report() {
            println!("{line}");
        }
        return if support.enforceable { 0 } else { 1 };
    }
    if args.command.is_empty() {
        eprintln!("baton sandbox: no command given (usage: baton sandbox [OPTIONS] -- CMD…)");
        return 2;
    }
    let workspace = match args
        .workspace
        .clone()
        .map_or_else(std::env::current_dir, Ok)
    {
        Ok(w) => w,
        Err(e) => {
            eprintln!("baton sandbox: no current directory: {e}");
            return 1;
        }
    };
    let workspace = match workspace.canonicalize() {
        Ok(w) => w,
        Err(e) => {
            eprintln!("baton sandbox: workspace {}: {e}", workspace.display());
            return 1;
        }
    };
    let sandboxed = args.mode != SandboxMode::Off;
    let judge = || {
        crate::config::workspace::check(
            &workspace,
            &args.write,
            sandboxed,
            args.allow_broad_workspace,
        )
    };
    // With the flag the check makes baton's own folders in a broad workspace (so that they are
    // hidden): it must come before the look at what the sandbox shows. Otherwise it runs
    // beside that look, which makes nothing on disk.
    if args.allow_broad_workspace
        && let Err(e) = judge()
    {
        eprintln!("baton sandbox: {e}");
        return 2;
    }
    let mut policy = SandboxPolicy::new(args.mode, &workspace)
        .network(args.network)
        .backend(args.backend.unwrap_or_default())
        .max_memory(args.max_memory.map(|m| m << 20));
    for w in &args.write {
        policy = policy.writable_dir(w.clone());
    }
    policy.readable = args.read;
    policy.unix_sockets = args.allow_unix_socket;
    policy.env.keep.extend(args.env_keep);
    if policy.backend == Backend::Landlock && policy.mode != SandboxMode::Off {
        eprintln!(
            "baton sandbox: WEAKER SANDBOX (landlock backend): the terminal, unix sockets, \
             other processes, your home's secrets and outside files' metadata are not isolated"
        );
    }
    let tty = [
        std::io::stdin().is_terminal(),
        std::io::stdout().is_terminal(),
        std::io::stderr().is_terminal(),
    ];
    let session = if tty.contains(&true) {
        Session::PtyLeader
    } else {
        Session::NewGroup
    };
    // One command, gone when this process ends: its /tmp needs no folder on the host.
    crate::sandbox::bwrap::tmp_in_memory();
    let refused = std::sync::Mutex::new(None);
    let admitted = || {
        if args.allow_broad_workspace {
            return true;
        }
        let judged = judge();
        let ok = judged.is_ok();
        *refused.lock().unwrap_or_else(|e| e.into_inner()) = judged.err();
        ok
    };
    let watched = watched_command_admitted(&policy, &args.command, session, admitted);
    if let Some(e) = refused.into_inner().unwrap_or_else(|e| e.into_inner()) {
        eprintln!("baton sandbox: {e}");
        return 2;
    }
    let (mut cmd, guard, mut watch) = match watched {
        Ok(c) => c,
        Err(e) => {
            eprintln!("baton sandbox: {e}");
            return 1;
        }
    };
    cmd.current_dir(&workspace);
    // On a terminal Ctrl-C and Ctrl-\ are keys for the command (relayed through its PTY).
    // Any other way this process is asked to stop (a closed terminal, `timeout`, a CI job's
    // SIGTERM, Ctrl-C where the command is not on the terminal) stops the command, and the
    // audit is still made before this process exits.
    let stops: &[Signal] = if session == Session::PtyLeader {
        // SAFETY: setting signal dispositions to ignore; the child resets them before exec.
        unsafe {
            libc::signal(libc::SIGINT, libc::SIG_IGN);
            libc::signal(libc::SIGQUIT, libc::SIG_IGN);
        }
        &[Signal::SIGTERM, Signal::SIGHUP]
    } else {
        &[
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGINT,
            Signal::SIGQUIT,
        ]
    };
    // What bubblewrap leaves when it dies comes back here to be ended (`pidns::end_orphans`).
    let _ = rustix::process::set_child_subreaper(Some(rustix::process::getpid()));
    for &sig in stops {
        let action = SigAction::new(
            SigHandler::Handler(stop_the_command),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        // SAFETY: the handler only loads and stores atomics and calls kill(2), which is
        // async-signal-safe.
        let _ = unsafe { sigaction(sig, &action) };
    }
    // Made as soon as the sandbox reports the command's end and no process of it is left
    // (beside bubblewrap's own teardown); else once bubblewrap has exited.
    let mut warnings = None;
    let status = if session == Session::PtyLeader {
        guard.install(&mut cmd);
        run_on_pty(cmd, tty, &guard, &mut watch, &mut warnings)
    } else {
        // No other thread runs yet: bubblewrap can start without a fork of this process.
        guard.spawn_alone(&mut cmd).and_then(|mut child| {
            // Asked to stop before it ran: the command is never released (bubblewrap was
            // killed; what it left is ended below).
            if running(child.id()) {
                watch.started();
                if watch.ended().is_some() {
                    watch.wait_until_gone(&guard);
                    warnings = Some(watch.audit());
                }
            }
            child.wait()
        })
    };
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!("baton sandbox: running {:?}: {e}", args.command[0]);
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let warnings = match (warnings, crate::sandbox::pidns::end_orphans()) {
        (Some(made), false) => made,
        (made, _) => {
            watch.wait_until_gone(&guard);
            let mut all = made.unwrap_or_default();
            all.extend(watch.audit());
            all
        }
    };
    drop(guard);
    let stopped_by = STOPPED_BY.load(Ordering::SeqCst);
    for warning in warnings {
        eprintln!("baton sandbox: warning: {}", terminal_safe_line(&warning));
    }
    if stopped_by != 0 {
        return 128 + stopped_by;
    }
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// The process `baton sandbox` waits for (bubblewrap, or the command itself without it),
/// for [`stop_the_command`]; 0 before the spawn.
static RUNNING: AtomicI32 = AtomicI32::new(0);
/// The signal that asked `baton sandbox` to stop, 0 for none.
static STOPPED_BY: AtomicI32 = AtomicI32::new(0);

/// Signal handler: kills what runs the command (bubblewrap takes the command's pid namespace
/// along). `baton sandbox` then goes on as after any end: the audit, then its exit.
extern "C" fn stop_the_command(sig: libc::c_int) {
    STOPPED_BY.store(sig, Ordering::SeqCst);
    let pid = RUNNING.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; the pid is our own child's, not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Records the spawned process for [`stop_the_command`], and stops it at once if a stop was
/// asked for before it existed; false then (the command must not be released).
fn running(pid: u32) -> bool {
    let pid = i32::try_from(pid).unwrap_or(0);
    RUNNING.store(pid, Ordering::SeqCst);
    if STOPPED_BY.load(Ordering::SeqCst) != 0 && pid > 0 {
        // SAFETY: as in the handler.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
        return false;
    }
    true
}

/// The caller's window size (from the first terminal among stdin/stdout/stderr).
fn window_size() -> WindowSize {
    use std::os::fd::AsFd;
    crate::tool::shell::pty::window_size_of(std::io::stdin().as_fd())
        .or_else(|| crate::tool::shell::pty::window_size_of(std::io::stdout().as_fd()))
        .or_else(|| crate::tool::shell::pty::window_size_of(std::io::stderr().as_fd()))
        .unwrap_or(WindowSize { rows: 24, cols: 80 })
}

/// Restores the caller's terminal mode when dropped.
struct RawMode {
    saved: Option<nix::sys::termios::Termios>,
}

impl RawMode {
    fn enter() -> RawMode {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let Ok(saved) = tcgetattr(&stdin) else {
            return RawMode { saved: None };
        };
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        let _ = tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        RawMode { saved: Some(saved) }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}

/// Runs `cmd` with a new PTY in place of each terminal among its stdio, relaying the PTY to
/// the caller's terminal: keys in (stdin raw), output out, window size followed. The command
/// is released from `watch`'s gate once spawned, and `watch`'s audit is put in `warnings` as
/// soon as the sandbox reports the command gone (while output may still be relayed).
fn run_on_pty(
    mut cmd: std::process::Command,
    tty: [bool; 3],
    sandbox: &PreparedSandbox,
    watch: &mut GitWatch,
    warnings: &mut Option<Vec<String>>,
) -> std::io::Result<std::process::ExitStatus> {
    let size = window_size();
    let pty = Pty::open(size).map_err(std::io::Error::other)?;
    let slave = |is_tty: bool| -> std::io::Result<Stdio> {
        Ok(if is_tty {
            Stdio::from(pty.slave.try_clone()?)
        } else {
            Stdio::inherit()
        })
    };
    // The inner helper takes fd 0 as controlling terminal, so fd 0 is always the PTY; a
    // command whose stdin was not a terminal sees an empty, closed input.
    cmd.stdin(slave(true)?)
        .stdout(slave(tty[1])?)
        .stderr(slave(tty[2])?);
    let mut child = cmd.spawn()?;
    let go = running(child.id());
    drop(cmd);
    if go {
        watch.started();
    }
    let Pty { master, slave } = pty;
    drop(slave);
    let _raw = tty[0].then(RawMode::enter);
    let mut reader = master.try_clone()?;
    let mut writer = master;
    let out_fd = if tty[1] { 1 } else { 2 };
    let relay_out = std::thread::spawn(move || {
        let mut buf = [0u8; 16384];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let mut out: Box<dyn Write> = if out_fd == 1 {
                        Box::new(std::io::stdout().lock())
                    } else {
                        Box::new(std::io::stderr().lock())
                    };
                    if out.write_all(&buf[..n]).and_then(|()| out.flush()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    if !tty[0] {
        // End of input for a command whose stdin was not a terminal.
        let _ = writer.write_all(&[4]);
    }
    let mut last = size;
    // The child's exit wakes the poll through a pidfd (Linux 5.3+): the command's end is seen
    // at once, not at the next tick. Without one, the loop ticks as before.
    let pidfd = i32::try_from(child.id())
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .and_then(|pid| {
            rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
        });
    // A caller's terminal that hangs up stays readable-at-EOF: stop polling it then.
    let mut stdin_open = tty[0];
    let mut awaiting_end = true;
    let stdin = std::io::stdin();
    let status = loop {
        use rustix::event::{PollFd, PollFlags, Timespec};
        if let Some(status) = child.try_wait()? {
            break status;
        }
        // Stdin (while open) first, then the pidfd (where there is one), then the sandbox's
        // report of the command's end (until it came).
        let mut fds = Vec::with_capacity(3);
        if stdin_open {
            fds.push(PollFd::new(&stdin, PollFlags::IN));
        }
        if let Some(fd) = &pidfd {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        let end_report = watch.end_report().filter(|_| awaiting_end);
        if let Some(fd) = &end_report {
            fds.push(PollFd::new(fd, PollFlags::IN));
        }
        // With a pidfd the timeout only paces the window-size check.
        let timeout_ms = if pidfd.is_some() {
            100
        } else if stdin_open {
            50
        } else {
            20
        };
        let timeout = Timespec {
            tv_sec: 0,
            tv_nsec: timeout_ms * 1_000_000,
        };
        // An error (EINTR) is a tick like a timeout.
        let n = rustix::event::poll(&mut fds, Some(&timeout)).unwrap_or(0);
        let stdin_events = match fds.first() {
            Some(fd) if stdin_open => fd.revents(),
            _ => PollFlags::empty(),
        };
        drop(fds);
        if awaiting_end
            && n > 0
            && let Some(told) = watch.try_ended()
        {
            awaiting_end = false;
            if told.is_some() {
                watch.wait_until_gone(sandbox);
                *warnings = Some(watch.audit());
            }
        }
        if n > 0 && stdin_events.contains(PollFlags::IN) {
            let mut buf = [0u8; 4096];
            match rustix::io::read(&stdin, &mut buf) {
                Ok(r) if r > 0 => {
                    let _ = writer.write_all(&buf[..r]);
                }
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                _ => stdin_open = false,
            }
        } else if n > 0
            && stdin_events.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL)
        {
            stdin_open = false;
        }
        let now = window_size();
        if now != last {
            last = now;
            let _ = crate::tool::shell::pty::set_window_size(&writer, now);
        }
    };
    // The command's last output is still in the PTY: the reader ends at EIO once every
    // process holding the slave is gone.
    drop(writer);
    let _ = relay_out.join();
    Ok(status)
}
