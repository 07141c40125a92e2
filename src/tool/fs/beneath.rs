//! Every open, create, rename and unlink the file tools do, made strictly beneath the
//! workspace root and never through a symlink, so a concurrent process that swaps a directory
//! for a symlink between a tool's path check and its use of the path cannot redirect it.
//!
//! `tool::path` first resolves a path as the model gave it (following symlinks that stay
//! inside the workspace) into its real location. That location is then opened beneath the
//! workspace root held open, by the one untrusted-file reader/writer (`crate::untrusted_fs`:
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, or an
//! `O_NOFOLLOW` walk where the kernel lacks it): a symlink appearing anywhere on the way after
//! the check makes the open fail instead of being followed. Temp files are created in,
//! renamed in and removed from the parent directory's descriptor, never by path. FIFOs,
//! sockets and devices are refused before any byte is read. What this file adds is the file
//! tools' own rules: which paths they may change, and messages the model can act on.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::sandbox::WriteRules;
use crate::tool::{IoOp, ToolError};
use crate::untrusted_fs::{Dir, Meta, not_regular_kind};

/// Largest file `write_file`, `edit` and `apply_patch` load to change (they hold it whole, and
/// diff it); bigger files are edited with commands.
pub const MAX_EDIT_BYTES: u64 = 64 * 1024 * 1024;

/// The workspace root, held open; every path below is relative to it.
pub struct Beneath {
    root: Dir,
    /// The file tools' rules for this workspace (`tool::path::tool_rules`), worked out once.
    rules: WriteRules,
}

impl Beneath {
    /// Opens the workspace root. `workspace` is canonicalized first: the root itself may be
    /// reached through symlinks (it is the user's choice), nothing below it may.
    pub fn new(workspace: &Path) -> Result<Beneath, ToolError> {
        let root = Dir::open(workspace)
            .map_err(|e| ToolError::io(IoOp::Open, workspace.display().to_string(), e))?;
        // File tools are confined to the workspace whatever the sandbox mode, so they honour
        // the protections of the workspace-write policy (git hooks and config, …) always.
        let rules = crate::tool::path::tool_rules(root.path());
        Ok(Beneath { root, rules })
    }

    /// The file tools' rules for this workspace (what may be written, what the model may
    /// not see).
    pub fn rules(&self) -> &WriteRules {
        &self.rules
    }

    /// The same root, opening by the `O_NOFOLLOW` walk only (what kernels without `openat2`
    /// get), so both paths can be tested on one kernel.
    #[cfg(test)]
    fn walking(mut self) -> Beneath {
        self.root = self.root.walking();
        self
    }

