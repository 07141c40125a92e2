//! RUN: each its own shell with its own exit status, installs already satisfied here dropped.

use super::copy::host_file;
use super::installs::{needs_network, strip_satisfied_installs};
use super::paths::{MAX_RUN_ROOTS, absolute, run_roots};
use super::problem::Problem;
use super::translate::{Translation, sh_quote};

impl Translation<'_> {
    /// RUN on line `line_no`: a failure ends the setup, naming the line.
    pub(super) fn run(&mut self, line_no: usize, rest: &str) -> Result<(), Problem> {
        let shown: String = rest.chars().take(200).collect();
        let fail = format!(
            " || baton_run_failed {line_no} $? {}\n",
            sh_quote(&format!("RUN {shown}"))
        );
        // The exec form: a JSON array of the words themselves, run with no shell (anything
        // else starting with `[`, such as `[[ -f x ]]`, is shell form).
        let exec_form = rest
            .starts_with('[')
            .then(|| serde_json::from_str::<Vec<String>>(rest).ok())
            .flatten();
        if let Some(words) = exec_form {
            return self.run_exec_form(&words, &fail);
        }
        let files = |sandbox: &str| host_file(&self.copies, &absolute(&self.workdir, sandbox));
        let kept = strip_satisfied_installs(rest, self.installed, &files)?;
        if !self.network && needs_network(&kept) {
            return Err(Problem::RunNeedsNetwork { command: kept });
        }
        if !kept.trim().is_empty() {
            // A new top-level folder the command writes (`mkdir /data && … > /data/x`) is a
            // folder of the trial, kept for every phase as in the image.
            self.add_run_roots(&kept);
            let quoted: Vec<String> = self.shell.iter().map(|w| sh_quote(w)).collect();
            self.script
                .push_str(&format!("{} {}", quoted.join(" "), sh_quote(&kept)));
            self.script.push_str(&fail);
        }
        Ok(())
    }

    /// RUN's exec form: `words` run as they are, `fail` after them.
    fn run_exec_form(&mut self, words: &[String], fail: &str) -> Result<(), Problem> {
        if words.is_empty() {
            return Err(Problem::RunJsonForm);
        }
        let command = words.join(" ");
        if !self.network && needs_network(&command) {
            return Err(Problem::RunNeedsNetwork { command });
        }
        self.add_run_roots(&command);
        let quoted: Vec<String> = words.iter().map(|w| sh_quote(w)).collect();
        self.script.push_str(&quoted.join(" "));
        self.script.push_str(fail);
        Ok(())
    }

    /// The new top-level folders `command` writes, while there are fewer than
    /// [`MAX_RUN_ROOTS`].
    fn add_run_roots(&mut self, command: &str) {
        for top in run_roots(command) {
            if self.extra_roots.len() < MAX_RUN_ROOTS || self.extra_roots.contains(&top) {
                self.extra_roots.insert(top);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::dockerfile::installs::Installer;
    use crate::eval::dockerfile::translate::translate_inner;

    fn only_git(kind: Installer, name: &str) -> bool {
        kind == Installer::Apt && name == "git"
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
}
