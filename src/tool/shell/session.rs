//! A command running in a PTY inside the sandbox, and the table of live sessions. A reader
//! thread drains the PTY into a bounded `OutputStream` and streams sanitized chunks to the UI;
//! a waiter thread reaps the child. Killing is always of the whole process group (and of the
//! command's pids cgroup when there is one): SIGTERM, a grace period, then SIGKILL.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::output::OutputStream;
use super::pty::{Pty, WindowSize};
use crate::protocol::{Event, EventSink};
use crate::sandbox::{GitWatch, PreparedSandbox, SandboxPolicy, Session, watched_command};
use crate::tool::ToolError;

/// Most sessions alive at once.
pub const MAX_SESSIONS: usize = 16;

/// How long to keep reading after the command exited, for output still in flight from
/// children holding the PTY open.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    Exited(i32),
    /// Killed after its timeout (reported to the model as exit code 124).
    TimedOut,
    /// Killed because the turn was interrupted or the model asked.
    Killed,
}

/// Where the UI chunks of a session go: the call currently looking at it.
struct UiTarget {
    events: EventSink,
    call_id: String,
}

struct State {
    output: OutputStream,
    ui: UiTarget,
    exit_code: Option<i32>,
    exited_at: Option<Instant>,
    eof: bool,
    ending: Option<Ending>,
    /// Why a kill under way was started: a command that dies of the kill's SIGTERM ends for
    /// that reason (a timeout is 124), not with the 143 its exit status says.
    killing: Option<Ending>,
}

/// One running (or finished, not yet collected) command.
pub struct ShellSession {
    pub id: u32,
    pub command: String,
    pgid: i32,
    state: Arc<Mutex<State>>,
    changed: watch::Receiver<u64>,
    /// Kept so `changed` never reports a closed channel while the session lives.
    _notify: Arc<watch::Sender<u64>>,
    /// The PTY master: the command's input goes here (its output is read from a duplicate).
    writer: Mutex<std::fs::File>,
    sandbox: Arc<PreparedSandbox>,
    /// When the command must be dead.
    deadline: Instant,
    /// The timeout it was started with.
    pub timeout: Duration,
    /// What the sandbox denies, for a hint when a command fails on a denial (`None`: off).
    pub sandbox_limits: Option<String>,
    /// The policy the command runs under and its working folder: a failure hints at the
    /// sandbox only when what was denied is something this policy denies.
    pub policy: SandboxPolicy,
    pub cwd: std::path::PathBuf,
    kill_grace: Duration,
    /// Git config, hooks and `.baton/` files before the command, audited when it ends.
    git_watch: GitWatch,
    /// Held while the command is killed and audited: whoever else ends it waits for that.
    ending_now: Mutex<()>,
}

/// Every shell session of this process (weakly: a forgotten one goes), for
/// [`end_every_session`].
static EVERY_SESSION: Mutex<Vec<std::sync::Weak<ShellSession>>> = Mutex::new(Vec::new());

/// Kills every command of this process's shell sessions still running and makes its audit,
/// waiting for one under way elsewhere; returns the audits' warnings for the caller to show.
/// The last thing baton does, whatever way it leaves — a turn that did not stop in time after
/// SIGTERM or `--timeout`, the TUI quitting while a turn is stuck: an exit that skipped it
/// would leave what a command planted in place for the user's next `git status`.
pub fn end_every_session() -> Vec<String> {
    let sessions: Vec<Arc<ShellSession>> = EVERY_SESSION
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    let mut warnings = Vec::new();
    for session in sessions {
        warnings.extend(session.finish(Some(Ending::Killed)));
        drop(session.ending_now.lock().unwrap_or_else(|p| p.into_inner()));
    }
    warnings
}

/// Everything needed to start a session.
pub struct SpawnRequest<'a> {
    pub command: &'a str,
    pub shell: &'a str,
    pub login: bool,
    /// Remove `*KEY*`/`*SECRET*`/`*TOKEN*`/`*PASSWORD*` variables from the environment.
    pub strip_secret_env: bool,
    /// Set `NO_COLOR=1` (the user asked for no colours).
    pub no_color: bool,
    pub cwd: &'a Path,
    pub policy: &'a SandboxPolicy,
    pub timeout: Duration,
    pub kill_grace: Duration,
    pub output_cap: usize,
    pub events: EventSink,
    pub call_id: String,
}

