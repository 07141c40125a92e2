//! Turns a task's Dockerfile into a local setup script when it only needs what this machine has.
//!
//! TB tasks build on generic Debian/Ubuntu/Python images and mostly `COPY` fixtures into `/app`
//! (or a new top-level folder such as `/workspace`) and `RUN` a few commands. Those run as a
//! setup script inside the trial sandbox, with package installs dropped when the packages are
//! already installed on the host. Variables follow Dockerfile semantics (`ARG`, `ENV`, `$VAR`,
//! `${VAR:-default}` …). Anything else (a bespoke base image, multi-stage builds, packages
//! missing here) makes the task skipped, with the reason.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Base images whose userland a Debian host with python3, git, gcc and cargo stands in for.
const GENERIC_BASES: &[&str] = &[
    "debian",
    "ubuntu",
    "python",
    "buildpack-deps",
    "rust",
    "gcc",
    "ghcr.io/laude-institute/t-bench/ubuntu-24-04",
    "ghcr.io/laude-institute/t-bench/python-3-13",
];

/// Packages every TB1 Dockerfile installs for the harness (its tmux session and recorder), not
/// for the task: a trial here has no tmux pane, so their absence does not block a task.
const HARNESS_ONLY: &[&str] = &["tmux", "asciinema"];

/// Top-level folders that come from the host (read-only) or are the trial's own mounts; a
/// Dockerfile cannot write there. Any other top-level folder (`/workspace`, `/data`, `/home`)
/// becomes a writable folder of the trial.
const NOT_A_TRIAL_ROOT: &[&str] = &[
    "usr",
    "etc",
    "opt",
    "var",
    "sys",
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "dev",
    "proc",
    "run",
    "boot",
    "logs",
    "tests",
    "solution",
    "setup",
    "environment",
];

/// A Dockerfile rewritten as a setup script.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalEnv {
    pub script: String,
    pub workdir: String,
    pub env: BTreeMap<String, String>,
    /// Top-level folders besides `/app`, `/root` and `/tmp` that the Dockerfile writes to
    /// (`/workspace`): each is a writable folder of the trial.
    pub extra_roots: Vec<String>,
    /// Paths in system folders (`/opt/tool`, `/etc/app.conf`) that `COPY`/`ADD`/`WORKDIR`
    /// write: each is a folder or file of the trial mounted there, over the host's read-only
    /// system folder, in every phase.
    pub system_mounts: Vec<SystemMount>,
    /// The last `USER` (`name`, `uid`, `name:group`): who the agent and verifier run as when
    /// the task names nobody; `None` for root.
    pub user: Option<String>,
}

/// A path inside a host system folder that the trial provides itself.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SystemMount {
    /// The sandbox path (`/opt/tool`): the first component on the way to what the Dockerfile
    /// writes that the host does not have, or that file itself when the host has every folder
    /// on the way (`/usr/local/bin/tool`).
    pub path: String,
    /// A file, not a folder.
    pub file: bool,
}

/// System folders a Dockerfile may write into (through a [`SystemMount`]).
const SYSTEM_TOPS: &[&str] = &["usr", "etc", "opt", "var"];

/// The mount that makes the sandbox path `path` writable, `file` when `path` is a file;
/// `None` when `path` is not under a system folder that allows one, or is such a folder
/// itself. The `/bin` `/lib` … links resolve to their `/usr` targets first.
fn system_mount(path: &str, file: bool, host_exists: &dyn Fn(&str) -> bool) -> Option<SystemMount> {
    let mut parts: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    let top = parts.first()?.clone();
    if !SYSTEM_TOPS.contains(&top.as_str()) {
        let link = std::fs::read_link(format!("/{top}")).ok()?;
        let target = link.to_string_lossy().trim_start_matches('/').to_string();
        let mut resolved: Vec<String> = target.split('/').map(str::to_string).collect();
        if !resolved
            .first()
            .is_some_and(|t| SYSTEM_TOPS.contains(&t.as_str()))
        {
            return None;
        }
        resolved.extend(parts.drain(1..));
        parts = resolved;
    }
    if parts.len() < 2 || parts[..2] == ["var".to_string(), "run".to_string()] {
        return None;
    }
    for depth in 2..=parts.len() {
        let prefix = format!("/{}", parts[..depth].join("/"));
        if !host_exists(&prefix) {
            return Some(SystemMount {
                path: prefix,
                file: file && depth == parts.len(),
            });
        }
    }
    Some(SystemMount {
        path: format!("/{}", parts.join("/")),
        file,
    })
}

/// Keeps the mounts that no other mount of the list covers.
fn outermost(mounts: BTreeSet<SystemMount>) -> Vec<SystemMount> {
    let all: Vec<SystemMount> = mounts.into_iter().collect();
    all.iter()
        .filter(|m| {
            !all.iter()
                .any(|o| !o.file && o.path != m.path && m.path.starts_with(&format!("{}/", o.path)))
        })
        .cloned()
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
pub enum DockerPlan {
    Local(LocalEnv),
    /// The task needs Docker (or the network, or packages this machine lacks).
    Unsupported(DockerfileError),
}

/// Why a Dockerfile cannot become a local setup script, and on which line.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerfileError {
    /// The first line of the instruction, when one instruction is to blame.
    pub line: Option<usize>,
    pub problem: Problem,
}

impl std::fmt::Display for DockerfileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "line {line}: {}", self.problem),
            None => self.problem.fmt(f),
        }
    }
}

impl std::error::Error for DockerfileError {}

/// What in a Dockerfile baton cannot do without Docker, or cannot read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Problem {
    #[error("no FROM line")]
    NoFrom,
    #[error("multi-stage builds need Docker")]
    MultiStage,
    /// A base image whose userland this machine does not stand in for.
    #[error("needs the Docker image '{image}', which baton cannot provide")]
    Image { image: String },
    #[error(
        "WORKDIR {path}: only /app, /root, /tmp, new top-level folders and paths below /usr, /etc, /opt and /var are writable"
    )]
    WorkdirOutsideApp { path: String },
    #[error("COPY --from needs a multi-stage Docker build")]
    CopyFromStage,
    #[error("{instruction} needs a source and a destination")]
    CopyArguments { instruction: String },
    #[error(
        "{instruction} into {dest}: only /app, /root, /tmp, new top-level folders and paths below /usr, /etc, /opt and /var (not those folders themselves, nor /var/run) are writable"
    )]
    CopyOutsideApp { instruction: String, dest: String },
    #[error("{instruction} of a URL ({url}) needs the network at build time")]
    CopyUrl { instruction: String, url: String },
    /// An ENTRYPOINT that does something before the container's command.
    #[error(
        "ENTRYPOINT {command} runs when the container starts; baton's trials have no container start"
    )]
    Entrypoint { command: String },
    #[error("RUN with an empty JSON array")]
    RunJsonForm,
    /// The trial has no network and the command fetches something.
    #[error("RUN needs the network at build time: {command}")]
    RunNeedsNetwork { command: String },
    #[error("needs {} not installed on this machine: {}", installer.packages(), packages.join(", "))]
    MissingPackages {
        installer: Installer,
        packages: Vec<String>,
    },
    /// `pip install -e .`, a wheel or a URL: what it installs cannot be checked here.
    #[error("pip installs '{spec}', which baton cannot check or install without Docker")]
    PipLocalInstall { spec: String },
    /// `pip install -r FILE` where FILE is not a file of the build context.
    #[error("pip -r {file}: not a file this Dockerfile copies from its build context")]
    Requirements { file: String },
    #[error("unsupported instruction {0}")]
    Instruction(String),
    /// An exec-form (`["a", "b"]`) argument list that is not a JSON array of strings.
    #[error("bad JSON array: {0}")]
    JsonArray(String),
    #[error("unbalanced quotes in '{0}'")]
    UnbalancedQuotes(String),
    /// `${VAR}` without its closing brace, or a bad name inside the braces.
    #[error("bad variable reference in '{0}'")]
    BadVariable(String),
    /// Variables that multiply each other (`ENV B=$A$A$A…` line after line).
    #[error("its variables expand to more than {} MiB", MAX_EXPANDED >> 20)]
    ExpandsTooFar,
    /// `${VAR:?message}` with VAR unset.
    #[error("{name}: {message}")]
    UnsetVariable { name: String, message: String },
}

