//! The one reader and writer for files a command or a cloned repository may have touched:
//! every open baton's own (unsandboxed) process makes on such a path goes through here.
//!
//! The rule (docs/sandbox.md, "Files a command may have touched"): no `std::fs` on a path a
//! command can change; use this module. What it guarantees:
//! - **No symlink is followed below an anchor.** A [`Dir`] is a directory held open (the
//!   workspace, the folder of `-o FILE`, the session folder): reached by name once, because the
//!   user or baton chose it. Every path below it is opened with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, or, on kernels without `openat2` (before
//!   5.6, or a seccomp profile that refuses it), by a walk of one `openat(O_NOFOLLOW)` per
//!   component. A directory swapped for a link after a check makes the open fail.
//! - **Never a FIFO, socket or device.** The entry is looked at (`fstatat`, no follow) before it
//!   is opened, so a FIFO is never opened (opening its read end lets a writer waiting on it
//!   through); the open itself is `O_NONBLOCK | O_NOCTTY` and checked again with `fstat`, so
//!   one swapped in between neither blocks nor becomes the controlling terminal. Only then is
//!   `O_NONBLOCK` cleared.
//! - **Bounded size**: readers take the largest size the caller accepts and refuse more with
//!   `FileTooLarge`, without holding more than one byte past the bound.
//! - **Writes replace, never write through**: a file is written under a temporary name in its
//!   directory's descriptor and renamed over the name (`renameat` replaces a planted link, it
//!   does not follow it); appends open the last name `O_NOFOLLOW` and refuse anything but a
//!   regular file.
//!
//! [`read_following`] is the one exception, for files whose content is what counts, as git and
//! the trust digests read them (ordinary links followed): it still never follows a magic link
//! (`/proc/self/fd/…`, `/dev/stdin`), never opens anything but a regular file, and is bounded.
//!
//! The module sits on the ground floor of the layer map: every layer may use it, it uses no
//! other part of baton.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Whether `openat2` works here: unknown, yes, or no (then every open walks).
static OPENAT2: AtomicU8 = AtomicU8::new(OPENAT2_UNKNOWN);
const OPENAT2_UNKNOWN: u8 = 0;
const OPENAT2_YES: u8 = 1;
const OPENAT2_NO: u8 = 2;

/// How many symlinks [`read_following`]'s walk resolves before giving up (the kernel's limit).
const MAX_LINKS: usize = 40;

/// What `fstat` said about a file this module opened or looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Size in bytes.
    pub len: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub perm: u32,
    /// The file's type, from `st_mode`.
    pub kind: FileType,
    pub uid: u32,
    pub dev: u64,
    pub ino: u64,
    /// The change time (every write moves it, nothing can set it back).
    pub ctime: i64,
    pub ctime_nsec: i64,
}

impl Meta {
    fn of(st: &rustix::fs::Stat) -> Meta {
        Meta {
            len: u64::try_from(st.st_size).unwrap_or(0),
            perm: st.st_mode & 0o7777,
            kind: FileType::from_raw_mode(st.st_mode),
            uid: st.st_uid,
            dev: st.st_dev,
            ino: st.st_ino,
            ctime: st.st_ctime,
            ctime_nsec: i64::try_from(st.st_ctime_nsec).unwrap_or(0),
        }
    }

    pub fn is_file(&self) -> bool {
        self.kind == FileType::RegularFile
    }

    pub fn is_dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    pub fn is_symlink(&self) -> bool {
        self.kind == FileType::Symlink
    }
}

/// Refusal of something that is not a regular file, carried inside an `io::Error` of kind
/// `InvalidInput`; [`not_regular_kind`] reads it back.
#[derive(Debug)]
pub struct NotRegular {
    /// What it is, for messages: "a FIFO (named pipe)", "a directory", …
    pub kind: &'static str,
}

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, not a regular file", self.kind)
    }
}

impl std::error::Error for NotRegular {}

/// What a [`NotRegular`] refusal says the file is, when `e` is one.
pub fn not_regular_kind(e: &io::Error) -> Option<&'static str> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<NotRegular>())
        .map(|n| n.kind)
}

/// Words for a file type, for messages.
pub fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::Fifo => "a FIFO (named pipe)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::RegularFile => "a regular file",
        FileType::Unknown => "a special file",
    }
}

fn not_regular(kind: FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegular {
            kind: kind_name(kind),
        },
    )
}

fn too_large(max: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("larger than {} KiB", max / 1024),
    )
}

fn errno(e: Errno) -> io::Error {
    io::Error::from(e)
}

/// The plain names of `rel`'s components; `..`, a root or a prefix is refused (`EXDEV`: the
/// path would leave the anchor).
fn components(rel: &Path) -> io::Result<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(name) => Ok(name),
            _ => Err(errno(Errno::XDEV)),
        })
        .collect()
}

fn openat(dir: BorrowedFd, name: &OsStr, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    loop {
        match rustix::fs::openat(
            dir,
            name,
            flags | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        ) {
            Err(Errno::INTR) => continue,
            other => return other.map_err(errno),
        }
    }
}

fn openat2(dir: BorrowedFd, path: &Path, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let mut attempts = 0;
    loop {
        match rustix::fs::openat2(
            dir,
            path,
            flags | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
            resolve,
        ) {
            Err(Errno::INTR) => continue,
            // A rename raced the lookup: the kernel asks to retry rather than guess.
            Err(Errno::AGAIN) if attempts < 16 => attempts += 1,
            other => return other.map_err(errno),
        }
    }
}

/// Whether `fd` lies on a kernel file system whose regular-looking files are the kernel's
/// own (procfs, sysfs, debugfs, tracefs): a read of one may wait for good (`/proc/kmsg`) or
/// never end. None of them is a file baton reads for a workspace.
fn on_kernel_fs(fd: BorrowedFd) -> bool {
    rustix::fs::fstatfs(fd).is_ok_and(|fs| is_kernel_fs(fs.f_type as u64))
}

fn is_kernel_fs(f_type: u64) -> bool {
    const PROC: u64 = 0x9fa0;
    const SYSFS: u64 = 0x6265_6572;
    const DEBUGFS: u64 = 0x6462_6720;
    const TRACEFS: u64 = 0x7472_6163;
    matches!(f_type, PROC | SYSFS | DEBUGFS | TRACEFS)
}

fn fstat(fd: BorrowedFd) -> io::Result<Meta> {
    rustix::fs::fstat(fd).map(|st| Meta::of(&st)).map_err(errno)
}