/// What a wait on a session saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Output since the previous snapshot, capped for the model.
    pub output: String,
    /// `None` while still running.
    pub ending: Option<Ending>,
    pub elapsed: Duration,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ShellSession {
    /// Starts `shell -lc command` in a fresh PTY under the sandbox.
    pub fn spawn(id: u32, req: SpawnRequest<'_>) -> Result<Arc<ShellSession>, ToolError> {
        let flag = if req.login { "-lc" } else { "-c" };
        let argv = [
            req.shell.to_string(),
            flag.to_string(),
            req.command.to_string(),
        ];
        let (mut cmd, sandbox, mut git_watch) =
            watched_command(req.policy, &argv, Session::PtyLeader)?;
        let Pty { master, slave } = Pty::open(WindowSize {
            rows: 48,
            cols: 160,
        })?;
        raw_output(&slave);
        let stdio = |f: &std::fs::File| -> Result<Stdio, ToolError> {
            f.try_clone()
                .map(Stdio::from)
                .map_err(|source| terminal("duplicating the PTY fd", source))
        };
        cmd.current_dir(req.cwd)
            .stdin(stdio(&slave)?)
            .stdout(stdio(&slave)?)
            .stderr(stdio(&slave)?)
            .env("TERM", "xterm-256color")
            .env("PAGER", "cat")
            .env("GIT_PAGER", "cat")
            .env("BATON_SESSION_ID", id.to_string());
        if req.strip_secret_env {
            for (name, _) in std::env::vars_os() {
                if looks_secret(&name.to_string_lossy()) {
                    cmd.env_remove(&name);
                }
            }
        }
        if req.no_color {
            cmd.env("NO_COLOR", "1");
        }
        sandbox.install(&mut cmd);
        // The reader's own descriptor (close-on-exec, like the original), so it can poll it.
        let reader = master
            .try_clone()
            .map_err(|source| terminal("duplicating the PTY master", source))?;
        let mut child = cmd.spawn().map_err(|source| ToolError::Spawn {
            program: req.shell.to_string(),
            mode: req.policy.mode,
            source,
        })?;
        drop(cmd);
        git_watch.started();
        drop(slave);
        let pgid = child.id() as i32;
        let state = Arc::new(Mutex::new(State {
            output: OutputStream::new(req.output_cap),
            ui: UiTarget {
                events: req.events,
                call_id: req.call_id,
            },
            exit_code: None,
            exited_at: None,
            eof: false,
            ending: None,
            killing: None,
        }));
        let (tx, rx) = watch::channel(0u64);
        let tx = Arc::new(tx);
        spawn_reader(reader, Arc::clone(&state), Arc::clone(&tx));
        {
            let state = Arc::clone(&state);
            let tx = Arc::clone(&tx);
            std::thread::Builder::new()
                .name(format!("shell-wait-{id}"))
                .spawn(move || {
                    let code = match child.wait() {
                        Ok(s) => {
                            use std::os::unix::process::ExitStatusExt;
                            s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
                        }
                        Err(_) => -1,
                    };
                    let mut st = lock(&state);
                    st.exit_code = Some(code);
                    st.exited_at = Some(Instant::now());
                    drop(st);
                    tx.send_modify(|n| *n += 1);
                })
                .map_err(|source| terminal("starting the waiter thread", source))?;
        }
        let session = Arc::new(ShellSession {
            id,
            command: req.command.to_string(),
            pgid,
            state,
            changed: rx,
            _notify: tx,
            writer: Mutex::new(master),
            sandbox,
            deadline: Instant::now() + req.timeout,
            timeout: req.timeout,
            sandbox_limits: sandbox_limits(req.policy),
            policy: req.policy.clone(),
            cwd: req.cwd.to_path_buf(),
            kill_grace: req.kill_grace,
            git_watch,
            ending_now: Mutex::new(()),
        });
        {
            let mut every = EVERY_SESSION.lock().unwrap_or_else(|p| p.into_inner());
            every.retain(|s| s.strong_count() > 0);
            every.push(Arc::downgrade(&session));
        }
        spawn_watchdog(&session)?;
        Ok(session)
    }

    /// `kill` for a thread outside the runtime (the watchdog): the same steps, sleeping.
    fn kill_blocking(&self, why: Ending) {
        if self.is_finished() {
            return;
        }
        lock(&self.state).killing.get_or_insert(why);
        self.signal_all(Signal::SIGTERM);
        self.signal_all(Signal::SIGCONT);
        let until = Instant::now() + self.kill_grace;
        while Instant::now() < until && !self.group_gone() {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.finish(Some(why));
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && lock(&self.state).exit_code.is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Points the UI stream at another call (a `poll` or `write_stdin` looking at this session).
    pub fn retarget(&self, events: EventSink, call_id: String) {
        lock(&self.state).ui = UiTarget { events, call_id };
    }

    /// Sends text (keys, `\u0003` for Ctrl-C) to the command's terminal. The write runs on a
    /// blocking thread: a command that doesn't read its input can fill the PTY buffer.
    pub async fn write(self: &Arc<Self>, text: &str) -> Result<(), ToolError> {
        let me = Arc::clone(self);
        let bytes = text.as_bytes().to_vec();
        let job = tokio::task::spawn_blocking(move || {
            let mut w = me.writer.lock().unwrap_or_else(|p| p.into_inner());
            w.write_all(&bytes).and_then(|_| w.flush())
        });
        let failed = |source| ToolError::SessionWrite {
            session: self.id,
            source,
        };
        match tokio::time::timeout(WRITE_PATIENCE, job).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(failed(e)),
            Ok(Err(e)) => Err(failed(std::io::Error::other(e))),
            Err(_) => Err(ToolError::InputBlocked {
                session: self.id,
                waited: WRITE_PATIENCE,
            }),
        }
    }

    pub fn is_finished(&self) -> bool {
        lock(&self.state).ending.is_some()
    }

    /// The command exited (its output may not have been collected yet).
    pub fn has_exited(&self) -> bool {
        lock(&self.state).exit_code.is_some()
    }

    /// Waits until the command ends, `yield_for` passes, the timeout passes (kill, exit 124) or
    /// `cancel` fires (kill). Returns the output since the last snapshot.
    pub async fn wait(
        self: &Arc<Self>,
        yield_for: Duration,
        cancel: &CancellationToken,
    ) -> Snapshot {
        let started = Instant::now();
        let yield_at = started + yield_for;
        let mut changed = self.changed.clone();
        loop {
            let (exited_at, eof, ending) = {
                let st = lock(&self.state);
                (st.exited_at, st.eof, st.ending)
            };
            if ending.is_some() {
                break;
            }
            if let Some(t) = exited_at
                && (eof || t.elapsed() >= DRAIN_AFTER_EXIT)
            {
                self.finish_off_the_runtime(None).await;
                break;
            }
            let now = Instant::now();
            if now >= self.deadline {
                self.kill(Ending::TimedOut).await;
                break;
            }
            if now >= yield_at {
                break;
            }
            let mut wake = self.deadline.min(yield_at);
            if let Some(t) = exited_at {
                wake = wake.min(t + DRAIN_AFTER_EXIT);
            }
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
                _ = cancel.cancelled() => {
                    self.kill(Ending::Killed).await;
                    break;
                }
            }
        }
        self.snapshot(started)
    }

    fn snapshot(&self, started: Instant) -> Snapshot {
        let mut st = lock(&self.state);
        let (output, ui) = st.output.take_window();
        if !ui.is_empty() {
            st.ui.events.emit(Event::ToolOutput {
                call_id: st.ui.call_id.clone(),
                chunk: ui,
            });
        }
        Snapshot {
            output,
            ending: st.ending,
            elapsed: started.elapsed(),
        }
    }

    /// [`Self::finish`] on a blocking thread: its audit waits until no process of the command
    /// can do anything more, which a process asleep in the kernel can make last seconds or
    /// minutes, and the runtime's workers (the TUI, other sessions) must go on meanwhile.
    async fn finish_off_the_runtime(self: &Arc<Self>, forced: Option<Ending>) {
        let me = Arc::clone(self);
        if tokio::task::spawn_blocking(move || me.finish(forced))
            .await
            .is_err()
        {
            // The blocking pool is shutting down: finish here rather than not at all.
            self.finish(forced);
        }
    }

    /// Records the ending and kills whatever the command left behind (background jobs), then
    /// audits; returns the audit's warnings (none when it was ended already).
    fn finish(&self, forced: Option<Ending>) -> Vec<String> {
        let ending_now = self.ending_now.lock().unwrap_or_else(|p| p.into_inner());
        let mut st = lock(&self.state);
        if st.ending.is_some() {
            return Vec::new();
        }
        st.ending = Some(match forced {
            Some(e) => e,
            None => match st.killing {
                Some(why) => why,
                None => Ending::Exited(st.exit_code.unwrap_or(-1)),
            },
        });
        drop(st);
        self.signal_all(Signal::SIGKILL);
        let warnings = self.audit_git();
        drop(ending_now);
        warnings
    }

    /// Undoes git config, hooks and `.baton/` files the command planted, once nothing of it
    /// can write any more, and warns the user about each.
    fn audit_git(&self) -> Vec<String> {
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until && self.group_alive() {
            std::thread::sleep(Duration::from_millis(2));
        }
        // Killed is not gone: a process asleep in the kernel finishes its call first.
        self.git_watch.wait_until_gone(&self.sandbox);
        let warnings = self.git_watch.audit();
        let st = lock(&self.state);
        for message in &warnings {
            st.ui.events.emit(Event::Warning {
                message: message.clone(),
            });
        }
        warnings
    }

    fn signal_all(&self, sig: Signal) {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid), sig);
        if sig == Signal::SIGKILL
            && let Some(cg) = self.sandbox.cgroup()
        {
            cg.kill_all();
        }
    }

    /// SIGTERM to the process group, then SIGKILL after the grace period if anything is left.
    /// Returns once the command's processes are gone, those in its sandbox's PID namespace
    /// too (the kernel ends them a moment after bwrap).
    pub async fn kill(self: &Arc<Self>, why: Ending) {
        if self.is_finished() {
            return;
        }
        // Found while bwrap still runs: its child is the namespace's init.
        let init = crate::sandbox::pidns::namespace_init(self.pgid as u32);
        lock(&self.state).killing.get_or_insert(why);
        self.signal_all(Signal::SIGTERM);
        self.signal_all(Signal::SIGCONT);
        let mut changed = self.changed.clone();
        let until = Instant::now() + self.kill_grace;
        while Instant::now() < until && !self.group_gone() {
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        self.finish_off_the_runtime(Some(why)).await;
        // Return only once the leader is reaped, so "killed" means gone.
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && lock(&self.state).exit_code.is_none() {
            tokio::select! {
                _ = changed.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
        if let Some(init) = init {
            let waited = tokio::task::spawn_blocking(move || {
                crate::sandbox::pidns::wait_for_exit(&init, Some(Duration::from_secs(2)))
            });
            let _ = waited.await;
        }
    }

    /// True when the leader was reaped and no process of its group is left.
    fn group_gone(&self) -> bool {
        let exited = lock(&self.state).exit_code.is_some();
        exited && !self.group_alive()
    }

    /// Whether a process of the command's group is left (signal 0 only checks).
    fn group_alive(&self) -> bool {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(self.pgid), None).is_ok()
    }

    /// Immediate SIGKILL of everything (Drop, program end).
    pub fn kill_now(&self) {
        self.finish(Some(Ending::Killed));
    }
}

impl Drop for ShellSession {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// How often a watchdog looks whether its session ended before the deadline.
const WATCHDOG_TICK: Duration = Duration::from_millis(500);

/// Kills the session's process group at its deadline even when nobody waits on it: a yielded
/// command would otherwise outlive its `timeout_ms` until the next `poll`. Holds only a weak
/// reference, so a dropped session (which kills its group itself) ends the watchdog too.
fn spawn_watchdog(session: &Arc<ShellSession>) -> Result<(), ToolError> {
    let weak = Arc::downgrade(session);
    let deadline = session.deadline;
    std::thread::Builder::new()
        .name(format!("shell-deadline-{}", session.id))
        .spawn(move || {
            loop {
                let now = Instant::now();
                if now >= deadline {
                    if let Some(s) = weak.upgrade() {
                        if s.has_exited() {
                            // It ended in time; only what it left running is killed.
                            s.finish(None);
                        } else {
                            s.kill_blocking(Ending::TimedOut);
                        }
                        s._notify.send_modify(|n| *n += 1);
                    }
                    return;
                }
                std::thread::sleep((deadline - now).min(WATCHDOG_TICK));
                match weak.upgrade() {
                    Some(s) if !s.is_finished() => {}
                    _ => return,
                }
            }
        })
        .map(|_| ())
        .map_err(|source| terminal("starting the watchdog thread", source))
}

/// Whether `file` has data to read right now.
fn readable_now(file: &std::fs::File) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
    poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n == 1)
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN))
}

