//! The world each sandboxed command runs in, built with bubblewrap: its own user, pid, ipc
//! and uts namespaces (and network, when the network is off), the host filesystem bound
//! read-only with only the writable roots bound read-write, a fresh `/dev` (own devpts) and
//! `/proc`, a private `/tmp` per baton process, `/run` and the user's secrets hidden, every
//! capability dropped. [`Bwrap`] is the argument builder every caller (the shell tool,
//! `baton sandbox`, evaluation trials) shares; [`world`] is the one for a [`SandboxPolicy`].

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

use super::SandboxError;
use super::policy::{SandboxPolicy, resolved_once};
use super::visibility;
use crate::protocol::SandboxMode;

/// Where bubblewrap is looked for, in order, before `$PATH`.
const BWRAP_PATHS: &[&str] = &["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"];

/// The bubblewrap binary, or why there is none.
pub fn bwrap_path() -> Result<PathBuf, SandboxError> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            // In PATH, never a folder a command could have written: bubblewrap runs outside
            // the sandbox (it builds it). This lookup is made once per process, before any
            // policy is known.
            let roots = crate::protocol::host_programs::startup_roots();
            BWRAP_PATHS
                .iter()
                .map(PathBuf::from)
                .find(|p| p.is_file())
                .or_else(|| crate::protocol::host_programs::find_program("bwrap", &roots))
        })
        .clone()
        .ok_or_else(|| {
            SandboxError::Unsupported(
                "bubblewrap (`bwrap`) is not installed; install it (`apt install bubblewrap`, \
                 `dnf install bubblewrap`, `pacman -S bubblewrap`), or name the weaker \
                 Landlock-only mode with `[sandbox] backend = \"landlock\"`"
                    .into(),
            )
        })
}

/// How to enable unprivileged user namespaces, for the refusal and `baton doctor`.
const USERNS_FIX: &str = "enable unprivileged user namespaces: `sysctl -w \
     kernel.unprivileged_userns_clone=1` (Debian/Ubuntu kernels), `sysctl -w \
     user.max_user_namespaces=15000`, and on Ubuntu ≥ 23.10 allow them for bwrap in AppArmor \
     (`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`, or an AppArmor profile for \
     bwrap with `userns,`); in a container, use a seccomp profile that allows unshare/clone of \
     namespaces; or name the weaker mode with `[sandbox] backend = \"landlock\"`";

