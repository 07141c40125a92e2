//! The bound on memory a sandboxed command may use, so one command can't push the user's
//! session into the OOM killer. Preferred: a memory cgroup per command — cgroup v2
//! `memory.max` (in the command's pids cgroup, where the memory controller is delegated), or a
//! cgroup v1 `memory` hierarchy where this process may create one (root, usually). Fallback:
//! `RLIMIT_AS` (address space, which over-counts reservations but bounds what can be touched).

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// How the memory bound is enforced for one command.
#[derive(Debug)]
pub enum MemoryBound {
    /// A cgroup v1 memory cgroup; the child joins it by writing to `procs`.
    CgroupV1(MemCgroup),
    /// `memory.max` written in the command's own (v2) pids cgroup.
    CgroupV2,
    /// RLIMIT_AS of this many bytes, set in the child.
    Rlimit(u64),
}

impl MemoryBound {
    pub fn describe(&self) -> String {
        match self {
            MemoryBound::CgroupV1(c) => format!(
                "memory cgroup v1 ({})",
                c.dir
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ),
            MemoryBound::CgroupV2 => "memory cgroup v2 (memory.max)".into(),
            MemoryBound::Rlimit(n) => format!(
                "RLIMIT_AS ({} MiB per process: a command's processes together are not \
                 bounded; its /dev/shm holds one bound more)",
                n >> 20
            ),
        }
    }
}

/// A v1 memory cgroup made for one command; back to the pool or removed on drop.
#[derive(Debug)]
pub struct MemCgroup {
    dir: PathBuf,
    /// `tasks`, opened for the child to write "0" into before exec (see `pids::join_file`).
    pub procs: File,
}

static POOL: Mutex<Vec<MemCgroup>> = Mutex::new(Vec::new());
const POOL_SIZE: usize = 8;

impl Drop for MemCgroup {
    fn drop(&mut self) {
        remove_stale_once();
        let dir = std::mem::take(&mut self.dir);
        let empty = fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|s| s.trim().is_empty());
        if empty && let Ok(procs) = self.procs.try_clone() {
            let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
            if pool.len() < POOL_SIZE {
                pool.push(MemCgroup { dir, procs });
                return;
            }
        }
        // Its processes are being killed with the pids cgroup: remove it once they are gone.
        let _ = std::thread::Builder::new()
            .name("memcg-rmdir".into())
            .spawn(move || {
                for _ in 0..200 {
                    if dir.as_os_str().is_empty() || fs::remove_dir(&dir).is_ok() || !dir.exists() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            });
    }
}

/// Chooses the bound for a command limited to `bytes`; `v2_cgroup` is the command's own
/// pids cgroup when that is a v2 one.
pub fn prepare(bytes: u64, v2_cgroup: Option<&Path>) -> MemoryBound {
    if let Some(dir) = v2_cgroup
        && dir.join("memory.max").exists()
        && fs::write(dir.join("memory.max"), bytes.to_string()).is_ok()
    {
        let _ = fs::write(dir.join("memory.swap.max"), "0");
        return MemoryBound::CgroupV2;
    }
    match create_v1(bytes) {
        Some(cg) => MemoryBound::CgroupV1(cg),
        None => MemoryBound::Rlimit(bytes),
    }
}

fn own_v1_memory_cgroup() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/cgroup").ok()?;
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then(|| Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')))
    })
}

/// The memory hierarchy whose leftovers [`remove_stale_once`] removes.
static STALE_PARENT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Removes the memory cgroups dead baton processes left, once per process, after a command
/// of ours ended (not before a join: see the pids bound's `remove_stale_once`).
fn remove_stale_once() {
    static CLEANED: std::sync::Once = std::sync::Once::new();
    if let Some(parent) = STALE_PARENT.get() {
        CLEANED.call_once(|| remove_stale(parent));
    }
}

/// Removes `baton-<pid>-<n>` cgroups left by baton processes that no longer exist.
fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let pid = name
            .to_str()
            .and_then(|n| n.strip_prefix("baton-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = fs::remove_dir(e.path());
        }
    }
}

fn set_limits(dir: &Path, bytes: u64) -> bool {
    if fs::write(dir.join("memory.limit_in_bytes"), bytes.to_string()).is_err() {
        return false;
    }
    // Swap counts too where the kernel accounts it (memsw must be ≥ the memory limit).
    let memsw = dir.join("memory.memsw.limit_in_bytes");
    if memsw.exists() {
        let _ = fs::write(memsw, bytes.to_string());
    }
    true
}

fn create_v1(bytes: u64) -> Option<MemCgroup> {
    let spare = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
    if let Some(cg) = spare {
        // Lowering memsw below the old memory limit fails: raise memory first, then set both.
        let _ = fs::write(cg.dir.join("memory.memsw.limit_in_bytes"), "-1");
        if set_limits(&cg.dir, bytes) {
            return Some(cg);
        }
    }
    let parent = own_v1_memory_cgroup()?;
    if !parent.join("memory.limit_in_bytes").exists() {
        return None;
    }
    let _ = STALE_PARENT.set(parent.clone());
    let dir = parent.join(format!(
        "baton-{}-{}",
        std::process::id(),
        NEXT_ID.fetch_add(1, Ordering::Relaxed)
    ));
    if super::pids::adopt_stale(&parent, &dir) {
        // Lowering memsw below the old memory limit fails: raise it first, as for a spare.
        let _ = fs::write(dir.join("memory.memsw.limit_in_bytes"), "-1");
    } else {
        fs::create_dir(&dir).ok()?;
    }
    let procs = OpenOptions::new()
        .write(true)
        .open(super::pids::join_file(&dir))
        .ok()
        .filter(|_| set_limits(&dir, bytes));
    match procs {
        Some(procs) => Some(MemCgroup { dir, procs }),
        None => {
            let _ = fs::remove_dir(&dir);
            None
        }
    }
}
