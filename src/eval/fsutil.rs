//! Copying a task's fixture trees into a trial (modes and symlinks kept) and removing trial
//! scratch folders even when a task made them read-only.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A copy step that failed, with the path it failed on.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{}: cannot create: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: cannot list: {source}", path.display())]
    List {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The entry's metadata or link target cannot be read.
    #[error("{}: {source}", path.display())]
    Inspect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: cannot link: {source}", path.display())]
    Link {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: cannot set mode: {source}", path.display())]
    SetMode {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} → {}: cannot copy: {source}", from.display(), to.display())]
    Copy {
        from: PathBuf,
        to: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Copies the contents of `src` into `dst` (created if needed), skipping top-level names in
/// `exclude`. Errors name the path that failed.
pub fn copy_tree(src: &Path, dst: &Path, exclude: &[String]) -> Result<(), CopyError> {
    std::fs::create_dir_all(dst).map_err(|source| CopyError::Create {
        path: dst.to_path_buf(),
        source,
    })?;
    let list = |source| CopyError::List {
        path: src.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(src).map_err(list)? {
        let entry = entry.map_err(list)?;
        let name = entry.file_name();
        if exclude.iter().any(|x| x.as_str() == name.to_string_lossy()) {
            continue;
        }
        copy_entry(&entry.path(), &dst.join(&name))?;
    }
    Ok(())
}

fn copy_entry(from: &Path, to: &Path) -> Result<(), CopyError> {
    let inspect = |source| CopyError::Inspect {
        path: from.to_path_buf(),
        source,
    };
    let meta = std::fs::symlink_metadata(from).map_err(inspect)?;
    let ft = meta.file_type();
    if ft.is_symlink() {
        let target = std::fs::read_link(from).map_err(inspect)?;
        let _ = std::fs::remove_file(to);
        std::os::unix::fs::symlink(&target, to).map_err(|source| CopyError::Link {
            path: to.to_path_buf(),
            source,
        })?;
    } else if ft.is_dir() {
        copy_tree(from, to, &[])?;
        std::fs::set_permissions(
            to,
            std::fs::Permissions::from_mode(meta.permissions().mode()),
        )
        .map_err(|source| CopyError::SetMode {
            path: to.to_path_buf(),
            source,
        })?;
    } else if ft.is_file() {
        std::fs::copy(from, to).map_err(|source| CopyError::Copy {
            from: from.to_path_buf(),
            to: to.to_path_buf(),
            source,
        })?;
    }
    Ok(())
}

/// Removes `dir` and everything in it ([`crate::untrusted_fs::remove_tree`]): a trial's
/// processes may still run (the agent's, while its verifier's folder is emptied) and swap a
/// folder for a link meanwhile, chmod folders unreadable or nest them thousands deep: nothing
/// is followed, unreadable folders get `0700` back through a descriptor, and the removal
/// needs neither a deep stack nor many descriptors.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    crate::untrusted_fs::remove_tree(dir)
}

/// The largest task file (`instruction.md`, `task.toml`, a Dockerfile, a requirements file, a
/// TB1 solution or test script) baton reads on the host.
pub const MAX_TASK_FILE: u64 = 4 << 20;

/// Reads the task file `path` as text, for a task folder `root` that may be anyone's (a
/// download, a clone): through the shared untrusted-file reader ([`crate::untrusted_fs`]), so
/// no link below `root` is followed (the file itself or a folder on the way), only a regular
/// file is opened (a FIFO never) and at most [`MAX_TASK_FILE`] bytes are read. A link to
/// `/etc/shadow` or `~/.ssh/id_rsa` would otherwise hand a host file to the agent, the model
/// endpoint and the job's results.
pub fn read_task_file(root: &Path, path: &Path) -> std::io::Result<String> {
    let bytes = read_task_bytes(root, path)?;
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// [`read_task_file`]'s bytes.
pub fn read_task_bytes(root: &Path, path: &Path) -> std::io::Result<Vec<u8>> {
    // Named for what it is in the error: a link that leads out of the task.
    if let (Ok(r), Ok(p)) = (std::fs::canonicalize(root), std::fs::canonicalize(path))
        && !p.starts_with(&r)
    {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "a link out of the task folder (not followed)",
        ));
    }
    crate::untrusted_fs::read_file(path, &[root], MAX_TASK_FILE)
}

/// The most of a trial's output baton reads (the agent's event stream, the verifier's stdout).
pub const MAX_TRIAL_OUTPUT: u64 = 256 << 20;

/// Opens a file a trial wrote in `dir`, a host folder it could write (its `/logs/...`):
/// through the shared untrusted-file reader, so a link the trial left (the file, or a folder on
/// the way) is never followed and only a regular file is opened: a FIFO would block the runner
/// for ever, a link or a device node would hand it a host file. `None` when it does not exist.
pub fn open_trial_output(dir: &Path, file: &Path) -> std::io::Result<Option<std::fs::File>> {
    let rel = relative_in(dir, file)?;
    Ok(crate::untrusted_fs::Dir::open(dir)?
        .open_regular(rel)?
        .map(|(f, _)| f))
}

/// Empties `dir`, a host folder a trial could write, following nothing in it: what an earlier
/// phase left there (a reward file the agent wrote into the verifier's logs) is gone before
/// the next phase starts.
pub fn empty_trial_folder(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => remove_tree(&path)?,
            Ok(_) => std::fs::remove_file(&path)?,
            Err(_) => {}
        }
    }
    Ok(())
}

