//! The translation itself: the state the instructions build up, and one step per instruction.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::LocalEnv;
use super::copy::Copied;
use super::image::{is_generic_base, only_starts_the_command};
use super::installs::Installer;
use super::paths::{Root, SystemMount, absolute, outermost, root_of, system_mount};
use super::problem::{DockerfileError, Problem};
use super::words::{
    MAX_EXPANDED, expand_one, expand_words, logical_lines, parse_env, shell_words, valid_name,
};

/// The variables a Dockerfile instruction sees: `ENV` over `ARG` over the base image's.
pub(super) struct Vars {
    base: BTreeMap<String, String>,
    pub(super) args: BTreeMap<String, String>,
    pub(super) env: BTreeMap<String, String>,
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

/// A Dockerfile being translated: the script so far, and what the instructions before the
/// current one set.
pub(super) struct Translation<'a> {
    pub(super) network: bool,
    pub(super) context: Option<&'a Path>,
    pub(super) installed: &'a dyn Fn(Installer, &str) -> bool,
    pub(super) script: String,
    pub(super) shell: Vec<String>,
    pub(super) workdir: String,
    pub(super) vars: Vars,
    /// ARGs declared before FROM: usable in FROM, and as defaults of a later bare `ARG NAME`.
    pub(super) global_args: BTreeMap<String, String>,
    pub(super) global_bytes: usize,
    pub(super) extra_roots: BTreeSet<String>,
    pub(super) copies: Vec<Copied>,
    pub(super) seen_from: bool,
    pub(super) last_user: Option<String>,
    pub(super) system_mounts: BTreeSet<SystemMount>,
}

/// Translates `text`, each instruction a step; `installed` says which packages this machine
/// has (the tests give their own).
pub(super) fn translate_inner(
    text: &str,
    network: bool,
    context: Option<&Path>,
    installed: &dyn Fn(Installer, &str) -> bool,
) -> Result<LocalEnv, DockerfileError> {
    let mut translation = Translation::new(network, context, installed);
    for (line_no, instruction) in logical_lines(text) {
        translation
            .instruction(line_no, &instruction)
            .map_err(|problem| DockerfileError {
                line: Some(line_no),
                problem,
            })?;
    }
    translation.finish()
}

impl<'a> Translation<'a> {
    fn new(
        network: bool,
        context: Option<&'a Path>,
        installed: &'a dyn Fn(Installer, &str) -> bool,
    ) -> Self {
        // Each RUN is its own `/bin/sh -c` (or the SHELL's) with its own exit status, as in a
        // Docker build: a failure inside an `&&` chain fails the build, `false; echo ok` does
        // not. The first RUN that fails ends the setup, naming its line in setup.log.
        let script = String::from(
            "set -e\nbaton_run_failed() { echo \"baton: the Dockerfile's line $1 failed with exit status $2: $3\" >&2; exit \"$2\"; }\nmkdir -p /app\ncd /app\n",
        );
        Translation {
            network,
            context,
            installed,
            script,
            shell: vec!["/bin/sh".into(), "-c".into()],
            workdir: "/app".to_string(),
            vars: Vars {
                base: base_vars(),
                args: BTreeMap::new(),
                env: BTreeMap::new(),
            },
            global_args: BTreeMap::new(),
            global_bytes: 0,
            extra_roots: BTreeSet::new(),
            copies: Vec::new(),
            seen_from: false,
            last_user: None,
            system_mounts: BTreeSet::new(),
        }
    }

    /// What `$name` is for the instruction at hand: before FROM, only the global ARGs exist.
    pub(super) fn lookup(&self, name: &str) -> Option<String> {
        if self.seen_from {
            self.vars.get(name)
        } else {
            self.global_args.get(name).cloned()
        }
    }

    /// Translates the instruction on line `line_no`.
    fn instruction(&mut self, line_no: usize, instruction: &str) -> Result<(), Problem> {
        let (word, rest) = match instruction.split_once(char::is_whitespace) {
            Some((w, r)) => (w.to_ascii_uppercase(), r.trim().to_string()),
            None => (instruction.to_ascii_uppercase(), String::new()),
        };
        match word.as_str() {
            "FROM" => self.from(&rest)?,
            "ARG" => self.arg(&rest)?,
            "WORKDIR" => self.change_workdir(&rest)?,
            "COPY" | "ADD" => self.copy(&word, &rest)?,
            "ENV" => self.env(&rest)?,
            "RUN" => self.run(line_no, &rest)?,
            "SHELL" => self.set_shell(&rest)?,
            "USER" => self.user(&rest)?,
            "ENTRYPOINT" => self.entrypoint(&rest)?,
            "CMD" | "LABEL" | "EXPOSE" | "VOLUME" | "HEALTHCHECK" | "STOPSIGNAL" | "MAINTAINER"
            | "ONBUILD" => {}
            other => return Err(Problem::Instruction(other.to_string())),
        }
        // The script holds every value the variables took (each ENV and ARG is exported).
        continue_checks(&self.script, self.global_bytes)
    }

