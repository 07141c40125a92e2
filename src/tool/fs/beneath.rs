//! Every open, create, rename and unlink the file tools do, made strictly beneath the
//! workspace root and never through a symlink, so a concurrent process that swaps a directory
//! for a symlink between a tool's path check and its use of the path cannot redirect it.
//!
//! `tool::path` first resolves a path as the model gave it (following symlinks that stay
//! inside the workspace) into its real location. That location is then opened relative to a
//! descriptor of the workspace root with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`: a symlink appearing anywhere on the way after the check makes the
//! open fail instead of being followed. Kernels without `openat2` (ENOSYS, before 5.6) get the
//! same guarantee from a walk of one `openat(O_NOFOLLOW | O_DIRECTORY)` per component. Temp
//! files are created in, renamed in and removed from the parent directory's descriptor, never
//! by path. FIFOs, sockets and devices are refused before any byte is read.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use crate::protocol::SandboxMode;
use crate::sandbox::SandboxPolicy;
use crate::tool::{IoOp, ToolError};

/// Largest file `write_file`, `edit` and `apply_patch` load to change (they hold it whole, and
/// diff it); bigger files are edited with commands.
pub const MAX_EDIT_BYTES: u64 = 64 * 1024 * 1024;

/// Whether `openat2` works here: unknown, yes, or no (ENOSYS: walk instead).
static OPENAT2: AtomicU8 = AtomicU8::new(OPENAT2_UNKNOWN);
const OPENAT2_UNKNOWN: u8 = 0;
const OPENAT2_YES: u8 = 1;
const OPENAT2_NO: u8 = 2;

/// The workspace root, held open; every path below is relative to it.
pub struct Beneath {
    root: OwnedFd,
    root_path: PathBuf,
    policy: SandboxPolicy,
    walk_only: bool,
}

/// What kind of non-regular file a mode names, for error messages.
fn kind_of(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFIFO => "a FIFO (named pipe)",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symlink",
        _ => "a special file",
    }
}

fn cstr(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn openat(dir: BorrowedFd, name: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `name` is NUL-terminated and `dir` is an open descriptor for the call.
        let rc = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        match cvt(rc) {
            // SAFETY: a fresh descriptor this process owns from now on.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

fn openat2(dir: BorrowedFd, path: &CStr, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
    // SAFETY: open_how is plain data; all-zero is its documented default.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = u64::from(mode);
    how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    let mut attempts = 0;
    loop {
        // SAFETY: `path` is NUL-terminated, `how` lives across the call and its size is given.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dir.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if rc >= 0 {
            // SAFETY: a fresh descriptor this process owns from now on.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) });
        }
        let e = io::Error::last_os_error();
        attempts += 1;
        // EAGAIN: a rename raced the lookup; the kernel asks to retry rather than guess.
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) if attempts < 16 => continue,
            _ => return Err(e),
        }
    }
}

