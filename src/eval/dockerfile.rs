//! Turns a task's Dockerfile into a local setup script when it only needs what this machine has.
//!
//! TB tasks build on generic Debian/Ubuntu/Python images and mostly `COPY` fixtures into `/app`
//! and `RUN` a few commands. Those run as a setup script inside the trial sandbox, with package
//! installs dropped when the packages are already installed on the host. Anything else (a
//! bespoke base image, multi-stage builds, packages missing here) makes the task skipped, with
//! the reason.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

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

/// A Dockerfile rewritten as a setup script.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalEnv {
    pub script: String,
    pub workdir: String,
    pub env: BTreeMap<String, String>,
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
    #[error("WORKDIR {path} is outside /app, the only writable tree")]
    WorkdirOutsideApp { path: String },
    #[error("COPY --from needs a multi-stage Docker build")]
    CopyFromStage,
    #[error("{instruction} needs a source and a destination")]
    CopyArguments { instruction: String },
    #[error("{instruction} into {dest}, outside /app")]
    CopyOutsideApp { instruction: String, dest: String },
    #[error("{instruction} of a URL ({url}) needs the network at build time")]
    CopyUrl { instruction: String, url: String },
    #[error("RUN in JSON form is not supported")]
    RunJsonForm,
    /// The trial has no network and the command fetches something.
    #[error("RUN needs the network at build time: {command}")]
    RunNeedsNetwork { command: String },
    #[error("needs {} not installed on this machine: {}", installer.packages(), packages.join(", "))]
    MissingPackages {
        installer: Installer,
        packages: Vec<String>,
    },
    #[error("USER {user}: trials run as root")]
    User { user: String },
    #[error("unsupported instruction {0}")]
    Instruction(String),
    /// An exec-form (`["a", "b"]`) argument list that is not a JSON array of strings.
    #[error("bad JSON array: {0}")]
    JsonArray(String),
    #[error("unbalanced quotes in '{0}'")]
    UnbalancedQuotes(String),
}

/// Translates `text`. Build context files are visible at `/environment` while the script runs.
pub fn translate(text: &str, network: bool) -> DockerPlan {
    match translate_inner(text, network, &host_has_package) {
        Ok(local) => DockerPlan::Local(local),
        Err(reason) => DockerPlan::Unsupported(reason),
    }
}

