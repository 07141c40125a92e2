//! The state folder of `baton serve --state-dir DIR`: one file per conversation or stored
//! response, written atomically, read back at startup, and the lock that keeps a second server
//! off the same folder.
//!
//! Layout: `DIR/lock` (an advisory `flock` held while the server runs, with its pid inside) and
//! `DIR/conversations/<hash>.json`, where `<hash>` is derived from the entry's owner and id —
//! never the id itself, which a client chose. Each owner (client) has ids of its own: two
//! clients' entries of one id are two files. A file is a header line (format, version, kind,
//! id, owner, the body's SHA-256 and length) and the body, one JSON document. Every write goes
//! to a temp file in the same folder, is fsynced and renamed over the old one, and the folder
//! is fsynced: a crash leaves the old file or the new one, never half of either. A file whose
//! header, hash or body does not check out is reported and moved aside (`<hash>.json.corrupt`),
//! never loaded. The folder is created owner-only (0700) and every file is 0600: they hold
//! prompts.
//!
//! What the body holds is the caller's business (`T: Serialize`); the file's modification time
//! is when the entry was last used, so the idle TTL survives a restart.
//!
//! Files of version 1 were named after their id alone (one namespace for every client): the
//! load rewrites each under its owner's name (version 2, same body, same last use) and removes
//! the old one, so an upgrade keeps them.

use std::collections::HashSet;
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
/// The layout this build writes: version 2 names a file after its owner and id. The body is
/// the same in both; version 1's files are renamed at load (an older baton leaves version 2's
/// alone, as any newer format).
const VERSION: u32 = 2;
/// Files of this version and older are named after their id alone.
const UNSCOPED: u32 = 1;
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

/// The file name of the entry `id` of the owner `client`: a digest of both, so no id (a
/// client's `X-Conversation-Id`, a `previous_response_id`) can name a path of its own choosing,
/// and one client's id never names another client's file.
pub fn file_name(client: &str, id: &str) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    // Not version 1's 0: no owner and id hash to the name some id alone had.
    h.update([2]);
    // Its length first: ("ab", "c") and ("a", "bc") are two names.
    h.update((client.len() as u64).to_le_bytes());
    h.update(client.as_bytes());
    h.update(id.as_bytes());
    entry_name(h)
}

/// The name version 1 gave the entry `id`, whoever owned it.
fn unscoped_file_name(id: &str) -> String {
    let mut h = Sha256::new();
    h.update(FORMAT.as_bytes());
    h.update([0]);
    h.update(id.as_bytes());
    entry_name(h)
}

fn entry_name(h: Sha256) -> String {
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
    encode_body(kind, id, client, &serde_json::to_vec(body)?)
}

/// An entry's file contents around a body already encoded.
fn encode_body(
    kind: EntryKind,
    id: &str,
    client: &str,
    body: &[u8],
) -> Result<Vec<u8>, serde_json::Error> {
    let header = Header {
        format: FORMAT.to_string(),
        version: VERSION,
        kind,
        id: id.to_string(),
        client: client.to_string(),
        sha256: hex_sha256(body),
        body_bytes: body.len() as u64,
    };
    let mut out = serde_json::to_vec(&header)?;
    out.push(b'\n');
    out.extend_from_slice(body);
    Ok(out)
}

/// Why a file is not loaded: damaged (moved aside) or merely not ours to read (left alone).
enum Refusal {
    Corrupt(String),
    Ignored(String),
}

