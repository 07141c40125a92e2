//! Work the tools do in baton's own, unsandboxed process on folders a command can lay out, run
//! on a thread of its own that Landlock confines, so that the kernel, not a check made before,
//! keeps it inside: the `git` tool's reads and commits.

use std::path::PathBuf;

use crate::tool::ToolError;

/// Runs `work` on a new thread whose reads Landlock keeps beneath `read` and `write` and whose
/// writes beneath `write` ([`crate::sandbox::confine_thread`]), and returns what it returned.
/// Threads that `work` starts inherit the confinement (grep's parallel walker); a thread that
/// already exists cannot be released from it, hence a new one per call, ending with the work.
/// Where the kernel has no Landlock the work runs unconfined, as it always did there (commands
/// are refused then, so none could have laid anything out, unless the sandbox is off).
pub(crate) fn run_confined<T: Send>(
    read: &[PathBuf],
    write: &[PathBuf],
    work: impl FnOnce() -> T + Send,
) -> Result<T, ToolError> {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("baton-confined".into())
            .spawn_scoped(scope, || {
                crate::sandbox::confine_thread(read, write).map_err(ToolError::Sandbox)?;
                Ok(work())
            })
            .map_err(|_| ToolError::Internal {
                what: "could not start a confined tool thread",
            })?;
        thread.join().unwrap_or(Err(ToolError::Internal {
            what: "a confined tool thread panicked",
        }))
    })
}

/// Whether Landlock confines a thread on this kernel (the tests of the confinement are
/// skipped, loudly, where it does not).
#[cfg(test)]
pub(crate) fn landlock_here() -> bool {
    std::thread::spawn(|| crate::sandbox::confine_thread(&[], &[]))
        .join()
        .is_ok_and(|r| r.is_ok_and(|enforced| enforced))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_the_confined_work_starts_are_confined_too() {
        if !landlock_here() {
            eprintln!("no Landlock on this kernel: the confinement is not checked");
            return;
        }
        let inside = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(inside.path().join("f"), "inside").unwrap();
        std::fs::write(outside.path().join("secret"), "SECRET").unwrap();
        let read = [inside.path().to_path_buf()];
        let secret = outside.path().join("secret");
        let (own, child, allowed) = run_confined(&read, &[], || {
            let own = std::fs::read(&secret);
            // A thread started on the confined thread, and one started by that: every thread
            // of grep's walker pool is one of these.
            let path = secret.clone();
            let child = std::thread::spawn(move || {
                std::thread::spawn(move || std::fs::read(path))
                    .join()
                    .unwrap()
            })
            .join()
            .unwrap();
            let allowed = std::fs::read(inside.path().join("f"));
            (own, child, allowed)
        })
        .unwrap();
        assert_eq!(
            own.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
        assert_eq!(
            child.unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied
        );
        assert_eq!(allowed.unwrap(), b"inside");
        // Writes are refused inside too, and the calling thread is left as it was.
        let wrote = run_confined(&read, &[], || std::fs::write(inside.path().join("g"), "x"));
        assert!(wrote.unwrap().is_err());
        assert_eq!(
            std::fs::read(outside.path().join("secret")).unwrap(),
            b"SECRET"
        );
    }

    #[test]
    fn a_panic_in_the_confined_work_is_an_error_not_a_crash() {
        let out: Result<(), ToolError> = run_confined(&[], &[], || panic!("boom"));
        assert!(matches!(out, Err(ToolError::Internal { .. })));
    }
}
