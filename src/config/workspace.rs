//! Which folders may be a workspace. The workspace is what sandboxed commands and the file
//! tools may write; a workspace of `/`, the home folder (or a folder above it) or the system's
//! temp folder would hand them the user's dotfiles, other programs' sockets and every other
//! project. Every entry point (`--exec`, the interactive UI, `baton sandbox -C`, ACP's
//! `session/new` `cwd`) asks [`check`] before it starts anything.

use std::path::{Path, PathBuf};

/// The flag that lets a broad workspace through (docs/sandbox.md).
pub const ALLOW_FLAG: &str = "--allow-broad-workspace";

/// A workspace refused for being too broad.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "workspace {path} is {why}: commands and file tools could write {what}. Start baton in a \
     project folder (-C DIR), or pass --allow-broad-workspace if this is really meant"
)]
pub struct BroadWorkspace {
    pub path: PathBuf,
    pub why: &'static str,
    pub what: &'static str,
}

/// The places a workspace must neither be nor contain: the home folder, the system's temp
/// folders and the user's runtime folder (sockets of the session: agents, X11, D-Bus).
fn guarded() -> Vec<(PathBuf, &'static str, &'static str)> {
    let mut out = Vec::new();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        out.push((
            PathBuf::from(home),
            "your home folder",
            "your dotfiles (~/.bashrc, ~/.config, git's global config)",
        ));
    }
    for temp in [
        std::env::temp_dir(),
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev/shm"),
    ] {
        out.push((
            temp,
            "the system's temp folder",
            "other programs' files and sockets there (X11, ssh-agent, tmux)",
        ));
    }
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR").filter(|r| !r.is_empty()) {
        out.push((
            PathBuf::from(run),
            "your runtime folder",
            "the sockets of your login session (D-Bus, agents)",
        ));
    }
    out
}

/// Why `workspace` is too broad to be one, when it is. Both sides are compared as they really
/// are (links resolved), so `-C ~/..` or a link to `/tmp` is seen for what it is.
pub fn too_broad(workspace: &Path) -> Option<BroadWorkspace> {
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let ws = real(workspace);
    if ws.parent().is_none() {
        return Some(BroadWorkspace {
            path: ws,
            why: "the root folder",
            what: "the whole machine",
        });
    }
    for (place, name, what) in guarded() {
        let place = real(&place);
        if place == ws {
            return Some(BroadWorkspace {
                path: ws,
                why: name,
                what,
            });
        }
        if place.starts_with(&ws) {
            return Some(BroadWorkspace {
                path: ws,
                why: match name {
                    "your home folder" => "a folder above your home folder",
                    "your runtime folder" => "a folder above your runtime folder",
                    _ => "a folder above the system's temp folder",
                },
                what,
            });
        }
    }
    None
}

/// Refuses a workspace that is too broad unless `allow` (the flag) says it is meant. With
/// the sandbox off nothing is refused: commands may write anywhere then, whatever the
/// workspace.
pub fn check(workspace: &Path, sandboxed: bool, allow: bool) -> Result<(), BroadWorkspace> {
    if allow || !sandboxed {
        return Ok(());
    }
    match too_broad(workspace) {
        Some(refused) => Err(refused),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_home_temp_and_their_parents_are_too_broad() {
        assert!(too_broad(Path::new("/")).is_some());
        assert!(too_broad(Path::new("/tmp")).is_some());
        assert!(too_broad(&std::env::temp_dir()).is_some());
        if let Some(home) = std::env::var_os("HOME").map(PathBuf::from)
            && home.parent().is_some()
        {
            assert_eq!(too_broad(&home).map(|b| b.why), Some("your home folder"));
            let above = home.parent().unwrap_or(Path::new("/"));
            assert!(too_broad(above).is_some());
        }
        let project = tempfile::tempdir().unwrap();
        assert_eq!(too_broad(project.path()), None);
        assert!(check(Path::new("/"), true, true).is_ok());
        assert!(check(Path::new("/"), false, false).is_ok());
        let e = check(Path::new("/"), true, false).unwrap_err();
        assert!(e.to_string().contains(ALLOW_FLAG), "{e}");
    }
}