fn sysctl(name: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/{name}"))
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

/// Whether bubblewrap can build a world here, judged without running it (cheap enough for
/// every command): bubblewrap is installed and the kernel settings that refuse user
/// namespaces are not set. [`check_namespaces`] runs it for real (`baton doctor`).
pub fn check_usable() -> Result<(), SandboxError> {
    bwrap_path()?;
    let root = rustix::process::geteuid().is_root();
    let refused = if sysctl("user/max_user_namespaces") == Some(0) {
        Some("user.max_user_namespaces is 0")
    } else if !root && sysctl("kernel/unprivileged_userns_clone") == Some(0) {
        Some("kernel.unprivileged_userns_clone is 0")
    } else {
        None
    };
    match refused {
        Some(why) => Err(SandboxError::Unsupported(format!(
            "bubblewrap cannot create the sandbox's namespaces ({why}); {USERNS_FIX}"
        ))),
        None => Ok(()),
    }
}

/// Runs `true` in fresh namespaces through bubblewrap: `Err` says exactly why it failed and
/// how to fix it.
pub fn check_namespaces() -> Result<(), SandboxError> {
    check_usable()?;
    let bwrap = bwrap_path()?;
    let mut b = Bwrap::isolated(false);
    b.ro_bind(Path::new("/"), Path::new("/"))
        .dev(Path::new("/dev"))
        .proc(Path::new("/proc"));
    let out = Command::new(&bwrap)
        .args(b.args())
        .args(["--", "true"])
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .output()
        .map_err(|e| SandboxError::Setup(format!("running {}: {e}", bwrap.display())))?;
    if out.status.success() {
        return Ok(());
    }
    Err(SandboxError::Unsupported(format!(
        "bubblewrap cannot create the sandbox's namespaces ({}: {}); {USERNS_FIX}",
        bwrap.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// bubblewrap arguments, in the order bubblewrap applies them (later mounts cover earlier).
#[derive(Debug, Clone, Default)]
pub struct Bwrap {
    args: Vec<OsString>,
    /// Where the mounts and symlinks in `args` land, in order, and whether each shows the
    /// host's own file there (a bind of a path onto itself).
    destinations: Vec<(PathBuf, bool)>,
    /// The descriptors the `--bind-fd`/`--ro-bind-fd`/`--ro-bind-data` operations name
    /// (bubblewrap inherits them).
    held_fds: Vec<Arc<OwnedFd>>,
    /// The held binds still in sight (a later mount at or above one covers it).
    held: Vec<HeldMount>,
}

/// A bind of a file baton opened itself: inside the world, `path` must be that file (its
/// device and inode), or a command swapped something on the way while bubblewrap mounted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldMount {
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
}

impl HeldMount {
    /// Whether `path` is, without following a link, the file that was bound there.
    pub fn check(&self) -> Result<(), String> {
        let swapped = || {
            format!(
                "{} is not what baton bound there (the workspace changed while the command \
                 started); run it again",
                self.path.display()
            )
        };
        let meta = std::fs::symlink_metadata(&self.path).map_err(|_| swapped())?;
        if meta.dev() == self.dev && meta.ino() == self.ino {
            Ok(())
        } else {
            Err(swapped())
        }
    }
}

impl Bwrap {
    /// The namespaces and hardening every sandboxed command gets: user (always, so root keeps
    /// no host capability), pid, ipc, uts; a new session (no controlling terminal of the
    /// caller's); killed with its parent; every capability dropped; no nested user namespaces.
    pub fn isolated(network: bool) -> Self {
        let mut b = Bwrap::default();
        for a in [
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--new-session",
            "--die-with-parent",
            "--disable-userns",
            "--cap-drop",
            "ALL",
        ] {
            b.arg(a);
        }
        if !network {
            b.arg("--unshare-net");
        }
        b
    }

    fn arg(&mut self, a: impl AsRef<OsStr>) -> &mut Self {
        self.args.push(a.as_ref().to_owned());
        self
    }

    fn op(&mut self, op: &str, paths: &[&Path]) -> &mut Self {
        self.arg(op);
        for p in paths {
            self.arg(p.as_os_str());
        }
        self
    }

    /// Whether a mount or symlink of this world lands on `path` or a folder above it (the
    /// host's `/` bound onto `/` aside): what is there inside may not be the host's `path`.
    pub fn covers(&self, path: &Path) -> bool {
        self.destinations
            .iter()
            .any(|(d, _)| d != Path::new("/") && path.starts_with(d))
    }

    /// Where the mounts and symlinks land, in order.
    pub fn destinations(&self) -> impl Iterator<Item = &Path> {
        self.destinations.iter().map(|(d, _)| d.as_path())
    }

    /// Whether bubblewrap can mount at `path`: no folder on the way is a link inside (a link
    /// there leads out of the new root while bubblewrap builds it, and the mount fails). A
    /// mount point of this world on the way is a real folder inside, whatever the host has
    /// there; below it, the host's path is judged as the command would find it.
    pub fn lands_without_links(&self, path: &Path) -> bool {
        let mut on_the_way = PathBuf::new();
        for part in path.components() {
            on_the_way.push(part);
            let mounted = self.destinations.iter().any(|(d, _)| *d == on_the_way);
            let link = std::fs::symlink_metadata(&on_the_way).is_ok_and(|m| m.is_symlink());
            if link && !mounted {
                return false;
            }
        }
        true
    }

    /// Whether `path` inside is the host's `path`: the last mount landing on it or above it
    /// binds the host's own path there (not a tmpfs, a symlink or another file).
    pub fn shows_host(&self, path: &Path) -> bool {
        self.destinations
            .iter()
            .rev()
            .find(|(d, _)| path.starts_with(d))
            .is_some_and(|(_, host)| *host)
    }

    /// An operation that puts something at `dst` (its last path); `host`: the host's own
    /// `dst` (a bind of `dst` onto itself).
    fn mount_op(&mut self, op: &str, paths: &[&Path], host: bool) -> &mut Self {
        if let Some(dst) = paths.last() {
            self.landed(dst);
            self.destinations.push((dst.to_path_buf(), host));
        }
        self.op(op, paths)
    }

    /// A mount lands on `dst`: a held bind at or below it is covered, out of the command's
    /// sight, and no longer checked (bubblewrap still makes it, under the new mount).
    fn landed(&mut self, dst: &Path) {
        self.held.retain(|m| !m.path.starts_with(dst));
    }

    /// `src` at `dst`, read-only.
    pub fn ro_bind(&mut self, src: &Path, dst: &Path) -> &mut Self {
        self.mount_op("--ro-bind", &[src, dst], src == dst)
    }

    /// `src` at `dst`, writable.
    pub fn bind(&mut self, src: &Path, dst: &Path) -> &mut Self {
        self.mount_op("--bind", &[src, dst], src == dst)
    }

    /// The file `fd` (opened by the caller, an `O_PATH` descriptor will do) bound onto its own
    /// path `dst`, writable or not. bubblewrap turns the descriptor into a name again before
    /// it mounts (`realpath` of `/proc/self/fd/N`), so a swap in between can still redirect
    /// the mount: the inner helper checks that `dst` is the file `fd` named (device and
    /// inode, no link followed) before the command runs.
    pub fn bind_held(
        &mut self,
        fd: OwnedFd,
        dst: &Path,
        writable: bool,
    ) -> Result<&mut Self, SandboxError> {
        let stat = rustix::fs::fstat(&fd)
            .map_err(|e| SandboxError::Setup(format!("looking at {}: {e}", dst.display())))?;
        let op = if writable {
            "--bind-fd"
        } else {
            "--ro-bind-fd"
        };
        let number = fd.as_raw_fd().to_string();
        self.landed(dst);
        self.held_fds.push(Arc::new(fd));
        self.held.push(HeldMount {
            path: dst.to_path_buf(),
            dev: stat.st_dev,
            ino: stat.st_ino,
        });
        self.destinations.push((dst.to_path_buf(), true));
        self.arg(op).arg(number).arg(dst.as_os_str());
        Ok(self)
    }

    /// `data` as a read-only file at `dst` (bubblewrap copies it into its own tmpfs and binds
    /// that): what a command is shown in place of a host file it must not see whole. The
    /// descriptor is a sealed memfd read once, by the one launch of this world.
    pub fn ro_bind_data(&mut self, data: &[u8], dst: &Path) -> Result<&mut Self, SandboxError> {
        use rustix::fs::{MemfdFlags, SealFlags};
        let failed = |e: std::io::Error| {
            SandboxError::Setup(format!("preparing the copy of {}: {e}", dst.display()))
        };
        let fd = rustix::fs::memfd_create(
            "baton-shown-copy",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(|e| failed(e.into()))?;
        let mut file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut file, data).map_err(failed)?;
        std::io::Seek::rewind(&mut file).map_err(failed)?;
        rustix::fs::fcntl_add_seals(
            &file,
            SealFlags::WRITE | SealFlags::GROW | SealFlags::SHRINK | SealFlags::SEAL,
        )
        .map_err(|e| failed(e.into()))?;
        let fd = OwnedFd::from(file);
        let number = fd.as_raw_fd().to_string();
        self.landed(dst);
        self.held_fds.push(Arc::new(fd));
        self.destinations.push((dst.to_path_buf(), false));
        self.arg("--ro-bind-data").arg(number).arg(dst.as_os_str());
        Ok(self)
    }

    /// The descriptors bubblewrap must inherit for the held binds.
    pub fn held_fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.held_fds.iter().map(|fd| fd.as_raw_fd())
    }

    /// Closes the held binds' descriptors, for a world that is only looked at (what it shows
    /// where), never started.
    pub fn close_held(&mut self) {
        self.held_fds.clear();
        self.held.clear();
    }

    /// Has bubblewrap write its JSON status lines to descriptor `fd` (which it must inherit):
    /// its child's pid (the init of the pid namespace) at the start, and the command's exit
    /// code once the command's own process has exited, before its teardown.
    pub fn report_status_to(&mut self, fd: RawFd) -> &mut Self {
        self.arg("--json-status-fd").arg(fd.to_string())
    }

    /// Where the held binds land, and what must be there.
    pub fn held_mounts(&self) -> Vec<HeldMount> {
        self.held.clone()
    }

    /// An empty tmpfs at `dst`.
    pub fn tmpfs(&mut self, dst: &Path) -> &mut Self {
        self.mount_op("--tmpfs", &[dst], false)
    }

    /// An empty tmpfs at `dst` anyone may write, as a `/tmp` (mode 1777: files only their
    /// owner can remove), holding at most `size` bytes.
    pub fn tmp_dir(&mut self, dst: &Path, size: u64) -> &mut Self {
        self.arg("--perms")
            .arg("1777")
            .arg("--size")
            .arg(size.to_string())
            .tmpfs(dst)
    }

    /// An empty tmpfs at `dst` holding at most `size` bytes.
    pub fn tmpfs_of_size(&mut self, dst: &Path, size: u64) -> &mut Self {
        self.arg("--size").arg(size.to_string()).tmpfs(dst)
    }

    /// Makes the mount at `dst` read-only (the mounts below it keep their own flags).
    pub fn remount_ro(&mut self, dst: &Path) -> &mut Self {
        self.op("--remount-ro", &[dst])
    }

    /// A fresh `/dev` (null, zero, full, random, urandom, tty, own devpts and ptmx).
    pub fn dev(&mut self, dst: &Path) -> &mut Self {
        self.mount_op("--dev", &[dst], false)
    }

    /// A fresh procfs showing only the sandbox's own processes.
    pub fn proc(&mut self, dst: &Path) -> &mut Self {
        self.mount_op("--proc", &[dst], false)
    }

    /// Makes `path` invisible: an empty tmpfs over a directory, `/dev/null` over a file.
    /// Paths that don't exist are left alone.
    pub fn hide(&mut self, path: &Path) -> &mut Self {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => self.tmpfs(path),
            Ok(_) => self.ro_bind(Path::new("/dev/null"), path),
            Err(_) => self,
        }
    }

    /// The working directory inside.
    pub fn chdir(&mut self, dir: &Path) -> &mut Self {
        self.op("--chdir", &[dir])
    }

    /// Installs the seccomp program (classic BPF) read from `fd`, which must be inheritable.
    pub fn seccomp_fd(&mut self, fd: i32) -> &mut Self {
        self.arg("--seccomp").arg(fd.to_string())
    }

    /// A symbolic link at `dst` pointing to `target`.
    pub fn symlink(&mut self, target: &Path, dst: &Path) -> &mut Self {
        self.mount_op("--symlink", &[target, dst], false)
    }

    /// Covers the file at `path` with an empty one (`/dev/null`, read-only), whatever it is.
    pub fn hide_file(&mut self, path: &Path) -> &mut Self {
        self.ro_bind(Path::new("/dev/null"), path)
    }

    /// The uid and gid the command has inside its user namespace (the caller's outside).
    pub fn user(&mut self, uid: u32, gid: u32) -> &mut Self {
        self.arg("--uid")
            .arg(uid.to_string())
            .arg("--gid")
            .arg(gid.to_string())
    }

    /// A cgroup namespace of its own, where the kernel offers one.
    pub fn unshare_cgroup(&mut self) -> &mut Self {
        self.arg("--unshare-cgroup-try")
    }

    /// The host name inside (the uts namespace is always the command's own).
    pub fn hostname(&mut self, name: &str) -> &mut Self {
        self.arg("--hostname").arg(name)
    }

    /// Starts the command with an empty environment: only what [`Bwrap::setenv`] adds after.
    pub fn clearenv(&mut self) -> &mut Self {
        self.arg("--clearenv")
    }

    /// Sets `key=value` in the command's environment.
    pub fn setenv(&mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.arg("--setenv").arg(key).arg(value)
    }

    pub fn args(&self) -> &[OsString] {
        &self.args
    }

    /// `bwrap ARGS -- program args…` (the environment is the caller's to set).
    pub fn command(
        &self,
        program: impl AsRef<OsStr>,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> Result<Command, SandboxError> {
        let mut cmd = Command::new(bwrap_path()?);
        cmd.args(&self.args).arg("--").arg(program).args(args);
        Ok(cmd)
    }
}

/// Set by [`private_tmp`].
static PRIVATE_TMP: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The host folder behind the commands' private `/tmp` and `/var/tmp`, once one was made:
/// the one place outside the workspace and `--write` folders that a command under bubblewrap
/// can write (and name, from its mount table).
pub(crate) fn private_tmp_dir() -> Option<PathBuf> {
    let dir = PRIVATE_TMP.get()?.as_ref().ok()?;
    dir.canonicalize().ok()
}

/// The private `/tmp` of this baton process (a 0700 directory of its own, with `tmp/` and
/// `var-tmp/` inside), shared by its commands so files left in /tmp by one are there for
/// the next; directories of baton processes that are gone are removed on first use.
fn private_tmp() -> Result<&'static Path, SandboxError> {
    PRIVATE_TMP
        .get_or_init(|| {
            let base = std::env::temp_dir();
            // Removing the folders of baton processes that are gone is a handful of directory
            // removals, each of which waits for the file system's journal (0.1 ms on a quiet disk,
            // 1–5 ms each behind other writers): not on the first command's path. The thread
            // never touches this process's own folder (its pid is alive); a removal cut short by
            // the process's exit is finished by the next baton.
            let stale_base = base.clone();
            let _ = std::thread::Builder::new()
                .name("sandbox-tmp-clean".into())
                .spawn(move || remove_stale_tmp(&stale_base));
            private_tmp_in(
                &base,
                rustix::process::getuid().as_raw(),
                std::process::id(),
            )
        })
        .as_ref()
        .map(PathBuf::as_path)
        .map_err(|e| SandboxError::Setup(e.clone()))
}

/// Set by [`tmp_in_memory`].
static TMP_IN_MEMORY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Declares that this process runs a single sandboxed command and ends with it (`baton
/// sandbox`): the command's `/tmp` and `/var/tmp` are then empty tmpfs mounts of its own
/// world, gone with it, instead of folders on the host that outlive the process (creating
/// and later removing those costs journal writes on every run). Its files there live in
/// memory, which the command's memory bound counts.
pub fn tmp_in_memory() {
    TMP_IN_MEMORY.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`tmp_in_memory`] was declared: then building the world makes nothing on disk.
pub(super) fn tmp_is_in_memory() -> bool {
    TMP_IN_MEMORY.load(std::sync::atomic::Ordering::Relaxed)
}

/// The private `/tmp` folder made for process `pid` of `uid` in `base`. The name is guessable,
/// and `base` is everyone's: a name another account took first gives way to one with a
/// random part (a squatter could otherwise stop every command of this process).
fn private_tmp_in(base: &Path, uid: u32, pid: u32) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    for attempt in 0..8 {
        let name = if attempt == 0 {
            format!("baton-sandbox-{uid}-{pid}")
        } else {
            format!("baton-sandbox-{uid}-{pid}-{:016x}", rand::random::<u64>())
        };
        let dir = base.join(name);
        match make_private_tmp(&dir, uid) {
            Ok(()) => return Ok(dir),
            Err(e) => tried.push(format!("{}: {e}", dir.display())),
        }
    }
    Err(format!("creating the private /tmp: {}", tried.join("; ")))
}

/// Makes `dir` a 0700 folder of `uid`'s with `tmp/` and `var-tmp/` inside, replacing what
/// this user left there (a folder of a process with this pid that is gone).
fn make_private_tmp(dir: &Path, uid: u32) -> std::io::Result<()> {
    // Only a folder of this user's is replaced: what another account made by that name (a
    // file, a deep tree) is left, and the name gives way to a random one.
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir() && m.uid() == uid) {
        let _ = crate::untrusted_fs::remove_tree(dir);
    }
    std::fs::DirBuilder::new().mode(0o700).create(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(std::io::Error::other("not a directory of ours"));
    }
    std::fs::DirBuilder::new()
        .mode(0o1777)
        .create(dir.join("tmp"))?;
    std::fs::DirBuilder::new()
        .mode(0o1777)
        .create(dir.join("var-tmp"))
}