fn translate_inner(
    text: &str,
    network: bool,
    installed: &dyn Fn(Installer, &str) -> bool,
) -> Result<LocalEnv, DockerfileError> {
    let mut script = String::from("set -e\nmkdir -p /app\ncd /app\n");
    let mut workdir = "/app".to_string();
    let mut env = BTreeMap::new();
    let mut seen_from = false;
    for (line_no, instruction) in logical_lines(text) {
        let (word, rest) = match instruction.split_once(char::is_whitespace) {
            Some((w, r)) => (w.to_ascii_uppercase(), r.trim().to_string()),
            None => (instruction.to_ascii_uppercase(), String::new()),
        };
        let at = |problem: Problem| DockerfileError {
            line: Some(line_no),
            problem,
        };
        match word.as_str() {
            "FROM" => {
                if seen_from {
                    return Err(at(Problem::MultiStage));
                }
                seen_from = true;
                let image = rest
                    .split_whitespace()
                    .find(|w| !w.starts_with("--"))
                    .unwrap_or("");
                let repo = image.split(['@']).next().unwrap_or("");
                let repo = match repo.rfind(':') {
                    Some(colon) if !repo[colon..].contains('/') => &repo[..colon],
                    _ => repo,
                };
                let repo = repo.strip_prefix("docker.io/").unwrap_or(repo);
                let repo = repo.strip_prefix("library/").unwrap_or(repo);
                if !GENERIC_BASES.contains(&repo) {
                    return Err(at(Problem::Image {
                        image: image.to_string(),
                    }));
                }
            }
            "WORKDIR" => {
                let path = if rest.starts_with('/') {
                    rest.clone()
                } else {
                    format!("{}/{}", workdir.trim_end_matches('/'), rest)
                };
                if path != "/app" && !path.starts_with("/app/") {
                    return Err(at(Problem::WorkdirOutsideApp { path }));
                }
                script.push_str(&format!("mkdir -p {0}\ncd {0}\n", sh_quote(&path)));
                workdir = path;
            }
            "COPY" | "ADD" => {
                let words = shell_words(&rest).map_err(&at)?;
                if words.iter().any(|w| w.starts_with("--from")) {
                    return Err(at(Problem::CopyFromStage));
                }
                let paths: Vec<&String> = words.iter().filter(|w| !w.starts_with("--")).collect();
                let Some((dest, sources)) = paths.split_last().filter(|(_, s)| !s.is_empty())
                else {
                    return Err(at(Problem::CopyArguments { instruction: word }));
                };
                let dest = if dest.starts_with('/') {
                    dest.to_string()
                } else {
                    format!("{}/{}", workdir.trim_end_matches('/'), dest)
                };
                if dest != "/app" && !dest.starts_with("/app/") {
                    return Err(at(Problem::CopyOutsideApp {
                        instruction: word,
                        dest,
                    }));
                }
                for src in sources {
                    if src.contains("://") {
                        return Err(at(Problem::CopyUrl {
                            instruction: word,
                            url: src.to_string(),
                        }));
                    }
                    let into_dir = dest.ends_with('/') || sources.len() > 1 || src.as_str() == ".";
                    let from = if src.as_str() == "." {
                        "/environment/.".to_string()
                    } else {
                        format!("/environment/{}", src.trim_start_matches("./"))
                    };
                    if into_dir {
                        script.push_str(&format!(
                            "mkdir -p {0}\ncp -a {1} {0}/\n",
                            sh_quote(dest.trim_end_matches('/')),
                            from
                        ));
                    } else {
                        script.push_str(&format!(
                            "mkdir -p \"$(dirname {0})\"\nif [ -d {1} ]; then mkdir -p {0} && cp -a {1}/. {0}/; else cp -a {1} {0}; fi\n",
                            sh_quote(&dest),
                            from
                        ));
                    }
                }
            }
            "ENV" => {
                for (k, v) in parse_env(&rest).map_err(&at)? {
                    script.push_str(&format!("export {k}={}\n", sh_quote(&v)));
                    env.insert(k, v);
                }
            }
            "ARG" => {
                if let Some((k, v)) = rest.split_once('=') {
                    script.push_str(&format!(
                        "{}={}\n",
                        k.trim(),
                        sh_quote(v.trim().trim_matches('"'))
                    ));
                }
            }
            "RUN" => {
                if rest.starts_with('[') {
                    return Err(at(Problem::RunJsonForm));
                }
                let kept = strip_satisfied_installs(&rest, installed).map_err(&at)?;
                if !network && needs_network(&kept) {
                    return Err(at(Problem::RunNeedsNetwork { command: kept }));
                }
                if !kept.trim().is_empty() {
                    script.push_str(&kept);
                    script.push('\n');
                }
            }
            "USER" => {
                if rest != "root" && rest != "0" {
                    return Err(at(Problem::User { user: rest }));
                }
            }
            "CMD" | "ENTRYPOINT" | "LABEL" | "EXPOSE" | "VOLUME" | "SHELL" | "HEALTHCHECK"
            | "STOPSIGNAL" | "MAINTAINER" | "ONBUILD" => {}
            other => return Err(at(Problem::Instruction(other.to_string()))),
        }
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
        env,
    })
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