/// Translates `text`, whose build context is `context` (visible at `/environment` while the
/// script runs). Installed packages are looked up once per process.
pub fn translate(text: &str, network: bool, context: &Path) -> DockerPlan {
    match translate_inner(text, network, Some(context), &host_has_package) {
        Ok(local) => DockerPlan::Local(local),
        Err(reason) => DockerPlan::Unsupported(reason),
    }
}

/// Where a sandbox path lives in a trial.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Root {
    /// `/app`, `/root`, `/tmp`: the trial's own folders.
    Trial,
    /// A new top-level folder, writable in the trial.
    Extra(String),
    /// A host system folder or one of the trial's reserved mounts.
    System,
}

fn root_of(path: &str) -> Root {
    let top = path
        .trim_start_matches('/')
        .split('/')
        .next()
        .unwrap_or_default();
    match top {
        "" => Root::System,
        "app" | "root" | "tmp" => Root::Trial,
        t if NOT_A_TRIAL_ROOT.contains(&t) || t == "." || t == ".." => Root::System,
        t => Root::Extra(format!("/{t}")),
    }
}

/// `dir` joined with `rel` (when relative), with `.` and `..` resolved lexically.
fn absolute(dir: &str, rel: &str) -> String {
    let joined = if rel.starts_with('/') {
        rel.to_string()
    } else {
        format!("{}/{rel}", dir.trim_end_matches('/'))
    };
    let mut parts: Vec<&str> = Vec::new();
    for p in joined.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    let mut out = format!("/{}", parts.join("/"));
    if rel.ends_with('/') && out != "/" {
        out.push('/');
    }
    out
}

/// The variables a Dockerfile instruction sees: `ENV` over `ARG` over the base image's.
struct Vars {
    base: BTreeMap<String, String>,
    args: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
}

impl Vars {
    fn get(&self, name: &str) -> Option<String> {
        self.env
            .get(name)
            .or_else(|| self.args.get(name))
            .or_else(|| self.base.get(name))
            .cloned()
    }
}