    /// `abs` relative to the root; a path elsewhere is an internal error of the caller.
    fn relative<'a>(&self, abs: &'a Path) -> Result<&'a Path, ToolError> {
        self.root.relative(abs).ok_or(ToolError::Internal {
            what: "a checked path is not beneath the workspace root",
        })
    }

    /// The parent directory of `abs` held open (created when `create`), and the file's name.
    fn parent_of(
        &self,
        abs: &Path,
        shown: &str,
        create: bool,
    ) -> Result<(Dir, std::ffi::OsString), ToolError> {
        let rel = self.relative(abs)?;
        if rel.file_name().is_none() {
            return Err(ToolError::NoParentDirectory {
                path: shown.to_string(),
            });
        }
        self.root
            .parent(rel, create.then_some(0o777))
            .map_err(|e| self.explain(IoOp::CreateDir, shown, e))
    }

    /// Turns the errors a swapped symlink causes into messages that say so.
    fn explain(&self, op: IoOp, shown: &str, e: io::Error) -> ToolError {
        match (e.raw_os_error(), not_regular_kind(&e)) {
            (Some(libc::ELOOP) | Some(libc::ENOTDIR), _) | (_, Some("a symlink")) => {
                ToolError::rejected(format!(
                    "{shown}: a symlink or a non-directory is in the way (the path changed \
                     after it was checked); file tools never follow a symlink that appears \
                     while they work. Check the path with list_dir and try again"
                ))
            }
            (Some(libc::EXDEV), _) => {
                ToolError::rejected(format!("{shown}: the path leads outside the workspace"))
            }
            (Some(libc::EISDIR), _) | (_, Some("a directory")) => ToolError::rejected(format!(
                "{shown} is a directory; use list_dir to see its contents"
            )),
            (_, Some(kind)) => ToolError::rejected(format!(
                "{shown} is {kind}, not a regular file; file tools only read and write regular \
                 files"
            )),
            _ => ToolError::io(op, shown, e),
        }
    }

    /// Refuses a change to `name` in `dir` when the directory's real location (read back
    /// from the open descriptor, so a rename after the check does not matter) is one the
    /// sandbox protects, or inside a `.git` directory.
    fn check_writable(&self, dir: &Dir, name: &OsStr, shown: &str) -> Result<(), ToolError> {
        let link = PathBuf::from(format!("/proc/self/fd/{}", dir.fd().as_raw_fd()));
        let Ok(real) = std::fs::read_link(&link) else {
            // Without /proc the checked path stands (tool::path already judged it).
            return Ok(());
        };
        let target = real.join(name);
        self.check_visible(&target, shown)?;
        // The same write rules as the sandbox's binds and `tool::path` (sandbox::WriteRules).
        if self.rules.file_tools_deny(self.root.path(), &target) {
            return Err(ToolError::rejected(format!(
                "{shown}: this path is protected (git internals, baton's own config, or outside \
                 the workspace); file tools do not write there"
            )));
        }
        Ok(())
    }

    /// Refuses `real` (where an open descriptor really is) when the sandbox hides it from
    /// commands or it is baton's own configuration (`WriteRules::hides`).
    fn check_visible(&self, real: &Path, shown: &str) -> Result<(), ToolError> {
        match self.rules.hides(real) {
            Some(why) => Err(ToolError::rejected(format!(
                "{shown} is out of the model's sight: {}; file tools neither read nor write it",
                why.explain()
            ))),
            None => Ok(()),
        }
    }

    /// Opens the regular file `abs` for reading: `Ok(None)` when it does not exist. FIFOs,
    /// sockets and devices are refused without blocking.
    pub fn open_regular(&self, abs: &Path, shown: &str) -> Result<Option<(File, u64)>, ToolError> {
        let rel = self.relative(abs)?;
        let found = match self.root.open_regular(rel) {
            Ok(found) => found,
            Err(e) => return Err(self.explain(IoOp::Open, shown, e)),
        };
        let Some((file, meta)) = found else {
            return Ok(None);
        };
        // Judged where the descriptor really is: `tool::path` judged the path as resolved
        // before the open.
        let link = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        let real = std::fs::read_link(&link).unwrap_or_else(|_| abs.to_path_buf());
        self.check_visible(&real, shown)?;
        Ok(Some((file, meta.len)))
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
    pub fn lstat(&self, abs: &Path) -> Option<Meta> {
        let rel = self.relative(abs).ok()?;
        self.root.lstat(rel).ok().flatten()
    }

    /// Permission bits of the regular file at `abs`, if there is one.
    pub fn mode_of(&self, abs: &Path) -> Option<u32> {
        self.lstat(abs).filter(Meta::is_file).map(|m| m.perm)
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
        let existing = dir
            .lstat(Path::new(&name))
            .map_err(|e| ToolError::io(IoOp::Inspect, shown, e))?;
        let mode = match existing {
            Some(meta) if meta.is_file() => mode,
            Some(meta) => {
                return Err(ToolError::rejected(format!(
                    "{shown} is {}, not a regular file; file tools only replace regular files",
                    crate::untrusted_fs::kind_name(meta.kind)
                )));
            }
            None => Some(mode.unwrap_or(0o644)),
        };
        dir.replace(&name, bytes, mode)
            .map_err(|e| ToolError::io(IoOp::Replace, shown, e))
    }

    /// Removes the regular file `abs` through its parent directory's descriptor.
    pub fn remove_file(&self, abs: &Path, shown: &str) -> Result<(), ToolError> {
        let (dir, name) = self.parent_of(abs, shown, false)?;
        self.check_writable(&dir, &name, shown)?;
        let name = Path::new(&name);
        match dir.lstat(name) {
            Ok(Some(meta)) if meta.is_file() || meta.is_symlink() => {}
            Ok(Some(meta)) => {
                return Err(ToolError::rejected(format!(
                    "{shown} is {}, not a regular file; file tools only delete regular files",
                    crate::untrusted_fs::kind_name(meta.kind)
                )));
            }
            Ok(None) => {
                return Err(ToolError::io(
                    IoOp::Delete,
                    shown,
                    io::Error::from(io::ErrorKind::NotFound),
                ));
            }
            Err(e) => return Err(ToolError::io(IoOp::Delete, shown, e)),
        }
        dir.remove_file(name)
            .map_err(|e| ToolError::io(IoOp::Delete, shown, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::sync::atomic::Ordering;

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
