//! The packages installed on this machine, listed once per process.

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::installs::Installer;

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

/// `name` from a PATH entry outside the temp folders and the folder baton started in (it runs
/// outside every sandbox, like the container runtime), started from `/`.
fn host_command(name: &str) -> Option<Command> {
    let roots = crate::protocol::host_programs::startup_roots();
    let program = crate::protocol::host_programs::find_program(name, &roots)?;
    let mut cmd = Command::new(program);
    cmd.current_dir("/");
    Some(cmd)
}

/// The Debian packages installed here, listed once.
fn apt_installed() -> &'static HashSet<String> {
    static APT: OnceLock<HashSet<String>> = OnceLock::new();
    APT.get_or_init(|| {
        PACKAGE_QUERIES.fetch_add(1, Ordering::Relaxed);
        let Some(mut cmd) = host_command("dpkg-query") else {
            return HashSet::new();
        };
        let out = cmd
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
        let Some(mut cmd) = host_command("python3") else {
            return HashSet::new();
        };
        // `-I`: no working folder or user site on the module path and no `PYTHON*`
        // variables, so no module a task or a command left is imported here.
        let out = cmd
            .args([
                "-I",
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

pub(super) fn host_has_package(kind: Installer, name: &str) -> bool {
    match kind {
        Installer::Apt => apt_installed().contains(name),
        Installer::Pip => pip_installed().contains(&normalize_pip(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