/// What the base image is assumed to set: its PATH, which trials inherit from this machine.
fn base_vars() -> BTreeMap<String, String> {
    let mut base = BTreeMap::new();
    base.insert(
        "PATH".to_string(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
    );
    base
}

fn translate_inner(
    text: &str,
    network: bool,
    context: Option<&Path>,
    installed: &dyn Fn(Installer, &str) -> bool,
) -> Result<LocalEnv, DockerfileError> {
    // Each RUN is its own `/bin/sh -c` (or the SHELL's) with its own exit status, as in a
    // Docker build: a failure inside an `&&` chain fails the build, `false; echo ok` does not.
    // The first RUN that fails ends the setup, naming its line in setup.log.
    let mut script = String::from(
        "set -e\nbaton_run_failed() { echo \"baton: the Dockerfile's line $1 failed with exit status $2: $3\" >&2; exit \"$2\"; }\nmkdir -p /app\ncd /app\n",
    );
    let mut shell: Vec<String> = vec!["/bin/sh".into(), "-c".into()];
    let mut workdir = "/app".to_string();
    let mut vars = Vars {
        base: base_vars(),
        args: BTreeMap::new(),
        env: BTreeMap::new(),
    };
    // ARGs declared before FROM: usable in FROM, and as defaults of a later bare `ARG NAME`.
    let mut global_args: BTreeMap<String, String> = BTreeMap::new();
    let mut global_bytes = 0usize;
    let mut extra_roots = BTreeSet::new();
    let mut copies: Vec<Copied> = Vec::new();
    let mut seen_from = false;
    let mut last_user: Option<String> = None;
    let mut system_mounts: BTreeSet<SystemMount> = BTreeSet::new();
    let host_exists = |p: &str| std::fs::symlink_metadata(p).is_ok();
    for (line_no, instruction) in logical_lines(text) {
        let (word, rest) = match instruction.split_once(char::is_whitespace) {
            Some((w, r)) => (w.to_ascii_uppercase(), r.trim().to_string()),
            None => (instruction.to_ascii_uppercase(), String::new()),
        };
        let at = |problem: Problem| DockerfileError {
            line: Some(line_no),
            problem,
        };
        let lookup = |name: &str| {
            if seen_from {
                vars.get(name)
            } else {
                global_args.get(name).cloned()
            }
        };
        match word.as_str() {
            "FROM" => {
                if seen_from {
                    return Err(at(Problem::MultiStage));
                }
                let words = expand_words(&rest, &lookup).map_err(&at)?;
                seen_from = true;
                let image = words
                    .iter()
                    .find(|w| !w.starts_with("--"))
                    .map(String::as_str)
                    .unwrap_or("");
                let repo = image.split(['@']).next().unwrap_or("");
                let repo = match repo.rfind(':') {
                    Some(colon) if !repo[colon..].contains('/') => &repo[..colon],
                    _ => repo,
                };
                let repo = official_image(repo);
                if !GENERIC_BASES.contains(&repo) {
                    return Err(at(Problem::Image {
                        image: image.to_string(),
                    }));
                }
            }
            "ARG" => {
                for w in expand_words(&rest, &lookup).map_err(&at)? {
                    let (name, value) = match w.split_once('=') {
                        Some((k, v)) => (k.to_string(), Some(v.to_string())),
                        None => (w.clone(), None),
                    };
                    if !seen_from {
                        if let Some(v) = value {
                            global_bytes = global_bytes.saturating_add(v.len());
                            global_args.insert(name, v);
                        }
                        continue;
                    }
                    // No build arguments are given: the default, or the global one.
                    let Some(v) = value.or_else(|| global_args.get(&name).cloned()) else {
                        continue;
                    };
                    if valid_name(&name) {
                        script.push_str(&format!("export {name}={}\n", sh_quote(&v)));
                        vars.args.insert(name, v);
                    }
                }
            }
            "WORKDIR" => {
                let path = expand_one(&rest, &lookup).map_err(&at)?;
                let path = absolute(&workdir, &path);
                let path = path.trim_end_matches('/').to_string();
                let path = if path.is_empty() { "/".into() } else { path };
                match root_of(&path) {
                    Root::System => match system_mount(&path, false, &host_exists) {
                        Some(m) => {
                            system_mounts.insert(m);
                        }
                        None => return Err(at(Problem::WorkdirOutsideApp { path })),
                    },
                    Root::Extra(top) => {
                        extra_roots.insert(top);
                    }
                    Root::Trial => {}
                }
                script.push_str(&format!("mkdir -p {0}\ncd {0}\n", sh_quote(&path)));
                workdir = path;
            }
            "COPY" | "ADD" => {
                let words = if rest.trim_start().starts_with('[') {
                    shell_words(&rest).map_err(&at)?
                } else {
                    expand_words(&rest, &lookup).map_err(&at)?
                };
                if words.iter().any(|w| w.starts_with("--from")) {
                    return Err(at(Problem::CopyFromStage));
                }
                let paths: Vec<&String> = words.iter().filter(|w| !w.starts_with("--")).collect();
                let Some((dest, sources)) = paths.split_last().filter(|(_, s)| !s.is_empty())
                else {
                    return Err(at(Problem::CopyArguments { instruction: word }));
                };
                let dest = absolute(&workdir, dest);
                let in_system = match root_of(&dest) {
                    Root::System => {
                        if system_mount(&dest, false, &host_exists).is_none() {
                            return Err(at(Problem::CopyOutsideApp {
                                instruction: word,
                                dest,
                            }));
                        }
                        true
                    }
                    Root::Extra(top) => {
                        extra_roots.insert(top);
                        false
                    }
                    Root::Trial => false,
                };
                for src in sources {
                    if src.contains("://") {
                        return Err(at(Problem::CopyUrl {
                            instruction: word,
                            url: src.to_string(),
                        }));
                    }
                    let rel = src.trim_start_matches("./").trim_end_matches('/');
                    let rel = if rel.is_empty() { "." } else { rel };
                    // Docker copies a folder's contents, never the folder itself.
                    let src_is_dir = rel == "."
                        || src.ends_with('/')
                        || context.is_some_and(|c| c.join(rel).is_dir());
                    let into_dir = dest.ends_with('/') || sources.len() > 1 || src_is_dir;
                    let from = if rel == "." {
                        "/environment".to_string()
                    } else {
                        format!("/environment/{rel}")
                    };
                    let dest_dir = dest.trim_end_matches('/');
                    let dest_dir = if dest_dir.is_empty() { "/" } else { dest_dir };
                    if in_system {
                        // What lands in the system folder: each entry of a copied folder, the
                        // file under its name, or the file at `dest`.
                        let host_src = context.map(|c| {
                            if rel == "." {
                                c.to_path_buf()
                            } else {
                                c.join(rel)
                            }
                        });
                        let mut landed: Vec<(String, bool)> = Vec::new();
                        if src_is_dir {
                            let entries = host_src
                                .as_deref()
                                .and_then(|d| std::fs::read_dir(d).ok())
                                .map(|rd| {
                                    rd.flatten()
                                        .map(|e| {
                                            let name = e.file_name().to_string_lossy().into_owned();
                                            let dir = e.file_type().is_ok_and(|t| t.is_dir());
                                            (format!("{dest_dir}/{name}"), !dir)
                                        })
                                        .collect::<Vec<_>>()
                                })
                                .unwrap_or_default();
                            if entries.is_empty() {
                                landed.push((dest_dir.to_string(), false));
                            }
                            landed.extend(entries);
                        } else if into_dir {
                            let name = rel.rsplit('/').next().unwrap_or(rel);
                            landed.push((format!("{dest_dir}/{name}"), true));
                        } else {
                            landed.push((dest.clone(), true));
                        }
                        for (path, file) in landed {
                            match system_mount(&path, file, &host_exists) {
                                Some(m) => {
                                    system_mounts.insert(m);
                                }
                                None => {
                                    return Err(at(Problem::CopyOutsideApp {
                                        instruction: word,
                                        dest: path,
                                    }));
                                }
                            }
                        }
                    }
                    // COPY gives the files to root (no `--chown` here); the build context's
                    // owners need not exist in the trial's user namespace (run by nobody).
                    if src_is_dir {
                        script.push_str(&format!(
                            "mkdir -p {0}\ncp -a --no-preserve=ownership {1}/. {0}/\n",
                            sh_quote(dest_dir),
                            from
                        ));
                    } else if into_dir {
                        script.push_str(&format!(
                            "mkdir -p {0}\ncp -a --no-preserve=ownership {1} {0}/\n",
                            sh_quote(dest_dir),
                            from
                        ));
                    } else {
                        script.push_str(&format!(
                            "mkdir -p \"$(dirname {0})\"\ncp -a --no-preserve=ownership {1} {0}\n",
                            sh_quote(&dest),
                            from
                        ));
                    }
                    if let Some(ctx) = context {
                        copies.push(Copied {
                            dest: dest_dir.to_string(),
                            host: if rel == "." {
                                ctx.to_path_buf()
                            } else {
                                ctx.join(rel)
                            },
                            contents: src_is_dir,
                            into_dir,
                        });
                    }
                }
            }
            "ENV" => {
                for (k, v) in parse_env(&rest, &lookup).map_err(&at)? {
                    if !valid_name(&k) {
                        continue;
                    }
                    script.push_str(&format!("export {k}={}\n", sh_quote(&v)));
                    vars.env.insert(k, v);
                }
            }
            "RUN" => {
                let shown: String = rest.chars().take(200).collect();
                let fail = format!(
                    " || baton_run_failed {line_no} $? {}\n",
                    sh_quote(&format!("RUN {shown}"))
                );
                // The exec form: a JSON array of the words themselves, run with no shell
                // (anything else starting with `[`, such as `[[ -f x ]]`, is shell form).
                let exec_form = rest
                    .starts_with('[')
                    .then(|| serde_json::from_str::<Vec<String>>(&rest).ok())
                    .flatten();
                if let Some(words) = exec_form {
                    if words.is_empty() {
                        return Err(at(Problem::RunJsonForm));
                    }
                    let command = words.join(" ");
                    if !network && needs_network(&command) {
                        return Err(at(Problem::RunNeedsNetwork { command }));
                    }
                    for top in run_roots(&command) {
                        if extra_roots.len() < MAX_RUN_ROOTS || extra_roots.contains(&top) {
                            extra_roots.insert(top);
                        }
                    }
                    let quoted: Vec<String> = words.iter().map(|w| sh_quote(w)).collect();
                    script.push_str(&quoted.join(" "));
                    script.push_str(&fail);
                    continue_checks(&script, global_bytes).map_err(&at)?;
                    continue;
                }
                let files = |sandbox: &str| host_file(&copies, &absolute(&workdir, sandbox));
                let kept = strip_satisfied_installs(&rest, installed, &files).map_err(&at)?;
                if !network && needs_network(&kept) {
                    return Err(at(Problem::RunNeedsNetwork { command: kept }));
                }
                if !kept.trim().is_empty() {
                    // A new top-level folder the command writes (`mkdir /data && … > /data/x`)
                    // is a folder of the trial, kept for every phase as in the image.
                    for top in run_roots(&kept) {
                        if extra_roots.len() < MAX_RUN_ROOTS || extra_roots.contains(&top) {
                            extra_roots.insert(top);
                        }
                    }
                    let quoted: Vec<String> = shell.iter().map(|w| sh_quote(w)).collect();
                    script.push_str(&format!("{} {}", quoted.join(" "), sh_quote(&kept)));
                    script.push_str(&fail);
                }
            }
            "SHELL" => {
                let words = shell_words(&rest).map_err(&at)?;
                if !rest.trim_start().starts_with('[') || words.is_empty() {
                    return Err(at(Problem::JsonArray(format!(
                        "SHELL needs a JSON array: {rest}"
                    ))));
                }
                shell = words;
            }
            "USER" => {
                let user = expand_one(&rest, &lookup).map_err(&at)?;
                let name = user.split(':').next().unwrap_or_default().to_string();
                // The RUN lines after it still run as root here (the setup phase has one
                // user); the agent and verifier phases run as this user.
                last_user = (name != "root" && name != "0" && !name.is_empty()).then_some(user);
            }
            "ENTRYPOINT" => {
                // Harbor starts the container with its own command (`sleep infinity`), so a
                // CMD never runs; an ENTRYPOINT does, before it: a script that starts a service
                // or edits /etc/hosts. Trials have no container start: such a task is skipped,
                // never scored without what its entrypoint set up.
                let words = shell_words(&rest).map_err(&at)?;
                if !only_starts_the_command(&words) {
                    return Err(at(Problem::Entrypoint {
                        command: rest.chars().take(200).collect(),
                    }));
                }
            }
            "CMD" | "LABEL" | "EXPOSE" | "VOLUME" | "HEALTHCHECK" | "STOPSIGNAL" | "MAINTAINER"
            | "ONBUILD" => {}
            other => return Err(at(Problem::Instruction(other.to_string()))),
        }
        // The script holds every value the variables took (each ENV and ARG is exported).
        continue_checks(&script, global_bytes).map_err(&at)?;
    }
    if !seen_from {
        return Err(DockerfileError {
            line: None,
            problem: Problem::NoFrom,
        });
    }
    Ok(LocalEnv {
        script,
        workdir,
        env: vars.env,
        extra_roots: extra_roots.into_iter().collect(),
        system_mounts: outermost(system_mounts),
        user: last_user,
    })
}

/// Registry hosts that serve Docker Hub's official images under `library/` (or, for ECR's
/// public gallery, `docker/library/`): `public.ecr.aws/docker/library/python` is `python`.
const OFFICIAL_MIRRORS: &[&str] = &[
    "public.ecr.aws/docker/library/",
    "mirror.gcr.io/library/",
    "index.docker.io/library/",
    "registry-1.docker.io/library/",
    "registry.hub.docker.com/library/",
    "docker.io/library/",
    "library/",
];

/// An image repository without the registry prefixes of Docker Hub's official images.
fn official_image(repo: &str) -> &str {
    OFFICIAL_MIRRORS
        .iter()
        .find_map(|p| repo.strip_prefix(p))
        .or_else(|| repo.strip_prefix("docker.io/"))
        .unwrap_or(repo)
}

/// Whether an ENTRYPOINT only runs the container's command: none, a shell, or an init that
/// execs it (`tini --`, `dumb-init`).
fn only_starts_the_command(words: &[String]) -> bool {
    let name = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    match words.first().map(|w| name(w)).as_deref() {
        None => true,
        Some("sh" | "bash" | "dash" | "zsh") => words[1..]
            .iter()
            .all(|w| matches!(w.as_str(), "-c" | "-l" | "-lc" | "--login" | "-e")),
        Some("tini" | "tini-static" | "dumb-init") => words[1..].iter().all(|w| w.starts_with('-')),
        _ => false,
    }
}

/// The most top-level folders a Dockerfile's `RUN` lines add to a trial.
const MAX_RUN_ROOTS: usize = 16;

/// The new top-level folders (`/data`, `/srv`) that absolute paths in a `RUN` command name:
/// a path starts the command or follows a blank, `=`, `:`, a quote, `(` or `>`; `/usr`, `/app`
/// and the other folders a trial already has are not new.
fn run_roots(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = command.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if *c != '/' {
            continue;
        }
        let starts = i == 0
            || matches!(
                chars[i - 1],
                ' ' | '\t' | '\n' | '=' | ':' | '"' | '\'' | '(' | '>' | ';' | '&' | '|'
            );
        if !starts {
            continue;
        }
        let name: String = chars[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
            .collect();
        if name.is_empty() || name.starts_with('.') {
            continue;
        }
        // A folder: something inside it is named, or a `mkdir` before makes it (a top-level
        // file, `> /out.log`, is no folder).
        let inside = chars.get(i + 1 + name.chars().count()) == Some(&'/');
        let before: String = chars[..i].iter().collect();
        let segment = before
            .rfind(['&', ';', '|', '\n'])
            .map_or(before.as_str(), |at| &before[at + 1..]);
        let made = segment.contains("mkdir");
        if !inside && !made {
            continue;
        }
        let top = format!("/{name}");
        if matches!(root_of(&top), Root::Extra(_)) && !out.contains(&top) {
            out.push(top);
        }
    }
    out
}

/// The bound on what the variables expand to, checked after each instruction.
fn continue_checks(script: &str, global_bytes: usize) -> Result<(), Problem> {
    if script.len().saturating_add(global_bytes) > MAX_EXPANDED {
        return Err(Problem::ExpandsTooFar);
    }
    Ok(())
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One source of a `COPY`, for finding which host file a later `RUN` reads.
struct Copied {
    /// The destination folder (or file, when neither `into_dir` nor `contents`).
    dest: String,
    host: PathBuf,
    /// A folder whose contents land in `dest`.
    contents: bool,
    /// A file that lands in `dest/<its name>`.
    into_dir: bool,
}

/// The build-context file that the sandbox path `path` holds after the `COPY`s so far.
fn host_file(copies: &[Copied], path: &str) -> Option<PathBuf> {
    for c in copies.iter().rev() {
        let target = if c.contents {
            c.dest.clone()
        } else if c.into_dir {
            let name = c.host.file_name()?.to_string_lossy().into_owned();
            format!("{}/{name}", c.dest.trim_end_matches('/'))
        } else {
            c.dest.clone()
        };
        let found = if path == target {
            Some(c.host.clone())
        } else {
            path.strip_prefix(&format!("{}/", target.trim_end_matches('/')))
                .map(|rest| c.host.join(rest))
        };
        if let Some(f) = found.filter(|f| f.is_file()) {
            return Some(f);
        }
    }
    None
}

/// Joins `\`-continued lines and drops comments; yields (first line number, text).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim_end();
        if current.is_empty() {
            if line.trim().is_empty() || line.trim_start().starts_with('#') {
                continue;
            }
            start = n + 1;
        } else if line.trim_start().starts_with('#') {
            continue;
        }
        if let Some(body) = line.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
        } else {
            current.push_str(line);
            out.push((start, current.trim().to_string()));
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push((start, current.trim().to_string()));
    }
    out
}

