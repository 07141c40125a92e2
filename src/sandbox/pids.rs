//! The bound on processes a sandboxed command may create. Preferred: a fresh pids cgroup (v1 or
//! v2, where this process may create one), which also lets us kill every process the command
//! left behind, even ones that escaped its process group. Fallback: RLIMIT_NPROC with headroom
//! over what this user already runs (not enforced for root, which is why the cgroup comes first).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::SandboxError;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// How the process bound is enforced for one command.
#[derive(Debug)]
pub enum ProcessBound {
    /// A cgroup with `pids.max`; the child joins it by writing to `procs`.
    Cgroup(PidsCgroup),
    /// RLIMIT_NPROC set in the child.
    Rlimit(u64),
    /// Nothing can enforce it here (root without a writable pids cgroup).
    Unenforced(String),
}

/// A pids cgroup made for one command; removed (after killing what is left in it) on drop.
#[derive(Debug)]
pub struct PidsCgroup {
    dir: PathBuf,
    /// The file the child writes "0" into before exec to join (see [`join_file`]).
    pub procs: File,
}

/// The file of cgroup `dir` a freshly forked child joins through by writing "0": `tasks` on
/// a v1 hierarchy, `cgroup.procs` on v2. Moving only the writing thread (the child is
/// single-threaded after fork) lets the kernel skip the global threadgroup lock, whose first
/// writer after a quiet spell waits for an RCU grace period: 3–12 ms per command through
/// `cgroup.procs`, under 0.5 ms through `tasks`.
pub(super) fn join_file(dir: &Path) -> PathBuf {
    let tasks = dir.join("tasks");
    if tasks.exists() {
        tasks
    } else {
        dir.join("cgroup.procs")
    }
}

impl PidsCgroup {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Pids currently in the cgroup.
    pub fn members(&self) -> Vec<i32> {
        fs::read_to_string(self.dir.join("cgroup.procs"))
            .map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILLs every member until none is left that could still fork (new forks are bounded
    /// by `pids.max`). A member that is already exiting (a zombie, or one whose exit the kernel
    /// is still tearing down: a sandbox's pid 1 lingers there for a while after bubblewrap
    /// returns) is not waited for: the wait used to add a fixed 2 ms sleep to every command.
    pub fn kill_all(&self) {
        self.kill_members(Some(200), |pid| !exiting(pid));
    }

    /// SIGKILLs the members and waits, however long it takes, until the cgroup is empty. A
    /// member asleep in the kernel (inside a `rename` that waits on a lock, say) cannot die
    /// before that call returns, and its call completes when it does; one in the kernel's exit
    /// path may still wait there for its I/O (native AIO's direct writes) to land. A task
    /// leaves the cgroup only after its memory and files are released: what must see
    /// everything a command did (the git audit) waits for that. [`PidsCgroup::kill_all`]
    /// gives up on a sleeping member after a while, and takes an exiting one for gone.
    pub fn wait_gone(&self) {
        self.kill_members(None, |_| true);
    }

    /// Kills the members that `counts` until there is none, or `rounds` times.
    fn kill_members(&self, rounds: Option<usize>, counts: impl Fn(i32) -> bool) {
        let mut pause = std::time::Duration::from_micros(100);
        let mut round = 0;
        while rounds.is_none_or(|n| round < n) {
            round += 1;
            let live: Vec<i32> = self
                .members()
                .into_iter()
                .filter(|pid| counts(*pid))
                .collect();
            if live.is_empty() {
                return;
            }
            // A pid read from our own cgroup (0, a process outside our pid namespace, is skipped:
            // kill(0) would hit our own group); one that is gone answers ESRCH.
            for pid in live.into_iter().filter_map(rustix::process::Pid::from_raw) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(2));
        }
    }
}

/// Whether `pid` is gone or can no longer run: a zombie (`Z`) or dead (`X`) in its stat line,
/// or in the kernel's exit path (`PF_EXITING` in its flags: it never returns to user space,
/// so it can't fork; a sandbox's pid 1 spends milliseconds there tearing down its mount
/// namespace), with no thread left. A leader thread that ended with `exit(2)` while its other
/// threads go on shows `Z` (and `PF_EXITING`) too, yet the process still runs and forks: its
/// thread count says so.
fn exiting(pid: i32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    stat_says_exiting(&stat)
}

/// The kernel's `PF_EXITING` task flag (include/linux/sched.h).
const PF_EXITING: u64 = 0x4;

/// [`exiting`] on the text of a `/proc/PID/stat`.
fn stat_says_exiting(stat: &str) -> bool {
    // The state follows the command name, which is in parentheses and may contain any byte;
    // then ppid, pgrp, session, tty, tpgid, flags, …, the thread count 17 fields after the
    // state.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return false;
    };
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    let dead = fields
        .first()
        .and_then(|state| state.chars().next())
        .is_some_and(|state| matches!(state, 'Z' | 'X' | 'x'));
    let in_exit = fields
        .get(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0);
    let threads: Option<u64> = fields.get(17).and_then(|n| n.parse().ok());
    (dead || in_exit) && threads.is_some_and(|n| n <= 1)
}