fn lstat_at(dir: BorrowedFd, name: &OsStr) -> io::Result<Meta> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| Meta::of(&st))
        .map_err(errno)
}

/// A directory descriptor for walking: `O_PATH` needs no read permission; `O_NOFOLLOW` and the
/// `fstat` check refuse a link (or anything else) standing where the directory should be.
fn open_subdir(dir: BorrowedFd, name: &OsStr) -> io::Result<OwnedFd> {
    let fd = openat(
        dir,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW,
        0,
    )?;
    if !fstat(fd.as_fd())?.is_dir() {
        return Err(errno(Errno::LOOP));
    }
    Ok(fd)
}

/// Clears `O_NONBLOCK` on a descriptor opened with it: reads of a regular file then behave as
/// usual (the flag means nothing to them, but the `File` handed out should not carry it).
fn set_blocking(fd: BorrowedFd) -> io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd).map_err(errno)?;
    rustix::fs::fcntl_setfl(fd, flags - OFlags::NONBLOCK).map_err(errno)
}

/// Names temp files uniquely within this process and unpredictably across processes.
fn temp_name() -> OsString {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let salt: u32 = rand::random();
    OsString::from(format!(
        ".baton-write-{}-{n}-{salt:08x}",
        std::process::id()
    ))
}

/// Reads all of `file` when it holds at most `max` bytes.
fn read_bounded(file: &mut File, hint: u64, max: u64) -> io::Result<Vec<u8>> {
    if hint > max {
        return Err(too_large(max));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
    // One byte past the bound is enough to see that it grew while being read.
    file.take(max.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_large(max));
    }
    Ok(bytes)
}

/// A directory held open: the anchor below which nothing is reached through a link.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    walk_only: bool,
}