    /// FROM: one stage only, on a base image this machine stands in for.
    fn from(&mut self, rest: &str) -> Result<(), Problem> {
        if self.seen_from {
            return Err(Problem::MultiStage);
        }
        let lookup = |name: &str| self.lookup(name);
        let words = expand_words(rest, &lookup)?;
        self.seen_from = true;
        let image = words
            .iter()
            .find(|w| !w.starts_with("--"))
            .map(String::as_str)
            .unwrap_or("");
        if !is_generic_base(image) {
            return Err(Problem::Image {
                image: image.to_string(),
            });
        }
        Ok(())
    }

    /// ARG: before FROM a global default; after it an exported variable, with its default or
    /// the global one (no build arguments are given).
    fn arg(&mut self, rest: &str) -> Result<(), Problem> {
        let lookup = |name: &str| self.lookup(name);
        for w in expand_words(rest, &lookup)? {
            let (name, value) = match w.split_once('=') {
                Some((k, v)) => (k.to_string(), Some(v.to_string())),
                None => (w.clone(), None),
            };
            if !self.seen_from {
                if let Some(v) = value {
                    self.global_bytes = self.global_bytes.saturating_add(v.len());
                    self.global_args.insert(name, v);
                }
                continue;
            }
            // No build arguments are given: the default, or the global one.
            let Some(v) = value.or_else(|| self.global_args.get(&name).cloned()) else {
                continue;
            };
            if valid_name(&name) {
                self.script
                    .push_str(&format!("export {name}={}\n", sh_quote(&v)));
                self.vars.args.insert(name, v);
            }
        }
        Ok(())
    }

    /// WORKDIR: made and entered; a folder outside the trial's own is a new top-level folder
    /// or a system mount.
    fn change_workdir(&mut self, rest: &str) -> Result<(), Problem> {
        let lookup = |name: &str| self.lookup(name);
        let path = expand_one(rest, &lookup)?;
        let path = absolute(&self.workdir, &path);
        let path = path.trim_end_matches('/').to_string();
        let path = if path.is_empty() { "/".into() } else { path };
        match root_of(&path) {
            Root::System => match system_mount(&path, false, &host_exists) {
                Some(m) => {
                    self.system_mounts.insert(m);
                }
                None => return Err(Problem::WorkdirOutsideApp { path }),
            },
            Root::Extra(top) => {
                self.extra_roots.insert(top);
            }
            Root::Trial => {}
        }
        self.script
            .push_str(&format!("mkdir -p {0}\ncd {0}\n", sh_quote(&path)));
        self.workdir = path;
        Ok(())
    }

    /// ENV: exported, and seen by the instructions after it.
    fn env(&mut self, rest: &str) -> Result<(), Problem> {
        let lookup = |name: &str| self.lookup(name);
        for (k, v) in parse_env(rest, &lookup)? {
            if !valid_name(&k) {
                continue;
            }
            self.script
                .push_str(&format!("export {k}={}\n", sh_quote(&v)));
            self.vars.env.insert(k, v);
        }
        Ok(())
    }

    /// SHELL: what the RUN lines after it run with.
    fn set_shell(&mut self, rest: &str) -> Result<(), Problem> {
        let words = shell_words(rest)?;
        if !rest.trim_start().starts_with('[') || words.is_empty() {
            return Err(Problem::JsonArray(format!(
                "SHELL needs a JSON array: {rest}"
            )));
        }
        self.shell = words;
        Ok(())
    }

    /// USER: the RUN lines after it still run as root here (the setup phase has one user); the
    /// agent and verifier phases run as this user.
    fn user(&mut self, rest: &str) -> Result<(), Problem> {
        let lookup = |name: &str| self.lookup(name);
        let user = expand_one(rest, &lookup)?;
        let name = user.split(':').next().unwrap_or_default().to_string();
        self.last_user = (name != "root" && name != "0" && !name.is_empty()).then_some(user);
        Ok(())
    }

    /// ENTRYPOINT: Harbor starts the container with its own command (`sleep infinity`), so a
    /// CMD never runs; an ENTRYPOINT does, before it: a script that starts a service or edits
    /// /etc/hosts. Trials have no container start: such a task is skipped, never scored
    /// without what its entrypoint set up.
    fn entrypoint(&mut self, rest: &str) -> Result<(), Problem> {
        let words = shell_words(rest)?;
        if !only_starts_the_command(&words) {
            return Err(Problem::Entrypoint {
                command: rest.chars().take(200).collect(),
            });
        }
        Ok(())
    }

    /// The setup script and what it leaves the trial, once every line is translated.
    fn finish(self) -> Result<LocalEnv, DockerfileError> {
        if !self.seen_from {
            return Err(DockerfileError {
                line: None,
                problem: Problem::NoFrom,
            });
        }
        Ok(LocalEnv {
            script: self.script,
            workdir: self.workdir,
            env: self.vars.env,
            extra_roots: self.extra_roots.into_iter().collect(),
            system_mounts: outermost(self.system_mounts),
            user: self.last_user,
        })
    }
}

/// Whether this machine has something at `path`.
pub(super) fn host_exists(path: &str) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The bound on what the variables expand to, checked after each instruction.
fn continue_checks(script: &str, global_bytes: usize) -> Result<(), Problem> {
    if script.len().saturating_add(global_bytes) > MAX_EXPANDED {
        return Err(Problem::ExpandsTooFar);
    }
    Ok(())
}

pub(super) fn sh_quote(s: &str) -> String {
    shlex::try_quote(s)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| format!("'{s}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::dockerfile::installs::Installer;

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
}