fn remove_stale_tmp(base: &Path) {
    let prefix = format!("baton-sandbox-{}-", rustix::process::getuid().as_raw());
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|p| p.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        // Only a folder of this account's own: another account can make one by that name in
        // the shared /tmp (a tree too deep to walk, links), and none of it is baton's.
        let ours = std::fs::symlink_metadata(e.path()).is_ok_and(|m| {
            use std::os::unix::fs::MetadataExt;
            m.is_dir() && m.uid() == rustix::process::getuid().as_raw()
        });
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = crate::untrusted_fs::remove_tree(&e.path());
        }
    }
}

/// Whether `p` is `root` or above it (hiding it would hide a writable root).
fn covers(p: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|r| r.starts_with(p))
}

/// Opens what the world binds by its canonical path (as this process first resolved it:
/// [`resolved_once`]) with no link followed at any component (`untrusted_fs`, beneath `/`):
/// a folder on the way that a command renamed or swapped for a link since makes the open
/// fail, and so the command, instead of binding what the link leads to.
pub(super) struct HeldOpener {
    root: Option<crate::untrusted_fs::Dir>,
}

impl HeldOpener {
    pub(super) fn new() -> Self {
        HeldOpener { root: None }
    }

    pub(super) fn open(&mut self, path: &Path, dir: bool) -> Result<OwnedFd, SandboxError> {
        use rustix::fs::OFlags;
        let mut flags = OFlags::PATH | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        if dir {
            flags |= OFlags::DIRECTORY;
        }
        let changed = |e: &dyn std::fmt::Display| {
            SandboxError::Setup(format!(
                "opening {} to bind it into the sandbox: {e} (a command may have renamed it or \
                 a folder above it, or left a link there; run it again, or start baton again \
                 if the folder moved for good)",
                path.display()
            ))
        };
        if self.root.is_none() {
            self.root =
                Some(crate::untrusted_fs::Dir::open(Path::new("/")).map_err(|e| changed(&e))?);
        }
        let Some(root) = &self.root else {
            return Err(changed(&"no root"));
        };
        let rel = path.strip_prefix("/").map_err(|e| changed(&e))?;
        root.open_beneath(rel, flags, 0).map_err(|e| changed(&e))
    }
}