impl Drop for PidsCgroup {
    fn drop(&mut self) {
        self.kill_all();
        remove_stale_once();
        // Creating and removing cgroups costs milliseconds (RCU grace periods): an empty one
        // goes back to the pool for the next command instead.
        if self.members().is_empty()
            && let Ok(procs) = self.procs.try_clone()
        {
            let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < POOL_SIZE {
                pool.push(PidsCgroup {
                    dir: std::mem::take(&mut self.dir),
                    procs,
                });
                return;
            }
        }
        let dir = std::mem::take(&mut self.dir);
        let procs = self.procs.try_clone().ok();
        // Killed and exiting processes leave the cgroup once reaped: pool it (or remove it)
        // then, off the caller's path.
        let _ = std::thread::Builder::new()
            .name("cgroup-reuse".into())
            .spawn(move || pool_when_empty(dir, procs));
    }
}

/// Spare empty cgroups of this process, reused before making new ones.
static POOL: Mutex<Vec<PidsCgroup>> = Mutex::new(Vec::new());
const POOL_SIZE: usize = 8;

/// Once `dir` has no members: back to the pool when there is room, else removed.
fn pool_when_empty(dir: PathBuf, procs: Option<File>) {
    if dir.as_os_str().is_empty() {
        return;
    }
    for _ in 0..200 {
        let empty = fs::read_to_string(dir.join("cgroup.procs")).map(|s| s.trim().is_empty());
        match empty {
            Err(_) => return,
            Ok(true) => {
                if let Some(procs) = procs {
                    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
                    if pool.len() < POOL_SIZE {
                        pool.push(PidsCgroup { dir, procs });
                        return;
                    }
                }
                let _ = fs::remove_dir(&dir);
                return;
            }
            Ok(false) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// The pids hierarchy whose leftovers [`remove_stale_once`] removes.
static STALE_PARENT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Removes the cgroups dead baton processes left, once per process and only after a command
/// of ours has ended: the kernel tears a removed cgroup down after an RCU grace period while
/// holding the cgroup lock, and a command joining its own cgroup in that window waits for it
/// (measured on a loaded 2-core machine: fork, joins and exec of bubblewrap took 23 ms with
/// the removal just before, 10 ms without).
fn remove_stale_once() {
    static CLEANED: std::sync::Once = std::sync::Once::new();
    if let Some(parent) = STALE_PARENT.get() {
        CLEANED.call_once(|| remove_stale(parent));
    }
}

/// The pid in a `baton-<pid>-<n>` cgroup name, when that process no longer exists.
fn dead_owner(name: &std::ffi::OsStr) -> Option<i32> {
    name.to_str()
        .and_then(|n| n.strip_prefix("baton-"))
        .and_then(|n| n.split('-').next())
        .and_then(|p| p.parse::<i32>().ok())
        .filter(|pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Takes over an empty cgroup a dead baton process left in `parent` by renaming it to `dir`
/// (a rename is atomic: of two baton processes racing for it, one gets it). Reusing it costs
/// nothing, while creating one and removing the old costs a grace period of the kernel's
/// cgroup teardown that the next join waits for. `false` when there is none to take.
pub(super) fn adopt_stale(parent: &Path, dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(parent) else {
        return false;
    };
    for e in entries.flatten() {
        let old = e.path();
        if dead_owner(&e.file_name()).is_none() || fs::rename(&old, dir).is_err() {
            continue;
        }
        let empty = fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|s| s.trim().is_empty());
        if empty {
            return true;
        }
        // Processes of a dead baton still run in it: not ours to bound (or kill).
        let _ = fs::rename(dir, &old);
    }
    false
}

/// Removes `baton-<pid>-<n>` cgroups left by baton processes that no longer exist.
fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        if dead_owner(&e.file_name()).is_some() {
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// Chooses and prepares the bound for a command that may run `max` processes.
pub fn prepare(max: u32) -> ProcessBound {
    match create_cgroup(max) {
        Ok(cg) => ProcessBound::Cgroup(cg),
        Err(why) => {
            if rustix::process::geteuid().is_root() {
                ProcessBound::Unenforced(format!(
                    "running as root (RLIMIT_NPROC does not apply) and no pids cgroup: {why}"
                ))
            } else {
                ProcessBound::Rlimit(user_process_count() + u64::from(max))
            }
        }
    }
}

/// The pids hierarchy this process lives in: (mount dir of our cgroup, is v2).
fn own_pids_cgroup() -> Result<PathBuf, SandboxError> {
    let proc_cgroup = Path::new("/proc/self/cgroup");
    let text = fs::read_to_string(proc_cgroup).map_err(|e| io("reading", proc_cgroup, e))?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        if controllers.split(',').any(|c| c == "pids") {
            let dir = Path::new("/sys/fs/cgroup/pids").join(path.trim_start_matches('/'));
            if dir.join("pids.max").exists() || dir.join("cgroup.procs").exists() {
                return Ok(dir);
            }
        }
    }
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("0::") {
            let dir = Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
            let controllers =
                fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "pids") {
                return Ok(dir);
            }
            return Err(SandboxError::PidsNotDelegated { cgroup: dir });
        }
    }
    Err(SandboxError::NoPidsHierarchy)
}

fn io(action: &'static str, path: &Path, source: std::io::Error) -> SandboxError {
    SandboxError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn create_cgroup(max: u32) -> Result<PidsCgroup, SandboxError> {
    let spare = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
    if let Some(cg) = spare
        && fs::write(cg.dir.join("pids.max"), max.to_string()).is_ok()
    {
        return Ok(cg);
    }
    let parent = own_pids_cgroup()?;
    let _ = STALE_PARENT.set(parent.clone());
    let name = format!(
        "baton-{}-{}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    );
    let dir = parent.join(name);
    if !adopt_stale(&parent, &dir) {
        fs::create_dir(&dir).map_err(|e| io("creating", &dir, e))?;
    }
    let setup = || -> Result<File, SandboxError> {
        let pids_max = dir.join("pids.max");
        fs::write(&pids_max, max.to_string()).map_err(|e| io("writing", &pids_max, e))?;
        let procs = join_file(&dir);
        OpenOptions::new()
            .write(true)
            .open(&procs)
            .map_err(|e| io("opening", &procs, e))
    };
    match setup() {
        Ok(procs) => Ok(PidsCgroup { dir, procs }),
        Err(e) => {
            let _ = fs::remove_dir(&dir);
            Err(e)
        }
    }
}

/// Processes (threads count too for RLIMIT_NPROC) this real uid runs now.
pub(super) fn user_process_count() -> u64 {
    let uid = rustix::process::getuid().as_raw();
    let Ok(entries) = fs::read_dir("/proc") else {
        return 0;
    };
    let mut n = 0u64;
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(status) = fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let mut mine = false;
        let mut threads = 1u64;
        for line in status.lines() {
            if let Some(rest) = line.strip_prefix("Uid:") {
                mine = rest.split_whitespace().next() == Some(&uid.to_string());
            } else if let Some(rest) = line.strip_prefix("Threads:") {
                threads = rest.trim().parse().unwrap_or(1);
            }
        }
        if mine {
            n += threads;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid no process can have (above the kernel's maximum).
    const DEAD: i32 = i32::MAX;

    #[test]
    fn a_zombie_or_a_missing_process_counts_as_exiting_a_running_one_does_not() {
        assert!(!exiting(std::process::id() as i32));
        assert!(exiting(DEAD));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        // Not reaped yet: a zombie once it has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !exiting(pid) {
            assert!(std::time::Instant::now() < deadline, "child never exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // `exiting` is true from the moment the kernel marks it exiting (PF_EXITING), a moment
        // before it is a zombie.
        let zombie = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z"))
        };
        while !zombie() {
            assert!(
                std::time::Instant::now() < deadline,
                "child never became a zombie"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.wait().unwrap();
    }

    #[test]
    fn a_task_in_the_exit_path_counts_as_exiting_unless_other_threads_run() {
        // pid (comm) state ppid pgrp session tty tpgid flags … num_threads (field 20).
        let line = |state: &str, flags: u64, threads: u64| {
            format!(
                "42 (a) b) {state} 1 42 42 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 {threads} 0 \
                 1000 0 0"
            )
        };
        assert!(!stat_says_exiting(&line("R", 0x400100, 1)));
        assert!(!stat_says_exiting(&line("S", 0x400140, 1)));
        assert!(stat_says_exiting(&line("D", 0x400104, 1)));
        assert!(stat_says_exiting(&line("Z", 0x400104, 1)));
        assert!(!stat_says_exiting(&line("Z", 0x400104, 3)));
        assert!(!stat_says_exiting(&line("D", 0x400104, 2)));
        assert!(!stat_says_exiting("garbage"));
    }

    fn fake_cgroup(parent: &Path, name: &str, procs: &str) -> PathBuf {
        let dir = parent.join(name);
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("cgroup.procs"), procs).unwrap();
        dir
    }

    #[test]
    fn an_empty_cgroup_of_a_dead_baton_is_taken_over() {
        let parent = tempfile::tempdir().unwrap();
        let old = fake_cgroup(parent.path(), &format!("baton-{DEAD}-3"), "");
        let new = parent.path().join("baton-1-0");
        assert!(adopt_stale(parent.path(), &new));
        assert!(new.is_dir() && !old.exists());
    }

    #[test]
    fn a_cgroup_still_holding_processes_is_left_alone() {
        let parent = tempfile::tempdir().unwrap();
        let old = fake_cgroup(parent.path(), &format!("baton-{DEAD}-0"), "4242\n");
        let new = parent.path().join("baton-1-0");
        assert!(!adopt_stale(parent.path(), &new));
        assert!(old.is_dir() && !new.exists());
    }

    #[test]
    fn a_cgroup_of_a_live_process_or_of_something_else_is_not_taken() {
        let parent = tempfile::tempdir().unwrap();
        let live = fake_cgroup(
            parent.path(),
            &format!("baton-{}-0", std::process::id()),
            "",
        );
        let other = fake_cgroup(parent.path(), "user.slice", "");
        let new = parent.path().join("baton-1-0");
        assert!(!adopt_stale(parent.path(), &new));
        assert!(live.is_dir() && other.is_dir() && !new.exists());
    }
}
