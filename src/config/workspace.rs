//! Which folders may be a workspace. The workspace is what sandboxed commands and the file
//! tools may write; a workspace of `/`, the home folder (or a folder above it), the system's
//! temp folder or a folder holding baton's own configuration (`~/.config`) would hand them the
//! user's dotfiles, other programs' sockets, baton's hooks and every other project. Every entry point (`--exec`, the interactive UI, `baton sandbox -C`, ACP's
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
    pub what: std::borrow::Cow<'static, str>,
}

/// The places a workspace must neither be nor contain: the home folder, the system's temp
/// folders and the user's runtime folder (sockets of the session: agents, X11, D-Bus).
fn guarded() -> Vec<(PathBuf, &'static str, &'static str)> {
    let mut out = Vec::new();
    // $HOME, and the account's home where HOME is unset or names another folder: the sandbox
    // hides the latter too, and a user's dotfiles are there either way.
    let homes = [
        std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from),
        dirs::home_dir(),
    ];
    for home in homes.into_iter().flatten() {
        out.push((
            home,
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

/// baton's own folders (`protocol::baton_own_dirs`, the list the sandbox hides too).
pub fn own_dirs() -> Vec<PathBuf> {
    crate::protocol::baton_own_dirs()
}

/// System folders no workspace may be or lie in: the machine's configuration, programs,
/// devices and runtime state (as root, a command could plant a cron job or a service).
const SYSTEM_TREES: [&str; 11] = [
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/boot", "/dev", "/proc", "/sys", "/run",
];
/// Folders that hold other people's and programs' folders: refused themselves, while a
/// project folder inside them is fine.
const SYSTEM_PARENTS: [&str; 9] = [
    "/var", "/var/lib", "/var/log", "/home", "/opt", "/srv", "/mnt", "/media", "/root",
];

/// A folder's identity, links followed: its device and inode (a bind mount of a folder has
/// the folder's).
type FolderId = (u64, u64);

fn folder_id(p: &Path) -> Option<FolderId> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()))
}

/// The identities of `folder` and of every folder above it as the kernel resolves them (each
/// step is `..` of the real folder, so links and bind mounts on the way count for what they
/// are), nearest first; empty when `folder` does not exist. One `stat` a level, where
/// comparing resolved names would cost a `readlink` per component of every name.
fn lineage(folder: &Path) -> Vec<FolderId> {
    let mut out: Vec<FolderId> = Vec::new();
    let mut step = folder.to_path_buf();
    // `/..` is `/`: the walk ends where a level is its own parent.
    while let Some(id) = folder_id(&step) {
        if out.last() == Some(&id) || out.len() > 4096 {
            break;
        }
        out.push(id);
        step.push("..");
    }
    out
}

/// The links in baton's own folders: at any depth in its configuration folder (`hooks/`,
/// `skills/`: hook programs live there, round 34), among the entries of the others (sessions
/// are many, and none is run). At most 5,000 entries are looked at.
fn own_links() -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut budget = 5_000usize;
    let config = crate::protocol::baton_own_dirs().into_iter().next();
    for own in own_dirs() {
        let deep = Some(&own) == config.as_ref();
        let mut stack = vec![own];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if budget == 0 {
                    return out;
                }
                budget -= 1;
                match entry.file_type() {
                    Ok(t) if t.is_symlink() => out.push(entry.path()),
                    Ok(t) if t.is_dir() && deep => stack.push(entry.path()),
                    _ => {}
                }
            }
        }
    }
    out
}

/// Why `workspace` is too broad to be one, when it is. Folders are compared by identity (links
/// resolved, bind mounts seen by their inode), so `-C ~/..`, a link to `/tmp` or a bind mount
/// of it is seen for what it is.
pub fn too_broad(workspace: &Path) -> Option<BroadWorkspace> {
    // A `--write` folder may not exist yet: it is judged where it would be.
    let ws = workspace.canonicalize().unwrap_or_else(|_| {
        crate::untrusted_fs::planned(workspace)
            .unwrap_or_else(|| crate::untrusted_fs::real_or_planned(workspace))
    });
    // The look at the home's configuration reads files: it runs beside the other looks.
    std::thread::scope(|scope| {
        let configuration = scope.spawn(|| {
            dirs::home_dir().and_then(|home| super::dotfiles::configuration_of(&home, &ws))
        });
        judged(&ws, configuration)
    })
}