fn shell_words(s: &str) -> Result<Vec<String>, Problem> {
    if s.trim_start().starts_with('[') {
        let v: Vec<String> =
            serde_json::from_str(s).map_err(|e| Problem::JsonArray(e.to_string()))?;
        return Ok(v);
    }
    shlex::split(s).ok_or_else(|| Problem::UnbalancedQuotes(s.to_string()))
}

type Lookup<'a> = dyn Fn(&str) -> Option<String> + 'a;

/// The most text a Dockerfile's variables may expand to, on one line or all lines together
/// (real ones stay in kilobytes; doubling a variable per line reaches gigabytes in 30 lines).
const MAX_EXPANDED: usize = 4 << 20;

/// Splits `s` into words the way Docker does for ENV, ARG, COPY and WORKDIR: quotes removed,
/// `\` escapes, and `$VAR`, `${VAR}`, `${VAR:-word}`, `${VAR:+word}`, `${VAR:?message}` (and
/// the forms without `:`) expanded; single quotes keep `$` literal.
fn expand_words(s: &str, lookup: &Lookup) -> Result<Vec<String>, Problem> {
    expand(s, true, lookup)
}

/// [`expand_words`] without splitting: the whole text is one word.
fn expand_one(s: &str, lookup: &Lookup) -> Result<String, Problem> {
    Ok(expand(s, false, lookup)?
        .into_iter()
        .next()
        .unwrap_or_default())
}

fn expand(s: &str, split: bool, lookup: &Lookup) -> Result<Vec<String>, Problem> {
    let chars: Vec<char> = s.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some('\'') => {
                if c == '\'' {
                    quote = None;
                } else {
                    cur.push(c);
                }
                i += 1;
            }
            Some(_) => {
                if c == '"' {
                    quote = None;
                    i += 1;
                } else if c == '\\' && matches!(chars.get(i + 1), Some('"' | '\\' | '$')) {
                    cur.push(chars[i + 1]);
                    i += 2;
                } else if c == '$' {
                    i = expand_dollar(&chars, i, &mut cur, lookup, s)?;
                } else {
                    cur.push(c);
                    i += 1;
                }
            }
            None => {
                if split && c.is_whitespace() {
                    if in_word {
                        words.push(std::mem::take(&mut cur));
                        in_word = false;
                    }
                    i += 1;
                    continue;
                }
                in_word = true;
                match c {
                    '\'' | '"' => {
                        quote = Some(c);
                        i += 1;
                    }
                    '\\' if i + 1 < chars.len() => {
                        cur.push(chars[i + 1]);
                        i += 2;
                    }
                    '$' => i = expand_dollar(&chars, i, &mut cur, lookup, s)?,
                    _ => {
                        cur.push(c);
                        i += 1;
                    }
                }
            }
        }
    }
    if quote.is_some() {
        return Err(Problem::UnbalancedQuotes(s.to_string()));
    }
    if in_word || !split {
        words.push(cur);
    }
    Ok(words)
}

/// `next`, unless `out` grew past what any Dockerfile needs.
fn bounded(out: &str, next: usize) -> Result<usize, Problem> {
    if out.len() > MAX_EXPANDED {
        return Err(Problem::ExpandsTooFar);
    }
    Ok(next)
}

