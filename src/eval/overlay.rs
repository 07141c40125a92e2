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
///
/// Each overlay is mounted on a folder of the trial's own (`work/overlay/usr/merged`), never
/// over the host's folder itself: bwrap, its loader and its libraries, which run as the
/// runner (root), come from the host's `/usr` and `/etc`, not from a layer a trial wrote (a
/// `/usr/bin/bwrap` of its own, an `/etc/ld.so.preload`). bwrap then binds the merged folder
/// at `/usr` in the trial's world.
#[derive(Debug)]
pub struct SystemOverlay {
    /// The trial's `work/overlay`: the layers' options name their folders relative to it, so
    /// no character of the trial's path (a `,` or `:`) can change what they say.
    base: CString,
    /// Per host folder layered: the merged folder (absolute, what bwrap binds), its mount
    /// point relative to `base`, and the overlay's options.
    layers: Vec<Layer>,
}

#[derive(Debug)]
struct Layer {
    host: PathBuf,
    merged: PathBuf,
    mount_point: CString,
    options: CString,
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
            for part in ["upper", "work", "merged"] {
                std::fs::create_dir_all(base.join(&name).join(part))?;
            }
            let options = format!(
                "lowerdir={text},upperdir={name}/upper,workdir={name}/work,{LAYER_OPTIONS}"
            );
            layers.push(Layer {
                host: host.clone(),
                merged: PathBuf::from(&name).join("merged"),
                mount_point: c_string(format!("{name}/merged").as_bytes())?,
                options: c_string(options.as_bytes())?,
            });
        }
        // Absolute: the runner's `--out` may be relative, and bwrap resolves a relative
        // source against its own working dir.
        let base = std::fs::canonicalize(base)?;
        for layer in &mut layers {
            layer.merged = base.join(&layer.merged);
        }
        Ok(SystemOverlay {
            base: c_string(base.as_os_str().as_bytes())?,
            layers,
        })
    }

    /// The folder bwrap binds at `host` in the trial's world (the overlay's merged view, once
    /// [`Self::mount`] ran), when `host` is one of the folders layered.
    pub fn merged(&self, host: &Path) -> Option<&Path> {
        self.layers
            .iter()
            .find(|l| l.host == host)
            .map(|l| l.merged.as_path())
    }

    /// The folder that holds what the trial wrote into the host folder `host`.
    pub fn upper(base: &Path, host: &Path) -> PathBuf {
        base.join(layer_name(host)).join("upper")
    }

    /// Each host folder layered, with the upper folder that holds what the trial wrote there.
    pub fn uppers(&self) -> Vec<(PathBuf, PathBuf)> {
        self.layers
            .iter()
            .filter_map(|l| Some((l.host.clone(), l.merged.parent()?.join("upper"))))
            .collect()
    }

    /// In the child, between fork and exec of bwrap: a mount namespace of its own (nothing
    /// propagates back to the host's), each overlay mounted on its merged folder. The working
    /// dir is the child's again afterwards.
    pub fn mount(&self) -> io::Result<()> {
        unshare(CloneFlags::CLONE_NEWNS)?;
        mount(
            None::<&str>,
            c"/",
            None::<&str>,
            MsFlags::MS_REC | MsFlags::MS_PRIVATE,
            None::<&str>,
        )?;
        let cwd = nix::fcntl::open(
            c".",
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )?;
        nix::unistd::chdir(self.base.as_c_str())?;
        for layer in &self.layers {
            mount(
                Some(c"overlay"),
                layer.mount_point.as_c_str(),
                Some(c"overlay"),
                MsFlags::empty(),
                Some(layer.options.as_c_str()),
            )?;
        }
        nix::unistd::fchdir(&cwd)?;
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
        assert!(o.merged(Path::new("/usr")).is_some_and(Path::is_absolute));
        assert!(
            o.merged(&tool)
                .is_some_and(|m| m.ends_with("merged") && m.is_dir())
        );
        assert_eq!(o.layers.len(), 2, "a missing folder is not layered");
        for Layer { host, options, .. } in &o.layers {
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