/// [`too_broad`] for `ws` (canonical, or where it would be made), with what the home's
/// configuration makes of it coming from `configuration`.
fn judged(
    ws: &Path,
    configuration: std::thread::ScopedJoinHandle<'_, Option<super::dotfiles::Configuration>>,
) -> Option<BroadWorkspace> {
    let ws = ws.to_path_buf();
    let refuse = |why, what: std::borrow::Cow<'static, str>| {
        Some(BroadWorkspace {
            path: ws.clone(),
            why,
            what,
        })
    };
    // The workspace (or the folder it would be made in) and the folders above it: a place
    // among them holds the workspace.
    let existing = ws
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    let above_ws = lineage(existing);
    let ws_id = above_ws.first().copied().filter(|_| existing == ws);
    if ws.parent().is_none() || (ws_id.is_some() && ws_id == folder_id(Path::new("/"))) {
        return refuse("the root folder", "the whole machine".into());
    }
    let is_ws = |id: Option<FolderId>| id.is_some() && id == ws_id;
    let holds_ws = |id: Option<FolderId>| id.is_some_and(|id| above_ws.contains(&id));
    // A place that does not exist cannot hold a workspace that does; one not made yet may
    // lie in a place not made yet either (`--write ~/.aws` before `aws configure`).
    let place_holds_ws = |place: &Path| {
        holds_ws(folder_id(place))
            || (ws_id.is_none() && ws.starts_with(crate::untrusted_fs::real_or_planned(place)))
    };
    for (place, name, what) in guarded() {
        let place_and_above = lineage(&place);
        if is_ws(place_and_above.first().copied()) {
            return refuse(name, what.into());
        }
        let ws_above_place = match ws_id {
            Some(id) if !place_and_above.is_empty() => place_and_above.contains(&id),
            // A place that does not exist (a HOME not made yet) is judged by its name.
            _ => crate::untrusted_fs::real_or_planned(&place).starts_with(&ws),
        };
        if ws_above_place {
            let why = match name {
                "your home folder" => "a folder above your home folder",
                "your runtime folder" => "a folder above your runtime folder",
                _ => "a folder above the system's temp folder",
            };
            return refuse(why, what.into());
        }
    }
    // baton's own configuration and state: a hook or setting written there runs or counts
    // outside the sandbox in every later session. A folder holding one (`~/.config`,
    // `~/.local`) or inside one is refused, whether the folder exists yet or not.
    for own in own_dirs() {
        let planned = crate::untrusted_fs::real_or_planned(&own);
        let own_id = folder_id(&planned);
        let inside = ws.starts_with(&planned) || (!is_ws(own_id) && holds_ws(own_id));
        if planned.starts_with(&ws) || inside || is_ws(own_id) {
            let why = if inside {
                "inside baton's own configuration or state folder"
            } else {
                "a folder holding baton's own configuration or state"
            };
            return refuse(
                why,
                "baton's hooks, settings and trust list (~/.config/baton), which act \
                 outside the sandbox in every later session"
                    .into(),
            );
        }
    }
    // A folder holding what a file of baton's own folders links to (`hooks.json` kept in a
    // dotfiles repository, round 33): a command there would write the next session's hooks
    // and settings, even before the file exists.
    for link in own_links() {
        if super::dotfiles::link_target(&link).starts_with(&ws) {
            return refuse(
                "a folder holding a file of baton's own configuration (a link leads there)",
                "baton's hooks, settings and trust list (~/.config/baton), which act \
                 outside the sandbox in every later session"
                    .into(),
            );
        }
    }
    // A credential folder (`~/.ssh`, `~/.aws`, `~/.gnupg`…) or a folder inside one: the
    // sandbox hides them from commands, and a workspace there would hand them over (a path a
    // command planted a link on, `~/code/team/proj` leading to `~/.ssh`, resolves there).
    if let Some(home) = dirs::home_dir()
        && crate::protocol::HOME_CREDENTIALS
            .iter()
            .any(|credential| place_holds_ws(&home.join(credential)))
    {
        return refuse(
            "a folder of your credentials (hidden from commands)",
            "keys and tokens the sandbox keeps from commands".into(),
        );
    }
    // The user's configuration (a dotfiles or tools repository): what the home's dotfiles
    // and start-up folders link into or name by path lies there, and programs outside the
    // sandbox (the next shell, `ssh`, `git`, editor, Python) load it (red team rounds 33–36).
    let configuration = match configuration.join() {
        Ok(found) => found,
        Err(panic) => std::panic::resume_unwind(panic),
    };
    if ws_id.is_some()
        && let Some(found) = configuration
    {
        let how = match &found {
            super::dotfiles::Configuration::Linked(_) => "links into it",
            super::dotfiles::Configuration::Named(_) => "names it",
            super::dotfiles::Configuration::Inside(_) => "is a folder they load from",
        };
        return refuse(
            "your configuration: programs outside the sandbox load what lies there",
            format!(
                "what your next shell, ssh, git or editor loads ({} {how})",
                found.file().display()
            )
            .into(),
        );
    }
    let system_tree = |t: &&str| place_holds_ws(Path::new(t));
    let system_parent = |p: &&str| is_ws(folder_id(Path::new(p)));
    if SYSTEM_TREES.iter().any(system_tree) || SYSTEM_PARENTS.iter().any(system_parent) {
        return refuse(
            "a system folder",
            "the machine's configuration, programs or other users' files".into(),
        );
    }
    None
}