/// Expands the reference at `chars[i] == '$'` into `out`; returns the index after it.
fn expand_dollar(
    chars: &[char],
    i: usize,
    out: &mut String,
    lookup: &Lookup,
    whole: &str,
) -> Result<usize, Problem> {
    let is_start = |c: char| c.is_ascii_alphabetic() || c == '_';
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    match chars.get(i + 1) {
        Some('{') => {
            let mut j = i + 2;
            let name_start = j;
            while j < chars.len() && is_name(chars[j]) {
                j += 1;
            }
            let name: String = chars[name_start..j].iter().collect();
            if name.is_empty()
                || !chars[name_start].is_ascii_alphabetic() && chars[name_start] != '_'
            {
                return Err(Problem::BadVariable(whole.to_string()));
            }
            // The operator, then the word up to the matching brace.
            let colon = chars.get(j) == Some(&':');
            let op_at = if colon { j + 1 } else { j };
            let op = match chars.get(op_at) {
                Some('}') if !colon => None,
                Some(c @ ('-' | '+' | '?')) => Some(*c),
                _ => return Err(Problem::BadVariable(whole.to_string())),
            };
            let Some(op) = op else {
                out.push_str(&lookup(&name).unwrap_or_default());
                return bounded(out, j + 1);
            };
            let word_start = op_at + 1;
            let mut depth = 0usize;
            let mut k = word_start;
            loop {
                match chars.get(k) {
                    None => return Err(Problem::BadVariable(whole.to_string())),
                    Some('$') if chars.get(k + 1) == Some(&'{') => {
                        depth += 1;
                        // Each level is a recursion when expanded: keep it shallow.
                        if depth > 16 {
                            return Err(Problem::BadVariable(whole.to_string()));
                        }
                        k += 2;
                    }
                    Some('}') if depth == 0 => break,
                    Some('}') => {
                        depth -= 1;
                        k += 1;
                    }
                    Some(_) => k += 1,
                }
            }
            let raw: String = chars[word_start..k].iter().collect();
            let value = lookup(&name);
            let set = if colon {
                value.as_deref().is_some_and(|v| !v.is_empty())
            } else {
                value.is_some()
            };
            match op {
                '-' if set => out.push_str(&value.unwrap_or_default()),
                '-' => out.push_str(&expand_one(&raw, lookup)?),
                '+' if set => out.push_str(&expand_one(&raw, lookup)?),
                '+' => {}
                _ if set => out.push_str(&value.unwrap_or_default()),
                _ => {
                    return Err(Problem::UnsetVariable {
                        name,
                        message: expand_one(&raw, lookup)?,
                    });
                }
            }
            bounded(out, k + 1)
        }
        Some(&c) if is_start(c) => {
            let mut j = i + 1;
            while j < chars.len() && is_name(chars[j]) {
                j += 1;
            }
            let name: String = chars[i + 1..j].iter().collect();
            out.push_str(&lookup(&name).unwrap_or_default());
            bounded(out, j)
        }
        _ => {
            out.push('$');
            Ok(i + 1)
        }
    }
}

/// `ENV K=V K2=V2` or the legacy `ENV K value with spaces`; values expanded with the variables
/// as they were before this instruction.
fn parse_env(rest: &str, lookup: &Lookup) -> Result<Vec<(String, String)>, Problem> {
    let first = rest.split_whitespace().next().unwrap_or_default();
    if !first.contains('=') {
        let value = rest.trim_start()[first.len()..].trim();
        return Ok(vec![(first.to_string(), expand_one(value, lookup)?)]);
    }
    Ok(expand_words(rest, lookup)?
        .into_iter()
        .filter_map(|w| {
            w.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect())
}

/// The package manager of an install command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installer {
    Apt,
    Pip,
}

impl Installer {
    fn packages(self) -> &'static str {
        match self {
            Installer::Apt => "Debian packages",
            Installer::Pip => "Python packages",
        }
    }
}

/// pip options that take a value (`--retries 3`, `-r requirements.txt`, `-i URL` …).
const PIP_VALUE_OPTIONS: &[&str] = &[
    "-r",
    "--requirement",
    "-c",
    "--constraint",
    "-e",
    "--editable",
    "-i",
    "--index-url",
    "--extra-index-url",
    "-f",
    "--find-links",
    "-t",
    "--target",
    "--platform",
    "--python-version",
    "--implementation",
    "--abi",
    "--root",
    "--prefix",
    "--src",
    "--upgrade-strategy",
    "-C",
    "--config-settings",
    "--global-option",
    "--build-option",
    "--no-binary",
    "--only-binary",
    "--progress-bar",
    "--root-user-action",
    "--report",
    "--keyring-provider",
    "--proxy",
    "--retries",
    "--timeout",
    "--exists-action",
    "--trusted-host",
    "--cert",
    "--client-cert",
    "--cache-dir",
    "--log",
    "--log-file",
    "--python",
    "--group",
    "--use-feature",
    "--use-deprecated",
    "--resume-retries",
];

/// apt-get options that take a value.
const APT_VALUE_OPTIONS: &[&str] = &[
    "-o",
    "--option",
    "-t",
    "--target-release",
    "-c",
    "--config-file",
];

/// One requirement of an install command.
#[derive(Debug, PartialEq)]
enum Wanted {
    Package(String),
    /// `-r FILE`.
    Requirements(String),
    /// `-e PATH`, `.`, a wheel, a URL.
    Local(String),
}

/// The requirements of `install ARGS…`, options and their values left out.
fn install_args(kind: Installer, args: &[String]) -> Vec<Wanted> {
    let value_options = match kind {
        Installer::Apt => APT_VALUE_OPTIONS,
        Installer::Pip => PIP_VALUE_OPTIONS,
    };
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a.starts_with('-') {
            let (flag, inline) = match a.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
                _ => (a.as_str(), None),
            };
            // `-rrequirements.txt`: a short option glued to its value.
            let (flag, inline) = match (inline, flag.len() > 2 && !flag.starts_with("--")) {
                (None, true) if value_options.contains(&&flag[..2]) => {
                    (&flag[..2], Some(flag[2..].to_string()))
                }
                (inline, _) => (flag, inline),
            };
            if !value_options.contains(&flag) {
                continue;
            }
            let Some(value) = inline.or_else(|| it.next().cloned()) else {
                continue;
            };
            match flag {
                "-r" | "--requirement" => out.push(Wanted::Requirements(value)),
                "-e" | "--editable" => out.push(Wanted::Local(value)),
                _ => {}
            }
            continue;
        }
        if kind == Installer::Pip
            && (a.starts_with('.')
                || a.starts_with('/')
                || a.contains("://")
                || a.contains(" @ ")
                || a.ends_with(".whl")
                || a.ends_with(".tar.gz")
                || a.ends_with(".zip"))
        {
            out.push(Wanted::Local(a.clone()));
            continue;
        }
        let name = package_name(a);
        if !name.is_empty() {
            out.push(Wanted::Package(name));
        }
    }
    out
}

/// The package names a requirements file asks for (following nested `-r`).
fn read_requirements(
    file: &Path,
    depth: usize,
    out: &mut Vec<Wanted>,
) -> Result<(), std::io::Error> {
    // A build-context file: read where it resolves beside the first one, never through a link
    // out of it (its lines would end up in the skip reason).
    let root = file.parent().unwrap_or(Path::new("."));
    read_requirements_in(root, file, depth, out)
}