/// The world for `policy`: what bubblewrap mounts before baton's inner helper runs.
pub fn world(policy: &SandboxPolicy) -> Result<Bwrap, SandboxError> {
    build_world(policy, tmp_is_in_memory())
}

/// The world for `policy` as a value to ask what it shows ([`Bwrap::shows_host`]), never to
/// launch: the same mounts, with `/tmp` a tmpfs, so asking makes no private `/tmp` folder
/// on the host (the file tools ask with the sandbox off too).
pub(super) fn world_to_inspect(policy: &SandboxPolicy) -> Result<Bwrap, SandboxError> {
    let mut world = build_world(policy, true)?;
    world.close_held();
    Ok(world)
}

fn build_world(policy: &SandboxPolicy, tmp_in_memory: bool) -> Result<Bwrap, SandboxError> {
    let mut b = Bwrap::isolated(policy.network);
    b.ro_bind(Path::new("/"), Path::new("/"))
        .dev(Path::new("/dev"))
        .proc(Path::new("/proc"));
    // What a command keeps in a tmpfs is memory its memory cgroup counts, but not
    // RLIMIT_AS, the fallback bound: each tmpfs holds at most the bound.
    let size = policy.memory_limit();
    let var_tmp = Path::new("/var/tmp").is_dir();
    if tmp_in_memory {
        b.tmp_dir(Path::new("/tmp"), size);
        if var_tmp {
            b.tmp_dir(Path::new("/var/tmp"), size);
        }
    } else {
        let tmp = private_tmp()?;
        b.bind(&tmp.join("tmp"), Path::new("/tmp"));
        if var_tmp {
            b.bind(&tmp.join("var-tmp"), Path::new("/var/tmp"));
        }
    }
    b.tmpfs_of_size(Path::new("/dev/shm"), size);
    let home = dirs::home_dir().and_then(|h| h.canonicalize().ok());
    // The longest look of all, at the secrets to hide, runs beside the rest (on a second
    // core where there is one): every command waits for this world to be built.
    std::thread::scope(|scope| {
        let secrets_job = scope.spawn(|| secrets_to_hide(home.as_deref()));
        build_world_around(policy, b, home.as_deref(), secrets_job)
    })
}

