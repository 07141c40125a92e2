//! Where sandbox tests put the folders that play "outside the workspace".

/// A folder for the fixtures that no sandbox policy makes writable: the "outside" of an
/// escape test must not sit under /tmp, /var/tmp, /dev/shm or $TMPDIR (writable by design),
/// which is where a checkout (and so the target dir) may live.
pub fn fixture_base() -> std::path::PathBuf {
    let temp_roots: Vec<std::path::PathBuf> = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .map(std::path::PathBuf::from)
        .chain(std::env::var_os("TMPDIR").map(std::path::PathBuf::from))
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    let candidates = [
        Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/baton-tests")),
        Some(std::path::PathBuf::from("/var/cache/baton-tests")),
    ];
    for dir in candidates.into_iter().flatten() {
        // Present is not enough: the target dir of a checkout built by root is not writable
        // to an unprivileged user running the tests.
        if std::fs::create_dir_all(&dir).is_err() || tempfile::tempdir_in(&dir).is_err() {
            continue;
        }
        let Ok(canon) = dir.canonicalize() else {
            continue;
        };
        if !temp_roots.iter().any(|t| canon.starts_with(t)) {
            return canon;
        }
    }
    panic!("no folder outside the temp roots to hold the sandbox fixtures");
}
