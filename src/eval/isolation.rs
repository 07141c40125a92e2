//! Per-trial isolation: a bubblewrap sandbox where the trial's folders appear at `/app`, `/root`,
//! `/tmp`, `/logs/...`, `/tests` and `/solution` over a read-only host system, in its own user
//! (root inside, no capabilities outside), PID, IPC, UTS and network namespaces, with every
//! capability dropped and a seccomp filter; or, where bwrap cannot create namespaces, plain
//! per-trial folders with those paths rewritten.

use std::collections::BTreeMap;
use std::io::{Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use super::gateway::Gateway;
use super::runtime::{Runtime, RuntimeKind};
use crate::sandbox::bwrap::{self, Bwrap};

/// What the user asked for with `--isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationChoice {
    /// bubblewrap when it works here, else plain folders (with a warning).
    Auto,
    /// bubblewrap or fail.
    Bwrap,
    /// Plain per-trial folders: no filesystem, network or process isolation.
    None,
    /// The task's image built and run by Podman.
    Podman,
    /// The task's image built and run by Docker.
    Docker,
}

impl crate::protocol::Choice for IsolationChoice {
    const ALL: &'static [Self] = &[
        IsolationChoice::Auto,
        IsolationChoice::Bwrap,
        IsolationChoice::None,
        IsolationChoice::Podman,
        IsolationChoice::Docker,
    ];
    fn name(self) -> &'static str {
        match self {
            IsolationChoice::Auto => "auto",
            IsolationChoice::Bwrap => "bwrap",
            IsolationChoice::None => "none",
            IsolationChoice::Podman => "podman",
            IsolationChoice::Docker => "docker",
        }
    }
    fn help(self) -> &'static str {
        match self {
            IsolationChoice::Auto => "bubblewrap when it works here, else plain folders",
            IsolationChoice::Bwrap => "bubblewrap or fail",
            IsolationChoice::None => "plain per-trial folders: no isolation",
            IsolationChoice::Podman => {
                "build each task's image from its Dockerfile and run the trial in a Podman container"
            }
            IsolationChoice::Docker => {
                "build each task's image from its Dockerfile and run the trial in a Docker container"
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationKind {
    Bwrap,
    Plain,
    /// A container of the runtime in [`Isolation::runtime`].
    Podman,
    Docker,
}

impl IsolationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationKind::Bwrap => "bwrap",
            IsolationKind::Plain => "plain",
            IsolationKind::Podman => "podman",
            IsolationKind::Docker => "docker",
        }
    }

    /// Whether trials run in a container runtime's containers, every phase in the one
    /// container of the trial.
    pub fn is_runtime(self) -> bool {
        matches!(self, IsolationKind::Podman | IsolationKind::Docker)
    }
}

/// The host folders of one trial.
#[derive(Debug, Clone)]
pub struct TrialPaths {
    pub root: PathBuf,
    pub app: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub tests: PathBuf,
    pub solution: PathBuf,
    pub setup: PathBuf,
    pub agent_logs: PathBuf,
    pub verifier_logs: PathBuf,
    pub artifacts: PathBuf,
    /// The trial's own writable folders of `/var` ([`VAR_TRIAL`]: `log`, `tmp` …), kept for
    /// every phase; the host's hold other users' files and sockets.
    pub var: PathBuf,
    /// The trial's `passwd` and `group` (the host's plus the task's users), when it has users.
    pub identity: PathBuf,
    /// Writable top-level folders of the environment besides `/app` (`/workspace`), as
    /// (sandbox path, host folder).
    pub extra_roots: Vec<(String, PathBuf)>,
    /// The trial's own folders and files inside system folders (`/opt/tool`), under
    /// `work/system/`, as (sandbox path, host path, is a file).
    pub system_mounts: Vec<(String, PathBuf, bool)>,
    /// The trial's layers over the host's `/usr`, `/etc` and `/opt` when the runner is root
    /// ([`super::overlay`]), kept for every phase.
    pub overlay: PathBuf,
}

impl TrialPaths {
    /// Logs live at the top of the trial folder (as in Harbor); scratch folders under `work/`.
    pub fn new(root: &Path) -> TrialPaths {
        let work = root.join("work");
        TrialPaths {
            root: root.to_path_buf(),
            app: work.join("app"),
            home: work.join("home"),
            tmp: work.join("tmp"),
            tests: work.join("tests"),
            solution: work.join("solution"),
            setup: work.join("setup"),
            agent_logs: root.join("agent"),
            verifier_logs: root.join("verifier"),
            artifacts: root.join("artifacts"),
            var: work.join("var"),
            identity: work.join("identity"),
            extra_roots: Vec::new(),
            system_mounts: Vec::new(),
            overlay: work.join("overlay"),
        }
    }

    /// Adds the environment's extra top-level folders (`/workspace`), kept under `work/roots/`.
    pub fn with_extra_roots(mut self, roots: &[String]) -> TrialPaths {
        let base = self.root.join("work").join("roots");
        self.extra_roots = roots
            .iter()
            .filter(|r| r.starts_with('/') && r.len() > 1 && !r[1..].contains('/'))
            .map(|r| (r.clone(), base.join(&r[1..])))
            .collect();
        self
    }

    /// Adds the environment's paths inside system folders, kept under `work/system/`.
    pub fn with_system_mounts(
        mut self,
        mounts: &[crate::eval::dockerfile::SystemMount],
    ) -> TrialPaths {
        let base = self.root.join("work").join("system");
        self.system_mounts = mounts
            .iter()
            .filter(|m| m.path.starts_with('/') && !m.path.split('/').any(|c| c == ".."))
            // The trial's own /var folders take what the environment copies there.
            .filter(|m| {
                !VAR_TRIAL
                    .iter()
                    .any(|t| Path::new(&m.path).starts_with(Path::new("/var").join(t)))
            })
            .map(|m| {
                (
                    m.path.clone(),
                    base.join(m.path.trim_start_matches('/')),
                    m.file,
                )
            })
            .collect();
        self
    }

    /// The host path of a sandbox path inside the trial's folders (`/app/x`, `/root/.cache`,
    /// `/workspace/y`); `None` for anything else (host system folders).
    pub fn host_path(&self, sandbox: &str) -> Option<PathBuf> {
        let mut m = self.mapping(None);
        m.push(("/root".into(), self.home.clone()));
        m.push(("/tmp".into(), self.tmp.clone()));
        for (from, to) in &m {
            if sandbox == from {
                return Some(to.clone());
            }
            if let Some(rest) = sandbox.strip_prefix(&format!("{from}/")) {
                if rest.split('/').any(|c| c == "..") {
                    return None;
                }
                return Some(to.join(rest));
            }
        }
        None
    }

