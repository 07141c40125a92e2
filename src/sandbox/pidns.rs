//! bwrap's PID namespace from the outside: its first process (bwrap's child, the namespace's
//! init), which the kernel lets exit only once every other process of the namespace is gone, so
//! that "killed" can mean "gone" for everything a sandboxed command started; and bubblewrap's
//! status report of a held command ([`CommandEnd`]), which names that process and says when the
//! command's own process has ended.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

/// A pidfd of the first process of bwrap's PID namespace (bwrap's child): it exits only once
/// every other process of the namespace is gone.
pub fn namespace_init(bwrap: u32) -> Option<OwnedFd> {
    pidfd_of(*children_of(&format!("/proc/{bwrap}/task/{bwrap}"))?.first()?)
}

/// The children of the thread at `task` (`/proc/PID/task/TID`), in order; `None` when the
/// kernel does not say.
fn children_of(task: &str) -> Option<Vec<i32>> {
    let list = std::fs::read_to_string(format!("{task}/children")).ok()?;
    Some(
        list.split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect(),
    )
}

/// Kills and reaps whatever of a sandbox outlived bubblewrap; true when there was any. For a
/// process that is a child subreaper (`baton sandbox`): a process whose parent died is
/// reparented to it, not to the system's init. bubblewrap killed (a stop asked for while it
/// started) before its child — the init of the command's pid namespace — had made
/// bubblewrap's death its own leaves that child running, and it would go on to run the
/// command unwatched after the audit. Killing that init ends its whole namespace, and it is
/// reaped only once the rest of the namespace is gone.
pub fn end_orphans() -> bool {
    let mut any = false;
    loop {
        let children = own_children();
        if children.is_empty() {
            return any;
        }
        any = true;
        for &pid in &children {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        for pid in children {
            let pid = nix::unistd::Pid::from_raw(pid);
            while let Err(nix::errno::Errno::EINTR) = nix::sys::wait::waitpid(pid, None) {}
        }
    }
}

/// The children of this process, of every one of its threads.
fn own_children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| children_of(&t.path().to_string_lossy()))
        .flatten()
        .collect()
}