/// Creates the output file `file` afresh in `dir`, a host folder a trial could write (the
/// runner's end of a phase's stdout and stderr, a trajectory, a manifest): whatever the trial
/// left at that name (a link to a host file, a FIFO, a file) is removed, never written through
/// or opened, and the new file is made with `O_EXCL`, so a link planted again meanwhile (the
/// trial's background processes live on) makes it fail instead of being followed.
pub fn create_trial_output(dir: &Path, file: &Path) -> std::io::Result<std::fs::File> {
    let rel = relative_in(dir, file)?;
    let dir = crate::untrusted_fs::Dir::open(dir)?;
    match dir.lstat(rel)? {
        Some(m) if m.is_dir() => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{}: the trial made a folder there", file.display()),
            ));
        }
        Some(_) => dir.remove_file(rel)?,
        None => {}
    }
    let created = dir.create_new(rel, 0o644)?;
    // `create_new` opens for appending; the caller writes from the start of a new file anyway.
    Ok(created)
}

fn relative_in<'a>(dir: &Path, file: &'a Path) -> std::io::Result<&'a Path> {
    file.strip_prefix(dir).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{} is not in {}", file.display(), dir.display()),
        )
    })
}

/// The text of a trial's output file ([`open_trial_output`]), at most `max` bytes of it (the
/// start), invalid UTF-8 replaced; empty when it does not exist.
pub fn read_trial_output(dir: &Path, file: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let Some(f) = open_trial_output(dir, file)? else {
        return Ok(String::new());
    };
    let mut bytes = Vec::new();
    f.take(max).read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The last `max` bytes of a trial's output file ([`open_trial_output`]), as text.
pub fn read_trial_tail(dir: &Path, file: &Path, max: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(Some(mut f)) = open_trial_output(dir, file) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(max))).is_err() {
        return String::new();
    }
    let mut bytes = Vec::new();
    let _ = f.take(max).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copies the task file `from` (read as [`read_task_bytes`] does) to a new file `to`, keeping