    pub fn create(&self) -> std::io::Result<()> {
        for d in [
            &self.app,
            &self.home,
            &self.tmp,
            &self.agent_logs,
            &self.verifier_logs,
            &self.artifacts,
        ] {
            std::fs::create_dir_all(d)?;
        }
        for (_, d) in &self.extra_roots {
            std::fs::create_dir_all(d)?;
        }
        for name in VAR_TRIAL {
            std::fs::create_dir_all(self.var.join(name))?;
        }
        // Like any /var/tmp: every user may write, only the owner removes.
        std::fs::set_permissions(
            self.var.join("tmp"),
            std::os::unix::fs::PermissionsExt::from_mode(0o1777),
        )?;
        for (_, host, file) in &self.system_mounts {
            if *file {
                if let Some(parent) = host.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(host)?;
            } else {
                std::fs::create_dir_all(host)?;
            }
        }
        Ok(())
    }

    /// Makes the way to each mount point of `b` free of links where it lies in something a
    /// trial writes and keeps between its phases: bwrap, running as the runner, follows links
    /// on the way to a mount point, and a trial could have renamed `/root/.cargo` (or put a
    /// link at `/etc/passwd` in its layer, before the phase that binds its user database
    /// there) for the next phase's bwrap to make folders or files on the host. In the
    /// trial's own folders (`/root`, `/tmp`, `/app`, `/logs/…`, its top-level folders) the
    /// folders on the way are made plain folders; in a layer (`work/overlay/…/upper`) a link,
    /// file or whiteout on the way is removed, so the host's folder below shows again.
    /// Nothing of the trial runs between its phases. False when that failed: the phase must
    /// not start.
    fn mount_points_are_safe(&self, b: &Bwrap, layers: &[(PathBuf, PathBuf)]) -> bool {
        let own = [
            (Path::new("/root"), &self.home),
            (Path::new("/tmp"), &self.tmp),
            (Path::new("/app"), &self.app),
            (Path::new("/logs/agent"), &self.agent_logs),
            (Path::new("/logs/verifier"), &self.verifier_logs),
            (Path::new("/logs/artifacts"), &self.artifacts),
        ];
        let kept: Vec<(&Path, &PathBuf, bool)> = own
            .into_iter()
            .map(|(s, h)| (s, h, false))
            .chain(
                self.extra_roots
                    .iter()
                    .map(|(s, h)| (Path::new(s), h, false)),
            )
            .chain(layers.iter().map(|(s, h)| (s.as_path(), h, true)))
            .collect();
        b.destinations().all(|at| {
            // The innermost such folder holding the mount point decides.
            let holder = kept
                .iter()
                .filter(|(inside, _, _)| at != *inside && at.starts_with(inside))
                .max_by_key(|(inside, _, _)| inside.as_os_str().len());
            let Some((inside, host, layer)) = holder else {
                return true;
            };
            let rel = at.strip_prefix(inside).unwrap_or(at);
            let cleared = if *layer {
                clear_way_in_layer(host, rel)
            } else {
                plain_folders_to(host, rel)
            };
            cleared.is_ok()
        })
    }

    /// Sandbox path → host path, longest prefix first.
    fn mapping(&self, build_context: Option<&Path>) -> Vec<(String, PathBuf)> {
        let mut m: Vec<(String, PathBuf)> = [
            ("/logs/agent", &self.agent_logs),
            ("/logs/verifier", &self.verifier_logs),
            ("/logs/artifacts", &self.artifacts),
            ("/solution", &self.solution),
            ("/tests", &self.tests),
            ("/setup", &self.setup),
            ("/app", &self.app),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
        if let Some(ctx) = build_context {
            m.push(("/environment".into(), ctx.to_path_buf()));
        }
        m.extend(
            VAR_TRIAL
                .iter()
                .map(|t| (format!("/var/{t}"), self.var.join(t))),
        );
        m.extend(self.extra_roots.iter().cloned());
        m.extend(
            self.system_mounts
                .iter()
                .map(|(sandbox, host, _)| (sandbox.clone(), host.clone())),
        );
        m
    }
}

/// A non-root user a phase runs as (Harbor's `[agent].user`, `[verifier].user`, Dockerfile
/// `USER`): its uid and gid inside the trial's user namespace, which maps it to the runner's
/// own uid outside, as it maps root in the other phases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// One phase's view of the trial.
#[derive(Debug, Clone)]
pub struct Phase<'a> {
    pub paths: &'a TrialPaths,
    /// Working dir inside the sandbox (`/app` or the Dockerfile's WORKDIR).
    pub workdir: &'a str,
    pub network: bool,
    pub tests: bool,
    pub solution: bool,
    pub setup: bool,
    pub build_context: Option<&'a Path>,
    pub env: BTreeMap<String, String>,
    /// The agent's model gateway: with `network` off, the phase's own network namespace holds
    /// the gateway's listener and nothing else.
    pub gateway: Option<&'a Gateway>,
    /// Who the phase runs as; `None` is root.
    pub user: Option<&'a TrialUser>,
    /// The host folder of a [`super::container::Container`]'s control files: its `in/` is
    /// mounted read-only and its `out/` writable under [`super::container::CONTROL`].
    pub control: Option<&'a Path>,
}

/// How trials are isolated on this machine.
#[derive(Debug, Clone)]
pub struct Isolation {
    pub kind: IsolationKind,
    /// Why bwrap is not used, when it is not.
    pub fallback_reason: Option<String>,
    /// Extra host paths visible read-only (the baton agent's binary, `--share`).
    shared: Vec<PathBuf>,
    /// The job's own folders (the task folders, `--out`, the runner's `TMPDIR`), where they
    /// really lie: empty in every phase where a system folder trials see holds them.
    kept_out: Vec<PathBuf>,
    /// Toolchain env (RUSTUP_HOME …) that keeps host tools working under a fresh HOME.
    tool_env: BTreeMap<String, String>,
    /// The trials' seccomp program as bwrap reads it (`--seccomp FD`).
    seccomp: Arc<Vec<u8>>,
    /// The bubblewrap binary the sandbox uses (a bare `bwrap` when none was found, so that
    /// the probe's spawn says why).
    bwrap: PathBuf,
    /// Unix sockets in the host's `/etc` and `/opt` when the job started, each covered in the
    /// trials ([`host_sockets`]).
    host_sockets: Arc<Vec<PathBuf>>,
    /// The container runtime, for `--env podman|docker`.
    pub runtime: Option<Arc<Runtime>>,
    /// Whether each trial gets writable layers over `/usr`, `/etc` and `/opt`
    /// ([`super::overlay`]); why not, when it does not.
    pub system_overlay: Result<(), String>,
}