/// The secrets a command must not read, each where it is named and where it really is, of
/// those that exist: the home's credentials (or, with no home, those a variable moved), the
/// host's own where this account can read them, other programs' moved by XDG.
fn secrets_to_hide(home: Option<&Path>) -> Vec<PathBuf> {
    let mut secrets: Vec<PathBuf> = match home {
        Some(h) => visibility::home_secrets(h),
        // No home to view, yet a variable may have moved credentials elsewhere.
        None => visibility::moved_secrets(),
    };
    // Only where this account can read them (root): a mount each, for nothing, elsewhere.
    let can_read = |p: &Path| {
        rustix::fs::access(p, rustix::fs::Access::READ_OK).is_ok()
            || (p.is_dir() && rustix::fs::access(p, rustix::fs::Access::EXEC_OK).is_ok())
    };
    secrets.extend(
        visibility::host_secrets()
            .into_iter()
            .filter(|p| can_read(p)),
    );
    // baton's own folders are among `home_secrets` wherever XDG puts them; other programs'
    // credentials moved by XDG are added here.
    for (var, sub) in [("XDG_CONFIG_HOME", "gh"), ("XDG_CONFIG_HOME", "gcloud")] {
        if let Some(d) = std::env::var_os(var).map(PathBuf::from)
            && d.is_absolute()
        {
            secrets.push(d.join(sub));
        }
    }
    let mut present = Vec::new();
    present_at_both_names(secrets, &mut present);
    present
}

