//! The state folder of `baton serve --state-dir DIR`: one file per conversation or stored
//! response, written atomically, read back at startup, and the lock that keeps a second server
//! off the same folder.
//!
//! Layout: `DIR/lock` (an advisory `flock` held while the server runs, with its pid inside) and
//! `DIR/conversations/<hash>.json`, where `<hash>` is derived from the entry's id — never the
//! id itself, which a client chose. A file is a header line (format, version, kind, id, owner,
//! the body's SHA-256 and length) and the body, one JSON document. Every write goes to a temp
//! file in the same folder, is fsynced and renamed over the old one, and the folder is fsynced:
//! a crash leaves the old file or the new one, never half of either. A file whose header, hash
//! or body does not check out is reported and moved aside (`<hash>.json.corrupt`), never
//! loaded. The folder is created owner-only (0700) and every file is 0600: they hold prompts.
//!
//! What the body holds is the caller's business (`T: Serialize`); the file's modification time
//! is when the entry was last used, so the idle TTL survives a restart.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::session::{PRIVATE_DIR, PRIVATE_FILE, private_dir};

/// What the header's `format` says: not some other JSON file that landed in the folder.
const FORMAT: &str = "baton-serve-state";
/// The body layout this build writes and reads.
const VERSION: u32 = 1;
const ENTRIES: &str = "conversations";
const TEMP_PREFIX: &str = ".tmp.";
const CORRUPT_SUFFIX: &str = ".corrupt";

/// Why the state folder cannot be used; the server does not start.
#[derive(Debug, thiserror::Error)]
pub enum StateDirError {
    #[error("state dir {path}: {reason}")]
    Io { path: String, reason: String },
    #[error(
        "state dir {path} is in use by another baton serve{} (one server per state dir)",
        .pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
    )]
    Busy { path: String, pid: Option<u32> },
}

/// What an entry is: a conversation (continued in place) or a stored response (forked from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    Conversation,
    Response,
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    format: String,
    version: u32,
    kind: EntryKind,
    id: String,
    client: String,
    sha256: String,
    body_bytes: u64,
}

/// One entry read back.
#[derive(Debug)]
pub struct Loaded<T> {
    pub id: String,
    pub kind: EntryKind,
    /// The owner's credential digest, as the entry was written.
    pub client: String,
    /// Since the entry was last written or used.
    pub idle: Duration,
    pub body: T,
}

/// A file that was not loaded, and why (for the operator's log).
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    pub file: String,
    pub reason: String,
}

/// Everything startup found in the folder.
#[derive(Debug)]
pub struct LoadReport<T> {
    pub entries: Vec<Loaded<T>>,
    /// Damaged files, moved aside.
    pub corrupt: Vec<Skipped>,
    /// Files left as they are: written by a newer baton, or not regular files.
    pub ignored: Vec<Skipped>,
    /// Files idle past the TTL, deleted.
    pub expired: usize,
}

/// The open, locked state folder.
#[derive(Debug)]
pub struct StateDir {
    root: PathBuf,
    entries: PathBuf,
    /// The entries folder, held open: every entry is opened, written, renamed and removed
    /// beneath it (`untrusted_fs`), never by a path that could have been swapped.
    dir: crate::untrusted_fs::Dir,
    /// Held for the life of the server: the lock goes with the file.
    _lock: Flock<File>,
    temp_seq: AtomicU64,
}

fn io_error(path: &Path, what: &str, e: impl std::fmt::Display) -> StateDirError {
    StateDirError::Io {
        path: path.display().to_string(),
        reason: format!("{what}: {e}"),
    }
}

/// The file name of an entry: a digest of its id, so no id (a client's `X-Conversation-Id`, a
/// `previous_response_id`) can name a path of its own choosing.
pub fn file_name(id: &str) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    h.update([0]);
    h.update(id.as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{hex}.json")
}