fn read_requirements_in(
    root: &Path,
    file: &Path,
    depth: usize,
    out: &mut Vec<Wanted>,
) -> Result<(), std::io::Error> {
    let text = crate::eval::fsutil::read_task_file(root, file)?;
    for line in text.lines() {
        let line = line.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('-') {
            let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
            for w in install_args(Installer::Pip, &words) {
                match w {
                    // Nested files stay beside the first one, in the build context.
                    Wanted::Requirements(nested)
                        if depth < 4
                            && !nested.starts_with('/')
                            && !nested.split('/').any(|c| c == "..") =>
                    {
                        let base = file.parent().unwrap_or(Path::new("."));
                        read_requirements_in(root, &base.join(nested), depth + 1, out)?;
                    }
                    Wanted::Requirements(nested) => {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            format!("nested requirements file {nested}"),
                        ));
                    }
                    other => out.push(other),
                }
            }
            continue;
        }
        let words = vec![line.to_string()];
        out.extend(install_args(Installer::Pip, &words));
    }
    Ok(())
}

/// Splits a shell command at `&&`, `||` and `;` outside quotes: (separator before, command).
fn split_commands(run: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut sep = String::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let chars: Vec<char> = run.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            cur.push(c);
            i += 1;
            continue;
        }
        let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        if two == "&&" || two == "||" || c == ';' {
            out.push((std::mem::take(&mut sep), std::mem::take(&mut cur)));
            sep = if c == ';' { ";".into() } else { two };
            i += sep.len();
            continue;
        }
        if c == '\'' || c == '"' {
            quote = Some(c);
        }
        cur.push(c);
        i += 1;
    }
    out.push((sep, cur));
    out
}