/// Why bubblewrap cannot sandbox trials on this machine (found by a probe sandbox).
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    #[error("cannot create a probe dir: {0}")]
    ProbeDir(#[source] std::io::Error),
    #[error("cannot create probe folders: {0}")]
    ProbeFolders(#[source] std::io::Error),
    /// `bwrap` cannot be started (usually: not installed).
    #[error(
        "bubblewrap (bwrap) is not usable: {0}; install it with `apt-get install -y bubblewrap`"
    )]
    BwrapMissing(#[source] std::io::Error),
    /// `bwrap` runs but cannot create the namespaces (a container, a locked-down kernel).
    #[error("bwrap cannot create a sandbox here: {stderr}")]
    SandboxRefused { stderr: String },
    /// `bwrap` creates namespaces here, but a trial's sandbox could not be built: never a
    /// reason to run trials unsandboxed.
    #[error(
        "a trial's sandbox could not be built, though bubblewrap works here: {stderr}; \
         trials are not run unsandboxed for this (--isolation none does that knowingly)"
    )]
    TrialSandboxFailed { stderr: String },
    /// The seccomp program for trials could not be compiled.
    #[error("cannot build the trials' seccomp filter: {0}")]
    Seccomp(String),
    /// `--env podman|docker` and that runtime cannot be used here.
    #[error("--env {kind}: {why}")]
    Runtime { kind: &'static str, why: String },
}

/// Top-level host folders visible read-only in the sandbox. Not `/home`, `/root`, `/run`,
/// `/mnt`, `/media`, `/srv`, `/boot`: users' files, service sockets and mounted data. `/var`
/// is rebuilt from a few of its folders ([`bind_var`]).
const SYSTEM_DIRS: &[&str] = &["usr", "etc", "opt", "sys"];

/// What of the host's `/var` a trial sees, read-only: the package databases and caches that
/// `dpkg`, `apt` and Debian's Python and Java read. The rest (`/var/lib/postgresql`, mysql's
/// socket, lxd's, `/var/tmp`, `/var/spool`) is the host's services' and users', as in an
/// image where none of it exists.
const VAR_KEPT: &[&str] = &[
    "lib/dpkg",
    "lib/apt",
    "lib/python",
    "lib/ucf",
    "lib/pam",
    "lib/misc",
    "lib/dbus",
    "lib/ca-certificates-java",
    "lib/sgml-base",
    "lib/xml-core",
    "lib/dictionaries-common",
    "lib/texmf",
    "lib/shells.state",
    "cache/apt",
    "cache/debconf",
    "cache/fontconfig",
    "cache/ldconfig",
];

/// Folders of `/var` that hold only the [`VAR_KEPT`] entries of the host, read-only.
const VAR_READ_ONLY: &[&str] = &["lib", "cache"];

/// Folders of `/var` that are the trial's own, writable and kept from the setup to the
/// verifier (`RUN mkdir /var/log/app`, a server's `>/var/log/server.log`).
pub const VAR_TRIAL: &[&str] = &["log", "tmp", "mail", "spool", "local", "opt", "backups"];

/// How many entries of the host's `/etc` and `/opt` are looked through for unix sockets.
const SOCKET_SCAN_LIMIT: usize = 200_000;
const SYSTEM_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Names of credential files and folders that are covered wherever they sit in a toolchain
/// folder bound into the trial.
const CREDENTIAL_NAMES: &[&str] = &[
    "credentials",
    "credentials.toml",
    ".credentials.toml",
    ".pypirc",
    ".npmrc",
    ".netrc",
    ".git-credentials",
    ".ssh",
    ".aws",
    ".docker",
    ".gnupg",
    ".config",
];

/// The fd number bwrap reads the seccomp program from.
const SECCOMP_FD: i32 = 200;

