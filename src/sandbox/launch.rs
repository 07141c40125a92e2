//! Spawning a command inside the sandbox. Everything that allocates or opens files (the Landlock
//! ruleset, the seccomp program, the cgroup, mount paths) is prepared in the parent; the child's
//! `pre_exec` hook only issues raw syscalls, which keeps it async-signal-safe in a multithreaded
//! parent. Order in the child: new session → join cgroup / rlimit → mount namespace with git
//! protections → no_new_privs → Landlock → seccomp → exec.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use super::SandboxError;
use super::fs_rules;
use super::pids::{self, PidsCgroup, ProcessBound};
use super::policy::SandboxPolicy;
use super::syscall_filter;
use crate::protocol::SandboxMode;

/// How the child relates to the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// New session with fd 0 (a PTY slave) as controlling terminal; the child leads its group.
    PtyLeader,
    /// New process group, no terminal change (pipes).
    NewGroup,
    /// Stay in the caller's group and terminal (`baton sandbox` run interactively).
    Inherit,
}

/// One bind mount the child makes in its private mount namespace.
struct BindMount {
    path: CString,
    /// Remount read-only with these flags (locked flags of the source mount kept).
    read_only: Option<libc::c_ulong>,
}

/// User-namespace maps for a non-root caller (mounts need CAP_SYS_ADMIN in some namespace).
struct UserNs {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// Everything the child needs, prepared before fork.
pub struct PreparedSandbox {
    mode: SandboxMode,
    landlock: Option<OwnedFd>,
    seccomp: Vec<seccompiler::sock_filter>,
    mounts: Vec<BindMount>,
    userns: Option<UserNs>,
    bound: ProcessBound,
    session: Session,
}

impl std::fmt::Debug for PreparedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedSandbox")
            .field("mode", &self.mode)
            .field("mounts", &self.mounts.len())
            .field("bound", &self.bound)
            .field("session", &self.session)
            .finish()
    }
}

impl PreparedSandbox {
    /// Prepares the sandbox for `policy`. Refuses (Err) when the kernel can't enforce it;
    /// `off` prepares only the session/process-group handling.
    pub fn prepare(policy: &SandboxPolicy, session: Session) -> Result<Self, SandboxError> {
        if policy.mode == SandboxMode::Off {
            return Ok(PreparedSandbox {
                mode: SandboxMode::Off,
                landlock: None,
                seccomp: Vec::new(),
                mounts: Vec::new(),
                userns: None,
                bound: ProcessBound::Unenforced("sandbox off".into()),
                session,
            });
        }
        let landlock = Some(fs_rules::build_ruleset(policy)?);
        let seccomp = syscall_filter::build_filter(policy.network)?;
        ensure_git_protections_exist(policy);
        let mut mounts = Vec::new();
        for dir in policy.pinned_git_dirs() {
            mounts.push(BindMount {
                path: c_path(&dir)?,
                read_only: None,
            });
        }
        for p in policy.protected_paths() {
            mounts.push(BindMount {
                path: c_path(&p)?,
                read_only: Some(locked_mount_flags(&p)),
            });
        }
        // SAFETY: getuid/getgid/geteuid have no failure modes.
        let (uid, gid, euid) = unsafe { (libc::getuid(), libc::getgid(), libc::geteuid()) };
        let userns = (!mounts.is_empty() && euid != 0).then(|| UserNs {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        });
        Ok(PreparedSandbox {
            mode: policy.mode,
            landlock,
            seccomp,
            mounts,
            userns,
            bound: pids::prepare(policy.max_processes),
            session,
        })
    }

    pub fn mode(&self) -> SandboxMode {
        self.mode
    }

    /// The pids cgroup of this command, if one bounds it.
    pub fn cgroup(&self) -> Option<&PidsCgroup> {
        match &self.bound {
            ProcessBound::Cgroup(c) => Some(c),
            _ => None,
        }
    }

    /// Why the process bound is not enforced, if it isn't.
    pub fn unenforced_bound(&self) -> Option<&str> {
        match &self.bound {
            ProcessBound::Unenforced(why) if self.mode != SandboxMode::Off => Some(why),
            _ => None,
        }
    }

    /// Installs the child-side hook on `cmd`. Keep `self` alive (it owns the cgroup) for as long
    /// as the command's processes may run.
    pub fn install(self: &Arc<Self>, cmd: &mut Command) {
        let me = Arc::clone(self);
        // SAFETY: `apply_in_child` makes only raw syscalls on data prepared before fork.
        unsafe {
            cmd.pre_exec(move || me.apply_in_child());
        }
    }

