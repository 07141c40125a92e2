//! The commit the workspace repository's HEAD names, read the way baton reads anything a
//! command may have touched: through the untrusted-file reader, beneath the workspace, no
//! link followed, bounded, never a FIFO. Only a `.git` folder at the workspace's top is read
//! (a `.git` file may point anywhere); a repository it cannot read this way has no HEAD here.

use std::path::Path;

/// Bytes of `HEAD` or a loose ref file read at most.
const REF_MAX: u64 = 4096;
/// Bytes of `packed-refs` read at most.
const PACKED_MAX: u64 = 8 << 20;

/// The commit id HEAD names, or `None` (no repository at the top, no commit yet, unreadable).
pub fn head_commit(workspace: &Path) -> Option<String> {
    let read = |rel: &str, max: u64| {
        crate::untrusted_fs::read_file(&workspace.join(".git").join(rel), &[workspace], max)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
    };
    let head = read("HEAD", REF_MAX)?;
    let head = head.trim();
    let Some(name) = head.strip_prefix("ref:").map(str::trim) else {
        return object_id(head);
    };
    if !name.starts_with("refs/") || name.split('/').any(|c| c.is_empty() || c == "..") {
        return None;
    }
    if let Some(loose) = read(name, REF_MAX) {
        return object_id(loose.trim());
    }
    read("packed-refs", PACKED_MAX)?.lines().find_map(|line| {
        let (id, r) = line.split_once(' ')?;
        (r == name).then(|| object_id(id)).flatten()
    })
}

/// `text` when it is a full hex object id (SHA-1 or SHA-256).
fn object_id(text: &str) -> Option<String> {
    let hex = text.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && matches!(text.len(), 40 | 64)).then(|| text.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git")
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    fn rev_parse(dir: &Path) -> String {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(dir)
            .output()
            .expect("git");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn reads_loose_packed_and_detached_heads_as_git_does() {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path();
        assert_eq!(head_commit(dir), None, "no repository");
        git(dir, &["init", "-q"]);
        assert_eq!(head_commit(dir), None, "no commit yet");
        std::fs::write(dir.join("a"), "1").unwrap();
        git(dir, &["add", "a"]);
        git(dir, &["commit", "-qm", "one"]);
        assert_eq!(head_commit(dir).as_deref(), Some(rev_parse(dir).as_str()));
        git(dir, &["pack-refs", "--all"]);
        assert_eq!(head_commit(dir).as_deref(), Some(rev_parse(dir).as_str()));
        git(dir, &["checkout", "-q", "--detach"]);
        assert_eq!(head_commit(dir).as_deref(), Some(rev_parse(dir).as_str()));
    }

    #[test]
    fn a_head_a_command_replaced_with_a_fifo_or_a_link_is_not_read() {
        let ws = tempfile::tempdir().unwrap();
        let dir = ws.path();
        git(dir, &["init", "-q"]);
        std::fs::write(dir.join("a"), "1").unwrap();
        git(dir, &["add", "a"]);
        git(dir, &["commit", "-qm", "one"]);
        let head = dir.join(".git/HEAD");
        std::fs::remove_file(&head).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, &head, rustix::fs::Mode::from(0o600)).unwrap();
        assert_eq!(head_commit(dir), None, "a FIFO is never opened (no hang)");
        std::fs::remove_file(&head).unwrap();
        let outside = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(outside.path(), "0123456789012345678901234567890123456789\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), &head).unwrap();
        assert_eq!(head_commit(dir), None, "a link is not followed");
    }
}