/// The trials' seccomp program, serialised as the `struct sock_filter` array bwrap expects.
fn trial_seccomp() -> Result<Vec<u8>, IsolationError> {
    // The commands' filter (mount API, clock, names, kernel log, devices, namespaces…);
    // sockets stay allowed: the network namespace decides what a socket can reach.
    let program = crate::sandbox::syscall_filter::build_filter(true)
        .map_err(|e| IsolationError::Seccomp(e.to_string()))?;
    let mut bytes = Vec::with_capacity(program.len() * 8);
    for insn in &program {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    Ok(bytes)
}

impl Isolation {
    /// Decides between bwrap and plain folders, probing bwrap with a real sandbox.
    /// `Err` only for `--isolation bwrap` when bwrap cannot work here.
    pub fn detect(
        choice: IsolationChoice,
        shared: Vec<PathBuf>,
    ) -> Result<Isolation, IsolationError> {
        let mut iso = Isolation {
            kind: IsolationKind::Bwrap,
            fallback_reason: None,
            shared: shared.into_iter().filter(|p| p.exists()).collect(),
            kept_out: Vec::new(),
            tool_env: toolchain_env(),
            seccomp: Arc::new(trial_seccomp()?),
            bwrap: bwrap::bwrap_path().unwrap_or_else(|_| PathBuf::from("bwrap")),
            host_sockets: Arc::new(Vec::new()),
            runtime: None,
            system_overlay: Err("not probed".into()),
        };
        let runtime = match choice {
            IsolationChoice::Podman => Some((RuntimeKind::Podman, IsolationKind::Podman)),
            IsolationChoice::Docker => Some((RuntimeKind::Docker, IsolationKind::Docker)),
            _ => None,
        };
        if let Some((runtime, kind)) = runtime {
            let found = Runtime::find(runtime).map_err(|why| IsolationError::Runtime {
                kind: runtime.name(),
                why,
            })?;
            iso.kind = kind;
            iso.runtime = Some(Arc::new(found));
            return Ok(iso);
        }
        if choice == IsolationChoice::None {
            iso.kind = IsolationKind::Plain;
            iso.fallback_reason = Some("--isolation none was given".into());
            return Ok(iso);
        }
        // After the probe: a socket that goes away in between must not make bwrap fail there
        // (it cannot make the mount point in a read-only folder).
        match iso.probe() {
            Ok(()) => {
                iso.system_overlay = iso.probe_overlay();
                iso.host_sockets = Arc::new(host_sockets());
                Ok(iso)
            }
            Err(reason)
                if choice == IsolationChoice::Auto
                    && !matches!(reason, IsolationError::TrialSandboxFailed { .. }) =>
            {
                iso.kind = IsolationKind::Plain;
                iso.fallback_reason = Some(reason.to_string());
                Ok(iso)
            }
            Err(reason) => Err(reason),
        }
    }

    /// Whether a phase that failed never started: bwrap could not make the mount point of the
    /// cover of a host socket that went away between the phase's check and bwrap's mount (a
    /// read-only folder takes no new file). `output` is what the phase printed; running it
    /// again is safe, as nothing of it ran, and its command checks the sockets afresh.
    pub fn lost_a_socket_cover(&self, output: &[u8]) -> bool {
        let text = String::from_utf8_lossy(&output[..output.len().min(4096)]);
        // bwrap's setup error names the cover's path (inside its new root) in words that
        // depend on where the mount failed; the socket, or a folder on the way to it, is gone.
        text.trim_start().starts_with("bwrap: ")
            && self.host_sockets.iter().any(|s| {
                text.contains(&*s.to_string_lossy()) && std::fs::symlink_metadata(s).is_err()
            })
    }

    fn probe(&self) -> Result<(), IsolationError> {
        let dir = tempfile::tempdir().map_err(IsolationError::ProbeDir)?;
        let paths = TrialPaths::new(dir.path());
        paths.create().map_err(IsolationError::ProbeFolders)?;
        let out = self.probe_run(&paths, "touch /app/.probe")?;
        if !out.status.success() || !paths.app.join(".probe").exists() {
            let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
            // Only a bwrap that cannot make namespaces at all lets `auto` fall back (red team
            // round 32: a cover a variable placed through a link failed the trial's command
            // line, and every trial ran unsandboxed).
            return Err(match crate::sandbox::bwrap::check_namespaces() {
                Ok(()) => IsolationError::TrialSandboxFailed { stderr },
                Err(_) => IsolationError::SandboxRefused { stderr },
            });
        }
        Ok(())
    }

    /// Whether trials can have writable layers over the host's system folders: the runner is
    /// root and a probe sandbox writes into `/opt` (or `/usr`) through one.
    fn probe_overlay(&mut self) -> Result<(), String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("the runner is not root".into());
        }
        self.system_overlay = Ok(());
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let paths = TrialPaths::new(dir.path());
        paths.create().map_err(|e| e.to_string())?;
        let name = super::overlay::OVERLAID
            .iter()
            .find(|d| Path::new("/").join(d).is_dir())
            .ok_or("the host has no /usr, /etc or /opt")?;
        let out = self
            .probe_run(&paths, &format!("touch /{name}/.baton-probe"))
            .map_err(|e| e.to_string())?;
        let written =
            super::overlay::SystemOverlay::upper(&paths.overlay, &Path::new("/").join(name))
                .join(".baton-probe");
        if out.status.success() && written.is_file() {
            Ok(())
        } else {
            Err(format!(
                "an overlay over /{name} could not be made: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn probe_run(
        &self,
        paths: &TrialPaths,
        script: &str,
    ) -> Result<std::process::Output, IsolationError> {
        let phase = Phase {
            paths,
            workdir: "/app",
            network: false,
            tests: false,
            solution: false,
            setup: false,
            build_context: None,
            env: BTreeMap::new(),
            gateway: None,
            user: None,
            control: None,
        };
        self.command(&phase, "sh", &["-c".into(), script.into()])
            .stdin(Stdio::null())
            .output()
            .map_err(IsolationError::BwrapMissing)
    }

    /// The command that runs `program args` for `phase`.
    pub fn command(&self, phase: &Phase, program: &str, args: &[String]) -> Command {
        match self.kind {
            IsolationKind::Bwrap => self.bwrap_command(phase, program, args),
            IsolationKind::Plain => self.plain_command(phase, program, args),
            // Every phase runs in the trial's container (`Container::start_in`); nothing is
            // ever run on the host in its place. A program that does not exist says so.
            IsolationKind::Podman | IsolationKind::Docker => {
                Command::new("/nonexistent/baton-container-trials-run-every-phase-in-the-container")
            }
        }
    }

    /// Folders of the job no trial may read where they lie in a system folder trials see
    /// (red team round 32: with the tasks in `/opt`, a model read the hidden tests and the
    /// oracle's solution at their host paths): the task folders, the job's `--out` folder,
    /// the runner's `TMPDIR`. Each is an empty folder in every phase; what a phase needs of
    /// them is bound in from the host.
    pub fn keep_out(&mut self, folders: impl IntoIterator<Item = PathBuf>) {
        for folder in folders.into_iter().filter_map(|f| f.canonicalize().ok()) {
            if !self.kept_out.contains(&folder) {
                self.kept_out.push(folder);
            }
        }
    }

    /// The host paths shared read-only with every trial (the baton agent's binary, `--share`,
    /// the network variables' files).
    pub fn shared(&self) -> &[PathBuf] {
        &self.shared
    }

    fn base_env(&self, home: &str, tmp: &str) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert(
            "PATH".into(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        );
        env.insert("HOME".into(), home.into());
        env.insert("TMPDIR".into(), tmp.into());
        env.insert("LANG".into(), "C.UTF-8".into());
        env.insert("TERM".into(), "dumb".into());
        env.insert("USER".into(), "root".into());
        // Only uid 0 exists in the trial's user namespace: tar running as root would try to
        // give extracted files their archived owners and fail on every one.
        env.insert("TAR_OPTIONS".into(), "--no-same-owner".into());
        env.extend(self.tool_env.clone());
        env
    }

    /// The bwrap command of one phase, built with the sandbox's [`Bwrap`] (the same namespaces
    /// and hardening as every sandboxed command: [`Bwrap::isolated`]). Beyond the filesystem
    /// layout (system folders read-only, the trial's folders writable, toolchains read-only
    /// without their credentials, `/run` and the users' homes absent), it has:
    /// - a user namespace mapping uid/gid 0 inside to the caller outside (`--unshare-user
    ///   --uid 0 --gid 0`): tasks run as root but hold no capability over the host, and
    ///   `--disable-userns` keeps them from making another user namespace;
    /// - `--cap-drop ALL`, so even in its own namespaces root cannot mount, set the clock or
    ///   hostname, make device nodes or change the network;
    /// - the seccomp program of [`trial_seccomp`] (`--seccomp FD`, after bwrap's own setup);
    /// - new PID, IPC, UTS and cgroup namespaces, and a network namespace of its own: empty
    ///   (`--unshare-net`), holding only the model gateway's listener (created before bwrap
    ///   runs, see [`super::gateway::NetnsSetup`]), or the host's when the task allows the
    ///   internet;
    /// - `--die-with-parent`, `--new-session`, a cleared environment (bwrap's own too: its
    ///   pid 1 is visible in the trial) and no inherited descriptor beyond stdio.
    fn bwrap_command(&self, phase: &Phase, program: &str, args: &[String]) -> Command {
        let p = phase.paths;
        let netns = match phase.gateway {
            Some(g) if !phase.network => g.netns_setup(),
            _ => None,
        };
        // With the gateway, the network namespace is made before bwrap runs (see
        // `NetnsSetup`): bwrap must not replace it with an empty one.
        let mut b = Bwrap::isolated(phase.network || netns.is_some());
        match phase.user {
            Some(u) => b.user(u.uid, u.gid),
            None => b.user(0, 0),
        };
        b.unshare_cgroup();
        let toolchains = self.home_toolchains();
        let overlay = self.system_overlay.is_ok().then(|| {
            let system = super::overlay::OVERLAID
                .iter()
                .map(|d| Path::new("/").join(d));
            let folders: Vec<PathBuf> = system.chain(toolchains.iter().cloned()).collect();
            super::overlay::SystemOverlay::prepare(&p.overlay, &folders)
        });
        let overlaid = |host: &Path| match &overlay {
            Some(Ok(o)) => o.merged(host).map(Path::to_path_buf),
            _ => None,
        };
        for dir in SYSTEM_DIRS {
            let host = Path::new("/").join(dir);
            if !host.is_dir() {
                continue;
            }
            if let Some(merged) = overlaid(&host) {
                b.bind(&merged, &host);
                // bwrap follows a link on the way to a mount point, and the trial writes this
                // folder. Its mounts are the same in every phase, so a phase cannot remove or
                // rename one (it is a mount point there) nor a folder above it (the host's
                // layer's, which `redirect_dir=off` keeps from being renamed) to leave a link
                // in its place for the next phase's bwrap.
                for (sandbox, ours, _) in &p.system_mounts {
                    if Path::new(sandbox).starts_with(&host) {
                        b.bind(ours, Path::new(sandbox));
                    }
                }
            } else {
                bind_system_dir(&mut b, &host, &p.system_mounts);
            }
        }
        bind_var(&mut b, &p.system_mounts, &p.var);
        // The user's home and XDG folders where a visible system folder holds them
        // (`/opt/alice`, round 30; `XDG_CONFIG_HOME=/opt/x`, round 31): their files are not the
        // trial's (the toolchains in the home are mounted back below); and the credentials the
        // shell sandbox hides, wherever a variable moved them into such a folder
        // (`CARGO_HOME=/usr/local/cargo`'s `credentials.toml`).
        let in_system = |p: &Path| {
            SYSTEM_DIRS
                .iter()
                .any(|d| p.starts_with(Path::new("/").join(d)))
        };
        // Other people's homes there too (round 32: `/opt/alice`, one linked to a data
        // disk, the runner's own passwd home while `$HOME` points elsewhere), the shell
        // sandbox's one list.
        // Each is covered where it really lies: bwrap cannot make a mount point through a
        // link (round 32: `CARGO_HOME` named through one failed every trial's sandbox), and
        // a home entry linked into `/opt` (`~/.ssh -> /opt/dot/ssh`) is read there.
        let own_home = dirs::home_dir().and_then(|h| h.canonicalize().ok());
        let mut emptied: Vec<PathBuf> = host_private_folders()
            .into_iter()
            .chain(crate::sandbox::visibility::account_homes(
                own_home.as_deref(),
            ))
            .chain(self.kept_out.iter().cloned())
            .filter_map(|p| p.canonicalize().ok())
            .filter(|p| {
                in_system(p) && p.is_dir() && crate::sandbox::visibility::reachable_in_sandbox(p)
            })
            .collect();
        // And where a bind mount shows one elsewhere (a home bound from `/opt/data/me`).
        let aliases = crate::sandbox::visibility::bind_aliases(&emptied);
        emptied.extend(
            aliases
                .into_iter()
                .filter(|p| in_system(p) && crate::sandbox::visibility::reachable_in_sandbox(p)),
        );
        emptied.sort();
        emptied.dedup();
        for private in &emptied {
            b.tmpfs(private);
        }
        // Looked up once per phase: the system folders and every toolchain are covered from it.
        let secrets = dirs::home_dir()
            .map(|h| crate::sandbox::visibility::home_secrets(&h))
            .unwrap_or_default();
        let mut real_secrets: Vec<PathBuf> = secrets
            .iter()
            .filter_map(|s| s.canonicalize().ok())
            .collect();
        real_secrets.sort();
        real_secrets.dedup();
        for secret in real_secrets
            .iter()
            .filter(|s| in_system(s) && !emptied.iter().any(|e| s.starts_with(e)))
        {
            cover(&mut b, secret);
        }
        // A service's socket in a visible system folder would be a way out of the sandbox
        // (a root daemon runs what it is sent): each is covered by an empty file.
        for socket in self.host_sockets.iter() {
            // Gone since the job started: nothing to cover, and no mount point for bwrap.
            let still = std::fs::symlink_metadata(socket)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()));
            if still && crate::sandbox::visibility::reachable_in_sandbox(socket) {
                b.hide_file(socket);
            }
        }
        // `/run` holds the host's service sockets: the trial gets an empty one of its own
        // (and `/var/run`, a link to it, with it).
        b.tmpfs(Path::new("/run"));
        for link in SYSTEM_LINKS {
            let host = Path::new("/").join(link);
            if let Ok(target) = std::fs::read_link(&host) {
                b.symlink(&target, &host);
            } else if host.is_dir() {
                b.ro_bind(&host, &host);
            }
        }
        let trial_provides = |f: &Path| p.system_mounts.iter().any(|(m, _, _)| Path::new(m) == f);
        // The host's own secrets (password hashes, sudo rules, private keys): a trial run
        // by root would read them. The shell sandbox's one list.
        for secret in crate::sandbox::visibility::host_secrets() {
            if !trial_provides(&secret) {
                cover(&mut b, &secret);
            }
        }
        // The trial's users (when a phase has one) are in its own copy of the user database.
        for name in ["passwd", "group"] {
            let ours = p.identity.join(name);
            if ours.is_file() {
                b.ro_bind(&ours, &Path::new("/etc").join(name));
            }
        }
        if phase.network {
            // DNS often lives under /run (systemd-resolved); keep only that file.
            if let Ok(resolv) = std::fs::canonicalize("/etc/resolv.conf")
                && resolv.starts_with("/run")
            {
                b.ro_bind(&resolv, &resolv);
            }
        }
        b.dev(Path::new("/dev")).proc(Path::new("/proc"));
        b.bind(&p.tmp, Path::new("/tmp"))
            .bind(&p.home, Path::new("/root"));
        for host in toolchains.iter().chain(&self.shared) {
            // A toolchain is layered as the system folders are: `pip install` into a pyenv
            // Python, `cargo install` into ~/.cargo/bin.
            if let Some(merged) = overlaid(host) {
                b.bind(&merged, host);
            } else {
                b.ro_bind(host, host);
            }
            hide_credentials(&mut b, host, &secrets);
        }
        for (sandbox, host) in &p.extra_roots {
            b.bind(host, Path::new(sandbox));
        }
        b.bind(&p.app, Path::new("/app"))
            .bind(&p.agent_logs, Path::new("/logs/agent"))
            .bind(&p.verifier_logs, Path::new("/logs/verifier"))
            .bind(&p.artifacts, Path::new("/logs/artifacts"));
        if phase.tests {
            b.bind(&p.tests, Path::new("/tests"));
        }
        if phase.solution {
            b.bind(&p.solution, Path::new("/solution"));
        }
        if phase.setup {
            b.ro_bind(&p.setup, Path::new("/setup"));
        }
        if let Some(ctx) = phase.build_context {
            b.ro_bind(ctx, Path::new("/environment"));
        }
        if let Some(control) = phase.control {
            let at = Path::new(super::container::CONTROL);
            b.ro_bind(&control.join("in"), &at.join("in"))
                .bind(&control.join("out"), &at.join("out"));
        }
        let uppers = match &overlay {
            Some(Ok(o)) => o.uppers(),
            _ => Vec::new(),
        };
        let safe = p.mount_points_are_safe(&b, &uppers);
        if !safe {
            tracing::warn!(
                "{}: a link the trial left on the way to a mount point could not be removed: the phase does not start",
                p.root.display()
            );
        }
        let seccomp = seccomp_file(&self.seccomp);
        if seccomp.is_some() {
            b.seccomp_fd(SECCOMP_FD);
        }
        b.hostname("trial")
            .chdir(Path::new(phase.workdir))
            .clearenv();
        let env = self.sandbox_env(phase.user, &phase.env);
        for (k, v) in &env {
            b.setenv(k, v);
        }
        let mut cmd = Command::new(&self.bwrap);
        cmd.args(b.args()).arg("--").arg(program).args(args);
        // bwrap's own processes (pid 1 of the trial among them) keep the environment they were
        // started with, readable in the trial's `/proc/1/environ`: give them nothing.
        cmd.env_clear();
        // SAFETY: the closure only makes syscalls (dup2, and the namespace setup, which is
        // async-signal-safe by construction) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                match &seccomp {
                    Some(f) => {
                        if libc::dup2(f.as_raw_fd(), SECCOMP_FD) < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    // No program file: refuse to start rather than run unfiltered.
                    None => return Err(std::io::Error::from_raw_os_error(libc::ENOMEM)),
                }
                if !safe {
                    return Err(std::io::Error::from_raw_os_error(libc::EPERM));
                }
                match &overlay {
                    Some(Ok(layers)) => layers.mount()?,
                    // The trial would see read-only folders it was promised writable.
                    Some(Err(e)) => {
                        return Err(std::io::Error::from_raw_os_error(
                            e.raw_os_error().unwrap_or(libc::EIO),
                        ));
                    }
                    None => {}
                }
                if let Some(setup) = &netns {
                    setup.run()?;
                }
                close_inherited_fds();
                Ok(())
            });
        }
        cmd
    }

    /// The environment a command of a bwrap phase gets: the base (PATH, HOME, toolchains…),
    /// the user's names, then `env`.
    pub fn sandbox_env(
        &self,
        user: Option<&TrialUser>,
        env: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        // A container's jobs inherit its own environment (the image's ENV) under `env`.
        if self.kind.is_runtime() {
            return env.clone();
        }
        let mut all = self.base_env("/root", "/tmp");
        if let Some(u) = user {
            all.insert("USER".into(), u.name.clone());
            all.insert("LOGNAME".into(), u.name.clone());
        }
        all.extend(env.clone());
        all
    }

    fn plain_command(&self, phase: &Phase, program: &str, args: &[String]) -> Command {
        let p = phase.paths;
        let mut cmd = Command::new(program);
        cmd.args(args.iter().map(|a| self.rewrite(p, phase.build_context, a)));
        cmd.current_dir(self.rewrite(p, phase.build_context, phase.workdir));
        cmd.env_clear();
        let mut env = self.base_env(&p.home.to_string_lossy(), &p.tmp.to_string_lossy());
        env.extend(
            phase
                .env
                .iter()
                .map(|(k, v)| (k.clone(), self.rewrite(p, phase.build_context, v))),
        );
        cmd.envs(env);
        cmd
    }

    /// In plain mode, sandbox paths in a script or instruction point at the trial's folders.
    pub fn rewrite(&self, paths: &TrialPaths, build_context: Option<&Path>, text: &str) -> String {
        if self.kind != IsolationKind::Plain {
            return text.to_string();
        }
        rewrite_paths(&paths.mapping(build_context), text)
    }

    /// Folders under the host HOME that the trial's tools need, read-only: the PATH entries
    /// there (`~/.cargo/bin`, `~/.pyenv/shims` …) that lie in a toolchain folder the shell
    /// sandbox shows too ([`crate::sandbox::visibility::HOME_TOOLCHAINS`]), the toolchains
    /// they run (`~/.rustup`, `~/.pyenv`) and cargo's download caches; never the rest of
    /// `~/.cargo` (credentials, config with tokens) nor any other dotfile. Each entry is
    /// judged where it really is: `~/.cargo/bin/../..` is the home, not a toolchain.
    fn home_toolchains(&self) -> Vec<PathBuf> {
        let Some(home) = dirs::home_dir().filter(|h| h != Path::new("/")) else {
            return Vec::new();
        };
        let Ok(real_home) = home.canonicalize() else {
            return Vec::new();
        };
        let allowed: Vec<PathBuf> = crate::sandbox::visibility::HOME_TOOLCHAINS
            .iter()
            .map(|t| real_home.join(t))
            .collect();
        // Mounted where PATH names them (the home may be a link), judged where they lead.
        let path_entries: Vec<PathBuf> = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .map(PathBuf::from)
            .filter(|e| {
                e.starts_with(&home)
                    && e.components()
                        .all(|c| matches!(c, Component::Normal(_) | Component::RootDir))
            })
            .filter(|e| {
                std::fs::canonicalize(e)
                    .is_ok_and(|real| allowed.iter().any(|a| real.starts_with(a)))
            })
            .collect();
        let mut found: Vec<PathBuf> = Vec::new();
        for toolchain in [".rustup", ".pyenv"] {
            let root = home.join(toolchain);
            let on_path = path_entries.iter().any(|p| p.starts_with(&root));
            if on_path || toolchain == ".rustup" {
                found.push(root);
            }
        }
        if path_entries
            .iter()
            .any(|p| p.starts_with(home.join(".cargo")))
        {
            for cache in ["registry", "git"] {
                found.push(home.join(".cargo").join(cache));
            }
        }
        for entry in path_entries {
            if !found.iter().any(|f| entry.starts_with(f)) {
                found.push(entry);
            }
        }
        found.retain(|p| p.is_dir());
        found.sort();
        found.dedup();
        found
    }
}