fn pidfd_of(pid: i32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Waits until the process of `pidfd` has exited: at most `limit`, or however long it takes.
pub fn wait_for_exit(pidfd: &OwnedFd, limit: Option<Duration>) {
    use std::os::fd::AsFd;
    let timeout = match limit {
        Some(limit) => {
            nix::poll::PollTimeout::from(u16::try_from(limit.as_millis()).unwrap_or(u16::MAX))
        }
        None => nix::poll::PollTimeout::NONE,
    };
    loop {
        let mut fds = [nix::poll::PollFd::new(
            pidfd.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, timeout) {
            Err(nix::errno::Errno::EINTR) if limit.is_none() => {}
            _ => return,
        }
    }
}

/// Where bubblewrap tells about a held command: first the pid of the sandbox's first
/// process (the init of its pid namespace), then the command's exit code as soon as the
/// command's own process has exited, before bubblewrap tears the sandbox down. Other
/// processes of the command may still be dying then, or asleep in the kernel:
/// [`CommandEnd::wait_init_gone`] (or the pids cgroup) says when none is left.
#[derive(Debug)]
pub struct CommandEnd {
    read: OwnedFd,
    pending: Vec<u8>,
    /// What the report said, once read (it comes once).
    told: Option<Option<i32>>,
    /// The sandbox's first process (bubblewrap's `child-pid`, the init of the command's pid
    /// namespace), once [`CommandEnd::learn_init`] has read it.
    init: Option<OwnedFd>,
}

impl CommandEnd {
    /// The report read from `read`, the read end of the pipe bubblewrap writes to.
    pub(crate) fn new(read: OwnedFd) -> CommandEnd {
        CommandEnd {
            read,
            pending: Vec::new(),
            told: None,
            init: None,
        }
    }

    /// The descriptor to poll for [`CommandEnd::try_ended`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.read.as_fd()
    }

    /// Blocks until bubblewrap reports the command's end, and returns its exit status as
    /// bubblewrap gives it (128 + the signal for a killed command); `None` when bubblewrap
    /// ended without reporting one (its setup failed, or it was killed).
    pub fn ended(&mut self) -> Option<i32> {
        loop {
            if let Some(told) = self.try_ended() {
                return told;
            }
            self.wait_readable();
        }
    }

    /// Reads bubblewrap's first status line (written once it has made the sandbox's first
    /// process, before the command may start) and holds a pidfd of that process: the init of
    /// the command's pid namespace, which the kernel lets finish its exit only after every
    /// other process in the namespace is gone. Nothing when bubblewrap ended first.
    pub fn learn_init(&mut self) {
        while self.init.is_none() && self.told.is_none() {
            if let Some(pid) = self.take_line_with("child-pid") {
                self.init = i32::try_from(pid).ok().and_then(pidfd_of);
                return;
            }
            match self.read_more() {
                Some(true) => {}
                Some(false) => self.wait_readable(),
                None => return,
            }
        }
    }

    /// Blocks until the sandbox's first process (see [`CommandEnd::learn_init`]) is gone:
    /// then no process of the command is left, asleep in the kernel or not. At once when it
    /// was never learnt.
    pub fn wait_init_gone(&self) {
        if let Some(init) = &self.init {
            wait_for_exit(init, None);
        }
    }

    fn wait_readable(&self) {
        let mut fds = [rustix::event::PollFd::new(
            &self.read,
            rustix::event::PollFlags::IN,
        )];
        // EINTR: look again.
        let _ = rustix::event::poll(&mut fds, None);
    }

    /// The number in the first pending line that has `key`, that line and those before it
    /// consumed; `None` (nothing consumed) when no complete line has it yet.
    fn take_line_with(&mut self, key: &str) -> Option<i64> {
        let mut start = 0;
        while let Some(len) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let line = &self.pending[start..start + len + 1];
            let value = serde_json::from_slice::<serde_json::Value>(line)
                .ok()
                .and_then(|v| v.get(key).and_then(serde_json::Value::as_i64));
            start += len + 1;
            if let Some(n) = value {
                self.pending.drain(..start);
                return Some(n);
            }
        }
        None
    }

    /// Reads what the pipe has: `Some(true)` read some, `Some(false)` nothing yet, `None` at
    /// its end (bubblewrap gone) or on an error; the end is recorded as a report of nothing.
    fn read_more(&mut self) -> Option<bool> {
        let mut buf = [0u8; 512];
        // bubblewrap writes two short lines; anything longer is not its report.
        if self.pending.len() > 64 * 1024 {
            self.told = Some(None);
            return None;
        }
        loop {
            match rustix::io::read(&self.read, &mut buf) {
                Ok(0) => {
                    self.told = Some(None);
                    return None;
                }
                Ok(n) => {
                    self.pending.extend_from_slice(&buf[..n]);
                    return Some(true);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Some(false),
                Err(_) => {
                    self.told = Some(None);
                    return None;
                }
            }
        }
    }

    /// Without blocking: `Some` once the report has come (as [`CommandEnd::ended`] returns
    /// it), `None` while the command may still run.
    pub fn try_ended(&mut self) -> Option<Option<i32>> {
        while self.told.is_none() {
            if let Some(code) = self.take_line_with("exit-code") {
                self.told = Some(i32::try_from(code).ok());
                break;
            }
            if self.read_more() != Some(true) {
                break;
            }
        }
        self.told
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first child of a process is found and its end waited for: what the trial's end
    /// does with bwrap's namespace init.
    #[test]
    fn the_first_child_is_found_and_its_end_waited_for() {
        let mut parent = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .expect("sh");
        let init = (0..200).find_map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            namespace_init(parent.id())
        });
        let init = init.expect("sh's child");
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", parent.id()))
            .expect("children");
        let child: i32 = children.trim().parse().expect("one child");
        // Still running: the wait ends at its limit.
        wait_for_exit(&init, Some(Duration::from_millis(50)));
        assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
        let child_pid = rustix::process::Pid::from_raw(child).expect("a child's pid");
        let _ = rustix::process::kill_process(child_pid, rustix::process::Signal::KILL);
        wait_for_exit(&init, Some(Duration::from_secs(10)));
        let _ = parent.wait();
        // Exited (and reaped by its parent, or a zombie for a moment): not running.
        let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        assert!(
            state.is_empty() || state.contains(") Z"),
            "still running: {state}"
        );
    }
}
