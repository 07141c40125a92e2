//! Package installs in a RUN: which are satisfied here (dropped), which are missing (refused).

use std::path::{Path, PathBuf};

use super::problem::Problem;

/// Packages every TB1 Dockerfile installs for the harness (its tmux session and recorder), not
/// for the task: a trial here has no tmux pane, so their absence does not block a task.
const HARNESS_ONLY: &[&str] = &["tmux", "asciinema"];

/// The package manager of an install command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Installer {
    Apt,
    Pip,
}

impl Installer {
    pub(super) fn packages(self) -> &'static str {
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
pub(super) fn strip_satisfied_installs(
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

pub(super) fn needs_network(cmd: &str) -> bool {
    cmd.split(|c: char| c.is_whitespace() || c == ';' || c == '|' || c == '&')
        .any(|w| matches!(w, "curl" | "wget") || w == "clone")
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