/// Drops `apt-get update`, installs of packages already present, and apt cache cleanup from a
/// `RUN` command. An install of a missing package is an error naming the packages; `files`
/// finds the host copy of a file the command reads (`pip install -r`).
fn strip_satisfied_installs(
    run: &str,
    installed: &dyn Fn(Installer, &str) -> bool,
    files: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<String, Problem> {
    let mut kept = String::new();
    for (sep, segment) in split_commands(run) {
        let seg = segment.trim();
        if keep_segment(seg, installed, files)? {
            if !kept.is_empty() {
                kept.push_str(&format!(" {} ", if sep.is_empty() { "&&" } else { &sep }));
            }
            kept.push_str(seg);
        }
    }
    Ok(kept)
}

fn keep_segment(
    seg: &str,
    installed: &dyn Fn(Installer, &str) -> bool,
    files: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<bool, Problem> {
    let words: Vec<String> =
        shlex::split(seg).unwrap_or_else(|| seg.split_whitespace().map(str::to_string).collect());
    // Leading `VAR=value` assignments and `sudo` are not the command.
    let first = words
        .iter()
        .position(|w| (w.starts_with('-') || !w.contains('=')) && w != "sudo")
        .unwrap_or(words.len());
    let cmd = &words[first..];
    let is_apt = matches!(cmd.first().map(String::as_str), Some("apt-get" | "apt"));
    let pip_at = cmd
        .iter()
        .position(|w| w == "pip" || w == "pip3" || w.ends_with("/pip") || w.ends_with("/pip3"))
        .or_else(|| {
            cmd.iter()
                .position(|w| w == "-m")
                .filter(|&m| cmd.get(m + 1).is_some_and(|p| p == "pip"))
                .map(|m| m + 1)
        });
    if is_apt
        && cmd
            .iter()
            .any(|w| w == "update" || w == "clean" || w == "autoremove")
    {
        return Ok(false);
    }
    if seg.starts_with("rm -rf /var/lib/apt/lists") {
        return Ok(false);
    }
    // Package sources serve the installs, which are all satisfied here (or this RUN fails to
    // translate): adding a repository or its key would only need the network and /etc.
    if matches!(
        cmd.first().map(String::as_str),
        Some("add-apt-repository" | "apt-key")
    ) {
        return Ok(false);
    }
    // `update-alternatives --install LINK NAME PATH PRIO` that this machine already has.
    if cmd.first().is_some_and(|c| c == "update-alternatives")
        && let Some(at) = cmd.iter().position(|w| w == "--install")
        && let (Some(link), Some(path)) = (cmd.get(at + 1), cmd.get(at + 3))
    {
        let same = std::fs::canonicalize(link)
            .ok()
            .zip(std::fs::canonicalize(path).ok())
            .is_some_and(|(l, p)| l == p);
        if same {
            return Ok(false);
        }
    }
    let (kind, from) = if is_apt {
        (Installer::Apt, 1)
    } else if let Some(p) = pip_at {
        (Installer::Pip, p + 1)
    } else {
        return Ok(true);
    };
    let Some(at) = cmd[from.min(cmd.len())..]
        .iter()
        .position(|w| w == "install")
    else {
        return Ok(true);
    };
    let args = &cmd[from + at + 1..];
    let mut wanted = install_args(kind, args);
    let mut i = 0;
    while i < wanted.len() {
        if let Wanted::Requirements(file) = &wanted[i] {
            let file = file.clone();
            let Some(host) = files(&file) else {
                return Err(Problem::Requirements { file });
            };
            let mut nested = Vec::new();
            read_requirements(&host, 0, &mut nested)
                .map_err(|_| Problem::Requirements { file: file.clone() })?;
            wanted.splice(i..=i, nested);
            continue;
        }
        i += 1;
    }
    let mut missing = Vec::new();
    for w in wanted {
        match w {
            Wanted::Local(spec) => return Err(Problem::PipLocalInstall { spec }),
            Wanted::Package(p) if HARNESS_ONLY.contains(&p.as_str()) => {}
            Wanted::Package(p) if !installed(kind, &p) => missing.push(p),
            _ => {}
        }
    }
    if missing.is_empty() {
        return Ok(false);
    }
    Err(Problem::MissingPackages {
        installer: kind,
        packages: missing,
    })
}

/// `pytest==8.4.1` → `pytest`; `git=1:2.39*` → `git`; `libfoo:amd64` → `libfoo`.
fn package_name(word: &str) -> String {
    let word = word.trim_matches(['"', '\'']);
    let end = word
        .find(['=', '<', '>', '~', '[', ';', '!', ' ', ':'])
        .unwrap_or(word.len());
    word[..end].to_string()
}

fn needs_network(cmd: &str) -> bool {
    cmd.split(|c: char| c.is_whitespace() || c == ';' || c == '|' || c == '&')
        .any(|w| matches!(w, "curl" | "wget") || w == "clone")
}

/// How many times this process listed the installed packages (once per package manager).
static PACKAGE_QUERIES: AtomicUsize = AtomicUsize::new(0);

/// PEP 503: `Foo_Bar.baz` and `foo-bar-baz` are one Python package.
fn normalize_pip(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut dash = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            dash = true;
        } else {
            if dash && !out.is_empty() {
                out.push('-');
            }
            dash = false;
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The Debian packages installed here, listed once.
fn apt_installed() -> &'static HashSet<String> {
    static APT: OnceLock<HashSet<String>> = OnceLock::new();
    APT.get_or_init(|| {
        PACKAGE_QUERIES.fetch_add(1, Ordering::Relaxed);
        let out = Command::new("dpkg-query")
            .args(["-W", "-f=${Package}\t${Status}\n"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let Ok(out) = out else {
            return HashSet::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .filter(|(_, status)| status.ends_with("installed") && status.contains(" ok "))
            .map(|(name, _)| name.split(':').next().unwrap_or(name).to_string())
            .collect()
    })
}

/// The Python distributions `python3` sees here, listed once (normalized names).
fn pip_installed() -> &'static HashSet<String> {
    static PIP: OnceLock<HashSet<String>> = OnceLock::new();
    PIP.get_or_init(|| {
        PACKAGE_QUERIES.fetch_add(1, Ordering::Relaxed);
        let out = Command::new("python3")
            .args([
                "-c",
                "import importlib.metadata as m\nfor d in m.distributions():\n    print(d.metadata['Name'] or '')",
            ])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let Ok(out) = out else {
            return HashSet::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(normalize_pip)
            .filter(|n| !n.is_empty())
            .collect()
    })
}

fn host_has_package(kind: Installer, name: &str) -> bool {
    match kind {
        Installer::Apt => apt_installed().contains(name),
        Installer::Pip => pip_installed().contains(&normalize_pip(name)),
    }
}

fn sh_quote(s: &str) -> String {
    shlex::try_quote(s)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| format!("'{s}'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only_git(kind: Installer, name: &str) -> bool {
        kind == Installer::Apt && name == "git"
    }

    #[test]
    fn generic_base_with_copies_becomes_a_script() {
        let text = "FROM python:3.13-slim-bookworm\nRUN apt-get update && apt-get install -y git \\\n  && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\nCOPY data.csv /app/data.csv\nENV MODE=fast\nRUN echo hi > note.txt\nCMD [\"bash\"]\n";
        let local = translate_inner(text, false, None, &only_git).unwrap();
        assert_eq!(local.workdir, "/app");
        assert_eq!(local.env["MODE"], "fast");
        assert!(local.script.contains("/environment/data.csv"));
        assert!(local.script.contains("echo hi > note.txt"));
        assert!(!local.script.contains("apt-get"));
    }

    /// Each RUN is its own shell with its own exit status, named by its line when it fails;
    /// SHELL and the exec form are honoured; new top-level folders written by RUN are kept.
    #[test]
    fn each_run_is_its_own_shell_and_names_its_line() {
        let text = "FROM debian\nRUN mkdir -p /data && echo hi > /data/a.txt\nSHELL [\"/bin/bash\", \"-c\"]\nRUN [[ -f /data/a.txt ]]\nRUN [\"/bin/touch\", \"/srv/x\"]\nRUN echo https://host/path >/dev/null\n";
        let local = translate_inner(text, false, None, &only_git).unwrap();
        assert!(
            local.script.contains(
                "/bin/sh -c 'mkdir -p /data && echo hi > /data/a.txt' || baton_run_failed 2 $? "
            ),
            "{}",
            local.script
        );
        assert!(
            local
                .script
                .contains("/bin/bash -c '[[ -f /data/a.txt ]]' || baton_run_failed 4 $? "),
            "{}",
            local.script
        );
        assert!(
            local
                .script
                .contains("/bin/touch /srv/x || baton_run_failed 5 $? "),
            "{}",
            local.script
        );
        assert_eq!(local.extra_roots, vec!["/data", "/srv"]);
        assert_eq!(
            run_roots(
                "cd /src; mkdir -p /build && PATH=/opt/x:/tools/bin make >/out.log; ls /usr/ /app/ /tmp/ http://h/x"
            ),
            vec!["/build", "/tools"]
        );
    }

    #[test]
    fn missing_packages_and_custom_images_are_reasons() {
        let err = translate_inner(
            "FROM ubuntu:24.04\nRUN apt-get install -y nginx git\n",
            true,
            None,
            &only_git,
        )
        .unwrap_err();
        assert_eq!(
            err.problem,
            Problem::MissingPackages {
                installer: Installer::Apt,
                packages: vec!["nginx".into()]
            }
        );
        assert_eq!(
            err.to_string(),
            "line 2: needs Debian packages not installed on this machine: nginx"
        );
        let err =
            translate_inner("FROM ghcr.io/acme/special:1\n", true, None, &only_git).unwrap_err();
        assert_eq!(err.line, Some(1));
        assert!(err.to_string().contains("ghcr.io/acme/special:1"), "{err}");
        let err = translate_inner(
            "FROM debian\nRUN curl -fsSL x | sh\n",
            false,
            None,
            &only_git,
        )
        .unwrap_err();
        assert!(
            matches!(err.problem, Problem::RunNeedsNetwork { .. }),
            "{err}"
        );
        let err = translate_inner("RUN true\n", true, None, &only_git).unwrap_err();
        assert_eq!((err.line, err.to_string().as_str()), (None, "no FROM line"));
    }

    fn lookup_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn variables_that_multiply_each_other_are_refused_not_expanded() {
        // Each line 16 times the last: 2^64 bytes by the end, were it expanded.
        let mut text = String::from("FROM python:3.13-slim-bookworm\nENV A0=xxxxxxxxxxxxxxxx\n");
        for i in 1..16 {
            text.push_str(&format!("ENV A{i}={}\n", format!("$A{}", i - 1).repeat(16)));
        }
        text.push_str("WORKDIR /app/${A15}\n");
        let err = translate_inner(&text, false, None, &only_git).unwrap_err();
        assert!(matches!(err.problem, Problem::ExpandsTooFar), "{err:?}");
        assert!(err.line.is_some_and(|l| l <= 8), "{err:?}");
        // Many lines, each under the cap, add up to it too.
        let big = "y".repeat(1 << 20);
        let mut text = String::from("FROM python:3.13-slim-bookworm\n");
        for i in 0..8 {
            text.push_str(&format!("ENV V{i}={big}\n"));
        }
        let err = translate_inner(&text, false, None, &only_git).unwrap_err();
        assert!(matches!(err.problem, Problem::ExpandsTooFar), "{err:?}");
        // ARGs before FROM count as well.
        let mut text = String::new();
        for i in 0..8 {
            text.push_str(&format!("ARG G{i}={big}\n"));
        }
        text.push_str("FROM python:3.13-slim-bookworm\n");
        let err = translate_inner(&text, false, None, &only_git).unwrap_err();
        assert!(matches!(err.problem, Problem::ExpandsTooFar), "{err:?}");
    }

    #[test]
    fn variable_references_follow_dockerfile_semantics() {
        let vars = lookup_of(&[("A", "x"), ("EMPTY", "")]);
        let one = |s: &str| expand_one(s, &vars).unwrap();
        assert_eq!(one("$A/${A}"), "x/x");
        assert_eq!(one("${NOPE:-d}|${EMPTY:-d}|${EMPTY-d}|${A:-d}"), "d|d||x");
        assert_eq!(
            one("${A:+set}|${NOPE:+set}|${EMPTY:+set}|${EMPTY+set}"),
            "set|||set"
        );
        assert_eq!(one("${NOPE:-${A}y}"), "xy");
        assert_eq!(one("'$A' \"$A\" \\$A $"), "$A x $A $");
        assert_eq!(one("cost: 5$"), "cost: 5$");
        assert!(matches!(
            expand_one("${NOPE:?must be set}", &vars),
            Err(Problem::UnsetVariable { name, message }) if name == "NOPE" && message == "must be set"
        ));
        assert!(matches!(
            expand_one("${A", &vars),
            Err(Problem::BadVariable(_))
        ));
        assert_eq!(
            expand_words("a=\"$A b\" c=${NOPE:-z}", &vars).unwrap(),
            vec!["a=x b", "c=z"]
        );
    }

    #[test]
    fn env_path_arg_workdir_and_copy_expand() {
        let text = "ARG BASE=python:3.12-slim\nFROM ${BASE}\nARG APP_DIR=/app/src\nARG NOVAL\nENV PATH=\"/root/.local/bin:${PATH}\" \\\n    HOME_BIN=$APP_DIR/bin\nENV LEGACY value with ${APP_DIR:+spaces}\nENV SAME=1 SAME_TOO=${SAME:-before}\nWORKDIR ${APP_DIR}\nCOPY data.csv ${APP_DIR}/data.csv\nRUN echo \"$APP_DIR\" > where.txt\n";
        let local = translate_inner(text, false, None, &only_git).unwrap();
        let host_path =
            std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
        assert_eq!(local.env["PATH"], format!("/root/.local/bin:{host_path}"));
        assert!(!local.env["PATH"].contains('$'));
        assert_eq!(local.env["HOME_BIN"], "/app/src/bin");
        assert_eq!(local.env["LEGACY"], "value with spaces");
        // Both pairs of one ENV see the variables as they were before it.
        assert_eq!(local.env["SAME_TOO"], "before");
        assert_eq!(local.workdir, "/app/src");
        assert!(
            local.script.contains("export APP_DIR=/app/src\n"),
            "{}",
            local.script
        );
        assert!(!local.script.contains("NOVAL"));
        assert!(
            local
                .script
                .contains("cp -a --no-preserve=ownership /environment/data.csv /app/src/data.csv"),
            "{}",
            local.script
        );
        assert!(!local.env.contains_key("APP_DIR"), "ARG is not ENV");
    }

    #[test]
    fn pip_options_with_values_are_not_packages() {
        let pip_only = |kind: Installer, name: &str| {
            kind == Installer::Pip && matches!(name, "pytest" | "requests" | "numpy")
        };
        let ok = [
            "pip install --retries 3 --timeout 60 pytest",
            "pip3 install --no-cache-dir -i https://pypi.org/simple --extra-index-url https://x.example/simple requests",
            "python3 -m pip install --trusted-host pypi.org --index-url=https://pypi.org/simple -c constraints.txt pytest==8.4.1",
            "pip install --break-system-packages --progress-bar off -U numpy>=1.26 'requests[socks]'",
            "uv pip install --system --python 3.12 pytest",
            "pip install -q tmux asciinema pytest",
        ];
        for run in ok {
            assert_eq!(
                strip_satisfied_installs(run, &pip_only, &|_| None),
                Ok(String::new()),
                "{run}"
            );
        }
        assert_eq!(
            strip_satisfied_installs("pip install --retries 3 flask", &pip_only, &|_| None),
            Err(Problem::MissingPackages {
                installer: Installer::Pip,
                packages: vec!["flask".into()]
            })
        );
        assert_eq!(
            strip_satisfied_installs("pip install -e .", &pip_only, &|_| None),
            Err(Problem::PipLocalInstall { spec: ".".into() })
        );
        assert_eq!(
            strip_satisfied_installs("pip install -r requirements.txt", &pip_only, &|_| None),
            Err(Problem::Requirements {
                file: "requirements.txt".into()
            })
        );
        // Separators are kept: `;` and `||` are not turned into `&&`.
        assert_eq!(
            strip_satisfied_installs(
                "pip install pytest; echo a || echo b && apt-get update",
                &pip_only,
                &|_| None
            ),
            Ok("echo a || echo b".to_string())
        );
    }

    #[test]
    fn requirements_files_are_read_from_the_build_context() {
        let ctx = tempfile::tempdir().unwrap();
        std::fs::write(
            ctx.path().join("requirements.txt"),
            "# pinned\npytest==8.4.1\n-r more.txt\n\nrequests>=2 ; python_version > '3'\n",
        )
        .unwrap();
        std::fs::write(ctx.path().join("more.txt"), "numpy\n").unwrap();
        let pip_only = |kind: Installer, name: &str| {
            kind == Installer::Pip && matches!(name, "pytest" | "requests" | "numpy")
        };
        let text = "FROM python:3.12\nWORKDIR /app\nCOPY requirements.txt more.txt ./\nRUN pip install --no-cache-dir -r requirements.txt\n";
        let local = translate_inner(text, false, Some(ctx.path()), &pip_only).unwrap();
        assert!(!local.script.contains("pip"), "{}", local.script);
        std::fs::write(ctx.path().join("more.txt"), "numpy\nflask\n").unwrap();
        let err = translate_inner(text, false, Some(ctx.path()), &pip_only).unwrap_err();
        assert_eq!(
            err.problem,
            Problem::MissingPackages {
                installer: Installer::Pip,
                packages: vec!["flask".into()]
            }
        );
        assert_eq!(err.line, Some(4));
    }

    #[test]
    fn copies_outside_app_become_trial_roots_and_folders_copy_their_contents() {
        let ctx = tempfile::tempdir().unwrap();
        std::fs::create_dir(ctx.path().join("workspace")).unwrap();
        let text = "FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y tmux asciinema git\nWORKDIR /workspace\nCOPY workspace/ ./\nCOPY seed.txt /data/in/\nCOPY x /root/x\n";
        let local = translate_inner(text, false, Some(ctx.path()), &only_git).unwrap();
        assert_eq!(local.extra_roots, vec!["/data", "/workspace"]);
        assert_eq!(local.workdir, "/workspace");
        assert!(
            local
                .script
                .contains("cp -a --no-preserve=ownership /environment/workspace/. /workspace/"),
            "{}",
            local.script
        );
        assert!(
            local
                .script
                .contains("cp -a --no-preserve=ownership /environment/seed.txt /data/in/"),
            "{}",
            local.script
        );
        for bad in [
            "COPY a /usr/\n",
            "WORKDIR /etc\n",
            "COPY t /tests/t\n",
            "COPY t /var/run/t\n",
            "COPY t /proc/t\n",
        ] {
            let err = translate_inner(&format!("FROM debian\n{bad}"), false, None, &only_git)
                .unwrap_err();
            assert!(
                matches!(
                    err.problem,
                    Problem::CopyOutsideApp { .. } | Problem::WorkdirOutsideApp { .. }
                ),
                "{bad}: {err}"
            );
        }
    }

    /// The mount for a path in a system folder is the first component the host lacks, or the
    /// path itself; `/bin` resolves through its link; top-level folders and `/var/run` never.
    #[test]
    fn system_mounts_start_where_the_host_stops() {
        let host = |p: &str| ["/usr", "/usr/local", "/usr/local/bin", "/etc", "/opt"].contains(&p);
        let m = |p: &str, file: bool| system_mount(p, file, &host);
        let at = |path: &str, file: bool| {
            Some(SystemMount {
                path: path.into(),
                file,
            })
        };
        assert_eq!(m("/opt/tool/bin/x", true), at("/opt/tool", false));
        assert_eq!(m("/usr/local/bin/x", true), at("/usr/local/bin/x", true));
        assert_eq!(m("/usr/local/bin", false), at("/usr/local/bin", false));
        assert_eq!(m("/etc/app.conf", true), at("/etc/app.conf", true));
        assert_eq!(m("/etc", false), None);
        assert_eq!(m("/var/run/x", true), None);
        assert_eq!(m("/proc/x", true), None);
        if std::fs::read_link("/bin")
            .is_ok_and(|t| t.to_string_lossy().trim_start_matches('/') == "usr/bin")
        {
            assert_eq!(m("/bin/tool", true), at("/usr/bin", false));
        }
        let kept = outermost(BTreeSet::from([
            SystemMount {
                path: "/opt/a".into(),
                file: false,
            },
            SystemMount {
                path: "/opt/a/b".into(),
                file: true,
            },
            SystemMount {
                path: "/opt/ab".into(),
                file: true,
            },
        ]));
        assert_eq!(
            kept.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(),
            ["/opt/a", "/opt/ab"]
        );
    }

    #[test]
    fn repository_setup_and_satisfied_alternatives_are_dropped() {
        let none = |_: Installer, _: &str| true;
        let run = "apt-get update && apt-get install -y software-properties-common && add-apt-repository ppa:deadsnakes/ppa && apt-key add k.asc && apt-get update";
        assert_eq!(
            strip_satisfied_installs(run, &none, &|_| None),
            Ok(String::new())
        );
        // /bin/sh → itself: already in place; a link to something else is kept.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let run = format!(
            "update-alternatives --install /bin/sh sh {} 1",
            sh.display()
        );
        assert_eq!(
            strip_satisfied_installs(&run, &none, &|_| None),
            Ok(String::new())
        );
        let run = "update-alternatives --install /bin/sh sh /nonexistent/sh 1";
        assert_eq!(
            strip_satisfied_installs(run, &none, &|_| None),
            Ok(run.to_string())
        );
    }

    #[test]
    fn installed_packages_are_listed_once_per_process() {
        for name in ["git", "no-such-package-xyz", "bash", "coreutils"] {
            let _ = host_has_package(Installer::Apt, name);
            let _ = host_has_package(Installer::Pip, name);
        }
        assert!(PACKAGE_QUERIES.load(Ordering::Relaxed) <= 2);
        assert!(!host_has_package(Installer::Pip, "no-such-package-xyz"));
        assert_eq!(normalize_pip("Foo_Bar.baz"), "foo-bar-baz");
    }
}
