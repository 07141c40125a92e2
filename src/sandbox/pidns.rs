//! bwrap's PID namespace from the outside: its first process (bwrap's child, the namespace's
//! init), which the kernel lets exit only once every other process of the namespace is gone, so
//! that "killed" can mean "gone" for everything a sandboxed command started.

use std::time::Duration;

/// A pidfd of the first process of bwrap's PID namespace (bwrap's child): it exits only once
/// every other process of the namespace is gone.
pub fn namespace_init(bwrap: u32) -> Option<std::os::fd::OwnedFd> {
    let children = std::fs::read_to_string(format!("/proc/{bwrap}/task/{bwrap}/children")).ok()?;
    let pid: i32 = children.split_whitespace().next()?.parse().ok()?;
    let pid = rustix::process::Pid::from_raw(pid)?;
    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
}

/// Waits until the process of `pidfd` has exited, at most `limit`.
pub fn wait_for_exit(pidfd: &std::os::fd::OwnedFd, limit: Duration) {
    use std::os::fd::AsFd;
    let millis = u16::try_from(limit.as_millis()).unwrap_or(u16::MAX);
    let mut fds = [nix::poll::PollFd::new(
        pidfd.as_fd(),
        nix::poll::PollFlags::POLLIN,
    )];
    let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(millis));
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
        wait_for_exit(&init, Duration::from_millis(50));
        assert!(std::path::Path::new(&format!("/proc/{child}")).exists());
        let child_pid = rustix::process::Pid::from_raw(child).expect("a child's pid");
        let _ = rustix::process::kill_process(child_pid, rustix::process::Signal::KILL);
        wait_for_exit(&init, Duration::from_secs(10));
        let _ = parent.wait();
        // Exited (and reaped by its parent, or a zombie for a moment): not running.
        let state = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        assert!(
            state.is_empty() || state.contains(") Z"),
            "still running: {state}"
        );
    }
}
