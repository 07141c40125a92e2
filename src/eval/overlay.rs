//! A trial's own writable `/usr`, `/etc` and `/opt` under bubblewrap: when the runner is root,
//! each phase's bwrap starts in a mount namespace of its own where those host folders are
//! overlays whose upper layer is the trial's (`work/overlay/usr/upper` …). `RUN` lines, the
//! agent and the verifier write there as they would in an image (`pip install`, `npm -g`, a
//! file under `/opt`), every phase of the trial sees what the earlier ones wrote, and the
//! host's folders never change.
//!
//! Only root: in a user namespace of an unprivileged runner the host's root-owned files stay
//! unwritable through an overlay (their owner is not mapped), so nothing would be gained.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

/// The host system folders a trial gets a writable layer over (and the toolchains under the
/// host's HOME that it sees).
pub const OVERLAID: &[&str] = &["usr", "etc", "opt"];

/// The options every layer is mounted with. `redirect_dir=off`: a folder of the host's layer
/// renamed in one phase would otherwise keep showing the host's entries under the new name in
/// the next, where the covers over them (`/etc/shadow`, SSH host keys, sockets) are mounted by
/// their old paths; with it off such a rename copies what the trial can read instead.
/// `index=off` and `metacopy=off` keep the layer plain files the runner can remove.
const LAYER_OPTIONS: &str = "redirect_dir=off,index=off,metacopy=off";

/// The overlays of one phase, prepared before the fork: between fork and exec only syscalls
/// run, on these buffers.
#[derive(Debug)]
pub struct SystemOverlay {
    /// The trial's `work/overlay`: the layers' options name their folders relative to it, so
    /// no character of the trial's path (a `,` or `:`) can change what they say.
    base: CString,
    /// The host folders layered, each with its mount point and the overlay's options.
    layers: Vec<(PathBuf, CString, CString)>,
}

impl SystemOverlay {
    /// Makes the trial's layer folders under `base` (kept between phases) for each of
    /// `folders` (absolute host folders), and the mounts' words. A folder that is a link or
    /// missing stays as the host has it, as does one whose path an overlay's options cannot
    /// carry (a `,` `:` `=` or `\\` in it).
    pub fn prepare(base: &Path, folders: &[PathBuf]) -> io::Result<SystemOverlay> {
        let mut layers = Vec::new();
        for host in folders {
            let text = host.to_string_lossy();
            if !host.is_absolute()
                || text.contains([',', ':', '=', '\\'])
                || !std::fs::symlink_metadata(host).is_ok_and(|m| m.is_dir())
            {
                continue;
            }
            let name = layer_name(host);
            for part in ["upper", "work"] {
                std::fs::create_dir_all(base.join(&name).join(part))?;
            }
            let options = format!(
                "lowerdir={text},upperdir={name}/upper,workdir={name}/work,{LAYER_OPTIONS}"
            );
            layers.push((
                host.clone(),
                c_string(host.as_os_str().as_bytes())?,
                c_string(options.as_bytes())?,
            ));
        }
        let base = std::fs::canonicalize(base)?;
        Ok(SystemOverlay {
            base: c_string(base.as_os_str().as_bytes())?,
            layers,
        })
    }

    /// Whether `host` is one of the folders layered.
    pub fn covers(&self, host: &Path) -> bool {
        self.layers.iter().any(|(h, _, _)| h == host)
    }

    /// The folder that holds what the trial wrote into the host folder `host`.
    pub fn upper(base: &Path, host: &Path) -> PathBuf {
        base.join(layer_name(host)).join("upper")
    }

    /// In the child, between fork and exec of bwrap: a mount namespace of its own (nothing
    /// propagates back to the host's), the overlays mounted over the host's folders. bwrap
    /// builds the trial's world from this namespace, so its binds of `/usr` … are the overlays.
    pub fn mount(&self) -> io::Result<()> {
        unshare(CloneFlags::CLONE_NEWNS)?;
        mount(
            None::<&str>,
            c"/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )?;
        nix::unistd::chdir(self.base.as_c_str())?;
        for (_, at, options) in &self.layers {
            mount(
                Some(c"overlay"),
                at.as_c_str(),
                Some(c"overlay"),
                MsFlags::empty(),
                Some(options.as_c_str()),
            )?;
        }
        nix::unistd::chdir(c"/")?;
        Ok(())
    }
}

/// One folder name per host path: `/usr` → `usr`, `/root/.pyenv` → `root%2F.pyenv`.
fn layer_name(host: &Path) -> String {
    host.to_string_lossy()
        .trim_start_matches('/')
        .replace('%', "%25")
        .replace('/', "%2F")
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_name_their_folders_relative_to_the_trial() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("a,b:c").join("overlay");
        let tool = dir.path().join("tool");
        std::fs::create_dir(&tool).unwrap();
        let folders = [PathBuf::from("/usr"), tool.clone(), dir.path().join("x,y")];
        let o = SystemOverlay::prepare(&base, &folders).unwrap();
        assert!(o.covers(Path::new("/usr")) && o.covers(&tool));
        assert_eq!(o.layers.len(), 2, "a missing folder is not layered");
        for (host, _, options) in &o.layers {
            let options = options.to_str().unwrap();
            let name = layer_name(host);
            assert!(options.starts_with(&format!(
                "lowerdir={},upperdir={name}/upper,",
                host.display()
            )));
            assert!(options.contains("redirect_dir=off"));
            assert!(SystemOverlay::upper(&base, host).is_dir());
        }
        assert_eq!(layer_name(Path::new("/usr")), "usr");
        assert_eq!(layer_name(Path::new("/a/b%c")), "a%2Fb%25c");
        assert_ne!(layer_name(Path::new("/a_b")), layer_name(Path::new("/a/b")));
    }
}