/// its permission bits.
pub fn copy_task_file(root: &Path, from: &Path, to: &Path) -> std::io::Result<()> {
    let bytes = read_task_bytes(root, from)?;
    let mode = std::fs::metadata(from)?.permissions().mode() & 0o777;
    if std::fs::symlink_metadata(to).is_ok() {
        std::fs::remove_file(to)?;
    }
    std::fs::write(to, bytes)?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Emptying a trial's folder while its processes still run: what it left keeps the
    /// removal failing (here an immutable file; in the attack, new files arriving), and a
    /// process swaps a folder in it for a link to a host folder. The fallback that opens
    /// read-only folders used to chmod by path, between its listing and the chmod, and made
    /// the host folder 0755 (sixth red team: 3 runs of 4). It goes through descriptors now.
    /// Needs root and `chattr` for the immutable file; skipped (said) where it cannot make one.
    #[test]
    fn removing_a_tree_a_trial_still_changes_never_touches_what_a_link_names() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let top = tempfile::tempdir().unwrap();
        let victim = top.path().join("victim");
        std::fs::create_dir(&victim).unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
        let x = top.path().join("x");
        std::fs::create_dir_all(x.join("d")).unwrap();
        // Folders the removal cannot empty either, which the fallback goes through before or
        // after the swapped one: they widen the moment between its listing and its chmod.
        let mut stuck = vec![x.join("d/stuck")];
        for n in 0..100 {
            std::fs::create_dir(x.join(format!("p{n}"))).unwrap();
            stuck.push(x.join(format!("p{n}/stuck")));
        }
        for f in &stuck {
            std::fs::write(f, "").unwrap();
        }
        let chattr = |flag: &str, paths: &[PathBuf]| {
            std::process::Command::new("chattr")
                .args(["-R", flag])
                .args(paths)
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !chattr("+i", &stuck) {
            eprintln!("skipped: no immutable file here (needs root and chattr)");
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, x, victim) = (stop.clone(), x.clone(), victim.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::os::unix::fs::symlink(&victim, x.join("l"));
                    let _ = nix::fcntl::renameat2(
                        nix::fcntl::AT_FDCWD,
                        &x.join("d"),
                        nix::fcntl::AT_FDCWD,
                        &x.join("l"),
                        nix::fcntl::RenameFlags::RENAME_EXCHANGE,
                    );
                }
            })
        };
        let mut changed = 0;
        for _ in 0..200 {
            assert!(remove_tree(&x).is_err(), "the immutable file was removed");
            let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
            if mode != 0o700 {
                changed += 1;
                std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o700)).unwrap();
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        let _ = std::fs::remove_file(x.join("l"));
        let _ = std::fs::remove_file(x.join("d"));
        chattr("-i", std::slice::from_ref(&x));
        assert_eq!(
            changed, 0,
            "the host folder's mode was changed through the link"
        );
    }

    /// A task's files are read only inside the task and never through a link: a link to a host
    /// file is refused (its bytes never read), FIFOs and oversized files are refused without
    /// blocking or holding them.
    #[test]
    fn task_files_never_lead_out_of_the_task() {
        let host = tempfile::tempdir().unwrap();
        let secret = host.path().join("id_rsa");
        std::fs::write(&secret, "HOST-SECRET").unwrap();
        let task = host.path().join("task");
        std::fs::create_dir_all(task.join("docs")).unwrap();
        std::fs::write(task.join("docs/text.md"), "inside").unwrap();
        std::os::unix::fs::symlink(&secret, task.join("instruction.md")).unwrap();
        std::os::unix::fs::symlink("docs/text.md", task.join("alias.md")).unwrap();
        let err = read_task_file(&task, &task.join("instruction.md")).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied, "{err}");
        // No link is followed, not even one inside the task (the shared reader's rule).
        assert!(read_task_file(&task, &task.join("alias.md")).is_err());
        assert_eq!(
            read_task_file(&task, &task.join("docs/text.md")).unwrap(),
            "inside"
        );
        let fifo = task.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_task_file(&task, &fifo).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        let big = task.join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(MAX_TASK_FILE + 1)
            .unwrap();
        let err = read_task_file(&task, &big).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::FileTooLarge);
        let copy = host.path().join("copy");
        assert!(copy_task_file(&task, &task.join("instruction.md"), &copy).is_err());
        assert!(!copy.exists());
    }
}