/// Makes every folder on the way to `rel` beneath `root` a plain folder (a link or a file in
/// the way is removed, nothing is followed), and removes a link at `rel` itself.
fn plain_folders_to(root: &Path, rel: &Path) -> std::io::Result<()> {
    let mut dir = crate::untrusted_fs::Dir::open(root)?;
    let parts: Vec<_> = rel.components().collect();
    let Some((last, folders)) = parts.split_last() else {
        return Ok(());
    };
    for part in folders {
        let name = Path::new(part.as_os_str());
        match dir.lstat(name)? {
            Some(m) if m.is_dir() => {}
            Some(_) => dir.remove_file(name)?,
            None => {}
        }
        dir = dir.dir(name, Some(0o755))?;
    }
    let name = Path::new(last.as_os_str());
    if dir.lstat(name)?.is_some_and(|m| m.is_symlink()) {
        dir.remove_file(name)?;
    }
    Ok(())
}

/// Removes from a layer's upper folder `upper` whatever stands on the way to `rel` that is not
/// a folder (a link, a file, a whiteout), and a link at `rel` itself: the host's folder below
/// shows there again. A part of the way the layer does not hold is the host's.
fn clear_way_in_layer(upper: &Path, rel: &Path) -> std::io::Result<()> {
    let mut dir = crate::untrusted_fs::Dir::open(upper)?;
    let parts: Vec<_> = rel.components().collect();
    let Some((last, folders)) = parts.split_last() else {
        return Ok(());
    };
    for part in folders {
        let name = Path::new(part.as_os_str());
        match dir.lstat(name)? {
            Some(m) if m.is_dir() => dir = dir.dir(name, None)?,
            Some(_) => return dir.remove_file(name),
            None => return Ok(()),
        }
    }
    let name = Path::new(last.as_os_str());
    if dir.lstat(name)?.is_some_and(|m| m.is_symlink()) {
        dir.remove_file(name)?;
    }
    Ok(())
}