    /// Runs in the forked child. Async-signal-safe: no allocation, no locks.
    fn apply_in_child(&self) -> std::io::Result<()> {
        // SAFETY (whole fn): raw syscalls with pointers into `self`, which outlives the call.
        unsafe {
            // The parent may ignore these (`baton sandbox` does while it waits); the
            // command must not inherit that.
            for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            match self.session {
                Session::PtyLeader => {
                    step(libc::setsid() >= 0, b"setsid")?;
                    step(libc::ioctl(0, libc::TIOCSCTTY, 0) >= 0, b"TIOCSCTTY")?;
                }
                Session::NewGroup => step(libc::setpgid(0, 0) == 0, b"setpgid")?,
                Session::Inherit => {}
            }
            if self.mode == SandboxMode::Off {
                return Ok(());
            }
            match &self.bound {
                ProcessBound::Cgroup(cg) => {
                    let ok = libc::write(cg.procs.as_raw_fd(), b"0".as_ptr().cast(), 1) == 1;
                    step(ok, b"joining the pids cgroup")?;
                }
                ProcessBound::Rlimit(n) => {
                    let lim = libc::rlimit {
                        rlim_cur: *n,
                        rlim_max: *n,
                    };
                    step(
                        libc::setrlimit(libc::RLIMIT_NPROC, &lim) == 0,
                        b"RLIMIT_NPROC",
                    )?;
                }
                ProcessBound::Unenforced(_) => {}
            }
            if !self.mounts.is_empty() {
                self.enter_mount_namespace()?;
            }
            step(
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0,
                b"no_new_privs",
            )?;
            if let Some(fd) = &self.landlock {
                let r = libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0);
                step(r == 0, b"landlock_restrict_self")?;
            }
            let prog = SockFprog {
                len: self.seccomp.len() as libc::c_ushort,
                filter: self.seccomp.as_ptr(),
            };
            let r = libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0,
                &prog as *const SockFprog,
            );
            step(r == 0, b"seccomp")?;
        }
        Ok(())
    }

    /// A private mount namespace where `.git` is pinned and hooks/config are read-only.
    unsafe fn enter_mount_namespace(&self) -> std::io::Result<()> {
        // SAFETY: raw syscalls on NUL-terminated paths owned by `self`.
        unsafe {
            let mut flags = libc::CLONE_NEWNS;
            if self.userns.is_some() {
                flags |= libc::CLONE_NEWUSER;
            }
            step(libc::unshare(flags) == 0, b"unshare(mount namespace)")?;
            if let Some(ns) = &self.userns {
                write_proc(c"/proc/self/setgroups", b"deny")?;
                write_proc(c"/proc/self/uid_map", &ns.uid_map)?;
                write_proc(c"/proc/self/gid_map", &ns.gid_map)?;
            }
            let none = std::ptr::null::<libc::c_char>();
            step(
                libc::mount(
                    none,
                    c"/".as_ptr(),
                    none,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) == 0,
                b"making mounts private",
            )?;
            for m in &self.mounts {
                let p = m.path.as_ptr();
                step(
                    libc::mount(p, p, none, libc::MS_BIND, std::ptr::null()) == 0,
                    b"bind-mounting a protected git path",
                )?;
                if let Some(locked) = m.read_only {
                    let f = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | locked;
                    step(
                        libc::mount(none, p, none, f, std::ptr::null()) == 0,
                        b"remounting a git path read-only",
                    )?;
                }
            }
        }
        Ok(())
    }
}

#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

/// Turns a failed child step into an error, after telling the terminal which step failed.
fn step(ok: bool, what: &'static [u8]) -> std::io::Result<()> {
    if ok {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    let prefix: &[u8] = b"baton sandbox: setup failed at ";
    // SAFETY: write(2) of static buffers to stderr.
    unsafe {
        libc::write(2, prefix.as_ptr().cast(), prefix.len());
        libc::write(2, what.as_ptr().cast(), what.len());
        libc::write(2, b"\r\n".as_ptr().cast(), 2);
    }
    Err(err)
}

unsafe fn write_proc(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: open/write/close on a static path and a prepared buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        step(fd >= 0, b"opening a /proc/self map")?;
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        libc::close(fd);
        step(n == data.len() as isize, b"writing a /proc/self map")
    }
}

fn c_path(p: &Path) -> Result<CString, SandboxError> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Setup(format!("path {} contains a NUL byte", p.display())))
}

/// Mount flags a remount inside a user namespace must keep (the kernel locks them).
fn locked_mount_flags(p: &Path) -> libc::c_ulong {
    let Ok(c) = c_path(p) else { return 0 };
    // SAFETY: statvfs writes into a zeroed struct we own.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return 0;
    }
    let mut f = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            f |= ms_flag;
        }
    }
    f
}

/// A `.git` directory without `hooks` or `config` would let a command create them; create
/// the empty defaults (what `git init` makes anyway) so the protections have something to pin.
fn ensure_git_protections_exist(policy: &SandboxPolicy) {
    if policy.mode != SandboxMode::WorkspaceWrite {
        return;
    }
    let mut roots = vec![policy.workspace.clone()];
    roots.extend(policy.writable.iter().cloned());
    for root in roots {
        let git = root.join(".git");
        if std::fs::symlink_metadata(&git).is_ok_and(|m| m.is_dir()) {
            let _ = std::fs::create_dir(git.join("hooks"));
            if !git.join("config").exists() {
                let _ = std::fs::write(git.join("config"), b"");
            }
        }
    }
}
