//! A real container runtime for trials (`--env podman|docker`): the task's image is built from
//! its Dockerfile once per task and kept (tagged by the task's checksum), and each trial runs
//! in one container of it, as Harbor runs a trial in Docker. The runtime is whatever the user
//! configured (`containers.conf`, the Docker daemon); baton only asks it to build, run, kill
//! and remove.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::process::{self, Exit};
use super::task::{ImageSource, Task};

/// The container runtimes `--env` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    Podman,
    Docker,
}

impl RuntimeKind {
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Podman => "podman",
            RuntimeKind::Docker => "docker",
        }
    }
}

/// How long the runtime's own quick commands (inspect, kill, rm) may take.
const QUICK: Duration = Duration::from_secs(120);

/// A container runtime found on this machine.
#[derive(Debug)]
pub struct Runtime {
    pub kind: RuntimeKind,
    program: PathBuf,
    /// One entry per image tag: the first trial of a task builds it, the others wait for it.
    images: Mutex<BTreeMap<String, Arc<ImageSlot>>>,
}

/// A task image being made, or made (or why it could not be).
type ImageSlot = OnceLock<Result<Image, String>>;

/// A task's image, ready to run.
#[derive(Debug, Clone)]
pub struct Image {
    pub tag: String,
    /// The image's WORKDIR (`/` when it sets none, as in Docker).
    pub workdir: String,
    /// The image's USER (empty: root).
    pub user: String,
}

impl Image {
    /// Whether the image's processes run as root (no USER, or USER root / 0).
    pub fn runs_as_root(&self) -> bool {
        let user = self.user.split(':').next().unwrap_or("");
        matches!(user, "" | "root" | "0")
    }
}

