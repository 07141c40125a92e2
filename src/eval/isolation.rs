//! Per-trial isolation: a bubblewrap sandbox where the trial's folders appear at `/app`, `/root`,
//! `/tmp`, `/logs/...`, `/tests` and `/solution` over a read-only host system; or, where bwrap
//! cannot create namespaces, plain per-trial folders with those paths rewritten.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What the user asked for with `--isolation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationChoice {
    /// bubblewrap when it works here, else plain folders (with a warning).
    Auto,
    /// bubblewrap or fail.
    Bwrap,
    /// Plain per-trial folders: no filesystem, network or process isolation.
    None,
}

impl crate::protocol::Choice for IsolationChoice {
    const ALL: &'static [Self] = &[
        IsolationChoice::Auto,
        IsolationChoice::Bwrap,
        IsolationChoice::None,
    ];
    fn name(self) -> &'static str {
        match self {
            IsolationChoice::Auto => "auto",
            IsolationChoice::Bwrap => "bwrap",
            IsolationChoice::None => "none",
        }
    }
    fn help(self) -> &'static str {
        match self {
            IsolationChoice::Auto => "bubblewrap when it works here, else plain folders",
            IsolationChoice::Bwrap => "bubblewrap or fail",
            IsolationChoice::None => "plain per-trial folders: no isolation",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsolationKind {
    Bwrap,
    Plain,
}

impl IsolationKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationKind::Bwrap => "bwrap",
            IsolationKind::Plain => "plain",
        }
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
        }
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
        Ok(())
    }

    /// Sandbox path → host path, longest prefix first.
    fn mapping(&self, build_context: Option<&Path>) -> Vec<(&'static str, PathBuf)> {
        let mut m = vec![
            ("/logs/agent", self.agent_logs.clone()),
            ("/logs/verifier", self.verifier_logs.clone()),
            ("/logs/artifacts", self.artifacts.clone()),
            ("/solution", self.solution.clone()),
            ("/tests", self.tests.clone()),
            ("/setup", self.setup.clone()),
            ("/app", self.app.clone()),
        ];
        if let Some(ctx) = build_context {
            m.push(("/environment", ctx.to_path_buf()));
        }
        m
    }
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
}

/// How trials are isolated on this machine.
#[derive(Debug, Clone)]
pub struct Isolation {
    pub kind: IsolationKind,
    /// Why bwrap is not used, when it is not.
    pub fallback_reason: Option<String>,
    /// Extra host paths visible read-only (the agent binary's folder, `--share`).
    shared: Vec<PathBuf>,
    /// Toolchain env (RUSTUP_HOME …) that keeps host tools working under a fresh HOME.
    tool_env: BTreeMap<String, String>,
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
}