/// Adds to `present` each of `secrets` that exists, at its name and where it really is: a
/// toolchain folder that is a link (`~/.cargo -> /data/cargo`) is shown at its name, and its
/// credentials with it.
fn present_at_both_names(secrets: impl IntoIterator<Item = PathBuf>, present: &mut Vec<PathBuf>) {
    // Most of these don't exist: one `lstat` each rules them out, where resolving the path
    // costs a `readlink` per component.
    for s in secrets
        .into_iter()
        .filter(|s| std::fs::symlink_metadata(s).is_ok())
    {
        let real = s.canonicalize().ok();
        for at in [Some(s), real].into_iter().flatten() {
            if !present.contains(&at) {
                present.push(at);
            }
        }
    }
}

/// The rest of [`build_world`], with the secrets to hide coming from `secrets_job`.
fn build_world_around(
    policy: &SandboxPolicy,
    mut b: Bwrap,
    home: Option<&Path>,
    secrets_job: std::thread::ScopedJoinHandle<'_, Vec<PathBuf>>,
) -> Result<Bwrap, SandboxError> {
    let roots: Vec<PathBuf> = if policy.mode == SandboxMode::WorkspaceWrite {
        std::iter::once(&policy.workspace)
            .chain(&policy.writable)
            .filter_map(|p| resolved_once(p))
            .collect()
    } else {
        Vec::new()
    };
    let readable: Vec<PathBuf> = policy
        .readable
        .iter()
        .map(|p| resolved_once(p).unwrap_or_else(|| p.clone()))
        .collect();
    // The home as an allow-list view, unless the user made the home (or a folder above it)
    // the workspace or writable: then all of it is theirs to show. A home under the temp
    // dirs (CI, throwaway accounts) gets the view too, inside the private /tmp.
    let workspace = resolved_once(&policy.workspace);
    let mut opener = HeldOpener::new();
    let view_home = home.filter(|h| !roots.iter().chain(&workspace).any(|r| h.starts_with(r)));
    if let Some(h) = view_home {
        visibility::home_view(&mut b, h, &readable, &roots, &mut opener)?;
    }
    let moved_views = visibility::moved_home_views(&mut b, home, &readable, &roots, &mut opener)?;
    // Runtime sockets (D-Bus, docker, nscd, the user's agents) live under /run.
    let mut hidden: Vec<PathBuf> = vec![PathBuf::from("/run")];
    if std::fs::symlink_metadata("/var/run").is_ok_and(|m| m.is_dir()) {
        hidden.push(PathBuf::from("/var/run"));
    }
    if let Some(rt) = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from)
        && rt.is_absolute()
    {
        hidden.push(rt);
    }
    for p in hidden.iter().filter_map(|p| p.canonicalize().ok()) {
        if !covers(&p, &roots) {
            b.hide(&p);
        }
    }
    if policy.network {
        // Name resolution through systemd-resolved's stub needs its resolv.conf.
        let resolve = Path::new("/run/systemd/resolve");
        if resolve.is_dir() {
            b.ro_bind(resolve, resolve);
        }
    }
    // A home holding a writable root (a workspace in `~alice/proj` run by root, or in the
    // account's own passwd home while `$HOME` points elsewhere) stays shown, but not its
    // credentials.
    let mut homes_shown: Vec<PathBuf> = Vec::new();
    let mut homes_hidden: Vec<PathBuf> = view_home.iter().map(|h| h.to_path_buf()).collect();
    for other in visibility::account_homes(home) {
        if covers(&other, &roots) {
            homes_shown.push(other);
        } else if visibility::reachable_in_sandbox(&other) {
            b.hide(&other);
            homes_hidden.push(other);
        }
    }
    // The same homes where a bind mount shows them elsewhere (round 33: a home bound at
    // `/home/me` from `/data/home/me` was read there).
    for alias in visibility::bind_aliases(&homes_hidden) {
        if !covers(&alias, &roots)
            && b.shows_host(&alias)
            && b.lands_without_links(&alias)
            && visibility::reachable_in_sandbox(&alias)
        {
            b.hide(&alias);
        }
    }
    if policy.mode != SandboxMode::WorkspaceWrite
        && let Some(ws) = resolved_once(&policy.workspace)
    {
        // A read-only workspace must still be seen, also where the private /tmp or a hidden
        // directory covers the host's copy of it.
        b.bind_held(opener.open(&ws, true)?, &ws, false)?;
    }
    // Every bind of a path a command could rename (a writable root, what lies in one) names a
    // descriptor baton opened without following links, and the helper checks that what landed
    // is that file: a command still running could swap a folder for a link in between.
    for root in &roots {
        b.bind_held(opener.open(root, true)?, root, true)?;
    }
    // One look at the repositories serves the pins and the read-only binds.
    let rules = policy.write_rules();
    let in_roots = |p: &Path| roots.iter().any(|r| p.starts_with(r));
    for dir in rules.pinned() {
        // A pin only has to be a mount point; outside the writable roots (a read-only
        // workspace under the host's /tmp) it must not become writable by being one, and
        // where the command does not see the host's folder (a `.git` file or `commondir`
        // naming a folder of the hidden home) it must not show it.
        let Ok(real) = dir.canonicalize() else {
            continue;
        };
        if in_roots(&real) {
            b.bind_held(opener.open(&real, true)?, &real, true)?;
        } else if b.shows_host(&real) {
            b.bind_held(opener.open(&real, true)?, &real, false)?;
        }
    }
    let mut present = match secrets_job.join() {
        Ok(present) => present,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    let shown_credentials = homes_shown.iter().flat_map(|shown| {
        crate::protocol::HOME_CREDENTIALS
            .iter()
            .map(|c| shown.join(c))
    });
    present_at_both_names(shown_credentials, &mut present);
    // A name through a link outside the world's mounts (`XDG_CONFIG_HOME=/opt/cfg`, a link)
    // leads where the secret really is, hidden there (round 32: a mount at the name failed
    // every command).
    for s in present {
        if !covers(&s, &roots)
            && b.shows_host(&s)
            && b.lands_without_links(&s)
            && visibility::reachable_in_sandbox(&s)
            && !visibility::named_by_user(&s, &readable)
        {
            b.hide(&s);
        }
    }
    // Tokens kept in the user's git configs (`url.<base>.insteadOf` with a user part,
    // `http.extraHeader`) are credentials like those hidden above: where a command sees such a
    // file, named or where it really is, it sees a copy without them. A file the global
    // config includes from the viewed home (`~/.config/git/work.inc`, with the identity) is
    // shown so too, where the view shows only what git reads by itself.
    let in_a_view = |p: &Path| {
        view_home.is_some_and(|h| p.starts_with(h)) || moved_views.iter().any(|m| p.starts_with(m))
    };
    for (file, shown) in super::git_guard::user_configs_without_credentials() {
        let real = file.canonicalize().ok().filter(|r| *r != file);
        for at in std::iter::once(file).chain(real) {
            if !covers(&at, &roots)
                && (b.shows_host(&at) || in_a_view(&at))
                && b.lands_without_links(&at)
                && visibility::reachable_in_sandbox(&at)
            {
                b.ro_bind_data(shown.as_bytes(), &at)?;
            }
        }
    }
    let allowed: Vec<PathBuf> = policy
        .unix_sockets
        .iter()
        .map(|p| p.canonicalize().unwrap_or_else(|_| p.clone()))
        .collect();
    visibility::mask_sockets(&mut b, &visibility::host_sockets(), &roots, &allowed);
    // Last, so no writable bind above can cover them. Only what a command could write needs
    // one (outside the writable roots everything is read-only already), and never through a
    // link out of them: a bind shows what it names, hidden or not.
    for p in rules.read_only() {
        let Ok(real) = p.canonicalize() else {
            continue;
        };
        if in_roots(p) && in_roots(&real) && b.shows_host(&real) {
            let dir = real.is_dir();
            b.bind_held(opener.open(&real, dir)?, &real, false)?;
        }
    }
    if let Some(h) = view_home {
        visibility::seal_home(&mut b, h);
    }
    for moved in &moved_views {
        visibility::seal_home(&mut b, moved);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_tmp_name_taken_first_gives_way_to_a_random_one() {
        // Twentieth red team (low): another account that made `baton-sandbox-UID-PID` in the
        // shared /tmp first stopped every command of that baton process.
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let base = tempfile::tempdir().unwrap();
        let uid = rustix::process::getuid().as_raw();
        let squatted = base.path().join(format!("baton-sandbox-{uid}-4242"));
        std::fs::write(&squatted, "taken").unwrap();
        let dir = private_tmp_in(base.path(), uid, 4242).unwrap();
        assert_ne!(dir, squatted);
        assert!(
            dir.to_string_lossy()
                .contains(&format!("baton-sandbox-{uid}-4242-"))
        );
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir() && meta.uid() == uid);
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert!(dir.join("tmp").is_dir() && dir.join("var-tmp").is_dir());
        assert_eq!(std::fs::read_to_string(&squatted).unwrap(), "taken");
        // A folder of this user's from a process with the same pid is replaced in place.
        std::fs::remove_file(&squatted).unwrap();
        std::fs::create_dir(&squatted).unwrap();
        assert_eq!(private_tmp_in(base.path(), uid, 4242).unwrap(), squatted);
    }

    #[test]
    fn only_this_accounts_stale_private_tmp_folders_are_removed_however_deep() {
        // Twenty-fourth red team (critical with 05, medium alone): the cleanup recursed once
        // per folder level and a command's 20,000-deep tree crashed the next session (its
        // command's audit skipped); another account's folder by that name was removed too.
        let base = tempfile::tempdir().unwrap();
        let uid = rustix::process::getuid().as_raw();
        // A pid above every pid_max: that process is gone.
        let stale = base.path().join(format!("baton-sandbox-{uid}-4999999"));
        let mut deep = stale.join("tmp");
        std::fs::create_dir_all(&deep).unwrap();
        let mut dir = crate::untrusted_fs::Dir::open(&deep).unwrap();
        for _ in 0..3000 {
            dir = dir.dir(Path::new("d"), Some(0o755)).unwrap();
        }
        deep.push("d");
        let foreign = base.path().join(format!("baton-sandbox-{uid}-4999998"));
        std::fs::create_dir_all(foreign.join("tmp")).unwrap();
        let root = uid == 0;
        if root {
            std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
        }
        let running = base
            .path()
            .join(format!("baton-sandbox-{uid}-{}", std::process::id()));
        std::fs::create_dir_all(&running).unwrap();
        let cleaner_base = base.path().to_path_buf();
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || remove_stale_tmp(&cleaner_base))
            .unwrap()
            .join()
            .unwrap();
        assert!(!stale.exists() && !deep.exists());
        assert!(running.is_dir(), "a live process's folder stays");
        if root {
            assert!(
                foreign.join("tmp").is_dir(),
                "another account's folder stays"
            );
        }
    }

    /// A workspace repository (only the world's arguments are looked at: no command runs).
    fn repo() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().canonicalize().expect("canon");
        std::fs::create_dir_all(ws.join(".git/hooks")).expect("mkdir");
        std::fs::write(ws.join(".git/config"), "[core]\n").expect("config");
        std::fs::write(ws.join(".git/HEAD"), "ref: refs/heads/main\n").expect("HEAD");
        (dir, ws)
    }

    #[test]
    fn nothing_in_a_writable_root_is_bound_by_a_name_bubblewrap_resolves() {
        let (_dir, ws) = repo();
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws);
        let b = world(&policy).expect("world");
        let args: Vec<&OsStr> = b.args().iter().map(OsString::as_os_str).collect();
        for pair in args.windows(2) {
            if pair[0] == "--bind" || pair[0] == "--ro-bind" {
                assert!(
                    !Path::new(pair[1]).starts_with(&ws),
                    "{:?} {:?} names a path a command could swap",
                    pair[0],
                    pair[1]
                );
            }
        }
        let held: Vec<PathBuf> = b.held_mounts().into_iter().map(|m| m.path).collect();
        for p in [ws.clone(), ws.join(".git"), ws.join(".git/config")] {
            assert!(
                held.contains(&p),
                "{} is not a held bind: {held:?}",
                p.display()
            );
        }
        assert!(b.held_fds().count() >= held.len());
    }

    #[test]
    fn a_read_only_workspace_is_bound_by_descriptor_too() {
        let (_dir, ws) = repo();
        let policy = SandboxPolicy::new(SandboxMode::ReadOnly, &ws);
        let b = world(&policy).expect("world");
        assert!(
            !b.args()
                .windows(2)
                .any(|p| p[0] == "--ro-bind" && Path::new(&p[1]) == ws),
            "{:?}",
            b.args()
        );
        let held: Vec<PathBuf> = b.held_mounts().into_iter().map(|m| m.path).collect();
        assert!(held.contains(&ws), "{held:?}");
    }

    #[test]
    fn a_held_mount_is_the_file_that_was_opened_or_the_check_fails() {
        let (_dir, ws) = repo();
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &ws);
        let b = world(&policy).expect("world");
        let mounts = b.held_mounts();
        for m in &mounts {
            m.check().expect("nothing changed");
        }
        let config = mounts
            .iter()
            .find(|m| m.path == ws.join(".git/config"))
            .expect("config held");
        std::fs::rename(ws.join(".git/config"), ws.join("moved")).expect("mv");
        std::os::unix::fs::symlink(ws.join("moved"), ws.join(".git/config")).expect("link");
        let err = config.check().expect_err("a link is not the file");
        assert!(err.contains("is not what baton bound there"), "{err}");
    }
}