/// A host system folder, read-only, with the trial's own folders and files mounted where
/// the environment put them. A folder that holds such a mount is rebuilt entry by entry: a
/// read-only tmpfs whose entries are the host's (each bound read-only, links as links) and the
/// trial's mounts; bwrap cannot create a mount point inside a read-only bind.
fn bind_system_dir(b: &mut Bwrap, dir: &Path, mounts: &[(String, PathBuf, bool)]) {
    let below = |d: &Path| {
        mounts
            .iter()
            .any(|(m, _, _)| Path::new(m).starts_with(d) && Path::new(m) != d)
    };
    if !below(dir) {
        b.ro_bind(dir, dir);
        return;
    }
    b.tmpfs(dir);
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    entries.sort();
    for path in entries {
        if mounts.iter().any(|(m, _, _)| Path::new(m) == path) {
            continue;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(&path) {
                    b.symlink(&target, &path);
                }
            }
            Ok(m) if m.is_dir() && below(&path) => bind_system_dir(b, &path, mounts),
            Ok(_) => {
                b.ro_bind(&path, &path);
            }
            Err(_) => {}
        }
    }
    for (sandbox, host, _) in mounts {
        if Path::new(sandbox).parent() == Some(dir) {
            b.bind(host, Path::new(sandbox));
        }
    }
    b.remount_ro(dir);
}

