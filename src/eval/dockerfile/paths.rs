//! Where a path a Dockerfile writes lands in a trial: its folders, a new top-level one, a mount.

use std::collections::BTreeSet;

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
pub(super) fn system_mount(
    path: &str,
    file: bool,
    host_exists: &dyn Fn(&str) -> bool,
) -> Option<SystemMount> {
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
pub(super) fn outermost(mounts: BTreeSet<SystemMount>) -> Vec<SystemMount> {
    let all: Vec<SystemMount> = mounts.into_iter().collect();
    all.iter()
        .filter(|m| {
            !all.iter()
                .any(|o| !o.file && o.path != m.path && m.path.starts_with(&format!("{}/", o.path)))
        })
        .cloned()
        .collect()
}

/// Where a sandbox path lives in a trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Root {
    /// `/app`, `/root`, `/tmp`: the trial's own folders.
    Trial,
    /// A new top-level folder, writable in the trial.
    Extra(String),
    /// A host system folder or one of the trial's reserved mounts.
    System,
}

pub(super) fn root_of(path: &str) -> Root {
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
pub(super) fn absolute(dir: &str, rel: &str) -> String {
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

/// The most top-level folders a Dockerfile's `RUN` lines add to a trial.
pub(super) const MAX_RUN_ROOTS: usize = 16;

/// The new top-level folders (`/data`, `/srv`) that absolute paths in a `RUN` command name:
/// a path starts the command or follows a blank, `=`, `:`, a quote, `(` or `>`; `/usr`, `/app`
/// and the other folders a trial already has are not new.
pub(super) fn run_roots(command: &str) -> Vec<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