/// A file's header and body, checked, with the body's bytes as they are (for a rename).
fn decode<'a, T: DeserializeOwned>(
    name: &str,
    bytes: &'a [u8],
) -> Result<(Header, T, &'a [u8]), Refusal> {
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
    let expected = if header.version <= UNSCOPED {
        unscoped_file_name(&header.id)
    } else {
        file_name(&header.client, &header.id)
    };
    if expected != name {
        return Err(Refusal::Corrupt(
            "its name does not match the id it holds (and its owner)".into(),
        ));
    }
    let value: T = serde_json::from_slice(body)
        .map_err(|e| Refusal::Corrupt(format!("unreadable body: {e}")))?;
    Ok((header, value, body))
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

    /// The path the entry `id` of the owner `client` is kept at.
    pub fn path_of(&self, client: &str, id: &str) -> PathBuf {
        self.entries.join(file_name(client, id))
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
        let listed: HashSet<String> = names.iter().cloned().collect();
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
            let modified = file.metadata().and_then(|m| m.modified()).ok();
            let idle = modified
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
                Ok((header, body, raw)) => {
                    // A version-1 file moves to its new name first; that name was not in the
                    // listing, so the entry is loaded once, here.
                    if header.version <= UNSCOPED
                        && let Err(reason) = self.upgrade(&name, &header, raw, modified, &listed)
                    {
                        report.ignored.push(skipped(reason));
                        continue;
                    }
                    report.entries.push(Loaded {
                        id: header.id,
                        kind: header.kind,
                        client: header.client,
                        idle,
                        body,
                    })
                }
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

    /// Replaces the entry `id` of the owner `client` with `contents` atomically and durably:
    /// temp file, fsync, rename, fsync of the folder. On error the previous file is untouched.
    pub fn write(&self, client: &str, id: &str, contents: &[u8]) -> std::io::Result<()> {
        self.write_named(&file_name(client, id), contents, None)
    }

    /// `write` to the file `name`, its modification time (the entry's last use) set to
    /// `modified` when given.
    fn write_named(
        &self,
        name: &str,
        contents: &[u8],
        modified: Option<SystemTime>,
    ) -> std::io::Result<()> {
        let seq = self.temp_seq.fetch_add(1, Ordering::Relaxed);
        let temp = format!("{TEMP_PREFIX}{name}.{seq}");
        let written = (|| {
            let mut f = self.dir.create_new(Path::new(&temp), PRIVATE_FILE)?;
            f.write_all(contents)?;
            if let Some(at) = modified {
                f.set_modified(at)?;
            }
            f.sync_all()?;
            rustix::fs::renameat(self.dir.fd(), temp.as_str(), self.dir.fd(), name)?;
            Ok::<(), std::io::Error>(())
        })();
        if let Err(e) = written {
            let _ = self.dir.remove_file(Path::new(&temp));
            return Err(e);
        }
        Ok(rustix::fs::fsync(self.readable()?)?)
    }

    /// Moves a version-1 entry, read from the file `name` (named after its id alone), to the
    /// name of its owner and id: written anew as version 2 with the same body and last use,
    /// then the old file removed. Not done — the old file stays for the operator, and the
    /// reason is returned — when its new name is taken (a file of the same entry written since)
    /// or the write fails.
    fn upgrade(
        &self,
        name: &str,
        header: &Header,
        body: &[u8],
        modified: Option<SystemTime>,
        listed: &HashSet<String>,
    ) -> Result<(), String> {
        let new = file_name(&header.client, &header.id);
        if listed.contains(&new) {
            return Err(format!(
                "written by an older baton, and {new} holds the same entry in this version's \
                 layout (that one is loaded; delete this file when you have checked it)"
            ));
        }
        let contents = encode_body(header.kind, &header.id, &header.client, body)
            .map_err(|e| format!("cannot move it to this version's layout: {e}"))?;
        self.write_named(&new, &contents, modified)
            .map_err(|e| format!("cannot move it to this version's layout ({new}): {e}"))?;
        // Left behind, the next load reports it as an older copy and loads the new file: the
        // entry is not lost either way.
        let _ = self.dir.remove_file(Path::new(name));
        Ok(())
    }

    /// Deletes the entry `id` of the owner `client`; whether there was a file (one never
    /// written is no error).
    pub fn remove(&self, client: &str, id: &str) -> std::io::Result<bool> {
        match self.dir.remove_file(Path::new(&file_name(client, id))) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Marks the entry `id` of the owner `client` used now (its idle time restarts), without
    /// rewriting it.
    pub fn touch(&self, client: &str, id: &str) {
        if let Ok(Some((file, _))) = self.dir.open_regular(Path::new(&file_name(client, id))) {
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
        dir.write("client", id, &bytes).unwrap();
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
        assert_eq!(mode(&dir.path_of("client", "resp_1")), 0o600);
        assert_eq!(mode(&root.join("lock")), 0o600);
        // Nothing but the two entries: no temp file survives a write.
        assert_eq!(std::fs::read_dir(root.join(ENTRIES)).unwrap().count(), 2);
    }

    /// Each owner has ids of its own: one id of two owners is two files, two entries, and
    /// removing one leaves the other.
    #[test]
    fn one_id_of_two_owners_is_two_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        for (client, text) in [("alice", "a's"), ("bob", "b's")] {
            let bytes = encode(EntryKind::Conversation, "shared-id", client, &body(text)).unwrap();
            dir.write(client, "shared-id", &bytes).unwrap();
        }
        let mut got: Vec<(String, String)> = dir
            .load::<Body>(DAY, 1 << 20)
            .entries
            .into_iter()
            .map(|e| (e.client, e.body.text))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("alice".to_string(), "a's".to_string()),
                ("bob".to_string(), "b's".to_string())
            ]
        );
        assert!(dir.remove("bob", "shared-id").unwrap());
        let left = dir.load::<Body>(DAY, 1 << 20).entries;
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].client, "alice");
    }

    /// A file of version 1 (named after its id alone: every client's ids were one namespace)
    /// loads, and moves to its owner's name with its last use kept. An older copy found beside
    /// the entry's new file is reported and left alone, never loaded over it.
    #[test]
    fn version_one_files_move_to_their_owners_names() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = StateDir::open(tmp.path()).unwrap();
        let v1 = |text: &str| {
            let body = serde_json::to_vec(&body(text)).unwrap();
            let header = Header {
                format: FORMAT.into(),
                version: 1,
                kind: EntryKind::Conversation,
                id: "kept-conversation".into(),
                client: "anonymous".into(),
                sha256: hex_sha256(&body),
                body_bytes: body.len() as u64,
            };
            let mut bytes = serde_json::to_vec(&header).unwrap();
            bytes.push(b'\n');
            bytes.extend_from_slice(&body);
            let path = tmp
                .path()
                .join(ENTRIES)
                .join(unscoped_file_name("kept-conversation"));
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let old = v1("from before");
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        File::options()
            .write(true)
            .open(&old)
            .unwrap()
            .set_modified(hour_ago)
            .unwrap();
        let report = dir.load::<Body>(DAY, 1 << 20);
        assert!(report.corrupt.is_empty(), "{:?}", report.corrupt);
        assert!(report.ignored.is_empty(), "{:?}", report.ignored);
        assert_eq!(report.entries.len(), 1);
        let e = &report.entries[0];
        assert_eq!(
            (e.id.as_str(), e.client.as_str(), &e.body),
            ("kept-conversation", "anonymous", &body("from before"))
        );
        assert!(e.idle >= Duration::from_secs(3599), "{:?}", e.idle);
        assert!(!old.exists(), "moved");
        let new = dir.path_of("anonymous", "kept-conversation");
        assert_eq!(std::fs::metadata(&new).unwrap().mode() & 0o777, 0o600);
        let kept = std::fs::metadata(&new).unwrap().modified().unwrap();
        assert!(
            kept.duration_since(hour_ago).unwrap_or_default() < Duration::from_secs(1),
            "its last use kept"
        );
        // Read back as this version's file, from its new name.
        let again = dir.load::<Body>(DAY, 1 << 20);
        assert_eq!(again.entries.len(), 1);
        assert!(again.ignored.is_empty() && again.corrupt.is_empty());

        let stale = v1("an older copy");
        let report = dir.load::<Body>(DAY, 1 << 20);
        assert_eq!(report.entries.len(), 1);
        assert_eq!(report.entries[0].body, body("from before"));
        assert_eq!(report.ignored.len(), 1, "{:?}", report.ignored);
        assert!(report.ignored[0].reason.contains("older baton"));
        assert!(stale.exists(), "left for the operator");
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
            let name = file_name("client", id);
            assert!(is_entry_name(&name), "{id:?} → {name}");
        }
        assert_ne!(file_name("c", "a"), file_name("c", "b"));
        // Each owner has ids of its own, and no split of one string is another's.
        assert_ne!(file_name("c", "a"), file_name("d", "a"));
        assert_ne!(file_name("ab", "c"), file_name("a", "bc"));
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
        let path = |id: &str| dir.path_of("client", id);
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
        let fifo = dir.path_of("client", "fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "do not read").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path_of("client", "link"))
            .unwrap();
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
        assert!(!outside.path().join(file_name("client", "after")).exists());
        assert!(
            tmp.path()
                .join("moved")
                .join(file_name("client", "after"))
                .is_file()
        );
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
                .open(dir.path_of("client", id))
                .unwrap();
            f.set_modified(hour_ago).unwrap();
        }
        dir.touch("client", "renewed");
        let report = dir.load::<Body>(Duration::from_secs(60), 1 << 20);
        assert_eq!(report.expired, 1);
        assert_eq!(report.entries.len(), 1);
        assert_eq!(report.entries[0].id, "renewed");
        assert!(!dir.path_of("client", "old").exists(), "deleted");
        assert!(dir.remove("client", "renewed").unwrap());
        assert!(!dir.remove("client", "never-written").unwrap());
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
        dir.write("client", "future", &bytes).unwrap();
        let report = dir.load::<Body>(DAY, 1 << 20);
        assert!(report.corrupt.is_empty());
        assert_eq!(report.ignored.len(), 1);
        assert!(
            dir.path_of("client", "future").exists(),
            "not moved: a newer baton reads it"
        );
    }
}
