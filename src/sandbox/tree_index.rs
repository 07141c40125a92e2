//! The git audit's walk of a project for `.git`, `.baton` and `HEAD` entries, remembered
//! between walks: a folder whose inode and change time are what they were when it was last
//! read has the same entries, so only folders something changed are listed again. The audit
//! walks every project root before and after each command; a shell session in a 50k-file tree
//! then pays a `statx` per folder instead of reading every folder twice.
//!
//! Why the change time can be trusted: creating, removing or renaming an entry sets the
//! folder's change time to the current time, and nothing a sandboxed command can do sets it
//! to anything else (`utimensat` sets the access and modification times and moves the change
//! time to now; the clock is out of reach). A folder is only reused when its change time lay
//! [`SETTLE`] or more before the moment it was read, so a change made right after the read,
//! within the file system's timestamp granularity, cannot carry the same value; and only on
//! the local file systems listed in [`TRUSTED_FS`] (a FUSE or network file system may report
//! whatever change time it likes): elsewhere every folder is read on every walk.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long before it was read a folder's change time must lie for its listing to be reused.
const SETTLE: Duration = Duration::from_secs(3);

/// File systems (`statfs` magic numbers) that set a folder's change time on every change of
/// its entries: ext2/3/4, xfs, btrfs, tmpfs, overlayfs, f2fs, zfs, bcachefs.
const TRUSTED_FS: &[i64] = &[
    0xEF53,
    0x5846_5342,
    0x9123_683E,
    0x0102_1994,
    0x794C_7630,
    0xF2F5_2010,
    0x2FC1_2FC1,
    0xCA45_1A4E,
];

/// Folders remembered at most; past it the index starts over (a bound on its memory).
const MAX_FOLDERS: usize = 1_000_000;

/// What the walk found beneath a root (the root's own entries aside: see [`scan`]).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Found {
    /// `.git` entries of any type.
    pub git: Vec<PathBuf>,
    /// `.baton` entries of any type.
    pub baton: Vec<PathBuf>,
    /// Folders holding a `HEAD` that is not a folder (what a bare git directory looks like).
    pub bare: Vec<PathBuf>,
    /// Folders of the user's whose read permission the walk gave back to list them.
    pub reopened: Vec<PathBuf>,
    /// Hook managers' configurations below the root that apply to the files beneath them
    /// (prek's pre-commit configurations, lint-staged's), by name.
    pub manager_configs: Vec<PathBuf>,
}

/// How one walk went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    /// False when the walk stopped at its entry limit.
    pub complete: bool,
    /// Folders listed (read from disk).
    pub listed: usize,
    /// Folders whose remembered listing was reused.
    pub reused: usize,
}

/// The identity of a folder as `statx` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: (u32, u32),
    ino: u64,
    ctime: (i64, u32),
    mtime: (i64, u32),
}

/// One folder's listing, as far as the walk cares.
#[derive(Debug, Clone)]
struct Folder {
    stamp: Stamp,
    /// Its change time lay [`SETTLE`] before it was read: the listing may be reused.
    settled: bool,
    entries: usize,
    subdirs: Vec<OsString>,
    git: bool,
    baton: bool,
    head_file: bool,
    manager_configs: Vec<OsString>,
}

static INDEX: Mutex<Option<HashMap<PathBuf, Folder>>> = Mutex::new(None);

/// Walks `root` (canonical, a folder) for `.git` and `.baton` entries and folders holding a
/// `HEAD` file, without following symlinks or entering `.git`, visiting at most
/// `limit` entries. The root's own `.git`, `.baton` and `HEAD` are not reported (the caller
/// looks them up by name: a walk stopped by the limit must not hide them); a `HEAD` folder
/// there is walked like any other.
pub fn scan(root: &Path, limit: usize, found: &mut Found) -> Walked {
    scan_settled_after(root, limit, found, SETTLE)
}

fn scan_settled_after(root: &Path, limit: usize, found: &mut Found, settle: Duration) -> Walked {
    let mut guard = INDEX.lock().unwrap_or_else(|p| p.into_inner());
    let index = guard.get_or_insert_with(HashMap::new);
    if index.len() > MAX_FOLDERS {
        index.clear();
    }
    let mut walked = Walked {
        complete: true,
        ..Walked::default()
    };
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    let mut trusted_devs: HashMap<(u32, u32), bool> = HashMap::new();
    while let Some(dir) = stack.pop() {
        let Some(stamp) = stamp_of(&dir) else {
            index.remove(&dir);
            continue;
        };
        let reusable = index
            .get(&dir)
            .is_some_and(|f| f.settled && f.stamp == stamp);
        if reusable {
            walked.reused += 1;
        } else {
            let trusted = *trusted_devs
                .entry(stamp.dev)
                .or_insert_with(|| trusted_fs(&dir));
            let settle = if trusted { Some(settle) } else { None };
            let Some(folder) = list(&dir, stamp, settle, &mut found.reopened) else {
                index.remove(&dir);
                continue;
            };
            walked.listed += 1;
            index.insert(dir.clone(), folder);
        }
        let Some(folder) = index.get(&dir) else {
            continue;
        };
        seen += folder.entries;
        if seen > limit {
            walked.complete = false;
            return walked;
        }
        if dir != root {
            if folder.git {
                found.git.push(dir.join(".git"));
            }
            if folder.baton {
                found.baton.push(dir.join(".baton"));
            }
            if folder.head_file {
                found.bare.push(dir.clone());
            }
            found
                .manager_configs
                .extend(folder.manager_configs.iter().map(|n| dir.join(n)));
        }
        stack.extend(folder.subdirs.iter().map(|name| dir.join(name)));
    }
    walked
}

