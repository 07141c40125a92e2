//! Files the runner writes into a trial's folders: scripts pointed at them, fresh files, walks.

use std::path::{Path, PathBuf};

use crate::eval::isolation::{Isolation, IsolationKind, TrialPaths};

/// Plain mode only: scripts copied into the trial refer to `/app`, `/tests` …; point them at
/// the trial's folders. Binary and large files are left alone.
pub(super) fn rewrite_text_files(
    iso: &Isolation,
    paths: &TrialPaths,
    ctx: Option<&Path>,
    dir: &Path,
) {
    if iso.kind != IsolationKind::Plain {
        return;
    }
    for entry in walk_files(dir) {
        let Ok(meta) = std::fs::metadata(&entry) else {
            continue;
        };
        if meta.len() > 1 << 20 {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(&entry) {
            let new = iso.rewrite(paths, ctx, &text);
            if new != text {
                let _ = std::fs::write(&entry, new);
            }
        }
    }
}

pub(super) fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(p),
                Ok(t) if t.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out
}

/// Writes `bytes` to a new file at `path` in a folder the trial could write: whatever it left
/// there (a link to a host file) is removed first, never written through.
pub(super) fn write_fresh(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or(Path::new("/"));
    crate::eval::fsutil::create_trial_output(dir, path)?.write_all(bytes)
}