impl Dir {
    /// Opens the directory `path` by name: links on the way to it are followed (where it lies
    /// is the user's or baton's choice; its path is kept canonical), nothing below it is.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let path = std::fs::canonicalize(path)?;
        let fd = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno)?;
        Ok(Dir {
            fd,
            path,
            walk_only: false,
        })
    }

    /// The same anchor opening only by the `O_NOFOLLOW` walk (what kernels without `openat2`
    /// get), so that both ways can be tested on one kernel.
    pub fn walking(mut self) -> Dir {
        self.walk_only = true;
        self
    }

    /// The directory's canonical path when it was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The descriptor, for `*at` calls of the caller's own (a check of where it really is).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// `abs` relative to this directory, when it lies lexically beneath it.
    pub fn relative<'a>(&self, abs: &'a Path) -> Option<&'a Path> {
        abs.strip_prefix(&self.path).ok()
    }

    fn child(&self, fd: OwnedFd, rel: &[&OsStr]) -> Dir {
        Dir {
            fd,
            path: rel.iter().fold(self.path.clone(), |p, n| p.join(n)),
            walk_only: self.walk_only,
        }
    }

    /// Opens `rel` beneath this directory with `flags`, following no link on the way; a link
    /// as the last component is not followed either (`O_NOFOLLOW`).
    pub fn open_beneath(&self, rel: &Path, flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
        let parts = components(rel)?;
        if parts.is_empty() {
            return openat(self.fd(), OsStr::new("."), flags - OFlags::NOFOLLOW, mode);
        }
        if !self.walk_only && OPENAT2.load(Ordering::Relaxed) != OPENAT2_NO {
            let joined: PathBuf = parts.iter().collect();
            match openat2(self.fd(), &joined, flags, mode) {
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
    fn walk_open(&self, parts: &[&OsStr], flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
        let (last, dirs) = parts.split_last().ok_or(io::ErrorKind::InvalidInput)?;
        let dir = self.walk_dirs(dirs, None)?;
        let at = dir.as_ref().map_or(self.fd(), |d| d.as_fd());
        openat(at, last, flags | OFlags::NOFOLLOW, mode)
    }

    /// Walks `dirs` one `O_NOFOLLOW` step at a time, creating missing ones with `create`'s
    /// mode when given. `None` for this directory itself.
    fn walk_dirs(&self, dirs: &[&OsStr], create: Option<u32>) -> io::Result<Option<OwnedFd>> {
        let mut current: Option<OwnedFd> = None;
        for name in dirs {
            let at = current.as_ref().map_or(self.fd(), |d| d.as_fd());
            let next = match open_subdir(at, name) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && create.is_some() => {
                    let mode = Mode::from_raw_mode(create.unwrap_or(0o700));
                    match rustix::fs::mkdirat(at, *name, mode) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(errno(e)),
                    }
                    open_subdir(at, name)?
                }
                other => other?,
            };
            current = Some(next);
        }
        Ok(current)
    }

    /// The directory `rel` beneath this one, created with its missing parents (with `create`'s
    /// mode, filtered by the umask) when given.
    pub fn dir(&self, rel: &Path, create: Option<u32>) -> io::Result<Dir> {
        let parts = components(rel)?;
        if parts.is_empty() {
            let fd = openat(
                self.fd(),
                OsStr::new("."),
                OFlags::PATH | OFlags::DIRECTORY,
                0,
            )?;
            return Ok(self.child(fd, &[]));
        }
        match self.open_beneath(rel, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW, 0) {
            Err(e) if create.is_some() && e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
            Ok(fd) => {
                if fstat(fd.as_fd())?.is_dir() {
                    return Ok(self.child(fd, &parts));
                }
                return Err(errno(Errno::NOTDIR));
            }
        }
        let fd = self
            .walk_dirs(&parts, create)?
            .ok_or_else(|| errno(Errno::NOENT))?;
        Ok(self.child(fd, &parts))
    }

    /// The directory holding `rel`'s last component (created with its parents when `create`
    /// gives a mode), and that component's name.
    pub fn parent(&self, rel: &Path, create: Option<u32>) -> io::Result<(Dir, OsString)> {
        let parts = components(rel)?;
        let (last, dirs) = parts.split_last().ok_or_else(|| errno(Errno::ISDIR))?;
        let parent: PathBuf = dirs.iter().collect();
        Ok((self.dir(&parent, create)?, last.to_os_string()))
    }

    /// What stands at `rel`, the last component not followed: `None` when nothing does.
    pub fn lstat(&self, rel: &Path) -> io::Result<Option<Meta>> {
        let (dir, name) = match self.parent(rel, None) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        match lstat_at(dir.fd(), &name) {
            Ok(meta) => Ok(Some(meta)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The name `name` in this directory opened for reading when it is a regular file:
    /// `None` when it does not exist; a link, FIFO, socket, device or directory is refused
    /// ([`NotRegular`]) without being opened.
    fn open_name(&self, name: &OsStr) -> io::Result<Option<(File, Meta)>> {
        let seen = match lstat_at(self.fd(), name) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        if !seen.is_file() {
            return Err(not_regular(seen.kind));
        }
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY;
        let fd = match openat(self.fd(), name, flags, 0) {
            Ok(fd) => fd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // Swapped for a link in between.
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(not_regular(FileType::Symlink));
            }
            // A socket swapped in: opening one fails with ENXIO.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                return Err(not_regular(FileType::Socket));
            }
            Err(e) => return Err(e),
        };
        let meta = fstat(fd.as_fd())?;
        if !meta.is_file() {
            return Err(not_regular(meta.kind));
        }
        if on_kernel_fs(fd.as_fd()) {
            return Err(not_regular(FileType::Unknown));
        }
        set_blocking(fd.as_fd())?;
        Ok(Some((File::from(fd), meta)))
    }

    /// Opens the regular file `rel` for reading (see the module's guarantees): `None` when it
    /// does not exist. Its size is not bounded here; [`Dir::read`] is.
    pub fn open_regular(&self, rel: &Path) -> io::Result<Option<(File, Meta)>> {
        let (dir, name) = match self.parent(rel, None) {
            Ok(found) => found,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        dir.open_name(&name)
    }

    /// The content of the regular file `rel`, `None` when it does not exist; more than `max`
    /// bytes is `FileTooLarge`.
    pub fn read(&self, rel: &Path, max: u64) -> io::Result<Option<Vec<u8>>> {
        let Some((mut file, meta)) = self.open_regular(rel)? else {
            return Ok(None);
        };
        read_bounded(&mut file, meta.len, max).map(Some)
    }

    /// Writes `bytes` to `rel` atomically: a temp file created beside it, then renamed over
    /// the name, which replaces whatever link or file stood there and never writes through it.
    /// A directory, FIFO, socket or device standing there is refused and left alone. Missing
    /// parent directories are created (mode 0777 less the umask) when `create_parents`. The
    /// file gets `mode`, else the replaced regular file's permissions, else 0666 less the
    /// umask.
    pub fn write_atomic(
        &self,
        rel: &Path,
        bytes: &[u8],
        mode: Option<u32>,
        create_parents: bool,
    ) -> io::Result<()> {
        let (dir, name) = self.parent(rel, create_parents.then_some(0o777))?;
        dir.replace(&name, bytes, mode)
    }

    /// [`Dir::write_atomic`] of the name `name` in this directory.
    pub fn replace(&self, name: &OsStr, bytes: &[u8], mode: Option<u32>) -> io::Result<()> {
        let keep = match lstat_at(self.fd(), name) {
            Ok(meta) if meta.is_file() => Some(meta.perm),
            // A link is replaced, never followed: the rename puts the file in its place.
            Ok(meta) if meta.is_symlink() => None,
            Ok(meta) => return Err(not_regular(meta.kind)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let temp = temp_name();
        // 0600 while it is written when a mode is set afterwards, else the default mode.
        let create = if mode.or(keep).is_some() {
            0o600
        } else {
            0o666
        };
        let fd = openat(
            self.fd(),
            &temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
            create,
        )?;
        let mut file = File::from(fd);
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_data())
            .and_then(|()| match mode.or(keep) {
                Some(m) => rustix::fs::fchmod(&file, Mode::from_raw_mode(m)).map_err(errno),
                None => Ok(()),
            })
            .and_then(|()| rustix::fs::renameat(self.fd(), &temp, self.fd(), name).map_err(errno));
        if written.is_err() {
            let _ = rustix::fs::unlinkat(self.fd(), &temp, AtFlags::empty());
        }
        written
    }

    /// Opens `rel` for appending, created with `create_mode` when given and missing: never
    /// through a link, never a FIFO, socket or device (refused, [`NotRegular`]). Missing parent
    /// directories are not created.
    pub fn open_append(&self, rel: &Path, create_mode: Option<u32>) -> io::Result<File> {
        let (dir, name) = self.parent(rel, None)?;
        dir.append_name(&name, create_mode, false)
    }

    /// Creates `rel` (which must not exist yet) for appending, with `mode`.
    pub fn create_new(&self, rel: &Path, mode: u32) -> io::Result<File> {
        let (dir, name) = self.parent(rel, None)?;
        dir.append_name(&name, Some(mode), true)
    }

    fn append_name(&self, name: &OsStr, create: Option<u32>, new: bool) -> io::Result<File> {
        let mut flags = OFlags::RDWR | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::NOCTTY;
        if create.is_some() {
            flags |= OFlags::CREATE;
        }
        if new {
            flags |= OFlags::EXCL;
        } else {
            // Not even opened when something else stands there (a FIFO's open would let a
            // reader waiting on it through).
            match lstat_at(self.fd(), name) {
                Ok(meta) if !meta.is_file() => return Err(not_regular(meta.kind)),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound && create.is_some() => {}
                Err(e) => return Err(e),
            }
            flags |= OFlags::NONBLOCK;
        }
        let fd = match openat(self.fd(), name, flags, create.unwrap_or(0o600)) {
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(not_regular(FileType::Symlink));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                return Err(not_regular(FileType::Socket));
            }
            other => other?,
        };
        let meta = fstat(fd.as_fd())?;
        if !meta.is_file() {
            return Err(not_regular(meta.kind));
        }
        if !new {
            set_blocking(fd.as_fd())?;
        }
        Ok(File::from(fd))
    }

    /// The target of the symlink `rel` (its directory reached without following a link).
    pub fn read_link(&self, rel: &Path) -> io::Result<Vec<u8>> {
        let (dir, name) = self.parent(rel, None)?;
        rustix::fs::readlinkat(dir.fd(), name.as_os_str(), Vec::new())
            .map(|target| target.into_bytes())
            .map_err(errno)
    }

    /// Removes the file or link `rel` (never a directory, never through a link).
    pub fn remove_file(&self, rel: &Path) -> io::Result<()> {
        let (dir, name) = self.parent(rel, None)?;
        rustix::fs::unlinkat(dir.fd(), &name, AtFlags::empty()).map_err(errno)
    }

    /// Checks that a file could be created in this directory: creates a temp file and
    /// removes it again.
    pub fn check_writable(&self) -> io::Result<()> {
        let temp = temp_name();
        let fd = openat(
            self.fd(),
            &temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW,
            0o600,
        )?;
        drop(fd);
        rustix::fs::unlinkat(self.fd(), &temp, AtFlags::empty()).map_err(errno)
    }
}

/// The canonical form of `path` as this process first resolved it: the workspace, a `--write`
/// or `--read` folder, a toolchain the sandbox binds. A command that later renames a folder on
/// the way, or swaps one for a link (to `~/.ssh`, say), does not move it: callers open the
/// remembered path with no link followed, so a path that changed fails instead of leading
/// elsewhere. A path missing the first time is remembered where it would be
/// ([`real_or_planned`]) and answered once it exists there. `None` while nothing is there.
/// The configuration resolves its folders through here when it loads, before any command.
pub fn resolved_once(path: &Path) -> Option<PathBuf> {
    static SEEN: std::sync::Mutex<Vec<(PathBuf, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut seen = SEEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let real = match seen.iter().find(|(named, _)| named == path) {
        Some((_, real)) => real.clone(),
        None => {
            let real = std::fs::canonicalize(path).unwrap_or_else(|_| real_or_planned(path));
            seen.push((path.to_path_buf(), real.clone()));
            real
        }
    };
    std::fs::symlink_metadata(&real).is_ok().then_some(real)
}

/// Whether the absolute, canonical-looking `path` exists with no symlink at any component:
/// one `openat2(RESOLVE_NO_SYMLINKS)` where the kernel has it, else `canonicalize` compared.
pub fn has_no_link_on_the_way(path: &Path) -> bool {
    if OPENAT2.load(Ordering::Relaxed) != OPENAT2_NO {
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        match rustix::fs::openat2(
            rustix::fs::CWD,
            path,
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            resolve,
        ) {
            // `..` may still lead somewhere else by name: only a plain path counts.
            Ok(_) => return path.is_absolute() && lexical(path) == path,
            Err(Errno::NOSYS | Errno::PERM | Errno::AGAIN | Errno::INTR) => {}
            Err(_) => return false,
        }
    }
    std::fs::canonicalize(path).is_ok_and(|now| now == path)
}

/// `path` with `.` and `..` folded by name, its existing part resolved (links followed) and
/// the rest appended: where something at `path` would really be, also before it exists.
pub fn real_or_planned(path: &Path) -> PathBuf {
    let lexical = lexical(path);
    planned(&lexical).unwrap_or(lexical)
}

/// Where something at `path` would be made, `..` taken as the kernel takes it: its nearest
/// existing ancestor resolved (links followed, so `DIR/link/..` is the link target's parent),
/// and the missing names after it. `None` when no ancestor exists, or a `..` follows a
/// missing name (nothing can be made there).
pub fn planned(path: &Path) -> Option<PathBuf> {
    let mut existing = path;
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(existing).is_err() {
        missing.push(existing.file_name()?);
        existing = existing.parent()?;
    }
    let mut real = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    real.extend(missing.iter().rev());
    Some(real)
}

/// `path` with `.` and `..` folded by name (`a/./b/../c` → `a/c`), without touching the
/// filesystem: what the path says, not where a link on the way would lead.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Whether `path` (made absolute) lies lexically beneath one of `anchors`, as given or with
/// links resolved: then [`locate`] reaches it without following a link below that anchor.
pub fn is_beneath(path: &Path, anchors: &[&Path]) -> bool {
    let Ok(abs) = std::path::absolute(path) else {
        return false;
    };
    anchors.iter().any(|anchor| {
        std::path::absolute(anchor).is_ok_and(|a| {
            abs.starts_with(&a) || std::fs::canonicalize(&a).is_ok_and(|r| abs.starts_with(r))
        })
    })
}

/// The directory holding the file `path` and the file's name. The directory is reached from
/// the first of `anchors` it lies beneath without following any link below that anchor (a
/// folder in the workspace swapped for a link to `~/.config` is refused); a path beneath none
/// of them is reached by name (the user named it). A relative `path` is taken from the
/// current directory, and `..` is folded by name first: `sub/../x` is `x` beside `sub`, never
/// the parent of wherever a link named `sub` points (a command could make `sub` that link).
pub fn locate(path: &Path, anchors: &[&Path]) -> io::Result<(Dir, OsString)> {
    let mut abs = PathBuf::new();
    for c in std::path::absolute(path)?.components() {
        match c {
            Component::ParentDir => {
                abs.pop();
            }
            Component::CurDir => {}
            other => abs.push(other),
        }
    }
    let name = match abs.components().next_back() {
        Some(Component::Normal(name)) => name.to_os_string(),
        _ => return Err(errno(Errno::ISDIR)),
    };
    let parent = abs.parent().unwrap_or(Path::new("/"));
    for anchor in anchors {
        let Ok(anchor_abs) = std::path::absolute(anchor) else {
            continue;
        };
        // Lexically beneath the anchor as given, or as it really is.
        let real_anchor = std::fs::canonicalize(&anchor_abs).unwrap_or(anchor_abs.clone());
        let rel = parent
            .strip_prefix(&anchor_abs)
            .or_else(|_| parent.strip_prefix(&real_anchor));
        if let Ok(rel) = rel
            && !rel.components().any(|c| c == Component::ParentDir)
        {
            let root = Dir::open(&real_anchor)?;
            return Ok((root.dir(rel, None)?, name));
        }
    }
    Ok((Dir::open(parent)?, name))
}

/// Reads the regular file `path` (the last component never followed) of at most `max` bytes;
/// see [`locate`] for how its directory is reached.
pub fn read_file(path: &Path, anchors: &[&Path], max: u64) -> io::Result<Vec<u8>> {
    let (dir, name) = locate(path, anchors)?;
    let Some((mut file, meta)) = dir.open_name(&name)? else {
        return Err(errno(Errno::NOENT));
    };
    read_bounded(&mut file, meta.len, max)
}

/// Writes `path` atomically (see [`Dir::write_atomic`]); see [`locate`] for how its
/// directory is reached.
pub fn write_file(
    path: &Path,
    anchors: &[&Path],
    bytes: &[u8],
    mode: Option<u32>,
) -> io::Result<()> {
    let (dir, name) = locate(path, anchors)?;
    dir.replace(&name, bytes, mode)
}

/// Opens `path` for appending (see [`Dir::open_append`]); see [`locate`] for how its
/// directory is reached.
pub fn append_file(path: &Path, anchors: &[&Path], create_mode: Option<u32>) -> io::Result<File> {
    let (dir, name) = locate(path, anchors)?;
    dir.append_name(&name, create_mode, false)
}

/// Creates `path`, which must not exist, for appending with `mode`; see [`locate`].
pub fn create_new(path: &Path, anchors: &[&Path], mode: u32) -> io::Result<File> {
    let (dir, name) = locate(path, anchors)?;
    dir.append_name(&name, Some(mode), true)
}

/// Opens the regular file `path` for reading, the last component never followed; see
/// [`locate`] for how its directory is reached. Its size is the caller's to bound.
pub fn open_file(path: &Path, anchors: &[&Path]) -> io::Result<(File, Meta)> {
    let (dir, name) = locate(path, anchors)?;
    dir.open_name(&name)?.ok_or_else(|| errno(Errno::NOENT))
}

/// Removes the file or link `path` (never what a link points to); see [`locate`].
pub fn remove_file(path: &Path, anchors: &[&Path]) -> io::Result<()> {
    let (dir, name) = locate(path, anchors)?;
    rustix::fs::unlinkat(dir.fd(), &name, AtFlags::empty()).map_err(errno)
}

/// Removes `path` and everything beneath it, following no link, in bounded stack and with two
/// descriptors however deep the tree goes: a command can leave folders nested thousands deep
/// (beyond `PATH_MAX`), which a recursive removal (`std::fs::remove_dir_all`) cannot take
/// without overflowing its stack or running out of descriptors. Each folder that is not
/// empty has its entries moved up into `path` under fresh names (never over an existing one)
/// and is then removed; a folder its owner made unreadable gets `0700` back through a
/// descriptor first. `path` itself, when a link or a file, is unlinked. Done when `path` is
/// gone; an entry that cannot be removed (immutable, another owner's) is an error.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    let top = open_dir_to_empty(rustix::fs::CWD, path)?;
    let mut fresh: u64 = 0;
    loop {
        let names = dir_entries(&top)?;
        if names.is_empty() {
            break;
        }
        let mut progressed = false;
        for name in names {
            let Ok(st) = rustix::fs::statat(&top, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            else {
                continue;
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                rustix::fs::unlinkat(&top, name.as_c_str(), AtFlags::empty()).map_err(errno)?;
                progressed = true;
                continue;
            }
            if rustix::fs::unlinkat(&top, name.as_c_str(), AtFlags::REMOVEDIR).is_ok() {
                progressed = true;
                continue;
            }
            let sub = open_dir_to_empty(&top, name.as_c_str())?;
            for inner in dir_entries(&sub)? {
                loop {
                    fresh += 1;
                    let up = format!(".baton-removing-{fresh}");
                    let moved = || {
                        rustix::fs::renameat_with(
                            &sub,
                            inner.as_c_str(),
                            &top,
                            up.as_str(),
                            rustix::fs::RenameFlags::NOREPLACE,
                        )
                    };
                    match moved() {
                        Err(Errno::EXIST) => continue,
                        // A folder moved to another parent must be writable to its owner
                        // (its `..` changes): one a command made unwritable is given 0700.
                        Err(Errno::ACCESS) => {
                            let held = rustix::fs::openat(
                                &sub,
                                inner.as_c_str(),
                                OFlags::PATH
                                    | OFlags::DIRECTORY
                                    | OFlags::NOFOLLOW
                                    | OFlags::CLOEXEC,
                                Mode::empty(),
                            )
                            .map_err(errno)?;
                            chmod_held(held.as_fd(), 0o700)?;
                            match moved() {
                                Err(Errno::EXIST) => continue,
                                Err(e) => return Err(errno(e)),
                                Ok(()) => break,
                            }
                        }
                        Err(e) => return Err(errno(e)),
                        Ok(()) => break,
                    }
                }
                progressed = true;
            }
        }
        if !progressed {
            return Err(io::Error::other(format!(
                "{} could not be emptied",
                path.display()
            )));
        }
    }
    drop(top);
    std::fs::remove_dir(path)
}

/// The folder `name` in `at`, opened for listing without following a link; one its owner may
/// not read (a command's `chmod 0`) is opened as a path first and given `0700` through
/// `/proc/self/fd`, which names that very folder.
fn open_dir_to_empty<Fd: AsFd, P: rustix::path::Arg + Copy>(
    at: Fd,
    name: P,
) -> io::Result<OwnedFd> {
    let listing = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(&at, name, listing, Mode::empty()) {
        Err(Errno::ACCESS) => {}
        other => return other.map_err(errno),
    }
    let held = rustix::fs::openat(
        &at,
        name,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    chmod_held(held.as_fd(), 0o700)?;
    rustix::fs::openat(
        &held,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)
}

/// Changes the mode of the file `held` names, an `O_PATH` descriptor (which `fchmod` refuses),
/// through its `/proc/self/fd` link: that link names exactly this file, never a path a command
/// could swap meanwhile.
pub fn chmod_held(held: BorrowedFd<'_>, mode: u32) -> io::Result<()> {
    let by_fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held));
    rustix::fs::chmod(by_fd.as_str(), Mode::from_raw_mode(mode)).map_err(errno)
}

/// The names in the folder `dir` (`.` and `..` aside).
fn dir_entries(dir: &OwnedFd) -> io::Result<Vec<std::ffi::CString>> {
    let list = rustix::fs::Dir::read_from(dir).map_err(errno)?;
    let mut out = Vec::new();
    for entry in list {
        let entry = entry.map_err(errno)?;
        let name = entry.file_name();
        if name.to_bytes() != b"." && name.to_bytes() != b".." {
            out.push(name.to_owned());
        }
    }
    Ok(out)
}

/// Opens the regular file `path` for reading as git and the trust digests read files:
/// ordinary links are followed, a magic link (`/proc/self/fd/…`, `/dev/stdin`) never; a FIFO,
/// socket, device or directory is refused without being opened ([`NotRegular`]). A relative
/// path is taken from the current directory.
pub fn open_following(path: &Path) -> io::Result<(File, Meta)> {
    if OPENAT2.load(Ordering::Relaxed) != OPENAT2_NO {
        match open_following_openat2(path) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
            }
            Err(e)
                if e.raw_os_error() == Some(libc::EPERM)
                    && OPENAT2.load(Ordering::Relaxed) == OPENAT2_UNKNOWN =>
            {
                let walked = open_following_walk(path);
                if walked.is_ok() {
                    OPENAT2.store(OPENAT2_NO, Ordering::Relaxed);
                }
                return walked;
            }
            other => return other,
        }
    }
    open_following_walk(path)
}