/// The stamp of the folder at `dir` itself (not followed if it is a symlink), None if it is
/// not a folder.
fn stamp_of(dir: &Path) -> Option<Stamp> {
    use rustix::fs::{AtFlags, FileType, StatxFlags};
    let mask = StatxFlags::TYPE | StatxFlags::INO | StatxFlags::CTIME | StatxFlags::MTIME;
    let stx = rustix::fs::statx(rustix::fs::CWD, dir, AtFlags::SYMLINK_NOFOLLOW, mask).ok()?;
    let needed = (StatxFlags::INO | StatxFlags::CTIME | StatxFlags::MTIME).bits();
    if FileType::from_raw_mode(u32::from(stx.stx_mode)) != FileType::Directory {
        return None;
    }
    // A file system that cannot report the change time gets a stamp that is never settled.
    let ctime = if stx.stx_mask & needed == needed {
        (stx.stx_ctime.tv_sec, stx.stx_ctime.tv_nsec)
    } else {
        (i64::MAX, 0)
    };
    Some(Stamp {
        dev: (stx.stx_dev_major, stx.stx_dev_minor),
        ino: stx.stx_ino,
        ctime,
        mtime: (stx.stx_mtime.tv_sec, stx.stx_mtime.tv_nsec),
    })
}

/// Whether the file system holding `dir` is one whose change times can be trusted.
fn trusted_fs(dir: &Path) -> bool {
    let Ok(st) = rustix::fs::statfs(dir) else {
        return false;
    };
    #[allow(clippy::unnecessary_cast)] // f_type's width differs between targets
    let magic = st.f_type as i64;
    TRUSTED_FS.contains(&magic)
}

/// Reads `dir`, whose stamp was taken just before (a change between the two leaves the
/// remembered stamp older than the folder's: the next walk reads it again). `settle` is None
/// where the file system's change times are not trusted: the listing is never reused.
fn list(
    dir: &Path,
    stamp: Stamp,
    settle: Option<Duration>,
    reopened: &mut Vec<PathBuf>,
) -> Option<Folder> {
    let settled = settle.is_some_and(|settle| {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.saturating_sub(settle).as_secs_f64());
        let ctime = stamp.ctime.0 as f64 + f64::from(stamp.ctime.1) * 1e-9;
        ctime < now
    });
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied && readable_again(dir) => {
            reopened.push(dir.to_path_buf());
            std::fs::read_dir(dir).ok()?
        }
        Err(_) => return None,
    };
    let mut folder = Folder {
        stamp,
        settled,
        entries: 0,
        subdirs: Vec::new(),
        git: false,
        baton: false,
        head_file: false,
        manager_configs: Vec::new(),
    };
    for e in rd.flatten() {
        folder.entries += 1;
        let name = e.file_name();
        let Ok(ft) = e.file_type() else { continue };
        match name.as_bytes() {
            b".git" => folder.git = true,
            // Walked too: git minds no `.baton` in a path, so a gitlink may lead beneath one
            // deeper than the audit tracks baton's own files there.
            b".baton" => {
                folder.baton = true;
                if ft.is_dir() {
                    folder.subdirs.push(name);
                }
            }
            b"HEAD" if !ft.is_dir() => folder.head_file = true,
            _ if ft.is_dir() => folder.subdirs.push(name),
            _ if crate::sandbox::git_guard::applies_below_the_top(Path::new(&name)) => {
                folder.manager_configs.push(name)
            }
            _ => {}
        }
    }
    Some(folder)
}

