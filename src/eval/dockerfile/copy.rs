//! COPY and ADD from the build context, and which host file a later RUN then reads.

use std::path::PathBuf;

use super::paths::{Root, absolute, root_of, system_mount};
use super::problem::Problem;
use super::translate::{Translation, host_exists, sh_quote};
use super::words::{expand_words, shell_words};

/// One source of a `COPY`, for finding which host file a later `RUN` reads.
pub(super) struct Copied {
    /// The destination folder (or file, when neither `into_dir` nor `contents`).
    dest: String,
    host: PathBuf,
    /// A folder whose contents land in `dest`.
    contents: bool,
    /// A file that lands in `dest/<its name>`.
    into_dir: bool,
}

/// The build-context file that the sandbox path `path` holds after the `COPY`s so far.
pub(super) fn host_file(copies: &[Copied], path: &str) -> Option<PathBuf> {
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

impl Translation<'_> {
    /// COPY or ADD (`instruction`): the build context is at `/environment` while the script
    /// runs; a destination outside the trial's own folders is a new top-level folder or a
    /// system mount.
    pub(super) fn copy(&mut self, instruction: &str, rest: &str) -> Result<(), Problem> {
        let lookup = |name: &str| self.lookup(name);
        let words = if rest.trim_start().starts_with('[') {
            shell_words(rest)?
        } else {
            expand_words(rest, &lookup)?
        };
        if words.iter().any(|w| w.starts_with("--from")) {
            return Err(Problem::CopyFromStage);
        }
        let paths: Vec<&String> = words.iter().filter(|w| !w.starts_with("--")).collect();
        let Some((dest, sources)) = paths.split_last().filter(|(_, s)| !s.is_empty()) else {
            return Err(Problem::CopyArguments {
                instruction: instruction.to_string(),
            });
        };
        let dest = absolute(&self.workdir, dest);
        let in_system = match root_of(&dest) {
            Root::System => {
                if system_mount(&dest, false, &host_exists).is_none() {
                    return Err(Problem::CopyOutsideApp {
                        instruction: instruction.to_string(),
                        dest,
                    });
                }
                true
            }
            Root::Extra(top) => {
                self.extra_roots.insert(top);
                false
            }
            Root::Trial => false,
        };
        for src in sources {
            self.copy_source(instruction, &dest, src, sources.len() > 1, in_system)?;
        }
        Ok(())
    }

    /// One source `src` of a COPY into `dest` (`many`: one of several sources).
    fn copy_source(
        &mut self,
        instruction: &str,
        dest: &str,
        src: &str,
        many: bool,
        in_system: bool,
    ) -> Result<(), Problem> {
        if src.contains("://") {
            return Err(Problem::CopyUrl {
                instruction: instruction.to_string(),
                url: src.to_string(),
            });
        }
        let rel = src.trim_start_matches("./").trim_end_matches('/');
        let rel = if rel.is_empty() { "." } else { rel };
        // Docker copies a folder's contents, never the folder itself.
        let src_is_dir =
            rel == "." || src.ends_with('/') || self.context.is_some_and(|c| c.join(rel).is_dir());
        let into_dir = dest.ends_with('/') || many || src_is_dir;
        let from = if rel == "." {
            "/environment".to_string()
        } else {
            format!("/environment/{rel}")
        };
        let dest_dir = dest.trim_end_matches('/');
        let dest_dir = if dest_dir.is_empty() { "/" } else { dest_dir };
        if in_system {
            self.mount_landed(instruction, dest, dest_dir, rel, src_is_dir, into_dir)?;
        }
        // COPY gives the files to root (no `--chown` here); the build context's owners need
        // not exist in the trial's user namespace (run by nobody).
        if src_is_dir {
            self.script.push_str(&format!(
                "mkdir -p {0}\ncp -a --no-preserve=ownership {1}/. {0}/\n",
                sh_quote(dest_dir),
                from
            ));
        } else if into_dir {
            self.script.push_str(&format!(
                "mkdir -p {0}\ncp -a --no-preserve=ownership {1} {0}/\n",
                sh_quote(dest_dir),
                from
            ));
        } else {
            self.script.push_str(&format!(
                "mkdir -p \"$(dirname {0})\"\ncp -a --no-preserve=ownership {1} {0}\n",
                sh_quote(dest),
                from
            ));
        }
        if let Some(ctx) = self.context {
            self.copies.push(Copied {
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
        Ok(())
    }

    /// The system mounts for what one source lands in a system folder: each entry of a copied
    /// folder, the file under its name, or the file at `dest`.
    fn mount_landed(
        &mut self,
        instruction: &str,
        dest: &str,
        dest_dir: &str,
        rel: &str,
        src_is_dir: bool,
        into_dir: bool,
    ) -> Result<(), Problem> {
        let host_src = self.context.map(|c| {
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
            landed.push((dest.to_string(), true));
        }
        for (path, file) in landed {
            match system_mount(&path, file, &host_exists) {
                Some(m) => {
                    self.system_mounts.insert(m);
                }
                None => {
                    return Err(Problem::CopyOutsideApp {
                        instruction: instruction.to_string(),
                        dest: path,
                    });
                }
            }
        }
        Ok(())
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
}