/// The trial's `/var`: a read-only tmpfs with the host's links (`run`, `lock`), the
/// [`VAR_KEPT`] folders of the host read-only, the trial's own writable [`VAR_TRIAL`] folders,
/// and the trial's mounts the environment put elsewhere under `/var` (`/var/www`). No mount
/// lands inside a folder the trial can write: bwrap would follow a link planted there.
fn bind_var(b: &mut Bwrap, mounts: &[(String, PathBuf, bool)], trial_var: &Path) {
    let var = Path::new("/var");
    b.tmpfs(var);
    if let Ok(rd) = std::fs::read_dir(var) {
        let mut links: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()))
            .collect();
        links.sort();
        for link in links {
            if let Ok(target) = std::fs::read_link(&link) {
                b.symlink(&target, &link);
            }
        }
    }
    for name in VAR_READ_ONLY {
        b.tmpfs(&var.join(name));
    }
    let mut kept = Vec::new();
    for name in VAR_KEPT {
        let path = var.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(&path) {
                    b.symlink(&target, &path);
                }
            }
            Ok(m) if m.is_dir() => {
                bind_system_dir(b, &path, mounts);
                kept.push(path);
            }
            Ok(m) if m.is_file() => {
                b.ro_bind(&path, &path);
            }
            _ => {}
        }
    }
    for name in VAR_TRIAL {
        b.bind(&trial_var.join(name), &var.join(name));
    }
    for (sandbox, host, _) in mounts {
        let at = Path::new(sandbox);
        // Those inside a kept folder came with it ([`bind_system_dir`]).
        if at.starts_with(var) && !kept.iter().any(|k| at.starts_with(k)) {
            b.bind(host, at);
        }
    }
    for name in VAR_READ_ONLY {
        b.remount_ro(&var.join(name));
    }
    b.remount_ro(var);
}

/// The unix sockets in the host's `/etc` and `/opt` (folders trials see), looked for once a
/// job through at most [`SOCKET_SCAN_LIMIT`] entries, links not followed. `/usr` holds none
/// (package files only), `/run` and `/var` are not the host's in a trial.
fn host_sockets() -> Vec<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let mut found = Vec::new();
    let mut seen = 0usize;
    let mut stack: Vec<PathBuf> = vec![PathBuf::from("/etc"), PathBuf::from("/opt")];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            seen += 1;
            if seen > SOCKET_SCAN_LIMIT {
                return found;
            }
            match e.file_type() {
                Ok(t) if t.is_socket() => found.push(e.path()),
                Ok(t) if t.is_dir() => stack.push(e.path()),
                _ => {}
            }
        }
    }
    found.sort();
    found
}