/// Refuses a workspace, or an extra writable folder (`--write`, `[sandbox] writable`), that
/// is too broad unless `allow` (the flag) says it is meant: commands may write both alike.
/// With the sandbox off nothing is refused: commands may write anywhere then, whatever the
/// workspace.
pub fn check(
    workspace: &Path,
    writable: &[PathBuf],
    sandboxed: bool,
    allow: bool,
) -> Result<(), BroadWorkspace> {
    if !sandboxed {
        return Ok(());
    }
    let folders = || std::iter::once(workspace).chain(writable.iter().map(PathBuf::as_path));
    if allow {
        for folder in folders() {
            make_own_dirs_hideable(folder);
        }
        return Ok(());
    }
    for folder in folders() {
        if let Some(refused) = too_broad(folder) {
            return Err(refused);
        }
    }
    Ok(())
}

/// Creates (0700) each of baton's own folders that lie in `folder` and do not exist yet: the
/// sandbox hides what exists (an empty folder over it), so a broad workspace accepted by the
/// flag cannot have a command create `~/.config/baton/hooks.json` where nothing was hidden.
fn make_own_dirs_hideable(folder: &Path) {
    use std::os::unix::fs::DirBuilderExt;
    let ws = folder
        .canonicalize()
        .unwrap_or_else(|_| folder.to_path_buf());
    for own in own_dirs() {
        let own = crate::untrusted_fs::real_or_planned(&own);
        if own.starts_with(&ws) && own != ws && std::fs::symlink_metadata(&own).is_err() {
            let _ = std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&own);
        }
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
        assert!(check(Path::new("/"), &[], true, true).is_ok());
        assert!(check(Path::new("/"), &[], false, false).is_ok());
        let e = check(Path::new("/"), &[], true, false).unwrap_err();
        assert!(e.to_string().contains(ALLOW_FLAG), "{e}");
    }

    /// Red team round 7, finding 04: `-C ~/.config` was accepted, and the model planted
    /// `~/.config/baton/hooks.json`. A folder holding baton's own folders, or inside one, is
    /// broad whether they exist or not (nothing is created here).
    #[test]
    fn a_folder_holding_or_inside_batons_own_is_too_broad() {
        for own in own_dirs() {
            let parent = own.parent().unwrap();
            assert!(too_broad(parent).is_some(), "{}", parent.display());
            assert!(too_broad(&own).is_some(), "{}", own.display());
            assert!(too_broad(&own.join("sessions")).is_some());
        }
        let project = tempfile::tempdir().unwrap();
        assert_eq!(too_broad(project.path()), None);
    }

    /// Found by the attack round after #27: `--write /tmp` beside a project workspace, `-C
    /// /etc` as root (a cron job was planted), and a bind mount of /tmp were all accepted.
    #[test]
    fn writable_folders_system_folders_and_bind_mounts_are_judged_too() {
        let project = tempfile::tempdir().unwrap();
        let e = check(project.path(), &[PathBuf::from("/tmp")], true, false).unwrap_err();
        assert_eq!(e.why, "the system's temp folder");
        for system in ["/etc", "/etc/cron.d", "/usr", "/run", "/var/lib", "/home"] {
            if Path::new(system).is_dir() {
                assert!(too_broad(Path::new(system)).is_some(), "{system}");
            }
        }
        assert!(check(project.path(), &[project.path().join("out")], true, false).is_ok());
        // A folder that does not exist yet is judged where it would be made: in a system
        // folder, in a credential folder (made or not), or through a link and `..`.
        let planned = PathBuf::from("/etc/baton-test-not-made/cron.d");
        let e = check(project.path(), &[planned], true, false).unwrap_err();
        assert_eq!(e.why, "a system folder");
        if let Some(home) = dirs::home_dir() {
            for credential in [
                ".aws",
                ".aws/sub",
                ".config/gh/x",
                ".baton-test-no-such/../.ssh",
            ] {
                let e = check(project.path(), &[home.join(credential)], true, false);
                assert!(e.is_err(), "--write ~/{credential} was accepted");
            }
        }
        std::os::unix::fs::symlink("/etc", project.path().join("to-etc")).unwrap();
        let through = project.path().join("to-etc/baton-test-not-made/../new");
        assert!(check(project.path(), &[through], true, false).is_err());
        // The same folder under another name: only a mount makes one, so compare the test
        // folder with itself through a link.
        let link = project.path().join("link");
        std::os::unix::fs::symlink(std::env::temp_dir(), &link).unwrap();
        assert!(too_broad(&link).is_some());
    }
}
