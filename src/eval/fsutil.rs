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

/// Removes `dir` and everything in it; folders a task chmod-ed read-only are opened first.
pub fn remove_tree(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if std::fs::remove_dir_all(dir).is_ok() {
        return Ok(());
    }
    make_writable(dir);
    std::fs::remove_dir_all(dir)
}

fn make_writable(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                make_writable(&e.path());
            }
        }
    }
}