/// Gives the owner back read and search permission on `dir`, where the running user owns it:
/// a command runs as that user, so `chmod 111` hides a folder's entries from the walk, while
/// git, which needs only search permission, still opens a repository planted beneath it by
/// name (a gitlink's path). True when the permission was changed.
fn readable_again(dir: &Path) -> bool {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() || meta.uid() != rustix::process::geteuid().as_raw() {
        return false;
    }
    let mode = meta.mode() & 0o7777;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o500)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Short enough for a test to wait out, longer than any timestamp granularity.
    const TEST_SETTLE: Duration = Duration::from_millis(60);

    fn scan_now(root: &Path) -> (Found, Walked) {
        let mut found = Found::default();
        let walked = scan_settled_after(root, usize::MAX, &mut found, TEST_SETTLE);
        found.git.sort();
        found.baton.sort();
        found.bare.sort();
        (found, walked)
    }

    fn settle() {
        std::thread::sleep(TEST_SETTLE * 2);
    }

    /// Whether listings can be reused where the test's temp folders live (the reuse tests
    /// say so and pass otherwise: every folder is then read every time, which is correct).
    fn reuse_possible(root: &Path) -> bool {
        let ok = trusted_fs(root);
        if !ok {
            eprintln!(
                "SKIPPED: {} is not on a file system whose change times are trusted",
                root.display()
            );
        }
        ok
    }

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in ["a/b/c", "a/d", "e", "HEAD/x"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("a/b/file"), "x").unwrap();
        dir
    }

    #[test]
    fn an_unchanged_settled_tree_is_not_listed_again() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        if !reuse_possible(&root) {
            return;
        }
        settle();
        let (first, walked) = scan_now(&root);
        assert_eq!(walked.listed, 8, "{walked:?}");
        let (again, walked) = scan_now(&root);
        assert_eq!(again, first);
        assert_eq!((walked.listed, walked.reused), (0, 8), "{walked:?}");
    }

    #[test]
    fn a_folder_changed_after_the_walk_is_listed_again_with_what_was_planted() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        settle();
        let (before, _) = scan_now(&root);
        assert!(before.git.is_empty() && before.baton.is_empty() && before.bare.is_empty());
        // Planted deep in a settled tree, right after the walk: within the same timestamp
        // tick as nothing else, so only the change time tells.
        std::fs::create_dir(root.join("a/b/c/.git")).unwrap();
        std::fs::create_dir_all(root.join("e/new/.baton")).unwrap();
        std::fs::write(root.join("a/d/HEAD"), "ref: refs/heads/main\n").unwrap();
        let (after, walked) = scan_now(&root);
        assert_eq!(after.git, vec![root.join("a/b/c/.git")]);
        assert_eq!(after.baton, vec![root.join("e/new/.baton")]);
        assert_eq!(after.bare, vec![root.join("a/d")]);
        assert!(walked.reused > 0 || !reuse_possible(&root), "{walked:?}");
    }

    #[test]
    fn a_settled_folder_moved_into_the_tree_or_swapped_is_read_with_its_contents() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outside.path().join("old/deep/.git")).unwrap();
        settle();
        scan_now(&root);
        std::fs::rename(outside.path().join("old"), root.join("a/b/c/moved")).unwrap();
        let (after, _) = scan_now(&root);
        assert_eq!(after.git, vec![root.join("a/b/c/moved/deep/.git")]);
        // Two remembered folders trading places: each path is checked by inode, not name.
        std::fs::create_dir(root.join("e/.git")).unwrap();
        settle();
        scan_now(&root);
        let tmp = root.join("swap");
        std::fs::rename(root.join("e"), &tmp).unwrap();
        std::fs::rename(root.join("a/d"), root.join("e")).unwrap();
        std::fs::rename(&tmp, root.join("a/d")).unwrap();
        let (after, _) = scan_now(&root);
        assert!(after.git.contains(&root.join("a/d/.git")), "{after:?}");
        assert!(!after.git.contains(&root.join("e/.git")), "{after:?}");
    }

    #[test]
    fn a_recent_folder_is_always_listed_again() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        let mut found = Found::default();
        // Nothing here is older than an hour: every folder is read on every walk.
        scan_settled_after(&root, usize::MAX, &mut found, Duration::from_secs(3600));
        let walked = scan_settled_after(&root, usize::MAX, &mut found, Duration::from_secs(3600));
        assert_eq!((walked.listed, walked.reused), (8, 0), "{walked:?}");
    }

    #[test]
    fn a_folder_on_a_file_system_whose_change_times_are_not_trusted_is_never_reused() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        settle();
        let stamp = stamp_of(&root).unwrap();
        assert!(!list(&root, stamp, None, &mut Vec::new()).unwrap().settled);
        assert!(
            list(&root, stamp, Some(TEST_SETTLE), &mut Vec::new())
                .unwrap()
                .settled
        );
    }

    #[test]
    fn the_entry_limit_stops_a_reused_walk_too() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        settle();
        let mut found = Found::default();
        assert!(scan_settled_after(&root, usize::MAX, &mut found, TEST_SETTLE).complete);
        let walked = scan_settled_after(&root, 3, &mut found, TEST_SETTLE);
        assert!(!walked.complete);
    }
}
