//! Runs one phase's process in its own process group with a wall-clock limit, and kills the
//! whole group (SIGTERM, then SIGKILL) when the limit passes.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use rustix::process::Signal;

/// How the process ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    /// The process could not be started (missing binary, bad cwd): an infrastructure error.
    SpawnFailed(String),
    /// The job was interrupted (Ctrl-C, SIGTERM) while it ran: it was ended as a timeout is.
    Cancelled,
}

impl Exit {
    pub fn success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }
}

/// Start, end and exit of one phase.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub exit: Exit,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub duration: Duration,
}

/// How long a process gets between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_millis(1500);

/// Set by the first SIGINT or SIGTERM of `baton eval` ([`on_interrupt`]); a second one ends
/// the process at once.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Never set: the cancel flag of jobs that no signal interrupts (the library's callers).
pub static NEVER: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    if INTERRUPTED.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

/// Makes SIGINT and SIGTERM interrupt the job (running trials are ended and recorded as
/// cancelled, no new one starts, the partial results are written) instead of killing baton.
pub fn on_interrupt() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only touches an atomic and calls _exit.
        unsafe {
            libc::signal(sig, on_signal as *const () as libc::sighandler_t);
        }
    }
}

/// Runs `cmd` with stdin closed and output into the given files, for at most `limit`, or until
/// `cancel` is set.
pub fn run(
    mut cmd: Command,
    limit: Duration,
    stdout: File,
    stderr: File,
    cancel: &AtomicBool,
) -> Outcome {
    let started_at = Utc::now();
    let start = Instant::now();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .process_group(0);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let program = cmd.get_program().to_string_lossy().into_owned();
            return Outcome {
                exit: Exit::SpawnFailed(format!("cannot start {program}: {e}")),
                started_at,
                finished_at: Utc::now(),
                duration: start.elapsed(),
            };
        }
    };
    let pgid = child.id() as i32;
    let exit = match wait_until(&mut child, start + limit, cancel) {
        Some(status) => exit_of(status),
        None => {
            signal_group(pgid, Signal::TERM);
            if wait_until(&mut child, Instant::now() + KILL_GRACE, &NEVER).is_none() {
                signal_group(pgid, Signal::KILL);
                let _ = child.wait();
            }
            if cancel.load(Ordering::SeqCst) {
                Exit::Cancelled
            } else {
                Exit::TimedOut
            }
        }
    };
    // Whatever the phase left running in the background does not survive it.
    signal_group(pgid, Signal::KILL);
    Outcome {
        exit,
        started_at,
        finished_at: Utc::now(),
        duration: start.elapsed(),
    }
}

/// Polls with a growing interval: short phases (a nop agent) end within a millisecond or two
/// of the process, long ones cost at most one wake-up every 20 ms.
fn wait_until(
    child: &mut std::process::Child,
    deadline: Instant,
    cancel: &AtomicBool,
) -> Option<ExitStatus> {
    let mut pause = Duration::from_micros(500);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return child.wait().ok(),
        }
        let now = Instant::now();
        if now >= deadline || cancel.load(Ordering::SeqCst) {
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

fn exit_of(status: ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(-1),
    }
}

fn signal_group(pgid: i32, signal: Signal) {
    // Only a positive id names a group: 0 would be our own.
    if pgid > 0
        && let Some(pgid) = rustix::process::Pid::from_raw(pgid)
    {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn devnull() -> File {
        File::create("/dev/null").unwrap()
    }

    #[test]
    fn exit_codes_and_timeouts() {
        let mut ok = Command::new("sh");
        ok.args(["-c", "exit 3"]);
        assert_eq!(
            run(ok, Duration::from_secs(5), devnull(), devnull(), &NEVER).exit,
            Exit::Code(3)
        );
        let mut slow = Command::new("sh");
        slow.args(["-c", "sleep 30"]);
        let out = run(
            slow,
            Duration::from_millis(200),
            devnull(),
            devnull(),
            &NEVER,
        );
        assert_eq!(out.exit, Exit::TimedOut);
        let missing = Command::new("/nonexistent/binary");
        assert!(matches!(
            run(
                missing,
                Duration::from_secs(1),
                devnull(),
                devnull(),
                &NEVER
            )
            .exit,
            Exit::SpawnFailed(_)
        ));
    }
}