/// Top-level host folders visible read-only in the sandbox.
const SYSTEM_DIRS: &[&str] = &[
    "usr", "etc", "opt", "var", "srv", "home", "mnt", "media", "run", "sys", "boot",
];
const SYSTEM_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

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
            tool_env: toolchain_env(),
        };
        if choice == IsolationChoice::None {
            iso.kind = IsolationKind::Plain;
            iso.fallback_reason = Some("--isolation none was given".into());
            return Ok(iso);
        }
        match iso.probe() {
            Ok(()) => Ok(iso),
            Err(reason) if choice == IsolationChoice::Auto => {
                iso.kind = IsolationKind::Plain;
                iso.fallback_reason = Some(reason.to_string());
                Ok(iso)
            }
            Err(reason) => Err(reason),
        }
    }

    fn probe(&self) -> Result<(), IsolationError> {
        let dir = tempfile::tempdir().map_err(IsolationError::ProbeDir)?;
        let paths = TrialPaths::new(dir.path());
        paths.create().map_err(IsolationError::ProbeFolders)?;
        let phase = Phase {
            paths: &paths,
            workdir: "/app",
            network: false,
            tests: false,
            solution: false,
            setup: false,
            build_context: None,
            env: BTreeMap::new(),
        };
        let mut cmd = self.command(&phase, "sh", &["-c".into(), "touch /app/.probe".into()]);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(IsolationError::BwrapMissing)?;
        if !out.status.success() || !paths.app.join(".probe").exists() {
            return Err(IsolationError::SandboxRefused {
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// The command that runs `program args` for `phase`.
    pub fn command(&self, phase: &Phase, program: &str, args: &[String]) -> Command {
        match self.kind {
            IsolationKind::Bwrap => self.bwrap_command(phase, program, args),
            IsolationKind::Plain => self.plain_command(phase, program, args),
        }
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
        env.extend(self.tool_env.clone());
        env
    }

    fn bwrap_command(&self, phase: &Phase, program: &str, args: &[String]) -> Command {
        let p = phase.paths;
        let mut cmd = Command::new("bwrap");
        let arg = |cmd: &mut Command, parts: &[&str]| {
            cmd.args(parts);
        };
        for dir in SYSTEM_DIRS {
            let host = Path::new("/").join(dir);
            if host.is_dir() {
                let s = host.to_string_lossy().into_owned();
                arg(&mut cmd, &["--ro-bind", &s, &s]);
            }
        }
        for link in SYSTEM_LINKS {
            let host = Path::new("/").join(link);
            if let Ok(target) = std::fs::read_link(&host) {
                cmd.arg("--symlink").arg(target).arg(&host);
            } else if host.is_dir() {
                cmd.arg("--ro-bind").arg(&host).arg(&host);
            }
        }
        cmd.args(["--dev", "/dev", "--proc", "/proc"]);
        cmd.arg("--bind").arg(&p.tmp).arg("/tmp");
        cmd.arg("--bind").arg(&p.home).arg("/root");
        for host in self.home_toolchains().iter().chain(&self.shared) {
            cmd.arg("--ro-bind").arg(host).arg(host);
        }
        cmd.arg("--bind").arg(&p.app).arg("/app");
        cmd.arg("--bind").arg(&p.agent_logs).arg("/logs/agent");
        cmd.arg("--bind")
            .arg(&p.verifier_logs)
            .arg("/logs/verifier");
        cmd.arg("--bind").arg(&p.artifacts).arg("/logs/artifacts");
        if phase.tests {
            cmd.arg("--bind").arg(&p.tests).arg("/tests");
        }
        if phase.solution {
            cmd.arg("--bind").arg(&p.solution).arg("/solution");
        }
        if phase.setup {
            cmd.arg("--ro-bind").arg(&p.setup).arg("/setup");
        }
        if let Some(ctx) = phase.build_context {
            cmd.arg("--ro-bind").arg(ctx).arg("/environment");
        }
        cmd.args([
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]);
        if !phase.network {
            cmd.arg("--unshare-net");
        }
        cmd.args([
            "--hostname",
            "trial",
            "--die-with-parent",
            "--new-session",
            "--chdir",
            phase.workdir,
        ]);
        cmd.arg("--clearenv");
        let mut env = self.base_env("/root", "/tmp");
        env.extend(phase.env.clone());
        for (k, v) in &env {
            cmd.arg("--setenv").arg(k).arg(v);
        }
        cmd.arg("--").arg(program).args(args);
        cmd
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
        if self.kind == IsolationKind::Bwrap {
            return text.to_string();
        }
        rewrite_paths(&paths.mapping(build_context), text)
    }

    /// Folders under the host HOME that hold tools on PATH (~/.cargo, ~/.pyenv, ~/.rustup):
    /// the trial's fresh HOME would hide them otherwise.
    fn home_toolchains(&self) -> Vec<PathBuf> {
        let Some(home) = dirs::home_dir().filter(|h| h != Path::new("/")) else {
            return Vec::new();
        };
        let mut found: Vec<PathBuf> = std::env::var("PATH")
            .unwrap_or_default()
            .split(':')
            .filter_map(|entry| {
                Path::new(entry)
                    .strip_prefix(&home)
                    .ok()
                    .map(|rest| rest.to_path_buf())
            })
            .filter_map(|rest| rest.components().next().map(|c| home.join(c)))
            .chain([home.join(".rustup")])
            .filter(|p| p.is_dir())
            .collect();
        found.sort();
        found.dedup();
        found
    }
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

/// Replaces sandbox paths (`/app`, `/logs/verifier` …) that start a path in `text`; paths not
/// in `mapping` are left alone.
pub fn rewrite_paths(mapping: &[(&str, PathBuf)], text: &str) -> String {
    SANDBOX_PATH_RE
        .replace_all(text, |c: &regex::Captures| {
            let to = mapping
                .iter()
                .find(|(from, _)| *from == &c[2])
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