/// The `openat2` way: located with `O_PATH` (which opens nothing), checked, then opened.
fn open_following_openat2(path: &Path) -> io::Result<(File, Meta)> {
    let cwd = rustix::fs::CWD;
    let how = |flags: OFlags| loop {
        match rustix::fs::openat2(
            cwd,
            path,
            flags | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::NO_MAGICLINKS,
        ) {
            Err(Errno::INTR) | Err(Errno::AGAIN) => continue,
            other => break other.map_err(errno),
        }
    };
    let located = how(OFlags::PATH)?;
    let seen = fstat(located.as_fd())?;
    if !seen.is_file() {
        return Err(not_regular(seen.kind));
    }
    if on_kernel_fs(located.as_fd()) {
        return Err(not_regular(FileType::Unknown));
    }
    let fd = how(OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)?;
    let meta = fstat(fd.as_fd())?;
    // Swapped between the look and the open: refused, it is not the file that was checked.
    if !meta.is_file() || (meta.dev, meta.ino) != (seen.dev, seen.ino) {
        return Err(not_regular(meta.kind));
    }
    set_blocking(fd.as_fd())?;
    OPENAT2.store(OPENAT2_YES, Ordering::Relaxed);
    Ok((File::from(fd), meta))
}

/// Without `openat2`: the path is resolved here, one component at a time, each link read and
/// its target walked in turn; a link inside procfs (where the magic ones live) is refused.
fn open_following_walk(path: &Path) -> io::Result<(File, Meta)> {
    let abs = std::path::absolute(path)?;
    let root = || {
        openat(
            rustix::fs::CWD,
            OsStr::new("/"),
            OFlags::PATH | OFlags::DIRECTORY,
            0,
        )
    };
    let mut pending: std::collections::VecDeque<OsString> = abs
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            _ => None,
        })
        .collect();
    let mut dir = root()?;
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        let meta = lstat_at(dir.as_fd(), &name)?;
        if meta.is_symlink() {
            let in_proc = rustix::fs::fstatfs(&dir)
                .map(|fs| fs.f_type == libc::PROC_SUPER_MAGIC)
                .unwrap_or(true);
            links += 1;
            if in_proc || links > MAX_LINKS {
                return Err(errno(Errno::LOOP));
            }
            let target =
                rustix::fs::readlinkat(dir.as_fd(), name.as_os_str(), Vec::new()).map_err(errno)?;
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            if target.is_absolute() {
                dir = root()?;
            }
            for c in target.components().rev() {
                match c {
                    Component::Normal(n) => pending.push_front(n.to_os_string()),
                    Component::ParentDir => pending.push_front(OsString::from("..")),
                    _ => {}
                }
            }
            continue;
        }
        if pending.is_empty() {
            let holder = Dir {
                fd: dir,
                path: PathBuf::new(),
                walk_only: true,
            };
            return holder.open_name(&name)?.ok_or_else(|| errno(Errno::NOENT));
        }
        dir = if name == ".." {
            openat(dir.as_fd(), &name, OFlags::PATH | OFlags::DIRECTORY, 0)?
        } else {
            open_subdir(dir.as_fd(), &name)?
        };
    }
    Err(not_regular(FileType::Directory))
}