fn spawn_reader(mut reader: std::fs::File, state: Arc<Mutex<State>>, tx: Arc<watch::Sender<u64>>) {
    const BUF: usize = 128 * 1024;
    // A PTY hands out a few KiB per read: gather what is already there into one chunk, so
    // filtering and UI events happen per ~100 KiB rather than per read.
    const GATHER_UNTIL: usize = BUF - 8 * 1024;
    let _ = std::thread::Builder::new()
        .name("shell-read".into())
        .spawn(move || {
            let mut buf = vec![0u8; BUF];
            let mut done = false;
            while !done {
                let mut filled = 0;
                loop {
                    match reader.read(&mut buf[filled..]) {
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        // EIO: every process holding the slave is gone (Linux's end of file).
                        Ok(0) | Err(_) => {
                            done = true;
                            break;
                        }
                        Ok(n) => filled += n,
                    }
                    if filled >= GATHER_UNTIL || !readable_now(&reader) {
                        break;
                    }
                }
                if filled == 0 {
                    continue;
                }
                let mut st = lock(&state);
                let ui = st.output.feed(&buf[..filled]);
                if !ui.is_empty() {
                    st.ui.events.emit(Event::ToolOutput {
                        call_id: st.ui.call_id.clone(),
                        chunk: ui,
                    });
                }
                // No wakeup per chunk: waiters return at exit, EOF, yield or timeout.
            }
            lock(&state).eof = true;
            tx.send_modify(|n| *n += 1);
        });
}