impl Runtime {
    /// The runtime's program, from a PATH entry no trial can write (it runs outside every
    /// trial), checked by listing its images: `Err` says why it cannot be used.
    pub fn find(kind: RuntimeKind) -> Result<Runtime, String> {
        let roots = crate::protocol::host_programs::startup_roots();
        let name = kind.name();
        let program = crate::protocol::host_programs::find_program(name, &roots)
            .ok_or_else(|| format!("`{name}` is not installed (no `{name}` on PATH)"))?;
        let rt = Runtime {
            kind,
            program,
            images: Mutex::new(BTreeMap::new()),
        };
        let mut listed = rt.quick(&["images", "-q"])?;
        // An image removed while the list is read (another job's) fails the listing: that
        // says nothing about this runtime. Podman words it "image not known", or, caught
        // halfway through the removal, "retrieving parent of image … file does not exist".
        const REMOVED_MEANWHILE: [&str; 2] = ["image not known", "retrieving parent of image"];
        for _ in 0..3 {
            if listed.status_ok || !REMOVED_MEANWHILE.iter().any(|m| listed.text.contains(m)) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(300));
            listed = rt.quick(&["images", "-q"])?;
        }
        if !listed.status_ok {
            return Err(format!(
                "`{name} images` failed, so {name} cannot run trials here: {}",
                listed.text.trim()
            ));
        }
        Ok(rt)
    }

    /// The runtime's command, run from `/` (never from a folder a trial could write).
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.current_dir("/");
        cmd
    }

    /// Runs a quick runtime command, for [`QUICK`] at most (a runtime stuck on its storage
    /// lock must not stall the job); its output (stdout and stderr) as text.
    fn quick(&self, args: &[&str]) -> Result<Quick, String> {
        use std::io::{Read, Seek};
        let mut cmd = self.command();
        cmd.args(args);
        let cannot = |e: std::io::Error| format!("cannot run {}: {e}", self.program.display());
        let mut out = tempfile::tempfile().map_err(cannot)?;
        let err = out.try_clone().map_err(cannot)?;
        let outcome = process::run(
            cmd,
            QUICK,
            out.try_clone().map_err(cannot)?,
            err,
            &process::NEVER,
        );
        let mut text = String::new();
        out.rewind().map_err(cannot)?;
        let _ = out.take(1 << 20).read_to_string(&mut text);
        match outcome.exit {
            Exit::SpawnFailed(why) => Err(why),
            Exit::TimedOut => Err(format!(
                "`{} {}` did not finish within {} s",
                self.kind.name(),
                args.join(" "),
                QUICK.as_secs()
            )),
            exit => Ok(Quick {
                status_ok: exit.success(),
                text,
            }),
        }
    }

    /// The task's image, built from its Dockerfile (or pulled) unless the runtime has it:
    /// `log` gets the build's output. Two trials of one task build once; the second waits.
    pub fn image(
        &self,
        task: &Task,
        checksum: &str,
        log: &Path,
        limit: Duration,
        cancel: &AtomicBool,
    ) -> Result<Image, String> {
        let Some(source) = &task.environment.image else {
            return Err(format!("{}: the task names no image", task.dir.display()));
        };
        let tag = match source {
            ImageSource::Dockerfile { .. } => image_tag(&task.name, checksum),
            ImageSource::Prebuilt(name) if is_image_reference(name) => name.clone(),
            ImageSource::Prebuilt(name) => {
                return Err(format!(
                    "'{name}' is not an image reference (letters, digits and . _ - / : @, not starting with -)"
                ));
            }
        };
        let slot = {
            let mut images = self.images.lock().unwrap_or_else(|e| e.into_inner());
            images.entry(tag.clone()).or_default().clone()
        };
        slot.get_or_init(|| self.make_image(source, &tag, task.allow_internet, log, limit, cancel))
            .clone()
    }

    /// Why this runtime must not build the task's Dockerfile `file`, if it must not: a
    /// `RUN --mount` step reaches the host's files as root on podman before 5.3.2
    /// (CVE-2024-1753: a bind from a stage holding a link to `/`; CVE-2024-9675 and
    /// CVE-2024-11218, cache and bind mounts through links, fixed last) and on docker before
    /// 25.0.2 (BuildKit's CVE-2024-23651/23652) — red team round 33 wrote and read host files
    /// through podman 4.3.1. A version that cannot be read counts as such a one.
    fn unsafe_to_build(&self, file: &Path) -> Option<String> {
        let anchor = file.parent()?;
        let text = crate::untrusted_fs::read_file(file, &[anchor], 4 << 20).ok()?;
        if !crate::eval::dockerfile::uses_run_mount(&String::from_utf8_lossy(&text)) {
            return None;
        }
        let version = self.version();
        let safe = version.is_some_and(|v| match self.kind {
            RuntimeKind::Podman => v >= (5, 3, 2),
            RuntimeKind::Docker => v >= (25, 0, 2),
        });
        if safe {
            return None;
        }
        let name = self.kind.name();
        let shown = version.map_or("an unknown version".to_string(), |(a, b, c)| {
            format!("{a}.{b}.{c}")
        });
        Some(format!(
            "the task's Dockerfile has a `RUN --mount` step, which {name} {shown} lets reach \
             the host's files as root while it builds (fixed in podman 5.3.2 and docker \
             25.0.2): not built; upgrade {name}, or run the task with --env bwrap"
        ))
    }

    /// The runtime's version (`podman version`, `docker version`).
    fn version(&self) -> Option<(u32, u32, u32)> {
        let out = self
            .quick(&["version", "--format", "{{.Client.Version}}"])
            .ok()?;
        if !out.status_ok {
            return None;
        }
        // The version alone on stdout; a warning on stderr may come with it.
        let word = out
            .text
            .split_whitespace()
            .find(|w| w.starts_with(|c: char| c.is_ascii_digit()) && w.contains('.'))?;
        let mut parts = word
            .split(['.', '-', '+', '~'])
            .map(|p| p.parse::<u32>().ok());
        Some((
            parts.next()??,
            parts.next()??,
            parts.next().flatten().unwrap_or(0),
        ))
    }

    fn make_image(
        &self,
        source: &ImageSource,
        tag: &str,
        online: bool,
        log: &Path,
        limit: Duration,
        cancel: &AtomicBool,
    ) -> Result<Image, String> {
        let have = self.quick(&["image", "inspect", "--format", "{{.Id}}", tag])?;
        if !have.status_ok {
            if let ImageSource::Dockerfile { file, .. } = source
                && let Some(why) = self.unsafe_to_build(file)
            {
                return Err(why);
            }
            let mut cmd = self.command();
            match source {
                ImageSource::Dockerfile { file, context } => {
                    cmd.arg("build").arg("-f").arg(file).arg("-t").arg(tag);
                    // An offline task's `RUN` steps are offline too, as its setup phase is
                    // under bwrap (red team round 33: a build reached a host listener through
                    // the runtime's bridge). Base images are still pulled.
                    if !online {
                        cmd.arg("--network=none");
                    }
                    cmd.arg(context);
                }
                ImageSource::Prebuilt(name) => {
                    cmd.arg("pull").arg(name);
                }
            }
            let out = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
            let err = out.try_clone().map_err(|e| e.to_string())?;
            let outcome = process::run(cmd, limit, out, err, cancel);
            match outcome.exit {
                Exit::Code(0) => {}
                Exit::TimedOut => {
                    return Err(format!(
                        "building the image {tag} took longer than {:.0} s; see {}",
                        limit.as_secs_f64(),
                        log.display()
                    ));
                }
                other => {
                    return Err(format!(
                        "{} {tag} failed ({other:?}): {}",
                        match source {
                            ImageSource::Dockerfile { .. } => "building the image",
                            ImageSource::Prebuilt(_) => "pulling the image",
                        },
                        log_tail(log)
                    ));
                }
            }
        }
        let config = self.quick(&["image", "inspect", "--format", "{{json .Config}}", tag])?;
        if !config.status_ok {
            return Err(format!(
                "cannot inspect the image {tag}: {}",
                config.text.trim()
            ));
        }
        let config = serde_json::from_str::<serde_json::Value>(config.text.trim()).ok();
        let field = |key: &str| {
            config
                .as_ref()
                .and_then(|c| c.get(key)?.as_str().map(str::to_string))
        };
        let workdir = field("WorkingDir")
            .filter(|w| w.starts_with('/'))
            .unwrap_or_else(|| "/".to_string());
        Ok(Image {
            tag: tag.to_string(),
            workdir,
            user: field("User").unwrap_or_default(),
        })
    }

    /// The process id, on this host, of the container's first process (for its namespaces).
    pub fn init_pid(&self, name: &str) -> Result<u32, String> {
        let out = self.quick(&["inspect", "--format", "{{.State.Pid}}", name])?;
        out.text
            .trim()
            .parse()
            .ok()
            .filter(|&p: &u32| p > 0 && out.status_ok)
            .ok_or_else(|| format!("cannot find the container's process: {}", out.text.trim()))
    }

    /// Starts a watchdog for container `name`: a shell in a process group of its own that
    /// waits on a pipe whose other end only baton holds. When baton ends without saying
    /// `done` (a second Ctrl-C, SIGKILL, a crash), the pipe closes and the watchdog removes
    /// the container, which would otherwise outlive the job.
    pub fn watchdog(&self, name: &str) -> std::io::Result<std::process::Child> {
        Command::new("/bin/sh")
            .args([
                "-c",
                r#"read -r line; [ "$line" = done ] && exit 0; "$0" kill "$1"; exec "$0" rm -f "$1""#,
            ])
            .arg(&self.program)
            .arg(name)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
    }

    /// Saves container `name`'s files as image `tag` (`commit`): the next step of a
    /// multi-step trial starts from what this one left.
    pub fn commit(&self, name: &str, tag: &str) -> Result<(), String> {
        let q = self.quick(&["commit", name, tag])?;
        if q.status_ok {
            Ok(())
        } else {
            Err(format!(
                "`{} commit` failed: {}",
                self.kind.name(),
                q.text.trim()
            ))
        }
    }

    /// Removes image `tag` (a step's, once its trial is over).
    pub fn remove_image(&self, tag: &str) {
        let _ = self.quick(&["rmi", "-f", tag]);
    }

    /// Ends container `name` at once (SIGKILL to all of it) and removes it.
    pub fn remove(&self, name: &str) {
        let _ = self.quick(&["kill", name]);
        let _ = self.quick(&["rm", "-f", name]);
    }
}