/// The files the `ignore` crate's walker (and libgit2, for a status or a diff) opens by name in
/// a folder it enters — following links, blocking, outside this module: `.gitignore`,
/// `.ignore`, `.gitattributes`, and a repository's `info/exclude` and `commondir`. A FIFO
/// among them (a command's `mkfifo sub/.gitignore`) would hold the walk, and baton's turn
/// with it, until something writes to it.
const WALKER_OPENS: &[&str] = &[
    ".gitignore",
    ".ignore",
    ".gitattributes",
    ".git/info/exclude",
    ".git/commondir",
];

/// Whether `p` is there and, where its links lead, not a regular file, or a kernel file (one
/// that looks regular and may still wait in its read, `/proc/kmsg`, or never end): looked
/// at, never opened.
fn would_block(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| {
        !m.is_file() || rustix::fs::statfs(p).is_ok_and(|fs| is_kernel_fs(fs.f_type as u64))
    })
}

/// The first of the files the `ignore` crate's walker would open in `dir` that is there and
/// is not a regular file where its links lead, or is a file of procfs, sysfs, debugfs or
/// tracefs (looked at, never opened): a walk must not enter such a folder. `None` when the
/// walker may enter.
pub fn walker_would_block_in(dir: &Path) -> Option<PathBuf> {
    let not_regular = |p: &Path| would_block(p);
    if let Some(p) = WALKER_OPENS
        .iter()
        .map(|name| dir.join(name))
        .find(|p| not_regular(p))
    {
        return Some(p);
    }
    // A `.git` file (a worktree, a submodule) sends the walker to its gitdir's files.
    let dot_git = dir.join(".git");
    let text = read_following(&dot_git, 4096).ok()?;
    let gitdir = String::from_utf8_lossy(&text)
        .lines()
        .find_map(|l| l.strip_prefix("gitdir:"))
        .map(|g| dir.join(g.trim()))?;
    ["info/exclude", "commondir"]
        .iter()
        .map(|name| gitdir.join(name))
        .find(|p| not_regular(p))
}

