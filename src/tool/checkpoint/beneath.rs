//! File operations beneath the workspace that never follow a symlink: every path is walked
//! component by component from a directory fd with `O_NOFOLLOW`, so a directory swapped for a
//! symlink (to anywhere) stops the walk instead of redirecting a write or a delete outside.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

/// What stands at a path, read without following symlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    File {
        bytes: Vec<u8>,
        executable: bool,
    },
    Link(Vec<u8>),
    /// A directory, device, FIFO, socket, or a file too large or unreadable to compare.
    Other,
}

fn dir_flags() -> OFlag {
    OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY
}

/// Opens the workspace root itself (the one path resolved by name: the user chose it).
pub fn open_root(root: &Path) -> Result<OwnedFd, Errno> {
    nix::fcntl::open(root, dir_flags(), Mode::empty())
}

/// The normal components of `rel`; `None` when it has any other kind (`..`, `/`, `.`).
fn components(rel: &Path) -> Option<Vec<&OsStr>> {
    let mut out = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(name) => out.push(name),
            _ => return None,
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Opens the directory holding `rel`'s last component, creating missing directories when
/// `create` is set. Returns the fd and the last component's name. A symlink, file or anything
/// else standing where a directory should be fails with `ENOTDIR`/`ELOOP`.
pub fn open_parent<'a>(
    root: &OwnedFd,
    rel: &'a Path,
    create: bool,
) -> Result<(OwnedFd, &'a OsStr), Errno> {
    let parts = components(rel).ok_or(Errno::EINVAL)?;
    let (last, dirs) = parts.split_last().ok_or(Errno::EINVAL)?;
    let mut fd = root.try_clone().map_err(|_| Errno::EBADF)?;
    for name in dirs {
        let next = match openat(fd.as_fd(), *name, dir_flags(), Mode::empty()) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(fd.as_fd(), *name, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(e),
                }
                openat(fd.as_fd(), *name, dir_flags(), Mode::empty())?
            }
            other => other?,
        };
        fd = next;
    }
    Ok((fd, last))
}

fn stat_at(dir: &OwnedFd, name: &OsStr) -> Result<Option<FileStat>, Errno> {
    match fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// Reads what stands at `name` in `dir`. Files over `max_bytes` read as `Other`.
pub fn read_at(dir: &OwnedFd, name: &OsStr, max_bytes: u64) -> Result<Found, Errno> {
    let Some(st) = stat_at(dir, name)? else {
        return Ok(Found::Missing);
    };
    let k = kind(&st);
    if k == SFlag::S_IFLNK {
        return Ok(Found::Link(
            readlinkat(dir.as_fd(), name)?.as_bytes().to_vec(),
        ));
    }
    if k != SFlag::S_IFREG || st.st_size as u64 > max_bytes {
        return Ok(Found::Other);
    }
    let fd = match openat(
        dir.as_fd(),
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::EACCES) | Err(Errno::EPERM) => return Ok(Found::Other),
        Err(e) => return Err(e),
    };
    let mut file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    if Read::by_ref(&mut file)
        .take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .is_err()
        || bytes.len() as u64 > max_bytes
    {
        return Ok(Found::Other);
    }
    Ok(Found::File {
        bytes,
        executable: st.st_mode & 0o111 != 0,
    })
}

/// Reads what stands at `rel` beneath the root; a path through a symlink or non-directory
/// reads as `Missing` (nothing stands at that path without following a link).
pub fn read_path(root: &OwnedFd, rel: &Path, max_bytes: u64) -> Result<Found, Errno> {
    match open_parent(root, rel, false) {
        Ok((dir, name)) => read_at(&dir, name, max_bytes),
        Err(Errno::ENOENT) | Err(Errno::ENOTDIR) | Err(Errno::ELOOP) => Ok(Found::Missing),
        Err(e) => Err(e),
    }
}

/// Puts a file or symlink at `name` in `dir`: written under a temporary name beside it, then
/// renamed over. A directory standing there is not replaced (the rename fails).
pub fn put_at(dir: &OwnedFd, name: &OsStr, content: &[u8], mode: PutMode) -> Result<(), Errno> {
    let temp = format!(".baton-undo-{}", uuid::Uuid::now_v7().simple());
    match mode {
        PutMode::Link => symlinkat(OsStr::from_bytes(content), dir.as_fd(), temp.as_str())?,
        PutMode::File { executable } => {
            let fd = openat(
                dir.as_fd(),
                temp.as_str(),
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )?;
            let bits = if executable { 0o755 } else { 0o644 };
            let mut file = std::fs::File::from(fd);
            let written = file
                .write_all(content)
                .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
                .and_then(|()| {
                    nix::sys::stat::fchmod(file.as_fd(), Mode::from_bits_truncate(bits))
                });
            if let Err(e) = written {
                let _ = unlinkat(dir.as_fd(), temp.as_str(), UnlinkatFlags::NoRemoveDir);
                return Err(e);
            }
        }
    }
    if let Err(e) = renameat(dir.as_fd(), temp.as_str(), dir.as_fd(), name) {
        let _ = unlinkat(dir.as_fd(), temp.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(e);
    }
    Ok(())
}

/// How `put_at` creates the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    File { executable: bool },
    Link,
}

/// Removes the file or symlink `name` (never a directory, never through a link).
pub fn remove_at(dir: &OwnedFd, name: &OsStr) -> Result<(), Errno> {
    unlinkat(dir.as_fd(), name, UnlinkatFlags::NoRemoveDir)
}

/// Removes the directory `rel` when it is empty (a symlink is not removed).
pub fn remove_empty_dir(root: &OwnedFd, rel: &Path) -> Result<(), Errno> {
    let (dir, name) = open_parent(root, rel, false)?;
    match stat_at(&dir, name)? {
        Some(st) if kind(&st) == SFlag::S_IFDIR => {
            unlinkat(dir.as_fd(), name, UnlinkatFlags::RemoveDir)
        }
        _ => Err(Errno::ENOTDIR),
    }
}