fn is_entry_name(name: &str) -> bool {
    name.strip_suffix(".json")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// An entry's file contents: the header line, then the body.
pub fn encode<T: Serialize>(
    kind: EntryKind,
    id: &str,
    client: &str,
    body: &T,
) -> Result<Vec<u8>, serde_json::Error> {
    let body = serde_json::to_vec(body)?;
    let header = Header {
        format: FORMAT.to_string(),
        version: VERSION,
        kind,
        id: id.to_string(),
        client: client.to_string(),
        sha256: hex_sha256(&body),
        body_bytes: body.len() as u64,
    };
    let mut out = serde_json::to_vec(&header)?;
    out.push(b'\n');
    out.extend_from_slice(&body);
    Ok(out)
}

/// Why a file is not loaded: damaged (moved aside) or merely not ours to read (left alone).
enum Refusal {
    Corrupt(String),
    Ignored(String),
}

fn decode<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<(Header, T), Refusal> {
    let Some(newline) = bytes.iter().position(|b| *b == b'\n') else {
        return Err(Refusal::Corrupt("no header line (truncated?)".into()));
    };
    let (head, rest) = bytes.split_at(newline);
    let body = &rest[1..];
    let header: Header = serde_json::from_slice(head)
        .map_err(|e| Refusal::Corrupt(format!("unreadable header: {e}")))?;
    if header.format != FORMAT {
        return Err(Refusal::Corrupt(format!(
            "not a baton serve state file (format '{}')",
            header.format
        )));
    }
    if header.version > VERSION {
        return Err(Refusal::Ignored(format!(
            "written by a newer baton (state format {}; this one reads {VERSION})",
            header.version
        )));
    }
    if body.len() as u64 != header.body_bytes {
        return Err(Refusal::Corrupt(format!(
            "body is {} bytes, the header says {} (truncated?)",
            body.len(),
            header.body_bytes
        )));
    }
    if hex_sha256(body) != header.sha256 {
        return Err(Refusal::Corrupt("body does not match its checksum".into()));
    }
    if file_name(&header.id) != name {
        return Err(Refusal::Corrupt(
            "its name does not match the id it holds".into(),
        ));
    }
    let value: T = serde_json::from_slice(body)
        .map_err(|e| Refusal::Corrupt(format!("unreadable body: {e}")))?;
    Ok((header, value))
}

impl StateDir {
    /// Creates (0700) and locks the folder. A folder another server holds is
    /// `StateDirError::Busy`, with that server's pid when it wrote one. A folder other users
    /// may write to is refused: they could swap the lock or the entries for links to files of
    /// this user's.
    pub fn open(root: &Path) -> Result<StateDir, StateDirError> {
        private_dir(root).map_err(|e| io_error(root, "cannot create", e))?;
        let meta = std::fs::metadata(root).map_err(|e| io_error(root, "cannot stat", e))?;
        if meta.mode() & 0o022 != 0 {
            return Err(StateDirError::Io {
                path: root.display().to_string(),
                reason: format!(
                    "other users may write to it (mode {:o}): `chmod 700` it, or choose a \
                     folder of your own",
                    meta.mode() & 0o7777
                ),
            });
        }
        let lock_path = root.join("lock");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(PRIVATE_FILE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&lock_path)
            .map_err(|e| io_error(&lock_path, "cannot open", e))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut file, e)) if e == Errno::EWOULDBLOCK => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                return Err(StateDirError::Busy {
                    path: root.display().to_string(),
                    pid: text.trim().parse().ok(),
                });
            }
            Err((_, e)) => return Err(io_error(&lock_path, "cannot lock", e)),
        };
        // Best effort: the pid only improves the message a second server shows.
        let _ = lock
            .set_len(0)
            .and_then(|_| lock.write_all(std::process::id().to_string().as_bytes()));
        let entries = root.join(ENTRIES);
        private_dir(&entries).map_err(|e| io_error(&entries, "cannot create", e))?;
        let meta = std::fs::symlink_metadata(&entries)
            .map_err(|e| io_error(&entries, "cannot stat", e))?;
        if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
            return Err(StateDirError::Io {
                path: entries.display().to_string(),
                reason: "not a folder of this user's (a link, or another owner's)".into(),
            });
        }
        let dir = crate::untrusted_fs::Dir::open(&entries)
            .map_err(|e| io_error(&entries, "cannot open", e))?;
        // The folder opened is the one checked (not one swapped in between).
        let held = rustix::fs::fstat(dir.fd()).map_err(|e| io_error(&entries, "cannot stat", e))?;
        if held.st_dev != meta.dev() || held.st_ino != meta.ino() {
            return Err(StateDirError::Io {
                path: entries.display().to_string(),
                reason: "it changed while it was opened".into(),
            });
        }
        // This folder is ours alone, whatever an older run or the umask left.
        std::fs::set_permissions(&entries, std::fs::Permissions::from_mode(PRIVATE_DIR))
            .map_err(|e| io_error(&entries, "cannot make it owner-only", e))?;
        Ok(StateDir {
            root: root.to_path_buf(),
            entries,
            dir,
            _lock: lock,
            temp_seq: AtomicU64::new(0),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The path the entry `id` is kept at.
    pub fn path_of(&self, id: &str) -> PathBuf {
        self.entries.join(file_name(id))
    }

    /// Reads every entry back. Files idle past `ttl` are deleted; damaged ones (or larger than
    /// `max_file_bytes`) are moved aside; leftovers of an interrupted write are removed.
    /// Never fails: what cannot be read is in the report.
    pub fn load<T: DeserializeOwned>(&self, ttl: Duration, max_file_bytes: u64) -> LoadReport<T> {
        let mut report = LoadReport {
            entries: Vec::new(),
            corrupt: Vec::new(),
            ignored: Vec::new(),
            expired: 0,
        };
        let names = match self.names() {
            Ok(names) => names,
            Err(e) => {
                report.ignored.push(Skipped {
                    file: self.entries.display().to_string(),
                    reason: format!("cannot list: {e}"),
                });
                return report;
            }
        };
        let now = SystemTime::now();
        for name in names {
            let at = Path::new(&name);
            if name.starts_with(TEMP_PREFIX) {
                // A write the last run did not finish: the entry it was replacing is intact.
                let _ = self.dir.remove_file(at);
                continue;
            }
            if !is_entry_name(&name) {
                continue;
            }
            let skipped = |reason: String| Skipped {
                file: self.entries.join(&name).display().to_string(),
                reason,
            };
            // Never a link, FIFO or device, and never blocked by one swapped in.
            let (file, meta) = match self.dir.open_regular(at) {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) if crate::untrusted_fs::not_regular_kind(&e).is_some() => {
                    report.ignored.push(skipped("not a regular file".into()));
                    continue;
                }
                Err(e) => {
                    report.ignored.push(skipped(format!("cannot open: {e}")));
                    continue;
                }
            };
            let idle = file
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .unwrap_or_default();
            if idle > ttl {
                if self.dir.remove_file(at).is_ok() {
                    report.expired += 1;
                }
                continue;
            }
            if meta.len > max_file_bytes {
                report.corrupt.push(skipped(format!(
                    "{} bytes, more than the state budget allows ({max_file_bytes})",
                    meta.len
                )));
                self.move_aside(&name);
                continue;
            }
            let mut bytes = Vec::new();
            if let Err(e) = file.take(max_file_bytes + 1).read_to_end(&mut bytes) {
                report.ignored.push(skipped(format!("cannot read: {e}")));
                continue;
            }
            match decode::<T>(&name, &bytes) {
                Ok((header, body)) => report.entries.push(Loaded {
                    id: header.id,
                    kind: header.kind,
                    client: header.client,
                    idle,
                    body,
                }),
                Err(Refusal::Corrupt(reason)) => {
                    report.corrupt.push(skipped(reason));
                    self.move_aside(&name);
                }
                Err(Refusal::Ignored(reason)) => report.ignored.push(skipped(reason)),
            }
        }
        report
    }

    /// The names in the entries folder, listed through the held descriptor.
    fn names(&self) -> std::io::Result<Vec<String>> {
        let listing = self.readable()?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&listing)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// The entries folder opened for reading (listing, fsync): the held descriptor is a path
    /// descriptor, which can do neither.
    fn readable(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        use rustix::fs::OFlags;
        Ok(rustix::fs::openat(
            self.dir.fd(),
            ".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?)
    }

    /// Kept for the operator to look at, out of the way of the next load.
    fn move_aside(&self, name: &str) {
        let aside = format!("{name}{CORRUPT_SUFFIX}");
        let _ = rustix::fs::renameat(self.dir.fd(), name, self.dir.fd(), aside.as_str());
    }

    /// Replaces the entry `id` with `contents` atomically and durably: temp file, fsync,
    /// rename, fsync of the folder. On error the previous file is untouched.
    pub fn write(&self, id: &str, contents: &[u8]) -> std::io::Result<()> {
        let name = file_name(id);
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let temp = format!("{TEMP_PREFIX}{name}.{seq}");
        let written = (|| {
            let mut f = self.dir.create_new(Path::new(&temp), PRIVATE_FILE)?;
            f.write_all(contents)?;
            f.sync_all()?;
            rustix::fs::renameat(self.dir.fd(), temp.as_str(), self.dir.fd(), name.as_str())?;
            Ok::<(), std::io::Error>(())
        })();
        if let Err(e) = written {
            let _ = self.dir.remove_file(Path::new(&temp));
            return Err(e);
        }
        Ok(rustix::fs::fsync(self.readable()?)?)
    }

    /// Deletes the entry `id`; whether there was a file (one never written is no error).
    pub fn remove(&self, id: &str) -> std::io::Result<bool> {
        match self.dir.remove_file(Path::new(&file_name(id))) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Marks the entry `id` used now (its idle time restarts), without rewriting it.
    pub fn touch(&self, id: &str) {
        if let Ok(Some((file, _))) = self.dir.open_regular(Path::new(&file_name(id))) {
            let _ = file.set_modified(SystemTime::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Body {
        text: String,
    }

    fn body(text: &str) -> Body {
        Body { text: text.into() }
    }

    const DAY: Duration = Duration::from_secs(86_400);

    fn save(dir: &StateDir, kind: EntryKind, id: &str, text: &str) {
        let bytes = encode(kind, id, "client", &body(text)).unwrap();
        dir.write(id, &bytes).unwrap();
    }

    #[test]
    fn entries_round_trip_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("state");
        let dir = StateDir::open(&root).unwrap();
        save(
            &dir,
            EntryKind::Conversation,
            "conv-one-0000000001",
            "hello",
        );
        save(&dir, EntryKind::Response, "resp_1", "world");
        save(
            &dir,
            EntryKind::Conversation,
            "conv-one-0000000001",
            "hello again",
        );
        let report = dir.load::<Body>(DAY, 1 << 20);
        assert!(report.corrupt.is_empty() && report.ignored.is_empty());
        let mut got: Vec<(String, EntryKind, String)> = report
            .entries
            .into_iter()
            .map(|e| (e.id, e.kind, e.body.text))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            [
                (
                    "conv-one-0000000001".to_string(),
                    EntryKind::Conversation,
                    "hello again".to_string()
                ),
                (
                    "resp_1".to_string(),
                    EntryKind::Response,
                    "world".to_string()
                ),
            ]
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join(ENTRIES)), 0o700);
        assert_eq!(mode(&dir.path_of("resp_1")), 0o600);
        assert_eq!(mode(&root.join("lock")), 0o600);
        // Nothing but the two entries: no temp file survives a write.
        assert_eq!(std::fs::read_dir(root.join(ENTRIES)).unwrap().count(), 2);
    }

    #[test]
    fn a_second_open_is_refused_with_the_holders_pid() {
        let tmp = tempfile::tempdir().unwrap();
        let _held = StateDir::open(tmp.path()).unwrap();
        let err = StateDir::open(tmp.path()).unwrap_err();
        match &err {
            StateDirError::Busy { pid, .. } => assert_eq!(*pid, Some(std::process::id())),
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("in use by another baton serve"));
        drop(_held);
        assert!(
            StateDir::open(tmp.path()).is_ok(),
            "released with the first"
        );
    }

    #[test]
    fn a_folder_others_may_write_to_or_a_planted_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let shared = tmp.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = StateDir::open(&shared).unwrap_err().to_string();
        assert!(err.contains("other users may write to it"), "{err}");
        // A lock that is a link to a file of this user's is never followed (or truncated).
        let mine = tmp.path().join("precious");
        std::fs::write(&mine, "keep me").unwrap();
        let planted = tmp.path().join("planted");
        std::fs::create_dir(&planted).unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(&mine, planted.join("lock")).unwrap();
        assert!(StateDir::open(&planted).is_err());
        assert_eq!(std::fs::read_to_string(&mine).unwrap(), "keep me");
        // Nor is an entries folder that is a link.
        let linked = tmp.path().join("linked");
        std::fs::create_dir(&linked).unwrap();
        std::fs::set_permissions(&linked, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::symlink(tmp.path(), linked.join(ENTRIES)).unwrap();
        let err = StateDir::open(&linked).unwrap_err().to_string();
        assert!(err.contains("not a folder of this user's"), "{err}");
    }

    #[test]
    fn ids_never_name_paths() {
        for id in ["../../etc/passwd", "/abs", "a/b", "..", "x\0y", ""] {
            let name = file_name(id);
            assert!(is_entry_name(&name), "{id:?} → {name}");
        }
        assert_ne!(file_name("a"), file_name("b"));
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("s");
        let dir = StateDir::open(&root).unwrap();
        save(&dir, EntryKind::Conversation, "../../escape", "x");
        let outside: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
        assert_eq!(outside.len(), 1, "only the state dir itself");
        assert_eq!(dir.load::<Body>(DAY, 1 << 20).entries[0].id, "../../escape");
    }

    #[test]
    fn damaged_files_are_reported_moved_aside_and_the_rest_loads() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        save(&dir, EntryKind::Conversation, "good", "fine");
        for id in ["torn", "flipped", "renamed", "garbage", "huge"] {
            save(&dir, EntryKind::Conversation, id, "some text to damage");
        }
        let path = |id: &str| dir.path_of(id);
        let bytes = std::fs::read(path("torn")).unwrap();
        std::fs::write(path("torn"), &bytes[..bytes.len() - 5]).unwrap();
        let mut bytes = std::fs::read(path("flipped")).unwrap();
        let last = bytes.len() - 3;
        bytes[last] ^= 0x01;
        std::fs::write(path("flipped"), bytes).unwrap();
        std::fs::copy(path("good"), path("renamed")).unwrap();
        std::fs::write(path("garbage"), b"\x00\xffnot json at all").unwrap();
        std::fs::write(path("huge"), vec![b' '; 4096]).unwrap();
        std::fs::write(tmp.path().join(ENTRIES).join(".tmp.x.json.3"), b"half").unwrap();
        let report = dir.load::<Body>(DAY, 1024);
        assert_eq!(report.entries.len(), 1);
        assert_eq!(report.entries[0].body, body("fine"));
        assert_eq!(report.corrupt.len(), 5, "{:?}", report.corrupt);
        let reasons: Vec<&str> = report.corrupt.iter().map(|s| s.reason.as_str()).collect();
        assert!(
            reasons.iter().any(|r| r.contains("truncated")),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains("checksum")),
            "{reasons:?}"
        );
        assert!(reasons.iter().any(|r| r.contains("does not match the id")));
        assert!(reasons.iter().any(|r| r.contains("budget")));
        // Moved aside: the next load reports nothing, and the temp leftover is gone.
        let again = dir.load::<Body>(DAY, 1024);
        assert!(again.corrupt.is_empty());
        assert_eq!(again.entries.len(), 1);
        let names: Vec<String> = std::fs::read_dir(tmp.path().join(ENTRIES))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names.iter().filter(|n| n.ends_with(CORRUPT_SUFFIX)).count(),
            5
        );
        assert!(!names.iter().any(|n| n.starts_with(TEMP_PREFIX)));
    }

    /// Entries are opened beneath the held folder: a FIFO or a link where an entry should be is
    /// reported and never opened (a FIFO's open would block startup), and an entries folder
    /// swapped for a link after the server opened it changes nothing it writes.
    #[test]
    fn fifos_and_links_among_the_entries_are_never_opened_or_written_through() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        save(&dir, EntryKind::Conversation, "good", "fine");
        let fifo = dir.path_of("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "do not read").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path_of("link")).unwrap();
        let report = dir.load::<Body>(DAY, 1 << 20);
        assert_eq!(report.entries.len(), 1);
        assert_eq!(report.ignored.len(), 2, "{:?}", report.ignored);
        assert!(
            report
                .ignored
                .iter()
                .all(|s| s.reason == "not a regular file")
        );

        // The entries folder swapped for a link: the held descriptor still writes the real one.
        let entries = tmp.path().join(ENTRIES);
        std::fs::rename(&entries, tmp.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(outside.path(), &entries).unwrap();
        save(&dir, EntryKind::Conversation, "after", "written");
        assert!(!outside.path().join(file_name("after")).exists());
        assert!(tmp.path().join("moved").join(file_name("after")).is_file());
    }

    #[test]
    fn idle_files_expire_and_touch_renews_them() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        save(&dir, EntryKind::Response, "old", "a");
        save(&dir, EntryKind::Response, "renewed", "b");
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        for id in ["old", "renewed"] {
            let f = OpenOptions::new()
                .write(true)
                .open(dir.path_of(id))
                .unwrap();
            f.set_modified(hour_ago).unwrap();
        }
        dir.touch("renewed");
        let report = dir.load::<Body>(Duration::from_secs(60), 1 << 20);
        assert_eq!(report.expired, 1);
        assert_eq!(report.entries.len(), 1);
        assert_eq!(report.entries[0].id, "renewed");
        assert!(!dir.path_of("old").exists(), "deleted");
        assert!(dir.remove("renewed").unwrap());
        assert!(!dir.remove("never-written").unwrap());
        assert!(dir.load::<Body>(DAY, 1 << 20).entries.is_empty());
    }

    #[test]
    fn a_newer_format_is_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        let body = b"{}";
        let header = Header {
            format: FORMAT.into(),
            version: VERSION + 1,
            kind: EntryKind::Conversation,
            id: "future".into(),
            client: String::new(),
            sha256: hex_sha256(body),
            body_bytes: 2,
        };
        let mut bytes = serde_json::to_vec(&header).unwrap();
        bytes.push(b'\n');
        bytes.extend_from_slice(body);
        dir.write("future", &bytes).unwrap();
        let report = dir.load::<Body>(DAY, 1 << 20);
        assert!(report.corrupt.is_empty());
        assert_eq!(report.ignored.len(), 1);
        assert!(
            dir.path_of("future").exists(),
            "not moved: a newer baton reads it"
        );
    }
}