/// The files of a gitdir libgit2 opens by name, blocking, to open the repository and look at
/// its state (status, diff, commit); commands may write most of them.
const GITDIR_OPENS: &[&str] = &[
    "HEAD",
    "config",
    "config.worktree",
    "commondir",
    "index",
    "packed-refs",
    "shallow",
    "info/exclude",
    "info/attributes",
    "info/grafts",
    "objects/info/alternates",
];

/// The first file of the repository enclosing `start` (its gitdir, the common dir it names,
/// the branch file its `HEAD` names) that libgit2 would open and that is not a regular file
/// or is a kernel file, as [`walker_would_block_in`] judges: git's look at the repository
/// must not start then. Bounded: the nearest `.git` above `start` only.
pub fn gitdir_would_block_at(start: &Path) -> Option<PathBuf> {
    let not_regular = |p: &Path| would_block(p);
    let dot_git = start
        .ancestors()
        .map(|a| a.join(".git"))
        .find(|g| std::fs::symlink_metadata(g).is_ok())?;
    if not_regular(&dot_git) && !dot_git.is_dir() {
        return Some(dot_git);
    }
    let gitdir = if dot_git.is_dir() {
        dot_git
    } else {
        let text = read_following(&dot_git, 4096).ok()?;
        let named = String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("gitdir:").map(|g| g.trim().to_string()))?;
        dot_git.parent()?.join(named)
    };
    let mut dirs = vec![gitdir.clone()];
    if let Ok(text) = read_following(&gitdir.join("commondir"), 4096) {
        dirs.push(gitdir.join(String::from_utf8_lossy(&text).trim()));
    }
    for dir in &dirs {
        if let Some(p) = GITDIR_OPENS
            .iter()
            .map(|n| dir.join(n))
            .find(|p| not_regular(p))
        {
            return Some(p);
        }
    }
    let head = read_following(&gitdir.join("HEAD"), 4096).ok()?;
    let branch = String::from_utf8_lossy(&head)
        .strip_prefix("ref:")
        .map(|r| r.trim().to_string())?;
    dirs.iter()
        .map(|d| d.join(&branch))
        .find(|p| not_regular(p))
}