/// How long a write may wait for a command to drain its terminal.
const WRITE_PATIENCE: Duration = Duration::from_secs(5);

fn terminal(step: &str, source: std::io::Error) -> ToolError {
    ToolError::Terminal {
        step: step.to_string(),
        source,
    }
}

fn sandbox_limits(policy: &SandboxPolicy) -> Option<String> {
    use crate::protocol::SandboxMode;
    let writes = match policy.mode {
        SandboxMode::Off => return None,
        SandboxMode::ReadOnly => "only temp dirs are writable".to_string(),
        SandboxMode::WorkspaceWrite => {
            "only the workspace, temp dirs and configured dirs are writable; .git/hooks and \
             .git/config are read-only"
                .to_string()
        }
    };
    let net = if policy.network {
        ""
    } else {
        "; network access is off"
    };
    let home = if policy.backend == crate::sandbox::Backend::Bubblewrap {
        "; the home shows only toolchain folders (more with --read)"
    } else {
        ""
    };
    Some(format!(
        "sandbox ({}): {writes}{net}{home}; ptrace and io_uring are denied",
        policy.mode
    ))
}

/// Environment variable names that usually hold credentials.
pub fn looks_secret(name: &str) -> bool {
    crate::sandbox::env::looks_secret(name)
}

/// Turns off output post-processing (`\n` → `\r\n`) on the PTY: nothing renders this
/// terminal directly, and it spares the kernel a per-byte pass over large outputs.
fn raw_output(slave: &std::fs::File) {
    use nix::sys::termios::{OutputFlags, SetArg, tcgetattr, tcsetattr};
    if let Ok(mut t) = tcgetattr(slave) {
        t.output_flags.remove(OutputFlags::OPOST);
        let _ = tcsetattr(slave, SetArg::TCSANOW, &t);
    }
}