fn fstat(fd: BorrowedFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data, filled by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open and `st` is writable.
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

fn lstat_at(dir: BorrowedFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: as in `fstat`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated; AT_SYMLINK_NOFOLLOW keeps a symlink itself.
    cvt(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

fn is_regular(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

/// The names of `rel`'s components; anything but plain names (`..`, `/`) is refused.
fn components(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(io::Error::from_raw_os_error(libc::EXDEV)),
        })
        .collect()
}

/// A directory descriptor for walking: `O_PATH` needs no read permission and has no side
/// effects; `O_NOFOLLOW` and the `fstat` check refuse a symlink in the directory's place.
fn open_subdir(dir: BorrowedFd, name: &CStr) -> io::Result<OwnedFd> {
    let fd = openat(
        dir,
        name,
        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
        0,
    )?;
    if !is_dir(&fstat(fd.as_fd())?) {
        return Err(io::Error::from_raw_os_error(libc::ELOOP));
    }
    Ok(fd)
}

/// Names temp files uniquely within this process and unpredictably across processes.
fn temp_name() -> CString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let salt: u32 = rand::random();
    let name = format!(".baton-write-{}-{n}-{salt:08x}", std::process::id());
    CString::new(name).unwrap_or_default()
}

impl Beneath {
    /// Opens the workspace root. `workspace` is canonicalized first: the root itself may be
    /// reached through symlinks (it is the user's choice), nothing below it may.
    pub fn new(workspace: &Path) -> Result<Beneath, ToolError> {
        let root_path = std::fs::canonicalize(workspace)
            .map_err(|e| ToolError::io(IoOp::Open, workspace.display().to_string(), e))?;
        let c = CString::new(root_path.as_os_str().as_bytes()).map_err(|_| {
            ToolError::rejected(format!("{}: path holds a NUL byte", root_path.display()))
        })?;
        // SAFETY: AT_FDCWD is always a valid directory argument.
        let cwd = unsafe { BorrowedFd::borrow_raw(libc::AT_FDCWD) };
        let root = openat(cwd, &c, libc::O_PATH | libc::O_DIRECTORY, 0)
            .map_err(|e| ToolError::io(IoOp::Open, root_path.display().to_string(), e))?;
        // File tools are confined to the workspace whatever the sandbox mode, so they honour
        // the protections of the workspace-write policy (git hooks and config, …) always.
        let policy = SandboxPolicy::new(SandboxMode::WorkspaceWrite, &root_path);
        Ok(Beneath {
            root,
            root_path,
            policy,
            walk_only: false,
        })
    }

    /// The same root, opening by the `O_NOFOLLOW` walk only (what kernels without `openat2`
    /// get), so both paths can be tested on one kernel.
    #[cfg(test)]
    fn walking(mut self) -> Beneath {
        self.walk_only = true;
        self
    }

    /// `abs` relative to the root; a path elsewhere is an internal error of the caller.
    fn relative<'a>(&self, abs: &'a Path) -> Result<&'a Path, ToolError> {
        abs.strip_prefix(&self.root_path)
            .map_err(|_| ToolError::Internal {
                what: "a checked path is not beneath the workspace root",
            })
    }

    /// Opens `rel` beneath the root with `flags`, following no symlink on the way.
    fn open_rel(&self, rel: &Path, flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
        let parts = components(rel)?;
        if parts.is_empty() {
            return openat(self.root.as_fd(), c".", flags & !libc::O_NOFOLLOW, mode);
        }
        if !self.walk_only && OPENAT2.load(Ordering::Relaxed) != OPENAT2_NO {
            let joined: PathBuf = parts.iter().collect();
            match openat2(self.root.as_fd(), &cstr(joined.as_os_str())?, flags, mode) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                    OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
                }
                // Some container seccomp profiles answer EPERM for syscalls they do not know:
                // on the first call, let the walk decide whether that is the kernel's answer.
                Err(e)
                    if e.raw_os_error() == Some(libc::EPERM)
                        && OPENAT2.load(Ordering::Relaxed) == OPENAT2_UNKNOWN =>
                {
                    let walked = self.walk_open(&parts, flags, mode);
                    if walked.is_ok() {
                        OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
                    }
                    return walked;
                }
                other => {
                    if other.is_ok() {
                        OPENAT2.store(OPENAT2_YES, Ordering::Relaxed);
                    }
                    return other;
                }
            }
        }
        self.walk_open(&parts, flags, mode)
    }

    /// Opens the path `parts` by the `O_NOFOLLOW` walk.
    fn walk_open(&self, parts: &[&OsStr], flags: libc::c_int, mode: u32) -> io::Result<OwnedFd> {
        let (last, dirs) = parts.split_last().ok_or(io::ErrorKind::InvalidInput)?;
        let dir = match self.open_dir_walk(dirs, false)? {
            Some(dir) => dir,
            None => openat(self.root.as_fd(), c".", libc::O_PATH | libc::O_DIRECTORY, 0)?,
        };
        openat(dir.as_fd(), &cstr(last)?, flags | libc::O_NOFOLLOW, mode)
    }

    /// Walks `dirs` from the root one `O_NOFOLLOW` step at a time, creating missing ones when
    /// `create`. `None` for the root itself.
    fn open_dir_walk(&self, dirs: &[&OsStr], create: bool) -> io::Result<Option<OwnedFd>> {
        let mut current: Option<OwnedFd> = None;
        for name in dirs {
            let c = cstr(name)?;
            let at = current.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
            let next = match open_subdir(at, &c) {
                Err(e) if create && e.kind() == io::ErrorKind::NotFound => {
                    // SAFETY: `c` is NUL-terminated; the mode is filtered by the umask.
                    let rc = unsafe { libc::mkdirat(at.as_raw_fd(), c.as_ptr(), 0o777) };
                    if let Err(e) = cvt(rc)
                        && e.kind() != io::ErrorKind::AlreadyExists
                    {
                        return Err(e);
                    }
                    open_subdir(at, &c)?
                }
                other => other?,
            };
            current = Some(next);
        }
        Ok(current)
    }

    /// A descriptor of the directory `rel` (created with its parents when `create`).
    fn open_dir(&self, rel: &Path, create: bool) -> io::Result<OwnedFd> {
        let parts = components(rel)?;
        if parts.is_empty() {
            return openat(self.root.as_fd(), c".", libc::O_PATH | libc::O_DIRECTORY, 0);
        }
        match self.open_rel(rel, libc::O_PATH | libc::O_DIRECTORY, 0) {
            Err(e) if create && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
            Ok(fd) => {
                if is_dir(&fstat(fd.as_fd())?) {
                    return Ok(fd);
                }
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
        }
        self.open_dir_walk(&parts, true)?
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
    }

    /// The parent directory of `abs` held open, and the file's name in it.
    fn parent_of(
        &self,
        abs: &Path,
        shown: &str,
        create: bool,
    ) -> Result<(OwnedFd, CString), ToolError> {
        let rel = self.relative(abs)?;
        let name = match rel.components().next_back() {
            Some(Component::Normal(name)) => {
                cstr(name).map_err(|e| ToolError::io(IoOp::Open, shown, e))?
            }
            _ => {
                return Err(ToolError::NoParentDirectory {
                    path: shown.to_string(),
                });
            }
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        let dir = self
            .open_dir(parent, create)
            .map_err(|e| self.explain(IoOp::CreateDir, shown, e))?;
        Ok((dir, name))
    }

    /// Turns the errors a swapped symlink causes into messages that say so.
    fn explain(&self, op: IoOp, shown: &str, e: io::Error) -> ToolError {
        match e.raw_os_error() {
            Some(libc::ELOOP) | Some(libc::ENOTDIR) => ToolError::rejected(format!(
                "{shown}: a symlink or a non-directory is in the way (the path changed after it \
                 was checked); file tools never follow a symlink that appears while they work. \
                 Check the path with list_dir and try again"
            )),
            Some(libc::EXDEV) => {
                ToolError::rejected(format!("{shown}: the path leads outside the workspace"))
            }
            _ => ToolError::io(op, shown, e),
        }
    }

    /// Refuses a change to `name` in `dir` when the directory's real location (read back
    /// from the open descriptor, so a rename after the check does not matter) is one the
    /// sandbox protects, or inside a `.git` directory.
    fn check_writable(&self, dir: &OwnedFd, name: &CStr, shown: &str) -> Result<(), ToolError> {
        let link = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        let Ok(real) = std::fs::read_link(&link) else {
            // Without /proc the checked path stands (tool::path already judged it).
            return Ok(());
        };
        let target = real.join(OsStr::from_bytes(name.to_bytes()));
        // The same write rules as the sandbox's binds and `tool::path` (sandbox::WriteRules).
        if self
            .policy
            .write_rules()
            .file_tools_deny(&self.root_path, &target)
        {
            return Err(ToolError::rejected(format!(
                "{shown}: this path is protected (git internals, baton's own config, or outside \
                 the workspace); file tools do not write there"
            )));
        }
        Ok(())
    }

    /// Opens the regular file `abs` for reading: `Ok(None)` when it does not exist. FIFOs,
    /// sockets and devices are refused without blocking (opened `O_NONBLOCK`, checked with
    /// `fstat`, and only then switched back to blocking reads).
    pub fn open_regular(&self, abs: &Path, shown: &str) -> Result<Option<(File, u64)>, ToolError> {
        let rel = self.relative(abs)?;
        let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY;
        let fd = match self.open_rel(rel, flags, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // Opening a socket fails with ENXIO: say what it is.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                return Err(ToolError::rejected(format!(
                    "{shown} is a socket or a device without a driver, not a regular file; \
                     file tools only read and write regular files"
                )));
            }
            Err(e) => return Err(self.explain(IoOp::Open, shown, e)),
        };
        let st = fstat(fd.as_fd()).map_err(|e| ToolError::io(IoOp::Inspect, shown, e))?;
        if is_dir(&st) {
            return Err(ToolError::rejected(format!(
                "{shown} is a directory; use list_dir to see its contents"
            )));
        }
        if !is_regular(&st) {
            return Err(ToolError::rejected(format!(
                "{shown} is {}, not a regular file; file tools only read and write regular files",
                kind_of(st.st_mode)
            )));
        }
        // SAFETY: F_GETFL/F_SETFL on an open descriptor.
        unsafe {
            let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
            if fl >= 0 {
                libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
            }
        }
        Ok(Some((File::from(fd), st.st_size as u64)))
    }

    /// The content of the regular file `abs`, `Ok(None)` when it does not exist; files over
    /// `MAX_EDIT_BYTES` are refused.
    pub fn read_existing(&self, abs: &Path, shown: &str) -> Result<Option<Vec<u8>>, ToolError> {
        let Some((file, len)) = self.open_regular(abs, shown)? else {
            return Ok(None);
        };
        if len > MAX_EDIT_BYTES {
            return Err(ToolError::rejected(format!(
                "{shown} is {len} bytes; file tools change files of up to {} MiB. Use a \
                 command (sed, a script) for a file this large",
                MAX_EDIT_BYTES >> 20
            )));
        }
        let mut data = Vec::with_capacity(len as usize);
        file.take(MAX_EDIT_BYTES + 1)
            .read_to_end(&mut data)
            .map_err(|e| ToolError::io(IoOp::Read, shown, e))?;
        if data.len() as u64 > MAX_EDIT_BYTES {
            return Err(ToolError::rejected(format!(
                "{shown} grew past {} MiB while being read",
                MAX_EDIT_BYTES >> 20
            )));
        }
        Ok(Some(data))
    }

    /// What is at `abs` now, without following a symlink: `None` when nothing is.
    pub fn lstat(&self, abs: &Path) -> Option<libc::stat> {
        let rel = self.relative(abs).ok()?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        let name = cstr(rel.file_name()?).ok()?;
        let dir = self.open_dir(parent, false).ok()?;
        lstat_at(dir.as_fd(), &name).ok()
    }

    /// Permission bits of the regular file at `abs`, if there is one.
    pub fn mode_of(&self, abs: &Path) -> Option<u32> {
        self.lstat(abs)
            .filter(is_regular)
            .map(|st| st.st_mode & 0o7777)
    }

    /// Writes `bytes` to `abs` atomically: a temp file created beside it through the parent
    /// directory's descriptor, then `renameat` on that descriptor. Missing parent directories
    /// are created. The file gets `mode`, else the replaced file's permissions, else 0644.
    pub fn write_atomic(
        &self,
        abs: &Path,
        shown: &str,
        bytes: &[u8],
        mode: Option<u32>,
    ) -> Result<(), ToolError> {
        let (dir, name) = self.parent_of(abs, shown, true)?;
        self.check_writable(&dir, &name, shown)?;
        let existing = match lstat_at(dir.as_fd(), &name) {
            Ok(st) if is_regular(&st) => Some(st.st_mode & 0o7777),
            Ok(st) => {
                return Err(ToolError::rejected(format!(
                    "{shown} is {}, not a regular file; file tools only replace regular files",
                    kind_of(st.st_mode)
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(ToolError::io(IoOp::Inspect, shown, e)),
        };
        let mode = mode.or(existing).unwrap_or(0o644);
        let temp = temp_name();
        let fd = openat(
            dir.as_fd(),
            &temp,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            0o600,
        )
        .map_err(|e| ToolError::io(IoOp::CreateTemp, shown, e))?;
        let mut file = File::from(fd);
        let written = file
            .write_all(bytes)
            .and_then(|_| file.sync_data())
            .map_err(|e| ToolError::io(IoOp::Write, shown, e))
            .and_then(|_| {
                // SAFETY: fchmod on the temp file we own.
                cvt(unsafe { libc::fchmod(file.as_raw_fd(), mode as libc::mode_t) })
                    .map(drop)
                    .map_err(|e| ToolError::io(IoOp::SetPermissions, shown, e))
            })
            .and_then(|_| {
                // SAFETY: both names are NUL-terminated and relative to the same open dir.
                cvt(unsafe {
                    libc::renameat(
                        dir.as_raw_fd(),
                        temp.as_ptr(),
                        dir.as_raw_fd(),
                        name.as_ptr(),
                    )
                })
                .map(drop)
                .map_err(|e| ToolError::io(IoOp::Replace, shown, e))
            });
        if written.is_err() {
            // SAFETY: removes our own temp file by name in the same directory.
            unsafe { libc::unlinkat(dir.as_raw_fd(), temp.as_ptr(), 0) };
        }
        written
    }

    /// Removes the regular file `abs` through its parent directory's descriptor.
    pub fn remove_file(&self, abs: &Path, shown: &str) -> Result<(), ToolError> {
        let (dir, name) = self.parent_of(abs, shown, false)?;
        self.check_writable(&dir, &name, shown)?;
        match lstat_at(dir.as_fd(), &name) {
            Ok(st) if is_regular(&st) || st.st_mode & libc::S_IFMT == libc::S_IFLNK => {}
            Ok(st) => {
                return Err(ToolError::rejected(format!(
                    "{shown} is {}, not a regular file; file tools only delete regular files",
                    kind_of(st.st_mode)
                )));
            }
            Err(e) => return Err(ToolError::io(IoOp::Delete, shown, e)),
        }
        // SAFETY: `name` is NUL-terminated and relative to the open parent directory.
        cvt(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })
            .map(drop)
            .map_err(|e| ToolError::io(IoOp::Delete, shown, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roots() -> (tempfile::TempDir, tempfile::TempDir) {
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap())
    }

    fn both(ws: &Path) -> [Beneath; 2] {
        [
            Beneath::new(ws).unwrap(),
            Beneath::new(ws).unwrap().walking(),
        ]
    }

    #[test]
    fn writes_create_parents_and_never_follow_a_symlink() {
        let (ws, outside) = roots();
        let root = ws.path().canonicalize().unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        for b in both(&root) {
            b.write_atomic(&root.join("a/b/c.txt"), "a/b/c.txt", b"x", None)
                .unwrap();
            assert_eq!(std::fs::read(root.join("a/b/c.txt")).unwrap(), b"x");
            let err = b
                .write_atomic(&root.join("link/x"), "link/x", b"x", None)
                .unwrap_err();
            assert!(err.to_string().contains("symlink"), "{err}");
            assert!(b.open_regular(&root.join("link/x"), "link/x").is_err());
            assert!(b.remove_file(&root.join("link/x"), "link/x").is_err());
            std::fs::remove_dir_all(root.join("a")).unwrap();
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn modes_are_kept_and_temp_files_cleaned() {
        use std::os::unix::fs::PermissionsExt;
        let (ws, _o) = roots();
        let root = ws.path().canonicalize().unwrap();
        let f = root.join("run.sh");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o755)).unwrap();
        for b in both(&root) {
            b.write_atomic(&f, "run.sh", b"new", None).unwrap();
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o755);
            assert_eq!(b.mode_of(&f), Some(0o755));
        }
        let names: Vec<_> = std::fs::read_dir(&root).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "a temp file was left behind");
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let (ws, _o) = roots();
        let root = ws.path().canonicalize().unwrap();
        let fifo = CString::new(root.join("p").as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        for b in both(&root) {
            let err = b.open_regular(&root.join("p"), "p").unwrap_err();
            assert!(err.to_string().contains("FIFO"), "{err}");
            let err = b
                .write_atomic(&root.join("p"), "p", b"x", None)
                .unwrap_err();
            assert!(err.to_string().contains("FIFO"), "{err}");
            assert!(
                b.open_regular(&root.join("missing"), "missing")
                    .unwrap()
                    .is_none()
            );
            let err = b.open_regular(&root, ".").unwrap_err();
            assert!(err.to_string().contains("directory"), "{err}");
        }
    }

    /// The fallback walk holds against the directory/symlink swap race as `openat2` does.
    #[test]
    fn both_ways_hold_against_a_directory_symlink_swap() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let (ws, outside) = roots();
        let root = ws.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("l")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (a, b) = (
                CString::new(root.join("d").as_os_str().as_bytes()).unwrap(),
                CString::new(root.join("l").as_os_str().as_bytes()).unwrap(),
            );
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: valid NUL-terminated paths.
                    unsafe {
                        libc::renameat2(
                            libc::AT_FDCWD,
                            a.as_ptr(),
                            libc::AT_FDCWD,
                            b.as_ptr(),
                            libc::RENAME_EXCHANGE,
                        )
                    };
                }
            })
        };
        for b in both(&root) {
            for i in 0..200 {
                let abs = root.join(format!("d/f{i}"));
                let _ = b.write_atomic(&abs, "f", b"x", None);
                let _ = b.remove_file(&abs, "f");
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[test]
    fn git_internals_are_refused() {
        let (ws, _o) = roots();
        let root = ws.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        let b = Beneath::new(&root).unwrap();
        let err = b
            .write_atomic(&root.join(".git/hooks/pre-commit"), "x", b"x", None)
            .unwrap_err();
        assert!(err.to_string().contains("protected"), "{err}");
        assert!(!root.join(".git/hooks/pre-commit").exists());
    }
}