struct Quick {
    status_ok: bool,
    text: String,
}

/// The tag of a task's image: its name made a valid repository name, and its checksum.
pub fn image_tag(task: &str, checksum: &str) -> String {
    let mut name: String = task
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect();
    name = name.trim_matches('-').to_string();
    if name.is_empty() {
        name = "task".into();
    }
    name.truncate(100);
    let version: String = checksum
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    format!(
        "localhost/baton-task-{name}:{}",
        if version.is_empty() {
            "latest"
        } else {
            &version
        }
    )
}

/// Whether a task's `docker_image` is an image reference and nothing else: it is passed to the
/// runtime as an argument, where a leading `-` would make it an option.
fn is_image_reference(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 512
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c))
}

fn log_tail(log: &Path) -> String {
    let text = std::fs::read(log).unwrap_or_default();
    let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(600)..]).into_owned();
    tail.trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_tag_is_a_valid_repository_name_with_the_checksum_as_version() {
        assert_eq!(
            image_tag("Org/Fix Git_Repo", "ab12cd34ef56ab78cd90xyz"),
            "localhost/baton-task-org-fix-git-repo:ab12cd34ef56ab78"
        );
        assert_eq!(image_tag("...", ""), "localhost/baton-task-task:latest");
    }

    #[test]
    fn a_prebuilt_image_name_cannot_be_an_option() {
        assert!(is_image_reference("python:3.13-slim-bookworm"));
        assert!(is_image_reference("ghcr.io/org/img@sha256:abc123"));
        assert!(!is_image_reference("--authfile=/etc/shadow"));
        assert!(!is_image_reference("img --privileged"));
        assert!(!is_image_reference(""));
    }
}