/// The live sessions of one agent session. Dropping the table kills them all.
#[derive(Default)]
pub struct SessionTable {
    sessions: Mutex<BTreeMap<u32, Arc<ShellSession>>>,
    next_id: AtomicU32,
}

impl SessionTable {
    fn map(&self) -> MutexGuard<'_, BTreeMap<u32, Arc<ShellSession>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh id, or an error when `MAX_SESSIONS` commands are already running.
    pub fn reserve_id(&self) -> Result<u32, ToolError> {
        let mut map = self.map();
        map.retain(|_, s| !s.is_finished());
        if map.len() >= MAX_SESSIONS {
            // Make room by forgetting commands that exited but were never polled again.
            map.retain(|_, s| !s.has_exited());
        }
        if map.len() >= MAX_SESSIONS {
            return Err(ToolError::TooManySessions {
                max: MAX_SESSIONS,
                running: map.keys().copied().collect(),
            });
        }
        Ok(self.next_id.fetch_add(1, Ordering::Relaxed) + 1)
    }

    pub fn insert(&self, session: Arc<ShellSession>) {
        self.map().insert(session.id, session);
    }

    pub fn get(&self, id: u32) -> Option<Arc<ShellSession>> {
        self.map().get(&id).cloned()
    }

    pub fn remove(&self, id: u32) {
        self.map().remove(&id);
    }

    /// Ids of commands still running.
    pub fn live_ids(&self) -> Vec<u32> {
        self.map()
            .iter()
            .filter(|(_, s)| !s.is_finished())
            .map(|(k, _)| *k)
            .collect()
    }

    /// Kills every session (turn end, interrupt, shutdown).
    pub fn kill_all(&self) {
        let sessions: Vec<_> = std::mem::take(&mut *self.map()).into_values().collect();
        for s in sessions {
            s.kill_now();
        }
    }
}

impl Drop for SessionTable {
    fn drop(&mut self) {
        self.kill_all();
    }
}
