//! File operations beneath the workspace that never follow a symlink, for undo: the one
//! untrusted-file reader/writer (`crate::untrusted_fs`) reaches every directory beneath the
//! root without following a link (`openat2` or an `O_NOFOLLOW` walk), so a directory swapped
//! for a symlink (to anywhere) stops the operation instead of redirecting a write or a delete
//! outside. This file adds what undo needs on top: what stands at a name (file, link, other)
//! and putting a file or link back.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::renameat;
use nix::sys::stat::{FileStat, SFlag, fstatat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use crate::untrusted_fs::{Dir, not_regular_kind};

/// What stands at a path, read without following symlinks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Missing,
    File {
        bytes: Vec<u8>,
        executable: bool,
    },
    Link(Vec<u8>),
    /// A FIFO, socket or device node: it holds no data, so undo may replace it.
    Special,
    /// A directory, or a file too large or unreadable to compare.
    Other,
}

/// The errno an `untrusted_fs` error stands for (a refusal of a non-regular file has none).
fn to_errno(e: io::Error) -> Errno {
    match (e.raw_os_error(), not_regular_kind(&e)) {
        (Some(raw), _) => Errno::from_raw(raw),
        (None, Some("a directory")) => Errno::EISDIR,
        (None, Some("a symlink")) => Errno::ELOOP,
        _ => Errno::EINVAL,
    }
}

/// Opens the workspace root itself (the one path resolved by name: the user chose it).
pub fn open_root(root: &Path) -> Result<Dir, Errno> {
    Dir::open(root).map_err(to_errno)
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
/// `create` is set. Returns the directory and the last component's name. A symlink, file or
/// anything else standing where a directory should be fails with `ENOTDIR`/`ELOOP`.
pub fn open_parent<'a>(root: &Dir, rel: &'a Path, create: bool) -> Result<(Dir, &'a OsStr), Errno> {
    let parts = components(rel).ok_or(Errno::EINVAL)?;
    let last = *parts.last().ok_or(Errno::EINVAL)?;
    let (dir, _) = root
        .parent(rel, create.then_some(0o755))
        .map_err(to_errno)?;
    Ok((dir, last))
}

fn stat_at(dir: &Dir, name: &OsStr) -> Result<Option<FileStat>, Errno> {
    match fstatat(dir.fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// Reads what stands at `name` in `dir`. Files over `max_bytes` read as `Other`.
pub fn read_at(dir: &Dir, name: &OsStr, max_bytes: u64) -> Result<Found, Errno> {
    let at = Path::new(name);
    let Some(meta) = dir.lstat(at).map_err(to_errno)? else {
        return Ok(Found::Missing);
    };
    if meta.is_symlink() {
        return Ok(Found::Link(dir.read_link(at).map_err(to_errno)?));
    }
    if !meta.is_file() && !meta.is_dir() {
        return Ok(Found::Special);
    }
    if !meta.is_file() || meta.len > max_bytes {
        return Ok(Found::Other);
    }
    match dir.read(at, max_bytes) {
        Ok(Some(bytes)) => Ok(Found::File {
            bytes,
            executable: meta.perm & 0o111 != 0,
        }),
        Ok(None) => Ok(Found::Missing),
        // Unreadable, swapped for something else, or grown past the bound: not comparable.
        Err(e)
            if matches!(
                e.raw_os_error(),
                None | Some(libc::EACCES) | Some(libc::EPERM)
            ) || e.kind() == io::ErrorKind::FileTooLarge =>
        {
            Ok(Found::Other)
        }
        Err(e) => Err(to_errno(e)),
    }
}

/// Reads what stands at `rel` beneath the root; a path through a symlink or non-directory
/// reads as `Missing` (nothing stands at that path without following a link).
pub fn read_path(root: &Dir, rel: &Path, max_bytes: u64) -> Result<Found, Errno> {
    match open_parent(root, rel, false) {
        Ok((dir, name)) => read_at(&dir, name, max_bytes),
        Err(Errno::ENOENT) | Err(Errno::ENOTDIR) | Err(Errno::ELOOP) => Ok(Found::Missing),
        Err(e) => Err(e),
    }
}

/// Puts a file or symlink at `name` in `dir`: written under a temporary name beside it, then
/// renamed over (a link standing there is replaced, never written through). A directory
/// standing there is not replaced.
pub fn put_at(dir: &Dir, name: &OsStr, content: &[u8], mode: PutMode) -> Result<(), Errno> {
    match mode {
        PutMode::File { executable } => {
            let bits = if executable { 0o755 } else { 0o644 };
            dir.replace(name, content, Some(bits)).map_err(to_errno)
        }
        PutMode::Link => {
            let temp = format!(".baton-undo-{}", uuid::Uuid::now_v7().simple());
            symlinkat(OsStr::from_bytes(content), dir.fd(), temp.as_str())?;
            if let Err(e) = renameat(dir.fd(), temp.as_str(), dir.fd(), name) {
                let _ = unlinkat(dir.fd(), temp.as_str(), UnlinkatFlags::NoRemoveDir);
                return Err(e);
            }
            Ok(())
        }
    }
}

/// How `put_at` creates the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutMode {
    File { executable: bool },
    Link,
}

/// Removes the file or symlink `name` (never a directory, never through a link).
pub fn remove_at(dir: &Dir, name: &OsStr) -> Result<(), Errno> {
    unlinkat(dir.fd(), name, UnlinkatFlags::NoRemoveDir)
}

/// Removes the directory `rel` when it is empty (a symlink is not removed).
pub fn remove_empty_dir(root: &Dir, rel: &Path) -> Result<(), Errno> {
    let (dir, name) = open_parent(root, rel, false)?;
    match stat_at(&dir, name)? {
        Some(st) if kind(&st) == SFlag::S_IFDIR => {
            unlinkat(dir.fd(), name, UnlinkatFlags::RemoveDir)
        }
        _ => Err(Errno::ENOTDIR),
    }
}