/// The user's home and XDG config, data and state folders, as named and where they really
/// lie: what a trial must not see of the user.
fn host_private_folders() -> Vec<PathBuf> {
    let named = dirs::home_dir().into_iter().chain(
        [
            "XDG_CONFIG_HOME",
            "XDG_DATA_HOME",
            "XDG_STATE_HOME",
            "XDG_CACHE_HOME",
        ]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from)),
    );
    let mut out: Vec<PathBuf> = Vec::new();
    for dir in named.filter(|d| d.is_absolute() && d.parent().is_some()) {
        let real = dir.canonicalize().ok().filter(|r| r.parent().is_some());
        for d in std::iter::once(dir).chain(real) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}

/// Covers credential files and folders in a folder bound into the trial: the home's
/// credentials the shell sandbox hides (one list: `~/.pyenv/versions/*/pip.conf`,
/// `~/.cargo/credentials.toml` and the copies editors leave beside them…) that lie in it, and
/// [`CREDENTIAL_NAMES`] at its top.
fn hide_credentials(b: &mut Bwrap, dir: &Path, home_secrets: &[PathBuf]) {
    let inside = home_secrets.iter().filter(|s| s.starts_with(dir)).cloned();
    let at_top = CREDENTIAL_NAMES.iter().map(|name| dir.join(name));
    for path in inside.chain(at_top) {
        cover(b, &path);
    }
}

/// Covers `path` when it is there: a folder with an empty tmpfs, anything else with an empty
/// file. Not `Bwrap::hide`: a link is covered as a file, never followed to its target.
fn cover(b: &mut Bwrap, path: &Path) {
    if !crate::sandbox::visibility::reachable_in_sandbox(path) {
        return;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            b.tmpfs(path);
        }
        Ok(_) => {
            b.hide_file(path);
        }
        Err(_) => {}
    }
}

/// Marks every descriptor but stdio and the seccomp program close-on-exec, so that nothing
/// the runner inherited (`baton eval … 7>>file`) reaches the trial. Only syscalls: it runs
/// between fork and exec.
fn close_inherited_fds() {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    for (first, last) in [
        (3, SECCOMP_FD as u32 - 1),
        (SECCOMP_FD as u32 + 1, u32::MAX),
    ] {
        // SAFETY: close_range only changes descriptor flags.
        let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, CLOSE_RANGE_CLOEXEC) };
        if r != 0 {
            // Kernels before 5.11: the descriptors a process usually has.
            for fd in first..last.min(4096) {
                // SAFETY: only borrowed for the call; a number that is not open gives EBADF.
                let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd as i32) };
                let _ = rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC);
            }
        }
    }
}

/// An anonymous file holding the seccomp program, for one bwrap to read.
fn seccomp_file(program: &[u8]) -> Option<std::fs::File> {
    let mut f = tempfile::tempfile().ok()?;
    f.write_all(program).ok()?;
    f.rewind().ok()?;
    Some(f)
}

fn toolchain_env() -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for key in [
        "RUSTUP_HOME",
        "CARGO_HOME",
        "PYENV_ROOT",
        "PYENV_VERSION",
        "RUSTUP_TOOLCHAIN",
    ] {
        if let Ok(v) = std::env::var(key) {
            env.insert(key.to_string(), v);
        }
    }
    if let Some(home) = dirs::home_dir() {
        // Under the sandbox HOME is /root; keep rustup and pyenv looking at the host's copies.
        for (key, dir) in [
            ("RUSTUP_HOME", ".rustup"),
            ("CARGO_HOME", ".cargo"),
            ("PYENV_ROOT", ".pyenv"),
        ] {
            let path = home.join(dir);
            if !env.contains_key(key) && path.is_dir() {
                env.insert(key.to_string(), path.to_string_lossy().into_owned());
            }
        }
    }
    env
}

/// Sandbox paths that [`rewrite_paths`] knows, longest first where one is a prefix of another.
const SANDBOX_PATHS: &[&str] = &[
    "/logs/agent",
    "/logs/verifier",
    "/logs/artifacts",
    "/solution",
    "/tests",
    "/setup",
    "/app",
    "/environment",
];

#[allow(
    clippy::expect_used,
    reason = "every alternative is escaped: the pattern is fixed"
)]
static SANDBOX_PATH_RE: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    let alternatives: Vec<String> = SANDBOX_PATHS.iter().map(|p| regex::escape(p)).collect();
    regex::Regex::new(&format!(r"(^|[^\w./~-])({})\b", alternatives.join("|")))
        .expect("escaped alternatives")
});

/// Replaces sandbox paths (`/app`, `/logs/verifier`, an extra root such as `/workspace` …)
/// that start a path in `text`; paths not in `mapping` are left alone.
pub fn rewrite_paths<S: AsRef<str>>(mapping: &[(S, PathBuf)], text: &str) -> String {
    let extra: Vec<&str> = mapping
        .iter()
        .map(|(k, _)| k.as_ref())
        .filter(|k| !SANDBOX_PATHS.contains(k))
        .collect();
    let custom;
    let re: &regex::Regex = if extra.is_empty() {
        &SANDBOX_PATH_RE
    } else {
        let mut all: Vec<&str> = SANDBOX_PATHS.iter().copied().chain(extra).collect();
        all.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let alternatives: Vec<String> = all.iter().map(|p| regex::escape(p)).collect();
        match regex::Regex::new(&format!(r"(^|[^\w./~-])({})\b", alternatives.join("|"))) {
            Ok(r) => {
                custom = r;
                &custom
            }
            Err(_) => &SANDBOX_PATH_RE,
        }
    };
    re.replace_all(text, |c: &regex::Captures| {
        let to = mapping
            .iter()
            .find(|(from, _)| from.as_ref() == &c[2])
            .map(|(_, to)| to.to_string_lossy().into_owned())
            .unwrap_or_else(|| c[2].to_string());
        format!("{}{}", &c[1], to)
    })
    .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_only_whole_sandbox_paths() {
        let m = vec![
            ("/logs/verifier", PathBuf::from("/t/v")),
            ("/app", PathBuf::from("/t/app")),
        ];
        let out = rewrite_paths(
            &m,
            "cd /app && echo 1 > /logs/verifier/reward.txt; ls /apple x/app \"/app/a\"",
        );
        assert_eq!(
            out,
            "cd /t/app && echo 1 > /t/v/reward.txt; ls /apple x/app \"/t/app/a\""
        );
    }
}