fn parse_env(rest: &str) -> Result<Vec<(String, String)>, Problem> {
    let words = shell_words(rest)?;
    if words.first().is_some_and(|w| !w.contains('=')) {
        // Legacy form: ENV KEY value with spaces
        let key = words[0].clone();
        let value = rest.trim_start()[key.len()..].trim().to_string();
        return Ok(vec![(key, value)]);
    }
    Ok(words
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

/// Drops `apt-get update`, installs of packages already present, and apt cache cleanup from a
/// `&&`-chain. An install of a missing package is an error naming the packages.
fn strip_satisfied_installs(
    run: &str,
    installed: &dyn Fn(Installer, &str) -> bool,
) -> Result<String, Problem> {
    let mut kept = Vec::new();
    for segment in run.split("&&") {
        let seg = segment.trim();
        let words: Vec<&str> = seg.split_whitespace().collect();
        let first = words
            .iter()
            .position(|w| !w.contains('=') || w.starts_with('-'))
            .unwrap_or(0);
        let cmd = &words[first.min(words.len())..];
        let is_apt = matches!(cmd.first(), Some(&"apt-get") | Some(&"apt"));
        let pip_at = cmd
            .iter()
            .position(|w| *w == "pip" || *w == "pip3" || w.ends_with("/pip"));
        let is_pip = pip_at.is_some() || (cmd.len() > 2 && cmd[1] == "-m" && cmd[2] == "pip");
        if is_apt
            && cmd
                .iter()
                .any(|w| *w == "update" || *w == "clean" || *w == "autoremove")
        {
            continue;
        }
        if seg.starts_with("rm -rf /var/lib/apt/lists") {
            continue;
        }
        let installer = if is_apt {
            Some(Installer::Apt)
        } else if is_pip {
            Some(Installer::Pip)
        } else {
            None
        };
        if let Some(kind) = installer
            && let Some(at) = cmd.iter().position(|w| *w == "install")
        {
            let pkgs: Vec<String> = cmd[at + 1..]
                .iter()
                .filter(|w| !w.starts_with('-'))
                .map(|w| package_name(w))
                .filter(|w| !w.is_empty())
                .collect();
            let missing: Vec<&String> = pkgs.iter().filter(|p| !installed(kind, p)).collect();
            if missing.is_empty() {
                continue;
            }
            return Err(Problem::MissingPackages {
                installer: kind,
                packages: missing.into_iter().cloned().collect(),
            });
        }
        kept.push(seg.to_string());
    }
    Ok(kept.join(" && "))
}

/// `pytest==8.4.1` → `pytest`; `git=1:2.39*` → `git`.
fn package_name(word: &str) -> String {
    let end = word
        .find(['=', '<', '>', '~', '[', ';', '!'])
        .unwrap_or(word.len());
    word[..end].trim_matches(['"', '\'']).to_string()
}

fn needs_network(cmd: &str) -> bool {
    cmd.split(|c: char| c.is_whitespace() || c == ';' || c == '|' || c == '&')
        .any(|w| matches!(w, "curl" | "wget") || w == "clone")
}

fn host_has_package(kind: Installer, name: &str) -> bool {
    let status = match kind {
        Installer::Apt => Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", name])
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed")),
        Installer::Pip => Command::new("python3")
            .args(["-m", "pip", "show", "-q", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success()),
    };
    status.unwrap_or(false)
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
        let local = translate_inner(text, false, &only_git).unwrap();
        assert_eq!(local.workdir, "/app");
        assert_eq!(local.env["MODE"], "fast");
        assert!(local.script.contains("/environment/data.csv"));
        assert!(local.script.contains("echo hi > note.txt"));
        assert!(!local.script.contains("apt-get"));
    }

    #[test]
    fn missing_packages_and_custom_images_are_reasons() {
        let err = translate_inner(
            "FROM ubuntu:24.04\nRUN apt-get install -y nginx git\n",
            true,
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
        let err = translate_inner("FROM ghcr.io/acme/special:1\n", true, &only_git).unwrap_err();
        assert_eq!(err.line, Some(1));
        assert!(err.to_string().contains("ghcr.io/acme/special:1"), "{err}");
        let err =
            translate_inner("FROM debian\nRUN curl -fsSL x | sh\n", false, &only_git).unwrap_err();
        assert!(
            matches!(err.problem, Problem::RunNeedsNetwork { .. }),
            "{err}"
        );
        let err = translate_inner("RUN true\n", true, &only_git).unwrap_err();
        assert_eq!((err.line, err.to_string().as_str()), (None, "no FROM line"));
    }
}