/// [`walker_would_block_in`] for a walk of `root`: the walker reads the ignore files of
/// `root` and of every folder above it before it lists anything.
pub fn walk_would_block_at(root: &Path) -> Option<PathBuf> {
    root.ancestors().find_map(walker_would_block_in)
}

/// The content of the regular file `path` as [`open_following`] opens it, of at most `max`
/// bytes (`FileTooLarge` past that).
pub fn read_following(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (mut file, meta) = open_following(path)?;
    read_bounded(&mut file, meta.len, max)
}

/// For tests of readers: did a reader open this FIFO? Without hanging either way.
#[cfg(test)]
pub(crate) mod fifo_watch {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A FIFO with a writer waiting on it: the writer's open returns only once some reader
    /// opened the read end, and closes at once (that reader sees an empty file, so a reader
    /// that opens it does not hang either), then waits for the next reader.
    pub struct FifoWatch {
        path: PathBuf,
        opened: Arc<AtomicBool>,
        stop: Arc<AtomicBool>,
        writer: Option<std::thread::JoinHandle<()>>,
    }

    pub fn fifo_watch(path: &Path) -> FifoWatch {
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            path,
            rustix::fs::Mode::from_raw_mode(0o644),
        )
        .unwrap();
        let opened = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (path, opened, stop) = (path.to_path_buf(), opened.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let f = std::fs::OpenOptions::new().write(true).open(&path);
                    if !stop.load(Ordering::SeqCst) {
                        opened.store(true, Ordering::SeqCst);
                    }
                    drop(f);
                }
            })
        };
        FifoWatch {
            path: path.to_path_buf(),
            opened,
            stop,
            writer: Some(writer),
        }
    }

    impl FifoWatch {
        /// Whether any reader opened the FIFO so far; stops the writer.
        pub fn was_opened(mut self) -> bool {
            use std::os::unix::fs::OpenOptionsExt;
            let opened = self.opened.load(Ordering::SeqCst);
            self.stop.store(true, Ordering::SeqCst);
            // Let the writer's pending open through: open the read end ourselves.
            let _reader = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path);
            if let Some(w) = self.writer.take() {
                let _ = w.join();
            }
            opened
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_with_a_link_or_a_dotdot_on_the_way_is_not_plain() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("real/sub")).unwrap();
        std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
        assert!(has_no_link_on_the_way(&base.join("real/sub")));
        assert!(!has_no_link_on_the_way(&base.join("link/sub")));
        assert!(!has_no_link_on_the_way(&base.join("link")));
        assert!(!has_no_link_on_the_way(&base.join("real/sub/../sub")));
        assert!(!has_no_link_on_the_way(&base.join("missing")));
    }

    fn mkfifo(path: &Path) {
        rustix::fs::mkfifoat(rustix::fs::CWD, path, Mode::from_raw_mode(0o644)).unwrap();
    }

    fn anchors(root: &Path) -> [Dir; 2] {
        [Dir::open(root).unwrap(), Dir::open(root).unwrap().walking()]
    }

    /// `-o sub/../last.md` once a command made `sub` a link: the kernel would take the link's
    /// parent; the name is folded first, so the file lands beside `sub` (the attack round
    /// after #27 wrote outside the workspace this way).
    #[test]
    fn a_dot_dot_after_a_planted_link_is_folded_by_name() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        let deep = outside.path().join("victim/deep");
        std::fs::create_dir_all(&deep).unwrap();
        std::os::unix::fs::symlink(&deep, root.join("sub")).unwrap();
        write_file(&root.join("sub/../last.md"), &[&root], b"answer", None).unwrap();
        assert_eq!(std::fs::read(root.join("last.md")).unwrap(), b"answer");
        assert!(!outside.path().join("victim/last.md").exists());
    }

    #[test]
    fn nothing_below_the_anchor_is_reached_through_a_link() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("dir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("file")).unwrap();
        for d in anchors(&root) {
            assert!(d.read(Path::new("dir/secret"), 10).is_err());
            let e = d.read(Path::new("file"), 10).unwrap_err();
            assert_eq!(not_regular_kind(&e), Some("a symlink"), "{e}");
            assert!(d.open_append(Path::new("file"), Some(0o600)).is_err());
            assert!(
                d.write_atomic(Path::new("dir/x"), b"x", None, true)
                    .is_err()
            );
            assert!(d.read(Path::new("../x"), 10).is_err());
        }
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"s");
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_planted_link_is_replaced_not_written_through() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("config.toml");
        std::fs::write(&victim, "user's own\n").unwrap();
        let out = ws.path().join("last.md");
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write_file(&out, &[ws.path()], b"answer", None).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "user's own\n");
        assert!(!std::fs::symlink_metadata(&out).unwrap().is_symlink());
        assert_eq!(std::fs::read(&out).unwrap(), b"answer");
        // A folder of the anchor swapped for a link is refused, not followed.
        std::fs::remove_file(&out).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("sub")).unwrap();
        let through = ws.path().join("sub/config.toml");
        assert!(write_file(&through, &[ws.path()], b"answer", None).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "user's own\n");
    }

    #[test]
    fn fifos_are_never_opened_and_sizes_are_bounded() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        mkfifo(&root.join("p"));
        std::fs::write(root.join("big"), vec![b'x'; 100]).unwrap();
        for d in anchors(&root) {
            let e = d.read(Path::new("p"), 10).unwrap_err();
            assert_eq!(not_regular_kind(&e), Some("a FIFO (named pipe)"));
            let e = d.open_append(Path::new("p"), None).unwrap_err();
            assert_eq!(not_regular_kind(&e), Some("a FIFO (named pipe)"));
            let e = d
                .write_atomic(Path::new("p"), b"x", None, false)
                .unwrap_err();
            assert_eq!(not_regular_kind(&e), Some("a FIFO (named pipe)"));
            let e = d.read(Path::new("big"), 99).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
            assert_eq!(d.read(Path::new("big"), 100).unwrap().unwrap().len(), 100);
            assert!(d.read(Path::new("missing"), 1).unwrap().is_none());
        }
        let e = read_following(&root.join("p"), 10).unwrap_err();
        assert_eq!(not_regular_kind(&e), Some("a FIFO (named pipe)"));
        let e = open_following_walk(&root.join("p")).unwrap_err();
        assert_eq!(not_regular_kind(&e), Some("a FIFO (named pipe)"));
    }

    #[test]
    fn the_following_reader_follows_links_but_never_magic_ones() {
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("real")).unwrap();
        std::fs::write(root.join("real/f"), "content").unwrap();
        std::os::unix::fs::symlink("real", root.join("d")).unwrap();
        std::os::unix::fs::symlink("d/f", root.join("l")).unwrap();
        std::os::unix::fs::symlink("/proc/self/cwd", root.join("magic")).unwrap();
        assert_eq!(read_following(&root.join("l"), 100).unwrap(), b"content");
        assert_eq!(open_following_walk(&root.join("l")).unwrap().1.len, 7);
        let probe = std::env::current_dir().unwrap();
        if let Some(name) = std::fs::read_dir(&probe)
            .unwrap()
            .flatten()
            .find(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name())
        {
            let through = root.join("magic").join(&name);
            assert!(read_following(&through, u64::MAX).is_err());
            assert!(open_following_walk(&through).is_err());
        }
    }

    #[test]
    fn writes_keep_modes_and_leave_no_temp_files() {
        use std::os::unix::fs::PermissionsExt;
        let ws = tempfile::tempdir().unwrap();
        let root = ws.path().canonicalize().unwrap();
        std::fs::write(root.join("run.sh"), "old").unwrap();
        std::fs::set_permissions(root.join("run.sh"), std::fs::Permissions::from_mode(0o750))
            .unwrap();
        for d in anchors(&root) {
            d.write_atomic(Path::new("run.sh"), b"new", None, false)
                .unwrap();
            let mode = std::fs::metadata(root.join("run.sh"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o750);
            d.write_atomic(Path::new("a/b/c"), b"x", Some(0o600), true)
                .unwrap();
            let mode = std::fs::metadata(root.join("a/b/c"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
            std::fs::remove_dir_all(root.join("a")).unwrap();
            let mut f = d.open_append(Path::new("log"), Some(0o600)).unwrap();
            f.write_all(b"1\n").unwrap();
            d.check_writable().unwrap();
        }
        assert_eq!(std::fs::read(root.join("log")).unwrap(), b"1\n1\n");
        assert_eq!(
            std::fs::read_dir(&root).unwrap().count(),
            2,
            "a temp file was left"
        );
    }

    #[test]
    fn a_tree_deeper_than_path_max_is_removed_without_following_links() {
        use std::os::unix::fs::PermissionsExt;
        let base = tempfile::tempdir().unwrap();
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "kept").unwrap();
        let top = base.path().join("tree");
        std::fs::create_dir(&top).unwrap();
        // 3,000 levels: beyond PATH_MAX by name, beyond the descriptors a recursive walk gets.
        let mut dir = Dir::open(&top).unwrap();
        for _ in 0..3000 {
            dir = dir.dir(Path::new("d"), Some(0o755)).unwrap();
        }
        rustix::fs::symlinkat(outside.as_path(), dir.fd(), "link").unwrap();
        rustix::fs::mkdirat(dir.fd(), "locked", Mode::from_raw_mode(0o755)).unwrap();
        rustix::fs::mkdirat(dir.fd(), "locked/inner", Mode::from_raw_mode(0o755)).unwrap();
        rustix::fs::chmodat(dir.fd(), "locked", Mode::from_raw_mode(0), AtFlags::empty()).unwrap();
        std::fs::write(
            top.join(".baton-removing-1"),
            "a name the removal also uses",
        )
        .unwrap();
        // On a thread with a small stack, as baton's cleaners run.
        let target = top.clone();
        std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || remove_tree(&target).unwrap())
            .unwrap()
            .join()
            .unwrap();
        assert!(!top.exists());
        assert_eq!(
            std::fs::read_to_string(outside.join("keep")).unwrap(),
            "kept"
        );
        assert_eq!(
            std::fs::metadata(&outside).unwrap().permissions().mode() & 0o777,
            0o755,
            "the link's target was left as it was"
        );
        remove_tree(&top).unwrap();
        let file = base.path().join("file");
        std::fs::write(&file, "x").unwrap();
        remove_tree(&file).unwrap();
        assert!(!file.exists());
    }

    /// Round 26's neighbour: a project config, hooks file or `.mcp.json` linked to
    /// `/proc/kmsg` looked regular and its read waited for the kernel's next message (as
    /// root, at every session's start). Kernel files are refused like FIFOs, whichever way
    /// they are reached; the walkers' look refuses them too.
    #[test]
    fn kernel_files_are_refused_like_fifos() {
        let base = tempfile::tempdir().unwrap();
        let link = base.path().join("config.toml");
        std::os::unix::fs::symlink("/proc/version", &link).unwrap();
        let err = read_following(&link, 1 << 20).unwrap_err();
        assert!(not_regular_kind(&err).is_some(), "{err}");
        let err = open_following_walk(&link).unwrap_err();
        assert!(not_regular_kind(&err).is_some(), "{err}");
        let proc = Dir::open(Path::new("/proc")).unwrap();
        let err = proc.read(Path::new("version"), 1 << 20).unwrap_err();
        assert!(not_regular_kind(&err).is_some(), "{err}");
        std::fs::rename(&link, base.path().join(".gitignore")).unwrap();
        assert_eq!(
            walker_would_block_in(base.path()),
            Some(base.path().join(".gitignore"))
        );
        std::fs::remove_file(base.path().join(".gitignore")).unwrap();
        std::fs::write(base.path().join(".gitignore"), "*.o\n").unwrap();
        assert_eq!(walker_would_block_in(base.path()), None);
    }
}
