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

/// Whether [`with_bind`] can work here (root, and `unshare` installed); says why not.
pub fn can_bind() -> bool {
    let unshare = std::process::Command::new("unshare")
        .arg("--version")
        .output();
    let can = rustix::process::geteuid().is_root() && unshare.is_ok();
    if !can {
        eprintln!("needs root and unshare: not checked");
    }
    can
}

/// `inner` run in a mount namespace of its own where `src` is bound at `dst` (a copy of
/// `/etc/passwd` with accounts added, a home bound from elsewhere): the host's own files stay
/// as they are. Root only; `inner`'s program, arguments, environment and folder are kept.
pub fn with_bind(
    src: &std::path::Path,
    dst: &std::path::Path,
    inner: &std::process::Command,
) -> std::process::Command {
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg("mount --bind \"$0\" \"$1\" && shift && exec \"$@\"")
        .arg(src)
        .arg(dst)
        .arg(inner.get_program())
        .args(inner.get_args())
        .env_clear()
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))));
    if let Some(dir) = inner.get_current_dir() {
        cmd.current_dir(dir);
    }
    cmd
}
